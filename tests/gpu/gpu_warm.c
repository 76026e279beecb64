/*
 * gpu_warm.c - warm plans on the GPU backend: fzd started with a "warm"
 * list prepares each plan on its workers and checks the GPU's archive and
 * decompression of a synthetic field against the CPU engine's before it
 * says READY=1; once it serves, "stats" shows the plans held with their
 * device bytes under plan_cache_bytes, a job of a warmed shape is a plan
 * hit (nothing is made for it), the "warm" method says the plan is cached,
 * and a new shape warmed on the running daemon is made, checked and then
 * found by its job.  Skipped without a GPU.
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
