/*
 * ratio_enc_huff_model.c - the ratio encoder's entropy coder and zero-byte
 * elimination (ratio_enc_huff.cuh, ratio_enc_rze.cuh) run on the CPU: the
 * very phases the kernel runs, each for every thread of a block in turn,
 * must give fze_huffman_encode's and fze_rze_encode's bytes and lengths
 * exactly (both exported by the engine, so they are compared directly).
 * The inputs are the kinds the chain feeds them: the interpolation's
 * residual codes (mostly small, rare large ones and escapes, long zero
 * runs of every length about a power of two and across the lanes' and
 * segments' edges), random words, constants; the sizes from one word to a
 * full chunk; the huffman output bound on either side of the engine's
 * length and at codec.c's raw size - 1, where the engine must refuse.
 * Every buffer is allocated to its exact size and the words are read
 * unaligned too, so the ci-asan build proves nothing is read or written
 * outside them; the output is prefilled, so bytes left unwritten show.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "ratio_enc_huff.cuh"
#include "ratio_enc_rze.cuh"

_Static_assert(FZRE_RZE_LEVELS == FZE_RZE_MAX_LEVELS, "rze levels as the engine's");

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static void *scratch_of(uint64_t bytes) {
  void *p = aligned_alloc(256, bytes ? fzre_h_up(bytes, 256) : 256);
  cr_assert(p);
  memset(p, 0xcd, bytes ? fzre_h_up(bytes, 256) : 256);
  return p;
}

/* ---- rze ---- */

/* The input at byte offset off (the huffman stream follows other bytes). */
static void check_rze(unsigned levels, const uint8_t *src, uint64_t n, unsigned off) {
  uint8_t *buf = malloc(n + off ? n + off : 1), *in = buf + off;
  uint8_t *ref = malloc(2 * n + 64), *tmp = malloc(3 * n + 4096);
  cr_assert(buf && ref && tmp);
  memcpy(in, src, n);
  size_t len = fze_rze_encode(levels, in, n, ref, tmp);
  uint8_t *out = malloc(len ? len : 1);
  uint8_t *scratch = scratch_of(fzre_rze_scratch(n, levels));
  fzre_rz *R = malloc(sizeof *R);
  cr_assert(out && R);
  memset(out, 0xa5, len);
  memset(R, 0xcd, sizeof *R);
  fzre_rze(R, levels, in, n, out, scratch);
  cr_assert_eq(R->len, len, "rze levels %u n %llu: %llu bytes, engine %zu", levels,
               (unsigned long long)n, (unsigned long long)R->len, len);
  cr_assert(memcmp(out, ref, len) == 0, "rze levels %u n %llu: bytes differ", levels,
            (unsigned long long)n);
  free(buf);
  free(ref);
  free(tmp);
  free(out);
  free(scratch);
  free(R);
}

static void check_rze_all(const uint8_t *src, uint64_t n) {
  for (unsigned l = 1; l <= FZE_RZE_MAX_LEVELS; l++)
    check_rze(l, src, n, l % 3);
}

/* ---- huffman ---- */

/* Whether the last stream check_huff_cap made names the CLASS form. */
static int last_class;

/* The model at one bound: its length and bytes must be the engine's, and
 * nothing written when the engine refuses. */
static size_t check_huff_cap(unsigned lv, unsigned w, const uint8_t *words, uint64_t n,
                             uint64_t cap) {
  uint8_t *ref = malloc(cap ? cap : 1), *tmp = malloc(FZE_HUFFMAN_TMP + 4 * n);
  cr_assert(ref && tmp);
  size_t len = fze_huffman_encode(lv, w, words, n, ref, cap, tmp);
  uint8_t *out = malloc(cap ? cap : 1);
  uint8_t *scratch = scratch_of(fzre_huff_scratch(n, w));
  fzre_hf *H = malloc(sizeof *H);
  cr_assert(out && H);
  memset(out, 0xa5, cap);
  memset(H, 0xcd, sizeof *H);
  fzre_huff(H, lv, words, w, n, out, cap, scratch);
  if (len == SIZE_MAX) {
    cr_assert_eq(H->len, UINT64_MAX, "huff w %u n %llu cap %llu: %llu bytes, engine refuses", w,
                 (unsigned long long)n, (unsigned long long)cap, (unsigned long long)H->len);
    for (uint64_t i = 0; i < cap; i++)
      cr_assert_eq(out[i], 0xa5, "huff w %u n %llu cap %llu: refused but wrote byte %llu", w,
                   (unsigned long long)n, (unsigned long long)cap, (unsigned long long)i);
  } else {
    cr_assert_eq(H->len, len, "huff w %u n %llu cap %llu: %llu bytes, engine %zu", w,
                 (unsigned long long)n, (unsigned long long)cap, (unsigned long long)H->len, len);
    for (uint64_t i = 0; i < len; i++)
      cr_assert_eq(out[i], ref[i], "huff w %u n %llu cap %llu: byte %llu of %zu differs", w,
                   (unsigned long long)n, (unsigned long long)cap, (unsigned long long)i, len);
    last_class = len >= 2 && (ref[1] & 0x80u);
  }
  free(ref);
  free(tmp);
  free(out);
  free(scratch);
  free(H);
  return len;
}

