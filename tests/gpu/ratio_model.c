/*
 * ratio_model.c - the GPU decoder of the ratio preset (ratio_dec.cuh), run
 * on the CPU: the very phases the kernel runs, each for every thread of a
 * block in turn, decode the CPU encoder's archives and must give the CPU
 * decoder's bytes, and every hostile archive the CPU decoder refuses must
 * be refused (and none that it takes).  It needs no GPU, so CI checks the
 * decoder's logic and its checks on every run (and the ci-asan build that
 * it reads and writes nothing out of bounds); test_gpu_ratio checks the
 * kernel itself on a GPU against the same archives.  The encoder
 * (ratio_enc.cuh) is run the same way: its chunks, their sizes and CRCs
 * must be the CPU encoder's, byte for byte.  The lossless-ratio preset's
 * chain (lorenzo | byteplanes), which the same kernels code, is checked
 * the same way both ways, on floats and integers of 4 and 8 bytes.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "archive.h"
#include "engine.h"
#include "fz.h"
#include "interp_v3.h"
#include "interp_v5.h"
#include "interp_v6.h"
#include "ratio_dec.cuh"
#include "ratio_enc.cuh"
#include "ratio_fields.h"
#include "ratio_reseal.h"
#include "ratio_stage.h"

static uint32_t crc_tab[256];

static void setup(void) { ratio_crc_table(crc_tab); }

/* lorenzo | byteplanes on 4- or 8-byte words (kernels/stages/ratio_chain.c). */
static int planes_chain(const fze_header *h) {
  const fze_chain *ch = &h->chain;
  size_t w = fz_dtype_size(h->dtype);
  return (w == 4 || w == 8) && ch->n == 2 && ch->st[0].id == FZE_STAGE_LORENZO &&
         ch->st[1].id == FZE_STAGE_BYTEPLANES;
}

/* The model of gpu_decode.c's ratio path: the header on the host, then
 * the kernel's phases per chunk, then the payload CRC.  out_off shifts the
 * output off the element alignment.  Returns 1 when the chain is not one
 * the kernel takes. */
static int model_decode(const uint8_t *a, size_t len, uint8_t *out, size_t out_off) {
  fze_header h;
  int rc = fze_header_parse(a, len, &h);
  if (rc < 0)
    return rc;
  const fze_chain *ch = &h.chain;
  const int planes = planes_chain(&h);
  if (!planes && !((h.dtype == FZ_F32 || h.dtype == FZ_F64) && ch->n == 4 &&
        ch->st[0].id == FZE_STAGE_QUANT && !ch->st[0].has_fill &&
        (ch->st[1].id == FZE_STAGE_INTERP || ch->st[1].id == FZE_STAGE_LORENZO) &&
        ch->st[2].id == FZE_STAGE_HUFFMAN &&
        ch->st[3].id == FZE_STAGE_RZE))
    return 1;
  uint64_t nc = h.nchunks;
  uint64_t *offs = malloc(8 * (nc + 1));
  uint32_t *sizes = malloc(4 * nc + 4), *crcs = malloc(4 * nc + 4), status = 0;
  uint64_t run = 0;
  for (uint64_t c = 0; c < nc; c++) {
    const uint8_t *p = h.sizes + 4 * c;
    sizes[c] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
               (uint32_t)p[3] << 24;
    offs[c] = run;
    run += sizes[c];
  }
  uint64_t stride = fzr_stride(h.chunk_bytes);
  /* Over 3 slots of scratch when out_off is 3, as a launch of 3 blocks
   * takes the chunks in turn (block c % 3 decodes chunk c), else a slot
   * per chunk. */
  uint64_t slots = out_off == 3 && nc > 3 ? 3 : nc ? nc : 1;
  uint8_t *scratch = malloc(stride * slots);
  fzr_state *S = malloc(sizeof *S);
  cr_assert(offs && sizes && crcs && scratch && S);
  const fze_stage *pr = &ch->st[planes ? 0 : 1]; /* the predictor */
  fzr_job J = {.pay = a + h.header_len, .pay_len = len - h.header_len, .offs = offs,
               .sizes = sizes, .raw_bytes = h.raw_bytes, .cb = h.chunk_bytes,
               .w = (uint32_t)fz_dtype_size(h.dtype), .levels = planes ? 0 : ch->st[3].levels,
               .pdims = pr->pdims, .lorenzo = pr->id == FZE_STAGE_LORENZO,
               .planes = (uint32_t)planes, .pwrel = !planes && ch->st[0].mode == FZ_EB_PWREL,
               .lv = planes ? 0u : pr->lv, .hform = planes ? 0u : ch->st[2].lv,
               .step = planes ? 0.0 : ch->st[0].step,
               .scratch = scratch, .stride = stride,
               .out = out + out_off, .out_aligned = out_off % fz_dtype_size(h.dtype) == 0,
               .status = &status, .crcs = crcs, .crc_tab = crc_tab, .nchunks = nc};
  memcpy(J.ext, pr->ext, sizeof J.ext);
  /* Shared memory and scratch start as garbage on the device. */
  memset(scratch, 0x5a, stride * slots);
  for (uint64_t c = 0; c < nc; c++) {
    memset(S, c & 1 ? 0x5a : 0xa5, sizeof *S);
    fzr_chunk(S, &J, c, c % slots);
  }
  uint8_t le[4];
  uint32_t pc = 0;
  for (uint64_t c = 0; c < nc; c++) {
    for (int k = 0; k < 4; k++)
      le[k] = (uint8_t)(crcs[c] >> (8 * k));
    pc = fze_crc32c(pc, le, 4);
  }
  rc = status || pc != h.payload_crc ? FZ_ECORRUPT : 0;
  free(S);
  free(scratch);
  free(crcs);
  free(sizes);
  free(offs);
  return rc;
}

