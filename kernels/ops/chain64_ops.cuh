/*
 * chain64_ops.cuh - the device code of the chunk kernels for chains on
 * 8-byte words (f64, and u64 / i64 without quant) of the form
 * [quant] [diff] coder, the coder bitshuffle | rze, bitpack or rze on the
 * words' bytes: f64 `balanced`, `fast`, `lossless` on 8-byte words, and
 * the chains users spell of those shapes (quant | diff | bitpack,
 * quant | bitshuffle | rze, diff | rze, ...).  chain64.cu builds the
 * bitshuffle | rze kernels ahead of time (the others only when asked); the
 * run-time code generation builds the rest from this header, which NVRTC
 * compiles (device code only, as chain32_ops.cuh, whose helpers it
 * shares).
 *
 * The layout is the 4-byte word kernels' (chain32_ops.cuh), with two
 * 32-bit halves per word.  One block owns one chunk; warp w takes the
 * 32-word blocks [w*K, w*K + K) in order, the previous word a shuffle away.
 * The CPU's bitshuffle (stage_bitshuffle.c) makes 64 planes of ceil(n/8)
 * bytes, plane p bit p of every word, so the planes of the words' low
 * halves are planes 0..31 and those of the high halves planes 32..63: two
 * 32x32 transposes per block, lane p then holding four bytes of plane p and
 * four of plane 32 + p.  The stream is 64 * ceil(n/8) bytes, no more than
 * the chunk, as the 4-byte word stream is.  Bitpack's blocks have up to 64
 * planes of 4 bytes (stage_bitpack.c), those of the low halves first; rze
 * on the words reads two nibbles of the level-1 bitmap a word.  The rze
 * levels, the look-back that
 * places a chunk, and the checksums are the 4-byte word kernels' own.  The
 * side list of the quantizer holds 8-byte values (stage_quant.c), and the
 * quantizer is the engine's f64 one (fzo_quant_f64, fzo_pw_quant_f64,
 * ops.h), so the bytes are the CPU reference's, and the decoder accepts
 * exactly what the CPU decoder accepts.
 *
 * The decoder's running sums of zigzag differences need no transpose
 * first, as in chain32_ops.cuh (and bitpack after diff keeps the second
 * running sum's per-warp partial sums in shared memory, as there): plane p >= 1 adds 2^(p-1) times the count
 * of its bits in even words less the count in odd words, and plane 0
 * subtracts its own count; here in 64-bit arithmetic, the high half's
 * planes adding 2^(31+p).
 *
 * How a kernel is made of it.  The encoder and the decoder are the
 * __device__ templates fzk_enc64_body and fzk_dec64_body; each kernel is a
 * __global__ wrapper that passes its arguments on, unchanged, with the
 * signatures of the 4-byte word kernels:
 *
 *   extern "C" __global__ void __launch_bounds__(FZK_NT, FZK_ENC64_BLOCKS)
 *   fzk_enc64_gen(fzk_desc d, const uint8_t *__restrict__ d_in,
 *                 const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out,
 *                 uint64_t out_cap, uint64_t header_len, uint64_t table_off,
 *                 uint32_t *__restrict__ d_crcs, fzk_u64 *__restrict__ lb,
 *                 const uint32_t *__restrict__ d_tab) {
 *     fzk_enc64_body<QK, CK, DIFF, NEGA, LEV>(d, d_in, d_qp, d_out, out_cap, header_len,
 *                                             table_off, d_crcs, lb, d_tab);
 *   }
 *   extern "C" __global__ void __launch_bounds__(FZK_NT, FZK_DEC64_BLOCKS)
 *   fzk_dec64_gen(fzk_desc d, const uint8_t *__restrict__ d_pay, uint64_t pay_len,
 *                 const uint64_t *__restrict__ d_offs, const uint8_t *__restrict__ d_sizes16,
 *                 const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out, int out_vec,
 *                 uint32_t *__restrict__ d_status, uint32_t *__restrict__ d_crcs,
 *                 const uint32_t *__restrict__ d_tab) {
 *     fzk_dec64_body<QK, CK, DIFF, NEGA, LEV>(d, d_pay, pay_len, d_offs, d_sizes16, q,
 *                                             d_out, out_vec, d_status, d_crcs, d_tab);
 *   }
 *
 * The arguments are those of fzk_launch_encode32 and fzk_launch_decode32
 * (fzk.h), which run these kernels for a descriptor of 8-byte words
 * (d.w == 8).  Launch: grid d.nchunks blocks of FZK_NT threads, dynamic
 * shared memory d.smem_e32 (encoder) or d.smem_d32 (decoder) as
 * fzk_desc_layout64 sets them (the function's maximum dynamic shared
 * memory raised to that first); lb (nchunks + 2 words) zeroed before the
 * encoder, d_crcs before the decoder.  The template parameters are the
 * descriptor's chain constants, as fzk_desc_from_header sets them, with
 * the meanings of chain32_ops.cuh:
 *
 *   QK    fzk_qkind32(d): FZK_Q_NONE, FZK_Q_BINS (ABS, REL), FZK_Q_PW
 *   CK    d.k32 (FZK_C32_*)
 *   DIFF  d.k32diff (0, 1)
 *   NEGA  d.k32nega (0, 1)
 *   LEV   d.k32lev (1 .. FZE_RZE_MAX_LEVELS; 0 for bitpack)
 *
 * Any of them but CK may be FZK_RT, read from the descriptor at run time
 * (chain64.cu's kernels read three or four); fzk_c64_valid says which
 * combinations exist.  Build flags: those of chain32_ops.cuh.
 */
