/*
 * cpu.c - the CPU backend: each worker runs one job at a time with the
 * engine on one thread (a core of its own with cpu_affinity), with its plans from the one
 * plan cache (plans.h) and its input and output through jobio.c.
 *
 * Memory is bounded.  A job whose result goes to a descriptor streams
 * through its chunks a window at a time (the engine's fz_encoder and
 * fz_decoder), so it needs a few windows of memory whatever its size; only
 * inline results, which must be whole in memory anyway, are made in one
 * piece.  Before a job starts, what it will hold is reserved against
 * memory_limit: a job that does not fit now gets EBUSY, one that never can
 * gets ENOMEM, so the kernel's OOM killer never has to choose.  A worker
 * that finds the queue empty gives its large buffers back.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <linux/magic.h>
#include <string.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "budget.h"
#include "cpu.h"
#include "jobio.h"
#include "log.h"
#include "notify.h"
#include "plans.h"

/* Under AddressSanitizer or ThreadSanitizer the allocator is the
 * sanitizer's: glibc's heap is never set up, so malloc_trim() has nothing to
 * give back, and two workers calling it at once race in glibc's lazy set-up
 * and crash (seen in the ASan build as a SEGV in mtrim). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TRIM_HEAP() ((void)0)
#else
#define TRIM_HEAP() ((void)malloc_trim(0))
#endif

/* Input bytes per window of a streamed job: large enough that the system
 * calls cost nothing beside the engine, small enough that a few windows per
 * worker are nothing beside the machine. */
#define STREAM_WINDOW (16u << 20)
/* A worker's archive buffer up to this size stays allocated between jobs
 * (so the next inline job of that size finds it faulted in); a larger one
 * goes when the queue is empty. */
#define KEEP_BYTES (8u << 20)
/* Allocations from this size up are mapped on their own, so that freeing
 * them gives the memory back to the system at once (glibc would otherwise
 * raise the threshold after the first large free and keep the heap). */
#define MMAP_THRESHOLD (4 << 20)

typedef struct cpu_backend {
  fzd_plans *plans;
  fzd_budget *mem; /* memory_limit, shared with the loop and warm-up */
} cpu_backend;

typedef struct worker {
  cpu_backend *cb;
  void *arc; /* compression output, kept across jobs */
  size_t arc_cap;
} worker;

/* ---- the memory budget ---------------------------------------------------- */

/* Reserves need bytes of the budget for a job about to start. */
static int reserve_memory(cpu_backend *cb, fzd_job *job, uint64_t need) {
  uint64_t used = 0, limit = cb->mem->limit;
  int err = fzd_budget_take(cb->mem, need, &used);
  if (err == FZ_ENOMEM)
    snprintf(job->why, sizeof(job->why),
             "the job needs about %llu bytes of memory, more than memory_limit (%llu)%s",
             (unsigned long long)need, (unsigned long long)limit,
             job->out_fd < 0 ? "; pass out_fd to stream it" : "");
  else if (err == FZ_EBUSY)
    snprintf(job->why, sizeof(job->why),
             "the job needs about %llu bytes of memory and fzd holds %llu of "
             "memory_limit (%llu); retry later", (unsigned long long)need,
             (unsigned long long)used, (unsigned long long)limit);
  return err;
}

static void release_memory(cpu_backend *cb, uint64_t bytes) {
  fzd_budget_give(cb->mem, bytes);
}

/* ---- compression ---------------------------------------------------------- */

/* Folds one window's comparison into the job's. */
static void merge_compare(fzd_job *job, const fz_compare_result *cmp) {
  if (!job->has_max_error || cmp->max_abs_error > job->max_error)
    job->max_error = cmp->max_abs_error;
  if (!job->has_max_error || cmp->max_rel_error > job->max_rel_error)
    job->max_rel_error = cmp->max_rel_error;
  job->has_max_error = true;
}

static int verify_failed(fzd_job *job, int err) {
  snprintf(job->why, sizeof(job->why), "verification failed: %s", fz_strerror(err));
  return err;
}

