/*
 * jobs_util.h - what the daemon suites share: starting and stopping fzd,
 * reading a counter, and compress/decompress requests packed by hand with
 * msgpack-c.
 */
#ifndef FZD_TEST_JOBS_UTIL_H
#define FZD_TEST_JOBS_UTIL_H

#include "fzd_harness.h"
#include "wire.h"

/* Starts fzd with extra JSON settings (may be NULL); asserts it came up. */
fzd_harness *start_daemon(const char *settings);
/* SIGTERM, then asserts a clean exit (status 0). */
void stop_daemon(fzd_harness *h);
/* One counter of "status" or "stats". */
uint64_t stat_u64(wire *w, const char *method, const char *key);
void sleep_ms(int ms);

/* Sends an inline f32 compress of x[n] (shape [n], ABS bound eb, verify). */
void send_compress_inline(wire *w, uint32_t msgid, const float *x, size_t n,
                          double eb);
/* Compresses x inline, decompresses the archive inline, and checks the max
 * error against eb with fz_compare. */
void roundtrip_inline(wire *w, uint32_t msgid, const float *x, size_t n, double eb);

#endif
