/*
 * params_1d.h - the job the engine, GPU and daemon suites build again and
 * again: default parameters for n elements of one type in one dimension,
 * through a pipeline (NULL keeps the default).
 */
#ifndef FZ_TEST_PARAMS_1D_H
#define FZ_TEST_PARAMS_1D_H

#include <stddef.h>

#include "fz.h"

static inline void fzt_params_1d(fz_params *p, fz_dtype t, size_t n, const char *pipeline) {
  fz_params_init(p);
  p->dtype = t;
  p->ndims = 1;
  p->dims[0] = n;
  if (pipeline)
    p->pipeline = pipeline;
}

#endif
