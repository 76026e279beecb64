/*
 * bench_data.h - the inputs of the benchmarks: raw float32 fields read from
 * files named NAME_D0xD1[xD2...].f32 (the shape, slowest dimension first, is
 * taken from the name), and generated smooth or noisy fields.  Shared by the
 * CPU benchmark (C) and the GPU benchmark (CUDA C++).
 */
#ifndef FZ_BENCH_DATA_H
#define FZ_BENCH_DATA_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads a whole file of floats; *n receives their number.  NULL on failure. */
static inline float *bench_load(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  float *x = len > 0 ? (float *)malloc((size_t)len) : NULL;
  if (x && fread(x, 1, (size_t)len, f) != (size_t)len) {
    free(x);
    x = NULL;
  }
  fclose(f);
  *n = x ? (size_t)len / 4 : 0;
  return x;
}

/* The shape in a file name "NAME_D0xD1...f32": up to max_dims dimensions
 * into dims; returns how many (0 when the name carries none). */
static inline unsigned bench_shape(const char *path, uint64_t *dims, unsigned max_dims) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  const char *us = strrchr(base, '_');
  if (!us)
    return 0;
  unsigned nd = 0;
  const char *s = us + 1;
  while (nd < max_dims) {
    char *end;
    dims[nd++] = strtoull(s, &end, 10);
    if (*end != 'x')
      break;
    s = end + 1;
  }
  return nd;
}

/* "smooth" (two sines plus a little noise) or "noise" (uniform in [-1, 1]). */
static inline float *bench_generate(const char *kind, size_t n) {
  float *x = (float *)malloc(n * sizeof *x);
  uint64_t s = 42;
  for (size_t i = 0; x && i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double r = (double)(s >> 11) / 9007199254740992.0;
    double t = (double)i / 1000.0;
    x[i] = strcmp(kind, "noise") == 0 ? (float)(r * 2 - 1)
                                       : (float)(sin(t) + 0.5 * sin(3.7 * t) + 0.01 * r);
  }
  return x;
}

#endif
