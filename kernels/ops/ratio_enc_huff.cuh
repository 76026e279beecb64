/*
 * ratio_enc_huff.cuh - the ratio preset's entropy coder on the GPU: one
 * block codes one chunk's words into the bytes of the engine's
 * fze_huffman_encode (stage_huffman.c), written once for the device and
 * for a host model of it (tests/gpu/ratio_enc_huff_model.c).
 *
 * The engine cuts the words into 32 lanes of ceil(n/32) consecutive words,
 * each its own bit stream.  Here every lane is cut again into 8 segments,
 * one per thread (32 x 8 = the block's 256 threads), and the lanes' bits
 * are made exactly as one writer per lane would make them:
 *  - a segment's zero runs are its own except the one at its start and
 *    the one at its end, which may go on into its neighbours: a thread per
 *    lane joins those across its segments and gives each joined run to the
 *    segment it starts in, so the run tokens (one per set bit of the
 *    length, highest first, then a lone 0 when odd) are the engine's;
 *  - the histogram is counted with atomics (order-free; the small words,
 *    most of them, in shared memory), the number of direct symbols is
 *    chosen over the block (suffix sums and a cheapest per range of
 *    candidates, the lowest of equals as the engine's loop takes it);
 *  - the code lengths are the engine's rounds (the two-queue Huffman
 *    construction, every weight halved until no code is longer than 12
 *    bits): each round the block sorts the used symbols by (weight,
 *    symbol), packed in one u32 a symbol, with a bitonic network in shared
 *    memory, and one thread builds the tree in that array itself (the
 *    engine's in-place construction, stage_huffman.c), walking up from the
 *    deepest leaf to learn whether the round is the last; the canonical
 *    codes are then made over the block;
 *  - a first pass marks the words other than zero in a bitmap (a bit a
 *    word, 64 words a thread at a time, in 16-byte loads), so that a
 *    segment finds its edge runs and crosses its zero runs a bitmap word
 *    at a time and loads only its words other than zero;
 *  - a segment's tokens between its edge runs are made once, while the
 *    histogram is counted, and kept in the scratch (u16, at the segment's
 *    first word: never more tokens than words), so that the two passes
 *    after it read tokens instead of crossing the words again;
 *  - each segment sums its tokens' bits, a scan gives it its bit offset in
 *    its lane, and it writes its bytes; the (at most two) bytes it shares
 *    with a neighbour segment it leaves in shared memory, and a thread per
 *    lane ORs those together in a last phase.  So no byte is written by
 *    two threads, the output need not be aligned or zeroed, and nothing
 *    outside [out, out + length) is touched.
 * The engine's size limit is kept: nothing is written when the code would
 * not fit in out_cap bytes, and the result is then UINT64_MAX (the
 * engine's SIZE_MAX).  The exact length is always counted, which decides
 * as the engine's estimate-then-count does (the estimate can be at most
 * 31 bytes short of it).
 */
#ifndef FZK_RATIO_ENC_HUFF_CUH
#define FZK_RATIO_ENC_HUFF_CUH

#include "ops.h"
#include "ratio_phase.cuh"

#define FZRE_H_LANES FZE_HUFF_LANES
#define FZRE_H_SEGS 8u                       /* threads per lane */
#define FZRE_H_UNITS (FZRE_H_LANES * FZRE_H_SEGS) /* lane segments, one a thread */
#define FZRE_H_MAX_LEN FZR_CODE_MAX_LEN
#define FZRE_H_MAX_SYMS FZE_HUFF_SYMS
#define FZRE_H_RUNS FZE_HUFF_RUNS
#define FZRE_H_MAX_DIRECT (FZRE_H_MAX_SYMS - 1u - FZRE_H_RUNS)
#define FZRE_H_TOK_BIG FZRE_H_MAX_SYMS /* a word at or above 4096 */
#define FZRE_H_NTOK (FZRE_H_TOK_BIG + FZRE_H_RUNS + 1u)
#define FZRE_H_SMALL 1024u /* words counted in shared memory */
/* A lane may hold at most 2^15 words (run symbols end at 2^15). */
#define FZRE_HUFF_MAX_N ((uint64_t)FZRE_H_LANES << FZRE_H_RUNS)
/* A round's sort key: the weight above the symbol's 12 bits.  With two
 * used symbols or more no weight reaches n (each takes a token), so a
 * weight has 20 bits. */
#define FZRE_H_SYM_BITS 12u

/* The block's shared state of one chunk's coding (about 21 KiB). */
typedef struct fzre_hf {
  uint64_t len;  /* the result: the stream's bytes, or UINT64_MAX */
  uint64_t head; /* bytes before the lanes */
  uint32_t fail; /* nothing to write: len is UINT64_MAX */
  uint32_t lv;   /* the stage's: 0, BITS only; 1 (version 7), the shorter form */
  uint32_t form; /* the form being built, then the stream's (FZE_HUFF_FORM_*) */
  uint64_t pb, pc; /* lv 1: the stream's bits in either form (fzre_h_total) */
  uint32_t e, nsym;
  uint32_t k, built; /* the code's used symbols; its lengths are made */
  unsigned long long hbits; /* the stream's bits by the code (fzre_h_code_count) */
  uint32_t hnum[FZRE_H_MAX_LEN + 1]; /* the symbols of each length */
  uint32_t runs[FZRE_H_RUNS + 1];    /* BITS symbols of 2^k zeros (0: lone zeros) */
  uint32_t rc[FZRE_H_RUNS + 1];      /* lv 1: CLASS symbols of runs (0: lone zeros) */
  uint32_t lane_off[FZRE_H_LANES];   /* a lane's first byte after head */
  uint32_t lane_bytes[FZRE_H_LANES];
  uint16_t lead[FZRE_H_UNITS], trail[FZRE_H_UNITS]; /* a segment's edge zeros */
  uint16_t hrun[FZRE_H_UNITS], trun[FZRE_H_UNITS];  /* its edge runs, joined */
  uint32_t bits[FZRE_H_UNITS];       /* its bits, then its bit offset (first,
                                    * choose_direct's range sums) */
  uint16_t ntok[FZRE_H_UNITS];       /* its middle's tokens (fzre_h_scan) */
  uint32_t pidx[FZRE_H_UNITS][2];    /* its bytes shared with neighbours */
  uint8_t pval[FZRE_H_UNITS][2], pn[FZRE_H_UNITS];
  /* The histogram of the small words (most of them) is counted here, as
   * shared-memory atomics are far cheaper than global ones, then moved to
   * the table; choose_direct's ranges' cheapest take its place, then a
   * round's sort keys, weights and tree (fzre_h_round_*). */
  union {
    uint32_t small[FZRE_H_SMALL];
    uint32_t tree[FZRE_H_MAX_SYMS];
    struct {
      uint64_t best[FZRE_H_UNITS];
      uint16_t best_e[FZRE_H_UNITS];
    } c;
    /* the canonical codes: each thread's count of each length among its
     * symbols, then the count before its own */
    fzr_canon_row cnt[FZR_NT];
  } x;
} fzre_hf;

