/*
 * frames_gpu_bench.c - detector frames on the GPU, in process: synthetic
 * Eiger 4M u16 frames (2162 x 2068, Poisson background and 200 Bragg
 * peaks a frame) encoded by the engine's bitshuffle-LZ4 codec (the
 * bitshuffle package's bytes), decoded in batches by fz_frames_gpu_run:
 * frames/s and GB/s of pixels for the sparse lists (cut 10) and the dense
 * frames, chunks in device memory and in host memory.  Every timed
 * configuration's first batch is checked against the CPU engine
 * (fz_frames_sparse_batch, fz_frames_dense), frame by frame; the exit
 * status is 1 when anything differs.  With -S ADDRESS the same batches go
 * through a running fzd too (libfzclient's fz_client_frames, the chunks in
 * a file whose descriptor travels with each request, the lists in the
 * reply), checked the same way and timed the same way.
 *
 *   fz_frames_gpu_bench [-f FRAMES] [-b BATCH] [-r REPEATS] [-c CUT] [-S ADDRESS]
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fz_frames_gpu.h"
#include "fzclient.h"

enum { NI = 2162, NJ = 2068, NPX = NI * NJ, PEAKS = 200 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

/* Knuth's method: fine for the small means of a detector's background. */
static unsigned poisson(double mean) {
  double l = exp(-mean), p = 1;
  unsigned k = 0;
  do {
    k++;
    p *= uniform();
  } while (p > l);
  return k - 1;
}

static void make_frame(uint16_t *f) {
  for (size_t i = 0; i < NPX; i++)
    f[i] = (uint16_t)poisson(0.4);
  for (int k = 0; k < PEAKS; k++) {
    double ci = 3 + uniform() * (NI - 6), cj = 3 + uniform() * (NJ - 6), h = 50 + uniform() * 5000;
    for (int di = -3; di <= 3; di++)
      for (int dj = -3; dj <= 3; dj++) {
        int i = (int)ci + di, j = (int)cj + dj;
        double r2 = (i - ci) * (i - ci) + (j - cj) * (j - cj);
        double v = f[(size_t)i * NJ + j] + h * exp(-r2 / 1.5);
        f[(size_t)i * NJ + j] = (uint16_t)(v > 65535 ? 65535 : v);
      }
  }
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define CUDA_OK(call)                                                                              \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "%s: %s\n", #call, cudaGetErrorName(e_));                                    \
      exit(2);                                                                                     \
    }                                                                                              \
  } while (0)

/* Where fzd puts a request's lists: in the reply, into a memfd, or into
 * device memory. */
typedef enum out_kind { TO_REPLY, TO_FILE, TO_DEVICE } out_kind;

/* Whether a frame's lists from fzd, in the reply or (got non-NULL) at
 * their places in got (a copy of the output), are the CPU's n values v
 * and indices ix. */
static bool same_lists(const fz_frame_result *res, const uint8_t *got, size_t n, const uint16_t *v,
                       const uint32_t *ix) {
  if (res->listed != n)
    return false;
  if (got == NULL)
    return memcmp(res->values, v, n * 2) == 0 && memcmp(res->indices, ix, n * 4) == 0;
  return memcmp(got + res->values_at, v, n * 2) == 0 &&
         memcmp(got + res->indices_at, ix, n * 4) == 0;
}

/* The batches through fzd at address: the chunks in a memfd (d_chunks
 * NULL) or in device memory, each request naming its frames' offsets and
 * lengths there; the lists where `to` says.  The first batch's lists
 * against the CPU's (cc, cv, ci at stride cap).  Returns the best
 * frames/s of repeats passes after a first, or -1. */
