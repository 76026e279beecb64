/*
 * devitocomp_bench.c - what a DevitoPRO run pays per snapshot with the fzd
 * DevitoComp provider: plan creation, the first snapshot (which makes the
 * daemon's plan) and the median of the rest, compression and decompression,
 * for a padded 3-D float32 field, through fzd (the daemon at $FZD_SOCKET)
 * and with the embedded engine (daemon=off).  For scale, the same contiguous
 * snapshots through libfzclient's shared buffers directly.  Not run by ctest.
 *
 *   fz_devitocomp_bench [NZ NY NX [SNAPSHOTS [ERROR]]]   (default 64 256 256 40 0.001)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devitocomp.h"
#include "fzclient.h"

#define HALO 4

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int run(const char *label, const char *options, int64_t nz, int64_t ny, int64_t nx,
               int steps) {
  int64_t py = ny + 2 * HALO, px = nx + 2 * HALO;
  size_t alloc = (size_t)(nz + 2 * HALO) * (size_t)py * (size_t)px;
  float *u = calloc(alloc, sizeof(float));
  float *in = u + (HALO * py + HALO) * px + HALO;
  devitocomp_tensor_t t = {DEVITOCOMP_FLOAT32, 3, {nz, ny, nx}, {py * px, px, 1}};
  devitocomp_execution_t host = {DEVITOCOMP_EXECUTION_HOST, 1, NULL};
  devitocomp_plan_t *plan;
  double t0 = now();
  if (devitocomp_plan_create(&t, &host, options, &plan) != 0) {
    fprintf(stderr, "%s: %s\n", label, devitocomp_last_error());
    return 1;
  }
  double t_plan = now() - t0;
  devitocomp_limits_t lim;
  devitocomp_plan_limits(plan, &lim);
  char *payload = malloc(lim.max_compressed_bytes);
  uint64_t sidecar[8];
  double *tc = calloc((size_t)steps, sizeof(double)), *td = calloc((size_t)steps, sizeof(double));
  size_t raw = (size_t)(nz * ny * nx) * 4, total = 0;
  for (int s = 0; s < steps; s++) {
    for (int64_t z = 0; z < nz; z++)
      for (int64_t y = 0; y < ny; y++)
        for (int64_t x = 0; x < nx; x++)
          in[(z * py + y) * px + x] = (float)(sin(0.05 * x + 0.1 * s) * cos(0.03 * y) + 0.01 * z);
    size_t len;
    t0 = now();
    if (devitocomp_compress(plan, &host, in, payload, lim.max_compressed_bytes, &len, sidecar)) {
      fprintf(stderr, "%s: %s\n", label, devitocomp_last_error());
      return 1;
    }
    tc[s] = now() - t0;
    t0 = now();
    if (devitocomp_decompress(plan, &host, payload, len, sidecar, in)) {
      fprintf(stderr, "%s: %s\n", label, devitocomp_last_error());
      return 1;
    }
    td[s] = now() - t0;
    total += len;
  }
  double first = tc[0];
  double mc = median(tc + 1, steps - 1), md = median(td + 1, steps - 1);
  printf("%-22s plan %7.2f ms  first %7.2f ms  median compress %7.2f ms (%6.0f MB/s)"
         "  decompress %7.2f ms (%6.0f MB/s)  ratio %.2f\n",
         label, 1e3 * t_plan, 1e3 * first, 1e3 * mc, raw / mc / 1e6, 1e3 * md, raw / md / 1e6,
         (double)raw * steps / (double)total);
  devitocomp_plan_destroy(plan);
  free(u), free(payload), free(tc), free(td);
  return 0;
}

/* The same snapshots, contiguous, straight through libfzclient's shared
 * buffers: the daemon's own speed without the provider's copies. */
static int direct(int64_t nz, int64_t ny, int64_t nx, int steps, double error) {
  fz_client *c;
  char why[256];
  if (fz_client_connect(&c, NULL, NULL, why, sizeof why) < 0) {
    fprintf(stderr, "libfzclient: %s\n", why);
    return 1;
  }
  size_t n = (size_t)(nz * ny * nx), raw = n * 4;
  fz_job j;
  fz_job_init(&j);
  j.dtype = "f32";
  j.ndims = 3;
  j.shape[0] = (uint64_t)nz, j.shape[1] = (uint64_t)ny, j.shape[2] = (uint64_t)nx;
  j.eb = error;
  j.mode = "pwrel";
  uint64_t bound;
  fz_client_compress_bound(&j, &bound, NULL, 0);
  float *in = fz_client_buffer_alloc(c, raw);
  void *out = fz_client_buffer_alloc(c, bound);
  double *tc = calloc((size_t)steps, sizeof(double));
  for (int s = 0; s < steps; s++) {
    for (size_t k = 0; k < n; k++) {
      size_t x = k % (size_t)nx, y = k / (size_t)nx % (size_t)ny, z = k / (size_t)(nx * ny);
      in[k] = (float)(sin(0.05 * x + 0.1 * s) * cos(0.03 * y) + 0.01 * z);
    }
    j.in = in, j.in_len = raw, j.out = out, j.out_cap = bound;
    fz_result r;
    double t0 = now();
    if (fz_client_compress(c, &j, &r) < 0) {
      fprintf(stderr, "libfzclient: %s\n", fz_client_errmsg(c));
      return 1;
    }
    tc[s] = now() - t0;
  }
  double mc = median(tc + 1, steps - 1);
  printf("%-22s median compress %7.2f ms (%6.0f MB/s)\n", "libfzclient direct", 1e3 * mc,
         raw / mc / 1e6);
  free(tc);
  fz_client_close(c);
  return 0;
}

int main(int argc, char **argv) {
  int64_t nz = argc > 3 ? atoll(argv[1]) : 64, ny = argc > 3 ? atoll(argv[2]) : 256,
          nx = argc > 3 ? atoll(argv[3]) : 256;
  int steps = argc > 4 ? atoi(argv[4]) : 40;
  double error = argc > 5 ? atof(argv[5]) : 1e-3;
  if (nz <= 0 || ny <= 0 || nx <= 0 || steps < 2 || !(error > 0)) {
    fprintf(stderr, "usage: fz_devitocomp_bench [NZ NY NX [SNAPSHOTS [ERROR]]]\n");
    return 2;
  }
  char opt[64], off[96];
  snprintf(opt, sizeof opt, "%g", error);
  snprintf(off, sizeof off, "%g,daemon=off", error);
  printf("%lld x %lld x %lld float32 (halo %d), %d snapshots, error %g\n", (long long)nz,
         (long long)ny, (long long)nx, HALO, steps, error);
  int rc = run("provider, fzd", opt, nz, ny, nx, steps);
  rc |= run("provider, embedded", off, nz, ny, nx, steps);
  rc |= direct(nz, ny, nx, steps, error);
  return rc;
}
