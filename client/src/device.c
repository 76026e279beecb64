/*
 * device.c - jobs on plain CUDA device pointers (fz_client_*_device).
 *
 * The caller hands over a device pointer and a length; the daemon needs the
 * allocation the pointer lies in, exported in a form another process can
 * import (docs/protocol.md): a legacy IPC handle for cudaMalloc memory, a
 * POSIX descriptor for cuMemCreate memory, or the pool's descriptor and the
 * pointer's export data for memory of an exportable pool, each with the
 * offset of the data in the allocation, the allocation's buffer id and the
 * GPU's UUID.  This file finds those with the driver API and caches the
 * exports per handle, keyed by the allocation's range and buffer id: the
 * buffer id is unique per allocation for the life of the process, so memory
 * freed and allocated again at the same address is exported anew and the old
 * entry is released on the daemon side.
 *
 * The library does not link CUDA.  The driver is loaded with dlopen() at the
 * first device call of the process (pthread_once) and the few functions used
 * here are resolved by name; their prototypes come from cuda.h at compile
 * time (__typeof__), so the versioned names the header maps them to
 * (cuCtxPushCurrent -> cuCtxPushCurrent_v2) are the ones looked up.
 *
 * Unlike the rest of the library these calls may run on one handle from many
 * threads.  A mutex of the handle (struct fzc_device) covers the cache, the
 * events and every use of the socket; a synchronous call submits its job,
 * then waits for its answer as a follower on a condition variable or as the
 * one thread that reads the socket (polling it without the lock, reading and
 * dispatching answers with it).  A thread that reads the socket's bytes
 * while sending under the lock kicks the reader through a pipe, so an answer
 * it buffered is never left waiting for the reader's poll to time out.
 *
 * With a stream, the caller's work is ordered before the daemon's reads by
 * an interprocess event recorded on the stream (wait_event), and, for the
 * synchronous calls, the stream after the daemon's writes by a second event
 * the daemon records (done_event).  Events come in pairs per context, each
 * pair busy until the daemon has answered the job that named it.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* ---- the driver, once per process ------------------------------------------ */

#define FZC_CU_LIB "libcuda.so.1"

#define FZC_CU_FUNCS(X)                                                        \
  X(cuInit)                                                                    \
  X(cuGetErrorName)                                                            \
  X(cuPointerGetAttributes)                                                    \
  X(cuMemGetAddressRange)                                                      \
  X(cuMemRetainAllocationHandle)                                               \
  X(cuMemExportToShareableHandle)                                              \
  X(cuMemRelease)                                                              \
  X(cuIpcGetMemHandle)                                                         \
  X(cuMemPoolExportToShareableHandle)                                          \
  X(cuMemPoolExportPointer)                                                    \
  X(cuDeviceGet)                                                               \
  X(cuDeviceGetUuid)                                                           \
  X(cuCtxGetCurrent)                                                           \
  X(cuCtxPushCurrent)                                                          \
  X(cuCtxPopCurrent)                                                           \
  X(cuDevicePrimaryCtxRetain)                                                  \
  X(cuDevicePrimaryCtxRelease)                                                 \
  X(cuStreamGetCtx)                                                            \
  X(cuStreamSynchronize)                                                       \
  X(cuStreamWaitEvent)                                                         \
  X(cuEventCreate)                                                             \
  X(cuEventDestroy)                                                            \
  X(cuEventRecord)                                                             \
  X(cuIpcGetEventHandle)

/* The argument is macro-expanded before it reaches STR_, so the versioned
 * name of the header is what dlsym() looks for. */
#define FZC_STR_(x) #x
#define FZC_STR(x) FZC_STR_(x)

static struct {
#define FZC_CU_FIELD(name) __typeof__(name) *name;
  FZC_CU_FUNCS(FZC_CU_FIELD)
#undef FZC_CU_FIELD
} cu;

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static int cu_status;      /* 0 once loaded and initialised */
static char cu_why[240];

static void cu_load(void) {
  void *h = dlopen(FZC_CU_LIB, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    cu_status = FZ_ENOGPU;
    snprintf(cu_why, sizeof cu_why,
             "device buffers need the CUDA driver, and " FZC_CU_LIB " cannot be loaded: %s",
             e ? e : "not found");
    return;
  }
  const char *missing = NULL;
  /* POSIX guarantees a function's address fits a void *; copying the bytes
   * keeps ISO C's object-to-function conversion out of it. */
#define FZC_CU_RESOLVE(name)                                                   \
  if (!missing) {                                                              \
    void *sym = dlsym(h, FZC_STR(name));                                       \
    if (sym)                                                                   \
      memcpy(&cu.name, &sym, sizeof sym);                                      \
    else                                                                       \
      missing = FZC_STR(name);                                                 \
  }
  FZC_CU_FUNCS(FZC_CU_RESOLVE)
#undef FZC_CU_RESOLVE
  if (missing) {
    cu_status = FZ_ENOGPU;
    snprintf(cu_why, sizeof cu_why,
             "the CUDA driver " FZC_CU_LIB " lacks %s: it is older than this library needs",
             missing);
    return; /* the library stays loaded: nothing else may have it half-resolved */
  }
  CUresult r = cu.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char *name = NULL;
    cu.cuGetErrorName(r, &name);
    cu_status = FZ_ENOGPU;
    snprintf(cu_why, sizeof cu_why, "the CUDA driver " FZC_CU_LIB " did not start: cuInit: %s",
             name ? name : "unknown error");
  }
}

static const char *cu_err(CUresult r) {
  const char *name = NULL;
  if (cu.cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)
    return "unknown CUDA error";
  return name;
}

/* ---- the handle's state ----------------------------------------------------- */

enum { KIND_IPC = 1, KIND_VMM = 2, KIND_POOL = 3 };

#define FZC_DEV_ALLOCS 64  /* exports cached per handle */
#define FZC_DEV_EVENTS 32  /* event pairs per handle: jobs with a stream in flight */
#define FZC_DEV_GPUS 64    /* device ordinals whose primary context we may retain */
#define FZC_UUID_LEN 48

