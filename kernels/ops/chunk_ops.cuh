/*
 * chunk_ops.cuh - every stage as a device operation on one chunk held in
 * shared memory, forward and inverse, run by the FZK_NT threads of a block.
 *
 * An operation reads one shared buffer and writes another; it never touches
 * global memory, so a kernel can chain any number of them (the chain kernels
 * in chain_kernels.cu do, and a generated fused kernel can).  Each one is the
 * exact counterpart of the engine's CPU stage (engine/src/stage_*.c): the
 * per-element arithmetic comes from ops.h, shared with the CPU, and every
 * compaction is ordered by prefix sums over the element index, so the bytes
 * are the CPU's bytes whatever the order in which threads run.  Operations
 * must be called by all threads of the block (they synchronise inside); their
 * return values are the same in every thread.
 */
#ifndef FZK_CHUNK_OPS_CUH
#define FZK_CHUNK_OPS_CUH

#ifndef __CUDACC_RTC__
#include <stdint.h>
#endif

#include "fzk.h"
#include "fz_contract.h"
#include "ops.h"
#include "warp_ops.cuh"

#define FZK_BAD 0xffffffffu

/* Shared memory of one chunk block (layout in fzk_desc_layout). */
typedef struct fzk_smem {
  uint8_t *x, *y;    /* stream buffers, cap bytes each */
  uint8_t *t;        /* bitmaps and tables, tcap bytes */
  uint32_t *flags;   /* outlier bitmap of the quantizer */
  fzk_u64 *red;      /* FZK_NW + 1 words for block scans and reductions */
  uint32_t *misc;    /* values broadcast by one thread */
} fzk_smem;

/* ---- block primitives ---- */

/* Exclusive prefix sum of one value per thread (modulo 2^64); the sum of
 * all into *total. */
__device__ __forceinline__ fzk_u64 fzk_exscan(fzk_u64 v, fzk_u64 *total,
                                              fzk_u64 *red) {
  unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  fzk_u64 x = v;
  for (unsigned o = 1; o < 32; o <<= 1) {
    fzk_u64 y = __shfl_up_sync(FZK_FULL, x, o);
    if (lane >= o)
      x += y;
  }
  if (lane == 31)
    red[warp] = x;
  __syncthreads();
  if (warp == 0) {
    fzk_u64 t = lane < FZK_NW ? red[lane] : 0;
    for (unsigned o = 1; o < FZK_NW; o <<= 1) {
      fzk_u64 y = __shfl_up_sync(FZK_FULL, t, o);
      if (lane >= o)
        t += y;
    }
    if (lane < FZK_NW)
      red[lane] = t;
  }
  __syncthreads();
  fzk_u64 base = warp ? red[warp - 1] : 0;
  *total = red[FZK_NW - 1];
  __syncthreads();
  return base + x - v;
}

__device__ __forceinline__ fzk_u64 fzk_sum(fzk_u64 v, fzk_u64 *red) {
  fzk_u64 t;
  fzk_exscan(v, &t, red);
  return t;
}

/* True in every thread when any thread passes true. */
__device__ __forceinline__ bool fzk_any(bool v) { return __syncthreads_or(v) != 0; }

/* ---- words of any width ---- */

