/*
 * fzflat.c - the flat engine calls of fzflat.h: they fill the engine's
 * structs from scalar arguments and read them back, so that a caller
 * through a foreign-function interface never depends on their layout.
 */
#include "fzflat.h"

#include <string.h>

int fzflat_plan_create(int dtype, unsigned ndims, const uint64_t *dims, const char *pipeline,
                       double eb, int mode, int has_fill, double fill_value, unsigned threads,
                       fz_plan **out, char *why, size_t why_len) {
  if (!out || (ndims && !dims) || ndims > FZ_MAX_DIMS)
    return FZ_EINVAL;
  fz_params p;
  fz_params_init(&p);
  p.dtype = (fz_dtype)dtype;
  p.ndims = ndims;
  for (unsigned i = 0; i < ndims; i++)
    p.dims[i] = dims[i];
  p.pipeline = pipeline;
  p.eb = eb;
  p.eb_mode = (fz_eb_mode)mode;
  p.threads = threads;
  p.has_fill = has_fill != 0;
  p.fill_value = fill_value;
  return fz_plan_create(&p, out, why, why_len);
}

int fzflat_inspect(const void *arc, size_t arc_len, int *dtype, unsigned *ndims, uint64_t *dims,
                   uint64_t *raw_bytes) {
  if (!arc || !dims)
    return FZ_EINVAL;
  fz_archive_info info;
  int rc = fz_archive_inspect(arc, arc_len, &info);
  if (rc < 0)
    return rc;
  if (dtype)
    *dtype = (int)info.dtype;
  if (ndims)
    *ndims = info.ndims;
  memcpy(dims, info.dims, sizeof info.dims);
  if (raw_bytes)
    *raw_bytes = info.raw_bytes;
  return 0;
}

#ifdef FZFLAT_FRAMES
#include "fz_frames.h"

int fzflat_frames_create(int dtype, size_t npixels, int codec, const uint8_t *mask, size_t rows,
                         const uint64_t *indptr, const uint32_t *indices, const float *w_f32,
                         const int32_t *w_i32, struct fz_frames **out, char *why, size_t why_len) {
  fz_frames_csr csr = {
      .nrows = rows, .indptr = indptr, .indices = indices, .w_f32 = w_f32, .w_i32 = w_i32};
  fz_frames_params p = {.dtype = (fz_dtype)dtype,
                        .npixels = npixels,
                        .codec = (fz_bslz4_codec)codec,
                        .mask = mask,
                        .csr = rows ? &csr : NULL};
  return fz_frames_create(&p, out, why, why_len);
}

int64_t fzflat_frames_sparse(struct fz_frames *f, const void *chunk, size_t len, double cut,
                             size_t top_n, void *values, uint32_t *indices, size_t cap,
                             size_t *listed, double *powder_f64, int64_t *powder_i64, char *why,
                             size_t why_len) {
  fz_frames_out o = {.values = values,
                     .indices = indices,
                     .cap = cap,
                     .powder_f64 = powder_f64,
                     .powder_i64 = powder_i64};
  int64_t rc = fz_frames_sparse(f, chunk, len, cut, top_n, &o, why, why_len);
  if (listed)
    *listed = rc < 0 ? 0 : o.count;
  return rc;
}
#endif
