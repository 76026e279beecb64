/*
 * gpu_client_device.c - libfzclient's device-pointer calls against fzd on
 * the GPU backend, two processes (fzd started with fork+exec, this one the
 * client): cudaMalloc memory at offsets inside its allocations, VMM memory
 * (cuMemCreate with POSIX descriptors), memory of an exportable pool, the
 * kinds that cannot be shared refused with the right message (default-pool
 * cudaMallocAsync, managed, VMM without descriptors, host memory), memory
 * freed and allocated again at the same address, eight threads sharing one
 * client, and the stream path (the daemon waits for the caller's stream
 * through an interprocess event; the stream waits for the daemon's writes).
 * Every archive is compared byte for byte with the CPU engine's
 * fz_plan_compress() output, every decompression checked against the bound.
 *
 * CUDA is initialised in each test only after fzd has started (nothing forks
 * after CUDA is up).  Exits 77 (skipped) without a GPU (gpu_main.c).
 */
#include <criterion/criterion.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fz.h"
#include "fzclient.h"
#include "fzd_harness.h"
#include "gpu_fzd.h"

static float *field_f32(size_t n, float phase) {
  float *v = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++)
    v[i] = (float)(40.0 * sin(0.003 * (double)i + phase) + 0.002 * (double)(i % 89));
  return v;
}

static void job_f32(fz_job *j, size_t n, double eb) {
  fz_job_init(j);
  j->dtype = "f32";
  j->ndims = 1;
  j->shape[0] = n;
  j->eb = eb;
  j->mode = "rel";
}

/* The CPU engine's archive of the same input (the oracle); free() it. */
static void *cpu_archive(const float *v, size_t n, double eb, size_t *len, double *eb_abs) {
  fz_params p;
  fz_params_init(&p);
  p.dtype = FZ_F32;
  p.ndims = 1;
  p.dims[0] = n;
  p.eb = eb;
  p.eb_mode = FZ_EB_REL;
  fz_plan *plan;
  char why[256];
  cr_assert_eq(fz_plan_create(&p, &plan, why, sizeof why), 0, "%s", why);
  size_t cap = fz_plan_compress_bound(plan);
  void *arc = malloc(cap);
  cr_assert_eq(fz_plan_compress(plan, v, n * sizeof(float), arc, cap, len), 0);
  fz_plan_destroy(plan);
  fz_archive_info info;
  cr_assert_eq(fz_archive_inspect(arc, *len, &info), 0);
  *eb_abs = info.eb_abs;
  return arc;
}

/* The archive at d_arc equals the CPU engine's, byte for byte. */
static void assert_device_archive(const void *d_arc, size_t len, const void *cpu,
                                  size_t cpu_len, const char *what) {
  cr_assert_eq(len, cpu_len, "%s: %zu bytes, the CPU engine's %zu", what, len, cpu_len);
  unsigned char *h = malloc(len);
  CUDA_OK(cudaMemcpy(h, d_arc, len, cudaMemcpyDeviceToHost));
  size_t i = 0;
  while (i < len && h[i] == ((const unsigned char *)cpu)[i])
    i++;
  free(h);
  cr_assert_eq(i, len, "%s: differs from the CPU engine's archive at byte %zu of %zu", what, i,
               len);
}

/* The array at d_back is within eb_abs of v. */
static void assert_device_within(const void *d_back, const float *v, size_t n, double eb_abs,
                                 const char *what) {
  float *h = malloc(n * sizeof(float));
  CUDA_OK(cudaMemcpy(h, d_back, n * sizeof(float), cudaMemcpyDeviceToHost));
  fz_compare_result cmp;
  cr_assert_eq(fz_compare(FZ_F32, v, h, n, &cmp), 0);
  cr_assert_leq(cmp.max_abs_error, eb_abs, "%s: max error %.9g over the bound %.9g", what,
                cmp.max_abs_error, eb_abs);
  cr_assert_eq(cmp.nonfinite_mismatches, 0);
  free(h);
}

