/*
 * main.c - fzd's entry point: the command line, start-up in the order that
 * makes READY=1 true (config, backend, workers, the warm plans, listeners,
 * then notify), the
 * signals (SIGTERM/SIGINT drain and exit, SIGHUP reloads), the watchdog, and
 * the drain that ends the process with every accepted job answered.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "backend.h"
#include "cpu.h"
#include "log.h"
#include "notify.h"
#include "server.h"
#include "warm.h"

static fzd_server server;

static void usage(FILE *out) {
  fprintf(out,
          "Usage: fzd [OPTIONS]\n"
          "Compression daemon for scientific arrays (error-bounded, GPU or CPU).\n\n"
          "Options:\n"
          "  --config FILE        read settings from the JSON file FILE\n"
          "  --check-config FILE  validate FILE, print the verdict, exit 0 or 1\n"
          "  --socket PATH        listen on PATH (overrides socket_path)\n"
          "  --backend NAME       auto, cpu or gpu (overrides backend)\n"
          "  --gpu ID             GPU index or UUID (overrides gpu)\n"
          "  --help               show this help\n"
          "  --version            show the version\n\n"
          "Signals: SIGTERM/SIGINT finish accepted jobs and exit; SIGHUP reloads FILE.\n\n");
  fzd_config_print_help(out);
}

/* The command-line overrides, applied after every (re)load. */
static int apply_overrides(fzd_config *cfg, char *why, size_t why_len) {
  if (server.override_socket != NULL) {
    if (strlen(server.override_socket) >= 108 || server.override_socket[0] == '\0') {
      snprintf(why, why_len, "--socket \"%s\": must be 1 to 107 bytes",
               server.override_socket);
      return FZ_ECONFIG;
    }
    if (server.override_socket[0] != '/') {
      snprintf(why, why_len, "--socket \"%s\": expected an absolute path",
               server.override_socket);
      return FZ_ECONFIG;
    }
    snprintf(cfg->socket_path, sizeof(cfg->socket_path), "%s", server.override_socket);
    cfg->socket_path_set = true;
  }
  if (server.override_backend != NULL) {
    static const char *names[] = {"auto", "cpu", "gpu"};
    uint64_t i;
    for (i = 0; i < 3; i++)
      if (strcmp(server.override_backend, names[i]) == 0)
        break;
    if (i == 3) {
      snprintf(why, why_len, "--backend \"%s\": expected auto, cpu or gpu",
               server.override_backend);
      return FZ_ECONFIG;
    }
    cfg->backend = i;
  }
  if (server.override_gpu != NULL) {
    if (strlen(server.override_gpu) > 64 || server.override_gpu[0] == '\0') {
      snprintf(why, why_len, "--gpu \"%s\": must be 1 to 64 bytes", server.override_gpu);
      return FZ_ECONFIG;
    }
    snprintf(cfg->gpu, sizeof(cfg->gpu), "%s", server.override_gpu);
  }
  return 0;
}

static int load_config(fzd_config *cfg, char *why, size_t why_len) {
  fzd_config_defaults(cfg);
  if (server.config_path != NULL) {
    int err = fzd_config_load(server.config_path, cfg, why, why_len);
    if (err < 0)
      return err;
  }
  return apply_overrides(cfg, why, why_len);
}

/* ---- descriptors ----------------------------------------------------------- */

/* The soft descriptor limit goes up to the hard one: the daemon's use grows
 * with its clients, and systemd's default soft limit (1024) is kept low only
 * for programs that still use select(). */
static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
    return;
  rlim_t was = rl.rlim_cur;
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
    fzd_warn("cannot raise the descriptor limit from %llu to %llu: %s",
             (unsigned long long)was, (unsigned long long)rl.rlim_max, strerror(errno));
  else
    fzd_debug("descriptor limit raised from %llu to %llu", (unsigned long long)was,
              (unsigned long long)rl.rlim_max);
}

void fzd_server_fd_cap(fzd_server *srv) {
  uint64_t cap = srv->cfg.max_fds_total;
  if (cap == 0) {
    struct rlimit rl;
    uint64_t soft = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                        ? (uint64_t)rl.rlim_cur
                        : 1024;
    cap = soft / 2;
  }
  srv->fds_cap = cap;
}

/* ---- readiness, watchdog ---------------------------------------------------- */

