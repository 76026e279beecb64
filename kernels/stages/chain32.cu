/*
 * chain32.cu - the ahead-of-time kernels for chains on 4-byte words (f32,
 * and u32 / i32 without quant) of the form [quant] [diff] coder, the coder
 * bitpack, bitshuffle | rze or rze, and their launchers.  The device code
 * is chain32_ops.cuh, which the run-time code generation compiles too.
 *
 * The presets' kernels (`fast`: bitpack; `balanced`, `lossless`:
 * [diff] bitshuffle | rze) fix the quantizer and the coder, and read diff,
 * its map and rze's levels from the descriptor.  The other chains, diff
 * before bitpack and rze on the words, have one kernel per direction and
 * coder that reads the quantizer too, so that the build grows by four
 * kernels only; a generated kernel fixes every constant.  The launchers
 * and the layout hand a descriptor of 8-byte words to chain64.cu.
 */
#include <cuda_runtime.h>

#include "chain32_ops.cuh"
#include "launch.h"

extern "C" void fzk_desc_layout32(fzk_desc *d) {
  if (d->w == 8) {
    fzk_desc_layout64(d);
    return;
  }
  uint32_t cb = d->cb, nbm = 4 * nbmax32(cb);
  uint32_t tb = 0, len = cb / 8;
  for (unsigned l = 1; l <= FZE_RZE_MAX_LEVELS; l++, len = (len + 7) / 8)
    tb += a16(len + 1);
  uint32_t e = a16(cb + 32 * 16 + 16) + a16(cb + 48) + 4 * FZK_WT_WORDS;
  d->smem_e32 = d->k32 >= FZK_C32_SHUF_RZE ? e + tb : e;
  uint32_t dd = a16(cb + 48) + nbm + 4 * FZK_WT_WORDS + 4096;
  d->smem_d32 = d->k32 >= FZK_C32_SHUF_RZE ? dd + r1_bytes(cb) + 2 * a16(cb / 64 + 16)
                : d->k32diff                ? dd + e_bytes(cb)
                                            : dd;
}

template <int QK, int CK>
__global__ void __launch_bounds__(FZK_NT, FZK_ENC32_BLOCKS)
fzk_enc32_kernel(fzk_desc d, const uint8_t *__restrict__ d_in, const fzk_qparams *__restrict__ d_qp,
                 uint8_t *__restrict__ d_out, uint64_t out_cap, uint64_t header_len,
                 uint64_t table_off, uint32_t *__restrict__ d_crcs, fzk_u64 *__restrict__ lb,
                 const uint32_t *__restrict__ d_tab) {
  constexpr bool bp = CK == FZK_C32_BITPACK;
  fzk_enc32_body<QK, CK, bp ? 0 : FZK_RT, bp ? 0 : FZK_RT, bp ? 0 : FZK_RT>(
      d, d_in, d_qp, d_out, out_cap, header_len, table_off, d_crcs, lb, d_tab);
}

template <int QK, int CK>
__global__ void __launch_bounds__(FZK_NT, FZK_DEC32_BLOCKS)
fzk_dec32_kernel(fzk_desc d, const uint8_t *__restrict__ d_pay, uint64_t pay_len,
                 const uint64_t *__restrict__ d_offs, const uint8_t *__restrict__ d_sizes16,
                 const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out, int out_vec,
                 uint32_t *__restrict__ d_status, uint32_t *__restrict__ d_crcs,
                 const uint32_t *__restrict__ d_tab) {
  constexpr bool bp = CK == FZK_C32_BITPACK;
  fzk_dec32_body<QK, CK, bp ? 0 : FZK_RT, bp ? 0 : FZK_RT, bp ? 0 : FZK_RT>(
      d, d_pay, pay_len, d_offs, d_sizes16, d_qp, d_out, out_vec, d_status, d_crcs, d_tab);
}

