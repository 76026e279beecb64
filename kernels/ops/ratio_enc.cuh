/*
 * ratio_enc.cuh - the encoder of the ratio preset's chunks (format version
 * 6: quant | interp | huffman | rze; version 3 with lorenzo in interp's
 * place), written once for the device and for a host model of it, as
 * ratio_dec.cuh is written (ratio_phase.cuh says how).
 *
 * One block of FZR_NT threads codes one chunk, making the CPU engine's
 * choices with its arithmetic (codec.c encode_predicted and
 * fze_chunk_encode): the quantizer's words and side list; the cheapest
 * Lorenzo k by its sampled price; the guess at the interpolation's price
 * (in version 6 on the chain's dims and on one fewer, the lower kept with
 * its dims), which may skip the interpolation; the interpolation and its
 * price (the sampled one, or below a bit a word both candidates' exact
 * huffman bits, fzre_huff_price); the lower of the two prices (the
 * interpolation on a tie); then the huffman stream (not longer than the
 * chunk less one byte), rze over it, and the chunk as side list, predictor
 * byte, the stream's length and rze's output, or the values raw where
 * that is not smaller.  The pieces are
 * ratio_enc_lz.cuh, ratio_enc_interp.cuh, ratio_enc_huff.cuh and
 * ratio_enc_rze.cuh; each leaves its results in its part of the block's
 * shared state, which this file copies out before the next piece reuses
 * the room.  The chunk goes to its slot of the staging area with its size
 * and CRC-32C; ratio_kernels.cuh's place kernel then moves the slots into
 * the archive.
 *
 * With lorenzo in interp's place (quant | lorenzo | huffman | rze) the
 * chunk takes lorenzo's best k, as fze_chunk_encode's lorenzo stage does,
 * with the same framing.
 *
 * The lossless-ratio preset's chain (lorenzo | byteplanes, format version
 * 4, on 4- and 8-byte words) takes lorenzo's best k on the words as they
 * are (no quantizer), its residuals, then each byte plane (least
 * significant first) gathered and coded by the same huffman coder on
 * bytes (stage_byteplanes.c): a plane of zeros is left out, one the code
 * would not shrink is kept as it is.  The chunk is the predictor byte,
 * the planes' lengths as LEB128 varints and the planes, or the values raw
 * where that is not smaller (codec.c).
 *
 * The GPU takes chains without a fill value only (gpu_plan.c leaves the
 * others to the CPU engine), so the walk never meets fill cells.
 */
#ifndef FZK_RATIO_ENC_CUH
#define FZK_RATIO_ENC_CUH

#include "ratio_dec.cuh"
#include "ratio_enc_huff.cuh"
#include "ratio_enc_interp.cuh"
#include "ratio_enc_lz.cuh"
#include "ratio_enc_rze.cuh"

/* The job, the same for every chunk. */
typedef struct fzre_job {
  const uint8_t *in;       /* the array, aligned for its elements */
  uint64_t raw_bytes;
  uint32_t cb;             /* input bytes per chunk */
  uint32_t w;              /* 4 (f32) or 8 (f64) */
  uint32_t levels;         /* rze's */
  uint32_t pdims;          /* interp's D */
  uint32_t lorenzo;        /* stage 1 is lorenzo: its best k, no interpolation */
  uint32_t pwrel;          /* quant's mode is PWREL */
  uint32_t lv;             /* interp: its form, fze_stage's lv (1: version 5's walk,
                            * 2: and version 6's dims per chunk) */
  uint32_t hform;          /* huffman: its stage's lv (1: each stream in the shorter form) */
  const double *qp;        /* eb_abs, step (as the prep kernel left them); NULL
                            * without quant */
  uint64_t ext[3][3];      /* interp's (and lorenzo's) folded extents, per k */
  uint8_t *scratch;        /* stride bytes per block of the launch */
  uint64_t stride;
  uint64_t nchunks;
  unsigned long long *ticket; /* the next chunk to take, 0 at the launch */
  uint8_t *stage;          /* chunk c's bytes at stage + c * cb */
  uint32_t *sizes, *crcs;  /* each chunk's length and CRC-32C */
  const uint32_t *crc_tab; /* the byte table of CRC-32C (reflected) */
  uint32_t planes;         /* lorenzo | byteplanes: no quant, no rze */
} fzre_job;