#ifndef FZK_CHAIN64_OPS_CUH
#define FZK_CHAIN64_OPS_CUH

#include "chain32_ops.cuh"

/* The chains the bodies are written for. */
template <int QK, int CK, int DIFF, int NEGA, int LEV>
__host__ __device__ constexpr bool fzk_c64_valid() {
  return (QK == FZK_RT || (QK >= FZK_Q_NONE && QK <= FZK_Q_PW)) &&
         (DIFF == FZK_RT || DIFF == 0 || DIFF == 1) &&
         (NEGA == FZK_RT || NEGA == 0 || NEGA == 1) &&
         ((CK == FZK_C32_BITPACK && (LEV == FZK_RT || LEV == 0)) ||
          ((CK == FZK_C32_SHUF_RZE || CK == FZK_C32_RZE) &&
           (LEV == FZK_RT || (LEV >= 1 && LEV <= FZE_RZE_MAX_LEVELS))));
}
#define FZK_C64_CHECK(QK, CK, DIFF, NEGA, LEV)                                                    \
  static_assert(fzk_c64_valid<QK, CK, DIFF, NEGA, LEV>(), "no such chain on 8-byte words")

/* Blocks per SM the kernels are built for (shared memory allows six at
 * 16 KiB chunks), and the warps that checksum a chunk. */
#ifndef FZK_ENC64_BLOCKS
#define FZK_ENC64_BLOCKS 6
#endif
#ifndef FZK_DEC64_BLOCKS
#define FZK_DEC64_BLOCKS 6
#endif
/* 32-word blocks the encoder loads at once (512 bytes a warp at 2). */
#ifndef FZK_S64
#define FZK_S64 2
#endif
#ifndef FZK_ENC64_CRCW
#define FZK_ENC64_CRCW 2
#endif
#ifndef FZK_DEC64_CRCW
#define FZK_DEC64_CRCW 2
#endif

/* Shared memory of the two kernels (fzk_desc_layout64).  The per-warp
 * sums area holds the 4-byte word kernels' words (FZK_WT_WORDS), then in
 * the decoder a 64-bit sum per warp. */
#define FZK_WT64_WORDS (FZK_WT_WORDS + 4u * FZK_NW)

/* Bytes of the shuffled stream with its plane padding (fzk_plane_stride),
 * of the outlier bitmap (a word per 32-word block), of the rze bitmaps. */
__host__ __device__ inline uint32_t fzk_a64_bytes(uint32_t cb) { return a16(cb + 64 * 16 + 16); }
__host__ __device__ inline uint32_t fzk_obm64_bytes(uint32_t cb) { return a16(4 * (cb / 256 + 1)); }
/* The running sums of bitpack after diff: a word for each word of the
 * chunk's 32-word blocks. */
__host__ __device__ inline uint32_t fzk_e64_bytes(uint32_t cb) { return a16(cb + 256); }

struct fzk_e64 {
  uint8_t *a;      /* the bit-shuffled stream (fzk_plane_stride), the words'
                    * bytes (rze), or each warp's bitpack planes */
  uint8_t *res;    /* the coded chunk as it is stored, 16 bytes into its area */
  uint32_t *wt;    /* per warp sums and more (as fzk_e32) */
  uint8_t *tb;     /* rze bitmaps, every level */
};

struct fzk_d64 {
  uint8_t *c;      /* the coded chunk, at offset o */
  uint32_t *obm;   /* outlier bitmap */
  uint32_t *wt;    /* per warp sums, and flags (as fzk_d32) */
  fzk_u64 *ws;     /* per warp 64-bit sums: of the differences, then of the
                    * diff stage's words (bitpack after diff) */
  uint32_t *T;     /* the CRC slice tables */
  uint2 *r1;       /* rze: level-1 bitmap words and their ranks (fzk_r1_at) */
  uint8_t *tb2;    /* rze: two bitmaps of the levels above 1 */
  uint64_t *e;     /* bitpack after diff, in r1's place: each warp's running
                    * sums of the diff stage's words */
};

__device__ inline fzk_e64 fzk_carve_e64(const fzk_desc &d, uint8_t *p) {
  fzk_e64 s;
  s.a = p; p += fzk_a64_bytes(d.cb);
  s.res = p + 16; p += a16(d.cb + 48);
  s.wt = (uint32_t *)p; p += 4 * FZK_WT_WORDS;
  s.tb = p;
  return s;
}

__device__ inline fzk_d64 fzk_carve_d64(const fzk_desc &d, uint8_t *p) {
  fzk_d64 s;
  s.c = p; p += a16(d.cb + 48);
  s.obm = (uint32_t *)p; p += fzk_obm64_bytes(d.cb);
  s.wt = (uint32_t *)p;
  s.ws = (fzk_u64 *)(p + 4 * FZK_WT_WORDS); p += a16(4 * FZK_WT64_WORDS);
  s.T = (uint32_t *)p; p += 4096;
  s.r1 = (uint2 *)p;
  s.e = (uint64_t *)p; p += r1_bytes(d.cb);
  s.tb2 = p;
  return s;
}

/* ---- per-element helpers ---- */

__device__ __forceinline__ uint64_t fzk_w64(uint32_t hi, uint32_t lo) {
  return (uint64_t)hi << 32 | lo;
}

