/*
 * bslz4_unshuffle.c - the bit unshuffle of one block of a filter-32008
 * chunk, the hot loop of a dense frame decode.
 *
 * Row 8j + b of a shuffled block holds bit b of byte j of every element, so
 * byte j of elements 8c .. 8c + 7 is the 8x8 bit transpose of byte c of
 * rows 8j .. 8j + 7.  The AVX2 path does 32 columns (256 elements) at a
 * time: a byte transpose by unpacks gathers those 8 row bytes of each
 * column into one 64-bit lane, the bit transpose runs on four lanes at once,
 * and unpacks interleave the w byte planes into elements.  Columns left
 * over, and CPUs without AVX2, take the same steps one column at a time.
 */
#include <string.h>

#include "engine.h"
#include "fz_frames.h"
#include "ops.h"

/* Columns c0 .. c1 - 1 of a block whose rows are rowb bytes. */
static void unshuffle_columns(const uint8_t *in, size_t rowb, size_t w, size_t c0, size_t c1,
                              uint8_t *out) {
  for (size_t c = c0; c < c1; c++)
    for (size_t j = 0; j < w; j++) {
      uint64_t x = 0;
      for (unsigned b = 0; b < 8; b++)
        x |= (uint64_t)in[(8 * j + b) * rowb + c] << (8 * b);
      x = fzo_transpose8(x);
      for (unsigned k = 0; k < 8; k++)
        out[(8 * c + k) * w + j] = (uint8_t)(x >> (8 * k));
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2")))

/* fzo_transpose8 on each 64-bit lane. */
AVX2 static __m256i transpose8x4(__m256i x) {
  __m256i t;
  t = _mm256_and_si256(_mm256_xor_si256(x, _mm256_srli_epi64(x, 7)),
                       _mm256_set1_epi64x(0x00aa00aa00aa00aall));
  x = _mm256_xor_si256(_mm256_xor_si256(x, t), _mm256_slli_epi64(t, 7));
  t = _mm256_and_si256(_mm256_xor_si256(x, _mm256_srli_epi64(x, 14)),
                       _mm256_set1_epi64x(0x0000cccc0000ccccll));
  x = _mm256_xor_si256(_mm256_xor_si256(x, t), _mm256_slli_epi64(t, 14));
  t = _mm256_and_si256(_mm256_xor_si256(x, _mm256_srli_epi64(x, 28)),
                       _mm256_set1_epi64x(0x00000000f0f0f0f0ll));
  return _mm256_xor_si256(_mm256_xor_si256(x, t), _mm256_slli_epi64(t, 28));
}

/* Byte plane j of 32 columns from c: t[m] lane L holds, after the bit
 * transpose, byte j of the 16 elements from 128 L + 16 m (relative to 8c). */
AVX2 static void plane_of_32_columns(const uint8_t *in, size_t rowb, size_t j, size_t c,
                                     __m256i t[8]) {
  __m256i x[8], p[8], q[8];
  for (int b = 0; b < 8; b++)
    x[b] = _mm256_loadu_si256((const __m256i *)(in + (8 * j + b) * rowb + c));
  for (int b = 0; b < 8; b += 2) { /* pairs of rows: columns 0-7, 8-15 of a lane */
    p[b] = _mm256_unpacklo_epi8(x[b], x[b + 1]);
    p[b + 1] = _mm256_unpackhi_epi8(x[b], x[b + 1]);
  }
  for (int h = 0; h < 2; h++) { /* quads of rows: columns 4 at a time */
    q[4 * h + 0] = _mm256_unpacklo_epi16(p[h], p[2 + h]);
    q[4 * h + 1] = _mm256_unpackhi_epi16(p[h], p[2 + h]);
    q[4 * h + 2] = _mm256_unpacklo_epi16(p[4 + h], p[6 + h]);
    q[4 * h + 3] = _mm256_unpackhi_epi16(p[4 + h], p[6 + h]);
  }
  /* q[4h + s] (s 0, 1) has rows 0-3 of columns 8h + 4s .. +3, q[4h + 2 + s]
   * rows 4-7 of the same; their 32-bit unpacks give two columns of 8 rows. */
  for (int h = 0; h < 2; h++)
    for (int s = 0; s < 2; s++) {
      int m = 4 * h + 2 * s; /* columns 8h + 4s = 2m of the lane */
      t[m] = transpose8x4(_mm256_unpacklo_epi32(q[4 * h + s], q[4 * h + 2 + s]));
      t[m + 1] = transpose8x4(_mm256_unpackhi_epi32(q[4 * h + s], q[4 * h + 2 + s]));
    }
}

AVX2 static void store_lanes(uint8_t *out, size_t w, size_t e, __m256i u) {
  _mm_storeu_si128((__m128i *)(out + e * w), _mm256_castsi256_si128(u));
  _mm_storeu_si128((__m128i *)(out + (e + 128) * w), _mm256_extracti128_si256(u, 1));
}

/* One body for every element size; unshuffle_avx2 passes w as a constant
 * so each size gets its own unrolled copy. */
AVX2 static inline __attribute__((always_inline)) void
unshuffle_avx2_w(const uint8_t *in, size_t rowb, size_t w, size_t c1, uint8_t *out) {
  for (size_t c = 0; c < c1; c += 32) {
    __m256i t[8][8]; /* [byte plane][m] */
    for (size_t j = 0; j < w; j++)
      plane_of_32_columns(in, rowb, j, c, t[j]);
    uint8_t *o = out + 8 * c * w;
    for (int m = 0; m < 8; m++) {
      size_t e = 16 * (size_t)m; /* elements e .. e + 15 of each lane */
      if (w == 1) {
        store_lanes(o, 1, e, t[0][m]);
      } else if (w == 2) {
        store_lanes(o, 2, e, _mm256_unpacklo_epi8(t[0][m], t[1][m]));
        store_lanes(o, 2, e + 8, _mm256_unpackhi_epi8(t[0][m], t[1][m]));
      } else {
        __m256i lo[4], hi[4];
        for (size_t j = 0; j < w; j += 2) {
          lo[j / 2] = _mm256_unpacklo_epi8(t[j][m], t[j + 1][m]);
          hi[j / 2] = _mm256_unpackhi_epi8(t[j][m], t[j + 1][m]);
        }
        __m256i v[8] = {0}; /* 4 elements (w = 4) of bytes 0-3, then 4-7 (w = 8) */
        for (size_t g = 0; g < w / 4; g++) {
          v[4 * g + 0] = _mm256_unpacklo_epi16(lo[2 * g], lo[2 * g + 1]);
          v[4 * g + 1] = _mm256_unpackhi_epi16(lo[2 * g], lo[2 * g + 1]);
          v[4 * g + 2] = _mm256_unpacklo_epi16(hi[2 * g], hi[2 * g + 1]);
          v[4 * g + 3] = _mm256_unpackhi_epi16(hi[2 * g], hi[2 * g + 1]);
        }
        if (w == 4) {
          for (int s = 0; s < 4; s++)
            store_lanes(o, 4, e + 4 * (size_t)s, v[s]);
        } else {
          for (int s = 0; s < 4; s++) {
            store_lanes(o, 8, e + 4 * (size_t)s, _mm256_unpacklo_epi32(v[s], v[4 + s]));
            store_lanes(o, 8, e + 4 * (size_t)s + 2, _mm256_unpackhi_epi32(v[s], v[4 + s]));
          }
        }
      }
    }
  }
}
AVX2 static void unshuffle_avx2(const uint8_t *in, size_t rowb, size_t w, size_t c1, uint8_t *out) {
  switch (w) {
  case 1: unshuffle_avx2_w(in, rowb, 1, c1, out); break;
  case 2: unshuffle_avx2_w(in, rowb, 2, c1, out); break;
  case 4: unshuffle_avx2_w(in, rowb, 4, c1, out); break;
  default: unshuffle_avx2_w(in, rowb, 8, c1, out); break;
  }
}
#define HAVE_UNSHUFFLE_AVX2 1
#endif

void fz_bitunshuffle_block(const void *in, size_t n, size_t elem_size, void *out) {
  size_t rowb = n / 8, done = 0;
#ifdef HAVE_UNSHUFFLE_AVX2
  if (fze_have_avx2()) {
    done = rowb - rowb % 32;
    unshuffle_avx2(in, rowb, elem_size, done, out);
  }
#endif
  unshuffle_columns(in, rowb, elem_size, done, rowb, out);
}