/* Compresses n floats at d_in into d_arc, compares with the oracle,
 * decompresses into d_back and checks the bound. */
static void round_trip(fz_client *c, const float *v, size_t n, double eb, const void *cpu,
                       size_t cpu_len, double eb_abs, void *d_in, void *d_arc, size_t arc_cap,
                       void *d_back, void *stream, const char *what) {
  fz_job j;
  job_f32(&j, n, eb);
  j.verify = 1;
  fz_result r;
  int rc = fz_client_compress_device(c, &j, d_in, n * sizeof(float), d_arc, arc_cap, stream, &r);
  cr_assert_eq(rc, 0, "%s: compress: %s: %s", what, fz_err_name(rc), r.message);
  cr_assert_null(r.data);
  cr_assert(r.has_max_error && r.max_error <= r.eb_abs, "%s: max error %g, bound %g", what,
            r.max_error, r.eb_abs);
  if (stream)
    CUDA_OK(cudaStreamSynchronize((cudaStream_t)stream));
  assert_device_archive(d_arc, r.bytes_out, cpu, cpu_len, what);
  rc = fz_client_decompress_device(c, d_arc, cpu_len, d_back, n * sizeof(float), stream, &r);
  cr_assert_eq(rc, 0, "%s: decompress: %s: %s", what, fz_err_name(rc), r.message);
  cr_assert_eq(r.bytes_out, n * sizeof(float));
  cr_assert_str_eq(r.dtype, "f32");
  cr_assert_eq(r.ndims, 1);
  cr_assert_eq(r.shape[0], n);
  if (stream)
    CUDA_OK(cudaStreamSynchronize((cudaStream_t)stream));
  assert_device_within(d_back, v, n, eb_abs, what);
}

Test(client_device, cudamalloc_at_offsets, .timeout = 300) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 2");
  fz_client *c = connect_gpu(h);
  CUDA_OK(cudaSetDevice(0));
  const size_t n = 3u << 18, bytes = n * sizeof(float);
  const double eb = 1e-3;
  float *v = field_f32(n, 0.4f);
  size_t cpu_len;
  double eb_abs;
  void *cpu = cpu_archive(v, n, eb, &cpu_len, &eb_abs);

  /* Input, archive and output each inside a larger allocation, and the
   * archive and output in the same one. */
  const size_t in_off = 3 << 12, arc_off = 512, back_off = bytes + (1 << 20);
  char *d_in, *d_io;
  CUDA_OK(cudaMalloc((void **)&d_in, in_off + bytes + 4096));
  CUDA_OK(cudaMalloc((void **)&d_io, back_off + bytes));
  CUDA_OK(cudaMemcpy(d_in + in_off, v, bytes, cudaMemcpyHostToDevice));
  for (int round = 0; round < 2; round++) /* the second finds the exports cached */
    round_trip(c, v, n, eb, cpu, cpu_len, eb_abs, d_in + in_off, d_io + arc_off,
               back_off - arc_off, d_io + back_off, NULL, "cudaMalloc at offsets");

  /* Too small an output: refused by the daemon with the size needed, and
   * nothing written. */
  CUDA_OK(cudaMemset(d_io, 0xa5, back_off));
  CUDA_OK(cudaDeviceSynchronize());
  fz_job j;
  job_f32(&j, n, eb);
  fz_result r;
  int rc = fz_client_compress_device(c, &j, d_in + in_off, bytes, d_io + arc_off, 64, NULL, &r);
  cr_assert_eq(rc, FZ_ENOSPC, "got %s: %s", fz_err_name(rc), r.message);
  char needs[64];
  snprintf(needs, sizeof needs, "needs %zu bytes", cpu_len);
  cr_assert(strstr(r.message, needs) != NULL, "%s", r.message);
  unsigned char *hb = malloc(back_off);
  CUDA_OK(cudaMemcpy(hb, d_io, back_off, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < back_off; i++)
    cr_assert_eq(hb[i], 0xa5, "byte %zu of the refused output was written", i);
  free(hb);

  /* A range past its allocation is refused before anything is sent. */
  rc = fz_client_compress_device(c, &j, d_in + in_off + 8192, bytes, d_io + arc_off,
                                 back_off - arc_off, NULL, &r);
  cr_assert_eq(rc, FZ_EINVAL, "got %s: %s", fz_err_name(rc), r.message);
  cr_assert(strstr(r.message, "runs past the end of its allocation") != NULL, "%s", r.message);

  /* Asynchronous: several in flight at once, answers in any order. */
  uint64_t ids[4];
  char *d_arcs;
  const size_t slot = bytes + (1 << 20);
  CUDA_OK(cudaMalloc((void **)&d_arcs, 4 * slot));
  for (int i = 0; i < 4; i++)
    cr_assert_eq(fz_client_submit_device(c, FZ_OP_COMPRESS, &j, d_in + in_off, bytes,
                                         d_arcs + (size_t)i * slot, slot, NULL, NULL,
                                         (void *)(intptr_t)i, &ids[i]), 0,
                 "%s", fz_client_errmsg(c));
  for (int got = 0; got < 4;) {
    fz_completion done;
    rc = fz_client_wait(c, -1, &done);
    cr_assert_eq(rc, 1);
    cr_assert_eq(done.result.status, 0, "%s", done.result.message);
    int i = (int)(intptr_t)done.user;
    cr_assert_eq(done.id, ids[i]);
    assert_device_archive(d_arcs + (size_t)i * slot, done.result.bytes_out, cpu, cpu_len,
                          "asynchronous job");
    got++;
  }
  cr_assert_eq(fz_client_release_device(c, d_in), 0, "%s", fz_client_errmsg(c));
  cr_assert_eq(fz_client_release_device(c, NULL), 0, "%s", fz_client_errmsg(c));
  /* After a release the next job exports anew. */
  round_trip(c, v, n, eb, cpu, cpu_len, eb_abs, d_in + in_off, d_io + arc_off,
             back_off - arc_off, d_io + back_off, NULL, "after the release");
  fz_client_close(c);
  stop_fzd(h);
  CUDA_OK(cudaFree(d_in));
  CUDA_OK(cudaFree(d_io));
  CUDA_OK(cudaFree(d_arcs));
  free(cpu);
  free(v);
}

