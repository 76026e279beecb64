/*
 * server.h - the daemon's shared state and the internal interfaces between
 * its subsystems (listener.c, conn.c, methods.c, pool.c, stats.c, main.c;
 * the backends cpu.c and gpu.c behind backend.h).
 *
 * Threads: everything here belongs to the loop thread except the job queue
 * inside fzd_pool (pool.c), which the workers share under its mutex.  Workers
 * see only fzd_job; they never touch a connection or a socket.
 */
#ifndef FZD_SERVER_H
#define FZD_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "budget.h"
#include "config.h"
#include "fdmap.h"
#include "fz.h"
#include "fzp.h"
#include "gpu.h"

#define FZD_VERSION_STRING "fzd " FZ_VERSION_STRING
#define FZD_MAX_FDS_PER_MESSAGE 16
#define FZD_MAX_FDS_QUEUED 64
#define FZD_PIPELINE_MAX 1024

typedef struct fzd_server fzd_server;
typedef struct fzd_conn fzd_conn;

/* ---- jobs (pool.c, jobio.c; run by cpu.c or gpu.c) ----------------------- */

/* FZD_JOB_WARM prepares the plans of job->warm (warm.c): the "warm"
 * method's request, or one entry of the "warm" setting at start. */
enum fzd_job_kind { FZD_JOB_COMPRESS, FZD_JOB_DECOMPRESS, FZD_JOB_WARM, FZD_JOB_FRAMES };
struct fzd_warm;
struct fzd_frames_req;

/* How one side of a job reaches device memory of the client. */
enum fzd_mem_kind { FZD_MEM_NONE, FZD_MEM_IPC, FZD_MEM_VMM, FZD_MEM_POOL };

typedef struct fzd_devbuf {
  enum fzd_mem_kind kind;
  /* IPC: the cudaIpcMemHandle_t; POOL: the pointer's cudaMemPoolPtrExportData. */
  unsigned char handle[FZD_IPC_HANDLE_BYTES];
  int fd;            /* VMM, POOL: index into the job's fds of the export */
  uint64_t vmm_size; /* VMM: the size given to cuMemCreate */
  uint64_t buffer_id; /* CU_POINTER_ATTRIBUTE_BUFFER_ID, when has_buffer_id */
  bool has_buffer_id;
} fzd_devbuf;

typedef struct fzd_job {
  struct fzd_job *next;
  fzd_conn *conn; /* opaque to workers: only the loop dereferences it */
  uint32_t msgid;
  enum fzd_job_kind kind;

  /* Request, filled by the loop. */
  fz_params params;
  char pipeline[FZD_PIPELINE_MAX];
  bool verify;
  void *in_data;      /* inline input (owned copy) or NULL */
  const void *in_ptr; /* the input inside a cached memfd mapping, or NULL */
  fzd_fdmap_entry *in_ref;
  size_t in_len;      /* bytes of input */
  int fds[FZD_MAX_FDS_PER_MESSAGE]; /* descriptors of this message, owned */
  unsigned nfds;
  int in_fd, out_fd;  /* indexes into fds, or -1 */
  uint64_t in_off, out_off;
  bool out_truncate;  /* cut out_fd after the result (a file, not a fixed-size memfd) */
  uint64_t max_inline; /* inline results larger than this fail (EMSGSIZE) */
  uint64_t max_output; /* descriptor results larger than this fail */
  /* The job's memory is reserved already (warm-up's jobs, warm.c): the
   * backend reserves nothing of memory_limit for it. */
  bool mem_reserved;
  /* Device buffers (GPU backend only): the input is in_len bytes at in_off
   * of the allocation in_dev names; the output goes to out_off of out_dev's
   * allocation, at most out_cap bytes.  in_ipc / out_ipc say that the side
   * is device memory of any kind (in_dev.kind says which).  ipc is the
   * connection's cache of imports, which outlives the job. */
  bool in_ipc, out_ipc;
  fzd_devbuf in_dev, out_dev;
  uint64_t out_cap;
  fzd_ipc_cache *ipc;
  /* IPC events (GPU backend only): fzd's stream waits for wait_event before
   * it touches the client's memory, and records done_event after its last
   * write, before the host wait that precedes the reply. */
  bool has_wait_event, has_done_event;
  unsigned char wait_event[FZD_IPC_HANDLE_BYTES];
  unsigned char done_event[FZD_IPC_HANDLE_BYTES];
  /* Bytes of reply this job may leave in its connection's output, counted
   * against the reply budgets from acceptance until the reply is packed
   * (conn.c).  Set by the loop before submitting. */
  uint64_t reply_reserve;

  /* FZD_JOB_WARM: the entries and their results (owned; warm.h). */
  struct fzd_warm *warm;
  /* FZD_JOB_FRAMES: the batch and its results (owned; frames.h). */
  struct fzd_frames_req *frames;
  /* The pool's start-up runs (fzd_pool_run): the worker marks the job done
   * here instead of handing it to the loop. */
  bool sync, sync_done;

  /* Result, filled by the worker. */
  int err;
  bool plan_hit; /* the job found its plan in the cache (plans.c) */
  char why[256];
  void *out_data; /* inline result or NULL */
  size_t out_len;
  uint64_t time_us;
  /* The job's way through fzd, monotonic nanoseconds (the stats' stages):
   * the read that completed its message, its submission to the pool, and
   * the start and end of its run on a worker. */
  uint64_t t_read, t_queued, t_start, t_end;
  double eb_abs;
  double max_error;
  double max_rel_error; /* with max_error: max |x-x'|/|x|, for PWREL */
  bool has_max_error;
  char chain[256];
  fz_archive_info info; /* decompress */
} fzd_job;

