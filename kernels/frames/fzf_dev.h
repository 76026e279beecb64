/*
 * fzf_dev.h - the device logic of the GPU frames decoder, written once for
 * the GPU and for the CPU models that test it.
 *
 * Every step a warp runs is here: the block-header walk (one thread a
 * frame), the LZ4 decode of one block (one warp a block), the bit unshuffle
 * of a decoded block with the count of its pixels above the cut, and the
 * compaction of a block's pixels into the frame's list at a prefix-summed
 * offset.  Under nvcc the lane loops below are the 32 lanes of a warp; in a
 * plain C compiler they are loops over 32 lanes, run one after the other,
 * so tests/gpu_frames runs this very code on the CPU and compares it with
 * the engine (liblz4, fz_frames_sparse).  Work outside a lane loop is
 * uniform: every lane of a warp computes the same value (on the CPU it runs
 * once), which is why the LZ4 sequence parse is outside and the byte
 * copies inside.
 *
 * Nothing read from a chunk is trusted: every length and offset is checked
 * against the block, the chunk and the output before a byte moves, and an
 * error is a reason code (the table below) that fails the frame.
 */
#ifndef FZF_DEV_H
#define FZF_DEV_H

#include <stdint.h>

#include "fz_frames_cut.h"

#ifdef __CUDACC__
#define FZF_FN static __device__ __forceinline__
#define FZF_HD static __host__ __device__ __forceinline__
/* The body runs once in each lane, `lane` being its index. */
#define FZF_LANES(lane) for (unsigned lane = threadIdx.x & 31u, once_ = 1; once_; once_ = 0)
#define FZF_SYNC() __syncwarp()
/* out = the warp's ballot of `pred`, which may use `lane`. */
#define FZF_BALLOT(out, lane, pred)                                                                \
  do {                                                                                             \
    unsigned lane __attribute__((unused)) = threadIdx.x & 31u;                                     \
    (out) = __ballot_sync(0xffffffffu, (pred));                                                    \
  } while (0)
#define FZF_POPC(x) __popc(x)
/* A load of chunk bytes, which no kernel writes: the read-only cache. */
#define FZF_LDG(p) __ldg(p)
/* x (an FZF_PER_LANE value) becomes its inclusive prefix sum over the
 * lanes; FZF_LAST(x) is lane 31's. */
#define FZF_INCL_SCAN(x)                                                                           \
  do {                                                                                             \
    unsigned l_ = threadIdx.x & 31u;                                                               \
    for (unsigned d_ = 1; d_ < 32; d_ *= 2) {                                                      \
      uint32_t y_ = __shfl_up_sync(0xffffffffu, (x), d_);                                          \
      if (l_ >= d_)                                                                                \
        (x) += y_;                                                                                 \
    }                                                                                              \
  } while (0)
#define FZF_LAST(x) __shfl_sync(0xffffffffu, (x), 31)
/* A value of each lane: a register on the GPU, an array on the CPU. */
#define FZF_PER_LANE(type, name) type name
#define FZF_MINE(name, lane) (name)
#else
#define FZF_FN static inline
#define FZF_HD static inline
#define FZF_LANES(lane) for (unsigned lane = 0; lane < 32u; lane++)
#define FZF_SYNC() ((void)0)
#define FZF_BALLOT(out, lane, pred)                                                                \
  do {                                                                                             \
    (out) = 0;                                                                                     \
    for (unsigned lane = 0; lane < 32u; lane++)                                                    \
      (out) |= (unsigned)((pred) ? 1u : 0u) << lane;                                               \
  } while (0)
#define FZF_POPC(x) ((unsigned)__builtin_popcount(x))
#define FZF_LDG(p) (*(p))
#define FZF_INCL_SCAN(x)                                                                           \
  do {                                                                                             \
    for (unsigned l_ = 1; l_ < 32; l_++)                                                           \
      (x)[l_] += (x)[l_ - 1];                                                                      \
  } while (0)
#define FZF_LAST(x) ((x)[31])
#define FZF_PER_LANE(type, name) type name[32]
#define FZF_MINE(name, lane) ((name)[lane])
#endif

