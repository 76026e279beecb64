/*
 * engine.h - declarations shared by the engine's files (not installed).
 *
 * A pipeline is a chain of stages applied to each fixed-size chunk of the
 * input independently.  Within a chunk the data flows as a "stream" that is
 * either words (the element width: 1, 2, 4 or 8 bytes) or bytes; each stage
 * declares what it takes and what it gives, and the chain parser checks that
 * neighbours agree.  The quant stage also emits a side list of values stored
 * losslessly (outliers); it travels in front of the main stream in the chunk.
 *
 * Every per-element operation that both the CPU reference and the CUDA
 * kernels perform lives in ops.h, written once for both, so that the two
 * backends share not just the algorithm but the very arithmetic.
 */
#ifndef FZE_ENGINE_H
#define FZE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fz.h"
#include "fz_contract.h"
#include "fze_chain.h"
#include "ops.h"

/* The ratio stages (format version 3). */
static inline bool fze_stage_is_ratio(uint8_t id) {
  return id == FZE_STAGE_LORENZO || id == FZE_STAGE_HUFFMAN || id == FZE_STAGE_INTERP ||
         id == FZE_STAGE_BYTEPLANES;
}

bool fze_dtype_is_float(fz_dtype t);

/* Per-chunk work buffers, owned by one thread. */
typedef struct fze_scratch {
  uint8_t *a, *b;      /* ping-pong stream buffers */
  uint8_t *side;       /* the quant stage's side list */
  uint8_t *tmp;        /* stage-internal work space */
  uint8_t *price;      /* fze_huffman_price's, while tmp holds quant's words */
  size_t cap;          /* bytes of each */
  void *qwork;         /* the quant stage's index lists (fze_quant_work) */
} fze_scratch;

int fze_scratch_init(fze_scratch *s, size_t chunk_bytes);
void fze_scratch_free(fze_scratch *s);

/* The per-chunk coder (codec.c).  Encodes `n` elements at `in`, the chunk
 * whose first element is element `first` of the array, into `out`
 * (capacity out_cap >= raw bytes of the chunk) and returns the coded length;
 * a return equal to the raw length means the chunk is stored raw. */
size_t fze_chunk_encode(const fze_chain *c, fz_dtype t, const void *in,
                        size_t n, uint64_t first, uint8_t *out, fze_scratch *s);
int fze_chunk_decode(const fze_chain *c, fz_dtype t, const uint8_t *in,
                     size_t in_len, size_t n, uint64_t first, void *out,
                     fze_scratch *s);

/* Stages (stage_*.c).  Word streams are little-endian arrays of `w`-byte
 * words; byte streams are plain bytes. */
/* The varints of side lists and stream lengths (LEB128: 7 bits a byte, low
 * bits first, at most 5 bytes).  fze_get_varint reads one at p[*k] (len
 * bytes in all), advances *k, and refuses one that runs past len or past
 * 5 bytes; the 5th byte's bits may reach past 32. */
size_t fze_put_varint(uint8_t *p, uint64_t v);
bool fze_get_varint(const uint8_t *p, size_t len, size_t *k, uint64_t *out);
/* Indices in a side list are u16 in chunks of fewer than 65536 elements,
 * u32 from there on (only version-3 chunks are that large). */
static inline unsigned fze_side_index_width(size_t n) { return n < 65536 ? 2u : 4u; }
/* The parts of a side list, parsed (stage_quant.c). */
typedef struct fze_side_view {
  size_t m;             /* outliers */
  const uint8_t *idx;   /* their indices */
  const uint8_t *vals;  /* their raw values */
  size_t r;             /* fill runs */
  const uint8_t *runs;  /* a start and a length each */
  size_t len;           /* bytes of the whole list */
} fze_side_view;
int fze_quant_read_side(const uint8_t *side, size_t len, size_t n, unsigned w,
                        bool has_fill, fze_side_view *sv);
