/*
 * ops.h - the per-element arithmetic of the stages, written once for the CPU
 * reference and the CUDA kernels.
 *
 * Byte-identical archives across backends require the very same IEEE
 * operations in the very same order on both sides.  Everything here uses only
 * +, -, *, conversions and comparisons, all correctly rounded in IEEE 754 on
 * both x86-64 and NVIDIA GPUs when FMA contraction is off (host
 * -ffp-contract=off, nvcc -fmad=false).  Rounding to an integer uses the
 * 1.5 * 2^52 trick instead of rint(), whose speed and availability differ
 * between libm and CUDA.
 */
#ifndef FZE_OPS_H
#define FZE_OPS_H

/* Under NVRTC (run-time compiled kernels) memcpy and fabs are built in and
 * the fixed-width types come from the kernels' prelude. */
#ifndef __CUDACC_RTC__
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#endif

#ifdef __CUDACC__
#define FZ_HD __host__ __device__ __forceinline__
#else
#define FZ_HD static inline
#endif

/* Largest |bin| a quantized value may have: the code and its neighbour
 * difference must stay exact in the word, and the bin index exact in a double
 * product. */
#define FZO_QMAX_F32 1073741823.0          /* 2^30 - 1 */
#define FZO_QMAX_F64 1125899906842623.0    /* 2^50 - 1 */

