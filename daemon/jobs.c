/*
 * jobs.c - the worker pool: a bounded FIFO of jobs shared by N worker
 * threads, and the way finished jobs get back to the loop (a list plus one
 * uv_async_t, which coalesces wake-ups).
 *
 * A worker runs one job at a time with the engine on one thread, reading its
 * input from the inline copy, from the connection's mapping of a sealed
 * memfd (fdmap.c, set up by the loop thread), or with pread from any other
 * passed descriptor, and writing the result inline or to the output
 * descriptor.  Each worker keeps its own small LRU of finalized plans, since
 * a plan serves one thread at a time and the next job is very often the same
 * shape.  On the GPU backend
 * a worker hands its jobs to gpu.c with its own stream and buffers; the
 * descriptor and delivery helpers here serve both backends.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "server.h"

typedef struct plan_entry {
  fz_params key;
  char pipeline[FZD_PIPELINE_MAX];
  fz_plan *plan;
  uint64_t used;
} plan_entry;

typedef struct worker {
  fzd_pool *pool;
  pthread_t thread;
  unsigned index;
  plan_entry *plans;
  uint64_t tick;
  fzd_gpu_worker *gpu; /* the GPU backend's state of this worker, or NULL */
  void *arc;           /* compression output, kept across jobs */
  size_t arc_cap;
} worker;

struct fzd_pool {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  fzd_job *head, *tail; /* waiting */
  size_t depth;
  _Atomic size_t queued; /* depth, for workers that look without the lock */
  bool stop;
  fzd_job *done_head, *done_tail;
  uv_async_t async;
  unsigned nworkers;
  unsigned plan_cache_entries;
  worker *workers;
  void (*done)(fzd_job *job, void *arg);
  void *done_arg;
};

static uint64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void fzd_job_free(fzd_job *job) {
  if (job == NULL)
    return;
  for (unsigned i = 0; i < job->nfds; i++)
    close(job->fds[i]);
  fzd_fdmap_release(job->in_ref);
  free(job->in_data);
  free(job->out_data);
  free(job);
}

/* ---- plans ---------------------------------------------------------------- */

bool fzd_job_same_plan(const fz_params *a, const char *pipeline,
                       const fzd_job *job) {
  const fz_params *b = &job->params;
  if (a->dtype != b->dtype || a->ndims != b->ndims || a->eb_mode != b->eb_mode ||
      memcmp(&a->eb, &b->eb, sizeof(a->eb)) != 0 || a->has_fill != b->has_fill ||
      (a->has_fill && memcmp(&a->fill_value, &b->fill_value, sizeof(a->fill_value)) != 0) ||
      strcmp(pipeline, job->pipeline) != 0)
    return false;
  for (unsigned i = 0; i < a->ndims; i++)
    if (a->dims[i] != b->dims[i])
      return false;
  return true;
}

/* A plan for the job's parameters: from the cache, or created (and cached,
 * evicting the least recently used).  *owned tells the caller to destroy it
 * when the cache is off. */
static int get_plan(worker *w, fzd_job *job, fz_plan **plan, bool *owned) {
  unsigned n = w->pool->plan_cache_entries;
  *owned = false;
  for (unsigned i = 0; i < n; i++)
    if (w->plans[i].plan != NULL && fzd_job_same_plan(&w->plans[i].key, w->plans[i].pipeline, job)) {
      w->plans[i].used = ++w->tick;
      *plan = w->plans[i].plan;
      return 0;
    }
  fz_params p = job->params;
  p.pipeline = job->pipeline[0] ? job->pipeline : NULL;
  p.threads = 1;
  int err = fz_plan_create(&p, plan, job->why, sizeof(job->why));
  if (err < 0)
    return err;
  if (n == 0) {
    *owned = true;
    return 0;
  }
  unsigned victim = 0;
  for (unsigned i = 1; i < n; i++)
    if (w->plans[i].used < w->plans[victim].used)
      victim = i;
  plan_entry *e = &w->plans[victim];
  fz_plan_destroy(e->plan);
  e->plan = *plan;
  e->key = job->params;
  memcpy(e->pipeline, job->pipeline, sizeof(e->pipeline));
  e->used = ++w->tick;
  return 0;
}

