/*
 * ratio_enc_lz.cuh - the ratio preset's GPU encoder, its first half: the
 * quantizer and its side list, the Lorenzo residuals and the prices by
 * which codec.c picks a chunk's predictor (stage_quant.c, stage_lorenzo.c,
 * stage_interp.c's guess), written once for the device and for a host
 * model of it (tests/gpu/ratio_enc_lz_model.c).
 *
 * Each export is a block function: every thread of the chunk's block calls
 * it with the same arguments, and its results are in the shared fzre_lz
 * once it returns.  What makes the engine's sequential loops parallel:
 *  - each word, each Lorenzo residual and each guessed bin depends only on
 *    the input, so threads take elements in strides (coalesced) and keep
 *    their coordinates as a mixed-radix counter that the stride advances,
 *    which costs three divisions per thread rather than per element;
 *  - the prices are histograms, and a histogram does not depend on the
 *    order of its counts: threads add into one shared histogram, each
 *    adding a run of equal symbols at once (runs of zeros, mostly, which
 *    would otherwise queue on one counter), and the final sum of integer
 *    terms modulo 2^64 is order-free too;
 *  - the side list is ascending, so there each thread takes a contiguous
 *    share of the flags, and a scan of the shares' counts says where each
 *    thread's indices and values go.
 * The arithmetic is the engine's (ops.h, the same IEEE operations in the
 * same order, integers where it has integers), so the bytes are too.
 *
 * Words are little-endian w-byte words (w = 4 or 8); no buffer is assumed
 * aligned for w: an unaligned one is read and written byte by byte.
 */
#ifndef FZK_RATIO_ENC_LZ_CUH
#define FZK_RATIO_ENC_LZ_CUH

#include "ops.h"
#include "ratio_phase.cuh"

/* The sampling strides and the interpolation's anchor spacing are the
 * contract's (fz_contract.h); the prices agreeing with the engine's check
 * stage_lorenzo.c's. */
#define FZRE_COST_STEP FZE_COST_STEP
#define FZRE_COST_DIRECT FZE_COST_DIRECT
#define FZRE_COST_SYMS (FZRE_COST_DIRECT + 65u)
#define FZRE_GUESS_STEP FZE_GUESS_STEP
#define FZRE_TOP FZE_INTERP_TOP

/* What the block functions share, and their results (the block's shared
 * memory: 1608 bytes). */
typedef struct fzre_lz {
  /* results */
  uint64_t cost;     /* fzre_lz_price, fzre_cost_every, fzre_interp_guess */
  uint64_t outl;     /* fzre_interp_guess: sampled values that are outliers */
  uint64_t side_len; /* fzre_side_write */
  /* the price's histogram: a symbol's count, the bits of its large
   * residuals, the count of all, the sum of the symbols' terms */
  uint32_t hist[FZRE_COST_SYMS];
  unsigned long long extra, cnt, bits, bad;
  /* the side list: each thread's first outlier, their count */
  uint32_t base[FZR_NT];
  uint64_t m;
} fzre_lz;

#ifdef __cplusplus
static_assert(sizeof(fzre_lz) <= 12 * 1024, "fzre_lz fits the block's shared budget");
#else
_Static_assert(sizeof(fzre_lz) <= 12 * 1024, "fzre_lz fits the block's shared budget");
#endif

/* The scratch fzre_side_write takes: none, the scan's counts fit in
 * fzre_lz; kept so that the caller sizes it like the other pieces'. */
static inline FZR_HD uint64_t fzre_lz_scratch(uint64_t n, unsigned w) {
  (void)n;
  (void)w;
  return 0;
}

/* ---- words in and out, aligned or not ---- */

static inline FZR_HD uint64_t fzre_ld(const uint8_t *p, unsigned w, uint64_t i) {
  const uint8_t *q = p + i * w;
  if (((uintptr_t)p & (w - 1)) == 0) {
#ifdef __CUDA_ARCH__
    return w == 4 ? (uint64_t)*(const uint32_t *)q : *(const uint64_t *)q;
#else
    uint32_t a;
    uint64_t b;
    if (w == 4) {
      memcpy(&a, q, 4);
      return a;
    }
    memcpy(&b, q, 8);
    return b;
#endif
  }
  uint64_t v = 0;
  for (unsigned k = 0; k < w; k++)
    v |= (uint64_t)q[k] << (8 * k);
  return v;
}

