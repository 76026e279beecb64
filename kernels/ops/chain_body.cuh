/*
 * chain_body.cuh - the chunk kernels' bodies: one block codes (or decodes)
 * one chunk by running a chain's stages, the device ops of chunk_ops.cuh,
 * one after the other on two shared stream buffers.
 *
 * The bodies take the chain as a functor that runs the stages after the
 * quantizer.  The ahead-of-time kernels (chain_kernels.cu) pass the
 * interpreter below, which reads the stages from the descriptor at run
 * time; a generated kernel (jit_gen.c, compiled by NVRTC) passes a functor
 * that calls the plan's stages in a straight line, with the descriptor's
 * fields as constants.  Either way the same ops run in the same order on the
 * same buffers, so the bytes are the same.  NVRTC compiles this header as it
 * is: no runtime header, no host code.
 */
#ifndef FZK_CHAIN_BODY_CUH
#define FZK_CHAIN_BODY_CUH

#include "chunk_ops.cuh"

/* ---- shared memory layout (fzk_desc_layout) ---- */

__host__ __device__ __forceinline__ uint32_t fzk_align16(uint32_t v) { return (v + 15u) & ~15u; }

__device__ __forceinline__ fzk_smem fzk_carve(const fzk_desc &d, uint8_t *base) {
  fzk_smem s;
  uint32_t o = 0;
  s.x = base + o; o += d.cap;
  s.y = base + o; o += d.cap;
  s.t = base + o; o += d.tcap;
  s.flags = (uint32_t *)(base + o); o += fzk_align16(d.cb / 32 + 16);
  s.red = (fzk_u64 *)(base + o); o += 8 * (FZK_NW + 2);
  s.misc = (uint32_t *)(base + o);
  return s;
}

/* Copies len bytes between 16-byte aligned buffers (the last vector may
 * carry up to 15 bytes past len: both sides have room for it). */
__device__ __forceinline__ void fzk_copy16(uint8_t *dst, const uint8_t *src, uint32_t len) {
  uint32_t nv = (len + 15) / 16;
  for (uint32_t i = threadIdx.x; i < nv; i += FZK_NT)
    ((uint4 *)dst)[i] = ((const uint4 *)src)[i];
}

/* ---- the quantizer ---- */

/* Quantizes the chunk's n elements from global memory into s.x; the
 * outlier bitmap to s.flags; returns the number of outliers. */
__device__ __forceinline__ uint32_t fzk_quant_chunk(const fzk_desc &d,
                                                    const uint8_t *__restrict__ g_in,
                                           bool vec, uint32_t n, const fzk_qparams &q,
                                           fzk_smem &s) {
  const unsigned w = d.w, epl = 16 / w; /* elements per lane: 4 or 2 */
  const unsigned lanes_per_word = 32 / epl;
  unsigned lane = threadIdx.x & 31;
  uint32_t nf = (n + 31) / 32;
  fzk_u64 cnt = 0;
  for (uint32_t base = (threadIdx.x - lane) * epl; base < n; base += FZK_NT * epl) {
    uint32_t i0 = base + lane * epl;
    fzk_u64 v[4];
    if (vec && i0 + epl <= n) {
      uint4 u = *(const uint4 *)(g_in + (size_t)i0 * w);
      if (w == 4) {
        v[0] = u.x; v[1] = u.y; v[2] = u.z; v[3] = u.w;
      } else {
        v[0] = (fzk_u64)u.y << 32 | u.x;
        v[1] = (fzk_u64)u.w << 32 | u.z;
      }
    } else {
      for (unsigned e = 0; e < epl; e++)
        v[e] = i0 + e < n ? (w == 4 ? (fzk_u64)((const uint32_t *)g_in)[i0 + e]
                                    : ((const fzk_u64 *)g_in)[i0 + e])
                          : 0;
    }
    uint32_t bad = 0;
    for (unsigned e = 0; e < epl; e++) {
      if (i0 + e >= n)
        break;
      fzk_u64 c;
      if (!fzk_quant_one(v[e], w, d.mode[0], q, &c))
        bad |= 1u << e;
      fzk_st(s.x, i0 + e, w, c);
    }
    /* Gather the lanes' bits into words of 32 elements. */
    uint32_t word = bad << ((lane * epl) & 31);
    for (unsigned o = 1; o < lanes_per_word; o <<= 1)
      word |= __shfl_xor_sync(FZK_FULL, word, o);
    uint32_t fw = (base + lane * epl) / 32;
    if (lane % lanes_per_word == 0 && fw < nf) {
      s.flags[fw] = word;
      cnt += __popc(word);
    }
  }
  return (uint32_t)fzk_sum(cnt, s.red);
}

