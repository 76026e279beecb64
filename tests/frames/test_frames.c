/*
 * test_frames.c - the bitshuffle-LZ4/zstd chunk codec and the sparse output
 * of fz_frames.h against their definitions.
 *
 * The bit transpose is checked against the format's definition written bit
 * by bit; chunks round-trip for every element size, odd sizes, partial
 * blocks and tails, both codecs; every hostile chunk (each truncation, bad
 * lengths, bad sizes, flipped bytes, blocks of the wrong size) gives an
 * error and, in the ci-asan preset, no out-of-bounds access; the sparse
 * lists, top-N and matrix products equal references computed from the
 * original pixels with plain loops.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h" /* fze_set_avx2: the plain C paths too */
#include "fz_frames.h"

static uint64_t rng_state;
static uint64_t rnd(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static const size_t sizes[] = {1, 2, 4, 8};

/* The format's definition: row 8j + b, bit i % 8 of byte i / 8 is bit b of
 * byte j of element i. */
static void reference_shuffle(const uint8_t *in, size_t n, size_t w, uint8_t *out) {
  memset(out, 0, n * w);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < w; j++)
      for (size_t b = 0; b < 8; b++)
        if (in[i * w + j] >> b & 1)
          out[(8 * j + b) * (n / 8) + i / 8] |= (uint8_t)(1u << (i % 8));
}

static uint8_t *random_bytes(size_t n) {
  uint8_t *p = malloc(n + 1);
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t)rnd();
  return p;
}

Test(bitshuffle, matches_the_definition) {
  rng_state = 1;
  size_t ns[] = {8, 16, 24, 64, 72, 1000, 4096, 8200};
  for (size_t s = 0; s < 4; s++)
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
      size_t w = sizes[s], n = ns[k];
      uint8_t *in = random_bytes(n * w), *ref = malloc(n * w), *got = malloc(n * w),
              *back = malloc(n * w);
      reference_shuffle(in, n, w, ref);
      fz_bitshuffle_block(in, n, w, got);
      cr_assert(memcmp(ref, got, n * w) == 0, "shuffle w=%zu n=%zu", w, n);
      fz_bitunshuffle_block(got, n, w, back);
      cr_assert(memcmp(in, back, n * w) == 0, "unshuffle w=%zu n=%zu", w, n);
      free(in), free(ref), free(got), free(back);
    }
}

Test(bslz4, default_block_sizes) {
  cr_assert_eq(fz_bslz4_default_block(1), 8192);
  cr_assert_eq(fz_bslz4_default_block(2), 4096);
  cr_assert_eq(fz_bslz4_default_block(4), 2048);
  cr_assert_eq(fz_bslz4_default_block(8), 1024);
  cr_assert_eq(fz_bslz4_default_block(3), 0);
}

/* Data that compresses some: small values with runs, as detector counts. */
static uint8_t *counts_like(size_t n, size_t w) {
  uint8_t *p = calloc(n * w + 1, 1);
  for (size_t i = 0; i < n; i++) {
    uint64_t v = rnd() % 5 == 0 ? rnd() : rnd() % 4;
    for (size_t j = 0; j < w; j++)
      p[i * w + j] = (uint8_t)(v >> (8 * j));
  }
  return p;
}

static uint8_t *encode(fz_bslz4_codec codec, const uint8_t *data, size_t n, size_t w, size_t block,
                       size_t *len) {
  size_t cap = fz_bslz4_bound(codec, n, w, block);
  cr_assert(cap > 0);
  uint8_t *c = malloc(cap);
  char why[256] = "";
  int64_t got = fz_bslz4_encode(codec, data, n, w, block, 3, c, cap, why, sizeof why);
  cr_assert(got > 0, "encode n=%zu w=%zu block=%zu: %s", n, w, block, why);
  *len = (size_t)got;
  return c;
}

