/*
 * frames.c - fz_client_frames_setup() and fz_client_frames(): the daemon's
 * "frames_setup" and "frames" methods (docs/protocol.md).  The chunks go
 * inline as one bin with the caller's chunk table, or as a descriptor or
 * device memory the daemon reads; each frame's arrays are copied out of
 * the answer, so the answer is freed before the call returns, or the
 * daemon writes them into the caller's output and the answer says where.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fz.h"
#include "internal.h"

static void pack_bin(msgpack_packer *pk, const char *key, const void *p, size_t len) {
  fzp_pack_key(pk, key);
  msgpack_pack_bin(pk, (uint32_t)len);
  msgpack_pack_bin_body(pk, p, len);
}

static void pack_setup(msgpack_packer *pk, const void *arg) {
  const fz_frames_setup_args *a = arg;
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint64(pk, a->npixels);
  if (a->mask)
    pack_bin(pk, "mask", a->mask, a->npixels);
  if (a->rows) {
    uint64_t nnz = a->indptr[a->rows];
    fzp_pack_key(pk, "csr");
    msgpack_pack_map(pk, 4);
    pack_bin(pk, "indptr", a->indptr, (a->rows + 1) * 8);
    pack_bin(pk, "indices", a->indices, nnz * 4);
    pack_bin(pk, "weights", a->weights, nnz * 4);
    fzp_pack_key(pk, "weights_dtype");
    fzp_pack_key(pk, a->weights_i32 ? "i32" : "f32");
  }
}

int fz_client_frames_setup(fz_client *c, const fz_frames_setup_args *a, uint64_t *id) {
  if (!c || !a || !id || (!a->mask && !a->rows))
    return FZ_EINVAL;
  if (a->rows && (!a->indptr || a->indptr[a->rows] > UINT32_MAX ||
                  (a->indptr[a->rows] && (!a->indices || !a->weights))))
    return fzc_fail(c, FZ_EINVAL, "frames_setup: a matrix needs indptr, indices and weights");
  if (a->npixels > UINT32_MAX)
    return fzc_fail(c, FZ_ESHAPE, "frames_setup: %llu pixels, at most 2^32 - 1",
                    (unsigned long long)a->npixels);
  fzp_message msg;
  int rc = fzc_call(c, "frames_setup", 1 + (a->mask != NULL) + (a->rows > 0), pack_setup, a, &msg);
  if (rc < 0)
    return rc;
  rc = fzp_get_u64(&msg.result, "id", id) == 1 ? 0 : FZ_EPROTO;
  fzp_message_free(&msg);
  return rc < 0 ? fzc_fail(c, rc, "frames_setup: the answer has no id") : 0;
}

/* A request, the exports of its device buffers (NULL: none) and the
 * descriptors that travel with it. */
typedef struct frames_call {
  const fz_frames_request *r;
  const fzc_dev_buffer *din, *dout;
  int fds[2];
  unsigned nfds;
} frames_call;

static void pack_table(msgpack_packer *pk, const fz_frames_request *r, uint64_t lo) {
  fzp_pack_key(pk, "offsets");
  msgpack_pack_array(pk, (uint32_t)r->nframes);
  for (size_t i = 0; i < r->nframes; i++)
    msgpack_pack_uint64(pk, r->offsets[i] - lo);
  fzp_pack_key(pk, "lengths");
  msgpack_pack_array(pk, (uint32_t)r->nframes);
  for (size_t i = 0; i < r->nframes; i++)
    msgpack_pack_uint64(pk, r->lengths[i]);
}

static void pack_u64(msgpack_packer *pk, const char *side, const char *key, uint64_t v) {
  char name[32];
  snprintf(name, sizeof name, "%s_%s", side, key);
  fzp_pack_key(pk, name);
  msgpack_pack_uint64(pk, v);
}

/* A device buffer's keys for side "in" or "out", its descriptor (VMM,
 * pool) the message's fd_index: as many as dev_fields() counts. */
static void pack_device(msgpack_packer *pk, const char *side, const fzc_dev_buffer *d,
                        unsigned fd_index) {
  char name[32];
  if (d->kind == 1) {
    snprintf(name, sizeof name, "%s_ipc", side);
    pack_bin(pk, name, d->blob, 64);
  } else if (d->kind == 2) {
    pack_u64(pk, side, "vmm_fd", fd_index);
    pack_u64(pk, side, "vmm_size", d->vmm_size);
  } else {
    pack_u64(pk, side, "pool_fd", fd_index);
    snprintf(name, sizeof name, "%s_pool_ptr", side);
    pack_bin(pk, name, d->blob, 64);
  }
  pack_u64(pk, side, "offset", d->offset);
  pack_u64(pk, side, "length", d->length);
  pack_u64(pk, side, "buffer_id", d->buffer_id);
}

static uint32_t dev_fields(const fzc_dev_buffer *d) {
  return d->kind == 1 ? 4 : 5;
}

