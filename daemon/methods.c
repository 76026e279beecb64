/*
 * methods.c - the RPC methods: one table of {name, handler}, the handshake
 * gate, and the validation of compress/decompress params into jobs.
 *
 * Everything a client declares is checked here, on the loop thread, before a
 * job exists: types, the shape and its product (no overflow), that dtype
 * size times shape equals the bytes supplied (ESIZE), descriptor indexes and
 * sizes, and the transport rules.  A bad request gets an error reply and the
 * connection stays usable; only a failed handshake closes it.  Conventions
 * for codes: a missing or mistyped param is EPARAMS; a well-typed but invalid
 * value uses the engine's own code where one exists (EDTYPE, ESHAPE).  A key
 * a method does not know is EPARAMS too, naming the key: a misspelt
 * optional param would otherwise run with its default without a word.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "frames.h"
#include "log.h"
#include "server.h"
#include "warm.h"

typedef void (*method_fn)(fzd_server *srv, fzd_conn *c, const fzp_message *msg);

/* Copies a wire string into a NUL-terminated buffer; false when too long. */
static bool copy_str(char *dst, size_t cap, const char *s, uint32_t len) {
  if (len >= cap || memchr(s, '\0', len) != NULL)
    return false;
  memcpy(dst, s, len);
  dst[len] = '\0';
  return true;
}

/* The keys each method takes; NULL-terminated. */
static const char *const hello_keys[] = {"version", "client", "token", NULL};
static const char *const no_keys[] = {NULL};
#define BUFFER_KEYS                                                            \
  "data", "in_fd", "in_offset", "in_length", "in_ipc", "out_fd", "out_offset", \
      "out_length", "out_ipc", "device", "nfds", "in_vmm_fd", "in_vmm_size",     \
      "in_pool_fd", "in_pool_ptr", "in_buffer_id", "out_vmm_fd", "out_vmm_size", \
      "out_pool_fd", "out_pool_ptr", "out_buffer_id", "wait_event", "done_event"
static const char *const compress_keys[] = {"dtype",  "shape",      "eb",       "mode",
                                            "pipeline", "verify", "fill_value", BUFFER_KEYS,
                                            NULL};
static const char *const decompress_keys[] = {BUFFER_KEYS, NULL};
static const char *const release_keys[] = {"buffer_ids", "all", NULL};
static const char *const warm_keys[] = {"plans", NULL};
static const char *const warm_entry_keys[] = {"pipeline", "dtype", "shape", "eb", "mode",
                                              NULL};

/* 0 when every key of the params map is one of keys; else EPARAMS with the
 * first unknown key quoted in text. */
static int unknown_key(const msgpack_object *p, const char *const *keys, char *text,
                       size_t cap) {
  if (p->type != MSGPACK_OBJECT_MAP)
    return 0;
  for (uint32_t i = 0; i < p->via.map.size; i++) {
    const msgpack_object *k = &p->via.map.ptr[i].key;
    bool known = false;
    if (k->type == MSGPACK_OBJECT_STR)
      for (const char *const *w = keys; *w != NULL && !known; w++)
        known = strlen(*w) == k->via.str.size &&
                memcmp(*w, k->via.str.ptr, k->via.str.size) == 0;
    if (known)
      continue;
    if (k->type != MSGPACK_OBJECT_STR) {
      snprintf(text, cap, "params keys must be strings");
      return FZ_EPARAMS;
    }
    char name[48];
    uint32_t n = k->via.str.size < sizeof(name) - 1 ? k->via.str.size
                                                     : (uint32_t)sizeof(name) - 1;
    for (uint32_t j = 0; j < n; j++) {
      char ch = k->via.str.ptr[j];
      name[j] = ch >= 0x20 && ch < 0x7f ? ch : '?';
    }
    name[n] = '\0';
    int len = snprintf(text, cap, "unknown param \"%s\"; this method takes", name);
    for (const char *const *w = keys; *w != NULL && len > 0 && (size_t)len < cap; w++)
      len += snprintf(text + len, cap - (size_t)len, "%s\"%s\"", w == keys ? " " : ", ", *w);
    if (keys[0] == NULL)
      snprintf(text + len, cap - (size_t)len, " none");
    return FZ_EPARAMS;
  }
  return 0;
}

/* ---- handshake ------------------------------------------------------------ */

/* Compares without an early exit so the time does not leak the token. */
static bool token_equal(const char *want, const char *got, uint32_t got_len) {
  size_t n = strlen(want);
  unsigned diff = (unsigned)(n ^ got_len);
  for (size_t i = 0; i < n; i++)
    diff |= (unsigned char)want[i] ^ (unsigned char)(i < got_len ? got[i] : 0);
  return diff == 0;
}

static void m_hello(fzd_server *srv, fzd_conn *c, const fzp_message *msg) {
  const msgpack_object *p = &msg->params;
  char text[512];
  if (unknown_key(p, hello_keys, text, sizeof text) < 0) {
    fzd_conn_reply_error(c, msg->msgid, FZ_EPARAMS, "hello: %s", text);
    fzd_conn_close_after_flush(c);
    return;
  }
  int64_t version = 0;
  int r = fzp_get_i64(p, "version", &version);
  if (r <= 0) {
    fzd_conn_reply_error(c, msg->msgid, FZ_EPARAMS, "hello needs \"version\" (an integer)");
    fzd_conn_close_after_flush(c);
    return;
  }
  if (version != FZP_PROTOCOL_VERSION) {
    fzd_conn_reply_error(c, msg->msgid, FZ_EVERSION,
                         "protocol version %lld is not supported; this server speaks %d",
                         (long long)version, FZP_PROTOCOL_VERSION);
    fzd_conn_close_after_flush(c);
    return;
  }
  const char *client = "";
  uint32_t client_len = 0;
  if (fzp_get_str(p, "client", &client, &client_len) < 0) {
    fzd_conn_reply_error(c, msg->msgid, FZ_EPARAMS, "hello: \"client\" must be a string");
    fzd_conn_close_after_flush(c);
    return;
  }
  if (fzd_conn_is_tcp(c) && srv->cfg.tcp_token[0] != '\0') {
    const char *tok = NULL;
    uint32_t tok_len = 0;
    if (fzp_get_str(p, "token", &tok, &tok_len) != 1 ||
        !token_equal(srv->cfg.tcp_token, tok, tok_len)) {
      fzd_conn_reply_error(c, msg->msgid, FZ_EAUTH,
                           tok ? "wrong token" : "this server needs a \"token\" in hello");
      fzd_log_limited(FZD_LOG_WARNING, "TCP client refused: %s token",
                      tok ? "wrong" : "no");
      fzd_conn_close_after_flush(c);
      return;
    }
  }
  fzd_conn_set_greeted(c);
  fzd_debug("hello from client \"%.*s\"", (int)(client_len > 64 ? 64 : client_len),
            client);
  msgpack_packer *pk = fzd_conn_packer(c);
  fzp_pack_result_begin(pk, msg->msgid, 7);
  fzp_pack_key(pk, "version");
  msgpack_pack_int(pk, FZP_PROTOCOL_VERSION);
  fzd_pack_identity(srv, pk);
  fzp_pack_key(pk, "max_message");
  msgpack_pack_uint64(pk, srv->cfg.max_message_bytes);
  fzp_pack_key(pk, "max_inline");
  msgpack_pack_uint64(pk, srv->cfg.max_inline_bytes);
  fzp_pack_key(pk, "pid");
  msgpack_pack_int(pk, (int)getpid());
}

