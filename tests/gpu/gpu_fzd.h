/*
 * gpu_fzd.h - the GPU suites that start fzd (gpu_service.c,
 * gpu_device_memory.c, gpu_client_device.c): a daemon on the GPU backend
 * through the test harness, a client connected to it, and the check of a
 * CUDA call.  fzd's warm-up compiles nothing but does run every worker once,
 * so the waits are long.
 */
#ifndef FZ_TEST_GPU_FZD_H
#define FZ_TEST_GPU_FZD_H

#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <string.h>
#include <sys/wait.h>

#include "fzclient.h"
#include "fzd_harness.h"

#define CUDA_OK(call) cr_assert_eq((int)(call), 0, "%s failed", #call)

/* Copies n bytes of host memory to device memory that fzd will read.  A
 * cudaMemcpy from pageable memory may return before its DMA has reached the
 * device: this process's later work is ordered after it, another process's
 * is not.  So the device is synchronised before the caller sends the
 * buffer's handle, as docs/protocol.md ("Synchronisation") asks of a client
 * that passes no wait_event. */
static inline cudaError_t upload_for_fzd(void *dst, const void *src, size_t n) {
  cudaError_t e = cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice);
  return e != cudaSuccess ? e : cudaDeviceSynchronize();
}

/* fzd on the GPU backend with the given settings (JSON members, or NULL). */
static inline fzd_harness *start_gpu_fzd(const char *settings) {
  static const char *const args[] = {"--backend", "gpu", NULL};
  fzd_harness_options o = {.settings = settings, .args = args, .ready_timeout_ms = 120000};
  fzd_harness *h = NULL;
  cr_assert_eq(fzd_harness_start(&o, &h), 0, "fzd did not start on the GPU backend");
  return h;
}

/* Stops fzd and asserts a clean drain. */
static inline void stop_fzd(fzd_harness *h) {
  int st = fzd_harness_stop(h, 60000);
  cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "fzd did not exit cleanly (status %d)", st);
}

/* A client of the daemon, which must say it runs on a GPU. */
static inline fz_client *connect_gpu(fzd_harness *h) {
  fz_client_opts o;
  fz_client_opts_init(&o);
  o.timeout_ms = 120000;
  fz_client *c = NULL;
  char why[256];
  int rc = fz_client_connect(&c, fzd_harness_socket_path(h), &o, why, sizeof why);
  cr_assert_eq(rc, 0, "connect: %s", why);
  fz_server_info info;
  fz_client_info(c, &info);
  cr_assert_str_eq(info.backend, "gpu");
  cr_assert(strcmp(info.device, "cpu") != 0 && info.device[0] != '\0', "%s", info.device);
  return c;
}

#endif
