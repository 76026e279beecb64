/*
 * stage_interp.c - the quantizer fused with multilevel interpolation (the
 * SZ3 / cuSZ-i kind): `quant | interp`, the ratio preset's predictor.
 *
 * Predicting the quantizer's integer words (lorenzo) leaves each value's
 * own rounding in every neighbour the prediction reads; predicting from the
 * values the decoder rebuilds instead lets a run of zero words follow a
 * smooth field exactly, which interpolation turns into far fewer bits at
 * coarse bounds (on the trinidad field at REL 1e-2, 0.16 bits a value of
 * residual entropy against 0.49).  So this stage takes the values: each is
 * predicted from values already rebuilt, its difference from the
 * prediction quantized in bins of `step` (the word: the bin, zigzag-mapped),
 * and the value the decoder will
 * rebuild, (T)(p + q * step), checked against the bound with the decoder's
 * arithmetic; a value that fails, and every NaN, Inf, -0.0 and denormal,
 * is an outlier kept exactly in quant's side list (its word 0), as are the
 * fill cells (fill runs).  Predictions read rebuilt values, outliers' own
 * (0 for NaN and Inf), so they are finite or the value is an outlier.
 *
 * The walk, inside the chunk (elements s .. s+n-1 of the array, its dims
 * folded into pdims = 1..3 axes z, y, x): the anchors, points whose every
 * coordinate is a multiple of FZE_INTERP_TOP, each predicted by the anchor
 * before it (the first by 0); then for h = TOP/2, ..., 1 and each axis d
 * from the slowest, the points whose coordinate along d is an odd multiple
 * of h, along the axes before d a multiple of h and after d of 2h, from
 * their neighbours along d at -3h, -h, +h, +3h that lie in the array and
 * the chunk: cubic (-a + 9b + 9c - d) / 16 with all four, (b + c) / 2 with
 * both near ones, else the near one there is, else 0.  All in binary64,
 * the same operations in the same order on every backend.
 *
 * Format version 5 (ip->lv) changes three things: the coordinates are
 * distances from the chunk's own origin (fzo_interp_origin), each level
 * is binned finer the coarser it is (fzo_interp_level_step), and the
 * words are stored in the walk's order (the anchors, then the passes
 * (h, d), each in memory order: point() takes each point's word from the
 * walk's counter m), so that the zero words of a level's well-predicted
 * points, most of them on the finest, follow each other, where the
 * memory order interleaves them with the coarser levels' larger words.
 */
#include <math.h>
#include <string.h>

#include "engine.h"
#include "ops.h"

typedef struct walk {
  uint64_t ext[3], stride[3], s, n, lo[3], hi[3];
  uint64_t o[3]; /* the walk's origin (fzo_interp_origin) in version 5, else 0 */
  unsigned flat; /* axes 0 .. flat - 1 not interpolated (ip->flat) */
} walk;

static void walk_init(walk *k, const fze_stage *ip, uint64_t s, size_t n) {
  memcpy(k->ext, ip->ext[ip->pdims - 1], sizeof k->ext);
  k->stride[2] = 1;
  k->stride[1] = k->ext[2];
  k->stride[0] = k->ext[2] * k->ext[1];
  k->s = s;
  k->n = n;
  /* The chunk's bounding box in coordinates. */
  uint64_t e = s + n - 1;
  k->lo[0] = s / k->stride[0];
  k->hi[0] = e / k->stride[0];
  for (unsigned d = 1; d < 3; d++) {
    bool same = s / k->stride[d - 1] == e / k->stride[d - 1];
    k->lo[d] = same ? (s / k->stride[d]) % k->ext[d] : 0;
    k->hi[d] = same ? (e / k->stride[d]) % k->ext[d] : k->ext[d] - 1;
  }
  if (ip->lv)
    fzo_interp_origin(k->ext, s, n, k->o);
  else
    k->o[0] = k->o[1] = k->o[2] = 0;
  k->flat = ip->flat;
}

/* Where along a row (its x, c[2]) each neighbour of a point lies in the
 * array and the chunk: neighbour j (at -3h, -h, +h, +3h along the pass's
 * axis) for lo[j] <= x < hi[j].  Along y or z the array's test is the
 * row's; along x it bounds x, and the chunk's bounds x in every case. */
