/*
 * fzclient.h - libfzclient, the C client of the fzd compression daemon.
 *
 * This header is the whole public API of libfzclient; anything it does not
 * declare is private and may change.  It compiles as C11 and as C++.
 *
 * A client opens one connection (fz_client) to an fzd, over its Unix socket or
 * over TCP, and sends jobs on it: compress an array, or decompress an archive.
 * A job's input is either a host buffer (sent inline in the message) or a file
 * descriptor (passed to the daemon with SCM_RIGHTS on the Unix socket, so the
 * data is never copied through the socket); its output is either a host buffer
 * or a file descriptor the daemon writes into.  Over TCP only inline buffers
 * are allowed, up to the server's max_inline bytes (fz_client_info()).  On
 * the Unix socket of a daemon on the GPU backend, input and output may also
 * be device memory named by a CUDA IPC handle (fz_job.in_ipc, out_ipc): the
 * daemon compresses it in place.  The library does not need CUDA for this;
 * the caller passes the handle's bytes.  fz_client_compress_device() and its
 * siblings do all of that from a plain device pointer, for every kind of
 * memory that can be shared, loading the CUDA driver at run time.
 *
 * Jobs run either synchronously (fz_client_compress(), fz_client_decompress():
 * send, then wait for this job's answer) or asynchronously
 * (fz_client_submit(), then fz_client_wait()): many jobs may be in flight on
 * one connection and their answers may come back in any order.
 *
 * Errors: every fallible call returns an int, >= 0 on success and a negative
 * fz_errno code (fz_error.h) on failure; fz_strerror() gives its text.  Codes
 * the daemon sends travel unchanged.  fz_client_errmsg() holds a one-line
 * explanation of the last failure on a handle (the server's own message when
 * the server refused).
 *
 * Threads: a handle is not internally locked.  Use one handle from one thread
 * at a time (different handles are fully independent, so one handle per thread
 * is the simple rule).  The device-buffer calls are the exception: any number
 * of threads may run them on one handle at once (see "device buffers").  No call prints, exits, aborts or raises a signal
 * (SIGPIPE is suppressed with MSG_NOSIGNAL).
 */
#ifndef FZCLIENT_H
#define FZCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "fz_error.h"
#include "fz_version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FZCLIENT_BUILDING) && defined(__GNUC__)
#define FZCLIENT_API __attribute__((visibility("default")))
#else
#define FZCLIENT_API
#endif

/* The product's version (fz_version.h, generated from CMake's project()). */
#define FZCLIENT_VERSION_MAJOR FZ_VERSION_MAJOR
#define FZCLIENT_VERSION_MINOR FZ_VERSION_MINOR
#define FZCLIENT_VERSION_PATCH FZ_VERSION_PATCH
#define FZCLIENT_VERSION_HEX                                                   \
  ((FZCLIENT_VERSION_MAJOR << 16) | (FZCLIENT_VERSION_MINOR << 8) |           \
   FZCLIENT_VERSION_PATCH)

/* The version of the library loaded at run time, as FZCLIENT_VERSION_HEX. */
FZCLIENT_API unsigned fz_client_version(void);
/* The same as "MAJOR.MINOR.PATCH"; static storage. */
FZCLIENT_API const char *fz_client_version_string(void);

/* The address used when none is given: the FZD_SOCKET environment variable
 * when it is set and not empty; else "/run/fzd/fzd.sock" if that file
 * exists (the system daemon); else "$XDG_RUNTIME_DIR/fzd/fzd.sock" if that
 * exists (fzd run by a plain user listens there); else "/run/fzd/fzd.sock".
 * The environment's string, static storage, or storage of the calling
 * thread valid until its next call. */
FZCLIENT_API const char *fz_client_default_address(void);

typedef struct fz_client fz_client;

typedef struct fz_client_opts {
  const char *token;       /* TCP token for the handshake; NULL: $FZD_TOKEN */
  const char *name;        /* client name sent in the handshake; NULL: "libfzclient" */
  int timeout_ms;          /* limit for connecting and for each synchronous
                              call; 0 or negative: no limit */
  int spin_us;             /* how long a call that waits for an answer looks
                              at the socket without sleeping first, in
                              microseconds (a GPU daemon answers a small job
                              in tens of them, and waking a sleeping thread
                              costs several); 0: $FZD_CLIENT_SPIN_US, else
                              FZ_CLIENT_SPIN_US_DEFAULT against a GPU
                              daemon and none against a CPU daemon, whose
                              workers need the cores; negative: never */
} fz_client_opts;