/* Why a frame failed: X(name, fz_errno name, message).  A frame's status
 * is the first failure in chunk order, as the CPU decoder meets them. */
#define FZF_REASONS(X)                                                                             \
  X(OK, 0, "no error")                                                                             \
  X(HEADER_SHORT, ETRUNC, "chunk shorter than its 12-byte header")                                 \
  X(SIZE_ELEMS, ECORRUPT, "uncompressed size is not a whole number of elements")                   \
  X(SIZE_FRAME, ESIZE, "the chunk's uncompressed size is not the frame's")                         \
  X(BLOCK_SIZE, ECORRUPT, "block size is not a multiple of 8 elements")                            \
  X(BLOCK_BIG, ENOSYS, "blocks larger than the plan's max_block_bytes")                            \
  X(CHUNK_BIG, ENOSYS, "chunk of 4 GiB or more")                                                   \
  X(WALK_LEN, ETRUNC, "chunk ends inside a block's length")                                        \
  X(WALK_ZERO, ECORRUPT, "a block's compressed length is 0")                                       \
  X(WALK_PAST, ETRUNC, "a block's compressed length runs past the chunk")                          \
  X(TAIL_SHORT, ETRUNC, "the chunk ends inside the verbatim tail")                                 \
  X(TAIL_LONG, ECORRUPT, "bytes after the verbatim tail")                                          \
  X(LZ4_LIT_LEN, ECORRUPT, "LZ4 literal length runs past the block's data")                        \
  X(LZ4_LIT_END, ECORRUPT, "LZ4 last literals do not end the block's data and output")             \
  X(LZ4_MATCH_LEN, ECORRUPT, "LZ4 match length runs past the block's data")                        \
  X(LZ4_OFFSET, ECORRUPT, "LZ4 match offset before the block")                                     \
  X(LZ4_OFFSET0, ECORRUPT, "LZ4 match offset 0, which the format forbids")                         \
  X(LZ4_MATCH_END, ECORRUPT, "LZ4 match past the block or into its last 5 bytes")                  \
  X(LZ4_SHORT, ECORRUPT, "LZ4 block decompresses to fewer bytes than the block")                   \
  X(RANGE, ERANGE, "the integer sum of a matrix row overflows int64")                              \
  X(NOSPACE, ENOSPC, "more pixels above the cut than the list holds")

enum {
#define FZF_REASON_ENUM(name, code, text) FZF_R_##name,
  FZF_REASONS(FZF_REASON_ENUM)
#undef FZF_REASON_ENUM
      FZF_R_COUNT
};

/* A frame's status word: the smallest one wins (atomicMin on the device),
 * so the failure that comes first in the chunk is the one reported, as on
 * the CPU, which meets block i's length before its data and its data before
 * block i + 1.  Bits 63..24: the place (2 * block + 1 for a length or walk
 * error of that block, 2 * block + 2 for its data; 0 for the header;
 * 2 * nblocks + 1 for the tail; then the product and the list), bits 7..0:
 * the reason.  All ones: no failure. */
#define FZF_STATUS_OK (~0ull)
FZF_HD uint64_t fzf_status(uint64_t place, unsigned reason) {
  return place << 24 | reason;
}
#define FZF_PLACE_DATA(i) (2 * (uint64_t)(i) + 2)
#define FZF_PLACE_LEN(i) (2 * (uint64_t)(i) + 1)
#define FZF_PLACE_LAST ((1ull << 40) - 1) /* after every block: product, list */

/* ---- Order keys and the cut: fz_frames_cut.h, the engine's and this decoder's. ---- */

FZF_HD int fzf_above(uint64_t x, unsigned w, int kind, const fz_frames_cut *c) {
  if (c->mode != FZ_FRAMES_CUT_KEY)
    return c->mode == FZ_FRAMES_CUT_ALL;
  uint64_t key = fz_frames_order_key(x, w, kind);
  return key > c->k && key <= c->kinf;
}

/* Bit p of the mask bits (NULL: every pixel used). */
FZF_HD int fzf_used(const uint8_t *active, uint64_t p) {
  return !active || (active[p >> 3] >> (p & 7) & 1);
}

