/*
 * frames_testlib.c - flat calls of fz_frames.h for the oracle test
 * (tests/frames/oracle.py, through ctypes): plain pointers and integers
 * only, so Python never mirrors a struct.  Test-only: not installed.
 */
#include <stddef.h>
#include <stdint.h>

#include "fz_frames.h"

int64_t fzt_decode(int codec, const void *chunk, size_t len, size_t elem_size, void *out,
                   size_t out_len, char *why, size_t why_len) {
  return fz_bslz4_decode((fz_bslz4_codec)codec, chunk, len, elem_size, out, out_len, why, why_len);
}

int64_t fzt_encode(int codec, const void *data, size_t nelems, size_t elem_size, size_t block_elems,
                   int level, void *out, size_t cap) {
  return fz_bslz4_encode((fz_bslz4_codec)codec, data, nelems, elem_size, block_elems, level, out,
                         cap, NULL, 0);
}

size_t fzt_bound(int codec, size_t nelems, size_t elem_size, size_t block_elems) {
  return fz_bslz4_bound((fz_bslz4_codec)codec, nelems, elem_size, block_elems);
}

/* Sparse output of one frame, with an optional matrix (nrows 0: none);
 * returns the number of pixels listed or a negative code. */
int64_t fzt_sparse(int dtype, size_t npixels, int codec, const uint8_t *mask, const void *chunk,
                   size_t len, double cut, size_t top_n, void *values, uint32_t *indices,
                   size_t cap, size_t nrows, const uint64_t *indptr, const uint32_t *cols,
                   const float *wf, const int32_t *wi, double *pf, int64_t *pi, char *why,
                   size_t why_len) {
  fz_frames_csr m = {nrows, indptr, cols, wf, wi};
  fz_frames_params p = {.dtype = (fz_dtype)dtype,
                        .npixels = npixels,
                        .codec = (fz_bslz4_codec)codec,
                        .mask = mask,
                        .csr = nrows ? &m : NULL};
  fz_frames *f = NULL;
  int rc = fz_frames_create(&p, &f, why, why_len);
  if (rc < 0)
    return rc;
  fz_frames_out o = {
      .values = values, .indices = indices, .cap = cap, .powder_f64 = pf, .powder_i64 = pi};
  int64_t got = fz_frames_sparse(f, chunk, len, cut, top_n, &o, why, why_len);
  fz_frames_destroy(f);
  return got < 0 ? got : (int64_t)o.count;
}