/* Scratch of one chunk: quant's words (cb), the chosen words (cb), the
 * outlier flags (cb / w), the two side lists (a count, then an index and
 * a value per element at most), the rebuilt values (cb), the huffman
 * stream (cb), rze's output (the stream, its bitmaps and 16 bytes), and
 * the pieces' own scratch, which they use one after another. */
static inline FZR_HD uint64_t fzre_side_cap(uint32_t cb, uint32_t w) {
  uint64_t n = cb / w;
  return 8 + n * ((n < 65536 ? 2u : 4u) + w);
}
static inline FZR_HD uint64_t fzre_rze_cap(uint32_t cb) { return cb + cb / 4 + 64; }
static inline FZR_HD uint64_t fzre_x_bytes(uint32_t cb, uint32_t w, uint32_t levels) {
  uint64_t a = fzre_lz_scratch(cb / w, w), b = fzre_huff_scratch(cb / w, w),
           c = fzre_rze_scratch(cb, levels);
  uint64_t m = a > b ? a : b;
  return m > c ? m : c;
}
typedef struct fzre_layout {
  uint64_t a, b, bad, sq, si, pv, h, r, x, stride;
} fzre_layout;
static inline FZR_HD fzre_layout fzre_layout_of(uint32_t cb, uint32_t w, uint32_t levels) {
  fzre_layout L;
  uint64_t o = 0, side = fzr_up(fzre_side_cap(cb, w), 256);
  L.a = o; o += fzr_up(cb, 256);
  L.b = o; o += fzr_up(cb, 256);
  L.bad = o; o += fzr_up(cb / w, 256);
  L.sq = o; o += side;
  L.si = o; o += side;
  L.pv = o; o += fzr_up(cb, 256);
  L.h = o; o += fzr_up(cb, 256);
  L.r = o; o += fzr_up(fzre_rze_cap(cb), 256);
  L.x = o; o += fzr_up(fzre_x_bytes(cb, w, levels), 256);
  L.stride = o;
  return L;
}

/* What the phases of one chunk share (the block's shared memory). */
typedef struct fzre_state {
  uint64_t c, first, n, raw;
  const uint8_t *in;  /* the chunk's values */
  uint8_t *out;       /* its slot of the staging area */
  uint8_t *a, *b, *bad, *sq, *si, *pv, *h, *r, *x;
  fzre_q q;
  uint64_t side_l, side_i, best, cost_l, cost_i, hlen, rlen, len;
  unsigned k, pk, skip, cheap, lk;
  unsigned kd;        /* the interpolation's dims (version 6: maybe D - 1) */
  uint64_t guess;     /* the lower guess at its price */
  uint64_t price_i;   /* the interpolation's exact price (cheap chunks) */
  const uint8_t *cw;  /* the chosen words, for huffman */
  uint8_t lenbuf[16];  /* the predictor byte and the stream's length */
  uint32_t part[FZR_NT], fac[FZR_LOG_NT]; /* CRC parts and factors (fzr_crc_block) */
  union {
    fzre_lz lz;
    fzre_ipe ip;
    fzre_hf hf;
    fzre_rz rz;
  } u;
  /* byteplanes: bit p set where plane p has a byte other than 0; the
   * predictor byte and the planes' lengths (at most 8 varints of 3 bytes:
   * a plane has at most 2^18 bytes), in lenbuf's place */
  uint32_t anym;
  uint8_t plens[32];
} fzre_state;

