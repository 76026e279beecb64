/*
 * jit_memcache.h - a memory-only stand-in for the JIT module cache
 * (jit_cache.h), with its API, until the cache with a disk directory
 * replaces it.  Images are kept per (source, options, target) for the life
 * of the cache; a build runs under the cache's lock, so concurrent callers
 * of one key build once.
 */
#ifndef FZK_JIT_MEMCACHE_H
#define FZK_JIT_MEMCACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct fzk_jit_cache fzk_jit_cache;
/* dir NULL or "": memory only (the only kind here: a directory is refused). */
int fzk_jit_cache_open(const char *dir, uint64_t max_disk_bytes, fzk_jit_cache **out, char *why,
                       size_t why_len);
void fzk_jit_cache_close(fzk_jit_cache *c); /* NULL is a no-op */
/* Builds an image (a CUBIN) for the key; returns it malloc'd. */
typedef int (*fzk_jit_build_fn)(void *arg, void **image, size_t *len, char *why, size_t why_len);
/* The image for (source, options, target): from memory, else build() is
 * called once and the result kept.  The image stays owned by the cache
 * until close. */
int fzk_jit_cache_get(fzk_jit_cache *c, const char *source, const char *options,
                      const char *target, fzk_jit_build_fn build, void *arg, const void **image,
                      size_t *len, char *why, size_t why_len);
typedef struct fzk_jit_counts {
  uint64_t mem_hits, disk_hits, misses, compiles, compile_failures, compile_us, disk_writes,
      disk_rejected, disk_evicted, disk_bytes;
} fzk_jit_counts;
void fzk_jit_cache_counts(fzk_jit_cache *c, fzk_jit_counts *out);

#endif
