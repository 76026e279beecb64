/*
 * helper_kernels.cuh - the kernels of a compression and a decompression
 * around the chunk coders: a compression's first kernel (the range, the
 * quantizer parameters and the header template), the prefix sums that
 * place chunks in the archive, the gather that moves them there, the chunk
 * checksums, the checksums of long buffers, and a compression's last
 * kernel (the payload's and the header's checksums).  The first and the
 * last finish in whichever block ends last (fzk_last_block).
 *
 * chain_kernels.cu builds them ahead of time; on a GPU that code cannot run
 * on, jit.c compiles this header with NVRTC, once per context, and the
 * launchers take them from the context's table (fzk_kern).  The kernels
 * are extern "C" so that a module names them plainly.  Every index into a
 * chunk is bounded by the chunk's own size, and every read of an archive by
 * the bounds the host validated and, again, by the payload length.
 */
#ifndef FZK_HELPER_KERNELS_CUH
#define FZK_HELPER_KERNELS_CUH

#include "chunk_ops.cuh"

/* ---- range and quantizer parameters ---- */

__device__ static bool fzk_finite_f32(uint32_t b) { return ((b >> 23) & 0xffu) != 0xffu; }
__device__ static bool fzk_finite_f64(fzk_u64 b) { return ((b >> 52) & 0x7ffu) != 0x7ffu; }

/* The minimum and maximum of every thread's lo and hi, left in thread 0's
 * (by warp shuffles, then one barrier). */
__device__ __forceinline__ void fzk_block_minmax(double *lo, double *hi) {
  __shared__ double s_lo[FZK_NW], s_hi[FZK_NW];
  for (unsigned o = 16; o; o >>= 1) {
    double a = __shfl_xor_sync(FZK_FULL, *lo, o), b = __shfl_xor_sync(FZK_FULL, *hi, o);
    *lo = a < *lo ? a : *lo;
    *hi = b > *hi ? b : *hi;
  }
  if ((threadIdx.x & 31) == 0) {
    s_lo[threadIdx.x >> 5] = *lo;
    s_hi[threadIdx.x >> 5] = *hi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (unsigned k = 1; k < FZK_NW; k++) {
      *lo = s_lo[k] < *lo ? s_lo[k] : *lo;
      *hi = s_hi[k] > *hi ? s_hi[k] : *hi;
    }
  }
}

/* This thread's minimum and maximum of the finite values, by grid stride;
 * f32 in 16-byte vectors when the input allows. */
__device__ static void fzk_range_share(const uint8_t *__restrict__ d_in, uint64_t n, unsigned w,
                                       int vec, double *lo_, double *hi_) {
  double lo = __longlong_as_double(0x7ff0000000000000ll), hi = -lo;
  const uint64_t stride = (uint64_t)gridDim.x * FZK_NT;
  const uint64_t t0 = (uint64_t)blockIdx.x * FZK_NT + threadIdx.x;
  if (w == 4) {
    float flo = __int_as_float(0x7f800000), fhi = -flo;
    uint64_t nv = vec ? n / 4 : 0;
    for (uint64_t v = t0; v < nv; v += stride) {
      uint4 u = ((const uint4 *)d_in)[v];
      uint32_t b[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int k = 0; k < 4; k++) {
        if (!fzk_finite_f32(b[k]))
          continue;
        float x = __uint_as_float(b[k]);
        flo = x < flo ? x : flo;
        fhi = x > fhi ? x : fhi;
      }
    }
    for (uint64_t i = 4 * nv + t0; i < n; i += stride) {
      uint32_t b = ((const uint32_t *)d_in)[i];
      if (!fzk_finite_f32(b))
        continue;
      float x = __uint_as_float(b);
      flo = x < flo ? x : flo;
      fhi = x > fhi ? x : fhi;
    }
    lo = (double)flo;
    hi = (double)fhi;
  } else {
    for (uint64_t i = t0; i < n; i += stride) {
      fzk_u64 b = ((const fzk_u64 *)d_in)[i];
      if (!fzk_finite_f64(b))
        continue;
      double v = __longlong_as_double((long long)b);
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
  }
  *lo_ = lo;
  *hi_ = hi;
}

/* True in every thread of the block that finishes last: each block
 * publishes its results, fences, and takes a ticket; the last one resets
 * the counter for the next launch.  Its reads of what the others wrote go
 * through L2 (__ldcg). */
__device__ static bool fzk_last_block(uint32_t *d_ticket) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(d_ticket, 1u) == gridDim.x - 1;
    if (last)
      *d_ticket = 0;
  }
  __syncthreads();
  if (last)
    __threadfence();
  return last;
}

