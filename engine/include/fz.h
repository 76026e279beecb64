/*
 * fz.h - the fzd compression engine: error-bounded lossy and lossless
 * compression of scientific arrays on independent fixed-size chunks.
 *
 * This header is the whole public API of libfzengine; anything it does not
 * declare is private and may change.  A compression job is described by
 * fz_params (data type, shape, pipeline, error bound), finalized into an
 * fz_plan, and run any number of times on inputs of that shape.  Archives are
 * self-describing (docs/format.md): fz_decompress() needs nothing but the
 * archive bytes.
 *
 * Every fallible call returns an int: >= 0 on success, a negative fz_errno
 * code (fz_error.h) on failure.  Calls that can fail for a reason worth
 * explaining take a `why` buffer that receives a one-line message (it may be
 * NULL).  No call prints, exits or aborts.
 */
#ifndef FZ_H
#define FZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fz_error.h"
#include "fz_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FZ_VERSION_MAJOR, _MINOR, _PATCH and _STRING come from fz_version.h. */
#define FZ_VERSION_HEX                                                         \
  ((FZ_VERSION_MAJOR << 16) | (FZ_VERSION_MINOR << 8) | FZ_VERSION_PATCH)

/* The run-time version of the engine, as FZ_VERSION_HEX. */
unsigned fz_version(void);

#define FZ_MAX_DIMS 4

/* Element types.  The values are stored in archives: never renumber. */
typedef enum fz_dtype {
  FZ_U8 = 1,
  FZ_I8 = 2,
  FZ_U16 = 3,
  FZ_I16 = 4,
  FZ_U32 = 5,
  FZ_I32 = 6,
  FZ_U64 = 7,
  FZ_I64 = 8,
  FZ_F32 = 9,
  FZ_F64 = 10
} fz_dtype;

/* Size in bytes of one element; 0 for an unknown type. */
size_t fz_dtype_size(fz_dtype t);
/* "f32", "i16", ...; NULL for an unknown type. */
const char *fz_dtype_name(fz_dtype t);
/* Parses "f32", "float32", "f8", "<f4", "int16", ...; FZ_EDTYPE if unknown. */
int fz_dtype_parse(const char *text, fz_dtype *out);

/* Error-bound modes.  ABS: |x - x'| <= eb.  REL: |x - x'| <= eb * (max - min)
 * over the finite values of the input.  PWREL: |x - x'| <= eb * |x|.  The
 * values are stored in archives: never renumber. */
typedef enum fz_eb_mode { FZ_EB_ABS = 0, FZ_EB_REL = 1, FZ_EB_PWREL = 2 } fz_eb_mode;

/* "abs", "rel", "pwrel"; NULL for an unknown mode. */
const char *fz_eb_mode_name(fz_eb_mode m);
int fz_eb_mode_parse(const char *text, fz_eb_mode *out);

/* The bound of a job and the one a chain may spell (quant(eb=...,mode=...))
 * are one bound: a quant stage that names no eb or mode takes the job's; a
 * job with eb > 0 whose chain names a different eb or mode is refused
 * (FZ_EPIPELINE, both quoted); a job's bound is eb with eb_mode, whose
 * default rel counts as given.  eb 0 means the job gives no bound, and then
 * eb_mode does not count either: the chain's bound stands, with the job's
 * mode where the chain names none.  The fill value follows the same rule. */
typedef struct fz_params {
  fz_dtype dtype;
  unsigned ndims;               /* 1..FZ_MAX_DIMS */
  uint64_t dims[FZ_MAX_DIMS];   /* slowest-varying first, as in numpy */
  const char *pipeline;         /* preset name or chain text; NULL: "balanced" */
  double eb;                    /* bound of quant stages that name none; 0: none */
  fz_eb_mode eb_mode;           /* mode of quant stages that name none */
  unsigned threads;             /* CPU threads for one call; 0 means 1 */
  unsigned chunk_bytes;         /* input bytes per chunk; 0: the chain's default */
  /* A fill value (netCDF's _FillValue: pass the variable's attribute): when
   * has_fill is nonzero, the values bit-equal to fill_value (for f32, to
   * (float)fill_value) are kept exactly and left out of the value range of
   * REL.  It must be finite and, for f32, a float's magnitude or 0.  Placed
   * last so that initialisers of the fields above keep working. */
  int has_fill;
  double fill_value;
} fz_params;

