/*
 * frames.c - the "frames" method: a batch of detector chunks (HDF5 filter
 * 32008) decoded by the CPU engine into the pixels above a cut, or into
 * dense frames.
 *
 * The loop thread checks every param and every chunk's offset and length
 * against the bytes sent before a job exists; the worker then runs each
 * chunk on its own, so a corrupt chunk fails its frame only (its status and
 * message in the reply) and the others still come back.  The job reserves
 * its memory (the chunks and one frame of scratch, then each frame's
 * results at their size) against memory_limit before it allocates, and
 * gives it back when the job is freed, after the reply is packed.  Results
 * go back in the reply, or, with an output (a descriptor, or device memory
 * through the backend's writer), there one after another as each frame is
 * final, freed once written: then max_inline_bytes does not bound them.
 * The CPU engine runs the job here (fzd_frames_job_run); the GPU backend
 * runs LZ4 batches with its own decoder (gpu.c) through fzd_frames_start /
 * _open / _fail / _emit / _end.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frames.h"
#include "jobio.h"
#include "log.h"

#ifdef FZD_HAVE_FRAMES
#include "fz_frames.h"
#endif

struct fzd_frames_setups {
  fzd_budget *mem;
  unsigned n;
  uint64_t bytes, next_id;
  fzd_frames_setup s[FZD_FRAMES_SETUPS_MAX];
};

static void setup_clear(fzd_frames_setup *s) {
  free(s->mask);
  free(s->indptr);
  free(s->indices);
  free(s->w_f32);
  free(s->w_i32);
  memset(s, 0, sizeof *s);
}

void fzd_frames_setups_free(struct fzd_frames_setups *s) {
  if (s == NULL)
    return;
  for (unsigned i = 0; i < s->n; i++)
    setup_clear(&s->s[i]);
  if (s->bytes)
    fzd_budget_give(s->mem, s->bytes);
  free(s);
}

static const char *const frames_keys[] = {
    "chunks",        "data",      "offsets",    "lengths",      "dtype",       "shape",
    "codec",         "cut",       "top_n",      "output",       "setup",       "in_fd",
    "nfds",          "in_ipc",    "in_vmm_fd",  "in_vmm_size",  "in_pool_fd",  "in_pool_ptr",
    "in_buffer_id",  "in_offset", "in_length",  "device",       "out_fd",      "out_offset",
    "out_length",    "out_ipc",   "out_vmm_fd", "out_vmm_size", "out_pool_fd", "out_pool_ptr",
    "out_buffer_id", NULL};
static const char *const setup_keys[] = {"shape", "mask", "csr", NULL};
static const char *const csr_keys[] = {"indptr", "indices", "weights", "weights_dtype", NULL};

/* EPARAMS naming the keys map p takes when it has another. */
static int check_keys(const msgpack_object *p, const char *const *keys, const char *what, char *why,
                      size_t cap) {
  if (p->type != MSGPACK_OBJECT_MAP) {
    snprintf(why, cap, "%s must be a map", what);
    return FZ_EPARAMS;
  }
  for (uint32_t i = 0; i < p->via.map.size; i++) {
    const msgpack_object *k = &p->via.map.ptr[i].key;
    bool known = false;
    for (const char *const *w = keys; *w != NULL && !known; w++)
      known = k->type == MSGPACK_OBJECT_STR && strlen(*w) == k->via.str.size &&
              memcmp(*w, k->via.str.ptr, k->via.str.size) == 0;
    if (!known) {
      int len = snprintf(why, cap, "%s: unknown key; it takes", what);
      for (const char *const *w = keys; *w != NULL && len > 0 && (size_t)len < cap; w++)
        len += snprintf(why + len, cap - (size_t)len, " \"%s\"", *w);
      return FZ_EPARAMS;
    }
  }
  return 0;
}

/* The frame's extents: 1 or 2, their product below 2^32. */
static int parse_shape(const msgpack_object *p, uint64_t *npixels, char *why, size_t cap) {
  const msgpack_object *shape = NULL;
  if (fzp_get_obj(p, "shape", &shape) != 1 || shape->type != MSGPACK_OBJECT_ARRAY ||
      shape->via.array.size < 1 || shape->via.array.size > 2) {
    snprintf(why, cap, "\"shape\" is required: the frame's 1 or 2 extents");
    return FZ_EPARAMS;
  }
  *npixels = 1;
  for (uint32_t i = 0; i < shape->via.array.size; i++) {
    const msgpack_object *e = &shape->via.array.ptr[i];
    if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER || e->via.u64 == 0 ||
        e->via.u64 >= ((uint64_t)1 << 32) || *npixels * e->via.u64 >= ((uint64_t)1 << 32)) {
      snprintf(why, cap, "\"shape\": extents above 0 whose product is below 2^32");
      return FZ_ESHAPE;
    }
    *npixels *= e->via.u64;
  }
  return 0;
}

/* A bin param of exactly want bytes (want 0: any number) copied into *out. */
static int copy_bin(const msgpack_object *p, const char *key, uint64_t want, bool any, void **out,
                    uint32_t *len, char *why, size_t cap) {
  const void *b = NULL;
  if (fzp_get_bin(p, key, &b, len) != 1) {
    snprintf(why, cap, "\"%s\" is required (a bin)", key);
    return FZ_EPARAMS;
  }
  if (!any && *len != want) {
    snprintf(why, cap, "\"%s\" has %u bytes, %llu expected", key, *len, (unsigned long long)want);
    return FZ_ESIZE;
  }
  *out = malloc(*len ? *len : 1);
  if (*out == NULL) {
    snprintf(why, cap, "no memory for \"%s\"", key);
    return FZ_ENOMEM;
  }
  memcpy(*out, b, *len);
  return 0;
}

