/*
 * plan.c - plans (a validated job shape with its buffers) and the chunk
 * drivers for compression and decompression on CPU threads.
 *
 * A plan is created once per (dtype, shape, pipeline, bound) and owns every
 * buffer a compression needs, so repeated same-shape jobs allocate nothing.
 * Chunks are split into one contiguous range per thread.  With a single
 * thread, or an output smaller than the compress bound, chunks are written in
 * order; otherwise each thread writes its range at the range's uncompressed
 * offset (the bound guarantees room) and the ranges are closed up afterwards.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "archive.h"
#include "engine.h"
#include "ops.h"

struct fz_plan {
  fze_header hdr;          /* shape and chain; eb_abs/step set per call */
  size_t width, chunk_elems;
  unsigned threads;
  fze_scratch *scratch;    /* one per thread */
  uint8_t *chunk_out;      /* one chunk_bytes buffer per thread */
  uint8_t *sizes;          /* the chunk table being built */
  uint32_t *crcs;          /* per-chunk checksums */
  char chain_text[256];
  char error[256];         /* why the last fz_plan_compress() failed */
};

/* ---- a minimal parallel-for over [0, n) in contiguous ranges ---- */

typedef void (*range_fn)(void *ctx, unsigned tid, uint64_t lo, uint64_t hi);

typedef struct worker {
  pthread_t th;
  range_fn fn;
  void *ctx;
  unsigned tid;
  uint64_t lo, hi;
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  w->fn(w->ctx, w->tid, w->lo, w->hi);
  return NULL;
}

/* Runs fn over `threads` ranges (fewer when there are fewer items) and
 * returns how many; the caller's thread takes range 0.  When a thread cannot
 * be started its range runs on the caller, so the work is done either way. */
static unsigned parallel_ranges(unsigned threads, uint64_t n, range_fn fn, void *ctx) {
  if (threads > n)
    threads = n ? (unsigned)n : 1;
  worker ws[threads];
  for (unsigned t = 0; t < threads; t++) {
    ws[t] = (worker){.fn = fn, .ctx = ctx, .tid = t,
                     .lo = n * t / threads, .hi = n * (t + 1) / threads};
  }
  bool started[threads];
  for (unsigned t = 1; t < threads; t++)
    started[t] = pthread_create(&ws[t].th, NULL, worker_main, &ws[t]) == 0;
  fn(ctx, 0, ws[0].lo, ws[0].hi);
  for (unsigned t = 1; t < threads; t++) {
    if (started[t])
      pthread_join(ws[t].th, NULL);
    else
      fn(ctx, t, ws[t].lo, ws[t].hi);
  }
  return threads;
}

/* ---- plans ---- */

static unsigned clamp_threads(unsigned t) { return t == 0 ? 1 : t > 256 ? 256 : t; }

/* A quantizing chain whose last stage is no coder (rze, bitpack, huffman or
 * byteplanes) never
 * makes a chunk smaller than its words, so every chunk would be stored raw
 * and the bound bought nothing: refused here, for new archives only (the
 * decoder still reads such chains). */
static int check_coder(const fze_chain *c, char *why, size_t why_len) {
  uint8_t last = c->st[c->n - 1].id;
  if (last == FZE_STAGE_RZE || last == FZE_STAGE_BITPACK || last == FZE_STAGE_HUFFMAN ||
      last == FZE_STAGE_BYTEPLANES)
    return 0;
  char text[256];
  fze_chain_format(c, text, sizeof text);
  fze_why(why, why_len,
          "'%s' cannot compress: it ends without a coder, so every chunk would be "
          "stored raw; end it with rze or bitpack (as in '%s | bitshuffle | rze' or "
          "'%s | bitpack')", text, text, text);
  return FZ_EPIPELINE;
}

/* The job's bound against the chain's: a chain's quant stage without eb or
 * mode takes the job's; a job that gives a bound (eb > 0) gives it with its
 * mode (default rel), and must agree with every one the chain names.  eb 0
 * means "no bound given", and then the job's mode, which always has a
 * value, does not count either.  The fill value follows the same rule.
 * Then every parameter is checked against what the quantizer and the
 * decoder accept. */