/* Chunk sizes: a power of two from FZ_CHUNK_MIN to FZ_CHUNK_MAX, default
 * FZ_CHUNK_DEFAULT.  Chains with the ratio stages (lorenzo, huffman: the
 * "ratio" preset) take chunks up to FZ_CHUNK_RATIO_MAX and default to
 * FZ_CHUNK_RATIO_DEFAULT, so that a chunk spans enough rows and planes of
 * the array for N-dimensional prediction (docs/format.md, version 3). */
#define FZ_CHUNK_DEFAULT 16384u
#define FZ_CHUNK_MIN 4096u
#define FZ_CHUNK_MAX 32768u
#define FZ_CHUNK_RATIO_DEFAULT 262144u
#define FZ_CHUNK_RATIO_MAX 1048576u

/* Fills p with defaults: f32, 0 dims, "balanced", eb 0 (so a lossy pipeline
 * must be given a bound, by the job or by its chain), REL, 1 thread, chunk
 * size 0 (the chain's default), no fill value. */
void fz_params_init(fz_params *p);

/* ---- presets and pipelines ------------------------------------------------ */

typedef struct fz_preset {
  const char *name;        /* "fast", "balanced", "ratio", "lossless",
                              "lossless-ratio" */
  const char *chain;       /* the chain it stands for */
  const char *description; /* one line */
} fz_preset;

/* The built-in presets; *count receives their number.  Static storage. */
const fz_preset *fz_presets(size_t *count);

/* ---- plans ---------------------------------------------------------------- */

typedef struct fz_plan fz_plan;

/* Validates p (shape, dtype, pipeline text, bound) and finalizes a plan.  A
 * malformed pipeline gives FZ_EPIPELINE with the offending token in `why`;
 * so does a quantizing chain that ends without a coder (rze or bitpack),
 * which could only store its chunks raw.  A bound the quantizer cannot take gives
 * FZ_EBOUND with the value and the accepted range: abs and rel 0 < eb <=
 * 8.988465674311579e+307 (half the largest double), pwrel 0 < eb < 1. */
int fz_plan_create(const fz_params *p, fz_plan **out, char *why, size_t why_len);
void fz_plan_destroy(fz_plan *plan); /* NULL is a harmless no-op */

/* Bytes of input the plan expects (product of dims times element size). */
size_t fz_plan_input_bytes(const fz_plan *plan);
/* An upper bound on the archive size for any input of the plan's shape. */
size_t fz_plan_compress_bound(const fz_plan *plan);
/* The canonical text of the plan's chain, with every parameter spelled out
 * ("quant(eb=0.001,mode=rel) | diff(map=zigzag) | ..."); static per plan. */
const char *fz_plan_chain(const fz_plan *plan);
/* Bytes of memory the plan holds for its whole life (its work buffers and
 * chunk tables, which grow with the shape and the threads), so that a cache
 * of plans can keep them under a budget. */
size_t fz_plan_workspace_bytes(const fz_plan *plan);

/* Compresses in_len bytes (which must equal fz_plan_input_bytes()) into out.
 * FZ_ESIZE on a wrong input length, FZ_ENOSPC when out_cap is below what this
 * archive needs (fz_plan_compress_bound() is always enough), FZ_EBOUND when
 * a REL bound times the data's value range exceeds that same largest bound
 * (fz_plan_error() says so with the values).  A plan may be used by one
 * thread at a time. */
int fz_plan_compress(fz_plan *plan, const void *in, size_t in_len, void *out,
                     size_t out_cap, size_t *out_len);
/* Why the last fz_plan_compress() on this plan failed, when the code alone
 * does not say it; "" otherwise.  Valid until the next call on the plan. */
