/*
 * log.h - the daemon's log: one line per event on stderr, prefixed with the
 * journald priority ("<3>" error ... "<7>" debug) so that journald files each
 * line at the right level while a terminal still reads plain text.
 */
#ifndef FZD_LOG_H
#define FZD_LOG_H

enum fzd_log_level {
  FZD_LOG_ERROR = 3,
  FZD_LOG_WARNING = 4,
  FZD_LOG_INFO = 6,
  FZD_LOG_DEBUG = 7
};

/* Lines above level are dropped.  Safe to call from any thread. */
void fzd_log_set_level(enum fzd_log_level level);
enum fzd_log_level fzd_log_get_level(void);
/* "error", "warning", "info", "debug"; -1 for anything else. */
int fzd_log_level_parse(const char *name);

void fzd_log(enum fzd_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define fzd_err(...) fzd_log(FZD_LOG_ERROR, __VA_ARGS__)
#define fzd_warn(...) fzd_log(FZD_LOG_WARNING, __VA_ARGS__)
#define fzd_info(...) fzd_log(FZD_LOG_INFO, __VA_ARGS__)
#define fzd_debug(...) fzd_log(FZD_LOG_DEBUG, __VA_ARGS__)

#endif
