/*
 * test_devitocomp.c - libdevitocomp.so used as DevitoPRO uses a provider,
 * with host execution: one plan per TimeFunction, many snapshots of one
 * shape compressed from padded (strided) rank-2 and rank-3 tensors, each
 * payload packed at the provider's payload_alignment into one layered host
 * store with its sidecar beside it, the store serialized to a file and read
 * back, every snapshot decompressed into a padded tensor whose halo must
 * stay untouched and checked against the relative tolerance (DEVITOCOMP_RTOL
 * when set, else the plan's error) pointwise.
 *
 * Each scenario runs against a real fzd (CPU backend, one worker, debug log)
 * whose log must say "plan created" once for all the snapshots and whose
 * stats must count every compression (host decompression runs in process),
 * and with no daemon at all (the embedded engine).  The rest: the exact mode (error 0), the default error (NULL
 * options), the refusals (HIP, CUDA on a CPU daemon, bad options, a sidecar
 * of another snapshot, a payload capacity too small), a daemon that goes
 * away between snapshots, and archives of the daemon decoded without one.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "devitocomp.h"
#include "fzclient.h"
#include "fzd_harness.h"
#include "snapshots.h"

static const devitocomp_execution_t host = {DEVITOCOMP_EXECUTION_HOST, 2, NULL};

static fzd_harness *start_fzd(void) {
  fzd_harness_options o = {.settings = "\"workers\": 1"};
  fzd_harness *h = NULL;
  cr_assert_eq(fzd_harness_start(&o, &h), 0, "fzd did not start");
  cr_assert_eq(setenv("FZD_SOCKET", fzd_harness_socket_path(h), 1), 0);
  return h;
}

static void stop_fzd(fzd_harness *h) {
  int st = fzd_harness_stop(h, 30000);
  cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "fzd exit status %d", st);
}

/* No daemon: the default address names a socket nobody listens on. */
static void no_daemon(void) {
  cr_assert_eq(setenv("FZD_SOCKET", "unix:/nonexistent/fzd-devitocomp.sock", 1), 0);
}

static unsigned count_of(const char *hay, const char *needle) {
  unsigned n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
    n++;
  return n;
}

/* The daemon's stats: compress and decompress job counts, and the plans
 * it made (plans_made may be NULL). */
static void daemon_counts_plans(fzd_harness *h, uint64_t *compress, uint64_t *decompress,
                                uint64_t *plans_made) {
  fz_client *c = NULL;
  char why[256];
  cr_assert_eq(fz_client_connect(&c, fzd_harness_socket_path(h), NULL, why, sizeof why), 0,
               "%s", why);
  fz_server_stats st;
  cr_assert_eq(fz_client_stats(c, &st), 0);
  *compress = st.compress.count;
  *decompress = st.decompress.count;
  if (plans_made != NULL)
    *plans_made = st.plans_created;
  fz_client_close(c);
}

static void daemon_counts(fzd_harness *h, uint64_t *compress, uint64_t *decompress) {
  daemon_counts_plans(h, compress, decompress, NULL);
}

static void put(padded *p, void *base, size_t k, double v) {
  size_t at = p->origin + padded_offset(p, k);
  if (p->t.dtype == DEVITOCOMP_FLOAT32)
    ((float *)base)[at] = (float)v;
  else
    ((double *)base)[at] = v;
}

static double get(padded *p, const void *base, size_t at) {
  return p->t.dtype == DEVITOCOMP_FLOAT32 ? ((const float *)base)[at] : ((const double *)base)[at];
}

#define HALO_MARK (-777.25)

/* The DevitoPRO round trip: `steps` snapshots through one plan into a
 * layered store, serialized, read back and decompressed by a second plan
 * (a fresh process would make one after loading the store).  Returns the
 * number of compressed bytes in all. */
