/*
 * address.c - turns an fzd address into a connected socket.
 *
 * Three spellings are accepted: "unix:PATH", "tcp:HOST:PORT" (an IPv6 host in
 * brackets) and a bare path.  The socket comes back non-blocking, because the
 * rest of the library waits with poll() and its own deadlines.
 *
 * An address may be a template for nodes with one fzd per GPU: "%l" stands
 * for the caller's node-local rank, as MPI launchers and Slurm export it
 * (taken modulo FZD_DAEMONS_PER_NODE when that is set, so that eight ranks
 * share four daemons), and "%%" for a percent sign.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"

static int errno_to_fz(int e) {
  switch (e) {
  case ECONNREFUSED:
  case ENOENT:     /* no socket file: nothing listens there */
  case ENOTSOCK:
  case EHOSTUNREACH:
  case ENETUNREACH:
    return FZ_ECONNREFUSED;
  case EACCES:
  case EPERM:
    return FZ_EACCES;
  case ETIMEDOUT:
    return FZ_ETIMEDOUT;
  case ENOMEM:
  case ENOBUFS:
    return FZ_ENOMEM;
  default:
    return FZ_EIO;
  }
}

/* Connects fd to sa, waiting at most timeout_ms for a TCP handshake. */
static int connect_within(int fd, const struct sockaddr *sa, socklen_t salen,
                          int timeout_ms) {
  if (connect(fd, sa, salen) == 0)
    return 0;
  if (errno != EINPROGRESS && errno != EAGAIN)
    return -errno;
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  int n;
  do {
    n = poll(&p, 1, timeout_ms > 0 ? timeout_ms : -1);
  } while (n < 0 && errno == EINTR);
  if (n == 0)
    return -ETIMEDOUT;
  if (n < 0)
    return -errno;
  int soerr = 0;
  socklen_t len = sizeof soerr;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
    return -errno;
  return soerr ? -soerr : 0;
}

static int dial_unix(const char *path, int timeout_ms, int *fd_out, char *why,
                     size_t why_len) {
  struct sockaddr_un sun;
  memset(&sun, 0, sizeof sun);
  sun.sun_family = AF_UNIX;
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof sun.sun_path) {
    snprintf(why, why_len, "invalid socket path '%s' (empty or over %zu bytes)",
             path, sizeof sun.sun_path - 1);
    return FZ_EINVAL;
  }
  memcpy(sun.sun_path, path, n);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(why, why_len, "socket: %s", strerror(errno));
    return errno_to_fz(errno);
  }
  int rc = connect_within(fd, (const struct sockaddr *)&sun, sizeof sun, timeout_ms);
  if (rc < 0) {
    snprintf(why, why_len, "cannot connect to '%s': %s", path, strerror(-rc));
    close(fd);
    return errno_to_fz(-rc);
  }
  *fd_out = fd;
  return 0;
}

static int dial_tcp(const char *hostport, int timeout_ms, int *fd_out,
                    char *why, size_t why_len) {
  char host[256];
  const char *port;
  if (hostport[0] == '[') {
    const char *end = strchr(hostport, ']');
    if (!end || end[1] != ':' || (size_t)(end - hostport - 1) >= sizeof host)
      goto malformed;
    memcpy(host, hostport + 1, (size_t)(end - hostport - 1));
    host[end - hostport - 1] = '\0';
    port = end + 2;
  } else {
    const char *colon = strrchr(hostport, ':');
    if (!colon || (size_t)(colon - hostport) >= sizeof host)
      goto malformed;
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = '\0';
    port = colon + 1;
  }
  if (host[0] == '\0' || port[0] == '\0' || strspn(port, "0123456789") != strlen(port))
    goto malformed;

  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int gai = getaddrinfo(host, port, &hints, &res);
  if (gai != 0) {
    snprintf(why, why_len, "cannot resolve '%s': %s", host, gai_strerror(gai));
    return FZ_ECONNREFUSED;
  }
  int rc = -ECONNREFUSED;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    ai->ai_protocol);
    if (fd < 0) {
      rc = -errno;
      continue;
    }
    rc = connect_within(fd, ai->ai_addr, ai->ai_addrlen, timeout_ms);
    if (rc == 0) {
      int one = 1;
      /* Requests are small and latency-bound: no Nagle delay. */
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      freeaddrinfo(res);
      *fd_out = fd;
      return 0;
    }
    close(fd);
  }
  freeaddrinfo(res);
  snprintf(why, why_len, "cannot connect to '%s': %s", hostport, strerror(-rc));
  return errno_to_fz(-rc);