/* ---- small methods -------------------------------------------------------- */

/* The methods without params: false (and the error is sent) when some
 * were given. */
static bool no_params(fzd_conn *c, const fzp_message *msg) {
  char text[512];
  if (unknown_key(&msg->params, no_keys, text, sizeof text) == 0)
    return true;
  fzd_conn_reply_error(c, msg->msgid, FZ_EPARAMS, "%s", text);
  return false;
}

static void m_ping(fzd_server *srv, fzd_conn *c, const fzp_message *msg) {
  (void)srv;
  if (!no_params(c, msg))
    return;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  msgpack_packer *pk = fzd_conn_packer(c);
  fzp_pack_result_begin(pk, msg->msgid, 1);
  fzp_pack_key(pk, "time_ns");
  msgpack_pack_uint64(pk, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
}

static void m_presets(fzd_server *srv, fzd_conn *c, const fzp_message *msg) {
  (void)srv;
  if (!no_params(c, msg))
    return;
  size_t n = 0;
  const fz_preset *ps = fz_presets(&n);
  msgpack_packer *pk = fzd_conn_packer(c);
  fzp_pack_result_begin(pk, msg->msgid, 1);
  fzp_pack_key(pk, "presets");
  msgpack_pack_array(pk, n);
  for (size_t i = 0; i < n; i++) {
    msgpack_pack_map(pk, 3);
    fzp_pack_key(pk, "name");
    fzp_pack_key(pk, ps[i].name);
    fzp_pack_key(pk, "chain");
    fzp_pack_key(pk, ps[i].chain);
    fzp_pack_key(pk, "description");
    fzp_pack_key(pk, ps[i].description);
  }
}

static void m_status(fzd_server *srv, fzd_conn *c, const fzp_message *msg) {
  if (!no_params(c, msg))
    return;
  fzd_status_pack(srv, fzd_conn_packer(c), msg->msgid);
}

static void m_stats(fzd_server *srv, fzd_conn *c, const fzp_message *msg) {
  if (!no_params(c, msg))
    return;
  fzd_stats_pack(srv, fzd_conn_packer(c), msg->msgid);
}

/* ---- jobs ----------------------------------------------------------------- */

typedef struct bad {
  int code;
  char text[512]; /* as long as a reply's error text (conn.c) */
} bad;

static int reject(bad *b, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int reject(bad *b, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b->text, sizeof(b->text), fmt, ap);
  va_end(ap);
  b->code = code;
  return code;
}

/* Reads an optional uint param; EPARAMS when it has another type. */
static int opt_u64(const msgpack_object *p, const char *key, uint64_t *v, bad *b) {
  int r = fzp_get_u64(p, key, v);
  if (r < 0)
    return reject(b, FZ_EPARAMS, "\"%s\" must be an unsigned integer", key);
  return r;
}

static int parse_fd_index(const msgpack_object *p, const char *key,
                          const fzd_job *job, int *index, bad *b) {
  uint64_t v;
  int r = opt_u64(p, key, &v, b);
  if (r <= 0)
    return r;
  if (v >= job->nfds)
    return reject(b, FZ_EPARAMS,
                  "\"%s\" is %llu but the message carries %u descriptors", key,
                  (unsigned long long)v, job->nfds);
  *index = (int)v;
  return 1;
}

/* Checks "device" for a device key: required, and this daemon's GPU. */
static int check_device(fzd_server *srv, const msgpack_object *p, const char *key, bad *b) {
  const char *dev;
  uint32_t dev_len;
  char text[72];
  if (fzp_get_str(p, "device", &dev, &dev_len) != 1 ||
      !copy_str(text, sizeof(text), dev, dev_len))
    return reject(b, FZ_EPARAMS, "\"%s\" needs \"device\", the UUID of the buffer's GPU "
                  "(\"GPU-...\")", key);
  if (strcasecmp(text, fzd_gpu_uuid(srv->gpu)) != 0)
    return reject(b, FZ_ENOGPU, "the buffer is on GPU \"%s\" but this fzd serves %s",
                  text, fzd_gpu_uuid(srv->gpu));
  return 0;
}

/* Device keys travel only on the Unix socket of a GPU backend. */
static int check_transport(fzd_server *srv, fzd_conn *c, const char *key, bad *b) {
  if (fzd_conn_is_tcp(c))
    return reject(b, FZ_ETRANSPORT, "CUDA IPC buffers cannot be used over TCP (\"%s\"); "
                  "send \"data\" inline", key);
  if (srv->gpu == NULL)
    return reject(b, FZ_ENOGPU, "\"%s\": CUDA IPC buffers need the GPU backend; "
                  "this fzd runs the CPU backend", key);
  return 0;
}

/* Reads an optional bin param; EPARAMS when it has another type. */
static int opt_bin(const msgpack_object *p, const char *key, const void **v, uint32_t *len,
                   bad *b) {
  int r = fzp_get_bin(p, key, v, len);
  if (r < 0)
    return reject(b, FZ_EPARAMS, "\"%s\" must be bin", key);
  return r;
}

/* The device buffer of one side ("in" or "out"), at most one of:
 *   <side>_ipc      bin(64), a legacy cudaIpcMemHandle_t;
 *   <side>_vmm_fd   descriptor index of a cuMemCreate export, with
 *                   <side>_vmm_size, the size given to cuMemCreate;
 *   <side>_pool_fd  descriptor index of an IPC-capable pool's export, with
 *                   <side>_pool_ptr, bin(64), the pointer's export data;
 * and <side>_buffer_id (uint), the allocation's CU_POINTER_ATTRIBUTE_BUFFER_ID,
 * part of the import cache's key.  The shape of the keys is checked first,
 * then the transport and backend, then values that need the GPU backend to
 * mean anything.  1 when given (d filled), 0 when absent, or the error. */
static int parse_device_buffer(fzd_server *srv, fzd_conn *c, const msgpack_object *p,
                               const char *side, fzd_job *job, fzd_devbuf *d, bad *b) {
  static const char *const keys[2][6] = {
      {"in_ipc", "in_vmm_fd", "in_vmm_size", "in_pool_fd", "in_pool_ptr", "in_buffer_id"},
      {"out_ipc", "out_vmm_fd", "out_vmm_size", "out_pool_fd", "out_pool_ptr",
       "out_buffer_id"}};
  const char *const *k = keys[strcmp(side, "in") != 0];
  const char *k_ipc = k[0], *k_vfd = k[1], *k_vsize = k[2], *k_pfd = k[3], *k_pptr = k[4],
             *k_id = k[5];
  const void *ipc = NULL, *pptr = NULL;
  uint32_t ipc_len = 0, pptr_len = 0;
  uint64_t vfd = 0, vsize = 0, pfd = 0, id = 0;
  int has_ipc, has_vfd, has_vsize, has_pfd, has_pptr, has_id;
  if ((has_ipc = opt_bin(p, k_ipc, &ipc, &ipc_len, b)) < 0 ||
      (has_vfd = opt_u64(p, k_vfd, &vfd, b)) < 0 ||
      (has_vsize = opt_u64(p, k_vsize, &vsize, b)) < 0 ||
      (has_pfd = opt_u64(p, k_pfd, &pfd, b)) < 0 ||
      (has_pptr = opt_bin(p, k_pptr, &pptr, &pptr_len, b)) < 0 ||
      (has_id = opt_u64(p, k_id, &id, b)) < 0)
    return b->code;
  if (has_ipc + has_vfd + has_pfd > 1)
    return reject(b, FZ_EPARAMS, "give at most one of \"%s\", \"%s\" and \"%s\"", k_ipc,
                  k_vfd, k_pfd);
  if (has_vsize != has_vfd)
    return reject(b, FZ_EPARAMS, "\"%s\" and \"%s\" go together: the VMM export's "
                  "descriptor and the size given to cuMemCreate", k_vfd, k_vsize);
  if (has_pptr != has_pfd)
    return reject(b, FZ_EPARAMS, "\"%s\" and \"%s\" go together: the pool's export "
                  "descriptor and the pointer's export data", k_pfd, k_pptr);
  if (has_id && !(has_ipc || has_vfd || has_pfd))
    return reject(b, FZ_EPARAMS, "\"%s\" names the allocation of a device buffer; "
                  "give \"%s\", \"%s\" or \"%s\" with it", k_id, k_ipc, k_vfd, k_pfd);
  if (has_vfd && (vsize == 0 || vsize > SIZE_MAX))
    return reject(b, FZ_EPARAMS, "\"%s\" must be the allocation's size in bytes, above 0 "
                  "(the size given to cuMemCreate)", k_vsize);
  if (!(has_ipc || has_vfd || has_pfd))
    return 0;
  const char *key = has_ipc ? k_ipc : has_vfd ? k_vfd : k_pfd;
  if (check_transport(srv, c, key, b) < 0)
    return b->code;
  if (has_ipc && ipc_len != FZD_IPC_HANDLE_BYTES)
    return reject(b, FZ_EPARAMS, "\"%s\" must be a %d-byte cudaIpcMemHandle_t, not %u "
                  "bytes", k_ipc, FZD_IPC_HANDLE_BYTES, ipc_len);
  if (has_pfd && pptr_len != FZD_IPC_HANDLE_BYTES)
    return reject(b, FZ_EPARAMS, "\"%s\" must be a %d-byte cudaMemPoolPtrExportData, not "
                  "%u bytes", k_pptr, FZD_IPC_HANDLE_BYTES, pptr_len);
  uint64_t index = has_vfd ? vfd : pfd;
  if ((has_vfd || has_pfd) && index >= job->nfds)
    return reject(b, FZ_EPARAMS, "\"%s\" is %llu but the message carries %u descriptors",
                  key, (unsigned long long)index, job->nfds);
  if (check_device(srv, p, key, b) < 0)
    return b->code;
  job->ipc = fzd_conn_ipc(c);
  if (job->ipc == NULL)
    return reject(b, FZ_ENOMEM, "no memory for the connection's IPC cache");
  memset(d, 0, sizeof *d);
  d->fd = -1;
  if (has_ipc) {
    d->kind = FZD_MEM_IPC;
    memcpy(d->handle, ipc, FZD_IPC_HANDLE_BYTES);
  } else if (has_vfd) {
    d->kind = FZD_MEM_VMM;
    d->fd = (int)vfd;
    d->vmm_size = vsize;
  } else {
    d->kind = FZD_MEM_POOL;
    d->fd = (int)pfd;
    memcpy(d->handle, pptr, FZD_IPC_HANDLE_BYTES);
  }
  d->has_buffer_id = has_id == 1;
  d->buffer_id = id;
  return 1;
}

/* "wait_event" and "done_event": bin(64) cudaIpcEventHandle_t each. */
static int parse_events(fzd_server *srv, fzd_conn *c, const msgpack_object *p, fzd_job *job,
                        bad *b) {
  static const char *const keys[2] = {"wait_event", "done_event"};
  for (int i = 0; i < 2; i++) {
    const void *h;
    uint32_t len;
    int r = opt_bin(p, keys[i], &h, &len, b);
    if (r < 0)
      return r;
    if (r == 0)
      continue;
    if (check_transport(srv, c, keys[i], b) < 0)
      return b->code;
    if (len != FZD_IPC_HANDLE_BYTES)
      return reject(b, FZ_EPARAMS, "\"%s\" must be a %d-byte cudaIpcEventHandle_t, not %u "
                    "bytes", keys[i], FZD_IPC_HANDLE_BYTES, len);
    if (check_device(srv, p, keys[i], b) < 0)
      return b->code;
    job->ipc = fzd_conn_ipc(c);
    if (job->ipc == NULL)
      return reject(b, FZ_ENOMEM, "no memory for the connection's IPC cache");
    if (i == 0) {
      job->has_wait_event = true;
      memcpy(job->wait_event, h, FZD_IPC_HANDLE_BYTES);
    } else {
      job->has_done_event = true;
      memcpy(job->done_event, h, FZD_IPC_HANDLE_BYTES);
    }
  }
  return 0;
}

/* The input of an IPC job: in_offset (default 0) and in_length (default:
 * what the shape needs, want; required when want is 0). */
static int parse_ipc_input(fzd_server *srv, const msgpack_object *p, fzd_job *job,
                           uint64_t want, bad *b) {
  uint64_t off = 0, len = want;
  if (opt_u64(p, "in_offset", &off, b) < 0)
    return b->code;
  int has_len = opt_u64(p, "in_length", &len, b);
  if (has_len < 0)
    return b->code;
  if (!has_len && want == 0)
    return reject(b, FZ_EPARAMS, "a device input needs \"in_length\", the archive's size");
  if (len > srv->cfg.max_job_bytes || len > SIZE_MAX || off > UINT64_MAX - len)
    return reject(b, FZ_EMSGSIZE, "input of %llu bytes exceeds max_job_bytes (%llu)",
                  (unsigned long long)len, (unsigned long long)srv->cfg.max_job_bytes);
  job->in_ipc = true;
  job->in_off = off;
  job->in_len = (size_t)len;
  return 0;
}

int fzd_parse_device_input(fzd_server *srv, fzd_conn *c, const msgpack_object *p, fzd_job *job,
                           char *why, size_t why_len) {
  bad b = {0};
  int r = parse_device_buffer(srv, c, p, "in", job, &job->in_dev, &b);
  if (r == 1 && parse_ipc_input(srv, p, job, 0, &b) < 0)
    r = b.code;
  if (r < 0)
    snprintf(why, why_len, "%s", b.text);
  return r;
}

/* The input: inline "data", "in_fd" (+ in_offset, in_length) or "in_ipc"
 * (+ in_offset, in_length, device).  For inline data the bytes are copied
 * out of the read buffer, which moves on.  want is the size the shape needs
 * (compress) or 0. */
static int parse_input(fzd_server *srv, fzd_conn *c, const msgpack_object *p,
                       fzd_job *job, uint64_t want, bad *b) {
  const void *data;
  uint32_t data_len;
  int has_data = fzp_get_bin(p, "data", &data, &data_len);
  if (has_data < 0)
    return reject(b, FZ_EPARAMS, "\"data\" must be bin");
  int r = parse_fd_index(p, "in_fd", job, &job->in_fd, b);
  if (r < 0)
    return r;
  int has_ipc = parse_device_buffer(srv, c, p, "in", job, &job->in_dev, b);
  if (has_ipc < 0)
    return has_ipc;
  if (has_data + (r == 1) + has_ipc != 1)
    return reject(b, FZ_EPARAMS, "give exactly one of \"data\", \"in_fd\", \"in_ipc\", "
                  "\"in_vmm_fd\" and \"in_pool_fd\"");
  if (has_ipc)
    return parse_ipc_input(srv, p, job, want, b);
  if (has_data) {
    /* A key the request cannot use is an error, not ignored: the client
     * meant something by it (and a bad value of it would pass unseen). */
    const msgpack_object *unused;
    if (fzp_get_obj(p, "in_offset", &unused) == 1 || fzp_get_obj(p, "in_length", &unused) == 1)
      return reject(b, FZ_EPARAMS, "\"in_offset\" and \"in_length\" go with \"in_fd\" or a "
                    "device input, not with inline \"data\"");
    if (data_len > srv->cfg.max_inline_bytes)
      return reject(b, FZ_EMSGSIZE, "inline data of %u bytes exceeds max_inline_bytes (%llu)",
                    data_len, (unsigned long long)srv->cfg.max_inline_bytes);
    job->in_data = malloc(data_len ? data_len : 1);
    if (job->in_data == NULL)
      return reject(b, FZ_ENOMEM, "no memory for %u bytes of input", data_len);
    memcpy(job->in_data, data, data_len);
    job->in_len = data_len;
    return 0;
  }
  uint64_t off = 0, len = 0;
  if (opt_u64(p, "in_offset", &off, b) < 0)
    return b->code;
  int has_len = opt_u64(p, "in_length", &len, b);
  if (has_len < 0)
    return b->code;
  struct stat st;
  if (fstat(job->fds[job->in_fd], &st) < 0 || !S_ISREG(st.st_mode))
    return reject(b, FZ_EPARAMS, "in_fd must be a regular file or a memfd");
  uint64_t size = (uint64_t)st.st_size;
  if (off > size)
    return reject(b, FZ_ESIZE, "in_offset %llu is past the end of in_fd (%llu bytes)",
                  (unsigned long long)off, (unsigned long long)size);
  if (!has_len)
    len = size - off;
  if (len > size - off)
    return reject(b, FZ_ESIZE, "in_offset + in_length (%llu + %llu) is past the end "
                  "of in_fd (%llu bytes)", (unsigned long long)off,
                  (unsigned long long)len, (unsigned long long)size);
  if (len > srv->cfg.max_job_bytes || len > SIZE_MAX)
    return reject(b, FZ_EMSGSIZE, "input of %llu bytes exceeds max_job_bytes (%llu)",
                  (unsigned long long)len, (unsigned long long)srv->cfg.max_job_bytes);
  job->in_off = off;
  job->in_len = (size_t)len;
  /* A sealed memfd is read in place from the connection's mapping. */
  fzd_fdmap_acquire(fzd_conn_fdmap(c), job->fds[job->in_fd], off, len, &job->in_ptr,
                    &job->in_ref);
  return 0;
}

/* The output: inline (nothing given), "out_fd" (+ out_offset) or "out_ipc"
 * (+ out_offset, out_length: the bytes the daemon may write there). */
static int parse_output(fzd_server *srv, fzd_conn *c, const msgpack_object *p,
                        fzd_job *job, bad *b) {
  int r = parse_fd_index(p, "out_fd", job, &job->out_fd, b);
  if (r < 0)
    return r;
  int has_ipc = parse_device_buffer(srv, c, p, "out", job, &job->out_dev, b);
  if (has_ipc < 0)
    return has_ipc;
  if (r == 1 && has_ipc)
    return reject(b, FZ_EPARAMS, "give at most one of \"out_fd\" and a device buffer "
                  "(\"out_ipc\", \"out_vmm_fd\", \"out_pool_fd\")");
  if (has_ipc) {
    if (opt_u64(p, "out_offset", &job->out_off, b) < 0)
      return b->code;
    int has_len = opt_u64(p, "out_length", &job->out_cap, b);
    if (has_len < 0)
      return b->code;
    if (!has_len || job->out_cap == 0 || job->out_cap > SIZE_MAX ||
        job->out_off > UINT64_MAX - job->out_cap)
      return reject(b, FZ_EPARAMS, "a device output needs \"out_length\", the bytes the "
                    "daemon may write at out_offset");
    job->out_ipc = true;
    return 0;
  }
  if (r == 0) {
    const msgpack_object *unused;
    if (fzp_get_obj(p, "out_offset", &unused) == 1 || fzp_get_obj(p, "out_length", &unused) == 1)
      return reject(b, FZ_EPARAMS, "\"out_offset\" and \"out_length\" go with \"out_fd\" or "
                    "a device output, not with an inline result");
    return 0;
  }
  if (opt_u64(p, "out_offset", &job->out_off, b) < 0)
    return b->code;
  if (job->out_off > (uint64_t)INT64_MAX / 2)
    return reject(b, FZ_EPARAMS, "out_offset is too large");
  /* Optional with a descriptor: a result longer than out_length fails with
   * ENOSPC instead of writing past the region the client set aside. */
  if (opt_u64(p, "out_length", &job->out_cap, b) < 0)
    return b->code;
  int fd = job->fds[job->out_fd];
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
    return reject(b, FZ_EPARAMS, "out_fd must be a regular file or a memfd");
  /* pwrite() on an O_APPEND descriptor ignores the offset and appends (Linux
   * documents this as a bug it keeps): the result would land after the old
   * contents, and the truncation would then cut it off. */
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || (fl & O_APPEND))
    return reject(b, FZ_EPARAMS, "out_fd is open with O_APPEND, where writes ignore "
                  "out_offset; open it without O_APPEND (O_WRONLY or O_RDWR)");
  /* A memfd sealed against shrinking or growing is a shared buffer of fixed
   * size, not a file whose old tail should go. */
  int seals = fcntl(fd, F_GET_SEALS);
  job->out_truncate = !(seals > 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW)));
  return 0;
}