const char *fz_plan_error(const fz_plan *plan);

/* ---- archives ------------------------------------------------------------- */

typedef struct fz_archive_info {
  fz_dtype dtype;
  unsigned ndims;
  uint64_t dims[FZ_MAX_DIMS];
  uint64_t raw_bytes;     /* size of the decompressed data */
  uint64_t archive_bytes; /* size of the whole archive */
  uint64_t chunks;
  double eb_abs;          /* the absolute bound actually enforced; 0 lossless */
  char chain[256];        /* canonical chain text */
  /* The quant stage's fill value, when it has one (also in chain, as
   * fill=...): what a reader restores as the variable's _FillValue. */
  int has_fill;
  double fill_value;
} fz_archive_info;

/* Reads and fully validates the header of an archive (magic, version,
 * structure, header checksum, total length).  Does not touch the payload. */
int fz_archive_inspect(const void *arc, size_t arc_len, fz_archive_info *info);

/* Decompresses an archive into out (out_cap >= info.raw_bytes).  Every length
 * and offset is checked before use; a corrupt or truncated archive gives
 * FZ_ECORRUPT, FZ_ETRUNC, FZ_EFORMAT or FZ_EVERSION and leaves no
 * out-of-bounds access behind. */
int fz_decompress(const void *arc, size_t arc_len, void *out, size_t out_cap,
                  size_t *out_len, unsigned threads);

/* ---- verification --------------------------------------------------------- */

typedef struct fz_compare_result {
  double max_abs_error;    /* over values finite in both */
  double max_rel_error;    /* max |x-x'|/|x| over finite nonzero x */
  double value_range;      /* max - min of the finite values of a */
  uint64_t nonfinite_mismatches; /* NaN/Inf/-0.0/denormal not bit-exact */
} fz_compare_result;

/* Compares original a with reconstruction b, n elements of type t. */
int fz_compare(fz_dtype t, const void *a, const void *b, size_t n,
               fz_compare_result *res);


/* ---- streaming: groups of chunks (stream.c) -------------------------------
 *
 * For data that lives in files and need not fit in memory.  Chunks are
 * independent, so a compression can run one window of whole chunks at a
 * time and a decompression one group of chunks at a time, each in memory
 * bounded by the window.  The archive an encoder makes is byte for byte the
 * one fz_plan_compress() makes for the same input.  Encoders and decoders
 * are used by one thread at a time. */

typedef struct fz_encoder fz_encoder;

/* An encoder for one compression with plan's shape, chain and bound (the
 * plan may be destroyed or reused afterwards: the encoder copies what it
 * needs).  Use it in three passes:
 *   1. when fz_encoder_needs_scan(), feed the whole input through
 *      fz_encoder_scan() in pieces of whole elements, in order (an ABS or
 *      REL bound is resolved from the input's finite value range);
 *   2. encode every chunk in order with fz_encoder_encode();
 *   3. fz_encoder_finish() writes the header (chunk table and checksums),
 *      which belongs at offset 0, before the payload, which starts at
 *      fz_encoder_header_len(). */
int fz_encoder_create(const fz_plan *plan, fz_encoder **out);
void fz_encoder_destroy(fz_encoder *enc); /* NULL is a harmless no-op */
bool fz_encoder_needs_scan(const fz_encoder *enc);
size_t fz_encoder_header_len(const fz_encoder *enc);
size_t fz_encoder_chunk_bytes(const fz_encoder *enc);
uint64_t fz_encoder_chunks(const fz_encoder *enc);
int fz_encoder_scan(fz_encoder *enc, const void *in, size_t len);
/* The absolute bound enforced (0 when lossless); ends the scan pass.  When
 * the range makes the bound one the quantizer cannot take (REL: eb times
 * the range beyond the largest absolute bound), fz_encoder_encode() then
 * answers FZ_EBOUND and fz_encoder_error() says why, as fz_plan_compress()
 * and fz_plan_error() do. */
