/*
 * stage_rze.c - recursive zero-byte elimination (the LC / PFPL kind).
 *
 * Level 1 keeps the nonzero bytes of the stream and a bitmap marking them.
 * That bitmap is then shrunk the same way by each further level, except that
 * from level 2 on a byte is kept when it differs from the byte before it
 * (bitmaps of bit-shuffled data are long runs of 0x00 and 0xff).  Output: the
 * last bitmap verbatim, then the kept bytes of the last level down to level
 * 1.  Every size is implied by the decoded length n, so the stream carries
 * no lengths; the decoder checks each popcount against the bytes present.
 */
#include <string.h>

#include "engine.h"

static size_t bm_len(size_t n) { return (n + 7) / 8; }

/* Level 1: zero elimination.  Returns the number of kept bytes. */
static size_t zero_elim(const uint8_t *in, size_t n, uint8_t *bm, uint8_t *kept) {
  if (fze_have_avx2())
    return fze_zero_elim_avx2(in, n, bm, kept);
  size_t k = 0, i = 0;
  memset(bm, 0, bm_len(n));
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    memcpy(&v, in + i, 8);
    if (v == 0)
      continue; /* bitmap byte stays 0 */
    uint8_t m = 0;
    for (unsigned j = 0; j < 8; j++) {
      uint8_t b = in[i + j];
      kept[k] = b;
      k += b != 0;
      m |= (uint8_t)((b != 0) << j);
    }
    bm[i / 8] = m;
  }
  for (; i < n; i++) {
    uint8_t b = in[i];
    kept[k] = b;
    k += b != 0;
    bm[i / 8] |= (uint8_t)((b != 0) << (i % 8));
  }
  return k;
}

/* Levels 2+: repeat elimination (a byte equal to its predecessor is
 * dropped; the predecessor of the first byte is 0). */
static size_t repeat_elim(const uint8_t *in, size_t n, uint8_t *bm, uint8_t *kept) {
  size_t k = 0, i = 0;
  uint8_t prev = 0;
  memset(bm, 0, bm_len(n));
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    memcpy(&v, in + i, 8);
    if (v == prev * 0x0101010101010101ull)
      continue; /* eight repeats: bitmap byte 0, nothing kept */
    uint8_t m = 0;
    for (unsigned j = 0; j < 8; j++) {
      uint8_t b = in[i + j];
      kept[k] = b;
      k += b != prev;
      m |= (uint8_t)((b != prev) << j);
      prev = b;
    }
    bm[i / 8] = m;
  }
  for (; i < n; i++) {
    uint8_t b = in[i];
    kept[k] = b;
    k += b != prev;
    bm[i / 8] |= (uint8_t)((b != prev) << (i % 8));
    prev = b;
  }
  return k;
}

/* tmp must hold 2 * bm_len(n) bytes plus the kept bytes of levels >= 2. */
size_t fze_rze_encode(unsigned levels, const uint8_t *in, size_t n,
                      uint8_t *out, uint8_t *tmp) {
  size_t len[FZE_RZE_MAX_LEVELS + 1], kept_len[FZE_RZE_MAX_LEVELS + 1];
  uint8_t *kept[FZE_RZE_MAX_LEVELS + 1] = {0}, *bm[FZE_RZE_MAX_LEVELS + 1] = {0};
  len[0] = n;
  uint8_t *p = tmp;
  const uint8_t *cur = in;
  for (unsigned l = 1; l <= levels; l++) {
    len[l] = bm_len(len[l - 1]);
    bm[l] = p;
    p += len[l];
    kept[l] = p;
    kept_len[l] = l == 1 ? zero_elim(cur, len[l - 1], bm[l], kept[l])
                         : repeat_elim(cur, len[l - 1], bm[l], kept[l]);
    p += kept_len[l];
    cur = bm[l];
  }
  size_t k = 0;
  memcpy(out, bm[levels], len[levels]);
  k += len[levels];
  for (unsigned l = levels; l >= 1; l--) {
    memcpy(out + k, kept[l], kept_len[l]);
    k += kept_len[l];
  }
  return k;
}

