/*
 * test_lifecycle.c - fzd as an operator sees it: a full queue answers EBUSY
 * without dropping anything, SIGTERM answers every accepted job and exits 0,
 * SIGHUP reloads what may be reloaded, and bad configuration is refused with
 * the key and value quoted.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jobs_util.h"

Test(lifecycle, full_queue_answers_busy) {
  fzd_harness *h = start_daemon("\"workers\": 1, \"queue_capacity\": 1");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  size_t n = 1 << 21;
  float *x = malloc(n * sizeof(float));
  wire_field_f32(x, n, 4);
  enum { JOBS = 8 };
  for (uint32_t i = 0; i < JOBS; i++)
    send_compress_inline(&w, 100 + i, x, n, 1e-5);
  free(x);
  unsigned ok = 0, busy = 0, seen = 0;
  for (int i = 0; i < JOBS; i++) {
    fzp_message m;
    cr_assert_eq(wire_recv(&w, &m, 120000), 0);
    cr_assert(m.msgid >= 100 && m.msgid < 100 + JOBS);
    seen |= 1u << (m.msgid - 100);
    int code = wire_code(&m);
    cr_assert(code == 0 || code == FZ_EBUSY, "unexpected %s", fz_err_name(code));
    ok += code == 0;
    busy += code == FZ_EBUSY;
    fzp_message_free(&m);
  }
  cr_assert_eq(seen, (1u << JOBS) - 1, "every request gets exactly one reply");
  cr_assert_geq(ok, 2u);
  cr_assert_geq(busy, 1u);
  cr_assert_eq(stat_u64(&w, "stats", "busy_rejections"), busy);
  cr_assert_eq(stat_u64(&w, "stats", "jobs_done"), ok);
  wire_close(&w);
  int st = fzd_harness_stop(h, 30000);
  cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

Test(lifecycle, sigterm_answers_accepted_jobs) {
  fzd_harness *h = start_daemon("\"workers\": 1");
  wire w, probe;
  wire_open(&w, h, false);
  wire_open(&probe, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  cr_assert_eq(wire_hello(&probe, NULL), 0);
  size_t n = 1 << 22;
  float *x = malloc(n * sizeof(float));
  wire_field_f32(x, n, 6);
  enum { JOBS = 5 };
  for (uint32_t i = 0; i < JOBS; i++)
    send_compress_inline(&w, 10 + i, x, n, 1e-6);
  free(x);
  /* Accepted jobs are the ones in flight plus the ones already answered. */
  uint64_t inflight = 0, done = 0;
  for (int i = 0; i < 10000; i++) {
    inflight = stat_u64(&probe, "status", "inflight");
    done = stat_u64(&probe, "status", "jobs_done");
    if (inflight + done == JOBS)
      break;
    sleep_ms(1);
  }
  cr_assert_eq(inflight + done, JOBS);
  cr_assert_geq(inflight, 1, "the jobs finished before SIGTERM; make them larger");
  wire_close(&probe);
  cr_assert_eq(fzd_harness_kill(h, SIGTERM), 0);
  cr_assert_eq(fzd_harness_wait_notify(h, "STOPPING=1", 10000), 0);
  unsigned seen = 0;
  for (int i = 0; i < JOBS; i++) {
    fzp_message m;
    cr_assert_eq(wire_recv(&w, &m, 60000), 0, "reply %d of %d missing", i, JOBS);
    cr_assert_eq(wire_code(&m), 0);
    seen |= 1u << (m.msgid - 10);
    fzp_message_free(&m);
  }
  cr_assert_eq(seen, (1u << JOBS) - 1);
  cr_assert(wire_closed_by_peer(&w, 10000));
  wire_close(&w);
  int st = fzd_harness_wait_exit(h, 30000);
  cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
  /* The socket file is removed on exit. */
  cr_assert_neq(access(fzd_harness_socket_path(h), F_OK), 0);
  fzd_harness_stop(h, 1000);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  cr_assert_eq(fclose(f), 0);
}