/* The spin of fz_client_opts against a GPU daemon when neither it nor
 * $FZD_CLIENT_SPIN_US says: about the time a GPU daemon takes for a 64 MiB job, so a thread that
 * waits for one is not asleep when its answer comes (a thread that slept
 * longer wakes slower: 21 us of a 64 MiB job's round trip went there on
 * the H200 machine, 6 us with the spin). */
#define FZ_CLIENT_SPIN_US_DEFAULT 250

/* Fills o with the defaults (all NULL, no time limit). */
FZCLIENT_API void fz_client_opts_init(fz_client_opts *o);

/* Connects to the daemon at address and performs the handshake.  Addresses:
 * "unix:PATH", "tcp:HOST:PORT" (HOST may be a name, an IPv4 address or an
 * IPv6 address in brackets), or a plain path (a Unix socket).  NULL means
 * fz_client_default_address().  On nodes with one fzd per GPU an address
 * may name the daemon by the caller's node-local rank: "%l" is replaced by
 * the first of OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID,
 * PMIX_LOCAL_RANK, PMI_LOCAL_RANK that is set, modulo FZD_DAEMONS_PER_NODE
 * when that is set ("unix:/run/fzd/gpu%l.sock"), and "%%" by "%"; FZ_EINVAL
 * when the address has "%l" and none is set.  opts may be NULL.  On success *out is a new
 * handle to release with fz_client_close().  Errors: FZ_EINVAL for a malformed
 * address, FZ_ECONNREFUSED when nothing listens, FZ_EAUTH for a refused token,
 * FZ_EVERSION for a daemon of another protocol version, FZ_ETIMEDOUT.  When
 * errmsg is not NULL it receives a one-line explanation of a failure. */
FZCLIENT_API int fz_client_connect(fz_client **out, const char *address,
                                   const fz_client_opts *opts, char *errmsg,
                                   size_t errmsg_len);

/* Closes the connection and frees the handle.  Jobs still in flight are
 * abandoned (the daemon cancels them); their output buffers are no longer
 * touched once this returns.  NULL is a harmless no-op. */
FZCLIENT_API void fz_client_close(fz_client *c);

/* A one-line explanation of the last failure on this handle; "" when none.
 * Valid until the next call on the handle. */
FZCLIENT_API const char *fz_client_errmsg(const fz_client *c);

/* ---- what the server said about itself ------------------------------------ */

typedef enum fz_transport { FZ_TRANSPORT_UNIX = 1, FZ_TRANSPORT_TCP = 2 } fz_transport;

typedef struct fz_server_info {
  char server[64];         /* "fzd 0.2.0" */
  char backend[16];        /* "cpu" or "gpu" */
  char device[128];
  uint64_t max_message;    /* bytes of one message the server accepts */
  uint64_t max_inline;     /* bytes of inline data in one job */
  int64_t pid;
  int protocol;            /* the protocol version agreed on */
  fz_transport transport;
} fz_server_info;

/* The handshake answer of this connection.  Never fails on a valid handle. */
FZCLIENT_API int fz_client_info(const fz_client *c, fz_server_info *info);

/* ---- jobs ------------------------------------------------------------------ */

typedef enum fz_op { FZ_OP_COMPRESS = 1, FZ_OP_DECOMPRESS = 2 } fz_op;

#define FZ_CLIENT_MAX_DIMS 4
/* Bytes of a cudaIpcMemHandle_t. */
#define FZ_CLIENT_IPC_HANDLE_BYTES 64

