/*
 * codec.c - one chunk to one fzd archive and back, for the HDF5 filter.
 *
 * Compression goes to an fzd when one answers at FZD_SOCKET (or the default
 * address): the process connects once, at its first chunk, and keeps the
 * connection; the chunk travels through a shared buffer (a memfd the daemon
 * maps), never through the socket.  When no daemon answers, or one fails,
 * the embedded engine compresses the chunk in process, so writing never
 * depends on a daemon.  A failed connection is not retried for a while, so
 * that a file of many chunks does not pay a connect attempt per chunk.
 * Decompression is always in process: the archive says everything, and a
 * file written on a GPU node reads anywhere.
 *
 * HDF5 calls filters from one thread at a time in the usual (not
 * thread-safe) build; a lock keeps the shared state consistent in a
 * thread-safe one.  After a fork the child leaves the parent's connection
 * alone (closing it could disturb the parent's jobs) and makes its own.
 *
 * Built with H5Z_FZD_ENGINE_ONLY (where msgpack-c, which libfzclient needs,
 * is missing) the daemon path is left out: every chunk is compressed in
 * process, and FZD_HDF5_DAEMON=require fails with that reason.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* clock_gettime under a plain -std=c11 */
#endif
#include "codec.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#ifndef H5Z_FZD_ENGINE_ONLY
#include "fzclient.h"
#endif

/* A connect attempt that failed is retried after this long. */
#define RETRY_MS 5000
/* The limit for connecting: a daemon that does not answer this fast is
 * treated as absent. */
#define CONNECT_TIMEOUT_MS 1000
/* The limit for one chunk's answer; past it the connection is dropped and
 * the chunk compressed in process. */
#define JOB_TIMEOUT_MS 600000

typedef enum daemon_use { USE_AUTO, USE_OFF, USE_REQUIRE } daemon_use;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
#ifndef H5Z_FZD_ENGINE_ONLY
  fz_client *client;
  pid_t pid;            /* the process that made client */
  int64_t retry_at_ms;  /* no connect attempt before then */
  void *in;             /* shared buffers of client */
  size_t in_cap;
  void *out;
  size_t out_cap;
#endif
  void *scratch;        /* archives made in process, before they are placed */
  size_t scratch_cap;
  fz_plan *plan;        /* the plan of the last spec */
  h5zf_spec plan_spec;
} st;

static void say(char *why, size_t why_len, const char *fmt, ...) {
  if (!why || why_len == 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, why_len, fmt, ap);
  va_end(ap);
}

#ifndef H5Z_FZD_ENGINE_ONLY
static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif

static daemon_use daemon_setting(void) {
  const char *v = getenv("FZD_HDF5_DAEMON");
  if (!v || !*v || strcasecmp(v, "auto") == 0)
    return USE_AUTO;
  if (strcasecmp(v, "off") == 0 || strcmp(v, "0") == 0)
    return USE_OFF;
  /* "require", or anything else: a mistyped setting must not quietly
   * give in-process compression where a daemon was meant. */
  return USE_REQUIRE;
}

static int same_spec(const h5zf_spec *a, const h5zf_spec *b) {
  if (a->dtype != b->dtype || a->ndims != b->ndims || strcmp(a->pipeline, b->pipeline) != 0 ||
      a->mode != b->mode || a->has_fill != b->has_fill)
    return 0;
  for (unsigned i = 0; i < a->ndims; i++)
    if (a->dims[i] != b->dims[i])
      return 0;
  /* Compared bit for bit, as the bound's text would be. */
  return memcmp(&a->eb, &b->eb, sizeof a->eb) == 0 &&
         (!a->has_fill || memcmp(&a->fill_value, &b->fill_value, sizeof a->fill_value) == 0);
}

static void spec_params(const h5zf_spec *s, fz_params *p) {
  fz_params_init(p);
  p->dtype = s->dtype;
  p->ndims = s->ndims;
  for (unsigned i = 0; i < s->ndims; i++)
    p->dims[i] = s->dims[i];
  p->pipeline = s->pipeline;
  p->eb = s->eb;
  p->eb_mode = s->mode;
  p->threads = 1;
  p->has_fill = s->has_fill;
  p->fill_value = s->fill_value;
}

int h5zf_check(const h5zf_spec *spec, char *why, size_t why_len) {
  fz_params p;
  spec_params(spec, &p);
  fz_plan *plan = NULL;
  int rc = fz_plan_create(&p, &plan, why, why_len);
  fz_plan_destroy(plan);
  return rc;
}