int fzd_cpu_compress_buffer(fzd_job *job, fz_plan *plan, const void *in, void *arc, size_t cap,
                            size_t *arc_len, void *back, unsigned threads) {
  uint64_t t0 = fzd_notify_monotonic_usec();
  int err = fz_plan_compress(plan, in, job->in_len, arc, cap, arc_len);
  if (err < 0 && fz_plan_error(plan)[0])
    snprintf(job->why, sizeof(job->why), "%s", fz_plan_error(plan));
  job->time_us = fzd_notify_monotonic_usec() - t0;
  if (err < 0)
    return err;
  fz_archive_info info;
  if (fz_archive_inspect(arc, *arc_len, &info) >= 0)
    job->eb_abs = info.eb_abs;
  if (!job->verify)
    return err;
  size_t back_len = 0;
  fz_compare_result cmp;
  err = back == NULL ? FZ_ENOMEM
                     : fz_decompress(arc, *arc_len, back, job->in_len, &back_len, threads);
  if (err >= 0)
    err = fz_compare(job->params.dtype, in, back, job->in_len / fz_dtype_size(job->params.dtype),
                     &cmp);
  if (err < 0)
    return verify_failed(job, err);
  merge_compare(job, &cmp);
  return err;
}

/* The whole archive in memory: for inline results. */
static int compress_whole(worker *w, fzd_job *job, fz_plan *plan) {
  const void *in;
  int err = fzd_job_read_input(job, &in);
  if (err < 0)
    return err;
  /* The archive is written to the worker's own buffer, which stays (and
   * stays faulted in) while jobs keep coming; only its compressed bytes
   * are copied out for the reply. */
  size_t cap = fz_plan_compress_bound(plan);
  if (cap > w->arc_cap) {
    free(w->arc);
    w->arc = malloc(cap);
    w->arc_cap = w->arc != NULL ? cap : 0;
  }
  if (w->arc == NULL)
    return FZ_ENOMEM;
  void *arc = w->arc;
  size_t arc_len = 0;
  void *back = job->verify ? malloc(job->in_len ? job->in_len : 1) : NULL;
  err = fzd_cpu_compress_buffer(job, plan, in, arc, cap, &arc_len, back, 1);
  free(back);
  free(job->in_data); /* the input is no longer needed: free it early */
  job->in_data = NULL;
  if (err < 0)
    return err;
  return fzd_job_deliver_copy(job, arc, arc_len);
}

/* The window of a streamed job of `bytes` bytes: STREAM_WINDOW, or less for
 * a smaller job (whole chunks of any size either way), so that small jobs
 * take small buffers. */
static size_t window_for(uint64_t bytes) {
  uint64_t w = (bytes + FZ_CHUNK_MAX - 1) / FZ_CHUNK_MAX * FZ_CHUNK_MAX;
  return w < FZ_CHUNK_MAX ? FZ_CHUNK_MAX : w > STREAM_WINDOW ? STREAM_WINDOW : (size_t)w;
}

/* Memory a streamed compression holds: an input window (unless the input is
 * in memory), an output window, a verify window, and the encoder's table
 * (at most 4 bytes a chunk: version 3's entries). */
static uint64_t stream_compress_need(const fzd_job *job) {
  uint64_t w = window_for(job->in_len);
  return (fzd_job_input_in_memory(job) ? 0 : w) + w + (job->verify ? w : 0) +
         4 * (job->in_len / FZ_CHUNK_MIN + 1);
}

static uint64_t whole_compress_need(const fzd_job *job, const fz_plan *plan) {
  return (fzd_job_input_in_memory(job) ? 0 : job->in_len) + fz_plan_compress_bound(plan) +
         (job->verify ? job->in_len : 0);
}

/* Archive to out_fd, one window of chunks at a time: the value range first
 * when the bound needs it (a first pass over the input), then the chunks,
 * each window written at its place after the header, and the header last.
 * When the archive outgrows the room it may take, encoding goes on without
 * writing, so that the error can say how many bytes it needs. */