/* One exported allocation. */
typedef struct dev_alloc {
  CUdeviceptr base;
  size_t size;
  uint64_t buffer_id;
  int ordinal;
  int kind;
  int fd;                               /* VMM or pool descriptor, else -1 */
  unsigned char blob[CU_IPC_HANDLE_SIZE]; /* IPC handle or pool export data */
  char uuid[FZC_UUID_LEN];
  uint64_t used;                        /* LRU tick of the last call using it */
} dev_alloc;

/* A pair of interprocess events in one context. */
typedef struct dev_events {
  CUcontext ctx;
  CUevent wait, done;
  CUipcEventHandle wait_h, done_h;
  bool busy;        /* taken by a call that holds the lock or waits */
  uint32_t msgid;   /* the asynchronous job naming it, 0: none */
} dev_events;

struct fzc_device {
  pthread_mutex_t mu;
  pthread_cond_t cv;      /* an answer was dispatched, or the reader left */
  bool reading;           /* a thread polls the socket without the lock */
  int kick[2];            /* wakes the reader; -1 until first needed */
  dev_alloc allocs[FZC_DEV_ALLOCS];
  size_t nallocs;
  uint64_t tick;
  dev_events events[FZC_DEV_EVENTS];
  size_t nevents;
  CUcontext primary[FZC_DEV_GPUS]; /* retained primary contexts, by ordinal */
  bool driver;            /* the driver was used on this handle */
};

