/*
 * chain_kernels.cu - the kernels of a GPU compression or decompression,
 * built ahead of time, and their launchers: the chunk coders that run a
 * chain's device ops (chain_body.cuh) with the chain read at run time, and
 * the kernels around them (helper_kernels.cuh).  A launcher runs the
 * generated kernel it is given in place of the built-in one: a chain's own
 * coder (jit_fn), or the context's table of helpers (fzk_kern) on a GPU
 * the built-in code cannot run on.
 *
 * Nothing here allocates or synchronises with the host; launchers return the
 * launch's cudaError_t.
 */
#include <cuda_runtime.h>

#include "chain_body.cuh"
#include "launch.h"
#include "helper_kernels.cuh"
#include "driver.h"

/* ---- shared memory layout ---- */

extern "C" void fzk_desc_layout(fzk_desc *d) {
  d->cap = fzk_align16(d->cb + 64);
  uint32_t rze = d->cap / 4 + 64, bp = 5 * (d->cb / 32 + 1) + 32;
  d->tcap = fzk_align16(rze > bp ? rze : bp);
  d->smem = 2 * d->cap + d->tcap + fzk_align16(d->cb / 32 + 16) + 8 * (FZK_NW + 2) + 4 * 16;
  fzk_desc_layout32(d);
}



/* ---- a compression's first kernel ---- */

extern "C" int fzk_launch_prep(const fzk_kern *k, const fzk_desc *d, const fzk_prep *p,
                               fz_gpu_stream s) {
  uint64_t want = p->range ? (p->n + FZK_NT * 8 - 1) / (FZK_NT * 8)
                           : (p->zero_words + FZK_NT * 4 - 1) / (FZK_NT * 4);
  unsigned g = want < FZK_MM_BLOCKS ? (unsigned)want : FZK_MM_BLOCKS;
  g = g ? g : 1;
  fzk_prep pv = *p;
  unsigned w = d->w;
  int vec = (uintptr_t)p->d_in % 16 == 0, f32 = d->fkind == 1;
  if (k != NULL) {
    void *args[] = {&pv, &w, &vec, &f32};
    return fzk_driver_launch(k->fn[FZK_K_PREP], g, FZK_NT, 0, s, args);
  }
  fzk_prep_kernel<<<g, FZK_NT, 0, s>>>(pv, w, vec, f32);
  return (int)cudaGetLastError();
}

/* ---- the chunk coders (chain_body.cuh), with the chain read at run time ---- */

__global__ void __launch_bounds__(FZK_NT)
fzk_encode_kernel(fzk_desc d, const uint8_t *__restrict__ d_in, int in_vec,
                  const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_stage,
                  uint32_t *__restrict__ d_sizes) {
  fzk_encode_chunk(d, d_in, in_vec, d_qp, d_stage, d_sizes, fzk_fwd_interp());
}

extern "C" int fzk_launch_encode(const fzk_desc *d, void *jit_fn, const void *d_in, int in_vec,
                                 const fzk_qparams *d_qp, uint8_t *d_stage, uint32_t *d_sizes,
                                 fz_gpu_stream s) {
  if (d->nchunks == 0)
    return 0;
  if (jit_fn != NULL) {
    fzk_desc dv = *d;
    const uint8_t *in = (const uint8_t *)d_in;
    void *args[] = {&dv, &in, &in_vec, &d_qp, &d_stage, &d_sizes};
    return fzk_driver_launch(jit_fn, (unsigned)d->nchunks, FZK_NT, d->smem, s, args);
  }
  fzk_encode_kernel<<<(unsigned)d->nchunks, FZK_NT, d->smem, s>>>(
      *d, (const uint8_t *)d_in, in_vec, d_qp, d_stage, d_sizes);
  return (int)cudaGetLastError();
}

__global__ void __launch_bounds__(FZK_NT)
fzk_decode_kernel(fzk_desc d, const uint8_t *__restrict__ d_pay, uint64_t pay_len,
                  const uint64_t *__restrict__ d_offs, const uint8_t *__restrict__ d_sizes16,
                  const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out, int out_vec,
                  uint32_t *__restrict__ d_status) {
  fzk_decode_chunk(d, d_pay, pay_len, d_offs, d_sizes16, d_qp, d_out, out_vec, d_status,
                   fzk_inv_interp());
}