/* The model of gpu_plan.c's ratio path for the CPU's archive a of x: the
 * quantizer's parameters as the CPU chose them (the prep kernel's are the
 * same, as for every chain), the kernel's phases per chunk into the slots
 * of a staging area, over 3 slots of scratch when there are more chunks
 * (as a launch of 3 blocks takes them in turn), scratch that starts as
 * garbage; then each slot, size and CRC against the archive's. */
static void model_encode_once(const uint8_t *a, size_t len, const void *x, const char *what) {
  ratio_stage R;
  ratio_stage_open(&R, a, len, x, 3, crc_tab, what);
  fzre_state *S = malloc(sizeof *S);
  cr_assert(S);
  /* Shared memory starts as garbage on the device: so here, a different
   * garbage for each chunk's block. */
  for (uint64_t c = 0; c < R.nc; c++) {
    memset(S, c & 1 ? 0x5a : 0xa5, sizeof *S);
    fzre_chunk(S, &R.J, c, c % R.slots);
  }
  ratio_stage_check(&R, a, len, what);
  free(S);
  ratio_stage_close(&R);
}

/* With each phase's threads in ascending order, or descending when
 * reverse is set (ratio_phase.cuh). */
static void model_encode_same(const uint8_t *a, size_t len, const void *x, const char *what,
                              int reverse) {
  fzr_host_reverse = reverse;
  model_encode_once(a, len, x, what);
  fzr_host_reverse = 0;
}

/* The model's bytes equal the CPU decoder's, aligned and not. */
static void same(const uint8_t *a, size_t len, size_t raw, const char *what) {
  uint8_t *ref = malloc(raw + 1), *got = malloc(raw + 9);
  size_t out_len = 0;
  cr_assert_eq(fz_decompress(a, len, ref, raw + 1, &out_len, 1), 0, "%s", what);
  for (size_t off = 0; off < 2; off++) {
    /* The aligned case in the reverse order of each phase's threads. */
    fzr_host_reverse = off == 0;
    memset(got, 0xa5, raw + 9);
    int rc = model_decode(a, len, got, off ? 3 : 0);
    fzr_host_reverse = 0;
    cr_assert_eq(rc, 0, "%s: model %s", what, fz_err_name(rc));
    cr_assert(memcmp(ref, got + (off ? 3 : 0), raw) == 0, "%s: bytes differ (off %zu)", what,
              off);
  }
  free(ref);
  free(got);
}

static const shape shapes[] = {
    {1, {1}},          {1, {70001}},        {2, {1, 9}},          {2, {37, 61}},
    {2, {300, 301}},   {3, {1, 1, 7}},      {3, {9, 1, 33}},      {3, {17, 23, 29}},
    {3, {5, 64, 130}}, {4, {2, 3, 17, 19}}, {4, {1, 7, 1, 40}},   {4, {3, 5, 31, 33}},
    /* rows of one element; rows longer than a small chunk */
    {3, {40, 30, 1}},  {2, {2, 5000}},
};

/* The encoder's sample strides are the engine's. */
_Static_assert(FZRE_GUESS_STEP == FZE_GUESS_STEP, "the guess's stride");

