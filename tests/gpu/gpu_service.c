/*
 * gpu_service.c - fzd on the GPU backend, as a real process over its real
 * Unix socket, driven through libfzclient: host buffers inline and by
 * descriptor (a sealed memfd, which fzd maps, and a plain file, which it
 * reads), archives byte-identical to the CPU engine's for the same input,
 * decompression within the bound, CUDA IPC buffers of this process
 * compressed in place, bad IPC ranges and handles refused while the daemon
 * keeps serving, and running out of GPU memory answered with EGPUOOM.
 *
 * CUDA is initialised in each test only after fzd has started (the harness
 * starts it with fork+exec; nothing forks after CUDA is up).
 */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fz.h"
#include "fzclient.h"
#include "fzd_harness.h"
#include "gpu_fzd.h"

static float *field_f32(size_t rows, size_t cols, float phase) {
  float *v = malloc(rows * cols * sizeof(float));
  for (size_t i = 0; i < rows; i++)
    for (size_t j = 0; j < cols; j++)
      v[i * cols + j] = (float)(50.0 * sin(0.01 * (double)i + phase) *
                                    cos(0.013 * (double)j) +
                                0.001 * (double)((i * 31 + j * 17) % 97));
  return v;
}

static void job_f32(fz_job *j, size_t rows, size_t cols, double eb) {
  fz_job_init(j);
  j->dtype = "f32";
  j->ndims = 2;
  j->shape[0] = rows;
  j->shape[1] = cols;
  j->eb = eb;
  j->mode = "rel";
}

/* The CPU engine's archive of the same input (the oracle); free() it. */
static void *cpu_archive(const float *v, size_t rows, size_t cols, double eb,
                         size_t *len) {
  fz_params p;
  fz_params_init(&p);
  p.dtype = FZ_F32;
  p.ndims = 2;
  p.dims[0] = rows;
  p.dims[1] = cols;
  p.eb = eb;
  p.eb_mode = FZ_EB_REL;
  fz_plan *plan;
  char why[256];
  cr_assert_eq(fz_plan_create(&p, &plan, why, sizeof why), 0, "%s", why);
  size_t cap = fz_plan_compress_bound(plan);
  void *arc = malloc(cap);
  cr_assert_eq(fz_plan_compress(plan, v, rows * cols * sizeof(float), arc, cap, len), 0);
  fz_plan_destroy(plan);
  return arc;
}

static void assert_same(const void *a, size_t a_len, const void *b, size_t b_len,
                        const char *what) {
  cr_assert_eq(a_len, b_len, "%s: %zu bytes, the CPU engine's %zu", what, a_len, b_len);
  cr_assert(memcmp(a, b, a_len) == 0, "%s: bytes differ from the CPU engine's", what);
}

/* Decompresses arc through the daemon and checks the bound. */
static void check_decompress(fz_client *c, const void *arc, size_t arc_len,
                             const float *v, size_t n, double eb_abs) {
  fz_job d;
  fz_job_init(&d);
  d.in = arc;
  d.in_len = arc_len;
  fz_result r;
  cr_assert_eq(fz_client_decompress(c, &d, &r), 0, "%s", r.message);
  cr_assert_eq(r.data_len, n * sizeof(float));
  cr_assert_str_eq(r.dtype, "f32");
  fz_compare_result cmp;
  cr_assert_eq(fz_compare(FZ_F32, v, r.data, n, &cmp), 0);
  cr_assert_leq(cmp.max_abs_error, eb_abs, "max error %g over the bound %g",
                cmp.max_abs_error, eb_abs);
  cr_assert_eq(cmp.nonfinite_mismatches, 0);
  fz_client_free(r.data);
}

static void *read_all(int fd, size_t *len) {
  off_t end = lseek(fd, 0, SEEK_END);
  cr_assert_geq(end, 0);
  void *p = malloc((size_t)end + 1);
  cr_assert_eq(pread(fd, p, (size_t)end, 0), end);
  *len = (size_t)end;
  return p;
}