static size_t round_trip(devitocomp_dtype_t dtype, int rank, const int64_t *dims, int steps,
                         const char *options, double error) {
  padded p = padded_layout(dtype, rank, dims, 2);
  size_t elem = dtype == DEVITOCOMP_FLOAT32 ? 4 : 8, n = padded_count(&p);
  devitocomp_plan_t *plan = NULL;
  cr_assert_eq(devitocomp_plan_create(&p.t, &host, options, &plan), DEVITOCOMP_SUCCESS, "%s",
               devitocomp_last_error());
  devitocomp_limits_t lim;
  cr_assert_eq(devitocomp_plan_limits(plan, &lim), DEVITOCOMP_SUCCESS);
  cr_assert(lim.payload_alignment > 0 && (lim.payload_alignment & (lim.payload_alignment - 1)) == 0);
  cr_assert(lim.sidecar_bytes > 0 && lim.max_compressed_bytes > 0);

  /* Layered host storage: one store, payloads aligned; sidecars aligned in
   * their own array. */
  size_t slot = align_up(lim.max_compressed_bytes, lim.payload_alignment);
  size_t sc_slot = align_up(lim.sidecar_bytes, lim.sidecar_alignment);
  char *store = aligned_alloc(lim.payload_alignment, slot * (size_t)steps);
  char *sidecars = aligned_alloc(lim.sidecar_alignment, sc_slot * (size_t)steps);
  size_t *offsets = calloc((size_t)steps, sizeof(size_t));
  size_t *sizes = calloc((size_t)steps, sizeof(size_t));
  void *field = calloc(p.alloc_elems, elem);
  cr_assert(store && sidecars && offsets && sizes && field);
  size_t used = 0;
  for (int s = 0; s < steps; s++) {
    for (size_t k = 0; k < n; k++)
      put(&p, field, k, wave(k, s));
    offsets[s] = used;
    cr_assert_eq(devitocomp_compress(plan, &host, (char *)field + p.origin * elem, store + used,
                                     slot * (size_t)steps - used, &sizes[s],
                                     sidecars + sc_slot * (size_t)s),
                 DEVITOCOMP_SUCCESS, "snapshot %d: %s", s, devitocomp_last_error());
    cr_assert(sizes[s] > 0 && sizes[s] <= lim.max_compressed_bytes);
    used = align_up(used + sizes[s], lim.payload_alignment);
  }
  devitocomp_plan_destroy(plan);

  /* Serialization: the store, the sidecars and the sizes to disk and back. */
  FILE *f = tmpfile();
  cr_assert_not_null(f);
  cr_assert_eq(fwrite(sizes, sizeof(size_t), (size_t)steps, f), (size_t)steps);
  cr_assert_eq(fwrite(sidecars, 1, sc_slot * (size_t)steps, f), sc_slot * (size_t)steps);
  cr_assert_eq(fwrite(store, 1, used, f), used);
  memset(store, 0, used);
  memset(sidecars, 0, sc_slot * (size_t)steps);
  memset(sizes, 0, sizeof(size_t) * (size_t)steps);
  rewind(f);
  cr_assert_eq(fread(sizes, sizeof(size_t), (size_t)steps, f), (size_t)steps);
  cr_assert_eq(fread(sidecars, 1, sc_slot * (size_t)steps, f), sc_slot * (size_t)steps);
  cr_assert_eq(fread(store, 1, used, f), used);
  fclose(f);

  cr_assert_eq(devitocomp_plan_create(&p.t, &host, options, &plan), DEVITOCOMP_SUCCESS, "%s",
               devitocomp_last_error());
  double rtol = test_rtol(error);
  for (int s = 0; s < steps; s++) {
    for (size_t i = 0; i < p.alloc_elems; i++)
      if (dtype == DEVITOCOMP_FLOAT32)
        ((float *)field)[i] = (float)HALO_MARK;
      else
        ((double *)field)[i] = HALO_MARK;
    cr_assert_eq(devitocomp_decompress(plan, &host, store + offsets[s], sizes[s],
                                       sidecars + sc_slot * (size_t)s,
                                       (char *)field + p.origin * elem),
                 DEVITOCOMP_SUCCESS, "snapshot %d: %s", s, devitocomp_last_error());
    size_t interior = 0;
    for (size_t k = 0; k < n; k++) {
      size_t at = p.origin + padded_offset(&p, k);
      double x = dtype == DEVITOCOMP_FLOAT32 ? (double)(float)wave(k, s) : wave(k, s);
      double y = get(&p, field, at);
      cr_assert(fabs(x - y) <= rtol * fabs(x),
                "snapshot %d, point %zu: %.9g came back as %.9g (rtol %g)", s, k, x, y, rtol);
      interior++;
    }
    size_t marks = 0;
    for (size_t i = 0; i < p.alloc_elems; i++)
      marks += get(&p, field, i) == HALO_MARK;
    cr_assert_eq(marks, p.alloc_elems - interior, "snapshot %d: the halo was written", s);
  }
  devitocomp_plan_destroy(plan);
  free(store), free(sidecars), free(offsets), free(sizes), free(field);
  return used;
}