static int parse_setup(const msgpack_object *p, fzd_frames_setup *s, char *why, size_t cap) {
  int rc = check_keys(p, setup_keys, "frames_setup", why, cap);
  if (rc < 0 || (rc = parse_shape(p, &s->npixels, why, cap)) < 0)
    return rc;
  const msgpack_object *csr = NULL;
  const void *mb = NULL;
  uint32_t len = 0;
  int has_mask = fzp_get_bin(p, "mask", &mb, &len);
  int has_csr = fzp_get_obj(p, "csr", &csr);
  if (has_mask < 0 || has_csr < 0 || has_mask + has_csr == 0) {
    snprintf(why, cap, "frames_setup needs \"mask\" (a bin) or \"csr\" (a map) or both");
    return FZ_EPARAMS;
  }
  if (has_mask &&
      (rc = copy_bin(p, "mask", s->npixels, false, (void **)&s->mask, &len, why, cap)) < 0)
    return rc;
  s->bytes = has_mask ? s->npixels : 0;
  if (!has_csr)
    return 0;
  if ((rc = check_keys(csr, csr_keys, "\"csr\"", why, cap)) < 0)
    return rc;
  const char *wd = "f32";
  uint32_t wdl = 3;
  if (fzp_get_str(csr, "weights_dtype", &wd, &wdl) < 0 || wdl != 3 ||
      (memcmp(wd, "f32", 3) != 0 && memcmp(wd, "i32", 3) != 0)) {
    snprintf(why, cap, "\"csr\": \"weights_dtype\" must be \"f32\" or \"i32\"");
    return FZ_EPARAMS;
  }
  bool wint = memcmp(wd, "i32", 3) == 0;
  if ((rc = copy_bin(csr, "indptr", 0, true, (void **)&s->indptr, &len, why, cap)) < 0)
    return rc;
  if (len < 8 || len % 8 != 0) {
    snprintf(why, cap, "\"csr\": \"indptr\" must hold 1 or more u64 (%u bytes)", len);
    return FZ_ESIZE;
  }
  s->nrows = len / 8 - 1;
  uint64_t nnz = s->indptr[s->nrows];
  if (s->indptr[0] != 0 || nnz > UINT32_MAX) {
    snprintf(why, cap, "\"csr\": \"indptr\" must start at 0 and end below 2^32");
    return FZ_EINVAL;
  }
  for (size_t r = 0; r < s->nrows; r++)
    if (s->indptr[r + 1] < s->indptr[r]) {
      snprintf(why, cap, "\"csr\": \"indptr\" falls at row %zu", r);
      return FZ_EINVAL;
    }
  /* The engine reads nnz entries of each: the bins must hold exactly that. */
  if ((rc = copy_bin(csr, "indices", nnz * 4, false, (void **)&s->indices, &len, why, cap)) < 0 ||
      (rc = copy_bin(csr, "weights", nnz * 4, false, wint ? (void **)&s->w_i32 : (void **)&s->w_f32,
                     &len, why, cap)) < 0)
    return rc;
  for (uint64_t k = 0; k < nnz; k++)
    if (s->indices[k] >= s->npixels) {
      snprintf(why, cap, "\"csr\": entry %llu names pixel %u of %llu", (unsigned long long)k,
               s->indices[k], (unsigned long long)s->npixels);
      return FZ_EINVAL;
    }
  s->has_csr = true;
  s->bytes += (s->nrows + 1) * 8 + nnz * 8;
  return 0;
}

void fzd_frames_setup_method(fzd_server *srv, fzd_conn *c, const fzp_message *msg) {
  char why[512], sub[400];
  int code;
  struct fzd_frames_setups **ps = fzd_conn_frames(c);
  if (*ps == NULL && (*ps = calloc(1, sizeof **ps)) != NULL) {
    (*ps)->mem = &srv->mem;
    (*ps)->next_id = 1;
  }
  struct fzd_frames_setups *ss = *ps;
  fzd_frames_setup s;
  memset(&s, 0, sizeof s);
  if (ss == NULL) {
    fzd_conn_reply_error(c, msg->msgid, FZ_ENOMEM, "frames_setup: no memory");
    return;
  }
  if ((code = parse_setup(&msg->params, &s, sub, sizeof sub)) < 0) {
    snprintf(why, sizeof why, "frames_setup: %s", sub);
    goto fail;
  }
  /* A connection holds a few entries, within max_job_bytes together, and
   * they count against memory_limit like jobs until it closes. */
  if (ss->n >= FZD_FRAMES_SETUPS_MAX) {
    code = FZ_ERANGE;
    snprintf(why, sizeof why,
             "frames_setup: this connection holds %d entries already, the "
             "most it may (they are dropped when it closes)",
             FZD_FRAMES_SETUPS_MAX);
    goto fail;
  }
  if (ss->bytes > srv->cfg.max_job_bytes || s.bytes > srv->cfg.max_job_bytes - ss->bytes) {
    code = FZ_ERANGE;
    snprintf(why, sizeof why,
             "frames_setup: %llu bytes, and the connection's entries hold "
             "%llu; together at most max_job_bytes (%llu)",
             (unsigned long long)s.bytes, (unsigned long long)ss->bytes,
             (unsigned long long)srv->cfg.max_job_bytes);
    goto fail;
  }
  if ((code = fzd_budget_take(&srv->mem, s.bytes, NULL)) < 0) {
    snprintf(why, sizeof why, "frames_setup: %llu bytes do not fit memory_limit (%llu)%s",
             (unsigned long long)s.bytes, (unsigned long long)srv->mem.limit,
             code == FZ_EBUSY ? " beside the jobs running now; try again later" : "");
    goto fail;
  }
  static _Atomic uint64_t serials;
  s.id = ss->next_id++;
  s.serial = ++serials;
  ss->bytes += s.bytes;
  ss->s[ss->n++] = s;
  msgpack_packer *pk = fzd_conn_packer(c);
  fzp_pack_result_begin(pk, msg->msgid, 3);
  fzp_pack_key(pk, "id");
  msgpack_pack_uint64(pk, s.id);
  fzp_pack_key(pk, "rows");
  msgpack_pack_uint64(pk, s.nrows);
  fzp_pack_key(pk, "bytes");
  msgpack_pack_uint64(pk, s.bytes);
  return;
fail:
  setup_clear(&s);
  fzd_conn_reply_error(c, msg->msgid, code, "%s", why);
}

/* Bytes before a frame's values in its block: the zero padding an output
 * takes between the previous frame's end and this frame's start. */
#define FRAME_LEAD 8

/* A frame's results as they lie in an output, from the frame's start (a
 * multiple of 8): values, indices from the next multiple of 4, the product
 * from the next multiple of 8.  lists is where the values (dense) or the
 * indices (sparse) end, end where the frame does. */
typedef struct frame_layout {
  uint64_t indices, lists, powder, end;
} frame_layout;

static frame_layout layout_of(const struct fzd_frames_req *r, size_t listed) {
  frame_layout l;
  uint64_t values = (uint64_t)listed * r->esize;
  l.indices = (values + 3) & ~(uint64_t)3;
  l.lists = r->dense ? values : l.indices + (uint64_t)listed * 4;
  l.powder = (l.lists + 7) & ~(uint64_t)7;
  l.end = r->rows ? l.powder + r->rows * 8 : l.lists;
  return l;
}

/* Frees frame x's arrays and gives their memory_limit back. */
static void result_drop(struct fzd_frames_req *r, fzd_frame_result *x) {
  if (x->block == NULL)
    return;
  uint64_t bytes = FRAME_LEAD + layout_of(r, x->listed).end;
  fzd_budget_give(r->mem, bytes);
  r->reserved -= bytes;
  free(x->block);
  x->block = NULL;
  x->values = x->powder = NULL;
  x->indices = NULL;
}

