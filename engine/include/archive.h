/*
 * archive.h - the archive header (docs/format.md), written and validated.
 */
#ifndef FZE_ARCHIVE_H
#define FZE_ARCHIVE_H

#include "fze_chain.h"

#define FZE_MAGIC "\x89" "FZA"
#define FZE_FORMAT_VERSION 1
/* Version 2 is version 1 plus the quant stage's fill value; it is written
 * only by archives that use one (docs/format.md). */
#define FZE_FORMAT_VERSION_FILL 2
/* Version 3 adds the ratio stages (lorenzo, huffman), chunks of up to
 * 1 MiB and a chunk table of u32 entries; it is written only by archives
 * that use one of them, and carries the fill value as version 2 does. */
#define FZE_FORMAT_VERSION_RATIO 3
/* Version 4 is version 3 plus the byteplanes stage (the lossless-ratio
 * preset), so that a decoder that predates the stage refuses its archives
 * with EVERSION, not as corrupt. */
#define FZE_FORMAT_VERSION_PLANES 4
/* Version 5 is version 4 with the interpolation's second form: its words
 * in the walk's order, level by level, and its coarser levels binned
 * finer (fzo_interp_level_step).  Every archive with an `interp` stage is
 * written in it; a decoder reads the interpolation of versions 3 and 4 as
 * they were. */
#define FZE_FORMAT_VERSION_LEVELS 5
/* Version 6 is version 5 with a chunk's interpolation on fewer dims than
 * the stage's: predictor byte FZE_PK_DIMS | k (docs/format.md).  Every
 * archive with an `interp` stage is written in it; version 5's archives
 * decode as they were. */
#define FZE_FORMAT_VERSION_DIMS 6
/* Version 7 is version 6 whose huffman stage's streams may code a run of
 * zero words as one symbol for its length's highest bit and the bits
 * below it raw (FZE_HUFF_FORM_CLASS), each stream naming its form (the
 * stage's lv 1).  Every archive with an `interp` stage is written in it;
 * version 6's archives decode as they were, and byteplanes' planes keep
 * their form in every version. */
#define FZE_FORMAT_VERSION_RUNS (FZE_FORMAT_VERSION_DIMS + 1)

typedef struct fze_header {
  fz_dtype dtype;
  unsigned ndims;
  uint64_t dims[FZ_MAX_DIMS];
  unsigned chunk_bytes;
  fze_chain chain;
  uint64_t n_elems, raw_bytes, nchunks;
  size_t header_len;      /* bytes up to the payload */
  unsigned version;       /* the format version written or read */
  unsigned table_w;       /* bytes per chunk table entry: 2, or 4 in version 3 */
  uint32_t payload_crc;
  const uint8_t *sizes;   /* nchunks little-endian entries, inside the archive */
} fze_header;

/* Element count and byte size of a shape; FZ_ESHAPE when they overflow or the
 * shape has no dimension. */
int fze_shape_size(unsigned ndims, const uint64_t *dims, size_t width,
                   uint64_t *n_elems, uint64_t *bytes);
/* The version an archive of this chain and chunk size is written in (the
 * lowest that holds it), and the width of its chunk table entries. */
unsigned fze_format_version(const fze_chain *c, unsigned chunk_bytes);
/* Sets what the version decides in the chain's stages (interp's lv). */
void fze_chain_set_version(fze_chain *c, unsigned version);
static inline unsigned fze_table_width(unsigned version) {
  return version >= FZE_FORMAT_VERSION_RATIO ? 4u : 2u;
}
size_t fze_header_len(const fze_chain *c, unsigned ndims, uint64_t nchunks,
                      unsigned table_w);
/* Writes the header; h->sizes points at the chunk table to copy. */
void fze_header_write(const fze_header *h, uint8_t *out);
/* Validates everything that can be validated without the payload, including
 * the total archive length. */
int fze_header_parse(const uint8_t *arc, size_t len, fze_header *h);
/* The first part of fze_header_parse, which reads no more than the first
 * FZE_PREFIX_MAX bytes of arc (of an archive of len bytes): everything up
 * to the chunk table, which must be present with the header CRC after it
 * (*table_pos: where it starts; h->header_len is set, h->sizes is not).
 * The 8 beyond 26 bytes per stage are the one quant stage's fill value.
 * The caller checks the header CRC, the chunk sizes and the total length
 * as fze_header_parse does, in that order. */
#define FZE_PREFIX_MAX (8 + 8 * FZ_MAX_DIMS + 1 + FZE_MAX_STAGES * 26 + 8 + 4)
int fze_header_parse_prefix(const uint8_t *arc, size_t len, fze_header *h, size_t *table_pos);

/* What fz_archive_info reports of a parsed header (a prefix is enough) of
 * an archive of arc_len bytes (plan.c). */
void fze_header_info(const fze_header *h, size_t arc_len, fz_archive_info *info);

/* The validated shape, chunk size and chain of a plan (plan.c), for the GPU
 * backend, which builds its plans on top of CPU plans. */
const fze_header *fze_plan_header(const fz_plan *plan);

static inline unsigned fze_chunk_size_at(const fze_header *h, uint64_t i) {
  const uint8_t *p = h->sizes + (size_t)h->table_w * i;
  unsigned v = (unsigned)p[0] | (unsigned)p[1] << 8;
  if (h->table_w == 4)
    v |= (unsigned)p[2] << 16 | (unsigned)p[3] << 24;
  return v;
}

/* Sets entry i of a chunk table of entries w bytes wide. */
static inline void fze_chunk_size_put(uint8_t *sizes, unsigned w, uint64_t i, size_t len) {
  uint8_t *p = sizes + (size_t)w * i;
  for (unsigned k = 0; k < w; k++)
    p[k] = (uint8_t)(len >> (8 * k));
}

#endif
