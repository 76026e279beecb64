/*
 * frames.c - fz_client_frames_setup() and fz_client_frames(): the daemon's
 * "frames_setup" and "frames" methods (docs/protocol.md).  The chunks go
 * inline as one bin with the caller's chunk table; each frame's arrays are
 * copied out of the answer, so the answer is freed before the call returns.
 */
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

/* A request and, for chunks in device memory, the keys of their export. */
typedef struct frames_call {
  const fz_frames_request *r;
  const fzc_dev_input *dev;
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

/* The device input's keys: as many as dev_fields() counts. */
static void pack_device(msgpack_packer *pk, const fzc_dev_input *d) {
  if (d->kind == 1) {
    pack_bin(pk, "in_ipc", d->blob, 64);
  } else {
    fzp_pack_key(pk, d->kind == 2 ? "in_vmm_fd" : "in_pool_fd");
    msgpack_pack_uint64(pk, 0);
    if (d->kind == 2) {
      fzp_pack_key(pk, "in_vmm_size");
      msgpack_pack_uint64(pk, d->vmm_size);
    } else {
      pack_bin(pk, "in_pool_ptr", d->blob, 64);
    }
    fzp_pack_key(pk, "nfds");
    msgpack_pack_uint64(pk, 1);
  }
  fzp_pack_key(pk, "in_offset");
  msgpack_pack_uint64(pk, d->offset);
  fzp_pack_key(pk, "in_length");
  msgpack_pack_uint64(pk, d->length);
  fzp_pack_key(pk, "in_buffer_id");
  msgpack_pack_uint64(pk, d->buffer_id);
  fzp_pack_key(pk, "device");
  fzp_pack_key(pk, d->uuid);
}

static uint32_t dev_fields(const fzc_dev_input *d) {
  return d->kind == 1 ? 5 : 7;
}

static void pack_frames(msgpack_packer *pk, const void *arg) {
  const frames_call *call = arg;
  const fz_frames_request *r = call->r;
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
  if (call->dev != NULL) {
    pack_device(pk, call->dev);
    pack_table(pk, r, 0);
    return;
  }
  if (r->has_fd) {
    fzp_pack_key(pk, "in_fd");
    msgpack_pack_uint64(pk, 0);
    fzp_pack_key(pk, "nfds");
    msgpack_pack_uint64(pk, 1);
    pack_table(pk, r, 0);
    return;
  }
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

int fz_client_frames(fz_client *c, const fz_frames_request *req, fz_frame_result *results) {
  if (!c || !req || !results || !req->dtype || req->nframes == 0 || req->nframes > 4096 ||
      req->ndims < 1 || req->ndims > 2 || (!req->data && !req->has_fd && !req->d_data) ||
      !req->offsets || !req->lengths || (req->has_fd && req->fd < 0) ||
      (req->d_data && req->has_fd))
    return FZ_EINVAL;
  memset(results, 0, req->nframes * sizeof *results);
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
  fzc_dev_input dev;
  frames_call call = {req, NULL};
  uint32_t nfields = 9 + (req->setup != 0) + (req->has_fd ? 1 : 0);
  const int *fds = req->has_fd ? &req->fd : NULL;
  if (req->d_data) {
    if (hi > req->d_len)
      return fzc_fail(c, FZ_ESIZE, "frames: the chunk table runs past d_len (%zu bytes)",
                      req->d_len);
    int rc = fzc_device_input(c, req->d_data, req->d_len, &dev);
    if (rc < 0)
      return rc;
    call.dev = &dev;
    nfields = 8 + (req->setup != 0) + dev_fields(&dev);
    fds = dev.fd >= 0 ? &dev.fd : NULL;
  }
  fzp_message msg;
  int rc = fzc_call_fds(c, "frames", nfields, pack_frames, &call, fds, fds != NULL ? 1 : 0, &msg);
  if (rc < 0)
    return rc;
  const msgpack_object *frames = NULL;
  if (fzp_get_obj(&msg.result, "frames", &frames) != 1 || frames->type != MSGPACK_OBJECT_ARRAY ||
      frames->via.array.size != req->nframes) {
    fzp_message_free(&msg);
    return fzc_fail(c, FZ_EPROTO, "frames: the answer has not one entry a frame");
  }
  rc = 0;
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
  fzp_message_free(&msg);
  if (rc < 0) {
    fz_client_frame_results_free(results, req->nframes);
    return fzc_fail(c, rc, "frames: a frame of the answer is malformed");
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
