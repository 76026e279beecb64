/*
 * log.c - stderr logging with journald priority prefixes.  Each line is built
 * in a local buffer and written with one write(2) under a mutex, so lines
 * from the loop and from workers never interleave mid-line, and the mutex
 * also guards the repeat counting and the rate limits (log.h says why).
 */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 1024

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_line[LINE_MAX_BYTES]; /* the last line written, prefix included */
static size_t last_len;
static unsigned long long repeats, repeat_since_ms;

static unsigned long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (unsigned long long)ts.tv_sec * 1000u + (unsigned long long)ts.tv_nsec / 1000000u;
}

static void write_all(const char *p, size_t len) {
  ssize_t w = write(STDERR_FILENO, p, len);
  (void)w; /* nowhere left to report a failing stderr */
}

/* Writes the repeat count of the last line, if any (log_lock held). */
static void flush_repeats(void) {
  if (repeats == 0)
    return;
  char line[96];
  int n = snprintf(line, sizeof line, "%.3slast message repeated %llu times\n",
                   last_line, repeats);
  write_all(line, (size_t)n);
  repeats = 0;
}

int fzd_log_limit_pass(fzd_log_limit *lim, enum fzd_log_level level) {
  unsigned long long now = now_ms(), dropped = 0;
  int pass;
  pthread_mutex_lock(&log_lock);
  if (lim->window_ms == 0 || now - lim->window_ms >= FZD_LOG_WINDOW_MS) {
    dropped = lim->dropped;
    lim->window_ms = now;
    lim->lines = 0;
    lim->dropped = 0;
  }
  pass = lim->lines < FZD_LOG_BURST;
  if (pass)
    lim->lines++;
  else
    lim->dropped++;
  pthread_mutex_unlock(&log_lock);
  if (dropped > 0)
    fzd_log(level, "%llu more lines like the next one were dropped in %d s (rate limit)",
            dropped, FZD_LOG_WINDOW_MS / 1000);
  return pass;
}

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
  char line[LINE_MAX_BYTES];
  int n = snprintf(line, sizeof(line), "<%d>", (int)level);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof(line) - 2)
    len = sizeof(line) - 2;
  /* A newline inside a message would start a line without a priority, and
   * other control bytes (from a client's strings) could rewrite a terminal
   * or fool a reader: each becomes '?', a line break a space. */
  for (size_t i = (size_t)n; i < len; i++) {
    unsigned char ch = (unsigned char)line[i];
    if (ch == '\n' || ch == '\r')
      line[i] = ' ';
    else if (ch < 0x20 || ch == 0x7f)
      line[i] = '?';
  }
  line[len++] = '\n';
  unsigned long long now = now_ms();
  pthread_mutex_lock(&log_lock);
  if (len == last_len && memcmp(line, last_line, len) == 0) {
    if (repeats++ == 0)
      repeat_since_ms = now;
    if (now - repeat_since_ms >= FZD_LOG_REPEAT_MS) {
      flush_repeats();
      repeat_since_ms = now;
    }
  } else {
    flush_repeats();
    write_all(line, len);
    memcpy(last_line, line, len);
    last_len = len;
  }
  pthread_mutex_unlock(&log_lock);
}
