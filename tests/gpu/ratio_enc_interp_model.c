/*
 * ratio_enc_interp_model.c - the interpolating quantizer of the ratio
 * preset's GPU encoder (ratio_enc_interp.cuh), run on the CPU: the very
 * phases the kernel runs, each for every thread of a block in turn, must
 * give fze_interp_encode's codes byte for byte, and its outlier flags,
 * gathered into a side list by the engine's own fze_quant_gather and
 * fze_quant_write_side, the engine's side list byte for byte.  The stages
 * are the engine's: quant resolved from the data by fze_quant_resolve,
 * interp's extents folded by fze_chain_resolve_shape.  The chunks are cut
 * at the engine's chunk boundaries (full chunks of 256 KiB), mid-row and
 * mid-plane, and tiny; the fields are smooth, noisy, constant, large
 * against the bound (so the rebuilt value's rounding fails), spiked and
 * sprinkled with NaN, Inf, -0.0 and denormals.  No GPU needed: CI checks
 * the kernel's logic on every run, and the ci-asan build that it reads and
 * writes nothing out of its buffers.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "fz.h"
#include "ratio_enc_interp.cuh"
#include "ratio_shape.h"

#define CHUNK_BYTES 262144u

enum kind { SMOOTH, NOISE, CONSTANT, ZERO, LARGE, SPIKES, SPECIAL, STEPS, KINDS };
static const char *const kind_names[] = {"smooth", "noise", "constant", "zero",
                                         "large",  "spikes", "special", "steps"};

static void *field(const shape *s, int f32, enum kind k, uint64_t seed) {
  size_t n = (size_t)count(s), w = f32 ? 4 : 8;
  uint8_t *x = malloc(n * w);
  cr_assert(x);
  uint64_t X = s->dims[s->ndims - 1], Y = s->ndims > 1 ? s->dims[s->ndims - 2] : 1;
  for (size_t i = 0; i < n; i++) {
    double xx = (double)(i % X), yy = (double)((i / X) % Y), zz = (double)(i / X / Y);
    double v = sin(xx * 0.05) * cos(yy * 0.07) * 50 + cos(zz * 0.11 + xx * 0.013) * 20 +
               zz * 0.3 + xx * 0.01;
    uint64_t r = rnd(&seed);
    switch (k) {
    case NOISE: v = (double)(r >> 11) * 0x1p-53 * 2 - 1; break;
    case CONSTANT: v = 3.25; break;
    case ZERO: v = 0; break;
    case LARGE: v = 1e6 + v * 1e-2; break;
    case SPIKES:
      if (r % 50 == 0)
        v += (double)(r >> 40) * ((r >> 8) & 1 ? 1e3 : -1e30);
      break;
    case SPECIAL:
      switch (r % 16) {
      case 0: v = NAN; break;
      case 1: v = INFINITY; break;
      case 2: v = -INFINITY; break;
      case 3: v = -0.0; break;
      case 4: v = f32 ? 1e-40 : 1e-310; break;
      case 5: v = 0.0; break;
      default: break;
      }
      break;
    case STEPS: v = floor(v / 7) * 3; break;
    default: break;
    }
    if (f32)
      ((float *)x)[i] = (float)v;
    else
      ((double *)x)[i] = v;
  }
  return x;
}

/* quant and interp as the engine resolves them for the job; false when
 * the stage comes out lossless (the kernel is never called then). */
static bool stages(const shape *s, unsigned pdims, fz_dtype t, fz_eb_mode mode, double eb,
                   const void *x, fze_stage *q, fze_stage *ip) {
  char why[256] = "";
  memset(q, 0, sizeof *q);
  q->id = FZE_STAGE_QUANT;
  q->mode = (uint8_t)mode;
  q->has_eb = q->has_mode = true;
  q->eb = eb;
  cr_assert_eq(fze_quant_resolve(q, t, x, (size_t)count(s), why, sizeof why), 0, "%s", why);
  fze_chain c;
  memset(&c, 0, sizeof c);
  c.n = 1;
  c.st[0].id = FZE_STAGE_INTERP;
  c.st[0].pdims = (uint8_t)pdims;
  cr_assert_eq(fze_chain_resolve_shape(&c, s->ndims, s->dims, why, sizeof why), 0, "%s", why);
  *ip = c.st[0];
  return q->step != 0;
}

/* One chunk: the kernel's block against fze_interp_encode, in the walk
 * of ip's format version. */