TestSuite(ratio_model, .init = setup);

Test(ratio_model, decodes_like_the_cpu) {
  static const char *const pipes[] = {"ratio", "quant | interp(dims=1) | huffman | rze(levels=2)",
                                      "quant | lorenzo | huffman | rze",
                                      "quant | lorenzo(dims=1) | huffman | rze(levels=1)"};
  const size_t npipes = sizeof pipes / sizeof *pipes;
  for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
    for (int f32 = 0; f32 < 2; f32++)
      for (int k = 0; k < KINDS; k++) {
        const shape *s = &shapes[si];
        fz_dtype t = f32 ? FZ_F32 : FZ_F64;
        void *x = field(s, f32, (enum kind)k, si * 31 + (uint64_t)k);
        size_t raw = (size_t)count(s) * (f32 ? 4 : 8);
        static const struct { fz_eb_mode m; double eb; } bounds[] = {
            {FZ_EB_REL, 1e-2}, {FZ_EB_REL, 1e-5}, {FZ_EB_ABS, 1e-3}, {FZ_EB_PWREL, 1e-3}};
        for (size_t b = 0; b < sizeof bounds / sizeof *bounds; b++)
          for (size_t pi = 0; pi < npipes; pi++)
            for (unsigned chunk = 4096; chunk <= 262144; chunk *= 64) {
              size_t len;
              uint8_t *a = compress(s, t, x, pipes[pi], bounds[b].m, bounds[b].eb, chunk, &len);
              char what[160];
              snprintf(what, sizeof what, "shape %zu %s kind %d bound %zu pipe %zu chunk %u", si,
                       f32 ? "f32" : "f64", k, b, pi, chunk);
              same(a, len, raw, what);
              /* Half the cases in each order of the threads: both orders
               * meet every shape, kind, bound, chain and chunk size. */
              model_encode_same(a, len, x, what, (int)((si + k + b + pi + chunk / 4096) & 1));
              free(a);
            }
        free(x);
      }
}

/* Archives of format version 3 (interp_v3.h): the walk of versions 3
 * and 4, words in memory order and one bin, as the CPU decodes it. */
Test(ratio_model, version_3_interpolation) {
  const size_t n = (size_t)INTERP_V3_Z * INTERP_V3_Y * INTERP_V3_X;
  same(interp_v3_f32, sizeof interp_v3_f32, n * 4, "version 3, f32");
  same(interp_v3_f64, sizeof interp_v3_f64, n * 8, "version 3, f64");
}

/* Archives of format version 5 (interp_v5.h): every chunk's walk on all
 * of the array's dims, as the CPU decodes it. */
Test(ratio_model, version_5_interpolation) {
  const size_t n = (size_t)INTERP_V3_Z * INTERP_V3_Y * INTERP_V3_X;
  same(interp_v5_f32, sizeof interp_v5_f32, n * 4, "version 5, f32");
  same(interp_v5_f64, sizeof interp_v5_f64, n * 8, "version 5, f64");
}

Test(ratio_model, version_6_interpolation) {
  const size_t n = (size_t)INTERP_V3_Z * INTERP_V3_Y * INTERP_V3_X;
  same(interp_v6_f32, sizeof interp_v6_f32, n * 4, "version 6, f32");
  same(interp_v6_f64, sizeof interp_v6_f64, n * 8, "version 6, f64");
}

/* Lossless (a bound below what the type resolves): quant's raw words. */
Test(ratio_model, lossless_chunks) {
  shape s = {2, {40, 50}};
  void *x = field(&s, 1, SPECIAL, 5);
  size_t len;
  uint8_t *a = compress(&s, FZ_F32, x, "ratio", FZ_EB_ABS, 1e-45, 4096, &len);
  same(a, len, 8000, "lossless");
  model_encode_same(a, len, x, "lossless", 0);
  model_encode_same(a, len, x, "lossless", 1);
  free(a);
  free(x);
}

