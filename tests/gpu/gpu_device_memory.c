/*
 * gpu_device_memory.c - every way device memory reaches fzd, with fzd on
 * the GPU backend as a real process (started with fork+exec) and this
 * process as its client: VMM buffers (cuMemCreate with a POSIX descriptor
 * handle, the export passed with the job through libfzclient), buffers of
 * an IPC-capable pool (cudaMallocFromPoolAsync, pool export descriptor and
 * pointer export data), legacy IPC buffers with events (the input written
 * on a stream that fzd must wait for, a completion event fzd records),
 * offsets inside allocations, outputs too small (refused, nothing
 * written), ranges past the end, a client that frees and allocates again
 * at the same address (the new data's archive, never the stale mapping's),
 * the release method (the memory of a released import goes back to the
 * GPU), eight client processes at once with every kind, and a client that
 * dies with jobs in flight on its device memory, and detector frames from
 * chunks in device memory.  Every archive and list is compared byte for
 * byte with the CPU engine's.
 *
 * The driver API (VMM, buffer ids) is reached through the runtime's entry
 * points, so that the suite still starts, and skips, on a machine without
 * a driver.  CUDA is initialised in each test only after fzd has started.
 */
#include <criterion/criterion.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fz.h"
#include "fzclient.h"
#include "fzd_harness.h"
#include "gpu_fzd.h"
#include "wire.h"

#define DRV_OK(call) cr_assert_eq((int)(call), 0, "%s failed", #call)

/* ---- the driver API, through the runtime ---------------------------------- */

static struct {
  CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                     unsigned long long);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*addr_free)(CUdeviceptr, size_t);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  CUresult (*gran)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
  CUresult (*export_fd)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                        unsigned long long);
  CUresult (*attr)(void *, CUpointer_attribute, CUdeviceptr);
} drv;

static void *entry(const char *name) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found;
  CUDA_OK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found));
  cr_assert(found == cudaDriverEntryPointSuccess && fn != NULL, "no %s", name);
  return fn;
}

/* Brings CUDA up in this process (after fzd started) and finds the driver
 * calls; writes device 0's UUID as nvidia-smi prints it. */
static void cuda_up(char *uuid, size_t len) {
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaFree(0));
  drv.create = entry("cuMemCreate");
  drv.release = entry("cuMemRelease");
  drv.reserve = entry("cuMemAddressReserve");
  drv.addr_free = entry("cuMemAddressFree");
  drv.map = entry("cuMemMap");
  drv.unmap = entry("cuMemUnmap");
  drv.access = entry("cuMemSetAccess");
  drv.gran = entry("cuMemGetAllocationGranularity");
  drv.export_fd = entry("cuMemExportToShareableHandle");
  drv.attr = entry("cuPointerGetAttribute");
  struct cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
  snprintf(uuid, len,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
           u[12], u[13], u[14], u[15]);
}

static uint64_t buffer_id(const void *p) {
  unsigned long long id = 0;
  DRV_OK(drv.attr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)(uintptr_t)p));
  cr_assert_neq(id, 0ull);
  return id;
}

/* A VMM allocation of this process, mapped here and exported as a POSIX
 * file descriptor. */
typedef struct vmm_buf {
  CUmemGenericAllocationHandle h;
  CUdeviceptr va;
  size_t size, gran;
  int fd;
  uint64_t id;
} vmm_buf;

static void *vmm_ptr(const vmm_buf *v, size_t off) { return (char *)(uintptr_t)v->va + off; }

