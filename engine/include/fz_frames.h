/*
 * fz_frames.h - detector frames: the chunks of HDF5 filter 32008
 * (bitshuffle with LZ4 or zstd) decoded into dense frames or into the
 * pixels above a cut, and an optional sparse matrix product.
 *
 * This header is the whole public API of the engine's frames part; what it
 * does not declare is private.  docs/frames.md describes the chunk format
 * and the semantics with examples.
 *
 * A chunk, as the bitshuffle HDF5 filter writes it: a big-endian u64, the
 * uncompressed size in bytes; a big-endian u32, the block size in bytes
 * (a multiple of 8 elements); then for each block a big-endian u32, the
 * length of its compressed data, and that data (LZ4 or zstd) of the
 * bit-shuffled block.  An array of n elements with blocks of b elements has
 * n / b full blocks; the m = n % b elements left over are cut to a multiple
 * of 8, m - m % 8, and form one shorter block when that is not zero; the
 * last n % 8 elements follow the blocks verbatim, neither shuffled nor
 * compressed.  The chunk does not say which codec it holds: the filter's
 * parameters (cd_values[4]: 2 LZ4, 3 zstd) do, so every call takes it.
 *
 * The per-block steps are separate calls (the header walk, the block
 * decompression, the bit transposes) so a port to another device can
 * mirror them one by one and test each against them; the cut of a block and
 * the compaction by prefix sums are frames.c's named steps (cut_of,
 * cut_tile, cut_block), whose results fz_frames_sparse lists.
 *
 * Every fallible call returns an int: >= 0 on success, a negative fz_errno
 * code on failure, with a one-line reason in `why` (which may be NULL).
 * Hostile chunks (lengths past the end, truncated blocks, sizes that
 * overflow, a block that decompresses to the wrong size, bytes after the
 * end) give FZ_ECORRUPT or FZ_ETRUNC, never an access outside the buffers
 * given.  No call prints, exits or aborts.
 */
#ifndef FZ_FRAMES_H
#define FZ_FRAMES_H

#include <stddef.h>
#include <stdint.h>

#include "fz.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The codec of a chunk, numbered as the filter's cd_values[4]. */
typedef enum fz_bslz4_codec { FZ_BSLZ4_LZ4 = 2, FZ_BSLZ4_ZSTD = 3 } fz_bslz4_codec;

/* Bytes of the chunk header (u64 size, u32 block size). */
#define FZ_BSLZ4_HEADER 12

/* The layout a chunk header describes, for a given element size. */
typedef struct fz_bslz4_layout {
  uint64_t nbytes;    /* uncompressed bytes, as the header says */
  size_t elem_size;   /* 1, 2, 4 or 8 */
  size_t nelems;      /* nbytes / elem_size */
  size_t block_elems; /* elements of a full block: a multiple of 8, not 0 */
  size_t nblocks;     /* compressed blocks, the last one possibly shorter */
  size_t last_elems;  /* elements of the last block (0 when nblocks is 0) */
  size_t tail_elems;  /* nelems % 8: stored verbatim after the blocks */
} fz_bslz4_layout;

/* The default block size of the bitshuffle package for an element size:
 * 8192 bytes of elements, rounded down to a multiple of 8 elements, at
 * least 128 elements.  0 for an element size other than 1, 2, 4 or 8. */
size_t fz_bslz4_default_block(size_t elem_size);

/* Step 1: reads the header of a chunk of len bytes.  FZ_EINVAL for an
 * element size other than 1, 2, 4, 8; FZ_ETRUNC when len is under 12;
 * FZ_ECORRUPT when the size is not a whole number of elements or the block
 * size is 0, not a whole number of elements or not a multiple of 8 of
 * them.  The header alone is trusted for nothing else: fz_bslz4_walk checks
 * the blocks against the bytes present. */
int fz_bslz4_layout_of(const void *chunk, size_t len, size_t elem_size, fz_bslz4_layout *lay,
                       char *why, size_t why_len);

/* Step 2: the block header walk.  Writes, for block i of lay->nblocks,
 * starts[i] = the offset in the chunk of its 4-byte length, so its data is
 * the starts[i + 1] - starts[i] - 4 bytes at starts[i] + 4, and
 * starts[nblocks] = the offset of the verbatim tail: starts holds
 * nblocks + 1 entries.  Every length is checked against the bytes present,
 * and the tail must end the chunk exactly: FZ_ETRUNC when it is cut short,
 * FZ_ECORRUPT for a length beyond the chunk, a block length of 0, or bytes
 * left after the tail. */
