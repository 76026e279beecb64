/*
 * fz_frames_gpu.h - detector frames on the GPU: batches of bitshuffle-LZ4
 * chunks (HDF5 filter 32008) decoded into the pixels above a cut, dense
 * frames and a sparse matrix product, byte-identical to the CPU engine
 * (fz_frames.h, which docs/frames.md describes).
 *
 * This header is the whole API of libfzframesgpu; it is plain C and needs
 * no CUDA header.  A decoder is made once for a frame shape, a dtype, an
 * optional mask and an optional matrix, which it uploads then; it owns
 * every device buffer a batch of up to max_frames frames needs, so a batch
 * allocates nothing.  A batch runs on the caller's stream and synchronises
 * that stream once, at its end, to return the frames' statuses.
 *
 * LZ4 only: a zstd chunk is decoded by the CPU engine
 * (fz_frames_sparse_batch), and fz_frames_gpu_create refuses the zstd
 * codec.  No top-N kernel either: a caller lists every pixel above the
 * cut and keeps the top N with the engine's fz_frames_top.
 *
 * Every fallible call returns an int: >= 0 on success, a negative fz_errno
 * code on failure with a one-line reason in `why` (which may be NULL):
 * FZ_ENOGPU without a usable GPU, FZ_EGPUOOM when device memory runs out,
 * FZ_ECUDA for any other CUDA error, whose name is quoted.  No call prints,
 * exits or aborts.  One thread at a time per decoder.
 */
#ifndef FZ_FRAMES_GPU_H
#define FZ_FRAMES_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "fz_frames.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA runtime's stream type (cudaStream_t is this very pointer type);
 * NULL is the legacy default stream. */
typedef struct CUstream_st *fz_frames_gpu_stream;

typedef struct fz_frames_gpu_params {
  fz_dtype dtype;       /* any integer type, f32 or f64 */
  size_t npixels;       /* pixels a frame, below 2^32 */
  fz_bslz4_codec codec; /* FZ_BSLZ4_LZ4 */
  const uint8_t *mask;  /* npixels bytes, nonzero = used; NULL: all */
  const fz_frames_csr *csr;
  size_t max_frames;      /* frames a batch at most (0: 64; at most 65535) */
  size_t cap;             /* pixels listed a frame at most (0: npixels) */
  size_t max_block_bytes; /* largest block decoded (0: 8192, the filter's
                           * default; at most 32768); a chunk with larger
                           * blocks fails its frame with FZ_ENOSYS */
  size_t max_batch_bytes; /* chunk bytes of a batch in host memory at most
                           * (0: max_frames LZ4 bounds of a frame) */
  int device;             /* CUDA device ordinal */
} fz_frames_gpu_params;

typedef struct fz_frames_gpu fz_frames_gpu;

/* Checks the parameters (FZ_EINVAL, FZ_EDTYPE, FZ_ESHAPE with the value
 * quoted), allocates the decoder's device buffers and uploads the mask
 * and the matrix (with the mask folded in).  The caller's arrays are not
 * kept. */
int fz_frames_gpu_create(const fz_frames_gpu_params *p, fz_frames_gpu **out, char *why,
                         size_t why_len);
/* Waits for nothing: the caller's streams must be done with it.  NULL is a
 * harmless no-op. */
void fz_frames_gpu_destroy(fz_frames_gpu *g);
/* Rows of the matrix (0 without one). */
size_t fz_frames_gpu_rows(const fz_frames_gpu *g);

/* A batch.  Chunk i is lengths[i] bytes at base + offsets[i]; offsets and
 * lengths are host arrays; base is host memory, or device memory of
 * base_len bytes when base_on_device (straight from GPUDirect Storage or a
 * device copy of a file).  Outputs, in host memory or, with
 * out_on_device, in device memory:
 *   values / indices (cap elements a frame): frame i lists its pixels above
 *     the cut at values + i * cap elements and indices + i * cap, as
 *     fz_frames_sparse_batch does; NULL values: no lists;
 *   dense (npixels elements a frame): the dense frames; NULL: none;
 *   powder_f64 / powder_i64 (rows a frame, as the matrix's weights): the
 *     products; NULL: none.
 * counts and status are always host arrays of nframes: the pixels listed
 * (0 for a failed frame) and 0 or the frame's negative code.  A failed
 * frame's lists, dense frame and products are undefined. */
