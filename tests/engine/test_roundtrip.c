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

/* Compresses n values of x with p; returns the code, with the archive in
 * *arc (caller frees) on success. */
static int compress_with(const fz_params *p, const void *x, size_t bytes, uint8_t **arc,
                         size_t *len, char *why, size_t why_len) {
  fz_plan *pl;
  *arc = NULL;
  int rc = fz_plan_create(p, &pl, why, why_len);
  if (rc < 0)
    return rc;
  size_t cap = fz_plan_compress_bound(pl);
  *arc = malloc(cap);
  rc = fz_plan_compress(pl, x, bytes, *arc, cap, len);
  if (rc < 0) {
    snprintf(why, why_len, "%s", fz_plan_error(pl));
    free(*arc);
    *arc = NULL;
  }
  fz_plan_destroy(pl);
  return rc;
}

/* The compressor never returns an archive its own decoder refuses: huge
 * bounds are refused (before work, or from the data for REL) or give an
 * archive that decodes within the bound. */
Test(roundtrip, huge_bounds_are_refused_or_decode) {
  size_t n = 5000;
  double *x = malloc(n * 8), *y = malloc(n * 8);
  float *xf = malloc(n * 4), *yf = malloc(n * 4);
  for (size_t i = 0; i < n; i++) {
    x[i] = -5e8 + 1e9 * (double)i / (double)(n - 1); /* spans 1e9 */
    xf[i] = (float)x[i];
  }
  static const double ebs[] = {1e290, 1e299, 1e300, 1e307, 4.4e307, 8e307, 8.9e307, 1e308};
  char why[512];
  for (int f32 = 0; f32 < 2; f32++)
    for (unsigned m = 0; m < 2; m++)
      for (size_t e = 0; e < sizeof ebs / sizeof *ebs; e++) {
        fz_params p;
        fzt_params_1d(&p, f32 ? FZ_F32 : FZ_F64, n, "balanced");
        p.eb = ebs[e];
        p.eb_mode = (fz_eb_mode)m;
        uint8_t *a;
        size_t len, ylen;
        why[0] = 0;
        int rc = compress_with(&p, f32 ? (void *)xf : (void *)x, n * (f32 ? 4 : 8), &a, &len, why,
                               sizeof why);
        if (rc < 0) {
          cr_assert_eq(rc, FZ_EBOUND, "%s eb %g: %s", fz_eb_mode_name(p.eb_mode), ebs[e], why);
          cr_assert(why[0] != 0, "a refusal says why");
          continue;
        }
        rc = fz_decompress(a, len, f32 ? (void *)yf : (void *)y, n * 8, &ylen, 1);
        cr_assert_eq(rc, 0, "%s %s eb %g: the archive does not decode: %s", f32 ? "f32" : "f64",
                     fz_eb_mode_name(p.eb_mode), ebs[e], fz_strerror(rc));
        check_bound(f32 ? (void *)xf : (void *)x, f32 ? (void *)yf : (void *)y, n, f32,
                    p.eb_mode, ebs[e], "huge bound");
        free(a);
      }
  /* The two of the report: ABS 1e308 before work, REL 1e299 on a range of
   * 1e9 from the data, each with the values quoted. */
  fz_params p;
  fzt_params_1d(&p, FZ_F64, n, "quant(eb=1e308,mode=abs) | bitpack");
  uint8_t *a;
  size_t len;
  cr_assert_eq(compress_with(&p, x, n * 8, &a, &len, why, sizeof why), FZ_EBOUND);
  cr_assert(strstr(why, "1e+308"), "%s", why);
  fzt_params_1d(&p, FZ_F64, n, "balanced");
  p.eb = 1e299;
  cr_assert_eq(compress_with(&p, x, n * 8, &a, &len, why, sizeof why), FZ_EBOUND);
  cr_assert(strstr(why, "1e+299") && strstr(why, "1e+09") && strstr(why, "-5e+08"), "%s", why);
  free(x);
  free(y);
  free(xf);
  free(yf);
}

/* An ocean field with land cells of -1e10 (netCDF _FillValue): with the fill
 * given, REL scales by the range of the ocean values alone, every fill cell
 * comes back bit for bit, every other value within the bound. */
