/*
 * ratio_dec.cuh - the decoder of the ratio preset's chunks (format version
 * 3: quant | interp | huffman | rze, and the same chain with lorenzo in
 * interp's place; version 5 the same with the interpolation's words by
 * level and finer bins on its coarser levels; version 6 with a chunk's
 * interpolation on fewer dims) and of the lossless-ratio preset's (format
 * version 4: lorenzo | byteplanes on 4- and 8-byte words), written once
 * for the device and for a host model of it.
 *
 * One block decodes one chunk in phases; between two phases every thread
 * of the block waits (the kernel's __syncthreads()), so a phase may read
 * anything an earlier phase wrote.  A phase is a function of the thread's
 * index and the block's thread count that touches only its own share of
 * the work, which is what lets the host model run the very same code one
 * "thread" after another (tests compile this header without CUDA and
 * compare it with the engine's decoder).  The checks are the CPU
 * decoder's (codec.c, stage_quant.c, stage_interp.c, stage_huffman.c,
 * stage_rze.c), each failure marking the chunk corrupt; the CPU reports
 * every one of them as ECORRUPT, so which fails first does not matter,
 * only that a chunk fails exactly when the CPU's fails.  Every read stays
 * inside the chunk's bytes and every write inside the chunk's output and
 * scratch, whatever the bytes say.
 *
 * The arithmetic is the engine's (ops.h and the same operations in the
 * same order: the interpolation's predictions in binary64, the value
 * rebuilt as (T)(p + q * step)), compiled without FMA contraction, so the
 * values are the CPU's bit for bit.
 */
#ifndef FZK_RATIO_DEC_CUH
#define FZK_RATIO_DEC_CUH

#include "ops.h"
#include "ratio_interp.cuh"
#include "ratio_phase.cuh"

#define FZR_LANES FZE_HUFF_LANES
#define FZR_MAX_LEN FZR_CODE_MAX_LEN
#define FZR_MAX_SYMS FZE_HUFF_SYMS
#define FZR_RUNS FZE_HUFF_RUNS
#define FZR_MAX_DIRECT (FZR_MAX_SYMS - 1u - FZR_RUNS)
#define FZR_MAX_LEVELS FZE_RZE_MAX_LEVELS

/* The job, the same for every chunk. */
typedef struct fzr_job {
  const uint8_t *pay;      /* the payload */
  uint64_t pay_len;
  const uint64_t *offs;    /* chunk offsets in the payload (the scan's) */
  const uint32_t *sizes;   /* the chunk table, 4-byte aligned */
  uint64_t raw_bytes;
  uint32_t cb;             /* input bytes per chunk */
  uint32_t w;              /* 4 (f32) or 8 (f64) */
  uint32_t levels;         /* rze's */
  uint32_t pdims;          /* interp's D */
  uint32_t lv;             /* interp: its form, fze_stage's lv (1: version 5's walk,
                            * 2: and version 6's dims per chunk) */
  uint32_t hform;          /* huffman: its stage's lv (1: each stream names its form) */
  uint32_t lorenzo;        /* stage 1 is lorenzo (its k is 1..D), not interp */
  uint32_t pwrel;          /* quant's mode is pwrel */
  double step;             /* 0: lossless */
  uint64_t ext[3][3];      /* interp's (and lorenzo's) folded extents, per k */
  uint8_t *scratch;        /* stride bytes per block of the launch (fzr_stride) */
  uint64_t stride;
  uint64_t nchunks;
  unsigned long long *ticket; /* the next chunk to take, 0 at the launch */
  uint8_t *out;            /* the decoded array */
  uint32_t out_aligned;    /* out is aligned for the element type */
  uint32_t *status;        /* bit 0: a chunk is corrupt */
  uint32_t *crcs;          /* each chunk's CRC-32C */
  const uint32_t *crc_tab; /* the byte table of CRC-32C (reflected) */
  uint32_t planes;         /* lorenzo | byteplanes: no quant, levels 0, step 0 */
} fzr_job;

/* Marks the chunk corrupt from any thread (an atomic on the device, so
 * that racecheck sees no two plain writes of the flag). */
#ifdef __CUDA_ARCH__
#define FZR_BAD(S) atomicOr(&(S)->err, 1)
#else
#define FZR_BAD(S) ((S)->err = 1)
#endif

static inline FZR_HD uint64_t fzr_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
/* A byte plane's stride in the scratch: n rounded up to 8. */
static inline FZR_HD uint64_t fzr_up8(uint64_t n) { return (n + 7) & ~(uint64_t)7; }
static inline FZR_HD uint64_t fzr_bm(uint64_t n) { return (n + 7) / 8; }

/* Scratch of one chunk: the words (cb), the huffman stream (cb), rze's
 * two bitmap buffers, the outlier flags (cb / w), the values when out is
 * not aligned for them (cb). */
static inline FZR_HD uint64_t fzr_off_b(uint32_t cb) { return fzr_up(cb, 256); }
static inline FZR_HD uint64_t fzr_off_t(uint32_t cb) { return 2 * fzr_up(cb, 256); }
static inline FZR_HD uint64_t fzr_off_x(uint32_t cb) {
  return fzr_off_t(cb) + 2 * fzr_up(fzr_bm(cb) + 16, 256);
}
static inline FZR_HD uint64_t fzr_off_v(uint32_t cb) { return fzr_off_x(cb) + fzr_up(cb / 4, 256); }
static inline FZR_HD uint64_t fzr_stride(uint32_t cb) { return fzr_off_v(cb) + fzr_up(cb, 256); }

/* What the phases of one chunk share (the block's shared memory). */
typedef struct fzr_state {
  int err;        /* the chunk is corrupt */
  int done;       /* nothing left to decode (raw, corrupt, table bad) */
  int skip_crc;   /* the table entry is unusable: the CRC is 0 */
  int pk;         /* the chunk's predictor byte: lorenzo's k, or 0 */
  unsigned kd;    /* the interpolation's dims (version 6: maybe fewer) */
  uint64_t c, first, n, raw, len;
  const uint8_t *in;   /* the chunk's stored bytes */
  uint8_t *a, *b, *t, *x, *v; /* scratch: words, stream, bitmaps, flags, values */
  /* side list */
  uint64_t m;
  const uint8_t *idx, *vals;
  uint32_t iw;
  /* rze */
  const uint8_t *cur; /* rze's input */
  uint64_t clen, hlen, pos;
  uint64_t rl[FZR_MAX_LEVELS + 1]; /* rze: bytes of each level */
  const uint8_t *bm;   /* the bitmap of the level being rebuilt */
  const uint8_t *kept; /* its kept bytes */
  uint8_t *lv[2];      /* rebuilt bitmaps of levels >= 2 */
  union {
    uint64_t base[FZR_NT]; /* each thread's first kept byte */
    /* byteplanes (no rze): where the byte plane being decoded goes, each
     * plane's length in the chunk, its first byte there, and where its n
     * bytes are read from (NULL: zeros) */
    struct {
      uint8_t *hw;
      uint64_t len[8], off[8];
      const uint8_t *src[8];
    } pl;
  };
  /* huffman */
  uint32_t e, nsym;
  uint32_t hform; /* the stream's form (FZE_HUFF_FORM_*) */
  uint64_t lane_beg[FZR_LANES], lane_end[FZR_LANES];
  union {
    /* the header's code lengths and codes, until the table is filled */
    struct {
      uint8_t lens[FZR_MAX_SYMS];
      uint16_t code[FZR_MAX_SYMS];
    } hdr;
    /* then the pair table (fzr_pair_fill) */
    uint32_t pair[1u << FZR_MAX_LEN];
  };
  uint32_t hkraft, hbad;          /* the header's Kraft sum; a length too long */
  uint32_t hnum[FZR_MAX_LEN + 1]; /* symbols of each length */
  union {
    uint32_t lut[1u << FZR_MAX_LEN];
    /* the header, before the table: each thread's count of each length
     * among its symbols, then the count before its own */
    fzr_canon_row hcnt[FZR_NT];
    /* interp, after huffman: a batch of anchors staged for thread 0's
     * chain (fzr_anchor_gather), in the walk's order */
    struct {
      uint64_t q[FZR_NT]; /* the word */
      double o[FZR_NT];   /* an outlier's value */
      uint32_t i[FZR_NT]; /* the chunk index; FZR_NO_ANCHOR for none */
      uint8_t x[FZR_NT];  /* the outlier flag */
    } anc;
  };
  /* interp: the walk's tables (the encoder's, ratio_enc_interp.cuh) */
  double anc_prev; /* the chain's last rebuilt anchor */
  fzr_ip ip;
  uint32_t part[FZR_NT], fac[FZR_LOG_NT]; /* CRC parts and factors (fzr_crc_block) */
  /* lorenzo's scans: each piece of a line as a map v -> c v + a of the
   * word before it, the word before each piece; word sy (fzr_lz_wsy) */
  uint64_t lz_a[FZR_NT], lz_in[FZR_NT], lz_wsy;
  uint8_t lz_c[FZR_NT];
} fzr_state;

static inline FZR_HD uint32_t fzr_ld32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline FZR_HD uint64_t fzr_index(const uint8_t *p, uint32_t iw) {
  uint64_t v = (uint64_t)p[0] | (uint64_t)p[1] << 8;
  if (iw == 4)
    v |= (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
  return v;
}

static inline FZR_HD int fzr_varint(const uint8_t *p, uint64_t len, uint64_t *k, uint64_t *out) {
  uint64_t v = 0;
  for (unsigned shift = 0;; shift += 7) {
    if (*k >= len || shift > 28)
      return 0;
    uint8_t b = p[(*k)++];
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80))
      break;
  }
  *out = v;
  return 1;
}

