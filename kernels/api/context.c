/*
 * context.c - the GPU context: one pinned device, a pool of streams, a
 * stream-ordered device memory pool and the CRC tables.
 *
 * Every entry point first makes the context's device current on the calling
 * thread (cudaSetDevice is cheap), so a context may be used from any thread.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fze_chain.h"
#include "fz_gpu.h"
#include "fzk.h"
#include "launch.h"
#include "gpu_ctx.h"
#include "gpu_err.h"
#include "jit.h"

int fz_gpu_device_count(int *count) {
  if (count == NULL)
    return FZ_EINVAL;
  *count = 0;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
    cudaGetLastError(); /* clear the sticky-free error state */
    return FZ_ENOGPU;
  }
  *count = n;
  return 0;
}

/* "GPU-" followed by the 16 UUID bytes in nvidia-smi's grouping. */
static void format_uuid(const unsigned char *u, char *buf, size_t len) {
  snprintf(buf, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
           u[14], u[15]);
}

static int find_device(const char *spec, int *dev, char *why, size_t why_len) {
  int n = 0, rc = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n <= 0) {
    cudaGetLastError();
    if (e == cudaSuccess)
      fze_why(why, why_len, "no CUDA device");
    else
      fzk_cuda_error((int)e, "cudaGetDeviceCount", why, why_len);
    return FZ_ENOGPU;
  }
  if (spec == NULL || spec[0] == 0) {
    *dev = 0;
    return 0;
  }
  if (strncmp(spec, "GPU-", 4) == 0) {
    for (int d = 0; d < n; d++) {
      struct cudaDeviceProp prop;
      if ((rc = fzk_cuda_check(cudaGetDeviceProperties(&prop, d), "cudaGetDeviceProperties", why,
                               why_len)) < 0)
        return rc;
      char u[64];
      format_uuid((const unsigned char *)prop.uuid.bytes, u, sizeof u);
      if (strcasecmp(u, spec) == 0) {
        *dev = d;
        return 0;
      }
    }
    fze_why(why, why_len, "no GPU with UUID '%s'", spec);
    return FZ_ENOGPU;
  }
  char *end;
  long v = strtol(spec, &end, 10);
  if (*end != 0 || v < 0 || v >= n) {
    fze_why(why, why_len, "GPU '%s' is not an index below %d or a GPU- UUID", spec, n);
    return FZ_ENOGPU;
  }
  *dev = (int)v;
  return 0;
}

int fz_gpu_ctx_create(const char *device, unsigned nstreams, fz_gpu_ctx **out, char *why,
                      size_t why_len) {
  if (out == NULL)
    return FZ_EINVAL;
  *out = NULL;
  int dev = 0, rc = find_device(device, &dev, why, why_len);
  if (rc < 0)
    return rc;
  fz_gpu_ctx *ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL)
    return FZ_ENOMEM;
  ctx->device = dev;
  ctx->nstreams = nstreams ? nstreams : 4;
  pthread_mutex_init(&ctx->lock, NULL);
  pthread_mutex_init(&ctx->smem_lock, NULL);
  ctx->streams = calloc(ctx->nstreams, sizeof *ctx->streams);
  if (ctx->streams == NULL) {
    rc = FZ_ENOMEM;
    goto err_ctx;
  }
  struct cudaDeviceProp prop;
  if ((rc = fzk_cuda_check(cudaSetDevice(dev), "cudaSetDevice", why, why_len)) < 0)
    goto err_ctx;
  if ((rc = fzk_cuda_check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties", why,
                           why_len)) < 0)
    goto err_ctx;
  snprintf(ctx->name, sizeof ctx->name, "%s", prop.name);
  ctx->nsm = prop.multiProcessorCount > 0 ? (unsigned)prop.multiProcessorCount : 1;
  format_uuid((const unsigned char *)prop.uuid.bytes, ctx->uuid, sizeof ctx->uuid);
  if ((rc = fzk_jit_create(dev, &ctx->jit, why, why_len)) < 0)
    goto err_ctx;
  /* A GPU the built-in code cannot run on (older than its architecture)
   * runs generated kernels only, if NVRTC can make them for it. */
  int probe = fzk_kernels_probe();
  ctx->aot_ok = probe == 0;
  if (!ctx->aot_ok) {
    cudaGetLastError();
    char cuda[160], jit[1024] = "";
    fzk_cuda_error(probe, "loading a kernel", cuda, sizeof cuda);
    if ((rc = fzk_jit_helpers(ctx->jit, &ctx->kern, jit, sizeof jit)) < 0) {
      fze_why(why, why_len,
              "this build's kernels cannot run on %s (compute capability %d.%d): %s; "
              "and none can be generated for it: %s",
              prop.name, prop.major, prop.minor, cuda, jit);
      rc = FZ_ENOGPU;
      goto err_ctx;
    }
  }
  for (unsigned i = 0; i < ctx->nstreams; i++)
    if ((rc = fzk_cuda_check(cudaStreamCreateWithFlags(&ctx->streams[i], cudaStreamNonBlocking),
                             "cudaStreamCreateWithFlags", why, why_len)) < 0)
      goto err_ctx;

  /* A pool of our own that keeps what it has (no release at sync points),
   * so stream-ordered allocations of repeated jobs reuse the same memory. */
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev;
  if ((rc = fzk_cuda_check(cudaMemPoolCreate(&ctx->pool, &props), "cudaMemPoolCreate", why,
                           why_len)) < 0)
    goto err_ctx;
  ctx->have_pool = 1;
  uint64_t keep = UINT64_MAX;
  if ((rc = fzk_cuda_check(
           cudaMemPoolSetAttribute(ctx->pool, cudaMemPoolAttrReleaseThreshold, &keep),
           "cudaMemPoolSetAttribute", why, why_len)) < 0)
    goto err_ctx;

  uint32_t tab[FZK_CRC_TAB_WORDS];
  fzk_crc_tables(tab);
  if ((rc = fzk_cuda_check(cudaMalloc((void **)&ctx->d_tab, sizeof tab), "cudaMalloc", why,
                           why_len)) < 0)
    goto err_ctx;
  if ((rc = fzk_cuda_check(cudaMemcpy(ctx->d_tab, tab, sizeof tab, cudaMemcpyHostToDevice),
                           "cudaMemcpy", why, why_len)) < 0)
    goto err_ctx;
  *out = ctx;
  return 0;
