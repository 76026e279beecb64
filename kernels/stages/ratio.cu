/*
 * ratio.cu - the host side of the ratio preset's kernels (ratio_kernels.cuh),
 * which code the lossless-ratio preset's chain too:
 * the chunks' parameters, the scratch, and the launches, of the kernels
 * built into the library or, for a GPU the built-in code cannot run on, of
 * the same kernels compiled by NVRTC (fzk_jit_ratio; k is then that
 * module's functions, NULL for the built-in ones).  Each chain has its own
 * decoder and encoder kernels (ratio_kernels.cuh), picked by the job's
 * planes flag.
 *
 * Each launch has as many blocks as the GPU holds at once (fzr_slots), each
 * with a slot of scratch, taking one chunk after another from a counter.
 * Decoding: a block per chunk in turn; the 32 huffman sub-streams are decoded by
 * the block's first warp, a lane each, rze's level 1, the huffman header's
 * lengths and codes, the interpolation's levels and lorenzo's scans by the
 * whole block, the anchors and rze's small upper levels by one thread.
 * Encoding: a block per chunk in turn into its place in a staging area, then,
 * after the scan of the slots' sizes, the place kernel.  Staging rather
 * than placing each chunk as it is coded (the word kernels' look-back)
 * keeps the chunk kernel free of any wait on the blocks before it; a chunk
 * is written twice, which costs little beside its coding.
 */
#include <cuda_runtime.h>

#include "fzk.h"
#include "driver.h"
#include "ratio_gpu.h"
#include "ratio_kernels.cuh"

static uint64_t slots(uint64_t nchunks, unsigned nsm, unsigned per_sm) {
  uint64_t b = (uint64_t)(nsm ? nsm : 1) * per_sm;
  return nchunks < b ? nchunks : b;
}

extern "C" uint64_t fzr_dec_slots(uint64_t nchunks, unsigned nsm) {
  return slots(nchunks, nsm, FZR_DEC_PER_SM);
}

extern "C" uint64_t fzre_enc_slots(uint64_t nchunks, unsigned nsm) {
  return slots(nchunks, nsm, FZRE_ENC_PER_SM);
}

extern "C" uint64_t fzr_scratch_bytes(uint32_t cb, uint64_t slots) {
  return fzr_stride(cb) * slots;
}

extern "C" uint64_t fzre_scratch_bytes(uint32_t cb, uint32_t w, uint32_t levels, uint64_t slots) {
  return fzre_layout_of(cb, w, levels).stride * slots;
}

#ifdef FZR_PHASE_CLOCK
#include <stdio.h>
/* A measuring build: each phase's share of the blocks' clock cycles in
 * the launch just made, on stderr (ratio_phase.cuh, FZR_CLK). */
static void phase_report(const char *what, cudaStream_t s) {
  unsigned long long sum[FZR_CLK_PHASES], zero[FZR_CLK_PHASES] = {0}, all = 0;
  cudaStreamSynchronize(s);
  cudaMemcpyFromSymbol(sum, fzr_clk_sum, sizeof sum);
  cudaMemcpyToSymbol(fzr_clk_sum, zero, sizeof zero);
  for (unsigned k = 0; k < FZR_CLK_PHASES; k++)
    all += sum[k];
  fprintf(stderr, "phase clock %s: %.3g Gcycles", what, all / 1e9);
  for (unsigned k = 0; k < FZR_CLK_PHASES; k++)
    if (sum[k])
      fprintf(stderr, " %u:%.1f%%", k, 100.0 * sum[k] / (all ? all : 1));
  fprintf(stderr, "\n");
}
#define PHASE_REPORT(what, s) phase_report(what, s)
#else
#define PHASE_REPORT(what, s) ((void)0)
#endif

/* One launch of a chunk kernel taking its job by value: aot built in, or
 * the generated module's kernel which (FZR_K_*). */
template <typename Job>
static int launch_job(const fzk_kern *k, unsigned which, void (*aot)(Job), unsigned grid, Job *J,
                      cudaStream_t s) {
  if (k != NULL) {
    void *args[] = {J};
    return fzk_driver_launch(k->fn[which], grid, FZR_NT, 0, s, args);
  }
  aot<<<grid, FZR_NT, 0, s>>>(*J);
  int e = (int)cudaGetLastError();
  PHASE_REPORT(which == FZR_K_DECODE || which == FZR_K_DECODE_PLANES ? "decode" : "encode", s);
  return e;
}

