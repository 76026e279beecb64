/*
 * listener.c - the listening sockets: the Unix socket (created here with its
 * mode and group, or handed over by systemd socket activation through
 * LISTEN_FDS/LISTEN_PID) and the optional TCP socket.  Accepting is done with
 * accept4() from a uv_poll_t, since connections are driven by poll handles
 * too (conn.c says why).
 *
 * With the descriptor table full, accept() fails with EMFILE and the
 * connection stays in the backlog, so a level-triggered poll would wake the
 * loop forever and the client would wait with no answer.  The daemon keeps
 * one descriptor in reserve for that moment: it closes it, accepts, answers
 * EBUSY, closes, and takes the reserve again.  When even that fails the
 * listener pauses for a moment instead of spinning.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "server.h"

#define LISTEN_FDS_START 3
#define PAUSE_MS 200

void fzd_reserve_fd_refill(fzd_server *srv) {
  if (srv->reserve_fd < 0)
    srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void on_accept(uv_poll_t *h, int status, int events);

static void on_pause_over(uv_timer_t *t) {
  fzd_listener *l = t->data;
  fzd_server *srv = t->loop->data;
  fzd_reserve_fd_refill(srv);
  if (l->active)
    uv_poll_start(&l->poll, UV_READABLE, on_accept);
}

/* The table is full: refuse one waiting connection with the reserve
 * descriptor's slot.  False when there is no reserve either, and the
 * listener is paused. */
static bool refuse_with_reserve(fzd_server *srv, fzd_listener *l) {
  if (srv->reserve_fd >= 0) {
    close(srv->reserve_fd);
    srv->reserve_fd = -1;
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      fzd_refuse_fd(fd, FZ_EBUSY,
                    "fzd has no descriptor left for a connection; try again later");
      srv->stats.busy_rejections++;
    }
    fzd_reserve_fd_refill(srv);
    fzd_log_limited(FZD_LOG_WARNING,
                    "accept: %s; refused a connection with EBUSY (descriptor limit)",
                    strerror(EMFILE));
    if (fd >= 0 && srv->reserve_fd >= 0)
      return true;
  }
  fzd_log_limited(FZD_LOG_WARNING,
                  "accept: no descriptor left, not even the reserve; pausing the "
                  "listener for %d ms", PAUSE_MS);
  uv_poll_stop(&l->poll);
  uv_timer_start(&l->pause, on_pause_over, PAUSE_MS, 0);
  return false;
}

static void on_accept(uv_poll_t *h, int status, int events) {
  fzd_listener *l = h->data;
  fzd_server *srv = h->loop->data;
  (void)events;
  if (status < 0) {
    fzd_err("listener: %s", uv_strerror(status));
    return;
  }
  /* Bounded so a connection storm cannot keep the loop from its clients. */
  for (int i = 0; i < 64; i++) {
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EMFILE || errno == ENFILE) {
        if (refuse_with_reserve(srv, l))
          continue;
        return;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        fzd_log_limited(FZD_LOG_WARNING, "accept: %s", strerror(errno));
      return;
    }
    fzd_conn_accept(srv, fd, l->tcp);
  }
}

static int start_listener(fzd_server *srv, fzd_listener *l, int fd, bool tcp) {
  l->fd = fd;
  l->tcp = tcp;
  int err = uv_poll_init(srv->loop, &l->poll, fd);
  if (err < 0)
    return err;
  l->poll.data = l;
  uv_timer_init(srv->loop, &l->pause);
  l->pause.data = l;
  l->active = true;
  return uv_poll_start(&l->poll, UV_READABLE, on_accept);
}

static int set_nonblock_cloexec(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return -errno;
  if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
    return -errno;
  return 0;
}

/* Takes the sockets systemd passed: the first Unix stream socket and the
 * first TCP one.  Returns how many were used. */
static int take_activation(fzd_server *srv) {
  const char *pid = getenv("LISTEN_PID");
  const char *fds = getenv("LISTEN_FDS");
  if (pid == NULL || fds == NULL || strtol(pid, NULL, 10) != (long)getpid())
    return 0;
  long n = strtol(fds, NULL, 10);
  unsetenv("LISTEN_PID");
  unsetenv("LISTEN_FDS");
  unsetenv("LISTEN_FDNAMES");
  int used = 0;
  for (long i = 0; i < n && i < 64; i++) {
    int fd = LISTEN_FDS_START + (int)i;
    int domain = 0, type = 0, acc = 0;
    socklen_t len = sizeof(int);
    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len);
    len = sizeof(int);
    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len);
    len = sizeof(int);
    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len);
    fzd_listener *l = NULL;
    if (type == SOCK_STREAM && acc && domain == AF_UNIX && !srv->unix_l.active)
      l = &srv->unix_l;
    else if (type == SOCK_STREAM && acc && (domain == AF_INET || domain == AF_INET6) &&
             !srv->tcp_l.active)
      l = &srv->tcp_l;
    if (l == NULL) {
      fzd_warn("socket activation: ignoring descriptor %d (not a listening stream socket "
               "or a second one of its kind)", fd);
      close(fd);
      continue;
    }
    if (set_nonblock_cloexec(fd) < 0 || start_listener(srv, l, fd, l == &srv->tcp_l) < 0) {
      fzd_err("socket activation: cannot use descriptor %d", fd);
      close(fd);
      continue;
    }
    fzd_info("listening on %s socket from systemd (descriptor %d)",
             l == &srv->tcp_l ? "a TCP" : "a Unix", fd);
    if (l == &srv->tcp_l)
      snprintf(srv->tcp_bound, sizeof(srv->tcp_bound), "(from systemd)");
    used++;
  }
  return used;
}

