/*
 * codec.h - the compression side of the HDF5 filter, free of HDF5: one chunk
 * in, one fzd archive out, through a daemon when one is reachable and with
 * the embedded engine otherwise; archives always decoded in process.
 */
#ifndef H5ZF_CODEC_H
#define H5ZF_CODEC_H

#include <stddef.h>

#include "fz.h"

/* What one dataset's chunks are compressed with. */
typedef struct h5zf_spec {
  fz_dtype dtype;
  unsigned ndims;
  uint64_t dims[FZ_MAX_DIMS];
  char pipeline[1024]; /* a preset name or chain text: fzd takes 1023 bytes */
  double eb;
  fz_eb_mode mode;
  int has_fill;
  double fill_value;
} h5zf_spec;

/* Where the buffers handed back come from: HDF5's allocator, so that the
 * library may free them (ctx names the HDF5 library of the call). */
typedef struct h5zf_mem {
  void *(*alloc)(void *ctx, size_t size);
  void (*release)(void *ctx, void *p);
  void *ctx;
} h5zf_mem;

/* Checks that spec makes a plan (pipeline, bound, shape), as a dataset is
 * created: FZ_EPIPELINE, FZ_EBOUND, ... with the engine's message. */
int h5zf_check(const h5zf_spec *spec, char *why, size_t why_len);

/* The bytes of one chunk of spec's type and shape; 0 when they overflow. */
size_t h5zf_chunk_bytes(const h5zf_spec *spec);

/* Whether the n bytes at p begin as an fzd archive does (its magic,
 * docs/format.md), whatever follows. */
int h5zf_is_archive(const void *p, size_t n);

/* Compresses the in_len bytes at buf (the whole chunk, in a buffer of
 * buf_cap bytes) into one archive: *out, *out_len.  The archive replaces
 * the chunk in buf when it fits (then *out == buf), else it is in a new
 * buffer from mem.  Through the daemon unless FZD_HDF5_DAEMON=off or none
 * answers; FZD_HDF5_DAEMON=require fails instead of falling back.  Built
 * with H5Z_FZD_ENGINE_ONLY there is no daemon path: always in process, and
 * require fails.  The archives made in process pass through a buffer the
 * process keeps. */
int h5zf_compress(const h5zf_spec *spec, void *buf, size_t in_len, size_t buf_cap,
                  const h5zf_mem *mem, void **out, size_t *out_len, char *why, size_t why_len);

/* Decodes one archive into a buffer from mem.  The archive must hold a
 * chunk of chunk's dtype and dims (the only fields read): the size comes
 * from them, never from the archive, and an archive of another type or
 * shape is refused (FZ_EDTYPE, FZ_ESHAPE) before anything is allocated. */
int h5zf_decompress(const h5zf_spec *chunk, const void *arc, size_t arc_len, const h5zf_mem *mem,
                    void **out, size_t *out_len, char *why, size_t why_len);

#endif /* H5ZF_CODEC_H */
