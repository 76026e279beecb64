/*
 * test_lossless.c - the lossless preset and lossless chains bring every
 * fixed-width type back bit for bit, whatever the bits are.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "fz.h"
#include "gen.h"
#include "params_1d.h"

static void lossless(fz_dtype t, const char *pipe, size_t n, int pattern) {
  size_t w = fz_dtype_size(t);
  uint8_t *x = malloc(n * w + 1), *y = malloc(n * w + 1);
  uint64_t s = n * 31 + (uint64_t)t;
  for (size_t i = 0; i < n * w; i++) {
    switch (pattern) {
    case 0: x[i] = (uint8_t)gen_rand(&s); break;        /* random bits */
    case 1: x[i] = (uint8_t)((i / w) >> (8 * (i % w))); break; /* counter */
    default: x[i] = (i % w == w - 1) ? 0x80 : 0; break; /* sign bits only */
    }
  }
  fz_params p;
  fzt_params_1d(&p, t, n, pipe);
  fz_plan *pl;
  char why[256] = "";
  int rc = fz_plan_create(&p, &pl, why, sizeof why);
  cr_assert_eq(rc, 0, "%s '%s': %s", fz_dtype_name(t), pipe, why);
  size_t cap = fz_plan_compress_bound(pl), len, ylen;
  uint8_t *a = malloc(cap);
  rc = fz_plan_compress(pl, x, n * w, a, cap, &len);
  cr_assert_eq(rc, 0, "%s: %s", fz_dtype_name(t), fz_strerror(rc));
  cr_assert_leq(len, cap);
  rc = fz_decompress(a, len, y, n * w, &ylen, 2);
  cr_assert_eq(rc, 0, "%s: %s", fz_dtype_name(t), fz_strerror(rc));
  cr_assert(ylen == n * w && memcmp(x, y, n * w) == 0,
            "%s '%s' n=%zu pattern %d not bit-exact", fz_dtype_name(t), pipe, n, pattern);
  if (pattern == 1 && n > 10000 && strcmp(pipe, "lossless") == 0)
    cr_assert_lt(len, n * w / 2, "%s counter should compress: %zu of %zu",
                 fz_dtype_name(t), len, n * w);
  free(a);
  free(x);
  free(y);
  fz_plan_destroy(pl);
}

Test(lossless, every_dtype_every_pattern, .timeout = 300) {
  static const char *const pipes[] = {"lossless", "diff(map=negabinary) | bitshuffle | rze(levels=1)",
                                      "bitpack", "bitshuffle | rze", "diff"};
  const size_t sizes[] = {0, 1, 7, 4095, 4096, 4097, 40000};
  for (int t = FZ_U8; t <= FZ_F64; t++)
    for (unsigned q = 0; q < 5; q++)
      for (unsigned s = 0; s < 7; s++)
        for (int pat = 0; pat < 3; pat++)
          lossless((fz_dtype)t, pipes[q], sizes[s], pat);
}

/* Floats through the lossless preset keep NaN payloads, -0.0, Inf and
 * denormals. */
Test(lossless, float_specials) {
  for (int f32 = 0; f32 <= 1; f32++) {
    size_t n = 30000, w = f32 ? 4 : 8;
    uint8_t *x = malloc(n * w), *y = malloc(n * w);
    gen_fill(GEN_SPECIAL_MIX, x, n, f32, 9);
    fz_params p;
    fzt_params_1d(&p, f32 ? FZ_F32 : FZ_F64, n, "lossless");
    fz_plan *pl;
    cr_assert_eq(fz_plan_create(&p, &pl, NULL, 0), 0);
    size_t cap = fz_plan_compress_bound(pl), len, ylen;
    uint8_t *a = malloc(cap);
    cr_assert_eq(fz_plan_compress(pl, x, n * w, a, cap, &len), 0);
    cr_assert_eq(fz_decompress(a, len, y, n * w, &ylen, 1), 0);
    cr_assert(memcmp(x, y, n * w) == 0);
    free(a);
    free(x);
    free(y);
    fz_plan_destroy(pl);
  }
}

/* A bound below the type's resolution turns the quantizer lossless. */
Test(lossless, unreachable_bound_is_exact) {
  size_t n = 10000;
  float *x = malloc(n * 4), *y = malloc(n * 4);
  gen_fill(GEN_SMOOTH, x, n, 1, 2);
  fz_params p;
  fz_params_init(&p);
  p.ndims = 1;
  p.dims[0] = n;
  p.eb = 1e-300;
  p.eb_mode = FZ_EB_ABS;
  fz_plan *pl;
  cr_assert_eq(fz_plan_create(&p, &pl, NULL, 0), 0);
  size_t cap = fz_plan_compress_bound(pl), len, ylen;
  uint8_t *a = malloc(cap);
  cr_assert_eq(fz_plan_compress(pl, x, n * 4, a, cap, &len), 0);
  cr_assert_eq(fz_decompress(a, len, y, n * 4, &ylen, 1), 0);
  cr_assert(memcmp(x, y, n * 4) == 0);
  fz_archive_info info;
  cr_assert_eq(fz_archive_inspect(a, len, &info), 0);
  cr_assert_eq(info.eb_abs, 0.0);
  free(a);
  free(x);
  free(y);
  fz_plan_destroy(pl);
}
