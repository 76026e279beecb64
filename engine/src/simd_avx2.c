/*
 * simd_avx2.c - AVX2 versions of the two hottest CPU loops: the f32
 * quantizer (ABS/REL) and the 32-bit bit shuffle, forward and inverse.
 *
 * They compute exactly what the portable loops compute (same IEEE
 * operations, same byte layout); the dispatcher in each stage picks them when
 * the CPU has AVX2, and tests/engine/test_simd.c holds both versions to
 * byte identity.  Rounding to an integer is done with the same 1.5 * 2^52
 * addition as ops.h, and float/double conversions round to nearest as C's
 * casts do.
 */
#include <immintrin.h>
#include <pthread.h>
#include <string.h>

#include "engine.h"
#include "ops.h"

#define AVX2 __attribute__((target("avx2")))

/* Four values: their codes, and a flag per value that failed (outside the
 * bound, not representable, or special). */
typedef struct quant_consts {
  __m256d inv, step, e, max, magic, absmask;
} quant_consts;

AVX2 static inline void quant4(const float *x, const quant_consts *k, uint32_t *c,
                               uint8_t *bad) {
  const __m128i expmask = _mm_set1_epi32(0xff), zero = _mm_setzero_si128();
  __m128 xf = _mm_loadu_ps(x);
  __m256d xd = _mm256_cvtps_pd(xf);
  __m256d t = _mm256_mul_pd(xd, k->inv);
  __m256d fits = _mm256_cmp_pd(_mm256_and_pd(t, k->absmask), k->max, _CMP_LE_OQ);
  __m256d tz = _mm256_and_pd(t, fits);
  __m256d q = _mm256_sub_pd(_mm256_add_pd(tz, k->magic), k->magic);
  __m128i qi = _mm256_cvttpd_epi32(q);
  __m256d rd = _mm256_mul_pd(_mm256_cvtepi32_pd(qi), k->step);
  __m256d r = _mm256_cvtps_pd(_mm256_cvtpd_ps(rd));
  __m256d err = _mm256_and_pd(_mm256_sub_pd(xd, r), k->absmask);
  __m256d ok = _mm256_and_pd(fits, _mm256_cmp_pd(err, k->e, _CMP_LE_OQ));
  /* 64-bit lane masks down to 32-bit lanes: the even halves. */
  __m128i ok32 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(
      _mm256_castpd_si256(ok), _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
  __m128i b = _mm_castps_si128(xf);
  __m128i ex = _mm_and_si128(_mm_srli_epi32(b, 23), expmask);
  __m128i special = _mm_or_si128(
      _mm_cmpeq_epi32(ex, expmask),
      _mm_andnot_si128(_mm_cmpeq_epi32(b, zero), _mm_cmpeq_epi32(ex, zero)));
  __m128i good = _mm_andnot_si128(special, ok32);
  _mm_storeu_si128((__m128i *)c, _mm_and_si128(qi, good));
  __m128i b8 = _mm_packs_epi16(_mm_packs_epi32(good, zero), zero);
  uint32_t flags = ~(uint32_t)_mm_cvtsi128_si32(b8) & 0x01010101u;
  memcpy(bad, &flags, 4);
}

AVX2 void fze_quant_f32_avx2(const float *x, size_t n, double inv, double step,
                             double e, uint32_t *c, uint8_t *bad) {
  const quant_consts k = {
      .inv = _mm256_set1_pd(inv), .step = _mm256_set1_pd(step), .e = _mm256_set1_pd(e),
      .max = _mm256_set1_pd(FZO_QMAX_F32), .magic = _mm256_set1_pd(6755399441055744.0),
      .absmask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffll))};
  size_t i = 0;
  /* Two independent groups per turn keep both multiply pipes busy. */
  for (; i + 8 <= n; i += 8) {
    quant4(x + i, &k, c + i, bad + i);
    quant4(x + i + 4, &k, c + i + 4, bad + i + 4);
  }
  for (; i + 4 <= n; i += 4)
    quant4(x + i, &k, c + i, bad + i);
  for (; i < n; i++) {
    uint32_t code;
    int ok = fzo_quant_f32(x[i], inv, step, e, &code);
    c[i] = ok ? code : 0u;
    bad[i] = (uint8_t)!ok;
  }
}