#ifdef __cplusplus
static_assert(sizeof(fzre_hf) <= 24 * 1024, "fzre_hf fits the shared budget");
static_assert(FZRE_HUFF_MAX_N <= (1u << (32 - FZRE_H_SYM_BITS)), "a weight fits a key");
#else
_Static_assert(sizeof(fzre_hf) <= 24 * 1024, "fzre_hf fits the shared budget");
_Static_assert(FZRE_HUFF_MAX_N <= (1u << (32 - FZRE_H_SYM_BITS)), "a weight fits a key");
#endif

/* ---- scratch: the code's tables, 256-byte aligned ---- */

static inline FZR_HD uint64_t fzre_h_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

#define FZRE_H_HIST 0u                                          /* u32[4097] */
#define FZRE_H_ABOVE (FZRE_H_HIST + 16640u)                     /* u32[4097] */
#define FZRE_H_FREQ (FZRE_H_ABOVE + 16640u)                     /* u32[4096] */
#define FZRE_H_ORDER (FZRE_H_FREQ + 16384u)                     /* u16[4096] */
#define FZRE_H_LENS (FZRE_H_ORDER + 8192u)                      /* u8[4096] */
#define FZRE_H_CODE (FZRE_H_LENS + 4096u)                       /* u16[4096] */
#define FZRE_H_TCODE (FZRE_H_CODE + 8192u)                      /* u16[4112] */
#define FZRE_H_TLEN (FZRE_H_TCODE + 8448u)                      /* u8[4112] */
#define FZRE_H_SYMS (FZRE_H_TLEN + 4352u)                       /* u16[4096] */
#define FZRE_H_TOKS (FZRE_H_SYMS + 8192u)                       /* u16[n] */

/* The tables, the segments' tokens (a u16 a word), then the bitmap of
 * the words other than zero (a u64 per 64 words). */
static inline FZR_HD uint64_t fzre_h_mask_off(uint64_t n) { return FZRE_H_TOKS + fzre_h_up(2 * n, 256); }

static inline FZR_HD uint64_t fzre_huff_scratch(uint64_t n, unsigned w) {
  (void)w;
  return fzre_h_mask_off(n) + fzre_h_up(8 * ((n + 63) / 64), 256);
}

/* The tables (scratch is 256-byte aligned, so every one is aligned). */
typedef struct fzre_htab {
  uint32_t *hist, *above, *freq;
  uint16_t *order, *code, *tcode, *syms, *toks;
  uint8_t *lens, *tlen;
} fzre_htab;

static inline FZR_HD fzre_htab fzre_htab_of(uint8_t *s) {
  fzre_htab b;
  b.hist = (uint32_t *)(s + FZRE_H_HIST);
  b.above = (uint32_t *)(s + FZRE_H_ABOVE);
  b.freq = (uint32_t *)(s + FZRE_H_FREQ);
  b.order = (uint16_t *)(s + FZRE_H_ORDER);
  b.lens = s + FZRE_H_LENS;
  b.code = (uint16_t *)(s + FZRE_H_CODE);
  b.tcode = (uint16_t *)(s + FZRE_H_TCODE);
  b.tlen = s + FZRE_H_TLEN;
  b.syms = (uint16_t *)(s + FZRE_H_SYMS);
  b.toks = (uint16_t *)(s + FZRE_H_TOKS);
  return b;
}

/* The bitmap of a chunk of n words. */
static inline FZR_HD uint64_t *fzre_h_mask_of(uint8_t *s, uint64_t n) {
  return (uint64_t *)(s + fzre_h_mask_off(n));
}

/* Loads from addresses aligned for them (plain loads on the device; the
 * host model copies, which C's aliasing rules ask). */
static inline FZR_HD uint32_t fzre_h_ld32a(const uint8_t *p) {
#ifdef __CUDA_ARCH__
  return *(const uint32_t *)p;
#else
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
#endif
}

static inline FZR_HD uint64_t fzre_h_ld64a(const uint8_t *p) {
#ifdef __CUDA_ARCH__
  return *(const uint64_t *)p;
#else
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
#endif
}

/* A word of w (4 or 8) bytes, little-endian, or a byte (bytes: w is 1);
 * words may be unaligned, and are then read a byte at a time. */
static inline FZR_HD uint64_t fzre_h_ldw(const uint8_t *p, unsigned w, unsigned bytes) {
  if (bytes)
    return p[0];
  if (((uintptr_t)p & (w - 1)) == 0)
    return w == 4 ? fzre_h_ld32a(p) : fzre_h_ld64a(p);
  uint64_t v = 0;
  for (unsigned b = 0; b < w; b++)
    v |= (uint64_t)p[b] << (8 * b);
  return v;
}

/* Bit k set where byte k of the 8 in v is not zero. */
static inline FZR_HD unsigned fzre_h_bytes8(uint64_t v) {
  const uint64_t lo7 = 0x7f7f7f7f7f7f7f7full;
  uint64_t hi = (((v & lo7) + lo7) | v) & ~lo7; /* bit 7 of each byte */
  return (unsigned)((hi >> 7) * 0x0102040810204080ull >> 56);
}

/* The bits of the 64 words from p on (cnt of them, 1 <= cnt <= 64): bit
 * k set where word k is not zero.  A whole group of aligned words is read
 * in 16-byte loads on the device, all issued before any is tested; bytes
 * (the byte planes' words) in 8-byte loads. */
static inline FZR_HD uint64_t fzre_h_bits64(const uint8_t *p, unsigned w, unsigned bytes,
                                            unsigned cnt) {
  uint64_t m = 0;
  if (bytes && cnt == 64 && ((uintptr_t)p & 7) == 0) {
    FZR_UNROLL
    for (unsigned k = 0; k < 8; k++)
      m |= (uint64_t)fzre_h_bytes8(fzre_h_ld64a(p + 8 * k)) << (8 * k);
    return m;
  }
#if defined(__CUDA_ARCH__) && defined(__CUDACC__)
  if (!bytes && cnt == 64 && ((uintptr_t)p & 15) == 0) {
    const uint4 *q = (const uint4 *)p;
    if (w == 4) {
      FZR_UNROLL
      for (unsigned k = 0; k < 16; k++) {
        const uint4 v = q[k];
        m |= (uint64_t)((v.x != 0) | (v.y != 0) << 1 | (v.z != 0) << 2 | (v.w != 0) << 3) << (4 * k);
      }
    } else {
      FZR_UNROLL
      for (unsigned k = 0; k < 32; k++) {
        const uint4 v = q[k];
        m |= (uint64_t)(((v.x | v.y) != 0) | ((v.z | v.w) != 0) << 1) << (2 * k);
      }
    }
    return m;
  }
#endif
  for (unsigned k = 0; k < cnt; k++)
    m |= (uint64_t)(fzre_h_ldw(p + (uint64_t)k * w, w, bytes) != 0) << k;
  return m;
}

