/*
 * archive.c - the archive header: magic, version, dtype, shape, chunk size,
 * the chain with every resolved parameter, the payload checksum, the chunk
 * table and the header checksum.  docs/format.md is the specification.
 *
 * Parsing trusts nothing: each field is range-checked before it is used to
 * compute a size, sizes are computed with overflow checks, and the chunk
 * table must account for the archive's length exactly.
 */
#include <math.h>
#include <string.h>

#include "archive.h"
#include "engine.h"

int fze_shape_size(unsigned ndims, const uint64_t *dims, size_t width,
                   uint64_t *n_elems, uint64_t *bytes) {
  if (ndims < 1 || ndims > FZ_MAX_DIMS)
    return FZ_ESHAPE;
  uint64_t n = 1;
  for (unsigned i = 0; i < ndims; i++)
    if (__builtin_mul_overflow(n, dims[i], &n))
      return FZ_ESHAPE;
  uint64_t b;
  /* Keep sizes well inside size_t and ptrdiff_t on every platform. */
  if (__builtin_mul_overflow(n, (uint64_t)width, &b) || b > (UINT64_C(1) << 56))
    return FZ_ESHAPE;
  *n_elems = n;
  *bytes = b;
  return 0;
}

/* The quant stage's mode byte carries, in its top bit, whether a fill value
 * follows its three f64s (format version 2); without one the stage is
 * written exactly as in version 1. */
#define QUANT_FILL_FLAG 0x80u

static size_t stage_param_len(uint8_t id, bool has_fill) {
  switch (id) {
  case FZE_STAGE_QUANT: return 1 + 8 * 3 + (has_fill ? 8 : 0);
  case FZE_STAGE_DIFF: return 1;
  case FZE_STAGE_RZE: return 1;
  case FZE_STAGE_LORENZO: return 1;
  case FZE_STAGE_INTERP: return 1;
  default: return 0;
  }
}

size_t fze_header_len(const fze_chain *c, unsigned ndims, uint64_t nchunks,
                      unsigned table_w) {
  size_t len = 8 + 8 * (size_t)ndims + 1;
  for (unsigned i = 0; i < c->n; i++)
    len += 1 + stage_param_len(c->st[i].id, c->st[i].has_fill);
  return len + 4 + table_w * (size_t)nchunks + 4;
}

/* The lowest version that holds the archive, so that archives without the
 * newer features stay readable by every older decoder: 7 for the
 * interp stage, else 4 for the byteplanes stage, else 3 for the other
 * ratio stages or chunks above 32 KiB, else 2 for a fill value, else 1. */
unsigned fze_format_version(const fze_chain *c, unsigned chunk_bytes) {
  bool fill = false, ratio = chunk_bytes > FZ_CHUNK_MAX, planes = false;
  for (unsigned i = 0; i < c->n; i++) {
    if (c->st[i].id == FZE_STAGE_INTERP)
      return FZE_FORMAT_VERSION_RUNS;
    planes |= c->st[i].id == FZE_STAGE_BYTEPLANES;
    ratio |= fze_stage_is_ratio(c->st[i].id);
    fill |= c->st[i].id == FZE_STAGE_QUANT && c->st[i].has_fill;
  }
  return planes ? FZE_FORMAT_VERSION_PLANES
         : ratio ? FZE_FORMAT_VERSION_RATIO
         : fill  ? FZE_FORMAT_VERSION_FILL
                 : FZE_FORMAT_VERSION;
}

void fze_chain_set_version(fze_chain *c, unsigned version) {
  for (unsigned i = 0; i < c->n; i++)
    c->st[i].lv = c->st[i].id == FZE_STAGE_HUFFMAN ? version >= FZE_FORMAT_VERSION_RUNS
                  : c->st[i].id != FZE_STAGE_INTERP      ? 0
                  : version >= FZE_FORMAT_VERSION_DIMS   ? 2
                  : version >= FZE_FORMAT_VERSION_LEVELS ? 1
                                                         : 0;
}

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static void put_f64(uint8_t *p, double d) {
  uint64_t v;
  memcpy(&v, &d, 8);
  put_u64(p, v);
}
static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p) {
  return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}
static double get_f64(const uint8_t *p) {
  uint64_t v = get_u64(p);
  double d;
  memcpy(&d, &v, 8);
  return d;
}