/* The keys pack_frames() packs. */
static uint32_t frames_fields(const frames_call *k) {
  const fz_frames_request *r = k->r;
  uint32_t n = 6 + (r->setup != 0) + 2 + (k->din != NULL ? dev_fields(k->din) : 1);
  if (k->dout != NULL)
    n += dev_fields(k->dout);
  else if (r->has_out_fd)
    n += 2 + (r->out_length != 0);
  return n + (k->din != NULL || k->dout != NULL) + (k->nfds > 0);
}

static void pack_frames(msgpack_packer *pk, const void *arg) {
  const frames_call *k = arg;
  const fz_frames_request *r = k->r;
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, r->dtype);
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, r->ndims);
  for (unsigned i = 0; i < r->ndims; i++)
    msgpack_pack_uint64(pk, r->shape[i]);
  fzp_pack_key(pk, "codec");
  fzp_pack_key(pk, r->codec ? r->codec : "lz4");
  fzp_pack_key(pk, "cut");
  msgpack_pack_double(pk, r->cut);
  fzp_pack_key(pk, "top_n");
  msgpack_pack_uint64(pk, r->top_n);
  fzp_pack_key(pk, "output");
  fzp_pack_key(pk, r->dense ? "dense" : "sparse");
  if (r->setup) {
    fzp_pack_key(pk, "setup");
    msgpack_pack_uint64(pk, r->setup);
  }
  /* The input's descriptor, when it has one, is the message's first. */
  unsigned out_index = k->din != NULL ? (k->din->fd >= 0) : r->has_fd != 0;
  if (k->din != NULL) {
    pack_device(pk, "in", k->din, 0);
    pack_table(pk, r, 0);
  } else if (r->has_fd) {
    fzp_pack_key(pk, "in_fd");
    msgpack_pack_uint64(pk, 0);
    pack_table(pk, r, 0);
  } else {
    /* Only the bytes the table names travel: the span from the lowest
     * offset to the highest end, with the offsets moved to match. */
    uint64_t lo = UINT64_MAX, hi = 0;
    for (size_t i = 0; i < r->nframes; i++) {
      lo = r->offsets[i] < lo ? r->offsets[i] : lo;
      hi = r->offsets[i] + r->lengths[i] > hi ? r->offsets[i] + r->lengths[i] : hi;
    }
    pack_bin(pk, "data", (const uint8_t *)r->data + lo, hi - lo);
    pack_table(pk, r, lo);
  }
  if (k->dout != NULL) {
    pack_device(pk, "out", k->dout, out_index);
  } else if (r->has_out_fd) {
    pack_u64(pk, "out", "fd", out_index);
    pack_u64(pk, "out", "offset", r->out_offset);
    if (r->out_length != 0)
      pack_u64(pk, "out", "length", r->out_length);
  }
  if (k->din != NULL || k->dout != NULL) {
    fzp_pack_key(pk, "device");
    fzp_pack_key(pk, k->din != NULL ? k->din->uuid : k->dout->uuid);
  }
  if (k->nfds > 0) {
    fzp_pack_key(pk, "nfds");
    msgpack_pack_uint64(pk, k->nfds);
  }
}

/* A copy of a bin field into a new array; 0 absent, 1 copied, < 0 error. */
static int take_bin(const msgpack_object *m, const char *key, void **out, uint32_t *len) {
  const void *p = NULL;
  int r = fzp_get_bin(m, key, &p, len);
  if (r != 1)
    return r;
  *out = malloc(*len ? *len : 1);
  if (*out == NULL)
    return FZ_ENOMEM;
  memcpy(*out, p, *len);
  return 1;
}

static int esize_of(const char *dtype) {
  fz_dtype t;
  return fz_dtype_parse(dtype, &t) < 0 ? 0 : (int)fz_dtype_size(t);
}

/* Frame f of an answer whose results went to an output: where they are. */
static int take_places(const msgpack_object *f, const fz_frames_request *req, fz_frame_result *x) {
  uint64_t listed = 0;
  if (fzp_get_u64(f, "listed", &listed) != 1 || listed > SIZE_MAX ||
      fzp_get_u64(f, "values_at", &x->values_at) != 1 ||
      (!req->dense && fzp_get_u64(f, "indices_at", &x->indices_at) != 1))
    return FZ_EPROTO;
  x->listed = (size_t)listed;
  return fzp_get_u64(f, "powder_at", &x->powder_at) < 0 ? FZ_EPROTO : 0;
}

