/*
 * stage_huffman.c - canonical Huffman coding of a chunk's words in 32
 * sub-streams (the ratio preset's entropy coder).
 *
 * Words below E (chosen per chunk, at most 4080) are symbols of their own;
 * every other word is the escape symbol E followed by the word's raw bits;
 * symbols E + k (k = 1..15) stand for 2^k zero words, so long zero runs
 * cost a few bits however long they are.
 * Code lengths are at most 12 bits, so one 4096-entry table decodes any
 * code in one look-up; where codes are short a second table decodes two
 * at once (most symbols at coarse bounds), with no branch between a word
 * and a run of zeros.  The chunk's words are cut into 32 runs of
 * ceil(n/32) consecutive words, one sub-stream each with its own byte
 * length, so a GPU warp can later decode a chunk with one lane per
 * sub-stream (staging its words through shared memory to write them
 * coalesced).  Consecutive words, not every 32nd, keep the zero words'
 * clusters together for the run symbols: on the trinidad field at REL
 * 1e-3 and 1e-4 this codes 6 and 8% smaller than interleaving.  The stage uses integers only, with every tie broken by the
 * symbol's value, so any backend makes the same bytes.  Where nearly every
 * word is 0 its code is a single 0 bit and the streams are mostly zero
 * bytes, which rze after this stage removes: well below a bit a word.
 *
 * Layout (docs/format.md): u16 E; the E + 16 code lengths as 4-bit nibbles,
 * low nibble first (a padding nibble is 0); 32 u32 sub-stream byte lengths;
 * the sub-streams.  Bits are written least significant first, each code
 * with its bits reversed (the canonical code read from its first bit), an
 * escape's raw word after its code, least significant bit first.
 */
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "engine.h"
#include "ops.h"

#define LANES FZE_HUFF_LANES
#define MAX_LEN FZE_HUFF_MAX_LEN
#define MAX_SYMS FZE_HUFF_SYMS /* every symbol: E + 1 + RUNS */
#define RUNS FZE_HUFF_RUNS /* run symbols: 2, 4, ... 2^15 zero words */
#define MAX_DIRECT (MAX_SYMS - 1 - RUNS)

static inline uint64_t load_word(const uint8_t *p, unsigned w) {
  switch (w) {
  case 1: return p[0];
  case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
  case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
  default: { uint64_t v; memcpy(&v, p, 8); return v; }
  }
}

static void store_word(uint8_t *p, unsigned w, uint64_t v) {
  switch (w) {
  case 1: p[0] = (uint8_t)v; break;
  case 2: { uint16_t x = (uint16_t)v; memcpy(p, &x, 2); break; }
  case 4: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
  default: memcpy(p, &v, 8); break;
  }
}

/* ---- code lengths ---- */

typedef struct build {
  uint32_t hist[MAX_SYMS + 1];  /* words 0..4095, then all above */
  uint32_t above[MAX_SYMS + 1]; /* words at or above each value */
  uint32_t tree[MAX_SYMS];      /* a round's tree, in place (fzo_huff_tree) */
  uint16_t order[MAX_SYMS];     /* used symbols by (weight, symbol) */
  uint16_t spare[MAX_SYMS];     /* the merges' other half */
} build;

_Static_assert(sizeof(build) <= FZE_HUFFMAN_TMP, "huffman work space");

/* A stable bottom-up merge sort of o (in symbol order) by frequency: the
 * order by (weight, symbol) of the first round. */
static void sort_symbols(uint16_t *o, uint16_t *t, size_t k, const uint32_t *freq) {
  uint16_t *src = o, *dst = t;
  for (size_t width = 1; width < k; width *= 2) {
    for (size_t lo = 0; lo < k; lo += 2 * width) {
      size_t mid = lo + width < k ? lo + width : k;
      size_t hi = lo + 2 * width < k ? lo + 2 * width : k;
      size_t i = lo, j = mid, d = lo;
      while (i < mid && j < hi)
        dst[d++] = freq[src[j]] < freq[src[i]] ? src[j++] : src[i++];
      while (i < mid)
        dst[d++] = src[i++];
      while (j < hi)
        dst[d++] = src[j++];
    }
    uint16_t *x = src;
    src = dst;
    dst = x;
  }
  if (src != o)
    memcpy(o, src, k * sizeof *o);
}

/* o in (weight, symbol) order of round r, into that of round r + 1.  The
 * weights 2m - 1 and 2m both become m, and nothing else does, so each new
 * run of equal weights is two neighbouring old runs, each in symbol order,
 * merged by symbol. */
static void regroup(uint16_t *o, uint16_t *t, size_t k, const uint32_t *freq, unsigned r) {
  for (size_t i = 0; i < k;) {
    uint32_t wa = fzo_huff_weight(freq[o[i]], r);
    size_t mid = i, hi;
    while (mid < k && fzo_huff_weight(freq[o[mid]], r) == wa)
      mid++;
    hi = mid;
    if (wa & 1u)
      while (hi < k && fzo_huff_weight(freq[o[hi]], r) == wa + 1)
        hi++;
    size_t a = i, b = mid, d = i;
    while (a < mid && b < hi)
      t[d++] = o[b] < o[a] ? o[b++] : o[a++];
    while (a < mid)
      t[d++] = o[a++];
    while (b < hi)
      t[d++] = o[b++];
    i = hi;
  }
  memcpy(o, t, k * sizeof *o);
}

/* Huffman code lengths of the nsym symbols with frequencies freq (at least
 * one nonzero) into len, at most MAX_LEN: the two-queue construction over
 * the symbols sorted by (weight, symbol), a leaf taken before an internal
 * node of equal weight; when the deepest leaf is too deep, every weight is
 * halved (rounding up, so none becomes 0) and the code rebuilt.  Only the
 * first round sorts; the others regroup the last round's order. */
