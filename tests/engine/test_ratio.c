/*
 * test_ratio.c - the ratio preset and its stages (lorenzo, huffman): every
 * value within the bound with no slack and every NaN, Inf, -0.0 and
 * denormal bit-exact, over shapes of 1 to 4 dimensions with odd extents,
 * extents of 1 and partial chunks, f32 and f64, every mode; lossless
 * integer chains bit-exact for every word width; the chain rules and the
 * chunk sizes of format version 3; and hostile archives and streams that
 * must give clean errors (the ci-asan build checks that nothing reads or
 * writes out of bounds).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "archive.h"
#include "engine.h"
#include "check.h"
#include "fz.h"
#include "gen.h"
#include "interp_v3.h"
#include "interp_v5.h"
#include "interp_v6.h"

typedef struct shape {
  unsigned ndims;
  uint64_t dims[4];
} shape;

static const shape shapes[] = {
    {1, {1}},           {1, {4097}},          {2, {1, 9}},          {2, {37, 61}},
    {2, {300, 301}},    {3, {1, 1, 7}},       {3, {9, 1, 33}},      {3, {17, 23, 29}},
    {3, {5, 64, 130}},  {4, {2, 3, 17, 19}},  {4, {1, 7, 1, 40}},   {4, {3, 5, 31, 33}},
};
#define NSHAPES (sizeof shapes / sizeof *shapes)

static uint64_t count(const shape *s) {
  uint64_t n = 1;
  for (unsigned i = 0; i < s->ndims; i++)
    n *= s->dims[i];
  return n;
}

/* A field smooth along every axis (so every predictor has work to do),
 * with the kind's specials and noise mixed in. */
static void *make_field(const shape *s, int f32, enum gen_kind k, uint64_t seed) {
  size_t n = (size_t)count(s), w = f32 ? 4 : 8;
  uint8_t *x = malloc(n * w + 8);
  cr_assert_not_null(x);
  gen_fill(k, x, n, f32, seed);
  if (k == GEN_SMOOTH) {
    uint64_t X = s->dims[s->ndims - 1], Y = s->ndims > 1 ? s->dims[s->ndims - 2] : 1;
    for (size_t i = 0; i < n; i++) {
      double xx = (double)(i % X), yy = (double)((i / X) % Y), zz = (double)(i / X / Y);
      double v = sin(xx * 0.05) * cos(yy * 0.07) * 50 + zz * 0.3 + xx * 0.01;
      if (f32)
        ((float *)x)[i] = (float)v;
      else
        ((double *)x)[i] = v;
    }
  }
  return x;
}

static fz_plan *plan_for(const shape *s, fz_dtype t, const char *pipe, fz_eb_mode mode,
                         double eb, unsigned chunk) {
  fz_params p;
  fz_params_init(&p);
  p.dtype = t;
  p.ndims = s->ndims;
  memcpy(p.dims, s->dims, sizeof s->dims);
  p.pipeline = pipe;
  p.eb = eb;
  p.eb_mode = mode;
  p.chunk_bytes = chunk;
  fz_plan *pl = NULL;
  char why[256] = "";
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), 0, "%s: %s", pipe, why);
  return pl;
}

/* Compresses and decompresses x, returns the archive (for callers that
 * look into it) and checks the reconstruction against the bound. */
static uint8_t *roundtrip(const shape *s, fz_dtype t, const void *x, const char *pipe,
                          fz_eb_mode mode, double eb, unsigned chunk, size_t *arc_len,
                          const char *what) {
  fz_plan *pl = plan_for(s, t, pipe, mode, eb, chunk);
  size_t raw = fz_plan_input_bytes(pl), cap = fz_plan_compress_bound(pl);
  uint8_t *arc = malloc(cap), *y = malloc(raw + 8);
  cr_assert(arc && y);
  cr_assert_eq(fz_plan_compress(pl, x, raw, arc, cap, arc_len), 0, "%s: %s", what,
               fz_plan_error(pl));
  size_t got = 0;
  cr_assert_eq(fz_decompress(arc, *arc_len, y, raw, &got, 1), 0, "%s", what);
  cr_assert_eq(got, raw);
  if (t == FZ_F32 || t == FZ_F64)
    check_bound(x, y, raw / fz_dtype_size(t), t == FZ_F32, mode, eb, what);
  else
    cr_assert(memcmp(x, y, raw) == 0, "%s: not bit-exact", what);
  free(y);
  fz_plan_destroy(pl);
  return arc;
}