Test(service, host_buffers_inline_and_by_fd, .timeout = 300) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 2");
  fz_client *c = connect_gpu(h);
  fz_server_status st;
  cr_assert_eq(fz_client_status(c, &st), 0);
  cr_assert_str_eq(st.backend, "gpu");
  cr_assert_eq(st.workers, 2);

  const size_t rows = 768, cols = 1024, n = rows * cols;
  const double eb = 1e-3;
  float *v = field_f32(rows, cols, 0.3f);
  size_t cpu_len;
  void *cpu = cpu_archive(v, rows, cols, eb, &cpu_len);

  /* Inline, twice (the second job runs on a cached plan and buffers). */
  for (int round = 0; round < 2; round++) {
    fz_job j;
    job_f32(&j, rows, cols, eb);
    j.in = v;
    j.in_len = n * sizeof(float);
    j.verify = 1;
    fz_result r;
    cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
    assert_same(r.data, r.data_len, cpu, cpu_len, "inline archive");
    cr_assert(r.has_max_error && r.max_error <= r.eb_abs, "max error %g, bound %g",
              r.max_error, r.eb_abs);
    cr_assert_neq(r.chain[0], '\0');
    check_decompress(c, r.data, r.data_len, v, n, r.eb_abs);
    fz_client_free(r.data);
  }

  /* By descriptor: a sealed memfd (mapped by fzd) and an unlinked plain file
   * (read with pread), each into an output file. */
  for (int kind = 0; kind < 2; kind++) {
    int in;
    if (kind == 0) {
      in = memfd_create("fzd-gpu-in", MFD_ALLOW_SEALING);
    } else {
      char path[] = "/tmp/fzd-gpu-in-XXXXXX";
      in = mkstemp(path);
      unlink(path);
    }
    cr_assert_geq(in, 0);
    cr_assert_eq(write(in, v, n * sizeof(float)), (ssize_t)(n * sizeof(float)));
    if (kind == 0)
      cr_assert_eq(fcntl(in, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE), 0);
    int out = memfd_create("fzd-gpu-out", 0);
    fz_job j;
    job_f32(&j, rows, cols, eb);
    j.in_fd = in;
    j.out_fd = out;
    fz_result r;
    cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
    size_t got_len;
    void *got = read_all(out, &got_len);
    assert_same(got, got_len, cpu, cpu_len, kind == 0 ? "memfd archive" : "file archive");
    cr_assert_eq(r.bytes_out, got_len);
    free(got);
    close(in);
    close(out);
  }
  fz_client_close(c);
  free(cpu);
  free(v);
  stop_fzd(h);
}

/* The CPU decoder's bytes for arc. */
static void *cpu_decoded(const void *arc, size_t len, size_t *out_len) {
  fz_archive_info info;
  cr_assert_eq(fz_archive_inspect(arc, len, &info), 0);
  void *out = malloc((size_t)info.raw_bytes + 1);
  cr_assert_eq(fz_decompress(arc, len, out, (size_t)info.raw_bytes, out_len, 4), 0);
  return out;
}

/* Decompressions to host outputs on one worker, whose decoder goes into a
 * series after two archives of a shape and then decodes with one wait:
 * every answer is the CPU decoder's, inline and by descriptor, across
 * arrays of one shape but their own ranges, then one of a larger shape
 * (more than the series' size: the two steps again) and one of a smaller. */
Test(service, host_outputs_of_a_series, .timeout = 300) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 1");
  fz_client *c = connect_gpu(h);
  const size_t shapes[][2] = {{512, 768}, {512, 768}, {512, 768}, {512, 768}, {512, 768},
                              {512, 768}, {640, 768}, {256, 768}, {512, 768}};
  for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
    const size_t rows = shapes[k][0], cols = shapes[k][1], n = rows * cols;
    float *v = field_f32(rows, cols, 0.1f * (float)k);
    for (size_t i = 0; i < n; i++)
      v[i] *= 1.0f + 0.25f * (float)k; /* a range of its own */
    size_t arc_len, want_len;
    void *arc = cpu_archive(v, rows, cols, 1e-3, &arc_len);
    void *want = cpu_decoded(arc, arc_len, &want_len);
    char what[96];
    snprintf(what, sizeof what, "archive %zu (%zux%zu)", k, rows, cols);
    fz_job d;
    fz_job_init(&d);
    d.in = arc;
    d.in_len = arc_len;
    fz_result r;
    if (k % 2 == 0) {
      cr_assert_eq(fz_client_decompress(c, &d, &r), 0, "%s: %s", what, r.message);
      assert_same(r.data, r.data_len, want, want_len, what);
      fz_client_free(r.data);
    } else {
      int out = memfd_create("fzd-gpu-series", 0);
      cr_assert_geq(out, 0);
      d.out_fd = out;
      cr_assert_eq(fz_client_decompress(c, &d, &r), 0, "%s: %s", what, r.message);
      size_t got_len;
      void *got = read_all(out, &got_len);
      assert_same(got, got_len, want, want_len, what);
      free(got);
      close(out);
    }
    free(want);
    free(arc);
    free(v);
  }
  fz_client_close(c);
  stop_fzd(h);
}

