/*
 * test_byteplanes.c - the lossless-ratio preset (lorenzo | byteplanes) and
 * its byteplanes stage: every dtype bit-exact over empty, tiny, partial and
 * several chunks in 1 to 3 dimensions; random data stored within a tenth of
 * a percent of its size; each plane's three forms (left out, kept as is,
 * coded); and hostile streams and archives that must give clean errors (the
 * ci-asan build checks that nothing reads or writes out of bounds).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "archive.h"
#include "engine.h"
#include "fz.h"
#include "gen.h"

enum pattern { P_RANDOM, P_SMOOTH, P_ZERO, P_SPARSE, P_PATTERNS };

/* n elements of width w: random bits, a smooth field with noise, as a
 * measurement gives it (the dtype's own values: floats as floats, integers
 * as integers), all zero, or zero but for every 97th element. */
static uint8_t *make(fz_dtype t, size_t n, enum pattern pat, uint64_t seed) {
  size_t w = fz_dtype_size(t);
  uint8_t *x = calloc(n * w + 8, 1);
  cr_assert_not_null(x);
  for (size_t i = 0; i < n; i++) {
    double v = 3000 * sin((double)i * 0.002) + 16 * gen_unit(&seed);
    uint64_t bits = 0;
    switch (pat) {
    case P_RANDOM: bits = gen_rand(&seed); break;
    case P_SMOOTH:
      if (t == FZ_F32) {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        bits = u;
      } else if (t == FZ_F64) {
        memcpy(&bits, &v, 8);
      } else {
        bits = (uint64_t)(int64_t)(w == 1 ? v / 100 : v);
      }
      break;
    case P_ZERO: break;
    case P_SPARSE: bits = i % 97 == 3 ? gen_rand(&seed) : 0; break;
    default: break;
    }
    memcpy(x + i * w, &bits, w); /* little-endian: the low w bytes */
  }
  return x;
}

/* Compresses, decompresses, requires every byte back; returns the archive. */
static uint8_t *roundtrip(fz_dtype t, const uint64_t *dims, unsigned nd, const uint8_t *x,
                          const char *pipe, size_t *len) {
  size_t w = fz_dtype_size(t), n = 1;
  fz_params p;
  fz_params_init(&p);
  p.dtype = t;
  p.ndims = nd;
  p.pipeline = pipe;
  p.threads = 2;
  for (unsigned d = 0; d < nd; d++) {
    p.dims[d] = dims[d];
    n *= dims[d];
  }
  fz_plan *pl;
  char why[256] = "";
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), 0, "%s '%s': %s", fz_dtype_name(t), pipe,
               why);
  size_t cap = fz_plan_compress_bound(pl), ylen = 0;
  uint8_t *a = malloc(cap), *y = malloc(n * w + 1);
  int rc = fz_plan_compress(pl, x, n * w, a, cap, len);
  cr_assert_eq(rc, 0, "%s n=%zu: %s", fz_dtype_name(t), n, fz_strerror(rc));
  rc = fz_decompress(a, *len, y, n * w, &ylen, 2);
  cr_assert_eq(rc, 0, "%s n=%zu: %s", fz_dtype_name(t), n, fz_strerror(rc));
  cr_assert(ylen == n * w && memcmp(x, y, n * w) == 0, "%s '%s' n=%zu not bit-exact",
            fz_dtype_name(t), pipe, n);
  free(y);
  fz_plan_destroy(pl);
  return a;
}

Test(byteplanes, every_dtype_bit_exact, .timeout = 300) {
  /* Empty, tiny, around a 256 KiB chunk of every width, and shapes whose
   * chunks start mid-row and mid-plane. */
  static const struct {
    unsigned nd;
    uint64_t dims[3];
  } shapes[] = {{1, {0}},        {1, {1}},          {1, {2}},      {1, {33}},
                {1, {32769}},    {1, {65537}},      {1, {262145}}, {2, {1, 7}},
                {2, {301, 299}}, {3, {7, 45, 101}}, {3, {3, 1, 5}}};
  for (int t = FZ_U8; t <= FZ_F64; t++)
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
      for (int pat = 0; pat < P_PATTERNS; pat++) {
        size_t n = 1, len;
        for (unsigned d = 0; d < shapes[s].nd; d++)
          n *= shapes[s].dims[d];
        uint8_t *x = make((fz_dtype)t, n, (enum pattern)pat, 7 + s);
        free(roundtrip((fz_dtype)t, shapes[s].dims, shapes[s].nd, x, "lossless-ratio", &len));
        if (s == 0) /* one chain spelled out, with lorenzo's dims given */
          free(roundtrip((fz_dtype)t, shapes[s].dims, shapes[s].nd, x,
                         "lorenzo(dims=1) | byteplanes", &len));
        free(x);
      }
}

