/*
 * fzk.h - declarations shared by the CUDA backend's host files (C) and its
 * kernels (CUDA): the chain descriptor a kernel receives, the quantizer
 * parameters the device computes and the CRC-32C tables.  The launchers
 * of the built-in kernels are stages/launch.h's.
 *
 * Run-time compiled kernels (NVRTC, jit.c) include this header too: they
 * see the constants and the structures.
 */
#ifndef FZK_H
#define FZK_H

#ifndef __CUDACC_RTC__
#include <stddef.h>
#include <stdint.h>

#include "fz.h"
#include "fz_gpu.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Threads of every chunk kernel: one block owns one chunk. */
#define FZK_NT 256
/* CRC-32C tables in device memory (crc_tables.c): four slice-by-4 tables
 * (the first is the byte table), then for each segment size 16 << k
 * (k < FZK_CRC_NSEG) the per-thread shift factors x^(8*seg*(NT-1-t)), then
 * x^(8*SPAN*2^j) for combining the blocks of a long buffer, which are
 * checksummed in segments of FZK_CRC_SEG bytes, then x^(8*SPAN*k) for
 * k < 256, then for the checksum of a chunk by a group of up to
 * FZK_CRC_GMAX warps (fzk_crc_group_xor) and each segment size 16 * k
 * (1 <= k <= FZK_CRC_WSEGS) the factors x^(8*16k*(32*GMAX-1-t)) of the
 * segments t < 32 * GMAX (a group of G warps uses the last 32 G). */
#define FZK_CRC_NSEG 4u
#define FZK_CRC_SEG 16u /* short serial runs, and many blocks for a long buffer */
#define FZK_CRC_SPAN (FZK_NT * FZK_CRC_SEG)
#define FZK_CRC_SEGF 1024u
#define FZK_CRC_SPANF (FZK_CRC_SEGF + FZK_CRC_NSEG * FZK_NT)
#define FZK_CRC_SPANK (FZK_CRC_SPANF + 64)
#define FZK_CRC_WSEGS 64u /* 32 lanes of 16 * 64 bytes cover a 32 KiB chunk */
#define FZK_CRC_GMAX 4u
#define FZK_CRC_LANEF (FZK_CRC_SPANK + 256)
#define FZK_CRC_TAB_WORDS (FZK_CRC_LANEF + 32 * FZK_CRC_GMAX * FZK_CRC_WSEGS)

/* A chain as a kernel sees it (passed by value). */
typedef struct fzk_desc {
  uint8_t nst;          /* stages */
  uint8_t w;            /* element width: 1, 2, 4, 8 */
  uint8_t fkind;        /* 0: integers, 1: f32, 2: f64 */
  uint8_t has_quant;    /* st[0] is quant */
  uint8_t id[8], mode[8], levels[8];
  /* The word kernels: 0 none, else the coder the chain [quant] [diff]
   * coder ends in: 1 bitpack, 2 bitshuffle rze, 3 rze (FZK_C32_*,
   * chain32_ops.cuh); with diff and its map, and the rze levels.  On
   * 4-byte words (w == 4) they are chain32.cu's kernels, on 8-byte words
   * (w == 8: f64, u64, i64) chain64.cu's (chain64_ops.cuh), for the
   * coders fzk_chain64_coders says it built (2 always).  Either way the
   * chunks are placed by look-back (fzk_launch_encode32). */
  uint8_t k32, k32diff, k32nega, k32lev;
  uint32_t cb;          /* input bytes per chunk */
  uint32_t cap;         /* bytes of each shared stream buffer */
  uint32_t tcap;        /* bytes of the shared bitmap / table area */
  uint32_t smem;        /* dynamic shared memory of the chunk kernels */
  uint32_t smem_e32, smem_d32; /* of the word kernels (4- or 8-byte words) */
  uint64_t raw_bytes, nchunks;
} fzk_desc;

/* The quantizer's parameters for one job, resolved on the device. */
typedef struct fzk_qparams {
  double eb_abs, step, inv;
} fzk_qparams;

/* The quantizer's PWREL mode (FZ_EB_PWREL of fz.h, which device code
 * compiled at run time does not include; gpu_plan.c checks they agree). */
#define FZK_EB_PWREL 2u

/* The first kernel of a compression (one launch): the range of the data
 * (range: the quantizer's mode is not PWREL) into d_part, which holds
 * 2 * FZK_MM_BLOCKS doubles; zero_words zeroed at d_zero; then the
 * quantizer's parameters (fzo_quant_params) into *d_qp when q_off is not 0
 * (the chain quantizes; the parameters' offset in the header), and the
 * header template's first tpl_len bytes into d_out, with the parameters.
 * *d_ticket is 0 before and after. */
#define FZK_MM_BLOCKS 1024u
typedef struct fzk_prep {
  const void *d_in;
  uint64_t n;
  int range;
  unsigned mode;
  double eb;
  double *d_part;
  fzk_qparams *d_qp;
  double *d_range; /* the finite range (lo, hi) the parameters came from */
  uint32_t *d_zero;
  uint64_t zero_words;
  const uint8_t *d_tpl;
  uint64_t tpl_len, q_off;
  uint8_t *d_out;
  uint32_t *d_ticket;
} fzk_prep;