static inline FZR_HD void fzre_st(uint8_t *p, unsigned w, uint64_t i, uint64_t v) {
  uint8_t *q = p + i * w;
  if (((uintptr_t)p & (w - 1)) == 0) {
#ifdef __CUDA_ARCH__
    if (w == 4)
      *(uint32_t *)q = (uint32_t)v;
    else
      *(uint64_t *)q = v;
#else
    uint32_t a = (uint32_t)v;
    if (w == 4)
      memcpy(q, &a, 4);
    else
      memcpy(q, &v, 8);
#endif
    return;
  }
  for (unsigned k = 0; k < w; k++)
    q[k] = (uint8_t)(v >> (8 * k));
}

/* Eight flags at once, for the side list's counts (p 8-byte aligned). */
static inline FZR_HD uint64_t fzre_ld8(const uint8_t *p) {
#ifdef __CUDA_ARCH__
  return *(const uint64_t *)p;
#else
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
#endif
}

static inline FZR_HD unsigned fzre_clz64(uint64_t v) {
#ifdef __CUDA_ARCH__
  return (unsigned)__clzll((long long)v);
#else
  return (unsigned)__builtin_clzll(v);
#endif
}

static inline FZR_HD unsigned fzre_ctz64(uint64_t v) {
#ifdef __CUDA_ARCH__
  return (unsigned)__ffsll((long long)v) - 1u;
#else
  return (unsigned)__builtin_ctzll(v);
#endif
}

/* ---- the quantizer (stage_quant.c's fze_quant_encode, without a fill) ---- */

/* One value's word and whether it is an outlier: the engine's PWREL loop,
 * quant_f32 (in the form fzo_quant_f32_sum takes, the same operations) and
 * quant_f64; lossless, the value's bits. */
static inline FZR_HD uint64_t fzre_quant_one(const fzre_q *q, uint64_t bits, unsigned w,
                                             uint8_t *bad) {
  *bad = 0;
  if (q->step == 0)
    return bits;
  if (w == 4) {
    float x = fzo_bits_f32((uint32_t)bits);
    uint32_t c = 0;
    bool ok = q->pwrel ? fzo_pw_quant_f32(x, (uint32_t)q->step, q->eb_abs, &c)
                       : fzo_quant_f32_sum(x, q->inv, q->step, q->eb_abs, &c);
    *bad = (uint8_t)!ok;
    return ok ? c : 0u;
  }
  double v = fzo_bits_f64(bits);
  if (q->pwrel) {
    uint64_t c = 0;
    bool ok = fzo_pw_quant_f64(v, (uint64_t)q->step, q->eb_abs, &c);
    *bad = (uint8_t)!ok;
    return ok ? c : 0u;
  }
  double t = v * q->inv;
  int fits = fzo_fabs(t) <= FZO_QMAX_F64;
  int64_t c = (int64_t)fzo_rint(fits ? t : 0.0);
  double r = fzo_dequant_f64((uint64_t)c, q->step);
  int ok = fits & (fzo_fabs(v - r) <= q->eb_abs) & !fzo_f64_special(bits);
  *bad = (uint8_t)!ok;
  return ok ? (uint64_t)c : 0u;
}

/* A thread's values are loaded four at a time before any is coded: as
 * the compiler sees them the words' and flags' stores may alias the
 * input, so a loop of one load, its coding and its stores would wait for
 * the memory at every value. */
static inline FZR_HD void fzre_quant_part(const fzre_q *q, const uint8_t *in, uint64_t n,
                                          unsigned w, uint8_t *words, uint8_t *bad, unsigned t,
                                          unsigned nt) {
  uint64_t i = t;
  for (; i + 3 * (uint64_t)nt < n; i += 4 * (uint64_t)nt) {
    uint64_t v[4];
    FZR_UNROLL
    for (unsigned j = 0; j < 4; j++)
      v[j] = fzre_ld(in, w, i + j * nt);
    FZR_UNROLL
    for (unsigned j = 0; j < 4; j++)
      fzre_st(words, w, i + j * nt, fzre_quant_one(q, v[j], w, &bad[i + j * nt]));
  }
  for (; i < n; i += nt)
    fzre_st(words, w, i, fzre_quant_one(q, fzre_ld(in, w, i), w, &bad[i]));
}