/* The words at byte offset off (0: aligned), every bound about the
 * engine's length and codec.c's, then rze over the stream; the stage's
 * lv as given. */
static void check_huff_lv(unsigned lv, unsigned w, const uint8_t *src, uint64_t n, unsigned off,
                          int rze) {
  uint8_t *buf = malloc(n * w + off);
  cr_assert(buf);
  memcpy(buf + off, src, n * w);
  const uint8_t *words = buf + off;
  uint64_t big = n * w * 2 + 4096;
  size_t L = check_huff_cap(lv, w, words, n, big);
  cr_assert_neq(L, SIZE_MAX);
  /* At L the engine takes it; below, its estimate or its count refuses. */
  uint64_t lo = L > 40 ? L - 40 : 0;
  for (uint64_t cap = L + 1; cap + 1 > lo && cap > 0; cap--) {
    size_t r = check_huff_cap(lv, w, words, n, cap);
    cr_assert_eq(r == SIZE_MAX, cap < L);
  }
  if (n * w > 1)
    check_huff_cap(lv, w, words, n, n * w - 1);
  /* The price the encoder compares predictors by: the engine's bits, and
   * the stream's length once its lanes are rounded up. */
  uint8_t *ptmp = malloc(FZE_HUFFMAN_TMP + 4 * n), *pscr = scratch_of(fzre_huff_scratch(n, w));
  fzre_hf *P = malloc(sizeof *P);
  cr_assert(ptmp && P);
  uint64_t price = fze_huffman_price(lv, w, words, n, ptmp);
  fzre_huff_price(P, lv, words, w, n, pscr);
  cr_assert_eq(P->len, price, "price w %u n %llu: %llu bits, engine %llu", w,
               (unsigned long long)n, (unsigned long long)P->len, (unsigned long long)price);
  cr_assert(price <= 8 * (uint64_t)L && 8 * (uint64_t)L < price + 8 * FZE_HUFF_LANES + 8,
            "price %llu bits, stream %zu bytes", (unsigned long long)price, L);
  free(ptmp);
  free(pscr);
  free(P);
  if (rze) {
    uint8_t *s = malloc(L), *tmp = malloc(FZE_HUFFMAN_TMP + 4 * n);
    cr_assert(s && tmp);
    fze_huffman_encode(lv, w, words, n, s, L, tmp);
    check_rze_all(s, L);
    free(s);
    free(tmp);
  }
  free(buf);
}

/* Both lv: streams with zero runs by their bits only (versions 3 to 6),
 * and (version 7) each in the shorter of that and runs by their class and
 * raw bits; rze over the first only: its input is bytes either way. */
static void check_huff(unsigned w, const uint8_t *src, uint64_t n, unsigned off, int rze) {
  check_huff_lv(0, w, src, n, off, rze);
  check_huff_lv(1, w, src, n, off, 0);
}

static void put_word(uint8_t *p, unsigned w, uint64_t i, uint64_t v) {
  if (w == 4) {
    uint32_t x = (uint32_t)v;
    memcpy(p + 4 * i, &x, 4);
  } else {
    memcpy(p + 8 * i, &v, 8);
  }
}

/* The interpolation's codes: zigzag residuals mostly 0..10, now and then
 * a larger one, rarely an escape (4096 and above) or a huge one. */
static uint64_t geometric(unsigned w) {
  uint64_t r = next();
  unsigned z = (unsigned)__builtin_ctzll(r | (1ull << 40));
  uint64_t sel = (r >> 48) & 1023;
  if (sel == 0)
    return (next() % 60000) + 1;
  if (sel == 1)
    return w == 8 ? next() : next() & 0xffffffffu;
  if (sel < 12)
    return 10 + next() % 300;
  return z <= 10 ? z : z % 11;
}

