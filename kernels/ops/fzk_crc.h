/*
 * fzk_crc.h - CRC-32C arithmetic for checksumming on the device in parallel.
 *
 * The archive's checksums are plain CRC-32C, computed on the CPU byte after
 * byte.  A GPU block splits a buffer into segments, checksums each from a
 * zero register, and combines them with the identity
 *   raw(A || B) = raw(A) * x^(8|B|) mod P  xor  raw(B),
 * where raw() is the CRC register run from zero and the product is taken in
 * the bit-reflected representation the CRC uses (bit 31 holds x^0).  The
 * standard CRC starts from an all-ones register and complements the result;
 * the ones act like a complement of the first four message bytes, so for
 * messages of four bytes or more crc(M) = ~raw(M with bytes 0..3 inverted).
 * XOR is commutative, so the combined value does not depend on the order in
 * which threads or blocks finish.
 */
#ifndef FZK_CRC_H
#define FZK_CRC_H

#ifndef __CUDACC_RTC__
#include <stdint.h>
#endif

#include "fzk.h"

#ifdef __CUDACC__
#define FZK_HD __host__ __device__ __forceinline__
#else
#define FZK_HD static inline
#endif

#define FZK_CRC_POLY 0x82f63b78u /* Castagnoli, reflected */
#define FZK_X0 0x80000000u       /* the polynomial 1 */

/* a * b mod P, reflected. */
FZK_HD uint32_t fzk_crc_mulmod(uint32_t a, uint32_t b) {
  uint32_t p = 0;
  for (int i = 0; i < 32; i++) {
    if (a & (FZK_X0 >> i))
      p ^= b;
    b = (b >> 1) ^ (FZK_CRC_POLY & (0u - (b & 1u)));
  }
  return p;
}

/* Four message bytes v (low byte first) as they enter a register run from
 * zero: g is the index of the first in the message, j its index in the
 * buffer at hand (g, j >= -3; bytes at negative j are virtual zeros before
 * the buffer).  Message bytes 0..3 enter inverted, which stands for the
 * all-ones initial register. */
FZK_HD uint32_t fzk_crc_in4(uint32_t v, int64_t g, int j) {
  if (g < 4)
    v ^= g >= 0 ? 0xffffffffu >> (8 * g) : 0xffffffffu << (8 * -g);
  if (j < 0)
    v &= 0xffffffffu << (8 * -j);
  return v;
}

/* The register after four bytes v, with the slice-by-4 tables T
 * (fzk_crc_tables: T[256 s + b] advances byte b past s more bytes). */
FZK_HD uint32_t fzk_crc_step4(uint32_t c, uint32_t v, const uint32_t *T) {
  c ^= v;
  return T[768 + (c & 0xffu)] ^ T[512 + ((c >> 8) & 0xffu)] ^ T[256 + ((c >> 16) & 0xffu)] ^
         T[c >> 24];
}

/* The segment of each thread when a group of G warps checksums L bytes:
 * 16k bytes, the least multiple of 16 with which 32 G segments cover them. */
FZK_HD uint32_t fzk_crc_gseg(uint32_t L, uint32_t G) {
  return L > 512 * G ? (L + 512 * G - 1) / (512 * G) : 1;
}

/* x^(8 * nbytes) mod P, by repeated squaring. */
FZK_HD uint32_t fzk_crc_xpow8(uint64_t nbytes) {
  uint32_t r = FZK_X0, sq = FZK_X0 >> 8; /* x^8 */
  while (nbytes) {
    if (nbytes & 1)
      r = fzk_crc_mulmod(r, sq);
    sq = fzk_crc_mulmod(sq, sq);
    nbytes >>= 1;
  }
  return r;
}

/* x^(8 * FZK_CRC_SPAN * k) mod P from the tables (fzk.h): one entry below
 * 256, one product more for each further bit of k. */
FZK_HD uint32_t fzk_crc_span_factor(uint64_t k, const uint32_t *tab) {
  uint32_t f = tab[FZK_CRC_SPANK + (k & 255u)];
  k >>= 8;
  for (unsigned j = 8; k; j++, k >>= 1)
    if (k & 1)
      f = fzk_crc_mulmod(f, tab[FZK_CRC_SPANF + j]);
  return f;
}

#endif