int fz_bslz4_walk(const void *chunk, size_t len, const fz_bslz4_layout *lay, uint64_t *starts,
                  char *why, size_t why_len);

/* Step 3: decompresses clen bytes of one block into exactly nbytes at dst
 * (the block still bit-shuffled).  FZ_ECORRUPT when the data is not valid
 * for the codec (an LZ4 offset before the block, a literal run past the
 * end...) or gives any other number of bytes.  Thread-safe. */
int fz_bslz4_block_decompress(fz_bslz4_codec codec, const void *src, size_t clen, void *dst,
                              size_t nbytes, char *why, size_t why_len);

/* Step 4: the bit transposes of one block of n elements (n a multiple of
 * 8) of elem_size bytes.  The shuffled block is 8 * elem_size rows of n / 8
 * bytes; row 8 * j + b holds bit b of byte j (little-endian) of every
 * element, element i at bit i % 8 of byte i / 8 of the row.  in and out
 * must not overlap.  Nothing is checked: the callers above did. */
void fz_bitunshuffle_block(const void *in, size_t n, size_t elem_size, void *out);
void fz_bitshuffle_block(const void *in, size_t n, size_t elem_size, void *out);

/* Decodes a whole chunk into out (out_len bytes, at least the chunk's
 * uncompressed size: FZ_ENOSPC otherwise).  Returns the number of bytes
 * written.  Thread-safe; allocates one block of scratch. */
int64_t fz_bslz4_decode(fz_bslz4_codec codec, const void *chunk, size_t len, size_t elem_size,
                        void *out, size_t out_len, char *why, size_t why_len);

/* The most bytes fz_bslz4_encode can write for these arguments; 0 when they
 * are invalid. */
size_t fz_bslz4_bound(fz_bslz4_codec codec, size_t nelems, size_t elem_size, size_t block_elems);

/* Encodes nelems elements of elem_size bytes as the bitshuffle package
 * does: block_elems 0 picks fz_bslz4_default_block(), else it must be a
 * multiple of 8 (FZ_EINVAL).  LZ4 blocks come from LZ4_compress_default and
 * zstd blocks from ZSTD_compress at `level` (ignored for LZ4; the filter's
 * default is 3), so with the same library versions the bytes equal the
 * package's.  Returns the chunk length, FZ_ENOSPC when cap is too small
 * (fz_bslz4_bound is always enough).  Thread-safe. */
int64_t fz_bslz4_encode(fz_bslz4_codec codec, const void *data, size_t nelems, size_t elem_size,
                        size_t block_elems, int level, void *out, size_t cap, char *why,
                        size_t why_len);

/* ---- Frames: one chunk is one frame of npixels pixels. ---- */

/* A sparse matrix in compressed sparse rows, for the product
 * result[r] = sum over k in indptr[r]..indptr[r+1]-1 of
 * weight[k] * pixel[indices[k]], summed in the stored order.  Exactly one
 * of w_f32 (sums in double: each term (double)w * (double)pixel) and w_i32
 * (exact int64 sums; integer pixels of at most 4 bytes only) is set. */
typedef struct fz_frames_csr {
  size_t nrows;
  const uint64_t *indptr;  /* nrows + 1 entries, indptr[0] == 0, rising */
  const uint32_t *indices; /* indptr[nrows] pixel indices below npixels */
  const float *w_f32;
  const int32_t *w_i32;
} fz_frames_csr;

/* What every frame of a decoder has in common. */
typedef struct fz_frames_params {
  fz_dtype dtype; /* any integer type, f32 or f64 */
  size_t npixels; /* pixels a frame (ni * nj), below 2^32 */
  fz_bslz4_codec codec;
  const uint8_t *mask;      /* npixels bytes, nonzero = the pixel is used
                             * (as bslz4-to-sparse); NULL: every pixel */
  const fz_frames_csr *csr; /* NULL: no matrix product */
} fz_frames_params;