Test(ratio, bound_holds_on_every_shape_kind_and_mode) {
  static const enum gen_kind kinds[] = {GEN_SMOOTH, GEN_NOISE, GEN_CONST, GEN_SPIKES,
                                        GEN_SPECIAL_MIX, GEN_HUGE, GEN_TINY};
  static const fz_eb_mode modes[] = {FZ_EB_ABS, FZ_EB_REL, FZ_EB_PWREL};
  static const double ebs[] = {1e-2, 1e-4};
  for (size_t si = 0; si < NSHAPES; si++)
    for (int f32 = 0; f32 < 2; f32++)
      for (size_t ki = 0; ki < sizeof kinds / sizeof *kinds; ki++)
        for (size_t mi = 0; mi < 3; mi++) {
          const shape *s = &shapes[si];
          void *x = make_field(s, f32, kinds[ki], si * 31 + ki);
          double eb = ebs[(si + ki) % 2];
          /* Small chunks cut rows and planes: partial chunks and the
           * lower-dimensional predictors at chunk starts. */
          unsigned chunk = (si + mi) % 2 ? 4096 : 0;
          char what[160];
          snprintf(what, sizeof what, "%uD %llu.. %s %s %s eb %g chunk %u", s->ndims,
                   (unsigned long long)s->dims[0], f32 ? "f32" : "f64", gen_names[kinds[ki]],
                   fz_eb_mode_name(modes[mi]), eb, chunk);
          size_t len;
          free(roundtrip(s, f32 ? FZ_F32 : FZ_F64, x, "ratio", modes[mi], eb, chunk, &len,
                         what));
          free(x);
        }
}

/* The preset must actually predict across rows: on a field smooth in 2-D
 * whose rows each start with a jump, lorenzo in 2 dimensions beats 1. */
Test(ratio, two_dimensional_prediction_pays) {
  shape s = {2, {512, 257}};
  size_t n = 512 * 257;
  float *x = malloc(n * 4);
  /* Rough along rows, smooth down the columns: 1-D prediction along the
   * rows is poor, while the 2-D predictor cancels the rows' pattern. */
  for (size_t i = 0; i < n; i++) {
    size_t r = i / 257, c = i % 257;
    x[i] = (float)(100 * sin((double)c * 1.3) + (double)r * 0.5);
  }
  size_t l1, l2, lp;
  free(roundtrip(&s, FZ_F32, x, "quant | lorenzo(dims=1) | huffman | rze", FZ_EB_ABS, 1e-3,
                 0, &l1, "dims=1"));
  free(roundtrip(&s, FZ_F32, x, "quant | lorenzo(dims=2) | huffman | rze", FZ_EB_ABS, 1e-3,
                 0, &l2, "dims=2"));
  free(roundtrip(&s, FZ_F32, x, "ratio", FZ_EB_ABS, 1e-3, 0, &lp, "ratio"));
  cr_assert_lt(l2, l1 * 3 / 4, "2-D %zu bytes, 1-D %zu", l2, l1);
  cr_assert_lt(lp, l1 * 3 / 4, "the preset %zu bytes, 1-D %zu", lp, l1);
  free(x);
}

/* Where the field is smooth and the bound coarse, interpolating from the
 * rebuilt values beats Lorenzo on the quantized words by far, and the
 * preset picks it. */
Test(ratio, interpolation_pays_at_coarse_bounds) {
  shape s = {2, {600, 700}};
  size_t n = 600 * 700;
  float *x = malloc(n * 4);
  for (size_t i = 0; i < n; i++) {
    double r = (double)(i / 700), c = (double)(i % 700);
    x[i] = (float)(1000 * sin(r * 0.013) * cos(c * 0.011) + r * 0.2);
  }
  size_t ll, li, lp;
  free(roundtrip(&s, FZ_F32, x, "quant | lorenzo | huffman | rze", FZ_EB_REL, 1e-2, 0, &ll,
                 "lorenzo"));
  free(roundtrip(&s, FZ_F32, x, "quant | interp | huffman | rze", FZ_EB_REL, 1e-2, 0, &li,
                 "interp"));
  free(roundtrip(&s, FZ_F32, x, "ratio", FZ_EB_REL, 1e-2, 0, &lp, "ratio"));
  cr_assert_lt(li * 3 / 2, ll, "interp %zu bytes, lorenzo %zu", li, ll);
  cr_assert_eq(lp, li);
  free(x);
}

/* Mostly zero codes cost well under a bit a value. */
Test(ratio, below_one_bit_per_value) {
  shape s = {3, {40, 50, 60}};
  void *x = make_field(&s, 1, GEN_CONST, 1);
  size_t len;
  free(roundtrip(&s, FZ_F32, x, "ratio", FZ_EB_ABS, 1e-2, 0, &len, "constant"));
  cr_assert_lt(len * 8, count(&s) / 4, "%zu bytes for %llu values", len,
               (unsigned long long)count(&s));
  free(x);
}