static void vmm_alloc(vmm_buf *v, size_t want) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  DRV_OK(drv.gran(&v->gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  v->size = (want + v->gran - 1) / v->gran * v->gran;
  DRV_OK(drv.create(&v->h, v->size, &prop, 0));
  DRV_OK(drv.reserve(&v->va, v->size, v->gran, 0, 0));
  DRV_OK(drv.map(v->va, v->size, 0, v->h, 0));
  CUmemAccessDesc acc;
  memset(&acc, 0, sizeof acc);
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = 0;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  DRV_OK(drv.access(v->va, v->size, &acc, 1));
  int fd = -1;
  DRV_OK(drv.export_fd(&fd, v->h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  cr_assert_geq(fd, 0);
  v->fd = fd;
  v->id = buffer_id(vmm_ptr(v, 0));
}

static void vmm_free(vmm_buf *v) {
  close(v->fd);
  DRV_OK(drv.unmap(v->va, v->size));
  DRV_OK(drv.addr_free(v->va, v->size));
  DRV_OK(drv.release(v->h));
  memset(v, 0, sizeof *v);
}

/* An IPC-capable pool of device 0 and its export descriptor. */
static cudaMemPool_t pool_make(int *fd) {
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool;
  CUDA_OK(cudaMemPoolCreate(&pool, &props));
  CUDA_OK(cudaMemPoolExportToShareableHandle(fd, pool, cudaMemHandleTypePosixFileDescriptor,
                                             0));
  cr_assert_geq(*fd, 0);
  return pool;
}

static void *pool_alloc(cudaMemPool_t pool, size_t n, struct cudaMemPoolPtrExportData *ex) {
  void *p = NULL;
  CUDA_OK(cudaMallocFromPoolAsync(&p, n, pool, 0));
  CUDA_OK(cudaStreamSynchronize(0));
  CUDA_OK(cudaMemPoolExportPointer(ex, p));
  return p;
}

/* ---- the daemon, fields and the oracle ------------------------------------ */

static float *field_f32(size_t n, float phase) {
  float *v = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++)
    v[i] = (float)(50.0 * sin(0.0007 * (double)i + phase) * cos(0.013 * (double)(i % 1024)) +
                   0.001 * (double)((i * 31) % 97));
  return v;
}

#define ROWS 512
#define COLS 1024
#define NVAL ((size_t)ROWS * COLS)
#define NBYTES (NVAL * sizeof(float))
#define EB 1e-4

static void job_f32(fz_job *j, const char *uuid) {
  fz_job_init(j);
  j->dtype = "f32";
  j->ndims = 2;
  j->shape[0] = ROWS;
  j->shape[1] = COLS;
  j->eb = EB;
  j->mode = "rel";
  j->device = uuid;
}

/* The CPU engine's archive of v (NVAL values, REL EB); free() it. */
static void *cpu_archive(const float *v, size_t *len) {
  fz_params p;
  fz_params_init(&p);
  p.dtype = FZ_F32;
  p.ndims = 2;
  p.dims[0] = ROWS;
  p.dims[1] = COLS;
  p.eb = EB;
  p.eb_mode = FZ_EB_REL;
  fz_plan *plan;
  char why[256];
  cr_assert_eq(fz_plan_create(&p, &plan, why, sizeof why), 0, "%s", why);
  size_t cap = fz_plan_compress_bound(plan);
  void *arc = malloc(cap);
  cr_assert_eq(fz_plan_compress(plan, v, NBYTES, arc, cap, len), 0);
  fz_plan_destroy(plan);
  return arc;
}

static void assert_same(const void *a, size_t a_len, const void *b, size_t b_len,
                        const char *what) {
  cr_assert_eq(a_len, b_len, "%s: %zu bytes, the CPU engine's %zu", what, a_len, b_len);
  cr_assert(memcmp(a, b, a_len) == 0, "%s: bytes differ from the CPU engine's", what);
}

/* The len bytes at device address d equal the CPU archive. */
static void assert_device_same(const void *d, size_t len, const void *cpu, size_t cpu_len,
                               const char *what) {
  void *h = malloc(len ? len : 1);
  CUDA_OK(cudaMemcpy(h, d, len, cudaMemcpyDeviceToHost));
  assert_same(h, len, cpu, cpu_len, what);
  free(h);
}

/* NVAL floats at device address d are within the archive's bound of v. */
static void assert_device_within(const void *d, const float *v, const void *cpu,
                                 size_t cpu_len) {
  float *back = malloc(NBYTES);
  CUDA_OK(cudaMemcpy(back, d, NBYTES, cudaMemcpyDeviceToHost));
  fz_archive_info info;
  cr_assert_eq(fz_archive_inspect(cpu, cpu_len, &info), 0);
  fz_compare_result cmp;
  cr_assert_eq(fz_compare(FZ_F32, v, back, NVAL, &cmp), 0);
  cr_assert_leq(cmp.max_abs_error, info.eb_abs, "max error %g over the bound %g",
                cmp.max_abs_error, info.eb_abs);
  cr_assert_eq(cmp.nonfinite_mismatches, 0);
  free(back);
}

/* Every byte of the device buffer still holds `fill`. */
static void assert_device_fill(const void *d, size_t len, unsigned char fill,
                               const char *what) {
  unsigned char *h = malloc(len);
  CUDA_OK(cudaMemcpy(h, d, len, cudaMemcpyDeviceToHost));
  size_t i = 0;
  while (i < len && h[i] == fill)
    i++;
  free(h);
  cr_assert_eq(i, len, "%s: byte %zu was written", what, i);
}

static void assert_needs(const fz_result *r, size_t bytes) {
  char needs[64];
  snprintf(needs, sizeof needs, "needs %zu bytes", bytes);
  cr_assert(strstr(r->message, needs) != NULL, "%s", r->message);
}

/* ---- VMM ---------------------------------------------------------------------- */

Test(device_memory, vmm_buffers_in_place, .timeout = 300) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 2");
  fz_client *c = connect_gpu(h);
  char uuid[64];
  cuda_up(uuid, sizeof uuid);
  float *v = field_f32(NVAL, 0.4f);
  size_t cpu_len;
  void *cpu = cpu_archive(v, &cpu_len);

  const size_t in_off = 1 << 16, arc_off = 4096, arc_cap = NBYTES + (1 << 20);
  vmm_buf in, arc, back;
  vmm_alloc(&in, in_off + NBYTES);
  vmm_alloc(&arc, arc_off + arc_cap);
  vmm_alloc(&back, NBYTES);
  CUDA_OK(upload_for_fzd(vmm_ptr(&in, in_off), v, NBYTES));

  /* VMM in, inline out. */
  fz_job j;
  job_f32(&j, uuid);
  j.in_vmm_fd = in.fd;
  j.in_vmm_size = in.size;
  j.in_offset = in_off;
  j.in_buffer_id = in.id;
  fz_result r;
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
  assert_same(r.data, r.data_len, cpu, cpu_len, "VMM input, inline archive");
  fz_client_free(r.data);

  /* VMM in, VMM out at an offset (twice: the second finds both cached). */
  for (int round = 0; round < 2; round++) {
    j.out_vmm_fd = arc.fd;
    j.out_vmm_size = arc.size;
    j.out_offset = arc_off;
    j.out_length = arc_cap;
    j.out_buffer_id = arc.id;
    j.verify = round;
    cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
    cr_assert_null(r.data);
    cr_assert_eq(r.bytes_out, cpu_len);
    if (round == 1)
      cr_assert(r.has_max_error && r.max_error <= r.eb_abs);
    assert_device_same(vmm_ptr(&arc, arc_off), cpu_len, cpu, cpu_len, "VMM archive");
  }

  /* VMM archive in, VMM data out, within the bound. */
  fz_job d;
  fz_job_init(&d);
  d.device = uuid;
  d.in_vmm_fd = arc.fd;
  d.in_vmm_size = arc.size;
  d.in_offset = arc_off;
  d.in_length = cpu_len;
  d.in_buffer_id = arc.id;
  d.out_vmm_fd = back.fd;
  d.out_vmm_size = back.size;
  d.out_length = NBYTES;
  d.out_buffer_id = back.id;
  cr_assert_eq(fz_client_decompress(c, &d, &r), 0, "%s", r.message);
  cr_assert_eq(r.bytes_out, NBYTES);
  assert_device_within(vmm_ptr(&back, 0), v, cpu, cpu_len);

  /* Past the end of the real allocation. */
  fz_job bad = j;
  bad.out_vmm_fd = -1;
  bad.out_length = 0;
  bad.out_offset = 0;
  bad.verify = 0;
  bad.in_offset = in.size - NBYTES + 4;
  cr_assert_eq(fz_client_compress(c, &bad, &r), FZ_ESIZE, "%s", r.message);
  cr_assert(strstr(r.message, "past the end") != NULL, "%s", r.message);
  /* A size that is not the allocation's: not a multiple of the
   * granularity, or larger than the allocation. */
  bad.in_offset = in_off;
  bad.in_vmm_size = in.size + 4096;
  cr_assert_eq(fz_client_compress(c, &bad, &r), FZ_EINVAL, "%s", r.message);
  cr_assert(strstr(r.message, "granularity") != NULL, "%s", r.message);
  bad.in_vmm_size = in.size + in.gran;
  cr_assert_eq(fz_client_compress(c, &bad, &r), FZ_EINVAL, "%s", r.message);
  /* A size below the allocation's: the driver maps whole allocations only
   * (cuMemMap answers CUDA_ERROR_NOT_SUPPORTED), and fzd says which size
   * it wants. */
  if (in.size > in.gran) {
    bad.in_vmm_size = in.gran;
    cr_assert_eq(fz_client_compress(c, &bad, &r), FZ_EINVAL, "%s", r.message);
    cr_assert(strstr(r.message, "cuMemCreate") != NULL, "%s", r.message);
  }

  /* Too small outputs: refused before anything is written. */
  CUDA_OK(cudaMemset(vmm_ptr(&arc, 0), 0xa5, arc.size));
  CUDA_OK(cudaDeviceSynchronize());
  fz_job small = j;
  small.verify = 0;
  small.out_length = 64;
  cr_assert_eq(fz_client_compress(c, &small, &r), FZ_ENOSPC, "%s", r.message);
  assert_needs(&r, cpu_len);
  assert_device_fill(vmm_ptr(&arc, 0), arc.size, 0xa5, "VMM output after a refused job");
  small.out_length = cpu_len; /* exactly the archive: enough */
  cr_assert_eq(fz_client_compress(c, &small, &r), 0, "%s", r.message);
  assert_device_same(vmm_ptr(&arc, arc_off), cpu_len, cpu, cpu_len, "exact-size archive");
  CUDA_OK(cudaMemset(vmm_ptr(&back, 0), 0x5a, back.size));
  CUDA_OK(cudaDeviceSynchronize());
  fz_job dsmall = d;
  dsmall.out_length = NBYTES - 4;
  cr_assert_eq(fz_client_decompress(c, &dsmall, &r), FZ_ENOSPC, "%s", r.message);
  assert_needs(&r, NBYTES);
  assert_device_fill(vmm_ptr(&back, 0), back.size, 0x5a, "VMM output after a refused job");

  /* Without a buffer id the import serves its one job, and still works. */
  fz_job noid = j;
  noid.out_vmm_fd = -1;
  noid.out_length = 0;
  noid.out_offset = 0;
  noid.verify = 0;
  noid.in_buffer_id = 0;
  for (int round = 0; round < 2; round++) {
    cr_assert_eq(fz_client_compress(c, &noid, &r), 0, "%s", r.message);
    assert_same(r.data, r.data_len, cpu, cpu_len, "VMM input without a buffer id");
    fz_client_free(r.data);
  }

  fz_client_close(c);
  stop_fzd(h);
  vmm_free(&in);
  vmm_free(&arc);
  vmm_free(&back);
  free(cpu);
  free(v);
}

/* ---- pools -------------------------------------------------------------------- */

Test(device_memory, pool_buffers_in_place, .timeout = 300) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 2");
  fz_client *c = connect_gpu(h);
  char uuid[64];
  cuda_up(uuid, sizeof uuid);
  float *v = field_f32(NVAL, 1.3f);
  size_t cpu_len;
  void *cpu = cpu_archive(v, &cpu_len);

  int pool_fd = -1;
  cudaMemPool_t pool = pool_make(&pool_fd);
  const size_t in_off = 8192, arc_off = 512, arc_cap = NBYTES + (1 << 20);
  struct cudaMemPoolPtrExportData ex_in, ex_arc, ex_back;
  void *d_in = pool_alloc(pool, in_off + NBYTES, &ex_in);
  void *d_arc = pool_alloc(pool, arc_off + arc_cap, &ex_arc);
  void *d_back = pool_alloc(pool, NBYTES, &ex_back);
  CUDA_OK(upload_for_fzd((char *)d_in + in_off, v, NBYTES));

  fz_job j;
  job_f32(&j, uuid);
  j.in_pool_fd = pool_fd;
  j.in_pool_ptr = &ex_in;
  j.in_offset = in_off;
  j.in_buffer_id = buffer_id(d_in);
  fz_result r;
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
  assert_same(r.data, r.data_len, cpu, cpu_len, "pool input, inline archive");
  fz_client_free(r.data);

  /* Both sides in the one pool, twice (pool and pointers cached). */
  for (int round = 0; round < 2; round++) {
    j.out_pool_fd = pool_fd;
    j.out_pool_ptr = &ex_arc;
    j.out_offset = arc_off;
    j.out_length = arc_cap;
    j.out_buffer_id = buffer_id(d_arc);
    cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
    cr_assert_eq(r.bytes_out, cpu_len);
    assert_device_same((char *)d_arc + arc_off, cpu_len, cpu, cpu_len, "pool archive");
  }

  fz_job d;
  fz_job_init(&d);
  d.device = uuid;
  d.in_pool_fd = pool_fd;
  d.in_pool_ptr = &ex_arc;
  d.in_offset = arc_off;
  d.in_length = cpu_len;
  d.in_buffer_id = buffer_id(d_arc);
  d.out_pool_fd = pool_fd;
  d.out_pool_ptr = &ex_back;
  d.out_length = NBYTES;
  d.out_buffer_id = buffer_id(d_back);
  cr_assert_eq(fz_client_decompress(c, &d, &r), 0, "%s", r.message);
  cr_assert_eq(r.bytes_out, NBYTES);
  assert_device_within(d_back, v, cpu, cpu_len);

  /* The range is checked against the allocation's real size. */
  fz_job bad = j;
  bad.out_pool_fd = -1;
  bad.out_length = 0;
  bad.out_offset = 0;
  bad.in_offset = in_off + (64u << 20);
  cr_assert_eq(fz_client_compress(c, &bad, &r), FZ_ESIZE, "%s", r.message);
  cr_assert(strstr(r.message, "past the end") != NULL, "%s", r.message);
  /* Export data that names nothing in the pool. */
  struct cudaMemPoolPtrExportData junk;
  for (size_t i = 0; i < sizeof junk.reserved; i++)
    junk.reserved[i] = (unsigned char)(i * 29 + 7);
  bad.in_offset = 0;
  bad.in_pool_ptr = &junk;
  bad.in_buffer_id = 12345;
  cr_assert_lt(fz_client_compress(c, &bad, &r), 0, "made-up export data was accepted");

  /* Too small outputs: nothing written. */
  CUDA_OK(cudaMemset(d_arc, 0xa5, arc_off + arc_cap));
  CUDA_OK(cudaDeviceSynchronize());
  fz_job small = j;
  small.out_length = cpu_len - 1;
  cr_assert_eq(fz_client_compress(c, &small, &r), FZ_ENOSPC, "%s", r.message);
  assert_needs(&r, cpu_len);
  assert_device_fill(d_arc, arc_off + arc_cap, 0xa5, "pool output after a refused job");
  /* The archive again, for the decompression below. */
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
  CUDA_OK(cudaMemset(d_back, 0x5a, NBYTES));
  CUDA_OK(cudaDeviceSynchronize());
  fz_job dsmall = d;
  dsmall.out_length = NBYTES / 2;
  cr_assert_eq(fz_client_decompress(c, &dsmall, &r), FZ_ENOSPC, "%s", r.message);
  assert_needs(&r, NBYTES);
  assert_device_fill(d_back, NBYTES, 0x5a, "pool output after a refused job");

  /* And the daemon serves on. */
  j.out_pool_fd = -1;
  j.out_length = 0;
  j.out_offset = 0;
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "after the errors: %s", r.message);
  assert_same(r.data, r.data_len, cpu, cpu_len, "archive after the errors");
  fz_client_free(r.data);

  /* fzd's imports go before the allocations do. */
  fz_client_close(c);
  stop_fzd(h);
  CUDA_OK(cudaFree(d_in));
  CUDA_OK(cudaFree(d_arc));
  CUDA_OK(cudaFree(d_back));
  close(pool_fd);
  CUDA_OK(cudaMemPoolDestroy(pool));
  free(cpu);
  free(v);
}

