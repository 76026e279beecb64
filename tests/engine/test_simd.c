/*
 * test_simd.c - the AVX2 loops and the portable loops must write the same
 * bytes: every sample is compressed both ways and the archives compared, and
 * each archive is decoded both ways.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine.h"
#include "gen.h"

static uint8_t *compress(const void *x, fz_dtype t, size_t n, const char *pipe,
                         double eb, fz_eb_mode mode, size_t *len) {
  fz_params p;
  fz_params_init(&p);
  p.dtype = t;
  p.ndims = 1;
  p.dims[0] = n;
  p.pipeline = pipe;
  p.eb = eb;
  p.eb_mode = mode;
  fz_plan *pl;
  cr_assert_eq(fz_plan_create(&p, &pl, NULL, 0), 0);
  size_t cap = fz_plan_compress_bound(pl);
  uint8_t *a = malloc(cap);
  cr_assert_eq(fz_plan_compress(pl, x, n * fz_dtype_size(t), a, cap, len), 0);
  fz_plan_destroy(pl);
  return a;
}

Test(simd, avx2_and_portable_loops_agree, .timeout = 300) {
  fze_set_avx2(true);
  if (!fze_have_avx2())
    cr_skip_test("this CPU has no AVX2: only the portable loops exist here");
  static const char *const pipes[] = {"balanced", "fast", "lossless",
                                      "quant | bitshuffle | rze(levels=1)"};
  const size_t sizes[] = {1, 31, 33, 4095, 4096, 4127, 100000};
  for (unsigned k = 0; k < GEN_KINDS; k++)
    for (unsigned s = 0; s < sizeof sizes / sizeof *sizes; s++)
      for (unsigned q = 0; q < 4; q++)
        for (int e = 1; e <= 7; e += 3) {
          size_t n = sizes[s];
          float *x = malloc(n * 4), *y1 = malloc(n * 4), *y2 = malloc(n * 4);
          gen_fill((enum gen_kind)k, x, n, 1, 77);
          size_t la, lb, ly;
          fze_set_avx2(true);
          uint8_t *a = compress(x, FZ_F32, n, pipes[q], pow(10, -e), FZ_EB_REL, &la);
          cr_assert_eq(fz_decompress(a, la, y1, n * 4, &ly, 1), 0);
          fze_set_avx2(false);
          uint8_t *b = compress(x, FZ_F32, n, pipes[q], pow(10, -e), FZ_EB_REL, &lb);
          cr_assert_eq(fz_decompress(a, la, y2, n * 4, &ly, 1), 0);
          cr_assert(la == lb && memcmp(a, b, la) == 0,
                    "%s n=%zu '%s' 1e-%d: AVX2 and portable archives differ",
                    gen_names[k], n, pipes[q], e);
          cr_assert(memcmp(y1, y2, n * 4) == 0, "%s n=%zu '%s': decodes differ",
                    gen_names[k], n, pipes[q]);
          free(a);
          free(b);
          free(x);
          free(y1);
          free(y2);
        }
  fze_set_avx2(true);
}