/* The cached plan for spec, made anew when the spec changed.  Under lock. */
static int get_plan(const h5zf_spec *spec, char *why, size_t why_len) {
  if (st.plan && same_spec(&st.plan_spec, spec))
    return 0;
  fz_plan_destroy(st.plan);
  st.plan = NULL;
  fz_params p;
  spec_params(spec, &p);
  int rc = fz_plan_create(&p, &st.plan, why, why_len);
  if (rc < 0)
    return rc;
  st.plan_spec = *spec;
  return 0;
}

size_t h5zf_chunk_bytes(const h5zf_spec *spec) {
  size_t n = fz_dtype_size(spec->dtype);
  for (unsigned i = 0; i < spec->ndims; i++)
    if (__builtin_mul_overflow(n, (size_t)spec->dims[i], &n))
      return 0;
  return n;
}

int h5zf_is_archive(const void *p, size_t n) {
  static const unsigned char magic[4] = {0x89, 'F', 'Z', 'A'};
  return n >= sizeof magic && memcmp(p, magic, sizeof magic) == 0;
}

#ifndef H5Z_FZD_ENGINE_ONLY
static void drop_client(void) {
  if (st.client && st.pid == getpid()) {
    fz_client_close(st.client); /* frees the shared buffers too */
  }
  /* In a forked child the parent's handle is only forgotten: see above. */
  st.client = NULL;
  st.in = st.out = NULL;
  st.in_cap = st.out_cap = 0;
}

/* A connection to the daemon, or NULL (why says what failed).  Under lock. */
static fz_client *get_client(char *why, size_t why_len) {
  if (st.client && st.pid != getpid())
    drop_client();
  if (st.client)
    return st.client;
  if (now_ms() < st.retry_at_ms) {
    say(why, why_len, "no fzd answered at %s a moment ago", fz_client_default_address());
    return NULL;
  }
  fz_client_opts o;
  fz_client_opts_init(&o);
  o.name = "h5z_fzd";
  o.timeout_ms = CONNECT_TIMEOUT_MS;
  char msg[256] = "";
  int rc = fz_client_connect(&st.client, NULL, &o, msg, sizeof msg);
  if (rc < 0) {
    st.client = NULL;
    st.retry_at_ms = now_ms() + RETRY_MS;
    say(why, why_len, "no fzd at %s: %s", fz_client_default_address(), msg);
    return NULL;
  }
  st.pid = getpid();
  return st.client;
}

/* A shared buffer of at least need bytes in *buf (capacity *cap). */
static int shared_buffer(void **buf, size_t *cap, size_t need, char *why, size_t why_len) {
  if (*buf && *cap >= need)
    return 0;
  if (*buf)
    fz_client_buffer_free(st.client, *buf);
  *buf = fz_client_buffer_alloc(st.client, need);
  *cap = *buf ? need : 0;
  if (!*buf) {
    say(why, why_len, "no shared buffer of %zu bytes: %s", need, fz_client_errmsg(st.client));
    return FZ_ENOMEM;
  }
  return 0;
}

#endif /* !H5Z_FZD_ENGINE_ONLY */

/* Puts the archive of n bytes at arc where the filter hands it back: into
 * the chunk's own buffer (buf, buf_cap bytes, whose input has been used)
 * when it fits, which spares an allocation and its page faults per chunk,
 * else into a new buffer from alloc. */
static int place(const void *arc, size_t n, void *buf, size_t buf_cap, const h5zf_mem *mem,
                 void **out, size_t *out_len, char *why, size_t why_len) {
  void *dst = n <= buf_cap ? buf : mem->alloc(mem->ctx, n);
  if (!dst) {
    say(why, why_len, "out of memory for an archive of %zu bytes", n);
    return FZ_ENOMEM;
  }
  memcpy(dst, arc, n);
  *out = dst;
  *out_len = n;
  return 0;
}

#ifndef H5Z_FZD_ENGINE_ONLY
/* Codes after which the connection cannot be trusted with another job. */
static int connection_lost(int rc) {
  return rc == FZ_ECONNRESET || rc == FZ_EPIPE || rc == FZ_EPROTO || rc == FZ_ETIMEDOUT ||
         rc == FZ_EIO || rc == FZ_ESHUTDOWN;
}

