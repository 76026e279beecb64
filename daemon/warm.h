/*
 * warm.h - preparing plans before jobs need them (warm.c): the entries of
 * the "warm" setting, prepared at start before READY=1, and those of a
 * "warm" request on a running daemon.  An entry is prepared on a worker,
 * through the backend's own job path, so its plan lands in the shared plan
 * cache (plans.h) exactly as a job's would; and it is checked there: a
 * synthetic field of its shape compressed and decompressed by the backend
 * must give the CPU engine's bytes.
 */
#ifndef FZD_WARM_H
#define FZD_WARM_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"

struct fzd_backend_ops;
struct fzd_job;

typedef struct fzd_warm_result {
  int err;            /* 0, or the entry's error (why says it) */
  char why[512];
  char chain[256];    /* the plan's canonical chain */
  bool cached;        /* the plan was in the cache already */
  bool identical;     /* both directions agreed with the CPU engine */
  bool skip;          /* refused before it ran (err, why set by the loop) */
  uint64_t us;        /* time to prepare and check it */
} fzd_warm_result;

/* The entries of one warm job and their results. */
typedef struct fzd_warm {
  unsigned n;
  unsigned next; /* the entry to run next (fzd_warm_job_run) */
  struct fzd_budget *mem; /* memory_limit, which each entry reserves from */
  fzd_warm_entry e[FZD_WARM_MAX];
  fzd_warm_result r[FZD_WARM_MAX];
} fzd_warm;

/* Runs the next entry of job->warm that is not skipped on this worker and
 * logs one line for it; per-entry errors go to their results.  Returns 1
 * when entries are left (the pool queues the job again, behind the jobs
 * that came meanwhile, so a long list never holds a worker from other
 * clients for more than one entry), else 0. */
int fzd_warm_job_run(const struct fzd_backend_ops *be, void *worker, struct fzd_job *job);

/* The memory one entry holds while it is prepared: its field, the CPU
 * engine's archive and decoded copy, and the backend's; an archive's room
 * is the field plus its header (the plan's compress bound). */
uint64_t fzd_warm_need(const fzd_warm_entry *e);

/* "f32 [512, 512] rel 0.001 balanced", for the log. */
void fzd_warm_describe(const fzd_warm_entry *e, char *buf, size_t len);

#endif
