/*
 * ratio_gpu.h - the host's view of the ratio preset's decoding kernel
 * (ratio_decode.cu): the parameters of one launch and the scratch it
 * needs.  gpu_decode.c fills them from the archive's header after the
 * table's scan has given every chunk its offset.
 */
#ifndef FZK_RATIO_GPU_H
#define FZK_RATIO_GPU_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fzr_params {
  const uint8_t *pay;
  uint64_t pay_len;
  const uint64_t *offs;  /* the scan's chunk offsets */
  const uint32_t *sizes; /* the chunk table, copied to 4-byte alignment */
  uint64_t raw_bytes, nchunks;
  uint32_t cb, w, levels, pdims, pwrel;
  double step;
  uint64_t ext[3][3];
  uint8_t *scratch; /* fzr_scratch_bytes() */
  void *out;
  uint32_t *status, *crcs;
  const uint32_t *crc_tab;
} fzr_params;

/* Device scratch of a decode: about 3.5 times the chunk size per chunk,
 * for at most 4 GiB worth of chunks (launched in turn beyond that). */
uint64_t fzr_scratch_bytes(uint32_t cb, uint64_t nchunks);
int fzr_launch_decode(const fzr_params *p, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
