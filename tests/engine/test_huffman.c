/*
 * test_huffman.c - the huffman stage's code lengths against their
 * definition.  The stage sorts once and builds each round's tree in place
 * (stage_huffman.c); the definition here is written plainly: every round
 * sorts the used symbols by (weight, symbol) again, builds the tree with
 * two queues and explicit parents (a leaf before an internal node of equal
 * weight), takes each leaf's depth, and halves every weight (rounding up)
 * while the deepest leaf is deeper than 12 bits.  Every length must be the
 * same, or archives would change.
 */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "gen.h"

#define SYMS 4096u
#define MAX_LEN 12u

static uint32_t weight_of[SYMS];

static int by_weight(const void *a, const void *b) {
  uint16_t x = *(const uint16_t *)a, y = *(const uint16_t *)b;
  if (weight_of[x] != weight_of[y])
    return weight_of[x] < weight_of[y] ? -1 : 1;
  return x < y ? -1 : x > y;
}

/* The definition; returns the rounds it took. */
static unsigned reference_lengths(const uint32_t *freq, unsigned nsym, uint8_t *len) {
  static uint16_t order[SYMS], parent[2 * SYMS];
  static uint32_t nw[SYMS];
  static uint8_t depth[2 * SYMS];
  size_t k = 0;
  if (nsym > SYMS)
    return 0;
  for (unsigned s = 0; s < nsym; s++) {
    weight_of[s] = freq[s];
    len[s] = 0;
    if (freq[s])
      order[k++] = (uint16_t)s;
  }
  if (k <= 1) {
    if (k)
      len[order[0]] = 1;
    return 1;
  }
  for (unsigned round = 1;; round++) {
    qsort(order, k, sizeof order[0], by_weight);
    size_t li = 0, ii = 0;
    for (size_t made = 0; made + 1 < k; made++) {
      uint32_t sum = 0;
      for (int c = 0; c < 2; c++) {
        size_t id;
        if (li < k && (ii >= made || weight_of[order[li]] <= nw[ii])) {
          sum += weight_of[order[li]];
          id = li++;
        } else {
          sum += nw[ii];
          id = k + ii++;
        }
        parent[id] = (uint16_t)(k + made);
      }
      nw[made] = sum;
    }
    size_t root = 2 * k - 2;
    depth[root] = 0;
    unsigned maxd = 0;
    for (size_t id = root; id-- > 0;) {
      depth[id] = (uint8_t)(depth[parent[id]] + 1);
      if (id < k && depth[id] > maxd)
        maxd = depth[id];
    }
    if (maxd <= MAX_LEN) {
      for (size_t i = 0; i < k; i++)
        len[order[i]] = depth[i];
      return round;
    }
    for (size_t i = 0; i < k; i++) {
      uint32_t *wt = &weight_of[order[i]];
      *wt = (*wt >> 1) + (*wt & 1);
    }
  }
}

enum shape { ZIPF, GEOMETRIC, FIBONACCI, TIES, ONE_HEAVY, UNIFORM, SPARSE, SHAPES };

/* nsym frequencies of a shape, at least one not 0; their total fits in
 * 32 bits, as the tree's sums must (a chunk's are at most its words). */
static void make_freq(enum shape sh, unsigned nsym, uint64_t *seed, uint32_t *freq) {
  memset(freq, 0, nsym * sizeof *freq);
  uint32_t fa = 1, fb = 1;
  for (unsigned s = 0; s < nsym; s++) {
    uint64_t r = gen_rand(seed);
    switch (sh) {
    case ZIPF: freq[s] = (uint32_t)(1000000u / (s + 1)) * (r % 4 != 0); break;
    case GEOMETRIC: freq[s] = s < 24 ? 1u << (24 - s) : (uint32_t)(r % 3); break;
    case FIBONACCI: /* the deepest trees: each weight the sum of the two before */
      freq[s] = s < 30 ? fa : (uint32_t)(r % 2);
      fb += fa;
      fa = fb - fa;
      break;
    case TIES: freq[s] = 1u + (uint32_t)(r % 3) * 7u; break;
    case ONE_HEAVY: freq[s] = s == nsym / 3 ? 60000000u : (uint32_t)(r % 5); break;
    case UNIFORM: freq[s] = 1u + (uint32_t)(r % 100000u); break;
    case SPARSE: freq[s] = r % 61 == 0 ? (uint32_t)(r >> 40) % 5000u + 1u : 0u; break;
    default: break;
    }
  }
  if (sh == ZIPF || sh == FIBONACCI) { /* shuffle, so symbol order is not weight order */
    for (unsigned s = nsym; s > 1; s--) {
      unsigned j = (unsigned)(gen_rand(seed) % s);
      uint32_t t = freq[s - 1];
      freq[s - 1] = freq[j];
      freq[j] = t;
    }
  }
  freq[gen_rand(seed) % nsym] |= 1u;
}