FZ_HD uint32_t fzo_f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
FZ_HD float fzo_bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}
FZ_HD uint64_t fzo_f64_bits(double x) {
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
FZ_HD double fzo_bits_f64(uint64_t u) {
  double x;
  memcpy(&x, &u, sizeof x);
  return x;
}
/* A double's low word, and a double from its two words: one register move
 * each on the GPU. */
FZ_HD uint32_t fzo_f64_lo(double x) {
#ifdef __CUDA_ARCH__
  return (uint32_t)__double2loint(x);
#else
  return (uint32_t)fzo_f64_bits(x);
#endif
}
FZ_HD double fzo_f64_words(uint32_t hi, uint32_t lo) {
#ifdef __CUDA_ARCH__
  return __hiloint2double((int)hi, (int)lo);
#else
  return fzo_bits_f64((uint64_t)hi << 32 | lo);
#endif
}
FZ_HD double fzo_fabs(double x) { return x < 0 ? -x : x; }

/* 1.5 * 2^52: t + M has ulp 1 for |t| < 2^51. */
#define FZO_RINT_MAGIC 6755399441055744.0

/* Round to nearest, ties to even, for |t| < 2^51. */
FZ_HD double fzo_rint(double t) { return (t + FZO_RINT_MAGIC) - FZO_RINT_MAGIC; }

/* The interpolation's bin on the level of spacing 2^l (l = 0 .. 3; 4 for
 * the anchors): quant's step in format versions 3 and 4 (lv false), and
 * in version 5 step / min(1.25^l, 2), so that the coarse levels, which
 * the rest is predicted from, are rebuilt closer to the values (the
 * level-wise bound of SZ3's interpolation).  The divisors are exact in
 * binary64 and the division is correctly rounded on every backend; level
 * 0, 7 of every 8 points of a 3-D walk, keeps step. */
FZ_HD double fzo_interp_level_step(double step, unsigned l, bool lv) {
  return !lv || l == 0 ? step
                       : step / (l == 1 ? 1.25 : l == 2 ? 1.5625 : l == 3 ? 1.953125 : 2.0);
}

/* The leading axes of the interpolation's walk (of 3, the stage's pdims
 * last ones its own) that are not interpolated when a chunk runs along
 * its k fastest only (format version 6's FZE_PK_DIMS | k, k < pdims):
 * 3 - k; 0 for k = pdims. */
FZ_HD unsigned fzo_interp_flat(unsigned k, unsigned pdims) { return k < pdims ? 3u - k : 0u; }

/* The origin of the interpolation's walk over the chunk of n > 0
 * elements from s in an array of extents ext (z, y, x) in format version
 * 5: the coordinates of its first whole plane when it reaches into two
 * or more planes, else of its first whole row when it reaches into two or
 * more rows, else of its first element.  A point's level and its pass
 * come from its distance from the origin (modulo 2^64, so a point before
 * it, on the chunk's partial first plane or row, still has one), so
 * every chunk has anchors on its first whole plane or row, where the
 * array's own origin leaves a chunk of a few planes or rows without them
 * and predicts its coarse points from far or from nothing. */
FZ_HD void fzo_interp_origin(const uint64_t ext[3], uint64_t s, uint64_t n, uint64_t o[3]) {
  uint64_t X = ext[2], P = ext[1] * X, e = s + n - 1;
  if (e / P > s / P) {
    o[0] = s / P + (s % P != 0);
    o[1] = o[2] = 0;
  } else if (e / X > s / X) {
    o[0] = s / P;
    o[1] = s / X % ext[1] + (s % X != 0);
    o[2] = 0;
  } else {
    o[0] = s / P;
    o[1] = s / X % ext[1];
    o[2] = s % X;
  }
}

/* Values that must come back bit for bit and are never quantized: NaN, Inf,
 * -0.0 and denormals.  +0.0 is quantized (to bin 0, which decodes to +0.0). */
FZ_HD bool fzo_f32_special(uint32_t b) {
  uint32_t e = (b >> 23) & 0xffu;
  return e == 0xffu || (e == 0 && b != 0);
}
FZ_HD bool fzo_f64_special(uint64_t b) {
  uint64_t e = (b >> 52) & 0x7ffu;
  return e == 0x7ffu || (e == 0 && b != 0);
}

/* ---- ABS / REL: uniform bins of width `step`, checked against `e` ---- */

FZ_HD float fzo_dequant_f32(uint32_t code, double step) {
  return (float)((double)(int32_t)code * step);
}
FZ_HD bool fzo_quant_f32(float x, double inv, double step, double e,
                         uint32_t *code) {
  if (fzo_f32_special(fzo_f32_bits(x)))
    return false;
  double t = (double)x * inv;
  if (!(fzo_fabs(t) <= FZO_QMAX_F32))
    return false;
  double q = fzo_rint(t);
  uint32_t c = (uint32_t)(int32_t)q;
  float r = fzo_dequant_f32(c, step);
  if (!(fzo_fabs((double)x - (double)r) <= e))
    return false;
  *code = c;
  return true;
}

/* The same bins without converting the bin between double and int32, as
 * the GPU's word kernels compute them: the low word of t + M is rint(t) as
 * an int32 (|t| <= FZO_QMAX_F32 < 2^31), (t + M) - M is rint(t) itself, and
 * an int32 word becomes its double by the same sum backwards (the high word
 * of M, less one for a negative word, over the word).  The same IEEE
 * operations as fzo_quant_f32 and fzo_dequant_f32, so the same results
 * (tests/gpu/quant_model.c); an outlier's word is 0.  fabs() instead of
 * fzo_fabs() gives the same comparisons and one instruction on the GPU. */
FZ_HD bool fzo_quant_f32_sum(float x, double inv, double step, double e, uint32_t *code) {
  const double xd = (double)x;
  const double t = xd * inv;
  const double u = t + FZO_RINT_MAGIC;
  const float r = (float)((u - FZO_RINT_MAGIC) * step);
  const uint32_t c = fzo_f64_lo(u);
  /* & rather than &&: every test is cheap and made alike, which keeps the
   * GPU's code free of branches. */
  const bool ok = !fzo_f32_special(fzo_f32_bits(x)) & (fabs(t) <= FZO_QMAX_F32) &
                  (fabs(xd - (double)r) <= e);
  *code = ok ? c : 0;
  return ok;
}
FZ_HD float fzo_dequant_f32_sum(uint32_t code, double step) {
  return (float)((fzo_f64_words(0x43380000u - (code >> 31), code) - FZO_RINT_MAGIC) * step);
}

FZ_HD double fzo_dequant_f64(uint64_t code, double step) {
  return (double)(int64_t)code * step;
}
FZ_HD bool fzo_quant_f64(double x, double inv, double step, double e,
                         uint64_t *code) {
  if (fzo_f64_special(fzo_f64_bits(x)))
    return false;
  double t = x * inv;
  if (!(fzo_fabs(t) <= FZO_QMAX_F64))
    return false;
  double q = fzo_rint(t);
  uint64_t c = (uint64_t)(int64_t)q;
  double r = fzo_dequant_f64(c, step);
  if (!(fzo_fabs(x - r) <= e))
    return false;
  *code = c;
  return true;
}

/* ---- PWREL: the magnitude's bit pattern rounded to a multiple of k ----
 * Consecutive floats differ by at most 2^-23 of their value (2^-52 for
 * doubles), so rounding the bit pattern to a multiple of k = eb * 2^24 moves
 * the value by at most eb of itself; the check below catches the rare binade
 * crossings.  The code is (bin << 1) | sign.  The limit is shaved by 2^-50 so
 * that the rounding of eb * |x| can never admit an error above the exact
 * bound. */

FZ_HD float fzo_pw_dequant_f32(uint32_t code, uint32_t k) {
  return fzo_bits_f32(((code >> 1) * k) | (code << 31));
}
FZ_HD bool fzo_pw_quant_f32(float x, uint32_t k, double eb, uint32_t *code) {
  uint32_t b = fzo_f32_bits(x);
  if (fzo_f32_special(b))
    return false;
  uint32_t mag = b & 0x7fffffffu, sign = b >> 31;
  uint32_t q = (uint32_t)(((uint64_t)mag + k / 2) / k);
  if ((uint64_t)q * k > 0x7f7fffffu)
    return false;
  uint32_t c = (q << 1) | sign;
  float r = fzo_pw_dequant_f32(c, k);
  double lim = eb * fzo_fabs((double)x);
  if (!(fzo_fabs((double)x - (double)r) <= lim - lim * 0x1p-50))
    return false;
  *code = c;
  return true;
}

FZ_HD double fzo_pw_dequant_f64(uint64_t code, uint64_t k) {
  return fzo_bits_f64(((code >> 1) * k) | (code << 63));
}
FZ_HD bool fzo_pw_quant_f64(double x, uint64_t k, double eb, uint64_t *code) {
  uint64_t b = fzo_f64_bits(x);
  if (fzo_f64_special(b))
    return false;
  uint64_t mag = b & 0x7fffffffffffffffull, sign = b >> 63;
  uint64_t q = mag / k + ((mag % k) >= (k - k / 2) ? 1u : 0u);
  if (q > 0x7fefffffffffffffull / k)
    return false;
  uint64_t c = (q << 1) | sign;
  double r = fzo_pw_dequant_f64(c, k);
  double lim = eb * fzo_fabs(x);
  if (!(fzo_fabs(x - r) <= lim - lim * 0x1p-50))
    return false;
  *code = c;
  return true;
}

/* ---- the quantizer's parameters for one job ----
 * From the user's bound and the finite range [lo, hi] of the data (ignored for
 * PWREL), the absolute bound e enforced and the step: the bin width for ABS
 * and REL, the bit step k for PWREL.  step 0 means lossless: the bound cannot
 * be honoured by quantization (no finite value, a constant field under REL, a
 * bound below the type's resolution).  Bins of width 2e would put values
 * right at the bound, where rounding the reconstruction into the element type
 * can tip them over; shaving one ulp of the largest magnitude off each side
 * keeps nearly all of them quantizable.  Computed on the device by the GPU
 * backend, so it too is plain IEEE arithmetic. */
FZ_HD void fzo_quant_params(unsigned mode, double eb, double lo, double hi,
                            bool f32, double *eb_abs, double *step) {
  *eb_abs = 0;
  *step = 0;
  if (mode == 2) {
    /* PWREL: k = floor(eb * 2^24) (2^53 for f64), at least 2 to be worth it;
     * capped at 2^50, where a smaller step only tightens the bound. */
    double k = eb * (f32 ? 16777216.0 : 9007199254740992.0);
    if (!(k < 1125899906842624.0))
      k = 1125899906842624.0;
    double r = fzo_rint(k);
    k = r > k ? r - 1.0 : r;
    if (eb < 1 && k >= 2) {
      *eb_abs = eb;
      *step = k;
    }
    return;
  }
  if (!(lo <= hi))
    return; /* no finite value */
  /* REL: the product is shaved by 2^-50 so that its rounding can never
   * allow more than the exact eb * (hi - lo). */
  double e = mode == 0 ? eb : eb * (hi - lo);
  if (mode == 1)
    e = e - e * 0x1p-50;
  double min_e = f32 ? 1.17549435082228750797e-38 : 2.22507385850720138309e-308;
  if (!(e >= min_e) || !(e <= 1.79769313486231570815e+308))
    return;
  /* ulp of the largest magnitude in the element type: 2^(exponent - 23) for
   * f32 (52 for f64), read off the bit pattern of the double. */
  double maxabs = fzo_fabs(lo) > fzo_fabs(hi) ? fzo_fabs(lo) : fzo_fabs(hi);
  int64_t ex = (int64_t)((fzo_f64_bits(maxabs) >> 52) & 0x7ff) - 1023;
  int64_t ue = ex - (f32 ? 23 : 52);
  if (ue < -1022)
    ue = -1022;
  double u = fzo_bits_f64((uint64_t)(ue + 1023) << 52);
  double s = e > 2 * u ? 2 * (e - u) : e;
  /* A step that overflows cannot be stored (the decoder refuses it); the
   * engine refuses such bounds before work (FZE_EB_ABS_MAX), so this only
   * keeps a caller that skips that check from writing such an archive. */
  if (!(s <= 1.79769313486231570815e+308) || !(1.0 / s <= 1.79769313486231570815e+308))
    return;
  *eb_abs = e;
  *step = s;
}

/* The quantizer's parameters as an archive may hold them (without a fill
 * value): a bound, an absolute bound that the decoder's step serves, and
 * for PWREL (pwrel) an integer step of at least 2 and at most 2^24 (2^53
 * beyond f32).  The parser (fze_quant_params_ok) and the GPU decoder's
 * check of an archive's own header both ask this. */
FZ_HD bool fzo_quant_params_ok(double eb, double eb_abs, double step, bool pwrel, bool f32) {
  if (!(eb > 0) || !isfinite(eb) || !(eb_abs >= 0) || !isfinite(eb_abs))
    return false;
  if (step == 0)
    return true;
  if (!(step > 0) || !isfinite(step))
    return false;
  if (pwrel)
    return step >= 2 && step <= (f32 ? 0x1p24 : 0x1p53) && step == floor(step);
  return true;
}

/* ---- residual maps ---- */

FZ_HD uint32_t fzo_zigzag32(uint32_t d) { return (d << 1) ^ (0u - (d >> 31)); }
FZ_HD uint32_t fzo_unzigzag32(uint32_t z) { return (z >> 1) ^ (0u - (z & 1u)); }
FZ_HD uint64_t fzo_zigzag64(uint64_t d) { return (d << 1) ^ (0ull - (d >> 63)); }
FZ_HD uint64_t fzo_unzigzag64(uint64_t z) { return (z >> 1) ^ (0ull - (z & 1u)); }
/* The same for a word of w bytes (4 or 8), held in 64 bits. */
FZ_HD uint64_t fzo_zigzag_w(uint64_t d, unsigned w) {
  return w == 4 ? fzo_zigzag32((uint32_t)d) : fzo_zigzag64(d);
}
FZ_HD uint64_t fzo_unzigzag_w(uint64_t z, unsigned w) {
  return w == 4 ? fzo_unzigzag32((uint32_t)z) : fzo_unzigzag64(z);
}

#define FZO_NB32 0xaaaaaaaau
#define FZO_NB64 0xaaaaaaaaaaaaaaaaull
FZ_HD uint32_t fzo_nega32(uint32_t d) { return (d + FZO_NB32) ^ FZO_NB32; }
FZ_HD uint32_t fzo_unnega32(uint32_t z) { return (z ^ FZO_NB32) - FZO_NB32; }
FZ_HD uint64_t fzo_nega64(uint64_t d) { return (d + FZO_NB64) ^ FZO_NB64; }
FZ_HD uint64_t fzo_unnega64(uint64_t z) { return (z ^ FZO_NB64) - FZO_NB64; }

/* ---- bit-plane transposition ----
 * Transposes the 8x8 bit matrix whose row r is byte r of x: bit j of byte r
 * becomes bit r of byte j.  The bitshuffle stage runs it on eight words at a
 * time, on both backends. */
FZ_HD uint64_t fzo_transpose8(uint64_t x) {
  uint64_t t;
  t = (x ^ (x >> 7)) & 0x00aa00aa00aa00aaull;
  x = x ^ t ^ (t << 7);
  t = (x ^ (x >> 14)) & 0x0000cccc0000ccccull;
  x = x ^ t ^ (t << 14);
  t = (x ^ (x >> 28)) & 0x00000000f0f0f0f0ull;
  x = x ^ t ^ (t << 28);
  return x;
}

/* log2(v) in 16.16 fixed point, for v >= 1, by integers only: the
 * position of the top bit, then 16 bits of the mantissa by squaring.  The
 * lorenzo and interpolation prices are sums of these, so every backend
 * picks the same predictor. */
FZ_HD uint64_t fzo_log2_q16(uint64_t v) {
#ifdef __CUDA_ARCH__
  unsigned top = 63u - (unsigned)__clzll((long long)v);
#else
  unsigned top = 63u - (unsigned)__builtin_clzll(v);
#endif
  uint64_t m = top >= 30 ? v >> (top - 30) : v << (30 - top); /* [2^30, 2^31) */
  uint64_t y = (uint64_t)top << 16;
  for (unsigned b = 15;; b--) {
    m = (m * m) >> 30;
    if (m >= ((uint64_t)1 << 31)) {
      m >>= 1;
      y |= (uint64_t)1 << b;
    }
    if (b == 0)
      break;
  }
  return y;
}

/* ---- Huffman code lengths (stage_huffman.c, ratio_enc_huff.cuh) ----
 * A round of the code lengths: the two-queue construction over the used
 * symbols' weights in ascending order, a leaf taken before an internal
 * node of equal weight; while the deepest leaf is too deep, every weight
 * is halved rounding up and the round made again. */

/* A symbol's weight in round r: its frequency halved r times rounding up
 * (halving twice rounding up is dividing by 4 rounding up, and so on). */
FZ_HD uint32_t fzo_huff_weight(uint32_t f, unsigned r) {
  return r >= 32 ? (f != 0) : (uint32_t)(((uint64_t)f + ((uint64_t)1 << r) - 1) >> r);
}

/* The tree of the k >= 2 ascending weights in a, built in a itself
 * (Moffat and Katajainen's in-place construction): internal node j is the
 * j-th made and takes slot j, whose leaf is used by then; while it waits
 * to be taken the slot holds its weight, then its parent's number.  Each
 * queue's head weight is kept at hand: a leaf's slot is read before it is
 * written, an internal node's holds its weight until it is taken.  The
 * deepest leaf is leaf 0 (each queue gives its nodes parents in the order
 * it gives them out, so depths fall along either queue), the child of
 * node 0: returns its depth, walked up from there, or any depth above
 * max_len once it is known to be deeper. */
FZ_HD unsigned fzo_huff_tree(uint32_t *a, uint32_t k, unsigned max_len) {
  uint32_t leaf = 0, root = 0, wl = a[0], wi = 0;
  for (uint32_t next = 0; next + 1 < k; next++) {
    uint32_t sum = 0;
    for (int c = 0; c < 2; c++) {
      if (leaf < k && (root >= next || wl <= wi)) {
        sum += wl;
        leaf++;
        wl = leaf < k ? a[leaf] : 0u;
      } else {
        sum += wi;
        a[root++] = next;
        wi = root < next ? a[root] : 0u;
      }
    }
    a[next] = sum;
    if (root == next)
      wi = sum;
  }
  uint32_t p = 0;
  unsigned d = 1;
  while (p != k - 2 && d <= max_len) {
    p = a[p];
    d++;
  }
  return d;
}

/* The leaves' depths from fzo_huff_tree's a, into a (leaf i's at i): the
 * internal nodes' depths, root first; then, depth by depth, the nodes
 * there (twice the internal ones a level up) less the internal ones there
 * are leaves, given to the heaviest leaves not yet given one. */
FZ_HD void fzo_huff_depths(uint32_t *a, uint32_t k) {
  a[k - 2] = 0;
  for (uint32_t j = k - 2; j-- > 0;)
    a[j] = a[a[j]] + 1;
  uint32_t avail = 1, next = k, root = k - 1; /* internal nodes 0 .. root - 1 left */
  for (uint32_t d = 0; avail > 0; d++) {
    uint32_t used = 0;
    while (root > 0 && a[root - 1] == d) {
      used++;
      root--;
    }
    for (; avail > used; avail--)
      a[--next] = d;
    avail = 2 * used;
  }
}

#endif
