/*
 * conn.c - one client connection: reading and framing untrusted bytes,
 * descriptors passed with SCM_RIGHTS, the output buffer, backpressure and the
 * connection's lifetime.
 *
 * libuv's pipe IPC mode only hands over descriptors it recognises as handles,
 * so the loop watches each accepted socket with a uv_poll_t and does
 * recvmsg()/send() itself; TCP connections take the same path.  Descriptors
 * are queued per connection in arrival order and a message takes its "nfds"
 * from the front.
 *
 * Lifetime: a connection holds one reference for the loop and one per job in
 * flight.  Closing it (peer gone, protocol error, drain) stops the poll
 * handle, cancels its queued jobs and closes the socket in the handle's close
 * callback; the memory goes when the last running job has come back, so a
 * connection is never freed inside its own callback or under a worker.
 */
#include <errno.h>
#include <poll.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "server.h"

#define READ_CHUNK (1u << 20)
#define READ_BUDGET (8u << 20) /* bytes per callback, so one client can't starve the rest */

struct fzd_conn {
  fzd_server *srv;
  fzd_conn *prev, *next;
  uv_poll_t poll;
  int fd;
  uint64_t id;
  uint64_t born_ms; /* loop time of the accept */
  bool tcp, greeted, closing, close_after_flush, eof;
  bool half_closed; /* the peer shut its sending side; it may still read */
  int events; /* what the poll handle watches now; -1 when stopped */
  unsigned refs;
  uint64_t inflight;
  char *in;
  size_t in_len, in_cap;
  uint64_t need; /* don't scan again before in_len reaches this */
  char *out;
  size_t out_off, out_len, out_cap;
  bool out_oom;
  msgpack_packer pk;
  int fdq[FZD_MAX_FDS_QUEUED];
  unsigned fdq_head, fdq_count;
  char peer[96];
  fzd_ipc_cache *ipc; /* imported CUDA IPC buffers, made on first use */
  fzd_fdmap *maps;    /* mapped sealed memfds, made on first use */
};

static void conn_close(fzd_conn *c);
static void conn_update(fzd_conn *c);
static void on_sweep(uv_timer_t *t);

/* Whether the peer is gone both ways (closed, not just shut for writing). */
static bool peer_gone(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR));
}

static void conn_unref(fzd_conn *c) {
  if (--c->refs > 0)
    return;
  /* No job of this connection is left, so no worker holds an IPC buffer. */
  fzd_ipc_cache_destroy(c->ipc);
  fzd_fdmap_free(c->maps);
  free(c->in);
  free(c->out);
  free(c);
}

bool fzd_conn_is_tcp(const fzd_conn *c) { return c->tcp; }

fzd_fdmap *fzd_conn_fdmap(fzd_conn *c) {
  if (c->maps == NULL)
    c->maps = fzd_fdmap_new(FZD_FDMAP_ENTRIES, &c->srv->cfg);
  return c->maps;
}

fzd_ipc_cache *fzd_conn_ipc(fzd_conn *c) {
  if (c->ipc == NULL && c->srv->gpu != NULL)
    c->ipc = fzd_ipc_cache_create(c->srv->gpu);
  return c->ipc;
}
bool fzd_conn_greeted(const fzd_conn *c) { return c->greeted; }
void fzd_conn_set_greeted(fzd_conn *c) { c->greeted = true; }

/* ---- output ------------------------------------------------------------- */

static int out_append(void *data, const char *buf, size_t len) {
  fzd_conn *c = data;
  if (c->out_oom)
    return -1;
  if (c->out_len + len > c->out_cap) {
    size_t cap = c->out_cap ? c->out_cap : 4096;
    while (cap < c->out_len + len)
      cap *= 2;
    char *p = realloc(c->out, cap);
    if (p == NULL) {
      c->out_oom = true;
      return -1;
    }
    c->out = p;
    c->out_cap = cap;
  }
  memcpy(c->out + c->out_len, buf, len);
  c->out_len += len;
  return 0;
}

msgpack_packer *fzd_conn_packer(fzd_conn *c) { return &c->pk; }

