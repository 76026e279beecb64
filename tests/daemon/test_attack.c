/*
 * test_attack.c - what a hostile local user (or a TCP client without the
 * token) could do to everybody else, and the bars that must hold under each
 * attack: a fresh client's round trip completes in under 1 s, and fzd's
 * resident memory stays under 256 MiB plus memory_limit.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "archive_fixup.h"
#include "fz.h"
#include "jobs_util.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* VmRSS of pid in MiB. */
static double rss_mib(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  double kib = -1;
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmRSS: %lf kB", &kib) == 1)
      break;
  fclose(f);
  cr_assert_geq(kib, 0);
  return kib / 1024.0;
}

/* The bars: a new client connects, says hello, compresses and decompresses
 * a small field within a second, and fzd holds less than 256 MiB beyond
 * memory_limit.  tests/run.sh runs these suites once more against a
 * ThreadSanitizer fzd (FZD_BINARY), several times slower and with shadow
 * memory beside every byte it touches: there the round trip may take 3 s
 * and the memory bar is not asserted (the plain build holds it). */
static bool sanitized_fzd(void) {
  return getenv("FZD_BINARY") != NULL;
}

static void bars_hold(fzd_harness *h, double memory_limit_mib, const char *attack) {
  double t0 = now_ms();
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  float x[4096];
  wire_field_f32(x, 4096, 7);
  roundtrip_inline(&w, 2, x, 4096, 1e-3);
  wire_close(&w);
  double ms = now_ms() - t0, rss = rss_mib(fzd_harness_pid(h));
  cr_log_info("%s: a fresh client's round trip took %.1f ms; fzd resident %.0f MiB", attack, ms,
              rss);
  cr_assert_lt(ms, sanitized_fzd() ? 3000.0 : 1000.0, "%s: a fresh client waited %.0f ms", attack,
               ms);
  if (!sanitized_fzd())
    cr_assert_lt(rss, 256.0 + memory_limit_mib, "%s: fzd holds %.0f MiB", attack, rss);
}

/* memory_limit in MiB, as fzd reports it in status (a connection of its own). */
static double limit_mib(fzd_harness *h) {
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  double mib = (double)stat_u64(&w, "status", "memory_limit") / 1048576.0;
  wire_close(&w);
  return mib;
}

/* Reads one reply and checks its code; returns its message text (static). */
static const char *expect_code(wire *w, int code, int timeout_ms) {
  static char text[512];
  fzp_message m;
  int err = wire_recv(w, &m, timeout_ms);
  cr_assert_eq(err, 0, "no reply (%d)", err);
  cr_assert_eq(wire_code(&m), code, "got %s, want %s", fz_err_name(wire_code(&m)),
               fz_err_name(code));
  const char *s = "";
  uint32_t len = 0;
  fzp_get_str(&m.error, "message", &s, &len);
  snprintf(text, sizeof text, "%.*s", (int)len, s);
  fzp_message_free(&m);
  return text;
}

/* The head of [0, msgid, "compress", {"dtype": "f32", "shape": [n/4],
 * "eb": 1e-3, "data": bin32 of n bytes}] without the bin's body. */
static size_t compress_head(unsigned char *out, uint32_t msgid, uint32_t n) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  fzp_pack_request_begin(&pk, msgid, "compress", 4);
  fzp_pack_key(&pk, "dtype");
  fzp_pack_key(&pk, "f32");
  fzp_pack_key(&pk, "shape");
  msgpack_pack_array(&pk, 1);
  msgpack_pack_uint64(&pk, n / 4);
  fzp_pack_key(&pk, "eb");
  msgpack_pack_double(&pk, 1e-3);
  fzp_pack_key(&pk, "data");
  msgpack_pack_bin(&pk, n);
  size_t len = sb.size;
  memcpy(out, sb.data, len);
  msgpack_sbuffer_destroy(&sb);
  return len;
}

/* Sends up to len bytes without blocking for more than quiet_ms at a time;
 * returns what was sent. */