static inline FZR_HD unsigned fzr_popc8(unsigned b) {
  b = b - ((b >> 1) & 0x55);
  b = (b & 0x33) + ((b >> 2) & 0x33);
  return (b + (b >> 4)) & 0x0f;
}

static inline FZR_HD uint64_t fzr_popcount(const uint8_t *p, uint64_t n) {
  uint64_t c = 0;
  for (uint64_t i = 0; i < n; i++)
    c += fzr_popc8(p[i]);
  return c;
}

static inline FZR_HD int fzr_tail_ok(const uint8_t *bm, uint64_t n) {
  return n % 8 == 0 || (bm[n / 8] >> (n % 8)) == 0;
}

/* ---- phase 0 (thread 0): the chunk's framing, rze's upper levels ---- */

/* lorenzo | byteplanes (codec.c, stage_byteplanes.c): the predictor byte
 * (1..D), then the w planes' LEB128 lengths, each at most n, which the
 * planes fill to the chunk's end exactly.  A plane of length 0 is zeros,
 * one of length n its bytes as they are, any other a huffman stream of
 * bytes, decoded into the values' scratch (plane p at p up8(n): w up8(n)
 * is at most the chunk size, a multiple of 8 w). */
static inline FZR_HD void fzr_planes_frame(fzr_state *S, const fzr_job *J, const uint8_t *in,
                                           uint64_t len) {
  const uint64_t n = S->n;
  uint64_t k = 0, total = 0;
  if (in[0] < 1 || in[0] > J->pdims)
    goto bad;
  S->pk = in[k++];
  for (unsigned p = 0; p < J->w; p++) {
    if (!fzr_varint(in, len, &k, &S->pl.len[p]) || S->pl.len[p] > n)
      goto bad;
    total += S->pl.len[p];
  }
  if (total != len - k)
    goto bad;
  S->m = 0;
  for (unsigned p = 0; p < J->w; p++) {
    uint64_t l = S->pl.len[p];
    S->pl.off[p] = k;
    S->pl.src[p] = l == 0 ? NULL : l == n ? in + k : S->v + p * fzr_up8(n);
    k += l;
  }
  return;
bad:
  S->err = 1;
  S->done = 1;
}

FZR_IP_FI FZR_HD void fzr_begin(fzr_state *S, const fzr_job *J, uint64_t c, uint64_t slot,
                                unsigned planes) {
  S->err = 0;
  S->done = 0;
  S->skip_crc = 0;
  S->c = c;
  uint64_t raw = J->raw_bytes - c * J->cb < J->cb ? J->raw_bytes - c * J->cb : J->cb;
  S->raw = raw;
  S->n = raw / J->w;
  S->first = c * (J->cb / J->w);
  uint64_t len = J->sizes[c], off = J->offs[c];
  S->len = len;
  uint8_t *base = J->scratch + slot * J->stride;
  S->a = base;
  S->b = base + fzr_off_b(J->cb);
  S->t = base + fzr_off_t(J->cb);
  S->x = base + fzr_off_x(J->cb);
  S->v = base + fzr_off_v(J->cb);
  if (len == 0 || len > raw || off > J->pay_len || len > J->pay_len - off) {
    /* The table's scan reports it (as the CPU's header parser does). */
    S->done = 1;
    S->skip_crc = 1;
    return;
  }
  const uint8_t *in = J->pay + off;
  S->in = in;
  if (len == raw) {
    S->done = 1; /* stored raw: copied by fzr_copy_raw */
    return;
  }
  if (planes) {
    fzr_planes_frame(S, J, in, len);
    return;
  }
  uint64_t n = S->n, w = J->w;
  uint32_t iw = n < 65536 ? 2u : 4u;
  S->iw = iw;
  /* The side list (no fill: such archives do not come here).  Its count
   * is read as the CPU's fze_quant_read_side reads it, into 32 bits (a
   * fifth byte's bits above them are dropped), so that a crafted count
   * gets the CPU's answer. */
  uint64_t k = 0, m;
  if (!fzr_varint(in, len, &k, &m))
    goto bad;
  m &= 0xffffffffu;
  if (m > n || (len - k) / (iw + w) < m)
    goto bad;
  S->m = m;
  S->idx = in + k;
  S->vals = in + k + iw * m;
  k += m * (iw + w);
  /* The predictor byte (interp's 0..D, lorenzo's 1..D; in version 6
   * interp's FZE_PK_DIMS | k, the interpolation on k < D dims), then the
   * huffman stream's length. */
  if (k >= len)
    goto bad;
  {
    unsigned b = in[k++], kd = b & ~FZE_PK_DIMS;
    if (!J->lorenzo && J->lv >= 2 && (b & FZE_PK_DIMS) && kd >= 1 && kd < J->pdims) {
      S->pk = 0;
      S->kd = kd;
    } else if (b > J->pdims || b < J->lorenzo) {
      goto bad;
    } else {
      S->pk = (int)b;
      S->kd = J->pdims;
    }
  }
  uint64_t hlen;
  if (!fzr_varint(in, len, &k, &hlen) || hlen == 0 || hlen >= raw)
    goto bad;
  S->hlen = hlen;
  S->cur = in + k;
  S->clen = len - k;
  {
    /* rze's top bitmap: its length and its padding bits. */
    unsigned L = J->levels;
    S->rl[0] = hlen;
    for (unsigned l = 1; l <= L; l++)
      S->rl[l] = fzr_bm(S->rl[l - 1]);
    if (S->clen < S->rl[L] || !fzr_tail_ok(S->cur, S->rl[L - 1]))
      goto bad;
    S->bm = S->cur;
    S->pos = S->rl[L];
    S->lv[0] = S->t;
    S->lv[1] = S->t + fzr_up(fzr_bm(J->cb) + 16, 256);
  }
  return;
bad:
  S->err = 1;
  S->done = 1;
}

/* ---- rze, level by level from the top, over the block ---- */

/* Each thread's share of level l's bitmap: its popcount. */
static inline FZR_HD void fzr_lv_count(fzr_state *S, unsigned l, unsigned t, unsigned nt) {
  uint64_t lo, hi;
  fzr_share(S->rl[l], t, nt, &lo, &hi);
  S->base[t] = fzr_popcount(S->bm + lo, hi - lo);
}

/* Thread 0: the shares' first kept bytes; the kept bytes must be there
 * (and, after level 1, nothing else). */
static inline FZR_HD void fzr_lv_scan(fzr_state *S, unsigned l, unsigned nt) {
  uint64_t sum = 0;
  for (unsigned t = 0; t < nt; t++) {
    uint64_t v = S->base[t];
    S->base[t] = sum;
    sum += v;
  }
  if (sum > S->clen - S->pos || (l == 1 && S->pos + sum != S->clen)) {
    S->err = 1;
    S->done = 1;
    return;
  }
  S->kept = S->cur + S->pos;
  S->pos += sum;
}

/* Level l - 1 rebuilt from level l's bitmap: at level 1 a byte is the next
 * kept one where its bit is set, else 0 (into the huffman stream); above,
 * else the byte before, which for a share's first byte is the last kept
 * byte before the share (0 when none). */
static inline FZR_HD void fzr_lv_restore(fzr_state *S, unsigned l, unsigned t, unsigned nt) {
  uint64_t lo, hi, n = S->rl[l - 1];
  fzr_share(S->rl[l], t, nt, &lo, &hi);
  const uint8_t *kept = S->kept;
  uint64_t k = S->base[t];
  uint8_t *dst = l == 1 ? S->b : S->lv[l & 1];
  uint8_t prev = k > 0 ? kept[k - 1] : 0;
  for (uint64_t g = lo; g < hi; g++) {
    unsigned m = S->bm[g];
    uint64_t end = 8 * g + 8 < n ? 8 * g + 8 : n;
    for (uint64_t i = 8 * g; i < end; i++) {
      unsigned on = (m >> (i % 8)) & 1u;
      if (l == 1) {
        dst[i] = on ? kept[k] : 0;
      } else {
        prev = on ? kept[k] : prev;
        dst[i] = prev;
      }
      k += on;
    }
  }
}

/* Thread 0, above level 1: the rebuilt bitmap's padding bits are 0; it is
 * the next level's bitmap. */
static inline FZR_HD void fzr_lv_next(fzr_state *S, unsigned l) {
  uint8_t *dst = S->lv[l & 1];
  if (!fzr_tail_ok(dst, S->rl[l - 2])) {
    S->err = 1;
    S->done = 1;
    return;
  }
  S->bm = dst;
}

/* ---- huffman ---- */

/* The huffman header, over the block: thread 0 frames it (the escape e,
 * the symbols, the lanes' bytes), each thread takes its share of the
 * symbols' lengths (their Kraft terms and its count of each length), the
 * counts before each thread are summed a length a thread, and each thread
 * gives its symbols their canonical codes (by length, then symbol: the
 * length's first code plus the symbols of that length before it).  The
 * checks are the engine's, and fail the chunk alike. */