/* One job.  Initialize with fz_job_init(), then set what applies. */
typedef struct fz_job {
  /* Compress only: the array's element type ("f32", "f64", "u8" .. "i64") and
   * its shape, slowest-varying dimension first (numpy's order). */
  const char *dtype;
  unsigned ndims;
  uint64_t shape[FZ_CLIENT_MAX_DIMS];
  const char *pipeline;    /* preset name or chain text; NULL: "balanced" */
  double eb;               /* error bound; 0 for lossless pipelines */
  const char *mode;        /* "abs", "rel" or "pwrel"; NULL: "rel" */
  int verify;              /* nonzero: the server reports the max error */

  /* Input: either in/in_len (sent inline), or in_fd >= 0 (Unix socket only)
   * with in_offset and in_length (0: up to the end of the file). */
  const void *in;
  size_t in_len;
  int in_fd;
  uint64_t in_offset;
  uint64_t in_length;

  /* Output: either out_fd >= 0 (Unix socket only; the daemon writes at
   * out_offset, at most out_length bytes when that is nonzero, and truncates
   * a regular file just after the data; a descriptor opened with O_APPEND is
   * refused with FZ_EINVAL, since every write would land at its end), or
   * inline.
   * Inline output lands in out/out_cap when out is not NULL (FZ_ENOSPC when it
   * does not fit), else in a buffer the library allocates (fz_result.data,
   * released with fz_client_free()).  On the Unix socket an inline result
   * that may be over the server's max_inline comes back through a memfd the
   * library passes and reads back, so the limit does not apply to it. */
  int out_fd;
  uint64_t out_offset;
  void *out;
  size_t out_cap;

  /* Device memory (Unix socket, daemon on the GPU backend): a legacy CUDA
   * IPC handle of memory from cudaMalloc, as cudaIpcGetMemHandle() filled it
   * (FZ_CLIENT_IPC_HANDLE_BYTES bytes, copied when the job is sent).  The
   * handle names the whole allocation, so in_offset / out_offset say where
   * in it the data starts; the daemon checks both ranges against the
   * allocation's size.  in_ipc replaces in/in_fd: in_length bytes at
   * in_offset (for compress 0 means what dtype and shape need; decompress
   * needs it).  out_ipc replaces the inline or descriptor output: at most
   * out_length bytes are written at out_offset, and fz_result.bytes_out says
   * how many were.  device is the UUID of the GPU holding the buffers, as
   * nvidia-smi prints it ("GPU-xxxxxxxx-...": cudaDeviceProp.uuid); the
   * daemon refuses buffers of another GPU.  The caller must have finished
   * writing the input (e.g. cudaStreamSynchronize) before submitting, and
   * may read the output once the job has completed. */
  const void *in_ipc;
  const void *out_ipc;
  uint64_t out_length;
  const char *device;

  /* Compress only: a fill value (netCDF's _FillValue: pass the variable's
   * attribute) when has_fill is nonzero.  Values equal to it come back bit
   * for bit and are left out of the value range of REL.  Last in the struct
   * so that initialisers of the fields above keep working. */
  int has_fill;
  double fill_value;
  /* The other kinds of device memory, each replacing in_ipc / out_ipc (one
   * kind per side), with the same offsets, lengths and device:
   * - VMM memory (cuMemCreate): in_vmm_fd / out_vmm_fd >= 0, the descriptor
   *   cuMemExportToShareableHandle() made with
   *   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (passed with the job; it
   *   stays the caller's), and in_vmm_size / out_vmm_size, the size given to
   *   cuMemCreate;
   * - memory of an IPC-capable pool (cudaMemPoolCreate with
   *   cudaMemHandleTypePosixFileDescriptor): in_pool_fd / out_pool_fd >= 0,
   *   the pool's cudaMemPoolExportToShareableHandle() descriptor, and
   *   in_pool_ptr / out_pool_ptr, the FZ_CLIENT_IPC_HANDLE_BYTES of
   *   cudaMemPoolExportPointer() on the allocation's base.
   * in_buffer_id / out_buffer_id (0: not sent) is the allocation's
   * CU_POINTER_ATTRIBUTE_BUFFER_ID: the daemon's import cache never serves
   * a job with an import made for another id, so memory freed and
   * allocated again at the same address is imported afresh.
   * wait_event (NULL: none) is a cudaIpcEventHandle_t of an event made with
   * cudaEventInterprocess | cudaEventDisableTiming and recorded after the
   * work that writes the input: the daemon's stream waits for it before
   * touching the job's device memory, so the caller need not synchronise
   * first.  done_event (NULL: none) is another such handle, which the
   * daemon records after the last write of the output, before it answers.
   * fz_job_init() sets the descriptors to -1 and the rest to 0 / NULL. */
  int in_vmm_fd;
  uint64_t in_vmm_size;
  int out_vmm_fd;
  uint64_t out_vmm_size;
  int in_pool_fd;
  const void *in_pool_ptr;
  int out_pool_fd;
  const void *out_pool_ptr;
  uint64_t in_buffer_id;
  uint64_t out_buffer_id;
  const void *wait_event;
  const void *done_event;
} fz_job;

/* Sets every field of j to "not given": no input, no output, in_fd and out_fd
 * -1, default pipeline and mode. */
FZCLIENT_API void fz_job_init(fz_job *j);

/* The outcome of one job. */
typedef struct fz_result {
  int status;              /* 0, or the negative code of the failure */
  char message[256];       /* explanation when status < 0; else "" */
  uint64_t bytes_in;       /* bytes the server read */
  uint64_t bytes_out;      /* bytes the server produced */
  double ratio;            /* compress: bytes_in / bytes_out */
  double eb_abs;           /* compress: absolute bound enforced */
  int has_max_error;       /* compress with verify: max_error is valid */
  double max_error;
  uint64_t time_us;        /* time the server spent on the job */
  char chain[256];         /* compress: the canonical chain that ran */
  char dtype[8];           /* decompress: element type of the array */
  unsigned ndims;          /* decompress: its shape */
  uint64_t shape[FZ_CLIENT_MAX_DIMS];
  void *data;              /* inline output (job.out or a library buffer) */
  size_t data_len;         /* its length in bytes */
  /* compress with verify: the largest |x - x'| / |x| over the finite nonzero
   * values, the error a PWREL bound (pointwise relative) is judged by; valid
   * when has_max_rel_error (a server that predates it does not send it). */
  int has_max_rel_error;
  double max_rel_error;
} fz_result;

