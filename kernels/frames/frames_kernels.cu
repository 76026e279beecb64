/*
 * frames_kernels.cu - the kernels of the GPU frames decoder and their
 * launchers (fzf_launch.h); the logic is fzf_dev.h's, which the CPU
 * models run too.
 *
 * A batch goes through five launches on the caller's stream:
 *   walk     one thread a frame: header checks and the block walk;
 *   items    one thread: the frames' item counts (blocks + tail) summed;
 *   decode   one warp an item: LZ4 into shared memory, the bit unshuffle
 *            into the dense frame, and the item's count above the cut;
 *   product  one thread a (row, frame): the matrix product, if any;
 *   scan     one warp a frame: the items' prefix sums, the frame's count;
 *   compact  one warp an item with pixels above the cut: its list at its
 *            prefix-summed offset.
 * Decode and compact are persistent: a grid sized to the GPU walks the
 * items, whose number only the device knows after the walk.  A failure is
 * an atomicMin on the frame's status word, so the first failure in chunk
 * order wins whatever order the warps run in.
 */
#include <cuda_runtime.h>

#include "fzf_dev.h"
#include "fzf_launch.h"

static __global__ void walk_kernel(fzf_batch_dev b) {
  uint32_t f = blockIdx.x * blockDim.x + threadIdx.x;
  if (f >= b.nframes)
    return;
  fzf_walk wk = fzf_walk_chunk(b.chunks + b.offsets[f], b.lengths[f], b.w, b.npixels,
                               b.max_block_bytes, b.starts + (uint64_t)f * b.starts_stride);
  b.walks[f] = wk;
  b.status[f] = wk.status;
}

static __global__ void items_kernel(fzf_batch_dev b) {
  fzf_item_bases(b.walks, b.nframes, b.item_base);
}

template <unsigned W> static __global__ void decode_kernel(fzf_batch_dev b, fzf_frame_view fv) {
  extern __shared__ uint8_t smem[];
  fv.w = W; /* a constant for the compiler */
  unsigned warp = threadIdx.x / 32, wpb = blockDim.x / 32;
  uint8_t *blk = smem + (size_t)warp * b.max_block_bytes;
  uint32_t total = b.item_base[b.nframes];
  for (uint32_t item = blockIdx.x * wpb + warp; item < total; item += gridDim.x * wpb) {
    uint32_t f = fzf_frame_of(b.item_base, b.nframes, item), i = item - b.item_base[f], n;
    uint64_t base;
    const uint8_t *chunk = b.chunks + b.offsets[f];
    const uint32_t *starts = b.starts + (uint64_t)f * b.starts_stride;
    uint8_t *dense;
    uint32_t count = 0;
    if (fzf_item_block(&b.walks[f], b.npixels, i, &n, &base)) {
      dense = b.dense + ((uint64_t)f * b.npixels + base) * W;
      int rc = fzf_lz4_block(chunk + starts[i] + 4, starts[i + 1] - starts[i] - 4, blk, n * W);
      if (rc) {
        if ((threadIdx.x & 31) == 0)
          atomicMin((unsigned long long *)&b.status[f], fzf_status(FZF_PLACE_DATA(i), rc));
      } else {
        count = fzf_unshuffle_count(blk, n, base, dense, &fv, b.lists);
      }
    } else {
      dense = b.dense + ((uint64_t)f * b.npixels + base) * W;
      count = fzf_tail_count(chunk + starts[i], n, base, dense, &fv, b.lists);
    }
    if ((threadIdx.x & 31) == 0 && b.lists)
      b.item_count[item] = count;
    __syncwarp(); /* the next item's LZ4 overwrites blk */
  }
}

static __global__ void product_kernel(fzf_batch_dev b, fzf_frame_view fv, fzf_csr_dev m) {
  uint64_t r = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t f = blockIdx.y;
  if (r >= m.nrows || b.status[f] != FZF_STATUS_OK)
    return;
  const uint8_t *dense = b.dense + (uint64_t)f * b.npixels * fv.w;
  if (m.wf) {
    b.powder_f64[(uint64_t)f * m.nrows + r] =
        fzf_row_f64(m.indptr, m.cols, m.wf, dense, fv.w, fv.kind, r);
  } else {
    int over = 0;
    b.powder_i64[(uint64_t)f * m.nrows + r] =
        fzf_row_i64(m.indptr, m.cols, m.wi, dense, fv.w, fv.kind, r, &over);
    if (over)
      atomicMin((unsigned long long *)&b.status[f], fzf_status(FZF_PLACE_LAST, FZF_R_RANGE));
  }
}

