/*
 * crc32c.c - CRC-32C (Castagnoli), the checksum of archive headers and
 * payloads.  Uses the SSE4.2 crc32 instruction when the CPU has it and a
 * table otherwise; both give the same values.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine.h"

static uint32_t table[8][256];
static int have_sse42;

static void init_tables(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
    table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int s = 1; s < 8; s++)
      table[s][i] = (table[s - 1][i] >> 8) ^ table[0][table[s - 1][i] & 0xff];
}

static uint32_t crc_table(uint32_t c, const uint8_t *p, size_t n) {
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    v ^= c;
    c = table[7][v & 0xff] ^ table[6][(v >> 8) & 0xff] ^
        table[5][(v >> 16) & 0xff] ^ table[4][(v >> 24) & 0xff] ^
        table[3][(v >> 32) & 0xff] ^ table[2][(v >> 40) & 0xff] ^
        table[1][(v >> 48) & 0xff] ^ table[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n--)
    c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c,
                                                          const uint8_t *p,
                                                          size_t n) {
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c64 = __builtin_ia32_crc32di(c64, v);
    p += 8;
    n -= 8;
  }
  c = (uint32_t)c64;
  while (n--)
    c = __builtin_ia32_crc32qi(c, *p++);
  return c;
}
#endif

static void init_once(void) {
  init_tables();
#if defined(__x86_64__)
  __builtin_cpu_init();
  have_sse42 = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
  have_sse42 = 0;
#endif
}

uint32_t fze_crc32c(uint32_t crc, const void *p, size_t n) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, init_once);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  if (have_sse42)
    return ~crc_hw(c, p, n);
#endif
  return ~crc_table(c, p, n);
}