/* The bitmap of the n words, a u64 a thread at a time. */
static inline FZR_HD void fzre_h_mask(const uint8_t *words, unsigned w, unsigned bytes,
                                      uint64_t n, uint64_t *mask, unsigned t, unsigned nt) {
  for (uint64_t g = t; g < (n + 63) / 64; g += nt) {
    uint64_t j = 64 * g;
    mask[g] = fzre_h_bits64(words + j * w, w, bytes, n - j < 64 ? (unsigned)(n - j) : 64u);
  }
}

static inline FZR_HD unsigned fzre_h_ctz64(uint64_t v) {
#ifdef __CUDA_ARCH__
  return (unsigned)__ffsll((long long)v) - 1u;
#else
  return (unsigned)__builtin_ctzll(v);
#endif
}

static inline FZR_HD unsigned fzre_h_clz64(uint64_t v) {
#ifdef __CUDA_ARCH__
  return (unsigned)__clzll((long long)v);
#else
  return (unsigned)__builtin_clzll(v);
#endif
}

/* The first word in [j, b) other than zero, or b. */
static inline FZR_HD uint64_t fzre_h_next1(const uint64_t *mask, uint64_t j, uint64_t b) {
  while (j < b) {
    uint64_t v = mask[j / 64] >> (j % 64);
    if (v) {
      uint64_t r = j + fzre_h_ctz64(v);
      return r < b ? r : b;
    }
    j = (j | 63) + 1;
  }
  return b;
}

/* One past the last word in [a, b) other than zero, or a. */
static inline FZR_HD uint64_t fzre_h_last1(const uint64_t *mask, uint64_t a, uint64_t b) {
  while (b > a) {
    uint64_t j = b - 1, v = mask[j / 64] << (63 - j % 64);
    if (v) {
      uint64_t r = j - fzre_h_clz64(v);
      return r >= a ? r + 1 : a;
    }
    b = j - j % 64;
  }
  return a;
}

/* Segment u's words: [*lo, *hi) of the chunk (u = lane * 8 + segment). */
static inline FZR_HD void fzre_h_seg(uint64_t n, unsigned u, uint64_t *lo, uint64_t *hi) {
  uint64_t cap = (n + FZRE_H_LANES - 1) / FZRE_H_LANES, sc = (cap + FZRE_H_SEGS - 1) / FZRE_H_SEGS;
  uint64_t l0 = (uint64_t)(u / FZRE_H_SEGS) * cap, l1 = l0 + cap < n ? l0 + cap : n;
  uint64_t s = u % FZRE_H_SEGS;
  if (l1 < l0)
    l1 = l0;
  *lo = l0 + s * sc < l1 ? l0 + s * sc : l1;
  *hi = l0 + (s + 1) * sc < l1 ? l0 + (s + 1) * sc : l1;
}

/* ---- the tokens of a segment, three ways ---- */

/* The writer of one segment's bits, which start at bit b0 of its lane:
 * bytes wholly its own go to the lane, the one it shares with the segment
 * before (b0 not on a byte) and the last one it shares with the segment
 * after go to its slots. */
typedef struct fzre_h_bw {
  uint64_t acc;
  unsigned nb;
  uint32_t bi, first; /* the byte being filled; the first one, if shared */
  uint8_t *lane;
  fzre_hf *H;
  unsigned u;
} fzre_h_bw;

static inline FZR_HD void fzre_h_byte(fzre_h_bw *bw, unsigned v, int last) {
  if (last || bw->bi == bw->first) {
    unsigned k = bw->H->pn[bw->u]++;
    bw->H->pidx[bw->u][k] = bw->bi;
    bw->H->pval[bw->u][k] = (uint8_t)v;
  } else {
    bw->lane[bw->bi] = (uint8_t)v;
  }
  bw->bi++;
}

static inline FZR_HD void fzre_h_put(fzre_h_bw *bw, uint64_t v, unsigned n) {
  bw->acc |= v << bw->nb;
  bw->nb += n;
  while (bw->nb >= 8) {
    fzre_h_byte(bw, (unsigned)(bw->acc & 0xffu), 0);
    bw->acc >>= 8;
    bw->nb -= 8;
  }
}

/* What a token does in each pass: counted in the histogram (only the
 * words and runs inside a segment, before the edges are joined), its bits
 * summed, or written. */
enum { FZRE_HM_HIST = 0, FZRE_HM_BITS = 1, FZRE_HM_WRITE = 2 };

typedef struct fzre_h_tk {
  int mode;
  unsigned w, bytes;
  uint32_t *hist, *small, *runs;
  const uint16_t *tcode;
  const uint8_t *tlen;
  uint64_t bits;
  fzre_h_bw *bw;
  uint16_t *toks; /* FZRE_HM_HIST: where the tokens are kept, when not 0 */
  unsigned ntok;
  uint32_t *rc;  /* FZRE_HM_HIST, lv 1: H->rc */
  unsigned lv;   /* H->lv: the kept tokens are CLASS ones (a run: its token, its raw bits) */
  unsigned form; /* FZRE_HM_BITS, FZRE_HM_WRITE: the stream's form */
} fzre_h_tk;

/* A token: a word's (v the word, read for the escape), or a run's (v, in
 * the CLASS form, its raw low bits). */
static inline FZR_HD void fzre_h_token(fzre_h_tk *k, unsigned tk, uint64_t v) {
  const bool raw = k->form == FZE_HUFF_FORM_CLASS && tk > FZRE_H_TOK_BIG;
  if (k->mode == FZRE_HM_HIST) {
    if (k->toks)
      k->toks[k->ntok++] = (uint16_t)tk;
    if (tk > FZRE_H_TOK_BIG)
      FZR_ATOMIC_ADD(&k->runs[tk - FZRE_H_TOK_BIG], 1u);
    else if (tk == 0)
      FZR_ATOMIC_ADD(&k->runs[0], 1u);
    else if (tk < FZRE_H_SMALL)
      FZR_ATOMIC_ADD(&k->small[tk], 1u);
    else
      FZR_ATOMIC_ADD(&k->hist[tk], 1u);
    return;
  }
  unsigned l = k->tlen[tk];
  if (k->mode == FZRE_HM_BITS) {
    k->bits += (l & 0x7fu) + ((l & 0x80u) ? 8u * k->w : 0u) + (raw ? tk - FZRE_H_TOK_BIG : 0u);
    return;
  }
  fzre_h_put(k->bw, k->tcode[tk], l & 0x7fu);
  if (raw)
    fzre_h_put(k->bw, v, tk - FZRE_H_TOK_BIG);
  if (l & 0x80u) { /* the escape: the raw word follows */
    if (k->w == 8) {
      fzre_h_put(k->bw, v & 0xffffffffu, 32);
      fzre_h_put(k->bw, v >> 32, 32);
    } else {
      fzre_h_put(k->bw, v, k->bytes ? 8u : 32u);
    }
  }
}