Test(bslz4, round_trips_every_size_and_block) {
  rng_state = 2;
  size_t ns[] = {0, 1, 7, 8, 9, 63, 128, 1000, 1811, 4096, 10003, 40000};
  size_t blocks[] = {0, 8, 24, 128, 1000, 4096, 65536};
  fz_bslz4_codec codecs[] = {FZ_BSLZ4_LZ4, FZ_BSLZ4_ZSTD};
  for (size_t cd = 0; cd < 2; cd++)
    for (size_t s = 0; s < 4; s++)
      for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
        for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
          size_t w = sizes[s], n = ns[k], len;
          uint8_t *data = counts_like(n, w);
          uint8_t *c = encode(codecs[cd], data, n, w, blocks[b], &len);
          fz_bslz4_layout lay;
          cr_assert_eq(fz_bslz4_layout_of(c, len, w, &lay, NULL, 0), 0);
          size_t be = blocks[b] ? blocks[b] : fz_bslz4_default_block(w);
          cr_assert_eq(lay.nelems, n);
          cr_assert_eq(lay.block_elems, be);
          cr_assert_eq(lay.tail_elems, n % 8);
          cr_assert_eq(lay.nblocks, n / be + (n % be >= 8));
          uint8_t *out = malloc(n * w + 1);
          char why[256] = "";
          int64_t got = fz_bslz4_decode(codecs[cd], c, len, w, out, n * w, why, sizeof why);
          cr_assert_eq(got, (int64_t)(n * w), "decode n=%zu w=%zu: %s", n, w, why);
          cr_assert(memcmp(out, data, n * w) == 0, "n=%zu w=%zu block=%zu", n, w, be);
          free(data), free(c), free(out);
        }
}

/* Decoding must fail, with any error, and touch nothing outside. */
static void expect_fail(fz_bslz4_codec codec, const uint8_t *c, size_t len, size_t w, size_t n,
                        const char *what) {
  uint8_t *copy = malloc(len ? len : 1), *out = malloc(n * w + 1);
  memcpy(copy, c, len); /* exactly len bytes: ASan sees any read past them */
  char why[256] = "";
  int64_t rc = fz_bslz4_decode(codec, copy, len, w, out, n * w, why, sizeof why);
  cr_assert(rc < 0, "%s: decoded (%lld)", what, (long long)rc);
  cr_assert(why[0], "%s: no reason given", what);
  free(copy), free(out);
}

static void put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

Test(bslz4_hostile, every_truncation) {
  rng_state = 3;
  size_t n = 5003, w = 2, len;
  uint8_t *data = counts_like(n, w), *c = encode(FZ_BSLZ4_LZ4, data, n, w, 512, &len);
  for (size_t cut = 0; cut < len; cut++)
    expect_fail(FZ_BSLZ4_LZ4, c, cut, w, n, "truncated");
  uint8_t *longer = calloc(len + 1, 1);
  memcpy(longer, c, len);
  expect_fail(FZ_BSLZ4_LZ4, longer, len + 1, w, n, "a byte after the tail");
  free(data), free(c), free(longer);
}

Test(bslz4_hostile, bad_headers_and_lengths) {
  rng_state = 4;
  size_t n = 5003, w = 4, len;
  uint8_t *data = counts_like(n, w), *c = encode(FZ_BSLZ4_LZ4, data, n, w, 1024, &len);
  uint8_t *h = malloc(len);
  struct {
    size_t at;
    uint32_t v;
    const char *what;
  } pokes[] = {
      {8, 0, "block size 0"},
      {8, 1023 * 4, "block size not a multiple of 8 elements"},
      {8, 1026, "block size not whole elements"},
      {12, 0, "block length 0"},
      {12, 0xffffffffu, "block length past the end"},
      {12, (uint32_t)len, "block length one chunk long"},
      {0, 0xffffffffu, "uncompressed size of 2^64 - 2^32 ..."},
      {4, 5003 * 4 + 4, "one element more"},
      {4, 5003 * 4 - 4, "one element less"},
      {4, 5003 * 4 + 1, "not whole elements"},
  };
  for (size_t i = 0; i < sizeof pokes / sizeof pokes[0]; i++) {
    memcpy(h, c, len);
    put_be32(h + pokes[i].at, pokes[i].v);
    expect_fail(FZ_BSLZ4_LZ4, h, len, w, n, pokes[i].what);
  }
  /* A huge size with room claimed in the output must not be trusted either. */
  memcpy(h, c, len);
  put_be32(h, 0x7fffffffu);
  uint8_t out[64];
  cr_assert_lt(fz_bslz4_decode(FZ_BSLZ4_LZ4, h, len, w, out, sizeof out, NULL, 0), 0);
  /* LZ4 data given to the zstd decoder and the reverse. */
  expect_fail(FZ_BSLZ4_ZSTD, c, len, w, n, "LZ4 read as zstd");
  size_t zlen;
  uint8_t *z = encode(FZ_BSLZ4_ZSTD, data, n, w, 1024, &zlen);
  expect_fail(FZ_BSLZ4_LZ4, z, zlen, w, n, "zstd read as LZ4");
  free(data), free(c), free(h), free(z);
}

