/*
 * gpu_ctx.h - the GPU context's fields, shared by the backend's host files.
 */
#ifndef FZK_GPU_CTX_H
#define FZK_GPU_CTX_H

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "fz_gpu.h"

struct fz_gpu_ctx {
  int device;
  char name[256];
  char uuid[48];
  cudaStream_t *streams;
  unsigned nstreams;
  cudaMemPool_t pool;
  int have_pool;
  uint32_t *d_tab;       /* CRC tables (fzk_crc_tables) */
  /* The decoder of fz_gpu_decompress(), for callers that keep none of
   * their own; made on first use and guarded by lock. */
  pthread_mutex_t lock;
  struct fz_gpu_decoder *dec;
  /* The largest chunk size whose kernels are enabled; guarded by smem_lock
   * (taken inside lock by fz_gpu_decompress, never the other way round). */
  pthread_mutex_t smem_lock;
  uint32_t smem_ready;
  /* The kernels generated at run time and their modules (jit.c). */
  struct fzk_jit *jit;
  /* The helper kernels when every kernel comes from NVRTC (a GPU the
   * built-in code cannot run on, or FZ_GPU_JIT_ONLY), else NULL. */
  const struct fzk_kern *kern;
  int aot_ok; /* the built-in kernels run on this GPU */
  unsigned nsm; /* its multiprocessors */
};

/* Workspace buffers start on 256-byte boundaries (gpu_plan.c, gpu_decode.c). */
static inline size_t fzk_up256(size_t v) { return (v + 255) & ~(size_t)255; }

#endif
