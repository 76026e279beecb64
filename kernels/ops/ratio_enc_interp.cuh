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
 * The walk itself, its tables and its predictions are the decoder's too
 * (ratio_interp.cuh).  In format version 5 (q->lv) each level takes its
 * own bin (fzo_interp_level_step) and a point's word goes to its place in
 * the walk, not to its chunk index: point k of a pass after the words of
 * the passes before (stage_interp.c's reorder); its outlier flag and
 * rebuilt value stay at its chunk index.
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
#include "ratio_interp.cuh"
#include "ratio_phase.cuh"

/* The encoder's: the walk's state and a batch of anchors staged for thread
 * 0's chain (their chunk indices and values' bits, in the walk's order),
 * with the chain's last rebuilt value. */
typedef struct fzre_ipe {
  fzr_ip P;
  uint64_t ax[FZR_NT];
  uint32_t ai[FZR_NT];
  double prev;
} fzre_ipe;

#ifdef __cplusplus
static_assert(sizeof(fzre_ipe) <= 12288, "fzre_ipe must fit in 12 KiB of shared memory");
#else
_Static_assert(sizeof(fzre_ipe) <= 12288, "fzre_ipe must fit in 12 KiB of shared memory");
#endif

static inline FZR_HD double fzre_ip_fin0(double v) { return isfinite(v) ? v : 0.0; }

/* The value at i as its bits (a float's in the low 32 for f32): the
 * anchors' chain loads the next one ahead of its turn. */
FZR_IP_FI FZR_HD uint64_t fzre_ip_load(const uint8_t *in, unsigned w, uint32_t i) {
  return w == 4 ? ((const uint32_t *)in)[i] : ((const uint64_t *)in)[i];
}

/* stage_interp.c's point() encoding: the value at i (bits x) against
 * prediction p; returns the rebuilt value it leaves in pv.  in, words and
 * pv are aligned for the element type. */
FZR_IP_FI FZR_HD double fzre_ip_point(const fzre_q *q, unsigned w, uint64_t x, double p,
                                       uint8_t *words, uint8_t *bad, uint8_t *pv, uint32_t i,
                                       uint32_t wi) {
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
    ((uint32_t *)words)[wi] = ok ? fzo_zigzag32((uint32_t)(int32_t)b) : 0u;
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
  ((uint64_t *)words)[wi] = ok ? fzo_zigzag64((uint64_t)(int64_t)b) : 0u;
  bad[i] = (uint8_t)!ok;
  double kept = ok ? r : fzre_ip_fin0(v);
  ((double *)pv)[i] = kept;
  return kept;
}

/* q with the bins of the level of spacing 2^l, as stage_interp.c's
 * level_bins gives them. */
static inline FZR_HD fzre_q fzre_ip_level_q(const fzre_q *q, unsigned l) {
  fzre_q r = *q;
  r.step = fzo_interp_level_step(q->step, l, q->lv);
  r.inv = 1.0 / r.step;
  return r;
}

/* The chunk index of anchor k (point k of the walk's pass 0, in memory
 * order; k below the pass's count). */
FZR_IP_FI FZR_HD uint32_t fzre_ip_anchor(const fzr_ip_pass *ps, uint32_t k) {
  unsigned bi = 0;
  while (k >= ps->end[bi])
    bi++;
  return fzr_ip_at(&ps->box[bi], k - (bi ? ps->end[bi - 1] : 0u));
}

/* Anchor b + t staged: its chunk index and its value's bits; past the
 * last, nothing. */
static inline FZR_HD void fzre_ip_stage(fzre_ipe *E, const uint8_t *in, unsigned w, uint32_t b,
                                        unsigned t) {
  const fzr_ip_pass *ps = &E->P.pass[0];
  uint32_t k = b + t;
  if (k >= ps->end[FZR_IP_BOXES - 1])
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
FZR_IP_FI FZR_HD void fzre_ip_chain_w(fzre_ipe *E, const fzre_q *q, unsigned w, uint8_t *words,
                                       uint8_t *bad, uint8_t *pv, uint32_t b, uint32_t m) {
  double prev = E->prev;
  const fzre_q qa = fzre_ip_level_q(q, fzr_ip_level_of(0));
  /* In version 5 anchor b + j's word is word b + j. */
  for (uint32_t j = 0; j < m; j++)
    prev = fzre_ip_point(&qa, w, E->ax[j], prev, words, bad, pv, E->ai[j],
                         q->lv ? b + j : E->ai[j]);
  E->prev = prev;
}

/* One pass (h, d): each of the thread's points predicted and coded; in
 * version 5 point k's word is word base + k, base the points of the
 * passes before. */
FZR_IP_FI FZR_HD void fzre_ip_level_w(const fzr_ip *P, unsigned pass, const fzre_q *qc,
                                       const uint8_t *in, unsigned w, uint8_t *words, uint8_t *bad,
                                       uint8_t *pv, unsigned t, unsigned nt, uint32_t base) {
  const fzr_ip_pass *ps = &P->pass[pass];
  uint64_t h = (uint64_t)(FZR_IP_TOP / 2) >> ((pass - 1) / 3);
  const fzre_q ql = fzre_ip_level_q(qc, fzr_ip_level_of(pass)), *q = &ql;
  unsigned d = (pass - 1) % 3;
  uint64_t ed = P->ext[d], off = ps->off;
  uint32_t n = P->n, total = ps->end[FZR_IP_BOXES - 1];
  if (t >= total)
    return;
  /* Each point's value (from the array: the memory's longest wait) and,
   * where all four lie in the array and the chunk (nearly everywhere),
   * its four neighbours are loaded a point ahead of its turn: a point of
   * a pass is never another's neighbour, so its stores cannot change
   * them. */
  fzr_ip_cur cur = {ps->box, 0, 0, 0, 0, 0, 0, 0};
  uint64_t cd;
  uint32_t i = fzr_ip_next(ps, &cur, t, t, nt, d, h, &cd);
  uint64_t x = fzre_ip_load(in, w, i);
  bool cub = fzr_ip_cubic(i, cd, h, off, ed, n);
  double va = 0, vb = 0, vc = 0, ve = 0;
  if (cub)
    fzr_ip_four(pv, w, i, off, &va, &vb, &vc, &ve);
  for (uint32_t k = t;;) {
    uint32_t k2 = k + nt, i2 = 0;
    uint64_t cd2 = 0, x2 = 0;
    double va2 = 0, vb2 = 0, vc2 = 0, ve2 = 0;
    const bool more = k2 < total;
    bool cub2 = false;
    if (more) {
      i2 = fzr_ip_next(ps, &cur, k2, t, nt, d, h, &cd2);
      x2 = fzre_ip_load(in, w, i2);
      cub2 = fzr_ip_cubic(i2, cd2, h, off, ed, n);
      if (cub2)
        fzr_ip_four(pv, w, i2, off, &va2, &vb2, &vc2, &ve2);
    }
    double p = cub ? (-va + 9.0 * vb + 9.0 * vc - ve) * 0.0625
                   : fzr_ip_predict(pv, NULL, w, i, cd, h, off, ed, n);
    fzre_ip_point(q, w, x, p, words, bad, pv, i, q->lv ? base + k : i);
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
                                        uint8_t *bad, uint8_t *pv, uint32_t b, uint32_t m) {
  if (w == 4)
    fzre_ip_chain_w(E, q, 4u, words, bad, pv, b, m);
  else
    fzre_ip_chain_w(E, q, 8u, words, bad, pv, b, m);
}

static inline FZR_HD void fzre_ip_level(const fzr_ip *P, unsigned pass, const fzre_q *q,
                                        const uint8_t *in, unsigned w, uint8_t *words, uint8_t *bad,
                                        uint8_t *pv, unsigned t, unsigned nt, uint32_t base) {
  if (w == 4)
    fzre_ip_level_w(P, pass, q, in, 4u, words, bad, pv, t, nt, base);
  else
    fzre_ip_level_w(P, pass, q, in, 8u, words, bad, pv, t, nt, base);
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
  fzr_ip *P = &E->P;
  FZR_ALL(fzr_ip_plan(P, ext, first, n, q->lv, q->flat, t));
  FZR_SYNC();
  FZR_CLK(4);
  /* Passes without points (the axes a 1-D or 2-D walk lacks) cost no
   * barrier.  Which they are is taken now, into each thread's own mask:
   * after the last pass's barrier the caller's next piece may already
   * reuse P's room (a union), so no thread may read P after it, as a
   * thread that tested the passes left over there would. */
  unsigned live = 0;
  uint32_t base[FZR_IP_PASSES]; /* each pass's first word in version 5 */
  for (unsigned pass = 1; pass < FZR_IP_PASSES; pass++) {
    live |= (P->pass[pass].end[FZR_IP_BOXES - 1] != 0 ? 1u : 0u) << pass;
    base[pass] = fzr_ip_words_before(P, pass);
  }
  /* The anchors, a batch of nt at a time: the block stages them, thread 0
   * chains them. */
  const uint32_t na = P->pass[0].end[FZR_IP_BOXES - 1];
  FZR_ONE(E->prev = 0);
  for (uint32_t b = 0; b < na; b += nt) {
    FZR_ALL(fzre_ip_stage(E, in, w, b, t));
    FZR_SYNC();
    FZR_ONE(fzre_ip_chain(E, q, w, words, bad, pv, b, na - b < nt ? na - b : nt));
    FZR_SYNC();
  }
  FZR_CLK(5);
  for (unsigned pass = 1; pass < FZR_IP_PASSES; pass++) {
    if (!((live >> pass) & 1u))
      continue;
    FZR_ALL(fzre_ip_level(P, pass, q, in, w, words, bad, pv, t, nt, base[pass]));
    FZR_SYNC();
    FZR_CLK(20 + pass);
  }
}

#endif
