/*
 * test_stream.c - compression and decompression one window of chunks at a
 * time (stream.c).  The archive an encoder makes must equal
 * fz_plan_compress()'s byte for byte for every window size, dtype, mode and
 * chain; decoding it group by group must give fz_decompress()'s output; a
 * changed payload byte must be caught; the canonical text of a preset must
 * equal that of the chain it stands for.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fz.h"
#include "gen.h"

typedef struct sample {
  const char *name;
  fz_dtype t;
  size_t n;
  const char *pipe;
  fz_eb_mode mode;
  double eb;
  enum gen_kind kind;
  double fill; /* nonzero: the job's fill value, written into every fifth cell */
} sample;

static const sample samples[] = {
    {"f32 balanced rel", FZ_F32, 70001, "balanced", FZ_EB_REL, 1e-3, GEN_SMOOTH, 0},
    {"f32 fast abs", FZ_F32, 40961, "fast", FZ_EB_ABS, 1e-2, GEN_SPECIAL_MIX, 0},
    {"f32 rel noise", FZ_F32, 33000, "balanced", FZ_EB_REL, 1e-4, GEN_NOISE, 0},
    {"f32 rel spikes", FZ_F32, 50000, "balanced", FZ_EB_REL, 1e-2, GEN_SPIKES, 0},
    {"f32 rel constant", FZ_F32, 20000, "balanced", FZ_EB_REL, 1e-3, GEN_CONST, 0},
    {"f64 rel", FZ_F64, 30001, "balanced", FZ_EB_REL, 1e-5, GEN_SMOOTH, 0},
    {"f64 pwrel", FZ_F64, 30000, "quant(eb=0.01,mode=pwrel) | diff | bitshuffle | rze(levels=2)",
     FZ_EB_REL, 0, GEN_SMOOTH, 0},
    {"f64 special", FZ_F64, 9000, "balanced", FZ_EB_REL, 1e-3, GEN_SPECIAL_MIX, 0},
    {"u16 lossless", FZ_U16, 90001, "lossless", FZ_EB_REL, 0, GEN_ZEROS, 0},
    {"f32 one", FZ_F32, 1, "fast", FZ_EB_ABS, 1e-3, GEN_SMOOTH, 0},
    {"f32 rel fill", FZ_F32, 50000, "balanced", FZ_EB_REL, 1e-3, GEN_SMOOTH, -1e10},
    {"f64 rel fill", FZ_F64, 30001, "fast", FZ_EB_REL, 1e-4, GEN_SPECIAL_MIX, 9.96921e36},
    {"f32 ratio rel", FZ_F32, 200001, "ratio", FZ_EB_REL, 1e-3, GEN_SMOOTH, 0},
    {"f64 ratio special fill", FZ_F64, 70001, "ratio", FZ_EB_REL, 1e-4, GEN_SPECIAL_MIX, -1e10},
};
#define NSAMPLES (sizeof samples / sizeof *samples)

static void *make_input(const sample *s) {
  size_t w = fz_dtype_size(s->t);
  uint8_t *x = malloc(s->n * w + 1);
  cr_assert_not_null(x);
  if (s->t == FZ_F32 || s->t == FZ_F64) {
    gen_fill(s->kind, x, s->n, s->t == FZ_F32, 7);
    /* Fill cells far outside the data's range: left out of it, they keep
     * REL's bound from growing with them. */
    for (size_t i = 0; s->fill != 0 && i < s->n; i += 5) {
      if (s->t == FZ_F32)
        ((float *)x)[i] = (float)s->fill;
      else
        ((double *)x)[i] = s->fill;
    }
  } else {
    for (size_t i = 0; i < s->n * w; i++)
      x[i] = (uint8_t)(i % 7 == 0 ? i / 7 : 0);
  }
  return x;
}

