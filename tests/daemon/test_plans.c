/*
 * test_plans.c - fzd's plan cache and warm plans, on a real daemon (CPU
 * backend): the byte budget (idle plans dropped, least recently used
 * first, the held bytes never above it, a plan larger than it still
 * serving its job), a preset and its spelled-out chain sharing one plan,
 * the "warm" setting (plans held before the first job, the first job a
 * hit, bad entries refused with their index and key, a plan that cannot be
 * made stopping the start before READY=1), the "warm" method (cached or
 * not, a bad entry beside good ones, the request limit), `fzctl warm`, and
 * the cpu_affinity setting (workers pinned only when it is on).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fz.h"
#include "jobs_util.h"
#include "wire.h"

/* ---- helpers ---------------------------------------------------------------- */

/* One counter of the "plans" map of "stats". */
static uint64_t plan_stat(wire *w, const char *key) {
  fzp_message m;
  cr_assert_eq(wire_call0(w, 600, "stats", &m), 0);
  const msgpack_object *plans;
  cr_assert_eq(fzp_get_obj(&m.result, "plans", &plans), 1, "stats has no plans");
  uint64_t v = 0;
  cr_assert_eq(fzp_get_u64(plans, key, &v), 1, "stats.plans has no %s", key);
  fzp_message_free(&m);
  return v;
}

/* An inline f32 compression of a smooth field of n values; returns the
 * error code. */
static int compress(wire *w, uint32_t msgid, size_t n, const char *pipeline) {
  float *x = malloc(n * sizeof *x);
  cr_assert_not_null(x);
  wire_field_f32(x, n, 7);
  msgpack_packer *pk = wire_begin(w, msgid, "compress", pipeline ? 6 : 5);
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, "f32");
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint64(pk, n);
  fzp_pack_key(pk, "eb");
  msgpack_pack_double(pk, 1e-3);
  fzp_pack_key(pk, "mode");
  fzp_pack_key(pk, "rel");
  if (pipeline) {
    fzp_pack_key(pk, "pipeline");
    fzp_pack_key(pk, pipeline);
  }
  fzp_pack_key(pk, "data");
  msgpack_pack_bin(pk, n * sizeof *x);
  msgpack_pack_bin_body(pk, x, n * sizeof *x);
  free(x);
  cr_assert_eq(wire_send(w, NULL, 0), 0);
  fzp_message m;
  cr_assert_eq(wire_recv(w, &m, 60000), 0);
  cr_assert_eq(m.msgid, msgid);
  int code = wire_code(&m);
  fzp_message_free(&m);
  return code;
}

/* A warm entry for the request packer: f32 [n], REL 1e-3, the pipeline. */
typedef struct entry {
  const char *dtype;
  uint64_t n;
  const char *pipeline;
} entry;

static void send_warm(wire *w, uint32_t msgid, const entry *e, unsigned count) {
  msgpack_packer *pk = wire_begin(w, msgid, "warm", 1);
  fzp_pack_key(pk, "plans");
  msgpack_pack_array(pk, count);
  for (unsigned i = 0; i < count; i++) {
    msgpack_pack_map(pk, 5);
    fzp_pack_key(pk, "dtype");
    fzp_pack_key(pk, e[i].dtype);
    fzp_pack_key(pk, "shape");
    msgpack_pack_array(pk, 1);
    msgpack_pack_uint64(pk, e[i].n);
    fzp_pack_key(pk, "eb");
    msgpack_pack_double(pk, 1e-3);
    fzp_pack_key(pk, "mode");
    fzp_pack_key(pk, "rel");
    fzp_pack_key(pk, "pipeline");
    fzp_pack_key(pk, e[i].pipeline);
  }
  cr_assert_eq(wire_send(w, NULL, 0), 0);
}