/* Writes the side list (stage_quant.c) to out: count, indices, values. */
__device__ __forceinline__ void fzk_side_write(const fzk_desc &d, const uint8_t *__restrict__ g_in,
                                      uint32_t n, uint32_t m, fzk_smem &s, uint8_t *out) {
  const unsigned w = d.w;
  uint32_t vl = fzk_varint_len(m);
  if (threadIdx.x == 0) {
    uint32_t v = m;
    for (uint32_t k = 0; k < vl; k++, v >>= 7)
      out[k] = (uint8_t)((v & 0x7f) | (k + 1 < vl ? 0x80 : 0));
  }
  uint32_t nf = (n + 31) / 32;
  uint32_t per = (nf + FZK_NT - 1) / FZK_NT;
  uint32_t lo = threadIdx.x * per, hi = lo + per < nf ? lo + per : nf;
  fzk_u64 c = 0;
  for (uint32_t f = lo; f < hi; f++)
    c += __popc(s.flags[f]);
  fzk_u64 tot, r = fzk_exscan(c, &tot, s.red);
  uint8_t *idx = out + vl, *val = out + vl + 2 * m;
  for (uint32_t f = lo; f < hi; f++) {
    uint32_t word = s.flags[f];
    while (word) {
      uint32_t i = 32 * f + (__ffs(word) - 1);
      word &= word - 1;
      idx[2 * r] = (uint8_t)i;
      idx[2 * r + 1] = (uint8_t)(i >> 8);
      for (unsigned b = 0; b < w; b++)
        val[(size_t)w * r + b] = g_in[(size_t)i * w + b];
      r++;
    }
  }
}

/* ---- forward stages: each runs on io.cur into io.other, then swaps ----
 * A coder that would not fit in the room left returns false and leaves the
 * buffers as they were (io.other stays free for the raw fallback). */

struct fzk_fwd_io {
  uint8_t *cur, *other;
  uint32_t len;  /* bytes in cur */
  uint32_t n;    /* elements of the chunk */
  uint32_t room; /* bytes the coded stream may take */
  fzk_smem *s;
};

__device__ __forceinline__ void fzk_fwd_swap(fzk_fwd_io &io) {
  uint8_t *t = io.cur;
  io.cur = io.other;
  io.other = t;
}

__device__ __forceinline__ bool fzk_fwd_diff(fzk_fwd_io &io, unsigned w, unsigned map) {
  fzk_diff_fwd(io.cur, io.other, io.n, w, map);
  fzk_fwd_swap(io);
  return true;
}

__device__ __forceinline__ bool fzk_fwd_bitshuffle(fzk_fwd_io &io, unsigned w) {
  fzk_bitshuffle_fwd(io.cur, io.other, io.n, w);
  io.len = fzk_bs_bytes(io.n, w);
  fzk_fwd_swap(io);
  return true;
}

__device__ __forceinline__ bool fzk_fwd_rze(fzk_fwd_io &io, unsigned levels) {
  uint32_t r = fzk_rze_fwd(io.cur, io.len, io.other, io.s->t, levels, io.room, io.s->red);
  if (r == FZK_BAD)
    return false;
  io.len = r;
  fzk_fwd_swap(io);
  return true;
}

__device__ __forceinline__ bool fzk_fwd_bitpack(fzk_fwd_io &io, unsigned w) {
  uint32_t r = fzk_bitpack_fwd(io.cur, io.n, w, io.other, io.s->t, io.room, io.s->red);
  if (r == FZK_BAD)
    return false;
  io.len = r;
  fzk_fwd_swap(io);
  return true;
}