/* The directory part of path ("/" for "/x", "." without a slash). */
static void parent_of(const char *path, char *dir, size_t len) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL)
    snprintf(dir, len, ".");
  else if (slash == path)
    snprintf(dir, len, "/");
  else
    snprintf(dir, len, "%.*s", (int)(slash - path), path);
}

/* The socket's directory must be one that no other user can write: such a
 * user could put a link, a file or a socket of their own at the socket's
 * path, or take fzd's socket away and put theirs in its place for clients
 * to find.  It must belong to fzd's user or to root, and not be writable by
 * its group or by others (sticky or not: a sticky directory still lets
 * others create the name first). */
static int check_socket_dir(const char *dir) {
  struct stat st;
  if (stat(dir, &st) != 0) {
    fzd_err("socket directory %s: %s", dir, strerror(errno));
    return -errno;
  }
  uid_t me = geteuid();
  if (!S_ISDIR(st.st_mode)) {
    fzd_err("socket directory %s: not a directory", dir);
    return FZ_ECONFIG;
  }
  if (st.st_uid != me && st.st_uid != 0) {
    fzd_err("socket directory %s belongs to uid %u, neither fzd's user (uid %u) nor root; "
            "refused: its owner could replace the socket", dir, (unsigned)st.st_uid,
            (unsigned)me);
    return FZ_ECONFIG;
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    fzd_err("socket directory %s is writable by its group or by others (mode %04o); "
            "refused: another user could replace the socket or race its set-up",
            dir, (unsigned)(st.st_mode & 07777));
    return FZ_ECONFIG;
  }
  return 0;
}

/* The socket is made in a private directory (mode 0700, made by fzd beside
 * the socket's path), given its group and mode there, where no other user
 * can swap anything in, and then renamed into place: rename() replaces the
 * name itself and follows no link, so no file but the socket can get the
 * socket's group or mode, whatever is done to the path meanwhile. */
static int open_unix(fzd_server *srv) {
  const fzd_config *cfg = &srv->cfg;
  const char *path = srv->unix_path;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  char dir[FZD_CONFIG_STR], priv[FZD_CONFIG_STR + 16], tmp[FZD_CONFIG_STR + 32];
  size_t n = strlen(path);
  if (n >= sizeof(sa.sun_path)) {
    fzd_err("socket_path \"%s\" is too long", path);
    return FZ_ECONFIG;
  }
  parent_of(path, dir, sizeof dir);
  if (strlen(dir) + sizeof "/.fzd-XXXXXX/s" > sizeof sa.sun_path) {
    fzd_err("socket_path \"%s\": its directory leaves no room for the private directory "
            "fzd binds in (the directory may be at most %zu bytes)", path,
            sizeof sa.sun_path - sizeof "/.fzd-XXXXXX/s");
    return FZ_ECONFIG;
  }
  int err = check_socket_dir(dir);
  if (err < 0)
    return err;
  memcpy(sa.sun_path, path, n + 1);
  /* A socket file left by a daemon that died is replaced; one that still
   * answers belongs to a live daemon and is left alone.  Anything else at
   * the path is not fzd's to replace. */
  struct stat st;
  if (lstat(path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      fzd_err("%s exists and is not a socket; refusing to replace it", path);
      return FZ_EBUSY;
    }
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    if (probe >= 0)
      close(probe);
    if (live) {
      fzd_err("%s: another fzd is already listening there", path);
      return FZ_EBUSY;
    }
  }
  snprintf(priv, sizeof priv, "%s/.fzd-XXXXXX", dir);
  if (mkdtemp(priv) == NULL) {
    err = -errno;
    fzd_err("cannot make a private directory in %s: %s", dir, strerror(errno));
    return err;
  }
  snprintf(tmp, sizeof tmp, "%s/s", priv);
  memcpy(sa.sun_path, tmp, strlen(tmp) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    err = -errno;
    goto err_dir;
  }
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
    err = -errno;
    fzd_err("bind %s: %s", tmp, strerror(errno));
    goto err_socket;
  }
  if (cfg->socket_group[0] != '\0') {
    struct group *gr = getgrnam(cfg->socket_group);
    if (gr == NULL || lchown(tmp, (uid_t)-1, gr->gr_gid) < 0) {
      fzd_err("socket_group \"%s\": %s", cfg->socket_group,
              gr == NULL ? "no such group" : strerror(errno));
      err = FZ_ECONFIG;
      goto err_bound;
    }
  }
  if (chmod(tmp, (mode_t)cfg->socket_mode) < 0 || listen(fd, 512) < 0 ||
      rename(tmp, path) < 0) {
    err = -errno;
    fzd_err("%s: %s", path, strerror(errno));
    goto err_bound;
  }
  rmdir(priv);
  srv->unlink_socket = true;
  fzd_info("listening on unix:%s (mode %04llo)", path, (unsigned long long)cfg->socket_mode);
  return start_listener(srv, &srv->unix_l, fd, false);

