/*
 * fz_gpu.h - the CUDA backend of the fzd engine: compression and
 * decompression of device buffers, byte-identical to the CPU reference.
 *
 * This header is the whole public API of libfzkernels; it is plain C and
 * needs no CUDA header.  A context pins one GPU (by index or UUID), owns a
 * pool of streams and a stream-ordered device memory pool.  A GPU plan is
 * the finalized form of an fz_params for that context: it owns (or draws per
 * call from the pool) every device buffer a compression needs, so repeated
 * same-shape jobs allocate nothing.  Compression and decompression read and
 * write device memory and run on the caller's stream; a compression
 * synchronises the host exactly once, to return the compressed size.
 *
 * Archives are the engine's format (docs/format.md): an archive made here
 * decodes with fz_decompress() and the other way round, bit for bit.
 *
 * Every fallible call returns an int: >= 0 on success, a negative fz_errno
 * code on failure (FZ_ENOGPU without a usable GPU, FZ_EGPUOOM when device
 * memory runs out, FZ_ECUDA for any other CUDA error, whose name is quoted in
 * `why`; FZ_ENOSYS for what the kernels do not do yet: chains with a fill
 * value, which the CPU engine serves).  No call prints, exits or aborts.
 */
#ifndef FZ_GPU_H
#define FZ_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "fz.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA runtime's stream type (cudaStream_t is this very pointer type). */
typedef struct CUstream_st *fz_gpu_stream;

typedef struct fz_gpu_ctx fz_gpu_ctx;
typedef struct fz_gpu_plan fz_gpu_plan;

/* Number of CUDA devices; FZ_ENOGPU (and *count = 0) when there is no driver
 * or no device. */
int fz_gpu_device_count(int *count);

/* Creates a context on `device`: NULL or "" for device 0, a decimal index, or
 * a UUID as nvidia-smi prints it ("GPU-xxxxxxxx-xxxx-..."). nstreams (0 means
 * 4) non-blocking streams are created for fz_gpu_ctx_stream(). */
int fz_gpu_ctx_create(const char *device, unsigned nstreams, fz_gpu_ctx **out,
                      char *why, size_t why_len);
/* Waits for the context's streams, then releases everything; NULL is a no-op.
 * Every plan of the context must have been destroyed before. */
void fz_gpu_ctx_destroy(fz_gpu_ctx *ctx);
/* Stream i (modulo the pool size) of the context's stream pool. */
fz_gpu_stream fz_gpu_ctx_stream(fz_gpu_ctx *ctx, unsigned i);
/* The pinned device's ordinal, and its name ("NVIDIA H200"). */
int fz_gpu_ctx_device(const fz_gpu_ctx *ctx);
const char *fz_gpu_ctx_name(const fz_gpu_ctx *ctx);

/* The pinned device's UUID as nvidia-smi prints it
 * ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"); static per context. */
const char *fz_gpu_ctx_uuid(const fz_gpu_ctx *ctx);

/* Page-locked host memory, for staging: copies to and from it run
 * asynchronously on a stream.  FZ_ENOMEM when it cannot be had. */
int fz_gpu_host_alloc(fz_gpu_ctx *ctx, size_t bytes, void **h_ptr, char *why, size_t why_len);
void fz_gpu_host_free(fz_gpu_ctx *ctx, void *h_ptr); /* NULL is a harmless no-op */
/* Enqueues a copy of n bytes on `stream`, between any two of device memory
 * and host memory (pinned host memory for it to be asynchronous). */
int fz_gpu_copy(fz_gpu_ctx *ctx, void *dst, const void *src, size_t n, fz_gpu_stream stream,
                char *why, size_t why_len);
/* Waits for everything enqueued on `stream`. */
int fz_gpu_sync(fz_gpu_ctx *ctx, fz_gpu_stream stream, char *why, size_t why_len);

/* Returns the memory of the context's pool that no allocation holds to the
 * GPU (the pool keeps what it had otherwise, so repeated jobs reuse it).
 * Waits for nothing; callers trim when they are idle. */
