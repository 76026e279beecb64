/*
 * import.c - device memory and events of other processes, opened in this
 * one: legacy CUDA IPC handles (cudaMalloc memory), VMM allocations
 * (cuMemCreate, shared as a POSIX file descriptor), allocations of
 * IPC-capable memory pools (the pool shared as a descriptor, the pointer
 * as its export data), and IPC events.
 *
 * The VMM calls and cuMemGetAddressRange belong to the driver API; they
 * are found through the runtime (cudaGetDriverEntryPointByVersion), once,
 * because linking the driver library would keep a program from starting at
 * all on a machine without one.  Every mapping records the allocation's
 * real size as the driver reports it, which is what callers check a job's
 * range against; a size a client states is only ever used to narrow it.
 *
 * Nothing here caches or counts: the daemon's per-connection cache decides
 * when a mapping is made and when it goes.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "fze_chain.h"
#include "fz_gpu.h"
#include "driver.h"
#include "gpu_ctx.h"
#include "gpu_err.h"

/* ---- the driver entry points ------------------------------------------- */

typedef CUresult (*range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr p);
typedef CUresult (*import_fn)(CUmemGenericAllocationHandle *h, void *os,
                              CUmemAllocationHandleType type);
typedef CUresult (*props_fn)(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h);
typedef CUresult (*gran_fn)(size_t *g, const CUmemAllocationProp *prop,
                            CUmemAllocationGranularity_flags option);
typedef CUresult (*reserve_fn)(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                               unsigned long long flags);
typedef CUresult (*addr_free_fn)(CUdeviceptr p, size_t size);
typedef CUresult (*map_fn)(CUdeviceptr p, size_t size, size_t offset,
                           CUmemGenericAllocationHandle h, unsigned long long flags);
typedef CUresult (*unmap_fn)(CUdeviceptr p, size_t size);
typedef CUresult (*access_fn)(CUdeviceptr p, size_t size, const CUmemAccessDesc *d,
                              size_t count);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle h);
typedef CUresult (*errname_fn)(CUresult e, const char **s);

