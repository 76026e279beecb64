/*
 * dtype.c - names of element types and error-bound modes, the presets, and
 * parameter defaults: the small vocabulary shared by every caller.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

unsigned fz_version(void) { return FZ_VERSION_HEX; }

static const struct {
  fz_dtype t;
  size_t size;
  const char *name;
  const char *aliases[4]; /* numpy and C spellings */
} dtypes[] = {
    {FZ_U8, 1, "u8", {"uint8", "|u1", "u1", NULL}},
    {FZ_I8, 1, "i8", {"int8", "|i1", "i1", NULL}},
    {FZ_U16, 2, "u16", {"uint16", "<u2", "u2", NULL}},
    {FZ_I16, 2, "i16", {"int16", "<i2", "i2", NULL}},
    {FZ_U32, 4, "u32", {"uint32", "<u4", "u4", NULL}},
    {FZ_I32, 4, "i32", {"int32", "<i4", "i4", NULL}},
    {FZ_U64, 8, "u64", {"uint64", "<u8", NULL, NULL}},
    {FZ_I64, 8, "i64", {"int64", "<i8", NULL, NULL}},
    {FZ_F32, 4, "f32", {"float32", "<f4", "f4", "float"}},
    {FZ_F64, 8, "f64", {"float64", "<f8", "f8", "double"}},
};
#define NDTYPES (sizeof dtypes / sizeof dtypes[0])

size_t fz_dtype_size(fz_dtype t) {
  for (size_t i = 0; i < NDTYPES; i++)
    if (dtypes[i].t == t)
      return dtypes[i].size;
  return 0;
}

const char *fz_dtype_name(fz_dtype t) {
  for (size_t i = 0; i < NDTYPES; i++)
    if (dtypes[i].t == t)
      return dtypes[i].name;
  return NULL;
}

int fz_dtype_parse(const char *text, fz_dtype *out) {
  if (text == NULL || out == NULL)
    return FZ_EINVAL;
  for (size_t i = 0; i < NDTYPES; i++) {
    if (strcmp(text, dtypes[i].name) == 0)
      return *out = dtypes[i].t, 0;
    for (size_t a = 0; a < 4 && dtypes[i].aliases[a]; a++)
      if (strcmp(text, dtypes[i].aliases[a]) == 0)
        return *out = dtypes[i].t, 0;
  }
  return FZ_EDTYPE;
}

bool fze_dtype_is_float(fz_dtype t) { return t == FZ_F32 || t == FZ_F64; }

static const char *const mode_names[] = {"abs", "rel", "pwrel"};

const char *fz_eb_mode_name(fz_eb_mode m) {
  return (unsigned)m < 3 ? mode_names[m] : NULL;
}

int fz_eb_mode_parse(const char *text, fz_eb_mode *out) {
  if (text == NULL || out == NULL)
    return FZ_EINVAL;
  for (unsigned i = 0; i < 3; i++)
    if (strcmp(text, mode_names[i]) == 0)
      return *out = (fz_eb_mode)i, 0;
  return FZ_EBOUND;
}

static const fz_preset presets[] = {
    {"fast", "quant | bitpack",
     "throughput first (cuSZp class): per-32-value block prediction and "
     "fixed-length bit-plane packing"},
    {"balanced", "quant | diff | bitshuffle | rze",
     "ratio and speed (PFPL class): difference, bit shuffle, recursive "
     "zero-byte elimination"},
    {"ratio", "quant | interp | huffman | rze",
     "ratio first (SZ3 class): interpolation or N-D Lorenzo per chunk, "
     "canonical Huffman, zero-byte elimination"},
    {"lossless", "diff | bitshuffle | rze",
     "bit-exact for any fixed-width type"},
    {"lossless-ratio", "lorenzo | byteplanes",
     "bit-exact for any fixed-width type, ratio first: N-D Lorenzo per chunk, "
     "each byte plane Huffman-coded"},
};

const fz_preset *fz_presets(size_t *count) {
  if (count)
    *count = sizeof presets / sizeof presets[0];
  return presets;
}

void fz_params_init(fz_params *p) {
  memset(p, 0, sizeof *p);
  p->dtype = FZ_F32;
  p->pipeline = "balanced";
  p->eb_mode = FZ_EB_REL;
  p->threads = 1;
  p->chunk_bytes = 0;
}

fze_numtext fze_num(double v) {
  fze_numtext t;
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(t.s, sizeof t.s, "%.*g", prec, v);
    if (strtod(t.s, NULL) == v)
      break;
  }
  return t;
}

void fze_why(char *why, size_t len, const char *fmt, ...) {
  if (why == NULL || len == 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, len, fmt, ap);
  va_end(ap);
}
