/*
 * frames_gpu.c - the GPU frames decoder's host side (fz_frames_gpu.h): the
 * decoder's device buffers, made once, and a batch's copies and launches
 * on the caller's stream.
 *
 * Everything a batch of up to max_frames frames needs on the device is
 * allocated by fz_frames_gpu_create: the chunk staging, the walk's block
 * offsets (npixels / 8 + 1 a frame: a block holds at least 8 elements),
 * the items' counts and offsets, the dense frames, the lists and the
 * products; a batch only copies and launches.  Every CUDA call is checked;
 * a failure is FZ_EGPUOOM, FZ_ENOGPU or FZ_ECUDA with the call and the CUDA
 * error's name.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fz_frames_gpu.h"
#include "fzf_host.h"
#include "fzf_launch.h"

struct fz_frames_gpu {
  fz_dtype dtype;
  unsigned w;
  int kind;
  size_t npixels, max_frames, cap, max_block_bytes, max_batch_bytes, nrows;
  int device;
  int has_mask;
  /* Device buffers. */
  uint8_t *d_active, *d_chunks, *d_dense, *d_values;
  uint32_t *d_indices, *d_starts, *d_item_base, *d_item_count, *d_item_off;
  uint64_t *d_offsets, *d_lengths;
  unsigned long long *d_status, *d_counts;
  fzf_walk *d_walks;
  uint64_t *d_indptr;
  uint32_t *d_cols;
  float *d_wf;
  int32_t *d_wi;
  double *d_powder_f64;
  int64_t *d_powder_i64;
  /* Pinned host staging: offsets and lengths up, statuses and counts down. */
  uint64_t *h_offsets, *h_lengths;
  unsigned long long *h_status, *h_counts;
  uint8_t *h_chunks; /* fz_frames_gpu_staging's, made on demand */
  /* fz_frames_gpu_send's copies, on copy_stream (made with h_chunks),
   * done at pre_done once fz_frames_gpu_sent records it: a staged batch
   * goes to d_chunks at its offset in h_chunks. */
  cudaStream_t copy_stream;
  cudaEvent_t pre_done;
  const uint8_t *pre_base;
  size_t pre_len;
  int pre_pending;
  /* keep mode: the last batch's lists, frame i's at h_lists + i * pitch
   * elements (values, then the indices at h_lists + n * pitch * w), and
   * its products, fetched in one copy each (made and grown on demand). */
  uint8_t *h_lists;
  size_t h_lists_cap, pitch;
  uint8_t *h_powder;
  size_t dev_bytes;      /* device memory held */
  uint64_t *last_status; /* the last batch's status words, for _why */
  size_t last_n;
  int last_keep, last_lists, last_product; /* what the last batch left */
};

static int cuda_fail(cudaError_t e, const char *what, char *why, size_t why_len) {
  if (why && why_len)
    fzf_say(why, why_len, "frames (GPU): %s: %s (%s)", what, cudaGetErrorName(e),
            cudaGetErrorString(e));
  switch (e) {
  case cudaErrorMemoryAllocation: return FZ_EGPUOOM;
  case cudaErrorNoDevice:
  case cudaErrorInsufficientDriver:
  case cudaErrorInvalidDevice: return FZ_ENOGPU;
  default: return FZ_ECUDA;
  }
}

/* Runs a CUDA call; on failure returns its fz code from the function. */
#define CUDA_TRY(call)                                                                             \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      return cuda_fail(e_, #call, why, why_len);                                                   \
  } while (0)

static int dev_alloc(fz_frames_gpu *g, void **p, size_t bytes, const char *what, char *why,
                     size_t why_len) {
  cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    *p = NULL;
    int rc = cuda_fail(e, "cudaMalloc", why, why_len);
    if (why && why_len) {
      size_t used = strlen(why);
      snprintf(why + used, why_len - used, " for %zu bytes of %s", bytes, what);
    }
    return rc;
  }
  g->dev_bytes += bytes ? bytes : 1;
  return 0;
}