static size_t send_some(int fd, const char *p, size_t len, int quiet_ms) {
  size_t off = 0;
  while (off < len) {
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    if (poll(&pfd, 1, quiet_ms) <= 0 || (pfd.revents & (POLLHUP | POLLERR)))
      break;
    ssize_t n = send(fd, p + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
      continue;
    if (n <= 0)
      break;
    off += (size_t)n;
  }
  return off;
}

/* Item 1: 40 connections each send the first 12 MiB of a 24 MiB message
 * and stop.  fzd used to hold all of it (480 MiB here, 64 GiB with the
 * default 1,024 connections); now the input buffers of all connections
 * take at most half of memory_limit (128 MiB here), and those that would
 * pass it are answered EBUSY and closed. */
Test(attack, partial_messages_are_bounded) {
  fzd_harness *h = start_daemon("\"workers\": 1, \"memory_limit\": 134217728");
  enum { CONNS = 40 };
  const uint32_t whole = 24u << 20, part = 12u << 20;
  char *body = calloc(1, part);
  cr_assert_not_null(body);
  wire c[CONNS];
  unsigned busy = 0;
  for (int i = 0; i < CONNS; i++) {
    wire_open(&c[i], h, false);
    cr_assert_eq(wire_hello(&c[i], NULL), 0);
    unsigned char head[128];
    size_t hl = compress_head(head, 2, whole);
    cr_assert_eq(wire_send_raw(&c[i], head, hl), 0);
    send_some(c[i].fd, body, part, 100);
  }
  bars_hold(h, 128, "40 connections holding 12 MiB of a message each");
  for (int i = 0; i < CONNS; i++) {
    fzp_message m;
    if (wire_recv(&c[i], &m, 50) == 0) {
      busy += wire_code(&m) == FZ_EBUSY;
      fzp_message_free(&m);
    }
    wire_close(&c[i]);
  }
  cr_log_info("%u of %d connections were answered EBUSY", busy, CONNS);
  cr_assert_gt(busy, 0u);
  cr_assert_lt(busy, (unsigned)CONNS, "the connections that fit were refused too");
  free(body);
  stop_daemon(h);
}

/* A message that could never fit in half of memory_limit is refused at
 * once with ENOMEM, not EBUSY: retrying would not help. */
Test(attack, message_larger_than_half_the_limit) {
  fzd_harness *h = start_daemon("\"memory_limit\": 16777216");
  char *body = calloc(1, 12u << 20);
  cr_assert_not_null(body);
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  unsigned char head[128];
  size_t hl = compress_head(head, 2, 12u << 20);
  cr_assert_eq(wire_send_raw(&w, head, hl), 0);
  send_some(w.fd, body, 12u << 20, 200);
  const char *text = expect_code(&w, FZ_ENOMEM, 10000);
  cr_assert(strstr(text, "memory_limit") != NULL, "%s", text);
  wire_close(&w);
  free(body);
  bars_hold(h, 16, "a message larger than half of memory_limit");
  stop_daemon(h);
}

/* Item 1: before its hello a connection may send no more than a hello
 * needs.  A 1 MiB "hello" from a TCP client without the token used to be
 * read whole (and 64 MiB ones renewed every few seconds held 1 GB). */
Test(attack, unauthenticated_message_is_capped) {
  fzd_harness *h = start_daemon("\"tcp_enabled\": true, \"tcp_port\": 0, "
                                "\"tcp_token\": \"sesame\"");
  char *name = malloc(1u << 20);
  cr_assert_not_null(name);
  memset(name, 'x', 1u << 20);
  wire w;
  wire_open(&w, h, true);
  msgpack_packer *pk = wire_begin(&w, 1, "hello", 2);
  fzp_pack_key(pk, "version");
  msgpack_pack_int(pk, FZP_PROTOCOL_VERSION);
  fzp_pack_key(pk, "client");
  msgpack_pack_str(pk, 1u << 20);
  msgpack_pack_str_body(pk, name, 1u << 20);
  wire_send(&w, NULL, 0); /* fzd may hang up before it has all of it */
  const char *text = expect_code(&w, FZ_EMSGSIZE, 10000);
  cr_assert(strstr(text, "hello") != NULL, "%s", text);
  cr_assert(wire_closed_by_peer(&w, 10000));
  wire_close(&w);
  /* The same on the Unix socket, for a first message that is not a hello. */
  wire_open(&w, h, false);
  unsigned char head[128];
  size_t hl = compress_head(head, 1, 1u << 20);
  cr_assert_eq(wire_send_raw(&w, head, hl), 0);
  expect_code(&w, FZ_EMSGSIZE, 10000);
  cr_assert(wire_closed_by_peer(&w, 10000));
  wire_close(&w);
  free(name);
  bars_hold(h, 0, "oversized hellos");
  stop_daemon(h);
}

/* Item 1: a connection that stops in the middle of a message is answered
 * ETIMEDOUT and closed after message_timeout_ms of silence. */
Test(attack, stalled_message_times_out) {
  fzd_harness *h = start_daemon("\"message_timeout_ms\": 500");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  unsigned char head[128];
  size_t hl = compress_head(head, 2, 1u << 20);
  cr_assert_eq(wire_send_raw(&w, head, hl), 0);
  double t0 = now_ms();
  const char *text = expect_code(&w, FZ_ETIMEDOUT, 10000);
  double ms = now_ms() - t0;
  cr_log_info("stalled message answered after %.0f ms: %s", ms, text);
  cr_assert(strstr(text, "message_timeout_ms") != NULL, "%s", text);
  cr_assert_geq(ms, 450.0);
  cr_assert_lt(ms, 3000.0);
  cr_assert(wire_closed_by_peer(&w, 10000));
  wire_close(&w);
  /* A connection that says hello and then idles between messages stays. */
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  sleep_ms(900);
  cr_assert_eq(wire_call0(&w, 3, "ping", NULL), 0);
  wire_close(&w);
  stop_daemon(h);
}

/* Runs `fzd --check-config` on text; returns the exit status and puts what
 * fzd printed in out. */
static int check_config(const char *text, char *out, size_t len) {
  char dir[] = "/tmp/fzd-attack-XXXXXX", path[64], cmd[512];
  cr_assert_not_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/fzd.json", dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
  const char *bin = getenv("FZD_BINARY") ? getenv("FZD_BINARY") : FZD_PATH;
  snprintf(cmd, sizeof cmd, "'%s' --check-config '%s' 2>&1", bin, path);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  size_t n = fread(out, 1, len - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  unlink(path);
  rmdir(dir);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Item 8: a string with an embedded NUL used to be cut there ("ab\u0000cd"
 * became the token "ab"), and a refused token was quoted in the log.
 * Item 9: a relative socket_path passed --check-config. */
Test(attack, config_strings_are_whole_and_secret) {
  char out[1024];
  cr_assert_eq(check_config("{\"tcp_token\": \"ab\\u0000cd\"}", out, sizeof out), 1, "%s", out);
  cr_assert(strstr(out, "\\u0000"), "%s", out);
  cr_assert_eq(check_config("{\"socket_path\": \"/run/x\\u0000y\"}", out, sizeof out), 1);
  /* An escaped backslash before u0000 is a plain string. */
  cr_assert_eq(check_config("{\"tcp_token\": \"ab\\\\u0000cd\"}", out, sizeof out), 0, "%s", out);
  char secret[400] = "{\"tcp_token\": \"";
  for (int i = 0; i < 30; i++)
    strcat(secret, "hunter2-x");
  strcat(secret, "\"}");
  cr_assert_eq(check_config(secret, out, sizeof out), 1, "%s", out);
  cr_assert(strstr(out, "tcp_token") && !strstr(out, "hunter2"), "the token is quoted: %s", out);
  cr_assert_eq(check_config("{\"socket_path\": \"run/fzd.sock\"}", out, sizeof out), 1);
  cr_assert(strstr(out, "absolute path"), "%s", out);
  cr_assert_eq(check_config("{\"socket_path\": \"/run/fzd/fzd.sock\"}", out, sizeof out), 0);
}

/* Sends a warm request of count entries of f32 rows x cols. */
static void send_warm(wire *w, uint32_t msgid, unsigned count, uint64_t rows, uint64_t cols) {
  msgpack_packer *pk = wire_begin(w, msgid, "warm", 1);
  fzp_pack_key(pk, "plans");
  msgpack_pack_array(pk, count);
  for (unsigned i = 0; i < count; i++) {
    msgpack_pack_map(pk, 4);
    fzp_pack_key(pk, "dtype");
    fzp_pack_key(pk, "f32");
    fzp_pack_key(pk, "shape");
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint64(pk, rows);
    msgpack_pack_uint64(pk, cols);
    fzp_pack_key(pk, "eb");
    msgpack_pack_double(pk, 1e-3 * (i + 1));
    fzp_pack_key(pk, "pipeline");
    fzp_pack_key(pk, "balanced");
  }
  cr_assert_eq(wire_send(w, NULL, 0), 0);
}

/* The error name of each entry of a warm reply ("" for a prepared one). */
static unsigned warm_errors(const fzp_message *m, char names[][16], unsigned max) {
  const msgpack_object *plans;
  cr_assert_eq(fzp_get_obj(&m->result, "plans", &plans), 1);
  unsigned n = plans->via.array.size < max ? plans->via.array.size : max;
  for (unsigned i = 0; i < n; i++) {
    const msgpack_object *err;
    names[i][0] = '\0';
    if (fzp_get_obj(&plans->via.array.ptr[i], "error", &err) == 1) {
      const char *s;
      uint32_t len;
      cr_assert_eq(fzp_get_str(err, "name", &s, &len), 1);
      snprintf(names[i], 16, "%.*s", (int)len, s);
    }
  }
  return n;
}

/* Item 4: an entry that could never fit in memory_limit is refused at
 * once; it used to run, outside the limit (a 1 GiB entry reached 2.6 GB
 * under a 1.5 GiB limit). */
Test(attack, warm_larger_than_memory_limit_is_refused_at_once) {
  fzd_harness *h = start_daemon("\"workers\": 1, \"memory_limit\": 67108864");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  double t0 = now_ms();
  send_warm(&w, 2, 1, 4096, 4096); /* a 64 MiB field: about 330 MiB to prepare */
  fzp_message m;
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  double ms = now_ms() - t0;
  cr_assert_eq(wire_code(&m), 0);
  char names[1][16];
  cr_assert_eq(warm_errors(&m, names, 1), 1u);
  fzp_message_free(&m);
  cr_log_info("a warm entry of 5 x 64 MiB under a 64 MiB limit: %s after %.0f ms", names[0], ms);
  cr_assert_str_eq(names[0], "ENOMEM");
  cr_assert_lt(ms, 1000.0);
  wire_close(&w);
  stop_daemon(h);
}

/* Item 4: two clients warm an entry each that fits memory_limit alone (a
 * 24 MiB field, about 123 MiB to prepare, under 160 MiB) but not both at
 * once.  What fzd holds of the limit never passes it, the second entry
 * waits for the first, both are prepared, and a fresh client is served
 * meanwhile. */
Test(attack, concurrent_warms_stay_under_the_limit, .timeout = 240) {
  const uint64_t limit = 160u << 20;
  fzd_harness *h = start_daemon("\"workers\": 2, \"memory_limit\": 167772160");
  wire a, b, watch;
  wire_open(&a, h, false);
  wire_open(&b, h, false);
  wire_open(&watch, h, false);
  cr_assert_eq(wire_hello(&a, NULL), 0);
  cr_assert_eq(wire_hello(&b, NULL), 0);
  cr_assert_eq(wire_hello(&watch, NULL), 0);
  send_warm(&a, 2, 1, 2048, 3072);
  send_warm(&b, 2, 1, 2048, 3072);
  uint64_t max_held = 0;
  double max_rss = 0;
  bool served = false;
  int replies = 0;
  struct pollfd pf[2] = {{.fd = a.fd, .events = POLLIN}, {.fd = b.fd, .events = POLLIN}};
  for (int round = 0; replies < 2 && round < 20000; round++) {
    uint64_t held = stat_u64(&watch, "status", "memory_held");
    if (held > max_held)
      max_held = held;
    double rss = rss_mib(fzd_harness_pid(h));
    if (rss > max_rss)
      max_rss = rss;
    if (!served && held > 0) { /* a warm-up runs now */
      bars_hold(h, 160, "two warms of 123 MiB under a 160 MiB limit");
      served = true;
    }
    if (poll(pf, 2, 10) > 0)
      for (int i = 0; i < 2; i++)
        if (pf[i].revents & POLLIN) {
          fzp_message m;
          cr_assert_eq(wire_recv(i ? &b : &a, &m, 60000), 0);
          char names[1][16];
          cr_assert_eq(warm_errors(&m, names, 1), 1u);
          cr_assert_str_empty(names[0], "a warm entry failed: %s", names[0]);
          fzp_message_free(&m);
          pf[i].fd = -1;
          replies++;
        }
  }
  cr_log_info("two warms: at most %llu bytes of memory_limit held, %.0f MiB resident",
              (unsigned long long)max_held, max_rss);
  cr_assert_eq(replies, 2);
  cr_assert(served);
  cr_assert_geq(max_held, UINT64_C(100) << 20, "the warm-up reserved nothing");
  cr_assert_leq(max_held, limit);
  if (!sanitized_fzd())
    cr_assert_lt(max_rss, 256.0 + 160.0);
  wire_close(&a);
  wire_close(&b);
  wire_close(&watch);
  stop_daemon(h);
}

/* An archive of n zero floats (tiny), for decompress replies of 4n bytes. */
static void *zeros_archive(size_t n, size_t *arc_len) {
  float *x = calloc(n, sizeof(float));
  cr_assert_not_null(x);
  fz_params p;
  fz_params_init(&p);
  p.dtype = FZ_F32;
  p.ndims = 1;
  p.dims[0] = n;
  p.eb = 1e-2;
  p.threads = 1;
  fz_plan *pl;
  cr_assert_eq(fz_plan_create(&p, &pl, NULL, 0), 0);
  size_t cap = fz_plan_compress_bound(pl);
  void *arc = malloc(cap);
  cr_assert_eq(fz_plan_compress(pl, x, n * sizeof(float), arc, cap, arc_len), 0);
  fz_plan_destroy(pl);
  free(x);
  return arc;
}

static void send_decompress(wire *w, uint32_t msgid, const void *arc, size_t arc_len) {
  msgpack_packer *pk = wire_begin(w, msgid, "decompress", 1);
  fzp_pack_key(pk, "data");
  msgpack_pack_bin(pk, (uint32_t)arc_len);
  msgpack_pack_bin_body(pk, arc, arc_len);
  cr_assert_eq(wire_send(w, NULL, 0), 0);
}

/* Item 5: a connection that never reads its replies asks for two of 40
 * MiB.  It used to be let through past its own budget by one reply (80 MiB
 * owed), so that with another client's 60 MiB reply the default total of
 * 128 MiB was passed and that client got EBUSY.  Now the second job waits
 * until the first reply is read, the connection owes at most its budget
 * (64 MiB), and the other client is served. */
Test(attack, unread_replies_leave_room_for_others, .timeout = 240) {
  fzd_harness *h = start_daemon("\"workers\": 2");
  size_t big_len, other_len;
  void *big = zeros_archive(10u << 20, &big_len);     /* 40 MiB out */
  void *other = zeros_archive(15u << 20, &other_len); /* 60 MiB out */
  wire bad, good;
  wire_open(&bad, h, false);
  wire_open(&good, h, false);
  cr_assert_eq(wire_hello(&bad, NULL), 0);
  cr_assert_eq(wire_hello(&good, NULL), 0);
  send_decompress(&bad, 2, big, big_len);
  send_decompress(&bad, 3, big, big_len);
  for (int i = 0; i < 3000 && stat_u64(&good, "status", "inflight") > 0; i++)
    sleep_ms(5);
  send_decompress(&good, 4, other, other_len);
  fzp_message m;
  cr_assert_eq(wire_recv(&good, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), 0, "the other client got %s", fz_err_name(wire_code(&m)));
  fzp_message_free(&m);
  bars_hold(h, limit_mib(h), "a connection owing its whole reply budget");
  /* Nothing accepted is dropped: the unread client gets both once it reads. */
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(wire_recv(&bad, &m, 60000), 0);
    cr_assert_eq(wire_code(&m), 0);
    fzp_message_free(&m);
  }
  free(big);
  free(other);
  wire_close(&bad);
  wire_close(&good);
  stop_daemon(h);
}

static unsigned log_count(const fzd_harness *h, const char *needle) {
  char *log = fzd_harness_log(h);
  cr_assert_not_null(log);
  unsigned n = 0;
  for (const char *p = log; (p = strstr(p, needle)) != NULL; p++)
    n++;
  free(log);
  return n;
}

/* Item 6: TCP connections without the token, opened and dropped as fast
 * as possible, used to write a line each (about 9,500 lines a second,
 * enough for journald to drop fzd's real messages). */
Test(attack, connection_lines_are_rate_limited) {
  fzd_harness *h = start_daemon("\"tcp_enabled\": true, \"tcp_port\": 0, "
                                "\"tcp_token\": \"sesame\"");
  for (int i = 0; i < 300; i++) {
    int fd = fzd_harness_connect_tcp(h);
    cr_assert_geq(fd, 0);
    close(fd);
  }
  sleep_ms(300);
  unsigned lines = log_count(h, " from tcp ");
  cr_log_info("300 connections: %u lines", lines);
  cr_assert_leq(lines, 20u); /* the dropped ones are counted when the window ends */
  bars_hold(h, 0, "300 token-less connections");
  stop_daemon(h);
}

/* Item 6: one local user could hold every connection slot; now a user
 * may hold max_connections_per_user of them, and more are refused. */
Test(attack, one_user_holds_at_most_its_share) {
  fzd_harness *h = start_daemon("\"max_connections_per_user\": 4");
  double mib = limit_mib(h);
  wire w[5];
  for (int i = 0; i < 4; i++) {
    wire_open(&w[i], h, false);
    cr_assert_eq(wire_hello(&w[i], NULL), 0);
  }
  wire_open(&w[4], h, false);
  const char *text = expect_code(&w[4], FZ_EBUSY, 10000);
  cr_assert(strstr(text, "max_connections_per_user"), "%s", text);
  cr_assert(wire_closed_by_peer(&w[4], 10000));
  wire_close(&w[4]);
  wire_close(&w[0]);
  sleep_ms(100);
  /* The fresh client of the bars is the same user here: it takes the room
   * the closed connection left. */
  bars_hold(h, mib, "a user at max_connections_per_user");
  sleep_ms(100);
  wire_open(&w[0], h, false);
  cr_assert_eq(wire_hello(&w[0], NULL), 0);
  for (int i = 0; i < 4; i++)
    wire_close(&w[i]);
  stop_daemon(h);
}

/* Item 6: TCP connections that never say hello used to fill
 * max_unauthenticated and lock out the clients that have the token (0 of
 * 25 served); now the one that has waited longest makes room. */
Test(attack, silent_tcp_connections_do_not_lock_out_the_token) {
  fzd_harness *h = start_daemon("\"tcp_enabled\": true, \"tcp_port\": 0, "
                                "\"tcp_token\": \"sesame\", \"max_unauthenticated\": 4, "
                                "\"tcp_handshake_timeout_ms\": 60000");
  double mib = limit_mib(h);
  wire silent[4];
  for (int i = 0; i < 4; i++)
    wire_open(&silent[i], h, true);
  sleep_ms(100);
  unsigned served = 0;
  for (int k = 0; k < 10; k++) {
    wire w;
    wire_open(&w, h, true);
    served += wire_hello(&w, "sesame") == 0;
    wire_close(&w);
    wire_close(&silent[k % 4]); /* the attacker renews its room */
    wire_open(&silent[k % 4], h, true);
  }
  cr_log_info("%u of 10 clients with the token served", served);
  cr_assert_eq(served, 10u);
  bars_hold(h, mib, "silent TCP connections");
  for (int i = 0; i < 4; i++)
    wire_close(&silent[i]);
  stop_daemon(h);
}

/* Item 9: a param the request cannot use was ignored, whatever its value
 * (in_offset -1 with inline data); now it is EPARAMS, and the connection
 * stays usable. */
Test(attack, params_the_request_cannot_use) {
  fzd_harness *h = start_daemon(NULL);
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  float x[256] = {0};
  msgpack_packer *pk = wire_begin(&w, 2, "compress", 5);
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, "f32");
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint64(pk, 256);
  fzp_pack_key(pk, "eb");
  msgpack_pack_double(pk, 1e-3);
  fzp_pack_key(pk, "data");
  msgpack_pack_bin(pk, sizeof x);
  msgpack_pack_bin_body(pk, x, sizeof x);
  fzp_pack_key(pk, "in_offset");
  msgpack_pack_int(pk, -1);
  cr_assert_eq(wire_send(&w, NULL, 0), 0);
  const char *text = expect_code(&w, FZ_EPARAMS, 10000);
  cr_assert(strstr(text, "in_offset"), "%s", text);
  pk = wire_begin(&w, 3, "compress", 5);
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, "f32");
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint64(pk, 256);
  fzp_pack_key(pk, "eb");
  msgpack_pack_double(pk, 1e-3);
  fzp_pack_key(pk, "data");
  msgpack_pack_bin(pk, sizeof x);
  msgpack_pack_bin_body(pk, x, sizeof x);
  fzp_pack_key(pk, "out_offset");
  msgpack_pack_uint64(pk, 0);
  cr_assert_eq(wire_send(&w, NULL, 0), 0);
  text = expect_code(&w, FZ_EPARAMS, 10000);
  cr_assert(strstr(text, "out_offset"), "%s", text);
  cr_assert_eq(wire_call0(&w, 4, "ping", NULL), 0);
  wire_close(&w);
  stop_daemon(h);
}

