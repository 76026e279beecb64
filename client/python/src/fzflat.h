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

#ifdef __cplusplus
}
#endif
#endif /* FZFLAT_H */
