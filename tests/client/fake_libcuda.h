/*
 * fake_libcuda.h - what test_client_device_logic tells the driver of
 * fake_libcuda.c (built as libcuda.so.1 and found through LD_LIBRARY_PATH),
 * through dlsym() on the library libfzclient loaded.
 */
#ifndef FAKE_LIBCUDA_H
#define FAKE_LIBCUDA_H

#include <stddef.h>
#include <stdint.h>

typedef enum fake_kind {
  FAKE_LEGACY = 1,   /* cudaMalloc */
  FAKE_VMM,          /* cuMemCreate with POSIX descriptors */
  FAKE_VMM_NOFD,     /* cuMemCreate without */
  FAKE_POOL,         /* an exportable pool */
  FAKE_DEFAULT_POOL, /* cudaMallocAsync */
  FAKE_MANAGED,
  FAKE_HOST          /* cudaMallocHost */
} fake_kind;

typedef struct fake_alloc {
  uint64_t base;
  size_t size;
  uint64_t buffer_id;
  fake_kind kind;
} fake_alloc;

typedef enum fake_count {
  FAKE_QUERIES,
  FAKE_IPC_HANDLES,
  FAKE_RETAINS,
  FAKE_RELEASES,
  FAKE_EXPORTS,       /* VMM and pool descriptors */
  FAKE_POOL_POINTERS,
  FAKE_PUSHES,
  FAKE_PRIMARY_RETAINS,
  FAKE_PRIMARY_RELEASES,
  FAKE_EVENTS,
  FAKE_EVENTS_DESTROYED,
  FAKE_RECORDS,
  FAKE_STREAM_WAITS,
  FAKE_STREAM_SYNCS,
  FAKE_NCOUNTS
} fake_count;

/* The one stream the fake driver knows. */
#define FAKE_STREAM ((uintptr_t)0x5151)

typedef void (*fake_add_fn)(const fake_alloc *a);
typedef unsigned long (*fake_count_fn)(fake_count which);

#endif