/* The driver's VMM calls, resolved at run time as the library does: a
 * test linked with libcuda.so.1 could not even start (and report itself
 * skipped) where there is no driver. */
static struct {
  __typeof__(cuMemGetAllocationGranularity) *granularity;
  __typeof__(cuMemCreate) *create;
  __typeof__(cuMemAddressReserve) *reserve;
  __typeof__(cuMemMap) *map;
  __typeof__(cuMemSetAccess) *set_access;
  __typeof__(cuMemUnmap) *unmap;
  __typeof__(cuMemAddressFree) *address_free;
  __typeof__(cuMemRelease) *release;
} vmm;

static void resolve_vmm(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(h, "%s", dlerror());
  struct {
    const char *name;
    void *slot;
  } fns[] = {{"cuMemGetAllocationGranularity", &vmm.granularity},
             {"cuMemCreate", &vmm.create},
             {"cuMemAddressReserve", &vmm.reserve},
             {"cuMemMap", &vmm.map},
             {"cuMemSetAccess", &vmm.set_access},
             {"cuMemUnmap", &vmm.unmap},
             {"cuMemAddressFree", &vmm.address_free},
             {"cuMemRelease", &vmm.release}};
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
    void *sym = dlsym(h, fns[i].name);
    cr_assert_not_null(sym, "the driver lacks %s", fns[i].name);
    memcpy(fns[i].slot, &sym, sizeof sym);
  }
}

/* cuMemCreate memory of size bytes (rounded up to the granularity), mapped
 * and readable and writable by device 0. */
typedef struct vmm_buf {
  CUdeviceptr ptr;
  size_t size;
  CUmemGenericAllocationHandle handle;
} vmm_buf;

