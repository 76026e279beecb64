/*
 * gpu_util.h - helpers of the GPU suites: test data, CPU reference runs,
 * and the CPU-versus-GPU comparisons every suite makes.
 */
#ifndef FZ_GPU_UTIL_H
#define FZ_GPU_UTIL_H

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fz.h"
#include "fz_gpu.h"
#include "params_1d.h"

#define CUDA_OK(call) cr_assert_eq((int)(call), 0, "%s failed", #call)

typedef enum gen_kind { GEN_SMOOTH, GEN_NOISE, GEN_SPECIAL, GEN_CONST } gen_kind;

static inline uint64_t rng_next(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 11;
}

/* n elements of type t; SPECIAL mixes NaN (with payloads), +-Inf, -0.0,
 * denormals and huge values into a smooth field. */
static inline void *gen_data(fz_dtype t, size_t n, gen_kind k, uint64_t seed) {
  size_t w = fz_dtype_size(t);
  uint8_t *p = malloc(n * w + 1);
  uint64_t s = seed * 7919 + 1;
  for (size_t i = 0; i < n; i++) {
    double r = (double)rng_next(&s) / 9007199254740992.0;
    double x = (double)i / 97.0;
    double v = k == GEN_NOISE ? r * 2 - 1
             : k == GEN_CONST ? 3.25
                              : sin(x) + 0.5 * sin(3.7 * x) + 0.01 * r;
    if (t == FZ_F32) {
      float f = (float)v;
      if (k == GEN_SPECIAL) {
        uint32_t u, m = (uint32_t)(rng_next(&s) % 12);
        memcpy(&u, &f, 4);
        if (m == 0) u = 0x7fc00000u | (uint32_t)(rng_next(&s) & 0x3fffff);
        if (m == 1) u = 0x7f800000u | ((uint32_t)(rng_next(&s) & 1) << 31);
        if (m == 2) u = 0x80000000u;
        if (m == 3) u = (uint32_t)(rng_next(&s) & 0x7fffff) | 1;
        if (m == 4) { f = (float)(v * 1e30); memcpy(&u, &f, 4); }
        memcpy(&f, &u, 4);
      }
      memcpy(p + i * 4, &f, 4);
    } else if (t == FZ_F64) {
      if (k == GEN_SPECIAL) {
        uint64_t u, m = rng_next(&s) % 12;
        memcpy(&u, &v, 8);
        if (m == 0) u = 0x7ff8000000000000ull | (rng_next(&s) & 0xfffffffffffull);
        if (m == 1) u = 0x7ff0000000000000ull | ((rng_next(&s) & 1) << 63);
        if (m == 2) u = 0x8000000000000000ull;
        if (m == 3) u = (rng_next(&s) & 0xfffffffffffffull) | 1;
        if (m == 4) { double h = v * 1e300; memcpy(&u, &h, 8); }
        memcpy(&v, &u, 8);
      }
      memcpy(p + i * 8, &v, 8);
    } else {
      /* Integers: a slowly varying ramp with noise, wrapped to the width. */
      uint64_t u = (uint64_t)(int64_t)(v * 1000) + (k == GEN_NOISE ? rng_next(&s) : 0);
      memcpy(p + i * w, &u, w);
    }
  }
  return p;
}

static inline fz_gpu_ctx *test_ctx(void) {
  static fz_gpu_ctx *ctx;
  if (ctx == NULL) {
    char why[256] = "";
    int rc = fz_gpu_ctx_create(NULL, 2, &ctx, why, sizeof why);
    cr_assert_eq(rc, 0, "fz_gpu_ctx_create: %s: %s", fz_err_name(rc), why);
  }
  return ctx;
}

static inline void *to_device(const void *h, size_t len) {
  void *d = NULL;
  CUDA_OK(cudaMalloc(&d, len ? len : 1));
  if (len)
    CUDA_OK(cudaMemcpy(d, h, len, cudaMemcpyHostToDevice));
  return d;
}

/* Compresses on both backends, requires byte-identical archives, decodes on
 * both (each backend's own archive and the other's), requires bit-identical
 * output and the bound.  Returns the archive size. */