FZF_HD uint32_t fzf_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* ---- Step 1 and 2: the header and the block walk (one thread). ---- */

/* What the walk found: the blocks that may be decoded (all of them, or
 * those before the first bad length), their sizes, and the status. */
typedef struct fzf_walk {
  uint32_t nblocks;     /* blocks with a checked length (starts valid) */
  uint32_t block_elems; /* elements of a full block */
  uint32_t last_elems;  /* elements of the last block of the chunk */
  uint32_t all_blocks;  /* blocks the header describes */
  uint64_t status;      /* FZF_STATUS_OK or the walk's failure */
} fzf_walk;

/* Walks a chunk of len bytes of a frame of npixels w-byte elements:
 * starts[i] = the offset of block i's 4-byte length (its data is the
 * starts[i + 1] - starts[i] - 4 bytes after it), as fz_bslz4_walk, and
 * starts[all_blocks] = the tail's offset when every length is good.
 * starts holds npixels / 8 + 1 entries, which is enough: a block is at
 * least 8 elements.  The checks and their order are the CPU's
 * (fz_bslz4_layout_of, then fze_bslz4_next block by block, then the
 * tail), and blocks over max_block_bytes are refused (the shared memory of
 * a warp holds one block). */
FZF_HD fzf_walk fzf_walk_chunk(const uint8_t *c, uint64_t len, unsigned w, uint64_t npixels,
                               uint32_t max_block_bytes, uint32_t *starts) {
  fzf_walk r = {0, 0, 0, 0, FZF_STATUS_OK};
  if (len < 12) {
    r.status = fzf_status(0, FZF_R_HEADER_SHORT);
    return r;
  }
  uint64_t nbytes = (uint64_t)fzf_be32(c) << 32 | fzf_be32(c + 4);
  uint32_t bbytes = fzf_be32(c + 8);
  if (nbytes % w) {
    r.status = fzf_status(0, FZF_R_SIZE_ELEMS);
    return r;
  }
  if (bbytes == 0 || bbytes % w || (bbytes / w) % 8) {
    r.status = fzf_status(0, FZF_R_BLOCK_SIZE);
    return r;
  }
  /* The CPU's frames decoder compares the size after the block size. */
  if (nbytes / w != npixels) {
    r.status = fzf_status(0, FZF_R_SIZE_FRAME);
    return r;
  }
  uint64_t n = npixels, be = bbytes / w, full = n / be, rest = n % be, last = rest - rest % 8;
  uint64_t nblocks = full + (last ? 1 : 0);
  if (!last)
    last = full ? be : 0;
  if ((nblocks > 1 ? be : last) * w > max_block_bytes) {
    r.status = fzf_status(0, FZF_R_BLOCK_BIG);
    return r;
  }
  if (len > 0xffffffffull) {
    r.status = fzf_status(0, FZF_R_CHUNK_BIG);
    return r;
  }
  r.block_elems = (uint32_t)be;
  r.last_elems = (uint32_t)last;
  r.all_blocks = (uint32_t)nblocks;
  uint64_t pos = 12;
  for (uint64_t i = 0; i < nblocks; i++) {
    starts[i] = (uint32_t)pos;
    if (len - pos < 4) {
      r.status = fzf_status(FZF_PLACE_LEN(i), FZF_R_WALK_LEN);
      return r;
    }
    uint32_t clen = fzf_be32(c + pos);
    pos += 4;
    if (clen == 0 || clen > len - pos) {
      r.status = fzf_status(FZF_PLACE_LEN(i), clen ? FZF_R_WALK_PAST : FZF_R_WALK_ZERO);
      return r;
    }
    pos += clen;
    r.nblocks = (uint32_t)(i + 1);
  }
  starts[nblocks] = (uint32_t)pos;
  uint64_t tail = (n % 8) * w;
  if (len - pos != tail)
    r.status =
        fzf_status(FZF_PLACE_LEN(nblocks), len - pos < tail ? FZF_R_TAIL_SHORT : FZF_R_TAIL_LONG);
  return r;
}

/* ---- Step 3: LZ4 of one block, by a warp. ---- */

