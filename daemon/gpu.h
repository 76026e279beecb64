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
struct fzd_backend_ops;

/* The settings the GPU backend's workers follow (from fzd_config). */
typedef struct fzd_gpu_settings {
  unsigned plan_cache_entries; /* plans shared by the workers, besides one slot each */
  uint64_t plan_cache_bytes;   /* device bytes of the kept plans; 0: no bound */
  bool jit;                    /* compile fused kernels at run time */
  const char *jit_cache_dir;   /* resolved (fzd_config_jit_dir); "": memory only */
  uint64_t jit_cache_max_bytes;
} fzd_gpu_settings;
typedef struct fzd_gpu fzd_gpu;
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

/* Fills be with the GPU backend (backend.h): worker i runs its jobs on
 * stream i, with the plan cache and JIT of s.  Each worker is warmed up
 * when it is made: a small compression and decompression run through the
 * job path and the archive is checked against the CPU engine's. */
int fzd_gpu_backend(fzd_gpu *g, const fzd_gpu_settings *s, struct fzd_backend_ops *be);

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
static inline int fzd_gpu_backend(fzd_gpu *g, const fzd_gpu_settings *s,
                                  struct fzd_backend_ops *be) {
  (void)g, (void)s, (void)be;
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
