/*
 * test_archive.c - hostile archives.  Every truncation and every single-byte
 * corruption of small archives must give an error; archives mutated with
 * their checksums recomputed (so only the structural checks stand between
 * the bytes and the decoder) must never crash or touch memory out of bounds.
 * This suite is built with AddressSanitizer and UndefinedBehaviorSanitizer.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "archive_fixup.h"
#include "check.h"
#include "gen.h"
#include "params_1d.h"

typedef struct sample {
  const char *name;
  fz_dtype t;
  size_t n;
  const char *pipe;
  enum gen_kind kind;
} sample;

static const sample samples[] = {
    {"f32 balanced", FZ_F32, 5000, "balanced", GEN_SMOOTH},
    {"f32 fast", FZ_F32, 4097, "fast", GEN_SPECIAL_MIX},
    {"f64 pwrel", FZ_F64, 3000, "quant(eb=0.01,mode=pwrel) | diff | bitshuffle | rze(levels=2)", GEN_SMOOTH},
    {"u16 lossless", FZ_U16, 9000, "lossless", GEN_ZEROS},
    {"f32 empty", FZ_F32, 0, "balanced", GEN_SMOOTH},
    {"f32 one", FZ_F32, 1, "fast", GEN_SMOOTH},
    {"f32 raw chunks", FZ_F32, 4500, "quant(eb=1e-7,mode=abs) | bitpack", GEN_NOISE},
    /* -0.0, a twelfth of this data, as the fill: runs in the side lists. */
    {"f64 fill", FZ_F64, 3000, "quant(eb=1e-3,mode=abs,fill=-0) | diff | bitshuffle | rze",
     GEN_SPECIAL_MIX},
};
#define NSAMPLES (sizeof samples / sizeof *samples)

static uint8_t *make(const sample *s, size_t *len, void **data) {
  size_t w = fz_dtype_size(s->t);
  uint8_t *x = malloc(s->n * w + 1);
  if (s->t == FZ_F32 || s->t == FZ_F64)
    gen_fill(s->kind, x, s->n, s->t == FZ_F32, 5);
  else
    for (size_t i = 0; i < s->n * w; i++)
      x[i] = (uint8_t)(i / 64);
  fz_params p;
  fzt_params_1d(&p, s->t, s->n, s->pipe);
  p.eb = strstr(s->pipe, "eb=") ? 0 : 1e-3; /* one bound, job's or chain's */
  fz_plan *pl;
  char why[256];
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), 0, "%s: %s", s->name, why);
  size_t cap = fz_plan_compress_bound(pl);
  uint8_t *a = malloc(cap);
  cr_assert_eq(fz_plan_compress(pl, x, s->n * w, a, cap, len), 0);
  fz_plan_destroy(pl);
  *data = x;
  return a;
}

static int decode(const uint8_t *a, size_t len, size_t raw) {
  /* Exactly sized heap buffers, so ASan sees any overrun. */
  uint8_t *copy = malloc(len ? len : 1);
  memcpy(copy, a, len);
  uint8_t *out = malloc(raw ? raw : 1);
  size_t olen;
  int rc = fz_decompress(copy, len, out, raw, &olen, 1);
  free(out);
  free(copy);
  return rc;
}

Test(archive, intact_samples_decode) {
  for (size_t s = 0; s < NSAMPLES; s++) {
    size_t len;
    void *x;
    uint8_t *a = make(&samples[s], &len, &x);
    size_t raw = samples[s].n * fz_dtype_size(samples[s].t);
    cr_assert_eq(decode(a, len, raw), 0, "%s", samples[s].name);
    free(a);
    free(x);
  }
}

Test(archive, every_truncation_fails, .timeout = 120) {
  for (size_t s = 0; s < NSAMPLES; s++) {
    size_t len;
    void *x;
    uint8_t *a = make(&samples[s], &len, &x);
    size_t raw = samples[s].n * fz_dtype_size(samples[s].t);
    for (size_t cut = 0; cut < len; cut++) {
      int rc = decode(a, cut, raw);
      cr_assert(rc < 0, "%s: truncated to %zu of %zu decoded", samples[s].name, cut, len);
      cr_assert(rc == FZ_ETRUNC || rc == FZ_ECORRUPT || rc == FZ_EFORMAT,
                "%s: truncation to %zu gave %s", samples[s].name, cut, fz_err_name(rc));
    }
    fz_archive_info info;
    cr_assert_eq(fz_archive_inspect(a, len - 1, &info), FZ_ETRUNC);
    free(a);
    free(x);
  }
}

