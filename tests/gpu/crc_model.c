/*
 * crc_model.c - the arithmetic of the GPU checksums, on the CPU: the tables
 * of crc_tables.c drive a model of how the kernels split a buffer (every
 * thread of a block a segment of a virtual span that ends with the buffer,
 * every block of a long buffer a span, fzk_crc.h), and the combined value
 * must be the CRC-32C the engine computes byte after byte.  It needs no
 * GPU, so CI checks the tables and the constants of fzk.h on every run; the
 * GPU suites check the kernels themselves against the CPU archives.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "engine.h"
#include "fzk.h"
#include "launch.h"
#include "fzk_crc.h"
#include "xorshift.h"

static uint32_t tab[FZK_CRC_TAB_WORDS];

static void setup(void) { fzk_crc_tables(tab); }

/* Segment t of a span of nseg segments of seg bytes that ends with the L
 * bytes at p (virtual zeros before them), run from a zero register four
 * bytes at a time through the kernels' own steps (fzk_crc_in4,
 * fzk_crc_step4; g0: the index of p[0] in the message), first skipping
 * whole words of virtual zeros, as the kernels do; not shifted. */
static uint32_t segment(const uint8_t *p, uint32_t L, uint32_t seg, uint32_t nseg, uint64_t g0,
                        unsigned t) {
  int64_t j = (int64_t)t * seg - ((int64_t)nseg * seg - L);
  const int64_t j1 = j + seg;
  if (j1 <= 0)
    return 0;
  if (j <= -4)
    j += ((-j) / 4) * 4; /* whole words of virtual zeros change nothing */
  uint32_t c = 0;
  for (; j < j1; j += 4) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++)
      if (j + k >= 0)
        v |= (uint32_t)p[j + k] << (8 * k);
    c = fzk_crc_step4(c, fzk_crc_in4(v, (int64_t)g0 + j, (int)j), tab);
  }
  return c;
}

/* Thread t's share, as fzk_crc_share (warp_ops.cuh) computes it: its
 * segment of the span of FZK_NT * seg bytes, shifted to the end of the
 * span by the factor tab holds for t. */
static uint32_t share(const uint8_t *p, uint32_t L, uint32_t seg, uint64_t g0, unsigned t) {
  const uint32_t c = segment(p, L, seg, FZK_NT, g0, t);
  unsigned k = 0;
  while ((16u << k) != seg)
    k++;
  return c ? fzk_crc_mulmod(c, tab[FZK_CRC_SEGF + FZK_NT * k + t]) : 0;
}

/* The raw register of one span, as a chunk kernel or one block of
 * fzk_crc_kernel XORs it together. */
static uint32_t span(const uint8_t *p, uint32_t L, uint32_t seg, uint64_t g0) {
  uint32_t x = 0;
  for (unsigned t = 0; t < FZK_NT; t++)
    x ^= share(p, L, seg, g0, t);
  return x;
}

static uint8_t *random_bytes(size_t n, uint64_t seed) {
  uint8_t *b = malloc(n ? n : 1);
  cr_assert_not_null(b);
  uint64_t s = seed;
  for (size_t i = 0; i < n; i++)
    b[i] = (uint8_t)(xorshift64(&s) >> 56);
  return b;
}

TestSuite(kernel_crc, .init = setup);

/* A chunk: one block, every segment size the chunk kernels choose, lengths
 * from 4 bytes to the whole span (shorter ones are done byte by byte). */
Test(kernel_crc, chunk_segments) {
  for (uint32_t seg = 16; seg <= 128; seg *= 2) {
    const uint32_t lens[] = {4, 5, 7, 63, 64, 65, 1000, 4095, FZK_NT * seg - 1, FZK_NT * seg};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
      uint32_t L = lens[i];
      uint8_t *b = random_bytes(L, 1 + 31 * seg + i);
      uint32_t got = ~span(b, L, seg, 0), want = fze_crc32c(0, b, L);
      cr_assert_eq(got, want, "seg %u, %u bytes: %08x, want %08x", seg, L, got, want);
      free(b);
    }
  }
}

/* A long buffer: spans of FZK_CRC_SPAN bytes, the first one short so that
 * the last ends the buffer, each shifted to the end by the products of the
 * x^(8 * SPAN * k) factors, as the blocks of fzk_crc_kernel and the last of them
 * combine them. */
