/*
 * test_roundtrip.c - property tests of the lossy pipelines: every kind of
 * data, sizes around the chunk boundaries, bounds from 1e-1 to 1e-7, all three
 * modes, both float types; each case asserts the bound with no slack, exact
 * special values, and deterministic archives.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "gen.h"
#include "params_1d.h"

static const char *const pipelines[] = {
    "fast", "balanced", "quant | diff(map=negabinary) | bitshuffle | rze(levels=2)"};
static const double bounds[] = {1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7};

/* One case: compress twice (identical bytes), decompress, check. */
static void roundtrip(fz_dtype t, enum gen_kind k, size_t n, const char *pipe,
                      fz_eb_mode mode, double eb, unsigned threads) {
  int f32 = t == FZ_F32;
  size_t w = f32 ? 4 : 8;
  char what[256];
  snprintf(what, sizeof what, "%s %s n=%zu '%s' %s eb=%g", f32 ? "f32" : "f64",
           gen_names[k], n, pipe, fz_eb_mode_name(mode), eb);
  void *x = malloc(n * w + 8), *y = malloc(n * w + 8);
  gen_fill(k, x, n, f32, n + 1);
  fz_params p;
  fzt_params_1d(&p, t, n, pipe);
  p.eb = eb;
  p.eb_mode = mode;
  p.threads = threads;
  fz_plan *pl;
  char why[256] = "";
  int rc = fz_plan_create(&p, &pl, why, sizeof why);
  cr_assert_eq(rc, 0, "%s: plan: %s (%s)", what, fz_strerror(rc), why);
  size_t cap = fz_plan_compress_bound(pl), la = 0, lb = 0, ly = 0;
  uint8_t *a = malloc(cap), *b = malloc(cap);
  rc = fz_plan_compress(pl, x, n * w, a, cap, &la);
  cr_assert_eq(rc, 0, "%s: compress: %s", what, fz_strerror(rc));
  rc = fz_plan_compress(pl, x, n * w, b, cap, &lb);
  cr_assert_eq(rc, 0, "%s: compress again: %s", what, fz_strerror(rc));
  cr_assert(la == lb && memcmp(a, b, la) == 0, "%s: archives differ", what);
  rc = fz_decompress(a, la, y, n * w, &ly, threads);
  cr_assert_eq(rc, 0, "%s: decompress: %s", what, fz_strerror(rc));
  cr_assert_eq(ly, n * w, "%s: decompressed size", what);
  check_bound(x, y, n, f32, mode, eb, what);
  free(a);
  free(b);
  free(x);
  free(y);
  fz_plan_destroy(pl);
}

static void sweep(fz_dtype t, fz_eb_mode mode) {
  size_t ce = FZ_CHUNK_DEFAULT / fz_dtype_size(t);
  const size_t sizes[] = {0, 1, ce - 1, ce, ce + 1, 50003};
  for (unsigned k = 0; k < GEN_KINDS; k++)
    for (unsigned s = 0; s < sizeof sizes / sizeof *sizes; s++)
      for (unsigned b = 0; b < sizeof bounds / sizeof *bounds; b++)
        for (unsigned q = 0; q < sizeof pipelines / sizeof *pipelines; q++)
          roundtrip(t, (enum gen_kind)k, sizes[s], pipelines[q], mode, bounds[b], 1);
}

Test(roundtrip, f32_abs, .timeout = 600) { sweep(FZ_F32, FZ_EB_ABS); }
Test(roundtrip, f32_rel, .timeout = 600) { sweep(FZ_F32, FZ_EB_REL); }
Test(roundtrip, f32_pwrel, .timeout = 600) { sweep(FZ_F32, FZ_EB_PWREL); }
Test(roundtrip, f64_abs, .timeout = 600) { sweep(FZ_F64, FZ_EB_ABS); }
Test(roundtrip, f64_rel, .timeout = 600) { sweep(FZ_F64, FZ_EB_REL); }
Test(roundtrip, f64_pwrel, .timeout = 600) { sweep(FZ_F64, FZ_EB_PWREL); }

Test(roundtrip, large_multithreaded, .timeout = 600) {
  for (unsigned q = 0; q < 2; q++)
    for (unsigned m = 0; m < 3; m++)
      roundtrip(FZ_F32, GEN_SMOOTH, 3000017, pipelines[q], (fz_eb_mode)m, 1e-3, 3);
  roundtrip(FZ_F64, GEN_SPECIAL_MIX, 1000003, "balanced", FZ_EB_REL, 1e-4, 2);
}

