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

/* The allocator of the buffers handed back (HDF5's, so that the library
 * may free them). */
typedef void *(*h5zf_alloc_fn)(size_t size);

/* Checks that spec makes a plan (pipeline, bound, shape), as a dataset is
 * created: FZ_EPIPELINE, FZ_EBOUND, ... with the engine's message. */
int h5zf_check(const h5zf_spec *spec, char *why, size_t why_len);

/* Compresses the in_len bytes at buf (the whole chunk, in a buffer of
 * buf_cap bytes) into one archive: *out, *out_len.  The archive replaces
 * the chunk in buf when it fits (then *out == buf), else it is in a new
 * buffer from alloc.  Through the daemon unless FZD_HDF5_DAEMON=off or none
 * answers; FZD_HDF5_DAEMON=require fails instead of falling back.  The
 * archives made in process pass through a buffer the process keeps. */
int h5zf_compress(const h5zf_spec *spec, void *buf, size_t in_len, size_t buf_cap,
                  h5zf_alloc_fn alloc, void **out, size_t *out_len, char *why, size_t why_len);

/* Decodes one archive into a buffer from alloc; when expect is not 0 the
 * archive must hold exactly that many bytes. */
int h5zf_decompress(const void *arc, size_t arc_len, size_t expect, h5zf_alloc_fn alloc,
                    void (*release)(void *), void **out, size_t *out_len, char *why,
                    size_t why_len);

#endif /* H5ZF_CODEC_H */