int fzd_parse_output(fzd_server *srv, fzd_conn *c, const msgpack_object *p, fzd_job *job,
                     char *why, size_t why_len) {
  bad b = {0};
  int r = parse_output(srv, c, p, job, &b);
  if (r < 0)
    snprintf(why, why_len, "%s", b.text);
  return r;
}

static int parse_compress(fzd_server *srv, fzd_conn *c, const msgpack_object *p,
                          fzd_job *job, bad *b) {
  const char *s;
  uint32_t len;
  char text[32];
  fz_params_init(&job->params);
  job->params.threads = 1;

  int r = fzp_get_str(p, "dtype", &s, &len);
  if (r <= 0)
    return reject(b, FZ_EPARAMS, "\"dtype\" (a string such as \"f32\") is required");
  if (!copy_str(text, sizeof(text), s, len) ||
      fz_dtype_parse(text, &job->params.dtype) < 0)
    return reject(b, FZ_EDTYPE, "unknown dtype \"%.*s\"", (int)(len > 24 ? 24 : len), s);

  const msgpack_object *shape;
  if (fzp_get_obj(p, "shape", &shape) != 1 || shape->type != MSGPACK_OBJECT_ARRAY)
    return reject(b, FZ_EPARAMS, "\"shape\" (an array of 1 to %d extents) is required",
                  FZ_MAX_DIMS);
  if (shape->via.array.size < 1 || shape->via.array.size > FZ_MAX_DIMS)
    return reject(b, FZ_ESHAPE, "shape has %u dimensions; 1 to %d are supported",
                  shape->via.array.size, FZ_MAX_DIMS);
  uint64_t elems = 1;
  job->params.ndims = shape->via.array.size;
  for (uint32_t i = 0; i < shape->via.array.size; i++) {
    const msgpack_object *d = &shape->via.array.ptr[i];
    if (d->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
      return reject(b, FZ_EPARAMS, "shape[%u] must be an unsigned integer", i);
    uint64_t v = d->via.u64;
    if (v == 0)
      return reject(b, FZ_ESHAPE, "shape[%u] is 0", i);
    if (elems > UINT64_MAX / v)
      return reject(b, FZ_ESHAPE, "the shape's product overflows 64 bits");
    elems *= v;
    job->params.dims[i] = v;
  }
  size_t esize = fz_dtype_size(job->params.dtype);
  if (elems > UINT64_MAX / esize)
    return reject(b, FZ_ESHAPE, "dtype size times the shape's product overflows 64 bits");
  uint64_t want = elems * esize;

  r = fzp_get_str(p, "pipeline", &s, &len);
  if (r < 0)
    return reject(b, FZ_EPARAMS, "\"pipeline\" must be a string");
  if (r == 1 && !copy_str(job->pipeline, sizeof(job->pipeline), s, len))
    return reject(b, FZ_EPARAMS, "\"pipeline\" is longer than %d bytes or holds a NUL",
                  FZD_PIPELINE_MAX - 1);
  r = fzp_get_f64(p, "eb", &job->params.eb);
  if (r < 0)
    return reject(b, FZ_EPARAMS, "\"eb\" must be a number");
  /* A fill value (netCDF's _FillValue): any finite number; the engine
   * checks that it suits the dtype. */
  r = fzp_get_f64(p, "fill_value", &job->params.fill_value);
  if (r < 0 || (r == 1 && !isfinite(job->params.fill_value)))
    return reject(b, FZ_EPARAMS, "\"fill_value\" must be a finite number");
  job->params.has_fill = r == 1;
  r = fzp_get_str(p, "mode", &s, &len);
  if (r < 0)
    return reject(b, FZ_EPARAMS, "\"mode\" must be a string");
  if (r == 1 && (!copy_str(text, sizeof(text), s, len) ||
                 fz_eb_mode_parse(text, &job->params.eb_mode) < 0))
    return reject(b, FZ_EPARAMS, "\"mode\" must be \"abs\", \"rel\" or \"pwrel\"");
  if (fzp_get_bool(p, "verify", &job->verify) < 0)
    return reject(b, FZ_EPARAMS, "\"verify\" must be a boolean");

  int err = parse_input(srv, c, p, job, want, b);
  if (err < 0)
    return err;
  if (job->in_len != want)
    return reject(b, FZ_ESIZE, "input is %zu bytes but %s with this shape needs %llu",
                  job->in_len, fz_dtype_name(job->params.dtype),
                  (unsigned long long)want);
  if ((err = parse_output(srv, c, p, job, b)) < 0)
    return err;
  return parse_events(srv, c, p, job, b);
}

static int parse_decompress(fzd_server *srv, fzd_conn *c, const msgpack_object *p,
                            fzd_job *job, bad *b) {
  int err = parse_input(srv, c, p, job, 0, b);
  if (err < 0 || (err = parse_output(srv, c, p, job, b)) < 0)
    return err;
  return parse_events(srv, c, p, job, b);
}

/* The bytes a job's reply may take in the connection's output: the inline
 * result (compress: at most about the input; decompress: the size the
 * archive's header declares, or max_inline_bytes when the header is in a
 * descriptor), capped at max_inline_bytes, plus the reply's own fields. */
static uint64_t reply_estimate(const fzd_server *srv, const fzd_job *job) {
  const uint64_t fields = 1024;
  if (job->out_fd >= 0 || job->out_ipc)
    return fields;
  uint64_t est = srv->cfg.max_inline_bytes;
  const void *arc = job->in_data ? job->in_data : job->in_ptr;
  fz_archive_info info;
  if (job->kind == FZD_JOB_COMPRESS)
    est = job->in_len + job->in_len / 8 + 4096;
  else if (arc != NULL && fz_archive_inspect(arc, job->in_len, &info) == 0)
    est = info.raw_bytes;
  if (est > srv->cfg.max_inline_bytes)
    est = srv->cfg.max_inline_bytes;
  return est + fields;
}

static void submit_job(fzd_server *srv, fzd_conn *c, const fzp_message *msg,
                       enum fzd_job_kind kind) {
  const msgpack_object *p = &msg->params;
  const char *method = kind == FZD_JOB_COMPRESS ? "compress" : "decompress";
  uint64_t nfds = 0;
  bad b = {0, ""};
  if (unknown_key(p, kind == FZD_JOB_COMPRESS ? compress_keys : decompress_keys, b.text,
                  sizeof b.text) < 0) {
    /* Descriptors may have come with it: they cannot be told from the next
     * message's, so the connection ends, as for a bad nfds. */
    bool fds = fzp_get_u64(p, "nfds", &nfds) != 0 && nfds != 0;
    fzd_conn_reply_error(c, msg->msgid, FZ_EPARAMS, "%s", b.text);
    fzd_conn_log_job_error(c, method, msg->msgid, FZ_EPARAMS, b.text);
    if (fds)
      fzd_conn_close_after_flush(c);
    return;
  }
  if (fzp_get_u64(p, "nfds", &nfds) < 0) {
    /* Descriptors that came with it cannot be told from the next message's. */
    fzd_conn_reply_error(c, msg->msgid, FZ_EPARAMS, "\"nfds\" must be an unsigned integer");
    fzd_conn_close_after_flush(c);
    return;
  }
  if (nfds > 0 && fzd_conn_is_tcp(c)) {
    fzd_conn_reply_error(c, msg->msgid, FZ_ETRANSPORT,
                         "descriptors cannot travel over TCP; send \"data\" inline");
    return;
  }
  if (nfds > FZD_MAX_FDS_PER_MESSAGE) {
    fzd_conn_reply_error(c, msg->msgid, FZ_EPROTO,
                         "nfds %llu exceeds %d per message", (unsigned long long)nfds,
                         FZD_MAX_FDS_PER_MESSAGE);
    fzd_conn_close_after_flush(c);
    return;
  }
  fzd_job *job = calloc(1, sizeof(*job));
  if (job == NULL) {
    fzd_conn_reply_error(c, msg->msgid, FZ_ENOMEM, "no memory for a job");
    return;
  }
  job->kind = kind;
  job->msgid = msg->msgid;
  job->in_fd = job->out_fd = -1;
  job->max_inline = srv->cfg.max_inline_bytes;
  job->max_output = srv->cfg.max_job_bytes;
  /* The descriptors belong to this message whatever happens next: taking
   * them first keeps the queue in step with the stream. */
  if (fzd_conn_take_fds(c, (unsigned)nfds, job->fds) < 0) {
    fzd_conn_reply_error(c, msg->msgid, FZ_EPROTO,
                         "the message declares %llu descriptors but fewer arrived with it",
                         (unsigned long long)nfds);
    fzd_conn_close_after_flush(c);
    free(job);
    return;
  }
  job->nfds = (unsigned)nfds;
  for (unsigned i = 0; i < job->nfds; i++)
    if (job->fds[i] < 0) {
      /* conn.c refused it on arrival: the daemon holds max_fds_total. */
      srv->stats.busy_rejections++;
      reject(&b, FZ_EBUSY, "fzd holds as many descriptors passed by clients as it may "
             "(max_fds_total); this message's were closed; try again later");
      goto refused;
    }
  int err = kind == FZD_JOB_COMPRESS ? parse_compress(srv, c, p, job, &b)
                                     : parse_decompress(srv, c, p, job, &b);
  if (err == 0) {
    job->reply_reserve = reply_estimate(srv, job);
    job->t_read = fzd_conn_read_ns(c);
    /* Its reply would take what the connection owes past its own budget:
     * it waits, and the connection is not read, until the client has read
     * enough (conn.c runs it then through fzd_submit_parsed). */
    if (fzd_conn_park(c, job))
      return;
    fzd_submit_parsed(srv, c, job);
    return;
  }
refused:
  fzd_conn_reply_error(c, msg->msgid, b.code, "%s", b.text);
  fzd_conn_log_job_error(c, method, msg->msgid, b.code, b.text);
  fzd_job_free(job);
}

void fzd_submit_parsed(fzd_server *srv, fzd_conn *c, fzd_job *job) {
  const char *method = job->kind == FZD_JOB_COMPRESS ? "compress" : "decompress";
  bad b = {0, ""};
  if (fzd_conn_reply_room(c, job->reply_reserve) < 0) {
    srv->stats.busy_rejections++;
    reject(&b, FZ_EBUSY, "replies not yet read by their clients fill "
           "max_reply_bytes_total (%llu bytes); try again later",
           (unsigned long long)srv->cfg.max_reply_bytes_total);
  } else {
    /* The worker never dereferences job->conn, and the reply can only be
     * handled by this thread, so the accounting may follow the submit. */
    job->conn = c;
    job->t_queued = uv_hrtime();
    if (fzd_pool_submit(srv->pool, job, srv->cfg.queue_capacity) == 0) {
      fzd_conn_job_accepted(c, job);
      return;
    }
    srv->stats.busy_rejections++;
    reject(&b, FZ_EBUSY, "the job queue is full (%llu waiting); try again later",
           (unsigned long long)srv->cfg.queue_capacity);
  }
  fzd_conn_reply_error(c, job->msgid, b.code, "%s", b.text);
  fzd_conn_log_job_error(c, method, job->msgid, b.code, b.text);
  fzd_job_free(job);
}

static void m_compress(fzd_server *srv, fzd_conn *c, const fzp_message *msg) {
  submit_job(srv, c, msg, FZD_JOB_COMPRESS);
}

static void m_decompress(fzd_server *srv, fzd_conn *c, const fzp_message *msg) {
  submit_job(srv, c, msg, FZD_JOB_DECOMPRESS);
}

/* ---- warm ------------------------------------------------------------------ */

/* One entry of a warm request: the keys of compress that shape a plan,
 * typed as compress types them; the engine's checks follow in
 * fzd_warm_entry_check, as for the "warm" setting. */
static int parse_warm_entry(const msgpack_object *o, fzd_warm_entry *e, bad *b) {
  memset(e, 0, sizeof *e);
  e->eb_mode = FZ_EB_REL;
  if (o->type != MSGPACK_OBJECT_MAP)
    return reject(b, FZ_EPARAMS, "must be a map with \"dtype\", \"shape\" and optionally "
                  "\"pipeline\", \"eb\", \"mode\"");
  if (unknown_key(o, warm_entry_keys, b->text, sizeof b->text) < 0)
    return b->code = FZ_EPARAMS;
  const char *s;
  uint32_t len;
  char text[32];
  int r = fzp_get_str(o, "dtype", &s, &len);
  if (r <= 0)
    return reject(b, FZ_EPARAMS, "\"dtype\" (a string such as \"f32\") is required");
  if (!copy_str(text, sizeof text, s, len) || fz_dtype_parse(text, &e->dtype) < 0)
    return reject(b, FZ_EDTYPE, "\"dtype\": unknown dtype \"%.*s\"",
                  (int)(len > 24 ? 24 : len), s);
  const msgpack_object *shape;
  if (fzp_get_obj(o, "shape", &shape) != 1 || shape->type != MSGPACK_OBJECT_ARRAY)
    return reject(b, FZ_EPARAMS, "\"shape\" (an array of 1 to %d extents) is required",
                  FZ_MAX_DIMS);
  if (shape->via.array.size < 1 || shape->via.array.size > FZ_MAX_DIMS)
    return reject(b, FZ_ESHAPE, "\"shape\" has %u dimensions; 1 to %d are supported",
                  shape->via.array.size, FZ_MAX_DIMS);
  e->ndims = shape->via.array.size;
  for (uint32_t i = 0; i < e->ndims; i++) {
    const msgpack_object *d = &shape->via.array.ptr[i];
    if (d->type != MSGPACK_OBJECT_POSITIVE_INTEGER || d->via.u64 == 0)
      return reject(b, d->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? FZ_ESHAPE : FZ_EPARAMS,
                    "\"shape\"[%u] must be a positive integer", i);
    e->dims[i] = d->via.u64;
  }
  r = fzp_get_str(o, "pipeline", &s, &len);
  if (r < 0 || (r == 1 && !copy_str(e->pipeline, sizeof e->pipeline, s, len)))
    return reject(b, FZ_EPARAMS, "\"pipeline\" must be a string of at most %zu bytes",
                  sizeof e->pipeline - 1);
  if (fzp_get_f64(o, "eb", &e->eb) < 0)
    return reject(b, FZ_EPARAMS, "\"eb\" must be a number");
  r = fzp_get_str(o, "mode", &s, &len);
  if (r < 0 || (r == 1 && (!copy_str(text, sizeof text, s, len) ||
                           fz_eb_mode_parse(text, &e->eb_mode) < 0)))
    return reject(b, FZ_EPARAMS, "\"mode\" must be \"abs\", \"rel\" or \"pwrel\"");
  return 0;
}

/* {"plans": [entry, ...]}: each entry is prepared and checked on a worker as
 * at start (one job for the request, queued like a compression, so the loop
 * never waits for it).  An entry that fails, here or on the worker, gets an
 * error in its place of the reply and the others still run. */
static void m_warm(fzd_server *srv, fzd_conn *c, const fzp_message *msg) {
  const msgpack_object *p = &msg->params, *list = NULL;
  bad b = {0, ""};
  if (unknown_key(p, warm_keys, b.text, sizeof b.text) < 0) {
    fzd_conn_reply_error(c, msg->msgid, FZ_EPARAMS, "warm: %s", b.text);
    return;
  }
  if (fzp_get_obj(p, "plans", &list) != 1 || list->type != MSGPACK_OBJECT_ARRAY ||
      list->via.array.size == 0 || list->via.array.size > FZD_WARM_REQUEST_MAX) {
    fzd_conn_reply_error(c, msg->msgid, FZ_EPARAMS,
                         "warm needs \"plans\", an array of 1 to %d entries (%u given)",
                         FZD_WARM_REQUEST_MAX,
                         list != NULL && list->type == MSGPACK_OBJECT_ARRAY
                             ? list->via.array.size : 0);
    return;
  }
  fzd_job *job = calloc(1, sizeof *job);
  fzd_warm *w = job != NULL ? calloc(1, sizeof *w) : NULL;
  if (w == NULL) {
    free(job);
    fzd_conn_reply_error(c, msg->msgid, FZ_ENOMEM, "no memory for a warm job");
    return;
  }
  job->kind = FZD_JOB_WARM;
  job->msgid = msg->msgid;
  job->in_fd = job->out_fd = -1;
  job->warm = w;
  w->mem = &srv->mem;
  w->n = list->via.array.size;
  for (unsigned i = 0; i < w->n; i++) {
    fzd_warm_result *r = &w->r[i];
    bad eb = {0, ""};
    char sub[400];
    if (parse_warm_entry(&list->via.array.ptr[i], &w->e[i], &eb) < 0) {
      r->err = eb.code;
      snprintf(r->why, sizeof r->why, "plans[%u]: %.480s", i, eb.text);
    } else if ((r->err = fzd_warm_entry_check(&w->e[i], srv->cfg.max_job_bytes, sub,
                                              sizeof sub)) < 0) {
      snprintf(r->why, sizeof r->why, "plans[%u]: %.400s", i, sub);
    } else if (fzd_warm_need(&w->e[i]) > srv->mem.limit) {
      /* Refused at once: it could never fit, and waiting would say so
       * only after the entries before it. */
      r->err = FZ_ENOMEM;
      snprintf(r->why, sizeof r->why, "plans[%u]: preparing it needs about %llu bytes of "
               "memory, more than memory_limit (%llu)", i,
               (unsigned long long)fzd_warm_need(&w->e[i]),
               (unsigned long long)srv->mem.limit);
    }
    r->skip = r->err < 0;
  }
  /* Each entry's reply is a small map: the chain and a message at most. */
  job->reply_reserve = 1024 + (uint64_t)w->n * 1024;
  if (fzd_conn_reply_room(c, job->reply_reserve) < 0) {
    srv->stats.busy_rejections++;
    reject(&b, FZ_EBUSY, "replies not yet read by their clients fill max_reply_bytes_total "
           "(%llu bytes); try again later", (unsigned long long)srv->cfg.max_reply_bytes_total);
  } else {
    job->conn = c;
    if (fzd_pool_submit(srv->pool, job, srv->cfg.queue_capacity) == 0) {
      fzd_conn_job_accepted(c, job);
      return;
    }
    srv->stats.busy_rejections++;
    reject(&b, FZ_EBUSY, "the job queue is full (%llu waiting); try again later",
           (unsigned long long)srv->cfg.queue_capacity);
  }
  fzd_conn_reply_error(c, msg->msgid, b.code, "%s", b.text);
  free(job->warm);
  job->warm = NULL;
  fzd_job_free(job);
}

static void warm_reply(fzd_conn *c, const fzd_job *job) {
  const fzd_warm *w = job->warm;
  msgpack_packer *pk = fzd_conn_packer(c);
  fzp_pack_result_begin(pk, job->msgid, 1);
  fzp_pack_key(pk, "plans");
  msgpack_pack_array(pk, w->n);
  for (unsigned i = 0; i < w->n; i++) {
    const fzd_warm_result *r = &w->r[i];
    if (r->err < 0) {
      msgpack_pack_map(pk, 3);
      fzp_pack_key(pk, "index");
      msgpack_pack_uint32(pk, i);
      fzp_pack_key(pk, "chain");
      fzp_pack_key(pk, r->chain);
      fzp_pack_key(pk, "error");
      msgpack_pack_map(pk, 3);
      fzp_pack_key(pk, "code");
      msgpack_pack_int(pk, r->err);
      fzp_pack_key(pk, "name");
      fzp_pack_key(pk, fz_err_name(r->err));
      fzp_pack_key(pk, "message");
      fzp_pack_key(pk, r->why);
      continue;
    }
    msgpack_pack_map(pk, 5);
    fzp_pack_key(pk, "index");
    msgpack_pack_uint32(pk, i);
    fzp_pack_key(pk, "chain");
    fzp_pack_key(pk, r->chain);
    fzp_pack_key(pk, "cached");
    if (r->cached)
      msgpack_pack_true(pk);
    else
      msgpack_pack_false(pk);
    fzp_pack_key(pk, "ms");
    msgpack_pack_double(pk, (double)r->us / 1000.0);
    fzp_pack_key(pk, "identical");
    msgpack_pack_true(pk);
  }
}

/* ---- release --------------------------------------------------------------- */

/* {"buffer_ids": [id, ...]} or {"all": true}: closes this connection's
 * imports of those allocations (every import and event with all), the ones
 * a running job uses when it ends.  Answers {"released": n}.  A connection
 * that never imported anything (or a daemon on the CPU backend) has
 * nothing to release, which is not an error. */
static void m_release(fzd_server *srv, fzd_conn *c, const fzp_message *msg) {
  const msgpack_object *p = &msg->params;
  bad b = {0, ""};
  if (unknown_key(p, release_keys, b.text, sizeof b.text) < 0) {
    fzd_conn_reply_error(c, msg->msgid, FZ_EPARAMS, "release: %s", b.text);
    return;
  }
  bool all = false;
  const msgpack_object *ids = NULL;
  int has_all = fzp_get_bool(p, "all", &all);
  int has_ids = fzp_get_obj(p, "buffer_ids", &ids);
  if (has_all < 0 || (has_all == 1 && !all)) {
    fzd_conn_reply_error(c, msg->msgid, FZ_EPARAMS, "release: \"all\" must be true");
    return;
  }
  if (has_ids == 1 && ids->type != MSGPACK_OBJECT_ARRAY) {
    fzd_conn_reply_error(c, msg->msgid, FZ_EPARAMS,
                         "release: \"buffer_ids\" must be an array of unsigned integers");
    return;
  }
  if ((has_all == 1) == (has_ids == 1)) {
    fzd_conn_reply_error(c, msg->msgid, FZ_EPARAMS,
                         "release needs exactly one of \"buffer_ids\" (an array of the "
                         "allocations' buffer ids) and \"all\": true");
    return;
  }
  uint32_t n = has_ids == 1 ? ids->via.array.size : 0;
  uint64_t *list = NULL;
  if (n > 0 && (list = malloc((size_t)n * sizeof *list)) == NULL) {
    fzd_conn_reply_error(c, msg->msgid, FZ_ENOMEM, "release: no memory for %u ids", n);
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    const msgpack_object *o = &ids->via.array.ptr[i];
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
      free(list);
      fzd_conn_reply_error(c, msg->msgid, FZ_EPARAMS,
                           "release: buffer_ids[%u] must be an unsigned integer", i);
      return;
    }
    list[i] = o->via.u64;
  }
  unsigned released = 0;
  if (srv->gpu != NULL && !fzd_conn_is_tcp(c))
    released = fzd_ipc_cache_release(fzd_conn_ipc(c), list, n, all);
  free(list);
  msgpack_packer *pk = fzd_conn_packer(c);
  fzp_pack_result_begin(pk, msg->msgid, 1);
  fzp_pack_key(pk, "released");
  msgpack_pack_uint64(pk, released);
}

