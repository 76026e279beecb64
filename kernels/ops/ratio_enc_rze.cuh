/*
 * ratio_enc_rze.cuh - the ratio preset's last stage on the GPU: recursive
 * zero-byte elimination, one block per chunk, into the bytes of the
 * engine's fze_rze_encode (stage_rze.c); written once for the device and
 * for a host model of it (tests/gpu/ratio_enc_huff_model.c).
 *
 * The output is the top bitmap, then the kept bytes of each level from the
 * top down to level 1, so where level 1's kept bytes go is known only once
 * every level above has been built.  Hence two passes.  The first builds
 * every level's bitmap in scratch (each the input of the level above), a
 * bitmap byte (a group of eight input bytes) per thread in turn, so that
 * a warp reads consecutive words.  From level 2 on a byte is kept when it
 * differs from the byte before it; for a group's first byte that is the
 * last input byte of the group before (0 at the start), which the level
 * below has finished, so the groups need nothing from each other.
 *
 * The second pass writes the kept bytes straight to the output, reading
 * each level's input again rather than keeping its kept bytes anywhere.
 * It walks the levels in the output's order, a tile of FZRE_RZ_G nt
 * groups at a time, and one running place carries from tile to tile and
 * from level to level, so no level needs counting first.  In a tile each
 * thread loads the bitmap bytes of FZRE_RZ_G consecutive groups as one
 * word and counts their kept bytes; one thread in FZRE_RZ_SEG scans the
 * counts of FZRE_RZ_SEG words; then group q goes to thread q mod nt again
 * (consecutive words for a warp), which places it from the running place,
 * the segments before its word, its word's place in its segment and the
 * word's groups before it, and writes the byte of each set bit.  A tile's
 * state is kept twice, by the tile's parity, so that the next tile's first
 * phase needs no barrier after this tile's last.
 */
#ifndef FZK_RATIO_ENC_RZE_CUH
#define FZK_RATIO_ENC_RZE_CUH

#include "ops.h"
#include "ratio_enc_lz.cuh" /* fzre_ctz64 */
#include "ratio_phase.cuh"

#define FZRE_RZE_LEVELS FZE_RZE_MAX_LEVELS
#define FZRE_RZ_G 4u       /* a tile's groups per thread: a word of bitmap bytes */
#define FZRE_RZ_SEG 16u    /* the words a thread of the tile's scan sums */

/* The block's shared state (about 3.3 KiB); the tile's parts by the
 * tile's parity.  The scan takes the block in whole segments: nt is a
 * multiple of FZRE_RZ_SEG (the kernels launch FZR_NT threads). */
typedef struct fzre_rz {
  uint64_t len;                     /* the result: the stream's bytes */
  uint64_t rl[FZRE_RZE_LEVELS + 1]; /* level l's input bytes is rl[l-1] */
  uint64_t bo[FZRE_RZE_LEVELS + 1]; /* level l's bitmap at scratch + bo[l] */
  uint64_t run[2];                  /* where the tile's kept bytes start */
  uint32_t msk[2][FZR_NT];          /* word w: the bitmap bytes of groups 4w..4w+3 */
  uint16_t pre[2][FZR_NT];          /* its kept bytes, then those before it in
                                       its segment */
  uint32_t seg[2][FZR_NT / FZRE_RZ_SEG]; /* a segment's kept bytes */
} fzre_rz;

#ifdef __cplusplus
static_assert(sizeof(fzre_rz) <= 12 * 1024, "fzre_rz fits the shared budget");
static_assert(FZR_NT % FZRE_RZ_SEG == 0, "the block is whole segments");
#else
_Static_assert(sizeof(fzre_rz) <= 12 * 1024, "fzre_rz fits the shared budget");
_Static_assert(FZR_NT % FZRE_RZ_SEG == 0, "the block is whole segments");
#endif

static inline FZR_HD uint64_t fzre_rz_up(uint64_t v) { return (v + 255) / 256 * 256; }

/* The bitmaps of levels 1..levels, each 256-byte aligned (fzre_rz.bo). */
static inline FZR_HD uint64_t fzre_rze_scratch(uint64_t n, unsigned levels) {
  uint64_t s = 0;
  for (unsigned l = 1; l <= levels && l <= FZRE_RZE_LEVELS; l++) {
    n = (n + 7) / 8;
    s += fzre_rz_up(n);
  }
  return s;
}

