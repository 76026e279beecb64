/*
 * ratio_enc_interp.cuh - the interpolating quantizer of the ratio preset's
 * GPU encoder (stage_interp.c's walk with dec = 0), one block a chunk,
 * written once for the device and for a host model of it.
 *
 * Every value of the chunk is predicted from values already rebuilt, its
 * difference from the prediction quantized in bins of step, and the value
 * the decoder will rebuild checked against the bound with the decoder's
 * arithmetic; a value that fails, and every NaN, Inf, -0.0 and denormal,
 * is an outlier (word 0, flag 1).  The walk is the engine's: the anchors
 * (every coordinate a multiple of FZE_INTERP_TOP) form a chain, each
 * predicted by the rebuilt anchor before it, so thread 0 takes them; after
 * them each pass (h, d) for h = 8, 4, 2, 1 and d = 0, 1, 2 reads only
 * points of earlier passes, so the block shares a pass's points out, one
 * barrier a pass.
 *
 * The points of a pass are enumerated exactly, not over the chunk's
 * bounding box (which for a chunk straddling two planes of large rows is
 * many times the chunk): a chunk, a run of consecutive elements, is the
 * union of at most five boxes in (z, y, x) (its first partial row, the
 * partial plane of whole rows after it, whole planes, the partial plane
 * before its last row, its last partial row), each a product of ranges, so
 * a pass's points in a box are a product of three arithmetic progressions:
 * a thread finds its first point in a box by a few divisions and steps to
 * its next by adding the block's thread count in the box's digits.  The
 * tables of every pass and box are built once, one pass a thread, in the
 * first phase.  Within a box the fastest index runs along x, so
 * neighbouring threads take neighbouring points.  No scratch beyond the
 * caller's pv.
 *
 * The arithmetic is the engine's bit for bit: predictions in binary64,
 * the same operations in the same order, the value rebuilt as
 * (T)(p + q * step), compiled without FMA contraction.  A chunk has fewer
 * than 2^32 - FZR_NT elements (it is 256 KiB), so indices within it are
 * 32-bit; coordinates along the axis of prediction stay 64-bit.
 */
#ifndef FZK_RATIO_ENC_INTERP_CUH
#define FZK_RATIO_ENC_INTERP_CUH

#include "ops.h"
#include "ratio_phase.cuh"

#define FZRE_IP_TOP FZE_INTERP_TOP
#define FZRE_IP_BOXES 5u
#define FZRE_IP_PASSES 13u /* the anchors, then (h, d) for h = 8, 4, 2, 1 */

/* The loops are written once for both widths and compiled for each with w
 * a constant (fzre_ip_level, fzre_ip_chain), so the device code has no
 * branch on the type per point. */
#ifdef __CUDACC__
#define FZRE_IP_FI static __forceinline__
#else
#define FZRE_IP_FI static inline
#endif
/* One box's share of a pass: the counts along z, y, x, the chunk index
 * of its first point and the index steps between points along each axis
 * (0 where only one point lies), the first point's coordinate along the
 * axis of prediction. */
typedef struct fzre_ip_box {
  uint64_t cd;
  uint32_t cnt[3], base, si[3];
} fzre_ip_box;

typedef struct fzre_ip_pass {
  fzre_ip_box box[FZRE_IP_BOXES];
  uint32_t end[FZRE_IP_BOXES]; /* points in boxes 0 .. b */
  uint64_t off;                /* h times the stride of axis d */
} fzre_ip_pass;

/* The walk's state, shared by the block: 3048 bytes (13 passes of 232). */
typedef struct fzre_ip {
  uint64_t ext[3];
  uint32_t n;
  fzre_ip_pass pass[FZRE_IP_PASSES];
} fzre_ip;

/* The encoder's: the walk's state and a batch of anchors staged for thread
 * 0's chain (their chunk indices and values' bits, in the walk's order),
 * with the chain's last rebuilt value. */
typedef struct fzre_ipe {
  fzre_ip P;
  uint64_t ax[FZR_NT];
  uint32_t ai[FZR_NT];
  double prev;
} fzre_ipe;

#ifdef __cplusplus
static_assert(sizeof(fzre_ipe) <= 12288, "fzre_ipe must fit in 12 KiB of shared memory");
#else
_Static_assert(sizeof(fzre_ipe) <= 12288, "fzre_ipe must fit in 12 KiB of shared memory");
#endif

