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
 * fields the module exposes.  The connection calls (connect, close) take no
 * structs and are bound directly by the module.
 *
 * Data written with fzd must stay readable with no daemon, so a job runs
 * in process, with the engine this library carries, when there is no
 * connection (the handle is NULL: connecting failed) or when the daemon of
 * a connection went away; both directions make the same archives as the
 * daemon.  A program that must not compress on its own cores requires the
 * daemon (fzf_require_daemon), and then those cases are errors instead.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fz.h"
#include "fzclient.h"

/* Process-wide: set once by the program, read by every thread's calls. */
static atomic_int daemon_required;
/* Per thread, as libfzclient's handles are used by one thread at a time:
 * whether the thread's last job ran in process, and why it failed there. */
static _Thread_local int last_in_process;
static _Thread_local char in_process_msg[256];

void fzf_require_daemon(int required) { atomic_store(&daemon_required, required != 0); }

int fzf_in_process(void) { return last_in_process; }

/* The explanation of the thread's last failure: the engine's when the job
 * ran in process, else the connection's. */
const char *fzf_errmsg(const fz_client *c) {
  return last_in_process || c == NULL ? in_process_msg : fz_client_errmsg(c);
}

static int say(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int say(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(in_process_msg, sizeof in_process_msg, fmt, ap);
  va_end(ap);
  return code;
}

/* Failures that mean the daemon is gone (or never answered), after which
 * the job is run in process unless the daemon is required.  A refused job
 * (a bad bound, a buffer too small) is the job's own error and stands. */
static int daemon_gone(int rc) {
  return rc == FZ_ECONNREFUSED || rc == FZ_ECONNRESET || rc == FZ_EPIPE ||
         rc == FZ_ESHUTDOWN;
}

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

/* The job's parameters for the engine, as the daemon reads them. */
static int engine_params(const fz_job *j, fz_params *p) {
  fz_params_init(p);
  if (fz_dtype_parse(j->dtype, &p->dtype) < 0)
    return say(FZ_EDTYPE, "unknown dtype '%s'", j->dtype);
  fz_eb_mode m = FZ_EB_REL;
  if (j->mode != NULL && fz_eb_mode_parse(j->mode, &m) < 0)
    return say(FZ_EINVAL, "unknown bound mode '%s' (abs, rel or pwrel)", j->mode);
  p->ndims = j->ndims;
  for (unsigned i = 0; i < j->ndims; i++)
    p->dims[i] = j->shape[i];
  p->pipeline = j->pipeline;
  p->eb = j->eb;
  p->eb_mode = m;
  return 0;
}

static int compress_in_process(const fz_job *j, const void *in, size_t in_len, void *out,
                               size_t out_cap, size_t *out_len, double *eb_abs) {
  last_in_process = 1;
  in_process_msg[0] = '\0';
  fz_params p;
  int rc = engine_params(j, &p);
  if (rc < 0)
    return rc;
  fz_plan *plan = NULL;
  rc = fz_plan_create(&p, &plan, in_process_msg, sizeof in_process_msg);
  if (rc < 0)
    return rc;
  if (in_len != fz_plan_input_bytes(plan)) {
    rc = say(FZ_ESIZE, "the array has %zu bytes; dtype %s and the shape make %zu", in_len,
             j->dtype, fz_plan_input_bytes(plan));
    goto err_plan;
  }
  rc = fz_plan_compress(plan, in, in_len, out, out_cap, out_len);
  if (rc == FZ_ENOSPC) {
    rc = say(FZ_ENOSPC, "the archive buffer holds %zu bytes; fz_compress_bound_f gives %zu",
             out_cap, fz_plan_compress_bound(plan));
    goto err_plan;
  }
  if (rc < 0) {
    const char *e = fz_plan_error(plan);
    say(rc, "%s", *e ? e : fz_strerror(rc));
    goto err_plan;
  }
  fz_archive_info info;
  rc = fz_archive_inspect(out, *out_len, &info);
  if (rc < 0)
    goto err_plan;
  if (eb_abs != NULL)
    *eb_abs = info.eb_abs;
err_plan:
  fz_plan_destroy(plan);
  return rc;
}

int fzf_compress(fz_client *c, const char *dtype, int ndims, const int64_t *shape,
                 const char *pipeline, double eb, const char *mode, const void *in,
                 size_t in_len, void *out, size_t out_cap, size_t *out_len, double *eb_abs) {
  last_in_process = 0;
  fz_job j;
  int err = fill_job(&j, dtype, ndims, shape, pipeline, eb, mode);
  if (err < 0 || in == NULL || out == NULL || out_len == NULL)
    return err < 0 ? err : FZ_EINVAL;
  int required = atomic_load(&daemon_required);
  if (c == NULL) {
    if (required)
      return say(FZ_ECONNREFUSED, "no connection to fzd, and the daemon is required");
    return compress_in_process(&j, in, in_len, out, out_cap, out_len, eb_abs);
  }
  j.in = in;
  j.in_len = in_len;
  j.out = out;
  j.out_cap = out_cap;
  fz_result r;
  err = fz_client_compress(c, &j, &r);
  if (daemon_gone(err) && !required)
    return compress_in_process(&j, in, in_len, out, out_cap, out_len, eb_abs);
  if (err < 0)
    return err;
  *out_len = r.data_len;
  if (eb_abs != NULL)
    *eb_abs = r.eb_abs;
  return 0;
}

/* An archive holds exactly the array it was made from: one of another size
 * is FZ_ESIZE whichever way it differs, through the daemon or not. */
static int check_size(const void *arc, size_t arc_len, size_t out_cap) {
  fz_client_archive a;
  int rc = fz_client_archive_info(arc, arc_len, &a);
  if (rc < 0)
    return say(rc, "not a whole fzd archive of %zu bytes: %s", arc_len, fz_strerror(rc));
  if (a.raw_bytes != out_cap)
    return say(FZ_ESIZE, "the archive holds %zu bytes of %s; the array has %zu bytes",
               (size_t)a.raw_bytes, a.dtype, out_cap);
  return 0;
}

int fzf_decompress(fz_client *c, const void *arc, size_t arc_len, void *out, size_t out_cap,
                   size_t *out_len) {
  last_in_process = 0;
  if (arc == NULL || out == NULL || out_len == NULL)
    return FZ_EINVAL;
  int required = atomic_load(&daemon_required);
  /* Checked here so that the size error and its message are the same
   * through the daemon and in process. */
  int err = check_size(arc, arc_len, out_cap);
  if (err < 0) {
    last_in_process = 1;
    return err;
  }
  if (c == NULL && required)
    return say(FZ_ECONNREFUSED, "no connection to fzd, and the daemon is required");
  if (c != NULL) {
    fz_job j;
    fz_job_init(&j);
    j.in = arc;
    j.in_len = arc_len;
    j.out = out;
    j.out_cap = out_cap;
    fz_result r;
    err = fz_client_decompress(c, &j, &r);
    if (!daemon_gone(err) || required) {
      if (err < 0)
        return err;
      *out_len = r.data_len;
      return 0;
    }
  }
  last_in_process = 1;
  in_process_msg[0] = '\0';
  err = fz_decompress(arc, arc_len, out, out_cap, out_len, 1);
  if (err < 0)
    return say(err, "decompressing in process: %s", fz_strerror(err));
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
