/*
 * stage_quant.c - the error-bounded quantizer and its guarantee.
 *
 * Forward, every value becomes a word: its bin index for ABS and REL (bins of
 * width `step`), or its rounded bit pattern for PWREL.  Before accepting a
 * bin, the encoder reconstructs the value exactly as the decoder will
 * (ops.h) and checks the error against the bound; a value that fails, and
 * every NaN, Inf, -0.0 and denormal, is kept losslessly in the chunk's side
 * list instead (its word becomes 0).  Side list: a varint count, the
 * ascending indices (u16, or u32 in chunks of 65536 elements or more),
 * then the raw values.
 *
 * With a fill value (netCDF's _FillValue), the values bit-equal to it are
 * neither quantized nor outliers: their word is 0, like an outlier's, and
 * the side list ends with their runs (start and length), which the decoder
 * fills with the fill's bit pattern.  A run of land costs four bytes however
 * long it is, and a lone fill cell four, where an outlier would cost the
 * index and the value.  Fill values are also left out of the value range
 * that REL scales its bound by.
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
  if (fze_have_avx2()) {
    fze_minmax_f32_avx2(x, n, &lo, &hi);
    return (minmax){lo, hi};
  }
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

/* The fill value as the bit pattern of the element type: for f32 the fill
 * rounded to the nearest float, which is what a float array holds when its
 * producer wrote the fill. */
uint64_t fze_quant_fill_bits(const fze_stage *st, fz_dtype t) {
  return t == FZ_F32 ? fzo_f32_bits((float)st->fill) : fzo_f64_bits(st->fill);
}

/* The same scans without the values bit-equal to the fill. */
static minmax scan_fill_f32(const float *x, size_t n, uint32_t fb) {
  float lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < n; i++) {
    float v = x[i];
    if (fzo_f32_bits(v) == fb)
      continue;
    if (v < lo && v != -INFINITY)
      lo = v;
    if (v > hi && v != INFINITY)
      hi = v;
  }
  return (minmax){lo, hi};
}

static minmax scan_fill_f64(const double *x, size_t n, uint64_t fb) {
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < n; i++) {
    double v = x[i];
    if (fzo_f64_bits(v) == fb)
      continue;
    if (v < lo && v != -INFINITY)
      lo = v;
    if (v > hi && v != INFINITY)
      hi = v;
  }
  return (minmax){lo, hi};
}

int fze_quant_check_range(const fze_stage *st, double lo, double hi, char *why,
                          size_t why_len) {
  /* REL: the bound derived from the range must be one the quantizer can
   * take; the same product fzo_quant_params forms, before its shave. */
  double range = hi - lo;
  if (st->mode == FZ_EB_REL && lo <= hi && isfinite(range) &&
      !(st->eb * range <= FZE_EB_ABS_MAX)) {
    fze_why(why, why_len,
            "rel bound %s times the value range %s (%s to %s) is %s, "
            "beyond the largest absolute bound %s: use a smaller eb",
            fze_num(st->eb).s, fze_num(range).s, fze_num(lo).s, fze_num(hi).s,
            fze_num(st->eb * range).s, fze_num(FZE_EB_ABS_MAX).s);
    return FZ_EBOUND;
  }
  return 0;
}

int fze_quant_resolve(fze_stage *st, fz_dtype t, const void *in, size_t n,
                      char *why, size_t why_len) {
  minmax m = {0, 0};
  if (st->mode != FZ_EB_PWREL && st->has_fill)
    m = t == FZ_F32 ? scan_fill_f32(in, n, (uint32_t)fze_quant_fill_bits(st, t))
                    : scan_fill_f64(in, n, fze_quant_fill_bits(st, t));
  else if (st->mode != FZ_EB_PWREL)
    m = t == FZ_F32 ? scan_f32(in, n) : scan_f64(in, n);
  int rc = fze_quant_check_range(st, m.lo, m.hi, why, why_len);
  if (rc < 0) {
    st->eb_abs = st->step = 0;
    return rc;
  }
  fzo_quant_params(st->mode, st->eb, m.lo, m.hi, t == FZ_F32, &st->eb_abs,
                   &st->step);
  if (!fze_quant_params_ok(st, t)) {
    /* Unreachable with a plan's checked bound; kept so that no archive the
     * decoder refuses can ever be written. */
    fze_why(why, why_len, "bound %s (%s) gives a step %s the decoder refuses",
            fze_num(st->eb).s, fz_eb_mode_name((fz_eb_mode)st->mode), fze_num(st->step).s);
    return FZ_EBOUND;
  }
  return 0;
}

