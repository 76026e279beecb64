/*
 * gpu_plan.c - GPU plans, and the host side of compression and
 * decompression: it validates, lays out the workspace and enqueues the
 * kernels (chain_kernels.cu) on the caller's stream.
 *
 * A GPU plan wraps a CPU plan, which validates the parameters exactly as the
 * CPU backend does and knows the header layout.  Compression never waits for
 * the device except once, at the end, for the archive's size; the range of
 * the data, the quantizer's parameters, the chunk table, the prefix sums,
 * the checksums and the header are all computed on the device, and the
 * seal kernel writes the archive's size and the absolute bound the quantizer
 * enforced to pinned host memory, so a caller learns what it reports
 * without reading the archive, and with no copy back.
 * Decompression is gpu_decode.c.  The ratio preset's chain, and the
 * lossless-ratio preset's, have kernels of their own (ratio.cu): their
 * chunks are staged with their sizes and checksums, scanned, placed, then
 * sealed like the others.
 */
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdio.h>
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

_Static_assert(FZK_EB_PWREL == FZ_EB_PWREL, "the kernels' PWREL is the engine's");

/* What a compression brings back, as the seal kernel writes it to pinned
 * memory: the quantizer's parameters (eb_abs is the bound to report), the
 * archive's size and the data's range, as they lie in the workspace. */
typedef struct plan_back {
  fzk_qparams qp;
  uint64_t total;
  double range[2]; /* the range the parameters came from, for the REL check */
} plan_back;
_Static_assert(offsetof(plan_back, qp) == 0, "the parameters open the copy");
_Static_assert(sizeof(plan_back) % 8 == 0, "the seal kernel copies 8-byte words");

/* Workspace of one compression: byte offsets of each buffer. */
typedef struct ws_layout {
  size_t stage, sizes, crcs, offs, bsum, part, qp, cparts, total, range, scr, tick, bytes;
} ws_layout;

struct fz_gpu_plan {
  fz_gpu_ctx *ctx;
  fz_plan *cpu; /* validation and header layout */
  const fze_header *hdr;
  fzk_desc desc;
  unsigned flags;
  ws_layout ws;
  uint8_t *d_ws;  /* with FZ_GPU_PREALLOC */
  uint8_t *d_tpl; /* the header up to the chunk table, then tickets */
  size_t table_off, q_off, tick_off;
  uint32_t field_shift; /* moves the payload CRC to the header's end */
  plan_back *h_back;    /* pinned: what the last compression's seal kernel wrote */
  uint64_t *d_back;     /* the device's mapping of h_back */
  cudaEvent_t ev0, ev1;
  int have_events;
  void *jit_enc;      /* the generated chunk kernel, or NULL: ahead-of-time */
  int ratio;          /* the ratio preset's kernels (ratio.cu) */
  const fzk_kern *rk; /* theirs as NVRTC compiled them, or NULL: built in */
  uint64_t slots;     /* their launch's blocks (fzre_enc_slots) */
};

/* The staging area, the staged sizes and their scan are for the generic
 * chunk kernels only: the 4-byte word kernels place their chunks
 * themselves, and use offs for the look-back. */
static void layout(ws_layout *w, uint64_t nchunks, size_t cb, size_t header_len, int staged,
                   size_t scratch) {
  size_t o = 0;
  w->stage = o;
  o += staged ? fzk_up256((size_t)nchunks * cb) : 0;
  w->sizes = o;
  o += staged ? fzk_up256(4 * (size_t)nchunks + 4) : 0;
  w->crcs = o;
  o += fzk_up256(4 * (size_t)nchunks + 4);
  w->offs = o;
  o += fzk_up256(8 * ((size_t)nchunks + 2));
  w->bsum = o;
  o += staged ? fzk_up256(8 * ((size_t)fzk_scan_blocks(nchunks) + 1)) : 0;
  w->part = o;
  o += fzk_up256(16 * (size_t)FZK_MM_BLOCKS);
  /* The archive's size follows the quantizer's parameters, so that one
   * copy brings both back (plan_back). */
  w->qp = o;
  w->total = o + offsetof(plan_back, total);
  w->range = o + offsetof(plan_back, range);
  o += fzk_up256(sizeof(plan_back));
  w->cparts = o;
  o += fzk_up256(4 * (size_t)fzk_seal_parts(nchunks, header_len));
  w->scr = o;
  o += fzk_up256(scratch);
  w->tick = o;
  o += scratch ? 256 : 0; /* the ratio kernels' chunk counter */
  w->bytes = o;
}

