/*
 * fake_libcuda.c - a CUDA driver without a GPU, built as libcuda.so.1 for
 * test_client_device_logic: the test declares allocations of each memory
 * kind (fake_cuda_add) and the driver answers libfzclient's queries about
 * them as the real one does for that kind (legacy memory IPC-capable with a
 * context, VMM memory retainable and exportable only when made with POSIX
 * descriptors, pool memory exportable only from a pool made so, managed
 * and host memory as such), counting the calls, so that CI can check what
 * the library decides, caches and releases.  It never touches memory.
 * Only what libfzclient resolves is here; its prototypes come from cuda.h,
 * so the versioned names (cuCtxPushCurrent_v2 ...) are the ones exported.
 */
#include <cuda.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "fake_libcuda.h"

#define FAKE_API __attribute__((visibility("default")))

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static fake_alloc allocs[256];
static int nallocs;
static unsigned long counts[FAKE_NCOUNTS];
static __thread CUcontext stack[8];
static __thread int depth;

/* The context legacy memory and streams belong to, and the primary one. */
static int ctx_obj;
#define THE_CTX ((CUcontext)&ctx_obj)

FAKE_API void fake_cuda_add(const fake_alloc *a) {
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].base == a->base) { /* freed and allocated again */
      allocs[i] = *a;
      pthread_mutex_unlock(&mu);
      return;
    }
  allocs[nallocs++] = *a;
  pthread_mutex_unlock(&mu);
}

FAKE_API unsigned long fake_cuda_count(fake_count which) {
  pthread_mutex_lock(&mu);
  unsigned long n = counts[which];
  pthread_mutex_unlock(&mu);
  return n;
}

static void count(fake_count which) {
  pthread_mutex_lock(&mu);
  counts[which]++;
  pthread_mutex_unlock(&mu);
}

static int find(CUdeviceptr p, fake_alloc *out) {
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nallocs; i++)
    if (p >= allocs[i].base && p - allocs[i].base < allocs[i].size) {
      *out = allocs[i];
      pthread_mutex_unlock(&mu);
      return 1;
    }
  pthread_mutex_unlock(&mu);
  return 0;
}