static inline FZR_HD void fzr_huff_frame(fzr_state *S, unsigned lv) {
  const uint8_t *in = S->b;
  uint64_t in_len = S->hlen;
  S->hkraft = 0;
  S->hbad = 0;
  if (in_len < 2)
    goto bad;
  {
    /* E, and from version 7 (the stage's lv 1) the stream's form in the
     * top bit of its word. */
    unsigned e = (unsigned)in[0] | (unsigned)in[1] << 8;
    S->hform = lv && (e & 0x8000u) ? FZE_HUFF_FORM_CLASS : FZE_HUFF_FORM_BITS;
    e = S->hform == FZE_HUFF_FORM_CLASS ? e & 0x7fffu : e;
    unsigned nsym = e + 1 + FZR_RUNS;
    if (e < 1 || e > FZR_MAX_DIRECT)
      goto bad;
    uint64_t head = 2 + (nsym + 1) / 2 + 4 * FZR_LANES;
    if (in_len < head || ((nsym & 1) && (in[2 + nsym / 2] >> 4)))
      goto bad;
    uint64_t pos = head;
    for (unsigned l = 0; l < FZR_LANES; l++) {
      uint64_t bytes = fzr_ld32(in + 2 + (nsym + 1) / 2 + 4 * l);
      if (bytes > in_len - pos)
        goto bad;
      S->lane_beg[l] = pos;
      S->lane_end[l] = pos + bytes;
      pos += bytes;
    }
    if (pos != in_len)
      goto bad;
    S->e = e;
    S->nsym = nsym;
  }
  return;
bad:
  S->err = 1;
  S->done = 1;
}

static inline FZR_HD void fzr_huff_lens(fzr_state *S, unsigned t, unsigned nt) {
  const uint8_t *in = S->b;
  uint64_t lo, hi;
  uint32_t kraft = 0, bad = 0;
  for (unsigned l = 0; l <= FZR_MAX_LEN; l++)
    S->hcnt[t][l] = 0;
  fzr_share(S->nsym, t, nt, &lo, &hi);
  for (unsigned s = lo; s < hi; s++) {
    unsigned l = (in[2 + s / 2] >> (4 * (s & 1))) & 15u;
    S->hdr.lens[s] = (uint8_t)l;
    if (l > FZR_MAX_LEN) {
      bad = 1;
    } else if (l) {
      kraft += 1u << (FZR_MAX_LEN - l);
      S->hcnt[t][l]++;
    }
  }
  if (kraft)
    FZR_ATOMIC_ADD(&S->hkraft, kraft);
  if (bad)
    FZR_ATOMIC_OR(&S->hbad, 1u);
}

/* Thread 0 checks the Kraft sum; the counts before each thread's share,
 * a length a thread. */
static inline FZR_HD void fzr_huff_sums(fzr_state *S, unsigned t, unsigned nt) {
  if (t == 0 && (S->hbad || S->hkraft == 0 || S->hkraft > (1u << FZR_MAX_LEN))) {
    S->err = 1;
    S->done = 1;
  }
  fzr_canon_sums(S->hcnt, S->hnum, t, nt);
}

static inline FZR_HD void fzr_huff_codes(fzr_state *S, unsigned t, unsigned nt) {
  uint64_t lo, hi;
  unsigned first[FZR_MAX_LEN + 1];
  fzr_canon_first(S->hcnt, S->hnum, t, first);
  fzr_share(S->nsym, t, nt, &lo, &hi);
  for (unsigned s = lo; s < hi; s++) {
    unsigned l = S->hdr.lens[s];
    if (l)
      S->hdr.code[s] = (uint16_t)fzr_rev(first[l]++, l);
  }
}

/* A window no code begins: length 0 and a symbol past every run, which
 * the lanes take for a run longer than any lane (fzr_huff_lane_w). */
#define FZR_LUT_NONE 0xffffu

static inline FZR_HD void fzr_lut_clear(fzr_state *S, unsigned t, unsigned nt) {
  for (unsigned x = t; x < (1u << FZR_MAX_LEN); x += nt)
    S->lut[x] = FZR_LUT_NONE;
}

/* Each symbol's entries; a complete or incomplete prefix code gives every
 * window at most one symbol, so threads never write the same entry. */
static inline FZR_HD void fzr_lut_fill(fzr_state *S, unsigned t, unsigned nt) {
  for (unsigned s = t; s < S->nsym; s += nt) {
    unsigned l = S->hdr.lens[s];
    if (l)
      for (uint32_t x = S->hdr.code[s]; x < (1u << FZR_MAX_LEN); x += 1u << l)
        S->lut[x] = (uint32_t)l << 16 | s;
  }
}

/* The pair table, for chunks whose codes are short (the windows' mean
 * code length at most FZR_PAIR_SPREAD bits, from the count of each
 * length): for each 12-bit window, the two symbols whose codes (and, in
 * the CLASS form, a run's raw bits) lie whole in it, where neither is the
 * escape, both stand for words below 1024 (zeros and runs included) and a
 * run's raw bits are below 1024, as what they do to a lane of zero words:
 * the first writes v1 and moves 2^k1 words on (a CLASS run: v1 is its raw
 * bits, writes nothing and moves 2^k1 + v1 on), the second likewise.
 * Bits 0-3: the bits both take (0: no pair; the lane takes one symbol);
 * 4-7: k1; 8-11: k2; 12-21: v1; 22-31: v2.  The engine's decoder pairs
 * the same symbols (stage_huffman.c); here it halves the lanes' chain of
 * look-ups where most codes are short. */
#define FZR_PAIR_SPREAD FZE_HUFF_PAIR_SPREAD
#define FZR_PAIR_BITS(x) ((x) & 15u)
#define FZR_PAIR_K1(x) (((x) >> 4) & 15u)
#define FZR_PAIR_K2(x) (((x) >> 8) & 15u)
#define FZR_PAIR_V1(x) (((x) >> 12) & 1023u)
#define FZR_PAIR_V2(x) ((x) >> 22)

/* Whether the chunk's lanes decode by pairs: the lengths weighted by the
 * share of windows each takes. */
static inline FZR_HD bool fzr_pairs_pay(const fzr_state *S) {
  uint32_t spread = 0;
  for (unsigned l = 1; l <= FZR_MAX_LEN; l++)
    spread += S->hnum[l] * l << (FZR_MAX_LEN - l);
  return spread <= FZR_PAIR_SPREAD << FZR_MAX_LEN;
}

/* What the symbol of entry ent does to a lane, where window x starts
 * with it and has room bits: its word (0 for zeros; a CLASS run's raw
 * bits) and log2 of the words it takes (at least); its bits, 0 for the
 * escape, for a window no code begins, for a word of 1024 or more and for
 * a run's raw bits past room. */
static inline FZR_HD uint32_t fzr_pair_part(unsigned form, uint32_t ent, uint32_t x,
                                            unsigned room, unsigned e, uint32_t *v,
                                            uint32_t *k) {
  unsigned l = ent >> 16, s = ent & 0xffffu;
  if (l == 0 || l > room || s == e || (s < e && s >= 1024u))
    return 0;
  *v = s < e ? s : 0u;
  *k = s > e ? s - e : 0u;
  if (form == FZE_HUFF_FORM_CLASS && s > e) {
    if (l + *k > room || *k > 10u)
      return 0;
    *v = (x >> l) & ((1u << *k) - 1u);
    l += *k;
  }
  return l;
}

/* The pair table from the decoding table, a share of the windows a
 * thread (after fzr_lut_fill: it overwrites the lengths and codes). */
static inline FZR_HD void fzr_pair_fill(fzr_state *S, unsigned form, unsigned t, unsigned nt) {
  if (!fzr_pairs_pay(S))
    return;
  const unsigned e = S->e;
  for (uint32_t x = t; x < (1u << FZR_MAX_LEN); x += nt) {
    uint32_t v1 = 0, k1 = 0, v2 = 0, k2 = 0, pe = 0;
    uint32_t l1 = fzr_pair_part(form, S->lut[x], x, FZR_MAX_LEN, e, &v1, &k1);
    if (l1) {
      /* The second lies whole in the window's other bits only when it is
       * no longer than they are. */
      uint32_t y = x >> l1;
      uint32_t l2 = fzr_pair_part(form, S->lut[y], y, FZR_MAX_LEN - l1, e, &v2, &k2);
      if (l2)
        pe = (l1 + l2) | k1 << 4 | k2 << 8 | v1 << 12 | v2 << 22;
    }
    S->pair[x] = pe;
  }
}

/* A lane's bit reader.  The stream lies in the scratch (S->b, 256-byte
 * aligned, its bytes rounded up to 256), so the reader loads the aligned
 * words its bytes are in: the first one shifted past the bytes before the
 * lane, each one masked to the lane's bytes, and each loaded a refill
 * ahead, so that a lane waits for the memory only where its warp's lanes
 * all ran out at once.  (Bytes one at a time when a lane's 32 bits ran
 * low, in a warp of 32 lanes of which one or another always does, made
 * the warp wait for the memory at nearly every symbol.)  acc holds nb
 * bits, zeros above them. */
typedef struct fzr_reader {
  uint64_t acc;
  int nb;           /* below 0 once more bits were taken than the lane had */
  const uint8_t *q; /* the next aligned word */
  uint64_t left;    /* the lane's bytes from q on */
  uint32_t nxt;     /* the word at q, when left > 0 */
} fzr_reader;

static inline FZR_HD uint32_t fzr_ld32a(const uint8_t *p) {
#ifdef __CUDA_ARCH__
  return *(const uint32_t *)p;
#else
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
#endif
}