/* The UUID of device 0 as nvidia-smi prints it. */
static void device_uuid(char *buf, size_t len) {
  struct cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
  snprintf(buf, len,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
           u[12], u[13], u[14], u[15]);
}

/* Every byte of the device buffer still holds `fill`. */
static void assert_device_fill(const void *d_p, size_t len, unsigned char fill,
                               const char *what) {
  unsigned char *h = malloc(len);
  CUDA_OK(cudaMemcpy(h, d_p, len, cudaMemcpyDeviceToHost));
  size_t i = 0;
  while (i < len && h[i] == fill)
    i++;
  free(h);
  cr_assert_eq(i, len, "%s: byte %zu was written", what, i);
}

Test(service, ipc_buffers_in_place, .timeout = 300) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 2");
  fz_client *c = connect_gpu(h);
  /* CUDA comes up only now, after fzd was started. */
  CUDA_OK(cudaSetDevice(0));
  char uuid[64];
  device_uuid(uuid, sizeof uuid);

  const size_t rows = 512, cols = 1024, n = rows * cols, bytes = n * sizeof(float);
  const size_t in_off = 1 << 16;
  const double eb = 1e-4;
  float *v = field_f32(rows, cols, 1.1f);
  size_t cpu_len;
  void *cpu = cpu_archive(v, rows, cols, eb, &cpu_len);

  void *d_in = NULL, *d_arc = NULL, *d_back = NULL;
  const size_t arc_cap = bytes + (1 << 20), arc_off = 4096;
  CUDA_OK(cudaMalloc(&d_in, in_off + bytes));
  CUDA_OK(cudaMalloc(&d_arc, arc_off + arc_cap));
  CUDA_OK(cudaMalloc(&d_back, bytes));
  CUDA_OK(upload_for_fzd((char *)d_in + in_off, v, bytes));
  cudaIpcMemHandle_t h_in, h_arc, h_back;
  CUDA_OK(cudaIpcGetMemHandle(&h_in, d_in));
  CUDA_OK(cudaIpcGetMemHandle(&h_arc, d_arc));
  CUDA_OK(cudaIpcGetMemHandle(&h_back, d_back));
  CUDA_OK(cudaDeviceSynchronize());

  /* Device in, host (inline) out. */
  fz_job j;
  job_f32(&j, rows, cols, eb);
  j.in_ipc = &h_in;
  j.in_offset = in_off;
  j.device = uuid;
  fz_result r;
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
  assert_same(r.data, r.data_len, cpu, cpu_len, "IPC input, inline archive");
  fz_client_free(r.data);

  /* Device in, device out (twice: the second finds both handles cached). */
  for (int round = 0; round < 2; round++) {
    j.out_ipc = &h_arc;
    j.out_offset = arc_off;
    j.out_length = arc_cap;
    j.verify = round;
    cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
    cr_assert_null(r.data);
    cr_assert_eq(r.bytes_out, cpu_len);
    if (round == 1)
      cr_assert(r.has_max_error && r.max_error <= r.eb_abs);
    void *arc = malloc(r.bytes_out);
    CUDA_OK(cudaMemcpy(arc, (char *)d_arc + arc_off, r.bytes_out, cudaMemcpyDeviceToHost));
    assert_same(arc, r.bytes_out, cpu, cpu_len, "IPC archive");
    free(arc);
  }

  /* Device archive in, device data out, within the bound. */
  fz_job d;
  fz_job_init(&d);
  d.in_ipc = &h_arc;
  d.in_offset = arc_off;
  d.in_length = cpu_len;
  d.out_ipc = &h_back;
  d.out_length = bytes;
  d.device = uuid;
  cr_assert_eq(fz_client_decompress(c, &d, &r), 0, "%s", r.message);
  cr_assert_eq(r.bytes_out, bytes);
  cr_assert_eq(r.ndims, 2);
  float *back = malloc(bytes);
  CUDA_OK(cudaMemcpy(back, d_back, bytes, cudaMemcpyDeviceToHost));
  fz_archive_info info;
  cr_assert_eq(fz_archive_inspect(cpu, cpu_len, &info), 0);
  fz_compare_result cmp;
  cr_assert_eq(fz_compare(FZ_F32, v, back, n, &cmp), 0);
  cr_assert_leq(cmp.max_abs_error, info.eb_abs);
  free(back);

  /* Bad ranges and handles get an error; the daemon keeps serving. */
  fz_job bad = j;
  bad.out_ipc = NULL;
  bad.out_length = 0;
  bad.verify = 0;
  bad.in_offset = in_off + (64u << 20); /* past the allocation */
  cr_assert_eq(fz_client_compress(c, &bad, &r), FZ_ESIZE, "%s", r.message);
  cr_assert(strstr(r.message, "past the end") != NULL, "%s", r.message);
  bad.in_offset = 2; /* misaligned for f32 */
  int rc = fz_client_compress(c, &bad, &r);
  cr_assert(rc == FZ_EINVAL, "a misaligned input gave %s: %s", fz_err_name(rc), r.message);
  fz_job small = j;
  small.out_ipc = &h_arc;
  small.out_offset = arc_off;
  small.out_length = 64; /* far too small for the archive */
  /* A refused job leaves the client's buffer as it was. */
  CUDA_OK(cudaMemset(d_arc, 0xa5, arc_off + arc_cap));
  CUDA_OK(cudaDeviceSynchronize());
  cr_assert_eq(fz_client_compress(c, &small, &r), FZ_ENOSPC, "%s", r.message);
  char needs[64];
  snprintf(needs, sizeof needs, "needs %zu bytes", cpu_len);
  cr_assert(strstr(r.message, needs) != NULL, "%s", r.message);
  assert_device_fill(d_arc, arc_off + arc_cap, 0xa5, "out_ipc after a refused compression");
  /* Exactly the archive's size (below the plan's bound) is enough. */
  small.out_length = cpu_len;
  cr_assert_eq(fz_client_compress(c, &small, &r), 0, "%s", r.message);
  cr_assert_eq(r.bytes_out, cpu_len);
  void *exact = malloc(cpu_len);
  CUDA_OK(cudaMemcpy(exact, (char *)d_arc + arc_off, cpu_len, cudaMemcpyDeviceToHost));
  assert_same(exact, cpu_len, cpu, cpu_len, "archive into a buffer of its exact size");
  free(exact);
  /* A decompression into too small a buffer: refused, nothing written. */
  CUDA_OK(cudaMemset(d_back, 0x5a, bytes));
  CUDA_OK(cudaDeviceSynchronize());
  fz_job dsmall = d;
  dsmall.out_length = bytes - 4;
  cr_assert_eq(fz_client_decompress(c, &dsmall, &r), FZ_ENOSPC, "%s", r.message);
  snprintf(needs, sizeof needs, "needs %zu bytes", bytes);
  cr_assert(strstr(r.message, needs) != NULL, "%s", r.message);
  assert_device_fill(d_back, bytes, 0x5a, "out_ipc after a refused decompression");
  unsigned char junk[FZ_CLIENT_IPC_HANDLE_BYTES];
  for (size_t i = 0; i < sizeof junk; i++)
    junk[i] = (unsigned char)(i * 37 + 11);
  bad.in_offset = 0;
  bad.in_ipc = junk;
  rc = fz_client_compress(c, &bad, &r);
  cr_assert(rc < 0, "a made-up handle was accepted");
  bad.in_ipc = &h_in;
  bad.device = "GPU-00000000-0000-0000-0000-000000000000";
  cr_assert_eq(fz_client_compress(c, &bad, &r), FZ_ENOGPU, "%s", r.message);

  j.out_ipc = NULL;
  j.out_length = 0;
  j.verify = 0;
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "after the errors: %s", r.message);
  assert_same(r.data, r.data_len, cpu, cpu_len, "archive after the errors");
  fz_client_free(r.data);

  /* Closing the connection closes its handles; the buffers are ours again. */
  fz_client_close(c);
  c = connect_gpu(h);
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "new connection: %s", r.message);
  fz_client_free(r.data);
  fz_client_close(c);
  stop_fzd(h);
  CUDA_OK(cudaFree(d_in));
  CUDA_OK(cudaFree(d_arc));
  CUDA_OK(cudaFree(d_back));
  free(cpu);
  free(v);
}

