/*
 * gpu_err.c - CUDA errors as fz_errno codes, with the call and the CUDA
 * error's name in the message.
 */
#include <cuda_runtime_api.h>

#include "fze_chain.h"
#include "gpu_err.h"

int fzk_cuda_error(int err, const char *what, char *why, size_t why_len) {
  cudaError_t e = (cudaError_t)err;
  fze_why(why, why_len, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
  switch (e) {
  case cudaErrorMemoryAllocation: return FZ_EGPUOOM;
  case cudaErrorNoDevice:
  case cudaErrorInsufficientDriver:
  case cudaErrorInvalidDevice:
  case cudaErrorDevicesUnavailable: return FZ_ENOGPU;
  default: return FZ_ECUDA;
  }
}
