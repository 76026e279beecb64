/*
 * bslz4.c - the chunk format of HDF5 filter 32008 (bitshuffle, then LZ4 or
 * zstd per block), decoded and encoded on the CPU.
 *
 * The format is the bitshuffle package's (fz_frames.h states it).  Every
 * number in a chunk is untrusted: the header is checked for sizes that are
 * whole elements and blocks that are whole groups of eight, the walk checks
 * each block length against the bytes actually present before anything is
 * read, and each block must decompress to exactly its size.  LZ4 and zstd
 * themselves are Debian's liblz4 and libzstd, whose safe decoders never read
 * or write outside the buffers they are given.
 */
#include <lz4.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "bslz4.h"
#include "engine.h"
#include "fz_frames.h"

static uint64_t be64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v = v << 8 | p[i];
  return v;
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be64(uint8_t *p, uint64_t v) {
  for (int i = 7; i >= 0; i--, v >>= 8)
    p[i] = (uint8_t)v;
}

static void put_be32(uint8_t *p, uint32_t v) {
  for (int i = 3; i >= 0; i--, v >>= 8)
    p[i] = (uint8_t)v;
}

static int elem_size_ok(size_t w) {
  return w == 1 || w == 2 || w == 4 || w == 8;
}

size_t fz_bslz4_default_block(size_t elem_size) {
  if (!elem_size_ok(elem_size))
    return 0;
  size_t b = 8192 / elem_size / 8 * 8;
  return b < 128 ? 128 : b;
}

int fz_bslz4_layout_of(const void *chunk, size_t len, size_t elem_size, fz_bslz4_layout *lay,
                       char *why, size_t why_len) {
  const uint8_t *c = chunk;
  if (!lay || (!chunk && len) || !elem_size_ok(elem_size)) {
    fze_why(why, why_len, "bslz4: element size %zu (1, 2, 4 or 8) or a NULL argument", elem_size);
    return FZ_EINVAL;
  }
  if (len < FZ_BSLZ4_HEADER) {
    fze_why(why, why_len, "bslz4: chunk of %zu bytes, shorter than its 12-byte header", len);
    return FZ_ETRUNC;
  }
  uint64_t nbytes = be64(c);
  uint32_t bbytes = be32(c + 8);
  if (nbytes % elem_size || nbytes / elem_size > SIZE_MAX / 8) {
    fze_why(why, why_len,
            "bslz4: uncompressed size %llu is not a whole number of %zu-byte elements",
            (unsigned long long)nbytes, elem_size);
    return FZ_ECORRUPT;
  }
  if (bbytes == 0 || bbytes % elem_size || (bbytes / elem_size) % 8) {
    fze_why(why, why_len, "bslz4: block size of %u bytes is not a multiple of 8 %zu-byte elements",
            bbytes, elem_size);
    return FZ_ECORRUPT;
  }
  lay->nbytes = nbytes;
  lay->elem_size = elem_size;
  lay->nelems = (size_t)(nbytes / elem_size);
  lay->block_elems = bbytes / elem_size;
  size_t full = lay->nelems / lay->block_elems;
  size_t rest = lay->nelems % lay->block_elems;
  lay->last_elems = rest - rest % 8;
  lay->nblocks = full + (lay->last_elems ? 1 : 0);
  if (!lay->last_elems)
    lay->last_elems = full ? lay->block_elems : 0;
  lay->tail_elems = lay->nelems % 8;
  return 0;
}

int fze_bslz4_next(const uint8_t *c, size_t len, size_t *pos, size_t i, size_t nblocks,
                   size_t *clen, char *why, size_t why_len) {
  size_t p = *pos;
  if (len - p < 4) {
    fze_why(why, why_len, "bslz4: chunk ends at byte %zu, inside the length of block %zu of %zu",
            len, i, nblocks);
    return FZ_ETRUNC;
  }
  uint32_t n = be32(c + p);
  p += 4;
  if (n == 0 || n > len - p) {
    fze_why(why, why_len, "bslz4: block %zu of %zu claims %u bytes at byte %zu, %zu are left", i,
            nblocks, n, p, len - p);
    return n ? FZ_ETRUNC : FZ_ECORRUPT;
  }
  *clen = n;
  *pos = p + n;
  return 0;
}

int fze_bslz4_end(size_t len, size_t pos, const fz_bslz4_layout *lay, char *why, size_t why_len) {
  size_t tail = lay->tail_elems * lay->elem_size;
  if (len - pos != tail) {
    fze_why(why, why_len, "bslz4: %zu bytes follow the last block, the %zu-element tail is %zu",
            len - pos, lay->tail_elems, tail);
    return len - pos < tail ? FZ_ETRUNC : FZ_ECORRUPT;
  }
  return 0;
}

