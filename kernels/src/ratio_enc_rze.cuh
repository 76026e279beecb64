/*
 * ratio_enc_rze.cuh - the ratio preset's last stage on the GPU: recursive
 * zero-byte elimination, one block per chunk, into the bytes of the
 * engine's fze_rze_encode (stage_rze.c); written once for the device and
 * for a host model of it (tests/gpu/ratio_enc_huff_model.c).
 *
 * The output is the top bitmap, then the kept bytes of each level from the
 * top down to level 1, so where level 1's kept bytes go is known only once
 * every level above has been counted.  Hence two passes: the first builds
 * every level's bitmap in scratch (each the input of the level above) and
 * counts each thread's kept bytes; one thread turns the counts into places;
 * the second pass writes every level's kept bytes straight to the output,
 * reading the level-1 input again rather than keeping its kept bytes
 * anywhere.  Each thread takes a contiguous share of a level's bitmap
 * bytes (eight input bytes each), so that the kept bytes of the shares
 * follow one another as the scan places them.  From level 2 on a byte is
 * kept when it differs from the byte before it; for a share's first byte
 * that is the last input byte of the share before (0 at the start), which
 * the level below has finished, so the shares need nothing from each other.
 */
#ifndef FZK_RATIO_ENC_RZE_CUH
#define FZK_RATIO_ENC_RZE_CUH

#include "ops.h"
#include "ratio_phase.cuh"

#define FZRE_RZE_LEVELS 6u /* engine.h's FZE_RZE_MAX_LEVELS */

/* The block's shared state (about 6.2 KiB). */
typedef struct fzre_rz {
  uint64_t len;                          /* the result: the stream's bytes */
  uint64_t rl[FZRE_RZE_LEVELS + 1];      /* level l's input bytes is rl[l-1] */
  uint64_t at[FZRE_RZE_LEVELS + 1];      /* where level l's kept bytes go */
  uint32_t base[FZRE_RZE_LEVELS][FZR_NT]; /* a thread's kept bytes, then place */
} fzre_rz;

#ifdef __cplusplus
static_assert(sizeof(fzre_rz) <= 12 * 1024, "fzre_rz fits the shared budget");
#else
_Static_assert(sizeof(fzre_rz) <= 12 * 1024, "fzre_rz fits the shared budget");
#endif

static inline FZR_HD uint64_t fzre_rz_up(uint64_t v) { return (v + 255) / 256 * 256; }

/* The bitmaps of levels 1..levels, each 256-byte aligned. */
static inline FZR_HD uint64_t fzre_rze_scratch(uint64_t n, unsigned levels) {
  uint64_t s = 0;
  for (unsigned l = 1; l <= levels && l <= FZRE_RZE_LEVELS; l++) {
    n = (n + 7) / 8;
    s += fzre_rz_up(n);
  }
  return s;
}

static inline FZR_HD uint8_t *fzre_rz_bm(const fzre_rz *R, uint8_t *scratch, unsigned l) {
  uint64_t off = 0;
  for (unsigned m = 1; m < l; m++)
    off += fzre_rz_up(R->rl[m]);
  return scratch + off;
}

static inline FZR_HD void fzre_rz_share(uint64_t n, unsigned t, unsigned nt, uint64_t *lo,
                                        uint64_t *hi) {
  uint64_t per = (n + nt - 1) / nt;
  *lo = per * t < n ? per * t : n;
  *hi = per * (t + 1) < n ? per * (t + 1) : n;
}

static inline FZR_HD unsigned fzre_rz_popc8(unsigned b) {
  b = b - ((b >> 1) & 0x55u);
  b = (b & 0x33u) + ((b >> 2) & 0x33u);
  return (b + (b >> 4)) & 0x0fu;
}

/* Eight input bytes of a group as one word, low byte first: one load
 * where they are aligned for it (the host model copies, as C's aliasing
 * rules ask), else a byte at a time. */
static inline FZR_HD uint64_t fzre_rz_ld8(const uint8_t *p) {
  uint64_t v = 0;
  if (((uintptr_t)p & 7) == 0) {
#ifdef __CUDA_ARCH__
    v = *(const uint64_t *)p;
#else
    memcpy(&v, p, 8);
#endif
    return v;
  }
  for (unsigned b = 0; b < 8; b++)
    v |= (uint64_t)p[b] << (8 * b);
  return v;
}

/* Bit i set where byte i of x is not zero. */
static inline FZR_HD unsigned fzre_rz_mask(uint64_t x) {
  x |= x >> 4;
  x |= x >> 2;
  x |= x >> 1;
  x &= 0x0101010101010101ull;
  return (unsigned)((x * 0x0102040810204080ull) >> 56);
}

