/*
 * chain32_ops.cuh - the device code of the chunk kernels for chains on
 * 4-byte words (f32, and u32 / i32 without quant) of the form
 * [quant] [diff] coder, the coder bitpack, bitshuffle | rze, or rze on the
 * words' bytes as they are: the `fast`, `balanced` and `lossless` presets,
 * and the chains users spell (quant | diff | bitpack, quant | diff | rze,
 * quant | rze, diff | rze, quant | bitshuffle | rze, ...).  chain32.cu
 * builds some of them ahead of time; the run-time code generation builds
 * the rest from this header, which NVRTC compiles (device code only: no
 * CUDA runtime header, no standard C++ header, libc headers only outside
 * NVRTC).
 *
 * One block still owns one chunk, but the work is laid out for warps: warp
 * w takes the 32-word blocks [w*K, w*K + K) of the chunk in order, so the
 * previous word of a block is a shuffle away (carried from the block
 * before), a 32x32 bit transpose by shuffles turns a block's 32 words into
 * its 32 bit planes (bitpack planes, or four bytes of each bitshuffle
 * plane), and every prefix sum the layout needs (plane offsets, outlier
 * ranks, running sums of differences) is a warp scan plus one barrier.
 * The encoder places its chunk in the archive itself (the offset from a
 * decoupled look-back over the chunks before it) while two of its warps
 * checksum it (fzk_crc_group_xor), as two warps of the decoder do once
 * they have decoded their share.  The bytes are the CPU reference's
 * (engine/src/stage_*.c), and the decoder accepts exactly what the CPU
 * decoder accepts.
 *
 * rze on words reads the words' bytes where bitshuffle | rze reads four
 * bytes of a plane: a word's nibble of the level-1 bitmap and its rank
 * give its kept bytes, so the same level-1 code serves both.  diff before
 * bitpack makes two running sums of the decoder: the diff stage's words
 * from bitpack's differences, then the words from those; each warp keeps
 * the second's partial sums in shared memory (fzk_d32.e) until the block
 * knows every warp's total.  It decodes its blocks two at a time, with the
 * words in the lanes in an order (fzk_transpose32_pair) that gives each
 * lane two consecutive words, so that both sums take one warp scan per two
 * blocks, and a whole chunk is written two words a lane.
 *
 * The kernels are written once for both word sizes (chain64_ops.cuh has
 * the 8-byte ones): fzk_enc_body and fzk_dec_body take the word's bytes
 * WB, and fzk_word<WB> holds what differs (the types, the shared-memory
 * layouts, the quantizer, how a block's words become bit planes).  The
 * encoder's phases are pass 1 (fzk_enc_words), the warps' totals
 * (fzk_enc_scan), the rze levels (fzk_enc_rze), the side list and
 * bitpack's planes (fzk_enc_side), the kept bytes (fzk_enc_levels) and
 * the placing (fzk_enc_place); the decoder's are the opening of the chunk
 * (fzk_dec_open: its checks, the stored chunk, the side list), bitpack's
 * widths or rze's levels (fzk_dec_coder), then the words, which differ
 * enough by their size to have one function each (fzk_dec32_words here,
 * with its running sums fzk_dec32_diffs and fzk_dec32_ddiff).
 *
 * How a kernel is made of it.  The encoder and the decoder are the
 * __device__ templates fzk_enc32_body and fzk_dec32_body (fzk_enc_body and
 * fzk_dec_body on 4-byte words, with the chain's check); each kernel is a
 * __global__ wrapper that passes its arguments on, unchanged:
 *
 *   extern "C" __global__ void __launch_bounds__(FZK_NT, FZK_ENC32_BLOCKS)
 *   fzk_enc32_gen(fzk_desc d, const uint8_t *__restrict__ d_in,
 *                 const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out,
 *                 uint64_t out_cap, uint64_t header_len, uint64_t table_off,
 *                 uint32_t *__restrict__ d_crcs, fzk_u64 *__restrict__ lb,
 *                 const uint32_t *__restrict__ d_tab) {
 *     fzk_enc32_body<QK, CK, DIFF, NEGA, LEV>(d, d_in, d_qp, d_out, out_cap, header_len,
 *                                             table_off, d_crcs, lb, d_tab);
 *   }
 *   extern "C" __global__ void __launch_bounds__(FZK_NT, FZK_DEC32_BLOCKS)
 *   fzk_dec32_gen(fzk_desc d, const uint8_t *__restrict__ d_pay, uint64_t pay_len,
 *                 const uint64_t *__restrict__ d_offs, const uint8_t *__restrict__ d_sizes16,
 *                 const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out, int out_vec,
 *                 uint32_t *__restrict__ d_status, uint32_t *__restrict__ d_crcs,
 *                 const uint32_t *__restrict__ d_tab) {
 *     fzk_dec32_body<QK, CK, DIFF, NEGA, LEV>(d, d_pay, pay_len, d_offs, d_sizes16, q,
 *                                             d_out, out_vec, d_status, d_crcs, d_tab);
 *   }
 *
 * The arguments are those of fzk_launch_encode32 and fzk_launch_decode32
 * (fzk.h), the descriptor by value.  Launch: grid d.nchunks blocks of
 * FZK_NT threads, dynamic shared memory d.smem_e32 (encoder) or d.smem_d32
 * (decoder) as fzk_desc_layout32 sets them (the function's maximum dynamic
 * shared memory raised to that first); lb (nchunks + 2 words) zeroed before
 * the encoder, d_crcs before the decoder.  The template parameters are the
 * descriptor's chain constants, as fzk_desc_from_header sets them:
 *
 *   QK    the quantizer: fzk_qkind32(d): FZK_Q_NONE (no quant stage),
 *         FZK_Q_BINS (ABS, REL) or FZK_Q_PW (PWREL)
 *   CK    the coder after quant and diff: d.k32 (FZK_C32_*)
 *   DIFF  a diff stage before the coder: d.k32diff (0, 1)
 *   NEGA  its map is negabinary: d.k32nega (0, 1)
 *   LEV   rze's levels: d.k32lev (1 .. FZE_RZE_MAX_LEVELS; 0 for bitpack)
 *
 * Any of them but CK may be FZK_RT instead, read from the descriptor at
 * run time (chain32.cu's kernels, each serving several chains, do that);
 * a generated kernel fixes them all.  fzk_c32_valid says which
 * combinations exist.  Build flags: C++17, -fmad=false, --prec-div=true,
 * --prec-sqrt=true, --ftz=false (IEEE arithmetic, as the CPU's).
 */
#ifndef FZK_CHAIN32_OPS_CUH
#define FZK_CHAIN32_OPS_CUH

#ifndef __CUDACC_RTC__
#include <stdint.h>
#endif

#include "fz_contract.h"
#include "ops.h"
#include "warp_ops.cuh"

/* A chain constant read from the descriptor at run time. */
#define FZK_RT (-1)

/* Compile-time constants as types, for the built variants of a loop (the
 * standard library's are not there under NVRTC). */
template <bool B> struct fzk_bool { static constexpr bool value = B; };
template <int V> struct fzk_int { static constexpr int value = V; };

/* The kinds of quantizer a kernel is built for: none, uniform bins (ABS and
 * REL), PWREL.  A quantizer whose step came out 0 (lossless) passes words
 * through at run time. */
#define FZK_Q_NONE 0
#define FZK_Q_BINS 1
#define FZK_Q_PW 2

/* The coders (fzk_desc.k32): bitpack; bitshuffle then rze; rze on the
 * words' bytes as they are. */
#define FZK_C32_BITPACK 1
#define FZK_C32_SHUF_RZE 2
#define FZK_C32_RZE 3

__host__ __device__ inline int fzk_qkind32(const fzk_desc &d) {
  return !d.has_quant ? FZK_Q_NONE : d.mode[0] == FZ_EB_PWREL ? FZK_Q_PW : FZK_Q_BINS;
}

/* The chains the bodies are written for. */
template <int QK, int CK, int DIFF, int NEGA, int LEV>
__host__ __device__ constexpr bool fzk_c32_valid() {
  return (QK == FZK_RT || (QK >= FZK_Q_NONE && QK <= FZK_Q_PW)) &&
         (DIFF == FZK_RT || DIFF == 0 || DIFF == 1) &&
         (NEGA == FZK_RT || NEGA == 0 || NEGA == 1) &&
         ((CK == FZK_C32_BITPACK && (LEV == FZK_RT || LEV == 0)) ||
          ((CK == FZK_C32_SHUF_RZE || CK == FZK_C32_RZE) &&
           (LEV == FZK_RT || (LEV >= 1 && LEV <= FZE_RZE_MAX_LEVELS))));
}
#define FZK_C32_CHECK(QK, CK, DIFF, NEGA, LEV)                                                    \
  static_assert(fzk_c32_valid<QK, CK, DIFF, NEGA, LEV>(), "no such chain on 4-byte words")

template <int QK> __device__ __forceinline__ int fzk_c32_qk(const fzk_desc &d) {
  return QK != FZK_RT ? QK : fzk_qkind32(d);
}
template <int F> __device__ __forceinline__ bool fzk_c32_flag(uint8_t rt) {
  return F != FZK_RT ? F != 0 : rt != 0;
}
template <int LEV> __device__ __forceinline__ unsigned fzk_c32_lev(const fzk_desc &d) {
  return LEV != FZK_RT ? (unsigned)LEV : d.k32lev;
}

/* Blocks per SM the kernels are built for: a budget of 40 registers a
 * thread; shared memory allows as many at 16 KiB chunks. */
#ifndef FZK_ENC32_BLOCKS
#define FZK_ENC32_BLOCKS 6
#endif
#ifndef FZK_DEC32_BLOCKS
#define FZK_DEC32_BLOCKS 6
#endif
/* Warps of the encoder that checksum a chunk while the others place it,
 * and of the decoder that checksum it after their share of the decoding. */
#ifndef FZK_ENC32_CRCW
#define FZK_ENC32_CRCW 2
#endif
#ifndef FZK_DEC32_CRCW
#define FZK_DEC32_CRCW 2
#endif

__host__ __device__ inline uint32_t a16(uint32_t v) { return (v + 15u) & ~15u; }

/* Shared memory of the two kernels (fzk_desc_layout32). */
struct fzk_e32 {
  uint8_t *a;      /* residual words (bitpack) or the bit-shuffled stream
                    * (fzk_plane_stride) */
  uint8_t *res;    /* the coded chunk as it is stored, 16 bytes into its area */
  uint32_t *wt;    /* per warp sums and more (FZK_WT_WORDS) */
  uint8_t *tb;     /* rze bitmaps, every level */
};

struct fzk_d32 {
  uint8_t *c;      /* the coded chunk, at offset o */
  uint32_t *obm;   /* outlier bitmap */
  uint32_t *wt;    /* per warp sums, and flags */
  uint32_t *T;     /* the CRC slice tables */
  uint2 *r1;       /* rze: level-1 bitmap words and their ranks (fzk_r1_at) */
  uint8_t *tb2;    /* rze: two bitmaps of the levels above 1 */
  uint32_t *e;     /* bitpack after diff, in r1's place: each warp's running
                    * sums of the diff stage's words */
};

__host__ __device__ inline uint32_t nbmax32(uint32_t cb) { return cb / 128; }