/* ---- shared buffers ---------------------------------------------------------
 * Host memory the daemon reads and writes in place.  fz_client_buffer_alloc()
 * returns size bytes of zeroed memory backed by a sealed memfd of this handle
 * (NULL on failure; fz_client_errmsg() says why).  On the Unix socket, a job
 * whose `in` (in_len bytes) lies inside a shared buffer sends the buffer's
 * descriptor and the offset instead of the bytes, and a job whose `out`
 * (out_cap bytes) lies inside one has the daemon write the result there:
 * fz_result.data then points at `out`.  Over TCP they act as ordinary memory.
 * Do not write an input region, or touch an output region, while its job is
 * in flight.  fz_client_buffer_free() takes the pointer the allocation
 * returned; fz_client_close() frees the buffers still allocated.  The daemon
 * keeps its mapping per connection, so the pages live until both ends let
 * go. */
FZCLIENT_API void *fz_client_buffer_alloc(fz_client *c, size_t size);
FZCLIENT_API void fz_client_buffer_free(fz_client *c, void *p);

/* Runs one job and waits for its answer (other jobs in flight on the handle
 * keep their answers for fz_client_wait()).  Returns res->status, which is
 * also the server's error for a refused job.  res->data, when the library
 * allocated it, belongs to the caller: fz_client_free(res->data). */
FZCLIENT_API int fz_client_compress(fz_client *c, const fz_job *job,
                                    fz_result *res);
FZCLIENT_API int fz_client_decompress(fz_client *c, const fz_job *job,
                                      fz_result *res);

/* Called by fz_client_wait() for a job submitted with a callback.  res and
 * its library-allocated data belong to the callee only during the call;
 * keep res->data by setting it to NULL before returning. */
typedef void (*fz_done_cb)(fz_client *c, uint64_t id, void *user,
                           fz_result *res);

/* Sends one job and returns without waiting; *id (optional) receives the
 * job's id.  The input buffer may be reused as soon as this returns; job.out,
 * when given, must stay valid until the job completes.  When cb is NULL the
 * completion is returned by fz_client_wait(); otherwise fz_client_wait() calls
 * cb instead.  Errors here are about sending (the job is then not in flight);
 * the server's verdict comes with the completion. */
FZCLIENT_API int fz_client_submit(fz_client *c, fz_op op, const fz_job *job,
                                  fz_done_cb cb, void *user, uint64_t *id);

/* A completion of a job submitted without callback. */
typedef struct fz_completion {
  uint64_t id;
  fz_op op;
  void *user;
  fz_result result;
} fz_completion;

/* Waits up to timeout_ms (negative: no limit, 0: only what is already here)
 * for completions.  Calls the callback of every callback job that completes;
 * returns 1 as soon as a job without callback completes (then stored in
 * *done; done may be NULL to drop it), 0 when the time ran out or no job is
 * left in flight.  When the connection fails, every job in flight completes
 * with the failure's code (FZ_ECONNRESET, FZ_EPROTO...) in result.status. */
FZCLIENT_API int fz_client_wait(fz_client *c, int timeout_ms,
                                fz_completion *done);

/* Number of jobs submitted and not yet returned or called back. */
FZCLIENT_API unsigned fz_client_pending(const fz_client *c);

/* The connection's descriptor, readable when an answer arrives: for an event
 * loop that calls fz_client_wait(c, 0, ...) then.  Do not read or close it. */
FZCLIENT_API int fz_client_fd(const fz_client *c);

/* Releases a buffer the library allocated (fz_result.data).  NULL is a
 * harmless no-op. */
FZCLIENT_API void fz_client_free(void *p);