static void code_lengths(build *b, const uint32_t *freq, unsigned nsym, uint8_t *len) {
  size_t k = 0;
  for (unsigned s = 0; s < nsym; s++) {
    len[s] = 0;
    if (freq[s])
      b->order[k++] = (uint16_t)s;
  }
  if (k == 1) {
    len[b->order[0]] = 1;
    return;
  }
  sort_symbols(b->order, b->spare, k, freq);
  for (unsigned r = 0;; r++) {
    for (size_t i = 0; i < k; i++)
      b->tree[i] = fzo_huff_weight(freq[b->order[i]], r);
    if (fzo_huff_tree(b->tree, (uint32_t)k, MAX_LEN) <= MAX_LEN) {
      fzo_huff_depths(b->tree, (uint32_t)k);
      for (size_t i = 0; i < k; i++)
        len[b->order[i]] = (uint8_t)b->tree[i];
      return;
    }
    regroup(b->order, b->spare, k, freq, r);
  }
}

unsigned fze_huffman_lv(const fze_chain *c) {
  for (unsigned i = 0; i < c->n; i++)
    if (c->st[i].id == FZE_STAGE_HUFFMAN)
      return c->st[i].lv;
  return 0;
}

void fze_huffman_lengths(const uint32_t *freq, unsigned nsym, uint8_t *len, uint8_t *tmp) {
  code_lengths((build *)tmp, freq, nsym, len);
}

/* The low l bits of v (v < 2^16, 1 <= l <= 16) in reverse order. */
static inline unsigned reverse(unsigned v, unsigned l) {
  v = ((v >> 1) & 0x5555u) | ((v & 0x5555u) << 1);
  v = ((v >> 2) & 0x3333u) | ((v & 0x3333u) << 2);
  v = ((v >> 4) & 0x0f0fu) | ((v & 0x0f0fu) << 4);
  v = ((v >> 8) & 0x00ffu) | ((v & 0x00ffu) << 8);
  return v >> (16 - l);
}

/* Canonical codes from lengths: by (length, symbol), counting up; stored
 * bit-reversed, as the stream is read from its least significant bit. */
static void canonical(const uint8_t *len, unsigned nsym, uint16_t *code) {
  unsigned count[MAX_LEN + 1] = {0}, next[MAX_LEN + 2];
  for (unsigned s = 0; s < nsym; s++)
    count[len[s]]++;
  count[0] = 0;
  unsigned c = 0;
  for (unsigned l = 1; l <= MAX_LEN; l++) {
    c = (c + count[l - 1]) << 1;
    next[l] = c;
  }
  for (unsigned s = 0; s < nsym; s++) {
    unsigned l = len[s];
    if (l == 0)
      continue;
    code[s] = (uint16_t)reverse(next[l]++, l);
  }
}

/* The number of direct symbols: each costs a nibble of table, each word at
 * or above it an escape of about 8 w + 8 bits; the cheapest, the lowest of
 * equals. */
static unsigned choose_direct(build *b, unsigned w) {
  b->above[MAX_SYMS] = b->hist[MAX_SYMS];
  for (unsigned t = MAX_SYMS; t-- > 0;)
    b->above[t] = b->above[t + 1] + b->hist[t];
  uint64_t best = UINT64_MAX;
  unsigned e = 1;
  for (unsigned t = 1; t <= MAX_DIRECT; t++) {
    uint64_t cost = 4 * (uint64_t)(t + 1) + b->above[t] * (8 * (uint64_t)w + 8);
    if (cost < best) {
      best = cost;
      e = t;
    }
  }
  return e;
}

/* ---- encoding ---- */

/* Word j of lane l is word l * lane_cap(n) + j of the chunk. */
static size_t lane_cap(size_t n) { return (n + LANES - 1) / LANES; }
static size_t lane_count(size_t n, unsigned l) {
  size_t cap = lane_cap(n), lo = l * cap, hi = lo + cap < n ? lo + cap : n;
  return hi > lo ? hi - lo : 0;
}

/* Tokens, made before the number of direct symbols is known: a nonzero
 * word below MAX_SYMS is itself, any larger one TOK_BIG, a run of 2^k
 * zero words TOK_BIG + k, a lone zero word 0.  Once e is chosen a token t
 * is symbol t below e, the escape e up to TOK_BIG, e + k above it. */
#define TOK_BIG MAX_SYMS

/* Ends a lane's run of zero words: one run token per set bit of its
 * length from the highest down (2^k zeros, k >= 1), then a lone 0 when
 * the length is odd; counts them in runs (runs[0]: the lone zeros). */
static inline size_t end_run(uint16_t *tok, size_t k, size_t run, uint32_t *runs) {
  /* A lane holds at most 2^RUNS words, so bits 1..RUNS are all there is. */
  for (size_t m = run >> 1; m;) {
    unsigned bit = 63u - (unsigned)__builtin_clzll((unsigned long long)m);
    tok[k++] = (uint16_t)(TOK_BIG + bit + 1);
    runs[bit + 1]++;
    m &= ~((size_t)1 << bit);
  }
  if (run & 1u) {
    tok[k++] = 0;
    runs[0]++;
  }
  return k;
}

/* Bit i set where word i of the m (at most 64) at p is not 0. */
static inline __attribute__((always_inline)) uint64_t nonzero_mask(const uint8_t *p, unsigned w,
                                                                   unsigned m) {
  uint64_t bits = 0;
#if defined(__SSE2__)
  if (w == 4 && m == 64) {
    const __m128i zero = _mm_setzero_si128();
    for (unsigned q = 0; q < 16; q++) {
      __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * q));
      unsigned z = (unsigned)_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(x, zero)));
      bits |= (uint64_t)(~z & 15u) << (4 * q);
    }
    return bits;
  }
