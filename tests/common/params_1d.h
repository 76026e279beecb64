/*
 * params_1d.h - the job the engine, GPU and daemon suites build again and
 * again: default parameters for n elements of one type in one dimension,
 * through a pipeline (NULL keeps the default), or in a shape.
 */
#ifndef FZ_TEST_PARAMS_1D_H
#define FZ_TEST_PARAMS_1D_H

#include <stddef.h>

#include "fz.h"

/* The same in the shape dims (nd of them, slowest first). */
static inline void fzt_params_shaped(fz_params *p, fz_dtype t, const size_t *dims, unsigned nd,
                                     const char *pipeline) {
  fz_params_init(p);
  p->dtype = t;
  p->ndims = nd;
  for (unsigned d = 0; d < nd; d++)
    p->dims[d] = dims[d];
  if (pipeline)
    p->pipeline = pipeline;
}

static inline void fzt_params_1d(fz_params *p, fz_dtype t, size_t n, const char *pipeline) {
  fzt_params_shaped(p, t, &n, 1, pipeline);
}

#endif