static int resolve_quant(fze_stage *q, const fz_params *p, char *why, size_t why_len) {
  const char *cm = fz_eb_mode_name((fz_eb_mode)q->mode);
  if (!(p->eb >= 0) || !isfinite(p->eb)) {
    fze_why(why, why_len, "error bound %s is not a positive number", fze_num(p->eb).s);
    return FZ_EBOUND;
  }
  bool job_bound = p->eb > 0;
  if (job_bound && (unsigned)p->eb_mode > FZ_EB_PWREL) {
    fze_why(why, why_len, "unknown error-bound mode %d", (int)p->eb_mode);
    return FZ_EBOUND;
  }
  const char *jm = job_bound ? fz_eb_mode_name(p->eb_mode) : NULL;
  if (job_bound && ((q->has_eb && q->eb != p->eb) ||
                    (q->has_mode && q->mode != (uint8_t)p->eb_mode))) {
    char cb[64] = "";
    if (q->has_eb)
      snprintf(cb, sizeof cb, "eb=%s%s", fze_num(q->eb).s, q->has_mode ? "," : "");
    fze_why(why, why_len,
            "the job's bound eb=%s mode=%s disagrees with the chain's quant(%s%s%s): "
            "give the bound in one place, or the same in both",
            fze_num(p->eb).s, jm, cb, q->has_mode ? "mode=" : "", q->has_mode ? cm : "");
    return FZ_EPIPELINE;
  }
  if (p->has_fill && q->has_fill && fzo_f64_bits(p->fill_value) != fzo_f64_bits(q->fill)) {
    fze_why(why, why_len,
            "the job's fill value %s disagrees with the chain's fill=%s: give it "
            "in one place, or the same in both", fze_num(p->fill_value).s, fze_num(q->fill).s);
    return FZ_EPIPELINE;
  }
  if (!q->has_mode) {
    if ((unsigned)p->eb_mode > FZ_EB_PWREL) {
      fze_why(why, why_len, "unknown error-bound mode %d", (int)p->eb_mode);
      return FZ_EBOUND;
    }
    q->mode = (uint8_t)p->eb_mode;
  }
  if (!q->has_eb) {
    if (!job_bound) {
      fze_why(why, why_len, "a lossy pipeline needs an error bound: give eb (in the "
                            "job or as quant(eb=...)), or use the lossless preset");
      return FZ_EBOUND;
    }
    q->eb = p->eb;
  }
  if (p->has_fill && !q->has_fill) {
    q->fill = p->fill_value;
    q->has_fill = true;
  }
  /* The plan's chain names every parameter from here on. */
  q->has_eb = q->has_mode = true;
  const char *m = fz_eb_mode_name((fz_eb_mode)q->mode);
  if (q->mode == FZ_EB_PWREL && !(q->eb < 1)) {
    fze_why(why, why_len, "pwrel bound %s is out of range: a pointwise relative "
                          "bound must be above 0 and below 1", fze_num(q->eb).s);
    return FZ_EBOUND;
  }
  /* Bins are up to 2 * eb wide (REL: 2 * eb * range, checked again on the
   * data): beyond this they overflow and the decoder would refuse the
   * archive. */
  if (q->mode != FZ_EB_PWREL && !(q->eb <= FZE_EB_ABS_MAX)) {
    fze_why(why, why_len, "%s bound %s is out of range: accepted 0 < eb <= %s",
            m, fze_num(q->eb).s, fze_num(FZE_EB_ABS_MAX).s);
    return FZ_EBOUND;
  }
  if (q->has_fill) {
    if (!isfinite(q->fill)) {
      fze_why(why, why_len, "fill value %s is not finite (NaN and Inf are always kept "
                            "exactly)", fze_num(q->fill).s);
      return FZ_EBOUND;
    }
    /* An f32 array holds the fill rounded to a float; one that overflows
     * (checked before converting, which would be undefined), or underflows
     * to zero, names no float the producer could have written. */
    if (p->dtype == FZ_F32 &&
        (!(fabs(q->fill) < FZE_F32_FILL_LIMIT) || ((float)q->fill == 0 && q->fill != 0))) {
      fze_why(why, why_len, "fill value %s is not representable in f32 (finite "
                            "magnitudes from %.9g to %.9g, or 0)",
              fze_num(q->fill).s, 0x1p-149, (double)FLT_MAX);
      return FZ_EBOUND;
    }
  }
  return 0;
}