int fzc_device_init(fz_client *c) {
  struct fzc_device *d = calloc(1, sizeof *d);
  if (!d)
    return FZ_ENOMEM;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int e1 = pthread_mutex_init(&d->mu, NULL);
  int e2 = pthread_cond_init(&d->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (e1 || e2) {
    if (!e1)
      pthread_mutex_destroy(&d->mu);
    if (!e2)
      pthread_cond_destroy(&d->cv);
    free(d);
    return FZ_ENOMEM;
  }
  d->kick[0] = d->kick[1] = -1;
  c->dev = d;
  return 0;
}

static void alloc_forget(dev_alloc *a) {
  if (a->fd >= 0)
    close(a->fd);
  a->fd = -1;
}

/* With the lock held, or from close. */
static void remove_alloc(struct fzc_device *d, size_t i) {
  alloc_forget(&d->allocs[i]);
  d->allocs[i] = d->allocs[--d->nallocs];
}

void fzc_device_free(fz_client *c) {
  struct fzc_device *d = c->dev;
  if (!d)
    return;
  /* The daemon drops this connection's imports when it closes, so only our
   * own exports and events are undone here. */
  while (d->nallocs)
    remove_alloc(d, d->nallocs - 1);
  if (d->driver) {
    for (size_t i = 0; i < d->nevents; i++) {
      dev_events *e = &d->events[i];
      /* Destroyed in their context; a context the program destroyed already
       * took them with it, and the error is of no use to anyone. */
      if (cu.cuCtxPushCurrent(e->ctx) == CUDA_SUCCESS) {
        cu.cuEventDestroy(e->wait);
        cu.cuEventDestroy(e->done);
        CUcontext popped;
        cu.cuCtxPopCurrent(&popped);
      }
    }
    for (int i = 0; i < FZC_DEV_GPUS; i++)
      if (d->primary[i]) {
        CUdevice dev;
        if (cu.cuDeviceGet(&dev, i) == CUDA_SUCCESS)
          cu.cuDevicePrimaryCtxRelease(dev);
      }
  }
  if (d->kick[0] >= 0) {
    close(d->kick[0]);
    close(d->kick[1]);
  }
  pthread_cond_destroy(&d->cv);
  pthread_mutex_destroy(&d->mu);
  free(d);
  c->dev = NULL;
}

/* ---- talking to the daemon, with the lock held ------------------------------ */

/* Wakes the thread polling the socket: bytes it waits for may have been read
 * into the receive buffer by someone else. */
static void kick_reader(struct fzc_device *d) {
  if (d->reading && d->kick[1] >= 0) {
    char b = 1;
    ssize_t n = write(d->kick[1], &b, 1);
    (void)n; /* a full pipe is already a kick */
  }
}

typedef struct release_args {
  const uint64_t *ids;
  size_t n;  /* 0: all */
} release_args;

static void pack_release(msgpack_packer *pk, const void *arg) {
  const release_args *r = arg;
  if (r->n == 0) {
    fzp_pack_key(pk, "all");
    msgpack_pack_true(pk);
    return;
  }
  fzp_pack_key(pk, "buffer_ids");
  msgpack_pack_array(pk, (uint32_t)r->n);
  for (size_t i = 0; i < r->n; i++)
    msgpack_pack_uint64(pk, r->ids[i]);
}

/* Asks the daemon to drop its imports of ids (n == 0: all of them).  A
 * daemon that predates the method answers FZ_EMETHOD: it keeps imports until
 * the connection closes, which is all it can do, so that is no failure. */
static int send_release(fz_client *c, struct fzc_device *d, const uint64_t *ids, size_t n) {
  if (c->transport != FZ_TRANSPORT_UNIX)
    return 0;
  release_args a = {.ids = ids, .n = n};
  fzp_message msg;
  int rc = fzc_call(c, "release", 1, pack_release, &a, &msg);
  /* fzc_call() may have dispatched answers other threads wait for. */
  pthread_cond_broadcast(&d->cv);
  kick_reader(d);
  if (rc == FZ_EMETHOD) {
    c->errmsg[0] = '\0';
    return 0;
  }
  if (rc < 0)
    return rc;
  fzp_message_free(&msg);
  return 0;
}

/* Whether the job of msgid is still waiting for the daemon's answer. */
static bool in_flight(const fz_client *c, uint32_t msgid) {
  for (size_t i = 0; i < c->njobs; i++)
    if (c->jobs[i].msgid == msgid)
      return !c->jobs[i].done;
  return false;
}

/* Takes the answered job msgid out of the table into *res; false while it
 * is not answered. */
static bool take_answer(fz_client *c, uint32_t msgid, fz_result *res) {
  for (size_t i = 0; i < c->njobs; i++) {
    if (c->jobs[i].msgid != msgid)
      continue;
    if (!c->jobs[i].done)
      return false;
    *res = c->jobs[i].res;
    memmove(&c->jobs[i], &c->jobs[i + 1], (c->njobs - i - 1) * sizeof c->jobs[0]);
    c->njobs--;
    if (res->data) {
      /* The output is in device memory; a daemon that sent bytes anyway
       * gets them dropped rather than handed over as if asked for. */
      free(res->data);
      res->data = NULL;
      res->data_len = 0;
    }
    return true;
  }
  return false;
}

/* Waits, lock held, for the answer of msgid: as the reader of the socket, or
 * as a follower of the thread that is.  Returns 1 with *res, or 0 when the
 * handle's time limit ran out (the job then stays for fz_client_wait()). */
static int await_answer(fz_client *c, struct fzc_device *d, uint32_t msgid, fz_result *res) {
  int64_t deadline = fzc_deadline(c->timeout_ms);
  for (;;) {
    if (take_answer(c, msgid, res))
      return 1;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t now_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    if (deadline >= 0 && now_ms >= deadline)
      return 0;
    if (d->reading) {
      if (deadline < 0) {
        pthread_cond_wait(&d->cv, &d->mu);
      } else {
        struct timespec ts = {.tv_sec = (time_t)(deadline / 1000),
                              .tv_nsec = (long)(deadline % 1000) * 1000000};
        pthread_cond_timedwait(&d->cv, &d->mu, &ts);
      }
      continue;
    }
    /* Take what is buffered or readable now; poll only when nothing is. */
    fzp_message msg;
    int rc = fzc_recv(c, 0, &msg);
    if (rc > 0) {
      fzc_dispatch(c, &msg);
      fzp_message_free(&msg);
      pthread_cond_broadcast(&d->cv);
      continue;
    }
    if (rc < 0) {
      /* fzc_break() completed every job with the error, ours too. */
      pthread_cond_broadcast(&d->cv);
      if (!take_answer(c, msgid, res)) {
        res->status = rc;
        snprintf(res->message, sizeof res->message, "%s", c->errmsg);
      }
      return 1;
    }
    d->reading = true;
    struct pollfd p[2] = {{.fd = c->fd, .events = POLLIN}, {.fd = d->kick[0], .events = POLLIN}};
    int ms = deadline < 0 ? -1 : (int)(deadline - now_ms);
    pthread_mutex_unlock(&d->mu);
    /* Looking without sleeping first leaves the kick unread: another
     * thread's bytes are taken on the next turn, after the lock. */
    int n = fzc_spin_readable(c->fd, c->spin_us, deadline) ? 0 : poll(p, 2, ms);
    if (n > 0 && (p[1].revents & POLLIN)) {
      char buf[64];
      while (read(d->kick[0], buf, sizeof buf) > 0) {
      }
    }
    pthread_mutex_lock(&d->mu);
    d->reading = false;
    pthread_cond_broadcast(&d->cv); /* someone else may take over reading */
  }
}

/* ---- contexts --------------------------------------------------------------- */

/* The primary context of device ordinal, retained once per handle. */
static int primary_ctx(fz_client *c, struct fzc_device *d, int ordinal, CUcontext *out) {
  if (ordinal < 0 || ordinal >= FZC_DEV_GPUS)
    return fzc_fail(c, FZ_EINVAL, "device ordinal %d is beyond the %d this library serves",
                    ordinal, FZC_DEV_GPUS);
  if (!d->primary[ordinal]) {
    CUdevice dev;
    CUresult r = cu.cuDeviceGet(&dev, ordinal);
    if (r == CUDA_SUCCESS)
      r = cu.cuDevicePrimaryCtxRetain(&d->primary[ordinal], dev);
    if (r != CUDA_SUCCESS) {
      d->primary[ordinal] = NULL;
      return fzc_fail(c, FZ_ECUDA, "cuDevicePrimaryCtxRetain(%d): %s", ordinal, cu_err(r));
    }
  }
  *out = d->primary[ordinal];
  return 0;
}

/* Makes want current on this thread (when it is not); *pushed says whether
 * ctx_leave() must pop it. */
static int ctx_enter(fz_client *c, CUcontext want, bool *pushed) {
  *pushed = false;
  CUcontext cur = NULL;
  cu.cuCtxGetCurrent(&cur);
  if (cur == want)
    return 0;
  CUresult r = cu.cuCtxPushCurrent(want);
  if (r != CUDA_SUCCESS)
    return fzc_fail(c, FZ_ECUDA, "cuCtxPushCurrent: %s", cu_err(r));
  *pushed = true;
  return 0;
}

static void ctx_leave(bool pushed) {
  if (pushed) {
    CUcontext popped;
    cu.cuCtxPopCurrent(&popped);
  }
}

/* The context driver calls on memory of ordinal run in: the allocation's
 * own (legacy memory has one), else the thread's current one, else the
 * device's primary context. */
static int ctx_for(fz_client *c, struct fzc_device *d, CUcontext own, int ordinal,
                   CUcontext *out) {
  if (own) {
    *out = own;
    return 0;
  }
  CUcontext cur = NULL;
  if (cu.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur) {
    *out = cur;
    return 0;
  }
  return primary_ctx(c, d, ordinal, out);
}

/* ---- finding and exporting allocations -------------------------------------- */

static void format_uuid(const CUuuid *u, char *buf, size_t cap) {
  const unsigned char *b = (const unsigned char *)u->bytes;
  snprintf(buf, cap,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
           b[13], b[14], b[15]);
}

/* The tail of every "cannot be shared" message; fz_result.message holds
 * 255 characters, so these stay short. */
#define FZC_USE_INSTEAD                                                        \
  "use cudaMalloc, cuMemCreate with POSIX fd handles, or a pool made with "    \
  "cudaMemHandleTypePosixFileDescriptor"

/* What the driver says about the pointer, in one call.  The boolean
 * attributes are read into zeroed 64-bit slots, so a driver writing fewer
 * bytes still leaves the right value. */
typedef struct ptr_attrs {
  unsigned int memtype;
  uint64_t managed;
  uint64_t ipc_capable;
  unsigned long long buffer_id;
  int ordinal;
  CUdeviceptr range_start;
  size_t range_size;
  CUmemoryPool pool;
  CUcontext ctx;
} ptr_attrs;

static int query(fz_client *c, const void *p, const char *what, ptr_attrs *a) {
  memset(a, 0, sizeof *a);
  a->ordinal = -1;
  CUpointer_attribute at[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                              CU_POINTER_ATTRIBUTE_IS_MANAGED,
                              CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                              CU_POINTER_ATTRIBUTE_BUFFER_ID,
                              CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                              CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                              CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                              CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
                              CU_POINTER_ATTRIBUTE_CONTEXT};
  void *data[] = {&a->memtype,     &a->managed,    &a->ipc_capable,
                  &a->buffer_id,   &a->ordinal,    &a->range_start,
                  &a->range_size,  &a->pool,       &a->ctx};
  const unsigned nat = sizeof at / sizeof at[0];
  CUresult r = cu.cuPointerGetAttributes(nat, at, data, (CUdeviceptr)(uintptr_t)p);
  if (r != CUDA_SUCCESS) {
    /* A driver that will not answer one of them for this kind of memory
     * fails the whole query: ask one by one, and leave what it will not
     * say at its default.  The memory type is the one that must come. */
    memset(a, 0, sizeof *a);
    a->ordinal = -1;
    for (unsigned i = 0; i < nat; i++) {
      CUresult ri = cu.cuPointerGetAttributes(1, &at[i], &data[i], (CUdeviceptr)(uintptr_t)p);
      if (i == 0 && ri != CUDA_SUCCESS) {
        if (ri == CUDA_ERROR_INVALID_VALUE)
          return fzc_fail(c, FZ_EINVAL, "the %s %p is not CUDA device memory", what, p);
        return fzc_fail(c, FZ_ECUDA, "cuPointerGetAttributes on the %s %p: %s", what, p,
                        cu_err(ri));
      }
    }
  }
  if (a->managed)
    return fzc_fail(c, FZ_EINVAL,
                    "the %s %p is managed memory, which cannot be shared with fzd: "
                    FZC_USE_INSTEAD, what, p);
  if (a->memtype == CU_MEMORYTYPE_HOST)
    return fzc_fail(c, FZ_EINVAL,
                    "the %s %p is host memory, not device memory: pass host buffers with "
                    "fz_client_compress() / fz_client_decompress()", what, p);
  if (a->memtype != CU_MEMORYTYPE_DEVICE)
    return fzc_fail(c, FZ_EINVAL, "the %s %p is not CUDA device memory", what, p);
  return 0;
}

/* The allocation's base and size.  cuMemGetAddressRange() gives the
 * allocation itself for every kind (for VMM memory the mapping, where
 * RANGE_START_ADDR / RANGE_SIZE would give the whole reservation, which
 * may hold other allocations), and it is what the daemon checks the
 * imported range with; the attributes serve where it fails. */
static int alloc_range(fz_client *c, const void *p, const char *what, const ptr_attrs *a,
                       dev_alloc *e) {
  CUresult r = cu.cuMemGetAddressRange(&e->base, &e->size, (CUdeviceptr)(uintptr_t)p);
  if (r == CUDA_SUCCESS && e->size > 0)
    return 0;
  if (a->range_size == 0)
    return fzc_fail(c, FZ_ECUDA, "cuMemGetAddressRange on the %s %p: %s", what, p, cu_err(r));
  e->base = a->range_start;
  e->size = a->range_size;
  return 0;
}

/* Exports the allocation holding p, described by a, into e. */
static int export_alloc(fz_client *c, struct fzc_device *d, const void *p, const char *what,
                        const ptr_attrs *a, dev_alloc *e) {
  memset(e, 0, sizeof *e);
  e->fd = -1;
  e->buffer_id = a->buffer_id;
  e->ordinal = a->ordinal;
  CUdevice dev;
  CUuuid uuid;
  CUresult r = cu.cuDeviceGet(&dev, a->ordinal);
  if (r == CUDA_SUCCESS)
    r = cu.cuDeviceGetUuid(&uuid, dev);
  if (r != CUDA_SUCCESS)
    return fzc_fail(c, FZ_ECUDA, "the UUID of device %d: %s", a->ordinal, cu_err(r));
  format_uuid(&uuid, e->uuid, sizeof e->uuid);

  CUcontext ctx;
  bool pushed;
  int rc = ctx_for(c, d, a->ctx, a->ordinal, &ctx);
  if (rc < 0)
    return rc;
  rc = ctx_enter(c, ctx, &pushed);
  if (rc < 0)
    return rc;
  CUmemGenericAllocationHandle h;
  if (a->pool) {
    /* A pool made without a handle type, such as the device's default
     * pool, refuses the export: that is the test. */
    e->kind = KIND_POOL;
    int fd = -1;
    r = cu.cuMemPoolExportToShareableHandle(&fd, a->pool,
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS) {
      rc = fzc_fail(c, FZ_EINVAL,
                    "the %s %p is from a pool that cannot export (cudaMallocAsync: the "
                    "default pool; %s): " FZC_USE_INSTEAD, what, p, cu_err(r));
      goto out;
    }
    e->fd = fd;
    rc = alloc_range(c, p, what, a, e);
    if (rc < 0)
      goto out;
    CUmemPoolPtrExportData pd;
    memset(&pd, 0, sizeof pd);
    r = cu.cuMemPoolExportPointer(&pd, e->base);
    if (r != CUDA_SUCCESS && a->range_size && a->range_start != e->base) {
      /* Where the driver's idea of the allocation is the attributes'. */
      r = cu.cuMemPoolExportPointer(&pd, a->range_start);
      if (r == CUDA_SUCCESS) {
        e->base = a->range_start;
        e->size = a->range_size;
      }
    }
    if (r != CUDA_SUCCESS) {
      rc = fzc_fail(c, FZ_ECUDA, "cuMemPoolExportPointer for the %s %p: %s", what, p,
                    cu_err(r));
      goto out;
    }
    memcpy(e->blob, &pd, sizeof pd < sizeof e->blob ? sizeof pd : sizeof e->blob);
  } else if (!a->ipc_capable &&
             cu.cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)p) == CUDA_SUCCESS) {
    /* VMM memory: the range is the mapping (the reservation may be larger
     * and hold other allocations). */
    e->kind = KIND_VMM;
    int fd = -1;
    CUresult rx =
        cu.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    cu.cuMemRelease(h);
    if (rx != CUDA_SUCCESS) {
      rc = fzc_fail(c, FZ_EINVAL,
                    "the %s %p is cuMemCreate memory made without "
                    "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (%s): "
                    FZC_USE_INSTEAD, what, p, cu_err(rx));
      goto out;
    }
    e->fd = fd;
    rc = alloc_range(c, p, what, a, e);
    if (rc < 0)
      goto out;
  } else {
    /* Legacy memory; also what is neither pool nor VMM memory when the
     * driver did not call it IPC-capable (an older one may not know the
     * attribute): the export decides. */
    e->kind = KIND_IPC;
    rc = alloc_range(c, p, what, a, e);
    if (rc < 0)
      goto out;
    CUipcMemHandle ih;
    r = cu.cuIpcGetMemHandle(&ih, e->base);
    if (r != CUDA_SUCCESS) {
      if (a->ipc_capable)
        rc = fzc_fail(c, FZ_ECUDA, "cuIpcGetMemHandle for the %s %p: %s", what, p, cu_err(r));
      else
        rc = fzc_fail(c, FZ_EINVAL,
                      "the %s %p is device memory that cannot be shared with another "
                      "process (%s): " FZC_USE_INSTEAD, what, p, cu_err(r));
      goto out;
    }
    memcpy(e->blob, &ih, sizeof e->blob);
  }
  if (e->fd >= 0)
    fcntl(e->fd, F_SETFD, FD_CLOEXEC); /* ours alone, not for exec'd children */
  rc = 0;