static int compress_stream(fzd_job *job, fz_plan *plan) {
  fz_encoder *enc = NULL;
  void *inbuf = NULL, *outbuf = NULL, *back = NULL, *hdr = NULL;
  int err = fz_encoder_create(plan, &enc);
  if (err < 0)
    return err;
  size_t window = window_for(job->in_len);
  size_t esize = fz_dtype_size(job->params.dtype);
  err = FZ_ENOMEM;
  if ((!fzd_job_input_in_memory(job) && (inbuf = malloc(window)) == NULL) ||
      (outbuf = malloc(window)) == NULL ||
      (job->verify && (back = malloc(window)) == NULL))
    goto cleanup;
  err = 0;
  uint64_t t0 = fzd_notify_monotonic_usec();
  const void *in;
  for (uint64_t off = 0; err == 0 && fz_encoder_needs_scan(enc) && off < job->in_len;
       off += window) {
    size_t len = job->in_len - off < window ? (size_t)(job->in_len - off) : window;
    if ((err = fzd_job_input_at(job, off, len, inbuf, &in)) == 0)
      err = fz_encoder_scan(enc, in, len);
  }
  job->eb_abs = fz_encoder_eb_abs(enc);
  size_t hl = fz_encoder_header_len(enc);
  uint64_t pos = hl, chunk = 0;
  bool fits = fzd_job_check_room(job, hl) == 0;
  for (uint64_t off = 0; err == 0 && off < job->in_len; off += window) {
    size_t len = job->in_len - off < window ? (size_t)(job->in_len - off) : window;
    size_t got = 0;
    if ((err = fzd_job_input_at(job, off, len, inbuf, &in)) < 0)
      break;
    if ((err = fz_encoder_encode(enc, chunk, in, len, outbuf, window, &got)) < 0) {
      if (fz_encoder_error(enc)[0])
        snprintf(job->why, sizeof(job->why), "%s", fz_encoder_error(enc));
      break;
    }
    if (job->verify) {
      fz_compare_result cmp;
      if ((err = fz_encoder_check(enc, chunk, outbuf, got, back, window)) < 0 ||
          (err = fz_compare(job->params.dtype, in, back, len / esize, &cmp)) < 0) {
        verify_failed(job, err);
        break;
      }
      merge_compare(job, &cmp);
    }
    fits = fits && fzd_job_check_room(job, pos + got) == 0;
    if (fits)
      err = fzd_job_pwrite(job, pos, outbuf, got);
    pos += got;
    chunk += (len + fz_encoder_chunk_bytes(enc) - 1) / fz_encoder_chunk_bytes(enc);
  }
  uint64_t total = 0;
  if (err == 0 && (hdr = malloc(hl)) == NULL)
    err = FZ_ENOMEM;
  if (err == 0)
    err = fz_encoder_finish(enc, hdr, hl, &total);
  if (err == 0)
    err = fzd_job_check_room(job, total); /* the message names the whole size */
  if (err == 0)
    err = fzd_job_pwrite(job, 0, hdr, hl);
  if (err == 0)
    err = fzd_job_truncate(job, total);
  job->time_us = fzd_notify_monotonic_usec() - t0;
  job->out_len = (size_t)total;

cleanup:
  free(hdr);
  free(back);
  free(outbuf);
  free(inbuf);
  fz_encoder_destroy(enc);
  return err;
}

/* Whether the job's output descriptor is a file in memory (a memfd, or a
 * file on tmpfs or hugetlbfs), whose pages fzd's writes allocate. */
static bool out_in_memory(const fzd_job *job) {
  struct statfs sf;
  if (job->out_fd < 0 || fstatfs(job->fds[job->out_fd], &sf) != 0)
    return false;
  return sf.f_type == TMPFS_MAGIC || sf.f_type == HUGETLBFS_MAGIC;
}

static int run_compress(worker *w, fzd_job *job) {
  void *p;
  fzd_plan_slot *slot;
  int err = fzd_plans_take(w->cb->plans, job, &p, &slot);
  if (err < 0) {
    fzd_plans_put(w->cb->plans, slot);
    return err;
  }
  fz_plan *plan = p;
  snprintf(job->chain, sizeof(job->chain), "%s", fz_plan_chain(plan));
  bool stream = job->out_fd >= 0;
  uint64_t need = stream ? stream_compress_need(job) : whole_compress_need(job, plan);
  if (stream && out_in_memory(job))
    need += fz_plan_compress_bound(plan); /* as for a decompress, below */
  if (job->mem_reserved)
    need = 0;
  err = reserve_memory(w->cb, job, need);
  if (err == 0) {
    err = stream ? compress_stream(job, plan) : compress_whole(w, job, plan);
    release_memory(w->cb, need);
  }
  fzd_plans_put(w->cb->plans, slot);
  return err;
}

