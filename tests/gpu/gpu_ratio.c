/*
 * gpu_ratio.c - the ratio preset's archives (format version 3) made and
 * decoded on the GPU: the GPU encoder's archives must be the CPU
 * encoder's, byte for byte, and the CPU encoder's archives of f32 and f64
 * fields, 1-D to 4-D with odd extents, extents of 1 and partial chunks,
 * smooth, noisy,
 * constant and full of NaN, Inf, -0.0 and denormals, under ABS, REL (1e-2
 * to 1e-5) and PWREL bounds, must decode to the CPU decoder's bytes, into
 * aligned and unaligned output; hostile archives (bytes flipped with every
 * CRC recomputed, truncations) must give the CPU decoder's error, never a
 * crash (run.sh runs the small case under compute-sanitizer memcheck);
 * the same on a context of generated kernels only (NVRTC's build of the
 * ratio kernels); chains the kernels do not take still answer ENOSYS, so a
 * daemon hands them to the CPU engine; and through a GPU fzd a device-buffer
 * decompression of a ratio archive gives the CPU engine's output.  The
 * lossless-ratio preset (lorenzo | byteplanes, format version 4), which
 * the same kernels code on 4- and 8-byte words, the same ways: the CPU's
 * archives both ways, the input back bit for bit, hostile archives, and
 * generated kernels only.
 */
#include <criterion/criterion.h>
#include <stdio.h>

#include "archive.h"
#include "engine.h"
#include "fzclient.h"
#include "fzd_harness.h"
#include "gpu_fzd.h"
#include "gpu_util.h"
#include "interp_v3.h"
#include "interp_v5.h"
#include "interp_v6.h"
#include "ratio_reseal.h"
#include "ratio_shape.h"

/* A field smooth along every axis, or one of gpu_util.h's kinds. */
static void *field(const shape *s, fz_dtype t, gen_kind k, uint64_t seed) {
  size_t n = (size_t)count(s);
  void *x = gen_data(t, n, k, seed);
  if (k == GEN_SMOOTH) {
    uint64_t X = s->dims[s->ndims - 1], Y = s->ndims > 1 ? s->dims[s->ndims - 2] : 1;
    for (size_t i = 0; i < n; i++) {
      double xx = (double)(i % X), yy = (double)((i / X) % Y), zz = (double)(i / X / Y);
      double v = sin(xx * 0.05) * cos(yy * 0.07) * 50 + zz * 0.3 + xx * 0.01;
      /* Integers: the same surface in hundredths, moved above 0. */
      int64_t q = (int64_t)llround(v * 100) + 10000;
      switch (t) {
      case FZ_F32: ((float *)x)[i] = (float)v; break;
      case FZ_F64: ((double *)x)[i] = v; break;
      case FZ_I32: ((int32_t *)x)[i] = (int32_t)q; break;
      case FZ_U32: ((uint32_t *)x)[i] = (uint32_t)q; break;
      case FZ_I64: ((int64_t *)x)[i] = q; break;
      case FZ_U64: ((uint64_t *)x)[i] = (uint64_t)q; break;
      default: cr_assert_fail("no smooth field of %s", fz_dtype_name(t));
      }
    }
  }
  return x;
}

static fz_params params(const shape *s, fz_dtype t, const char *pipe, fz_eb_mode mode,
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
  p.threads = 2;
  return p;
}

static uint8_t *cpu_archive(const shape *s, fz_dtype t, const void *x, const char *pipe,
                            fz_eb_mode mode, double eb, unsigned chunk, size_t *len) {
  fz_params p = params(s, t, pipe, mode, eb, chunk);
  fz_plan *pl = NULL;
  char why[256] = "";
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), 0, "%s: %s", pipe, why);
  size_t cap = fz_plan_compress_bound(pl);
  uint8_t *a = malloc(cap);
  cr_assert_eq(fz_plan_compress(pl, x, fz_plan_input_bytes(pl), a, cap, len), 0);
  fz_plan_destroy(pl);
  return a;
}

/* The context the comparisons run on: the tests' own, or one that runs
 * only generated kernels (NVRTC's build of the ratio kernels). */
static fz_gpu_ctx *ratio_ctx;
static fz_gpu_ctx *gpu(void) { return ratio_ctx != NULL ? ratio_ctx : test_ctx(); }

