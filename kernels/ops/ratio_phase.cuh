/*
 * ratio_phase.cuh - how the ratio preset's kernels are written so that the
 * host can run them: one block of FZR_NT threads per chunk, in phases.
 *
 * A phase is a statement every thread runs on its own share of the work,
 * given its index t and the thread count nt; between two phases the block
 * waits (FZR_SYNC), so a phase may read anything an earlier one wrote.
 * FZR_ONE runs a statement on thread 0 only.  Compiled for the device they
 * are the plain kernel idiom; compiled for the host (tests/gpu/ratio_*.c)
 * FZR_ALL runs the statement for t = 0 .. nt-1 in turn (or nt-1 .. 0) and
 * FZR_SYNC is nothing, which is a valid schedule of the same program: the
 * tests run the very code of the kernels against the CPU engine without a
 * GPU, in both orders.
 *
 * What keeps that true: control flow around a barrier depends only on
 * state written before the last barrier (the block takes every branch as
 * one); no warp intrinsics; threads of one phase write disjoint bytes, or
 * combine through FZR_ATOMIC_* whose result does not depend on the order
 * (counts, OR, max).
 */
#ifndef FZK_RATIO_PHASE_CUH
#define FZK_RATIO_PHASE_CUH

#include "fz_contract.h"

#ifdef __CUDACC__
#define FZR_HD __host__ __device__
#else
#define FZR_HD
#endif

/* A function the device compiler always inlines, so that a constant its
 * callers pass (a word's width, the chain a kernel is built for) is a
 * constant in its body, and the code the constant rules out is dropped. */
#ifdef __CUDACC__
#define FZR_IP_FI static __forceinline__
#else
#define FZR_IP_FI static inline
#endif

#define FZR_NT 256u
#define FZR_LOG_NT 8u /* log2(FZR_NT): FZR_NT must be a power of two */

/* A loop the device compiler unrolls (so that its arrays stay in
 * registers).  Only the device pass knows the pragma: nvcc's host pass
 * hands the code to the host compiler, which warns of it. */
#ifdef __CUDA_ARCH__
#define FZR_UNROLL _Pragma("unroll")
#else
#define FZR_UNROLL
#endif

#ifdef __CUDA_ARCH__
#define FZR_ALL(stmt) { stmt; }
#define FZR_ONE(stmt) if (t == 0) { stmt; }
#define FZR_SYNC() __syncthreads()
#define FZR_T0 const unsigned t = threadIdx.x, nt = blockDim.x
#define FZR_ATOMIC_ADD(p, v) atomicAdd((p), (v))
#define FZR_ATOMIC_OR(p, v) atomicOr((p), (v))
#define FZR_ATOMIC_MAX(p, v) atomicMax((p), (v))
static __device__ inline void fzr_flag(uint32_t *st) { atomicOr(st, 1u); }
#else
/* The host runs a phase's threads in ascending order, or descending where
 * a test sets fzr_host_reverse: a phase whose result depends on the order
 * (a thread reading what another writes in the same phase, which races on
 * the device) then differs between the two runs. */
static int fzr_host_reverse;
#define FZR_ALL(stmt)                                                          \
  for (unsigned t_ = 0; t_ < nt; t_++) {                                       \
    const unsigned t = fzr_host_reverse ? nt - 1 - t_ : t_;                    \
    stmt;                                                                      \
  }
#define FZR_ONE(stmt) { const unsigned t = 0; (void)t; stmt; }
#define FZR_SYNC() do { } while (0)
#define FZR_T0 const unsigned nt = FZR_NT
#define FZR_ATOMIC_ADD(p, v) (*(p) += (v))
#define FZR_ATOMIC_OR(p, v) (*(p) |= (v))
#define FZR_ATOMIC_MAX(p, v) (*(p) = *(p) > (v) ? *(p) : (v))
static inline void fzr_flag(uint32_t *st) { *st |= 1u; }
#endif

/* FZR_PHASE_CLOCK (a measuring build only, never the product's): thread 0
 * of each block adds the clock cycles since its last mark to phase k's
 * sum at FZR_CLK(k), which sits just after a barrier; ratio.cu prints the
 * sums after each launch.  Elsewhere the marks are nothing. */