/* Bytes from one bit plane of the encoder's shuffled stream to the next in
 * shared memory.  A warp stores four bytes of all 32 planes at once; with
 * planes a multiple of 128 bytes apart they would all hit one bank, so a
 * chunk whose planes are a power of two of 16-byte vectors long pads each
 * by 16 bytes (32 * 16 bytes in all).  Other (partial) chunks pack them. */
__device__ __forceinline__ uint32_t fzk_plane_stride(uint32_t pb) {
  return pb % 16 == 0 && (pb & (pb - 1)) == 0 ? pb + 16 : pb;
}

/* Where 16-byte vector v of the shuffled stream lies. */
__device__ __forceinline__ uint32_t fzk_plane_vec(uint32_t v, uint32_t pb, uint32_t ps) {
  if (ps == pb)
    return 16 * v;
  const uint32_t vp = pb / 16; /* a power of two */
  return (v >> (__ffs(vp) - 1)) * ps + 16 * (v & (vp - 1));
}

/* Words of the per-warp sums area (wt), each written and read between two
 * barriers of one phase.  [0, FZK_NW) the warps' sums of a phase; then: */
#define FZK_WT_SUMS2 8u   /* a second set of per-warp sums (rze level 2, bitpack) */
#define FZK_WT_SUMS3 16u  /* a third (the kept bytes of rze level 1) */
#define FZK_WT_LEVELS 24u /* encoder: level l's kept bytes at FZK_WT_LEVELS + l, l >= 2 */
#define FZK_WT_POS 24u    /* decoder: where the kept bytes of rze level 2 start */
#define FZK_WT_BAD2 30u   /* decoder: a flag of bitpack's padding check */
#define FZK_WT_BAD 31u    /* decoder: any thread found the chunk corrupt */
#define FZK_WT_SEL 32u    /* rze decoder: the byte selectors of fzk_expand_sel, 16 */
#define FZK_WT_OFF 40u    /* encoder: the chunk's archive offset, low word then high */
#define FZK_WT_TICKET 47u /* encoder: the chunk this block codes */
#define FZK_WT_WORDS 48u

/* The decoder's level-1 words; its running sums (fzk_d32.e), a word for
 * each word of the chunk's 32-word blocks. */
__host__ __device__ inline uint32_t r1_bytes(uint32_t cb) { return a16(cb / 4 + 16); }
__host__ __device__ inline uint32_t e_bytes(uint32_t cb) { return a16(cb + 128); }

__device__ inline fzk_e32 fzk_carve_e32(const fzk_desc &d, uint8_t *p) {
  fzk_e32 s;
  s.a = p; p += a16(d.cb + 32 * 16 + 16);
  s.res = p + 16; p += a16(d.cb + 48);
  s.wt = (uint32_t *)p; p += 4 * FZK_WT_WORDS;
  s.tb = p;
  return s;
}

__device__ inline fzk_d32 fzk_carve_d32(const fzk_desc &d, uint8_t *p) {
  fzk_d32 s;
  uint32_t nbm = 4 * nbmax32(d.cb);
  s.c = p; p += a16(d.cb + 48);
  s.obm = (uint32_t *)p; p += nbm;
  s.wt = (uint32_t *)p; p += 4 * FZK_WT_WORDS;
  s.T = (uint32_t *)p; p += 4096;
  s.r1 = (uint2 *)p;
  s.e = (uint32_t *)p; p += r1_bytes(d.cb);
  s.tb2 = p;
  return s;
}

/* Runs f built for a whole chunk or not (fzk_bool) and for the quantizer
 * kind that runs (fzk_int: FZK_Q_NONE passes words through, as a step of 0
 * does), as whole and qon say.  A kind fixed at compile time builds each
 * main loop four times (two for FZK_Q_NONE), FZK_RT six times. */
template <int Q, class F>
__device__ __forceinline__ void fzk_built_whole(bool whole, F &f) {
  if (whole)
    f(fzk_bool<true>(), fzk_int<Q>());
  else
    f(fzk_bool<false>(), fzk_int<Q>());
}

template <int QK, class F>
__device__ __forceinline__ void fzk_built32(bool whole, int qon, F &f) {
  if constexpr (QK == FZK_Q_NONE) {
    fzk_built_whole<FZK_Q_NONE>(whole, f);
  } else if constexpr (QK != FZK_RT) {
    if (qon != FZK_Q_NONE)
      fzk_built_whole<QK>(whole, f);
    else
      fzk_built_whole<FZK_Q_NONE>(whole, f);
  } else {
    if (qon == FZK_Q_BINS)
      fzk_built_whole<FZK_Q_BINS>(whole, f);
    else if (qon == FZK_Q_PW)
      fzk_built_whole<FZK_Q_PW>(whole, f);
    else
      fzk_built_whole<FZK_Q_NONE>(whole, f);
  }
}

/* ---- per-element helpers ---- */

/* The quantizer's word for the bits b of an f32; false for an outlier,
 * whose word is 0.  Uniform bins read the bin off the rounding sum
 * (fzo_quant_f32_sum, ops.h), with the archive's words.  The caller passes
 * words through instead when q.step is 0. */
template <int QK>
__device__ __forceinline__ bool fzk_q32(uint32_t b, const fzk_qparams &q, uint32_t *code) {
  if (QK == FZK_Q_NONE) {
    *code = b;
    return true;
  }
  if (QK == FZK_Q_BINS)
    return fzo_quant_f32_sum(fzo_bits_f32(b), q.inv, q.step, q.eb_abs, code);
  uint32_t c = 0;
  const bool ok = fzo_pw_quant_f32(fzo_bits_f32(b), (uint32_t)q.step, q.eb_abs, &c);
  *code = ok ? c : 0;
  return ok;
}

/* fzk_q32 for a kind known at run time only (not FZK_Q_NONE). */
__device__ __forceinline__ bool fzk_q32_any(int qk, uint32_t b, const fzk_qparams &q,
                                            uint32_t *code) {
  return qk == FZK_Q_PW ? fzk_q32<FZK_Q_PW>(b, q, code) : fzk_q32<FZK_Q_BINS>(b, q, code);
}

/* The value of a word (fzo_dequant_f32_sum for uniform bins); the caller
 * passes words through instead when q.step is 0. */
template <int QK>
__device__ __forceinline__ uint32_t fzk_dq32(uint32_t code, const fzk_qparams &q) {
  if (QK == FZK_Q_NONE)
    return code;
  if (QK == FZK_Q_PW)
    return fzo_f32_bits(fzo_pw_dequant_f32(code, (uint32_t)q.step));
  return fzo_f32_bits(fzo_dequant_f32_sum(code, q.step));
}

__device__ __forceinline__ uint32_t fzk_vlen(uint32_t v) {
  uint32_t k = 1;
  while (v >= 0x80) {
    v >>= 7;
    k++;
  }
  return k;
}

/* 4-bit mask of the nonzero bytes of v. */
__device__ __forceinline__ uint32_t fzk_nz4(uint32_t v) {
  uint32_t t = (((v & 0x7f7f7f7fu) + 0x7f7f7f7fu) | v) & 0x80808080u;
  return ((t >> 7) & 1u) | ((t >> 14) & 2u) | ((t >> 21) & 4u) | ((t >> 28) & 8u);
}

/* Bits at and beyond position n of a bitmap must be zero. */
__device__ __forceinline__ bool fzk_tail_ok32(const uint8_t *bm, uint32_t n) {
  return n % 8 == 0 || (bm[n / 8] >> (n % 8)) == 0;
}

/* ---- rze levels >= 2, one warp (their data is an eighth or less) ---- */

/* Lane range of nbm bitmap bytes. */
__device__ __forceinline__ void fzk_lane_range(uint32_t nbm, uint32_t *j0, uint32_t *j1) {
  uint32_t per = (nbm + 31) / 32, lo = (threadIdx.x & 31) * per;
  *j0 = lo < nbm ? lo : nbm;
  *j1 = lo + per < nbm ? lo + per : nbm;
}

/* Repeat elimination of nin bytes: the bitmap to bm, the kept count back. */
__device__ inline uint32_t fzk_wrze_level(const uint8_t *in, uint32_t nin, uint8_t *bm) {
  uint32_t j0, j1, cnt = 0;
  fzk_lane_range((nin + 7) / 8, &j0, &j1);
  for (uint32_t j = j0; j < j1; j++) {
    uint32_t m = 0;
    for (unsigned b = 0; b < 8; b++) {
      uint32_t i = 8 * j + b;
      if (i >= nin)
        break;
      uint32_t prev = i ? in[i - 1] : 0;
      m |= (uint32_t)(in[i] != prev) << b;
    }
    bm[j] = (uint8_t)m;
    cnt += __popc(m);
  }
  return __reduce_add_sync(FZK_FULL, cnt);
}

/* The kept bytes of one level, in order, to dst. */
__device__ inline void fzk_wrze_scatter(const uint8_t *in, uint32_t nin, const uint8_t *bm,
                                 uint8_t *dst) {
  uint32_t j0, j1, cnt = 0;
  fzk_lane_range((nin + 7) / 8, &j0, &j1);
  for (uint32_t j = j0; j < j1; j++)
    cnt += __popc(bm[j]);
  uint32_t r = fzk_warp_incl(cnt) - cnt;
  for (uint32_t j = j0; j < j1; j++) {
    uint32_t m = bm[j];
    while (m) {
      unsigned b = __ffs(m) - 1;
      m &= m - 1;
      dst[r++] = in[8 * j + b];
    }
  }
}

/* Restores n bytes of a repeat-eliminated level from bitmap bm and the kept
 * bytes k (cnt of them, checked by the caller). */
__device__ inline void fzk_wrze_restore(const uint8_t *bm, const uint8_t *k, uint32_t n, uint8_t *dst) {
  uint32_t j0, j1, cnt = 0;
  fzk_lane_range((n + 7) / 8, &j0, &j1);
  for (uint32_t j = j0; j < j1; j++)
    cnt += __popc(bm[j]);
  uint32_t r = fzk_warp_incl(cnt) - cnt;
  uint32_t prev = r ? k[r - 1] : 0;
  for (uint32_t j = j0; j < j1; j++) {
    uint32_t m = bm[j];
    for (unsigned b = 0; b < 8; b++) {
      uint32_t i = 8 * j + b;
      if (i >= n)
        break;
      if ((m >> b) & 1)
        prev = k[r++];
      dst[i] = (uint8_t)prev;
    }
  }
}

__device__ __forceinline__ uint32_t fzk_wpopc(const uint8_t *bm, uint32_t nbm) {
  uint32_t j0, j1, cnt = 0;
  fzk_lane_range(nbm, &j0, &j1);
  for (uint32_t j = j0; j < j1; j++)
    cnt += __popc(bm[j]);
  return __reduce_add_sync(FZK_FULL, cnt);
}

/* ---- encoder ---- */

/* Flags of a chunk's look-back word (FZK_LB_*): the chunk's own coded size
 * is known, or the sum of the sizes up to and including it. */
#define FZK_LB_AGG (1ull << 62)
#define FZK_LB_INCL (2ull << 62)
#define FZK_LB_VAL ((1ull << 62) - 1)

__device__ __forceinline__ void fzk_lb_put(fzk_u64 *lb, uint64_t c, fzk_u64 v) {
  *(volatile fzk_u64 *)(lb + c) = v;
}

/* The archive offset of chunk c (decoupled look-back, run by one warp): the
 * chunks before it are summed from their look-back words, 32 at a time,
 * back to the nearest one that knows its inclusive sum; a word still empty
 * is read again (its chunk took its ticket earlier, so it is running and
 * publishes its own size without waiting on anyone).  Chunk c's size was
 * published before; its inclusive sum is published here. */