/* The reply's entry i (a map). */
static const msgpack_object *warm_entry(const fzp_message *m, unsigned i, unsigned count) {
  const msgpack_object *list;
  cr_assert_eq(fzp_get_obj(&m->result, "plans", &list), 1, "warm reply has no plans");
  cr_assert_eq(list->type, MSGPACK_OBJECT_ARRAY);
  cr_assert_eq(list->via.array.size, count);
  const msgpack_object *e = &list->via.array.ptr[i];
  cr_assert_eq(e->type, MSGPACK_OBJECT_MAP);
  uint64_t index = 99;
  cr_assert_eq(fzp_get_u64(e, "index", &index), 1);
  cr_assert_eq(index, i);
  return e;
}

static bool entry_bool(const msgpack_object *e, const char *key) {
  bool v = false;
  cr_assert_eq(fzp_get_bool(e, key, &v), 1, "warm entry has no %s", key);
  return v;
}

/* The balanced preset's chain as the engine spells it. */
static const char *balanced_chain(void) {
  size_t np;
  const fz_preset *pr = fz_presets(&np);
  for (size_t i = 0; i < np; i++)
    if (strcmp(pr[i].name, "balanced") == 0)
      return pr[i].chain;
  cr_assert_fail("no balanced preset");
  return NULL;
}

/* ---- the byte budget -------------------------------------------------------- */

/* A CPU plan of f32 [n] holds about 150 KB (work buffers of one 16 KiB
 * chunk and the chunk tables): a budget of 200 000 bytes keeps one plan
 * and never two, so two shapes in turn each drop the other. */
Test(plans, budget_drops_idle_plans_and_holds, .timeout = 120) {
  const uint64_t budget = 200000;
  fzd_harness *h = start_daemon("\"workers\": 1, \"plan_cache_bytes\": 200000");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  cr_assert_eq(plan_stat(&w, "budget"), budget);
  const size_t shapes[2] = {8192, 65536};
  for (unsigned k = 0; k < 6; k++) {
    cr_assert_eq(compress(&w, k + 1, shapes[k % 2], NULL), 0);
    uint64_t bytes = plan_stat(&w, "bytes"), held = plan_stat(&w, "held");
    cr_assert_gt(bytes, 0u, "the kept plan has no bytes");
    cr_assert_leq(bytes, budget, "plans hold %llu bytes over a budget of %llu",
                  (unsigned long long)bytes, (unsigned long long)budget);
    cr_assert_eq(held, 1u, "after job %u the cache holds %llu plans", k,
                 (unsigned long long)held);
  }
  cr_assert_eq(plan_stat(&w, "created"), 6u);
  cr_assert_eq(plan_stat(&w, "dropped"), 5u);
  cr_assert_eq(plan_stat(&w, "hits"), 0u);
  cr_assert_eq(plan_stat(&w, "transient"), 0u);
  /* The same shape twice is a hit: the budget only drops what cannot fit. */
  cr_assert_eq(compress(&w, 20, shapes[1], NULL), 0);
  cr_assert_eq(plan_stat(&w, "hits"), 1u);
  wire_close(&w);
  stop_daemon(h);
}

/* Two workers, two shapes in flight at once, a budget of one plan: a plan
 * in use is never dropped for another, so the second shape's plan is made
 * for its job only (transient) or waits its turn; every job succeeds and
 * the kept plans stay within the budget throughout. */
Test(plans, budget_with_plans_in_use, .timeout = 180) {
  const uint64_t budget = 200000;
  fzd_harness *h = start_daemon("\"workers\": 2, \"plan_cache_bytes\": 200000");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  const size_t n[2] = {16384, 32768};
  float *x = malloc(n[1] * sizeof *x);
  cr_assert_not_null(x);
  wire_field_f32(x, n[1], 5);
  for (unsigned round = 0; round < 20; round++) {
    for (unsigned k = 0; k < 4; k++)
      send_compress_inline(&w, 100 * round + k, x, n[k % 2], 1e-2);
    for (unsigned k = 0; k < 4; k++) {
      fzp_message m;
      cr_assert_eq(wire_recv(&w, &m, 60000), 0);
      cr_assert_eq(wire_code(&m), 0, "round %u: a job failed", round);
      fzp_message_free(&m);
    }
    cr_assert_leq(plan_stat(&w, "bytes"), budget);
    cr_assert_leq(plan_stat(&w, "held"), 1u);
  }
  uint64_t created = plan_stat(&w, "created"), hits = plan_stat(&w, "hits");
  cr_assert_eq(created + hits, 80u, "every job took a plan: %llu made, %llu found",
               (unsigned long long)created, (unsigned long long)hits);
  cr_assert_eq(plan_stat(&w, "held") + plan_stat(&w, "dropped") + plan_stat(&w, "transient"),
               created);
  free(x);
  wire_close(&w);
  stop_daemon(h);
}

