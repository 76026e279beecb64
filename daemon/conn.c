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
 *
 * Budgets, so that one client cannot hurt the others: the bytes of replies
 * a connection owes (unsent, plus reserved for the inline results of its
 * jobs in flight) stop its reading at max_reply_bytes_per_connection, and
 * new jobs get EBUSY once all connections owe max_reply_bytes_total; the
 * descriptors it has passed stop its reading at max_fds_per_connection, and
 * descriptors beyond max_fds_total get EBUSY; TCP connections have their own
 * caps, apart from the Unix socket's, and a short hello deadline.  Nothing
 * accepted is dropped: a job already in flight always gets its reply.
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

#include "frames.h"
#include "log.h"
#include "server.h"

#define READ_CHUNK (1u << 20)
/* Every connection may hold this much input without asking memory_limit:
 * enough for a hello and for many small requests, and with max_connections
 * and max_tcp_connections at their defaults about 80 MiB in all.  What an
 * input buffer holds beyond it is reserved from memory_limit (at most half
 * of it for all connections together), and a buffer larger than it is
 * given back when it empties, so that idle connections do not keep the
 * memory of their largest message. */
#define IN_BASE (64u << 10)
/* The largest message a connection may send before its hello is done: a
 * hello with the longest token and a client name of a few KiB.  Without it
 * a client with no token could make fzd hold max_message_bytes for it. */
#define HELLO_MAX 4096u
#define READ_BUDGET (8u << 20) /* bytes per callback, so one client can't starve the rest */

struct fzd_conn {
  fzd_server *srv;
  fzd_conn *prev, *next;
  uv_poll_t poll;
  int fd;
  uint64_t id;
  uint64_t born_ms; /* loop time of the accept */
  /* Loop time of the last byte received, or of the moment reading resumed
   * after fzd itself had paused it: message_timeout_ms counts from here
   * while part of a message waits for the rest. */
  uint64_t last_byte_ms;
  uint64_t read_ns; /* uv_hrtime() as the last readable event began */
  bool tcp, greeted, closing, close_after_flush, eof;
  bool half_closed; /* the peer shut its sending side; it may still read */
  int events; /* what the poll handle watches now; -1 when stopped */
  unsigned refs;
  uint64_t inflight;
  char *in;
  size_t in_len, in_cap;
  uint64_t need; /* don't scan again before in_len reaches this */
  uint64_t in_reserved; /* what in_cap holds of memory_limit (in_charge) */
  fzp_scan_state scan; /* the scan of the message at the front of in */
  uint64_t reply_reserved; /* sum of reply_reserve of the jobs in flight */
  unsigned job_fds; /* descriptors owned by this connection's jobs in flight */
  char *out;
  size_t out_off, out_len, out_cap;
  bool out_oom;
  msgpack_packer pk;
  int fdq[FZD_MAX_FDS_QUEUED];
  unsigned fdq_head, fdq_count;
  char peer[96];
  bool has_uid; /* Unix, with credentials: counted in srv->uids */
  uint32_t uid;
  fzd_ipc_cache *ipc; /* imported CUDA IPC buffers, made on first use */
  fzd_fdmap *maps;    /* mapped sealed memfds, made on first use */
  struct fzd_frames_setups *frames; /* "frames_setup" masks and matrices */
  /* A job waiting for the client to read its replies (fzd_conn_park). */
  fzd_job *parked;
};

static void conn_close(fzd_conn *c);
static void uid_release(fzd_server *srv, uint32_t uid);
static void conn_update(fzd_conn *c);
static void on_sweep(uv_timer_t *t);

/* Starts the sweep (four times a second) if it is not running. */
static void sweep_arm(fzd_server *srv) {
  if (srv->sweep_on && !uv_is_active((uv_handle_t *)&srv->sweep))
    uv_timer_start(&srv->sweep, on_sweep, 250, 250);
}

/* Whether the peer is gone both ways (closed, not just shut for writing). */
static bool peer_gone(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR));
}

static size_t out_pending(const fzd_conn *c) { return c->out_len - c->out_off; }

/* Replies owed: unsent bytes plus reservations of jobs in flight. */
static uint64_t owed(const fzd_conn *c) { return out_pending(c) + c->reply_reserved; }

