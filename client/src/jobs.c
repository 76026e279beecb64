/*
 * jobs.c - compress and decompress jobs, synchronous and asynchronous.
 *
 * A job becomes one request.  Its params map is packed into a small buffer
 * and, for inline input, the map's last value is the "data" bin whose body is
 * sent straight from the caller's buffer (a second iovec): a 64 MiB array is
 * never copied on the way out.  Descriptors go with the first bytes of the
 * request (SCM_RIGHTS) and the request says how many ("nfds").  Device
 * memory travels as a legacy IPC handle's bytes ("in_ipc", "out_ipc"), a
 * VMM export descriptor with its size ("in_vmm_fd", "in_vmm_size"), or a
 * pool's export descriptor with the pointer's export data ("in_pool_fd",
 * "in_pool_ptr"), each with the allocation's buffer id when known, the IPC
 * events of the job ("wait_event", "done_event") and the GPU's UUID
 * ("device").
 *
 * Every job stays in the handle's table from submission until it is handed
 * back; answers are matched by msgid, so they may arrive in any order.
 * Over the Unix socket, an inline input of 256 KiB or more is copied into
 * one of the handle's sealed memfds and passed as a descriptor instead
 * (internal.h): one copy instead of two through the kernel and one more in
 * the daemon.
 *
 * A result that would be over the server's max_inline cannot come back in
 * a message.  On the Unix socket the library then passes a memfd of its own
 * as the job's output and reads the result back from it when the answer
 * comes, so the caller still gets an inline result (fz_result.data).  It
 * knows beforehand: a compression's archive is at most the engine's bound
 * for the dtype and shape, a decompression's array is as large as the
 * archive's header says; for an archive given as a descriptor it cannot
 * tell, and always uses the memfd.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fz.h"
#include "internal.h"

void fz_job_init(fz_job *j) {
  memset(j, 0, sizeof *j);
  j->in_fd = -1;
  j->out_fd = -1;
  j->in_vmm_fd = j->out_vmm_fd = -1;
  j->in_pool_fd = j->out_pool_fd = -1;
}

/* Whether a side of the job is device memory, of any kind. */
static bool dev_in(const fz_job *j) {
  return j->in_ipc || j->in_vmm_fd >= 0 || j->in_pool_fd >= 0;
}

static bool dev_out(const fz_job *j) {
  return j->out_ipc || j->out_vmm_fd >= 0 || j->out_pool_fd >= 0;
}

/* The descriptor a side passes with the request, or -1. */
static int in_desc(const fz_job *j) {
  return j->in_vmm_fd >= 0 ? j->in_vmm_fd : j->in_pool_fd >= 0 ? j->in_pool_fd
                                                                 : j->in_ipc ? -1 : j->in_fd;
}

static int out_desc(const fz_job *j) {
  return j->out_vmm_fd >= 0 ? j->out_vmm_fd
         : j->out_pool_fd >= 0 ? j->out_pool_fd
         : j->out_ipc          ? -1
                               : j->out_fd;
}

int fzc_error_from(const fzp_message *msg, fz_result *res) {
  if (msg->error.type == MSGPACK_OBJECT_NIL)
    return 0;
  int64_t code = FZ_EPROTO;
  if (msg->error.type != MSGPACK_OBJECT_MAP ||
      fzp_get_i64(&msg->error, "code", &code) != 1 || code >= 0 || code < -100000)
    code = FZ_EPROTO;
  res->status = (int)code;
  if (fzc_get_strbuf(&msg->error, "message", res->message, sizeof res->message) != 1)
    snprintf(res->message, sizeof res->message, "%s", fz_strerror((int)code));
  return (int)code;
}

static fzc_job *find_job(fz_client *c, uint32_t msgid) {
  for (size_t i = 0; i < c->njobs; i++)
    if (c->jobs[i].msgid == msgid && !c->jobs[i].done)
      return &c->jobs[i];
  return NULL;
}