/* The user chains' kernels: everything but the coder read at run time. */
template <int CK>
__global__ void __launch_bounds__(FZK_NT, FZK_ENC32_BLOCKS)
fzk_enc32_any(fzk_desc d, const uint8_t *__restrict__ d_in, const fzk_qparams *__restrict__ d_qp,
              uint8_t *__restrict__ d_out, uint64_t out_cap, uint64_t header_len,
              uint64_t table_off, uint32_t *__restrict__ d_crcs, fzk_u64 *__restrict__ lb,
              const uint32_t *__restrict__ d_tab) {
  constexpr bool bp = CK == FZK_C32_BITPACK;
  fzk_enc32_body<FZK_RT, CK, bp ? 1 : FZK_RT, FZK_RT, bp ? 0 : FZK_RT>(
      d, d_in, d_qp, d_out, out_cap, header_len, table_off, d_crcs, lb, d_tab);
}

template <int CK>
__global__ void __launch_bounds__(FZK_NT, FZK_DEC32_BLOCKS)
fzk_dec32_any(fzk_desc d, const uint8_t *__restrict__ d_pay, uint64_t pay_len,
              const uint64_t *__restrict__ d_offs, const uint8_t *__restrict__ d_sizes16,
              const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out, int out_vec,
              uint32_t *__restrict__ d_status, uint32_t *__restrict__ d_crcs,
              const uint32_t *__restrict__ d_tab) {
  constexpr bool bp = CK == FZK_C32_BITPACK;
  fzk_dec32_body<FZK_RT, CK, bp ? 1 : FZK_RT, FZK_RT, bp ? 0 : FZK_RT>(
      d, d_pay, pay_len, d_offs, d_sizes16, d_qp, d_out, out_vec, d_status, d_crcs, d_tab);
}

/* The kernels built: the presets' [quantizer kind][bitpack], then diff
 * before bitpack, and rze on words. */
typedef void (*fzk_enc32_fn)(fzk_desc, const uint8_t *, const fzk_qparams *, uint8_t *, uint64_t,
                             uint64_t, uint64_t, uint32_t *, fzk_u64 *, const uint32_t *);
typedef void (*fzk_dec32_fn)(fzk_desc, const uint8_t *, uint64_t, const uint64_t *,
                             const uint8_t *, const fzk_qparams *, uint8_t *, int, uint32_t *,
                             uint32_t *, const uint32_t *);
static const fzk_enc32_fn fzk_enc32[3][2] = {
    {fzk_enc32_kernel<FZK_Q_NONE, FZK_C32_SHUF_RZE>, fzk_enc32_kernel<FZK_Q_NONE, FZK_C32_BITPACK>},
    {fzk_enc32_kernel<FZK_Q_BINS, FZK_C32_SHUF_RZE>, fzk_enc32_kernel<FZK_Q_BINS, FZK_C32_BITPACK>},
    {fzk_enc32_kernel<FZK_Q_PW, FZK_C32_SHUF_RZE>, fzk_enc32_kernel<FZK_Q_PW, FZK_C32_BITPACK>}};
static const fzk_dec32_fn fzk_dec32[3][2] = {
    {fzk_dec32_kernel<FZK_Q_NONE, FZK_C32_SHUF_RZE>, fzk_dec32_kernel<FZK_Q_NONE, FZK_C32_BITPACK>},
    {fzk_dec32_kernel<FZK_Q_BINS, FZK_C32_SHUF_RZE>, fzk_dec32_kernel<FZK_Q_BINS, FZK_C32_BITPACK>},
    {fzk_dec32_kernel<FZK_Q_PW, FZK_C32_SHUF_RZE>, fzk_dec32_kernel<FZK_Q_PW, FZK_C32_BITPACK>}};
static const fzk_enc32_fn fzk_enc32u[2] = {fzk_enc32_any<FZK_C32_BITPACK>,
                                           fzk_enc32_any<FZK_C32_RZE>};
static const fzk_dec32_fn fzk_dec32u[2] = {fzk_dec32_any<FZK_C32_BITPACK>,
                                           fzk_dec32_any<FZK_C32_RZE>};

static fzk_enc32_fn fzk_enc32_for(const fzk_desc *d) {
  if (d->k32 == FZK_C32_RZE || (d->k32 == FZK_C32_BITPACK && d->k32diff))
    return fzk_enc32u[d->k32 == FZK_C32_RZE];
  return fzk_enc32[fzk_qkind32(*d)][d->k32 == FZK_C32_BITPACK];
}