/* coders64: the 8-byte word coders with a kernel (bit k: k32 == k). */
static void desc_select(fzk_desc *d, const fze_header *h, unsigned coders64) {
  memset(d, 0, sizeof *d);
  d->nst = (uint8_t)h->chain.n;
  d->w = (uint8_t)fz_dtype_size(h->dtype);
  d->fkind = h->dtype == FZ_F32 ? 1 : h->dtype == FZ_F64 ? 2 : 0;
  d->has_quant = fze_chain_has_quant(&h->chain);
  for (unsigned i = 0; i < h->chain.n; i++) {
    d->id[i] = h->chain.st[i].id;
    d->mode[i] = h->chain.st[i].mode;
    d->levels[i] = h->chain.st[i].levels;
  }
  /* Chains on 4-byte words of the form [quant] [diff] coder, the coder
   * bitpack, bitshuffle rze or rze, have kernels of their own
   * (chain32.cu), and so do those on 8-byte words with the coders in
   * coders64 (chain64.cu built bitshuffle rze, and maybe the others; the
   * code generation has every one). */
  unsigned j = d->has_quant, n = h->chain.n;
  unsigned diff = j < n && d->id[j] == FZE_STAGE_DIFF, k = j + diff;
  if ((d->w == 4 || d->w == 8) && k < n) {
    if (n == k + 1 && d->id[k] == FZE_STAGE_BITPACK)
      d->k32 = 1;
    else if (n == k + 1 && d->id[k] == FZE_STAGE_RZE)
      d->k32 = 3;
    else if (n == k + 2 && d->id[k] == FZE_STAGE_BITSHUFFLE && d->id[k + 1] == FZE_STAGE_RZE)
      d->k32 = 2;
    if (d->w == 8 && !((coders64 >> d->k32) & 1u))
      d->k32 = 0;
  }
  if (d->k32) {
    d->k32diff = (uint8_t)diff;
    d->k32nega = diff && d->mode[j] == FZE_MAP_NEGABINARY;
    d->k32lev = d->k32 == 1 ? 0 : d->levels[n - 1];
  }
  d->cb = h->chunk_bytes;
  d->raw_bytes = h->raw_bytes;
  d->nchunks = h->nchunks;
  fzk_desc_layout(d);
}

void fzk_desc_from_header(fzk_desc *d, const fze_header *h) {
  desc_select(d, h, fzk_chain64_coders());
}

#define FZK_C64_EVERY (1u << 1 | 1u << 2 | 1u << 3) /* FZK_C32_BITPACK .. FZK_C32_RZE */
void fzk_desc_from_header_jit(fzk_desc *d, const fze_header *h) {
  desc_select(d, h, FZK_C64_EVERY);
}

int fzk_desc_kernel(fz_gpu_ctx *ctx, const fze_header *h, int dir, fzk_desc *d, void **fn,
                    char *why, size_t why_len) {
  *fn = NULL;
  /* First every coder the generator has; when that kernel is not generated
   * (JIT off, not preferred, or its compile failed) and the built-in
   * kernels lack its coder, the descriptor they have (the generic chunk
   * family), generated or built in: never a kernel this build lacks. */
  fzk_desc_from_header_jit(d, h);
  for (int pass = 0; pass < 2; pass++) {
    int rc;
    if ((ctx->kern != NULL || fzk_jit_preferred(d)) &&
        (rc = fzk_jit_kernel(ctx->jit, d, (fzk_jit_dir)dir, fn)) < 0)
      return rc;
    if (*fn != NULL || pass == 1)
      break;
    fzk_desc b;
    fzk_desc_from_header(&b, h);
    if (b.k32 == d->k32)
      break;
    *d = b;
  }
  if (*fn == NULL && ctx->kern != NULL)
    return fzk_jit_unavailable(ctx, why, why_len);
  return 0;
}

/* Enables the kernels' shared memory once per chunk size.  Plans are made
 * from several host threads (one per daemon worker), so the check and the
 * set-up happen under smem_lock. */
