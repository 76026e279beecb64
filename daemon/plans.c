/*
 * plans.c - the plan cache of plans.h: slots under one mutex, each holding
 * a backend's plan with the parameters it was made for, a busy flag and a
 * last-use tick.  Lookups compare parameters field by field and pipelines
 * as canonical text; plans are made and destroyed outside the lock (a slot
 * is marked busy first, so no other worker touches it meanwhile).  The
 * budget is checked once a new plan exists, because only then are its
 * bytes known: idle plans are destroyed, oldest first, while the kept
 * plans and the new one would pass it, and when even that cannot make it
 * fit the new plan is transient (its slot empties when its job ends).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "plans.h"
#include "server.h"

struct fzd_plan_slot {
  fz_params key; /* key.pipeline is not used: pipeline below */
  char pipeline[FZD_PIPELINE_MAX];
  void *plan;
  uint64_t bytes; /* kind.bytes(plan), counted in n.bytes unless transient */
  uint64_t used;
  bool busy;
  bool transient; /* destroyed at put: it did not fit the budget */
};

struct fzd_plans {
  fzd_plan_kind kind;
  pthread_mutex_t mu;
  fzd_plan_slot *slots;
  unsigned nslots;
  uint64_t tick;
  fzd_plan_counts n; /* under mu */
};

int fzd_plans_create(const fzd_plan_kind *kind, uint64_t budget, fzd_plans **out) {
  fzd_plans *c = calloc(1, sizeof *c);
  if (c == NULL)
    return FZ_ENOMEM;
  c->kind = *kind;
  c->n.budget = budget;
  pthread_mutex_init(&c->mu, NULL);
  *out = c;
  return 0;
}

