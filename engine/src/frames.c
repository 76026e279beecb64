/*
 * frames.c - detector frames decoded into the pixels above a cut, the
 * dense frame, and a sparse matrix product (fz_frames.h).
 *
 * The cut runs on the bit-shuffled block itself, before any unshuffle: a
 * shuffled block is 8w bit planes, and "value above the cut" is a
 * comparison of each element's order key (the value's bits made to sort as
 * unsigned integers) with the cut's key, which bit-sliced logic does for 64
 * elements per machine word, from the top plane down:
 *     gt |= eq & x & ~k;   eq &= ~(x ^ k)
 * where x is the plane word and k all ones where the cut's key has that bit.
 * The result is a bit mask in pixel order; only its set bits (the few
 * pixels above the cut of a detector frame) have their values gathered, from
 * the planes when they are few, from an unshuffled block when many are.  So
 * a frame costs its LZ4 decode plus a few bitwise operations per pixel.
 *
 * Compaction is by running offsets in pixel order (block counts, then their
 * prefix sums), so the lists are deterministic and a GPU port that counts
 * per block and writes at prefix-summed offsets gives the same bytes.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bslz4.h"
#include "engine.h"
#include "fz_frames.h"
#include "fz_frames_cut.h"

struct fz_frames {
  fz_dtype dtype;
  size_t w;
  int kind;
  size_t npixels;
  fz_bslz4_codec codec;
  int shared;      /* a batch thread's view: mask and matrix are f's */
  uint8_t *active; /* npixels bits + 8 bytes, bit i = pixel i used; NULL: all */
  size_t nrows;
  uint64_t *indptr;
  uint32_t *cols;
  float *wf;
  int32_t *wi;
  /* Scratch, grown on demand and kept. */
  uint8_t *block, *unshuffled; /* one block each, + 8 bytes for word loads */
  size_t block_cap;
  uint8_t *dense;     /* one frame, for the matrix product */
  uint8_t *list_vals; /* one frame's listing, for top_n */
  uint32_t *list_idx;
  uint64_t *keys;
};

static uint64_t load64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