static void vmm_alloc(vmm_buf *b, size_t bytes, CUmemAllocationHandleType types) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = types;
  size_t gran = 0;
  CUDA_OK(vmm.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  b->size = (bytes + gran - 1) / gran * gran;
  CUDA_OK(vmm.create(&b->handle, b->size, &prop, 0));
  CUDA_OK(vmm.reserve(&b->ptr, b->size, 0, 0, 0));
  CUDA_OK(vmm.map(b->ptr, b->size, 0, b->handle, 0));
  CUmemAccessDesc acc;
  memset(&acc, 0, sizeof acc);
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = 0;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUDA_OK(vmm.set_access(b->ptr, b->size, &acc, 1));
}

static void vmm_free(vmm_buf *b) {
  CUDA_OK(vmm.unmap(b->ptr, b->size));
  CUDA_OK(vmm.address_free(b->ptr, b->size));
  CUDA_OK(vmm.release(b->handle));
}

Test(client_device, vmm_buffers, .timeout = 300) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 2");
  fz_client *c = connect_gpu(h);
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaFree(NULL)); /* the primary context, current for the driver calls */
  resolve_vmm();
  const size_t n = 1u << 20, bytes = n * sizeof(float);
  const double eb = 1e-4;
  float *v = field_f32(n, 1.3f);
  size_t cpu_len;
  double eb_abs;
  void *cpu = cpu_archive(v, n, eb, &cpu_len, &eb_abs);
  const size_t in_off = 1 << 16;
  vmm_buf in, arc, back;
  vmm_alloc(&in, in_off + bytes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  vmm_alloc(&arc, bytes + (1 << 20), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  vmm_alloc(&back, bytes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  char *d_in = (char *)(uintptr_t)in.ptr;
  CUDA_OK(cudaMemcpy(d_in + in_off, v, bytes, cudaMemcpyHostToDevice));
  for (int round = 0; round < 2; round++)
    round_trip(c, v, n, eb, cpu, cpu_len, eb_abs, d_in + in_off, (void *)(uintptr_t)arc.ptr,
               arc.size, (void *)(uintptr_t)back.ptr, NULL, "VMM");

  /* VMM memory made without POSIX descriptors cannot be exported. */
  vmm_buf closed;
  vmm_alloc(&closed, bytes, CU_MEM_HANDLE_TYPE_NONE);
  fz_job j;
  job_f32(&j, n, eb);
  fz_result r;
  int rc = fz_client_compress_device(c, &j, (void *)(uintptr_t)closed.ptr, bytes,
                                     (void *)(uintptr_t)arc.ptr, arc.size, NULL, &r);
  cr_assert_eq(rc, FZ_EINVAL, "got %s: %s", fz_err_name(rc), r.message);
  cr_assert(strstr(r.message, "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR") != NULL, "%s",
            r.message);
  cr_assert_eq(fz_client_release_device(c, d_in), 0, "%s", fz_client_errmsg(c));
  fz_client_close(c);
  stop_fzd(h);
  vmm_free(&closed);
  vmm_free(&in);
  vmm_free(&arc);
  vmm_free(&back);
  free(cpu);
  free(v);
}

Test(client_device, exportable_pool, .timeout = 300) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 2");
  fz_client *c = connect_gpu(h);
  CUDA_OK(cudaSetDevice(0));
  const size_t n = 1u << 20, bytes = n * sizeof(float);
  const double eb = 1e-3;
  float *v = field_f32(n, 2.1f);
  size_t cpu_len;
  double eb_abs;
  void *cpu = cpu_archive(v, n, eb, &cpu_len, &eb_abs);
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool;
  CUDA_OK(cudaMemPoolCreate(&pool, &props));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t in_off = 4096;
  char *d_in, *d_arc, *d_back;
  CUDA_OK(cudaMallocFromPoolAsync((void **)&d_in, in_off + bytes, pool, s));
  CUDA_OK(cudaMallocFromPoolAsync((void **)&d_arc, bytes + (1 << 20), pool, s));
  CUDA_OK(cudaMallocFromPoolAsync((void **)&d_back, bytes, pool, s));
  CUDA_OK(cudaMemcpyAsync(d_in + in_off, v, bytes, cudaMemcpyHostToDevice, s));
  CUDA_OK(cudaStreamSynchronize(s));
  for (int round = 0; round < 2; round++)
    round_trip(c, v, n, eb, cpu, cpu_len, eb_abs, d_in + in_off, d_arc, bytes + (1 << 20),
               d_back, NULL, "pool");
  cr_assert_eq(fz_client_release_device(c, NULL), 0, "%s", fz_client_errmsg(c));
  fz_client_close(c);
  stop_fzd(h);
  CUDA_OK(cudaFreeAsync(d_in, s));
  CUDA_OK(cudaFreeAsync(d_arc, s));
  CUDA_OK(cudaFreeAsync(d_back, s));
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaStreamDestroy(s));
  CUDA_OK(cudaMemPoolDestroy(pool));
  free(cpu);
  free(v);
}