/* The quantizer's word for the bits b of an f64, the engine's own
 * (stage_quant.c); false for an outlier, whose word is 0.  The caller
 * passes words through instead when q.step is 0. */
template <int QK>
__device__ __forceinline__ bool fzk_q64(uint64_t b, const fzk_qparams &q, uint64_t *code) {
  if (QK == FZK_Q_NONE) {
    *code = b;
    return true;
  }
  uint64_t c = 0;
  bool ok;
  if (QK == FZK_Q_BINS)
    ok = fzo_quant_f64(fzo_bits_f64(b), q.inv, q.step, q.eb_abs, &c);
  else
    ok = fzo_pw_quant_f64(fzo_bits_f64(b), (uint64_t)q.step, q.eb_abs, &c);
  *code = ok ? c : 0;
  return ok;
}

__device__ __forceinline__ bool fzk_q64_any(int qk, uint64_t b, const fzk_qparams &q,
                                            uint64_t *code) {
  return qk == FZK_Q_PW ? fzk_q64<FZK_Q_PW>(b, q, code) : fzk_q64<FZK_Q_BINS>(b, q, code);
}

/* The value of a word; the caller passes words through when q.step is 0. */
template <int QK>
__device__ __forceinline__ uint64_t fzk_dq64(uint64_t code, const fzk_qparams &q) {
  if (QK == FZK_Q_NONE)
    return code;
  if (QK == FZK_Q_PW)
    return fzo_f64_bits(fzo_pw_dequant_f64(code, (uint64_t)q.step));
  return fzo_f64_bits(fzo_dequant_f64(code, q.step));
}

/* Inclusive prefix sum over the warp, modulo 2^64. */
__device__ __forceinline__ uint64_t fzk_warp_incl64(uint64_t v) {
  const unsigned lane = threadIdx.x & 31;
#pragma unroll
  for (unsigned o = 1; o < 32; o <<= 1) {
    const uint64_t t = __shfl_up_sync(FZK_FULL, (fzk_u64)v, o);
    if (lane >= o)
      v += t;
  }
  return v;
}

/* The warp's sum, modulo 2^64, in every lane. */
__device__ __forceinline__ uint64_t fzk_warp_sum64(uint64_t v) {
#pragma unroll
  for (unsigned o = 16; o; o >>= 1)
    v += __shfl_xor_sync(FZK_FULL, (fzk_u64)v, o);
  return v;
}

/* ---- encoder ---- */

/* One block codes one chunk, places it in the archive at the offset the
 * look-back gives, writes its table entry and its CRC-32C to d_crcs, and
 * the last chunk leaves the payload's length in lb[nchunks]; as
 * fzk_enc32_body. */