static fz_plan *make_plan(const sample *s) {
  fz_params p;
  fz_params_init(&p);
  p.dtype = s->t;
  p.ndims = 1;
  p.dims[0] = s->n ? s->n : 1;
  p.pipeline = s->pipe;
  p.eb = s->eb;
  p.eb_mode = s->mode;
  p.has_fill = s->fill != 0;
  p.fill_value = s->fill;
  fz_plan *plan = NULL;
  char why[256] = "";
  cr_assert_eq(fz_plan_create(&p, &plan, why, sizeof why), 0, "%s: %s", s->name, why);
  return plan;
}

/* Compresses x window by window (scan pass in pieces of `scan_piece`
 * elements) into a whole archive. */
static uint8_t *stream_compress(fz_plan *plan, const sample *s, const void *x, size_t in_len,
                                size_t window_chunks, size_t scan_piece, uint64_t *arc_len) {
  fz_encoder *enc;
  cr_assert_eq(fz_encoder_create(plan, &enc), 0);
  size_t w = fz_dtype_size(s->t);
  if (fz_encoder_needs_scan(enc))
    for (size_t off = 0; off < in_len; off += scan_piece * w) {
      size_t len = in_len - off < scan_piece * w ? in_len - off : scan_piece * w;
      cr_assert_eq(fz_encoder_scan(enc, (const char *)x + off, len), 0);
    }
  size_t hl = fz_encoder_header_len(enc);
  uint8_t *arc = malloc(hl + in_len + 1);
  size_t window = window_chunks * fz_encoder_chunk_bytes(enc), pos = hl;
  uint8_t *win = malloc(window), *back = malloc(window);
  uint64_t chunk = 0;
  for (size_t off = 0; off < in_len; off += window) {
    size_t len = in_len - off < window ? in_len - off : window, got = 0;
    cr_assert_eq(fz_encoder_encode(enc, chunk, (const char *)x + off, len, win, window, &got), 0);
    /* The window decodes back to what the whole archive gives (checked by
     * the caller) and never grows. */
    cr_assert_leq(got, len);
    cr_assert_eq(fz_encoder_check(enc, chunk, win, got, back, window), 0);
    memcpy(arc + pos, win, got);
    pos += got;
    chunk += (len + fz_encoder_chunk_bytes(enc) - 1) / fz_encoder_chunk_bytes(enc);
  }
  cr_assert_eq(fz_encoder_finish(enc, arc, hl, arc_len), 0);
  cr_assert_eq(*arc_len, pos);
  free(win);
  free(back);
  fz_encoder_destroy(enc);
  return arc;
}

static void stream_decompress(const uint8_t *arc, uint64_t arc_len, size_t max_raw,
                              uint8_t *out, size_t raw_len) {
  size_t prefix = arc_len < FZ_ARCHIVE_PREFIX_MAX ? (size_t)arc_len : FZ_ARCHIVE_PREFIX_MAX;
  size_t hl;
  cr_assert_eq(fz_archive_header_len(arc, prefix, arc_len, &hl), 0);
  fz_decoder *dec;
  cr_assert_eq(fz_decoder_create(arc, hl, arc_len, &dec), 0);
  fz_archive_info info;
  cr_assert_eq(fz_decoder_info(dec, &info), 0);
  cr_assert_eq(info.raw_bytes, raw_len);
  cr_assert_eq(info.archive_bytes, arc_len);
  /* A group is one chunk at least: the archive's chunk size, the smallest
   * power of two whose chunks cover the data. */
  size_t chunk = 4096;
  while ((uint64_t)chunk * info.chunks < raw_len)
    chunk *= 2;
  uint64_t off;
  size_t stored, raw, put = 0;
  while (fz_decoder_next(dec, max_raw, &off, &stored, &raw) > 0) {
    cr_assert_leq(raw, max_raw < chunk ? chunk : max_raw);
    cr_assert_leq(put + raw, raw_len);
    cr_assert_eq(fz_decoder_decode(dec, arc + off, stored, out + put, raw), 0);
    put += raw;
  }
  cr_assert_eq(put, raw_len);
  cr_assert_eq(fz_decoder_finish(dec), 0);
  fz_decoder_destroy(dec);
}