/* ---- device buffers ----------------------------------------------------------
 * Plain CUDA device pointers, compressed in place by a daemon on the GPU
 * backend, over the Unix socket.  The library finds the allocation each
 * pointer lies in (its base, size and CU_POINTER_ATTRIBUTE_BUFFER_ID), its
 * kind, and the GPU's UUID, exports the allocation once and sends the export
 * with the offset:
 *   - cudaMalloc / cuMemAlloc memory: a legacy CUDA IPC handle;
 *   - cuMemCreate memory made with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
 *     in requestedHandleTypes: a POSIX descriptor (SCM_RIGHTS);
 *   - memory of a pool made with cudaMemHandleTypePosixFileDescriptor
 *     (cudaMallocFromPoolAsync): the pool's descriptor and the pointer's
 *     export data.
 * Managed memory, memory of a pool that cannot export (cudaMallocAsync
 * from the device's default pool) and VMM memory made without POSIX
 * descriptors cannot be shared with another process: FZ_EINVAL, with a
 * message naming what to allocate instead.
 *
 * The library does not link CUDA: it loads the driver (libcuda.so.1) at the
 * first device call; without it every device call fails with FZ_ENOGPU and
 * a message naming libcuda.so.1.  Driver calls are made in the context of
 * the memory (the calling thread's current context, else the device's
 * primary context, which the handle retains until it closes).
 *
 * Synchronisation: with stream == NULL the caller promises that the input
 * is written and visible (its stream synchronised) before the call, as for
 * in_ipc.  With a stream (a CUstream or cudaStream_t, also
 * cudaStreamPerThread), the library records an interprocess event on it
 * and the daemon waits for that event on its own stream before reading, so
 * the caller need not synchronise: work enqueued on the stream before the
 * call is done before the daemon reads.  When a synchronous call returns,
 * the output is written, and the stream is ordered after the daemon's
 * writes (it waits on a second event the daemon recorded).
 *
 * Exports are cached per handle and allocation (keyed by base address and
 * buffer id, so memory freed and allocated again at the same address is
 * exported anew); the daemon keeps its imports per connection.  Call
 * fz_client_release_device() before freeing memory the handle has sent, so
 * that the daemon unmaps it and the library closes its export (a VMM or
 * pool descriptor keeps the memory alive while it is open); closing the
 * handle does both for every allocation.
 *
 * Threads: unlike the rest of the API, the calls of this section may be
 * made on one handle from any number of threads at once (the handle locks
 * what they share; their jobs are in flight together).  Other calls on the
 * handle, fz_client_wait() included, must not run at the same time as
 * them.  With several threads, fz_client_errmsg() may hold another
 * thread's failure: read fz_result.message instead. */

/* Compresses in_len bytes at the device pointer d_in (job's dtype, ndims,
 * shape, pipeline, eb, mode and verify are read; its buffer fields are
 * ignored) into device memory at d_out, at most out_cap bytes.  Waits for
 * the answer; res->bytes_out is the archive's size, res->data stays NULL.
 * stream: see above (NULL: none).  Returns res->status.  Errors before
 * anything is sent: FZ_EINVAL (a NULL pointer, a zero length, a range past
 * its allocation, overlapping input and output, buffers of two GPUs, or
 * memory that cannot be exported: the message says which),
 * FZ_ETRANSPORT (TCP), FZ_ENOGPU (no driver), FZ_ECUDA (a driver call
 * failed; its error name is in the message).  From the daemon: FZ_ENOSPC
 * with the size needed when out_cap is too small (nothing is written),
 * FZ_ENOGPU from a daemon serving another GPU or the CPU backend, and the
 * errors of fz_client_compress(). */
FZCLIENT_API int fz_client_compress_device(fz_client *c, const fz_job *job,
                                           const void *d_in, size_t in_len,
                                           void *d_out, size_t out_cap,
                                           void *stream, fz_result *res);

/* Decompresses the archive of arc_len bytes at d_arc into device memory at
 * d_out (at most out_cap bytes); res->bytes_out, dtype, ndims and shape
 * describe the array.  Otherwise as fz_client_compress_device(). */
FZCLIENT_API int fz_client_decompress_device(fz_client *c, const void *d_arc,
                                             size_t arc_len, void *d_out,
                                             size_t out_cap, void *stream,
                                             fz_result *res);

/* The asynchronous form of both: sends the job (op FZ_OP_COMPRESS with job
 * as above, or FZ_OP_DECOMPRESS, where job may be NULL) and returns; the
 * completion comes from fz_client_wait() or cb, as for fz_client_submit().
 * With a stream, the daemon waits for the work enqueued on it before the
 * call; later work on the stream is not ordered after the daemon's writes:
 * enqueue what reads d_out after the completion.  The device memory must
 * stay allocated until the job completes. */
FZCLIENT_API int fz_client_submit_device(fz_client *c, fz_op op, const fz_job *job,
                                         const void *d_in, size_t in_len,
                                         void *d_out, size_t out_cap, void *stream,
                                         fz_done_cb cb, void *user, uint64_t *id);

/* Forgets the export of the allocation holding d_ptr and asks the daemon to
 * drop its import of it (method "release"; a daemon that predates it is not
 * asked, quietly).  d_ptr may already be freed: the library looks it up in
 * its own cache, not in the driver.  d_ptr NULL: every allocation this
 * handle has sent.  A pointer the handle never sent is a harmless no-op.
 * Returns 0 or the error of the release call (FZ_ECONNRESET...); the
 * library's own export is forgotten either way.  Needs no driver when
 * nothing was exported. */
