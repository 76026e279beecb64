/*
 * gpu_decode.c - decompression of archives in device memory.
 *
 * A decoder is the host side of decompression for one caller at a time (a
 * daemon worker, a benchmark thread): it owns the pinned memory the header
 * prefix and the status word come back through, so decoders of one context
 * run concurrently on their own streams with no lock between them.  A
 * decompression is two steps.  fz_gpu_decoder_open() copies the first bytes
 * of the archive to the host and parses the header up to its chunk table
 * with the engine's own parser (one round trip), so the caller learns the
 * dtype, shape, chain and raw size before deciding where the output goes;
 * fz_gpu_decoder_run() then checks the rest of the header and every chunk
 * on the device, decodes, and waits once for the status word.  Nothing is
 * written to the output before the header has been found sound and the
 * output large enough.
 */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "archive.h"
#include "fze_chain.h"
#include "fz_gpu.h"
#include "fzk.h"
#include "launch.h"
#include "fzk_crc.h"
#include "gpu_ctx.h"
#include "gpu_plan.h"
#include "gpu_err.h"
#include "jit.h"
#include "ratio_gpu.h"

struct fz_gpu_decoder {
  fz_gpu_ctx *ctx;
  uint8_t *h_hdr; /* pinned: the header prefix, or the whole header */
  size_t h_hdr_cap;
  uint8_t *h_pre;   /* pinned: the prefix as the head kernel writes it */
  uint8_t *d_pre;   /* through this mapping, for a series' archive */
  uint32_t *h_word; /* pinned: the device's status word, which the last kernel */
  uint32_t *d_word; /* writes through this mapping of it */
  uint8_t *d_ws;    /* the device workspace, kept from call to call */
  size_t ws_cap;
  /* The archive opened by fz_gpu_decoder_open(), until the next open. */
  const uint8_t *d_arc;
  size_t arc_len;
  fze_header h;
  size_t table_pos;
  int opened;
  int ratio;          /* the archive is the ratio preset's (ratio.cu) */
  const fzk_kern *rk; /* those kernels as NVRTC compiled them, or NULL: built in */
  const char *path;   /* of the last run: "jit", "aot" */
  /* The kernel chosen for the last archive, by the descriptor its header
   * gave: a worker's next archive is most often of the same chain and size,
   * and choosing again would generate the kernel's source to look it up. */
  fzk_desc memo_key, memo_d;
  void *memo_fn;
  int memo_ok;
  /* The prefix of the last archive opened (a word chain's; the ratio
   * preset's and those left to the CPU reset it), parsed, and how many
   * archives in a row had it but for what varies from one to the next
   * (same_series): from two on, fz_gpu_decoder_decompress() decodes the
   * next archive with this header at once, and the device checks. */
  uint8_t series[FZE_PREFIX_MAX];
  fze_header series_h;
  size_t series_tpos;
  unsigned series_runs;
  unsigned waits; /* host waits since the last open or decompress began */
  /* Pinned host memory the decoded bytes are copied to before the wait
   * (fz_gpu_decoder_decompress_host), or NULL. */
  void *h_copy;
};

_Static_assert(FZE_PREFIX_MAX <= FZK_PREFIX_CAP, "the head kernel compares the whole prefix");