/* ---- events ------------------------------------------------------------------- */

static void CUDART_CB sleep_ms_cb(void *arg) {
  int ms = (int)(intptr_t)arg;
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void ipc_event(cudaEvent_t *ev, cudaIpcEventHandle_t *h) {
  CUDA_OK(cudaEventCreateWithFlags(ev, cudaEventInterprocess | cudaEventDisableTiming));
  CUDA_OK(cudaIpcGetEventHandle(h, *ev));
}

Test(device_memory, events_order_the_job_without_host_waits, .timeout = 300) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 2");
  fz_client *c = connect_gpu(h);
  char uuid[64];
  cuda_up(uuid, sizeof uuid);
  float *v = field_f32(NVAL, 2.2f);
  size_t cpu_len;
  void *cpu = cpu_archive(v, &cpu_len);

  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *hv;
  CUDA_OK(cudaMallocHost((void **)&hv, NBYTES));
  memcpy(hv, v, NBYTES);
  const size_t cap = NBYTES + (1 << 20);
  void *d_in, *d_arc, *d_arc2, *d_back;
  CUDA_OK(cudaMalloc(&d_in, NBYTES));
  CUDA_OK(cudaMalloc(&d_arc, cap));
  CUDA_OK(cudaMalloc(&d_arc2, cap));
  CUDA_OK(cudaMalloc(&d_back, NBYTES));
  CUDA_OK(cudaMemset(d_in, 0, NBYTES));
  CUDA_OK(cudaDeviceSynchronize());
  cudaIpcMemHandle_t h_in, h_arc, h_arc2, h_back;
  CUDA_OK(cudaIpcGetMemHandle(&h_in, d_in));
  CUDA_OK(cudaIpcGetMemHandle(&h_arc, d_arc));
  CUDA_OK(cudaIpcGetMemHandle(&h_arc2, d_arc2));
  CUDA_OK(cudaIpcGetMemHandle(&h_back, d_back));
  cudaEvent_t ev_wait, ev_done;
  cudaIpcEventHandle_t he_wait, he_done;
  ipc_event(&ev_wait, &he_wait);
  ipc_event(&ev_done, &he_done);

  /* The input is written on s only after 300 ms; the wait event follows. */
  CUDA_OK(cudaLaunchHostFunc(s, sleep_ms_cb, (void *)(intptr_t)300));
  CUDA_OK(cudaMemcpyAsync(d_in, hv, NBYTES, cudaMemcpyHostToDevice, s));
  CUDA_OK(cudaEventRecord(ev_wait, s));
  cr_assert_eq(cudaEventQuery(ev_wait), cudaErrorNotReady, "the input was written already");

  fz_job j;
  job_f32(&j, uuid);
  j.in_ipc = &h_in;
  j.out_ipc = &h_arc;
  j.out_length = cap;
  j.wait_event = &he_wait;
  j.done_event = &he_done;
  fz_result r;
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
  cr_assert_eq(r.bytes_out, cpu_len);
  /* fzd recorded the done event before it answered (a record of another
   * process does not show in this process's cudaEventQuery while a record
   * of its own is pending, so the test records none): the client orders
   * its own work after the job through the event. */
  cr_assert_eq(cudaEventQuery(ev_done), cudaSuccess, "done_event is not complete");
  void *h_arcbuf;
  CUDA_OK(cudaMallocHost(&h_arcbuf, cpu_len));
  CUDA_OK(cudaStreamWaitEvent(s, ev_done, 0));
  CUDA_OK(cudaMemcpyAsync(h_arcbuf, d_arc, cpu_len, cudaMemcpyDeviceToHost, s));
  CUDA_OK(cudaStreamSynchronize(s));
  /* Had fzd not waited, it would have compressed the zeros. */
  assert_same(h_arcbuf, cpu_len, cpu, cpu_len, "archive of the input written after 300 ms");

  /* Decompression: the archive is copied into d_arc2 on s after 300 ms. */
  CUDA_OK(cudaMemset(d_arc2, 0, cap));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaLaunchHostFunc(s, sleep_ms_cb, (void *)(intptr_t)300));
  CUDA_OK(cudaMemcpyAsync(d_arc2, d_arc, cpu_len, cudaMemcpyDeviceToDevice, s));
  CUDA_OK(cudaEventRecord(ev_wait, s));
  fz_job d;
  fz_job_init(&d);
  d.device = uuid;
  d.in_ipc = &h_arc2;
  d.in_length = cpu_len;
  d.out_ipc = &h_back;
  d.out_length = NBYTES;
  d.wait_event = &he_wait;
  d.done_event = &he_done;
  cr_assert_eq(fz_client_decompress(c, &d, &r), 0, "%s", r.message);
  cr_assert_eq(r.bytes_out, NBYTES);
  CUDA_OK(cudaStreamWaitEvent(s, ev_done, 0));
  CUDA_OK(cudaStreamSynchronize(s));
  assert_device_within(d_back, v, cpu, cpu_len);

  /* Events with host buffers, on a cached event: inline in, inline out. */
  CUDA_OK(cudaEventRecord(ev_wait, s));
  fz_job hj;
  job_f32(&hj, uuid);
  hj.in = v;
  hj.in_len = NBYTES;
  hj.wait_event = &he_wait;
  hj.done_event = &he_done;
  cr_assert_eq(fz_client_compress(c, &hj, &r), 0, "%s", r.message);
  assert_same(r.data, r.data_len, cpu, cpu_len, "host buffers with events");
  fz_client_free(r.data);
  /* A made-up event handle is refused; the connection serves on. */
  unsigned char junk[64];
  for (size_t i = 0; i < sizeof junk; i++)
    junk[i] = (unsigned char)(i * 13 + 5);
  hj.wait_event = junk;
  cr_assert_lt(fz_client_compress(c, &hj, &r), 0, "a made-up event was accepted");
  cr_assert_eq(fz_client_ping(c, NULL), 0);

  fz_client_close(c);
  stop_fzd(h);
  CUDA_OK(cudaEventDestroy(ev_wait));
  CUDA_OK(cudaEventDestroy(ev_done));
  CUDA_OK(cudaFree(d_in));
  CUDA_OK(cudaFree(d_arc));
  CUDA_OK(cudaFree(d_arc2));
  CUDA_OK(cudaFree(d_back));
  CUDA_OK(cudaFreeHost(hv));
  CUDA_OK(cudaFreeHost(h_arcbuf));
  CUDA_OK(cudaStreamDestroy(s));
  free(cpu);
  free(v);
}