static inline FZR_HD uint64_t fzre_ip_first_at(uint64_t lo, uint64_t m, uint64_t r) {
  uint64_t q = lo <= r ? 0 : (lo - r + m - 1) / m;
  return q * m + r;
}

/* Box b of the chunk [s, s + n) (n > 0), the boxes in memory order: its
 * ranges lo .. hi (inclusive) along z, y, x; 0 where the chunk has no
 * such box.  0: the first row's part (the whole chunk when it lies in one
 * row); 1: the whole rows after it in the first row's plane (or up to the
 * last row's, when the last row is in that plane too); 2: whole planes;
 * 3: the whole rows of the last row's plane before it; 4: the last row's
 * part. */
FZRE_IP_FI FZR_HD int fzre_ip_cut(const uint64_t ext[3], uint64_t s, uint64_t n, unsigned b,
                                  uint64_t lo[3], uint64_t hi[3]) {
  uint64_t Y = ext[1], X = ext[2], e = s + n - 1;
  uint64_t r0 = s / X, r1 = e / X;
  uint64_t rs = r0 + 1, re = r1 - 1, zs = rs / Y, ze = re / Y;
  int rows = r1 - r0 >= 2, split = rows && zs != ze;
  uint64_t r = b == 4 ? r1 : r0;
  lo[0] = hi[0] = r / Y;
  lo[1] = hi[1] = r % Y;
  lo[2] = 0;
  hi[2] = X - 1;
  switch (b) {
  case 0:
    lo[2] = s % X;
    hi[2] = r0 == r1 ? e % X : X - 1;
    return 1;
  case 1:
    lo[0] = hi[0] = zs;
    lo[1] = rs % Y;
    hi[1] = split ? Y - 1 : re % Y;
    return rows;
  case 2:
    lo[0] = zs + 1;
    hi[0] = ze - 1;
    lo[1] = 0;
    hi[1] = Y - 1;
    return split && ze - zs >= 2;
  case 3:
    lo[0] = hi[0] = ze;
    lo[1] = 0;
    hi[1] = re % Y;
    return split;
  default:
    hi[2] = e % X;
    return r0 != r1;
  }
}

/* Thread p < FZRE_IP_PASSES builds pass p's table (0: the anchors; 1 + 3 l + d:
 * h = 8 >> l along axis d), each from its own copy of the boxes. */
static inline FZR_HD void fzre_ip_plan(fzre_ip *P, const uint64_t ext[3], uint64_t first,
                                       uint64_t n, unsigned t) {
  if (t >= FZRE_IP_PASSES)
    return;
  uint64_t str[3] = {ext[1] * ext[2], ext[2], 1};
  if (t == 0) {
    for (unsigned j = 0; j < 3; j++)
      P->ext[j] = ext[j];
    P->n = (uint32_t)n;
  }
  fzre_ip_pass *ps = &P->pass[t];
  uint64_t h = t == 0 ? FZRE_IP_TOP : (uint64_t)(FZRE_IP_TOP / 2) >> ((t - 1) / 3);
  unsigned d = t == 0 ? 0u : (t - 1) % 3;
  uint64_t stp[3], res[3];
  for (unsigned j = 0; j < 3; j++) {
    stp[j] = t == 0 ? FZRE_IP_TOP : j == d ? 2 * h : j < d ? h : 2 * h;
    res[j] = t == 0 ? 0 : j == d ? h : 0;
  }
  ps->off = h * (d == 0 ? str[0] : d == 1 ? str[1] : 1u);
  uint32_t total = 0;
  for (unsigned b = 0; b < FZRE_IP_BOXES; b++) {
    fzre_ip_box *bx = &ps->box[b];
    uint64_t lo[3], hi[3], start[3], cnt[3];
    int there = n && fzre_ip_cut(ext, first, n, b, lo, hi);
    for (unsigned j = 0; j < 3; j++) {
      start[j] = there ? fzre_ip_first_at(lo[j], stp[j], res[j]) : 0;
      cnt[j] = there && start[j] <= hi[j] ? (hi[j] - start[j]) / stp[j] + 1 : 0;
    }
    uint64_t pts = cnt[0] * cnt[1] * cnt[2];
    for (unsigned j = 0; j < 3; j++) {
      bx->cnt[j] = pts ? (uint32_t)cnt[j] : 1u;
      /* Two points a step apart both lie in the chunk, so the step is
       * below n where there are two. */
      bx->si[j] = pts && cnt[j] > 1 ? (uint32_t)(stp[j] * str[j]) : 0u;
    }
    bx->base = pts ? (uint32_t)(start[0] * str[0] + start[1] * str[1] + start[2] - first) : 0u;
    bx->cd = d == 0 ? start[0] : d == 1 ? start[1] : start[2];
    total += (uint32_t)pts;
    ps->end[b] = total;
  }
}

