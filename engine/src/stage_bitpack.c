/*
 * stage_bitpack.c - block prediction with fixed-length bit-plane packing
 * (the cuSZp kind), the throughput-first coder.
 *
 * Each word is predicted by the word before it in the chunk (the first by 0)
 * and the zigzag-mapped residual is kept.  Residuals are packed in blocks of
 * 32: a block whose largest residual needs b bits is stored as b bit planes
 * of 32 bits (4 bytes each, plane 0 first).  The chunk is the table of the b
 * of every block (one byte each) followed by the planes of every block.
 * A GPU warp does one block: a ballot per plane.
 */
#include <string.h>

#include "engine.h"
#include "ops.h"

static size_t nblocks(size_t n) { return (n + FZE_BITPACK_BLOCK - 1) / FZE_BITPACK_BLOCK; }

static unsigned width64(uint64_t v) { return v ? 64u - (unsigned)__builtin_clzll(v) : 0u; }

static uint64_t load(const uint8_t *p, unsigned w) {
  switch (w) {
  case 1: return p[0];
  case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
  case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
  default: { uint64_t v; memcpy(&v, p, 8); return v; }
  }
}

static void store(uint8_t *p, unsigned w, uint64_t v) {
  switch (w) {
  case 1: p[0] = (uint8_t)v; break;
  case 2: { uint16_t x = (uint16_t)v; memcpy(p, &x, 2); break; }
  case 4: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
  default: memcpy(p, &v, 8); break;
  }
}

/* Zigzag on the low w*8 bits of a wrapped difference. */
static uint64_t zz(uint64_t d, unsigned w) {
  unsigned bits = 8 * w;
  uint64_t mask = bits == 64 ? ~0ull : ((1ull << bits) - 1);
  d &= mask;
  uint64_t sign = (d >> (bits - 1)) & 1;
  return ((d << 1) ^ (0ull - sign)) & mask;
}

static uint64_t unzz(uint64_t z, unsigned w) {
  unsigned bits = 8 * w;
  uint64_t mask = bits == 64 ? ~0ull : ((1ull << bits) - 1);
  return ((z >> 1) ^ (0ull - (z & 1))) & mask;
}

/* 32-bit words, the f32 case, have a path of their own: residuals computed
 * in a loop the compiler vectorizes, planes through AVX2 when present. */
static size_t encode32(const uint32_t *in, size_t n, uint8_t *out) {
  size_t nb = nblocks(n), k = nb;
  uint32_t prev = 0;
  for (size_t b = 0; b < nb; b++) {
    uint32_t r[FZE_BITPACK_BLOCK] = {0}, any = 0;
    size_t lo = b * FZE_BITPACK_BLOCK;
    size_t cnt = n - lo < FZE_BITPACK_BLOCK ? n - lo : FZE_BITPACK_BLOCK;
    const uint32_t *c = in + lo;
    if (cnt == FZE_BITPACK_BLOCK) {
      r[0] = fzo_zigzag32(c[0] - prev);
      for (size_t i = 1; i < FZE_BITPACK_BLOCK; i++)
        r[i] = fzo_zigzag32(c[i] - c[i - 1]);
    } else {
      for (size_t i = 0; i < cnt; i++)
        r[i] = fzo_zigzag32(c[i] - (i ? c[i - 1] : prev));
    }
    prev = c[cnt - 1];
    for (size_t i = 0; i < FZE_BITPACK_BLOCK; i++)
      any |= r[i];
    unsigned bits = any ? 32u - (unsigned)__builtin_clz(any) : 0u;
    out[b] = (uint8_t)bits;
    if (fze_have_avx2()) {
      fze_pack_planes32_avx2(r, bits, out + k);
    } else {
      for (unsigned p = 0; p < bits; p++) {
        uint32_t plane = 0;
        for (unsigned i = 0; i < FZE_BITPACK_BLOCK; i++)
          plane |= ((r[i] >> p) & 1u) << i;
        memcpy(out + k + 4 * p, &plane, 4);
      }
    }
    k += 4 * (size_t)bits;
  }
  return k;
}

size_t fze_bitpack_encode(unsigned w, const void *words, size_t n, uint8_t *out) {
  if (w == 4)
    return encode32(words, n, out);
  const uint8_t *in = words;
  size_t nb = nblocks(n), k = nb;
  uint64_t prev = 0;
  for (size_t b = 0; b < nb; b++) {
    uint64_t r[FZE_BITPACK_BLOCK] = {0}, any = 0;
    size_t lo = b * FZE_BITPACK_BLOCK;
    size_t cnt = n - lo < FZE_BITPACK_BLOCK ? n - lo : FZE_BITPACK_BLOCK;
    for (size_t i = 0; i < cnt; i++) {
      uint64_t cur = load(in + (lo + i) * w, w);
      r[i] = zz(cur - prev, w);
      any |= r[i];
      prev = cur;
    }
    unsigned bits = width64(any);
    out[b] = (uint8_t)bits;
    for (unsigned p = 0; p < bits; p++) {
      uint32_t plane = 0;
      for (unsigned i = 0; i < FZE_BITPACK_BLOCK; i++)
        plane |= (uint32_t)((r[i] >> p) & 1) << i;
      memcpy(out + k, &plane, 4);
      k += 4;
    }
  }
  return k;
}

int fze_bitpack_decode(unsigned w, const uint8_t *in, size_t in_len,
                       void *words, size_t n) {
  uint8_t *out = words;
  size_t nb = nblocks(n);
  if (in_len < nb)
    return FZ_ECORRUPT;
  size_t need = nb;
  for (size_t b = 0; b < nb; b++) {
    if (in[b] > 8 * w)
      return FZ_ECORRUPT;
    need += (size_t)4 * in[b];
  }
  if (need != in_len)
    return FZ_ECORRUPT;
  size_t k = nb;
  uint64_t prev = 0;
  for (size_t b = 0; b < nb; b++) {
    uint64_t r[FZE_BITPACK_BLOCK] = {0};
    if (w == 4 && fze_have_avx2()) {
      uint32_t r32[FZE_BITPACK_BLOCK];
      fze_unpack_planes32_avx2(in + k, in[b], r32);
      for (unsigned i = 0; i < FZE_BITPACK_BLOCK; i++)
        r[i] = r32[i];
      k += 4 * (size_t)in[b];
    } else {
      for (unsigned p = 0; p < in[b]; p++) {
        uint32_t plane;
        memcpy(&plane, in + k, 4);
        k += 4;
        for (unsigned i = 0; i < FZE_BITPACK_BLOCK; i++)
          r[i] |= (uint64_t)((plane >> i) & 1) << p;
      }
    }
    size_t lo = b * FZE_BITPACK_BLOCK;
    size_t cnt = n - lo < FZE_BITPACK_BLOCK ? n - lo : FZE_BITPACK_BLOCK;
    /* Padding residuals of a partial block must be zero. */
    for (size_t i = cnt; i < FZE_BITPACK_BLOCK; i++)
      if (r[i] != 0)
        return FZ_ECORRUPT;
    for (size_t i = 0; i < cnt; i++) {
      prev = prev + unzz(r[i], w);
      store(out + (lo + i) * w, w, prev);
    }
  }
  return 0;
}
