/*
 * gpu_warm.c - warm plans on the GPU backend: fzd started with a "warm"
 * list prepares each plan on its workers and checks the GPU's archive and
 * decompression of a synthetic field against the CPU engine's before it
 * says READY=1; once it serves, "stats" shows the plans held with their
 * device bytes under plan_cache_bytes, a job of a warmed shape is a plan
 * hit (nothing is made for it), the "warm" method says the plan is cached,
 * and a new shape warmed on the running daemon is made, checked and then
 * found by its job; the JIT's module cache on disk serves a restarted
 * daemon, and damaged entries are refused and rebuilt.  Skipped without a
 * GPU.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fz.h"
#include "fzclient.h"
#include "fzd_harness.h"
#include "gpu_fzd.h"

static float *field_f32(size_t n) {
  float *v = malloc(n * sizeof(float));
  cr_assert_not_null(v);
  for (size_t i = 0; i < n; i++)
    v[i] = (float)(40.0 * sin(0.003 * (double)i) + 0.01 * (double)(i % 89));
  return v;
}

static void compress_f32(fz_client *c, const float *v, size_t rows, size_t cols, double eb,
                         const char *pipeline) {
  fz_job j;
  fz_job_init(&j);
  j.dtype = "f32";
  j.ndims = 2;
  j.shape[0] = rows;
  j.shape[1] = cols;
  j.eb = eb;
  j.mode = "rel";
  j.pipeline = pipeline;
  j.in = v;
  j.in_len = rows * cols * sizeof(float);
  fz_result r;
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
  fz_client_free(r.data);
}

Test(gpu_warm, warm_list_then_hits, .timeout = 600) {
  fzd_harness *h = start_gpu_fzd(
      "\"workers\": 2, \"plan_cache_bytes\": 1073741824, \"warm\": ["
      "{\"pipeline\": \"balanced\", \"dtype\": \"f32\", \"shape\": [1024, 1024], \"eb\": 1e-3,"
      " \"mode\": \"rel\"},"
      "{\"pipeline\": \"quant | diff | rze\", \"dtype\": \"f32\", \"shape\": [512, 768],"
      " \"eb\": 1e-4, \"mode\": \"rel\"},"
      "{\"pipeline\": \"fast\", \"dtype\": \"f64\", \"shape\": [300000], \"eb\": 1e-6,"
      " \"mode\": \"abs\"}]");
  char *log = fzd_harness_log(h);
  cr_assert_not_null(strstr(log, "warm: 3 plans ready"), "%s", log);
  cr_assert_not_null(strstr(log, "warm: f32 [1024, 1024] rel 0.001 balanced: plan made in"),
                     "%s", log);
  free(log);
  fz_client *c = connect_gpu(h);
  fz_server_stats st;
  cr_assert_eq(fz_client_stats(c, &st), 0);
  /* The three of the list, and the workers' own start-up plan. */
  cr_assert_geq(st.plans_held, 3u, "%llu plans held", (unsigned long long)st.plans_held);
  cr_assert_gt(st.plan_bytes, 0u);
  cr_assert_leq(st.plan_bytes, st.plan_budget);
  cr_assert_eq(st.plan_budget, 1073741824u);
  uint64_t created = st.plans_created, hits = st.plan_hits;

  float *v = field_f32(1024 * 1024);
  compress_f32(c, v, 1024, 1024, 1e-3, NULL);
  compress_f32(c, v, 512, 768, 1e-4, "quant|diff|rze");
  cr_assert_eq(fz_client_stats(c, &st), 0);
  cr_assert_eq(st.plans_created, created, "a warmed shape made a plan");
  cr_assert_eq(st.plan_hits, hits + 2);

  /* Already held: cached.  A new shape: made (and checked), then a hit. */
  fz_warm_plan p[2] = {
      {.dtype = "f32", .ndims = 2, .shape = {1024, 1024}, .eb = 1e-3, .pipeline = "balanced"},
      {.dtype = "f32", .ndims = 2, .shape = {256, 1000}, .eb = 1e-2, .pipeline = "fast"}};
  fz_warm_result r[2];
  cr_assert_eq(fz_client_warm(c, p, 2, r), 0, "%s", fz_client_errmsg(c));
  cr_assert_eq(r[0].status, 0, "%s", r[0].message);
  cr_assert_eq(r[0].cached, 1);
  cr_assert_eq(r[1].status, 0, "%s", r[1].message);
  cr_assert_eq(r[1].cached, 0);
  cr_assert_eq(fz_client_stats(c, &st), 0);
  created = st.plans_created;
  hits = st.plan_hits;
  compress_f32(c, v, 256, 1000, 1e-2, "fast");
  cr_assert_eq(fz_client_stats(c, &st), 0);
  cr_assert_eq(st.plans_created, created);
  cr_assert_eq(st.plan_hits, hits + 1);
  free(v);
  fz_client_close(c);
  stop_fzd(h);
}