/* One sequence of an LZ4 block: literals at src + lit_at, then a match
 * (none in the last sequence). */
typedef struct fzf_seq {
  uint32_t lit_at, lit_len, offset, match_len;
  int last;
} fzf_seq;

/* Parses the sequence at *ip of src[0..clen) for an output at op of n
 * bytes, with liblz4's rules for a whole block (LZ4_decompress_safe): a
 * literal run that could not be followed by a match inside the limits
 * (within 12 bytes of the output's end or 6 of the input's) must be the
 * last sequence and end both exactly; a match may not start before the
 * block nor end in its last 5 bytes.  Lengths are bounded by the output
 * as they are read, so no sum can overflow.  Returns 0 or a reason. */
FZF_FN int fzf_lz4_parse(const uint8_t *src, uint32_t clen, uint32_t *ip_, uint32_t op, uint32_t n,
                         fzf_seq *q) {
  uint32_t ip = *ip_;
  if (ip >= clen)
    return FZF_R_LZ4_LIT_LEN;
  unsigned token = FZF_LDG(src + ip++);
  uint32_t lit = token >> 4;
  if (lit == 15) {
    /* liblz4 reads the extension bytes while they stay 15 bytes before
     * the end (read_variable_length with its initial check). */
    if (clen < 15 || ip >= clen - 15)
      return FZF_R_LZ4_LIT_LEN;
    unsigned s;
    do {
      s = FZF_LDG(src + ip++);
      lit += s;
      if (ip > clen - 15 || lit > n)
        return FZF_R_LZ4_LIT_LEN;
    } while (s == 255);
  }
  q->lit_at = ip;
  q->lit_len = lit;
  if ((uint64_t)op + lit + 12 > n || (uint64_t)ip + lit + 6 > clen) {
    if ((uint64_t)ip + lit != clen || (uint64_t)op + lit > n)
      return FZF_R_LZ4_LIT_END;
    q->last = 1;
    q->offset = q->match_len = 0;
    *ip_ = clen;
    return 0;
  }
  ip += lit;
  q->last = 0;
  q->offset = (uint32_t)FZF_LDG(src + ip) | (uint32_t)FZF_LDG(src + ip + 1) << 8;
  ip += 2;
  uint32_t ml = token & 15;
  if (ml == 15) {
    unsigned s;
    do {
      s = FZF_LDG(src + ip++);
      ml += s;
      if (ip > clen - 4 || ml > n)
        return FZF_R_LZ4_MATCH_LEN;
    } while (s == 255);
  }
  ml += 4;
  /* liblz4 takes an offset of 0 and copies whatever its output buffer
   * held; the format forbids it, and a frame cannot depend on stale
   * memory, so it fails here. */
  if (q->offset == 0)
    return FZF_R_LZ4_OFFSET0;
  if (q->offset > op + lit)
    return FZF_R_LZ4_OFFSET;
  if ((uint64_t)op + lit + ml + 5 > n)
    return FZF_R_LZ4_MATCH_END;
  q->match_len = ml;
  *ip_ = ip;
  return 0;
}

/* Decodes the LZ4 data src[0..clen) into exactly n bytes at dst, one warp:
 * the parse is uniform, the copies are split over the lanes.  A match
 * closer than its length repeats the d bytes before it, so byte j of it is
 * dst[op - d + j % d], which was written before the match began: the lanes
 * copy any overlap at once, and a barrier after each copy is all the
 * ordering needed.  Returns 0 or a reason. */