int fz_plan_create(const fz_params *p, fz_plan **out, char *why, size_t why_len) {
  if (p == NULL || out == NULL)
    return FZ_EINVAL;
  *out = NULL;
  size_t w = fz_dtype_size(p->dtype);
  if (w == 0) {
    fze_why(why, why_len, "unknown dtype %d", (int)p->dtype);
    return FZ_EDTYPE;
  }
  fz_plan *pl = calloc(1, sizeof *pl);
  if (pl == NULL)
    return FZ_ENOMEM;
  fze_header *h = &pl->hdr;
  int rc = fze_chain_parse(p->pipeline ? p->pipeline : "balanced", &h->chain,
                           why, why_len);
  if (rc < 0)
    goto err_plan;
  if ((rc = fze_chain_check(&h->chain, p->dtype, why, why_len)) < 0)
    goto err_plan;
  /* The ratio stages predict across rows and planes of the array, so they
   * take larger chunks (format version 3); other chains keep theirs. */
  bool ratio = fze_chain_has_ratio(&h->chain);
  unsigned cb = p->chunk_bytes ? p->chunk_bytes
                : ratio        ? FZ_CHUNK_RATIO_DEFAULT
                               : FZ_CHUNK_DEFAULT;
  unsigned cmax = ratio ? FZ_CHUNK_RATIO_MAX : FZ_CHUNK_MAX;
  if (cb < FZ_CHUNK_MIN || cb > cmax || (cb & (cb - 1))) {
    fze_why(why, why_len, "chunk size %u is not a power of two in %u..%u%s", cb,
            FZ_CHUNK_MIN, cmax, ratio ? "" : " (up to 1048576 with the ratio stages)");
    rc = FZ_EINVAL;
    goto err_plan;
  }
  if (fze_chain_has_quant(&h->chain) &&
      ((rc = resolve_quant(&h->chain.st[0], p, why, why_len)) < 0 ||
       (rc = check_coder(&h->chain, why, why_len)) < 0))
    goto err_plan;
  h->dtype = p->dtype;
  h->ndims = p->ndims;
  memcpy(h->dims, p->dims, sizeof h->dims);
  h->chunk_bytes = cb;
  if (fze_shape_size(p->ndims, p->dims, w, &h->n_elems, &h->raw_bytes) < 0 ||
      h->raw_bytes > SIZE_MAX / 2) {
    fze_why(why, why_len, "invalid shape: %u dimensions, or too large", p->ndims);
    rc = FZ_ESHAPE;
    goto err_plan;
  }
  if ((rc = fze_chain_resolve_shape(&h->chain, h->ndims, h->dims, why, why_len)) < 0)
    goto err_plan;
  h->nchunks = (h->raw_bytes + cb - 1) / cb;
  h->version = fze_format_version(&h->chain, cb);
  fze_chain_set_version(&h->chain, h->version);
  h->table_w = fze_table_width(h->version);
  h->header_len = fze_header_len(&h->chain, h->ndims, h->nchunks, h->table_w);
  pl->width = w;
  pl->chunk_elems = cb / w;
  pl->threads = clamp_threads(p->threads);
  fze_chain_format(&h->chain, pl->chain_text, sizeof pl->chain_text);

  rc = FZ_ENOMEM;
  pl->scratch = calloc(pl->threads, sizeof *pl->scratch);
  pl->chunk_out = malloc((size_t)pl->threads * cb);
  pl->sizes = malloc(h->table_w * (size_t)h->nchunks + 1);
  pl->crcs = malloc(4 * (size_t)h->nchunks + 4);
  if (!pl->scratch || !pl->chunk_out || !pl->sizes || !pl->crcs)
    goto err_plan;
  for (unsigned t = 0; t < pl->threads; t++)
    if (fze_scratch_init(&pl->scratch[t], cb) < 0)
      goto err_plan;
  *out = pl;
  return 0;

err_plan:
  fz_plan_destroy(pl);
  return rc;
}

void fz_plan_destroy(fz_plan *pl) {
  if (pl == NULL)
    return;
  if (pl->scratch)
    for (unsigned t = 0; t < pl->threads; t++)
      fze_scratch_free(&pl->scratch[t]);
  free(pl->scratch);
  free(pl->chunk_out);
  free(pl->sizes);
  free(pl->crcs);
  free(pl);
}

size_t fz_plan_input_bytes(const fz_plan *pl) { return (size_t)pl->hdr.raw_bytes; }

size_t fz_plan_compress_bound(const fz_plan *pl) {
  return pl->hdr.header_len + (size_t)pl->hdr.raw_bytes;
}

const char *fz_plan_chain(const fz_plan *pl) { return pl->chain_text; }

/* What fz_plan_create() allocated: the sizes of its allocations, written as
 * they are made there (each thread's scratch is four buffers of its cap). */
