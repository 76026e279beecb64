/*
 * devitocomp.c - libdevitocomp.so, the DevitoComp provider of fzd.
 *
 * DevitoPRO hands every snapshot of a TimeFunction to a provider plan made
 * once for the snapshot's shape.  This provider compresses with fzd's
 * engine, in one of two places chosen when the plan is made: in the fzd
 * daemon of the node when one answers (host execution through two shared
 * memfd buffers of the plan's connection, so the data never travels
 * through the socket; CUDA execution with the caller's device pointers and
 * stream, which the daemon reads and writes in place), or in this process
 * with the embedded engine.  Host decompression always runs here (see
 * decompress_host()).  The daemon keeps its plan per shape across
 * jobs, and the embedded path keeps one fz_plan per provider plan, so a run
 * of snapshots pays plan creation once either way.
 *
 * The snapshot's sidecar is a small host record (magic, version, dtype,
 * archive length, the absolute bound enforced) that lets decompression
 * refuse a payload paired with another snapshot's sidecar.  The archive
 * itself is fzd's self-describing format (docs/format.md), the same from
 * both paths, so a snapshot compressed by the daemon decodes without one.
 */
#include "devitocomp.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fz.h"
#include "fzclient.h"

#define SIDECAR_MAGIC 0x43445a46u /* "FZDC" little-endian */
#define SIDECAR_VERSION 1u
#define PAYLOAD_ALIGNMENT 8u
#define DEFAULT_ERROR 1e-3

/* The per-snapshot host record; 24 bytes, 8-byte aligned. */
typedef struct sidecar {
  uint32_t magic;
  uint16_t version;
  uint16_t dtype;
  uint64_t compressed_bytes;
  double eb_abs;
} sidecar;

struct devitocomp_plan {
  devitocomp_tensor_t tensor;
  devitocomp_execution_kind_t kind;
  fz_dtype dtype;
  size_t elem;
  size_t raw_bytes;
  bool contiguous;
  /* The job's bound: error with mode, run by pipeline. */
  double error;
  fz_eb_mode mode;
  char pipeline[256];
  /* The embedded plan, made once: it validates the options, answers the
   * maximum compressed size, and compresses when there is no daemon. */
  fz_plan *engine;
  size_t bound;
  unsigned threads;
  /* The daemon's connection (NULL: embedded) and, for host execution, its
   * shared buffers: raw holds one contiguous snapshot (the input), arc one
   * archive (the output). */
  fz_client *client;
  void *raw;
  void *arc;
  /* Embedded host execution of a strided tensor: the gathered snapshot. */
  void *staging;
};

static _Thread_local char last_error[320];

