/*
 * budget.c - the memory_limit counter (budget.h).  A mutex, not atomics:
 * a reservation compares and adds, and the loop and the workers reserve a
 * few times per job, far below the cost of the work they reserve for.
 */
#include "budget.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fz_error.h"

/* The cgroup v2 memory.max of this process, or UINT64_MAX. */
static uint64_t cgroup_limit(void) {
  char line[512], path[600];
  uint64_t limit = UINT64_MAX;
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (f == NULL)
    return limit;
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "0::", 3) != 0)
      continue;
    line[strcspn(line, "\n")] = '\0';
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", line + 3);
    FILE *m = fopen(path, "r");
    unsigned long long v;
    if (m != NULL && fscanf(m, "%llu", &v) == 1)
      limit = v;
    if (m != NULL)
      fclose(m);
  }
  fclose(f);
  return limit;
}

/* Three quarters of the physical memory, or of the cgroup's limit when
 * that is lower, leaving room for the daemon itself, the page cache and
 * the clients. */
static uint64_t derived_limit(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t phys = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_C(1) << 32;
  uint64_t cg = cgroup_limit();
  if (cg < phys)
    phys = cg;
  return phys / 4 * 3;
}

void fzd_budget_init(fzd_budget *b, uint64_t limit) {
  pthread_mutex_init(&b->mu, NULL);
  b->limit = limit ? limit : derived_limit();
  b->used = 0;
}

void fzd_budget_destroy(fzd_budget *b) {
  pthread_mutex_destroy(&b->mu);
}

int fzd_budget_take(fzd_budget *b, uint64_t bytes, uint64_t *used_now) {
  int err = 0;
  pthread_mutex_lock(&b->mu);
  if (used_now != NULL)
    *used_now = b->used;
  if (bytes > b->limit)
    err = FZ_ENOMEM;
  else if (bytes > b->limit - b->used)
    err = FZ_EBUSY;
  else
    b->used += bytes;
  pthread_mutex_unlock(&b->mu);
  return err;
}

void fzd_budget_give(fzd_budget *b, uint64_t bytes) {
  pthread_mutex_lock(&b->mu);
  b->used -= bytes;
  pthread_mutex_unlock(&b->mu);
}