/* The low 8 k bits of v (0 <= k <= 4). */
static inline FZR_HD uint32_t fzr_low_bytes(uint32_t v, unsigned k) {
  return k >= 4 ? v : v & ((1u << (8 * k)) - 1u);
}

/* The reader of the bytes [p, end), p at or after the 4-aligned base. */
static inline FZR_HD void fzr_reader_init(fzr_reader *r, const uint8_t *p, const uint8_t *end) {
  unsigned mis = (unsigned)((uintptr_t)p & 3u);
  uint64_t len = (uint64_t)(end - p);
  r->acc = 0;
  r->nb = 0;
  r->q = p - mis;
  r->left = len;
  r->nxt = 0;
  if (len == 0)
    return;
  unsigned take = 4 - mis < len ? 4 - mis : (unsigned)len;
  r->acc = fzr_low_bytes(fzr_ld32a(r->q) >> (8 * mis), take);
  r->nb = 8 * take;
  r->q += 4;
  r->left -= take;
  r->nxt = r->left ? fzr_ld32a(r->q) : 0u;
}

/* Up to 32 more bits when 32 or fewer are left: after it nb is above 32
 * unless the lane's bytes are all taken. */
static inline FZR_HD void fzr_refill(fzr_reader *r) {
  if (r->nb <= 32 && r->left) {
    unsigned take = r->left < 4 ? (unsigned)r->left : 4u;
    r->acc |= (uint64_t)fzr_low_bytes(r->nxt, take) << r->nb;
    r->nb += 8 * take;
    r->q += 4;
    r->left -= take;
    r->nxt = r->left ? fzr_ld32a(r->q) : 0u;
  }
}

static inline FZR_HD int fzr_take(fzr_reader *r, unsigned n, uint64_t *v) {
  fzr_refill(r);
  if (r->nb < (int)n)
    return 0;
  *v = r->acc & ((UINT64_C(1) << n) - 1);
  r->acc >>= n;
  r->nb -= (int)n;
  return 1;
}

static inline FZR_HD void fzr_store(uint8_t *a, unsigned w, uint64_t j, uint64_t v) {
  if (w == 4)
    ((uint32_t *)a)[j] = (uint32_t)v;
  else
    ((uint64_t *)a)[j] = v;
}

/* The same, where w is a constant and may be 1 (a byte plane's). */
static inline FZR_HD void fzr_put(uint8_t *a, unsigned w, uint64_t j, uint64_t v) {
  if (w == 1)
    a[j] = (uint8_t)v;
  else
    fzr_store(a, w, j, v);
}

/* The chunk's words set to zero by the whole block, in coalesced 8-byte
 * stores, before the lanes decode: a run of zeros then only moves its lane
 * on, and a lane stores its words other than zero alone.  (Each lane
 * writing its runs word by word, in a region of its own, cost the block's
 * first warp one uncoalesced store a word while the other seven waited at
 * the barrier after it: that barrier held 40% of the decoder's stall
 * samples on an H200, docs/benchmarks.md.)  Words of 4 or 8 bytes start
 * 256-byte aligned in the scratch, and n * w is a multiple of 4; a byte
 * plane (bytes: w is 1) starts 8-byte aligned at S->pl.hw, in a region with
 * room for its bytes rounded up to 8. */
FZR_IP_FI FZR_HD void fzr_words_clear(fzr_state *S, unsigned t, unsigned nt, unsigned w,
                                     unsigned bytes) {
  const uint64_t nb = S->n * w, n8 = nb / 8;
  uint64_t *a8 = (uint64_t *)(bytes ? S->pl.hw : S->a);
  for (uint64_t i = t; i < n8; i += nt)
    a8[i] = 0;
  if (t == 0 && nb % 8) {
    if (bytes)
      a8[n8] = 0;
    else
      ((uint32_t *)S->a)[nb / 4 - 1] = 0;
  }
}

/* Lane l (< 32) decodes its sub-stream into the words, which
 * fzr_words_clear set to zero.  A lane is one thread of the block's first
 * warp and the other warps wait for it, so a symbol's few instructions
 * are the phase's length: counts are 32-bit (a chunk has fewer than 2^30
 * words), w is a constant, and a run and a word take the same path (the
 * warp's lanes meet one or the other at random).  Bytes (w is 1) go to
 * the byte plane at S->pl.hw. */
FZR_IP_FI FZR_HD void fzr_huff_lane_w(fzr_state *S, unsigned l, unsigned w, unsigned form) {
  const uint32_t n = (uint32_t)S->n, lcap = (n + FZR_LANES - 1) / FZR_LANES, lo = l * lcap;
  const uint32_t cnt = lo < n ? (lcap < n - lo ? lcap : n - lo) : 0;
  fzr_reader r;
  fzr_reader_init(&r, S->b + S->lane_beg[l], S->b + S->lane_end[l]);
  const unsigned e = S->e;
  const uint32_t *lut = S->lut;
  uint8_t *a = (w == 1 ? S->pl.hw : S->a) + (uint64_t)lo * w;
  /* Each symbol takes at most FZR_MAX_LEN bits, and the reader holds more
   * than 32 after a refill while the lane has bytes left, so no symbol
   * needs a test of its own for bits: a lane that takes more than its
   * bytes hold reads zeros past them and ends with nb below 0, which the
   * end's test finds (the engine's decoder fails such a lane at the
   * symbol; the chunk fails either way).  A window no code begins is a
   * run no lane can hold. */
  const uint32_t *pair = fzr_pairs_pay(S) ? S->pair : NULL;
  for (uint32_t j = 0; j < cnt;) {
    fzr_refill(&r);
    const uint32_t win = (uint32_t)r.acc & ((1u << FZR_MAX_LEN) - 1);
    const uint32_t ent = lut[win], pe = pair ? pair[win] : 0u;
    unsigned s = ent & 0xffffu;
    /* Two symbols where the window holds a pair that fits in the lane,
     * else one: the same steps either way, so that the warp's lanes,
     * which meet one or the other at random, take one path.  A pair's
     * part with k > 0 is a run: 2^k zeros, and in the CLASS form v more
     * (its raw bits); else it writes v. */
    const uint32_t k1 = FZR_PAIR_K1(pe), k2 = FZR_PAIR_K2(pe);
    const uint32_t v1 = FZR_PAIR_V1(pe), v2 = FZR_PAIR_V2(pe);
    const uint32_t a1 = (1u << k1) + (k1 ? v1 : 0u);
    const uint32_t a2 = pe != 0 ? (1u << k2) + (k2 ? v2 : 0u) : 0u;
    const bool two = pe != 0 && a1 + a2 <= cnt - j;
    unsigned ls = two ? FZR_PAIR_BITS(pe) : ent >> 16;
    r.acc >>= ls;
    r.nb -= (int)ls;
    /* A run symbol (e + 1 .. e + FZR_RUNS) stands for 2^(s - e) zeros (in
     * the CLASS form and the s - e raw bits after its code). */
    uint32_t adv = two ? a1 : s > e ? 1u << (s - e < 31u ? s - e : 31u) : 1u;
    if (!two && s > e && form == FZE_HUFF_FORM_CLASS) {
      uint64_t x;
      if (s - e > FZR_RUNS || !fzr_take(&r, s - e, &x))
        goto bad;
      adv += (uint32_t)x;
    }
    if (adv > cnt - j)
      goto bad;
    /* 1 .. e - 1: a word */
    uint64_t v = two ? (k1 ? 0u : v1) : s - 1u < e - 1u ? s : 0u;
    if (!two && s == e) {
      uint64_t x, hi = 0;
      if (!fzr_take(&r, w == 8 ? 32 : 8 * w, &x) || (w == 8 && !fzr_take(&r, 32, &hi)))
        goto bad;
      v = x | hi << 32;
    }
    if (v)
      fzr_put(a, w, j, v);
    j += adv;
    if (two) {
      if (!k2 && v2)
        fzr_put(a, w, j, v2);
      j += a2;
    }
  }
  if (r.left != 0 || r.nb < 0 || r.nb >= 8 || r.acc != 0)
    goto bad;
  return;
bad:
  FZR_BAD(S);
}

FZR_IP_FI FZR_HD void fzr_huff_lane(fzr_state *S, unsigned l, unsigned w, unsigned bytes,
                                    unsigned form) {
  if (l >= FZR_LANES)
    return;
  if (bytes)
    fzr_huff_lane_w(S, l, 1u, FZE_HUFF_FORM_BITS);
  else if (w == 4)
    fzr_huff_lane_w(S, l, 4u, form);
  else
    fzr_huff_lane_w(S, l, 8u, form);
}

/* The huffman stream's word width: a byte plane's 1, else the job's (read
 * where it is used, not held in a register across the phases). */
static inline FZR_HD unsigned fzr_huff_w(const fzr_job *J, unsigned bytes) {
  return bytes ? 1u : J->w;
}

/* The block function: the huffman stream in S->b (S->hlen bytes) decoded
 * into the chunk's n words of J->w bytes at S->a, or (bytes, a constant of
 * the kernel) into the byte plane at S->pl.hw.  A header the engine
 * refuses sets S->done and returns 1, a lane it refuses S->err. */