int fz_gpu_ctx_trim(fz_gpu_ctx *ctx);

/* Stream-ordered allocation from the context's pool (for callers that want
 * their buffers to come from the same pool); freed with fz_gpu_free. */
int fz_gpu_malloc(fz_gpu_ctx *ctx, size_t bytes, fz_gpu_stream stream,
                  void **d_ptr, char *why, size_t why_len);
int fz_gpu_free(fz_gpu_ctx *ctx, void *d_ptr, fz_gpu_stream stream);

/* ---- kernels generated at run time (NVRTC) -------------------------------
 *
 * For each plan the context generates one fused kernel per direction from
 * the chain's device ops, compiles it with NVRTC for the device's exact
 * architecture (the nvcc build's IEEE flags) and loads it; it replaces the
 * ahead-of-time kernel of the same family, with byte-identical archives.
 * NVRTC is opened at run time: where it is missing, or a compile fails,
 * the ahead-of-time kernels run and the failure's text (the NVRTC log)
 * waits for fz_gpu_ctx_jit_failure().  Without a configuration call the
 * JIT is on and compiled modules are kept in memory only. */

/* The JIT's modes (fz_gpu_ctx_jit_config's `enabled`). */
#define FZ_GPU_JIT_OFF 0  /* ahead-of-time kernels only */
#define FZ_GPU_JIT_ON 1   /* each chain's generated kernels where they compile */
#define FZ_GPU_JIT_ONLY 2 /* every kernel generated, as on a GPU the built-in code
                           * cannot run on (for tests and comparisons) */

/* Configures the JIT of a context: cache_dir NULL or "" keeps modules in
 * memory only, else they are also written to (and read back, validated,
 * from) that directory, bounded by max_disk_bytes (a directory that cannot
 * be used leaves memory only, with the reason in why and in
 * fz_gpu_ctx_jit_failure); enabled is a mode above.  Called after
 * fz_gpu_ctx_create and before the context's first plan (FZ_EINVAL after
 * it).  On a GPU the built-in kernels cannot run on, fz_gpu_ctx_create
 * succeeds only when NVRTC works, every kernel is generated, and
 * FZ_GPU_JIT_OFF is refused (FZ_EINVAL). */
int fz_gpu_ctx_jit_config(fz_gpu_ctx *ctx, const char *cache_dir, uint64_t max_disk_bytes,
                          int enabled, char *why, size_t why_len);

/* What the context's JIT did: module cache lookups answered from memory or
 * disk, misses, NVRTC compiles (failed ones too) and the microseconds they
 * took, disk entries written, refused as corrupt or foreign, and evicted,
 * the bytes on disk, writes that failed, and the modules this context
 * loaded. */
typedef struct fz_gpu_jit_counts {
  uint64_t mem_hits, disk_hits, misses, compiles, compile_failures, compile_us;
  uint64_t disk_writes, disk_rejected, disk_evicted, disk_bytes, disk_write_failures;
  uint64_t modules_loaded;
} fz_gpu_jit_counts;
void fz_gpu_ctx_jit_counts(fz_gpu_ctx *ctx, fz_gpu_jit_counts *out);

/* The text of the JIT failures (NVRTC missing, a compile's log) that were
 * not fetched yet, one per line, copied to buf and then forgotten, so a
 * caller logs each once.  Returns 1 when there was text, else 0. */
int fz_gpu_ctx_jit_failure(fz_gpu_ctx *ctx, char *buf, size_t len);

/* Plan flags. */
#define FZ_GPU_PREALLOC 0x1u /* allocate the workspace once, at creation */
#define FZ_GPU_TIMING 0x2u   /* record kernel time (fz_gpu_plan_kernel_ms) */

/* Validates p like fz_plan_create() (p->threads is ignored) and finalizes a
 * GPU plan.  Without FZ_GPU_PREALLOC the workspace is drawn from the
 * context's pool on the caller's stream in each call and given back at its
 * end (stream-ordered, so the pool reuses the same memory). */
