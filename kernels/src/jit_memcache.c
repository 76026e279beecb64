/*
 * jit_memcache.c - the memory-only stand-in of the JIT module cache
 * (jit_memcache.h): a list of (key, image) under one lock.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "jit_memcache.h"

typedef struct entry {
  char *key; /* source, options and target, each ended by a NUL */
  size_t key_len;
  void *image;
  size_t len;
  struct entry *next;
} entry;

struct fzk_jit_cache {
  pthread_mutex_t lock;
  entry *head;
  fzk_jit_counts counts;
};

int fzk_jit_cache_open(const char *dir, uint64_t max_disk_bytes, fzk_jit_cache **out, char *why,
                       size_t why_len) {
  (void)max_disk_bytes;
  if (out == NULL)
    return FZ_EINVAL;
  *out = NULL;
  if (dir != NULL && dir[0] != 0) {
    fze_why(why, why_len, "this build's JIT cache keeps modules in memory only");
    return FZ_ENOSYS;
  }
  fzk_jit_cache *c = calloc(1, sizeof *c);
  if (c == NULL)
    return FZ_ENOMEM;
  pthread_mutex_init(&c->lock, NULL);
  *out = c;
  return 0;
}

void fzk_jit_cache_close(fzk_jit_cache *c) {
  if (c == NULL)
    return;
  for (entry *e = c->head, *n; e; e = n) {
    n = e->next;
    free(e->key);
    free(e->image);
    free(e);
  }
  pthread_mutex_destroy(&c->lock);
  free(c);
}

static uint64_t now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

int fzk_jit_cache_get(fzk_jit_cache *c, const char *source, const char *options,
                      const char *target, fzk_jit_build_fn build, void *arg, const void **image,
                      size_t *len, char *why, size_t why_len) {
  if (c == NULL || source == NULL || options == NULL || target == NULL || build == NULL ||
      image == NULL || len == NULL)
    return FZ_EINVAL;
  size_t ls = strlen(source) + 1, lo = strlen(options) + 1, lt = strlen(target) + 1;
  size_t kl = ls + lo + lt;
  char *key = malloc(kl);
  if (key == NULL)
    return FZ_ENOMEM;
  memcpy(key, source, ls);
  memcpy(key + ls, options, lo);
  memcpy(key + ls + lo, target, lt);
  int rc = 0;
  pthread_mutex_lock(&c->lock);
  for (entry *e = c->head; e; e = e->next)
    if (e->key_len == kl && memcmp(e->key, key, kl) == 0) {
      c->counts.mem_hits++;
      *image = e->image;
      *len = e->len;
      goto out;
    }
  c->counts.misses++;
  c->counts.compiles++;
  void *img = NULL;
  size_t il = 0;
  uint64_t t0 = now_us();
  rc = build(arg, &img, &il, why, why_len);
  c->counts.compile_us += now_us() - t0;
  if (rc < 0) {
    c->counts.compile_failures++;
    goto out;
  }
  entry *e = calloc(1, sizeof *e);
  if (e == NULL) {
    free(img);
    rc = FZ_ENOMEM;
    goto out;
  }
  e->key = key;
  e->key_len = kl;
  key = NULL;
  e->image = img;
  e->len = il;
  e->next = c->head;
  c->head = e;
  *image = img;
  *len = il;
out:
  pthread_mutex_unlock(&c->lock);
  free(key);
  return rc;
}

void fzk_jit_cache_counts(fzk_jit_cache *c, fzk_jit_counts *out) {
  memset(out, 0, sizeof *out);
  if (c == NULL)
    return;
  pthread_mutex_lock(&c->lock);
  *out = c->counts;
  pthread_mutex_unlock(&c->lock);
}