void fze_header_write(const fze_header *h, uint8_t *out) {
  uint8_t *p = out;
  memcpy(p, FZE_MAGIC, 4);
  p[4] = (uint8_t)fze_format_version(&h->chain, h->chunk_bytes);
  p[5] = (uint8_t)h->dtype;
  p[6] = (uint8_t)h->ndims;
  p[7] = (uint8_t)__builtin_ctz(h->chunk_bytes);
  p += 8;
  for (unsigned i = 0; i < h->ndims; i++, p += 8)
    put_u64(p, h->dims[i]);
  *p++ = (uint8_t)h->chain.n;
  for (unsigned i = 0; i < h->chain.n; i++) {
    const fze_stage *st = &h->chain.st[i];
    *p++ = st->id;
    switch (st->id) {
    case FZE_STAGE_QUANT:
      *p++ = (uint8_t)(st->mode | (st->has_fill ? QUANT_FILL_FLAG : 0));
      put_f64(p, st->eb);
      put_f64(p + 8, st->eb_abs);
      put_f64(p + 16, st->step);
      p += 24;
      if (st->has_fill) {
        put_f64(p, st->fill);
        p += 8;
      }
      break;
    case FZE_STAGE_DIFF:
      *p++ = st->mode;
      break;
    case FZE_STAGE_RZE:
      *p++ = st->levels;
      break;
    case FZE_STAGE_LORENZO:
    case FZE_STAGE_INTERP:
      *p++ = st->pdims;
      break;
    }
  }
  put_u32(p, h->payload_crc);
  p += 4;
  memcpy(p, h->sizes, h->table_w * (size_t)h->nchunks);
  p += h->table_w * (size_t)h->nchunks;
  put_u32(p, fze_crc32c(0, out, (size_t)(p - out)));
}