__device__ inline uint64_t fzk_lookback(fzk_u64 *lb, uint64_t c, uint32_t size) {
  const unsigned lane = threadIdx.x & 31;
  fzk_u64 excl = 0;
  int64_t top = (int64_t)c - 1;
  while (top >= 0) {
    const int64_t i = top - lane;
    const fzk_u64 v = i >= 0 ? *(volatile const fzk_u64 *)(lb + i) : FZK_LB_INCL;
    if (__any_sync(FZK_FULL, v == 0))
      continue;
    const uint32_t incl = __ballot_sync(FZK_FULL, (v & FZK_LB_INCL) != 0);
    const unsigned last = incl ? __ffs(incl) - 1 : 31;
    fzk_u64 x = lane <= last ? v & FZK_LB_VAL : 0;
#pragma unroll
    for (unsigned o = 16; o; o >>= 1)
      x += __shfl_xor_sync(FZK_FULL, x, o);
    excl += x;
    if (incl)
      break;
    top -= 32;
  }
  if (lane == 0 && c > 0)
    fzk_lb_put(lb, c, FZK_LB_INCL | (excl + size));
  return excl;
}

/* The encoder's rze phase: level 1's bitmap of the stream of len0 bytes
 * (s.tb) by the block, each thread with its vectors v0 .. v1 and the rank
 * of its kept bytes (rank1); level 2 by the block too (the thread's bitmap
 * bytes q0 .. q1 and rank r2); the levels above by warp 0.  pos1 is where
 * level 1's kept bytes start in the coded chunk, kept1 how many there
 * are, total the chunk's coded length; bitpack (no rze) sets total only. */
template <int CK, class S>
__device__ __forceinline__ void
fzk_enc_rze(S &s, unsigned L, uint32_t len0, uint32_t side, uint32_t nb, uint32_t tot, uint32_t pb,
            uint32_t ps, unsigned warp, unsigned lane, uint32_t (&lens)[FZE_RZE_MAX_LEVELS + 1],
            uint8_t *(&bms)[FZE_RZE_MAX_LEVELS + 1], uint32_t &rank1, uint32_t &v0, uint32_t &v1,
            uint32_t &pos1, uint32_t &r2, uint32_t &q0, uint32_t &q1, uint32_t &kept1,
            uint32_t &total) {
  constexpr bool bp = CK == FZK_C32_BITPACK, wd = CK == FZK_C32_RZE;
  if (bp) {
    total = side + nb + (tot & 0xffffu);
  } else {
    uint32_t nv = (len0 + 15) / 16, per = (nv + FZK_NT - 1) / FZK_NT;
    v0 = threadIdx.x * per < nv ? threadIdx.x * per : nv;
    v1 = v0 + per < nv ? v0 + per : nv;
    uint32_t cnt = 0;
    for (uint32_t v = v0; v < v1; v++) {
      uint4 qv = *(const uint4 *)(s.a + (wd ? 16 * v : fzk_plane_vec(v, pb, ps)));
      uint32_t mk = fzk_nz4(qv.x) | fzk_nz4(qv.y) << 4 | fzk_nz4(qv.z) << 8 | fzk_nz4(qv.w) << 12;
      *(uint16_t *)(s.tb + 2 * v) = (uint16_t)mk;
      cnt += __popc(mk);
    }
    uint32_t inc = fzk_warp_incl(cnt);
    rank1 = inc - cnt;
    if (lane == 31)
      s.wt[FZK_WT_SUMS3 + warp] = inc;
    lens[0] = len0;
    bms[1] = s.tb;
    for (unsigned l = 1; l <= L; l++) {
      lens[l] = (lens[l - 1] + 7) / 8;
      if (l >= 2)
        bms[l] = bms[l - 1] + a16(lens[l - 1] + 1);
    }
    __syncthreads();
    /* Level 2 by the block too (its input is an eighth of the stream). */
    if (L >= 2) {
      uint32_t per2 = (lens[2] + FZK_NT - 1) / FZK_NT;
      q0 = threadIdx.x * per2 < lens[2] ? threadIdx.x * per2 : lens[2];
      q1 = q0 + per2 < lens[2] ? q0 + per2 : lens[2];
      uint32_t cnt2 = 0;
      for (uint32_t j = q0; j < q1; j++) {
        uint32_t mk = 0;
        for (unsigned b = 0; b < 8; b++) {
          uint32_t i = 8 * j + b;
          if (i >= lens[1])
            break;
          uint32_t prev = i ? bms[1][i - 1] : 0;
          mk |= (uint32_t)(bms[1][i] != prev) << b;
        }
        bms[2][j] = (uint8_t)mk;
        cnt2 += __popc(mk);
      }
      uint32_t inc2 = fzk_warp_incl(cnt2);
      r2 = inc2 - cnt2;
      if (lane == 31)
        s.wt[FZK_WT_SUMS2 + warp] = inc2;
      __syncthreads();
      uint32_t kept2 = 0;
      for (unsigned w = 0; w < FZK_NW; w++) {
        r2 += w < warp ? s.wt[FZK_WT_SUMS2 + w] : 0;
        kept2 += s.wt[FZK_WT_SUMS2 + w];
      }
      if (threadIdx.x == 0)
        s.wt[FZK_WT_LEVELS + 2] = kept2;
    }
    if (warp == 0) {
      for (unsigned l = 3; l <= L; l++) {
        uint32_t k = fzk_wrze_level(bms[l - 1], lens[l - 1], bms[l]);
        __syncwarp();
        if (lane == 0)
          s.wt[FZK_WT_LEVELS + l] = k;
      }
    }
    for (unsigned w = 0; w < FZK_NW; w++) {
      uint32_t t = s.wt[FZK_WT_SUMS3 + w];
      rank1 += w < warp ? t : 0;
      kept1 += t;
    }
    __syncthreads();
    pos1 = side + lens[L];
    for (unsigned l = 2; l <= L; l++)
      pos1 += s.wt[FZK_WT_LEVELS + l];
    total = pos1 + kept1;
  }
}

/* The word kernels are written once, for words of WB bytes; fzk_word<WB>
 * holds what differs between 4- and 8-byte words (fzk_word<4> below,
 * fzk_word<8> in chain64_ops.cuh): the word and shuffle types, the
 * shared-memory layouts, the quantizer, the maps and how a block's words
 * become bit planes. */
template <int WB> struct fzk_word;

/* 4-byte words: one plane of each shuffled byte position, four 32-word
 * blocks loaded at once. */
template <> struct fzk_word<4> {
  typedef uint32_t T; /* the word */
  typedef uint32_t S; /* the word as a shuffle moves it */
  typedef fzk_e32 E;
  typedef fzk_d32 D;
  static constexpr unsigned STEP = 4; /* 32-word blocks the encoder loads at once */
  static constexpr unsigned ENC_CRCW = FZK_ENC32_CRCW, DEC_CRCW = FZK_DEC32_CRCW;
  static __device__ __forceinline__ E carve_e(const fzk_desc &d, uint8_t *p) {
    return fzk_carve_e32(d, p);
  }
  static __device__ __forceinline__ D carve_d(const fzk_desc &d, uint8_t *p) {
    return fzk_carve_d32(d, p);
  }
  static __device__ __forceinline__ T zigzag(T v) { return fzo_zigzag32(v); }
  static __device__ __forceinline__ T nega(T v) { return fzo_nega32(v); }
  template <int QK> static __device__ __forceinline__ bool q(T b, const fzk_qparams &p, T *code) {
    return fzk_q32<QK>(b, p, code);
  }
  static __device__ __forceinline__ bool q_any(int qk, T b, const fzk_qparams &p, T *code) {
    return fzk_q32_any(qk, b, p, code);
  }
  /* A block's bitpack residuals r as bit planes at p, as many as its
   * widest residual needs: their count. */
  static __device__ __forceinline__ uint32_t put_bitplanes(uint8_t *p, T r, const fzk_tp &tp,
                                                           unsigned lane) {
    const uint32_t nbits = 32u - __clz(__reduce_or_sync(FZK_FULL, r));
    const uint32_t x = fzk_transpose32(r, tp);
    if (lane < nbits)
      *(uint32_t *)(p + 4 * lane) = x;
    return nbits;
  }
  /* Word u of block bb into the shuffled stream at a: lane p holds bytes
   * 4bb..4bb+3 of plane p (word aligned in a whole chunk: pb and ps are
   * multiples of 16). */
  template <bool FULL>
  static __device__ __forceinline__ void put_planes(uint8_t *a, T u, const fzk_tp &tp,
                                                    unsigned lane, uint32_t ps, uint32_t pb,
                                                    uint32_t bb) {
    const uint32_t x = fzk_transpose32(u, tp);
    if (FULL) {
      *(uint32_t *)(a + lane * ps + 4 * bb) = x;
    } else if (4 * bb + 4 <= pb) {
      fzk_st32u(a, lane * ps + 4 * bb, x);
    } else {
      for (unsigned k2 = 0; 4 * bb + k2 < pb; k2++)
        a[lane * ps + 4 * bb + k2] = (uint8_t)(x >> (8 * k2));
    }
  }
  /* An outlier's stored value at p + at (any alignment). */
  static __device__ __forceinline__ void put_value(uint8_t *p, uint32_t at, T x) {
    fzk_st32u(p, at, x);
  }
};

/* A chunk's words and their 32-word blocks (nb of them, pb bytes a shuffle
 * plane), and the blocks b0 .. b1 of this thread's warp (K a warp). */
struct fzk_wchunk {
  uint64_t c;
  uint32_t cb, raw, n, nb, pb, K, b0, b1;
  unsigned lane, warp;
};

template <int WB>
__device__ __forceinline__ fzk_wchunk fzk_wchunk_at(const fzk_desc &d, uint64_t c) {
  fzk_wchunk k;
  const uint32_t cb = d.cb;
  k.c = c;
  k.cb = cb;
  k.raw = (uint32_t)(d.raw_bytes - c * cb < cb ? d.raw_bytes - c * cb : cb);
  k.n = k.raw / WB;
  k.nb = (k.n + 31) / 32;
  k.pb = (k.n + 7) / 8;
  k.lane = threadIdx.x & 31;
  k.warp = threadIdx.x >> 5;
  k.K = (k.nb + FZK_NW - 1) / FZK_NW;
  k.b0 = k.warp * k.K < k.nb ? k.warp * k.K : k.nb;
  k.b1 = k.b0 + k.K < k.nb ? k.b0 + k.K : k.nb;
  return k;
}

/* The chain's stages as they run: the quantizer kind qk (quant: any),
 * the map (nega: negabinary, else zigzag); diff: the words are
 * differences (the diff stage's, or bitpack's own); ddiff: bitpack's
 * differences are of the diff stage's words. */
struct fzk_wflags {
  int qk;
  bool quant, nega, diff, ddiff;
};

template <int QK, int CK, int DIFF, int NEGA>
__device__ __forceinline__ fzk_wflags fzk_wflags_of(const fzk_desc &d) {
  constexpr bool bp = CK == FZK_C32_BITPACK;
  fzk_wflags f;
  f.qk = fzk_c32_qk<QK>(d);
  f.quant = f.qk != FZK_Q_NONE;
  f.nega = fzk_c32_flag<NEGA>(d.k32nega);
  const bool dst = fzk_c32_flag<DIFF>(d.k32diff);
  f.diff = bp || dst;
  f.ddiff = bp && dst;
  return f;
}