/* Chunks of 65536 values and more keep u32 indices in their side lists. */
Test(ratio, large_chunks_with_outliers) {
  shape s = {2, {300, 700}};
  for (int f32 = 0; f32 < 2; f32++) {
    void *x = make_field(&s, f32, GEN_SPECIAL_MIX, 5);
    size_t len;
    free(roundtrip(&s, f32 ? FZ_F32 : FZ_F64, x, "ratio", FZ_EB_REL, 1e-3, 1048576, &len,
                   "1 MiB chunks"));
    free(x);
  }
}

/* Without quant the stages are lossless for any word width. */
Test(ratio, lossless_integer_chains) {
  static const fz_dtype types[] = {FZ_U8, FZ_I8, FZ_U16, FZ_I16, FZ_U32, FZ_I32, FZ_U64,
                                   FZ_I64, FZ_F32, FZ_F64};
  shape s = {3, {7, 33, 65}};
  size_t n = (size_t)count(&s);
  uint64_t seed = 3;
  for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
    for (int kind = 0; kind < 3; kind++) {
      size_t w = fz_dtype_size(types[ti]);
      uint8_t *x = malloc(n * w);
      for (size_t i = 0; i < n; i++) {
        uint64_t v = kind == 0 ? gen_rand(&seed)               /* escapes */
                     : kind == 1 ? (uint64_t)(i % 65) * 3 + i / 65 /* smooth */
                                 : (i % 1000 == 0 ? 5 : 0);        /* zero runs */
        memcpy(x + i * w, &v, w);
      }
      size_t len;
      char what[64];
      snprintf(what, sizeof what, "%s kind %d", fz_dtype_name(types[ti]), kind);
      free(roundtrip(&s, types[ti], x, "lorenzo | huffman | rze", FZ_EB_REL, 0, 4096, &len,
                     what));
      free(roundtrip(&s, types[ti], x, "lorenzo(dims=2) | huffman", FZ_EB_REL, 0, 0, &len,
                     what));
      free(x);
    }
}

Test(ratio, chain_rules_and_chunk_sizes) {
  shape s2 = {2, {100, 100}};
  fz_params p;
  fz_params_init(&p);
  p.ndims = 2;
  p.dims[0] = p.dims[1] = 100;
  p.eb = 1e-3;
  fz_plan *pl = NULL;
  char why[256];
  p.pipeline = "quant | lorenzo(dims=3) | huffman | rze";
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_EPIPELINE);
  cr_assert(strstr(why, "dims=3"), "%s", why);
  p.pipeline = "quant | huffman | diff";
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_EPIPELINE);
  p.pipeline = "quant | lorenzo | lorenzo | huffman";
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_EPIPELINE);
  p.pipeline = "quant | lorenzo(dims=4) | huffman";
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_EPIPELINE);
  p.pipeline = "quant | lorenzo";
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_EPIPELINE); /* no coder */
  p.pipeline = "balanced";
  p.chunk_bytes = 65536;
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_EINVAL);
  p.pipeline = "ratio";
  p.chunk_bytes = 2097152;
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_EINVAL);
  p.chunk_bytes = 0;
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq(fz_plan_chain(pl),
                   "quant(eb=0.001,mode=rel) | interp(dims=2) | huffman | rze(levels=4)");
  fz_plan_destroy(pl);
  /* interp bins what quant bins: right after it, nowhere else. */
  p.pipeline = "quant | lorenzo | interp | huffman";
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_EPIPELINE);
  cr_assert(strstr(why, "right after quant"), "%s", why);
  p.pipeline = "interp | huffman";
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_EPIPELINE);

  /* Version 7 for interp, 3 for the other ratio stages, version 1 as
   * before for the rest. */
  void *x = make_field(&s2, 1, GEN_SMOOTH, 2);
  size_t len;
  uint8_t *a = roundtrip(&s2, FZ_F32, x, "ratio", FZ_EB_REL, 1e-3, 0, &len, "v7");
  cr_assert_eq(a[4], 7);
  cr_assert_eq(a[7], 18); /* 256 KiB chunks */
  fz_archive_info info;
  cr_assert_eq(fz_archive_inspect(a, len, &info), 0);
  cr_assert_str_eq(info.chain,
                   "quant(eb=0.001,mode=rel) | interp(dims=2) | huffman | rze(levels=4)");
  free(a);
  a = roundtrip(&s2, FZ_F32, x, "quant | lorenzo | huffman | rze", FZ_EB_REL, 1e-3, 0, &len,
                "v3");
  cr_assert_eq(a[4], 3);
  free(a);
  a = roundtrip(&s2, FZ_F32, x, "balanced", FZ_EB_REL, 1e-3, 0, &len, "v1");
  cr_assert_eq(a[4], 1);
  cr_assert_eq(a[7], 14);
  free(a);
  free(x);
}