/* n values at in into n words and n outlier flags (1 for an outlier,
 * whose word is 0), as fze_quant_encode makes them for a stage without a
 * fill; L is not used. */
static inline FZR_HD void fzre_quant(fzre_lz *L, const fzre_q *q, const uint8_t *in, uint64_t n,
                                     unsigned w, uint8_t *words, uint8_t *bad) {
  FZR_T0;
  (void)L;
  FZR_ALL(fzre_quant_part(q, in, n, w, words, bad, t, nt));
  FZR_SYNC();
}

/* ---- the side list (fze_quant_gather, then fze_quant_write_side) ---- */

/* Thread t's contiguous share of n flags, in whole groups of eight so that
 * the shares' groups line up with the flags' 8-byte words. */
static inline FZR_HD void fzre_share8(uint64_t n, unsigned t, unsigned nt, uint64_t *lo,
                                      uint64_t *hi) {
  uint64_t per = ((n + nt - 1) / nt + 7) / 8 * 8;
  *lo = per * t < n ? per * t : n;
  *hi = per * (t + 1) < n ? per * (t + 1) : n;
}

static inline FZR_HD void fzre_side_count(fzre_lz *L, const uint8_t *bad, uint64_t n, unsigned t,
                                          unsigned nt) {
  uint64_t lo, hi, c = 0;
  fzre_share8(n, t, nt, &lo, &hi);
  for (uint64_t i = lo; i < hi;) {
    /* Outliers are rare: skip eight clear flags at once where they lie in
     * one aligned word. */
    if (i + 8 <= hi && ((uintptr_t)(bad + i) & 7) == 0 && fzre_ld8(bad + i) == 0) {
      i += 8;
      continue;
    }
    uint64_t e = i + 8 < hi ? i + 8 : hi;
    for (; i < e; i++)
      c += bad[i] != 0;
  }
  L->base[t] = (uint32_t)c;
}

static inline FZR_HD unsigned fzre_varint_len(uint64_t v) {
  unsigned k = 1;
  for (; v >= 0x80; v >>= 7)
    k++;
  return k;
}

static inline FZR_HD void fzre_side_scan(fzre_lz *L, uint64_t n, unsigned w, unsigned nt) {
  uint32_t sum = fzr_sums_before(L->base, nt);
  unsigned iw = n < 65536 ? 2u : 4u;
  L->m = sum;
  L->side_len = fzre_varint_len(sum) + (uint64_t)sum * (iw + w);
}

static inline FZR_HD void fzre_side_put(fzre_lz *L, const uint8_t *bad, const uint8_t *in,
                                        uint64_t n, unsigned w, uint8_t *side, unsigned t,
                                        unsigned nt) {
  uint64_t lo, hi, m = L->m, vk = fzre_varint_len(m);
  unsigned iw = n < 65536 ? 2u : 4u;
  if (t == 0) {
    uint64_t v = m;
    for (unsigned k = 0; k < vk; k++, v >>= 7)
      side[k] = (uint8_t)(k + 1 < vk ? (v & 0x7f) | 0x80 : v);
  }
  fzre_share8(n, t, nt, &lo, &hi);
  uint8_t *ix = side + vk + (uint64_t)iw * L->base[t];
  uint8_t *vals = side + vk + (uint64_t)iw * m + (uint64_t)w * L->base[t];
  for (uint64_t i = lo; i < hi;) {
    if (i + 8 <= hi && ((uintptr_t)(bad + i) & 7) == 0 && fzre_ld8(bad + i) == 0) {
      i += 8;
      continue;
    }
    uint64_t e = i + 8 < hi ? i + 8 : hi;
    for (; i < e; i++) {
      if (!bad[i])
        continue;
      for (unsigned k = 0; k < iw; k++)
        *ix++ = (uint8_t)(i >> (8 * k));
      for (unsigned k = 0; k < w; k++)
        *vals++ = in[i * w + k];
    }
  }
}

