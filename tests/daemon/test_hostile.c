/*
 * test_hostile.c - clients that break the protocol.  Each case checks the
 * exact error code, whether the daemon hung up (only when the stream is
 * unusable or the handshake failed), and that a healthy client connected
 * all along is still served.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fz.h"
#include "jobs_util.h"
#include "params_1d.h"
#include "xorshift.h"

/* Reads one reply and checks its msgid and code. */
static void expect_error(wire *w, uint32_t msgid, int code) {
  fzp_message m;
  int err = wire_recv(w, &m, 10000);
  cr_assert_eq(err, 0, "no error reply (%d)", err);
  cr_assert_eq(m.msgid, msgid);
  cr_assert_eq(wire_code(&m), code, "got %s, want %s", fz_err_name(wire_code(&m)),
               fz_err_name(code));
  const char *text;
  uint32_t len;
  cr_assert_eq(fzp_get_str(&m.error, "message", &text, &len), 1);
  cr_assert_gt(len, 0u);
  const char *name;
  cr_assert_eq(fzp_get_str(&m.error, "name", &name, &len), 1);
  cr_assert(len == strlen(fz_err_name(code)) && memcmp(name, fz_err_name(code), len) == 0);
  fzp_message_free(&m);
}

/* Sends count compress jobs of n floats with a tight bound (msgids from
 * first), enough work to keep a worker busy while the test acts. */
static void send_slow_jobs(wire *w, uint32_t first, uint32_t count, size_t n) {
  float *x = malloc(n * sizeof(float));
  cr_assert_not_null(x);
  wire_field_f32(x, n, first);
  for (uint32_t i = 0; i < count; i++)
    send_compress_inline(w, first + i, x, n, 1e-6);
  free(x);
}

static void healthy_still_served(wire *good) {
  cr_assert_eq(wire_call0(good, 900, "ping", NULL), 0);
  float x[4096];
  wire_field_f32(x, 4096, 3);
  roundtrip_inline(good, 901, x, 4096, 1e-3);
}

/* Runs one hostile exchange next to a healthy client. */
#define HOSTILE_CASE(name, settings, ...)                                     \
  Test(hostile, name) {                                                        \
    fzd_harness *h = start_daemon(settings);                                   \
    wire good, bad;                                                            \
    wire_open(&good, h, false);                                                \
    cr_assert_eq(wire_hello(&good, NULL), 0);                                  \
    __VA_ARGS__                                                                \
    healthy_still_served(&good);                                               \
    wire_close(&good);                                                         \
    stop_daemon(h);                                                            \
  }

HOSTILE_CASE(reserved_byte, NULL, {
  wire_open(&bad, h, false);
  cr_assert_eq(wire_hello(&bad, NULL), 0);
  const unsigned char junk[] = {0xc1, 0x00, 0x01};
  cr_assert_eq(wire_send_raw(&bad, junk, sizeof(junk)), 0);
  expect_error(&bad, 0, FZ_EPROTO);
  cr_assert(wire_closed_by_peer(&bad, 10000));
  wire_close(&bad);
})

HOSTILE_CASE(declared_bin_of_4_gib, NULL, {
  wire_open(&bad, h, false);
  cr_assert_eq(wire_hello(&bad, NULL), 0);
  /* [0, 2, "compress", {"data": bin32 of 0xffffffff bytes ...} */
  const unsigned char msg[] = {0x94, 0x00, 0x02, 0xa8, 'c', 'o', 'm', 'p', 'r',
                               'e',  's',  's',  0x81, 0xa4, 'd', 'a', 't', 'a',
                               0xc6, 0xff, 0xff, 0xff, 0xff, 1, 2, 3};
  cr_assert_eq(wire_send_raw(&bad, msg, sizeof(msg)), 0);
  expect_error(&bad, 0, FZ_EMSGSIZE);
  cr_assert(wire_closed_by_peer(&bad, 10000));
  wire_close(&bad);
})

