/*
 * device_bench.c - device buffers through fzd, as a simulation code sends
 * them, against the same kernels in this process, in the same run.
 *
 *   fz_device_bench -S ADDRESS [-r REPEAT] [-p PRESETS] [-e EB] [-c CLIENTS]
 *                   [-j JOBS] FILE.f32 ...
 *
 * Each field is repeated whole to 1 GiB and 64 MiB (and cut to 1 MiB).  For
 * each size and preset (REL bound EB, default 1e-3) the input lies in
 * cudaMalloc memory of this process; the in-process figure is the wall time
 * of fz_gpu_compress() / fz_gpu_decoder_decompress() on a plan made here, the
 * fzd figure the wall time of fz_client_compress() / _decompress() with
 * legacy IPC handles for input and output, from submit to answer: what a
 * client sees.  Medians of REPEAT runs after eight warm-up runs (the first
 * of them, which makes fzd's plan, is reported apart); GB/s counts the
 * uncompressed bytes.  Every archive fzd writes is compared byte for byte
 * with the one made here and with the CPU engine's, and every
 * decompression through fzd is checked against the bound: a difference or
 * a violation fails the run (exit 1).
 *
 * 1 MiB jobs report round-trip p50 and p99 over 300 jobs, and the p50 of
 * the time fzd itself reports for the job.  With CLIENTS
 * (default 4) the run ends with that many client threads, each with its own
 * connection and buffers, running JOBS jobs of 256 MiB at once, against one
 * client alone: aggregate GB/s.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_data.h"
#include "fz.h"
#include "fz_gpu.h"
#include "fzclient.h"
#include "params_1d.h"

#define MIB ((size_t)1 << 20)

/* -D: jobs carry the field's shape (from its file name, as fz_gpu_bench
 * takes it), cut to whole planes of it, so that a preset that predicts
 * along every axis (ratio) sees the array a user would send. */
static int use_shape;
static unsigned field_nd;
static uint64_t field_dims[4];

static uint64_t field_plane(void) {
  uint64_t plane = 1;
  for (unsigned d = 1; d < field_nd; d++)
    plane *= field_dims[d];
  return plane;
}

/* A job of about bytes: whole planes of the field where jobs are shaped. */
static size_t job_bytes(size_t bytes) {
  if (!use_shape || field_nd < 2)
    return bytes;
  size_t unit = 4 * (size_t)field_plane();
  return bytes / unit > 0 ? bytes / unit * unit : unit;
}

/* The job's shape for n elements. */
static unsigned job_shape(size_t n, uint64_t *dims) {
  if (!use_shape || field_nd < 2 || n % field_plane() != 0) {
    dims[0] = n;
    return 1;
  }
  dims[0] = n / field_plane();
  for (unsigned d = 1; d < field_nd; d++)
    dims[d] = field_dims[d];
  return field_nd;
}

/* A size in MiB, rounded (a shaped job is a little below its nominal size). */
static size_t mib_of(size_t bytes) { return (bytes + MIB / 2) / MIB; }