/* A block whose LZ4 data is valid but of another size: the chunk of a
 * smaller block size, relabelled with a larger one. */
Test(bslz4_hostile, block_of_the_wrong_size) {
  rng_state = 5;
  size_t n = 4096, w = 2, len;
  uint8_t *data = counts_like(n, w), *c = encode(FZ_BSLZ4_LZ4, data, n, w, 1024, &len);
  put_be32(c + 8, 2048 * 2);
  expect_fail(FZ_BSLZ4_LZ4, c, len, w, n, "blocks shorter than the header says");
  put_be32(c + 8, 512 * 2);
  expect_fail(FZ_BSLZ4_LZ4, c, len, w, n, "blocks longer than the header says");
  free(data), free(c);
}

Test(bslz4_hostile, flipped_bytes_never_crash) {
  rng_state = 6;
  size_t n = 3001, w = 2, len;
  uint8_t *data = counts_like(n, w);
  fz_bslz4_codec codecs[] = {FZ_BSLZ4_LZ4, FZ_BSLZ4_ZSTD};
  for (size_t cd = 0; cd < 2; cd++) {
    uint8_t *c = encode(codecs[cd], data, n, w, 256, &len);
    uint8_t *out = malloc(n * w);
    for (int trial = 0; trial < 3000; trial++) {
      uint8_t *h = malloc(len);
      memcpy(h, c, len);
      int flips = 1 + (int)(rnd() % 4);
      for (int f = 0; f < flips; f++)
        h[FZ_BSLZ4_HEADER + rnd() % (len - FZ_BSLZ4_HEADER)] ^= (uint8_t)(1 + rnd() % 255);
      /* Either an error or n * w bytes; the sanitizers watch the rest. */
      int64_t rc = fz_bslz4_decode(codecs[cd], h, len, w, out, n * w, NULL, 0);
      cr_assert(rc < 0 || rc == (int64_t)(n * w));
      free(h);
    }
    free(c), free(out);
  }
  free(data);
}

/* An LZ4 sequence whose match offset points before the block. */
Test(bslz4_hostile, lz4_offset_before_the_block) {
  size_t n = 64, w = 1;
  uint8_t c[FZ_BSLZ4_HEADER + 4 + 5] = {0};
  c[7] = (uint8_t)n;   /* 64 bytes */
  put_be32(c + 8, 64); /* in one block of 64 */
  put_be32(c + 12, 5); /* of 5 bytes of LZ4: */
  uint8_t *seq = c + 16;
  seq[0] = 0x1f;                /* 1 literal, then a match of 15 + more */
  seq[1] = 'x';                 /* the literal */
  seq[2] = 0x00, seq[3] = 0x10; /* at offset 4096: before the block */
  seq[4] = 44;                  /* 4 + 15 + 44 = 63 bytes: 64 in all */
  expect_fail(FZ_BSLZ4_LZ4, c, sizeof c, w, n, "offset before the block");
}

/* ---- Sparse output against the original pixels. ---- */

typedef struct frame_case {
  fz_dtype t;
  size_t w;
} frame_case;

static const fz_dtype dtypes[] = {FZ_U8,  FZ_I8,  FZ_U16, FZ_I16, FZ_U32,
                                  FZ_I32, FZ_U64, FZ_I64, FZ_F32, FZ_F64};

static double as_double(const uint8_t *p, fz_dtype t) {
  switch (t) {
  case FZ_U8: return *p;
  case FZ_I8: return (int8_t)*p;
#define L(T)                                                                                       \
  do {                                                                                             \
    T v;                                                                                           \
    memcpy(&v, p, sizeof v);                                                                       \
    return (double)v;                                                                              \
  } while (0)
  case FZ_U16: L(uint16_t);
  case FZ_I16: L(int16_t);
  case FZ_U32: L(uint32_t);
  case FZ_I32: L(int32_t);
  case FZ_F32: L(float);
  case FZ_F64: L(double);
  default: return 0;
#undef L
  }
}

/* value > cut with the exact comparison numpy makes; 64-bit integers are
 * compared exactly too. */
