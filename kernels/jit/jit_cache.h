/*
 * jit_cache.h - the JIT module cache: compiled kernel images (CUBINs) kept
 * in memory and in a directory on disk, keyed by what went into the
 * compilation.  Plain C with no CUDA, so every preset builds and tests it;
 * the NVRTC code generation calls it for every image it needs.
 *
 * Every function is thread-safe except close, which no other call on the
 * same cache may overlap.  Fallible calls return 0 or a negative fz_errno
 * code (fz_error.h) with a message in why (NULL or why_len 0: no message).
 * What this header does not declare is not API.
 */
#ifndef FZK_JIT_CACHE_H
#define FZK_JIT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fzk_jit_cache fzk_jit_cache;

/* Opens a cache.  dir NULL or "": memory only.  Otherwise the directory of
 * entries, created (mode 0700, and any missing parents) if missing; several
 * processes of the same user may share it.  max_disk_bytes bounds the total
 * size of its entries (oldest removed first); 0 means no bound.
 *
 * The path is followed without links, and the directory is used only if
 * no other user can have written in it: each directory on the way belongs
 * to root or to the effective user and is not writable by group or others
 * (unless sticky), and the cache directory belongs to the effective user
 * and is not writable by group or others.  Entries that another user owns
 * or may write are rejected (counted in disk_rejected) and rebuilt.
 *
 * Errors: FZ_EINVAL (out NULL, or dir or a component of it exists and is
 * not a directory), FZ_ENOMEM.  A directory that cannot be created or
 * written, that is reached through a symbolic link or that fails the owner
 * and mode rules is not an error: the cache opens memory-only, returns 0
 * and puts the reason in why (why is "" on success otherwise), and
 * fzk_jit_cache_disk_error() returns it later. */
int fzk_jit_cache_open(const char *dir, uint64_t max_disk_bytes, fzk_jit_cache **out, char *why,
                       size_t why_len);

/* Frees the cache and every image it handed out.  NULL is a no-op.  No get
 * may be running. */
void fzk_jit_cache_close(fzk_jit_cache *c);

/* Builds an image (a CUBIN) for the key: on success returns >= 0 and sets
 * *image to a malloc'd buffer of *len > 0 bytes, which the cache then owns;
 * on failure returns a negative fz_errno with a message in why. */
typedef int (*fzk_jit_build_fn)(void *arg, void **image, size_t *len, char *why, size_t why_len);

/* The image for (source, options, target): target names the architecture
 * and the NVRTC and driver versions, e.g. "sm_90 nvrtc 13.0 driver 13000";
 * options NULL is "".  From memory, else from disk (validated), else
 * build(arg, ...) is called once, concurrent callers of one key waiting for
 * that one build, and the image is kept in memory and written to disk
 * atomically.  No lock is held across build(), so different keys build in
 * parallel.  A failed build is reported to the caller and to every get that
 * waited for it (the same code and message), and is not remembered: the next
 * get builds again.  A failed disk write does not fail the get.
 *
 * build() may get other keys from the same cache, never its own (it would
 * wait for itself).  *image stays valid, and owned by the cache, until
 * close. */
int fzk_jit_cache_get(fzk_jit_cache *c, const char *source, const char *options,
                      const char *target, fzk_jit_build_fn build, void *arg, const void **image,
                      size_t *len, char *why, size_t why_len);

/* A get is counted as a mem_hit (found in memory, or received from another
 * get of the same key that loaded or built it) or as a miss (not in
 * memory); a get that waited for a build that failed counts as neither.  A
 * miss is then a disk_hit or calls build() (compiles; failed ones also count
 * compile_failures; compile_us is the total wall time inside build()).
 * disk_writes counts entries written, disk_write_failures writes that failed
 * (the get still succeeded), disk_rejected entries found corrupt, truncated,
 * foreign or unreadable (each removed where possible, then rebuilt),
 * disk_evicted entries this process removed to keep the bound.  disk_bytes
 * is the size of all entries in the directory at this process's last look
 * (open, or after its last write). */
typedef struct fzk_jit_counts {
  uint64_t mem_hits, disk_hits, misses, compiles, compile_failures, compile_us, disk_writes,
      disk_rejected, disk_evicted, disk_bytes, disk_write_failures;
} fzk_jit_counts;

/* A snapshot of the counters.  c NULL: all zero. */
void fzk_jit_cache_counts(fzk_jit_cache *c, fzk_jit_counts *out);

/* Why the cache is memory-only although it was given a directory, or NULL
 * when the disk is in use (or none was asked for).  The text lives until
 * close. */
const char *fzk_jit_cache_disk_error(const fzk_jit_cache *c);

/* How many gets are waiting now for another get's load or build of their
 * key (for the stats, and for tests that need waiters in place). */
unsigned fzk_jit_cache_waiting(fzk_jit_cache *c);

#ifdef __cplusplus
}
#endif
#endif /* FZK_JIT_CACHE_H */
