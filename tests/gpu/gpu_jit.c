/*
 * gpu_jit.c - kernels generated at run time on a real GPU: for every chain
 * shape of the generic chunk family and of the 4- and 8-byte word
 * families, dtype and error mode, on smooth, noisy and special-value
 * data, the generated kernels' archives are byte for byte the CPU
 * engine's, decode bit for bit, and the plan and the decoder say "jit";
 * with the JIT off they say "aot" and the bytes are the same.  A second
 * plan of a chain compiles and loads nothing; a missing NVRTC leaves the
 * ahead-of-time kernels (for an 8-byte word coder chain64.cu did not
 * build, the generic family's), and its text is handed out once.
 */
#include <criterion/criterion.h>
#include <stdio.h>

#include "fzk.h"
#include "launch.h"
#include "gpu_util.h"

typedef struct chain_case {
  const char *chain;
  fz_dtype dtype;
} chain_case;

static const chain_case chains[] = {
    {"quant | diff | rze", FZ_F32},
    {"quant | diff | bitpack", FZ_F32},
    {"diff | rze", FZ_F32},
    {"quant | bitshuffle | rze", FZ_F32},
    {"balanced", FZ_F64},
    {"fast", FZ_F64},
    {"quant | diff | rze", FZ_F64},
    {"quant | diff(map=negabinary) | bitshuffle | rze(levels=6)", FZ_F64},
    {"lossless", FZ_U8},
    {"lossless", FZ_U16},
    {"diff | bitpack", FZ_I16},
    {"bitshuffle | rze(levels=2)", FZ_U8},
    {"balanced", FZ_F32},
    {"fast", FZ_F32},
    {"quant | diff | bitpack", FZ_F64},
    {"diff | rze", FZ_U64},
    {"lossless", FZ_I64},
};
#define NCHAINS (sizeof chains / sizeof chains[0])

/* The coder of an 8-byte word chain of the word family (FZK_C32_*), or 0. */
static unsigned coder64(const chain_case *c) {
  if (fz_dtype_size(c->dtype) != 8)
    return 0;
  if (strcmp(c->chain, "fast") == 0 || strstr(c->chain, "bitpack") != NULL)
    return 1;
  if (strstr(c->chain, "bitshuffle") != NULL || strcmp(c->chain, "balanced") == 0 ||
      strcmp(c->chain, "lossless") == 0)
    return 2;
  return 3;
}

/* The path a plan of the chain takes with the JIT on: the built-in kernel
 * where it is as specialised as a generated one, or on 8-byte words where
 * chain64.cu built the coder (fzk_jit_preferred). */
static const char *expected_path(const chain_case *c) {
  if (c->dtype == FZ_F32 && strcmp(c->chain, "fast") == 0)
    return "aot";
  unsigned k = coder64(c);
  return k && ((fzk_chain64_coders() >> k) & 1u) ? "aot" : "jit";
}

static fz_gpu_ctx *ctx_with_jit(int enabled) {
  fz_gpu_ctx *ctx = NULL;
  char why[256] = "";
  int rc = fz_gpu_ctx_create(NULL, 2, &ctx, why, sizeof why);
  cr_assert_eq(rc, 0, "fz_gpu_ctx_create: %s", why);
  rc = fz_gpu_ctx_jit_config(ctx, NULL, 0, enabled, why, sizeof why);
  cr_assert_eq(rc, 0, "fz_gpu_ctx_jit_config: %s", why);
  return ctx;
}

/* Compresses on ctx; the archive (host copy, malloc'd) and the plan's path. */
static uint8_t *gpu_archive(fz_gpu_ctx *ctx, const fz_params *p, const void *d_in, size_t in_len,
                            size_t *len, char *path, size_t path_len) {
  char why[512] = "";
  fz_gpu_plan *gp;
  int rc = fz_gpu_plan_create(ctx, p, 0, &gp, why, sizeof why);
  cr_assert_eq(rc, 0, "fz_gpu_plan_create: %s", why);
  size_t bound = fz_gpu_plan_compress_bound(gp);
  void *d_arc;
  CUDA_OK(cudaMalloc(&d_arc, bound));
  rc = fz_gpu_compress(gp, d_in, in_len, d_arc, bound, len, NULL, why, sizeof why);
  cr_assert_eq(rc, 0, "fz_gpu_compress: %s %s", fz_err_name(rc), why);
  uint8_t *a = malloc(*len ? *len : 1);
  CUDA_OK(cudaMemcpy(a, d_arc, *len, cudaMemcpyDeviceToHost));
  snprintf(path, path_len, "%s", fz_gpu_plan_path(gp));
  cudaFree(d_arc);
  fz_gpu_plan_destroy(gp);
  return a;
}

/* Decodes the archive on ctx through a decoder; the output must be
 * out_ref's bytes.  The decoder's path to path. */