static int above(const uint8_t *p, fz_dtype t, double cut) {
  if (t == FZ_U64 || t == FZ_I64) {
    if (isnan(cut))
      return 0;
    if (t == FZ_U64) {
      uint64_t v;
      memcpy(&v, p, 8);
      if (cut < 0)
        return 1;
      if (cut >= 18446744073709551616.0)
        return 0;
      return v > (uint64_t)floor(cut);
    }
    int64_t v;
    memcpy(&v, p, 8);
    if (cut < -9223372036854775808.0)
      return 1;
    if (cut >= 9223372036854775808.0)
      return 0;
    return v > (int64_t)floor(cut);
  }
  return as_double(p, t) > cut;
}

/* Pixels: mostly small, some large, and for floats the special values. */
static uint8_t *pixels(fz_dtype t, size_t n) {
  size_t w = fz_dtype_size(t);
  uint8_t *p = calloc(n * w + 1, 1);
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rnd();
    if (t == FZ_F32) {
      static const float sp[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-45f, 10.0f};
      float v = r % 50 == 0 ? sp[rnd() % 8] : (float)((int64_t)(r % 41) - 20) * 0.75f;
      memcpy(p + i * w, &v, 4);
    } else if (t == FZ_F64) {
      static const double sp[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0, -0.0, 5e-324, 10.0};
      double v = r % 50 == 0 ? sp[rnd() % 8] : (double)((int64_t)(r % 41) - 20) * 0.75;
      memcpy(p + i * w, &v, 8);
    } else {
      uint64_t v = r % 30 == 0 ? rnd() : r % 16;
      if (t == FZ_I8 || t == FZ_I16 || t == FZ_I32 || t == FZ_I64)
        v = r % 30 == 0 ? rnd() : (uint64_t)((int64_t)(r % 33) - 16);
      for (size_t j = 0; j < w; j++)
        p[i * w + j] = (uint8_t)(v >> (8 * j));
    }
  }
  return p;
}

static fz_frames *make(fz_dtype t, size_t n, fz_bslz4_codec codec, const uint8_t *mask,
                       const fz_frames_csr *csr) {
  fz_frames_params prm = {.dtype = t, .npixels = n, .codec = codec, .mask = mask, .csr = csr};
  fz_frames *f = NULL;
  char why[256] = "";
  cr_assert_eq(fz_frames_create(&prm, &f, why, sizeof why), 0, "%s", why);
  return f;
}

static void check_sparse(fz_dtype t, size_t n, size_t block, const uint8_t *mask, double cut,
                         fz_bslz4_codec codec) {
  size_t w = fz_dtype_size(t), len;
  uint8_t *px = pixels(t, n);
  uint8_t *c = encode(codec, px, n, w, block, &len);
  fz_frames *f = make(t, n, codec, mask, NULL);
  uint8_t *vals = malloc(n * w + 1);
  uint32_t *idx = malloc(n * sizeof *idx + 1);
  fz_frames_out o = {.values = vals, .indices = idx, .cap = n};
  char why[256] = "";
  int64_t rc = fz_frames_sparse(f, c, len, cut, 0, &o, why, sizeof why);
  cr_assert_geq(rc, 0, "%s n=%zu: %s", fz_dtype_name(t), n, why);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if ((mask && !mask[i]) || !above(px + i * w, t, cut))
      continue;
    cr_assert_lt(k, o.count, "%s n=%zu cut=%g: too few listed", fz_dtype_name(t), n, cut);
    cr_assert_eq(idx[k], i, "%s n=%zu cut=%g: entry %zu", fz_dtype_name(t), n, cut, k);
    cr_assert(memcmp(vals + k * w, px + i * w, w) == 0);
    k++;
  }
  cr_assert_eq(k, o.count, "%s n=%zu block=%zu cut=%g: %zu expected, %zu listed", fz_dtype_name(t),
               n, block, cut, k, o.count);
  cr_assert_eq((size_t)rc, o.count);
  /* The dense frame too. */
  uint8_t *dense = malloc(n * w + 1);
  cr_assert_eq(fz_frames_dense(f, c, len, dense, n * w, NULL, NULL, why, sizeof why), 0, "%s", why);
  cr_assert(memcmp(dense, px, n * w) == 0);
  fz_frames_destroy(f);
  free(px), free(c), free(vals), free(idx), free(dense);
}

