/*
 * ratio_interp.cuh - the interpolation's walk over a chunk, shared by the
 * ratio preset's GPU encoder (ratio_enc_interp.cuh) and decoder
 * (ratio_dec.cuh): the tables of each pass, a thread's walk over a pass's
 * points and the prediction of a point from values already rebuilt
 * (stage_interp.c's walk and predict()).
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
 */
#ifndef FZK_RATIO_INTERP_CUH
#define FZK_RATIO_INTERP_CUH

#include "ops.h"
#include "ratio_phase.cuh"

#define FZR_IP_TOP FZE_INTERP_TOP
#define FZR_IP_BOXES 5u
#define FZR_IP_PASSES 13u /* the anchors, then (h, d) for h = 8, 4, 2, 1 */

/* The level of pass p, log2 of its spacing: 4 for the anchors (every
 * 16th point), then 3, 2, 1, 0. */
static inline FZR_HD unsigned fzr_ip_level_of(unsigned pass) {
  return pass == 0 ? 4u : 3u - (pass - 1) / 3;
}

/* The loops are written once for both widths and compiled for each with w
 * a constant (fzre_ip_level, fzre_ip_chain, FZR_IP_FI), so the device
 * code has no branch on the type per point. */
/* One box's share of a pass: the counts along z, y, x, the chunk index
 * of its first point and the index steps between points along each axis
 * (0 where only one point lies), the first point's coordinate along the
 * axis of prediction. */
typedef struct fzr_ip_box {
  uint64_t cd;
  uint32_t cnt[3], base, si[3];
} fzr_ip_box;

typedef struct fzr_ip_pass {
  fzr_ip_box box[FZR_IP_BOXES];
  uint32_t end[FZR_IP_BOXES]; /* points in boxes 0 .. b */
  uint64_t off;               /* h times the stride of axis d */
} fzr_ip_pass;

/* The walk's state, shared by the block: 3048 bytes (13 passes of 232). */
typedef struct fzr_ip {
  uint64_t ext[3];
  uint32_t n;
  fzr_ip_pass pass[FZR_IP_PASSES];
} fzr_ip;

static inline FZR_HD uint64_t fzr_ip_first_at(uint64_t lo, uint64_t m, uint64_t r) {
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
FZR_IP_FI FZR_HD int fzr_ip_cut(const uint64_t ext[3], uint64_t s, uint64_t n, unsigned b,
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
  default: hi[2] = e % X; return r0 != r1;
  }
}

/* Thread p < FZR_IP_PASSES builds pass p's table (0: the anchors; 1 + 3 l + d:
 * h = 8 >> l along axis d), each from its own copy of the boxes; lv: the
 * walk of format version 5, from fzo_interp_origin's origin rather than
 * the array's; flat: the leading axes not interpolated (version 6's
 * FZE_PK_DIMS: every coordinate along them in every table, no pass along
 * them). */