static size_t popcount_bytes(const uint8_t *p, size_t n) {
  size_t c = 0, i = 0;
  for (; i + 8 <= n; i += 8) { /* SWAR: no popcnt instruction assumed */
    uint64_t v;
    memcpy(&v, p + i, 8);
    v = v - ((v >> 1) & 0x5555555555555555ull);
    v = (v & 0x3333333333333333ull) + ((v >> 2) & 0x3333333333333333ull);
    v = (v + (v >> 4)) & 0x0f0f0f0f0f0f0f0full;
    c += (size_t)((v * 0x0101010101010101ull) >> 56);
  }
  for (; i < n; i++) {
    unsigned b = p[i];
    b = b - ((b >> 1) & 0x55);
    b = (b & 0x33) + ((b >> 2) & 0x33);
    c += (b + (b >> 4)) & 0x0f;
  }
  return c;
}

/* Bits beyond the n covered positions must be zero; otherwise the popcount
 * would claim bytes that no position uses. */
static int tail_ok(const uint8_t *bm, size_t n) {
  if (n % 8 == 0)
    return 1;
  return (bm[n / 8] >> (n % 8)) == 0;
}

/* avail: the bytes present from kept on (at least the bitmap's popcount), so
 * that a vector load never leaves the input. */
static void zero_restore(const uint8_t *bm, const uint8_t *kept, size_t avail,
                         size_t n, uint8_t *out) {
  size_t k = 0, i = 0;
  if (fze_have_avx2())
    i = fze_zero_restore_avx2(bm, kept, avail, n, out, &k);
  for (; i + 8 <= n; i += 8) {
    uint8_t m = bm[i / 8];
    if (m == 0) {
      memset(out + i, 0, 8);
      continue;
    }
    for (unsigned j = 0; j < 8; j++) {
      uint8_t on = (m >> j) & 1;
      out[i + j] = on ? kept[k] : 0;
      k += on;
    }
  }
  for (; i < n; i++) {
    uint8_t on = (bm[i / 8] >> (i % 8)) & 1;
    out[i] = on ? kept[k] : 0;
    k += on;
  }
}

/* Bitmaps of bit-shuffled data are mostly runs, so their own bitmaps are
 * mostly zero bytes: eight repeats of the byte before. */
static void repeat_restore(const uint8_t *bm, const uint8_t *kept, size_t n,
                           uint8_t *out) {
  size_t k = 0, i = 0;
  uint8_t prev = 0;
  for (; i + 8 <= n; i += 8) {
    uint8_t m = bm[i / 8];
    if (m == 0) {
      memset(out + i, prev, 8);
      continue;
    }
    for (unsigned j = 0; j < 8; j++) {
      uint8_t on = (m >> j) & 1;
      prev = on ? kept[k] : prev;
      k += on;
      out[i + j] = prev;
    }
  }
  for (; i < n; i++) {
    uint8_t on = (bm[i / 8] >> (i % 8)) & 1;
    prev = on ? kept[k] : prev;
    k += on;
    out[i] = prev;
  }
}

int fze_rze_decode(unsigned levels, const uint8_t *in, size_t in_len,
                   uint8_t *out, size_t n, uint8_t *tmp) {
  size_t len[FZE_RZE_MAX_LEVELS + 1];
  len[0] = n;
  for (unsigned l = 1; l <= levels; l++)
    len[l] = bm_len(len[l - 1]);
  if (in_len < len[levels] || !tail_ok(in, len[levels - 1]))
    return FZ_ECORRUPT;
  /* Decode bitmaps top-down into tmp; the level-1 data goes to out. */
  const uint8_t *bm = in;
  size_t pos = len[levels];
  uint8_t *buf[2] = {tmp, tmp + bm_len(n)};
  for (unsigned l = levels; l >= 1; l--) {
    size_t cnt = popcount_bytes(bm, len[l]);
    if (cnt > in_len - pos)
      return FZ_ECORRUPT;
    uint8_t *dst = l == 1 ? out : buf[l & 1];
    if (l == 1)
      zero_restore(bm, in + pos, in_len - pos, len[0], dst);
    else {
      repeat_restore(bm, in + pos, len[l - 1], dst);
      if (!tail_ok(dst, len[l - 2]))
        return FZ_ECORRUPT;
    }
    pos += cnt;
    bm = dst;
  }
  return pos == in_len ? 0 : FZ_ECORRUPT;
}