Test(service, out_of_gpu_memory_then_next_job, .timeout = 300) {
  /* 24 MiB of device memory for the worker: enough for the warm-up and for
   * small jobs, not for the 32 MiB input of the big one. */
  fzd_harness *h = start_gpu_fzd("\"workers\": 1, \"gpu_memory_limit\": 25165824");
  fz_client *c = connect_gpu(h);
  const size_t big_rows = 8192, small_rows = 256, cols = 1024;
  float *big = field_f32(big_rows, cols, 0.0f);
  fz_job j;
  job_f32(&j, big_rows, cols, 1e-3);
  j.in = big;
  j.in_len = big_rows * cols * sizeof(float);
  fz_result r;
  cr_assert_eq(fz_client_compress(c, &j, &r), FZ_EGPUOOM, "got %s: %s",
               fz_err_name(r.status), r.message);
  cr_assert(strstr(r.message, "gpu_memory_limit") != NULL, "%s", r.message);

  float *v = field_f32(small_rows, cols, 0.5f);
  size_t cpu_len;
  void *cpu = cpu_archive(v, small_rows, cols, 1e-3, &cpu_len);
  for (int round = 0; round < 2; round++) {
    job_f32(&j, small_rows, cols, 1e-3);
    j.in = v;
    j.in_len = small_rows * cols * sizeof(float);
    cr_assert_eq(fz_client_compress(c, &j, &r), 0, "the next job: %s", r.message);
    assert_same(r.data, r.data_len, cpu, cpu_len, "archive after EGPUOOM");
    fz_client_free(r.data);
  }
  fz_server_stats s;
  cr_assert_eq(fz_client_stats(c, &s), 0);
  cr_assert_eq(s.jobs_failed, 1);
  fz_client_close(c);
  stop_fzd(h);
  free(cpu);
  free(v);
  free(big);
}