int fzk_kernels_ready(fz_gpu_ctx *ctx, const fzk_desc *d, char *why, size_t why_len) {
  int rc = 0;
  pthread_mutex_lock(&ctx->smem_lock);
  /* Every kernel's shared memory grows with the chunk size alone.  The
   * generated kernels have theirs set as they are loaded. */
  if (ctx->kern == NULL && ctx->smem_ready < d->cb) {
    if ((rc = fzk_cuda_check(fzk_kernels_init(d), "fzk_kernels_init", why, why_len)) < 0)
      goto unlock;
    ctx->smem_ready = d->cb;
  }
unlock:
  pthread_mutex_unlock(&ctx->smem_lock);
  return rc;
}

int fzk_jit_unavailable(fz_gpu_ctx *ctx, char *why, size_t why_len) {
  char text[1024] = "";
  fzk_jit_failure(ctx->jit, text, sizeof text);
  fze_why(why, why_len, "%s runs generated kernels only, and this chain's failed: %s", ctx->name,
          text[0] ? text : "(failed before)");
  return FZ_ECUDA;
}

int fzk_ratio_kernels(fz_gpu_ctx *ctx, const fzk_kern **rk, const char *what, char *why,
                      size_t why_len) {
  *rk = NULL;
  if (ctx->kern == NULL)
    return 0;
  int rc = fzk_jit_ratio(ctx->jit, rk, why, why_len);
  if (rc == 0 || rc == FZ_ENOMEM || rc == FZ_EGPUOOM)
    return rc;
  char text[768];
  snprintf(text, sizeof text, "%s", why != NULL ? why : "");
  fze_why(why, why_len, "the ratio kernels are not available on %s (%s): the CPU engine %s",
          ctx->name, text, what);
  return FZ_ENOSYS;
}

/* Whether FZ_GPU_RATIO_ENCODER asks for the ratio preset's encoder
 * kernels (see fz_gpu_plan_create). */
static bool ratio_encoder_kernels(void) {
  const char *v = getenv("FZ_GPU_RATIO_ENCODER");
  return v != NULL && strcmp(v, "kernels") == 0;
}

/* The descriptor the prep and seal kernels read for a ratio plan (the
 * lossless-ratio preset's has no quantizer: no range, no parameters). */
static void desc_ratio(fzk_desc *d, const fze_header *h) {
  memset(d, 0, sizeof *d);
  d->nst = (uint8_t)h->chain.n;
  d->w = (uint8_t)fz_dtype_size(h->dtype);
  d->fkind = h->dtype == FZ_F32 ? 1 : h->dtype == FZ_F64 ? 2 : 0;
  d->has_quant = fze_chain_has_quant(&h->chain);
  d->cb = h->chunk_bytes;
  d->raw_bytes = h->raw_bytes;
  d->nchunks = h->nchunks;
}