static size_t out_pending(const fzd_conn *c) { return c->out_len - c->out_off; }

/* Closes once every reply is out.  Jobs accepted before the end of the
 * stream (or before a protocol error) are answered first: a client that shuts
 * its sending side after its last request still reads the replies. */
static void conn_maybe_finish(fzd_conn *c) {
  if (c->closing || out_pending(c) > 0 || c->inflight > 0)
    return;
  if (c->close_after_flush || c->srv->draining)
    conn_close(c);
}

static void conn_flush(fzd_conn *c) {
  if (c->closing)
    return;
  if (c->out_oom) {
    fzd_err("connection %llu: out of memory for replies; closing",
            (unsigned long long)c->id);
    conn_close(c);
    return;
  }
  while (out_pending(c) > 0) {
    ssize_t n = send(c->fd, c->out + c->out_off, out_pending(c),
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        break;
      fzd_debug("connection %llu: send: %s", (unsigned long long)c->id,
                strerror(errno));
      conn_close(c);
      return;
    }
    c->out_off += (size_t)n;
  }
  if (out_pending(c) == 0) {
    c->out_off = c->out_len = 0;
    /* A big inline result must not pin its memory for the connection's life. */
    if (c->out_cap > (1u << 20)) {
      free(c->out);
      c->out = NULL;
      c->out_cap = 0;
    }
  }
  conn_update(c);
  conn_maybe_finish(c);
}

static void vreply_error(fzd_conn *c, uint32_t msgid, int code, const char *fmt,
                         va_list ap) {
  char text[512];
  vsnprintf(text, sizeof(text), fmt, ap);
  fzp_pack_error(&c->pk, msgid, code, text);
}

void fzd_conn_reply_error(fzd_conn *c, uint32_t msgid, int code, const char *fmt,
                          ...) {
  va_list ap;
  va_start(ap, fmt);
  vreply_error(c, msgid, code, fmt, ap);
  va_end(ap);
  fzd_debug("connection %llu: msgid %u: %s", (unsigned long long)c->id, msgid,
            fz_err_name(code));
}

void fzd_conn_close_after_flush(fzd_conn *c) {
  c->close_after_flush = true;
}