FZR_IP_FI FZR_HD int fzr_huff_block(fzr_state *S, const fzr_job *J, unsigned bytes) {
  FZR_T0;
  FZR_ONE(fzr_huff_frame(S, bytes ? 0u : J->hform));
  FZR_SYNC();
  if (S->done)
    return 1;
  FZR_ALL(fzr_huff_lens(S, t, nt));
  FZR_SYNC();
  FZR_ALL(fzr_huff_sums(S, t, nt));
  FZR_SYNC();
  if (S->done)
    return 1;
  FZR_ALL(fzr_huff_codes(S, t, nt));
  FZR_SYNC();
  FZR_CLK(42);
  FZR_ALL(fzr_lut_clear(S, t, nt));
  FZR_SYNC();
  FZR_ALL(fzr_lut_fill(S, t, nt); fzr_words_clear(S, t, nt, fzr_huff_w(J, bytes), bytes));
  FZR_SYNC();
  FZR_ALL(fzr_pair_fill(S, S->hform, t, nt));
  FZR_SYNC();
  FZR_CLK(43);
  FZR_ALL(fzr_huff_lane(S, t, fzr_huff_w(J, bytes), bytes, S->hform));
  FZR_SYNC();
  FZR_CLK(44);
  return 0;
}

/* ---- values ---- */

static inline FZR_HD uint8_t *fzr_vals(fzr_state *S, const fzr_job *J) {
  return J->out_aligned ? J->out + S->c * J->cb : S->v;
}

/* The outlier flags set to zero in coalesced 8-byte stores: they start
 * 256-byte aligned in the scratch, in a region of cb / 4 bytes (rounded
 * up to 256), which holds n rounded up to 8. */
static inline FZR_HD void fzr_flags_clear(fzr_state *S, unsigned t, unsigned nt) {
  uint64_t *x8 = (uint64_t *)S->x;
  for (uint64_t i = t; i < (S->n + 7) / 8; i += nt)
    x8[i] = 0;
}

/* The outliers into the values (and their flags): indices strictly
 * ascending and inside the chunk, each checked against the one before. */
static inline FZR_HD void fzr_outliers(fzr_state *S, const fzr_job *J, unsigned t, unsigned nt,
                                       int flags) {
  uint8_t *out = fzr_vals(S, J);
  unsigned w = J->w, iw = S->iw;
  for (uint64_t j = t; j < S->m; j += nt) {
    uint64_t i = fzr_index(S->idx + iw * j, iw);
    if ((j > 0 && i <= fzr_index(S->idx + iw * (j - 1), iw)) || i >= S->n) {
      FZR_BAD(S);
      continue;
    }
    for (unsigned b = 0; b < w; b++)
      out[i * w + b] = S->vals[j * w + b];
    if (flags)
      S->x[i] = 1;
  }
}

static inline FZR_HD double fzr_fin0(double v) { return isfinite(v) ? v : 0.0; }

/* Word i of the words at a (w bytes each, aligned). */
static inline FZR_HD uint64_t fzr_word(const uint8_t *a, unsigned w, uint64_t i) {
  return w == 4 ? ((const uint32_t *)a)[i] : ((const uint64_t *)a)[i];
}

/* Point i rebuilt from its prediction p and its word z (stage_interp.c's
 * point()); returns the value as stored, widened. */
static inline FZR_HD double fzr_rebuild_w(double step, unsigned w, uint8_t *out, uint64_t i,
                                          uint64_t z, double p) {
  if (w == 4) {
    int32_t q = (int32_t)fzo_unzigzag32((uint32_t)z);
    float r = (float)(p + (double)q * step);
    ((float *)out)[i] = r;
    return (double)r;
  }
  int64_t q = (int64_t)fzo_unzigzag64(z);
  double r = p + (double)q * step;
  ((double *)out)[i] = r;
  return r;
}

#define FZR_NO_ANCHOR UINT32_MAX

/* Anchor k = b nt + t of batch b (the walk's pass 0, in memory order):
 * its chunk index, flag, word and (an outlier's) value, which the chain
 * does not change, staged for thread 0; FZR_NO_ANCHOR past the last. */
static inline FZR_HD void fzr_anchor_gather(fzr_state *S, const fzr_job *J, uint64_t b,
                                            unsigned t, unsigned nt) {
  const fzr_ip_pass *ps = &S->ip.pass[0];
  uint64_t k = b * nt + t;
  S->anc.i[t] = FZR_NO_ANCHOR;
  if (k >= ps->end[FZR_IP_BOXES - 1])
    return;
  unsigned bi = 0;
  while (k >= ps->end[bi])
    bi++;
  uint32_t i = fzr_ip_at(&ps->box[bi], (uint32_t)k - (bi ? ps->end[bi - 1] : 0u));
  const uint8_t *out = fzr_vals(S, J);
  uint8_t x = S->x[i];
  S->anc.i[t] = i;
  S->anc.x[t] = x;
  /* In version 5 anchor k's word is word k. */
  S->anc.q[t] = fzr_word(S->a, J->w, J->lv ? (uint32_t)k : i);
  S->anc.o[t] = !x ? 0.0 : J->w == 4 ? (double)((const float *)out)[i] : ((const double *)out)[i];
}

/* Thread 0: the staged anchors, each predicted by the rebuilt one before
 * (the first of the chunk by 0), as fzr_level() rebuilds points and
 * fzr_ip_val() reads them back. */
static inline FZR_HD void fzr_anchor_chain(fzr_state *S, const fzr_job *J, unsigned nt) {
  uint8_t *out = fzr_vals(S, J);
  double prev = S->anc_prev;
  const double step = fzo_interp_level_step(J->step, fzr_ip_level_of(0), J->lv);
  for (unsigned j = 0; j < nt; j++) {
    uint32_t i = S->anc.i[j];
    if (i != FZR_NO_ANCHOR)
      prev = S->anc.x[j] ? fzr_fin0(S->anc.o[j])
                         : fzr_rebuild_w(step, J->w, out, i, S->anc.q[j], prev);
  }
  S->anc_prev = prev;
}

/* One pass (h, d) of the walk (1 .. 12): its points depend only on
 * earlier passes, so the block shares them out as the encoder does; an
 * outlier keeps the value fzr_outliers stored.  In version 5 point k's
 * word is word k after those of the passes before. */
FZR_IP_FI FZR_HD void fzr_level_w(fzr_state *S, const fzr_job *J, unsigned pass, unsigned w,
                                   unsigned t, unsigned nt) {
  uint8_t *out = fzr_vals(S, J);
  const fzr_ip_pass *ps = &S->ip.pass[pass];
  uint64_t h = (uint64_t)(FZR_IP_TOP / 2) >> ((pass - 1) / 3);
  unsigned d = (pass - 1) % 3;
  uint64_t ed = S->ip.ext[d], off = ps->off;
  uint32_t n = S->ip.n, total = ps->end[FZR_IP_BOXES - 1];
  const double step = fzo_interp_level_step(J->step, fzr_ip_level_of(pass), J->lv);
  const uint32_t base = fzr_ip_words_before(&S->ip, pass);
  fzr_ip_cur cur = {ps->box, 0, 0, 0, 0, 0, 0, 0};
  for (uint32_t k = t; k < total; k += nt) {
    uint64_t cd;
    uint32_t i = fzr_ip_next(ps, &cur, k, t, nt, d, h, &cd);
    uint8_t x = S->x[i];
    uint64_t z = fzr_word(S->a, w, J->lv ? base + k : i);
    double p = fzr_ip_predict(out, S->x, w, i, cd, h, off, ed, n);
    if (!x)
      fzr_rebuild_w(step, w, out, i, z, p);
  }
}

static inline FZR_HD void fzr_level(fzr_state *S, const fzr_job *J, unsigned pass, unsigned t,
                                    unsigned nt) {
  if (J->w == 4)
    fzr_level_w(S, J, pass, 4u, t, nt);
  else
    fzr_level_w(S, J, pass, 8u, t, nt);
}

/* ---- the lorenzo predictor (k >= 1) and quant's own words ---- */

/* quant's decoding of word c into value i of out (or its copy, lossless). */
static inline FZR_HD void fzr_dq_one(const fzr_job *J, uint8_t *out, uint64_t i, uint64_t c) {
  if (J->w == 4)
    ((float *)out)[i] = J->step == 0 ? fzo_bits_f32((uint32_t)c)
                        : J->pwrel   ? fzo_pw_dequant_f32((uint32_t)c, (uint32_t)J->step)
                                     : fzo_dequant_f32((uint32_t)c, J->step);
  else
    ((double *)out)[i] = J->step == 0 ? fzo_bits_f64(c)
                         : J->pwrel   ? fzo_pw_dequant_f64(c, (uint64_t)J->step)
                                      : fzo_dequant_f64(c, J->step);
}

static inline FZR_HD uint64_t fzr_corner(unsigned m, uint64_t sy, uint64_t sz) {
  return (m & 1u) + ((m & 2u) ? sy : 0) + ((m & 4u) ? sz : 0);
}

static inline FZR_HD unsigned fzr_top_bit(unsigned m) {
  unsigned b = 0;
  while (m >> (b + 1))
    b++;
  return b;
}

