/*
 * fdmap.h - a per-connection cache of mappings of sealed memfds.
 *
 * A client that compresses one time step after another usually passes the
 * same memfd every time.  Mapping it per job costs a page fault for every
 * 64 KiB of input and a TLB shootdown on unmap, which on a small machine is
 * a third of the engine's own time; kept mapped, the pages stay wired.  Only
 * memfds sealed against shrinking qualify (any other file can be truncated
 * under the mapping, and the daemon would die of SIGBUS).  All calls are
 * made on the loop thread; workers only read the mapped bytes.
 */
#ifndef FZD_FDMAP_H
#define FZD_FDMAP_H

#include <stddef.h>
#include <stdint.h>

/* Per connection: mappings kept, and their total size (address space only:
 * the pages are the client's memfd's). */
#define FZD_FDMAP_ENTRIES 16
#define FZD_FDMAP_BYTES (UINT64_C(64) << 30)

typedef struct fzd_fdmap fzd_fdmap;
typedef struct fzd_fdmap_entry fzd_fdmap_entry;

/* A cache holding at most max_entries mappings of at most max_bytes in all. */
fzd_fdmap *fzd_fdmap_new(unsigned max_entries, uint64_t max_bytes);

/* Bytes [off, off + len) of fd, mapped read-only: from the cache when the
 * same file is mapped there and covers the range, else newly mapped (and
 * cached when the budget allows).  Returns 1 with *ptr and *ref set; 0 when
 * fd does not qualify (not a memfd sealed against shrinking, range outside
 * the file, mapping failed), in which case the caller reads the bytes
 * itself.  Each 1 must be paired with fzd_fdmap_release(ref), which may
 * come after fzd_fdmap_free(m). */
int fzd_fdmap_acquire(fzd_fdmap *m, int fd, uint64_t off, uint64_t len,
                      const void **ptr, fzd_fdmap_entry **ref);
void fzd_fdmap_release(fzd_fdmap_entry *ref); /* NULL is a harmless no-op */

/* Frees the cache; mappings still referenced are unmapped at their last
 * release.  NULL is a harmless no-op. */
void fzd_fdmap_free(fzd_fdmap *m);

#endif