Test(frames, sparse_every_dtype_size_and_cut) {
  rng_state = 7;
  size_t ns[] = {0, 5, 8, 77, 1000, 4099, 33333};
  double cuts[] = {-INFINITY, -1e300, -17, -0.5, -0.0, 0.0, 2, 7.5, 10, 1e10, 1e300, INFINITY, NAN};
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
      for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++)
        check_sparse(dtypes[d], ns[k], k % 2 ? 0 : 520, NULL, cuts[c],
                     c % 3 ? FZ_BSLZ4_LZ4 : FZ_BSLZ4_ZSTD);
}

/* The same without AVX2: the cut and the unshuffle have plain C twins. */
Test(frames, sparse_without_avx2) {
  fze_set_avx2(false);
  rng_state = 14;
  size_t ns[] = {77, 4099, 33333};
  double cuts[] = {-17, -0.0, 2, 7.5, NAN};
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
      for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++)
        check_sparse(dtypes[d], ns[k], k % 2 ? 0 : 520, NULL, cuts[c], FZ_BSLZ4_LZ4);
}

Test(bitshuffle, without_avx2) {
  fze_set_avx2(false);
  rng_state = 15;
  for (size_t s = 0; s < 4; s++) {
    size_t w = sizes[s], n = 8200;
    uint8_t *in = random_bytes(n * w), *ref = malloc(n * w), *back = malloc(n * w);
    reference_shuffle(in, n, w, ref);
    fz_bitunshuffle_block(ref, n, w, back);
    cr_assert(memcmp(in, back, n * w) == 0, "unshuffle w=%zu", w);
    free(in), free(ref), free(back);
  }
}

Test(frames, sparse_with_masks) {
  rng_state = 8;
  size_t n = 2162 * 7 + 3;
  uint8_t *mask = malloc(n);
  for (int kind = 0; kind < 3; kind++) {
    for (size_t i = 0; i < n; i++)
      mask[i] = kind == 0 ? 0 : kind == 1 ? (rnd() % 3 != 0) : (i % 2068 > 1000);
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
      check_sparse(dtypes[d], n, 0, mask, 3, FZ_BSLZ4_LZ4);
  }
  free(mask);
}

Test(frames, every_pixel_above_the_cut) {
  rng_state = 9;
  size_t n = 4096 * 3 + 5, len;
  uint16_t *px = malloc(n * 2);
  for (size_t i = 0; i < n; i++)
    px[i] = (uint16_t)(100 + i % 7);
  uint8_t *c = encode(FZ_BSLZ4_LZ4, (uint8_t *)px, n, 2, 0, &len);
  fz_frames *f = make(FZ_U16, n, FZ_BSLZ4_LZ4, NULL, NULL);
  uint16_t *vals = malloc(n * 2);
  uint32_t *idx = malloc(n * 4);
  fz_frames_out o = {.values = vals, .indices = idx, .cap = n};
  cr_assert_eq(fz_frames_sparse(f, c, len, 99.5, 0, &o, NULL, 0), (int64_t)n);
  for (size_t i = 0; i < n; i++)
    cr_assert(idx[i] == i && vals[i] == px[i]);
  /* One short: FZ_ENOSPC, and the count says how many there were. */
  o.cap = n - 1;
  char why[256] = "";
  cr_assert_eq(fz_frames_sparse(f, c, len, 99.5, 0, &o, why, sizeof why), FZ_ENOSPC);
  cr_assert(strstr(why, "room"), "%s", why);
  fz_frames_destroy(f);
  free(px), free(c), free(vals), free(idx);
}

static int by_key_then_index(const void *a, const void *b) {
  const double *x = a, *y = b; /* [value, index] */
  if (x[0] != y[0])
    return x[0] < y[0] ? 1 : -1;
  return x[1] < y[1] ? -1 : x[1] > y[1];
}

