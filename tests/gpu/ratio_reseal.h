/*
 * ratio_reseal.h - a version-3 archive's CRCs recomputed after a test
 * edited its bytes (each chunk's into the payload CRC, then the header's),
 * so that the chunk's own checks are what must catch the edit: the hostile
 * cases of test_kernel_ratio and test_gpu_ratio.  Included after
 * Criterion's header.
 */
#ifndef FZ_TEST_RATIO_RESEAL_H
#define FZ_TEST_RATIO_RESEAL_H

#include <stdint.h>

#include "archive.h"
#include "engine.h"

/* The CRCs of an edited payload recomputed, so the chunk's own checks
 * are what must catch it. */
static inline void reseal(uint8_t *a, size_t len) {
  fze_header h;
  size_t tp;
  cr_assert_eq(fze_header_parse_prefix(a, len, &h, &tp), 0);
  uint32_t pc = 0;
  uint64_t off = h.header_len;
  for (uint64_t c = 0; c < h.nchunks; c++) {
    const uint8_t *p = a + tp + 4 * c;
    uint32_t sz = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                  (uint32_t)p[3] << 24;
    uint32_t cc = fze_crc32c(0, a + off, sz);
    uint8_t le[4];
    for (int k = 0; k < 4; k++)
      le[k] = (uint8_t)(cc >> (8 * k));
    pc = fze_crc32c(pc, le, 4);
    off += sz;
  }
  /* The payload CRC sits right before the table. */
  for (int k = 0; k < 4; k++)
    a[tp - 4 + k] = (uint8_t)(pc >> (8 * k));
  size_t hl = tp + 4 * h.nchunks;
  uint32_t hc = fze_crc32c(0, a, hl);
  for (int k = 0; k < 4; k++)
    a[hl + k] = (uint8_t)(hc >> (8 * k));
}

#endif