/* Item 8: decompressing into a client's memfd writes every page of it,
 * memory fzd makes (two 836 KB requests filled 8 GB of shared memory);
 * now those pages count against memory_limit while the job writes them. */
Test(attack, memfd_output_counts_against_memory_limit) {
  fzd_harness *h = start_daemon("\"memory_limit\": 33554432");
  size_t arc_len;
  void *arc = zeros_archive(12u << 20, &arc_len); /* 48 MiB out */
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  int mfd = memfd_create("fzd-attack-out", MFD_CLOEXEC);
  cr_assert_geq(mfd, 0);
  msgpack_packer *pk = wire_begin(&w, 2, "decompress", 3);
  fzp_pack_key(pk, "data");
  msgpack_pack_bin(pk, (uint32_t)arc_len);
  msgpack_pack_bin_body(pk, arc, arc_len);
  fzp_pack_key(pk, "out_fd");
  msgpack_pack_uint64(pk, 0);
  fzp_pack_key(pk, "nfds");
  msgpack_pack_uint64(pk, 1);
  cr_assert_eq(wire_send(&w, &mfd, 1), 0);
  const char *text = expect_code(&w, FZ_ENOMEM, 30000);
  cr_assert(strstr(text, "memory_limit"), "%s", text);
  struct stat st;
  cr_assert_eq(fstat(mfd, &st), 0);
  cr_assert_eq(st.st_size, 0, "fzd wrote %lld bytes into the memfd", (long long)st.st_size);
  close(mfd);
  free(arc);
  wire_close(&w);
  stop_daemon(h);
}