/* The side list of the outliers flagged in bad (their values read from
 * in) into side, which has room for 5 + n (4 + w) bytes; its length in
 * L->side_len, the outliers' count in L->m. */
static inline FZR_HD void fzre_side_write(fzre_lz *L, const uint8_t *bad, const uint8_t *in,
                                          uint64_t n, unsigned w, uint8_t *side,
                                          uint8_t *scratch) {
  FZR_T0;
  (void)scratch;
  FZR_ALL(fzre_side_count(L, bad, n, t, nt));
  FZR_SYNC();
  FZR_ONE(fzre_side_scan(L, n, w, nt));
  FZR_SYNC();
  FZR_ALL(fzre_side_put(L, bad, in, n, w, side, t, nt));
  FZR_SYNC();
}

/* ---- the price (stage_lorenzo.c's cost_hist and cost_bits) ---- */

/* One thread's counts on their way to the histogram: the run of equal
 * symbols it is adding, and its sums. */
typedef struct fzre_acc {
  unsigned sym;
  uint32_t run;
  uint64_t extra, cnt;
} fzre_acc;

static inline FZR_HD void fzre_acc_add(fzre_lz *L, fzre_acc *a, uint64_t v) {
  unsigned b = v ? 64u - fzre_clz64(v) : 0u;
  unsigned big = v >= FZRE_COST_DIRECT;
  unsigned s = big ? FZRE_COST_DIRECT + b : (unsigned)v;
  if (s != a->sym) {
    if (a->run)
      FZR_ATOMIC_ADD(&L->hist[a->sym], a->run);
    a->sym = s;
    a->run = 0;
  }
  a->run++;
  a->extra += big ? b : 0;
  a->cnt++;
}

static inline FZR_HD void fzre_acc_flush(fzre_lz *L, const fzre_acc *a) {
  if (a->run)
    FZR_ATOMIC_ADD(&L->hist[a->sym], a->run);
  if (a->cnt) {
    FZR_ATOMIC_ADD(&L->extra, (unsigned long long)a->extra);
    FZR_ATOMIC_ADD(&L->cnt, (unsigned long long)a->cnt);
  }
}

static inline FZR_HD void fzre_hist_clear(fzre_lz *L, unsigned t, unsigned nt) {
  for (unsigned s = t; s < FZRE_COST_SYMS; s += nt)
    L->hist[s] = 0;
  if (t == 0)
    L->extra = L->cnt = L->bits = L->bad = 0;
}

/* Each symbol's term c (log2 N - log2 c), summed modulo 2^64 as the
 * engine sums them, in any order. */
static inline FZR_HD void fzre_hist_terms(fzre_lz *L, unsigned t, unsigned nt) {
  if (L->cnt == 0)
    return;
  uint64_t ln = fzo_log2_q16(L->cnt);
  for (unsigned s = t; s < FZRE_COST_SYMS; s += nt) {
    uint64_t c = L->hist[s];
    if (c)
      FZR_ATOMIC_ADD(&L->bits, (unsigned long long)(c * (ln - fzo_log2_q16(c))));
  }
}

static inline FZR_HD void fzre_hist_finish(fzre_lz *L) {
  /* No count: no terms and no extra bits, the engine's 0. */
  L->cost = (uint64_t)L->bits + ((uint64_t)L->extra << 16);
  L->outl = L->bad;
}

/* The block functions around a counting phase: the histogram cleared
 * before it, priced after it. */
static inline FZR_HD void fzre_hist_open(fzre_lz *L) {
  FZR_T0;
  FZR_ALL(fzre_hist_clear(L, t, nt));
  FZR_SYNC();
}

static inline FZR_HD void fzre_hist_close(fzre_lz *L) {
  FZR_T0;
  FZR_ALL(fzre_hist_terms(L, t, nt));
  FZR_SYNC();
  FZR_ONE(fzre_hist_finish(L));
  FZR_SYNC();
}

/* ---- coordinates along a stride ---- */