/* Without a byte bound the same jobs keep both plans. */
Test(plans, no_budget_keeps_both_shapes, .timeout = 120) {
  fzd_harness *h = start_daemon("\"workers\": 1, \"plan_cache_bytes\": 0");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  for (unsigned k = 0; k < 4; k++)
    cr_assert_eq(compress(&w, k + 1, k % 2 ? 65536 : 8192, NULL), 0);
  cr_assert_eq(plan_stat(&w, "held"), 2u);
  cr_assert_eq(plan_stat(&w, "dropped"), 0u);
  cr_assert_eq(plan_stat(&w, "hits"), 2u);
  cr_assert_eq(plan_stat(&w, "budget"), 0u);
  wire_close(&w);
  stop_daemon(h);
}

/* A plan larger than the whole budget still serves its job, is counted,
 * and is not kept. */
Test(plans, plan_over_the_budget_serves_its_job, .timeout = 120) {
  fzd_harness *h = start_daemon("\"workers\": 1, \"plan_cache_bytes\": 1000");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  float x[4096];
  wire_field_f32(x, 4096, 3);
  roundtrip_inline(&w, 1, x, 4096, 1e-3);
  cr_assert_eq(compress(&w, 5, 4096, NULL), 0);
  cr_assert_eq(plan_stat(&w, "transient"), 2u);
  cr_assert_eq(plan_stat(&w, "held"), 0u);
  cr_assert_eq(plan_stat(&w, "bytes"), 0u);
  cr_assert_eq(plan_stat(&w, "hits"), 0u);
  cr_assert_eq(plan_stat(&w, "created"), 2u);
  wire_close(&w);
  stop_daemon(h);
}

/* "balanced", its spelled-out chain and the default pipeline: one plan,
 * found by the second and third job. */
Test(plans, preset_and_chain_are_one_plan, .timeout = 120) {
  fzd_harness *h = start_daemon("\"workers\": 1");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  cr_assert_eq(compress(&w, 1, 8192, "balanced"), 0);
  cr_assert_eq(compress(&w, 2, 8192, balanced_chain()), 0);
  cr_assert_eq(compress(&w, 3, 8192, NULL), 0);
  cr_assert_eq(plan_stat(&w, "created"), 1u);
  cr_assert_eq(plan_stat(&w, "hits"), 2u);
  cr_assert_eq(compress(&w, 4, 8192, "fast"), 0);
  cr_assert_eq(plan_stat(&w, "created"), 2u);
  wire_close(&w);
  stop_daemon(h);
}

/* ---- the warm setting --------------------------------------------------------- */

/* The harness returns once READY=1 came: the plans are held already, and
 * the first job of a warmed shape is a hit; the log has one line per entry. */