out:
  ctx_leave(pushed);
  if (rc < 0)
    alloc_forget(e);
  return rc;
}

/* Collects the buffer ids of evicted entries for one release call. */
typedef struct evicted {
  uint64_t ids[2 * FZC_DEV_ALLOCS];
  size_t n;
} evicted;

/* A copy of the cache entry of the allocation holding [p, p + len), exported
 * now when there is none.  Entries used by this call (tick) are never the
 * ones evicted, so the descriptor of the copy stays open until the next
 * call; the entry itself may move in the table. */
static int resolve(fz_client *c, struct fzc_device *d, const void *p, size_t len,
                   const char *what, evicted *ev, dev_alloc *out) {
  ptr_attrs a;
  int rc = query(c, p, what, &a);
  if (rc < 0)
    return rc;
  CUdeviceptr dp = (CUdeviceptr)(uintptr_t)p;
  dev_alloc *hit = NULL;
  for (size_t i = 0; i < d->nallocs;) {
    dev_alloc *e = &d->allocs[i];
    bool holds = dp >= e->base && dp - e->base < e->size;
    if (holds && e->buffer_id == a.buffer_id) {
      hit = e;
      break;
    }
    if (holds && e->used != d->tick) {
      /* The address belongs to another allocation now: the one we exported
       * was freed.  Forget it here and on the daemon side. */
      ev->ids[ev->n++] = e->buffer_id;
      remove_alloc(d, i);
      continue;
    }
    i++;
  }
  if (!hit) {
    dev_alloc e;
    rc = export_alloc(c, d, p, what, &a, &e);
    if (rc < 0)
      return rc;
    if (d->nallocs == FZC_DEV_ALLOCS) {
      size_t lru = FZC_DEV_ALLOCS;
      for (size_t i = 0; i < d->nallocs; i++)
        if (d->allocs[i].used != d->tick &&
            (lru == FZC_DEV_ALLOCS || d->allocs[i].used < d->allocs[lru].used))
          lru = i;
      /* Two entries at most are in use by one call, so one is free. */
      ev->ids[ev->n++] = d->allocs[lru].buffer_id;
      remove_alloc(d, lru);
    }
    d->allocs[d->nallocs] = e;
    hit = &d->allocs[d->nallocs++];
  }
  hit->used = d->tick;
  if (len > hit->size || dp - hit->base > hit->size - len)
    return fzc_fail(c, FZ_EINVAL,
                    "the %s [%p, +%zu bytes) runs past the end of its allocation (%zu bytes "
                    "at 0x%llx)", what, p, len, hit->size, (unsigned long long)hit->base);
  *out = *hit;
  return 0;
}

