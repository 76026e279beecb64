/*
 * fz_contract.h - the contract between the CPU reference and the GPU.
 *
 * The CPU engine (engine/) and the CUDA backend (kernels/) must write
 * byte-identical archives and read each other's.  Every number both sides
 * must agree on for that is defined here, once: the stage numbers written
 * in archives, the limits the parsers enforce, the Huffman alphabet, and the
 * sampling steps and margin by which the ratio encoders choose a predictor.
 * Change one and the archives of both backends change together; write one
 * of them again anywhere else and they can silently diverge (a ctest test,
 * kernels/check_layout.py, greps for such copies).
 *
 * The per-element arithmetic both sides share is in ops.h, next to this
 * file; fze_chain.h and archive.h are the parsed chain and archive header
 * the GPU backend builds on.  They sit in engine/include, beside the
 * public API, so that every build of the engine finds them (CMake's, the
 * Python package's, the plain one of docs/hdf5.md); none of them is
 * installed.  This header is also compiled by NVRTC for the kernels generated at
 * run time, so it holds macros and enums only: no C library.
 */
#ifndef FZ_CONTRACT_H
#define FZ_CONTRACT_H

/* Stages in a chain, and the rze stage's elimination levels. */
#define FZE_MAX_STAGES 8
#define FZE_RZE_MAX_LEVELS 6
/* Words per block of the bitpack stage. */
#define FZE_BITPACK_BLOCK 32

/* The stage numbers written in archives (docs/format.md). */
typedef enum fze_stage_id {
  FZE_STAGE_QUANT = 1,
  FZE_STAGE_DIFF = 2,
  FZE_STAGE_BITSHUFFLE = 3,
  FZE_STAGE_RZE = 4,
  FZE_STAGE_BITPACK = 5,
  FZE_STAGE_LORENZO = 6,
  FZE_STAGE_HUFFMAN = 7,
  FZE_STAGE_INTERP = 8,
  FZE_STAGE_BYTEPLANES = 9
} fze_stage_id;

/* The diff stage's maps of a signed difference to an unsigned word. */
typedef enum fze_diff_map { FZE_MAP_ZIGZAG = 0, FZE_MAP_NEGABINARY = 1 } fze_diff_map;

/* The huffman stage: symbols of the alphabet (words below the escape, the
 * escape and the zero runs) and the longest code, in bits. */
#define FZE_HUFF_SYMS 4096u
#define FZE_HUFF_MAX_LEN 12u
/* The interleaved streams of a huffman-coded chunk, and the run symbols
 * (runs of 2, 4, ... 2^15 zero words) at the top of the alphabet. */
#define FZE_HUFF_LANES 32u
#define FZE_HUFF_RUNS 15u
/* The largest mean code length (bits) at which a chunk is decoded two
 * symbols at a time: both decoders take the same path on the same chunk,
 * so a corrupt chunk is refused by the same check. */
#define FZE_HUFF_PAIR_SPREAD 8u
/* How a huffman stream codes a run of r zero words (its form).  BITS: a
 * symbol E + j for each set bit j >= 1 of r, highest first, then symbol 0
 * when r is odd.  CLASS: symbol 0 when r is 1, else symbol E + j for
 * j = floor(log2 r) followed by r's j low bits, raw.  Every stream of
 * versions 3 to 6 and every byteplanes plane is BITS; from version 7 the
 * huffman stage's streams name their form (the top bit of their E word),
 * the encoder taking the shorter. */
#define FZE_HUFF_FORM_BITS 0u
#define FZE_HUFF_FORM_CLASS 1u

/* quant | interp chooses per chunk between the interpolation and lorenzo
 * by price (codec.c encode_predicted).  Lorenzo's residuals are priced on
 * every FZE_COST_STEP-th word, and the interpolation's is first guessed
 * from every FZE_GUESS_STEP-th value of each row.  Where lorenzo's
 * sampled price is a bit a word or more (FZE_PRICE_CHEAP false), lorenzo
 * is taken without running the interpolation where its price times
 * FZE_GUESS_MARGIN_NUM is below the guess times FZE_GUESS_MARGIN_DEN, and
 * the two are compared by their sampled prices.  Below a bit a word the
 * interpolation is skipped only where lorenzo's price times
 * FZE_GUESS_WIDE is below the guess, and the two are compared by the
 * huffman stage's exact bits. */
#define FZE_COST_STEP 5u
/* The price's residuals below FZE_COST_DIRECT are symbols of their own,
 * larger ones one symbol per bit length. */
#define FZE_COST_DIRECT 64u
#define FZE_GUESS_STEP 17u
#define FZE_GUESS_MARGIN_NUM 50u
#define FZE_GUESS_MARGIN_DEN 49u
#define FZE_GUESS_WIDE 4u
/* cost: lorenzo's sampled price (16.16 bits) of a chunk of n words. */
#define FZE_PRICE_CHEAP(cost, n) ((cost)*FZE_COST_STEP < ((uint64_t)(n) << 16))
/* cost: lorenzo's price with its side list; g: the guess's. */
#define FZE_GUESS_SKIPS(cost, g, cheap)                                                            \
  ((cheap) ? (cost)*FZE_GUESS_WIDE < (g) : (cost)*FZE_GUESS_MARGIN_NUM < (g)*FZE_GUESS_MARGIN_DEN)
/* Format version 6: a chunk's predictor byte FZE_PK_DIMS | k (1 <= k <
 * the stage's dims D) is the interpolation along the k fastest of its D
 * axes only, each slice across the slower ones (a plane, a row) its own
 * walk.  The encoder guesses the interpolation's price on D and on D - 1
 * axes (fze_interp_guess) and walks the lower, D on a tie. */
#define FZE_PK_DIMS 0x80u
/* The interpolation's coarsest spacing: its top level predicts every 16th
 * point from its neighbours 16 apart. */
#define FZE_INTERP_TOP 16u

#endif