static double through_fzd(const char *address, const uint8_t *chunks, const uint8_t *d_chunks,
                          out_kind to, uint64_t bytes, const uint64_t *offs, const uint64_t *lens,
                          int nframes, int batch, int repeats, double cut, const size_t *cc,
                          const uint16_t *cv, const uint32_t *ci, size_t cap, int *bad) {
  int fd = memfd_create("frames", MFD_CLOEXEC);
  if (fd < 0 || write(fd, chunks, bytes) != (ssize_t)bytes) {
    perror("memfd");
    return -1;
  }
  /* An output takes each frame's values, indices and padding. */
  size_t out_len = (size_t)batch * (cap * 6 + 16);
  int out = to == TO_FILE ? memfd_create("lists", MFD_CLOEXEC) : -1;
  uint8_t *d_out = NULL, *got = to == TO_REPLY ? NULL : malloc(out_len);
  if ((to == TO_FILE && out < 0) || (to != TO_REPLY && got == NULL)) {
    perror("output");
    return -1;
  }
  if (to == TO_DEVICE)
    CUDA_OK(cudaMalloc((void **)&d_out, out_len));
  fz_client *c = NULL;
  char msg[256];
  int rc = fz_client_connect(&c, address, NULL, msg, sizeof msg);
  if (rc < 0) {
    fprintf(stderr, "fzd at %s: %s\n", address, msg);
    return -1;
  }
  fz_frame_result *res = calloc((size_t)batch, sizeof *res);
  double best = 1e30;
  for (int r = 0; r <= repeats; r++) {
    double t = now();
    for (int b0 = 0; b0 < nframes; b0 += batch) {
      fz_frames_request q = {.dtype = "u16",
                             .ndims = 2,
                             .shape = {NI, NJ},
                             .cut = cut,
                             .offsets = offs + b0,
                             .lengths = lens + b0,
                             .nframes = (size_t)batch,
                             .has_fd = d_chunks == NULL,
                             .fd = fd,
                             .d_data = d_chunks,
                             .d_len = bytes,
                             .has_out_fd = to == TO_FILE,
                             .out_fd = out,
                             .d_out = d_out,
                             .d_out_len = d_out != NULL ? out_len : 0};
      if ((rc = fz_client_frames(c, &q, res)) < 0) {
        fprintf(stderr, "through fzd: %s: %s\n", fz_strerror(rc), fz_client_errmsg(c));
        return -1;
      }
      bool check = r == 0 && b0 == 0;
      if (check && to == TO_FILE && pread(out, got, out_len, 0) < 0)
        perror("pread");
      if (check && to == TO_DEVICE)
        CUDA_OK(cudaMemcpy(got, d_out, out_len, cudaMemcpyDeviceToHost));
      for (int i = 0; i < batch; i++) {
        if (res[i].status != 0) {
          fprintf(stderr, "through fzd: frame %d: %s\n", b0 + i, res[i].message);
          return -1;
        }
        if (check && !same_lists(&res[i], got, cc[i], cv + (size_t)i * cap, ci + (size_t)i * cap)) {
          fprintf(stderr, "through fzd: frame %d differs from the CPU\n", i);
          *bad = 1;
        }
      }
      fz_client_frame_results_free(res, (size_t)batch);
    }
    t = now() - t;
    if (r > 0 && t < best)
      best = t;
  }
  free(res);
  fz_client_close(c);
  close(fd);
  if (out >= 0)
    close(out);
  cudaFree(d_out);
  free(got);
  return nframes / best;
}

