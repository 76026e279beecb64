/*
 * client.c - the handle: connecting, the handshake, and one-shot calls.
 *
 * fz_client_connect() dials the address, sends "hello" with the protocol
 * version (and the token over TCP), and keeps the server's answer in
 * fz_server_info; the answer's max_message also bounds what we accept back.
 * fzc_call() is the synchronous request used by the handshake and the
 * service calls: send, then read answers until ours comes, parking job
 * answers that arrive in between.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define STR_(x) #x
#define STR(x) STR_(x)

unsigned fz_client_version(void) { return FZCLIENT_VERSION_HEX; }

const char *fz_client_version_string(void) {
  return STR(FZCLIENT_VERSION_MAJOR) "." STR(FZCLIENT_VERSION_MINOR) "." STR(
      FZCLIENT_VERSION_PATCH);
}

/* The system daemon's socket (systemd's fzd.socket, or fzd run as root). */
#define SYSTEM_SOCKET "/run/fzd/fzd.sock"

/* fzd run by a plain user, who cannot create /run/fzd, listens under the
 * user's runtime directory instead; the client looks there when the system
 * socket is absent, so that `fzd` then `fzctl status` works for anyone.
 * When neither exists the system path is named, so that the error says
 * where a service would listen. */
const char *fz_client_default_address(void) {
  const char *env = getenv("FZD_SOCKET");
  if (env && *env)
    return env;
  struct stat st;
  if (stat(SYSTEM_SOCKET, &st) == 0)
    return SYSTEM_SOCKET;
  /* Per thread: two threads may ask at once, each for its own environment. */
  static _Thread_local char user_socket[108];
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  if (xdg && xdg[0] == '/') {
    int n = snprintf(user_socket, sizeof user_socket, "%s/fzd/fzd.sock", xdg);
    if (n > 0 && (size_t)n < sizeof user_socket && stat(user_socket, &st) == 0)
      return user_socket;
  }
  return SYSTEM_SOCKET;
}

void fz_client_opts_init(fz_client_opts *o) { memset(o, 0, sizeof *o); }

int fzc_fail(fz_client *c, int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
  va_end(ap);
  return err;
}

const char *fz_client_errmsg(const fz_client *c) { return c ? c->errmsg : ""; }

int fz_client_info(const fz_client *c, fz_server_info *info) {
  if (!c || !info)
    return FZ_EINVAL;
  *info = c->info;
  return 0;
}

int fz_client_fd(const fz_client *c) { return c ? c->fd : -1; }

uint32_t fzc_next_msgid(fz_client *c) {
  /* msgid 0 is what the server uses when it could not read a request. */
  if (++c->next_msgid == 0)
    c->next_msgid = 1;
  return c->next_msgid;
}

int fzc_get_strbuf(const msgpack_object *map, const char *key, char *buf,
                   size_t cap) {
  const char *s;
  uint32_t len;
  int rc = fzp_get_str(map, key, &s, &len);
  if (rc <= 0)
    return rc;
  size_t n = len < cap - 1 ? len : cap - 1;
  memcpy(buf, s, n);
  buf[n] = '\0';
  return 1;
}

int fzc_call(fz_client *c, const char *method, uint32_t nfields,
             fzc_packfn packfn, const void *arg, fzp_message *msg) {
  return fzc_call_fds(c, method, nfields, packfn, arg, NULL, 0, msg);
}

