/*
 * gpu_identity.c - the GPU backend against the CPU reference: for every
 * preset, error mode and data type, on sizes around the chunk boundaries and
 * on data full of NaN, Inf, -0.0 and denormals, the archives must be byte
 * for byte the same, and decoding on either backend bit for bit the same.
 */
#include <criterion/criterion.h>
#include <stdio.h>

#include "gpu_util.h"

static const fz_eb_mode modes[] = {FZ_EB_ABS, FZ_EB_REL, FZ_EB_PWREL};
static const gen_kind kinds[] = {GEN_SMOOTH, GEN_NOISE, GEN_SPECIAL};

static void sweep(fz_dtype t, const char *preset, unsigned chunk) {
  size_t per_chunk = (chunk ? chunk : FZ_CHUNK_DEFAULT) / fz_dtype_size(t);
  size_t sizes[] = {0, 1, 7, per_chunk - 1, per_chunk, per_chunk + 1, 3 * per_chunk + 5, 100003};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
    for (size_t ki = 0; ki < 3; ki++) {
      void *x = gen_data(t, sizes[si], kinds[ki], si * 31 + ki);
      for (size_t mi = 0; mi < 3; mi++) {
        const double ebs[] = {1e-2, 1e-4};
        for (size_t ei = 0; ei < 2; ei++)
          check_identity(t, preset, modes[mi], ebs[ei], chunk, x, sizes[si], 0);
      }
      free(x);
    }
}

Test(identity, fast_f32) { sweep(FZ_F32, "fast", 0); }
Test(identity, balanced_f32) { sweep(FZ_F32, "balanced", 0); }
Test(identity, fast_f64) { sweep(FZ_F64, "fast", 0); }
Test(identity, balanced_f64) { sweep(FZ_F64, "balanced", 0); }
Test(identity, balanced_f32_chunk32k) { sweep(FZ_F32, "balanced", 32768); }
Test(identity, fast_f32_chunk4k) { sweep(FZ_F32, "fast", 4096); }
Test(identity, fast_f32_chunk32k) { sweep(FZ_F32, "fast", 32768); }
Test(identity, balanced_f32_chunk4k) { sweep(FZ_F32, "balanced", 4096); }

/* The 4-byte word kernels on a few shapes, small enough for the sanitizers:
 * every chain they take, partial blocks, outliers, u32 and i32 words. */
Test(identity, word32_small) {
  const char *chains[] = {"fast", "balanced", "lossless", "bitpack",
                          "quant | diff(map=negabinary) | bitshuffle | rze(levels=1)",
                          "quant(mode=pwrel) | bitshuffle | rze(levels=5)"};
  const size_t sizes[] = {1, 33, 4096, 3 * 4096 + 77};
  for (size_t c = 0; c < sizeof chains / sizeof chains[0]; c++)
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
      for (size_t ki = 0; ki < 3; ki++) {
        void *x = gen_data(FZ_F32, sizes[si], kinds[ki], 11 * si + ki);
        /* A chain's own mode is the job's (one bound per job). */
        fz_eb_mode mode = strstr(chains[c], "pwrel") ? FZ_EB_PWREL : FZ_EB_REL;
        check_identity(FZ_F32, chains[c], mode, 1e-3, 0, x, sizes[si], 0);
        free(x);
      }
  const fz_dtype ints[] = {FZ_U32, FZ_I32};
  for (size_t ti = 0; ti < 2; ti++) {
    void *x = gen_data(ints[ti], 10001, GEN_NOISE, ti);
    check_identity(ints[ti], "lossless", FZ_EB_REL, 1e-3, 0, x, 10001, 0);
    check_identity(ints[ti], "bitpack", FZ_EB_REL, 1e-3, 0, x, 10001, 0);
    free(x);
  }
}

/* The user chains of the 4-byte word kernels (chain32_select.c says which):
 * diff before bitpack, and rze on the words without bitshuffle, each with
 * both maps, several rze levels, every mode, sizes around the chunk and
 * block boundaries, and data with NaN, Inf, -0.0 and denormals. */