/* A run of r zero words.  BITS: a token per set bit above bit 0, highest
 * first, then a lone zero when r is odd.  CLASS: a lone zero when r is 1,
 * else the token of r's highest bit j with r's j low bits.  Counted for
 * the histogram (lv 1: in both forms, and kept as a CLASS token and, in
 * the slot after it, its raw bits: never more slots than words). */
static inline FZR_HD void fzre_h_run(fzre_h_tk *k, uint64_t r) {
  const unsigned j = 63u - fzre_h_clz64(r);
  if (k->mode == FZRE_HM_HIST && k->lv) {
    if (k->toks) {
      k->toks[k->ntok++] = (uint16_t)(r == 1 ? 0u : FZRE_H_TOK_BIG + j);
      if (r > 1)
        k->toks[k->ntok++] = (uint16_t)(r - ((uint64_t)1 << j));
    }
    FZR_ATOMIC_ADD(&k->rc[r == 1 ? 0u : j], 1u);
    for (uint64_t m = r >> 1; m; m &= m - 1)
      FZR_ATOMIC_ADD(&k->runs[fzre_h_ctz64(m) + 1], 1u);
    if (r & 1u)
      FZR_ATOMIC_ADD(&k->runs[0], 1u);
    return;
  }
  if (k->mode != FZRE_HM_HIST && k->form == FZE_HUFF_FORM_CLASS) {
    fzre_h_token(k, r == 1 ? 0u : FZRE_H_TOK_BIG + j, r - ((uint64_t)1 << j));
    return;
  }
  for (int b = FZRE_H_RUNS; b >= 1; b--)
    if ((r >> b) & 1u)
      fzre_h_token(k, FZRE_H_TOK_BIG + (unsigned)b, 0);
  if (r & 1u)
    fzre_h_token(k, 0, 0);
}

/* The tokens of words [a, b), which start and end with a word other than
 * zero (or are empty), so that the runs inside are whole: the words other
 * than zero found in the bitmap, and only they loaded. */
static inline FZR_HD void fzre_h_middle(fzre_h_tk *k, const uint8_t *words, const uint64_t *mask,
                                          uint64_t a, uint64_t b) {
  unsigned w = k->w;
  for (uint64_t j = a; j < b;) {
    uint64_t v = fzre_h_ldw(words + j * w, w, k->bytes);
    fzre_h_token(k, v < FZRE_H_TOK_BIG ? (unsigned)v : FZRE_H_TOK_BIG, v);
    uint64_t nx = fzre_h_next1(mask, ++j, b);
    if (nx > j)
      fzre_h_run(k, nx - j);
    j = nx;
  }
}

/* The kept tokens of words from j on, again: a word's token moves on by
 * one word, a run's by its length (lv 1: a CLASS token and its raw bits,
 * coded in the stream's form); the raw word of a token coded as the
 * escape (any word from E on) is read again where it is written. */
static inline FZR_HD void fzre_h_replay(fzre_h_tk *k, const uint16_t *toks, unsigned cnt,
                                        const uint8_t *words, uint64_t j) {
  for (unsigned q = 0; q < cnt; q++) {
    unsigned tk = toks[q];
    uint64_t v = 0;
    if (tk > FZRE_H_TOK_BIG) {
      uint64_t run = (uint64_t)1 << (tk - FZRE_H_TOK_BIG);
      if (k->lv) {
        run += toks[++q];
        fzre_h_run(k, run);
      } else {
        fzre_h_token(k, tk, 0);
      }
      j += run;
      continue;
    }
    if (k->mode == FZRE_HM_WRITE && (k->tlen[tk] & 0x80u))
      v = fzre_h_ldw(words + j * k->w, k->w, k->bytes);
    fzre_h_token(k, tk, v);
    j++;
  }
}

/* ---- the phases ---- */

static inline FZR_HD void fzre_h_clear(fzre_hf *H, uint8_t *scratch, unsigned t, unsigned nt) {
  fzre_htab b = fzre_htab_of(scratch);
  for (unsigned i = FZRE_H_SMALL + t; i <= FZRE_H_MAX_SYMS; i += nt)
    b.hist[i] = 0;
  for (unsigned i = t; i < FZRE_H_SMALL; i += nt)
    H->x.small[i] = 0;
  for (unsigned i = t; i <= FZRE_H_RUNS; i += nt)
    H->runs[i] = H->rc[i] = 0;
  for (unsigned u = t; u < FZRE_H_UNITS; u += nt)
    H->pn[u] = 0;
}

/* Each segment: its edge zeros, the histogram of the rest. */
static inline FZR_HD void fzre_h_scan(fzre_hf *H, const uint8_t *words, unsigned w,
                                      unsigned bytes, uint64_t n, uint8_t *scratch, unsigned t,
                                      unsigned nt) {
  fzre_htab b = fzre_htab_of(scratch);
  const uint64_t *mask = fzre_h_mask_of(scratch, n);
  for (unsigned u = t; u < FZRE_H_UNITS; u += nt) {
    uint64_t lo, hi, a, z;
    fzre_h_seg(n, u, &lo, &hi);
    a = fzre_h_next1(mask, lo, hi);
    z = fzre_h_last1(mask, a, hi);
    H->lead[u] = (uint16_t)(a - lo);
    H->trail[u] = (uint16_t)(a == hi ? hi - lo : hi - z);
    fzre_h_tk k = {FZRE_HM_HIST, w, bytes, b.hist, H->x.small, H->runs, 0, 0, 0, 0,
                   b.toks + lo,  0, H->rc, H->lv, 0};
    fzre_h_middle(&k, words, mask, a, z);
    H->ntok[u] = (uint16_t)k.ntok;
  }
}

/* Lane l: its edge runs joined across segments, each given to the
 * segment it starts in (hrun when at the segment's first word, trun when
 * after its last nonzero one), and counted. */