void fzd_frames_free(struct fzd_frames_req *r) {
  if (r == NULL)
    return;
  if (r->res != NULL)
    for (size_t i = 0; i < r->n; i++)
      result_drop(r, &r->res[i]);
  if (r->reserved)
    fzd_budget_give(r->mem, r->reserved);
  free(r->res);
  free(r->data);
  free(r->offsets);
  free(r->lengths);
  free(r);
}

/* An array of n unsigned integers into a new array; NULL with why set. */
static uint64_t *u64_array(const msgpack_object *o, const char *key, char *why, size_t cap) {
  uint64_t *v = malloc((o->via.array.size ? o->via.array.size : 1) * sizeof *v);
  if (v == NULL) {
    snprintf(why, cap, "no memory for \"%s\"", key);
    return NULL;
  }
  for (uint32_t i = 0; i < o->via.array.size; i++) {
    if (o->via.array.ptr[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
      snprintf(why, cap, "\"%s\"[%u] must be an unsigned integer", key, i);
      free(v);
      return NULL;
    }
    v[i] = o->via.array.ptr[i].via.u64;
  }
  return v;
}

/* The chunks: "chunks" (a list of bin), or "data", "in_fd" or a device
 * input (GPU backend) with "offsets" and "lengths"; each range checked
 * against the bytes sent. */
static int parse_chunks(fzd_server *srv, fzd_conn *c, const msgpack_object *p, fzd_job *job,
                        struct fzd_frames_req *r, char *why, size_t cap) {
  uint64_t max_bytes = srv->cfg.max_job_bytes;
  const msgpack_object *list = NULL, *offs = NULL, *lens = NULL;
  const void *data = NULL;
  uint32_t data_len = 0;
  uint64_t fd_index = 0;
  int has_list = fzp_get_obj(p, "chunks", &list);
  int has_data = fzp_get_bin(p, "data", &data, &data_len);
  int has_fd = fzp_get_u64(p, "in_fd", &fd_index);
  int has_offs = fzp_get_obj(p, "offsets", &offs);
  int has_lens = fzp_get_obj(p, "lengths", &lens);
  int has_dev = fzd_parse_device_input(srv, c, p, job, why, cap);
  if (has_dev < 0)
    return has_dev;
  const msgpack_object *unused = NULL;
  if (!has_dev &&
      (fzp_get_obj(p, "in_offset", &unused) == 1 || fzp_get_obj(p, "in_length", &unused) == 1 ||
       (fzp_get_obj(p, "device", &unused) == 1 && !job->out_ipc))) {
    snprintf(why, cap,
             "\"in_offset\" and \"in_length\" go with a device input, \"device\" with a "
             "device input or output");
    return FZ_EPARAMS;
  }
  if (has_list < 0 || has_data < 0 || has_fd < 0 || has_offs < 0 || has_lens < 0 ||
      has_list + has_data + has_fd + has_dev != 1) {
    snprintf(why, cap,
             "frames needs exactly one of \"chunks\" (a list of bin), \"data\" (a bin), "
             "\"in_fd\" (a descriptor index) and a device input (\"in_ipc\", "
             "\"in_vmm_fd\" or \"in_pool_fd\"), the last three with \"offsets\" and "
             "\"lengths\"");
    return FZ_EPARAMS;
  }
  if (has_list) {
    if (has_offs || has_lens) {
      snprintf(why, cap, "\"offsets\" and \"lengths\" go with \"data\", not \"chunks\"");
      return FZ_EPARAMS;
    }
    if (list->type != MSGPACK_OBJECT_ARRAY || list->via.array.size == 0 ||
        list->via.array.size > FZD_FRAMES_MAX) {
      snprintf(why, cap, "\"chunks\" must be a list of 1 to %d bin", FZD_FRAMES_MAX);
      return FZ_EPARAMS;
    }
    r->n = list->via.array.size;
    uint64_t total = 0;
    for (size_t i = 0; i < r->n; i++) {
      if (list->via.array.ptr[i].type != MSGPACK_OBJECT_BIN) {
        snprintf(why, cap, "\"chunks\"[%zu] must be a bin", i);
        return FZ_EPARAMS;
      }
      total += list->via.array.ptr[i].via.bin.size;
    }
    r->data = malloc(total ? total : 1);
    r->offsets = malloc(r->n * sizeof *r->offsets);
    r->lengths = malloc(r->n * sizeof *r->lengths);
    if (r->data == NULL || r->offsets == NULL || r->lengths == NULL) {
      snprintf(why, cap, "no memory for %llu bytes of chunks", (unsigned long long)total);
      return FZ_ENOMEM;
    }
    uint64_t at = 0;
    for (size_t i = 0; i < r->n; i++) {
      const msgpack_object_bin *b = &list->via.array.ptr[i].via.bin;
      memcpy(r->data + at, b->ptr, b->size);
      r->offsets[i] = at;
      r->lengths[i] = b->size;
      at += b->size;
    }
    return 0;
  }
  if (has_offs != 1 || has_lens != 1 || offs->type != MSGPACK_OBJECT_ARRAY ||
      lens->type != MSGPACK_OBJECT_ARRAY || offs->via.array.size != lens->via.array.size ||
      offs->via.array.size == 0 || offs->via.array.size > FZD_FRAMES_MAX) {
    snprintf(why, cap,
             "\"data\" needs \"offsets\" and \"lengths\", lists of the same "
             "length, 1 to %d entries",
             FZD_FRAMES_MAX);
    return FZ_EPARAMS;
  }
  r->n = offs->via.array.size;
  if ((r->offsets = u64_array(offs, "offsets", why, cap)) == NULL ||
      (r->lengths = u64_array(lens, "lengths", why, cap)) == NULL)
    return FZ_EPARAMS;
  if (has_dev) {
    /* Offsets from in_offset; the daemon checks the range against the
     * allocation when it imports it. */
    for (size_t i = 0; i < r->n; i++)
      if (r->offsets[i] > job->in_len || r->lengths[i] > job->in_len - r->offsets[i]) {
        snprintf(why, cap, "chunk %zu: offset %llu and length %llu pass \"in_length\" (%llu bytes)",
                 i, (unsigned long long)r->offsets[i], (unsigned long long)r->lengths[i],
                 (unsigned long long)job->in_len);
        return FZ_ESIZE;
      }
    return 0;
  }
  if (has_fd) {
    /* The chunks stay in the file until the worker reads them (pread, as
     * every input descriptor: a file that shrinks meanwhile gives EIO). */
    struct stat st;
    if (fd_index >= job->nfds) {
      snprintf(why, cap, "\"in_fd\" %llu: the message has %u descriptors",
               (unsigned long long)fd_index, job->nfds);
      return FZ_EPARAMS;
    }
    r->fd = job->fds[fd_index];
    if (fstat(r->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
      snprintf(why, cap, "\"in_fd\" must be a regular file or a memfd");
      return FZ_EINVAL;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < r->n; i++) {
      if (r->offsets[i] > (uint64_t)st.st_size ||
          r->lengths[i] > (uint64_t)st.st_size - r->offsets[i]) {
        snprintf(why, cap,
                 "chunk %zu: offset %llu and length %llu pass the end of \"in_fd\" "
                 "(%llu bytes)",
                 i, (unsigned long long)r->offsets[i], (unsigned long long)r->lengths[i],
                 (unsigned long long)st.st_size);
        return FZ_ESIZE;
      }
      total += r->lengths[i];
    }
    if (total > max_bytes) {
      snprintf(why, cap, "the chunks take %llu bytes, more than max_job_bytes (%llu)",
               (unsigned long long)total, (unsigned long long)max_bytes);
      return FZ_ESIZE;
    }
    return 0;
  }
  for (size_t i = 0; i < r->n; i++)
    if (r->offsets[i] > data_len || r->lengths[i] > data_len - r->offsets[i]) {
      snprintf(why, cap,
               "chunk %zu: offset %llu and length %llu pass the end of \"data\" "
               "(%u bytes)",
               i, (unsigned long long)r->offsets[i], (unsigned long long)r->lengths[i], data_len);
      return FZ_ESIZE;
    }
  r->data = malloc(data_len ? data_len : 1);
  if (r->data == NULL) {
    snprintf(why, cap, "no memory for %u bytes of chunks", data_len);
    return FZ_ENOMEM;
  }
  memcpy(r->data, data, data_len);
  return 0;
}

static int parse_frames(fzd_server *srv, fzd_conn *c, fzd_job *job, const msgpack_object *p,
                        struct fzd_frames_req *r, char *why, size_t cap) {
  const char *s = NULL;
  uint32_t len = 0;
  char text[32];
  int rc = check_keys(p, frames_keys, "frames", why, cap);
  if (rc < 0)
    return rc;
  if (fzp_get_str(p, "dtype", &s, &len) != 1 || len >= sizeof text) {
    snprintf(why, cap, "frames needs \"dtype\" (a str)");
    return FZ_EPARAMS;
  }
  memcpy(text, s, len);
  text[len] = '\0';
  if (memchr(text, '\0', len) != NULL || fz_dtype_parse(text, &r->dtype) < 0) {
    snprintf(why, cap, "\"dtype\": unknown dtype");
    return FZ_EDTYPE;
  }
  r->esize = fz_dtype_size(r->dtype);
  if ((rc = parse_shape(p, &r->npixels, why, cap)) < 0)
    return rc;
  uint64_t id = 0;
  int has_setup = fzp_get_u64(p, "setup", &id);
  if (has_setup < 0) {
    snprintf(why, cap, "\"setup\" must be an id from frames_setup");
    return FZ_EPARAMS;
  }
  if (has_setup) {
    const struct fzd_frames_setups *ss = *fzd_conn_frames(c);
    for (unsigned i = 0; ss != NULL && i < ss->n && r->setup == NULL; i++)
      if (ss->s[i].id == id)
        r->setup = &ss->s[i];
    if (r->setup == NULL) {
      snprintf(why, cap, "\"setup\": no entry %llu on this connection", (unsigned long long)id);
      return FZ_EPARAMS;
    }
    if (r->setup->npixels != r->npixels) {
      snprintf(why, cap, "\"setup\" %llu is for frames of %llu pixels, not %llu",
               (unsigned long long)id, (unsigned long long)r->setup->npixels,
               (unsigned long long)r->npixels);
      return FZ_ESHAPE;
    }
  }
  if (r->npixels * r->esize > srv->cfg.max_job_bytes) {
    snprintf(why, cap, "a frame of %llu bytes is more than max_job_bytes (%llu)",
             (unsigned long long)(r->npixels * r->esize),
             (unsigned long long)srv->cfg.max_job_bytes);
    return FZ_ESIZE;
  }
  int has = fzp_get_str(p, "codec", &s, &len);
  r->codec = 2;
  if (has < 0 || (has == 1 && !(len == 3 && memcmp(s, "lz4", 3) == 0) &&
                  !(len == 4 && memcmp(s, "zstd", 4) == 0))) {
    snprintf(why, cap, "\"codec\" must be \"lz4\" or \"zstd\"");
    return FZ_EPARAMS;
  }
  if (has == 1 && len == 4)
    r->codec = 3;
  r->cut = 0;
  if (fzp_get_f64(p, "cut", &r->cut) < 0 || isinf(r->cut)) {
    snprintf(why, cap, "\"cut\" must be a finite number or NaN");
    return FZ_EPARAMS;
  }
  if (fzp_get_u64(p, "top_n", &r->top_n) < 0) {
    snprintf(why, cap, "\"top_n\" must be an unsigned integer");
    return FZ_EPARAMS;
  }
  has = fzp_get_str(p, "output", &s, &len);
  if (has < 0 || (has == 1 && !(len == 6 && memcmp(s, "sparse", 6) == 0) &&
                  !(len == 5 && memcmp(s, "dense", 5) == 0))) {
    snprintf(why, cap, "\"output\" must be \"sparse\" or \"dense\"");
    return FZ_EPARAMS;
  }
  r->dense = has == 1 && len == 5;
  if ((rc = fzd_parse_output(srv, c, p, job, why, cap)) < 0)
    return rc;
  r->to_output = job->out_fd >= 0 || job->out_ipc;
  return parse_chunks(srv, c, p, job, r, why, cap);
}

/* Result bytes of one frame at most. */
static uint64_t frame_out_max(const struct fzd_frames_req *r) {
  if (r->dense)
    return r->npixels * r->esize;
  uint64_t cap = r->top_n && r->top_n < r->npixels ? r->top_n : r->npixels;
  return cap * (r->esize + 4);
}

void fzd_frames_method(fzd_server *srv, fzd_conn *c, const fzp_message *msg) {
  char why[512];
  int code = 0;
  fzd_job *job = NULL;
  struct fzd_frames_req *r = calloc(1, sizeof *r);
  if (r == NULL) {
    fzd_conn_reply_error(c, msg->msgid, FZ_ENOMEM, "no memory for a frames job");
    return;
  }
#ifndef FZD_HAVE_FRAMES
  code = FZ_EMETHOD;
  snprintf(why, sizeof why, "frames: this fzd was built without liblz4 and libzstd");
  goto fail;
#else
  const msgpack_object *p = &msg->params;
  char sub[400];
  uint64_t nfds = 0;
  r->fd = -1;
  /* Descriptors that came with the message are taken first, whatever
   * happens next, so the queue stays in step with the stream; a count that
   * cannot be read, or too many, leaves it out of step: the connection
   * ends, as for compress. */
  if (p->type != MSGPACK_OBJECT_MAP || fzp_get_u64(p, "nfds", &nfds) < 0 ||
      nfds > FZD_MAX_FDS_PER_MESSAGE) {
    code = FZ_EPARAMS;
    snprintf(why, sizeof why, "frames: \"nfds\" must be an unsigned integer, at most %d",
             FZD_MAX_FDS_PER_MESSAGE);
    fzd_conn_close_after_flush(c);
    goto fail;
  }
  if (nfds > 0 && fzd_conn_is_tcp(c)) {
    code = FZ_ETRANSPORT;
    snprintf(why, sizeof why, "frames: descriptors cannot travel over TCP; send \"data\"");
    goto fail;
  }
  job = calloc(1, sizeof *job);
  if (job == NULL) {
    code = FZ_ENOMEM;
    snprintf(why, sizeof why, "no memory for a frames job");
    goto fail;
  }
  job->kind = FZD_JOB_FRAMES;
  job->msgid = msg->msgid;
  job->in_fd = job->out_fd = -1;
  job->frames = r;
  if (fzd_conn_take_fds(c, (unsigned)nfds, job->fds) < 0) {
    code = FZ_EPROTO;
    snprintf(why, sizeof why, "the message declares %llu descriptors but fewer arrived with it",
             (unsigned long long)nfds);
    fzd_conn_close_after_flush(c);
    goto fail;
  }
  job->nfds = (unsigned)nfds;
  for (unsigned i = 0; i < job->nfds; i++)
    if (job->fds[i] < 0) {
      srv->stats.busy_rejections++;
      code = FZ_EBUSY;
      snprintf(why, sizeof why, "fzd holds max_fds_total descriptors; try again later");
      goto fail;
    }
  if ((code = parse_frames(srv, c, job, p, r, sub, sizeof sub)) < 0) {
    snprintf(why, sizeof why, "frames: %s", sub);
    goto fail;
  }
  r->mem = &srv->mem;
  r->max_inline = srv->cfg.max_inline_bytes;
  job->conn = c;
  uint64_t rows = r->setup != NULL && r->setup->has_csr ? r->setup->nrows : 0;
  /* Results that go to an output leave a reply of a few fields a frame
   * (an error message at most). */
  uint64_t worst = r->to_output ? (uint64_t)r->n * 256 + 256
                                : (uint64_t)r->n * (frame_out_max(r) + rows * 8 + 64) + 64;
  job->reply_reserve = worst < r->max_inline ? worst : r->max_inline;
  if (fzd_conn_reply_room(c, job->reply_reserve) < 0) {
    srv->stats.busy_rejections++;
    code = FZ_EBUSY;
    snprintf(why, sizeof why,
             "replies not yet read by their clients fill "
             "max_reply_bytes_total (%llu bytes); try again later",
             (unsigned long long)srv->cfg.max_reply_bytes_total);
  } else if (fzd_pool_submit(srv->pool, job, srv->cfg.queue_capacity) == 0) {
    fzd_conn_job_accepted(c, job);
    return;
  } else {
    srv->stats.busy_rejections++;
    code = FZ_EBUSY;
    snprintf(why, sizeof why, "the job queue is full (%llu waiting); try again later",
             (unsigned long long)srv->cfg.queue_capacity);
  }
#endif
fail:
  fzd_conn_reply_error(c, msg->msgid, code, "%s", why);
  fzd_conn_log_job_error(c, "frames", msg->msgid, code, why);
  if (job != NULL)
    fzd_job_free(job); /* frees r too */
  else
    fzd_frames_free(r);
}

#ifdef FZD_HAVE_FRAMES
int fzd_frames_start(fzd_job *job, bool keep_chunks, uint64_t scratch) {
  struct fzd_frames_req *r = job->frames;
  if (keep_chunks && job->in_ipc) {
    snprintf(job->why, sizeof job->why, "chunks in device memory need the GPU's decoder");
    return FZ_EINVAL;
  }
  const fzd_frames_setup *su = r->setup;
  uint64_t chunk_bytes = 0;
  for (size_t i = 0; i < r->n; i++)
    chunk_bytes += r->lengths[i];
  /* A device input keeps in_length: the region its offsets lie in. */
  if (!job->in_ipc)
    job->in_len = chunk_bytes;
  r->rows = su != NULL && su->has_csr ? su->nrows : 0;
  /* The chunks, the caller's scratch and the results' table are held for
   * the whole run; each frame's own result is reserved as it is made
   * (exactly its size), so a batch of sparse frames costs what it lists,
   * not its worst case. */
  uint64_t need = (keep_chunks && r->data == NULL ? chunk_bytes : 0) + scratch +
                  (uint64_t)r->n * sizeof(fzd_frame_result);
  int err = fzd_budget_take(r->mem, need, NULL);
  if (err < 0) {
    snprintf(job->why, sizeof job->why,
             err == FZ_ENOMEM ? "the batch needs at least %llu bytes of memory, more than "
                                "memory_limit (%llu); send fewer frames a request"
                              : "the batch needs at least %llu bytes of memory and "
                                "memory_limit (%llu) is taken by other jobs; try again later",
             (unsigned long long)need, (unsigned long long)r->mem->limit);
    return err;
  }
  r->reserved += need;
  r->full_from = r->n;
  r->out_room = r->to_output ? fzd_job_out_room(job) : 0;
  r->res = calloc(r->n, sizeof *r->res);
  if (r->res == NULL) {
    snprintf(job->why, sizeof job->why, "no memory for the results of %zu frames", r->n);
    return FZ_ENOMEM;
  }
  if (!keep_chunks || r->data != NULL)
    return 0;
  /* The chunks packed one after another; the table now points there. */
  r->data = malloc(chunk_bytes ? chunk_bytes : 1);
  if (r->data == NULL) {
    snprintf(job->why, sizeof job->why, "no memory for %llu bytes of chunks",
             (unsigned long long)chunk_bytes);
    return FZ_ENOMEM;
  }
  uint64_t *at = malloc(r->n * sizeof *at + 1);
  if (at == NULL) {
    snprintf(job->why, sizeof job->why, "no memory for the chunk table of %zu frames", r->n);
    return FZ_ENOMEM;
  }
  for (size_t i = 0; i < r->n; i++)
    at[i] = i ? at[i - 1] + r->lengths[i - 1] : 0;
  err = fzd_frames_read(job, 0, r->n, r->data, at);
  if (err == 0) {
    memcpy(r->offsets, at, r->n * sizeof *at);
    r->fd = -1;
  }
  free(at);
  return err;
}

/* Chunk i into dst: copied from the message's bytes, or read with pread,
 * as every input descriptor is (a file that shrinks meanwhile gives EIO). */
static int read_chunk(const struct fzd_frames_req *r, size_t i, uint8_t *dst, char *why,
                      size_t why_len) {
  if (r->fd < 0) {
    memcpy(dst, r->data + r->offsets[i], (size_t)r->lengths[i]);
    return 0;
  }
  size_t got = 0;
  while (got < r->lengths[i]) {
    ssize_t k = pread(r->fd, dst + got, (size_t)r->lengths[i] - got, (off_t)(r->offsets[i] + got));
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      snprintf(why, why_len, "chunk %zu: reading %llu bytes at %llu of \"in_fd\": %s", i,
               (unsigned long long)r->lengths[i], (unsigned long long)r->offsets[i],
               k < 0 ? strerror(errno) : "the file ended (it shrank)");
      return FZ_EIO;
    }
    got += (size_t)k;
  }
  return 0;
}

/* Chunks from a descriptor come through the page cache, which one thread
 * copies at a few GB/s, less than the GPU decodes them: a batch of at
 * least READ_SPLIT bytes is cut into one run of chunks of about equal
 * bytes a reader.  The readers are threads of the daemon's own, made on
 * first use and kept rather than made and joined for every batch, one a
 * core, 2 at least and at most FZD_FRAMES_READERS; they take runs from
 * one queue in order. */
#define READ_SPLIT ((uint64_t)8 << 20)

static struct {
  pthread_mutex_t mu;
  pthread_cond_t work; /* a run was queued */
  pthread_cond_t done; /* a run was read */
  fzd_frames_read_run *head, *tail;
  size_t threads; /* readers made */
} readers = {.mu = PTHREAD_MUTEX_INITIALIZER,
             .work = PTHREAD_COND_INITIALIZER,
             .done = PTHREAD_COND_INITIALIZER};

static size_t wanted;
static pthread_once_t wanted_once = PTHREAD_ONCE_INIT;

static void wanted_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  wanted = n < 2 ? 2 : n > FZD_FRAMES_READERS ? FZD_FRAMES_READERS : (size_t)n;
}