/* One warp a frame: exclusive prefix sums of its items' counts. */
static __global__ void scan_kernel(fzf_batch_dev b) {
  uint32_t f = blockIdx.x, lane = threadIdx.x;
  if (b.status[f] != FZF_STATUS_OK) {
    if (lane == 0)
      b.counts[f] = 0;
    return;
  }
  uint64_t run = fzf_scan_items(b.item_count, b.item_off, b.item_base[f], b.item_base[f + 1]);
  if (lane == 0) {
    if (run > b.cap) {
      b.status[f] = fzf_status(FZF_PLACE_LAST, FZF_R_NOSPACE);
      b.counts[f] = 0;
    } else {
      b.counts[f] = run;
    }
  }
}

template <unsigned W> static __global__ void compact_kernel(fzf_batch_dev b, fzf_frame_view fv) {
  fv.w = W;
  unsigned warp = threadIdx.x / 32, wpb = blockDim.x / 32;
  uint32_t total = b.item_base[b.nframes];
  for (uint32_t item = blockIdx.x * wpb + warp; item < total; item += gridDim.x * wpb) {
    if (!b.item_count[item])
      continue;
    uint32_t f = fzf_frame_of(b.item_base, b.nframes, item), i = item - b.item_base[f], n;
    if (b.status[f] != FZF_STATUS_OK)
      continue;
    uint64_t base;
    fzf_item_block(&b.walks[f], b.npixels, i, &n, &base);
    fzf_compact(b.dense + ((uint64_t)f * b.npixels + base) * W, n, base, &fv,
                b.values + (uint64_t)f * b.cap * W, b.indices + (uint64_t)f * b.cap,
                b.item_off[item]);
  }
}

/* Blocks of the persistent kernels: enough to fill the GPU once. */
static cudaError_t grid_of(const void *kernel, unsigned threads, size_t smem, int *blocks) {
  int dev, sms, per_sm;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess)
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, (int)threads, smem);
  if (e == cudaSuccess)
    *blocks = sms * (per_sm > 0 ? per_sm : 1);
  return e;
}

template <unsigned W>
static cudaError_t run_width(const fzf_batch_dev *b, const fzf_frame_view *fv, const fzf_csr_dev *m,
                             cudaStream_t s) {
  unsigned wpb = b->warps_per_block, threads = 32 * wpb;
  size_t smem = (size_t)wpb * b->max_block_bytes;
  int blocks;
  cudaError_t e = grid_of((const void *)decode_kernel<W>, threads, smem, &blocks);
  if (e != cudaSuccess)
    return e;
  walk_kernel<<<(b->nframes + 63) / 64, 64, 0, s>>>(*b);
  items_kernel<<<1, 1, 0, s>>>(*b);
  decode_kernel<W><<<blocks, threads, smem, s>>>(*b, *fv);
  if (m && m->nrows) {
    dim3 grid((unsigned)((m->nrows + 127) / 128), b->nframes);
    product_kernel<<<grid, 128, 0, s>>>(*b, *fv, *m);
  }
  if (b->lists) {
    scan_kernel<<<b->nframes, 32, 0, s>>>(*b);
    compact_kernel<W><<<blocks, threads, 0, s>>>(*b, *fv);
  }
  return cudaGetLastError();
}

extern "C" int fzf_launch(const fzf_batch_dev *b, const fzf_frame_view *fv, const fzf_csr_dev *m,
                          cudaStream_t stream) {
  if (!b->nframes)
    return cudaSuccess;
  switch (b->w) {
  case 1: return run_width<1>(b, fv, m, stream);
  case 2: return run_width<2>(b, fv, m, stream);
  case 4: return run_width<4>(b, fv, m, stream);
  default: return run_width<8>(b, fv, m, stream);
  }
}