#endif
  for (unsigned i = 0; i < m; i++)
    bits |= (uint64_t)(load_word(p + (size_t)i * w, w) != 0) << i;
  return bits;
}

/* A word other than zero's token (itself, or TOK_BIG from MAX_SYMS on),
 * counted in hist. */
static inline __attribute__((always_inline)) uint16_t word_token(const uint8_t *q, unsigned w,
                                                                 uint32_t *hist) {
  uint64_t v = load_word(q, w);
  uint16_t x = (uint16_t)(v < TOK_BIG ? v : TOK_BIG);
  hist[x]++;
  return x;
}

/* A run of 1 to 15 zero words as end_run's tokens, four at most, in a
 * u64 (unused ones 0), and how many there are. */
typedef struct short_runs {
  uint64_t tok[16];
  uint8_t count[16];
} short_runs;

static short_runs make_short_runs(void) {
  short_runs sr;
  memset(&sr, 0, sizeof sr);
  for (unsigned r = 1; r < 16; r++) {
    uint16_t t[4] = {0, 0, 0, 0};
    uint32_t dummy[RUNS + 1] = {0};
    sr.count[r] = (uint8_t)end_run(t, 0, r, dummy);
    memcpy(&sr.tok[r], t, 8);
  }
  return sr;
}

/* The tokens of one lane's words (cnt of them, from p) into t (room for
 * cap), the nonzero words counted in hist (by token), the zero runs
 * shorter than 16 in short_hist (by length), longer ones' tokens in runs;
 * returns their number (at most cnt).  The words are read 64 at a time as
 * a mask of the nonzero ones, and a short run is its tokens written at
 * once, so that no branch depends on whether a word is zero.  Inlined
 * with a constant width at each call. */
static inline __attribute__((always_inline)) size_t
tokenize_lane(const uint8_t *p, unsigned w, size_t cnt, size_t cap, uint16_t *t, uint32_t *hist,
              uint32_t *short_hist, uint32_t *runs, const short_runs *sr) {
  size_t k = 0, run = 0;
  for (size_t base = 0; base < cnt; base += 64) {
    unsigned m = cnt - base < 64 ? (unsigned)(cnt - base) : 64u, pos = 0;
    for (uint64_t nz = nonzero_mask(p + base * w, w, m); nz; nz &= nz - 1) {
      unsigned i = (unsigned)__builtin_ctzll(nz);
      run += i - pos;
      if (run < 16 && k + 4 <= cap) {
        memcpy(t + k, &sr->tok[run], 8);
        k += sr->count[run];
        short_hist[run]++;
      } else {
        k = end_run(t, k, run, runs);
      }
      run = 0;
      t[k++] = word_token(p + (base + i) * w, w, hist);
      pos = i + 1;
    }
    run += m - pos;
  }
  return end_run(t, k, run, runs);
}

/* Ends a lane's run of zero words as a CLASS token: a lone zero is token
 * 0; a run of r >= 2 is TOK_BIG + j (j = floor(log2 r)) and then, in the
 * next slot, r - 2^j, its raw bits (so a run takes two slots, and a lane
 * still no more tokens than words).  Counted in both forms: rc[j] the
 * CLASS symbols (rc[0] the lone zeros), rb[j] the BITS ones (a symbol per
 * set bit j >= 1 of r, rb[0] a lone zero when r is odd). */
static inline size_t end_run_class(uint16_t *tok, size_t k, size_t run, uint32_t *rc,
                                   uint32_t *rb) {
  if (run == 0)
    return k;
  for (size_t m = run >> 1; m; m &= m - 1)
    rb[__builtin_ctzll((unsigned long long)m) + 1]++;
  rb[0] += (uint32_t)(run & 1u);
  if (run == 1) {
    tok[k++] = 0;
    rc[0]++;
    return k;
  }
  unsigned j = 63u - (unsigned)__builtin_clzll((unsigned long long)run);
  tok[k++] = (uint16_t)(TOK_BIG + j);
  tok[k++] = (uint16_t)(run - ((size_t)1 << j));
  rc[j]++;
  return k;
}

/* tokenize_lane with CLASS tokens: one token (and its raw slot) a run. */
static inline __attribute__((always_inline)) size_t
tokenize_lane_class(const uint8_t *p, unsigned w, size_t cnt, uint16_t *t, uint32_t *hist,
                    uint32_t *rc, uint32_t *rb) {
  size_t k = 0, run = 0;
  for (size_t base = 0; base < cnt; base += 64) {
    unsigned m = cnt - base < 64 ? (unsigned)(cnt - base) : 64u, pos = 0;
    for (uint64_t nz = nonzero_mask(p + base * w, w, m); nz; nz &= nz - 1) {
      unsigned i = (unsigned)__builtin_ctzll(nz);
      k = end_run_class(t, k, run + i - pos, rc, rb);
      run = 0;
      t[k++] = word_token(p + (base + i) * w, w, hist);
      pos = i + 1;
    }
    run += m - pos;
  }
  return end_run_class(t, k, run, rc, rb);
}

/* The tokens of every lane, each into its own region of tok (cap tokens:
 * no lane has more than it has words), in one pass over the words: BITS
 * tokens (lv 0) counted in runs, or (lv 1) CLASS tokens counted in runs
 * and as BITS symbols in rb. */
