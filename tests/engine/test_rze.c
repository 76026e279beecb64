/*
 * test_rze.c - the zero/repeat elimination stage against its definition.
 * The stage's loops take shortcuts (eight bytes at a time, AVX2 shuffles);
 * the encoder here is the definition written one byte at a time, and every
 * stream must encode to the same bytes (archives are compared byte for byte
 * with the GPU's) and decode back, with and without AVX2.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "gen.h"

/* Level 1 keeps nonzero bytes, levels 2+ keep bytes unlike the one before
 * (the first compared with 0); each bitmap marks the kept positions, bit i%8
 * of byte i/8.  Output: the last bitmap, then the kept bytes of the last
 * level down to level 1. */
static size_t reference_encode(unsigned levels, const uint8_t *in, size_t n, uint8_t *out) {
  uint8_t *bm[FZE_RZE_MAX_LEVELS + 1], *kept[FZE_RZE_MAX_LEVELS + 1];
  size_t kept_len[FZE_RZE_MAX_LEVELS + 1], len = n;
  const uint8_t *cur = in;
  for (unsigned l = 1; l <= levels; l++) {
    size_t bl = (len + 7) / 8;
    bm[l] = calloc(bl + 1, 1);
    kept[l] = malloc(len + 1);
    kept_len[l] = 0;
    uint8_t prev = 0;
    for (size_t i = 0; i < len; i++) {
      bool keep = l == 1 ? cur[i] != 0 : cur[i] != prev;
      if (keep) {
        bm[l][i / 8] |= (uint8_t)(1u << (i % 8));
        kept[l][kept_len[l]++] = cur[i];
      }
      prev = cur[i];
    }
    cur = bm[l];
    len = bl;
  }
  size_t k = len;
  memcpy(out, bm[levels], len);
  for (unsigned l = levels; l >= 1; l--) {
    memcpy(out + k, kept[l], kept_len[l]);
    k += kept_len[l];
  }
  for (unsigned l = 1; l <= levels; l++) {
    free(bm[l]);
    free(kept[l]);
  }
  return k;
}

/* Streams like the ones rze sees: runs of 0x00 and 0xff (bit planes of
 * smooth data), mostly zeros, random bytes, and mixtures. */
static void fill(uint8_t *x, size_t n, unsigned kind, uint64_t *s) {
  size_t i = 0;
  while (i < n) {
    size_t run = 1 + gen_rand(s) % (kind == 0 ? 200 : 12);
    uint8_t v;
    switch (kind) {
    case 0: v = gen_rand(s) & 1 ? 0xff : 0x00; break;
    case 1: v = gen_rand(s) % 7 == 0 ? (uint8_t)gen_rand(s) : 0; break;
    case 2: v = (uint8_t)gen_rand(s); run = 1; break;
    default: v = gen_rand(s) % 3 == 0 ? (uint8_t)gen_rand(s) : (gen_rand(s) & 1 ? 0xff : 0); break;
    }
    for (size_t j = 0; j < run && i < n; j++)
      x[i++] = v;
  }
}

Test(rze, shortcuts_equal_the_definition, .timeout = 120) {
  static const size_t sizes[] = {0, 1, 7, 8, 9, 63, 64, 65, 511, 4096, 4103, 16384};
  uint64_t seed = 12345;
  for (int avx2 = 0; avx2 < 2; avx2++) {
    fze_set_avx2(avx2);
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
      for (unsigned kind = 0; kind < 4; kind++)
        for (unsigned levels = 1; levels <= 4; levels++)
          for (int rep = 0; rep < 8; rep++) {
            size_t n = sizes[si];
            uint8_t *x = malloc(n + 1), *want = malloc(2 * n + 64), *got = malloc(2 * n + 64);
            uint8_t *tmp = malloc(4 * n + 64), *back = malloc(n + 64);
            fill(x, n, kind, &seed);
            size_t wl = reference_encode(levels, x, n, want);
            size_t gl = fze_rze_encode(levels, x, n, got, tmp);
            cr_assert_eq(gl, wl, "n=%zu kind=%u levels=%u avx2=%d: %zu bytes, want %zu", n,
                         kind, levels, avx2, gl, wl);
            cr_assert(memcmp(got, want, wl) == 0, "n=%zu kind=%u levels=%u avx2=%d: bytes differ",
                      n, kind, levels, avx2);
            cr_assert_eq(fze_rze_decode(levels, got, gl, back, n, tmp), 0);
            cr_assert(n == 0 || memcmp(back, x, n) == 0, "n=%zu kind=%u levels=%u: decode differs",
                      n, kind, levels);
            free(x), free(want), free(got), free(tmp), free(back);
          }
  }
  fze_set_avx2(true);
}
