/*
 * fzk.h - declarations shared by the CUDA backend's host files (C) and its
 * kernels (CUDA): the chain descriptor a kernel receives, the quantizer
 * parameters the device computes, the CRC-32C tables, and the launchers.
 *
 * Every launcher enqueues on the given stream and returns the cudaError_t of
 * the launch as an int (0 on success); none of them synchronises.
 */
#ifndef FZK_H
#define FZK_H

#include <stddef.h>
#include <stdint.h>

#include "fz.h"
#include "fz_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads of every chunk kernel: one block owns one chunk. */
#define FZK_NT 256
/* A block checksums FZK_NT segments of FZK_CRC_SEG bytes.  132 bytes = 33
 * words, so thread t's k-th byte sits in bank (t + k/4) mod 32: the threads
 * of a warp never share a bank. */
#define FZK_CRC_SEG 132u
#define FZK_CRC_SPAN (FZK_NT * FZK_CRC_SEG)
/* The CRC tables in device memory: the byte table, the per-thread shift
 * factors x^(8*SEG*(NT-1-t)), and x^(8*SPAN*2^k) for combining blocks. */
#define FZK_CRC_TAB_WORDS (256 + FZK_NT + 64)

/* A chain as a kernel sees it (passed by value). */
typedef struct fzk_desc {
  uint8_t nst;          /* stages */
  uint8_t w;            /* element width: 1, 2, 4, 8 */
  uint8_t fkind;        /* 0: integers, 1: f32, 2: f64 */
  uint8_t has_quant;    /* st[0] is quant */
  uint8_t id[8], mode[8], levels[8];
  uint32_t cb;          /* input bytes per chunk */
  uint32_t cap;         /* bytes of each shared stream buffer */
  uint32_t tcap;        /* bytes of the shared bitmap / table area */
  uint32_t smem;        /* dynamic shared memory of the chunk kernels */
  uint64_t raw_bytes, nchunks;
} fzk_desc;

/* The quantizer's parameters for one job, resolved on the device. */
typedef struct fzk_qparams {
  double eb_abs, step, inv;
} fzk_qparams;

/* Host-computed CRC tables (FZK_CRC_TAB_WORDS words) uploaded once. */
void fzk_crc_tables(uint32_t *tab);
/* Shared memory the chunk kernels need for a chunk size. */
void fzk_desc_layout(fzk_desc *d);
/* Raises the kernels' dynamic shared memory limit to d->smem. */
int fzk_kernels_init(const fzk_desc *d);

/* Minimum and maximum of the finite values (skipped for PWREL), then the
 * quantizer parameters (fzo_quant_params) into *d_qp.  d_part holds
 * 2 * FZK_MM_BLOCKS doubles. */
#define FZK_MM_BLOCKS 1024u
int fzk_launch_qparams(const fzk_desc *d, const void *d_in, uint64_t n,
                       unsigned mode, double eb, double *d_part,
                       fzk_qparams *d_qp, fz_gpu_stream s);

/* One block per chunk runs the whole chain; chunk i's coded bytes go to
 * d_stage + i * cb, its length to d_sizes[i], its CRC-32C to d_crcs[i]. */
int fzk_launch_encode(const fzk_desc *d, const void *d_in, int in_vec,
                      const fzk_qparams *d_qp, const uint32_t *d_tab,
                      uint8_t *d_stage, uint32_t *d_sizes, uint32_t *d_crcs,
                      fz_gpu_stream s);

/* Exclusive prefix sums of n sizes (u32 words, or little-endian u16 when
 * d_sizes16 is given) into d_offs[0..n]; d_offs[n] is the total.  d_bsum
 * holds fzk_scan_blocks(n) + 1 words. */
uint64_t fzk_scan_blocks(uint64_t n);
int fzk_launch_scan(uint64_t n, const uint32_t *d_sizes32,
                    const uint8_t *d_sizes16, uint64_t *d_bsum,
                    uint64_t *d_offs, fz_gpu_stream s);

/* Copies the staged chunks to their places in the archive and writes the
 * chunk table; nothing is written at or beyond out_cap. */
int fzk_launch_gather(const fzk_desc *d, const uint8_t *d_stage,
                      const uint32_t *d_sizes, const uint64_t *d_offs,
                      uint8_t *d_out, uint64_t out_cap, uint64_t header_len,
                      uint64_t table_off, fz_gpu_stream s);

/* Copies the header template (tpl_len bytes) to d_out and patches the
 * quantizer's eb_abs and step at q_off (0: no quant stage) from *d_qp. */
int fzk_launch_header(const uint8_t *d_tpl, uint64_t tpl_len, uint64_t q_off,
                      const fzk_qparams *d_qp, uint8_t *d_out,
                      fz_gpu_stream s);

/* CRC-32C of len bytes at d_p.  d_parts holds fzk_crc_parts(len) words.
 * The result goes, little-endian, to d_dst_le when that is not NULL; when
 * d_status is not NULL a result other than `expect` sets it to 1; when
 * d_total is not NULL, *d_total = *d_end + add. */
uint64_t fzk_crc_parts(uint64_t len);
int fzk_launch_crc(const uint8_t *d_p, uint64_t len, uint32_t *d_parts,
                   const uint32_t *d_tab, uint8_t *d_dst_le,
                   uint32_t *d_status, uint32_t expect, uint64_t *d_total,
                   const uint64_t *d_end, uint64_t add, fz_gpu_stream s);

/* One block per chunk decodes the payload (d_pay, pay_len bytes; chunk i at
 * d_offs[i], d_sizes16 the archive's table) into d_out; CRCs of the coded
 * chunks to d_crcs; any corruption sets *d_status to 1. */
int fzk_launch_decode(const fzk_desc *d, const uint8_t *d_pay,
                      uint64_t pay_len, const uint64_t *d_offs,
                      const uint8_t *d_sizes16, fzk_qparams qp,
                      const uint32_t *d_tab, void *d_out, int out_vec,
                      uint32_t *d_crcs, uint32_t *d_status, fz_gpu_stream s);

#ifdef __cplusplus
}
#endif
#endif
