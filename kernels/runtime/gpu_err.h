/*
 * gpu_err.h - CUDA errors turned into fz_errno codes with a message that
 * names the call and the CUDA error.
 */
#ifndef FZK_GPU_ERR_H
#define FZK_GPU_ERR_H

#include <stddef.h>

/* Maps a cudaError_t (as int) to FZ_EGPUOOM, FZ_ENOGPU or FZ_ECUDA and
 * writes "what: cudaErrorName (description)" to why. */
int fzk_cuda_error(int err, const char *what, char *why, size_t why_len);

/* Runs a CUDA call; on failure sets rc and jumps to `label`. */
#define FZK_CHECK(call, label)                                                 \
  do {                                                                         \
    int e_ = (int)(call);                                                      \
    if (e_ != 0) {                                                             \
      rc = fzk_cuda_error(e_, #call, why, why_len);                            \
      goto label;                                                              \
    }                                                                          \
  } while (0)

#endif
