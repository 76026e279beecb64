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
 * "path" says which kernels ran: generated at run time ("jit") or built
 * with the library ("aot"); -j both runs every case both ways, on two
 * contexts, and checks that the archives are the same bytes.  The ratio
 * kernels ("aot", or "jit" on a context of generated kernels only) code
 * the ratio and lossless-ratio presets.  A chain the kernels cannot
 * compress (FZ_ENOSYS from the plan: other lorenzo chains, or the ratio
 * kernels where NVRTC failed on a context of generated kernels only) is
 * compressed by the CPU engine on every core ("cpu" in path, its GB/s in
 * the comp column, no kernel time) and decompressed on the GPU.  A file
 * named like name_AxBxC.f32 is given that shape (repeated along its slowest
 * axis), which the ratio preset predicts in; other inputs are 1-D.
 */
#include <unistd.h>
#include <time.h>
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
    "                    [-t f32|f64] [-j jit|aot|only|both] [-k]\n"
    "                    [FILE.f32 ...] [--gen smooth|noise ...]\n"
    "Compresses and decompresses each input on the first GPU (device to device)\n"
    "with each preset and bound and prints a Markdown table of GB/s, ratio and\n"
    "max error.\n"
    "  -r REPEAT     timed runs per case, the best is reported (default 5)\n"
    "  -p PRESETS    comma-separated presets (default fast,balanced,lossless)\n"
    "  -e BOUNDS     comma-separated error bounds (default 1e-2,1e-3,1e-4)\n"
    "  -m MODE       abs, rel or pwrel (default rel)\n"
    "  -s MIN_BYTES  repeat each input until it is this large (default 1 GiB)\n"
    "  -t TYPE       f32, or f64 (each f32 value widened; default f32)\n"
    "  -p also takes chains (\"quant|diff|rze\"), -j the kernels: generated at run\n"
    "                time where the plan prefers them (jit, the default), built in\n"
    "                (aot), every kernel generated (only), or jit and aot (both)\n"
    "  -k            also compress each input with the CPU engine (every core) and\n"
    "                require the GPU's archive to be the same bytes (exit 1 if not)\n"
    "  -h, --help    this help\n"
    "Exit status: 0 success, 1 a bound was exceeded, 2 usage or CUDA error,\n"
    "77 no usable GPU.\n";

/* Repeats the field whole until it holds at least min_bytes, as f32 or
 * (each value widened, exactly) f64. */
