/*
 * fdmap.c - the per-connection cache of sealed-memfd mappings (fdmap.h).
 *
 * Entries are keyed by (device, inode).  A mapping holds a reference to its
 * file, so the inode cannot be freed and its number reused by another file
 * while the entry exists: a hit is always the same file.  Entries are
 * evicted least recently used first, never while a job reads them.
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
  dev_t dev;
  ino_t ino;
  void *base;
  size_t len;      /* mapped bytes, from offset 0 */
  unsigned refs;
  bool cached;     /* on the cache's list (else unmapped at last release) */
  uint64_t used;
};

struct fzd_fdmap {
  fzd_fdmap_entry *head;
  unsigned count, max_entries;
  uint64_t bytes, max_bytes, tick;
};

fzd_fdmap *fzd_fdmap_new(unsigned max_entries, uint64_t max_bytes) {
  fzd_fdmap *m = calloc(1, sizeof *m);
  if (m != NULL) {
    m->max_entries = max_entries;
    m->max_bytes = max_bytes;
  }
  return m;
}

static void entry_unmap(fzd_fdmap_entry *e) {
  munmap(e->base, e->len);
  free(e);
}

/* Removes e from the list; unmaps it now unless a job still reads it. */
static void entry_drop(fzd_fdmap *m, fzd_fdmap_entry *e) {
  for (fzd_fdmap_entry **p = &m->head; *p != NULL; p = &(*p)->next)
    if (*p == e) {
      *p = e->next;
      break;
    }
  m->count--;
  m->bytes -= e->len;
  e->cached = false;
  if (e->refs == 0)
    entry_unmap(e);
}

/* Makes room for `len` more bytes by evicting idle entries; false when the
 * budget cannot be met. */
static bool make_room(fzd_fdmap *m, size_t len) {
  if (len > m->max_bytes || m->max_entries == 0)
    return false;
  while (m->count >= m->max_entries || m->bytes + len > m->max_bytes) {
    fzd_fdmap_entry *victim = NULL;
    for (fzd_fdmap_entry *e = m->head; e != NULL; e = e->next)
      if (e->refs == 0 && (victim == NULL || e->used < victim->used))
        victim = e;
    if (victim == NULL)
      return false;
    entry_drop(m, victim);
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
  for (fzd_fdmap_entry *e = m->head; e != NULL; e = e->next)
    if (e->dev == st.st_dev && e->ino == st.st_ino) {
      hit = e;
      break;
    }
  if (hit != NULL && off + len > hit->len) {
    /* The file grew past the mapping: map it anew. */
    entry_drop(m, hit);
    hit = NULL;
  }
  if (hit == NULL) {
    size_t size = (size_t)st.st_size;
    void *base = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
      return 0;
    hit = calloc(1, sizeof *hit);
    if (hit == NULL) {
      munmap(base, size);
      return 0;
    }
    hit->dev = st.st_dev;
    hit->ino = st.st_ino;
    hit->base = base;
    hit->len = size;
    if (make_room(m, size)) {
      hit->cached = true;
      hit->next = m->head;
      m->head = hit;
      m->count++;
      m->bytes += size;
    }
  }
  hit->refs++;
  hit->used = ++m->tick;
  *ptr = (const char *)hit->base + off;
  *ref = hit;
  return 1;
}

void fzd_fdmap_release(fzd_fdmap_entry *e) {
  if (e == NULL)
    return;
  e->refs--;
  if (e->refs == 0 && !e->cached)
    entry_unmap(e);
}

void fzd_fdmap_free(fzd_fdmap *m) {
  if (m == NULL)
    return;
  while (m->head != NULL)
    entry_drop(m, m->head);
  free(m);
}