/* The encoder's per-warp totals: lane k's block b0 + k (its outlier bits,
 * and outliers << 16 | 4 * bit width, and the exclusive sum of the
 * latter over the warp); the block's total and the sum of the warps
 * before (tot, base). */
struct fzk_enc_sums {
  uint32_t my_fl, my_info, my_off, tot, base;
};

/* The encoder's rze state (fzk_enc_rze) besides each level's bitmap and
 * length: the thread's share of levels 1 and 2, and the coded length. */
struct fzk_enc_lv {
  uint32_t rank1, v0, v1, pos1, r2, q0, q1, kept1, total;
};

/* Pass 1 of the encoder: words, residuals, outliers; bitpack planes packed
 * per warp (the warp's blocks' planes in order from s.a + 32 WB b0 to
 * s.a + wst, the value returned), the words' bytes, or the shuffled
 * stream's planes.  Each block's outlier bits and bit width go to sum (in
 * s.res, unused until the chunk is assembled).  Built for whole chunks of
 * whole steps of W::STEP blocks (every chunk but maybe the last) without
 * the bounds checks, and for any chunk; each with the quantizer on, or
 * passing words through (a step of 0). */
template <int WB, int QK, int CK>
__device__ __forceinline__ uint32_t
fzk_enc_words(typename fzk_word<WB>::E &s, const typename fzk_word<WB>::T *g, const fzk_wchunk &k,
              const fzk_wflags &f, const fzk_qparams &q, bool qon, const fzk_tp &tp, uint32_t ps,
              bool whole) {
  typedef fzk_word<WB> W;
  typedef typename W::T T;
  typedef typename W::S S;
  constexpr bool bp = CK == FZK_C32_BITPACK, wd = CK == FZK_C32_RZE;
  const uint32_t b0 = k.b0, b1 = k.b1, n = k.n, pb = k.pb;
  const unsigned lane = k.lane;
  const bool nega = f.nega, diff = f.diff, ddiff = f.ddiff;
  /* carry: the word before the block, carry2 the diff stage's word before
   * it when bitpack codes the differences of those. */
  T carry = 0, carry2 = 0;
  uint32_t wst = 32 * WB * b0;
  uint2 *sum = (uint2 *)s.res;
  if (diff && b0 > 0 && b0 < k.nb) {
    T v = g[32 * b0 - 1];
    if (qon)
      W::q_any(f.qk, v, q, &v);
    carry = v;
    if (ddiff) {
      T v2 = g[32 * b0 - 2];
      if (qon)
        W::q_any(f.qk, v2, q, &v2);
      carry2 = nega ? W::nega(v - v2) : W::zigzag(v - v2);
    }
  }
  auto pass1 = [&](auto whole, auto qonc) {
    constexpr bool FULL = decltype(whole)::value;
    constexpr int QON = decltype(qonc)::value;
    constexpr unsigned STEP = W::STEP;
    const T *gp = g + 32 * b0 + lane;
    for (uint32_t b = b0; b < b1; b += STEP, gp += 32 * STEP) {
      T v[STEP];
#pragma unroll
      for (unsigned j = 0; j < STEP; j++) {
        uint32_t i = 32 * (b + j) + lane;
        v[j] = FULL || (b + j < b1 && i < n) ? gp[32 * j] : 0;
      }
#pragma unroll
      for (unsigned j = 0; j < STEP; j++) {
        const uint32_t bb = b + j, i = 32 * bb + lane;
        if (!FULL && bb >= b1)
          break;
        const bool valid = FULL || i < n;
        T code = v[j];
        bool bad = false;
        if (QON != FZK_Q_NONE)
          bad = !W::template q<QON>(v[j], q, &code) && valid;
        if (!valid)
          code = 0;
        T prev = __shfl_up_sync(FZK_FULL, (S)code, 1);
        if (lane == 0)
          prev = carry;
        carry = __shfl_sync(FZK_FULL, (S)code, 31);
        const uint32_t fl = __ballot_sync(FZK_FULL, bad);
        if (bp) {
          /* The block's bit planes, as many as its widest residual needs,
           * go to the warp's run in s.a at once. */
          T y = code, yp = prev;
          if (ddiff) {
            /* One shuffle: lane 0 gets lane 31's word, the carry of the
             * next block. */
            y = nega ? W::nega(code - prev) : W::zigzag(code - prev);
            const T yr = __shfl_sync(FZK_FULL, (S)y, (lane + 31) & 31);
            yp = lane ? yr : carry2;
            carry2 = yr;
          }
          const T r = valid ? W::zigzag(y - yp) : 0;
          const uint32_t nbits = W::put_bitplanes(s.a + wst, r, tp, lane);
          wst += 4 * nbits;
          if (lane == 0)
            sum[bb] = make_uint2(fl, nbits);
        } else {
          T u = code;
          if (diff) {
            const T dd = code - prev;
            u = nega ? W::nega(dd) : W::zigzag(dd);
          }
          if (!valid)
            u = 0;
          if (wd) {
            /* The stream is the words' bytes. */
            *(T *)(s.a + WB * i) = u;
            if (lane == 0)
              sum[bb] = make_uint2(fl, 0);
            continue;
          }
          W::template put_planes<FULL>(s.a, u, tp, lane, ps, pb, bb);
          if (lane == 0)
            sum[bb] = make_uint2(fl, 0);
        }
      }
    }
  };
  fzk_built32<QK>(whole, qon ? f.qk : FZK_Q_NONE, pass1);
  return wst;
}

/* Lane k of each warp takes the summary of the warp's block b0 + k from
 * sum, and the block adds the warps' totals up (in wt[0, FZK_NW)). */
__device__ __forceinline__ fzk_enc_sums fzk_enc_scan(uint32_t *wt, const uint2 *sum,
                                                     const fzk_wchunk &k) {
  fzk_enc_sums r;
  r.my_fl = 0;
  r.my_info = 0;
  __syncwarp();
  if (k.lane < k.b1 - k.b0) {
    const uint2 e = sum[k.b0 + k.lane];
    r.my_fl = e.x;
    r.my_info = (uint32_t)__popc(e.x) << 16 | 4u * e.y;
  }
  {
    const uint32_t inc = fzk_warp_incl(r.my_info);
    r.my_off = inc - r.my_info;
    if (k.lane == 31)
      wt[k.warp] = inc;
  }
  __syncthreads();
  r.tot = 0;
  r.base = 0;
  for (unsigned w = 0; w < FZK_NW; w++) {
    uint32_t t = wt[w];
    r.base += w < k.warp ? t : 0;
    r.tot += t;
  }
  return r;
}

/* The coded chunk's side list and bitpack's part, at res (s.res + shift):
 * the outlier count (a varint of vl bytes), bitpack's bit widths and the
 * warp's planes (word aligned: see shift), the outliers of the warp's
 * blocks that have any (u16 indices, then the WB-byte values). */
template <int WB, int CK, class E>
__device__ __forceinline__ void
fzk_enc_side(E &s, uint8_t *res, uint32_t shift, const typename fzk_word<WB>::T *g,
             const fzk_wchunk &k, bool quant, const fzk_enc_sums &z, uint32_t m, uint32_t vl,
             uint32_t side, uint32_t wst) {
  constexpr bool bp = CK == FZK_C32_BITPACK;
  const uint32_t b0 = k.b0, lane = k.lane;
  if (quant && threadIdx.x == 0) {
    uint32_t v = m;
    for (uint32_t j = 0; j < vl; j++, v >>= 7)
      res[j] = (uint8_t)((v & 0x7f) | (j + 1 < vl ? 0x80 : 0));
  }
  if (bp) {
    if (lane < k.b1 - b0)
      res[side + b0 + lane] = (uint8_t)((z.my_info & 0xffffu) >> 2);
    const uint32_t nw = (wst - 32 * WB * b0) / 4;
    uint32_t *dst = (uint32_t *)(res + side + k.nb + (z.base & 0xffffu));
    const uint32_t *src = (const uint32_t *)(s.a + 32 * WB * b0);
    for (uint32_t j = lane; j < nw; j += 32)
      dst[j] = src[j];
  }
  if (quant) {
    for (uint32_t pend = __ballot_sync(FZK_FULL, z.my_fl != 0); pend; pend &= pend - 1) {
      const unsigned j = __ffs(pend) - 1;
      const uint32_t fl = __shfl_sync(FZK_FULL, z.my_fl, j);
      const uint32_t o = z.base + __shfl_sync(FZK_FULL, z.my_off, j), i = 32 * (b0 + j) + lane;
      if ((fl >> lane) & 1u) {
        const uint32_t r = (o >> 16) + __popc(fl & ((1u << lane) - 1u));
        res[vl + 2 * r] = (uint8_t)i;
        res[vl + 2 * r + 1] = (uint8_t)(i >> 8);
        /* From the aligned base: res is shifted. */
        fzk_word<WB>::put_value(s.res, shift + vl + 2 * m + WB * r, g[i]);
      }
    }
  }
}

/* The rze levels of the coded chunk at res, after the side list: the top
 * level's bitmap and the kept bytes of levels L .. 3 by warp 0, those of
 * level 2 and of level 1 by every thread, each its share. */
