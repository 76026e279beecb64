/*
 * frames.c - the "frames" method: a batch of detector chunks (HDF5 filter
 * 32008) decoded by the CPU engine into the pixels above a cut, or into
 * dense frames.
 *
 * The loop thread checks every param and every chunk's offset and length
 * against the bytes sent before a job exists; the worker then runs each
 * chunk on its own, so a corrupt chunk fails its frame only (its status and
 * message in the reply) and the others still come back.  The job reserves
 * its memory (the chunks, the worst-case results and one frame of scratch)
 * against memory_limit before it allocates, and gives it back when the job
 * is freed, after the reply is packed.  On both backends the CPU engine
 * runs it: the GPU decoder (kernels/frames) is not yet verified on a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frames.h"
#include "log.h"

#ifdef FZD_HAVE_FRAMES
#include "fz_frames.h"
#endif

typedef struct fzd_frame_result {
  int status;
  char why[128];
  uint64_t count; /* pixels above the cut (sparse), listed count below */
  size_t listed;
  void *values;      /* sparse: listed values; dense: the frame */
  uint32_t *indices; /* sparse only */
} fzd_frame_result;

struct fzd_frames_req {
  fzd_budget *mem;
  uint64_t reserved; /* bytes of mem held by the job */
  fz_dtype dtype;
  size_t esize;
  uint64_t npixels;
  int codec; /* fz_bslz4_codec */
  double cut;
  uint64_t top_n;
  bool dense;
  uint64_t max_inline;
  uint8_t *data; /* the chunks, one copy */
  uint64_t *offsets, *lengths;
  size_t n;
  fzd_frame_result *res;
};

static const char *const frames_keys[] = {"chunks", "data", "offsets", "lengths", "dtype", "shape",
                                          "codec",  "cut",  "top_n",   "output",  NULL};