static void fill_shape(const msgpack_object *map, fz_result *r) {
  const msgpack_object *shape;
  if (fzp_get_obj(map, "shape", &shape) != 1 || shape->type != MSGPACK_OBJECT_ARRAY)
    return;
  uint32_t n = shape->via.array.size;
  if (n > FZ_CLIENT_MAX_DIMS)
    return;
  for (uint32_t i = 0; i < n; i++) {
    if (shape->via.array.ptr[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
      return;
    r->shape[i] = shape->via.array.ptr[i].via.u64;
  }
  r->ndims = n;
}

/* Moves an inline payload into the job's output. */
static void take_payload(fzc_job *j, const void *p, uint32_t len) {
  fz_result *r = &j->res;
  if (j->out) {
    if (len > j->out_cap) {
      r->status = FZ_ENOSPC;
      snprintf(r->message, sizeof r->message,
               "the output of %u bytes does not fit the buffer of %zu bytes",
               len, j->out_cap);
      return;
    }
    memcpy(j->out, p, len);
    r->data = j->out;
  } else {
    r->data = malloc(len ? len : 1);
    if (!r->data) {
      r->status = FZ_ENOMEM;
      snprintf(r->message, sizeof r->message, "out of memory for %u bytes", len);
      return;
    }
    memcpy(r->data, p, len);
  }
  r->data_len = len;
}

/* Reads a result the daemon wrote into the job's memfd into the caller's
 * buffer or a new one. */
static void take_memfd(fzc_job *j, int fd) {
  fz_result *r = &j->res;
  uint64_t len = r->bytes_out;
  if (j->out && len > j->out_cap) {
    r->status = FZ_ENOSPC;
    snprintf(r->message, sizeof r->message,
             "the output of %llu bytes does not fit the buffer of %zu bytes",
             (unsigned long long)len, j->out_cap);
    return;
  }
  char *dst = j->out ? j->out : (len < SIZE_MAX ? malloc(len ? (size_t)len : 1) : NULL);
  if (!dst) {
    r->status = FZ_ENOMEM;
    snprintf(r->message, sizeof r->message, "out of memory for %llu bytes",
             (unsigned long long)len);
    return;
  }
  for (uint64_t off = 0; off < len;) {
    ssize_t n = pread(fd, dst + off, (size_t)(len - off), (off_t)off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      r->status = n < 0 ? FZ_EIO : FZ_EPROTO;
      snprintf(r->message, sizeof r->message,
               "reading the result back from the library's memfd: %s",
               n < 0 ? strerror(errno) : "shorter than the server said");
      if (!j->out)
        free(dst);
      return;
    }
    off += (uint64_t)n;
  }
  r->data = dst;
  r->data_len = (size_t)len;
}

int fzc_dispatch(fz_client *c, const fzp_message *msg) {
  if (msg->type != FZP_RESPONSE)
    return 0; /* notifications carry nothing a job waits for */
  fzc_job *j = find_job(c, msg->msgid);
  if (!j)
    return 0;
  fz_result *r = &j->res;
  int memfd = j->out_memfd;
  j->out_memfd = -1; /* ours to close once read */
  fzc_job_finish(c, j);
  if (fzc_error_from(msg, r) < 0) {
    if (memfd >= 0)
      close(memfd);
    return 1;
  }
  const msgpack_object *m = &msg->result;
  if (m->type != MSGPACK_OBJECT_MAP) {
    r->status = FZ_EPROTO;
    snprintf(r->message, sizeof r->message, "the job's answer is not a map");
    if (memfd >= 0)
      close(memfd);
    return 1;
  }
  fzp_get_u64(m, "bytes_in", &r->bytes_in);
  fzp_get_u64(m, "bytes_out", &r->bytes_out);
  fzp_get_u64(m, "time_us", &r->time_us);
  fzp_get_f64(m, "ratio", &r->ratio);
  fzp_get_f64(m, "eb_abs", &r->eb_abs);
  r->has_max_error = fzp_get_f64(m, "max_error", &r->max_error) == 1;
  r->has_max_rel_error = fzp_get_f64(m, "max_rel_error", &r->max_rel_error) == 1;
  fzc_get_strbuf(m, "chain", r->chain, sizeof r->chain);
  fzc_get_strbuf(m, "dtype", r->dtype, sizeof r->dtype);
  fill_shape(m, r);
  const void *p;
  uint32_t len;
  if (fzp_get_bin(m, j->op == FZ_OP_COMPRESS ? "archive" : "data", &p, &len) == 1) {
    take_payload(j, p, len);
  } else if (memfd >= 0) {
    take_memfd(j, memfd);
  } else if (j->out_shared) {
    /* The daemon wrote the result into the shared buffer at j->out. */
    if (r->bytes_out > j->out_cap) {
      r->status = FZ_EPROTO;
      snprintf(r->message, sizeof r->message,
               "the server reports %llu bytes written into a buffer of %zu",
               (unsigned long long)r->bytes_out, j->out_cap);
      return 1;
    }
    r->data = j->out;
    r->data_len = (size_t)r->bytes_out;
  }
  return 1;
}

/* ---- encoding ------------------------------------------------------------- */

static void pack_str(msgpack_packer *pk, const char *key, const char *val) {
  fzp_pack_key(pk, key);
  msgpack_pack_str_with_body(pk, val, strlen(val));
}

static void pack_u64(msgpack_packer *pk, const char *key, uint64_t v) {
  fzp_pack_key(pk, key);
  msgpack_pack_uint64(pk, v);
}

/* Checks a job against the transport and the server's limits before anything
 * is sent, so a refusal is explained in the caller's terms. */
static int check_job(fz_client *c, fz_op op, const fz_job *j) {
  if (op != FZ_OP_COMPRESS && op != FZ_OP_DECOMPRESS)
    return fzc_fail(c, FZ_EINVAL, "unknown operation %d", (int)op);
  bool inline_in = j->in_fd < 0 && !dev_in(j);
  int kinds_in = (j->in_ipc != NULL) + (j->in_vmm_fd >= 0) + (j->in_pool_fd >= 0);
  int kinds_out = (j->out_ipc != NULL) + (j->out_vmm_fd >= 0) + (j->out_pool_fd >= 0);
  if (kinds_in > 1 || (kinds_in == 1 && (j->in_fd >= 0 || j->in)))
    return fzc_fail(c, FZ_EINVAL,
                    "give one input: in_ipc, in_vmm_fd, in_pool_fd, in_fd or in");
  if (kinds_out > 1 || (kinds_out == 1 && j->out_fd >= 0))
    return fzc_fail(c, FZ_EINVAL,
                    "give one output: out_ipc, out_vmm_fd, out_pool_fd or out_fd");
  if ((j->in_vmm_fd >= 0 && j->in_vmm_size == 0) ||
      (j->out_vmm_fd >= 0 && j->out_vmm_size == 0))
    return fzc_fail(c, FZ_EINVAL, "a VMM buffer needs its size (in_vmm_size, out_vmm_size): "
                    "the size given to cuMemCreate");
  if ((j->in_pool_fd >= 0 && !j->in_pool_ptr) || (j->out_pool_fd >= 0 && !j->out_pool_ptr))
    return fzc_fail(c, FZ_EINVAL, "a pool buffer needs the pointer's export data "
                    "(in_pool_ptr, out_pool_ptr)");
  if (j->out_fd >= 0) {
    /* With O_APPEND every write lands at the end whatever the offset: the
     * result would follow the file's old contents instead of replacing
     * them, and out_offset would mean nothing. */
    int fl = fcntl(j->out_fd, F_GETFL);
    if (fl < 0)
      return fzc_fail(c, FZ_EINVAL, "out_fd %d is not an open descriptor", j->out_fd);
    if (fl & O_APPEND)
      return fzc_fail(c, FZ_EINVAL,
                      "out_fd %d is open with O_APPEND: the daemon writes at out_offset, "
                      "so open the output without O_APPEND", j->out_fd);
  }
  if (dev_out(j) && j->out_length == 0)
    return fzc_fail(c, FZ_EINVAL, "a device output needs out_length, the bytes the daemon "
                    "may write");
  if (dev_in(j) && op == FZ_OP_DECOMPRESS && j->in_length == 0)
    return fzc_fail(c, FZ_EINVAL, "decompress from device memory needs in_length, the "
                    "archive's size");
  bool device_keys = dev_in(j) || dev_out(j) || j->wait_event || j->done_event;
  if (device_keys && (!j->device || !*j->device))
    return fzc_fail(c, FZ_EINVAL, "CUDA IPC buffers need device, the GPU's UUID");
  if (c->transport == FZ_TRANSPORT_TCP && device_keys)
    return fzc_fail(c, FZ_ETRANSPORT,
                    "CUDA IPC buffers cannot be used over TCP; send the data inline");
  if (inline_in && !j->in && j->in_len > 0)
    return fzc_fail(c, FZ_EINVAL, "no input: set in/in_len or in_fd");
  if (inline_in && j->in_len > UINT32_MAX)
    return fzc_fail(c, FZ_EMSGSIZE, "inline input of %zu bytes is over 4 GiB", j->in_len);
  if (c->transport == FZ_TRANSPORT_TCP && (j->in_fd >= 0 || j->out_fd >= 0))
    return fzc_fail(c, FZ_ETRANSPORT,
                    "file descriptors cannot be passed over TCP; send the data inline");
  if (inline_in && c->info.max_inline && j->in_len > c->info.max_inline)
    return fzc_fail(c, FZ_EMSGSIZE,
                    "inline input of %zu bytes exceeds the server's max_inline of %llu bytes%s",
                    j->in_len, (unsigned long long)c->info.max_inline,
                    c->transport == FZ_TRANSPORT_UNIX ? " (pass a file descriptor instead)" : "");
  if (op == FZ_OP_COMPRESS) {
    if (!j->dtype || !*j->dtype)
      return fzc_fail(c, FZ_EINVAL, "compress needs a dtype");
    if (j->ndims < 1 || j->ndims > FZ_CLIENT_MAX_DIMS)
      return fzc_fail(c, FZ_EINVAL, "compress needs 1 to %d dimensions, not %u",
                      FZ_CLIENT_MAX_DIMS, j->ndims);
  }
  return 0;
}

/* Packs the request of job j; the body of an inline input is left for the
 * caller to send after sb (it is the last value of the map). */
static void pack_job(msgpack_packer *pk, uint32_t msgid, fz_op op,
                     const fz_job *j, int nfds) {
  bool inline_in = j->in_fd < 0 && !dev_in(j);
  uint32_t n = 0;
  if (op == FZ_OP_COMPRESS)
    n += 5 + (j->pipeline ? 1 : 0) + (j->verify ? 1 : 0) + (j->has_fill ? 1 : 0); /* dtype shape eb mode nfds */
  else
    n += 1; /* nfds */
  n += inline_in ? 1 : 1 + (j->in_offset ? 1 : 0) + (j->in_length ? 1 : 0);
  n += j->out_fd >= 0 || dev_out(j) ? 1 + (j->out_offset ? 1 : 0) : 0;
  n += dev_out(j) || (j->out_fd >= 0 && j->out_length) ? 1 : 0; /* out_length */
  /* second keys of the VMM and pool kinds, buffer ids, events */
  n += (j->in_vmm_fd >= 0 || j->in_pool_fd >= 0) + (j->out_vmm_fd >= 0 || j->out_pool_fd >= 0);
  n += (dev_in(j) && j->in_buffer_id) + (dev_out(j) && j->out_buffer_id);
  n += (j->wait_event != NULL) + (j->done_event != NULL);
  bool device_keys = dev_in(j) || dev_out(j) || j->wait_event || j->done_event;
  n += device_keys ? 1 : 0; /* device */

  fzp_pack_request_begin(pk, msgid, op == FZ_OP_COMPRESS ? "compress" : "decompress", n);
  int fd_index = 0;
  if (op == FZ_OP_COMPRESS) {
    pack_str(pk, "dtype", j->dtype);
    fzp_pack_key(pk, "shape");
    msgpack_pack_array(pk, j->ndims);
    for (unsigned i = 0; i < j->ndims; i++)
      msgpack_pack_uint64(pk, j->shape[i]);
    if (j->pipeline)
      pack_str(pk, "pipeline", j->pipeline);
    fzp_pack_key(pk, "eb");
    msgpack_pack_double(pk, j->eb);
    pack_str(pk, "mode", j->mode ? j->mode : "rel");
    if (j->has_fill) {
      fzp_pack_key(pk, "fill_value");
      msgpack_pack_double(pk, j->fill_value);
    }
    if (j->verify) {
      fzp_pack_key(pk, "verify");
      msgpack_pack_true(pk);
    }
  }
  pack_u64(pk, "nfds", (uint64_t)nfds);
  if (device_keys)
    pack_str(pk, "device", j->device);
  if (j->wait_event) {
    fzp_pack_key(pk, "wait_event");
    msgpack_pack_bin_with_body(pk, j->wait_event, FZ_CLIENT_IPC_HANDLE_BYTES);
  }
  if (j->done_event) {
    fzp_pack_key(pk, "done_event");
    msgpack_pack_bin_with_body(pk, j->done_event, FZ_CLIENT_IPC_HANDLE_BYTES);
  }
  if (dev_out(j)) {
    if (j->out_ipc) {
      fzp_pack_key(pk, "out_ipc");
      msgpack_pack_bin_with_body(pk, j->out_ipc, FZ_CLIENT_IPC_HANDLE_BYTES);
    } else if (j->out_vmm_fd >= 0) {
      pack_u64(pk, "out_vmm_fd", (uint64_t)fd_index++);
      pack_u64(pk, "out_vmm_size", j->out_vmm_size);
    } else {
      pack_u64(pk, "out_pool_fd", (uint64_t)fd_index++);
      fzp_pack_key(pk, "out_pool_ptr");
      msgpack_pack_bin_with_body(pk, j->out_pool_ptr, FZ_CLIENT_IPC_HANDLE_BYTES);
    }
    if (j->out_buffer_id)
      pack_u64(pk, "out_buffer_id", j->out_buffer_id);
    pack_u64(pk, "out_length", j->out_length);
    if (j->out_offset)
      pack_u64(pk, "out_offset", j->out_offset);
  } else if (j->out_fd >= 0) {
    pack_u64(pk, "out_fd", (uint64_t)fd_index++);
    if (j->out_offset)
      pack_u64(pk, "out_offset", j->out_offset);
    if (j->out_length)
      pack_u64(pk, "out_length", j->out_length);
  }
  if (!inline_in) {
    if (j->in_ipc) {
      fzp_pack_key(pk, "in_ipc");
      msgpack_pack_bin_with_body(pk, j->in_ipc, FZ_CLIENT_IPC_HANDLE_BYTES);
    } else if (j->in_vmm_fd >= 0) {
      pack_u64(pk, "in_vmm_fd", (uint64_t)fd_index++);
      pack_u64(pk, "in_vmm_size", j->in_vmm_size);
    } else if (j->in_pool_fd >= 0) {
      pack_u64(pk, "in_pool_fd", (uint64_t)fd_index++);
      fzp_pack_key(pk, "in_pool_ptr");
      msgpack_pack_bin_with_body(pk, j->in_pool_ptr, FZ_CLIENT_IPC_HANDLE_BYTES);
    } else {
      pack_u64(pk, "in_fd", (uint64_t)fd_index++);
    }
    if (dev_in(j) && j->in_buffer_id)
      pack_u64(pk, "in_buffer_id", j->in_buffer_id);
    if (j->in_offset)
      pack_u64(pk, "in_offset", j->in_offset);
    if (j->in_length)
      pack_u64(pk, "in_length", j->in_length);
  } else {
    fzp_pack_key(pk, "data");
    msgpack_pack_bin(pk, j->in_len);
  }
}

void fzc_job_finish(fz_client *c, fzc_job *j) {
  j->done = true;
  if (j->out_memfd >= 0)
    close(j->out_memfd);
  j->out_memfd = -1;
  if (j->shm >= 0)
    c->shm[j->shm].busy = false;
  j->shm = -1;
}

/* Copies a large inline input into a free memfd slot; the slot's index, or
 * -1 when none is free or the slot cannot be made (the input then goes
 * inline).  Slots stay mapped here, so the copy is a memcpy into pages that
 * are already faulted in after the first use. */
static int shm_stage(fz_client *c, const void *in, size_t len) {
  int slot = -1;
  for (int i = 0; i < FZC_SHM_SLOTS && slot < 0; i++) /* big enough already */
    if (!c->shm[i].busy && c->shm[i].fd >= 0 && c->shm[i].size >= len)
      slot = i;
  for (int i = 0; i < FZC_SHM_SLOTS && slot < 0; i++) /* else any free one */
    if (!c->shm[i].busy)
      slot = i;
  if (slot < 0)
    return -1;
  fzc_shm *s = &c->shm[slot];
  if (s->fd < 0) {
    s->fd = memfd_create("fzclient-input", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (s->fd < 0)
      return -1;
    s->size = 0;
    s->map = NULL;
    if (fcntl(s->fd, F_ADD_SEALS, F_SEAL_SHRINK) < 0) {
      close(s->fd);
      s->fd = -1;
      return -1;
    }
  }
  if (s->size < len) {
    /* Grown, never shrunk (the seal): the daemon may map the old size. */
    if (s->map)
      munmap(s->map, s->size);
    s->map = NULL;
    if (ftruncate(s->fd, (off_t)len) < 0)
      return -1;
    s->size = len;
  }
  if (!s->map) {
    void *m = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
    if (m == MAP_FAILED)
      return -1;
    s->map = m;
  }
  memcpy(s->map, in, len);
  s->busy = true;
  return slot;
}

/* Whether the result of a job with an inline output could be over the
 * server's max_inline (then it comes back through a memfd).  job is the
 * caller's, whose `in` is memory even when it travels as a descriptor. */
static bool result_may_exceed(const fz_client *c, fz_op op, const fz_job *job) {
  uint64_t limit = c->info.max_inline;
  if (op == FZ_OP_COMPRESS) {
    uint64_t bound;
    /* A job the engine refuses is the server's to refuse. */
    return fz_client_compress_bound(job, &bound, NULL, 0) == 0 && bound > limit;
  }
  if (job->in_fd >= 0 || dev_in(job))
    return true; /* the archive is not here to read */
  fz_archive_info ai;
  return job->in && fz_archive_inspect(job->in, job->in_len, &ai) == 0 &&
         ai.raw_bytes > limit;
}

static int add_job(fz_client *c, fzc_job **out) {
  if (c->njobs == c->jobs_cap) {
    size_t cap = c->jobs_cap ? c->jobs_cap * 2 : 16;
    fzc_job *p = realloc(c->jobs, cap * sizeof *p);
    if (!p)
      return fzc_fail(c, FZ_ENOMEM, "out of memory for the job table");
    c->jobs = p;
    c->jobs_cap = cap;
  }
  *out = &c->jobs[c->njobs++];
  memset(*out, 0, sizeof **out);
  (*out)->shm = -1;
  (*out)->out_memfd = -1;
  return 0;
}

static void remove_job(fz_client *c, size_t i) {
  memmove(&c->jobs[i], &c->jobs[i + 1], (c->njobs - i - 1) * sizeof c->jobs[0]);
  c->njobs--;
}

int fz_client_submit(fz_client *c, fz_op op, const fz_job *job, fz_done_cb cb,
                     void *user, uint64_t *id) {
  if (!c || !job)
    return FZ_EINVAL;
  c->errmsg[0] = '\0';
  if (c->broken)
    return fzc_fail(c, c->broken, "the connection is no longer usable");
  /* On the Unix socket, an input or output inside a shared buffer goes as
   * the buffer's descriptor and an offset; another large input is copied
   * once into a memfd slot.  Either way the daemon maps it. */
  fz_job staged = *job;
  int shm = -1;
  bool out_shared = false;
  if (c->transport == FZ_TRANSPORT_UNIX) {
    const fzc_buf *b;
    bool inline_in = job->in_fd < 0 && !dev_in(job) && job->in && job->in_len > 0;
    bool in_shared = false;
    if (inline_in && (b = fzc_buf_find(c, job->in, job->in_len)) != NULL) {
      in_shared = true;
      staged.in_fd = b->fd;
      staged.in_offset = (uint64_t)((const char *)job->in - b->base);
      staged.in_length = job->in_len;
    } else if (inline_in && job->in_len >= FZC_SHM_MIN &&
               (shm = shm_stage(c, job->in, job->in_len)) >= 0) {
      staged.in_fd = c->shm[shm].fd;
      staged.in_offset = 0;
      staged.in_length = job->in_len;
    }
    if (staged.in_fd >= 0 && job->in_fd < 0) {
      staged.in = NULL;
      staged.in_len = 0;
    }
    if (job->out && job->out_cap > 0 && job->out_fd < 0 && !dev_out(job) &&
        (b = fzc_buf_find(c, job->out, job->out_cap)) != NULL) {
      /* The daemon may write the result while it still reads the input.
       * (An input that is not shared was copied already.) */
      const char *o = job->out, *i = job->in;
      if (in_shared && i < o + job->out_cap && o < i + job->in_len)
        return fzc_fail(c, FZ_EINVAL, "the output region overlaps the input");
      staged.out_fd = b->fd;
      staged.out_offset = (uint64_t)((char *)job->out - b->base);
      staged.out_length = job->out_cap;
      out_shared = true;
    }
  }
  int rc = check_job(c, op, &staged);
  if (rc < 0)
    goto err_shm;
  int out_memfd = -1;
  if (c->transport == FZ_TRANSPORT_UNIX && staged.out_fd < 0 && !dev_out(&staged) &&
      c->info.max_inline && result_may_exceed(c, op, job)) {
    out_memfd = memfd_create("fzclient-output", MFD_CLOEXEC);
    if (out_memfd < 0) {
      rc = fzc_fail(c, FZ_EIO, "cannot make a memfd for a result over max_inline: %s",
                    strerror(errno));
      goto err_shm;
    }
    staged.out_fd = out_memfd;
    staged.out_offset = 0;
    /* Into the caller's buffer: the daemon refuses what would not fit. */
    staged.out_length = job->out ? job->out_cap : 0;
  }
  job = &staged;
  int fds[2], nfds = 0;
  /* In the order pack_job() numbers them: the output's, then the input's. */
  if (out_desc(job) >= 0)
    fds[nfds++] = out_desc(job);
  if (in_desc(job) >= 0)
    fds[nfds++] = in_desc(job);

  fzc_job *j = NULL;
  rc = add_job(c, &j);
  if (rc < 0) {
    if (out_memfd >= 0)
      close(out_memfd);
    goto err_shm;
  }
  j->shm = shm;
  j->out_memfd = out_memfd;
  j->msgid = fzc_next_msgid(c);
  j->op = op;
  j->cb = cb;
  j->user = user;
  j->out = job->out;
  j->out_cap = job->out_cap;
  j->out_shared = out_shared;
  uint32_t msgid = j->msgid;

  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  pack_job(&pk, msgid, op, job, nfds);
  struct iovec iov[2] = {{.iov_base = sb.data, .iov_len = sb.size},
                         {.iov_base = (void *)job->in,
                          .iov_len = job->in_fd < 0 && !dev_in(job) ? job->in_len : 0}};
  rc = fzc_send(c, iov, 2, fds, nfds, fzc_deadline(c->timeout_ms));
  msgpack_sbuffer_destroy(&sb);
  if (rc < 0) {
    /* A job that did not leave is not in flight: take it out again.  (The
     * table may have been touched by answers read meanwhile, so look it up.) */
    for (size_t i = 0; i < c->njobs; i++)
      if (c->jobs[i].msgid == msgid) {
        fzc_job_finish(c, &c->jobs[i]);
        remove_job(c, i);
        break;
      }
    return rc;
  }
  if (id)
    *id = msgid;
  return 0;

err_shm:
  if (shm >= 0)
    c->shm[shm].busy = false;
  return rc;
}

unsigned fz_client_pending(const fz_client *c) { return c ? (unsigned)c->njobs : 0; }

/* Hands back the first completed job: a callback job through its callback (1
 * is returned only for jobs without one). */
static int take_completed(fz_client *c, fz_completion *done, bool *called) {
  for (size_t i = 0; i < c->njobs; i++) {
    if (!c->jobs[i].done)
      continue;
    fzc_job j = c->jobs[i];
    remove_job(c, i);
    if (j.cb) {
      j.cb(c, j.msgid, j.user, &j.res);
      if (!j.out)
        free(j.res.data);
      *called = true;
      return 0;
    }
    if (done) {
      done->id = j.msgid;
      done->op = j.op;
      done->user = j.user;
      done->result = j.res;
    } else if (!j.out) {
      free(j.res.data);
    }
    return 1;
  }
  return 0;
}

int fz_client_wait(fz_client *c, int timeout_ms, fz_completion *done) {
  if (!c)
    return FZ_EINVAL;
  int64_t deadline = timeout_ms < 0 ? -1 : fzc_deadline(timeout_ms);
  for (;;) {
    bool called;
    do {
      called = false;
      if (take_completed(c, done, &called) == 1)
        return 1;
    } while (called);
    if (c->njobs == 0)
      return 0;
    if (c->broken)
      return c->broken;
    fzp_message msg;
    /* A zero timeout polls: fzc_recv() with an expired deadline only takes
     * what is buffered or readable now. */
    int rc = fzc_recv(c, timeout_ms == 0 ? 0 : deadline, &msg);
    if (rc == 0)
      return 0;
    if (rc < 0)
      continue; /* fzc_break() completed every job with the error */
    fzc_dispatch(c, &msg);
    fzp_message_free(&msg);
  }
}

/* The synchronous call: a submit, then answers until this one's. */
static int run_sync(fz_client *c, fz_op op, const fz_job *job, fz_result *res) {
  memset(res, 0, sizeof *res);
  uint64_t id;
  int rc = fz_client_submit(c, op, job, NULL, NULL, &id);
  if (rc < 0) {
    res->status = rc;
    snprintf(res->message, sizeof res->message, "%s", c->errmsg);
    return rc;
  }
  int64_t deadline = fzc_deadline(c->timeout_ms);
  for (;;) {
    for (size_t i = 0; i < c->njobs; i++) {
      if (c->jobs[i].msgid != (uint32_t)id || !c->jobs[i].done)
        continue;
      *res = c->jobs[i].res;
      remove_job(c, i);
      if (res->status < 0)
        fzc_fail(c, res->status, "%s", res->message);
      return res->status;
    }
    fzp_message msg;
    rc = fzc_recv(c, deadline, &msg);
    if (rc == 0) {
      /* The job stays in the table: its answer may still come, and
       * fz_client_wait() will hand it back then. */
      res->status = FZ_ETIMEDOUT;
      snprintf(res->message, sizeof res->message, "no answer in time");
      return fzc_fail(c, FZ_ETIMEDOUT, "no answer in time");
    }
    if (rc < 0)
      continue; /* the job is completed with the error now */
    fzc_dispatch(c, &msg);
    fzp_message_free(&msg);
  }
}

int fz_client_compress(fz_client *c, const fz_job *job, fz_result *res) {
  if (!c || !job || !res)
    return FZ_EINVAL;
  return run_sync(c, FZ_OP_COMPRESS, job, res);
}

int fz_client_decompress(fz_client *c, const fz_job *job, fz_result *res) {
  if (!c || !job || !res)
    return FZ_EINVAL;
  return run_sync(c, FZ_OP_DECOMPRESS, job, res);
}
