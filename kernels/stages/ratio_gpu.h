/*
 * ratio_gpu.h - the host's view of the ratio preset's kernels (ratio.cu),
 * which code the lossless-ratio preset's chain too:
 * the decoder, which gpu_decode.c fills from the archive's header after the
 * table's scan has given every chunk its offset, and the encoder, which
 * gpu_plan.c runs between the prep kernel (the quantizer's parameters) and
 * the seal (the checksums).  Each launcher takes the kernels' functions as
 * NVRTC compiled them (fzk_jit_ratio), or NULL for the built-in ones.
 */
#ifndef FZK_RATIO_GPU_H
#define FZK_RATIO_GPU_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

struct fzk_kern;
/* The kernels' places in the fzk_kern of fzk_jit_ratio. */
enum {
  FZR_K_DECODE,
  FZR_K_ENCODE,
  FZR_K_PLACE,
  FZR_K_DECODE_PLANES, /* lorenzo | byteplanes */
  FZR_K_ENCODE_PLANES,
  FZR_K_COUNT
};

typedef struct fzr_params {
  const uint8_t *pay;
  uint64_t pay_len;
  const uint64_t *offs;  /* the scan's chunk offsets */
  const uint32_t *sizes; /* the chunk table, copied to 4-byte alignment */
  uint64_t raw_bytes, nchunks;
  uint32_t cb, w, levels, pdims, lorenzo, planes, pwrel, lv, hform;
  double step;
  uint64_t ext[3][3];
  uint64_t slots;   /* blocks of the launch (fzr_dec_slots, fzre_enc_slots) */
  uint8_t *scratch; /* fzr_scratch_bytes(cb, slots) */
  uint64_t *ticket; /* 8 bytes of device memory the launch zeroes and counts in */
  void *out;
  uint32_t *status, *crcs;
  const uint32_t *crc_tab;
} fzr_params;

/* The blocks of a decoding or an encoding launch, each looping over the
 * chunks in a slot of scratch of its own: as many as a GPU of nsm
 * multiprocessors holds at once, never more than there are chunks. */
uint64_t fzr_dec_slots(uint64_t nchunks, unsigned nsm);
uint64_t fzre_enc_slots(uint64_t nchunks, unsigned nsm);

/* Device scratch of a decode: about 3.5 times the chunk size per slot. */
uint64_t fzr_scratch_bytes(uint32_t cb, uint64_t slots);
int fzr_launch_decode(const struct fzk_kern *k, const fzr_params *p, cudaStream_t s);

/* The encoder's launch: chunk i of the array at in is
 * coded into stage + i * cb, its length into sizes[i], its CRC-32C into
 * crcs[i]; qp points at the prep kernel's eb_abs and step. */
typedef struct fzre_params {
  const uint8_t *in;
  uint64_t raw_bytes, nchunks;
  uint32_t cb, w, levels, pdims, lorenzo, planes, pwrel, lv, hform;
  const double *qp; /* NULL without quant (planes) */
  uint64_t ext[3][3];
  uint64_t slots;   /* blocks of the launch (fzr_dec_slots, fzre_enc_slots) */
  uint8_t *scratch; /* fzre_scratch_bytes(cb, w, levels, slots) */
  uint64_t *ticket; /* 8 bytes of device memory the launch zeroes and counts in */
  uint8_t *stage;   /* nchunks * cb */
  uint32_t *sizes, *crcs;
  const uint32_t *crc_tab;
} fzre_params;

/* The chains both kernels take: quant | interp | huffman | rze on f32 or
 * f64 values, or lorenzo in interp's place (a fill value is refused
 * before; gpu_decode.c), and lorenzo | byteplanes on 4- and 8-byte words
 * (the lossless-ratio preset; 1- and 2-byte words are left to the CPU
 * engine). */
struct fze_header;
int fzk_ratio_chain(const struct fze_header *h);

/* What the kernels take of such a chain: rze's levels (0: none), the
 * predictor's dims and folded extents (ext[k - 1] for k dims), whether it
 * is lorenzo (not interp), whether the chain is lorenzo | byteplanes,
 * quant's PWREL and bin width (0: none, or lossless), interp's and
 * huffman's forms (their stages' lv). */
typedef struct fzk_ratio_form {
  uint32_t levels, pdims, lorenzo, planes, pwrel, lv, hform;
  double step;
  const uint64_t (*ext)[3];
} fzk_ratio_form;
fzk_ratio_form fzk_ratio_form_of(const struct fze_header *h);

/* Device scratch of an encode: about ten times the chunk size per slot. */
uint64_t fzre_scratch_bytes(uint32_t cb, uint32_t w, uint32_t levels, uint64_t slots);
int fzre_launch_encode(const struct fzk_kern *k, const fzre_params *p, cudaStream_t s);
/* The staged chunks to the archive at header_len + offs[i] (nothing at or
 * beyond out_cap), their lengths to the u32 table at table_off. */
int fzre_launch_place(const struct fzk_kern *k, const uint8_t *stage, const uint32_t *sizes,
                      const uint64_t *offs, uint64_t nchunks, uint32_t cb, uint8_t *out,
                      uint64_t out_cap, uint64_t header_len, uint64_t table_off,
                      cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
