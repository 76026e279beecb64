/*
 * check.h - the assertions every round-trip test makes: each finite value
 * within the bound with no slack (errors computed in long double), every
 * NaN, Inf, -0.0 and denormal restored bit for bit.
 */
#ifndef FZ_TEST_CHECK_H
#define FZ_TEST_CHECK_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fz.h"

static inline int special_bits(const void *p, int f32) {
  if (f32) {
    uint32_t b;
    memcpy(&b, p, 4);
    uint32_t e = (b >> 23) & 0xff;
    return e == 0xff || (e == 0 && b != 0);
  }
  uint64_t b;
  memcpy(&b, p, 8);
  uint64_t e = (b >> 52) & 0x7ff;
  return e == 0x7ff || (e == 0 && b != 0);
}

static inline long double load_ld(const void *p, int f32) {
  if (f32) {
    float x;
    memcpy(&x, p, 4);
    return x;
  }
  double x;
  memcpy(&x, p, 8);
  return x;
}

/* The range of the finite values, as the REL bound is defined. */
static inline long double finite_range(const void *x, size_t n, int f32) {
  long double lo = INFINITY, hi = -INFINITY;
  size_t w = f32 ? 4 : 8;
  for (size_t i = 0; i < n; i++) {
    long double v = load_ld((const char *)x + i * w, f32);
    if (!isfinite(v))
      continue;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  return lo <= hi ? hi - lo : 0;
}

/* Asserts the guarantee for n values; `what` names the case in failures. */
static inline void check_bound(const void *x, const void *y, size_t n, int f32,
                               fz_eb_mode mode, double eb, const char *what) {
  size_t w = f32 ? 4 : 8;
  long double range = finite_range(x, n, f32);
  for (size_t i = 0; i < n; i++) {
    const char *px = (const char *)x + i * w, *py = (const char *)y + i * w;
    if (special_bits(px, f32)) {
      cr_assert(memcmp(px, py, w) == 0, "%s: special value at %zu not bit-exact", what, i);
      continue;
    }
    long double a = load_ld(px, f32), b = load_ld(py, f32);
    long double err = fabsl(a - b);
    long double bound = mode == FZ_EB_ABS   ? (long double)eb
                        : mode == FZ_EB_REL ? (long double)eb * range
                                            : (long double)eb * fabsl(a);
    if (a == 0 && signbit(a)) /* -0.0 is special: bit-exact above */
      continue;
    cr_assert(isfinite(b) && err <= bound,
              "%s: value %zu: |%.17Lg - %.17Lg| = %Lg exceeds bound %Lg", what, i,
              a, b, err, bound);
  }
}

#endif
