/*
 * fzd_harness.c - starts and stops a real fzd for the test suites; see
 * fzd_harness.h for the contract.  It plays the part of systemd: it owns the
 * NOTIFY_SOCKET the daemon reports READY=1 on, and it reaps the process.
 */
#include "fzd_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef FZD_PATH
#define FZD_PATH "fzd"
#endif

struct fzd_harness {
  pid_t pid;
  int status; /* wait status once reaped */
  bool reaped;
  int notify_fd;
  int tcp_port;
  char dir[80];
  char config[100];
  char socket[100];
  char notify[100];
  char log[100];
};

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

pid_t fzd_harness_pid(const fzd_harness *h) { return h->pid; }
const char *fzd_harness_dir(const fzd_harness *h) { return h->dir; }
const char *fzd_harness_config_path(const fzd_harness *h) { return h->config; }
const char *fzd_harness_socket_path(const fzd_harness *h) { return h->socket; }
int fzd_harness_tcp_port(const fzd_harness *h) { return h->tcp_port; }

char *fzd_harness_log(const fzd_harness *h) {
  FILE *f = fopen(h->log, "r");
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  if (buf == NULL) {
    if (f)
      fclose(f);
    return NULL;
  }
  if (f != NULL) {
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
      len += n;
      if (cap - len - 1 == 0) {
        char *nb = realloc(buf, cap * 2);
        if (nb == NULL)
          break;
        buf = nb;
        cap *= 2;
      }
    }
    fclose(f);
  }
  buf[len] = '\0';
  return buf;
}

static void dump_log(const fzd_harness *h, const char *why) {
  char *log = fzd_harness_log(h);
  fprintf(stderr, "fzd_harness: %s; fzd log (%s):\n%s\n", why, h->log,
          log ? log : "(unreadable)");
  free(log);
}

static int write_config(const fzd_harness *h, const char *settings) {
  FILE *f = fopen(h->config, "w");
  if (f == NULL)
    return -errno;
  /* FZD_TEST_BACKEND=gpu runs a suite against the GPU backend (tests/gpu/run.sh). */
  const char *backend = getenv("FZD_TEST_BACKEND");
  fprintf(f,
          "{\n  \"socket_path\": \"%s\",\n  \"backend\": \"%s\",\n"
          "  \"log_level\": \"debug\"%s%s\n}\n",
          h->socket, backend && backend[0] ? backend : "cpu", settings && settings[0] ? ",\n  " : "",
          settings ? settings : "");
  return fclose(f) == 0 ? 0 : -errno;
}