/* The decoder converts step to an integer for PWREL and multiplies by it
 * otherwise; archive.c refuses any other stage as corrupt. */
bool fze_quant_params_ok(const fze_stage *st, fz_dtype t) {
  if (st->has_fill && (t == FZ_F32 ? !(fabs(st->fill) < FZE_F32_FILL_LIMIT) : !isfinite(st->fill)))
    return false;
  return fzo_quant_params_ok(st->eb, st->eb_abs, st->step, st->mode == FZ_EB_PWREL, t == FZ_F32);
}

size_t fze_put_varint(uint8_t *p, uint64_t v) {
  size_t k = 0;
  while (v >= 0x80) {
    p[k++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[k++] = (uint8_t)v;
  return k;
}

static size_t put_index(uint8_t *p, uint32_t v, unsigned iw) {
  for (unsigned k = 0; k < iw; k++)
    p[k] = (uint8_t)(v >> (8 * k));
  return iw;
}

/* The side list: the outliers (a varint count, their indices, their raw
 * values), then, for a stage with a fill, the fill runs (a varint count,
 * then a start and a length per run); indices, starts and lengths are u16,
 * or u32 in chunks of 65536 elements or more. */
size_t fze_quant_write_side(uint8_t *side, const uint32_t *idx, size_t m,
                            const uint8_t *in, unsigned w, bool has_fill,
                            const uint32_t (*runs)[2], size_t r, unsigned iw) {
  size_t k = fze_put_varint(side, m);
  for (size_t j = 0; j < m; j++)
    k += put_index(side + k, idx[j], iw);
  for (size_t j = 0; j < m; j++, k += w)
    memcpy(side + k, in + (size_t)idx[j] * w, w);
  if (!has_fill)
    return k;
  k += fze_put_varint(side + k, r);
  for (size_t j = 0; j < r; j++) {
    k += put_index(side + k, runs[j][0], iw);
    k += put_index(side + k, runs[j][1], iw);
  }
  return k;
}

/* The ABS/REL loops flag failures instead of branching on them; f32, the
 * common case, has an AVX2 twin (simd_avx2.c) performing the same IEEE
 * operations, so the output does not depend on which one runs. */
static void quant_f32(const float *restrict x, size_t n, double inv,
                               double step, double e, uint32_t *restrict c,
                               uint8_t *restrict bad) {
  for (size_t i = 0; i < n; i++) {
    float v = x[i];
    double t = (double)v * inv;
    int fits = fzo_fabs(t) <= FZO_QMAX_F32;
    int32_t q = (int32_t)fzo_rint(fits ? t : 0.0);
    float r = fzo_dequant_f32((uint32_t)q, step);
    int ok = fits & (fzo_fabs((double)v - (double)r) <= e) &
             !fzo_f32_special(fzo_f32_bits(v));
    c[i] = ok ? (uint32_t)q : 0u;
    bad[i] = (uint8_t)!ok;
  }
}

static void quant_f64(const double *restrict x, size_t n, double inv,
                               double step, double e, uint64_t *restrict c,
                               uint8_t *restrict bad) {
  for (size_t i = 0; i < n; i++) {
    double v = x[i];
    double t = v * inv;
    int fits = fzo_fabs(t) <= FZO_QMAX_F64;
    int64_t q = (int64_t)fzo_rint(fits ? t : 0.0);
    double r = fzo_dequant_f64((uint64_t)q, step);
    int ok = fits & (fzo_fabs(v - r) <= e) & !fzo_f64_special(fzo_f64_bits(v));
    c[i] = ok ? (uint64_t)q : 0u;
    bad[i] = (uint8_t)!ok;
  }
}

/* Takes the values bit-equal to the fill out of the words (word 0) and the
 * outliers (bad may be NULL), after the loops above, so that those loops
 * keep one shape with or without a fill; returns the number of fill runs. */
size_t fze_quant_fill_runs(const fze_stage *st, fz_dtype t, const void *in, size_t n,
                           void *codes, uint8_t *bad, uint32_t (*runs)[2]) {
  uint64_t fb = fze_quant_fill_bits(st, t);
  size_t r = 0;
  bool open = false;
  for (size_t i = 0; i < n; i++) {
    bool f;
    if (t == FZ_F32) {
      f = fzo_f32_bits(((const float *)in)[i]) == fb;
      if (f)
        ((uint32_t *)codes)[i] = 0;
    } else {
      f = fzo_f64_bits(((const double *)in)[i]) == fb;
      if (f)
        ((uint64_t *)codes)[i] = 0;
    }
    if (f && bad)
      bad[i] = 0;
    if (f && open) {
      runs[r - 1][1]++;
    } else if (f) {
      runs[r][0] = (uint32_t)i;
      runs[r][1] = 1;
      r++;
    }
    open = f;
  }
  return r;
}

/* Collects the flagged indices, eight flags at a time. */
size_t fze_quant_gather(const uint8_t *bad, size_t n, uint32_t *idx) {
  size_t m = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    memcpy(&v, bad + i, 8);
    if (v == 0)
      continue;
    for (size_t j = 0; j < 8; j++)
      if (bad[i + j])
        idx[m++] = (uint32_t)(i + j);
  }
  for (; i < n; i++)
    if (bad[i])
      idx[m++] = (uint32_t)i;
  return m;
}

/* The interpolating quantizer also keeps the reconstruction as doubles. */
size_t fze_quant_work_bytes(size_t n) { return 4 * n + n + 8 * (n / 2 + 1) + 8 * n + 64; }

size_t fze_quant_encode(const fze_stage *st, fz_dtype t, const void *in,
                        size_t n, void *codes, uint8_t *side, void *work) {
  /* Runs are apart: at most n/2 of them, rounded up. */
  uint32_t (*runs)[2] = work;
  uint32_t *idx = (uint32_t *)(runs + n / 2 + 1);
  uint8_t *bad = (uint8_t *)(idx + n);
  unsigned iw = fze_side_index_width(n);
  size_t m = 0, r = 0;
  unsigned w = (unsigned)fz_dtype_size(t);
  if (st->step == 0) {
    memcpy(codes, in, n * w);
    /* Empty lists: no outliers (and no fill runs: the words are exact). */
    side[0] = 0;
    side[1] = 0;
    return st->has_fill ? 2 : 1;
  }
  if (st->mode == FZ_EB_PWREL) {
    /* Without a fill, fb is a pattern no value of the type can have. */
    uint64_t fb = st->has_fill ? fze_quant_fill_bits(st, t) : ~UINT64_C(0);
    if (t == FZ_F32) {
      const float *x = in;
      uint32_t *c = codes, k = (uint32_t)st->step;
      for (size_t i = 0; i < n; i++)
        if (fzo_f32_bits(x[i]) != fb && !fzo_pw_quant_f32(x[i], k, st->eb_abs, &c[i])) {
          c[i] = 0;
          idx[m++] = (uint32_t)i;
        }
    } else {
      const double *x = in;
      uint64_t *c = codes, k = (uint64_t)st->step;
      for (size_t i = 0; i < n; i++)
        if (fzo_f64_bits(x[i]) != fb && !fzo_pw_quant_f64(x[i], k, st->eb_abs, &c[i])) {
          c[i] = 0;
          idx[m++] = (uint32_t)i;
        }
    }
    if (st->has_fill)
      r = fze_quant_fill_runs(st, t, in, n, codes, NULL, runs);
    return fze_quant_write_side(side, idx, m, in, w, st->has_fill, runs, r, iw);
  }
  if (t == FZ_F32 && fze_have_avx2())
    fze_quant_f32_avx2(in, n, 1.0 / st->step, st->step, st->eb_abs, codes, bad);
  else if (t == FZ_F32)
    quant_f32(in, n, 1.0 / st->step, st->step, st->eb_abs, codes, bad);
  else
    quant_f64(in, n, 1.0 / st->step, st->step, st->eb_abs, codes, bad);
  if (st->has_fill)
    r = fze_quant_fill_runs(st, t, in, n, codes, bad, runs);
  m = fze_quant_gather(bad, n, idx);
  return fze_quant_write_side(side, idx, m, in, w, st->has_fill, runs, r, iw);
}

typedef fze_side_view side_view;

bool fze_get_varint(const uint8_t *p, size_t len, size_t *k, uint64_t *out) {
  uint64_t v = 0;
  for (unsigned shift = 0;; shift += 7) {
    if (*k >= len || shift > 28)
      return false;
    uint8_t b = p[(*k)++];
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80))
      break;
  }
  *out = v;
  return true;
}

