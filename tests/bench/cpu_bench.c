/*
 * cpu_bench.c - the engine's CPU benchmark: compress and decompress GB/s,
 * ratio and max error per preset and bound, on raw files or generated data.
 *
 * Each (file, preset, bound) is compressed and decompressed REPEAT times; the
 * best time is reported.  A bound violation makes the run fail (exit 1).
 * `fz_cpu_bench --help` prints the usage below.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_data.h"
#include "fz.h"

static const char usage[] =
    "usage: fz_cpu_bench [-t THREADS] [-r REPEAT] [-p PRESETS] [-e BOUNDS] [-m MODE]\n"
    "                    FILE_D0xD1[xD2].f32 ...  (shape taken from the name)\n"
    "       fz_cpu_bench ... --gen smooth|noise N (generated f32 field of N values)\n"
    "Compresses and decompresses each input with each preset and bound and prints\n"
    "a Markdown table of ratio, GB/s, max error over the bound and PSNR.\n"
    "  -t THREADS   engine threads (default 2)\n"
    "  -r REPEAT    runs per case, the best is reported (default 3)\n"
    "  -p PRESETS   comma-separated presets (default fast,balanced,lossless)\n"
    "  -e BOUNDS    comma-separated error bounds (default 1e-2,1e-3,1e-4)\n"
    "  -m MODE      abs, rel or pwrel (default rel)\n"
    "  -h, --help   this help\n"
    "Exit status: 0 success, 1 a bound was exceeded, 2 usage or input error.\n";

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 20 log10(range / RMSE) over the values finite in both; inf when exact. */
static double psnr(const float *x, const float *y, size_t n, double range) {
  double se = 0;
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (isfinite(x[i]) && isfinite(y[i])) {
      double d = (double)x[i] - (double)y[i];
      se += d * d;
      m++;
    }
  return m && se > 0 ? 20 * log10(range / sqrt(se / (double)m)) : INFINITY;
}

/* Reads NAME_AxBxC.f32 and sets the shape from the name. */
static float *load(const char *path, fz_params *p) {
  size_t n = 0;
  p->ndims = bench_shape(path, p->dims, FZ_MAX_DIMS);
  float *x = bench_load(path, &n);
  if (p->ndims == 0) { /* no shape in the name: 1-D */
    p->ndims = 1;
    p->dims[0] = n;
  }
  return x;
}

int main(int argc, char **argv) {
  unsigned threads = 2, repeat = 3;
  const char *presets = "fast,balanced,lossless", *bounds = "1e-2,1e-3,1e-4";
  fz_eb_mode mode = FZ_EB_REL;
  int failed = 0, i = 1;
  for (; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = (unsigned)atoi(argv[++i]);
    else if (!strcmp(argv[i], "-r") && i + 1 < argc) repeat = (unsigned)atoi(argv[++i]);
    else if (!strcmp(argv[i], "-p") && i + 1 < argc) presets = argv[++i];
    else if (!strcmp(argv[i], "-e") && i + 1 < argc) bounds = argv[++i];
    else if (!strcmp(argv[i], "-m") && i + 1 < argc) {
      if (fz_eb_mode_parse(argv[++i], &mode) < 0) {
        fprintf(stderr, "unknown mode '%s'\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(argv[i], "--gen")) break;
    else {
      fprintf(stderr, "unknown option '%s'\n", argv[i]);
      return 2;
    }
  }
  printf("| input | preset | bound (%s) | ratio | compress GB/s | decompress GB/s | max error / bound | PSNR dB |\n",
         fz_eb_mode_name(mode));
  printf("|---|---|---|---|---|---|---|---|\n");
  for (; i < argc; i++) {
    fz_params p;
    fz_params_init(&p);
    p.threads = threads;
    float *x;
    const char *name = argv[i];
    if (!strcmp(argv[i], "--gen") && i + 2 < argc) {
      name = argv[i + 1];
      p.ndims = 1;
      p.dims[0] = strtoull(argv[i + 2], NULL, 10);
      x = bench_generate(argv[i + 1], p.dims[0]);
      i += 2;
    } else {
      x = load(argv[i], &p);
    }
    if (!x) {
      fprintf(stderr, "cannot read '%s'\n", argv[i]);
      return 2;
    }
    size_t n = 1;
    for (unsigned d = 0; d < p.ndims; d++) n *= p.dims[d];
    float *y = malloc(n * sizeof *y);
    const char *bn = strrchr(name, '/');
    bn = bn ? bn + 1 : name;
    char plist[256];
    snprintf(plist, sizeof plist, "%s", presets);
    for (char *pr = strtok(plist, ","); pr; pr = strtok(NULL, ",")) {
      char blist[256];
      snprintf(blist, sizeof blist, "%s", strcmp(pr, "lossless") ? bounds : "0");
      char *bsave;
      for (char *b = strtok_r(blist, ",", &bsave); b; b = strtok_r(NULL, ",", &bsave)) {
        p.pipeline = pr;
        p.eb = atof(b);
        p.eb_mode = mode;
        fz_plan *plan;
        char why[256];
        int rc = fz_plan_create(&p, &plan, why, sizeof why);
        if (rc < 0) {
          fprintf(stderr, "%s: %s\n", fz_strerror(rc), why);
          return 2;
        }
        size_t cap = fz_plan_compress_bound(plan), len = 0, olen = 0;
        uint8_t *arc = malloc(cap);
        double tc = 1e30, td = 1e30;
        for (unsigned r = 0; r < repeat; r++) {
          double t0 = now();
          rc = fz_plan_compress(plan, x, n * 4, arc, cap, &len);
          double t1 = now();
          if (rc == 0) rc = fz_decompress(arc, len, y, n * 4, &olen, threads);
          double t2 = now();
          if (rc < 0) {
            fprintf(stderr, "%s %s %s: %s\n", bn, pr, b, fz_strerror(rc));
            return 1;
          }
          tc = fmin(tc, t1 - t0);
          td = fmin(td, t2 - t1);
        }
        fz_compare_result cr;
        fz_compare(FZ_F32, x, y, n, &cr);
        fz_archive_info info;
        fz_archive_inspect(arc, len, &info);
        double ebr = info.eb_abs > 0 ? cr.max_abs_error / info.eb_abs : cr.max_abs_error;
        if (mode == FZ_EB_PWREL && info.eb_abs > 0) ebr = cr.max_rel_error / info.eb_abs;
        int bad = ebr > 1 || cr.nonfinite_mismatches || (info.eb_abs == 0 && cr.max_abs_error != 0);
        failed |= bad;
        printf("| %s | %s | %s | %.2f | %.2f | %.2f | %.3f%s | %.2f |\n", bn, pr,
               strcmp(pr, "lossless") ? b : "-", (double)(n * 4) / (double)len,
               (double)(n * 4) / tc / 1e9, (double)(n * 4) / td / 1e9, ebr,
               bad ? " VIOLATION" : "", psnr(x, y, n, cr.value_range));
        fflush(stdout);
        free(arc);
        fz_plan_destroy(plan);
      }
    }
    free(x);
    free(y);
  }
  return failed;
}