static void notify_ready(void) {
  char msg[1024];
  snprintf(msg, sizeof(msg),
           "READY=1\nSTATUS=serving unix:%s%s%s backend:%s workers:%u\nMAINPID=%d",
           server.unix_path[0] ? server.unix_path : "(from systemd)",
           server.tcp_l.active ? " tcp:" : "",
           server.tcp_l.active ? server.tcp_bound : "", server.backend_name,
           server.workers, (int)getpid());
  fzd_notify(msg); /* a failure is logged there */
}

static void on_watchdog(uv_timer_t *t) {
  (void)t;
  fzd_notify("WATCHDOG=1");
}

/* ---- the hot loop ------------------------------------------------------------ */

/* How long the loop keeps polling after the last job came back, by
 * default, where the backend's workers look at the queue before they sleep
 * (the GPU's): about the time a client takes to send its next request. */
#define HOT_TAIL_US 300u

/* Every turn of the hot loop: finished jobs are collected here, without
 * the async handle's wake-up (fzd_pool_set_hot). */
static void on_hot(uv_idle_t *h) {
  fzd_server *srv = h->data;
  if (srv->pool != NULL)
    fzd_pool_collect(srv->pool);
  if (srv->inflight == 0 && uv_hrtime() > srv->hot_until_ns) {
    uv_idle_stop(h);
    srv->hot_on = false;
    if (srv->pool != NULL)
      fzd_pool_set_hot(srv->pool, false);
  }
}

void fzd_server_busy(fzd_server *srv) {
  if (srv->hot_tail_ns == 0 || !srv->hot_init)
    return;
  srv->hot_until_ns = uv_hrtime() + srv->hot_tail_ns;
  if (!srv->hot_on) {
    uv_idle_start(&srv->hot, on_hot);
    srv->hot_on = true;
    if (srv->pool != NULL)
      fzd_pool_set_hot(srv->pool, true);
  }
}

/* ---- drain and exit ---------------------------------------------------------- */

static void on_handle_closed(uv_handle_t *h) { (void)h; }

void fzd_server_check_drained(fzd_server *srv) {
  if (!srv->draining || srv->conns != NULL || srv->inflight > 0 || srv->pool == NULL)
    return;
  /* Every accepted job is answered and every connection is gone: close the
   * remaining handles so that uv_run() returns. */
  fzd_pool_stop(srv->pool);
  srv->pool = NULL;
  uv_close((uv_handle_t *)&srv->sig_term, on_handle_closed);
  uv_close((uv_handle_t *)&srv->sig_int, on_handle_closed);
  uv_close((uv_handle_t *)&srv->sig_hup, on_handle_closed);
  if (srv->watchdog_on)
    uv_close((uv_handle_t *)&srv->watchdog, on_handle_closed);
  if (srv->drain_timer_on)
    uv_close((uv_handle_t *)&srv->drain_timer, on_handle_closed);
  if (srv->sweep_on)
    uv_close((uv_handle_t *)&srv->sweep, on_handle_closed);
  if (srv->hot_init)
    uv_close((uv_handle_t *)&srv->hot, on_handle_closed);
  srv->watchdog_on = srv->drain_timer_on = srv->sweep_on = false;
  srv->hot_init = srv->hot_on = false;
}

static void on_drain_timeout(uv_timer_t *t) {
  fzd_server *srv = t->data;
  fzd_warn("shutdown_timeout_s (%llu) passed with %llu jobs unanswered and %llu "
           "connections open; closing them",
           (unsigned long long)srv->cfg.shutdown_timeout_s,
           (unsigned long long)srv->inflight, (unsigned long long)srv->nconns);
  fzd_conns_close_all(srv);
}

static void begin_drain(fzd_server *srv, int signum) {
  if (srv->draining) {
    fzd_info("signal %d: already shutting down (%llu jobs in flight)", signum,
             (unsigned long long)srv->inflight);
    return;
  }
  srv->draining = true;
  fzd_notify("STOPPING=1");
  fzd_info("signal %d: shutting down; finishing %llu accepted jobs", signum,
           (unsigned long long)srv->inflight);
  fzd_listeners_close(srv);
  if (srv->cfg.shutdown_timeout_s > 0) {
    uv_timer_init(srv->loop, &srv->drain_timer);
    srv->drain_timer.data = srv;
    uv_timer_start(&srv->drain_timer, on_drain_timeout,
                   srv->cfg.shutdown_timeout_s * 1000, 0);
    uv_unref((uv_handle_t *)&srv->drain_timer);
    srv->drain_timer_on = true;
  }
  fzd_conns_drain(srv);
  fzd_server_check_drained(srv);
}

