/*
 * ratio_enc_lz_model.c - the quantizer, the side list, Lorenzo and the
 * prices of the ratio preset's GPU encoder (ratio_enc_lz.cuh), run on the
 * CPU: the very phases the kernel runs, each for every thread of a block
 * in turn, must give the engine's bytes and numbers exactly.
 *
 * Compared with: fze_quant_encode (the words, and the side list that
 * fzre_side_write makes from fzre_quant's flags), with the AVX2 loop and
 * without; fze_lorenzo_price, fze_lorenzo_encode, fze_lorenzo_cost,
 * fze_words_cost and fze_interp_guess (its price and its outliers; the
 * words it writes are only counted here).  The inputs: random words, words
 * of smooth fields, constants, zeros, values with NaN, Inf, -0.0,
 * denormals and huge ones; chunks of 1, 2, 31, 33 elements up to the full
 * 256 KiB, starting at the array's start, mid-row and mid-plane; every k
 * of every folding of the shapes (the engine's own folding,
 * fze_chain_resolve_shape); buffers on and off their element alignment.
 * No GPU is needed, so CI checks the pieces' logic on every run (and the
 * ci-asan build that they read and write nothing out of bounds).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "fz.h"
#include "ratio_enc_lz.cuh"
#include "ratio_shape.h"

_Static_assert(FZRE_GUESS_STEP == FZE_GUESS_STEP, "the guess's stride is the engine's");
_Static_assert(FZRE_TOP == FZE_INTERP_TOP, "the anchors' spacing is the engine's");

enum kind { SMOOTH, NOISE, CONSTANT, ZEROS, SPECIAL, KINDS };

/* n values of a field over a shape whose rows are X long and planes X Y. */
static void field(uint8_t *out, size_t n, uint64_t X, uint64_t Y, int f32, enum kind k,
                  uint64_t seed) {
  for (size_t i = 0; i < n; i++) {
    double xx = (double)(i % X), yy = (double)((i / X) % Y), zz = (double)(i / X / Y);
    double v = sin(xx * 0.05) * cos(yy * 0.07) * 50 + sin(zz * 0.3) * 7 + xx * 0.01;
    uint64_t r = rnd(&seed);
    if (k == NOISE)
      v = (double)(r >> 11) * 0x1p-53 * 200 - 100;
    else if (k == CONSTANT)
      v = 3.25;
    else if (k == ZEROS)
      v = 0;
    else if (k == SPECIAL) {
      switch (r % 13) {
      case 0: v = NAN; break;
      case 1: v = INFINITY; break;
      case 2: v = -INFINITY; break;
      case 3: v = -0.0; break;
      case 4: v = f32 ? 1e-40 : 1e-310; break;
      case 5: v = 1e6 * (double)(r >> 40); break;
      case 6: v = -1e30 * (double)(r >> 60); break;
      default: break;
      }
    }
    if (f32) {
      float f = (float)v;
      memcpy(out + 4 * i, &f, 4);
    } else {
      memcpy(out + 8 * i, &v, 8);
    }
  }
}

/* Outputs, with room past their end that must stay 0xa5. */
static uint8_t *buf(size_t bytes) {
  uint8_t *p = malloc(bytes + 16);
  cr_assert(p);
  memset(p, 0xa5, bytes + 16);
  return p;
}

/* Inputs, copied into a buffer of their size exactly (off bytes off
 * their alignment), so that ASan sees any read past them. */
static uint8_t *exact(const uint8_t *x, size_t bytes, size_t off) {
  uint8_t *p = malloc(bytes + off);
  cr_assert(p);
  memcpy(p + off, x, bytes);
  return p;
}

/* ---- the quantizer and its side list ---- */

/* The engine's quant stage resolved on the data, as fze_quant_resolve
 * (fzo_quant_params) does for a job. */