/* Lorenzo's words rebuilt as prefix sums (stage_lorenzo.c's prediction,
 * with the chunk's own axis dropping).  Where every element took all the
 * axes it has neighbours on, with the elements before the chunk read as
 * zero, the residuals would be the differences of the words along x, y
 * and z, and the words their prefix sums along x (restarting where x is
 * 0), then y, then z (modulo 2^bits): each a scan along one stride, whose
 * lines are independent.  The chunk's dropping differs from that reading
 * only at a few elements near its start, where an axis is dropped whose
 * corner holds words of the chunk (element sy, and sz .. sz + sy), and
 * there the difference is a sum of words at 0 .. sy, which are rebuilt
 * first (a scan along x and one element).  Those residuals are moved by
 * their difference, and the three scans rebuild every word.
 *
 * The state of a scan: each thread's share of a line summarised as a map
 * v -> c v + a of the word before it (c 0 where the share restarts),
 * the shares' maps chained line by line, and the word before each share. */

/* The axes element i (x along its row) is predicted from. */
static inline FZR_HD unsigned fzr_lz_axes(uint64_t i, uint64_t x, unsigned ax, uint64_t sy,
                                          uint64_t sz) {
  unsigned m = (x > 0 ? 1u : 0u) | ax;
  while (m && fzr_corner(m, sy, sz) > i)
    m &= ~(1u << fzr_top_bit(m));
  return m;
}

/* One scan: the elements [lo, hi) of the chunk in lines of stride s
 * (elements lo + q, lo + q + s, ...), the axis's coordinate of an element
 * ((first + i) / s) % e; an element adds the word s before it unless that
 * coordinate is 0 or the word lies before the chunk.  zz: the words in
 * [lo, hi) are zigzagged residuals.  Lines beyond the thread count are
 * taken whole by a thread each; fewer lines are cut into pieces, at most
 * FZR_NT in all. */
typedef struct fzr_scan {
  uint64_t lo, hi, s, e;
  uint32_t nl, np;   /* lines, pieces per line */
  uint64_t per;      /* positions per piece */
  unsigned zz;       /* the words are zigzagged residuals */
  unsigned dq;       /* the last scan: its words are stored as values */
} fzr_scan;

static inline FZR_HD fzr_scan fzr_scan_of(uint64_t lo, uint64_t hi, uint64_t s, uint64_t e,
                                          unsigned zz, unsigned nt) {
  fzr_scan c;
  c.lo = lo;
  c.hi = hi > lo ? hi : lo;
  c.s = s;
  c.e = e;
  c.zz = zz;
  c.dq = 0;
  uint64_t len = c.hi - c.lo, nl = len < s ? len : s;
  c.nl = (uint32_t)(nl < 0xffffffffull ? nl : 0xffffffffull);
  c.np = c.nl == 0 || c.nl >= nt ? 1u : nt / c.nl;
  uint64_t lmax = c.nl ? (len + s - 1) / s : 0;
  c.per = (lmax + c.np - 1) / c.np;
  return c;
}

/* Piece p of line q: its first element, its count, and the axis's
 * coordinate there. */
static inline FZR_HD uint64_t fzr_scan_piece(const fzr_scan *c, uint64_t first, uint32_t q,
                                             uint32_t p, uint64_t *cnt, uint64_t *co) {
  uint64_t len = c->hi - c->lo, llen = (len - q + c->s - 1) / c->s;
  uint64_t k0 = (uint64_t)p * c->per, k1 = k0 + c->per < llen ? k0 + c->per : llen;
  uint64_t i = c->lo + q + k0 * c->s;
  *cnt = k1 > k0 ? k1 - k0 : 0;
  *co = ((first + i) / c->s) % c->e;
  return i;
}

/* Whether element i (its axis coordinate *co) starts its line afresh:
 * the coordinate is 0 or the word s before lies before the chunk; *co
 * moves on to the next element's. */
static inline FZR_HD int fzr_scan_fresh(const fzr_scan *c, uint64_t i, uint64_t *co) {
  int fresh = *co == 0 || i < c->s;
  *co = *co + 1 == c->e ? 0 : *co + 1;
  return fresh;
}

/* The word at i as the scan adds it. */
FZR_IP_FI FZR_HD uint64_t fzr_scan_val(const uint8_t *v, unsigned w, unsigned zz, uint64_t i) {
  uint64_t z = fzr_word(v, w, i);
  return zz ? fzo_unzigzag_w(z, w) : z;
}

/* Thread t's piece summarised (lines cut into pieces only). */
FZR_IP_FI FZR_HD void fzr_scan_sum_w(fzr_state *S, const fzr_scan *c, unsigned w, unsigned t) {
  if (c->np < 2 || t >= c->nl * c->np)
    return;
  uint64_t cnt, co, C = 1, A = 0;
  uint64_t i = fzr_scan_piece(c, S->first, t % c->nl, t / c->nl, &cnt, &co);
  const uint8_t *v = S->a;
  for (uint64_t k = 0; k < cnt; k++, i += c->s) {
    uint64_t x = fzr_scan_val(v, w, c->zz, i);
    if (fzr_scan_fresh(c, i, &co)) {
      C = 0;
      A = x;
    } else {
      A += x;
    }
  }
  S->lz_c[t] = (uint8_t)C;
  S->lz_a[t] = A;
}

/* Line q < nl (a thread each): the word before each of its pieces. */
static inline FZR_HD void fzr_scan_chain(fzr_state *S, const fzr_scan *c, unsigned w,
                                         unsigned t) {
  if (c->np < 2 || t >= c->nl)
    return;
  uint64_t i0 = c->lo + t, wv = i0 >= c->s ? fzr_word(S->a, w, i0 - c->s) : 0;
  for (uint32_t p = 0; p < c->np; p++) {
    uint32_t k = p * c->nl + t;
    S->lz_in[k] = wv;
    wv = S->lz_c[k] ? wv + S->lz_a[k] : S->lz_a[k];
  }
}

/* The word rebuilt at i: into the words, or (the last scan) its value
 * into the output. */
FZR_IP_FI FZR_HD void fzr_scan_put(const fzr_job *J, uint8_t *v, uint8_t *out, unsigned w,
                                    unsigned dq, uint64_t i, uint64_t wv) {
  if (dq)
    fzr_dq_one(J, out, i, wv);
  else
    fzr_store(v, w, i, wv);
}

/* The scan of n elements from i on (a line's piece), from the word before
 * it; four loaded ahead of their sums, since the stores may alias them as
 * the compiler sees it. */
FZR_IP_FI FZR_HD void fzr_scan_run(const fzr_job *J, uint8_t *v, uint8_t *out, unsigned w,
                                    const fzr_scan *c, uint64_t i, uint64_t cnt, uint64_t co,
                                    uint64_t wv) {
  const uint64_t s = c->s, mask = w == 4 ? 0xffffffffull : ~0ull;
  uint64_t k = 0;
  for (; k + 4 <= cnt; k += 4, i += 4 * s) {
    uint64_t x[4];
    FZR_UNROLL
    for (unsigned j = 0; j < 4; j++)
      x[j] = fzr_scan_val(v, w, c->zz, i + j * s);
    FZR_UNROLL
    for (unsigned j = 0; j < 4; j++) {
      wv = fzr_scan_fresh(c, i + j * s, &co) ? x[j] : wv + x[j];
      fzr_scan_put(J, v, out, w, c->dq, i + j * s, wv & mask);
    }
  }
  for (; k < cnt; k++, i += s) {
    uint64_t x = fzr_scan_val(v, w, c->zz, i);
    wv = fzr_scan_fresh(c, i, &co) ? x : wv + x;
    fzr_scan_put(J, v, out, w, c->dq, i, wv & mask);
  }
}

/* Thread t's pieces rebuilt: its piece from the chained word before it,
 * or (lines not cut) its whole lines from the word before each. */
FZR_IP_FI FZR_HD void fzr_scan_apply_w(fzr_state *S, const fzr_job *J, const fzr_scan *c,
                                        unsigned w, unsigned t, unsigned nt) {
  uint8_t *out = fzr_vals(S, J);
  uint64_t cnt, co;
  if (c->np >= 2) {
    if (t >= c->nl * c->np)
      return;
    uint64_t i = fzr_scan_piece(c, S->first, t % c->nl, t / c->nl, &cnt, &co);
    fzr_scan_run(J, S->a, out, w, c, i, cnt, co, S->lz_in[t]);
    return;
  }
  for (uint64_t q = t; q < c->nl; q += nt) {
    uint64_t i = fzr_scan_piece(c, S->first, (uint32_t)q, 0, &cnt, &co);
    fzr_scan_run(J, S->a, out, w, c, i, cnt, co,
                 i >= c->s ? fzr_word(S->a, w, i - c->s) : 0);
  }
}

static inline FZR_HD void fzr_scan_sum(fzr_state *S, const fzr_scan *c, unsigned w, unsigned t) {
  if (w == 4)
    fzr_scan_sum_w(S, c, 4u, t);
  else
    fzr_scan_sum_w(S, c, 8u, t);
}

static inline FZR_HD void fzr_scan_apply(fzr_state *S, const fzr_job *J, const fzr_scan *c,
                                         unsigned w, unsigned t, unsigned nt) {
  if (w == 4)
    fzr_scan_apply_w(S, J, c, 4u, t, nt);
  else
    fzr_scan_apply_w(S, J, c, 8u, t, nt);
}

/* The whole block: one scan, its pieces chained where lines are cut. */
static inline FZR_HD void fzr_scan_block(fzr_state *S, const fzr_job *J, const fzr_scan *c,
                                         unsigned w) {
  FZR_T0;
  if (c->nl == 0)
    return;
  if (c->np >= 2) {
    FZR_ALL(fzr_scan_sum(S, c, w, t));
    FZR_SYNC();
    FZR_ALL(fzr_scan_chain(S, c, w, t));
    FZR_SYNC();
  }
  FZR_ALL(fzr_scan_apply(S, J, c, w, t, nt));
  FZR_SYNC();
}

