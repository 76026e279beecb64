/*
 * ratio_shape.h - what the ratio kernels' tests share: an array's shape
 * (up to 4 dims, slowest first), its element count, and the seeded
 * generator their fields come from, so that every suite draws the same
 * values from the same seed.
 */
#ifndef FZ_TEST_RATIO_SHAPE_H
#define FZ_TEST_RATIO_SHAPE_H

#include <stdint.h>

typedef struct shape {
  unsigned ndims;
  uint64_t dims[4];
} shape;

static inline uint64_t count(const shape *s) {
  uint64_t n = 1;
  for (unsigned i = 0; i < s->ndims; i++)
    n *= s->dims[i];
  return n;
}

/* A 64-bit LCG step, its output mixed. */
static inline uint64_t rnd(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  uint64_t x = *s;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  return x ^ (x >> 29);
}

#endif