int fz_gpu_decoder_create(fz_gpu_ctx *ctx, fz_gpu_decoder **out, char *why, size_t why_len) {
  if (ctx == NULL || out == NULL)
    return FZ_EINVAL;
  *out = NULL;
  fz_gpu_decoder *dec = calloc(1, sizeof *dec);
  if (dec == NULL)
    return FZ_ENOMEM;
  dec->ctx = ctx;
  dec->path = "";
  int rc = 0;
  if ((rc = fzk_cuda_check(cudaSetDevice(ctx->device), "cudaSetDevice", why, why_len)) < 0)
    goto err_dec;
  if ((rc = fzk_cuda_check(cudaMallocHost((void **)&dec->h_hdr, FZE_PREFIX_MAX), "cudaMallocHost",
                           why, why_len)) < 0)
    goto err_dec;
  dec->h_hdr_cap = FZE_PREFIX_MAX;
  if ((rc = fzk_cuda_check(cudaMallocHost((void **)&dec->h_pre, FZE_PREFIX_MAX), "cudaMallocHost",
                           why, why_len)) < 0)
    goto err_dec;
  if ((rc = fzk_cuda_check(cudaHostGetDevicePointer((void **)&dec->d_pre, dec->h_pre, 0),
                           "cudaHostGetDevicePointer", why, why_len)) < 0)
    goto err_dec;
  if ((rc = fzk_cuda_check(cudaMallocHost((void **)&dec->h_word, 64), "cudaMallocHost", why,
                           why_len)) < 0)
    goto err_dec;
  if ((rc = fzk_cuda_check(cudaHostGetDevicePointer((void **)&dec->d_word, dec->h_word, 0),
                           "cudaHostGetDevicePointer", why, why_len)) < 0)
    goto err_dec;
  *out = dec;
  return 0;
err_dec:
  fz_gpu_decoder_destroy(dec);
  return rc;
}

void fz_gpu_decoder_destroy(fz_gpu_decoder *dec) {
  if (dec == NULL)
    return;
  cudaSetDevice(dec->ctx->device);
  cudaFreeHost(dec->h_hdr);
  cudaFreeHost(dec->h_pre);
  cudaFreeHost(dec->h_word);
  cudaFree(dec->d_ws);
  cudaGetLastError();
  free(dec);
}

