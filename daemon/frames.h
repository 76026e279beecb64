/*
 * frames.h - the "frames" method (frames.c): a batch of detector chunks
 * (HDF5 filter 32008, bitshuffle with LZ4 or zstd) decoded by the CPU
 * engine (fz_frames.h) into the pixels above a cut or into dense frames.
 * docs/protocol.md, "frames", is the contract.
 */
#ifndef FZD_FRAMES_H
#define FZD_FRAMES_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "server.h"

/* Most chunks one request may carry. */
#define FZD_FRAMES_MAX 4096
/* Most "frames_setup" entries one connection may hold. */
#define FZD_FRAMES_SETUPS_MAX 8

struct fzd_frames_setups;

typedef struct fzd_frame_result {
  int status;
  char why[128];
  uint64_t count; /* pixels above the cut (sparse), listed count below */
  size_t listed;
  /* The arrays point into block, one allocation laid out as the frame is
   * in an output (fzd_frames_open); with an output they are written and
   * freed by fzd_frames_emit, and NULL after. */
  uint8_t *block;
  void *values;      /* sparse: listed values; dense: the frame */
  uint32_t *indices; /* sparse only */
  void *powder;      /* rows f64 or i64 sums, with a setup's matrix */
  /* With an output: where the arrays went, from out_offset. */
  uint64_t values_at, indices_at, powder_at;
} fzd_frame_result;

/* One "frames_setup" entry: a mask and/or a matrix for frames of npixels
 * pixels, checked when it was set up (lengths agree with nnz, indptr
 * rising, indices below npixels). */
typedef struct fzd_frames_setup {
  uint64_t id;
  uint64_t serial; /* unique in the process: what a backend caches by */
  uint64_t npixels;
  uint8_t *mask; /* npixels bytes or NULL */
  bool has_csr;
  size_t nrows;
  uint64_t *indptr;
  uint32_t *indices;
  float *w_f32;
  int32_t *w_i32;
  uint64_t bytes; /* held of memory_limit */
} fzd_frames_setup;

struct fzd_frames_req {
  const fzd_frames_setup *setup; /* owned by the connection, which outlives the job */
  fzd_budget *mem;
  uint64_t reserved; /* bytes of mem held by the job */
  fz_dtype dtype;
  size_t esize;
  uint64_t npixels;
  int codec; /* fz_bslz4_codec */
  double cut;
  uint64_t top_n;
  bool dense;
  uint64_t max_inline;
  uint8_t *data; /* the chunks, one copy; NULL until read from fd */
  int fd;        /* in_fd: the file the chunk table points into, or -1 */
  uint64_t *offsets, *lengths;
  size_t n;
  size_t rows; /* the setup matrix's rows, 0 without one */
  fzd_frame_result *res;
  /* With an output (out_fd or a device output): the frames' results go
   * there one after another as fzd_frames_emit takes them, written by put
   * when a backend sets it (device memory), else with fzd_job_pwrite.
   * put returns 0 or a negative code with job->why set. */
  bool to_output;
  int (*put)(void *ctx, fzd_job *job, uint64_t off, const void *data, size_t len);
  void *put_ctx;
  uint64_t out_room;  /* bytes the output may take (fzd_job_out_room) */
  uint64_t out_end;   /* the end of the last frame written */
  size_t full_from;   /* the first frame that did not fit, or n */
  uint64_t full_need; /* the bytes that frame needed */
};

/* The loop thread's half: validates the params, copies the chunks and
 * queues the job (or replies with the error). */
void fzd_frames_method(fzd_server *srv, fzd_conn *c, const fzp_message *msg);
/* The worker's half on the CPU engine: runs the whole batch; 0 or a
 * negative code. */
int fzd_frames_job_run(fzd_job *job);

/* The parts a backend's own decoder (gpu.c) runs a batch with, in this
 * order.  fzd_frames_start reserves memory_limit for the chunks (when
 * keep_chunks; a backend with its own staging reads them with
 * fzd_frames_read) and scratch bytes, and allocates the results; then,
 * for each frame in order, fzd_frames_open (and its arrays filled) or
 * fzd_frames_fail, then fzd_frames_emit; fzd_frames_end records the time
 * and sizes, applies max_inline_bytes to inline results and cuts a file
 * output after the results. */
int fzd_frames_start(fzd_job *job, bool keep_chunks, uint64_t scratch);
/* Chunks first .. first + k - 1 into dst, chunk first + j at dst + at[j]:
 * a batch of several megabytes from a descriptor on a few threads. */