static void same_walk(const fze_stage *q, const fze_stage *ip, fz_dtype t, const void *x,
                      uint64_t first, size_t n, const char *what) {
  unsigned w = (unsigned)fz_dtype_size(t);
  const uint8_t *in = (const uint8_t *)x + first * w;
  size_t side_cap = 5 + n * (4 + w);
  uint8_t *codes = malloc(n * w), *side = malloc(side_cap), *work = malloc(fze_quant_work_bytes(n));
  uint8_t *words = malloc(n * w), *bad = malloc(n), *pv = malloc(n * w);
  uint8_t *mine = malloc(side_cap);
  uint32_t *idx = malloc(4 * n);
  fzre_ipe *P = malloc(sizeof *P);
  cr_assert(codes && side && work && words && bad && pv && mine && idx && P);
  size_t len = fze_interp_encode(q, ip, t, in, n, first, codes, side, work);

  /* Everything the kernel must write starts as garbage. */
  memset(words, 0xa5, n * w);
  memset(bad, 0xa5, n);
  memset(pv, 0xa5, n * w);
  memset(P, 0xa5, sizeof *P);
  fzre_q Q = {.step = q->step, .inv = 1.0 / q->step, .eb_abs = q->eb_abs, .pwrel = 0,
              .lv = ip->lv, .flat = ip->flat};
  fzre_interp(P, &Q, ip->ext[ip->pdims - 1], in, w, n, first, words, bad, pv);

  for (size_t i = 0; i < n; i++)
    cr_assert(bad[i] <= 1, "%s: flag %zu is %u", what, i, bad[i]);
  for (size_t i = 0; i < n; i++)
    cr_assert(memcmp(words + i * w, codes + i * w, w) == 0, "%s: word %zu of %zu differs",
              what, i, n);
  size_t m = fze_quant_gather(bad, n, idx);
  size_t got = fze_quant_write_side(mine, idx, m, in, w, false, NULL, 0, fze_side_index_width(n));
  cr_assert_eq(got, len, "%s: side list of %zu bytes, the engine's %zu", what, got, len);
  cr_assert(memcmp(mine, side, len) == 0, "%s: side lists differ", what);
  free(P);
  free(idx);
  free(mine);
  free(pv);
  free(bad);
  free(words);
  free(work);
  free(side);
  free(codes);
}

/* Every walk: versions 3 and 4 (words in memory order, one bin), version
 * 5 (words by level, finer bins on coarser levels) and version 6's along
 * the fastest D - 1 axes only. */
static void same(const fze_stage *q, const fze_stage *ip, fz_dtype t, const void *x,
                 uint64_t first, size_t n, const char *what) {
  fze_stage v = *ip;
  for (int lv = 0; lv < 3; lv++) {
    if (lv == 2 && ip->pdims < 2)
      continue;
    v.lv = (uint8_t)(lv ? lv : 0);
    v.flat = (uint8_t)(lv == 2 ? 4 - ip->pdims : 0);
    same_walk(q, &v, t, x, first, n, what);
  }
}

/* The chunks of an array of N elements the cases run: the engine's full
 * chunks (the first, the second, the last), ones starting mid-row and
 * mid-plane, tiny ones, one at random. */
typedef struct cut {
  uint64_t first, n;
} cut;

static size_t cuts(const shape *s, unsigned w, uint64_t seed, cut *c) {
  uint64_t N = count(s), C = CHUNK_BYTES / w, X = s->dims[s->ndims - 1];
  uint64_t P = s->ndims > 1 ? X * s->dims[s->ndims - 2] : X;
  size_t k = 0;
#define CUT(f, m)                                                                              \
  do {                                                                                         \
    uint64_t f_ = (f), m_ = (m);                                                               \
    if (f_ < N) {                                                                              \
      m_ = m_ < N - f_ ? m_ : N - f_;                                                          \
      if (m_ > 0)                                                                              \
        c[k++] = (cut){f_, m_};                                                                \
    }                                                                                          \
  } while (0)
  CUT(0, C);
  if (N > C) {
    CUT(C, C);
    CUT((N - 1) / C * C, C);
  }
  CUT(X / 2 + 1, 1007);
  CUT(P + X / 3 + 5, 3 * X + 2);
  CUT(P / 2 + 3, P + X + 7);
  CUT(N / 3, 1);
  CUT(N / 3 + 1, 2);
  CUT(N / 2 + 1, 31);
  CUT(N / 2 + 5, 33);
  CUT(N - 1, 1);
  uint64_t f = rnd(&seed) % N;
  CUT(f, 1 + rnd(&seed) % C);
#undef CUT
  return k;
}

static const double fracs[] = {1e-2, 1e-3, 1e-4, 1e-5};

/* The range of the finite values (1 when there is none or it is 0), for
 * ABS bounds as fractions of it. */
static double range(const void *x, size_t n, int f32) {
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < n; i++) {
    double v = f32 ? (double)((const float *)x)[i] : ((const double *)x)[i];
    if (isfinite(v)) {
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
  }
  return hi > lo && isfinite(hi - lo) ? hi - lo : 1.0;
}