/* ---- hostile archives ---- */

/* Writes the header CRC of an edited header as long as the original. */
static void reseal_header(uint8_t *a, size_t header_len) {
  size_t crc_at = header_len - 4;
  uint32_t c = fze_crc32c(0, a, crc_at);
  for (int i = 0; i < 4; i++)
    a[crc_at + i] = (uint8_t)(c >> (8 * i));
}

static int decode(const uint8_t *a, size_t len) {
  static uint8_t y[1u << 20];
  size_t got;
  return fz_decompress(a, len, y, sizeof y, &got, 1);
}

/* The header's stage bytes: its lorenzo dims and stage ids. */
Test(ratio, hostile_stage_parameters) {
  shape s = {2, {64, 100}};
  void *x = make_field(&s, 1, GEN_SMOOTH, 4);
  size_t len;
  uint8_t *a = roundtrip(&s, FZ_F32, x, "ratio", FZ_EB_ABS, 1e-3, 4096, &len, "base");
  uint8_t *b = malloc(len);
  fze_header h;
  cr_assert_eq(fze_header_parse(a, len, &h), 0);
  size_t hl = h.header_len;
  /* magic..chunk (8), dims (16), stage count, quant id + 25 bytes, then
   * lorenzo id and its dims byte. */
  size_t lz = 8 + 16 + 1 + 26;
  cr_assert_eq(a[lz], FZE_STAGE_INTERP);
  static const uint8_t bad_dims[] = {0, 3, 4, 255};
  for (size_t i = 0; i < sizeof bad_dims; i++) {
    memcpy(b, a, len);
    b[lz + 1] = bad_dims[i];
    reseal_header(b, hl);
    cr_assert_eq(decode(b, len), FZ_ECORRUPT, "dims byte %u", bad_dims[i]);
  }
  /* The ratio stages need version 3; so do chunks above 32 KiB. */
  memcpy(b, a, len);
  b[4] = 2;
  reseal_header(b, hl);
  cr_assert_eq(decode(b, len), FZ_ECORRUPT);
  memcpy(b, a, len);
  b[4] = 8; /* after the last version (7, huffman's runs by class) */
  cr_assert_eq(decode(b, len), FZ_EVERSION);
  /* An unknown stage id in place of huffman. */
  memcpy(b, a, len);
  b[lz + 2] = 8;
  reseal_header(b, hl);
  cr_assert_eq(decode(b, len), FZ_ECORRUPT);
  /* Every truncation is refused. */
  for (size_t cut = 0; cut < len; cut += 1 + cut / 8)
    cr_assert_lt(decode(a, cut), 0, "cut at %zu", cut);
  free(b);
  free(a);
  free(x);
}

/* Chunks mutated byte by byte: a clean error (or, where a changed byte
 * still makes a valid chunk, the payload checksum's), for the
 * interpolation with outliers, with fill runs (f64) and for pwrel, whose
 * chunks must name lorenzo. */
static void mutate_all(const uint8_t *a, size_t len, const char *what) {
  fze_header h;
  cr_assert_eq(fze_header_parse(a, len, &h), 0);
  uint8_t *b = malloc(len);
  for (size_t at = h.header_len; at < len; at++)
    for (int flip = 0; flip < 3; flip++) {
      memcpy(b, a, len);
      b[at] = flip == 0 ? (uint8_t)~b[at] : flip == 1 ? 0 : (uint8_t)(b[at] ^ 1);
      if (b[at] == a[at])
        continue;
      int rc = decode(b, len);
      cr_assert(rc == FZ_ECORRUPT, "%s: byte %zu flip %d: %s", what, at, flip,
                fz_err_name(rc));
    }
  free(b);
}

Test(ratio, hostile_chunks) {
  shape s = {3, {6, 20, 30}};
  size_t len;
  void *x = make_field(&s, 1, GEN_SPECIAL_MIX, 9);
  uint8_t *a = roundtrip(&s, FZ_F32, x, "ratio", FZ_EB_REL, 1e-3, 4096, &len, "f32 rel");
  mutate_all(a, len, "f32 rel");
  free(a);
  a = roundtrip(&s, FZ_F32, x, "ratio", FZ_EB_PWREL, 1e-2, 4096, &len, "f32 pwrel");
  mutate_all(a, len, "f32 pwrel");
  free(a);
  free(x);
  double *y = make_field(&s, 0, GEN_SMOOTH, 3);
  for (size_t i = 0; i < count(&s); i += 7)
    y[i] = -1e10;
  y[5] = NAN;
  a = roundtrip(&s, FZ_F64, y, "quant(fill=-1e10) | interp | huffman | rze", FZ_EB_ABS, 1e-3,
                4096, &len, "f64 fill");
  mutate_all(a, len, "f64 fill");
  free(a);
  free(y);
}

