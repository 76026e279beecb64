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
 * on the words reads two nibbles of the level-1 bitmap a word.  The
 * encoder, the decoder's opening phases, the rze levels, the look-back
 * that places a chunk and the checksums are the 4-byte word kernels' own
 * bodies (fzk_enc_body, fzk_dec_body), with fzk_word<8> below for what
 * differs; the decoding of the words is fzk_dec64_words.  The
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
 * __device__ templates fzk_enc64_body and fzk_dec64_body (fzk_enc_body
 * and fzk_dec_body on 8-byte words); each kernel is a
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

/* 8-byte words: the low halves' planes, then the high halves', and
 * FZK_S64 32-word blocks loaded at once. */
template <> struct fzk_word<8> {
  typedef uint64_t T; /* the word */
  typedef fzk_u64 S;  /* the word as a shuffle moves it */
  typedef fzk_e64 E;
  typedef fzk_d64 D;
  static constexpr unsigned STEP = FZK_S64; /* 32-word blocks the encoder loads at once */
  static constexpr unsigned ENC_CRCW = FZK_ENC64_CRCW, DEC_CRCW = FZK_DEC64_CRCW;
  static __device__ __forceinline__ E carve_e(const fzk_desc &d, uint8_t *p) {
    return fzk_carve_e64(d, p);
  }
  static __device__ __forceinline__ D carve_d(const fzk_desc &d, uint8_t *p) {
    return fzk_carve_d64(d, p);
  }
  static __device__ __forceinline__ T zigzag(T v) { return fzo_zigzag64(v); }
  static __device__ __forceinline__ T nega(T v) { return fzo_nega64(v); }
  template <int QK> static __device__ __forceinline__ bool q(T b, const fzk_qparams &p, T *code) {
    return fzk_q64<QK>(b, p, code);
  }
  static __device__ __forceinline__ bool q_any(int qk, T b, const fzk_qparams &p, T *code) {
    return fzk_q64_any(qk, b, p, code);
  }
  /* A block's bitpack residuals r as bit planes at p, as many as its
   * widest residual needs (planes 0..31 from the low halves, 32..63 from
   * the high ones): their count. */
  static __device__ __forceinline__ uint32_t put_bitplanes(uint8_t *p, T r, const fzk_tp &tp,
                                                           unsigned lane) {
    const uint32_t oh = __reduce_or_sync(FZK_FULL, (uint32_t)(r >> 32));
    const uint32_t ol = __reduce_or_sync(FZK_FULL, (uint32_t)r);
    const uint32_t nbits = oh ? 64u - __clz(oh) : 32u - __clz(ol);
    const uint32_t xl = fzk_transpose32((uint32_t)r, tp);
    if (lane < nbits)
      *(uint32_t *)(p + 4 * lane) = xl;
    if (nbits > 32) {
      const uint32_t xh = fzk_transpose32((uint32_t)(r >> 32), tp);
      if (lane + 32 < nbits)
        *(uint32_t *)(p + 128 + 4 * lane) = xh;
    }
    return nbits;
  }
  /* Word u of block bb into the shuffled stream at a: lane p holds bytes
   * 4bb..4bb+3 of planes p and 32 + p (word aligned in a whole chunk: pb
   * and ps are multiples of 16). */
  template <bool FULL>
  static __device__ __forceinline__ void put_planes(uint8_t *a, T u, const fzk_tp &tp,
                                                    unsigned lane, uint32_t ps, uint32_t pb,
                                                    uint32_t bb) {
    const uint32_t xl = fzk_transpose32((uint32_t)u, tp);
    const uint32_t xh = fzk_transpose32((uint32_t)(u >> 32), tp);
    const uint32_t al = lane * ps + 4 * bb, ah = (lane + 32) * ps + 4 * bb;
    if (FULL) {
      *(uint32_t *)(a + al) = xl;
      *(uint32_t *)(a + ah) = xh;
    } else if (4 * bb + 4 <= pb) {
      fzk_st32u(a, al, xl);
      fzk_st32u(a, ah, xh);
    } else {
      for (unsigned k2 = 0; 4 * bb + k2 < pb; k2++) {
        a[al + k2] = (uint8_t)(xl >> (8 * k2));
        a[ah + k2] = (uint8_t)(xh >> (8 * k2));
      }
    }
  }
  /* An outlier's stored value at p + at (any alignment). */
  static __device__ __forceinline__ void put_value(uint8_t *p, uint32_t at, T x) {
    fzk_st32u(p, at, (uint32_t)x);
    fzk_st32u(p, at + 4, (uint32_t)(x >> 32));
  }
};

