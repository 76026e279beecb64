/*
 * log.c - stderr logging with journald priority prefixes.  Each line is built
 * in a local buffer and written with one write(2), so lines from the loop and
 * from workers never interleave mid-line.
 */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static _Atomic int log_level = FZD_LOG_INFO;

void fzd_log_set_level(enum fzd_log_level level) { log_level = (int)level; }
enum fzd_log_level fzd_log_get_level(void) { return (enum fzd_log_level)log_level; }

int fzd_log_level_parse(const char *name) {
  static const struct {
    const char *name;
    enum fzd_log_level level;
  } names[] = {{"error", FZD_LOG_ERROR},
               {"warning", FZD_LOG_WARNING},
               {"info", FZD_LOG_INFO},
               {"debug", FZD_LOG_DEBUG}};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strcmp(name, names[i].name) == 0)
      return (int)names[i].level;
  return -1;
}

void fzd_log(enum fzd_log_level level, const char *fmt, ...) {
  if ((int)level > log_level)
    return;
  char line[1024];
  int n = snprintf(line, sizeof(line), "<%d>", (int)level);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof(line) - 2)
    len = sizeof(line) - 2;
  /* A newline inside a message would start a line without a priority. */
  for (size_t i = (size_t)n; i < len; i++)
    if (line[i] == '\n' || line[i] == '\r')
      line[i] = ' ';
  line[len++] = '\n';
  ssize_t w = write(STDERR_FILENO, line, len);
  (void)w; /* nowhere left to report a failing stderr */
}