size_t fz_frames_gpu_rows(const fz_frames_gpu *g) {
  return g ? g->nrows : 0;
}

void fz_frames_gpu_destroy(fz_frames_gpu *g) {
  if (!g)
    return;
  void *dev[] = {g->d_active,  g->d_chunks,    g->d_dense,      g->d_values,     g->d_indices,
                 g->d_starts,  g->d_item_base, g->d_item_count, g->d_item_off,   g->d_offsets,
                 g->d_lengths, g->d_status,    g->d_counts,     g->d_walks,      g->d_indptr,
                 g->d_cols,    g->d_wf,        g->d_wi,         g->d_powder_f64, g->d_powder_i64};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
    if (dev[i])
      cudaFree(dev[i]);
  void *host[] = {g->h_offsets, g->h_lengths, g->h_status, g->h_counts,
                  g->h_chunks,  g->h_lists,   g->h_powder};
  for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
    if (host[i])
      cudaFreeHost(host[i]);
  if (g->pre_done)
    cudaEventDestroy(g->pre_done);
  if (g->copy_stream)
    cudaStreamDestroy(g->copy_stream);
  free(g->last_status);
  free(g);
}

static int check_params(const fz_frames_gpu_params *p, char *why, size_t why_len) {
  if (!fz_dtype_size(p->dtype)) {
    fzf_say(why, why_len, "frames (GPU): dtype %d", (int)p->dtype);
    return FZ_EDTYPE;
  }
  if (p->npixels > UINT32_MAX) {
    fzf_say(why, why_len, "frames (GPU): %zu pixels a frame, at most 2^32 - 1", p->npixels);
    return FZ_ESHAPE;
  }
  if (p->codec == FZ_BSLZ4_ZSTD) {
    fzf_say(why, why_len,
            "frames (GPU): zstd chunks are decoded on the CPU "
            "(fz_frames_sparse_batch); the GPU decodes LZ4");
    return FZ_EINVAL;
  }
  if (p->codec != FZ_BSLZ4_LZ4) {
    fzf_say(why, why_len, "frames (GPU): codec %d (2 LZ4)", (int)p->codec);
    return FZ_EINVAL;
  }
  if (p->max_block_bytes > 32768 || (p->max_block_bytes && p->max_block_bytes < 64)) {
    fzf_say(why, why_len, "frames (GPU): max_block_bytes %zu, 64 to 32768 (0: 8192)",
            p->max_block_bytes);
    return FZ_EINVAL;
  }
  /* The product's grid has a dimension of frames, at most 65535. */
  if (p->max_frames > 65535 || (p->cap > p->npixels && p->npixels)) {
    fzf_say(why, why_len,
            "frames (GPU): max_frames %zu (at most 65535) or cap %zu above %zu "
            "pixels",
            p->max_frames, p->cap, p->npixels);
    return FZ_EINVAL;
  }
  return 0;
}

