/*
 * wire.h - a bare msgpack-RPC client for the daemon tests, written against
 * proto/ alone so that the tests speak the wire exactly as the spec says and
 * can also speak it wrongly on purpose.
 */
#ifndef FZD_TEST_WIRE_H
#define FZD_TEST_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fzd_harness.h"
#include "fzp.h"

typedef struct wire {
  int fd;
  char *buf;
  size_t len, cap, consumed;
  msgpack_sbuffer sb;
  msgpack_packer pk;
} wire;

/* Connects (Unix or TCP); aborts the test on failure. */
void wire_open(wire *w, const fzd_harness *h, bool tcp);
void wire_close(wire *w);

/* Starts a request in the send buffer; the caller packs nfields pairs. */
msgpack_packer *wire_begin(wire *w, uint32_t msgid, const char *method,
                           uint32_t nfields);
/* Sends the buffered bytes, with descriptors attached to the first chunk:
 * 0, -ETIMEDOUT when the daemon reads nothing for a minute, or -errno. */
int wire_send(wire *w, const int *fds, unsigned nfds);
int wire_send_raw(wire *w, const void *bytes, size_t len);

/* Receives the next message.  0 on success (free with fzp_message_free; it
 * borrows the wire's buffer until the next call), -ECONNRESET when the daemon
 * closed the connection, -ETIMEDOUT, or an fzp_scan error. */
int wire_recv(wire *w, fzp_message *msg, int timeout_ms);

/* The error code of a response (0 when the error is nil). */
int wire_code(const fzp_message *msg);

/* hello with version 1 (and token when not NULL); returns the error code. */
int wire_hello(wire *w, const char *token);

/* A request with no params; returns the error code, and the response in msg
 * when msg is not NULL. */
int wire_call0(wire *w, uint32_t msgid, const char *method, fzp_message *msg);

/* Whether the daemon has closed the connection (reads to EOF, discarding). */
bool wire_closed_by_peer(wire *w, int timeout_ms);

/* A smooth test field of n floats. */
void wire_field_f32(float *x, size_t n, unsigned seed);

#endif
