/*
 * pool.c - the worker pool: a bounded FIFO of jobs shared by N worker
 * threads, and the way finished jobs get back to the loop (a list plus one
 * uv_async_t, which coalesces wake-ups).  What a worker does with a job is
 * its backend's (backend.h): the pool only queues, wakes, and hands jobs
 * back.
 *
 * Two habits come from the backend.  A worker may look at the queue for a
 * while before it sleeps (spin_us): on the GPU a client's next job often
 * arrives within tens of microseconds of the answer to its last, and waking
 * a sleeping thread costs about as much again, the time of a whole small
 * job.  One worker looks at a time (the spinner); the others sleep.  When
 * several looked, every job woke them all at once, and all but one went
 * back to sleep through the queue's lock, which cost the one that took the
 * job about 9 us on the GPU machine.  A job that the spinner will take
 * wakes nobody; one more than it can take wakes a sleeper, and a worker
 * that takes a job and leaves more behind wakes another, so a burst still
 * spreads over the pool.  And a worker gives back what it need not keep
 * once the queue has been empty a while (idle_ms), once per idle stretch,
 * so that a daemon that ran one large job does not keep its memory for
 * ever.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "frames.h"
#include "log.h"
#include "notify.h"
#include "plans.h"
#include "server.h"
#include "warm.h"

typedef struct worker {
  fzd_pool *pool;
  pthread_t thread;
  unsigned index;
  void *state; /* the backend's */
} worker;

struct fzd_pool {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_cond_t sync_cv; /* a job of fzd_pool_run() is done */
  fzd_job *head, *tail; /* waiting */
  size_t depth;
  _Atomic size_t queued; /* depth, for workers that look without the lock */
  _Atomic bool spinning;  /* a worker looks at the queue without sleeping */
  _Atomic bool hot;       /* the loop polls without sleeping (fzd_pool_set_hot) */
  _Atomic size_t ndone;   /* jobs on the done list, changed under mu */
  bool stop;
  fzd_job *done_head, *done_tail;
  uv_async_t async;
  unsigned nworkers;
  worker *workers;
  fzd_backend_ops be;
  void (*done)(fzd_job *job, void *arg);
  void *done_arg;
};

/* With cpu_affinity, a worker that owns a core stays on it: its caches stay
 * warm with its plans and chunks instead of following it around the
 * machine.  On a machine shared with other work that costs more than it
 * gives (a pinned worker waits for its one core while others are free), so
 * it is off unless the setting asks for it.  Only the
 * cores this process may use count; with more workers than cores they share
 * them in turn.  A failure to pin is harmless. */
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

/* Looks at the queue for spin_us, unless another worker does: one spinner
 * at a time.  The spinner always takes the lock and looks at the queue
 * again afterwards (idle_wait), so a job that was queued without a wake-up
 * because it was spinning is never left behind. */
static void spin_for_work(fzd_pool *pool) {
  bool idle = false;
  if (!atomic_compare_exchange_strong(&pool->spinning, &idle, true))
    return;
  uint64_t until = fzd_notify_monotonic_usec() + pool->be.spin_us;
  while (atomic_load_explicit(&pool->queued, memory_order_relaxed) == 0 && fzd_notify_monotonic_usec() < until)
    sched_yield();
  atomic_store(&pool->spinning, false);
}

/* Waits (pool->mu held) for a job or the stop; calls the backend's idle
 * once the queue has been empty for idle_ms, unless `idled` says it has
 * been called for this stretch already. */