/* ---- descriptors ---------------------------------------------------------- */

/* Reads in_len bytes at in_off of in_fd into dst. */
static int pread_input(fzd_job *job, void *dst) {
  int fd = job->fds[job->in_fd];
  size_t got = 0;
  while (got < job->in_len) {
    ssize_t n = pread(fd, (char *)dst + got, job->in_len - got,
                      (off_t)(job->in_off + got));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      snprintf(job->why, sizeof(job->why), "reading in_fd at offset %llu: %s",
               (unsigned long long)(job->in_off + got),
               n < 0 ? strerror(errno) : "the file is shorter than it was");
      return FZ_EIO;
    }
    got += (size_t)n;
  }
  return 0;
}

static int read_input(fzd_job *job, const void **in) {
  if (job->in_ptr != NULL || job->in_fd < 0) {
    *in = job->in_ptr != NULL ? job->in_ptr : job->in_data;
    return 0;
  }
  job->in_data = malloc(job->in_len ? job->in_len : 1);
  if (job->in_data == NULL)
    return FZ_ENOMEM;
  *in = job->in_data;
  return pread_input(job, job->in_data);
}

int fzd_job_read_into(fzd_job *job, void *dst) {
  const void *src = job->in_ptr != NULL ? job->in_ptr : job->in_data;
  if (job->in_ptr == NULL && job->in_fd >= 0)
    return pread_input(job, dst);
  if (job->in_len > 0)
    memcpy(dst, src, job->in_len);
  return 0;
}

static int inline_too_large(fzd_job *job, size_t len) {
  if (len <= job->max_inline)
    return 0;
  snprintf(job->why, sizeof(job->why),
           "result of %zu bytes exceeds max_inline_bytes (%llu); pass out_fd", len,
           (unsigned long long)job->max_inline);
  return FZ_EMSGSIZE;
}

/* Writes len bytes at out_off of out_fd (at most out_length, when the client
 * gave one) and truncates a file after them. */
static int write_output(fzd_job *job, const void *data, size_t len) {
  int fd = job->fds[job->out_fd];
  size_t put = 0;
  int err = 0;
  if (job->out_cap && len > job->out_cap) {
    snprintf(job->why, sizeof(job->why),
             "the result of %zu bytes does not fit out_length (%llu bytes)", len,
             (unsigned long long)job->out_cap);
    return FZ_ENOSPC;
  }
  while (put < len) {
    ssize_t n = pwrite(fd, (const char *)data + put, len - put,
                       (off_t)(job->out_off + put));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      snprintf(job->why, sizeof(job->why), "writing out_fd: %s",
               n < 0 ? strerror(errno) : "no progress");
      err = n < 0 && errno == ENOSPC ? FZ_ENOSPC : FZ_EIO;
      break;
    }
    put += (size_t)n;
  }
  if (err == 0 && job->out_truncate && ftruncate(fd, (off_t)(job->out_off + len)) < 0) {
    snprintf(job->why, sizeof(job->why), "truncating out_fd: %s", strerror(errno));
    err = FZ_EIO;
  }
  job->out_len = len;
  return err;
}

/* Delivers len bytes of result, taking data: to out_fd, or kept for the
 * inline reply. */
static int deliver(fzd_job *job, void *data, size_t len) {
  if (job->out_fd < 0) {
    int err = inline_too_large(job, len);
    if (err < 0) {
      free(data);
      return err;
    }
    job->out_data = data;
    job->out_len = len;
    return 0;
  }
  int err = write_output(job, data, len);
  free(data);
  return err;
}

int fzd_job_deliver_copy(fzd_job *job, const void *data, size_t len) {
  if (job->out_fd >= 0)
    return write_output(job, data, len);
  int err = inline_too_large(job, len);
  if (err < 0)
    return err;
  void *copy = malloc(len ? len : 1);
  if (copy == NULL)
    return FZ_ENOMEM;
  memcpy(copy, data, len);
  job->out_data = copy;
  job->out_len = len;
  return 0;
}

/* ---- the two kinds of job ------------------------------------------------ */

