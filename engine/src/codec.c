/*
 * codec.c - runs a chain over one chunk, forward and inverse.
 *
 * A coded chunk is the quant stage's side list (when the chain quantizes)
 * followed by the main stream as the last stage left it.  When that is not
 * smaller than the chunk itself, the chunk is stored raw instead, so no chunk
 * ever grows; the archive's chunk table tells the two apart by size.
 */
#include <stdlib.h>
#include <string.h>

#include "engine.h"

int fze_scratch_init(fze_scratch *s, size_t chunk_bytes) {
  s->cap = 2 * chunk_bytes + 256;
  /* tmp serves rze (two bitmaps and kept bytes of a stream of up to cap
   * bytes) and huffman (its tables and 4 bytes a word). */
  size_t tmp = 4 * chunk_bytes + FZE_HUFFMAN_TMP + 256;
  /* price serves fze_huffman_price on words of 4 or 8 bytes. */
  size_t price = (FZE_HUFFMAN_TMP + chunk_bytes + 256) / 64 * 64;
  s->a = malloc(3 * s->cap + tmp + price + fze_quant_work_bytes(chunk_bytes / 4));
  if (s->a == NULL)
    return FZ_ENOMEM;
  s->b = s->a + s->cap;
  s->side = s->b + s->cap;
  s->tmp = s->side + s->cap;
  s->price = s->tmp + tmp;
  s->qwork = s->price + price;
  return 0;
}

void fze_scratch_free(fze_scratch *s) {
  free(s->a);
  memset(s, 0, sizeof *s);
}

/* After the side list a chunk carries what its stages chose or cannot
 * infer: a lorenzo stage's dims for the chunk (one byte), then, when a
 * huffman stage is not the last, the length of its stream, which the
 * stage after it (rze) needs, as a LEB128 varint.  Returns the huffman
 * stage's index, or -1. */
static int inner_huffman(const fze_chain *c) {
  for (unsigned i = 0; i + 1 < c->n; i++)
    if (c->st[i].id == FZE_STAGE_HUFFMAN)
      return (int)i;
  return -1;
}

/* The cheapest k = 1..pdims for lorenzo on words (the lowest k of
 * equals), priced from samples of the residuals; its price in *cost. */
static uint8_t best_lorenzo_k(const fze_stage *st, unsigned w, const uint8_t *words, size_t n,
                              uint64_t first, uint64_t *cost) {
  uint64_t best = UINT64_MAX;
  uint8_t bk = 1;
  for (unsigned k = 1; k <= st->pdims; k++) {
    uint64_t c = fze_lorenzo_price(st, k, w, words, n, first);
    if (c < best) {
      best = c;
      bk = (uint8_t)k;
    }
  }
  *cost = best;
  return bk;
}

/* The guess at the interpolation's price on ip's dims (fze_interp_guess),
 * priced as lorenzo's every fifth, the sampled values' outliers as their
 * side-list entries. */
static uint64_t interp_guess(const fze_stage *q, const fze_stage *ip, fz_dtype t, const void *in,
                             size_t n, uint64_t first, void *words) {
  unsigned w = (unsigned)fz_dtype_size(t);
  size_t outl = 0;
  uint64_t g = fze_interp_guess(q, ip, t, in, n, first, words, &outl);
  g = g / FZE_COST_STEP * FZE_GUESS_STEP;
  return g + ((8 * (uint64_t)FZE_GUESS_STEP * outl * (w + fze_side_index_width(n))) << 16);
}

unsigned fze_interp_dims(const fze_stage *q, const fze_stage *ip, fz_dtype t, const void *in,
                         size_t n, uint64_t first, void *words, uint64_t *guess) {
  uint64_t g = interp_guess(q, ip, t, in, n, first, words);
  unsigned kd = ip->pdims;
  if (ip->lv >= 2 && ip->pdims >= 2) {
    fze_stage iq = fze_interp_on(ip, ip->pdims - 1);
    uint64_t g2 = interp_guess(q, &iq, t, in, n, first, words);
    if (g2 < g) {
      g = g2;
      kd = ip->pdims - 1;
    }
  }
  *guess = g;
  return kd;
}