static inline FZR_HD double fzre_ip_fin0(double v) { return isfinite(v) ? v : 0.0; }

/* The rebuilt value at i.  For f32 pv is a float array: every value the
 * engine keeps there (as a double) is (double)(float)r or finite_or_0 of a
 * float, so a float holds it exactly and reads back as the same double. */
FZRE_IP_FI FZR_HD double fzre_ip_pv(const uint8_t *pv, unsigned w, uint32_t i) {
  return w == 4 ? (double)((const float *)pv)[i] : ((const double *)pv)[i];
}

/* The value at i as its bits (a float's in the low 32 for f32): the
 * anchors' chain loads the next one ahead of its turn. */
FZRE_IP_FI FZR_HD uint64_t fzre_ip_load(const uint8_t *in, unsigned w, uint32_t i) {
  return w == 4 ? ((const uint32_t *)in)[i] : ((const uint64_t *)in)[i];
}

/* stage_interp.c's point() encoding: the value at i (bits x) against
 * prediction p; returns the rebuilt value it leaves in pv.  in, words and
 * pv are aligned for the element type. */
FZRE_IP_FI FZR_HD double fzre_ip_point(const fzre_q *q, unsigned w, uint64_t x, double p,
                                       uint8_t *words, uint8_t *bad, uint8_t *pv, uint32_t i) {
  if (w == 4) {
    double v = (double)fzo_bits_f32((uint32_t)x);
    bool special = fzo_f32_special((uint32_t)x);
    /* Every test made alike, as the engine makes them; the bin becomes an
     * integer only when it passed. */
    double tq = (v - p) * q->inv;
    bool fits = !special & (fabs(tq) <= FZO_QMAX_F32);
    double b = fzo_rint(fits ? tq : 0.0);
    double r = (double)(float)(p + b * q->step);
    bool ok = fits & (fabs(v - r) <= q->eb_abs);
    b = ok ? b : 0.0;
    ((uint32_t *)words)[i] = ok ? fzo_zigzag32((uint32_t)(int32_t)b) : 0u;
    bad[i] = (uint8_t)!ok;
    double kept = ok ? r : fzre_ip_fin0(v);
    ((float *)pv)[i] = (float)kept;
    return kept;
  }
  double v = fzo_bits_f64(x);
  bool special = fzo_f64_special(x);
  double tq = (v - p) * q->inv;
  bool fits = !special & (fabs(tq) <= FZO_QMAX_F64);
  double b = fzo_rint(fits ? tq : 0.0);
  double r = p + b * q->step;
  bool ok = fits & (fabs(v - r) <= q->eb_abs);
  b = ok ? b : 0.0;
  ((uint64_t *)words)[i] = ok ? fzo_zigzag64((uint64_t)(int64_t)b) : 0u;
  bad[i] = (uint8_t)!ok;
  double kept = ok ? r : fzre_ip_fin0(v);
  ((double *)pv)[i] = kept;
  return kept;
}

/* The chunk index of point k of a box's share of a pass (x fastest). */
FZRE_IP_FI FZR_HD uint32_t fzre_ip_at(const fzre_ip_box *bx, uint32_t k) {
  uint32_t a2 = k % bx->cnt[2], rest = k / bx->cnt[2];
  uint32_t a1 = rest % bx->cnt[1], a0 = rest / bx->cnt[1];
  return bx->base + a0 * bx->si[0] + a1 * bx->si[1] + a2 * bx->si[2];
}

/* The chunk index of anchor k (point k of the walk's pass 0, in memory
 * order; k below the pass's count). */
FZRE_IP_FI FZR_HD uint32_t fzre_ip_anchor(const fzre_ip_pass *ps, uint32_t k) {
  unsigned bi = 0;
  while (k >= ps->end[bi])
    bi++;
  return fzre_ip_at(&ps->box[bi], k - (bi ? ps->end[bi - 1] : 0u));
}

/* Anchor b + t staged: its chunk index and its value's bits; past the
 * last, nothing. */