/* The frames of an answer into results. */
static int take_frames(const fzp_message *msg, const fz_frames_request *req, int esize,
                       fz_frame_result *results) {
  const msgpack_object *frames = NULL;
  bool to_out = req->has_out_fd || req->d_out;
  /* With an output the answer names the matrix's rows (none: 0). */
  uint64_t bytes = 0, rows = 0;
  if (fzp_get_obj(&msg->result, "frames", &frames) != 1 || frames->type != MSGPACK_OBJECT_ARRAY ||
      frames->via.array.size != req->nframes ||
      (to_out && (fzp_get_u64(&msg->result, "bytes", &bytes) != 1 ||
                  fzp_get_u64(&msg->result, "rows", &rows) < 0 || rows > SIZE_MAX)))
    return FZ_EPROTO;
  int rc = 0;
  for (size_t i = 0; i < req->nframes && rc == 0; i++) {
    const msgpack_object *f = &frames->via.array.ptr[i];
    fz_frame_result *x = &results[i];
    int64_t st = 0;
    fzp_get_i64(f, "status", &st);
    fzp_get_u64(f, "count", &x->count);
    if (st < 0) {
      x->status = (int)st;
      const msgpack_object *err = NULL;
      if (fzp_get_obj(f, "error", &err) == 1)
        fzc_get_strbuf(err, "message", x->message, sizeof x->message);
      continue;
    }
    if (to_out) {
      rc = take_places(f, req, x);
      x->rows = (size_t)rows;
      continue;
    }
    uint32_t vl = 0, il = 0, pl = 0;
    if (take_bin(f, "values", &x->values, &vl) != 1 || vl % (uint32_t)esize != 0)
      rc = FZ_EPROTO;
    x->listed = vl / (uint32_t)esize;
    if (rc == 0 && !req->dense &&
        (take_bin(f, "indices", (void **)&x->indices, &il) != 1 || il != x->listed * 4))
      rc = FZ_EPROTO;
    int hp = rc == 0 ? take_bin(f, "powder", &x->powder, &pl) : 0;
    if (hp < 0 || pl % 8 != 0)
      rc = FZ_EPROTO;
    x->rows = pl / 8;
  }
  return rc;
}

int fz_client_frames(fz_client *c, const fz_frames_request *req, fz_frame_result *results) {
  if (!c || !req || !results || !req->dtype || req->nframes == 0 || req->nframes > 4096 ||
      req->ndims < 1 || req->ndims > 2 || (!req->data && !req->has_fd && !req->d_data) ||
      !req->offsets || !req->lengths || (req->has_fd && req->fd < 0) ||
      (req->d_data && req->has_fd) || (req->has_out_fd && req->out_fd < 0))
    return FZ_EINVAL;
  memset(results, 0, req->nframes * sizeof *results);
  if (req->has_out_fd && req->d_out)
    return fzc_fail(c, FZ_EINVAL, "frames: give out_fd or d_out, not both");
  if (!req->has_out_fd && (req->out_offset || req->out_length))
    return fzc_fail(c, FZ_EINVAL, "frames: out_offset and out_length go with has_out_fd");
  int esize = esize_of(req->dtype);
  if (esize == 0)
    return fzc_fail(c, FZ_EDTYPE, "frames: unknown dtype \"%s\"", req->dtype);
  uint64_t hi = 0, lo = UINT64_MAX;
  for (size_t i = 0; i < req->nframes; i++) {
    if (req->lengths[i] > UINT64_MAX - req->offsets[i])
      return fzc_fail(c, FZ_ESIZE, "frames: chunk %zu: offset and length overflow", i);
    lo = req->offsets[i] < lo ? req->offsets[i] : lo;
    hi = req->offsets[i] + req->lengths[i] > hi ? req->offsets[i] + req->lengths[i] : hi;
  }
  if (!req->has_fd && !req->d_data && hi - lo > UINT32_MAX)
    return fzc_fail(c, FZ_EMSGSIZE, "frames: %llu bytes of chunks, more than one message",
                    (unsigned long long)(hi - lo));
  if (req->d_data && hi > req->d_len)
    return fzc_fail(c, FZ_ESIZE, "frames: the chunk table runs past d_len (%zu bytes)", req->d_len);
  fzc_dev_buffer din, dout;
  frames_call k = {req, NULL, NULL, {-1, -1}, 0};
  if (req->d_data || req->d_out) {
    int rc =
        fzc_device_buffers(c, req->d_data, req->d_len, &din, req->d_out, req->d_out_len, &dout);
    if (rc < 0)
      return rc;
    k.din = req->d_data ? &din : NULL;
    k.dout = req->d_out ? &dout : NULL;
  }
  /* The input's descriptor first, then the output's. */
  if (req->has_fd || (k.din != NULL && din.fd >= 0))
    k.fds[k.nfds++] = req->has_fd ? req->fd : din.fd;
  if (req->has_out_fd || (k.dout != NULL && dout.fd >= 0))
    k.fds[k.nfds++] = req->has_out_fd ? req->out_fd : dout.fd;
  fzp_message msg;
  int rc = fzc_call_fds(c, "frames", frames_fields(&k), pack_frames, &k, k.nfds > 0 ? k.fds : NULL,
                        k.nfds, &msg);
  if (rc < 0)
    return rc;
  rc = take_frames(&msg, req, esize, results);
  fzp_message_free(&msg);
  if (rc < 0) {
    fz_client_frame_results_free(results, req->nframes);
    return fzc_fail(c, rc, "frames: the answer is malformed");
  }
  return 0;
}

void fz_client_frame_results_free(fz_frame_result *results, size_t n) {
  if (!results)
    return;
  for (size_t i = 0; i < n; i++) {
    free(results[i].values);
    free(results[i].indices);
    free(results[i].powder);
    results[i].values = results[i].powder = NULL;
    results[i].indices = NULL;
  }
}