#if defined(__CUDACC__) && defined(FZR_PHASE_CLOCK)
#define FZR_CLK_PHASES 64
__device__ unsigned long long fzr_clk_sum[FZR_CLK_PHASES];
__device__ unsigned long long fzr_clk_mark[2048];
#endif
#if defined(__CUDA_ARCH__) && defined(FZR_PHASE_CLOCK)
#define FZR_CLK_START()                                                        \
  do {                                                                         \
    if (threadIdx.x == 0)                                                      \
      fzr_clk_mark[blockIdx.x] = clock64();                                    \
  } while (0)
#define FZR_CLK(k)                                                             \
  do {                                                                         \
    if (threadIdx.x == 0) {                                                    \
      unsigned long long now_ = clock64();                                     \
      atomicAdd(&fzr_clk_sum[(k)], now_ - fzr_clk_mark[blockIdx.x]);           \
      fzr_clk_mark[blockIdx.x] = now_;                                         \
    }                                                                          \
  } while (0)
#else
#define FZR_CLK_START() do { } while (0)
#define FZR_CLK(k) do { } while (0)
#endif

/* The low l bits of v (1 <= l <= 32) in reverse order: a canonical
 * code as the bit readers take it, least significant bit first. */
static inline FZR_HD unsigned fzr_rev(unsigned v, unsigned l) {
#ifdef __CUDA_ARCH__
  return __brev(v) >> (32u - l);
#else
  unsigned r = 0;
  for (unsigned j = 0; j < l; j++)
    r |= ((v >> j) & 1u) << (l - 1 - j);
  return r;
#endif
}

/* Thread t's share [lo, hi) of n items, runs of ceil(n / nt) in order. */
static inline FZR_HD void fzr_share(uint64_t n, unsigned t, unsigned nt, uint64_t *lo,
                                    uint64_t *hi) {
  uint64_t per = (n + nt - 1) / nt;
  *lo = per * t < n ? per * t : n;
  *hi = per * (t + 1) < n ? per * (t + 1) : n;
}

/* One thread: each of v[0 .. n) replaced by the sum of those before it;
 * returns the sum of all. */
static inline FZR_HD uint32_t fzr_sums_before(uint32_t *v, unsigned n) {
  uint32_t sum = 0;
  for (unsigned k = 0; k < n; k++) {
    uint32_t x = v[k];
    v[k] = sum;
    sum += x;
  }
  return sum;
}

/* Canonical huffman codes over a block, as the encoder and the decoder
 * both make them (by length, then symbol; at most FZR_CODE_MAX_LEN bits):
 * each thread counts the lengths among its share of the symbols into its
 * row of cnt; then fzr_canon_sums, a length a thread, turns each column
 * into the counts before each thread and the length's total; then a
 * thread's first code of each length is the length's first code plus the
 * symbols of that length before its share (fzr_canon_first). */
#define FZR_CODE_MAX_LEN FZE_HUFF_MAX_LEN
typedef uint16_t fzr_canon_row[FZR_CODE_MAX_LEN + 1];

static inline FZR_HD void fzr_canon_sums(fzr_canon_row *cnt, uint32_t *num, unsigned t,
                                         unsigned nt) {
  if (t < 1 || t > FZR_CODE_MAX_LEN)
    return;
  uint32_t sum = 0;
  for (unsigned u = 0; u < nt; u++) {
    uint32_t v = cnt[u][t];
    cnt[u][t] = (uint16_t)sum;
    sum += v;
  }
  num[t] = sum;
}

static inline FZR_HD void fzr_canon_first(const fzr_canon_row *cnt, const uint32_t *num,
                                          unsigned t, unsigned first[FZR_CODE_MAX_LEN + 1]) {
  unsigned c = 0;
  first[0] = 0;
  for (unsigned l = 1; l <= FZR_CODE_MAX_LEN; l++) {
    c = (c + (l > 1 ? num[l - 1] : 0u)) << 1;
    first[l] = c + cnt[t][l];
  }
}

/* The quantizer's parameters as the encoder's pieces take them: the bin
 * width (0: lossless, the words are the values' bit patterns), its
 * inverse as the engine forms it (1.0 / step), the absolute bound every
 * rebuilt value must meet, and whether the mode is PWREL (step is then
 * the integer the engine's fzo_pw_quant_* take). */
typedef struct fzre_q {
  double step, inv, eb_abs;
  unsigned pwrel;
  unsigned lv; /* interp: format version 5's walk (fze_stage's lv) */
  unsigned flat; /* interp, per chunk: its leading axes not interpolated
                  * (fze_stage's flat; version 6's FZE_PK_DIMS) */
} fzre_q;

#endif