/* quant | interp: per chunk the interpolation, or quant's own words
 * predicted by lorenzo in its cheapest k = 1..pdims dims (predictor byte
 * k; 0 for the interpolation), whichever prices lower, the interpolation
 * on a tie.  Lorenzo's k is chosen by its sampled price
 * (fze_lorenzo_price); a candidate's price adds 8 bits a side-list byte.
 *  - Where lorenzo's sampled price is a bit a word or more (FZE_PRICE_CHEAP),
 *    both are priced by the sampled order-0 entropy of their words, and
 *    lorenzo is taken without running the interpolation where its price
 *    times FZE_GUESS_MARGIN_NUM is below a guess at the interpolation's
 *    (fze_interp_guess) times FZE_GUESS_MARGIN_DEN.
 *  - Below it the entropy misses what decides the code's length: a
 *    symbol takes a whole bit, and zero runs take run symbols (the
 *    interpolation's, stored level by level, are long).  Both are then
 *    priced as the huffman stage codes them (fze_huffman_price), and the
 *    interpolation is skipped only where lorenzo's price times
 *    FZE_GUESS_WIDE is below the guess.
 * In format version 6 (ip->lv 2) the interpolation runs along the D - 1
 * fastest axes only, each plane (D = 3) or row (D = 2) its own walk, where
 * the guess on that is lower (predictor byte FZE_PK_DIMS | D - 1), and
 * the lower guess is the one lorenzo's price is held against: a chunk of
 * a few planes of a 3-D array has no third axis to interpolate along,
 * only one to extrapolate a plane from the one before.
 * The words end in s->a, the side list in s->side; tmp holds quant's
 * words and side list meanwhile, b lorenzo's residuals. */
static size_t encode_predicted(const fze_chain *c, fz_dtype t, const void *in, size_t n,
                               uint64_t first, fze_scratch *s, uint8_t *pk) {
  unsigned w = (unsigned)fz_dtype_size(t);
  size_t raw = n * w;
  const fze_stage *q = &c->st[0], *ip = &c->st[1];
  /* pwrel bins are a value's own bit pattern: no difference to bin, so
   * such chunks always take lorenzo. */
  bool pw = q->mode == FZ_EB_PWREL;
  uint8_t *words = s->tmp, *side = s->tmp + raw;
  size_t side_l = fze_quant_encode(q, t, in, n, words, side, s->qwork);
  uint64_t cost_l;
  uint8_t k = best_lorenzo_k(ip, w, words, n, first, &cost_l);
  bool cheap = FZE_PRICE_CHEAP(cost_l, n);
  cost_l += (8 * (uint64_t)side_l) << 16;
  bool skip = pw;
  /* The interpolation's stage: on the chain's dims, or (version 6) on one
   * fewer where that guesses lower. */
  unsigned kd = ip->pdims;
  if (!pw && !q->has_fill && q->step != 0) {
    uint64_t g;
    kd = fze_interp_dims(q, ip, t, in, n, first, s->b, &g);
    skip = FZE_GUESS_SKIPS(cost_l, g, cheap);
  }
  fze_stage iq = fze_interp_on(ip, kd);
  uint8_t ibyte = kd < ip->pdims ? (uint8_t)(FZE_PK_DIMS | kd) : 0;
  *pk = k;
  bool interp = false;
  size_t side_i = 0;
  if (!skip) {
    side_i = fze_interp_encode(q, &iq, t, in, n, first, s->a, s->side, s->qwork);
    if (cheap) {
      fze_lorenzo_encode(ip, k, w, words, s->b, n, first);
      unsigned hl = fze_huffman_lv(c);
      uint64_t price_i = fze_huffman_price(hl, w, s->a, n, s->price) + 8 * (uint64_t)side_i;
      uint64_t price_l = fze_huffman_price(hl, w, s->b, n, s->price) + 8 * (uint64_t)side_l;
      interp = price_l >= price_i;
      if (!interp)
        memcpy(s->a, s->b, raw);
    } else {
      interp = cost_l >= fze_lorenzo_cost(w, s->a, n) + ((8 * (uint64_t)side_i) << 16);
      if (!interp)
        fze_lorenzo_encode(ip, k, w, words, s->a, n, first);
    }
  } else {
    fze_lorenzo_encode(ip, k, w, words, s->a, n, first);
  }
  if (interp) {
    *pk = ibyte;
    return side_i;
  }
  memcpy(s->side, side, side_l);
  return side_l;
}

