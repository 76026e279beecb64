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

struct fze_header;
struct fzk_desc;

/* Workspace buffers start on 256-byte boundaries (gpu_plan.c, gpu_decode.c). */
static inline size_t fzk_up256(size_t v) { return (v + 255) & ~(size_t)255; }

/* The kernels' description of an archive's shape and chain (gpu_plan.c),
 * for the built-in kernels: the 8-byte word coders chain64.cu built only. */
void fzk_desc_from_header(struct fzk_desc *d, const struct fze_header *h);
/* The same for generated kernels: every 8-byte word coder. */
void fzk_desc_from_header_jit(struct fzk_desc *d, const struct fze_header *h);
/* The descriptor and kernel of a plan (dir FZK_JIT_ENCODE) or a decoder
 * (FZK_JIT_DECODE) of h: *fn the generated kernel, or NULL for the
 * built-in one, which then exists for *d; an error where neither runs
 * (a context of generated kernels only whose compile failed). */
int fzk_desc_kernel(fz_gpu_ctx *ctx, const struct fze_header *h, int dir, struct fzk_desc *d,
                    void **fn, char *why, size_t why_len);
/* Enables the kernels' shared memory for d's chunk size, once per size and
 * context, from any thread (gpu_plan.c). */
int fzk_kernels_ready(fz_gpu_ctx *ctx, const struct fzk_desc *d, char *why, size_t why_len);
/* The driver API's entry point `name` (CUDA 12 ABI), found through the
 * runtime; NULL, and *missing set to name if it was NULL, when the driver
 * has none (import.c). */
void *fzk_driver_entry(const char *name, const char **missing);
/* The error of a chain whose generated kernel a context that runs no
 * built-in kernel lacks, with the JIT's failure text (gpu_plan.c). */
int fzk_jit_unavailable(fz_gpu_ctx *ctx, char *why, size_t why_len);
/* The ratio kernels for a plan or a decoder of ctx: *rk NULL for the
 * built-in ones, or those NVRTC compiled for a context that runs no
 * built-in kernel; FZ_ENOSYS, saying why and that the CPU engine does the
 * work (`what`: "compresses this chain"...), where they do not compile
 * (gpu_plan.c). */
struct fzk_kern;
int fzk_ratio_kernels(fz_gpu_ctx *ctx, const struct fzk_kern **rk, const char *what, char *why,
                      size_t why_len);

#endif