/* The set bits of v.  No __popc: the threaded host harness
 * (tests/gpu/ratio_threads.c) runs the device branches without it, and
 * the counts are a small part of the work. */
static inline FZR_HD unsigned fzre_rz_popc32(uint32_t v) {
  v = v - ((v >> 1) & 0x55555555u);
  v = (v & 0x33333333u) + ((v >> 2) & 0x33333333u);
  v = (v + (v >> 4)) & 0x0f0f0f0fu;
  return (v * 0x01010101u) >> 24;
}

/* k (4 or 8) bytes as one word, low byte first: one load where they are
 * aligned for it (the host model copies, as C's aliasing rules ask), else
 * a byte at a time. */
static inline FZR_HD uint64_t fzre_rz_ld(const uint8_t *p, unsigned k) {
  uint64_t v = 0;
  if (((uintptr_t)p & (k - 1)) == 0) {
#ifdef __CUDA_ARCH__
    v = k == 8 ? *(const uint64_t *)p : *(const uint32_t *)p;
#else
    if (k == 8) {
      memcpy(&v, p, 8);
    } else {
      uint32_t u;
      memcpy(&u, p, 4);
      v = u;
    }
#endif
    return v;
  }
  for (unsigned b = 0; b < k; b++)
    v |= (uint64_t)p[b] << (8 * b);
  return v;
}

/* Group g of a level's n input bytes, low byte first; the short last
 * group's missing bytes are 0. */
