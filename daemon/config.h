/*
 * config.h - fzd's settings.  Every setting is one row of one table in
 * config.c (name, type, bounds, default, reloadable, description); loading,
 * validation, reload, --help and docs/configuration.md all follow that table.
 */
#ifndef FZD_CONFIG_H
#define FZD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fz.h"

#define FZD_CONFIG_STR 256
/* Entries of the "warm" setting, and of one "warm" request (methods.c). */
#define FZD_WARM_MAX 32
#define FZD_WARM_REQUEST_MAX 16
#define FZD_WARM_PIPELINE_MAX 1024

enum fzd_backend { FZD_BACKEND_AUTO = 0, FZD_BACKEND_CPU = 1, FZD_BACKEND_GPU = 2 };

/* One plan to prepare (the "warm" setting and method): what a compress
 * request with that dtype, shape, bound and pipeline would make.  Plain
 * values, zero-filled, so that entries compare whole. */
typedef struct fzd_warm_entry {
  fz_dtype dtype;
  unsigned ndims;
  uint64_t dims[FZ_MAX_DIMS];
  double eb;
  fz_eb_mode eb_mode;
  char pipeline[FZD_WARM_PIPELINE_MAX]; /* "": the default pipeline */
} fzd_warm_entry;

/* Plain values only, so that a config can be copied and compared whole. */
typedef struct fzd_config {
  char socket_path[FZD_CONFIG_STR];
  /* socket_path was given in the file: without it, a user who cannot use
   * /run/fzd gets a socket under $XDG_RUNTIME_DIR (listener.c). */
  bool socket_path_set;
  uint64_t socket_mode;
  char socket_group[FZD_CONFIG_STR];
  bool tcp_enabled;
  char tcp_address[FZD_CONFIG_STR];
  uint64_t tcp_port;
  char tcp_token[FZD_CONFIG_STR];
  uint64_t backend; /* enum fzd_backend */
  char gpu[FZD_CONFIG_STR];
  uint64_t gpu_memory_limit; /* bytes; 0: no limit */
  uint64_t workers; /* 0: one per online CPU */
  uint64_t queue_capacity;
  uint64_t max_inflight_per_connection;
  uint64_t max_connections; /* Unix socket */
  uint64_t max_connections_per_user; /* Unix socket, by the peer's uid */
  uint64_t max_tcp_connections;
  uint64_t max_unauthenticated; /* TCP before hello */
  uint64_t tcp_handshake_timeout_ms;
  uint64_t max_reply_bytes_per_connection;
  uint64_t max_reply_bytes_total;
  uint64_t max_fds_per_connection;
  uint64_t max_fds_total; /* 0: half of RLIMIT_NOFILE */
  uint64_t handshake_timeout_ms; /* 0: no limit */
  uint64_t message_timeout_ms;
  uint64_t max_message_bytes;
  uint64_t max_inline_bytes;
  uint64_t max_job_bytes;
  uint64_t memory_limit; /* bytes; 0: 3/4 of physical memory */
  uint64_t max_mapped_bytes; /* sealed-memfd mappings, all connections */
  uint64_t max_mapped_bytes_per_connection;
  uint64_t plan_cache_entries;
  uint64_t plan_cache_bytes; /* 0: no byte bound */
  bool cpu_affinity;
  uint64_t busy_poll_us;
  bool jit;
  /* jit_cache_dir: derived at start (fzd_config_jit_dir) when null in the
   * file or absent; "" keeps the JIT's modules in memory only. */
  bool jit_cache_dir_derived;
  char jit_cache_dir[FZD_CONFIG_STR];
  uint64_t jit_cache_max_bytes;
  uint64_t nwarm;
  fzd_warm_entry warm[FZD_WARM_MAX];
  uint64_t log_level; /* enum fzd_log_level */
  bool watchdog;
  uint64_t shutdown_timeout_s;
} fzd_config;

/* Fills cfg with every setting's default. */
void fzd_config_defaults(fzd_config *cfg);

/* Reads the JSON file at path over cfg (which holds defaults or earlier
 * values): 0, or FZ_ECONFIG with a message that quotes the file, the key and
 * the value in why. */
int fzd_config_load(const char *path, fzd_config *cfg, char *why, size_t why_len);

/* The same for the n bytes of text (text[n] must be '\0'), named path in the
 * messages. */
int fzd_config_parse(const char *text, size_t n, const char *path, fzd_config *cfg,
                     char *why, size_t why_len);

/* Applies a changed configuration: settings marked reloadable are copied from
 * next into cur and logged; others that differ are logged as needing a
 * restart.  Returns how many settings changed. */
unsigned fzd_config_apply_reload(fzd_config *cur, const fzd_config *next);

/* Writes the settings table (name, type, default, reloadable, description)
 * as help text. */
void fzd_config_print_help(FILE *out);

/* Checks a warm entry as a compress request with its parameters would be
 * checked: the shape's bytes (at most max_bytes, the max_job_bytes of a
 * job), and the engine's own validation of dtype, shape, pipeline and
 * bound (by making and dropping the CPU plan).  FZ_E... with why. */
int fzd_warm_entry_check(const fzd_warm_entry *e, uint64_t max_bytes, char *why,
                         size_t why_len);
/* The shape's bytes, or 0 on overflow. */
uint64_t fzd_warm_entry_bytes(const fzd_warm_entry *e);

/* The JIT module cache directory in force: the setting, or when it was
 * left null, $STATE_DIRECTORY/jit (systemd's StateDirectory=), else
 * $XDG_CACHE_HOME/fzd/jit, else $HOME/.cache/fzd/jit ("" when none of these
 * is set: memory only). */
void fzd_config_jit_dir(const fzd_config *cfg, char *out, size_t len);

/* Names for enum-typed values. */
const char *fzd_backend_name(uint64_t backend);

#endif