static fze_stage quant_stage(fz_eb_mode mode, double eb, fz_dtype t, const void *x, size_t n) {
  fze_stage st;
  memset(&st, 0, sizeof st);
  st.id = FZE_STAGE_QUANT;
  st.mode = (uint8_t)mode;
  st.has_eb = st.has_mode = true;
  st.eb = eb;
  char why[256] = "";
  cr_assert_eq(fze_quant_resolve(&st, t, x, n, why, sizeof why), 0, "%s", why);
  return st;
}

static fzre_q model_q(const fze_stage *st) {
  fzre_q q = {st->step, st->step != 0 ? 1.0 / st->step : 0, st->eb_abs,
              st->mode == FZ_EB_PWREL, st->lv, 0};
  return q;
}

/* The finite range of the values, for bounds relative to it. */
static double range_of(const uint8_t *x, size_t n, int f32) {
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < n; i++) {
    double v;
    if (f32) {
      float f;
      memcpy(&f, x + 4 * i, 4);
      v = f;
    } else {
      memcpy(&v, x + 8 * i, 8);
    }
    if (isfinite(v)) {
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
  }
  return lo <= hi && hi > lo ? hi - lo : 1.0;
}

static fzre_lz L;

/* fzre_quant then fzre_side_write against fze_quant_encode; the input
 * and the words `off` bytes off alignment.  Returns the outliers. */
static size_t check_quant(const fze_stage *st, fz_dtype t, const uint8_t *x, size_t n,
                          size_t off, const char *what) {
  unsigned w = (unsigned)fz_dtype_size(t);
  uint8_t *in = exact(x, n * w, off), *codes = buf(n * w), *side = buf(n * (w + 4) + 8);
  uint8_t *words = buf(n * w), *bad = buf(n), *mside = buf(n * (w + 4) + 8);
  uint8_t *work = malloc(fze_quant_work_bytes(n));
  uint8_t *scratch = malloc(fzre_lz_scratch(n, w) + 1);
  cr_assert(work && scratch);
  fzre_q q = model_q(st);
  fzre_quant(&L, &q, in + off, n, w, words + off, bad);
  fzre_side_write(&L, bad, in + off, n, w, mside + off, scratch);
  for (int avx = 0; avx < 2; avx++) {
    fze_set_avx2(avx != 0);
    size_t sl = fze_quant_encode(st, t, x, n, codes, side, work);
    cr_assert(memcmp(codes, words + off, n * w) == 0, "%s: words differ (avx %d)", what, avx);
    cr_assert_eq(L.side_len, sl, "%s: side list of %llu bytes, the engine's %zu", what,
                 (unsigned long long)L.side_len, sl);
    cr_assert(memcmp(side, mside + off, sl) == 0, "%s: side lists differ", what);
    cr_assert_eq(mside[off + sl], 0xa5, "%s: written past the side list", what);
  }
  size_t m = (size_t)L.m;
  fze_set_avx2(true);
  for (size_t i = 0; i < n; i++)
    cr_assert(bad[i] <= 1, "%s: flag %u", what, bad[i]);
  cr_assert_eq(bad[n], 0xa5, "%s: written past the flags", what);
  free(in);
  free(codes);
  free(side);
  free(words);
  free(bad);
  free(mside);
  free(work);
  free(scratch);
  return m;
}