/* Compresses through the daemon into out / out_len.  Under lock. */
static int via_daemon(const h5zf_spec *spec, void *buf, size_t in_len, size_t buf_cap,
                      const h5zf_mem *mem, void **out, size_t *out_len, char *why,
                      size_t why_len) {
  fz_client *c = get_client(why, why_len);
  if (!c)
    return FZ_ECONNREFUSED;
  /* Over TCP the chunk travels inline, within the server's limit. */
  fz_server_info info;
  fz_client_info(c, &info);
  if (info.transport == FZ_TRANSPORT_TCP && in_len > info.max_inline) {
    say(why, why_len, "a chunk of %zu bytes is over the %llu bytes fzd takes inline over TCP",
        in_len, (unsigned long long)info.max_inline);
    return FZ_EMSGSIZE;
  }
  size_t bound = fz_plan_compress_bound(st.plan);
  int rc = shared_buffer(&st.in, &st.in_cap, in_len, why, why_len);
  if (rc == 0)
    rc = shared_buffer(&st.out, &st.out_cap, bound, why, why_len);
  if (rc < 0)
    return rc;
  memcpy(st.in, buf, in_len);

  fz_job job;
  fz_job_init(&job);
  job.dtype = fz_dtype_name(spec->dtype);
  job.ndims = spec->ndims;
  for (unsigned i = 0; i < spec->ndims; i++)
    job.shape[i] = spec->dims[i];
  job.pipeline = spec->pipeline;
  job.eb = spec->eb;
  job.mode = fz_eb_mode_name(spec->mode);
  job.has_fill = spec->has_fill;
  job.fill_value = spec->fill_value;
  job.in = st.in;
  job.in_len = in_len;
  job.out = st.out;
  job.out_cap = st.out_cap;

  /* Submitted and waited for, so that the short connect limit of the
   * handle does not limit the job too. */
  rc = fz_client_submit(c, FZ_OP_COMPRESS, &job, NULL, NULL, NULL);
  fz_completion done;
  if (rc == 0) {
    int got = fz_client_wait(c, JOB_TIMEOUT_MS, &done);
    if (got == 1)
      rc = done.result.status;
    else
      rc = got < 0 ? got : FZ_ETIMEDOUT;
    if (got == 1 && rc < 0)
      say(why, why_len, "fzd: %s", done.result.message);
    else if (rc < 0)
      say(why, why_len, "fzd: %s", fz_client_errmsg(c));
  } else {
    say(why, why_len, "fzd: %s", fz_client_errmsg(c));
  }
  if (rc < 0) {
    if (connection_lost(rc))
      drop_client();
    return rc;
  }
  return place(done.result.data, done.result.data_len, buf, buf_cap, mem, out, out_len, why,
               why_len);
}
#endif /* !H5Z_FZD_ENGINE_ONLY */

/* Compresses with the embedded engine.  Under lock. */
static int in_process(void *buf, size_t in_len, size_t buf_cap, const h5zf_mem *mem,
                      void **out, size_t *out_len, char *why, size_t why_len) {
  size_t bound = fz_plan_compress_bound(st.plan);
  if (st.scratch_cap < bound) {
    free(st.scratch);
    st.scratch = malloc(bound);
    st.scratch_cap = st.scratch ? bound : 0;
    if (!st.scratch) {
      say(why, why_len, "out of memory for an archive of up to %zu bytes", bound);
      return FZ_ENOMEM;
    }
  }
  size_t n = 0;
  int rc = fz_plan_compress(st.plan, buf, in_len, st.scratch, bound, &n);
  if (rc < 0) {
    const char *e = fz_plan_error(st.plan);
    say(why, why_len, "%s", *e ? e : fz_strerror(rc));
    return rc;
  }
  return place(st.scratch, n, buf, buf_cap, mem, out, out_len, why, why_len);
}