Test(plans, warm_setting_plans_held_before_ready, .timeout = 120) {
  fzd_harness *h = start_daemon(
      "\"workers\": 2, \"warm\": ["
      "{\"pipeline\": \"balanced\", \"dtype\": \"f32\", \"shape\": [8192], \"eb\": 1e-3, "
      "\"mode\": \"rel\"},"
      "{\"pipeline\": \"fast\", \"dtype\": \"f64\", \"shape\": [64, 64], \"eb\": 1e-4, "
      "\"mode\": \"abs\"},"
      "{\"pipeline\": \"lossless\", \"dtype\": \"i16\", \"shape\": [3000]}]");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  cr_assert_eq(plan_stat(&w, "held"), 3u);
  cr_assert_eq(plan_stat(&w, "created"), 3u);
  cr_assert_eq(stat_u64(&w, "stats", "jobs_done"), 0u, "warm-up is not counted as jobs");
  /* The spelled-out chain of the warmed preset finds its plan. */
  cr_assert_eq(compress(&w, 1, 8192, balanced_chain()), 0);
  cr_assert_eq(plan_stat(&w, "hits"), 1u);
  cr_assert_eq(plan_stat(&w, "created"), 3u);
  char *log = fzd_harness_log(h);
  cr_assert_not_null(strstr(log, "warm: f32 [8192] rel 0.001 balanced: plan made in "), "%s",
                     log);
  cr_assert_not_null(strstr(log, "warm: f64 [64, 64] abs 0.0001 fast: plan made in "), "%s",
                     log);
  cr_assert_not_null(strstr(log, "identical to the CPU engine"), "%s", log);
  cr_assert_not_null(strstr(log, "warm: 3 plans ready"), "%s", log);
  free(log);
  wire_close(&w);
  stop_daemon(h);
}

/* Runs fzd with a config of the given JSON and NOTIFY_SOCKET bound to a
 * datagram socket of ours; returns the exit status, the stderr in err, and
 * whether READY=1 was sent. */
static int run_fzd_config(const char *json, bool check, char *err, size_t err_len,
                          bool *ready) {
  char dir[] = "/tmp/fzd-plans-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char cfg[128], sock[128], notify[128];
  snprintf(cfg, sizeof cfg, "%s/fzd.json", dir);
  snprintf(sock, sizeof sock, "%s/fzd.sock", dir);
  snprintf(notify, sizeof notify, "%s/notify", dir);
  FILE *f = fopen(cfg, "w");
  cr_assert_not_null(f);
  fprintf(f, "{\"socket_path\": \"%s\", \"backend\": \"cpu\", %s}", sock, json);
  fclose(f);
  int ns = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  cr_assert_lt(strlen(notify), sizeof sa.sun_path);
  memcpy(sa.sun_path, notify, strlen(notify) + 1);
  cr_assert_eq(bind(ns, (struct sockaddr *)&sa, sizeof sa), 0);
  int pfd[2];
  cr_assert_eq(pipe(pfd), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    dup2(pfd[1], 2);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    close(pfd[0]);
    setenv("NOTIFY_SOCKET", notify, 1);
    const char *bin = getenv("FZD_BINARY") ? getenv("FZD_BINARY") : FZD_PATH;
    execl(bin, bin, check ? "--check-config" : "--config", cfg, (char *)NULL);
    _exit(127);
  }
  close(pfd[1]);
  size_t len = 0;
  ssize_t n;
  char sink[4096];
  while ((n = read(pfd[0], len + 1 < err_len ? err + len : sink,
                   len + 1 < err_len ? err_len - len - 1 : sizeof sink)) > 0)
    if (len + 1 < err_len)
      len += (size_t)n;
  err[len] = '\0';
  close(pfd[0]);
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  *ready = false;
  char dg[1024];
  ssize_t got;
  while ((got = recv(ns, dg, sizeof dg - 1, MSG_DONTWAIT)) > 0) {
    dg[got] = '\0';
    if (strstr(dg, "READY=1") != NULL)
      *ready = true;
  }
  close(ns);
  unlink(notify);
  unlink(cfg);
  unlink(sock);
  rmdir(dir);
  cr_assert(WIFEXITED(st), "fzd did not exit: status %d", st);
  return WEXITSTATUS(st);
}

/* A bad entry is refused with its index and key, by --check-config and
 * at start (before READY=1). */