HOSTILE_CASE(array_of_4_billion, NULL, {
  wire_open(&bad, h, false);
  const unsigned char msg[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0x00};
  cr_assert_eq(wire_send_raw(&bad, msg, sizeof(msg)), 0);
  expect_error(&bad, 0, FZ_EPROTO);
  cr_assert(wire_closed_by_peer(&bad, 10000));
  wire_close(&bad);
})

HOSTILE_CASE(nesting_too_deep, NULL, {
  wire_open(&bad, h, false);
  unsigned char msg[40];
  memset(msg, 0x91, sizeof(msg)); /* fixarray of 1, forty deep */
  cr_assert_eq(wire_send_raw(&bad, msg, sizeof(msg)), 0);
  expect_error(&bad, 0, FZ_EPROTO);
  cr_assert(wire_closed_by_peer(&bad, 10000));
  wire_close(&bad);
})

HOSTILE_CASE(truncated_then_closed, NULL, {
  wire_open(&bad, h, false);
  cr_assert_eq(wire_hello(&bad, NULL), 0);
  wire_begin(&bad, 3, "ping", 0);
  cr_assert_eq(wire_send_raw(&bad, bad.sb.data, bad.sb.size - 3), 0);
  msgpack_sbuffer_clear(&bad.sb);
  cr_assert_eq(shutdown(bad.fd, SHUT_WR), 0);
  expect_error(&bad, 0, FZ_EPROTO);
  cr_assert(wire_closed_by_peer(&bad, 10000));
  wire_close(&bad);
})

HOSTILE_CASE(wrong_shape, NULL, {
  wire_open(&bad, h, false);
  cr_assert_eq(wire_hello(&bad, NULL), 0);
  /* A request whose params are an array: [0, 4, "ping", []] */
  const unsigned char msg[] = {0x94, 0x00, 0x04, 0xa4, 'p', 'i', 'n', 'g', 0x90};
  cr_assert_eq(wire_send_raw(&bad, msg, sizeof(msg)), 0);
  expect_error(&bad, 4, FZ_EPROTO);
  cr_assert(wire_closed_by_peer(&bad, 10000));
  wire_close(&bad);
})

HOSTILE_CASE(wrong_version, NULL, {
  wire_open(&bad, h, false);
  msgpack_packer *pk = wire_begin(&bad, 1, "hello", 1);
  fzp_pack_key(pk, "version");
  msgpack_pack_int(pk, 2);
  cr_assert_eq(wire_send(&bad, NULL, 0), 0);
  expect_error(&bad, 1, FZ_EVERSION);
  cr_assert(wire_closed_by_peer(&bad, 10000));
  wire_close(&bad);
})

HOSTILE_CASE(no_hello, NULL, {
  wire_open(&bad, h, false);
  wire_begin(&bad, 5, "ping", 0);
  cr_assert_eq(wire_send(&bad, NULL, 0), 0);
  expect_error(&bad, 5, FZ_EHANDSHAKE);
  cr_assert(wire_closed_by_peer(&bad, 10000));
  wire_close(&bad);
})

HOSTILE_CASE(unknown_method_keeps_connection, NULL, {
  wire_open(&bad, h, false);
  cr_assert_eq(wire_hello(&bad, NULL), 0);
  cr_assert_eq(wire_call0(&bad, 6, "launch_missiles", NULL), FZ_EMETHOD);
  cr_assert_eq(wire_call0(&bad, 7, "ping", NULL), 0);
  wire_close(&bad);
})

static void compress_with(wire *w, uint32_t msgid, const char *dtype,
                          const uint64_t *shape, unsigned ndims, size_t data_len,
                          int want) {
  msgpack_packer *pk = wire_begin(w, msgid, "compress", dtype ? 4 : 3);
  if (dtype) {
    fzp_pack_key(pk, "dtype");
    fzp_pack_key(pk, dtype);
  }
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, ndims);
  for (unsigned i = 0; i < ndims; i++)
    msgpack_pack_uint64(pk, shape[i]);
  fzp_pack_key(pk, "eb");
  msgpack_pack_double(pk, 1e-3);
  fzp_pack_key(pk, "data");
  char *zeros = calloc(1, data_len + 1);
  msgpack_pack_bin(pk, data_len);
  msgpack_pack_bin_body(pk, zeros, data_len);
  free(zeros);
  cr_assert_eq(wire_send(w, NULL, 0), 0);
  expect_error(w, msgid, want);
}