/* How many readers there are to be, counted once. */
static size_t readers_wanted(void) {
  pthread_once(&wanted_once, wanted_count);
  return wanted;
}

static void read_run(fzd_frames_read_run *p) {
  p->sent = p->on_read != NULL;
  for (size_t i = p->first; i < p->end && p->rc == 0; i++) {
    uint8_t *dst = p->dst + p->at[i - p->first];
    p->rc = read_chunk(p->r, i, dst, p->why, sizeof p->why);
    if (p->rc == 0 && p->sent && p->r->lengths[i] != 0)
      p->sent = p->on_read(p->on_read_arg, dst, (size_t)p->r->lengths[i]) == 0;
  }
}

static void *reader_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&readers.mu);
  for (;;) {
    while (readers.head == NULL)
      pthread_cond_wait(&readers.work, &readers.mu);
    fzd_frames_read_run *p = readers.head;
    readers.head = p->next;
    if (readers.head == NULL)
      readers.tail = NULL;
    pthread_mutex_unlock(&readers.mu);
    read_run(p);
    pthread_mutex_lock(&readers.mu);
    p->done = true;
    pthread_cond_broadcast(&readers.done);
  }
  return NULL;
}

/* The readers made up to those wanted (readers.mu held); how many there
 * are (0: none could be made). */