/* The stream cannot be trusted any more: answer, then hang up. */
static void protocol_error(fzd_conn *c, uint32_t msgid, int code,
                           const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void protocol_error(fzd_conn *c, uint32_t msgid, int code,
                           const char *fmt, ...) {
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  fzp_pack_error(&c->pk, msgid, code, text);
  c->srv->stats.protocol_errors++;
  fzd_info("connection %llu (%s): %s: %s; closing", (unsigned long long)c->id,
           c->peer, fz_err_name(code), text);
  fzd_conn_close_after_flush(c);
}

/* ---- descriptors ---------------------------------------------------------- */

static bool fdq_push(fzd_conn *c, int fd) {
  if (c->fdq_count == FZD_MAX_FDS_QUEUED) {
    close(fd);
    return false;
  }
  c->fdq[(c->fdq_head + c->fdq_count) % FZD_MAX_FDS_QUEUED] = fd;
  c->fdq_count++;
  return true;
}

int fzd_conn_take_fds(fzd_conn *c, unsigned n, int *fds) {
  if (n > c->fdq_count)
    return FZ_EPROTO;
  for (unsigned i = 0; i < n; i++) {
    fds[i] = c->fdq[c->fdq_head];
    c->fdq_head = (c->fdq_head + 1) % FZD_MAX_FDS_QUEUED;
    c->fdq_count--;
  }
  return 0;
}

static void fdq_close_all(fzd_conn *c) {
  int fd;
  while (c->fdq_count > 0 && fzd_conn_take_fds(c, 1, &fd) == 0)
    close(fd);
}

/* ---- input ---------------------------------------------------------------- */

static bool conn_paused(const fzd_conn *c) {
  const fzd_config *cfg = &c->srv->cfg;
  return c->closing || c->close_after_flush || c->srv->draining ||
         c->inflight >= cfg->max_inflight_per_connection ||
         out_pending(c) > cfg->max_message_bytes;
}

/* Parses and dispatches every whole message in the input buffer, as long as
 * the connection may take more work. */
static void conn_process(fzd_conn *c) {
  fzd_server *srv = c->srv;
  fzp_limits lim;
  fzp_limits_default(&lim);
  lim.max_message = srv->cfg.max_message_bytes;
  size_t off = 0;
  while (!conn_paused(c) && off < c->in_len) {
    if (c->in_len - off < c->need)
      break;
    uint64_t need = 0;
    int64_t r = fzp_scan_ex(c->in + off, c->in_len - off, &lim, &need);
    if (r < 0) {
      if (r == FZ_EMSGSIZE)
        protocol_error(c, 0, FZ_EMSGSIZE, "message larger than max_message_bytes (%llu)",
                       (unsigned long long)lim.max_message);
      else
        protocol_error(c, 0, FZ_EPROTO,
                       "malformed msgpack (reserved byte, nesting deeper than %u or "
                       "a container over %u elements)",
                       lim.max_depth, lim.max_container);
      break;
    }
    if (r == 0) {
      c->need = need;
      break;
    }
    fzp_message msg;
    char why[160];
    int err = fzp_parse(c->in + off, (size_t)r, &msg, why, sizeof(why));
    off += (size_t)r;
    c->need = 0;
    if (err < 0) {
      protocol_error(c, msg.msgid, FZ_EPROTO, "%s", why);
      break;
    }
    if (msg.type != FZP_REQUEST) {
      protocol_error(c, msg.msgid, FZ_EPROTO,
                     "clients send requests [0, msgid, method, params] only");
      fzp_message_free(&msg);
      break;
    }
    fzd_dispatch(srv, c, &msg);
    fzp_message_free(&msg);
  }
  if (off > 0) {
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
  }
  /* At end of stream whatever is left can never become a message. */
  if (c->eof && !c->closing && !c->close_after_flush && !conn_paused(c)) {
    if (c->in_len > 0)
      protocol_error(c, 0, FZ_EPROTO,
                     "truncated message: the connection ended after %zu bytes of it",
                     c->in_len);
    fzd_conn_close_after_flush(c);
  }
}

static bool ensure_in_space(fzd_conn *c) {
  size_t limit = c->srv->cfg.max_message_bytes + READ_CHUNK;
  if (c->in_cap - c->in_len >= READ_CHUNK / 4 || c->in_cap >= limit)
    return c->in_cap > c->in_len;
  size_t cap = c->in_cap ? c->in_cap * 2 : 64 * 1024;
  while (cap < c->in_len + READ_CHUNK && cap < limit)
    cap *= 2;
  if (cap > limit)
    cap = limit;
  char *p = realloc(c->in, cap);
  if (p == NULL)
    return c->in_cap > c->in_len;
  c->in = p;
  c->in_cap = cap;
  return true;
}

/* Reads what the socket has, queueing any descriptors that come with it. */
static void conn_read(fzd_conn *c) {
  size_t budget = READ_BUDGET;
  while (budget > 0 && !c->closing && !c->eof) {
    if (!ensure_in_space(c))
      break;
    size_t want = c->in_cap - c->in_len;
    if (want > READ_CHUNK)
      want = READ_CHUNK;
    union {
      struct cmsghdr h;
      char buf[CMSG_SPACE(sizeof(int) * FZD_MAX_FDS_QUEUED)];
    } ctl;
    struct iovec iov = {c->in + c->in_len, want};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (!c->tcp) {
      mh.msg_control = ctl.buf;
      mh.msg_controllen = sizeof(ctl.buf);
    }
    ssize_t n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        break;
      fzd_debug("connection %llu: recv: %s", (unsigned long long)c->id,
                strerror(errno));
      conn_close(c);
      return;
    }
    bool overflow = false;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL;
         cm = CMSG_NXTHDR(&mh, cm)) {
      if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
        continue;
      size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < nfd; i++) {
        int fd;
        memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
        if (!fdq_push(c, fd))
          overflow = true;
      }
    }
    if (overflow || (mh.msg_flags & MSG_CTRUNC)) {
      protocol_error(c, 0, FZ_EPROTO, "more than %d descriptors waiting",
                     FZD_MAX_FDS_QUEUED);
      return;
    }
    if (n == 0) {
      /* The end of the stream: a peer gone both ways reads no replies, so
       * its queued jobs are canceled now; one that only shut its sending
       * side is answered in full (conn_process, conn_maybe_finish). */
      c->eof = true;
      if (peer_gone(c->fd)) {
        fzd_debug("connection %llu: peer hung up", (unsigned long long)c->id);
        conn_close(c);
        return;
      }
      break;
    }
    c->in_len += (size_t)n;
    budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
  }
}