/* The device buffers of the decoder, all at once. */
static int alloc_buffers(fz_frames_gpu *g, char *why, size_t why_len) {
  size_t F = g->max_frames, P = g->npixels, w = g->w, S = P / 8 + 2;
  /* Items (and the walk's offsets) are counted in 32 bits on the device. */
  if ((unsigned long long)F * S >= UINT32_MAX) {
    fzf_say(why, why_len, "frames (GPU): %zu frames of %zu pixels are too many for one batch", F,
            P);
    return FZ_EINVAL;
  }
  struct {
    void **p;
    size_t bytes;
    const char *what;
  } bufs[] = {
      {(void **)&g->d_chunks, g->max_batch_bytes, "chunks"},
      {(void **)&g->d_offsets, F * 8, "offsets"},
      {(void **)&g->d_lengths, F * 8, "lengths"},
      {(void **)&g->d_starts, F * S * 4, "block offsets"},
      {(void **)&g->d_walks, F * sizeof(fzf_walk), "walks"},
      {(void **)&g->d_item_base, (F + 1) * 4, "items"},
      {(void **)&g->d_item_count, F * S * 4, "item counts"},
      {(void **)&g->d_item_off, F * S * 4, "item offsets"},
      {(void **)&g->d_status, F * 8, "statuses"},
      {(void **)&g->d_counts, F * 8, "counts"},
      {(void **)&g->d_dense, F * P * w, "dense frames"},
      {(void **)&g->d_values, F * g->cap * w, "listed values"},
      {(void **)&g->d_indices, F * g->cap * 4, "listed indices"},
  };
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
    int rc = dev_alloc(g, bufs[i].p, bufs[i].bytes, bufs[i].what, why, why_len);
    if (rc < 0)
      return rc;
  }
  CUDA_TRY(cudaMallocHost((void **)&g->h_offsets, F * 8));
  CUDA_TRY(cudaMallocHost((void **)&g->h_lengths, F * 8));
  CUDA_TRY(cudaMallocHost((void **)&g->h_status, F * 8));
  CUDA_TRY(cudaMallocHost((void **)&g->h_counts, F * 8));
  g->last_status = calloc(F ? F : 1, sizeof *g->last_status);
  if (!g->last_status) {
    fzf_say(why, why_len, "frames (GPU): out of memory");
    return FZ_ENOMEM;
  }
  return 0;
}

/* The mask bits and the folded matrix, uploaded once. */
static int upload_mask_csr(fz_frames_gpu *g, const fz_frames_gpu_params *p, char *why,
                           size_t why_len) {
  uint8_t *active = NULL;
  int rc = 0;
  if (p->mask) {
    if (!(active = fzf_mask_bits(p->mask, p->npixels))) {
      fzf_say(why, why_len, "frames (GPU): out of memory for the mask");
      return FZ_ENOMEM;
    }
    size_t bytes = p->npixels / 8 + 16;
    if ((rc = dev_alloc(g, (void **)&g->d_active, bytes, "the mask", why, why_len)) < 0)
      goto done;
    cudaError_t e = cudaMemcpy(g->d_active, active, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
      rc = cuda_fail(e, "cudaMemcpy of the mask", why, why_len);
      goto done;
    }
  }
  if (p->csr) {
    fzf_csr c;
    if ((rc = fzf_csr_fold(p->csr, active, p->npixels, p->dtype, &c, why, why_len)) < 0)
      goto done;
    g->nrows = c.nrows;
    size_t F = g->max_frames;
    struct {
      void **d;
      const void *h;
      size_t bytes;
      const char *what;
    } up[] = {
        {(void **)&g->d_indptr, c.indptr, (c.nrows + 1) * 8, "matrix rows"},
        {(void **)&g->d_cols, c.cols, c.nnz * 4, "matrix columns"},
        {(void **)&g->d_wf, c.wf, c.wf ? c.nnz * 4 : 0, "matrix weights"},
        {(void **)&g->d_wi, c.wi, c.wi ? c.nnz * 4 : 0, "matrix weights"},
    };
    for (size_t i = 0; i < 4 && rc == 0; i++) {
      if (!up[i].h)
        continue;
      if ((rc = dev_alloc(g, up[i].d, up[i].bytes, up[i].what, why, why_len)) < 0)
        break;
      cudaError_t e = cudaMemcpy(*up[i].d, up[i].h, up[i].bytes, cudaMemcpyHostToDevice);
      if (e != cudaSuccess)
        rc = cuda_fail(e, "cudaMemcpy of the matrix", why, why_len);
    }
    if (rc == 0 && c.wf)
      rc = dev_alloc(g, (void **)&g->d_powder_f64, F * c.nrows * 8, "products", why, why_len);
    if (rc == 0 && c.wi)
      rc = dev_alloc(g, (void **)&g->d_powder_i64, F * c.nrows * 8, "products", why, why_len);
    fzf_csr_free(&c);
  }
done:
  free(active);
  return rc;
}

