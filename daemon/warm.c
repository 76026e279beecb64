/*
 * warm.c - preparing a plan and proving the backend right on it (warm.h).
 *
 * An entry becomes a compress job of its shape with a synthetic field as
 * inline input, run by the backend like any job (so the plan it makes is
 * the one later jobs of that shape find), then a decompress job of the
 * archive it made.  The CPU engine (libfzengine, called here directly, not
 * through the backend) compresses the same field and decompresses its own
 * archive; the backend's archive must equal the engine's byte for byte and
 * so must the decompressed arrays.  On the CPU backend both sides are the
 * same engine and the check is trivially true; on the GPU it is the oracle
 * test of the design, run on the very plan jobs will use.
 *
 * Memory.  An entry reserves what it will hold from memory_limit before it
 * allocates anything (fzd_warm_need); without room it goes back to the
 * queue and tries again later, and one that could never fit is refused.  A request's entries run one at a time,
 * each a turn of the job on the queue, so other clients' jobs pass between
 * them.
 *
 * The field is deterministic (the same shape gives the same bytes on every
 * run): a smooth wave plus noise from a fixed-seed generator, and for the
 * float dtypes a few NaN and infinities, which the bound check stores
 * losslessly, so that path is exercised too.
 */
#include "warm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "budget.h"
#include "log.h"
#include "notify.h"
#include "server.h"