size_t fze_quant_write_side(uint8_t *side, const uint32_t *idx, size_t m,
                            const uint8_t *in, unsigned w, bool has_fill,
                            const uint32_t (*runs)[2], size_t r, unsigned iw);
size_t fze_side_index(const uint8_t *p, unsigned iw);
uint64_t fze_quant_fill_bits(const fze_stage *st, fz_dtype t);
size_t fze_quant_fill_runs(const fze_stage *st, fz_dtype t, const void *in, size_t n,
                           void *codes, uint8_t *bad, uint32_t (*runs)[2]);
size_t fze_quant_gather(const uint8_t *bad, size_t n, uint32_t *idx);
/* quant fused with interp (stage_interp.c): the same side list and words
 * as quant, each word the bin of the value's difference from its
 * interpolation from values already rebuilt. */
/* A guess at the interpolation's residual price (as fze_lorenzo_cost()
 * would give it) from the values themselves, for every FZE_GUESS_STEP-th
 * of them in each row; words: room for n / 5 + 1 words of the dtype's width.  *outl:
 * how many of the sampled values would be outliers. */
uint64_t fze_interp_guess(const fze_stage *q, const fze_stage *ip, fz_dtype t, const void *in,
                          size_t n, uint64_t first, void *words, size_t *outl);
/* The interpolation stage ip interpolating along the k fastest of its
 * pdims axes only (version 6's FZE_PK_DIMS | k, k < pdims), each slice
 * across the slower ones its own walk; k = pdims: ip itself. */
static inline fze_stage fze_interp_on(const fze_stage *ip, unsigned k) {
  fze_stage iq = *ip;
  iq.flat = (uint8_t)fzo_interp_flat(k, ip->pdims);
  return iq;
}
/* codec.c: the axes the interpolation runs along for a chunk (format
 * version 6: the stage's D, or its D - 1 fastest where the guess is lower,
 * FZE_PK_DIMS), and
 * the lower guess, priced as lorenzo's price of the chunk is (16.16 bits,
 * the sampled outliers as side-list entries).  words: as
 * fze_interp_guess's. */
unsigned fze_interp_dims(const fze_stage *q, const fze_stage *ip, fz_dtype t, const void *in,
                         size_t n, uint64_t first, void *words, uint64_t *guess);
size_t fze_interp_encode(const fze_stage *q, const fze_stage *ip, fz_dtype t,
                         const void *in, size_t n, uint64_t first, void *codes,
                         uint8_t *side, void *work);
int fze_interp_decode(const fze_stage *q, const fze_stage *ip, fz_dtype t,
                      const void *codes, size_t n, uint64_t first, const uint8_t *side,
                      size_t side_len, void *out, void *work);
/* work: room for n u32 indices, n flags, n/2 + 1 runs of two u32 and n
 * doubles. */
size_t fze_quant_work_bytes(size_t n);
size_t fze_quant_encode(const fze_stage *st, fz_dtype t, const void *in,
                        size_t n, void *codes, uint8_t *side, void *work);
/* Length of the side list at the front of a coded chunk, or a negative code. */
long fze_quant_side_len(const fze_stage *st, const uint8_t *side, size_t len, size_t n,
                        unsigned w);
int fze_quant_decode(const fze_stage *st, fz_dtype t, const void *codes,
                     size_t n, const uint8_t *side, size_t side_len,
                     void *out);
void fze_diff_encode(const fze_stage *st, unsigned w, const void *in, void *out,
                     size_t n);
/* in may equal out (in place). */
void fze_diff_decode(const fze_stage *st, unsigned w, const void *in, void *out,
                     size_t n);
size_t fze_bitshuffle_bytes(unsigned w, size_t n);
void fze_bitshuffle_encode(unsigned w, const void *words, size_t n, uint8_t *out);
void fze_bitshuffle_decode(unsigned w, const uint8_t *in, size_t n, void *words);
size_t fze_rze_encode(unsigned levels, const uint8_t *in, size_t n, uint8_t *out,
                      uint8_t *tmp);
