/*
 * buffers.c - shared host buffers: memory the daemon reads and writes in
 * place.  Each buffer is a memfd sealed at a fixed size (no shrinking, no
 * growing) and mapped here; the daemon maps the same pages once per
 * connection, so a job whose input or output lies inside a buffer travels as
 * a descriptor and an offset, and its bytes are never copied through the
 * socket or into a staging memfd.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

void *fz_client_buffer_alloc(fz_client *c, size_t size) {
  if (!c)
    return NULL;
  c->errmsg[0] = '\0';
  if (size == 0 || size > (size_t)INT64_MAX) {
    fzc_fail(c, FZ_EINVAL, "a shared buffer needs 1 to 2^63-1 bytes, not %zu", size);
    return NULL;
  }
  fzc_buf *b = calloc(1, sizeof *b);
  if (!b) {
    fzc_fail(c, FZ_ENOMEM, "out of memory");
    return NULL;
  }
  b->fd = memfd_create("fzclient-buffer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (b->fd < 0 || ftruncate(b->fd, (off_t)size) < 0 ||
      fcntl(b->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
    goto fail;
  b->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd, 0);
  if (b->base == MAP_FAILED)
    goto fail;
  b->size = size;
  b->next = c->bufs;
  c->bufs = b;
  return b->base;

fail:
  fzc_fail(c, errno == ENOMEM || errno == ENOSPC ? FZ_ENOMEM : FZ_EIO,
           "cannot make a shared buffer of %zu bytes: %s", size, strerror(errno));
  if (b->fd >= 0)
    close(b->fd);
  free(b);
  return NULL;
}

static void buf_release(fzc_buf *b) {
  munmap(b->base, b->size);
  close(b->fd);
  free(b);
}

void fz_client_buffer_free(fz_client *c, void *p) {
  if (!c || !p)
    return;
  for (fzc_buf **link = &c->bufs; *link; link = &(*link)->next)
    if ((*link)->base == p) {
      fzc_buf *b = *link;
      *link = b->next;
      buf_release(b);
      return;
    }
}

const fzc_buf *fzc_buf_find(const fz_client *c, const void *p, size_t len) {
  uintptr_t a = (uintptr_t)p;
  for (const fzc_buf *b = c->bufs; b; b = b->next) {
    uintptr_t base = (uintptr_t)b->base;
    if (a >= base && a - base <= b->size && len <= b->size - (a - base))
      return b;
  }
  return NULL;
}

void fzc_buf_free_all(fz_client *c) {
  while (c->bufs) {
    fzc_buf *b = c->bufs;
    c->bufs = b->next;
    buf_release(b);
  }
}