HOSTILE_CASE(bad_params_keep_connection, NULL, {
  wire_open(&bad, h, false);
  cr_assert_eq(wire_hello(&bad, NULL), 0);
  uint64_t s1[] = {1000};
  compress_with(&bad, 10, NULL, s1, 1, 4000, FZ_EPARAMS);      /* no dtype */
  compress_with(&bad, 11, "f33", s1, 1, 4000, FZ_EDTYPE);      /* unknown */
  compress_with(&bad, 12, "f32", s1, 1, 3999, FZ_ESIZE);       /* 1 byte short */
  compress_with(&bad, 13, "f64", s1, 1, 4000, FZ_ESIZE);       /* dtype size */
  uint64_t big[] = {UINT64_C(1) << 32, UINT64_C(1) << 32, 2};
  compress_with(&bad, 14, "f32", big, 3, 8, FZ_ESHAPE);        /* overflow */
  uint64_t zero[] = {10, 0};
  compress_with(&bad, 15, "f32", zero, 2, 0, FZ_ESHAPE);
  uint64_t five[] = {1, 1, 1, 1, 1};
  compress_with(&bad, 16, "f32", five, 5, 4, FZ_ESHAPE);
  /* Wrong types. */
  msgpack_packer *pk = wire_begin(&bad, 17, "compress", 3);
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, "f32");
  fzp_pack_key(pk, "shape");
  fzp_pack_key(pk, "1000");
  fzp_pack_key(pk, "data");
  msgpack_pack_nil(pk);
  cr_assert_eq(wire_send(&bad, NULL, 0), 0);
  expect_error(&bad, 17, FZ_EPARAMS);
  /* A descriptor index with no descriptors. */
  pk = wire_begin(&bad, 18, "decompress", 1);
  fzp_pack_key(pk, "in_fd");
  msgpack_pack_uint64(pk, 0);
  cr_assert_eq(wire_send(&bad, NULL, 0), 0);
  expect_error(&bad, 18, FZ_EPARAMS);
  /* A corrupt archive is the engine's to judge. */
  pk = wire_begin(&bad, 19, "decompress", 1);
  fzp_pack_key(pk, "data");
  msgpack_pack_bin(pk, 64);
  msgpack_pack_bin_body(pk, "this is not an fzd archive, only sixty-four bytes of text......", 64);
  cr_assert_eq(wire_send(&bad, NULL, 0), 0);
  expect_error(&bad, 19, FZ_EFORMAT);
  cr_assert_eq(wire_call0(&bad, 20, "ping", NULL), 0);
  wire_close(&bad);
})

HOSTILE_CASE(descriptors_promised_but_missing, NULL, {
  wire_open(&bad, h, false);
  cr_assert_eq(wire_hello(&bad, NULL), 0);
  msgpack_packer *pk = wire_begin(&bad, 21, "decompress", 2);
  fzp_pack_key(pk, "nfds");
  msgpack_pack_uint64(pk, 2);
  fzp_pack_key(pk, "in_fd");
  msgpack_pack_uint64(pk, 0);
  cr_assert_eq(wire_send(&bad, NULL, 0), 0);
  expect_error(&bad, 21, FZ_EPROTO);
  cr_assert(wire_closed_by_peer(&bad, 10000));
  wire_close(&bad);
})

HOSTILE_CASE(mistyped_nfds_closes, NULL, {
  wire_open(&bad, h, false);
  cr_assert_eq(wire_hello(&bad, NULL), 0);
  msgpack_packer *pk = wire_begin(&bad, 22, "decompress", 2);
  fzp_pack_key(pk, "nfds");
  msgpack_pack_str_with_body(pk, "two", 3);
  fzp_pack_key(pk, "in_fd");
  msgpack_pack_uint64(pk, 0);
  cr_assert_eq(wire_send(&bad, NULL, 0), 0);
  expect_error(&bad, 22, FZ_EPARAMS);
  cr_assert(wire_closed_by_peer(&bad, 10000));
  wire_close(&bad);
})