/* The kernels' entry on 8-byte words (fzk_enc_body). */
template <int QK, int CK, int DIFF, int NEGA, int LEV>
__device__ __forceinline__ void
fzk_enc64_body(const fzk_desc &d, const uint8_t *__restrict__ d_in,
               const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out,
               uint64_t out_cap, uint64_t header_len, uint64_t table_off,
               uint32_t *__restrict__ d_crcs, fzk_u64 *__restrict__ lb,
               const uint32_t *__restrict__ d_tab) {
  FZK_C64_CHECK(QK, CK, DIFF, NEGA, LEV);
  fzk_enc_body<8, QK, CK, DIFF, NEGA, LEV>(d, d_in, d_qp, d_out, out_cap, header_len, table_off,
                                           d_crcs, lb, d_tab);
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

/* The decoder's sums of each warp's differences on 8-byte words, for the
 * running sums across warps (as fzk_dec32_diffs, whose opening comment
 * says how): halves(b, k, whole, &xl, &xh) gives a block's two halves
 * (fzk_dec64_body).  The warp's sum goes to s.ws[warp], and FZK_WT_BAD2
 * is flagged where bitpack's padding bits are not zero. */
template <bool FULL, int CK, class H>
__device__ __forceinline__ void fzk_dec64_diffs(fzk_d64 &s, H &halves, uint32_t &wpos,
                                                uint32_t wpos0, const fzk_wchunk &k, bool nega,
                                                const fzk_tp &tp) {
  constexpr bool bp = CK == FZK_C32_BITPACK, wd = CK == FZK_C32_RZE;
  const unsigned lane = k.lane;
  bool pad_bad = false;
  uint64_t acc = 0;
  const unsigned sh = lane ? lane - 1 : 0;
  wpos = wpos0;
  for (uint32_t b = k.b0, j = 0; b < k.b1; b++, j++) {
    uint32_t xl, xh;
    halves(b, j, fzk_bool<FULL>(), &xl, &xh);
    if (wd) {
      /* Words, zero past the chunk's last. */
      const uint64_t x = fzk_w64(xh, xl);
      acc += nega ? fzo_unnega64(x) : fzo_unzigzag64(x);
      continue;
    }
    if (!FULL) {
      const uint32_t rem = k.n - 32 * b;
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
    s.ws[k.warp] = wsum;
}

/* Bitpack after diff on 8-byte words: each warp's running sums of its own
 * diff words to s.e, and the warps' base, returned, once the block knows
 * it (as fzk_dec32_ddiff, a block at a time). */
template <bool FULL, class H>
__device__ __forceinline__ uint64_t fzk_dec64_ddiff(fzk_d64 &s, H &halves, uint32_t &wpos,
                                                    uint32_t wpos0, const fzk_wchunk &k,
                                                    uint64_t run, bool nega, const fzk_tp &tp) {
  const unsigned lane = k.lane;
  uint64_t r = run, pc = 0;
  wpos = wpos0;
  for (uint32_t b = k.b0, j = 0; b < k.b1; b++, j++) {
    const uint32_t i = 32 * b + lane;
    uint32_t xl, xh;
    halves(b, j, fzk_bool<FULL>(), &xl, &xh);
    uint64_t z = fzo_unzigzag64(fzk_w64(fzk_transpose32(xh, tp), fzk_transpose32(xl, tp)));
    if (!FULL && i >= k.n)
      z = 0;
    const uint64_t x = fzk_warp_incl64(z) + r;
    r = __shfl_sync(FZK_FULL, (fzk_u64)x, 31);
    uint64_t e = nega ? fzo_unnega64(x) : fzo_unzigzag64(x);
    if (!FULL && i >= k.n)
      e = 0;
    const uint64_t p = fzk_warp_incl64(e) + pc;
    pc = __shfl_sync(FZK_FULL, (fzk_u64)p, 31);
    s.e[i] = p;
  }
  if (lane == 0)
    s.ws[FZK_NW + k.warp] = pc;
  __syncthreads();
  uint64_t run2 = 0;
  for (unsigned w = 0; w < k.warp; w++)
    run2 += s.ws[FZK_NW + w];
  return run2;
}

/* The decoding of a chunk's 8-byte words once the chunk is open (as
 * fzk_dec32_words). */
template <int QK, int CK>
__device__ __forceinline__ void
fzk_dec64_words(fzk_d64 &s, const fzk_wchunk &k, const fzk_wflags &f, const fzk_dec_chunk &h,
                const fzk_qparams &q, const fzk_tp &tp, uint8_t *gout, int out_vec,
                uint32_t *__restrict__ d_status, uint32_t *__restrict__ d_crcs,
                const uint32_t *__restrict__ d_tab) {
  constexpr bool bp = CK == FZK_C32_BITPACK, wd = CK == FZK_C32_RZE;
  const uint32_t n = k.n, pb = k.pb, K = k.K, b0 = k.b0, b1 = k.b1;
  const unsigned lane = k.lane;
  const bool quant = f.quant, nega = f.nega, diff = f.diff, ddiff = f.ddiff;
  const uint32_t m = h.m;
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
    const uint32_t nx = sh > 28 && w + 1 < h.w1 ? s.r1[fzk_r1_at(w + 1)].x : 0;
    uint32_t mk = __funnelshift_r(e.x, nx, sh) & 15u;
    if (!FULL && 4 * b + 4 > pb) /* the plane ends inside these four bytes */
      mk &= (1u << (pb - 4 * b)) - 1;
    const uint32_t rk = e.y + __shfl_sync(FZK_FULL, h.wbase, w >> h.wsh) +
                        __popc(e.x & ((1u << sh) - 1));
    return __byte_perm(fzk_ld32u(s.c, h.ko + rk), 0, s.wt[FZK_WT_SEL + mk]);
  };
  /* Block b's two halves as the coder stored them: bitpack planes (in
   * order, from wpos on; lane p holds planes p and 32 + p), the word of
   * lane (rze on words: bytes 8 (32b + lane) .. +7, whose level-1 bitmap
   * byte and rank give its kept bytes), or shuffle planes. */
  uint32_t wpos = 0;
  auto halves = [&](uint32_t b, uint32_t j, auto whole, uint32_t *xl, uint32_t *xh) {
    constexpr bool FULL = decltype(whole)::value;
    if (bp) {
      const uint32_t nbits = __shfl_sync(FZK_FULL, h.my_nb, j);
      *xl = lane < nbits ? fzk_ld32u(s.c, wpos + 4 * lane) : 0;
      *xh = lane + 32 < nbits ? fzk_ld32u(s.c, wpos + 128 + 4 * lane) : 0;
      wpos += 4 * nbits;
    } else if (wd) {
      const uint32_t wi = 32 * b + lane;
      const bool in = FULL || wi < n;
      const uint32_t w = in ? wi >> 2 : 0, sh = 8 * (wi & 3);
      const uint2 e = s.r1[fzk_r1_at(w)];
      const uint32_t mk = in ? (e.x >> sh) & 0xffu : 0u;
      const uint32_t rk = e.y + __shfl_sync(FZK_FULL, h.wbase, w >> h.wsh) +
                          __popc(e.x & ((1u << sh) - 1));
      *xl = __byte_perm(fzk_ld32u(s.c, h.ko + rk), 0, s.wt[FZK_WT_SEL + (mk & 15u)]);
      *xh = __byte_perm(fzk_ld32u(s.c, h.ko + rk + __popc(mk & 15u)), 0,
                        s.wt[FZK_WT_SEL + (mk >> 4)]);
    } else {
      *xl = plane4(lane, b, whole);
      *xh = plane4(lane + 32, b, whole);
    }
  };
  /* The stored value of outlier word i: its entry in the side list, by
   * bisection of the ascending indices. */
  const uint8_t *cc = s.c + h.o;
  auto outlier = [&](uint32_t i) -> uint64_t {
    uint32_t lo = 0, hi = m;
    while (lo < hi) {
      uint32_t mid = (lo + hi) / 2;
      uint32_t im = cc[h.vl + 2 * mid] | (uint32_t)cc[h.vl + 2 * mid + 1] << 8;
      if (im < i)
        lo = mid + 1;
      else
        hi = mid;
    }
    const uint32_t a = h.o + h.vl + 2 * m + 8 * lo;
    return fzk_w64(fzk_ld32u(s.c, a + 4), fzk_ld32u(s.c, a));
  };

  auto decode = [&](auto whole, auto qonc) {
    constexpr bool FULL = decltype(whole)::value;
    constexpr int QON = decltype(qonc)::value;
    uint64_t run = 0;
    if (diff) {
      fzk_dec64_diffs<FULL, CK>(s, halves, wpos, h.wpos0, k, nega, tp);
      __syncthreads();
      if (s.wt[FZK_WT_BAD2]) {
        if (threadIdx.x == 0)
          atomicOr(d_status, 1u);
        return;
      }
      for (unsigned w = 0; w < k.warp; w++)
        run += s.ws[w];
    }
    const uint64_t run2 =
        ddiff ? fzk_dec64_ddiff<FULL>(s, halves, wpos, h.wpos0, k, run, nega, tp) : 0u;
    const bool al = out_vec != 0;
    uint64_t *gw = (uint64_t *)gout + 32 * b0 + lane;
    wpos = h.wpos0;
    for (uint32_t b = b0, j = 0; b < b1; b++, j++, gw += 32) {
      const uint32_t i = 32 * b + lane;
      uint64_t code;
      if (ddiff) {
        code = s.e[i] + run2;
      } else {
        uint32_t xl, xh;
        halves(b, j, whole, &xl, &xh);
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
      const uint32_t fl = quant && m ? __shfl_sync(FZK_FULL, my_obm, j) : 0;
      if (!FULL && i >= n)
        continue;
      uint64_t val = fzk_dq64<QON>(code, q);
      if ((fl >> lane) & 1u)
        val = outlier(i);
      if (FULL)
        *gw = val;
      else
        fzk_put64(gout, i, val, al);
    }
    fzk_dec_crc<FZK_DEC64_CRCW>(s, h, d_tab, d_crcs + k.c, k.warp);
  };
  fzk_built32<QK>(k.raw == k.cb && out_vec, q.step != 0 ? f.qk : FZK_Q_NONE, decode);
}

/* The kernels' entry on 8-byte words (fzk_dec_body). */
template <int QK, int CK, int DIFF, int NEGA, int LEV>
__device__ __forceinline__ void
fzk_dec64_body(const fzk_desc &d, const uint8_t *__restrict__ d_pay, uint64_t pay_len,
               const uint64_t *__restrict__ d_offs, const uint8_t *__restrict__ d_sizes16,
               const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out, int out_vec,
               uint32_t *__restrict__ d_status, uint32_t *__restrict__ d_crcs,
               const uint32_t *__restrict__ d_tab) {
  FZK_C64_CHECK(QK, CK, DIFF, NEGA, LEV);
  fzk_dec_body<8, QK, CK, DIFF, NEGA, LEV>(d, d_pay, pay_len, d_offs, d_sizes16, d_qp, d_out,
                                           out_vec, d_status, d_crcs, d_tab);
}

#endif
