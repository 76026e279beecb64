/*
 * fzclient_f.c - the C companion of the Fortran module fzclient.
 *
 * libfzclient's jobs are described by fz_job and answered in fz_result,
 * structs with pointers, unsigned and char-array members that grow at their
 * ends as the library gains features.  A Fortran mirror of them with
 * bind(C) derived types would have to track every such change by hand, and
 * a mismatch would corrupt memory without a word.  So the structs never
 * cross the language boundary: these shims take the scalars and pointers a
 * Fortran program has (shape as int64 values, strings NUL-terminated by the
 * module), fill an fz_job here, run the call, and hand back the few result
 * fields the module exposes.  The connection calls (connect, close, errmsg)
 * take no structs and are bound directly by the module.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fzclient.h"

/* Fortran's default-kind integers and logicals are C ints; sizes are
 * c_size_t; shapes are c_int64_t, slowest-varying first (the module
 * reverses a Fortran array's column-major extents). */
static int fill_job(fz_job *j, const char *dtype, int ndims, const int64_t *shape,
                    const char *pipeline, double eb, const char *mode) {
  if (ndims < 1 || ndims > FZ_CLIENT_MAX_DIMS || shape == NULL)
    return FZ_EINVAL;
  fz_job_init(j);
  j->dtype = dtype;
  j->ndims = (unsigned)ndims;
  for (int i = 0; i < ndims; i++) {
    if (shape[i] <= 0)
      return FZ_EINVAL;
    j->shape[i] = (uint64_t)shape[i];
  }
  j->pipeline = pipeline != NULL && pipeline[0] != '\0' ? pipeline : NULL;
  j->eb = eb;
  j->mode = mode != NULL && mode[0] != '\0' ? mode : NULL;
  return 0;
}

int fzf_compress(fz_client *c, const char *dtype, int ndims, const int64_t *shape,
                 const char *pipeline, double eb, const char *mode, const void *in,
                 size_t in_len, void *out, size_t out_cap, size_t *out_len, double *eb_abs) {
  fz_job j;
  int err = fill_job(&j, dtype, ndims, shape, pipeline, eb, mode);
  if (err < 0 || c == NULL || in == NULL || out == NULL || out_len == NULL)
    return err < 0 ? err : FZ_EINVAL;
  j.in = in;
  j.in_len = in_len;
  j.out = out;
  j.out_cap = out_cap;
  fz_result r;
  err = fz_client_compress(c, &j, &r);
  if (err < 0)
    return err;
  *out_len = r.data_len;
  if (eb_abs != NULL)
    *eb_abs = r.eb_abs;
  return 0;
}

int fzf_decompress(fz_client *c, const void *arc, size_t arc_len, void *out, size_t out_cap,
                   size_t *out_len) {
  if (c == NULL || arc == NULL || out == NULL || out_len == NULL)
    return FZ_EINVAL;
  fz_job j;
  fz_job_init(&j);
  j.in = arc;
  j.in_len = arc_len;
  j.out = out;
  j.out_cap = out_cap;
  fz_result r;
  int err = fz_client_decompress(c, &j, &r);
  if (err < 0)
    return err;
  *out_len = r.data_len;
  return 0;
}

int fzf_compress_bound(const char *dtype, int ndims, const int64_t *shape, const char *pipeline,
                       double eb, const char *mode, size_t *bound) {
  fz_job j;
  int err = fill_job(&j, dtype, ndims, shape, pipeline, eb, mode);
  if (err < 0 || bound == NULL)
    return err < 0 ? err : FZ_EINVAL;
  uint64_t b = 0;
  err = fz_client_compress_bound(&j, &b, NULL, 0);
  if (err < 0)
    return err;
  *bound = (size_t)b;
  return 0;
}

/* Copies a C string (NULL: "") into a Fortran buffer of len bytes, padded
 * with blanks as Fortran character variables are. */
void fzf_copy_string(const char *s, char *buf, size_t len) {
  size_t n = s != NULL ? strlen(s) : 0;
  if (n > len)
    n = len;
  memcpy(buf, s != NULL ? s : "", n);
  memset(buf + n, ' ', len - n);
}