void fzd_job_reply(fzd_conn *c, const fzd_job *job) {
  if (job->kind == FZD_JOB_WARM && job->err == 0) {
    warm_reply(c, job);
    return;
  }
  if (job->kind == FZD_JOB_FRAMES && job->err == 0) {
    fzd_frames_reply(c, job);
    return;
  }
  if (job->err < 0) {
    fzd_conn_reply_error(c, job->msgid, job->err, "%s",
                         job->why[0] ? job->why : fz_strerror(job->err));
    return;
  }
  msgpack_packer *pk = fzd_conn_packer(c);
  bool inline_out = job->out_fd < 0 && !job->out_ipc;
  if (job->kind == FZD_JOB_COMPRESS) {
    fzp_pack_result_begin(pk, job->msgid,
                          6 + (job->has_max_error ? 2 : 0) + (inline_out ? 1 : 0));
    fzp_pack_key(pk, "bytes_in");
    msgpack_pack_uint64(pk, job->in_len);
    fzp_pack_key(pk, "bytes_out");
    msgpack_pack_uint64(pk, job->out_len);
    fzp_pack_key(pk, "ratio");
    msgpack_pack_double(pk, job->out_len ? (double)job->in_len / (double)job->out_len : 0.0);
    fzp_pack_key(pk, "eb_abs");
    msgpack_pack_double(pk, job->eb_abs);
    fzp_pack_key(pk, "chain");
    fzp_pack_key(pk, job->chain);
    fzp_pack_key(pk, "time_us");
    msgpack_pack_uint64(pk, job->time_us);
    if (job->has_max_error) {
      fzp_pack_key(pk, "max_error");
      msgpack_pack_double(pk, job->max_error);
      fzp_pack_key(pk, "max_rel_error");
      msgpack_pack_double(pk, job->max_rel_error);
    }
    if (inline_out) {
      fzp_pack_key(pk, "archive");
      msgpack_pack_bin(pk, job->out_len);
      msgpack_pack_bin_body(pk, job->out_data, job->out_len);
    }
    return;
  }
  fzp_pack_result_begin(pk, job->msgid, 5 + (inline_out ? 1 : 0));
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, fz_dtype_name(job->info.dtype) ? fz_dtype_name(job->info.dtype) : "?");
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, job->info.ndims);
  for (unsigned i = 0; i < job->info.ndims; i++)
    msgpack_pack_uint64(pk, job->info.dims[i]);
  fzp_pack_key(pk, "bytes_in");
  msgpack_pack_uint64(pk, job->in_len);
  fzp_pack_key(pk, "bytes_out");
  msgpack_pack_uint64(pk, job->out_len);
  fzp_pack_key(pk, "time_us");
  msgpack_pack_uint64(pk, job->time_us);
  if (inline_out) {
    fzp_pack_key(pk, "data");
    msgpack_pack_bin(pk, job->out_len);
    msgpack_pack_bin_body(pk, job->out_data, job->out_len);
  }
}