typedef struct row_limits {
  int64_t lo[4], hi[4];
} row_limits;

static void limits_of_row(const walk *k, const uint64_t *c, unsigned d, uint64_t h,
                          uint64_t row, row_limits *lim) {
  static const int mul[4] = {-3, -1, 1, 3};
  for (unsigned j = 0; j < 4; j++) {
    int64_t m = mul[j] * (int64_t)h, off = m * (int64_t)k->stride[d];
    int64_t lo = (int64_t)k->s - (int64_t)row - off;
    int64_t hi = (int64_t)(k->s + k->n) - (int64_t)row - off;
    if (d == 2) {
      lo = lo > -m ? lo : -m;
      hi = hi < (int64_t)k->ext[2] - m ? hi : (int64_t)k->ext[2] - m;
    } else {
      int64_t cd = (int64_t)c[d] + m;
      if (cd < 0 || cd >= (int64_t)k->ext[d])
        hi = lo; /* none on this row */
    }
    lim->lo[j] = lo;
    lim->hi[j] = hi;
  }
}

/* The prediction of the point at x on a row (i in the chunk) from the
 * neighbours the row's limits give it: cubic with all four, the mean of
 * the near ones with both, else the near one there is, else 0. */
static inline double predict_in_row(const double *pv, size_t i, int64_t x, const row_limits *lim,
                                    size_t off) {
  bool has[4];
  for (unsigned j = 0; j < 4; j++)
    has[j] = x >= lim->lo[j] && x < lim->hi[j];
  if (has[1] && has[2]) {
    if (has[0] && has[3])
      return (-pv[i - 3 * off] + 9.0 * pv[i - off] + 9.0 * pv[i + off] - pv[i + 3 * off]) *
             0.0625;
    return (pv[i - off] + pv[i + off]) * 0.5;
  }
  return has[1] ? pv[i - off] : has[2] ? pv[i + off] : 0.0;
}

static uint64_t first_at(uint64_t lo, uint64_t m, uint64_t r) {
  uint64_t q = lo <= r ? 0 : (lo - r + m - 1) / m;
  return q * m + r;
}

/* The first coordinate at or after lo along axis j whose distance from
 * the origin is r modulo m; along an axis not interpolated (j < flat,
 * where every coordinate has distance 0), lo. */
static uint64_t first_of(const walk *k, unsigned j, uint64_t lo, uint64_t m, uint64_t r) {
  return j < k->flat ? lo : first_at(lo, m, (r + k->o[j]) % m);
}

/* The step of a walk's progression along axis j: m, or 1 along an axis
 * not interpolated. */
static uint64_t step_of(const walk *k, unsigned j, uint64_t m) { return j < k->flat ? 1 : m; }

/* What one point does, encoding or decoding. */
typedef struct coder {
  fz_dtype t;
  double inv, step, e, qmax;
  double base; /* quant's step: the bin of level 0 */
  bool lv;     /* format version 5: finer bins on coarser levels */
  const uint8_t *x;     /* encode: the values */
  uint8_t *codes;       /* encode: out; decode: in */
  uint8_t *out;         /* decode: the values (outliers and fill patched) */
  const uint8_t *exact; /* decode: 1 where out already holds the value */
  uint8_t *bad;         /* encode: outlier flags (fill cells are not) */
  const uint8_t *fill;  /* encode: 1 on fill cells */
  double *pv;
  int dec;
  size_t m; /* format version 5: the next point's word, in the walk's order */
} coder;

