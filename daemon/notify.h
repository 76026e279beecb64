/*
 * notify.h - the systemd service notification protocol, spoken directly: one
 * datagram of "KEY=value" lines to the socket named by $NOTIFY_SOCKET.
 */
#ifndef FZD_NOTIFY_H
#define FZD_NOTIFY_H

#include <stdint.h>

/* Sends state (e.g. "READY=1\nSTATUS=serving") without ever blocking.  0
 * when sent or when there is no NOTIFY_SOCKET (not run by a service
 * manager), a negative errno on failure (-EAGAIN when the socket's queue is
 * full: the message is dropped), which is also logged, rate-limited. */
int fzd_notify(const char *state);

/* The watchdog interval in microseconds that systemd asked for through
 * WATCHDOG_USEC (and WATCHDOG_PID, when set, naming this process); 0 when
 * none. */
uint64_t fzd_notify_watchdog_usec(void);

/* CLOCK_MONOTONIC in microseconds, as RELOADING=1 wants in MONOTONIC_USEC. */
uint64_t fzd_notify_monotonic_usec(void);

#endif