typedef struct fzd_pool fzd_pool;

/* Starts n workers of the backend (backend.h; the pool takes its state);
 * done() runs on the loop thread for every finished job, and for every job
 * fzd_pool_cancel() takes back (with err FZ_ECANCELED). */
struct fzd_backend_ops;
int fzd_pool_start(fzd_pool **out, uv_loop_t *loop, unsigned n, const struct fzd_backend_ops *be,
                   void (*done)(fzd_job *job, void *arg), void *arg);
/* Queues a job, or FZ_EBUSY when capacity jobs are already waiting. */
int fzd_pool_submit(fzd_pool *pool, fzd_job *job, uint64_t capacity);
/* Runs the jobs on the workers and waits until every one is done, on a
 * thread that is not a worker's (main.c, before the loop runs): their
 * results stay in them and done() is not called. */
void fzd_pool_run(fzd_pool *pool, fzd_job **jobs, unsigned n);
/* Takes back the jobs of conn that no worker has picked up yet. */
void fzd_pool_cancel(fzd_pool *pool, const fzd_conn *conn);
/* Whether the loop polls without sleeping (main.c's hot loop).  While it
 * does, a worker hands a finished job back without waking it (no write to
 * the async handle's eventfd) and the loop collects finished jobs itself
 * with fzd_pool_collect() on every turn; on the way out of that state the
 * loop collects once more, so no job is left for a wake-up that never
 * comes. */
void fzd_pool_set_hot(fzd_pool *pool, bool hot);
/* Runs done() for the finished jobs, if any (loop thread). */
void fzd_pool_collect(fzd_pool *pool);
size_t fzd_pool_depth(fzd_pool *pool);
/* The backend's plan cache counters (plans.h). */
struct fzd_plan_counts;
void fzd_pool_plan_counts(fzd_pool *pool, struct fzd_plan_counts *out);
/* The backend's JIT counters; false (out untouched) when it has none. */
struct fzd_jit_counts;
bool fzd_pool_jit_counts(fzd_pool *pool, struct fzd_jit_counts *out);
/* Joins the workers (the queue must be empty) and closes the async handle;
 * the pool is freed in the handle's close callback. */
void fzd_pool_stop(fzd_pool *pool);
void fzd_job_free(fzd_job *job);


/* ---- statistics (stats.c) ------------------------------------------------ */

/* Per direction: the jobs done, their bytes, the time the backends report
 * (time_us), and the sums of each stage of their way through fzd in
 * nanoseconds: parse (the read of the message to its submission), queue
 * (to a worker's start), worker (the worker's whole run: imports, events,
 * the backend, its waits) and reply (the end of the run to the reply's
 * write on the socket). */
typedef struct fzd_op_stats {
  uint64_t count, bytes_in, bytes_out, time_us;
  uint64_t parse_ns, queue_ns, worker_ns, reply_ns;
} fzd_op_stats;

typedef struct fzd_stats {
  uint64_t jobs_done, jobs_failed, jobs_canceled, busy_rejections;
  uint64_t bytes_in, bytes_out;
  uint64_t connections_total, protocol_errors;
  fzd_op_stats compress, decompress;
} fzd_stats;