/* NaN payloads, -0.0, Inf and denormals: bits like any others. */
Test(byteplanes, float_specials) {
  for (int f32 = 0; f32 <= 1; f32++) {
    uint64_t dims[2] = {150, 200};
    size_t n = 30000, len;
    uint8_t *x = malloc(n * 8);
    gen_fill(GEN_SPECIAL_MIX, x, n, f32, 9);
    free(roundtrip(f32 ? FZ_F32 : FZ_F64, dims, 2, x, "lossless-ratio", &len));
    free(x);
  }
}

/* Random data: every chunk stored as is, so the archive exceeds the data
 * by its header and chunk table alone, under 0.1%. */
Test(byteplanes, random_data_barely_grows) {
  for (int t = FZ_U8; t <= FZ_F64; t++) {
    size_t w = fz_dtype_size((fz_dtype)t), n = ((size_t)1 << 20) / w, len;
    uint64_t dims[1] = {n};
    uint8_t *x = make((fz_dtype)t, n, P_RANDOM, 26);
    uint8_t *a = roundtrip((fz_dtype)t, dims, 1, x, "lossless-ratio", &len);
    cr_assert_gt(len, n * w);
    cr_assert_lt(len - n * w, n * w / 1000, "%s: %zu bytes for %zu", fz_dtype_name((fz_dtype)t),
                 len, n * w);
    fz_archive_info info;
    cr_assert_eq(fz_archive_inspect(a, len, &info), 0);
    /* The header (44 bytes of one dimension and this chain) and a u32 a
     * chunk: nothing else. */
    cr_assert_leq(len - n * w, 64 + 4 * info.chunks, "%s", fz_dtype_name((fz_dtype)t));
    free(a);
    free(x);
  }
}

/* Smooth data with noise codes below the lossless preset's size. */
Test(byteplanes, smooth_data_beats_lossless) {
  for (int t = FZ_I16; t <= FZ_F64; t++) {
    size_t w = fz_dtype_size((fz_dtype)t), n = 200000, la, lb;
    uint64_t dims[2] = {400, 500};
    uint8_t *x = make((fz_dtype)t, n, P_SMOOTH, 1);
    uint8_t *a = roundtrip((fz_dtype)t, dims, 2, x, "lossless-ratio", &la);
    uint8_t *b = roundtrip((fz_dtype)t, dims, 2, x, "lossless", &lb);
    cr_assert_lt(la, lb, "%s: lossless-ratio %zu, lossless %zu", fz_dtype_name((fz_dtype)t), la,
                 lb);
    /* Integers hold the noise in 4 or 5 of their bits: under half their
     * size (floats hold it in their 16 or more mantissa bits). */
    if (!fze_dtype_is_float((fz_dtype)t))
      cr_assert_lt(la, n * w / 2, "%s: %zu of %zu", fz_dtype_name((fz_dtype)t), la, n * w);
    free(a);
    free(b);
    free(x);
  }
}

/* Each plane's three forms, on the stage itself: byte 0 noise (kept as
 * is), byte 1 a few small values (coded), bytes 2 and 3 zero (left out). */
Test(byteplanes, plane_forms) {
  enum { N = 5000 };
  static uint32_t words[N], back[N];
  static uint8_t out[4 * N + 64], tmp[FZE_HUFFMAN_TMP + 5 * 4 * N + 256];
  uint64_t s = 3;
  for (size_t i = 0; i < N; i++)
    words[i] = (uint32_t)(gen_rand(&s) & 0xff) | (uint32_t)(i % 5 == 0) << 8;
  size_t len = fze_byteplanes_encode(4, words, N, out, tmp);
  size_t k = 0;
  uint64_t l[4];
  for (unsigned p = 0; p < 4; p++)
    cr_assert(fze_get_varint(out, len, &k, &l[p]));
  cr_assert_eq(l[0], N);
  cr_assert(l[1] > 0 && l[1] < N / 4, "plane 1: %llu bytes", (unsigned long long)l[1]);
  cr_assert_eq(l[2], 0);
  cr_assert_eq(l[3], 0);
  cr_assert_eq(len, k + l[0] + l[1]);
  memset(back, 0xab, sizeof back);
  cr_assert_eq(fze_byteplanes_decode(4, out, len, back, N, tmp), 0);
  cr_assert(memcmp(words, back, sizeof words) == 0);
}

/* Hand-made streams: lengths beyond the plane, lengths that do not add up
 * to the stream, cut varints and cut streams are refused. */
