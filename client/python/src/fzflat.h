/*
 * fzflat.h - a flat C surface of the engine for foreign-function callers.
 *
 * The Python package loads the engine with ctypes.  ctypes can call any
 * function whose arguments are scalars and pointers, but mirroring a C
 * struct in Python (fz_params, fz_archive_info) copies its layout into a
 * second place that nothing checks when the struct changes.  These two
 * functions take the structs' fields as plain arguments instead; every other
 * call the package makes (fz_plan_compress, fz_decompress, fz_err_name...)
 * is fz.h's own.  They are exported by the shared engine library
 * (libfzengine.so) beside fz.h's API.
 */
#ifndef FZFLAT_H
#define FZFLAT_H

#include <stddef.h>
#include <stdint.h>

#include "fz.h"

#ifdef __cplusplus
extern "C" {
#endif

/* fz_plan_create() with fz_params spelled out: dtype and mode are fz_dtype
 * and fz_eb_mode values, dims holds ndims extents (slowest first), pipeline
 * may be NULL ("balanced"), eb 0 gives no bound, has_fill nonzero keeps
 * fill_value exactly.  Returns what fz_plan_create() returns. */
int fzflat_plan_create(int dtype, unsigned ndims, const uint64_t *dims, const char *pipeline,
                       double eb, int mode, int has_fill, double fill_value, unsigned threads,
                       fz_plan **out, char *why, size_t why_len);

/* fz_archive_inspect() with the fields a reader needs before decoding:
 * *dtype (an fz_dtype), *ndims, dims[0..ndims-1] (dims must hold
 * FZ_MAX_DIMS), *raw_bytes.  Any pointer but arc and dims may be NULL. */
int fzflat_inspect(const void *arc, size_t arc_len, int *dtype, unsigned *ndims, uint64_t *dims,
                   uint64_t *raw_bytes);

/* Detector frames (fz_frames.h), in libraries built with the frames codec
 * (FZFLAT_FRAMES; a caller checks that the symbols exist).  codec is an
 * fz_bslz4_codec, mask NULL or npixels bytes, rows 0 for no matrix, else
 * indptr, indices and exactly one of w_f32, w_i32 as fz_frames_csr.
 * Returns what fz_frames_create() returns. */
struct fz_frames;
int fzflat_frames_create(int dtype, size_t npixels, int codec, const uint8_t *mask, size_t rows,
                         const uint64_t *indptr, const uint32_t *indices, const float *w_f32,
                         const int32_t *w_i32, struct fz_frames **out, char *why, size_t why_len);
/* fz_frames_sparse() with fz_frames_out spelled out: *listed receives the
 * pixels written to values and indices (cap of each). */
int64_t fzflat_frames_sparse(struct fz_frames *f, const void *chunk, size_t len, double cut,
                             size_t top_n, void *values, uint32_t *indices, size_t cap,
                             size_t *listed, double *powder_f64, int64_t *powder_i64, char *why,
                             size_t why_len);

#ifdef __cplusplus
}
#endif
#endif /* FZFLAT_H */
