/*
 * frames_bench.c - fzd's CPU decoder of detector frames (fz_frames.h):
 * frames/s of dense and sparse output on one core, and of sparse batches on
 * threads.  tests/bench/frames_bench.py makes the frames, times the Python
 * packages on the same ones and prints the table; this program only times
 * fzd.  `fz_frames_bench --help` prints the usage below.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fz_frames.h"

static const char usage[] =
    "usage: fz_frames_bench [-r REPEAT] [-t THREADS] [-c CUT] CHUNKS NI NJ\n"
    "Times fzd's CPU decoder of bitshuffle-LZ4 u16 frames of NI x NJ pixels.\n"
    "CHUNKS: a little-endian u64 frame count, the u64 length of each chunk,\n"
    "then the chunks (each with its 12-byte header, as in an HDF5 file).\n"
    "Prints one line a case: name, frames/s, GB/s of pixels, pixels listed.\n"
    "  -r REPEAT    passes over the frames, the best is reported (default 3)\n"
    "  -t THREADS   threads of the batch case (default: every online CPU)\n"
    "  -c CUT       the cut of the sparse cases (default 10)\n"
    "  -h, --help   this help\n"
    "Exit status: 0 success, 1 a frame failed to decode, 2 usage or input error.\n";

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint8_t *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *p = n > 0 ? malloc((size_t)n) : NULL;
  if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
    free(p);
    p = NULL;
  }
  fclose(f);
  *len = p ? (size_t)n : 0;
  return p;
}

static void report(const char *name, double best, size_t nframes, size_t npx, size_t listed) {
  double fps = (double)nframes / best;
  printf("%s %.1f %.3f %zu\n", name, fps, fps * (double)npx * 2 / 1e9, listed);
}

int main(int argc, char **argv) {
  int repeat = 3;
  unsigned threads = 0;
  double cut = 10;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      fputs(usage, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      fputs(usage, stderr);
      return 2;
    }
    if (!strcmp(argv[i], "-r"))
      repeat = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-t"))
      threads = (unsigned)atoi(argv[++i]);
    else if (!strcmp(argv[i], "-c"))
      cut = atof(argv[++i]);
    else {
      fprintf(stderr, "fz_frames_bench: unknown option '%s'\n%s", argv[i], usage);
      return 2;
    }
  }
  if (argc - i != 3 || repeat < 1) {
    fputs(usage, stderr);
    return 2;
  }
  size_t len, ni = strtoull(argv[i + 1], NULL, 10), nj = strtoull(argv[i + 2], NULL, 10);
  uint8_t *file = read_all(argv[i], &len);
  uint64_t nframes = 0;
  if (!file || len < 8 || (memcpy(&nframes, file, 8), nframes == 0) || nframes > (len - 8) / 8) {
    fprintf(stderr, "fz_frames_bench: cannot read chunks from '%s'\n", argv[i]);
    return 2;
  }
  size_t npx = ni * nj;
  uint64_t *lengths = malloc(nframes * 8), *offsets = malloc(nframes * 8);
  memcpy(lengths, file + 8, nframes * 8);
  uint64_t pos = 8 + 8 * nframes;
  for (uint64_t k = 0; k < nframes; k++) {
    offsets[k] = pos;
    pos += lengths[k];
  }
  if (pos != len) {
    fprintf(stderr, "fz_frames_bench: '%s' holds %zu bytes, its table says %llu\n", argv[i], len,
            (unsigned long long)pos);
    return 2;
  }
  fz_frames_params prm = {.dtype = FZ_U16, .npixels = npx, .codec = FZ_BSLZ4_LZ4};
  fz_frames *f = NULL;
  char why[256] = "";
  if (fz_frames_create(&prm, &f, why, sizeof why) < 0) {
    fprintf(stderr, "fz_frames_bench: %s\n", why);
    return 2;
  }
  uint16_t *dense = malloc(npx * 2);
  /* A batch lists up to a 16th of each frame: detector frames above a cut
   * are far sparser, and a frame that is not fails the run. */
  size_t cap = npx / 16 > 1 ? npx / 16 : 1;
  uint16_t *vals = malloc((nframes > 16 ? nframes : 16) * cap * 2);
  uint32_t *idx = malloc((nframes > 16 ? nframes : 16) * cap * 4);
  size_t *counts = malloc(nframes * sizeof *counts);
  int *status = malloc(nframes * sizeof *status);
  if (!dense || !vals || !idx || !counts || !status) {
    fprintf(stderr, "fz_frames_bench: out of memory\n");
    return 2;
  }
  double best_dense = 1e30, best_sparse = 1e30, best_batch = 1e30;
  size_t listed = 0;
  for (int r = 0; r < repeat; r++) {
    double t0 = now();
    for (uint64_t k = 0; k < nframes; k++)
      if (fz_frames_dense(f, file + offsets[k], lengths[k], dense, npx * 2, NULL, NULL, why,
                          sizeof why) < 0) {
        fprintf(stderr, "fz_frames_bench: frame %llu: %s\n", (unsigned long long)k, why);
        return 1;
      }
    double t1 = now();
    listed = 0;
    for (uint64_t k = 0; k < nframes; k++) {
      fz_frames_out o = {.values = vals, .indices = idx, .cap = npx};
      if (fz_frames_sparse(f, file + offsets[k], lengths[k], cut, 0, &o, why, sizeof why) < 0) {
        fprintf(stderr, "fz_frames_bench: frame %llu: %s\n", (unsigned long long)k, why);
        return 1;
      }
      listed += o.count;
    }
    double t2 = now();
    fz_frames_batch b = {.base = file,
                         .offsets = offsets,
                         .lengths = lengths,
                         .nframes = nframes,
                         .cut = cut,
                         .values = vals,
                         .indices = idx,
                         .cap = cap,
                         .counts = counts,
                         .status = status};
    if (fz_frames_sparse_batch(f, &b, threads, why, sizeof why) != 0) {
      fprintf(stderr, "fz_frames_bench: a batch frame failed\n");
      return 1;
    }
    double t3 = now();
    best_dense = t1 - t0 < best_dense ? t1 - t0 : best_dense;
    best_sparse = t2 - t1 < best_sparse ? t2 - t1 : best_sparse;
    best_batch = t3 - t2 < best_batch ? t3 - t2 : best_batch;
  }
  report("fzd_dense_1core", best_dense, nframes, npx, 0);
  report("fzd_sparse_1core", best_sparse, nframes, npx, listed);
  report("fzd_sparse_batch", best_batch, nframes, npx, listed);
  fz_frames_destroy(f);
  free(file), free(lengths), free(offsets), free(dense), free(vals), free(idx), free(counts),
      free(status);
  return 0;
}
