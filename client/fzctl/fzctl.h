/*
 * fzctl.h - what the files of fzctl share: the global options, the command
 * functions of the table in fzctl.c, the argument parsers and the small
 * helpers for .npy headers, JSON output and the progress bar.
 */
#ifndef FZCTL_H
#define FZCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fzclient.h"

/* Exit codes: the contract scripts rely on. */
enum { CTL_OK = 0, CTL_USAGE = 1, CTL_SERVER = 2 };

typedef struct ctl_global {
  const char *address; /* NULL: fz_client_default_address() */
  const char *token;
} ctl_global;

typedef struct ctl_command {
  const char *name;
  int (*fn)(const ctl_global *g, int argc, char **argv);
  const char *summary;
  const char *usage; /* options, one per line, after "usage: fzctl NAME" */
} ctl_command;

/* The table, for usage messages from the commands themselves. */
const ctl_command *ctl_find_command(const char *name);
/* Prints "usage: fzctl NAME ..." and the options of a command. */
void ctl_print_usage(FILE *f, const ctl_command *cmd);
/* A usage error: prints "fzctl: <message>" and a hint, returns CTL_USAGE. */
int ctl_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prints "fzctl: <message>" to stderr. */
void ctl_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Connects with the global options; prints why and returns CTL_SERVER on a
 * failure. */
int ctl_connect(const ctl_global *g, fz_client **out);

int ctl_cmd_submit(const ctl_global *g, int argc, char **argv);
int ctl_cmd_status(const ctl_global *g, int argc, char **argv);
int ctl_cmd_stats(const ctl_global *g, int argc, char **argv);
int ctl_cmd_ping(const ctl_global *g, int argc, char **argv);
int ctl_cmd_presets(const ctl_global *g, int argc, char **argv);
int ctl_cmd_info(const ctl_global *g, int argc, char **argv);
int ctl_cmd_warm(const ctl_global *g, int argc, char **argv);
int ctl_cmd_frames(const ctl_global *g, int argc, char **argv);

/* args.c: parsers that return false after printing an error quoting text. */
bool ctl_parse_u64(const char *opt, const char *text, uint64_t min, uint64_t max,
                   uint64_t *out);
bool ctl_parse_double(const char *opt, const char *text, double *out);
bool ctl_parse_shape(const char *text, unsigned *ndims, uint64_t *dims);
void ctl_json_str(FILE *f, const char *s);

/* npy.c: the .npy header of numpy's format, versions 1 to 3. */
typedef struct ctl_npy {
  char dtype[8];        /* "f32", "u8", ... */
  unsigned ndims;
  uint64_t shape[FZ_CLIENT_MAX_DIMS];
  uint64_t data_offset; /* where the array starts */
} ctl_npy;

#define CTL_NPY_HEADER_BYTES 256u /* the header fzctl writes */

/* True when buf starts with the .npy magic. */
bool ctl_npy_is(const void *buf, size_t len);
/* Parses a header from buf (len bytes of the file's start).  Returns 0, or
 * -1 with a message quoting the bad part in why. */
int ctl_npy_parse(const void *buf, size_t len, ctl_npy *out, char *why,
                  size_t why_len);
/* Writes a CTL_NPY_HEADER_BYTES header for dtype and shape into buf.  -1 for
 * a dtype .npy cannot name. */
int ctl_npy_header(const char *dtype, unsigned ndims, const uint64_t *shape,
                   char buf[CTL_NPY_HEADER_BYTES]);

/* progress.c: a one-line bar on stderr, only when it is a terminal. */
typedef struct ctl_progress {
  bool on;
  size_t files_total;
  size_t files_done;
  uint64_t bytes_total;
  uint64_t bytes_done;
  double start_s;
  const char *unit; /* what files_done counts: "files" (set by start) */
} ctl_progress;

double ctl_now_s(void);
void ctl_progress_start(ctl_progress *p, bool wanted, size_t files, uint64_t bytes);
void ctl_progress_draw(ctl_progress *p);
void ctl_progress_clear(ctl_progress *p);

#endif /* FZCTL_H */