static void fill_case(int f32, const char *pipe, fz_eb_mode mode, double eb, int in_job) {
  size_t n = 3 * 4096 + 77, w = f32 ? 4 : 8;
  const double fill = -1e10;
  void *x = malloc(n * w), *y = malloc(n * w);
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < n; i++) {
    int land = (i / 300) % 3 == 0 || i % 17 == 0;
    double v = land ? fill : 12.0 + 8.0 * sin((double)i * 0.01);
    if (!land) {
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
    if (f32)
      ((float *)x)[i] = (float)v;
    else
      ((double *)x)[i] = v;
  }
  char what[256], why[512];
  snprintf(what, sizeof what, "%s '%s' %s %g fill in %s", f32 ? "f32" : "f64", pipe,
           fz_eb_mode_name(mode), eb, in_job ? "job" : "chain");
  fz_params p;
  fzt_params_1d(&p, f32 ? FZ_F32 : FZ_F64, n, pipe);
  p.eb = eb;
  p.eb_mode = mode;
  if (in_job) {
    p.has_fill = 1;
    p.fill_value = fill;
  }
  uint8_t *a;
  size_t len, ylen;
  int rc = compress_with(&p, x, n * w, &a, &len, why, sizeof why);
  cr_assert_eq(rc, 0, "%s: %s (%s)", what, fz_strerror(rc), why);
  fz_archive_info info;
  cr_assert_eq(fz_archive_inspect(a, len, &info), 0, "%s", what);
  cr_assert(strstr(info.chain, "fill=-10000000000") != NULL, "%s: chain %s", what, info.chain);
  cr_assert(info.has_fill && info.fill_value == fill, "%s: the archive's fill", what);
  if (mode == FZ_EB_REL) {
    /* The bound comes from the ocean's range, not the land's -1e10. */
    double want = eb * (hi - lo);
    cr_assert(info.eb_abs <= want && info.eb_abs > 0.999 * want, "%s: eb_abs %g, want %g",
              what, info.eb_abs, want);
  }
  cr_assert_eq(a[4], 2, "%s: an archive with a fill is format version 2", what);
  rc = fz_decompress(a, len, y, n * w, &ylen, 1);
  cr_assert_eq(rc, 0, "%s: decompress: %s", what, fz_strerror(rc));
  size_t fills = 0;
  for (size_t i = 0; i < n; i++) {
    const char *px = (const char *)x + i * w, *py = (const char *)y + i * w;
    double v = f32 ? ((const float *)x)[i] : ((const double *)x)[i];
    if (v == (f32 ? (double)(float)fill : fill)) {
      cr_assert(memcmp(px, py, w) == 0, "%s: fill at %zu not bit-exact", what, i);
      fills++;
      continue;
    }
    double r = f32 ? ((const float *)y)[i] : ((const double *)y)[i];
    long double bound = mode == FZ_EB_ABS   ? (long double)eb
                        : mode == FZ_EB_REL ? (long double)eb * ((long double)hi - lo)
                                            : (long double)eb * fabsl((long double)v);
    cr_assert(fabsl((long double)v - r) <= bound, "%s: value %zu: |%.17g - %.17g| > %Lg", what,
              i, v, r, bound);
  }
  cr_assert_gt(fills, n / 4, "%s: the field holds fill cells", what);
  /* Fill cells cost little: the whole archive is smaller than the fill
   * cells alone would take as outliers (2 bytes of index and the value). */
  cr_assert_lt(len, fills * (2 + w), "%s: %zu bytes for %zu fill cells", what, len, fills);
  free(a);
  free(x);
  free(y);
}

Test(roundtrip, fill_values_are_exact_and_out_of_the_range) {
  for (int f32 = 0; f32 < 2; f32++)
    for (int in_job = 0; in_job < 2; in_job++) {
      fill_case(f32, in_job ? "balanced" : "quant(fill=-1e10) | diff | bitshuffle | rze", FZ_EB_REL,
                1e-3, in_job);
      fill_case(f32, in_job ? "fast" : "quant(fill=-1e10) | bitpack", FZ_EB_REL, 1e-4, in_job);
      fill_case(f32, in_job ? "balanced" : "quant(fill=-1e10) | diff | bitshuffle | rze", FZ_EB_ABS,
                1e-2, in_job);
      fill_case(f32, in_job ? "fast" : "quant(fill=-1e10) | bitpack", FZ_EB_PWREL, 1e-3, in_job);
    }
}

/* Without a fill, archives stay format version 1, byte for byte as before. */
Test(roundtrip, archives_without_fill_stay_version_1) {
  size_t n = 10000;
  float *x = malloc(n * 4);
  gen_fill(GEN_SMOOTH, x, n, 1, 3);
  fz_params p;
  fzt_params_1d(&p, FZ_F32, n, "balanced");
  p.eb = 1e-3;
  uint8_t *a;
  size_t len;
  char why[256];
  cr_assert_eq(compress_with(&p, x, n * 4, &a, &len, why, sizeof why), 0, "%s", why);
  cr_assert_eq(a[4], 1);
  fz_archive_info info;
  cr_assert_eq(fz_archive_inspect(a, len, &info), 0);
  cr_assert(!info.has_fill);
  free(a);
  free(x);
}