/* ---- decompression -------------------------------------------------------- */

/* Reads and validates the archive's header (a short prefix tells its
 * length) into a decoder, before any of the payload is read. */
static int open_archive(fzd_job *job, fz_decoder **dec) {
  uint8_t prefix[FZ_ARCHIVE_PREFIX_MAX];
  size_t plen = job->in_len < sizeof prefix ? job->in_len : sizeof prefix, hl;
  const void *at;
  int err = fzd_job_input_at(job, 0, plen, prefix, &at);
  if (err < 0)
    return err;
  if ((err = fz_archive_header_len(at, plen, job->in_len, &hl)) < 0)
    return err;
  void *head = fzd_job_input_in_memory(job) ? NULL : malloc(hl);
  if (!fzd_job_input_in_memory(job) && head == NULL)
    return FZ_ENOMEM;
  if ((err = fzd_job_input_at(job, 0, hl, head, &at)) == 0)
    err = fz_decoder_create(at, hl, job->in_len, dec);
  free(head);
  return err;
}

static int decompress_whole(fzd_job *job) {
  const void *in;
  int err = fzd_job_read_input(job, &in);
  if (err < 0)
    return err;
  size_t raw = (size_t)job->info.raw_bytes;
  void *out = malloc(raw ? raw : 1);
  if (out == NULL)
    return FZ_ENOMEM;
  size_t out_len = 0;
  uint64_t t0 = fzd_notify_monotonic_usec();
  err = fz_decompress(in, job->in_len, out, raw, &out_len, 1);
  job->time_us = fzd_notify_monotonic_usec() - t0;
  free(job->in_data);
  job->in_data = NULL;
  if (err < 0) {
    free(out);
    return err;
  }
  return fzd_job_deliver(job, out, out_len);
}

/* Raw output to out_fd, one group of chunks at a time; the payload
 * checksum is checked after the last. */
static int decompress_stream(fzd_job *job, fz_decoder *dec) {
  size_t window = window_for(job->info.raw_bytes);
  void *inbuf = NULL, *outbuf = malloc(window);
  int err = 0;
  if (outbuf == NULL || (!fzd_job_input_in_memory(job) && (inbuf = malloc(window)) == NULL))
    err = FZ_ENOMEM;
  uint64_t t0 = fzd_notify_monotonic_usec(), put = 0, off;
  size_t stored, raw;
  while (err == 0 && fz_decoder_next(dec, window, &off, &stored, &raw) > 0) {
    const void *in;
    if ((err = fzd_job_input_at(job, off, stored, inbuf, &in)) < 0 ||
        (err = fz_decoder_decode(dec, in, stored, outbuf, window)) < 0 ||
        (err = fzd_job_pwrite(job, put, outbuf, raw)) < 0)
      break;
    put += raw;
  }
  if (err == 0)
    err = fz_decoder_finish(dec);
  if (err == 0)
    err = fzd_job_truncate(job, put);
  job->time_us = fzd_notify_monotonic_usec() - t0;
  job->out_len = (size_t)put;
  free(inbuf);
  free(outbuf);
  return err;
}