int h5zf_compress(const h5zf_spec *spec, void *buf, size_t in_len, size_t buf_cap,
                  const h5zf_mem *mem, void **out, size_t *out_len, char *why,
                  size_t why_len) {
  *out = NULL;
  *out_len = 0;
  daemon_use use = daemon_setting();
  pthread_mutex_lock(&lock);
  int rc = get_plan(spec, why, why_len);
  if (rc == 0 && fz_plan_input_bytes(st.plan) != in_len) {
    say(why, why_len, "the chunk has %zu bytes, its type and shape make %zu", in_len,
        fz_plan_input_bytes(st.plan));
    rc = FZ_ESIZE;
  }
#ifdef H5Z_FZD_ENGINE_ONLY
  if (rc == 0 && use == USE_REQUIRE) {
    say(why, why_len, "FZD_HDF5_DAEMON asks for a daemon, and this plugin was built without "
                      "the daemon client (H5Z_FZD_ENGINE_ONLY)");
    rc = FZ_ENOSYS;
  } else if (rc == 0) {
    rc = 1;
  }
#else
  if (rc == 0 && use != USE_OFF) {
    rc = via_daemon(spec, buf, in_len, buf_cap, mem, out, out_len, why, why_len);
    if (rc < 0 && use == USE_AUTO)
      rc = 1; /* fall back */
  } else if (rc == 0) {
    rc = 1;
  }
#endif
  if (rc == 1)
    rc = in_process(buf, in_len, buf_cap, mem, out, out_len, why, why_len);
  pthread_mutex_unlock(&lock);
  return rc;
}

/* "2x3x4" into buf. */
static void dims_text(unsigned ndims, const uint64_t *dims, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (unsigned i = 0; i < ndims && at < len; i++) {
    int w = snprintf(buf + at, len - at, "%s%llu", i ? "x" : "", (unsigned long long)dims[i]);
    if (w < 0)
      break;
    at += (size_t)w;
  }
}

int h5zf_decompress(const h5zf_spec *chunk, const void *arc, size_t arc_len,
                    const h5zf_mem *mem, void **out, size_t *out_len, char *why,
                    size_t why_len) {
  *out = NULL;
  *out_len = 0;
  size_t expect = h5zf_chunk_bytes(chunk);
  if (expect == 0 && chunk->ndims > 0) {
    say(why, why_len, "a chunk of that type and shape does not fit in memory");
    return FZ_ESIZE;
  }
  fz_archive_info info;
  int rc = fz_archive_inspect(arc, arc_len, &info);
  if (rc < 0) {
    say(why, why_len, "the chunk is not a valid fzd archive: %s", fz_strerror(rc));
    return rc;
  }
  /* The dataset says what a chunk is; an archive of another type or shape
   * of the same byte count would read as garbage. */
  int same_dims = info.ndims == chunk->ndims;
  for (unsigned i = 0; same_dims && i < chunk->ndims; i++)
    same_dims = info.dims[i] == chunk->dims[i];
  if (info.dtype != chunk->dtype || !same_dims) {
    char have[96], want[96];
    dims_text(info.ndims, info.dims, have, sizeof have);
    dims_text(chunk->ndims, chunk->dims, want, sizeof want);
    const char *hn = fz_dtype_name(info.dtype), *wn = fz_dtype_name(chunk->dtype);
    say(why, why_len, "the archive holds %s values in a chunk of %s, the dataset's chunks "
        "are %s values in %s", hn ? hn : "?", have, wn ? wn : "?", want);
    return info.dtype != chunk->dtype ? FZ_EDTYPE : FZ_ESHAPE;
  }
  if (info.raw_bytes != expect) {
    say(why, why_len, "the archive holds %llu bytes, the chunk %zu",
        (unsigned long long)info.raw_bytes, expect);
    return FZ_ECORRUPT;
  }
  /* At least one byte, so that an empty chunk still gets a buffer. */
  void *buf = mem->alloc(mem->ctx, expect ? expect : 1);
  if (!buf) {
    say(why, why_len, "out of memory for a chunk of %zu bytes", expect);
    return FZ_ENOMEM;
  }
  size_t n = 0;
  rc = fz_decompress(arc, arc_len, buf, expect, &n, 1);
  if (rc == 0 && n != expect)
    rc = FZ_ECORRUPT;
  if (rc < 0) {
    mem->release(mem->ctx, buf);
    say(why, why_len, "the chunk's archive does not decode: %s", fz_strerror(rc));
    return rc;
  }
  *out = buf;
  *out_len = n;
  return 0;
}

/* When HDF5 unloads the plugin (H5close, or the process's end): the
 * connection, its shared buffers, the plan and the scratch buffer go. */
__attribute__((destructor)) static void release_all(void) {
  pthread_mutex_lock(&lock);
#ifndef H5Z_FZD_ENGINE_ONLY
  drop_client();
#endif
  fz_plan_destroy(st.plan);
  st.plan = NULL;
  free(st.scratch);
  st.scratch = NULL;
  st.scratch_cap = 0;
  pthread_mutex_unlock(&lock);
}