size_t fze_chunk_encode(const fze_chain *c, fz_dtype t, const void *in,
                        size_t n, uint64_t first, uint8_t *out, fze_scratch *s) {
  unsigned w = (unsigned)fz_dtype_size(t);
  size_t raw = n * w, side_len = 0, len = raw, hlen = 0;
  uint8_t pk = 0; /* the chunk's predictor byte (lorenzo, interp) */
  bool has_pk = false;
  uint8_t *cur = s->a, *other = s->b;
  unsigned i = 0;
  int inner = inner_huffman(c);
  if (fze_chain_has_quant(c) && c->n > 1 && c->st[1].id == FZE_STAGE_INTERP) {
    side_len = encode_predicted(c, t, in, n, first, s, &pk);
    has_pk = true;
    i = 2;
  } else if (fze_chain_has_quant(c)) {
    side_len = fze_quant_encode(&c->st[0], t, in, n, cur, s->side, s->qwork);
    i = 1;
  } else {
    memcpy(cur, in, raw);
  }
  for (; i < c->n; i++) {
    const fze_stage *st = &c->st[i];
    switch (st->id) {
    case FZE_STAGE_DIFF:
      fze_diff_encode(st, w, cur, other, n);
      break;
    case FZE_STAGE_LORENZO:
      { uint64_t cost;
        pk = best_lorenzo_k(st, w, cur, n, first, &cost);
        fze_lorenzo_encode(st, pk, w, cur, other, n, first);
      }
      has_pk = true;
      break;
    case FZE_STAGE_HUFFMAN:
      /* A code as long as the chunk cannot make it smaller. */
      len = fze_huffman_encode(st->lv, w, cur, n, other, raw - 1, s->tmp);
      if (len == SIZE_MAX)
        goto store_raw;
      hlen = len;
      break;
    case FZE_STAGE_BITSHUFFLE:
      fze_bitshuffle_encode(w, cur, n, other);
      len = fze_bitshuffle_bytes(w, n);
      break;
    case FZE_STAGE_RZE:
      len = fze_rze_encode(st->levels, cur, len, other, s->tmp);
      break;
    case FZE_STAGE_BITPACK:
      len = fze_bitpack_encode(w, cur, n, other);
      break;
    case FZE_STAGE_BYTEPLANES:
      len = fze_byteplanes_encode(w, cur, n, other, s->tmp);
      break;
    }
    uint8_t *x = cur;
    cur = other;
    other = x;
  }
  uint8_t lenbuf[8];
  size_t lk = 0;
  if (has_pk)
    lenbuf[lk++] = pk;
  if (inner >= 0)
    lk += fze_put_varint(lenbuf + lk, hlen);
  if (side_len + lk + len >= raw)
    goto store_raw;
  memcpy(out, s->side, side_len);
  memcpy(out + side_len, lenbuf, lk);
  memcpy(out + side_len + lk, cur, len);
  return side_len + lk + len;
store_raw:
  memcpy(out, in, raw);
  return raw;
}

