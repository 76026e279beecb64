/*
 * xorshift.h - the seeded generator of the randomized wire tests (mutation
 * storms against fzd and against libfzclient): xorshift64, so a failing
 * round can be replayed from its seed.
 */
#ifndef FZ_TEST_XORSHIFT_H
#define FZ_TEST_XORSHIFT_H

#include <stdint.h>

static inline uint64_t xorshift64(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

#endif