/* A client that connects and never says hello is answered EHANDSHAKE and
 * dropped after handshake_timeout_ms; a greeted one may idle longer. */
HOSTILE_CASE(silent_client_timed_out, "\"handshake_timeout_ms\": 300", {
  wire_open(&bad, h, false);
  const unsigned char half[] = {0x94, 0x00}; /* the start of a request, then nothing */
  cr_assert_eq(wire_send_raw(&bad, half, sizeof half), 0);
  expect_error(&bad, 0, FZ_EHANDSHAKE);
  cr_assert(wire_closed_by_peer(&bad, 10000));
  wire_close(&bad);
  sleep_ms(400); /* the healthy client, greeted long ago, is still served below */
})

/* A client that shuts its sending side after its last request (as
 * `nc -N` or a script closing stdin does) is still answered in full. */
HOSTILE_CASE(half_close_still_answered, "\"workers\": 1", {
  wire_open(&bad, h, false);
  cr_assert_eq(wire_hello(&bad, NULL), 0);
  send_slow_jobs(&bad, 50, 4, 1 << 20);
  cr_assert_eq(shutdown(bad.fd, SHUT_WR), 0);
  bool seen[4] = {false};
  for (int i = 0; i < 4; i++) {
    fzp_message m;
    cr_assert_eq(wire_recv(&bad, &m, 60000), 0, "reply %d of 4 missing", i);
    cr_assert(m.msgid >= 50 && m.msgid < 54 && !seen[m.msgid - 50]);
    seen[m.msgid - 50] = true;
    cr_assert_eq(wire_code(&m), 0);
    fzp_message_free(&m);
  }
  cr_assert(wire_closed_by_peer(&bad, 10000), "closed once everything is answered");
  wire_close(&bad);
  cr_assert_eq(stat_u64(&good, "stats", "jobs_canceled"), 0);
})

/* ---- a storm of mutated requests ----------------------------------------
 * Valid messages (a hello, then one request) are mutated at random: bytes
 * flipped, inserted or cut.  Each goes on a fresh connection whose write side
 * is then shut, so the daemon sees the end of the stream: it must answer and
 * hang up within the time limit, never crash or stall, and keep serving the
 * healthy client.  The generator is seeded, so a failure names its round. */

typedef struct storm_msg {
  unsigned char *p;
  size_t n;
} storm_msg;

static storm_msg storm_pack(msgpack_sbuffer *sb) {
  storm_msg m = {malloc(sb->size), sb->size};
  cr_assert_not_null(m.p);
  memcpy(m.p, sb->data, sb->size);
  msgpack_sbuffer_clear(sb);
  return m;
}

