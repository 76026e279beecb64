/*
 * crc_tables.c - the CRC-32C tables the kernels read: the byte table, the
 * shift factor of each thread's segment within a block, and the shift
 * factors between blocks (fzk_crc.h explains the combination).
 */
#include "fzk.h"
#include "fzk_crc.h"

void fzk_crc_tables(uint32_t *tab) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = (c >> 1) ^ (FZK_CRC_POLY & (0u - (c & 1u)));
    tab[i] = c;
  }
  /* Thread t's segment is followed by NT-1-t segments of the block. */
  uint32_t seg = fzk_crc_xpow8(FZK_CRC_SEG), k = FZK_X0;
  for (int t = FZK_NT - 1; t >= 0; t--) {
    tab[256 + t] = k;
    k = fzk_crc_mulmod(k, seg);
  }
  /* x^(8 * SPAN * 2^j). */
  uint32_t s = fzk_crc_xpow8(FZK_CRC_SPAN);
  for (int j = 0; j < 64; j++) {
    tab[256 + FZK_NT + j] = s;
    s = fzk_crc_mulmod(s, s);
  }
}
