/*
 * daemon_bench.c - the service's bars, measured against a running fzd:
 *
 *   1. ping round trips over the socket (p50, p99);
 *   2. C concurrent clients each compressing J jobs of M MiB through
 *      libfzclient against the same jobs run by the engine in-process on as
 *      many threads as fzd has workers.  The input is a host buffer given to
 *      libfzclient (which moves it through a memfd of its own), or with --fd
 *      a memfd of the client's passed with each job (SCM_RIGHTS), and the
 *      archive written to another memfd, as fzctl does with files; or with
 *      --shared, input and archive in libfzclient's shared buffers
 *      (fz_client_buffer_alloc), written in place by the client and the
 *      daemon.
 *
 *   fz_daemon_bench -S ADDRESS [-c CLIENTS] [-j JOBS] [-m MIB] [-n PINGS] [-r REPEAT]
 *                   [--fd | --shared]
 */
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fz.h"
#include "fzclient.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *address;
static size_t job_values;
static unsigned jobs_per_client;
static float *field;
static int use_fd, use_shared;

static void *client_main(void *arg) {
  int *failed = arg;
  fz_client *c;
  if (fz_client_connect(&c, address, NULL, NULL, 0) < 0) {
    *failed = 1;
    return NULL;
  }
  fz_job j;
  fz_job_init(&j);
  j.dtype = "f32";
  j.ndims = 1;
  j.shape[0] = job_values;
  j.pipeline = "balanced";
  j.eb = 1e-3;
  if (use_fd) {
    /* Sealed against shrinking, the memfd can be mapped by the daemon. */
    int fd = memfd_create("fz-bench", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || write(fd, field, job_values * 4) != (ssize_t)(job_values * 4) ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) < 0) {
      *failed = 1;
      return NULL;
    }
    j.in_fd = fd;
    /* The archive goes to a memfd too, as fzctl does with files. */
    j.out_fd = memfd_create("fz-bench-out", MFD_CLOEXEC);
    if (j.out_fd < 0) {
      *failed = 1;
      return NULL;
    }
  } else if (use_shared) {
    /* The client's data is made in a shared buffer and the archive lands in
     * another: nothing is copied on either side. */
    size_t cap = job_values * 4 + 65536;
    float *in = fz_client_buffer_alloc(c, job_values * 4);
    j.out = fz_client_buffer_alloc(c, cap);
    if (in == NULL || j.out == NULL) {
      fprintf(stderr, "shared buffer: %s\n", fz_client_errmsg(c));
      *failed = 1;
      return NULL;
    }
    memcpy(in, field, job_values * 4);
    j.in = in;
    j.in_len = job_values * 4;
    j.out_cap = cap;
  } else {
    j.in = field;
    j.in_len = job_values * 4;
  }
  for (unsigned k = 0; k < jobs_per_client; k++) {
    fz_result r;
    if (fz_client_compress(c, &j, &r) < 0) {
      fprintf(stderr, "job failed: %s\n", r.message);
      *failed = 1;
      break;
    }
    if (!use_shared)
      fz_client_free(r.data);
  }
  if (j.in_fd >= 0)
    close(j.in_fd);
  if (j.out_fd >= 0)
    close(j.out_fd);
  fz_client_close(c);
  return NULL;
}

/* The in-process side compresses the same number of jobs from as many
 * distinct buffers as there are clients, so that neither side enjoys a
 * cache the other lacks. */
typedef struct local {
  unsigned jobs, first, copies;
  float *const *inputs;
  int failed;
} local;