int fz_gpu_plan_create(fz_gpu_ctx *ctx, const fz_params *p, unsigned flags,
                       fz_gpu_plan **out, char *why, size_t why_len);
void fz_gpu_plan_destroy(fz_gpu_plan *plan); /* NULL is a harmless no-op */

size_t fz_gpu_plan_input_bytes(const fz_gpu_plan *plan);
/* An upper bound on the archive size; the same as the CPU plan's. */
size_t fz_gpu_plan_compress_bound(const fz_gpu_plan *plan);
/* Device bytes of the plan's workspace. */
size_t fz_gpu_plan_workspace_bytes(const fz_gpu_plan *plan);
/* The canonical chain text the plan's archives hold, as
 * fz_archive_inspect() reports it; static per plan. */
const char *fz_gpu_plan_chain(const fz_gpu_plan *plan);
/* The absolute bound the last fz_gpu_compress() of the plan enforced (0 for
 * a lossless chain), as the archive's header holds it: a caller reports it
 * without reading the archive back. */
double fz_gpu_plan_eb_abs(const fz_gpu_plan *plan);
/* Which kernels the plan's compressions run: "jit" (generated at run time
 * for this chain) or "aot" (built with the library); static per plan. */
const char *fz_gpu_plan_path(const fz_gpu_plan *plan);
/* Milliseconds the kernels of the last compression took, from the first
 * kernel to the last (needs FZ_GPU_TIMING; synchronises on the event). */
int fz_gpu_plan_kernel_ms(fz_gpu_plan *plan, float *ms);

/* Compresses in_len bytes of device memory d_in (in_len must equal
 * fz_gpu_plan_input_bytes()) into device memory d_out.  Runs on `stream`
 * (NULL: the default stream) and waits for it once, to read the size.
 * FZ_ENOSPC when out_cap is below the archive's size (*out_len then holds the
 * size needed).  A plan may be used by one thread at a time. */
int fz_gpu_compress(fz_gpu_plan *plan, const void *d_in, size_t in_len,
                    void *d_out, size_t out_cap, size_t *out_len,
                    fz_gpu_stream stream, char *why, size_t why_len);

/* Decompressions of one caller at a time.  A decoder owns the pinned host
 * memory a decompression needs, so decoders of one context (one per
 * thread) run at once on their own streams; fz_gpu_decompress() below
 * shares one among its callers, one at a time. */
typedef struct fz_gpu_decoder fz_gpu_decoder;

int fz_gpu_decoder_create(fz_gpu_ctx *ctx, fz_gpu_decoder **out, char *why, size_t why_len);
void fz_gpu_decoder_destroy(fz_gpu_decoder *dec); /* NULL is a harmless no-op */

/* Step one: reads the header of the archive of arc_len bytes at device
 * address d_arc up to its chunk table (one small copy, one wait on
 * `stream`) and, when info is not NULL, says what it holds (dtype, shape,
 * raw size, chain, bound) as fz_archive_inspect() would.  A header that is
 * malformed this far gives the CPU decoder's error.  The archive must stay
 * in place until fz_gpu_decoder_run(). */
int fz_gpu_decoder_open(fz_gpu_decoder *dec, const void *d_arc, size_t arc_len,
                        fz_archive_info *info, fz_gpu_stream stream, char *why,
                        size_t why_len);
/* Step two: decodes the opened archive into device memory d_out on
 * `stream`, and waits for it once.  FZ_ENOSPC, before anything is written,
 * when out_cap is below the raw size.  The rest of the header and every
 * chunk are checked on the device; a corrupt archive gives the CPU
 * decoder's error code. */
int fz_gpu_decoder_run(fz_gpu_decoder *dec, void *d_out, size_t out_cap, size_t *out_len,
                       fz_gpu_stream stream, char *why, size_t why_len);