static const int64_t dims3[3] = {24, 40, 36};
static const int64_t dims2[2] = {150, 130};

Test(devitocomp, abi_version) {
  cr_assert_eq(devitocomp_abi_version(), DEVITOCOMP_ABI_VERSION);
  cr_assert_not_null(strstr(devitocomp_provider_name(), "fzd"));
}

/* Twenty snapshots of one shape: the daemon makes one plan for all twenty
 * compressions and counts them; decompression runs in this process. */
Test(devitocomp, daemon_rank3_strided_one_plan, .timeout = 240) {
  fzd_harness *h = start_fzd();
  size_t bytes = round_trip(DEVITOCOMP_FLOAT32, 3, dims3, 20, "0.01", 0.01);
  cr_assert_lt(bytes, 20 * 24 * 40 * 36 * 4 / 2, "no compression: %zu bytes", bytes);
  uint64_t c, d, made;
  daemon_counts_plans(h, &c, &d, &made);
  cr_assert_eq(c, 20);
  cr_assert_eq(d, 0);
  /* Twenty snapshots of one shape: one plan, as stats and the log say. */
  cr_assert_eq(made, 1, "the daemon made %llu plans", (unsigned long long)made);
  char *log = fzd_harness_log(h);
  cr_assert_eq(count_of(log, "plan created"), 1, "the daemon's plans:\n%s", log);
  free(log);
  stop_fzd(h);
}

Test(devitocomp, daemon_rank2_strided_f64, .timeout = 240) {
  fzd_harness *h = start_fzd();
  round_trip(DEVITOCOMP_FLOAT64, 2, dims2, 12, "1e-4", 1e-4);
  uint64_t c, d;
  daemon_counts(h, &c, &d);
  cr_assert_eq(c, 12);
  cr_assert_eq(d, 0);
  stop_fzd(h);
}

Test(devitocomp, embedded_rank3_strided, .timeout = 240) {
  no_daemon();
  round_trip(DEVITOCOMP_FLOAT32, 3, dims3, 20, "0.01", 0.01);
}

Test(devitocomp, embedded_rank2_strided_f64, .timeout = 240) {
  no_daemon();
  round_trip(DEVITOCOMP_FLOAT64, 2, dims2, 12, "1e-4", 1e-4);
}

/* daemon=off keeps a plan embedded although a daemon answers. */
Test(devitocomp, daemon_off_option, .timeout = 240) {
  fzd_harness *h = start_fzd();
  round_trip(DEVITOCOMP_FLOAT32, 2, dims2, 4, "error=0.01,daemon=off", 0.01);
  uint64_t c, d;
  daemon_counts(h, &c, &d);
  cr_assert_eq(c + d, 0);
  stop_fzd(h);
}

/* Error 0 is the exact mode, through the daemon and without it. */
Test(devitocomp, exact_mode, .timeout = 240) {
  fzd_harness *h = start_fzd();
  round_trip(DEVITOCOMP_FLOAT32, 3, dims3, 3, "0", 0);
  stop_fzd(h);
  no_daemon();
  round_trip(DEVITOCOMP_FLOAT64, 2, dims2, 3, "0", 0);
}

