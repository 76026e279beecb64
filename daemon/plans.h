/*
 * plans.h - the daemon's one cache of finalized plans, shared by the
 * workers of a backend (cpu.c, gpu.c).
 *
 * A plan is what a backend makes of a job's parameters (dtype, shape,
 * canonical chain, bound, fill): an fz_plan on the CPU, a GPU plan with its
 * preallocated device workspace on the GPU.  Making one costs far more than
 * a small job, and the next job is very often the same shape, so finished
 * plans stay.  A plan serves one job at a time: a worker takes one (busy)
 * and puts it back; any worker may take any idle plan, so a client's
 * same-shape jobs find a warm plan whichever worker runs them.  The cache
 * has a fixed number of slots, grown per worker at start-up, so there is
 * always an idle slot for a worker that holds none; when every slot is in
 * use or full, the least recently used idle plan makes room.
 *
 * The plans' memory is bounded too (plan_cache_bytes): each plan's bytes
 * come from its backend, and a new plan makes room by destroying idle
 * plans, least recently used first, never one a job is using.  A plan that
 * cannot fit (larger than the whole budget, or the rest is held by busy
 * plans) still serves the job it was made for, and is destroyed when that
 * job ends (counted as transient): a job is never refused for the cache's
 * sake, and the plans kept never hold more than the budget.
 *
 * Keys are canonical: fzd_plans_take() first rewrites the job's pipeline
 * text as its canonical chain, so a preset and the chain it stands for, or
 * two spellings of one chain, share one plan.
 */
#ifndef FZD_PLANS_H
#define FZD_PLANS_H

#include <stddef.h>
#include <stdint.h>

#include "fz.h"

struct fzd_job;
typedef struct fzd_plans fzd_plans;
typedef struct fzd_plan_slot fzd_plan_slot;

/* How a backend makes and frees its plans.  create() gets the job's
 * parameters with the canonical pipeline; a failure's message goes to why.
 * Both run without the cache's lock, on the worker's thread.  bytes() is
 * the memory a plan holds while it lives (what the budget counts). */
typedef struct fzd_plan_kind {
  int (*create)(void *arg, const fz_params *p, void **plan, char *why, size_t why_len);
  void (*destroy)(void *arg, void *plan);
  uint64_t (*bytes)(void *arg, const void *plan);
  void *arg;
} fzd_plan_kind;

/* budget: bytes the kept plans may hold together; 0: no bound but the
 * number of slots. */
int fzd_plans_create(const fzd_plan_kind *kind, uint64_t budget, fzd_plans **out);
/* Destroys every plan; none may be busy.  NULL is a harmless no-op. */
void fzd_plans_destroy(fzd_plans *c);
/* Adds n empty slots (at start-up, before the workers run). */
int fzd_plans_add_slots(fzd_plans *c, unsigned n);

/* A plan for the job, busy until fzd_plans_put(*slot): an idle cached one
 * (job->plan_hit is then set), or one made in the slot of an empty or least
 * recently used idle plan.  Rewrites job->pipeline as its canonical text
 * first.  On failure *slot
 * may still hold a slot (the plan could not be made in it): put it back
 * all the same; it is NULL when none was taken. */
int fzd_plans_take(fzd_plans *c, struct fzd_job *job, void **plan, fzd_plan_slot **slot);
void fzd_plans_put(fzd_plans *c, fzd_plan_slot *slot); /* NULL is a no-op */
/* Destroys every idle plan (to give their memory back). */
void fzd_plans_trim(fzd_plans *c);

/* What the cache has done, for "stats": jobs that found their plan (hits),
 * plans made (each one a miss), plans destroyed to make room or by a trim,
 * the plans held now and their bytes, the budget (0: none), and the plans
 * that did not fit it and served one job only (transient). */
typedef struct fzd_plan_counts {
  uint64_t hits, created, dropped, held;
  uint64_t bytes, budget, transient;
} fzd_plan_counts;
void fzd_plans_counts(fzd_plans *c, fzd_plan_counts *out);

#endif