err_ctx:
  fz_gpu_ctx_destroy(ctx);
  return rc;
}

void fz_gpu_ctx_destroy(fz_gpu_ctx *ctx) {
  if (ctx == NULL)
    return;
  cudaSetDevice(ctx->device);
  if (ctx->streams)
    for (unsigned i = 0; i < ctx->nstreams; i++)
      if (ctx->streams[i]) {
        cudaStreamSynchronize(ctx->streams[i]);
        cudaStreamDestroy(ctx->streams[i]);
      }
  cudaFree(ctx->d_tab);
  fz_gpu_decoder_destroy(ctx->dec);
  fzk_jit_destroy(ctx->jit);
  if (ctx->have_pool)
    cudaMemPoolDestroy(ctx->pool);
  cudaGetLastError();
  pthread_mutex_destroy(&ctx->lock);
  pthread_mutex_destroy(&ctx->smem_lock);
  free(ctx->streams);
  free(ctx);
}

int fz_gpu_ctx_jit_config(fz_gpu_ctx *ctx, const char *cache_dir, uint64_t max_disk_bytes,
                          int enabled, char *why, size_t why_len) {
  if (ctx == NULL || enabled < FZ_GPU_JIT_OFF || enabled > FZ_GPU_JIT_ONLY)
    return FZ_EINVAL;
  if (!ctx->aot_ok && enabled == FZ_GPU_JIT_OFF) {
    fze_why(why, why_len, "%s runs no built-in kernel of this build: the JIT stays on", ctx->name);
    return FZ_EINVAL;
  }
  int rc =
      fzk_jit_config(ctx->jit, cache_dir, max_disk_bytes, enabled != FZ_GPU_JIT_OFF, why, why_len);
  if (rc < 0)
    return rc;
  if (enabled == FZ_GPU_JIT_ONLY && ctx->kern == NULL) {
    if ((rc = fzk_cuda_check(cudaSetDevice(ctx->device), "cudaSetDevice", why, why_len)) < 0)
      return rc;
    const struct fzk_kern *k = NULL;
    if ((rc = fzk_jit_helpers(ctx->jit, &k, why, why_len)) < 0)
      return rc;
    ctx->kern = k;
  }
  return 0;
}

void fz_gpu_ctx_jit_counts(fz_gpu_ctx *ctx, fz_gpu_jit_counts *out) {
  if (out == NULL)
    return;
  fzk_jit_stats(ctx ? ctx->jit : NULL, out);
}

int fz_gpu_ctx_jit_failure(fz_gpu_ctx *ctx, char *buf, size_t len) {
  return ctx == NULL ? 0 : fzk_jit_failure(ctx->jit, buf, len);
}

fz_gpu_stream fz_gpu_ctx_stream(fz_gpu_ctx *ctx, unsigned i) {
  return ctx->streams[i % ctx->nstreams];
}

