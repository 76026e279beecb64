/*
 * budget.h - the host memory that memory_limit bounds (budget.c): one
 * counter shared by the loop thread (the input buffers of messages still
 * arriving, conn.c), the workers (a job's buffers, cpu.c) and warm-up
 * (warm.c).  Each reserves before it allocates and gives back after it
 * frees, so that what all of them hold together stays under the limit
 * whatever the clients send.
 */
#ifndef FZD_BUDGET_H
#define FZD_BUDGET_H

#include <pthread.h>
#include <stdint.h>

typedef struct fzd_budget {
  pthread_mutex_t mu;
  uint64_t limit; /* bytes */
  uint64_t used;  /* under mu */
} fzd_budget;

/* limit 0: three quarters of the physical memory, or of the cgroup's
 * memory.max when that is lower. */
void fzd_budget_init(fzd_budget *b, uint64_t limit);
void fzd_budget_destroy(fzd_budget *b);

/* Reserves bytes: 0, FZ_ENOMEM when bytes alone are more than the limit
 * (it can never fit), or FZ_EBUSY when they do not fit beside what is held
 * now.  *used_now (may be NULL) gets what was held before the call. */
int fzd_budget_take(fzd_budget *b, uint64_t bytes, uint64_t *used_now);
void fzd_budget_give(fzd_budget *b, uint64_t bytes);

#endif