Test(lifecycle, sighup_reloads) {
  fzd_harness *h = start_daemon("\"workers\": 2, \"queue_capacity\": 10");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  cr_assert_eq(stat_u64(&w, "status", "queue_capacity"), 10);
  char text[512];
  snprintf(text, sizeof(text),
           "{\"socket_path\": \"%s\", \"backend\": \"cpu\", \"log_level\": \"debug\", "
           "\"workers\": 3, \"queue_capacity\": 3}",
           fzd_harness_socket_path(h));
  write_file(fzd_harness_config_path(h), text);
  cr_assert_eq(fzd_harness_kill(h, SIGHUP), 0);
  cr_assert_eq(fzd_harness_wait_notify(h, "RELOADING=1", 10000), 0);
  cr_assert_eq(fzd_harness_wait_notify(h, "READY=1", 10000), 0);
  cr_assert_eq(stat_u64(&w, "status", "queue_capacity"), 3);
  cr_assert_eq(stat_u64(&w, "status", "workers"), 2, "workers needs a restart");
  char *log = fzd_harness_log(h);
  cr_assert_not_null(strstr(log, "\"workers\" changed (2 -> 3) but needs a restart"), "%s", log);
  cr_assert_not_null(strstr(log, "<6>config: \"queue_capacity\" reloaded: 10 -> 3"), "%s", log);
  free(log);

  /* A broken file is refused and the running configuration stays. */
  write_file(fzd_harness_config_path(h), "{\"queue_capacity\": \"many\"}");
  cr_assert_eq(fzd_harness_kill(h, SIGHUP), 0);
  cr_assert_eq(fzd_harness_wait_notify(h, "READY=1", 10000), 0);
  cr_assert_eq(stat_u64(&w, "status", "queue_capacity"), 3);
  log = fzd_harness_log(h);
  cr_assert_not_null(strstr(log, "<3>reload failed"), "%s", log);
  free(log);
  cr_assert_eq(wire_call0(&w, 9, "ping", NULL), 0);
  wire_close(&w);
  int st = fzd_harness_stop(h, 30000);
  cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Runs fzd with args; returns its exit status and its stderr in err. */
static int run_fzd(const char *const *args, char *err, size_t err_len) {
  int pfd[2];
  cr_assert_eq(pipe(pfd), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    dup2(pfd[1], 2);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    close(pfd[0]);
    const char *argv[16] = {FZD_PATH};
    for (int i = 0; args[i] != NULL && i < 14; i++)
      argv[i + 1] = args[i];
    unsetenv("NOTIFY_SOCKET");
    execv(FZD_PATH, (char *const *)argv);
    _exit(127);
  }
  close(pfd[1]);
  size_t len = 0;
  ssize_t n;
  char sink[4096];
  /* Read to the end, keeping what fits, so fzd never writes to a closed pipe. */
  while ((n = read(pfd[0], len + 1 < err_len ? err + len : sink,
                   len + 1 < err_len ? err_len - len - 1 : sizeof(sink))) > 0)
    if (len + 1 < err_len)
      len += (size_t)n;
  err[len] = '\0';
  close(pfd[0]);
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st));
  return WEXITSTATUS(st);
}

static int check_config(const char *json, char *err, size_t err_len) {
  char path[] = "/tmp/fzd-config-XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  cr_assert_eq(write(fd, json, strlen(json)), (ssize_t)strlen(json));
  close(fd);
  const char *args[] = {"--check-config", path, NULL};
  int rc = run_fzd(args, err, err_len);
  unlink(path);
  return rc;
}