__device__ __forceinline__ fzk_u64 fzk_ld(const uint8_t *p, uint32_t i, unsigned w) {
  switch (w) {
  case 1: return p[i];
  case 2: return ((const uint16_t *)p)[i];
  case 4: return ((const uint32_t *)p)[i];
  default: return ((const fzk_u64 *)p)[i];
  }
}
__device__ __forceinline__ void fzk_st(uint8_t *p, uint32_t i, unsigned w, fzk_u64 v) {
  switch (w) {
  case 1: p[i] = (uint8_t)v; break;
  case 2: ((uint16_t *)p)[i] = (uint16_t)v; break;
  case 4: ((uint32_t *)p)[i] = (uint32_t)v; break;
  default: ((fzk_u64 *)p)[i] = v; break;
  }
}
__device__ __forceinline__ fzk_u64 fzk_mask(unsigned w) {
  return w == 8 ? ~0ull : (1ull << (8 * w)) - 1;
}
__device__ __forceinline__ fzk_u64 fzk_zz(fzk_u64 d, unsigned w) {
  fzk_u64 m = fzk_mask(w);
  d &= m;
  return ((d << 1) ^ (0ull - ((d >> (8 * w - 1)) & 1))) & m;
}
__device__ __forceinline__ fzk_u64 fzk_unzz(fzk_u64 z, unsigned w) {
  return ((z >> 1) ^ (0ull - (z & 1))) & fzk_mask(w);
}
__device__ __forceinline__ fzk_u64 fzk_nega(fzk_u64 d, unsigned w) {
  fzk_u64 m = fzk_mask(w), nb = 0xaaaaaaaaaaaaaaaaull & m;
  return ((d + nb) ^ nb) & m;
}
__device__ __forceinline__ fzk_u64 fzk_unnega(fzk_u64 z, unsigned w) {
  fzk_u64 m = fzk_mask(w), nb = 0xaaaaaaaaaaaaaaaaull & m;
  return ((z ^ nb) - nb) & m;
}

/* In-place inclusive prefix sum of n words modulo 2^(8w): the inverse of
 * every difference coding here.  Thread t owns a contiguous run. */
__device__ void fzk_prefix_words(uint8_t *v, uint32_t n, unsigned w, fzk_u64 *red) {
  uint32_t per = (n + FZK_NT - 1) / FZK_NT;
  uint32_t lo = threadIdx.x * per, hi = lo + per < n ? lo + per : n;
  fzk_u64 s = 0;
  for (uint32_t i = lo; i < hi; i++)
    s += fzk_ld(v, i, w);
  fzk_u64 tot, run = fzk_exscan(s, &tot, red);
  for (uint32_t i = lo; i < hi; i++) {
    run += fzk_ld(v, i, w);
    fzk_st(v, i, w, run);
  }
  __syncthreads();
}

/* ---- diff ---- */

__device__ void fzk_diff_fwd(const uint8_t *src, uint8_t *dst, uint32_t n,
                             unsigned w, unsigned nega) {
  for (uint32_t i = threadIdx.x; i < n; i += FZK_NT) {
    fzk_u64 d = fzk_ld(src, i, w) - (i ? fzk_ld(src, i - 1, w) : 0);
    fzk_st(dst, i, w, nega ? fzk_nega(d, w) : fzk_zz(d, w));
  }
  __syncthreads();
}

__device__ void fzk_diff_inv(const uint8_t *src, uint8_t *dst, uint32_t n,
                             unsigned w, unsigned nega, fzk_u64 *red) {
  for (uint32_t i = threadIdx.x; i < n; i += FZK_NT) {
    fzk_u64 z = fzk_ld(src, i, w);
    fzk_st(dst, i, w, nega ? fzk_unnega(z, w) : fzk_unzz(z, w));
  }
  __syncthreads();
  fzk_prefix_words(dst, n, w, red);
}

/* ---- bitshuffle: plane (8k + j) of group g is byte (8k+j)*pb + g ---- */

__device__ __forceinline__ uint32_t fzk_bs_bytes(uint32_t n, unsigned w) {
  return 8u * w * ((n + 7) / 8);
}