/* The huffman stage's own checks, on streams built by hand, in both
 * forms. */
static void hostile_huffman(unsigned lv) {
  size_t n = 1000;
  uint32_t words[1000], back[1000];
  for (size_t i = 0; i < n; i++)
    words[i] = (uint32_t)(i % 17 == 0 ? 100000 + i : i % 40 < 25 ? 0 : i % 3);
  words[n - 1] = 123456; /* an escape last: a stream read short leaves bits */
  static uint8_t tmp[4 * 4096 + FZE_HUFFMAN_TMP], out[8000], bad[8000];
  size_t len = fze_huffman_encode(lv, 4, words, n, out, sizeof out, tmp);
  cr_assert_neq(len, SIZE_MAX);
  cr_assert_eq(fze_huffman_decode(lv, 4, out, len, back, n, tmp), 0);
  cr_assert(memcmp(words, back, sizeof words) == 0);
  /* Too little room: refused, not overrun. */
  cr_assert_eq(fze_huffman_encode(lv, 4, words, n, out, 20, tmp), SIZE_MAX);
  unsigned e = (out[0] | out[1] << 8) & 0x7fffu;
  size_t lanes_at = 2 + (e + 16 + 1) / 2;
  /* Version 7's streams name their form: these runs (of 25 zeros) code
   * shorter by class, and the same bytes read by version 6 (lv 0), or
   * named BITS, are refused. */
  cr_assert_eq(out[1] >> 7, lv);
  if (lv) {
    cr_assert_eq(fze_huffman_decode(0, 4, out, len, back, n, tmp), FZ_ECORRUPT);
    memcpy(bad, out, len);
    bad[1] &= 0x7f;
    cr_assert_eq(fze_huffman_decode(lv, 4, bad, len, back, n, tmp), FZ_ECORRUPT);
  }
  /* E out of range, a length above 12, no code at all, over-subscribed. */
  memcpy(bad, out, len);
  bad[0] = 0, bad[1] = 0;
  cr_assert_eq(fze_huffman_decode(lv, 4, bad, len, back, n, tmp), FZ_ECORRUPT);
  memcpy(bad, out, len);
  bad[0] = 0xff, bad[1] = 0x0f;
  cr_assert_eq(fze_huffman_decode(lv, 4, bad, len, back, n, tmp), FZ_ECORRUPT);
  memcpy(bad, out, len);
  bad[2] = 0xdd;
  cr_assert_eq(fze_huffman_decode(lv, 4, bad, len, back, n, tmp), FZ_ECORRUPT);
  memcpy(bad, out, len);
  memset(bad + 2, 0, lanes_at - 2);
  cr_assert_eq(fze_huffman_decode(lv, 4, bad, len, back, n, tmp), FZ_ECORRUPT);
  memcpy(bad, out, len);
  memset(bad + 2, 0x11, lanes_at - 2);
  cr_assert_eq(fze_huffman_decode(lv, 4, bad, len, back, n, tmp), FZ_ECORRUPT);
  /* Sub-stream lengths that do not add up, or point past the end. */
  memcpy(bad, out, len);
  bad[lanes_at] ^= 1;
  cr_assert_eq(fze_huffman_decode(lv, 4, bad, len, back, n, tmp), FZ_ECORRUPT);
  memcpy(bad, out, len);
  bad[lanes_at + 3] = 0xff;
  cr_assert_eq(fze_huffman_decode(lv, 4, bad, len, back, n, tmp), FZ_ECORRUPT);
  /* Every truncation, and the stream read for more words than it holds. */
  for (size_t cut = 0; cut < len; cut++)
    cr_assert_eq(fze_huffman_decode(lv, 4, out, cut, back, n, tmp), FZ_ECORRUPT, "cut %zu", cut);
  cr_assert_eq(fze_huffman_decode(lv, 4, out, len, back, n - 1, tmp), FZ_ECORRUPT);
}

Test(ratio, hostile_huffman_streams) {
  hostile_huffman(0);
  hostile_huffman(1);
}

/* The encoder prices lorenzo's dims from the words alone, making only the
 * sampled residuals (fze_lorenzo_price); it must say what pricing the full
 * encoding says, on every shape, word width, dims and chunk placement
 * (chunks that start mid-row and mid-plane, and one-element chunks), or
 * the choices (and the archives) would drift from the documented rule. */