/* The first kernel of a compression.  Every block takes its share of the
 * range (min and max are exact whatever the order; the sign of a zero
 * extreme can differ from the CPU's, which fzo_quant_params never sees: it
 * uses hi - lo and magnitudes) and of zeroing d_zero; the last block folds
 * the per-block pairs into the quantizer's parameters and writes the
 * header template with them. */
extern "C" __global__ void __launch_bounds__(FZK_NT)
fzk_prep_kernel(fzk_prep p, unsigned w, int vec, int f32) {
  __shared__ double s_q[2];
  double lo, hi;
  if (p.range) {
    fzk_range_share((const uint8_t *)p.d_in, p.n, w, vec, &lo, &hi);
    fzk_block_minmax(&lo, &hi);
    if (threadIdx.x == 0) {
      p.d_part[2 * blockIdx.x] = lo;
      p.d_part[2 * blockIdx.x + 1] = hi;
    }
  }
  const uint64_t stride = (uint64_t)gridDim.x * FZK_NT;
  for (uint64_t i = (uint64_t)blockIdx.x * FZK_NT + threadIdx.x; i < p.zero_words; i += stride)
    p.d_zero[i] = 0;
  if (!fzk_last_block(p.d_ticket))
    return;
  if (p.q_off) {
    lo = __longlong_as_double(0x7ff0000000000000ll);
    hi = -lo;
    const unsigned nparts = p.range ? gridDim.x : 0;
    for (unsigned k = threadIdx.x; k < nparts; k += FZK_NT) {
      double a = __ldcg(p.d_part + 2 * k), b = __ldcg(p.d_part + 2 * k + 1);
      lo = a < lo ? a : lo;
      hi = b > hi ? b : hi;
    }
    fzk_block_minmax(&lo, &hi);
    if (threadIdx.x == 0) {
      if (!p.range)
        lo = hi = 0;
      double e, s;
      fzo_quant_params(p.mode, p.eb, lo, hi, f32 != 0, &e, &s);
      p.d_qp->eb_abs = e;
      p.d_qp->step = s;
      p.d_qp->inv = s != 0 ? 1.0 / s : 0;
      p.d_range[0] = lo;
      p.d_range[1] = hi;
      s_q[0] = e;
      s_q[1] = s;
    }
    __syncthreads();
  }
  for (uint64_t i = threadIdx.x; i < p.tpl_len; i += FZK_NT) {
    uint8_t b = p.d_tpl[i];
    if (p.q_off && i >= p.q_off && i < p.q_off + 16) {
      double v = s_q[i >= p.q_off + 8];
      b = (uint8_t)((fzk_u64)__double_as_longlong(v) >> (8 * ((i - p.q_off) & 7)));
    }
    p.d_out[i] = b;
  }
}

/* ---- prefix sums of chunk sizes ---- */

#define FZK_SCAN_PER 16u
#define FZK_SCAN_TILE (FZK_NT * FZK_SCAN_PER)

__device__ static uint32_t fzk_size_at(const uint32_t *s32, const uint8_t *s16, uint64_t i) {
  return s32 ? s32[i] : (uint32_t)s16[2 * i] | (uint32_t)s16[2 * i + 1] << 8;
}

/* A size the table may not hold for chunk i of n: 0, or above the
 * chunk's raw bytes. */
