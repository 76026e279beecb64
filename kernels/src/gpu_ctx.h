/*
 * gpu_ctx.h - the GPU context's fields, shared by the backend's host files.
 */
#ifndef FZK_GPU_CTX_H
#define FZK_GPU_CTX_H

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>

struct fz_gpu_ctx {
  int device;
  char name[256];
  cudaStream_t *streams;
  unsigned nstreams;
  cudaMemPool_t pool;
  int have_pool;
  uint32_t *d_tab;       /* CRC tables (fzk_crc_tables) */
  /* Decompression's host side: the header copy and the status word, pinned
   * so the copies are asynchronous; guarded by lock. */
  pthread_mutex_t lock;
  uint8_t *h_hdr;
  size_t h_hdr_cap;
  uint32_t *h_word;
  /* The largest chunk size whose kernels are enabled; guarded by smem_lock
   * (taken inside lock by decompression, never the other way round). */
  pthread_mutex_t smem_lock;
  uint32_t smem_ready;
};

#endif
