/*
 * gpu_bench.cu - the CUDA backend's benchmark: compress and decompress GB/s
 * (device to device), kernel time alone, ratio and max error, per preset
 * and bound, on inputs of at least 1 GiB.
 * `fz_gpu_bench --help` prints the usage (see `usage` below).
 *
 * Files are repeated whole until the input reaches MIN_BYTES (default 1 GiB).
 * The whole call is timed with CUDA events on the call's stream: the plan is
 * warm (created and run once before), the size read-back is included.
 * "kernel" is the time from the first kernel to the last.  GB/s counts the
 * uncompressed bytes.  A bound violation makes the run fail (exit 1).
 * With -t f64 the field's values become doubles (exactly, so the f64
 * chains see the same field), repeated to the same number of bytes.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_data.h"
#include "fz.h"
#include "fz_gpu.h"
#include "params_1d.h"

#define CK(call)                                                                \
  do {                                                                          \
    cudaError_t e_ = (call);                                                    \
    if (e_ != cudaSuccess) {                                                    \
      fprintf(stderr, "%s: %s\n", #call, cudaGetErrorName(e_));                 \
      exit(2);                                                                  \
    }                                                                           \
  } while (0)

static const char usage[] =
    "usage: fz_gpu_bench [-r REPEAT] [-p PRESETS] [-e BOUNDS] [-m MODE] [-s MIN_BYTES]\n"
    "                    [-t f32|f64] [FILE.f32 ...] [--gen smooth|noise ...]\n"
    "Compresses and decompresses each input on the first GPU (device to device)\n"
    "with each preset and bound and prints a Markdown table of GB/s, ratio and\n"
    "max error.\n"
    "  -r REPEAT     timed runs per case, the best is reported (default 5)\n"
    "  -p PRESETS    comma-separated presets (default fast,balanced,lossless)\n"
    "  -e BOUNDS     comma-separated error bounds (default 1e-2,1e-3,1e-4)\n"
    "  -m MODE       abs, rel or pwrel (default rel)\n"
    "  -s MIN_BYTES  repeat each input until it is this large (default 1 GiB)\n"
    "  -t TYPE       f32 (default), or f64: the values as doubles\n"
    "  -h, --help    this help\n"
    "Exit status: 0 success, 1 a bound was exceeded, 2 usage or CUDA error,\n"
    "77 no usable GPU.\n";

/* Repeats the field whole until it holds at least min_bytes. */
static float *replicate(const float *x, size_t n, size_t min_bytes, size_t *total) {
  size_t reps = (min_bytes + n * 4 - 1) / (n * 4);
  if (reps == 0)
    reps = 1;
  float *y = (float *)malloc(reps * n * 4);
  for (size_t r = 0; r < reps; r++)
    memcpy(y + r * n, x, n * 4);
  *total = reps * n;
  return y;
}