/* Both steps in one call, for a caller that knows where the output goes
 * (out_cap bytes at d_out), with one wait on `stream` where it can: when
 * the last two archives this decoder opened had the same header prefix
 * but for the quantizer's bounds and step and the payload's checksum (a
 * series of arrays of one shape and chain: the bound is the same, or a
 * relative bound that the data's range changes), it decodes at once as if
 * this one had it too, and the device compares the prefix first; where it
 * differs the chunk kernels stand down, nothing is written to d_out, and
 * the call goes on as open and run do.  info (when not NULL) is this
 * archive's, filled in on FZ_ENOSPC too, which comes before anything is
 * written.  Errors are those of the two steps. */
int fz_gpu_decoder_decompress(fz_gpu_decoder *dec, const void *d_arc, size_t arc_len,
                              void *d_out, size_t out_cap, size_t *out_len,
                              fz_archive_info *info, fz_gpu_stream stream, char *why,
                              size_t why_len);

/* fz_gpu_decoder_decompress() for an output the host wants: the decoded
 * bytes are also copied to h_out (pinned host memory of at least out_cap
 * bytes, such as fz_gpu_host_alloc's) on `stream` before each wait, so an
 * archive of a series still costs one wait.  On success h_out holds
 * *out_len bytes; after an error its bytes mean nothing. */
int fz_gpu_decoder_decompress_host(fz_gpu_decoder *dec, const void *d_arc, size_t arc_len,
                                   void *d_out, size_t out_cap, void *h_out, size_t *out_len,
                                   fz_archive_info *info, fz_gpu_stream stream, char *why,
                                   size_t why_len);

/* The raw size of the archives of the decoder's series: what the next
 * fz_gpu_decoder_decompress() of one of them writes, with one wait; 0 when
 * the decoder is in no series (its next call opens the archive first). */
size_t fz_gpu_decoder_series_bytes(const fz_gpu_decoder *dec);

/* How many times the decoder waited for its stream since its last
 * fz_gpu_decoder_open() or fz_gpu_decoder_decompress() began: 1 for a
 * decompress of a series' archive, 2 for open and run. */
unsigned fz_gpu_decoder_waits(const fz_gpu_decoder *dec);

/* Which kernels the decoder's last fz_gpu_decoder_run() ran: "jit" or
 * "aot" ("" before the first). */
const char *fz_gpu_decoder_path(const fz_gpu_decoder *dec);

/* Decompresses the archive in device memory d_arc into device memory d_out
 * (out_cap >= the raw size), on `stream` (NULL: the default stream),
 * which it waits for: fz_gpu_decoder_decompress() with the context's
 * decoder, under its lock. */
int fz_gpu_decompress(fz_gpu_ctx *ctx, const void *d_arc, size_t arc_len,
                      void *d_out, size_t out_cap, size_t *out_len,
                      fz_gpu_stream stream, char *why, size_t why_len);

/* ---- device memory and events of other processes (import.c) -------------
 *
 * A client process shares its device memory with this one in one of three
 * ways, and each import gives a mapping: the allocation's first byte as
 * seen here and its real size as the driver reports it, which is what a
 * caller checks every range against.  Imports are not cached or counted
 * here; the caller closes each mapping with fz_gpu_unmap() once nothing
 * runs on it any more (no kernel or copy of any stream may still use it).
 * A handle or descriptor the GPU cannot open gives FZ_EINVAL (FZ_EGPUOOM
 * when device memory runs out), with the CUDA error quoted in why. */

/* Bytes of a cudaIpcMemHandle_t, a cudaIpcEventHandle_t and a
 * cudaMemPoolPtrExportData alike. */
#define FZ_GPU_EXPORT_BYTES 64

typedef enum fz_gpu_mem_kind {
  FZ_GPU_MEM_IPC = 1,  /* cudaMalloc memory, a legacy cudaIpcMemHandle_t */
  FZ_GPU_MEM_VMM = 2,  /* cuMemCreate memory, a POSIX file descriptor */
  FZ_GPU_MEM_POOL = 3, /* memory of an IPC-capable pool, the pointer's export data */
} fz_gpu_mem_kind;

