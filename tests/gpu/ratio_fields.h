/*
 * ratio_fields.h - the fields and CPU archives the host models of the ratio
 * kernels share (test_kernel_ratio, test_kernel_ratio_threads): a field
 * smooth along every axis, noise, a constant, or one with NaN, Inf, -0.0,
 * denormals and huge values mixed in, and the CPU engine's archive of it.
 * Included after Criterion's header (or test_kernel_ratio_threads's own
 * cr_assert when it runs without Criterion).
 */
#ifndef FZ_TEST_RATIO_FIELDS_H
#define FZ_TEST_RATIO_FIELDS_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fz.h"
#include "ratio_shape.h"

enum kind { SMOOTH, NOISE, CONSTANT, SPECIAL, KINDS };

static inline void *field(const shape *s, int f32, enum kind k, uint64_t seed) {
  size_t n = (size_t)count(s), w = f32 ? 4 : 8;
  uint8_t *x = malloc(n * w + 8);
  cr_assert(x);
  uint64_t X = s->dims[s->ndims - 1], Y = s->ndims > 1 ? s->dims[s->ndims - 2] : 1;
  for (size_t i = 0; i < n; i++) {
    double xx = (double)(i % X), yy = (double)((i / X) % Y), zz = (double)(i / X / Y);
    double v = sin(xx * 0.05) * cos(yy * 0.07) * 50 + zz * 0.3 + xx * 0.01;
    uint64_t r = rnd(&seed);
    if (k == NOISE)
      v = (double)(r >> 11) * 0x1p-53 * 2 - 1;
    else if (k == CONSTANT)
      v = 3.25;
    else if (k == SPECIAL) {
      switch (r % 16) {
      case 0: v = NAN; break;
      case 1: v = INFINITY; break;
      case 2: v = -INFINITY; break;
      case 3: v = -0.0; break;
      case 4: v = f32 ? 1e-40 : 1e-310; break;
      case 5: v = 1e6 * (double)(r >> 40); break;
      default: break;
      }
    }
    if (f32)
      ((float *)x)[i] = (float)v;
    else
      ((double *)x)[i] = v;
  }
  return x;
}

static inline uint8_t *compress(const shape *s, fz_dtype t, const void *x, const char *pipe,
                         fz_eb_mode mode, double eb, unsigned chunk, size_t *len) {
  fz_params p;
  fz_params_init(&p);
  p.dtype = t;
  p.ndims = s->ndims;
  memcpy(p.dims, s->dims, sizeof s->dims);
  p.pipeline = pipe;
  p.eb = eb;
  p.eb_mode = mode;
  p.chunk_bytes = chunk;
  fz_plan *pl = NULL;
  char why[256] = "";
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), 0, "%s: %s", pipe, why);
  size_t cap = fz_plan_compress_bound(pl);
  uint8_t *a = malloc(cap);
  cr_assert(a);
  cr_assert_eq(fz_plan_compress(pl, x, fz_plan_input_bytes(pl), a, cap, len), 0, "%s", pipe);
  fz_plan_destroy(pl);
  return a;
}

#endif