/* Decodes a on both backends (the GPU's output off by `off` bytes from an
 * allocation's start): the same code, and on success the same bytes. */
static int both(const uint8_t *a, size_t len, size_t raw, size_t off, const char *what) {
  fz_gpu_ctx *ctx = gpu();
  uint8_t *o_cpu = malloc(raw + 1), *o_gpu = malloc(raw + 1);
  size_t ol = 0;
  int rc_cpu = fz_decompress(a, len, o_cpu, raw, &ol, 2);
  void *d_arc = to_device(a, len);
  uint8_t *d_out = NULL;
  CUDA_OK(cudaMalloc((void **)&d_out, raw + off + 1));
  char why[256] = "";
  int rc_gpu = fz_gpu_decompress(ctx, d_arc, len, d_out + off, raw, &ol, NULL, why, sizeof why);
  cr_assert_eq(rc_gpu, rc_cpu, "%s: gpu %s (%s), cpu %s", what, fz_err_name(rc_gpu), why,
               fz_err_name(rc_cpu));
  if (rc_cpu == 0) {
    cr_assert_eq(ol, raw);
    CUDA_OK(cudaMemcpy(o_gpu, d_out + off, raw, cudaMemcpyDeviceToHost));
    size_t first = 0;
    while (first < raw && o_cpu[first] == o_gpu[first])
      first++;
    cr_assert_eq(first, raw, "%s: outputs differ at byte %zu of %zu", what, first, raw);
  }
  CUDA_OK(cudaFree(d_arc));
  CUDA_OK(cudaFree(d_out));
  free(o_cpu);
  free(o_gpu);
  return rc_cpu;
}

/* The GPU's archive of x under the parameters the CPU's archive a was made
 * with: a's bytes.  off > 0 moves the input off by off elements from a
 * 16-byte boundary and the archive off by off bytes. */
static void gpu_same(const shape *s, fz_dtype t, const void *x, const char *pipe,
                     fz_eb_mode mode, double eb, unsigned chunk, const uint8_t *a, size_t len,
                     size_t off, const char *what) {
  fz_params p = params(s, t, pipe, mode, eb, chunk);
  fz_gpu_plan *pl = NULL;
  char why[256] = "";
  cr_assert_eq(fz_gpu_plan_create(gpu(), &p, 0, &pl, why, sizeof why), 0, "%s: %s", what, why);
  size_t raw = fz_gpu_plan_input_bytes(pl), cap = fz_gpu_plan_compress_bound(pl), ol = 0;
  uint8_t *d_in = NULL, *d_out = NULL, *got = malloc(cap);
  const size_t in_off = off * fz_dtype_size(t);
  CUDA_OK(cudaMalloc((void **)&d_in, raw + in_off));
  CUDA_OK(upload_for_fzd(d_in + in_off, x, raw));
  CUDA_OK(cudaMalloc((void **)&d_out, cap + off));
  int rc = fz_gpu_compress(pl, d_in + in_off, raw, d_out + off, cap, &ol, NULL, why, sizeof why);
  cr_assert_eq(rc, 0, "%s: %s (%s)", what, fz_err_name(rc), why);
  cr_assert_eq(ol, len, "%s: the GPU's archive has %zu bytes, the CPU's %zu", what, ol, len);
  CUDA_OK(cudaMemcpy(got, d_out + off, len, cudaMemcpyDeviceToHost));
  size_t first = 0;
  while (first < len && got[first] == a[first])
    first++;
  cr_assert_eq(first, len, "%s: archives differ at byte %zu of %zu", what, first, len);
  CUDA_OK(cudaFree(d_in));
  CUDA_OK(cudaFree(d_out));
  free(got);
  fz_gpu_plan_destroy(pl);
}

static const shape shapes[] = {
    {1, {1}},          {1, {70001}},        {2, {1, 9}},          {2, {37, 61}},
    {2, {300, 301}},   {3, {1, 1, 7}},      {3, {9, 1, 33}},      {3, {17, 23, 29}},
    {3, {5, 64, 130}}, {4, {2, 3, 17, 19}}, {4, {1, 7, 1, 40}},   {4, {3, 5, 31, 33}},
};

static const struct {
  fz_eb_mode m;
  double eb;
} bounds[] = {{FZ_EB_REL, 1e-2}, {FZ_EB_REL, 1e-3}, {FZ_EB_REL, 1e-4}, {FZ_EB_REL, 1e-5},
              {FZ_EB_ABS, 1e-3}, {FZ_EB_PWREL, 1e-3}};