FZCLIENT_API int fz_client_release_device(fz_client *c, const void *d_ptr);

/* ---- service calls ---------------------------------------------------------- */

/* Round trip with the server; *server_ns (optional) receives its monotonic
 * clock. */
FZCLIENT_API int fz_client_ping(fz_client *c, uint64_t *server_ns);

typedef struct fz_server_status {
  char server[64];
  char backend[16];
  char device[128];
  double uptime_s;
  uint64_t workers;
  uint64_t connections;
  uint64_t queue_depth;
  uint64_t queue_capacity;
  uint64_t jobs_done;
  uint64_t jobs_failed;
} fz_server_status;

FZCLIENT_API int fz_client_status(fz_client *c, fz_server_status *st);

typedef struct fz_op_stats {
  uint64_t count;
  uint64_t bytes_in;
  uint64_t bytes_out;
  uint64_t time_us;
  /* Where the jobs' time went inside the daemon, summed over them in
   * microseconds: parse (the read of a request to its queueing), queue
   * (waiting for a worker), worker (the worker's whole run, of which
   * time_us is the backend's part) and reply (the run's end to the reply's
   * write).  Divided by count, and set beside a client's own round trips,
   * they say how much of a job is the daemon's and how much the socket's.
   * 0 from a daemon that does not say. */
  uint64_t parse_us;
  uint64_t queue_us;
  uint64_t worker_us;
  uint64_t reply_us;
} fz_op_stats;

typedef struct fz_server_stats {
  uint64_t jobs_done;
  uint64_t jobs_failed;
  uint64_t jobs_canceled;
  uint64_t busy_rejections;
  uint64_t bytes_in;
  uint64_t bytes_out;
  fz_op_stats compress;
  fz_op_stats decompress;
  /* The daemon's plan cache: jobs that found their plan ready, plans made
   * (each the first job of a shape), plans dropped to make room or to give
   * memory back, and plans held now.  0 from a daemon that does not say. */
  uint64_t plan_hits;
  uint64_t plans_created;
  uint64_t plans_dropped;
  uint64_t plans_held;
  /* The bytes the held plans take, the budget they are kept under
   * (plan_cache_bytes; 0: none), and the plans that did not fit it and were
   * dropped after their one job. */
  uint64_t plan_bytes;
  uint64_t plan_budget;
  uint64_t plans_transient;
  /* The GPU backend's run-time kernel compiler: has_jit is nonzero when the
   * daemon reports it (never on the CPU backend). */
  int has_jit;
  uint64_t jit_mem_hits;
  uint64_t jit_disk_hits;
  uint64_t jit_misses;
  uint64_t jit_compiles;
  uint64_t jit_compile_failures;
  uint64_t jit_compile_ms;
  uint64_t jit_disk_writes;
  uint64_t jit_disk_rejected;
  uint64_t jit_disk_evicted;
  uint64_t jit_disk_bytes;
} fz_server_stats;

FZCLIENT_API int fz_client_stats(fz_client *c, fz_server_stats *st);

/* One plan for the daemon to prepare ("warm"): the parameters of the
 * compressions it will serve.  Initialize to zero, then set what applies. */
typedef struct fz_warm_plan {
  const char *pipeline;    /* preset name or chain text; NULL: "balanced" */
  const char *dtype;       /* "f32", ...; required */
  unsigned ndims;
  uint64_t shape[FZ_CLIENT_MAX_DIMS];
  double eb;               /* error bound; 0: none (lossless pipelines) */
  const char *mode;        /* "abs", "rel" or "pwrel"; NULL: "rel" */
} fz_warm_plan;

typedef struct fz_warm_result {
  int status;              /* 0, or the plan's error code (message says why) */
  char message[512];
  char chain[256];         /* the canonical chain of the plan */
  int cached;              /* nonzero: the daemon held the plan already */
  double ms;               /* time to prepare and check it */
} fz_warm_result;

/* The most plans one fz_client_warm() may ask for. */
#define FZ_CLIENT_WARM_MAX 16

/* Asks the daemon to prepare n plans (1 to FZ_CLIENT_WARM_MAX) and check
 * each against its CPU engine, as it does for its "warm" setting at start;
 * results[i] says how plans[i] went.  Returns 0 when the daemon answered
 * (each entry's own status may still be an error), or the request's error
 * (FZ_EPARAMS for a bad count, FZ_EMETHOD from a daemon without "warm").
 * It waits for every plan: a large shape takes as long as a job of it. */
FZCLIENT_API int fz_client_warm(fz_client *c, const fz_warm_plan *plans, size_t n,
                                fz_warm_result *results);

