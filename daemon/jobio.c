/*
 * jobio.c - a job's input and output on the host, for both backends: the
 * inline copy, the connection's mapping of a sealed memfd (fdmap.c, set up
 * by the loop thread), or pread and pwrite on any other passed descriptor;
 * results kept for the inline reply or written to the output descriptor,
 * with the room checks that make a too-small output ENOSPC with the size
 * needed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frames.h"
#include "jobio.h"

void fzd_job_free(fzd_job *job) {
  if (job == NULL)
    return;
  for (unsigned i = 0; i < job->nfds; i++)
    close(job->fds[i]);
  fzd_fdmap_release(job->in_ref);
  free(job->warm);
  fzd_frames_free(job->frames);
  free(job->in_data);
  free(job->out_data);
  free(job);
}

bool fzd_job_input_in_memory(const fzd_job *job) {
  return job->in_ptr != NULL || job->in_fd < 0;
}

/* Reads len bytes at offset off of the job's input (relative to in_off) of
 * in_fd into dst. */
static int pread_range(fzd_job *job, uint64_t off, size_t len, void *dst) {
  int fd = job->fds[job->in_fd];
  size_t got = 0;
  while (got < len) {
    ssize_t n = pread(fd, (char *)dst + got, len - got,
                      (off_t)(job->in_off + off + got));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      snprintf(job->why, sizeof(job->why), "reading in_fd at offset %llu: %s",
               (unsigned long long)(job->in_off + off + got),
               n < 0 ? strerror(errno) : "the file is shorter than it was");
      return FZ_EIO;
    }
    got += (size_t)n;
  }
  return 0;
}

/* Points *at to len bytes at off of the job's input: in place when the
 * input is in memory, else read into buf (which holds len bytes). */
int fzd_job_input_at(fzd_job *job, uint64_t off, size_t len, void *buf, const void **at) {
  if (fzd_job_input_in_memory(job)) {
    const char *base = job->in_ptr != NULL ? job->in_ptr : job->in_data;
    *at = base + off;
    return 0;
  }
  *at = buf;
  return pread_range(job, off, len, buf);
}

int fzd_job_read_input(fzd_job *job, const void **in) {
  if (fzd_job_input_in_memory(job))
    return fzd_job_input_at(job, 0, job->in_len, NULL, in);
  job->in_data = malloc(job->in_len ? job->in_len : 1);
  if (job->in_data == NULL)
    return FZ_ENOMEM;
  *in = job->in_data;
  return pread_range(job, 0, job->in_len, job->in_data);
}

int fzd_job_read_into(fzd_job *job, void *dst) {
  const void *src = job->in_ptr != NULL ? job->in_ptr : job->in_data;
  if (!fzd_job_input_in_memory(job))
    return pread_range(job, 0, job->in_len, dst);
  if (job->in_len > 0)
    memcpy(dst, src, job->in_len);
  return 0;
}

static int inline_too_large(fzd_job *job, size_t len) {
  if (len <= job->max_inline)
    return 0;
  snprintf(job->why, sizeof(job->why),
           "result of %zu bytes exceeds max_inline_bytes (%llu); pass out_fd", len,
           (unsigned long long)job->max_inline);
  return FZ_EMSGSIZE;
}

/* FZ_ENOSPC, with the size needed, when a result of len bytes does not fit
 * where out_fd may take it: within out_length when the client gave one, and
 * within a fixed-size (sealed) memfd, which cannot grow. */
int fzd_job_check_room(fzd_job *job, uint64_t len) {
  if (job->out_cap && len > job->out_cap) {
    snprintf(job->why, sizeof(job->why),
             "the result of %llu bytes does not fit out_length (%llu bytes)",
             (unsigned long long)len, (unsigned long long)job->out_cap);
    return FZ_ENOSPC;
  }
  struct stat st;
  if (job->out_truncate || fstat(job->fds[job->out_fd], &st) < 0)
    return 0;
  uint64_t size = (uint64_t)st.st_size;
  if (job->out_off > size || len > size - job->out_off) {
    snprintf(job->why, sizeof(job->why),
             "the result needs %llu bytes at out_offset %llu but out_fd is a "
             "fixed-size memfd of %llu bytes: make it at least %llu bytes",
             (unsigned long long)len, (unsigned long long)job->out_off,
             (unsigned long long)size, (unsigned long long)(job->out_off + len));
    return FZ_ENOSPC;
  }
  return 0;
}

uint64_t fzd_job_out_room(fzd_job *job) {
  uint64_t room = job->out_cap ? job->out_cap : UINT64_MAX;
  struct stat st;
  if (job->out_ipc || job->out_truncate || fstat(job->fds[job->out_fd], &st) < 0)
    return room;
  uint64_t size = (uint64_t)st.st_size;
  uint64_t left = job->out_off < size ? size - job->out_off : 0;
  return left < room ? left : room;
}

/* Writes len bytes at offset off of the output (relative to out_off). */
int fzd_job_pwrite(fzd_job *job, uint64_t off, const void *data, size_t len) {
  int fd = job->fds[job->out_fd];
  size_t put = 0;
  while (put < len) {
    ssize_t n = pwrite(fd, (const char *)data + put, len - put,
                       (off_t)(job->out_off + off + put));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      snprintf(job->why, sizeof(job->why), "writing out_fd: %s",
               n < 0 ? strerror(errno) : "no progress");
      return n < 0 && errno == ENOSPC ? FZ_ENOSPC : FZ_EIO;
    }
    put += (size_t)n;
  }
  return 0;
}

/* Cuts a file after the len bytes of result (not a fixed-size memfd). */
int fzd_job_truncate(fzd_job *job, uint64_t len) {
  if (job->out_truncate && ftruncate(job->fds[job->out_fd], (off_t)(job->out_off + len)) < 0) {
    snprintf(job->why, sizeof(job->why), "truncating out_fd: %s", strerror(errno));
    return FZ_EIO;
  }
  return 0;
}

/* Writes len bytes at out_off of out_fd and truncates a file after them. */
static int write_output(fzd_job *job, const void *data, size_t len) {
  int err = fzd_job_check_room(job, len);
  if (err == 0)
    err = fzd_job_pwrite(job, 0, data, len);
  if (err == 0)
    err = fzd_job_truncate(job, len);
  job->out_len = len;
  return err;
}

/* Delivers len bytes of result, taking data: to out_fd, or kept for the
 * inline reply. */
int fzd_job_deliver(fzd_job *job, void *data, size_t len) {
  if (job->out_fd < 0) {
    int err = inline_too_large(job, len);
    if (err < 0) {
      free(data);
      return err;
    }
    job->out_data = data;
    job->out_len = len;
    return 0;
  }
  int err = write_output(job, data, len);
  free(data);
  return err;
}

int fzd_job_deliver_copy(fzd_job *job, const void *data, size_t len) {
  if (job->out_fd >= 0)
    return write_output(job, data, len);
  int err = inline_too_large(job, len);
  if (err < 0)
    return err;
  void *copy = malloc(len ? len : 1);
  if (copy == NULL)
    return FZ_ENOMEM;
  memcpy(copy, data, len);
  job->out_data = copy;
  job->out_len = len;
  return 0;
}

