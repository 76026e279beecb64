/*
 * launch.h - the launchers of the built-in kernels (the .cu files of stages/) and the
 * host's side of their set-up (crc_tables.c).
 *
 * Every launcher enqueues on the given stream and returns the cudaError_t of
 * the launch as an int (0 on success); none of them synchronises.
 */
#ifndef FZK_LAUNCH_H
#define FZK_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#include "fz_gpu.h"
#include "fzk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Host-computed CRC tables (FZK_CRC_TAB_WORDS words) uploaded once. */
void fzk_crc_tables(uint32_t *tab);
/* Shared memory the chunk kernels need for a chunk size (d->k32 set). */
void fzk_desc_layout(fzk_desc *d);
void fzk_desc_layout32(fzk_desc *d); /* the word kernels' (chain64's for w == 8) */
void fzk_desc_layout64(fzk_desc *d);
/* Raises the kernels' dynamic shared memory limits to what d needs. */
int fzk_kernels_init(const fzk_desc *d);
/* cudaSuccess (0) when this build's kernels can run on the current device,
 * else the runtime's error (cudaErrorNoKernelImageForDevice...). */
int fzk_kernels_probe(void);
int fzk_kernels32_init(const fzk_desc *d); /* both word sizes' */
int fzk_kernels64_init(const fzk_desc *d);
/* The coders chain64.cu has kernels for: bit k set for k32 == k. */
unsigned fzk_chain64_coders(void);

/* The first kernel of a compression (fzk_prep above). */
int fzk_launch_prep(const fzk_kern *k, const fzk_desc *d, const fzk_prep *p, fz_gpu_stream s);

/* One block per chunk runs the whole chain; chunk i's coded bytes go to
 * d_stage + i * cb, its length to d_sizes[i]; the place kernel moves them
 * into the archive.  jit_fn: the generated kernel for d's chain (a
 * CUfunction, jit.h), or NULL for the ahead-of-time one. */
int fzk_launch_encode(const fzk_desc *d, void *jit_fn, const void *d_in, int in_vec,
                      const fzk_qparams *d_qp, uint8_t *d_stage, uint32_t *d_sizes,
                      fz_gpu_stream s);
/* The chains of d->k32 on 4-byte words (on 8-byte words when d->w is 8:
 * the 64 variants, which these call), in one pass: each block codes its
 * chunk, finds the chunk's offset by a look-back over the chunks before it
 * and writes it straight into the archive (header_len + offset; nothing at
 * or beyond out_cap), with its table entry (at table_off) and its CRC-32C
 * (d_crcs).  d_lb holds nchunks + 2 words, zeroed before the launch; the
 * payload's length is left in d_lb[nchunks]. */
int fzk_launch_encode32(const fzk_desc *d, const void *d_in, const fzk_qparams *d_qp,
                        uint8_t *d_out, uint64_t out_cap, uint64_t header_len, uint64_t table_off,
                        uint32_t *d_crcs, uint64_t *d_lb, const uint32_t *d_tab, fz_gpu_stream s);
int fzk_launch_encode64(const fzk_desc *d, const void *d_in, const fzk_qparams *d_qp,
                        uint8_t *d_out, uint64_t out_cap, uint64_t header_len, uint64_t table_off,
                        uint32_t *d_crcs, uint64_t *d_lb, const uint32_t *d_tab, fz_gpu_stream s);

/* Exclusive prefix sums of n sizes (u32 words, or little-endian u16 when
 * d_sizes16 is given) into d_offs[0..n]; d_offs[n] is the total.  d_bsum
 * holds fzk_scan_blocks(n) + 1 words.  With chk, the sizes are checked too
 * (FZK_ST_SIZE, FZK_ST_LONG, FZK_ST_SHORT). */
uint64_t fzk_scan_blocks(uint64_t n);
int fzk_launch_scan(const fzk_kern *k, uint64_t n, const uint32_t *d_sizes32,
                    const uint8_t *d_sizes16, uint64_t *d_bsum, uint64_t *d_offs,
                    const fzk_table_check *chk, fz_gpu_stream s);

/* Copies the staged chunks to their places in the archive, writes the
 * chunk table and each chunk's CRC-32C to d_crcs; nothing is written at or
 * beyond out_cap. */
int fzk_launch_place(const fzk_kern *k, const fzk_desc *d, const uint8_t *d_stage,
                     const uint32_t *d_sizes, const uint64_t *d_offs, const uint32_t *d_tab,
                     uint8_t *d_out, uint64_t out_cap, uint64_t header_len, uint64_t table_off,
                     uint32_t *d_crcs, fz_gpu_stream s);

/* CRC-32C of every chunk of an archive's payload (chunk i at d_offs[i],
 * d_sizes16 the archive's table) to d_crcs; a chunk outside the payload
 * gets 0 (the decoder reports it). */
int fzk_launch_check(const fzk_kern *k, const fzk_desc *d, const uint8_t *d_pay, uint64_t pay_len,
                     const uint64_t *d_offs, const uint8_t *d_sizes16, const uint32_t *d_tab,
                     uint32_t *d_crcs, fz_gpu_stream s);

/* CRC-32C of len bytes at d_p, in one launch (the block that ends last
 * folds the parts).  d_parts holds fzk_crc_parts(len) words. */
uint64_t fzk_crc_parts(uint64_t len);
int fzk_launch_crc(const fzk_kern *k, const uint8_t *d_p, uint64_t len, uint32_t *d_parts,
                   const uint32_t *d_tab, fzk_crc_use use, fz_gpu_stream s);

/* A decompression's first kernel (fzk_dec_head above). */
int fzk_launch_dec_head(const fzk_kern *k, const fzk_dec_head *p, const uint32_t *d_tab,
                        fz_gpu_stream s);

/* The last kernel of a compression (fzk_seal above). */
uint64_t fzk_seal_parts(uint64_t nchunks, uint64_t header_len);
int fzk_launch_seal(const fzk_kern *k, const fzk_seal *p, const uint32_t *d_tab, fz_gpu_stream s);

/* One block per chunk decodes the payload (d_pay, pay_len bytes; chunk i at
 * d_offs[i], d_sizes16 the archive's table) into d_out; any corruption sets
 * *d_status to 1.  The 32 variant runs the chains of d->k32 and also
 * writes each chunk's CRC-32C to d_crcs, as the check kernel does (the 64
 * variant for d->w == 8, which it calls). */
int fzk_launch_decode(const fzk_desc *d, void *jit_fn, const uint8_t *d_pay, uint64_t pay_len,
                      const uint64_t *d_offs, const uint8_t *d_sizes16, const fzk_qparams *d_qp,
                      void *d_out, int out_vec, uint32_t *d_status, fz_gpu_stream s);
int fzk_launch_decode32(const fzk_desc *d, const uint8_t *d_pay, uint64_t pay_len,
                        const uint64_t *d_offs, const uint8_t *d_sizes16, const fzk_qparams *d_qp,
                        void *d_out, int out_vec, uint32_t *d_status, uint32_t *d_crcs,
                        const uint32_t *d_tab, fz_gpu_stream s);
int fzk_launch_decode64(const fzk_desc *d, const uint8_t *d_pay, uint64_t pay_len,
                        const uint64_t *d_offs, const uint8_t *d_sizes16, const fzk_qparams *d_qp,
                        void *d_out, int out_vec, uint32_t *d_status, uint32_t *d_crcs,
                        const uint32_t *d_tab, fz_gpu_stream s);

#ifdef __cplusplus
}
#endif
#endif