static void hostile(const uint8_t *a, size_t len, size_t raw, const char *what) {
  fze_header h;
  cr_assert_eq(fze_header_parse(a, len, &h), 0);
  uint8_t *b = malloc(len), *ref = malloc(raw + 1), *got = malloc(raw + 8);
  size_t n_bad = 0;
  for (size_t at = h.header_len; at < len; at++)
    for (int flip = 0; flip < 3; flip++) {
      memcpy(b, a, len);
      b[at] = flip == 0 ? (uint8_t)~b[at] : flip == 1 ? 0 : (uint8_t)(b[at] ^ 1);
      if (b[at] == a[at])
        continue;
      reseal(b, len);
      size_t out_len;
      int cpu = fz_decompress(b, len, ref, raw + 1, &out_len, 1);
      int gpu = model_decode(b, len, got, 0);
      cr_assert_eq(gpu, cpu, "%s: byte %zu flip %d: cpu %s model %s", what, at, flip,
                   fz_err_name(cpu), fz_err_name(gpu));
      if (cpu == 0)
        cr_assert(memcmp(ref, got, raw) == 0, "%s: byte %zu flip %d: bytes", what, at, flip);
      n_bad += cpu < 0;
    }
  cr_assert_gt(n_bad, 0, "%s: no mutation refused", what);
  /* Truncated archives: the header's checks (the kernel is not reached). */
  for (size_t cut = 0; cut < len; cut += 1 + cut / 4) {
    size_t out_len;
    cr_assert_eq(model_decode(a, cut, got, 0), fz_decompress(a, cut, ref, raw + 1, &out_len, 1),
                 "%s: cut %zu", what, cut);
  }
  free(b);
  free(ref);
  free(got);
}

Test(ratio_model, hostile_chunks_give_the_cpu_error) {
  shape s = {3, {6, 20, 30}};
  void *x = field(&s, 1, SPECIAL, 9);
  size_t len;
  uint8_t *a = compress(&s, FZ_F32, x, "ratio", FZ_EB_REL, 1e-3, 4096, &len);
  hostile(a, len, 3600 * 4, "f32 rel");
  free(a);
  a = compress(&s, FZ_F32, x, "ratio", FZ_EB_PWREL, 1e-2, 4096, &len);
  hostile(a, len, 3600 * 4, "f32 pwrel");
  free(a);
  /* lorenzo's predictor byte is 1..D: a 0 there is corrupt. */
  a = compress(&s, FZ_F32, x, "quant | lorenzo | huffman | rze", FZ_EB_REL, 1e-3, 4096, &len);
  hostile(a, len, 3600 * 4, "f32 lorenzo");
  free(a);
  free(x);
  x = field(&s, 0, SMOOTH, 3);
  a = compress(&s, FZ_F64, x, "ratio", FZ_EB_ABS, 1e-4, 8192, &len);
  hostile(a, len, 3600 * 8, "f64 abs");
  free(a);
  free(x);
}

/* The chunk CRC's combination of parts against the engine's CRC-32C:
 * lengths below, at and above multiples of the thread count, so that
 * shares are empty, ragged or all whole. */
Test(ratio_model, crc_parts_combine) {
  static uint8_t buf[70000];
  uint64_t seed = 1;
  for (size_t i = 0; i < sizeof buf; i++)
    buf[i] = (uint8_t)rnd(&seed);
  static const size_t lens[] = {0, 1, 2, 255, 256, 257, 511, 1000, 4096, 4097, 69999, 70000};
  fzr_state *S = malloc(sizeof *S);
  cr_assert(S);
  for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
    memset(S, 0xa5, sizeof *S); /* the block's state starts as garbage */
    uint32_t crc = fzr_crc_block(S->part, S->fac, buf, lens[i], crc_tab);
    cr_assert_eq(crc, fze_crc32c(0, buf, lens[i]), "len %zu", lens[i]);
  }
  free(S);
}

/* ---- the lossless-ratio preset: lorenzo | byteplanes ---- */

/* Integers of w bytes (signed or not, the same bits): smooth (small
 * residuals: their high planes zero), noise (chunks stored raw), zeros,
 * or smooth with a noisy low byte and the type's extremes mixed in (a
 * plane kept as it is beside coded ones). */
static void *int_field(const shape *s, unsigned w, enum kind k, uint64_t seed) {
  size_t n = (size_t)count(s);
  uint8_t *x = malloc(n * w + 8);
  cr_assert(x);
  uint64_t X = s->dims[s->ndims - 1], Y = s->ndims > 1 ? s->dims[s->ndims - 2] : 1;
  for (size_t i = 0; i < n; i++) {
    uint64_t xx = i % X, yy = (i / X) % Y, zz = i / X / Y, r = rnd(&seed);
    int64_t v = (int64_t)(3 * xx + 5 * yy + 7 * zz) - 200 + (int64_t)(r % 3);
    if (k == NOISE)
      v = (int64_t)r;
    else if (k == CONSTANT)
      v = 0;
    else if (k == SPECIAL)
      v = r % 97 == 0 ? (r & 256 ? INT64_MIN : INT64_MAX) >> (64 - 8 * w)
                      : v * 256 + (int64_t)(r & 255);
    for (unsigned b = 0; b < w; b++)
      x[i * w + b] = (uint8_t)((uint64_t)v >> (8 * b));
  }
  return x;
}

