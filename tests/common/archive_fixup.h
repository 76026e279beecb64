/*
 * archive_fixup.h - recomputes both checksums of a (mutated) archive, so
 * that hostile-archive tests and the archive fuzzer reach the structural
 * checks and the stage decoders instead of stopping at a CRC mismatch.
 * White-box: it knows the header layout of docs/format.md through the
 * engine's private archive.h.
 */
#ifndef FZ_TEST_ARCHIVE_FIXUP_H
#define FZ_TEST_ARCHIVE_FIXUP_H

#include <stddef.h>
#include <stdint.h>

#include "archive.h"

/* `layout` is the header of the archive before mutation (fze_header_parse);
 * its chunk table position and count are trusted, the table's contents are
 * read from `a` as mutated. */
static inline void archive_fix_checksums(uint8_t *a, size_t len, const fze_header *layout) {
  unsigned tw = layout->table_w; /* 2, or 4 in version 3 */
  size_t table = layout->header_len - 4 - tw * (size_t)layout->nchunks;
  size_t pos = layout->header_len;
  uint8_t crcs[4096];
  size_t k = 0;
  uint32_t pc = 0;
  for (uint64_t i = 0; i < layout->nchunks; i++) {
    size_t sz = 0;
    for (unsigned b = 0; b < tw; b++)
      sz |= (size_t)a[table + tw * i + b] << (8 * b);
    if (pos + sz > len)
      sz = len > pos ? len - pos : 0;
    uint32_t c = fze_crc32c(0, a + pos, sz);
    pos += sz;
    for (int b = 0; b < 4; b++)
      crcs[k++] = (uint8_t)(c >> (8 * b));
    if (k == sizeof crcs) {
      pc = fze_crc32c(pc, crcs, k);
      k = 0;
    }
  }
  pc = fze_crc32c(pc, crcs, k);
  size_t pcrc = table - 4;
  for (int b = 0; b < 4; b++)
    a[pcrc + (size_t)b] = (uint8_t)(pc >> (8 * b));
  uint32_t hc = fze_crc32c(0, a, layout->header_len - 4);
  for (int b = 0; b < 4; b++)
    a[layout->header_len - 4 + (size_t)b] = (uint8_t)(hc >> (8 * b));
}

#endif
