/*
 * ratio_encode.cu - the encoding kernels of the ratio preset (format
 * version 3, quant | interp | huffman | rze, or lorenzo in interp's
 * place): one block of FZR_NT threads
 * per chunk runs ratio_enc.cuh's phases into the chunk's slot of a staging
 * area, and after the scan of the slots' sizes a second kernel moves each
 * slot to its place in the archive and writes its u32 table entry.
 *
 * Staging rather than placing each chunk as it is coded (the word kernels'
 * look-back) keeps the chunk kernel free of any wait on the blocks before
 * it; a chunk is written twice, which costs little beside its coding.
 * Ahead-of-time only: a context that runs only generated code leaves these
 * chains to the CPU engine, as it does their decoding.
 */
#include <cuda_runtime.h>

#include "ratio_enc.cuh"
#include "ratio_gpu.h"

extern "C" __global__ void __launch_bounds__(FZR_NT) fzre_encode_kernel(fzre_job J) {
  __shared__ fzre_state S;
  fzre_chunk(&S, &J, J.c0 + blockIdx.x);
}

/* Chunks coded by one launch: as many as FZRE_SCRATCH_MAX bytes of scratch
 * hold (about 800 chunks of 256 KiB f32 values), launched in turn. */
#define FZRE_SCRATCH_MAX (UINT64_C(2) << 30)
static uint64_t batch_chunks(uint32_t cb, uint32_t w, uint32_t levels, uint64_t nchunks) {
  uint64_t b = FZRE_SCRATCH_MAX / fzre_layout_of(cb, w, levels).stride;
  return nchunks < b ? nchunks : b > 0 ? b : 1;
}

extern "C" uint64_t fzre_scratch_bytes(uint32_t cb, uint32_t w, uint32_t levels,
                                       uint64_t nchunks) {
  return fzre_layout_of(cb, w, levels).stride * batch_chunks(cb, w, levels, nchunks);
}

extern "C" int fzre_launch_encode(const fzre_params *p, cudaStream_t s) {
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
  for (unsigned k = 0; k < 3; k++)
    for (unsigned d = 0; d < 3; d++)
      J.ext[k][d] = p->ext[k][d];
  J.scratch = p->scratch;
  J.stride = fzre_layout_of(p->cb, p->w, p->levels).stride;
  J.stage = p->stage;
  J.sizes = p->sizes;
  J.crcs = p->crcs;
  J.crc_tab = p->crc_tab;
  /* Launches on one stream run in order, so each reuses the scratch. */
  uint64_t b = batch_chunks(p->cb, p->w, p->levels, p->nchunks);
  for (uint64_t c0 = 0; c0 < p->nchunks; c0 += b) {
    J.c0 = c0;
    unsigned grid = (unsigned)(p->nchunks - c0 < b ? p->nchunks - c0 : b);
    fzre_encode_kernel<<<grid, FZR_NT, 0, s>>>(J);
    int e = (int)cudaGetLastError();
    if (e != 0)
      return e;
  }
  return 0;
}

/* One block per chunk: the slot (aligned: cb is a multiple of 256) to its
 * place, which has any alignment, in 4-byte words funnel-shifted from two
 * aligned source words, the ragged ends byte by byte. */
extern "C" __global__ void __launch_bounds__(FZR_NT)
fzre_place_kernel(const uint8_t *__restrict__ stage, const uint32_t *__restrict__ sizes,
                  const uint64_t *__restrict__ offs, uint32_t cb, uint8_t *__restrict__ out,
                  uint64_t out_cap, uint64_t header_len, uint64_t table_off) {
  const uint64_t c = blockIdx.x;
  const uint32_t len = sizes[c];
  const uint8_t *src = stage + c * cb;
  uint64_t at = header_len + offs[c];
  uint64_t room = at < out_cap ? out_cap - at : 0;
  uint32_t lim = len < room ? len : (uint32_t)room;
  uint8_t *dp = out + at;
  uint32_t head = (uint32_t)((4 - ((uintptr_t)dp & 3)) & 3);
  if (head > lim)
    head = lim;
  uint32_t nw = (lim - head) / 4;
  if (threadIdx.x < head)
    dp[threadIdx.x] = src[threadIdx.x];
  /* Destination word k holds source bytes head + 4k .. head + 4k + 3. */
  const uint32_t *s32 = (const uint32_t *)src;
  const unsigned sh = 8 * head;
  for (uint32_t k = threadIdx.x; k < nw; k += FZR_NT) {
    uint32_t lo = s32[k], hi = head ? s32[k + 1] : 0;
    ((uint32_t *)(dp + head))[k] = head ? __funnelshift_r(lo, hi, sh) : lo;
  }
  for (uint32_t i = head + 4 * nw + threadIdx.x; i < lim; i += FZR_NT)
    dp[i] = src[i];
  if (threadIdx.x < 4 && table_off + 4 * c + 4 <= out_cap)
    out[table_off + 4 * c + threadIdx.x] = (uint8_t)(len >> (8 * threadIdx.x));
}

extern "C" int fzre_launch_place(const uint8_t *stage, const uint32_t *sizes,
                                 const uint64_t *offs, uint64_t nchunks, uint32_t cb,
                                 uint8_t *out, uint64_t out_cap, uint64_t header_len,
                                 uint64_t table_off, cudaStream_t s) {
  if (nchunks == 0)
    return 0;
  fzre_place_kernel<<<(unsigned)nchunks, FZR_NT, 0, s>>>(stage, sizes, offs, cb, out, out_cap,
                                                          header_len, table_off);
  return (int)cudaGetLastError();
}