extern "C" int fzr_launch_decode(const fzk_kern *k, const fzr_params *p, cudaStream_t s) {
  if (p->nchunks == 0 || p->slots == 0)
    return p->nchunks == 0 ? 0 : (int)cudaErrorInvalidValue;
  fzr_job J;
  J.pay = p->pay;
  J.pay_len = p->pay_len;
  J.offs = p->offs;
  J.sizes = p->sizes;
  J.raw_bytes = p->raw_bytes;
  J.cb = p->cb;
  J.w = p->w;
  J.levels = p->levels;
  J.pdims = p->pdims;
  J.lorenzo = p->lorenzo;
  J.planes = p->planes;
  J.pwrel = p->pwrel;
  J.lv = p->lv;
  J.hform = p->hform;
  J.step = p->step;
  for (unsigned a = 0; a < 3; a++)
    for (unsigned d = 0; d < 3; d++)
      J.ext[a][d] = p->ext[a][d];
  J.scratch = p->scratch;
  J.stride = fzr_stride(p->cb);
  J.out = (uint8_t *)p->out;
  J.out_aligned = (uintptr_t)p->out % p->w == 0;
  J.status = p->status;
  J.crcs = p->crcs;
  J.crc_tab = p->crc_tab;
  J.nchunks = p->nchunks;
  J.ticket = (unsigned long long *)p->ticket;
  int e = (int)cudaMemsetAsync(p->ticket, 0, sizeof *p->ticket, s);
  if (e)
    return e;
  return p->planes ? launch_job(k, FZR_K_DECODE_PLANES, fzr_decode_planes_kernel,
                                (unsigned)p->slots, &J, s)
                   : launch_job(k, FZR_K_DECODE, fzr_decode_kernel, (unsigned)p->slots, &J, s);
}

extern "C" int fzre_launch_encode(const fzk_kern *k, const fzre_params *p, cudaStream_t s) {
  if (p->nchunks == 0 || p->slots == 0)
    return p->nchunks == 0 ? 0 : (int)cudaErrorInvalidValue;
  fzre_job J;
  J.in = p->in;
  J.raw_bytes = p->raw_bytes;
  J.cb = p->cb;
  J.w = p->w;
  J.levels = p->levels;
  J.pdims = p->pdims;
  J.lorenzo = p->lorenzo;
  J.planes = p->planes;
  J.pwrel = p->pwrel;
  J.lv = p->lv;
  J.hform = p->hform;
  J.qp = p->qp;
  for (unsigned a = 0; a < 3; a++)
    for (unsigned d = 0; d < 3; d++)
      J.ext[a][d] = p->ext[a][d];
  J.scratch = p->scratch;
  J.stride = fzre_layout_of(p->cb, p->w, p->levels).stride;
  J.stage = p->stage;
  J.sizes = p->sizes;
  J.crcs = p->crcs;
  J.crc_tab = p->crc_tab;
  J.nchunks = p->nchunks;
  J.ticket = (unsigned long long *)p->ticket;
  int e = (int)cudaMemsetAsync(p->ticket, 0, sizeof *p->ticket, s);
  if (e)
    return e;
  return p->planes ? launch_job(k, FZR_K_ENCODE_PLANES, fzre_encode_planes_kernel,
                                (unsigned)p->slots, &J, s)
                   : launch_job(k, FZR_K_ENCODE, fzre_encode_kernel, (unsigned)p->slots, &J, s);
}

extern "C" int fzre_launch_place(const fzk_kern *k, const uint8_t *stage, const uint32_t *sizes,
                                 const uint64_t *offs, uint64_t nchunks, uint32_t cb,
                                 uint8_t *out, uint64_t out_cap, uint64_t header_len,
                                 uint64_t table_off, cudaStream_t s) {
  if (nchunks == 0)
    return 0;
  if (k != NULL) {
    void *args[] = {&stage, &sizes, &offs, &cb, &out, &out_cap, &header_len, &table_off};
    return fzk_driver_launch(k->fn[FZR_K_PLACE], (unsigned)nchunks, FZR_NT, 0, s, args);
  }
  fzre_place_kernel<<<(unsigned)nchunks, FZR_NT, 0, s>>>(stage, sizes, offs, cb, out, out_cap,
                                                          header_len, table_off);
  return (int)cudaGetLastError();
}