/* NULL options: the provider's default error, 1e-3 pointwise relative. */
Test(devitocomp, default_error, .timeout = 240) {
  no_daemon();
  round_trip(DEVITOCOMP_FLOAT32, 2, dims2, 3, NULL, 1e-3);
}

static void contiguous(devitocomp_tensor_t *t, int rank, const int64_t *dims) {
  memset(t, 0, sizeof *t);
  t->dtype = DEVITOCOMP_FLOAT32;
  t->rank = rank;
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    t->shape[i] = dims[i];
    t->strides[i] = s;
    s *= dims[i];
  }
}

Test(devitocomp, refusals) {
  no_daemon();
  devitocomp_tensor_t t;
  contiguous(&t, 2, dims2);
  devitocomp_plan_t *plan = NULL;
  devitocomp_execution_t hip = {DEVITOCOMP_EXECUTION_HIP, 0, NULL};
  cr_assert_eq(devitocomp_plan_create(&t, &hip, NULL, &plan), DEVITOCOMP_UNSUPPORTED);
  cr_assert_not_null(strstr(devitocomp_last_error(), "HIP"));
  cr_assert_null(plan);
  devitocomp_execution_t cuda = {DEVITOCOMP_EXECUTION_CUDA, 0, NULL};
  cr_assert_eq(devitocomp_plan_create(&t, &cuda, NULL, &plan), DEVITOCOMP_UNSUPPORTED);
  cr_assert_not_null(strstr(devitocomp_last_error(), "GPU backend"), "%s", devitocomp_last_error());
  cr_assert_eq(devitocomp_plan_create(&t, &host, "fast please", &plan),
               DEVITOCOMP_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(devitocomp_last_error(), "'fast please'"), "%s", devitocomp_last_error());
  cr_assert_eq(devitocomp_plan_create(&t, &host, "-0.5", &plan), DEVITOCOMP_INVALID_ARGUMENT);
  cr_assert_eq(devitocomp_plan_create(&t, &host, "colour=red", &plan),
               DEVITOCOMP_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(devitocomp_last_error(), "colour"));
  cr_assert_eq(devitocomp_plan_create(&t, &host, "1.5", &plan), DEVITOCOMP_INVALID_ARGUMENT,
               "a pointwise relative error of 1.5 cannot be kept");
  cr_assert_eq(devitocomp_plan_create(&t, &host, "0.01,daemon=unix:/nonexistent/x.sock", &plan),
               DEVITOCOMP_BACKEND_ERROR, "a daemon named in the options must answer");
  t.strides[0] = 0;
  cr_assert_eq(devitocomp_plan_create(&t, &host, NULL, &plan), DEVITOCOMP_INVALID_ARGUMENT);
  /* Overlapping strides: rows that start inside the previous row, a
   * broadcast (stride equal to a faster dimension's, shape > 1), and a
   * transposed layout whose columns collide.  Each is refused by name. */
  const int64_t overlapping[][3] = {{130 - 1, 1, 0}, {1, 1, 0}, {1, 150 - 1, 0}};
  for (size_t k = 0; k < sizeof overlapping / sizeof *overlapping; k++) {
    contiguous(&t, 2, dims2);
    t.strides[0] = overlapping[k][0];
    t.strides[1] = overlapping[k][1];
    cr_assert_eq(devitocomp_plan_create(&t, &host, NULL, &plan), DEVITOCOMP_INVALID_ARGUMENT,
                 "strides (%lld, %lld) overlap", (long long)t.strides[0],
                 (long long)t.strides[1]);
    cr_assert_not_null(strstr(devitocomp_last_error(), "strides overlap"), "%s",
                       devitocomp_last_error());
    cr_assert_null(plan);
  }
  /* What does not overlap is taken: a transposed (column-major) layout, a
   * padded one, one strided along its fastest dimension, and (below) a
   * dimension of extent 1 whose stride is anything. */
  const int64_t apart[][2] = {{1, 150}, {131, 1}, {140 * 3, 3}};
  for (size_t k = 0; k < sizeof apart / sizeof *apart; k++) {
    contiguous(&t, 2, dims2);
    t.strides[0] = apart[k][0];
    t.strides[1] = apart[k][1];
    cr_assert_eq(devitocomp_plan_create(&t, &host, "daemon=off", &plan), DEVITOCOMP_SUCCESS,
                 "strides (%lld, %lld): %s", (long long)t.strides[0], (long long)t.strides[1],
                 devitocomp_last_error());
    devitocomp_plan_destroy(plan);
    plan = NULL;
  }
  const int64_t flat_dims[3] = {1, 150, 130};
  contiguous(&t, 3, flat_dims);
  t.strides[0] = 1; /* extent 1: takes no room */
  cr_assert_eq(devitocomp_plan_create(&t, &host, "daemon=off", &plan), DEVITOCOMP_SUCCESS, "%s",
               devitocomp_last_error());
  devitocomp_plan_destroy(plan);
  plan = NULL;

  contiguous(&t, 2, dims2);
  t.dtype = (devitocomp_dtype_t)7;
  cr_assert_eq(devitocomp_plan_create(&t, &host, NULL, &plan), DEVITOCOMP_UNSUPPORTED);

  contiguous(&t, 2, dims2);
  cr_assert_eq(devitocomp_plan_create(&t, &host, "0.01", &plan), DEVITOCOMP_SUCCESS);
  size_t n = 150 * 130;
  float *a = malloc(n * 4), *b = malloc(n * 4);
  for (size_t k = 0; k < n; k++)
    a[k] = (float)wave(k, 1);
  devitocomp_limits_t lim;
  devitocomp_plan_limits(plan, &lim);
  char *p1 = malloc(lim.max_compressed_bytes), *p2 = malloc(lim.max_compressed_bytes);
  uint64_t sc1[8], sc2[8];
  size_t l1, l2;
  cr_assert_eq(devitocomp_compress(plan, &host, a, p1, 16, &l1, sc1), DEVITOCOMP_BUFFER_TOO_SMALL);
  cr_assert_eq(devitocomp_compress(plan, &hip, a, p1, lim.max_compressed_bytes, &l1, sc1),
               DEVITOCOMP_UNSUPPORTED);
  cr_assert_eq(devitocomp_compress(plan, &host, a, p1, lim.max_compressed_bytes, &l1, sc1), 0);
  for (size_t k = 0; k < n; k++)
    a[k] = (float)wave(k, 9) * 5.0f;
  cr_assert_eq(devitocomp_compress(plan, &host, a, p2, lim.max_compressed_bytes, &l2, sc2), 0);
  cr_assert_neq(l1, l2, "the two snapshots should differ in size");
  cr_assert_eq(devitocomp_decompress(plan, &host, p1, l1, sc2, b), DEVITOCOMP_CORRUPT,
               "a payload with another snapshot's sidecar");
  cr_assert_not_null(strstr(devitocomp_last_error(), "sidecar"));
  memset(sc2, 0, sizeof sc2);
  cr_assert_eq(devitocomp_decompress(plan, &host, p2, l2, sc2, b), DEVITOCOMP_CORRUPT);
  cr_assert_eq(devitocomp_decompress(plan, &host, p1, l1, sc1, b), 0);
  p1[l1 / 2] ^= 0x55;
  cr_assert_eq(devitocomp_decompress(plan, &host, p1, l1, sc1, b), DEVITOCOMP_CORRUPT);
  devitocomp_plan_destroy(plan);
  devitocomp_plan_destroy(NULL);
  free(a), free(b), free(p1), free(p2);
}