static size_t readers_make(void) {
  size_t want = readers_wanted();
  while (readers.threads < want) {
    pthread_t tid;
    pthread_attr_t at;
    bool made = pthread_attr_init(&at) == 0;
    made = made && pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED) == 0 &&
           pthread_create(&tid, &at, reader_main, NULL) == 0;
    pthread_attr_destroy(&at);
    if (!made)
      break;
    readers.threads++;
  }
  return readers.threads;
}

void fzd_frames_read_start(fzd_job *job, size_t first, size_t k, uint8_t *dst, const uint64_t *at,
                           fzd_frames_reader *rd) {
  const struct fzd_frames_req *r = job->frames;
  uint64_t total = 0;
  for (size_t j = 0; j < k; j++)
    total += r->lengths[first + j];
  size_t nt = r->fd < 0 || total < READ_SPLIT ? 1 : readers_wanted();
  size_t i = first, end = first + k;
  uint64_t sum = 0;
  rd->nt = nt;
  for (size_t t = 0; t < nt; t++) {
    uint64_t goal = t + 1 == nt ? total : total / nt * (t + 1);
    size_t b = i;
    while (b < end && sum < goal)
      sum += r->lengths[b++];
    rd->runs[t] = (fzd_frames_read_run){.r = r,
                                        .first = i,
                                        .end = b,
                                        .dst = dst,
                                        .at = at + (i - first),
                                        .on_read = rd->on_read,
                                        .on_read_arg = rd->on_read_arg};
    i = b;
  }
  /* One run (a small batch, or chunks in memory) is read now, and so are
   * all when no reader could be made. */
  rd->queued = false;
  if (nt > 1) {
    pthread_mutex_lock(&readers.mu);
    if ((rd->queued = readers_make() > 0)) {
      for (size_t t = 0; t < nt; t++) {
        if (readers.tail != NULL)
          readers.tail->next = &rd->runs[t];
        else
          readers.head = &rd->runs[t];
        readers.tail = &rd->runs[t];
      }
      pthread_cond_broadcast(&readers.work);
    }
    pthread_mutex_unlock(&readers.mu);
  }
  for (size_t t = 0; t < nt && !rd->queued; t++)
    read_run(&rd->runs[t]);
}