__device__ static bool fzk_size_bad(uint32_t sz, uint64_t i, uint64_t n,
                                    const fzk_table_check &chk) {
  const uint64_t raw = i + 1 < n ? chk.cb : chk.raw_bytes - i * chk.cb;
  return sz == 0 || sz > raw;
}

/* The sizes' total against the payload's length. */
__device__ static void fzk_table_end(fzk_u64 total, const fzk_table_check &chk) {
  if (chk.d_status && total != chk.pay_len)
    atomicOr(chk.d_status, total > chk.pay_len ? FZK_ST_LONG : FZK_ST_SHORT);
}

extern "C" __global__ void __launch_bounds__(FZK_NT)
fzk_scan_kernel(uint64_t n, const uint32_t *__restrict__ s32, const uint8_t *__restrict__ s16,
                uint64_t *__restrict__ d_bsum, uint64_t *__restrict__ d_offs, int apply,
                fzk_table_check chk) {
  __shared__ fzk_u64 red[FZK_NW + 2];
  uint64_t lo = (uint64_t)blockIdx.x * FZK_SCAN_TILE + threadIdx.x * FZK_SCAN_PER;
  fzk_u64 v = 0;
  bool bad = false;
  for (uint32_t k = 0; k < FZK_SCAN_PER; k++) {
    if (lo + k < n) {
      const uint32_t sz = fzk_size_at(s32, s16, lo + k);
      bad |= fzk_size_bad(sz, lo + k, n, chk);
      v += sz;
    }
  }
  if (bad && chk.d_status && !apply)
    atomicOr(chk.d_status, FZK_ST_SIZE);
  fzk_u64 tot, ex = fzk_exscan(v, &tot, red);
  if (!apply) {
    if (threadIdx.x == 0)
      d_bsum[blockIdx.x] = tot;
    return;
  }
  fzk_u64 run = d_bsum[blockIdx.x] + ex;
  for (uint32_t k = 0; k < FZK_SCAN_PER && lo + k < n; k++) {
    d_offs[lo + k] = run;
    run += fzk_size_at(s32, s16, lo + k);
  }
  if (lo < n && lo + FZK_SCAN_PER >= n) {
    d_offs[n] = run;
    fzk_table_end(run, chk);
  }
}

/* Exclusive scan of the block sums in one block, tile by tile. */
extern "C" __global__ void __launch_bounds__(FZK_NT)
fzk_scan_top_kernel(uint64_t nb, uint64_t *__restrict__ d_bsum) {
  __shared__ fzk_u64 red[FZK_NW + 2];
  fzk_u64 carry = 0;
  for (uint64_t base = 0; base < nb; base += FZK_NT) {
    uint64_t i = base + threadIdx.x;
    fzk_u64 v = i < nb ? d_bsum[i] : 0, tot;
    fzk_u64 ex = fzk_exscan(v, &tot, red);
    if (i < nb)
      d_bsum[i] = carry + ex;
    carry += tot;
  }
  if (threadIdx.x == 0)
    d_bsum[nb] = carry;
}

extern "C" __global__ void fzk_zero_kernel(uint64_t *d_offs, uint32_t *d_status, uint64_t pay_len) {
  d_offs[0] = 0;
  if (d_status && pay_len)
    atomicOr(d_status, FZK_ST_SHORT);
}

/* ---- placing chunks, chunk checksums, header ---- */

/* Shared memory of the place and check kernels: the slice tables, the
 * reduction words, and one chunk at offset 16 to 31. */
__host__ __device__ inline uint32_t fzk_place_smem(uint32_t cb) { return 4096 + 4 * 32 + cb + 64; }

/* One block per chunk: the staged chunk into shared memory, its CRC-32C,
 * then out to its place in 4-byte aligned words (the place has any
 * alignment: each word is funnel-shifted out of two shared words). */