/* ---- poll, lifetime ------------------------------------------------------ */

static void on_poll(uv_poll_t *h, int status, int events);

static void conn_update(fzd_conn *c) {
  if (c->closing)
    return;
  /* A half-closed peer keeps signalling; from then on a vanished peer shows
   * when a reply cannot be sent. */
  int ev = c->eof || c->half_closed ? 0 : UV_DISCONNECT;
  if (!conn_paused(c) && !c->eof)
    ev |= UV_READABLE;
  if (out_pending(c) > 0)
    ev |= UV_WRITABLE;
  if (ev == c->events)
    return;
  c->events = ev;
  if (ev == 0)
    uv_poll_stop(&c->poll);
  else
    uv_poll_start(&c->poll, ev, on_poll);
}

static void on_poll(uv_poll_t *h, int status, int events) {
  fzd_conn *c = h->data;
  if (status < 0) {
    fzd_debug("connection %llu: poll: %s", (unsigned long long)c->id,
              uv_strerror(status));
    conn_close(c);
    return;
  }
  if (events & UV_WRITABLE)
    conn_flush(c);
  if ((events & UV_READABLE) && !c->closing) {
    conn_read(c);
  } else if ((events & UV_DISCONNECT) && !c->closing) {
    /* The peer hung up while we were not reading it (its in-flight cap is
     * reached, or we drain).  Gone both ways, nobody will read the replies:
     * its queued jobs are canceled.  Only shut for writing, it still reads
     * them, and the rest of its requests wait in the socket. */
    if (peer_gone(c->fd)) {
      fzd_debug("connection %llu: peer hung up", (unsigned long long)c->id);
      conn_close(c);
      return;
    }
    c->half_closed = true;
  }
  if (c->closing)
    return;
  /* Also after a flush alone: requests already buffered may have waited for
   * the replies ahead of them to drain. */
  conn_process(c);
  conn_flush(c);
  if (!c->closing) {
    conn_update(c);
    conn_maybe_finish(c);
  }
}

static void on_closed(uv_handle_t *h) {
  fzd_conn *c = h->data;
  fzd_server *srv = c->srv;
  close(c->fd);
  fdq_close_all(c);
  if (c->prev)
    c->prev->next = c->next;
  else
    srv->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  srv->nconns--;
  fzd_debug("connection %llu closed", (unsigned long long)c->id);
  conn_unref(c);
  if (srv->draining)
    fzd_server_check_drained(srv);
}

static void conn_close(fzd_conn *c) {
  if (c->closing)
    return;
  c->closing = true;
  uv_poll_stop(&c->poll);
  if (c->inflight > 0)
    fzd_pool_cancel(c->srv->pool, c);
  uv_close((uv_handle_t *)&c->poll, on_closed);
}

void fzd_conn_job_accepted(fzd_conn *c, fzd_job *job) {
  job->conn = c;
  c->refs++;
  c->inflight++;
  c->srv->inflight++;
}

void fzd_conn_job_done(fzd_job *job, void *arg) {
  fzd_server *srv = arg;
  fzd_conn *c = job->conn;
  c->inflight--;
  srv->inflight--;
  if (job->err == FZ_ECANCELED)
    srv->stats.jobs_canceled++;
  else
    fzd_stats_job(&srv->stats, job);
  if (!c->closing) {
    fzd_job_reply(c, job);
    conn_process(c);
    conn_flush(c);
  }
  fzd_job_free(job);
  conn_unref(c);
  if (srv->draining)
    fzd_server_check_drained(srv);
}