/* Byte k of each of 32 words, in word order, for k = 0..3. */
AVX2 static inline void gather_lanes(const uint8_t *in, __m256i r[4]) {
  const __m256i byk = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                       0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256i v[4];
  for (int j = 0; j < 4; j++) {
    v[j] = _mm256_loadu_si256((const __m256i *)(in + 32 * j));
    v[j] = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(v[j], byk), perm);
  }
  __m256i t0 = _mm256_unpacklo_epi64(v[0], v[1]), t1 = _mm256_unpackhi_epi64(v[0], v[1]);
  __m256i t2 = _mm256_unpacklo_epi64(v[2], v[3]), t3 = _mm256_unpackhi_epi64(v[2], v[3]);
  r[0] = _mm256_permute2x128_si256(t0, t2, 0x20);
  r[2] = _mm256_permute2x128_si256(t0, t2, 0x31);
  r[1] = _mm256_permute2x128_si256(t1, t3, 0x20);
  r[3] = _mm256_permute2x128_si256(t1, t3, 0x31);
}

/* The inverse of gather_lanes. */
AVX2 static inline void scatter_lanes(__m256i r[4], uint8_t *out) {
  const __m256i byk_inv = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                           0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m256i perm_inv = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  __m256i t0 = _mm256_permute2x128_si256(r[0], r[2], 0x20);
  __m256i t2 = _mm256_permute2x128_si256(r[0], r[2], 0x31);
  __m256i t1 = _mm256_permute2x128_si256(r[1], r[3], 0x20);
  __m256i t3 = _mm256_permute2x128_si256(r[1], r[3], 0x31);
  __m256i v[4];
  v[0] = _mm256_unpacklo_epi64(t0, t1);
  v[1] = _mm256_unpackhi_epi64(t0, t1);
  v[2] = _mm256_unpacklo_epi64(t2, t3);
  v[3] = _mm256_unpackhi_epi64(t2, t3);
  for (int j = 0; j < 4; j++) {
    v[j] = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(v[j], perm_inv), byk_inv);
    _mm256_storeu_si256((__m256i *)(out + 32 * j), v[j]);
  }
}

/* Shuffles the first n32 (a multiple of 32) 4-byte words; pb is the plane
 * length in bytes of the whole chunk. */
AVX2 void fze_bitshuffle32_avx2(const uint8_t *in, size_t n32, size_t pb, uint8_t *out) {
  for (size_t base = 0; base < n32; base += 32) {
    __m256i r[4];
    gather_lanes(in + 4 * base, r);
    size_t g = base / 8;
    for (int k = 0; k < 4; k++) {
      __m256i v = r[k];
      for (int j = 7; j >= 0; j--) {
        uint32_t m = (uint32_t)_mm256_movemask_epi8(v);
        memcpy(out + (size_t)(8 * k + j) * pb + g, &m, 4);
        v = _mm256_add_epi8(v, v);
      }
    }
  }
}

AVX2 void fze_bitunshuffle32_avx2(const uint8_t *in, size_t n32, size_t pb, uint8_t *out) {
  /* Spreads a 32-bit plane mask so byte i holds bit i: broadcast, route
   * mask byte i/8 to byte i, keep bit i%8, compare. */
  const __m256i route = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bitsel = _mm256_set1_epi64x((long long)0x8040201008040201ull);
  for (size_t base = 0; base < n32; base += 32) {
    size_t g = base / 8;
    __m256i r[4];
    for (int k = 0; k < 4; k++) {
      __m256i acc = _mm256_setzero_si256();
      for (int j = 0; j < 8; j++) {
        uint32_t m;
        memcpy(&m, in + (size_t)(8 * k + j) * pb + g, 4);
        __m256i s = _mm256_shuffle_epi8(_mm256_set1_epi32((int)m), route);
        __m256i on = _mm256_cmpeq_epi8(_mm256_and_si256(s, bitsel), bitsel);
        acc = _mm256_or_si256(acc, _mm256_and_si256(on, _mm256_set1_epi8((char)(1 << j))));
      }
      r[k] = acc;
    }
    scatter_lanes(r, out + 4 * base);
  }
}

static int avx2_state = -1; /* -1: not yet probed */

bool fze_have_avx2(void) {
  int s = __atomic_load_n(&avx2_state, __ATOMIC_RELAXED);
  if (s < 0) {
    __builtin_cpu_init();
    s = __builtin_cpu_supports("avx2") ? 1 : 0;
    __atomic_store_n(&avx2_state, s, __ATOMIC_RELAXED);
  }
  return s == 1;
}