Test(lifecycle, config_errors) {
  char err[2048];
  cr_assert_eq(check_config("{\"workers\": 4, \"log_level\": \"debug\"}", err, sizeof(err)), 0,
               "%s", err);
  cr_assert_eq(check_config("{}", err, sizeof(err)), 0, "%s", err);

  cr_assert_eq(check_config("{\"wokrers\": 4}", err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, "unknown setting \"wokrers\" (value 4)"), "%s", err);

  cr_assert_eq(check_config("{\"workers\": -3}", err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, "setting \"workers\": bad value -3"), "%s", err);

  cr_assert_eq(check_config("{\"queue_capacity\": 2.5}", err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, "setting \"queue_capacity\": bad value 2.5"), "%s", err);

  cr_assert_eq(check_config("{\"backend\": \"tpu\"}", err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, "setting \"backend\": bad value \"tpu\": expected one of "
                                 "auto, cpu, gpu"), "%s", err);

  cr_assert_eq(check_config("{\"socket_mode\": \"0999\"}", err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, "setting \"socket_mode\": bad value \"0999\""), "%s", err);

  /* tcp_address is a numeric address, never a name or a malformed one. */
  cr_assert_eq(check_config("{\"tcp_address\": \"localhost\"}", err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, "setting \"tcp_address\": bad value \"localhost\": "
                                 "expected a numeric IPv4 or IPv6 address"), "%s", err);
  cr_assert_eq(check_config("{\"tcp_address\": \"999.1.1.1\"}", err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, "bad value \"999.1.1.1\""), "%s", err);
  cr_assert_eq(check_config("{\"tcp_address\": \"::1\"}", err, sizeof(err)), 0, "%s", err);
  cr_assert_eq(check_config("{\"tcp_address\": \"0.0.0.0\"}", err, sizeof(err)), 0, "%s", err);
  /* A socket anyone may write to is refused; group access is the way. */
  cr_assert_eq(check_config("{\"socket_mode\": \"0666\"}", err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, "setting \"socket_mode\": bad value \"0666\": "
                                 "world-writable"), "%s", err);
  cr_assert_eq(check_config("{\"socket_mode\": \"0772\"}", err, sizeof(err)), 1);
  cr_assert_eq(check_config("{\"socket_mode\": \"0770\"}", err, sizeof(err)), 0, "%s", err);

  cr_assert_eq(check_config("{\"tcp_enabled\": \"yes\"}", err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, "setting \"tcp_enabled\": bad value \"yes\""), "%s", err);

  cr_assert_eq(check_config("{\"workers\": 1, \"workers\": 2}", err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, "\"workers\" appears twice"), "%s", err);

  cr_assert_eq(check_config("{\"workers\": 1,", err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, "not valid JSON"), "%s", err);

  cr_assert_eq(check_config("[1, 2]", err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, "must be a JSON object"), "%s", err);

  cr_assert_eq(check_config("{\"max_message_bytes\": 65536, \"max_inline_bytes\": 65536}",
                            err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, "\"max_inline_bytes\": bad value 65536"), "%s", err);

  const char *missing[] = {"--check-config", "/nonexistent/fzd.json", NULL};
  cr_assert_eq(run_fzd(missing, err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, "/nonexistent/fzd.json: cannot open"), "%s", err);

  const char *help[] = {"--help", NULL};
  cr_assert_eq(run_fzd(help, err, sizeof(err)), 0);
  const char *bogus[] = {"--frobnicate", NULL};
  cr_assert_eq(run_fzd(bogus, err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, "fzd --help"), "%s", err);
  const char *stray[] = {"extra", NULL};
  cr_assert_eq(run_fzd(stray, err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, "unexpected argument \"extra\""), "%s", err);
}

/* A GPU no machine has: refused whether or not the build has CUDA and the
 * machine a GPU, with the reason and the way out. */
Test(lifecycle, gpu_backend_refused_without_gpu) {
  char err[2048];
  const char *args[] = {"--backend", "gpu", "--gpu", "GPU-00000000-0000-0000-0000-000000000000",
                        "--socket", "/tmp/fzd-never.sock", NULL};
  cr_assert_eq(run_fzd(args, err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, "<3>backend \"gpu\": "), "%s", err);
  cr_assert(strstr(err, "this build has no GPU backend") != NULL ||
                strstr(err, "cannot use GPU \"GPU-00000000-0000-0000-0000-000000000000\"") != NULL,
            "%s", err);
  cr_assert_not_null(strstr(err, "use \"auto\" or \"cpu\""), "%s", err);
  cr_assert_neq(access("/tmp/fzd-never.sock", F_OK), 0);
}

