/*
 * fzd_harness.h - runs the real fzd binary for a test.
 *
 * fzd_harness_start() makes a private temporary directory, writes a config
 * file there (socket in the same directory, the CPU backend or the one
 * FZD_TEST_BACKEND names, debug logging, plus the settings the test gives),
 * starts fzd with fork+exec with its stderr in a log file, and waits until
 * fzd sends READY=1 on the NOTIFY_SOCKET datagram socket the harness
 * created: when it returns 0 the daemon can serve.
 * fzd_harness_stop() sends SIGTERM, waits for the exit and returns the wait
 * status, so a test asserts a clean drain with
 *     int st = fzd_harness_stop(h, 20000);
 *     cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
 *
 * The binary is $FZD_BINARY when set, else the FZD_PATH macro the test target
 * was compiled with (add -DFZD_PATH="$<TARGET_FILE:fzd>" and a dependency on
 * fzd).  Set FZD_HARNESS_KEEP=1 to keep the directory and its log.
 */
#ifndef FZD_HARNESS_H
#define FZD_HARNESS_H

#include <stdbool.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fzd_harness fzd_harness;

typedef struct fzd_harness_options {
  /* JSON members appended to the config object, e.g.
   * "\"workers\": 1, \"tcp_enabled\": true, \"tcp_port\": 0"; NULL for none.
   * With tcp_port 0 fzd picks a free port, which fzd_harness_tcp_port()
   * reads from the STATUS= line fzd sends with READY=1. */
  const char *settings;
  /* Extra command-line arguments, NULL-terminated; NULL for none. */
  const char *const *args;
  /* Milliseconds to wait for READY=1; 0 means 30000. */
  int ready_timeout_ms;
  /* Extra "NAME=value" environment entries for fzd, NULL-terminated; NULL
   * for none (e.g. "WATCHDOG_USEC=200000"). */
  const char *const *env;
  /* When > 0, a listening socket handed to fzd as descriptor 3 with
   * LISTEN_FDS=1 and LISTEN_PID, as systemd socket activation does. */
  int listen_fd;
} fzd_harness_options;

/* Starts fzd (opt may be NULL).  Returns 0 and the harness in *out, or a
 * negative errno; on failure it prints why, with the daemon's log, to
 * stderr. */
int fzd_harness_start(const fzd_harness_options *opt, fzd_harness **out);

pid_t fzd_harness_pid(const fzd_harness *h);
const char *fzd_harness_dir(const fzd_harness *h);        /* temporary directory */
const char *fzd_harness_config_path(const fzd_harness *h);/* may be rewritten */
const char *fzd_harness_socket_path(const fzd_harness *h);
int fzd_harness_tcp_port(const fzd_harness *h);           /* 0 when TCP is off */

/* Blocking stream sockets connected to the daemon, or a negative errno. */
int fzd_harness_connect_unix(const fzd_harness *h);
int fzd_harness_connect_tcp(const fzd_harness *h);

/* Sends a signal to the daemon. */
int fzd_harness_kill(const fzd_harness *h, int sig);

/* Waits for a notify datagram that contains needle (e.g. "RELOADING=1"),
 * discarding others.  0 when seen, -ETIMEDOUT otherwise. */
int fzd_harness_wait_notify(fzd_harness *h, const char *needle, int timeout_ms);

/* The daemon's stderr so far, NUL-terminated; free() it. */
char *fzd_harness_log(const fzd_harness *h);

/* Waits up to timeout_ms for the daemon to exit on its own (after a signal
 * the test sent) and returns its wait status, or -ETIMEDOUT. */
int fzd_harness_wait_exit(fzd_harness *h, int timeout_ms);

/* Sends SIGTERM (unless the daemon has exited already), waits up to
 * timeout_ms, and returns the wait status; -ETIMEDOUT when the daemon did
 * not exit in time (it is then killed with SIGKILL).  A status other than a
 * clean exit 0 prints the log to stderr.  Frees h and its directory. */
int fzd_harness_stop(fzd_harness *h, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif /* FZD_HARNESS_H */