Test(kernel_crc, long_buffers) {
  const uint64_t lens[] = {4, 100, FZK_CRC_SPAN - 1, FZK_CRC_SPAN, FZK_CRC_SPAN + 1,
                           3 * FZK_CRC_SPAN + 17, 40 * FZK_CRC_SPAN + 1234,
                           300 * FZK_CRC_SPAN + 5, 1000 * FZK_CRC_SPAN + 3};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    const uint64_t len = lens[i], np = (len + FZK_CRC_SPAN - 1) / FZK_CRC_SPAN;
    uint8_t *b = random_bytes(len, 7 + i);
    const uint64_t p0 = np * FZK_CRC_SPAN - len;
    uint32_t x = 0;
    for (uint64_t blk = 0; blk < np; blk++) {
      uint64_t e = (blk + 1) * FZK_CRC_SPAN - p0, s0 = blk ? e - FZK_CRC_SPAN : 0;
      uint32_t c = span(b + s0, (uint32_t)(e - s0), FZK_CRC_SEG, s0);
      x ^= fzk_crc_mulmod(c, fzk_crc_span_factor(np - 1 - blk, tab));
    }
    cr_assert_eq(~x, fze_crc32c(0, b, len), "%llu bytes", (unsigned long long)len);
    free(b);
  }
}

/* A chunk checksummed by a group of G warps (fzk_crc_group_xor): thread t
 * runs segment t of 32 G segments of 16k bytes that end with the L bytes
 * and shifts its value with its factor from FZK_CRC_LANEF. */
static uint32_t group_crc(const uint8_t *p, uint32_t L, uint32_t G) {
  const uint32_t k = fzk_crc_gseg(L, G), seg = 16 * k, ng = 32 * G;
  cr_assert(ng * seg >= L && (k == 1 || ng * (seg - 16) < L) && k <= FZK_CRC_WSEGS);
  uint32_t x = 0;
  for (unsigned t = 0; t < ng; t++) {
    const uint32_t c = segment(p, L, seg, ng, 0, t);
    const uint32_t f = FZK_CRC_LANEF + 32 * FZK_CRC_GMAX * (k - 1) + 32 * (FZK_CRC_GMAX - G) + t;
    if (c)
      x ^= fzk_crc_mulmod(c, tab[f]);
  }
  return ~x;
}

/* Every group size up to FZK_CRC_GMAX and every length of a chunk up to
 * 32 KiB. */
Test(kernel_crc, warp_segments) {
  const uint32_t lens[] = {4, 5, 6, 7, 8, 100, 511, 512, 513, 1000, 1024, 1025, 2900,
                           4096, 7000, 16383, 16384, 16385, 32767, 32768};
  for (uint32_t G = 1; G <= FZK_CRC_GMAX; G *= 2)
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
      const uint32_t L = lens[i];
      uint8_t *b = random_bytes(L, 99 + i);
      uint32_t got = group_crc(b, L, G), want = fze_crc32c(0, b, L);
      cr_assert_eq(got, want, "%u warps, %u bytes: %08x, want %08x", G, L, got, want);
      free(b);
    }
}

/* The factors themselves: x^(8n) by repeated squaring against shifting a
 * CRC register through n zero bytes one at a time. */
Test(kernel_crc, shift_factors) {
  for (uint64_t n = 0; n < 300; n += 7) {
    uint32_t c = 0x12345678u, byte_at_a_time = c;
    for (uint64_t k = 0; k < n; k++)
      byte_at_a_time = (byte_at_a_time >> 8) ^ tab[byte_at_a_time & 0xffu];
    cr_assert_eq(fzk_crc_mulmod(c, fzk_crc_xpow8(n)), byte_at_a_time, "n = %llu",
                 (unsigned long long)n);
  }
}

/* The seal kernel's patch: a header checksummed with its payload-CRC field
 * zero, then corrected by the field's word times x^(8n) (n: the bytes from
 * the field's start to the end of the checksummed bytes), must be the CRC
 * of the header with the field filled in. */
Test(kernel_crc, field_patch) {
  const size_t lens[] = {8, 9, 40, 300, 4100, 70000};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    const size_t L = lens[i];
    uint8_t *b = random_bytes(L, 7 + i);
    uint64_t s = 1234 + i;
    for (int k = 0; k < 20; k++) {
      size_t at = 4 + (size_t)(xorshift64(&s) % (L - 7)); /* not in the first 4 bytes */
      uint32_t v = (uint32_t)xorshift64(&s);
      memset(b + at, 0, 4);
      uint32_t zero = fze_crc32c(0, b, L);
      for (int j = 0; j < 4; j++)
        b[at + j] = (uint8_t)(v >> (8 * j));
      uint32_t got = zero ^ fzk_crc_mulmod(v, fzk_crc_xpow8(L - at));
      uint32_t want = fze_crc32c(0, b, L);
      cr_assert_eq(got, want, "%zu bytes, field at %zu: %08x, want %08x", L, at, got, want);
    }
    free(b);
  }
}
