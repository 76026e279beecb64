/*
 * chain64.cu - the ahead-of-time kernels for chains on 8-byte words (f64,
 * and u64 / i64 without quant) of the form [quant] [diff] bitshuffle |
 * rze, and their launchers.  The device code is chain64_ops.cuh, which the
 * run-time code generation compiles too.
 *
 * Two kernels per direction, which read diff, its map and rze's levels
 * from the descriptor: one for the uniform bins of ABS and REL (f64
 * `balanced`), one that reads the quantizer too, for `lossless` on 8-byte
 * words, PWREL and the user chains of that shape.  The first has its
 * quantizer fixed because the compiler then keeps more of the encoder in
 * registers.  The other coders of chain64_ops.cuh (bitpack, rze on the
 * words) are built here only with FZK_CHAIN64_ALL (the CMake option
 * FZ_CHAIN64_ALL, off by default to keep the build on two CI cores
 * short): one kernel per direction and coder that reads every constant.
 * Without it, their chains run on the generic kernels until the run-time
 * code generation builds them; a generated kernel fixes every constant.  fzk_launch_encode32 and fzk_launch_decode32 (chain32.cu) come
 * here for a descriptor of 8-byte words.
 */
#include <cuda_runtime.h>

#include "chain64_ops.cuh"
#include "launch.h"

extern "C" void fzk_desc_layout64(fzk_desc *d) {
  uint32_t cb = d->cb;
  uint32_t tb = 0, len = cb / 8;
  for (unsigned l = 1; l <= FZE_RZE_MAX_LEVELS; l++, len = (len + 7) / 8)
    tb += a16(len + 1);
  const bool bp = d->k32 == FZK_C32_BITPACK;
  d->smem_e32 = fzk_a64_bytes(cb) + a16(cb + 48) + 4 * FZK_WT_WORDS + (bp ? 0 : tb);
  uint32_t dd = a16(cb + 48) + fzk_obm64_bytes(cb) + a16(4 * FZK_WT64_WORDS) + 4096;
  d->smem_d32 = !bp           ? dd + r1_bytes(cb) + 2 * a16(cb / 64 + 16)
                : d->k32diff ? dd + fzk_e64_bytes(cb)
                             : dd;
}

/* Which coders have kernels here (bit k: FZK_C32_* k): bitshuffle | rze
 * always; bitpack and rze on the words when the build asks for them
 * (FZK_CHAIN64_ALL), else the run-time code generation builds them. */
#ifdef FZK_CHAIN64_ALL
#define FZK_C64_BUILT (1u << FZK_C32_SHUF_RZE | 1u << FZK_C32_BITPACK | 1u << FZK_C32_RZE)
#else
#define FZK_C64_BUILT (1u << FZK_C32_SHUF_RZE)
#endif
extern "C" unsigned fzk_chain64_coders(void) { return FZK_C64_BUILT; }

template <int QK, int CK>
__global__ void __launch_bounds__(FZK_NT, FZK_ENC64_BLOCKS)
fzk_enc64_kernel(fzk_desc d, const uint8_t *__restrict__ d_in, const fzk_qparams *__restrict__ d_qp,
              uint8_t *__restrict__ d_out, uint64_t out_cap, uint64_t header_len,
              uint64_t table_off, uint32_t *__restrict__ d_crcs, fzk_u64 *__restrict__ lb,
              const uint32_t *__restrict__ d_tab) {
  fzk_enc64_body<QK, CK, FZK_RT, FZK_RT, CK == FZK_C32_BITPACK ? 0 : FZK_RT>(
      d, d_in, d_qp, d_out, out_cap, header_len, table_off, d_crcs, lb, d_tab);
}

template <int QK, int CK>
__global__ void __launch_bounds__(FZK_NT, FZK_DEC64_BLOCKS)
fzk_dec64_kernel(fzk_desc d, const uint8_t *__restrict__ d_pay, uint64_t pay_len,
              const uint64_t *__restrict__ d_offs, const uint8_t *__restrict__ d_sizes16,
              const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out, int out_vec,
              uint32_t *__restrict__ d_status, uint32_t *__restrict__ d_crcs,
              const uint32_t *__restrict__ d_tab) {
  fzk_dec64_body<QK, CK, FZK_RT, FZK_RT, CK == FZK_C32_BITPACK ? 0 : FZK_RT>(
      d, d_pay, pay_len, d_offs, d_sizes16, d_qp, d_out, out_vec, d_status, d_crcs, d_tab);
}

typedef void (*fzk_enc64_fn)(fzk_desc, const uint8_t *, const fzk_qparams *, uint8_t *, uint64_t,
                             uint64_t, uint64_t, uint32_t *, fzk_u64 *, const uint32_t *);