static void *local_main(void *arg) {
  local *l = arg;
  fz_params p;
  fz_params_init(&p);
  p.ndims = 1;
  p.dims[0] = job_values;
  p.eb = 1e-3;
  fz_plan *pl;
  if (fz_plan_create(&p, &pl, NULL, 0) < 0) {
    l->failed = 1;
    return NULL;
  }
  size_t cap = fz_plan_compress_bound(pl), len;
  uint8_t *out = malloc(cap);
  for (unsigned k = 0; k < l->jobs; k++)
    if (fz_plan_compress(pl, l->inputs[(l->first + k) % l->copies], job_values * 4, out,
                         cap, &len) < 0)
      l->failed = 1;
  free(out);
  fz_plan_destroy(pl);
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  unsigned clients = 8, pings = 10000, repeat = 3;
  double mib = 1;
  jobs_per_client = 64;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-S") && i + 1 < argc)
      address = argv[++i];
    else if (!strcmp(argv[i], "-c") && i + 1 < argc)
      clients = (unsigned)atoi(argv[++i]);
    else if (!strcmp(argv[i], "-j") && i + 1 < argc)
      jobs_per_client = (unsigned)atoi(argv[++i]);
    else if (!strcmp(argv[i], "-m") && i + 1 < argc)
      mib = atof(argv[++i]);
    else if (!strcmp(argv[i], "-n") && i + 1 < argc)
      pings = (unsigned)atoi(argv[++i]);
    else if (!strcmp(argv[i], "--fd"))
      use_fd = 1;
    else if (!strcmp(argv[i], "--shared"))
      use_shared = 1;
    else if (!strcmp(argv[i], "-r") && i + 1 < argc)
      repeat = (unsigned)atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: fz_daemon_bench -S ADDRESS [-c CLIENTS] [-j JOBS] [-m MIB] "
                      "[-n PINGS] [-r REPEAT] [--fd | --shared]\n");
      return 1;
    }
  }
  job_values = (size_t)(mib * 1048576 / 4);
  field = malloc(job_values * 4);
  for (size_t i = 0; i < job_values; i++)
    field[i] = (float)(sin((double)i * 1e-3) * 100 + cos((double)i * 7e-3) * 3);

  fz_client *c;
  int rc = fz_client_connect(&c, address, NULL, NULL, 0);
  if (rc < 0) {
    fprintf(stderr, "connect %s: %s\n", address ? address : "(default)", fz_strerror(rc));
    return 2;
  }
  fz_server_status st;
  fz_client_status(c, &st);
  double *lat = malloc(pings * sizeof *lat);
  for (unsigned i = 0; i < pings; i++) {
    double t0 = now();
    if (fz_client_ping(c, NULL) < 0)
      return 2;
    lat[i] = (now() - t0) * 1e6;
  }
  qsort(lat, pings, sizeof *lat, cmp_double);
  printf("ping over %s: %u round trips, p50 %.1f us, p99 %.1f us\n", st.backend, pings,
         lat[pings / 2], lat[pings * 99 / 100]);
  fz_client_close(c);

  pthread_t th[256];
  int failed[256] = {0};
  double td = 1e30, tl = 1e30, t0;
  double total = (double)clients * jobs_per_client * job_values * 4;

  unsigned workers = st.workers ? (unsigned)st.workers : 1;
  float *inputs[256];
  for (unsigned i = 0; i < clients; i++) {
    inputs[i] = malloc(job_values * 4);
    memcpy(inputs[i], field, job_values * 4);
  }
  local loc[256];
  /* The two sides alternate, best of `repeat` each, so that load from
   * elsewhere on the machine hits both alike. */
  for (unsigned r = 0; r < repeat; r++) {
    t0 = now();
    for (unsigned i = 0; i < clients; i++)
      pthread_create(&th[i], NULL, client_main, &failed[i]);
    for (unsigned i = 0; i < clients; i++)
      pthread_join(th[i], NULL);
    td = fmin(td, now() - t0);
    for (unsigned i = 0; i < clients; i++)
      if (failed[i])
        return 2;
    t0 = now();
    for (unsigned i = 0; i < workers; i++) {
      loc[i] = (local){.jobs = (clients * jobs_per_client) / workers +
                               (i < (clients * jobs_per_client) % workers),
                       .first = i,
                       .copies = clients,
                       .inputs = inputs};
      pthread_create(&th[i], NULL, local_main, &loc[i]);
    }
    for (unsigned i = 0; i < workers; i++)
      pthread_join(th[i], NULL);
    tl = fmin(tl, now() - t0);
  }
  printf("%u clients x %u jobs of %.2f MiB (%s), balanced REL 1e-3:\n", clients,
         jobs_per_client, mib, use_fd       ? "input and output as passed memfds"
         : use_shared ? "input and output in shared buffers"
                      : "host buffers");
  printf("  through fzd (%u workers): %.3f s, %.2f GB/s\n", workers, td,
         total / td / 1e9);
  printf("  engine in-process, %u threads: %.3f s, %.2f GB/s\n", workers, tl,
         total / tl / 1e9);
  printf("  daemon / in-process: %.1f%%\n", 100.0 * tl / td);
  fz_server_stats ss;
  if (fz_client_connect(&c, address, NULL, NULL, 0) >= 0 && fz_client_stats(c, &ss) >= 0 &&
      ss.compress.count > 0) {
    printf("  engine time per job: %.0f us in fzd, %.0f us in-process\n",
           (double)ss.compress.time_us / (double)ss.compress.count,
           tl * workers * 1e6 / (clients * jobs_per_client));
    fz_client_close(c);
  }
  return 0;
}
