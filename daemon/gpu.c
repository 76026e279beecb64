/*
 * gpu.c - the GPU backend of fzd: one GPU context (fz_gpu_ctx) pinned at
 * start-up, and for each worker thread one stream of it with everything a
 * job needs kept from job to job, so that the steady state allocates
 * nothing: pinned host staging buffers, device buffers drawn from the
 * context's pool; and an LRU of preallocated GPU plans that the workers
 * share.  Every GPU call goes through libfzkernels (fz_gpu.h): this file
 * schedules and keeps state, and includes no CUDA header.
 *
 * A job whose data is on the host (inline or a descriptor) is copied into
 * the worker's pinned staging buffer, sent to the device, compressed or
 * decompressed there, and its result copied back to pinned memory and
 * delivered like the CPU backend's.  A job that names CUDA IPC buffers is
 * compressed in place: the daemon opens the client's allocation (once per
 * connection: the handles are cached, see below), checks the offset and
 * length against the allocation's size, and the kernels read or write it
 * directly, and neither the archive nor the data crosses to the host: a
 * compression's one wait brings back the archive's size and bound, and a
 * decompression reads only the header's prefix before it decodes.
 *
 * Device memory the workers hold (buffers and plan workspaces) is counted
 * against gpu_memory_limit; running out of device memory, or over that
 * limit, fails the job with FZ_EGPUOOM and the worker gives back everything
 * it holds, so the next job starts from an empty slate and the daemon keeps
 * serving.
 *
 * Imported device buffers are cached per connection (UCX-style): an entry
 * holds the mapping (kernels/runtime/import.c makes and closes it: legacy IPC,
 * VMM, pool pointer) with the allocation's real size, a count of the jobs
 * using it, and a last-use tick for LRU eviction among the unused ones.
 * The key is the kind, the export bytes and the client's buffer_id, so a
 * client that frees an allocation and gets the same address (and the same
 * handle bytes) for a new one reaches a new import, never the stale one,
 * which is closed as soon as no job uses it.  Pools and IPC events are
 * cached beside them.  Workers share a connection's cache under its mutex;
 * "release" closes entries on the loop thread (those in use when their job
 * ends), and the loop thread closes everything when the connection's
 * memory goes, after its last job has come back.
 */
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "cpu.h"
#include "fz_gpu.h"
#ifdef FZD_HAVE_FRAMES
#include "frames.h"
#include "fz_frames_gpu.h"
#endif
#include "jobio.h"
#include "log.h"
#include "notify.h"
#include "plans.h"
#include "server.h"

#define IPC_CACHE_ENTRIES 32
#define POOL_ENTRIES 8
#define EVENT_ENTRIES 16
#define WARMUP_ELEMS 65536u

struct fzd_gpu {
  fz_gpu_ctx *ctx;
  uint64_t mem_limit;
  _Atomic uint64_t mem_used;
  /* The plan cache (plans.h), shared by the workers: a GPU plan holds its
   * device workspace, counted against gpu_memory_limit while it lives and
   * against plan_cache_bytes while the cache keeps it. */
  fzd_plans *plans;
  /* The JIT settings (jit, jit_cache_dir resolved, jit_cache_max_bytes). */
  bool jit;
  char jit_cache_dir[FZD_CONFIG_STR];
  uint64_t jit_cache_max_bytes;
};

/* A buffer kept across jobs: pinned host memory or device memory. */
typedef struct buf {
  void *p;
  size_t cap;
} buf;

typedef struct fzd_gpu_worker fzd_gpu_worker;

struct fzd_gpu_worker {
  fzd_gpu *g;
  unsigned index;
  fz_gpu_stream stream;
  buf h_in, h_out, h_back; /* pinned */
  buf d_in, d_out, d_back; /* device */
  fz_gpu_decoder *dec;
  fzd_plan_slot *slot; /* the slot of the job's plan, busy in the cache */
#ifdef FZD_HAVE_FRAMES
  /* The detector-frames decoder of the last frames job, kept for the next
   * one of the same dtype, frame size and setup; its device memory counts
   * against gpu_memory_limit while it lives. */
  fz_frames_gpu *frames;
  fz_dtype frames_dtype;
  uint64_t frames_npixels, frames_serial;
  size_t frames_bytes;
#endif
};

/* A pool imported from a client (fz_gpu_pool_import) for the pointers of it
 * this connection uses.  fd is a duplicate of the descriptor it came from:
 * a job whose descriptor is the same open file (kcmp) names the same pool,
 * so a client that sends its one export each time gets it imported once. */
typedef struct pool_entry {
  fz_gpu_mempool pool; /* NULL: free slot */
  int fd;
  unsigned users; /* open entries of pointers imported from it */
} pool_entry;

/* One imported allocation.  The key is the kind, the export bytes (the IPC
 * handle, the pool pointer's export data; none for VMM, whose descriptor
 * differs from job to job), the VMM size and the client's buffer_id. */
typedef struct ipc_entry {
  enum fzd_mem_kind kind;
  unsigned char key[FZD_IPC_HANDLE_BYTES];
  uint64_t vmm_size;
  uint64_t buffer_id;
  bool has_buffer_id;
  fz_gpu_mapping map;
  pool_entry *pool;
  unsigned refs;
  uint64_t used;
  bool open;
  /* Closed when the last job using it lets go: released, found stale, or
   * a VMM import without buffer_id (which serves only its job). */
  bool doomed;
} ipc_entry;

typedef struct event_entry {
  unsigned char key[FZD_IPC_HANDLE_BYTES];
  fz_gpu_event ev;
  unsigned refs;
  uint64_t used;
  bool open, doomed;
} event_entry;

struct fzd_ipc_cache {
  pthread_mutex_t mu;
  fzd_gpu *g;
  uint64_t tick;
  ipc_entry e[IPC_CACHE_ENTRIES];
  pool_entry pools[POOL_ENTRIES];
  event_entry ev[EVENT_ENTRIES];
};

/* A copy on the worker's stream, or a wait for it; a failure leaves its
 * cause in the job's message after what the daemon was doing. */
static int gpu_copy(fzd_gpu_worker *w, fzd_job *job, void *dst, const void *src, size_t n,
                    const char *what);
static int gpu_sync(fzd_gpu_worker *w, fzd_job *job, const char *what);

/* ---- the context ----------------------------------------------------------- */

/* Logs the JIT failures not told yet (NVRTC missing, a compile's log): the
 * kernels keep their text until fetched, so each is logged once. */
static void jit_log_failures(fzd_gpu *g) {
  char text[4096];
  if (fz_gpu_ctx_jit_failure(g->ctx, text, sizeof text))
    fzd_warn("jit: %s", text);
}

static int mem_reserve(fzd_gpu *g, size_t bytes, char *why, size_t why_len);
static void mem_release(fzd_gpu *g, size_t bytes);

/* The plan cache's GPU plans: preallocated, their workspace counted
 * against gpu_memory_limit. */
static int plan_create(void *arg, const fz_params *p, void **out, char *why, size_t why_len) {
  fzd_gpu *g = arg;
  fz_gpu_plan *plan;
  int err = fz_gpu_plan_create(g->ctx, p, FZ_GPU_PREALLOC, &plan, why, why_len);
  /* A compile that failed left the plan on the built-in kernels; its log is
   * told once. */
  jit_log_failures(g);
  if (err < 0)
    return err;
  if ((err = mem_reserve(g, fz_gpu_plan_workspace_bytes(plan), why, why_len)) < 0) {
    fz_gpu_plan_destroy(plan);
    return err;
  }
  *out = plan;
  return 0;
}

static void plan_destroy(void *arg, void *plan) {
  mem_release(arg, fz_gpu_plan_workspace_bytes(plan));
  fz_gpu_plan_destroy(plan);
}

/* What the budget counts of a GPU plan: its device workspace, the memory
 * that is scarce.  Its host side (the CPU plan it keeps for the bound and
 * the chain, a pinned parameter block) is small beside it and not told by
 * libfzkernels. */
static uint64_t plan_bytes(void *arg, const void *plan) {
  (void)arg;
  return fz_gpu_plan_workspace_bytes(plan);
}

int fzd_gpu_open(const char *device, unsigned nstreams, uint64_t mem_limit, fzd_gpu **out,
                 char *why, size_t why_len) {
  *out = NULL;
  fzd_gpu *g = calloc(1, sizeof *g);
  if (g == NULL)
    return FZ_ENOMEM;
  int err = fz_gpu_ctx_create(device, nstreams, &g->ctx, why, why_len);
  if (err < 0) {
    free(g);
    return err;
  }
  g->mem_limit = mem_limit;
  /* A driver without the calls that import clients' memory would fail every
   * device-buffer job: better not to start. */
  err = fz_gpu_import_ready(why, why_len);
  if (err < 0) {
    fz_gpu_ctx_destroy(g->ctx);
    free(g);
    return err;
  }
  *out = g;
  return 0;
}