/* What the CPU's chunks hold, counted: chunks stored raw, and planes of
 * zeros, kept as they are, and coded. */
typedef struct plane_kinds {
  size_t raw, zero, kept, coded;
} plane_kinds;

static void count_planes(const uint8_t *a, size_t len, plane_kinds *pk) {
  fze_header h;
  cr_assert_eq(fze_header_parse(a, len, &h), 0);
  unsigned w = (unsigned)fz_dtype_size(h.dtype);
  uint64_t off = h.header_len;
  for (uint64_t c = 0; c < h.nchunks; c++) {
    uint64_t sz = fze_chunk_size_at(&h, c), raw = h.raw_bytes - c * h.chunk_bytes;
    raw = raw < h.chunk_bytes ? raw : h.chunk_bytes;
    if (sz == raw) {
      pk->raw++;
    } else {
      size_t k = 1;
      for (unsigned p = 0; p < w; p++) {
        uint64_t l = 0;
        cr_assert(fze_get_varint(a + off, sz, &k, &l));
        *(l == 0 ? &pk->zero : l == raw / w ? &pk->kept : &pk->coded) += 1;
      }
    }
    off += sz;
  }
}

static const fz_dtype planes_types[] = {FZ_F32, FZ_F64, FZ_I32, FZ_U32, FZ_I64, FZ_U64};

Test(ratio_model, planes_like_the_cpu) {
  static const char *const pipes[] = {"lossless-ratio", "lorenzo(dims=1) | byteplanes"};
  plane_kinds pk = {0, 0, 0, 0};
  for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
    for (size_t ti = 0; ti < sizeof planes_types / sizeof *planes_types; ti++)
      for (int k = 0; k < KINDS; k++) {
        const shape *s = &shapes[si];
        fz_dtype t = planes_types[ti];
        unsigned w = (unsigned)fz_dtype_size(t);
        void *x = t == FZ_F32 || t == FZ_F64 ? field(s, t == FZ_F32, (enum kind)k, si * 7 + ti)
                                             : int_field(s, w, (enum kind)k, si * 7 + ti);
        size_t raw = (size_t)count(s) * w;
        /* One pipeline and one chunk size a case, in turn, so that every
         * pair of them meets every shape, type and kind over the loop
         * without four times its run time. */
        size_t turn = si + ti + (size_t)k, pi = turn & 1;
        unsigned chunk = (turn >> 1) & 1 ? 262144 : 4096;
        {
            size_t len;
            uint8_t *a = compress(s, t, x, pipes[pi], FZ_EB_ABS, 0, chunk, &len);
            char what[160];
            snprintf(what, sizeof what, "planes: shape %zu %s kind %d pipe %zu chunk %u", si,
                     fz_dtype_name(t), k, pi, chunk);
            count_planes(a, len, &pk);
            same(a, len, raw, what);
            model_encode_same(a, len, x, what, (int)((si + ti + k + pi + chunk / 4096) & 1));
            free(a);
          }
        free(x);
      }
  /* Every kind of chunk and plane was met. */
  cr_assert(pk.raw && pk.zero && pk.kept && pk.coded, "raw %zu zero %zu kept %zu coded %zu",
            pk.raw, pk.zero, pk.kept, pk.coded);
}

Test(ratio_model, planes_hostile_chunks_give_the_cpu_error) {
  /* Two chunks a field: every byte of them mutated, each decoded by the
   * CPU and by the model. */
  shape s = {3, {4, 10, 30}};
  void *x = field(&s, 1, SMOOTH, 4);
  size_t len;
  uint8_t *a = compress(&s, FZ_F32, x, "lossless-ratio", FZ_EB_ABS, 0, 4096, &len);
  hostile(a, len, 1200 * 4, "planes f32");
  free(a);
  free(x);
  x = int_field(&s, 8, SPECIAL, 5);
  a = compress(&s, FZ_I64, x, "lorenzo(dims=2) | byteplanes", FZ_EB_ABS, 0, 8192, &len);
  hostile(a, len, 1200 * 8, "planes i64");
  free(a);
  free(x);
}