int fze_rze_decode(unsigned levels, const uint8_t *in, size_t in_len,
                   uint8_t *out, size_t n, uint8_t *tmp);
size_t fze_bitpack_encode(unsigned w, const void *words, size_t n, uint8_t *out);
/* lorenzo (stage_lorenzo.c): the chunk of n words starting at element
 * `first` of the array, predicted in k dimensions (1..pdims); decode may
 * run in place (in == out).  fze_lorenzo_cost() estimates the bits the
 * residuals cost (integers only), by which the encoder picks k. */
void fze_lorenzo_encode(const fze_stage *st, unsigned k, unsigned w, const void *in,
                        void *out, size_t n, uint64_t first);
void fze_lorenzo_decode(const fze_stage *st, unsigned k, unsigned w, const void *in,
                        void *out, size_t n, uint64_t first);
uint64_t fze_lorenzo_cost(unsigned w, const void *res, size_t n);
/* fze_lorenzo_cost() of fze_lorenzo_encode()'s residuals in k dims, from
 * the words, making only the residuals the price samples. */
uint64_t fze_lorenzo_price(const fze_stage *st, unsigned k, unsigned w, const void *words,
                           size_t n, uint64_t first);
/* The same price of every one of n words (not a sample). */
uint64_t fze_words_cost(unsigned w, const void *words, size_t n);
/* huffman (stage_huffman.c), with lv the huffman stage's (fze_huffman_lv):
 * 0, streams in FZE_HUFF_FORM_BITS only; 1 (version 7), each stream in the
 * form that codes it shorter (BITS on a tie), named in it.  At most
 * out_cap bytes; returns the length, or SIZE_MAX when the code would not
 * fit (the chunk is then stored raw).  tmp: FZE_HUFFMAN_TMP bytes plus 4
 * bytes a word. */
#define FZE_HUFFMAN_TMP 131072u
size_t fze_huffman_encode(unsigned form, unsigned w, const void *words, size_t n, uint8_t *out,
                          size_t out_cap, uint8_t *tmp);
/* The bits fze_huffman_encode's stream of the n words takes before its
 * lanes are rounded up to whole bytes: the price the encoder compares
 * predictors by.  tmp as fze_huffman_encode's. */
uint64_t fze_huffman_price(unsigned form, unsigned w, const void *words, size_t n,
                           uint8_t *tmp);
/* tmp: FZE_HUFFMAN_TMP bytes (aligned for u64: the decoding tables). */
int fze_huffman_decode(unsigned form, unsigned w, const uint8_t *in, size_t in_len, void *words,
                       size_t n, uint8_t *tmp);
/* The lv of a chain's huffman stage; 0 when it has none. */
unsigned fze_huffman_lv(const fze_chain *c);
/* The code lengths fze_huffman_encode gives nsym (at most 4096) symbols of
 * frequencies freq, at least one of them not 0: at most 12 bits, 0 for an
 * unused symbol.  tmp: FZE_HUFFMAN_TMP bytes. */
void fze_huffman_lengths(const uint32_t *freq, unsigned nsym, uint8_t *len, uint8_t *tmp);
int fze_bitpack_decode(unsigned w, const uint8_t *in, size_t in_len,
                       void *words, size_t n);
/* byteplanes (stage_byteplanes.c): each byte plane of the n words coded by
 * fze_huffman_encode() on bytes, kept as is where that is not shorter, or
 * left out when it is all zero.  out: room for n w + 5 w bytes; the length
 * returned may reach n w + w (the codec then stores the chunk raw).  tmp:
 * FZE_BYTEPLANES_TOKENS(n) + n bytes (the huffman coder's work space and
 * one plane). */
#define FZE_BYTEPLANES_TOKENS(n) (FZE_HUFFMAN_TMP + 4 * (size_t)(n) + 128)
size_t fze_byteplanes_encode(unsigned w, const void *words, size_t n, uint8_t *out,
                             uint8_t *tmp);
