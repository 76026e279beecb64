/*
 * test_simd.c - the AVX2 loops and the portable loops must write the same
 * bytes: every sample is compressed both ways and the archives compared, and
 * each archive is decoded both ways.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine.h"
#include "gen.h"
#include "params_1d.h"

/* x (of type t and shape dims, nd of them) compressed by pipe. */
static uint8_t *compress_shaped(const void *x, fz_dtype t, const size_t *dims, unsigned nd,
                                const char *pipe, double eb, fz_eb_mode mode, size_t *len) {
  fz_params p;
  fzt_params_shaped(&p, t, dims, nd, pipe);
  p.eb = eb;
  p.eb_mode = mode;
  fz_plan *pl;
  cr_assert_eq(fz_plan_create(&p, &pl, NULL, 0), 0);
  size_t cap = fz_plan_compress_bound(pl);
  uint8_t *a = malloc(cap);
  cr_assert_eq(fz_plan_compress(pl, x, fz_plan_input_bytes(pl), a, cap, len), 0);
  fz_plan_destroy(pl);
  return a;
}

static uint8_t *compress(const void *x, fz_dtype t, size_t n, const char *pipe,
                         double eb, fz_eb_mode mode, size_t *len) {
  return compress_shaped(x, t, &n, 1, pipe, eb, mode, len);
}

Test(simd, avx2_and_portable_loops_agree, .timeout = 300) {
  fze_set_avx2(true);
  if (!fze_have_avx2())
    cr_skip_test("this CPU has no AVX2: only the portable loops exist here");
  static const char *const pipes[] = {"balanced", "fast", "lossless",
                                      "quant | bitshuffle | rze(levels=1)",
                                      "quant | diff(map=negabinary) | bitshuffle | rze"};
  const size_t sizes[] = {1, 31, 33, 4095, 4096, 4127, 100000};
  for (unsigned k = 0; k < GEN_KINDS; k++)
    for (unsigned s = 0; s < sizeof sizes / sizeof *sizes; s++)
      for (unsigned q = 0; q < sizeof pipes / sizeof *pipes; q++)
        for (int e = 1; e <= 7; e += 3) {
          size_t n = sizes[s];
          float *x = malloc(n * 4), *y1 = malloc(n * 4), *y2 = malloc(n * 4);
          gen_fill((enum gen_kind)k, x, n, 1, 77);
          size_t la, lb, ly;
          fze_set_avx2(true);
          uint8_t *a = compress(x, FZ_F32, n, pipes[q], pow(10, -e), FZ_EB_REL, &la);
          cr_assert_eq(fz_decompress(a, la, y1, n * 4, &ly, 1), 0);
          fze_set_avx2(false);
          uint8_t *b = compress(x, FZ_F32, n, pipes[q], pow(10, -e), FZ_EB_REL, &lb);
          cr_assert_eq(fz_decompress(a, la, y2, n * 4, &ly, 1), 0);
          cr_assert(la == lb && memcmp(a, b, la) == 0,
                    "%s n=%zu '%s' 1e-%d: AVX2 and portable archives differ",
                    gen_names[k], n, pipes[q], e);
          cr_assert(memcmp(y1, y2, n * 4) == 0, "%s n=%zu '%s': decodes differ",
                    gen_names[k], n, pipes[q]);
          free(a);
          free(b);
          free(x);
          free(y1);
          free(y2);
        }
  fze_set_avx2(true);
}

/* ---- the interpolation's finest level ------------------------------------
 * Its AVX2 twin codes four points at a time and leaves groups holding a
 * known value (an outlier, a fill cell) to the portable code: fields of
 * 1 to 3 dims (odd extents, rows shorter than a group), smooth ones (where
 * the interpolation wins) with outliers, NaNs and fill cells scattered, at
 * coarse to fine bounds, must give the same archives and decodes. */