/* What an input buffer of cap bytes holds of memory_limit. */
static uint64_t in_charge(size_t cap) { return cap > IN_BASE ? cap - IN_BASE : 0; }

/* Makes the input buffer cap bytes (0 frees it), reserving what it grows
 * by from memory_limit first and giving back what it shrinks by.  FZ_EBUSY
 * when the room is not there: all connections' input buffers may take at
 * most half of the limit, so messages still arriving never leave the jobs
 * without memory.  FZ_ENOMEM when the allocation fails. */
static int in_resize(fzd_conn *c, size_t cap) {
  fzd_server *srv = c->srv;
  uint64_t want = in_charge(cap);
  if (want > c->in_reserved) {
    uint64_t more = want - c->in_reserved;
    if (srv->in_reserved + more > srv->mem.limit / 2 ||
        fzd_budget_take(&srv->mem, more, NULL) < 0)
      return FZ_EBUSY;
    srv->in_reserved += more;
    c->in_reserved += more;
  }
  int err = 0;
  if (cap == 0) {
    free(c->in);
    c->in = NULL;
    c->in_cap = 0;
  } else {
    char *p = realloc(c->in, cap);
    if (p != NULL) {
      c->in = p;
      c->in_cap = cap;
    } else {
      err = FZ_ENOMEM; /* the old buffer stays */
    }
  }
  /* Whatever the buffer is now, it holds exactly its charge. */
  uint64_t held = in_charge(c->in_cap);
  if (c->in_reserved > held) {
    uint64_t less = c->in_reserved - held;
    fzd_budget_give(&srv->mem, less);
    srv->in_reserved -= less;
    c->in_reserved = held;
  }
  return err;
}

static void conn_unref(fzd_conn *c) {
  if (--c->refs > 0)
    return;
  /* No job of this connection is left, so no worker holds an IPC buffer. */
  fzd_ipc_cache_destroy(c->ipc);
  fzd_fdmap_free(c->maps);
  fzd_frames_setups_free(c->frames);
  in_resize(c, 0);
  free(c->out);
  free(c);
}

bool fzd_conn_is_tcp(const fzd_conn *c) { return c->tcp; }

fzd_fdmap *fzd_conn_fdmap(fzd_conn *c) {
  if (c->maps == NULL)
    c->maps = fzd_fdmap_new(FZD_FDMAP_ENTRIES, &c->srv->cfg);
  return c->maps;
}

struct fzd_frames_setups **fzd_conn_frames(fzd_conn *c) { return &c->frames; }

fzd_ipc_cache *fzd_conn_ipc(fzd_conn *c) {
  if (c->ipc == NULL && c->srv->gpu != NULL)
    c->ipc = fzd_ipc_cache_create(c->srv->gpu);
  return c->ipc;
}
bool fzd_conn_greeted(const fzd_conn *c) { return c->greeted; }
void fzd_conn_set_greeted(fzd_conn *c) {
  if (!c->greeted && c->tcp)
    c->srv->nconns_unauth--;
  c->greeted = true;
}

/* ---- output ------------------------------------------------------------- */

static int out_append(void *data, const char *buf, size_t len) {
  fzd_conn *c = data;
  if (c->closing)
    return 0; /* nobody will read it */
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
  c->srv->reply_bytes += len;
  return 0;
}

msgpack_packer *fzd_conn_packer(fzd_conn *c) { return &c->pk; }

int fzd_conn_reply_room(fzd_conn *c, uint64_t bytes) {
  const fzd_server *srv = c->srv;
  if (srv->reply_bytes > 0 && srv->reply_bytes + bytes > srv->cfg.max_reply_bytes_total)
    return FZ_EBUSY;
  return 0;
}

/* Replies that will never be sent leave the budget. */
static void out_discard(fzd_conn *c) {
  c->srv->reply_bytes -= out_pending(c);
  c->out_off = c->out_len = 0;
}

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
    c->srv->reply_bytes -= (size_t)n;
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
  fzd_log_limited(FZD_LOG_INFO, "connection %llu (%s): %s: %s; closing",
                  (unsigned long long)c->id, c->peer, fz_err_name(code), text);
  fzd_conn_close_after_flush(c);
}

/* ---- descriptors ---------------------------------------------------------- */