static const char *const quant_chains32[] = {
    "quant | diff | bitpack",
    "quant | diff(map=negabinary) | bitpack",
    "quant | diff | rze",
    "quant | diff(map=negabinary) | rze(levels=1)",
    "quant | diff | rze(levels=2)",
    "quant | diff(map=negabinary) | rze(levels=6)",
    "quant | rze",
    "quant | rze(levels=1)",
    "quant | bitshuffle | rze",
};
static const char *const lossless_chains32[] = {
    "diff | rze", "diff(map=negabinary) | rze(levels=3)", "rze(levels=1)", "rze",
    "diff | bitpack", "diff(map=negabinary) | bitpack",
};

static void sweep_chains32(unsigned chunk) {
  const gen_kind all[] = {GEN_SMOOTH, GEN_NOISE, GEN_SPECIAL, GEN_CONST};
  size_t per_chunk = (chunk ? chunk : FZ_CHUNK_DEFAULT) / 4;
  size_t sizes[] = {1, 7, 33, per_chunk - 1, per_chunk, per_chunk + 1, 3 * per_chunk + 5};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
    for (size_t ki = 0; ki < 4; ki++) {
      void *x = gen_data(FZ_F32, sizes[si], all[ki], si * 13 + ki);
      for (size_t c = 0; c < sizeof quant_chains32 / sizeof quant_chains32[0]; c++)
        for (size_t mi = 0; mi < 3; mi++)
          check_identity(FZ_F32, quant_chains32[c], modes[mi], mi == 1 ? 1e-3 : 1e-2, chunk, x,
                         sizes[si], 0);
      for (size_t c = 0; c < sizeof lossless_chains32 / sizeof lossless_chains32[0]; c++)
        check_identity(FZ_F32, lossless_chains32[c], FZ_EB_REL, 1e-3, chunk, x, sizes[si], 0);
      free(x);
      const fz_dtype ints[] = {FZ_U32, FZ_I32};
      for (size_t ti = 0; ti < 2; ti++) {
        void *y = gen_data(ints[ti], sizes[si], all[ki], si * 17 + ki + ti);
        for (size_t c = 0; c < sizeof lossless_chains32 / sizeof lossless_chains32[0]; c++)
          check_identity(ints[ti], lossless_chains32[c], FZ_EB_REL, 1e-3, chunk, y, sizes[si], 0);
        free(y);
      }
    }
}

/* A few shapes of every user chain, small enough for the sanitizers. */
Test(identity, user_chains32_small) {
  const size_t sizes[] = {1, 33, 4096 + 77, 3 * 4096 + 5};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    void *x = gen_data(FZ_F32, sizes[si], GEN_SPECIAL, si);
    for (size_t c = 0; c < sizeof quant_chains32 / sizeof quant_chains32[0]; c++)
      check_identity(FZ_F32, quant_chains32[c], FZ_EB_REL, 1e-3, 0, x, sizes[si], 0);
    for (size_t c = 0; c < sizeof lossless_chains32 / sizeof lossless_chains32[0]; c++)
      check_identity(FZ_I32, lossless_chains32[c], FZ_EB_REL, 1e-3, 0, x, sizes[si], 0);
    free(x);
  }
}

Test(identity, user_chains32) { sweep_chains32(0); }
Test(identity, user_chains32_chunk4k) { sweep_chains32(4096); }

/* Tight and loose bounds (many outliers, few codes), and a long input of
 * many chunks placed by the look-back. */
Test(identity, user_chains32_bounds) {
  void *x = gen_data(FZ_F32, 300001, GEN_SMOOTH, 9);
  void *z = gen_data(FZ_F32, 300001, GEN_SPECIAL, 10);
  for (size_t c = 0; c < sizeof quant_chains32 / sizeof quant_chains32[0]; c++) {
    check_identity(FZ_F32, quant_chains32[c], FZ_EB_ABS, 1e-7, 0, x, 300001, 0);
    check_identity(FZ_F32, quant_chains32[c], FZ_EB_REL, 0.5, 0, x, 300001, 0);
    check_identity(FZ_F32, quant_chains32[c], FZ_EB_PWREL, 1e-6, 0, z, 300001, 0);
    check_identity(FZ_F32, quant_chains32[c], FZ_EB_REL, 1e-4, 0, z, 300001, FZ_GPU_PREALLOC);
  }
  free(x);
  free(z);
}