/* The stages after the quantizer, read from the descriptor. */
struct fzk_fwd_interp {
  __device__ __forceinline__ bool operator()(const fzk_desc &d, fzk_fwd_io &io) const {
    for (unsigned i = d.has_quant; i < d.nst; i++) {
      bool ok = true;
      switch (d.id[i]) {
      case FZE_STAGE_DIFF: ok = fzk_fwd_diff(io, d.w, d.mode[i]); break;
      case FZE_STAGE_BITSHUFFLE: ok = fzk_fwd_bitshuffle(io, d.w); break;
      case FZE_STAGE_RZE: ok = fzk_fwd_rze(io, d.levels[i]); break;
      case FZE_STAGE_BITPACK: ok = fzk_fwd_bitpack(io, d.w); break;
      }
      if (!ok)
        return false;
    }
    return true;
  }
};

/* One block codes chunk blockIdx.x: its coded bytes to d_stage + c * cb,
 * their length to d_sizes[c] (the raw bytes when coding does not pay). */
template <class Fwd>
__device__ __forceinline__ void
fzk_encode_chunk(const fzk_desc &d, const uint8_t *__restrict__ d_in, int in_vec,
                 const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_stage,
                 uint32_t *__restrict__ d_sizes, const Fwd &fwd) {
  extern __shared__ __align__(16) uint8_t fzk_shared[];
  fzk_smem s = fzk_carve(d, fzk_shared);
  const uint64_t c = blockIdx.x;
  const unsigned w = d.w;
  const uint8_t *g_in = d_in + c * d.cb;
  const uint32_t raw = (uint32_t)(d.raw_bytes - c * d.cb < d.cb ? d.raw_bytes - c * d.cb : d.cb);
  const uint32_t n = raw / w;

  uint32_t side_len = 0, m = 0;
  bool fallback = false;
  if (d.has_quant) {
    fzk_qparams q = *d_qp;
    m = fzk_quant_chunk(d, g_in, in_vec != 0, n, q, s);
    side_len = fzk_varint_len(m) + m * (2 + w);
    fallback = side_len >= raw;
  } else {
    if (in_vec)
      fzk_copy16(s.x, g_in, raw & ~15u);
    for (uint32_t i = (in_vec ? raw & ~15u : 0) + threadIdx.x; i < raw; i += FZK_NT)
      s.x[i] = g_in[i];
  }
  __syncthreads();

  fzk_fwd_io io = {s.x, s.y, raw, n, raw - side_len, &s};
  if (!fallback)
    fallback = !fwd(d, io);
  uint8_t *cur = io.cur, *other = io.other;
  const uint32_t len = io.len;
  if (!fallback && side_len + len >= raw)
    fallback = true;

  uint8_t *res = cur;
  uint32_t res_len = len;
  if (fallback) {
    res = other;
    res_len = raw;
    if (in_vec)
      fzk_copy16(res, g_in, raw & ~15u);
    for (uint32_t i = (in_vec ? raw & ~15u : 0) + threadIdx.x; i < raw; i += FZK_NT)
      res[i] = g_in[i];
  } else if (d.has_quant) {
    /* Side list first, then the stream, assembled in the free buffer. */
    res = other;
    res_len = side_len + len;
    fzk_side_write(d, g_in, n, m, s, res);
    for (uint32_t i = threadIdx.x; i < len; i += FZK_NT)
      res[side_len + i] = cur[i];
  }
  __syncthreads();
  fzk_copy16(d_stage + c * d.cb, res, res_len);
  if (threadIdx.x == 0)
    d_sizes[c] = res_len;
}

/* ---- inverse stages, last stage first: each runs on io.cur into
 * io.other, then the buffers turn.  The first input is the coded chunk in
 * s.x (after the side list); from then on s.x and s.y alternate.  size is
 * the stage's input size in bytes (its output when coding). ---- */

struct fzk_inv_io {
  uint8_t *cur, *other, *coded;
  uint32_t clen; /* bytes in cur */
  uint32_t n, raw;
  fzk_smem *s;
};

__device__ __forceinline__ void fzk_inv_turn(fzk_inv_io &io) {
  uint8_t *t = io.other;
  io.other = io.cur == io.coded ? io.s->x : io.cur;
  io.cur = t;
}

__device__ __forceinline__ bool fzk_inv_rze(fzk_inv_io &io, uint32_t size, unsigned levels) {
  bool ok = fzk_rze_inv(io.cur, io.clen, io.other, size, io.s->t, levels, io.s->red);
  io.clen = size;
  fzk_inv_turn(io);
  return ok;
}