static inline FZR_HD uint64_t fzre_rz_group(const uint8_t *src, uint64_t n, uint64_t g) {
  if (8 * g + 8 <= n)
    return fzre_rz_ld(src + 8 * g, 8);
  uint64_t v = 0;
  for (uint64_t i = 8 * g; i < n; i++)
    v |= (uint64_t)src[i] << (8 * (i - 8 * g));
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

/* Pass 1, level l: the bitmap of src into bm, group g by thread g mod nt.
 * At level 1 a byte is kept when not zero, above when it differs from the
 * byte before; the short last group's missing bytes are not kept. */
static inline FZR_HD void fzre_rz_build(const fzre_rz *R, unsigned l, const uint8_t *src,
                                        uint8_t *bm, unsigned t, unsigned nt) {
  const uint64_t n = R->rl[l - 1];
  for (uint64_t g = t; g < R->rl[l]; g += nt) {
    uint64_t v = fzre_rz_group(src, n, g);
    unsigned prev = l >= 2 && g > 0 ? src[8 * g - 1] : 0;
    unsigned m = fzre_rz_mask(l == 1 ? v : v ^ (v << 8 | prev));
    if (8 * g + 8 > n)
      m &= (1u << (n - 8 * g)) - 1;
    bm[g] = (uint8_t)m;
  }
}

static inline FZR_HD void fzre_rz_top(const fzre_rz *R, unsigned levels, const uint8_t *bm,
                                      uint8_t *out, unsigned t, unsigned nt) {
  for (uint64_t i = t; i < R->rl[levels]; i += nt)
    out[i] = bm[i];
}

/* Pass 2, a tile's first phase: thread t's word, the bitmap bytes of the
 * tile's groups FZRE_RZ_G t .. + FZRE_RZ_G (0 past the level's ng
 * groups), and its kept bytes.  The bitmaps are 256-byte aligned and g0 a
 * multiple of FZRE_RZ_G, so the word is one load. */
static inline FZR_HD void fzre_rz_masks(fzre_rz *R, unsigned p, const uint8_t *bm, uint64_t ng,
                                        uint64_t g0, unsigned t) {
  uint64_t g = g0 + FZRE_RZ_G * t;
  uint32_t w = 0;
  if (g + FZRE_RZ_G <= ng) {
    w = (uint32_t)fzre_rz_ld(bm + g, FZRE_RZ_G);
  } else {
    for (uint64_t i = g; i < ng; i++)
      w |= (uint32_t)bm[i] << (8 * (i - g));
  }
  R->msk[p][t] = w;
  R->pre[p][t] = (uint16_t)fzre_rz_popc32(w);
}

/* The second phase, thread t < nt / FZRE_RZ_SEG: the words of segment t,
 * each word's kept bytes before it in the segment, and the segment's.  A
 * fixed trip count, so that nothing of it is worked out once per kernel
 * and held in registers (or spilled) through the whole chunk. */
static inline FZR_HD void fzre_rz_scan(fzre_rz *R, unsigned p, unsigned t, unsigned nt) {
  if (t >= nt / FZRE_RZ_SEG)
    return;
  uint16_t *pre = R->pre[p] + FZRE_RZ_SEG * t;
  uint32_t sum = 0;
  for (unsigned k = 0; k < FZRE_RZ_SEG; k++) {
    uint32_t v = pre[k];
    pre[k] = (uint16_t)sum;
    sum += v;
  }
  R->seg[p][t] = sum;
}

/* The third phase: the kept bytes of the tile's groups q = j nt + t to
 * their places in out, the segments before q's word summed as j walks up
 * through them, the set bits of q's bitmap byte taken lowest first. */
static inline FZR_HD void fzre_rz_put(const fzre_rz *R, unsigned p, const uint8_t *src,
                                      uint64_t n, uint64_t g0, uint8_t *out, unsigned t,
                                      unsigned nt) {
  uint64_t at = R->run[p];
  unsigned s = 0;
  for (unsigned j = 0; j < FZRE_RZ_G; j++) {
    unsigned q = j * nt + t, w = q / FZRE_RZ_G, b = 8 * (q % FZRE_RZ_G);
    for (; s < w / FZRE_RZ_SEG; s++)
      at += R->seg[p][s];
    uint32_t mw = R->msk[p][w];
    unsigned m = (mw >> b) & 0xffu;
    if (m == 0)
      continue;
    uint8_t *dst = out + at + R->pre[p][w] + fzre_rz_popc32(mw & ((1u << b) - 1));
    uint64_t v = fzre_rz_group(src, n, g0 + q);
    for (; m; m &= m - 1)
      *dst++ = (uint8_t)(v >> (8 * fzre_ctz64(m)));
  }
}

/* Thread 0, in the third phase: where the next tile's kept bytes start
 * (after a level's last tile, the next level's first). */
static inline FZR_HD void fzre_rz_next(fzre_rz *R, unsigned p, unsigned nt) {
  uint64_t at = R->run[p];
  for (unsigned s = 0; s < nt / FZRE_RZ_SEG; s++)
    at += R->seg[p][s];
  R->run[p ^ 1] = at;
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
  /* The levels' sizes and their bitmaps' places (they follow from n
   * alone); the kept bytes start after the top bitmap. */
  FZR_ONE({
    uint64_t off = 0;
    R->rl[0] = n;
    for (unsigned l = 1; l <= levels; l++) {
      R->rl[l] = (R->rl[l - 1] + 7) / 8;
      R->bo[l] = off;
      off += fzre_rz_up(R->rl[l]);
    }
    R->run[0] = R->rl[levels];
  });
  FZR_SYNC();
  for (unsigned l = 1; l <= levels; l++) {
    const uint8_t *src = l == 1 ? in : scratch + R->bo[l - 1];
    FZR_ALL(fzre_rz_build(R, l, src, scratch + R->bo[l], t, nt));
    FZR_SYNC();
  }
  FZR_ALL(fzre_rz_top(R, levels, scratch + R->bo[levels], out, t, nt));
  unsigned p = 0;
  for (unsigned l = levels; l >= 1; l--) {
    const uint8_t *src = l == 1 ? in : scratch + R->bo[l - 1];
    const uint8_t *bm = scratch + R->bo[l];
    for (uint64_t g0 = 0; g0 < R->rl[l]; g0 += FZRE_RZ_G * nt, p ^= 1) {
      FZR_ALL(fzre_rz_masks(R, p, bm, R->rl[l], g0, t));
      FZR_SYNC();
      FZR_ALL(fzre_rz_scan(R, p, t, nt));
      FZR_SYNC();
      FZR_ALL(fzre_rz_put(R, p, src, R->rl[l - 1], g0, out, t, nt));
      FZR_ONE(fzre_rz_next(R, p, nt));
    }
  }
  FZR_ONE(R->len = R->run[p]);
  FZR_SYNC();
}

#endif