void fzd_plans_destroy(fzd_plans *c) {
  if (c == NULL)
    return;
  for (unsigned i = 0; i < c->nslots; i++)
    if (c->slots[i].plan != NULL)
      c->kind.destroy(c->kind.arg, c->slots[i].plan);
  free(c->slots);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

int fzd_plans_add_slots(fzd_plans *c, unsigned n) {
  fzd_plan_slot *s = realloc(c->slots, (c->nslots + n) * sizeof *s);
  if (s == NULL)
    return FZ_ENOMEM;
  memset(s + c->nslots, 0, n * sizeof *s);
  c->slots = s;
  c->nslots += n;
  return 0;
}

/* Whether a plan made for (a, pipeline) serves the job: every parameter
 * that shapes an archive (the pipelines are canonical text both). */
static bool same_plan(const fzd_plan_slot *e, const fzd_job *job) {
  const fz_params *a = &e->key, *b = &job->params;
  if (a->dtype != b->dtype || a->ndims != b->ndims || a->eb_mode != b->eb_mode ||
      memcmp(&a->eb, &b->eb, sizeof(a->eb)) != 0 || a->has_fill != b->has_fill ||
      (a->has_fill && memcmp(&a->fill_value, &b->fill_value, sizeof(a->fill_value)) != 0) ||
      a->chunk_bytes != b->chunk_bytes)
    return false;
  for (unsigned i = 0; i < a->ndims; i++)
    if (a->dims[i] != b->dims[i])
      return false;
  return strcmp(e->pipeline, job->pipeline) == 0;
}

/* Rewrites the job's pipeline text as its canonical chain.  A text that
 * does not parse is left alone: plan creation reports its error. */
static void canonical_pipeline(fzd_job *job) {
  char canon[FZD_PIPELINE_MAX];
  if (fz_pipeline_canonical(job->pipeline[0] ? job->pipeline : NULL, canon, sizeof canon, NULL,
                            0) == 0)
    memcpy(job->pipeline, canon, sizeof canon);
}

/* Empties an idle slot under mu; returns its plan for the caller to
 * destroy once the lock is let go. */
static void *evict(fzd_plans *c, fzd_plan_slot *e) {
  void *old = e->plan;
  e->plan = NULL;
  if (old != NULL) {
    c->n.dropped++;
    c->n.held--;
    c->n.bytes -= e->bytes;
  }
  e->bytes = 0;
  return old;
}

/* The least recently used idle plan other than `keep`, or NULL (mu held). */
static fzd_plan_slot *oldest_idle(fzd_plans *c, const fzd_plan_slot *keep) {
  fzd_plan_slot *best = NULL;
  for (unsigned i = 0; i < c->nslots; i++) {
    fzd_plan_slot *e = &c->slots[i];
    if (e != keep && !e->busy && e->plan != NULL && (best == NULL || e->used < best->used))
      best = e;
  }
  return best;
}

/* Keeps the new plan of slot s (busy, not yet counted) under the budget:
 * destroys idle plans, oldest first, while it would not fit, or makes it
 * transient when destroying every idle plan would still not do. */
static void admit(fzd_plans *c, fzd_plan_slot *s) {
  pthread_mutex_lock(&c->mu);
  c->n.created++;
  uint64_t budget = c->n.budget;
  if (budget != 0) {
    uint64_t idle = 0;
    for (unsigned i = 0; i < c->nslots; i++)
      if (&c->slots[i] != s && !c->slots[i].busy && c->slots[i].plan != NULL)
        idle += c->slots[i].bytes;
    if (s->bytes > budget || c->n.bytes - idle > budget - s->bytes) {
      s->transient = true;
      c->n.transient++;
      pthread_mutex_unlock(&c->mu);
      return;
    }
    while (c->n.bytes > budget - s->bytes) {
      fzd_plan_slot *v = oldest_idle(c, s);
      if (v == NULL) {
        /* Other workers took the idle plans while the lock was let go. */
        s->transient = true;
        c->n.transient++;
        pthread_mutex_unlock(&c->mu);
        return;
      }
      void *old = evict(c, v);
      /* v is idle and empty now; destroying outside the lock would let
       * another worker fill it meanwhile, which is harmless, but the bytes
       * would then be counted before they are given back. */
      v->busy = true;
      pthread_mutex_unlock(&c->mu);
      c->kind.destroy(c->kind.arg, old);
      pthread_mutex_lock(&c->mu);
      v->busy = false;
    }
  }
  c->n.held++;
  c->n.bytes += s->bytes;
  pthread_mutex_unlock(&c->mu);
}

int fzd_plans_take(fzd_plans *c, fzd_job *job, void **plan, fzd_plan_slot **slot) {
  *plan = NULL;
  *slot = NULL;
  job->plan_hit = false;
  canonical_pipeline(job);
  pthread_mutex_lock(&c->mu);
  fzd_plan_slot *victim = NULL;
  for (unsigned i = 0; i < c->nslots; i++) {
    fzd_plan_slot *e = &c->slots[i];
    if (e->busy)
      continue;
    if (e->plan != NULL && same_plan(e, job)) {
      e->busy = true;
      e->used = ++c->tick;
      c->n.hits++;
      pthread_mutex_unlock(&c->mu);
      job->plan_hit = true;
      *plan = e->plan;
      *slot = e;
      return 0;
    }
    if (victim == NULL || (victim->plan != NULL && (e->plan == NULL || e->used < victim->used)))
      victim = e;
  }
  if (victim == NULL) {
    /* Every slot busy: only when a caller takes more than its share. */
    pthread_mutex_unlock(&c->mu);
    snprintf(job->why, sizeof(job->why), "every plan slot is in use");
    return FZ_EBUSY;
  }
  victim->busy = true;
  victim->used = ++c->tick;
  void *old = evict(c, victim);
  pthread_mutex_unlock(&c->mu);
  *slot = victim;
  if (old != NULL)
    c->kind.destroy(c->kind.arg, old);
  fz_params p = job->params;
  p.pipeline = job->pipeline[0] ? job->pipeline : NULL;
  int err = c->kind.create(c->kind.arg, &p, plan, job->why, sizeof(job->why));
  if (err < 0)
    return err; /* the slot stays empty and goes back idle at put */
  victim->plan = *plan;
  victim->bytes = c->kind.bytes(c->kind.arg, *plan);
  victim->key = job->params;
  memcpy(victim->pipeline, job->pipeline, sizeof(victim->pipeline));
  admit(c, victim);
  fzd_debug("plan created for %s (%llu bytes%s)",
            job->pipeline[0] ? job->pipeline : "the default pipeline",
            (unsigned long long)victim->bytes,
            victim->transient ? ", over plan_cache_bytes: destroyed after this job" : "");
  return 0;
}

void fzd_plans_put(fzd_plans *c, fzd_plan_slot *slot) {
  if (slot == NULL)
    return;
  void *gone = NULL;
  pthread_mutex_lock(&c->mu);
  if (slot->transient) {
    gone = slot->plan;
    slot->plan = NULL;
    slot->bytes = 0;
    slot->transient = false;
  }
  if (gone == NULL)
    slot->busy = false;
  pthread_mutex_unlock(&c->mu);
  if (gone == NULL)
    return;
  /* The slot stays busy (empty) until its plan is gone, so the memory is
   * given back before the slot can take another. */
  c->kind.destroy(c->kind.arg, gone);
  pthread_mutex_lock(&c->mu);
  slot->busy = false;
  pthread_mutex_unlock(&c->mu);
}

void fzd_plans_trim(fzd_plans *c) {
  for (;;) {
    void *plan = NULL;
    pthread_mutex_lock(&c->mu);
    for (unsigned i = 0; i < c->nslots && plan == NULL; i++) {
      fzd_plan_slot *e = &c->slots[i];
      if (!e->busy && e->plan != NULL)
        plan = evict(c, e);
    }
    pthread_mutex_unlock(&c->mu);
    if (plan == NULL)
      return;
    c->kind.destroy(c->kind.arg, plan);
  }
}

void fzd_plans_counts(fzd_plans *c, fzd_plan_counts *out) {
  pthread_mutex_lock(&c->mu);
  *out = c->n;
  pthread_mutex_unlock(&c->mu);
}
