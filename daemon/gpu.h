/*
 * gpu.h - fzd's GPU backend (gpu.c): one CUDA context pinned at start-up, a
 * per-worker state (its stream, pinned staging buffers, device buffers and
 * an LRU of GPU plans), and the per-connection cache of imported device
 * buffers and events.
 *
 * gpu.c is compiled only when the build has CUDA (FZD_HAVE_CUDA); without it
 * the functions below are inline stand-ins that say there is no GPU, so the
 * rest of the daemon is written once for both builds.
 */
#ifndef FZD_GPU_H
#define FZD_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fz.h"

/* Bytes of a legacy cudaIpcMemHandle_t, as it travels on the wire. */
#define FZD_IPC_HANDLE_BYTES 64
/* Workers (one stream each) when the "workers" setting is 0. */
#define FZD_GPU_DEFAULT_WORKERS 4

struct fzd_job;
typedef struct fzd_gpu fzd_gpu;
typedef struct fzd_gpu_worker fzd_gpu_worker;
typedef struct fzd_ipc_cache fzd_ipc_cache;

#ifdef FZD_HAVE_CUDA

/* Opens the context on `device` (an index or a UUID) with nstreams streams.
 * mem_limit caps the device bytes the workers' buffers and plans hold
 * together (0: no cap but the GPU's own); beyond it a job fails with
 * FZ_EGPUOOM.  FZ_ENOGPU (why says which) when there is no such GPU. */
int fzd_gpu_open(const char *device, unsigned nstreams, uint64_t mem_limit,
                 fzd_gpu **out, char *why, size_t why_len);
/* Every worker must have been destroyed; NULL is a no-op. */
void fzd_gpu_close(fzd_gpu *g);
const char *fzd_gpu_name(const fzd_gpu *g);
/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it. */
const char *fzd_gpu_uuid(const fzd_gpu *g);

/* The state of worker `index` (it uses stream `index` of the context),
 * warmed up: a small compression and decompression have run on its stream
 * through the same path as a job, and the archive was checked against the
 * CPU engine's.  Called on the main thread before the worker starts. */
int fzd_gpu_worker_create(fzd_gpu *g, unsigned index, unsigned plan_cache_entries,
                          fzd_gpu_worker **out, char *why, size_t why_len);
void fzd_gpu_worker_destroy(fzd_gpu_worker *w); /* NULL is a no-op */
/* The worker has been idle a while: it gives back its staging and device
 * buffers (its plans stay, warm, in the shared cache) and the context's
 * pool returns the device memory no one holds to the GPU. */
void fzd_gpu_worker_idle(fzd_gpu_worker *w);
/* Runs one compress or decompress job on the worker's stream; the result is
 * stored in the job as the CPU path stores it.  Returns job's error code. */
int fzd_gpu_run(fzd_gpu_worker *w, struct fzd_job *job);

/* A connection's imported device buffers (legacy IPC, VMM, pool pointers,
 * with the pools) and IPC events; destroyed (every import closed) on the
 * loop thread when the connection's memory goes, after its last job. */
fzd_ipc_cache *fzd_ipc_cache_create(fzd_gpu *g);
void fzd_ipc_cache_destroy(fzd_ipc_cache *c); /* NULL is a no-op */
/* The "release" method: closes the imported allocations whose buffer_id is
 * one of ids[n] (with all, every import and every event).  An import a
 * running job uses closes when that job ends.  Returns how many
 * allocations were released; NULL is a no-op (0). */
unsigned fzd_ipc_cache_release(fzd_ipc_cache *c, const uint64_t *ids, size_t n, bool all);

#else /* no CUDA in this build */

static inline int fzd_gpu_open(const char *device, unsigned nstreams,
                               uint64_t mem_limit, fzd_gpu **out, char *why,
                               size_t why_len) {
  (void)device, (void)nstreams, (void)mem_limit, (void)why, (void)why_len;
  *out = NULL;
  return FZ_ENOGPU;
}
static inline void fzd_gpu_close(fzd_gpu *g) { (void)g; }
static inline const char *fzd_gpu_name(const fzd_gpu *g) { (void)g; return "cpu"; }
static inline const char *fzd_gpu_uuid(const fzd_gpu *g) { (void)g; return ""; }
static inline int fzd_gpu_worker_create(fzd_gpu *g, unsigned index,
                                        unsigned plan_cache_entries,
                                        fzd_gpu_worker **out, char *why,
                                        size_t why_len) {
  (void)g, (void)index, (void)plan_cache_entries, (void)why, (void)why_len;
  *out = NULL;
  return FZ_ENOGPU;
}
static inline void fzd_gpu_worker_destroy(fzd_gpu_worker *w) { (void)w; }
static inline void fzd_gpu_worker_idle(fzd_gpu_worker *w) { (void)w; }
static inline int fzd_gpu_run(fzd_gpu_worker *w, struct fzd_job *job) {
  (void)w, (void)job;
  return FZ_ENOGPU;
}
static inline fzd_ipc_cache *fzd_ipc_cache_create(fzd_gpu *g) { (void)g; return NULL; }
static inline void fzd_ipc_cache_destroy(fzd_ipc_cache *c) { (void)c; }
static inline unsigned fzd_ipc_cache_release(fzd_ipc_cache *c, const uint64_t *ids,
                                             size_t n, bool all) {
  (void)c, (void)ids, (void)n, (void)all;
  return 0;
}

#endif
#endif