/* Copies the first n bytes of the archive to dec->h_hdr and waits. */
static int to_host(fz_gpu_decoder *dec, size_t n, cudaStream_t s, char *why, size_t why_len) {
  int rc = 0;
  if (dec->h_hdr_cap < n) {
    cudaFreeHost(dec->h_hdr);
    dec->h_hdr = NULL;
    dec->h_hdr_cap = 0;
    if ((rc = fzk_cuda_check(cudaMallocHost((void **)&dec->h_hdr, n), "cudaMallocHost", why,
                             why_len)) < 0)
      return rc;
    dec->h_hdr_cap = n;
  }
  if (n &&
      (rc = fzk_cuda_check(cudaMemcpyAsync(dec->h_hdr, dec->d_arc, n, cudaMemcpyDeviceToHost, s),
                           "cudaMemcpyAsync", why, why_len)) < 0)
    return rc;
  if ((rc = fzk_cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize", why, why_len)) < 0)
    return rc;
  dec->waits++;
  return 0;
}

/* The whole header on the host, parsed as the CPU parses it: only to name
 * the error that a decode would find first, as the CPU decoder does. */
static int full_header_error(fz_gpu_decoder *dec, cudaStream_t s, char *why, size_t why_len) {
  fze_header h;
  int rc = to_host(dec, dec->h.header_len, s, why, why_len);
  /* The parser reads only the header; the full length lets it check the
   * chunk table against the archive. */
  return rc < 0 ? rc : fze_header_parse(dec->h_hdr, dec->arc_len, &h);
}

/* Where the quantizer's mode byte lies in a header's prefix (the first
 * stage's, after the dims and the stage count), 0 without one. */
static uint32_t quant_off(const fze_header *h) {
  return fze_chain_has_quant(&h->chain) ? (uint32_t)(8 + 8 * h->ndims + 2) : 0;
}

/* Prefixes (up to the chunk table, tpos bytes) of two archives of one
 * series: the same bytes but for the quantizer's three doubles and the
 * payload's CRC, as the head kernel compares them. */
static int same_series(const uint8_t *a, const uint8_t *b, size_t tpos, uint32_t q_off) {
  if (q_off == 0)
    return memcmp(a, b, tpos - 4) == 0;
  return memcmp(a, b, q_off + 1) == 0 &&
         memcmp(a + q_off + 25, b + q_off + 25, tpos - 4 - (q_off + 25)) == 0;
}

/* After a parse of the prefix in dec->h_hdr into dec->h: the series of
 * runs archives goes on, or starts again with this one (ok), or ends. */
static void series_note(fz_gpu_decoder *dec, int ok, unsigned runs) {
  if (!ok) {
    dec->series_runs = 0;
    return;
  }
  if (runs && dec->series_tpos == dec->table_pos &&
      same_series(dec->series, dec->h_hdr, dec->table_pos, quant_off(&dec->h)))
    dec->series_runs = runs + 1;
  else
    dec->series_runs = 1;
  memcpy(dec->series, dec->h_hdr, dec->table_pos);
  dec->series_h = dec->h;
  dec->series_tpos = dec->table_pos;
}

static int open_at(fz_gpu_decoder *dec, const void *d_arc, size_t arc_len, fz_archive_info *info,
                   fz_gpu_stream stream, char *why, size_t why_len) {
  dec->opened = 0;
  const unsigned runs = dec->series_runs;
  dec->series_runs = 0; /* until this prefix is parsed */
  dec->d_arc = d_arc;
  dec->arc_len = arc_len;
  int rc = 0;
  if ((rc = fzk_cuda_check(cudaSetDevice(dec->ctx->device), "cudaSetDevice", why, why_len)) < 0)
    return rc;
  rc = to_host(dec, arc_len < FZE_PREFIX_MAX ? arc_len : FZE_PREFIX_MAX, stream, why, why_len);
  if (rc < 0)
    return rc;
  if ((rc = fze_header_parse_prefix(dec->h_hdr, arc_len, &dec->h, &dec->table_pos)) < 0)
    return rc;
  if (fze_chain_has_quant(&dec->h.chain) && dec->h.chain.st[0].has_fill) {
    fze_why(why, why_len,
            "the GPU kernels have no fill values yet: the CPU engine "
            "decodes this archive");
    return FZ_ENOSYS;
  }
  dec->ratio = 0;
  if (dec->h.version >= FZE_FORMAT_VERSION_RATIO) {
    if (!fzk_ratio_chain(&dec->h)) {
      fze_why(why, why_len,
              "the GPU kernels read only the ratio preset's chains of format "
              "versions 3 to 7 (quant | interp | huffman | rze, or lorenzo in interp's place) "
              "and lorenzo | byteplanes on 4- and 8-byte words of version 4: the CPU "
              "engine decodes this archive");
      return FZ_ENOSYS;
    }
    /* A GPU the built-in kernels cannot run on takes them from NVRTC. */
    if ((rc = fzk_ratio_kernels(dec->ctx, &dec->rk, "decodes this archive", why, why_len)) < 0)
      return rc;
    dec->ratio = 1;
  }
  series_note(dec, !dec->ratio, runs);
  if (info != NULL)
    fze_header_info(&dec->h, arc_len, info);
  dec->opened = 1;
  return 0;
}

int fz_gpu_decoder_open(fz_gpu_decoder *dec, const void *d_arc, size_t arc_len,
                        fz_archive_info *info, fz_gpu_stream stream, char *why, size_t why_len) {
  if (dec == NULL || (d_arc == NULL && arc_len))
    return FZ_EINVAL;
  dec->waits = 0;
  return open_at(dec, d_arc, arc_len, info, stream, why, why_len);
}

unsigned fz_gpu_decoder_waits(const fz_gpu_decoder *dec) {
  return dec ? dec->waits : 0;
}

/* The decoder's device workspace, grown to bytes (it stays: the steady
 * state allocates nothing). */
static int workspace(fz_gpu_decoder *dec, size_t bytes, cudaStream_t s, char *why, size_t why_len) {
  int rc = 0;
  if (dec->ws_cap >= bytes)
    return 0;
  if (dec->d_ws != NULL &&
      (rc = fzk_cuda_check(cudaFreeAsync(dec->d_ws, s), "cudaFreeAsync", why, why_len)) < 0)
    return rc;
  dec->d_ws = NULL;
  dec->ws_cap = 0;
  if ((rc = fzk_cuda_check(cudaMallocFromPoolAsync((void **)&dec->d_ws, bytes, dec->ctx->pool, s),
                           "cudaMallocFromPoolAsync", why, why_len)) < 0)
    return rc;
  dec->ws_cap = bytes;
  return rc;
}

/* The device's part of the header before the chunks are decoded: the
 * prefix against the bytes the launches were made for (prefix: this
 * archive's as the host read it, or the series' last), the quantizer's
 * parameters into d_qp, the chunk CRCs, the status word and the CRC ticket
 * after them zeroed, the header's CRC, the table's prefix sums into offs
 * with their checks (chk) and, where sizes32 is given, the table as words
 * there.  A table of one scan tile takes one kernel; a longer one a
 * memset, the head kernel without the table, the CRC and the scan's
 * three. */
static int head(fz_gpu_decoder *dec, const uint8_t *prefix, uint8_t *h_prefix, const uint8_t *tab,
                uint64_t hcrc_len, uint32_t tw, uint32_t *sizes32, uint32_t *crcs, uint64_t *offs,
                uint64_t *bsum, uint32_t *cparts, fzk_qparams *d_qp, const fzk_table_check *chk,
                cudaStream_t s, char *why, size_t why_len) {
  fz_gpu_ctx *ctx = dec->ctx;
  const fze_header *h = &dec->h;
  const uint64_t nc = h->nchunks;
  const int one_tile = fzk_scan_blocks(nc) <= 1;
  int rc = 0;
  fzk_dec_head hd = {.d_arc = dec->d_arc,
                     .d_table = tab,
                     .hcrc_len = hcrc_len,
                     .nchunks = nc,
                     .tw = tw,
                     .table = (uint32_t)one_tile,
                     .d_crcs = crcs,
                     .d_sizes32 = sizes32,
                     .d_offs = offs,
                     .chk = *chk,
                     .d_qp = d_qp,
                     .q_off = quant_off(h),
                     .q_pwrel =
                         fze_chain_has_quant(&h->chain) && h->chain.st[0].mode == FZ_EB_PWREL,
                     .q_f64 = h->dtype == FZ_F64,
                     .prefix_len = (uint32_t)dec->table_pos,
                     .h_prefix = h_prefix};
  memcpy(hd.prefix, prefix, dec->table_pos);
  if (one_tile) {
    if ((rc = fzk_cuda_check(fzk_launch_dec_head(ctx->kern, &hd, ctx->d_tab, s),
                             "fzk_launch_dec_head", why, why_len)) < 0)
      return rc;
    return 0;
  }
  if ((rc = fzk_cuda_check(cudaMemsetAsync(crcs, 0, 4 * nc + 8, s), "cudaMemsetAsync", why,
                           why_len)) < 0)
    return rc;
  if ((rc = fzk_cuda_check(fzk_launch_dec_head(ctx->kern, &hd, ctx->d_tab, s),
                           "fzk_launch_dec_head", why, why_len)) < 0)
    return rc;
  const fzk_crc_use hdr = {.status = chk->d_status,
                           .expect_le = dec->d_arc + hcrc_len,
                           .bit = FZK_ST_HCRC,
                           .ticket = crcs + nc + 1};
  if ((rc = fzk_cuda_check(
           fzk_launch_crc(ctx->kern, dec->d_arc, hcrc_len, cparts, ctx->d_tab, hdr, s),
           "fzk_launch_crc", why, why_len)) < 0)
    return rc;
  /* The table has any alignment in the archive; the kernels read words. */
  if (sizes32 != NULL &&
      (rc = fzk_cuda_check(cudaMemcpyAsync(sizes32, tab, 4 * nc, cudaMemcpyDeviceToDevice, s),
                           "cudaMemcpyAsync", why, why_len)) < 0)
    return rc;
  if ((rc = fzk_cuda_check(
           fzk_launch_scan(ctx->kern, nc, sizes32, sizes32 ? NULL : tab, bsum, offs, chk, s),
           "fzk_launch_scan", why, why_len)) < 0)
    return rc;
  return rc;
}

/* The payload's CRC (of the chunk CRCs) against the header's, which also
 * writes the status word to the pinned word h_word, then the one wait for
 * the stream. */
static int tail(fz_gpu_decoder *dec, const void *d_out, uint32_t *crcs, uint64_t nc,
                uint32_t *cparts, cudaStream_t s, char *why, size_t why_len) {
  fz_gpu_ctx *ctx = dec->ctx;
  int rc = 0;
  /* The payload's CRC as this archive's prefix holds it (the last of its
   * bytes), which the header the launches were made for may not. */
  const fzk_crc_use payc = {.status = crcs + nc,
                            .expect_le = dec->d_arc + dec->table_pos - 4,
                            .bit = FZK_ST_CORRUPT,
                            .ticket = crcs + nc + 1,
                            .host = dec->d_word};
  if ((rc = fzk_cuda_check(
           fzk_launch_crc(ctx->kern, (const uint8_t *)crcs, 4 * nc, cparts, ctx->d_tab, payc, s),
           "fzk_launch_crc", why, why_len)) < 0)
    return rc;
  /* Whatever the status turns out to be: on an error, or a series' archive
   * that was another (the chunk kernels stood down), the copy is of bytes
   * nobody takes. */
  if (dec->h_copy != NULL && dec->h.raw_bytes &&
      (rc = fzk_cuda_check(
           cudaMemcpyAsync(dec->h_copy, d_out, (size_t)dec->h.raw_bytes, cudaMemcpyDeviceToHost, s),
           "cudaMemcpyAsync", why, why_len)) < 0)
    return rc;
  if ((rc = fzk_cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize", why, why_len)) < 0)
    return rc;
  dec->waits++;
  return rc;
}

/* The ratio preset's decode: the header's CRC and the u32 table's scan as
 * for the other chains, then one block per chunk (ratio.cu), which
 * also checksums each chunk, then the payload's CRC. */
static int ratio_run(fz_gpu_decoder *dec, void *d_out, const uint8_t *prefix, cudaStream_t s,
                     char *why, size_t why_len) {
  fz_gpu_ctx *ctx = dec->ctx;
  const fze_header *h = &dec->h;
  int rc = 0;
  uint64_t nc = h->nchunks;
  const uint8_t *arc = dec->d_arc, *tab = arc + dec->table_pos;
  const uint64_t hcrc_len = dec->table_pos + 4 * nc, parts = fzk_crc_parts(hcrc_len);
  size_t o_offs = 0, o_bsum = fzk_up256(8 * (nc + 1));
  size_t o_crcs = o_bsum + fzk_up256(8 * (fzk_scan_blocks(nc) + 1));
  size_t o_tab = o_crcs + fzk_up256(4 * nc + 8);
  size_t o_parts = o_tab + fzk_up256(4 * nc);
  size_t o_scr =
      o_parts + fzk_up256(4 * (parts > fzk_crc_parts(4 * nc) ? parts : fzk_crc_parts(4 * nc)));
  const uint64_t slots = fzr_dec_slots(nc, ctx->nsm);
  size_t o_tick = o_scr + fzk_up256(fzr_scratch_bytes(h->chunk_bytes, slots));
  size_t o_qp = o_tick + 256, bytes = o_qp + sizeof(fzk_qparams);
  if ((rc = workspace(dec, bytes, s, why, why_len)) < 0)
    return rc;
  uint8_t *ws = dec->d_ws;
  uint32_t *crcs = (uint32_t *)(ws + o_crcs), *status = crcs + nc;
  uint32_t *cparts = (uint32_t *)(ws + o_parts), *tab32 = (uint32_t *)(ws + o_tab);
  uint64_t *offs = (uint64_t *)(ws + o_offs);
  const uint8_t *pay = arc + h->header_len;
  const uint64_t pay_len = dec->arc_len - h->header_len;
  const fzk_table_check chk = {status, h->chunk_bytes, h->raw_bytes, pay_len};
  if ((rc = head(dec, prefix, NULL, tab, hcrc_len, 4, tab32, crcs, offs, (uint64_t *)(ws + o_bsum),
                 cparts, (fzk_qparams *)(ws + o_qp), &chk, s, why, why_len)) < 0)
    return rc;
  const fzk_ratio_form f = fzk_ratio_form_of(h);
  fzr_params p = {.pay = pay,
                  .pay_len = pay_len,
                  .offs = offs,
                  .sizes = tab32,
                  .raw_bytes = h->raw_bytes,
                  .nchunks = nc,
                  .cb = h->chunk_bytes,
                  .w = (uint32_t)fz_dtype_size(h->dtype),
                  .levels = f.levels,
                  .pdims = f.pdims,
                  .lorenzo = f.lorenzo,
                  .planes = f.planes,
                  .pwrel = f.pwrel,
                  .lv = f.lv,
                  .hform = f.hform,
                  .step = f.step,
                  .slots = slots,
                  .scratch = ws + o_scr,
                  .ticket = (uint64_t *)(ws + o_tick),
                  .out = d_out,
                  .status = status,
                  .crcs = crcs,
                  .crc_tab = ctx->d_tab};
  memcpy(p.ext, f.ext, sizeof p.ext);
  if ((rc = fzk_cuda_check(fzr_launch_decode(dec->rk, &p, s), "fzr_launch_decode", why, why_len)) <
      0)
    return rc;
  if ((rc = tail(dec, d_out, crcs, nc, cparts, s, why, why_len)) < 0)
    return rc;
  dec->path = dec->rk != NULL ? "jit" : "aot";
  return rc;
}

/* The error of the device's checks, in the order fze_header_parse and the
 * CPU decoder find them. */
static int status_error(uint32_t st) {
  if (st & (FZK_ST_HCRC | FZK_ST_SIZE))
    return FZ_ECORRUPT;
  if (st & FZK_ST_LONG)
    return FZ_ETRUNC;
  return st ? FZ_ECORRUPT : 0;
}

/* The decode of the header in dec->h, made for the prefix bytes given
 * (dec->h_hdr's, or the series' last), into d_out (which holds the raw
 * size), with the one wait; the device's status word is left in
 * dec->h_word[0], and the archive's prefix in h_prefix's host memory
 * where that is given (a word chain's head kernel writes it). */
static int decode(fz_gpu_decoder *dec, void *d_out, const uint8_t *prefix, uint8_t *h_prefix,
                  cudaStream_t s, char *why, size_t why_len) {
  fz_gpu_ctx *ctx = dec->ctx;
  const fze_header *h = &dec->h;
  int rc = 0;
  if (dec->ratio)
    return ratio_run(dec, d_out, prefix, s, why, why_len);
  fzk_desc d, key;
  void *jit_dec = NULL;
  fzk_desc_from_header_jit(&key, h);
  if (dec->memo_ok && memcmp(&key, &dec->memo_key, sizeof key) == 0) {
    /* Chosen and made ready before: a module, once loaded or failed, stays
     * so for the context's life, and the shared memory set-up only grows. */
    d = dec->memo_d;
    jit_dec = dec->memo_fn;
  } else {
    if ((rc = fzk_desc_kernel(ctx, h, FZK_JIT_DECODE, &d, &jit_dec, why, why_len)) < 0)
      return rc;
    if ((rc = fzk_kernels_ready(ctx, &d, why, why_len)) < 0)
      return rc;
    dec->memo_key = key;
    dec->memo_d = d;
    dec->memo_fn = jit_dec;
    dec->memo_ok = 1;
  }
  uint64_t nc = h->nchunks;
  const uint8_t *arc = dec->d_arc, *tab = arc + dec->table_pos;
  const uint64_t hcrc_len = dec->table_pos + 2 * nc, parts = fzk_crc_parts(hcrc_len);
  size_t o_offs = 0, o_bsum = fzk_up256(8 * (nc + 1));
  size_t o_crcs = o_bsum + fzk_up256(8 * (fzk_scan_blocks(nc) + 1));
  /* the chunk CRCs, the status word, the CRC ticket */
  size_t o_qp = o_crcs + fzk_up256(4 * nc + 8);
  size_t o_parts = o_qp + 256;
  size_t bytes = o_parts + 4 * (parts > fzk_crc_parts(4 * nc) ? parts : fzk_crc_parts(4 * nc));
  if ((rc = workspace(dec, bytes, s, why, why_len)) < 0)
    return rc;
  uint8_t *ws = dec->d_ws;
  uint32_t *crcs = (uint32_t *)(ws + o_crcs), *status = crcs + nc;
  uint32_t *cparts = (uint32_t *)(ws + o_parts);
  uint64_t *offs = (uint64_t *)(ws + o_offs);
  const fzk_qparams *qp = (const fzk_qparams *)(ws + o_qp);
  const uint8_t *pay = arc + h->header_len;
  const uint64_t pay_len = dec->arc_len - h->header_len;
  const fzk_table_check chk = {status, h->chunk_bytes, h->raw_bytes, pay_len};
  if ((rc = head(dec, prefix, h_prefix, tab, hcrc_len, 2, NULL, crcs, offs,
                 (uint64_t *)(ws + o_bsum), cparts, (fzk_qparams *)qp, &chk, s, why, why_len)) < 0)
    return rc;
  int out_vec = (uintptr_t)d_out % 16 == 0;
  if (d.k32) {
    if (jit_dec != NULL)
      rc = fzk_cuda_check(fzk_jit_launch_decode32(jit_dec, &d, pay, pay_len, offs, tab, qp, d_out,
                                                  out_vec, status, crcs, ctx->d_tab, s),
                          "fzk_jit_launch_decode32", why, why_len);
    else
      rc = fzk_cuda_check(fzk_launch_decode32(&d, pay, pay_len, offs, tab, qp, d_out, out_vec,
                                              status, crcs, ctx->d_tab, s),
                          "fzk_launch_decode32", why, why_len);
    if (rc < 0)
      return rc;
  } else {
    if ((rc = fzk_cuda_check(
             fzk_launch_check(ctx->kern, &d, pay, pay_len, offs, tab, ctx->d_tab, crcs, s),
             "fzk_launch_check", why, why_len)) < 0)
      return rc;
    if ((rc = fzk_cuda_check(
             fzk_launch_decode(&d, jit_dec, pay, pay_len, offs, tab, qp, d_out, out_vec, status, s),
             "fzk_launch_decode", why, why_len)) < 0)
      return rc;
  }
  if ((rc = tail(dec, d_out, crcs, nc, cparts, s, why, why_len)) < 0)
    return rc;
  dec->path = jit_dec == NULL ? "aot" : "jit";
  return rc;
}

int fz_gpu_decoder_run(fz_gpu_decoder *dec, void *d_out, size_t out_cap, size_t *out_len,
                       fz_gpu_stream stream, char *why, size_t why_len) {
  if (dec == NULL || out_len == NULL || !dec->opened)
    return FZ_EINVAL;
  dec->opened = 0;
  const fze_header *h = &dec->h;
  cudaStream_t s = stream;
  int rc = 0;
  if ((rc = fzk_cuda_check(cudaSetDevice(dec->ctx->device), "cudaSetDevice", why, why_len)) < 0)
    return rc;
  if (out_cap < h->raw_bytes || (h->raw_bytes && d_out == NULL)) {
    /* A header error comes first, as on the CPU. */
    if ((rc = full_header_error(dec, s, why, why_len)) == 0)
      rc = out_cap < h->raw_bytes ? FZ_ENOSPC : FZ_EINVAL;
    return rc;
  }
  if ((rc = decode(dec, d_out, dec->h_hdr, NULL, s, why, why_len)) < 0)
    return rc;
  if ((rc = status_error(dec->h_word[0])) < 0)
    return rc;
  *out_len = (size_t)h->raw_bytes;
  return rc;
}

/* The series' next archive decoded with the series' header at once: 1 when
 * the device found its prefix another (nothing was written to d_out), else
 * what the decode gives.  Its own prefix comes back (the head kernel
 * writes it to dec->h_pre) in the same wait; parsed, it says what the
 * archive holds. */
static int decode_series(fz_gpu_decoder *dec, const void *d_arc, size_t arc_len, void *d_out,
                         size_t *out_len, fz_archive_info *info, cudaStream_t s, char *why,
                         size_t why_len) {
  const unsigned runs = dec->series_runs;
  int rc = 0;
  dec->opened = 0;
  dec->series_runs = 0;
  dec->d_arc = d_arc;
  dec->arc_len = arc_len;
  dec->h = dec->series_h;
  dec->table_pos = dec->series_tpos;
  dec->ratio = 0;
  if ((rc = fzk_cuda_check(cudaSetDevice(dec->ctx->device), "cudaSetDevice", why, why_len)) < 0)
    return rc;
  if ((rc = decode(dec, d_out, dec->series, dec->d_pre, s, why, why_len)) < 0)
    return rc;
  const uint32_t st = dec->h_word[0];
  memcpy(dec->h_hdr, dec->h_pre, dec->table_pos);
  size_t tpos = 0;
  /* The device compared the bytes that the parse reads but the quantizer's
   * doubles, which it checked as the parser does: they agree. */
  if ((st & FZK_ST_STALE) || fze_header_parse_prefix(dec->h_hdr, arc_len, &dec->h, &tpos) < 0 ||
      tpos != dec->table_pos)
    return 1;
  series_note(dec, 1, runs);
  if (info != NULL)
    fze_header_info(&dec->h, arc_len, info);
  if ((rc = status_error(st)) < 0)
    return rc;
  *out_len = (size_t)dec->h.raw_bytes;
  return rc;
}

int fz_gpu_decoder_decompress(fz_gpu_decoder *dec, const void *d_arc, size_t arc_len, void *d_out,
                              size_t out_cap, size_t *out_len, fz_archive_info *info,
                              fz_gpu_stream stream, char *why, size_t why_len) {
  if (dec == NULL || out_len == NULL || (d_arc == NULL && arc_len))
    return FZ_EINVAL;
  dec->waits = 0;
  const fze_header *sh = &dec->series_h;
  /* The series' header fits this archive's length as the parser requires. */
  if (dec->series_runs >= 2 && sh->raw_bytes <= out_cap && (d_out != NULL || !sh->raw_bytes) &&
      arc_len >= dec->series_tpos + 4 &&
      sh->nchunks <= (arc_len - dec->series_tpos - 4) / sh->table_w) {
    int rc = decode_series(dec, d_arc, arc_len, d_out, out_len, info, stream, why, why_len);
    if (rc <= 0)
      return rc;
  }
  int rc = open_at(dec, d_arc, arc_len, info, stream, why, why_len);
  return rc < 0 ? rc : fz_gpu_decoder_run(dec, d_out, out_cap, out_len, stream, why, why_len);
}

int fz_gpu_decoder_decompress_host(fz_gpu_decoder *dec, const void *d_arc, size_t arc_len,
                                   void *d_out, size_t out_cap, void *h_out, size_t *out_len,
                                   fz_archive_info *info, fz_gpu_stream stream, char *why,
                                   size_t why_len) {
  if (dec == NULL || h_out == NULL)
    return FZ_EINVAL;
  dec->h_copy = h_out;
  int rc = fz_gpu_decoder_decompress(dec, d_arc, arc_len, d_out, out_cap, out_len, info, stream,
                                     why, why_len);
  dec->h_copy = NULL;
  return rc;
}

size_t fz_gpu_decoder_series_bytes(const fz_gpu_decoder *dec) {
  return dec != NULL && dec->series_runs >= 2 ? (size_t)dec->series_h.raw_bytes : 0;
}

const char *fz_gpu_decoder_path(const fz_gpu_decoder *dec) {
  return dec->path;
}

int fz_gpu_decompress(fz_gpu_ctx *ctx, const void *d_arc, size_t arc_len, void *d_out,
                      size_t out_cap, size_t *out_len, fz_gpu_stream stream, char *why,
                      size_t why_len) {
  if (ctx == NULL || out_len == NULL || (d_arc == NULL && arc_len))
    return FZ_EINVAL;
  /* The context's own decoder serves callers that keep none, one at a time. */
  pthread_mutex_lock(&ctx->lock);
  int rc = 0;
  if (ctx->dec == NULL)
    rc = fz_gpu_decoder_create(ctx, &ctx->dec, why, why_len);
  if (rc == 0)
    rc = fz_gpu_decoder_decompress(ctx->dec, d_arc, arc_len, d_out, out_cap, out_len, NULL, stream,
                                   why, why_len);
  pthread_mutex_unlock(&ctx->lock);
  return rc;
}
