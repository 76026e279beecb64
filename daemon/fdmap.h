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
 *
 * Only the pages a job reads are mapped (its range, widened to whole
 * pages), never the whole file: a client's memfd may be terabytes of holes.
 * Mappings, busy or cached, count against two budgets of address space,
 * max_mapped_bytes_per_connection and max_mapped_bytes (all connections);
 * idle cached mappings are evicted, least recently used first, to make
 * room, and when that is not enough the input is not mapped at all and the
 * worker reads it with pread: a job never fails for want of address space.
 */
#ifndef FZD_FDMAP_H
#define FZD_FDMAP_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* Mappings each connection keeps. */
#define FZD_FDMAP_ENTRIES 16

typedef struct fzd_fdmap fzd_fdmap;
typedef struct fzd_fdmap_entry fzd_fdmap_entry;

/* A cache holding at most max_entries mappings, within the budgets cfg
 * names (read at every acquire, so a reload applies to the next job; cfg
 * must outlive the cache). */
fzd_fdmap *fzd_fdmap_new(unsigned max_entries, const fzd_config *cfg);

/* Bytes [off, off + len) of fd, mapped read-only: from the cache when a
 * mapping of the same file covers the range, else newly mapped and cached.
 * Returns 1 with *ptr and *ref set; 0 when fd does not qualify (not a memfd
 * sealed against shrinking, range outside the file, mapping failed) or the
 * budgets leave no room, in which case the caller reads the bytes itself.
 * Each 1 must be paired with fzd_fdmap_release(ref), which may come after
 * fzd_fdmap_free(m). */
int fzd_fdmap_acquire(fzd_fdmap *m, int fd, uint64_t off, uint64_t len,
                      const void **ptr, fzd_fdmap_entry **ref);
void fzd_fdmap_release(fzd_fdmap_entry *ref); /* NULL is a harmless no-op */

/* Frees the cache; mappings still referenced are unmapped at their last
 * release.  NULL is a harmless no-op. */
void fzd_fdmap_free(fzd_fdmap *m);

#endif