FZF_FN int fzf_lz4_block(const uint8_t *src, uint32_t clen, uint8_t *dst, uint32_t n) {
  if (clen == 0)
    return FZF_R_LZ4_LIT_LEN;
  uint32_t ip = 0, op = 0;
  for (;;) {
    fzf_seq q;
    int rc = fzf_lz4_parse(src, clen, &ip, op, n, &q);
    if (rc)
      return rc;
    FZF_LANES(lane) {
      for (uint32_t j = lane; j < q.lit_len; j += 32)
        dst[op + j] = FZF_LDG(src + q.lit_at + j);
    }
    FZF_SYNC();
    op += q.lit_len;
    if (q.last)
      return op == n ? 0 : FZF_R_LZ4_SHORT;
    uint32_t d = q.offset;
    FZF_LANES(lane) {
      if (d >= q.match_len) {
        for (uint32_t j = lane; j < q.match_len; j += 32)
          dst[op + j] = dst[op - d + j];
      } else if (d == 1) {
        /* A run of one byte, the common case of a bit plane's zeros. */
        uint8_t c = dst[op - 1];
        for (uint32_t j = lane; j < q.match_len; j += 32)
          dst[op + j] = c;
      } else {
        for (uint32_t j = lane; j < q.match_len; j += 32)
          dst[op + j] = dst[op - d + j % d];
      }
    }
    FZF_SYNC();
    op += q.match_len;
  }
}

/* ---- Step 4: the unshuffle of a decoded block, and its cut. ---- */

/* The 8x8 bit transpose of x, bit 8r + c to bit 8c + r. */
FZF_HD uint64_t fzf_transpose8(uint64_t x) {
  uint64_t t;
  t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAull;
  x ^= t ^ (t << 7);
  t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCull;
  x ^= t ^ (t << 14);
  t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ull;
  x ^= t ^ (t << 28);
  return x;
}

/* The 8 elements of column col (elements 8 col .. 8 col + 7) of a shuffled
 * block of rowb-byte rows: v[k] = the raw bits of element 8 col + k.  Row
 * 8j + b holds bit b of byte j, element e at bit e % 8 of byte e / 8. */
FZF_HD void fzf_column(const uint8_t *blk, uint32_t rowb, uint32_t col, unsigned w, uint64_t v[8]) {
  for (unsigned k = 0; k < 8; k++)
    v[k] = 0;
  for (unsigned j = 0; j < w; j++) {
    uint64_t x = 0;
    for (unsigned b = 0; b < 8; b++)
      x |= (uint64_t)blk[(size_t)(8 * j + b) * rowb + col] << (8 * b);
    x = fzf_transpose8(x);
    for (unsigned k = 0; k < 8; k++)
      v[k] |= (x >> (8 * k) & 0xff) << (8 * j);
  }
}

FZF_HD void fzf_put(uint8_t *p, unsigned w, uint64_t v) {
  switch (w) {
  case 1: *p = (uint8_t)v; break;
  case 2: *(uint16_t *)(void *)p = (uint16_t)v; break;
  case 4: *(uint32_t *)(void *)p = (uint32_t)v; break;
  default: *(uint64_t *)(void *)p = v; break;
  }
}

/* The 8 elements v[0..7] at p: w 8-byte words when p allows, else
 * element by element. */
FZF_HD void fzf_put8(uint8_t *p, unsigned w, const uint64_t v[8]) {
  if ((uintptr_t)p % 8 == 0) {
    unsigned per = 8 / w;
    for (unsigned m = 0; m < w; m++) {
      uint64_t word = 0;
      for (unsigned t = 0; t < per; t++)
        word |= v[m * per + t] << (8 * w * t % 64);
      ((uint64_t *)(void *)p)[m] = word;
    }
  } else {
    for (unsigned k = 0; k < 8; k++)
      fzf_put(p + (size_t)k * w, w, v[k]);
  }
}

FZF_HD uint64_t fzf_get(const uint8_t *p, unsigned w) {
  switch (w) {
  case 1: return *p;
  case 2: return *(const uint16_t *)(const void *)p;
  case 4: return *(const uint32_t *)(const void *)p;
  default: return *(const uint64_t *)(const void *)p;
  }
}

/* What every block of a batch shares. */
typedef struct fzf_frame_view {
  unsigned w;
  int kind;
  fz_frames_cut cut;
  const uint8_t *active; /* mask bits or NULL */
} fzf_frame_view;

/* Unshuffles the n elements of a decoded block (blk, shuffled) into dense
 * (the block's first element; w-aligned), and returns how many of them,
 * pixel base onwards, are used and above the cut (uniform: every lane
 * returns the sum). */
