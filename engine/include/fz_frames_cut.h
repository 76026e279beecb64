/*
 * fz_frames_cut.h - the cut of detector frames as order keys: the part of
 * the frames contract that the CPU engine (engine/src/frames.c) and the GPU
 * decoder (kernels/frames) must compute alike, so that both list exactly
 * the same pixels.  The inline functions are device-safe (host and device
 * under nvcc); fz_frames_cut_of runs on the host and is the engine's.
 */
#ifndef FZ_FRAMES_CUT_H
#define FZ_FRAMES_CUT_H

#include <stdint.h>

#include "fz.h"

#if defined(__CUDACC__)
#define FZ_FRAMES_HD static __host__ __device__ __forceinline__
#else
#define FZ_FRAMES_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* How a dtype's raw bits are ordered. */
enum { FZ_FRAMES_UNSIGNED, FZ_FRAMES_SIGNED, FZ_FRAMES_FLOAT };
/* A cut that no pixel passes, that every used pixel passes, or a key test. */
enum { FZ_FRAMES_CUT_NONE, FZ_FRAMES_CUT_ALL, FZ_FRAMES_CUT_KEY };

/* Pixels whose key is above k (and, for floats, not above kinf: the
 * positive NaNs) are above the cut. */
typedef struct fz_frames_cut {
  int mode;
  uint64_t k, kinf;
} fz_frames_cut;

/* The kind of a dtype's bits. */
FZ_FRAMES_HD int fz_frames_kind(fz_dtype t) {
  switch (t) {
  case FZ_I8:
  case FZ_I16:
  case FZ_I32:
  case FZ_I64: return FZ_FRAMES_SIGNED;
  case FZ_F32:
  case FZ_F64: return FZ_FRAMES_FLOAT;
  default: return FZ_FRAMES_UNSIGNED;
  }
}

/* The raw bits x of a w-byte value made to sort as unsigned integers in
 * the dtype's own order. */
FZ_FRAMES_HD uint64_t fz_frames_order_key(uint64_t x, unsigned w, int kind) {
  uint64_t all = w == 8 ? ~0ull : (1ull << (8 * w)) - 1, sign = 1ull << (8 * w - 1);
  if (kind == FZ_FRAMES_SIGNED)
    return x ^ sign;
  if (kind == FZ_FRAMES_FLOAT)
    return x & sign ? ~x & all : x | sign;
  return x;
}

/* value > cut, as numpy compares the dtype with a double, as a key test on
 * w-byte values of the given kind; a NaN cut passes nothing. */
fz_frames_cut fz_frames_cut_of(double cut, unsigned w, int kind);

#ifdef __cplusplus
}
#endif

#endif /* FZ_FRAMES_CUT_H */
