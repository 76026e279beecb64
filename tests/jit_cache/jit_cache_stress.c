/*
 * jit_cache_stress.c - many threads on the JIT module cache at once, as a
 * plain program (Criterion's runner cannot start under ThreadSanitizer, and
 * this is what tests/run.sh runs in its ThreadSanitizer pass; ctest runs it
 * in every other build too).
 *
 * Eight threads get sixteen keys, some of whose builds always fail, through
 * two long-lived caches on one directory (two daemons sharing it) and
 * through short-lived ones opened for a single get, so disk loads race with
 * writes and with evictions under a bound of a few entries.  Every image
 * must be the right one, every failing key must fail, and within one cache
 * a key must never build twice once it succeeded.  Exits 0, or 1 with what
 * went wrong.
 */
#include <dirent.h>
#include <ftw.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fz_error.h"
#include "jit_cache.h"

#define NTHREADS 8
#define NKEYS 16
#define ROUNDS 150
#define IMAGE 3000
#define TGT "sm_90 nvrtc 13.0 driver 13000"

static fzk_jit_cache *shared[2];
static char dir[] = "/tmp/fzjit-stress-XXXXXX";
static atomic_int failures;
/* Successful builds per long-lived cache and key. */
static atomic_int built[2][NKEYS];

static bool fails(int k) { return k % 5 == 4; }

static void complain(const char *what, int k, const char *why) {
  fprintf(stderr, "jit_cache_stress: key %d: %s%s%s\n", k, what, why ? ": " : "", why ? why : "");
  atomic_fetch_add(&failures, 1);
}

typedef struct job {
  int key, cache; /* cache -1: a short-lived one */
} job;

static void fill(int k, unsigned char *p) {
  for (size_t i = 0; i < IMAGE; i++)
    p[i] = (unsigned char)(k * 31 + i * 7);
}

static int build(void *arg, void **image, size_t *len, char *why, size_t why_len) {
  const job *j = arg;
  struct timespec t = {0, (long)(j->key % 3) * 500000L}; /* let others pile up */
  nanosleep(&t, NULL);
  if (fails(j->key)) {
    snprintf(why, why_len, "nvrtc: key %d does not compile", j->key);
    return FZ_ENVRTC;
  }
  unsigned char *p = malloc(IMAGE);
  if (p == NULL)
    return FZ_ENOMEM;
  fill(j->key, p);
  *image = p;
  *len = IMAGE;
  if (j->cache >= 0)
    atomic_fetch_add(&built[j->cache][j->key], 1);
  return 0;
}

static void get(fzk_jit_cache *c, job *j) {
  char src[32], why[256] = "";
  snprintf(src, sizeof src, "kernel %d", j->key);
  const void *img = NULL;
  size_t len = 0;
  int rc = fzk_jit_cache_get(c, src, "-fmad=false", TGT, build, j, &img, &len, why, sizeof why);
  if (fails(j->key)) {
    if (rc != FZ_ENVRTC || strstr(why, "does not compile") == NULL)
      complain("a failing build did not fail with its message", j->key, why);
    return;
  }
  unsigned char want[IMAGE];
  fill(j->key, want);
  if (rc != 0)
    complain("get failed", j->key, why);
  else if (len != IMAGE || memcmp(img, want, IMAGE) != 0)
    complain("wrong image", j->key, NULL);
}

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  for (int r = 0; r < ROUNDS; r++) {
    job j = {.key = (id * 7 + r * 3) % NKEYS, .cache = (id + r) % 2};
    if (r % 4 == 3) {
      /* A get through a cache of its own goes to the disk. */
      fzk_jit_cache *c = NULL;
      char why[256];
      j.cache = -1;
      if (fzk_jit_cache_open(dir, 6 * (88 + IMAGE), &c, why, sizeof why) != 0) {
        complain("open failed", j.key, why);
        continue;
      }
      get(c, &j);
      fzk_jit_cache_close(c);
    } else {
      get(shared[j.cache], &j);
    }
  }
  return NULL;
}

static void *watcher(void *arg) {
  atomic_int *stop = arg;
  while (!atomic_load(stop)) {
    fzk_jit_counts n;
    fzk_jit_cache_counts(shared[0], &n);
    fzk_jit_cache_waiting(shared[1]);
    sched_yield();
  }
  return NULL;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  return remove(p);
}

int main(void) {
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  for (int i = 0; i < 2; i++) {
    char why[256];
    if (fzk_jit_cache_open(dir, 6 * (88 + IMAGE), &shared[i], why, sizeof why) != 0) {
      fprintf(stderr, "jit_cache_stress: open: %s\n", why);
      return 1;
    }
  }
  pthread_t t[NTHREADS], w;
  atomic_int stop = 0;
  pthread_create(&w, NULL, watcher, &stop);
  for (intptr_t i = 0; i < NTHREADS; i++)
    pthread_create(&t[i], NULL, worker, (void *)i);
  for (int i = 0; i < NTHREADS; i++)
    pthread_join(t[i], NULL);
  atomic_store(&stop, 1);
  pthread_join(w, NULL);

  for (int c = 0; c < 2; c++)
    for (int k = 0; k < NKEYS; k++)
      if (atomic_load(&built[c][k]) > 1)
        complain("built more than once in one cache", k, NULL);
  fzk_jit_counts n[2];
  for (int c = 0; c < 2; c++) {
    fzk_jit_cache_counts(shared[c], &n[c]);
    if (n[c].compile_failures == 0 || n[c].mem_hits == 0)
      complain("the counters missed failures or hits", -1, NULL);
    if (fzk_jit_cache_waiting(shared[c]) != 0)
      complain("gets still waiting", -1, NULL);
    fzk_jit_cache_close(shared[c]);
  }
  DIR *d = opendir(dir);
  for (struct dirent *de; d && (de = readdir(d)) != NULL;)
    if (strncmp(de->d_name, ".fzjit-tmp.", 11) == 0)
      complain("a temporary file was left", -1, de->d_name);
  if (d)
    closedir(d);
  nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
  printf("jit_cache_stress: %d threads x %d gets; cache 0: %llu hits, %llu misses, %llu "
         "compiles, %llu evicted; cache 1: %llu hits, %llu misses; %d failures\n",
         NTHREADS, ROUNDS, (unsigned long long)n[0].mem_hits, (unsigned long long)n[0].misses,
         (unsigned long long)n[0].compiles, (unsigned long long)n[0].disk_evicted,
         (unsigned long long)n[1].mem_hits, (unsigned long long)n[1].misses,
         atomic_load(&failures));
  return atomic_load(&failures) ? 1 : 0;
}