int fz_frames_gpu_create(const fz_frames_gpu_params *p, fz_frames_gpu **out, char *why,
                         size_t why_len) {
  if (!p || !out) {
    fzf_say(why, why_len, "frames (GPU): NULL parameters");
    return FZ_EINVAL;
  }
  *out = NULL;
  int rc = check_params(p, why, why_len);
  if (rc < 0)
    return rc;
  fz_frames_gpu *g = calloc(1, sizeof *g);
  if (!g) {
    fzf_say(why, why_len, "frames (GPU): out of memory");
    return FZ_ENOMEM;
  }
  g->dtype = p->dtype;
  g->w = (unsigned)fz_dtype_size(p->dtype);
  g->kind = fz_frames_kind(p->dtype);
  g->npixels = p->npixels;
  g->max_frames = p->max_frames ? p->max_frames : 64;
  g->cap = p->cap ? p->cap : p->npixels;
  g->max_block_bytes = p->max_block_bytes ? p->max_block_bytes : 8192;
  g->max_batch_bytes = p->max_batch_bytes
                           ? p->max_batch_bytes
                           : g->max_frames * fz_bslz4_bound(FZ_BSLZ4_LZ4, p->npixels, g->w, 0);
  g->device = p->device;
  g->has_mask = p->mask != NULL;
  cudaError_t e = cudaSetDevice(p->device);
  if (e != cudaSuccess) {
    rc = cuda_fail(e, "cudaSetDevice", why, why_len);
    goto err_frames;
  }
  if ((rc = alloc_buffers(g, why, why_len)) < 0 || (rc = upload_mask_csr(g, p, why, why_len)) < 0)
    goto err_frames;
  *out = g;
  return 0;
err_frames:
  fz_frames_gpu_destroy(g);
  return rc;
}

/* Bytes of the pinned staging from p when p lies in it (at its start or
 * inside, where a caller fills one part while a batch runs from another),
 * else 0. */
static size_t staging_room(const fz_frames_gpu *g, const void *p) {
  uintptr_t at = (uintptr_t)p, h = (uintptr_t)g->h_chunks;
  if (!g->h_chunks || at < h || at - h >= g->max_batch_bytes)
    return 0;
  return g->max_batch_bytes - (size_t)(at - h);
}

/* The same for a batch: 0 for chunks in device memory. */
static size_t staged_room(const fz_frames_gpu *g, const fz_frames_gpu_batch *b) {
  return b->base_on_device ? 0 : staging_room(g, b->base);
}

/* Checks a batch against the decoder before anything is copied. */
static int check_batch(const fz_frames_gpu *g, const fz_frames_gpu_batch *b, char *why,
                       size_t why_len) {
  if (!b->counts || !b->status || (b->nframes && (!b->base || !b->offsets || !b->lengths))) {
    fzf_say(why, why_len, "frames (GPU): a batch needs base, offsets, lengths, counts, status");
    return FZ_EINVAL;
  }
  if (b->nframes > g->max_frames) {
    fzf_say(why, why_len, "frames (GPU): %zu frames, the decoder takes %zu a batch", b->nframes,
            g->max_frames);
    return FZ_EINVAL;
  }
  if (!b->keep && b->values && (!b->indices || b->cap > g->cap)) {
    fzf_say(why, why_len, "frames (GPU): lists of %zu pixels a frame, the decoder holds %zu",
            b->cap, g->cap);
    return FZ_EINVAL;
  }
  if (!b->keep && ((b->powder_f64 && !g->d_powder_f64) || (b->powder_i64 && !g->d_powder_i64))) {
    fzf_say(why, why_len, "frames (GPU): products asked for that the matrix's weights do not give");
    return FZ_EINVAL;
  }
  size_t total = 0;
  size_t room = staged_room(g, b);
  for (size_t i = 0; i < b->nframes; i++) {
    if (room) {
      if (b->offsets[i] > room || b->lengths[i] > room - b->offsets[i]) {
        fzf_say(why, why_len,
                "frames (GPU): chunk %zu (%llu bytes at %llu) lies outside the "
                "%zu bytes of the staging buffer from the batch's base",
                i, (unsigned long long)b->lengths[i], (unsigned long long)b->offsets[i], room);
        return FZ_EINVAL;
      }
    } else if (b->base_on_device) {
      if (b->offsets[i] > b->base_len || b->lengths[i] > b->base_len - b->offsets[i]) {
        fzf_say(why, why_len,
                "frames (GPU): chunk %zu (%llu bytes at %llu) lies outside the "
                "%zu-byte buffer",
                i, (unsigned long long)b->lengths[i], (unsigned long long)b->offsets[i],
                b->base_len);
        return FZ_EINVAL;
      }
    } else if (b->lengths[i] > g->max_batch_bytes - total) {
      fzf_say(why, why_len, "frames (GPU): the chunks of the batch pass max_batch_bytes (%zu)",
              g->max_batch_bytes);
      return FZ_EINVAL;
    } else {
      total += b->lengths[i];
    }
  }
  return 0;
}