int fzd_frames_read_wait(fzd_job *job, fzd_frames_reader *rd) {
  pthread_mutex_lock(&readers.mu);
  for (size_t t = 0; t < rd->nt; t++)
    while (rd->queued && !rd->runs[t].done)
      pthread_cond_wait(&readers.done, &readers.mu);
  pthread_mutex_unlock(&readers.mu);
  int rc = 0;
  rd->all_sent = rd->on_read != NULL;
  for (size_t t = 0; t < rd->nt; t++) {
    if (rc == 0 && (rc = rd->runs[t].rc) < 0)
      snprintf(job->why, sizeof job->why, "%s", rd->runs[t].why);
    rd->all_sent = rd->all_sent && rd->runs[t].sent;
  }
  rd->nt = 0;
  return rc;
}

int fzd_frames_read(fzd_job *job, size_t first, size_t k, uint8_t *dst, const uint64_t *at) {
  fzd_frames_reader rd = {0};
  fzd_frames_read_start(job, first, k, dst, at, &rd);
  return fzd_frames_read_wait(job, &rd);
}

int fzd_frames_open(struct fzd_frames_req *r, size_t i, uint64_t count, size_t listed) {
  fzd_frame_result *x = &r->res[i];
  frame_layout l = layout_of(r, listed);
  uint64_t bytes = FRAME_LEAD + l.end;
  /* EBUSY when the room is held by this batch's other frames or other
   * jobs (fewer frames a request, or later, fit); ENOMEM when one frame's
   * results alone pass memory_limit. */
  int rc = fzd_budget_take(r->mem, bytes, NULL);
  if (rc < 0) {
    fzd_frames_fail(r, i, rc, NULL);
    snprintf(x->why, sizeof x->why,
             rc == FZ_EBUSY ? "the frame's %llu bytes of results do not fit memory_limit now; "
                              "send fewer frames a request or try again later"
                            : "the frame's %llu bytes of results are more than memory_limit",
             (unsigned long long)bytes);
    return rc;
  }
  r->reserved += bytes;
  x->block = malloc(bytes);
  if (x->block == NULL) {
    fzd_budget_give(r->mem, bytes);
    r->reserved -= bytes;
    fzd_frames_fail(r, i, FZ_ENOMEM, "no memory for the frame's results");
    return FZ_ENOMEM;
  }
  /* The padding is zeroed: it is written to the output with the arrays. */
  uint8_t *at = x->block + FRAME_LEAD;
  uint64_t values = (uint64_t)listed * r->esize;
  memset(x->block, 0, FRAME_LEAD);
  x->values = at;
  if (!r->dense) {
    memset(at + values, 0, l.indices - values);
    x->indices = (uint32_t *)(void *)(at + l.indices);
  }
  if (r->rows) {
    memset(at + l.lists, 0, l.powder - l.lists);
    x->powder = at + l.powder;
  }
  x->count = count;
  x->listed = listed;
  return 0;
}