static uint8_t *gen(unsigned kind, unsigned w, uint64_t n) {
  uint8_t *p = malloc(n * w + 1);
  cr_assert(p);
  memset(p, 0, n * w + 1);
  for (uint64_t i = 0; i < n; i++) {
    uint64_t v = 0;
    switch (kind) {
    case 0: v = next(); break;                           /* random words */
    case 1: v = geometric(w); break;                     /* residual codes */
    case 2: v = 0; break;                                /* all zero */
    case 3: v = 7; break;                                /* one value */
    case 4: v = 5000; break;                             /* one escape */
    case 5: v = next() % 4096; break;                    /* every symbol */
    case 6: v = (uint64_t)__builtin_ctzll(next() | (1ull << 40)); break; /* deep codes */
    case 7: v = next() % 5000; break;                    /* direct and escapes */
    case 8: v = (next() & 15) == 0 ? geometric(w) : 0; break; /* sparse */
    case 9: v = 1; break;
    case 10: v = next() % ((uint64_t)1 << (next() % 12)) + 1; break; /* about 1/v: halvings */
    }
    put_word(p, w, i, v);
  }
  return p;
}

static const uint64_t sizes[] = {1, 2, 3, 7, 8, 9, 31, 32, 33, 63, 64, 65, 255, 256, 257, 1000,
                                 4097};

Test(ratio_enc_huff, kinds_and_sizes) {
  for (unsigned w = 4; w <= 8; w += 4)
    for (unsigned kind = 0; kind < 11; kind++)
      for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        uint64_t n = sizes[si];
        uint8_t *p = gen(kind, w, n);
        check_huff(w, p, n, (unsigned)(si % 4) * (si % 4 == 2 ? 2 : 1), si % 3 == 0);
        free(p);
      }
}

Test(ratio_enc_huff, full_chunks) {
  for (unsigned w = 4; w <= 8; w += 4) {
    uint64_t n = 262144 / w;
    for (unsigned kind = 0; kind < 11; kind++) {
      uint8_t *p = gen(kind, w, n);
      check_huff(w, p, n, (kind % 3) * 4 + (kind == 5),
                 kind == 1 || kind == 6 || kind == 8 || kind == 10);
      free(p);
    }
  }
}

/* Zero runs of 2^k - 1, 2^k, 2^k + 1 words at every kind of place: inside
 * a segment, across segments and lanes, to a lane's end, whole lanes. */
Test(ratio_enc_huff, zero_runs) {
  static const uint64_t ns[] = {33, 1000, 4096, 4099, 65536};
  for (unsigned w = 4; w <= 8; w += 4)
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
      uint64_t n = ns[ni];
      if (n * w > 262144)
        continue;
      for (unsigned trial = 0; trial < 6; trial++) {
        uint8_t *p = gen(1, w, n);
        uint64_t cap = (n + 31) / 32;
        /* Replace a few stretches by zeros. */
        unsigned stretches = trial == 5 ? 200 : 6 + trial * 4;
        for (unsigned s = 0; s < stretches; s++) {
          unsigned k = 1 + (unsigned)(next() % 15);
          uint64_t len = ((uint64_t)1 << k) + (next() % 3) - 1;
          uint64_t at;
          switch (next() % 4) {
          case 0: at = next() % n; break;
          case 1: at = (next() % 32) * cap; break;              /* a lane's start */
          case 2: /* to a lane's end */
            at = (next() % 32 + 1) * cap;
            at = at > len ? at - len : 0;
            break;
          default: at = (next() % 32) * cap + (next() % 8) * ((cap + 7) / 8) - len / 2; break;
          }
          for (uint64_t i = at; i < at + len && i < n; i++)
            put_word(p, w, i, 0);
        }
        check_huff(w, p, n, trial % 3 == 1 ? 4 : trial % 3 == 2 ? 1 : 0, trial == 0);
        free(p);
      }
    }
}

/* Ties of choose_direct's cost: the direct symbols 1..m (a nibble each)
 * against c escapes of the value V (8 w + 8 bits each) cost the same for
 * E = m and E = V + 1 when V = m - 1 + c (2 w + 2); the engine takes the
 * lower. */
Test(ratio_enc_huff, direct_ties) {
  for (unsigned w = 4; w <= 8; w += 4)
    for (unsigned m = 2; m <= 40; m += 19)
      for (unsigned c = 1; c <= 3; c++) {
        uint64_t n = 3000, v = m - 1 + c * (2 * w + 2);
        uint8_t *p = gen(2, w, n);
        for (uint64_t i = 0; i < n; i++)
          put_word(p, w, i, i < c ? v : next() % m);
        check_huff(w, p, n, 0, 0);
        free(p);
      }
}