/* One refused pointer: FZ_EINVAL before anything is sent, the message
 * naming the kind and what to use instead. */
static void expect_refused(fz_client *c, const void *d_in, size_t len, void *d_out,
                           const char *kind) {
  fz_job j;
  job_f32(&j, len / sizeof(float), 1e-3);
  fz_result r;
  int rc = fz_client_compress_device(c, &j, d_in, len, d_out, len * 2, NULL, &r);
  cr_assert_eq(rc, FZ_EINVAL, "%s: got %s: %s", kind, fz_err_name(rc), r.message);
  cr_assert(strstr(r.message, kind) != NULL, "'%s' not in: %s", kind, r.message);
  cr_assert(strstr(r.message, "cudaMalloc") != NULL, "no alternative named in: %s", r.message);
  cr_assert_eq(fz_client_pending(c), 0);
}

Test(client_device, unshareable_memory_refused, .timeout = 300) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 1");
  fz_client *c = connect_gpu(h);
  CUDA_OK(cudaSetDevice(0));
  const size_t len = 1 << 20;
  void *d_out;
  CUDA_OK(cudaMalloc(&d_out, 2 * len));
  void *d_async, *d_managed, *h_pinned;
  CUDA_OK(cudaMallocAsync(&d_async, len, 0));
  CUDA_OK(cudaMallocManaged(&d_managed, len, cudaMemAttachGlobal));
  CUDA_OK(cudaMallocHost(&h_pinned, len));
  CUDA_OK(cudaDeviceSynchronize());
  expect_refused(c, d_async, len, d_out, "default pool");
  expect_refused(c, d_managed, len, d_out, "managed memory");
  /* As output too. */
  fz_job j;
  job_f32(&j, len / sizeof(float), 1e-3);
  fz_result r;
  int rc = fz_client_compress_device(c, &j, d_out, len, d_managed, len, NULL, &r);
  cr_assert_eq(rc, FZ_EINVAL, "got %s: %s", fz_err_name(rc), r.message);
  cr_assert(strstr(r.message, "output") && strstr(r.message, "managed"), "%s", r.message);
  /* Host memory is not device memory, pinned or not. */
  rc = fz_client_compress_device(c, &j, h_pinned, len, d_out, 2 * len, NULL, &r);
  cr_assert_eq(rc, FZ_EINVAL, "got %s: %s", fz_err_name(rc), r.message);
  cr_assert(strstr(r.message, "host memory") != NULL, "%s", r.message);
  void *plain = malloc(len);
  rc = fz_client_compress_device(c, &j, plain, len, d_out, 2 * len, NULL, &r);
  cr_assert_eq(rc, FZ_EINVAL, "got %s: %s", fz_err_name(rc), r.message);
  cr_assert(strstr(r.message, "not CUDA device memory") != NULL, "%s", r.message);
  free(plain);
  /* The handle goes on serving. */
  cr_assert_eq(fz_client_ping(c, NULL), 0);
  fz_client_close(c);
  stop_fzd(h);
  CUDA_OK(cudaFreeAsync(d_async, 0));
  CUDA_OK(cudaFree(d_managed));
  CUDA_OK(cudaFreeHost(h_pinned));
  CUDA_OK(cudaFree(d_out));
}

