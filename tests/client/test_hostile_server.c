/*
 * test_hostile_server.c - libfzclient against a server that lies.  The
 * library reads the daemon's answers as untrusted bytes too: a fake server
 * on a Unix socket answers the handshake, and then a compress job, with
 * valid messages mutated at random (bytes flipped, inserted, cut) or with
 * values that are well-formed but absurd.  Every call must return 0 or a
 * negative error code with a message; nothing may crash, hang, read out of
 * bounds or leak (this suite runs under ASan in CI).
 */
#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fzclient.h"
#include "fzp.h"
#include "xorshift.h"

enum { ROUNDS = 600 };

typedef struct fake {
  char dir[64], path[96];
  int lfd;
  pthread_t th;
  uint64_t seed;
  unsigned answered_jobs; /* rounds that got as far as the job */
} fake;

/* Reads one whole request (or gives up when the client goes quiet or away). */
static bool read_request(int fd) {
  char buf[1 << 16];
  size_t len = 0;
  for (;;) {
    if (len > 0 && fzp_scan(buf, len, NULL) > 0)
      return true;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 2000) != 1 || len == sizeof buf)
      return false;
    ssize_t n = recv(fd, buf + len, sizeof buf - len, 0);
    if (n <= 0)
      return false;
    len += (size_t)n;
  }
}

static void send_all(int fd, const void *p, size_t n) {
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0)
      return;
    p = (const char *)p + k;
    n -= (size_t)k;
  }
}

/* Flips, replaces, inserts or cuts 1 to 3 bytes of msg (in place). */
static size_t mutate(unsigned char *msg, size_t n, size_t cap, uint64_t *s) {
  int muts = 1 + (int)(xorshift64(s) % 3);
  for (int k = 0; k < muts && n > 0; k++) {
    size_t at = xorshift64(s) % n;
    switch (xorshift64(s) % 6) {
    case 0: case 1: msg[at] ^= (unsigned char)(1u << (xorshift64(s) % 8)); break;
    case 2: case 3: msg[at] = (unsigned char)xorshift64(s); break;
    case 4:
      if (n < cap) {
        memmove(msg + at + 1, msg + at, n - at);
        msg[at] = (unsigned char)xorshift64(s);
        n++;
      }
      break;
    default: n = at; break;
    }
  }
  return n;
}

static size_t pack_hello_reply(msgpack_sbuffer *sb, uint64_t max_message) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
  fzp_pack_result_begin(&pk, 1, 6);
  fzp_pack_key(&pk, "version");
  msgpack_pack_uint64(&pk, FZP_PROTOCOL_VERSION);
  fzp_pack_key(&pk, "server");
  fzp_pack_key(&pk, "fake 0");
  fzp_pack_key(&pk, "backend");
  fzp_pack_key(&pk, "cpu");
  fzp_pack_key(&pk, "max_message");
  msgpack_pack_uint64(&pk, max_message);
  fzp_pack_key(&pk, "max_inline");
  msgpack_pack_uint64(&pk, 1 << 20);
  fzp_pack_key(&pk, "pid");
  msgpack_pack_int64(&pk, 1);
  return sb->size;
}

/* The answer to the client's compress (msgid 2): sizes that need not agree
 * with the archive that comes with it. */
static void pack_job_reply(msgpack_sbuffer *sb, uint64_t *s) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
  static const unsigned char arc[48] = "FZD archive that is really not one at all....";
  fzp_pack_result_begin(&pk, 2, 7);
  fzp_pack_key(&pk, "bytes_in");
  msgpack_pack_uint64(&pk, 4096);
  fzp_pack_key(&pk, "bytes_out");
  msgpack_pack_uint64(&pk, xorshift64(s) % 2 ? sizeof arc : UINT64_MAX);
  fzp_pack_key(&pk, "ratio");
  msgpack_pack_double(&pk, 85.3);
  fzp_pack_key(&pk, "eb_abs");
  msgpack_pack_double(&pk, 1e-3);
  fzp_pack_key(&pk, "chain");
  fzp_pack_key(&pk, "quant(eb=0.001,mode=rel) | bitpack");
  fzp_pack_key(&pk, "shape");
  msgpack_pack_array(&pk, 9); /* more dimensions than any array has */
  for (int i = 0; i < 9; i++)
    msgpack_pack_uint64(&pk, 7);
  fzp_pack_key(&pk, "archive");
  msgpack_pack_bin(&pk, sizeof arc);
  msgpack_pack_bin_body(&pk, arc, sizeof arc);
}