static int run_compress(worker *w, fzd_job *job) {
  const void *in;
  int err = read_input(job, &in);
  if (err < 0)
    return err;
  fz_plan *plan;
  bool owned;
  err = get_plan(w, job, &plan, &owned);
  if (err < 0)
    return err;
  /* The archive is written to the worker's own buffer, which stays (and
   * stays faulted in) from one job to the next; only its compressed bytes
   * are copied out for the reply. */
  size_t cap = fz_plan_compress_bound(plan);
  if (cap > w->arc_cap) {
    void *grown = realloc(w->arc, cap);
    if (grown != NULL) {
      w->arc = grown;
      w->arc_cap = cap;
    }
  }
  void *arc = w->arc;
  size_t arc_len = 0;
  uint64_t t0 = now_us();
  if (cap > w->arc_cap)
    err = FZ_ENOMEM;
  else if ((err = fz_plan_compress(plan, in, job->in_len, arc, cap, &arc_len)) < 0 &&
           fz_plan_error(plan)[0])
    snprintf(job->why, sizeof(job->why), "%s", fz_plan_error(plan));
  job->time_us = now_us() - t0;
  if (err >= 0) {
    snprintf(job->chain, sizeof(job->chain), "%s", fz_plan_chain(plan));
    fz_archive_info info;
    if (fz_archive_inspect(arc, arc_len, &info) >= 0)
      job->eb_abs = info.eb_abs;
  }
  if (err >= 0 && job->verify) {
    void *back = malloc(job->in_len ? job->in_len : 1);
    size_t back_len = 0;
    fz_compare_result cmp;
    err = back == NULL ? FZ_ENOMEM
                       : fz_decompress(arc, arc_len, back, job->in_len, &back_len, 1);
    if (err >= 0)
      err = fz_compare(job->params.dtype, in, back,
                       job->in_len / fz_dtype_size(job->params.dtype), &cmp);
    if (err >= 0) {
      job->max_error = cmp.max_abs_error;
      job->max_rel_error = cmp.max_rel_error;
      job->has_max_error = true;
    } else {
      snprintf(job->why, sizeof(job->why), "verification failed: %s",
               fz_strerror(err));
    }
    free(back);
  }
  if (owned)
    fz_plan_destroy(plan);
  free(job->in_data); /* the input is no longer needed: free it early */
  job->in_data = NULL;
  if (err < 0)
    return err;
  return fzd_job_deliver_copy(job, arc, arc_len);
}

static int run_decompress(fzd_job *job) {
  const void *in;
  int err = read_input(job, &in);
  if (err < 0)
    return err;
  err = fz_archive_inspect(in, job->in_len, &job->info);
  if (err < 0)
    return err;
  uint64_t limit = job->out_fd < 0 ? job->max_inline : job->max_output;
  if (job->info.raw_bytes > limit) {
    snprintf(job->why, sizeof(job->why),
             "decompressed size %llu exceeds the limit of %llu bytes%s",
             (unsigned long long)job->info.raw_bytes, (unsigned long long)limit,
             job->out_fd < 0 ? " for inline results; pass out_fd" : "");
    return FZ_EMSGSIZE;
  }
  size_t raw = (size_t)job->info.raw_bytes;
  void *out = malloc(raw ? raw : 1);
  if (out == NULL)
    return FZ_ENOMEM;
  size_t out_len = 0;
  uint64_t t0 = now_us();
  err = fz_decompress(in, job->in_len, out, raw, &out_len, 1);
  job->time_us = now_us() - t0;
  free(job->in_data);
  job->in_data = NULL;
  if (err < 0) {
    free(out);
    return err;
  }
  return deliver(job, out, out_len);
}

/* ---- threads -------------------------------------------------------------- */

/* On the CPU backend each worker owns a core: pinned, its caches stay warm
 * with its plans and chunks instead of following it around the machine.
 * Only the cores this process may use count; with more workers than cores
 * they share them in turn.  A failure to pin is harmless. */
static void pin_to_core(unsigned index) {
  cpu_set_t allowed, one;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
    return;
  int count = CPU_COUNT(&allowed);
  if (count <= 1)
    return;
  int want = (int)(index % (unsigned)count);
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
    if (!CPU_ISSET(cpu, &allowed) || want-- > 0)
      continue;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    return;
  }
}