static inline FZR_HD void fzre_h_join(fzre_hf *H, uint64_t n, unsigned t, unsigned nt) {
  for (unsigned l = t; l < FZRE_H_LANES; l += nt) {
    int open = -1, at_head = 0;
    uint64_t run = 0;
    fzre_h_tk k = {FZRE_HM_HIST, 0, 0, 0, 0, H->runs, 0, 0, 0, 0, 0, 0, H->rc, H->lv, 0};
    for (unsigned s = 0; s <= FZRE_H_SEGS; s++) {
      unsigned u = l * FZRE_H_SEGS + s;
      uint64_t lo = 0, hi = 0, len = 0;
      if (s < FZRE_H_SEGS) {
        fzre_h_seg(n, u, &lo, &hi);
        len = hi - lo;
        H->hrun[u] = H->trun[u] = 0;
      }
      if (len && H->lead[u] == len) { /* all zero: the run goes on */
        if (open < 0) {
          open = (int)u;
          at_head = 1;
          run = 0;
        }
        run += len;
        continue;
      }
      if (open >= 0 && len)
        run += H->lead[u];
      if (open >= 0) {
        if (at_head)
          H->hrun[open] = (uint16_t)run;
        else
          H->trun[open] = (uint16_t)run;
        fzre_h_run(&k, run);
        open = -1;
      } else if (len && H->lead[u]) {
        H->hrun[u] = H->lead[u];
        fzre_h_run(&k, H->lead[u]);
      }
      if (len && H->trail[u]) {
        open = (int)u;
        at_head = 0;
        run = H->trail[u];
      }
    }
  }
}

/* The small words' counts into the table. */
static inline FZR_HD void fzre_h_merge(fzre_hf *H, uint8_t *scratch, unsigned t, unsigned nt) {
  fzre_htab b = fzre_htab_of(scratch);
  for (unsigned i = t; i < FZRE_H_SMALL; i += nt)
    b.hist[i] = H->x.small[i];
}

/* The code lengths as the engine's code_lengths makes them: rounds of the
 * two-queue construction over the used symbols sorted by (weight,
 * symbol), a leaf taken before an internal node of equal weight, every
 * weight halved (rounding up) for another round while a leaf is deeper
 * than 12.  A round's keys, weight above symbol, are sorted in shared
 * memory by a bitonic network (the keys are unique, so any sort gives
 * the engine's order), padded to a power of two with keys above any. */
static inline FZR_HD uint32_t fzre_h_pow2(uint32_t k) {
  uint32_t p = 2;
  while (p < k)
    p *= 2;
  return p;
}

/* Round r's keys: the used symbols (in the last round's order, or in
 * symbol order in the first) with their weights, padded to p. */
static inline FZR_HD void fzre_h_round_keys(fzre_hf *H, uint8_t *scratch, unsigned r,
                                            uint32_t p, unsigned t, unsigned nt) {
  fzre_htab b = fzre_htab_of(scratch);
  const uint16_t *src = r ? b.order : b.syms;
  uint32_t k = H->k;
  for (uint32_t i = t; i < p; i += nt) {
    uint32_t key = UINT32_MAX;
    if (i < k) {
      uint32_t s = src[i];
      key = fzo_huff_weight(b.freq[s], r) << FZRE_H_SYM_BITS | s;
    }
    H->x.tree[i] = key;
  }
}

/* One pass of the bitonic network over p keys: the pairs `stride`
 * apart, each in its block of `size` ascending or descending. */
static inline FZR_HD void fzre_h_round_sort(fzre_hf *H, uint32_t p, uint32_t size,
                                            uint32_t stride, unsigned t, unsigned nt) {
  uint32_t *a = H->x.tree, half = p / 2;
  for (uint32_t i = t; i < half; i += nt) {
    uint32_t lo = i / stride * 2 * stride + i % stride, hi = lo + stride;
    uint32_t x = a[lo], y = a[hi];
    if ((x > y) == ((lo & size) == 0)) {
      a[lo] = y;
      a[hi] = x;
    }
  }
}

/* The sorted keys into the round's order (for its lengths) and weights
 * (for its tree). */
static inline FZR_HD void fzre_h_round_split(fzre_hf *H, uint8_t *scratch, unsigned t,
                                             unsigned nt) {
  fzre_htab b = fzre_htab_of(scratch);
  for (uint32_t i = t; i < H->k; i += nt) {
    uint32_t key = H->x.tree[i];
    b.order[i] = (uint16_t)(key & ((1u << FZRE_H_SYM_BITS) - 1));
    H->x.tree[i] = key >> FZRE_H_SYM_BITS;
  }
}

/* Thread 0: the round's tree in its array of weights (ops.h, as the
 * engine builds it), and whether it is the last round. */
static inline FZR_HD void fzre_h_round_tree(fzre_hf *H) {
  H->built = fzo_huff_tree(H->x.tree, H->k, FZRE_H_MAX_LEN) <= FZRE_H_MAX_LEN;
}

/* The last round's lengths to their symbols. */
static inline FZR_HD void fzre_h_round_take(fzre_hf *H, uint8_t *scratch, unsigned t,
                                            unsigned nt) {
  fzre_htab b = fzre_htab_of(scratch);
  for (uint32_t i = t; i < H->k; i += nt)
    b.lens[b.order[i]] = (uint8_t)H->x.tree[i];
}

/* choose_direct over the block: above[s] (the words at or above s) is a
 * suffix sum of the histogram, cut into a range a thread (each range's
 * sum, then one thread's scan of the sums, then each range's own), and
 * each range's cheapest E, the lowest of equals; thread 0 then takes the
 * cheapest of the ranges in order, which is the engine's choice. */
static inline FZR_HD void fzre_h_range(unsigned t, unsigned nt, unsigned *lo, unsigned *hi) {
  unsigned per = (FZRE_H_MAX_SYMS + 1 + nt - 1) / nt;
  *lo = per * t < FZRE_H_MAX_SYMS + 1 ? per * t : FZRE_H_MAX_SYMS + 1;
  *hi = per * (t + 1) < FZRE_H_MAX_SYMS + 1 ? per * (t + 1) : FZRE_H_MAX_SYMS + 1;
}

static inline FZR_HD void fzre_h_sums(fzre_hf *H, uint8_t *scratch, unsigned t, unsigned nt) {
  fzre_htab b = fzre_htab_of(scratch);
  for (unsigned u = t; u < FZRE_H_UNITS; u += nt) {
    unsigned lo, hi;
    uint32_t sum = 0;
    fzre_h_range(u, FZRE_H_UNITS, &lo, &hi);
    for (unsigned s = lo; s < hi; s++)
      sum += b.hist[s];
    H->bits[u] = sum;
  }
}

/* Thread 0: each range's words above it. */
static inline FZR_HD void fzre_h_tails(fzre_hf *H) {
  uint32_t acc = 0;
  for (unsigned u = FZRE_H_UNITS; u-- > 0;) {
    uint32_t v = H->bits[u];
    H->bits[u] = acc;
    acc += v;
  }
}

