/*
 * frames_data.h - synthetic detector frames for the GPU frames tests: a
 * batch of chunks in one buffer (offsets and lengths, as an HDF5 chunk
 * table), encoded by the engine's bitshuffle-LZ4 codec.
 */
#ifndef FRAMES_DATA_H
#define FRAMES_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "fz_frames.h"

typedef struct mframes {
  uint8_t *base;
  uint64_t *offsets, *lengths;
  size_t nframes;
} mframes;

/* nframes frames of npixels pixels of dtype t: a low background with a
 * fraction peak_frac of peaks, negative values, and for floats -0.0, NaNs
 * and infinities; block_elems 0 is the default block.  Aborts the test on
 * failure. */
void mframes_make(mframes *mf, fz_dtype t, size_t npixels, size_t nframes, size_t block_elems,
                  unsigned seed, double peak_frac);
/* count copies of src's first chunk, each with its own bytes. */
void mframes_variants(mframes *out, const mframes *src, size_t count);
void mframes_free(mframes *mf);

#endif
