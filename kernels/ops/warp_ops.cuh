/*
 * warp_ops.cuh - warp-level building blocks of the fast kernels: the 32x32
 * bit transpose that turns 32 words into their 32 bit planes (and back),
 * warp prefix sums, unaligned word loads from shared memory, and the
 * block-parallel CRC-32C of a buffer held in shared memory.
 *
 * The CRC follows fzk_crc.h: the buffer is placed at the end of a virtual
 * span of FZK_NT segments (leading zeros leave a CRC register run from zero
 * unchanged), every thread runs its segment four bytes at a time with the
 * slice-by-4 tables, shifts its partial value to the end of the span with
 * the precomputed factor x^(8*seg*(FZK_NT-1-t)) and the block XORs the
 * results.  GF(2) arithmetic is exact, so the value is the CPU's.
 */
#ifndef FZK_WARP_OPS_CUH
#define FZK_WARP_OPS_CUH

#ifndef __CUDACC_RTC__
#include <stdint.h>
#endif

#include "fzk.h"
#include "fzk_crc.h"

/* A decoder's start, in every thread of a block: the quantizer's
 * parameters as the decompression's first kernel read them from the
 * archive (fzk_dec_head), or false where that kernel found the header's
 * prefix not the one the launches were made for (FZK_ST_STALE): then the
 * block writes nothing at all. */
__device__ __forceinline__ bool fzk_dec_begin(const fzk_qparams *d_qp, const uint32_t *d_status,
                                              fzk_qparams *q) {
  if (__ldcg(d_status) & FZK_ST_STALE)
    return false;
  q->eb_abs = __ldcg(&d_qp->eb_abs);
  q->step = __ldcg(&d_qp->step);
  q->inv = __ldcg(&d_qp->inv);
  return true;
}

#define FZK_FULL 0xffffffffu

/* The 64-bit type of the device atomics and shuffles. */
typedef unsigned long long fzk_u64;
#define FZK_NW (FZK_NT / 32)

/* The 32x32 bit transpose: lane p of the result holds bit p of every
 * lane's x (bit i of lane p is bit p of lane i); its own inverse.  Each of
 * its five steps swaps the off-diagonal j x j blocks between lanes j apart:
 * a lane keeps half of its word and takes the other half from its partner,
 * which sends its word rotated into place (the upper lane of a pair by j to
 * the left, the lower by j to the right; the bits that wrap around are the
 * ones the receiver drops).  The per-lane constants, made once per kernel
 * by fzk_tp_init, keep each step at a rotate, a shuffle and a select. */
struct fzk_tp {
  uint32_t keep[5]; /* the bits a lane keeps of its own word */
  uint32_t rot[5];  /* left rotation of the word it sends */
};

__device__ __forceinline__ fzk_tp fzk_tp_init() {
  const unsigned lane = threadIdx.x & 31;
  const uint32_t masks[5] = {0x0000ffffu, 0x00ff00ffu, 0x0f0f0f0fu, 0x33333333u, 0x55555555u};
  fzk_tp t;
#pragma unroll
  for (int k = 0; k < 5; k++) {
    const unsigned j = 16u >> k;
    const bool up = (lane & j) != 0;
    t.keep[k] = up ? ~masks[k] : masks[k];
    t.rot[k] = up ? j : 32u - j; /* 16 either way for k = 0 */
    /* Opaque to the compiler, which would rather recompute the constants
     * inside the loops than keep them. */
    asm volatile("" : "+r"(t.keep[k]));
    if (k > 0)
      asm volatile("" : "+r"(t.rot[k]));
  }
  return t;
}

/* (a & m) | (b & ~m) in one instruction. */
__device__ __forceinline__ uint32_t fzk_blend(uint32_t a, uint32_t b, uint32_t m) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xe4;" : "=r"(r) : "r"(a), "r"(b), "r"(m));
  return r;
}

__device__ __forceinline__ uint32_t fzk_transpose32(uint32_t x, const fzk_tp &t) {
#pragma unroll
  for (int k = 0; k < 5; k++) {
    const uint32_t r = k == 0 ? 16u : t.rot[k];
    const uint32_t o = __shfl_xor_sync(FZK_FULL, __funnelshift_l(x, x, r), 16u >> k);
    x = fzk_blend(x, o, t.keep[k]);
  }
  return x;
}

/* Inclusive prefix sum over the warp (modulo 2^32): each step's shuffle
 * says whether its source lane exists, and the add is predicated on it. */