Test(client_device, freed_and_reallocated_at_the_same_address, .timeout = 300) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 1");
  fz_client *c = connect_gpu(h);
  CUDA_OK(cudaSetDevice(0));
  const size_t n = 1u << 20, bytes = n * sizeof(float);
  const double eb = 1e-3;
  void *d_arc, *d_back;
  CUDA_OK(cudaMalloc(&d_arc, bytes + (1 << 20)));
  CUDA_OK(cudaMalloc(&d_back, bytes));
  void *first = NULL;
  int same = 0;
  for (int round = 0; round < 4; round++) {
    /* A new allocation each round, of a new field: the driver gives the
     * freed address back, and the daemon must not read the old mapping. */
    void *d_in;
    CUDA_OK(cudaMalloc(&d_in, bytes));
    if (round == 0)
      first = d_in;
    else
      same += d_in == first;
    float *v = field_f32(n, 0.7f * (float)round);
    size_t cpu_len;
    double eb_abs;
    void *cpu = cpu_archive(v, n, eb, &cpu_len, &eb_abs);
    CUDA_OK(cudaMemcpy(d_in, v, bytes, cudaMemcpyHostToDevice));
    round_trip(c, v, n, eb, cpu, cpu_len, eb_abs, d_in, d_arc, bytes + (1 << 20), d_back, NULL,
               "reallocated input");
    /* Rounds 0 and 1 free without telling the library (the buffer id tells
     * it); rounds 2 and 3 release first, as the documentation asks. */
    if (round >= 2)
      cr_assert_eq(fz_client_release_device(c, d_in), 0, "%s", fz_client_errmsg(c));
    CUDA_OK(cudaFree(d_in));
    free(cpu);
    free(v);
  }
  cr_assert_gt(same, 0, "the driver never gave the freed address back: nothing was tested");
  fz_client_close(c);
  stop_fzd(h);
  CUDA_OK(cudaFree(d_arc));
  CUDA_OK(cudaFree(d_back));
}

/* ---- eight threads, one client ------------------------------------------- */

typedef struct worker {
  fz_client *c;
  int index;
  size_t n;
  const float *v;
  const void *cpu;
  size_t cpu_len;
  double eb_abs;
  int failures;
  char why[512];
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  if (cudaSetDevice(0) != cudaSuccess) {
    w->failures++;
    snprintf(w->why, sizeof w->why, "cudaSetDevice");
    return NULL;
  }
  const size_t bytes = w->n * sizeof(float), arc_cap = bytes + (1 << 20);
  char *d_in = NULL, *d_arc = NULL, *d_back = NULL;
  unsigned char *h_arc = malloc(arc_cap);
  float *h_back = malloc(bytes);
  cudaStream_t s = NULL;
  if (cudaMalloc((void **)&d_in, bytes + 256) || cudaMalloc((void **)&d_arc, arc_cap) ||
      cudaMalloc((void **)&d_back, bytes) || cudaStreamCreate(&s) ||
      cudaMemcpy(d_in + 256, w->v, bytes, cudaMemcpyHostToDevice)) {
    w->failures++;
    snprintf(w->why, sizeof w->why, "CUDA allocation");
    goto out;
  }
  for (int round = 0; round < 12; round++) {
    /* Half the rounds through the thread's stream and events. */
    void *stream = round % 2 ? (void *)s : NULL;
    fz_job j;
    job_f32(&j, w->n, 1e-3);
    fz_result r;
    int rc = fz_client_compress_device(w->c, &j, d_in + 256, bytes, d_arc, arc_cap, stream, &r);
    if (rc < 0 || r.bytes_out != w->cpu_len ||
        cudaMemcpyAsync(h_arc, d_arc, w->cpu_len, cudaMemcpyDeviceToHost, s) ||
        cudaStreamSynchronize(s) || memcmp(h_arc, w->cpu, w->cpu_len) != 0) {
      w->failures++;
      snprintf(w->why, sizeof w->why, "round %d compress: %s (%s), %llu bytes of %zu", round,
               fz_err_name(rc), r.message, (unsigned long long)r.bytes_out, w->cpu_len);
      break;
    }
    rc = fz_client_decompress_device(w->c, d_arc, w->cpu_len, d_back, bytes, stream, &r);
    fz_compare_result cmp;
    if (rc < 0 || cudaMemcpyAsync(h_back, d_back, bytes, cudaMemcpyDeviceToHost, s) ||
        cudaStreamSynchronize(s) || fz_compare(FZ_F32, w->v, h_back, w->n, &cmp) != 0 ||
        cmp.max_abs_error > w->eb_abs || cmp.nonfinite_mismatches) {
      w->failures++;
      snprintf(w->why, sizeof w->why, "round %d decompress: %s (%s)", round, fz_err_name(rc),
               r.message);
      break;
    }
  }
out:
  cudaFree(d_in);
  cudaFree(d_arc);
  cudaFree(d_back);
  if (s)
    cudaStreamDestroy(s);
  free(h_arc);
  free(h_back);
  return NULL;
}