static int open_notify(fzd_harness *h) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", h->notify);
  h->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (h->notify_fd < 0)
    return -errno;
  if (bind(h->notify_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
    return -errno;
  return 0;
}

/* Reads the port out of "STATUS=... tcp:ADDR:PORT ...". */
static void parse_status(fzd_harness *h, const char *msg) {
  const char *t = strstr(msg, " tcp:");
  if (t == NULL)
    return;
  t += 5;
  const char *end = t + strcspn(t, " \n");
  const char *colon = NULL;
  for (const char *p = t; p < end; p++)
    if (*p == ':')
      colon = p;
  if (colon != NULL)
    h->tcp_port = atoi(colon + 1);
}

int fzd_harness_wait_notify(fzd_harness *h, const char *needle, int timeout_ms) {
  long long deadline = now_ms() + timeout_ms;
  char buf[4096];
  for (;;) {
    long long left = deadline - now_ms();
    if (left <= 0)
      return -ETIMEDOUT;
    struct pollfd pfd = {.fd = h->notify_fd, .events = POLLIN};
    /* Wake up now and then to notice a daemon that died before notifying. */
    int r = poll(&pfd, 1, left > 200 ? 200 : (int)left);
    if (r < 0 && errno != EINTR)
      return -errno;
    if (r > 0) {
      ssize_t n = recv(h->notify_fd, buf, sizeof(buf) - 1, 0);
      if (n < 0)
        return -errno;
      buf[n] = '\0';
      parse_status(h, buf);
      if (strstr(buf, needle) != NULL)
        return 0;
      continue;
    }
    if (!h->reaped && waitpid(h->pid, &h->status, WNOHANG) == h->pid) {
      h->reaped = true;
      return -ECHILD;
    }
    if (h->reaped)
      return -ECHILD;
  }
}

static void cleanup_dir(fzd_harness *h) {
  const char *keep = getenv("FZD_HARNESS_KEEP");
  if (h->notify_fd >= 0)
    close(h->notify_fd);
  h->notify_fd = -1;
  if (keep != NULL && keep[0] == '1')
    return;
  unlink(h->config);
  unlink(h->socket);
  unlink(h->notify);
  unlink(h->log);
  rmdir(h->dir);
}

int fzd_harness_start(const fzd_harness_options *opt, fzd_harness **out) {
  fzd_harness_options none = {0};
  if (opt == NULL)
    opt = &none;
  *out = NULL;
  fzd_harness *h = calloc(1, sizeof(*h));
  if (h == NULL)
    return -ENOMEM;
  h->notify_fd = -1;
  h->pid = -1;
  const char *tmp = getenv("TMPDIR");
  if (tmp == NULL || tmp[0] == '\0' || strlen(tmp) > 60)
    tmp = "/tmp";
  snprintf(h->dir, sizeof(h->dir), "%s/fzd-test-XXXXXX", tmp);
  if (mkdtemp(h->dir) == NULL) {
    int err = -errno;
    free(h);
    return err;
  }
  snprintf(h->config, sizeof(h->config), "%s/fzd.json", h->dir);
  snprintf(h->socket, sizeof(h->socket), "%s/fzd.sock", h->dir);
  snprintf(h->notify, sizeof(h->notify), "%s/notify", h->dir);
  snprintf(h->log, sizeof(h->log), "%s/fzd.log", h->dir);

  int err = write_config(h, opt->settings);
  if (err == 0)
    err = open_notify(h);
  if (err < 0) {
    fprintf(stderr, "fzd_harness: setup in %s: %s\n", h->dir, strerror(-err));
    cleanup_dir(h);
    free(h);
    return err;
  }

  const char *bin = getenv("FZD_BINARY");
  if (bin == NULL || bin[0] == '\0')
    bin = FZD_PATH;
  const char *argv[64];
  size_t argc = 0;
  argv[argc++] = bin;
  argv[argc++] = "--config";
  argv[argc++] = h->config;
  for (size_t i = 0; opt->args != NULL && opt->args[i] != NULL && argc < 63; i++)
    argv[argc++] = opt->args[i];
  argv[argc] = NULL;

  fflush(NULL);
  h->pid = fork();
  if (h->pid < 0) {
    err = -errno;
    cleanup_dir(h);
    free(h);
    return err;
  }
  if (h->pid == 0) {
    int logfd = open(h->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (logfd < 0 || nullfd < 0 || dup2(nullfd, 0) < 0 || dup2(logfd, 1) < 0 ||
        dup2(logfd, 2) < 0)
      _exit(127);
    setenv("NOTIFY_SOCKET", h->notify, 1);
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDNAMES");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    for (size_t i = 0; opt->env != NULL && opt->env[i] != NULL; i++)
      putenv((char *)opt->env[i]);
    if (opt->listen_fd > 0) {
      if (dup2(opt->listen_fd, 3) < 0)
        _exit(127);
      char pid[32];
      snprintf(pid, sizeof(pid), "%d", (int)getpid());
      setenv("LISTEN_PID", pid, 1);
      setenv("LISTEN_FDS", "1", 1);
    }
    signal(SIGPIPE, SIG_DFL);
    execv(bin, (char *const *)argv);
    dprintf(2, "fzd_harness: exec %s: %s\n", bin, strerror(errno));
    _exit(127);
  }

  int wait_ms = opt->ready_timeout_ms > 0 ? opt->ready_timeout_ms : 30000;
  err = fzd_harness_wait_notify(h, "READY=1", wait_ms);
  if (err < 0) {
    dump_log(h, err == -ECHILD ? "fzd exited before READY=1"
                               : "no READY=1 in time");
    if (!h->reaped) {
      kill(h->pid, SIGKILL);
      waitpid(h->pid, &h->status, 0);
    }
    cleanup_dir(h);
    free(h);
    return err;
  }
  *out = h;
  return 0;
}

static int connect_to(int family, const struct sockaddr *sa, socklen_t len) {
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  if (connect(fd, sa, len) < 0) {
    int err = -errno;
    close(fd);
    return err;
  }
  return fd;
}

int fzd_harness_connect_unix(const fzd_harness *h) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", h->socket);
  return connect_to(AF_UNIX, (struct sockaddr *)&sa, sizeof(sa));
}

int fzd_harness_connect_tcp(const fzd_harness *h) {
  if (h->tcp_port <= 0)
    return -ENOTCONN;
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)h->tcp_port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return connect_to(AF_INET, (struct sockaddr *)&sa, sizeof(sa));
}

int fzd_harness_kill(const fzd_harness *h, int sig) {
  if (h->reaped)
    return -ESRCH;
  return kill(h->pid, sig) == 0 ? 0 : -errno;
}

int fzd_harness_wait_exit(fzd_harness *h, int timeout_ms) {
  long long deadline = now_ms() + timeout_ms;
  while (!h->reaped) {
    pid_t r = waitpid(h->pid, &h->status, WNOHANG);
    if (r == h->pid) {
      h->reaped = true;
      break;
    }
    if (r < 0 && errno != EINTR)
      return -errno;
    if (now_ms() >= deadline)
      return -ETIMEDOUT;
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return h->status;
}

int fzd_harness_stop(fzd_harness *h, int timeout_ms) {
  if (h == NULL)
    return -EINVAL;
  if (!h->reaped)
    kill(h->pid, SIGTERM);
  int st = fzd_harness_wait_exit(h, timeout_ms);
  if (st == -ETIMEDOUT) {
    dump_log(h, "fzd did not exit after SIGTERM; killing it");
    kill(h->pid, SIGKILL);
    waitpid(h->pid, &h->status, 0);
  } else if (st >= 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
    char why[96];
    if (WIFSIGNALED(st))
      snprintf(why, sizeof(why), "fzd died of signal %d", WTERMSIG(st));
    else
      snprintf(why, sizeof(why), "fzd exited with status %d", WEXITSTATUS(st));
    dump_log(h, why);
  }
  cleanup_dir(h);
  free(h);
  return st;
}
