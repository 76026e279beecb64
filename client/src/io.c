/*
 * io.c - moving bytes on the handle's socket.
 *
 * Sending and receiving both wait with poll() against one deadline.  While a
 * large message is being sent, whatever the server sends back is read into
 * the receive buffer: the daemon may be answering earlier jobs and may stop
 * reading until we take its answers, so a sender that only writes could wait
 * forever.  Messages are cut out of the receive buffer with fzp_scan(), which
 * bounds their size and structure before fzp_parse() allocates anything.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "internal.h"

int64_t fzc_deadline(int timeout_ms) {
  if (timeout_ms <= 0)
    return -1;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + timeout_ms;
}

/* Milliseconds left before deadline, for poll(); -1 for none. */
static int remaining_ms(int64_t deadline) {
  if (deadline < 0)
    return -1;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  return now >= deadline ? 0 : (int)(deadline - now);
}

void fzc_break(fz_client *c, int err, const char *what) {
  if (!c->broken) {
    c->broken = err;
    fzc_fail(c, err, "%s", what);
  }
  for (size_t i = 0; i < c->njobs; i++) {
    fzc_job *j = &c->jobs[i];
    if (j->done)
      continue;
    fzc_job_finish(c, j);
    j->res.status = err;
    snprintf(j->res.message, sizeof j->res.message, "%s", c->errmsg);
  }
}

/* Reads what the socket has into rx.  1 when bytes came, 0 on EAGAIN, or a
 * negative code when the connection ended. */
static int read_some(fz_client *c) {
  if (c->rx_cap - c->rx_len < 65536) {
    size_t cap = c->rx_cap ? c->rx_cap * 2 : 262144;
    unsigned char *p = realloc(c->rx, cap);
    if (!p)
      return FZ_ENOMEM;
    c->rx = p;
    c->rx_cap = cap;
  }
  for (;;) {
    ssize_t n = recv(c->fd, c->rx + c->rx_len, c->rx_cap - c->rx_len, 0);
    if (n > 0) {
      c->rx_len += (size_t)n;
      return 1;
    }
    if (n == 0) {
      fzc_break(c, FZ_ECONNRESET, "the server closed the connection");
      return FZ_ECONNRESET;
    }
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return 0;
    int err = errno == ECONNRESET ? FZ_ECONNRESET : FZ_EIO;
    char what[128];
    snprintf(what, sizeof what, "receiving from the server: %s", strerror(errno));
    fzc_break(c, err, what);
    return err;
  }
}

int fzc_send(fz_client *c, const struct iovec *iov_in, int iovcnt,
             const int *fds, int nfds, int64_t deadline) {
  if (c->broken)
    return fzc_fail(c, c->broken, "the connection is no longer usable");
  struct iovec iov[4];
  if (iovcnt > 4)
    return FZ_EINVAL;
  memcpy(iov, iov_in, sizeof iov[0] * (size_t)iovcnt);
  int first = 0;
  bool fds_sent = nfds == 0;
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * 4)];
  } ctl;
  if (nfds > 4)
    return FZ_EINVAL;

  while (first < iovcnt) {
    if (iov[first].iov_len == 0) {
      first++;
      continue;
    }
    struct pollfd p = {.fd = c->fd, .events = POLLOUT | POLLIN};
    int n = poll(&p, 1, remaining_ms(deadline));
    if (n < 0 && errno == EINTR)
      continue;
    if (n == 0)
      return fzc_fail(c, FZ_ETIMEDOUT, "timed out sending a request");
    if (n < 0)
      return fzc_fail(c, FZ_EIO, "poll: %s", strerror(errno));
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      int rc = read_some(c);
      if (rc < 0)
        return rc;
    }
    if (!(p.revents & POLLOUT))
      continue;
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = iov + first;
    mh.msg_iovlen = (size_t)(iovcnt - first);
    if (!fds_sent) {
      /* The descriptors ride with the first bytes of the message: the daemon
       * queues them in arrival order and the message takes nfds of them. */
      memset(&ctl, 0, sizeof ctl);
      mh.msg_control = ctl.buf;
      mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
      struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
      memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t sent = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
        continue;
      int err = errno == EPIPE || errno == ECONNRESET ? FZ_ECONNRESET : FZ_EIO;
      char what[128];
      snprintf(what, sizeof what, "sending to the server: %s", strerror(errno));
      fzc_break(c, err, what);
      return err;
    }
    fds_sent = true;
    size_t left = (size_t)sent;
    while (left > 0 && first < iovcnt) {
      if (left >= iov[first].iov_len) {
        left -= iov[first].iov_len;
        first++;
      } else {
        iov[first].iov_base = (char *)iov[first].iov_base + left;
        iov[first].iov_len -= left;
        left = 0;
      }
    }
  }
  return 0;
}

static int64_t mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

bool fzc_spin_readable(int fd, int spin_us, int64_t deadline) {
  if (spin_us <= 0)
    return false;
  int64_t until = mono_us() + spin_us;
  if (deadline >= 0 && until > deadline * 1000)
    until = deadline * 1000;
  struct pollfd p = {.fd = fd, .events = POLLIN};
  do {
    if (poll(&p, 1, 0) > 0)
      return true;
  } while (mono_us() < until);
  return false;
}

int fzc_recv(fz_client *c, int64_t deadline, fzp_message *msg) {
  if (c->rx_held) {
    memmove(c->rx, c->rx + c->rx_held, c->rx_len - c->rx_held);
    c->rx_len -= c->rx_held;
    c->rx_held = 0;
  }
  for (;;) {
    if (c->rx_len > 0) {
      int64_t n = fzp_scan(c->rx, c->rx_len, &c->limits);
      if (n < 0) {
        fzc_break(c, (int)n, "the server sent a malformed or oversized message");
        return (int)n;
      }
      if (n > 0) {
        char why[160];
        int rc = fzp_parse(c->rx, (size_t)n, msg, why, sizeof why);
        /* Strings and bins of the parsed message may point into rx: its bytes
         * stay until the next fzc_recv(), by which time the caller is done. */
        c->rx_held = (size_t)n;
        if (rc < 0) {
          char what[200];
          snprintf(what, sizeof what, "the server sent an invalid message: %s", why);
          fzc_break(c, rc, what);
          return rc;
        }
        return 1;
      }
    }
    if (c->broken)
      return c->broken;
    int rc = read_some(c);
    if (rc < 0)
      return rc;
    if (rc > 0)
      continue;
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    int ms = remaining_ms(deadline);
    if (ms == 0)
      return 0;
    if (fzc_spin_readable(c->fd, c->spin_us, deadline))
      continue;
    int n = poll(&p, 1, ms);
    if (n < 0 && errno != EINTR)
      return fzc_fail(c, FZ_EIO, "poll: %s", strerror(errno));
    if (n == 0 && remaining_ms(deadline) == 0)
      return 0;
  }
}
