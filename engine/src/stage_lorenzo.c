/*
 * stage_lorenzo.c - N-dimensional Lorenzo prediction on the quantizer's
 * integer words (the ratio preset's predictor).
 *
 * The array, its dimensions folded into pdims = 1..3 (extents Z, Y, X,
 * slowest first, leading ones 1), is cut into chunks along its flat C
 * order as every chain cuts it.  Each word is predicted from its
 * neighbours one step back along the axes it has them on (x > 0, y > 0,
 * z > 0): the 3-D Lorenzo predictor a + b + c - ab - ac - bc + abc and its
 * 2-D and 1-D faces.  A neighbour is used only when it lies inside the same
 * chunk, so chunks stay independent: where the farthest corner the axes
 * need lies before the chunk's first element, the slowest axis is dropped
 * (z, then y, then x) until it does not.  The residual, modulo the word
 * width, is zigzag-mapped; the decoder rebuilds each word from the ones
 * before it with the same arithmetic, so the stage is exact for any words.
 * Since quant has already fixed every reconstructed value (and kept every
 * outlier exactly), prediction on its words cannot touch the bound.
 *
 * Neighbours along a coarse axis (a few vertical levels) can predict worse
 * than none, so the encoder tries every k = 1..pdims for each chunk and
 * keeps the cheapest (fze_lorenzo_cost, the lowest k of equals); the chunk
 * names its k in one byte (codec.c).
 */
#include <string.h>

#include "engine.h"
#include "ops.h"

/* The offsets (in elements) of the corner a mask of axes needs. */
static uint64_t corner(unsigned m, uint64_t sy, uint64_t sz) {
  return (m & 1u) + ((m & 2u) ? sy : 0) + ((m & 4u) ? sz : 0);
}

/* Drops the slowest axes until the corner lies at or after the chunk's
 * first element (i elements before the current one). */
static unsigned fit(unsigned m, uint64_t i, uint64_t sy, uint64_t sz) {
  while (m && corner(m, sy, sz) > i)
    m &= ~(1u << (31 - __builtin_clz(m)));
  return m;
}

#define COST_STEP FZE_COST_STEP
#define COST_DIRECT FZE_COST_DIRECT

/* The bits an order-0 entropy coder would spend on every fifth residual
 * (i = 0, 5, 10, ...), in 16.16 fixed point.  The stride is odd so that the
 * sample does not line up with the interpolation's power-of-two levels
 * (every fourth would, on some extents, and price its coarse points
 * only).  Residuals below 64 are
 * symbols of their own, larger ones one symbol per bit length plus their
 * bits.  Integers only, so every backend picks the same predictor. */
/* The price's histogram: residuals below COST_DIRECT are symbols of their
 * own, larger ones one symbol per bit length plus their bits; four
 * histograms side by side, so that runs of one value (zeros, mostly) do
 * not wait on their own increments. */
typedef struct cost_hist {
  uint32_t h[4][COST_DIRECT + 65];
  uint64_t extra, cnt;
} cost_hist;

static inline void cost_add(cost_hist *ch, uint64_t v) {
  /* v's bit length where it counts (v >= COST_DIRECT), with no branch on
   * v = 0: at coarse bounds about half the residuals are. */
  unsigned b = 64u - (unsigned)__builtin_clzll(v | 1u);
  unsigned big = v >= COST_DIRECT;
  ch->h[ch->cnt & 3][big ? COST_DIRECT + b : (unsigned)v]++;
  ch->extra += big ? b : 0;
  ch->cnt++;
}

static uint64_t cost_bits(const cost_hist *ch) {
  if (ch->cnt == 0)
    return 0;
  uint64_t ln = fzo_log2_q16(ch->cnt), bits = ch->extra << 16;
  for (unsigned s = 0; s < COST_DIRECT + 65; s++) {
    uint64_t c = (uint64_t)ch->h[0][s] + ch->h[1][s] + ch->h[2][s] + ch->h[3][s];
    if (c)
      bits += c * (ln - fzo_log2_q16(c));
  }
  return bits;
}