/* Device memory in use on the GPU, all processes together: the suite runs
 * alone (ALONE in CMakeLists.txt), so what changes is this test's fzd. */
static size_t gpu_used(void) {
  size_t free_b = 0, total = 0;
  CUDA_OK(cudaMemGetInfo(&free_b, &total));
  return total - free_b;
}

Test(service, idle_workers_give_device_memory_back, .timeout = 300) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 1");
  fz_client *c = connect_gpu(h);
  CUDA_OK(cudaSetDevice(0));
  /* A 512 MiB job from host memory: the worker stages it on the device and
   * keeps its buffers while it is busy. */
  const size_t rows = 16384, cols = 8192, bytes = rows * cols * sizeof(float);
  float *v = field_f32(rows, cols, 0.3f);
  size_t before = gpu_used();
  fz_job j;
  job_f32(&j, rows, cols, 1e-3);
  j.in = v;
  j.in_len = bytes;
  fz_result r;
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
  fz_client_free(r.data);
  size_t busy = gpu_used();
  cr_assert_geq(busy, before + bytes, "the job held %zu bytes of device memory, not %zu",
                busy - before, bytes);
  /* Idle for a while, it gives the buffers back and the pool returns them. */
  size_t after = busy;
  for (int i = 0; i < 50 && after > before + bytes / 4; i++) {
    usleep(100 * 1000);
    after = gpu_used();
  }
  cr_assert_leq(after, before + bytes / 4,
                "idle, fzd still holds %zu bytes more than before the job (%zu during it)",
                after - before, busy - before);
  /* And serves the next job as before. */
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "after the trim: %s", r.message);
  fz_client_free(r.data);
  fz_client_close(c);
  stop_fzd(h);
  free(v);
}

/* A compression the kernels do not do (fill values) goes through the CPU
 * engine on a GPU fzd, and one they do with kernels of their own (the
 * ratio preset) through those: either way, from host memory and from
 * device memory it gets the CPU engine's bytes, and a device-to-device
 * decompression gives the values back within the bound (fill cells
 * bit-exact). */