Test(plans, warm_setting_bad_entry_refused, .timeout = 60) {
  static const struct {
    const char *json, *want;
  } cases[] = {
      {"\"warm\": [{\"dtype\": \"f32\", \"shape\": [10], \"eb\": 1e-3}, "
       "{\"dtype\": \"f16\", \"shape\": [10]}]",
       "setting \"warm\": entry 1: \"dtype\": bad value \"f16\""},
      {"\"warm\": [{\"dtype\": \"f32\", \"shape\": [0], \"eb\": 1e-3}]",
       "setting \"warm\": entry 0: \"shape\": bad value [0]"},
      {"\"warm\": [{\"dtype\": \"f32\", \"shape\": [10], \"eb\": 1e-3, \"pipline\": \"fast\"}]",
       "setting \"warm\": entry 0: unknown key \"pipline\""},
      {"\"warm\": [{\"dtype\": \"f32\", \"shape\": [10], \"eb\": 1e-3}, "
       "{\"dtype\": \"f32\", \"shape\": [10], \"eb\": 1e-3, \"pipeline\": \"quant | zap\"}]",
       "setting \"warm\": entry 1: "},
      {"\"warm\": [{\"dtype\": \"f32\", \"shape\": [10]}]",
       "setting \"warm\": entry 0: a lossy pipeline needs an error bound"},
      {"\"max_job_bytes\": 1000, \"warm\": [{\"dtype\": \"f64\", \"shape\": [1000], "
       "\"eb\": 1e-3}]",
       "setting \"warm\": entry 0: \"shape\": a field of this shape is 8000 bytes, more than "
       "max_job_bytes (1000)"},
      {"\"warm\": {\"dtype\": \"f32\"}", "setting \"warm\": bad value"},
  };
  char err[4096];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int check = 1; check >= 0; check--) {
      bool ready = true;
      int rc = run_fzd_config(cases[i].json, check, err, sizeof err, &ready);
      cr_assert_eq(rc, 1, "case %zu (%s): exit %d: %s", i, check ? "check" : "start", rc, err);
      cr_assert_not_null(strstr(err, cases[i].want), "case %zu: \"%s\" not in: %s", i,
                         cases[i].want, err);
      cr_assert(!ready, "case %zu: READY=1 sent", i);
    }
  /* The same entries, good, pass --check-config. */
  bool ready;
  cr_assert_eq(run_fzd_config("\"warm\": [{\"dtype\": \"f32\", \"shape\": [10, 10], "
                              "\"eb\": 1e-3, \"pipeline\": \"fast\", \"mode\": \"pwrel\"}]",
                              true, err, sizeof err, &ready), 0, "%s", err);
}

/* A plan whose job cannot run (its buffers exceed memory_limit): the
 * daemon logs the entry and exits 1 without READY=1. */
Test(plans, warm_setting_failure_stops_the_start, .timeout = 60) {
  char err[8192];
  bool ready = true;
  int rc = run_fzd_config("\"workers\": 1, \"memory_limit\": 1000000, \"warm\": ["
                          "{\"dtype\": \"f32\", \"shape\": [1000], \"eb\": 1e-3},"
                          "{\"dtype\": \"f32\", \"shape\": [1048576], \"eb\": 1e-3}]",
                          false, err, sizeof err, &ready);
  cr_assert_eq(rc, 1, "exit %d: %s", rc, err);
  cr_assert(!ready, "READY=1 was sent before the warm-up failed: %s", err);
  cr_assert_not_null(strstr(err, "setting \"warm\": entry 1 (f32 [1048576]"), "%s", err);
  cr_assert_not_null(strstr(err, "memory_limit"), "%s", err);
  cr_assert_not_null(strstr(err, "not serving"), "%s", err);
  cr_assert_null(strstr(err, "setting \"warm\": entry 0"), "%s", err);
  /* Without the failing entry it starts (the harness waits for READY=1). */
  fzd_harness *h = start_daemon("\"workers\": 1, \"memory_limit\": 1000000, \"warm\": "
                                "[{\"dtype\": \"f32\", \"shape\": [1000], \"eb\": 1e-3}]");
  stop_daemon(h);
}

/* ---- the warm method ------------------------------------------------------------ */

