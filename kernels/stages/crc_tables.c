/*
 * crc_tables.c - the CRC-32C tables the kernels read: the four slice-by-4
 * tables, the shift factor of each thread's segment within a block for
 * every segment size, the shift factors between blocks of a long buffer,
 * and those of each lane's segment within a warp (fzk_crc.h explains the
 * combination).
 */
#include "fzk.h"
#include "launch.h"
#include "fzk_crc.h"

void fzk_crc_tables(uint32_t *tab) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = (c >> 1) ^ (FZK_CRC_POLY & (0u - (c & 1u)));
    tab[i] = c;
  }
  /* Table s advances a byte that has s more bytes behind it. */
  for (uint32_t s = 1; s < 4; s++)
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = tab[256 * (s - 1) + i];
      tab[256 * s + i] = (c >> 8) ^ tab[c & 0xffu];
    }
  /* Thread t's segment is followed by NT-1-t segments of the block. */
  for (uint32_t k = 0; k < FZK_CRC_NSEG; k++) {
    uint32_t seg = fzk_crc_xpow8(16u << k), f = FZK_X0;
    for (int t = FZK_NT - 1; t >= 0; t--) {
      tab[FZK_CRC_SEGF + FZK_NT * k + (uint32_t)t] = f;
      f = fzk_crc_mulmod(f, seg);
    }
  }
  /* Segment t of a group's span of 32 GMAX segments of 16k bytes is
   * followed by 32 GMAX - 1 - t of them. */
  const uint32_t ng = 32 * FZK_CRC_GMAX;
  for (uint32_t k = 1; k <= FZK_CRC_WSEGS; k++) {
    uint32_t seg = fzk_crc_xpow8(16 * k), f = FZK_X0;
    for (int t = (int)ng - 1; t >= 0; t--) {
      tab[FZK_CRC_LANEF + ng * (k - 1) + (uint32_t)t] = f;
      f = fzk_crc_mulmod(f, seg);
    }
  }
  /* x^(8 * SPAN * k), k < 256. */
  uint32_t sk = FZK_X0, span = fzk_crc_xpow8(FZK_CRC_SPAN);
  for (uint32_t k = 0; k < 256; k++) {
    tab[FZK_CRC_SPANK + k] = sk;
    sk = fzk_crc_mulmod(sk, span);
  }
  /* x^(8 * SPAN * 2^j). */
  uint32_t s = fzk_crc_xpow8(FZK_CRC_SPAN);
  for (int j = 0; j < 64; j++) {
    tab[FZK_CRC_SPANF + (uint32_t)j] = s;
    s = fzk_crc_mulmod(s, s);
  }
}
