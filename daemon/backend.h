/*
 * backend.h - what the worker pool (pool.c) asks of a backend: the CPU
 * engine (cpu.c) or the GPU (gpu.c).  The pool owns the threads, the queue
 * and the way finished jobs get back to the loop; a backend owns what its
 * workers keep between jobs (buffers, streams, the one plan cache of
 * plans.h) and runs one job at a time per worker.
 */
#ifndef FZD_BACKEND_H
#define FZD_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fzd_job;

/* What the kernels' run-time compiler has done (GPU backend), for "stats". */
typedef struct fzd_jit_counts {
  uint64_t mem_hits, disk_hits, misses, compiles, compile_failures, compile_ms;
  uint64_t disk_writes, disk_rejected, disk_evicted, disk_bytes;
} fzd_jit_counts;

typedef struct fzd_backend_ops {
  const char *name; /* "cpu", "gpu" */
  void *state;      /* the backend's, passed to worker_create */
  /* The state of worker `index`, made on the main thread before the
   * worker's thread starts; a failure stops the start-up with why. */
  int (*worker_create)(void *state, unsigned index, void **worker, char *why, size_t why_len);
  void (*worker_destroy)(void *worker);
  /* Runs one job on the worker's thread; returns the job's error. */
  int (*run)(void *worker, struct fzd_job *job);
  /* Runs a "frames" job (frames.h) with the backend's own decoder; NULL:
   * the CPU engine runs it (fzd_frames_job_run). */
  int (*frames)(void *worker, struct fzd_job *job);
  /* The queue has been empty for idle_ms (0: just after a job): the worker
   * gives back what it need not keep.  Called once per idle stretch. */
  void (*idle)(void *worker);
  unsigned idle_ms;
  /* A worker looks at the queue this long before it sleeps (0: sleeps at
   * once), and is pinned to a core of its own when pin_cores (main.c sets
   * it from the cpu_affinity setting). */
  unsigned spin_us;
  bool pin_cores;
  /* The backend's plan cache (plans.h), for its counters in "stats". */
  struct fzd_plans *plans;
  /* The backend's JIT counters; NULL when it compiles nothing (CPU). */
  void (*jit_counts)(void *state, fzd_jit_counts *out);
  /* Frees the state once every worker is destroyed; may be NULL. */
  void (*destroy)(void *state);
} fzd_backend_ops;

#endif