/* ---- reuse of an address ------------------------------------------------------- */

/* A client frees an allocation fzd has imported and allocates again, and
 * likely gets the same address: the job on the new allocation compresses
 * the new data, whatever fzd's cache held for the old one. */
Test(device_memory, reallocated_address_reaches_the_new_data, .timeout = 300) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 2");
  fz_client *c = connect_gpu(h);
  char uuid[64];
  cuda_up(uuid, sizeof uuid);
  float *v1 = field_f32(NVAL, 0.1f), *v2 = field_f32(NVAL, 2.9f);
  size_t len1, len2;
  void *cpu1 = cpu_archive(v1, &len1), *cpu2 = cpu_archive(v2, &len2);
  fz_result r;

  /* VMM. */
  vmm_buf a, b;
  vmm_alloc(&a, NBYTES);
  CUDA_OK(upload_for_fzd(vmm_ptr(&a, 0), v1, NBYTES));
  fz_job j;
  job_f32(&j, uuid);
  j.in_vmm_fd = a.fd;
  j.in_vmm_size = a.size;
  j.in_buffer_id = a.id;
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
  assert_same(r.data, r.data_len, cpu1, len1, "first VMM allocation");
  fz_client_free(r.data);
  uint64_t old_id = a.id;
  CUdeviceptr old_va = a.va;
  vmm_free(&a);
  vmm_alloc(&b, NBYTES);
  cr_log_info("VMM: new allocation at %s address", b.va == old_va ? "the same" : "another");
  cr_assert_neq(b.id, old_id);
  CUDA_OK(upload_for_fzd(vmm_ptr(&b, 0), v2, NBYTES));
  j.in_vmm_fd = b.fd;
  j.in_vmm_size = b.size;
  j.in_buffer_id = b.id;
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
  assert_same(r.data, r.data_len, cpu2, len2, "VMM allocation at a reused address");
  fz_client_free(r.data);
  vmm_free(&b);

  /* Legacy IPC (cudaMalloc of the same size, freed in between). */
  void *d1 = NULL, *d2 = NULL;
  CUDA_OK(cudaMalloc(&d1, NBYTES));
  CUDA_OK(upload_for_fzd(d1, v1, NBYTES));
  cudaIpcMemHandle_t h1, h2;
  CUDA_OK(cudaIpcGetMemHandle(&h1, d1));
  job_f32(&j, uuid);
  j.in_ipc = &h1;
  j.in_buffer_id = buffer_id(d1);
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
  assert_same(r.data, r.data_len, cpu1, len1, "first cudaMalloc allocation");
  fz_client_free(r.data);
  CUDA_OK(cudaFree(d1));
  CUDA_OK(cudaMalloc(&d2, NBYTES));
  cr_log_info("IPC: new allocation at %s address", d2 == d1 ? "the same" : "another");
  CUDA_OK(upload_for_fzd(d2, v2, NBYTES));
  CUDA_OK(cudaIpcGetMemHandle(&h2, d2));
  cr_log_info("IPC: the new handle's bytes are %s the old one's",
              memcmp(&h1, &h2, sizeof h1) == 0 ? "the same as" : "not");
  j.in_ipc = &h2;
  j.in_buffer_id = buffer_id(d2);
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
  assert_same(r.data, r.data_len, cpu2, len2, "cudaMalloc allocation at a reused address");
  fz_client_free(r.data);

  fz_client_close(c);
  stop_fzd(h);
  CUDA_OK(cudaFree(d2));
  free(cpu1);
  free(cpu2);
  free(v1);
  free(v2);
}