static void tokenize(unsigned lv, const uint8_t *in, unsigned w, size_t n, uint16_t *tok,
                     size_t cap, size_t *count, uint32_t *hist, uint32_t *runs, uint32_t *rb) {
  if (lv) {
    for (unsigned l = 0; l < LANES; l++) {
      const uint8_t *p = in + (size_t)l * cap * w;
      size_t cnt = lane_count(n, l);
      uint16_t *t = tok + l * cap;
      switch (w) {
      case 1: count[l] = tokenize_lane_class(p, 1, cnt, t, hist, runs, rb); break;
      case 2: count[l] = tokenize_lane_class(p, 2, cnt, t, hist, runs, rb); break;
      case 4: count[l] = tokenize_lane_class(p, 4, cnt, t, hist, runs, rb); break;
      default: count[l] = tokenize_lane_class(p, 8, cnt, t, hist, runs, rb); break;
      }
    }
    return;
  }
  short_runs sr = make_short_runs(); /* a few dozen steps a chunk */
  uint32_t short_hist[16] = {0};
  for (unsigned l = 0; l < LANES; l++) {
    const uint8_t *p = in + (size_t)l * cap * w;
    size_t cnt = lane_count(n, l);
    uint16_t *t = tok + l * cap;
    switch (w) {
    case 1: count[l] = tokenize_lane(p, 1, cnt, cap, t, hist, short_hist, runs, &sr); break;
    case 2: count[l] = tokenize_lane(p, 2, cnt, cap, t, hist, short_hist, runs, &sr); break;
    case 4: count[l] = tokenize_lane(p, 4, cnt, cap, t, hist, short_hist, runs, &sr); break;
    default: count[l] = tokenize_lane(p, 8, cnt, cap, t, hist, short_hist, runs, &sr); break;
    }
  }
  /* The short runs' tokens counted: a lone zero for an odd length, a run
   * token for each other bit. */
  for (unsigned r = 1; r < 16; r++) {
    runs[0] += (r & 1u) * short_hist[r];
    for (unsigned b = 1; b < 4; b++)
      runs[b] += ((r >> b) & 1u) * short_hist[r];
  }
}

/* The whole bytes of acc's nb bits (at most 56) at *p, the rest left in
 * acc: one 8-byte store where 8 bytes fit before end (nearly always), else
 * byte by byte. */
static inline void flush_bits(uint64_t *acc, unsigned *nb, uint8_t **p, const uint8_t *end) {
  unsigned k = *nb >> 3;
  if (end - *p >= 8) {
    memcpy(*p, acc, 8);
  } else {
    for (unsigned b = 0; b < k; b++)
      (*p)[b] = (uint8_t)(*acc >> (8 * b));
  }
  *p += k;
  *acc >>= 8 * k;
  *nb &= 7u;
}

/* A lane's tokens (cnt of them, its words from words) coded at p, which
 * has room for them before end; returns the end of its bytes.  Each token
 * flushes the accumulator's whole bytes, and a run moves the lane's word
 * on by a shift, so that no branch depends on whether a token is a run or
 * a word.  Inlined with a constant width at each call. */
static inline __attribute__((always_inline)) uint8_t *
put_lane(unsigned lv, unsigned form, const uint16_t *t, size_t cnt, const uint8_t *words,
         unsigned w, const uint16_t *tcode, const uint8_t *tlen, uint8_t *p, const uint8_t *end) {
  uint64_t acc = 0;
  unsigned nb = 0;
  size_t j = 0; /* the lane's word the token stands at */
  for (size_t k = 0; k < cnt; k++) {
    unsigned tk = t[k], l = tlen[tk];
    if (lv && tk > TOK_BIG) {
      /* A CLASS token and its raw slot: the run r = 2^b + raw. */
      unsigned b = tk - TOK_BIG, raw = t[++k];
      size_t r = ((size_t)1 << b) + raw;
      j += r;
      if (form == FZE_HUFF_FORM_CLASS) { /* the code, the raw bits (nb at most 34) */
        acc |= (uint64_t)tcode[tk] << nb;
        nb += l & 0x7fu;
        acc |= (uint64_t)raw << nb;
        nb += b;
        flush_bits(&acc, &nb, &p, end);
        continue;
      }
      /* BITS: a code per set bit of r from the highest down, a lone zero's
       * when r is odd. */
      for (size_t m = r >> 1; m;) {
        unsigned bit = 63u - (unsigned)__builtin_clzll((unsigned long long)m);
        unsigned rt = TOK_BIG + bit + 1;
        acc |= (uint64_t)tcode[rt] << nb;
        nb += tlen[rt] & 0x7fu;
        flush_bits(&acc, &nb, &p, end);
        m &= ~((size_t)1 << bit);
      }
      if (r & 1u) {
        acc |= (uint64_t)tcode[0] << nb;
        nb += tlen[0] & 0x7fu;
        flush_bits(&acc, &nb, &p, end);
      }
      continue;
    }
    acc |= (uint64_t)tcode[tk] << nb;
    nb += l & 0x7fu;
    if (l & 0x80u) { /* the escape: the raw word follows (nb is at most 19) */
      uint64_t v = load_word(words + j * w, w);
      if (w == 8) {
        flush_bits(&acc, &nb, &p, end);
        acc |= (v & 0xffffffffu) << nb;
        nb += 32;
        flush_bits(&acc, &nb, &p, end);
        v >>= 32;
        acc |= v << nb;
        nb += 32;
      } else {
        acc |= v << nb;
        nb += 8 * w;
      }
    }
    flush_bits(&acc, &nb, &p, end);
    j += (size_t)1 << (tk > TOK_BIG ? tk - TOK_BIG : 0);
  }
  if (nb)
    *p++ = (uint8_t)acc;
  return p;
}

/* The words' tokens (at tmp + FZE_HUFFMAN_TMP), the symbols' frequencies
 * and code lengths; the number of direct symbols E. */
/* The symbols' frequencies, from the words' counts and the runs'. */
static void frequencies(const build *b, unsigned e, const uint32_t *runs, uint32_t *freq) {
  memset(freq, 0, MAX_SYMS * sizeof *freq);
  freq[0] = runs[0];
  for (unsigned s = 1; s < e; s++)
    freq[s] = b->hist[s];
  freq[e] = b->above[e];
  for (unsigned k = 1; k <= RUNS; k++)
    freq[e + k] = runs[k];
}