void fzd_gpu_close(fzd_gpu *g) {
  if (g == NULL)
    return;
  fzd_plans_destroy(g->plans);
  fz_gpu_ctx_destroy(g->ctx);
  free(g);
}

const char *fzd_gpu_name(const fzd_gpu *g) {
  return fz_gpu_ctx_name(g->ctx);
}
const char *fzd_gpu_uuid(const fzd_gpu *g) {
  return fz_gpu_ctx_uuid(g->ctx);
}

/* Counts bytes of device memory against gpu_memory_limit. */
static int mem_reserve(fzd_gpu *g, size_t bytes, char *why, size_t why_len) {
  uint64_t cur = atomic_load(&g->mem_used);
  do {
    if (g->mem_limit != 0 && (bytes > g->mem_limit || cur > g->mem_limit - bytes)) {
      snprintf(why, why_len,
               "%zu more bytes of device memory would pass gpu_memory_limit "
               "(%llu bytes, %llu held)",
               bytes, (unsigned long long)g->mem_limit, (unsigned long long)cur);
      return FZ_EGPUOOM;
    }
  } while (!atomic_compare_exchange_weak(&g->mem_used, &cur, cur + bytes));
  return 0;
}

static void mem_release(fzd_gpu *g, size_t bytes) {
  atomic_fetch_sub(&g->mem_used, bytes);
}

/* Sizes grow in whole MiB so that nearby sizes share a buffer. */
static size_t round_mib(size_t n) {
  const size_t m = (size_t)1 << 20;
  return n > SIZE_MAX - m ? n : (n + m - 1) / m * m + (n == 0 ? m : 0);
}

/* ---- per-worker buffers ---------------------------------------------------- */

static void host_drop(fzd_gpu_worker *w, buf *b) {
  fz_gpu_host_free(w->g->ctx, b->p);
  b->p = NULL;
  b->cap = 0;
}

static int host_ensure(fzd_gpu_worker *w, buf *b, size_t need, fzd_job *job) {
  if (b->cap >= need)
    return 0;
  host_drop(w, b);
  size_t n = round_mib(need);
  char why[200];
  int err = fz_gpu_host_alloc(w->g->ctx, n, &b->p, why, sizeof why);
  if (err < 0) {
    snprintf(job->why, sizeof(job->why), "%zu bytes of pinned staging: %s", n, why);
    return err;
  }
  b->cap = n;
  return 0;
}

static int gpu_copy(fzd_gpu_worker *w, fzd_job *job, void *dst, const void *src, size_t n,
                    const char *what) {
  char why[200];
  int err = fz_gpu_copy(w->g->ctx, dst, src, n, w->stream, why, sizeof why);
  if (err < 0)
    snprintf(job->why, sizeof(job->why), "%s: %s", what, why);
  return err;
}

static int gpu_sync(fzd_gpu_worker *w, fzd_job *job, const char *what) {
  char why[200];
  int err = fz_gpu_sync(w->g->ctx, w->stream, why, sizeof why);
  if (err < 0 && job != NULL)
    snprintf(job->why, sizeof(job->why), "%s: %s", what, why);
  return err;
}

static void dev_drop(fzd_gpu_worker *w, buf *b) {
  if (b->p == NULL)
    return;
  fz_gpu_free(w->g->ctx, b->p, w->stream);
  mem_release(w->g, b->cap);
  b->p = NULL;
  b->cap = 0;
}

static int dev_ensure(fzd_gpu_worker *w, buf *b, size_t need, fzd_job *job) {
  if (b->cap >= need)
    return 0;
  dev_drop(w, b);
  size_t n = round_mib(need);
  int err = mem_reserve(w->g, n, job->why, sizeof(job->why));
  if (err < 0)
    return err;
  err = fz_gpu_malloc(w->g->ctx, n, w->stream, &b->p, job->why, sizeof(job->why));
  if (err < 0) {
    mem_release(w->g, n);
    b->p = NULL;
    return err;
  }
  b->cap = n;
  return 0;
}

/* Gives back every device buffer the worker holds and every plan no job
 * is using (after running out of device memory, so that the next job finds
 * it free). */
static void frames_drop(fzd_gpu_worker *w);

static void trim(fzd_gpu_worker *w) {
  gpu_sync(w, NULL, NULL);
  frames_drop(w);
  dev_drop(w, &w->d_in);
  dev_drop(w, &w->d_out);
  dev_drop(w, &w->d_back);
  fzd_plans_trim(w->g->plans);
  gpu_sync(w, NULL, NULL);
}

/* A job ran out of device memory: the worker gives back everything it
 * holds, so the next job starts from an empty slate. */
static void trim_after_oom(fzd_gpu_worker *w, const fzd_job *job) {
  fzd_warn("worker %u: out of GPU memory (%s); releasing its buffers and plans", w->index,
           job->why);
  trim(w);
}

/* A preallocated GPU plan for the job, from the shared cache, held until
 * the job ends (gpu_run puts it back). */
static int get_plan(fzd_gpu_worker *w, fzd_job *job, fz_gpu_plan **out) {
  void *p = NULL;
  int err = fzd_plans_take(w->g->plans, job, &p, &w->slot);
  *out = p;
  return err;
}

/* ---- imported device buffers and events ------------------------------------ */

fzd_ipc_cache *fzd_ipc_cache_create(fzd_gpu *g) {
  fzd_ipc_cache *c = calloc(1, sizeof *c);
  if (c == NULL)
    return NULL;
  pthread_mutex_init(&c->mu, NULL);
  c->g = g;
  for (unsigned i = 0; i < POOL_ENTRIES; i++)
    c->pools[i].fd = -1;
  return c;
}

static void pool_close(fzd_ipc_cache *c, pool_entry *p) {
  fz_gpu_pool_close(c->g->ctx, p->pool);
  if (p->fd >= 0)
    close(p->fd);
  p->pool = NULL;
  p->fd = -1;
  p->users = 0;
}

/* Closes an entry no job uses (c->mu held, or the cache going). */
static void entry_close(fzd_ipc_cache *c, ipc_entry *e) {
  fz_gpu_unmap(c->g->ctx, &e->map);
  if (e->pool != NULL && --e->pool->users == 0)
    pool_close(c, e->pool);
  e->pool = NULL;
  e->open = false;
  e->doomed = false;
}

static void event_close(fzd_ipc_cache *c, event_entry *v) {
  fz_gpu_event_close(c->g->ctx, v->ev);
  v->ev = NULL;
  v->open = false;
  v->doomed = false;
}