FAKE_API CUresult CUDAAPI cuInit(unsigned int flags) {
  (void)flags;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuGetErrorName(CUresult e, const char **s) {
  *s = e == CUDA_ERROR_INVALID_VALUE   ? "CUDA_ERROR_INVALID_VALUE"
       : e == CUDA_ERROR_NOT_SUPPORTED ? "CUDA_ERROR_NOT_SUPPORTED"
                                       : "CUDA_ERROR_UNKNOWN";
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuPointerGetAttributes(unsigned int n, CUpointer_attribute *at,
                                                 void **data, CUdeviceptr p) {
  fake_alloc a;
  int known = find(p, &a);
  /* VMM memory has no context: asked for one, this driver fails the whole
   * query, as a driver may. */
  for (unsigned i = 0; i < n; i++)
    if (known && a.kind == FAKE_VMM && at[i] == CU_POINTER_ATTRIBUTE_CONTEXT)
      return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n; i++) {
    switch (at[i]) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *(unsigned *)data[i] = !known ? 0
                             : a.kind == FAKE_HOST ? CU_MEMORYTYPE_HOST
                                                   : CU_MEMORYTYPE_DEVICE;
      break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: /* written as a bool, as the driver may */
      *(unsigned char *)data[i] = known && a.kind == FAKE_MANAGED;
      break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      *(unsigned char *)data[i] = known && a.kind == FAKE_LEGACY;
      break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      *(unsigned long long *)data[i] = known ? a.buffer_id : 0;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *(int *)data[i] = known ? 0 : -1;
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      /* VMM: the reservation, larger than the mapping (as the driver says). */
      *(CUdeviceptr *)data[i] = known ? a.base - (a.kind == FAKE_VMM ? 4096 : 0) : 0;
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *(size_t *)data[i] = known ? a.size + (a.kind == FAKE_VMM ? 8192 : 0) : 0;
      break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      *(CUmemoryPool *)data[i] =
          known && (a.kind == FAKE_POOL || a.kind == FAKE_DEFAULT_POOL)
              ? (CUmemoryPool)(uintptr_t)(a.kind == FAKE_POOL ? 0x1000 : 0x2000)
              : NULL;
      break;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *(CUcontext *)data[i] = known && a.kind == FAKE_LEGACY ? THE_CTX : NULL;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  count(FAKE_QUERIES);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
  fake_alloc a;
  if (!find(p, &a))
    return CUDA_ERROR_NOT_FOUND;
  *base = a.base;
  *size = a.size;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *p) {
  fake_alloc a;
  if (!find((CUdeviceptr)(uintptr_t)p, &a) || (a.kind != FAKE_VMM && a.kind != FAKE_VMM_NOFD))
    return CUDA_ERROR_INVALID_VALUE;
  *h = a.kind == FAKE_VMM ? 1 : 2;
  count(FAKE_RETAINS);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle h) {
  (void)h;
  count(FAKE_RELEASES);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
                                                       CUmemAllocationHandleType t,
                                                       unsigned long long flags) {
  (void)flags;
  if (h != 1 || t != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_NOT_SUPPORTED;
  *(int *)out = open("/dev/null", O_RDONLY);
  count(FAKE_EXPORTS);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
  fake_alloc a;
  CUcontext cur = depth ? stack[depth - 1] : NULL;
  if (cur != THE_CTX)
    return CUDA_ERROR_INVALID_CONTEXT;
  if (!find(p, &a) || a.kind != FAKE_LEGACY || a.base != p)
    return CUDA_ERROR_INVALID_VALUE;
  memset(h, 0, sizeof *h);
  memcpy(h->reserved, &a.buffer_id, sizeof a.buffer_id);
  count(FAKE_IPC_HANDLES);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemPoolExportToShareableHandle(void *out, CUmemoryPool pool,
                                                           CUmemAllocationHandleType t,
                                                           unsigned long long flags) {
  (void)flags;
  if (pool != (CUmemoryPool)(uintptr_t)0x1000 || t != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_NOT_SUPPORTED;
  *(int *)out = open("/dev/null", O_RDONLY);
  count(FAKE_EXPORTS);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemPoolExportPointer(CUmemPoolPtrExportData *d, CUdeviceptr p) {
  fake_alloc a;
  if (!find(p, &a) || a.base != p)
    return CUDA_ERROR_INVALID_VALUE;
  memset(d, 0, sizeof *d);
  memcpy(d->reserved, &a.buffer_id, sizeof a.buffer_id);
  count(FAKE_POOL_POINTERS);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuDeviceGet(CUdevice *d, int ordinal) {
  if (ordinal != 0)
    return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuDeviceGetUuid(CUuuid *u, CUdevice d) {
  (void)d;
  for (int i = 0; i < 16; i++)
    u->bytes[i] = (char)(0xa0 + i);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuCtxGetCurrent(CUcontext *c) {
  *c = depth ? stack[depth - 1] : NULL;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuCtxPushCurrent(CUcontext c) {
  if (depth == 8)
    return CUDA_ERROR_UNKNOWN;
  stack[depth++] = c;
  count(FAKE_PUSHES);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuCtxPopCurrent(CUcontext *c) {
  if (depth == 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  *c = stack[--depth];
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  (void)d;
  *c = THE_CTX;
  count(FAKE_PRIMARY_RETAINS);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice d) {
  (void)d;
  count(FAKE_PRIMARY_RELEASES);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuStreamGetCtx(CUstream s, CUcontext *c) {
  if (s == CU_STREAM_PER_THREAD || s == CU_STREAM_LEGACY) {
    if (!depth)
      return CUDA_ERROR_INVALID_CONTEXT;
    *c = stack[depth - 1];
    return CUDA_SUCCESS;
  }
  if ((uintptr_t)s != FAKE_STREAM)
    return CUDA_ERROR_INVALID_HANDLE;
  *c = THE_CTX;
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuStreamSynchronize(CUstream s) {
  (void)s;
  count(FAKE_STREAM_SYNCS);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  (void)s;
  (void)e;
  (void)flags;
  count(FAKE_STREAM_WAITS);
  return CUDA_SUCCESS;
}

static int event_objs[64];

FAKE_API CUresult CUDAAPI cuEventCreate(CUevent *e, unsigned int flags) {
  if (flags != (CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING))
    return CUDA_ERROR_INVALID_VALUE;
  CUcontext cur = depth ? stack[depth - 1] : NULL;
  if (!cur)
    return CUDA_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&mu);
  unsigned long n = counts[FAKE_EVENTS]++;
  pthread_mutex_unlock(&mu);
  if (n >= 64)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *e = (CUevent)&event_objs[n];
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuEventDestroy(CUevent e) {
  (void)e;
  count(FAKE_EVENTS_DESTROYED);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuEventRecord(CUevent e, CUstream s) {
  (void)e;
  if ((uintptr_t)s != FAKE_STREAM && s != CU_STREAM_PER_THREAD)
    return CUDA_ERROR_INVALID_HANDLE;
  count(FAKE_RECORDS);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle *h, CUevent e) {
  memset(h, 0, sizeof *h);
  memcpy(h->reserved, &e, sizeof e);
  return CUDA_SUCCESS;
}