int fz_gpu_plan_create(fz_gpu_ctx *ctx, const fz_params *p, unsigned flags, fz_gpu_plan **out,
                       char *why, size_t why_len) {
  if (ctx == NULL || p == NULL || out == NULL)
    return FZ_EINVAL;
  *out = NULL;
  if (flags & ~(FZ_GPU_PREALLOC | FZ_GPU_TIMING)) {
    fze_why(why, why_len, "unknown plan flags 0x%x", flags);
    return FZ_EINVAL;
  }
  fz_params cp = *p;
  cp.threads = 1;
  fz_gpu_plan *pl = calloc(1, sizeof *pl);
  if (pl == NULL)
    return FZ_ENOMEM;
  pl->ctx = ctx;
  pl->flags = flags;
  uint8_t *tpl = NULL, *zeros = NULL;
  int rc = fz_plan_create(&cp, &pl->cpu, why, why_len);
  if (rc < 0)
    goto err_plan;
  pl->hdr = fze_plan_header(pl->cpu);
  const fze_header *h = pl->hdr;
  if (h->nchunks >= (1u << 31)) {
    fze_why(why, why_len, "too many chunks for one grid: %llu", (unsigned long long)h->nchunks);
    rc = FZ_ESHAPE;
    goto err_plan;
  }
  if (fze_chain_has_quant(&h->chain) && h->chain.st[0].has_fill) {
    fze_why(why, why_len,
            "the GPU kernels have no fill values yet: the CPU engine "
            "compresses this chain");
    rc = FZ_ENOSYS;
    goto err_plan;
  }
  pl->ratio = fzk_ratio_chain(h);
  if (!pl->ratio && (fze_chain_has_ratio(&h->chain) || h->chunk_bytes > FZ_CHUNK_MAX)) {
    fze_why(why, why_len,
            "the GPU kernels code the ratio preset's chain (quant | interp | "
            "huffman | rze, or lorenzo in interp's place) and lorenzo | byteplanes on 4- "
            "and 8-byte words but no other with a lorenzo, interp, huffman or byteplanes "
            "stage or chunks above 32 KiB: the CPU engine compresses this chain");
    rc = FZ_ENOSYS;
    goto err_plan;
  }
  /* The ratio preset's encoder kernels (quant | interp or lorenzo | huffman
   * | rze) made archives on an H100 that differ from the CPU engine's, and
   * whose values broke the bound, though their host models match the
   * engine byte for byte (docs/gpu.md, "The ratio preset's encoder"): the
   * CPU engine compresses these chains unless FZ_GPU_RATIO_ENCODER is
   * "kernels", which the GPU tests set to keep checking the kernels. */
  if (pl->ratio && !fzk_ratio_form_of(h).planes && !ratio_encoder_kernels()) {
    fze_why(why, why_len,
            "the GPU encoder of the ratio preset's chain does not yet make the CPU "
            "engine's archives on a GPU: the CPU engine compresses this chain "
            "(FZ_GPU_RATIO_ENCODER=kernels runs the kernels)");
    rc = FZ_ENOSYS;
    goto err_plan;
  }
  if ((rc = fzk_cuda_check(cudaSetDevice(ctx->device), "cudaSetDevice", why, why_len)) < 0)
    goto err_plan;
  /* A GPU the built-in kernels cannot run on takes them from NVRTC; where
   * they do not compile the CPU engine compresses (the log says why). */
  if (pl->ratio &&
      (rc = fzk_ratio_kernels(ctx, &pl->rk, "compresses this chain", why, why_len)) < 0)
    goto err_plan;
  if (pl->ratio) {
    desc_ratio(&pl->desc, h);
    pl->slots = fzre_enc_slots(h->nchunks, ctx->nsm);
    layout(&pl->ws, h->nchunks, h->chunk_bytes, h->header_len, 1,
           fzre_scratch_bytes(h->chunk_bytes, pl->desc.w, fzk_ratio_form_of(h).levels, pl->slots));
  } else {
    /* The generated kernel where it compiles; a failure leaves the
     * ahead-of-time one (and its text in the context), and the
     * descriptor that kernel has. */
    if ((rc = fzk_desc_kernel(ctx, h, FZK_JIT_ENCODE, &pl->desc, &pl->jit_enc, why, why_len)) < 0)
      goto err_plan;
    layout(&pl->ws, h->nchunks, h->chunk_bytes, h->header_len, !pl->desc.k32, 0);
  }
  pl->table_off = h->header_len - 4 - (size_t)h->table_w * h->nchunks;
  pl->q_off = pl->desc.has_quant ? 19 + 8 * (size_t)h->ndims : 0;
  pl->tick_off = (pl->table_off + 7) & ~(size_t)7;
  pl->field_shift = fzk_crc_xpow8(h->header_len - pl->table_off);

  /* The header with placeholder quantizer values, checksums and table: the
   * device copies the part before the table and fills in the rest. */
  rc = FZ_ENOMEM;
  tpl = malloc(h->header_len);
  zeros = calloc(1, (size_t)h->table_w * h->nchunks + 1);
  if (tpl == NULL || zeros == NULL)
    goto err_plan;
  fze_header th = *h;
  th.sizes = zeros;
  th.payload_crc = 0;
  fze_header_write(&th, tpl);

  rc = pl->ratio ? 0 : fzk_kernels_ready(ctx, &pl->desc, why, why_len);
  if (rc < 0)
    goto err_plan;
  /* The prep and seal kernels' tickets (fzk_last_block) follow the template,
   * zeroed once: each launch leaves them zero. */
  if ((rc = fzk_cuda_check(cudaMalloc((void **)&pl->d_tpl, pl->tick_off + 8), "cudaMalloc", why,
                           why_len)) < 0)
    goto err_plan;
  if ((rc = fzk_cuda_check(cudaMemset(pl->d_tpl, 0, pl->tick_off + 8), "cudaMemset", why,
                           why_len)) < 0)
    goto err_plan;
  if ((rc = fzk_cuda_check(cudaMemcpy(pl->d_tpl, tpl, pl->table_off, cudaMemcpyHostToDevice),
                           "cudaMemcpy", why, why_len)) < 0)
    goto err_plan;
  if ((rc = fzk_cuda_check(cudaMallocHost((void **)&pl->h_back, sizeof *pl->h_back),
                           "cudaMallocHost", why, why_len)) < 0)
    goto err_plan;
  if ((rc = fzk_cuda_check(cudaHostGetDevicePointer((void **)&pl->d_back, pl->h_back, 0),
                           "cudaHostGetDevicePointer", why, why_len)) < 0)
    goto err_plan;
  if (flags & FZ_GPU_PREALLOC) {
    if ((rc = fzk_cuda_check(
             cudaMallocFromPoolAsync((void **)&pl->d_ws, pl->ws.bytes, ctx->pool, ctx->streams[0]),
             "cudaMallocFromPoolAsync", why, why_len)) < 0)
      goto err_plan;
    if ((rc = fzk_cuda_check(cudaStreamSynchronize(ctx->streams[0]), "cudaStreamSynchronize", why,
                             why_len)) < 0)
      goto err_plan;
  }
  if (flags & FZ_GPU_TIMING) {
    if ((rc = fzk_cuda_check(cudaEventCreate(&pl->ev0), "cudaEventCreate", why, why_len)) < 0)
      goto err_plan;
    if ((rc = fzk_cuda_check(cudaEventCreate(&pl->ev1), "cudaEventCreate", why, why_len)) < 0)
      goto err_plan;
    pl->have_events = 1;
  }
  free(tpl);
  free(zeros);
  *out = pl;
  return 0;
err_plan:
  free(tpl);
  free(zeros);
  fz_gpu_plan_destroy(pl);
  return rc;
}