Test(huffman, lengths_are_the_definitions) {
  static const unsigned sizes[] = {1, 2, 3, 5, 16, 17, 100, 255, 1000, 1024, 1025, 2400, 4095, 4096};
  uint8_t *tmp = malloc(FZE_HUFFMAN_TMP);
  cr_assert_not_null(tmp);
  static uint32_t freq[SYMS];
  static uint8_t got[SYMS], want[SYMS];
  uint64_t seed = 42;
  unsigned cases = 0, many_rounds = 0;
  for (unsigned sh = 0; sh < SHAPES; sh++)
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
      for (unsigned rep = 0; rep < 6; rep++) {
        unsigned nsym = sizes[z];
        make_freq((enum shape)sh, nsym, &seed, freq);
        unsigned rounds = reference_lengths(freq, nsym, want);
        fze_huffman_lengths(freq, nsym, got, tmp);
        for (unsigned s = 0; s < nsym; s++)
          cr_assert_eq(got[s], want[s], "shape %u, %u symbols, rep %u: symbol %u has %u bits, want %u",
                       sh, nsym, rep, s, got[s], want[s]);
        cases++;
        many_rounds += rounds >= 3;
      }
  /* The sweep must reach the halving rounds, or it tests little. */
  cr_assert_gt(many_rounds, cases / 4, "%u of %u cases took 3 rounds or more", many_rounds, cases);
  free(tmp);
}

/* Lengths make a complete prefix code (Kraft sum exactly 1 for two or
 * more symbols), none longer than 12 bits. */
Test(huffman, lengths_make_a_complete_code) {
  uint8_t *tmp = malloc(FZE_HUFFMAN_TMP);
  cr_assert_not_null(tmp);
  static uint32_t freq[SYMS];
  static uint8_t len[SYMS];
  uint64_t seed = 7;
  for (unsigned c = 0; c < 300; c++) {
    unsigned nsym = 2 + (unsigned)(gen_rand(&seed) % (SYMS - 1));
    make_freq((enum shape)(c % SHAPES), nsym, &seed, freq);
    fze_huffman_lengths(freq, nsym, len, tmp);
    uint64_t kraft = 0;
    unsigned used = 0;
    for (unsigned s = 0; s < nsym; s++) {
      cr_assert_leq(len[s], MAX_LEN);
      cr_assert_eq(len[s] == 0, freq[s] == 0, "symbol %u: frequency %u, length %u", s, freq[s],
                   len[s]);
      if (len[s])
        kraft += (uint64_t)1 << (MAX_LEN - len[s]), used++;
    }
    if (used >= 2)
      cr_assert_eq(kraft, (uint64_t)1 << MAX_LEN, "case %u: Kraft sum %llu / 4096", c,
                   (unsigned long long)kraft);
  }
  free(tmp);
}

/* ---- decoding, against a decoder written plainly ---- */

#define LANES 32u
#define RUNS 15u

typedef struct bits {
  const uint8_t *p;
  uint64_t pos, end; /* in bits */
} bits;

/* The next bit of a lane, least significant first; false past its end. */
static bool next_bit(bits *b, unsigned *v) {
  if (b->pos >= b->end)
    return false;
  *v = (b->p[b->pos / 8] >> (b->pos % 8)) & 1u;
  b->pos++;
  return true;
}

/* The format (docs/format.md) read a bit at a time: a canonical code by
 * (length, symbol), counting up, read from its first bit; 0, or -1 where
 * the engine must answer FZ_ECORRUPT. */