static void sweep(fz_dtype t, unsigned chunk) {
  const gen_kind kinds[] = {GEN_SMOOTH, GEN_NOISE, GEN_CONST, GEN_SPECIAL};
  for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
    for (size_t k = 0; k < 4; k++) {
      const shape *s = &shapes[si];
      void *x = field(s, t, kinds[k], si * 31 + k);
      size_t raw = (size_t)count(s) * fz_dtype_size(t);
      for (size_t b = 0; b < sizeof bounds / sizeof *bounds; b++) {
        size_t len;
        uint8_t *a = cpu_archive(s, t, x, "ratio", bounds[b].m, bounds[b].eb, chunk, &len);
        char what[160];
        snprintf(what, sizeof what, "%s shape %zu kind %zu %s %g chunk %u", fz_dtype_name(t),
                 si, k, fz_eb_mode_name(bounds[b].m), bounds[b].eb, chunk);
        cr_assert_eq(both(a, len, raw, 0, what), 0, "%s", what);
        gpu_same(s, t, x, "ratio", bounds[b].m, bounds[b].eb, chunk, a, len, 0, what);
        /* Output off the element alignment: rebuilt aside, then copied;
         * the archive placed at an odd address. */
        if (b == 1) {
          both(a, len, raw, 1, what);
          gpu_same(s, t, x, "ratio", bounds[b].m, bounds[b].eb, chunk, a, len, 3, what);
        }
        free(a);
      }
      free(x);
    }
}

Test(ratio, f32_default_chunks, .timeout = 600) { sweep(FZ_F32, 0); }
Test(ratio, f32_small_chunks, .timeout = 600) { sweep(FZ_F32, 4096); }
Test(ratio, f64_default_chunks, .timeout = 600) { sweep(FZ_F64, 0); }
Test(ratio, f64_small_chunks, .timeout = 600) { sweep(FZ_F64, 8192); }

/* The interpolation in fewer dimensions than the shape, fewer rze levels,
 * lossless chunks (a bound below what the type resolves), and lorenzo in
 * the interpolation's place. */
Test(ratio, other_parameters) {
  shape s = {3, {17, 23, 29}};
  size_t raw = (size_t)count(&s) * 4, len;
  void *x = field(&s, FZ_F32, GEN_SMOOTH, 2);
  const char *pipe = "quant | interp(dims=1) | huffman | rze(levels=2)";
  uint8_t *a = cpu_archive(&s, FZ_F32, x, pipe, FZ_EB_REL, 1e-3, 4096, &len);
  both(a, len, raw, 0, "interp(dims=1) rze(levels=2)");
  gpu_same(&s, FZ_F32, x, pipe, FZ_EB_REL, 1e-3, 4096, a, len, 0, "interp(dims=1)");
  free(a);
  free(x);
  x = field(&s, FZ_F32, GEN_SPECIAL, 4);
  a = cpu_archive(&s, FZ_F32, x, "ratio", FZ_EB_ABS, 1e-45, 4096, &len);
  both(a, len, raw, 0, "lossless");
  gpu_same(&s, FZ_F32, x, "ratio", FZ_EB_ABS, 1e-45, 4096, a, len, 0, "lossless");
  free(a);
  free(x);
  /* lorenzo in interp's place, in the shape's dims and in fewer. */
  static const char *const lz[] = {"quant | lorenzo | huffman | rze",
                                   "quant | lorenzo(dims=2) | huffman | rze(levels=1)"};
  for (size_t i = 0; i < 2; i++)
    for (int f64 = 0; f64 < 2; f64++) {
      fz_dtype t = f64 ? FZ_F64 : FZ_F32;
      x = field(&s, t, i ? GEN_SPECIAL : GEN_SMOOTH, 7 + i);
      a = cpu_archive(&s, t, x, lz[i], i ? FZ_EB_PWREL : FZ_EB_REL, 1e-3, 0, &len);
      both(a, len, (size_t)count(&s) * fz_dtype_size(t), 0, lz[i]);
      gpu_same(&s, t, x, lz[i], i ? FZ_EB_PWREL : FZ_EB_REL, 1e-3, 0, a, len, 0, lz[i]);
      free(a);
      free(x);
    }
}