static fzk_dec32_fn fzk_dec32_for(const fzk_desc *d) {
  if (d->k32 == FZK_C32_RZE || (d->k32 == FZK_C32_BITPACK && d->k32diff))
    return fzk_dec32u[d->k32 == FZK_C32_RZE];
  return fzk_dec32[fzk_qkind32(*d)][d->k32 == FZK_C32_BITPACK];
}

extern "C" int fzk_launch_encode32(const fzk_desc *d, const void *d_in, const fzk_qparams *d_qp,
                                   uint8_t *d_out, uint64_t out_cap, uint64_t header_len,
                                   uint64_t table_off, uint32_t *d_crcs, uint64_t *d_lb,
                                   const uint32_t *d_tab, fz_gpu_stream s) {
  if (d->w == 8)
    return fzk_launch_encode64(d, d_in, d_qp, d_out, out_cap, header_len, table_off, d_crcs,
                               d_lb, d_tab, s);
  if (d->nchunks == 0)
    return 0;
  fzk_enc32_for(d)<<<(unsigned)d->nchunks, FZK_NT, d->smem_e32, s>>>(
      *d, (const uint8_t *)d_in, d_qp, d_out, out_cap, header_len, table_off, d_crcs,
      (fzk_u64 *)d_lb, d_tab);
  return (int)cudaGetLastError();
}

extern "C" int fzk_launch_decode32(const fzk_desc *d, const uint8_t *d_pay, uint64_t pay_len,
                                   const uint64_t *d_offs, const uint8_t *d_sizes16, const fzk_qparams *d_qp,
                                   void *d_out, int out_vec, uint32_t *d_status, uint32_t *d_crcs,
                                   const uint32_t *d_tab, fz_gpu_stream s) {
  if (d->w == 8)
    return fzk_launch_decode64(d, d_pay, pay_len, d_offs, d_sizes16, d_qp, d_out, out_vec,
                               d_status, d_crcs, d_tab, s);
  if (d->nchunks == 0)
    return 0;
  fzk_dec32_for(d)<<<(unsigned)d->nchunks, FZK_NT, d->smem_d32, s>>>(
      *d, d_pay, pay_len, d_offs, d_sizes16, d_qp, (uint8_t *)d_out, out_vec, d_status, d_crcs,
      d_tab);
  return (int)cudaGetLastError();
}

/* Enables the largest layout of the chunk size for every kernel built: the
 * rze chains', or for bitpack after diff its own; and the 8-byte word
 * kernels' (chain64.cu), whatever the words of d. */
extern "C" int fzk_kernels32_init(const fzk_desc *d) {
  fzk_desc m = *d;
  m.w = 4;
  m.k32 = FZK_C32_SHUF_RZE;
  fzk_desc_layout32(&m);
  cudaError_t e = cudaSuccess;
  for (unsigned k = 0; k < 3 && e == cudaSuccess; k++) {
    for (unsigned b = 0; b < 2 && e == cudaSuccess; b++) {
      e = cudaFuncSetAttribute(fzk_enc32[k][b], cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)m.smem_e32);
      if (e == cudaSuccess)
        e = cudaFuncSetAttribute(fzk_dec32[k][b], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)m.smem_d32);
    }
  }
  fzk_desc bd = m;
  bd.k32 = FZK_C32_BITPACK;
  bd.k32diff = 1;
  fzk_desc_layout32(&bd);
  for (unsigned b = 0; b < 2 && e == cudaSuccess; b++) {
    uint32_t dmax = b == 0 && bd.smem_d32 > m.smem_d32 ? bd.smem_d32 : m.smem_d32;
    e = cudaFuncSetAttribute(fzk_enc32u[b], cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)m.smem_e32);
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(fzk_dec32u[b], cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)dmax);
  }
  if (e == cudaSuccess)
    e = (cudaError_t)fzk_kernels64_init(d);
  return (int)e;
}
