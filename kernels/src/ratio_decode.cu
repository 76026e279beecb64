/*
 * ratio_decode.cu - the decoding kernel of the ratio preset's archives
 * (format version 3, quant | interp | huffman | rze, or lorenzo in interp's
 * place): one block of FZR_NT
 * threads per chunk runs the phases of ratio_dec.cuh with a barrier
 * between each two, then checksums the chunk's stored bytes.
 *
 * The 32 huffman sub-streams are decoded by the block's first warp, one
 * lane each; rze's level 1 and the interpolation's levels are shared by
 * the whole block; the anchors, rze's small upper levels and a lorenzo
 * chunk's words (each depending on the one before) are rebuilt by one
 * thread.  Ahead-of-time only: a context that runs only generated code
 * (FZ_GPU_JIT_ONLY) leaves these archives to the CPU engine.
 */
#include <cuda_runtime.h>

#include "ratio_dec.cuh"
#include "ratio_gpu.h"

extern "C" __global__ void __launch_bounds__(FZR_NT) fzr_decode_kernel(fzr_job J) {
  __shared__ fzr_state S;
  fzr_chunk(&S, &J, J.c0 + blockIdx.x);
}

/* Chunks decoded by one launch: all of them up to FZR_SCRATCH_MAX bytes of
 * scratch (a 1 GiB array of 256 KiB chunks in one launch), so that a huge
 * array does not need several times its size in scratch. */
#define FZR_SCRATCH_MAX (UINT64_C(4) << 30)
static uint64_t batch_chunks(uint32_t cb, uint64_t nchunks) {
  uint64_t b = FZR_SCRATCH_MAX / fzr_stride(cb);
  return nchunks < b ? nchunks : b > 0 ? b : 1;
}

extern "C" uint64_t fzr_scratch_bytes(uint32_t cb, uint64_t nchunks) {
  return fzr_stride(cb) * batch_chunks(cb, nchunks);
}

extern "C" int fzr_launch_decode(const fzr_params *p, cudaStream_t s) {
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
  for (unsigned k = 0; k < 3; k++)
    for (unsigned d = 0; d < 3; d++)
      J.ext[k][d] = p->ext[k][d];
  J.scratch = p->scratch;
  J.stride = fzr_stride(p->cb);
  J.out = (uint8_t *)p->out;
  J.out_aligned = (uintptr_t)p->out % p->w == 0;
  J.status = p->status;
  J.crcs = p->crcs;
  J.crc_tab = p->crc_tab;
  /* Launches on one stream run in order, so each reuses the scratch. */
  uint64_t b = batch_chunks(p->cb, p->nchunks);
  for (uint64_t c0 = 0; c0 < p->nchunks; c0 += b) {
    J.c0 = c0;
    unsigned grid = (unsigned)(p->nchunks - c0 < b ? p->nchunks - c0 : b);
    fzr_decode_kernel<<<grid, FZR_NT, 0, s>>>(J);
    int e = (int)cudaGetLastError();
    if (e != 0)
      return e;
  }
  return 0;
}