static uint64_t stream_bits(unsigned form, unsigned w, unsigned e, const uint32_t *freq,
                            const uint8_t *len);

/* The words' tokens (at tmp + FZE_HUFFMAN_TMP), the symbols' frequencies
 * and code lengths in the stream's form (*form: BITS for lv 0; for lv 1
 * the form whose stream is shorter, BITS on a tie); the number of direct
 * symbols E.  Both forms share E (chosen on the words alone) and, for lv
 * 1, the CLASS tokens, which hold every run's length. */
static unsigned analyse(unsigned lv, const uint8_t *in, unsigned w, size_t n, uint8_t *tmp,
                        size_t *count, uint32_t *freq, uint8_t *len, unsigned *form) {
  build *b = (build *)tmp;
  uint16_t *tok = (uint16_t *)(tmp + FZE_HUFFMAN_TMP);
  uint32_t runs[RUNS + 1] = {0}, rb[RUNS + 1] = {0};
  memset(b->hist, 0, sizeof b->hist);
  tokenize(lv, in, w, n, tok, lane_cap(n), count, b->hist, runs, rb);
  unsigned e = choose_direct(b, w), nsym = e + 1 + RUNS;
  *form = FZE_HUFF_FORM_BITS;
  if (!lv) {
    frequencies(b, e, runs, freq);
    code_lengths(b, freq, nsym, len);
    return e;
  }
  uint32_t fc[MAX_SYMS];
  uint8_t lc[MAX_SYMS];
  frequencies(b, e, rb, freq);
  code_lengths(b, freq, nsym, len);
  frequencies(b, e, runs, fc);
  code_lengths(b, fc, nsym, lc);
  if (stream_bits(FZE_HUFF_FORM_CLASS, w, e, fc, lc) < stream_bits(FZE_HUFF_FORM_BITS, w, e, freq, len)) {
    memcpy(freq, fc, nsym * sizeof *freq);
    memcpy(len, lc, nsym);
    *form = FZE_HUFF_FORM_CLASS;
  }
  return e;
}

/* The stream's bits before each lane is rounded up to a byte: its head
 * and every token's code, an escape's raw word after it, a run's raw
 * bits after it (CLASS). */
static uint64_t stream_bits(unsigned form, unsigned w, unsigned e, const uint32_t *freq,
                            const uint8_t *len) {
  unsigned nsym = e + 1 + RUNS;
  uint64_t bits = 8 * (2 + (uint64_t)(nsym + 1) / 2 + 4 * LANES) + (uint64_t)freq[e] * 8u * w;
  for (unsigned s = 0; s < nsym; s++)
    bits += (uint64_t)freq[s] * len[s];
  if (form == FZE_HUFF_FORM_CLASS)
    for (unsigned j = 1; j <= RUNS; j++)
      bits += (uint64_t)freq[e + j] * j;
  return bits;
}

uint64_t fze_huffman_price(unsigned lv, unsigned w, const void *words, size_t n,
                           uint8_t *tmp) {
  size_t count[LANES];
  uint32_t freq[MAX_SYMS];
  uint8_t len[MAX_SYMS];
  unsigned form, e = analyse(lv, words, w, n, tmp, count, freq, len, &form);
  return stream_bits(form, w, e, freq, len);
}

size_t fze_huffman_encode(unsigned lv, unsigned w, const void *words, size_t n, uint8_t *out,
                          size_t out_cap, uint8_t *tmp) {
  const uint8_t *in = words;
  uint16_t *tok = (uint16_t *)(tmp + FZE_HUFFMAN_TMP);
  size_t cap = lane_cap(n), count[LANES];
  uint32_t freq[MAX_SYMS];
  uint8_t len[MAX_SYMS];
  uint16_t code[MAX_SYMS];
  unsigned form, e = analyse(lv, in, w, n, tmp, count, freq, len, &form), nsym = e + 1 + RUNS;
  canonical(len, nsym, code);
  /* Each token's code and length (the escape's length with 0x80 set). */
  uint16_t tcode[TOK_BIG + RUNS + 1];
  uint8_t tlen[TOK_BIG + RUNS + 1];
  for (unsigned t = 0; t <= TOK_BIG + RUNS; t++) {
    unsigned sy = t < e ? t : t <= TOK_BIG ? e : e + (t - TOK_BIG);
    tcode[t] = len[sy] ? code[sy] : 0;
    tlen[t] = (uint8_t)(len[sy] | (sy == e ? 0x80u : 0u));
  }

  size_t head = 2 + (nsym + 1) / 2 + 4 * LANES;
  /* The lanes' bytes are bits / 8 rounded up in all, plus less than one a
   * lane; only where that leaves the limit in doubt are they counted. */
  size_t least = (size_t)((stream_bits(form, w, e, freq, len) + 7) / 8);
  if (least > out_cap)
    return SIZE_MAX;
  if (least + LANES > out_cap) {
    size_t total = head;
    for (unsigned l = 0; l < LANES; l++) {
      uint64_t lb = 0;
      const uint16_t *t = tok + l * cap;
      for (size_t k = 0; k < count[l]; k++) {
        if (lv && t[k] > TOK_BIG) { /* a CLASS token, its raw slot */
          unsigned b = t[k] - TOK_BIG;
          size_t r = ((size_t)1 << b) + t[++k];
          if (form == FZE_HUFF_FORM_CLASS) {
            lb += (tlen[TOK_BIG + b] & 0x7fu) + b;
            continue;
          }
          for (unsigned j = 1; j <= RUNS; j++)
            lb += ((r >> j) & 1u) * (tlen[TOK_BIG + j] & 0x7fu);
          lb += (r & 1u) * (tlen[0] & 0x7fu);
          continue;
        }
        lb += (tlen[t[k]] & 0x7fu) + ((tlen[t[k]] & 0x80u) ? 8u * w : 0u);
      }
      total += (size_t)((lb + 7) / 8);
    }
    if (total > out_cap)
      return SIZE_MAX;
  }

  out[0] = (uint8_t)e;
  out[1] = (uint8_t)(e >> 8 | (form == FZE_HUFF_FORM_CLASS ? 0x80u : 0u));
  memset(out + 2, 0, (nsym + 1) / 2);
  for (unsigned s = 0; s < nsym; s++)
    out[2 + s / 2] |= (uint8_t)(len[s] << (4 * (s & 1)));
  uint8_t *p = out + head;
  for (unsigned l = 0; l < LANES; l++) {
    const uint16_t *t = tok + l * cap;
    const uint8_t *words_l = in + (size_t)l * cap * w, *limit = out + out_cap;
    uint8_t *end;
    /* Each width and each pair of token form and stream form (lv 0 has
     * BITS tokens and streams only) its own loop. */
#define PUT(LV, F)                                                                        \
  switch (w) {                                                                            \
  case 1: end = put_lane(LV, F, t, count[l], words_l, 1, tcode, tlen, p, limit); break;   \
  case 2: end = put_lane(LV, F, t, count[l], words_l, 2, tcode, tlen, p, limit); break;   \
  case 4: end = put_lane(LV, F, t, count[l], words_l, 4, tcode, tlen, p, limit); break;   \
  default: end = put_lane(LV, F, t, count[l], words_l, 8, tcode, tlen, p, limit); break;  \
  }
    if (!lv)
      PUT(0, FZE_HUFF_FORM_BITS)
    else if (form == FZE_HUFF_FORM_CLASS)
      PUT(1, FZE_HUFF_FORM_CLASS)
    else
      PUT(1, FZE_HUFF_FORM_BITS)
#undef PUT
    uint32_t bytes = (uint32_t)(end - p);
    uint8_t *q = out + 2 + (nsym + 1) / 2 + 4 * l;
    for (unsigned k = 0; k < 4; k++)
      q[k] = (uint8_t)(bytes >> (8 * k));
    p = end;
  }
  return (size_t)(p - out);
}

