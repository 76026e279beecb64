/*
 * stage_bitshuffle.c - bit-plane transposition of a chunk of words.
 *
 * Plane p (bit p of every word, p = 0 the least significant) becomes a run of
 * ceil(n/8) bytes, bit j of byte g holding word 8g + j; planes follow each
 * other from bit 0 up; padding bits are zero.  Residuals that are small make
 * their high planes all zero, which the zero-byte eliminator after this stage
 * removes.  The work is done eight words at a time by 8x8 bit-matrix
 * transposes in 64-bit registers.
 */
#include <string.h>

#include "engine.h"
#include "ops.h"

size_t fze_bitshuffle_bytes(unsigned w, size_t n) { return (size_t)8 * w * ((n + 7) / 8); }

/* Groups g0.. of eight words, in plain C: the whole chunk on CPUs without
 * AVX2, and the words the AVX2 loop leaves over. */
static void encode_groups(unsigned w, const void *words, size_t n, size_t g0,
                          uint8_t *out) {
  const uint8_t *in = words;
  size_t groups = (n + 7) / 8, pb = groups;
  uint8_t pad[64];
  for (size_t g = g0; g < groups; g++) {
    const uint8_t *src = in + g * 8 * w;
    if (g * 8 + 8 > n) { /* the partial last group, zero-padded */
      memset(pad, 0, sizeof pad);
      memcpy(pad, src, (n - g * 8) * w);
      src = pad;
    }
    for (unsigned k = 0; k < w; k++) {
      uint64_t x = 0;
      for (unsigned r = 0; r < 8; r++)
        x |= (uint64_t)src[r * w + k] << (8 * r);
      x = fzo_transpose8(x);
      for (unsigned j = 0; j < 8; j++)
        out[(size_t)(8 * k + j) * pb + g] = (uint8_t)(x >> (8 * j));
    }
  }
}

static void decode_groups(unsigned w, const uint8_t *in, size_t n, size_t g0,
                          void *words) {
  uint8_t *out = words;
  size_t groups = (n + 7) / 8, pb = groups;
  uint8_t pad[64] = {0}; /* every byte is written before it is read */
  for (size_t g = g0; g < groups; g++) {
    int partial = g * 8 + 8 > n;
    uint8_t *dst = partial ? pad : out + g * 8 * w;
    for (unsigned k = 0; k < w; k++) {
      uint64_t x = 0;
      for (unsigned j = 0; j < 8; j++)
        x |= (uint64_t)in[(size_t)(8 * k + j) * pb + g] << (8 * j);
      x = fzo_transpose8(x);
      for (unsigned r = 0; r < 8; r++)
        dst[r * w + k] = (uint8_t)(x >> (8 * r));
    }
    if (partial)
      memcpy(out + g * 8 * w, pad, (n - g * 8) * w);
  }
}

void fze_bitshuffle_encode(unsigned w, const void *words, size_t n, uint8_t *out) {
  size_t done = 0;
  if (w == 4 && fze_have_avx2()) {
    done = n & ~(size_t)31;
    fze_bitshuffle32_avx2(words, done, (n + 7) / 8, out);
  }
  encode_groups(w, words, n, done / 8, out);
}

void fze_bitshuffle_decode(unsigned w, const uint8_t *in, size_t n, void *words) {
  size_t done = 0;
  if (w == 4 && fze_have_avx2()) {
    done = n & ~(size_t)31;
    fze_bitunshuffle32_avx2(in, done, (n + 7) / 8, words);
  }
  decode_groups(w, in, n, done / 8, words);
}