FZF_FN uint32_t fzf_unshuffle_count(const uint8_t *blk, uint32_t n, uint64_t base, uint8_t *dense,
                                    const fzf_frame_view *fv, int count) {
  uint32_t rowb = n / 8, total = 0;
  unsigned w = fv->w;
  for (uint32_t c0 = 0; c0 < rowb; c0 += 32) {
    unsigned m = 0;
    FZF_PER_LANE(uint32_t, got);
    FZF_LANES(lane) {
      uint32_t col = c0 + lane, cnt = 0;
      if (col < rowb) {
        uint64_t v[8];
        fzf_column(blk, rowb, col, w, v);
        fzf_put8(dense + (size_t)8 * col * w, w, v);
        for (unsigned k = 0; k < 8; k++) {
          cnt += count && fzf_used(fv->active, base + 8 * col + k) &&
                 fzf_above(v[k], w, fv->kind, &fv->cut);
        }
      }
      FZF_MINE(got, lane) = cnt;
    }
    /* The warp's sum, by ballots of the counts' bits (at most 8 a lane). */
    for (unsigned b = 0; b < 4 && count; b++) {
      FZF_BALLOT(m, lane, FZF_MINE(got, lane) >> b & 1);
      total += FZF_POPC(m) << b;
    }
  }
  return total;
}

/* The tail of a frame: t elements (t < 8) verbatim at src, pixel base on:
 * copied to dense and counted as above. */
FZF_FN uint32_t fzf_tail_count(const uint8_t *src, uint32_t t, uint64_t base, uint8_t *dense,
                               const fzf_frame_view *fv, int count) {
  unsigned m;
  FZF_LANES(lane) {
    if (lane < t) {
      uint64_t v = 0;
      for (unsigned j = 0; j < fv->w; j++)
        v |= (uint64_t)src[lane * fv->w + j] << (8 * j);
      fzf_put(dense + (size_t)lane * fv->w, fv->w, v);
    }
  }
  FZF_SYNC();
  FZF_BALLOT(
      m, lane,
      count && lane < t && fzf_used(fv->active, base + lane) &&
          fzf_above(fzf_get(dense + (size_t)lane * fv->w, fv->w), fv->w, fv->kind, &fv->cut));
  return FZF_POPC(m);
}

/* ---- Items: the blocks of every frame of a batch, then its tail. ---- */

/* A frame that walked well has nblocks + 1 items (the last one its
 * verbatim tail, maybe empty); one that failed, the blocks before the
 * failure.  item_base[f] = the first item of frame f (nframes + 1). */
FZF_HD void fzf_item_bases(const fzf_walk *walks, uint32_t nframes, uint32_t *item_base) {
  uint32_t at = 0;
  for (uint32_t f = 0; f < nframes; f++) {
    item_base[f] = at;
    at += walks[f].nblocks + (walks[f].status == FZF_STATUS_OK ? 1 : 0);
  }
  item_base[nframes] = at;
}