static int bench(fz_gpu_ctx *ctx, const char *name, fz_dtype t, const void *h_x, size_t n,
                 const char *preset, double eb, fz_eb_mode mode, unsigned repeat) {
  fz_params p;
  fzt_params_1d(&p, t, n, preset);
  p.eb = eb;
  p.eb_mode = mode;
  char why[256] = "";
  fz_gpu_plan *pl;
  int rc = fz_gpu_plan_create(ctx, &p, FZ_GPU_PREALLOC | FZ_GPU_TIMING, &pl, why, sizeof why);
  if (rc < 0) {
    fprintf(stderr, "plan: %s %s\n", fz_err_name(rc), why);
    return 1;
  }
  size_t in_len = n * fz_dtype_size(t), bound = fz_gpu_plan_compress_bound(pl), arc_len = 0, ol = 0;
  cudaStream_t s = fz_gpu_ctx_stream(ctx, 0);
  void *d_in, *d_arc, *d_out;
  CK(cudaMalloc(&d_in, in_len));
  CK(cudaMalloc(&d_arc, bound));
  CK(cudaMalloc(&d_out, in_len));
  CK(cudaMemcpy(d_in, h_x, in_len, cudaMemcpyHostToDevice));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float best_c = 1e30f, best_k = 1e30f, best_d = 1e30f, ms;
  for (unsigned r = 0; r <= repeat; r++) { /* r == 0 warms up */
    CK(cudaEventRecord(e0, s));
    rc = fz_gpu_compress(pl, d_in, in_len, d_arc, bound, &arc_len, s, why, sizeof why);
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    if (rc < 0) {
      fprintf(stderr, "compress: %s %s\n", fz_err_name(rc), why);
      return 1;
    }
    CK(cudaEventElapsedTime(&ms, e0, e1));
    float km = 0;
    fz_gpu_plan_kernel_ms(pl, &km);
    if (r && ms < best_c)
      best_c = ms;
    if (r && km < best_k)
      best_k = km;
  }
  for (unsigned r = 0; r <= repeat; r++) {
    CK(cudaEventRecord(e0, s));
    rc = fz_gpu_decompress(ctx, d_arc, arc_len, d_out, in_len, &ol, s, why, sizeof why);
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    if (rc < 0) {
      fprintf(stderr, "decompress: %s %s\n", fz_err_name(rc), why);
      return 1;
    }
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (r && ms < best_d)
      best_d = ms;
  }
  void *h_y = malloc(in_len);
  uint8_t *h_arc = (uint8_t *)malloc(arc_len);
  CK(cudaMemcpy(h_y, d_out, in_len, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(h_arc, d_arc, arc_len, cudaMemcpyDeviceToHost));
  fz_archive_info info;
  fz_compare_result cmp;
  fz_archive_inspect(h_arc, arc_len, &info);
  fz_compare(t, h_x, h_y, n, &cmp);
  int ok = cmp.nonfinite_mismatches == 0 &&
           (mode == FZ_EB_PWREL ? cmp.max_rel_error <= eb : cmp.max_abs_error <= info.eb_abs);
  if (strcmp(preset, "lossless") == 0)
    ok = memcmp(h_x, h_y, in_len) == 0;
  printf("| %-10s | %-8s | %-5s %-6g | %8.1f | %8.1f | %8.1f | %7.2f | %-10.3g | %-10.3g | %s |\n",
         name, preset, fz_eb_mode_name(mode), eb, in_len / (best_c * 1e6), in_len / (best_k * 1e6),
         in_len / (best_d * 1e6), (double)in_len / (double)arc_len, cmp.max_abs_error,
         info.eb_abs, ok ? "ok" : "VIOLATED");
  fflush(stdout);
  free(h_y);
  free(h_arc);
  cudaFree(d_in);
  cudaFree(d_arc);
  cudaFree(d_out);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  fz_gpu_plan_destroy(pl);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  unsigned repeat = 5;
  size_t min_bytes = (size_t)1 << 30;
  const char *presets = "fast,balanced,lossless", *bounds = "1e-2,1e-3,1e-4";
  fz_eb_mode mode = FZ_EB_REL;
  fz_dtype type = FZ_F32;
  int i = 1, failed = 0;
  for (; i < argc && argv[i][0] == '-' && strcmp(argv[i], "--gen") != 0; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strcmp(argv[i], "-r") && i + 1 < argc) repeat = (unsigned)atoi(argv[++i]);
    else if (!strcmp(argv[i], "-p") && i + 1 < argc) presets = argv[++i];
    else if (!strcmp(argv[i], "-e") && i + 1 < argc) bounds = argv[++i];
    else if (!strcmp(argv[i], "-s") && i + 1 < argc) min_bytes = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "-t") && i + 1 < argc) {
      ++i;
      if (strcmp(argv[i], "f32") != 0 && strcmp(argv[i], "f64") != 0) {
        fprintf(stderr, "bad type '%s': f32 or f64\n", argv[i]);
        return 2;
      }
      type = strcmp(argv[i], "f64") == 0 ? FZ_F64 : FZ_F32;
    }
    else if (!strcmp(argv[i], "-m") && i + 1 < argc) {
      if (fz_eb_mode_parse(argv[++i], &mode) != 0) {
        fprintf(stderr, "bad mode '%s'\n", argv[i]);
        return 2;
      }
    } else {
      fprintf(stderr, "unknown option '%s'\n", argv[i]);
      return 2;
    }
  }
  fz_gpu_ctx *ctx;
  char why[256] = "";
  int rc = fz_gpu_ctx_create(NULL, 2, &ctx, why, sizeof why);
  if (rc < 0) {
    fprintf(stderr, "no GPU: %s %s\n", fz_err_name(rc), why);
    return 77;
  }
  printf("GPU: %s\n\n", fz_gpu_ctx_name(ctx));
  printf("| input      | preset   | bound        | comp GB/s | kernel GB/s | decomp GB/s | ratio | max error | eb_abs | bound |\n");
  printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (; i < argc; i++) {
    size_t n = 0;
    float *x;
    const char *name;
    if (!strcmp(argv[i], "--gen") && i + 1 < argc) {
      name = argv[++i];
      x = bench_generate(name, min_bytes / 4);
      n = min_bytes / 4;
    } else {
      x = bench_load(argv[i], &n);
      const char *b = strrchr(argv[i], '/');
      name = b ? b + 1 : argv[i];
      if (!x || n == 0) {
        fprintf(stderr, "cannot read '%s'\n", argv[i]);
        return 2;
      }
    }
    size_t total;
    const int f64 = type == FZ_F64;
    float *big = replicate(x, n, f64 ? min_bytes / 2 : min_bytes, &total);
    free(x);
    void *in = big;
    if (f64) {
      double *y = (double *)malloc(total * sizeof *y);
      for (size_t k = 0; k < total; k++)
        y[k] = (double)big[k];
      free(big);
      in = y;
    }
    char shortname[11];
    snprintf(shortname, sizeof shortname, "%s%s", f64 ? "f64:" : "", name);
    char pbuf[256], ebuf[256];
    snprintf(pbuf, sizeof pbuf, "%s", presets);
    for (char *sp, *pr = strtok_r(pbuf, ",", &sp); pr; pr = strtok_r(NULL, ",", &sp)) {
      snprintf(ebuf, sizeof ebuf, "%s", bounds);
      for (char *se, *e = strtok_r(ebuf, ",", &se); e; e = strtok_r(NULL, ",", &se)) {
        failed |= bench(ctx, shortname, type, in, total, pr, atof(e), mode, repeat);
        if (!strcmp(pr, "lossless"))
          break;
      }
    }
    free(in);
  }
  fz_gpu_ctx_destroy(ctx);
  return failed;
}
