/*
 * gen.h - deterministic test data: the kinds of fields the property tests
 * sweep (smooth, noise, constants, zeros, ramps, spikes, mixtures of NaN,
 * Inf, -0.0 and denormals, magnitudes near the type's limits).
 */
#ifndef FZ_TEST_GEN_H
#define FZ_TEST_GEN_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

enum gen_kind {
  GEN_SMOOTH, GEN_NOISE, GEN_CONST, GEN_ZEROS, GEN_RAMP, GEN_SPIKES,
  GEN_SPECIAL_MIX, GEN_HUGE, GEN_TINY, GEN_KINDS
};

static const char *const gen_names[GEN_KINDS] = {
    "smooth", "noise", "constant", "zeros", "ramp", "spikes",
    "nan-inf-denormal-mix", "near-max", "near-min"};

static inline uint64_t gen_rand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  uint64_t x = *s;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

static inline double gen_unit(uint64_t *s) { return (double)(gen_rand(s) >> 11) * 0x1p-53; }

/* The value at i of kind k; `f32` selects the limits of float or double. */
static inline double gen_value(enum gen_kind k, size_t i, uint64_t *s, int f32) {
  double t = (double)i * 0.001;
  switch (k) {
  case GEN_SMOOTH: return 100.0 * sin(t) + 37.5 * cos(2.3 * t) + 0.01 * gen_unit(s);
  case GEN_NOISE: return gen_unit(s) * 2.0 - 1.0;
  case GEN_CONST: return 3.25;
  case GEN_ZEROS: return 0.0;
  case GEN_RAMP: return -50.0 + (double)i * 0.125;
  case GEN_SPIKES: return (gen_rand(s) % 97 == 0) ? 1e6 * gen_unit(s) : sin(t);
  case GEN_SPECIAL_MIX: {
    uint64_t r = gen_rand(s) % 12;
    double denorm = f32 ? (double)FLT_MIN / 1024.0 : DBL_MIN / 1024.0;
    switch (r) {
    case 0: return NAN;
    case 1: return INFINITY;
    case 2: return -INFINITY;
    case 3: return -0.0;
    case 4: return denorm * (1 + (double)(gen_rand(s) % 100));
    case 5: return -denorm;
    default: return sin(t) * 10;
    }
  }
  case GEN_HUGE: return (f32 ? (double)FLT_MAX : DBL_MAX) * (0.5 + 0.5 * gen_unit(s)) *
                        (gen_rand(s) & 1 ? 1 : -1);
  case GEN_TINY: return (f32 ? (double)FLT_MIN : DBL_MIN) * (1.0 + 1000.0 * gen_unit(s));
  default: return 0;
  }
}

/* Fills n floats or doubles; NaNs get a payload so its preservation shows. */
static inline void gen_fill(enum gen_kind k, void *out, size_t n, int f32, uint64_t seed) {
  uint64_t s = seed * 7919 + (uint64_t)k;
  for (size_t i = 0; i < n; i++) {
    double v = gen_value(k, i, &s, f32);
    if (f32) {
      float x = (float)v;
      if (isnan(v)) {
        uint32_t b = 0x7fc00000u | (uint32_t)(i & 0x3fffff) | 1u;
        memcpy(&x, &b, 4);
      }
      memcpy((char *)out + 4 * i, &x, 4);
    } else {
      if (isnan(v)) {
        uint64_t b = 0x7ff8000000000000ull | (i & 0xffffffffull) | 1u;
        memcpy(&v, &b, 8);
      }
      memcpy((char *)out + 8 * i, &v, 8);
    }
  }
}

#endif