int fz_bslz4_walk(const void *chunk, size_t len, const fz_bslz4_layout *lay, uint64_t *starts,
                  char *why, size_t why_len) {
  if (!chunk || !lay || !starts || len < FZ_BSLZ4_HEADER)
    return FZ_EINVAL;
  size_t pos = FZ_BSLZ4_HEADER, clen;
  for (size_t i = 0; i < lay->nblocks; i++) {
    starts[i] = pos;
    int rc = fze_bslz4_next(chunk, len, &pos, i, lay->nblocks, &clen, why, why_len);
    if (rc < 0)
      return rc;
  }
  starts[lay->nblocks] = pos;
  return fze_bslz4_end(len, pos, lay, why, why_len);
}

int fz_bslz4_block_decompress(fz_bslz4_codec codec, const void *src, size_t clen, void *dst,
                              size_t nbytes, char *why, size_t why_len) {
  if (codec == FZ_BSLZ4_LZ4) {
    if (clen > LZ4_MAX_INPUT_SIZE || nbytes > LZ4_MAX_INPUT_SIZE) {
      fze_why(why, why_len, "bslz4: LZ4 block of %zu bytes (%zu compressed) is beyond LZ4's limit",
              nbytes, clen);
      return FZ_ECORRUPT;
    }
    int got = LZ4_decompress_safe(src, dst, (int)clen, (int)nbytes);
    if (got < 0 || (size_t)got != nbytes) {
      fze_why(why, why_len, "bslz4: LZ4 block of %zu compressed bytes %s (expected %zu bytes)",
              clen, got < 0 ? "is corrupt" : "decompresses to fewer bytes", nbytes);
      return FZ_ECORRUPT;
    }
    return 0;
  }
  if (codec == FZ_BSLZ4_ZSTD) {
    size_t got = ZSTD_decompress(dst, nbytes, src, clen);
    if (ZSTD_isError(got) || got != nbytes) {
      fze_why(why, why_len, "bslz4: zstd block of %zu compressed bytes: %s (expected %zu bytes)",
              clen, ZSTD_isError(got) ? ZSTD_getErrorName(got) : "too few bytes", nbytes);
      return FZ_ECORRUPT;
    }
    return 0;
  }
  fze_why(why, why_len, "bslz4: codec %d (2 LZ4, 3 zstd)", (int)codec);
  return FZ_EINVAL;
}

/* The engine's bitshuffle stage uses this very layout (plane 8j + b is bit
 * b of byte j, padding only when n is not a multiple of 8, which a block
 * never is), so a block is one call of it.  The unshuffle, which every
 * dense decode runs, is bslz4_unshuffle.c's. */
void fz_bitshuffle_block(const void *in, size_t n, size_t elem_size, void *out) {
  fze_bitshuffle_encode((unsigned)elem_size, in, n, out);
}

int64_t fz_bslz4_decode(fz_bslz4_codec codec, const void *chunk, size_t len, size_t elem_size,
                        void *out, size_t out_len, char *why, size_t why_len) {
  fz_bslz4_layout lay;
  int rc = fz_bslz4_layout_of(chunk, len, elem_size, &lay, why, why_len);
  if (rc < 0)
    return rc;
  if (codec != FZ_BSLZ4_LZ4 && codec != FZ_BSLZ4_ZSTD) {
    fze_why(why, why_len, "bslz4: codec %d (2 LZ4, 3 zstd)", (int)codec);
    return FZ_EINVAL;
  }
  if (lay.nbytes > out_len || !out) {
    fze_why(why, why_len, "bslz4: the chunk holds %llu bytes, the output %zu",
            (unsigned long long)lay.nbytes, out_len);
    return FZ_ENOSPC;
  }
  /* The blocks are walked first: the header's counts are now bounded by
   * the chunk's own length (each block takes at least 5 bytes). */
  if (lay.nblocks > (len - FZ_BSLZ4_HEADER) / 5) {
    fze_why(why, why_len, "bslz4: %zu blocks cannot fit in a %zu-byte chunk", lay.nblocks, len);
    return FZ_ETRUNC;
  }
  uint64_t *starts = malloc((lay.nblocks + 1) * sizeof *starts);
  size_t bbytes = lay.block_elems * elem_size;
  if (bbytes > lay.nbytes)
    bbytes = (size_t)lay.nbytes;
  uint8_t *scratch = malloc(bbytes ? bbytes : 1);
  if (!starts || !scratch) {
    rc = FZ_ENOMEM;
    goto out;
  }
  rc = fz_bslz4_walk(chunk, len, &lay, starts, why, why_len);
  if (rc < 0)
    goto out;
  const uint8_t *c = chunk;
  uint8_t *o = out;
  for (size_t i = 0; i < lay.nblocks; i++) {
    size_t n = i + 1 < lay.nblocks ? lay.block_elems : lay.last_elems;
    rc = fz_bslz4_block_decompress(codec, c + starts[i] + 4, starts[i + 1] - starts[i] - 4, scratch,
                                   n * elem_size, why, why_len);
    if (rc < 0)
      goto out;
    fz_bitunshuffle_block(scratch, n, elem_size, o + i * lay.block_elems * elem_size);
  }
  memcpy(o + (lay.nelems - lay.tail_elems) * elem_size, c + starts[lay.nblocks],
         lay.tail_elems * elem_size);
  rc = 0;
out:
  free(starts);
  free(scratch);
  return rc < 0 ? rc : (int64_t)lay.nbytes;
}

