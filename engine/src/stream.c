/*
 * stream.c - compression and decompression one group of chunks at a time,
 * for inputs and outputs that live in files and need not fit in memory.
 *
 * Chunks are independent (docs/format.md), so an archive can be produced
 * window by window: the payload of chunk i depends only on chunk i's input
 * and on the quantizer's resolved parameters, which depend on the whole
 * input only through its finite value range.  The encoder therefore takes
 * one pass that reads the range (when the bound is REL) and a second that
 * encodes; the header, which holds the chunk table and the payload
 * checksum, is written last.  The archive is byte for byte the one
 * fz_plan_compress() makes for the same input: the quantizer is resolved
 * by fze_quant_resolve() itself, from the two extremes, and the payload
 * checksum, a CRC of the chunks' CRCs, is carried along chunk by chunk.
 *
 * The decoder reads the header first (its length is known from a short
 * prefix), then takes groups of chunks in order and checks the payload
 * checksum once the last one is decoded.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "archive.h"
#include "engine.h"

/* ---- shared helpers ---- */

static size_t chunk_raw(const fze_header *h, uint64_t i) {
  uint64_t off = i * h->chunk_bytes;
  return h->raw_bytes - off < h->chunk_bytes ? (size_t)(h->raw_bytes - off)
                                             : h->chunk_bytes;
}

/* Adds one chunk's CRC to the payload checksum, as a little-endian u32. */
static uint32_t payload_crc_add(uint32_t c, uint32_t chunk_crc) {
  uint8_t b[4] = {(uint8_t)chunk_crc, (uint8_t)(chunk_crc >> 8),
                  (uint8_t)(chunk_crc >> 16), (uint8_t)(chunk_crc >> 24)};
  return fze_crc32c(c, b, 4);
}

/* ---- encoder ---- */

struct fz_encoder {
  fze_header hdr;     /* the plan's shape and chain; the quantizer resolved here */
  size_t width;
  bool needs_range;   /* REL/ABS quantizer: resolved from the value range */
  bool resolved;
  double lo, hi;      /* finite extremes seen by fz_encoder_scan() */
  float lo32, hi32;
  uint64_t next;      /* the next chunk to encode */
  uint64_t payload;   /* payload bytes so far */
  uint32_t crc;       /* payload checksum so far */
  uint8_t *sizes;     /* the chunk table */
  fze_scratch scratch;
  int err;            /* the quantizer refused the range (FZ_EBOUND) */
  char why[256];
};

int fz_encoder_create(const fz_plan *plan, fz_encoder **out) {
  if (plan == NULL || out == NULL)
    return FZ_EINVAL;
  *out = NULL;
  fz_encoder *e = calloc(1, sizeof *e);
  if (e == NULL)
    return FZ_ENOMEM;
  e->hdr = *fze_plan_header(plan);
  e->width = fz_dtype_size(e->hdr.dtype);
  e->lo = e->lo32 = INFINITY;
  e->hi = e->hi32 = -INFINITY;
  bool quant = fze_chain_has_quant(&e->hdr.chain);
  e->needs_range = quant && e->hdr.chain.st[0].mode != FZ_EB_PWREL;
  e->resolved = !quant;
  e->sizes = malloc(e->hdr.table_w * (size_t)e->hdr.nchunks + 1);
  if (e->sizes == NULL || fze_scratch_init(&e->scratch, e->hdr.chunk_bytes) < 0) {
    fz_encoder_destroy(e);
    return FZ_ENOMEM;
  }
  e->hdr.sizes = e->sizes;
  *out = e;
  return 0;
}

void fz_encoder_destroy(fz_encoder *e) {
  if (e == NULL)
    return;
  fze_scratch_free(&e->scratch);
  free(e->sizes);
  free(e);
}

bool fz_encoder_needs_scan(const fz_encoder *e) { return e->needs_range; }
size_t fz_encoder_header_len(const fz_encoder *e) { return e->hdr.header_len; }
size_t fz_encoder_chunk_bytes(const fz_encoder *e) { return e->hdr.chunk_bytes; }
uint64_t fz_encoder_chunks(const fz_encoder *e) { return e->hdr.nchunks; }

/* Whether bits are the fill's: values equal to it are left out of the
 * range, as the quantizer's own scan leaves them (stage_quant.c). */