extern "C" int fzk_launch_decode(const fzk_desc *d, void *jit_fn, const uint8_t *d_pay,
                                 uint64_t pay_len, const uint64_t *d_offs,
                                 const uint8_t *d_sizes16, const fzk_qparams *d_qp, void *d_out,
                                 int out_vec, uint32_t *d_status, fz_gpu_stream s) {
  if (d->nchunks == 0)
    return 0;
  if (jit_fn != NULL) {
    fzk_desc dv = *d;
    uint8_t *out = (uint8_t *)d_out;
    void *args[] = {&dv, &d_pay, &pay_len, &d_offs, &d_sizes16, &d_qp, &out, &out_vec, &d_status};
    return fzk_driver_launch(jit_fn, (unsigned)d->nchunks, FZK_NT, d->smem, s, args);
  }
  fzk_decode_kernel<<<(unsigned)d->nchunks, FZK_NT, d->smem, s>>>(
      *d, d_pay, pay_len, d_offs, d_sizes16, d_qp, (uint8_t *)d_out, out_vec, d_status);
  return (int)cudaGetLastError();
}

/* ---- prefix sums of chunk sizes ---- */

extern "C" uint64_t fzk_scan_blocks(uint64_t n) { return (n + FZK_SCAN_TILE - 1) / FZK_SCAN_TILE; }

extern "C" int fzk_launch_scan(const fzk_kern *k, uint64_t n, const uint32_t *d_sizes32,
                               const uint8_t *d_sizes16, uint64_t *d_bsum, uint64_t *d_offs,
                               const fzk_table_check *chk, fz_gpu_stream s) {
  uint32_t *status = chk ? chk->d_status : NULL;
  uint64_t pay_len = chk ? chk->pay_len : 0;
  fzk_table_check c = chk ? *chk : fzk_table_check{NULL, 0, 0, 0};
  uint64_t nb = fzk_scan_blocks(n);
  int zero = 0, one = 1;
  if (k != NULL) {
    if (n == 0) {
      void *za[] = {&d_offs, &status, &pay_len};
      return fzk_driver_launch(k->fn[FZK_K_ZERO], 1, 1, 0, s, za);
    }
    void *a0[] = {&n, &d_sizes32, &d_sizes16, &d_bsum, &d_offs, &zero, &c};
    void *top[] = {&nb, &d_bsum};
    void *a1[] = {&n, &d_sizes32, &d_sizes16, &d_bsum, &d_offs, &one, &c};
    int e = fzk_driver_launch(k->fn[FZK_K_SCAN], (unsigned)nb, FZK_NT, 0, s, a0);
    if (e == 0)
      e = fzk_driver_launch(k->fn[FZK_K_SCAN_TOP], 1, FZK_NT, 0, s, top);
    if (e == 0)
      e = fzk_driver_launch(k->fn[FZK_K_SCAN], (unsigned)nb, FZK_NT, 0, s, a1);
    return e;
  }
  if (n == 0) {
    fzk_zero_kernel<<<1, 1, 0, s>>>(d_offs, status, pay_len);
    return (int)cudaGetLastError();
  }
  fzk_scan_kernel<<<(unsigned)nb, FZK_NT, 0, s>>>(n, d_sizes32, d_sizes16, d_bsum, d_offs, 0, c);
  fzk_scan_top_kernel<<<1, FZK_NT, 0, s>>>(nb, d_bsum);
  fzk_scan_kernel<<<(unsigned)nb, FZK_NT, 0, s>>>(n, d_sizes32, d_sizes16, d_bsum, d_offs, 1, c);
  return (int)cudaGetLastError();
}

/* ---- placing chunks, chunk checksums ---- */

extern "C" int fzk_launch_place(const fzk_kern *k, const fzk_desc *d, const uint8_t *d_stage,
                                const uint32_t *d_sizes, const uint64_t *d_offs,
                                const uint32_t *d_tab, uint8_t *d_out, uint64_t out_cap,
                                uint64_t header_len, uint64_t table_off, uint32_t *d_crcs,
                                fz_gpu_stream s) {
  if (d->nchunks == 0)
    return 0;
  uint32_t cb = d->cb;
  if (k != NULL) {
    void *args[] = {&cb,     &d_stage,    &d_sizes,   &d_offs, &d_tab, &d_out,
                    &out_cap, &header_len, &table_off, &d_crcs};
    return fzk_driver_launch(k->fn[FZK_K_PLACE], (unsigned)d->nchunks, FZK_NT, fzk_place_smem(cb),
                          s, args);
  }
  fzk_place_kernel<<<(unsigned)d->nchunks, FZK_NT, fzk_place_smem(cb), s>>>(
      cb, d_stage, d_sizes, d_offs, d_tab, d_out, out_cap, header_len, table_off, d_crcs);
  return (int)cudaGetLastError();
}