/* The daemon goes away between two snapshots: the plan goes on with the
 * embedded engine, and what the daemon compressed decodes without it. */
Test(devitocomp, daemon_lost_then_embedded, .timeout = 240) {
  fzd_harness *h = start_fzd();
  devitocomp_tensor_t t;
  contiguous(&t, 3, dims3);
  devitocomp_plan_t *plan = NULL;
  cr_assert_eq(devitocomp_plan_create(&t, &host, "0.01", &plan), 0, "%s", devitocomp_last_error());
  size_t n = 24 * 40 * 36;
  float *a = malloc(n * 4), *b = malloc(n * 4);
  for (size_t k = 0; k < n; k++)
    a[k] = (float)wave(k, 3);
  devitocomp_limits_t lim;
  devitocomp_plan_limits(plan, &lim);
  char *p1 = malloc(lim.max_compressed_bytes), *p2 = malloc(lim.max_compressed_bytes);
  uint64_t sc1[8], sc2[8];
  size_t l1, l2;
  cr_assert_eq(devitocomp_compress(plan, &host, a, p1, lim.max_compressed_bytes, &l1, sc1), 0);
  uint64_t c, d;
  daemon_counts(h, &c, &d);
  cr_assert_eq(c, 1, "the first snapshot went through fzd");
  stop_fzd(h);
  cr_assert_eq(devitocomp_compress(plan, &host, a, p2, lim.max_compressed_bytes, &l2, sc2), 0,
               "%s", devitocomp_last_error());
  cr_assert_eq(l1, l2);
  cr_assert_eq(memcmp(p1, p2, l1), 0, "the daemon and the embedded engine make one archive");
  cr_assert_eq(devitocomp_decompress(plan, &host, p1, l1, sc1, b), 0, "%s", devitocomp_last_error());
  for (size_t k = 0; k < n; k++)
    cr_assert(fabsf(a[k] - b[k]) <= 0.01 * fabs((double)a[k]), "point %zu", k);
  devitocomp_plan_destroy(plan);
  free(a), free(b), free(p1), free(p2);
}

