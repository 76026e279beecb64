/*
 * bslz4.h - the block walk of a filter-32008 chunk one step at a time, for
 * the engine's frames decoder (not installed).  fz_bslz4_walk is these two
 * calls in a loop; the decoder runs them as it goes, so the chunk is read
 * once, in order, instead of hopping through it from header to header
 * before the first block is decoded.
 */
#ifndef FZE_BSLZ4_H
#define FZE_BSLZ4_H

#include "fz_frames.h"

/* Block i of nblocks starts at *pos: checks its length against the bytes
 * left, sets *clen to it and advances *pos past the block.  The errors and
 * messages are fz_bslz4_walk's. */
int fze_bslz4_next(const uint8_t *chunk, size_t len, size_t *pos, size_t i, size_t nblocks,
                   size_t *clen, char *why, size_t why_len);

/* After the last block, at pos: the verbatim tail must end the chunk. */
int fze_bslz4_end(size_t len, size_t pos, const fz_bslz4_layout *lay, char *why, size_t why_len);

#endif