/* Every cut of the shape, both types, kinds from kmask, ABS and REL at
 * each fraction of the range (and ABS at each of 140). */
static void run_shape(const shape *s, unsigned pdims, unsigned kmask) {
  for (int f32 = 0; f32 < 2; f32++)
    for (int k = 0; k < KINDS; k++) {
      if (!(kmask >> k & 1))
        continue;
      fz_dtype t = f32 ? FZ_F32 : FZ_F64;
      unsigned w = f32 ? 4 : 8;
      uint64_t seed = count(s) * 131 + (uint64_t)k * 7 + (uint64_t)f32;
      void *x = field(s, f32, (enum kind)k, seed);
      cut c[16];
      size_t nc = cuts(s, w, seed, c);
      double span = range(x, (size_t)count(s), f32);
      for (size_t fi = 0; fi < sizeof fracs / sizeof *fracs; fi++)
        for (int mode = 0; mode < 3; mode++) {
          /* ABS of the range, REL, and ABS of the smooth field's range
           * (about 140), which makes outliers of spikes the range hides. */
          int rel = mode == 1;
          double eb = fracs[fi] * (mode == 0 ? span : mode == 1 ? 1 : 140);
          fze_stage q, ip;
          if (!stages(s, pdims, t, rel ? FZ_EB_REL : FZ_EB_ABS, eb, x, &q, &ip))
            continue;
          for (size_t j = 0; j < nc; j++) {
            char what[192];
            snprintf(what, sizeof what,
                     "%u-d %llux%llux%llu (pdims %u) %s %s %s %g, chunk %llu+%llu",
                     s->ndims, (unsigned long long)ip.ext[ip.pdims - 1][0],
                     (unsigned long long)ip.ext[ip.pdims - 1][1],
                     (unsigned long long)ip.ext[ip.pdims - 1][2], ip.pdims, f32 ? "f32" : "f64",
                     kind_names[k], rel ? "REL" : "ABS", eb, (unsigned long long)c[j].first,
                     (unsigned long long)c[j].n);
            same(&q, &ip, t, x, c[j].first, (size_t)c[j].n, what);
          }
        }
      free(x);
    }
}

#define ALL_KINDS ((1u << KINDS) - 1)

TestSuite(ratio_enc_interp);

Test(ratio_enc_interp, one_dimension) {
  static const shape sh[] = {{1, {1}}, {1, {2}}, {1, {33}}, {1, {1000}}, {1, {100003}}};
  for (size_t i = 0; i < sizeof sh / sizeof *sh; i++)
    run_shape(&sh[i], 0, ALL_KINDS);
}

Test(ratio_enc_interp, two_dimensions) {
  static const shape sh[] = {{2, {1, 9}},    {2, {37, 61}},  {2, {300, 301}},
                             {2, {1000, 1}}, {2, {3, 100000}}};
  for (size_t i = 0; i < sizeof sh / sizeof *sh; i++)
    run_shape(&sh[i], 0, ALL_KINDS);
}

Test(ratio_enc_interp, three_dimensions) {
  static const shape sh[] = {{3, {3, 5, 7}},   {3, {1, 1, 1000}}, {3, {1, 1, 1}},
                             {3, {9, 1, 33}},  {3, {20, 30, 1}},  {3, {17, 96, 192}},
                             {3, {120, 49, 100}}};
  for (size_t i = 0; i < sizeof sh / sizeof *sh; i++)
    run_shape(&sh[i], 0, ALL_KINDS);
}

/* Planes larger than a chunk: chunks straddle two planes, whose bounding
 * box is many times the chunk. */
Test(ratio_enc_interp, large_planes) {
  static const shape sh = {3, {2, 700, 701}};
  run_shape(&sh, 0, 1u << SMOOTH | 1u << SPECIAL | 1u << SPIKES);
}

/* Dims folded: four dimensions into three, three into two and one. */
Test(ratio_enc_interp, folded_dims) {
  static const shape s4[] = {{4, {2, 3, 17, 19}}, {4, {1, 7, 1, 40}}, {4, {3, 5, 31, 33}}};
  for (size_t i = 0; i < sizeof s4 / sizeof *s4; i++)
    run_shape(&s4[i], 0, ALL_KINDS);
  static const shape s3 = {3, {17, 96, 192}};
  run_shape(&s3, 1, 1u << SMOOTH | 1u << SPECIAL | 1u << NOISE);
  run_shape(&s3, 2, 1u << SMOOTH | 1u << SPECIAL | 1u << NOISE);
}

/* Hand-made extremes: an all-outlier chunk, where every prediction reads
 * outliers' values (0 for NaN and Inf), one whose values sit right at
 * the edges of their bins, one whose predictions overflow. */