Test(stream, byte_identical_to_whole_compression) {
  static const size_t windows[] = {1, 3, 64};
  static const size_t pieces[] = {1000, 4099, 1u << 20};
  for (size_t k = 0; k < NSAMPLES; k++) {
    const sample *s = &samples[k];
    size_t in_len = s->n * fz_dtype_size(s->t);
    void *x = make_input(s);
    fz_plan *plan = make_plan(s);
    size_t cap = fz_plan_compress_bound(plan), whole_len = 0;
    uint8_t *whole = malloc(cap);
    cr_assert_eq(fz_plan_compress(plan, x, in_len, whole, cap, &whole_len), 0);
    uint8_t *ref = malloc(in_len + 1), *got = malloc(in_len + 1);
    size_t ref_len;
    cr_assert_eq(fz_decompress(whole, whole_len, ref, in_len, &ref_len, 1), 0);
    for (size_t wi = 0; wi < 3; wi++) {
      uint64_t arc_len;
      uint8_t *arc = stream_compress(plan, s, x, in_len, windows[wi], pieces[wi], &arc_len);
      cr_assert_eq(arc_len, whole_len, "%s, window %zu: %llu bytes, whole %zu", s->name,
                   windows[wi], (unsigned long long)arc_len, whole_len);
      cr_assert(memcmp(arc, whole, whole_len) == 0, "%s, window %zu: archives differ",
                s->name, windows[wi]);
      memset(got, 0xa5, in_len);
      stream_decompress(arc, arc_len, windows[wi] * 16384, got, in_len);
      cr_assert(memcmp(got, ref, in_len) == 0, "%s: decoded windows differ", s->name);
      free(arc);
    }
    free(ref);
    free(got);
    free(whole);
    fz_plan_destroy(plan);
    free(x);
  }
}

Test(stream, changed_payload_byte_is_caught) {
  const sample *s = &samples[0];
  size_t in_len = s->n * 4;
  void *x = make_input(s);
  fz_plan *plan = make_plan(s);
  uint64_t arc_len;
  uint8_t *arc = stream_compress(plan, s, x, in_len, 8, 4096, &arc_len);
  uint8_t *out = malloc(in_len);
  size_t hl;
  cr_assert_eq(fz_archive_header_len(arc, FZ_ARCHIVE_PREFIX_MAX, arc_len, &hl), 0);
  for (uint64_t at = hl; at < arc_len; at += (arc_len - hl) / 7 + 1) {
    arc[at] ^= 0x10;
    fz_decoder *dec;
    cr_assert_eq(fz_decoder_create(arc, hl, arc_len, &dec), 0);
    uint64_t off;
    size_t stored, raw, put = 0;
    int rc = 0;
    while (rc == 0 && fz_decoder_next(dec, 1 << 20, &off, &stored, &raw) > 0) {
      rc = fz_decoder_decode(dec, arc + off, stored, out + put, raw);
      put += raw;
    }
    if (rc == 0)
      rc = fz_decoder_finish(dec);
    cr_assert_lt(rc, 0, "a flipped payload byte at %llu went unnoticed",
                 (unsigned long long)at);
    fz_decoder_destroy(dec);
    arc[at] ^= 0x10;
  }
  /* A header that does not match the archive's length is refused. */
  fz_decoder *dec = NULL;
  cr_assert_lt(fz_decoder_create(arc, hl, arc_len - 1, &dec), 0);
  cr_assert_lt(fz_decoder_create(arc, hl, arc_len + 1, &dec), 0);
  cr_assert_null(dec);
  free(out);
  free(arc);
  fz_plan_destroy(plan);
  free(x);
}