static inline FZR_HD void fzr_ip_plan(fzr_ip *P, const uint64_t ext[3], uint64_t first, uint64_t n,
                                      unsigned lv, unsigned flat, unsigned t) {
  if (t >= FZR_IP_PASSES)
    return;
  uint64_t str[3] = {ext[1] * ext[2], ext[2], 1};
  if (t == 0) {
    for (unsigned j = 0; j < 3; j++)
      P->ext[j] = ext[j];
    P->n = (uint32_t)n;
  }
  fzr_ip_pass *ps = &P->pass[t];
  uint64_t h = t == 0 ? FZR_IP_TOP : (uint64_t)(FZR_IP_TOP / 2) >> ((t - 1) / 3);
  unsigned d = t == 0 ? 0u : (t - 1) % 3;
  uint64_t stp[3], res[3], o[3] = {0, 0, 0};
  if (lv && n)
    fzo_interp_origin(ext, first, n, o);
  for (unsigned j = 0; j < 3; j++) {
    stp[j] = j < flat ? 1 : t == 0 ? FZR_IP_TOP : j == d ? 2 * h : j < d ? h : 2 * h;
    res[j] = j < flat ? 0 : ((t == 0 ? 0 : j == d ? h : 0) + o[j]) % stp[j];
  }
  const int none = t != 0 && d < flat; /* a pass along an axis not interpolated */
  ps->off = h * (d == 0 ? str[0] : d == 1 ? str[1] : 1u);
  uint32_t total = 0;
  for (unsigned b = 0; b < FZR_IP_BOXES; b++) {
    fzr_ip_box *bx = &ps->box[b];
    uint64_t lo[3], hi[3], start[3], cnt[3];
    int there = n && !none && fzr_ip_cut(ext, first, n, b, lo, hi);
    for (unsigned j = 0; j < 3; j++) {
      start[j] = there ? fzr_ip_first_at(lo[j], stp[j], res[j]) : 0;
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

/* Where pass p's words start in format version 5, whose words are in the
 * walk's order: after the points of the passes before it. */
static inline FZR_HD uint32_t fzr_ip_words_before(const fzr_ip *P, unsigned pass) {
  uint32_t base = 0;
  for (unsigned p = 0; p < pass; p++)
    base += P->pass[p].end[FZR_IP_BOXES - 1];
  return base;
}

/* The rebuilt value at i.  For f32 pv is a float array: every value the
 * engine keeps there (as a double) is (double)(float)r or finite_or_0 of a
 * float, so a float holds it exactly and reads back as the same double. */
FZR_IP_FI FZR_HD double fzr_ip_pv(const uint8_t *pv, unsigned w, uint32_t i) {
  return w == 4 ? (double)((const float *)pv)[i] : ((const double *)pv)[i];
}

/* The chunk index of point k of a box's share of a pass (x fastest). */
FZR_IP_FI FZR_HD uint32_t fzr_ip_at(const fzr_ip_box *bx, uint32_t k) {
  uint32_t a2 = k % bx->cnt[2], rest = k / bx->cnt[2];
  uint32_t a1 = rest % bx->cnt[1], a0 = rest / bx->cnt[1];
  return bx->base + a0 * bx->si[0] + a1 * bx->si[1] + a2 * bx->si[2];
}

/* A thread's walk over the points k = t, t + nt, ... of a pass: the
 * digits (a0, a1, a2) of its point in box b, found by division where k
 * enters a box and else stepped on by nt's digits, with carries, so that
 * a point costs no division.  Shared with the decoder (ratio_dec.cuh),
 * whose walk is this one. */
typedef struct fzr_ip_cur {
  const fzr_ip_box *bx;
  unsigned b;
  uint32_t a0, a1, a2, d0, d1, d2;
} fzr_ip_cur;

/* Point k's chunk index and its coordinate along d (*cd); the first call
 * has k = t and c at box 0, each later one k + nt. */
FZR_IP_FI FZR_HD uint32_t fzr_ip_next(const fzr_ip_pass *ps, fzr_ip_cur *c, uint32_t k, unsigned t,
                                      unsigned nt, unsigned d, uint64_t h, uint64_t *cd) {
  if (k >= ps->end[c->b] || k == t) {
    while (k >= ps->end[c->b])
      c->b++;
    const fzr_ip_box *bx = c->bx = &ps->box[c->b];
    uint32_t kk = k - (c->b ? ps->end[c->b - 1] : 0u), rest = kk / bx->cnt[2], dr = nt / bx->cnt[2];
    c->a2 = kk % bx->cnt[2];
    c->a1 = rest % bx->cnt[1];
    c->a0 = rest / bx->cnt[1];
    c->d2 = nt % bx->cnt[2];
    c->d1 = dr % bx->cnt[1];
    c->d0 = dr / bx->cnt[1];
  } else {
    const fzr_ip_box *bx = c->bx;
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
  const fzr_ip_box *bx = c->bx;
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
FZR_IP_FI FZR_HD double fzr_ip_val(const uint8_t *vals, const uint8_t *flags, unsigned w,
                                   uint32_t i) {
  double v = w == 4 ? (double)((const float *)vals)[i] : ((const double *)vals)[i];
  return flags == NULL || isfinite(v) || !flags[i] ? v : 0.0;
}

/* Whether all four neighbours of the cubic lie in the array and the
 * chunk (cd is an odd multiple of h, off h times the stride of d). */
FZR_IP_FI FZR_HD bool fzr_ip_cubic(uint32_t i, uint64_t cd, uint64_t h, uint64_t off, uint64_t ed,
                                   uint32_t n) {
  return i >= 3 * off && cd >= 3 * h && cd + 3 * h < ed && i + 3 * off < n;
}

/* The cubic's four neighbours of i, from values the engine keeps. */
FZR_IP_FI FZR_HD void fzr_ip_four(const uint8_t *pv, unsigned w, uint32_t i, uint64_t off,
                                  double *va, double *vb, double *vc, double *ve) {
  *va = fzr_ip_val(pv, NULL, w, (uint32_t)(i - 3 * off));
  *vb = fzr_ip_val(pv, NULL, w, (uint32_t)(i - off));
  *vc = fzr_ip_val(pv, NULL, w, (uint32_t)(i + off));
  *ve = fzr_ip_val(pv, NULL, w, (uint32_t)(i + 3 * off));
}

/* Pass (h, d)'s prediction of point i (coordinate cd along d) from its
 * neighbours along d at -3h, -h, +h, +3h that lie in the array and the
 * chunk (stage_interp.c's predict(): the cubic with all four, the mean of
 * the near ones, else the near one there is, else 0).  off is h times
 * the stride of d, ed the extent of d.  The four of the cubic, nearly
 * every point's, are loaded before any is used, so that a point waits
 * for the memory once. */
FZR_IP_FI FZR_HD double fzr_ip_predict(const uint8_t *vals, const uint8_t *flags, unsigned w,
                                       uint32_t i, uint64_t cd, uint64_t h, uint64_t off,
                                       uint64_t ed, uint32_t n) {
  /* cd is an odd multiple of h, so the near neighbour before always
   * lies in the array. */
  bool hb = i >= off, hc = cd + h < ed && i + off < n;
  if (hb && hc && cd >= 3 * h && i >= 3 * off && cd + 3 * h < ed && i + 3 * off < n) {
    double va = fzr_ip_val(vals, flags, w, (uint32_t)(i - 3 * off));
    double vb = fzr_ip_val(vals, flags, w, (uint32_t)(i - off));
    double vc = fzr_ip_val(vals, flags, w, (uint32_t)(i + off));
    double ve = fzr_ip_val(vals, flags, w, (uint32_t)(i + 3 * off));
    return (-va + 9.0 * vb + 9.0 * vc - ve) * 0.0625;
  }
  if (hb && hc)
    return (fzr_ip_val(vals, flags, w, (uint32_t)(i - off)) +
            fzr_ip_val(vals, flags, w, (uint32_t)(i + off))) *
           0.5;
  return hb   ? fzr_ip_val(vals, flags, w, (uint32_t)(i - off))
         : hc ? fzr_ip_val(vals, flags, w, (uint32_t)(i + off))
              : 0.0;
}

#endif