/* On a context that runs only generated kernels, as on a GPU the built-in
 * code cannot run on: NVRTC's build of the same kernels, the same bytes
 * both ways, and the plan says so. */
Test(ratio, generated_kernels_only, .timeout = 600) {
  char why[512] = "";
  fz_gpu_ctx *ctx = NULL;
  cr_assert_eq(fz_gpu_ctx_create(NULL, 2, &ctx, why, sizeof why), 0, "%s", why);
  cr_assert_eq(fz_gpu_ctx_jit_config(ctx, NULL, 0, FZ_GPU_JIT_ONLY, why, sizeof why), 0, "%s",
               why);
  ratio_ctx = ctx;
  static const shape cases[] = {{2, {300, 301}}, {3, {17, 23, 29}}, {1, {70001}}};
  for (size_t i = 0; i < 3; i++)
    for (int f64 = 0; f64 < 2; f64++) {
      fz_dtype t = f64 ? FZ_F64 : FZ_F32;
      const char *pipe = i == 1 ? "quant | lorenzo | huffman | rze" : "ratio";
      void *x = field(&cases[i], t, i == 2 ? GEN_SPECIAL : GEN_SMOOTH, 40 + i);
      size_t len, raw = (size_t)count(&cases[i]) * fz_dtype_size(t);
      uint8_t *a = cpu_archive(&cases[i], t, x, pipe, FZ_EB_REL, 1e-3, 0, &len);
      char what[96];
      snprintf(what, sizeof what, "generated only: case %zu %s", i, fz_dtype_name(t));
      cr_assert_eq(both(a, len, raw, 0, what), 0, "%s", what);
      gpu_same(&cases[i], t, x, pipe, FZ_EB_REL, 1e-3, 0, a, len, 3, what);
      free(a);
      free(x);
    }
  fz_params p = params(&cases[0], FZ_F32, "ratio", FZ_EB_REL, 1e-3, 0);
  fz_gpu_plan *pl = NULL;
  cr_assert_eq(fz_gpu_plan_create(ctx, &p, 0, &pl, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq(fz_gpu_plan_path(pl), "jit");
  fz_gpu_plan_destroy(pl);
  ratio_ctx = NULL;
  fz_gpu_ctx_destroy(ctx);
}

/* Version-3 chains the kernels do not take (lorenzo before rze on words):
 * ENOSYS, for the CPU engine. */
Test(ratio, other_chains_are_left_to_the_cpu) {
  shape s = {2, {37, 61}};
  void *x = field(&s, FZ_F32, GEN_SMOOTH, 2);
  size_t len;
  uint8_t *a = cpu_archive(&s, FZ_F32, x, "quant | lorenzo | rze", FZ_EB_REL, 1e-3, 4096, &len);
  void *d_arc = to_device(a, len), *d_out = NULL;
  CUDA_OK(cudaMalloc(&d_out, count(&s) * 4));
  size_t ol;
  char why[256] = "";
  int rc = fz_gpu_decompress(test_ctx(), d_arc, len, d_out, count(&s) * 4, &ol, NULL, why,
                             sizeof why);
  cr_assert_eq(rc, FZ_ENOSYS, "%s: %s", fz_err_name(rc), why);
  /* Nor do they make such archives: the daemon's CPU engine does. */
  fz_params p = params(&s, FZ_F32, "quant | lorenzo | rze", FZ_EB_REL, 1e-3, 4096);
  fz_gpu_plan *pl = NULL;
  rc = fz_gpu_plan_create(test_ctx(), &p, 0, &pl, why, sizeof why);
  cr_assert_eq(rc, FZ_ENOSYS, "%s: %s", fz_err_name(rc), why);
  cr_assert_null(pl);
  CUDA_OK(cudaFree(d_arc));
  CUDA_OK(cudaFree(d_out));
  free(a);
  free(x);
}

/* The lossless-ratio preset (lorenzo | byteplanes, format version 4) on
 * 1- and 2-byte words has no kernels: the decoder and the plan answer
 * ENOSYS, so that fzd runs the CPU engine. */
Test(ratio, lossless_ratio_bytes_are_left_to_the_cpu) {
  const fz_dtype types[2] = {FZ_U8, FZ_I16};
  shape s = {2, {37, 61}};
  for (unsigned k = 0; k < 2; k++) {
    size_t w = fz_dtype_size(types[k]), len, ol;
    void *x = field(&s, types[k], GEN_NOISE, 3);
    uint8_t *a = cpu_archive(&s, types[k], x, "lossless-ratio", FZ_EB_REL, 0, 0, &len);
    cr_assert_eq(a[4], 4);
    void *d_arc = to_device(a, len), *d_out = NULL;
    CUDA_OK(cudaMalloc(&d_out, count(&s) * w));
    char why[256] = "";
    int rc = fz_gpu_decompress(test_ctx(), d_arc, len, d_out, count(&s) * w, &ol, NULL, why,
                               sizeof why);
    cr_assert_eq(rc, FZ_ENOSYS, "%s: %s", fz_err_name(rc), why);
    fz_params p = params(&s, types[k], "lossless-ratio", FZ_EB_REL, 0, 0);
    fz_gpu_plan *pl = NULL;
    rc = fz_gpu_plan_create(test_ctx(), &p, 0, &pl, why, sizeof why);
    cr_assert_eq(rc, FZ_ENOSYS, "%s: %s", fz_err_name(rc), why);
    cr_assert_null(pl);
    CUDA_OK(cudaFree(d_arc));
    CUDA_OK(cudaFree(d_out));
    free(a);
    free(x);
  }
}

/* Bytes of the payload flipped (every stride-th, three ways), the CRCs
 * recomputed; and cuts. */
static void hostile(const uint8_t *a, size_t len, size_t raw, size_t stride, const char *what) {
  fze_header h;
  cr_assert_eq(fze_header_parse(a, len, &h), 0);
  uint8_t *b = malloc(len);
  size_t refused = 0;
  for (size_t at = h.header_len; at < len; at += stride)
    for (int flip = 0; flip < 3; flip++) {
      memcpy(b, a, len);
      b[at] = flip == 0 ? (uint8_t)~b[at] : flip == 1 ? 0 : (uint8_t)(b[at] ^ 1);
      if (b[at] == a[at])
        continue;
      reseal(b, len);
      char w[160];
      snprintf(w, sizeof w, "%s: byte %zu flip %d", what, at, flip);
      refused += both(b, len, raw, 0, w) < 0;
    }
  cr_assert_gt(refused, 0, "%s: no edit refused", what);
  for (size_t cut = 0; cut < len; cut += 1 + cut / 3) {
    char w[160];
    snprintf(w, sizeof w, "%s: cut at %zu", what, cut);
    both(a, cut, raw, 0, w);
  }
  free(b);
}

/* Small enough for compute-sanitizer (run.sh). */
Test(ratio, hostile_small) {
  shape s = {3, {6, 20, 30}};
  void *x = field(&s, FZ_F32, GEN_SPECIAL, 9);
  size_t len;
  uint8_t *a = cpu_archive(&s, FZ_F32, x, "ratio", FZ_EB_REL, 1e-3, 4096, &len);
  hostile(a, len, 3600 * 4, 7, "f32 rel");
  free(a);
  free(x);
  /* pwrel codes nothing of that field (every chunk is stored raw), so its
   * case takes a smooth one. */
  x = field(&s, FZ_F32, GEN_SMOOTH, 9);
  a = cpu_archive(&s, FZ_F32, x, "ratio", FZ_EB_PWREL, 1e-2, 4096, &len);
  hostile(a, len, 3600 * 4, 7, "f32 pwrel");
  free(a);
  free(x);
}

/* One archive and a few edits: the case run.sh runs under memcheck. */
Test(ratio, sanitizer_small) {
  shape s = {2, {37, 61}};
  void *x = field(&s, FZ_F32, GEN_SPECIAL, 9);
  size_t len;
  uint8_t *a = cpu_archive(&s, FZ_F32, x, "ratio", FZ_EB_REL, 1e-3, 4096, &len);
  cr_assert_eq(both(a, len, 37 * 61 * 4, 0, "valid"), 0);
  both(a, len, 37 * 61 * 4, 1, "valid, unaligned output");
  gpu_same(&s, FZ_F32, x, "ratio", FZ_EB_REL, 1e-3, 4096, a, len, 0, "encoder");
  gpu_same(&s, FZ_F32, x, "ratio", FZ_EB_REL, 1e-3, 4096, a, len, 3, "encoder, odd archive");
  uint8_t *b = malloc(len);
  for (size_t at = len / 3; at < len; at += len / 5) {
    memcpy(b, a, len);
    b[at] ^= 0x5a;
    reseal(b, len);
    both(b, len, 37 * 61 * 4, 0, "edited");
  }
  free(b);
  free(a);
  free(x);
}

/* Archives of format version 3 (interp_v3.h): the walk of versions 3 and
 * 4, words in memory order and one bin, decoded as the CPU decodes it. */
Test(ratio, version_3_interpolation) {
  const size_t n = (size_t)INTERP_V3_Z * INTERP_V3_Y * INTERP_V3_X;
  cr_assert_eq(both(interp_v3_f32, sizeof interp_v3_f32, n * 4, 0, "version 3, f32"), 0);
  cr_assert_eq(both(interp_v3_f64, sizeof interp_v3_f64, n * 8, 1, "version 3, f64"), 0);
}

/* Archives of format version 5 (interp_v5.h), decoded as the CPU decodes
 * them. */
Test(ratio, version_5_interpolation) {
  const size_t n = (size_t)INTERP_V3_Z * INTERP_V3_Y * INTERP_V3_X;
  cr_assert_eq(both(interp_v5_f32, sizeof interp_v5_f32, n * 4, 0, "version 5, f32"), 0);
  cr_assert_eq(both(interp_v5_f64, sizeof interp_v5_f64, n * 8, 1, "version 5, f64"), 0);
}

/* Archives of format version 6 (interp_v6.h), decoded as the CPU decodes
 * them. */
Test(ratio, version_6_interpolation) {
  const size_t n = (size_t)INTERP_V3_Z * INTERP_V3_Y * INTERP_V3_X;
  cr_assert_eq(both(interp_v6_f32, sizeof interp_v6_f32, n * 4, 0, "version 6, f32"), 0);
  cr_assert_eq(both(interp_v6_f64, sizeof interp_v6_f64, n * 8, 1, "version 6, f64"), 0);
}

/* Without FZ_GPU_RATIO_ENCODER=kernels a plan of the ratio preset's chain
 * answers ENOSYS, so that the CPU engine compresses it (its kernels made
 * other archives than the CPU's on an H100); the lossless-ratio preset's
 * keeps its kernels. */
Test(ratio, encoder_left_to_the_cpu) {
  shape s = {2, {37, 61}};
  fz_params p = params(&s, FZ_F32, "ratio", FZ_EB_REL, 1e-3, 0);
  fz_gpu_plan *pl = NULL;
  char why[256] = "";
  cr_assert_eq(unsetenv("FZ_GPU_RATIO_ENCODER"), 0);
  cr_assert_eq(fz_gpu_plan_create(gpu(), &p, 0, &pl, why, sizeof why), FZ_ENOSYS);
  cr_assert(strstr(why, "the CPU engine compresses this chain"), "%s", why);
  fz_params q = params(&s, FZ_F32, "lossless-ratio", FZ_EB_REL, 0, 0);
  cr_assert_eq(fz_gpu_plan_create(gpu(), &q, 0, &pl, why, sizeof why), 0, "%s", why);
  fz_gpu_plan_destroy(pl);
  cr_assert_eq(setenv("FZ_GPU_RATIO_ENCODER", "kernels", 1), 0);
  cr_assert_eq(fz_gpu_plan_create(gpu(), &p, 0, &pl, why, sizeof why), 0, "%s", why);
  fz_gpu_plan_destroy(pl);
}

Test(ratio, hostile_every_byte, .timeout = 600) {
  shape s = {3, {6, 20, 30}};
  void *x = field(&s, FZ_F64, GEN_SMOOTH, 3);
  size_t len;
  uint8_t *a = cpu_archive(&s, FZ_F64, x, "ratio", FZ_EB_ABS, 1e-4, 8192, &len);
  hostile(a, len, 3600 * 8, 1, "f64 abs");
  free(a);
  free(x);
}

/* A huffman stream's code lengths over-subscribed, its sub-stream lengths
 * off, the stream cut: built by hand in a chunk of one archive. */
Test(ratio, hostile_code_lengths) {
  shape s = {2, {64, 64}};
  void *x = field(&s, FZ_F32, GEN_NOISE, 5);
  size_t len;
  uint8_t *a = cpu_archive(&s, FZ_F32, x, "quant | interp | huffman | rze(levels=1)",
                           FZ_EB_ABS, 1e-2, 0, &len);
  fze_header h;
  cr_assert_eq(fze_header_parse(a, len, &h), 0);
  uint8_t *b = malloc(len);
  /* Set nibbles of the code lengths to 0xf (above 12) or 1 (over-subscribed). */
  for (size_t at = h.header_len; at < len && at < h.header_len + 400; at++) {
    static const uint8_t vals[] = {0xff, 0x11, 0x00};
    for (size_t v = 0; v < sizeof vals; v++) {
      memcpy(b, a, len);
      b[at] = vals[v];
      reseal(b, len);
      both(b, len, 4096 * 4, 0, "code lengths");
    }
  }
  free(b);
  free(a);
  free(x);
}

/* Through a GPU fzd: the archive in device memory (CUDA IPC), the output
 * too; the CPU engine's bytes. */
Test(ratio, fzd_device_buffers, .timeout = 300) {
  fzd_harness *hz = start_gpu_fzd("\"workers\": 2");
  fz_client *c = connect_gpu(hz);
  CUDA_OK(cudaSetDevice(0));
  char uuid[64];
  struct cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
  snprintf(uuid, sizeof uuid,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
           u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
           u[14], u[15]);
  shape s = {3, {20, 130, 170}};
  size_t raw = (size_t)count(&s) * 4, len;
  void *x = field(&s, FZ_F32, GEN_SMOOTH, 1);
  uint8_t *a = cpu_archive(&s, FZ_F32, x, "ratio", FZ_EB_REL, 1e-4, 0, &len);
  uint8_t *ref = malloc(raw), *got = malloc(raw);
  size_t ol;
  cr_assert_eq(fz_decompress(a, len, ref, raw, &ol, 2), 0);
  void *d_arc = to_device(a, len), *d_back = NULL;
  CUDA_OK(cudaMalloc(&d_back, raw));
  cudaIpcMemHandle_t h_arc, h_back;
  CUDA_OK(cudaIpcGetMemHandle(&h_arc, d_arc));
  CUDA_OK(cudaIpcGetMemHandle(&h_back, d_back));
  fz_job d;
  fz_job_init(&d);
  d.in_ipc = &h_arc;
  d.in_length = len;
  d.out_ipc = &h_back;
  d.out_length = raw;
  d.device = uuid;
  fz_result r;
  cr_assert_eq(fz_client_decompress(c, &d, &r), 0, "%s", r.message);
  CUDA_OK(cudaMemcpy(got, d_back, raw, cudaMemcpyDeviceToHost));
  cr_assert(memcmp(ref, got, raw) == 0, "the daemon's output differs from the CPU engine's");
  CUDA_OK(cudaFree(d_arc));
  CUDA_OK(cudaFree(d_back));
  fz_client_close(c);
  stop_fzd(hz);
  free(ref);
  free(got);
  free(a);
  free(x);
}

/* ---- the lossless-ratio preset: lorenzo | byteplanes ---- */

static const fz_dtype planes_types[] = {FZ_F32, FZ_F64, FZ_I32, FZ_U32, FZ_I64, FZ_U64};

/* The CPU's archive of x decoded on the GPU (its bytes, and x's), and the
 * GPU's archive of x (the CPU's bytes). */
static void planes_case(const shape *s, fz_dtype t, const void *x, const char *pipe,
                        unsigned chunk, size_t off, const char *what) {
  size_t raw = (size_t)count(s) * fz_dtype_size(t), len, ol;
  cr_log_info("%s: %s, %zu bytes", what, pipe, raw);
  uint8_t *a = cpu_archive(s, t, x, pipe, FZ_EB_ABS, 0, chunk, &len);
  cr_assert_eq(a[4], 4, "%s: format version %u", what, a[4]);
  cr_assert_eq(both(a, len, raw, off, what), 0, "%s", what);
  /* Lossless: what the CPU decodes (and so the GPU) is x, bit for bit. */
  uint8_t *back = malloc(raw + 1);
  cr_assert_eq(fz_decompress(a, len, back, raw, &ol, 1), 0, "%s", what);
  cr_assert(memcmp(back, x, raw) == 0, "%s: not lossless", what);
  free(back);
  gpu_same(s, t, x, pipe, FZ_EB_ABS, 0, chunk, a, len, off ? 3 : 0, what);
  free(a);
}

static void planes_sweep(unsigned chunk) {
  const gen_kind kinds[] = {GEN_SMOOTH, GEN_NOISE, GEN_CONST, GEN_SPECIAL};
  for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
    for (size_t ti = 0; ti < sizeof planes_types / sizeof *planes_types; ti++)
      for (size_t k = 0; k < 4; k++) {
        const shape *s = &shapes[si];
        fz_dtype t = planes_types[ti];
        void *x = field(s, t, kinds[k], si * 31 + k);
        char what[160];
        snprintf(what, sizeof what, "lossless-ratio %s shape %zu kind %zu chunk %u",
                 fz_dtype_name(t), si, k, chunk);
        planes_case(s, t, x, "lossless-ratio", chunk, 0, what);
        /* Fewer dims than the shape; output and archive off alignment. */
        if (k == 0) {
          planes_case(s, t, x, "lorenzo(dims=1) | byteplanes", chunk, 1, what);
        }
        free(x);
      }
}

Test(ratio, lossless_ratio_default_chunks, .timeout = 600) { planes_sweep(0); }
Test(ratio, lossless_ratio_small_chunks, .timeout = 600) { planes_sweep(4096); }

/* The zero planes, planes kept as they are and coded planes in one chunk,
 * on every byte of the payload edited, and cuts: the CPU's error. */
Test(ratio, lossless_ratio_hostile, .timeout = 600) {
  shape s = {3, {6, 20, 30}};
  static const fz_dtype types[] = {FZ_F32, FZ_I64};
  for (size_t i = 0; i < 2; i++) {
    size_t w = fz_dtype_size(types[i]), len;
    void *x = field(&s, types[i], GEN_SMOOTH, 11);
    uint8_t *a = cpu_archive(&s, types[i], x, "lossless-ratio", FZ_EB_ABS, 0, 4096, &len);
    hostile(a, len, 3600 * w, 1, fz_dtype_name(types[i]));
    free(a);
    free(x);
  }
}

/* NVRTC's build of the kernels codes the chain too. */
Test(ratio, lossless_ratio_generated_kernels_only, .timeout = 600) {
  char why[512] = "";
  fz_gpu_ctx *ctx = NULL;
  cr_assert_eq(fz_gpu_ctx_create(NULL, 2, &ctx, why, sizeof why), 0, "%s", why);
  cr_assert_eq(fz_gpu_ctx_jit_config(ctx, NULL, 0, FZ_GPU_JIT_ONLY, why, sizeof why), 0, "%s",
               why);
  ratio_ctx = ctx;
  shape s = {3, {17, 23, 29}};
  for (size_t ti = 0; ti < sizeof planes_types / sizeof *planes_types; ti++) {
    void *x = field(&s, planes_types[ti], GEN_SMOOTH, 50 + ti);
    char what[64];
    snprintf(what, sizeof what, "generated only, %s", fz_dtype_name(planes_types[ti]));
    planes_case(&s, planes_types[ti], x, "lossless-ratio", 0, 0, what);
    free(x);
  }
  fz_params p = params(&s, FZ_F32, "lossless-ratio", FZ_EB_ABS, 0, 0);
  fz_gpu_plan *pl = NULL;
  cr_assert_eq(fz_gpu_plan_create(ctx, &p, 0, &pl, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq(fz_gpu_plan_path(pl), "jit");
  fz_gpu_plan_destroy(pl);
  ratio_ctx = NULL;
  fz_gpu_ctx_destroy(ctx);
}

/* One archive of each width and a few edits: the case run.sh runs under
 * compute-sanitizer. */
Test(ratio, lossless_ratio_sanitizer_small) {
  shape s = {2, {37, 61}};
  static const fz_dtype types[] = {FZ_F32, FZ_U64};
  for (size_t i = 0; i < 2; i++) {
    size_t raw = 37 * 61 * fz_dtype_size(types[i]), len;
    void *x = field(&s, types[i], GEN_SPECIAL, 9);
    planes_case(&s, types[i], x, "lossless-ratio", 4096, 1, "sanitizer");
    uint8_t *a = cpu_archive(&s, types[i], x, "lossless-ratio", FZ_EB_ABS, 0, 4096, &len);
    uint8_t *b = malloc(len);
    for (size_t at = len / 3; at < len; at += len / 5) {
      memcpy(b, a, len);
      b[at] ^= 0x5a;
      reseal(b, len);
      both(b, len, raw, 0, "edited");
    }
    free(b);
    free(a);
    free(x);
  }
}