static inline FZR_HD void fzre_begin(fzre_state *S, const fzre_job *J, uint64_t c,
                                      uint64_t slot, unsigned planes) {
  S->c = c;
  uint64_t raw = J->raw_bytes - c * J->cb < J->cb ? J->raw_bytes - c * J->cb : J->cb;
  S->raw = raw;
  S->n = raw / J->w;
  S->first = c * (J->cb / J->w);
  S->in = J->in + c * J->cb;
  S->out = J->stage + c * J->cb;
  fzre_layout L = fzre_layout_of(J->cb, J->w, J->levels);
  uint8_t *base = J->scratch + slot * J->stride;
  S->a = base + L.a;
  S->b = base + L.b;
  S->bad = base + L.bad;
  S->sq = base + L.sq;
  S->si = base + L.si;
  S->pv = base + L.pv;
  S->h = base + L.h;
  S->r = base + L.r;
  S->x = base + L.x;
  /* The quantizer's parameters as the engine's stage holds them; its
   * loops and the interpolation divide by step themselves.  (byteplanes
   * has no quantizer.) */
  S->q.eb_abs = planes ? 0.0 : J->qp[0];
  S->q.step = planes ? 0.0 : J->qp[1];
  S->q.inv = S->q.step != 0 ? 1.0 / S->q.step : 0.0;
  S->q.pwrel = J->pwrel;
  S->q.lv = J->lv;
  S->q.flat = 0;
  S->best = UINT64_MAX;
  S->k = 1;
  S->cost_i = UINT64_MAX;
  S->side_i = 0;
  S->kd = J->pdims;
}

/* Thread 0: the guess on kd dims priced as codec.c prices it (as
 * lorenzo's every fifth, the sampled outliers as side-list entries); the
 * lower guess and its dims kept, the first (the chain's dims) on a tie. */
static inline FZR_HD void fzre_guessed(fzre_state *S, const fzre_job *J, unsigned kd) {
  uint64_t iw = S->n < 65536 ? 2u : 4u;
  uint64_t g = S->u.lz.cost / FZRE_COST_STEP * FZRE_GUESS_STEP;
  g += (8 * (uint64_t)FZRE_GUESS_STEP * S->u.lz.outl * (J->w + iw)) << 16;
  if (kd == J->pdims || g < S->guess) {
    S->guess = g;
    S->kd = kd;
  }
}