int fze_chunk_decode(const fze_chain *c, fz_dtype t, const uint8_t *in,
                     size_t in_len, size_t n, uint64_t first_elem, void *out,
                     fze_scratch *s) {
  unsigned w = (unsigned)fz_dtype_size(t);
  size_t raw = n * w;
  if (in_len == raw) {
    memcpy(out, in, raw);
    return 0;
  }
  if (in_len > raw)
    return FZ_ECORRUPT;
  size_t side_len = 0;
  unsigned first = 0;
  bool interp = fze_chain_has_quant(c) && c->n > 1 && c->st[1].id == FZE_STAGE_INTERP;
  if (fze_chain_has_quant(c)) {
    long sl = fze_quant_side_len(&c->st[0], in, in_len, n, w);
    if (sl < 0)
      return FZ_ECORRUPT;
    side_len = (size_t)sl;
    first = interp ? 2 : 1;
  }
  size_t hk = side_len, hlen = 0;
  int inner = inner_huffman(c);
  /* The chunk's predictor byte: lorenzo's k in 1..pdims; interp's 0 (the
   * interpolation), a lorenzo k, or in version 6 FZE_PK_DIMS | k (the
   * interpolation on k < pdims dims). */
  unsigned pk = 0;
  for (unsigned i = 0; i < c->n; i++)
    if (c->st[i].id == FZE_STAGE_LORENZO || c->st[i].id == FZE_STAGE_INTERP) {
      const fze_stage *st = &c->st[i];
      unsigned lo = st->id == FZE_STAGE_INTERP ? 0 : 1;
      if (hk >= in_len)
        return FZ_ECORRUPT;
      unsigned b = in[hk], k = b & ~FZE_PK_DIMS;
      bool dims = st->id == FZE_STAGE_INTERP && st->lv >= 2 && (b & FZE_PK_DIMS) && k >= 1 &&
                  k < st->pdims;
      if (!dims && (b < lo || b > st->pdims))
        return FZ_ECORRUPT;
      pk = in[hk++];
    }
  /* The inner huffman stream is at most the chunk's raw size (the encoder
   * stores the chunk raw otherwise), which the buffers are sized for. */
  uint64_t hlen64 = 0;
  if (inner >= 0 && (!fze_get_varint(in, in_len, &hk, &hlen64) || hlen64 == 0 || hlen64 >= raw))
    return FZ_ECORRUPT;
  hlen = (size_t)hlen64;
  const uint8_t *cur = in + hk;
  size_t len = in_len - hk;

  /* The stream size entering each stage, forward; only the last stage and
   * an inner huffman stage (whose size the chunk carries) may produce a
   * size that is not implied by n. */
  size_t size_in[FZE_MAX_STAGES + 1];
  size_in[first] = raw;
  for (unsigned i = first; i < c->n; i++)
    size_in[i + 1] = c->st[i].id == FZE_STAGE_BITSHUFFLE ? fze_bitshuffle_bytes(w, n)
                     : (int)i == inner                   ? hlen
                                                         : size_in[i];
  unsigned last = c->n - 1;
  if (c->st[last].id != FZE_STAGE_RZE && c->st[last].id != FZE_STAGE_BITPACK &&
      c->st[last].id != FZE_STAGE_HUFFMAN && c->st[last].id != FZE_STAGE_BYTEPLANES &&
      len != size_in[c->n])
    return FZ_ECORRUPT;

  uint8_t *bufs[2] = {s->a, s->b};
  unsigned nb = 0;
  for (unsigned i = c->n; i-- > first;) {
    const fze_stage *st = &c->st[i];
    uint8_t *dst = bufs[nb];
    int rc = 0;
    switch (st->id) {
    case FZE_STAGE_RZE:
      rc = fze_rze_decode(st->levels, cur, len, dst, size_in[i], s->tmp);
      len = size_in[i];
      break;
    case FZE_STAGE_BITPACK:
      rc = fze_bitpack_decode(w, cur, len, dst, n);
      len = raw;
      break;
    case FZE_STAGE_BITSHUFFLE:
      fze_bitshuffle_decode(w, cur, n, dst);
      len = raw;
      break;
    case FZE_STAGE_HUFFMAN:
      rc = fze_huffman_decode(st->lv, w, cur, len, dst, n, s->tmp);
      len = raw;
      break;
    case FZE_STAGE_BYTEPLANES:
      rc = fze_byteplanes_decode(w, cur, len, dst, n, s->tmp);
      len = raw;
      break;
    case FZE_STAGE_LORENZO:
      if (i == 0 && (uintptr_t)out % w == 0)
        dst = out;
      else if (cur == s->a || cur == s->b)
        dst = (uint8_t *)cur;
      fze_lorenzo_decode(st, pk, w, cur, dst, n, first_elem);
      break;
    case FZE_STAGE_DIFF:
      /* The running sums go straight to out when they are the result and
       * out is aligned for the words; else in place when cur is scratch. */
      if (i == 0 && (uintptr_t)out % w == 0)
        dst = out;
      else if (cur == s->a || cur == s->b)
        dst = (uint8_t *)cur;
      fze_diff_decode(st, w, cur, dst, n);
      break;
    }
    if (rc < 0)
      return rc;
    if (dst != cur)
      nb ^= 1;
    cur = dst;
  }
  /* The interpolation, on the chain's dims or (FZE_PK_DIMS) fewer. */
  bool walk = interp && (pk == 0 || (pk & FZE_PK_DIMS));
  if (walk && c->st[0].mode == FZ_EB_PWREL)
    return FZ_ECORRUPT;
  if (walk) {
    fze_stage iq = fze_interp_on(&c->st[1], (pk & FZE_PK_DIMS) ? pk & ~FZE_PK_DIMS : c->st[1].pdims);
    return fze_interp_decode(&c->st[0], &iq, t, cur, n, first_elem, in, side_len, out,
                             s->qwork);
  }
  if (interp) {
    /* Quant's words under lorenzo: rebuilt in place in scratch (or out of
     * the archive's bytes into a free buffer). */
    uint8_t *dst = (cur == s->a || cur == s->b) ? (uint8_t *)cur : bufs[nb];
    fze_lorenzo_decode(&c->st[1], pk, w, cur, dst, n, first_elem);
    cur = dst;
  }
  if (first)
    return fze_quant_decode(&c->st[0], t, cur, n, in, side_len, out);
  if (cur != out)
    memcpy(out, cur, raw);
  return 0;
}