/* The frame of an item: the last f with item_base[f] <= item. */
FZF_HD uint32_t fzf_frame_of(const uint32_t *item_base, uint32_t nframes, uint32_t item) {
  uint32_t lo = 0, hi = nframes;
  while (hi - lo > 1) {
    uint32_t mid = (lo + hi) / 2;
    if (item_base[mid] <= item)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/* Item i of a frame: its elements and first pixel; 0 for the tail. */
FZF_HD int fzf_item_block(const fzf_walk *wk, uint64_t npixels, uint32_t i, uint32_t *n,
                          uint64_t *base) {
  if (i < wk->nblocks) {
    *n = i + 1 < wk->all_blocks ? wk->block_elems : wk->last_elems;
    *base = (uint64_t)i * wk->block_elems;
    return 1;
  }
  *n = (uint32_t)(npixels % 8);
  *base = npixels - *n;
  return 0;
}

/* The exclusive prefix sums of count[first..last) into off, by a warp
 * 32 items at a time; returns the total (uniform). */
FZF_FN uint64_t fzf_scan_items(const uint32_t *count, uint32_t *off, uint32_t first,
                               uint32_t last) {
  uint64_t run = 0;
  for (uint32_t i0 = first; i0 < last; i0 += 32) {
    FZF_PER_LANE(uint32_t, x);
    FZF_LANES(lane) {
      FZF_MINE(x, lane) = i0 + lane < last ? count[i0 + lane] : 0;
    }
    FZF_INCL_SCAN(x);
    FZF_LANES(lane) {
      if (i0 + lane < last)
        off[i0 + lane] = (uint32_t)(run + FZF_MINE(x, lane) - count[i0 + lane]);
    }
    run += FZF_LAST(x);
  }
  return run;
}

/* ---- Step 5: the list of one block at its prefix-summed offset. ---- */

/* Lists the used pixels above the cut of the n dense elements at dense
 * (pixels base onwards) into values / indices from position `at`, in pixel
 * order: each 32 elements are a ballot, each lane writes at the count of
 * the set lanes below it. */
FZF_FN void fzf_compact(const uint8_t *dense, uint32_t n, uint64_t base, const fzf_frame_view *fv,
                        uint8_t *values, uint32_t *indices, uint64_t at) {
  unsigned w = fv->w;
  for (uint32_t e0 = 0; e0 < n; e0 += 32) {
    unsigned m;
    FZF_BALLOT(m, lane,
               e0 + lane < n && fzf_used(fv->active, base + e0 + lane) &&
                   fzf_above(fzf_get(dense + (size_t)(e0 + lane) * w, w), w, fv->kind, &fv->cut));
    FZF_LANES(lane) {
      if (m >> lane & 1) {
        uint64_t o = at + FZF_POPC(m & ((1u << lane) - 1));
        fzf_put(values + o * w, w, fzf_get(dense + (size_t)(e0 + lane) * w, w));
        indices[o] = (uint32_t)(base + e0 + lane);
      }
    }
    at += FZF_POPC(m);
  }
}

/* ---- The matrix product of one row (one thread). ---- */

/* A pixel's raw bits as the double the CPU's (double)px gives. */
FZF_HD double fzf_to_double(uint64_t x, unsigned w, int kind) {
  if (kind == FZ_FRAMES_FLOAT) {
    if (w == 4) {
      union {
        uint32_t u;
        float f;
      } v;
      v.u = (uint32_t)x;
      return (double)v.f;
    }
    union {
      uint64_t u;
      double d;
    } v;
    v.u = x;
    return v.d;
  }
  if (kind == FZ_FRAMES_SIGNED) {
    unsigned sh = 64 - 8 * w;
    return (double)((int64_t)(x << sh) >> sh);
  }
  return (double)x;
}

/* Row r's sum of w_f32 * pixel in double, in the stored order. */
FZF_HD double fzf_row_f64(const uint64_t *indptr, const uint32_t *cols, const float *wf,
                          const uint8_t *dense, unsigned w, int kind, uint64_t r) {
  double s = 0;
  for (uint64_t j = indptr[r]; j < indptr[r + 1]; j++)
    s += (double)wf[j] * fzf_to_double(fzf_get(dense + (uint64_t)cols[j] * w, w), w, kind);
  return s;
}

/* Row r's exact sum of w_i32 * pixel (integer pixels of at most 4 bytes);
 * 0 and *overflow = 1 when a partial sum leaves int64, as the CPU's
 * checked additions do in the same order. */
FZF_HD int64_t fzf_row_i64(const uint64_t *indptr, const uint32_t *cols, const int32_t *wi,
                           const uint8_t *dense, unsigned w, int kind, uint64_t r, int *overflow) {
  int64_t s = 0;
  unsigned sh = 64 - 8 * w;
  for (uint64_t j = indptr[r]; j < indptr[r + 1]; j++) {
    uint64_t x = fzf_get(dense + (uint64_t)cols[j] * w, w);
    int64_t px = kind == FZ_FRAMES_SIGNED ? (int64_t)(x << sh) >> sh : (int64_t)x;
    int64_t t = (int64_t)wi[j] * px;
    if ((t > 0 && s > INT64_MAX - t) || (t < 0 && s < INT64_MIN - t)) {
      *overflow = 1;
      return 0;
    }
    s += t;
  }
  return s;
}

#endif
