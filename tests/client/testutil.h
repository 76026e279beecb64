/*
 * testutil.h - what the client suites share: a smooth test field, a started
 * daemon with its addresses, and running a program with its output captured.
 */
#ifndef FZC_TESTUTIL_H
#define FZC_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "fzd_harness.h"

/* A smooth 2-D field (like a simulation output) of rows x cols values. */
float *tu_field_f32(size_t rows, size_t cols, float phase);
double *tu_field_f64(size_t rows, size_t cols, double phase);
/* max - min of n floats. */
double tu_range_f32(const float *v, size_t n);
double tu_range_f64(const double *v, size_t n);

/* Starts fzd with the given extra settings (CPU backend, 2 workers unless
 * settings say otherwise); aborts the test on failure. */
fzd_harness *tu_start(const char *settings);
/* Stops fzd and asserts a clean exit. */
void tu_stop(fzd_harness *h);
/* "unix:PATH" or "tcp:127.0.0.1:PORT" into buf. */
const char *tu_unix_addr(const fzd_harness *h, char *buf, size_t cap);
const char *tu_tcp_addr(const fzd_harness *h, char *buf, size_t cap);

/* Writes and reads whole files; tu_read returns a malloc'd buffer. */
void tu_write_file(const char *path, const void *p, size_t len);
void *tu_read_file(const char *path, size_t *len);

/* Runs a shell command line; stdout and stderr land in malloc'd strings
 * (either may be NULL).  Returns the exit status (0..255) or -1 when the
 * command died of a signal. */
int tu_run(const char *cmdline, char **out, char **err);

#endif
