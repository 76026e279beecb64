/*
 * stats.c - the counters behind the "stats" and "status" methods.  They are
 * touched only on the loop thread (a job is counted when its completion comes
 * back there), so they need no locks.
 */
#include "backend.h"
#include "log.h"
#include "notify.h"
#include "plans.h"
#include "server.h"

void fzd_stats_job(fzd_stats *st, const fzd_job *job) {
  /* A warm request moves no client data; its plans show in "plans". */
  if (job->kind == FZD_JOB_WARM)
    return;
  if (job->err < 0) {
    st->jobs_failed++;
    return;
  }
  st->jobs_done++;
  st->bytes_in += job->in_len;
  st->bytes_out += job->out_len;
  /* Frames have no per-method counters of their own (yet). */
  if (job->kind == FZD_JOB_FRAMES)
    return;
  fzd_op_stats *op = job->kind == FZD_JOB_COMPRESS ? &st->compress : &st->decompress;
  op->count++;
  op->bytes_in += job->in_len;
  op->bytes_out += job->out_len;
  op->time_us += job->time_us;
}

/* b - a, or 0 where a stage's stamps are missing or out of order. */
static uint64_t span(uint64_t a, uint64_t b) { return a != 0 && b > a ? b - a : 0; }

void fzd_stats_stages(fzd_stats *st, const fzd_job *job, uint64_t t_reply) {
  if (job->kind == FZD_JOB_WARM || job->kind == FZD_JOB_FRAMES)
    return;
  fzd_op_stats *op = job->kind == FZD_JOB_COMPRESS ? &st->compress : &st->decompress;
  op->parse_ns += span(job->t_read, job->t_queued);
  op->queue_ns += span(job->t_queued, job->t_start);
  op->worker_ns += span(job->t_start, job->t_end);
  op->reply_ns += span(job->t_end, t_reply);
}

static void pack_u64(msgpack_packer *pk, const char *key, uint64_t v) {
  fzp_pack_key(pk, key);
  msgpack_pack_uint64(pk, v);
}

static void pack_op(msgpack_packer *pk, const char *key, const fzd_op_stats *op) {
  fzp_pack_key(pk, key);
  msgpack_pack_map(pk, 8);
  pack_u64(pk, "count", op->count);
  pack_u64(pk, "bytes_in", op->bytes_in);
  pack_u64(pk, "bytes_out", op->bytes_out);
  pack_u64(pk, "time_us", op->time_us);
  pack_u64(pk, "parse_us", op->parse_ns / 1000u);
  pack_u64(pk, "queue_us", op->queue_ns / 1000u);
  pack_u64(pk, "worker_us", op->worker_ns / 1000u);
  pack_u64(pk, "reply_us", op->reply_ns / 1000u);
}

void fzd_stats_pack(fzd_server *srv, msgpack_packer *pk, uint32_t msgid) {
  const fzd_stats *st = &srv->stats;
  fzd_plan_counts pc = {0, 0, 0, 0, 0, 0, 0};
  fzd_jit_counts jc;
  bool jit = false;
  if (srv->pool != NULL) {
    fzd_pool_plan_counts(srv->pool, &pc);
    jit = fzd_pool_jit_counts(srv->pool, &jc);
  }
  fzp_pack_result_begin(pk, msgid, 11 + (jit ? 1 : 0));
  pack_u64(pk, "jobs_done", st->jobs_done);
  pack_u64(pk, "jobs_failed", st->jobs_failed);
  pack_u64(pk, "jobs_canceled", st->jobs_canceled);
  pack_u64(pk, "busy_rejections", st->busy_rejections);
  pack_u64(pk, "bytes_in", st->bytes_in);
  pack_u64(pk, "bytes_out", st->bytes_out);
  pack_u64(pk, "connections_total", st->connections_total);
  pack_u64(pk, "protocol_errors", st->protocol_errors);
  pack_op(pk, "compress", &st->compress);
  pack_op(pk, "decompress", &st->decompress);
  fzp_pack_key(pk, "plans");
  msgpack_pack_map(pk, 7);
  pack_u64(pk, "hits", pc.hits);
  pack_u64(pk, "created", pc.created);
  pack_u64(pk, "dropped", pc.dropped);
  pack_u64(pk, "held", pc.held);
  pack_u64(pk, "bytes", pc.bytes);
  pack_u64(pk, "budget", pc.budget);
  pack_u64(pk, "transient", pc.transient);
  if (!jit)
    return;
  fzp_pack_key(pk, "jit");
  msgpack_pack_map(pk, 10);
  pack_u64(pk, "mem_hits", jc.mem_hits);
  pack_u64(pk, "disk_hits", jc.disk_hits);
  pack_u64(pk, "misses", jc.misses);
  pack_u64(pk, "compiles", jc.compiles);
  pack_u64(pk, "compile_failures", jc.compile_failures);
  pack_u64(pk, "compile_ms", jc.compile_ms);
  pack_u64(pk, "disk_writes", jc.disk_writes);
  pack_u64(pk, "disk_rejected", jc.disk_rejected);
  pack_u64(pk, "disk_evicted", jc.disk_evicted);
  pack_u64(pk, "disk_bytes", jc.disk_bytes);
}

void fzd_pack_identity(const fzd_server *srv, msgpack_packer *pk) {
  fzp_pack_key(pk, "server");
  fzp_pack_key(pk, FZD_VERSION_STRING);
  fzp_pack_key(pk, "backend");
  fzp_pack_key(pk, srv->backend_name);
  fzp_pack_key(pk, "device");
  fzp_pack_key(pk, srv->device_name);
}

void fzd_status_pack(fzd_server *srv, msgpack_packer *pk, uint32_t msgid) {
  fzp_pack_result_begin(pk, msgid, 14);
  fzd_pack_identity(srv, pk);
  pack_u64(pk, "uptime_s", (fzd_notify_monotonic_usec() - srv->start_usec) / 1000000u);
  pack_u64(pk, "workers", srv->workers);
  pack_u64(pk, "connections", srv->nconns);
  pack_u64(pk, "queue_depth", fzd_pool_depth(srv->pool));
  pack_u64(pk, "queue_capacity", srv->cfg.queue_capacity);
  pack_u64(pk, "inflight", srv->inflight);
  pack_u64(pk, "jobs_done", srv->stats.jobs_done);
  pack_u64(pk, "jobs_failed", srv->stats.jobs_failed);
  /* memory_limit and what jobs, warm-up and messages still arriving hold
   * of it now; incoming is the last part alone. */
  pthread_mutex_lock(&srv->mem.mu);
  uint64_t held = srv->mem.used;
  pthread_mutex_unlock(&srv->mem.mu);
  pack_u64(pk, "memory_limit", srv->mem.limit);
  pack_u64(pk, "memory_held", held);
  pack_u64(pk, "memory_incoming", srv->in_reserved);
}
