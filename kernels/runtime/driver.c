/*
 * driver.c - driver entry points found through the runtime, and the launch
 * of kernels loaded through the driver (those NVRTC compiled, and the
 * helpers of a GPU the built-in code cannot run on).
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stddef.h>

#include "driver.h"

void *fzk_driver_entry(const char *name, const char **missing) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found;
  cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found);
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == NULL) {
    cudaGetLastError();
    if (*missing == NULL)
      *missing = name;
    return NULL;
  }
  return fn;
}

typedef CUresult (*launch_fn)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                              unsigned by, unsigned bz, unsigned smem, CUstream s, void **args,
                              void **extra);
static launch_fn launch;
static pthread_once_t launch_once = PTHREAD_ONCE_INIT;

static void launch_load(void) {
  const char *missing = NULL;
  *(void **)&launch = fzk_driver_entry("cuLaunchKernel", &missing);
}

int fzk_driver_launch(void *fn, unsigned grid, unsigned block, unsigned smem, fz_gpu_stream s,
                      void **args) {
  pthread_once(&launch_once, launch_load);
  /* A CUfunction exists only where the driver loaded its module, so the
   * entry point is there too; a missing one is still an error, not a crash. */
  if (launch == NULL)
    return (int)cudaErrorLaunchFailure;
  CUresult e = launch((CUfunction)fn, grid, 1, 1, block, 1, 1, smem, (CUstream)s, args, NULL);
  /* In the runtime's numbers, which the launchers return. */
  switch (e) {
  case CUDA_SUCCESS: return 0;
  case CUDA_ERROR_OUT_OF_MEMORY: return (int)cudaErrorMemoryAllocation;
  case CUDA_ERROR_INVALID_VALUE: return (int)cudaErrorInvalidValue;
  default: return (int)cudaErrorLaunchFailure;
  }
}