Test(plans, warm_method, .timeout = 120) {
  fzd_harness *h = start_daemon("\"workers\": 2");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  const entry two[2] = {{"f32", 8192, "balanced"}, {"f32", 4096, "quant | diff | rze"}};
  fzp_message m;
  send_warm(&w, 1, two, 2);
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), 0);
  for (unsigned i = 0; i < 2; i++) {
    const msgpack_object *e = warm_entry(&m, i, 2);
    cr_assert(!entry_bool(e, "cached"), "entry %u was cached on a fresh daemon", i);
    cr_assert(entry_bool(e, "identical"));
    double ms = -1;
    cr_assert_eq(fzp_get_f64(e, "ms", &ms), 1);
    cr_assert_geq(ms, 0.0);
  }
  char chain[256];
  const msgpack_object *e1 = warm_entry(&m, 1, 2);
  const char *s;
  uint32_t len;
  cr_assert_eq(fzp_get_str(e1, "chain", &s, &len), 1);
  snprintf(chain, sizeof chain, "%.*s", (int)len, s);
  cr_assert_str_eq(chain, "quant(eb=0.001,mode=rel) | diff(map=zigzag) | rze(levels=4)");
  fzp_message_free(&m);
  cr_assert_eq(plan_stat(&w, "held"), 2u);

  /* Again: both cached now; a bad entry between them fails alone. */
  const entry three[3] = {{"f32", 8192, "balanced"}, {"f16", 10, "fast"},
                          {"f32", 4096, "quant | diff | rze"}};
  send_warm(&w, 2, three, 3);
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), 0);
  cr_assert(entry_bool(warm_entry(&m, 0, 3), "cached"));
  cr_assert(entry_bool(warm_entry(&m, 2, 3), "cached"));
  const msgpack_object *bad = warm_entry(&m, 1, 3), *err;
  cr_assert_eq(fzp_get_obj(bad, "error", &err), 1, "the bad entry has no error");
  int64_t code = 0;
  cr_assert_eq(fzp_get_i64(err, "code", &code), 1);
  cr_assert_eq(code, FZ_EDTYPE);
  cr_assert_eq(fzp_get_str(err, "message", &s, &len), 1);
  cr_assert(len > 9 && memcmp(s, "plans[1]:", 9) == 0, "message: %.*s", (int)len, s);
  cr_assert_not_null(memmem(s, len, "\"dtype\"", 7), "message: %.*s", (int)len, s);
  fzp_message_free(&m);

  /* The warmed shape's job is a hit. */
  uint64_t hits = plan_stat(&w, "hits");
  cr_assert_eq(compress(&w, 3, 4096, "quant|diff|rze"), 0);
  cr_assert_eq(plan_stat(&w, "hits"), hits + 1);

  /* The limit: 16 entries at most, none at all is refused too. */
  entry many[17];
  for (unsigned i = 0; i < 17; i++)
    many[i] = (entry){"f32", 1000 + i, "fast"};
  send_warm(&w, 4, many, 17);
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), FZ_EPARAMS);
  fzp_message_free(&m);
  send_warm(&w, 5, many, 0);
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), FZ_EPARAMS);
  fzp_message_free(&m);
  send_warm(&w, 6, many, 16);
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), 0);
  for (unsigned i = 0; i < 16; i++)
    cr_assert(entry_bool(warm_entry(&m, i, 16), "identical"));
  fzp_message_free(&m);

  /* Unknown keys are named, as for compress. */
  msgpack_packer *pk = wire_begin(&w, 7, "warm", 1);
  fzp_pack_key(pk, "plan");
  msgpack_pack_array(pk, 0);
  cr_assert_eq(wire_send(&w, NULL, 0), 0);
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), FZ_EPARAMS);
  fzp_message_free(&m);
  cr_assert_eq(stat_u64(&w, "stats", "jobs_failed"), 0u);
  wire_close(&w);
  stop_daemon(h);
}

/* "stats" has the plan memory fields, and no jit object on the CPU. */
Test(plans, stats_fields, .timeout = 60) {
  fzd_harness *h = start_daemon("\"workers\": 1, \"plan_cache_bytes\": 123456789");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  cr_assert_eq(plan_stat(&w, "budget"), 123456789u);
  cr_assert_eq(plan_stat(&w, "bytes"), 0u);
  cr_assert_eq(plan_stat(&w, "transient"), 0u);
  cr_assert_eq(compress(&w, 1, 8192, NULL), 0);
  cr_assert_gt(plan_stat(&w, "bytes"), 0u);
  fzp_message m;
  cr_assert_eq(wire_call0(&w, 2, "stats", &m), 0);
  const msgpack_object *jit;
  cr_assert_eq(fzp_get_obj(&m.result, "jit", &jit), 0, "the CPU backend reports a JIT");
  fzp_message_free(&m);
  wire_close(&w);
  stop_daemon(h);
}