void fzd_frames_free(struct fzd_frames_req *r) {
  if (r == NULL)
    return;
  if (r->res != NULL)
    for (size_t i = 0; i < r->n; i++) {
      free(r->res[i].values);
      free(r->res[i].indices);
    }
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

/* The chunks: "chunks" (a list of bin) or "data" with "offsets" and
 * "lengths"; each range checked against the bytes sent. */
static int parse_chunks(const msgpack_object *p, struct fzd_frames_req *r, char *why, size_t cap) {
  const msgpack_object *list = NULL, *offs = NULL, *lens = NULL;
  const void *data = NULL;
  uint32_t data_len = 0;
  int has_list = fzp_get_obj(p, "chunks", &list);
  int has_data = fzp_get_bin(p, "data", &data, &data_len);
  int has_offs = fzp_get_obj(p, "offsets", &offs);
  int has_lens = fzp_get_obj(p, "lengths", &lens);
  if (has_list < 0 || has_data < 0 || has_offs < 0 || has_lens < 0 || has_list + has_data != 1) {
    snprintf(why, cap,
             "frames needs exactly one of \"chunks\" (a list of bin) and \"data\" "
             "(a bin, with \"offsets\" and \"lengths\")");
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

static int parse_frames(fzd_server *srv, const msgpack_object *p, struct fzd_frames_req *r,
                        char *why, size_t cap) {
  const char *s = NULL;
  uint32_t len = 0;
  char text[32];
  const msgpack_object *shape = NULL;
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
  if (fzp_get_obj(p, "shape", &shape) != 1 || shape->type != MSGPACK_OBJECT_ARRAY ||
      shape->via.array.size < 1 || shape->via.array.size > 2) {
    snprintf(why, cap, "frames needs \"shape\", the frame's 1 or 2 extents");
    return FZ_EPARAMS;
  }
  r->npixels = 1;
  for (uint32_t i = 0; i < shape->via.array.size; i++) {
    const msgpack_object *e = &shape->via.array.ptr[i];
    if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER || e->via.u64 == 0 ||
        e->via.u64 >= ((uint64_t)1 << 32) || r->npixels * e->via.u64 >= ((uint64_t)1 << 32)) {
      snprintf(why, cap, "\"shape\": extents above 0 whose product is below 2^32");
      return FZ_ESHAPE;
    }
    r->npixels *= e->via.u64;
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
  return parse_chunks(p, r, why, cap);
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
  if (p->type != MSGPACK_OBJECT_MAP) {
    code = FZ_EPARAMS;
    snprintf(why, sizeof why, "frames: params must be a map");
    goto fail;
  }
  for (uint32_t i = 0; i < p->via.map.size; i++) {
    const msgpack_object *k = &p->via.map.ptr[i].key;
    bool known = false;
    for (const char *const *w = frames_keys; *w != NULL && !known; w++)
      known = k->type == MSGPACK_OBJECT_STR && strlen(*w) == k->via.str.size &&
              memcmp(*w, k->via.str.ptr, k->via.str.size) == 0;
    if (!known) {
      code = FZ_EPARAMS;
      snprintf(why, sizeof why,
               "frames: unknown param (it takes chunks, data, offsets, "
               "lengths, dtype, shape, codec, cut, top_n, output)");
      goto fail;
    }
  }
  char sub[400];
  if ((code = parse_frames(srv, p, r, sub, sizeof sub)) < 0) {
    snprintf(why, sizeof why, "frames: %s", sub);
    goto fail;
  }
  r->mem = &srv->mem;
  r->max_inline = srv->cfg.max_inline_bytes;
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
  job->conn = c;
  uint64_t worst = (uint64_t)r->n * (frame_out_max(r) + 64) + 64;
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

int fzd_frames_job_run(fzd_job *job) {
#ifndef FZD_HAVE_FRAMES
  snprintf(job->why, sizeof job->why, "this fzd was built without the frames codec");
  return FZ_EMETHOD;
#else
  struct fzd_frames_req *r = job->frames;
  uint64_t t0 = uv_hrtime();
  uint64_t chunk_bytes = 0;
  for (size_t i = 0; i < r->n; i++)
    chunk_bytes += r->lengths[i];
  uint64_t scratch = r->npixels * (r->esize + 4) * 2;
  uint64_t need = chunk_bytes + (uint64_t)r->n * frame_out_max(r) + scratch;
  int err = fzd_budget_take(r->mem, need, NULL);
  if (err < 0) {
    snprintf(job->why, sizeof job->why,
             err == FZ_ENOMEM ? "the batch needs about %llu bytes of memory, more than "
                                "memory_limit (%llu); send fewer frames a request"
                              : "the batch needs about %llu bytes of memory and "
                                "memory_limit (%llu) is taken by other jobs; try again later",
             (unsigned long long)need, (unsigned long long)r->mem->limit);
    return err;
  }
  r->reserved = need;
  r->res = calloc(r->n, sizeof *r->res);
  fz_frames_params fp = {
      .dtype = r->dtype, .npixels = (size_t)r->npixels, .codec = (fz_bslz4_codec)r->codec};
  fz_frames *f = NULL;
  if (r->res == NULL) {
    snprintf(job->why, sizeof job->why, "no memory for the results of %zu frames", r->n);
    return FZ_ENOMEM;
  }
  if ((err = fz_frames_create(&fp, &f, job->why, sizeof job->why)) < 0)
    return err;
  size_t cap = r->top_n && r->top_n < r->npixels ? (size_t)r->top_n : (size_t)r->npixels;
  uint64_t total = 0;
  for (size_t i = 0; i < r->n; i++) {
    fzd_frame_result *x = &r->res[i];
    const uint8_t *chunk = r->data + r->offsets[i];
    size_t len = (size_t)r->lengths[i];
    if (r->dense) {
      x->values = malloc(r->npixels * r->esize);
      if (x->values == NULL) {
        x->status = FZ_ENOMEM;
        snprintf(x->why, sizeof x->why, "no memory for the frame");
        continue;
      }
      int rc = fz_frames_dense(f, chunk, len, x->values, r->npixels * r->esize, NULL, NULL, x->why,
                               sizeof x->why);
      if (rc < 0) {
        x->status = rc;
        free(x->values);
        x->values = NULL;
        continue;
      }
      x->count = r->npixels;
      x->listed = r->npixels;
    } else {
      x->values = malloc(cap * r->esize);
      x->indices = malloc(cap * sizeof(uint32_t));
      if (x->values == NULL || x->indices == NULL) {
        x->status = FZ_ENOMEM;
        snprintf(x->why, sizeof x->why, "no memory for the frame's pixels");
      } else {
        fz_frames_out o = {.values = x->values, .indices = x->indices, .cap = cap};
        int64_t rc =
            fz_frames_sparse(f, chunk, len, r->cut, (size_t)r->top_n, &o, x->why, sizeof x->why);
        if (rc < 0) {
          x->status = (int)rc;
        } else {
          x->count = (uint64_t)rc;
          x->listed = o.count;
        }
      }
      if (x->status < 0) {
        free(x->values);
        free(x->indices);
        x->values = NULL;
        x->indices = NULL;
        continue;
      }
    }
    total += x->listed * (r->esize + (r->dense ? 0 : 4)) + 64;
  }
  fz_frames_destroy(f);
  job->time_us = (uv_hrtime() - t0) / 1000;
  job->in_len = chunk_bytes;
  job->out_len = total;
  if (total > r->max_inline) {
    snprintf(job->why, sizeof job->why,
             "the results take %llu bytes, more than "
             "max_inline_bytes (%llu); send fewer frames a request",
             (unsigned long long)total, (unsigned long long)r->max_inline);
    return FZ_EMSGSIZE;
  }
  return 0;
#endif
}

void fzd_frames_reply(fzd_conn *c, const fzd_job *job) {
  const struct fzd_frames_req *r = job->frames;
  msgpack_packer *pk = fzd_conn_packer(c);
  fzp_pack_result_begin(pk, job->msgid, 4);
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, fz_dtype_name(r->dtype) ? fz_dtype_name(r->dtype) : "?");
  fzp_pack_key(pk, "output");
  fzp_pack_key(pk, r->dense ? "dense" : "sparse");
  fzp_pack_key(pk, "time_us");
  msgpack_pack_uint64(pk, job->time_us);
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
    msgpack_pack_map(pk, r->dense ? 3 : 4);
    fzp_pack_key(pk, "count");
    msgpack_pack_uint64(pk, x->count);
    fzp_pack_key(pk, "status");
    msgpack_pack_int64(pk, 0);
    fzp_pack_key(pk, "values");
    msgpack_pack_bin(pk, x->listed * r->esize);
    msgpack_pack_bin_body(pk, x->values, x->listed * r->esize);
    if (!r->dense) {
      fzp_pack_key(pk, "indices");
      msgpack_pack_bin(pk, x->listed * 4);
      msgpack_pack_bin_body(pk, x->indices, x->listed * 4);
    }
  }
}