static void through_the_cpu_engine(const char *pipeline, int has_fill, float fill,
                                   size_t rows, size_t cols) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 2");
  fz_client *c = connect_gpu(h);
  CUDA_OK(cudaSetDevice(0));
  char uuid[64];
  device_uuid(uuid, sizeof uuid);
  const size_t n = rows * cols, bytes = n * sizeof(float);
  float *v = field_f32(rows, cols, 0.7f);
  if (has_fill)
    for (size_t i = 0; i < n; i += 7)
      v[i] = fill;
  fz_params p;
  fz_params_init(&p);
  p.dtype = FZ_F32;
  p.ndims = 2;
  p.dims[0] = rows;
  p.dims[1] = cols;
  p.pipeline = pipeline;
  p.eb = 1e-3;
  p.eb_mode = FZ_EB_REL;
  p.has_fill = has_fill;
  p.fill_value = fill;
  fz_plan *plan;
  char why[256];
  cr_assert_eq(fz_plan_create(&p, &plan, why, sizeof why), 0, "%s", why);
  size_t cap = fz_plan_compress_bound(plan), cpu_len = 0;
  void *cpu = malloc(cap);
  cr_assert_eq(fz_plan_compress(plan, v, bytes, cpu, cap, &cpu_len), 0);
  fz_plan_destroy(plan);

  fz_job j;
  job_f32(&j, rows, cols, 1e-3);
  j.pipeline = pipeline;
  j.has_fill = has_fill;
  j.fill_value = fill;
  j.in = v;
  j.in_len = bytes;
  fz_result r;
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
  assert_same(r.data, r.data_len, cpu, cpu_len, "archive from host memory");
  fz_client_free(r.data);

  void *d_in, *d_arc, *d_back;
  CUDA_OK(cudaMalloc(&d_in, bytes));
  CUDA_OK(cudaMalloc(&d_arc, cap));
  CUDA_OK(cudaMalloc(&d_back, bytes));
  CUDA_OK(upload_for_fzd(d_in, v, bytes));
  cudaIpcMemHandle_t h_in, h_arc, h_back;
  CUDA_OK(cudaIpcGetMemHandle(&h_in, d_in));
  CUDA_OK(cudaIpcGetMemHandle(&h_arc, d_arc));
  CUDA_OK(cudaIpcGetMemHandle(&h_back, d_back));
  fz_job_init(&j);
  job_f32(&j, rows, cols, 1e-3);
  j.pipeline = pipeline;
  j.has_fill = has_fill;
  j.fill_value = fill;
  j.in_ipc = &h_in;
  j.out_ipc = &h_arc;
  j.out_length = cap;
  j.device = uuid;
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
  void *arc = malloc(r.bytes_out);
  CUDA_OK(cudaMemcpy(arc, d_arc, r.bytes_out, cudaMemcpyDeviceToHost));
  assert_same(arc, r.bytes_out, cpu, cpu_len, "archive from device memory");
  free(arc);

  fz_job d;
  fz_job_init(&d);
  d.in_ipc = &h_arc;
  d.in_length = cpu_len;
  d.out_ipc = &h_back;
  d.out_length = bytes;
  d.device = uuid;
  cr_assert_eq(fz_client_decompress(c, &d, &r), 0, "%s", r.message);
  float *back = malloc(bytes);
  CUDA_OK(cudaMemcpy(back, d_back, bytes, cudaMemcpyDeviceToHost));
  fz_archive_info info;
  cr_assert_eq(fz_archive_inspect(cpu, cpu_len, &info), 0);
  for (size_t i = 0; i < n; i++) {
    if (has_fill && v[i] == fill)
      cr_assert_eq(memcmp(&back[i], &fill, sizeof fill), 0, "fill cell %zu came back %g", i,
                   (double)back[i]);
    else
      cr_assert_leq(fabs((double)back[i] - (double)v[i]), info.eb_abs, "value %zu", i);
  }
  free(back);
  CUDA_OK(cudaFree(d_in));
  CUDA_OK(cudaFree(d_arc));
  CUDA_OK(cudaFree(d_back));
  fz_client_close(c);
  stop_fzd(h);
  free(cpu);
  free(v);
}

Test(service, fill_values_through_the_cpu_engine, .timeout = 300) {
  through_the_cpu_engine(NULL, 1, -1e10f, 300, 500);
}

Test(service, ratio_preset_on_a_gpu_fzd, .timeout = 300) {
  through_the_cpu_engine("ratio", 0, 0.0f, 700, 500);
}