/* The chunk's element i: its coordinates' axes (x > 0, y > 0, z > 0 as
 * bits 1, 2, 4) and the axes the chunk lets it use. */
static inline FZR_HD unsigned fzr_lz_masks(const fzr_state *S, const uint64_t *ext, uint64_t i,
                                           unsigned *m) {
  uint64_t X = ext[2], Y = ext[1], g = S->first + i, r = g / X, x = g - r * X;
  unsigned ax = (r % Y > 0 ? 2u : 0u) | (r / Y > 0 ? 4u : 0u);
  *m = fzr_lz_axes(i, x, ax, X, X * Y);
  return (x > 0 ? 1u : 0u) | ax;
}

/* A rebuilt word of 0 .. sy (the words before p0 are rebuilt in S->a,
 * word p0 is S->lz_wsy); 0 before the chunk. */
static inline FZR_HD uint64_t fzr_lz_early(const fzr_state *S, unsigned w, uint64_t p0,
                                           uint64_t i, uint64_t off) {
  if (off > i)
    return 0;
  return i - off == p0 ? S->lz_wsy : fzr_word(S->a, w, i - off);
}

/* The sum over the axis sets S of mask within `all` with some axis outside
 * `keep` of (-1)^|S| times the word at i - off(S): what element i's
 * residual moves by when the axes `all` \ `keep` are taken with the zero
 * reading (keep = 0, all = the axes kept: minus the prediction). */
static inline FZR_HD uint64_t fzr_lz_terms(const fzr_state *S, unsigned w, uint64_t p0,
                                           uint64_t i, unsigned all, unsigned keep,
                                           uint64_t sy, uint64_t sz) {
  uint64_t d = 0;
  for (unsigned set = 1; set < 8; set++) {
    if ((set & ~all) != 0 || (set & ~keep) == 0)
      continue;
    uint64_t v = fzr_lz_early(S, w, p0, i, fzr_corner(set, sy, sz));
    unsigned odd = (set & 1u) ^ ((set >> 1) & 1u) ^ ((set >> 2) & 1u);
    d = odd ? d - v : d + v;
  }
  return d;
}

/* Thread 0: word sy rebuilt from the words before it (when both y and z
 * are there; its own axes are x and y at most). */
static inline FZR_HD void fzr_lz_wsy(fzr_state *S, const fzr_job *J, uint64_t p0) {
  const uint64_t *ext = J->ext[S->pk - 1];
  uint64_t sy = ext[2], sz = ext[2] * ext[1];
  unsigned w = J->w, m;
  S->lz_wsy = 0;
  if (ext[1] < 2 || ext[0] < 2 || sy >= S->n)
    return;
  (void)fzr_lz_masks(S, ext, sy, &m);
  /* The prediction is minus the sum of the terms with the zero reading
   * of every axis it keeps. */
  uint64_t p = 0 - fzr_lz_terms(S, w, p0, sy, m, 0, sy, sz);
  S->lz_wsy = fzo_unzigzag_w(fzr_word(S->a, w, sy), w) + p;
}

/* The residuals that the zero reading moves: element sy (y there) and
 * sz .. sz + sy (z there; sz .. sz alone without y), a thread each. */
static inline FZR_HD void fzr_lz_fix(fzr_state *S, const fzr_job *J, uint64_t p0, unsigned t,
                                     unsigned nt) {
  const uint64_t *ext = J->ext[S->pk - 1];
  uint64_t sy = ext[2], sz = ext[2] * ext[1], n = S->n;
  unsigned w = J->w;
  uint64_t mask = w == 4 ? 0xffffffffull : ~0ull;
  int hy = ext[1] > 1, hz = ext[0] > 1;
  uint64_t na = hy && sy < n ? 1u : 0u, zhi = sz + (hy ? sy : 0) + 1;
  uint64_t nb = hz && sz < n ? (zhi < n ? zhi : n) - sz : 0u;
  for (uint64_t k = t; k < na + nb; k += nt) {
    uint64_t i = k < na ? sy : sz + (k - na);
    unsigned m, M = fzr_lz_masks(S, ext, i, &m);
    if (m == M)
      continue;
    uint64_t d = fzr_lz_terms(S, w, p0, i, M, m, sy, sz);
    uint64_t r = fzo_unzigzag_w(fzr_word(S->a, w, i), w) + d;
    fzr_store(S->a, w, i, fzo_zigzag_w(r & mask, w));
  }
}

/* The chunk's words rebuilt from lorenzo's residuals (k = S->pk), and
 * their values into the output. */
static inline FZR_HD void fzr_lorenzo(fzr_state *S, const fzr_job *J) {
  FZR_T0;
  const uint64_t *ext = J->ext[S->pk - 1];
  const uint64_t X = ext[2], Y = ext[1], Z = ext[0], n = S->n;
  const unsigned w = J->w;
  const int hy = Y > 1, hz = Z > 1;
  /* The words before p0 rebuilt along x: all a fix needs, with word sy. */
  uint64_t p0 = hy && hz ? (X < n ? X : n) : (n < 1 ? n : 1);
  if (hy || hz) {
    fzr_scan c0 = fzr_scan_of(0, p0, 1, X, 1, nt);
    fzr_scan_block(S, J, &c0, w);
    FZR_ONE(fzr_lz_wsy(S, J, p0));
    FZR_SYNC();
    FZR_ALL(fzr_lz_fix(S, J, p0, t, nt));
    FZR_SYNC();
  } else {
    p0 = 0;
  }
  /* The last scan stores the values (quant's decoding) in place of the
   * words, which nothing reads after it. */
  fzr_scan cx = fzr_scan_of(p0, n, 1, X, 1, nt);
  cx.dq = !hy && !hz;
  fzr_scan_block(S, J, &cx, w);
  if (hy) {
    fzr_scan cy = fzr_scan_of(0, n, X, Y, 0, nt);
    cy.dq = !hz;
    fzr_scan_block(S, J, &cy, w);
  }
  if (hz) {
    fzr_scan cz = fzr_scan_of(0, n, X * Y, Z, 0, nt);
    cz.dq = 1;
    fzr_scan_block(S, J, &cz, w);
  }
}

/* quant's decoding of the words (or their copy, lossless), four words
 * loaded ahead of their values' stores (which may alias them as the
 * compiler sees it). */
static inline FZR_HD void fzr_dequant(fzr_state *S, const fzr_job *J, unsigned t, unsigned nt) {
  uint8_t *out = fzr_vals(S, J);
  const uint64_t n = S->n;
  uint64_t i = t;
  for (; i + 3 * (uint64_t)nt < n; i += 4 * (uint64_t)nt) {
    uint64_t c[4];
    FZR_UNROLL
    for (unsigned j = 0; j < 4; j++)
      c[j] = fzr_word(S->a, J->w, i + j * nt);
    FZR_UNROLL
    for (unsigned j = 0; j < 4; j++)
      fzr_dq_one(J, out, i + j * nt, c[j]);
  }
  for (; i < n; i += nt)
    fzr_dq_one(J, out, i, fzr_word(S->a, J->w, i));
}

/* ---- byteplanes ---- */

/* Plane p's huffman stream copied to the stream's scratch (which the lane
 * readers take in aligned words), and its bytes' place. */
static inline FZR_HD void fzr_plane_load(fzr_state *S, unsigned p, unsigned t, unsigned nt) {
  const uint8_t *src = S->in + S->pl.off[p];
  for (uint64_t i = t; i < S->pl.len[p]; i += nt)
    S->b[i] = src[i];
  if (t == 0) {
    S->hlen = S->pl.len[p];
    S->pl.hw = S->v + p * fzr_up8(S->n);
  }
}

/* The words (lorenzo's residuals) from their planes' bytes. */
FZR_IP_FI FZR_HD void fzr_planes_join_w(fzr_state *S, unsigned w, unsigned t, unsigned nt) {
  for (uint64_t i = t; i < S->n; i += nt) {
    uint64_t v = 0;
    for (unsigned p = 0; p < w; p++)
      v |= S->pl.src[p] ? (uint64_t)S->pl.src[p][i] << (8 * p) : 0u;
    fzr_store(S->a, w, i, v);
  }
}

static inline FZR_HD void fzr_planes_join(fzr_state *S, unsigned w, unsigned t, unsigned nt) {
  if (w == 4)
    fzr_planes_join_w(S, 4u, t, nt);
  else
    fzr_planes_join_w(S, 8u, t, nt);
}

/* The block function: the coded planes decoded, one after another, and
 * the words joined in S->a, as the huffman stream's words are in the
 * ratio preset's chunks; a plane the engine refuses sets S->done or
 * S->err. */
static inline FZR_HD void fzr_planes(fzr_state *S, const fzr_job *J) {
  FZR_T0;
  for (unsigned p = 0; p < J->w; p++) {
    if (S->pl.len[p] == 0 || S->pl.len[p] == S->n)
      continue;
    FZR_ALL(fzr_plane_load(S, p, t, nt));
    FZR_SYNC();
    if (fzr_huff_block(S, J, 1) || S->err)
      return;
  }
  FZR_ALL(fzr_planes_join(S, J->w, t, nt));
  FZR_SYNC();
}

/* ---- the chunk's CRC-32C and raw chunks ---- */

#define FZR_POLY 0x82f63b78u