static uint64_t raw_value(const uint8_t *p, size_t w) {
  uint64_t v = 0;
  for (size_t i = 0; i < w; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static void put_value(uint8_t *p, size_t w, uint64_t v) {
  for (size_t i = 0; i < w; i++, v >>= 8)
    p[i] = (uint8_t)v;
}

/* The engine keeps the one definition of the cut (fz_frames_cut.h). */
fz_frames_cut fz_frames_cut_of(double cut, unsigned w, int kind) {
  fz_frames_cut c = {FZ_FRAMES_CUT_KEY, 0, ~0ull};
  if (isnan(cut)) {
    c.mode = FZ_FRAMES_CUT_NONE;
    return c;
  }
  if (kind == FZ_FRAMES_FLOAT) {
    uint64_t bits;
    if (w == 4) {
      /* The largest float at or below cut: a float is above cut exactly
       * when it is above that one.  A zero cut is +0, as -0 > -0.0 and
       * 0 > -0.0 are both false. */
      float f = (float)cut;
      if ((double)f > cut)
        f = nextafterf(f, -INFINITY);
      if (f == 0.0f)
        f = 0.0f;
      uint32_t b;
      memcpy(&b, &f, 4);
      bits = b;
      float inf = INFINITY;
      memcpy(&b, &inf, 4);
      c.kinf = fz_frames_order_key(b, 4, kind);
    } else {
      double d = cut == 0.0 ? 0.0 : cut, inf = INFINITY;
      memcpy(&bits, &d, 8);
      uint64_t b;
      memcpy(&b, &inf, 8);
      c.kinf = fz_frames_order_key(b, 8, kind);
    }
    c.k = fz_frames_order_key(bits, w, kind);
    return c;
  }
  double lo, hi; /* the dtype's range */
  if (kind == FZ_FRAMES_SIGNED) {
    lo = -ldexp(1.0, (int)(8 * w - 1));
    hi = ldexp(1.0, (int)(8 * w - 1)) - 1.0;
  } else {
    lo = 0.0;
    hi = ldexp(1.0, (int)(8 * w)) - 1.0; /* rounds to 2^64 for w = 8 */
  }
  if (cut < lo) {
    c.mode = FZ_FRAMES_CUT_ALL;
  } else if (cut >= hi) {
    c.mode = FZ_FRAMES_CUT_NONE;
  } else {
    double t = floor(cut);
    uint64_t x = kind == FZ_FRAMES_SIGNED ? (uint64_t)(int64_t)t : (uint64_t)t;
    if (w < 8)
      x &= (1ull << (8 * w)) - 1;
    c.k = fz_frames_order_key(x, w, kind);
  }
  return c;
}

/* ---- The cut of one shuffled block (pixel-order bit masks). ---- */

#define TILE 64 /* words of 64 elements a pass: 4096 elements */

/* Bit-sliced key comparison for words q0 .. q0 + nt - 1 of every plane
 * (nt <= TILE); the block's rows are rowb bytes and readable 8 bytes past
 * the last.  Words are whole: the caller masks the bits past the block. */
#define CUT_TILE_BODY                                                                              \
  uint64_t eq[TILE], gt[TILE], sg[TILE], eqn[TILE], gtn[TILE];                                     \
  unsigned top = nplanes - 1;                                                                      \
  for (size_t q = 0; q < nt; q++) {                                                                \
    sg[q] = load64(blk + top * rowb + 8 * (q0 + q));                                               \
    eq[q] = eqn[q] = ~0ull;                                                                        \
    gt[q] = gtn[q] = 0;                                                                            \
  }                                                                                                \
  for (int p = (int)top; p >= 0; p--) {                                                            \
    const uint8_t *row = blk + (size_t)p * rowb + 8 * q0;                                          \
    uint64_t kb = (k >> p & 1) ? ~0ull : 0, kn = (kinf >> p & 1) ? ~0ull : 0;                      \
    if (kind == FZ_FRAMES_FLOAT) {                                                                 \
      /* A float's key: the sign flipped, the other bits flipped when it is                        \
       * negative; and a second comparison finds the positive NaNs. */                             \
      int at_top = (unsigned)p == top;                                                             \
      for (size_t q = 0; q < nt; q++) {                                                            \
        uint64_t x = load64(row + 8 * q) ^ (at_top ? ~0ull : sg[q]);                               \
        gt[q] |= eq[q] & x & ~kb;                                                                  \
        eq[q] &= ~(x ^ kb);                                                                        \
        gtn[q] |= eqn[q] & x & ~kn;                                                                \
        eqn[q] &= ~(x ^ kn);                                                                       \
      }                                                                                            \
    } else {                                                                                       \
      uint64_t flip = (unsigned)p == top && kind == FZ_FRAMES_SIGNED ? ~0ull : 0;                  \
      for (size_t q = 0; q < nt; q++) {                                                            \
        uint64_t x = load64(row + 8 * q) ^ flip;                                                   \
        gt[q] |= eq[q] & x & ~kb;                                                                  \
        eq[q] &= ~(x ^ kb);                                                                        \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
  for (size_t q = 0; q < nt; q++)                                                                  \
    out[q] = kind == FZ_FRAMES_FLOAT ? gt[q] & ~gtn[q] : gt[q];

static void cut_tile_plain(const uint8_t *blk, size_t rowb, size_t q0, size_t nt, unsigned nplanes,
                           int kind, uint64_t k, uint64_t kinf, uint64_t *out) {
  CUT_TILE_BODY
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void cut_tile_avx2(const uint8_t *blk, size_t rowb,
                                                          size_t q0, size_t nt, unsigned nplanes,
                                                          int kind, uint64_t k, uint64_t kinf,
                                                          uint64_t *out) {
  CUT_TILE_BODY
}
#define HAVE_CUT_AVX2 1
#endif

/* The cut of one block of n elements (a multiple of 8), element e of the
 * block being pixel base + e: its pixels above the cut and used, listed in
 * pixel order at vals / idx (room for n).  Returns their count.  This is
 * the step a GPU port mirrors per block: count, then write at the block's
 * prefix-summed offset. */
static size_t cut_block(fz_frames *f, const uint8_t *blk, size_t n, size_t base,
                        const fz_frames_cut *c, uint8_t *vals, uint32_t *idx) {
  size_t w = f->w, rowb = n / 8, nwords = (rowb + 7) / 8, count = 0;
  unsigned nplanes = (unsigned)(8 * w);
  uint64_t mask[TILE];
  const uint8_t *dense = NULL;
  for (size_t q0 = 0; q0 < nwords; q0 += TILE) {
    size_t nt = nwords - q0 < TILE ? nwords - q0 : TILE;
    if (c->mode == FZ_FRAMES_CUT_ALL) {
      for (size_t q = 0; q < nt; q++)
        mask[q] = ~0ull;
    } else {
#ifdef HAVE_CUT_AVX2
      if (fze_have_avx2())
        cut_tile_avx2(blk, rowb, q0, nt, nplanes, f->kind, c->k, c->kinf, mask);
      else
#endif
        cut_tile_plain(blk, rowb, q0, nt, nplanes, f->kind, c->k, c->kinf, mask);
    }
    if (q0 + nt == nwords && rowb % 8)
      mask[nt - 1] &= (1ull << (8 * (rowb % 8))) - 1;
    for (size_t q = 0; q < nt; q++) {
      uint64_t m = mask[q];
      if (!m)
        continue;
      size_t e0 = 64 * (q0 + q);
      if (f->active)
        m &= load64(f->active + (base + e0) / 8);
      /* Many pixels above the cut: gathering 8w plane bits for each costs
       * more than unshuffling the block once. */
      if (!dense && ((size_t)__builtin_popcountll(m) > 8 || count > 64)) {
        fz_bitunshuffle_block(blk, n, w, f->unshuffled);
        dense = f->unshuffled;
      }
      while (m) {
        size_t e = e0 + (size_t)__builtin_ctzll(m);
        m &= m - 1;
        if (dense) {
          memcpy(vals + count * w, dense + e * w, w);
        } else {
          uint64_t v = 0;
          const uint8_t *col = blk + e / 8;
          unsigned sh = e % 8;
          for (unsigned p = 0; p < nplanes; p++)
            v |= (uint64_t)(col[p * rowb] >> sh & 1) << p;
          put_value(vals + count * w, w, v);
        }
        idx[count++] = (uint32_t)(base + e);
      }
    }
  }
  return count;
}

/* ---- The decoder. ---- */

size_t fz_frames_rows(const fz_frames *f) {
  return f ? f->nrows : 0;
}

static void free_scratch(fz_frames *f) {
  free(f->block);
  free(f->unshuffled);
  free(f->dense);
  free(f->list_vals);
  free(f->list_idx);
  free(f->keys);
}

void fz_frames_destroy(fz_frames *f) {
  if (!f)
    return;
  free_scratch(f);
  if (!f->shared) {
    free(f->active);
    free(f->indptr);
    free(f->cols);
    free(f->wf);
    free(f->wi);
  }
  free(f);
}

static int copy_csr(fz_frames *f, const fz_frames_csr *m, char *why, size_t why_len) {
  if (!m->indptr || (!m->w_f32) == (!m->w_i32) || m->nrows > SIZE_MAX / 16) {
    fze_why(why, why_len, "frames: a matrix needs indptr and exactly one of w_f32, w_i32");
    return FZ_EINVAL;
  }
  if (m->w_i32 && (f->kind == FZ_FRAMES_FLOAT || f->w > 4)) {
    fze_why(why, why_len, "frames: integer weights need integer pixels of at most 4 bytes, not %s",
            fz_dtype_name(f->dtype));
    return FZ_EDTYPE;
  }
  uint64_t nnz = m->indptr[m->nrows];
  if (m->indptr[0] != 0 || nnz > SIZE_MAX / 8 || (nnz && !m->indices)) {
    fze_why(why, why_len, "frames: matrix indptr starts at %llu and ends at %llu",
            (unsigned long long)m->indptr[0], (unsigned long long)nnz);
    return FZ_EINVAL;
  }
  f->nrows = m->nrows;
  f->indptr = malloc((m->nrows + 1) * sizeof *f->indptr);
  f->cols = malloc((nnz ? nnz : 1) * sizeof *f->cols);
  if (m->w_f32)
    f->wf = malloc((nnz ? nnz : 1) * sizeof *f->wf);
  else
    f->wi = malloc((nnz ? nnz : 1) * sizeof *f->wi);
  if (!f->indptr || !f->cols || (!f->wf && !f->wi))
    return FZ_ENOMEM;
  /* The mask is folded in here: entries of unused pixels are dropped, so
   * the product never reads them. */
  size_t kept = 0;
  f->indptr[0] = 0;
  for (size_t r = 0; r < m->nrows; r++) {
    if (m->indptr[r + 1] < m->indptr[r] || m->indptr[r + 1] > nnz) {
      fze_why(why, why_len, "frames: matrix indptr falls or overruns at row %zu", r);
      return FZ_EINVAL;
    }
    for (uint64_t j = m->indptr[r]; j < m->indptr[r + 1]; j++) {
      uint32_t col = m->indices[j];
      if (col >= f->npixels) {
        fze_why(why, why_len, "frames: matrix entry %llu names pixel %u of %zu",
                (unsigned long long)j, col, f->npixels);
        return FZ_EINVAL;
      }
      if (f->active && !(f->active[col / 8] >> (col % 8) & 1))
        continue;
      f->cols[kept] = col;
      if (f->wf)
        f->wf[kept] = m->w_f32[j];
      else
        f->wi[kept] = m->w_i32[j];
      kept++;
    }
    f->indptr[r + 1] = kept;
  }
  return 0;
}

int fz_frames_create(const fz_frames_params *p, fz_frames **out, char *why, size_t why_len) {
  if (!p || !out) {
    fze_why(why, why_len, "frames: NULL parameters");
    return FZ_EINVAL;
  }
  *out = NULL;
  size_t w = fz_dtype_size(p->dtype);
  if (!w) {
    fze_why(why, why_len, "frames: dtype %d", (int)p->dtype);
    return FZ_EDTYPE;
  }
  if (p->npixels > UINT32_MAX) {
    fze_why(why, why_len, "frames: %zu pixels a frame, at most 2^32 - 1", p->npixels);
    return FZ_ESHAPE;
  }
  if (p->codec != FZ_BSLZ4_LZ4 && p->codec != FZ_BSLZ4_ZSTD) {
    fze_why(why, why_len, "frames: codec %d (2 LZ4, 3 zstd)", (int)p->codec);
    return FZ_EINVAL;
  }
  fz_frames *f = calloc(1, sizeof *f);
  if (!f)
    return FZ_ENOMEM;
  f->dtype = p->dtype;
  f->w = w;
  f->kind = fz_frames_kind(p->dtype);
  f->npixels = p->npixels;
  f->codec = p->codec;
  int rc = 0;
  if (p->mask) {
    f->active = calloc(p->npixels / 8 + 16, 1);
    if (!f->active) {
      rc = FZ_ENOMEM;
      goto err_frames;
    }
    for (size_t i = 0; i < p->npixels; i++)
      f->active[i / 8] |= (uint8_t)((p->mask[i] != 0) << (i % 8));
  }
  if (p->csr && (rc = copy_csr(f, p->csr, why, why_len)) < 0)
    goto err_frames;
  *out = f;
  return 0;
err_frames:
  if (rc == FZ_ENOMEM)
    fze_why(why, why_len, "frames: out of memory");
  fz_frames_destroy(f);
  return rc;
}

/* Grows the per-chunk scratch to blocks of bbytes. */
static int reserve(fz_frames *f, size_t bbytes) {
  if (bbytes > f->block_cap) {
    free(f->block);
    free(f->unshuffled);
    f->block = malloc(bbytes + 8);
    f->unshuffled = malloc(bbytes + 8);
    f->block_cap = f->block && f->unshuffled ? bbytes : 0;
    if (!f->block_cap)
      return FZ_ENOMEM;
    /* Word loads of the last row read up to 8 bytes past the block. */
    memset(f->block + bbytes, 0, 8);
  }
  return 0;
}

/* Step 1 for a chunk of this decoder's frames, and its scratch. */
static int open_chunk(fz_frames *f, const void *chunk, size_t len, fz_bslz4_layout *lay, char *why,
                      size_t why_len) {
  int rc = fz_bslz4_layout_of(chunk, len, f->w, lay, why, why_len);
  if (rc < 0)
    return rc;
  if (lay->nelems != f->npixels) {
    fze_why(why, why_len, "frames: the chunk holds %zu pixels, a frame %zu", lay->nelems,
            f->npixels);
    return FZ_ESIZE;
  }
  size_t bbytes = lay->nblocks ? lay->block_elems * f->w : 0;
  if (lay->nblocks == 1)
    bbytes = lay->last_elems * f->w;
  if ((rc = reserve(f, bbytes)) < 0)
    fze_why(why, why_len, "frames: out of memory for blocks of %zu bytes", bbytes);
  return rc;
}

/* Steps 2 and 3 for block i: its length checked (the walk, as it goes),
 * then its data decompressed into the decoder's block. */
static int next_block(fz_frames *f, const uint8_t *ch, size_t len, const fz_bslz4_layout *lay,
                      size_t i, size_t *pos, size_t n, char *why, size_t why_len) {
  size_t clen, at = *pos + 4;
  int rc = fze_bslz4_next(ch, len, pos, i, lay->nblocks, &clen, why, why_len);
  if (rc < 0)
    return rc;
  return fz_bslz4_block_decompress(f->codec, ch + at, clen, f->block, n * f->w, why, why_len);
}

static int product(fz_frames *f, const uint8_t *frame, double *pf, int64_t *pi, char *why,
                   size_t why_len) {
  if (!f->nrows || (f->wf && !pf) || (f->wi && !pi))
    return 0;
#define PRODUCT(T)                                                                                 \
  do {                                                                                             \
    const T *px = (const T *)(const void *)frame;                                                  \
    for (size_t r = 0; r < f->nrows; r++) {                                                        \
      if (f->wf) {                                                                                 \
        double s = 0;                                                                              \
        for (uint64_t j = f->indptr[r]; j < f->indptr[r + 1]; j++)                                 \
          s += (double)f->wf[j] * (double)px[f->cols[j]];                                          \
        pf[r] = s;                                                                                 \
      } else {                                                                                     \
        int64_t s = 0;                                                                             \
        for (uint64_t j = f->indptr[r]; j < f->indptr[r + 1]; j++) {                               \
          if (__builtin_add_overflow(s, (int64_t)f->wi[j] * (int64_t)px[f->cols[j]], &s)) {        \
            fze_why(why, why_len, "frames: the integer sum of row %zu overflows int64", r);        \
            return FZ_ERANGE;                                                                      \
          }                                                                                        \
        }                                                                                          \
        pi[r] = s;                                                                                 \
      }                                                                                            \
    }                                                                                              \
  } while (0)
  switch (f->dtype) {
  case FZ_U8: PRODUCT(uint8_t); break;
  case FZ_I8: PRODUCT(int8_t); break;
  case FZ_U16: PRODUCT(uint16_t); break;
  case FZ_I16: PRODUCT(int16_t); break;
  case FZ_U32: PRODUCT(uint32_t); break;
  case FZ_I32: PRODUCT(int32_t); break;
  case FZ_U64: PRODUCT(uint64_t); break;
  case FZ_I64: PRODUCT(int64_t); break;
  case FZ_F32: PRODUCT(float); break;
  case FZ_F64: PRODUCT(double); break;
  }
#undef PRODUCT
  return 0;
}

static int ensure_dense(fz_frames *f) {
  if (!f->dense)
    f->dense = malloc(f->npixels * f->w + 1);
  return f->dense ? 0 : FZ_ENOMEM;
}

static void swap64(uint64_t *a, size_t i, size_t j) {
  uint64_t t = a[i];
  a[i] = a[j];
  a[j] = t;
}

/* The value of rank r (0 = smallest) of a[0..n-1], n > r, by quickselect
 * with a three-way partition, so runs of equal keys (common in detector
 * counts) end the search at once. */
static uint64_t select_rank(uint64_t *a, size_t n, size_t r) {
  size_t lo = 0, hi = n;
  while (hi - lo > 1) {
    uint64_t x = a[lo], y = a[lo + (hi - lo) / 2], z = a[hi - 1];
    uint64_t pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
    size_t lt = lo, i = lo, gt = hi;
    while (i < gt) {
      if (a[i] < pivot)
        swap64(a, lt++, i++);
      else if (a[i] > pivot)
        swap64(a, i, --gt);
      else
        i++;
    }
    if (r < lt)
      hi = lt;
    else if (r >= gt)
      lo = gt;
    else
      return pivot;
  }
  return a[r];
}

/* Of total listed pixels (w-byte values, flat indices, in pixel order),
 * the top_n largest into ov / oi, still in pixel order: all whose key is
 * above the top_n-th largest key, and of those equal to it the first ones
 * in pixel order.  keys holds total entries of scratch.  ov / oi may be
 * vals / idx themselves (an entry is written no later than it is read). */
static void keep_top(const uint8_t *vals, const uint32_t *idx, size_t total, size_t top_n, size_t w,
                     int kind, uint64_t *keys, uint8_t *ov, uint32_t *oi) {
  if (total <= top_n) {
    memmove(ov, vals, total * w);
    memmove(oi, idx, total * sizeof *oi);
    return;
  }
  for (size_t j = 0; j < total; j++)
    keys[j] = fz_frames_order_key(raw_value(vals + j * w, w), (unsigned)w, kind);
  uint64_t th = select_rank(keys, total, total - top_n);
  size_t above = 0;
  for (size_t j = 0; j < total; j++)
    above += fz_frames_order_key(raw_value(vals + j * w, w), (unsigned)w, kind) > th;
  size_t ties = top_n - above, o = 0;
  for (size_t j = 0; j < total; j++) {
    uint64_t key = fz_frames_order_key(raw_value(vals + j * w, w), (unsigned)w, kind);
    if (key > th || (key == th && ties && ties--)) {
      memmove(ov + o * w, vals + j * w, w);
      oi[o++] = idx[j];
    }
  }
}

int64_t fz_frames_top(fz_dtype dtype, void *values, uint32_t *indices, size_t total, size_t top_n,
                      uint64_t *keys) {
  size_t w = fz_dtype_size(dtype);
  if (!w)
    return FZ_EDTYPE;
  if ((total && (!values || !indices)) || (top_n && total > top_n && !keys))
    return FZ_EINVAL;
  if (top_n == 0)
    return (int64_t)total;
  keep_top(values, indices, total, top_n, w, fz_frames_kind(dtype), keys, values, indices);
  return (int64_t)(total < top_n ? total : top_n);
}

int64_t fz_frames_sparse(fz_frames *f, const void *chunk, size_t len, double cut, size_t top_n,
                         fz_frames_out *out, char *why, size_t why_len) {
  if (!f || !out || (!chunk && len) || (out->cap && (!out->values || !out->indices))) {
    fze_why(why, why_len, "frames: NULL decoder, chunk or output");
    return FZ_EINVAL;
  }
  out->count = 0;
  fz_bslz4_layout lay;
  int rc = open_chunk(f, chunk, len, &lay, why, why_len);
  if (rc < 0)
    return rc;
  int want_product = f->nrows && (out->powder_f64 || out->powder_i64);
  if (want_product && (rc = ensure_dense(f)) < 0)
    return rc;
  /* With top_n the whole frame is listed first, then the top kept; else
   * each block's list goes straight to the output while it fits. */
  if (top_n && !f->list_vals) {
    f->list_vals = malloc(f->npixels * f->w + 1);
    f->list_idx = malloc(f->npixels * sizeof *f->list_idx + 1);
    f->keys = malloc(f->npixels * sizeof *f->keys + 1);
    if (!f->list_vals || !f->list_idx || !f->keys)
      return FZ_ENOMEM;
  }
  fz_frames_cut c = fz_frames_cut_of(cut, f->w, f->kind);
  const uint8_t *ch = chunk;
  size_t w = f->w, total = 0;
  uint8_t *ov = out->values;
  size_t pos = FZ_BSLZ4_HEADER;
  for (size_t i = 0; i < lay.nblocks; i++) {
    size_t n = i + 1 < lay.nblocks ? lay.block_elems : lay.last_elems;
    size_t base = i * lay.block_elems;
    if ((rc = next_block(f, ch, len, &lay, i, &pos, n, why, why_len)) < 0)
      return rc;
    memset(f->block + n * w, 0, 8);
    if (want_product)
      fz_bitunshuffle_block(f->block, n, w, f->dense + base * w);
    if (c.mode == FZ_FRAMES_CUT_NONE)
      continue;
    if (top_n) {
      total += cut_block(f, f->block, n, base, &c, f->list_vals + total * w, f->list_idx + total);
      continue;
    }
    /* The block's list lands in the output when it fits, else in scratch
     * (only counted: the call fails with FZ_ENOSPC). */
    size_t room = total <= out->cap ? out->cap - total : 0;
    if (room >= n) {
      total += cut_block(f, f->block, n, base, &c, ov + total * w, out->indices + total);
    } else {
      if (!f->list_vals) {
        f->list_vals = malloc(f->npixels * f->w + 1);
        f->list_idx = malloc(f->npixels * sizeof *f->list_idx + 1);
        if (!f->list_vals || !f->list_idx)
          return FZ_ENOMEM;
      }
      size_t got = cut_block(f, f->block, n, base, &c, f->list_vals, f->list_idx);
      size_t put = got < room ? got : room;
      memcpy(ov + total * w, f->list_vals, put * w);
      memcpy(out->indices + total, f->list_idx, put * sizeof *out->indices);
      total += got;
    }
  }
  /* The verbatim tail: fewer than 8 pixels, compared one by one. */
  if ((rc = fze_bslz4_end(len, pos, &lay, why, why_len)) < 0)
    return rc;
  size_t t0 = lay.nelems - lay.tail_elems;
  const uint8_t *tail = ch + pos;
  if (want_product)
    memcpy(f->dense + t0 * w, tail, lay.tail_elems * w);
  for (size_t e = 0; e < lay.tail_elems && c.mode != FZ_FRAMES_CUT_NONE; e++) {
    size_t px = t0 + e;
    if (f->active && !(f->active[px / 8] >> (px % 8) & 1))
      continue;
    uint64_t key = fz_frames_order_key(raw_value(tail + e * w, w), w, f->kind);
    if (c.mode == FZ_FRAMES_CUT_KEY && !(key > c.k && key <= c.kinf))
      continue;
    if (top_n) {
      memcpy(f->list_vals + total * w, tail + e * w, w);
      f->list_idx[total] = (uint32_t)px;
    } else if (total < out->cap) {
      memcpy(ov + total * w, tail + e * w, w);
      out->indices[total] = (uint32_t)px;
    }
    total++;
  }
  if (want_product &&
      (rc = product(f, f->dense, out->powder_f64, out->powder_i64, why, why_len)) < 0)
    return rc;
  size_t listed = total;
  if (top_n) {
    listed = total < top_n ? total : top_n;
    if (listed > out->cap) {
      fze_why(why, why_len, "frames: %zu pixels to list, room for %zu", listed, out->cap);
      return FZ_ENOSPC;
    }
    keep_top(f->list_vals, f->list_idx, total, top_n, w, f->kind, f->keys, ov, out->indices);
  } else if (total > out->cap) {
    fze_why(why, why_len, "frames: %zu pixels above the cut, room for %zu", total, out->cap);
    out->count = 0;
    return FZ_ENOSPC;
  }
  out->count = listed;
  return (int64_t)total;
}

int fz_frames_dense(fz_frames *f, const void *chunk, size_t len, void *out, size_t out_len,
                    double *powder_f64, int64_t *powder_i64, char *why, size_t why_len) {
  if (!f || !out || (!chunk && len)) {
    fze_why(why, why_len, "frames: NULL decoder, chunk or output");
    return FZ_EINVAL;
  }
  if (out_len < f->npixels * f->w) {
    fze_why(why, why_len, "frames: a frame is %zu bytes, the output %zu", f->npixels * f->w,
            out_len);
    return FZ_ENOSPC;
  }
  fz_bslz4_layout lay;
  int rc = open_chunk(f, chunk, len, &lay, why, why_len);
  if (rc < 0)
    return rc;
  const uint8_t *ch = chunk;
  uint8_t *o = out;
  size_t w = f->w;
  size_t pos = FZ_BSLZ4_HEADER;
  for (size_t i = 0; i < lay.nblocks; i++) {
    size_t n = i + 1 < lay.nblocks ? lay.block_elems : lay.last_elems;
    if ((rc = next_block(f, ch, len, &lay, i, &pos, n, why, why_len)) < 0)
      return rc;
    fz_bitunshuffle_block(f->block, n, w, o + i * lay.block_elems * w);
  }
  if ((rc = fze_bslz4_end(len, pos, &lay, why, why_len)) < 0)
    return rc;
  memcpy(o + (lay.nelems - lay.tail_elems) * w, ch + pos, lay.tail_elems * w);
  return product(f, o, powder_f64, powder_i64, why, why_len);
}

/* ---- Batches on threads. ---- */

typedef struct batch_run {
  fz_frames *proto;
  const fz_frames_batch *b;
  atomic_size_t next;
  atomic_size_t failed;
} batch_run;

static void run_frames(fz_frames *f, batch_run *run) {
  const fz_frames_batch *b = run->b;
  size_t rows = f->nrows;
  for (;;) {
    size_t i = atomic_fetch_add(&run->next, 1);
    if (i >= b->nframes)
      return;
    fz_frames_out o = {
        .values = (uint8_t *)b->values + i * b->cap * f->w,
        .indices = b->indices + i * b->cap,
        .cap = b->cap,
        .powder_f64 = b->powder_f64 ? b->powder_f64 + i * rows : NULL,
        .powder_i64 = b->powder_i64 ? b->powder_i64 + i * rows : NULL,
    };
    int64_t rc = fz_frames_sparse(f, b->base + b->offsets[i], (size_t)b->lengths[i], b->cut,
                                  b->top_n, &o, NULL, 0);
    b->counts[i] = rc < 0 ? 0 : o.count;
    b->status[i] = rc < 0 ? (int)rc : 0;
    if (rc < 0)
      atomic_fetch_add(&run->failed, 1);
  }
}

static void *batch_thread(void *arg) {
  batch_run *run = arg;
  fz_frames *f = calloc(1, sizeof *f);
  if (!f)
    return (void *)1;
  fz_frames *p = run->proto;
  /* A view of the decoder: shared mask and matrix, scratch of its own. */
  *f = (fz_frames){.dtype = p->dtype,
                   .w = p->w,
                   .kind = p->kind,
                   .npixels = p->npixels,
                   .codec = p->codec,
                   .shared = 1,
                   .active = p->active,
                   .nrows = p->nrows,
                   .indptr = p->indptr,
                   .cols = p->cols,
                   .wf = p->wf,
                   .wi = p->wi};
  run_frames(f, run);
  fz_frames_destroy(f);
  return NULL;
}

int64_t fz_frames_sparse_batch(fz_frames *f, const fz_frames_batch *b, unsigned nthreads, char *why,
                               size_t why_len) {
  if (!f || !b ||
      (b->nframes && (!b->base || !b->offsets || !b->lengths || !b->counts || !b->status ||
                      (b->cap && (!b->values || !b->indices))))) {
    fze_why(why, why_len, "frames: a batch needs base, offsets, lengths, counts and status");
    return FZ_EINVAL;
  }
  if (!nthreads) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    nthreads = n > 0 ? (unsigned)n : 1;
  }
  if (nthreads > b->nframes)
    nthreads = b->nframes ? (unsigned)b->nframes : 1;
  batch_run run = {.proto = f, .b = b};
  atomic_init(&run.next, 0);
  atomic_init(&run.failed, 0);
  if (nthreads == 1) {
    run_frames(f, &run);
    return (int64_t)atomic_load(&run.failed);
  }
  pthread_t *t = malloc(nthreads * sizeof *t);
  if (!t)
    return FZ_ENOMEM;
  unsigned started = 0;
  for (; started < nthreads; started++)
    if (pthread_create(&t[started], NULL, batch_thread, &run))
      break;
  int lost = 0;
  for (unsigned i = 0; i < started; i++) {
    void *ret;
    pthread_join(t[i], &ret);
    lost |= ret != NULL;
  }
  free(t);
  /* A thread that could not start (or had no memory) leaves its frames to
   * the others; only when none ran at all is the batch lost. */
  if (!started || (lost && atomic_load(&run.next) < b->nframes)) {
    run_frames(f, &run);
  }
  return (int64_t)atomic_load(&run.failed);
}