#define DEFINE_LORENZO(W, T)                                                   \
  static inline T zz##W(T d) {                                                 \
    return (T)((T)(d << 1) ^ (T)(0 - (T)(d >> (W - 1))));                      \
  }                                                                            \
  static inline T unzz##W(T z) { return (T)((T)(z >> 1) ^ (T)(0 - (T)(z & 1))); } \
  /* The prediction of v[i] from the axes in m (offsets 1, sy, sz). */        \
  static inline T pred##W(const T *v, size_t i, unsigned m, size_t sy,         \
                          size_t sz) {                                         \
    switch (m) {                                                               \
    case 0: return 0;                                                          \
    case 1: return v[i - 1];                                                   \
    case 2: return v[i - sy];                                                  \
    case 4: return v[i - sz];                                                  \
    case 3: return (T)(v[i - 1] + v[i - sy] - v[i - 1 - sy]);                  \
    case 5: return (T)(v[i - 1] + v[i - sz] - v[i - 1 - sz]);                  \
    case 6: return (T)(v[i - sy] + v[i - sz] - v[i - sy - sz]);                \
    default:                                                                   \
      return (T)(v[i - 1] + v[i - sy] + v[i - sz] - v[i - 1 - sy] -            \
                 v[i - 1 - sz] - v[i - sy - sz] + v[i - 1 - sy - sz]);         \
    }                                                                          \
  }                                                                            \
  /* One pass over the rows of a chunk; DEC: decode in place of enc.  Rows  \
   * whose every x > 0 element has all its axes take the tight loop. */      \
  static void run##W(const uint64_t *ext, const T *in, T *out, size_t n,      \
                     uint64_t first, int dec) {                                \
    uint64_t Y = ext[1], X = ext[2];                                           \
    size_t sy = (size_t)X, sz = (size_t)(X * Y);                               \
    const T *v = dec ? out : in; /* the words predictions read */            \
    uint64_t end = first + n;                                                  \
    for (uint64_t r = first / X; r * X < end; r++) {                           \
      uint64_t R = r * X, y = r % Y, z = r / Y;                                \
      uint64_t lo = R > first ? R : first, hi = R + X < end ? R + X : end;     \
      unsigned ax = (y > 0 ? 2u : 0u) | (z > 0 ? 4u : 0u);                     \
      unsigned full = 1u | ax;                                                 \
      size_t i = (size_t)(lo - first), stop = (size_t)(hi - first);            \
      /* The first element of the row, and any before the corner fits. */    \
      for (; i < stop; i++) {                                                  \
        uint64_t x = first + i - R;                                            \
        unsigned m = fit((x > 0 ? 1u : 0u) | ax, i, sy, sz);                   \
        if (x > 0 && m == full)                                                \
          break;                                                               \
        T p = pred##W(v, i, m, sy, sz);                                        \
        if (dec)                                                               \
          out[i] = (T)(unzz##W(in[i]) + p);                                    \
        else                                                                   \
          out[i] = zz##W((T)(in[i] - p));                                      \
      }                                                                        \
      if (dec && i < stop) {                                                   \
        /* The word before, carried in a register rather than read back   \
         * from the store just made; the rest of the prediction is from    \
         * rows already done (the same sum, modulo the width). */           \
        T prev = out[i - 1];                                                   \
        if (full == 7)                                                         \
          for (; i < stop; i++) {                                              \
            T rest = (T)(out[i - sy] + out[i - sz] - out[i - 1 - sy] -            \
                      out[i - 1 - sz] - out[i - sy - sz] + out[i - 1 - sy - sz]); \
            prev = (T)(unzz##W(in[i]) + (T)(prev + rest));                        \
            out[i] = prev;                                                     \
          }                                                                    \
        else if (full == 3)                                                    \
          for (; i < stop; i++) {                                              \
            T rest = (T)(out[i - sy] - out[i - 1 - sy]);                          \
            prev = (T)(unzz##W(in[i]) + (T)(prev + rest));                        \
            out[i] = prev;                                                     \
          }                                                                    \
        else if (full == 5)                                                    \
          for (; i < stop; i++) {                                              \
            T rest = (T)(out[i - sz] - out[i - 1 - sz]);                          \
            prev = (T)(unzz##W(in[i]) + (T)(prev + rest));                        \
            out[i] = prev;                                                     \
          }                                                                    \
        else                                                                   \
          for (; i < stop; i++) {                                              \
            prev = (T)(unzz##W(in[i]) + prev);                                 \
            out[i] = prev;                                                     \
          }                                                                    \
      } else if (!dec && full == 7)                                            \
        for (; i < stop; i++)                                                  \
          out[i] = zz##W((T)(in[i] - pred##W(in, i, 7, sy, sz)));             \
      else if (!dec && full == 3)                                              \
        for (; i < stop; i++)                                                  \
          out[i] = zz##W((T)(in[i] - pred##W(in, i, 3, sy, sz)));             \
      else if (!dec && full == 1)                                              \
        for (; i < stop; i++)                                                  \
          out[i] = zz##W((T)(in[i] - in[i - 1]));                              \
      else if (!dec)                                                           \
        for (; i < stop; i++)                                                  \
          out[i] = zz##W((T)(in[i] - pred##W(in, i, full, sy, sz)));          \
    }                                                                          \
  }                                                                            \
  /* The residuals run##W would make at i = 0, COST_STEP, 2 COST_STEP, ...  \
   * (the axes of each as there), into the price's histogram, without       \
   * making the others. */                                                   \
  static void price##W(const uint64_t *ext, const T *in, size_t n,            \
                       uint64_t first, cost_hist *ch) {                       \
    uint64_t Y = ext[1], X = ext[2];                                           \
    size_t sy = (size_t)X, sz = (size_t)(X * Y);                               \
    uint64_t end = first + n;                                                  \
    for (uint64_t r = first / X; r * X < end; r++) {                           \
      uint64_t R = r * X, y = r % Y, z = r / Y;                                \
      uint64_t lo = R > first ? R : first, hi = R + X < end ? R + X : end;     \
      unsigned ax = (y > 0 ? 2u : 0u) | (z > 0 ? 4u : 0u);                     \
      unsigned full = 1u | ax;                                                 \
      size_t i = (size_t)(lo - first), stop = (size_t)(hi - first);            \
      size_t need = (size_t)corner(full, sy, sz);                              \
      i = (i + COST_STEP - 1) / COST_STEP * COST_STEP;                         \
      for (; i < stop; i += COST_STEP) {                                       \
        uint64_t x = first + i - R;                                            \
        if (x > 0 && i >= need)                                                \
          break;                                                               \
        unsigned m = fit((x > 0 ? 1u : 0u) | ax, i, sy, sz);                   \
        cost_add(ch, (uint64_t)zz##W((T)(in[i] - pred##W(in, i, m, sy, sz)))); \
      }                                                                        \
      if (full == 7)                                                           \
        for (; i < stop; i += COST_STEP)                                       \
          cost_add(ch, (uint64_t)zz##W((T)(in[i] - pred##W(in, i, 7, sy, sz)))); \
      else if (full == 3)                                                      \
        for (; i < stop; i += COST_STEP)                                       \
          cost_add(ch, (uint64_t)zz##W((T)(in[i] - pred##W(in, i, 3, sy, sz)))); \
      else if (full == 1)                                                      \
        for (; i < stop; i += COST_STEP)                                       \
          cost_add(ch, (uint64_t)zz##W((T)(in[i] - pred##W(in, i, 1, sy, sz)))); \
      else                                                                     \
        for (; i < stop; i += COST_STEP)                                       \
          cost_add(ch, (uint64_t)zz##W((T)(in[i] - pred##W(in, i, full, sy, sz)))); \
    }                                                                          \
  }

DEFINE_LORENZO(8, uint8_t)
DEFINE_LORENZO(16, uint16_t)
DEFINE_LORENZO(32, uint32_t)
DEFINE_LORENZO(64, uint64_t)

static void run(const fze_stage *st, unsigned k, unsigned w, const void *in, void *out,
                size_t n, uint64_t first, int dec) {
  const uint64_t *ext = st->ext[k - 1];
  switch (w) {
  case 1: run8(ext, in, out, n, first, dec); break;
  case 2: run16(ext, in, out, n, first, dec); break;
  case 4: run32(ext, in, out, n, first, dec); break;
  default: run64(ext, in, out, n, first, dec); break;
  }
}

void fze_lorenzo_encode(const fze_stage *st, unsigned k, unsigned w, const void *in,
                        void *out, size_t n, uint64_t first) {
  run(st, k, w, in, out, n, first, 0);
}

void fze_lorenzo_decode(const fze_stage *st, unsigned k, unsigned w, const void *in,
                        void *out, size_t n, uint64_t first) {
  run(st, k, w, in, out, n, first, 1);
}

static uint64_t cost_every(unsigned w, const void *res, size_t n, size_t step) {
  cost_hist ch;
  memset(&ch, 0, sizeof ch);
  const uint8_t *p = res;
  for (size_t i = 0; i < n; i += step) {
    uint64_t v;
    switch (w) {
    case 1: v = p[i]; break;
    case 2: { uint16_t x; memcpy(&x, p + 2 * i, 2); v = x; break; }
    case 4: { uint32_t x; memcpy(&x, p + 4 * i, 4); v = x; break; }
    default: memcpy(&v, p + 8 * i, 8); break;
    }
    cost_add(&ch, v);
  }
  return cost_bits(&ch);
}

/* What fze_lorenzo_cost() would say of fze_lorenzo_encode()'s residuals
 * in k dims, from the words alone: only the sampled residuals are made, so
 * pricing every k costs a fraction of encoding one. */
uint64_t fze_lorenzo_price(const fze_stage *st, unsigned k, unsigned w, const void *words,
                           size_t n, uint64_t first) {
  cost_hist ch;
  memset(&ch, 0, sizeof ch);
  const uint64_t *ext = st->ext[k - 1];
  switch (w) {
  case 1: price8(ext, words, n, first, &ch); break;
  case 2: price16(ext, words, n, first, &ch); break;
  case 4: price32(ext, words, n, first, &ch); break;
  default: price64(ext, words, n, first, &ch); break;
  }
  return cost_bits(&ch);
}

uint64_t fze_lorenzo_cost(unsigned w, const void *res, size_t n) {
  return cost_every(w, res, n, COST_STEP);
}

uint64_t fze_words_cost(unsigned w, const void *words, size_t n) {
  return cost_every(w, words, n, 1);
}