int fzd_frames_read(fzd_job *job, size_t first, size_t k, uint8_t *dst, const uint64_t *at);
/* The same in two halves, so that a backend decodes one batch while the
 * next is read: fzd_frames_read_start reads a small batch (or chunks in
 * memory) at once and hands the runs of a large one to the daemon's
 * readers (threads made on first use and kept: as many as the machine has
 * cores, from 2 to FZD_FRAMES_READERS, shared by every worker);
 * fzd_frames_read_wait waits for them (always called after a start) and
 * returns 0 or the first error.  dst, at and the reader stay put until
 * then.  When the caller sets on_read before the start, each chunk, once
 * read, is handed to it on the thread that read it (a backend sends it
 * on to the device while the others are still read); a negative return
 * stops the calls of that thread, not its reading, and leaves all_sent
 * false after the wait. */
#define FZD_FRAMES_READERS 8
typedef int (*fzd_frames_on_read)(void *arg, const uint8_t *p, size_t len);
typedef struct fzd_frames_read_run {
  const struct fzd_frames_req *r;
  size_t first, end; /* chunks [first, end) of the request */
  uint8_t *dst;
  const uint64_t *at; /* chunk first + j goes to dst + at[j] */
  fzd_frames_on_read on_read;
  void *on_read_arg;
  bool sent; /* every chunk's on_read returned 0 */
  int rc;
  char why[128];
  struct fzd_frames_read_run *next; /* in the readers' queue */
  bool done;                        /* read by a reader */
} fzd_frames_read_run;
typedef struct fzd_frames_reader {
  fzd_frames_on_read on_read; /* NULL: none */
  void *on_read_arg;
  bool all_sent; /* after the wait: every on_read returned 0 */
  fzd_frames_read_run runs[FZD_FRAMES_READERS];
  bool queued; /* the runs handed to the readers (all or none) */
  size_t nt;
} fzd_frames_reader;
void fzd_frames_read_start(fzd_job *job, size_t first, size_t k, uint8_t *dst, const uint64_t *at,
                           fzd_frames_reader *rd);
int fzd_frames_read_wait(fzd_job *job, fzd_frames_reader *rd);
/* Frame i's result arrays for `listed` elements (and its product), held
 * of memory_limit; 0, or a negative code that has failed the frame. */
int fzd_frames_open(struct fzd_frames_req *r, size_t i, uint64_t count, size_t listed);
/* Frame i failed with rc: why (NULL: the code's text) goes in the reply. */
void fzd_frames_fail(struct fzd_frames_req *r, size_t i, int rc, const char *why);
/* Frame i is final: with an output its results are written after the
 * previous frame's and freed (a frame that does not fit, and every frame
 * after it, fails with FZ_ENOSPC); inline, nothing. */
void fzd_frames_emit(fzd_job *job, size_t i);
int fzd_frames_end(fzd_job *job, uint64_t t0);

#ifdef FZD_HAVE_FRAMES
#include "fz_frames.h"

/* The engine's parameters of a request (its setup's mask and matrix; csr
 * holds the matrix's view for as long as the parameters are used). */
fz_frames_params fzd_frames_params_of(const struct fzd_frames_req *r, fz_frames_csr *csr);

/* The CPU engine for a request's frames, with one frame of scratch; frame
 * i decoded from its chunk into r->res[i] (fzd_frames_open or
 * fzd_frames_fail).  fzd_frames_job_run runs every frame so; the GPU
 * backend runs the frames its decoder does not take. */
typedef struct fzd_frames_cpu {
  fz_frames *f;
  size_t cap; /* listed pixels a frame at most */
  void *values;
  uint32_t *indices;
  void *powder;
} fzd_frames_cpu;
int fzd_frames_cpu_open(const struct fzd_frames_req *r, fzd_frames_cpu *c, char *why,
                        size_t why_len);
void fzd_frames_cpu_frame(struct fzd_frames_req *r, size_t i, fzd_frames_cpu *c,
                          const uint8_t *chunk, size_t len);
void fzd_frames_cpu_close(fzd_frames_cpu *c);
#endif
/* Packs the reply of a job that succeeded. */
void fzd_frames_reply(fzd_conn *c, const fzd_job *job);
/* "frames_setup": a mask and a matrix kept by the connection under an id
 * that later "frames" calls name. */
void fzd_frames_setup_method(fzd_server *srv, fzd_conn *c, const fzp_message *msg);
/* Frees a connection's entries and gives their memory back. */
void fzd_frames_setups_free(struct fzd_frames_setups *s);
/* Frees the request and results a job holds. */
void fzd_frames_free(struct fzd_frames_req *r);

#endif
