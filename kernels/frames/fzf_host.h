/*
 * fzf_host.h - the host side of the GPU frames decoder that needs no CUDA:
 * the cut as order keys, the mask as bits, the matrix with the mask folded
 * in, and the messages of the reason codes.  The plan (frames_gpu.c) and
 * the CPU models (tests/gpu_frames) both use these, so what a model proves
 * about the device logic holds for the inputs the plan gives it.
 */
#ifndef FZF_HOST_H
#define FZF_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "fz_frames.h"
#include "fzf_dev.h"

/* Writes a reason to why when why is not NULL. */
void fzf_say(char *why, size_t why_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* npixels mask bytes (nonzero = used) as bits, padded with 16 zero bytes;
 * NULL when out of memory. */
uint8_t *fzf_mask_bits(const uint8_t *mask, size_t npixels);

/* A CSR matrix with the entries of unused pixels dropped (the engine's
 * fz_frames_create does the same), in arrays of its own. */
typedef struct fzf_csr {
  size_t nrows, nnz;
  uint64_t *indptr;
  uint32_t *cols;
  float *wf;
  int32_t *wi;
} fzf_csr;

/* Checks and folds m; FZ_EINVAL / FZ_EDTYPE / FZ_ENOMEM with a reason. */
int fzf_csr_fold(const fz_frames_csr *m, const uint8_t *active, size_t npixels, fz_dtype dtype,
                 fzf_csr *out, char *why, size_t why_len);
void fzf_csr_free(fzf_csr *c);

/* The fz_errno code of a status word (0 for FZF_STATUS_OK), and its
 * message: the reason, and the block it names. */
int fzf_status_code(uint64_t status);
void fzf_status_text(uint64_t status, char *why, size_t why_len);

#endif