static bool is_fill32(const fze_stage *q, float v) {
  float f = (float)q->fill;
  return q->has_fill && memcmp(&v, &f, sizeof v) == 0;
}

static bool is_fill64(const fze_stage *q, double v) {
  return q->has_fill && memcmp(&v, &q->fill, sizeof v) == 0;
}

/* The same extremes as the quantizer's own scan (stage_quant.c): NaN, +-Inf
 * and fill values are skipped, the f32 scan runs in float. */
int fz_encoder_scan(fz_encoder *e, const void *in, size_t len) {
  if (e == NULL || (in == NULL && len) || len % e->width)
    return FZ_EINVAL;
  if (!e->needs_range)
    return 0;
  if (e->resolved)
    return FZ_EINVAL; /* the range is fixed once a chunk is encoded */
  size_t n = len / e->width;
  const fze_stage *q = &e->hdr.chain.st[0];
  if (e->hdr.dtype == FZ_F32) {
    const float *x = in;
    if (fze_have_avx2() && !q->has_fill) {
      fze_minmax_f32_avx2(x, n, &e->lo32, &e->hi32);
      return 0;
    }
    for (size_t i = 0; i < n; i++) {
      if (is_fill32(q, x[i]))
        continue;
      if (x[i] < e->lo32 && x[i] != -INFINITY)
        e->lo32 = x[i];
      if (x[i] > e->hi32 && x[i] != INFINITY)
        e->hi32 = x[i];
    }
  } else {
    const double *x = in;
    for (size_t i = 0; i < n; i++) {
      if (is_fill64(q, x[i]))
        continue;
      if (x[i] < e->lo && x[i] != -INFINITY)
        e->lo = x[i];
      if (x[i] > e->hi && x[i] != INFINITY)
        e->hi = x[i];
    }
  }
  return 0;
}

/* Resolves the quantizer from the two extremes through fze_quant_resolve()
 * itself, whose scan of {lo, hi} finds exactly them again; a refusal (a REL
 * bound beyond the range) stays in e->err for every later call. */
static void encoder_resolve(fz_encoder *e) {
  fze_stage *q = &e->hdr.chain.st[0];
  if (e->hdr.dtype == FZ_F32) {
    float two[2] = {e->lo32, e->hi32};
    e->err = fze_quant_resolve(q, e->hdr.dtype, two, e->lo32 <= e->hi32 ? 2 : 0, e->why,
                               sizeof e->why);
  } else {
    double two[2] = {e->lo, e->hi};
    e->err = fze_quant_resolve(q, e->hdr.dtype, two, e->lo <= e->hi ? 2 : 0, e->why,
                               sizeof e->why);
  }
  e->resolved = true;
}

const char *fz_encoder_error(const fz_encoder *e) { return e->err < 0 ? e->why : ""; }

double fz_encoder_eb_abs(fz_encoder *e) {
  if (!e->resolved)
    encoder_resolve(e);
  return fze_chain_has_quant(&e->hdr.chain) ? e->hdr.chain.st[0].eb_abs : 0;
}

int fz_encoder_encode(fz_encoder *e, uint64_t first, const void *in, size_t in_len,
                      void *out, size_t out_cap, size_t *out_len) {
  if (e == NULL || out_len == NULL || (in == NULL && in_len) || (out == NULL && out_cap))
    return FZ_EINVAL;
  const fze_header *h = &e->hdr;
  if (first != e->next || first > h->nchunks)
    return FZ_EINVAL;
  uint64_t off = first * h->chunk_bytes;
  /* Whole chunks only, up to the end of the input. */
  if (in_len > h->raw_bytes - off ||
      (in_len % h->chunk_bytes && off + in_len != h->raw_bytes))
    return FZ_ESIZE;
  if (out_cap < in_len)
    return FZ_ENOSPC; /* no chunk ever grows, so in_len is always enough */
  if (!e->resolved)
    encoder_resolve(e);
  if (e->err < 0)
    return e->err;
  const uint8_t *src = in;
  uint8_t *dst = out;
  size_t pos = 0;
  for (size_t done = 0; done < in_len; e->next++) {
    size_t bytes = chunk_raw(h, e->next);
    size_t len = fze_chunk_encode(&h->chain, h->dtype, src + done, bytes / e->width,
                                  e->next * h->chunk_bytes / e->width, dst + pos,
                                  &e->scratch);
    e->crc = payload_crc_add(e->crc, fze_crc32c(0, dst + pos, len));
    fze_chunk_size_put(e->sizes, h->table_w, e->next, len);
    pos += len;
    done += bytes;
  }
  e->payload += pos;
  *out_len = pos;
  return 0;
}