template <int CK, class E>
__device__ __forceinline__ void
fzk_enc_levels(E &s, uint8_t *res, uint32_t side, unsigned L,
               const uint32_t (&lens)[FZE_RZE_MAX_LEVELS + 1],
               uint8_t *const (&bms)[FZE_RZE_MAX_LEVELS + 1], const fzk_enc_lv &z, uint32_t pb,
               uint32_t ps, unsigned warp, unsigned lane) {
  constexpr bool wd = CK == FZK_C32_RZE;
  if (warp == 0) {
    uint32_t pos = side + lens[L];
    for (uint32_t j = lane; j < lens[L]; j += 32)
      res[side + j] = bms[L][j];
    for (unsigned l = L; l >= 3; l--) {
      fzk_wrze_scatter(bms[l - 1], lens[l - 1], bms[l], res + pos);
      pos += s.wt[FZK_WT_LEVELS + l];
    }
  }
  if (L >= 2) {
    uint32_t pos2 = side + lens[L];
    for (unsigned l = 3; l <= L; l++)
      pos2 += s.wt[FZK_WT_LEVELS + l];
    uint8_t *dst2 = res + pos2 + z.r2;
    for (uint32_t j = z.q0; j < z.q1; j++) {
      uint32_t mk = bms[2][j];
      while (mk) {
        unsigned b = __ffs(mk) - 1;
        mk &= mk - 1;
        *dst2++ = bms[1][8 * j + b];
      }
    }
  }
  uint8_t *dst = res + z.pos1 + z.rank1;
  for (uint32_t v = z.v0; v < z.v1; v++) {
    uint4 qv = *(const uint4 *)(s.a + (wd ? 16 * v : fzk_plane_vec(v, pb, ps)));
    uint32_t wv[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
    for (unsigned j = 0; j < 4; j++) {
#pragma unroll
      for (unsigned e = 0; e < 4; e++) {
        uint32_t byte = (wv[j] >> (8 * e)) & 0xffu;
        if (byte)
          *dst++ = (uint8_t)byte;
      }
    }
  }
}

/* Place the chunk of size bytes at buf + o: the last CW warps checksum it
 * (their slice tables take the place of the stream a, which is done with)
 * while warp 0 finds its offset by the look-back and the other PW warps
 * then copy it out in 4-byte aligned words.  The two groups meet at no
 * barrier again.  Nothing is written at or beyond out_cap. */
template <unsigned CW>
__device__ __forceinline__ void
fzk_enc_place(uint8_t *a, uint32_t *wt, const uint8_t *buf, uint32_t o, uint32_t size,
              const fzk_desc &d, uint64_t c, uint8_t *__restrict__ d_out, uint64_t out_cap,
              uint64_t header_len, uint64_t table_off, uint32_t *__restrict__ d_crcs,
              fzk_u64 *__restrict__ lb, const uint32_t *__restrict__ d_tab) {
  constexpr unsigned PW = FZK_NW - CW;
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (warp >= PW) {
    const unsigned gt = threadIdx.x - 32 * PW;
    uint32_t *T = (uint32_t *)a;
    for (unsigned i = gt; i < 256; i += 32 * CW)
      ((uint4 *)T)[i] = ((const uint4 *)d_tab)[i];
    if constexpr (CW == 1)
      __syncwarp();
    else
      fzk_bar_sync(1, 32 * CW);
    fzk_crc_group_xor<CW>(buf, o, size, T, d_tab, d_crcs + c, gt);
    return;
  }
  if (warp == 0) {
    const uint64_t off = fzk_lookback(lb, c, size);
    if (lane == 0) {
      wt[FZK_WT_OFF] = (uint32_t)off;
      wt[FZK_WT_OFF + 1] = (uint32_t)(off >> 32);
    }
  }
  fzk_bar_sync(2, 32 * PW);
  const uint64_t off = wt[FZK_WT_OFF] | (uint64_t)wt[FZK_WT_OFF + 1] << 32;
  const uint64_t at = header_len + off;
  const uint64_t room = at < out_cap ? out_cap - at : 0;
  const uint32_t lim = size < room ? size : (uint32_t)room;
  uint8_t *dp = d_out + at;
  uint32_t hd = (uint32_t)((4 - ((uintptr_t)dp & 3)) & 3);
  if (hd > lim)
    hd = lim;
  const uint32_t nw = (lim - hd) / 4;
  if (threadIdx.x < hd)
    dp[threadIdx.x] = buf[o + threadIdx.x];
  for (uint32_t j = threadIdx.x; j < nw; j += 32 * PW)
    ((uint32_t *)(dp + hd))[j] = fzk_ld32u(buf, o + hd + 4 * j);
  for (uint32_t i = hd + 4 * nw + threadIdx.x; i < lim; i += 32 * PW)
    dp[i] = buf[o + i];
  if (threadIdx.x == 0) {
    d_out[table_off + 2 * c] = (uint8_t)size;
    d_out[table_off + 2 * c + 1] = (uint8_t)(size >> 8);
    if (c + 1 == d.nchunks)
      lb[d.nchunks] = off + size;
  }
}

/* One block codes one chunk of WB-byte words (the chunk of its ticket, so
 * that every chunk before it is already running), places it in the
 * archive at the offset the look-back gives, writes its table entry and
 * its CRC-32C to d_crcs, and the last chunk leaves the payload's length in
 * lb[nchunks].  lb holds nchunks + 2 words, zero at launch; the last is
 * the ticket counter.  Nothing is written at or beyond out_cap. */
template <int WB, int QK, int CK, int DIFF, int NEGA, int LEV>
__device__ __forceinline__ void
fzk_enc_body(const fzk_desc &d, const uint8_t *__restrict__ d_in,
             const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out, uint64_t out_cap,
             uint64_t header_len, uint64_t table_off, uint32_t *__restrict__ d_crcs,
             fzk_u64 *__restrict__ lb, const uint32_t *__restrict__ d_tab) {
  typedef fzk_word<WB> W;
  typedef typename W::T T;
  constexpr bool bp = CK == FZK_C32_BITPACK, wd = CK == FZK_C32_RZE;
  extern __shared__ __align__(16) uint8_t fzk_shw[];
  typename W::E s = W::carve_e(d, fzk_shw);
  if (threadIdx.x == 0)
    s.wt[FZK_WT_TICKET] = atomicAdd((unsigned *)(lb + d.nchunks + 1), 1u);
  __syncthreads();
  const fzk_wchunk k = fzk_wchunk_at<WB>(d, s.wt[FZK_WT_TICKET]);
  const uint64_t c = k.c;
  const T *g = (const T *)(d_in + c * d.cb);
  const fzk_wflags f = fzk_wflags_of<QK, CK, DIFF, NEGA>(d);
  const bool quant = f.quant;
  const fzk_tp tp = fzk_tp_init();
  fzk_qparams q = {0, 0, 0};
  if (quant) {
    /* Volatile, so that they are loaded once and kept in registers: the
     * compiler would rather load them again for every block. */
    const volatile fzk_qparams *vq = d_qp;
    q.eb_abs = vq->eb_abs;
    q.step = vq->step;
    q.inv = vq->inv;
  }
  const bool qon = quant && q.step != 0;

  /* Pass 1, then the warps' totals. */
  const uint32_t ps = fzk_plane_stride(k.pb);
  const uint32_t wst = fzk_enc_words<WB, QK, CK>(s, g, k, f, q, qon, tp, ps,
                                                   k.raw == d.cb && k.K % W::STEP == 0);
  const fzk_enc_sums z = fzk_enc_scan(s.wt, (const uint2 *)s.res, k);
  const uint32_t m = z.tot >> 16, vl = quant ? fzk_vlen(m) : 0;
  const uint32_t side = quant ? vl + (2 + WB) * m : 0;

  /* rze of the stream (the shuffled one, or the words' bytes, zero after
   * the last up to the next 16): level 1 and 2 by the block, the rest by
   * warp 0. */
  const uint32_t len0 = wd ? WB * k.n : 8 * WB * k.pb;
  const unsigned L = fzk_c32_lev<LEV>(d);
  uint32_t lens[FZE_RZE_MAX_LEVELS + 1];
  uint8_t *bms[FZE_RZE_MAX_LEVELS + 1];
  fzk_enc_lv lv;
  lv.rank1 = lv.v0 = lv.v1 = lv.pos1 = lv.r2 = lv.q0 = lv.q1 = lv.kept1 = 0;
  fzk_enc_rze<CK>(s, L, len0, side, k.nb, z.tot, k.pb, ps, k.warp, k.lane, lens, bms, lv.rank1, lv.v0, lv.v1, lv.pos1, lv.r2, lv.q0, lv.q1, lv.kept1, lv.total);

  /* The coded chunk, or the chunk as it is when that is no shorter, to
   * s.res + shift, chosen so that the bit planes of bitpack start on a
   * word. */
  const bool fallback = lv.total >= k.raw;
  const uint32_t size = fallback ? k.raw : lv.total;
  if (threadIdx.x == 0)
    fzk_lb_put(lb, c, (c == 0 ? FZK_LB_INCL : FZK_LB_AGG) | size);
  const uint32_t shift = bp && !fallback ? (0u - (side + k.nb)) & 3u : 0u;
  uint8_t *res = s.res + shift;
  if (!fallback) {
    fzk_enc_side<WB, CK>(s, res, shift, g, k, quant, z, m, vl, side, wst);
    if (!bp)
      fzk_enc_levels<CK>(s, res, side, L, lens, bms, lv, k.pb, ps, k.warp, k.lane);
  } else {
    const uint32_t *g32 = (const uint32_t *)g;
    for (uint32_t v = threadIdx.x; v < WB / 4 * k.n; v += FZK_NT)
      ((uint32_t *)s.res)[v] = g32[v];
  }
  __syncthreads();
  fzk_enc_place<W::ENC_CRCW>(s.a, s.wt, s.res - 16, 16 + shift, size, d, c, d_out, out_cap,
                             header_len, table_off, d_crcs, lb, d_tab);
}

/* The kernels' entry on 4-byte words. */
template <int QK, int CK, int DIFF, int NEGA, int LEV>
__device__ __forceinline__ void
fzk_enc32_body(const fzk_desc &d, const uint8_t *__restrict__ d_in,
               const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out,
               uint64_t out_cap, uint64_t header_len, uint64_t table_off,
               uint32_t *__restrict__ d_crcs, fzk_u64 *__restrict__ lb,
               const uint32_t *__restrict__ d_tab) {
  FZK_C32_CHECK(QK, CK, DIFF, NEGA, LEV);
  fzk_enc_body<4, QK, CK, DIFF, NEGA, LEV>(d, d_in, d_qp, d_out, out_cap, header_len, table_off,
                                           d_crcs, lb, d_tab);
}

/* ---- decoder ---- */

/* Where word w of the level-1 bitmap lives in fzk_d32.r1: swizzled within
 * groups of 16 entries, because the lanes of a warp read words pb / 32
 * apart (one per plane), which would otherwise share a bank. */
__device__ __forceinline__ uint32_t fzk_r1_at(uint32_t w) { return w ^ ((w >> 4) & 15u); }

/* The __byte_perm selector that moves the low bytes of a word, in order, to
 * the byte positions set in the 4-bit mask m and zeroes the rest (selector
 * 4 picks a byte of the zero second operand). */
__device__ __forceinline__ uint32_t fzk_expand_sel(uint32_t m) {
  uint32_t sel = 0, k = 0;
#pragma unroll
  for (unsigned b = 0; b < 4; b++) {
    uint32_t on = (m >> b) & 1u;
    sel |= (on ? k : 4u) << (4 * b);
    k += on;
  }
  return sel;
}

__device__ __forceinline__ void fzk_put32(uint8_t *g, uint32_t i, uint32_t v, bool al) {
  if (al) {
    ((uint32_t *)g)[i] = v;
  } else {
    for (unsigned k = 0; k < 4; k++)
      g[4 * i + k] = (uint8_t)(v >> (8 * k));
  }
}

/* fzk_transpose32 with the block's words in the lanes in another order:
 * when lane p holds plane rotl5(p) (the lane index rotated left by one bit
 * in 5), lane l gets word rotl5(l) of the block, that is word 2l for
 * l < 16 and 2(l - 16) + 1 above.  Each step pairs lane bit a with bit
 * a + 1 (mod 5) of the bit position where fzk_transpose32 pairs it with
 * bit a, at the same cost (a rotate, a shuffle and a select).  Then one
 * shuffle over 16 lanes of two such blocks leaves lane l with words 2l
 * and 2l + 1 of the 64, and a running sum over both blocks is one warp
 * scan instead of two. */
__device__ __forceinline__ fzk_tp fzk_tp_pair_init() {
  const unsigned lane = threadIdx.x & 31;
  /* Step k (lanes 16 >> k apart): the bits of position bit c(k) = 0, 4,
   * 3, 2, 1 clear, and 2^c(k). */
  const uint32_t masks[5] = {0x55555555u, 0x0000ffffu, 0x00ff00ffu, 0x0f0f0f0fu, 0x33333333u};
  const uint32_t sh[5] = {1u, 16u, 8u, 4u, 2u};
  fzk_tp t;
#pragma unroll
  for (int k = 0; k < 5; k++) {
    const bool up = (lane & (16u >> k)) != 0;
    t.keep[k] = up ? ~masks[k] : masks[k];
    t.rot[k] = up ? sh[k] : 32u - sh[k]; /* 16 either way for k = 1 */
  }
  return t;
}

__device__ __forceinline__ uint32_t fzk_transpose32_pair(uint32_t x, const fzk_tp &t) {
#pragma unroll
  for (int k = 0; k < 5; k++) {
    const uint32_t rt = k == 1 ? 16u : t.rot[k];
    const uint32_t o = __shfl_xor_sync(FZK_FULL, __funnelshift_l(x, x, rt), 16u >> k);
    x = fzk_blend(x, o, t.keep[k]);
  }
  return x;
}

/* The decoder's phase that reads the side list (stage_quant.c) at the
 * front of the coded chunk cc (len bytes) of n words of WB bytes: every
 * thread alike parses the outliers' count m (vl: its varint's bytes) and
 * the list's length side; the block sets the outliers' bitmap s.obm (nb
 * words), flagging FZK_WT_BAD unless the indices ascend strictly below n.
 * False, with *d_status set, for a list that cannot be parsed. */
template <int WB, class S>
__device__ __forceinline__ bool fzk_dec_side(S &s, const uint8_t *cc, uint32_t len, uint32_t n,
                                             uint32_t nb, const fzk_qparams &q,
                                             uint32_t *__restrict__ d_status, uint32_t &side,
                                             uint32_t &m, uint32_t &vl) {
  uint32_t v = 0, k = 0;
  bool ok = false;
  for (unsigned shift = 0; shift <= 28; shift += 7) {
    if (k >= len)
      break;
    uint8_t byte = cc[k++];
    v |= (uint32_t)(byte & 0x7f) << shift;
    if (!(byte & 0x80)) {
      ok = true;
      break;
    }
  }
  if (!ok || v > n || (len - k) / (2 + WB) < v || (q.step == 0 && v != 0)) {
    if (threadIdx.x == 0)
      atomicOr(d_status, 1u);
    return false;
  }
  m = v;
  vl = k;
  side = k + (2 + WB) * v;
  /* Strictly ascending indices below n; the outliers' bitmap. */
  if (m) {
    for (uint32_t b = threadIdx.x; b < nb; b += FZK_NT)
      s.obm[b] = 0;
    __syncthreads();
    for (uint32_t j = threadIdx.x; j < m; j += FZK_NT) {
      uint32_t i = cc[vl + 2 * j] | (uint32_t)cc[vl + 2 * j + 1] << 8;
      uint32_t p = j ? (cc[vl + 2 * j - 2] | (uint32_t)cc[vl + 2 * j - 1] << 8) : 0;
      if ((j && i <= p) || i >= n)
        atomicOr(&s.wt[FZK_WT_BAD], 1u);
      else
        atomicOr(&s.obm[i >> 5], 1u << (i & 31));
    }
  }
  return true;
}

/* The decoder's bitpack phase, for words of WB bytes: lane k of a warp
 * takes the bit width of the warp's block b0 + k, and the warp's planes
 * start at wpos0.  False, with *d_status set, for a corrupt chunk. */
template <int WB, class S>
__device__ __forceinline__ bool fzk_dec_widths(S &s, const uint8_t *in, uint32_t st, uint32_t clen,
                                               uint32_t nb, uint32_t K, uint32_t b0, uint32_t b1,
                                               unsigned warp, unsigned lane,
                                               uint32_t *__restrict__ d_status, uint32_t &my_nb,
                                               uint32_t &wpos0) {
  if (clen < nb) {
    if (threadIdx.x == 0)
      atomicOr(d_status, 1u);
    return false;
  }
  if (lane < K && b0 + lane < b1) {
    my_nb = in[b0 + lane];
    if (my_nb > 8 * WB)
      atomicOr(&s.wt[FZK_WT_BAD], 1u);
  }
  const uint32_t inc = fzk_warp_incl(4 * my_nb);
  if (lane == 31)
    s.wt[warp] = inc;
  __syncthreads();
  uint32_t tot = 0, base = 0;
  for (unsigned w = 0; w < FZK_NW; w++) {
    tot += s.wt[w];
    base += w < warp ? s.wt[w] : 0;
  }
  if (s.wt[FZK_WT_BAD] || nb + tot != clen) {
    if (threadIdx.x == 0)
      atomicOr(d_status, 1u);
    return false;
  }
  wpos0 = st + nb + base;
  return true;
}

/* The decoder's rze phase, for words of WB bytes: warp 0 restores the
 * levels above 2, the block level 2 and level 1's bitmap words (s.r1),
 * each with its rank among the kept bytes within its warp; wbase is the
 * warp's base rank, ko where the kept bytes start, w1 the bitmap's words
 * and wsh the shift from a bitmap word to its warp.  False, with
 * *d_status set, for a corrupt chunk. */
template <int WB, int CK, int LEV, class S>
__device__ __forceinline__ bool
fzk_dec_rze(S &s, const fzk_desc &d, const uint8_t *in, uint32_t st, uint32_t clen, uint32_t n,
            uint32_t pb, uint32_t cb, unsigned warp, unsigned lane, uint32_t *__restrict__ d_status,
            uint32_t &w1, uint32_t &wsh, uint32_t &wbase, uint32_t &ko) {
  constexpr bool wd = CK == FZK_C32_RZE;
  const unsigned L = fzk_c32_lev<LEV>(d);
  uint32_t lens[FZE_RZE_MAX_LEVELS + 1];
  lens[0] = wd ? WB * n : 8 * WB * pb;
  for (unsigned l = 1; l <= L; l++)
    lens[l] = (lens[l - 1] + 7) / 8;
  if (clen < lens[L] || !fzk_tail_ok32(in, lens[L - 1])) {
    if (threadIdx.x == 0)
      atomicOr(d_status, 1u);
    return false;
  }
  /* Thread t owns bytes [q0, q1) of the level-2 bitmap, a power of two of
   * them, and so the level-1 bitmap words [2 q0, 2 q1) (of w1): the warp
   * that owns word w is w >> wsh. */
  const uint32_t nq = (lens[1] + 7) / 8;
  w1 = (lens[1] + 3) / 4;
  unsigned qsh = 0;
  while ((uint32_t)FZK_NT << qsh < nq)
    qsh++;
  const uint32_t q0 = threadIdx.x << qsh < nq ? threadIdx.x << qsh : nq;
  const uint32_t q1 = q0 + (1u << qsh) < nq ? q0 + (1u << qsh) : nq;
  wsh = 6 + qsh;
  if (warp == 0) {
    const uint8_t *bm = in;
    uint32_t pos = lens[L];
    bool bad = false;
    for (unsigned l = L; l >= 3; l--) {
      uint32_t cnt = fzk_wpopc(bm, lens[l]);
      if (cnt > clen - pos) {
        bad = true;
        break;
      }
      uint8_t *dst = s.tb2 + (l & 1) * a16(cb / 64 + 16);
      fzk_wrze_restore(bm, in + pos, lens[l - 1], dst);
      __syncwarp();
      if (!fzk_tail_ok32(dst, lens[l - 2])) {
        bad = true;
        break;
      }
      pos += cnt;
      bm = dst;
    }
    /* The level-2 kept bytes of each warp's share of the bitmap, so that
     * the ranks need no block scan of their own. */
    if (!bad && L >= 2) {
      for (unsigned w = 0; w < FZK_NW; w++) {
        uint32_t cnt = 0;
        for (uint32_t j = ((32u * w) << qsh) + lane; j < ((32u * w + 32u) << qsh) && j < nq;
             j += 32)
          cnt += __popc(bm[j]);
        cnt = __reduce_add_sync(FZK_FULL, cnt);
        if (lane == 0)
          s.wt[w] = cnt;
      }
    }
    if (lane == 0) {
      s.wt[FZK_WT_POS] = pos;
      if (bad)
        atomicOr(&s.wt[FZK_WT_BAD], 1u);
    }
  }
  __syncthreads();
  if (s.wt[FZK_WT_BAD]) {
    if (threadIdx.x == 0)
      atomicOr(d_status, 1u);
    return false;
  }
  uint32_t pos1 = s.wt[FZK_WT_POS];
  /* Level 2 (when there is one) restores this thread's words of the
   * level-1 bitmap from its bytes of the level-2 bitmap. */
  const uint8_t *bm2 = L == 2 ? in : s.tb2 + a16(cb / 64 + 16);
  const uint8_t *k2 = in + pos1;
  uint32_t r2 = 0, prev = 0;
  if (L >= 2) {
    uint32_t cnt2 = 0;
    for (uint32_t j = q0; j < q1; j++)
      cnt2 += __popc(bm2[j]);
    uint32_t tot2 = 0;
    r2 = fzk_warp_incl(cnt2) - cnt2;
    for (unsigned w = 0; w < FZK_NW; w++) {
      tot2 += s.wt[w];
      r2 += w < warp ? s.wt[w] : 0;
    }
    if (tot2 > clen - pos1) {
      if (threadIdx.x == 0)
        atomicOr(d_status, 1u);
      return false;
    }
    prev = r2 ? k2[r2 - 1] : 0;
    pos1 += tot2;
  }
  uint32_t cnt1 = 0;
  for (uint32_t j = q0; j < q1; j++) {
    uint32_t lo = 0, hi = 0;
    if (L >= 2) {
      /* Bits past the level-1 bitmap are zero (checked above). */
      uint32_t mk = bm2[j];
#pragma unroll
      for (unsigned b = 0; b < 8; b++) {
        if ((mk >> b) & 1)
          prev = k2[r2++];
        if (b < 4)
          lo |= prev << (8 * b);
        else
          hi |= prev << (8 * (b - 4));
      }
    } else {
      lo = fzk_ld32u(s.c, st + 8 * j);
      if (2 * j + 1 < w1)
        hi = fzk_ld32u(s.c, st + 8 * j + 4);
    }
    if (8 * j + 8 > lens[1]) {
      /* The bitmap of the words' bytes may end inside a word: what
       * follows is kept bytes (level 1) or repeats (level 2). */
      const uint32_t nby = lens[1] - 8 * j;
      lo &= nby >= 4 ? FZK_FULL : (1u << (8 * nby)) - 1;
      hi &= nby <= 4 ? 0u : (1u << (8 * (nby - 4))) - 1;
    }
    s.r1[fzk_r1_at(2 * j)].x = lo;
    cnt1 += __popc(lo);
    if (2 * j + 1 < w1) {
      s.r1[fzk_r1_at(2 * j + 1)].x = hi;
      cnt1 += __popc(hi);
    }
  }
  /* Each word's rank among the kept bytes of level 1, within its warp;
   * the warps' bases are added from a shuffle when the words are read. */
  const uint32_t inc1 = fzk_warp_incl(cnt1);
  uint32_t r = inc1 - cnt1;
  for (uint32_t w = 2 * q0; w < 2 * q1 && w < w1; w++) {
    uint2 *e = &s.r1[fzk_r1_at(w)];
    e->y = r;
    r += __popc(e->x);
  }
  if (lane == 31)
    s.wt[FZK_WT_SUMS3 + warp] = inc1;
  __syncthreads();
  const uint32_t t1 = lane < FZK_NW ? s.wt[FZK_WT_SUMS3 + lane] : 0, inc = fzk_warp_incl(t1);
  wbase = inc - t1;
  if (pos1 + __shfl_sync(FZK_FULL, inc, FZK_NW - 1) != clen) {
    if (threadIdx.x == 0)
      atomicOr(d_status, 1u);
    return false;
  }
  ko = st + pos1;
  return true;
}

/* The decoder's chunk once opened (fzk_dec_open): its coded length and
 * where it starts in s.c (o); the side list's length, outlier count and
 * the varint's bytes; for rze the warp's base rank (wbase), where the
 * kept bytes start (ko), the shift from a level-1 bitmap word to its warp
 * and the bitmap's words (w1); for bitpack, lane k's bit width of the
 * warp's block b0 + k (my_nb) and where the warp's planes start. */
struct fzk_dec_chunk {
  uint32_t len, o, side, m, vl;
  uint32_t wbase, ko, wsh, w1;
  uint32_t my_nb, wpos0;
};

/* The decoder's checksum of the coded chunk, by the last CW warps, each
 * once it has done its share (the chunk and the tables stay in place). */
template <unsigned CW, class D>
__device__ __forceinline__ void fzk_dec_crc(D &s, const fzk_dec_chunk &h,
                                            const uint32_t *__restrict__ d_tab,
                                            uint32_t *__restrict__ d_crc, unsigned warp) {
  if (warp >= FZK_NW - CW)
    fzk_crc_group_xor<CW>(s.c, h.o, h.len, s.T, d_tab, d_crc, threadIdx.x - 32 * (FZK_NW - CW));
}

/* The decoder's first phases on a chunk of WB-byte words: refuse a chunk
 * outside the payload (the host validated the table; this is checked
 * again before any byte of it is read), load it and the CRC tables, copy
 * a chunk stored as it is straight out, read the side list.  False
 * when the block is done: the
 * chunk was stored as it is, or is corrupt (*d_status set). */
template <int WB, int CK, int LEV, class D>
__device__ __forceinline__ bool
fzk_dec_open(D &s, const fzk_desc &d, const fzk_wchunk &k, bool quant, const fzk_qparams &q,
             const uint8_t *__restrict__ d_pay, uint64_t pay_len,
             const uint64_t *__restrict__ d_offs, const uint8_t *__restrict__ d_sizes16,
             uint8_t *gout, int out_vec, uint32_t *__restrict__ d_status,
             uint32_t *__restrict__ d_crcs, const uint32_t *__restrict__ d_tab,
             fzk_dec_chunk &h) {
  constexpr bool bp = CK == FZK_C32_BITPACK;
  const uint64_t c = k.c;
  h.len = (uint32_t)d_sizes16[2 * c] | (uint32_t)d_sizes16[2 * c + 1] << 8;
  const uint64_t off = d_offs[c];
  if (h.len == 0 || h.len > k.raw || off > pay_len || h.len > pay_len - off) {
    if (threadIdx.x == 0)
      atomicOr(d_status, 1u);
    return false;
  }
  fzk_load_slices(s.T, d_tab);
  if (threadIdx.x < FZK_WT_SEL)
    s.wt[threadIdx.x] = 0;
  else if (!bp && threadIdx.x < FZK_WT_SEL + 16)
    s.wt[threadIdx.x] = fzk_expand_sel(threadIdx.x - FZK_WT_SEL);
  h.o = fzk_load_chunk(s.c, d_pay + off, h.len);
  __syncthreads();
  if (h.len == k.raw) {
    const bool al = out_vec != 0;
    for (uint32_t i = threadIdx.x; i < WB / 4 * k.n; i += FZK_NT)
      fzk_put32(gout, i, fzk_ld32u(s.c, h.o + 4 * i), al);
    fzk_dec_crc<fzk_word<WB>::DEC_CRCW>(s, h, d_tab, d_crcs + c, k.warp);
    return false;
  }
  /* The side list (stage_quant.c), parsed by every thread alike. */
  h.side = h.m = h.vl = 0;
  if (quant && !fzk_dec_side<WB>(s, s.c + h.o, h.len, k.n, k.nb, q, d_status, h.side, h.m, h.vl))
    return false;
  return true;
}

/* The decoder's phase after the side list: bitpack's widths or rze's
 * levels.  False, with *d_status set, for a corrupt chunk. */
template <int WB, int CK, int LEV, class D>
__device__ __forceinline__ bool fzk_dec_coder(D &s, const fzk_desc &d, const fzk_wchunk &k,
                                              uint32_t *__restrict__ d_status, fzk_dec_chunk &h) {
  const uint32_t st = h.o + h.side, clen = h.len - h.side;
  const uint8_t *in = s.c + st;
  h.wbase = h.ko = h.wsh = h.w1 = h.my_nb = h.wpos0 = 0;
  return CK == FZK_C32_BITPACK
             ? fzk_dec_widths<WB>(s, in, st, clen, k.nb, k.K, k.b0, k.b1, k.warp, k.lane,
                                  d_status, h.my_nb, h.wpos0)
             : fzk_dec_rze<WB, CK, LEV>(s, d, in, st, clen, k.n, k.pb, d.cb, k.warp, k.lane,
                                        d_status, h.w1, h.wsh, h.wbase, h.ko);
}

/* The decoder's sums of each warp's differences, for the running sums
 * across warps (run: the sum of the warps before).  A zigzag difference
 * sum needs no transpose: in a block whose plane p lane p holds, the even
 * words add (u >> 1) and the odd ones subtract (u >> 1) + 1, so plane
 * p >= 1 adds 2^(p-1) times the count of its bits in even words less the
 * count in odd words (plane 0 marks the odd words), and plane 0 subtracts
 * its own count.  Each lane sums its plane's terms; the warp adds them up
 * once.  planes(b, k, whole) gives a block's planes (fzk_dec32_body).
 * The warp's sum goes to s.wt[FZK_WT_SUMS2 + warp], and FZK_WT_BAD2 is
 * flagged where bitpack's padding bits are not zero. */
template <bool FULL, int CK, class P>
__device__ __forceinline__ void fzk_dec32_diffs(fzk_d32 &s, P &planes, uint32_t &wpos,
                                                uint32_t wpos0, const fzk_wchunk &k, bool nega,
                                                const fzk_tp &tp) {
  constexpr bool bp = CK == FZK_C32_BITPACK, wd = CK == FZK_C32_RZE;
  const unsigned lane = k.lane, warp = k.warp;
  bool pad_bad = false;
  uint32_t acc = 0;
  const unsigned sh = lane ? lane - 1 : 0;
  wpos = wpos0;
  for (uint32_t b = k.b0, j = 0; b < k.b1; b++, j++) {
    uint32_t x = planes(b, j, fzk_bool<FULL>());
    if (wd) {
      /* Words, zero past the chunk's last. */
      acc += nega ? fzo_unnega32(x) : fzo_unzigzag32(x);
      continue;
    }
    if (!FULL) {
      const uint32_t rem = k.n - 32 * b;
      const uint32_t vm = rem >= 32 ? FZK_FULL : (1u << rem) - 1;
      pad_bad |= bp && (x & ~vm) != 0;
      x &= vm;
    }
    if (!bp && nega) {
      acc += fzo_unnega32(fzk_transpose32(x, tp));
    } else {
      /* Lane 0 holds the odd marks: its term is -popc(x). */
      const uint32_t odd = __shfl_sync(FZK_FULL, x, 0);
      acc += (uint32_t)(__popc(x & ~odd) - __popc(x & odd)) << sh;
    }
  }
  const uint32_t sum = __reduce_add_sync(FZK_FULL, acc);
  if (pad_bad)
    atomicOr(&s.wt[FZK_WT_BAD2], 1u);
  if (lane == 0)
    s.wt[FZK_WT_SUMS2 + warp] = sum;
}

/* Bitpack after diff: the diff stage's words are the running sums of
 * bitpack's differences, and the words their running sums, which start
 * from the sums of the warps before (run).  So each warp keeps the
 * running sums of its own diff words (in s.e) and their total, and adds
 * the warps' base, returned, once the block knows it.  Two blocks at a
 * time (fzk_transpose32_pair): lane l holds words i = 32b + 2l and i + 1,
 * so each of the two running sums is one warp scan of the pair's sums and
 * one shuffle for its carry per two blocks.  The second block of a warp's
 * odd last one is another warp's, or none: its planes are not read and
 * its words count 0. */
template <bool FULL>
__device__ __forceinline__ uint32_t fzk_dec32_ddiff(fzk_d32 &s, const fzk_wchunk &k,
                                                    const fzk_dec_chunk &h, uint32_t run,
                                                    bool nega) {
  const unsigned lane = k.lane;
  const fzk_tp tq = fzk_tp_pair_init();
  const bool upper = lane >= 16;
  const uint32_t pl = ((lane << 1) | (lane >> 4)) & 31u; /* the plane lane reads */
  uint32_t r = run, pc = 0, wpos = h.wpos0;
  for (uint32_t b = k.b0, j = 0; b < k.b1; b += 2, j += 2) {
    /* A whole chunk (4 to 32 KiB) gives every warp an even K. */
    const bool two = FULL || b + 1 < k.b1;
    uint32_t xa = 0, xb = 0;
    const uint32_t na = __shfl_sync(FZK_FULL, h.my_nb, j);
    if (pl < na)
      xa = fzk_ld32u(s.c, wpos + 4 * pl);
    wpos += 4 * na;
    uint32_t nbb = __shfl_sync(FZK_FULL, h.my_nb, j + 1); /* lane (j + 1) % 32 */
    nbb = two ? nbb : 0u;
    if (pl < nbb)
      xb = fzk_ld32u(s.c, wpos + 4 * pl);
    wpos += 4 * nbb;
    xa = fzk_transpose32_pair(xa, tq);
    xb = fzk_transpose32_pair(xb, tq);
    const uint32_t got = __shfl_xor_sync(FZK_FULL, upper ? xa : xb, 16);
    /* 0 past the chunk's words (their bits were checked zero) and in a
     * second block that is not the warp's (its planes not read). */
    const uint32_t zl = fzo_unzigzag32(upper ? got : xa);
    const uint32_t zh = fzo_unzigzag32(upper ? xb : got);
    const uint32_t xh = fzk_warp_incl(zl + zh) + r, xl = xh - zh;
    r = __shfl_sync(FZK_FULL, xh, 31);
    uint32_t el = nega ? fzo_unnega32(xl) : fzo_unzigzag32(xl);
    uint32_t eh = nega ? fzo_unnega32(xh) : fzo_unzigzag32(xh);
    if (!FULL) {
      /* The warp's words of the pair, from 32b: 1 .. 64. */
      const uint32_t rem = k.n - 32 * b, lim = two || rem < 32 ? rem : 32u;
      el = 2 * lane < lim ? el : 0u;
      eh = 2 * lane + 1 < lim ? eh : 0u;
    }
    const uint32_t ph = fzk_warp_incl(el + eh) + pc;
    pc = __shfl_sync(FZK_FULL, ph, 31);
    if (two || !upper) {
      uint2 v;
      v.x = ph - eh;
      v.y = ph;
      *(uint2 *)(s.e + 32 * b + 2 * lane) = v;
    }
  }
  if (lane == 0)
    s.wt[FZK_WT_SUMS3 + k.warp] = pc;
  __syncthreads();
  uint32_t run2 = 0;
  for (unsigned w = 0; w < k.warp; w++)
    run2 += s.wt[FZK_WT_SUMS3 + w];
  return run2;
}

/* The decoding of a chunk's words once the chunk is open: rze's or
 * bitpack's planes to words, the running sums of the differences, the
 * dequantizer and the outliers (fzk_dec32_words on 4-byte words,
 * fzk_dec64_words in chain64_ops.cuh on 8-byte words). */
template <int QK, int CK>
__device__ __forceinline__ void
fzk_dec32_words(fzk_d32 &s, const fzk_wchunk &k, const fzk_wflags &f, const fzk_dec_chunk &h,
                const fzk_qparams &q, const fzk_tp &tp, uint8_t *gout, int out_vec,
                uint32_t *__restrict__ d_status, uint32_t *__restrict__ d_crcs,
                const uint32_t *__restrict__ d_tab);
struct fzk_d64;
template <int QK, int CK>
__device__ __forceinline__ void
fzk_dec64_words(fzk_d64 &s, const fzk_wchunk &k, const fzk_wflags &f, const fzk_dec_chunk &h,
                const fzk_qparams &q, const fzk_tp &tp, uint8_t *gout, int out_vec,
                uint32_t *__restrict__ d_status, uint32_t *__restrict__ d_crcs,
                const uint32_t *__restrict__ d_tab);

/* One block decodes one chunk of WB-byte words, and its last warps XOR
 * the chunk's CRC-32C into d_crcs (zeroed by the caller; left as it is
 * for a chunk that fails to decode, which sets *d_status anyway), which
 * the caller checks against the archive's payload checksum. */
template <int WB, int QK, int CK, int DIFF, int NEGA, int LEV>
__device__ __forceinline__ void
fzk_dec_body(const fzk_desc &d, const uint8_t *__restrict__ d_pay, uint64_t pay_len,
             const uint64_t *__restrict__ d_offs, const uint8_t *__restrict__ d_sizes16,
             const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out, int out_vec,
             uint32_t *__restrict__ d_status, uint32_t *__restrict__ d_crcs,
             const uint32_t *__restrict__ d_tab) {
  fzk_qparams q;
  if (!fzk_dec_begin(d_qp, d_status, &q))
    return;
  extern __shared__ __align__(16) uint8_t fzk_shw[];
  typename fzk_word<WB>::D s = fzk_word<WB>::carve_d(d, fzk_shw);
  const fzk_wchunk k = fzk_wchunk_at<WB>(d, blockIdx.x);
  uint8_t *gout = d_out + k.c * d.cb;
  const fzk_wflags f = fzk_wflags_of<QK, CK, DIFF, NEGA>(d);
  const fzk_tp tp = fzk_tp_init();
  fzk_dec_chunk h;
  if (!fzk_dec_open<WB, CK, LEV>(s, d, k, f.quant, q, d_pay, pay_len, d_offs, d_sizes16, gout,
                                 out_vec, d_status, d_crcs, d_tab, h) ||
      !fzk_dec_coder<WB, CK, LEV>(s, d, k, d_status, h))
    return;
  if constexpr (WB == 4)
    fzk_dec32_words<QK, CK>(s, k, f, h, q, tp, gout, out_vec, d_status, d_crcs, d_tab);
  else
    fzk_dec64_words<QK, CK>(s, k, f, h, q, tp, gout, out_vec, d_status, d_crcs, d_tab);
}

template <int QK, int CK>
__device__ __forceinline__ void
fzk_dec32_words(fzk_d32 &s, const fzk_wchunk &k, const fzk_wflags &f, const fzk_dec_chunk &h,
                const fzk_qparams &q, const fzk_tp &tp, uint8_t *gout, int out_vec,
                uint32_t *__restrict__ d_status, uint32_t *__restrict__ d_crcs,
                const uint32_t *__restrict__ d_tab) {
  constexpr bool bp = CK == FZK_C32_BITPACK, wd = CK == FZK_C32_RZE;
  const uint32_t n = k.n, pb = k.pb, K = k.K, b0 = k.b0, b1 = k.b1;
  const unsigned lane = k.lane;
  const bool quant = f.quant, nega = f.nega, diff = f.diff, ddiff = f.ddiff;
  const uint32_t m = h.m;
  /* Lane k: the outliers among the words of the warp's block b0 + k
   * (bitpack after diff reads them from s.obm instead: one register fewer
   * through its two running sums). */
  const uint32_t my_obm =
      quant && m && !ddiff && lane < K && b0 + lane < b1 ? s.obm[b0 + lane] : 0;

  /* Words from planes: bitpack planes (in order, from wpos on), or four
   * bytes of each shuffle plane, the latter straight from the kept bytes
   * of rze level 1: bytes lane * pb + 4b .. +3 of the shuffled stream are
   * the bytes of its bitmap nibble, and the kept ones are consecutive from
   * the rank.  For rze on words, the same gives lane's word itself, from
   * bytes 4 (32b + lane) .. +3.  j = b - b0. */
  uint32_t wpos = 0;
  auto planes = [&](uint32_t b, uint32_t j, auto whole) -> uint32_t {
    constexpr bool FULL = decltype(whole)::value;
    uint32_t x = 0;
    if (bp) {
      const uint32_t nbits = __shfl_sync(FZK_FULL, h.my_nb, j);
      if (lane < nbits)
        x = fzk_ld32u(s.c, wpos + 4 * lane);
      wpos += 4 * nbits;
    } else if (wd) {
      const uint32_t wi = 32 * b + lane;
      const bool in = FULL || wi < n;
      const uint32_t w = in ? wi >> 3 : 0, sh = 4 * (wi & 7);
      const uint2 e = s.r1[fzk_r1_at(w)];
      const uint32_t mk = in ? (e.x >> sh) & 15u : 0u;
      const uint32_t rk = e.y + __shfl_sync(FZK_FULL, h.wbase, w >> h.wsh) +
                          __popc(e.x & ((1u << sh) - 1));
      x = __byte_perm(fzk_ld32u(s.c, h.ko + rk), 0, s.wt[FZK_WT_SEL + mk]);
    } else {
      const uint32_t i = lane * pb + 4 * b, w = i >> 5, sh = i & 31;
      const uint2 e = s.r1[fzk_r1_at(w)];
      const uint32_t nx = sh > 28 && w + 1 < pb ? s.r1[fzk_r1_at(w + 1)].x : 0;
      uint32_t mk = __funnelshift_r(e.x, nx, sh) & 15u;
      if (!FULL && 4 * b + 4 > pb) /* the plane ends inside these four bytes */
        mk &= (1u << (pb - 4 * b)) - 1;
      const uint32_t rk = e.y + __shfl_sync(FZK_FULL, h.wbase, w >> h.wsh) +
                          __popc(e.x & ((1u << sh) - 1));
      x = __byte_perm(fzk_ld32u(s.c, h.ko + rk), 0, s.wt[FZK_WT_SEL + mk]);
    }
    return x;
  };

  /* The stored value of outlier word i: its entry in the side list, by
   * bisection of the ascending indices. */
  const uint8_t *cc = s.c + h.o;
  auto outlier = [&](uint32_t i) -> uint32_t {
    uint32_t lo = 0, hi = m;
    while (lo < hi) {
      uint32_t mid = (lo + hi) / 2;
      uint32_t im = cc[h.vl + 2 * mid] | (uint32_t)cc[h.vl + 2 * mid + 1] << 8;
      if (im < i)
        lo = mid + 1;
      else
        hi = mid;
    }
    return fzk_ld32u(s.c, h.o + h.vl + 2 * m + 4 * lo);
  };
  auto crc = [&]() { fzk_dec_crc<FZK_DEC32_CRCW>(s, h, d_tab, d_crcs + k.c, k.warp); };

  /* Built for whole chunks written to an aligned buffer (every chunk but
   * maybe the last), without bounds checks, and for any chunk; each with
   * the quantizer on, or passing words through (a step of 0). */
  auto decode = [&](auto whole, auto qonc) {
    constexpr bool FULL = decltype(whole)::value;
    constexpr int QON = decltype(qonc)::value;
    uint32_t run = 0;
    if (diff) {
      fzk_dec32_diffs<FULL, CK>(s, planes, wpos, h.wpos0, k, nega, tp);
      __syncthreads();
      if (s.wt[FZK_WT_BAD2]) {
        if (threadIdx.x == 0)
          atomicOr(d_status, 1u);
        return;
      }
      for (unsigned w = 0; w < k.warp; w++)
        run += s.wt[FZK_WT_SUMS2 + w];
    }
    const uint32_t run2 = ddiff ? fzk_dec32_ddiff<FULL>(s, k, h, run, nega) : 0u;
    if (ddiff && FULL) {
      /* Whole chunks, to a 16-byte aligned buffer: two words a lane, as
       * the running sums left them. */
      uint2 *gp = (uint2 *)gout + 16 * b0 + lane;
      for (uint32_t b = b0; b < b1; b += 2, gp += 32) {
        const uint32_t i = 32 * b + 2 * lane;
        const uint2 p = *(const uint2 *)(s.e + i);
        const uint32_t fl = quant && m ? s.obm[i >> 5] >> (i & 31) : 0u;
        uint2 v;
        v.x = fzk_dq32<QON>(p.x + run2, q);
        v.y = fzk_dq32<QON>(p.y + run2, q);
        if (fl & 1u)
          v.x = outlier(i);
        if (fl & 2u)
          v.y = outlier(i + 1);
        *gp = v;
      }
      crc();
      return;
    }
    const bool al = out_vec != 0;
    uint32_t *gw = (uint32_t *)gout + 32 * b0 + lane;
    wpos = h.wpos0;
    for (uint32_t b = b0, j = 0; b < b1; b++, j++, gw += 32) {
      const uint32_t i = 32 * b + lane;
      uint32_t code;
      if (ddiff) {
        code = s.e[i] + run2;
      } else {
        uint32_t u = planes(b, j, whole);
        if (!wd)
          u = fzk_transpose32(u, tp);
        code = u;
        if (diff) {
          uint32_t dd = bp ? fzo_unzigzag32(u) : nega ? fzo_unnega32(u) : fzo_unzigzag32(u);
          if (!FULL && i >= n)
            dd = 0;
          code = fzk_warp_incl(dd) + run;
          run = __shfl_sync(FZK_FULL, code, 31);
        }
      }
      const uint32_t fl = !(quant && m) ? 0u
                          : ddiff       ? s.obm[b]
                                        : __shfl_sync(FZK_FULL, my_obm, j);
      if (!FULL && i >= n)
        continue;
      uint32_t val = fzk_dq32<QON>(code, q);
      if ((fl >> lane) & 1u)
        val = outlier(i);
      if (FULL)
        *gw = val;
      else
        fzk_put32(gout, i, val, al);
    }
    crc();
  };
  fzk_built32<QK>(k.raw == k.cb && out_vec, q.step != 0 ? f.qk : FZK_Q_NONE, decode);
}

/* The kernels' entry on 4-byte words. */
template <int QK, int CK, int DIFF, int NEGA, int LEV>
__device__ __forceinline__ void
fzk_dec32_body(const fzk_desc &d, const uint8_t *__restrict__ d_pay, uint64_t pay_len,
               const uint64_t *__restrict__ d_offs, const uint8_t *__restrict__ d_sizes16,
               const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out, int out_vec,
               uint32_t *__restrict__ d_status, uint32_t *__restrict__ d_crcs,
               const uint32_t *__restrict__ d_tab) {
  FZK_C32_CHECK(QK, CK, DIFF, NEGA, LEV);
  fzk_dec_body<4, QK, CK, DIFF, NEGA, LEV>(d, d_pay, pay_len, d_offs, d_sizes16, d_qp, d_out,
                                           out_vec, d_status, d_crcs, d_tab);
}

#endif