Test(frames, top_n) {
  rng_state = 10;
  size_t n = 20011, w = 2, len;
  uint8_t *px = pixels(FZ_U16, n);
  uint8_t *c = encode(FZ_BSLZ4_LZ4, px, n, w, 0, &len);
  fz_frames *f = make(FZ_U16, n, FZ_BSLZ4_LZ4, NULL, NULL);
  double *ref = malloc(n * 2 * sizeof *ref);
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (as_double(px + i * w, FZ_U16) > 5)
      ref[2 * m] = as_double(px + i * w, FZ_U16), ref[2 * m + 1] = (double)i, m++;
  qsort(ref, m, 2 * sizeof *ref, by_key_then_index);
  size_t tops[] = {1, 2, 10, 500, m - 1, m, m + 10};
  uint16_t *vals = malloc(n * 2);
  uint32_t *idx = malloc(n * 4);
  for (size_t k = 0; k < sizeof tops / sizeof tops[0]; k++) {
    size_t top = tops[k], want = top < m ? top : m;
    fz_frames_out o = {.values = vals, .indices = idx, .cap = top};
    cr_assert_eq(fz_frames_sparse(f, c, len, 5, top, &o, NULL, 0), (int64_t)m);
    cr_assert_eq(o.count, want);
    /* The kept set is the first `want` of the reference order, listed by
     * pixel index. */
    uint8_t *kept = calloc(n, 1);
    for (size_t j = 0; j < want; j++)
      kept[(size_t)ref[2 * j + 1]] = 1;
    size_t j = 0;
    for (size_t i = 0; i < n; i++)
      if (kept[i]) {
        cr_assert_eq(idx[j], i, "top %zu: entry %zu", top, j);
        cr_assert_eq(vals[j], ((uint16_t *)(void *)px)[i]);
        j++;
      }
    free(kept);
  }
  fz_frames_destroy(f);
  free(px), free(c), free(ref), free(vals), free(idx);
}

/* fz_frames_top on a whole list (as the GPU decoder makes one) keeps what
 * fz_frames_sparse keeps with top_n, for every dtype, in place. */
Test(frames, top_of_a_list_matches_top_n) {
  rng_state = 11;
  size_t n = 9001;
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
    fz_dtype t = dtypes[d];
    size_t w = fz_dtype_size(t), len;
    uint8_t *px = pixels(t, n);
    uint8_t *c = encode(FZ_BSLZ4_LZ4, px, n, w, 0, &len);
    fz_frames *f = make(t, n, FZ_BSLZ4_LZ4, NULL, NULL);
    uint8_t *all = malloc(n * w), *vals = malloc(n * w);
    uint32_t *all_idx = malloc(n * 4), *idx = malloc(n * 4);
    uint64_t *keys = malloc(n * sizeof *keys);
    fz_frames_out o = {.values = all, .indices = all_idx, .cap = n};
    int64_t m = fz_frames_sparse(f, c, len, 0, 0, &o, NULL, 0);
    cr_assert_gt(m, 10, "%s: %lld above the cut", fz_dtype_name(t), (long long)m);
    size_t tops[] = {1, 3, (size_t)m / 2, (size_t)m - 1, (size_t)m, (size_t)m + 5};
    for (size_t k = 0; k < sizeof tops / sizeof tops[0]; k++) {
      size_t top = tops[k];
      fz_frames_out want = {.values = vals, .indices = idx, .cap = top};
      cr_assert_eq(fz_frames_sparse(f, c, len, 0, top, &want, NULL, 0), m);
      uint8_t *v = malloc(n * w);
      uint32_t *ix = malloc(n * 4);
      memcpy(v, all, (size_t)m * w);
      memcpy(ix, all_idx, (size_t)m * 4);
      cr_assert_eq(fz_frames_top(t, v, ix, (size_t)m, top, keys), (int64_t)want.count);
      cr_assert(memcmp(v, vals, want.count * w) == 0, "%s top %zu: values", fz_dtype_name(t), top);
      cr_assert(memcmp(ix, idx, want.count * 4) == 0, "%s top %zu: indices", fz_dtype_name(t), top);
      free(v), free(ix);
    }
    cr_assert_eq(fz_frames_top(t, all, all_idx, (size_t)m, 0, NULL), m);
    fz_frames_destroy(f);
    free(px), free(c), free(all), free(vals), free(all_idx), free(idx), free(keys);
  }
  cr_assert_eq(fz_frames_top((fz_dtype)99, NULL, NULL, 0, 1, NULL), FZ_EDTYPE);
  cr_assert_eq(fz_frames_top(FZ_U16, NULL, NULL, 5, 1, NULL), FZ_EINVAL);
}