/* ---- release ------------------------------------------------------------------- */

/* A compress of the NVAL floats in a device buffer over the bare wire: kind
 * 0 VMM (fd, size), 1 pool (fd, export data); buffer id 0 is not sent.
 * Returns the reply's archive copied into a malloc'ed buffer. */
static void *wire_compress(wire *w, uint32_t msgid, const char *uuid, int kind, int fd,
                           uint64_t vmm_size, const void *pool_ptr, uint64_t id,
                           size_t *len) {
  msgpack_packer *pk = wire_begin(w, msgid, "compress", 9 + (id ? 1 : 0));
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, "f32");
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, 2);
  msgpack_pack_uint64(pk, ROWS);
  msgpack_pack_uint64(pk, COLS);
  fzp_pack_key(pk, "eb");
  msgpack_pack_double(pk, EB);
  fzp_pack_key(pk, "mode");
  fzp_pack_key(pk, "rel");
  fzp_pack_key(pk, "device");
  fzp_pack_key(pk, uuid);
  fzp_pack_key(pk, "nfds");
  msgpack_pack_uint64(pk, 1);
  fzp_pack_key(pk, "in_length");
  msgpack_pack_uint64(pk, NBYTES);
  if (kind == 0) {
    fzp_pack_key(pk, "in_vmm_fd");
    msgpack_pack_uint64(pk, 0);
    fzp_pack_key(pk, "in_vmm_size");
    msgpack_pack_uint64(pk, vmm_size);
  } else {
    fzp_pack_key(pk, "in_pool_fd");
    msgpack_pack_uint64(pk, 0);
    fzp_pack_key(pk, "in_pool_ptr");
    msgpack_pack_bin_with_body(pk, pool_ptr, 64);
  }
  if (id) {
    fzp_pack_key(pk, "in_buffer_id");
    msgpack_pack_uint64(pk, id);
  }
  cr_assert_eq(wire_send(w, &fd, 1), 0);
  fzp_message m;
  cr_assert_eq(wire_recv(w, &m, 120000), 0);
  cr_assert_eq(m.msgid, msgid);
  cr_assert_eq(wire_code(&m), 0, "compress %u refused", msgid);
  const void *arc;
  uint32_t n;
  cr_assert_eq(fzp_get_bin(&m.result, "archive", &arc, &n), 1);
  void *copy = malloc(n);
  memcpy(copy, arc, n);
  *len = n;
  fzp_message_free(&m);
  return copy;
}

/* release over the bare wire; returns "released". */
static uint64_t wire_release(wire *w, uint32_t msgid, const uint64_t *ids, size_t n) {
  msgpack_packer *pk = wire_begin(w, msgid, "release", 1);
  if (ids == NULL) {
    fzp_pack_key(pk, "all");
    msgpack_pack_true(pk);
  } else {
    fzp_pack_key(pk, "buffer_ids");
    msgpack_pack_array(pk, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
      msgpack_pack_uint64(pk, ids[i]);
  }
  cr_assert_eq(wire_send(w, NULL, 0), 0);
  fzp_message m;
  cr_assert_eq(wire_recv(w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), 0, "release refused");
  uint64_t released = 0;
  cr_assert_eq(fzp_get_u64(&m.result, "released", &released), 1);
  fzp_message_free(&m);
  return released;
}

static size_t gpu_used(void) {
  size_t free_b = 0, total = 0;
  CUDA_OK(cudaMemGetInfo(&free_b, &total));
  return total - free_b;
}

Test(device_memory, release_closes_imports, .timeout = 300) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 1");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  char uuid[64];
  cuda_up(uuid, sizeof uuid);
  float *v1 = field_f32(NVAL, 0.7f), *v2 = field_f32(NVAL, 1.9f);
  size_t len1, len2, n;
  void *cpu1 = cpu_archive(v1, &len1), *cpu2 = cpu_archive(v2, &len2);

  /* A 1 GiB VMM allocation: while fzd holds its import, freeing it here
   * gives no memory back to the GPU; once released, it does. */
  const size_t big = (size_t)1 << 30;
  vmm_buf a;
  vmm_alloc(&a, big);
  CUDA_OK(upload_for_fzd(vmm_ptr(&a, 0), v1, NBYTES));
  void *arc = wire_compress(&w, 10, uuid, 0, a.fd, a.size, NULL, a.id, &n);
  assert_same(arc, n, cpu1, len1, "VMM archive over the wire");
  free(arc);
  uint64_t id = a.id;
  size_t held = gpu_used();
  vmm_free(&a);
  size_t after_free = gpu_used();
  cr_assert_geq(after_free + big / 4, held,
                "freed while fzd holds the import, %zu bytes went back", held - after_free);
  cr_assert_eq(wire_release(&w, 11, &id, 1), 1);
  size_t now = gpu_used();
  for (int i = 0; i < 50 && now + big / 2 > held; i++) {
    usleep(100 * 1000);
    now = gpu_used();
  }
  cr_assert_leq(now + big / 2, held, "released, only %zu bytes went back",
                held > now ? held - now : 0);
  cr_assert_eq(wire_release(&w, 12, &id, 1), 0, "released twice");

  /* A pool allocation, released, freed and allocated again from the same
   * pool (the same place, very likely the same export data). */
  int pool_fd = -1;
  cudaMemPool_t pool = pool_make(&pool_fd);
  struct cudaMemPoolPtrExportData ex1, ex2;
  void *p1 = pool_alloc(pool, NBYTES, &ex1);
  CUDA_OK(upload_for_fzd(p1, v1, NBYTES));
  uint64_t id1 = buffer_id(p1);
  arc = wire_compress(&w, 20, uuid, 1, pool_fd, 0, &ex1, id1, &n);
  assert_same(arc, n, cpu1, len1, "pool archive over the wire");
  free(arc);
  cr_assert_eq(wire_release(&w, 21, &id1, 1), 1);
  CUDA_OK(cudaFreeAsync(p1, 0));
  CUDA_OK(cudaStreamSynchronize(0));
  void *p2 = pool_alloc(pool, NBYTES, &ex2);
  cr_log_info("pool: new allocation at %s address, export data %s",
              p2 == p1 ? "the same" : "another",
              memcmp(&ex1, &ex2, sizeof ex1) == 0 ? "the same" : "not the same");
  CUDA_OK(upload_for_fzd(p2, v2, NBYTES));
  uint64_t id2 = buffer_id(p2);
  cr_assert_neq(id2, id1);
  arc = wire_compress(&w, 22, uuid, 1, pool_fd, 0, &ex2, id2, &n);
  assert_same(arc, n, cpu2, len2, "pool allocation at a reused place");
  free(arc);
  /* The same allocation without a buffer id: another key, and the entry
   * of the same export data with an id is stale; still the right data. */
  arc = wire_compress(&w, 23, uuid, 1, pool_fd, 0, &ex2, 0, &n);
  assert_same(arc, n, cpu2, len2, "pool allocation without a buffer id");
  free(arc);
  cr_assert_eq(wire_release(&w, 24, NULL, 0), 1, "release all");
  cr_assert_eq(wire_release(&w, 25, NULL, 0), 0, "nothing left");
  /* After a release the next job imports again. */
  arc = wire_compress(&w, 26, uuid, 1, pool_fd, 0, &ex2, id2, &n);
  assert_same(arc, n, cpu2, len2, "pool allocation imported again");
  free(arc);
  cr_assert_eq(wire_release(&w, 27, &id2, 1), 1);

  wire_close(&w);
  stop_fzd(h);
  CUDA_OK(cudaFree(p2));
  close(pool_fd);
  CUDA_OK(cudaMemPoolDestroy(pool));
  free(cpu1);
  free(cpu2);
  free(v1);
  free(v2);
}