/* v as a LEB128 varint at p; its length. */
static inline FZR_HD unsigned fzre_put_varint(uint8_t *p, uint64_t v) {
  unsigned k = 0;
  while (v >= 0x80) {
    p[k++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[k++] = (uint8_t)v;
  return k;
}

/* Thread 0: the chunk's bytes after the side list: the predictor byte
 * (lorenzo's k, 0 for the interpolation on the chain's dims, FZE_PK_DIMS |
 * k on k fewer), then the huffman stream's length as a LEB128 varint; the
 * chunk's length, or raw when it is not smaller than the values. */
static inline FZR_HD void fzre_frame(fzre_state *S, const fzre_job *J) {
  S->lenbuf[0] = (uint8_t)(S->pk ? S->pk : S->kd < J->pdims ? FZE_PK_DIMS | S->kd : 0u);
  S->lk = 1 + fzre_put_varint(S->lenbuf + 1, S->hlen);
  uint64_t side = S->pk ? S->side_l : S->side_i;
  uint64_t total = side + S->lk + S->rlen;
  S->len = total >= S->raw ? S->raw : total;
}

/* The chunk's bytes into its slot: after lenbuf, rze's output, or (planes)
 * the planes. */
static inline FZR_HD void fzre_emit(fzre_state *S, unsigned t, unsigned nt, unsigned planes) {
  if (S->len == S->raw) {
    for (uint64_t i = t; i < S->raw; i += nt)
      S->out[i] = S->in[i];
    return;
  }
  const uint8_t *side = S->pk ? S->sq : S->si;
  uint64_t sl = S->pk ? S->side_l : S->side_i;
  for (uint64_t i = t; i < sl; i += nt)
    S->out[i] = side[i];
  if (t < S->lk)
    S->out[sl + t] = planes ? S->plens[t] : S->lenbuf[t];
  uint8_t *o = S->out + sl + S->lk;
  const uint8_t *body = planes ? S->h : S->r;
  for (uint64_t i = t; i < S->rlen; i += nt)
    o[i] = body[i];
}

static inline FZR_HD void fzre_copy(uint8_t *dst, const uint8_t *src, uint64_t n, unsigned t,
                                    unsigned nt) {
  for (uint64_t i = t; i < n; i += nt)
    dst[i] = src[i];
}

/* The block function: lorenzo's best k (the lowest of equals) for the
 * chunk's n words (w bytes each, the first the chunk's first), priced in
 * each k = 1..D, into S->k and S->best: quant's words, or (planes) the
 * values as they are. */
static inline FZR_HD void fzre_best_k(fzre_state *S, const fzre_job *J, unsigned planes,
                                      unsigned w, uint64_t n, uint64_t first) {
  FZR_T0;
  (void)nt;
  for (unsigned k = 1; k <= J->pdims; k++) {
    fzre_lz_price(&S->u.lz, J->ext[k - 1], planes ? S->in : S->a, w, n, first);
    FZR_ONE(if (S->u.lz.cost < S->best) { S->best = S->u.lz.cost; S->k = k; });
    FZR_SYNC();
  }
}

/* The block function of quant | interp | huffman | rze (and lorenzo in
 * interp's place) on words of w bytes: the chunk's length in S->len, its
 * bytes in the state fzre_emit reads. */
FZR_IP_FI FZR_HD void fzre_predicted(fzre_state *S, const fzre_job *J, unsigned w) {
  FZR_T0;
  const uint64_t n = S->n, first = S->first;
  /* Quant's words and side list, and lorenzo's best k priced on them. */
  fzre_quant(&S->u.lz, &S->q, S->in, n, w, S->a, S->bad);
  fzre_side_write(&S->u.lz, S->bad, S->in, n, w, S->sq, S->x);
  FZR_ONE(S->side_l = S->u.lz.side_len);
  FZR_SYNC();
  FZR_CLK(1);
  fzre_best_k(S, J, 0, w, n, first);
  FZR_ONE(S->cheap = FZE_PRICE_CHEAP(S->best, n); S->cost_l = S->best + ((8 * S->side_l) << 16);
          S->skip = J->pwrel != 0 || J->lorenzo != 0; S->cw = S->b);
  FZR_SYNC();
  FZR_CLK(2);
  if (!S->skip && S->q.step != 0) {
    fzre_interp_guess(&S->u.lz, &S->q, J->ext[J->pdims - 1], S->in, w, n, first);
    FZR_ONE(fzre_guessed(S, J, J->pdims));
    FZR_SYNC();
    if (J->lv >= 2 && J->pdims >= 2) {
      /* Along the D - 1 fastest axes only (FZE_PK_DIMS). */
      FZR_ONE(S->q.flat = fzo_interp_flat(J->pdims - 1, J->pdims));
      FZR_SYNC();
      fzre_interp_guess(&S->u.lz, &S->q, J->ext[J->pdims - 1], S->in, w, n, first);
      FZR_ONE(fzre_guessed(S, J, J->pdims - 1));
      FZR_SYNC();
    }
    FZR_ONE(S->skip = FZE_GUESS_SKIPS(S->cost_l, S->guess, S->cheap);
            S->q.flat = fzo_interp_flat(S->kd, J->pdims));
    FZR_SYNC();
    FZR_CLK(3);
  }
  if (!S->skip) {
    if (S->q.step == 0) {
      /* Lossless: the interpolation's words are quant's own (the values'
       * bits) with an empty side list. */
      FZR_ALL(fzre_copy(S->b, S->a, S->raw, t, nt));
      FZR_ONE(S->si[0] = 0; S->side_i = 1);
    } else {
      fzre_interp(&S->u.ip, &S->q, J->ext[J->pdims - 1], S->in, w, n, first, S->b, S->bad,
                  S->pv);
      fzre_side_write(&S->u.lz, S->bad, S->in, n, w, S->si, S->x);
      FZR_ONE(S->side_i = S->u.lz.side_len);
    }
    FZR_SYNC();
    FZR_CLK(7);
    if (S->cheap) {
      /* Both priced as huffman codes them: lorenzo's residuals in pv
       * (the rebuilt values are no longer needed). */
      fzre_huff_price(&S->u.hf, J->hform, S->b, w, n, S->x);
      FZR_ONE(S->price_i = S->u.hf.len + 8 * S->side_i);
      FZR_SYNC();
      fzre_lz_encode(J->ext[S->k - 1], S->a, S->pv, w, n, first);
      fzre_huff_price(&S->u.hf, J->hform, S->pv, w, n, S->x);
      FZR_ONE(S->pk = S->u.hf.len + 8 * S->side_l < S->price_i ? S->k : 0u;
              S->cw = S->pk ? S->pv : S->b);
      FZR_SYNC();
    } else {
      fzre_cost_every(&S->u.lz, S->b, w, n, FZRE_COST_STEP);
      FZR_ONE(S->cost_i = S->u.lz.cost + ((8 * S->side_i) << 16));
      FZR_SYNC();
    }
    FZR_CLK(8);
  }
  if (S->skip || !S->cheap) {
    FZR_ONE(S->pk = J->lorenzo || S->cost_l < S->cost_i ? S->k : 0u);
    FZR_SYNC();
    if (S->pk)
      fzre_lz_encode(J->ext[S->pk - 1], S->a, S->b, w, n, first);
  }
  FZR_SYNC();
  FZR_CLK(9);
  /* A code as long as the chunk cannot make it smaller. */
  fzre_huff(&S->u.hf, J->hform, S->cw, w, n, S->h, S->raw - 1, S->x);
  FZR_ONE(S->hlen = S->u.hf.len);
  FZR_SYNC();
  FZR_CLK(16);
  if (S->hlen == UINT64_MAX) {
    FZR_ONE(S->len = S->raw);
  } else {
    fzre_rze(&S->u.rz, J->levels, S->h, S->hlen, S->r, S->x);
    FZR_ONE(S->rlen = S->u.rz.len; fzre_frame(S, J));
  }
  FZR_SYNC();
  FZR_CLK(17);
}

/* ---- lorenzo | byteplanes ---- */

/* The n words (w bytes each) into their w byte planes, plane p at
 * planes + p up8(n) (8-byte aligned, for the coder's bitmap), each word
 * read once; S->anym gets bit p where plane p has a byte other than 0. */
FZR_IP_FI FZR_HD void fzre_planes_gather_w(fzre_state *S, const uint8_t *words, unsigned w,
                                           uint8_t *planes, unsigned t, unsigned nt) {
  const uint64_t n = S->n, st = fzr_up8(n);
  uint64_t all = 0;
  for (uint64_t i = t; i < n; i += nt) {
    uint64_t v = fzre_ld(words, w, i);
    all |= v;
    for (unsigned p = 0; p < w; p++)
      planes[p * st + i] = (uint8_t)(v >> (8 * p));
  }
  unsigned m = 0;
  for (unsigned p = 0; p < w; p++)
    m |= (all >> (8 * p) & 0xffu) != 0 ? 1u << p : 0u;
  if (m)
    FZR_ATOMIC_OR(&S->anym, m);
}

static inline FZR_HD void fzre_planes_gather(fzre_state *S, const uint8_t *words, unsigned w,
                                             uint8_t *planes, unsigned t, unsigned nt) {
  if (w == 4)
    fzre_planes_gather_w(S, words, 4u, planes, t, nt);
  else
    fzre_planes_gather_w(S, words, 8u, planes, t, nt);
}

/* Thread 0: plane p's length as stage_byteplanes.c takes it: 0 for
 * zeros, the code's where it is shorter than the plane (n - 1 bytes at
 * most), else n (the plane as it is). */
static inline FZR_HD void fzre_plane_len(fzre_state *S, unsigned p) {
  S->hlen = !(S->anym >> p & 1u)                      ? 0
            : S->n > 1 && S->u.hf.len != UINT64_MAX ? S->u.hf.len
                                                    : S->n;
}

/* Thread 0: the plane's length after the others'. */
static inline FZR_HD void fzre_plane_take(fzre_state *S) {
  S->lk += fzre_put_varint(S->plens + S->lk, S->hlen);
  S->rlen += S->hlen;
}

/* The block function of lorenzo | byteplanes: lorenzo's best k on the
 * words as they are, its residuals (in S->b), their planes (in S->a),
 * each coded after the planes before it (in S->h); the chunk's length in
 * S->len.  The w planes of up8(n) bytes fit S->a's cb bytes: cb / w is a
 * multiple of 8. */
static inline FZR_HD void fzre_planes(fzre_state *S, const fzre_job *J, unsigned w) {
  FZR_T0;
  const uint64_t n = S->n, st = fzr_up8(n);
  fzre_best_k(S, J, 1, w, n, S->first);
  FZR_ONE(S->pk = S->k; S->side_l = 0; S->plens[0] = (uint8_t)S->k; S->lk = 1; S->rlen = 0;
          S->anym = 0);
  FZR_SYNC();
  FZR_CLK(2);
  fzre_lz_encode(J->ext[S->pk - 1], S->in, S->b, w, n, S->first);
  FZR_CLK(9);
  FZR_ALL(fzre_planes_gather(S, S->b, w, S->a, t, nt));
  FZR_SYNC();
  FZR_CLK(10);
  for (unsigned p = 0; p < w; p++) {
    const uint8_t *plane = S->a + p * st;
    const unsigned any = S->anym >> p & 1u;
    if (any && n > 1)
      fzre_huff_bytes(&S->u.hf, plane, n, S->h + S->rlen, n - 1, S->x);
    FZR_ONE(fzre_plane_len(S, p));
    FZR_SYNC();
    if (any && S->hlen == n) {
      FZR_ALL(fzre_copy(S->h + S->rlen, plane, n, t, nt));
      FZR_SYNC();
    }
    FZR_ONE(fzre_plane_take(S));
    FZR_SYNC();
  }
  FZR_CLK(16);
  FZR_ONE(S->len = S->lk + S->rlen < S->raw ? S->lk + S->rlen : S->raw);
  FZR_SYNC();
  FZR_CLK(17);
}

/* Every thread of the block calls it (the host model: once); S is the
 * block's shared state.  Each branch reads S after a barrier.  planes
 * (J->planes) is a constant of the kernel (ratio_kernels.cuh), so that
 * each chain's kernel holds its own code only: the ratio preset's kernel
 * is then the code it was before lorenzo | byteplanes came. */
FZR_IP_FI FZR_HD void fzre_chunk_of(fzre_state *S, const fzre_job *J, uint64_t c, uint64_t slot,
                                    unsigned planes) {
  FZR_T0;
  const unsigned w = J->w;
  FZR_ONE(fzre_begin(S, J, c, slot, planes));
  FZR_SYNC();
  FZR_CLK(0);
  if (planes)
    fzre_planes(S, J, w);
  else
    fzre_predicted(S, J, w);
  FZR_ALL(fzre_emit(S, t, nt, planes));
  FZR_SYNC();
  FZR_CLK(18);
  /* The chunk's CRC-32C as the decoder checks it. */
  uint32_t crc = fzr_crc_block(S->part, S->fac, S->out, S->len, J->crc_tab);
  FZR_ONE(J->crcs[c] = crc; J->sizes[c] = (uint32_t)S->len);
  FZR_CLK(19);
}

/* The host model's entry: either chain, as the job says. */
static inline FZR_HD void fzre_chunk(fzre_state *S, const fzre_job *J, uint64_t c,
                                     uint64_t slot) {
  if (J->planes)
    fzre_chunk_of(S, J, c, slot, 1);
  else
    fzre_chunk_of(S, J, c, slot, 0);
}

#endif