Test(frames, csr_products) {
  rng_state = 11;
  size_t n = 9001, rows = 37, nnz = 0, len;
  uint64_t *indptr = malloc((rows + 1) * sizeof *indptr);
  uint32_t *cols = malloc(n * 2 * sizeof *cols);
  float *wf = malloc(n * 2 * sizeof *wf);
  int32_t *wi = malloc(n * 2 * sizeof *wi);
  indptr[0] = 0;
  for (size_t r = 0; r < rows; r++) {
    size_t k = rnd() % 400;
    for (size_t j = 0; j < k; j++, nnz++) {
      cols[nnz] = (uint32_t)(rnd() % n);
      wf[nnz] = (float)(rnd() % 1000) / 997.0f;
      wi[nnz] = (int32_t)(rnd() % 2000) - 1000;
    }
    indptr[r + 1] = nnz;
  }
  uint8_t *mask = malloc(n);
  for (size_t i = 0; i < n; i++)
    mask[i] = rnd() % 5 != 0;
  fz_dtype ts[] = {FZ_U16, FZ_I32, FZ_F32};
  for (size_t d = 0; d < 3; d++) {
    size_t w = fz_dtype_size(ts[d]);
    uint8_t *px = pixels(ts[d], n);
    if (ts[d] == FZ_F32) /* the product of a NaN is NaN: keep them out */
      for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, px + 4 * i, 4);
        if (!isfinite(v))
          memset(px + 4 * i, 0, 4);
      }
    uint8_t *c = encode(FZ_BSLZ4_LZ4, px, n, w, 0, &len);
    for (int integer = 0; integer < 2; integer++) {
      if (integer && ts[d] == FZ_F32) {
        fz_frames_csr m = {rows, indptr, cols, NULL, wi};
        fz_frames_params prm = {.dtype = FZ_F32, .npixels = n, .codec = FZ_BSLZ4_LZ4, .csr = &m};
        fz_frames *f = NULL;
        cr_assert_eq(fz_frames_create(&prm, &f, NULL, 0), FZ_EDTYPE);
        continue;
      }
      fz_frames_csr m = {rows, indptr, cols, integer ? NULL : wf, integer ? wi : NULL};
      fz_frames *f = make(ts[d], n, FZ_BSLZ4_LZ4, mask, &m);
      cr_assert_eq(fz_frames_rows(f), rows);
      double pf[37], rf[37];
      int64_t pi[37], ri[37];
      uint8_t *vals = malloc(n * w);
      uint32_t *idx = malloc(n * 4);
      fz_frames_out o = {.values = vals,
                         .indices = idx,
                         .cap = n,
                         .powder_f64 = integer ? NULL : pf,
                         .powder_i64 = integer ? pi : NULL};
      cr_assert_geq(fz_frames_sparse(f, c, len, 3, 0, &o, NULL, 0), 0);
      for (size_t r = 0; r < rows; r++) {
        rf[r] = 0, ri[r] = 0;
        for (uint64_t j = indptr[r]; j < indptr[r + 1]; j++)
          if (mask[cols[j]]) {
            rf[r] += (double)wf[j] * as_double(px + cols[j] * w, ts[d]);
            ri[r] += (int64_t)wi[j] * (int64_t)as_double(px + cols[j] * w, ts[d]);
          }
        if (integer)
          cr_assert_eq(pi[r], ri[r], "%s row %zu", fz_dtype_name(ts[d]), r);
        else /* the same terms in the same order: the same double */
          cr_assert(memcmp(&pf[r], &rf[r], 8) == 0, "%s row %zu: %.17g %.17g", fz_dtype_name(ts[d]),
                    r, pf[r], rf[r]);
      }
      /* And from the dense call. */
      uint8_t *dense = malloc(n * w);
      cr_assert_eq(fz_frames_dense(f, c, len, dense, n * w, integer ? NULL : pf,
                                   integer ? pi : NULL, NULL, 0),
                   0);
      for (size_t r = 0; r < rows; r++)
        cr_assert(integer ? pi[r] == ri[r] : memcmp(&pf[r], &rf[r], 8) == 0);
      fz_frames_destroy(f);
      free(vals), free(idx), free(dense);
    }
    free(px), free(c);
  }
  /* A matrix naming a pixel outside the frame. */
  cols[0] = (uint32_t)n;
  fz_frames_csr bad = {rows, indptr, cols, wf, NULL};
  fz_frames_params prm = {.dtype = FZ_U16, .npixels = n, .codec = FZ_BSLZ4_LZ4, .csr = &bad};
  fz_frames *f = NULL;
  char why[256] = "";
  cr_assert_eq(fz_frames_create(&prm, &f, why, sizeof why), FZ_EINVAL);
  cr_assert(strstr(why, "names pixel"), "%s", why);
  free(indptr), free(cols), free(wf), free(wi), free(mask);
}

