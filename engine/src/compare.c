/*
 * compare.c - measures a reconstruction against its original: the numbers
 * the tests assert on and the daemon reports.  Errors are computed in long
 * double, so the comparison itself adds no rounding that could hide a bound
 * violation.
 */
#include <math.h>
#include <string.h>

#include "engine.h"
#include "ops.h"

static bool special32(uint32_t b) { return fzo_f32_special(b) || b == 0x80000000u; }
static bool special64(uint64_t b) { return fzo_f64_special(b) || b == 0x8000000000000000ull; }

int fz_compare(fz_dtype t, const void *a, const void *b, size_t n,
               fz_compare_result *res) {
  if (res == NULL || (n && (a == NULL || b == NULL)))
    return FZ_EINVAL;
  memset(res, 0, sizeof *res);
  size_t w = fz_dtype_size(t);
  if (w == 0)
    return FZ_EDTYPE;
  if (!fze_dtype_is_float(t)) {
    /* Integers: every element must match exactly; report the largest gap. */
    long double lo = 0, hi = 0, maxe = 0;
    for (size_t i = 0; i < n; i++) {
      long double x, y;
      const uint8_t *pa = (const uint8_t *)a + i * w, *pb = (const uint8_t *)b + i * w;
      switch (t) {
#define CASE(T, C)                                                             \
  case T: {                                                                    \
    C u, v;                                                                    \
    memcpy(&u, pa, sizeof u);                                                  \
    memcpy(&v, pb, sizeof v);                                                  \
    x = u;                                                                     \
    y = v;                                                                     \
    break;                                                                     \
  }
        CASE(FZ_U8, uint8_t) CASE(FZ_I8, int8_t) CASE(FZ_U16, uint16_t)
        CASE(FZ_I16, int16_t) CASE(FZ_U32, uint32_t) CASE(FZ_I32, int32_t)
        CASE(FZ_U64, uint64_t) CASE(FZ_I64, int64_t)
#undef CASE
      default:
        return FZ_EDTYPE;
      }
      if (i == 0 || x < lo) lo = x;
      if (i == 0 || x > hi) hi = x;
      long double e = fabsl(x - y);
      if (e > maxe) maxe = e;
    }
    res->max_abs_error = (double)maxe;
    res->value_range = (double)(hi - lo);
    return 0;
  }
  long double lo = INFINITY, hi = -INFINITY, maxe = 0, maxr = 0;
  for (size_t i = 0; i < n; i++) {
    long double x, y;
    bool spec;
    if (t == FZ_F32) {
      uint32_t u, v;
      memcpy(&u, (const uint8_t *)a + 4 * i, 4);
      memcpy(&v, (const uint8_t *)b + 4 * i, 4);
      spec = special32(u);
      if (spec) {
        res->nonfinite_mismatches += u != v;
        continue;
      }
      x = fzo_bits_f32(u);
      y = fzo_bits_f32(v);
    } else {
      uint64_t u, v;
      memcpy(&u, (const uint8_t *)a + 8 * i, 8);
      memcpy(&v, (const uint8_t *)b + 8 * i, 8);
      spec = special64(u);
      if (spec) {
        res->nonfinite_mismatches += u != v;
        continue;
      }
      x = fzo_bits_f64(u);
      y = fzo_bits_f64(v);
    }
    if (x < lo) lo = x;
    if (x > hi) hi = x;
    if (!isfinite(y)) {
      res->nonfinite_mismatches++;
      continue;
    }
    long double e = fabsl(x - y);
    if (e > maxe) maxe = e;
    if (x != 0 && e / fabsl(x) > maxr) maxr = e / fabsl(x);
    if (x == 0 && e > 0) maxr = INFINITY;
  }
  res->max_abs_error = (double)maxe;
  res->max_rel_error = (double)maxr;
  res->value_range = lo <= hi ? (double)(hi - lo) : 0;
  return 0;
}