/* Bits of the status word a decompression's kernels set: a chunk that
 * does not decode or a payload CRC that does not match; then the checks of
 * the header that fze_header_parse makes on the CPU: its CRC, a chunk size
 * of 0 or above the chunk's raw bytes, sizes that add up to more (the
 * archive is truncated) or less than the payload. */
#define FZK_ST_CORRUPT 1u
#define FZK_ST_HCRC 2u
#define FZK_ST_SIZE 4u
#define FZK_ST_LONG 8u
#define FZK_ST_SHORT 16u
/* The header's prefix is not the one the launches were made for (a
 * decoder that reused the last archive's, fz_gpu_decoder_decompress): the
 * chunk kernels stand down, and the host decodes it anew. */
#define FZK_ST_STALE 32u

/* What the scan of a chunk table checks (fzk_launch_scan): the chunks'
 * sizes against cb and raw_bytes, their total against pay_len. */
typedef struct fzk_table_check {
  uint32_t *d_status;
  uint32_t cb;
  uint64_t raw_bytes, pay_len;
} fzk_table_check;

/* What becomes of a CRC-32C computed on the device (fzk_launch_crc): a
 * result other than `expect` (or the little-endian word at expect_le) sets
 * `bit` in *status, and the status word that results is written to *host
 * when that is not NULL (pinned host memory: the caller reads it after its
 * stream's synchronisation, with no copy back).  *ticket is a word that is
 * 0 before the launch, and again after it. */
typedef struct fzk_crc_use {
  uint32_t *status;
  uint32_t expect;
  const uint8_t *expect_le;
  uint32_t bit;
  uint32_t *ticket, *host;
} fzk_crc_use;

/* The longest header prefix (up to the chunk table) the kernels compare:
 * the engine's FZE_PREFIX_MAX, which gpu_decode.c checks fits. */
#define FZK_PREFIX_CAP 320u

/* A decompression's first kernel, one block.  It compares the archive's
 * header prefix (its first prefix_len bytes, up to the chunk table) with
 * the bytes the launches were made for, but for the quantizer's three
 * doubles (bound, absolute bound, step: at q_off + 1 .. q_off + 25, q_off
 * the quantizer's mode byte, 0 without one) and the payload's CRC (the
 * prefix's last 4 bytes), which may differ from archive to archive; a
 * difference, or a quantizer's doubles that fze_quant_params_ok refuses
 * (q_pwrel, q_f64: its mode and words), sets FZK_ST_STALE.  It writes the
 * quantizer's parameters, as the decoders take them, to d_qp.  With
 * table set (where fzk_scan_blocks(nchunks) <= 1) it also zeroes the
 * chunk CRCs, the status word and the CRC ticket after them (d_crcs[0 ..
 * nchunks + 2)), scans the table (tw-byte little-endian sizes at d_table,
 * any alignment; copied as words to d_sizes32 when that is not NULL) into
 * d_offs with the checks of fzk_launch_scan (chk), and checks the header's
 * CRC, of its first hcrc_len bytes, against the word after them
 * (FZK_ST_HCRC): in place of a memset, the scan's three launches and the
 * header CRC's.  Without table, the status word is zeroed before it.
 * Where h_prefix is not NULL (pinned host memory) the archive's prefix
 * bytes go there too, so that the host reads them after its one wait. */
typedef struct fzk_dec_head {
  const uint8_t *d_arc, *d_table;
  uint64_t hcrc_len, nchunks;
  uint32_t tw, table;
  uint32_t *d_crcs, *d_sizes32;
  uint64_t *d_offs;
  fzk_table_check chk;
  fzk_qparams *d_qp;
  uint32_t q_off, q_pwrel, q_f64, prefix_len;
  uint8_t *h_prefix;
  uint8_t prefix[FZK_PREFIX_CAP];
} fzk_dec_head;

/* The last kernel of a compression (one launch): the payload's CRC (of
 * the nchunks chunk CRCs at d_crcs) into its field, which ends at
 * table_off; the header's CRC (of its first header_len - 4 bytes, with the
 * payload-CRC field zero until then) into the last 4; *d_total = *d_end +
 * header_len.  field_shift is fzk_crc_xpow8(header_len - table_off);
 * d_parts holds fzk_seal_parts() words; *d_ticket is 0 before and after.
 * Then the back_words 8-byte words at d_back (which d_total is one of) go
 * to h_back, pinned host memory, so the caller reads them after its
 * stream's synchronisation with no copy back. */
typedef struct fzk_seal {
  const uint32_t *d_crcs;
  uint64_t nchunks;
  uint8_t *d_out;
  uint64_t header_len, table_off;
  uint32_t field_shift;
  const uint64_t *d_end;
  uint64_t *d_total;
  uint32_t *d_parts, *d_ticket;
  const uint64_t *d_back;
  uint64_t *h_back;
  uint32_t back_words;
} fzk_seal;

/* The helper kernels (helper_kernels.cuh) of a context whose GPU runs no
 * built-in code: each a CUfunction of the module jit.c compiled for it.
 * Launchers given NULL run the built-in kernels. */
enum {
  FZK_K_PREP, FZK_K_SCAN, FZK_K_SCAN_TOP, FZK_K_ZERO, FZK_K_PLACE, FZK_K_CHECK,
  FZK_K_CRC, FZK_K_SEAL, FZK_K_DEC_HEAD, FZK_K_COUNT
};
typedef struct fzk_kern {
  void *fn[FZK_K_COUNT];
} fzk_kern;


#ifdef __cplusplus
}
#endif
#endif