/* ---- other client processes ------------------------------------------------------ */

/* A client process of its own (forked before this process touches CUDA),
 * which reports through its exit status, never through Criterion: 0 when
 * every job gave the CPU engine's archive and decompressed within the
 * bound, else the step that failed.  Its input is a VMM allocation, its
 * archive goes to a pool allocation, and it decompresses into a cudaMalloc
 * buffer by legacy IPC: every kind at once, from every client. */
static int client_process(const char *sock, int index, int jobs) {
  if (cudaSetDevice(0) != cudaSuccess || cudaFree(0) != cudaSuccess)
    return 2;
  char uuid[64];
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
    return 3;
  const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
  snprintf(uuid, sizeof uuid,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
           u[12], u[13], u[14], u[15]);
  void *fn[7];
  const char *names[7] = {"cuMemCreate", "cuMemAddressReserve", "cuMemMap", "cuMemSetAccess",
                          "cuMemGetAllocationGranularity", "cuMemExportToShareableHandle",
                          "cuPointerGetAttribute"};
  for (int i = 0; i < 7; i++) {
    enum cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion(names[i], &fn[i], 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      return 4;
  }
  CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                     unsigned long long) = fn[0];
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) = fn[1];
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long) = fn[2];
  CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t) = fn[3];
  CUresult (*gran)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags) =
      fn[4];
  CUresult (*export_fd)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                        unsigned long long) = fn[5];
  CUresult (*attr)(void *, CUpointer_attribute, CUdeviceptr) = fn[6];
  CUmemAllocationProp p;
  memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  size_t g = 0;
  if (gran(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || g == 0)
    return 5;
  size_t vsize = (NBYTES + g - 1) / g * g;
  CUmemGenericAllocationHandle vh;
  CUdeviceptr va;
  CUmemAccessDesc acc;
  memset(&acc, 0, sizeof acc);
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  int vfd = -1;
  if (create(&vh, vsize, &p, 0) != CUDA_SUCCESS || reserve(&va, vsize, g, 0, 0) != CUDA_SUCCESS ||
      map(va, vsize, 0, vh, 0) != CUDA_SUCCESS || access(va, vsize, &acc, 1) != CUDA_SUCCESS ||
      export_fd(&vfd, vh, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_SUCCESS)
    return 6;
  unsigned long long vid = 0, aid = 0;
  struct cudaMemPoolProps pp;
  memset(&pp, 0, sizeof pp);
  pp.allocType = cudaMemAllocationTypePinned;
  pp.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  pp.location.type = cudaMemLocationTypeDevice;
  cudaMemPool_t pool;
  int pfd = -1;
  const size_t cap = NBYTES + (1 << 20);
  void *d_arc = NULL, *d_back = NULL;
  struct cudaMemPoolPtrExportData ex;
  cudaIpcMemHandle_t hb;
  if (cudaMemPoolCreate(&pool, &pp) != cudaSuccess ||
      cudaMemPoolExportToShareableHandle(&pfd, pool, cudaMemHandleTypePosixFileDescriptor, 0) !=
          cudaSuccess ||
      cudaMallocFromPoolAsync(&d_arc, cap, pool, 0) != cudaSuccess ||
      cudaStreamSynchronize(0) != cudaSuccess || cudaMemPoolExportPointer(&ex, d_arc) != cudaSuccess ||
      cudaMalloc(&d_back, NBYTES) != cudaSuccess || cudaIpcGetMemHandle(&hb, d_back) != cudaSuccess ||
      attr(&vid, CU_POINTER_ATTRIBUTE_BUFFER_ID, va) != CUDA_SUCCESS ||
      attr(&aid, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)(uintptr_t)d_arc) != CUDA_SUCCESS)
    return 7;

  fz_client_opts o;
  fz_client_opts_init(&o);
  o.timeout_ms = 300000;
  fz_client *c = NULL;
  char why[256];
  if (fz_client_connect(&c, sock, &o, why, sizeof why) != 0)
    return 8;
  float *v = field_f32(NVAL, 0.37f * (float)index);
  float *back = malloc(NBYTES);
  unsigned char *arc = malloc(cap);
  int rc = 0;
  for (int k = 0; k < jobs && rc == 0; k++) {
    /* A slightly different field each job, so a stale or crossed buffer
     * would show. */
    v[k % NVAL] += 1.0f;
    size_t cpu_len = 0;
    fz_params prm;
    fz_params_init(&prm);
    prm.dtype = FZ_F32;
    prm.ndims = 2;
    prm.dims[0] = ROWS;
    prm.dims[1] = COLS;
    prm.eb = EB;
    prm.eb_mode = FZ_EB_REL;
    fz_plan *plan = NULL;
    if (fz_plan_create(&prm, &plan, why, sizeof why) != 0)
      return 9;
    void *cpu = malloc(fz_plan_compress_bound(plan));
    if (fz_plan_compress(plan, v, NBYTES, cpu, fz_plan_compress_bound(plan), &cpu_len) != 0)
      return 10;
    fz_plan_destroy(plan);
    if (upload_for_fzd((void *)(uintptr_t)va, v, NBYTES) != cudaSuccess)
      return 11;
    fz_job j;
    job_f32(&j, uuid);
    j.in_vmm_fd = vfd;
    j.in_vmm_size = vsize;
    j.in_buffer_id = vid;
    j.out_buffer_id = aid;
    j.out_pool_fd = pfd;
    j.out_pool_ptr = &ex;
    j.out_length = cap;
    fz_result r;
    if (fz_client_compress(c, &j, &r) != 0)
      rc = 12;
    else if (r.bytes_out != cpu_len ||
             cudaMemcpy(arc, d_arc, cpu_len, cudaMemcpyDeviceToHost) != cudaSuccess ||
             memcmp(arc, cpu, cpu_len) != 0) {
      size_t at = 0;
      while (r.bytes_out == cpu_len && at < cpu_len && arc[at] == ((unsigned char *)cpu)[at])
        at++;
      fprintf(stderr, "client %d, job %d: %zu bytes, the CPU's %zu, first difference at %zu\n",
              index, k, (size_t)r.bytes_out, cpu_len, at);
      rc = 13;
    }
    fz_job d;
    fz_job_init(&d);
    d.device = uuid;
    d.in_pool_fd = pfd;
    d.in_pool_ptr = &ex;
    d.in_length = cpu_len;
    d.in_buffer_id = aid;
    d.out_ipc = &hb;
    d.out_length = NBYTES;
    fz_archive_info info;
    fz_compare_result cmp;
    if (rc == 0 && (fz_client_decompress(c, &d, &r) != 0 || r.bytes_out != NBYTES))
      rc = 14;
    if (rc == 0 && (cudaMemcpy(back, d_back, NBYTES, cudaMemcpyDeviceToHost) != cudaSuccess ||
                    fz_archive_inspect(cpu, cpu_len, &info) != 0 ||
                    fz_compare(FZ_F32, v, back, NVAL, &cmp) != 0 ||
                    !(cmp.max_abs_error <= info.eb_abs)))
      rc = 15;
    free(cpu);
  }
  fz_client_close(c);
  free(v);
  free(back);
  free(arc);
  return rc;
}