/* Element first + i of the array as x along its row, y and z the row's
 * coordinates (extents X, Y, and Z implied), advanced by a fixed stride
 * d of elements as a mixed-radix counter: d's own digits (dx, dy, dz) and
 * a carry per digit. */
typedef struct fzre_pos {
  uint64_t x, y, z, dx, dy, dz, X, Y;
} fzre_pos;

static inline FZR_HD void fzre_pos_init(fzre_pos *p, const uint64_t ext[3], uint64_t g,
                                        uint64_t d) {
  uint64_t X = ext[2], Y = ext[1], r = g / X, dr = d / X;
  p->X = X;
  p->Y = Y;
  p->x = g - r * X;
  p->y = r % Y;
  p->z = r / Y;
  p->dx = d - dr * X;
  p->dy = dr % Y;
  p->dz = dr / Y;
}

static inline FZR_HD void fzre_pos_next(fzre_pos *p) {
  uint64_t x = p->x + p->dx, cy = x >= p->X;
  p->x = cy ? x - p->X : x;
  uint64_t y = p->y + p->dy + cy, cz = y >= p->Y;
  p->y = cz ? y - p->Y : y;
  p->z += p->dz + cz;
}

/* ---- Lorenzo (stage_lorenzo.c's run and price) ---- */

static inline FZR_HD uint64_t fzre_corner(unsigned m, uint64_t sy, uint64_t sz) {
  return (m & 1u) + ((m & 2u) ? sy : 0) + ((m & 4u) ? sz : 0);
}

/* The axes element i of the chunk (at p) is predicted from: those it has
 * neighbours on, less the slowest while the farthest corner they need
 * lies before the chunk. */
static inline FZR_HD unsigned fzre_axes(const fzre_pos *p, uint64_t i, uint64_t sy,
                                        uint64_t sz) {
  unsigned m = (p->x > 0 ? 1u : 0u) | (p->y > 0 ? 2u : 0u) | (p->z > 0 ? 4u : 0u);
  while (m && fzre_corner(m, sy, sz) > i)
    m &= ~(m & 4u ? 4u : m & 2u ? 2u : 1u);
  return m;
}

/* The zigzagged residual of word i against its prediction from axes m,
 * modulo the word's width. */
static inline FZR_HD uint64_t fzre_lz_res(const uint8_t *v, unsigned w, uint64_t i, unsigned m,
                                          uint64_t sy, uint64_t sz) {
  uint64_t p = 0;
  switch (m) {
  case 0: break;
  case 1: p = fzre_ld(v, w, i - 1); break;
  case 2: p = fzre_ld(v, w, i - sy); break;
  case 4: p = fzre_ld(v, w, i - sz); break;
  case 3: p = fzre_ld(v, w, i - 1) + fzre_ld(v, w, i - sy) - fzre_ld(v, w, i - 1 - sy); break;
  case 5: p = fzre_ld(v, w, i - 1) + fzre_ld(v, w, i - sz) - fzre_ld(v, w, i - 1 - sz); break;
  case 6: p = fzre_ld(v, w, i - sy) + fzre_ld(v, w, i - sz) - fzre_ld(v, w, i - sy - sz); break;
  default:
    p = fzre_ld(v, w, i - 1) + fzre_ld(v, w, i - sy) + fzre_ld(v, w, i - sz) -
        fzre_ld(v, w, i - 1 - sy) - fzre_ld(v, w, i - 1 - sz) - fzre_ld(v, w, i - sy - sz) +
        fzre_ld(v, w, i - 1 - sy - sz);
    break;
  }
  return fzo_zigzag_w(fzre_ld(v, w, i) - p, w);
}

/* Every residual the price samples (i = 0, 5, 10, ... of the chunk: the
 * engine's row loops cover each once, each with its own axes). */
static inline FZR_HD void fzre_price_part(fzre_lz *L, const uint64_t ext[3],
                                          const uint8_t *words, unsigned w, uint64_t n,
                                          uint64_t first, unsigned t, unsigned nt) {
  uint64_t sy = ext[2], sz = ext[2] * ext[1], i = (uint64_t)t * FZRE_COST_STEP;
  fzre_acc a = {0, 0, 0, 0};
  fzre_pos p;
  fzre_pos_init(&p, ext, first + i, (uint64_t)nt * FZRE_COST_STEP);
  for (; i < n; i += (uint64_t)nt * FZRE_COST_STEP, fzre_pos_next(&p))
    fzre_acc_add(L, &a, fzre_lz_res(words, w, i, fzre_axes(&p, i, sy, sz), sy, sz));
  fzre_acc_flush(L, &a);
}

