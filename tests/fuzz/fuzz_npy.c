/*
 * fuzz_npy.c - libFuzzer target for fzctl's reader of .npy headers, the one
 * part of a user's file that fzctl parses itself.  A header either parses,
 * with its data starting inside what was read and a shape fzd accepts, or is
 * refused with a message; the header fzctl writes for a parsed dtype and
 * shape parses back to the same.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fzctl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ctl_npy a, b;
  char why[256] = "";
  if (ctl_npy_parse(data, size, &a, why, sizeof why) < 0) {
    if (why[0] == '\0')
      abort();
    return 0;
  }
  if (a.data_offset > size || a.ndims < 1 || a.ndims > FZ_CLIENT_MAX_DIMS ||
      memchr(a.dtype, '\0', sizeof a.dtype) == NULL)
    abort();
  char head[CTL_NPY_HEADER_BYTES];
  if (ctl_npy_header(a.dtype, a.ndims, a.shape, head) < 0)
    abort(); /* every dtype the reader accepts can be written */
  if (ctl_npy_parse(head, sizeof head, &b, why, sizeof why) < 0)
    abort();
  if (strcmp(a.dtype, b.dtype) != 0 || a.ndims != b.ndims ||
      memcmp(a.shape, b.shape, a.ndims * sizeof a.shape[0]) != 0 ||
      b.data_offset != CTL_NPY_HEADER_BYTES)
    abort();
  return 0;
}