/* A decoder of frames of one shape: it owns copies of the mask and of the
 * matrix (with the mask folded in: entries of unused pixels dropped) and the
 * scratch of one frame.  One thread at a time per decoder; any number of
 * decoders may run side by side. */
typedef struct fz_frames fz_frames;

/* Checks the parameters (FZ_EINVAL, FZ_EDTYPE, FZ_ESHAPE, quoted in why)
 * and makes a decoder.  The caller's arrays are not kept. */
int fz_frames_create(const fz_frames_params *p, fz_frames **out, char *why, size_t why_len);
/* NULL is a harmless no-op. */
void fz_frames_destroy(fz_frames *f);
/* Rows of the decoder's matrix (0 without one). */
size_t fz_frames_rows(const fz_frames *f);

/* Where the result of one frame goes.  values holds cap elements of the
 * frame's dtype and indices cap flat pixel indices; powder_f64 or
 * powder_i64 (as the matrix's weights) holds fz_frames_rows() sums and
 * may be NULL to skip the product. */
typedef struct fz_frames_out {
  void *values;
  uint32_t *indices;
  size_t cap;
  size_t count; /* set by the call: pixels listed */
  double *powder_f64;
  int64_t *powder_i64;
} fz_frames_out;

/* Decodes one chunk and lists the used pixels whose value is above `cut`
 * (value > cut as numpy compares them: exactly, NaN never above), in pixel
 * order.  With top_n > 0 only the top_n largest of them are listed (ties
 * go to the lower index), still in pixel order.  Returns the number of
 * pixels above the cut (before top_n); out->count is the number listed.
 * FZ_ENOSPC when they do not fit in cap (nothing listed is then valid; a
 * cap of npixels, or of top_n, always fits).  A chunk whose size is not the
 * frame's: FZ_ESIZE.  The sums with an integer matrix overflowing int64:
 * FZ_ERANGE. */
int64_t fz_frames_sparse(fz_frames *f, const void *chunk, size_t len, double cut, size_t top_n,
                         fz_frames_out *out, char *why, size_t why_len);

/* The top_n largest of total listed pixels (values of dtype and their
 * flat indices, in pixel order, as fz_frames_sparse lists them without
 * top_n), kept in place and in pixel order, ties going to the lower index:
 * the selection fz_frames_sparse makes with top_n, for lists made
 * elsewhere (the GPU decoder's).  keys is scratch of total entries (may be
 * NULL when total <= top_n).  Returns the number kept, min(total, top_n)
 * (total when top_n is 0), or FZ_EDTYPE / FZ_EINVAL. */
int64_t fz_frames_top(fz_dtype dtype, void *values, uint32_t *indices, size_t total, size_t top_n,
                      uint64_t *keys);

/* Decodes one chunk into the dense frame (npixels elements at out, which
 * holds out_len bytes), and the product into powder_f64 / powder_i64 when
 * they are not NULL.  The mask is not applied to the frame. */
int fz_frames_dense(fz_frames *f, const void *chunk, size_t len, void *out, size_t out_len,
                    double *powder_f64, int64_t *powder_i64, char *why, size_t why_len);

/* A batch of frames: chunk i is lengths[i] bytes at base + offsets[i] (a
 * chunk table straight from an HDF5 file).  Frame i lists at most cap
 * pixels into values + i * cap elements and indices + i * cap, its count
 * into counts[i], its status (0 or a negative code) into status[i], and its
 * sums into powder + i * rows when one is given.  A corrupt chunk fails its
 * own frame only. */
typedef struct fz_frames_batch {
  const uint8_t *base;
  const uint64_t *offsets;
  const uint64_t *lengths;
  size_t nframes;
  double cut;
  size_t top_n;
  void *values;
  uint32_t *indices;
  size_t cap;
  size_t *counts;
  int *status;
  double *powder_f64;
  int64_t *powder_i64;
} fz_frames_batch;

/* Runs a batch on nthreads threads (0: one per online CPU), each with a
 * decoder of its own made like f.  Returns the number of frames that
 * failed, or a negative code when none could run (bad arguments, no
 * memory, no thread). */
int64_t fz_frames_sparse_batch(fz_frames *f, const fz_frames_batch *b, unsigned nthreads, char *why,
                               size_t why_len);

#ifdef __cplusplus
}
#endif
#endif /* FZ_FRAMES_H */