void fzd_ipc_cache_destroy(fzd_ipc_cache *c) {
  if (c == NULL)
    return;
  /* Pointers go before the pools they were imported from. */
  for (unsigned i = 0; i < IPC_CACHE_ENTRIES; i++)
    if (c->e[i].open)
      entry_close(c, &c->e[i]);
  for (unsigned i = 0; i < POOL_ENTRIES; i++)
    if (c->pools[i].pool != NULL)
      pool_close(c, &c->pools[i]);
  for (unsigned i = 0; i < EVENT_ENTRIES; i++)
    if (c->ev[i].open)
      event_close(c, &c->ev[i]);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

unsigned fzd_ipc_cache_release(fzd_ipc_cache *c, const uint64_t *ids, size_t n, bool all) {
  if (c == NULL)
    return 0;
  unsigned count = 0;
  pthread_mutex_lock(&c->mu);
  for (unsigned i = 0; i < IPC_CACHE_ENTRIES; i++) {
    ipc_entry *e = &c->e[i];
    if (!e->open || e->doomed)
      continue;
    bool named = all;
    for (size_t k = 0; k < n && !named; k++)
      named = e->has_buffer_id && e->buffer_id == ids[k];
    if (!named)
      continue;
    count++;
    if (e->refs == 0)
      entry_close(c, e);
    else
      e->doomed = true; /* its job closes it when it ends */
  }
  for (unsigned i = 0; all && i < EVENT_ENTRIES; i++) {
    event_entry *v = &c->ev[i];
    if (!v->open)
      continue;
    if (v->refs == 0)
      event_close(c, v);
    else
      v->doomed = true;
  }
  pthread_mutex_unlock(&c->mu);
  return count;
}

/* Whether two descriptors of this process are the same open file.  Where
 * kcmp is missing or forbidden the answer is no, and the pool is imported
 * again (import_pool then still finds it by its handle). */
static bool same_file(int a, int b) {
#ifdef SYS_kcmp
  pid_t me = getpid();
  return syscall(SYS_kcmp, me, me, 0 /* KCMP_FILE */, a, b) == 0;
#else
  (void)a, (void)b;
  return false;
#endif
}

/* The pool whose export fd carries (c->mu held). */
static int pool_get(fzd_ipc_cache *c, int fd, const char *side, fzd_job *job, pool_entry **out) {
  for (unsigned i = 0; i < POOL_ENTRIES; i++)
    if (c->pools[i].pool != NULL && c->pools[i].fd >= 0 && same_file(c->pools[i].fd, fd)) {
      *out = &c->pools[i];
      return 0;
    }
  char why[200];
  fz_gpu_mempool p = NULL;
  int err = fz_gpu_pool_import(c->g->ctx, fd, &p, why, sizeof why);
  if (err < 0) {
    snprintf(job->why, sizeof(job->why), "%s_pool_fd: %s", side, why);
    return err;
  }
  pool_entry *slot = NULL;
  for (unsigned i = 0; i < POOL_ENTRIES; i++) {
    pool_entry *x = &c->pools[i];
    if (x->pool == p) { /* the driver handed back a pool already imported */
      *out = x;
      return 0;
    }
    if (x->pool == NULL && slot == NULL)
      slot = x;
  }
  if (slot == NULL) {
    fz_gpu_pool_close(c->g->ctx, p);
    snprintf(job->why, sizeof(job->why),
             "%s_pool_fd: %d memory pools of this connection are in use at once", side,
             POOL_ENTRIES);
    return FZ_EBUSY;
  }
  slot->pool = p;
  slot->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  slot->users = 0;
  *out = slot;
  return 0;
}

static const char *kind_key(enum fzd_mem_kind k) {
  return k == FZD_MEM_VMM ? "vmm_fd" : k == FZD_MEM_POOL ? "pool_ptr" : "ipc";
}

/* Whether an open entry was imported for the buffer d names.  An entry of
 * the same export bytes but another buffer_id is stale: the client freed
 * that allocation and the bytes now name a new one. */
static bool entry_matches(const ipc_entry *x, const fzd_devbuf *d, bool *stale) {
  *stale = false;
  if (x->kind != d->kind)
    return false;
  bool same_id = x->has_buffer_id == d->has_buffer_id && x->buffer_id == d->buffer_id;
  if (d->kind == FZD_MEM_VMM)
    return d->has_buffer_id && same_id && x->vmm_size == d->vmm_size;
  if (memcmp(x->key, d->handle, FZD_IPC_HANDLE_BYTES) != 0)
    return false;
  *stale = !same_id;
  return same_id;
}

/* Imports (or finds) the allocation d names and checks that [off, off + len)
 * lies inside its real size; *ent is held until ipc_release(). */
static int ipc_acquire(fzd_ipc_cache *c, const fzd_devbuf *d, uint64_t off, uint64_t len,
                       const char *side, fzd_job *job, void **d_ptr, ipc_entry **ent) {
  int err = 0;
  pthread_mutex_lock(&c->mu);
  ipc_entry *e = NULL, *victim = NULL;
  for (unsigned i = 0; i < IPC_CACHE_ENTRIES && e == NULL; i++) {
    ipc_entry *x = &c->e[i];
    bool stale = false;
    if (x->open && !x->doomed && entry_matches(x, d, &stale)) {
      e = x;
      break;
    }
    if (stale) {
      if (x->refs == 0)
        entry_close(c, x);
      else
        x->doomed = true;
    }
    if (x->refs == 0 && (victim == NULL || !x->open || (victim->open && x->used < victim->used)))
      victim = x;
  }
  if (e == NULL) {
    if (victim == NULL) {
      snprintf(job->why, sizeof(job->why),
               "%d device buffers of this connection are in use at once", IPC_CACHE_ENTRIES);
      err = FZ_EBUSY;
      goto out;
    }
    if (victim->open)
      entry_close(c, victim);
    fz_gpu_mapping m;
    pool_entry *pool = NULL;
    char why[200] = "";
    switch (d->kind) {
    case FZD_MEM_IPC: err = fz_gpu_import_ipc(c->g->ctx, d->handle, &m, why, sizeof why); break;
    case FZD_MEM_VMM:
      err = fz_gpu_import_vmm(c->g->ctx, job->fds[d->fd], (size_t)d->vmm_size, &m, why, sizeof why);
      break;
    case FZD_MEM_POOL:
      err = pool_get(c, job->fds[d->fd], side, job, &pool);
      if (err < 0)
        goto out;
      err = fz_gpu_import_pool_ptr(c->g->ctx, pool->pool, d->handle, &m, why, sizeof why);
      if (err < 0 && pool->users == 0)
        pool_close(c, pool);
      break;
    default: err = FZ_EINVAL; snprintf(why, sizeof why, "no device buffer");
    }
    if (err < 0) {
      snprintf(job->why, sizeof(job->why), "%s_%s: %s", side, kind_key(d->kind), why);
      goto out;
    }
    e = victim;
    memset(e, 0, sizeof *e);
    e->kind = d->kind;
    if (d->kind != FZD_MEM_VMM)
      memcpy(e->key, d->handle, FZD_IPC_HANDLE_BYTES);
    e->vmm_size = d->vmm_size;
    e->buffer_id = d->buffer_id;
    e->has_buffer_id = d->has_buffer_id;
    e->map = m;
    e->pool = pool;
    if (pool != NULL)
      pool->users++;
    e->open = true;
    /* Without buffer_id nothing tells a later VMM job's allocation from
     * this one: the import serves this job only. */
    e->doomed = d->kind == FZD_MEM_VMM && !d->has_buffer_id;
  }
  e->used = ++c->tick;
  if (off > e->map.size || len > e->map.size - off) {
    snprintf(job->why, sizeof(job->why),
             "%s_offset + %s_length (%llu + %llu) is past the end of the %s "
             "allocation (%zu bytes)",
             side, side, (unsigned long long)off, (unsigned long long)len,
             d->kind == FZD_MEM_VMM    ? "VMM"
             : d->kind == FZD_MEM_POOL ? "pool"
                                       : "IPC",
             e->map.size);
    if (e->doomed && e->refs == 0)
      entry_close(c, e);
    err = FZ_ESIZE;
    goto out;
  }
  e->refs++;
  *ent = e;
  *d_ptr = (char *)e->map.base + off;
out:
  pthread_mutex_unlock(&c->mu);
  return err;
}

static void ipc_release(fzd_ipc_cache *c, ipc_entry *e) {
  if (e == NULL)
    return;
  pthread_mutex_lock(&c->mu);
  if (--e->refs == 0 && e->doomed)
    entry_close(c, e);
  pthread_mutex_unlock(&c->mu);
}

/* Opens (or finds) the event a handle names; held until event_release(). */
static int event_acquire(fzd_ipc_cache *c, const unsigned char *key, const char *name, fzd_job *job,
                         event_entry **out) {
  int err = 0;
  pthread_mutex_lock(&c->mu);
  event_entry *v = NULL, *victim = NULL;
  for (unsigned i = 0; i < EVENT_ENTRIES; i++) {
    event_entry *x = &c->ev[i];
    if (x->open && !x->doomed && memcmp(x->key, key, FZD_IPC_HANDLE_BYTES) == 0) {
      v = x;
      break;
    }
    if (x->refs == 0 && (victim == NULL || !x->open || (victim->open && x->used < victim->used)))
      victim = x;
  }
  if (v == NULL) {
    if (victim == NULL) {
      snprintf(job->why, sizeof(job->why), "%d events of this connection are in use at once",
               EVENT_ENTRIES);
      err = FZ_EBUSY;
      goto out;
    }
    if (victim->open)
      event_close(c, victim);
    char why[200];
    fz_gpu_event ev = NULL;
    err = fz_gpu_event_open(c->g->ctx, key, &ev, why, sizeof why);
    if (err < 0) {
      snprintf(job->why, sizeof(job->why), "%s: %s", name, why);
      goto out;
    }
    v = victim;
    memcpy(v->key, key, FZD_IPC_HANDLE_BYTES);
    v->ev = ev;
    v->open = true;
    v->doomed = false;
  }
  v->used = ++c->tick;
  v->refs++;
  *out = v;
out:
  pthread_mutex_unlock(&c->mu);
  return err;
}

static void event_release(fzd_ipc_cache *c, event_entry *v) {
  if (v == NULL)
    return;
  pthread_mutex_lock(&c->mu);
  if (--v->refs == 0 && v->doomed)
    event_close(c, v);
  pthread_mutex_unlock(&c->mu);
}

/* ---- jobs ---------------------------------------------------------------------- */

/* After a compression: decompresses the archive on the GPU and compares it
 * on the host with the input (fetched back when it came by IPC). */
static int verify(fzd_gpu_worker *w, fzd_job *job, const void *d_arc, size_t arc_len,
                  const void *d_in) {
  size_t n = job->in_len, back_len = 0;
  int err = dev_ensure(w, &w->d_back, n, job);
  if (err < 0)
    return err;
  if ((err = host_ensure(w, &w->h_back, n, job)) < 0)
    return err;
  err = fz_gpu_decoder_open(w->dec, d_arc, arc_len, NULL, w->stream, job->why, sizeof(job->why));
  jit_log_failures(w->g);
  if (err == 0)
    err = fz_gpu_decoder_run(w->dec, w->d_back.p, n, &back_len, w->stream, job->why,
                             sizeof(job->why));
  if (err < 0)
    return err;
  if ((err = gpu_copy(w, job, w->h_back.p, w->d_back.p, n, "copying the decompressed data back")) <
      0)
    goto out;
  if (job->in_ipc) {
    if ((err = host_ensure(w, &w->h_in, n, job)) < 0)
      goto out;
    if ((err = gpu_copy(w, job, w->h_in.p, d_in, n, "copying the input back")) < 0)
      goto out;
  }
  if ((err = gpu_sync(w, job, "verification")) < 0)
    goto out;
  fz_compare_result cmp;
  err = fz_compare(job->params.dtype, w->h_in.p, w->h_back.p, n / fz_dtype_size(job->params.dtype),
                   &cmp);
  if (err < 0) {
    snprintf(job->why, sizeof(job->why), "verification failed: %s", fz_strerror(err));
    goto out;
  }
  job->max_error = cmp.max_abs_error;
  job->max_rel_error = cmp.max_rel_error;
  job->has_max_error = true;
out:
  return err;
}

/* The end of a job on IPC buffers: after a failure, wait for whatever still
 * runs on the worker's stream (nothing may run on an IPC buffer once it is
 * released), then release the job's two entries. */
static int job_end(fzd_gpu_worker *w, fzd_job *job, ipc_entry *ein, ipc_entry *eout, int err) {
  if (err < 0) {
    gpu_sync(w, NULL, NULL);
  }
  ipc_release(job->ipc, ein);
  ipc_release(job->ipc, eout);
  return err;
}

/* ---- what the kernels do not do: the CPU engine on the worker --------------- */

/* CPU threads of one fallback job. */
#define FALLBACK_THREADS 4

/* Delivers len bytes of host memory as the job's output: into the client's
 * device buffer (checked against out_length first), inline or to out_fd. */
static int fallback_deliver(fzd_gpu_worker *w, fzd_job *job, const void *h, size_t len,
                            const char *what) {
  if (!job->out_ipc)
    return fzd_job_deliver_copy(job, h, len);
  if (len > job->out_cap) {
    snprintf(job->why, sizeof(job->why), "the %s needs %zu bytes; out_length is %llu", what, len,
             (unsigned long long)job->out_cap);
    return FZ_ENOSPC;
  }
  void *d_out;
  ipc_entry *e = NULL;
  int err =
      ipc_acquire(job->ipc, &job->out_dev, job->out_off, job->out_cap, "out", job, &d_out, &e);
  if (err == 0) {
    if ((err = gpu_copy(w, job, d_out, h, len, "copying the result to out_ipc")) < 0)
      goto out;
    if ((err = gpu_sync(w, job, "copying the result to out_ipc")) < 0)
      goto out;
    job->out_len = len;
  }
out:
  return job_end(w, job, NULL, e, err);
}

/* The job's input in host memory (w->h_in): fetched from the client's
 * device buffer, read from its descriptor or copied from the message. */
static int fallback_input(fzd_gpu_worker *w, fzd_job *job) {
  int err = host_ensure(w, &w->h_in, job->in_len, job);
  if (err < 0 || !job->in_ipc)
    return err < 0 ? err : fzd_job_read_into(job, w->h_in.p);
  void *d_in;
  ipc_entry *e = NULL;
  err = ipc_acquire(job->ipc, &job->in_dev, job->in_off, job->in_len, "in", job, &d_in, &e);
  if (err == 0) {
    if ((err = gpu_copy(w, job, w->h_in.p, d_in, job->in_len, "copying the input from in_ipc")) < 0)
      goto out;
    if ((err = gpu_sync(w, job, "copying the input from in_ipc")) < 0)
      goto out;
  }
out:
  return job_end(w, job, e, NULL, err);
}

/* A compression the kernels cannot do (FZ_ENOSYS: a fill value), by the
 * CPU engine as the CPU backend makes it (fzd_cpu_compress_buffer), in
 * the worker's pinned buffers, then delivered where the job asks. */
static int cpu_compress(fzd_gpu_worker *w, fzd_job *job) {
  job->why[0] = '\0';
  fz_params p = job->params;
  p.pipeline = job->pipeline[0] ? job->pipeline : NULL;
  p.threads = FALLBACK_THREADS;
  fz_plan *plan = NULL;
  int err = fz_plan_create(&p, &plan, job->why, sizeof(job->why));
  if (err < 0 || (err = fallback_input(w, job)) < 0)
    goto err_plan;
  size_t cap = fz_plan_compress_bound(plan), arc_len = 0;
  if ((err = host_ensure(w, &w->h_out, cap, job)) < 0 ||
      (job->verify && (err = host_ensure(w, &w->h_back, job->in_len, job)) < 0) ||
      (err = fzd_cpu_compress_buffer(job, plan, w->h_in.p, w->h_out.p, cap, &arc_len,
                                     job->verify ? w->h_back.p : NULL, FALLBACK_THREADS)) < 0)
    goto err_plan;
  /* The chain as the archive holds it, as the kernels' jobs report it. */
  fz_archive_info info;
  if ((err = fz_archive_inspect(w->h_out.p, arc_len, &info)) < 0)
    goto err_plan;
  snprintf(job->chain, sizeof(job->chain), "%s", info.chain);
  err = fallback_deliver(w, job, w->h_out.p, arc_len, "archive");
err_plan:
  fz_plan_destroy(plan);
  return err;
}

/* A decompression the kernels cannot do, by the CPU engine; the archive is
 * in w->h_in already when it came from the host (gpu_decompress staged it
 * there), else fetched from the client's device buffer. */
static int cpu_decompress(fzd_gpu_worker *w, fzd_job *job, bool staged) {
  int err = staged ? 0 : fallback_input(w, job);
  fz_archive_info *info = &job->info;
  if (err < 0 || (err = fz_archive_inspect(w->h_in.p, job->in_len, info)) < 0)
    return err;
  size_t raw = (size_t)info->raw_bytes, out_len = 0;
  uint64_t limit = job->out_ipc      ? job->out_cap
                   : job->out_fd < 0 ? job->max_inline
                                     : job->max_output;
  if (info->raw_bytes > limit) {
    snprintf(job->why, sizeof(job->why),
             "the decompressed data needs %zu bytes; the limit "
             "is %llu",
             raw, (unsigned long long)limit);
    return job->out_ipc ? FZ_ENOSPC : FZ_EMSGSIZE;
  }
  if ((err = host_ensure(w, &w->h_out, raw, job)) < 0)
    return err;
  uint64_t t0 = fzd_notify_monotonic_usec();
  err = fz_decompress(w->h_in.p, job->in_len, w->h_out.p, raw, &out_len, FALLBACK_THREADS);
  job->time_us = fzd_notify_monotonic_usec() - t0;
  return err < 0 ? err : fallback_deliver(w, job, w->h_out.p, out_len, "decompressed data");
}

/* Compression.  Into a client's device buffer of at least the plan's
 * bound, the kernels write the archive in place and the one wait of
 * fz_gpu_compress() brings back all the reply needs (size, bound; the chain
 * is the plan's): no byte of the archive crosses to the host.  A smaller
 * client buffer gets the archive from the worker's own device buffer only
 * when it fits, so a refused job leaves the client's memory untouched. */
static int gpu_compress(fzd_gpu_worker *w, fzd_job *job) {
  ipc_entry *ein = NULL, *eout = NULL;
  fz_gpu_plan *plan;
  int err = get_plan(w, job, &plan);
  if (err == FZ_ENOSYS)
    return cpu_compress(w, job);
  if (err < 0)
    return err;
  uint64_t t0 = fzd_notify_monotonic_usec();
  void *d_in, *d_out, *d_client = NULL;
  if (job->in_ipc) {
    err = ipc_acquire(job->ipc, &job->in_dev, job->in_off, job->in_len, "in", job, &d_in, &ein);
    if (err < 0)
      goto out;
  } else {
    if ((err = host_ensure(w, &w->h_in, job->in_len, job)) < 0 ||
        (err = fzd_job_read_into(job, w->h_in.p)) < 0 ||
        (err = dev_ensure(w, &w->d_in, job->in_len, job)) < 0)
      goto out;
    free(job->in_data); /* the staging copy is all that is needed now */
    job->in_data = NULL;
    t0 = fzd_notify_monotonic_usec();
    if ((err = gpu_copy(w, job, w->d_in.p, w->h_in.p, job->in_len,
                        "copying the input to the GPU")) < 0)
      goto out;
    d_in = w->d_in.p;
  }
  size_t bound = fz_gpu_plan_compress_bound(plan), cap = bound;
  if (job->out_ipc) {
    err = ipc_acquire(job->ipc, &job->out_dev, job->out_off, job->out_cap, "out", job, &d_client,
                      &eout);
    if (err < 0)
      goto out;
  }
  if (d_client != NULL && job->out_cap >= bound) {
    d_out = d_client;
    cap = (size_t)job->out_cap;
  } else {
    if ((err = dev_ensure(w, &w->d_out, bound, job)) < 0)
      goto out;
    d_out = w->d_out.p;
  }
  size_t arc_len = 0;
  err = fz_gpu_compress(plan, d_in, job->in_len, d_out, cap, &arc_len, w->stream, job->why,
                        sizeof(job->why));
  if (err < 0)
    goto out;
  job->eb_abs = fz_gpu_plan_eb_abs(plan);
  snprintf(job->chain, sizeof(job->chain), "%s", fz_gpu_plan_chain(plan));
  if (d_client != NULL && d_out != d_client) {
    if (arc_len > job->out_cap) {
      snprintf(job->why, sizeof(job->why), "the archive needs %zu bytes; out_length is %llu",
               arc_len, (unsigned long long)job->out_cap);
      err = FZ_ENOSPC;
      goto out;
    }
    if ((err = gpu_copy(w, job, d_client, d_out, arc_len, "copying the archive to out_ipc")) < 0)
      goto out;
    d_out = d_client;
  }
  if (job->verify && (err = verify(w, job, d_out, arc_len, d_in)) < 0)
    goto out;
  if (job->out_ipc) {
    if (!job->verify)
      if ((err = gpu_sync(w, job, "copying the archive to out_ipc")) < 0)
        goto out;
    job->time_us = fzd_notify_monotonic_usec() - t0;
    job->out_len = arc_len;
    goto out;
  }
  if ((err = host_ensure(w, &w->h_out, arc_len, job)) < 0)
    goto out;
  if ((err = gpu_copy(w, job, w->h_out.p, d_out, arc_len, "copying the archive back")) < 0)
    goto out;
  if ((err = gpu_sync(w, job, "copying the archive back")) < 0)
    goto out;
  job->time_us = fzd_notify_monotonic_usec() - t0;
  err = fzd_job_deliver_copy(job, w->h_out.p, arc_len);
out:
  return job_end(w, job, ein, eout, err);
}

/* A client's device buffer too small for the decompressed data. */
static int out_too_small(fzd_job *job, uint64_t raw) {
  snprintf(job->why, sizeof(job->why), "the decompressed data needs %llu bytes; out_length is %llu",
           (unsigned long long)raw, (unsigned long long)job->out_cap);
  return FZ_ENOSPC;
}

/* A decompression from a client's device buffer into another: one call of
 * the decoder (fz_gpu_decoder_decompress).  Where the archive is one the
 * GPU kernels do not decode, the CPU engine does, as in gpu_decompress. */
static int ipc_to_ipc_decompress(fzd_gpu_worker *w, fzd_job *job, void *d_arc, ipc_entry *ein,
                                 uint64_t t0) {
  ipc_entry *eout = NULL;
  void *d_out;
  size_t out_len = 0;
  int err =
      ipc_acquire(job->ipc, &job->out_dev, job->out_off, job->out_cap, "out", job, &d_out, &eout);
  if (err < 0)
    goto out;
  err = fz_gpu_decoder_decompress(w->dec, d_arc, job->in_len, d_out, (size_t)job->out_cap, &out_len,
                                  &job->info, w->stream, job->why, sizeof(job->why));
  jit_log_failures(w->g);
  if (err == FZ_ENOSYS) {
    job_end(w, job, ein, eout, 0);
    job->why[0] = '\0';
    return cpu_decompress(w, job, false);
  }
  if (err == FZ_ENOSPC)
    err = out_too_small(job, job->info.raw_bytes);
  if (err < 0)
    goto out;
  job->time_us = fzd_notify_monotonic_usec() - t0;
  job->out_len = out_len;
out:
  return job_end(w, job, ein, eout, err);
}

/* Decompression.  The decoder reads the header's prefix off the archive
 * wherever it is (one small copy), which says the raw size before any
 * output is chosen; an archive in a client's device buffer never crosses to
 * the host, and nothing is written to a client's buffer that is too small.
 * Into a client's device buffer, whose size the job gives, the decoder
 * takes both steps in one call, which waits once for an archive of the
 * series its last ones belong to; so does an output to the host, whose
 * size the series gives. */
static int gpu_decompress(fzd_gpu_worker *w, fzd_job *job) {
  ipc_entry *ein = NULL, *eout = NULL;
  fz_archive_info *info = &job->info;
  uint64_t t0 = fzd_notify_monotonic_usec();
  void *d_arc, *d_out;
  int err = 0;
  if (job->in_ipc) {
    err = ipc_acquire(job->ipc, &job->in_dev, job->in_off, job->in_len, "in", job, &d_arc, &ein);
    if (err < 0)
      goto out;
    if (job->out_ipc)
      return ipc_to_ipc_decompress(w, job, d_arc, ein, t0);
  } else {
    if ((err = host_ensure(w, &w->h_in, job->in_len, job)) < 0 ||
        (err = fzd_job_read_into(job, w->h_in.p)) < 0 ||
        (err = dev_ensure(w, &w->d_in, job->in_len, job)) < 0)
      goto out;
    free(job->in_data);
    job->in_data = NULL;
    if ((err = gpu_copy(w, job, w->d_in.p, w->h_in.p, job->in_len,
                        "copying the archive to the GPU")) < 0)
      goto out;
    d_arc = w->d_in.p;
  }
  /* Output to the host, from an archive of the decoder's series: the raw
   * size is the series', so the output buffers are ready before the
   * decode, and the copy back joins its one wait.  An archive that turns
   * out larger (another shape) takes the two steps below. */
  size_t guess = job->out_ipc ? 0 : fz_gpu_decoder_series_bytes(w->dec);
  uint64_t host_limit = job->out_fd < 0 ? job->max_inline : job->max_output;
  if (guess > 0 && guess <= host_limit) {
    size_t out_len = 0;
    if ((err = dev_ensure(w, &w->d_out, guess, job)) < 0 ||
        (err = host_ensure(w, &w->h_out, guess, job)) < 0)
      goto out;
    err = fz_gpu_decoder_decompress_host(w->dec, d_arc, job->in_len, w->d_out.p, guess, w->h_out.p,
                                         &out_len, info, w->stream, job->why, sizeof(job->why));
    jit_log_failures(w->g);
    if (err == 0) {
      job->time_us = fzd_notify_monotonic_usec() - t0;
      err = fzd_job_deliver_copy(job, w->h_out.p, out_len);
      goto out;
    }
    if (err != FZ_ENOSPC && err != FZ_ENOSYS)
      goto out;
    job->why[0] = '\0';
  }
  err =
      fz_gpu_decoder_open(w->dec, d_arc, job->in_len, info, w->stream, job->why, sizeof(job->why));
  jit_log_failures(w->g);
  if (err == FZ_ENOSYS) {
    job_end(w, job, ein, NULL, 0);
    job->why[0] = '\0';
    return cpu_decompress(w, job, !job->in_ipc);
  }
  if (err < 0)
    goto out;
  size_t raw = (size_t)info->raw_bytes, cap = raw;
  if (job->out_ipc) {
    if (raw > job->out_cap) {
      err = out_too_small(job, raw);
      goto out;
    }
    cap = (size_t)job->out_cap;
    err =
        ipc_acquire(job->ipc, &job->out_dev, job->out_off, job->out_cap, "out", job, &d_out, &eout);
    if (err < 0)
      goto out;
  } else {
    if (info->raw_bytes > host_limit) {
      snprintf(job->why, sizeof(job->why),
               "decompressed size %llu exceeds the limit of %llu bytes%s",
               (unsigned long long)info->raw_bytes, (unsigned long long)host_limit,
               job->out_fd < 0 ? " for inline results; pass out_fd" : "");
      err = FZ_EMSGSIZE;
      goto out;
    }
    if ((err = dev_ensure(w, &w->d_out, raw, job)) < 0 ||
        (err = host_ensure(w, &w->h_out, raw, job)) < 0)
      goto out;
    d_out = w->d_out.p;
  }
  size_t out_len = 0;
  err = fz_gpu_decoder_run(w->dec, d_out, cap, &out_len, w->stream, job->why, sizeof(job->why));
  if (err < 0)
    goto out;
  if (job->out_ipc) {
    job->time_us = fzd_notify_monotonic_usec() - t0;
    job->out_len = out_len;
    goto out;
  }
  if ((err = gpu_copy(w, job, w->h_out.p, d_out, out_len, "copying the data back")) < 0)
    goto out;
  if ((err = gpu_sync(w, job, "decompression")) < 0)
    goto out;
  job->time_us = fzd_notify_monotonic_usec() - t0;
  err = fzd_job_deliver_copy(job, w->h_out.p, out_len);
out:
  return job_end(w, job, ein, eout, err);
}

static int gpu_run(fzd_gpu_worker *w, fzd_job *job) {
  int err = 0;
  event_entry *wait = NULL, *done = NULL;
  if ((job->in_ipc || job->out_ipc || job->has_wait_event || job->has_done_event) &&
      job->ipc == NULL) {
    snprintf(job->why, sizeof(job->why), "no memory for the connection's IPC cache");
    return FZ_ENOMEM;
  }
  if (job->has_wait_event) {
    /* The client recorded it after the work that writes the input: nothing
     * of this job touches its memory before that work is done. */
    if ((err = event_acquire(job->ipc, job->wait_event, "wait_event", job, &wait)) < 0 ||
        (err = fz_gpu_stream_wait_event(w->stream, wait->ev, job->why, sizeof(job->why))) < 0)
      goto out;
  }
  if (job->has_done_event &&
      (err = event_acquire(job->ipc, job->done_event, "done_event", job, &done)) < 0)
    goto out;
  err = job->kind == FZD_JOB_COMPRESS ? gpu_compress(w, job) : gpu_decompress(w, job);
  fzd_plans_put(w->g->plans, w->slot);
  w->slot = NULL;
  if (err == FZ_EGPUOOM)
    trim_after_oom(w, job);
  /* Every path of a job ends with its stream waited for, so the output is
   * written (or the job failed) when the event completes; it is recorded,
   * and waited for, before the reply leaves: when the reply arrives the
   * event is complete, and a client that waits on it waits for nothing
   * more. */
  if (done != NULL) {
    char why[sizeof(job->why)];
    int rerr = fz_gpu_event_record(done->ev, w->stream, why, sizeof why);
    if (rerr == 0)
      rerr = fz_gpu_sync(w->g->ctx, w->stream, why, sizeof why);
    if (rerr < 0 && err >= 0) {
      snprintf(job->why, sizeof(job->why), "%s", why);
      err = rerr;
    }
  }
out:
  if (job->ipc != NULL) {
    event_release(job->ipc, wait);
    event_release(job->ipc, done);
  }
  return err;
}

/* ---- detector frames ----------------------------------------------------------- */

/* A GPU batch: at most FRAMES_BATCH frames whose chunks fit the decoder's
 * pinned staging (FRAMES_STAGING bytes, or one frame's largest chunk). */
#define FRAMES_BATCH 64
#define FRAMES_STAGING ((size_t)256 << 20)
/* With halves, a batch stops at FRAMES_PIPE bytes (unless its first chunk
 * alone is more), so that a request of many frames is read in pieces,
 * each while the GPU decodes the one before it. */
#define FRAMES_PIPE ((size_t)40 << 20)

static void frames_drop(fzd_gpu_worker *w) {
#ifdef FZD_HAVE_FRAMES
  if (w->frames == NULL)
    return;
  fz_frames_gpu_destroy(w->frames);
  mem_release(w->g, w->frames_bytes);
  w->frames = NULL;
  w->frames_bytes = 0;
#else
  (void)w;
#endif
}

#ifdef FZD_HAVE_FRAMES
/* The worker's decoder for the job's frames: the one it has when the
 * dtype, frame size and setup are the same, else a new one. */
static int frames_decoder(fzd_gpu_worker *w, fzd_job *job) {
  const struct fzd_frames_req *r = job->frames;
  const fzd_frames_setup *su = r->setup;
  uint64_t serial = su != NULL ? su->serial : 0;
  if (w->frames != NULL && w->frames_dtype == r->dtype && w->frames_npixels == r->npixels &&
      w->frames_serial == serial)
    return 0;
  frames_drop(w);
  fz_frames_csr csr = {0};
  fz_frames_params fp = fzd_frames_params_of(r, &csr);
  size_t esize = fz_dtype_size(r->dtype);
  size_t bound = fz_bslz4_bound(FZ_BSLZ4_LZ4, (size_t)r->npixels, esize, 0);
  fz_frames_gpu_params p = {.dtype = r->dtype,
                            .npixels = (size_t)r->npixels,
                            .codec = FZ_BSLZ4_LZ4,
                            .max_frames = FRAMES_BATCH,
                            .mask = fp.mask,
                            .csr = fp.csr,
                            .max_batch_bytes = bound > FRAMES_STAGING ? bound : FRAMES_STAGING,
                            .device = fz_gpu_ctx_device(w->g->ctx)};
  int err = fz_frames_gpu_create(&p, &w->frames, job->why, sizeof job->why);
  if (err < 0)
    return err;
  size_t bytes = fz_frames_gpu_device_bytes(w->frames);
  if ((err = mem_reserve(w->g, bytes, job->why, sizeof job->why)) < 0) {
    fz_frames_gpu_destroy(w->frames);
    w->frames = NULL;
    return err;
  }
  w->frames_bytes = bytes;
  w->frames_dtype = r->dtype;
  w->frames_npixels = r->npixels;
  w->frames_serial = serial;
  return 0;
}

/* Scratch for one frame's whole list, of which a top_n request keeps the
 * top_n (the GPU lists every pixel above the cut). */
typedef struct frames_top {
  uint8_t *values;
  uint32_t *indices;
  uint64_t *keys;
  size_t cap;
} frames_top;

/* Frame j of the last batch, request frame i, of a top_n request: its
 * whole list of count pixels taken into scratch, and the top_n the CPU
 * engine would keep (fz_frames_top) into the frame's result. */
static int frames_take_top(fzd_gpu_worker *w, fzd_job *job, size_t j, size_t i, size_t count,
                           frames_top *t) {
  struct fzd_frames_req *r = job->frames;
  if (count > t->cap) {
    free(t->values), free(t->indices), free(t->keys);
    t->values = malloc(count * r->esize);
    t->indices = malloc(count * sizeof *t->indices);
    t->keys = malloc(count * sizeof *t->keys);
    t->cap = t->values && t->indices && t->keys ? count : 0;
    if (t->cap == 0) {
      fzd_frames_fail(r, i, FZ_ENOMEM, "no memory for a frame's list on the host");
      return 0;
    }
  }
  size_t listed = count < r->top_n ? count : (size_t)r->top_n;
  if (fzd_frames_open(r, i, count, listed) < 0)
    return 0;
  fzd_frame_result *x = &r->res[i];
  int err = fz_frames_gpu_take(w->frames, j, t->values, t->indices, NULL, x->powder,
                               (fz_frames_gpu_stream)w->stream, job->why, sizeof job->why);
  if (err < 0 || listed == 0)
    return err;
  fz_frames_top(r->dtype, t->values, t->indices, count, (size_t)r->top_n, t->keys);
  memcpy(x->values, t->values, listed * r->esize);
  memcpy(x->indices, t->indices, listed * sizeof *t->indices);
  return 0;
}

/* The host chunks of a request's batches, read into the decoder's pinned
 * staging, each chunk sent on to the device (fz_frames_gpu_send) by the
 * thread that read it, so that a batch goes up while it is still read.
 * When a frame's largest chunk fits half of the staging, batches take the
 * halves in turn: the next batch is read and sent up while the current
 * one decodes. */
typedef struct frames_feed {
  fzd_job *job;
  fz_frames_gpu *g;
  uint8_t *stage;
  size_t room; /* bytes a batch may take: the staging, or half of it */
  bool halves;
  int side; /* the current batch's half */
  uint64_t offs[2][FRAMES_BATCH], lens[2][FRAMES_BATCH];
  size_t next, k_next; /* the batch being read ahead: its first chunk and size (0: none) */
  fzd_frames_reader rd;
} frames_feed;

static uint8_t *feed_base(const frames_feed *f, int side) {
  return f->stage + (size_t)side * f->room;
}

/* The chunks from i that fit one batch in half `side`, placed one after
 * another; returns how many. */
static size_t feed_plan(frames_feed *f, size_t i, int side) {
  const struct fzd_frames_req *r = f->job->frames;
  size_t k = 0, pipe = f->halves && f->room > FRAMES_PIPE ? FRAMES_PIPE : f->room;
  uint64_t at = 0;
  for (; i + k < r->n && k < FRAMES_BATCH && r->lengths[i + k] <= f->room - at &&
         (k == 0 || at + r->lengths[i + k] <= pipe);
       k++) {
    f->offs[side][k] = at;
    f->lens[side][k] = r->lengths[i + k];
    at += r->lengths[i + k];
  }
  return k;
}

/* fzd_frames_reader's on_read: a chunk just read goes up. */
static int feed_send(void *arg, const uint8_t *p, size_t len) {
  frames_feed *f = arg;
  char why[160];
  return fz_frames_gpu_send(f->g, p, len, why, sizeof why);
}

/* The reading of the k chunks in half `side` waited for; returns 0 or its
 * error, and whether the whole batch went up.  The copies queued are
 * marked even when some failed, so that the next run waits for them. */
static int feed_wait(frames_feed *f, int side, size_t k, bool *sent) {
  int err = fzd_frames_read_wait(f->job, &f->rd);
  bool whole = err == 0 && k != 0 && f->rd.all_sent;
  size_t len = whole ? f->offs[side][k - 1] + f->lens[side][k - 1] : 0;
  char why[160];
  *sent = fz_frames_gpu_sent(f->g, feed_base(f, side), len, why, sizeof why) == 0 && whole;
  return err;
}

/* Waits for a batch still being read ahead (its error, if any, dropped:
 * the job's own reason stays). */
static void feed_close(frames_feed *f) {
  if (f->k_next == 0)
    return;
  char why[sizeof f->job->why];
  bool sent;
  memcpy(why, f->job->why, sizeof why);
  feed_wait(f, !f->side, f->k_next, &sent);
  memcpy(f->job->why, why, sizeof why);
  f->k_next = 0;
}

/* The batch from chunk i, read and sent up, into b (*k chunks; 0 when
 * chunk i is longer than a batch may take), and the reading of the batch
 * after it started. */
static int feed_next(frames_feed *f, size_t i, fz_frames_gpu_batch *b, size_t *k) {
  const struct fzd_frames_req *r = f->job->frames;
  if (f->k_next != 0 && f->next == i) {
    f->side = !f->side;
    *k = f->k_next;
    f->k_next = 0;
  } else {
    feed_close(f);
    *k = feed_plan(f, i, f->side);
    fzd_frames_read_start(f->job, i, *k, feed_base(f, f->side), f->offs[f->side], &f->rd);
  }
  bool sent;
  int err = feed_wait(f, f->side, *k, &sent);
  if (err < 0)
    return err;
  b->prefetched = sent;
  b->base = feed_base(f, f->side);
  b->base_len = f->room;
  b->offsets = f->offs[f->side];
  b->lengths = f->lens[f->side];
  size_t after = i + *k;
  if (f->halves && *k != 0 && after < r->n) {
    size_t k2 = feed_plan(f, after, !f->side);
    if (k2 != 0) {
      fzd_frames_read_start(f->job, after, k2, feed_base(f, !f->side), f->offs[!f->side], &f->rd);
      f->next = after;
      f->k_next = k2;
    }
  }
  return 0;
}

/* Batches of LZ4 chunks on the GPU: each batch's chunks are read (from the
 * message or the descriptor) into the decoder's pinned staging, decoded
 * with the results kept on the device, and each frame's results copied
 * into arrays of exactly its size (with top_n, its whole list and then the
 * engine's selection).  zstd chunks are the CPU engine's
 * (fzd_frames_job_run), as fz_frames_gpu.h says. */
static int gpu_frames(fzd_gpu_worker *w, fzd_job *job) {
  struct fzd_frames_req *r = job->frames;
  if (r->codec != FZ_BSLZ4_LZ4) {
    if (job->in_ipc) {
      snprintf(job->why, sizeof job->why,
               "chunks in device memory are decoded on the GPU, which takes LZ4 chunks; "
               "send zstd chunks from host memory");
      return FZ_EINVAL;
    }
    return fzd_frames_job_run(job);
  }
  uint64_t t0 = uv_hrtime();
  bool top = r->top_n != 0 && !r->dense;
  /* top_n: one frame's whole list and its keys on the host. */
  uint64_t scratch = top ? r->npixels * (r->esize + sizeof(uint32_t) + sizeof(uint64_t)) : 0;
  int err = frames_decoder(w, job);
  if (err < 0 || (err = fzd_frames_start(job, false, scratch)) < 0)
    return err;
  /* Chunks in device memory are read where they are; the others go
   * through the decoder's pinned staging. */
  void *d_in = NULL;
  ipc_entry *ein = NULL;
  frames_feed feed = {.job = job, .g = w->frames, .rd = {.on_read = feed_send}};
  feed.rd.on_read_arg = &feed;
  if (job->in_ipc) {
    err = ipc_acquire(job->ipc, &job->in_dev, job->in_off, job->in_len, "in", job, &d_in, &ein);
  } else {
    size_t cap = 0, bound = fz_bslz4_bound(FZ_BSLZ4_LZ4, (size_t)r->npixels, r->esize, 0);
    feed.stage = fz_frames_gpu_staging(w->frames, &cap, job->why, sizeof job->why);
    if (feed.stage == NULL)
      err = FZ_ENOMEM;
    feed.halves = cap / 2 >= bound;
    feed.room = feed.halves ? cap / 2 : cap;
  }
  size_t counts[FRAMES_BATCH];
  int status[FRAMES_BATCH];
  fzd_frames_cpu cpu = {0};
  frames_top tops = {0};
  uint8_t *host = NULL;
  for (size_t i = 0; i < r->n && err == 0;) {
    size_t k = 0;
    fz_frames_gpu_batch b = {
        .cut = r->cut, .counts = counts, .status = status, .keep = 1, .keep_lists = !r->dense};
    if (d_in != NULL) {
      k = r->n - i < FRAMES_BATCH ? r->n - i : FRAMES_BATCH;
      b.base = d_in;
      b.base_len = job->in_len;
      b.base_on_device = 1;
      b.offsets = r->offsets + i;
      b.lengths = r->lengths + i;
    } else if ((err = feed_next(&feed, i, &b, &k)) < 0) {
      break;
    } else if (k == 0) {
      /* Longer than any LZ4 chunk of such a frame can be. */
      char why[128];
      snprintf(why, sizeof why, "chunk of %llu bytes, more than a frame's chunk can take (%zu)",
               (unsigned long long)r->lengths[i], feed.room);
      fzd_frames_fail(r, i, FZ_ECORRUPT, why);
      fzd_frames_emit(job, i++);
      continue;
    }
    b.nframes = k;
    int64_t failed = fz_frames_gpu_run(w->frames, &b, (fz_frames_gpu_stream)w->stream, job->why,
                                       sizeof job->why);
    if (failed < 0) {
      err = (int)failed;
      break;
    }
    for (size_t j = 0; j < k && err == 0; j++) {
      char why[128];
      if (status[j] == FZ_ENOSYS) {
        /* Blocks larger than the decoder takes: this frame on the CPU. */
        size_t len = (size_t)r->lengths[i + j];
        const uint8_t *chunk = b.base_on_device ? NULL : b.base + b.offsets[j];
        if (chunk == NULL) {
          uint8_t *grown = realloc(host, len + 1);
          if (grown == NULL) {
            fzd_frames_fail(r, i + j, FZ_ENOMEM, "no memory for the chunk on the host");
            fzd_frames_emit(job, i + j);
            continue;
          }
          host = grown;
          if ((err = gpu_copy(w, job, host, (const uint8_t *)d_in + r->offsets[i + j], len,
                              "copying a chunk from device memory")) < 0 ||
              (err = gpu_sync(w, job, "copying a chunk from device memory")) < 0)
            break;
          chunk = host;
        }
        int rc = cpu.f != NULL ? 0 : fzd_frames_cpu_open(r, &cpu, why, sizeof why);
        if (rc < 0)
          fzd_frames_fail(r, i + j, rc, why);
        else
          fzd_frames_cpu_frame(r, i + j, &cpu, chunk, len);
        fzd_frames_emit(job, i + j);
        continue;
      }
      if (status[j] < 0) {
        fz_frames_gpu_why(w->frames, j, why, sizeof why);
        fzd_frames_fail(r, i + j, status[j], why);
        fzd_frames_emit(job, i + j);
        continue;
      }
      size_t listed = r->dense ? (size_t)r->npixels : counts[j];
      fzd_frame_result *x = &r->res[i + j];
      if (top)
        err = frames_take_top(w, job, j, i + j, counts[j], &tops);
      else if (fzd_frames_open(r, i + j, listed, listed) == 0)
        err = fz_frames_gpu_take(w->frames, j, r->dense ? NULL : x->values, x->indices,
                                 r->dense ? x->values : NULL, x->powder,
                                 (fz_frames_gpu_stream)w->stream, job->why, sizeof job->why);
      if (err == 0)
        fzd_frames_emit(job, i + j);
    }
    i += k;
  }
  feed_close(&feed);
  if (ein != NULL)
    ipc_release(job->ipc, ein);
  fzd_frames_cpu_close(&cpu);
  free(tops.values), free(tops.indices), free(tops.keys);
  free(host);
  return err < 0 ? err : fzd_frames_end(job, t0);
}

/* A frames job's device output: each frame's results copied there from
 * the host as fzd_frames_emit takes them (tens of KB a frame). */
typedef struct frames_out {
  fzd_gpu_worker *w;
  void *d_out;
} frames_out;

static int frames_put(void *ctx, fzd_job *job, uint64_t off, const void *data, size_t len) {
  frames_out *o = ctx;
  const char *what = "copying a frame's results to the device output";
  int err = gpu_copy(o->w, job, (uint8_t *)o->d_out + off, data, len, what);
  return err < 0 ? err : gpu_sync(o->w, job, what);
}

/* A frames job, its device output (when it has one) imported for the run
 * and written through frames_put. */
static int frames_run(void *w, fzd_job *job) {
  frames_out out = {.w = w};
  ipc_entry *eout = NULL;
  int err = 0;
  if (job->out_ipc) {
    err = ipc_acquire(job->ipc, &job->out_dev, job->out_off, job->out_cap, "out", job, &out.d_out,
                      &eout);
    job->frames->put = frames_put;
    job->frames->put_ctx = &out;
  }
  if (err == 0)
    err = gpu_frames(w, job);
  job->frames->put = NULL;
  err = job_end(w, job, NULL, eout, err);
  if (err == FZ_EGPUOOM)
    trim_after_oom(w, job);
  return err;
}
#endif

/* ---- workers ------------------------------------------------------------------- */

static void worker_idle(void *arg) {
  fzd_gpu_worker *w = arg;
  gpu_sync(w, NULL, NULL);
  frames_drop(w);
  dev_drop(w, &w->d_in);
  dev_drop(w, &w->d_out);
  dev_drop(w, &w->d_back);
  host_drop(w, &w->h_in);
  host_drop(w, &w->h_out);
  host_drop(w, &w->h_back);
  gpu_sync(w, NULL, NULL);
  fz_gpu_ctx_trim(w->g->ctx);
}

static void worker_destroy(void *arg) {
  fzd_gpu_worker *w = arg;
  if (w == NULL)
    return;
  trim(w);
  host_drop(w, &w->h_in);
  host_drop(w, &w->h_out);
  host_drop(w, &w->h_back);
  fz_gpu_decoder_destroy(w->dec);
  frames_drop(w);
  free(w);
}

/* The warm-up job: a smooth field of WARMUP_ELEMS f32 values, REL 1e-3 with
 * the default pipeline. */
static fzd_job *warmup_job(enum fzd_job_kind kind, void *data, size_t len) {
  fzd_job *job = calloc(1, sizeof *job);
  if (job == NULL)
    return NULL;
  job->kind = kind;
  fz_params_init(&job->params);
  job->params.dtype = FZ_F32;
  job->params.ndims = 1;
  job->params.dims[0] = WARMUP_ELEMS;
  job->params.eb = 1e-3;
  job->params.eb_mode = FZ_EB_REL;
  job->in_fd = job->out_fd = -1;
  job->max_inline = job->max_output = UINT64_MAX;
  job->in_data = data;
  job->in_len = len;
  return job;
}

/* Runs a compression and a decompression through the job path (loading the
 * kernels, filling the buffers and the plan cache) and checks the archive
 * against the CPU engine's: a GPU that disagrees with the oracle must not
 * serve. */
static int warm_up(fzd_gpu_worker *w, char *why, size_t why_len) {
  size_t len = WARMUP_ELEMS * sizeof(float);
  float *field = malloc(len);
  fzd_job *c = warmup_job(FZD_JOB_COMPRESS, field, len), *d = NULL;
  fz_plan *cpu = NULL;
  void *cpu_arc = NULL;
  int err = FZ_ENOMEM;
  if (field == NULL || c == NULL) {
    free(field);
    goto out;
  }
  for (size_t i = 0; i < WARMUP_ELEMS; i++)
    field[i] = (float)(sin(0.001 * (double)i) * 100.0);
  fz_params p = c->params;
  if ((err = fz_plan_create(&p, &cpu, why, why_len)) < 0)
    goto out;
  size_t cap = fz_plan_compress_bound(cpu), cpu_len = 0;
  if ((cpu_arc = malloc(cap)) == NULL) {
    err = FZ_ENOMEM;
    goto out;
  }
  if ((err = fz_plan_compress(cpu, field, len, cpu_arc, cap, &cpu_len)) < 0)
    goto out;
  if ((err = gpu_run(w, c)) < 0) {
    snprintf(why, why_len, "warm-up compression: %s", c->why[0] ? c->why : fz_strerror(err));
    goto out;
  }
  size_t same = 0;
  while (same < c->out_len && same < cpu_len &&
         ((const unsigned char *)c->out_data)[same] == ((const unsigned char *)cpu_arc)[same])
    same++;
  if (c->out_len != cpu_len || same != cpu_len) {
    snprintf(why, why_len,
             "warm-up: the GPU archive (%zu bytes) differs from the CPU "
             "engine's (%zu bytes) from byte %zu on",
             c->out_len, cpu_len, same);
    err = FZ_ECORRUPT;
    goto out;
  }
  d = warmup_job(FZD_JOB_DECOMPRESS, c->out_data, c->out_len);
  if (d == NULL) {
    err = FZ_ENOMEM;
    goto out;
  }
  c->out_data = NULL;
  if ((err = gpu_run(w, d)) < 0) {
    snprintf(why, why_len, "warm-up decompression: %s", d->why[0] ? d->why : fz_strerror(err));
    goto out;
  }
  if (d->out_len != len) {
    snprintf(why, why_len, "warm-up: decompressed %zu bytes of %zu", d->out_len, len);
    err = FZ_ECORRUPT;
  }
out:
  fzd_job_free(c);
  fzd_job_free(d);
  fz_plan_destroy(cpu);
  free(cpu_arc);
  return err;
}

static int worker_create(void *state, unsigned index, void **out, char *why, size_t why_len) {
  fzd_gpu *g = state;
  *out = NULL;
  fzd_gpu_worker *w = calloc(1, sizeof *w);
  if (w == NULL)
    return FZ_ENOMEM;
  w->g = g;
  w->index = index;
  w->stream = fz_gpu_ctx_stream(g->ctx, index);
  /* A plan serves one job at a time: each worker adds the slot of the one
   * it uses to the shared cache. */
  int err = fzd_plans_add_slots(g->plans, 1);
  if (err < 0) {
    free(w);
    return err;
  }
  err = fz_gpu_decoder_create(g->ctx, &w->dec, why, why_len);
  if (err == 0)
    err = warm_up(w, why, why_len);
  if (err < 0) {
    worker_destroy(w);
    return err;
  }
  *out = w;
  return 0;
}

/* ---- the backend ------------------------------------------------------------ */

static int run(void *w, fzd_job *job) {
  return gpu_run(w, job);
}

/* The JIT settings reach the kernels' compiler before the workers are
 * made, since their warm-up compiles the first kernels.  A cache
 * directory that cannot be used leaves the modules in memory: a warning,
 * not a reason to stop serving. */
static int jit_setup(fzd_gpu *g) {
  char why[512] = "";
  int err = fz_gpu_ctx_jit_config(g->ctx, g->jit_cache_dir, g->jit_cache_max_bytes,
                                  g->jit ? FZ_GPU_JIT_ON : FZ_GPU_JIT_OFF, why, sizeof why);
  if (err < 0) {
    fzd_err("jit: %s", why);
    return err;
  }
  if (why[0] != '\0')
    fzd_warn("jit: %s", why);
  fzd_info("jit: %s, module cache %s%s, at most %llu bytes on disk", g->jit ? "on" : "off",
           g->jit_cache_dir[0] ? "in " : "in memory only", g->jit_cache_dir,
           (unsigned long long)g->jit_cache_max_bytes);
  jit_log_failures(g);
  return 0;
}

static void jit_counts(void *state, fzd_jit_counts *out) {
  fzd_gpu *g = state;
  fz_gpu_jit_counts k;
  fz_gpu_ctx_jit_counts(g->ctx, &k);
  *out = (fzd_jit_counts){.mem_hits = k.mem_hits,
                          .disk_hits = k.disk_hits,
                          .misses = k.misses,
                          .compiles = k.compiles,
                          .compile_failures = k.compile_failures,
                          .compile_ms = k.compile_us / 1000,
                          .disk_writes = k.disk_writes,
                          .disk_rejected = k.disk_rejected,
                          .disk_evicted = k.disk_evicted,
                          .disk_bytes = k.disk_bytes};
}

int fzd_gpu_backend(fzd_gpu *g, const fzd_gpu_settings *s, fzd_backend_ops *be) {
  g->jit = s->jit;
  snprintf(g->jit_cache_dir, sizeof g->jit_cache_dir, "%s",
           s->jit_cache_dir != NULL ? s->jit_cache_dir : "");
  g->jit_cache_max_bytes = s->jit_cache_max_bytes;
  int err = jit_setup(g);
  if (err < 0)
    return err;
  if (g->plans == NULL) {
    const fzd_plan_kind kind = {plan_create, plan_destroy, plan_bytes, g};
    if ((err = fzd_plans_create(&kind, s->plan_cache_bytes, &g->plans)) < 0)
      return err;
  }
  if ((err = fzd_plans_add_slots(g->plans, s->plan_cache_entries)) < 0)
    return err;
  /* Workers look at the queue before they sleep (pool.c) and give back
   * their staging and device buffers after a second without work. */
  *be = (fzd_backend_ops){.name = "GPU",
                          .state = g,
                          .worker_create = worker_create,
                          .worker_destroy = worker_destroy,
                          .run = run,
                          .idle = worker_idle,
                          .idle_ms = 1000,
                          .spin_us = 250,
                          .pin_cores = false,
                          .plans = g->plans,
                          .jit_counts = jit_counts,
                          .destroy = NULL};
#ifdef FZD_HAVE_FRAMES
  be->frames = frames_run;
#endif
  return 0;
}