int fz_encoder_check(fz_encoder *e, uint64_t first, const void *coded, size_t coded_len,
                     void *out, size_t out_cap) {
  if (e == NULL || (coded == NULL && coded_len) || first > e->next)
    return FZ_EINVAL;
  const fze_header *h = &e->hdr;
  const uint8_t *src = coded;
  size_t pos = 0, put = 0;
  for (uint64_t i = first; i < e->next && pos < coded_len; i++) {
    size_t len = fze_chunk_size_at(h, i);
    size_t bytes = chunk_raw(h, i);
    if (len > coded_len - pos || bytes > out_cap - put)
      return FZ_ENOSPC;
    int rc = fze_chunk_decode(&h->chain, h->dtype, src + pos, len, bytes / e->width,
                              i * h->chunk_bytes / e->width, (uint8_t *)out + put,
                              &e->scratch);
    if (rc < 0)
      return rc;
    pos += len;
    put += bytes;
  }
  return pos == coded_len ? 0 : FZ_EINVAL;
}

int fz_encoder_finish(fz_encoder *e, void *hdr, size_t hdr_cap, uint64_t *arc_len) {
  if (e == NULL || hdr == NULL || arc_len == NULL)
    return FZ_EINVAL;
  if (e->next != e->hdr.nchunks)
    return FZ_EINVAL;
  if (hdr_cap < e->hdr.header_len)
    return FZ_ENOSPC;
  if (!e->resolved)
    encoder_resolve(e); /* an empty input */
  e->hdr.payload_crc = e->crc;
  fze_header_write(&e->hdr, hdr);
  *arc_len = e->hdr.header_len + e->payload;
  return 0;
}

/* ---- decoder ---- */

struct fz_decoder {
  fze_header hdr;
  uint8_t *head;         /* a copy of the header; hdr.sizes points into it */
  uint64_t next, count;  /* the group fz_decoder_next() named */
  uint64_t offset;       /* archive offset of chunk `next` */
  uint32_t crc;
  fze_scratch scratch;
};

_Static_assert(FZE_PREFIX_MAX <= FZ_ARCHIVE_PREFIX_MAX,
               "fz.h promises a header prefix of at most FZ_ARCHIVE_PREFIX_MAX bytes");

int fz_archive_header_len(const void *prefix, size_t prefix_len, uint64_t arc_len,
                          size_t *header_len) {
  if (prefix == NULL || header_len == NULL)
    return FZ_EINVAL;
  if (prefix_len < FZ_ARCHIVE_PREFIX_MAX && prefix_len < arc_len)
    return FZ_EINVAL;
  fze_header h;
  size_t table;
  /* Reads at most FZ_ARCHIVE_PREFIX_MAX bytes; arc_len bounds the table. */
  int rc = fze_header_parse_prefix(prefix, arc_len > SIZE_MAX ? SIZE_MAX : (size_t)arc_len,
                                   &h, &table);
  if (rc < 0)
    return rc;
  *header_len = h.header_len;
  return 0;
}

int fz_decoder_create(const void *head, size_t head_len, uint64_t arc_len,
                      fz_decoder **out) {
  if (head == NULL || out == NULL)
    return FZ_EINVAL;
  *out = NULL;
  /* Parsed within head_len first, so a header longer than the bytes given
   * is found out before anything past them is read. */
  fze_header h;
  size_t table;
  int rc = fze_header_parse_prefix(head, head_len < arc_len ? head_len : (size_t)arc_len,
                                   &h, &table);
  if (rc < 0)
    return rc == FZ_ETRUNC && head_len < arc_len ? FZ_EINVAL : rc;
  size_t need = h.header_len;
  fz_decoder *d = calloc(1, sizeof *d);
  if (d == NULL)
    return FZ_ENOMEM;
  d->head = malloc(need);
  if (d->head == NULL || fze_scratch_init(&d->scratch, h.chunk_bytes) < 0) {
    fz_decoder_destroy(d);
    return FZ_ENOMEM;
  }
  memcpy(d->head, head, need);
  /* fze_header_parse reads only the header's bytes; arc_len is checked
   * against the chunk table's total. */
  rc = fze_header_parse(d->head, arc_len > SIZE_MAX ? SIZE_MAX : (size_t)arc_len, &d->hdr);
  if (rc < 0) {
    fz_decoder_destroy(d);
    return rc;
  }
  d->offset = d->hdr.header_len;
  *out = d;
  return 0;
}