/* The 8-byte word kernels (chain64.cu): every chain [quant] [diff]
 * bitshuffle | rze on f64, u64 and i64, both maps, rze levels 1 to 6,
 * every mode, sizes around the chunk and block boundaries (one element,
 * partial 32-word blocks and planes of fewer than 4 bytes), constant
 * fields, noise, and data with NaN payloads, Inf, -0.0 and denormals; and
 * the same for bitpack and rze on the words, which run on those kernels
 * when the build has them (FZ_CHAIN64_ALL), else on the generic ones. */
static const char *const quant_chains64[] = {
    "balanced",
    "quant | diff(map=negabinary) | bitshuffle | rze(levels=1)",
    "quant | bitshuffle | rze",
    "quant | diff | bitshuffle | rze(levels=2)",
    "quant | diff(map=negabinary) | bitshuffle | rze(levels=6)",
};
static const char *const lossless_chains64[] = {
    "lossless", "diff(map=negabinary) | bitshuffle | rze(levels=3)", "bitshuffle | rze(levels=1)",
};
static const char *const quant_coders64[] = {
    "fast",
    "quant | diff | bitpack",
    "quant | diff(map=negabinary) | bitpack",
    "quant | diff | rze",
    "quant | rze(levels=1)",
    "quant | diff(map=negabinary) | rze(levels=6)",
};
static const char *const lossless_coders64[] = {
    "bitpack", "diff | bitpack", "diff(map=negabinary) | rze(levels=2)", "rze",
};

static void sweep64(unsigned chunk, const char *const *qc, size_t nq, const char *const *lc,
                    size_t nl) {
  const gen_kind all[] = {GEN_SMOOTH, GEN_NOISE, GEN_SPECIAL, GEN_CONST};
  size_t per_chunk = (chunk ? chunk : FZ_CHUNK_DEFAULT) / 8;
  size_t sizes[] = {1, 7, 33, 257, per_chunk - 1, per_chunk, per_chunk + 1, 3 * per_chunk + 5};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
    for (size_t ki = 0; ki < 4; ki++) {
      void *x = gen_data(FZ_F64, sizes[si], all[ki], si * 13 + ki);
      for (size_t c = 0; c < nq; c++)
        for (size_t mi = 0; mi < 3; mi++)
          check_identity(FZ_F64, qc[c], modes[mi], mi == 1 ? 1e-3 : 1e-2, chunk, x, sizes[si], 0);
      for (size_t c = 0; c < nl; c++)
        check_identity(FZ_F64, lc[c], FZ_EB_REL, 1e-3, chunk, x, sizes[si], 0);
      free(x);
      const fz_dtype ints[] = {FZ_U64, FZ_I64};
      for (size_t ti = 0; ti < 2; ti++) {
        void *y = gen_data(ints[ti], sizes[si], all[ki], si * 17 + ki + ti);
        for (size_t c = 0; c < nl; c++)
          check_identity(ints[ti], lc[c], FZ_EB_REL, 1e-3, chunk, y, sizes[si], 0);
        free(y);
      }
    }
}

#define N64(a) (sizeof(a) / sizeof((a)[0]))
static void sweep_chains64(unsigned chunk) {
  sweep64(chunk, quant_chains64, N64(quant_chains64), lossless_chains64, N64(lossless_chains64));
}
static void sweep_coders64(unsigned chunk) {
  sweep64(chunk, quant_coders64, N64(quant_coders64), lossless_coders64, N64(lossless_coders64));
}

/* A few shapes of each, small enough for the sanitizers. */
Test(identity, word64_small) {
  const size_t sizes[] = {1, 33, 2048 + 77, 3 * 2048 + 5};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    void *x = gen_data(FZ_F64, sizes[si], GEN_SPECIAL, si);
    for (size_t c = 0; c < N64(quant_chains64); c++)
      check_identity(FZ_F64, quant_chains64[c], FZ_EB_REL, 1e-3, 0, x, sizes[si], 0);
    for (size_t c = 0; c < N64(quant_coders64); c++)
      check_identity(FZ_F64, quant_coders64[c], FZ_EB_REL, 1e-3, 0, x, sizes[si], 0);
    for (size_t c = 0; c < N64(lossless_chains64); c++)
      check_identity(FZ_I64, lossless_chains64[c], FZ_EB_REL, 1e-3, 0, x, sizes[si], 0);
    for (size_t c = 0; c < N64(lossless_coders64); c++)
      check_identity(FZ_I64, lossless_coders64[c], FZ_EB_REL, 1e-3, 0, x, sizes[si], 0);
    free(x);
  }
}