static inline FZR_HD void fzre_h_above(fzre_hf *H, unsigned w, uint8_t *scratch, unsigned t,
                                       unsigned nt) {
  fzre_htab b = fzre_htab_of(scratch);
  for (unsigned u = t; u < FZRE_H_UNITS; u += nt) {
    unsigned lo, hi;
    fzre_h_range(u, FZRE_H_UNITS, &lo, &hi);
    uint32_t acc = H->bits[u];
    for (unsigned s = hi; s-- > lo;) {
      acc += b.hist[s];
      b.above[s] = acc;
    }
    uint64_t best = UINT64_MAX;
    unsigned e = 0;
    for (unsigned s = lo < 1 ? 1 : lo; s < hi && s <= FZRE_H_MAX_DIRECT; s++) {
      uint64_t cost = 4 * (uint64_t)(s + 1) + b.above[s] * (8 * (uint64_t)w + 8);
      if (cost < best) {
        best = cost;
        e = s;
      }
    }
    H->x.c.best[u] = best;
    H->x.c.best_e[u] = (uint16_t)e;
  }
}

/* Thread 0: the number of direct symbols (the ranges' cheapest, in
 * order). */
static inline FZR_HD void fzre_h_pick(fzre_hf *H) {
  uint64_t best = UINT64_MAX;
  unsigned e = 1;
  for (unsigned u = 0; u < FZRE_H_UNITS; u++)
    if (H->x.c.best[u] < best) {
      best = H->x.c.best[u];
      e = H->x.c.best_e[u];
    }
  H->e = e;
  H->nsym = e + 1 + FZRE_H_RUNS;
}

/* Thread t's symbols: their frequencies, no length yet, and its count of
 * used ones (in bits[t], free until the lanes' bits). */
static inline FZR_HD void fzre_h_freqs(fzre_hf *H, uint8_t *scratch, unsigned t, unsigned nt) {
  fzre_htab b = fzre_htab_of(scratch);
  unsigned e = H->e;
  uint64_t lo, hi;
  uint32_t used = 0;
  fzr_share(H->nsym, t, nt, &lo, &hi);
  for (unsigned s = lo; s < hi; s++) {
    const uint32_t *runs = H->form == FZE_HUFF_FORM_CLASS ? H->rc : H->runs;
    uint32_t f = s == 0 ? runs[0] : s < e ? b.hist[s] : s == e ? b.above[e] : runs[s - e];
    b.freq[s] = f;
    b.lens[s] = 0;
    used += f != 0;
  }
  H->bits[t] = used;
}

/* Thread 0: where each thread's used symbols go. */
static inline FZR_HD void fzre_h_used(fzre_hf *H, unsigned nt) {
  uint32_t k = fzr_sums_before(H->bits, nt);
  H->k = k;
  H->built = k == 1;
  H->hbits = 0;
}

/* The bytes before the lanes: E, the nsym code lengths' nibbles, the
 * lanes' byte counts. */
static inline FZR_HD uint64_t fzre_h_head(uint32_t nsym) {
  return 2 + (nsym + 1) / 2 + 4 * FZRE_H_LANES;
}

/* The used symbols in symbol order; one used symbol gets length 1 (the
 * engine's special case). */
static inline FZR_HD void fzre_h_syms(fzre_hf *H, uint8_t *scratch, unsigned t, unsigned nt) {
  fzre_htab b = fzre_htab_of(scratch);
  uint64_t lo, hi;
  uint32_t k = H->bits[t];
  fzr_share(H->nsym, t, nt, &lo, &hi);
  for (unsigned s = lo; s < hi; s++)
    if (b.freq[s]) {
      b.syms[k++] = (uint16_t)s;
      if (H->k == 1)
        b.lens[s] = 1;
    }
}

/* The canonical codes by (length, symbol), over the block: each thread
 * counts the lengths among its share of the symbols (and their bits in
 * the stream), the counts before each thread are summed a length a
 * thread, and each thread gives its symbols the length's first code plus
 * the symbols of that length before them. */
static inline FZR_HD void fzre_h_code_count(fzre_hf *H, uint8_t *scratch, unsigned t,
                                            unsigned nt) {
  fzre_htab b = fzre_htab_of(scratch);
  uint64_t lo, hi;
  uint64_t bits = 0;
  for (unsigned l = 0; l <= FZRE_H_MAX_LEN; l++)
    H->x.cnt[t][l] = 0;
  fzr_share(H->nsym, t, nt, &lo, &hi);
  const unsigned e = H->e, raw = H->form == FZE_HUFF_FORM_CLASS;
  for (unsigned s = lo; s < hi; s++) {
    unsigned l = b.lens[s];
    if (l) {
      H->x.cnt[t][l]++;
      /* and a CLASS run's raw bits */
      bits += (uint64_t)b.freq[s] * (l + (raw && s > e ? s - e : 0u));
    }
  }
  if (bits)
    FZR_ATOMIC_ADD(&H->hbits, (unsigned long long)bits);
}

static inline FZR_HD void fzre_h_code_sums(fzre_hf *H, unsigned t, unsigned nt) {
  fzr_canon_sums(H->x.cnt, H->hnum, t, nt);
}

/* The codes stored bit-reversed; thread 0: whether the engine's estimate
 * already says the stream cannot fit. */
static inline FZR_HD void fzre_h_code_put(fzre_hf *H, unsigned w, uint64_t out_cap,
                                          uint8_t *scratch, unsigned t, unsigned nt) {
  fzre_htab b = fzre_htab_of(scratch);
  uint64_t lo, hi;
  unsigned first[FZRE_H_MAX_LEN + 1];
  fzr_canon_first(H->x.cnt, H->hnum, t, first);
  fzr_share(H->nsym, t, nt, &lo, &hi);
  for (unsigned s = lo; s < hi; s++) {
    unsigned l = b.lens[s];
    if (l)
      b.code[s] = (uint16_t)fzr_rev(first[l]++, l);
  }
  if (t == 0) {
    H->head = fzre_h_head(H->nsym);
    uint64_t bits = (uint64_t)b.freq[H->e] * 8u * w + H->hbits;
    if (H->head + (bits + 7) / 8 > out_cap) {
      H->fail = 1;
      H->len = UINT64_MAX;
    }
  }
}