/* tmp: FZE_HUFFMAN_TMP + n bytes, aligned for u64. */
int fze_byteplanes_decode(unsigned w, const uint8_t *in, size_t in_len, void *words, size_t n,
                          uint8_t *tmp);

/* AVX2 twins of the hottest loops (simd_avx2.c) and the switch that selects
 * them: on when the CPU has AVX2; tests turn it off to compare. */
bool fze_have_avx2(void);
void fze_set_avx2(bool on);
void fze_quant_f32_avx2(const float *x, size_t n, double inv, double step,
                        double e, uint32_t *c, uint8_t *bad);
void fze_bitshuffle32_avx2(const uint8_t *in, size_t n32, size_t pb, uint8_t *out);
void fze_bitunshuffle32_avx2(const uint8_t *in, size_t n32, size_t pb, uint8_t *out);
void fze_minmax_f32_avx2(const float *x, size_t n, float *lo, float *hi);
size_t fze_zero_elim_avx2(const uint8_t *in, size_t n, uint8_t *bm, uint8_t *kept);
void fze_diff_decode32_avx2(const uint32_t *in, uint32_t *out, size_t n, int nega);
size_t fze_zero_restore_avx2(const uint8_t *bm, const uint8_t *kept, size_t avail,
                             size_t n, uint8_t *out, size_t *k_out);
void fze_pack_planes32_avx2(const uint32_t *r, unsigned bits, uint8_t *out);
void fze_unpack_planes32_avx2(const uint8_t *in, unsigned bits, uint32_t *r);
/* The interpolation's finest level, f32 (stage_interp.c's point() four at
 * a time): the points i, i + 2, ... (at most cnt) of one row, predicted by
 * the cubic of pv at -/+off and -/+3 off; stops before a group that would
 * read outside 0 .. n - 1 or (decoding, exact not NULL) holds a value
 * already known.  The points' words are at codes, cs apart: 2 in memory
 * order (codes then points at word i), 1 in the walk's (format version 5:
 * one after another).  Returns the points done, a multiple of 4. */
size_t fze_interp_dec_f32_avx2(const uint32_t *codes, unsigned cs, float *out, double *pv,
                               const uint8_t *exact, size_t n, size_t i, size_t cnt, size_t off,
                               double step);
size_t fze_interp_enc_f32_avx2(const float *x, uint32_t *codes, unsigned cs, uint8_t *bad,
                               double *pv, size_t n, size_t i, size_t cnt, size_t off, double inv,
                               double step, double e);

/* Quantizer set-up: resolves eb_abs and step for one job from the data.
 * Returns 0, or FZ_EBOUND when the bound derived from the data (REL: eb
 * times a finite value range) is beyond FZE_EB_ABS_MAX, with the values
 * quoted in `why`: its step would overflow and the decoder refuse the
 * archive, so it is never written.  A range that itself overflows (f64 data
 * spanning more than the largest double) leaves the stage lossless, as
 * before. */
int fze_quant_resolve(fze_stage *st, fz_dtype t, const void *in, size_t n,
                      char *why, size_t why_len);
/* Its REL part on a known range is fze_quant_check_range (fze_chain.h). */
/* Whether the resolved eb, eb_abs and step of a quant stage are ones the
 * decoder accepts (the archive parser's check, shared with the encoder). */
bool fze_quant_params_ok(const fze_stage *st, fz_dtype t);

/* Doubles from this magnitude up round to infinity as floats (FLT_MAX plus
 * half its unit in the last place), so no f32 fill value is that large. */
#define FZE_F32_FILL_LIMIT 0x1.ffffffp+127

/* The largest absolute bound the quantizer takes: half the largest double,
 * so that bins of width up to 2 * eb_abs stay finite. */
#define FZE_EB_ABS_MAX 0x1.fffffffffffffp+1022

#endif