/* keep mode: the lists of the batch in two strided copies (the longest
 * list's length a frame) and the products in one, into pinned memory, so
 * that fz_frames_gpu_take copies frames out of host memory. */
static int fetch_kept(fz_frames_gpu *g, const fz_frames_gpu_batch *b, cudaStream_t s, char *why,
                      size_t why_len) {
  size_t n = b->nframes, w = g->w, longest = 0;
  for (size_t i = 0; i < n && g->last_lists; i++)
    if (b->counts[i] > longest)
      longest = b->counts[i];
  if (longest > g->cap)
    longest = g->cap;
  g->pitch = longest;
  if (longest) {
    size_t need = n * longest * (w + 4);
    if (need > g->h_lists_cap) {
      if (g->h_lists)
        cudaFreeHost(g->h_lists);
      g->h_lists = NULL;
      g->h_lists_cap = 0;
      CUDA_TRY(cudaMallocHost((void **)&g->h_lists, need));
      g->h_lists_cap = need;
    }
    CUDA_TRY(cudaMemcpy2DAsync(g->h_lists, longest * w, g->d_values, g->cap * w, longest * w, n,
                               cudaMemcpyDeviceToHost, s));
    CUDA_TRY(cudaMemcpy2DAsync(g->h_lists + n * longest * w, longest * 4, g->d_indices, g->cap * 4,
                               longest * 4, n, cudaMemcpyDeviceToHost, s));
  }
  if (g->last_product) {
    if (!g->h_powder)
      CUDA_TRY(cudaMallocHost((void **)&g->h_powder, g->max_frames * g->nrows * 8 + 1));
    const void *src =
        g->d_powder_f64 ? (const void *)g->d_powder_f64 : (const void *)g->d_powder_i64;
    CUDA_TRY(cudaMemcpyAsync(g->h_powder, src, n * g->nrows * 8, cudaMemcpyDeviceToHost, s));
  }
  if (longest || g->last_product)
    CUDA_TRY(cudaStreamSynchronize(s));
  return 0;
}

