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

#define FZD_CONFIG_STR 256

enum fzd_backend { FZD_BACKEND_AUTO = 0, FZD_BACKEND_CPU = 1, FZD_BACKEND_GPU = 2 };

/* Plain values only, so that a config can be copied and compared whole. */
typedef struct fzd_config {
  char socket_path[FZD_CONFIG_STR];
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
  uint64_t max_tcp_connections;
  uint64_t max_unauthenticated; /* TCP before hello */
  uint64_t tcp_handshake_timeout_ms;
  uint64_t max_reply_bytes_per_connection;
  uint64_t max_reply_bytes_total;
  uint64_t max_fds_per_connection;
  uint64_t max_fds_total; /* 0: half of RLIMIT_NOFILE */
  uint64_t handshake_timeout_ms; /* 0: no limit */
  uint64_t max_message_bytes;
  uint64_t max_inline_bytes;
  uint64_t max_job_bytes;
  uint64_t memory_limit; /* bytes; 0: 3/4 of physical memory */
  uint64_t max_mapped_bytes; /* sealed-memfd mappings, all connections */
  uint64_t max_mapped_bytes_per_connection;
  uint64_t plan_cache_entries;
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

/* Names for enum-typed values. */
const char *fzd_backend_name(uint64_t backend);

#endif