Test(frames, wrong_frame_size_and_hostile_chunks) {
  rng_state = 12;
  size_t n = 4100, len;
  uint8_t *px = pixels(FZ_U16, n), *c = encode(FZ_BSLZ4_LZ4, px, n, 2, 0, &len);
  fz_frames *f = make(FZ_U16, n + 8, FZ_BSLZ4_LZ4, NULL, NULL);
  uint16_t vals[8];
  uint32_t idx[8];
  fz_frames_out o = {.values = vals, .indices = idx, .cap = 8};
  char why[256] = "";
  cr_assert_eq(fz_frames_sparse(f, c, len, 0, 0, &o, why, sizeof why), FZ_ESIZE);
  cr_assert(strstr(why, "4100"), "%s", why);
  fz_frames_destroy(f);
  f = make(FZ_U16, n, FZ_BSLZ4_LZ4, NULL, NULL);
  uint16_t *big = malloc(n * 2);
  uint32_t *bidx = malloc(n * 4);
  fz_frames_out ob = {.values = big, .indices = bidx, .cap = n};
  for (size_t cut = 0; cut < len; cut += 1 + cut / 64) {
    uint8_t *h = malloc(cut ? cut : 1);
    memcpy(h, c, cut);
    cr_assert_lt(fz_frames_sparse(f, h, cut, 0, 0, &ob, NULL, 0), 0, "truncated to %zu", cut);
    free(h);
  }
  for (int trial = 0; trial < 500; trial++) {
    uint8_t *h = malloc(len);
    memcpy(h, c, len);
    h[rnd() % len] ^= (uint8_t)(1 + rnd() % 255);
    int64_t rc = fz_frames_sparse(f, h, len, 2, 0, &ob, NULL, 0);
    cr_assert(rc < 0 || (size_t)rc <= n);
    free(h);
  }
  fz_frames_destroy(f);
  free(px), free(c), free(big), free(bidx);
}

Test(frames, batch_on_threads_isolates_a_corrupt_frame) {
  rng_state = 13;
  size_t n = 3000, nf = 9;
  uint8_t *base = malloc(nf * 8000);
  uint64_t off[9], lens[9];
  uint8_t *px[9];
  size_t pos = 0;
  for (size_t i = 0; i < nf; i++) {
    size_t len;
    px[i] = pixels(FZ_U16, n);
    uint8_t *c = encode(FZ_BSLZ4_LZ4, px[i], n, 2, 0, &len);
    memcpy(base + pos, c, len);
    off[i] = pos, lens[i] = len;
    pos += len;
    free(c);
  }
  lens[4] -= 1; /* frame 4 is truncated */
  fz_frames *f = make(FZ_U16, n, FZ_BSLZ4_LZ4, NULL, NULL);
  for (unsigned threads = 1; threads <= 3; threads++) {
    uint16_t *vals = malloc(nf * n * 2);
    uint32_t *idx = malloc(nf * n * 4);
    size_t counts[9];
    int status[9];
    fz_frames_batch b = {.base = base,
                         .offsets = off,
                         .lengths = lens,
                         .nframes = nf,
                         .cut = 8,
                         .values = vals,
                         .indices = idx,
                         .cap = n,
                         .counts = counts,
                         .status = status};
    cr_assert_eq(fz_frames_sparse_batch(f, &b, threads, NULL, 0), 1);
    for (size_t i = 0; i < nf; i++) {
      if (i == 4) {
        cr_assert_eq(status[i], FZ_ETRUNC);
        continue;
      }
      cr_assert_eq(status[i], 0);
      size_t k = 0;
      for (size_t p = 0; p < n; p++)
        if (((uint16_t *)(void *)px[i])[p] > 8) {
          cr_assert_eq(idx[i * n + k], p);
          k++;
        }
      cr_assert_eq(counts[i], k);
    }
    free(vals), free(idx);
  }
  fz_frames_destroy(f);
  for (size_t i = 0; i < nf; i++)
    free(px[i]);
  free(base);
}