/* The archive must not depend on how many threads wrote it. */
Test(roundtrip, threads_do_not_change_bytes) {
  size_t n = 200000;
  float *x = malloc(n * 4);
  gen_fill(GEN_SMOOTH, x, n, 1, 3);
  uint8_t *ref = NULL;
  size_t ref_len = 0;
  for (unsigned threads = 1; threads <= 4; threads++) {
    fz_params p;
    fz_params_init(&p);
    p.ndims = 2;
    p.dims[0] = 400;
    p.dims[1] = 500;
    p.eb = 1e-3;
    p.threads = threads;
    fz_plan *pl;
    cr_assert_eq(fz_plan_create(&p, &pl, NULL, 0), 0);
    size_t cap = fz_plan_compress_bound(pl), len;
    uint8_t *a = malloc(cap);
    cr_assert_eq(fz_plan_compress(pl, x, n * 4, a, cap, &len), 0);
    if (ref == NULL) {
      ref = a;
      ref_len = len;
    } else {
      cr_assert(len == ref_len && memcmp(a, ref, len) == 0,
                "archive written by %u threads differs", threads);
      free(a);
    }
    fz_plan_destroy(pl);
  }
  free(ref);
  free(x);
}

Test(roundtrip, shape_and_chain_recorded) {
  size_t n = 6 * 7 * 8;
  double *x = malloc(n * 8);
  gen_fill(GEN_SMOOTH, x, n, 0, 1);
  fz_params p;
  fz_params_init(&p);
  p.dtype = FZ_F64;
  p.ndims = 3;
  p.dims[0] = 6;
  p.dims[1] = 7;
  p.dims[2] = 8;
  p.pipeline = "quant(eb=0.5,mode=abs) | bitpack";
  p.eb = 0; /* the job gives no bound: the chain's stands */
  fz_plan *pl;
  cr_assert_eq(fz_plan_create(&p, &pl, NULL, 0), 0);
  cr_assert_str_eq(fz_plan_chain(pl), "quant(eb=0.5,mode=abs) | bitpack");
  size_t cap = fz_plan_compress_bound(pl), len;
  uint8_t *a = malloc(cap);
  cr_assert_eq(fz_plan_compress(pl, x, n * 8, a, cap, &len), 0);
  fz_archive_info info;
  cr_assert_eq(fz_archive_inspect(a, len, &info), 0);
  cr_assert_eq(info.dtype, FZ_F64);
  cr_assert_eq(info.ndims, 3);
  cr_assert(info.dims[0] == 6 && info.dims[1] == 7 && info.dims[2] == 8);
  cr_assert_eq(info.raw_bytes, n * 8);
  cr_assert_eq(info.archive_bytes, len);
  cr_assert_eq(info.eb_abs, 0.5);
  cr_assert_str_eq(info.chain, "quant(eb=0.5,mode=abs) | bitpack");
  free(a);
  free(x);
  fz_plan_destroy(pl);
}

Test(roundtrip, sizes_and_capacity_are_checked) {
  fz_params p;
  fz_params_init(&p);
  p.ndims = 1;
  p.dims[0] = 10000;
  p.eb = 1e-2;
  fz_plan *pl;
  cr_assert_eq(fz_plan_create(&p, &pl, NULL, 0), 0);
  float *x = calloc(10000, 4);
  size_t cap = fz_plan_compress_bound(pl), len;
  uint8_t *a = malloc(cap);
  cr_assert_eq(fz_plan_compress(pl, x, 9999 * 4, a, cap, &len), FZ_ESIZE);
  cr_assert_eq(fz_plan_compress(pl, x, 10000 * 4, a, 10, &len), FZ_ENOSPC);
  for (size_t i = 0; i < 10000; i++) /* noise does not compress: needs room */
    x[i] = (float)((i * 2654435761u) % 1000003) / 7.0f;
  cr_assert_eq(fz_plan_compress(pl, x, 10000 * 4, a, 200, &len), FZ_ENOSPC);
  cr_assert_eq(fz_plan_compress(pl, x, 10000 * 4, a, cap, &len), 0);
  float y[10];
  size_t ylen;
  cr_assert_eq(fz_decompress(a, len, y, sizeof y, &ylen, 1), FZ_ENOSPC);
  free(a);
  free(x);
  fz_plan_destroy(pl);
}

/* The guarantee must not come from storing everything losslessly: smooth
 * data has to shrink, and more so under looser bounds. */
Test(roundtrip, smooth_data_compresses) {
  size_t n = 1 << 20;
  float *x = malloc(n * 4);
  gen_fill(GEN_SMOOTH, x, n, 1, 4);
  static const char *const presets[] = {"fast", "balanced"};
  for (unsigned q = 0; q < 2; q++) {
    double prev_ratio = 0;
    for (int e = 4; e >= 2; e--) {
      fz_params p;
      fz_params_init(&p);
      p.ndims = 1;
      p.dims[0] = n;
      p.pipeline = presets[q];
      p.eb = pow(10, -e);
      fz_plan *pl;
      cr_assert_eq(fz_plan_create(&p, &pl, NULL, 0), 0);
      size_t cap = fz_plan_compress_bound(pl), len;
      uint8_t *a = malloc(cap);
      cr_assert_eq(fz_plan_compress(pl, x, n * 4, a, cap, &len), 0);
      double ratio = (double)(n * 4) / (double)len;
      cr_assert_gt(ratio, 3.0, "%s at 1e-%d: ratio %.2f", presets[q], e, ratio);
      cr_assert_gt(ratio, prev_ratio, "%s: ratio must grow with the bound", presets[q]);
      prev_ratio = ratio;
      free(a);
      fz_plan_destroy(pl);
    }
  }
  free(x);
}