/* ---- events ----------------------------------------------------------------- */

/* A free event pair of ctx, made when there is none; NULL when every pair
 * is in use (the caller then synchronises the stream instead). */
static int take_events(fz_client *c, struct fzc_device *d, CUcontext ctx, dev_events **out) {
  *out = NULL;
  for (size_t i = 0; i < d->nevents; i++) {
    dev_events *e = &d->events[i];
    if (e->ctx != ctx || e->busy)
      continue;
    if (e->msgid && in_flight(c, e->msgid))
      continue;
    e->msgid = 0;
    e->busy = true;
    *out = e;
    return 0;
  }
  if (d->nevents == FZC_DEV_EVENTS)
    return 0;
  dev_events *e = &d->events[d->nevents];
  memset(e, 0, sizeof *e);
  const unsigned flags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
  CUresult r = cu.cuEventCreate(&e->wait, flags);
  if (r != CUDA_SUCCESS)
    return fzc_fail(c, FZ_ECUDA, "cuEventCreate(CU_EVENT_INTERPROCESS): %s", cu_err(r));
  r = cu.cuEventCreate(&e->done, flags);
  if (r != CUDA_SUCCESS) {
    cu.cuEventDestroy(e->wait);
    return fzc_fail(c, FZ_ECUDA, "cuEventCreate(CU_EVENT_INTERPROCESS): %s", cu_err(r));
  }
  r = cu.cuIpcGetEventHandle(&e->wait_h, e->wait);
  if (r == CUDA_SUCCESS)
    r = cu.cuIpcGetEventHandle(&e->done_h, e->done);
  if (r != CUDA_SUCCESS) {
    cu.cuEventDestroy(e->wait);
    cu.cuEventDestroy(e->done);
    return fzc_fail(c, FZ_ECUDA, "cuIpcGetEventHandle: %s", cu_err(r));
  }
  e->ctx = ctx;
  e->busy = true;
  d->nevents++;
  *out = e;
  return 0;
}

