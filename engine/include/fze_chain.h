/*
 * fze_chain.h - the stage chain as the CPU engine and its GPU backend both
 * read it (host code only).
 *
 * The engine parses chain texts and archive headers into these structs;
 * the GPU backend (kernels/) builds its plans and decoders from them and
 * calls the few engine functions declared here.  Everything else of the
 * engine is private to engine/src.
 */
#ifndef FZE_CHAIN_H
#define FZE_CHAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fz.h"
#include "fz_contract.h"

typedef struct fze_stage {
  uint8_t id;     /* fze_stage_id */
  uint8_t mode;   /* quant: fz_eb_mode; diff: fze_diff_map */
  uint8_t levels; /* rze: number of elimination levels */
  uint8_t pdims;  /* lorenzo: dimensions predicted in (1..3); 0 in a
                     chain text that leaves it to the job's shape */
  bool has_eb;    /* quant: eb given in the chain text */
  bool has_mode;  /* quant: mode given in the chain text */
  bool has_fill;  /* quant: a fill value is set (chain text or job) */
  double eb;      /* quant: the user's bound (in its mode) */
  double fill;    /* quant: values bit-equal to it (for f32: to
                     (float)fill) are outliers, kept exactly, and left
                     out of the value range of REL */
  /* Resolved per job by the compressor and stored in the archive: */
  double eb_abs;      /* quant: absolute bound enforced; 0 = lossless */
  double step;        /* quant: bin width (abs/rel) or bit step (pwrel) */
  uint8_t lv;         /* interp: its form by format version: 0 in versions
                         3 and 4; 1 in 5 (words by level, finer bins on
                         coarser levels); 2 from 6 on (5's, and a chunk
                         may interpolate on fewer dims: FZE_PK_DIMS).
                         huffman: 0 before version 7 (every stream in
                         FZE_HUFF_FORM_BITS), 1 from it (each stream
                         names its form) */
  uint8_t flat;       /* interp, per chunk (FZE_PK_DIMS): the leading axes
                         of its walk that are not interpolated, each slice
                         across them walked on its own (0 to 2) */
  uint64_t ext[3][3]; /* lorenzo: ext[k-1], the array's extents folded
                         into k dimensions, as 3 (slowest first, leading
                         1s), for every k up to pdims */
} fze_stage;

typedef struct fze_chain {
  unsigned n;
  fze_stage st[FZE_MAX_STAGES];
} fze_chain;

/* chain.c */
int fze_chain_parse(const char *text, fze_chain *out, char *why, size_t why_len);
int fze_chain_check(const fze_chain *c, fz_dtype t, char *why, size_t why_len);
void fze_chain_format(const fze_chain *c, char *buf, size_t len);
bool fze_chain_has_quant(const fze_chain *c);
bool fze_chain_has_ratio(const fze_chain *c);
/* Resolves the lorenzo stages of a chain for an array of ndims dims: a
 * stage without pdims takes min(3, ndims); every stage's extents are the
 * dims folded into pdims dimensions (the leading ones multiplied into the
 * slowest).  FZ_EPIPELINE, quoted in why, for pdims above ndims. */
int fze_chain_resolve_shape(fze_chain *c, unsigned ndims, const uint64_t *dims, char *why,
                            size_t why_len);

/* util */
void fze_why(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
uint32_t fze_crc32c(uint32_t crc, const void *p, size_t n);
/* The shortest text that reads back as v ("1e-05", not
 * "1.0000000000000001e-05"), for messages: fze_num(x).s in an argument
 * list lives until the call returns. */
typedef struct fze_numtext {
  char s[32];
} fze_numtext;
fze_numtext fze_num(double v);
/* The REL part of fze_quant_resolve()'s check, on the range [lo, hi] of the
 * finite values (not fill) of the data: FZ_EBOUND, quoted in `why`, when eb
 * times the range is beyond FZE_EB_ABS_MAX.  The GPU backend, which finds
 * the range on the device, makes the same check with it. */
int fze_quant_check_range(const fze_stage *st, double lo, double hi, char *why, size_t why_len);

#endif