/* Queues a descriptor, or -1 standing for one that was refused (closed on
 * arrival, past max_fds_total): the message that names it is then answered
 * EBUSY and the stream stays in step. */
static bool fdq_push(fzd_conn *c, int fd) {
  if (c->fdq_count == FZD_MAX_FDS_QUEUED) {
    if (fd >= 0)
      close(fd);
    return false;
  }
  c->fdq[(c->fdq_head + c->fdq_count) % FZD_MAX_FDS_QUEUED] = fd;
  c->fdq_count++;
  c->srv->fds_passed += fd >= 0;
  return true;
}

int fzd_conn_take_fds(fzd_conn *c, unsigned n, int *fds) {
  if (n > c->fdq_count)
    return FZ_EPROTO;
  for (unsigned i = 0; i < n; i++) {
    fds[i] = c->fdq[c->fdq_head];
    c->fdq_head = (c->fdq_head + 1) % FZD_MAX_FDS_QUEUED;
    c->fdq_count--;
    c->srv->fds_passed -= fds[i] >= 0;
  }
  return 0;
}

static void fdq_close_all(fzd_conn *c) {
  int fd;
  while (c->fdq_count > 0 && fzd_conn_take_fds(c, 1, &fd) == 0)
    if (fd >= 0)
      close(fd);
}

/* ---- input ---------------------------------------------------------------- */

/* Whether the connection may not take more work now.  Over its reply
 * budget it waits until the client reads. */
static bool conn_paused(const fzd_conn *c) {
  const fzd_config *cfg = &c->srv->cfg;
  return c->closing || c->close_after_flush || c->srv->draining || c->parked != NULL ||
         c->inflight >= cfg->max_inflight_per_connection ||
         owed(c) >= cfg->max_reply_bytes_per_connection;
}

/* Whether one more read could bring more descriptors than the connection may
 * hold (one message brings up to FZD_MAX_FDS_PER_MESSAGE).  This stops the
 * reading only: the messages already read still run, and take their
 * descriptors from the queue. */
static bool fds_full(const fzd_conn *c) {
  return c->fdq_count + c->job_fds + FZD_MAX_FDS_PER_MESSAGE >
         c->srv->cfg.max_fds_per_connection;
}

/* Parses and dispatches every whole message in the input buffer, as long as
 * the connection may take more work. */
/* Whether a reply of bytes fits what c may owe: always when c owes
 * nothing, so that one job of any size can run. */
static bool owed_room(const fzd_conn *c, uint64_t bytes) {
  return owed(c) == 0 || owed(c) + bytes <= c->srv->cfg.max_reply_bytes_per_connection;
}

bool fzd_conn_park(fzd_conn *c, fzd_job *job) {
  if (owed_room(c, job->reply_reserve))
    return false;
  c->parked = job;
  fzd_debug("connection %llu: msgid %u waits until the client reads its replies (it owes "
            "%llu bytes)", (unsigned long long)c->id, job->msgid,
            (unsigned long long)owed(c));
  return true;
}