malformed:
  snprintf(why, why_len, "malformed TCP address 'tcp:%s' (expected tcp:HOST:PORT)",
           hostport);
  return FZ_EINVAL;
}

/* The launchers' names for the node-local rank, in the order they are
 * looked for: Open MPI, MPICH and Intel MPI, Slurm, and PMIx-based ones. */
static const char *const local_rank_vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                              "SLURM_LOCALID", "PMIX_LOCAL_RANK",
                                              "PMI_LOCAL_RANK"};

static int whole(const char *text, unsigned long *v) {
  if (text == NULL || text[0] < '0' || text[0] > '9')
    return -1;
  char *end;
  errno = 0;
  *v = strtoul(text, &end, 10);
  return errno != 0 || *end != '\0' ? -1 : 0;
}

/* The node-local rank (modulo FZD_DAEMONS_PER_NODE), or an error naming
 * what was looked for. */
static int local_rank(unsigned long *rank, char *why, size_t why_len) {
  const char *name = NULL, *text = NULL;
  for (size_t i = 0; i < sizeof local_rank_vars / sizeof *local_rank_vars && text == NULL; i++)
    if ((text = getenv(local_rank_vars[i])) != NULL)
      name = local_rank_vars[i];
  if (text == NULL) {
    snprintf(why, why_len, "the address has %%l but no launcher said the local rank "
             "(OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID, PMIX_LOCAL_RANK, "
             "PMI_LOCAL_RANK are unset)");
    return FZ_EINVAL;
  }
  if (whole(text, rank) < 0) {
    snprintf(why, why_len, "%s is '%s', not a local rank", name, text);
    return FZ_EINVAL;
  }
  const char *per = getenv("FZD_DAEMONS_PER_NODE");
  unsigned long n;
  if (per != NULL) {
    if (whole(per, &n) < 0 || n == 0) {
      snprintf(why, why_len, "FZD_DAEMONS_PER_NODE is '%s', not a positive number", per);
      return FZ_EINVAL;
    }
    *rank %= n;
  }
  return 0;
}

int fzc_expand_address(const char *tmpl, char *out, size_t cap, char *why, size_t why_len) {
  size_t k = 0;
  for (const char *p = tmpl; *p; p++) {
    char num[24];
    const char *put = num;
    if (*p != '%') {
      num[0] = *p;
      num[1] = '\0';
    } else if (p[1] == '%') {
      put = "%";
      p++;
    } else if (p[1] == 'l') {
      unsigned long rank;
      int rc = local_rank(&rank, why, why_len);
      if (rc < 0)
        return rc;
      snprintf(num, sizeof num, "%lu", rank);
      p++;
    } else {
      snprintf(why, why_len, "address '%s': '%%%c' is not %%l or %%%%", tmpl,
               p[1] ? p[1] : ' ');
      return FZ_EINVAL;
    }
    size_t n = strlen(put);
    if (k + n >= cap) {
      snprintf(why, why_len, "address '%s' is too long once expanded", tmpl);
      return FZ_EINVAL;
    }
    memcpy(out + k, put, n);
    k += n;
  }
  out[k] = '\0';
  return 0;
}

int fzc_dial(const char *address, int timeout_ms, int *fd_out,
             fz_transport *transport, char *why, size_t why_len) {
  if (strncmp(address, "tcp:", 4) == 0) {
    *transport = FZ_TRANSPORT_TCP;
    return dial_tcp(address + 4, timeout_ms, fd_out, why, why_len);
  }
  *transport = FZ_TRANSPORT_UNIX;
  if (strncmp(address, "unix:", 5) == 0)
    address += 5;
  return dial_unix(address, timeout_ms, fd_out, why, why_len);
}