Test(ratio_enc_lz, quantizes_like_the_engine) {
  static const size_t ns[] = {1, 2, 31, 33, 1000, 32768, 65535, 65536};
  static const double fr[] = {1e-2, 1e-3, 1e-4, 1e-5, 1e-9};
  size_t outliers = 0, lossless = 0;
  for (int f32 = 0; f32 < 2; f32++)
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
      for (int k = 0; k < KINDS; k++) {
        size_t n = ns[ni], w = f32 ? 4 : 8;
        if (!f32 && n > 32768)
          continue; /* a chunk holds 32768 doubles */
        fz_dtype t = f32 ? FZ_F32 : FZ_F64;
        uint8_t *x = buf(n * w);
        field(x, n, 517, 9, f32, (enum kind)k, 7 * ni + (uint64_t)k);
        double range = range_of(x, n, f32);
        char what[160];
        for (size_t fi = 0; fi < sizeof fr / sizeof *fr; fi++)
          for (int mode = 0; mode < 3; mode++) {
            double eb = mode == FZ_EB_ABS ? fr[fi] * range : fr[fi];
            if (mode == FZ_EB_PWREL && fr[fi] < 1e-6)
              continue; /* below f32's resolution: lossless, tried below */
            fze_stage st = quant_stage((fz_eb_mode)mode, eb, t, x, n);
            lossless += st.step == 0;
            for (size_t off = 0; off < 4; off += 3) {
              snprintf(what, sizeof what, "%s n %zu kind %d mode %d eb %g off %zu",
                       f32 ? "f32" : "f64", n, k, mode, eb, off);
              outliers += check_quant(&st, t, x, n, off, what);
            }
          }
        /* Lossless: a bound below the type's resolution. */
        fze_stage st = quant_stage(FZ_EB_ABS, 1e-320, t, x, n);
        cr_assert_eq(st.step, 0);
        snprintf(what, sizeof what, "%s n %zu kind %d lossless", f32 ? "f32" : "f64", n, k);
        cr_assert_eq(check_quant(&st, t, x, n, 3, what), 0);
        lossless++;
        free(x);
      }
  /* The inputs do reach both paths. */
  cr_assert(outliers > 100000, "only %zu outliers", outliers);
  cr_assert(lossless > 20);
}

/* ---- Lorenzo and the prices ---- */

static const shape shapes[] = {
    {1, {65536}},        {2, {128, 512}},    {3, {4, 64, 256}},  {3, {17, 96, 192}},
    {4, {2, 17, 96, 96}}, {3, {3, 5, 7}},     {2, {5, 7}},        {1, {33}},
    {3, {1, 1, 7}},      {3, {9, 1, 33}},    {3, {31, 1, 1}},    {4, {3, 5, 31, 33}},
    {2, {1000, 3}},      {3, {2, 300, 301}},
};

/* The engine's folding of a shape for every k (a lorenzo stage's ext). */
static fze_stage folded(const shape *s) {
  fze_chain c;
  memset(&c, 0, sizeof c);
  c.n = 1;
  c.st[0].id = FZE_STAGE_LORENZO;
  char why[128] = "";
  cr_assert_eq(fze_chain_resolve_shape(&c, s->ndims, s->dims, why, sizeof why), 0, "%s", why);
  return c.st[0];
}

enum wkind { W_RANDOM, W_SMOOTH, W_CONSTANT, W_ZEROS, W_SMALL, WKINDS };

/* The words of a whole array: random bits, a smooth field's quantized
 * words, one constant, zeros, small random ones. */
static uint8_t *array_words(uint64_t N, uint64_t X, uint64_t Y, unsigned w, enum wkind k,
                            uint64_t seed) {
  uint8_t *v = buf(N * w);
  if (k == W_SMOOTH) {
    fz_dtype t = w == 4 ? FZ_F32 : FZ_F64;
    uint8_t *x = buf(N * w), *side = buf(N * (w + 4) + 8);
    uint8_t *work = malloc(fze_quant_work_bytes(N));
    cr_assert(work);
    field(x, N, X, Y, w == 4, SMOOTH, seed);
    fze_stage st = quant_stage(FZ_EB_ABS, 1e-3, t, x, N);
    fze_quant_encode(&st, t, x, N, v, side, work);
    free(x);
    free(side);
    free(work);
    return v;
  }
  for (uint64_t i = 0; i < N; i++) {
    uint64_t r = rnd(&seed);
    uint64_t u = k == W_RANDOM ? r : k == W_CONSTANT ? 0x89abcdef01234567ull : k == W_ZEROS ? 0
                 : (r % 7) - 3;
    fzre_st(v, w, i, u);
  }
  return v;
}