err_bound:
  unlink(tmp);
err_socket:
  close(fd);
err_dir:
  rmdir(priv);
  return err;
}

/* Where a plain `fzd` listens when socket_path was not given and this user
 * cannot use /run/fzd (not root, not the fzd user of the units): in
 * $XDG_RUNTIME_DIR/fzd (made with mode 0700), where libfzclient and the
 * Python client look when $FZD_SOCKET is unset and /run/fzd/fzd.sock does
 * not exist.  Leaves srv->unix_path as it is otherwise. */
static void choose_unix_path(fzd_server *srv) {
  snprintf(srv->unix_path, sizeof srv->unix_path, "%s", srv->cfg.socket_path);
  if (srv->cfg.socket_path_set)
    return;
  char dir[FZD_CONFIG_STR];
  parent_of(srv->unix_path, dir, sizeof dir);
  struct stat st;
  if (mkdir(dir, 0755) == 0 || (stat(dir, &st) == 0 && (st.st_uid == geteuid() ||
                                                          geteuid() == 0)))
    return; /* ours (or root's, for root) */
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  char alt[FZD_CONFIG_STR];
  if (xdg == NULL || xdg[0] != '/' ||
      (size_t)snprintf(alt, sizeof alt, "%s/fzd/fzd.sock", xdg) >= 108) {
    fzd_info("cannot use %s and $XDG_RUNTIME_DIR is not set (or too long); set "
             "socket_path or --socket", dir);
    return;
  }
  parent_of(alt, dir, sizeof dir);
  if (mkdir(dir, 0700) != 0 && errno != EEXIST)
    fzd_warn("cannot make %s: %s", dir, strerror(errno));
  snprintf(srv->unix_path, sizeof srv->unix_path, "%s", alt);
  fzd_info("no socket_path given and /run/fzd is not this user's: listening under "
           "$XDG_RUNTIME_DIR instead, at %s", alt);
}

static int open_tcp(fzd_server *srv) {
  const fzd_config *cfg = &srv->cfg;
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE};
  struct addrinfo *ai = NULL;
  char port[8];
  snprintf(port, sizeof(port), "%u", (unsigned)cfg->tcp_port);
  int r = getaddrinfo(cfg->tcp_address, port, &hints, &ai);
  if (r != 0) {
    fzd_err("tcp_address \"%s\": %s", cfg->tcp_address, gai_strerror(r));
    return FZ_ECONFIG;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
      bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 512) < 0) {
    int err = -errno;
    fzd_err("tcp %s port %s: %s", cfg->tcp_address, port, strerror(errno));
    if (fd >= 0)
      close(fd);
    freeaddrinfo(ai);
    return err;
  }
  freeaddrinfo(ai);
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  unsigned bound = 0;
  if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
    bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                           : ((struct sockaddr_in *)&ss)->sin_port);
  bool v6 = strchr(cfg->tcp_address, ':') != NULL;
  snprintf(srv->tcp_bound, sizeof(srv->tcp_bound), "%s%s%s:%u", v6 ? "[" : "",
           cfg->tcp_address, v6 ? "]" : "", bound);
  fzd_info("listening on tcp:%s%s", srv->tcp_bound,
           cfg->tcp_token[0] ? " (token required)" : "");
  if (cfg->tcp_token[0] == '\0')
    fzd_warn("TCP is enabled without tcp_token: anyone who can reach %s may use fzd",
             srv->tcp_bound);
  return start_listener(srv, &srv->tcp_l, fd, true);
}

int fzd_listeners_open(fzd_server *srv) {
  take_activation(srv);
  int err;
  if (!srv->unix_l.active)
    choose_unix_path(srv);
  if (!srv->unix_l.active && (err = open_unix(srv)) < 0)
    return err;
  if (srv->cfg.tcp_enabled && !srv->tcp_l.active && (err = open_tcp(srv)) < 0)
    return err;
  return 0;
}

static void on_listener_closed(uv_handle_t *h) {
  fzd_listener *l = h->data;
  close(l->fd);
}

void fzd_listeners_close(fzd_server *srv) {
  fzd_listener *ls[] = {&srv->unix_l, &srv->tcp_l};
  for (size_t i = 0; i < 2; i++) {
    if (!ls[i]->active)
      continue;
    ls[i]->active = false;
    uv_poll_stop(&ls[i]->poll);
    uv_close((uv_handle_t *)&ls[i]->pause, NULL);
    uv_close((uv_handle_t *)&ls[i]->poll, on_listener_closed);
  }
  if (srv->unlink_socket) {
    unlink(srv->unix_path);
    srv->unlink_socket = false;
  }
}