Test(identity, chains64) { sweep_chains64(0); }
Test(identity, chains64_chunk4k) { sweep_chains64(4096); }
Test(identity, chains64_chunk32k) { sweep_chains64(32768); }
Test(identity, coders64) { sweep_coders64(0); }
Test(identity, coders64_chunk4k) { sweep_coders64(4096); }
Test(identity, coders64_chunk32k) { sweep_coders64(32768); }

/* Tight and loose bounds (every value an outlier, so raw chunks; few
 * codes), huge magnitudes, and long inputs of many chunks placed by the
 * look-back, with the preallocated workspace too. */
Test(identity, chains64_bounds) {
  void *x = gen_data(FZ_F64, 300001, GEN_SMOOTH, 9);
  void *z = gen_data(FZ_F64, 300001, GEN_SPECIAL, 10);
  for (size_t c = 0; c < N64(quant_chains64) + N64(quant_coders64); c++) {
    const char *ch = c < N64(quant_chains64) ? quant_chains64[c]
                                             : quant_coders64[c - N64(quant_chains64)];
    check_identity(FZ_F64, ch, FZ_EB_ABS, 1e-13, 0, x, 300001, 0);
    check_identity(FZ_F64, ch, FZ_EB_ABS, 1e-300, 0, x, 300001, 0);
    check_identity(FZ_F64, ch, FZ_EB_REL, 0.5, 0, x, 300001, 0);
    check_identity(FZ_F64, ch, FZ_EB_PWREL, 1e-9, 0, z, 300001, 0);
    check_identity(FZ_F64, ch, FZ_EB_REL, 1e-6, 0, z, 300001, FZ_GPU_PREALLOC);
  }
  free(x);
  free(z);
}

Test(identity, lossless_every_dtype) {
  const fz_dtype types[] = {FZ_U8, FZ_I8, FZ_U16, FZ_I16, FZ_U32, FZ_I32,
                            FZ_U64, FZ_I64, FZ_F32, FZ_F64};
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    size_t per_chunk = FZ_CHUNK_DEFAULT / fz_dtype_size(types[ti]);
    size_t sizes[] = {0, 1, 7, per_chunk - 1, per_chunk, per_chunk + 1, 70001};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
      for (size_t ki = 0; ki < 3; ki++) {
        void *x = gen_data(types[ti], sizes[si], kinds[ki], si * 7 + ki);
        check_identity(types[ti], "lossless", FZ_EB_REL, 1e-3, 0, x, sizes[si], 0);
        free(x);
      }
  }
}

/* Chains beyond the presets: each stage alone and in other orders. */
Test(identity, other_chains) {
  const char *chains[] = {"quant | diff | rze", "quant | diff | bitpack", "quant | bitshuffle | rze",
                          "quant | rze(levels=1)", "quant | diff(map=negabinary) | bitshuffle | rze(levels=6)",
                          "quant | diff | diff | bitpack", "diff | bitpack", "bitshuffle | rze(levels=2)",
                          "diff(map=negabinary) | rze"};
  const fz_dtype types[] = {FZ_F32, FZ_F64};
  for (size_t c = 0; c < sizeof chains / sizeof chains[0]; c++)
    for (size_t ti = 0; ti < 2; ti++) {
      size_t n = 2 * 4096 + 333;
      void *x = gen_data(types[ti], n, GEN_SMOOTH, c);
      check_identity(types[ti], chains[c], FZ_EB_REL, 1e-3, 0, x, n, 0);
      free(x);
    }
  const fz_dtype ints[] = {FZ_U8, FZ_I16, FZ_I64};
  for (size_t ti = 0; ti < 3; ti++) {
    void *x = gen_data(ints[ti], 50001, GEN_SMOOTH, ti);
    check_identity(ints[ti], "diff | bitpack", FZ_EB_REL, 1e-3, 0, x, 50001, 0);
    check_identity(ints[ti], "bitshuffle | rze(levels=3)", FZ_EB_REL, 1e-3, 0, x, 50001, 0);
    free(x);
  }
}