static void *replicate(const float *x, size_t n, size_t min_bytes, fz_dtype t, size_t *total) {
  size_t w = fz_dtype_size(t);
  size_t reps = (min_bytes + n * w - 1) / (n * w);
  if (reps == 0)
    reps = 1;
  uint8_t *y = (uint8_t *)malloc(reps * n * w);
  if (t == FZ_F64)
    for (size_t i = 0; i < n; i++)
      ((double *)y)[i] = (double)x[i];
  else
    memcpy(y, x, n * 4);
  for (size_t r = 1; r < reps; r++)
    memcpy(y + r * n * w, y, n * w);
  *total = reps * n;
  return y;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The shape in a file name (..._AxBxC.f32) when its product is n. */
static unsigned name_shape(const char *name, size_t n, uint64_t *dims) {
  const char *u = strrchr(name, '_');
  if (u == NULL)
    return 0;
  unsigned nd = 0;
  uint64_t prod = 1;
  for (const char *q = u + 1; nd < 4;) {
    char *end;
    unsigned long long v = strtoull(q, &end, 10);
    if (end == q || v == 0)
      return 0;
    dims[nd++] = v;
    prod *= v;
    if (*end != 'x')
      break;
    q = end + 1;
  }
  return prod == n ? nd : 0;
}

/* The shape of the benchmark's input: the file's, stacked reps times. */
static unsigned bench_ndims = 1;
static uint64_t bench_dims[4];
/* -k: every GPU archive checked against the CPU engine's. */
static int check_cpu;

/* The CPU engine's archive of a chain the kernels cannot compress, on every
 * core; its GB/s to *gbs.  NULL on failure. */
static uint8_t *cpu_compress(const fz_params *p, const void *h_x, size_t in_len, size_t *len,
                             double *gbs) {
  fz_params q = *p;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  q.threads = cores > 0 ? (unsigned)cores : 1;
  fz_plan *pl;
  char why[256] = "";
  if (fz_plan_create(&q, &pl, why, sizeof why) < 0) {
    fprintf(stderr, "cpu plan: %s\n", why);
    return NULL;
  }
  size_t cap = fz_plan_compress_bound(pl);
  uint8_t *a = (uint8_t *)malloc(cap);
  double t0 = now_s();
  int rc = fz_plan_compress(pl, h_x, in_len, a, cap, len);
  *gbs = (double)in_len / ((now_s() - t0) * 1e9);
  fz_plan_destroy(pl);
  if (rc < 0) {
    fprintf(stderr, "cpu compress: %s\n", fz_err_name(rc));
    free(a);
    return NULL;
  }
  return a;
}

/* One case on one context; the archive (host copy, malloc'd) to *arc when
 * arc is not NULL. */
static int bench(fz_gpu_ctx *ctx, const char *name, const void *h_x, fz_dtype t, size_t n,
                 const char *preset, double eb, fz_eb_mode mode, unsigned repeat,
                 uint8_t **arc, size_t *arc_out) {
  fz_params p;
  fzt_params_1d(&p, t, n, preset);
  p.ndims = bench_ndims;
  if (bench_ndims > 1)
    memcpy(p.dims, bench_dims, sizeof bench_dims);
  p.eb = eb;
  p.eb_mode = mode;
  char why[256] = "";
  fz_gpu_plan *pl = NULL;
  int rc = fz_gpu_plan_create(ctx, &p, FZ_GPU_PREALLOC | FZ_GPU_TIMING, &pl, why, sizeof why);
  uint8_t *cpu_arc = NULL;
  size_t cpu_len = 0;
  double cpu_gbs = 0;
  size_t in_len = n * fz_dtype_size(t);
  if (rc == FZ_ENOSYS) {
    cpu_arc = cpu_compress(&p, h_x, in_len, &cpu_len, &cpu_gbs);
    if (cpu_arc == NULL)
      return 1;
  } else if (rc < 0) {
    fprintf(stderr, "plan: %s %s\n", fz_err_name(rc), why);
    return 1;
  }
  size_t bound = pl ? fz_gpu_plan_compress_bound(pl) : cpu_len, arc_len = 0, ol = 0;
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
  if (cpu_arc != NULL) {
    CK(cudaMemcpy(d_arc, cpu_arc, cpu_len, cudaMemcpyHostToDevice));
    arc_len = cpu_len;
    best_c = (float)((double)in_len / (cpu_gbs * 1e6));
    best_k = 0;
    free(cpu_arc);
  }
  for (unsigned r = 0; pl != NULL && r <= repeat; r++) { /* r == 0 warms up */
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
  uint8_t *h_y = (uint8_t *)malloc(in_len);
  uint8_t *h_arc = (uint8_t *)malloc(arc_len);
  CK(cudaMemcpy(h_y, d_out, in_len, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(h_arc, d_arc, arc_len, cudaMemcpyDeviceToHost));
  fz_archive_info info;
  fz_compare_result cmp;
  fz_archive_inspect(h_arc, arc_len, &info);
  fz_compare(t, h_x, h_y, n, &cmp);
  int ok = cmp.nonfinite_mismatches == 0 &&
           (mode == FZ_EB_PWREL ? cmp.max_rel_error <= eb : cmp.max_abs_error <= info.eb_abs);
  if (strcmp(preset, "lossless") == 0 || info.eb_abs == 0)
    ok = memcmp(h_x, h_y, in_len) == 0;
  if (check_cpu && pl != NULL) {
    size_t ref_len = 0;
    double ref_gbs;
    uint8_t *ref = cpu_compress(&p, h_x, in_len, &ref_len, &ref_gbs);
    size_t at = 0;
    while (ref != NULL && at < ref_len && at < arc_len && ref[at] == h_arc[at])
      at++;
    if (ref == NULL || ref_len != arc_len || at != arc_len) {
      fprintf(stderr, "%s %s %g: the GPU's archive (%zu bytes) differs from the CPU "
              "engine's (%zu bytes) at byte %zu\n", name, preset, eb, arc_len, ref_len, at);
      ok = 0;
    } else {
      fprintf(stderr, "%s %s %g: the GPU's archive is the CPU engine's, %zu bytes\n", name,
              preset, eb, arc_len);
    }
    free(ref);
  }
  printf("| %-10s | %-8s | %s | %-4s | %-5s %-6g | %8.1f | %8.1f | %8.1f | %7.2f | %-10.3g | "
         "%-10.3g | %s |\n",
         name, preset, fz_dtype_name(t), pl ? fz_gpu_plan_path(pl) : "cpu",
         fz_eb_mode_name(mode), eb, in_len / (best_c * 1e6),
         best_k > 0 ? in_len / (best_k * 1e6) : 0.0, in_len / (best_d * 1e6),
         (double)in_len / (double)arc_len, cmp.max_abs_error, info.eb_abs,
         ok ? "ok" : "VIOLATED");
  fflush(stdout);
  free(h_y);
  if (arc != NULL) {
    *arc = h_arc;
    *arc_out = arc_len;
  } else {
    free(h_arc);
  }
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
  fz_dtype dtype = FZ_F32;
  const char *jit = "jit";
  int i = 1, failed = 0;
  for (; i < argc && argv[i][0] == '-' && strcmp(argv[i], "--gen") != 0; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strcmp(argv[i], "-r") && i + 1 < argc) repeat = (unsigned)atoi(argv[++i]);
    else if (!strcmp(argv[i], "-p") && i + 1 < argc) presets = argv[++i];
    else if (!strcmp(argv[i], "-e") && i + 1 < argc) bounds = argv[++i];
    else if (!strcmp(argv[i], "-s") && i + 1 < argc) min_bytes = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "-k")) check_cpu = 1;
    else if (!strcmp(argv[i], "-j") && i + 1 < argc) {
      jit = argv[++i];
      if (strcmp(jit, "jit") && strcmp(jit, "aot") && strcmp(jit, "only") && strcmp(jit, "both")) {
        fprintf(stderr, "bad -j '%s': jit, aot, only or both\n", jit);
        return 2;
      }
    } else if (!strcmp(argv[i], "-t") && i + 1 < argc) {
      if (fz_dtype_parse(argv[++i], &dtype) != 0 || (dtype != FZ_F32 && dtype != FZ_F64)) {
        fprintf(stderr, "bad type '%s': f32 or f64\n", argv[i]);
        return 2;
      }
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
  /* One context per kind of kernel: the JIT is configured per context. */
  fz_gpu_ctx *ctxs[2] = {NULL, NULL};
  const int kinds[2] = {!strcmp(jit, "aot")    ? FZ_GPU_JIT_OFF
                        : !strcmp(jit, "only") ? FZ_GPU_JIT_ONLY
                                               : FZ_GPU_JIT_ON,
                        strcmp(jit, "both") == 0 ? FZ_GPU_JIT_OFF : -1};
  char why[512] = "";
  for (int k = 0; k < 2 && kinds[k] >= 0; k++) {
    int rc = fz_gpu_ctx_create(NULL, 2, &ctxs[k], why, sizeof why);
    if (rc < 0) {
      fprintf(stderr, "no GPU: %s %s\n", fz_err_name(rc), why);
      return 77;
    }
    if ((rc = fz_gpu_ctx_jit_config(ctxs[k], NULL, 0, kinds[k], why, sizeof why)) < 0) {
      fprintf(stderr, "jit config: %s %s\n", fz_err_name(rc), why);
      return 2;
    }
  }
  printf("GPU: %s\n\n", fz_gpu_ctx_name(ctxs[0]));
  printf("| input      | preset   | type | path | bound        | comp GB/s | kernel GB/s | decomp GB/s | ratio | max error | eb_abs | bound |\n");
  printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
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
    void *big = replicate(x, n, min_bytes, dtype, &total);
    bench_ndims = name_shape(name, n, bench_dims);
    if (bench_ndims > 1)
      bench_dims[0] *= total / n;
    else
      bench_ndims = 1;
    free(x);
    char shortname[11];
    snprintf(shortname, sizeof shortname, "%s", name);
    char pbuf[256], ebuf[256];
    snprintf(pbuf, sizeof pbuf, "%s", presets);
    for (char *sp, *pr = strtok_r(pbuf, ",", &sp); pr; pr = strtok_r(NULL, ",", &sp)) {
      snprintf(ebuf, sizeof ebuf, "%s", bounds);
      for (char *se, *e = strtok_r(ebuf, ",", &se); e; e = strtok_r(NULL, ",", &se)) {
        uint8_t *a[2] = {NULL, NULL};
        size_t al[2] = {0, 0};
        for (int k = 0; k < 2 && ctxs[k]; k++)
          failed |= bench(ctxs[k], shortname, big, dtype, total, pr, atof(e), mode, repeat, &a[k],
                          &al[k]);
        if (a[1] != NULL && (al[0] != al[1] || memcmp(a[0], a[1], al[0]) != 0)) {
          fprintf(stderr, "%s %s %s: jit and aot archives differ\n", shortname, pr, e);
          failed = 1;
        }
        free(a[0]);
        free(a[1]);
        /* The lossless presets take no bound: one run each. */
        if (!strncmp(pr, "lossless", 8))
          break;
      }
    }
    free(big);
  }
  for (int k = 0; k < 2; k++) {
    char text[2048];
    if (ctxs[k] != NULL && fz_gpu_ctx_jit_failure(ctxs[k], text, sizeof text))
      fprintf(stderr, "JIT: %s\n", text);
    if (ctxs[k] != NULL) {
      fz_gpu_jit_counts c;
      fz_gpu_ctx_jit_counts(ctxs[k], &c);
      if (c.compiles)
        fprintf(stderr, "JIT: %llu compiles in %.3f s, %llu modules loaded\n",
                (unsigned long long)c.compiles, c.compile_us / 1e6,
                (unsigned long long)c.modules_loaded);
    }
    fz_gpu_ctx_destroy(ctxs[k]);
  }
  return failed;
}