void fzd_stats_job(fzd_stats *st, const fzd_job *job);
/* The stages of a job answered at t_reply (ns), after its reply went out. */
void fzd_stats_stages(fzd_stats *st, const fzd_job *job, uint64_t t_reply);
void fzd_stats_pack(fzd_server *srv, msgpack_packer *pk, uint32_t msgid);
void fzd_status_pack(fzd_server *srv, msgpack_packer *pk, uint32_t msgid);
/* The three pairs that name this fzd in hello and status replies: server
 * (version string), backend, device. */
void fzd_pack_identity(const fzd_server *srv, msgpack_packer *pk);

/* ---- server ------------------------------------------------------------- */

typedef struct fzd_listener {
  uv_poll_t poll;
  uv_timer_t pause; /* restarts accepting after the table was full */
  int fd;
  bool tcp;
  bool active;
} fzd_listener;

struct fzd_server {
  uv_loop_t *loop;
  fzd_config cfg;
  const char *config_path; /* NULL: defaults only */
  const char *override_socket;
  const char *override_backend;
  const char *override_gpu;
  fzd_listener unix_l, tcp_l;
  /* A descriptor held open so that, with the table full, a connection can
   * still be accepted, answered EBUSY and closed (listener.c); -1 when it
   * is spent. */
  int reserve_fd;
  /* Descriptors passed by clients that fzd holds (waiting for their message
   * or owned by a job), and the cap in force: max_fds_total, or half the
   * RLIMIT_NOFILE soft limit when that setting is 0 (fzd_server_fd_cap). */
  uint64_t fds_passed;
  uint64_t fds_cap;
  /* memory_limit: the workers' job buffers, warm-up, and the input
   * buffers of connections beyond their first FZD_IN_BASE bytes. */
  fzd_budget mem;
  /* What the input buffers of all connections hold of mem; at most half of
   * its limit, so that messages still arriving never take the room of the
   * jobs (conn.c). */
  uint64_t in_reserved;
  /* Bytes of replies not yet sent plus bytes reserved for the inline
   * replies of jobs in flight, all connections (max_reply_bytes_total). */
  uint64_t reply_bytes;
  /* Open connections by kind: Unix (max_connections), TCP
   * (max_tcp_connections) and TCP not yet past hello (max_unauthenticated). */
  uint64_t nconns_unix, nconns_tcp, nconns_unauth;
  /* Open Unix connections per peer uid (max_connections_per_user): a short
   * list, one entry per user with a connection. */
  struct fzd_uid_count {
    uint32_t uid;
    uint64_t n;
  } *uids;
  size_t nuids, uids_cap;
  /* The Unix socket's path: socket_path, or where a plain fzd of a user
   * without /run/fzd listens (listener.c).  "" with socket activation. */
  char unix_path[FZD_CONFIG_STR];
  bool unlink_socket; /* we created unix_path */
  char tcp_bound[FZD_CONFIG_STR + 16]; /* "127.0.0.1:7878" once listening */
  fzd_pool *pool;
  unsigned workers;
  const char *backend_name;
  const char *device_name;
  fzd_gpu *gpu; /* the GPU backend's context, or NULL on the CPU backend */
  fzd_conn *conns; /* list of open connections */
  uint64_t nconns;
  uint64_t next_conn_id;
  uint64_t inflight; /* accepted jobs not yet answered, all connections */
  bool draining;
  uint64_t start_usec;
  fzd_stats stats;
  uv_signal_t sig_term, sig_int, sig_hup;
  uv_timer_t watchdog, drain_timer;
  uv_timer_t sweep; /* handshake_timeout_ms, run by conn.c while a connection is new */
  bool watchdog_on, drain_timer_on, sweep_on;
  /* With busy_poll_us (by default on the GPU backend) the loop polls
   * without sleeping while jobs are in flight and a moment after
   * (fzd_server_busy), so that neither a finished job nor the client's next
   * request waits for it to wake. */
  uv_idle_t hot;
  bool hot_init, hot_on;
  uint64_t hot_until_ns;
  uint64_t hot_tail_ns; /* how long it polls after the last job; 0: never */
};

/* listener.c */
int fzd_listeners_open(fzd_server *srv);
void fzd_listeners_close(fzd_server *srv);
/* Opens the reserve descriptor again after it was spent (main.c calls it at
 * start). */
void fzd_reserve_fd_refill(fzd_server *srv);

/* conn.c */
void fzd_conn_accept(fzd_server *srv, int fd, bool tcp);
/* Answers a connection that will not be served with one error response
 * (msgid 0), best effort and without blocking, and closes fd. */
void fzd_refuse_fd(int fd, int code, const char *text);
/* FZ_EBUSY when a reply of bytes more would take the replies owed by all
 * connections past max_reply_bytes_total (one job is always let through
 * when nothing is owed), else 0. */
