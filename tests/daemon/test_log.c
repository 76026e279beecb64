/*
 * test_log.c - the daemon's log on its own: identical lines are counted,
 * not repeated, and a rate-limited call site lets a burst through and then
 * says how many lines it dropped.  stderr goes to a temporary file that the
 * test reads back.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

/* Points stderr at a fresh temporary file; returns it for reading. */
static FILE *capture(void) {
  FILE *f = tmpfile();
  cr_assert_not_null(f);
  cr_assert_geq(dup2(fileno(f), STDERR_FILENO), 0);
  return f;
}

static char *captured(FILE *f) {
  /* The log writes with write(2), past stdio: ask the file its size. */
  cr_assert_eq(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  cr_assert_geq(n, 0);
  char *text = calloc(1, (size_t)n + 1);
  cr_assert_not_null(text);
  rewind(f);
  cr_assert_eq(fread(text, 1, (size_t)n, f), (size_t)n);
  return text;
}

static unsigned count(const char *text, const char *needle) {
  unsigned n = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
    n++;
  return n;
}

Test(log, identical_lines_collapse) {
  FILE *f = capture();
  for (int i = 0; i < 1000; i++)
    fzd_warn("accept: %s", "Too many open files");
  fzd_info("something else");
  char *text = captured(f);
  cr_assert_eq(count(text, "accept: Too many open files"), 1u, "%s", text);
  cr_assert_eq(strcmp(text, "<4>accept: Too many open files\n"
                            "<4>last message repeated 999 times\n"
                            "<6>something else\n"), 0, "%s", text);
  free(text);
}

static void event(int i) {
  fzd_log_limited(FZD_LOG_WARNING, "client %d refused", i);
}

Test(log, rate_limited_call_site) {
  FILE *f = capture();
  for (int i = 0; i < 500; i++)
    event(i);
  char *text = captured(f);
  cr_assert_eq(count(text, "refused"), (unsigned)FZD_LOG_BURST, "%s", text);
  cr_assert_not_null(strstr(text, "<4>client 0 refused\n"));
  free(text);
}

Test(log, level_filters_before_the_limit) {
  FILE *f = capture();
  fzd_log_set_level(FZD_LOG_WARNING);
  for (int i = 0; i < 100; i++)
    fzd_log_limited(FZD_LOG_DEBUG, "debug %d", i);
  fzd_warn("shown");
  char *text = captured(f);
  cr_assert_eq(strcmp(text, "<4>shown\n"), 0, "%s", text);
  free(text);
}

/* Issue 27, item 9: control bytes from a client's strings reach the log as
 * '?', line breaks as spaces; printable text is untouched. */
Test(log, control_bytes_are_replaced) {
  FILE *f = capture();
  fzd_log(FZD_LOG_INFO, "client \"a\x1b[2Jb\x07\x7f\tc\nd\"");
  char *text = captured(f);
  cr_assert_str_eq(text, "<6>client \"a?[2Jb???c d\"\n");
  free(text);
}