/* Waits for a child; its exit status, or -1 when it did not exit. */
static int child_status(pid_t pid) {
  int st = 0;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
    return -1;
  return WEXITSTATUS(st);
}

Test(device_memory, eight_clients_at_once, .timeout = 600) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 4");
  pid_t pids[8];
  for (int i = 0; i < 8; i++) {
    pids[i] = fork();
    cr_assert_geq(pids[i], 0);
    if (pids[i] == 0)
      _exit(client_process(fzd_harness_socket_path(h), i, 6));
  }
  for (int i = 0; i < 8; i++) {
    int st = child_status(pids[i]);
    cr_assert_eq(st, 0, "client %d failed at step %d", i, st);
  }
  fz_client *c = connect_gpu(h);
  fz_server_stats s;
  cr_assert_eq(fz_client_stats(c, &s), 0);
  cr_assert_eq(s.jobs_failed, 0);
  cr_assert_geq(s.jobs_done, 8 * 6 * 2);
  fz_client_close(c);
  stop_fzd(h);
}

/* A client process that submits a long job on its device memory and dies
 * without waiting: fzd finishes (or cancels) the job, closes the
 * connection's imports after it, and serves the next client. */
Test(device_memory, client_dies_mid_job, .timeout = 300) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 1");
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    if (cudaSetDevice(0) != cudaSuccess)
      _exit(2);
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
      _exit(3);
    char uuid[64];
    const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
    snprintf(uuid, sizeof uuid,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
             u[12], u[13], u[14], u[15]);
    /* 512 MiB, verified: long enough to be running when the client dies. */
    const size_t rows = 16384, cols = 8192, bytes = rows * cols * sizeof(float);
    void *d_in = NULL, *d_out = NULL;
    if (cudaMalloc(&d_in, bytes) != cudaSuccess || cudaMalloc(&d_out, bytes + (64 << 20)) !=
                                                       cudaSuccess ||
        cudaMemset(d_in, 0x3c, bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
      _exit(4);
    cudaIpcMemHandle_t hi, ho;
    if (cudaIpcGetMemHandle(&hi, d_in) != cudaSuccess ||
        cudaIpcGetMemHandle(&ho, d_out) != cudaSuccess)
      _exit(5);
    fz_client *c = NULL;
    char why[256];
    if (fz_client_connect(&c, fzd_harness_socket_path(h), NULL, why, sizeof why) != 0)
      _exit(6);
    fz_job j;
    fz_job_init(&j);
    j.dtype = "f32";
    j.ndims = 2;
    j.shape[0] = rows;
    j.shape[1] = cols;
    j.eb = 1e-4;
    j.verify = 1;
    j.device = uuid;
    j.in_ipc = &hi;
    j.out_ipc = &ho;
    j.out_length = bytes + (64 << 20);
    for (int k = 0; k < 4; k++)
      if (fz_client_submit(c, FZ_OP_COMPRESS, &j, NULL, NULL, NULL) != 0)
        _exit(7);
    _exit(0); /* no wait, no close: the process dies with its jobs in flight */
  }
  cr_assert_eq(child_status(pid), 0, "the dying client could not submit");
  fz_client *c = connect_gpu(h);
  fz_server_status st;
  cr_assert_eq(fz_client_status(c, &st), 0);
  for (int i = 0; i < 600 && st.connections > 1; i++) {
    usleep(100 * 1000);
    cr_assert_eq(fz_client_status(c, &st), 0);
  }
  cr_assert_eq(st.connections, 1, "the dead client's connection is still open");
  char uuid[64];
  cuda_up(uuid, sizeof uuid);
  float *v = field_f32(NVAL, 0.9f);
  size_t cpu_len;
  void *cpu = cpu_archive(v, &cpu_len);
  fz_job j;
  job_f32(&j, uuid);
  j.in = v;
  j.in_len = NBYTES;
  fz_result r;
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
  assert_same(r.data, r.data_len, cpu, cpu_len, "the next client's archive");
  fz_client_free(r.data);
  fz_client_close(c);
  stop_fzd(h);
  free(cpu);
  free(v);
}

#ifdef FZT_FRAMES
#include "fz_frames.h"

enum { FR_NI = 300, FR_NJ = 200, FR_NPX = FR_NI * FR_NJ, FR_NF = 8, FR_HALF = FR_NF / 2 };

/* Eight u16 frames of FR_NPX pixels as LZ4 chunks, one after another on
 * the host and in device memory, and the CPU engine's lists (cut 50) of
 * the last four. */
typedef struct frames_case {
  uint8_t *chunks;
  void *d;
  uint64_t offs[FR_NF], lens[FR_NF], len;
  uint16_t cv[FR_HALF * FR_NPX];
  uint32_t ci[FR_HALF * FR_NPX];
  size_t cc[FR_HALF];
} frames_case;