int64_t fz_frames_gpu_run(fz_frames_gpu *g, const fz_frames_gpu_batch *b,
                          fz_frames_gpu_stream stream, char *why, size_t why_len) {
  if (!g || !b) {
    fzf_say(why, why_len, "frames (GPU): NULL decoder or batch");
    return FZ_EINVAL;
  }
  int rc = check_batch(g, b, why, why_len);
  if (rc < 0)
    return rc;
  cudaStream_t s = (cudaStream_t)stream;
  size_t n = b->nframes, w = g->w, P = g->npixels;
  g->last_n = 0;
  if (!n)
    return 0;
  CUDA_TRY(cudaSetDevice(g->device));
  /* Host chunks are packed into the staging buffer; device chunks are read
   * where they are. */
  const uint8_t *chunks = b->base;
  /* A prefetch not yet waited for: this run's copies and kernels come
   * after it, whether or not it was this batch's. */
  int sent = 0;
  if (g->pre_pending) {
    CUDA_TRY(cudaStreamWaitEvent(s, g->pre_done, 0));
    g->pre_pending = 0;
    sent = b->prefetched && !b->base_on_device && g->pre_base == b->base;
  }
  if (b->base_on_device) {
    memcpy(g->h_offsets, b->offsets, n * 8);
  } else if (staged_room(g, b)) {
    /* Staged: the bytes from the base up to the last chunk's end, in one
     * copy (or the prefetch's), to the same offset in d_chunks. */
    uint64_t end = 0;
    for (size_t i = 0; i < n; i++)
      if (b->lengths[i] && b->offsets[i] + b->lengths[i] > end)
        end = b->offsets[i] + b->lengths[i];
    size_t off = (size_t)(b->base - g->h_chunks);
    if (end && !(sent && g->pre_len >= end))
      CUDA_TRY(cudaMemcpyAsync(g->d_chunks + off, b->base, end, cudaMemcpyHostToDevice, s));
    memcpy(g->h_offsets, b->offsets, n * 8);
    chunks = g->d_chunks + off;
  } else {
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
      if (b->lengths[i])
        CUDA_TRY(cudaMemcpyAsync(g->d_chunks + at, b->base + b->offsets[i], b->lengths[i],
                                 cudaMemcpyHostToDevice, s));
      g->h_offsets[i] = at;
      at += b->lengths[i];
    }
    chunks = g->d_chunks;
  }
  memcpy(g->h_lengths, b->lengths, n * 8);
  CUDA_TRY(cudaMemcpyAsync(g->d_offsets, g->h_offsets, n * 8, cudaMemcpyHostToDevice, s));
  CUDA_TRY(cudaMemcpyAsync(g->d_lengths, g->h_lengths, n * 8, cudaMemcpyHostToDevice, s));

  int keep = b->keep != 0;
  int lists = keep ? b->keep_lists != 0 : b->values != NULL;
  int dense_out = !keep && b->dense && b->out_on_device;
  int lists_out = !keep && lists && b->out_on_device;
  fzf_batch_dev d = {
      .nframes = (uint32_t)n,
      .w = g->w,
      .npixels = P,
      .max_block_bytes = (uint32_t)g->max_block_bytes,
      .warps_per_block =
          (uint32_t)(32768 / g->max_block_bytes < 4 ? 32768 / g->max_block_bytes : 4),
      .chunks = chunks,
      .offsets = g->d_offsets,
      .lengths = g->d_lengths,
      .starts = g->d_starts,
      .starts_stride = P / 8 + 2,
      .walks = g->d_walks,
      .item_base = g->d_item_base,
      .item_count = g->d_item_count,
      .item_off = g->d_item_off,
      .status = g->d_status,
      .counts = g->d_counts,
      .dense = dense_out ? b->dense : g->d_dense,
      .lists = lists,
      .values = lists_out ? b->values : g->d_values,
      .indices = lists_out ? b->indices : g->d_indices,
      .cap = lists ? (keep ? g->cap : b->cap) : 0,
      .powder_f64 = !keep && b->powder_f64 && b->out_on_device ? b->powder_f64 : g->d_powder_f64,
      .powder_i64 = !keep && b->powder_i64 && b->out_on_device ? b->powder_i64 : g->d_powder_i64,
  };
  fzf_frame_view fv = {g->w, g->kind, fz_frames_cut_of(b->cut, g->w, g->kind), g->d_active};
  fzf_csr_dev m = {g->nrows, g->d_indptr, g->d_cols, g->d_wf, g->d_wi};
  int want_product = g->nrows && (keep || b->powder_f64 || b->powder_i64);
  int e = fzf_launch(&d, &fv, want_product ? &m : NULL, s);
  if (e != cudaSuccess)
    return cuda_fail((cudaError_t)e, "the frames kernels' launch", why, why_len);
  CUDA_TRY(cudaMemcpyAsync(g->h_status, g->d_status, n * 8, cudaMemcpyDeviceToHost, s));
  CUDA_TRY(cudaMemcpyAsync(g->h_counts, g->d_counts, n * 8, cudaMemcpyDeviceToHost, s));
  CUDA_TRY(cudaStreamSynchronize(s));

  int64_t failed = 0;
  for (size_t i = 0; i < n; i++) {
    g->last_status[i] = g->h_status[i];
    b->status[i] = fzf_status_code(g->h_status[i]);
    b->counts[i] = b->status[i] || !lists ? 0 : (size_t)g->h_counts[i];
    failed += b->status[i] != 0;
  }
  g->last_n = n;
  g->last_keep = keep;
  g->last_lists = lists;
  g->last_product = want_product;
  if (keep) {
    int fetched = fetch_kept(g, b, s, why, why_len);
    return fetched < 0 ? fetched : failed;
  }
  /* Results wanted in host memory: only what each frame listed. */
  if (lists && !b->out_on_device) {
    for (size_t i = 0; i < n; i++) {
      if (!b->counts[i])
        continue;
      CUDA_TRY(cudaMemcpyAsync((uint8_t *)b->values + i * b->cap * w, g->d_values + i * b->cap * w,
                               b->counts[i] * w, cudaMemcpyDeviceToHost, s));
      CUDA_TRY(cudaMemcpyAsync(b->indices + i * b->cap, g->d_indices + i * b->cap, b->counts[i] * 4,
                               cudaMemcpyDeviceToHost, s));
    }
  }
  if (b->dense && !b->out_on_device)
    CUDA_TRY(cudaMemcpyAsync(b->dense, g->d_dense, n * P * w, cudaMemcpyDeviceToHost, s));
  if (want_product && !b->out_on_device) {
    if (b->powder_f64)
      CUDA_TRY(cudaMemcpyAsync(b->powder_f64, g->d_powder_f64, n * g->nrows * 8,
                               cudaMemcpyDeviceToHost, s));
    if (b->powder_i64)
      CUDA_TRY(cudaMemcpyAsync(b->powder_i64, g->d_powder_i64, n * g->nrows * 8,
                               cudaMemcpyDeviceToHost, s));
  }
  if ((lists || b->dense || want_product) && !b->out_on_device)
    CUDA_TRY(cudaStreamSynchronize(s));
  return failed;
}

