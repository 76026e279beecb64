/*
 * log.h - the daemon's log: one line per event on stderr, prefixed with the
 * journald priority ("<3>" error ... "<7>" debug) so that journald files each
 * line at the right level while a terminal still reads plain text.
 *
 * A hostile client can make the same event happen at any rate, so the log
 * protects itself twice: a line identical to the one before it is counted,
 * not written, and shows up as "last message repeated N times" (when another
 * line comes, or every FZD_LOG_REPEAT_MS while the repeats go on); and a call
 * site that logs per client event uses fzd_log_limited(), which lets
 * FZD_LOG_BURST lines through per FZD_LOG_WINDOW_MS and then counts.
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

#define FZD_LOG_REPEAT_MS 10000
#define FZD_LOG_BURST 10
#define FZD_LOG_WINDOW_MS 10000

/* The state of one rate-limited call site; zero-initialized. */
typedef struct fzd_log_limit {
  unsigned long long window_ms; /* start of the current window */
  unsigned lines, dropped;
} fzd_log_limit;

/* Whether one more line of this call site may be written now; logs how many
 * were dropped when a new window opens.  Safe to call from any thread. */
int fzd_log_limit_pass(fzd_log_limit *lim, enum fzd_log_level level);

#define fzd_log_limited(level, ...)                                            \
  do {                                                                         \
    static fzd_log_limit fzd_log_site_;                                        \
    if ((int)(level) <= (int)fzd_log_get_level() &&                            \
        fzd_log_limit_pass(&fzd_log_site_, (level)))                           \
      fzd_log((level), __VA_ARGS__);                                           \
  } while (0)

#define fzd_err(...) fzd_log(FZD_LOG_ERROR, __VA_ARGS__)
#define fzd_warn(...) fzd_log(FZD_LOG_WARNING, __VA_ARGS__)
#define fzd_info(...) fzd_log(FZD_LOG_INFO, __VA_ARGS__)
#define fzd_debug(...) fzd_log(FZD_LOG_DEBUG, __VA_ARGS__)

#endif