typedef void (*fzk_dec64_fn)(fzk_desc, const uint8_t *, uint64_t, const uint64_t *,
                             const uint8_t *, const fzk_qparams *, uint8_t *, int, uint32_t *,
                             uint32_t *, const uint32_t *);
/* bitshuffle | rze with [0] uniform bins, [1] any quantizer; then
 * (FZK_CHAIN64_ALL) [2] bitpack, [3] rze, any quantizer. */
#ifdef FZK_CHAIN64_ALL
#define FZK_NK64 4
#else
#define FZK_NK64 2
#endif
static const fzk_enc64_fn fzk_enc64[FZK_NK64] = {
    fzk_enc64_kernel<FZK_Q_BINS, FZK_C32_SHUF_RZE>, fzk_enc64_kernel<FZK_RT, FZK_C32_SHUF_RZE>,
#ifdef FZK_CHAIN64_ALL
    fzk_enc64_kernel<FZK_RT, FZK_C32_BITPACK>, fzk_enc64_kernel<FZK_RT, FZK_C32_RZE>,
#endif
};
static const fzk_dec64_fn fzk_dec64[FZK_NK64] = {
    fzk_dec64_kernel<FZK_Q_BINS, FZK_C32_SHUF_RZE>, fzk_dec64_kernel<FZK_RT, FZK_C32_SHUF_RZE>,
#ifdef FZK_CHAIN64_ALL
    fzk_dec64_kernel<FZK_RT, FZK_C32_BITPACK>, fzk_dec64_kernel<FZK_RT, FZK_C32_RZE>,
#endif
};

/* fzk_desc_from_header selects a coder only where fzk_chain64_coders has
 * it. */
static unsigned fzk_kernel64_for(const fzk_desc *d) {
  if (d->k32 != FZK_C32_SHUF_RZE)
    return FZK_NK64 > 2 ? (d->k32 == FZK_C32_BITPACK ? 2u : 3u) : 1u;
  return fzk_qkind32(*d) != FZK_Q_BINS;
}

extern "C" int fzk_launch_encode64(const fzk_desc *d, const void *d_in, const fzk_qparams *d_qp,
                                   uint8_t *d_out, uint64_t out_cap, uint64_t header_len,
                                   uint64_t table_off, uint32_t *d_crcs, uint64_t *d_lb,
                                   const uint32_t *d_tab, fz_gpu_stream s) {
  if (d->nchunks == 0)
    return 0;
  fzk_enc64[fzk_kernel64_for(d)]<<<(unsigned)d->nchunks, FZK_NT, d->smem_e32, s>>>(
      *d, (const uint8_t *)d_in, d_qp, d_out, out_cap, header_len, table_off, d_crcs,
      (fzk_u64 *)d_lb, d_tab);
  return (int)cudaGetLastError();
}

extern "C" int fzk_launch_decode64(const fzk_desc *d, const uint8_t *d_pay, uint64_t pay_len,
                                   const uint64_t *d_offs, const uint8_t *d_sizes16, const fzk_qparams *d_qp,
                                   void *d_out, int out_vec, uint32_t *d_status, uint32_t *d_crcs,
                                   const uint32_t *d_tab, fz_gpu_stream s) {
  if (d->nchunks == 0)
    return 0;
  fzk_dec64[fzk_kernel64_for(d)]<<<(unsigned)d->nchunks, FZK_NT, d->smem_d32, s>>>(
      *d, d_pay, pay_len, d_offs, d_sizes16, d_qp, (uint8_t *)d_out, out_vec, d_status, d_crcs,
      d_tab);
  return (int)cudaGetLastError();
}

/* Enables the largest layout of the chunk size for every kernel built:
 * the rze coders', or for bitpack after diff its own. */
extern "C" int fzk_kernels64_init(const fzk_desc *d) {
  fzk_desc m = *d, b = *d;
  m.k32 = FZK_C32_SHUF_RZE;
  fzk_desc_layout64(&m);
  b.k32 = FZK_C32_BITPACK;
  b.k32diff = 1;
  fzk_desc_layout64(&b);
  const uint32_t se = m.smem_e32, sd = m.smem_d32 > b.smem_d32 ? m.smem_d32 : b.smem_d32;
  cudaError_t e = cudaSuccess;
  for (unsigned k = 0; k < FZK_NK64 && e == cudaSuccess; k++) {
    e = cudaFuncSetAttribute(fzk_enc64[k], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)se);
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(fzk_dec64[k], cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)sd);
  }
  return (int)e;
}
