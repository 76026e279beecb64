/*
 * gpu_plan.h - what the plans (gpu_plan.c) give the decoders beside them:
 * the kernels' description of an archive, the choice between built-in and
 * generated kernels, and the enabling of their shared memory.
 */
#ifndef FZK_GPU_PLAN_H
#define FZK_GPU_PLAN_H

#include <stddef.h>

#include "fz_gpu.h"

struct fze_header;
struct fzk_desc;

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