static struct {
  range_fn range;
  import_fn import;
  props_fn props;
  gran_fn gran;
  reserve_fn reserve;
  addr_free_fn addr_free;
  map_fn map;
  unmap_fn unmap;
  access_fn access;
  release_fn release;
  errname_fn errname;
  const char *missing; /* the first entry point not found, or NULL */
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void *entry(const char *name) { return fzk_driver_entry(name, &drv.missing); }

static void drv_load(void) {
  drv.range = (range_fn)entry("cuMemGetAddressRange");
  drv.import = (import_fn)entry("cuMemImportFromShareableHandle");
  drv.props = (props_fn)entry("cuMemGetAllocationPropertiesFromHandle");
  drv.gran = (gran_fn)entry("cuMemGetAllocationGranularity");
  drv.reserve = (reserve_fn)entry("cuMemAddressReserve");
  drv.addr_free = (addr_free_fn)entry("cuMemAddressFree");
  drv.map = (map_fn)entry("cuMemMap");
  drv.unmap = (unmap_fn)entry("cuMemUnmap");
  drv.access = (access_fn)entry("cuMemSetAccess");
  drv.release = (release_fn)entry("cuMemRelease");
  drv.errname = (errname_fn)entry("cuGetErrorName");
}

static int drv_ready(char *why, size_t why_len) {
  pthread_once(&drv_once, drv_load);
  if (drv.missing == NULL)
    return 0;
  fze_why(why, why_len, "the CUDA driver has no %s", drv.missing);
  return FZ_ECUDA;
}

/* "what: CUDA_ERROR_NAME (n)"; out of memory is FZ_EGPUOOM, anything else
 * the caller's code. */
static int drv_fail(CUresult r, const char *what, int code, char *why, size_t why_len) {
  const char *name = NULL;
  if (drv.errname == NULL || drv.errname(r, &name) != CUDA_SUCCESS || name == NULL)
    name = "CUDA_ERROR_?";
  fze_why(why, why_len, "%s: %s (%d)", what, name, (int)r);
  return r == CUDA_ERROR_OUT_OF_MEMORY ? FZ_EGPUOOM : code;
}

/* A runtime call refused what a client sent: the handle or the descriptor
 * is not one this GPU can open (FZ_EINVAL), unless memory ran out. */
static int rt_fail(cudaError_t e, const char *what, char *why, size_t why_len) {
  cudaGetLastError(); /* clear a non-sticky error for the next call */
  fze_why(why, why_len, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
  return e == cudaErrorMemoryAllocation ? FZ_EGPUOOM : FZ_EINVAL;
}

static int set_device(const fz_gpu_ctx *ctx, char *why, size_t why_len) {
  cudaError_t e = cudaSetDevice(ctx->device);
  if (e == cudaSuccess)
    return 0;
  return fzk_cuda_error((int)e, "cudaSetDevice", why, why_len);
}

int fz_gpu_import_ready(char *why, size_t why_len) { return drv_ready(why, why_len); }

int fz_gpu_address_range(const void *d_ptr, void **base, size_t *size, char *why,
                         size_t why_len) {
  int rc = drv_ready(why, why_len);
  if (rc < 0)
    return rc;
  CUdeviceptr b = 0;
  size_t n = 0;
  CUresult r = drv.range(&b, &n, (CUdeviceptr)(uintptr_t)d_ptr);
  if (r != CUDA_SUCCESS)
    return drv_fail(r, "cuMemGetAddressRange", FZ_ECUDA, why, why_len);
  *base = (void *)(uintptr_t)b;
  *size = n;
  return 0;
}

/* The size of the allocation that starts at base, which must start there. */
static int base_size(const void *base, size_t *size, const char *what, char *why,
                     size_t why_len) {
  void *b = NULL;
  int rc = fz_gpu_address_range(base, &b, size, why, why_len);
  if (rc < 0)
    return rc;
  if (b != base) {
    fze_why(why, why_len, "%s: the mapping at %p belongs to an allocation at %p", what,
            base, b);
    return FZ_ECUDA;
  }
  return 0;
}

/* ---- legacy IPC handles ----------------------------------------------- */

int fz_gpu_import_ipc(fz_gpu_ctx *ctx, const void *handle, fz_gpu_mapping *m, char *why,
                      size_t why_len) {
  memset(m, 0, sizeof *m);
  int rc = set_device(ctx, why, why_len);
  if (rc < 0 || (rc = drv_ready(why, why_len)) < 0)
    return rc;
  cudaIpcMemHandle_t h;
  memcpy(&h, handle, sizeof h);
  void *p = NULL;
  cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess)
    return rt_fail(e, "cudaIpcOpenMemHandle", why, why_len);
  size_t size = 0;
  rc = base_size(p, &size, "cudaIpcOpenMemHandle", why, why_len);
  if (rc < 0) {
    cudaIpcCloseMemHandle(p);
    cudaGetLastError();
    return rc;
  }
  m->kind = FZ_GPU_MEM_IPC;
  m->base = p;
  m->size = size;
  return 0;
}

/* ---- VMM allocations ---------------------------------------------------- */

int fz_gpu_import_vmm(fz_gpu_ctx *ctx, int fd, size_t size, fz_gpu_mapping *m, char *why,
                      size_t why_len) {
  memset(m, 0, sizeof *m);
  int rc = set_device(ctx, why, why_len);
  if (rc < 0 || (rc = drv_ready(why, why_len)) < 0)
    return rc;
  if (fd < 0 || size == 0) {
    fze_why(why, why_len, "a VMM import needs a descriptor and a size above 0");
    return FZ_EINVAL;
  }
  CUmemGenericAllocationHandle h = 0;
  CUresult r = drv.import(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (r != CUDA_SUCCESS)
    return drv_fail(r, "cuMemImportFromShareableHandle", FZ_EINVAL, why, why_len);
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  size_t gran = 0;
  CUdeviceptr va = 0;
  r = drv.props(&prop, h);
  if (r != CUDA_SUCCESS) {
    rc = drv_fail(r, "cuMemGetAllocationPropertiesFromHandle", FZ_EINVAL, why, why_len);
    goto err_handle;
  }
  r = drv.gran(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS || gran == 0) {
    rc = drv_fail(r, "cuMemGetAllocationGranularity", FZ_ECUDA, why, why_len);
    goto err_handle;
  }
  if (size % gran != 0) {
    fze_why(why, why_len, "the VMM size %zu is not a multiple of the allocation "
            "granularity (%zu bytes): give the size passed to cuMemCreate", size, gran);
    rc = FZ_EINVAL;
    goto err_handle;
  }
  r = drv.reserve(&va, size, gran, 0, 0);
  if (r != CUDA_SUCCESS) {
    rc = drv_fail(r, "cuMemAddressReserve", FZ_ECUDA, why, why_len);
    goto err_handle;
  }
  /* cuMemMap refuses a size past the allocation's end, so a mapping that
   * succeeds covers real memory only. */
  r = drv.map(va, size, 0, h, 0);
  if (r != CUDA_SUCCESS) {
    rc = drv_fail(r, "cuMemMap (is the size the one given to cuMemCreate?)", FZ_EINVAL, why,
                  why_len);
    goto err_reserve;
  }
  CUmemAccessDesc acc;
  memset(&acc, 0, sizeof acc);
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = ctx->device;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = drv.access(va, size, &acc, 1);
  if (r != CUDA_SUCCESS) {
    rc = drv_fail(r, "cuMemSetAccess", FZ_EINVAL, why, why_len);
    goto err_map;
  }
  /* What the driver says the mapping spans; never more than was mapped. */
  CUdeviceptr b = 0;
  size_t n = 0;
  if (drv.range(&b, &n, va) == CUDA_SUCCESS && b == va && n < size)
    size = n;
  m->kind = FZ_GPU_MEM_VMM;
  m->base = (void *)(uintptr_t)va;
  m->size = size;
  m->vmm_handle = (uint64_t)h;
  m->vmm_mapped = size;
  return 0;

err_map:
  drv.unmap(va, size);
err_reserve:
  drv.addr_free(va, size);
err_handle:
  drv.release(h);
  return rc;
}

/* ---- memory pools ------------------------------------------------------- */

int fz_gpu_pool_import(fz_gpu_ctx *ctx, int fd, fz_gpu_mempool *pool, char *why,
                       size_t why_len) {
  *pool = NULL;
  int rc = set_device(ctx, why, why_len);
  if (rc < 0)
    return rc;
  cudaMemPool_t p = NULL;
  cudaError_t e = cudaMemPoolImportFromShareableHandle(
      &p, (void *)(uintptr_t)fd, cudaMemHandleTypePosixFileDescriptor, 0);
  if (e != cudaSuccess)
    return rt_fail(e, "cudaMemPoolImportFromShareableHandle", why, why_len);
  /* An imported pool's memory is not necessarily accessible from this
   * process's device until access is granted here. */
  struct cudaMemLocation loc;
  memset(&loc, 0, sizeof loc);
  loc.type = cudaMemLocationTypeDevice;
  loc.id = ctx->device;
  enum cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  e = cudaMemPoolGetAccess(&flags, p, &loc);
  if (e == cudaSuccess && flags != cudaMemAccessFlagsProtReadWrite) {
    struct cudaMemAccessDesc desc;
    memset(&desc, 0, sizeof desc);
    desc.location = loc;
    desc.flags = cudaMemAccessFlagsProtReadWrite;
    e = cudaMemPoolSetAccess(p, &desc, 1);
  }
  if (e != cudaSuccess) {
    rc = rt_fail(e, "cudaMemPoolSetAccess", why, why_len);
    cudaMemPoolDestroy(p);
    cudaGetLastError();
    return rc;
  }
  *pool = p;
  return 0;
}

void fz_gpu_pool_close(fz_gpu_ctx *ctx, fz_gpu_mempool pool) {
  if (pool == NULL)
    return;
  cudaSetDevice(ctx->device);
  cudaMemPoolDestroy(pool);
  cudaGetLastError();
}

int fz_gpu_import_pool_ptr(fz_gpu_ctx *ctx, fz_gpu_mempool pool, const void *export_data,
                           fz_gpu_mapping *m, char *why, size_t why_len) {
  memset(m, 0, sizeof *m);
  int rc = set_device(ctx, why, why_len);
  if (rc < 0 || (rc = drv_ready(why, why_len)) < 0)
    return rc;
  struct cudaMemPoolPtrExportData data;
  memcpy(&data, export_data, sizeof data);
  void *p = NULL;
  cudaError_t e = cudaMemPoolImportPointer(&p, pool, &data);
  if (e != cudaSuccess)
    return rt_fail(e, "cudaMemPoolImportPointer", why, why_len);
  /* The range the driver reports for a pool allocation starts at it; were
   * it ever a larger block of the pool holding it, the bound is that
   * block's end, which is still the client's memory mapped here. */
  void *b = NULL;
  size_t size = 0;
  rc = fz_gpu_address_range(p, &b, &size, why, why_len);
  if (rc == 0 && (char *)b != (char *)p) {
    size_t skip = (size_t)((char *)p - (char *)b);
    if ((char *)p < (char *)b || skip >= size) {
      fze_why(why, why_len, "cudaMemPoolImportPointer: %p is outside the range reported "
              "for it", p);
      rc = FZ_ECUDA;
    } else {
      size -= skip;
    }
  }
  if (rc < 0) {
    cudaFree(p);
    cudaGetLastError();
    return rc;
  }
  m->kind = FZ_GPU_MEM_POOL;
  m->base = p;
  m->size = size;
  return 0;
}

/* ---- closing ------------------------------------------------------------ */

void fz_gpu_unmap(fz_gpu_ctx *ctx, fz_gpu_mapping *m) {
  if (m == NULL || m->base == NULL) {
    if (m != NULL)
      memset(m, 0, sizeof *m);
    return;
  }
  cudaSetDevice(ctx->device);
  switch (m->kind) {
  case FZ_GPU_MEM_IPC:
    cudaIpcCloseMemHandle(m->base);
    break;
  case FZ_GPU_MEM_VMM: {
    /* The mapping exists, so drv_ready() succeeded when it was made. */
    CUdeviceptr va = (CUdeviceptr)(uintptr_t)m->base;
    drv.unmap(va, m->vmm_mapped);
    drv.addr_free(va, m->vmm_mapped);
    drv.release((CUmemGenericAllocationHandle)m->vmm_handle);
    break;
  }
  case FZ_GPU_MEM_POOL:
    /* Frees the import; the exporter's allocation stays its own.  Stream
     * ordered on the legacy stream, which does not wait for the context's
     * (non-blocking) streams: cudaFree would wait for the whole device,
     * and so for any job still running on another stream. */
    if (cudaFreeAsync(m->base, 0) != cudaSuccess) {
      cudaGetLastError();
      cudaFree(m->base);
    }
    /* The exporter may free its allocation only after this free has
     * completed (the caller answers "release" after this returns). */
    cudaStreamSynchronize(0);
    break;
  }
  cudaGetLastError();
  memset(m, 0, sizeof *m);
}

/* ---- events ------------------------------------------------------------- */

int fz_gpu_event_open(fz_gpu_ctx *ctx, const void *handle, fz_gpu_event *ev, char *why,
                      size_t why_len) {
  *ev = NULL;
  int rc = set_device(ctx, why, why_len);
  if (rc < 0)
    return rc;
  cudaIpcEventHandle_t h;
  memcpy(&h, handle, sizeof h);
  cudaEvent_t e = NULL;
  cudaError_t ce = cudaIpcOpenEventHandle(&e, h);
  if (ce != cudaSuccess)
    return rt_fail(ce, "cudaIpcOpenEventHandle", why, why_len);
  *ev = e;
  return 0;
}

void fz_gpu_event_close(fz_gpu_ctx *ctx, fz_gpu_event ev) {
  if (ev == NULL)
    return;
  cudaSetDevice(ctx->device);
  cudaEventDestroy(ev);
  cudaGetLastError();
}

int fz_gpu_stream_wait_event(fz_gpu_stream stream, fz_gpu_event ev, char *why,
                             size_t why_len) {
  cudaError_t e = cudaStreamWaitEvent(stream, ev, 0);
  if (e == cudaSuccess)
    return 0;
  cudaGetLastError();
  return fzk_cuda_error((int)e, "cudaStreamWaitEvent (wait_event)", why, why_len);
}

int fz_gpu_event_record(fz_gpu_event ev, fz_gpu_stream stream, char *why, size_t why_len) {
  cudaError_t e = cudaEventRecord(ev, stream);
  if (e == cudaSuccess)
    return 0;
  cudaGetLastError();
  return fzk_cuda_error((int)e, "cudaEventRecord (done_event)", why, why_len);
}