/* Each token's code and length (the escape's length with 0x80 set). */
static inline FZR_HD void fzre_h_tokens(fzre_hf *H, uint8_t *scratch, unsigned t, unsigned nt) {
  fzre_htab b = fzre_htab_of(scratch);
  unsigned e = H->e;
  for (unsigned tk = t; tk < FZRE_H_NTOK; tk += nt) {
    unsigned sy = tk < e ? tk : tk <= FZRE_H_TOK_BIG ? e : e + (tk - FZRE_H_TOK_BIG);
    b.tcode[tk] = b.lens[sy] ? b.code[sy] : 0;
    b.tlen[tk] = (uint8_t)(b.lens[sy] | (sy == e ? 0x80u : 0u));
  }
}

/* The tokens of segment u in order: its head run, its middle, its tail
 * run. */
static inline FZR_HD void fzre_h_seg_tokens(fzre_hf *H, fzre_h_tk *k, const uint8_t *words,
                                          const uint16_t *toks, uint64_t n, unsigned u) {
  uint64_t lo, hi;
  fzre_h_seg(n, u, &lo, &hi);
  if (H->hrun[u])
    fzre_h_run(k, H->hrun[u]);
  if (hi - lo > H->lead[u])
    fzre_h_replay(k, toks + lo, H->ntok[u], words, lo + H->lead[u]);
  if (H->trun[u])
    fzre_h_run(k, H->trun[u]);
}

static inline FZR_HD void fzre_h_bits(fzre_hf *H, const uint8_t *words, unsigned w,
                                      unsigned bytes, uint64_t n, uint8_t *scratch, unsigned t,
                                      unsigned nt) {
  fzre_htab b = fzre_htab_of(scratch);
  for (unsigned u = t; u < FZRE_H_UNITS; u += nt) {
    fzre_h_tk k = {FZRE_HM_BITS, w, bytes, 0, 0, 0, b.tcode, b.tlen, 0, 0, 0, 0, 0, H->lv, H->form};
    fzre_h_seg_tokens(H, &k, words, b.toks, n, u);
    H->bits[u] = (uint32_t)k.bits;
  }
}

/* Thread 0: the segments' bit offsets, the lanes' bytes and places, the
 * exact length against out_cap. */
static inline FZR_HD void fzre_h_place(fzre_hf *H, uint64_t out_cap) {
  uint64_t total = H->head;
  for (unsigned l = 0; l < FZRE_H_LANES; l++) {
    uint32_t off = 0;
    for (unsigned s = 0; s < FZRE_H_SEGS; s++) {
      uint32_t v = H->bits[l * FZRE_H_SEGS + s];
      H->bits[l * FZRE_H_SEGS + s] = off;
      off += v;
    }
    H->lane_off[l] = (uint32_t)(total - H->head);
    H->lane_bytes[l] = (off + 7) / 8;
    total += H->lane_bytes[l];
  }
  if (total > out_cap) {
    H->fail = 1;
    H->len = UINT64_MAX;
  } else {
    H->len = total;
  }
}

/* The header (E, the lengths' nibbles, the lanes' byte counts) and every
 * segment's own bytes. */
static inline FZR_HD void fzre_h_write(fzre_hf *H, const uint8_t *words, unsigned w,
                                       unsigned bytes, uint64_t n, uint8_t *out, uint8_t *scratch,
                                       unsigned t, unsigned nt) {
  fzre_htab b = fzre_htab_of(scratch);
  unsigned nsym = H->nsym, nib = (nsym + 1) / 2;
  if (t == 0) {
    out[0] = (uint8_t)H->e;
    out[1] = (uint8_t)(H->e >> 8 | (H->form == FZE_HUFF_FORM_CLASS ? 0x80u : 0u));
  }
  for (unsigned i = t; i < nib; i += nt)
    out[2 + i] = (uint8_t)(b.lens[2 * i] | (2 * i + 1 < nsym ? b.lens[2 * i + 1] << 4 : 0));
  for (unsigned i = t; i < 4 * FZRE_H_LANES; i += nt)
    out[2 + nib + i] = (uint8_t)(H->lane_bytes[i / 4] >> (8 * (i % 4)));
  for (unsigned u = t; u < FZRE_H_UNITS; u += nt) {
    uint32_t b0 = H->bits[u];
    fzre_h_bw bw = {0, b0 % 8, b0 / 8, b0 % 8 ? b0 / 8 : UINT32_MAX,
                  out + H->head + H->lane_off[u / FZRE_H_SEGS], H, u};
    fzre_h_tk k = {FZRE_HM_WRITE, w, bytes, 0, 0, 0, b.tcode, b.tlen, 0, &bw, 0, 0, 0, H->lv,
                   H->form};
    fzre_h_seg_tokens(H, &k, words, b.toks, n, u);
    /* The last byte, when the segment ends inside it. */
    if (bw.nb > b0 % 8 || (bw.nb && bw.bi != b0 / 8))
      fzre_h_byte(&bw, (unsigned)(bw.acc & 0xffu), 1);
  }
}

/* Lane l: the bytes its segments share, ORed together in order. */
static inline FZR_HD void fzre_h_seams(fzre_hf *H, uint8_t *out, unsigned t, unsigned nt) {
  for (unsigned l = t; l < FZRE_H_LANES; l += nt) {
    uint8_t *lane = out + H->head + H->lane_off[l];
    uint32_t idx = UINT32_MAX;
    unsigned v = 0;
    for (unsigned u = l * FZRE_H_SEGS; u < (l + 1) * FZRE_H_SEGS; u++)
      for (unsigned k = 0; k < H->pn[u]; k++) {
        if (H->pidx[u][k] != idx) {
          if (idx != UINT32_MAX)
            lane[idx] = (uint8_t)v;
          idx = H->pidx[u][k];
          v = 0;
        }
        v |= H->pval[u][k];
      }
    if (idx != UINT32_MAX)
      lane[idx] = (uint8_t)v;
  }
}

/* The stream's bits in the form built, before its lanes are rounded up
 * to bytes (fze_huffman_price). */
static inline FZR_HD uint64_t fzre_h_total(fzre_hf *H, unsigned w, uint8_t *scratch) {
  fzre_htab b = fzre_htab_of(scratch);
  return 8 * fzre_h_head(H->nsym) + (uint64_t)b.freq[H->e] * 8u * w + H->hbits;
}

/* The code of the chunk in form f: the symbols' frequencies and lengths,
 * the stream's bits by them (H->hbits) and each thread's count of each
 * length (for the canonical codes). */