__device__ __forceinline__ uint32_t fzk_warp_incl(uint32_t v) {
#pragma unroll
  for (unsigned o = 1; o < 32; o <<= 1) {
    asm("{\n\t.reg .u32 t;\n\t.reg .pred p;\n\t"
        "shfl.sync.up.b32 t|p, %0, %1, 0, -1;\n\t"
        "@p add.u32 %0, %0, t;\n\t}"
        : "+r"(v)
        : "r"(o));
  }
  return v;
}

/* Four bytes at any byte offset a of a 4-byte aligned shared buffer that
 * is readable up to a + 8. */
__device__ __forceinline__ uint32_t fzk_ld32u(const uint8_t *p, uint32_t a) {
  const uint32_t *w = (const uint32_t *)p + (a >> 2);
  return __funnelshift_r(w[0], w[1], 8 * (a & 3));
}

/* Stores four bytes at any byte offset of a shared buffer. */
__device__ __forceinline__ void fzk_st32u(uint8_t *p, uint32_t a, uint32_t v) {
  if ((a & 3) == 0) {
    *(uint32_t *)(p + a) = v;
  } else {
    p[a] = (uint8_t)v;
    p[a + 1] = (uint8_t)(v >> 8);
    p[a + 2] = (uint8_t)(v >> 16);
    p[a + 3] = (uint8_t)(v >> 24);
  }
}

/* a * b mod P without branches (the CRC's reflected representation). */
__device__ __forceinline__ uint32_t fzk_mulmod_dev(uint32_t a, uint32_t b) {
  uint32_t p = 0;
#pragma unroll
  for (int i = 0; i < 32; i++) {
    p ^= b & (0u - ((a >> (31 - i)) & 1u));
    b = (b >> 1) ^ (FZK_CRC_POLY & (0u - (b & 1u)));
  }
  return p;
}

/* One thread's share of the CRC of the L bytes at p + o (p 4-byte aligned,
 * o >= 4, readable up to p + o + L + 8): its segment of the virtual span
 * of FZK_NT * seg bytes that ends with them, run from a zero register,
 * times this thread's shift factor kt.  `g0` is the index of the first of
 * the L bytes within the whole message: message bytes 0..3 enter inverted,
 * which stands for the all-ones initial register. */
__device__ __forceinline__ uint32_t fzk_crc_share(const uint8_t *p, uint32_t o, uint32_t L,
                                                  uint32_t seg, uint64_t g0, const uint32_t *T,
                                                  uint32_t kt) {
  int j = (int)(threadIdx.x * seg) - (int)(FZK_NT * seg - L);
  const int j1 = j + (int)seg;
  if (j1 <= 0)
    return 0;
  if (j <= -4)
    j += ((-j) / 4) * 4; /* whole words of virtual zeros change nothing */
  uint32_t c = 0;
  for (; j < j1; j += 4)
    c = fzk_crc_step4(c, fzk_crc_in4(fzk_ld32u(p, (uint32_t)((int)o + j)), (int64_t)g0 + j, j),
                      T);
  return c ? fzk_mulmod_dev(c, kt) : 0;
}

/* XOR over the block; red holds FZK_NW words.  Synchronises twice. */
__device__ __forceinline__ uint32_t fzk_block_xor(uint32_t v, uint32_t *red) {
  for (unsigned o = 16; o; o >>= 1)
    v ^= __shfl_xor_sync(FZK_FULL, v, o);
  if ((threadIdx.x & 31) == 0)
    red[threadIdx.x >> 5] = v;
  __syncthreads();
  uint32_t r = 0;
  for (unsigned w = 0; w < FZK_NW; w++)
    r ^= red[w];
  __syncthreads();
  return r;
}

/* The CRC-32C of L <= FZK_NT * seg bytes at p + o (see fzk_crc_share), the
 * same in every thread.  T: the slice tables in shared memory; kt: this
 * thread's factor for seg. */
__device__ __forceinline__ uint32_t fzk_crc_chunk(const uint8_t *p, uint32_t o, uint32_t L,
                                                  uint32_t seg, const uint32_t *T, uint32_t kt,
                                                  uint32_t *red) {
  uint32_t c = 0;
  if (L >= 4) {
    c = fzk_crc_share(p, o, L, seg, 0, T, kt);
  } else if (threadIdx.x == 0) {
    c = 0xffffffffu;
    for (uint32_t j = 0; j < L; j++)
      c = (c >> 8) ^ T[(c ^ p[o + j]) & 0xffu];
    c = ~c;
  }
  uint32_t r = fzk_block_xor(c, red);
  return L >= 4 ? ~r : r;
}

/* Named barrier id (1 to 15) of the n threads (a multiple of 32) of the
 * warps that take part; it orders their shared memory accesses as
 * __syncthreads() does. */
__device__ __forceinline__ void fzk_bar_sync(unsigned id, unsigned n) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}

