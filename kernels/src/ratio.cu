/*
 * ratio.cu - the host side of the ratio preset's kernels (ratio_kernels.cuh):
 * the chunks' parameters, the scratch, and the launches, of the kernels
 * built into the library or, for a GPU the built-in code cannot run on, of
 * the same kernels compiled by NVRTC (fzk_jit_ratio; k is then that
 * module's functions, NULL for the built-in ones).
 *
 * Decoding: one block per chunk; the 32 huffman sub-streams are decoded by
 * the block's first warp, a lane each, rze's level 1 and the
 * interpolation's levels by the whole block, the anchors, rze's small upper
 * levels and the chaining of a lorenzo row's shares by one thread.
 * Encoding: one block per chunk into its slot of a staging area, then,
 * after the scan of the slots' sizes, the place kernel.  Staging rather
 * than placing each chunk as it is coded (the word kernels' look-back)
 * keeps the chunk kernel free of any wait on the blocks before it; a chunk
 * is written twice, which costs little beside its coding.
 */
#include <cuda_runtime.h>

#include "fzk.h"
#include "jit.h"
#include "ratio_gpu.h"
#include "ratio_kernels.cuh"

/* Chunks decoded by one launch: all of them up to FZR_SCRATCH_MAX bytes of
 * scratch (a 1 GiB array of 256 KiB chunks in one launch), so that a huge
 * array does not need several times its size in scratch; the encoder's
 * scratch is larger per chunk (about ten times the chunk), and capped at
 * FZRE_SCRATCH_MAX (about 800 chunks of 256 KiB f32 values a launch). */
#define FZR_SCRATCH_MAX (UINT64_C(4) << 30)
#define FZRE_SCRATCH_MAX (UINT64_C(2) << 30)
static uint64_t batch_of(uint64_t stride, uint64_t cap, uint64_t nchunks) {
  uint64_t b = cap / stride;
  return nchunks < b ? nchunks : b > 0 ? b : 1;
}

extern "C" uint64_t fzr_scratch_bytes(uint32_t cb, uint64_t nchunks) {
  return fzr_stride(cb) * batch_of(fzr_stride(cb), FZR_SCRATCH_MAX, nchunks);
}

extern "C" uint64_t fzre_scratch_bytes(uint32_t cb, uint32_t w, uint32_t levels,
                                       uint64_t nchunks) {
  uint64_t stride = fzre_layout_of(cb, w, levels).stride;
  return stride * batch_of(stride, FZRE_SCRATCH_MAX, nchunks);
}

/* One launch of a chunk kernel taking its job by value. */
template <typename Job>
static int launch_job(const fzk_kern *k, unsigned which, void (*aot)(Job), unsigned grid,
                      Job *J, cudaStream_t s) {
  if (k != NULL) {
    void *args[] = {J};
    return fzk_jit_launch(k->fn[which], grid, FZR_NT, 0, s, args);
  }
  aot<<<grid, FZR_NT, 0, s>>>(*J);
  return (int)cudaGetLastError();
}

extern "C" int fzr_launch_decode(const fzk_kern *k, const fzr_params *p, cudaStream_t s) {
  if (p->nchunks == 0)
    return 0;
  fzr_job J;
  J.pay = p->pay;
  J.pay_len = p->pay_len;
  J.offs = p->offs;
  J.sizes = p->sizes;
  J.raw_bytes = p->raw_bytes;
  J.cb = p->cb;
  J.w = p->w;
  J.levels = p->levels;
  J.pdims = p->pdims;
  J.lorenzo = p->lorenzo;
  J.pwrel = p->pwrel;
  J.step = p->step;
  for (unsigned a = 0; a < 3; a++)
    for (unsigned d = 0; d < 3; d++)
      J.ext[a][d] = p->ext[a][d];
  J.scratch = p->scratch;
  J.stride = fzr_stride(p->cb);
  J.out = (uint8_t *)p->out;
  J.out_aligned = (uintptr_t)p->out % p->w == 0;
  J.status = p->status;
  J.crcs = p->crcs;
  J.crc_tab = p->crc_tab;
  /* Launches on one stream run in order, so each reuses the scratch. */
  uint64_t b = batch_of(J.stride, FZR_SCRATCH_MAX, p->nchunks);
  for (uint64_t c0 = 0; c0 < p->nchunks; c0 += b) {
    J.c0 = c0;
    unsigned grid = (unsigned)(p->nchunks - c0 < b ? p->nchunks - c0 : b);
    int e = launch_job(k, FZR_K_DECODE, fzr_decode_kernel, grid, &J, s);
    if (e != 0)
      return e;
  }
  return 0;
}

extern "C" int fzre_launch_encode(const fzk_kern *k, const fzre_params *p, cudaStream_t s) {
  if (p->nchunks == 0)
    return 0;
  fzre_job J;
  J.in = p->in;
  J.raw_bytes = p->raw_bytes;
  J.cb = p->cb;
  J.w = p->w;
  J.levels = p->levels;
  J.pdims = p->pdims;
  J.lorenzo = p->lorenzo;
  J.pwrel = p->pwrel;
  J.qp = p->qp;
  for (unsigned a = 0; a < 3; a++)
    for (unsigned d = 0; d < 3; d++)
      J.ext[a][d] = p->ext[a][d];
  J.scratch = p->scratch;
  J.stride = fzre_layout_of(p->cb, p->w, p->levels).stride;
  J.stage = p->stage;
  J.sizes = p->sizes;
  J.crcs = p->crcs;
  J.crc_tab = p->crc_tab;
  uint64_t b = batch_of(J.stride, FZRE_SCRATCH_MAX, p->nchunks);
  for (uint64_t c0 = 0; c0 < p->nchunks; c0 += b) {
    J.c0 = c0;
    unsigned grid = (unsigned)(p->nchunks - c0 < b ? p->nchunks - c0 : b);
    int e = launch_job(k, FZR_K_ENCODE, fzre_encode_kernel, grid, &J, s);
    if (e != 0)
      return e;
  }
  return 0;
}

extern "C" int fzre_launch_place(const fzk_kern *k, const uint8_t *stage, const uint32_t *sizes,
                                 const uint64_t *offs, uint64_t nchunks, uint32_t cb,
                                 uint8_t *out, uint64_t out_cap, uint64_t header_len,
                                 uint64_t table_off, cudaStream_t s) {
  if (nchunks == 0)
    return 0;
  if (k != NULL) {
    void *args[] = {&stage, &sizes, &offs, &cb, &out, &out_cap, &header_len, &table_off};
    return fzk_jit_launch(k->fn[FZR_K_PLACE], (unsigned)nchunks, FZR_NT, 0, s, args);
  }
  fzre_place_kernel<<<(unsigned)nchunks, FZR_NT, 0, s>>>(stage, sizes, offs, cb, out, out_cap,
                                                          header_len, table_off);
  return (int)cudaGetLastError();
}
