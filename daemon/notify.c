/*
 * notify.c - sd_notify() without libsystemd.  $NOTIFY_SOCKET is a filesystem
 * path or, when it starts with '@', a Linux abstract socket name (the '@'
 * stands for the leading NUL byte).  The socket is opened per message: the
 * daemon notifies a handful of times in its life, so there is nothing to
 * save by keeping it.
 *
 * The send never blocks: the loop thread calls it, and a service manager
 * (or anything else at that path) that stops reading would otherwise hang
 * the daemon once the socket's queue is full.  A message that cannot go at
 * once is dropped with a rate-limited line in the log.
 */
#include "notify.h"

#include "log.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int fzd_notify(const char *state) {
  const char *path = getenv("NOTIFY_SOCKET");
  if (path == NULL || path[0] == '\0')
    return 0;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t n = strlen(path);
  if (path[0] != '/' && path[0] != '@')
    return -EAFNOSUPPORT;
  if (n >= sizeof(sa.sun_path))
    return -ENAMETOOLONG;
  memcpy(sa.sun_path, path, n);
  if (path[0] == '@')
    sa.sun_path[0] = '\0';
  socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
                                (path[0] == '@' ? 0 : 1));
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return -errno;
  ssize_t w = sendto(fd, state, strlen(state), MSG_NOSIGNAL | MSG_DONTWAIT,
                     (struct sockaddr *)&sa, salen);
  int err = w < 0 ? -errno : 0;
  close(fd);
  if (err < 0) {
    size_t n0 = strcspn(state, "\n");
    fzd_log_limited(FZD_LOG_WARNING, "notify %.*s: %s%s", (int)(n0 > 40 ? 40 : n0), state,
                    strerror(-err),
                    err == -EAGAIN ? " (nothing reads NOTIFY_SOCKET; message dropped)" : "");
  }
  return err;
}

uint64_t fzd_notify_watchdog_usec(void) {
  const char *usec = getenv("WATCHDOG_USEC");
  if (usec == NULL)
    return 0;
  const char *pid = getenv("WATCHDOG_PID");
  if (pid != NULL && strtol(pid, NULL, 10) != (long)getpid())
    return 0;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(usec, &end, 10);
  if (errno != 0 || end == usec || *end != '\0')
    return 0;
  return v;
}

uint64_t fzd_notify_monotonic_usec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}