/* A side list's count: its varint's low 32 bits, as archives have always
 * been read (the GPU decoders read it the same way). */
static bool read_count(const uint8_t *p, size_t len, size_t *k, uint32_t *out) {
  uint64_t v;
  if (!fze_get_varint(p, len, k, &v))
    return false;
  *out = (uint32_t)v;
  return true;
}

/* Parses the side list of a stage with or without a fill; checks that every
 * count fits in the bytes present, nothing more. */
int fze_quant_read_side(const uint8_t *side, size_t len, size_t n, unsigned w,
                        bool has_fill, side_view *sv) {
  uint32_t v;
  size_t k = 0;
  unsigned iw = fze_side_index_width(n);
  if (!read_count(side, len, &k, &v) || v > n || (len - k) / (iw + w) < v)
    return FZ_ECORRUPT;
  sv->m = v;
  sv->idx = side + k;
  sv->vals = side + k + iw * (size_t)v;
  k += (size_t)v * (iw + w);
  sv->r = 0;
  sv->runs = side + k;
  if (has_fill) {
    if (!read_count(side, len, &k, &v) || v > n || (len - k) / (2 * iw) < v)
      return FZ_ECORRUPT;
    sv->r = v;
    sv->runs = side + k;
    k += 2 * iw * (size_t)v;
  }
  sv->len = k;
  return 0;
}