Test(client_device, eight_threads_share_one_client, .timeout = 600) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 4");
  fz_client *c = connect_gpu(h);
  CUDA_OK(cudaSetDevice(0));
  const size_t n = 1u << 19;
  worker w[8];
  float *v[8];
  void *cpu[8];
  pthread_t tid[8];
  for (int i = 0; i < 8; i++) {
    v[i] = field_f32(n, 0.25f * (float)i);
    memset(&w[i], 0, sizeof w[i]);
    cpu[i] = cpu_archive(v[i], n, 1e-3, &w[i].cpu_len, &w[i].eb_abs);
    w[i].c = c;
    w[i].index = i;
    w[i].n = n;
    w[i].v = v[i];
    w[i].cpu = cpu[i];
  }
  for (int i = 0; i < 8; i++)
    cr_assert_eq(pthread_create(&tid[i], NULL, worker_main, &w[i]), 0);
  for (int i = 0; i < 8; i++)
    pthread_join(tid[i], NULL);
  for (int i = 0; i < 8; i++)
    cr_assert_eq(w[i].failures, 0, "thread %d: %s", i, w[i].why);
  cr_assert_eq(fz_client_pending(c), 0);
  fz_client_close(c);
  stop_fzd(h);
  for (int i = 0; i < 8; i++) {
    free(v[i]);
    free(cpu[i]);
  }
}

/* ---- streams and events ---------------------------------------------------- */

static void CUDART_CB hold_stream(void *arg) {
  usleep((useconds_t)(uintptr_t)arg);
}

static void collect(fz_client *c, uint64_t id, void *user, fz_result *res) {
  (void)c;
  (void)id;
  *(fz_result *)user = *res;
}

