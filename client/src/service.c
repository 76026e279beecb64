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