Test(ratio, lorenzo_price_matches_its_encoding) {
  for (size_t si = 0; si < NSHAPES; si++) {
    const shape *s = &shapes[si];
    size_t N = (size_t)count(s);
    fze_chain c;
    char why[256] = "";
    cr_assert_eq(fze_chain_parse("lorenzo", &c, why, sizeof why), 0, "%s", why);
    cr_assert_eq(fze_chain_resolve_shape(&c, s->ndims, s->dims, why, sizeof why), 0, "%s", why);
    uint8_t *words = malloc(N * 8 + 8), *res = malloc(N * 8 + 8);
    cr_assert(words && res);
    uint64_t r = 0x9e3779b97f4a7c15ull ^ si;
    for (size_t i = 0; i < N; i++) {
      /* Mostly a slow ramp (small residuals), some large words. */
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      uint64_t v = (r >> 61) == 0 ? r : (uint64_t)(i / 3) + (r >> 62);
      memcpy(words + 8 * i, &v, 8);
    }
    size_t places[][2] = {{0, N}, {N / 3, N - N / 3}, {N / 2, (N + 3) / 4}, {N - 1, 1}};
    for (unsigned w = 1; w <= 8; w *= 2)
      for (unsigned k = 1; k <= c.st[0].pdims; k++)
        for (size_t pl = 0; pl < 4; pl++) {
          size_t first = places[pl][0], n = places[pl][1];
          if (n == 0 || first + n > N)
            continue;
          const uint8_t *in = words + first * w;
          fze_lorenzo_encode(&c.st[0], k, w, in, res, n, first);
          uint64_t want = fze_lorenzo_cost(w, res, n);
          uint64_t got = fze_lorenzo_price(&c.st[0], k, w, in, n, first);
          cr_assert_eq(got, want, "shape %zu, w %u, k %u, first %zu, n %zu: %llu, not %llu", si,
                       w, k, first, n, (unsigned long long)got, (unsigned long long)want);
        }
    free(words);
    free(res);
  }
}

/* The choice quant | interp makes per chunk, both predictors run in full
 * and priced as docs/format.md's encoder note says: 0 for the
 * interpolation (on kd dims, the ones the chunk names), else lorenzo's
 * cheapest k.  Lorenzo's k is the cheapest
 * by the sampled price of its full encoding; where that price is below a
 * bit a word the two are compared by the huffman stage's bits, else by
 * the sampled prices. */
static unsigned full_choice(const fze_chain *c, fz_dtype t, const uint8_t *x, size_t n,
                            uint64_t first, unsigned kd, unsigned *differs) {
  unsigned w = (unsigned)fz_dtype_size(t);
  const fze_stage *q = &c->st[0], *ip = &c->st[1];
  fze_stage iq = fze_interp_on(ip, kd); /* the interpolation along kd axes */
  uint8_t *codes = malloc(n * w + 8), *side = malloc(2 * n * w + 256);
  uint8_t *res = malloc(n * w + 8), *tmp = malloc(FZE_HUFFMAN_TMP + 4 * n + 64);
  void *work = malloc(fze_quant_work_bytes(n));
  cr_assert(codes && side && res && tmp && work);
  size_t side_i = fze_interp_encode(q, &iq, t, x, n, first, codes, side, work);
  uint64_t cost_i = fze_lorenzo_cost(w, codes, n) + ((8 * (uint64_t)side_i) << 16);
  uint64_t price_i = fze_huffman_price(fze_huffman_lv(c), w, codes, n, tmp) + 8 * (uint64_t)side_i;
  size_t side_l = fze_quant_encode(q, t, x, n, codes, side, work);
  uint64_t best = UINT64_MAX;
  unsigned bk = 1;
  for (unsigned k = 1; k <= ip->pdims; k++) {
    fze_lorenzo_encode(ip, k, w, codes, res, n, first);
    uint64_t cost = fze_lorenzo_cost(w, res, n);
    if (cost < best) {
      best = cost;
      bk = k;
    }
  }
  bool cheap = FZE_PRICE_CHEAP(best, n);
  fze_lorenzo_encode(ip, bk, w, codes, res, n, first);
  uint64_t price_l = fze_huffman_price(fze_huffman_lv(c), w, res, n, tmp) + 8 * (uint64_t)side_l;
  best += (8 * (uint64_t)side_l) << 16;
  free(codes);
  free(side);
  free(res);
  free(tmp);
  free(work);
  unsigned by_bits = price_l < price_i ? bk : 0, by_samples = best < cost_i ? bk : 0;
  if (!cheap)
    return by_samples;
  /* Where the two prices part, the chunk shows what the bits change. */
  *differs += by_bits != by_samples;
  return by_bits;
}

/* The encoder skips the interpolation where lorenzo beats a guess at its
 * price by a margin; on fields where either predictor wins (smooth ones at
 * coarse bounds, noisy ones, 2-D to 4-D, chunks cut mid-plane) its choice
 * is the one running both in full makes. */