/* Index of the factor table for a segment of seg = 16 << k bytes. */
__device__ __forceinline__ unsigned fzk_seg_index(uint32_t seg) {
  return 27u - __clz(seg); /* 16 -> 0, 32 -> 1, 64 -> 2, 128 -> 3 */
}

/* The CRC-32C of the L bytes at p + o, XORed into *dst (which the caller
 * zeroed) by a group of G warps, gt the thread's index in the group:
 * thread gt runs segment gt of a virtual span of 32 G segments of 16k
 * bytes (k = fzk_crc_gseg(L, G)) that ends with the bytes, from a zero
 * register, and shifts its value to the end of the span with the factor
 * x^(8*16k*(32G-1-gt)) (FZK_CRC_LANEF).  Fewer and longer runs than a
 * block's split (fzk_crc_chunk): the shift, a 32-step product, is paid
 * once per thread of the group rather than once per thread of the block.
 * p 4-byte aligned, o >= 4, readable up to p + o + L + 8; T: the slice
 * tables. */
template <unsigned G>
__device__ __forceinline__ void fzk_crc_group_xor(const uint8_t *p, uint32_t o, uint32_t L,
                                                  const uint32_t *T,
                                                  const uint32_t *__restrict__ d_tab,
                                                  uint32_t *dst, unsigned gt) {
  uint32_t c = 0;
  if (L >= 4) {
    const uint32_t k = fzk_crc_gseg(L, G), seg = 16 * k;
    int j = (int)(gt * seg) - (int)(32 * G * seg - L);
    const int j1 = j + (int)seg;
    if (j1 > 0) {
      if (j <= -4)
        j += ((-j) / 4) * 4; /* whole words of virtual zeros change nothing */
      /* The thread's words are a fixed shift off the aligned ones. */
      const uint32_t a = (uint32_t)((int)o + j), sh = 8 * (a & 3);
      const uint32_t *w = (const uint32_t *)p + (a >> 2);
      uint32_t lo = w[0];
      /* Virtual zeros and the four message bytes that enter inverted lie
       * in the first two words. */
      for (; j < j1 && j < 4; j += 4) {
        const uint32_t hi = *++w;
        c = fzk_crc_step4(c, fzk_crc_in4(__funnelshift_r(lo, hi, sh), j, j), T);
        lo = hi;
      }
      for (; j < j1; j += 4) {
        const uint32_t hi = *++w;
        c = fzk_crc_step4(c, __funnelshift_r(lo, hi, sh), T);
        lo = hi;
      }
      if (c)
        c = fzk_mulmod_dev(
            c, d_tab[FZK_CRC_LANEF + 32 * FZK_CRC_GMAX * (k - 1) + 32 * (FZK_CRC_GMAX - G) + gt]);
    }
    if (gt == 0)
      c = ~c; /* the final complement, once */
  } else if (gt == 0) {
    c = 0xffffffffu;
    for (uint32_t j = 0; j < L; j++)
      c = (c >> 8) ^ T[(c ^ p[o + j]) & 0xffu];
    c = ~c;
  }
  c = __reduce_xor_sync(FZK_FULL, c);
  if ((gt & 31) == 0 && c)
    atomicXor(dst, c);
}

/* Copies len bytes from global g into shared buf at the offset returned
 * (16 to 31, congruent to g modulo 16) so that the middle moves in aligned
 * 16-byte vectors; no byte outside [g, g + len) is read.  buf needs
 * len + 48 bytes.  The caller synchronises. */
__device__ __forceinline__ uint32_t fzk_load_chunk(uint8_t *buf, const uint8_t *__restrict__ g,
                                                   uint32_t len) {
  const uint32_t mis = (uint32_t)((uintptr_t)g & 15u);
  const uint32_t o = 16 + mis;
  uint32_t h = (16 - mis) & 15u;
  if (h > len)
    h = len;
  const uint32_t nv = (len - h) / 16;
  if (threadIdx.x < h)
    buf[o + threadIdx.x] = g[threadIdx.x];
  for (uint32_t v = threadIdx.x; v < nv; v += FZK_NT)
    ((uint4 *)(buf + o + h))[v] = ((const uint4 *)(g + h))[v];
  for (uint32_t i = h + 16 * nv + threadIdx.x; i < len; i += FZK_NT)
    buf[o + i] = g[i];
  return o;
}

/* Loads the four CRC slice tables into shared memory. */
__device__ __forceinline__ void fzk_load_slices(uint32_t *T, const uint32_t *__restrict__ d_tab) {
  for (unsigned i = threadIdx.x; i < 1024; i += FZK_NT)
    T[i] = d_tab[i];
}

#endif