void fze_set_avx2(bool on) {
  __builtin_cpu_init();
  __atomic_store_n(&avx2_state, on && __builtin_cpu_supports("avx2") ? 1 : 0,
                   __ATOMIC_RELAXED);
}

/* The finite range of f32 data, 8 values at a time: NaN and Inf are replaced
 * by the neutral +Inf (for the minimum) and -Inf (for the maximum). */
AVX2 void fze_minmax_f32_avx2(const float *x, size_t n, float *lo, float *hi) {
  const __m256 pinf = _mm256_set1_ps(__builtin_inff()), ninf = _mm256_set1_ps(-__builtin_inff());
  const __m256i expmask = _mm256_set1_epi32(0x7f800000);
  __m256 vlo = pinf, vhi = ninf;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    __m256i ex = _mm256_and_si256(_mm256_castps_si256(v), expmask);
    __m256 nonfinite = _mm256_castsi256_ps(_mm256_cmpeq_epi32(ex, expmask));
    vlo = _mm256_min_ps(vlo, _mm256_blendv_ps(v, pinf, nonfinite));
    vhi = _mm256_max_ps(vhi, _mm256_blendv_ps(v, ninf, nonfinite));
  }
  float l[8], h[8];
  _mm256_storeu_ps(l, vlo);
  _mm256_storeu_ps(h, vhi);
  float a = *lo, b = *hi;
  for (int j = 0; j < 8; j++) {
    a = l[j] < a ? l[j] : a;
    b = h[j] > b ? h[j] : b;
  }
  for (; i < n; i++) {
    float v = x[i];
    if (v < a && v != -__builtin_inff())
      a = v;
    if (v > b && v != __builtin_inff())
      b = v;
  }
  *lo = a;
  *hi = b;
}

/* Zero-byte elimination of n bytes: the bitmap (1 = nonzero) and the
 * nonzero bytes in order, 8 bytes at a time through a table of shuffles.
 * `kept` needs 16 bytes of slack.  Returns the number of kept bytes. */
static uint8_t compact_lut[256][16];

/* Built exactly once: a second builder would refill entries (0x80, the
 * shuffle's zero, first) under a thread already using the table, and that
 * thread would silently drop nonzero bytes. */
static void compact_init(void) {
  for (unsigned m = 0; m < 256; m++) {
    unsigned k = 0;
    memset(compact_lut[m], 0x80, 16);
    for (unsigned j = 0; j < 8; j++)
      if (m & (1u << j))
        compact_lut[m][k++] = (uint8_t)j;
  }
}

AVX2 size_t fze_zero_elim_avx2(const uint8_t *in, size_t n, uint8_t *bm, uint8_t *kept) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, compact_init);
  size_t k = 0, i = 0;
  const __m256i zero = _mm256_setzero_si256();
  for (; i + 32 <= n; i += 32) {
    __m256i v = _mm256_loadu_si256((const __m256i *)(in + i));
    uint32_t nz = ~(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, zero));
    memcpy(bm + i / 8, &nz, 4);
    if (nz == 0)
      continue;
    for (unsigned j = 0; j < 4; j++) {
      unsigned m = (nz >> (8 * j)) & 0xff;
      __m128i src = _mm_loadl_epi64((const __m128i *)(in + i + 8 * j));
      __m128i lut = _mm_loadu_si128((const __m128i *)compact_lut[m]);
      _mm_storel_epi64((__m128i *)(kept + k), _mm_shuffle_epi8(src, lut));
      k += (size_t)__builtin_popcount(m);
    }
  }
  for (; i < n; i++) {
    uint8_t b = in[i];
    if (i % 8 == 0)
      bm[i / 8] = 0;
    kept[k] = b;
    k += b != 0;
    bm[i / 8] |= (uint8_t)((b != 0) << (i % 8));
  }
  return k;
}

/* The inverse: each bitmap byte m spreads popcount(m) kept bytes over its 8
 * positions through a shuffle table (0x80 writes a zero).  Runs while 8
 * kept bytes can be loaded inside `avail`, the bytes present; returns the
 * positions done and their kept bytes in *k, for the portable loop to go
 * on from. */
static uint8_t expand_lut[256][8];