static void *serve(void *arg) {
  fake *f = arg;
  unsigned char msg[1 << 12];
  for (int round = 0; round < ROUNDS; round++) {
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0)
      break;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    /* A third of the rounds lie in the handshake, the rest in the job. */
    bool in_hello = xorshift64(&f->seed) % 3 == 0;
    uint64_t max_message = xorshift64(&f->seed) % 4 == 0 ? UINT64_MAX - xorshift64(&f->seed) % 70000
                                                    : 1 << 20;
    if (read_request(fd)) {
      size_t n = pack_hello_reply(&sb, max_message);
      memcpy(msg, sb.data, n);
      if (in_hello)
        n = mutate(msg, n, sizeof msg, &f->seed);
      send_all(fd, msg, n);
      if (!in_hello && read_request(fd)) {
        msgpack_sbuffer_clear(&sb);
        pack_job_reply(&sb, &f->seed);
        n = sb.size < sizeof msg ? sb.size : sizeof msg;
        memcpy(msg, sb.data, n);
        n = mutate(msg, n, sizeof msg, &f->seed);
        send_all(fd, msg, n);
        f->answered_jobs++;
      }
    }
    msgpack_sbuffer_destroy(&sb);
    close(fd);
  }
  return NULL;
}

static void fake_start(fake *f) {
  memset(f, 0, sizeof *f);
  const char *tmp = getenv("TMPDIR");
  snprintf(f->dir, sizeof f->dir, "%s/fzfake-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  cr_assert_not_null(mkdtemp(f->dir));
  snprintf(f->path, sizeof f->path, "%s/fake.sock", f->dir);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", f->path);
  f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert_geq(f->lfd, 0);
  cr_assert_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
  cr_assert_eq(listen(f->lfd, 4), 0);
  f->seed = 0x2545f4914f6cdd1dull;
  cr_assert_eq(pthread_create(&f->th, NULL, serve, f), 0);
}

static void fake_stop(fake *f) {
  pthread_join(f->th, NULL);
  close(f->lfd);
  unlink(f->path);
  rmdir(f->dir);
}

Test(hostile_server, lies_are_errors_not_crashes, .timeout = 300) {
  fake f;
  fake_start(&f);
  char addr[160];
  snprintf(addr, sizeof addr, "unix:%s", f.path);
  fz_client_opts o;
  fz_client_opts_init(&o);
  o.timeout_ms = 5000;
  float x[1024];
  for (int i = 0; i < 1024; i++)
    x[i] = (float)i * 0.5f;
  unsigned connected = 0, refused = 0, jobs_failed = 0;
  for (int round = 0; round < ROUNDS; round++) {
    fz_client *c = NULL;
    char why[256] = "";
    int rc = fz_client_connect(&c, addr, &o, why, sizeof why);
    if (rc < 0) {
      cr_assert_null(c);
      cr_assert_neq(why[0], '\0', "round %d: refused (%d) without a reason", round, rc);
      cr_assert_not_null(fz_err_name(rc), "round %d: unknown code %d", round, rc);
      refused++;
      continue;
    }
    connected++;
    fz_job j;
    fz_job_init(&j);
    j.dtype = "f32";
    j.ndims = 1;
    j.shape[0] = 1024;
    j.eb = 1e-3;
    j.in = x;
    j.in_len = sizeof x;
    unsigned char out[64];
    if (round % 2) { /* half the jobs into a small buffer of the caller's */
      j.out = out;
      j.out_cap = sizeof out;
    }
    fz_result r;
    rc = fz_client_compress(c, &j, &r);
    if (rc < 0) {
      cr_assert_eq(r.status, rc);
      cr_assert_neq(r.message[0], '\0', "round %d: failed (%d) without a reason", round, rc);
      cr_assert_not_null(fz_err_name(rc), "round %d: unknown code %d", round, rc);
      jobs_failed++;
    } else {
      cr_assert_leq(r.data_len, 64, "round %d: %zu bytes of data from 48", round, r.data_len);
      cr_assert(r.ndims <= FZ_CLIENT_MAX_DIMS);
    }
    if (!j.out)
      fz_client_free(r.data);
    fz_client_close(c);
  }
  fake_stop(&f);
  /* The mix must be real: lies caught in the handshake and in jobs. */
  cr_assert_gt(refused, 50, "only %u handshakes refused", refused);
  cr_assert_gt(connected, 200, "only %u handshakes accepted", connected);
  cr_assert_gt(jobs_failed, 50, "only %u jobs failed", jobs_failed);
  cr_assert_gt(f.answered_jobs, 200);
}