/* Where the chunks start: the array's start, chunk boundaries, mid-row
 * and mid-plane, near the end. */
static size_t starts(uint64_t N, uint64_t X, uint64_t XY, uint64_t C, uint64_t *first,
                     uint64_t *len) {
  uint64_t cand[][2] = {{0, C},          {C, C},          {X / 2, C},     {XY + 3, C},
                        {2 * XY - 1, C}, {XY / 3 + 1, 33}, {X + 1, 31},   {N - 1, 1},
                        {N - 2, 2},      {5, 1000},       {N / 2, 33}};
  size_t k = 0;
  for (size_t i = 0; i < sizeof cand / sizeof *cand; i++) {
    uint64_t f = cand[i][0];
    if (f >= N)
      continue;
    uint64_t n = cand[i][1] < N - f ? cand[i][1] : N - f;
    bool dup = false;
    for (size_t j = 0; j < k; j++)
      dup |= first[j] == f && len[j] == n;
    if (dup)
      continue;
    first[k] = f;
    len[k++] = n;
  }
  return k;
}

static void check_lorenzo(const fze_stage *st, unsigned k, unsigned w, const uint8_t *cw,
                          size_t n, uint64_t first, const char *what) {
  const uint64_t *ext = st->ext[k - 1];
  /* The words off alignment where the chunk is odd, so both paths run. */
  size_t off = (n & 1) ? 3 : 0;
  uint8_t *words = exact(cw, n * w, off), *res = buf(n * w), *ref = buf(n * w);
  uint64_t price = fze_lorenzo_price(st, k, w, cw, n, first);
  fzre_lz_price(&L, ext, words + off, w, n, first);
  cr_assert_eq(L.cost, price, "%s: price %llu, the engine's %llu", what,
               (unsigned long long)L.cost, (unsigned long long)price);
  fze_lorenzo_encode(st, k, w, cw, ref, n, first);
  fzre_lz_encode(ext, words + off, res + off, w, n, first);
  cr_assert(memcmp(ref, res + off, n * w) == 0, "%s: residuals differ", what);
  cr_assert_eq(res[off + n * w], 0xa5, "%s: written past the residuals", what);
  uint64_t c5 = fze_lorenzo_cost(w, ref, n);
  fzre_cost_every(&L, res + off, w, n, FZRE_COST_STEP);
  cr_assert_eq(L.cost, c5, "%s: lorenzo cost", what);
  /* The price is the cost of the residuals it samples (the engine's
   * promise, which makes it a check of both sides). */
  cr_assert_eq(price, c5, "%s: the engine's price and cost", what);
  uint64_t c1 = fze_words_cost(w, cw, n);
  fzre_cost_every(&L, words + off, w, n, 1);
  cr_assert_eq(L.cost, c1, "%s: words cost", what);
  free(words);
  free(res);
  free(ref);
}

Test(ratio_enc_lz, lorenzo_like_the_engine) {
  uint64_t nonzero = 0;
  for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
    for (unsigned w = 4; w <= 8; w += 4) {
      const shape *s = &shapes[si];
      fze_stage st = folded(s);
      uint64_t N = count(s), X = s->dims[s->ndims - 1];
      uint64_t XY = X * (s->ndims > 1 ? s->dims[s->ndims - 2] : 1);
      uint64_t first[16], len[16];
      size_t nf = starts(N, X, XY, w == 4 ? 65536 : 32768, first, len);
      for (int wk = 0; wk < WKINDS; wk++) {
        uint8_t *v = array_words(N, X, XY / X, w, (enum wkind)wk, si * 11 + (uint64_t)wk);
        for (size_t fi = 0; fi < nf; fi++)
          for (unsigned k = 1; k <= st.pdims; k++) {
            char what[200];
            snprintf(what, sizeof what,
                     "shape %zu w %u words %d first %llu n %llu k %u ext %llu,%llu,%llu", si, w,
                     wk, (unsigned long long)first[fi], (unsigned long long)len[fi], k,
                     (unsigned long long)st.ext[k - 1][0], (unsigned long long)st.ext[k - 1][1],
                     (unsigned long long)st.ext[k - 1][2]);
            check_lorenzo(&st, k, w, v + first[fi] * w, (size_t)len[fi], first[fi], what);
            nonzero += L.cost != 0;
          }
        free(v);
      }
    }
  cr_assert(nonzero > 100);
}