/* A GPU worker looks at the queue for a while before it sleeps: a client's
 * next job often arrives within tens of microseconds of the answer to its
 * last, and waking a sleeping thread costs about as much again, which on
 * the GPU is the time of a whole small job.  (CPU workers own their cores
 * and sleep at once.) */
#define GPU_SPIN_US 250

static void spin_for_work(fzd_pool *pool) {
  uint64_t until = now_us() + GPU_SPIN_US;
  while (atomic_load_explicit(&pool->queued, memory_order_relaxed) == 0 && now_us() < until)
    sched_yield();
}

/* Waits (pool->mu held) for a job or the stop.  A GPU worker idle for
 * IDLE_TRIM_MS gives back its staging and device buffers once, and the
 * context's pool the memory no one uses, so that a daemon that ran one
 * large job does not keep its memory reserved for ever. */
#define IDLE_TRIM_MS 1000

static void idle_wait(worker *w) {
  fzd_pool *pool = w->pool;
  bool trimmed = w->gpu == NULL;
  while (pool->head == NULL && !pool->stop) {
    if (trimmed) {
      pthread_cond_wait(&pool->cv, &pool->mu);
      continue;
    }
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += IDLE_TRIM_MS / 1000;
    until.tv_nsec += (long)(IDLE_TRIM_MS % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    if (pthread_cond_timedwait(&pool->cv, &pool->mu, &until) == ETIMEDOUT &&
        pool->head == NULL) {
      pthread_mutex_unlock(&pool->mu);
      fzd_gpu_worker_idle(w->gpu);
      pthread_mutex_lock(&pool->mu);
      trimmed = true;
    }
  }
}

static void *worker_main(void *arg) {
  worker *w = arg;
  fzd_pool *pool = w->pool;
  if (w->gpu == NULL)
    pin_to_core(w->index);
  for (;;) {
    if (w->gpu != NULL)
      spin_for_work(pool);
    pthread_mutex_lock(&pool->mu);
    idle_wait(w);
    if (pool->head == NULL) {
      pthread_mutex_unlock(&pool->mu);
      break;
    }
    fzd_job *job = pool->head;
    pool->head = job->next;
    if (pool->head == NULL)
      pool->tail = NULL;
    atomic_store_explicit(&pool->queued, --pool->depth, memory_order_relaxed);
    pthread_mutex_unlock(&pool->mu);

    job->next = NULL;
    job->why[0] = '\0';
    if (w->gpu != NULL)
      job->err = fzd_gpu_run(w->gpu, job);
    else
      job->err = job->kind == FZD_JOB_COMPRESS ? run_compress(w, job)
                                               : run_decompress(job);
    if (job->err > 0)
      job->err = 0;

    pthread_mutex_lock(&pool->mu);
    if (pool->done_tail)
      pool->done_tail->next = job;
    else
      pool->done_head = job;
    pool->done_tail = job;
    pthread_mutex_unlock(&pool->mu);
    uv_async_send(&pool->async);
  }
  for (unsigned i = 0; w->plans != NULL && i < pool->plan_cache_entries; i++)
    fz_plan_destroy(w->plans[i].plan);
  free(w->arc);
  return NULL;
}

static void on_async(uv_async_t *h) {
  fzd_pool *pool = h->data;
  pthread_mutex_lock(&pool->mu);
  fzd_job *list = pool->done_head;
  pool->done_head = pool->done_tail = NULL;
  pthread_mutex_unlock(&pool->mu);
  while (list != NULL) {
    fzd_job *next = list->next;
    list->next = NULL;
    pool->done(list, pool->done_arg);
    list = next;
  }
}

int fzd_pool_start(fzd_pool **out, uv_loop_t *loop, unsigned n,
                   unsigned plan_cache_entries, fzd_gpu *gpu,
                   void (*done)(fzd_job *job, void *arg), void *arg) {
  fzd_pool *pool = calloc(1, sizeof(*pool));
  if (pool == NULL)
    return FZ_ENOMEM;
  pool->nworkers = 0;
  pool->plan_cache_entries = plan_cache_entries;
  pool->done = done;
  pool->done_arg = arg;
  pool->workers = calloc(n, sizeof(worker));
  if (pool->workers == NULL)
    goto err_pool;
  pthread_mutex_init(&pool->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&pool->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (uv_async_init(loop, &pool->async, on_async) < 0)
    goto err_mutex;
  pool->async.data = pool;
  int fail = FZ_ENOMEM;
  for (unsigned i = 0; i < n; i++) {
    worker *w = &pool->workers[i];
    w->pool = pool;
    w->index = i;
    if (gpu != NULL) {
      char why[256] = "";
      int err = fzd_gpu_worker_create(gpu, i, plan_cache_entries, &w->gpu, why, sizeof why);
      if (err < 0) {
        fzd_err("GPU worker %u: %s", i, why[0] ? why : fz_strerror(err));
        fail = err;
        break;
      }
    } else if (plan_cache_entries > 0) {
      w->plans = calloc(plan_cache_entries, sizeof(plan_entry));
      if (w->plans == NULL)
        break;
    }
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
      free(w->plans);
      w->plans = NULL;
      fzd_gpu_worker_destroy(w->gpu);
      w->gpu = NULL;
      break;
    }
    pool->nworkers++;
  }
  if (pool->nworkers < n) {
    fzd_err("started only %u of %u workers", pool->nworkers, n);
    fzd_pool_stop(pool);
    return fail;
  }
  *out = pool;
  return 0;

err_mutex:
  pthread_cond_destroy(&pool->cv);
  pthread_mutex_destroy(&pool->mu);
  free(pool->workers);
err_pool:
  free(pool);
  return FZ_ENOMEM;
}

int fzd_pool_submit(fzd_pool *pool, fzd_job *job, uint64_t capacity) {
  pthread_mutex_lock(&pool->mu);
  if (pool->depth >= capacity) {
    pthread_mutex_unlock(&pool->mu);
    return FZ_EBUSY;
  }
  job->next = NULL;
  if (pool->tail)
    pool->tail->next = job;
  else
    pool->head = job;
  pool->tail = job;
  atomic_store_explicit(&pool->queued, ++pool->depth, memory_order_relaxed);
  pthread_cond_signal(&pool->cv);
  pthread_mutex_unlock(&pool->mu);
  return 0;
}

void fzd_pool_cancel(fzd_pool *pool, const fzd_conn *conn) {
  fzd_job *taken = NULL, **tail = &taken;
  pthread_mutex_lock(&pool->mu);
  fzd_job **pp = &pool->head;
  pool->tail = NULL;
  while (*pp != NULL) {
    fzd_job *j = *pp;
    if (j->conn == conn) {
      *pp = j->next;
      j->next = NULL;
      *tail = j;
      tail = &j->next;
      atomic_store_explicit(&pool->queued, --pool->depth, memory_order_relaxed);
    } else {
      pool->tail = j;
      pp = &j->next;
    }
  }
  pthread_mutex_unlock(&pool->mu);
  while (taken != NULL) {
    fzd_job *next = taken->next;
    taken->next = NULL;
    taken->err = FZ_ECANCELED;
    pool->done(taken, pool->done_arg);
    taken = next;
  }
}

size_t fzd_pool_depth(fzd_pool *pool) {
  pthread_mutex_lock(&pool->mu);
  size_t d = pool->depth;
  pthread_mutex_unlock(&pool->mu);
  return d;
}

static void on_async_closed(uv_handle_t *h) {
  fzd_pool *pool = h->data;
  pthread_cond_destroy(&pool->cv);
  pthread_mutex_destroy(&pool->mu);
  free(pool->workers);
  free(pool);
}

void fzd_pool_stop(fzd_pool *pool) {
  pthread_mutex_lock(&pool->mu);
  pool->stop = true;
  pthread_cond_broadcast(&pool->cv);
  pthread_mutex_unlock(&pool->mu);
  for (unsigned i = 0; i < pool->nworkers; i++) {
    pthread_join(pool->workers[i].thread, NULL);
    free(pool->workers[i].plans);
    fzd_gpu_worker_destroy(pool->workers[i].gpu);
  }
  /* Jobs that finished after the last async wake-up still get their reply. */
  on_async(&pool->async);
  uv_close((uv_handle_t *)&pool->async, on_async_closed);
}