void fz_gpu_plan_destroy(fz_gpu_plan *pl) {
  if (pl == NULL)
    return;
  cudaSetDevice(pl->ctx->device);
  if (pl->d_ws) {
    cudaFreeAsync(pl->d_ws, pl->ctx->streams[0]);
    cudaStreamSynchronize(pl->ctx->streams[0]);
  }
  cudaFree(pl->d_tpl);
  cudaFreeHost(pl->h_back);
  if (pl->have_events) {
    cudaEventDestroy(pl->ev0);
    cudaEventDestroy(pl->ev1);
  }
  cudaGetLastError();
  fz_plan_destroy(pl->cpu);
  free(pl);
}

size_t fz_gpu_plan_input_bytes(const fz_gpu_plan *pl) {
  return fz_plan_input_bytes(pl->cpu);
}
size_t fz_gpu_plan_compress_bound(const fz_gpu_plan *pl) {
  return fz_plan_compress_bound(pl->cpu);
}
size_t fz_gpu_plan_workspace_bytes(const fz_gpu_plan *pl) {
  return pl->ws.bytes;
}
const char *fz_gpu_plan_chain(const fz_gpu_plan *pl) {
  return fz_plan_chain(pl->cpu);
}
const char *fz_gpu_plan_path(const fz_gpu_plan *pl) {
  return pl->jit_enc || pl->rk ? "jit" : "aot";
}
double fz_gpu_plan_eb_abs(const fz_gpu_plan *pl) {
  return pl->desc.has_quant ? pl->h_back->qp.eb_abs : 0.0;
}

int fz_gpu_plan_kernel_ms(fz_gpu_plan *pl, float *ms) {
  if (pl == NULL || ms == NULL || !pl->have_events)
    return FZ_EINVAL;
  char why[8];
  size_t why_len = sizeof why;
  int rc = 0;
  if ((rc = fzk_cuda_check(cudaEventSynchronize(pl->ev1), "cudaEventSynchronize", why, why_len)) <
      0)
    return rc;
  if ((rc = fzk_cuda_check(cudaEventElapsedTime(ms, pl->ev0, pl->ev1), "cudaEventElapsedTime", why,
                           why_len)) < 0)
    return rc;
  return 0;
}