FZR_IP_FI FZR_HD void fzre_h_build(fzre_hf *H, unsigned f, uint8_t *scratch) {
  FZR_T0;
  FZR_ONE(H->form = f);
  FZR_SYNC();
  FZR_ALL(fzre_h_freqs(H, scratch, t, nt));
  FZR_SYNC();
  FZR_ONE(fzre_h_used(H, nt));
  FZR_SYNC();
  FZR_ALL(fzre_h_syms(H, scratch, t, nt));
  FZR_SYNC();
  FZR_CLK(12);
  const uint32_t p = fzre_h_pow2(H->k);
  for (unsigned r = 0; !H->built; r++) {
    FZR_ALL(fzre_h_round_keys(H, scratch, r, p, t, nt));
    FZR_SYNC();
    for (uint32_t size = 2; size <= p; size *= 2)
      for (uint32_t stride = size / 2; stride > 0; stride /= 2) {
        FZR_ALL(fzre_h_round_sort(H, p, size, stride, t, nt));
        FZR_SYNC();
      }
    FZR_ALL(fzre_h_round_split(H, scratch, t, nt));
    FZR_SYNC();
    FZR_CLK(33);
    FZR_ONE(fzre_h_round_tree(H));
    FZR_SYNC();
    FZR_CLK(34);
    if (H->built) {
      FZR_ONE(fzo_huff_depths(H->x.tree, H->k));
      FZR_SYNC();
      FZR_ALL(fzre_h_round_take(H, scratch, t, nt));
      FZR_SYNC();
    }
    FZR_CLK(35);
  }
  FZR_ALL(fzre_h_code_count(H, scratch, t, nt));
  FZR_SYNC();
}

/* fzre_huff, fzre_huff_bytes and fzre_huff_price: bytes, a constant of
 * the kernel, says which (w is then 1), so that the ratio preset's kernel
 * holds no code of the bytes'; price, whether only the price is made. */
FZR_IP_FI FZR_HD void fzre_huff_of(fzre_hf *H, unsigned lv, const uint8_t *words, unsigned w,
                                   unsigned bytes, unsigned price, uint64_t n, uint8_t *out,
                                   uint64_t out_cap, uint8_t *scratch) {
  FZR_T0;
  if ((bytes ? w != 1 : w != 4 && w != 8) || n == 0 || n > FZRE_HUFF_MAX_N) {
    FZR_ONE(H->len = UINT64_MAX; H->fail = 1);
    FZR_SYNC();
    return;
  }
  FZR_ONE(H->fail = 0; H->lv = lv; H->form = FZE_HUFF_FORM_BITS);
  FZR_ALL(fzre_h_clear(H, scratch, t, nt);
          fzre_h_mask(words, w, bytes, n, fzre_h_mask_of(scratch, n), t, nt));
  FZR_SYNC();
  FZR_CLK(10);
  FZR_ALL(fzre_h_scan(H, words, w, bytes, n, scratch, t, nt));
  FZR_SYNC();
  FZR_CLK(11);
  FZR_ALL(fzre_h_join(H, n, t, nt); fzre_h_merge(H, scratch, t, nt));
  FZR_SYNC();
  FZR_ALL(fzre_h_sums(H, scratch, t, nt));
  FZR_SYNC();
  FZR_ONE(fzre_h_tails(H));
  FZR_SYNC();
  FZR_ALL(fzre_h_above(H, w, scratch, t, nt));
  FZR_SYNC();
  FZR_ONE(fzre_h_pick(H));
  FZR_SYNC();
  if (!lv) {
    fzre_h_build(H, FZE_HUFF_FORM_BITS, scratch);
    if (price) {
      FZR_ONE(H->len = fzre_h_total(H, w, scratch));
      FZR_SYNC();
      return;
    }
  } else {
    /* Both forms (the tokens kept hold every run's length), the shorter
     * taken, BITS on a tie: CLASS's code made again where it is. */
    fzre_h_build(H, FZE_HUFF_FORM_CLASS, scratch);
    FZR_ONE(H->pc = fzre_h_total(H, w, scratch));
    FZR_SYNC();
    fzre_h_build(H, FZE_HUFF_FORM_BITS, scratch);
    FZR_ONE(H->pb = fzre_h_total(H, w, scratch));
    FZR_SYNC();
    if (price) {
      FZR_ONE(H->len = H->pc < H->pb ? H->pc : H->pb);
      FZR_SYNC();
      return;
    }
    if (H->pc < H->pb)
      fzre_h_build(H, FZE_HUFF_FORM_CLASS, scratch);
  }
  FZR_ALL(fzre_h_code_sums(H, t, nt));
  FZR_SYNC();
  FZR_ALL(fzre_h_code_put(H, w, out_cap, scratch, t, nt));
  FZR_SYNC();
  FZR_CLK(13);
  if (H->fail)
    return;
  FZR_ALL(fzre_h_tokens(H, scratch, t, nt));
  FZR_SYNC();
  FZR_ALL(fzre_h_bits(H, words, w, bytes, n, scratch, t, nt));
  FZR_SYNC();
  FZR_ONE(fzre_h_place(H, out_cap));
  FZR_SYNC();
  FZR_CLK(14);
  if (H->fail)
    return;
  FZR_ALL(fzre_h_write(H, words, w, bytes, n, out, scratch, t, nt));
  FZR_SYNC();
  FZR_CLK(15);
  FZR_ALL(fzre_h_seams(H, out, t, nt));
  FZR_SYNC();
}

/* The block function: every thread calls it with the same arguments.
 * words: n words of w bytes (4 or 8; others are refused, as are n = 0
 * and n above FZRE_HUFF_MAX_N, with len UINT64_MAX); out: out_cap bytes;
 * scratch: fzre_huff_scratch(n, w) bytes, 256-byte aligned, free again
 * on return; the three do not overlap.  H->len is fze_huffman_encode's
 * result (UINT64_MAX for its SIZE_MAX, and then nothing is written) and
 * out holds its bytes. */
static inline FZR_HD void fzre_huff(fzre_hf *H, unsigned lv, const uint8_t *words, unsigned w,
                                    uint64_t n, uint8_t *out, uint64_t out_cap,
                                    uint8_t *scratch) {
  fzre_huff_of(H, lv, words, w, 0, 0, n, out, out_cap, scratch);
}

/* fze_huffman_price: the bits fzre_huff's stream of the n words takes
 * before its lanes are rounded up to bytes, in H->len (UINT64_MAX where
 * fzre_huff refuses the words); nothing is written but the scratch. */
static inline FZR_HD void fzre_huff_price(fzre_hf *H, unsigned lv, const uint8_t *words,
                                          unsigned w, uint64_t n, uint8_t *scratch) {
  fzre_huff_of(H, lv, words, w, 0, 1, n, NULL, 0, scratch);
}

/* The same for n bytes (a byte plane's, the words of one byte the engine's
 * coder takes); scratch is fzre_huff_scratch(n, 1) bytes. */
static inline FZR_HD void fzre_huff_bytes(fzre_hf *H, const uint8_t *b, uint64_t n, uint8_t *out,
                                          uint64_t out_cap, uint8_t *scratch) {
  fzre_huff_of(H, 0, b, 1, 1, 0, n, out, out_cap, scratch);
}

#endif