typedef struct fz_frames_gpu_batch {
  const uint8_t *base;
  size_t base_len;
  int base_on_device;
  const uint64_t *offsets, *lengths;
  size_t nframes;
  double cut;
  int out_on_device;
  void *values;
  uint32_t *indices;
  size_t cap;
  void *dense;
  double *powder_f64;
  int64_t *powder_i64;
  size_t *counts;
  int *status;
  /* keep: the results stay in the decoder's device buffers for
   * fz_frames_gpu_take (values, indices, dense and the products above are
   * then ignored); the pixels above the cut are listed when keep_lists. */
  int keep, keep_lists;
  /* The batch's chunks (base in the staging) already sent up by
   * fz_frames_gpu_prefetch, or fz_frames_gpu_send and _sent: the run waits
   * for that copy instead of making its own (it copies when the prefetch
   * was of another base or fewer bytes). */
  int prefetched;
} fz_frames_gpu_batch;

/* Runs a batch on stream.  A corrupt chunk fails its own frame (its
 * status, and fz_frames_gpu_why says why); the other frames are as the CPU
 * engine gives them, byte for byte.  Returns the number of frames that
 * failed, or a negative code when the batch could not run (FZ_EINVAL: more
 * frames than max_frames, a cap above the decoder's, a chunk outside
 * base_len, more host chunk bytes than max_batch_bytes; CUDA errors). */
int64_t fz_frames_gpu_run(fz_frames_gpu *g, const fz_frames_gpu_batch *b,
                          fz_frames_gpu_stream stream, char *why, size_t why_len);

/* Frame i of the last batch, run with keep, copied into host memory:
 * its counts[i] listed values and indices (when listed), its dense frame
 * (npixels elements) and its products (rows); a NULL pointer skips that
 * part.  The lists and products came to pinned host memory with the batch
 * (two strided copies and one); a dense frame is copied now, synchronously
 * on stream. */
int fz_frames_gpu_take(fz_frames_gpu *g, size_t i, void *values, uint32_t *indices, void *dense,
                       void *powder, fz_frames_gpu_stream stream, char *why, size_t why_len);

/* Pinned host memory of max_batch_bytes for a batch's chunks, made on the
 * first call and kept with the decoder: a batch whose base lies in this
 * buffer (its start, or a point inside, so that the caller may fill one
 * part while a batch runs from another) goes to the device in one copy,
 * and its chunks need only lie between the base and the buffer's end.
 * NULL (why set) when it cannot be had; *cap is its size. */
uint8_t *fz_frames_gpu_staging(fz_frames_gpu *g, size_t *cap, char *why, size_t why_len);

/* Sends the len bytes of the staging at base to the device, on a stream
 * of the decoder's own, for the next run, of the batch at that base (with
 * prefetched), to wait for: the next batch goes up while the one before
 * decodes.  The bytes must stay put until that run; they may not overlap
 * a running batch's.  0, or a negative
 * code (FZ_EINVAL: not inside the staging; CUDA errors), after which the
 * batch is run without prefetched.  The same as fz_frames_gpu_send of
 * the whole range, then fz_frames_gpu_sent. */
int fz_frames_gpu_prefetch(fz_frames_gpu *g, const void *base, size_t len, char *why,
                           size_t why_len);

/* A prefetch in parts, so that a batch goes up while it is still being
 * read: fz_frames_gpu_send queues the copy of len bytes of the staging at
 * p (safe from several threads at once, once fz_frames_gpu_staging has
 * made the staging); fz_frames_gpu_sent, called after the last send
 * returned, marks [base, base + len) as sent for the next run, which
 * waits for every copy queued before it.  Both return 0 or a negative
 * code as fz_frames_gpu_prefetch does; after a failed send, call
 * fz_frames_gpu_sent with len 0 and run the batch without prefetched. */
int fz_frames_gpu_send(fz_frames_gpu *g, const void *p, size_t len, char *why, size_t why_len);
int fz_frames_gpu_sent(fz_frames_gpu *g, const void *base, size_t len, char *why, size_t why_len);

/* Device memory the decoder holds, in bytes (pinned host memory apart). */
size_t fz_frames_gpu_device_bytes(const fz_frames_gpu *g);

/* Why frame i of the last batch failed ("no error" when it did not). */
void fz_frames_gpu_why(const fz_frames_gpu *g, size_t i, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif /* FZ_FRAMES_GPU_H */