void fz_decoder_destroy(fz_decoder *d) {
  if (d == NULL)
    return;
  fze_scratch_free(&d->scratch);
  free(d->head);
  free(d);
}

int fz_decoder_info(const fz_decoder *d, fz_archive_info *info) {
  if (d == NULL || info == NULL)
    return FZ_EINVAL;
  const fze_header *h = &d->hdr;
  memset(info, 0, sizeof *info);
  info->dtype = h->dtype;
  info->ndims = h->ndims;
  memcpy(info->dims, h->dims, sizeof h->dims);
  info->raw_bytes = h->raw_bytes;
  info->archive_bytes = h->header_len;
  for (uint64_t i = 0; i < h->nchunks; i++)
    info->archive_bytes += fze_chunk_size_at(h, i);
  info->chunks = h->nchunks;
  if (fze_chain_has_quant(&h->chain))
    info->eb_abs = h->chain.st[0].eb_abs;
  fze_chain_format(&h->chain, info->chain, sizeof info->chain);
  return 0;
}

uint64_t fz_decoder_next(fz_decoder *d, size_t max_raw, uint64_t *offset, size_t *stored,
                         size_t *raw) {
  const fze_header *h = &d->hdr;
  uint64_t n = max_raw / h->chunk_bytes;
  if (n == 0)
    n = 1;
  if (n > h->nchunks - d->next)
    n = h->nchunks - d->next;
  size_t s = 0, r = 0;
  for (uint64_t i = d->next; i < d->next + n; i++) {
    s += fze_chunk_size_at(h, i);
    r += chunk_raw(h, i);
  }
  d->count = n;
  *offset = d->offset;
  *stored = s;
  *raw = r;
  return n;
}

int fz_decoder_decode(fz_decoder *d, const void *in, size_t in_len, void *out,
                      size_t out_cap) {
  if (d == NULL || (in == NULL && in_len) || (out == NULL && out_cap))
    return FZ_EINVAL;
  const fze_header *h = &d->hdr;
  size_t w = fz_dtype_size(h->dtype);
  const uint8_t *src = in;
  size_t pos = 0, put = 0;
  int rc = 0;
  for (uint64_t i = d->next; i < d->next + d->count; i++) {
    size_t len = fze_chunk_size_at(h, i), bytes = chunk_raw(h, i);
    if (len > in_len - pos || bytes > out_cap - put) {
      rc = FZ_EINVAL;
      break;
    }
    d->crc = payload_crc_add(d->crc, fze_crc32c(0, src + pos, len));
    rc = fze_chunk_decode(&h->chain, h->dtype, src + pos, len, bytes / w,
                          i * h->chunk_bytes / w, (uint8_t *)out + put, &d->scratch);
    if (rc < 0)
      break;
    pos += len;
    put += bytes;
  }
  if (rc < 0)
    return rc;
  if (pos != in_len)
    return FZ_EINVAL;
  d->next += d->count;
  d->offset += pos;
  d->count = 0;
  return 0;
}

int fz_decoder_finish(const fz_decoder *d) {
  if (d == NULL || d->next != d->hdr.nchunks)
    return FZ_EINVAL;
  return d->crc == d->hdr.payload_crc ? 0 : FZ_ECORRUPT;
}

/* ---- plan keys ---- */

int fz_pipeline_canonical(const char *pipeline, char *buf, size_t len, char *why,
                          size_t why_len) {
  if (buf == NULL || len == 0)
    return FZ_EINVAL;
  fze_chain c;
  int rc = fze_chain_parse(pipeline ? pipeline : "balanced", &c, why, why_len);
  if (rc < 0)
    return rc;
  fze_chain_format(&c, buf, len);
  /* A text that filled the buffer may have been cut: no key at all is
   * better than one two chains could share. */
  return strlen(buf) + 1 < len ? 0 : FZ_ENOSPC;
}
