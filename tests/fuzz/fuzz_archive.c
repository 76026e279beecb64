/*
 * fuzz_archive.c - libFuzzer target for the archive decoder.  Each input is
 * decoded twice: as it is (checksums will usually reject it), and with both
 * checksums recomputed when its header is well-formed enough to locate them,
 * so mutations reach the structural checks and every stage decoder.
 * Nothing may crash, read or write out of bounds, or succeed with an output
 * size other than the header's.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "archive_fixup.h"
#include "fz.h"

/* Outputs beyond this are not worth a fuzzer's time. */
#define MAX_RAW (16u << 20)

static void decode(const uint8_t *a, size_t len) {
  fz_archive_info info;
  if (fz_archive_inspect(a, len, &info) < 0 || info.raw_bytes > MAX_RAW) {
    size_t olen;
    uint8_t small[64];
    /* Still exercised: the decoder must refuse on its own. */
    if (fz_decompress(a, len, small, sizeof small, &olen, 1) == 0 &&
        olen > sizeof small)
      abort();
    return;
  }
  uint8_t *out = malloc(info.raw_bytes ? info.raw_bytes : 1);
  size_t olen = 0;
  if (out == NULL)
    return;
  if (fz_decompress(a, len, out, info.raw_bytes, &olen, 1) == 0 && olen != info.raw_bytes)
    abort();
  free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  decode(data, size);
  /* Locate the checksums by the layout the header declares. */
  fze_header layout;
  uint8_t *copy = malloc(size ? size : 1);
  if (copy == NULL)
    return 0;
  memcpy(copy, data, size);
  fze_header_parse(copy, size, &layout);
  if (layout.sizes != NULL) {
    /* The chunk table was located and bounded; when the header checksum is
     * what failed, the header ends right after the table and its CRC. */
    if (layout.header_len == 0)
      layout.header_len = (size_t)(layout.sizes - copy) + layout.table_w * (size_t)layout.nchunks + 4;
    archive_fix_checksums(copy, size, &layout);
    decode(copy, size);
  }
  free(copy);
  return 0;
}