int fzd_conn_reply_room(fzd_conn *c, uint64_t bytes);
/* Logs a job that failed or was refused: connection, peer credentials,
 * method, msgid and error (rate-limited). */
void fzd_conn_log_job_error(fzd_conn *c, const char *method, uint32_t msgid,
                            int code, const char *text);
/* Packs into the connection's output, flushing as the socket allows. */
msgpack_packer *fzd_conn_packer(fzd_conn *c);
void fzd_conn_reply_error(fzd_conn *c, uint32_t msgid, int code, const char *fmt,
                          ...) __attribute__((format(printf, 4, 5)));
void fzd_conn_job_done(fzd_job *job, void *arg);
/* Stops reading every connection and closes those with nothing owed. */
void fzd_conns_drain(fzd_server *srv);
void fzd_conns_close_all(fzd_server *srv);
bool fzd_conn_is_tcp(const fzd_conn *c);
bool fzd_conn_greeted(const fzd_conn *c);
void fzd_conn_set_greeted(fzd_conn *c);
/* Takes n descriptors from the front of the connection's queue into fds;
 * FZ_EPROTO when fewer than n have arrived. */
int fzd_conn_take_fds(fzd_conn *c, unsigned n, int *fds);
/* When the read that brought the message being dispatched began (uv_hrtime
 * nanoseconds, CLOCK_MONOTONIC). */
uint64_t fzd_conn_read_ns(const fzd_conn *c);
/* Holds a parsed job whose reply would take what c owes past
 * max_reply_bytes_per_connection (while c owes anything at all): c is not
 * read, and the job is submitted (fzd_submit_parsed) once the client has
 * read enough of its replies.  True when it took the job. */
bool fzd_conn_park(fzd_conn *c, fzd_job *job);
/* Counts a job accepted for c (the connection is kept alive until done). */
void fzd_conn_job_accepted(fzd_conn *c, fzd_job *job);
/* The connection asks to be closed once its output is flushed. */
void fzd_conn_close_after_flush(fzd_conn *c);
/* The connection's cache of imported CUDA IPC buffers, made on first use;
 * NULL on the CPU backend or without memory. */
fzd_ipc_cache *fzd_conn_ipc(fzd_conn *c);
/* The connection's cache of sealed-memfd mappings (fdmap.h); NULL when no
 * memory is left for one, and inputs are then read with pread. */
fzd_fdmap *fzd_conn_fdmap(fzd_conn *c);
/* The connection's "frames_setup" entries (frames.c), freed with it. */
struct fzd_frames_setups **fzd_conn_frames(fzd_conn *c);

/* methods.c: handles one parsed request; packs a finished job's reply. */
void fzd_dispatch(fzd_server *srv, fzd_conn *c, const fzp_message *msg);
/* Queues a parsed compress or decompress job (msgid, reply_reserve and
 * t_read set), or answers EBUSY when the reply budget of all connections
 * or the queue is full. */
void fzd_submit_parsed(fzd_server *srv, fzd_conn *c, fzd_job *job);
void fzd_job_reply(fzd_conn *c, const fzd_job *job);
/* A device-memory input ("in_ipc", "in_vmm_fd" or "in_pool_fd", with
 * "in_offset", "in_length" and "device", as compress takes it) into the
 * job's in_dev, in_off and in_len: 1 when given, 0 when absent, or the
 * error code with why set. */
int fzd_parse_device_input(fzd_server *srv, fzd_conn *c, const msgpack_object *p, fzd_job *job,
                           char *why, size_t why_len);
/* The output as compress takes it: "out_fd" (+ "out_offset", "out_length")
 * or a device output ("out_ipc", "out_vmm_fd" or "out_pool_fd", with
 * "out_offset", "out_length" and "device") into the job's out_fd or
 * out_dev, out_off, out_cap and out_truncate; nothing given: inline.  0,
 * or the error code with why set. */
int fzd_parse_output(fzd_server *srv, fzd_conn *c, const msgpack_object *p, fzd_job *job,
                     char *why, size_t why_len);

/* main.c: called when a connection or a job goes away during a drain. */
void fzd_server_check_drained(fzd_server *srv);
/* main.c: a job was accepted or finished (see fzd_server.hot). */
void fzd_server_busy(fzd_server *srv);
/* main.c: sets srv->fds_cap from the config and RLIMIT_NOFILE. */
void fzd_server_fd_cap(fzd_server *srv);

#endif