/* ---- decoding ---- */

typedef struct lane_reader {
  uint64_t acc;
  unsigned nb;
  const uint8_t *p, *end;
} lane_reader;

static inline void refill(lane_reader *r) {
  if (r->end - r->p >= 8) {
    /* Whole bytes up to 56 bits or more, from one 8-byte load. */
    uint64_t x;
    memcpy(&x, r->p, 8);
    r->acc |= x << r->nb;
    r->p += (63u - r->nb) >> 3;
    r->nb |= 56u;
    return;
  }
  if (r->nb <= 32 && r->end - r->p >= 4) {
    uint32_t x;
    memcpy(&x, r->p, 4);
    r->acc |= (uint64_t)x << r->nb;
    r->nb += 32;
    r->p += 4;
    return;
  }
  while (r->nb <= 56 && r->p < r->end) {
    r->acc |= (uint64_t)*r->p++ << r->nb;
    r->nb += 8;
  }
}

/* n raw bits (at most 32) of an escape; false when the stream ends. */
static inline bool take_bits(lane_reader *r, unsigned n, uint64_t *v) {
  refill(r);
  if (r->nb < n)
    return false;
  *v = n == 64 ? r->acc : r->acc & ((UINT64_C(1) << n) - 1);
  r->acc = n == 64 ? 0 : r->acc >> n;
  r->nb -= n;
  return true;
}

/* One symbol of a lane whose next word is o[*j] (of cnt); inlined with a
 * constant width at each call.  0, or FZ_ECORRUPT. */
static inline __attribute__((always_inline)) int
decode_step(unsigned form, lane_reader *r, uint8_t *o, size_t *jp, size_t cnt, unsigned w,
            const uint32_t *lut, unsigned e) {
  size_t j = *jp;
  if (r->nb < MAX_LEN)
    refill(r);
  uint32_t ent = lut[r->acc & ((1u << MAX_LEN) - 1)];
  unsigned len_s = ent >> 16, s = ent & 0xffffu;
  if (len_s - 1u >= r->nb) /* no code here (len 0), or past the end */
    return FZ_ECORRUPT;
  r->acc >>= len_s;
  r->nb -= len_s;
  if (s > e) { /* a run of zero words, inside the lane */
    size_t run = (size_t)1 << (s - e);
    if (form == FZE_HUFF_FORM_CLASS) { /* 2^j and the j raw bits after */
      uint64_t raw;
      if (!take_bits(r, s - e, &raw))
        return FZ_ECORRUPT;
      run += (size_t)raw;
    }
    if (run > cnt - j)
      return FZ_ECORRUPT;
    /* Most runs are short: one fixed 64-byte clear (no call) where the
     * lane has the room; the words past the run are the lane's own,
     * written later. */
    if (run * w <= 64 && (cnt - j) * w >= 64)
      memset(o + j * w, 0, 64);
    else
      memset(o + j * w, 0, run * w);
    *jp = j + run;
    return 0;
  }
  uint64_t v = s;
  if (s == e) {
    uint64_t lo, hi = 0;
    if (!take_bits(r, w == 8 ? 32 : 8 * w, &lo) || (w == 8 && !take_bits(r, 32, &hi)))
      return FZ_ECORRUPT;
    v = lo | hi << 32;
  }
  store_word(o + j * w, w, v);
  *jp = j + 1;
  return 0;
}