__device__ void fzk_bitshuffle_fwd(const uint8_t *src, uint8_t *dst, uint32_t n,
                                   unsigned w) {
  uint32_t pb = (n + 7) / 8, valid = n * w;
  for (uint32_t g = threadIdx.x; g < pb; g += FZK_NT) {
    fzk_u64 q[8];
    const fzk_u64 *s8 = (const fzk_u64 *)(src + (size_t)8 * w * g);
    for (unsigned k = 0; k < w; k++) {
      uint32_t at = 8 * w * g + 8 * k; /* byte offset of this u64 */
      fzk_u64 v = s8[k];
      if (at + 8 > valid) /* the zero padding of the last group */
        v = at >= valid ? 0 : v & ((1ull << (8 * (valid - at))) - 1);
      q[k] = v;
    }
    for (unsigned k = 0; k < w; k++) {
      fzk_u64 x = 0;
      for (unsigned r = 0; r < 8; r++) {
        unsigned b = r * w + k; /* byte k of word r */
        x |= ((q[b >> 3] >> (8 * (b & 7))) & 0xffu) << (8 * r);
      }
      x = fzo_transpose8(x);
      for (unsigned j = 0; j < 8; j++)
        dst[(size_t)(8 * k + j) * pb + g] = (uint8_t)(x >> (8 * j));
    }
  }
  __syncthreads();
}