int fz_gpu_ctx_device(const fz_gpu_ctx *ctx) {
  return ctx->device;
}
const char *fz_gpu_ctx_name(const fz_gpu_ctx *ctx) {
  return ctx->name;
}
const char *fz_gpu_ctx_uuid(const fz_gpu_ctx *ctx) {
  return ctx->uuid;
}

int fz_gpu_host_alloc(fz_gpu_ctx *ctx, size_t bytes, void **h_ptr, char *why, size_t why_len) {
  if (ctx == NULL || h_ptr == NULL)
    return FZ_EINVAL;
  *h_ptr = NULL;
  int rc = 0;
  if ((rc = fzk_cuda_check(cudaSetDevice(ctx->device), "cudaSetDevice", why, why_len)) < 0)
    goto err_clear;
  if ((rc = fzk_cuda_check(cudaMallocHost(h_ptr, bytes ? bytes : 1), "cudaMallocHost", why,
                           why_len)) < 0)
    goto err_clear;
  return 0;
err_clear:
  cudaGetLastError();
  *h_ptr = NULL;
  /* Pinned memory is host memory: its lack is the host's. */
  return rc == FZ_EGPUOOM ? FZ_ENOMEM : rc;
}

void fz_gpu_host_free(fz_gpu_ctx *ctx, void *h_ptr) {
  if (ctx == NULL || h_ptr == NULL)
    return;
  cudaSetDevice(ctx->device);
  cudaFreeHost(h_ptr);
  cudaGetLastError();
}

int fz_gpu_copy(fz_gpu_ctx *ctx, void *dst, const void *src, size_t n, fz_gpu_stream stream,
                char *why, size_t why_len) {
  if (ctx == NULL || (n && (dst == NULL || src == NULL)))
    return FZ_EINVAL;
  int rc = 0;
  if ((rc = fzk_cuda_check(cudaSetDevice(ctx->device), "cudaSetDevice", why, why_len)) < 0)
    goto err_clear;
  if (n && (rc = fzk_cuda_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream),
                                "cudaMemcpyAsync", why, why_len)) < 0)
    goto err_clear;
  return 0;
err_clear:
  cudaGetLastError(); /* a non-sticky error must not fail the next call */
  return rc;
}

int fz_gpu_sync(fz_gpu_ctx *ctx, fz_gpu_stream stream, char *why, size_t why_len) {
  if (ctx == NULL)
    return FZ_EINVAL;
  int rc = 0;
  if ((rc = fzk_cuda_check(cudaSetDevice(ctx->device), "cudaSetDevice", why, why_len)) < 0)
    goto err_clear;
  if ((rc = fzk_cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", why, why_len)) <
      0)
    goto err_clear;
  return 0;
err_clear:
  cudaGetLastError();
  return rc;
}

int fz_gpu_malloc(fz_gpu_ctx *ctx, size_t bytes, fz_gpu_stream stream, void **d_ptr, char *why,
                  size_t why_len) {
  if (ctx == NULL || d_ptr == NULL)
    return FZ_EINVAL;
  int rc = 0;
  *d_ptr = NULL;
  if ((rc = fzk_cuda_check(cudaSetDevice(ctx->device), "cudaSetDevice", why, why_len)) < 0)
    return rc;
  if ((rc = fzk_cuda_check(cudaMallocFromPoolAsync(d_ptr, bytes ? bytes : 1, ctx->pool,
                                                   stream ? stream : ctx->streams[0]),
                           "cudaMallocFromPoolAsync", why, why_len)) < 0)
    return rc;
  return 0;
}

int fz_gpu_free(fz_gpu_ctx *ctx, void *d_ptr, fz_gpu_stream stream) {
  if (ctx == NULL)
    return FZ_EINVAL;
  if (d_ptr == NULL)
    return 0;
  char why[8];
  size_t why_len = sizeof why;
  int rc = 0;
  if ((rc = fzk_cuda_check(cudaSetDevice(ctx->device), "cudaSetDevice", why, why_len)) < 0)
    return rc;
  if ((rc = fzk_cuda_check(cudaFreeAsync(d_ptr, stream ? stream : ctx->streams[0]), "cudaFreeAsync",
                           why, why_len)) < 0)
    return rc;
  return 0;
}

int fz_gpu_ctx_trim(fz_gpu_ctx *ctx) {
  if (ctx == NULL)
    return FZ_EINVAL;
  char why[8];
  size_t why_len = sizeof why;
  int rc = 0;
  if ((rc = fzk_cuda_check(cudaSetDevice(ctx->device), "cudaSetDevice", why, why_len)) < 0)
    return rc;
  if ((rc = fzk_cuda_check(cudaMemPoolTrimTo(ctx->pool, 0), "cudaMemPoolTrimTo", why, why_len)) < 0)
    return rc;
  return 0;
}