Test(lifecycle, socket_mode_and_log_priorities) {
  fzd_harness *h = start_daemon("\"socket_mode\": \"0600\"");
  struct stat st;
  cr_assert_eq(stat(fzd_harness_socket_path(h), &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0600);
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  wire_close(&w);
  int rc = fzd_harness_kill(h, SIGINT);
  cr_assert_eq(rc, 0);
  int status = fzd_harness_wait_exit(h, 30000);
  cr_assert(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char *log = fzd_harness_log(h);
  /* Every line carries a journald priority; peer credentials are logged. */
  for (char *line = log; *line; line = strchr(line, '\n') + 1) {
    cr_assert(line[0] == '<' && strchr("3467", line[1]) && line[2] == '>', "line: %.60s",
              line);
    if (strchr(line, '\n') == NULL)
      break;
  }
  char want[64];
  snprintf(want, sizeof(want), "unix pid=%d uid=%u", (int)getpid(), (unsigned)getuid());
  cr_assert_not_null(strstr(log, want), "%s", log);
  free(log);
  fzd_harness_stop(h, 1000);
}

Test(lifecycle, watchdog_pings) {
  const char *env[] = {"WATCHDOG_USEC=100000", NULL};
  fzd_harness_options o = {.env = env};
  fzd_harness *h = NULL;
  cr_assert_eq(fzd_harness_start(&o, &h), 0);
  cr_assert_eq(fzd_harness_wait_notify(h, "WATCHDOG=1", 5000), 0);
  cr_assert_eq(fzd_harness_wait_notify(h, "WATCHDOG=1", 5000), 0);
  int st = fzd_harness_stop(h, 30000);
  cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

Test(lifecycle, socket_activation) {
  char dir[] = "/tmp/fzd-act-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/act.sock", dir);
  int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
  cr_assert_geq(lfd, 0);
  cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  cr_assert_eq(listen(lfd, 16), 0);
  fzd_harness_options o = {.listen_fd = lfd};
  fzd_harness *h = NULL;
  cr_assert_eq(fzd_harness_start(&o, &h), 0);
  close(lfd);
  /* The configured socket_path is not created: the passed socket serves. */
  cr_assert_neq(access(fzd_harness_socket_path(h), F_OK), 0);
  wire w;
  memset(&w, 0, sizeof(w));
  w.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert_eq(connect(w.fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  msgpack_sbuffer_init(&w.sb);
  msgpack_packer_init(&w.pk, &w.sb, msgpack_sbuffer_write);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  cr_assert_eq(wire_call0(&w, 2, "ping", NULL), 0);
  wire_close(&w);
  int st = fzd_harness_stop(h, 30000);
  cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  /* The socket belongs to systemd: fzd leaves the file alone. */
  cr_assert_eq(access(sa.sun_path, F_OK), 0);
  unlink(sa.sun_path);
  rmdir(dir);
}

/* A job larger than the memory fzd may take is answered ENOMEM, and fzd
 * goes on serving.  The limit is an address-space rlimit inherited by fzd;
 * sanitizer run-times reserve far more address space than that and cannot
 * start under it, so with a sanitized fzd (or FZD_BINARY) the test skips. */
Test(lifecycle, out_of_memory_is_an_error) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  cr_skip_test("built with a sanitizer: no address-space limit possible");
#endif
  if (getenv("FZD_BINARY"))
    cr_skip_test("FZD_BINARY may be a sanitized fzd: no address-space limit possible");
  struct rlimit lim = {.rlim_cur = (rlim_t)1536 << 20, .rlim_max = (rlim_t)1536 << 20};
  cr_assert_eq(setrlimit(RLIMIT_AS, &lim), 0);
  fzd_harness *h = start_daemon("\"workers\": 1");
  char path[256];
  snprintf(path, sizeof path, "%s/big.f32", fzd_harness_dir(h));
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0);
  cr_assert_eq(unlink(path), 0); /* the descriptor is all the test needs */
  uint64_t values = (uint64_t)512 << 20; /* 2 GiB of f32, sparse */
  cr_assert_eq(ftruncate(fd, (off_t)(values * 4)), 0);
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  msgpack_packer *pk = wire_begin(&w, 7, "compress", 6);
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, "f32");
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint64(pk, values);
  fzp_pack_key(pk, "eb");
  msgpack_pack_double(pk, 1e-3);
  fzp_pack_key(pk, "mode");
  fzp_pack_key(pk, "rel");
  fzp_pack_key(pk, "nfds");
  msgpack_pack_uint64(pk, 1);
  fzp_pack_key(pk, "in_fd");
  msgpack_pack_uint64(pk, 0);
  cr_assert_eq(wire_send(&w, &fd, 1), 0);
  close(fd);
  fzp_message m;
  cr_assert_eq(wire_recv(&w, &m, 120000), 0);
  cr_assert_eq(m.msgid, 7u);
  cr_assert_eq(wire_code(&m), FZ_ENOMEM, "got %s", fz_err_name(wire_code(&m)));
  fzp_message_free(&m);
  float x[4096];
  wire_field_f32(x, 4096, 2);
  roundtrip_inline(&w, 8, x, 4096, 1e-3);
  wire_close(&w);
  stop_daemon(h);
}
