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