template <int QK, int CK, int DIFF, int NEGA, int LEV>
__device__ __forceinline__ void
fzk_enc64_body(const fzk_desc &d, const uint8_t *__restrict__ d_in,
               const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out,
               uint64_t out_cap, uint64_t header_len, uint64_t table_off,
               uint32_t *__restrict__ d_crcs, fzk_u64 *__restrict__ lb,
               const uint32_t *__restrict__ d_tab) {
  FZK_C64_CHECK(QK, CK, DIFF, NEGA, LEV);
  extern __shared__ __align__(16) uint8_t fzk_sh64[];
  fzk_e64 s = fzk_carve_e64(d, fzk_sh64);
  if (threadIdx.x == 0)
    s.wt[FZK_WT_TICKET] = atomicAdd((unsigned *)(lb + d.nchunks + 1), 1u);
  __syncthreads();
  const uint64_t c = s.wt[FZK_WT_TICKET];
  const uint32_t cb = d.cb;
  const uint32_t raw = (uint32_t)(d.raw_bytes - c * cb < cb ? d.raw_bytes - c * cb : cb);
  const uint32_t n = raw / 8, nb = (n + 31) / 32, pb = (n + 7) / 8;
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t K = (nb + FZK_NW - 1) / FZK_NW, b0 = warp * K < nb ? warp * K : nb;
  const uint32_t b1 = b0 + K < nb ? b0 + K : nb;
  const uint64_t *g = (const uint64_t *)(d_in + c * cb);
  /* diff: the words are differences (the diff stage's, or bitpack's
   * own); ddiff: bitpack's differences are of the diff stage's words. */
  const int qk = fzk_c32_qk<QK>(d);
  const bool quant = qk != FZK_Q_NONE, bp = CK == FZK_C32_BITPACK, wd = CK == FZK_C32_RZE;
  const bool nega = fzk_c32_flag<NEGA>(d.k32nega), dst = fzk_c32_flag<DIFF>(d.k32diff);
  const bool diff = bp || dst, ddiff = bp && dst;
  const fzk_tp tp = fzk_tp_init();
  fzk_qparams q = {0, 0, 0};
  if (quant) {
    /* Loaded once and kept in registers (see fzk_enc32_body). */
    const volatile fzk_qparams *vq = d_qp;
    q.eb_abs = vq->eb_abs;
    q.step = vq->step;
    q.inv = vq->inv;
  }
  const bool qon = quant && q.step != 0;

  /* Pass 1: words, residuals, outliers; bitpack planes packed per warp
   * (the warp's blocks' planes in order from s.a + 256 b0 to s.a + wst),
   * the words' bytes, or the shuffled stream's planes.  Each block's
   * outlier bits and bit width go to sum (in s.res, unused until the chunk
   * is assembled); then lane k of the warp keeps the summary of the warp's
   * block b0 + k: its outlier bits, and outliers << 16 | 4 * bit width. */
  const uint32_t ps = fzk_plane_stride(pb);
  /* carry: the word before the block, carry2 the diff stage's word before
   * it when bitpack codes the differences of those. */
  uint64_t carry = 0, carry2 = 0;
  uint32_t my_fl = 0, my_info = 0, wst = 256 * b0;
  uint2 *sum = (uint2 *)s.res;
  if (diff && b0 > 0 && b0 < nb) {
    uint64_t v = g[32 * b0 - 1];
    if (qon)
      fzk_q64_any(qk, v, q, &v);
    carry = v;
    if (ddiff) {
      uint64_t v2 = g[32 * b0 - 2];
      if (qon)
        fzk_q64_any(qk, v2, q, &v2);
      carry2 = nega ? fzo_nega64(v - v2) : fzo_zigzag64(v - v2);
    }
  }
  /* Built for whole chunks of whole 4-block steps without the bounds
   * checks, and for any chunk; each with the quantizer on, or passing
   * words through (a step of 0). */
  auto pass1 = [&](auto whole, auto qonc) {
    constexpr bool FULL = decltype(whole)::value;
    constexpr int QON = decltype(qonc)::value;
    const uint64_t *gp = g + 32 * b0 + lane;
    for (uint32_t b = b0; b < b1; b += FZK_S64, gp += 32 * FZK_S64) {
      uint64_t v[FZK_S64];
#pragma unroll
      for (unsigned k = 0; k < FZK_S64; k++) {
        uint32_t i = 32 * (b + k) + lane;
        v[k] = FULL || (b + k < b1 && i < n) ? gp[32 * k] : 0;
      }
#pragma unroll
      for (unsigned k = 0; k < FZK_S64; k++) {
        const uint32_t bb = b + k, i = 32 * bb + lane;
        if (!FULL && bb >= b1)
          break;
        const bool valid = FULL || i < n;
        uint64_t code = v[k];
        bool bad = false;
        if (QON != FZK_Q_NONE)
          bad = !fzk_q64<QON>(v[k], q, &code) && valid;
        if (!valid)
          code = 0;
        uint64_t prev = __shfl_up_sync(FZK_FULL, (fzk_u64)code, 1);
        if (lane == 0)
          prev = carry;
        carry = __shfl_sync(FZK_FULL, (fzk_u64)code, 31);
        const uint32_t fl = __ballot_sync(FZK_FULL, bad);
        if (bp) {
          /* The block's bit planes, as many as its widest residual needs,
           * go to the warp's run in s.a at once: planes 0..31 from the low
           * halves, 32..63 from the high ones. */
          uint64_t y = code, yp = prev;
          if (ddiff) {
            /* One shuffle: lane 0 gets lane 31's word, the carry of the
             * next block. */
            y = nega ? fzo_nega64(code - prev) : fzo_zigzag64(code - prev);
            const uint64_t yr = __shfl_sync(FZK_FULL, (fzk_u64)y, (lane + 31) & 31);
            yp = lane ? yr : carry2;
            carry2 = yr;
          }
          const uint64_t r = valid ? fzo_zigzag64(y - yp) : 0;
          const uint32_t oh = __reduce_or_sync(FZK_FULL, (uint32_t)(r >> 32));
          const uint32_t ol = __reduce_or_sync(FZK_FULL, (uint32_t)r);
          const uint32_t nbits = oh ? 64u - __clz(oh) : 32u - __clz(ol);
          const uint32_t xl = fzk_transpose32((uint32_t)r, tp);
          if (lane < nbits)
            *(uint32_t *)(s.a + wst + 4 * lane) = xl;
          if (nbits > 32) {
            const uint32_t xh = fzk_transpose32((uint32_t)(r >> 32), tp);
            if (lane + 32 < nbits)
              *(uint32_t *)(s.a + wst + 128 + 4 * lane) = xh;
          }
          wst += 4 * nbits;
          if (lane == 0)
            sum[bb] = make_uint2(fl, nbits);
          continue;
        }
        uint64_t u = code;
        if (diff) {
          const uint64_t dd = code - prev;
          u = nega ? fzo_nega64(dd) : fzo_zigzag64(dd);
        }
        if (!valid)
          u = 0;
        if (wd) {
          /* The stream is the words' bytes. */
          *(uint64_t *)(s.a + 8 * i) = u;
          if (lane == 0)
            sum[bb] = make_uint2(fl, 0);
          continue;
        }
        /* Lane p holds bytes 4bb..4bb+3 of planes p and 32 + p (word
         * aligned in a whole chunk: pb and ps are multiples of 16). */
        const uint32_t xl = fzk_transpose32((uint32_t)u, tp);
        const uint32_t xh = fzk_transpose32((uint32_t)(u >> 32), tp);
        const uint32_t al = lane * ps + 4 * bb, ah = (lane + 32) * ps + 4 * bb;
        if (FULL) {
          *(uint32_t *)(s.a + al) = xl;
          *(uint32_t *)(s.a + ah) = xh;
        } else if (4 * bb + 4 <= pb) {
          fzk_st32u(s.a, al, xl);
          fzk_st32u(s.a, ah, xh);
        } else {
          for (unsigned k2 = 0; 4 * bb + k2 < pb; k2++) {
            s.a[al + k2] = (uint8_t)(xl >> (8 * k2));
            s.a[ah + k2] = (uint8_t)(xh >> (8 * k2));
          }
        }
        if (lane == 0)
          sum[bb] = make_uint2(fl, 0);
      }
    }
  };
  fzk_built32<QK>(raw == cb && K % FZK_S64 == 0, qon ? qk : FZK_Q_NONE, pass1);
  __syncwarp();
  if (lane < b1 - b0) {
    const uint2 e = sum[b0 + lane];
    my_fl = e.x;
    my_info = (uint32_t)__popc(e.x) << 16 | 4u * e.y;
  }
  uint32_t my_off;
  {
    const uint32_t inc = fzk_warp_incl(my_info);
    my_off = inc - my_info;
    if (lane == 31)
      s.wt[warp] = inc;
  }
  __syncthreads();
  uint32_t tot = 0, base = 0;
  for (unsigned w = 0; w < FZK_NW; w++) {
    uint32_t t = s.wt[w];
    base += w < warp ? t : 0;
    tot += t;
  }
  const uint32_t m = tot >> 16, vl = quant ? fzk_vlen(m) : 0;
  const uint32_t side = quant ? vl + 10 * m : 0;

  /* rze of the stream (the shuffled one, or the words' bytes, zero after
   * the last up to the next 16): level 1 and 2 by the block, the rest by
   * warp 0 (fzk_enc32_body). */
  const uint32_t len0 = wd ? 8 * n : 64 * pb;
  uint32_t rank1 = 0, v0 = 0, v1 = 0, pos1 = 0, r2 = 0, q0 = 0, q1 = 0, kept1 = 0, total;
  const unsigned L = fzk_c32_lev<LEV>(d);
  uint32_t lens[FZE_RZE_MAX_LEVELS + 1];
  uint8_t *bms[FZE_RZE_MAX_LEVELS + 1];
  fzk_enc_rze<CK>(s, L, len0, side, nb, tot, pb, ps, warp, lane, lens, bms, rank1, v0, v1, pos1, r2,
                  q0, q1, kept1, total);

  const bool fallback = total >= raw;
  const uint32_t size = fallback ? raw : total;
  if (threadIdx.x == 0)
    fzk_lb_put(lb, c, (c == 0 ? FZK_LB_INCL : FZK_LB_AGG) | size);
  /* The coded chunk goes to s.res + shift, chosen so that the bit planes
   * of bitpack start on a word. */
  const uint32_t shift = bp && !fallback ? (0u - (side + nb)) & 3u : 0u;
  uint8_t *res = s.res + shift;
  if (!fallback) {
    if (quant && threadIdx.x == 0) {
      uint32_t v = m;
      for (uint32_t k = 0; k < vl; k++, v >>= 7)
        res[k] = (uint8_t)((v & 0x7f) | (k + 1 < vl ? 0x80 : 0));
    }
    if (bp) {
      /* The bit widths, and the warp's planes to their place (word
       * aligned: see shift). */
      if (lane < b1 - b0)
        res[side + b0 + lane] = (uint8_t)((my_info & 0xffffu) >> 2);
      const uint32_t nw = (wst - 256 * b0) / 4;
      uint32_t *dst = (uint32_t *)(res + side + nb + (base & 0xffffu));
      const uint32_t *src = (const uint32_t *)(s.a + 256 * b0);
      for (uint32_t j = lane; j < nw; j += 32)
        dst[j] = src[j];
    }
    if (quant) {
      /* The outliers of the warp's blocks that have any: u16 indices,
       * then the 8-byte values. */
      for (uint32_t pend = __ballot_sync(FZK_FULL, my_fl != 0); pend; pend &= pend - 1) {
        const unsigned k = __ffs(pend) - 1;
        const uint32_t fl = __shfl_sync(FZK_FULL, my_fl, k);
        const uint32_t o = base + __shfl_sync(FZK_FULL, my_off, k), i = 32 * (b0 + k) + lane;
        if ((fl >> lane) & 1u) {
          const uint32_t r = (o >> 16) + __popc(fl & ((1u << lane) - 1u));
          const uint64_t x = g[i];
          res[vl + 2 * r] = (uint8_t)i;
          res[vl + 2 * r + 1] = (uint8_t)(i >> 8);
          /* From the aligned base: res is shifted. */
          fzk_st32u(s.res, shift + vl + 2 * m + 8 * r, (uint32_t)x);
          fzk_st32u(s.res, shift + vl + 2 * m + 8 * r + 4, (uint32_t)(x >> 32));
        }
      }
    }
    if (!bp && warp == 0) {
      uint32_t pos = side + lens[L];
      for (uint32_t j = lane; j < lens[L]; j += 32)
        res[side + j] = bms[L][j];
      for (unsigned l = L; l >= 3; l--) {
        fzk_wrze_scatter(bms[l - 1], lens[l - 1], bms[l], res + pos);
        pos += s.wt[FZK_WT_LEVELS + l];
      }
    }
    if (!bp && L >= 2) {
      uint32_t pos2 = side + lens[L];
      for (unsigned l = 3; l <= L; l++)
        pos2 += s.wt[FZK_WT_LEVELS + l];
      uint8_t *dst2 = res + pos2 + r2;
      for (uint32_t j = q0; j < q1; j++) {
        uint32_t mk = bms[2][j];
        while (mk) {
          unsigned b = __ffs(mk) - 1;
          mk &= mk - 1;
          *dst2++ = bms[1][8 * j + b];
        }
      }
    }
    uint8_t *dst = res + pos1 + rank1;
    for (uint32_t v = v0; v < v1 && !bp; v++) {
      uint4 qv = *(const uint4 *)(s.a + (wd ? 16 * v : fzk_plane_vec(v, pb, ps)));
      uint32_t wv[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
      for (unsigned k = 0; k < 4; k++) {
#pragma unroll
        for (unsigned e = 0; e < 4; e++) {
          uint32_t byte = (wv[k] >> (8 * e)) & 0xffu;
          if (byte)
            *dst++ = (uint8_t)byte;
        }
      }
    }
  } else {
    const uint32_t *g32 = (const uint32_t *)g;
    for (uint32_t v = threadIdx.x; v < 2 * n; v += FZK_NT)
      ((uint32_t *)s.res)[v] = g32[v];
  }
  __syncthreads();

  /* Place the chunk, as fzk_enc32_body does: the last CW warps checksum
   * it while warp 0 finds its offset and the other PW warps copy it out. */
  constexpr unsigned CW = FZK_ENC64_CRCW, PW = FZK_NW - CW;
  const uint8_t *buf = s.res - 16;
  const uint32_t o = 16 + shift;
  if (warp >= PW) {
    const unsigned gt = threadIdx.x - 32 * PW;
    uint32_t *T = (uint32_t *)s.a;
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
      s.wt[FZK_WT_OFF] = (uint32_t)off;
      s.wt[FZK_WT_OFF + 1] = (uint32_t)(off >> 32);
    }
  }
  fzk_bar_sync(2, 32 * PW);
  const uint64_t off = s.wt[FZK_WT_OFF] | (uint64_t)s.wt[FZK_WT_OFF + 1] << 32;
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
  for (uint32_t k = threadIdx.x; k < nw; k += 32 * PW)
    ((uint32_t *)(dp + hd))[k] = fzk_ld32u(buf, o + hd + 4 * k);
  for (uint32_t i = hd + 4 * nw + threadIdx.x; i < lim; i += 32 * PW)
    dp[i] = buf[o + i];
  if (threadIdx.x == 0) {
    d_out[table_off + 2 * c] = (uint8_t)size;
    d_out[table_off + 2 * c + 1] = (uint8_t)(size >> 8);
    if (c + 1 == d.nchunks)
      lb[d.nchunks] = off + size;
  }
}