long fze_quant_side_len(const fze_stage *st, const uint8_t *side, size_t len, size_t n,
                        unsigned w) {
  side_view sv;
  int rc = fze_quant_read_side(side, len, n, w, st->has_fill, &sv);
  return rc < 0 ? rc : (long)sv.len;
}

size_t fze_side_index(const uint8_t *p, unsigned iw) {
  size_t v = (size_t)p[0] | (size_t)p[1] << 8;
  if (iw == 4)
    v |= (size_t)p[2] << 16 | (size_t)p[3] << 24;
  return v;
}

int fze_quant_decode(const fze_stage *st, fz_dtype t, const void *codes,
                     size_t n, const uint8_t *side, size_t side_len,
                     void *out) {
  unsigned w = (unsigned)fz_dtype_size(t), iw = fze_side_index_width(n);
  side_view sv;
  if (fze_quant_read_side(side, side_len, n, w, st->has_fill, &sv) < 0 || sv.len != side_len)
    return FZ_ECORRUPT;
  if (st->step == 0) {
    if (sv.m != 0 || sv.r != 0)
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
  /* The fill runs: each nonempty, in range, after the previous one with a
   * gap (runs are maximal).  Bit patterns are copied, so a fill that is a
   * denormal never meets a flush-to-zero float move. */
  if (sv.r) {
    uint64_t fb = fze_quant_fill_bits(st, t);
    uint8_t pat[8];
    if (t == FZ_F32) {
      uint32_t b = (uint32_t)fb;
      memcpy(pat, &b, 4);
    } else {
      memcpy(pat, &fb, 8);
    }
    size_t end = 0;
    for (size_t j = 0; j < sv.r; j++) {
      size_t at = fze_side_index(sv.runs + 2 * iw * j, iw), len = fze_side_index(sv.runs + 2 * iw * j + iw, iw);
      if (len == 0 || (j > 0 && at <= end) || at > n || len > n - at)
        return FZ_ECORRUPT;
      for (size_t i = at; i < at + len; i++)
        memcpy((uint8_t *)out + i * w, pat, w);
      end = at + len;
    }
  }
  /* Patch the outliers; indices must be strictly ascending and in range. */
  long prev = -1;
  for (size_t j = 0; j < sv.m; j++) {
    long i = (long)fze_side_index(sv.idx + iw * j, iw);
    if (i <= prev || (size_t)i >= n)
      return FZ_ECORRUPT;
    memcpy((uint8_t *)out + (size_t)i * w, sv.vals + j * w, w);
    prev = i;
  }
  return 0;
}