static int reference_decode(unsigned lv, unsigned w, const uint8_t *in, size_t in_len,
                            uint8_t *out, size_t n) {
  if (in_len < 2)
    return -1;
  /* From version 7 (lv 1) the top bit of E's word names the CLASS form. */
  unsigned e = in[0] | in[1] << 8, form = lv ? e >> 15 : 0;
  e = lv ? e & 0x7fffu : e;
  unsigned nsym = e + 1 + RUNS;
  if (e < 1 || e > SYMS - 1 - RUNS)
    return -1;
  size_t head = 2 + (nsym + 1) / 2 + 4 * LANES;
  if (in_len < head)
    return -1;
  static uint8_t len[SYMS];
  uint64_t kraft = 0;
  for (unsigned s = 0; s < nsym; s++) {
    len[s] = (in[2 + s / 2] >> (4 * (s & 1))) & 15u;
    if (len[s] > MAX_LEN)
      return -1;
    if (len[s])
      kraft += (uint64_t)1 << (MAX_LEN - len[s]);
  }
  if (kraft == 0 || kraft > (1u << MAX_LEN) || ((nsym & 1) && (in[2 + nsym / 2] >> 4)))
    return -1;
  /* The symbols by (length, symbol); the first code of each length and
   * where its symbols begin in that order. */
  static uint16_t sorted[SYMS];
  uint32_t first[MAX_LEN + 2], start[MAX_LEN + 2], count[MAX_LEN + 2] = {0};
  uint32_t next = 0, used = 0;
  for (unsigned l = 1; l <= MAX_LEN; l++) {
    first[l] = next;
    start[l] = used;
    for (unsigned s = 0; s < nsym; s++)
      if (len[s] == l)
        sorted[used++] = (uint16_t)s, count[l]++;
    next = (next + count[l]) << 1;
  }
  size_t pos = head, cap = (n + LANES - 1) / LANES;
  for (unsigned l = 0; l < LANES; l++) {
    const uint8_t *q = in + 2 + (nsym + 1) / 2 + 4 * l;
    size_t bytes = (size_t)q[0] | (size_t)q[1] << 8 | (size_t)q[2] << 16 | (size_t)q[3] << 24;
    if (bytes > in_len - pos)
      return -1;
    bits b = {in + pos, 0, 8 * (uint64_t)bytes};
    pos += bytes;
    size_t lo = l * cap, hi = lo + cap < n ? lo + cap : n;
    for (size_t j = lo; j < hi;) {
      unsigned s = SYMS, c = 0, bit;
      for (unsigned l2 = 1; l2 <= MAX_LEN && s == SYMS; l2++) {
        if (!next_bit(&b, &bit))
          return -1;
        c = c << 1 | bit;
        if (c - first[l2] < count[l2])
          s = sorted[start[l2] + c - first[l2]];
      }
      if (s == SYMS)
        return -1;
      if (s > e) {
        size_t run = (size_t)1 << (s - e);
        for (unsigned k = 0; form && k < s - e; k++) {
          if (!next_bit(&b, &bit)) /* the run's low bits, after its code */
            return -1;
          run += (size_t)bit << k;
        }
        if (run > hi - j)
          return -1;
        memset(out + j * w, 0, run * w);
        j += run;
        continue;
      }
      uint64_t v = s;
      if (s == e) {
        v = 0;
        for (unsigned k = 0; k < 8 * w; k++) {
          if (!next_bit(&b, &bit))
            return -1;
          v |= (uint64_t)bit << k;
        }
      }
      for (unsigned k = 0; k < w; k++)
        out[j * w + k] = (uint8_t)(v >> (8 * k));
      j++;
    }
    /* Read to its last byte, the bits after the last code all zero. */
    if (b.end - b.pos >= 8)
      return -1;
    for (unsigned bit; next_bit(&b, &bit);)
      if (bit)
        return -1;
  }
  return pos == in_len ? 0 : -1;
}

/* n words of width w: zeros in runs, small words and some escapes, from
 * codes of about a bit (mostly zeros) to about eleven bits (wide). */
static void make_words(unsigned w, size_t n, unsigned spread, uint64_t *seed, uint8_t *x) {
  uint64_t top = w == 8 ? UINT64_MAX : (UINT64_C(1) << (8 * w)) - 1;
  for (size_t i = 0; i < n;) {
    uint64_t r = gen_rand(seed);
    if (r % 100 < 60u - 5u * spread) { /* a run of zeros, 1 to 300 */
      size_t k = 1 + (size_t)(r >> 20) % (r % 7 == 0 ? 300 : 6);
      for (; k > 0 && i < n; k--, i++)
        memset(x + i * w, 0, w);
      continue;
    }
    uint64_t v = (r >> 8) % ((uint64_t)2 << spread) + 1;
    if (r % 53 == 0)
      v = (r >> 12) | 1u; /* an escape, most likely */
    v &= top;
    for (unsigned k = 0; k < w; k++)
      x[i * w + k] = (uint8_t)(v >> (8 * k));
    i++;
  }
}

/* The windows' mean code length in 1/4096 bits, as the decoder weighs it
 * to choose its pair table. */
static uint32_t mean_length(const uint8_t *in) {
  unsigned e = (in[0] | in[1] << 8) & 0x7fffu, nsym = e + 1 + RUNS;
  uint32_t m = 0;
  for (unsigned s = 0; s < nsym; s++) {
    unsigned l = (in[2 + s / 2] >> (4 * (s & 1))) & 15u;
    if (l)
      m += l << (MAX_LEN - l);
  }
  return m;
}

/* The engine's decoder (by pairs of codes where they are short, a code at
 * a time where not) makes the plain decoder's words, and fails where it
 * fails, on coded chunks of every width and on each of them damaged:
 * bits flipped in the lanes and the header, and cut short. */
