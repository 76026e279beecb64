/*
 * gpu_large.c - byte identity on inputs of several GiB, past every 32-bit
 * offset (size with FZ_GPU_TEST_LARGE_MB, default 4400; 0 skips the test).
 */
#include <criterion/criterion.h>
#include <stdio.h>

#include "gpu_util.h"

Test(large, balanced_and_fast_f32, .timeout = 1500) {
  const char *env = getenv("FZ_GPU_TEST_LARGE_MB");
  size_t mb = env ? (size_t)strtoull(env, NULL, 10) : 4400;
  if (mb == 0)
    cr_skip_test("FZ_GPU_TEST_LARGE_MB=0");
  size_t n = mb * 1000 * 1000 / 4 + 3; /* a partial last chunk */
  float *x = malloc(n * 4);
  cr_assert_not_null(x);
  uint64_t s = 1;
  for (size_t i = 0; i < n; i++) {
    double t = (double)(i % 10000019) / 1000.0;
    x[i] = (float)(sin(t) + 0.3 * sin(0.01 * (double)i) + 1e-3 * (double)(rng_next(&s) % 1000));
  }
  size_t a = check_identity(FZ_F32, "balanced", FZ_EB_REL, 1e-3, 0, x, n, FZ_GPU_PREALLOC);
  size_t b = check_identity(FZ_F32, "fast", FZ_EB_REL, 1e-4, 0, x, n, 0);
  fprintf(stderr, "large: %zu bytes in, balanced %zu, fast %zu bytes out\n", n * 4, a, b);
  free(x);
}