static uint64_t next_noise(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* A value in about [-1, 1]: two waves and a little noise. */
static double sample(uint64_t i, uint64_t *seed) {
  double x = (double)i;
  double noise = (double)(next_noise(seed) >> 11) / 9007199254740992.0 - 0.5;
  return 0.6 * sin(x * 0.0021) + 0.3 * cos(x * 0.017) + 0.1 * noise;
}

static void fill_field(const fzd_warm_entry *e, void *out, uint64_t n) {
  uint64_t seed = 0x9e3779b97f4a7c15u;
  for (uint64_t i = 0; i < n; i++) {
    double v = sample(i, &seed);
    switch (e->dtype) {
    case FZ_F32:
      ((float *)out)[i] = (float)(v * 100.0);
      break;
    case FZ_F64:
      ((double *)out)[i] = v * 100.0;
      break;
    case FZ_U8:
      ((uint8_t *)out)[i] = (uint8_t)(128 + (int)(v * 100));
      break;
    case FZ_I8:
      ((int8_t *)out)[i] = (int8_t)(v * 100);
      break;
    case FZ_U16:
      ((uint16_t *)out)[i] = (uint16_t)(32768 + (int)(v * 20000));
      break;
    case FZ_I16:
      ((int16_t *)out)[i] = (int16_t)(v * 20000);
      break;
    case FZ_U32:
      ((uint32_t *)out)[i] = (uint32_t)(2147483648.0 + v * 1e9);
      break;
    case FZ_I32:
      ((int32_t *)out)[i] = (int32_t)(v * 1e9);
      break;
    case FZ_U64:
      ((uint64_t *)out)[i] = (uint64_t)(9.2e18 + v * 1e18);
      break;
    case FZ_I64:
      ((int64_t *)out)[i] = (int64_t)(v * 1e18);
      break;
    }
  }
  /* Special values at fixed places; more than a handful would only move
   * the value range, which the smooth part already sets. */
  if (n < 8 || (e->dtype != FZ_F32 && e->dtype != FZ_F64))
    return;
  const uint64_t at[4] = {n / 7, n / 3, n / 2 + 1, n - 2};
  const double special[4] = {NAN, INFINITY, -INFINITY, NAN};
  for (int k = 0; k < 4; k++) {
    if (e->dtype == FZ_F32)
      ((float *)out)[at[k]] = (float)special[k];
    else
      ((double *)out)[at[k]] = special[k];
  }
}

/* The first offset where a and b differ, or the shorter length. */
static size_t first_difference(const void *a, size_t alen, const void *b, size_t blen) {
  const unsigned char *x = a, *y = b;
  size_t n = alen < blen ? alen : blen, i = 0;
  while (i < n && x[i] == y[i])
    i++;
  return i;
}

static fzd_job *new_job(enum fzd_job_kind kind, const fzd_warm_entry *e, void *in, size_t len) {
  fzd_job *job = calloc(1, sizeof *job);
  if (job == NULL)
    return NULL;
  job->kind = kind;
  fz_params_init(&job->params);
  job->params.threads = 1;
  job->params.dtype = e->dtype;
  job->params.ndims = e->ndims;
  memcpy(job->params.dims, e->dims, sizeof job->params.dims);
  job->params.eb = e->eb;
  job->params.eb_mode = e->eb_mode;
  memcpy(job->pipeline, e->pipeline, sizeof e->pipeline);
  job->in_fd = job->out_fd = -1;
  job->max_inline = job->max_output = UINT64_MAX;
  job->in_data = in;
  job->in_len = len;
  return job;
}

uint64_t fzd_warm_need(const fzd_warm_entry *e) {
  uint64_t bytes = fzd_warm_entry_bytes(e);
  /* The header is mostly the chunk table, a few bytes per chunk of
   * kilobytes: a sixty-fourth of the field and a mebibyte cover it. */
  uint64_t archive = bytes + bytes / 64 + (UINT64_C(1) << 20);
  return 3 * bytes + 2 * archive;
}

/* Prepares and checks one entry; false when memory_limit has no room for
 * it now (nothing was done: the entry is to be tried again later). */
static bool warm_one(const fzd_backend_ops *be, void *worker, fzd_budget *mem,
                     const fzd_warm_entry *e, fzd_warm_result *r) {
  uint64_t t0 = fzd_notify_monotonic_usec();
  size_t bytes = (size_t)fzd_warm_entry_bytes(e);
  uint64_t n = bytes / fz_dtype_size(e->dtype), reserved = 0;
  void *field = NULL, *cpu_arc = NULL, *cpu_back = NULL;
  fz_plan *cpu = NULL;
  fzd_job *c = NULL, *d = NULL;
  int err;

  /* The oracle's plan first: its bound says what the entry will hold. */
  fz_params p;
  fz_params_init(&p);
  p.dtype = e->dtype;
  p.ndims = e->ndims;
  memcpy(p.dims, e->dims, sizeof p.dims);
  p.eb = e->eb;
  p.eb_mode = e->eb_mode;
  p.pipeline = e->pipeline[0] ? e->pipeline : NULL;
  p.threads = 1;
  char why[256] = "";
  if ((err = fz_plan_create(&p, &cpu, why, sizeof why)) < 0) {
    snprintf(r->why, sizeof r->why, "%s", why[0] ? why : fz_strerror(err));
    goto out;
  }
  size_t cap = fz_plan_compress_bound(cpu), cpu_len = 0, back_len = 0;
  /* Everything below is reserved before it is allocated, like a job's
   * memory: the field and the oracle's archive and decoded copy here, the
   * backend's archive and decoded copy in its jobs (which therefore reserve
   * nothing themselves).  Without room now the entry waits for a later
   * turn; one that can never fit fails. */
  uint64_t need = 3 * (uint64_t)bytes + 2 * (uint64_t)cap;
  if (mem != NULL) {
    if ((err = fzd_budget_take(mem, need, NULL)) == FZ_EBUSY) {
      fz_plan_destroy(cpu);
      return false;
    }
    if (err < 0) {
      snprintf(r->why, sizeof r->why, "the entry needs about %llu bytes of memory, more "
               "than memory_limit (%llu)", (unsigned long long)need,
               (unsigned long long)mem->limit);
      goto out;
    }
    reserved = need;
  }
  err = FZ_ENOMEM;
  if ((field = malloc(bytes ? bytes : 1)) == NULL) {
    snprintf(r->why, sizeof r->why, "no memory for a field of %zu bytes", bytes);
    goto out;
  }
  fill_field(e, field, n);
  if ((cpu_arc = malloc(cap)) == NULL || (cpu_back = malloc(bytes ? bytes : 1)) == NULL)
    goto out;
  if ((err = fz_plan_compress(cpu, field, bytes, cpu_arc, cap, &cpu_len)) < 0 ||
      (err = fz_decompress(cpu_arc, cpu_len, cpu_back, bytes, &back_len, 1)) < 0) {
    snprintf(r->why, sizeof r->why, "the CPU engine: %s",
             fz_plan_error(cpu)[0] ? fz_plan_error(cpu) : fz_strerror(err));
    goto out;
  }

  if ((c = new_job(FZD_JOB_COMPRESS, e, field, bytes)) == NULL) {
    err = FZ_ENOMEM;
    goto out;
  }
  field = NULL; /* the job took it */
  c->mem_reserved = true;
  err = be->run(worker, c);
  r->cached = c->plan_hit;
  snprintf(r->chain, sizeof r->chain, "%s", c->chain);
  if (err < 0) {
    snprintf(r->why, sizeof r->why, "compression: %s", c->why[0] ? c->why : fz_strerror(err));
    goto out;
  }
  size_t at = first_difference(c->out_data, c->out_len, cpu_arc, cpu_len);
  if (c->out_len != cpu_len || at != cpu_len) {
    snprintf(r->why, sizeof r->why, "the %s backend's archive (%zu bytes) differs from the "
             "CPU engine's (%zu bytes) from byte %zu on", be->name, c->out_len, cpu_len, at);
    err = FZ_ECORRUPT;
    goto out;
  }
  if ((d = new_job(FZD_JOB_DECOMPRESS, e, c->out_data, c->out_len)) == NULL) {
    err = FZ_ENOMEM;
    goto out;
  }
  c->out_data = NULL;
  d->mem_reserved = true;
  if ((err = be->run(worker, d)) < 0) {
    snprintf(r->why, sizeof r->why, "decompression: %s",
             d->why[0] ? d->why : fz_strerror(err));
    goto out;
  }
  at = first_difference(d->out_data, d->out_len, cpu_back, back_len);
  if (d->out_len != back_len || at != back_len) {
    snprintf(r->why, sizeof r->why, "the %s backend's decompression (%zu bytes) differs "
             "from the CPU engine's (%zu bytes) from byte %zu on", be->name, d->out_len,
             back_len, at);
    err = FZ_ECORRUPT;
    goto out;
  }
  r->identical = true;
out:
  r->err = err < 0 ? err : 0;
  if (r->err < 0 && r->why[0] == '\0')
    snprintf(r->why, sizeof r->why, "%s", fz_strerror(r->err));
  r->us = fzd_notify_monotonic_usec() - t0;
  fzd_job_free(c);
  fzd_job_free(d);
  fz_plan_destroy(cpu);
  free(cpu_back);
  free(cpu_arc);
  free(field);
  if (reserved)
    fzd_budget_give(mem, reserved);
  return true;
}

void fzd_warm_describe(const fzd_warm_entry *e, char *buf, size_t len) {
  int k = snprintf(buf, len, "%s [", fz_dtype_name(e->dtype) ? fz_dtype_name(e->dtype) : "?");
  for (unsigned i = 0; i < e->ndims && k > 0 && (size_t)k < len; i++)
    k += snprintf(buf + k, len - (size_t)k, "%s%llu", i ? ", " : "",
                  (unsigned long long)e->dims[i]);
  if (k > 0 && (size_t)k < len)
    snprintf(buf + k, len - (size_t)k, "] %s %g %s", fz_eb_mode_name(e->eb_mode), e->eb,
             e->pipeline[0] ? e->pipeline : "(default pipeline)");
}

int fzd_warm_job_run(const fzd_backend_ops *be, void *worker, fzd_job *job) {
  fzd_warm *w = job->warm;
  while (w->next < w->n && w->r[w->next].skip)
    w->next++;
  if (w->next == w->n)
    return 0;
  unsigned i = w->next;
  fzd_warm_result *r = &w->r[i];
  if (!warm_one(be, worker, w->mem, &w->e[i], r)) {
    /* Running jobs or another warm-up hold the memory: the job goes to the
     * back of the queue and the worker to the jobs behind it.  The pause
     * keeps a lone warm-up from spinning on a worker meanwhile. */
    struct timespec pause = {0, 10 * 1000 * 1000};
    nanosleep(&pause, NULL);
    return 1;
  }
  w->next++;
  char what[300];
  fzd_warm_describe(&w->e[i], what, sizeof what);
  if (r->err == 0)
    fzd_info("warm: %s: plan %s in %.1f ms, identical to the CPU engine: %s", what,
             r->cached ? "was cached" : "made", (double)r->us / 1000.0, r->chain);
  else
    fzd_warn("warm: %s%s%s: failed after %.1f ms: %s", what, r->chain[0] ? ": " : "",
             r->chain, (double)r->us / 1000.0, r->why);
  while (w->next < w->n && w->r[w->next].skip)
    w->next++;
  return w->next < w->n;
}