typedef struct fz_preset_info {
  char name[32];
  char chain[256];
  char description[160];
} fz_preset_info;

/* Fills up to cap presets; *count receives how many the server has (which may
 * be more than cap). */
FZCLIENT_API int fz_client_presets(fz_client *c, fz_preset_info *presets,
                                   size_t cap, size_t *count);

/* ---- detector frames ------------------------------------------------------------
 * Batches of HDF5 filter 32008 chunks (bitshuffle with LZ4 or zstd; one
 * chunk a frame) decoded by the daemon into the pixels above a cut or into
 * dense frames (methods "frames" and "frames_setup", docs/protocol.md). */

/* A mask and/or a sparse matrix (CSR) the daemon keeps for this handle's
 * connection, for frames of npixels pixels.  mask: npixels bytes, nonzero =
 * the pixel is used, or NULL.  A matrix (rows > 0): indptr holds rows + 1
 * rising entries from 0, indices and weights indptr[rows] entries each,
 * weights f32, or i32 when weights_i32 is nonzero (exact int64 sums). */
typedef struct fz_frames_setup_args {
  uint64_t npixels;
  const uint8_t *mask;
  size_t rows;
  const uint64_t *indptr;
  const uint32_t *indices;
  const void *weights;
  int weights_i32;
} fz_frames_setup_args;

/* Uploads a setup once; *id names it in later fz_client_frames() calls of
 * this handle, until the handle closes.  Errors: FZ_ESIZE, FZ_EINVAL for a
 * malformed matrix, FZ_ERANGE past the daemon's per-connection limits (8
 * setups, max_job_bytes together), FZ_ENOMEM/FZ_EBUSY from memory_limit. */
FZCLIENT_API int fz_client_frames_setup(fz_client *c, const fz_frames_setup_args *a,
                                        uint64_t *id);

/* One batch.  Chunk i is lengths[i] bytes at data + offsets[i], or, with
 * has_fd (Unix socket only), at offsets[i] of the file open on fd, which
 * the daemon reads itself (a chunk table straight from an HDF5 file: no
 * chunk byte crosses the socket; the call does not close fd).
 *
 * The results come back in the answer (inline: the default of a request
 * set to zero), or the daemon writes them into an output: with has_out_fd
 * (Unix socket only) into the file open on out_fd, or into d_out, device
 * memory of the daemon's GPU.  There they lie one frame after another in
 * batch order from out_offset (from d_out): each frame's values, its
 * indices from the next multiple of 4 bytes, its sums from the next
 * multiple of 8, the next frame from the next multiple of 8; a frame that
 * failed takes no room.  fz_frame_result's values_at, indices_at and
 * powder_at say where, from out_offset.  A file is cut after the results
 * (not a memfd sealed against growing and shrinking).  A frame that does
 * not fit the output (out_length, d_out_len, a sealed memfd) fails with
 * FZ_ENOSPC, and so does every frame after it: send the batch again from
 * the first of them.  Results into an output are not bounded by the
 * daemon's max_inline_bytes. */
typedef struct fz_frames_request {
  const char *dtype;  /* the pixels' type: "u16", "u32", "f32", ...; required */
  unsigned ndims;     /* 1 or 2 */
  uint64_t shape[2];  /* the frame's extents */
  const char *codec;  /* "lz4" (NULL) or "zstd" */
  double cut;         /* sparse: the used pixels with a value above it */
  uint64_t top_n;     /* > 0: only the top_n largest of them */
  int dense;          /* nonzero: the whole frames instead of the lists */
  uint64_t setup;     /* 0: none; else an id from fz_client_frames_setup() */
  const void *data;
  const uint64_t *offsets;
  const uint64_t *lengths;
  size_t nframes;     /* 1 to 4096 */
  int has_fd;         /* nonzero: the chunks are in fd, data is not read */
  int fd;
  /* Non-NULL: the chunks are in device memory of the daemon's GPU (GPU
   * backend, Unix socket), chunk i at d_data + offsets[i] within d_len
   * bytes, exported as fz_client_compress_device() exports its input; the
   * work that wrote them must be finished (synchronise its stream).  LZ4
   * chunks only: the GPU decodes them where they are. */
  const void *d_data;
  size_t d_len;
  /* has_out_fd nonzero: the results go into out_fd (a regular file or a
   * memfd, not opened with O_APPEND; the call does not close it) at
   * out_offset, at most out_length bytes when that is nonzero.  A flag and
   * not out_fd >= 0, since 0 is a descriptor and a request set to zero
   * asks for inline results. */
  int has_out_fd;
  int out_fd;
  uint64_t out_offset;
  uint64_t out_length;
  /* Non-NULL: the results go into device memory of the daemon's GPU (GPU
   * backend, Unix socket), at most d_out_len bytes from d_out, exported as
   * fz_client_compress_device() exports its output; on the GPU of d_data
   * when both are given, not overlapping it.  Not with has_out_fd;
   * out_offset and out_length stay 0. */
  void *d_out;
  size_t d_out_len;
} fz_frames_request;