static void idle_wait(worker *w, bool idled) {
  fzd_pool *pool = w->pool;
  while (pool->head == NULL && !pool->stop) {
    if (idled || pool->be.idle == NULL) {
      pthread_cond_wait(&pool->cv, &pool->mu);
      continue;
    }
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += pool->be.idle_ms / 1000;
    until.tv_nsec += (long)(pool->be.idle_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    if (pthread_cond_timedwait(&pool->cv, &pool->mu, &until) == ETIMEDOUT &&
        pool->head == NULL) {
      pthread_mutex_unlock(&pool->mu);
      pool->be.idle(w->state);
      pthread_mutex_lock(&pool->mu);
      idled = true;
    }
  }
}

static void push_locked(fzd_pool *pool, fzd_job *job);

static void *worker_main(void *arg) {
  worker *w = arg;
  fzd_pool *pool = w->pool;
  if (pool->be.pin_cores)
    pin_to_core(w->index);
  /* Idle at start: nothing to give back yet. */
  bool idled = true;
  for (;;) {
    if (pool->be.spin_us)
      spin_for_work(pool);
    pthread_mutex_lock(&pool->mu);
    idle_wait(w, idled);
    if (pool->head == NULL) {
      pthread_mutex_unlock(&pool->mu);
      break;
    }
    fzd_job *job = pool->head;
    pool->head = job->next;
    if (pool->head == NULL)
      pool->tail = NULL;
    else
      pthread_cond_signal(&pool->cv); /* more than this one: another worker */
    atomic_store_explicit(&pool->queued, --pool->depth, memory_order_relaxed);
    pthread_mutex_unlock(&pool->mu);

    job->next = NULL;
    job->why[0] = '\0';
    job->t_start = uv_hrtime();
    /* Frames run on the backend's decoder where it has one (frames.h). */
    if (job->kind == FZD_JOB_WARM)
      job->err = fzd_warm_job_run(&pool->be, w->state, job);
    else if (job->kind == FZD_JOB_FRAMES)
      job->err = pool->be.frames != NULL ? pool->be.frames(w->state, job) : fzd_frames_job_run(job);
    else
      job->err = pool->be.run(w->state, job);
    job->t_end = uv_hrtime();
    if (job->kind == FZD_JOB_WARM && job->err > 0) {
      /* Entries are left: back in the queue, behind what came meanwhile
       * (accepted already, so past queue_capacity if need be). */
      job->err = 0;
      pthread_mutex_lock(&pool->mu);
      push_locked(pool, job);
      pthread_cond_signal(&pool->cv);
      pthread_mutex_unlock(&pool->mu);
      idled = false;
      continue;
    }
    if (job->err > 0)
      job->err = 0;

    pthread_mutex_lock(&pool->mu);
    if (job->sync) {
      job->sync_done = true;
      pthread_cond_broadcast(&pool->sync_cv);
      pthread_mutex_unlock(&pool->mu);
      idled = false;
      continue;
    }
    if (pool->done_tail)
      pool->done_tail->next = job;
    else
      pool->done_head = job;
    pool->done_tail = job;
    atomic_fetch_add(&pool->ndone, 1);
    bool empty = pool->head == NULL;
    pthread_mutex_unlock(&pool->mu);
    /* The count went up before hot is read, and the loop clears hot before
     * it reads the count (fzd_pool_set_hot): one of the two sees the other. */
    if (!atomic_load(&pool->hot))
      uv_async_send(&pool->async);
    idled = false;
    if (empty && pool->be.idle != NULL && pool->be.idle_ms == 0) {
      pool->be.idle(w->state);
      idled = true;
    }
  }
  return NULL;
}

static void collect(fzd_pool *pool) {
  pthread_mutex_lock(&pool->mu);
  fzd_job *list = pool->done_head;
  pool->done_head = pool->done_tail = NULL;
  atomic_store(&pool->ndone, 0);
  pthread_mutex_unlock(&pool->mu);
  while (list != NULL) {
    fzd_job *next = list->next;
    list->next = NULL;
    pool->done(list, pool->done_arg);
    list = next;
  }
}

static void on_async(uv_async_t *h) { collect(h->data); }

void fzd_pool_collect(fzd_pool *pool) {
  if (atomic_load(&pool->ndone) != 0)
    collect(pool);
}

void fzd_pool_set_hot(fzd_pool *pool, bool hot) {
  atomic_store(&pool->hot, hot);
  if (!hot)
    fzd_pool_collect(pool);
}

int fzd_pool_start(fzd_pool **out, uv_loop_t *loop, unsigned n, const fzd_backend_ops *be,
                   void (*done)(fzd_job *job, void *arg), void *arg) {
  fzd_pool *pool = calloc(1, sizeof(*pool));
  if (pool == NULL)
    return FZ_ENOMEM;
  pool->be = *be;
  atomic_init(&pool->spinning, false);
  atomic_init(&pool->hot, false);
  atomic_init(&pool->ndone, 0);
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
  pthread_cond_init(&pool->sync_cv, NULL);
  if (uv_async_init(loop, &pool->async, on_async) < 0)
    goto err_mutex;
  pool->async.data = pool;
  int fail = FZ_ENOMEM;
  for (unsigned i = 0; i < n; i++) {
    worker *w = &pool->workers[i];
    w->pool = pool;
    w->index = i;
    char why[256] = "";
    int err = be->worker_create(be->state, i, &w->state, why, sizeof why);
    if (err < 0) {
      fzd_err("%s worker %u: %s", be->name, i, why[0] ? why : fz_strerror(err));
      fail = err;
      break;
    }
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
      be->worker_destroy(w->state);
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
  pthread_cond_destroy(&pool->sync_cv);
  pthread_cond_destroy(&pool->cv);
  pthread_mutex_destroy(&pool->mu);
  free(pool->workers);
err_pool:
  if (be->destroy != NULL)
    be->destroy(be->state);
  free(pool);
  return FZ_ENOMEM;
}

/* Appends job to the queue; the caller holds pool->mu. */
static void push_locked(fzd_pool *pool, fzd_job *job) {
  job->next = NULL;
  if (pool->tail)
    pool->tail->next = job;
  else
    pool->head = job;
  pool->tail = job;
  atomic_store_explicit(&pool->queued, ++pool->depth, memory_order_relaxed);
}

int fzd_pool_submit(fzd_pool *pool, fzd_job *job, uint64_t capacity) {
  pthread_mutex_lock(&pool->mu);
  if (pool->depth >= capacity) {
    pthread_mutex_unlock(&pool->mu);
    return FZ_EBUSY;
  }
  push_locked(pool, job);
  /* A spinner takes one job without being woken; it reads the queue after
   * it stops spinning, under this lock. */
  if (pool->depth > 1 || !atomic_load(&pool->spinning))
    pthread_cond_signal(&pool->cv);
  pthread_mutex_unlock(&pool->mu);
  return 0;
}

void fzd_pool_run(fzd_pool *pool, fzd_job **jobs, unsigned n) {
  pthread_mutex_lock(&pool->mu);
  for (unsigned i = 0; i < n; i++) {
    fzd_job *job = jobs[i];
    job->sync = true;
    job->sync_done = false;
    push_locked(pool, job);
  }
  pthread_cond_broadcast(&pool->cv);
  for (unsigned i = 0; i < n; i++)
    while (!jobs[i]->sync_done)
      pthread_cond_wait(&pool->sync_cv, &pool->mu);
  pthread_mutex_unlock(&pool->mu);
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

void fzd_pool_plan_counts(fzd_pool *pool, fzd_plan_counts *out) {
  memset(out, 0, sizeof *out);
  if (pool->be.plans != NULL)
    fzd_plans_counts(pool->be.plans, out);
}

bool fzd_pool_jit_counts(fzd_pool *pool, fzd_jit_counts *out) {
  if (pool->be.jit_counts == NULL)
    return false;
  memset(out, 0, sizeof *out);
  pool->be.jit_counts(pool->be.state, out);
  return true;
}

size_t fzd_pool_depth(fzd_pool *pool) {
  pthread_mutex_lock(&pool->mu);
  size_t d = pool->depth;
  pthread_mutex_unlock(&pool->mu);
  return d;
}

static void on_async_closed(uv_handle_t *h) {
  fzd_pool *pool = h->data;
  pthread_cond_destroy(&pool->sync_cv);
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
    pool->be.worker_destroy(pool->workers[i].state);
  }
  if (pool->be.destroy != NULL)
    pool->be.destroy(pool->be.state);
  /* Jobs that finished after the last async wake-up still get their reply. */
  collect(pool);
  uv_close((uv_handle_t *)&pool->async, on_async_closed);
}
