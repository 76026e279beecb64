/*
 * archive_dims.c - a C helper of test_fzclient.f90: the dimensions an
 * archive's header names (slowest first), read with libfzclient, so the
 * Fortran test can check the shape order the module sends.
 */
#include <stdint.h>

#include "fzclient.h"

int test_archive_dims(const void *arc, size_t len, int64_t dims[4]);

int test_archive_dims(const void *arc, size_t len, int64_t dims[4]) {
  fz_client_archive info;
  if (fz_client_archive_info(arc, len, &info) < 0)
    return -1;
  for (unsigned i = 0; i < 4; i++)
    dims[i] = i < info.ndims ? (int64_t)info.shape[i] : 0;
  return (int)info.ndims;
}
