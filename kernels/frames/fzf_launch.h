/*
 * fzf_launch.h - what the host side of the GPU frames decoder
 * (frames_gpu.c) hands the kernels (frames_kernels.cu): one batch's device
 * pointers and sizes, by value.
 */
#ifndef FZF_LAUNCH_H
#define FZF_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "fzf_dev.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fzf_batch_dev {
  uint32_t nframes;
  unsigned w;
  uint64_t npixels;
  uint32_t max_block_bytes, warps_per_block;
  const uint8_t *chunks; /* chunk f at chunks + offsets[f] */
  const uint64_t *offsets, *lengths;
  uint32_t *starts; /* starts_stride entries a frame */
  uint64_t starts_stride;
  fzf_walk *walks;
  uint32_t *item_base;             /* nframes + 1 */
  uint32_t *item_count, *item_off; /* one a block, and a tail, a frame */
  unsigned long long *status;      /* fzf_status words */
  unsigned long long *counts;
  uint8_t *dense;  /* nframes * npixels * w */
  int lists;       /* list the pixels above the cut */
  uint8_t *values; /* cap elements a frame */
  uint32_t *indices;
  uint64_t cap;
  double *powder_f64; /* nrows a frame */
  int64_t *powder_i64;
} fzf_batch_dev;

typedef struct fzf_csr_dev {
  uint64_t nrows;
  const uint64_t *indptr;
  const uint32_t *cols;
  const float *wf;
  const int32_t *wi;
} fzf_csr_dev;

/* Enqueues the batch's kernels on stream; returns a cudaError_t. */
int fzf_launch(const fzf_batch_dev *b, const fzf_frame_view *fv, const fzf_csr_dev *m,
               cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