static inline FZR_HD void fzre_ip_stage(fzre_ipe *E, const uint8_t *in, unsigned w, uint32_t b,
                                        unsigned t) {
  const fzre_ip_pass *ps = &E->P.pass[0];
  uint32_t k = b + t;
  if (k >= ps->end[FZRE_IP_BOXES - 1])
    return;
  uint32_t i = fzre_ip_anchor(ps, k);
  E->ai[t] = i;
  E->ax[t] = fzre_ip_load(in, w, i);
}

/* Thread 0: m staged anchors, each predicted by the rebuilt one before it
 * (the chunk's first by 0).  The chain is the arithmetic of one point
 * after another, so its values wait in shared memory, where the block put
 * them (a chunk of a 1-D array has n / 16 anchors; thread 0 loading them
 * from the array itself waited on the memory at every few). */
FZRE_IP_FI FZR_HD void fzre_ip_chain_w(fzre_ipe *E, const fzre_q *q, unsigned w, uint8_t *words,
                                       uint8_t *bad, uint8_t *pv, uint32_t m) {
  double prev = E->prev;
  for (uint32_t j = 0; j < m; j++)
    prev = fzre_ip_point(q, w, E->ax[j], prev, words, bad, pv, E->ai[j]);
  E->prev = prev;
}

/* A thread's walk over the points k = t, t + nt, ... of a pass: the
 * digits (a0, a1, a2) of its point in box b, found by division where k
 * enters a box and else stepped on by nt's digits, with carries, so that
 * a point costs no division.  Shared with the decoder (ratio_dec.cuh),
 * whose walk is this one. */
typedef struct fzre_ip_cur {
  const fzre_ip_box *bx;
  unsigned b;
  uint32_t a0, a1, a2, d0, d1, d2;
} fzre_ip_cur;

/* Point k's chunk index and its coordinate along d (*cd); the first call
 * has k = t and c at box 0, each later one k + nt. */
FZRE_IP_FI FZR_HD uint32_t fzre_ip_next(const fzre_ip_pass *ps, fzre_ip_cur *c, uint32_t k,
                                        unsigned t, unsigned nt, unsigned d, uint64_t h,
                                        uint64_t *cd) {
  if (k >= ps->end[c->b] || k == t) {
    while (k >= ps->end[c->b])
      c->b++;
    const fzre_ip_box *bx = c->bx = &ps->box[c->b];
    uint32_t kk = k - (c->b ? ps->end[c->b - 1] : 0u), rest = kk / bx->cnt[2],
             dr = nt / bx->cnt[2];
    c->a2 = kk % bx->cnt[2];
    c->a1 = rest % bx->cnt[1];
    c->a0 = rest / bx->cnt[1];
    c->d2 = nt % bx->cnt[2];
    c->d1 = dr % bx->cnt[1];
    c->d0 = dr / bx->cnt[1];
  } else {
    const fzre_ip_box *bx = c->bx;
    c->a2 += c->d2;
    if (c->a2 >= bx->cnt[2]) {
      c->a2 -= bx->cnt[2];
      c->a1++;
    }
    c->a1 += c->d1;
    if (c->a1 >= bx->cnt[1]) {
      c->a1 -= bx->cnt[1];
      c->a0++;
    }
    c->a0 += c->d0;
  }
  const fzre_ip_box *bx = c->bx;
  uint64_t ad = d == 0 ? c->a0 : d == 1 ? c->a1 : c->a2;
  *cd = bx->cd + ad * 2 * h;
  return bx->base + c->a0 * bx->si[0] + c->a1 * bx->si[1] + c->a2 * bx->si[2];
}

/* The rebuilt value at i as a prediction reads it.  flags: NULL where
 * vals already holds what the engine keeps (the encoder's pv), or the
 * outlier flags of values stored as they are (the decoder's output),
 * where an outlier that is not finite reads as 0; the flag is loaded only
 * for a value that is not finite, which the engine's kept value of any
 * other point is. */
FZRE_IP_FI FZR_HD double fzre_ip_val(const uint8_t *vals, const uint8_t *flags, unsigned w,
                                     uint32_t i) {
  double v = w == 4 ? (double)((const float *)vals)[i] : ((const double *)vals)[i];
  return flags == NULL || isfinite(v) || !flags[i] ? v : 0.0;
}

/* Whether all four neighbours of the cubic lie in the array and the
 * chunk (cd is an odd multiple of h, off h times the stride of d). */