int fzc_call_fds(fz_client *c, const char *method, uint32_t nfields, fzc_packfn packfn,
                 const void *arg, const int *fds, unsigned nfds, fzp_message *msg) {
  if (c->broken)
    return fzc_fail(c, c->broken, "the connection is no longer usable");
  c->errmsg[0] = '\0';
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  uint32_t msgid = fzc_next_msgid(c);
  fzp_pack_request_begin(&pk, msgid, method, nfields);
  if (packfn)
    packfn(&pk, arg);
  int64_t deadline = fzc_deadline(c->timeout_ms);
  struct iovec iov = {.iov_base = sb.data, .iov_len = sb.size};
  int rc = fzc_send(c, &iov, 1, fds, (int)nfds, deadline);
  msgpack_sbuffer_destroy(&sb);
  if (rc < 0)
    return rc;
  for (;;) {
    rc = fzc_recv(c, deadline, msg);
    if (rc == 0)
      return fzc_fail(c, FZ_ETIMEDOUT, "no answer to '%s' in time", method);
    if (rc < 0)
      return rc;
    if (msg->type == FZP_RESPONSE && msg->msgid == msgid) {
      fz_result tmp;
      memset(&tmp, 0, sizeof tmp);
      rc = fzc_error_from(msg, &tmp);
      if (rc < 0) {
        fzc_fail(c, rc, "%s", tmp.message);
        fzp_message_free(msg);
        return rc;
      }
      if (msg->result.type != MSGPACK_OBJECT_MAP) {
        fzp_message_free(msg);
        return fzc_fail(c, FZ_EPROTO, "the answer to '%s' is not a map", method);
      }
      return 0;
    }
    if (msg->type == FZP_RESPONSE && msg->msgid == 0) {
      /* The server could not read something we sent: the stream is gone. */
      fz_result tmp;
      memset(&tmp, 0, sizeof tmp);
      rc = fzc_error_from(msg, &tmp);
      fzp_message_free(msg);
      fzc_break(c, rc < 0 ? rc : FZ_EPROTO, tmp.message);
      return c->broken;
    }
    fzc_dispatch(c, msg);
    fzp_message_free(msg);
  }
}

typedef struct hello_args {
  const char *name;
  const char *token;
} hello_args;

static void pack_hello(msgpack_packer *pk, const void *arg) {
  const hello_args *h = arg;
  fzp_pack_key(pk, "version");
  msgpack_pack_uint32(pk, FZP_PROTOCOL_VERSION);
  fzp_pack_key(pk, "client");
  msgpack_pack_str_with_body(pk, h->name, strlen(h->name));
  if (h->token) {
    fzp_pack_key(pk, "token");
    msgpack_pack_str_with_body(pk, h->token, strlen(h->token));
  }
}

static int handshake(fz_client *c, const fz_client_opts *opts) {
  hello_args h = {.name = "libfzclient", .token = NULL};
  if (opts && opts->name)
    h.name = opts->name;
  h.token = opts && opts->token ? opts->token : getenv("FZD_TOKEN");
  if (h.token && !*h.token)
    h.token = NULL;
  fzp_message msg;
  int rc = fzc_call(c, "hello", h.token ? 3 : 2, pack_hello, &h, &msg);
  if (rc < 0)
    return rc;
  fz_server_info *in = &c->info;
  uint64_t version = 0;
  if (fzp_get_u64(&msg.result, "version", &version) != 1 ||
      version != FZP_PROTOCOL_VERSION) {
    fzp_message_free(&msg);
    return fzc_fail(c, FZ_EVERSION, "the server speaks protocol version %llu, not %d",
                    (unsigned long long)version, FZP_PROTOCOL_VERSION);
  }
  in->protocol = (int)version;
  fzc_get_strbuf(&msg.result, "server", in->server, sizeof in->server);
  fzc_get_strbuf(&msg.result, "backend", in->backend, sizeof in->backend);
  fzc_get_strbuf(&msg.result, "device", in->device, sizeof in->device);
  fzp_get_u64(&msg.result, "max_message", &in->max_message);
  fzp_get_u64(&msg.result, "max_inline", &in->max_inline);
  fzp_get_i64(&msg.result, "pid", &in->pid);
  fzp_message_free(&msg);
  /* Answers carry at most max_inline bytes of data plus a small envelope.
   * The announced size is capped at what fzd can be configured to (4 GiB),
   * so a server cannot talk the client into any allocation at all. */
  uint64_t announced = in->max_message < ((uint64_t)4 << 30) ? in->max_message
                                                             : (uint64_t)4 << 30;
  if (announced + 65536 > c->limits.max_message)
    c->limits.max_message = announced + 65536;
  return 0;
}