Test(ratio, shortcut_keeps_the_full_choice) {
  static const shape big[] = {{2, {300, 301}}, {3, {17, 23, 29}}, {3, {5, 64, 130}},
                              {4, {3, 5, 31, 33}}};
  static const enum gen_kind kinds[] = {GEN_SMOOTH, GEN_NOISE, GEN_RAMP};
  static const double ebs[] = {1e-1, 1e-2, 1e-4};
  unsigned seen[2] = {0, 0}, differs = 0, fewer = 0;
  for (size_t si = 0; si < sizeof big / sizeof *big; si++)
    for (size_t ki = 0; ki < 3; ki++)
      for (size_t ei = 0; ei < 3; ei++)
        for (int f32 = 0; f32 <= 1; f32++) {
          const shape *s = &big[si];
          size_t N = (size_t)count(s);
          fz_dtype t = f32 ? FZ_F32 : FZ_F64;
          unsigned w = f32 ? 4 : 8;
          uint8_t *x = make_field(s, f32, kinds[ki], 7 + si);
          fze_chain c;
          char why[256] = "", text[128];
          snprintf(text, sizeof text, "quant(eb=%g,mode=rel) | interp | huffman | rze", ebs[ei]);
          cr_assert_eq(fze_chain_parse(text, &c, why, sizeof why), 0, "%s", why);
          cr_assert_eq(fze_chain_resolve_shape(&c, s->ndims, s->dims, why, sizeof why), 0,
                       "%s", why);
          cr_assert_eq(fze_quant_resolve(&c.st[0], t, x, N, why, sizeof why), 0, "%s", why);
          fze_chain_set_version(&c, FZE_FORMAT_VERSION_RUNS);
          fze_scratch sc;
          cr_assert_eq(fze_scratch_init(&sc, N * w), 0);
          uint8_t *out = malloc(N * w + 8);
          cr_assert_not_null(out);
          size_t places[][2] = {{0, N}, {N / 3, N / 2}};
          for (size_t pl = 0; pl < 2; pl++) {
            size_t first = places[pl][0], n = places[pl][1];
            const uint8_t *in = x + first * w;
            size_t len = fze_chunk_encode(&c, t, in, n, first, out, &sc);
            if (len == n * w)
              continue; /* stored raw: no choice byte */
            long sl = fze_quant_side_len(&c.st[0], out, len, n, w);
            cr_assert(sl >= 0 && (size_t)sl < len);
            /* The interpolation's dims (version 6) as the guesses pick
             * them (a sample of every 17th value: nothing to run in full). */
            unsigned b = out[sl], pd = c.st[1].pdims;
            uint64_t g;
            uint8_t *gw = malloc(n * w / 5 + 64);
            cr_assert_not_null(gw);
            unsigned kd = fze_interp_dims(&c.st[0], &c.st[1], t, in, n, first, gw, &g);
            free(gw);
            unsigned want = full_choice(&c, t, in, n, first, kd, &differs);
            unsigned wb = want ? want : kd < pd ? (FZE_PK_DIMS | kd) : 0;
            cr_assert_eq(b, wb, "%s, shape %zu, %s, %s, chunk %zu: predictor %#x, not %#x", text,
                         si, gen_names[kinds[ki]], f32 ? "f32" : "f64", pl, b, wb);
            seen[want != 0]++;
            if (b & FZE_PK_DIMS) {
              /* Version 6's byte: the chunk decodes within the bound;
               * version 5 refuses it, as does a byte naming no fewer
               * dims. */
              uint8_t *y = malloc(n * w), *bad = malloc(len);
              cr_assert(y && bad);
              cr_assert_eq(fze_chunk_decode(&c, t, out, len, n, first, y, &sc), 0);
              for (size_t i = 0; i < n; i++) {
                double u = f32 ? ((const float *)y)[i] : ((const double *)y)[i];
                double v = f32 ? ((const float *)in)[i] : ((const double *)in)[i];
                cr_assert(fabs(u - v) <= c.st[0].eb_abs, "value %zu: %g, not %g", i, u, v);
              }
              fze_chain c5 = c;
              fze_chain_set_version(&c5, FZE_FORMAT_VERSION_LEVELS);
              cr_assert_eq(fze_chunk_decode(&c5, t, out, len, n, first, y, &sc), FZ_ECORRUPT);
              const unsigned wrong[] = {FZE_PK_DIMS, FZE_PK_DIMS | pd, FZE_PK_DIMS | 3u,
                                        FZE_PK_DIMS | 0x7fu};
              for (size_t j = 0; j < 4; j++) {
                if ((wrong[j] & ~FZE_PK_DIMS) < pd && (wrong[j] & ~FZE_PK_DIMS) >= 1)
                  continue;
                memcpy(bad, out, len);
                bad[sl] = (uint8_t)wrong[j];
                cr_assert_eq(fze_chunk_decode(&c, t, bad, len, n, first, y, &sc), FZ_ECORRUPT,
                             "predictor byte %#x", wrong[j]);
              }
              free(y);
              free(bad);
            }
            fewer += kd < pd;
          }
          free(out);
          fze_scratch_free(&sc);
          free(x);
        }
  /* Both predictors were chosen somewhere, so both paths were checked. */
  cr_assert(seen[0] > 0 && seen[1] > 0, "interp %u, lorenzo %u", seen[0], seen[1]);
  /* And some chunk was decided by the huffman stage's bits against what
   * the sampled prices say, and some interpolated on fewer dims. */
  cr_assert(differs > 0);
  cr_assert(fewer > 0);
}

