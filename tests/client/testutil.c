/*
 * testutil.c - helpers of the client suites (see testutil.h).  Commands run
 * through /bin/sh so that a test can build real pipes around fzctl.
 */
#include "testutil.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

float *tu_field_f32(size_t rows, size_t cols, float phase) {
  float *v = malloc(rows * cols * sizeof *v);
  cr_assert_not_null(v);
  for (size_t i = 0; i < rows; i++)
    for (size_t j = 0; j < cols; j++)
      v[i * cols + j] = (float)(100.0 * sin(0.02 * (double)i + phase) * cos(0.015 * (double)j) +
                                20.0 * sin(0.003 * (double)(i + j)));
  return v;
}

double *tu_field_f64(size_t rows, size_t cols, double phase) {
  double *v = malloc(rows * cols * sizeof *v);
  cr_assert_not_null(v);
  for (size_t i = 0; i < rows; i++)
    for (size_t j = 0; j < cols; j++)
      v[i * cols + j] = 3.0 * cos(0.01 * (double)i + phase) * sin(0.02 * (double)j) + 1e-3 * (double)j;
  return v;
}

double tu_range_f32(const float *v, size_t n) {
  float lo = v[0], hi = v[0];
  for (size_t i = 1; i < n; i++) {
    lo = v[i] < lo ? v[i] : lo;
    hi = v[i] > hi ? v[i] : hi;
  }
  return (double)hi - (double)lo;
}

double tu_range_f64(const double *v, size_t n) {
  double lo = v[0], hi = v[0];
  for (size_t i = 1; i < n; i++) {
    lo = v[i] < lo ? v[i] : lo;
    hi = v[i] > hi ? v[i] : hi;
  }
  return hi - lo;
}

fzd_harness *tu_start(const char *settings) {
  char buf[512];
  if (settings && strstr(settings, "\"workers\""))
    snprintf(buf, sizeof buf, "%s", settings);
  else
    snprintf(buf, sizeof buf, "\"workers\": 2%s%s", settings ? ", " : "",
             settings ? settings : "");
  fzd_harness_options o = {.settings = buf, .args = NULL, .ready_timeout_ms = 0};
  fzd_harness *h = NULL;
  int rc = fzd_harness_start(&o, &h);
  cr_assert_eq(rc, 0, "fzd did not start: %s", strerror(-rc));
  return h;
}

void tu_stop(fzd_harness *h) {
  int st = fzd_harness_stop(h, 20000);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fzd did not exit cleanly (status %d)", st);
}

const char *tu_unix_addr(const fzd_harness *h, char *buf, size_t cap) {
  snprintf(buf, cap, "unix:%s", fzd_harness_socket_path(h));
  return buf;
}

const char *tu_tcp_addr(const fzd_harness *h, char *buf, size_t cap) {
  cr_assert_gt(fzd_harness_tcp_port(h), 0, "TCP is not on");
  snprintf(buf, cap, "tcp:127.0.0.1:%d", fzd_harness_tcp_port(h));
  return buf;
}

void tu_write_file(const char *path, const void *p, size_t len) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "cannot create %s", path);
  cr_assert_eq(fwrite(p, 1, len, f), len);
  cr_assert_eq(fclose(f), 0);
}

void *tu_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *p = malloc(n > 0 ? (size_t)n : 1);
  cr_assert_not_null(p);
  cr_assert_eq(fread(p, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return p;
}

static char *slurp_fd(FILE *f) {
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  cr_assert_not_null(s);
  size_t got = fread(s, 1, (size_t)n, f);
  s[got] = '\0';
  return s;
}

int tu_run(const char *cmdline, char **out, char **err) {
  FILE *fo = tmpfile(), *fe = tmpfile();
  cr_assert(fo && fe);
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    dup2(fileno(fo), STDOUT_FILENO);
    dup2(fileno(fe), STDERR_FILENO);
    execl("/bin/sh", "sh", "-c", cmdline, (char *)NULL);
    _exit(127);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    ;
  if (out)
    *out = slurp_fd(fo);
  if (err)
    *err = slurp_fd(fe);
  fclose(fo);
  fclose(fe);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
