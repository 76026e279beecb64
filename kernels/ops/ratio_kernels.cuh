/*
 * ratio_kernels.cuh - the kernels of the ratio preset's chains, defined once:
 * nvcc builds them into the library (ratio.cu), and NVRTC compiles the same
 * text, from the headers embedded in the library, for a GPU the built-in
 * code cannot run on (jit.c, fzk_jit_ratio), so that such a GPU codes
 * these chains too.
 *
 * fzr_decode_kernel and fzre_encode_kernel: a block of FZR_NT threads runs
 * ratio_dec.cuh's or ratio_enc.cuh's phases for one chunk after another,
 * in its own slot of the scratch: the launch has as many blocks as the GPU
 * holds at once, so the scratch is bounded by the GPU, not by the array.
 * Each takes its next chunk from a counter (zeroed before the launch), so
 * that a block held up by a costly chunk leaves the rest to the others, as
 * the hardware's own block scheduling would.  The barrier before each
 * ticket keeps a thread still reading the last chunk's state from meeting
 * the next chunk's.  fzr_decode_planes_kernel and fzre_encode_planes_kernel
 * are the same for the lossless-ratio preset's chain (lorenzo |
 * byteplanes): the chain is a constant of each kernel (fzr_chunk_of,
 * fzre_chunk_of), so that neither holds the other's code, and the ratio
 * preset's kernels are generated from the code they had before the other
 * chain came (a run-time flag had grown the encoder's stack frame from 200
 * to 520 bytes, ptxas for sm_90).  A generated module holds all five
 * kernels; ratio.cu finds the planes kernels by name beside the others.
 * fzre_place_kernel: after the scan of the staged chunks' sizes, one block
 * per chunk moves its slot (aligned: cb is a multiple of 256) to its place
 * in the archive, which has any alignment, in 4-byte words funnel-shifted
 * from two aligned source words, the ragged ends byte by byte, and writes
 * its u32 table entry.  Nothing is written at or beyond out_cap.
 */
#ifndef FZK_RATIO_KERNELS_CUH
#define FZK_RATIO_KERNELS_CUH

#include "ratio_dec.cuh"
#include "ratio_enc.cuh"

/* The block's next chunk, in every thread. */
static __device__ __forceinline__ unsigned long long fzr_take(unsigned long long *ticket,
                                                             unsigned long long *next) {
  __syncthreads();
  if (threadIdx.x == 0)
    *next = atomicAdd(ticket, 1ull);
  __syncthreads();
  return *next;
}

/* Blocks each multiprocessor holds at once: what the kernels' registers
 * allow, which __launch_bounds__ makes the compiler keep to.  Measured on
 * an H200 (docs/benchmarks.md, "The ratio preset on the GPU"): the
 * encoder at 4 (64 registers, a few hundred bytes spilled) is 17% faster
 * than at 3 (80) and 56% faster than at 2 (126, none spilled); the
 * decoder at 5 (48 registers) is no faster than at 4 (64, none spilled). */
#ifndef FZR_DEC_PER_SM
#define FZR_DEC_PER_SM 4u
#endif
#ifndef FZRE_ENC_PER_SM
#define FZRE_ENC_PER_SM 4u
#endif

/* A chunk kernel's loop; planes is the chain it is built for. */
#define FZR_CHUNK_LOOP(state, chunk_of, planes)                                \
  __shared__ state S;                                                          \
  __shared__ unsigned long long next;                                          \
  FZR_CLK_START();                                                             \
  for (unsigned long long c; (c = fzr_take(J.ticket, &next)) < J.nchunks;)     \
    chunk_of(&S, &J, c, blockIdx.x, planes)

extern "C" __global__ void __launch_bounds__(FZR_NT, FZR_DEC_PER_SM)
fzr_decode_kernel(fzr_job J) {
  FZR_CHUNK_LOOP(fzr_state, fzr_chunk_of, 0);
}

extern "C" __global__ void __launch_bounds__(FZR_NT, FZR_DEC_PER_SM)
fzr_decode_planes_kernel(fzr_job J) {
  FZR_CHUNK_LOOP(fzr_state, fzr_chunk_of, 1);
}

extern "C" __global__ void __launch_bounds__(FZR_NT, FZRE_ENC_PER_SM)
fzre_encode_kernel(fzre_job J) {
  FZR_CHUNK_LOOP(fzre_state, fzre_chunk_of, 0);
}

extern "C" __global__ void __launch_bounds__(FZR_NT, FZRE_ENC_PER_SM)
fzre_encode_planes_kernel(fzre_job J) {
  FZR_CHUNK_LOOP(fzre_state, fzre_chunk_of, 1);
}

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

#endif