int fze_header_parse_prefix(const uint8_t *arc, size_t len, fze_header *h, size_t *table_pos) {
  memset(h, 0, sizeof *h);
  if (len < 4 || memcmp(arc, FZE_MAGIC, 4) != 0)
    return len < 4 && memcmp(arc, FZE_MAGIC, len) == 0 ? FZ_ETRUNC : FZ_EFORMAT;
  if (len < 8)
    return FZ_ETRUNC;
  unsigned version = arc[4];
  if (version < FZE_FORMAT_VERSION || version > FZE_FORMAT_VERSION_RUNS)
    return FZ_EVERSION;
  h->version = version;
  h->table_w = fze_table_width(version);
  h->dtype = (fz_dtype)arc[5];
  h->ndims = arc[6];
  size_t w = fz_dtype_size(h->dtype);
  /* Chunks above 32 KiB came with version 3. */
  unsigned max_log = version >= FZE_FORMAT_VERSION_RATIO ? 20 : 15;
  if (w == 0 || h->ndims < 1 || h->ndims > FZ_MAX_DIMS || arc[7] < 12 || arc[7] > max_log)
    return FZ_ECORRUPT;
  h->chunk_bytes = 1u << arc[7];
  size_t pos = 8;
  if (len < pos + 8 * (size_t)h->ndims + 1)
    return FZ_ETRUNC;
  for (unsigned i = 0; i < h->ndims; i++, pos += 8)
    h->dims[i] = get_u64(arc + pos);
  if (fze_shape_size(h->ndims, h->dims, w, &h->n_elems, &h->raw_bytes) < 0)
    return FZ_ECORRUPT;
  h->chain.n = arc[pos++];
  if (h->chain.n < 1 || h->chain.n > FZE_MAX_STAGES)
    return FZ_ECORRUPT;
  for (unsigned i = 0; i < h->chain.n; i++) {
    fze_stage *st = &h->chain.st[i];
    if (len < pos + 1)
      return FZ_ETRUNC;
    st->id = arc[pos++];
    /* The mode byte says whether the quant stage holds a fill value. */
    if (st->id == FZE_STAGE_QUANT && len >= pos + 1)
      st->has_fill = (arc[pos] & QUANT_FILL_FLAG) != 0;
    size_t pl = stage_param_len(st->id, st->has_fill);
    if (len < pos + pl)
      return FZ_ETRUNC;
    switch (st->id) {
    case FZE_STAGE_QUANT:
      st->mode = arc[pos] & (uint8_t)~QUANT_FILL_FLAG;
      st->eb = get_f64(arc + pos + 1);
      st->eb_abs = get_f64(arc + pos + 9);
      st->step = get_f64(arc + pos + 17);
      if (st->has_fill)
        st->fill = get_f64(arc + pos + 25);
      st->has_eb = st->has_mode = true;
      /* A fill value needs version 2, which a version-1 archive cannot
       * claim. */
      if (st->mode > FZ_EB_PWREL || (st->has_fill && version < FZE_FORMAT_VERSION_FILL) ||
          !fze_quant_params_ok(st, h->dtype))
        return FZ_ECORRUPT;
      /* The step must serve the bound the header states: ABS and REL bins
       * wider than 2 eb_abs would decode values up to step / 2 away, and a
       * PWREL step coarser than eb * 2^24 (2^53 for f64) would pass eb.
       * The encoder's steps (fzo_quant_params) always meet this. */
      if (st->step != 0 &&
          (st->mode == FZ_EB_PWREL
               ? !(st->eb_abs == st->eb &&
                   st->step <= st->eb * (h->dtype == FZ_F32 ? 0x1p24 : 0x1p53))
               : !(st->step <= 2 * st->eb_abs)))
        return FZ_ECORRUPT;
      break;
    case FZE_STAGE_DIFF:
      st->mode = arc[pos];
      break;
    case FZE_STAGE_RZE:
      st->levels = arc[pos];
      break;
    case FZE_STAGE_LORENZO:
    case FZE_STAGE_INTERP:
      /* 0 ("the job's shape") is resolved before an archive is written. */
      st->pdims = arc[pos];
      if (st->pdims == 0)
        return FZ_ECORRUPT;
      break;
    case FZE_STAGE_BITSHUFFLE:
    case FZE_STAGE_BITPACK:
    case FZE_STAGE_HUFFMAN:
    case FZE_STAGE_BYTEPLANES:
      break;
    default:
      return FZ_ECORRUPT;
    }
    /* The ratio stages came with version 3. */
    if (fze_stage_is_ratio(st->id) && version < FZE_FORMAT_VERSION_RATIO)
      return FZ_ECORRUPT;
    /* byteplanes came with version 4. */
    if (st->id == FZE_STAGE_BYTEPLANES && version < FZE_FORMAT_VERSION_PLANES)
      return FZ_ECORRUPT;
    pos += pl;
  }
  if (fze_chain_check(&h->chain, h->dtype, NULL, 0) < 0 ||
      fze_chain_resolve_shape(&h->chain, h->ndims, h->dims, NULL, 0) < 0)
    return FZ_ECORRUPT;
  fze_chain_set_version(&h->chain, version);
  h->nchunks = (h->raw_bytes + h->chunk_bytes - 1) / h->chunk_bytes;
  if (len < pos + 4)
    return FZ_ETRUNC;
  h->payload_crc = get_u32(arc + pos);
  pos += 4;
  /* The chunk table and the header CRC must be present. */
  if (h->nchunks > (len - pos) / h->table_w || len - pos - h->table_w * h->nchunks < 4)
    return FZ_ETRUNC;
  *table_pos = pos;
  h->header_len = pos + h->table_w * (size_t)h->nchunks + 4;
  return 0;
}

int fze_header_parse(const uint8_t *arc, size_t len, fze_header *h) {
  size_t pos;
  int rc = fze_header_parse_prefix(arc, len, h, &pos);
  if (rc < 0)
    return rc;
  h->sizes = arc + pos;
  pos += h->table_w * (size_t)h->nchunks;
  if (get_u32(arc + pos) != fze_crc32c(0, arc, pos))
    return FZ_ECORRUPT;
  pos += 4;
  uint64_t total = pos;
  for (uint64_t i = 0; i < h->nchunks; i++) {
    uint64_t raw = i + 1 < h->nchunks ? h->chunk_bytes
                                      : h->raw_bytes - i * h->chunk_bytes;
    unsigned s = fze_chunk_size_at(h, i);
    if (s == 0 || s > raw)
      return FZ_ECORRUPT;
    total += s;
  }
  if (total > len)
    return FZ_ETRUNC;
  if (total < len)
    return FZ_ECORRUPT; /* trailing bytes */
  return 0;
}
