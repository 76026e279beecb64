/*
 * wire.c - see wire.h.
 */
#include "wire.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void wire_open(wire *w, const fzd_harness *h, bool tcp) {
  memset(w, 0, sizeof(*w));
  w->fd = tcp ? fzd_harness_connect_tcp(h) : fzd_harness_connect_unix(h);
  cr_assert(w->fd >= 0, "connect: %s", strerror(-w->fd));
  msgpack_sbuffer_init(&w->sb);
  msgpack_packer_init(&w->pk, &w->sb, msgpack_sbuffer_write);
}

void wire_close(wire *w) {
  if (w->fd >= 0)
    close(w->fd);
  w->fd = -1;
  free(w->buf);
  w->buf = NULL;
  msgpack_sbuffer_destroy(&w->sb);
}

msgpack_packer *wire_begin(wire *w, uint32_t msgid, const char *method,
                           uint32_t nfields) {
  fzp_pack_request_begin(&w->pk, msgid, method, nfields);
  return &w->pk;
}

/* Waits until the socket takes more bytes: 0, or -ETIMEDOUT when the daemon
 * has read nothing for WIRE_SEND_WAIT_MS.  The sends below wait here and
 * then do not block, so that a test writing while fzd applies backpressure
 * fails with its assertion's line rather than hanging until ctest kills
 * it. */
#define WIRE_SEND_WAIT_MS 60000
static int wait_writable(int fd) {
  struct pollfd pfd = {.fd = fd, .events = POLLOUT};
  for (;;) {
    int r = poll(&pfd, 1, WIRE_SEND_WAIT_MS);
    if (r > 0)
      return 0;
    if (r == 0)
      return -ETIMEDOUT;
    if (errno != EINTR)
      return -errno;
  }
}

int wire_send(wire *w, const int *fds, unsigned nfds) {
  size_t off = 0;
  while (off < w->sb.size) {
    int err = wait_writable(w->fd);
    if (err < 0) {
      msgpack_sbuffer_clear(&w->sb);
      return err;
    }
    struct iovec iov = {w->sb.data + off, w->sb.size - off};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    union {
      struct cmsghdr h;
      char buf[CMSG_SPACE(sizeof(int) * 16)];
    } ctl;
    if (off == 0 && nfds > 0) {
      memset(&ctl, 0, sizeof(ctl));
      mh.msg_control = ctl.buf;
      mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
      struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
      memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
    }
    ssize_t n = sendmsg(w->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
        continue;
      msgpack_sbuffer_clear(&w->sb);
      return -errno;
    }
    off += (size_t)n;
  }
  msgpack_sbuffer_clear(&w->sb);
  return 0;
}

int wire_send_raw(wire *w, const void *bytes, size_t len) {
  size_t off = 0;
  while (off < len) {
    int err = wait_writable(w->fd);
    if (err < 0)
      return err;
    ssize_t n = send(w->fd, (const char *)bytes + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
        continue;
      return -errno;
    }
    off += (size_t)n;
  }
  return 0;
}

static int fill(wire *w, int timeout_ms) {
  struct pollfd pfd = {.fd = w->fd, .events = POLLIN};
  int r = poll(&pfd, 1, timeout_ms);
  if (r == 0)
    return -ETIMEDOUT;
  if (r < 0)
    return -errno;
  if (w->cap - w->len < 65536) {
    size_t cap = w->cap ? w->cap * 2 : 1 << 20;
    w->buf = realloc(w->buf, cap);
    cr_assert_not_null(w->buf);
    w->cap = cap;
  }
  ssize_t n = recv(w->fd, w->buf + w->len, w->cap - w->len, 0);
  if (n < 0)
    return errno == ECONNRESET ? -ECONNRESET : -errno;
  if (n == 0)
    return -ECONNRESET;
  w->len += (size_t)n;
  return 0;
}

int wire_recv(wire *w, fzp_message *msg, int timeout_ms) {
  if (w->consumed > 0) {
    memmove(w->buf, w->buf + w->consumed, w->len - w->consumed);
    w->len -= w->consumed;
    w->consumed = 0;
  }
  fzp_limits lim;
  fzp_limits_default(&lim);
  lim.max_message = UINT64_C(1) << 32;
  for (;;) {
    if (w->len > 0) {
      int64_t r = fzp_scan(w->buf, w->len, &lim);
      if (r < 0)
        return (int)r;
      if (r > 0) {
        char why[128];
        int err = fzp_parse(w->buf, (size_t)r, msg, why, sizeof(why));
        cr_assert_eq(err, 0, "bad response from fzd: %s", why);
        w->consumed = (size_t)r;
        return 0;
      }
    }
    int err = fill(w, timeout_ms);
    if (err < 0)
      return err;
  }
}

int wire_code(const fzp_message *msg) {
  int code = 0;
  cr_assert_eq(msg->type, FZP_RESPONSE);
  int r = fzp_error_decode(&msg->error, &code, NULL, NULL);
  cr_assert_geq(r, 0, "malformed error map");
  return r == 0 ? 0 : code;
}

int wire_hello(wire *w, const char *token) {
  msgpack_packer *pk = wire_begin(w, 1, "hello", token ? 3 : 2);
  fzp_pack_key(pk, "version");
  msgpack_pack_int(pk, 1);
  fzp_pack_key(pk, "client");
  fzp_pack_key(pk, "fzd-tests");
  if (token) {
    fzp_pack_key(pk, "token");
    fzp_pack_key(pk, token);
  }
  cr_assert_eq(wire_send(w, NULL, 0), 0);
  fzp_message m;
  int err = wire_recv(w, &m, 10000);
  cr_assert_eq(err, 0, "no hello reply: %d", err);
  cr_assert_eq(m.msgid, 1u);
  int code = wire_code(&m);
  fzp_message_free(&m);
  return code;
}

int wire_call0(wire *w, uint32_t msgid, const char *method, fzp_message *msg) {
  wire_begin(w, msgid, method, 0);
  cr_assert_eq(wire_send(w, NULL, 0), 0);
  fzp_message m;
  int err = wire_recv(w, &m, 10000);
  cr_assert_eq(err, 0, "no reply to %s: %d", method, err);
  cr_assert_eq(m.msgid, msgid);
  int code = wire_code(&m);
  if (msg != NULL)
    *msg = m;
  else
    fzp_message_free(&m);
  return code;
}

bool wire_closed_by_peer(wire *w, int timeout_ms) {
  char tmp[4096];
  for (;;) {
    struct pollfd pfd = {.fd = w->fd, .events = POLLIN};
    int r = poll(&pfd, 1, timeout_ms);
    if (r <= 0)
      return false;
    ssize_t n = recv(w->fd, tmp, sizeof(tmp), 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET))
      return true;
    if (n < 0)
      return false;
  }
}

void wire_field_f32(float *x, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    double t = (double)i / 64.0 + seed;
    x[i] = (float)(100.0 * sin(t) + 10.0 * cos(3.1 * t) + 0.01 * (double)(i % 7));
  }
}