/* How many descriptors process pid has open. */
static unsigned open_fds(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
  DIR *d = opendir(path);
  cr_assert_not_null(d, "%s", path);
  unsigned n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static void storm(fzd_harness *h, wire *good, bool tcp, const char *token) {
  wire bad;
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  enum { N = 256 };
  float x[N];
  wire_field_f32(x, N, 11);

  fzp_pack_request_begin(&pk, 1, "hello", token ? 3 : 2);
  fzp_pack_key(&pk, "version");
  msgpack_pack_int(&pk, 1);
  fzp_pack_key(&pk, "client");
  fzp_pack_key(&pk, "storm");
  if (token) {
    fzp_pack_key(&pk, "token");
    fzp_pack_key(&pk, token);
  }
  storm_msg hello = storm_pack(&sb);

  storm_msg req[7];
  fzp_pack_request_begin(&pk, 2, "compress", 6);
  fzp_pack_key(&pk, "dtype");
  fzp_pack_key(&pk, "f32");
  fzp_pack_key(&pk, "shape");
  msgpack_pack_array(&pk, 2);
  msgpack_pack_uint64(&pk, 16);
  msgpack_pack_uint64(&pk, 16);
  fzp_pack_key(&pk, "eb");
  msgpack_pack_double(&pk, 1e-3);
  fzp_pack_key(&pk, "pipeline");
  fzp_pack_key(&pk, "quant(mode=rel) | diff | bitshuffle | rze(levels=2)");
  fzp_pack_key(&pk, "verify");
  msgpack_pack_true(&pk);
  fzp_pack_key(&pk, "data");
  msgpack_pack_bin(&pk, sizeof x);
  msgpack_pack_bin_body(&pk, x, sizeof x);
  req[0] = storm_pack(&sb);

  /* An archive made in-process, to decompress. */
  fz_params p;
  fzt_params_1d(&p, FZ_F32, N, NULL);
  p.eb = 1e-2;
  fz_plan *pl;
  cr_assert_eq(fz_plan_create(&p, &pl, NULL, 0), 0);
  size_t cap = fz_plan_compress_bound(pl), arc_len;
  void *arc = malloc(cap);
  cr_assert_eq(fz_plan_compress(pl, x, sizeof x, arc, cap, &arc_len), 0);
  fz_plan_destroy(pl);
  fzp_pack_request_begin(&pk, 3, "decompress", 1);
  fzp_pack_key(&pk, "data");
  msgpack_pack_bin(&pk, (uint32_t)arc_len);
  msgpack_pack_bin_body(&pk, arc, arc_len);
  req[1] = storm_pack(&sb);
  free(arc);

  const char *plain[] = {"ping", "status", "stats", "presets"};
  for (int i = 0; i < 4; i++) {
    fzp_pack_request_begin(&pk, 4 + (uint32_t)i, plain[i], 0);
    req[2 + i] = storm_pack(&sb);
  }

  /* A compress whose input and output are descriptors (Unix socket only):
   * mutations make it claim too many or too few of them. */
  int fds[2] = {memfd_create("storm-out", MFD_CLOEXEC), memfd_create("storm-in", MFD_CLOEXEC)};
  cr_assert(fds[0] >= 0 && fds[1] >= 0);
  cr_assert_eq(write(fds[1], x, sizeof x), (ssize_t)sizeof x);
  fzp_pack_request_begin(&pk, 9, "compress", 7);
  fzp_pack_key(&pk, "dtype");
  fzp_pack_key(&pk, "f32");
  fzp_pack_key(&pk, "shape");
  msgpack_pack_array(&pk, 1);
  msgpack_pack_uint64(&pk, N);
  fzp_pack_key(&pk, "eb");
  msgpack_pack_double(&pk, 1e-3);
  fzp_pack_key(&pk, "verify");
  msgpack_pack_true(&pk);
  fzp_pack_key(&pk, "nfds");
  msgpack_pack_uint64(&pk, 2);
  fzp_pack_key(&pk, "out_fd");
  msgpack_pack_uint64(&pk, 0);
  fzp_pack_key(&pk, "in_fd");
  msgpack_pack_uint64(&pk, 1);
  req[6] = storm_pack(&sb);
  unsigned fds_before = open_fds(fzd_harness_pid(h));

  uint64_t seed = 0x9e3779b97f4a7c15ull;
  unsigned served = 0, refused = 0;
  unsigned char buf[8192];
  for (int round = 0; round < 1000; round++) {
    /* Mostly the two jobs (their data survives most mutations), now and
     * then one of the small calls. */
    unsigned pick = (unsigned)(xorshift64(&seed) % 8);
    bool with_fds = pick == 3 && !tcp;
    const storm_msg *r = with_fds ? &req[6]
                         : &req[pick < 4 ? 0 : pick < 6 ? 1 : 2 + xorshift64(&seed) % 4];
    size_t n = 0;
    memcpy(buf, hello.p, hello.n);
    memcpy(buf + hello.n, r->p, r->n);
    n = hello.n + r->n;
    /* 1 or 2 mutations (bit flips and new bytes most often, an inserted
     * byte or a cut now and then); the hello is hit too, one time in eight. */
    size_t from = xorshift64(&seed) % 8 == 0 ? 0 : hello.n;
    int muts = 1 + (int)(xorshift64(&seed) % 2);
    for (int k = 0; k < muts && n > from; k++) {
      size_t at = from + xorshift64(&seed) % (n - from);
      switch (xorshift64(&seed) % 8) {
      case 0: case 1: case 2:
        buf[at] ^= (unsigned char)(1u << (xorshift64(&seed) % 8));
        break;
      case 3: case 4: case 5:
        buf[at] = (unsigned char)xorshift64(&seed);
        break;
      case 6: /* insert a byte */
        if (n < sizeof buf) {
          memmove(buf + at + 1, buf + at, n - at);
          buf[at] = (unsigned char)xorshift64(&seed);
          n++;
        }
        break;
      default: /* cut */
        n = at;
        break;
      }
    }
    wire_open(&bad, h, tcp);
    if (with_fds) {
      msgpack_sbuffer_write(&bad.sb, (const char *)buf, n);
      cr_assert_eq(wire_send(&bad, fds, 2), 0, "round %d", round);
    } else {
      cr_assert_eq(wire_send_raw(&bad, buf, n), 0, "round %d", round);
    }
    shutdown(bad.fd, SHUT_WR);
    for (;;) {
      fzp_message m;
      int rc = wire_recv(&bad, &m, 10000);
      if (rc == -ECONNRESET)
        break;
      cr_assert_eq(rc, 0, "round %d: the daemon neither answered nor hung up (%d)",
                   round, rc);
      if (m.msgid >= 2)
        served += wire_code(&m) == 0;
      refused += wire_code(&m) < 0;
      fzp_message_free(&m);
    }
    wire_close(&bad);
    if (round % 200 == 199)
      healthy_still_served(good);
  }
  /* Both outcomes must be common, or the mutations test nothing. */
  cr_assert_gt(served, 100, "only %u mutated requests were served", served);
  cr_assert_gt(refused, 200, "only %u mutated requests were refused", refused);
  cr_assert_eq(stat_u64(good, "status", "connections"), 1);
  free(hello.p);
  /* Every descriptor that came with a request, taken or left over, was
   * closed with its job or its connection. */
  unsigned fds_after = open_fds(fzd_harness_pid(h));
  for (int i = 0; i < 500 && fds_after != fds_before; i++) {
    sleep_ms(10);
    fds_after = open_fds(fzd_harness_pid(h));
  }
  cr_assert_eq(fds_after, fds_before, "fzd holds %u descriptors, %u before the storm",
               fds_after, fds_before);
  close(fds[0]);
  close(fds[1]);
  for (int i = 0; i < 7; i++)
    free(req[i].p);
  msgpack_sbuffer_destroy(&sb);
}

HOSTILE_CASE(mutated_request_storm, NULL, { storm(h, &good, false, NULL); })

#define TCP_SETTINGS                                                           \
  "\"tcp_enabled\": true, \"tcp_port\": 0, \"tcp_token\": \"s3cret\""

HOSTILE_CASE(mutated_request_storm_tcp, TCP_SETTINGS, { storm(h, &good, true, "s3cret"); })


static void tcp_hello_fails(fzd_harness *h, const char *token) {
  wire bad;
  wire_open(&bad, h, true);
  cr_assert_eq(wire_hello(&bad, token), FZ_EAUTH);
  cr_assert(wire_closed_by_peer(&bad, 10000));
  wire_close(&bad);
}

HOSTILE_CASE(tcp_token, TCP_SETTINGS, {
  cr_assert_gt(fzd_harness_tcp_port(h), 0);
  tcp_hello_fails(h, "wrong");
  tcp_hello_fails(h, NULL);
  tcp_hello_fails(h, "s3cre");
  wire_open(&bad, h, true);
  cr_assert_eq(wire_hello(&bad, "s3cret"), 0);
  /* Descriptors are refused over TCP, and the connection stays. */
  msgpack_packer *pk = wire_begin(&bad, 30, "decompress", 2);
  fzp_pack_key(pk, "nfds");
  msgpack_pack_uint64(pk, 1);
  fzp_pack_key(pk, "in_fd");
  msgpack_pack_uint64(pk, 0);
  cr_assert_eq(wire_send(&bad, NULL, 0), 0);
  expect_error(&bad, 30, FZ_ETRANSPORT);
  float x[2048];
  wire_field_f32(x, 2048, 5);
  roundtrip_inline(&bad, 31, x, 2048, 1e-2);
  wire_close(&bad);
  /* The Unix socket needs no token. */
})

HOSTILE_CASE(client_dies_mid_job, "\"workers\": 1", {
  wire_open(&bad, h, false);
  cr_assert_eq(wire_hello(&bad, NULL), 0);
  send_slow_jobs(&bad, 40, 6, 1 << 22);
  /* Wait until the daemon holds them (one running, some queued), then die. */
  for (int i = 0; i < 2000 && stat_u64(&good, "status", "queue_depth") == 0; i++)
    sleep_ms(2);
  cr_assert_gt(stat_u64(&good, "status", "inflight"), 1);
  wire_close(&bad);
  /* The running job still finishes: allow it a minute (a sanitized fzd on
   * a loaded machine is slow), so the test checks the outcome, not a speed. */
  for (int i = 0; i < 30000 && stat_u64(&good, "status", "inflight") > 0; i++)
    sleep_ms(2);
  cr_assert_eq(stat_u64(&good, "status", "inflight"), 0);
  cr_assert_eq(stat_u64(&good, "status", "connections"), 1);
  cr_assert_geq(stat_u64(&good, "stats", "jobs_canceled"), 1);
  /* The next client is served. */
  wire_open(&bad, h, false);
  cr_assert_eq(wire_hello(&bad, NULL), 0);
  cr_assert_eq(wire_call0(&bad, 50, "ping", NULL), 0);
  wire_close(&bad);
})

/* A compress of 1024 f32 whose input is a CUDA IPC handle (of hlen bytes). */
static void compress_ipc(wire *w, uint32_t msgid, size_t hlen) {
  msgpack_packer *pk = wire_begin(w, msgid, "compress", 5);
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, "f32");
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint64(pk, 1024);
  fzp_pack_key(pk, "eb");
  msgpack_pack_double(pk, 1e-3);
  fzp_pack_key(pk, "device");
  fzp_pack_key(pk, "GPU-00000000-0000-0000-0000-000000000000");
  fzp_pack_key(pk, "in_ipc");
  unsigned char handle[80] = {0};
  msgpack_pack_bin_with_body(pk, handle, hlen);
  cr_assert_eq(wire_send(w, NULL, 0), 0);
}

/* Device buffers are refused over TCP, and on the Unix socket of a daemon
 * on the CPU backend; either way the connection stays usable. */
HOSTILE_CASE(ipc_refused_on_tcp_and_cpu,
             "\"tcp_enabled\": true, \"tcp_port\": 0, \"tcp_token\": \"s3cret\"", {
  wire_open(&bad, h, true);
  cr_assert_eq(wire_hello(&bad, "s3cret"), 0);
  compress_ipc(&bad, 60, 64);
  expect_error(&bad, 60, FZ_ETRANSPORT);
  cr_assert_eq(wire_call0(&bad, 61, "ping", NULL), 0);
  wire_close(&bad);

  wire_open(&bad, h, false);
  cr_assert_eq(wire_hello(&bad, NULL), 0);
  compress_ipc(&bad, 62, 64);
  expect_error(&bad, 62, FZ_ENOGPU);
  compress_ipc(&bad, 63, 80);
  expect_error(&bad, 63, FZ_ENOGPU);
  cr_assert_eq(wire_call0(&bad, 64, "ping", NULL), 0);
  wire_close(&bad);
})