void fzd_frames_fail(struct fzd_frames_req *r, size_t i, int rc, const char *why) {
  fzd_frame_result *x = &r->res[i];
  result_drop(r, x);
  x->status = rc;
  x->count = x->listed = 0;
  snprintf(x->why, sizeof x->why, "%s", why != NULL ? why : fz_strerror(rc));
}

void fzd_frames_emit(fzd_job *job, size_t i) {
  struct fzd_frames_req *r = job->frames;
  fzd_frame_result *x = &r->res[i];
  if (!r->to_output || x->status < 0)
    return;
  frame_layout l = layout_of(r, x->listed);
  uint64_t at = (r->out_end + 7) & ~(uint64_t)7;
  if (r->full_from == r->n && l.end > 0 && (at > r->out_room || l.end > r->out_room - at)) {
    r->full_from = i;
    r->full_need = l.end;
  }
  if (r->full_from < r->n) {
    /* Every frame from the first that did not fit fails, so that the
     * results written are the batch's first frames and the client sends
     * the others again from there. */
    char why[sizeof x->why];
    snprintf(why, sizeof why,
             "the output is full from frame %zu on: that frame needs %llu bytes at %llu of %llu",
             r->full_from, (unsigned long long)r->full_need, (unsigned long long)at,
             (unsigned long long)r->out_room);
    fzd_frames_fail(r, i, FZ_ENOSPC, why);
    return;
  }
  x->values_at = at;
  x->indices_at = at + l.indices;
  x->powder_at = at + l.powder;
  if (l.end > 0) {
    /* One write from the previous frame's end: the padding before this
     * frame (zeros) and its arrays. */
    const uint8_t *from = x->block + FRAME_LEAD - (at - r->out_end);
    size_t len = (size_t)(at - r->out_end + l.end);
    int err = r->put != NULL ? r->put(r->put_ctx, job, r->out_end, from, len)
                             : fzd_job_pwrite(job, r->out_end, from, len);
    if (err < 0) {
      char why[sizeof x->why];
      snprintf(why, sizeof why, "%.*s", (int)sizeof why - 1, job->why);
      fzd_frames_fail(r, i, err, why);
      job->why[0] = '\0';
      return;
    }
    r->out_end = at + l.end;
  }
  result_drop(r, x);
}

int fzd_frames_end(fzd_job *job, uint64_t t0) {
  struct fzd_frames_req *r = job->frames;
  job->time_us = (uv_hrtime() - t0) / 1000;
  if (r->to_output) {
    job->out_len = r->out_end;
    return fzd_job_truncate(job, r->out_end);
  }
  uint64_t total = 0;
  for (size_t i = 0; i < r->n; i++)
    if (r->res[i].status == 0)
      total += r->res[i].listed * (r->esize + (r->dense ? 0 : 4)) + r->rows * 8 + 64;
  job->out_len = total;
  if (total > r->max_inline) {
    snprintf(job->why, sizeof job->why,
             "the results take %llu bytes, more than max_inline_bytes (%llu); send fewer "
             "frames a request",
             (unsigned long long)total, (unsigned long long)r->max_inline);
    return FZ_EMSGSIZE;
  }
  return 0;
}
#endif

#ifdef FZD_HAVE_FRAMES
fz_frames_params fzd_frames_params_of(const struct fzd_frames_req *r, fz_frames_csr *csr) {
  const fzd_frames_setup *su = r->setup;
  fz_frames_params fp = {
      .dtype = r->dtype, .npixels = (size_t)r->npixels, .codec = (fz_bslz4_codec)r->codec};
  if (su != NULL) {
    fp.mask = su->mask;
    if (su->has_csr) {
      *csr = (fz_frames_csr){.nrows = su->nrows,
                             .indptr = su->indptr,
                             .indices = su->indices,
                             .w_f32 = su->w_f32,
                             .w_i32 = su->w_i32};
      fp.csr = csr;
    }
  }
  return fp;
}

int fzd_frames_cpu_open(const struct fzd_frames_req *r, fzd_frames_cpu *c, char *why,
                        size_t why_len) {
  memset(c, 0, sizeof *c);
  size_t rows = r->setup != NULL && r->setup->has_csr ? r->setup->nrows : 0;
  c->cap = r->top_n && r->top_n < r->npixels ? (size_t)r->top_n : (size_t)r->npixels;
  c->values = malloc(r->dense ? r->npixels * r->esize : c->cap * r->esize);
  c->indices = r->dense ? NULL : malloc(c->cap * sizeof *c->indices);
  c->powder = rows ? malloc(rows * 8) : NULL;
  if (c->values == NULL || (!r->dense && c->indices == NULL) || (rows && c->powder == NULL)) {
    fzd_frames_cpu_close(c);
    snprintf(why, why_len, "no memory for the results of a frame");
    return FZ_ENOMEM;
  }
  fz_frames_csr csr = {0};
  fz_frames_params fp = fzd_frames_params_of(r, &csr);
  int err = fz_frames_create(&fp, &c->f, why, why_len);
  if (err < 0)
    fzd_frames_cpu_close(c);
  return err;
}