/* The pair table: for each 12-bit window, the one or two symbols whose
 * codes (and a CLASS run's raw bits) lie whole in it, where neither is
 * the escape, as what they do to a lane of zero words: the first writes
 * v1 at the next word and moves a1 words on (a word: a1 = 1; a lone zero:
 * v1 = 0, a1 = 1; a run: v1 = 0, a1 its length), the second likewise
 * from there (a2 = 0: no second).  Bits 0-3: the bits both take (0: the
 * window starts with the escape, with no code or with a run whose raw
 * bits it does not hold, decoded one symbol at a time); 4-20: a1; 21-37:
 * a2; 38-49: v1; 50-61: v2 (words are below 4096). */
#define PAIR_BITS(x) ((unsigned)(x) & 15u)
#define PAIR_A1(x) ((size_t)((x) >> 4) & 0x1ffffu)
#define PAIR_A2(x) ((size_t)((x) >> 21) & 0x1ffffu)
#define PAIR_V1(x) ((uint64_t)((x) >> 38) & 0xfffu)
#define PAIR_V2(x) ((uint64_t)((x) >> 50) & 0xfffu)
/* The largest mean code length (bits) at which a chunk is decoded by pairs. */
#define PAIR_SPREAD FZE_HUFF_PAIR_SPREAD
_Static_assert((sizeof(uint32_t) + sizeof(uint64_t)) << MAX_LEN <= FZE_HUFFMAN_TMP,
               "huffman decoding tables");

/* What the symbol of look-up entry ent does to the lane, where window x
 * starts with it and has room bits: its bits (code and raw, 0 for the
 * escape, no code, or raw bits past room), its word (0 for zeros) and
 * the words it takes. */
static inline unsigned pair_part(unsigned form, uint32_t ent, uint32_t x, unsigned room,
                                 unsigned e, uint64_t *v, size_t *a) {
  unsigned l = ent >> 16, s = ent & 0xffffu;
  if (l == 0 || l > room || s == e)
    return 0;
  *v = s > e ? 0 : s;
  *a = s > e ? (size_t)1 << (s - e) : 1;
  if (form == FZE_HUFF_FORM_CLASS && s > e) {
    if (l + (s - e) > room)
      return 0;
    *a += (x >> l) & ((1u << (s - e)) - 1u);
    l += s - e;
  }
  return l;
}

static void pair_table(unsigned form, const uint32_t *lut, unsigned e, uint64_t *pair) {
  for (uint32_t x = 0; x < (1u << MAX_LEN); x++) {
    size_t a1, a2 = 0;
    uint64_t v1, v2 = 0;
    unsigned l1 = pair_part(form, lut[x], x, MAX_LEN, e, &v1, &a1), l2 = 0;
    if (l1 == 0) {
      pair[x] = 0;
      continue;
    }
    /* The second lies whole in the window's other bits only when it is
     * no longer than they are; the bits above them read as zeros. */
    uint32_t y = x >> l1;
    l2 = pair_part(form, lut[y], y, MAX_LEN - l1, e, &v2, &a2);
    if (l2 == 0)
      a2 = v2 = 0;
    pair[x] = (uint64_t)(l1 + l2) | (uint64_t)a1 << 4 | (uint64_t)a2 << 21 | v1 << 38 | v2 << 50;
  }
}

/* One or two symbols of a lane whose words are zero until written, by the
 * pair table, where the window holds them, the lane has room past them
 * and neither is the escape; otherwise one symbol by decode_step.  The
 * pair's words are the ones decode_step would write, so either way the
 * lane and its errors are the same. */
static inline __attribute__((always_inline)) int
decode_pair(unsigned form, lane_reader *r, uint8_t *o, size_t *jp, size_t cnt, unsigned w,
            const uint32_t *lut, const uint64_t *pair, unsigned e) {
  if (r->nb < MAX_LEN)
    refill(r);
  uint64_t p = pair[r->acc & ((1u << MAX_LEN) - 1)];
  unsigned bits = PAIR_BITS(p);
  size_t j = *jp, a1 = PAIR_A1(p), a2 = PAIR_A2(p);
  /* Room for both and one word more: the second's word is written at
   * j + a1 even when there is no second (then it writes a zero). */
  if (bits - 1u >= r->nb || a1 + a2 >= cnt - j)
    return decode_step(form, r, o, jp, cnt, w, lut, e);
  r->acc >>= bits;
  r->nb -= bits;
  store_word(o + j * w, w, PAIR_V1(p));
  store_word(o + (j + a1) * w, w, PAIR_V2(p));
  *jp = j + a1 + a2;
  return 0;
}

/* Four lanes (l0 .. l0+3) side by side, so that each look-up's wait on
 * the one before it overlaps with the other lanes', then each to its
 * end; by pairs where pair is not NULL (a constant at each call). */
#define DECODE(u)                                                              \
  (pair ? decode_pair(form, &rd[l0 + (u)], o[u], &j[u], c[u], w, lut, pair, e) \
        : decode_step(form, &rd[l0 + (u)], o[u], &j[u], c[u], w, lut, e))
static inline __attribute__((always_inline)) int
decode_lanes(unsigned form, lane_reader *rd, uint8_t *out, size_t n, unsigned l0, unsigned w,
             const uint32_t *lut, const uint64_t *pair, unsigned e) {
  size_t j[4] = {0, 0, 0, 0}, c[4];
  uint8_t *o[4];
  for (unsigned u = 0; u < 4; u++) {
    c[u] = lane_count(n, l0 + u);
    o[u] = out + (size_t)(l0 + u) * lane_cap(n) * w;
  }
  int rc = 0;
  while (rc == 0 && j[0] < c[0] && j[1] < c[1] && j[2] < c[2] && j[3] < c[3]) {
    rc |= DECODE(0);
    rc |= DECODE(1);
    rc |= DECODE(2);
    rc |= DECODE(3);
  }
  for (unsigned u = 0; u < 4 && rc == 0; u++)
    while (rc == 0 && j[u] < c[u])
      rc = DECODE(u);
  return rc < 0 ? FZ_ECORRUPT : 0;
}
#undef DECODE

