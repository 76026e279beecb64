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
  s->a = malloc(4 * s->cap);
  if (s->a == NULL)
    return FZ_ENOMEM;
  s->b = s->a + s->cap;
  s->side = s->b + s->cap;
  s->tmp = s->side + s->cap;
  return 0;
}

void fze_scratch_free(fze_scratch *s) {
  free(s->a);
  memset(s, 0, sizeof *s);
}

size_t fze_chunk_encode(const fze_chain *c, fz_dtype t, const void *in,
                        size_t n, uint8_t *out, fze_scratch *s) {
  unsigned w = (unsigned)fz_dtype_size(t);
  size_t raw = n * w, side_len = 0, len = raw;
  uint8_t *cur = s->a, *other = s->b;
  unsigned i = 0;
  if (fze_chain_has_quant(c)) {
    side_len = fze_quant_encode(&c->st[0], t, in, n, cur, s->side);
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
    }
    uint8_t *x = cur;
    cur = other;
    other = x;
  }
  if (side_len + len >= raw) {
    memcpy(out, in, raw);
    return raw;
  }
  memcpy(out, s->side, side_len);
  memcpy(out + side_len, cur, len);
  return side_len + len;
}

int fze_chunk_decode(const fze_chain *c, fz_dtype t, const uint8_t *in,
                     size_t in_len, size_t n, void *out, fze_scratch *s) {
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
  if (fze_chain_has_quant(c)) {
    long sl = fze_quant_side_len(&c->st[0], in, in_len, n, w);
    if (sl < 0)
      return FZ_ECORRUPT;
    side_len = (size_t)sl;
    first = 1;
  }
  const uint8_t *cur = in + side_len;
  size_t len = in_len - side_len;

  /* The stream size entering each stage, forward; only the last stage may
   * produce a size that is not implied by n. */
  size_t size_in[FZE_MAX_STAGES + 1];
  size_in[first] = raw;
  for (unsigned i = first; i < c->n; i++)
    size_in[i + 1] = c->st[i].id == FZE_STAGE_BITSHUFFLE ? fze_bitshuffle_bytes(w, n)
                                                         : size_in[i];
  unsigned last = c->n - 1;
  if (c->st[last].id != FZE_STAGE_RZE && c->st[last].id != FZE_STAGE_BITPACK &&
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
  if (first)
    return fze_quant_decode(&c->st[0], t, cur, n, in, side_len, out);
  if (cur != out)
    memcpy(out, cur, raw);
  return 0;
}
