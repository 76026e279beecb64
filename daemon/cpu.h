/*
 * cpu.h - the CPU backend of the worker pool (cpu.c).
 */
#ifndef FZD_CPU_H
#define FZD_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "budget.h"
#include "fz.h"

/* Fills be with the CPU backend: plan_cache_entries plans shared by the
 * workers (plus one slot per worker) holding at most plan_cache_bytes
 * together (0: no byte bound), and the running jobs' buffers reserved from
 * mem (memory_limit), which must outlive the backend. */
int fzd_cpu_backend(unsigned plan_cache_entries, uint64_t plan_cache_bytes,
                    fzd_budget *mem, fzd_backend_ops *be);

/* One compression by the engine, as the CPU backend makes it for a result
 * held whole in memory: job->in_len bytes at in into arc (cap bytes, at
 * least the plan's bound; *arc_len its length) with plan, the time and the
 * bound enforced set in job, and with job->verify the archive decoded on
 * `threads` threads into back (job->in_len bytes; NULL fails with
 * FZ_ENOMEM) and compared with in, the errors set in job.  A failure's
 * message is in job->why.  The GPU backend's fallback calls it too. */
int fzd_cpu_compress_buffer(struct fzd_job *job, fz_plan *plan, const void *in, void *arc,
                            size_t cap, size_t *arc_len, void *back, unsigned threads);

#endif