FZRE_IP_FI FZR_HD bool fzre_ip_cubic(uint32_t i, uint64_t cd, uint64_t h, uint64_t off,
                                     uint64_t ed, uint32_t n) {
  return i >= 3 * off && cd >= 3 * h && cd + 3 * h < ed && i + 3 * off < n;
}

/* The cubic's four neighbours of i, from values the engine keeps. */
FZRE_IP_FI FZR_HD void fzre_ip_four(const uint8_t *pv, unsigned w, uint32_t i, uint64_t off,
                                    double *va, double *vb, double *vc, double *ve) {
  *va = fzre_ip_val(pv, NULL, w, (uint32_t)(i - 3 * off));
  *vb = fzre_ip_val(pv, NULL, w, (uint32_t)(i - off));
  *vc = fzre_ip_val(pv, NULL, w, (uint32_t)(i + off));
  *ve = fzre_ip_val(pv, NULL, w, (uint32_t)(i + 3 * off));
}

/* Pass (h, d)'s prediction of point i (coordinate cd along d) from its
 * neighbours along d at -3h, -h, +h, +3h that lie in the array and the
 * chunk (stage_interp.c's predict(): the cubic with all four, the mean of
 * the near ones, else the near one there is, else 0).  off is h times
 * the stride of d, ed the extent of d.  The four of the cubic, nearly
 * every point's, are loaded before any is used, so that a point waits
 * for the memory once. */
FZRE_IP_FI FZR_HD double fzre_ip_predict(const uint8_t *vals, const uint8_t *flags, unsigned w,
                                         uint32_t i, uint64_t cd, uint64_t h, uint64_t off,
                                         uint64_t ed, uint32_t n) {
  /* cd is an odd multiple of h, so the near neighbour before always
   * lies in the array. */
  bool hb = i >= off, hc = cd + h < ed && i + off < n;
  if (hb && hc && cd >= 3 * h && i >= 3 * off && cd + 3 * h < ed && i + 3 * off < n) {
    double va = fzre_ip_val(vals, flags, w, (uint32_t)(i - 3 * off));
    double vb = fzre_ip_val(vals, flags, w, (uint32_t)(i - off));
    double vc = fzre_ip_val(vals, flags, w, (uint32_t)(i + off));
    double ve = fzre_ip_val(vals, flags, w, (uint32_t)(i + 3 * off));
    return (-va + 9.0 * vb + 9.0 * vc - ve) * 0.0625;
  }
  if (hb && hc)
    return (fzre_ip_val(vals, flags, w, (uint32_t)(i - off)) +
            fzre_ip_val(vals, flags, w, (uint32_t)(i + off))) *
           0.5;
  return hb   ? fzre_ip_val(vals, flags, w, (uint32_t)(i - off))
         : hc ? fzre_ip_val(vals, flags, w, (uint32_t)(i + off))
              : 0.0;
}

/* One pass (h, d): each of the thread's points predicted and coded. */
FZRE_IP_FI FZR_HD void fzre_ip_level_w(const fzre_ip *P, unsigned pass, const fzre_q *q,
                                       const uint8_t *in, unsigned w, uint8_t *words, uint8_t *bad,
                                       uint8_t *pv, unsigned t, unsigned nt) {
  const fzre_ip_pass *ps = &P->pass[pass];
  uint64_t h = (uint64_t)(FZRE_IP_TOP / 2) >> ((pass - 1) / 3);
  unsigned d = (pass - 1) % 3;
  uint64_t ed = P->ext[d], off = ps->off;
  uint32_t n = P->n, total = ps->end[FZRE_IP_BOXES - 1];
  if (t >= total)
    return;
  /* Each point's value (from the array: the memory's longest wait) and,
   * where all four lie in the array and the chunk (nearly everywhere),
   * its four neighbours are loaded a point ahead of its turn: a point of
   * a pass is never another's neighbour, so its stores cannot change
   * them. */
  fzre_ip_cur cur = {ps->box, 0, 0, 0, 0, 0, 0, 0};
  uint64_t cd;
  uint32_t i = fzre_ip_next(ps, &cur, t, t, nt, d, h, &cd);
  uint64_t x = fzre_ip_load(in, w, i);
  bool cub = fzre_ip_cubic(i, cd, h, off, ed, n);
  double va = 0, vb = 0, vc = 0, ve = 0;
  if (cub)
    fzre_ip_four(pv, w, i, off, &va, &vb, &vc, &ve);
  for (uint32_t k = t;;) {
    uint32_t k2 = k + nt, i2 = 0;
    uint64_t cd2 = 0, x2 = 0;
    double va2 = 0, vb2 = 0, vc2 = 0, ve2 = 0;
    const bool more = k2 < total;
    bool cub2 = false;
    if (more) {
      i2 = fzre_ip_next(ps, &cur, k2, t, nt, d, h, &cd2);
      x2 = fzre_ip_load(in, w, i2);
      cub2 = fzre_ip_cubic(i2, cd2, h, off, ed, n);
      if (cub2)
        fzre_ip_four(pv, w, i2, off, &va2, &vb2, &vc2, &ve2);
    }
    double p = cub ? (-va + 9.0 * vb + 9.0 * vc - ve) * 0.0625
                   : fzre_ip_predict(pv, NULL, w, i, cd, h, off, ed, n);
    fzre_ip_point(q, w, x, p, words, bad, pv, i);
    if (!more)
      break;
    k = k2;
    i = i2;
    cd = cd2;
    x = x2;
    cub = cub2;
    va = va2;
    vb = vb2;
    vc = vc2;
    ve = ve2;
  }
}