Test(huffman, decoder_is_the_plain_one) {
  enum { N = 20000 };
  static uint8_t x[8 * N], got[8 * N], want[8 * N], coded[16 * N], bad[16 * N];
  uint8_t *tmp = malloc(FZE_HUFFMAN_TMP + 4 * 8 * N);
  cr_assert_not_null(tmp);
  static const size_t sizes[] = {1, 31, 33, 1000, 4097, N};
  uint64_t seed = 3;
  unsigned short_codes = 0, long_codes = 0, damaged = 0, refused = 0, by_class = 0;
  for (unsigned lv = 0; lv <= 1; lv++) /* the stage's lv */
  for (unsigned wi = 0; wi < 4; wi++)
    for (unsigned spread = 0; spread <= 12; spread++)
      for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        unsigned w = 1u << wi;
        size_t n = sizes[z];
        make_words(w, n, spread, &seed, x);
        size_t len = fze_huffman_encode(lv, w, x, n, coded, sizeof coded, tmp);
        /* The price is the stream's bits: its length less the lanes'
         * padding (under a byte each). */
        uint64_t price = fze_huffman_price(lv, w, x, n, tmp);
        cr_assert(price <= 8 * (uint64_t)len && 8 * (uint64_t)len < price + 8 * LANES,
                  "lv %u, w %u, n %zu: price %llu, %zu bytes", lv, w, n,
                  (unsigned long long)price, len);
        cr_assert_neq(len, SIZE_MAX);
        /* With no room to spare the encoder writes the same bytes (a
         * writer that stores no byte past them), with a byte less none;
         * each buffer is allocated to its size, so that ASan sees a write
         * past it. */
        static const int spare[] = {64, 40, 33, 32, 16, 8, 1, 0, -1};
        for (size_t r = 0; r < sizeof spare / sizeof spare[0]; r++) {
          size_t room = len + (size_t)(ptrdiff_t)spare[r];
          uint8_t *exact = malloc(room);
          cr_assert_not_null(exact);
          size_t got_len = fze_huffman_encode(lv, w, x, n, exact, room, tmp);
          cr_assert_eq(got_len, spare[r] >= 0 ? len : SIZE_MAX, "w %u, n %zu, room %zu", w, n,
                       room);
          if (spare[r] >= 0)
            cr_assert(memcmp(exact, coded, len) == 0, "w %u, n %zu, spread %u", w, n, spread);
          free(exact);
        }
        /* lv 0 writes BITS streams only; lv 1 the shorter lv, which
         * is CLASS for some of these words. */
        cr_assert(lv || !(coded[1] & 0x80u));
        by_class += coded[1] >> 7;
        if (mean_length(coded) <= 8u << MAX_LEN)
          short_codes++;
        else
          long_codes++;
        cr_assert_eq(reference_decode(lv, w, coded, len, want, n), 0, "w %u, n %zu", w, n);
        cr_assert(memcmp(want, x, n * w) == 0);
        cr_assert_eq(fze_huffman_decode(lv, w, coded, len, got, n, tmp), 0);
        cr_assert(memcmp(got, x, n * w) == 0, "w %u, n %zu, spread %u", w, n, spread);
        for (unsigned m = 0; m < 40; m++) {
          memcpy(bad, coded, len);
          size_t blen = len;
          uint64_t r = gen_rand(&seed);
          if (m % 8 == 7)
            blen = (size_t)(r % len);
          else
            for (unsigned f = 0; f <= m % 3; f++, r = gen_rand(&seed))
              bad[(r >> 8) % len] ^= (uint8_t)(1u << (r % 8));
          int a = reference_decode(lv, w, bad, blen, want, n);
          int b = fze_huffman_decode(lv, w, bad, blen, got, n, tmp);
          cr_assert_eq(b, a < 0 ? FZ_ECORRUPT : 0, "w %u, n %zu, spread %u, damage %u: %d, plain %d",
                       w, n, spread, m, b, a);
          if (a == 0)
            cr_assert(memcmp(got, want, n * w) == 0, "w %u, n %zu, damage %u", w, n, m);
          damaged++;
          refused += a < 0;
        }
      }
  cr_log_info("%u chunks of short codes, %u of long; %u of %u damaged ones refused",
              short_codes, long_codes, refused, damaged);
  /* Both of the decoder's ways were taken, and damage was caught. */
  cr_assert_gt(short_codes, 100u);
  cr_assert_gt(by_class, 20u);
  cr_assert_gt(long_codes, 15u);
  cr_assert_gt(refused, damaged / 4);
  cr_assert_lt(refused, damaged);
  free(tmp);
}
