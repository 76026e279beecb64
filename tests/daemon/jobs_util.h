/*
 * jobs_util.h - compress/decompress requests for the daemon tests, packed by
 * hand with msgpack-c.
 */
#ifndef FZD_TEST_JOBS_UTIL_H
#define FZD_TEST_JOBS_UTIL_H

#include "wire.h"

/* Sends an inline f32 compress of x[n] (shape [n], ABS bound eb, verify). */
void send_compress_inline(wire *w, uint32_t msgid, const float *x, size_t n,
                          double eb);
/* Compresses x inline, decompresses the archive inline, and checks the max
 * error against eb with fz_compare. */
void roundtrip_inline(wire *w, uint32_t msgid, const float *x, size_t n, double eb);

#endif