static inline FZR_HD void fzre_ip_chain(fzre_ipe *E, const fzre_q *q, unsigned w, uint8_t *words,
                                        uint8_t *bad, uint8_t *pv, uint32_t m) {
  if (w == 4)
    fzre_ip_chain_w(E, q, 4u, words, bad, pv, m);
  else
    fzre_ip_chain_w(E, q, 8u, words, bad, pv, m);
}

static inline FZR_HD void fzre_ip_level(const fzre_ip *P, unsigned pass, const fzre_q *q,
                                        const uint8_t *in, unsigned w, uint8_t *words, uint8_t *bad,
                                        uint8_t *pv, unsigned t, unsigned nt) {
  if (w == 4)
    fzre_ip_level_w(P, pass, q, in, 4u, words, bad, pv, t, nt);
  else
    fzre_ip_level_w(P, pass, q, in, 8u, words, bad, pv, t, nt);
}

/* The chunk's codes (each value's zigzagged bin, 0 for an outlier) into
 * words, its outlier flags into bad, as fze_interp_encode gives them for a
 * quant stage without fill, step != 0 and not PWREL.  ext: the folded
 * extents the walk uses (Z, Y, X, slowest first); in: elements first ..
 * first + n - 1 of the array, w = 4 (f32) or 8 (f64); pv: scratch of n * w
 * bytes, the rebuilt values.  in, words and pv aligned for the type.
 * Every thread of the block calls it; valid for all once it returns. */
static inline FZR_HD void fzre_interp(fzre_ipe *E, const fzre_q *q, const uint64_t ext[3],
                                      const uint8_t *in, unsigned w, uint64_t n, uint64_t first,
                                      uint8_t *words, uint8_t *bad, uint8_t *pv) {
  FZR_T0;
  fzre_ip *P = &E->P;
  FZR_ALL(fzre_ip_plan(P, ext, first, n, t));
  FZR_SYNC();
  FZR_CLK(4);
  /* Passes without points (the axes a 1-D or 2-D walk lacks) cost no
   * barrier.  Which they are is taken now, into each thread's own mask:
   * after the last pass's barrier the caller's next piece may already
   * reuse P's room (a union), so no thread may read P after it, as a
   * thread that tested the passes left over there would. */
  unsigned live = 0;
  for (unsigned pass = 1; pass < FZRE_IP_PASSES; pass++)
    live |= (P->pass[pass].end[FZRE_IP_BOXES - 1] != 0 ? 1u : 0u) << pass;
  /* The anchors, a batch of nt at a time: the block stages them, thread 0
   * chains them. */
  const uint32_t na = P->pass[0].end[FZRE_IP_BOXES - 1];
  FZR_ONE(E->prev = 0);
  for (uint32_t b = 0; b < na; b += nt) {
    FZR_ALL(fzre_ip_stage(E, in, w, b, t));
    FZR_SYNC();
    FZR_ONE(fzre_ip_chain(E, q, w, words, bad, pv, na - b < nt ? na - b : nt));
    FZR_SYNC();
  }
  FZR_CLK(5);
  for (unsigned pass = 1; pass < FZRE_IP_PASSES; pass++) {
    if (!((live >> pass) & 1u))
      continue;
    FZR_ALL(fzre_ip_level(P, pass, q, in, w, words, bad, pv, t, nt));
    FZR_SYNC();
    FZR_CLK(20 + pass);
  }
}

#endif