static size_t block_bound(fz_bslz4_codec codec, size_t bytes) {
  return codec == FZ_BSLZ4_LZ4 ? (size_t)LZ4_compressBound((int)bytes) : ZSTD_compressBound(bytes);
}

size_t fz_bslz4_bound(fz_bslz4_codec codec, size_t nelems, size_t elem_size, size_t block_elems) {
  if (!elem_size_ok(elem_size) || (codec != FZ_BSLZ4_LZ4 && codec != FZ_BSLZ4_ZSTD))
    return 0;
  if (!block_elems)
    block_elems = fz_bslz4_default_block(elem_size);
  if (block_elems % 8 || block_elems > UINT32_MAX / elem_size ||
      block_elems * elem_size > LZ4_MAX_INPUT_SIZE || nelems > SIZE_MAX / 16 / elem_size)
    return 0;
  size_t nblocks = nelems / block_elems + 1;
  return FZ_BSLZ4_HEADER + nblocks * (4 + block_bound(codec, block_elems * elem_size)) +
         8 * elem_size;
}

int64_t fz_bslz4_encode(fz_bslz4_codec codec, const void *data, size_t nelems, size_t elem_size,
                        size_t block_elems, int level, void *out, size_t cap, char *why,
                        size_t why_len) {
  if (!block_elems)
    block_elems = fz_bslz4_default_block(elem_size);
  if (!fz_bslz4_bound(codec, nelems, elem_size, block_elems) || (!data && nelems) || !out) {
    fze_why(why, why_len,
            "bslz4: encode of %zu elements of %zu bytes in blocks of %zu with codec %d", nelems,
            elem_size, block_elems, (int)codec);
    return FZ_EINVAL;
  }
  const uint8_t *in = data;
  uint8_t *o = out;
  if (cap < FZ_BSLZ4_HEADER)
    return FZ_ENOSPC;
  put_be64(o, (uint64_t)nelems * elem_size);
  put_be32(o + 8, (uint32_t)(block_elems * elem_size));
  size_t pos = FZ_BSLZ4_HEADER, done = 0, shuffled = nelems - nelems % 8;
  uint8_t *scratch = malloc(block_elems * elem_size);
  if (!scratch)
    return FZ_ENOMEM;
  int rc = 0;
  while (done < shuffled) {
    size_t n = shuffled - done < block_elems ? shuffled - done : block_elems;
    size_t bytes = n * elem_size;
    fz_bitshuffle_block(in + done * elem_size, n, elem_size, scratch);
    if (cap - pos < 4) {
      rc = FZ_ENOSPC;
      break;
    }
    size_t room = cap - pos - 4, got;
    if (codec == FZ_BSLZ4_LZ4) {
      int r = LZ4_compress_default((const char *)scratch, (char *)o + pos + 4, (int)bytes,
                                   room > INT32_MAX ? INT32_MAX : (int)room);
      got = r > 0 ? (size_t)r : 0;
    } else {
      size_t r = ZSTD_compress(o + pos + 4, room, scratch, bytes, level);
      got = ZSTD_isError(r) ? 0 : r;
    }
    if (!got) {
      rc = FZ_ENOSPC;
      break;
    }
    put_be32(o + pos, (uint32_t)got);
    pos += 4 + got;
    done += n;
  }
  free(scratch);
  size_t tail = (nelems - shuffled) * elem_size;
  if (!rc && cap - pos < tail)
    rc = FZ_ENOSPC;
  if (rc < 0) {
    fze_why(why, why_len, "bslz4: the encoded chunk does not fit in %zu bytes", cap);
    return rc;
  }
  memcpy(o + pos, in + shuffled * elem_size, tail);
  return (int64_t)(pos + tail);
}
