/*
 * stage_diff.c - difference coding: each word becomes its difference from
 * the previous word of the chunk (the first from 0), mapped to an unsigned
 * word whose high bits are zero for small differences of either sign:
 * zigzag (0, -1, 1, -2 ... -> 0, 1, 2, 3 ...) or negabinary (base -2).
 * Arithmetic wraps modulo the word size, so every input is reversible.
 */
#include <string.h>

#include "engine.h"
#include "ops.h"

#define DEFINE_DIFF(W, T, ZZ, UNZZ)                                            \
  static void enc##W(const T *restrict v, T *restrict o, size_t n, int nega) { \
    if (n == 0)                                                                \
      return;                                                                  \
    o[0] = nega ? (T)((T)(v[0] + (T)NB##W) ^ (T)NB##W) : ZZ(v[0]);             \
    if (nega)                                                                  \
      for (size_t i = 1; i < n; i++)                                           \
        o[i] = (T)((T)((T)(v[i] - v[i - 1]) + (T)NB##W) ^ (T)NB##W);           \
    else                                                                       \
      for (size_t i = 1; i < n; i++)                                           \
        o[i] = ZZ((T)(v[i] - v[i - 1]));                                       \
  }                                                                            \
  static void dec##W(const T *in, T *v, size_t n, int nega) {                 \
    T prev = 0;                                                                \
    for (size_t i = 0; i < n; i++) {                                           \
      T z = in[i];                                                             \
      T d = nega ? (T)((T)(z ^ (T)NB##W) - (T)NB##W) : UNZZ(z);                 \
      prev = (T)(prev + d);                                                    \
      v[i] = prev;                                                             \
    }                                                                          \
  }

#define NB8 0xaau
#define NB16 0xaaaau
#define NB32 0xaaaaaaaau
#define NB64 0xaaaaaaaaaaaaaaaaull
#define ZZ8(d) ((uint8_t)((uint8_t)((d) << 1) ^ (uint8_t)(0u - ((d) >> 7))))
#define UNZZ8(z) ((uint8_t)(((z) >> 1) ^ (uint8_t)(0u - ((z) & 1u))))
#define ZZ16(d) ((uint16_t)((uint16_t)((d) << 1) ^ (uint16_t)(0u - ((d) >> 15))))
#define UNZZ16(z) ((uint16_t)(((z) >> 1) ^ (uint16_t)(0u - ((z) & 1u))))

DEFINE_DIFF(8, uint8_t, ZZ8, UNZZ8)
DEFINE_DIFF(16, uint16_t, ZZ16, UNZZ16)
DEFINE_DIFF(32, uint32_t, fzo_zigzag32, fzo_unzigzag32)
DEFINE_DIFF(64, uint64_t, fzo_zigzag64, fzo_unzigzag64)

void fze_diff_encode(const fze_stage *st, unsigned w, const void *in, void *out,
                     size_t n) {
  int nega = st->mode == FZE_MAP_NEGABINARY;
  switch (w) {
  case 1: enc8(in, out, n, nega); break;
  case 2: enc16(in, out, n, nega); break;
  case 4: enc32(in, out, n, nega); break;
  default: enc64(in, out, n, nega); break;
  }
}

void fze_diff_decode(const fze_stage *st, unsigned w, const void *in, void *out,
                     size_t n) {
  int nega = st->mode == FZE_MAP_NEGABINARY;
  switch (w) {
  case 1: dec8(in, out, n, nega); break;
  case 2: dec16(in, out, n, nega); break;
  case 4:
    if (fze_have_avx2())
      fze_diff_decode32_avx2(in, out, n, nega);
    else
      dec32(in, out, n, nega);
    break;
  default: dec64(in, out, n, nega); break;
  }
}