/* The interpolation's guess for every k as the interp stage's pdims. */
Test(ratio_enc_lz, guesses_like_the_engine) {
  static const double fr[] = {1e-2, 1e-4, 1e-12};
  uint64_t outl = 0;
  for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
    for (int f32 = 0; f32 < 2; f32++) {
      const shape *s = &shapes[si];
      unsigned w = f32 ? 4 : 8;
      fz_dtype t = f32 ? FZ_F32 : FZ_F64;
      fze_stage ip = folded(s);
      ip.id = FZE_STAGE_INTERP;
      unsigned pd = ip.pdims;
      uint64_t N = count(s), X = s->dims[s->ndims - 1];
      uint64_t XY = X * (s->ndims > 1 ? s->dims[s->ndims - 2] : 1);
      uint64_t first[16], len[16];
      size_t nf = starts(N, X, XY, f32 ? 65536 : 32768, first, len);
      for (int k = 0; k < KINDS; k++) {
        uint8_t *x = buf(N * w), *gw = buf(N * w / 5 + 64);
        field(x, N, X, XY / X, f32, (enum kind)k, si * 13 + (uint64_t)k);
        double range = range_of(x, N, f32);
        for (size_t fi = 0; fi < nf; fi++)
          for (size_t ei = 0; ei < sizeof fr / sizeof *fr; ei++)
            for (int mode = 0; mode < 2; mode++) {
              const uint8_t *cx = x + first[fi] * w;
              size_t n = (size_t)len[fi];
              fze_stage q = quant_stage((fz_eb_mode)mode, mode == FZ_EB_ABS ? fr[ei] * range
                                                                            : fr[ei],
                                        t, cx, n);
              if (q.step == 0)
                continue; /* the engine guesses only for a quantizer */
              fzre_q mq = model_q(&q);
              size_t off = (fi & 1) ? 3 : 0;
              uint8_t *in = exact(cx, n * w, off);
              for (unsigned kk = 1; kk <= 3 * pd; kk++) {
                /* Each dims in the walks of both format versions, and
                 * version 6's along the fastest dims - 1 axes only. */
                ip.pdims = (uint8_t)((kk + 2) / 3);
                ip.lv = kk % 3 != 1;
                ip.flat = (uint8_t)(kk % 3 == 0 && ip.pdims >= 2 ? 4 - ip.pdims : 0);
                mq.lv = ip.lv;
                mq.flat = ip.flat;
                size_t eo = 0;
                uint64_t g = fze_interp_guess(&q, &ip, t, cx, n, first[fi], gw, &eo);
                fzre_interp_guess(&L, &mq, ip.ext[ip.pdims - 1], in + off, w, n, first[fi]);
                cr_assert_eq(L.cost, g,
                             "shape %zu %s kind %d first %llu n %zu mode %d eb %g k %u: "
                             "guess %llu, the engine's %llu",
                             si, f32 ? "f32" : "f64", k, (unsigned long long)first[fi], n, mode,
                             fr[ei], kk, (unsigned long long)L.cost, (unsigned long long)g);
                cr_assert_eq(L.outl, eo, "shape %zu kind %d k %u: outliers", si, k, kk);
                outl += eo;
              }
              ip.pdims = (uint8_t)pd;
              ip.lv = false;
              ip.flat = 0;
              free(in);
            }
        free(x);
        free(gw);
      }
    }
  cr_assert(outl > 1000, "only %llu outliers", (unsigned long long)outl);
}