/* ---- cpu_affinity --------------------------------------------------------------- */

/* The Cpus_allowed_list of a status file, in out. */
static bool status_affinity(const char *path, char out[64]) {
  char line[256];
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return false;
  bool found = false;
  while (!found && fgets(line, sizeof line, f) != NULL)
    if (strncmp(line, "Cpus_allowed_list:", 18) == 0) {
      char *v = line + 18;
      v += strspn(v, " \t");
      v[strcspn(v, "\n")] = '\0';
      snprintf(out, 64, "%s", v);
      found = true;
    }
  fclose(f);
  return found;
}

/* The process's (its main thread's) list. */
static void process_affinity(pid_t pid, char out[64]) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  cr_assert(status_affinity(path, out), "no Cpus_allowed_list in %s", path);
}

/* The Cpus_allowed_list of every thread of pid. */
static unsigned thread_affinities(pid_t pid, char lists[][64], unsigned cap) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  cr_assert_not_null(d);
  unsigned n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL && n < cap) {
    if (de->d_name[0] == '.')
      continue;
    char sp[300];
    snprintf(sp, sizeof sp, "/proc/%d/task/%s/status", (int)pid, de->d_name);
    if (status_affinity(sp, lists[n]))
      n++;
  }
  closedir(d);
  return n;
}

static bool single_cpu(const char *list) { return strpbrk(list, ",-") == NULL; }

Test(plans, cpu_affinity_off_by_default, .timeout = 60) {
  cpu_set_t mine;
  cr_assert_eq(sched_getaffinity(0, sizeof mine, &mine), 0);
  fzd_harness *h = start_daemon("\"workers\": 2");
  /* The workers have started (READY=1 comes after them). */
  char lists[64][64], main_list[64];
  process_affinity(fzd_harness_pid(h), main_list);
  unsigned n = thread_affinities(fzd_harness_pid(h), lists, 64);
  cr_assert_geq(n, 3u, "fzd has %u threads; expected the loop and 2 workers", n);
  for (unsigned i = 0; i < n; i++)
    cr_assert_str_eq(lists[i], main_list, "a thread is on %s, the process on %s", lists[i],
                     main_list);
  if (CPU_COUNT(&mine) >= 2)
    cr_assert(!single_cpu(main_list), "fzd runs on one CPU only: %s", main_list);
  stop_daemon(h);
}

Test(plans, cpu_affinity_pins_workers, .timeout = 60) {
  cpu_set_t mine;
  cr_assert_eq(sched_getaffinity(0, sizeof mine, &mine), 0);
  if (CPU_COUNT(&mine) < 2)
    cr_skip_test("one CPU: pinning cannot be told from not pinning");
  fzd_harness *h = start_daemon("\"workers\": 2, \"cpu_affinity\": true");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  /* A job on each worker makes sure both threads have run their start. */
  cr_assert_eq(compress(&w, 1, 4096, NULL), 0);
  cr_assert_eq(compress(&w, 2, 4096, NULL), 0);
  char lists[64][64];
  unsigned n = 0, pinned = 0;
  for (int tries = 0; tries < 100 && pinned < 2; tries++) {
    n = thread_affinities(fzd_harness_pid(h), lists, 64);
    pinned = 0;
    for (unsigned i = 0; i < n; i++)
      pinned += single_cpu(lists[i]);
    if (pinned < 2)
      sleep_ms(20);
  }
  char main_list[64];
  process_affinity(fzd_harness_pid(h), main_list);
  cr_assert_eq(pinned, 2u, "%u of %u threads are pinned to one CPU", pinned, n);
  cr_assert(!single_cpu(main_list), "the loop thread is pinned: %s", main_list);
  wire_close(&w);
  stop_daemon(h);
}