#define CK(call)                                                                \
  do {                                                                          \
    cudaError_t e_ = (call);                                                    \
    if (e_ != cudaSuccess) {                                                    \
      fprintf(stderr, "%s: %s\n", #call, cudaGetErrorName(e_));                 \
      exit(2);                                                                  \
    }                                                                           \
  } while (0)

static const char *address;
static char uuid[64];
static unsigned repeat = 5;
static int failed;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The q-quantile (0..1) of n samples, sorted in place. */
static double quantile(double *v, size_t n, double q) {
  qsort(v, n, sizeof *v, cmp_double);
  size_t i = (size_t)(q * (double)(n - 1) + 0.5);
  return v[i < n ? i : n - 1];
}

static void device_uuid(void) {
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
  snprintf(uuid, sizeof uuid,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
           u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
           u[14], u[15]);
}

static fz_client *connect_or_die(void) {
  fz_client *c = NULL;
  char why[256] = "";
  int rc = fz_client_connect(&c, address, NULL, why, sizeof why);
  if (rc < 0) {
    fprintf(stderr, "cannot reach fzd at %s: %s %s\n", address ? address : "(default)",
            fz_err_name(rc), why);
    exit(2);
  }
  return c;
}

/* The device buffers of one job size: input, archive and output, each with
 * its IPC handle. */
typedef struct dbufs {
  size_t in_len, arc_cap;
  void *d_in, *d_arc, *d_out;
  cudaIpcMemHandle_t h_in, h_arc, h_out;
} dbufs;

static void dbufs_alloc(dbufs *b, const float *h_x, size_t in_len, size_t arc_cap) {
  b->in_len = in_len;
  b->arc_cap = arc_cap;
  CK(cudaMalloc(&b->d_in, in_len));
  CK(cudaMalloc(&b->d_arc, arc_cap));
  CK(cudaMalloc(&b->d_out, in_len));
  CK(cudaMemcpy(b->d_in, h_x, in_len, cudaMemcpyHostToDevice));
  CK(cudaIpcGetMemHandle(&b->h_in, b->d_in));
  CK(cudaIpcGetMemHandle(&b->h_arc, b->d_arc));
  CK(cudaIpcGetMemHandle(&b->h_out, b->d_out));
  CK(cudaDeviceSynchronize());
}

static void dbufs_free(dbufs *b) {
  cudaFree(b->d_in);
  cudaFree(b->d_arc);
  cudaFree(b->d_out);
}

static void jobs_for(const dbufs *b, const char *preset, double eb, fz_job *cj, fz_job *dj) {
  fz_job_init(cj);
  cj->dtype = "f32";
  cj->ndims = job_shape(b->in_len / 4, cj->shape);
  cj->pipeline = preset;
  cj->eb = eb;
  cj->mode = "rel";
  cj->in_ipc = &b->h_in;
  cj->out_ipc = &b->h_arc;
  cj->out_length = b->arc_cap;
  cj->device = uuid;
  fz_job_init(dj);
  dj->in_ipc = &b->h_arc;
  dj->out_ipc = &b->h_out;
  dj->out_length = b->in_len;
  dj->device = uuid;
}

static int run_job(fz_client *c, fz_op op, const fz_job *j, fz_result *r) {
  int rc = op == FZ_OP_COMPRESS ? fz_client_compress(c, j, r) : fz_client_decompress(c, j, r);
  if (rc < 0) {
    fprintf(stderr, "%s through fzd: %s %s\n", op == FZ_OP_COMPRESS ? "compress" : "decompress",
            fz_err_name(rc), r->message);
    exit(1);
  }
  return rc;
}

static void stats_or_die(fz_client *c, fz_server_stats *st) {
  if (fz_client_stats(c, st) < 0) {
    fprintf(stderr, "stats: %s\n", fz_client_errmsg(c));
    exit(2);
  }
}

/* Means per job of fzd's stages between two stats replies, against the mean
 * of the client's own round trips t[0..n) over the same jobs (the rest is
 * the socket and the client's side) and of the in-process calls here[0..n). */
static void print_stages(const char *name, const char *preset, size_t in_len, const char *dir,
                         const fz_op_stats *a, const fz_op_stats *b, const double *t,
                         const double *here, unsigned n) {
  const double k = (double)(b->count - a->count);
  if (k <= 0)
    return;
  double mean = 0, mean_here = 0;
  for (unsigned i = 0; i < n; i++) {
    mean += t[i];
    mean_here += here[i];
  }
  mean = 1e6 * mean / n;
  mean_here = 1e6 * mean_here / n;
  const double parse = (double)(b->parse_us - a->parse_us) / k;
  const double queue = (double)(b->queue_us - a->queue_us) / k;
  const double work = (double)(b->worker_us - a->worker_us) / k;
  const double be = (double)(b->time_us - a->time_us) / k;
  const double reply = (double)(b->reply_us - a->reply_us) / k;
  fprintf(stderr, "%s %s %zu MiB %s, means of %.0f jobs: round trip %.1f us = fzd parse %.1f + "
          "queue %.1f + worker %.1f (backend %.1f) + reply %.1f + outside fzd %.1f us; "
          "in-process %.1f us\n",
          name, preset, mib_of(in_len), dir, k, mean, parse, queue, work, be, reply,
          mean - parse - queue - work - reply, mean_here);
}

/* One size and preset: the in-process and through-fzd figures, and the
 * checks of what fzd wrote. */
static void bench_size(fz_gpu_ctx *ctx, fz_gpu_decoder *dec, fz_client *c, const char *name,
                       const float *h_x, size_t in_len, const char *preset, double eb) {
  fz_params p;
  fzt_params_1d(&p, FZ_F32, in_len / 4, preset);
  p.ndims = job_shape(in_len / 4, p.dims);
  p.eb = eb;
  p.eb_mode = FZ_EB_REL;
  char why[256] = "";
  fz_gpu_plan *pl;
  int rc = fz_gpu_plan_create(ctx, &p, FZ_GPU_PREALLOC, &pl, why, sizeof why);
  if (rc < 0) {
    fprintf(stderr, "plan: %s %s\n", fz_err_name(rc), why);
    exit(2);
  }
  size_t bound = fz_gpu_plan_compress_bound(pl), arc_len = 0, out_len = 0;
  dbufs b;
  dbufs_alloc(&b, h_x, in_len, bound);
  void *d_arc_here, *d_out_here;
  CK(cudaMalloc(&d_arc_here, bound));
  CK(cudaMalloc(&d_out_here, in_len));
  cudaStream_t s = fz_gpu_ctx_stream(ctx, 0);
  const unsigned n = in_len <= MIB ? 300 : repeat;
  /* Warm-up runs before the timed ones: the first through fzd makes the
   * plan (timed apart, as "first"), the others warm what every worker holds. */
  const unsigned warm = 8;
  double *tc = calloc(n, sizeof *tc), *td = calloc(n, sizeof *td);
  double *fc = calloc(n, sizeof *fc), *fd = calloc(n, sizeof *fd);
  double *sc = calloc(n, sizeof *sc), *sd = calloc(n, sizeof *sd), first_c = 0, first_d = 0;
  for (unsigned r = 0; r <= n; r++) { /* r == 0 warms up */
    double t0 = now();
    rc = fz_gpu_compress(pl, b.d_in, in_len, d_arc_here, bound, &arc_len, s, why, sizeof why);
    double t1 = now();
    if (rc < 0) {
      fprintf(stderr, "compress here: %s %s\n", fz_err_name(rc), why);
      exit(2);
    }
    if (r)
      tc[r - 1] = t1 - t0;
  }
  for (unsigned r = 0; r <= n; r++) {
    double t0 = now();
    rc = fz_gpu_decoder_decompress(dec, d_arc_here, arc_len, d_out_here, in_len, &out_len, NULL,
                                   s, why, sizeof why);
    double t1 = now();
    if (rc < 0) {
      fprintf(stderr, "decompress here: %s %s\n", fz_err_name(rc), why);
      exit(2);
    }
    if (r)
      td[r - 1] = t1 - t0;
  }
  /* Where a small job's time goes in this process: one empty round trip
   * to the GPU (a 4-byte copy back and a wait), a decoder's open alone (the
   * header prefix), and a ping of fzd over the socket. */
  double *trt = calloc(n, sizeof *trt), *top = calloc(n, sizeof *top);
  double *tpg = calloc(n, sizeof *tpg);
  if (in_len <= MIB) {
    uint32_t *h_word;
    CK(cudaMallocHost((void **)&h_word, 4));
    for (unsigned r = 0; r <= n; r++) {
      double t0 = now();
      CK(cudaMemcpyAsync(h_word, d_arc_here, 4, cudaMemcpyDeviceToHost, s));
      CK(cudaStreamSynchronize(s));
      double t1 = now();
      rc = fz_gpu_decoder_open(dec, d_arc_here, arc_len, NULL, s, why, sizeof why);
      double t2 = now();
      uint64_t ns;
      if (rc < 0 || fz_client_ping(c, &ns) < 0) {
        fprintf(stderr, "breakdown: %s %s\n", fz_err_name(rc), why);
        exit(2);
      }
      double t3 = now();
      if (r) {
        trt[r - 1] = t1 - t0;
        top[r - 1] = t2 - t1;
        tpg[r - 1] = t3 - t2;
      }
    }
    cudaFreeHost(h_word);
  }
  fz_job cj, dj;
  jobs_for(&b, preset, eb, &cj, &dj);
  fz_result res;
  fz_server_stats c0, c1, d0, d1; /* fzd's stages around the timed jobs */
  for (unsigned r = 0; r < warm + n; r++) {
    if (r == warm)
      stats_or_die(c, &c0);
    double t0 = now();
    run_job(c, FZ_OP_COMPRESS, &cj, &res);
    double t1 = now();
    if (r == 0)
      first_c = t1 - t0;
    if (r >= warm) {
      fc[r - warm] = t1 - t0;
      sc[r - warm] = 1e-6 * (double)res.time_us;
    }
  }
  stats_or_die(c, &c1);
  size_t fzd_len = (size_t)res.bytes_out;
  dj.in_length = fzd_len;
  for (unsigned r = 0; r < warm + n; r++) {
    if (r == warm)
      stats_or_die(c, &d0);
    double t0 = now();
    run_job(c, FZ_OP_DECOMPRESS, &dj, &res);
    double t1 = now();
    if (r == 0)
      first_d = t1 - t0;
    if (r >= warm) {
      fd[r - warm] = t1 - t0;
      sd[r - warm] = 1e-6 * (double)res.time_us;
    }
  }
  stats_or_die(c, &d1);

  /* What fzd wrote: the archive made here and the CPU engine's, byte for
   * byte; the data within the bound. */
  uint8_t *a_here = malloc(arc_len), *a_fzd = malloc(fzd_len);
  float *back = malloc(in_len);
  CK(cudaMemcpy(a_here, d_arc_here, arc_len, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(a_fzd, b.d_arc, fzd_len, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(back, b.d_out, in_len, cudaMemcpyDeviceToHost));
  fz_plan *cpu;
  p.threads = 16;
  rc = fz_plan_create(&p, &cpu, why, sizeof why);
  size_t cap = rc == 0 ? fz_plan_compress_bound(cpu) : 0, cpu_len = 0;
  uint8_t *a_cpu = malloc(cap ? cap : 1);
  if (rc == 0)
    rc = fz_plan_compress(cpu, h_x, in_len, a_cpu, cap, &cpu_len);
  int same = rc == 0 && fzd_len == arc_len && cpu_len == arc_len &&
             memcmp(a_here, a_fzd, arc_len) == 0 && memcmp(a_cpu, a_fzd, arc_len) == 0;
  fz_archive_info info;
  fz_compare_result cmp;
  int bound_ok = fz_archive_inspect(a_fzd, fzd_len, &info) == 0 &&
                 fz_compare(FZ_F32, h_x, back, in_len / 4, &cmp) == 0 &&
                 cmp.nonfinite_mismatches == 0 && cmp.max_abs_error <= info.eb_abs;
  if (!same || !bound_ok)
    failed = 1;

  const double gb = (double)in_len / 1e9;
  if (in_len <= MIB) {
    printf("| %-10s | %-8s | 1 MiB | p50 %.0f us | p50 %.0f us | p50 %.0f (p99 %.0f) us | "
           "p50 %.0f (p99 %.0f) us | in fzd p50 %.0f / %.0f us | %s | %s |\n",
           name, preset, 1e6 * quantile(tc, n, 0.5), 1e6 * quantile(td, n, 0.5),
           1e6 * quantile(fc, n, 0.5), 1e6 * quantile(fc, n, 0.99), 1e6 * quantile(fd, n, 0.5),
           1e6 * quantile(fd, n, 0.99), 1e6 * quantile(sc, n, 0.5), 1e6 * quantile(sd, n, 0.5),
           same ? "yes" : "NO", bound_ok ? "held" : "VIOLATED");
    fprintf(stderr, "%s %s 1 MiB p50: GPU round trip %.1f us, decoder open %.1f us, "
            "ping %.1f us\n", name, preset, 1e6 * quantile(trt, n, 0.5),
            1e6 * quantile(top, n, 0.5), 1e6 * quantile(tpg, n, 0.5));
  }
  print_stages(name, preset, in_len, "compress", &c0.compress, &c1.compress, fc, tc, n);
  print_stages(name, preset, in_len, "decompress", &d0.decompress, &d1.decompress, fd, td, n);
  if (in_len > MIB) {
    double ic = gb / quantile(tc, n, 0.5), id = gb / quantile(td, n, 0.5);
    double zc = gb / quantile(fc, n, 0.5), zd = gb / quantile(fd, n, 0.5);
    printf("| %-10s | %-8s | %zu MiB | %.1f | %.1f | %.1f | %.1f | %.0f%% / %.0f%% | "
           "%.2f / %.2f ms | %s | %s |\n",
           name, preset, mib_of(in_len), ic, id, zc, zd, 100 * zc / ic, 100 * zd / id,
           1e3 * first_c, 1e3 * first_d, same ? "yes" : "NO", bound_ok ? "held" : "VIOLATED");
  }
  fflush(stdout);
  free(a_here);
  free(a_fzd);
  free(a_cpu);
  free(back);
  free(tc);
  free(td);
  free(fc);
  free(fd);
  free(sc);
  free(sd);
  free(trt);
  free(top);
  free(tpg);
  fz_plan_destroy(cpu);
  cudaFree(d_arc_here);
  cudaFree(d_out_here);
  dbufs_free(&b);
  fz_gpu_plan_destroy(pl);
}

/* ---- several clients at once ------------------------------------------- */

typedef struct client_arg {
  const float *h_x;
  size_t in_len, arc_cap;
  const char *preset;
  double eb;
  unsigned jobs;
  fz_op op;
  pthread_barrier_t *start;
  dbufs b;
  fz_client *c;
  size_t arc_len;
} client_arg;

static void *client_main(void *p) {
  client_arg *a = p;
  fz_job cj, dj;
  jobs_for(&a->b, a->preset, a->eb, &cj, &dj);
  dj.in_length = a->arc_len;
  fz_result r;
  pthread_barrier_wait(a->start);
  for (unsigned j = 0; j < a->jobs; j++)
    run_job(a->c, a->op, a->op == FZ_OP_COMPRESS ? &cj : &dj, &r);
  a->arc_len = (size_t)(a->op == FZ_OP_COMPRESS ? r.bytes_out : a->arc_len);
  pthread_barrier_wait(a->start);
  return NULL;
}

/* Aggregate GB/s of k clients each running jobs jobs of op at once. */
static double concurrent(client_arg *args, unsigned k, fz_op op) {
  pthread_t th[16];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, k + 1);
  for (unsigned i = 0; i < k; i++) {
    args[i].op = op;
    args[i].start = &start;
    pthread_create(&th[i], NULL, client_main, &args[i]);
  }
  pthread_barrier_wait(&start);
  double t0 = now();
  pthread_barrier_wait(&start);
  double t = now() - t0;
  for (unsigned i = 0; i < k; i++)
    pthread_join(th[i], NULL);
  pthread_barrier_destroy(&start);
  return (double)k * args[0].jobs * (double)args[0].in_len / 1e9 / t;
}

static void bench_clients(const char *name, const float *h_x, size_t in_len, const char *preset,
                          double eb, unsigned k, unsigned jobs) {
  client_arg args[16];
  for (unsigned i = 0; i < k; i++) {
    args[i] = (client_arg){.h_x = h_x, .in_len = in_len, .preset = preset, .eb = eb,
                           .jobs = jobs};
    dbufs_alloc(&args[i].b, h_x, in_len, in_len + in_len / 8 + MIB);
    args[i].c = connect_or_die();
  }
  double c1 = concurrent(args, 1, FZ_OP_COMPRESS), ck = concurrent(args, k, FZ_OP_COMPRESS);
  double d1 = concurrent(args, 1, FZ_OP_DECOMPRESS), dk = concurrent(args, k, FZ_OP_DECOMPRESS);
  printf("| %-10s | %-8s | %zu MiB x %u jobs | 1 client %.1f / %.1f | %u clients %.1f / %.1f "
         "| %.2fx / %.2fx |\n", name, preset, mib_of(in_len), jobs, c1, d1, k, ck, dk, ck / c1,
         dk / d1);
  fflush(stdout);
  for (unsigned i = 0; i < k; i++) {
    fz_client_close(args[i].c);
    dbufs_free(&args[i].b);
  }
}

static float *replicate(const float *x, size_t n, size_t bytes) {
  size_t m = bytes / 4;
  float *y = malloc(bytes);
  for (size_t i = 0; i < m; i += n)
    memcpy(y + i, x, 4 * (m - i < n ? m - i : n));
  return y;
}

static void usage(FILE *f) {
  fprintf(f, "usage: fz_device_bench -S ADDRESS [-r REPEAT] [-p PRESETS] [-e EB] "
             "[-c CLIENTS] [-j JOBS] [-s MIB,...] [-z MIB,...] [-D] FILE.f32 ...\n"
             "  -D: jobs carry the shape in the file's name (NAME_D0xD1...f32), cut\n"
             "      to whole planes of it (default: 1-D jobs)\n"
             "  -s: job sizes of the one-client runs (default 1024,64,1)\n"
             "  -z: job sizes of the clients-at-once runs (default 4,256); each client\n"
             "      runs at least JOBS jobs and at least 256 MiB\n");
}

int main(int argc, char **argv) {
  const char *presets = "fast,balanced";
  double eb = 1e-3;
  unsigned clients = 4, jobs = 8;
  const char *csizes = "4,256", *osizes = "1024,64,1";
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (!strcmp(argv[i], "-S") && i + 1 < argc) address = argv[++i];
    else if (!strcmp(argv[i], "-r") && i + 1 < argc) repeat = (unsigned)atoi(argv[++i]);
    else if (!strcmp(argv[i], "-p") && i + 1 < argc) presets = argv[++i];
    else if (!strcmp(argv[i], "-e") && i + 1 < argc) eb = atof(argv[++i]);
    else if (!strcmp(argv[i], "-c") && i + 1 < argc) clients = (unsigned)atoi(argv[++i]);
    else if (!strcmp(argv[i], "-j") && i + 1 < argc) jobs = (unsigned)atoi(argv[++i]);
    else if (!strcmp(argv[i], "-z") && i + 1 < argc) csizes = argv[++i];
    else if (!strcmp(argv[i], "-s") && i + 1 < argc) osizes = argv[++i];
    else if (!strcmp(argv[i], "-D")) use_shape = 1;
    else if (!strcmp(argv[i], "--help")) {
      usage(stdout);
      return 0;
    } else {
      usage(stderr);
      return 2;
    }
  }
  if (i == argc || repeat == 0 || clients == 0 || clients > 16) {
    usage(stderr);
    return 2;
  }
  fz_client *c = connect_or_die();
  fz_gpu_ctx *ctx;
  fz_gpu_decoder *dec;
  char why[256] = "";
  if (fz_gpu_ctx_create(NULL, 1, &ctx, why, sizeof why) < 0 ||
      fz_gpu_decoder_create(ctx, &dec, why, sizeof why) < 0) {
    fprintf(stderr, "no GPU here: %s\n", why);
    return 77;
  }
  device_uuid();
  printf("GPU: %s; REL %g; medians of %u runs (1 MiB: 300)\n\n", fz_gpu_ctx_name(ctx), eb,
         repeat);
  printf("| field | preset | size | in-process comp GB/s | decomp | fzd comp GB/s | decomp | "
         "share | first job through fzd comp / decomp | archives identical | bound |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|\n");
  size_t sizes[8], nsizes = 0;
  char sbuf[128];
  snprintf(sbuf, sizeof sbuf, "%s", osizes);
  for (char *sp, *z = strtok_r(sbuf, ",", &sp); z && nsizes < 8; z = strtok_r(NULL, ",", &sp)) {
    size_t mib = strtoul(z, NULL, 10);
    if (mib == 0 || mib > 1024) {
      usage(stderr);
      return 2;
    }
    sizes[nsizes++] = mib * MIB;
  }

  for (int f = i; f < argc; f++) {
    size_t n = 0;
    float *x = bench_load(argv[f], &n);
    if (x == NULL || n == 0) {
      fprintf(stderr, "cannot read '%s'\n", argv[f]);
      return 2;
    }
    const char *base = strrchr(argv[f], '/');
    char name[11];
    snprintf(name, sizeof name, "%s", base ? base + 1 : argv[f]);
    field_nd = bench_shape(argv[f], field_dims, 4);
    uint64_t prod = 1;
    for (unsigned d = 0; d < field_nd; d++)
      prod *= field_dims[d];
    if (prod != n)
      field_nd = 0;
    float *big = replicate(x, n, (size_t)1 << 30);
    char pbuf[256];
    snprintf(pbuf, sizeof pbuf, "%s", presets);
    for (char *sp, *pr = strtok_r(pbuf, ",", &sp); pr; pr = strtok_r(NULL, ",", &sp))
      for (size_t k = 0; k < nsizes; k++)
        bench_size(ctx, dec, c, name, big, job_bytes(sizes[k]), pr, eb);
    if (f == i && clients > 1) {
      printf("\n| field | preset | jobs | GB/s comp / decomp | | scaling |\n|---|---|---|---|---|---|\n");
      snprintf(pbuf, sizeof pbuf, "%s", presets);
      for (char *sp, *pr = strtok_r(pbuf, ",", &sp); pr; pr = strtok_r(NULL, ",", &sp)) {
        char zbuf[128];
        snprintf(zbuf, sizeof zbuf, "%s", csizes);
        for (char *zp, *z = strtok_r(zbuf, ",", &zp); z; z = strtok_r(NULL, ",", &zp)) {
          size_t mib = strtoul(z, NULL, 10);
          if (mib == 0 || mib > 1024)
            continue;
          /* Enough jobs that each client moves 256 MiB: small jobs end
           * within the start-up noise of the threads otherwise. */
          unsigned nj = (unsigned)(256 / mib) > jobs ? (unsigned)(256 / mib) : jobs;
          bench_clients(name, big, job_bytes(mib * MIB), pr, eb, clients, nj);
        }
      }
      printf("\n| field | preset | size | in-process comp GB/s | decomp | fzd comp GB/s | decomp | "
             "share | first job through fzd comp / decomp | archives identical | bound |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|\n");
    }
    free(big);
    free(x);
  }
  fz_gpu_decoder_destroy(dec);
  fz_gpu_ctx_destroy(ctx);
  fz_client_close(c);
  if (failed)
    fprintf(stderr, "an archive differed or a bound was violated\n");
  return failed;
}