/* L->cost = fze_lorenzo_price of the chunk's n words (elements first ..
 * first + n - 1 of the array) in the dims whose folded extents are ext. */
static inline FZR_HD void fzre_lz_price(fzre_lz *L, const uint64_t ext[3], const uint8_t *words,
                                        unsigned w, uint64_t n, uint64_t first) {
  FZR_T0;
  fzre_hist_open(L);
  FZR_ALL(fzre_price_part(L, ext, words, w, n, first, t, nt));
  FZR_SYNC();
  fzre_hist_close(L);
}

static inline FZR_HD void fzre_every_part(fzre_lz *L, const uint8_t *words, unsigned w,
                                          uint64_t n, uint64_t step, unsigned t, unsigned nt) {
  fzre_acc a = {0, 0, 0, 0};
  for (uint64_t i = t * step; i < n; i += nt * step)
    fzre_acc_add(L, &a, fzre_ld(words, w, i));
  fzre_acc_flush(L, &a);
}

/* L->cost = the price of words 0, step, 2 step, ... of n: step 5 is
 * fze_lorenzo_cost, step 1 fze_words_cost. */
static inline FZR_HD void fzre_cost_every(fzre_lz *L, const uint8_t *words, unsigned w,
                                          uint64_t n, uint64_t step) {
  FZR_T0;
  fzre_hist_open(L);
  FZR_ALL(fzre_every_part(L, words, w, n, step, t, nt));
  FZR_SYNC();
  fzre_hist_close(L);
}

static inline FZR_HD void fzre_lz_part(const uint64_t ext[3], const uint8_t *words, uint8_t *out,
                                       unsigned w, uint64_t n, uint64_t first, unsigned t,
                                       unsigned nt) {
  uint64_t sy = ext[2], sz = ext[2] * ext[1], i = t;
  fzre_pos p;
  fzre_pos_init(&p, ext, first + i, nt);
  for (; i < n; i += nt, fzre_pos_next(&p))
    fzre_st(out, w, i, fzre_lz_res(words, w, i, fzre_axes(&p, i, sy, sz), sy, sz));
}

/* fze_lorenzo_encode's residuals of the chunk's n words into out (not
 * the words). */
static inline FZR_HD void fzre_lz_encode(const uint64_t ext[3], const uint8_t *words,
                                         uint8_t *out, unsigned w, uint64_t n, uint64_t first) {
  FZR_T0;
  FZR_ALL(fzre_lz_part(ext, words, out, w, n, first, t, nt));
  FZR_SYNC();
}

/* ---- the interpolation's guess (stage_interp.c's fze_interp_guess) ---- */

static inline FZR_HD double fzre_value(const uint8_t *in, unsigned w, uint64_t i) {
  uint64_t b = fzre_ld(in, w, i);
  return w == 4 ? (double)fzo_bits_f32((uint32_t)b) : fzo_bits_f64(b);
}

/* The value mul h steps along the sample's axis (coordinate c of extent
 * e, elements `step` apart), when it lies in the array and the chunk:
 * non-finite as 0. */
static inline FZR_HD int fzre_guess_near(const uint8_t *in, unsigned w, uint64_t n, uint64_t i,
                                         uint64_t c, uint64_t e, uint64_t step, uint64_t h,
                                         int64_t mul, double *v) {
  int64_t cd = (int64_t)c + mul * (int64_t)h;
  int64_t ii = (int64_t)i + mul * (int64_t)(h * step);
  int have = cd >= 0 && cd < (int64_t)e && ii >= 0 && ii < (int64_t)n;
  double g = have ? fzre_value(in, w, (uint64_t)ii) : 0.0;
  *v = isfinite(g) ? g : 0.0;
  return have;
}