/* ---- format version 3 ---- */

/* An archive of version 3 (tests/common/interp_v3.h) decodes as it was
 * written: every value within the bound, the NaN and the Inf as they
 * were.  The same bytes claiming version 5 do not: the walk of version 5
 * reads its words in another order, so the archive's interpolated chunks
 * are what the first decode read. */
static void v3_case(const uint8_t *arc, size_t len, fz_dtype t, unsigned version) {
  const size_t n = (size_t)INTERP_V3_Z * INTERP_V3_Y * INTERP_V3_X;
  cr_assert_eq(arc[4], version);
  fz_archive_info info;
  cr_assert_eq(fz_archive_inspect(arc, len, &info), 0);
  cr_assert(strstr(info.chain, "interp(dims=3)"), "%s", info.chain);
  size_t w = fz_dtype_size(t), got;
  uint8_t *y = malloc(n * w), *b = malloc(len);
  cr_assert(y && b);
  /* The bound over the values' range: the smooth ones and the spike. */
  double lo = 5000.0, hi = 5000.0;
  for (size_t z = 0; z < INTERP_V3_Z; z++)
    for (size_t r = 0; r < INTERP_V3_Y; r++)
      for (size_t x = 0; x < INTERP_V3_X; x++) {
        double v = interp_v3_value(z, r, x);
        v = t == FZ_F32 ? (double)(float)v : v;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
      }
  double eb = INTERP_V3_EB * (hi - lo);
  cr_assert(info.eb_abs > 0 && info.eb_abs <= eb);
  /* Version 5's bytes are version 6's, where no chunk names fewer dims:
   * only version 3's are checked against another version's walk. */
  for (int as5 = 0; as5 < (version == 3 ? 2 : 1); as5++) {
    memcpy(b, arc, len);
    if (as5) {
      fze_header h;
      cr_assert_eq(fze_header_parse(b, len, &h), 0);
      b[4] = 5;
      reseal_header(b, h.header_len);
    }
    int rc = fz_decompress(b, len, y, n * w, &got, 1);
    if (!as5)
      cr_assert_eq(rc, 0);
    size_t off = 0; /* values out of the bound */
    for (size_t i = 0; rc == 0 && i < n; i++) {
      size_t z = i / (INTERP_V3_Y * INTERP_V3_X), r = i / INTERP_V3_X % INTERP_V3_Y;
      double v = interp_v3_value(z, r, i % INTERP_V3_X);
      double u = t == FZ_F32 ? (double)((const float *)y)[i] : ((const double *)y)[i];
      if (i == INTERP_V3_NAN)
        off += !isnan(u);
      else if (i == INTERP_V3_INF)
        off += !(isinf(u) && u > 0);
      else
        off += !(fabs(u - (i == INTERP_V3_SPIKE ? 5000.0 : t == FZ_F32 ? (double)(float)v : v)) <=
                 info.eb_abs);
    }
    if (!as5)
      cr_assert_eq(off, 0, "%zu values out of the bound", off);
    else
      cr_assert(rc < 0 || off > 0, "version 5's walk read version 3's words as they are");
  }
  free(b);
  free(y);
}

Test(ratio, version_3_interpolation_decodes) {
  v3_case(interp_v3_f32, sizeof interp_v3_f32, FZ_F32, 3);
  v3_case(interp_v3_f64, sizeof interp_v3_f64, FZ_F64, 3);
}

/* An archive of version 5 (tests/common/interp_v5.h) decodes as it was
 * written. */
Test(ratio, version_5_interpolation_decodes) {
  v3_case(interp_v5_f32, sizeof interp_v5_f32, FZ_F32, 5);
  v3_case(interp_v5_f64, sizeof interp_v5_f64, FZ_F64, 5);
}

/* An archive of version 6 (tests/common/interp_v6.h: chunks on two dims,
 * on three and by lorenzo) decodes as it was written. */
Test(ratio, version_6_interpolation_decodes) {
  v3_case(interp_v6_f32, sizeof interp_v6_f32, FZ_F32, 6);
  v3_case(interp_v6_f64, sizeof interp_v6_f64, FZ_F64, 6);
}