int fz_frames_gpu_take(fz_frames_gpu *g, size_t i, void *values, uint32_t *indices, void *dense,
                       void *powder, fz_frames_gpu_stream stream, char *why, size_t why_len) {
  if (!g || i >= g->last_n || !g->last_keep) {
    fzf_say(why, why_len, "frames (GPU): no frame %zu kept from the last batch", i);
    return FZ_EINVAL;
  }
  cudaStream_t s = (cudaStream_t)stream;
  size_t w = g->w, P = g->npixels;
  size_t count = fzf_status_code(g->last_status[i]) ? 0 : (size_t)g->h_counts[i];
  if ((values || indices) && !g->last_lists) {
    fzf_say(why, why_len, "frames (GPU): the last batch listed no pixels");
    return FZ_EINVAL;
  }
  if (powder && !g->last_product) {
    fzf_say(why, why_len, "frames (GPU): the last batch made no products");
    return FZ_EINVAL;
  }
  /* The lists and products were fetched with the batch (fetch_kept). */
  if (values && count)
    memcpy(values, g->h_lists + i * g->pitch * w, count * w);
  if (indices && count)
    memcpy(indices, g->h_lists + (g->last_n * g->pitch * w) + i * g->pitch * 4, count * 4);
  if (powder)
    memcpy(powder, g->h_powder + i * g->nrows * 8, g->nrows * 8);
  if (dense) {
    CUDA_TRY(cudaMemcpyAsync(dense, g->d_dense + i * P * w, P * w, cudaMemcpyDeviceToHost, s));
    CUDA_TRY(cudaStreamSynchronize(s));
  }
  return 0;
}