static void expand_init(void) {
  for (unsigned m = 0; m < 256; m++) {
    unsigned k = 0;
    for (unsigned j = 0; j < 8; j++)
      expand_lut[m][j] = m & (1u << j) ? (uint8_t)k++ : 0x80;
  }
}

AVX2 size_t fze_zero_restore_avx2(const uint8_t *bm, const uint8_t *kept, size_t avail,
                                  size_t n, uint8_t *out, size_t *k_out) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, expand_init);
  size_t k = 0, i = 0;
  for (; i + 8 <= n && k + 8 <= avail; i += 8) {
    unsigned m = bm[i / 8];
    __m128i src = _mm_loadl_epi64((const __m128i *)(kept + k));
    __m128i lut = _mm_loadl_epi64((const __m128i *)expand_lut[m]);
    _mm_storel_epi64((__m128i *)(out + i), _mm_shuffle_epi8(src, lut));
    k += (size_t)__builtin_popcount(m);
  }
  *k_out = k;
  return i;
}

/* The inverse of the difference stage for 32-bit words: unmap eight words
 * (zigzag or negabinary), take their running sum inside the vector (two
 * shifted adds per 128-bit half, then the low half's total into the high
 * half), and add the sum so far.  Integer sums wrap as the portable loop's
 * do, so the words are the same.  in may equal out. */
AVX2 void fze_diff_decode32_avx2(const uint32_t *in, uint32_t *out, size_t n, int nega) {
  const __m256i nb = _mm256_set1_epi32((int)0xaaaaaaaau), one = _mm256_set1_epi32(1);
  const __m256i zero = _mm256_setzero_si256(), last = _mm256_set1_epi32(7);
  __m256i carry = zero;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i z = _mm256_loadu_si256((const __m256i *)(in + i));
    __m256i d = nega ? _mm256_sub_epi32(_mm256_xor_si256(z, nb), nb)
                     : _mm256_xor_si256(_mm256_srli_epi32(z, 1),
                                        _mm256_sub_epi32(zero, _mm256_and_si256(z, one)));
    d = _mm256_add_epi32(d, _mm256_slli_si256(d, 4));
    d = _mm256_add_epi32(d, _mm256_slli_si256(d, 8));
    __m256i low_total = _mm256_shuffle_epi32(d, 0xff);
    d = _mm256_add_epi32(d, _mm256_permute2x128_si256(low_total, low_total, 0x08));
    d = _mm256_add_epi32(d, carry);
    _mm256_storeu_si256((__m256i *)(out + i), d);
    carry = _mm256_permutevar8x32_epi32(d, last);
  }
  uint32_t prev = i ? out[i - 1] : 0;
  for (; i < n; i++) {
    uint32_t z = in[i];
    prev += nega ? (z ^ 0xaaaaaaaau) - 0xaaaaaaaau : fzo_unzigzag32(z);
    out[i] = prev;
  }
}

/* Bit planes of a block of 32 residuals of 32 bits: plane p is the sign
 * bits of the residuals shifted left by 31 - p. */
AVX2 void fze_pack_planes32_avx2(const uint32_t *r, unsigned bits, uint8_t *out) {
  __m256i v[4];
  for (int j = 0; j < 4; j++)
    v[j] = _mm256_loadu_si256((const __m256i *)(r + 8 * j));
  for (unsigned p = 0; p < bits; p++) {
    __m128i sh = _mm_cvtsi32_si128((int)(31 - p));
    uint32_t plane = 0;
    for (int j = 0; j < 4; j++)
      plane |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_sll_epi32(v[j], sh)))
               << (8 * j);
    memcpy(out + 4 * p, &plane, 4);
  }
}

/* The inverse: residual i gets bit p from bit i of plane p. */
AVX2 void fze_unpack_planes32_avx2(const uint8_t *in, unsigned bits, uint32_t *r) {
  const __m256i lane = _mm256_setr_epi32(1 << 0, 1 << 1, 1 << 2, 1 << 3, 1 << 4, 1 << 5,
                                         1 << 6, 1 << 7);
  __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(),
                    _mm256_setzero_si256(), _mm256_setzero_si256()};
  for (unsigned p = 0; p < bits; p++) {
    uint32_t plane;
    memcpy(&plane, in + 4 * p, 4);
    __m256i one = _mm256_set1_epi32((int)(1u << p));
    for (int j = 0; j < 4; j++) {
      __m256i m = _mm256_set1_epi32((int)((plane >> (8 * j)) & 0xff));
      __m256i on = _mm256_cmpeq_epi32(_mm256_and_si256(m, lane), lane);
      acc[j] = _mm256_or_si256(acc[j], _mm256_and_si256(on, one));
    }
  }
  for (int j = 0; j < 4; j++)
    _mm256_storeu_si256((__m256i *)(r + 8 * j), acc[j]);
}

