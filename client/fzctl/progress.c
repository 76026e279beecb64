/*
 * progress.c - the progress bar of `fzctl submit`: files and bytes done and
 * the throughput so far, redrawn in place on stderr.  It is drawn only when
 * stderr is a terminal, so logs and pipes never see control characters.
 */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "fzctl.h"

double ctl_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ctl_progress_start(ctl_progress *p, bool wanted, size_t files, uint64_t bytes) {
  p->on = wanted && isatty(STDERR_FILENO);
  p->files_total = files;
  p->files_done = 0;
  p->bytes_total = bytes;
  p->bytes_done = 0;
  p->start_s = ctl_now_s();
  p->unit = "files";
}

void ctl_progress_draw(ctl_progress *p) {
  if (!p->on)
    return;
  enum { WIDTH = 30 };
  double frac = p->bytes_total ? (double)p->bytes_done / (double)p->bytes_total
                               : (p->files_total ? (double)p->files_done / (double)p->files_total : 1);
  if (frac > 1)
    frac = 1;
  char bar[WIDTH + 1];
  int fill = (int)(frac * WIDTH);
  for (int i = 0; i < WIDTH; i++)
    bar[i] = i < fill ? '#' : '.';
  bar[WIDTH] = '\0';
  double secs = ctl_now_s() - p->start_s;
  double mibs = secs > 0 ? (double)p->bytes_done / 1048576.0 / secs : 0;
  fprintf(stderr, "\r[%s] %3.0f%%  %zu/%zu %s  %.1f MiB/s ", bar, frac * 100, p->files_done,
          p->files_total, p->unit, mibs);
  fflush(stderr);
}

void ctl_progress_clear(ctl_progress *p) {
  if (!p->on)
    return;
  fputs("\r\033[K", stderr);
  fflush(stderr);
}