extern "C" __global__ void __launch_bounds__(FZK_NT)
fzk_place_kernel(uint32_t cb, const uint8_t *__restrict__ d_stage,
                 const uint32_t *__restrict__ d_sizes, const uint64_t *__restrict__ d_offs,
                 const uint32_t *__restrict__ d_tab, uint8_t *__restrict__ d_out,
                 uint64_t out_cap, uint64_t header_len, uint64_t table_off,
                 uint32_t *__restrict__ d_crcs) {
  extern __shared__ __align__(16) uint8_t fzk_shp[];
  uint32_t *T = (uint32_t *)fzk_shp, *red = T + 1024;
  uint8_t *buf = (uint8_t *)(red + 32);
  const uint64_t c = blockIdx.x;
  const uint32_t len = d_sizes[c], seg = cb / FZK_NT;
  const uint32_t kt = d_tab[FZK_CRC_SEGF + FZK_NT * fzk_seg_index(seg) + threadIdx.x];
  fzk_load_slices(T, d_tab);
  const uint8_t *src = d_stage + c * cb;
  uint32_t nv = (len + 15) / 16;
  for (uint32_t v = threadIdx.x; v < nv; v += FZK_NT)
    ((uint4 *)(buf + 16))[v] = ((const uint4 *)src)[v];
  __syncthreads();
  uint32_t crc = fzk_crc_chunk(buf, 16, len, seg, T, kt, red);
  uint64_t at = header_len + d_offs[c];
  uint64_t room = at < out_cap ? out_cap - at : 0;
  uint32_t lim = len < room ? len : (uint32_t)room;
  uint8_t *dp = d_out + at;
  uint32_t head = (uint32_t)((4 - ((uintptr_t)dp & 3)) & 3);
  if (head > lim)
    head = lim;
  uint32_t nw = (lim - head) / 4;
  if (threadIdx.x < head)
    dp[threadIdx.x] = buf[16 + threadIdx.x];
  for (uint32_t k = threadIdx.x; k < nw; k += FZK_NT)
    ((uint32_t *)(dp + head))[k] = fzk_ld32u(buf, 16 + head + 4 * k);
  for (uint32_t i = head + 4 * nw + threadIdx.x; i < lim; i += FZK_NT)
    dp[i] = buf[16 + i];
  if (threadIdx.x == 0) {
    d_out[table_off + 2 * c] = (uint8_t)len;
    d_out[table_off + 2 * c + 1] = (uint8_t)(len >> 8);
    d_crcs[c] = crc;
  }
}

/* One block per chunk of an archive: its CRC-32C, read straight from the
 * payload (the decoder needs none). */
extern "C" __global__ void __launch_bounds__(FZK_NT)
fzk_check_kernel(uint32_t cb, uint64_t raw_bytes, const uint8_t *__restrict__ d_pay,
                 uint64_t pay_len, const uint64_t *__restrict__ d_offs,
                 const uint8_t *__restrict__ d_sizes16, const uint32_t *__restrict__ d_tab,
                 uint32_t *__restrict__ d_crcs) {
  extern __shared__ __align__(16) uint8_t fzk_shp[];
  uint32_t *T = (uint32_t *)fzk_shp, *red = T + 1024;
  uint8_t *buf = (uint8_t *)(red + 32);
  const uint64_t c = blockIdx.x;
  const uint32_t raw = (uint32_t)(raw_bytes - c * cb < cb ? raw_bytes - c * cb : cb);
  const uint32_t len = (uint32_t)d_sizes16[2 * c] | (uint32_t)d_sizes16[2 * c + 1] << 8;
  const uint64_t off = d_offs[c];
  if (len == 0 || len > raw || off > pay_len || len > pay_len - off) {
    if (threadIdx.x == 0)
      d_crcs[c] = 0;
    return;
  }
  const uint32_t seg = cb / FZK_NT;
  const uint32_t kt = d_tab[FZK_CRC_SEGF + FZK_NT * fzk_seg_index(seg) + threadIdx.x];
  fzk_load_slices(T, d_tab);
  uint32_t o = fzk_load_chunk(buf, d_pay + off, len);
  __syncthreads();
  uint32_t crc = fzk_crc_chunk(buf, o, len, seg, T, kt, red);
  if (threadIdx.x == 0)
    d_crcs[c] = crc;
}