extern "C" int fzk_launch_check(const fzk_kern *k, const fzk_desc *d, const uint8_t *d_pay,
                                uint64_t pay_len, const uint64_t *d_offs,
                                const uint8_t *d_sizes16, const uint32_t *d_tab, uint32_t *d_crcs,
                                fz_gpu_stream s) {
  if (d->nchunks == 0)
    return 0;
  uint32_t cb = d->cb;
  uint64_t raw = d->raw_bytes;
  if (k != NULL) {
    void *args[] = {&cb, &raw, &d_pay, &pay_len, &d_offs, &d_sizes16, &d_tab, &d_crcs};
    return fzk_driver_launch(k->fn[FZK_K_CHECK], (unsigned)d->nchunks, FZK_NT, fzk_place_smem(cb),
                          s, args);
  }
  fzk_check_kernel<<<(unsigned)d->nchunks, FZK_NT, fzk_place_smem(cb), s>>>(
      cb, raw, d_pay, pay_len, d_offs, d_sizes16, d_tab, d_crcs);
  return (int)cudaGetLastError();
}

/* ---- checksums of long buffers, a compression's last kernel ---- */

extern "C" uint64_t fzk_crc_parts(uint64_t len) { return fzk_crc_np(len) + 1; }

extern "C" int fzk_launch_crc(const fzk_kern *k, const uint8_t *d_p, uint64_t len,
                              uint32_t *d_parts, const uint32_t *d_tab, fzk_crc_use use,
                              fz_gpu_stream s) {
  uint64_t np = fzk_crc_np(len);
  unsigned g = np ? (unsigned)np : 1u;
  if (k != NULL) {
    void *args[] = {&d_p, &len, &d_parts, &d_tab, &use};
    return fzk_driver_launch(k->fn[FZK_K_CRC], g, FZK_NT, 0, s, args);
  }
  fzk_crc_kernel<<<g, FZK_NT, 0, s>>>(d_p, len, d_parts, d_tab, use);
  return (int)cudaGetLastError();
}

extern "C" int fzk_launch_dec_head(const fzk_kern *k, const fzk_dec_head *p,
                                   const uint32_t *d_tab, fz_gpu_stream s) {
  fzk_dec_head pv = *p;
  if (k != NULL) {
    void *args[] = {&pv, &d_tab};
    return fzk_driver_launch(k->fn[FZK_K_DEC_HEAD], 1, FZK_NT, 0, s, args);
  }
  fzk_dec_head_kernel<<<1, FZK_NT, 0, s>>>(pv, d_tab);
  return (int)cudaGetLastError();
}

extern "C" uint64_t fzk_seal_parts(uint64_t nchunks, uint64_t header_len) {
  return fzk_crc_np(4 * nchunks) + fzk_crc_np(header_len - 4);
}

extern "C" int fzk_launch_seal(const fzk_kern *k, const fzk_seal *p, const uint32_t *d_tab,
                               fz_gpu_stream s) {
  unsigned g = (unsigned)fzk_seal_parts(p->nchunks, p->header_len);
  fzk_seal pv = *p;
  if (k != NULL) {
    void *args[] = {&pv, &d_tab};
    return fzk_driver_launch(k->fn[FZK_K_SEAL], g, FZK_NT, 0, s, args);
  }
  fzk_seal_kernel<<<g, FZK_NT, 0, s>>>(pv, d_tab);
  return (int)cudaGetLastError();
}

extern "C" int fzk_kernels_init(const fzk_desc *d) {
  cudaError_t e = cudaFuncSetAttribute(fzk_encode_kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)d->smem);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(fzk_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)d->smem);
  if (e == cudaSuccess)
    e = (cudaError_t)fzk_kernels32_init(d);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(fzk_place_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)fzk_place_smem(d->cb));
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(fzk_check_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)fzk_place_smem(d->cb));
  return (int)e;
}

/* Whether this build's kernels can run on the current device: the runtime
 * finds no image (neither its SASS nor a PTX it can compile) for a GPU
 * older than the build's architecture. */
extern "C" int fzk_kernels_probe(void) {
  cudaFuncAttributes a;
  return (int)cudaFuncGetAttributes(&a, fzk_decode_kernel);
}