Test(identity, constant_and_tiny_bounds) {
  void *c = gen_data(FZ_F32, 20000, GEN_CONST, 1);
  check_identity(FZ_F32, "balanced", FZ_EB_REL, 1e-3, 0, c, 20000, 0); /* lossless REL */
  check_identity(FZ_F32, "fast", FZ_EB_ABS, 1e-3, 0, c, 20000, 0);
  free(c);
  void *x = gen_data(FZ_F32, 20000, GEN_SMOOTH, 2);
  check_identity(FZ_F32, "balanced", FZ_EB_ABS, 1e-300, 0, x, 20000, 0);
  check_identity(FZ_F32, "fast", FZ_EB_PWREL, 1e-9, 0, x, 20000, 0);
  check_identity(FZ_F32, "balanced", FZ_EB_REL, 0.5, 0, x, 20000, 0);
  free(x);
}

/* The preallocating mode reuses one workspace across jobs. */
Test(identity, prealloc_repeated) {
  void *x = gen_data(FZ_F32, 300000, GEN_SMOOTH, 5);
  for (int r = 0; r < 3; r++)
    check_identity(FZ_F32, "balanced", FZ_EB_REL, 1e-3, 0, x, 300000, FZ_GPU_PREALLOC);
  free(x);
}

/* The kernels have no fill values yet: a GPU plan for such a chain is
 * refused with FZ_ENOSYS (fzd then runs the CPU engine), never made into
 * archives without the fill. */
Test(identity, fill_values_are_not_the_kernels) {
  fz_params p;
  fz_params_init(&p);
  p.dtype = FZ_F32;
  p.ndims = 1;
  p.dims[0] = 4096;
  p.eb = 1e-3;
  p.has_fill = 1;
  p.fill_value = -1e10;
  fz_gpu_plan *pl = NULL;
  char why[256] = "";
  cr_assert_eq(fz_gpu_plan_create(test_ctx(), &p, 0, &pl, why, sizeof why), FZ_ENOSYS, "%s", why);
  cr_assert_null(pl);
  cr_assert(strstr(why, "fill") != NULL, "%s", why);
}

/* A REL bound whose product with the data's range is beyond what the
 * quantizer takes: the CPU refuses it with FZ_EBOUND, and so does the GPU,
 * which finds the range on the device. */
Test(identity, rel_bound_beyond_the_range_is_refused) {
  const size_t n = 20000;
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(1e9 * sin(0.001 * (double)i));
  fz_params p;
  fz_params_init(&p);
  p.dtype = FZ_F32;
  p.ndims = 1;
  p.dims[0] = n;
  p.eb = 1e299;
  p.eb_mode = FZ_EB_REL;
  char why[256] = "", gwhy[256] = "";
  fz_plan *cpu;
  cr_assert_eq(fz_plan_create(&p, &cpu, why, sizeof why), 0, "%s", why);
  size_t cap = fz_plan_compress_bound(cpu), len = 0;
  void *arc = malloc(cap);
  cr_assert_eq(fz_plan_compress(cpu, x, n * sizeof *x, arc, cap, &len), FZ_EBOUND);
  fz_gpu_plan *gpu;
  cr_assert_eq(fz_gpu_plan_create(test_ctx(), &p, 0, &gpu, gwhy, sizeof gwhy), 0, "%s", gwhy);
  void *d_x, *d_arc;
  cr_assert_eq(cudaMalloc(&d_x, n * sizeof *x), cudaSuccess);
  cr_assert_eq(cudaMalloc(&d_arc, cap), cudaSuccess);
  cr_assert_eq(cudaMemcpy(d_x, x, n * sizeof *x, cudaMemcpyHostToDevice), cudaSuccess);
  int rc = fz_gpu_compress(gpu, d_x, n * sizeof *x, d_arc, cap, &len, NULL, gwhy, sizeof gwhy);
  cr_assert_eq(rc, FZ_EBOUND, "the GPU gave %s: %s", fz_err_name(rc), gwhy);
  cr_assert_str_eq(gwhy, fz_plan_error(cpu), "the GPU's message differs from the CPU's");
  cudaFree(d_x);
  cudaFree(d_arc);
  fz_gpu_plan_destroy(gpu);
  fz_plan_destroy(cpu);
  free(arc);
  free(x);
}

