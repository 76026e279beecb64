/*
 * gpu_err.h - CUDA errors turned into fz_errno codes with a message that
 * names the call and the CUDA error (gpu_err.c).
 */
#ifndef FZK_GPU_ERR_H
#define FZK_GPU_ERR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Maps a cudaError_t (as int) to FZ_EGPUOOM, FZ_ENOGPU or FZ_ECUDA and
 * writes "what: cudaErrorName (description)" to why. */
int fzk_cuda_error(int err, const char *what, char *why, size_t why_len);

/* 0 for cudaSuccess, else fzk_cuda_error()'s code and message.  Written
 * where a call's failure leaves the function, with the label that undoes
 * what was done before it:
 *   if ((rc = fzk_cuda_check(cudaMalloc(&p, n), "cudaMalloc", why, why_len)) < 0)
 *     goto err_stream;
 */
static inline int fzk_cuda_check(int err, const char *what, char *why, size_t why_len) {
  return err == 0 ? 0 : fzk_cuda_error(err, what, why, why_len);
}

#ifdef __cplusplus
}
#endif
#endif