Test(byteplanes, hostile_streams) {
  enum { N = 3000 };
  static uint16_t words[N], back[N];
  static uint8_t out[2 * N + 64], bad[2 * N + 64], tmp[FZE_HUFFMAN_TMP + 5 * 2 * N + 256];
  for (size_t i = 0; i < N; i++)
    words[i] = (uint16_t)(i % 11 == 0 ? 300 + i % 7 : i % 3);
  size_t len = fze_byteplanes_encode(2, words, N, out, tmp);
  cr_assert_lt(len, 2 * N);
  cr_assert_eq(fze_byteplanes_decode(2, out, len, back, N, tmp), 0);
  cr_assert(memcmp(words, back, sizeof words) == 0);
  /* Every cut. */
  for (size_t cut = 0; cut < len; cut++)
    cr_assert_eq(fze_byteplanes_decode(2, out, cut, back, N, tmp), FZ_ECORRUPT, "cut %zu", cut);
  /* A plane longer than n bytes, and a varint that never ends. */
  uint8_t big[8] = {0xb9, 0x17, 0}; /* 3001: one more than the plane */
  cr_assert_eq(fze_byteplanes_decode(2, big, 3, back, N, tmp), FZ_ECORRUPT);
  uint8_t endless[8] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80};
  cr_assert_eq(fze_byteplanes_decode(2, endless, 8, back, N, tmp), FZ_ECORRUPT);
  /* Two zero planes and a byte left over. */
  uint8_t extra[3] = {0, 0, 7};
  cr_assert_eq(fze_byteplanes_decode(2, extra, 3, back, N, tmp), FZ_ECORRUPT);
  /* Every byte flipped: an error or some words, never a read or write
   * out of bounds; a flip in a length always breaks the sum. */
  size_t k = 0;
  uint64_t l0, l1;
  cr_assert(fze_get_varint(out, len, &k, &l0) && fze_get_varint(out, len, &k, &l1));
  for (size_t at = 0; at < len; at++) {
    memcpy(bad, out, len);
    bad[at] ^= 0x5a;
    int rc = fze_byteplanes_decode(2, bad, len, back, N, tmp);
    cr_assert(rc == 0 || rc == FZ_ECORRUPT, "byte %zu: %d", at, rc);
    if (at < k)
      cr_assert_eq(rc, FZ_ECORRUPT, "length byte %zu", at);
  }
}

/* Archives mutated byte by byte after the header: ECORRUPT from the stage
 * or from the payload checksum, never anything else. */
Test(byteplanes, hostile_archives, .timeout = 120) {
  uint64_t dims[2] = {60, 70};
  size_t n = 4200, len;
  uint8_t *x = make(FZ_I32, n, P_SMOOTH, 5);
  fz_params p;
  fz_params_init(&p);
  p.dtype = FZ_I32;
  p.ndims = 2;
  p.dims[0] = dims[0];
  p.dims[1] = dims[1];
  p.pipeline = "lossless-ratio";
  p.chunk_bytes = 4096;
  fz_plan *pl;
  cr_assert_eq(fz_plan_create(&p, &pl, NULL, 0), 0);
  size_t cap = fz_plan_compress_bound(pl), ylen;
  uint8_t *a = malloc(cap), *b = malloc(cap), *y = malloc(n * 4);
  cr_assert_eq(fz_plan_compress(pl, x, n * 4, a, cap, &len), 0);
  fze_header h;
  cr_assert_eq(fze_header_parse(a, len, &h), 0);
  cr_assert_lt(len, n * 4 / 2, "the chunks are coded");
  /* Version 4, which no decoder before the stage reads; the stage in a
   * version-3 header (checksum made good) is corrupt. */
  cr_assert_eq(a[4], 4);
  memcpy(b, a, len);
  b[4] = 3;
  uint32_t hc = fze_crc32c(0, b, h.header_len - 4);
  for (int i = 0; i < 4; i++)
    b[h.header_len - 4 + (size_t)i] = (uint8_t)(hc >> (8 * i));
  cr_assert_eq(fz_decompress(b, len, y, n * 4, &ylen, 1), FZ_ECORRUPT);
  b[4] = 8; /* after the last version */
  cr_assert_eq(fz_decompress(b, len, y, n * 4, &ylen, 1), FZ_EVERSION);
  for (size_t at = h.header_len; at < len; at++)
    for (int flip = 0; flip < 3; flip++) {
      memcpy(b, a, len);
      b[at] = flip == 0 ? (uint8_t)~b[at] : flip == 1 ? 0 : (uint8_t)(b[at] ^ 1);
      if (b[at] == a[at])
        continue;
      int rc = fz_decompress(b, len, y, n * 4, &ylen, 1);
      cr_assert_eq(rc, FZ_ECORRUPT, "byte %zu flip %d: %s", at, flip, fz_err_name(rc));
    }
  for (size_t cut = 0; cut < len; cut += 1 + cut / 16)
    cr_assert_lt(fz_decompress(a, cut, y, n * 4, &ylen, 1), 0, "cut at %zu", cut);
  free(a);
  free(b);
  free(y);
  free(x);
  fz_plan_destroy(pl);
}