/* ---- a decoder's series: one wait for an archive like the last ones ---- */

/* The CPU engine's archive of n values of x scaled by s, REL 1e-3 (each
 * scale a range of its own, so a bound and step of its own). */
static uint8_t *series_archive(fz_dtype t, const char *preset, const void *x, size_t n,
                               double s, size_t *len) {
  const size_t w = fz_dtype_size(t);
  uint8_t *y = malloc(n * w);
  for (size_t i = 0; i < n; i++) {
    if (t == FZ_F32) {
      float v;
      memcpy(&v, (const uint8_t *)x + 4 * i, 4);
      v = (float)(v * s);
      memcpy(y + 4 * i, &v, 4);
    } else {
      double v;
      memcpy(&v, (const uint8_t *)x + 8 * i, 8);
      v *= s;
      memcpy(y + 8 * i, &v, 8);
    }
  }
  fz_params p;
  fzt_params_1d(&p, t, n, preset);
  p.eb = 1e-3;
  p.eb_mode = FZ_EB_REL;
  p.threads = 8;
  char why[256] = "";
  fz_plan *pl;
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), 0, "%s", why);
  size_t cap = fz_plan_compress_bound(pl);
  uint8_t *arc = malloc(cap);
  cr_assert_eq(fz_plan_compress(pl, y, n * w, arc, cap, len), 0);
  fz_plan_destroy(pl);
  free(y);
  return arc;
}

/* The archive decoded by dec (from device memory, into out_cap bytes of
 * device memory filled with 0xab first) against the CPU decoder: the same
 * result code and, on success, the same bytes; on failure not one byte of
 * the output written.  Returns the decoder's waits. */
/* With series_host, the decoder's host form (fz_gpu_decoder_decompress_host)
 * runs instead, and its pinned output holds the CPU decoder's bytes too. */
static bool series_host;

static unsigned series_check(fz_gpu_decoder *dec, const uint8_t *arc, size_t len, size_t out_cap,
                             int want_rc, const char *what) {
  uint8_t *h_out = malloc(out_cap + 1), *c_out = malloc(out_cap + 1);
  size_t c_len = 0, g_len = 0;
  int crc = fz_decompress(arc, len, c_out, out_cap, &c_len, 4);
  cr_assert_eq(crc, want_rc, "%s: the CPU decoder gives %s", what, fz_err_name(crc));
  void *d_arc = to_device(arc, len), *d_out = NULL;
  CUDA_OK(cudaMalloc(&d_out, out_cap));
  CUDA_OK(cudaMemset(d_out, 0xab, out_cap));
  fz_archive_info info;
  char why[256] = "";
  uint8_t *pinned = NULL;
  int grc;
  if (series_host) {
    CUDA_OK(cudaMallocHost((void **)&pinned, out_cap));
    grc = fz_gpu_decoder_decompress_host(dec, d_arc, len, d_out, out_cap, pinned, &g_len, &info,
                                         NULL, why, sizeof why);
  } else {
    grc = fz_gpu_decoder_decompress(dec, d_arc, len, d_out, out_cap, &g_len, &info, NULL, why,
                                    sizeof why);
  }
  cr_assert_eq(grc, crc, "%s: GPU %s (%s), CPU %s", what, fz_err_name(grc), why,
               fz_err_name(crc));
  CUDA_OK(cudaMemcpy(h_out, d_out, out_cap, cudaMemcpyDeviceToHost));
  if (crc == 0) {
    cr_assert_eq(g_len, c_len, "%s", what);
    cr_assert(memcmp(h_out, c_out, c_len) == 0, "%s: decoded bytes differ", what);
    if (pinned != NULL)
      cr_assert(memcmp(pinned, c_out, c_len) == 0, "%s: the host copy differs", what);
    fz_archive_info ci;
    cr_assert_eq(fz_archive_inspect(arc, len, &ci), 0);
    cr_assert_eq(info.raw_bytes, ci.raw_bytes, "%s", what);
    cr_assert_eq(info.eb_abs, ci.eb_abs, "%s: info of another archive", what);
  } else if (crc == FZ_ENOSPC) {
    size_t k = 0;
    while (k < out_cap && h_out[k] == 0xab)
      k++;
    cr_assert_eq(k, out_cap, "%s: byte %zu of a too small output written", what, k);
  }
  unsigned waits = fz_gpu_decoder_waits(dec);
  cudaFreeHost(pinned);
  cudaFree(d_arc);
  cudaFree(d_out);
  free(h_out);
  free(c_out);
  return waits;
}