/* a * b modulo the polynomial, bit-reflected (bit 31 is x^0). */
static inline FZR_HD uint32_t fzr_gf_mul(uint32_t a, uint32_t b) {
  uint32_t p = 0;
  for (unsigned i = 0; i < 32; i++) {
    if (a & (0x80000000u >> i))
      p ^= b;
    b = (b & 1u) ? (b >> 1) ^ FZR_POLY : b >> 1;
  }
  return p;
}

/* x^(8 n) modulo the polynomial: what n zero bytes multiply a CRC by. */
static inline FZR_HD uint32_t fzr_xpow8(uint64_t n) {
  uint32_t r = 0x80000000u, b = 0x00800000u; /* 1, x^8 */
  for (; n; n >>= 1) {
    if (n & 1)
      r = fzr_gf_mul(r, b);
    b = fzr_gf_mul(b, b);
  }
  return r;
}

/* Thread t's share of the len bytes for their CRC, counted from the end:
 * every share is per = ceil(len / nt) bytes but the first that is not
 * empty, so that a right-hand subtree of shares is always whole. */
static inline FZR_HD void fzr_crc_range(uint64_t len, unsigned t, unsigned nt, uint64_t *lo,
                                        uint64_t *hi) {
  uint64_t per = (len + nt - 1) / nt, back = per * (nt - 1 - t); /* bytes after it */
  *hi = back < len ? len - back : 0;
  *lo = back + per < len ? len - back - per : 0;
}

/* Thread t's share as a CRC without the final inversion (linear, so the
 * shares combine): from 0, or from the initial ~0 for the share holding
 * byte 0; and thread 0 makes the factors the combination multiplies by,
 * fac[s] = x^(8 per 2^s), what 2^s whole shares of zeros do to a CRC. */
static inline FZR_HD void fzr_crc_part(uint32_t *part, uint32_t *fac, const uint8_t *p,
                                       uint64_t len, const uint32_t *tab, unsigned t,
                                       unsigned nt) {
  uint64_t lo, hi;
  fzr_crc_range(len, t, nt, &lo, &hi);
  uint32_t r = lo == 0 && hi > 0 ? 0xffffffffu : 0u;
  for (uint64_t i = lo; i < hi; i++)
    r = tab[(r ^ p[i]) & 0xffu] ^ (r >> 8);
  part[t] = r;
  if (t == 0) {
    uint32_t f = fzr_xpow8((len + nt - 1) / nt);
    for (unsigned s = 0; (1u << s) < nt; s++, f = fzr_gf_mul(f, f))
      fac[s] = f;
  }
}

/* Level s of the combination: the shares [t, t + 2^(s+1)) from their two
 * halves, left * x^(8 bytes of the right) + right.  The right half is
 * whole whenever the left is not empty, and an empty left is 0. */
static inline FZR_HD void fzr_crc_fold(uint32_t *part, const uint32_t *fac, unsigned s,
                                       unsigned t) {
  if ((t & ((2u << s) - 1)) == 0)
    part[t] = fzr_gf_mul(part[t], fac[s]) ^ part[t + (1u << s)];
}

/* The block function: the CRC-32C of the len bytes at p, in every thread,
 * from the nt threads' shares in log2(nt) levels (nt a power of two;
 * thread 0 alone combining them one after another held a tenth to a fifth
 * of the kernels' stall samples on an H200).  part holds nt words and fac
 * log2(nt), both the block's. */
static inline FZR_HD uint32_t fzr_crc_block(uint32_t *part, uint32_t *fac, const uint8_t *p,
                                            uint64_t len, const uint32_t *tab) {
  FZR_T0;
  FZR_ALL(fzr_crc_part(part, fac, p, len, tab, t, nt));
  FZR_SYNC();
  for (unsigned s = 0; (1u << s) < nt; s++) {
    FZR_ALL(fzr_crc_fold(part, fac, s, t));
    FZR_SYNC();
  }
  return len ? part[0] ^ 0xffffffffu : 0u;
}

static inline FZR_HD void fzr_copy_raw(fzr_state *S, const fzr_job *J, unsigned t, unsigned nt) {
  uint8_t *out = fzr_vals(S, J);
  for (uint64_t i = t; i < S->raw; i += nt)
    out[i] = S->in[i];
}

/* When out is not aligned for the values they were rebuilt in scratch. */
static inline FZR_HD void fzr_copy_out(fzr_state *S, const fzr_job *J, unsigned t, unsigned nt) {
  uint8_t *out = J->out + S->c * J->cb;
  for (uint64_t i = t; i < S->raw; i += nt)
    out[i] = S->v[i];
}

/* ---- one chunk, phase by phase ---- */

/* Every thread of the block calls it (the host model: once, running each
 * phase for every thread in turn); S is the block's shared state.  The
 * branches all read S after a barrier, so the block takes them as one.
 * planes (J->planes) is a constant of the kernel (ratio_kernels.cuh), so
 * that each chain's kernel holds its own code only: the ratio preset's
 * kernel is then the code it was before lorenzo | byteplanes came. */
FZR_IP_FI FZR_HD void fzr_chunk_of(fzr_state *S, const fzr_job *J, uint64_t c, uint64_t slot,
                                   unsigned planes) {
  FZR_T0;
  FZR_ONE(fzr_begin(S, J, c, slot, planes));
  FZR_SYNC();
  FZR_CLK(40);
  if (S->done)
    goto finish;
  if (planes) {
    /* No side list: lorenzo (k >= 1) rebuilds the values' bits. */
    fzr_planes(S, J);
    if (S->done || S->err)
      goto finish;
    goto words;
  }
  for (unsigned l = J->levels; l >= 1; l--) {
    FZR_ALL(fzr_lv_count(S, l, t, nt));
    FZR_SYNC();
    FZR_ONE(fzr_lv_scan(S, l, nt));
    FZR_SYNC();
    if (S->done)
      goto finish;
    FZR_ALL(fzr_lv_restore(S, l, t, nt));
    FZR_SYNC();
    if (l >= 2) {
      FZR_ONE(fzr_lv_next(S, l));
      FZR_SYNC();
      if (S->done)
        goto finish;
    }
  }
  FZR_CLK(41);
  if (fzr_huff_block(S, J, 0))
    goto finish;
words:
  /* pwrel chunks must name lorenzo; a lossless one has no outliers. */
  FZR_ONE(if ((J->pwrel && S->pk == 0) || (J->step == 0 && S->m != 0)) S->err = 1);
  FZR_SYNC();
  if (S->err)
    goto finish;
  if (S->pk == 0 && J->step != 0) {
    FZR_ALL(fzr_flags_clear(S, t, nt);
            fzr_ip_plan(&S->ip, J->ext[J->pdims - 1], S->first, S->n, J->lv,
                        fzo_interp_flat(S->kd, J->pdims), t));
    FZR_SYNC();
    FZR_CLK(45);
    FZR_ALL(fzr_outliers(S, J, t, nt, 1));
    FZR_SYNC();
    FZR_CLK(46);
    if (S->err)
      goto finish;
    /* The anchors are a chain: the block stages a batch of them, thread
     * 0 runs through it. */
    FZR_ONE(S->anc_prev = 0);
    {
      uint64_t batches = (S->ip.pass[0].end[FZR_IP_BOXES - 1] + nt - 1) / nt;
      for (uint64_t b = 0; b < batches; b++) {
        FZR_ALL(fzr_anchor_gather(S, J, b, t, nt));
        FZR_SYNC();
        FZR_ONE(fzr_anchor_chain(S, J, nt));
        FZR_SYNC();
      }
    }
    FZR_CLK(47);
    /* Passes without points (the axes a 1-D or 2-D walk lacks) cost no
     * barrier. */
    for (unsigned pass = 1; pass < FZR_IP_PASSES; pass++) {
      if (S->ip.pass[pass].end[FZR_IP_BOXES - 1] == 0)
        continue;
      FZR_ALL(fzr_level(S, J, pass, t, nt));
      FZR_SYNC();
      FZR_CLK(48 + pass);
    }
  } else {
    if (S->pk != 0) {
      fzr_lorenzo(S, J);
    } else {
      FZR_ALL(fzr_dequant(S, J, t, nt));
      FZR_SYNC();
    }
    FZR_ALL(fzr_outliers(S, J, t, nt, 0));
    FZR_SYNC();
  }
  if (!J->out_aligned)
    FZR_ALL(fzr_copy_out(S, J, t, nt));
finish:
  FZR_SYNC();
  FZR_CLK(61);
  if (S->skip_crc) {
    FZR_ONE(J->crcs[c] = 0);
    return;
  }
  if (!S->err && S->len == S->raw) {
    FZR_ALL(fzr_copy_raw(S, J, t, nt));
    FZR_SYNC();
    if (!J->out_aligned)
      FZR_ALL(fzr_copy_out(S, J, t, nt));
  }
  uint32_t crc = fzr_crc_block(S->part, S->fac, S->in, S->len, J->crc_tab);
  FZR_ONE(J->crcs[c] = crc; if (S->err) fzr_flag(J->status));
  FZR_CLK(62);
}

/* The host model's entry: either chain, as the job says. */
static inline FZR_HD void fzr_chunk(fzr_state *S, const fzr_job *J, uint64_t c, uint64_t slot) {
  if (J->planes)
    fzr_chunk_of(S, J, c, slot, 1);
  else
    fzr_chunk_of(S, J, c, slot, 0);
}

#endif
