/*
 * service.c - the calls about the server rather than about data: ping,
 * status, stats and presets.  Each is one fzc_call() and a copy of the
 * answer's named fields into a plain struct; fields the server leaves out
 * stay zero, so an older server still answers.
 */
#include <string.h>

#include "internal.h"

int fz_client_ping(fz_client *c, uint64_t *server_ns) {
  if (!c)
    return FZ_EINVAL;
  fzp_message msg;
  int rc = fzc_call(c, "ping", 0, NULL, NULL, &msg);
  if (rc < 0)
    return rc;
  uint64_t ns = 0;
  fzp_get_u64(&msg.result, "time_ns", &ns);
  fzp_message_free(&msg);
  if (server_ns)
    *server_ns = ns;
  return 0;
}

int fz_client_status(fz_client *c, fz_server_status *st) {
  if (!c || !st)
    return FZ_EINVAL;
  memset(st, 0, sizeof *st);
  fzp_message msg;
  int rc = fzc_call(c, "status", 0, NULL, NULL, &msg);
  if (rc < 0)
    return rc;
  const msgpack_object *m = &msg.result;
  fzc_get_strbuf(m, "server", st->server, sizeof st->server);
  fzc_get_strbuf(m, "backend", st->backend, sizeof st->backend);
  fzc_get_strbuf(m, "device", st->device, sizeof st->device);
  fzp_get_f64(m, "uptime_s", &st->uptime_s);
  fzp_get_u64(m, "workers", &st->workers);
  fzp_get_u64(m, "connections", &st->connections);
  fzp_get_u64(m, "queue_depth", &st->queue_depth);
  fzp_get_u64(m, "queue_capacity", &st->queue_capacity);
  fzp_get_u64(m, "jobs_done", &st->jobs_done);
  fzp_get_u64(m, "jobs_failed", &st->jobs_failed);
  fzp_message_free(&msg);
  return 0;
}

static void get_op_stats(const msgpack_object *m, const char *key, fz_op_stats *s) {
  const msgpack_object *o;
  if (fzp_get_obj(m, key, &o) != 1 || o->type != MSGPACK_OBJECT_MAP)
    return;
  fzp_get_u64(o, "count", &s->count);
  fzp_get_u64(o, "bytes_in", &s->bytes_in);
  fzp_get_u64(o, "bytes_out", &s->bytes_out);
  fzp_get_u64(o, "time_us", &s->time_us);
  fzp_get_u64(o, "parse_us", &s->parse_us);
  fzp_get_u64(o, "queue_us", &s->queue_us);
  fzp_get_u64(o, "worker_us", &s->worker_us);
  fzp_get_u64(o, "reply_us", &s->reply_us);
}

int fz_client_stats(fz_client *c, fz_server_stats *st) {
  if (!c || !st)
    return FZ_EINVAL;
  memset(st, 0, sizeof *st);
  fzp_message msg;
  int rc = fzc_call(c, "stats", 0, NULL, NULL, &msg);
  if (rc < 0)
    return rc;
  const msgpack_object *m = &msg.result;
  fzp_get_u64(m, "jobs_done", &st->jobs_done);
  fzp_get_u64(m, "jobs_failed", &st->jobs_failed);
  fzp_get_u64(m, "jobs_canceled", &st->jobs_canceled);
  fzp_get_u64(m, "busy_rejections", &st->busy_rejections);
  fzp_get_u64(m, "bytes_in", &st->bytes_in);
  fzp_get_u64(m, "bytes_out", &st->bytes_out);
  get_op_stats(m, "compress", &st->compress);
  get_op_stats(m, "decompress", &st->decompress);
  const msgpack_object *plans;
  if (fzp_get_obj(m, "plans", &plans) == 1 && plans->type == MSGPACK_OBJECT_MAP) {
    fzp_get_u64(plans, "hits", &st->plan_hits);
    fzp_get_u64(plans, "created", &st->plans_created);
    fzp_get_u64(plans, "dropped", &st->plans_dropped);
    fzp_get_u64(plans, "held", &st->plans_held);
    fzp_get_u64(plans, "bytes", &st->plan_bytes);
    fzp_get_u64(plans, "budget", &st->plan_budget);
    fzp_get_u64(plans, "transient", &st->plans_transient);
  }
  const msgpack_object *jit;
  if (fzp_get_obj(m, "jit", &jit) == 1 && jit->type == MSGPACK_OBJECT_MAP) {
    st->has_jit = 1;
    fzp_get_u64(jit, "mem_hits", &st->jit_mem_hits);
    fzp_get_u64(jit, "disk_hits", &st->jit_disk_hits);
    fzp_get_u64(jit, "misses", &st->jit_misses);
    fzp_get_u64(jit, "compiles", &st->jit_compiles);
    fzp_get_u64(jit, "compile_failures", &st->jit_compile_failures);
    fzp_get_u64(jit, "compile_ms", &st->jit_compile_ms);
    fzp_get_u64(jit, "disk_writes", &st->jit_disk_writes);
    fzp_get_u64(jit, "disk_rejected", &st->jit_disk_rejected);
    fzp_get_u64(jit, "disk_evicted", &st->jit_disk_evicted);
    fzp_get_u64(jit, "disk_bytes", &st->jit_disk_bytes);
  }
  fzp_message_free(&msg);
  return 0;
}

