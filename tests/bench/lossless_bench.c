/*
 * lossless_bench.c - one lossless case through the engine, for
 * tests/bench/lossless_bench.py: compresses a raw file of any dtype and
 * shape with a chain, decompresses it, checks that every byte came back,
 * and prints one JSON line with the sizes and the best speeds of REPEAT
 * runs.  Exit status: 0 exact, 1 not exact or an engine error, 2 usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fz.h"

static const char usage[] =
    "usage: fz_lossless_bench [-r REPEAT] [-t THREADS] [-c CHUNK_BYTES] -p PIPELINE DTYPE\n"
    "                         D0[xD1...] FILE\n";

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static unsigned parse_dims(const char *s, uint64_t *dims) {
  unsigned nd = 0;
  while (nd < FZ_MAX_DIMS) {
    char *end;
    dims[nd++] = strtoull(s, &end, 10);
    if (*end != 'x')
      return *end == 0 ? nd : 0;
    s = end + 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  unsigned repeat = 3, threads = 1, chunk = 0;
  const char *pipeline = NULL;
  int i = 1;
  for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
    if (!strcmp(argv[i], "-r"))
      repeat = (unsigned)atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-t"))
      threads = (unsigned)atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-p"))
      pipeline = argv[i + 1];
    else if (!strcmp(argv[i], "-c"))
      chunk = (unsigned)atoi(argv[i + 1]);
    else
      break;
  }
  if (argc - i != 3 || pipeline == NULL || repeat == 0) {
    fputs(usage, stderr);
    return 2;
  }
  fz_params p;
  fz_params_init(&p);
  p.pipeline = pipeline;
  p.threads = threads;
  p.eb = 0;
  p.chunk_bytes = chunk;
  if (fz_dtype_parse(argv[i], &p.dtype) < 0 || (p.ndims = parse_dims(argv[i + 1], p.dims)) == 0) {
    fprintf(stderr, "bad dtype '%s' or shape '%s'\n", argv[i], argv[i + 1]);
    return 2;
  }
  size_t raw = fz_dtype_size(p.dtype);
  for (unsigned d = 0; d < p.ndims; d++)
    raw *= p.dims[d];
  FILE *f = fopen(argv[i + 2], "rb");
  uint8_t *x = malloc(raw + 1), *y = malloc(raw + 1);
  if (!f || !x || !y || fread(x, 1, raw + 1, f) != raw) {
    fprintf(stderr, "cannot read %zu bytes from '%s'\n", raw, argv[i + 2]);
    return 2;
  }
  fclose(f);
  fz_plan *plan;
  char why[256] = "";
  int rc = fz_plan_create(&p, &plan, why, sizeof why);
  if (rc < 0) {
    fprintf(stderr, "%s: %s\n", fz_strerror(rc), why);
    return 1;
  }
  size_t cap = fz_plan_compress_bound(plan), len = 0, olen = 0;
  uint8_t *arc = malloc(cap);
  double tc = 1e30, td = 1e30;
  for (unsigned r = 0; r < repeat && rc == 0; r++) {
    double t0 = now();
    rc = fz_plan_compress(plan, x, raw, arc, cap, &len);
    double t1 = now();
    if (rc == 0)
      rc = fz_decompress(arc, len, y, raw, &olen, threads);
    double t2 = now();
    tc = t1 - t0 < tc ? t1 - t0 : tc;
    td = t2 - t1 < td ? t2 - t1 : td;
  }
  if (rc < 0) {
    fprintf(stderr, "%s\n", fz_strerror(rc));
    return 1;
  }
  int exact = olen == raw && memcmp(x, y, raw) == 0;
  printf("{\"raw\": %zu, \"archive\": %zu, \"compress_s\": %.9f, \"decompress_s\": %.9f, "
         "\"exact\": %s}\n",
         raw, len, tc, td, exact ? "true" : "false");
  fz_plan_destroy(plan);
  free(arc);
  free(x);
  free(y);
  return exact ? 0 : 1;
}