/* ---- the interpolation's finest level (stage_interp.c) ---- */

/* At h = 1 a pass's points are every other word of a row, so four points
 * are the even lanes of eight words, loaded as eight and picked.  Their
 * rebuilt values go to pv one by one: along x (off = 1) the next group's
 * neighbours lie between them, and a load that spans words just stored
 * waits for the stores to finish, so each group's neighbours are loaded
 * before the group before it is stored (the words loaded that are points
 * of the pass are not used). */
AVX2 static inline __m256d even_pd(const double *p) {
  __m256d lo = _mm256_loadu_pd(p), hi = _mm256_loadu_pd(p + 4);
  return _mm256_permute4x64_pd(_mm256_unpacklo_pd(lo, hi), 0xd8);
}

AVX2 static inline void put_even_pd(double *p, __m256d v) {
  __m128d lo = _mm256_castpd256_pd128(v), hi = _mm256_extractf128_pd(v, 1);
  _mm_storel_pd(p, lo);
  _mm_storeh_pd(p + 2, lo);
  _mm_storel_pd(p + 4, hi);
  _mm_storeh_pd(p + 6, hi);
}

AVX2 static inline __m128i even_epi32(const void *p) {
  const __m256i pick = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  return _mm256_castsi256_si128(
      _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)p), pick));
}

/* Into the even lanes of the eight 32-bit words at p, the odd ones kept. */
AVX2 static inline void put_even_epi32(void *p, __m128i v) {
  const __m256i spread = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
  __m256i old = _mm256_loadu_si256((const __m256i *)p);
  __m256i x = _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(v), spread);
  _mm256_storeu_si256((__m256i *)p, _mm256_blend_epi32(old, x, 0x55));
}

/* The cubic (-a + 9 b + 9 c - d) / 16 of the neighbours at -3off, -off,
 * +off, +3off of four points from i, in point()'s order of operations. */
AVX2 static inline __m256d cubic4(const double *pv, size_t i, size_t off) {
  const __m256d nine = _mm256_set1_pd(9.0), sixteenth = _mm256_set1_pd(0.0625),
                sign = _mm256_set1_pd(-0.0);
  __m256d a = even_pd(pv + i - 3 * off), b = even_pd(pv + i - off), c = even_pd(pv + i + off),
          d = even_pd(pv + i + 3 * off);
  __m256d s = _mm256_add_pd(_mm256_xor_pd(a, sign), _mm256_mul_pd(nine, b));
  s = _mm256_sub_pd(_mm256_add_pd(s, _mm256_mul_pd(nine, c)), d);
  return _mm256_mul_pd(s, sixteenth);
}

/* Whether the group of four points from i may be done here: its words
 * i - 3 off .. i + 3 off + 7 in the chunk, and (exact not NULL) none of its
 * values already known. */
static inline bool group_ok(const uint8_t *exact, size_t n, size_t i, size_t left, size_t off) {
  if (left < 4 || i < 3 * off || i + 3 * off + 8 > n)
    return false;
  uint64_t e = 0;
  if (exact != NULL)
    memcpy(&e, exact + i, 8);
  return (e & UINT64_C(0x00ff00ff00ff00ff)) == 0;
}

/* Whether the group of four points from i may be done here (group_ok),
 * and then its prediction in *p. */
AVX2 static inline bool group_ahead(const uint8_t *exact, const double *pv, size_t n, size_t i,
                                    size_t left, size_t off, __m256d *p) {
  if (!group_ok(exact, n, i, left, off))
    return false;
  *p = cubic4(pv, i, off);
  return true;
}