size_t fz_plan_workspace_bytes(const fz_plan *pl) {
  size_t bytes = sizeof *pl + (size_t)pl->threads * (sizeof *pl->scratch + pl->hdr.chunk_bytes) +
                 2 * (size_t)pl->hdr.nchunks + 1 + 4 * (size_t)pl->hdr.nchunks + 4;
  for (unsigned t = 0; t < pl->threads; t++)
    bytes += 4 * pl->scratch[t].cap;
  return bytes;
}

const char *fz_plan_error(const fz_plan *pl) { return pl->error; }

const fze_header *fze_plan_header(const fz_plan *pl) { return &pl->hdr; }

/* ---- compression ---- */

typedef struct compress_job {
  fz_plan *pl;
  const uint8_t *in;
  uint8_t *out;
  size_t out_cap;
  bool in_place;       /* ranges written at their uncompressed offsets */
  size_t start[256];   /* where each range began writing */
  uint64_t used[256];  /* bytes written by each range */
  int rc[256];
} compress_job;

static void compress_range(void *ctx, unsigned tid, uint64_t lo, uint64_t hi) {
  compress_job *j = ctx;
  fz_plan *pl = j->pl;
  const fze_header *h = &pl->hdr;
  uint8_t *buf = pl->chunk_out + (size_t)tid * h->chunk_bytes;
  size_t pos = h->header_len + (j->in_place ? (size_t)lo * h->chunk_bytes : 0);
  size_t start = pos;
  j->start[tid] = start;
  for (uint64_t i = lo; i < hi; i++) {
    size_t off = (size_t)i * h->chunk_bytes;
    size_t bytes = h->raw_bytes - off < h->chunk_bytes ? h->raw_bytes - off
                                                       : h->chunk_bytes;
    /* A coded chunk is never longer than the chunk itself: with that much
     * room left it is written in place, else through buf and checked. */
    size_t room = j->out_cap - pos;
    uint8_t *dst = room >= bytes ? j->out + pos : buf;
    size_t len = fze_chunk_encode(&h->chain, h->dtype, j->in + off, bytes / pl->width,
                                  off / pl->width, dst, &pl->scratch[tid]);
    if (dst == buf) {
      if (len > room) {
        j->rc[tid] = FZ_ENOSPC;
        return;
      }
      memcpy(j->out + pos, buf, len);
    }
    pl->crcs[i] = fze_crc32c(0, j->out + pos, len);
    pos += len;
    fze_chunk_size_put(pl->sizes, h->table_w, i, len);
  }
  j->used[tid] = pos - start;
}

/* The payload checksum is the CRC-32C of the chunks' CRC-32Cs (little-endian
 * u32 each), so chunks can be checksummed in parallel on any backend. */
static uint32_t payload_crc(const uint32_t *crcs, uint64_t n) {
  uint32_t c = 0;
  uint8_t buf[256];
  for (uint64_t i = 0; i < n;) {
    size_t k = 0;
    for (; k < sizeof buf && i < n; k += 4, i++) {
      buf[k] = (uint8_t)crcs[i];
      buf[k + 1] = (uint8_t)(crcs[i] >> 8);
      buf[k + 2] = (uint8_t)(crcs[i] >> 16);
      buf[k + 3] = (uint8_t)(crcs[i] >> 24);
    }
    c = fze_crc32c(c, buf, k);
  }
  return c;
}

int fz_plan_compress(fz_plan *pl, const void *in, size_t in_len, void *out,
                     size_t out_cap, size_t *out_len) {
  if (pl == NULL || out == NULL || out_len == NULL || (in == NULL && in_len))
    return FZ_EINVAL;
  fze_header *h = &pl->hdr;
  if (in_len != h->raw_bytes)
    return FZ_ESIZE;
  if (out_cap < h->header_len)
    return FZ_ENOSPC;
  pl->error[0] = 0;
  if (fze_chain_has_quant(&h->chain)) {
    int rc = fze_quant_resolve(&h->chain.st[0], h->dtype, in, (size_t)h->n_elems,
                               pl->error, sizeof pl->error);
    if (rc < 0)
      return rc;
  }
  compress_job j = {.pl = pl, .in = in, .out = out, .out_cap = out_cap};
  unsigned threads = pl->threads;
  j.in_place = threads > 1 && out_cap >= fz_plan_compress_bound(pl);
  if (!j.in_place)
    threads = 1;
  unsigned ranges = parallel_ranges(threads, h->nchunks, compress_range, &j);
  for (unsigned t = 0; t < ranges; t++)
    if (j.rc[t] < 0)
      return j.rc[t];
  /* Close up the ranges, in order. */
  size_t total = h->header_len;
  for (unsigned t = 0; t < ranges; t++) {
    if (j.start[t] != total)
      memmove((uint8_t *)out + total, (uint8_t *)out + j.start[t], j.used[t]);
    total += j.used[t];
  }
  h->sizes = pl->sizes;
  h->payload_crc = payload_crc(pl->crcs, h->nchunks);
  fze_header_write(h, out);
  *out_len = total;
  return 0;
}