/* Each sampled value (i = 0, 17, 34, ... of the chunk: the engine's row
 * loops cover each once) that is not an anchor: its bin against the
 * prediction from its level's neighbours along its axis, into the
 * histogram. */
static inline FZR_HD void fzre_guess_part(fzre_lz *L, const fzre_q *q, const uint64_t ext[3],
                                          const uint8_t *in, unsigned w, uint64_t n,
                                          uint64_t first, unsigned t, unsigned nt) {
  const double qmax = w == 4 ? FZO_QMAX_F32 : FZO_QMAX_F64;
  const unsigned top = fzre_ctz64(FZRE_TOP);
  const uint64_t d = (uint64_t)nt * FZRE_GUESS_STEP;
  fzre_acc a = {0, 0, 0, 0};
  uint64_t bad = 0, i = (uint64_t)t * FZRE_GUESS_STEP;
  /* Each level's bins (no anchor is sampled). */
  double inv[4];
  for (unsigned l = 0; l < 4; l++)
    inv[l] = 1.0 / fzo_interp_level_step(q->step, l, q->lv);
  /* A point's level and axis from its distance from the walk's origin. */
  uint64_t o[3] = {0, 0, 0};
  if (q->lv)
    fzo_interp_origin(ext, first, n, o);
  fzre_pos p;
  fzre_pos_init(&p, ext, first + i, d);
  for (; i < n; i += d, fzre_pos_next(&p)) {
    /* Along an axis not interpolated every distance is 0. */
    uint64_t rz = q->flat > 0 ? 0 : p.z - o[0], ry = q->flat > 1 ? 0 : p.y - o[1];
    uint64_t rx = p.x - o[2];
    uint64_t u = rz | ry | rx;
    unsigned lb = u ? fzre_ctz64(u) : 64u;
    if (lb >= top)
      continue; /* an anchor */
    uint64_t h = (uint64_t)1 << lb;
    /* The axis: the fastest whose distance is an odd multiple of h. */
    uint64_t c, e, step;
    if (rx >> lb & 1u) {
      c = p.x, e = ext[2], step = 1;
    } else if (ry >> lb & 1u) {
      c = p.y, e = ext[1], step = ext[2];
    } else {
      c = p.z, e = ext[0], step = ext[2] * ext[1];
    }
    double v0, v1, v2, v3;
    int h0 = fzre_guess_near(in, w, n, i, c, e, step, h, -3, &v0);
    int h1 = fzre_guess_near(in, w, n, i, c, e, step, h, -1, &v1);
    int h2 = fzre_guess_near(in, w, n, i, c, e, step, h, 1, &v2);
    int h3 = fzre_guess_near(in, w, n, i, c, e, step, h, 3, &v3);
    double pr = h1 && h2 ? (h0 && h3 ? (-v0 + 9.0 * v1 + 9.0 * v2 - v3) * 0.0625
                                     : (v1 + v2) * 0.5)
                : h1     ? v1
                : h2     ? v2
                         : 0.0;
    double tq = (fzre_value(in, w, i) - pr) * inv[lb];
    int fits = fabs(tq) <= qmax; /* false for NaN */
    double rq = fzo_rint(fits ? tq : 0.0);
    bad += !fits;
    fzre_acc_add(L, &a, w == 4 ? fzo_zigzag32((uint32_t)(int32_t)rq)
                               : fzo_zigzag64((uint64_t)(int64_t)rq));
  }
  fzre_acc_flush(L, &a);
  if (bad)
    FZR_ATOMIC_ADD(&L->bad, (unsigned long long)bad);
}

/* L->cost and L->outl = fze_interp_guess's price and outliers for the
 * chunk's n values, the interpolation's folded extents ext; q's step is
 * not 0 (the engine guesses only for a quantizer that bins). */
static inline FZR_HD void fzre_interp_guess(fzre_lz *L, const fzre_q *q, const uint64_t ext[3],
                                            const uint8_t *in, unsigned w, uint64_t n,
                                            uint64_t first) {
  FZR_T0;
  fzre_hist_open(L);
  FZR_ALL(fzre_guess_part(L, q, ext, in, w, n, first, t, nt));
  FZR_SYNC();
  fzre_hist_close(L);
}

#endif