__device__ __forceinline__ bool fzk_inv_bitpack(fzk_inv_io &io, unsigned w) {
  bool ok = fzk_bitpack_inv(io.cur, io.clen, io.other, io.n, w, io.s->t, io.s->red);
  io.clen = io.raw;
  fzk_inv_turn(io);
  return ok;
}

__device__ __forceinline__ bool fzk_inv_bitshuffle(fzk_inv_io &io, unsigned w) {
  fzk_bitshuffle_inv(io.cur, io.other, io.n, w);
  io.clen = io.raw;
  fzk_inv_turn(io);
  return true;
}

__device__ __forceinline__ bool fzk_inv_diff(fzk_inv_io &io, unsigned w, unsigned map) {
  fzk_diff_inv(io.cur, io.other, io.n, w, map, io.s->red);
  fzk_inv_turn(io);
  return true;
}

/* The inverse stages after the quantizer, read from the descriptor. */
struct fzk_inv_interp {
  __device__ __forceinline__ bool operator()(const fzk_desc &d, fzk_inv_io &io) const {
    const unsigned first = d.has_quant;
    uint32_t size_in[FZE_MAX_STAGES + 1];
    size_in[first] = io.raw;
    for (unsigned i = first; i < d.nst; i++)
      size_in[i + 1] = d.id[i] == FZE_STAGE_BITSHUFFLE ? fzk_bs_bytes(io.n, d.w) : size_in[i];
    for (unsigned i = d.nst; i-- > first;) {
      bool ok = true;
      switch (d.id[i]) {
      case FZE_STAGE_RZE: ok = fzk_inv_rze(io, size_in[i], d.levels[i]); break;
      case FZE_STAGE_BITPACK: ok = fzk_inv_bitpack(io, d.w); break;
      case FZE_STAGE_BITSHUFFLE: ok = fzk_inv_bitshuffle(io, d.w); break;
      case FZE_STAGE_DIFF: ok = fzk_inv_diff(io, d.w, d.mode[i]); break;
      }
      if (!ok)
        return false;
    }
    return true;
  }
};

/* Whether a chain's last stage is a coder of variable length; if not, a
 * coded chunk's stream has the chain's exact output size. */
__device__ __forceinline__ bool fzk_ends_in_coder(const fzk_desc &d) {
  const uint8_t last = d.id[d.nst - 1];
  return last == FZE_STAGE_RZE || last == FZE_STAGE_BITPACK;
}

/* The bytes a chain's stages after the quantizer give for n elements when
 * none of them is a coder (bitshuffle pads to groups of 8). */
__device__ __forceinline__ uint32_t fzk_plain_size(const fzk_desc &d, uint32_t n, uint32_t raw) {
  for (unsigned i = d.has_quant; i < d.nst; i++)
    if (d.id[i] == FZE_STAGE_BITSHUFFLE)
      return fzk_bs_bytes(n, d.w);
  return raw;
}

/* One block decodes chunk blockIdx.x of the payload (d_pay, pay_len bytes;
 * chunk c at d_offs[c], d_sizes16 the archive's table) into d_out; any
 * corruption sets bit 1 of *d_status. */