static inline double finite_or_0(double v) { return isfinite(v) ? v : 0.0; }

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* dec and f32 are constants at every call (run's six copies): dec 0
 * encodes, 1 decodes, 2 decodes a chunk without outliers or fill (no
 * value to look up in exact). */
static ALWAYS_INLINE void point(coder *o, size_t i, double p, int dec, bool f32) {
  /* The point's word: the next in the walk's order (version 5), or at i. */
  size_t ci = o->lv ? o->m++ : i;
  if (dec) {
    if (dec == 1 && o->exact[i]) {
      o->pv[i] = finite_or_0(f32 ? (double)((const float *)o->out)[i]
                                 : ((const double *)o->out)[i]);
      return;
    }
    if (f32) {
      uint32_t z;
      memcpy(&z, o->codes + 4 * ci, 4);
      int32_t q = (int32_t)fzo_unzigzag32(z);
      float r = (float)(p + (double)q * o->step);
      ((float *)o->out)[i] = r;
      o->pv[i] = r;
    } else {
      uint64_t z;
      memcpy(&z, o->codes + 8 * ci, 8);
      int64_t q = (int64_t)fzo_unzigzag64(z);
      double r = p + (double)q * o->step;
      ((double *)o->out)[i] = r;
      o->pv[i] = r;
    }
    return;
  }
  double v = f32 ? (double)((const float *)o->x)[i] : ((const double *)o->x)[i];
  bool special = f32 ? fzo_f32_special(fzo_f32_bits((float)v)) : fzo_f64_special(fzo_f64_bits(v));
  if (o->fill && o->fill[i]) {
    memset(o->codes + ci * (f32 ? 4 : 8), 0, f32 ? 4 : 8);
    o->bad[i] = 0;
    o->pv[i] = v;
    return;
  }
  /* Every test made alike, without branching on the value (fabs gives
   * fzo_fabs's comparisons in one instruction): q is only converted to an
   * integer when it passed. */
  double t = (v - p) * o->inv;
  bool fits = !special & (fabs(t) <= o->qmax);
  double q = fzo_rint(fits ? t : 0.0);
  double r = f32 ? (double)(float)(p + q * o->step) : p + q * o->step;
  bool ok = fits & (fabs(v - r) <= o->e);
  q = ok ? q : 0.0;
  if (f32) {
    uint32_t c = ok ? fzo_zigzag32((uint32_t)(int32_t)q) : 0u;
    memcpy(o->codes + 4 * ci, &c, 4);
  } else {
    uint64_t c = ok ? fzo_zigzag64((uint64_t)(int64_t)q) : 0u;
    memcpy(o->codes + 8 * ci, &c, 8);
  }
  o->bad[i] = (uint8_t)!ok;
  o->pv[i] = ok ? r : finite_or_0(v);
}

/* The bins of level l (spacing 2^l). */
static inline void level_bins(coder *o, unsigned l) {
  o->step = fzo_interp_level_step(o->base, l, o->lv);
  o->inv = 1.0 / o->step;
}

static ALWAYS_INLINE void run(coder *o, const fze_stage *ip, uint64_t s, size_t n,
                              int dec, bool f32) {
  walk k;
  walk_init(&k, ip, s, n);
  /* The finest level's rows by the AVX2 twin (f32, no fill cells). */
  bool vec = f32 && fze_have_avx2() && (dec || o->fill == NULL);
  const uint64_t top = FZE_INTERP_TOP;
  uint64_t c[3], e = s + n - 1;
  double prev = 0;
  level_bins(o, __builtin_ctzll(top));
  uint64_t as0 = step_of(&k, 0, top), as1 = step_of(&k, 1, top);
  for (c[0] = first_of(&k, 0, k.lo[0], top, 0); c[0] <= k.hi[0]; c[0] += as0)
    for (c[1] = first_of(&k, 1, k.lo[1], top, 0); c[1] <= k.hi[1]; c[1] += as1)
      for (c[2] = first_of(&k, 2, k.lo[2], top, 0); c[2] <= k.hi[2]; c[2] += top) {
        uint64_t g = c[0] * k.stride[0] + c[1] * k.stride[1] + c[2];
        if (g < s || g > e)
          continue;
        point(o, (size_t)(g - s), prev, dec, f32);
        prev = o->pv[g - s];
      }
  for (uint64_t h = top / 2; h >= 1; h /= 2)
    for (unsigned d = k.flat; d < 3; d++) {
      uint64_t step[3], start[3];
      level_bins(o, (unsigned)__builtin_ctzll(h));
      for (unsigned j = 0; j < 3; j++) {
        step[j] = step_of(&k, j, j == d ? 2 * h : j < d ? h : 2 * h);
        start[j] = first_of(&k, j, k.lo[j], step[j], j == d ? h : 0);
      }
      /* Where all four neighbours lie in the array and the chunk (nearly
       * everywhere), the cubic reads them by offset; the rest take the
       * checked path, with the same arithmetic. */
      size_t off = (size_t)(h * k.stride[d]), span = 3 * off;
      for (c[0] = start[0]; c[0] <= k.hi[0]; c[0] += step[0])
        for (c[1] = start[1]; c[1] <= k.hi[1]; c[1] += step[1]) {
          uint64_t row = c[0] * k.stride[0] + c[1] * k.stride[1];
          bool axis_in = d == 2 || (c[d] >= 3 * h && c[d] + 3 * h < k.ext[d]);
          /* The row's stretch [fa, fb) of x where every point takes the
           * cubic by offset: g in the chunk, span inside it on both sides,
           * and for d = 2 the x neighbours in the array. */
          int64_t fa = (int64_t)s - (int64_t)row + (int64_t)span;
          int64_t fb = (int64_t)s + (int64_t)n - (int64_t)span - (int64_t)row;
          if (d == 2) {
            fa = fa > (int64_t)(3 * h) ? fa : (int64_t)(3 * h);
            int64_t xb = (int64_t)k.ext[2] - (int64_t)(3 * h);
            fb = fb < xb ? fb : xb;
          }
          if (!axis_in)
            fb = fa;
          if (fb > (int64_t)k.hi[2] + 1)
            fb = (int64_t)k.hi[2] + 1;
          row_limits lim;
          limits_of_row(&k, c, d, h, row, &lim);
          c[2] = start[2];
          for (int pass = 0; pass < 3; pass++) {
            /* Before the stretch and after it, each point checked. */
            uint64_t stop = k.hi[2] + 1;
            if (pass == 0 && fb > fa)
              stop = fa < 0 ? 0 : (uint64_t)fa < stop ? (uint64_t)fa : stop;
            if (pass == 1) {
              const double *pv = o->pv;
              while ((int64_t)c[2] < fb) {
                if (vec && h == 1) {
                  /* The AVX2 twin four points at a time, as far as it goes. */
                  size_t i = (size_t)(row + c[2] - s), left = (size_t)(fb - (int64_t)c[2] + 1) / 2;
                  uint32_t *cw = (uint32_t *)o->codes + (o->lv ? o->m : i);
                  unsigned cs = o->lv ? 1u : 2u;
                  size_t done =
                      dec ? fze_interp_dec_f32_avx2(cw, cs, (float *)o->out, o->pv,
                                                    dec == 1 ? o->exact : NULL, n, i, left, off,
                                                    o->step)
                          : fze_interp_enc_f32_avx2((const float *)o->x, cw, cs, o->bad, o->pv,
                                                    n, i, left, off, o->inv, o->step, o->e);
                  c[2] += 2 * done;
                  if (o->lv)
                    o->m += done;
                }
                /* Four points here: the row's last ones, or four the twin
                 * left (a value already known among them). */
                for (int t = 0; t < 4 && (int64_t)c[2] < fb; t++, c[2] += step[2]) {
                  size_t i = (size_t)(row + c[2] - s);
                  double p = (-pv[i - span] + 9.0 * pv[i - off] + 9.0 * pv[i + off] -
                              pv[i + span]) * 0.0625;
                  point(o, i, p, dec, f32);
                }
              }
              continue;
            }
            for (; c[2] < stop; c[2] += step[2]) {
              uint64_t g = row + c[2];
              if (g < s || g > e)
                continue;
              size_t i = (size_t)(g - s);
              double p = predict_in_row(o->pv, i, (int64_t)c[2], &lim, off);
              point(o, i, p, dec, f32);
            }
          }
        }
    }
}

size_t fze_interp_encode(const fze_stage *q, const fze_stage *ip, fz_dtype t,
                         const void *in, size_t n, uint64_t first, void *codes,
                         uint8_t *side, void *work) {
  unsigned w = (unsigned)fz_dtype_size(t), iw = fze_side_index_width(n);
  if (q->step == 0) /* lossless: quant's own words and empty lists */
    return fze_quant_encode(q, t, in, n, codes, side, work);
  uint32_t (*runs)[2] = work;
  uint32_t *idx = (uint32_t *)(runs + n / 2 + 1);
  uint8_t *bad = (uint8_t *)(idx + n);
  double *pv = (double *)(((uintptr_t)(bad + n) + 7) & ~(uintptr_t)7);
  size_t r = 0;
  coder o = {.t = t, .base = q->step, .lv = ip->lv, .e = q->eb_abs,
             .qmax = t == FZ_F32 ? FZO_QMAX_F32 : FZO_QMAX_F64, .x = in,
             .codes = codes, .bad = bad, .pv = pv, .dec = 0};
  if (q->has_fill) {
    /* The fill cells' flags, in idx's room until the walk is done. */
    uint8_t *fill = (uint8_t *)idx;
    uint64_t fb = fze_quant_fill_bits(q, t);
    for (size_t i = 0; i < n; i++)
      fill[i] = t == FZ_F32 ? fzo_f32_bits(((const float *)in)[i]) == (uint32_t)fb
                            : fzo_f64_bits(((const double *)in)[i]) == fb;
    r = fze_quant_fill_runs(q, t, in, n, codes, NULL, runs);
    o.fill = fill;
  }
  if (t == FZ_F32)
    run(&o, ip, first, n, 0, true);
  else
    run(&o, ip, first, n, 0, false);
  size_t m = fze_quant_gather(bad, n, idx);
  return fze_quant_write_side(side, idx, m, in, w, q->has_fill, (const uint32_t(*)[2])runs, r,
                              iw);
}

int fze_interp_decode(const fze_stage *q, const fze_stage *ip, fz_dtype t,
                      const void *codes, size_t n, uint64_t first, const uint8_t *side,
                      size_t side_len, void *out, void *work) {
  if (q->step == 0)
    return fze_quant_decode(q, t, codes, n, side, side_len, out);
  unsigned w = (unsigned)fz_dtype_size(t), iw = fze_side_index_width(n);
  fze_side_view sv;
  if (fze_quant_read_side(side, side_len, n, w, q->has_fill, &sv) < 0 || sv.len != side_len)
    return FZ_ECORRUPT;
  uint8_t *exact = work;
  double *pv = (double *)(((uintptr_t)(exact + n) + 7) & ~(uintptr_t)7);
  if (sv.r || sv.m) /* else never read (run's dec 2) */
    memset(exact, 0, n);
  /* Fill runs and outliers first, checked as quant checks them: the walk
   * reads them as rebuilt values. */
  if (sv.r) {
    uint64_t fb = fze_quant_fill_bits(q, t);
    size_t end = 0;
    for (size_t j = 0; j < sv.r; j++) {
      size_t at = fze_side_index(sv.runs + 2 * iw * j, iw);
      size_t len = fze_side_index(sv.runs + 2 * iw * j + iw, iw);
      if (len == 0 || (j > 0 && at <= end) || at > n || len > n - at)
        return FZ_ECORRUPT;
      for (size_t i = at; i < at + len; i++) {
        memcpy((uint8_t *)out + i * w, &fb, w); /* little-endian: the low bytes */
        exact[i] = 1;
      }
      end = at + len;
    }
  }
  long prev = -1;
  for (size_t j = 0; j < sv.m; j++) {
    long i = (long)fze_side_index(sv.idx + iw * j, iw);
    if (i <= prev || (size_t)i >= n || exact[i])
      return FZ_ECORRUPT;
    memcpy((uint8_t *)out + (size_t)i * w, sv.vals + j * w, w);
    exact[i] = 1;
    prev = i;
  }
  coder o = {.t = t, .base = q->step, .lv = ip->lv, .codes = (uint8_t *)codes, .out = out,
             .exact = exact, .pv = pv, .dec = 1};
  bool none = sv.m == 0 && sv.r == 0;
  if (t == FZ_F32 && none)
    run(&o, ip, first, n, 2, true);
  else if (t == FZ_F32)
    run(&o, ip, first, n, 1, true);
  else if (none)
    run(&o, ip, first, n, 2, false);
  else
    run(&o, ip, first, n, 1, false);
  return 0;
}

/* The encoder's shortcut past a chunk the interpolation would lose: each
 * sampled value (every FZE_GUESS_STEP-th in each row) predicted as the walk
 * predicts it, at its level and along its axis, but from the values
 * themselves rather than the rebuilt ones (non-finite ones read as 0), its
 * bin zigzag-mapped; the anchors are left out.  Only a guess (integers and
 * binary64, the same operations on every backend): the caller runs the
 * interpolation in full unless lorenzo beats the guess by a margin. */
static inline double guess_at(const void *in, size_t i, bool f32) {
  double u = f32 ? (double)((const float *)in)[i] : ((const double *)in)[i];
  return finite_or_0(u);
}

uint64_t fze_interp_guess(const fze_stage *q, const fze_stage *ip, fz_dtype t, const void *in,
                          size_t n, uint64_t first, void *words, size_t *outl) {
  const uint64_t *ext = ip->ext[ip->pdims - 1];
  uint64_t Y = ext[1], X = ext[2], st[3] = {X * Y, X, 1};
  double qmax = t == FZ_F32 ? FZO_QMAX_F32 : FZO_QMAX_F64, inv[4];
  for (unsigned l = 0; l < 4; l++)
    inv[l] = 1.0 / fzo_interp_level_step(q->step, l, ip->lv);
  bool f32 = t == FZ_F32;
  unsigned top = (unsigned)__builtin_ctzll(FZE_INTERP_TOP);
  size_t m = 0, bad = 0;
  uint64_t end = first + n;
  /* A point's level and axis from its distance from the walk's origin. */
  uint64_t o[3] = {0, 0, 0};
  if (ip->lv)
    fzo_interp_origin(ext, first, n, o);
  for (uint64_t r = first / X; r * X < end; r++) {
    uint64_t R = r * X, c[3] = {r / Y, r % Y, 0};
    uint64_t lo = R > first ? R : first, hi = R + X < end ? R + X : end;
    size_t i = (size_t)(lo - first), stop = (size_t)(hi - first);
    i = (i + FZE_GUESS_STEP - 1) / FZE_GUESS_STEP * FZE_GUESS_STEP;
    for (; i < stop; i += FZE_GUESS_STEP) {
      c[2] = first + i - R;
      /* Along an axis not interpolated every distance is 0. */
      uint64_t r0 = ip->flat > 0 ? 0 : c[0] - o[0], r1 = ip->flat > 1 ? 0 : c[1] - o[1];
      uint64_t r2 = c[2] - o[2];
      uint64_t u = r0 | r1 | r2;
      unsigned lb = u ? (unsigned)__builtin_ctzll(u) : 64u;
      if (lb >= top)
        continue; /* an anchor */
      uint64_t h = (uint64_t)1 << lb;
      unsigned d = (r2 >> lb & 1u) ? 2u : (r1 >> lb & 1u) ? 1u : 0u;
      double v[4];
      bool have[4];
      static const int mul[4] = {-3, -1, 1, 3};
      for (unsigned j = 0; j < 4; j++) {
        int64_t cd = (int64_t)c[d] + mul[j] * (int64_t)h;
        int64_t ii = (int64_t)i + mul[j] * (int64_t)(h * st[d]);
        have[j] = cd >= 0 && cd < (int64_t)ext[d] && ii >= 0 && ii < (int64_t)n;
        v[j] = have[j] ? guess_at(in, (size_t)ii, f32) : 0.0;
      }
      double p = have[1] && have[2]
                     ? (have[0] && have[3] ? (-v[0] + 9.0 * v[1] + 9.0 * v[2] - v[3]) * 0.0625
                                           : (v[1] + v[2]) * 0.5)
                 : have[1] ? v[1]
                 : have[2] ? v[2]
                           : 0.0;
      double x = f32 ? (double)((const float *)in)[i] : ((const double *)in)[i];
      double tq = (x - p) * inv[lb];
      bool fits = fabs(tq) <= qmax; /* false for NaN */
      double rq = fzo_rint(fits ? tq : 0.0);
      bad += !fits;
      if (f32) {
        uint32_t cw = fzo_zigzag32((uint32_t)(int32_t)rq);
        memcpy((uint8_t *)words + 4 * m, &cw, 4);
      } else {
        uint64_t cw = fzo_zigzag64((uint64_t)(int64_t)rq);
        memcpy((uint8_t *)words + 8 * m, &cw, 8);
      }
      m++;
    }
  }
  *outl = bad;
  return fze_words_cost(f32 ? 4u : 8u, words, m);
}