static void reload(fzd_server *srv) {
  char msg[96];
  snprintf(msg, sizeof(msg), "RELOADING=1\nMONOTONIC_USEC=%llu",
           (unsigned long long)fzd_notify_monotonic_usec());
  fzd_notify(msg);
  fzd_config next;
  char why[512];
  if (load_config(&next, why, sizeof(why)) < 0) {
    fzd_err("reload failed, keeping the running configuration: %s", why);
  } else {
    unsigned n = fzd_config_apply_reload(&srv->cfg, &next);
    fzd_log_set_level((enum fzd_log_level)srv->cfg.log_level);
    fzd_server_fd_cap(srv);
    fzd_info("configuration reloaded (%u settings changed)", n);
  }
  notify_ready();
}

static void on_signal(uv_signal_t *h, int signum) {
  fzd_server *srv = h->data;
  if (signum == SIGHUP) {
    if (!srv->draining)
      reload(srv);
    return;
  }
  begin_drain(srv, signum);
}

/* ---- start-up ----------------------------------------------------------------- */

/* The GPU backend pins one GPU (the "gpu" setting) with one stream per
 * worker; "auto" falls back to the CPU when this build has no CUDA or the
 * GPU cannot be used, and says why. */
static int choose_backend(fzd_server *srv) {
  if (srv->cfg.backend != FZD_BACKEND_CPU) {
    unsigned streams = srv->cfg.workers ? (unsigned)srv->cfg.workers
                                        : FZD_GPU_DEFAULT_WORKERS;
    char why[256] = "this build has no GPU backend";
    int err = fzd_gpu_open(srv->cfg.gpu, streams, srv->cfg.gpu_memory_limit, &srv->gpu,
                           why, sizeof(why));
    if (err == 0) {
      srv->backend_name = "gpu";
      srv->device_name = fzd_gpu_name(srv->gpu);
      srv->workers = streams;
      fzd_info("backend %s: GPU \"%s\" is %s (%s), %u streams",
               fzd_backend_name(srv->cfg.backend), srv->cfg.gpu, srv->device_name,
               fzd_gpu_uuid(srv->gpu), streams);
      return 0;
    }
    if (srv->cfg.backend == FZD_BACKEND_GPU) {
      fzd_err("backend \"gpu\": cannot use GPU \"%s\": %s (%s); use \"auto\" or \"cpu\"",
              srv->cfg.gpu, why, fz_strerror(err));
      return err;
    }
    fzd_info("backend \"auto\": no usable GPU \"%s\" (%s); using the CPU", srv->cfg.gpu,
             why);
  }
  if (strcmp(srv->cfg.gpu, "0") != 0)
    fzd_info("setting gpu \"%s\" has no effect on the CPU backend", srv->cfg.gpu);
  srv->backend_name = "cpu";
  srv->device_name = "cpu";
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  srv->workers = srv->cfg.workers ? (unsigned)srv->cfg.workers
                                  : (unsigned)(cores > 0 ? cores : 1);
  return 0;
}

/* The "warm" setting: every entry prepared and checked on the workers
 * (one job each, so they spread over the workers), before the listeners
 * open and READY=1.  A failed entry stops the start: a backend that
 * disagrees with the CPU engine must not serve, and a plan the operator
 * asked for that cannot be made (no memory, a bad chain for this backend)
 * is a configuration the daemon cannot honour. */