Test(simd, interpolation_agrees, .timeout = 300) {
  fze_set_avx2(true);
  if (!fze_have_avx2())
    cr_skip_test("this CPU has no AVX2: only the portable loops exist here");
  static const size_t shapes[][4] = {{1, 5000}, {2, 37, 129}, {2, 300, 301}, {2, 5, 3},
                                     {3, 7, 33, 65}, {3, 9, 64, 96}, {3, 40, 3, 1001}};
  static const char *const pipes[] = {"ratio", "quant(fill=-999) | interp | huffman | rze"};
  static const double bounds[] = {1e-1, 1e-2, 1e-3, 1e-5};
  for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
    for (unsigned kind = 0; kind < 4; kind++)
      for (unsigned q = 0; q < 2; q++)
        for (unsigned b = 0; b < 4; b++) {
          unsigned nd = (unsigned)shapes[sh][0];
          size_t n = 1;
          for (unsigned d = 0; d < nd; d++)
            n *= shapes[sh][1 + d];
          float *x = malloc(n * 4), *y1 = malloc(n * 4), *y2 = malloc(n * 4);
          uint64_t seed = 5 + sh;
          for (size_t i = 0; i < n; i++) {
            double t = (double)i;
            x[i] = (float)(50.0 * sin(t * 0.013) + 20.0 * cos(t * 0.0041) + 0.001 * gen_unit(&seed));
            uint64_t r = gen_rand(&seed);
            if (kind == 1 && r % 211 == 0) /* outliers */
              x[i] += (float)(1e4 * gen_unit(&seed));
            if (kind == 2 && r % 307 == 0)
              x[i] = r % 2 ? NAN : 1e-42f;
            if (kind == 3 && r % 101 < 3) /* fill cells in runs and alone */
              x[i] = -999.0f;
          }
          size_t la, lb, ly;
          fze_set_avx2(true);
          uint8_t *a = compress_shaped(x, FZ_F32, shapes[sh] + 1, nd, pipes[q], bounds[b], FZ_EB_REL, &la);
          cr_assert_eq(fz_decompress(a, la, y1, n * 4, &ly, 1), 0);
          fze_set_avx2(false);
          uint8_t *c = compress_shaped(x, FZ_F32, shapes[sh] + 1, nd, pipes[q], bounds[b], FZ_EB_REL, &lb);
          cr_assert_eq(fz_decompress(a, la, y2, n * 4, &ly, 1), 0);
          cr_assert(la == lb && memcmp(a, c, la) == 0,
                    "shape %zu, kind %u, '%s' %g: AVX2 and portable archives differ", sh, kind,
                    pipes[q], bounds[b]);
          cr_assert(memcmp(y1, y2, n * 4) == 0, "shape %zu, kind %u, '%s' %g: decodes differ",
                    sh, kind, pipes[q], bounds[b]);
          free(a);
          free(c);
          free(x);
          free(y1);
          free(y2);
        }
  fze_set_avx2(true);
}

/* ---- first use from many threads at once --------------------------------
 * The AVX2 zero-byte elimination and its inverse build shuffle tables on
 * first use.  Eight threads released together compress the same data in a
 * fresh process and decode it again; every archive must equal the one made
 * afterwards by a single thread, and every decode the input. */

enum { RACE_THREADS = 8, RACE_N = 1 << 16 };

typedef struct race_arg {
  pthread_barrier_t *go;
  const float *x;
  uint8_t *arc;
  size_t len;
} race_arg;

static int race_compress(const float *x, uint8_t **arc, size_t *len) {
  fz_params p;
  fzt_params_1d(&p, FZ_F32, RACE_N, "lossless");
  fz_plan *pl;
  if (fz_plan_create(&p, &pl, NULL, 0) < 0)
    return -1;
  size_t cap = fz_plan_compress_bound(pl);
  *arc = malloc(cap);
  int rc = *arc ? fz_plan_compress(pl, x, RACE_N * sizeof(float), *arc, cap, len) : -1;
  fz_plan_destroy(pl);
  return rc;
}

/* Compresses, then decodes its own archive (the decoder's table has a
 * first use too); a wrong decode clears len. */
static void *race_thread(void *p) {
  race_arg *a = p;
  pthread_barrier_wait(a->go);
  if (race_compress(a->x, &a->arc, &a->len) < 0) {
    a->len = 0;
    return NULL;
  }
  float *back = malloc(RACE_N * sizeof *back);
  size_t back_len = 0;
  if (back == NULL ||
      fz_decompress(a->arc, a->len, back, RACE_N * sizeof *back, &back_len, 1) < 0 ||
      back_len != RACE_N * sizeof *back || memcmp(back, a->x, back_len) != 0)
    a->len = 0;
  free(back);
  return NULL;
}

/* The child's exit status: 0 when every thread's archive is right. */
static int race_once(const float *x) {
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, RACE_THREADS);
  pthread_t th[RACE_THREADS];
  race_arg a[RACE_THREADS];
  for (int t = 0; t < RACE_THREADS; t++) {
    a[t] = (race_arg){.go = &go, .x = x};
    if (pthread_create(&th[t], NULL, race_thread, &a[t]) != 0)
      return 3;
  }
  for (int t = 0; t < RACE_THREADS; t++)
    pthread_join(th[t], NULL);
  uint8_t *want;
  size_t want_len;
  if (race_compress(x, &want, &want_len) < 0)
    return 3;
  for (int t = 0; t < RACE_THREADS; t++)
    if (a[t].len != want_len || memcmp(a[t].arc, want, want_len) != 0)
      return 1;
  return 0;
}

Test(simd, first_use_from_many_threads, .timeout = 120) {
  fze_set_avx2(true);
  if (!fze_have_avx2())
    cr_skip_test("this CPU has no AVX2: the table under test is not used");
  float *x = malloc(RACE_N * sizeof *x);
  cr_assert_not_null(x);
  for (size_t i = 0; i < RACE_N; i++)
    x[i] = (float)(100.0 * sin(0.001 * (double)i) + 0.01 * (double)(i % 97));
  for (int round = 0; round < 200; round++) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
      _exit(race_once(x));
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st), "round %d: the child died", round);
    cr_assert_eq(WEXITSTATUS(st), 0,
                 "round %d: an archive made during the first use differs (status %d)",
                 round, WEXITSTATUS(st));
  }
  free(x);
}