__device__ void fzk_bitshuffle_inv(const uint8_t *src, uint8_t *dst, uint32_t n,
                                   unsigned w) {
  uint32_t pb = (n + 7) / 8;
  for (uint32_t g = threadIdx.x; g < pb; g += FZK_NT) {
    fzk_u64 q[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (unsigned k = 0; k < w; k++) {
      fzk_u64 x = 0;
      for (unsigned j = 0; j < 8; j++)
        x |= (fzk_u64)src[(size_t)(8 * k + j) * pb + g] << (8 * j);
      x = fzo_transpose8(x);
      for (unsigned r = 0; r < 8; r++) {
        unsigned b = r * w + k;
        q[b >> 3] |= ((x >> (8 * r)) & 0xffu) << (8 * (b & 7));
      }
    }
    /* The whole group is written; bytes past n*w are padding the next
     * operation never reads, and the buffer has room for them. */
    fzk_u64 *d8 = (fzk_u64 *)(dst + (size_t)8 * w * g);
    for (unsigned k = 0; k < w; k++)
      d8[k] = q[k];
  }
  __syncthreads();
}

/* ---- rze: recursive zero-byte elimination (stage_rze.c) ---- */

/* Bitmap byte j of one level: bit b set when byte 8j+b is kept. */
__device__ __forceinline__ uint32_t fzk_rze_mask(const uint8_t *in, uint32_t nin,
                                                 uint32_t j, bool repeat) {
  uint32_t m = 0;
  for (unsigned b = 0; b < 8; b++) {
    uint32_t i = 8 * j + b;
    if (i >= nin)
      break;
    uint32_t prev = repeat && i ? in[i - 1] : 0;
    m |= (uint32_t)(in[i] != prev) << b;
  }
  return m;
}

/* This thread's bytes [lo, hi) of an nbm-byte bitmap, and the number of
 * bits set before them (a block scan). */
__device__ __forceinline__ fzk_u64 fzk_rank_range(const uint8_t *bm, uint32_t nbm,
                                                  uint32_t *lo, uint32_t *hi, fzk_u64 *red) {
  uint32_t per = (nbm + FZK_NT - 1) / FZK_NT;
  *lo = threadIdx.x * per;
  *hi = *lo + per < nbm ? *lo + per : nbm;
  fzk_u64 c = 0;
  for (uint32_t j = *lo; j < *hi; j++)
    c += __popc(bm[j]);
  fzk_u64 tot;
  return fzk_exscan(c, &tot, red);
}

/* Kept bytes of one level, in index order, to dst. */
__device__ void fzk_rze_scatter(const uint8_t *in, uint32_t nin, const uint8_t *bm,
                                uint32_t nbm, uint8_t *dst, fzk_u64 *red) {
  uint32_t lo, hi;
  fzk_u64 r = fzk_rank_range(bm, nbm, &lo, &hi, red);
  for (uint32_t j = lo; j < hi; j++) {
    uint32_t m = bm[j];
    while (m) {
      unsigned b = __ffs(m) - 1;
      m &= m - 1;
      dst[r++] = in[8 * j + b];
    }
  }
  (void)nin;
}

/* Encodes S bytes of src to dst; returns the coded length, or FZK_BAD when
 * `room` (the bytes the chunk may still use) would not hold it, in which
 * case dst is untouched.  t holds every level's bitmap. */
__device__ uint32_t fzk_rze_fwd(const uint8_t *src, uint32_t S, uint8_t *dst,
                                uint8_t *t, unsigned levels, uint32_t room,
                                fzk_u64 *red) {
  uint32_t len[FZE_RZE_MAX_LEVELS + 1], kept[FZE_RZE_MAX_LEVELS + 1];
  const uint8_t *lin[FZE_RZE_MAX_LEVELS + 1];
  uint8_t *bm[FZE_RZE_MAX_LEVELS + 1];
  len[0] = S;
  uint8_t *p = t;
  for (unsigned l = 1; l <= levels; l++) {
    len[l] = (len[l - 1] + 7) / 8;
    lin[l] = l == 1 ? src : bm[l - 1];
    bm[l] = p;
    p += len[l];
    fzk_u64 c = 0;
    for (uint32_t j = threadIdx.x; j < len[l]; j += FZK_NT) {
      uint32_t m;
      if (l == 1 && 8 * j + 8 <= S) {
        fzk_u64 v = *(const fzk_u64 *)(src + 8 * j);
        m = 0;
        for (unsigned b = 0; b < 8; b++)
          m |= (uint32_t)(((v >> (8 * b)) & 0xffu) != 0) << b;
      } else {
        m = fzk_rze_mask(lin[l], len[l - 1], j, l > 1);
      }
      bm[l][j] = (uint8_t)m;
      c += __popc(m);
    }
    kept[l] = (uint32_t)fzk_sum(c, red); /* synchronises: bm[l] is complete */
  }
  uint32_t total = len[levels];
  for (unsigned l = 1; l <= levels; l++)
    total += kept[l];
  if (total >= room)
    return FZK_BAD;
  for (uint32_t j = threadIdx.x; j < len[levels]; j += FZK_NT)
    dst[j] = bm[levels][j];
  uint32_t pos = len[levels];
  for (unsigned l = levels; l >= 1; l--) {
    fzk_rze_scatter(lin[l], len[l - 1], bm[l], len[l], dst + pos, red);
    pos += kept[l];
  }
  __syncthreads();
  return total;
}

/* Bits at and beyond position n of a bitmap must be zero. */
__device__ __forceinline__ bool fzk_tail_ok(const uint8_t *bm, uint32_t n) {
  return n % 8 == 0 || (bm[n / 8] >> (n % 8)) == 0;
}

/* Restores one level: n positions from bitmap bm and kept bytes k. */
__device__ void fzk_rze_restore(const uint8_t *bm, const uint8_t *k, uint32_t n,
                                uint8_t *dst, bool repeat, fzk_u64 *red) {
  uint32_t nbm = (n + 7) / 8, lo, hi;
  fzk_u64 r = fzk_rank_range(bm, nbm, &lo, &hi, red);
  uint32_t prev = repeat && r ? k[r - 1] : 0;
  for (uint32_t j = lo; j < hi; j++) {
    uint32_t m = bm[j];
    for (unsigned b = 0; b < 8; b++) {
      uint32_t i = 8 * j + b;
      if (i >= n)
        break;
      uint32_t v;
      if ((m >> b) & 1)
        v = prev = k[r++];
      else
        v = repeat ? prev : 0;
      dst[i] = (uint8_t)v;
    }
  }
  __syncthreads();
}

/* Decodes in_len bytes into n bytes at out; false when corrupt. */
__device__ bool fzk_rze_inv(const uint8_t *in, uint32_t in_len, uint8_t *out,
                            uint32_t n, uint8_t *t, unsigned levels,
                            fzk_u64 *red) {
  uint32_t len[FZE_RZE_MAX_LEVELS + 1];
  len[0] = n;
  for (unsigned l = 1; l <= levels; l++)
    len[l] = (len[l - 1] + 7) / 8;
  if (in_len < len[levels] || !fzk_tail_ok(in, len[levels - 1]))
    return false;
  uint8_t *buf[2] = {t, t + ((len[1] + 15) & ~15u)};
  const uint8_t *bm = in;
  uint32_t pos = len[levels];
  for (unsigned l = levels; l >= 1; l--) {
    fzk_u64 c = 0;
    for (uint32_t j = threadIdx.x; j < len[l]; j += FZK_NT)
      c += __popc(bm[j]);
    fzk_u64 cnt = fzk_sum(c, red);
    if (cnt > in_len - pos)
      return false;
    uint8_t *dst = l == 1 ? out : buf[l & 1];
    fzk_rze_restore(bm, in + pos, len[l - 1], dst, l > 1, red);
    if (l >= 2 && !fzk_tail_ok(dst, len[l - 2]))
      return false;
    pos += (uint32_t)cnt;
    bm = dst;
  }
  return pos == in_len;
}

/* ---- bitpack: zigzag residuals in blocks of 32, b bit planes each ---- */

__device__ __forceinline__ fzk_u64 fzk_bp_residual(const uint8_t *src, uint32_t i,
                                                   uint32_t n, unsigned w) {
  if (i >= n)
    return 0;
  return fzk_zz(fzk_ld(src, i, w) - (i ? fzk_ld(src, i - 1, w) : 0), w);
}

/* Encodes n words; returns the length or FZK_BAD when it would not fit in
 * `room` (dst then untouched).  t: the bit widths and the plane offsets. */
__device__ uint32_t fzk_bitpack_fwd(const uint8_t *src, uint32_t n, unsigned w,
                                    uint8_t *dst, uint8_t *t, uint32_t room,
                                    fzk_u64 *red) {
  unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t nb = (n + 31) / 32;
  uint8_t *bits = t;
  uint32_t *off = (uint32_t *)(t + ((nb + 15) & ~15u));
  for (uint32_t b = warp; b < nb; b += FZK_NW) {
    fzk_u64 r = fzk_bp_residual(src, 32 * b + lane, n, w);
    uint32_t lo = __reduce_or_sync(FZK_FULL, (uint32_t)r);
    uint32_t hi = __reduce_or_sync(FZK_FULL, (uint32_t)(r >> 32));
    if (lane == 0)
      bits[b] = (uint8_t)(hi ? 64 - __clz(hi) : lo ? 32 - __clz(lo) : 0);
  }
  __syncthreads();
  uint32_t per = (nb + FZK_NT - 1) / FZK_NT;
  uint32_t lo = threadIdx.x * per, hi = lo + per < nb ? lo + per : nb;
  fzk_u64 c = 0;
  for (uint32_t b = lo; b < hi; b++)
    c += 4u * bits[b];
  fzk_u64 tot, o = fzk_exscan(c, &tot, red);
  for (uint32_t b = lo; b < hi; b++) {
    off[b] = (uint32_t)o;
    o += 4u * bits[b];
  }
  uint32_t total = nb + (uint32_t)tot;
  if (total >= room)
    return FZK_BAD;
  __syncthreads();
  for (uint32_t b = threadIdx.x; b < nb; b += FZK_NT)
    dst[b] = bits[b];
  for (uint32_t b = warp; b < nb; b += FZK_NW) {
    fzk_u64 r = fzk_bp_residual(src, 32 * b + lane, n, w);
    unsigned nbits = bits[b];
    uint8_t *pl = dst + nb + off[b];
    uint32_t mine = 0;
    for (unsigned p = 0; p < nbits; p++) {
      uint32_t plane = __ballot_sync(FZK_FULL, (unsigned)((r >> p) & 1));
      if ((p & 31) == lane)
        mine = plane;
      if ((p & 31) == 31 || p + 1 == nbits) {
        if (lane <= (p & 31)) {
          uint8_t *q = pl + 4 * ((p & ~31u) + lane);
          q[0] = (uint8_t)mine;
          q[1] = (uint8_t)(mine >> 8);
          q[2] = (uint8_t)(mine >> 16);
          q[3] = (uint8_t)(mine >> 24);
        }
      }
    }
  }
  __syncthreads();
  return total;
}

/* Decodes in_len bytes into n words; false when corrupt. */
__device__ bool fzk_bitpack_inv(const uint8_t *in, uint32_t in_len, uint8_t *dst,
                                uint32_t n, unsigned w, uint8_t *t, fzk_u64 *red) {
  unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t nb = (n + 31) / 32;
  if (in_len < nb)
    return false;
  uint32_t *off = (uint32_t *)t;
  uint32_t per = (nb + FZK_NT - 1) / FZK_NT;
  uint32_t lo = threadIdx.x * per, hi = lo + per < nb ? lo + per : nb;
  fzk_u64 c = 0;
  bool bad = false;
  for (uint32_t b = lo; b < hi; b++) {
    bad |= in[b] > 8 * w;
    c += 4u * in[b];
  }
  fzk_u64 tot, o = fzk_exscan(c, &tot, red);
  if (fzk_any(bad) || nb + tot != in_len)
    return false;
  for (uint32_t b = lo; b < hi; b++) {
    off[b] = (uint32_t)o;
    o += 4u * in[b];
  }
  __syncthreads();
  bool pad_bad = false;
  for (uint32_t b = warp; b < nb; b += FZK_NW) {
    const uint8_t *pl = in + nb + off[b];
    unsigned nbits = in[b];
    fzk_u64 r = 0;
    for (unsigned p = 0; p < nbits; p++) {
      const uint8_t *q = pl + 4 * p;
      uint32_t plane = (uint32_t)q[0] | (uint32_t)q[1] << 8 |
                       (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
      r |= (fzk_u64)((plane >> lane) & 1) << p;
    }
    uint32_t i = 32 * b + lane;
    if (i < n)
      fzk_st(dst, i, w, fzk_unzz(r, w));
    else
      pad_bad |= r != 0;
  }
  if (fzk_any(pad_bad))
    return false;
  fzk_prefix_words(dst, n, w, red);
  return true;
}

/* ---- quant: one element, through ops.h ---- */

__device__ __forceinline__ bool fzk_quant_one(fzk_u64 bits, unsigned w, unsigned mode,
                                              const fzk_qparams &q, fzk_u64 *code) {
  if (q.step == 0) {
    *code = bits;
    return true;
  }
  if (w == 4) {
    uint32_t c;
    float x = fzo_bits_f32((uint32_t)bits);
    bool ok = mode == FZK_EB_PWREL ? fzo_pw_quant_f32(x, (uint32_t)q.step, q.eb_abs, &c)
                                  : fzo_quant_f32(x, q.inv, q.step, q.eb_abs, &c);
    *code = ok ? c : 0;
    return ok;
  }
  uint64_t c;
  double x = fzo_bits_f64(bits);
  bool ok = mode == FZK_EB_PWREL ? fzo_pw_quant_f64(x, (uint64_t)q.step, q.eb_abs, &c)
                                : fzo_quant_f64(x, q.inv, q.step, q.eb_abs, &c);
  *code = ok ? c : 0;
  return ok;
}

__device__ __forceinline__ fzk_u64 fzk_dequant_one(fzk_u64 code, unsigned w,
                                                   unsigned mode, const fzk_qparams &q) {
  if (q.step == 0)
    return code;
  if (w == 4)
    return mode == FZK_EB_PWREL
               ? fzo_f32_bits(fzo_pw_dequant_f32((uint32_t)code, (uint32_t)q.step))
               : fzo_f32_bits(fzo_dequant_f32((uint32_t)code, q.step));
  return mode == FZK_EB_PWREL ? fzo_f64_bits(fzo_pw_dequant_f64(code, (uint64_t)q.step))
                             : fzo_f64_bits(fzo_dequant_f64(code, q.step));
}

__device__ __forceinline__ uint32_t fzk_varint_len(uint32_t v) {
  uint32_t k = 1;
  while (v >= 0x80) {
    v >>= 7;
    k++;
  }
  return k;
}

#endif