/* The result of one frame; the arrays are malloc'd by the library and freed
 * by fz_client_frame_results_free().  With an output the arrays are there
 * and the pointers NULL. */
typedef struct fz_frame_result {
  int status;         /* 0, or this frame's error code (message says why) */
  char message[256];
  uint64_t count;     /* pixels above the cut, before top_n */
  size_t listed;      /* elements in values (and indices) */
  void *values;       /* listed pixels of the request's dtype; dense: the frame */
  uint32_t *indices;  /* their flat indices; NULL for dense frames */
  size_t rows;        /* with a setup's matrix: its rows ... */
  void *powder;       /* ... and the frame's sums, f64 (or i64 with i32 weights) */
  /* With an output: where values, indices (sparse) and the sums (with a
   * matrix) start, in bytes from out_offset (from d_out); else 0. */
  uint64_t values_at;
  uint64_t indices_at;
  uint64_t powder_at;
} fz_frame_result;

/* Decodes req->nframes chunks on the daemon; results[i] (nframes entries,
 * zeroed by the call) receives frame i.  Returns 0 when the daemon
 * answered, each frame's own status being 0 or its error (a corrupt chunk
 * fails its frame only; FZ_ENOSPC past the end of an output), or the
 * request's error: FZ_ESIZE for a chunk table past data, FZ_EINVAL for a
 * request that names two outputs, FZ_EPARAMS (an O_APPEND out_fd...),
 * FZ_EMSGSIZE when inline results pass the daemon's max_inline_bytes
 * (send fewer frames a call, or give an output), FZ_ENOMEM/FZ_EBUSY from
 * its memory_limit, FZ_ENOGPU for device memory a daemon on the CPU
 * backend (or on another GPU) cannot use, FZ_EMETHOD from a daemon
 * without frames. */
FZCLIENT_API int fz_client_frames(fz_client *c, const fz_frames_request *req,
                                  fz_frame_result *results);
/* Frees the arrays of n results (not the results themselves). */
FZCLIENT_API void fz_client_frame_results_free(fz_frame_result *results, size_t n);

/* ---- without a daemon --------------------------------------------------------
 * These read no socket and need no handle: the engine linked into the
 * library answers them. */

/* What an archive's header says (docs/format.md). */
typedef struct fz_client_archive {
  char dtype[8];           /* "f32", ... */
  unsigned ndims;
  uint64_t shape[FZ_CLIENT_MAX_DIMS]; /* slowest-varying first */
  uint64_t raw_bytes;      /* size of the decompressed array */
  uint64_t archive_bytes;  /* size of the whole archive */
  uint64_t chunks;
  double eb_abs;           /* the absolute bound enforced; 0 for lossless */
  char chain[256];         /* the canonical chain with every parameter */
} fz_client_archive;

/* Reads the header of the archive in arc[0, arc_len) into *info.  arc_len
 * must be the whole archive: the header's checksum and its chunk table are
 * checked against it, the payload is not read.  Errors: FZ_EINVAL for a NULL
 * argument, FZ_EFORMAT (not an archive), FZ_EVERSION, FZ_ETRUNC (shorter
 * than its header says), FZ_ECORRUPT (checksum or structure, or trailing
 * bytes).  (Named fz_client_archive_info because the engine's fz.h, which a
 * program may include too, already declares the type fz_archive_info.) */
FZCLIENT_API int fz_client_archive_info(const void *arc, size_t arc_len,
                                        fz_client_archive *info);

/* An upper bound on the size of the archive that compressing job would
 * produce, for any data of its dtype and shape: job's dtype, ndims, shape,
 * pipeline, eb and mode are read (a lossy pipeline needs eb > 0, as for the
 * job itself); nothing else.  Use it to size job.out or an out_fd.  Returns
 * 0 with *bound, or FZ_EINVAL (NULL argument), FZ_EDTYPE, FZ_ESHAPE,
 * FZ_EPIPELINE or FZ_EBOUND with a one-line reason in why (which may be
 * NULL). */
FZCLIENT_API int fz_client_compress_bound(const fz_job *job, uint64_t *bound,
                                          char *why, size_t why_len);

/* fz_error.h's fz_strerror() and fz_err_name() are exported by libfzclient
 * too. */

#ifdef __cplusplus
}
#endif
#endif /* FZCLIENT_H */
