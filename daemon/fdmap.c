/*
 * fdmap.c - the per-connection caches of sealed-memfd mappings (fdmap.h).
 *
 * Every mapping of every connection is on one list, so that the global
 * budget can evict the least recently used idle mapping wherever it is.
 * Entries are keyed by (device, inode) and the page range they map.  A
 * mapping holds a reference to its file, so the inode cannot be freed and
 * its number reused by another file while the entry exists: a hit is always
 * the same file.  An entry is never unmapped while a job reads it; one whose
 * connection went away is unmapped at its last release.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdmap.h"

struct fzd_fdmap_entry {
  fzd_fdmap_entry *next;
  fzd_fdmap *owner; /* NULL once the connection's cache is freed */
  dev_t dev;
  ino_t ino;
  uint64_t off;     /* file offset of base, a multiple of the page size */
  void *base;
  size_t len;       /* mapped bytes from off */
  unsigned refs;
  uint64_t used;
};

struct fzd_fdmap {
  unsigned count, max_entries;
  uint64_t bytes;
  const fzd_config *cfg;
};

/* All mappings, of all connections: the loop thread's alone. */
static fzd_fdmap_entry *all_head;
static uint64_t all_bytes, all_tick;

fzd_fdmap *fzd_fdmap_new(unsigned max_entries, const fzd_config *cfg) {
  fzd_fdmap *m = calloc(1, sizeof *m);
  if (m != NULL) {
    m->max_entries = max_entries;
    m->cfg = cfg;
  }
  return m;
}

/* Takes e off the list and its owner's count, and unmaps it. */
static void entry_unmap(fzd_fdmap_entry *e) {
  for (fzd_fdmap_entry **p = &all_head; *p != NULL; p = &(*p)->next)
    if (*p == e) {
      *p = e->next;
      break;
    }
  if (e->owner != NULL) {
    e->owner->count--;
    e->owner->bytes -= e->len;
  }
  all_bytes -= e->len;
  munmap(e->base, e->len);
  free(e);
}

/* The least recently used idle entry, of owner m (or of anyone: NULL). */
static fzd_fdmap_entry *idle_victim(const fzd_fdmap *m) {
  fzd_fdmap_entry *victim = NULL;
  for (fzd_fdmap_entry *e = all_head; e != NULL; e = e->next)
    if (e->refs == 0 && (m == NULL || e->owner == m) &&
        (victim == NULL || e->used < victim->used))
      victim = e;
  return victim;
}

/* Makes room for a mapping of len more bytes by evicting idle entries;
 * false when the budgets cannot be met. */
static bool make_room(fzd_fdmap *m, size_t len) {
  uint64_t per = m->cfg->max_mapped_bytes_per_connection, all = m->cfg->max_mapped_bytes;
  if (len > per || len > all || m->max_entries == 0)
    return false;
  while (m->count >= m->max_entries || m->bytes + len > per) {
    fzd_fdmap_entry *victim = idle_victim(m);
    if (victim == NULL)
      return false;
    entry_unmap(victim);
  }
  while (all_bytes + len > all) {
    fzd_fdmap_entry *victim = idle_victim(NULL);
    if (victim == NULL)
      return false;
    entry_unmap(victim);
  }
  return true;
}

int fzd_fdmap_acquire(fzd_fdmap *m, int fd, uint64_t off, uint64_t len,
                      const void **ptr, fzd_fdmap_entry **ref) {
  struct stat st;
  int seals = fcntl(fd, F_GET_SEALS);
  if (m == NULL || seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(fd, &st) < 0 ||
      len == 0 || off > (uint64_t)st.st_size || len > (uint64_t)st.st_size - off)
    return 0;
  fzd_fdmap_entry *hit = NULL;
  for (fzd_fdmap_entry *e = all_head, *next; e != NULL; e = next) {
    next = e->next;
    if (e->owner != m || e->dev != st.st_dev || e->ino != st.st_ino)
      continue;
    if (e->off <= off && off + len <= e->off + e->len) {
      hit = e;
      break;
    }
    /* Another range of the same file: the new one takes its place. */
    if (e->refs == 0)
      entry_unmap(e);
  }
  if (hit == NULL) {
    long page = sysconf(_SC_PAGESIZE);
    uint64_t start = off - off % (uint64_t)(page > 0 ? page : 4096);
    uint64_t span = off + len - start;
    if (span > SIZE_MAX || !make_room(m, (size_t)span))
      return 0;
    void *base = mmap(NULL, (size_t)span, PROT_READ, MAP_SHARED, fd, (off_t)start);
    if (base == MAP_FAILED)
      return 0;
    hit = calloc(1, sizeof *hit);
    if (hit == NULL) {
      munmap(base, (size_t)span);
      return 0;
    }
    *hit = (fzd_fdmap_entry){.next = all_head, .owner = m, .dev = st.st_dev,
                             .ino = st.st_ino, .off = start, .base = base,
                             .len = (size_t)span};
    all_head = hit;
    all_bytes += span;
    m->count++;
    m->bytes += span;
  }
  hit->refs++;
  hit->used = ++all_tick;
  *ptr = (const char *)hit->base + (off - hit->off);
  *ref = hit;
  return 1;
}

void fzd_fdmap_release(fzd_fdmap_entry *e) {
  if (e == NULL)
    return;
  e->refs--;
  if (e->refs == 0 && e->owner == NULL)
    entry_unmap(e);
}

void fzd_fdmap_free(fzd_fdmap *m) {
  if (m == NULL)
    return;
  for (fzd_fdmap_entry *e = all_head, *next; e != NULL; e = next) {
    next = e->next;
    if (e->owner != m)
      continue;
    if (e->refs == 0) {
      entry_unmap(e);
    } else {
      e->owner = NULL;
      m->count--;
      m->bytes -= e->len;
    }
  }
  free(m);
}