/* A budget smaller than one GPU plan: jobs still run, their plans are not
 * kept, and nothing held passes the budget. */
Test(gpu_warm, plan_over_the_budget, .timeout = 600) {
  fzd_harness *h = start_gpu_fzd("\"workers\": 1, \"plan_cache_bytes\": 4096");
  fz_client *c = connect_gpu(h);
  float *v = field_f32(512 * 512);
  compress_f32(c, v, 512, 512, 1e-3, NULL);
  compress_f32(c, v, 512, 512, 1e-3, NULL);
  fz_server_stats st;
  cr_assert_eq(fz_client_stats(c, &st), 0);
  cr_assert_leq(st.plan_bytes, 4096u);
  cr_assert_geq(st.plans_transient, 2u);
  free(v);
  fz_client_close(c);
  stop_fzd(h);
}

/* The archive the CPU engine makes of v (the oracle); free() it. */
static void *cpu_archive(const float *v, size_t rows, size_t cols, double eb,
                         const char *pipeline, size_t *len) {
  fz_params p;
  fz_params_init(&p);
  p.dtype = FZ_F32;
  p.ndims = 2;
  p.dims[0] = rows;
  p.dims[1] = cols;
  p.pipeline = pipeline;
  p.eb = eb;
  p.eb_mode = FZ_EB_REL;
  fz_plan *plan;
  char why[256];
  cr_assert_eq(fz_plan_create(&p, &plan, why, sizeof why), 0, "%s", why);
  size_t cap = fz_plan_compress_bound(plan);
  void *arc = malloc(cap);
  cr_assert_eq(fz_plan_compress(plan, v, rows * cols * sizeof(float), arc, cap, len), 0);
  fz_plan_destroy(plan);
  return arc;
}

/* One GPU fzd lifetime with its module cache in dir: a job of a chain the
 * JIT serves, whose archive must be the CPU engine's; the JIT counters after it. */
static void cache_run(const char *dir, const float *v, const void *want, size_t want_len,
                      fz_server_stats *st) {
  char settings[512];
  snprintf(settings, sizeof settings, "\"workers\": 2, \"jit_cache_dir\": \"%s\"", dir);
  fzd_harness *h = start_gpu_fzd(settings);
  fz_client *c = connect_gpu(h);
  fz_job j;
  fz_job_init(&j);
  j.dtype = "f32";
  j.ndims = 2;
  j.shape[0] = 600;
  j.shape[1] = 700;
  j.eb = 1e-3;
  j.mode = "rel";
  j.pipeline = "quant | diff | rze";
  j.in = v;
  j.in_len = 600 * 700 * sizeof(float);
  fz_result r;
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
  cr_assert_eq(r.data_len, want_len);
  cr_assert_eq(memcmp(r.data, want, want_len), 0, "the archive is not the CPU engine's");
  fz_client_free(r.data);
  cr_assert_eq(fz_client_stats(c, st), 0);
  cr_assert(st->has_jit, "a GPU fzd reports its JIT");
  fz_client_close(c);
  stop_fzd(h);
}

/* The module cache on disk: a second daemon on the same directory loads
 * the kernels its predecessor compiled instead of compiling them, and one
 * that finds every entry damaged refuses them, compiles again and still
 * writes the CPU engine's bytes. */
Test(gpu_warm, module_cache_on_disk_across_restarts, .timeout = 900) {
  char dir[] = "/tmp/fzd-jit-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  float *v = field_f32(600 * 700);
  size_t want_len;
  void *want = cpu_archive(v, 600, 700, 1e-3, "quant | diff | rze", &want_len);
  fz_server_stats st;

  cache_run(dir, v, want, want_len, &st);
  cr_assert_gt(st.jit_compiles, 0u, "a fresh cache compiles");
  cr_assert_gt(st.jit_disk_writes, 0u, "and writes its modules");
  cr_assert_gt(st.jit_disk_bytes, 0u);

  cache_run(dir, v, want, want_len, &st);
  cr_assert_eq(st.jit_compiles, 0u, "the second daemon compiled %llu modules",
               (unsigned long long)st.jit_compiles);
  cr_assert_gt(st.jit_disk_hits, 0u);

  /* Damage the last byte of every entry (the image, whose digest the
   * header holds). */
  char cmd[256];
  snprintf(cmd, sizeof cmd,
           "for f in %s/*; do [ -f \"$f\" ] && printf '\\377' | dd of=\"$f\" bs=1 "
           "seek=$(($(stat -c %%s \"$f\") - 1)) conv=notrunc status=none; done", dir);
  cr_assert_eq(system(cmd), 0);
  cache_run(dir, v, want, want_len, &st);
  cr_assert_gt(st.jit_disk_rejected, 0u, "damaged entries are refused");
  cr_assert_gt(st.jit_compiles, 0u, "and compiled again");

  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
  free(want);
  free(v);
}