/* ---- CRC-32C of a long buffer ---- */

/* Shared memory of one block's part of a long CRC. */
struct fzk_crc_smem {
  uint32_t T[1024], red[32];
  __align__(16) uint8_t buf[FZK_CRC_SPAN + 48];
};

/* Part b of np of the CRC of len >= 4 bytes at d_p, left in thread 0: the
 * span of FZK_CRC_SPAN bytes that block b checksums of a virtual buffer
 * that ends with the len real bytes (the leading zeros change nothing),
 * shifted to the end of the buffer.  The parts XOR to the raw CRC. */
__device__ static uint32_t fzk_crc_part(const uint8_t *__restrict__ d_p, uint64_t len,
                                        uint64_t np, uint64_t b,
                                        const uint32_t *__restrict__ d_tab, fzk_crc_smem &sm) {
  fzk_load_slices(sm.T, d_tab);
  uint64_t p0 = np * FZK_CRC_SPAN - len;
  uint64_t e = (b + 1) * FZK_CRC_SPAN - p0;
  uint64_t s0 = b ? e - FZK_CRC_SPAN : 0;
  uint32_t lb = (uint32_t)(e - s0);
  uint32_t o = fzk_load_chunk(sm.buf, d_p + s0, lb);
  __syncthreads();
  uint32_t kt = d_tab[FZK_CRC_SEGF + FZK_NT * fzk_seg_index(FZK_CRC_SEG) + threadIdx.x];
  uint32_t c = fzk_block_xor(fzk_crc_share(sm.buf, o, lb, FZK_CRC_SEG, s0, sm.T, kt), sm.red);
  return threadIdx.x == 0 ? fzk_crc_mulmod(c, fzk_crc_span_factor(np - 1 - b, d_tab)) : 0;
}

/* The number of parts of the CRC of len bytes (0 below 4 bytes). */
__host__ __device__ inline uint64_t fzk_crc_np(uint64_t len) {
  return len >= 4 ? (len + FZK_CRC_SPAN - 1) / FZK_CRC_SPAN : 0;
}

/* The CRC-32C of len bytes at d_p from its np parts, in every lane of one
 * warp (below 4 bytes, from the bytes themselves). */
__device__ static uint32_t fzk_crc_fold(const uint32_t *d_parts, uint64_t np,
                                        const uint8_t *d_p, uint64_t len,
                                        const uint32_t *__restrict__ d_tab) {
  uint32_t x = 0;
  if (len >= 4) {
    for (uint64_t k = threadIdx.x & 31; k < np; k += 32)
      x ^= __ldcg(d_parts + k);
    for (unsigned o = 16; o; o >>= 1)
      x ^= __shfl_xor_sync(FZK_FULL, x, o);
    return ~x;
  }
  uint32_t r = 0xffffffffu;
  for (uint64_t j = 0; j < len; j++)
    r = (r >> 8) ^ d_tab[(r ^ d_p[j]) & 0xffu];
  return ~r;
}

/* What a CRC's result does (fzk_crc_use), by thread 0. */
__device__ static void fzk_crc_apply(uint32_t crc, const fzk_crc_use &use) {
  uint32_t want = use.expect;
  if (use.expect_le)
    want = (uint32_t)use.expect_le[0] | (uint32_t)use.expect_le[1] << 8 |
           (uint32_t)use.expect_le[2] << 16 | (uint32_t)use.expect_le[3] << 24;
  const uint32_t bit = crc != want ? use.bit : 0u;
  /* An OR of nothing reads the word as the kernels before left it. */
  const uint32_t st = atomicOr(use.status, bit) | bit;
  if (use.host)
    *(volatile uint32_t *)use.host = st;
}

/* The CRC-32C of len bytes at d_p in one launch of max(np, 1) blocks:
 * each block its part, the last to finish folds them (fzk_last_block on
 * use.ticket) and applies the result. */