Test(client_device, stream_orders_the_daemon, .timeout = 300) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 2");
  fz_client *c = connect_gpu(h);
  CUDA_OK(cudaSetDevice(0));
  const size_t n = 1u << 20, bytes = n * sizeof(float), arc_cap = bytes + (1 << 20);
  const double eb = 1e-3;
  float *v = field_f32(n, 0.9f);
  size_t cpu_len;
  double eb_abs;
  void *cpu = cpu_archive(v, n, eb, &cpu_len, &eb_abs);
  float *h_v;
  unsigned char *h_arc;
  float *h_back;
  CUDA_OK(cudaMallocHost((void **)&h_v, bytes)); /* pinned: the copies are asynchronous */
  CUDA_OK(cudaMallocHost((void **)&h_arc, arc_cap));
  CUDA_OK(cudaMallocHost((void **)&h_back, bytes));
  memcpy(h_v, v, bytes);
  void *d_in, *d_arc, *d_back;
  CUDA_OK(cudaMalloc(&d_in, bytes));
  CUDA_OK(cudaMalloc(&d_arc, arc_cap));
  CUDA_OK(cudaMalloc(&d_back, bytes));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  for (int round = 0; round < 3; round++) {
    /* Garbage first; the field arrives only after the stream has been held
     * for 300 ms, long after the job was sent.  Without the wait event the
     * daemon would compress the garbage. */
    CUDA_OK(cudaMemset(d_in, 0xff, bytes));
    CUDA_OK(cudaMemset(d_back, 0, bytes));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaLaunchHostFunc(s, hold_stream, (void *)(uintptr_t)300000));
    CUDA_OK(cudaMemcpyAsync(d_in, h_v, bytes, cudaMemcpyHostToDevice, s));
    fz_job j;
    job_f32(&j, n, eb);
    fz_result r;
    int rc = fz_client_compress_device(c, &j, d_in, bytes, d_arc, arc_cap, s, &r);
    cr_assert_eq(rc, 0, "compress on a stream: %s: %s", fz_err_name(rc), r.message);
    cr_assert_eq(r.bytes_out, cpu_len);
    /* Enqueued after the call: ordered after the daemon's writes. */
    CUDA_OK(cudaMemcpyAsync(h_arc, d_arc, cpu_len, cudaMemcpyDeviceToHost, s));
    rc = fz_client_decompress_device(c, d_arc, cpu_len, d_back, bytes, s, &r);
    cr_assert_eq(rc, 0, "decompress on a stream: %s: %s", fz_err_name(rc), r.message);
    CUDA_OK(cudaMemcpyAsync(h_back, d_back, bytes, cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaStreamSynchronize(s));
    cr_assert(memcmp(h_arc, cpu, cpu_len) == 0, "round %d: the archive is not the CPU "
              "engine's: the daemon did not wait for the stream", round);
    fz_compare_result cmp;
    cr_assert_eq(fz_compare(FZ_F32, v, h_back, n, &cmp), 0);
    cr_assert_leq(cmp.max_abs_error, eb_abs, "round %d: max error %g over %g", round,
                  cmp.max_abs_error, eb_abs);
  }

  /* Asynchronous, with a callback: the daemon still waits for the stream. */
  CUDA_OK(cudaMemset(d_in, 0xff, bytes));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaLaunchHostFunc(s, hold_stream, (void *)(uintptr_t)300000));
  CUDA_OK(cudaMemcpyAsync(d_in, h_v, bytes, cudaMemcpyHostToDevice, s));
  fz_job j;
  job_f32(&j, n, eb);
  fz_result got;
  memset(&got, 0, sizeof got);
  got.status = 1;
  uint64_t id;
  cr_assert_eq(fz_client_submit_device(c, FZ_OP_COMPRESS, &j, d_in, bytes, d_arc, arc_cap, s,
                                       collect, &got, &id), 0, "%s", fz_client_errmsg(c));
  while (fz_client_pending(c) > 0)
    cr_assert_geq(fz_client_wait(c, -1, NULL), 0);
  cr_assert_eq(got.status, 0, "%s", got.message);
  assert_device_archive(d_arc, got.bytes_out, cpu, cpu_len, "asynchronous job on a stream");

  /* The per-thread default stream works as a stream too. */
  CUDA_OK(cudaMemcpy(d_in, v, bytes, cudaMemcpyHostToDevice));
  fz_result r;
  cr_assert_eq(fz_client_compress_device(c, &j, d_in, bytes, d_arc, arc_cap,
                                         (void *)cudaStreamPerThread, &r), 0, "%s", r.message);
  CUDA_OK(cudaStreamSynchronize(cudaStreamPerThread));
  assert_device_archive(d_arc, r.bytes_out, cpu, cpu_len, "cudaStreamPerThread");

  fz_client_close(c);
  stop_fzd(h);
  CUDA_OK(cudaStreamDestroy(s));
  CUDA_OK(cudaFree(d_in));
  CUDA_OK(cudaFree(d_arc));
  CUDA_OK(cudaFree(d_back));
  CUDA_OK(cudaFreeHost(h_v));
  CUDA_OK(cudaFreeHost(h_arc));
  CUDA_OK(cudaFreeHost(h_back));
  free(cpu);
  free(v);
}