static void describe_peer(fzd_conn *c) {
  if (!c->tcp) {
    struct ucred cr;
    socklen_t len = sizeof(cr);
    if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0)
      snprintf(c->peer, sizeof(c->peer), "unix pid=%d uid=%u gid=%u", (int)cr.pid,
               (unsigned)cr.uid, (unsigned)cr.gid);
    else
      snprintf(c->peer, sizeof(c->peer), "unix (no credentials)");
    return;
  }
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  char addr[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (getpeername(c->fd, (struct sockaddr *)&ss, &len) == 0) {
    if (ss.ss_family == AF_INET) {
      struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
      inet_ntop(AF_INET, &sin->sin_addr, addr, sizeof(addr));
      port = ntohs(sin->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
      inet_ntop(AF_INET6, &sin6->sin6_addr, addr, sizeof(addr));
      port = ntohs(sin6->sin6_port);
    }
  }
  snprintf(c->peer, sizeof(c->peer), "tcp %s port %u", addr, port);
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void fzd_conn_accept(fzd_server *srv, int fd, bool tcp) {
  if (srv->nconns >= srv->cfg.max_connections) {
    /* Best effort: the refusal must not block the loop. */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    fzp_pack_error(&pk, 0, FZ_EBUSY, "too many connections (max_connections)");
    ssize_t w = send(fd, sb.data, sb.size, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
    msgpack_sbuffer_destroy(&sb);
    close(fd);
    srv->stats.busy_rejections++;
    fzd_warn("refused a connection: max_connections (%llu) reached",
             (unsigned long long)srv->cfg.max_connections);
    return;
  }
  fzd_conn *c = calloc(1, sizeof(*c));
  if (c == NULL || uv_poll_init(srv->loop, &c->poll, fd) < 0) {
    fzd_err("out of memory accepting a connection");
    free(c);
    close(fd);
    return;
  }
  c->srv = srv;
  c->fd = fd;
  c->tcp = tcp;
  c->id = ++srv->next_conn_id;
  c->born_ms = uv_now(srv->loop);
  c->refs = 1;
  c->events = -1;
  c->poll.data = c;
  msgpack_packer_init(&c->pk, c, out_append);
  describe_peer(c);
  c->next = srv->conns;
  if (srv->conns)
    srv->conns->prev = c;
  srv->conns = c;
  srv->nconns++;
  srv->stats.connections_total++;
  fzd_info("connection %llu from %s", (unsigned long long)c->id, c->peer);
  if (srv->sweep_on && !uv_is_active((uv_handle_t *)&srv->sweep))
    uv_timer_start(&srv->sweep, on_sweep, 250, 250);
  conn_update(c);
}

void fzd_conns_drain(fzd_server *srv) {
  fzd_conn *next;
  for (fzd_conn *c = srv->conns; c != NULL; c = next) {
    next = c->next;
    conn_update(c);
    conn_maybe_finish(c);
  }
}

/* Four times a second while some connection has not said hello: those past
 * handshake_timeout_ms (read each time, so a reload applies) get EHANDSHAKE
 * and are closed.  With every connection greeted the timer stops, so an idle
 * daemon does not wake up. */
static void on_sweep(uv_timer_t *t) {
  fzd_server *srv = t->data;
  uint64_t limit = srv->cfg.handshake_timeout_ms, now = uv_now(srv->loop);
  bool waiting = false;
  fzd_conn *next;
  for (fzd_conn *c = srv->conns; c != NULL; c = next) {
    next = c->next;
    if (c->greeted || c->closing || c->close_after_flush)
      continue;
    if (limit == 0 || now - c->born_ms < limit) {
      waiting = true;
      continue;
    }
    protocol_error(c, 0, FZ_EHANDSHAKE, "no hello within handshake_timeout_ms (%llu ms)",
                   (unsigned long long)limit);
    conn_flush(c);
  }
  if (!waiting)
    uv_timer_stop(t);
}

void fzd_conns_close_all(fzd_server *srv) {
  fzd_conn *next;
  for (fzd_conn *c = srv->conns; c != NULL; c = next) {
    next = c->next;
    conn_close(c);
  }
}