int fz_gpu_compress(fz_gpu_plan *pl, const void *d_in, size_t in_len, void *d_out, size_t out_cap,
                    size_t *out_len, fz_gpu_stream stream, char *why, size_t why_len) {
  if (pl == NULL || out_len == NULL || d_out == NULL || (d_in == NULL && in_len))
    return FZ_EINVAL;
  const fze_header *h = pl->hdr;
  const fzk_desc *d = &pl->desc;
  fz_gpu_ctx *ctx = pl->ctx;
  if (in_len != h->raw_bytes)
    return FZ_ESIZE;
  if (out_cap < h->header_len)
    return FZ_ENOSPC;
  if ((uintptr_t)d_in % d->w != 0) {
    fze_why(why, why_len, "input not aligned to its %u-byte elements", d->w);
    return FZ_EINVAL;
  }
  /* NULL is the default stream, which orders this call after the caller's
   * plain cudaMemcpy calls. */
  cudaStream_t s = stream;
  int rc = 0;
  uint8_t *ws = pl->d_ws, *out = d_out;
  if ((rc = fzk_cuda_check(cudaSetDevice(ctx->device), "cudaSetDevice", why, why_len)) < 0)
    return rc;
  if (ws == NULL &&
      (rc = fzk_cuda_check(cudaMallocFromPoolAsync((void **)&ws, pl->ws.bytes, ctx->pool, s),
                           "cudaMallocFromPoolAsync", why, why_len)) < 0)
    return rc;
  const ws_layout *L = &pl->ws;
  uint32_t *sizes = (uint32_t *)(ws + L->sizes), *crcs = (uint32_t *)(ws + L->crcs);
  uint64_t *offs = (uint64_t *)(ws + L->offs), *total = (uint64_t *)(ws + L->total);
  fzk_qparams *qp = (fzk_qparams *)(ws + L->qp);
  uint32_t *cparts = (uint32_t *)(ws + L->cparts);
  if (pl->have_events &&
      (rc = fzk_cuda_check(cudaEventRecord(pl->ev0, s), "cudaEventRecord", why, why_len)) < 0)
    goto err_ws;
  /* Three launches: prep (range, quantizer parameters, zeroed look-back
   * and CRC words, header template), the chunks, seal (checksums). */
  uint32_t *tickets = (uint32_t *)(pl->d_tpl + pl->tick_off);
  const fze_stage *q = &h->chain.st[0];
  const fzk_prep prep = {.d_in = d_in,
                         .n = h->n_elems,
                         .range = d->has_quant && q->mode != FZ_EB_PWREL,
                         .mode = q->mode,
                         .eb = q->eb,
                         .d_part = (double *)(ws + L->part),
                         .d_qp = qp,
                         .d_range = (double *)(ws + L->range),
                         /* Chunks placed by look-back: offs holds the look-back words, and the
                          * chunk CRCs are summed into zeroed words. */
                         .d_zero = crcs,
                         .zero_words = d->k32 ? (L->offs - L->crcs) / 4 + 2 * (h->nchunks + 2) : 0,
                         .d_tpl = pl->d_tpl,
                         .tpl_len = pl->table_off,
                         .q_off = pl->q_off,
                         .d_out = out,
                         .d_ticket = tickets};
  if ((rc = fzk_cuda_check(fzk_launch_prep(ctx->kern, d, &prep, s), "fzk_launch_prep", why,
                           why_len)) < 0)
    goto err_ws;
  if (pl->ratio) {
    const fzk_ratio_form f = fzk_ratio_form_of(h);
    fzre_params rp = {.in = d_in,
                      .raw_bytes = h->raw_bytes,
                      .nchunks = h->nchunks,
                      .cb = h->chunk_bytes,
                      .w = d->w,
                      .levels = f.levels,
                      .pdims = f.pdims,
                      .lorenzo = f.lorenzo,
                      .planes = f.planes,
                      .pwrel = f.pwrel,
                      .lv = f.lv,
                      .hform = f.hform,
                      .qp = d->has_quant ? (const double *)qp : NULL,
                      .slots = pl->slots,
                      .scratch = ws + L->scr,
                      .ticket = (uint64_t *)(ws + L->tick),
                      .stage = ws + L->stage,
                      .sizes = sizes,
                      .crcs = crcs,
                      .crc_tab = ctx->d_tab};
    memcpy(rp.ext, f.ext, sizeof rp.ext);
    if ((rc = fzk_cuda_check(fzre_launch_encode(pl->rk, &rp, s), "fzre_launch_encode", why,
                             why_len)) < 0)
      goto err_ws;
    if ((rc = fzk_cuda_check(fzk_launch_scan(ctx->kern, h->nchunks, sizes, NULL,
                                             (uint64_t *)(ws + L->bsum), offs, NULL, s),
                             "fzk_launch_scan", why, why_len)) < 0)
      goto err_ws;
    if ((rc = fzk_cuda_check(fzre_launch_place(pl->rk, ws + L->stage, sizes, offs, h->nchunks,
                                               h->chunk_bytes, out, out_cap, h->header_len,
                                               pl->table_off, s),
                             "fzre_launch_place", why, why_len)) < 0)
      goto err_ws;
  } else if (d->k32) {
    if (pl->jit_enc != NULL)
      rc = fzk_cuda_check(fzk_jit_launch_encode32(pl->jit_enc, d, d_in, qp, out, out_cap,
                                                  h->header_len, pl->table_off, crcs, offs,
                                                  ctx->d_tab, s),
                          "fzk_jit_launch_encode32", why, why_len);
    else
      rc = fzk_cuda_check(fzk_launch_encode32(d, d_in, qp, out, out_cap, h->header_len,
                                              pl->table_off, crcs, offs, ctx->d_tab, s),
                          "fzk_launch_encode32", why, why_len);
    if (rc < 0)
      goto err_ws;
  } else {
    int in_vec = (uintptr_t)d_in % 16 == 0;
    if ((rc = fzk_cuda_check(
             fzk_launch_encode(d, pl->jit_enc, d_in, in_vec, qp, ws + L->stage, sizes, s),
             "fzk_launch_encode", why, why_len)) < 0)
      goto err_ws;
    if ((rc = fzk_cuda_check(fzk_launch_scan(ctx->kern, h->nchunks, sizes, NULL,
                                             (uint64_t *)(ws + L->bsum), offs, NULL, s),
                             "fzk_launch_scan", why, why_len)) < 0)
      goto err_ws;
    if ((rc = fzk_cuda_check(fzk_launch_place(ctx->kern, d, ws + L->stage, sizes, offs, ctx->d_tab,
                                              out, out_cap, h->header_len, pl->table_off, crcs, s),
                             "fzk_launch_place", why, why_len)) < 0)
      goto err_ws;
  }
  /* Either way offs[nchunks] is now the payload's length. */
  const fzk_seal seal = {.d_crcs = crcs,
                         .nchunks = h->nchunks,
                         .d_out = out,
                         .header_len = h->header_len,
                         .table_off = pl->table_off,
                         .field_shift = pl->field_shift,
                         .d_end = offs + h->nchunks,
                         .d_total = total,
                         .d_parts = cparts,
                         .d_ticket = tickets + 1,
                         .d_back = (const uint64_t *)qp,
                         .h_back = pl->d_back,
                         .back_words = sizeof *pl->h_back / 8};
  if ((rc = fzk_cuda_check(fzk_launch_seal(ctx->kern, &seal, ctx->d_tab, s), "fzk_launch_seal", why,
                           why_len)) < 0)
    goto err_ws;
  if (pl->have_events &&
      (rc = fzk_cuda_check(cudaEventRecord(pl->ev1, s), "cudaEventRecord", why, why_len)) < 0)
    goto err_ws;
  if (pl->d_ws == NULL &&
      (rc = fzk_cuda_check(cudaFreeAsync(ws, s), "cudaFreeAsync", why, why_len)) < 0)
    return rc;
  if ((rc = fzk_cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize", why, why_len)) < 0)
    return rc;
  *out_len = (size_t)pl->h_back->total;
  /* The CPU refuses a REL bound whose product with the range is beyond
   * what the quantizer takes, before it writes anything; the range is known
   * here only now, so the archive written is disowned. */
  if (d->has_quant && q->mode == FZ_EB_REL &&
      (rc = fze_quant_check_range(q, pl->h_back->range[0], pl->h_back->range[1], why, why_len)) < 0)
    return rc;
  return *out_len > out_cap ? FZ_ENOSPC : 0;
err_ws:
  if (pl->d_ws == NULL)
    cudaFreeAsync(ws, s);
  return rc;
}