double fz_encoder_eb_abs(fz_encoder *enc);
/* Why the encoder refused the input ("" when it did not); static per
 * encoder. */
const char *fz_encoder_error(const fz_encoder *enc);
/* Encodes the chunks starting at chunk `first` (the next one not yet
 * encoded) whose input is the in_len bytes at in: a whole number of chunks,
 * or the rest of the input.  Their coded bytes go to out back to back
 * (*out_len in all, never more than in_len: out_cap >= in_len is enough;
 * FZ_ENOSPC below that).  FZ_EINVAL for chunks out of order, FZ_ESIZE for a
 * length that is not whole chunks. */
int fz_encoder_encode(fz_encoder *enc, uint64_t first, const void *in, size_t in_len,
                      void *out, size_t out_cap, size_t *out_len);
/* Decodes the coded bytes of already encoded chunks starting at `first`, as
 * fz_encoder_encode() gave them, into out (their raw bytes): the check
 * behind a verified compression, one window at a time. */
int fz_encoder_check(fz_encoder *enc, uint64_t first, const void *coded, size_t coded_len,
                     void *out, size_t out_cap);
/* Once every chunk is encoded: writes the header into hdr (hdr_cap >=
 * fz_encoder_header_len()) and gives the archive's total length. */
int fz_encoder_finish(fz_encoder *enc, void *hdr, size_t hdr_cap, uint64_t *arc_len);

typedef struct fz_decoder fz_decoder;

/* The bytes of an archive's start that always tell the header's length. */
#define FZ_ARCHIVE_PREFIX_MAX 320u

/* The length of an archive's header (magic to header CRC, where the payload
 * starts), from its first prefix_len bytes: at least FZ_ARCHIVE_PREFIX_MAX,
 * or the whole archive of arc_len bytes when it is shorter.  Validates what
 * those bytes hold, as fz_archive_inspect() does. */
int fz_archive_header_len(const void *prefix, size_t prefix_len, uint64_t arc_len,
                          size_t *header_len);
/* A decoder for an archive of arc_len bytes whose header_len bytes of header
 * (at least fz_archive_header_len()) are at head; validates the header as
 * fz_archive_inspect() does (the header is copied). */
int fz_decoder_create(const void *head, size_t head_len, uint64_t arc_len,
                      fz_decoder **out);
void fz_decoder_destroy(fz_decoder *dec); /* NULL is a harmless no-op */
int fz_decoder_info(const fz_decoder *dec, fz_archive_info *info);
/* Names the next group of chunks, at most max_raw raw bytes of them (at
 * least one chunk): their stored bytes are the *stored bytes at archive
 * offset *offset, decoding to *raw bytes (which follow the previous groups'
 * in the output).  Returns the number of chunks, 0 when all are decoded. */
uint64_t fz_decoder_next(fz_decoder *dec, size_t max_raw, uint64_t *offset,
                         size_t *stored, size_t *raw);
/* Decodes the group fz_decoder_next() named from its stored bytes in into
 * out (out_cap >= its raw bytes).  A corrupt chunk gives FZ_ECORRUPT (or
 * another archive error) and the decoder must not be used further. */
int fz_decoder_decode(fz_decoder *dec, const void *in, size_t in_len, void *out,
                      size_t out_cap);
/* After the last group: FZ_ECORRUPT when the payload checksum disagrees (a
 * chunk's bytes changed), FZ_EINVAL when chunks are left. */
int fz_decoder_finish(const fz_decoder *dec);

/* The canonical text of a pipeline (a preset name or chain text; NULL is
 * "balanced") with every stage parameter spelled out and the bound left as
 * the text gave it: two texts with the same canonical text make the same
 * plan for the same job parameters.  FZ_EPIPELINE as fz_plan_create();
 * FZ_ENOSPC when the text does not fit len bytes. */
int fz_pipeline_canonical(const char *pipeline, char *buf, size_t len, char *why,
                          size_t why_len);

#ifdef __cplusplus
}
#endif
#endif /* FZ_H */