static void gpu_decode(fz_gpu_ctx *ctx, const uint8_t *a, size_t len, const uint8_t *out_ref,
                       size_t raw, char *path, size_t path_len) {
  char why[512] = "";
  fz_gpu_decoder *dec;
  cr_assert_eq(fz_gpu_decoder_create(ctx, &dec, why, sizeof why), 0, "%s", why);
  void *d_arc = to_device(a, len), *d_out;
  CUDA_OK(cudaMalloc(&d_out, raw ? raw : 1));
  int rc = fz_gpu_decoder_open(dec, d_arc, len, NULL, NULL, why, sizeof why);
  cr_assert_eq(rc, 0, "decoder_open: %s", why);
  size_t ol = 0;
  rc = fz_gpu_decoder_run(dec, d_out, raw, &ol, NULL, why, sizeof why);
  cr_assert_eq(rc, 0, "decoder_run: %s %s", fz_err_name(rc), why);
  cr_assert_eq(ol, raw);
  uint8_t *o = malloc(raw ? raw : 1);
  if (raw)
    CUDA_OK(cudaMemcpy(o, d_out, raw, cudaMemcpyDeviceToHost));
  cr_assert(memcmp(o, out_ref, raw) == 0, "GPU decode differs from the CPU's");
  snprintf(path, path_len, "%s", fz_gpu_decoder_path(dec));
  free(o);
  cudaFree(d_arc);
  cudaFree(d_out);
  fz_gpu_decoder_destroy(dec);
}

/* One chain on one dataset and mode: CPU, JIT and AOT archives are the
 * same bytes, and each decodes to the CPU's output. */
static void triple(fz_gpu_ctx *jit, fz_gpu_ctx *aot, const chain_case *c, fz_eb_mode mode,
                   double eb, const void *h_in, size_t n, int *jit_seen) {
  size_t w = fz_dtype_size(c->dtype), in_len = n * w;
  fz_params p;
  fzt_params_1d(&p, c->dtype, n, c->chain);
  p.eb = (c->dtype == FZ_F32 || c->dtype == FZ_F64) ? eb : 0;
  p.eb_mode = mode;
  p.threads = 8;
  char why[256] = "";
  fz_plan *cpu;
  cr_assert_eq(fz_plan_create(&p, &cpu, why, sizeof why), 0, "%s", why);
  size_t bound = fz_plan_compress_bound(cpu), cpu_len = 0;
  uint8_t *a_cpu = malloc(bound);
  cr_assert_eq(fz_plan_compress(cpu, h_in, in_len, a_cpu, bound, &cpu_len), 0);
  uint8_t *o_cpu = malloc(in_len + 1);
  size_t ol = 0;
  cr_assert_eq(fz_decompress(a_cpu, cpu_len, o_cpu, in_len, &ol, 8), 0);

  void *d_in = to_device(h_in, in_len);
  size_t jl = 0, al = 0;
  char jpath[8], apath[8];
  uint8_t *a_jit = gpu_archive(jit, &p, d_in, in_len, &jl, jpath, sizeof jpath);
  uint8_t *a_aot = gpu_archive(aot, &p, d_in, in_len, &al, apath, sizeof apath);
  cr_assert_str_eq(apath, "aot", "the JIT is off");
  cr_assert(jl == cpu_len && memcmp(a_jit, a_cpu, cpu_len) == 0,
            "%s on %s (%s, %s, n=%zu): the %s archive (%zu bytes) is not the CPU's (%zu)",
            c->chain, fz_dtype_name(c->dtype), fz_eb_mode_name(mode), jpath, n, jpath, jl,
            cpu_len);
  cr_assert(al == cpu_len && memcmp(a_aot, a_cpu, cpu_len) == 0,
            "%s on %s: the aot archive is not the CPU's", c->chain, fz_dtype_name(c->dtype));
  char djit[8], daot[8];
  gpu_decode(jit, a_cpu, cpu_len, o_cpu, in_len, djit, sizeof djit);
  gpu_decode(aot, a_cpu, cpu_len, o_cpu, in_len, daot, sizeof daot);
  cr_assert_str_eq(daot, "aot");
  /* Both directions take the same path. */
  cr_assert_str_eq(djit, jpath, "%s on %s: decode %s, encode %s", c->chain,
                   fz_dtype_name(c->dtype), djit, jpath);
  *jit_seen |= strcmp(jpath, "jit") == 0;
  cudaFree(d_in);
  free(a_cpu);
  free(a_jit);
  free(a_aot);
  free(o_cpu);
  fz_plan_destroy(cpu);
}

