/*
 * test_devitocomp_cuda.c - libdevitocomp.so with CUDA execution against fzd
 * on the GPU backend, as DevitoPRO's CUDA backend uses it: snapshots of one
 * shape in device memory compressed on a stream into device payloads packed
 * at payload_alignment, sidecars on the host, the payloads moved to a host
 * layer and serialized, brought back to the device and decompressed on the
 * stream, then checked pointwise against the relative tolerance.  Refusals:
 * a strided tensor with CUDA execution.  Exits 77 (skipped) without a GPU
 * (tests/gpu/gpu_main.c); CUDA starts in each test only after fzd has.
 */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "devitocomp.h"
#include "fzclient.h"
#include "fzd_harness.h"
#include "snapshots.h"

#define CUDA_OK(call) cr_assert_eq((int)(call), 0, "%s failed", #call)

static fzd_harness *start_gpu_fzd(void) {
  static const char *const args[] = {"--backend", "gpu", NULL};
  fzd_harness_options o = {.settings = "\"workers\": 1", .args = args,
                           .ready_timeout_ms = 120000};
  fzd_harness *h = NULL;
  cr_assert_eq(fzd_harness_start(&o, &h), 0, "fzd did not start on the GPU backend");
  cr_assert_eq(setenv("FZD_SOCKET", fzd_harness_socket_path(h), 1), 0);
  return h;
}

static void stop_fzd(fzd_harness *h) {
  int st = fzd_harness_stop(h, 60000);
  cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "fzd exit status %d", st);
}

Test(devitocomp_cuda, device_snapshots, .timeout = 600) {
  fzd_harness *h = start_gpu_fzd();
  const int64_t dims[3] = {32, 48, 40};
  padded p = padded_layout(DEVITOCOMP_FLOAT32, 3, dims, 0);
  size_t n = padded_count(&p), steps = 16;
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  devitocomp_execution_t ex = {DEVITOCOMP_EXECUTION_CUDA, 0, stream};
  devitocomp_plan_t *plan = NULL;
  cr_assert_eq(devitocomp_plan_create(&p.t, &ex, "0.01", &plan), 0, "%s", devitocomp_last_error());
  devitocomp_limits_t lim;
  cr_assert_eq(devitocomp_plan_limits(plan, &lim), 0);
  size_t slot = align_up(lim.max_compressed_bytes, lim.payload_alignment);
  size_t sc_slot = align_up(lim.sidecar_bytes, lim.sidecar_alignment);
  char *d_store = NULL;
  float *d_field = NULL;
  CUDA_OK(cudaMalloc((void **)&d_store, slot * steps));
  CUDA_OK(cudaMalloc((void **)&d_field, n * sizeof(float)));
  float *h_field = malloc(n * sizeof(float));
  char *sidecars = aligned_alloc(lim.sidecar_alignment, sc_slot * steps);
  size_t offsets[16], sizes[16], used = 0;
  for (size_t s = 0; s < steps; s++) {
    for (size_t k = 0; k < n; k++)
      h_field[k] = (float)wave(k, (int)s);
    CUDA_OK(cudaMemcpyAsync(d_field, h_field, n * sizeof(float), cudaMemcpyHostToDevice, stream));
    offsets[s] = used;
    cr_assert_eq(devitocomp_compress(plan, &ex, d_field, d_store + used, slot * steps - used,
                                     &sizes[s], sidecars + sc_slot * s),
                 0, "snapshot %zu: %s", s, devitocomp_last_error());
    used = align_up(used + sizes[s], lim.payload_alignment);
  }
  /* The host layer and back (what serialization of a device store does). */
  char *h_store = malloc(used);
  CUDA_OK(cudaMemcpyAsync(h_store, d_store, used, cudaMemcpyDeviceToHost, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemset(d_store, 0, used));
  CUDA_OK(cudaMemcpy(d_store, h_store, used, cudaMemcpyHostToDevice));
  double rtol = test_rtol(0.01);
  for (size_t s = 0; s < steps; s++) {
    CUDA_OK(cudaMemsetAsync(d_field, 0, n * sizeof(float), stream));
    cr_assert_eq(devitocomp_decompress(plan, &ex, d_store + offsets[s], sizes[s],
                                       sidecars + sc_slot * s, d_field),
                 0, "snapshot %zu: %s", s, devitocomp_last_error());
    CUDA_OK(cudaMemcpyAsync(h_field, d_field, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    for (size_t k = 0; k < n; k++) {
      double x = (float)wave(k, (int)s), y = h_field[k];
      cr_assert(fabs(x - y) <= rtol * fabs(x), "snapshot %zu point %zu: %.9g vs %.9g", s, k, x, y);
    }
  }
  devitocomp_plan_destroy(plan);

  /* A padded tensor cannot be compressed in place. */
  padded q = padded_layout(DEVITOCOMP_FLOAT32, 3, dims, 2);
  cr_assert_eq(devitocomp_plan_create(&q.t, &ex, "0.01", &plan), DEVITOCOMP_UNSUPPORTED);
  cr_assert_not_null(strstr(devitocomp_last_error(), "contiguous"));

  cudaFree(d_store);
  cudaFree(d_field);
  cudaStreamDestroy(stream);
  free(h_field), free(h_store), free(sidecars);
  fz_client *c = NULL;
  char why[256];
  cr_assert_eq(fz_client_connect(&c, fzd_harness_socket_path(h), NULL, why, sizeof why), 0);
  fz_server_stats st;
  cr_assert_eq(fz_client_stats(c, &st), 0);
  cr_assert_eq(st.compress.count, steps);
  cr_assert_eq(st.decompress.count, steps);
  fz_client_close(c);
  stop_fzd(h);
}