Test(ratio_enc_interp, extremes) {
  static const shape s = {3, {7, 33, 65}};
  size_t N = (size_t)count(&s);
  for (int f32 = 0; f32 < 2; f32++) {
    fz_dtype t = f32 ? FZ_F32 : FZ_F64;
    unsigned w = f32 ? 4 : 8;
    uint8_t *x = malloc(N * w);
    cr_assert(x);
    uint64_t seed = 99;
    for (size_t i = 0; i < N; i++) {
      uint64_t r = rnd(&seed);
      double v = r % 3 == 0 ? NAN : r % 3 == 1 ? INFINITY : (f32 ? 1e-41 : 1e-312);
      if (i == 5)
        v = 1.0; /* a finite value for the range */
      if (f32)
        ((float *)x)[i] = (float)v;
      else
        ((double *)x)[i] = v;
    }
    fze_stage q, ip;
    cr_assert(stages(&s, 0, t, FZ_EB_ABS, 1e-3, x, &q, &ip));
    same(&q, &ip, t, x, 0, N, "all outliers");
    same(&q, &ip, t, x, 100, N - 100, "all outliers, mid-row");
    /* Ties: with values in [1, 2) the ulp the bound is shaved by is
     * 2^-23 (2^-52), so this bound gives a step of exactly 2^-10, and
     * values on a grid of 2^-13 against predictions from rebuilt values on
     * coarser grids fall on many midpoints of bins, where the rounding
     * goes to even. */
    for (size_t i = 0; i < N; i++) {
      double v = 1.0 + (double)(rnd(&seed) % 8192) * 0x1p-13;
      if (f32)
        ((float *)x)[i] = (float)v;
      else
        ((double *)x)[i] = v;
    }
    cr_assert(stages(&s, 0, t, FZ_EB_ABS, 0x1p-11 + (f32 ? 0x1p-23 : 0x1p-52), x, &q, &ip));
    cr_assert_eq(q.step, 0x1p-10);
    same(&q, &ip, t, x, 0, N, "bin edges");
    same(&q, &ip, t, x, 77, N - 200, "bin edges, mid-row");
    free(x);
  }
  /* f64 values near the largest double: sums in the predictions overflow
   * to Inf (then the value is an outlier), so the order of the operations
   * shows. */
  double *y = malloc(N * 8);
  cr_assert(y);
  uint64_t seed = 5;
  for (size_t i = 0; i < N; i++) {
    uint64_t r = rnd(&seed);
    y[i] = (r % 3 == 0 ? -1.0 : 1.0) * (1.0 + (double)(r >> 40) * 0x1p-25) * 0x1p1023 * 0.75;
  }
  fze_stage q, ip;
  cr_assert(stages(&s, 0, FZ_F64, FZ_EB_ABS, 1e306, y, &q, &ip));
  same(&q, &ip, FZ_F64, y, 0, N, "huge");
  same(&q, &ip, FZ_F64, y, 1000, N - 1000, "huge, mid-plane");
  free(y);
}

/* Shapes, cuts, fields and bounds at random: 1 to 4 dims of 1 to 40 (one
 * in four a 1), predicted in 1 up to 3 of them. */
Test(ratio_enc_interp, random) {
  uint64_t seed = 2026;
  for (int it = 0; it < 400; it++) {
    shape s = {1 + (unsigned)(rnd(&seed) % 4), {1, 1, 1, 1}};
    for (unsigned d = 0; d < s.ndims; d++)
      s.dims[d] = rnd(&seed) % 4 == 0 ? 1 : 1 + rnd(&seed) % 40;
    unsigned maxp = s.ndims < 3 ? s.ndims : 3;
    unsigned pdims = (unsigned)(rnd(&seed) % (maxp + 1)); /* 0: the default */
    int f32 = (int)(rnd(&seed) & 1);
    enum kind k = (enum kind)(rnd(&seed) % KINDS);
    fz_dtype t = f32 ? FZ_F32 : FZ_F64;
    uint64_t N = count(&s);
    void *x = field(&s, f32, k, seed);
    int rel = (int)(rnd(&seed) & 1);
    double eb = fracs[rnd(&seed) % 4] * (rel ? 1 : range(x, (size_t)N, f32));
    fze_stage q, ip;
    if (stages(&s, pdims, t, rel ? FZ_EB_REL : FZ_EB_ABS, eb, x, &q, &ip)) {
      uint64_t first = rnd(&seed) % N, n = 1 + rnd(&seed) % (N - first);
      char what[160];
      snprintf(what, sizeof what, "random case %d: %s %s, chunk %llu+%llu of %llu", it,
               f32 ? "f32" : "f64", kind_names[k], (unsigned long long)first,
               (unsigned long long)n, (unsigned long long)N);
      same(&q, &ip, t, x, first, (size_t)n, what);
    }
    free(x);
  }
}