extern "C" __global__ void __launch_bounds__(FZK_NT)
fzk_crc_kernel(const uint8_t *__restrict__ d_p, uint64_t len, uint32_t *__restrict__ d_parts,
               const uint32_t *__restrict__ d_tab, fzk_crc_use use) {
  __shared__ fzk_crc_smem sm;
  const uint64_t np = fzk_crc_np(len);
  if (np) {
    uint32_t c = fzk_crc_part(d_p, len, np, blockIdx.x, d_tab, sm);
    if (threadIdx.x == 0)
      d_parts[blockIdx.x] = c;
  }
  if (!fzk_last_block(use.ticket) || threadIdx.x >= 32)
    return;
  uint32_t crc = fzk_crc_fold(d_parts, np, d_p, len, d_tab);
  if (threadIdx.x == 0)
    fzk_crc_apply(crc, use);
}

/* The last kernel of a compression: the parts of the payload's CRC (the
 * CRC of the chunk CRCs) and of the header's, whose payload-CRC field is
 * still zero, in one grid.  The last block folds them; the field's value
 * enters the header's CRC by linearity, as its word times x^(8 n) for the n
 * bytes from the field's start to the end of the checksummed header. */
extern "C" __global__ void __launch_bounds__(FZK_NT)
fzk_seal_kernel(fzk_seal p, const uint32_t *__restrict__ d_tab) {
  __shared__ fzk_crc_smem sm;
  const uint64_t len1 = 4 * p.nchunks, len2 = p.header_len - 4;
  const uint64_t np1 = fzk_crc_np(len1), np2 = fzk_crc_np(len2);
  uint32_t c = blockIdx.x < np1
                   ? fzk_crc_part((const uint8_t *)p.d_crcs, len1, np1, blockIdx.x, d_tab, sm)
                   : fzk_crc_part(p.d_out, len2, np2, blockIdx.x - np1, d_tab, sm);
  if (threadIdx.x == 0)
    p.d_parts[blockIdx.x] = c;
  if (!fzk_last_block(p.d_ticket) || threadIdx.x >= 32)
    return;
  uint32_t pay = fzk_crc_fold(p.d_parts, np1, (const uint8_t *)p.d_crcs, len1, d_tab);
  uint32_t hdr = fzk_crc_fold(p.d_parts + np1, np2, p.d_out, len2, d_tab) ^
                 fzk_crc_mulmod(pay, p.field_shift);
  if (threadIdx.x < 4) {
    p.d_out[p.table_off - 4 + threadIdx.x] = (uint8_t)(pay >> (8 * threadIdx.x));
    p.d_out[p.header_len - 4 + threadIdx.x] = (uint8_t)(hdr >> (8 * threadIdx.x));
  }
  if (threadIdx.x == 0) {
    *p.d_total = *p.d_end + p.header_len;
    for (uint32_t k = 0; k < p.back_words; k++)
      ((volatile uint64_t *)p.h_back)[k] = __ldcg(p.d_back + k);
  }
}

/* ---- a decompression's first kernel, for a table of one scan tile ---- */

/* Size i of a table of tw-byte little-endian sizes at any alignment. */
__device__ static uint32_t fzk_size_le(const uint8_t *__restrict__ t, uint32_t tw, uint64_t i) {
  const uint8_t *e = t + tw * i;
  uint32_t v = 0;
  for (uint32_t b = 0; b < tw; b++)
    v |= (uint32_t)e[b] << (8 * b);
  return v;
}

/* A little-endian double at any alignment. */
__device__ static double fzk_f64_le(const uint8_t *p) {
  uint64_t v = 0;
  for (int b = 0; b < 8; b++)
    v |= (uint64_t)p[b] << (8 * b);
  return __longlong_as_double((long long)v);
}

/* fzk_dec_head of fzk.h: the prefix and the quantizer, then (table) the
 * scan kernel's two passes over its one tile at once and the header's CRC
 * part by part in this block. */