static int warm_start(fzd_server *srv) {
  unsigned n = (unsigned)srv->cfg.nwarm;
  if (n == 0)
    return 0;
  fzd_job *jobs[FZD_WARM_MAX] = {NULL};
  int err = 0;
  for (unsigned i = 0; i < n && err == 0; i++) {
    jobs[i] = calloc(1, sizeof *jobs[i]);
    if (jobs[i] == NULL || (jobs[i]->warm = calloc(1, sizeof *jobs[i]->warm)) == NULL) {
      err = FZ_ENOMEM;
      break;
    }
    jobs[i]->kind = FZD_JOB_WARM;
    jobs[i]->in_fd = jobs[i]->out_fd = -1;
    jobs[i]->warm->n = 1;
    jobs[i]->warm->mem = &srv->mem;
    jobs[i]->warm->e[0] = srv->cfg.warm[i];
  }
  if (err < 0) {
    fzd_err("warm: no memory for %u entries", n);
  } else {
    char status[64];
    snprintf(status, sizeof status, "STATUS=preparing %u warm plans", n);
    fzd_notify(status);
    uint64_t t0 = fzd_notify_monotonic_usec();
    fzd_pool_run(srv->pool, jobs, n);
    for (unsigned i = 0; i < n; i++) {
      const fzd_warm_result *r = &jobs[i]->warm->r[0];
      if (r->err == 0)
        continue;
      char what[300];
      fzd_warm_describe(&srv->cfg.warm[i], what, sizeof what);
      fzd_err("setting \"warm\": entry %u (%s%s%s) failed: %s (%s); not serving", i, what,
              r->chain[0] ? ", chain " : "", r->chain, r->why, fz_err_name(r->err));
      if (err == 0)
        err = r->err;
    }
    if (err == 0)
      fzd_info("warm: %u plans ready in %.1f ms", n,
               (double)(fzd_notify_monotonic_usec() - t0) / 1000.0);
  }
  for (unsigned i = 0; i < n; i++)
    if (jobs[i] != NULL) {
      free(jobs[i]->warm);
      jobs[i]->warm = NULL;
      fzd_job_free(jobs[i]);
    }
  return err;
}

static int start(fzd_server *srv) {
  raise_nofile();
  fzd_server_fd_cap(srv);
  fzd_reserve_fd_refill(srv);
  int err = choose_backend(srv);
  if (err < 0)
    return err;
  fzd_info("memory_limit: %llu bytes for jobs, warm-up and incoming messages",
           (unsigned long long)srv->mem.limit);
  fzd_backend_ops be;
  unsigned plans = (unsigned)srv->cfg.plan_cache_entries;
  char jit_dir[FZD_CONFIG_STR];
  fzd_config_jit_dir(&srv->cfg, jit_dir, sizeof jit_dir);
  const fzd_gpu_settings gs = {.plan_cache_entries = plans,
                               .plan_cache_bytes = srv->cfg.plan_cache_bytes,
                               .jit = srv->cfg.jit,
                               .jit_cache_dir = jit_dir,
                               .jit_cache_max_bytes = srv->cfg.jit_cache_max_bytes};
  err = srv->gpu != NULL ? fzd_gpu_backend(srv->gpu, &gs, &be)
                         : fzd_cpu_backend(plans, srv->cfg.plan_cache_bytes, &srv->mem, &be);
  if (err < 0) {
    fzd_err("cannot make the %s backend: %s", srv->backend_name, fz_strerror(err));
    return err;
  }
  /* Both backends: pinning helps a node that runs nothing else and hurts
   * one shared with other work, so it is the operator's choice. */
  be.pin_cores = srv->cfg.cpu_affinity;
  /* busy_poll_us, when set, replaces the backend's own spin (backend.h). */
  uint64_t busy = srv->cfg.busy_poll_us;
  if (busy)
    be.spin_us = (unsigned)busy;
  srv->hot_tail_ns = 1000u * (busy ? busy : be.spin_us ? HOT_TAIL_US : 0);
  /* On the GPU backend this warms every worker up before READY=1. */
  err = fzd_pool_start(&srv->pool, srv->loop, srv->workers, &be, fzd_conn_job_done, srv);
  if (err < 0) {
    fzd_err("cannot start %u workers: %s", srv->workers, fz_strerror(err));
    return err;
  }
  if ((err = warm_start(srv)) < 0)
    return err;
  err = fzd_listeners_open(srv);
  if (err < 0)
    return err;
  uv_signal_t *sigs[] = {&srv->sig_term, &srv->sig_int, &srv->sig_hup};
  int nums[] = {SIGTERM, SIGINT, SIGHUP};
  for (int i = 0; i < 3; i++) {
    uv_signal_init(srv->loop, sigs[i]);
    sigs[i]->data = srv;
    uv_signal_start(sigs[i], on_signal, nums[i]);
  }
  /* conn.c starts it when a connection arrives (handshake_timeout_ms). */
  uv_timer_init(srv->loop, &srv->sweep);
  srv->sweep.data = srv;
  srv->sweep_on = true;
  uv_idle_init(srv->loop, &srv->hot);
  srv->hot.data = srv;
  srv->hot_init = true;
  uint64_t wd = fzd_notify_watchdog_usec();
  if (srv->cfg.watchdog && wd > 0) {
    uint64_t ms = wd / 2000 ? wd / 2000 : 1;
    uv_timer_init(srv->loop, &srv->watchdog);
    uv_timer_start(&srv->watchdog, on_watchdog, ms, ms);
    srv->watchdog_on = true;
    fzd_info("watchdog: pinging every %llu ms", (unsigned long long)ms);
  }
  fzd_info("%s ready: %u workers, backend %s, queue capacity %llu", FZD_VERSION_STRING,
           srv->workers, srv->backend_name, (unsigned long long)srv->cfg.queue_capacity);
  notify_ready();
  return 0;
}