static inline size_t check_identity(fz_dtype t, const char *pipeline, fz_eb_mode mode,
                                    double eb, unsigned chunk, const void *h_in,
                                    size_t n, unsigned flags) {
  size_t w = fz_dtype_size(t), in_len = n * w;
  fz_params p;
  fzt_params_1d(&p, t, n, pipeline);
  p.eb = eb;
  p.eb_mode = mode;
  p.threads = 8;
  p.chunk_bytes = chunk;
  char why[256] = "";
  fz_plan *cpu;
  int rc = fz_plan_create(&p, &cpu, why, sizeof why);
  cr_assert_eq(rc, 0, "fz_plan_create: %s", why);
  size_t bound = fz_plan_compress_bound(cpu), cpu_len = 0, gpu_len = 0;
  uint8_t *a_cpu = malloc(bound), *a_gpu = malloc(bound);
  rc = fz_plan_compress(cpu, h_in, in_len, a_cpu, bound, &cpu_len);
  cr_assert_eq(rc, 0, "cpu compress: %s", fz_err_name(rc));

  fz_gpu_ctx *ctx = test_ctx();
  fz_gpu_plan *gp;
  rc = fz_gpu_plan_create(ctx, &p, flags, &gp, why, sizeof why);
  cr_assert_eq(rc, 0, "fz_gpu_plan_create: %s", why);
  cr_assert_eq(fz_gpu_plan_compress_bound(gp), bound);
  void *d_in = to_device(h_in, in_len), *d_arc = NULL, *d_out = NULL;
  CUDA_OK(cudaMalloc(&d_arc, bound));
  rc = fz_gpu_compress(gp, d_in, in_len, d_arc, bound, &gpu_len, NULL, why, sizeof why);
  cr_assert_eq(rc, 0, "gpu compress: %s %s", fz_err_name(rc), why);
  cr_assert_eq(gpu_len, cpu_len, "%s %s eb=%g n=%zu: gpu %zu bytes, cpu %zu", pipeline,
               fz_eb_mode_name(mode), eb, n, gpu_len, cpu_len);
  CUDA_OK(cudaMemcpy(a_gpu, d_arc, gpu_len, cudaMemcpyDeviceToHost));
  size_t first = 0;
  while (first < cpu_len && a_cpu[first] == a_gpu[first])
    first++;
  cr_assert_eq(first, cpu_len, "%s %s %s eb=%g n=%zu chunk=%u: archives differ at byte %zu of %zu",
               fz_dtype_name(t), pipeline, fz_eb_mode_name(mode), eb, n, chunk, first, cpu_len);

  /* Decode the (identical) archive on both backends. */
  uint8_t *o_cpu = malloc(in_len + 1), *o_gpu = malloc(in_len + 1);
  size_t ol = 0;
  rc = fz_decompress(a_cpu, cpu_len, o_cpu, in_len, &ol, 8);
  cr_assert_eq(rc, 0, "cpu decompress: %s", fz_err_name(rc));
  CUDA_OK(cudaMalloc(&d_out, in_len ? in_len : 1));
  rc = fz_gpu_decompress(ctx, d_arc, gpu_len, d_out, in_len, &ol, NULL, why, sizeof why);
  cr_assert_eq(rc, 0, "gpu decompress: %s %s", fz_err_name(rc), why);
  cr_assert_eq(ol, in_len);
  if (in_len)
    CUDA_OK(cudaMemcpy(o_gpu, d_out, in_len, cudaMemcpyDeviceToHost));
  cr_assert(memcmp(o_cpu, o_gpu, in_len) == 0, "%s %s: decoded outputs differ", pipeline,
            fz_eb_mode_name(mode));

  /* The bound, with no slack. */
  fz_archive_info info;
  cr_assert_eq(fz_archive_inspect(a_cpu, cpu_len, &info), 0);
  if (t == FZ_F32 || t == FZ_F64) {
    fz_compare_result cmp;
    cr_assert_eq(fz_compare(t, h_in, o_gpu, n, &cmp), 0);
    cr_assert_eq(cmp.nonfinite_mismatches, 0);
    if (strcmp(pipeline, "lossless") == 0 || info.eb_abs == 0)
      cr_assert(memcmp(h_in, o_gpu, in_len) == 0, "lossless output differs");
    else if (mode == FZ_EB_PWREL)
      cr_assert(cmp.max_rel_error <= eb, "pwrel error %.17g > %.17g", cmp.max_rel_error, eb);
    else
      cr_assert(cmp.max_abs_error <= info.eb_abs, "error %.17g > bound %.17g",
                cmp.max_abs_error, info.eb_abs);
  } else {
    cr_assert(memcmp(h_in, o_gpu, in_len) == 0, "lossless integer output differs");
  }
  cudaFree(d_in);
  cudaFree(d_arc);
  cudaFree(d_out);
  fz_gpu_plan_destroy(gp);
  fz_plan_destroy(cpu);
  free(a_cpu);
  free(a_gpu);
  free(o_cpu);
  free(o_gpu);
  return cpu_len;
}

#endif