/* Orders the daemon's reads after the work on stream: records a wait event
 * on it (*ev set, its context in *ctx), or, with every event in use,
 * synchronises the stream (*ev NULL). */
static int stream_before(fz_client *c, struct fzc_device *d, CUstream stream, int ordinal,
                         dev_events **ev, CUcontext *ctx) {
  *ev = NULL;
  bool pushed = false;
  CUresult r = cu.cuStreamGetCtx(stream, ctx);
  if (r == CUDA_ERROR_INVALID_CONTEXT) {
    /* A special stream (cudaStreamPerThread, the legacy stream) on a thread
     * with no context: it is the primary context's. */
    CUcontext pc;
    int rc = primary_ctx(c, d, ordinal, &pc);
    if (rc < 0)
      return rc;
    rc = ctx_enter(c, pc, &pushed);
    if (rc < 0)
      return rc;
    r = cu.cuStreamGetCtx(stream, ctx);
  }
  int rc = 0;
  if (r != CUDA_SUCCESS) {
    rc = fzc_fail(c, FZ_EINVAL, "the stream %p: cuStreamGetCtx: %s", (void *)stream, cu_err(r));
    goto out;
  }
  bool pushed2;
  rc = ctx_enter(c, *ctx, &pushed2);
  if (rc < 0)
    goto out;
  rc = take_events(c, d, *ctx, ev);
  if (rc == 0 && *ev) {
    r = cu.cuEventRecord((*ev)->wait, stream);
    if (r != CUDA_SUCCESS) {
      (*ev)->busy = false;
      *ev = NULL;
      rc = fzc_fail(c, FZ_ECUDA, "cuEventRecord on the stream %p: %s", (void *)stream,
                    cu_err(r));
    }
  } else if (rc == 0) {
    r = cu.cuStreamSynchronize(stream);
    if (r != CUDA_SUCCESS)
      rc = fzc_fail(c, FZ_ECUDA, "cuStreamSynchronize: %s", cu_err(r));
  }
  ctx_leave(pushed2);
out:
  ctx_leave(pushed);
  return rc;
}

/* ---- the calls -------------------------------------------------------------- */

static void set_side(fz_job *j, bool out, const dev_alloc *a, const void *p, size_t len) {
  uint64_t off = (uint64_t)((uintptr_t)p - a->base);
  const void *blob = a->blob;
  if (out) {
    j->out_offset = off;
    j->out_length = len;
    j->out_buffer_id = a->buffer_id;
    if (a->kind == KIND_IPC)
      j->out_ipc = blob;
    else if (a->kind == KIND_VMM)
      j->out_vmm_fd = a->fd, j->out_vmm_size = a->size;
    else
      j->out_pool_fd = a->fd, j->out_pool_ptr = blob;
  } else {
    j->in_offset = off;
    j->in_length = len;
    j->in_buffer_id = a->buffer_id;
    if (a->kind == KIND_IPC)
      j->in_ipc = blob;
    else if (a->kind == KIND_VMM)
      j->in_vmm_fd = a->fd, j->in_vmm_size = a->size;
    else
      j->in_pool_fd = a->fd, j->in_pool_ptr = blob;
  }
}

static int need_driver(fz_client *c);

static void buffer_of(const dev_alloc *a, const void *p, size_t len, fzc_dev_buffer *out) {
  memset(out, 0, sizeof *out);
  out->kind = a->kind;
  memcpy(out->blob, a->blob, sizeof a->blob < sizeof out->blob ? sizeof a->blob : sizeof out->blob);
  out->fd = a->fd;
  out->vmm_size = a->size;
  out->offset = (uint64_t)((uintptr_t)p - a->base);
  out->length = len;
  out->buffer_id = a->buffer_id;
  snprintf(out->uuid, sizeof out->uuid, "%s", a->uuid);
}