/* ---- decoder ---- */

__device__ __forceinline__ void fzk_put64(uint8_t *g, uint32_t i, uint64_t v, bool al) {
  if (al) {
    ((uint64_t *)g)[i] = v;
  } else {
    for (unsigned k = 0; k < 8; k++)
      g[8 * i + k] = (uint8_t)(v >> (8 * k));
  }
}

/* One block decodes one chunk, and its last warps XOR the chunk's CRC-32C
 * into d_crcs, as fzk_dec32_body. */
template <int QK, int CK, int DIFF, int NEGA, int LEV>
__device__ __forceinline__ void
fzk_dec64_body(const fzk_desc &d, const uint8_t *__restrict__ d_pay, uint64_t pay_len,
               const uint64_t *__restrict__ d_offs, const uint8_t *__restrict__ d_sizes16,
               const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out, int out_vec,
               uint32_t *__restrict__ d_status, uint32_t *__restrict__ d_crcs,
               const uint32_t *__restrict__ d_tab) {
  FZK_C64_CHECK(QK, CK, DIFF, NEGA, LEV);
  fzk_qparams q;
  if (!fzk_dec_begin(d_qp, d_status, &q))
    return;
  extern __shared__ __align__(16) uint8_t fzk_sh64[];
  fzk_d64 s = fzk_carve_d64(d, fzk_sh64);
  const uint64_t c = blockIdx.x;
  const uint32_t cb = d.cb;
  const uint32_t raw = (uint32_t)(d.raw_bytes - c * cb < cb ? d.raw_bytes - c * cb : cb);
  const uint32_t n = raw / 8, nb = (n + 31) / 32, pb = (n + 7) / 8;
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t K = (nb + FZK_NW - 1) / FZK_NW, b0 = warp * K < nb ? warp * K : nb;
  const uint32_t b1 = b0 + K < nb ? b0 + K : nb;
  const uint32_t len = (uint32_t)d_sizes16[2 * c] | (uint32_t)d_sizes16[2 * c + 1] << 8;
  const uint64_t off = d_offs[c];
  uint8_t *gout = d_out + c * cb;
  const int qk = fzk_c32_qk<QK>(d);
  const bool quant = qk != FZK_Q_NONE, bp = CK == FZK_C32_BITPACK, wd = CK == FZK_C32_RZE;
  const bool nega = fzk_c32_flag<NEGA>(d.k32nega), dst = fzk_c32_flag<DIFF>(d.k32diff);
  const bool diff = bp || dst, ddiff = bp && dst;
  const fzk_tp tp = fzk_tp_init();
  /* The host validated the table; a chunk outside the payload is refused
   * again here, before any byte of it is read. */
  if (len == 0 || len > raw || off > pay_len || len > pay_len - off) {
    if (threadIdx.x == 0)
      atomicOr(d_status, 1u);
    return;
  }
  const uint8_t *g = d_pay + off;
  fzk_load_slices(s.T, d_tab);
  if (threadIdx.x < FZK_WT_SEL)
    s.wt[threadIdx.x] = 0;
  else if (!bp && threadIdx.x < FZK_WT_SEL + 16)
    s.wt[threadIdx.x] = fzk_expand_sel(threadIdx.x - FZK_WT_SEL);
  const uint32_t o = fzk_load_chunk(s.c, g, len);
  __syncthreads();
  auto crc = [&]() {
    constexpr unsigned CW = FZK_DEC64_CRCW;
    if (warp >= FZK_NW - CW)
      fzk_crc_group_xor<CW>(s.c, o, len, s.T, d_tab, d_crcs + c,
                            threadIdx.x - 32 * (FZK_NW - CW));
  };
  if (len == raw) {
    const bool al = out_vec != 0;
    for (uint32_t i = threadIdx.x; i < 2 * n; i += FZK_NT)
      fzk_put32(gout, i, fzk_ld32u(s.c, o + 4 * i), al);
    crc();
    return;
  }

  /* The side list (stage_quant.c), parsed by every thread alike. */
  const uint8_t *cc = s.c + o;
  uint32_t side = 0, m = 0, vl = 0;
  if (quant && !fzk_dec_side<8>(s, cc, len, n, nb, q, d_status, side, m, vl))
    return;
  const uint32_t st = o + side, clen = len - side;
  const uint8_t *in = s.c + st;
  uint32_t wbase = 0, ko = 0, wsh = 0, w1 = 0;
  /* Bitpack: lane k of a warp holds the bit width of the warp's block
   * b0 + k, and its planes follow the blocks before, from wpos0 on. */
  uint32_t my_nb = 0, wpos0 = 0;
  if (bp ? !fzk_dec_widths<8>(s, in, st, clen, nb, K, b0, b1, warp, lane, d_status, my_nb, wpos0)
         : !fzk_dec_rze<8, CK, LEV>(s, d, in, st, clen, n, pb, cb, warp, lane, d_status, w1, wsh,
                                     wbase, ko))
    return;
  const uint32_t my_obm = quant && m && lane < K && b0 + lane < b1 ? s.obm[b0 + lane] : 0;

  /* Four bytes of shuffle plane p at block b, straight from the kept bytes
   * of rze level 1: bytes p * pb + 4b .. +3 of the stream are the bytes of
   * its bitmap nibble, the kept ones consecutive from the rank. */
  auto plane4 = [&](uint32_t p, uint32_t b, auto whole) -> uint32_t {
    if (bp || wd)
      return 0;
    constexpr bool FULL = decltype(whole)::value;
    const uint32_t i = p * pb + 4 * b, w = i >> 5, sh = i & 31;
    const uint2 e = s.r1[fzk_r1_at(w)];
    const uint32_t nx = sh > 28 && w + 1 < w1 ? s.r1[fzk_r1_at(w + 1)].x : 0;
    uint32_t mk = __funnelshift_r(e.x, nx, sh) & 15u;
    if (!FULL && 4 * b + 4 > pb) /* the plane ends inside these four bytes */
      mk &= (1u << (pb - 4 * b)) - 1;
    const uint32_t rk = e.y + __shfl_sync(FZK_FULL, wbase, w >> wsh) +
                        __popc(e.x & ((1u << sh) - 1));
    return __byte_perm(fzk_ld32u(s.c, ko + rk), 0, s.wt[FZK_WT_SEL + mk]);
  };
  /* Block b's two halves as the coder stored them: bitpack planes (in
   * order, from wpos on; lane p holds planes p and 32 + p), the word of
   * lane (rze on words: bytes 8 (32b + lane) .. +7, whose level-1 bitmap
   * byte and rank give its kept bytes), or shuffle planes. */
  uint32_t wpos = 0;
  auto halves = [&](uint32_t b, uint32_t k, auto whole, uint32_t *xl, uint32_t *xh) {
    constexpr bool FULL = decltype(whole)::value;
    if (bp) {
      const uint32_t nbits = __shfl_sync(FZK_FULL, my_nb, k);
      *xl = lane < nbits ? fzk_ld32u(s.c, wpos + 4 * lane) : 0;
      *xh = lane + 32 < nbits ? fzk_ld32u(s.c, wpos + 128 + 4 * lane) : 0;
      wpos += 4 * nbits;
    } else if (wd) {
      const uint32_t wi = 32 * b + lane;
      const bool in = FULL || wi < n;
      const uint32_t w = in ? wi >> 2 : 0, sh = 8 * (wi & 3);
      const uint2 e = s.r1[fzk_r1_at(w)];
      const uint32_t mk = in ? (e.x >> sh) & 0xffu : 0u;
      const uint32_t rk = e.y + __shfl_sync(FZK_FULL, wbase, w >> wsh) +
                          __popc(e.x & ((1u << sh) - 1));
      *xl = __byte_perm(fzk_ld32u(s.c, ko + rk), 0, s.wt[FZK_WT_SEL + (mk & 15u)]);
      *xh = __byte_perm(fzk_ld32u(s.c, ko + rk + __popc(mk & 15u)), 0, s.wt[FZK_WT_SEL + (mk >> 4)]);
    } else {
      *xl = plane4(lane, b, whole);
      *xh = plane4(lane + 32, b, whole);
    }
  };

  auto decode = [&](auto whole, auto qonc) {
    constexpr bool FULL = decltype(whole)::value;
    constexpr int QON = decltype(qonc)::value;
    uint64_t run = 0;
    if (diff) {
      /* Sums of each warp's differences (see the opening comment), for
       * the running sums across warps. */
      bool pad_bad = false;
      uint64_t acc = 0;
      const unsigned sh = lane ? lane - 1 : 0;
      wpos = wpos0;
      for (uint32_t b = b0, k = 0; b < b1; b++, k++) {
        uint32_t xl, xh;
        halves(b, k, whole, &xl, &xh);
        if (wd) {
          /* Words, zero past the chunk's last. */
          const uint64_t x = fzk_w64(xh, xl);
          acc += nega ? fzo_unnega64(x) : fzo_unzigzag64(x);
          continue;
        }
        if (!FULL) {
          const uint32_t rem = n - 32 * b;
          const uint32_t vm = rem >= 32 ? FZK_FULL : (1u << rem) - 1;
          pad_bad |= bp && ((xl | xh) & ~vm) != 0;
          xl &= vm;
          xh &= vm;
        }
        if (!bp && nega) {
          acc += fzo_unnega64(fzk_w64(fzk_transpose32(xh, tp), fzk_transpose32(xl, tp)));
        } else {
          /* Lane 0's low plane holds the odd marks: its term is -popc. */
          const uint32_t odd = __shfl_sync(FZK_FULL, xl, 0);
          acc += (uint64_t)(int64_t)(__popc(xl & ~odd) - __popc(xl & odd)) << sh;
          acc += (uint64_t)(int64_t)(__popc(xh & ~odd) - __popc(xh & odd)) << (lane + 31);
        }
      }
      const uint64_t wsum = fzk_warp_sum64(acc);
      if (pad_bad)
        atomicOr(&s.wt[FZK_WT_BAD2], 1u);
      if (lane == 0)
        s.ws[warp] = wsum;
      __syncthreads();
      if (s.wt[FZK_WT_BAD2]) {
        if (threadIdx.x == 0)
          atomicOr(d_status, 1u);
        return;
      }
      for (unsigned w = 0; w < warp; w++)
        run += s.ws[w];
    }
    /* Bitpack after diff: the diff stage's words are the running sums of
     * bitpack's differences, and the words their running sums, which
     * start from the sums of the warps before; so each warp keeps the
     * running sums of its own diff words (in s.e) and their total, and
     * adds the warps' base once the block knows it (fzk_dec32_body). */
    uint64_t run2 = 0;
    if (ddiff) {
      uint64_t r = run, pc = 0;
      wpos = wpos0;
      for (uint32_t b = b0, k = 0; b < b1; b++, k++) {
        const uint32_t i = 32 * b + lane;
        uint32_t xl, xh;
        halves(b, k, whole, &xl, &xh);
        uint64_t z = fzo_unzigzag64(fzk_w64(fzk_transpose32(xh, tp), fzk_transpose32(xl, tp)));
        if (!FULL && i >= n)
          z = 0;
        const uint64_t x = fzk_warp_incl64(z) + r;
        r = __shfl_sync(FZK_FULL, (fzk_u64)x, 31);
        uint64_t e = nega ? fzo_unnega64(x) : fzo_unzigzag64(x);
        if (!FULL && i >= n)
          e = 0;
        const uint64_t p = fzk_warp_incl64(e) + pc;
        pc = __shfl_sync(FZK_FULL, (fzk_u64)p, 31);
        s.e[i] = p;
      }
      if (lane == 0)
        s.ws[FZK_NW + warp] = pc;
      __syncthreads();
      for (unsigned w = 0; w < warp; w++)
        run2 += s.ws[FZK_NW + w];
    }
    const bool al = out_vec != 0;
    uint64_t *gw = (uint64_t *)gout + 32 * b0 + lane;
    wpos = wpos0;
    for (uint32_t b = b0, k = 0; b < b1; b++, k++, gw += 32) {
      const uint32_t i = 32 * b + lane;
      uint64_t code;
      if (ddiff) {
        code = s.e[i] + run2;
      } else {
        uint32_t xl, xh;
        halves(b, k, whole, &xl, &xh);
        const uint64_t u = wd ? fzk_w64(xh, xl)
                              : fzk_w64(fzk_transpose32(xh, tp), fzk_transpose32(xl, tp));
        code = u;
        if (diff) {
          uint64_t dd = bp ? fzo_unzigzag64(u) : nega ? fzo_unnega64(u) : fzo_unzigzag64(u);
          if (!FULL && i >= n)
            dd = 0;
          code = fzk_warp_incl64(dd) + run;
          run = __shfl_sync(FZK_FULL, (fzk_u64)code, 31);
        }
      }
      const uint32_t fl = quant && m ? __shfl_sync(FZK_FULL, my_obm, k) : 0;
      if (!FULL && i >= n)
        continue;
      uint64_t val = fzk_dq64<QON>(code, q);
      if ((fl >> lane) & 1u) {
        uint32_t lo = 0, hi = m;
        while (lo < hi) {
          uint32_t mid = (lo + hi) / 2;
          uint32_t im = cc[vl + 2 * mid] | (uint32_t)cc[vl + 2 * mid + 1] << 8;
          if (im < i)
            lo = mid + 1;
          else
            hi = mid;
        }
        const uint32_t a = o + vl + 2 * m + 8 * lo;
        val = fzk_w64(fzk_ld32u(s.c, a + 4), fzk_ld32u(s.c, a));
      }
      if (FULL)
        *gw = val;
      else
        fzk_put64(gout, i, val, al);
    }
    crc();
  };
  fzk_built32<QK>(raw == cb && out_vec, q.step != 0 ? qk : FZK_Q_NONE, decode);
}

#endif
