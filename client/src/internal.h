/*
 * internal.h - what the files of libfzclient share and nothing else sees.
 *
 * A handle owns one non-blocking socket, a receive buffer that fills with
 * whole msgpack messages, and the table of jobs in flight.  Every answer that
 * arrives while the caller waits for something else is parked in that table
 * (fzc_dispatch) until fz_client_wait() or the synchronous call asks for it.
 */
#ifndef FZC_INTERNAL_H
#define FZC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "fzclient.h"
#include "fzp.h"

/* One job in flight, or completed and not yet handed back. */
typedef struct fzc_job {
  uint32_t msgid;
  fz_op op;
  fz_done_cb cb;
  void *user;
  void *out;        /* the caller's inline output buffer, or NULL */
  size_t out_cap;
  bool done;
  bool out_shared;  /* out lies in a shared buffer: the daemon writes it */
  int shm;          /* the handle's memfd slot holding the input, or -1 */
  int out_memfd;    /* the library's memfd the daemon writes a result into
                       that is too large to come back inline, or -1 */
  fz_result res;
} fzc_job;

/* Large inline inputs on the Unix socket are copied once into one of the
 * handle's memfds (sealed against shrinking, kept and reused) and passed as a
 * descriptor: the daemon maps them, instead of both ends copying the bytes
 * through the socket.  A slot is busy while its job is in flight. */
#define FZC_SHM_SLOTS 8
#define FZC_SHM_MIN ((size_t)256 << 10)

typedef struct fzc_shm {
  int fd;       /* -1 until first used */
  size_t size;
  void *map;    /* size bytes mapped, or NULL */
  bool busy;
} fzc_shm;

/* A shared buffer (buffers.c): a memfd sealed at its size, mapped at base. */
typedef struct fzc_buf {
  struct fzc_buf *next;
  char *base;
  size_t size;
  int fd;
} fzc_buf;

/* The shared buffer holding [p, p + len), or NULL. */
const fzc_buf *fzc_buf_find(const fz_client *c, const void *p, size_t len);
void fzc_buf_free_all(fz_client *c);

struct fz_client {
  int fd;
  fz_transport transport;
  int timeout_ms;
  int spin_us;            /* fz_client_opts.spin_us as resolved; 0: none */
  int broken;             /* 0, or the code that made the connection unusable */
  uint32_t next_msgid;
  fzp_limits limits;      /* what we accept from the server */
  fz_server_info info;

  unsigned char *rx;      /* received bytes not yet parsed */
  size_t rx_len;
  size_t rx_cap;
  size_t rx_held;         /* front bytes of the message last returned */

  fzc_job *jobs;          /* in flight or completed, in submission order */
  size_t njobs;
  size_t jobs_cap;
  fzc_shm shm[FZC_SHM_SLOTS];
  fzc_buf *bufs;          /* from fz_client_buffer_alloc() */
  struct fzc_device *dev; /* device.c: exports, events, the lock of the
                             device calls */

  char errmsg[256];
};

/* errmsg formatting; returns err so that callers can `return fzc_fail(...)`. */
int fzc_fail(fz_client *c, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* address.c: parses an address and opens a connected, non-blocking socket. */
/* Expands an address template ("%l": the node-local rank, "%%": a percent
 * sign) into out (cap bytes). */
int fzc_expand_address(const char *tmpl, char *out, size_t cap, char *why, size_t why_len);
int fzc_dial(const char *address, int timeout_ms, int *fd_out,
             fz_transport *transport, char *why, size_t why_len);

/* io.c: a deadline in CLOCK_MONOTONIC milliseconds, or -1 for none. */
int64_t fzc_deadline(int timeout_ms);
/* Sends the iovecs whole, the descriptors with the first byte.  Bytes that
 * arrive meanwhile are buffered, so a server answering while we send a large
 * message never deadlocks with us. */
int fzc_send(fz_client *c, const struct iovec *iov, int iovcnt, const int *fds,
             int nfds, int64_t deadline);
/* Receives the next whole message into msg (fzp_message_free() it).  Returns
 * 1 with a message, 0 when the deadline passed, or a negative code.  The
 * message may point into the receive buffer: it is valid until the next
 * fzc_recv() or fzc_send() on the handle. */
int fzc_recv(fz_client *c, int64_t deadline, fzp_message *msg);
/* Looks at fd for up to spin_us microseconds without sleeping (never past
 * deadline); true as soon as it is readable or has hung up. */
bool fzc_spin_readable(int fd, int spin_us, int64_t deadline);
/* Marks the connection unusable and completes every job in flight with err. */
void fzc_break(fz_client *c, int err, const char *what);

/* jobs.c: stores an answer in the job table (responses to jobs only).
 * Returns 1 when the message was a job's answer, 0 when it matched none. */
int fzc_dispatch(fz_client *c, const fzp_message *msg);
/* Marks a job answered and frees the memfd slot its input occupied. */
void fzc_job_finish(fz_client *c, fzc_job *j);
/* Fills res->status and res->message from a response's error map. */
int fzc_error_from(const fzp_message *msg, fz_result *res);

/* service.c / client.c: one request with a params map packed by packfn, and
 * its answer.  On success *msg holds the response (a result map). */
typedef void (*fzc_packfn)(msgpack_packer *pk, const void *arg);
int fzc_call(fz_client *c, const char *method, uint32_t nfields,
             fzc_packfn packfn, const void *arg, fzp_message *msg);
/* The same with descriptors sent along (SCM_RIGHTS); the params must name
 * them ("nfds"). */
int fzc_call_fds(fz_client *c, const char *method, uint32_t nfields, fzc_packfn packfn,
                 const void *arg, const int *fds, unsigned nfds, fzp_message *msg);

/* Copies a msgpack str found under key into a NUL-terminated buffer
 * (truncating); 1 found, 0 absent, negative on a wrong type. */
int fzc_get_strbuf(const msgpack_object *map, const char *key, char *buf,
                   size_t cap);

uint32_t fzc_next_msgid(fz_client *c);

/* device.c: the state of the device calls, made with the handle (no driver
 * call) and freed when it closes. */
int fzc_device_init(fz_client *c);
void fzc_device_free(fz_client *c);
/* A device buffer for a method other than compress and decompress
 * (frames): the allocation that holds [p, p + len) exported, or found in
 * the handle's cache of exports, and the keys the daemon reads it by. */
typedef struct fzc_dev_buffer {
  int kind;                 /* 1 legacy IPC, 2 VMM, 3 pool */
  unsigned char blob[64];   /* the IPC handle or the pool pointer's export */
  int fd;                   /* VMM or pool descriptor, else -1 */
  uint64_t vmm_size;        /* VMM: the allocation's size */
  uint64_t offset, length;  /* [p, p + len) from the allocation's start */
  uint64_t buffer_id;
  char uuid[64];            /* the GPU, as "GPU-..." */
} fzc_dev_buffer;
/* The input [in, in + in_len) into *din and the output [out, out +
 * out_len) into *dout, either pointer NULL when that side is not in device
 * memory (not both): both on one GPU, not overlapping.  Their descriptors
 * stay open until the next device call. */
int fzc_device_buffers(fz_client *c, const void *in, size_t in_len, fzc_dev_buffer *din,
                       const void *out, size_t out_len, fzc_dev_buffer *dout);

#endif /* FZC_INTERNAL_H */