int fzc_device_buffers(fz_client *c, const void *in, size_t in_len, fzc_dev_buffer *din,
                       const void *out, size_t out_len, fzc_dev_buffer *dout) {
  if ((in == NULL && out == NULL) || (in != NULL && in_len == 0) || (out != NULL && out_len == 0))
    return fzc_fail(c, FZ_EINVAL, "no device buffer, or one of 0 bytes");
  uintptr_t i = (uintptr_t)in, o = (uintptr_t)out;
  if (in != NULL && out != NULL && i < o + out_len && o < i + in_len)
    return fzc_fail(c, FZ_EINVAL, "the device output overlaps the input");
  if (c->transport != FZ_TRANSPORT_UNIX)
    return fzc_fail(c, FZ_ETRANSPORT,
                    "device buffers need the daemon's Unix socket; over TCP send host buffers");
  int rc = need_driver(c);
  if (rc < 0)
    return rc;
  struct fzc_device *d = c->dev;
  pthread_mutex_lock(&d->mu);
  d->driver = true;
  /* One tick for both sides: resolving the second never evicts the
   * first's entry, so both descriptors stay open. */
  d->tick++;
  evicted ev;
  ev.n = 0;
  dev_alloc a, b;
  rc = in != NULL ? resolve(c, d, in, in_len, "input", &ev, &a) : 0;
  if (rc == 0 && out != NULL)
    rc = resolve(c, d, out, out_len, "output", &ev, &b);
  if (rc == 0 && in != NULL && out != NULL && strcmp(a.uuid, b.uuid) != 0)
    rc = fzc_fail(c, FZ_EINVAL, "the input is on %s and the output on %s: one GPU only", a.uuid,
                  b.uuid);
  if (ev.n) {
    char keep[sizeof c->errmsg];
    memcpy(keep, c->errmsg, sizeof keep);
    int r2 = send_release(c, d, ev.ids, ev.n);
    memcpy(c->errmsg, keep, sizeof keep);
    if (r2 < 0 && rc == 0 && c->broken)
      rc = fzc_fail(c, c->broken, "the connection is no longer usable");
  }
  if (rc == 0 && in != NULL)
    buffer_of(&a, in, in_len, din);
  if (rc == 0 && out != NULL)
    buffer_of(&b, out, out_len, dout);
  pthread_mutex_unlock(&d->mu);
  return rc;
}

/* One device call, as its caller gave it. */
typedef struct dev_call {
  fz_op op;
  const fz_job *job;
  const void *d_in;
  size_t in_len;
  void *d_out;
  size_t out_cap;
  CUstream stream;
  bool sync;
  fz_done_cb cb;
  void *user;
} dev_call;

static int check_args(fz_client *c, const dev_call *k) {
  if (k->op != FZ_OP_COMPRESS && k->op != FZ_OP_DECOMPRESS)
    return fzc_fail(c, FZ_EINVAL, "unknown operation %d", (int)k->op);
  if (k->op == FZ_OP_COMPRESS && !k->job)
    return fzc_fail(c, FZ_EINVAL, "compress needs a job (dtype, shape, pipeline, bound)");
  if (!k->d_in || !k->d_out)
    return fzc_fail(c, FZ_EINVAL, "no device %s pointer given", k->d_in ? "output" : "input");
  if (k->in_len == 0 || k->out_cap == 0)
    return fzc_fail(c, FZ_EINVAL, "the device %s has a length of 0",
                    k->in_len == 0 ? "input" : "output");
  uintptr_t i = (uintptr_t)k->d_in, o = (uintptr_t)k->d_out;
  if (i < o + k->out_cap && o < i + k->in_len)
    return fzc_fail(c, FZ_EINVAL, "the device output overlaps the input");
  if (c->transport != FZ_TRANSPORT_UNIX)
    return fzc_fail(c, FZ_ETRANSPORT,
                    "device buffers need the daemon's Unix socket; over TCP send host buffers");
  return 0;
}

/* What every device job does with the lock held, after check_args() and
 * need_driver(): the exports, the events and the submission.  On success
 * *msgid is the job's id and, for a synchronous call, *evp the event pair
 * to finish with (NULL without a stream) and *ev_ctx its context. */
static int submit_locked(fz_client *c, struct fzc_device *d, const dev_call *k,
                         uint32_t *msgid, dev_events **evp, CUcontext *ev_ctx) {
  *evp = NULL;
  if (c->broken)
    return fzc_fail(c, c->broken, "the connection is no longer usable");
  d->driver = true;
  if (d->kick[0] < 0 && pipe2(d->kick, O_CLOEXEC | O_NONBLOCK) < 0) {
    d->kick[0] = d->kick[1] = -1;
    return fzc_fail(c, FZ_EIO, "pipe: %s", strerror(errno));
  }
  d->tick++;
  evicted ev;
  ev.n = 0;
  dev_alloc in, out;
  int rc = resolve(c, d, k->d_in, k->in_len,
                   k->op == FZ_OP_COMPRESS ? "input" : "archive", &ev, &in);
  if (rc == 0)
    rc = resolve(c, d, k->d_out, k->out_cap, "output", &ev, &out);
  if (rc == 0 && strcmp(in.uuid, out.uuid) != 0)
    rc = fzc_fail(c, FZ_EINVAL, "the input is on %s and the output on %s: one GPU only",
                  in.uuid, out.uuid);
  if (ev.n) {
    /* Entries evicted to make room or found stale: best effort, since the
     * daemon's key (the buffer id) never matches a new allocation anyway. */
    char keep[sizeof c->errmsg];
    memcpy(keep, c->errmsg, sizeof keep);
    int r2 = send_release(c, d, ev.ids, ev.n);
    memcpy(c->errmsg, keep, sizeof keep);
    if (r2 < 0 && rc == 0 && c->broken)
      rc = fzc_fail(c, c->broken, "the connection is no longer usable");
  }
  if (rc < 0)
    return rc;

  fz_job j;
  fz_job_init(&j);
  if (k->op == FZ_OP_COMPRESS) {
    j.dtype = k->job->dtype;
    j.ndims = k->job->ndims;
    memcpy(j.shape, k->job->shape, sizeof j.shape);
    j.pipeline = k->job->pipeline;
    j.eb = k->job->eb;
    j.mode = k->job->mode;
    j.verify = k->job->verify;
  }
  j.in_vmm_fd = j.out_vmm_fd = j.in_pool_fd = j.out_pool_fd = -1;
  set_side(&j, false, &in, k->d_in, k->in_len);
  set_side(&j, true, &out, k->d_out, k->out_cap);
  j.device = in.uuid;

  dev_events *e = NULL;
  if (k->stream) {
    rc = stream_before(c, d, k->stream, in.ordinal, &e, ev_ctx);
    if (rc < 0)
      return rc;
    if (e) {
      j.wait_event = &e->wait_h;
      if (k->sync)
        j.done_event = &e->done_h;
    }
  }
  uint64_t id = 0;
  rc = fz_client_submit(c, k->op, &j, k->cb, k->user, &id);
  kick_reader(d); /* the submission may have read answers into the buffer */
  if (rc < 0) {
    if (e)
      e->busy = false;
    return rc;
  }
  *msgid = (uint32_t)id;
  if (e && !k->sync) {
    e->busy = false;
    e->msgid = (uint32_t)id;
  }
  *evp = e;
  return 0;
}