/* fz_client_opts.spin_us, then $FZD_CLIENT_SPIN_US (digits only, at most
 * a second), then the default: a GPU daemon's answers come within the
 * spin, and a CPU daemon's workers need the cores a spinning client would
 * take from them. */
static int resolve_spin(const fz_client_opts *opts, const fz_server_info *info) {
  int v = opts ? opts->spin_us : 0;
  if (v == 0) {
    v = strcmp(info->backend, "gpu") == 0 ? FZ_CLIENT_SPIN_US_DEFAULT : 0;
    const char *env = getenv("FZD_CLIENT_SPIN_US");
    if (env && *env && strspn(env, "0123456789") == strlen(env) && strlen(env) <= 7)
      v = atoi(env);
  }
  return v < 0 ? 0 : v > 1000000 ? 1000000 : v;
}

int fz_client_connect(fz_client **out, const char *address,
                      const fz_client_opts *opts, char *errmsg,
                      size_t errmsg_len) {
  char scratch[8];
  if (!errmsg || errmsg_len == 0) {
    errmsg = scratch;
    errmsg_len = sizeof scratch;
  }
  errmsg[0] = '\0';
  if (!out) {
    snprintf(errmsg, errmsg_len, "no handle pointer given");
    return FZ_EINVAL;
  }
  *out = NULL;
  if (!address)
    address = fz_client_default_address();
  char expanded[512];
  int rc = fzc_expand_address(address, expanded, sizeof expanded, errmsg, errmsg_len);
  if (rc < 0)
    return rc;
  address = expanded;
  fz_client *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(errmsg, errmsg_len, "out of memory");
    return FZ_ENOMEM;
  }
  c->fd = -1;
  for (int i = 0; i < FZC_SHM_SLOTS; i++)
    c->shm[i].fd = -1;
  c->timeout_ms = opts ? opts->timeout_ms : 0;
  fzp_limits_default(&c->limits);
  rc = fzc_dial(address, c->timeout_ms, &c->fd, &c->transport, errmsg, errmsg_len);
  if (rc < 0)
    goto err_dial;
  c->info.transport = c->transport;
  rc = handshake(c, opts);
  if (rc < 0) {
    snprintf(errmsg, errmsg_len, "handshake with '%s' failed: %s", address,
             c->errmsg[0] ? c->errmsg : fz_strerror(rc));
    goto err_handshake;
  }
  c->spin_us = resolve_spin(opts, &c->info);
  rc = fzc_device_init(c);
  if (rc < 0) {
    snprintf(errmsg, errmsg_len, "out of memory");
    goto err_handshake;
  }
  *out = c;
  return 0;

err_handshake:
  close(c->fd);
  free(c->rx);
  free(c->jobs);
err_dial:
  free(c);
  return rc;
}

void fz_client_close(fz_client *c) {
  if (!c)
    return;
  if (c->fd >= 0)
    close(c->fd);
  for (size_t i = 0; i < c->njobs; i++) {
    if (!c->jobs[i].out)
      free(c->jobs[i].res.data);
    if (c->jobs[i].out_memfd >= 0)
      close(c->jobs[i].out_memfd);
  }
  for (int i = 0; i < FZC_SHM_SLOTS; i++)
    if (c->shm[i].fd >= 0) {
      if (c->shm[i].map)
        munmap(c->shm[i].map, c->shm[i].size);
      close(c->shm[i].fd);
    }
  fzc_buf_free_all(c);
  fzc_device_free(c);
  free(c->jobs);
  free(c->rx);
  free(c);
}

void fz_client_free(void *p) { free(p); }