template <class Inv>
__device__ __forceinline__ void
fzk_decode_chunk(const fzk_desc &d, const uint8_t *__restrict__ d_pay, uint64_t pay_len,
                 const uint64_t *__restrict__ d_offs, const uint8_t *__restrict__ d_sizes16,
                 const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out, int out_vec,
                 uint32_t *__restrict__ d_status, const Inv &inv) {
  fzk_qparams q;
  if (!fzk_dec_begin(d_qp, d_status, &q))
    return;
  extern __shared__ __align__(16) uint8_t fzk_shared[];
  fzk_smem s = fzk_carve(d, fzk_shared);
  const uint64_t c = blockIdx.x;
  const unsigned w = d.w;
  const uint32_t raw = (uint32_t)(d.raw_bytes - c * d.cb < d.cb ? d.raw_bytes - c * d.cb : d.cb);
  const uint32_t n = raw / w;
  const uint32_t len = (uint32_t)d_sizes16[2 * c] | (uint32_t)d_sizes16[2 * c + 1] << 8;
  const uint64_t off = d_offs[c];
  uint8_t *g_out = d_out + c * d.cb;
  /* The host validated the table; a chunk outside the payload is refused
   * again here, before any byte of it is read. */
  if (len == 0 || len > raw || off > pay_len || len > pay_len - off) {
    if (threadIdx.x == 0)
      atomicOr(d_status, 1u);
    return;
  }
  const uint8_t *g_arc = d_pay + off;

  /* The side list's length, parsed as stage_quant.c does, from global. */
  uint32_t side_len = 0, m = 0;
  bool bad = false;
  if (d.has_quant && len != raw) {
    if (threadIdx.x == 0) {
      uint32_t v = 0, k = 0, ok = 0;
      for (unsigned shift = 0; shift <= 28; shift += 7) {
        if (k >= len)
          break;
        uint8_t b = g_arc[k++];
        v |= (uint32_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
          ok = 1;
          break;
        }
      }
      if (!ok || v > n || (len - k) / (2 + w) < v)
        ok = 0;
      s.misc[0] = ok;
      s.misc[1] = v;
      s.misc[2] = ok ? k + v * (2 + w) : 0;
    }
    __syncthreads();
    bad = s.misc[0] == 0;
    m = s.misc[1];
    side_len = s.misc[2];
  }
  /* The stream after the side list lands 16-byte aligned in s.x. */
  uint32_t pad = (16 - side_len % 16) % 16;
  uint8_t *coded = s.x + pad;
  for (uint32_t i = threadIdx.x; i < len; i += FZK_NT)
    coded[i] = g_arc[i];
  __syncthreads();

  uint8_t *res = coded;
  if (len != raw && !bad) {
    uint8_t *coded_stream = coded + side_len;
    fzk_inv_io io = {coded_stream, s.y, coded_stream, len - side_len, n, raw, &s};
    if (!fzk_ends_in_coder(d) && io.clen != fzk_plain_size(d, n, raw))
      bad = true;
    if (!bad)
      bad = !inv(d, io);
    uint8_t *cur = io.cur, *other = io.other;
    if (!bad && d.has_quant) {
      /* Dequantize into the free buffer, then patch the outliers. */
      uint8_t *dst = other;
      for (uint32_t i = threadIdx.x; i < n; i += FZK_NT)
        fzk_st(dst, i, w, fzk_dequant_one(fzk_ld(cur, i, w), w, d.mode[0], q));
      __syncthreads();
      /* Indices must be strictly ascending and below n; all are checked
       * before any is used, so no two threads write one element. */
      bool pbad = q.step == 0 && m != 0;
      const uint8_t *idx = g_arc + side_len - (size_t)m * (2 + w);
      const uint8_t *val = idx + 2 * (size_t)m;
      for (uint32_t j = threadIdx.x; j < m; j += FZK_NT) {
        uint32_t i = idx[2 * j] | (uint32_t)idx[2 * j + 1] << 8;
        uint32_t p = j ? (idx[2 * j - 2] | (uint32_t)idx[2 * j - 1] << 8) : 0;
        pbad |= (j && i <= p) || i >= n;
      }
      if (!fzk_any(pbad))
        for (uint32_t j = threadIdx.x; j < m; j += FZK_NT) {
          uint32_t i = idx[2 * j] | (uint32_t)idx[2 * j + 1] << 8;
          for (unsigned b = 0; b < w; b++)
            dst[(size_t)i * w + b] = val[(size_t)w * j + b];
        }
      bad = fzk_any(pbad);
      cur = dst;
    }
    res = cur;
  }
  if (fzk_any(bad)) {
    if (threadIdx.x == 0)
      atomicOr(d_status, 1u);
    return;
  }
  __syncthreads();
  /* res is 16-byte aligned except for a raw chunk stored at pad != 0, which
   * only happens when len == raw and side_len == 0, so pad is 0 there. */
  uint32_t nv = out_vec ? raw / 16 : 0;
  for (uint32_t i = threadIdx.x; i < nv; i += FZK_NT)
    ((uint4 *)g_out)[i] = ((const uint4 *)res)[i];
  for (uint32_t i = 16 * nv + threadIdx.x; i < raw; i += FZK_NT)
    g_out[i] = res[i];
}

#endif