/* Loads the driver (once per process); FZ_ENOGPU with the reason when it is
 * not there. */
static int need_driver(fz_client *c) {
  pthread_once(&cu_once, cu_load);
  if (cu_status < 0)
    return fzc_fail(c, cu_status, "%s", cu_why);
  return 0;
}

static int run_device(fz_client *c, const dev_call *k, fz_result *res) {
  memset(res, 0, sizeof *res);
  struct fzc_device *d = c->dev;
  pthread_mutex_lock(&d->mu);
  int rc = check_args(c, k);
  if (rc == 0)
    rc = need_driver(c);
  uint32_t msgid = 0;
  dev_events *e = NULL;
  CUcontext ev_ctx = NULL;
  if (rc == 0)
    rc = submit_locked(c, d, k, &msgid, &e, &ev_ctx);
  if (rc < 0) {
    res->status = rc;
    snprintf(res->message, sizeof res->message, "%s", c->errmsg);
    pthread_mutex_unlock(&d->mu);
    return rc;
  }
  if (!await_answer(c, d, msgid, res)) {
    res->status = FZ_ETIMEDOUT;
    snprintf(res->message, sizeof res->message, "no answer in time");
    fzc_fail(c, FZ_ETIMEDOUT, "no answer in time");
    if (e) {
      /* The daemon may still wait on the event or record the other: the
       * pair is the job's until its answer comes. */
      e->busy = false;
      e->msgid = msgid;
    }
    pthread_mutex_unlock(&d->mu);
    return FZ_ETIMEDOUT;
  }
  if (e) {
    if (res->status == 0) {
      /* The daemon recorded done_event after its last write and before it
       * answered: later work on the caller's stream comes after it. */
      bool pushed;
      if (ctx_enter(c, ev_ctx, &pushed) == 0) {
        CUresult r = cu.cuStreamWaitEvent(k->stream, e->done, 0);
        ctx_leave(pushed);
        if (r != CUDA_SUCCESS) {
          res->status = FZ_ECUDA;
          snprintf(res->message, sizeof res->message,
                   "the job succeeded, but cuStreamWaitEvent on the stream failed: %s",
                   cu_err(r));
        }
      }
    }
    e->busy = false;
  }
  if (res->status < 0)
    fzc_fail(c, res->status, "%s", res->message);
  pthread_mutex_unlock(&d->mu);
  return res->status;
}

int fz_client_compress_device(fz_client *c, const fz_job *job, const void *d_in,
                              size_t in_len, void *d_out, size_t out_cap, void *stream,
                              fz_result *res) {
  if (!c || !res)
    return FZ_EINVAL;
  dev_call k = {.op = FZ_OP_COMPRESS, .job = job, .d_in = d_in, .in_len = in_len,
                .d_out = d_out, .out_cap = out_cap, .stream = (CUstream)stream,
                .sync = true};
  return run_device(c, &k, res);
}

int fz_client_decompress_device(fz_client *c, const void *d_arc, size_t arc_len,
                                void *d_out, size_t out_cap, void *stream,
                                fz_result *res) {
  if (!c || !res)
    return FZ_EINVAL;
  dev_call k = {.op = FZ_OP_DECOMPRESS, .d_in = d_arc, .in_len = arc_len, .d_out = d_out,
                .out_cap = out_cap, .stream = (CUstream)stream, .sync = true};
  return run_device(c, &k, res);
}

int fz_client_submit_device(fz_client *c, fz_op op, const fz_job *job, const void *d_in,
                            size_t in_len, void *d_out, size_t out_cap, void *stream,
                            fz_done_cb cb, void *user, uint64_t *id) {
  if (!c)
    return FZ_EINVAL;
  dev_call k = {.op = op, .job = job, .d_in = d_in, .in_len = in_len, .d_out = d_out,
                .out_cap = out_cap, .stream = (CUstream)stream, .sync = false,
                .cb = cb, .user = user};
  struct fzc_device *d = c->dev;
  pthread_mutex_lock(&d->mu);
  int rc = check_args(c, &k);
  if (rc == 0)
    rc = need_driver(c);
  uint32_t msgid = 0;
  dev_events *e;
  CUcontext ev_ctx;
  if (rc == 0)
    rc = submit_locked(c, d, &k, &msgid, &e, &ev_ctx);
  pthread_mutex_unlock(&d->mu);
  if (rc == 0 && id)
    *id = msgid;
  return rc;
}

int fz_client_release_device(fz_client *c, const void *d_ptr) {
  if (!c)
    return FZ_EINVAL;
  struct fzc_device *d = c->dev;
  pthread_mutex_lock(&d->mu);
  c->errmsg[0] = '\0';
  uint64_t ids[FZC_DEV_ALLOCS];
  size_t n = 0;
  CUdeviceptr dp = (CUdeviceptr)(uintptr_t)d_ptr;
  for (size_t i = 0; i < d->nallocs;) {
    dev_alloc *e = &d->allocs[i];
    if (!d_ptr || (dp >= e->base && dp - e->base < e->size)) {
      ids[n++] = e->buffer_id;
      remove_alloc(d, i);
      continue;
    }
    i++;
  }
  int rc = 0;
  if (!d_ptr || n)
    rc = send_release(c, d, ids, d_ptr ? n : 0);
  pthread_mutex_unlock(&d->mu);
  return rc;
}