static void series_of(fz_dtype t, const char *preset, size_t n) {
  fz_gpu_decoder *dec;
  char why[256] = "";
  cr_assert_eq(fz_gpu_decoder_create(test_ctx(), &dec, why, sizeof why), 0, "%s", why);
  const size_t w = fz_dtype_size(t), raw = n * w;
  void *x = gen_data(t, n, GEN_SMOOTH, 11);
  char what[160];
  /* Five arrays of one shape and chain, each of its own range: from the
   * third on, one wait each, and the bound and step the archive's own. */
  for (int k = 0; k < 5; k++) {
    size_t len;
    uint8_t *arc = series_archive(t, preset, x, n, 1.0 + 0.37 * k, &len);
    snprintf(what, sizeof what, "%s %s n=%zu, archive %d of a series", fz_dtype_name(t), preset,
             n, k);
    size_t predicted = fz_gpu_decoder_series_bytes(dec);
    cr_assert_eq(predicted, k < 2 ? 0 : raw, "%s: the series' size %zu", what, predicted);
    unsigned waits = series_check(dec, arc, len, raw, 0, what);
    cr_assert_eq(waits, k < 2 ? 2u : 1u, "%s: %u waits", what, waits);
    free(arc);
  }
  /* A longer array into the same output: refused, the output untouched. */
  size_t len;
  void *x2 = gen_data(t, n + 4096, GEN_SMOOTH, 12);
  uint8_t *arc = series_archive(t, preset, x2, n + 4096, 1.0, &len);
  snprintf(what, sizeof what, "%s %s n=%zu after the series", fz_dtype_name(t), preset, n + 4096);
  series_check(dec, arc, len, raw, FZ_ENOSPC, what);
  free(arc);
  /* The series again, then an archive of it with one byte of its prefix
   * changed in turn: in the dims, the mode, each quantizer double, the
   * payload's CRC: the CPU decoder's error, every time. */
  for (int k = 0; k < 3; k++) {
    uint8_t *a = series_archive(t, preset, x, n, 2.0 + k, &len);
    series_check(dec, a, len, raw, 0, "the series again");
    free(a);
  }
  const size_t q_off = 8 + 8 + 2; /* 1-D: the quantizer's mode byte */
  const size_t at[] = {9, q_off, q_off + 3, q_off + 12, q_off + 20, q_off + 25 + 1};
  for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
    size_t la, lb;
    uint8_t *a = series_archive(t, preset, x, n, 3.0, &la);
    uint8_t *b = series_archive(t, preset, x, n, 3.5, &lb);
    series_check(dec, a, la, raw, 0, "a member");
    series_check(dec, a, la, raw, 0, "a member");
    b[at[i]] ^= 0x10;
    size_t c_len;
    uint8_t *c_out = malloc(raw);
    int want = fz_decompress(b, lb, c_out, raw, &c_len, 4);
    free(c_out);
    snprintf(what, sizeof what, "%s %s: byte %zu of the prefix changed", fz_dtype_name(t), preset,
             at[i]);
    cr_assert_neq(want, 0, "%s: the CPU decodes it", what);
    series_check(dec, b, lb, raw, want, what);
    free(a);
    free(b);
  }
  free(x);
  free(x2);
  fz_gpu_decoder_destroy(dec);
}

/* Tables of one scan tile (the one-kernel head) and of several. */
Test(identity, decoder_series) {
  series_of(FZ_F32, "fast", 300000);
  series_of(FZ_F32, "balanced", 300000);
  series_of(FZ_F64, "fast", 150000);
  series_of(FZ_F32, "balanced", 4100 * 4096);
}

/* The same for an output the host wants: the copy joins the one wait. */
Test(identity, decoder_series_host) {
  series_host = true;
  series_of(FZ_F32, "fast", 300000);
  series_of(FZ_F64, "balanced", 150000);
  series_host = false;
}
