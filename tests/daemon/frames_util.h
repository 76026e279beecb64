/*
 * frames_util.h - what the "frames" suites share: a batch of detector
 * frames made by the engine's encoder (u16, NI x NJ pixels, NFRAMES
 * chunks) and the params that carry them.
 */
#ifndef FZD_TEST_FRAMES_UTIL_H
#define FZD_TEST_FRAMES_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "fzp.h"
#include "wire.h"

#define NI 48
#define NJ 64
#define NPIX (NI * NJ)
#define NFRAMES 4

typedef struct chunks {
  uint8_t *buf[NFRAMES];
  size_t len[NFRAMES];
  uint16_t px[NFRAMES][NPIX];
} chunks;

/* Frame f: a low background with a few peaks, different per frame, and
 * its LZ4 chunk. */
void make_chunks(chunks *c);
void free_chunks(chunks *c);

/* "dtype" u16 and "shape" [ni, nj] (2 pairs). */
void pack_u16_shape(msgpack_packer *pk, size_t ni, size_t nj);
/* The common params (4 pairs): dtype u16, shape [NI, NJ], codec lz4, cut. */
void pack_common(msgpack_packer *pk, double cut);
/* "offsets" and "lengths" of n chunks (2 pairs). */
void pack_table(msgpack_packer *pk, size_t n, const uint64_t *offs, const uint64_t *lens);
/* "chunks" (1 pair), chunk bad (-1: none) with its first block's length
 * made to run past the chunk. */
void pack_chunk_list(msgpack_packer *pk, const chunks *c, int bad);

/* frames_setup: {"shape": [npix], "mask"?, "csr"?} (f32 weights); returns
 * the error code and the id in *id.  bad_csr: 1 indices one entry short, 2
 * an index past the frame. */
int frames_setup_call(wire *w, uint32_t msgid, const uint8_t *mask, size_t npix,
                      const uint64_t *indptr, size_t rows, const uint32_t *indices,
                      const float *weights, int bad_csr, uint64_t *id);

#endif