extern "C" __global__ void __launch_bounds__(FZK_NT)
fzk_dec_head_kernel(fzk_dec_head p, const uint32_t *__restrict__ d_tab) {
  __shared__ fzk_crc_smem sm;
  __shared__ fzk_u64 red[FZK_NW + 2];
  const uint64_t n = p.nchunks;
  uint32_t *status = p.chk.d_status;
  if (p.table) {
    for (uint64_t i = threadIdx.x; i < n + 2; i += FZK_NT)
      p.d_crcs[i] = 0;
    __syncthreads(); /* the status word is 0 before any bit is set */
  }
  /* Every byte but the quantizer's doubles and the payload's CRC. */
  const uint32_t qlo = p.q_off ? p.q_off + 1 : 0, qhi = p.q_off ? p.q_off + 25 : 0;
  bool stale = false;
  for (uint32_t i = threadIdx.x; i < p.prefix_len; i += FZK_NT) {
    const uint8_t c = p.d_arc[i];
    if (p.h_prefix)
      p.h_prefix[i] = c;
    if (i + 4 < p.prefix_len && (i < qlo || i >= qhi))
      stale |= c != p.prefix[i];
  }
  if (threadIdx.x == 0) {
    fzk_qparams q = {0, 0, 0};
    if (p.q_off) {
      const double eb = fzk_f64_le(p.d_arc + p.q_off + 1);
      q.eb_abs = fzk_f64_le(p.d_arc + p.q_off + 9);
      q.step = fzk_f64_le(p.d_arc + p.q_off + 17);
      q.inv = q.step != 0 ? 1.0 / q.step : 0;
      stale |= !fzo_quant_params_ok(eb, q.eb_abs, q.step, p.q_pwrel != 0, p.q_f64 == 0);
    }
    *p.d_qp = q;
  }
  if (stale)
    atomicOr(status, FZK_ST_STALE);
  if (!p.table)
    return;
  const uint64_t lo = (uint64_t)threadIdx.x * FZK_SCAN_PER;
  uint32_t sz[FZK_SCAN_PER];
  fzk_u64 v = 0;
  bool bad = false;
#pragma unroll
  for (uint32_t k = 0; k < FZK_SCAN_PER; k++) {
    sz[k] = 0;
    if (lo + k < n) {
      sz[k] = fzk_size_le(p.d_table, p.tw, lo + k);
      bad |= fzk_size_bad(sz[k], lo + k, n, p.chk);
      v += sz[k];
      if (p.d_sizes32)
        p.d_sizes32[lo + k] = sz[k];
    }
  }
  if (bad)
    atomicOr(status, FZK_ST_SIZE);
  fzk_u64 tot, run = fzk_exscan(v, &tot, red);
#pragma unroll
  for (uint32_t k = 0; k < FZK_SCAN_PER; k++)
    if (lo + k < n) {
      p.d_offs[lo + k] = run;
      run += sz[k];
    }
  /* The thread of the last size (thread 0 of an empty table) ends it. */
  if (threadIdx.x == (n ? (n - 1) / FZK_SCAN_PER : 0)) {
    p.d_offs[n] = run;
    fzk_table_end(run, p.chk);
  }
  const uint64_t np = fzk_crc_np(p.hcrc_len);
  uint32_t x = 0;
  for (uint64_t b = 0; b < np; b++) {
    x ^= fzk_crc_part(p.d_arc, p.hcrc_len, np, b, d_tab, sm);
    __syncthreads(); /* the next part reuses sm */
  }
  if (threadIdx.x == 0) {
    uint32_t crc = ~x;
    if (np == 0) { /* below 4 bytes (a parser refuses such a header first) */
      uint32_t r = 0xffffffffu;
      for (uint64_t j = 0; j < p.hcrc_len; j++)
        r = (r >> 8) ^ d_tab[(r ^ p.d_arc[j]) & 0xffu];
      crc = ~r;
    }
    const uint8_t *w = p.d_arc + p.hcrc_len;
    const uint32_t want = (uint32_t)w[0] | (uint32_t)w[1] << 8 | (uint32_t)w[2] << 16 |
                          (uint32_t)w[3] << 24;
    if (crc != want)
      atomicOr(status, FZK_ST_HCRC);
  }
}

#endif
