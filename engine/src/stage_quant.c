/*
 * stage_quant.c - the error-bounded quantizer and its guarantee.
 *
 * Forward, every value becomes a word: its bin index for ABS and REL (bins of
 * width `step`), or its rounded bit pattern for PWREL.  Before accepting a
 * bin, the encoder reconstructs the value exactly as the decoder will
 * (ops.h) and checks the error against the bound; a value that fails, and
 * every NaN, Inf, -0.0 and denormal, is kept losslessly in the chunk's side
 * list instead (its word becomes 0).  Side list: a varint count, the
 * ascending u16 indices, then the raw values.
 *
 * When the bound cannot be honoured by quantization at all (REL on a constant
 * field, a bound below the type's resolution) the stage turns lossless: the
 * words are the raw bit patterns, step is 0.
 */
#include <math.h>
#include <string.h>

#include "engine.h"
#include "ops.h"

typedef struct minmax {
  double lo, hi; /* over finite values; lo > hi when there are none */
} minmax;

static minmax scan_f32(const float *x, size_t n) {
  float lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < n; i++) {
    float v = x[i];
    /* NaN compares false both ways; Inf is skipped explicitly. */
    if (v < lo && v != -INFINITY)
      lo = v;
    if (v > hi && v != INFINITY)
      hi = v;
  }
  return (minmax){lo, hi};
}

static minmax scan_f64(const double *x, size_t n) {
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < n; i++) {
    double v = x[i];
    if (v < lo && v != -INFINITY)
      lo = v;
    if (v > hi && v != INFINITY)
      hi = v;
  }
  return (minmax){lo, hi};
}

int fze_quant_resolve(fze_stage *st, fz_dtype t, const void *in, size_t n,
                      unsigned threads) {
  (void)threads;
  minmax m = {0, 0};
  if (st->mode != FZ_EB_PWREL)
    m = t == FZ_F32 ? scan_f32(in, n) : scan_f64(in, n);
  fzo_quant_params(st->mode, st->eb, m.lo, m.hi, t == FZ_F32, &st->eb_abs,
                   &st->step);
  return 0;
}

static size_t put_varint(uint8_t *p, uint32_t v) {
  size_t k = 0;
  while (v >= 0x80) {
    p[k++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[k++] = (uint8_t)v;
  return k;
}

static size_t write_side(uint8_t *side, const uint16_t *idx, size_t m,
                         const uint8_t *in, unsigned w) {
  size_t k = put_varint(side, (uint32_t)m);
  for (size_t j = 0; j < m; j++) {
    side[k++] = (uint8_t)idx[j];
    side[k++] = (uint8_t)(idx[j] >> 8);
  }
  for (size_t j = 0; j < m; j++, k += w)
    memcpy(side + k, in + (size_t)idx[j] * w, w);
  return k;
}

size_t fze_quant_encode(const fze_stage *st, fz_dtype t, const void *in,
                        size_t n, void *codes, uint8_t *side) {
  uint16_t idx[FZ_CHUNK_MAX / 4];
  size_t m = 0;
  unsigned w = (unsigned)fz_dtype_size(t);
  if (st->step == 0) {
    memcpy(codes, in, n * w);
    side[0] = 0; /* an empty side list */
    return 1;
  }
  if (t == FZ_F32) {
    const float *x = in;
    uint32_t *c = codes;
    if (st->mode == FZ_EB_PWREL) {
      uint32_t k = (uint32_t)st->step;
      for (size_t i = 0; i < n; i++)
        if (!fzo_pw_quant_f32(x[i], k, st->eb_abs, &c[i])) {
          c[i] = 0;
          idx[m++] = (uint16_t)i;
        }
    } else {
      double inv = 1.0 / st->step;
      for (size_t i = 0; i < n; i++)
        if (!fzo_quant_f32(x[i], inv, st->step, st->eb_abs, &c[i])) {
          c[i] = 0;
          idx[m++] = (uint16_t)i;
        }
    }
  } else {
    const double *x = in;
    uint64_t *c = codes;
    if (st->mode == FZ_EB_PWREL) {
      uint64_t k = (uint64_t)st->step;
      for (size_t i = 0; i < n; i++)
        if (!fzo_pw_quant_f64(x[i], k, st->eb_abs, &c[i])) {
          c[i] = 0;
          idx[m++] = (uint16_t)i;
        }
    } else {
      double inv = 1.0 / st->step;
      for (size_t i = 0; i < n; i++)
        if (!fzo_quant_f64(x[i], inv, st->step, st->eb_abs, &c[i])) {
          c[i] = 0;
          idx[m++] = (uint16_t)i;
        }
    }
  }
  return write_side(side, idx, m, in, w);
}

/* Parses the side list; returns its length, or a negative code. */
static long read_side(const uint8_t *side, size_t len, size_t n, unsigned w,
                      size_t *count) {
  uint32_t v = 0;
  size_t k = 0;
  for (unsigned shift = 0;; shift += 7) {
    if (k >= len || shift > 28)
      return FZ_ECORRUPT;
    uint8_t b = side[k++];
    v |= (uint32_t)(b & 0x7f) << shift;
    if (!(b & 0x80))
      break;
  }
  if (v > n || (len - k) / (2 + w) < v)
    return FZ_ECORRUPT;
  *count = v;
  return (long)(k + (size_t)v * (2 + w));
}

long fze_quant_side_len(const uint8_t *side, size_t len, size_t n, unsigned w) {
  size_t count;
  return read_side(side, len, n, w, &count);
}

int fze_quant_decode(const fze_stage *st, fz_dtype t, const void *codes,
                     size_t n, const uint8_t *side, size_t side_len,
                     void *out) {
  unsigned w = (unsigned)fz_dtype_size(t);
  size_t m;
  long sl = read_side(side, side_len, n, w, &m);
  if (sl < 0 || (size_t)sl != side_len)
    return FZ_ECORRUPT;
  if (st->step == 0) {
    if (m != 0)
      return FZ_ECORRUPT;
    memcpy(out, codes, n * w);
    return 0;
  }
  if (t == FZ_F32) {
    const uint32_t *c = codes;
    float *x = out;
    if (st->mode == FZ_EB_PWREL) {
      uint32_t k = (uint32_t)st->step;
      for (size_t i = 0; i < n; i++)
        x[i] = fzo_pw_dequant_f32(c[i], k);
    } else {
      for (size_t i = 0; i < n; i++)
        x[i] = fzo_dequant_f32(c[i], st->step);
    }
  } else {
    const uint64_t *c = codes;
    double *x = out;
    if (st->mode == FZ_EB_PWREL) {
      uint64_t k = (uint64_t)st->step;
      for (size_t i = 0; i < n; i++)
        x[i] = fzo_pw_dequant_f64(c[i], k);
    } else {
      for (size_t i = 0; i < n; i++)
        x[i] = fzo_dequant_f64(c[i], st->step);
    }
  }
  /* Patch the outliers; indices must be strictly ascending and in range. */
  size_t k = side_len - m * (2 + w);
  const uint8_t *vals = side + k + m * 2;
  long prev = -1;
  for (size_t j = 0; j < m; j++) {
    long i = side[k + 2 * j] | (long)side[k + 2 * j + 1] << 8;
    if (i <= prev || (size_t)i >= n)
      return FZ_ECORRUPT;
    memcpy((uint8_t *)out + (size_t)i * w, vals + j * w, w);
    prev = i;
  }
  return 0;
}