/* The runtime's cudaMemPool_t and cudaEvent_t (these very pointer types). */
typedef struct CUmemPoolHandle_st *fz_gpu_mempool;
typedef struct CUevent_st *fz_gpu_event;

typedef struct fz_gpu_mapping {
  fz_gpu_mem_kind kind;
  void *base;          /* the allocation's first byte, in this process */
  size_t size;         /* bytes from base that belong to the allocation */
  uint64_t vmm_handle; /* VMM: the imported allocation handle (private) */
  size_t vmm_mapped;   /* VMM: bytes reserved and mapped at base (private) */
} fz_gpu_mapping;

/* 0 when the driver has every call the imports need (found once, through
 * the runtime: nothing here links the driver library); else FZ_ECUDA
 * naming the first one missing. */
int fz_gpu_import_ready(char *why, size_t why_len);

/* The allocation that contains device address d_ptr (cuMemGetAddressRange):
 * its base and size. */
int fz_gpu_address_range(const void *d_ptr, void **base, size_t *size, char *why,
                         size_t why_len);

/* Opens a legacy handle (FZ_GPU_EXPORT_BYTES bytes, cudaIpcGetMemHandle);
 * the handle names the allocation's base. */
int fz_gpu_import_ipc(fz_gpu_ctx *ctx, const void *handle, fz_gpu_mapping *m, char *why,
                      size_t why_len);

/* Imports the VMM allocation whose handle fd carries
 * (cuMemExportToShareableHandle with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
 * reserves an address range, maps size bytes of it there and grants the
 * context's device read and write.  size is the one given to cuMemCreate:
 * a multiple of the allocation granularity (else FZ_EINVAL) and not past
 * the allocation's end (cuMemMap refuses it: FZ_EINVAL).  fd stays the
 * caller's to close (the imported handle keeps the memory). */
int fz_gpu_import_vmm(fz_gpu_ctx *ctx, int fd, size_t size, fz_gpu_mapping *m, char *why,
                      size_t why_len);

/* Imports an IPC-capable pool from its descriptor
 * (cudaMemPoolExportToShareableHandle, cudaMemHandleTypePosixFileDescriptor);
 * fd stays the caller's.  The context's device is granted read and write
 * access to the pool's memory.  Close with fz_gpu_pool_close() once no
 * pointer imported from it is mapped. */
int fz_gpu_pool_import(fz_gpu_ctx *ctx, int fd, fz_gpu_mempool *pool, char *why,
                       size_t why_len);
void fz_gpu_pool_close(fz_gpu_ctx *ctx, fz_gpu_mempool pool); /* NULL: no-op */
/* Imports one allocation of an imported pool from its export data
 * (cudaMemPoolExportPointer of the allocation's base). */
int fz_gpu_import_pool_ptr(fz_gpu_ctx *ctx, fz_gpu_mempool pool, const void *export_data,
                           fz_gpu_mapping *m, char *why, size_t why_len);

/* Closes a mapping of any kind and zeroes it; a zeroed one is a no-op. */
void fz_gpu_unmap(fz_gpu_ctx *ctx, fz_gpu_mapping *m);

/* Opens an event of another process (cudaIpcGetEventHandle of an event made
 * with cudaEventInterprocess | cudaEventDisableTiming); closed with
 * fz_gpu_event_close(). */
int fz_gpu_event_open(fz_gpu_ctx *ctx, const void *handle, fz_gpu_event *ev, char *why,
                      size_t why_len);
void fz_gpu_event_close(fz_gpu_ctx *ctx, fz_gpu_event ev); /* NULL: no-op */
/* Work queued on stream after this waits for the event's last record
 * (cudaStreamWaitEvent); the host does not wait. */
int fz_gpu_stream_wait_event(fz_gpu_stream stream, fz_gpu_event ev, char *why,
                             size_t why_len);
/* Records the event on stream: it completes when the work queued before it
 * has (cudaEventRecord). */
int fz_gpu_event_record(fz_gpu_event ev, fz_gpu_stream stream, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif /* FZ_GPU_H */