static frames_case *frames_case_make(void) {
  frames_case *k = calloc(1, sizeof *k);
  char why[256];
  static uint16_t frame[FR_NPX];
  size_t bound = fz_bslz4_bound(FZ_BSLZ4_LZ4, FR_NPX, 2, 0);
  k->chunks = malloc(FR_NF * bound);
  for (size_t f = 0; f < FR_NF; f++) {
    for (size_t i = 0; i < FR_NPX; i++)
      frame[i] = (uint16_t)((i * 7 + f * 13) % 97 == 0 ? 100 + f : i % 3);
    int64_t len = fz_bslz4_encode(FZ_BSLZ4_LZ4, frame, FR_NPX, 2, 0, 0, k->chunks + k->len, bound,
                                  why, sizeof why);
    cr_assert_gt(len, 0, "%s", why);
    k->offs[f] = k->len, k->lens[f] = (uint64_t)len, k->len += (uint64_t)len;
  }
  CUDA_OK(cudaMalloc(&k->d, k->len));
  CUDA_OK(upload_for_fzd(k->d, k->chunks, k->len));
  fz_frames_params fp = {.dtype = FZ_U16, .npixels = FR_NPX, .codec = FZ_BSLZ4_LZ4};
  fz_frames *fr;
  cr_assert_eq(fz_frames_create(&fp, &fr, why, sizeof why), 0, "%s", why);
  int cs[FR_HALF];
  fz_frames_batch cb = {.base = k->chunks,
                        .offsets = k->offs + FR_HALF,
                        .lengths = k->lens + FR_HALF,
                        .nframes = FR_HALF,
                        .cut = 50,
                        .values = k->cv,
                        .indices = k->ci,
                        .cap = FR_NPX,
                        .counts = k->cc,
                        .status = cs};
  cr_assert_eq(fz_frames_sparse_batch(fr, &cb, 0, why, sizeof why), 0, "%s", why);
  fz_frames_destroy(fr);
  for (size_t i = 0; i < FR_HALF; i++)
    cr_assert_gt(k->cc[i], 0);
  return k;
}

static void frames_case_free(frames_case *k) {
  CUDA_OK(cudaFree(k->d));
  free(k->chunks);
  free(k);
}

/* The request for the case's last four frames from its device memory. */
static fz_frames_request frames_case_request(const frames_case *k) {
  return (fz_frames_request){.dtype = "u16",
                             .ndims = 2,
                             .shape = {FR_NI, FR_NJ},
                             .cut = 50,
                             .offsets = k->offs + FR_HALF,
                             .lengths = k->lens + FR_HALF,
                             .nframes = FR_HALF,
                             .d_data = k->d,
                             .d_len = k->len};
}

/* Frames from chunks in device memory, the request naming chunks past the
 * first ones of the buffer (offsets from d_data, d_len the whole buffer):
 * the CPU engine's lists, where fzd once took the request's chunk bytes
 * for the buffer's length. */
Test(device_memory, frames_past_the_first_chunks_of_a_buffer, .timeout = 300) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 2");
  fz_client *c = connect_gpu(h);
  char uuid[64];
  cuda_up(uuid, sizeof uuid);
  frames_case *k = frames_case_make();
  fz_frames_request q = frames_case_request(k);
  fz_frame_result res[FR_HALF];
  cr_assert_eq(fz_client_frames(c, &q, res), 0, "%s", fz_client_errmsg(c));
  for (size_t i = 0; i < FR_HALF; i++) {
    cr_assert_eq(res[i].status, 0, "frame %zu: %s", FR_HALF + i, res[i].message);
    cr_assert_eq(res[i].listed, k->cc[i], "frame %zu lists %zu, the CPU %zu", FR_HALF + i,
                 res[i].listed, k->cc[i]);
    cr_assert_eq(memcmp(res[i].values, k->cv + i * FR_NPX, k->cc[i] * 2), 0, "frame %zu",
                 FR_HALF + i);
    cr_assert_eq(memcmp(res[i].indices, k->ci + i * FR_NPX, k->cc[i] * 4), 0, "frame %zu",
                 FR_HALF + i);
  }
  fz_client_frame_results_free(res, FR_HALF);
  frames_case_free(k);
  fz_client_close(c);
  stop_fzd(h);
}

/* Lists into device memory: each frame's values and indices at the places
 * the reply names, laid out as fzclient.h says (values, indices from the
 * next multiple of 4, the next frame from the next multiple of 8, zeros
 * between), the CPU engine's; an output one byte short of the last frame
 * fails that frame alone with ENOSPC, the others written. */
Test(device_memory, frames_into_device_memory, .timeout = 300) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 2");
  fz_client *c = connect_gpu(h);
  char uuid[64];
  cuda_up(uuid, sizeof uuid);
  frames_case *k = frames_case_make();
  size_t need = 0;
  for (size_t i = 0; i < FR_HALF; i++) {
    need = (need + 7) & ~(size_t)7;
    need = ((need + k->cc[i] * 2 + 3) & ~(size_t)3) + k->cc[i] * 4;
  }
  uint8_t *d_out = NULL, *got = malloc(need + 64);
  CUDA_OK(cudaMalloc((void **)&d_out, need + 64));
  CUDA_OK(cudaMemset(d_out, 0xa5, need + 64));
  for (int short_by = 0; short_by <= 1; short_by++) {
    fz_frames_request q = frames_case_request(k);
    q.d_out = d_out;
    q.d_out_len = need - (size_t)short_by;
    fz_frame_result res[FR_HALF];
    cr_assert_eq(fz_client_frames(c, &q, res), 0, "%s", fz_client_errmsg(c));
    CUDA_OK(cudaMemcpy(got, d_out, need + 64, cudaMemcpyDeviceToHost));
    size_t end = 0;
    for (size_t i = 0; i < FR_HALF; i++) {
      if (short_by && i == FR_HALF - 1) {
        cr_assert_eq(res[i].status, FZ_ENOSPC, "frame %zu: %d", FR_HALF + i, res[i].status);
        break;
      }
      cr_assert_eq(res[i].status, 0, "frame %zu: %s", FR_HALF + i, res[i].message);
      cr_assert_eq(res[i].listed, k->cc[i]);
      cr_assert_null(res[i].values);
      size_t at = (end + 7) & ~(size_t)7, ix = (at + k->cc[i] * 2 + 3) & ~(size_t)3;
      cr_assert_eq(res[i].values_at, at, "frame %zu", FR_HALF + i);
      cr_assert_eq(res[i].indices_at, ix, "frame %zu", FR_HALF + i);
      for (size_t b = end; b < at; b++)
        cr_assert_eq(got[b], 0, "byte %zu before frame %zu", b, FR_HALF + i);
      for (size_t b = at + k->cc[i] * 2; b < ix; b++)
        cr_assert_eq(got[b], 0, "byte %zu in frame %zu", b, FR_HALF + i);
      cr_assert_eq(memcmp(got + at, k->cv + i * FR_NPX, k->cc[i] * 2), 0, "frame %zu", FR_HALF + i);
      cr_assert_eq(memcmp(got + ix, k->ci + i * FR_NPX, k->cc[i] * 4), 0, "frame %zu", FR_HALF + i);
      end = ix + k->cc[i] * 4;
    }
    if (!short_by)
      cr_assert_eq(end, need);
    fz_client_frame_results_free(res, FR_HALF);
  }
  CUDA_OK(cudaFree(d_out));
  free(got);
  frames_case_free(k);
  fz_client_close(c);
  stop_fzd(h);
}
#endif