AVX2 size_t fze_interp_dec_f32_avx2(const uint32_t *codes, unsigned cs, float *out, double *pv,
                                    const uint8_t *exact, size_t n, size_t i, size_t cnt,
                                    size_t off, double step) {
  const __m256d vstep = _mm256_set1_pd(step);
  const __m128i one = _mm_set1_epi32(1), zero = _mm_setzero_si128();
  const __m256i spread = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
  size_t done = 0;
  __m256d p;
  if (!group_ahead(exact, pv, n, i, cnt, off, &p))
    return 0;
  for (;;) {
    __m128i z = cs == 1 ? _mm_loadu_si128((const __m128i *)codes) : even_epi32(codes);
    codes += 4 * cs;
    __m128i q = _mm_xor_si128(_mm_srli_epi32(z, 1), _mm_sub_epi32(zero, _mm_and_si128(z, one)));
    __m128 r = _mm256_cvtpd_ps(_mm256_add_pd(p, _mm256_mul_pd(_mm256_cvtepi32_pd(q), vstep)));
    bool more = group_ahead(exact, pv, n, i + 8, cnt - done - 4, off, &p);
    __m256 old = _mm256_loadu_ps(out + i);
    __m256 x = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(r), spread);
    _mm256_storeu_ps(out + i, _mm256_blend_ps(old, x, 0x55));
    put_even_pd(pv + i, _mm256_cvtps_pd(r));
    done += 4;
    i += 8;
    if (!more)
      return done;
  }
}

AVX2 size_t fze_interp_enc_f32_avx2(const float *x, uint32_t *codes, unsigned cs, uint8_t *bad,
                                    double *pv, size_t n, size_t i, size_t cnt, size_t off,
                                    double inv, double step, double e) {
  const __m256d vinv = _mm256_set1_pd(inv), vstep = _mm256_set1_pd(step),
                ve = _mm256_set1_pd(e), qmax = _mm256_set1_pd(FZO_QMAX_F32),
                magic = _mm256_set1_pd(FZO_RINT_MAGIC),
                absmask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffff));
  const __m128i expmask = _mm_set1_epi32(0xff), zero = _mm_setzero_si128();
  size_t done = 0;
  __m256d p;
  if (!group_ahead(NULL, pv, n, i, cnt, off, &p))
    return 0;
  for (;;) {
    __m128i b = even_epi32(x + i);
    __m256d v = _mm256_cvtps_pd(_mm_castsi128_ps(b));
    __m128i ex = _mm_and_si128(_mm_srli_epi32(b, 23), expmask);
    __m128i inf_nan = _mm_cmpeq_epi32(ex, expmask);
    __m128i special = _mm_or_si128(
        inf_nan, _mm_andnot_si128(_mm_cmpeq_epi32(b, zero), _mm_cmpeq_epi32(ex, zero)));
    __m256d t = _mm256_mul_pd(_mm256_sub_pd(v, p), vinv);
    __m256d fits = _mm256_andnot_pd(_mm256_castsi256_pd(_mm256_cvtepi32_epi64(special)),
                                    _mm256_cmp_pd(_mm256_and_pd(t, absmask), qmax, _CMP_LE_OQ));
    __m256d q = _mm256_sub_pd(_mm256_add_pd(_mm256_and_pd(t, fits), magic), magic);
    __m256d r = _mm256_cvtps_pd(_mm256_cvtpd_ps(_mm256_add_pd(p, _mm256_mul_pd(q, vstep))));
    __m256d ok = _mm256_and_pd(
        fits, _mm256_cmp_pd(_mm256_and_pd(_mm256_sub_pd(v, r), absmask), ve, _CMP_LE_OQ));
    __m128i qi = _mm256_cvttpd_epi32(_mm256_and_pd(q, ok));
    /* The rebuilt value, or the value itself where it fails (0 for NaN
     * and Inf). */
    __m256d own = _mm256_andnot_pd(_mm256_castsi256_pd(_mm256_cvtepi32_epi64(inf_nan)), v);
    __m256d keep = _mm256_blendv_pd(own, r, ok);
    bool more = group_ahead(NULL, pv, n, i + 8, cnt - done - 4, off, &p);
    __m128i zz = _mm_xor_si128(_mm_slli_epi32(qi, 1), _mm_srai_epi32(qi, 31));
    if (cs == 1)
      _mm_storeu_si128((__m128i *)codes, zz);
    else
      put_even_epi32(codes, zz);
    codes += 4 * cs;
    unsigned okm = (unsigned)_mm256_movemask_pd(ok);
    for (unsigned k = 0; k < 4; k++)
      bad[i + 2 * k] = (uint8_t)(~okm >> k & 1u);
    put_even_pd(pv + i, keep);
    done += 4;
    i += 8;
    if (!more)
      return done;
  }
}