/* Level l over thread t's share of its bitmap bytes (each of eight input
 * bytes): the bitmap into bm and the count of kept bytes, or (write) the
 * kept bytes into out.  At level 1 a byte is kept when not zero, above
 * when it differs from the byte before. */
static inline FZR_HD void fzre_rz_level(fzre_rz *R, unsigned l, const uint8_t *src, uint8_t *bm,
                                        uint8_t *out, int write, unsigned t, unsigned nt) {
  uint64_t lo, hi, n = R->rl[l - 1];
  fzre_rz_share(R->rl[l], t, nt, &lo, &hi);
  unsigned prev = l >= 2 && lo > 0 ? src[8 * lo - 1] : 0;
  uint64_t k = 0;
  uint8_t *dst = write ? out + R->at[l] + R->base[l - 1][t] : out;
  for (uint64_t g = lo; g < hi; g++) {
    uint64_t v;
    if (8 * g + 8 <= n) {
      v = fzre_rz_ld8(src + 8 * g);
    } else { /* the last group, short: its missing bytes' bits cleared */
      v = 0;
      for (uint64_t i = 8 * g; i < n; i++)
        v |= (uint64_t)src[i] << (8 * (i - 8 * g));
    }
    unsigned m = fzre_rz_mask(l == 1 ? v : v ^ (v << 8 | prev));
    if (8 * g + 8 > n)
      m &= (1u << (n - 8 * g)) - 1;
    prev = (unsigned)(v >> 56);
    if (write) {
      for (unsigned i = 0; m >> i; i++)
        if ((m >> i) & 1u)
          dst[k++] = (uint8_t)(v >> (8 * i));
    } else {
      bm[g] = (uint8_t)m;
      k += fzre_rz_popc8(m);
    }
  }
  if (!write)
    R->base[l - 1][t] = (uint32_t)k;
}

/* Thread 0: each level's place (the top bitmap first, then the kept bytes
 * from the top level down) and each thread's within it. */
static inline FZR_HD void fzre_rz_place(fzre_rz *R, unsigned levels, unsigned nt) {
  uint64_t pos = R->rl[levels];
  for (unsigned l = levels; l >= 1; l--) {
    R->at[l] = pos;
    uint32_t sum = 0;
    for (unsigned t = 0; t < nt; t++) {
      uint32_t v = R->base[l - 1][t];
      R->base[l - 1][t] = sum;
      sum += v;
    }
    pos += sum;
  }
  R->len = pos;
}

static inline FZR_HD void fzre_rz_top(fzre_rz *R, unsigned levels, const uint8_t *bm,
                                      uint8_t *out, unsigned t, unsigned nt) {
  for (uint64_t i = t; i < R->rl[levels]; i += nt)
    out[i] = bm[i];
}

/* The block function: every thread calls it with the same arguments.
 * in: n bytes (n < 2^32); out: room for the result (at most the top
 * bitmap plus n bytes); scratch: fzre_rze_scratch(n, levels) bytes, free
 * again on return; the three do not overlap.
 * R->len is fze_rze_encode's result and out holds its bytes; levels
 * outside 1..FZRE_RZE_LEVELS are refused with len UINT64_MAX. */
static inline FZR_HD void fzre_rze(fzre_rz *R, unsigned levels, const uint8_t *in, uint64_t n,
                                   uint8_t *out, uint8_t *scratch) {
  FZR_T0;
  if (levels < 1 || levels > FZRE_RZE_LEVELS) {
    FZR_ONE(R->len = UINT64_MAX);
    FZR_SYNC();
    return;
  }
  /* The levels' sizes (they follow from n alone). */
  FZR_ONE({
    R->rl[0] = n;
    for (unsigned l = 1; l <= levels; l++)
      R->rl[l] = (R->rl[l - 1] + 7) / 8;
  });
  FZR_SYNC();
  for (unsigned l = 1; l <= levels; l++) {
    const uint8_t *src = l == 1 ? in : fzre_rz_bm(R, scratch, l - 1);
    uint8_t *bm = fzre_rz_bm(R, scratch, l);
    FZR_ALL(fzre_rz_level(R, l, src, bm, 0, 0, t, nt));
    FZR_SYNC();
  }
  FZR_ONE(fzre_rz_place(R, levels, nt));
  FZR_SYNC();
  FZR_ALL(fzre_rz_top(R, levels, fzre_rz_bm(R, scratch, levels), out, t, nt));
  for (unsigned l = 1; l <= levels; l++) {
    const uint8_t *src = l == 1 ? in : fzre_rz_bm(R, scratch, l - 1);
    FZR_ALL(fzre_rz_level(R, l, src, 0, out, 1, t, nt));
  }
  FZR_SYNC();
}

#endif