int main(int argc, char **argv) {
  int nframes = 64, batch = 64, repeats = 20, opt;
  double cut = 10;
  const char *address = NULL;
  while ((opt = getopt(argc, argv, "f:b:r:c:S:")) != -1) {
    switch (opt) {
    case 'f': nframes = atoi(optarg); break;
    case 'b': batch = atoi(optarg); break;
    case 'r': repeats = atoi(optarg); break;
    case 'c': cut = atof(optarg); break;
    case 'S': address = optarg; break;
    default:
      fprintf(stderr, "usage: %s [-f FRAMES] [-b BATCH] [-r REPEATS] [-c CUT] [-S ADDRESS]\n",
              argv[0]);
      return 2;
    }
  }
  if (nframes < 1 || batch < 1 || repeats < 1 || nframes % batch) {
    fprintf(stderr, "FRAMES must be a positive multiple of BATCH\n");
    return 2;
  }
  char why[256];
  /* The frames, encoded as the HDF5 filter writes them. */
  size_t bound = fz_bslz4_bound(FZ_BSLZ4_LZ4, NPX, 2, 0);
  uint8_t *chunks;
  CUDA_OK(cudaMallocHost((void **)&chunks, (size_t)nframes * bound));
  uint64_t *offs = malloc((size_t)nframes * 8), *lens = malloc((size_t)nframes * 8);
  uint16_t *frame = malloc(NPX * 2);
  uint64_t at = 0;
  for (int i = 0; i < nframes; i++) {
    make_frame(frame);
    int64_t len =
        fz_bslz4_encode(FZ_BSLZ4_LZ4, frame, NPX, 2, 0, 0, chunks + at, bound, why, sizeof why);
    if (len < 0)
      return fprintf(stderr, "encode: %s\n", why), 2;
    offs[i] = at, lens[i] = (uint64_t)len, at += (uint64_t)len;
  }
  uint8_t *d_chunks;
  CUDA_OK(cudaMalloc((void **)&d_chunks, at));
  CUDA_OK(cudaMemcpy(d_chunks, chunks, at, cudaMemcpyHostToDevice));

  /* The CPU's answers for the first batch. */
  size_t cap = 1 << 16;
  fz_frames_params cp = {.dtype = FZ_U16, .npixels = NPX, .codec = FZ_BSLZ4_LZ4};
  fz_frames *f;
  if (fz_frames_create(&cp, &f, why, sizeof why) < 0)
    return fprintf(stderr, "%s\n", why), 2;
  uint16_t *cv = malloc((size_t)batch * cap * 2), *hv;
  uint32_t *ci = malloc((size_t)batch * cap * 4), *hi;
  size_t *cc = malloc((size_t)batch * sizeof *cc), *gc = malloc((size_t)batch * sizeof *gc);
  int *cs = malloc((size_t)batch * sizeof *cs), *gs = malloc((size_t)batch * sizeof *gs);
  fz_frames_batch cb = {.base = chunks,
                        .offsets = offs,
                        .lengths = lens,
                        .nframes = (size_t)batch,
                        .cut = cut,
                        .values = cv,
                        .indices = ci,
                        .cap = cap,
                        .counts = cc,
                        .status = cs};
  double t0 = now();
  if (fz_frames_sparse_batch(f, &cb, 0, why, sizeof why) != 0)
    return fprintf(stderr, "CPU batch: %s\n", why), 2;
  double cpu_s = now() - t0;
  double listed = 0;
  for (int i = 0; i < batch; i++)
    listed += (double)cc[i];

  fz_frames_gpu_params gp = {.dtype = FZ_U16,
                             .npixels = NPX,
                             .codec = FZ_BSLZ4_LZ4,
                             .max_frames = (size_t)batch,
                             .cap = cap};
  fz_frames_gpu *g;
  if (fz_frames_gpu_create(&gp, &g, why, sizeof why) < 0)
    return fprintf(stderr, "%s\n", why), 2;
  struct cudaDeviceProp prop;
  int dev;
  CUDA_OK(cudaGetDevice(&dev));
  CUDA_OK(cudaGetDeviceProperties(&prop, dev));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  uint8_t *d_vals, *d_dense;
  uint32_t *d_idx;
  CUDA_OK(cudaMalloc((void **)&d_vals, (size_t)batch * cap * 2));
  CUDA_OK(cudaMalloc((void **)&d_idx, (size_t)batch * cap * 4));
  CUDA_OK(cudaMalloc((void **)&d_dense, (size_t)batch * NPX * 2));
  CUDA_OK(cudaMallocHost((void **)&hv, (size_t)batch * cap * 2));
  CUDA_OK(cudaMallocHost((void **)&hi, (size_t)batch * cap * 4));
  uint16_t *dense = malloc((size_t)batch * NPX * 2), *ref = malloc(NPX * 2);

  printf("# GPU frames: %s, %d Eiger 4M u16 frames (%d x %d), batches of %d, cut %g\n", prop.name,
         nframes, NI, NJ, batch, cut);
  printf("# bitshuffle-LZ4 ratio %.2f, %.0f pixels a frame above the cut; best of %d passes\n",
         (double)nframes * NPX * 2 / (double)at, listed / batch, repeats);
  printf("# CPU engine, %ld threads: %.0f frames/s\n\n", sysconf(_SC_NPROCESSORS_ONLN),
         batch / cpu_s);
  printf("| output | chunks in | results in | frames/s | GB/s of pixels |\n");
  printf("|---|---|---|---|---|\n");
  static const struct {
    const char *name;
    int sparse, chunks_dev, out_dev;
  } modes[] = {
      {"sparse", 1, 1, 1}, {"sparse", 1, 1, 0}, {"sparse", 1, 0, 0},
      {"dense", 0, 1, 1},  {"dense", 0, 0, 0},
  };
  int bad = 0;
  double best_sparse = 0, host_sparse = 0, dev_host_sparse = 0;
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
    double best = 1e30;
    for (int r = 0; r <= repeats; r++) {
      double t = now();
      for (int b0 = 0; b0 < nframes; b0 += batch) {
        fz_frames_gpu_batch gb = {
            .base = modes[m].chunks_dev ? d_chunks : chunks,
            .base_len = at,
            .base_on_device = modes[m].chunks_dev,
            .offsets = offs + b0,
            .lengths = lens + b0,
            .nframes = (size_t)batch,
            .cut = cut,
            .out_on_device = modes[m].out_dev,
            .values = modes[m].sparse ? (modes[m].out_dev ? (void *)d_vals : (void *)hv) : NULL,
            .indices = modes[m].sparse ? (modes[m].out_dev ? d_idx : hi) : NULL,
            .cap = cap,
            .dense = modes[m].sparse ? NULL : (modes[m].out_dev ? (void *)d_dense : (void *)dense),
            .counts = gc,
            .status = gs};
        int64_t failed = fz_frames_gpu_run(g, &gb, (fz_frames_gpu_stream)s, why, sizeof why);
        if (failed != 0) {
          fprintf(stderr, "%s: batch at %d: %lld failed: %s\n", modes[m].name, b0,
                  (long long)failed, failed < 0 ? why : "frames");
          return 1;
        }
        /* The first batch of the first pass: against the CPU. */
        if (r == 0 && b0 == 0) {
          if (modes[m].out_dev && modes[m].sparse) {
            CUDA_OK(cudaMemcpy(hv, d_vals, (size_t)batch * cap * 2, cudaMemcpyDeviceToHost));
            CUDA_OK(cudaMemcpy(hi, d_idx, (size_t)batch * cap * 4, cudaMemcpyDeviceToHost));
          }
          if (modes[m].out_dev && !modes[m].sparse)
            CUDA_OK(cudaMemcpy(dense, d_dense, (size_t)batch * NPX * 2, cudaMemcpyDeviceToHost));
          for (int i = 0; i < batch; i++) {
            if (modes[m].sparse) {
              if (gc[i] != cc[i] || memcmp(hv + (size_t)i * cap, cv + (size_t)i * cap, cc[i] * 2) ||
                  memcmp(hi + (size_t)i * cap, ci + (size_t)i * cap, cc[i] * 4)) {
                fprintf(stderr, "%s: frame %d differs from the CPU\n", modes[m].name, i);
                bad = 1;
              }
            } else {
              if (fz_frames_dense(f, chunks + offs[i], lens[i], ref, NPX * 2, NULL, NULL, why,
                                  sizeof why) < 0 ||
                  memcmp(ref, dense + (size_t)i * NPX, NPX * 2)) {
                fprintf(stderr, "%s: frame %d differs from the CPU\n", modes[m].name, i);
                bad = 1;
              }
            }
          }
        }
      }
      t = now() - t;
      if (r > 0 && t < best) /* pass 0 warms up */
        best = t;
    }
    double fps = nframes / best;
    if (modes[m].sparse && modes[m].chunks_dev && fps > best_sparse)
      best_sparse = fps;
    if (modes[m].sparse && !modes[m].chunks_dev && !modes[m].out_dev)
      host_sparse = fps;
    if (modes[m].sparse && modes[m].chunks_dev && !modes[m].out_dev)
      dev_host_sparse = fps;
    printf("| %s | %s | %s | %.0f | %.1f |\n", modes[m].name,
           modes[m].chunks_dev ? "device" : "host", modes[m].out_dev ? "device" : "host", fps,
           fps * NPX * 2 / 1e9);
  }
  if (address != NULL) {
    double fps = through_fzd(address, chunks, NULL, TO_REPLY, at, offs, lens, nframes, batch,
                             repeats, cut, cc, cv, ci, cap, &bad);
    double ffps = through_fzd(address, chunks, NULL, TO_FILE, at, offs, lens, nframes, batch,
                              repeats, cut, cc, cv, ci, cap, &bad);
    double dfps = through_fzd(address, chunks, d_chunks, TO_REPLY, at, offs, lens, nframes, batch,
                              repeats, cut, cc, cv, ci, cap, &bad);
    double ddfps = through_fzd(address, chunks, d_chunks, TO_DEVICE, at, offs, lens, nframes, batch,
                               repeats, cut, cc, cv, ci, cap, &bad);
    if (fps < 0 || ffps < 0 || dfps < 0 || ddfps < 0)
      return 1;
    printf("| sparse | file, through fzd | reply | %.0f | %.1f |\n", fps, fps * NPX * 2 / 1e9);
    printf("| sparse | file, through fzd | file | %.0f | %.1f |\n", ffps, ffps * NPX * 2 / 1e9);
    printf("| sparse | device, through fzd | reply | %.0f | %.1f |\n", dfps, dfps * NPX * 2 / 1e9);
    printf("| sparse | device, through fzd | device | %.0f | %.1f |\n", ddfps,
           ddfps * NPX * 2 / 1e9);
    printf("\n# through fzd, chunks in a file: %.0f%% (lists in the reply), %.0f%% (lists into a "
           "file) of in process with chunks and lists in host memory; chunks in device memory: "
           "%.0f%% (lists in the reply) of in process with lists in host memory, %.0f%% (lists "
           "into device memory) of in process with lists in device memory (bar: 70%%)\n",
           100 * fps / host_sparse, 100 * ffps / host_sparse, 100 * dfps / dev_host_sparse,
           100 * ddfps / best_sparse);
  }
  printf("\n# sparse, chunks in device memory: %.0f frames/s (bar: 10000): %s\n", best_sparse,
         best_sparse >= 10000 ? "met" : "NOT met");
  printf("# lists and dense frames identical to the CPU engine's: %s\n", bad ? "NO" : "yes");
  fz_frames_gpu_destroy(g);
  fz_frames_destroy(f);
  cudaFree(d_chunks), cudaFree(d_vals), cudaFree(d_idx), cudaFree(d_dense);
  cudaFreeHost(chunks), cudaFreeHost(hv), cudaFreeHost(hi);
  cudaStreamDestroy(s);
  free(offs), free(lens), free(frame), free(cv), free(ci), free(cc), free(gc), free(cs), free(gs);
  free(dense), free(ref);
  return bad;
}