static int run_decompress(worker *w, fzd_job *job) {
  fz_decoder *dec = NULL;
  int err = open_archive(job, &dec);
  if (err < 0)
    return err;
  fz_decoder_info(dec, &job->info);
  uint64_t limit = job->out_fd < 0 ? job->max_inline : job->max_output;
  bool stream = job->out_fd >= 0;
  uint64_t need = 0;
  if (job->info.raw_bytes > limit) {
    snprintf(job->why, sizeof(job->why),
             "decompressed size %llu exceeds the limit of %llu bytes%s",
             (unsigned long long)job->info.raw_bytes, (unsigned long long)limit,
             job->out_fd < 0 ? " for inline results; pass out_fd" : "");
    err = FZ_EMSGSIZE;
  } else if (stream) {
    err = fzd_job_check_room(job, job->info.raw_bytes);
    uint64_t win = window_for(job->info.raw_bytes);
    need = (fzd_job_input_in_memory(job) ? 0 : win) + win +
           4 * job->info.chunks + FZ_ARCHIVE_PREFIX_MAX; /* table: u16, or u32 in v3 */
    /* A memfd (or any file in memory) that fzd fills is memory fzd makes:
     * every page it writes, charged to fzd's cgroup, whatever the request
     * weighed (two small archives used to fill 8 GB of shared memory). */
    if (out_in_memory(job))
      need += job->info.raw_bytes;
  } else {
    need = (fzd_job_input_in_memory(job) ? 0 : job->in_len) + job->info.raw_bytes;
  }
  if (job->mem_reserved)
    need = 0;
  if (err == 0 && (err = reserve_memory(w->cb, job, need)) == 0) {
    err = stream ? decompress_stream(job, dec) : decompress_whole(job);
    release_memory(w->cb, need);
  }
  fz_decoder_destroy(dec);
  return err;
}

/* A worker that finds nothing left to do gives back what the last jobs
 * grew: its archive buffer when large, and the allocator's free memory. */
static void worker_idle(void *arg) {
  worker *w = arg;
  if (w->arc_cap > KEEP_BYTES) {
    free(w->arc);
    w->arc = NULL;
    w->arc_cap = 0;
  }
  TRIM_HEAP();
}


/* ---- the backend ---------------------------------------------------------- */

static int plan_create(void *arg, const fz_params *p, void **plan, char *why, size_t why_len) {
  (void)arg;
  fz_params one = *p;
  one.threads = 1;
  return fz_plan_create(&one, (fz_plan **)plan, why, why_len);
}

static void plan_destroy(void *arg, void *plan) {
  (void)arg;
  fz_plan_destroy(plan);
}

static uint64_t plan_bytes(void *arg, const void *plan) {
  (void)arg;
  return fz_plan_workspace_bytes(plan);
}

static int worker_create(void *state, unsigned index, void **out, char *why, size_t why_len) {
  (void)index;
  cpu_backend *cb = state;
  worker *w = calloc(1, sizeof *w);
  if (w == NULL) {
    snprintf(why, why_len, "out of memory");
    return FZ_ENOMEM;
  }
  w->cb = cb;
  int err = fzd_plans_add_slots(cb->plans, 1);
  if (err < 0) {
    free(w);
    return err;
  }
  *out = w;
  return 0;
}

static void worker_destroy(void *arg) {
  worker *w = arg;
  if (w == NULL)
    return;
  free(w->arc);
  free(w);
}

static int run(void *arg, fzd_job *job) {
  worker *w = arg;
  return job->kind == FZD_JOB_COMPRESS ? run_compress(w, job) : run_decompress(w, job);
}

static void backend_destroy(void *state) {
  cpu_backend *cb = state;
  fzd_plans_destroy(cb->plans);
  free(cb);
}

int fzd_cpu_backend(unsigned plan_cache_entries, uint64_t plan_cache_bytes,
                    fzd_budget *mem, fzd_backend_ops *be) {
  cpu_backend *cb = calloc(1, sizeof *cb);
  if (cb == NULL)
    return FZ_ENOMEM;
  const fzd_plan_kind kind = {plan_create, plan_destroy, plan_bytes, cb};
  if (fzd_plans_create(&kind, plan_cache_bytes, &cb->plans) < 0 ||
      fzd_plans_add_slots(cb->plans, plan_cache_entries) < 0) {
    fzd_plans_destroy(cb->plans);
    free(cb);
    return FZ_ENOMEM;
  }
  cb->mem = mem;
  mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD);
  *be = (fzd_backend_ops){.name = "cpu", .state = cb, .worker_create = worker_create,
                      .worker_destroy = worker_destroy, .run = run, .idle = worker_idle,
                      .idle_ms = 0, .spin_us = 0, .pin_cores = false, .plans = cb->plans,
                      .jit_counts = NULL, .destroy = backend_destroy};
  return 0;
}