/* ---- dispatch -------------------------------------------------------------- */

static const struct {
  const char *name;
  method_fn fn;
} methods[] = {
    {"hello", m_hello},       {"ping", m_ping},
    {"status", m_status},     {"stats", m_stats},
    {"presets", m_presets},   {"compress", m_compress},
    {"decompress", m_decompress}, {"release", m_release},
    {"warm", m_warm},         {"frames", fzd_frames_method},
    {"frames_setup", fzd_frames_setup_method},
};

/* The method name for the log: short, printable. */
static void printable(char *dst, size_t cap, const char *s, uint32_t len) {
  size_t n = len < cap - 1 ? len : cap - 1;
  for (size_t i = 0; i < n; i++)
    dst[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
  dst[n] = '\0';
}

void fzd_dispatch(fzd_server *srv, fzd_conn *c, const fzp_message *msg) {
  if (!fzd_conn_greeted(c) && !fzp_method_is(msg, "hello")) {
    fzd_conn_reply_error(c, msg->msgid, FZ_EHANDSHAKE,
                         "the first request must be \"hello\"");
    fzd_conn_close_after_flush(c);
    return;
  }
  for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
    if (fzp_method_is(msg, methods[i].name)) {
      methods[i].fn(srv, c, msg);
      return;
    }
  char name[48];
  printable(name, sizeof(name), msg->method, msg->method_len);
  fzd_conn_reply_error(c, msg->msgid, FZ_EMETHOD, "unknown method \"%s\"", name);
}