void fzd_frames_cpu_frame(struct fzd_frames_req *r, size_t i, fzd_frames_cpu *c,
                          const uint8_t *chunk, size_t len) {
  const fzd_frames_setup *su = r->setup;
  fzd_frame_result *x = &r->res[i];
  double *pw_f = su != NULL && su->w_f32 != NULL ? c->powder : NULL;
  int64_t *pw_i = su != NULL && su->w_i32 != NULL ? c->powder : NULL;
  int64_t rc;
  size_t listed;
  if (r->dense) {
    rc = fz_frames_dense(c->f, chunk, len, c->values, r->npixels * r->esize, pw_f, pw_i, x->why,
                         sizeof x->why);
    listed = (size_t)r->npixels;
  } else {
    fz_frames_out o = {.values = c->values,
                       .indices = c->indices,
                       .cap = c->cap,
                       .powder_f64 = pw_f,
                       .powder_i64 = pw_i};
    rc = fz_frames_sparse(c->f, chunk, len, r->cut, (size_t)r->top_n, &o, x->why, sizeof x->why);
    listed = o.count;
  }
  if (rc < 0) {
    char why[sizeof x->why];
    memcpy(why, x->why, sizeof why);
    fzd_frames_fail(r, i, (int)rc, why[0] ? why : NULL);
    return;
  }
  if (fzd_frames_open(r, i, r->dense ? r->npixels : (uint64_t)rc, listed) < 0)
    return;
  memcpy(x->values, c->values, listed * r->esize);
  if (!r->dense)
    memcpy(x->indices, c->indices, listed * 4);
  if (r->rows)
    memcpy(x->powder, c->powder, r->rows * 8);
}

void fzd_frames_cpu_close(fzd_frames_cpu *c) {
  fz_frames_destroy(c->f);
  free(c->values);
  free(c->indices);
  free(c->powder);
  memset(c, 0, sizeof *c);
}
#endif

int fzd_frames_job_run(fzd_job *job) {
#ifndef FZD_HAVE_FRAMES
  snprintf(job->why, sizeof job->why, "this fzd was built without the frames codec");
  return FZ_EMETHOD;
#else
  struct fzd_frames_req *r = job->frames;
  const fzd_frames_setup *su = r->setup;
  uint64_t t0 = uv_hrtime();
  size_t rows = su != NULL && su->has_csr ? su->nrows : 0;
  /* Scratch: one frame of results and the engine's copies of the mask and
   * the matrix. */
  uint64_t scratch =
      frame_out_max(r) + rows * 8 + r->npixels * (r->esize + 1) + (su != NULL ? su->bytes : 0);
  int err = fzd_frames_start(job, true, scratch);
  fzd_frames_cpu c;
  if (err < 0 || (err = fzd_frames_cpu_open(r, &c, job->why, sizeof job->why)) < 0)
    return err;
  for (size_t i = 0; i < r->n; i++) {
    fzd_frames_cpu_frame(r, i, &c, r->data + r->offsets[i], (size_t)r->lengths[i]);
    fzd_frames_emit(job, i);
  }
  fzd_frames_cpu_close(&c);
  return fzd_frames_end(job, t0);
#endif
}

/* One array of a frame's result: where it went in the output ("NAME_at"),
 * or its bytes inline ("NAME"). */
static void pack_part(msgpack_packer *pk, bool to_output, const char *name, uint64_t at,
                      const void *data, size_t len) {
  char key[24];
  snprintf(key, sizeof key, to_output ? "%s_at" : "%s", name);
  fzp_pack_key(pk, key);
  if (to_output) {
    msgpack_pack_uint64(pk, at);
    return;
  }
  msgpack_pack_bin(pk, len);
  msgpack_pack_bin_body(pk, data, len);
}

void fzd_frames_reply(fzd_conn *c, const fzd_job *job) {
  const struct fzd_frames_req *r = job->frames;
  msgpack_packer *pk = fzd_conn_packer(c);
  fzp_pack_result_begin(pk, job->msgid, 4 + (r->to_output ? 1 : 0) + (r->to_output && r->rows));
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, fz_dtype_name(r->dtype) ? fz_dtype_name(r->dtype) : "?");
  fzp_pack_key(pk, "output");
  fzp_pack_key(pk, r->dense ? "dense" : "sparse");
  fzp_pack_key(pk, "time_us");
  msgpack_pack_uint64(pk, job->time_us);
  if (r->to_output) {
    fzp_pack_key(pk, "bytes");
    msgpack_pack_uint64(pk, job->out_len);
  }
  if (r->to_output && r->rows) {
    fzp_pack_key(pk, "rows");
    msgpack_pack_uint64(pk, r->rows);
  }
  fzp_pack_key(pk, "frames");
  msgpack_pack_array(pk, r->n);
  for (size_t i = 0; i < r->n; i++) {
    const fzd_frame_result *x = &r->res[i];
    if (x->status < 0) {
      msgpack_pack_map(pk, 3);
      fzp_pack_key(pk, "count");
      msgpack_pack_uint64(pk, 0);
      fzp_pack_key(pk, "status");
      msgpack_pack_int64(pk, x->status);
      fzp_pack_key(pk, "error");
      msgpack_pack_map(pk, 3);
      fzp_pack_key(pk, "code");
      msgpack_pack_int64(pk, x->status);
      fzp_pack_key(pk, "name");
      fzp_pack_key(pk, fz_err_name(x->status));
      fzp_pack_key(pk, "message");
      fzp_pack_key(pk, x->why[0] ? x->why : fz_strerror(x->status));
      continue;
    }
    bool out = r->to_output;
    msgpack_pack_map(pk, 3 + out + !r->dense + (r->rows != 0));
    fzp_pack_key(pk, "count");
    msgpack_pack_uint64(pk, x->count);
    fzp_pack_key(pk, "status");
    msgpack_pack_int64(pk, 0);
    if (out) {
      fzp_pack_key(pk, "listed");
      msgpack_pack_uint64(pk, x->listed);
    }
    pack_part(pk, out, "values", x->values_at, x->values, x->listed * r->esize);
    if (!r->dense)
      pack_part(pk, out, "indices", x->indices_at, x->indices, x->listed * 4);
    if (r->rows)
      pack_part(pk, out, "powder", x->powder_at, x->powder, r->rows * 8);
  }
}
