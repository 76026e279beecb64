/*
 * stage_byteplanes.c - the words' byte planes, each coded on its own with
 * the huffman stage's coder (the lossless-ratio preset's entropy coder).
 *
 * Differences of smooth data (lorenzo's residuals) have small high bytes and
 * noisy low bytes; the raw bit patterns of floats too have a sign and
 * exponent byte that barely changes and mantissa bytes that change a lot.
 * One code over whole words cannot use that (most words are escapes), nor
 * can one code over all the bytes: byte plane p (byte p of every word, least
 * significant first) gets a code of its own, fitted to its own statistics,
 * its zero runs coded by the huffman stage's run symbols.  A plane of zeros
 * costs one byte, and a plane that coding would not shrink (noise) is kept
 * as it is, so a chunk grows by at most its w length bytes before the codec
 * stores it raw.  Integers only, the same bytes on every backend.
 *
 * Layout (docs/format.md): w LEB128 lengths L_p, one a plane, then the
 * planes' bytes back to back: L_p = 0 for a plane of zeros (no bytes),
 * L_p = n for a plane stored as is, else a huffman stream (w = 1) of L_p
 * bytes.
 */
#include <string.h>

#include "engine.h"

/* The longest varint of a plane's length: a chunk holds at most 2^20
 * bytes, so three bytes; five is what fze_get_varint allows. */
#define LEN_MAX 5u

/* Plane p of the words, and whether any of its bytes is not 0.  Called
 * with a constant w, so that the compiler sees the stride. */
static inline __attribute__((always_inline)) uint8_t
gather_w(unsigned w, const uint8_t *words, size_t n, unsigned p, uint8_t *plane) {
  uint8_t or = 0;
  for (size_t i = 0; i < n; i++) {
    uint8_t b = words[i * w + p];
    plane[i] = b;
    or |= b;
  }
  return or ;
}

static uint8_t gather(unsigned w, const uint8_t *words, size_t n, unsigned p, uint8_t *plane) {
  switch (w) {
  case 2: return gather_w(2, words, n, p, plane);
  case 4: return gather_w(4, words, n, p, plane);
  default: return gather_w(8, words, n, p, plane);
  }
}

/* Plane p of the words from its bytes (NULL: zeros). */
static inline __attribute__((always_inline)) void scatter_w(unsigned w, const uint8_t *bytes,
                                                            size_t n, unsigned p, uint8_t *words) {
  if (bytes == NULL)
    for (size_t i = 0; i < n; i++)
      words[i * w + p] = 0;
  else
    for (size_t i = 0; i < n; i++)
      words[i * w + p] = bytes[i];
}

static void scatter(unsigned w, const uint8_t *bytes, size_t n, unsigned p, uint8_t *words) {
  switch (w) {
  case 2: scatter_w(2, bytes, n, p, words); break;
  case 4: scatter_w(4, bytes, n, p, words); break;
  default: scatter_w(8, bytes, n, p, words); break;
  }
}

size_t fze_byteplanes_encode(unsigned w, const void *words, size_t n, uint8_t *out, uint8_t *tmp) {
  const uint8_t *in = words;
  /* The planes are written after room for the longest lengths, then moved
   * down behind the lengths actually written.  The plane being coded sits
   * past the huffman coder's tokens (at most 2 (n + 31) bytes). */
  uint8_t *body = out + LEN_MAX * w, *plane = tmp + FZE_BYTEPLANES_TOKENS(n);
  uint8_t lens[LEN_MAX * 8];
  size_t lk = 0, pos = 0;
  for (unsigned p = 0; p < w; p++) {
    const uint8_t *src = in;
    uint8_t any;
    if (w == 1) {
      any = 0;
      for (size_t i = 0; i < n && !any; i++)
        any = in[i];
    } else {
      any = gather(w, in, n, p, plane);
      src = plane;
    }
    size_t len = 0;
    if (any) {
      /* Coded only where that is shorter than the plane itself. */
      len = n > 1 ? fze_huffman_encode(0, 1, src, n, body + pos, n - 1, tmp) : SIZE_MAX;
      if (len == SIZE_MAX) {
        memcpy(body + pos, src, n);
        len = n;
      }
    }
    lk += fze_put_varint(lens + lk, len);
    pos += len;
  }
  memcpy(out, lens, lk);
  memmove(out + lk, body, pos);
  return lk + pos;
}

int fze_byteplanes_decode(unsigned w, const uint8_t *in, size_t in_len, void *words, size_t n,
                          uint8_t *tmp) {
  uint8_t *out = words, *plane = tmp + FZE_HUFFMAN_TMP;
  uint64_t len[8];
  size_t k = 0, total = 0;
  for (unsigned p = 0; p < w; p++) {
    if (!fze_get_varint(in, in_len, &k, &len[p]) || len[p] > n)
      return FZ_ECORRUPT;
    total += (size_t)len[p];
  }
  /* The planes fill the rest of the stream exactly. */
  if (total != in_len - k)
    return FZ_ECORRUPT;
  const uint8_t *src = in + k;
  for (unsigned p = 0; p < w; p++) {
    size_t l = (size_t)len[p];
    const uint8_t *bytes = src;
    if (l == 0) {
      bytes = NULL;
    } else if (l < n) {
      uint8_t *dst = w == 1 ? out : plane;
      int rc = fze_huffman_decode(0, 1, src, l, dst, n, tmp);
      if (rc < 0)
        return rc;
      bytes = dst;
    }
    if (w == 1) {
      if (bytes == NULL)
        memset(out, 0, n);
      else if (bytes != out)
        memcpy(out, bytes, n);
    } else {
      scatter(w, bytes, n, p, out);
    }
    src += l;
  }
  return 0;
}