typedef struct warm_args {
  const fz_warm_plan *plans;
  size_t n;
} warm_args;

static void pack_warm(msgpack_packer *pk, const void *arg) {
  const warm_args *a = arg;
  fzp_pack_key(pk, "plans");
  msgpack_pack_array(pk, a->n);
  for (size_t i = 0; i < a->n; i++) {
    const fz_warm_plan *p = &a->plans[i];
    msgpack_pack_map(pk, 3 + (p->pipeline ? 1 : 0) + (p->mode ? 1 : 0));
    fzp_pack_key(pk, "dtype");
    fzp_pack_key(pk, p->dtype);
    fzp_pack_key(pk, "shape");
    msgpack_pack_array(pk, p->ndims);
    for (unsigned d = 0; d < p->ndims; d++)
      msgpack_pack_uint64(pk, p->shape[d]);
    fzp_pack_key(pk, "eb");
    msgpack_pack_double(pk, p->eb);
    if (p->pipeline) {
      fzp_pack_key(pk, "pipeline");
      fzp_pack_key(pk, p->pipeline);
    }
    if (p->mode) {
      fzp_pack_key(pk, "mode");
      fzp_pack_key(pk, p->mode);
    }
  }
}

int fz_client_warm(fz_client *c, const fz_warm_plan *plans, size_t n,
                   fz_warm_result *results) {
  if (!c || !plans || !results)
    return FZ_EINVAL;
  if (n == 0 || n > FZ_CLIENT_WARM_MAX)
    return fzc_fail(c, FZ_EPARAMS, "warm takes 1 to %d plans, not %zu", FZ_CLIENT_WARM_MAX,
                    n);
  for (size_t i = 0; i < n; i++)
    if (!plans[i].dtype || plans[i].ndims < 1 || plans[i].ndims > FZ_CLIENT_MAX_DIMS)
      return fzc_fail(c, FZ_EINVAL, "plans[%zu] needs a dtype and 1 to %d dimensions", i,
                      FZ_CLIENT_MAX_DIMS);
  memset(results, 0, n * sizeof *results);
  warm_args a = {plans, n};
  fzp_message msg;
  int rc = fzc_call(c, "warm", 1, pack_warm, &a, &msg);
  if (rc < 0)
    return rc;
  const msgpack_object *list;
  if (fzp_get_obj(&msg.result, "plans", &list) != 1 || list->type != MSGPACK_OBJECT_ARRAY ||
      list->via.array.size != n) {
    fzp_message_free(&msg);
    return fzc_fail(c, FZ_EPROTO, "the answer to 'warm' has no list of %zu plans", n);
  }
  for (size_t i = 0; i < n; i++) {
    const msgpack_object *e = &list->via.array.ptr[i], *err;
    fz_warm_result *r = &results[i];
    if (e->type != MSGPACK_OBJECT_MAP) {
      r->status = FZ_EPROTO;
      continue;
    }
    fzc_get_strbuf(e, "chain", r->chain, sizeof r->chain);
    bool cached = false;
    fzp_get_bool(e, "cached", &cached);
    r->cached = cached;
    fzp_get_f64(e, "ms", &r->ms);
    if (fzp_get_obj(e, "error", &err) == 1 && err->type == MSGPACK_OBJECT_MAP) {
      int64_t code = FZ_EPROTO;
      fzp_get_i64(err, "code", &code);
      r->status = code < 0 && code > INT32_MIN ? (int)code : FZ_EPROTO;
      fzc_get_strbuf(err, "message", r->message, sizeof r->message);
    }
  }
  fzp_message_free(&msg);
  return 0;
}

int fz_client_presets(fz_client *c, fz_preset_info *presets, size_t cap,
                      size_t *count) {
  if (!c || (cap && !presets))
    return FZ_EINVAL;
  fzp_message msg;
  int rc = fzc_call(c, "presets", 0, NULL, NULL, &msg);
  if (rc < 0)
    return rc;
  const msgpack_object *list;
  if (fzp_get_obj(&msg.result, "presets", &list) != 1 ||
      list->type != MSGPACK_OBJECT_ARRAY) {
    fzp_message_free(&msg);
    return fzc_fail(c, FZ_EPROTO, "the answer to 'presets' has no list");
  }
  size_t n = list->via.array.size;
  for (size_t i = 0; i < n && i < cap; i++) {
    const msgpack_object *p = &list->via.array.ptr[i];
    fz_preset_info *out = &presets[i];
    memset(out, 0, sizeof *out);
    if (p->type != MSGPACK_OBJECT_MAP)
      continue;
    fzc_get_strbuf(p, "name", out->name, sizeof out->name);
    fzc_get_strbuf(p, "chain", out->chain, sizeof out->chain);
    fzc_get_strbuf(p, "description", out->description, sizeof out->description);
  }
  fzp_message_free(&msg);
  if (count)
    *count = n;
  return 0;
}