static void sweep(unsigned idx) {
  const chain_case *c = &chains[idx];
  /* An 8-byte word chain the built-in kernels serve with the JIT on is
   * swept with every kernel generated, so that its generated kernel is
   * checked against the built-in one too. */
  const int only = coder64(c) && strcmp(expected_path(c), "aot") == 0;
  fz_gpu_ctx *jit = ctx_with_jit(only ? FZ_GPU_JIT_ONLY : 1), *aot = ctx_with_jit(0);
  size_t per_chunk = FZ_CHUNK_DEFAULT / fz_dtype_size(c->dtype);
  const size_t sizes[] = {1, per_chunk - 1, per_chunk, 3 * per_chunk + 5, 100003};
  const gen_kind kinds[] = {GEN_SMOOTH, GEN_NOISE, GEN_SPECIAL};
  const fz_eb_mode modes[] = {FZ_EB_ABS, FZ_EB_REL, FZ_EB_PWREL};
  int seen = 0;
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
    for (size_t ki = 0; ki < 3; ki++) {
      void *x = gen_data(c->dtype, sizes[si], kinds[ki], 17 * si + ki + idx);
      for (size_t mi = 0; mi < ((c->dtype == FZ_F32 || c->dtype == FZ_F64) ? 3u : 1u); mi++)
        triple(jit, aot, c, modes[mi], mi == 2 ? 1e-2 : 1e-3, x, sizes[si], &seen);
      free(x);
    }
  /* Every chain but `fast` on f32 and the 8-byte word chains chain64.cu
   * built runs its generated kernels. */
  fz_gpu_ctx *dflt = only ? ctx_with_jit(1) : jit;
  fz_params p;
  fzt_params_1d(&p, c->dtype, 1000, c->chain);
  p.eb = c->dtype == FZ_F32 || c->dtype == FZ_F64 ? 1e-3 : 0;
  fz_gpu_plan *gp;
  char why[256] = "";
  cr_assert_eq(fz_gpu_plan_create(dflt, &p, 0, &gp, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq(fz_gpu_plan_path(gp), expected_path(c), "%s on %s", c->chain,
                   fz_dtype_name(c->dtype));
  fz_gpu_plan_destroy(gp);
  cr_assert_eq(seen, only || strcmp(expected_path(c), "jit") == 0,
               "%s on %s ran generated kernels", c->chain, fz_dtype_name(c->dtype));
  char fail[2048] = "";
  cr_assert_eq(fz_gpu_ctx_jit_failure(jit, fail, sizeof fail), 0, "no JIT failure: %s", fail);
  if (dflt != jit)
    fz_gpu_ctx_destroy(dflt);
  fz_gpu_ctx_destroy(jit);
  fz_gpu_ctx_destroy(aot);
}

#define CHAIN_TEST(i) \
  Test(gpu_jit, chain##i, .timeout = 900) { sweep(i); }
CHAIN_TEST(0)
CHAIN_TEST(1)
CHAIN_TEST(2)
CHAIN_TEST(3)
CHAIN_TEST(4)
CHAIN_TEST(5)
CHAIN_TEST(6)
CHAIN_TEST(7)
CHAIN_TEST(8)
CHAIN_TEST(9)
CHAIN_TEST(10)
CHAIN_TEST(11)
CHAIN_TEST(12)
CHAIN_TEST(13)
CHAIN_TEST(14)
CHAIN_TEST(15)
CHAIN_TEST(16)

Test(gpu_jit, every_chain_has_a_test) { cr_assert_eq(NCHAINS, 17); }

/* The second plan of a chain (another shape) neither compiles nor loads;
 * another chain does both. */
Test(gpu_jit, second_plan_reuses_the_module) {
  fz_gpu_ctx *ctx = ctx_with_jit(1);
  fz_params p;
  char why[512] = "";
  fz_gpu_plan *a, *b, *c;
  fzt_params_1d(&p, FZ_F32, 100000, "quant | diff | rze");
  p.eb = 1e-3;
  cr_assert_eq(fz_gpu_plan_create(ctx, &p, 0, &a, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq(fz_gpu_plan_path(a), "jit");
  fz_gpu_jit_counts c1, c2, c3;
  fz_gpu_ctx_jit_counts(ctx, &c1);
  cr_assert_eq(c1.compiles, 1);
  cr_assert_eq(c1.modules_loaded, 1);
  cr_assert_gt(c1.compile_us, 0);
  fzt_params_1d(&p, FZ_F32, 7777777, "quant | diff | rze");
  p.eb = 1e-3;
  cr_assert_eq(fz_gpu_plan_create(ctx, &p, 0, &b, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq(fz_gpu_plan_path(b), "jit");
  fz_gpu_ctx_jit_counts(ctx, &c2);
  cr_assert_eq(c2.compiles, 1, "the second plan compiles nothing");
  cr_assert_eq(c2.modules_loaded, 1, "and loads nothing");
  fzt_params_1d(&p, FZ_F32, 100000, "quant | diff | bitpack");
  p.eb = 1e-3;
  cr_assert_eq(fz_gpu_plan_create(ctx, &p, 0, &c, why, sizeof why), 0, "%s", why);
  fz_gpu_ctx_jit_counts(ctx, &c3);
  cr_assert_eq(c3.compiles, 2);
  cr_assert_eq(c3.modules_loaded, 2);
  fz_gpu_plan_destroy(a);
  fz_gpu_plan_destroy(b);
  fz_gpu_plan_destroy(c);
  /* Configuring after the first plan is refused. */
  cr_assert_eq(fz_gpu_ctx_jit_config(ctx, NULL, 0, 0, why, sizeof why), FZ_EINVAL);
  fz_gpu_ctx_destroy(ctx);
}

/* Every kernel generated, as on a GPU the built-in code cannot run on: the
 * same bytes, and the helper module besides each chain's. */
Test(gpu_jit, generated_only, .timeout = 900) {
  fz_gpu_ctx *only = ctx_with_jit(FZ_GPU_JIT_ONLY), *aot = ctx_with_jit(FZ_GPU_JIT_OFF);
  const unsigned picks[] = {0, 3, 4, 8, 12, 13};
  for (unsigned k = 0; k < sizeof picks / sizeof picks[0]; k++) {
    const chain_case *c = &chains[picks[k]];
    const size_t sizes[] = {0, 1, 3 * FZ_CHUNK_DEFAULT / fz_dtype_size(c->dtype) + 5, 200003};
    for (size_t si = 0; si < 4; si++) {
      void *x = gen_data(c->dtype, sizes[si], GEN_SPECIAL, si + k);
      int seen = 0;
      triple(only, aot, c, FZ_EB_REL, 1e-3, x, sizes[si], &seen);
      cr_assert(seen, "%s runs generated kernels", c->chain);
      free(x);
    }
  }
  fz_gpu_jit_counts n;
  fz_gpu_ctx_jit_counts(only, &n);
  cr_assert_eq(n.modules_loaded, 1 + 2 * (sizeof picks / sizeof picks[0]), "%llu modules",
               (unsigned long long)n.modules_loaded);
  char why[256];
  /* A GPU with built-in kernels may turn the JIT off, one without may not;
   * either way only before the first plan. */
  cr_assert_eq(fz_gpu_ctx_jit_config(only, NULL, 0, FZ_GPU_JIT_OFF, why, sizeof why), FZ_EINVAL);
  cr_assert_eq(fz_gpu_ctx_jit_config(only, NULL, 0, 3, why, sizeof why), FZ_EINVAL);
  fz_gpu_ctx_destroy(only);
  fz_gpu_ctx_destroy(aot);
}

/* Without NVRTC the ahead-of-time kernels serve, with the same bytes, and
 * the reason is handed out once. */
Test(gpu_jit, missing_nvrtc_falls_back) {
  setenv("FZ_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so", 1);
  fz_gpu_ctx *ctx = ctx_with_jit(1), *aot = ctx_with_jit(0);
  size_t n = 50000;
  void *x = gen_data(FZ_F32, n, GEN_SMOOTH, 5);
  int seen = 0;
  const chain_case c = {"quant | diff | rze", FZ_F32};
  triple(ctx, aot, &c, FZ_EB_REL, 1e-3, x, n, &seen);
  cr_assert_eq(seen, 0, "no generated kernel without NVRTC");
  /* 8-byte word chains whose coder chain64.cu may lack: the kernel that
   * runs is one the build has (the bytes would differ otherwise). */
  void *y = gen_data(FZ_F64, n, GEN_SMOOTH, 6);
  const chain_case c64[] = {{"fast", FZ_F64}, {"quant | diff | rze", FZ_F64},
                            {"balanced", FZ_F64}};
  for (unsigned k = 0; k < 3; k++) {
    triple(ctx, aot, &c64[k], FZ_EB_REL, 1e-3, y, n, &seen);
    cr_assert_eq(seen, 0, "%s: no generated kernel without NVRTC", c64[k].chain);
  }
  free(y);
  void *z = gen_data(FZ_U64, n, GEN_NOISE, 7);
  const chain_case cu = {"diff | rze", FZ_U64};
  triple(ctx, aot, &cu, FZ_EB_REL, 0, z, n, &seen);
  cr_assert_eq(seen, 0);
  free(z);
  char fail[2048] = "";
  cr_assert_eq(fz_gpu_ctx_jit_failure(ctx, fail, sizeof fail), 1);
  cr_assert_not_null(strstr(fail, "NVRTC not found"), "%s", fail);
  cr_assert_eq(fz_gpu_ctx_jit_failure(ctx, fail, sizeof fail), 0, "the text comes once");
  free(x);
  fz_gpu_ctx_destroy(ctx);
  fz_gpu_ctx_destroy(aot);
}