uint8_t *fz_frames_gpu_staging(fz_frames_gpu *g, size_t *cap, char *why, size_t why_len) {
  if (!g) {
    fzf_say(why, why_len, "frames (GPU): NULL decoder");
    return NULL;
  }
  if (!g->h_chunks) {
    /* The staging's copy stream and event are made with it, so that
     * fz_frames_gpu_send may be called from several threads at once. */
    cudaError_t e = cudaSetDevice(g->device);
    if (e == cudaSuccess && !g->copy_stream)
      e = cudaStreamCreateWithFlags(&g->copy_stream, cudaStreamNonBlocking);
    if (e == cudaSuccess && !g->pre_done)
      e = cudaEventCreateWithFlags(&g->pre_done, cudaEventDisableTiming);
    if (e == cudaSuccess)
      e = cudaMallocHost((void **)&g->h_chunks, g->max_batch_bytes ? g->max_batch_bytes : 1);
    if (e != cudaSuccess) {
      g->h_chunks = NULL;
      cuda_fail(e, "cudaMallocHost of the chunk staging", why, why_len);
      return NULL;
    }
  }
  if (cap)
    *cap = g->max_batch_bytes;
  return g->h_chunks;
}

/* A prefetch's range [p, p + len) inside the staging, and the decoder's
 * device current on this thread: 0, or FZ_EINVAL or a CUDA error. */
static int prefetch_range(fz_frames_gpu *g, const void *p, size_t len, char *why, size_t why_len) {
  size_t room = g ? staging_room(g, p) : 0;
  if (room == 0 || len > room) {
    fzf_say(why, why_len, "frames (GPU): a prefetch must lie inside the staging");
    return FZ_EINVAL;
  }
  cudaError_t e = cudaSetDevice(g->device);
  return e == cudaSuccess ? 0 : cuda_fail(e, "the prefetch of a batch's chunks", why, why_len);
}

int fz_frames_gpu_send(fz_frames_gpu *g, const void *p, size_t len, char *why, size_t why_len) {
  const uint8_t *at = p;
  int rc = prefetch_range(g, p, len, why, why_len);
  if (rc < 0 || len == 0)
    return rc;
  cudaError_t e = cudaMemcpyAsync(g->d_chunks + (at - g->h_chunks), at, len, cudaMemcpyHostToDevice,
                                  g->copy_stream);
  return e == cudaSuccess ? 0 : cuda_fail(e, "the prefetch of a batch's chunks", why, why_len);
}

int fz_frames_gpu_sent(fz_frames_gpu *g, const void *base, size_t len, char *why, size_t why_len) {
  int rc = prefetch_range(g, base, len, why, why_len);
  if (rc < 0)
    return rc;
  /* On failure the batch runs without prefetched and makes its own copy;
   * a prefetch copy still under way writes the same bytes. */
  cudaError_t e = cudaEventRecord(g->pre_done, g->copy_stream);
  if (e != cudaSuccess)
    return cuda_fail(e, "the prefetch of a batch's chunks", why, why_len);
  g->pre_base = base;
  g->pre_len = len;
  g->pre_pending = 1;
  return 0;
}

int fz_frames_gpu_prefetch(fz_frames_gpu *g, const void *base, size_t len, char *why,
                           size_t why_len) {
  int rc = fz_frames_gpu_send(g, base, len, why, why_len);
  return rc < 0 ? rc : fz_frames_gpu_sent(g, base, len, why, why_len);
}

size_t fz_frames_gpu_device_bytes(const fz_frames_gpu *g) {
  return g ? g->dev_bytes : 0;
}

void fz_frames_gpu_why(const fz_frames_gpu *g, size_t i, char *why, size_t why_len) {
  if (!g || i >= g->last_n) {
    fzf_say(why, why_len, "frames (GPU): no frame %zu in the last batch", i);
    return;
  }
  fzf_status_text(g->last_status[i], why, why_len);
}