/* Item 9: an archive whose quant step disagrees with the absolute bound
 * its header states (bins four times as wide) decoded values twice the
 * bound away; now the header is refused as corrupt.  The daemon and every
 * client decode with this parser. */
Test(attack, quant_step_must_serve_the_bound) {
  enum { N = 65536 };
  float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
  cr_assert(x && y);
  for (size_t i = 0; i < N; i++)
    x[i] = (float)(100.0 * sin((double)i * 0.001) + (double)(i % 7) * 0.01);
  fz_params p;
  fz_params_init(&p);
  p.dtype = FZ_F32;
  p.ndims = 1;
  p.dims[0] = N;
  p.eb = 1e-3;
  p.eb_mode = FZ_EB_ABS;
  p.threads = 1;
  fz_plan *pl;
  cr_assert_eq(fz_plan_create(&p, &pl, NULL, 0), 0);
  size_t cap = fz_plan_compress_bound(pl), len = 0, out = 0;
  uint8_t *a = malloc(cap);
  cr_assert_eq(fz_plan_compress(pl, x, N * sizeof(float), a, cap, &len), 0);
  fz_plan_destroy(pl);
  fze_header layout;
  cr_assert_eq(fze_header_parse(a, len, &layout), 0);
  /* The quant parameters: eb, eb_abs (both 1e-3 under ABS), then step. */
  double eb = 1e-3, step;
  size_t at = 0;
  while (at + 8 <= layout.header_len && memcmp(a + at, &eb, 8) != 0)
    at++;
  cr_assert_lt(at + 24, layout.header_len, "no quant parameters in the header");
  cr_assert_eq(memcmp(a + at + 8, &eb, 8), 0);
  memcpy(&step, a + at + 16, 8);
  cr_assert(step > 0 && step <= 2 * eb);
  cr_assert_eq(fz_decompress(a, len, y, N * sizeof(float), &out, 1), 0);
  step = 8 * eb;
  memcpy(a + at + 16, &step, 8);
  archive_fix_checksums(a, len, &layout);
  int rc = fz_decompress(a, len, y, N * sizeof(float), &out, 1);
  double worst = 0;
  if (rc == 0)
    for (size_t i = 0; i < N; i++)
      worst = fmax(worst, fabs((double)x[i] - (double)y[i]));
  cr_assert_eq(rc, FZ_ECORRUPT, "decoded (%s), worst error %g against a bound of %g",
               fz_err_name(rc), worst, eb);
  free(a);
  free(x);
  free(y);
}