/* ---- decompression ---- */

typedef struct decompress_job {
  const fze_header *h;
  const uint8_t *arc;
  uint8_t *out;
  uint32_t *crcs;
  int rc[256];
} decompress_job;

static void decompress_range(void *ctx, unsigned tid, uint64_t lo, uint64_t hi) {
  decompress_job *j = ctx;
  const fze_header *h = j->h;
  fze_scratch s;
  if (fze_scratch_init(&s, h->chunk_bytes) < 0) {
    j->rc[tid] = FZ_ENOMEM;
    return;
  }
  size_t pos = h->header_len;
  for (uint64_t i = 0; i < lo; i++)
    pos += fze_chunk_size_at(h, i);
  for (uint64_t i = lo; i < hi; i++) {
    size_t len = fze_chunk_size_at(h, i);
    size_t off = (size_t)i * h->chunk_bytes;
    size_t bytes = h->raw_bytes - off < h->chunk_bytes ? h->raw_bytes - off
                                                       : h->chunk_bytes;
    j->crcs[i] = fze_crc32c(0, j->arc + pos, len);
    size_t w = fz_dtype_size(h->dtype);
    int rc = fze_chunk_decode(&h->chain, h->dtype, j->arc + pos, len, bytes / w, off / w,
                              j->out + off, &s);
    if (rc < 0) {
      j->rc[tid] = rc;
      break;
    }
    pos += len;
  }
  fze_scratch_free(&s);
}

void fze_header_info(const fze_header *h, size_t arc_len, fz_archive_info *info) {
  memset(info, 0, sizeof *info);
  info->dtype = h->dtype;
  info->ndims = h->ndims;
  memcpy(info->dims, h->dims, sizeof h->dims);
  info->raw_bytes = h->raw_bytes;
  info->archive_bytes = arc_len;
  info->chunks = h->nchunks;
  if (fze_chain_has_quant(&h->chain)) {
    info->eb_abs = h->chain.st[0].eb_abs;
    info->has_fill = h->chain.st[0].has_fill;
    info->fill_value = h->chain.st[0].has_fill ? h->chain.st[0].fill : 0;
  }
  fze_chain_format(&h->chain, info->chain, sizeof info->chain);
}

int fz_archive_inspect(const void *arc, size_t arc_len, fz_archive_info *info) {
  if (arc == NULL || info == NULL)
    return FZ_EINVAL;
  fze_header h;
  int rc = fze_header_parse(arc, arc_len, &h);
  if (rc < 0)
    return rc;
  fze_header_info(&h, arc_len, info);
  return 0;
}

int fz_decompress(const void *arc, size_t arc_len, void *out, size_t out_cap,
                  size_t *out_len, unsigned threads) {
  if (arc == NULL || out_len == NULL)
    return FZ_EINVAL;
  fze_header h;
  int rc = fze_header_parse(arc, arc_len, &h);
  if (rc < 0)
    return rc;
  if (out_cap < h.raw_bytes)
    return FZ_ENOSPC;
  if (h.raw_bytes && out == NULL)
    return FZ_EINVAL;
  decompress_job j = {.h = &h, .arc = arc, .out = out};
  j.crcs = malloc(4 * (size_t)h.nchunks + 4);
  if (j.crcs == NULL)
    return FZ_ENOMEM;
  unsigned ranges = parallel_ranges(clamp_threads(threads), h.nchunks, decompress_range, &j);
  for (unsigned t = 0; t < ranges; t++)
    if (j.rc[t] < 0 && rc == 0)
      rc = j.rc[t];
  if (rc == 0 && payload_crc(j.crcs, h.nchunks) != h.payload_crc)
    rc = FZ_ECORRUPT;
  free(j.crcs);
  if (rc == 0)
    *out_len = (size_t)h.raw_bytes;
  return rc;
}