/* A view whose fastest dimension is strided too (every third element of a
 * row, e.g. one component of interleaved fields): gathered element by
 * element, through the daemon and without it; the other elements stay. */
static void every_third(bool daemon) {
  fzd_harness *h = daemon ? start_fzd() : NULL;
  if (!daemon)
    no_daemon();
  devitocomp_tensor_t t = {DEVITOCOMP_FLOAT32, 2, {60, 50}, {160, 3}};
  size_t alloc = 60 * 160;
  float *a = malloc(alloc * 4), *b = malloc(alloc * 4);
  for (size_t i = 0; i < alloc; i++)
    a[i] = (float)wave(i, 2), b[i] = (float)HALO_MARK;
  devitocomp_plan_t *plan = NULL;
  cr_assert_eq(devitocomp_plan_create(&t, &host, "0.001", &plan), 0, "%s", devitocomp_last_error());
  devitocomp_limits_t lim;
  devitocomp_plan_limits(plan, &lim);
  char *pay = malloc(lim.max_compressed_bytes);
  uint64_t sc[8];
  size_t len;
  cr_assert_eq(devitocomp_compress(plan, &host, a, pay, lim.max_compressed_bytes, &len, sc), 0,
               "%s", devitocomp_last_error());
  cr_assert_eq(devitocomp_decompress(plan, &host, pay, len, sc, b), 0, "%s", devitocomp_last_error());
  for (size_t i = 0; i < alloc; i++) {
    bool in_view = i % 160 < 150 && i % 160 % 3 == 0;
    if (in_view)
      cr_assert(fabs((double)a[i] - b[i]) <= 0.001 * fabs((double)a[i]), "element %zu", i);
    else
      cr_assert_eq(b[i], (float)HALO_MARK, "element %zu outside the view was written", i);
  }
  devitocomp_plan_destroy(plan);
  free(a), free(b), free(pay);
  if (daemon) {
    uint64_t c, d;
    daemon_counts(h, &c, &d);
    cr_assert_eq(c, 1);
    stop_fzd(h);
  }
}

Test(devitocomp, strided_fastest_dimension_daemon, .timeout = 240) { every_third(true); }

Test(devitocomp, strided_fastest_dimension_embedded, .timeout = 240) { every_third(false); }