/* decode_lanes with pair a constant in each branch, so that each gets its
 * own loop. */
static inline __attribute__((always_inline)) int
decode_lanes_by(unsigned form, lane_reader *rd, uint8_t *out, size_t n, unsigned l0, unsigned w,
                const uint32_t *lut, const uint64_t *pair, unsigned e) {
  return pair ? decode_lanes(form, rd, out, n, l0, w, lut, pair, e)
              : decode_lanes(form, rd, out, n, l0, w, lut, NULL, e);
}

/* decode_lanes_by with form and w constants in each branch. */
static int decode_all(unsigned form, lane_reader *rd, uint8_t *out, size_t n, unsigned l0,
                      unsigned w, const uint32_t *lut, const uint64_t *pair, unsigned e) {
  if (form == FZE_HUFF_FORM_CLASS)
    switch (w) {
    case 1: return decode_lanes_by(1, rd, out, n, l0, 1, lut, pair, e);
    case 2: return decode_lanes_by(1, rd, out, n, l0, 2, lut, pair, e);
    case 4: return decode_lanes_by(1, rd, out, n, l0, 4, lut, pair, e);
    default: return decode_lanes_by(1, rd, out, n, l0, 8, lut, pair, e);
    }
  switch (w) {
  case 1: return decode_lanes_by(0, rd, out, n, l0, 1, lut, pair, e);
  case 2: return decode_lanes_by(0, rd, out, n, l0, 2, lut, pair, e);
  case 4: return decode_lanes_by(0, rd, out, n, l0, 4, lut, pair, e);
  default: return decode_lanes_by(0, rd, out, n, l0, 8, lut, pair, e);
  }
}

int fze_huffman_decode(unsigned lv, unsigned w, const uint8_t *in, size_t in_len, void *words,
                       size_t n, uint8_t *tmp) {
  uint8_t *out = words;
  if (in_len < 2)
    return FZ_ECORRUPT;
  /* E, and from version 7 (lv 1) the stream's form in its top bit. */
  unsigned e = (unsigned)in[0] | (unsigned)in[1] << 8, form = FZE_HUFF_FORM_BITS;
  if (lv && (e & 0x8000u)) {
    form = FZE_HUFF_FORM_CLASS;
    e &= 0x7fffu;
  }
  unsigned nsym = e + 1 + RUNS;
  if (e < 1 || e > MAX_DIRECT)
    return FZ_ECORRUPT;
  size_t head = 2 + (nsym + 1) / 2 + 4 * LANES;
  if (in_len < head)
    return FZ_ECORRUPT;
  uint8_t len[MAX_SYMS];
  uint32_t kraft = 0, spread = 0;
  for (unsigned s = 0; s < nsym; s++) {
    len[s] = (uint8_t)((in[2 + s / 2] >> (4 * (s & 1))) & 15u);
    if (len[s] > MAX_LEN)
      return FZ_ECORRUPT;
    if (len[s]) {
      kraft += 1u << (MAX_LEN - len[s]);
      spread += (uint32_t)len[s] << (MAX_LEN - len[s]);
    }
  }
  /* No code may be over-subscribed, some symbol must have one, and the
   * padding nibble is 0. */
  if (kraft == 0 || kraft > (1u << MAX_LEN) || ((nsym & 1) && (in[2 + nsym / 2] >> 4)))
    return FZ_ECORRUPT;
  lane_reader rd[LANES];
  size_t pos = head;
  for (unsigned l = 0; l < LANES; l++) {
    const uint8_t *q = in + 2 + (nsym + 1) / 2 + 4 * l;
    size_t bytes = (size_t)q[0] | (size_t)q[1] << 8 | (size_t)q[2] << 16 | (size_t)q[3] << 24;
    if (bytes > in_len - pos)
      return FZ_ECORRUPT;
    rd[l] = (lane_reader){0, 0, in + pos, in + pos + bytes};
    pos += bytes;
  }
  if (pos != in_len)
    return FZ_ECORRUPT;

  /* One entry per 12-bit window: the symbol and its length; 0 where no
   * code begins (an incomplete code). */
  uint32_t *lut = (uint32_t *)tmp;
  uint16_t code[MAX_SYMS];
  memset(lut, 0, sizeof(uint32_t) << MAX_LEN);
  canonical(len, nsym, code);
  for (unsigned s = 0; s < nsym; s++)
    if (len[s])
      for (uint32_t x = code[s]; x < (1u << MAX_LEN); x += 1u << len[s])
        lut[x] = (uint32_t)len[s] << 16 | s;
  /* Pairs pay where codes are short: the windows' mean code length (the
   * lengths weighted by the share of windows each takes) at most 8 bits,
   * on the fields about a third of the windows or more then hold two
   * codes.  Above that (most chunks at REL 1e-4) the table's 4,096
   * entries cost more than they save. */
  uint64_t *pair = NULL;
  if (spread <= PAIR_SPREAD << MAX_LEN) {
    pair = (uint64_t *)(tmp + (sizeof(uint32_t) << MAX_LEN));
    pair_table(form, lut, e, pair);
    memset(out, 0, n * w);
  }

  for (unsigned l = 0; l < LANES; l += 4) {
    int rc = decode_all(form, rd, out, n, l, w, lut, pair, e);
    if (rc < 0)
      return rc;
  }
  /* Every sub-stream read to its end, with nothing but zero padding. */
  for (unsigned l = 0; l < LANES; l++)
    if (rd[l].p != rd[l].end || rd[l].nb >= 8 || rd[l].acc != 0)
      return FZ_ECORRUPT;
  return 0;
}