/* One run of 2^k - 1, 2^k or 2^k + 1 zeros among ones, starting at a
 * segment's first word, inside a segment, or ending at a lane's last word
 * (a lane is 2048 words here, a segment 256). */
Test(ratio_enc_huff, placed_runs) {
  uint64_t n = 65536, lane = 2048, seg = 256;
  uint8_t *p = gen(9, 4, n);
  unsigned forms[2] = {0, 0};
  for (unsigned k = 1; k <= 11; k++)
    for (int d = -1; d <= 1; d++) {
      uint64_t len = ((uint64_t)1 << k) + (uint64_t)(int64_t)d;
      uint64_t at[3] = {5 * lane + 3 * seg, 9 * lane + 2 * seg + 100, 14 * lane - len};
      for (unsigned a = 0; a < 3; a++) {
        for (uint64_t i = at[a]; i < at[a] + len; i++)
          put_word(p, 4, i, 0);
        for (unsigned f = 0; f <= 1; f++) { /* the stage's lv */
          cr_assert_neq(check_huff_cap(f, 4, p, n, 2 * 4 * n), SIZE_MAX);
          cr_assert(f || !last_class);
          forms[last_class] += f;
          check_huff_cap(f, 4, p, n, 4 * n - 1);
        }
        for (uint64_t i = at[a]; i < at[a] + len; i++)
          put_word(p, 4, i, 1);
      }
    }
  /* Version 7's streams took either form among these. */
  cr_assert(forms[0] > 0 && forms[1] > 0, "BITS %u, CLASS %u", forms[0], forms[1]);
  free(p);
}

/* Lanes of exactly 2^15 zeros (the longest run symbol), and one word. */
Test(ratio_enc_huff, longest_lanes) {
  uint64_t n = FZRE_HUFF_MAX_N;
  uint8_t *p = gen(2, 4, n);
  for (unsigned f = 0; f <= 1; f++)
    check_huff_cap(f, 4, p, n, n * 4 - 1);
  put_word(p, 4, 12345, 3);
  put_word(p, 4, n - 1, 99999);
  for (unsigned f = 0; f <= 1; f++)
    check_huff_cap(f, 4, p, n, n * 4 - 1);
  free(p);
}

Test(ratio_enc_huff, refusals) {
  uint8_t words[16] = {1, 2, 3, 4, 5, 6, 7, 8}, out[64];
  uint8_t *scratch = scratch_of(fzre_huff_scratch(2, 4));
  fzre_hf H;
  fzre_huff(&H, 0, words, 2, 2, out, sizeof out, scratch);
  cr_assert_eq(H.len, UINT64_MAX);
  fzre_huff(&H, 0, words, 1, 2, out, sizeof out, scratch);
  cr_assert_eq(H.len, UINT64_MAX);
  fzre_huff(&H, 1, words, 4, 0, out, sizeof out, scratch);
  cr_assert_eq(H.len, UINT64_MAX);
  fzre_rz R;
  fzre_rze(&R, 0, words, 8, out, scratch);
  cr_assert_eq(R.len, UINT64_MAX);
  fzre_rze(&R, FZE_RZE_MAX_LEVELS + 1, words, 8, out, scratch);
  cr_assert_eq(R.len, UINT64_MAX);
  free(scratch);
}

/* rze alone: random, sparse and run-heavy bytes (bitmaps of runs make the
 * repeat levels do work), every size about a byte of bitmap. */
Test(ratio_enc_huff, rze_bytes) {
  static const uint64_t ns[] = {0, 1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 511, 512, 513,
                                2047, 2048, 2049, 4095, 100000, 262144, 262147};
  for (unsigned avx = 0; avx < 2; avx++) {
    bool had = fze_have_avx2();
    if (!avx)
      fze_set_avx2(false);
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
      uint64_t n = ns[ni];
      uint8_t *p = malloc(n + 1);
      cr_assert(p);
      for (unsigned kind = 0; kind < 5; kind++) {
        uint8_t run = 0;
        for (uint64_t i = 0; i < n; i++) {
          uint64_t r = next();
          switch (kind) {
          case 0: p[i] = (uint8_t)r; break;
          case 1: p[i] = (r & 31) == 0 ? (uint8_t)(r >> 8) : 0; break;
          case 2: p[i] = 0; break;
          case 3: p[i] = 0xff; break;
          default:
            if ((r & 255) == 0)
              run = run ? 0 : (uint8_t)(r >> 8) | 1;
            p[i] = run;
            break;
          }
        }
        check_rze_all(p, n);
      }
      free(p);
    }
    fze_set_avx2(had);
  }
}