static devitocomp_status_t fail(devitocomp_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static devitocomp_status_t fail(devitocomp_status_t st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return st;
}

/* The status an fz error code stands for. */
static devitocomp_status_t status_of(int err) {
  switch (err) {
  case FZ_EINVAL: case FZ_ESHAPE: case FZ_EDTYPE: case FZ_EPIPELINE: case FZ_EBOUND:
  case FZ_ESIZE:
    return DEVITOCOMP_INVALID_ARGUMENT;
  case FZ_ENOMEM: case FZ_EGPUOOM:
    return DEVITOCOMP_OUT_OF_MEMORY;
  case FZ_ENOSPC:
    return DEVITOCOMP_BUFFER_TOO_SMALL;
  case FZ_EFORMAT: case FZ_EVERSION: case FZ_ETRUNC: case FZ_ECORRUPT:
    return DEVITOCOMP_CORRUPT;
  case FZ_ENOGPU: case FZ_ETRANSPORT:
    return DEVITOCOMP_UNSUPPORTED;
  default:
    return DEVITOCOMP_BACKEND_ERROR;
  }
}

/* Errors after which the connection is gone: the plan goes on embedded. */
static bool connection_lost(int err) {
  return err == FZ_ECONNRESET || err == FZ_EPIPE || err == FZ_ESHUTDOWN ||
         err == FZ_EPROTO || err == FZ_ETIMEDOUT || err == FZ_EIO;
}

uint32_t devitocomp_abi_version(void) { return DEVITOCOMP_ABI_VERSION; }

const char *devitocomp_provider_name(void) { return "fzd " FZ_VERSION_STRING; }

const char *devitocomp_last_error(void) { return last_error; }

const char *devitocomp_status_string(devitocomp_status_t status) {
  switch (status) {
  case DEVITOCOMP_SUCCESS: return "success";
  case DEVITOCOMP_INVALID_ARGUMENT: return "invalid argument";
  case DEVITOCOMP_UNSUPPORTED: return "unsupported";
  case DEVITOCOMP_OUT_OF_MEMORY: return "out of memory";
  case DEVITOCOMP_BUFFER_TOO_SMALL: return "buffer too small";
  case DEVITOCOMP_CORRUPT: return "corrupt payload or sidecar";
  case DEVITOCOMP_BACKEND_ERROR: return "compressor error";
  }
  return "unknown status";
}

/* ---- options ----------------------------------------------------------------
 * "ERROR" (DevitoPRO's decimal string) or comma-separated key=value items:
 * error=, mode=pwrel|rel|abs, pipeline=, daemon=auto|off|ADDRESS. */

typedef struct options {
  double error;
  fz_eb_mode mode;
  char pipeline[256];
  char daemon[256]; /* "" auto, "off", or an address that must answer */
} options;

static devitocomp_status_t parse_error(const char *text, size_t len, double *out) {
  char buf[64];
  if (len == 0 || len >= sizeof buf)
    return fail(DEVITOCOMP_INVALID_ARGUMENT, "error '%.*s' is not a number", (int)len, text);
  memcpy(buf, text, len);
  buf[len] = '\0';
  char *end;
  errno = 0;
  double v = strtod(buf, &end);
  if (*end != '\0' || errno != 0 || !isfinite(v) || v < 0)
    return fail(DEVITOCOMP_INVALID_ARGUMENT,
                "error '%s' is not a finite non-negative number", buf);
  *out = v;
  return DEVITOCOMP_SUCCESS;
}

static devitocomp_status_t copy_value(char *dst, size_t cap, const char *key,
                                      const char *v, size_t len) {
  if (len == 0 || len >= cap)
    return fail(DEVITOCOMP_INVALID_ARGUMENT, "option %s: value '%.*s' is empty or too long",
                key, (int)len, v);
  memcpy(dst, v, len);
  dst[len] = '\0';
  return DEVITOCOMP_SUCCESS;
}

static devitocomp_status_t parse_options(const char *text, options *o) {
  o->error = DEFAULT_ERROR;
  o->mode = FZ_EB_PWREL;
  o->pipeline[0] = '\0';
  o->daemon[0] = '\0';
  if (text == NULL)
    return DEVITOCOMP_SUCCESS;
  const char *p = text;
  while (*p != '\0') {
    while (*p == ' ')
      p++;
    size_t len = strcspn(p, ",");
    size_t tl = len;
    while (tl > 0 && p[tl - 1] == ' ')
      tl--;
    const char *eq = memchr(p, '=', tl);
    devitocomp_status_t st = DEVITOCOMP_SUCCESS;
    if (eq == NULL) {
      st = parse_error(p, tl, &o->error);
    } else {
      size_t kl = (size_t)(eq - p), vl = tl - kl - 1;
      const char *v = eq + 1;
      char mode[16];
      if (kl == 5 && memcmp(p, "error", 5) == 0) {
        st = parse_error(v, vl, &o->error);
      } else if (kl == 4 && memcmp(p, "mode", 4) == 0) {
        st = copy_value(mode, sizeof mode, "mode", v, vl);
        if (st == DEVITOCOMP_SUCCESS && fz_eb_mode_parse(mode, &o->mode) < 0)
          st = fail(DEVITOCOMP_INVALID_ARGUMENT, "option mode: '%s' is not abs, rel or pwrel",
                    mode);
      } else if (kl == 8 && memcmp(p, "pipeline", 8) == 0) {
        st = copy_value(o->pipeline, sizeof o->pipeline, "pipeline", v, vl);
      } else if (kl == 6 && memcmp(p, "daemon", 6) == 0) {
        st = copy_value(o->daemon, sizeof o->daemon, "daemon", v, vl);
        if (st == DEVITOCOMP_SUCCESS && strcmp(o->daemon, "auto") == 0)
          o->daemon[0] = '\0';
      } else {
        st = fail(DEVITOCOMP_INVALID_ARGUMENT,
                  "unknown option '%.*s' (error, mode, pipeline, daemon)", (int)kl, p);
      }
    }
    if (st != DEVITOCOMP_SUCCESS)
      return st;
    p += len;
    if (*p == ',')
      p++;
  }
  return DEVITOCOMP_SUCCESS;
}

/* ---- layout ---------------------------------------------------------------- */

/* Strides under which two elements share an address would make the gather
 * read one value twice and the scatter of a decompression write two values
 * to one place, the last silently winning.  A layout is accepted when, its
 * dimensions taken from the smallest stride up, each stride reaches past
 * every element the smaller ones span (any padded or transposed array
 * does); dimensions of extent 1 take no room.  Shapes and strides are
 * positive here. */
static devitocomp_status_t check_overlap(const devitocomp_tensor_t *t) {
  int order[DEVITOCOMP_MAX_RANK], n = 0;
  for (int i = 0; i < t->rank; i++) {
    if (t->shape[i] == 1)
      continue;
    int k = n++;
    for (; k > 0 && t->strides[order[k - 1]] > t->strides[i]; k--)
      order[k] = order[k - 1];
    order[k] = i;
  }
  /* span: one past the largest offset reached by the dimensions so far. */
  int64_t span = 1;
  for (int k = 0; k < n; k++) {
    int d = order[k];
    if (t->strides[d] < span)
      return fail(DEVITOCOMP_INVALID_ARGUMENT,
                  "strides overlap: dimension %d (shape %lld, stride %lld) steps inside the "
                  "%lld elements its faster dimensions span, so two elements would share an "
                  "address",
                  d, (long long)t->shape[d], (long long)t->strides[d], (long long)span);
    if (t->strides[d] > (INT64_MAX - span) / (t->shape[d] - 1))
      return fail(DEVITOCOMP_INVALID_ARGUMENT, "the tensor's strides overflow");
    span += (t->shape[d] - 1) * t->strides[d];
  }
  return DEVITOCOMP_SUCCESS;
}

static devitocomp_status_t check_tensor(const devitocomp_tensor_t *t, devitocomp_plan_t *pl) {
  if (t->dtype == DEVITOCOMP_FLOAT32)
    pl->dtype = FZ_F32;
  else if (t->dtype == DEVITOCOMP_FLOAT64)
    pl->dtype = FZ_F64;
  else
    return fail(DEVITOCOMP_UNSUPPORTED, "dtype %d: float32 and float64 only", (int)t->dtype);
  if (t->rank < 1 || t->rank > DEVITOCOMP_MAX_RANK)
    return fail(DEVITOCOMP_INVALID_ARGUMENT, "rank %d: 1 to %d", t->rank, DEVITOCOMP_MAX_RANK);
  pl->elem = fz_dtype_size(pl->dtype);
  size_t count = 1;
  int64_t expect = 1;
  pl->contiguous = true;
  for (int i = t->rank - 1; i >= 0; i--) {
    if (t->shape[i] <= 0 || t->strides[i] <= 0)
      return fail(DEVITOCOMP_INVALID_ARGUMENT,
                  "dimension %d: shape %lld and stride %lld must be positive", i,
                  (long long)t->shape[i], (long long)t->strides[i]);
    if ((uint64_t)t->shape[i] > SIZE_MAX / pl->elem / count)
      return fail(DEVITOCOMP_INVALID_ARGUMENT, "the tensor's size overflows");
    count *= (size_t)t->shape[i];
    if (t->shape[i] > 1 && t->strides[i] != expect)
      pl->contiguous = false;
    expect *= t->shape[i];
  }
  pl->raw_bytes = count * pl->elem;
  return check_overlap(t);
}

/* Copies between the strided tensor at `strided` and the contiguous buffer
 * at `packed`, element by element along the fastest dimension. */
static void copy_layout(const devitocomp_plan_t *pl, void *packed, void *strided, bool gather) {
  const devitocomp_tensor_t *t = &pl->tensor;
  int r = t->rank;
  int64_t idx[DEVITOCOMP_MAX_RANK] = {0};
  size_t rows = pl->raw_bytes / pl->elem / (size_t)t->shape[r - 1];
  char *pk = packed;
  for (size_t row = 0; row < rows; row++) {
    int64_t off = 0;
    for (int i = 0; i < r - 1; i++)
      off += idx[i] * t->strides[i];
    char *s = (char *)strided + (size_t)off * pl->elem;
    size_t row_bytes = (size_t)t->shape[r - 1] * pl->elem;
    if (t->strides[r - 1] == 1) {
      /* Padded layouts (halos) keep the fastest dimension dense: whole rows. */
      if (gather)
        memcpy(pk, s, row_bytes);
      else
        memcpy(s, pk, row_bytes);
      pk += row_bytes;
    } else {
      size_t step = (size_t)t->strides[r - 1] * pl->elem;
      for (int64_t j = 0; j < t->shape[r - 1]; j++, pk += pl->elem, s += step) {
        if (gather)
          memcpy(pk, s, pl->elem);
        else
          memcpy(s, pk, pl->elem);
      }
    }
    for (int i = r - 2; i >= 0; i--) {
      if (++idx[i] < t->shape[i])
        break;
      idx[i] = 0;
    }
  }
}

/* ---- plans ----------------------------------------------------------------- */

static void drop_client(devitocomp_plan_t *pl) {
  if (pl->client == NULL)
    return;
  fz_client_close(pl->client); /* frees the shared buffers, releases exports */
  pl->client = NULL;
  pl->raw = pl->arc = NULL;
}

/* Connects to the daemon that options name (or the default one), and for
 * host execution allocates the shared buffers.  A default daemon that does
 * not answer leaves the plan embedded; a named one is required. */
static devitocomp_status_t attach_daemon(devitocomp_plan_t *pl, const options *o) {
  if (strcmp(o->daemon, "off") == 0)
    return DEVITOCOMP_SUCCESS;
  bool required = o->daemon[0] != '\0';
  fz_client_opts copts;
  fz_client_opts_init(&copts);
  copts.name = "libdevitocomp";
  /* No time limit: a large snapshot on a busy daemon may take long, and a
   * limit would abandon it half done.  A socket nobody listens on fails at
   * once. */
  copts.timeout_ms = 0;
  char why[256];
  fz_client *c = NULL;
  int err = fz_client_connect(&c, required ? o->daemon : NULL, &copts, why, sizeof why);
  if (err < 0)
    return required ? fail(status_of(err), "fzd at %s: %s", o->daemon, why) : DEVITOCOMP_SUCCESS;
  pl->client = c;
  if (pl->kind == DEVITOCOMP_EXECUTION_HOST) {
    pl->raw = fz_client_buffer_alloc(c, pl->raw_bytes);
    pl->arc = pl->raw ? fz_client_buffer_alloc(c, pl->bound) : NULL;
    if (pl->arc == NULL) {
      devitocomp_status_t st = fail(DEVITOCOMP_OUT_OF_MEMORY, "shared buffers of %zu and %zu bytes: %s",
                                    pl->raw_bytes, pl->bound, fz_client_errmsg(c));
      drop_client(pl);
      return required ? st : DEVITOCOMP_SUCCESS;
    }
  } else {
    fz_server_info info;
    fz_client_info(c, &info);
    if (strcmp(info.backend, "gpu") != 0) {
      drop_client(pl);
      return fail(DEVITOCOMP_UNSUPPORTED,
                  "CUDA execution needs fzd on the GPU backend; the daemon runs '%s'", info.backend);
    }
  }
  return DEVITOCOMP_SUCCESS;
}

devitocomp_status_t devitocomp_plan_create(const devitocomp_tensor_t *tensor,
                                           const devitocomp_execution_t *execution,
                                           const char *options_text, devitocomp_plan_t **plan) {
  last_error[0] = '\0';
  if (tensor == NULL || execution == NULL || plan == NULL)
    return fail(DEVITOCOMP_INVALID_ARGUMENT, "plan_create: NULL tensor, execution or plan");
  *plan = NULL;
  if (execution->kind == DEVITOCOMP_EXECUTION_HIP)
    return fail(DEVITOCOMP_UNSUPPORTED, "HIP execution is not supported by the fzd provider");
  if (execution->kind != DEVITOCOMP_EXECUTION_HOST && execution->kind != DEVITOCOMP_EXECUTION_CUDA)
    return fail(DEVITOCOMP_INVALID_ARGUMENT, "execution kind %d is unknown", (int)execution->kind);
  devitocomp_plan_t *pl = calloc(1, sizeof *pl);
  if (pl == NULL)
    return fail(DEVITOCOMP_OUT_OF_MEMORY, "plan_create: out of memory");
  pl->tensor = *tensor;
  pl->kind = execution->kind;
  options o;
  devitocomp_status_t st = check_tensor(tensor, pl);
  if (st == DEVITOCOMP_SUCCESS)
    st = parse_options(options_text, &o);
  if (st != DEVITOCOMP_SUCCESS)
    goto err_plan;
  if (pl->kind == DEVITOCOMP_EXECUTION_CUDA && !pl->contiguous) {
    st = fail(DEVITOCOMP_UNSUPPORTED,
              "CUDA execution takes C-contiguous snapshots only (the device data is "
              "compressed in place); pass contiguous strides");
    goto err_plan;
  }
  /* Error 0 is DevitoPRO's exact mode: the lossless preset. */
  pl->error = o.error;
  pl->mode = o.mode;
  snprintf(pl->pipeline, sizeof pl->pipeline, "%s",
           o.pipeline[0] ? o.pipeline : o.error == 0 ? "lossless" : "balanced");
  pl->threads = execution->kind == DEVITOCOMP_EXECUTION_HOST && execution->threads > 0
                    ? (unsigned)execution->threads : 1;
  fz_params p;
  fz_params_init(&p);
  p.dtype = pl->dtype;
  p.ndims = (unsigned)tensor->rank;
  for (int i = 0; i < tensor->rank; i++)
    p.dims[i] = (uint64_t)tensor->shape[i];
  p.pipeline = pl->pipeline;
  p.eb = pl->error;
  p.eb_mode = pl->mode;
  p.threads = pl->threads;
  char why[256];
  int err = fz_plan_create(&p, &pl->engine, why, sizeof why);
  if (err < 0) {
    st = fail(status_of(err), "error %g, mode %s, pipeline '%s': %s", pl->error,
              fz_eb_mode_name(pl->mode), pl->pipeline, why);
    goto err_plan;
  }
  pl->bound = fz_plan_compress_bound(pl->engine);
  st = attach_daemon(pl, &o);
  if (st != DEVITOCOMP_SUCCESS)
    goto err_engine;
  if (pl->kind == DEVITOCOMP_EXECUTION_CUDA && pl->client == NULL) {
    st = fail(DEVITOCOMP_UNSUPPORTED,
              "CUDA execution needs a reachable fzd on the GPU backend (%s did not answer)",
              fz_client_default_address());
    goto err_engine;
  }
  *plan = pl;
  return DEVITOCOMP_SUCCESS;

err_engine:
  fz_plan_destroy(pl->engine);
err_plan:
  free(pl);
  return st;
}

devitocomp_status_t devitocomp_plan_destroy(devitocomp_plan_t *plan) {
  if (plan == NULL)
    return DEVITOCOMP_SUCCESS;
  drop_client(plan);
  fz_plan_destroy(plan->engine);
  free(plan->staging);
  free(plan);
  return DEVITOCOMP_SUCCESS;
}

devitocomp_status_t devitocomp_plan_limits(const devitocomp_plan_t *plan,
                                           devitocomp_limits_t *limits) {
  if (plan == NULL || limits == NULL)
    return fail(DEVITOCOMP_INVALID_ARGUMENT, "plan_limits: NULL plan or limits");
  limits->max_compressed_bytes = plan->bound;
  limits->payload_alignment = PAYLOAD_ALIGNMENT;
  limits->sidecar_bytes = sizeof(sidecar);
  limits->sidecar_alignment = _Alignof(sidecar);
  return DEVITOCOMP_SUCCESS;
}

/* ---- one snapshot ------------------------------------------------------------ */

static devitocomp_status_t check_call(devitocomp_plan_t *pl, const devitocomp_execution_t *ex,
                                      const void *a, const void *b, const void *c) {
  if (pl == NULL || ex == NULL || a == NULL || b == NULL || c == NULL)
    return fail(DEVITOCOMP_INVALID_ARGUMENT, "NULL plan, execution or buffer");
  if (ex->kind == DEVITOCOMP_EXECUTION_HIP)
    return fail(DEVITOCOMP_UNSUPPORTED, "HIP execution is not supported by the fzd provider");
  if (ex->kind != pl->kind)
    return fail(DEVITOCOMP_INVALID_ARGUMENT,
                "execution kind %d differs from the plan's (%d)", (int)ex->kind, (int)pl->kind);
  return DEVITOCOMP_SUCCESS;
}

static void fill_job(const devitocomp_plan_t *pl, fz_job *job) {
  fz_job_init(job);
  job->dtype = fz_dtype_name(pl->dtype);
  job->ndims = (unsigned)pl->tensor.rank;
  for (int i = 0; i < pl->tensor.rank; i++)
    job->shape[i] = (uint64_t)pl->tensor.shape[i];
  job->pipeline = pl->pipeline;
  job->eb = pl->error;
  job->mode = fz_eb_mode_name(pl->mode);
}

/* A daemon job failed with err: a lost connection sends the plan to the
 * embedded engine (*retry), anything else is the snapshot's error. */
static devitocomp_status_t daemon_failed(devitocomp_plan_t *pl, int err, const fz_result *res,
                                         bool *retry) {
  if (pl->kind == DEVITOCOMP_EXECUTION_HOST && connection_lost(err)) {
    drop_client(pl);
    *retry = true;
    return DEVITOCOMP_SUCCESS;
  }
  return fail(status_of(err), "fzd: %s (%s)", res->message[0] ? res->message : fz_strerror(err),
              fz_err_name(err));
}

static devitocomp_status_t compress_host(devitocomp_plan_t *pl, const void *data, void *payload,
                                         size_t cap, size_t *out_len, double *eb_abs) {
  bool retry = false;
  if (pl->client != NULL) {
    if (pl->contiguous)
      memcpy(pl->raw, data, pl->raw_bytes);
    else
      copy_layout(pl, pl->raw, (void *)data, true);
    fz_job job;
    fill_job(pl, &job);
    job.in = pl->raw;
    job.in_len = pl->raw_bytes;
    job.out = pl->arc;
    job.out_cap = pl->bound;
    fz_result res;
    int err = fz_client_compress(pl->client, &job, &res);
    if (err == 0) {
      if (res.data_len > cap)
        return fail(DEVITOCOMP_BUFFER_TOO_SMALL, "the payload needs %zu bytes, capacity %zu",
                    res.data_len, cap);
      memcpy(payload, pl->arc, res.data_len);
      *out_len = res.data_len;
      *eb_abs = res.eb_abs;
      return DEVITOCOMP_SUCCESS;
    }
    devitocomp_status_t st = daemon_failed(pl, err, &res, &retry);
    if (!retry)
      return st;
  }
  const void *in = data;
  if (!pl->contiguous) {
    if (pl->staging == NULL && (pl->staging = malloc(pl->raw_bytes)) == NULL)
      return fail(DEVITOCOMP_OUT_OF_MEMORY, "staging buffer of %zu bytes", pl->raw_bytes);
    copy_layout(pl, pl->staging, (void *)data, true);
    in = pl->staging;
  }
  int err = fz_plan_compress(pl->engine, in, pl->raw_bytes, payload, cap, out_len);
  if (err < 0)
    return fail(status_of(err), "compress: %s%s%s", fz_strerror(err),
                fz_plan_error(pl->engine)[0] ? ": " : "", fz_plan_error(pl->engine));
  fz_archive_info info;
  err = fz_archive_inspect(payload, *out_len, &info);
  if (err < 0)
    return fail(DEVITOCOMP_BACKEND_ERROR, "the archive just made does not inspect: %s",
                fz_strerror(err));
  *eb_abs = info.eb_abs;
  return DEVITOCOMP_SUCCESS;
}

devitocomp_status_t devitocomp_compress(devitocomp_plan_t *plan,
                                        const devitocomp_execution_t *execution,
                                        const void *data, void *payload, size_t payload_capacity,
                                        size_t *compressed_bytes, void *sidecar_out) {
  last_error[0] = '\0';
  devitocomp_status_t st = check_call(plan, execution, data, payload, sidecar_out);
  if (st == DEVITOCOMP_SUCCESS && compressed_bytes == NULL)
    st = fail(DEVITOCOMP_INVALID_ARGUMENT, "compress: NULL compressed_bytes");
  if (st != DEVITOCOMP_SUCCESS)
    return st;
  size_t len = 0;
  double eb_abs = 0;
  if (plan->kind == DEVITOCOMP_EXECUTION_CUDA) {
    fz_job job;
    fill_job(plan, &job);
    fz_result res;
    int err = fz_client_compress_device(plan->client, &job, data, plan->raw_bytes, payload,
                                        payload_capacity, execution->stream, &res);
    if (err < 0) {
      bool retry = false;
      return daemon_failed(plan, err, &res, &retry);
    }
    len = (size_t)res.bytes_out;
    eb_abs = res.eb_abs;
  } else {
    st = compress_host(plan, data, payload, payload_capacity, &len, &eb_abs);
    if (st != DEVITOCOMP_SUCCESS)
      return st;
  }
  sidecar sc = {SIDECAR_MAGIC, SIDECAR_VERSION, (uint16_t)plan->tensor.dtype, len, eb_abs};
  memcpy(sidecar_out, &sc, sizeof sc);
  *compressed_bytes = len;
  return DEVITOCOMP_SUCCESS;
}

/* The archive's header must describe the plan's snapshot. */
static devitocomp_status_t check_archive(const devitocomp_plan_t *pl, fz_dtype dtype,
                                         unsigned ndims, const uint64_t *dims) {
  bool same = dtype == pl->dtype && ndims == (unsigned)pl->tensor.rank;
  for (unsigned i = 0; same && i < ndims; i++)
    same = dims[i] == (uint64_t)pl->tensor.shape[i];
  return same ? DEVITOCOMP_SUCCESS
              : fail(DEVITOCOMP_CORRUPT, "the payload holds another dtype or shape than the plan's");
}

/* Host decompression runs in this process even when a daemon answers:
 * archives are self-describing and need no plan, and decoding in place
 * saves the two copies through the shared buffers and the round trip
 * (measured in docs/benchmarks.md: 16 ms embedded against 28 ms through
 * fzd for a 16 MiB snapshot). */
static devitocomp_status_t decompress_host(devitocomp_plan_t *pl, const void *payload, size_t len,
                                           void *data) {
  fz_archive_info info;
  int err = fz_archive_inspect(payload, len, &info);
  if (err < 0)
    return fail(status_of(err), "payload: %s", fz_strerror(err));
  devitocomp_status_t st = check_archive(pl, info.dtype, info.ndims, info.dims);
  if (st != DEVITOCOMP_SUCCESS)
    return st;
  void *out = data;
  if (!pl->contiguous) {
    if (pl->staging == NULL && (pl->staging = malloc(pl->raw_bytes)) == NULL)
      return fail(DEVITOCOMP_OUT_OF_MEMORY, "staging buffer of %zu bytes", pl->raw_bytes);
    out = pl->staging;
  }
  size_t got = 0;
  err = fz_decompress(payload, len, out, pl->raw_bytes, &got, pl->threads);
  if (err < 0)
    return fail(status_of(err), "decompress: %s", fz_strerror(err));
  if (!pl->contiguous)
    copy_layout(pl, pl->staging, data, false);
  return DEVITOCOMP_SUCCESS;
}

devitocomp_status_t devitocomp_decompress(devitocomp_plan_t *plan,
                                          const devitocomp_execution_t *execution,
                                          const void *payload, size_t compressed_bytes,
                                          const void *sidecar_in, void *data) {
  last_error[0] = '\0';
  devitocomp_status_t st = check_call(plan, execution, payload, sidecar_in, data);
  if (st != DEVITOCOMP_SUCCESS)
    return st;
  sidecar sc;
  memcpy(&sc, sidecar_in, sizeof sc);
  if (sc.magic != SIDECAR_MAGIC || sc.version != SIDECAR_VERSION)
    return fail(DEVITOCOMP_CORRUPT, "the sidecar is not an fzd DevitoComp record (version %u)",
                (unsigned)sc.version);
  if (sc.compressed_bytes != compressed_bytes || sc.dtype != (uint16_t)plan->tensor.dtype)
    return fail(DEVITOCOMP_CORRUPT,
                "the sidecar belongs to another snapshot (%llu bytes, the payload has %zu)",
                (unsigned long long)sc.compressed_bytes, compressed_bytes);
  if (compressed_bytes > plan->bound)
    return fail(DEVITOCOMP_CORRUPT, "payload of %zu bytes, above the plan's maximum %zu",
                compressed_bytes, plan->bound);
  if (plan->kind == DEVITOCOMP_EXECUTION_CUDA) {
    fz_result res;
    int err = fz_client_decompress_device(plan->client, payload, compressed_bytes, data,
                                          plan->raw_bytes, execution->stream, &res);
    if (err < 0) {
      bool retry = false;
      return daemon_failed(plan, err, &res, &retry);
    }
    fz_dtype dt;
    if (fz_dtype_parse(res.dtype, &dt) < 0)
      return fail(DEVITOCOMP_CORRUPT, "fzd: dtype %s", res.dtype);
    return check_archive(plan, dt, res.ndims, res.shape);
  }
  return decompress_host(plan, payload, compressed_bytes, data);
}