Test(stream, misuse_is_refused) {
  const sample *s = &samples[0];
  void *x = make_input(s);
  fz_plan *plan = make_plan(s);
  fz_encoder *enc;
  cr_assert_eq(fz_encoder_create(plan, &enc), 0);
  uint8_t hdr[FZ_ARCHIVE_PREFIX_MAX + 2 * 5000], out[3 * 16384];
  size_t got;
  uint64_t arc_len;
  /* Out of order, not whole chunks, too small an output, unfinished. */
  cr_assert_eq(fz_encoder_encode(enc, 1, x, 16384, out, sizeof out, &got), FZ_EINVAL);
  cr_assert_eq(fz_encoder_encode(enc, 0, x, 1000, out, sizeof out, &got), FZ_ESIZE);
  cr_assert_eq(fz_encoder_encode(enc, 0, x, 16384, out, 100, &got), FZ_ENOSPC);
  cr_assert_eq(fz_encoder_finish(enc, hdr, sizeof hdr, &arc_len), FZ_EINVAL);
  fz_encoder_destroy(enc);
  fz_plan_destroy(plan);
  /* A chain without a range to find needs no scan, and one is harmless. */
  plan = make_plan(&samples[8]);
  cr_assert_eq(fz_encoder_create(plan, &enc), 0);
  cr_assert(!fz_encoder_needs_scan(enc));
  cr_assert_eq(fz_encoder_scan(enc, x, 64), 0);
  cr_assert_eq(fz_encoder_eb_abs(enc), 0);
  fz_encoder_destroy(enc);
  fz_plan_destroy(plan);
  free(x);
}

Test(stream, canonical_pipeline_text) {
  size_t n;
  const fz_preset *pr = fz_presets(&n);
  for (size_t i = 0; i < n; i++) {
    char a[512], b[512];
    cr_assert_eq(fz_pipeline_canonical(pr[i].name, a, sizeof a, NULL, 0), 0);
    cr_assert_eq(fz_pipeline_canonical(pr[i].chain, b, sizeof b, NULL, 0), 0);
    cr_assert_str_eq(a, b, "preset %s", pr[i].name);
  }
  char a[512], b[512];
  cr_assert_eq(fz_pipeline_canonical(NULL, a, sizeof a, NULL, 0), 0);
  cr_assert_eq(fz_pipeline_canonical("quant|diff|bitshuffle|rze", b, sizeof b, NULL, 0), 0);
  cr_assert_str_neq(a, "");
  cr_assert_eq(fz_pipeline_canonical("balanced", a, 8, NULL, 0), FZ_ENOSPC);
  char why[128] = "";
  cr_assert_eq(fz_pipeline_canonical("quant | frobnicate", a, sizeof a, why, sizeof why),
               FZ_EPIPELINE);
  cr_assert_str_neq(why, "");
}

/* A REL bound beyond what the data's range allows is refused by the
 * streaming encoder as fz_plan_compress() refuses it, with its words. */
Test(stream, rel_bound_beyond_the_range_is_refused) {
  const size_t n = 10000;
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(1e9 * sin(0.01 * (double)i));
  const sample s = {"f32 huge rel", FZ_F32, n, "fast", FZ_EB_REL, 1e299, GEN_SMOOTH, 0};
  fz_plan *plan = make_plan(&s);
  size_t cap = fz_plan_compress_bound(plan), len = 0;
  void *whole = malloc(cap);
  cr_assert_eq(fz_plan_compress(plan, x, n * sizeof *x, whole, cap, &len), FZ_EBOUND);
  fz_encoder *enc;
  cr_assert_eq(fz_encoder_create(plan, &enc), 0);
  cr_assert_eq(fz_encoder_scan(enc, x, n * sizeof *x), 0);
  cr_assert_eq(fz_encoder_eb_abs(enc), 0);
  void *win = malloc(n * sizeof *x);
  size_t got = 0;
  cr_assert_eq(fz_encoder_encode(enc, 0, x, n * sizeof *x, win, n * sizeof *x, &got), FZ_EBOUND);
  cr_assert_str_eq(fz_encoder_error(enc), fz_plan_error(plan));
  fz_encoder_destroy(enc);
  fz_plan_destroy(plan);
  free(win);
  free(whole);
  free(x);
}