int main(int argc, char **argv) {
  enum { OPT_CONFIG = 1, OPT_CHECK, OPT_SOCKET, OPT_BACKEND, OPT_GPU, OPT_HELP, OPT_VERSION };
  static const struct option opts[] = {
      {"config", required_argument, NULL, OPT_CONFIG},
      {"check-config", required_argument, NULL, OPT_CHECK},
      {"socket", required_argument, NULL, OPT_SOCKET},
      {"backend", required_argument, NULL, OPT_BACKEND},
      {"gpu", required_argument, NULL, OPT_GPU},
      {"help", no_argument, NULL, OPT_HELP},
      {"version", no_argument, NULL, OPT_VERSION},
      {NULL, 0, NULL, 0}};
  const char *check = NULL;
  int o;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (o) {
    case OPT_CONFIG:
      server.config_path = optarg;
      break;
    case OPT_CHECK:
      check = optarg;
      break;
    case OPT_SOCKET:
      server.override_socket = optarg;
      break;
    case OPT_BACKEND:
      server.override_backend = optarg;
      break;
    case OPT_GPU:
      server.override_gpu = optarg;
      break;
    case OPT_HELP:
      usage(stdout);
      return 0;
    case OPT_VERSION:
      printf("%s (protocol %d, engine %u.%u.%u)\n", FZD_VERSION_STRING,
             FZP_PROTOCOL_VERSION, fz_version() >> 16, (fz_version() >> 8) & 0xff,
             fz_version() & 0xff);
      return 0;
    default:
      fprintf(stderr, "Try 'fzd --help' for the options and settings.\n");
      return 1;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "fzd: unexpected argument \"%s\"; try 'fzd --help'\n", argv[optind]);
    return 1;
  }
  char why[512];
  if (check != NULL) {
    server.config_path = check;
    if (load_config(&server.cfg, why, sizeof(why)) < 0) {
      fprintf(stderr, "fzd: %s\n", why);
      return 1;
    }
    printf("%s: ok\n", check);
    return 0;
  }
  if (load_config(&server.cfg, why, sizeof(why)) < 0) {
    fzd_err("%s", why);
    return 1;
  }
  fzd_log_set_level((enum fzd_log_level)server.cfg.log_level);
  signal(SIGPIPE, SIG_IGN);

  uv_loop_t loop;
  if (uv_loop_init(&loop) < 0) {
    fzd_err("cannot create the event loop");
    return 1;
  }
  loop.data = &server;
  server.loop = &loop;
  server.reserve_fd = -1;
  server.start_usec = fzd_notify_monotonic_usec();
  fzd_budget_init(&server.mem, server.cfg.memory_limit);
  if (start(&server) < 0) {
    /* Everything start() opened is closed and the loop with it, so that a
     * failed start leaks nothing (sanitizer builds report any leak). */
    fzd_listeners_close(&server);
    if (server.pool != NULL) {
      fzd_pool_stop(server.pool);
      server.pool = NULL;
    }
    uv_run(&loop, UV_RUN_NOWAIT); /* the close callbacks */
    uv_loop_close(&loop);
    if (server.reserve_fd >= 0)
      close(server.reserve_fd);
    fzd_gpu_close(server.gpu);
    fzd_budget_destroy(&server.mem);
    return 1;
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  if (server.reserve_fd >= 0)
    close(server.reserve_fd);
  fzd_gpu_close(server.gpu); /* the workers and connections are gone */
  free(server.uids);
  fzd_budget_destroy(&server.mem);
  int rc = uv_loop_close(&loop);
  if (rc < 0) {
    fzd_err("event loop closed with handles still open: %s", uv_strerror(rc));
    return 1;
  }
  fzd_info("stopped: %llu jobs done, %llu failed, %llu canceled",
           (unsigned long long)server.stats.jobs_done,
           (unsigned long long)server.stats.jobs_failed,
           (unsigned long long)server.stats.jobs_canceled);
  return 0;
}