static void conn_process(fzd_conn *c) {
  fzd_server *srv = c->srv;
  if (c->parked != NULL && !c->closing && owed_room(c, c->parked->reply_reserve)) {
    fzd_job *job = c->parked;
    c->parked = NULL;
    fzd_submit_parsed(srv, c, job);
  }
  fzp_limits lim;
  fzp_limits_default(&lim);
  size_t off = 0;
  while (!conn_paused(c) && off < c->in_len) {
    if (c->in_len - off < c->need)
      break;
    /* Read again for each message: the hello before it changes it. */
    lim.max_message = c->greeted ? srv->cfg.max_message_bytes : HELLO_MAX;
    uint64_t need = 0;
    int64_t r = fzp_scan_resume(&c->scan, c->in + off, c->in_len - off, &lim, &need);
    if (r < 0) {
      if (r == FZ_EMSGSIZE)
        protocol_error(c, 0, FZ_EMSGSIZE, "message larger than %s (%llu)",
                       c->greeted ? "max_message_bytes" : "a hello may be",
                       (unsigned long long)lim.max_message);
      else
        protocol_error(c, 0, FZ_EPROTO,
                       "malformed msgpack (reserved byte, nesting deeper than %u, "
                       "a container over %u elements or more than %llu objects)",
                       lim.max_depth, lim.max_container,
                       (unsigned long long)lim.max_objects);
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
    fzp_scan_reset(&c->scan);
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
  if (c->in_len == 0 && c->in_cap > IN_BASE)
    in_resize(c, 0);
  /* Part of a message waits for the rest: message_timeout_ms runs. */
  if (c->in_len > 0)
    sweep_arm(srv);
  /* At end of stream whatever is left can never become a message. */
  if (c->eof && !c->closing && !c->close_after_flush && !conn_paused(c)) {
    if (c->in_len > 0)
      protocol_error(c, 0, FZ_EPROTO,
                     "truncated message: the connection ended after %zu bytes of it",
                     c->in_len);
    fzd_conn_close_after_flush(c);
  }
}

/* Room to read into.  The buffer grows only as a message needs it (to the
 * size the scan asked for, else by doubling), up to max_message_bytes
 * (HELLO_MAX before the hello: IN_BASE) plus room for the start of the
 * next message.  A full buffer at that size holds a whole message or an
 * error the scan has seen, so not reading it cannot spin the loop.  When
 * memory_limit has no room for the growth, the client is answered EBUSY
 * and the connection closed (ENOMEM for a message that could never fit):
 * waiting for room would let connections that send half a message each
 * hold the memory between them. */
static bool ensure_in_space(fzd_conn *c) {
  if (c->in_len < c->in_cap)
    return true;
  const fzd_server *srv = c->srv;
  size_t limit = c->greeted ? (size_t)srv->cfg.max_message_bytes + READ_CHUNK : IN_BASE;
  if (c->in_cap >= limit)
    return false;
  /* By doubling, not to the size the message declares: the room reserved
   * follows the bytes that came, so a client cannot reserve 64 MiB with a
   * header alone.  Never past the message's end, which the scan knows. */
  size_t cap = c->in_cap ? c->in_cap * 2 : IN_BASE;
  if (c->need > c->in_len && cap > c->need)
    cap = (size_t)c->need;
  if (cap > limit)
    cap = limit;
  int err = in_charge(cap) > srv->mem.limit / 2 ? FZ_ENOMEM : in_resize(c, cap);
  if (err == FZ_ENOMEM && in_charge(cap) > srv->mem.limit / 2)
    protocol_error(c, 0, FZ_ENOMEM,
                   "a message of more than %zu bytes cannot fit in the half of memory_limit "
                   "(%llu) that messages still arriving may hold; pass large data as a "
                   "descriptor", c->in_cap, (unsigned long long)srv->mem.limit);
  else if (err == FZ_EBUSY)
    protocol_error(c, 0, FZ_EBUSY,
                   "no room for this message: messages still arriving hold %llu bytes, "
                   "the most they may (half of memory_limit, %llu); retry later",
                   (unsigned long long)srv->in_reserved,
                   (unsigned long long)(srv->mem.limit / 2));
  else if (err < 0)
    protocol_error(c, 0, FZ_ENOMEM, "out of memory for a message of %zu bytes", cap);
  return err == 0;
}

/* Reads what the socket has, queueing any descriptors that come with it. */
static void conn_read(fzd_conn *c) {
  size_t budget = READ_BUDGET;
  while (budget > 0 && !c->closing && !c->eof && !fds_full(c)) {
    if (!ensure_in_space(c))
      break;
    size_t want = c->in_cap - c->in_len;
    if (want > READ_CHUNK)
      want = READ_CHUNK;
    /* Room for one message's descriptors: the kernel hands over those of
     * one sendmsg() per recvmsg(), and closes any beyond this (MSG_CTRUNC). */
    union {
      struct cmsghdr h;
      char buf[CMSG_SPACE(sizeof(int) * FZD_MAX_FDS_PER_MESSAGE)];
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
    bool overflow = false, over_cap = false;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL;
         cm = CMSG_NXTHDR(&mh, cm)) {
      if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
        continue;
      size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      /* Past the daemon-wide cap the descriptors are closed at once (the
       * table must keep room for everyone else) and queued as refused. */
      over_cap = c->srv->fds_passed + nfd > c->srv->fds_cap;
      for (size_t i = 0; i < nfd; i++) {
        int fd;
        memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
        if (over_cap) {
          close(fd);
          fd = -1;
        }
        if (!fdq_push(c, fd))
          overflow = true;
      }
      if (over_cap)
        fzd_log_limited(FZD_LOG_WARNING,
                        "connection %llu (%s): %zu descriptors refused: fzd holds %llu "
                        "passed by clients (max_fds_total %llu)",
                        (unsigned long long)c->id, c->peer, nfd,
                        (unsigned long long)c->srv->fds_passed,
                        (unsigned long long)c->srv->fds_cap);
    }
    if (mh.msg_flags & MSG_CTRUNC) {
      protocol_error(c, 0, FZ_EPROTO, "descriptors lost: more than %d in one message, "
                     "or fzd's descriptor table is full",
                     FZD_MAX_FDS_PER_MESSAGE);
      return;
    }
    if (overflow) {
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
    c->last_byte_ms = uv_now(c->srv->loop);
    budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
    /* Less than asked for: the socket had no more just now (or the next
     * bytes carry descriptors, which a read does not run into).  The poll
     * is level-triggered, so whatever is left is read on the next turn of
     * the loop; not asking again saves a system call per message. */
    if ((size_t)n < want)
      break;
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
  if (!conn_paused(c) && !fds_full(c) && !c->eof)
    ev |= UV_READABLE;
  if (out_pending(c) > 0)
    ev |= UV_WRITABLE;
  if (ev == c->events)
    return;
  /* Reading resumes after fzd paused it: the client was not the one
   * keeping the rest of its message. */
  if ((ev & UV_READABLE) && c->events >= 0 && !(c->events & UV_READABLE))
    c->last_byte_ms = uv_now(c->srv->loop);
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
    c->read_ns = uv_hrtime();
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
  if (c->tcp) {
    srv->nconns_tcp--;
    if (!c->greeted)
      srv->nconns_unauth--;
  } else {
    srv->nconns_unix--;
    if (c->has_uid)
      uid_release(srv, c->uid);
  }
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
  out_discard(c);
  /* A job that was never accepted: its client is gone. */
  fzd_job_free(c->parked);
  c->parked = NULL;
  /* Nothing more of its input will be parsed. */
  c->in_len = 0;
  in_resize(c, 0);
  uv_poll_stop(&c->poll);
  if (c->inflight > 0)
    fzd_pool_cancel(c->srv->pool, c);
  uv_close((uv_handle_t *)&c->poll, on_closed);
}

uint64_t fzd_conn_read_ns(const fzd_conn *c) { return c->read_ns; }

void fzd_conn_job_accepted(fzd_conn *c, fzd_job *job) {
  job->conn = c;
  c->refs++;
  c->inflight++;
  c->srv->inflight++;
  c->reply_reserved += job->reply_reserve;
  c->srv->reply_bytes += job->reply_reserve;
  c->job_fds += job->nfds;
  c->srv->fds_passed += job->nfds;
  fzd_server_busy(c->srv);
}

static const char *job_method(const fzd_job *job) {
  return job->kind == FZD_JOB_COMPRESS ? "compress"
         : job->kind == FZD_JOB_WARM    ? "warm"
         : job->kind == FZD_JOB_FRAMES  ? "frames"
                                        : "decompress";
}

void fzd_conn_log_job_error(fzd_conn *c, const char *method, uint32_t msgid,
                            int code, const char *text) {
  fzd_log_limited(FZD_LOG_WARNING, "connection %llu (%s): %s msgid %u failed: %s: %s",
                  (unsigned long long)c->id, c->peer, method, msgid,
                  fz_err_name(code), text);
}

void fzd_conn_job_done(fzd_job *job, void *arg) {
  fzd_server *srv = arg;
  fzd_conn *c = job->conn;
  c->inflight--;
  srv->inflight--;
  c->reply_reserved -= job->reply_reserve;
  srv->reply_bytes -= job->reply_reserve;
  c->job_fds -= job->nfds;
  srv->fds_passed -= job->nfds;
  fzd_server_busy(srv);
  if (job->err == FZ_ECANCELED)
    srv->stats.jobs_canceled++;
  else
    fzd_stats_job(&srv->stats, job);
  if (job->err < 0 && job->err != FZ_ECANCELED)
    fzd_conn_log_job_error(c, job_method(job), job->msgid, job->err,
                           job->why[0] ? job->why : fz_strerror(job->err));
  if (!c->closing) {
    fzd_job_reply(c, job);
    /* The reply stage ends as its write begins: a stamp taken after the
     * write could trail the client, which may already hold the reply. */
    if (job->err == 0)
      fzd_stats_stages(&srv->stats, job, uv_hrtime());
    conn_flush(c);
    conn_process(c);
    conn_flush(c);
  }
  fzd_job_free(job);
  conn_unref(c);
  if (srv->draining)
    fzd_server_check_drained(srv);
}

/* The count of uid's open Unix connections (made at 0 when missing), or
 * NULL without memory. */
static uint64_t *uid_count(fzd_server *srv, uint32_t uid) {
  for (size_t i = 0; i < srv->nuids; i++)
    if (srv->uids[i].uid == uid)
      return &srv->uids[i].n;
  if (srv->nuids == srv->uids_cap) {
    size_t cap = srv->uids_cap ? 2 * srv->uids_cap : 16;
    struct fzd_uid_count *p = realloc(srv->uids, cap * sizeof *p);
    if (p == NULL)
      return NULL;
    srv->uids = p;
    srv->uids_cap = cap;
  }
  srv->uids[srv->nuids] = (struct fzd_uid_count){uid, 0};
  return &srv->uids[srv->nuids++].n;
}

static void uid_release(fzd_server *srv, uint32_t uid) {
  for (size_t i = 0; i < srv->nuids; i++)
    if (srv->uids[i].uid == uid && --srv->uids[i].n == 0) {
      srv->uids[i] = srv->uids[--srv->nuids];
      return;
    }
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

void fzd_refuse_fd(int fd, int code, const char *text) {
  /* Best effort: the refusal must not block the loop. */
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  fzp_pack_error(&pk, 0, code, text);
  if (sb.data != NULL) {
    ssize_t w = send(fd, sb.data, sb.size, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
  }
  msgpack_sbuffer_destroy(&sb);
  close(fd);
}

/* Why a new connection of this kind cannot be taken, or NULL.  The Unix
 * socket and TCP are counted apart, so that TCP clients (who may not even
 * hold the token) can never take the Unix socket's room. */
static const char *refusal(const fzd_server *srv, bool tcp, uint64_t *cap) {
  const fzd_config *cfg = &srv->cfg;
  if (!tcp) {
    *cap = cfg->max_connections;
    return srv->nconns_unix >= cfg->max_connections ? "max_connections" : NULL;
  }
  if (srv->nconns_unauth >= cfg->max_unauthenticated) {
    *cap = cfg->max_unauthenticated;
    return "max_unauthenticated";
  }
  *cap = cfg->max_tcp_connections;
  return srv->nconns_tcp >= cfg->max_tcp_connections ? "max_tcp_connections" : NULL;
}

/* The TCP connection without hello that has waited longest, or NULL. */
static fzd_conn *oldest_unauthenticated(fzd_server *srv) {
  fzd_conn *old = NULL;
  for (fzd_conn *c = srv->conns; c != NULL; c = c->next)
    if (c->tcp && !c->greeted && !c->closing && !c->close_after_flush &&
        (old == NULL || c->born_ms < old->born_ms))
      old = c;
  return old;
}

void fzd_conn_accept(fzd_server *srv, int fd, bool tcp) {
  uint64_t cap = 0;
  /* A Unix peer's uid, for max_connections_per_user: one local user must
   * not hold every connection slot. */
  struct ucred cr;
  socklen_t crlen = sizeof cr;
  bool has_uid = !tcp && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) == 0;
  uint64_t *per_user = has_uid ? uid_count(srv, (uint32_t)cr.uid) : NULL;
  if (has_uid && per_user == NULL) {
    fzd_err("out of memory accepting a connection");
    close(fd);
    return;
  }
  /* Past max_unauthenticated, the TCP connection that has waited longest
   * for its hello makes room: holding that many connections without the
   * token then takes a new one faster than a client with the token says
   * hello (about a millisecond), where refusing the newcomer locked every
   * client out for as long as they were renewed. */
  bool evicted = false;
  if (tcp && srv->nconns_unauth >= srv->cfg.max_unauthenticated &&
      srv->nconns_tcp < srv->cfg.max_tcp_connections) {
    fzd_conn *old = oldest_unauthenticated(srv);
    if (old != NULL) {
      protocol_error(old, 0, FZ_EHANDSHAKE, "no hello yet, and a newer connection needs the "
                     "room (max_unauthenticated %llu)",
                     (unsigned long long)srv->cfg.max_unauthenticated);
      conn_flush(old);
      evicted = true;
    }
  }
  const char *full = evicted ? NULL : refusal(srv, tcp, &cap);
  if (full == NULL && per_user != NULL && *per_user >= srv->cfg.max_connections_per_user) {
    full = "max_connections_per_user";
    cap = srv->cfg.max_connections_per_user;
  }
  if (full != NULL) {
    char text[160];
    snprintf(text, sizeof text, "too many connections (%s %llu); try again later", full,
             (unsigned long long)cap);
    fzd_refuse_fd(fd, FZ_EBUSY, text);
    srv->stats.busy_rejections++;
    if (per_user != NULL && *per_user == 0) { /* made for this one: drop it */
      *per_user = 1;
      uid_release(srv, (uint32_t)cr.uid);
    }
    fzd_log_limited(FZD_LOG_WARNING, "refused a %s connection: %s (%llu) reached",
                    tcp ? "TCP" : "Unix", full, (unsigned long long)cap);
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
  c->has_uid = has_uid;
  if (has_uid) {
    c->uid = (uint32_t)cr.uid;
    (*per_user)++;
  }
  c->id = ++srv->next_conn_id;
  c->born_ms = c->last_byte_ms = uv_now(srv->loop);
  c->refs = 1;
  c->events = -1;
  c->poll.data = c;
  fzp_scan_reset(&c->scan);
  msgpack_packer_init(&c->pk, c, out_append);
  describe_peer(c);
  c->next = srv->conns;
  if (srv->conns)
    srv->conns->prev = c;
  srv->conns = c;
  srv->nconns++;
  if (tcp) {
    srv->nconns_tcp++;
    srv->nconns_unauth++;
  } else {
    srv->nconns_unix++;
  }
  srv->stats.connections_total++;
  /* Rate-limited: anyone who can connect (a TCP client without the token
   * too) could otherwise write thousands of lines a second, and journald
   * would drop fzd's real messages with them. */
  fzd_log_limited(FZD_LOG_INFO, "connection %llu from %s", (unsigned long long)c->id,
                  c->peer);
  sweep_arm(srv);
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

/* Four times a second while some connection has not said hello or holds
 * part of a message: those past handshake_timeout_ms (tcp_handshake_timeout_ms
 * for TCP) get EHANDSHAKE, and those that have sent nothing for
 * message_timeout_ms in the middle of a message get ETIMEDOUT, and are
 * closed (the settings are read each time, so a reload applies).  A
 * connection whose reading fzd paused is not waiting for its client and is
 * left alone.  With nothing to watch the timer stops, so an idle daemon does
 * not wake up. */
static void on_sweep(uv_timer_t *t) {
  fzd_server *srv = t->data;
  uint64_t now = uv_now(srv->loop);
  bool waiting = false;
  fzd_conn *next;
  for (fzd_conn *c = srv->conns; c != NULL; c = next) {
    next = c->next;
    if (c->closing || c->close_after_flush)
      continue;
    uint64_t limit = c->tcp ? srv->cfg.tcp_handshake_timeout_ms
                            : srv->cfg.handshake_timeout_ms;
    if (!c->greeted && limit != 0 && now - c->born_ms >= limit) {
      protocol_error(c, 0, FZ_EHANDSHAKE, "no hello within %s (%llu ms)",
                     c->tcp ? "tcp_handshake_timeout_ms" : "handshake_timeout_ms",
                     (unsigned long long)limit);
      conn_flush(c);
      continue;
    }
    if (!c->greeted && limit != 0)
      waiting = true;
    if (c->in_len == 0 || c->eof || conn_paused(c) || fds_full(c))
      continue;
    uint64_t quiet = now - c->last_byte_ms, mlimit = srv->cfg.message_timeout_ms;
    if (quiet < mlimit) {
      waiting = true;
      continue;
    }
    protocol_error(c, 0, FZ_ETIMEDOUT,
                   "%zu bytes of a message, then nothing for %llu ms (message_timeout_ms)",
                   c->in_len, (unsigned long long)quiet);
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
