/*
 * snapshots.h - what the DevitoComp suites share: a padded (halo) layout of
 * one snapshot, a field that changes with the time step, DevitoPRO's packing
 * of payloads at the provider's alignment into one layered store, and the
 * relative tolerance of DEVITOCOMP_RTOL.
 */
#ifndef DEVITOCOMP_SNAPSHOTS_H
#define DEVITOCOMP_SNAPSHOTS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "devitocomp.h"

/* A tensor of shape dims (rank 2 or 3) inside an allocation padded by halo
 * elements on each side of every dimension, as Devito lays out a Function:
 * the strides are those of the padded array, the data starts at the first
 * interior point. */
typedef struct padded {
  devitocomp_tensor_t t;
  size_t alloc_elems;  /* of the padded allocation */
  size_t origin;       /* element offset of the interior's first point */
} padded;

static inline padded padded_layout(devitocomp_dtype_t dtype, int rank, const int64_t *dims,
                                   int64_t halo) {
  padded p = {.t = {.dtype = dtype, .rank = rank}};
  int64_t stride = 1;
  p.origin = 0;
  for (int i = rank - 1; i >= 0; i--) {
    p.t.shape[i] = dims[i];
    p.t.strides[i] = stride;
    p.origin += (size_t)(halo * stride);
    stride *= dims[i] + 2 * halo;
  }
  p.alloc_elems = (size_t)stride;
  return p;
}

/* Element offset (from the interior's origin) of the flat interior index k. */
static inline size_t padded_offset(const padded *p, size_t k) {
  size_t off = 0;
  for (int i = p->t.rank - 1; i >= 0; i--) {
    off += (k % (size_t)p->t.shape[i]) * (size_t)p->t.strides[i];
    k /= (size_t)p->t.shape[i];
  }
  return off;
}

static inline size_t padded_count(const padded *p) {
  size_t n = 1;
  for (int i = 0; i < p->t.rank; i++)
    n *= (size_t)p->t.shape[i];
  return n;
}

/* A wave field at time step `step` (with exact zeros, which a pointwise
 * relative bound must keep). */
static inline double wave(size_t k, int step) {
  if (k % 97 == 0)
    return 0.0;
  return 3.0 * sin(0.013 * (double)k + 0.3 * step) * exp(-0.0001 * (double)(k % 5000)) +
         0.01 * step;
}

static inline size_t align_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

/* The tolerance a test checks: DEVITOCOMP_RTOL when set (as DevitoPRO's
 * suite reads it), else the error the plan was made with. */
static inline double test_rtol(double error) {
  const char *s = getenv("DEVITOCOMP_RTOL");
  return s != NULL && *s != '\0' ? strtod(s, NULL) : error;
}

#endif