Test(archive, every_single_byte_corruption_fails, .timeout = 300) {
  static const uint8_t flips[] = {0x01, 0x80, 0xff, 0x10};
  for (size_t s = 0; s < NSAMPLES; s++) {
    size_t len;
    void *x;
    uint8_t *a = make(&samples[s], &len, &x);
    size_t raw = samples[s].n * fz_dtype_size(samples[s].t);
    for (size_t i = 0; i < len; i++)
      for (size_t f = 0; f < sizeof flips; f++) {
        a[i] ^= flips[f];
        int rc = decode(a, len, raw);
        a[i] ^= flips[f];
        cr_assert(rc < 0, "%s: byte %zu ^ 0x%02x went unnoticed", samples[s].name, i, flips[f]);
      }
    /* Appended garbage is an error too. */
    uint8_t *longer = malloc(len + 1);
    memcpy(longer, a, len);
    longer[len] = 0;
    cr_assert_eq(decode(longer, len + 1, raw), FZ_ECORRUPT);
    free(longer);
    free(a);
    free(x);
  }
}

Test(archive, mutations_behind_valid_checksums_never_crash, .timeout = 600) {
  uint64_t seed = 12345;
  for (size_t s = 0; s < NSAMPLES; s++) {
    size_t len;
    void *x;
    uint8_t *a = make(&samples[s], &len, &x);
    size_t raw = samples[s].n * fz_dtype_size(samples[s].t);
    fze_header h;
    cr_assert_eq(fze_header_parse(a, len, &h), 0);
    uint8_t *m = malloc(len);
    unsigned ok = 0, failed = 0;
    for (int iter = 0; iter < 3000; iter++) {
      memcpy(m, a, len);
      int nmut = 1 + (int)(gen_rand(&seed) % 4);
      for (int j = 0; j < nmut; j++) {
        size_t at = gen_rand(&seed) % len;
        /* Aim half of the mutations at the payload, where the stage
         * decoders read. */
        if ((gen_rand(&seed) & 1) && len > h.header_len)
          at = h.header_len + gen_rand(&seed) % (len - h.header_len);
        m[at] = (uint8_t)gen_rand(&seed);
      }
      archive_fix_checksums(m, len, &h);
      int rc = decode(m, len, raw);
      if (rc == 0)
        ok++;
      else
        failed++;
      cr_assert(rc == 0 || rc == FZ_ECORRUPT || rc == FZ_ETRUNC || rc == FZ_EFORMAT ||
                    rc == FZ_EVERSION || rc == FZ_ENOSPC,
                "%s: unexpected %s", samples[s].name, fz_err_name(rc));
    }
    cr_assert_eq(ok + failed, 3000);
    free(m);
    free(a);
    free(x);
  }
}

Test(archive, not_an_archive) {
  uint8_t junk[64] = "this is not an archive at all";
  size_t olen;
  uint8_t out[16];
  cr_assert_eq(fz_decompress(junk, sizeof junk, out, sizeof out, &olen, 1), FZ_EFORMAT);
  cr_assert_eq(fz_decompress(junk, 0, out, sizeof out, &olen, 1), FZ_ETRUNC);
  cr_assert_eq(fz_decompress(NULL, 0, out, sizeof out, &olen, 1), FZ_EINVAL);
  size_t len;
  void *x;
  uint8_t *a = make(&samples[0], &len, &x);
  a[4] = 99; /* a future format version */
  cr_assert_eq(decode(a, len, samples[0].n * 4), FZ_EVERSION);
  free(a);
  free(x);
}

/* A fill value is a version-2 field: a version-1 archive that claims one is
 * corrupt, and the fill archive's header reads back with its fill. */
Test(archive, fill_needs_version_2) {
  const sample *fs = &samples[NSAMPLES - 1];
  size_t len;
  void *x;
  uint8_t *a = make(fs, &len, &x);
  size_t raw = fs->n * 8;
  fz_archive_info info;
  cr_assert_eq(fz_archive_inspect(a, len, &info), 0);
  cr_assert_str_eq(info.chain,
                   "quant(eb=0.001,mode=abs,fill=-0) | diff(map=zigzag) | bitshuffle | rze(levels=4)");
  fze_header h;
  cr_assert_eq(fze_header_parse(a, len, &h), 0);
  cr_assert(h.chain.st[0].has_fill && h.chain.st[0].fill == 0 && signbit(h.chain.st[0].fill));
  /* Decoded, every -0.0 is back bit for bit (the runs), and the rest too. */
  double *y = malloc(raw);
  size_t ylen;
  cr_assert_eq(fz_decompress(a, len, y, raw, &ylen, 1), 0);
  check_bound(x, y, fs->n, 0, FZ_EB_ABS, 1e-3, "f64 fill");
  free(y);
  cr_assert_eq(a[4], 2);
  a[4] = 1;
  archive_fix_checksums(a, len, &h);
  cr_assert_eq(decode(a, len, raw), FZ_ECORRUPT);
  free(a);
  free(x);
  /* Without a fill the stage is as in version 1, flag clear. */
  a = make(&samples[0], &len, &x);
  cr_assert_eq(a[4], 1);
  free(a);
  free(x);
}
