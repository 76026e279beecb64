/*
 * jobs.c - the worker pool: a bounded FIFO of jobs shared by N worker
 * threads, and the way finished jobs get back to the loop (a list plus one
 * uv_async_t, which coalesces wake-ups).
 *
 * A worker runs one job at a time with the engine on one thread, reading its
 * input from the inline copy, from the connection's mapping of a sealed
 * memfd (fdmap.c, set up by the loop thread), or with pread from any other
 * passed descriptor, and writing the result inline or to the output
 * descriptor.  Each worker keeps its own small LRU of finalized plans, keyed
 * by the pipeline's canonical text, since a plan serves one thread at a time
 * and the next job is very often the same shape.  On the GPU backend a
 * worker hands its jobs to gpu.c with its own stream and buffers; the
 * descriptor and delivery helpers here serve both backends.
 *
 * Memory is bounded on the CPU backend.  A job whose result goes to a
 * descriptor streams through its chunks a window at a time (the engine's
 * fz_encoder and fz_decoder), so it needs a few windows of memory whatever
 * its size; only inline results, which must be whole in memory anyway, are
 * made in one piece.  Before a job starts, what it will hold is reserved
 * against memory_limit: a job that does not fit now gets EBUSY, one that
 * never can gets ENOMEM, so the kernel's OOM killer never has to choose.  A
 * worker that finds the queue empty gives its large buffers back.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "server.h"

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

typedef struct plan_entry {
  fz_params key;
  char pipeline[FZD_PIPELINE_MAX];
  fz_plan *plan;
  uint64_t used;
} plan_entry;

typedef struct worker {
  fzd_pool *pool;
  pthread_t thread;
  unsigned index;
  plan_entry *plans;
  uint64_t tick;
  fzd_gpu_worker *gpu; /* the GPU backend's state of this worker, or NULL */
  void *arc;           /* compression output, kept across jobs */
  size_t arc_cap;
} worker;

struct fzd_pool {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  fzd_job *head, *tail; /* waiting */
  size_t depth;
  _Atomic size_t queued; /* depth, for workers that look without the lock */
  bool stop;
  fzd_job *done_head, *done_tail;
  uv_async_t async;
  unsigned nworkers;
  unsigned plan_cache_entries;
  worker *workers;
  void (*done)(fzd_job *job, void *arg);
  void *done_arg;
  uint64_t mem_limit; /* bytes the running jobs may reserve (CPU backend) */
  uint64_t mem_used;  /* reserved by running jobs, under mu */
};

static uint64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void fzd_job_free(fzd_job *job) {
  if (job == NULL)
    return;
  for (unsigned i = 0; i < job->nfds; i++)
    close(job->fds[i]);
  fzd_fdmap_release(job->in_ref);
  free(job->in_data);
  free(job->out_data);
  free(job);
}

/* ---- plans ---------------------------------------------------------------- */

/* Whether two pipeline texts name the same chain: the same text, or the
 * same canonical text.  Jobs reach the caches with canonical text already
 * (canonical_pipeline), so the parse only runs for an entry keyed by other
 * text (a GPU worker's warm-up plan, keyed by the default ""). */
static bool same_pipeline(const char *a, const char *b) {
  if (strcmp(a, b) == 0)
    return true;
  char ca[FZD_PIPELINE_MAX], cb[FZD_PIPELINE_MAX];
  return fz_pipeline_canonical(a[0] ? a : NULL, ca, sizeof ca, NULL, 0) == 0 &&
         fz_pipeline_canonical(b[0] ? b : NULL, cb, sizeof cb, NULL, 0) == 0 &&
         strcmp(ca, cb) == 0;
}

bool fzd_job_same_plan(const fz_params *a, const char *pipeline,
                       const fzd_job *job) {
  const fz_params *b = &job->params;
  if (a->dtype != b->dtype || a->ndims != b->ndims || a->eb_mode != b->eb_mode ||
      memcmp(&a->eb, &b->eb, sizeof(a->eb)) != 0 || a->has_fill != b->has_fill ||
      (a->has_fill && memcmp(&a->fill_value, &b->fill_value, sizeof(a->fill_value)) != 0))
    return false;
  for (unsigned i = 0; i < a->ndims; i++)
    if (a->dims[i] != b->dims[i])
      return false;
  return same_pipeline(pipeline, job->pipeline);
}

/* Rewrites the job's pipeline text as its canonical chain, so that a
 * preset and the chain it stands for (or two spellings of one chain) find
 * the same cached plan, on either backend.  A text that does not parse is
 * left alone: plan creation reports its error. */
static void canonical_pipeline(fzd_job *job) {
  char canon[FZD_PIPELINE_MAX];
  if (fz_pipeline_canonical(job->pipeline[0] ? job->pipeline : NULL, canon,
                            sizeof canon, NULL, 0) == 0)
    memcpy(job->pipeline, canon, sizeof canon);
}

/* A plan for the job's parameters: from the cache, or created (and cached,
 * evicting the least recently used).  *owned tells the caller to destroy it
 * when the cache is off. */
static int get_plan(worker *w, fzd_job *job, fz_plan **plan, bool *owned) {
  unsigned n = w->pool->plan_cache_entries;
  *owned = false;
  for (unsigned i = 0; i < n; i++)
    if (w->plans[i].plan != NULL && fzd_job_same_plan(&w->plans[i].key, w->plans[i].pipeline, job)) {
      w->plans[i].used = ++w->tick;
      *plan = w->plans[i].plan;
      return 0;
    }
  fz_params p = job->params;
  p.pipeline = job->pipeline[0] ? job->pipeline : NULL;
  p.threads = 1;
  int err = fz_plan_create(&p, plan, job->why, sizeof(job->why));
  if (err < 0)
    return err;
  fzd_debug("worker %u: plan created for %s", w->index, fz_plan_chain(*plan));
  if (n == 0) {
    *owned = true;
    return 0;
  }
  unsigned victim = 0;
  for (unsigned i = 1; i < n; i++)
    if (w->plans[i].used < w->plans[victim].used)
      victim = i;
  plan_entry *e = &w->plans[victim];
  fz_plan_destroy(e->plan);
  e->plan = *plan;
  e->key = job->params;
  memcpy(e->pipeline, job->pipeline, sizeof(e->pipeline));
  e->used = ++w->tick;
  return 0;
}

/* ---- descriptors ---------------------------------------------------------- */

static bool input_in_memory(const fzd_job *job) {
  return job->in_ptr != NULL || job->in_fd < 0;
}

/* Reads len bytes at offset off of the job's input (relative to in_off) of
 * in_fd into dst. */
static int pread_range(fzd_job *job, uint64_t off, size_t len, void *dst) {
  int fd = job->fds[job->in_fd];
  size_t got = 0;
  while (got < len) {
    ssize_t n = pread(fd, (char *)dst + got, len - got,
                      (off_t)(job->in_off + off + got));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      snprintf(job->why, sizeof(job->why), "reading in_fd at offset %llu: %s",
               (unsigned long long)(job->in_off + off + got),
               n < 0 ? strerror(errno) : "the file is shorter than it was");
      return FZ_EIO;
    }
    got += (size_t)n;
  }
  return 0;
}

/* Points *at to len bytes at off of the job's input: in place when the
 * input is in memory, else read into buf (which holds len bytes). */
static int input_at(fzd_job *job, uint64_t off, size_t len, void *buf, const void **at) {
  if (input_in_memory(job)) {
    const char *base = job->in_ptr != NULL ? job->in_ptr : job->in_data;
    *at = base + off;
    return 0;
  }
  *at = buf;
  return pread_range(job, off, len, buf);
}

static int read_input(fzd_job *job, const void **in) {
  if (input_in_memory(job))
    return input_at(job, 0, job->in_len, NULL, in);
  job->in_data = malloc(job->in_len ? job->in_len : 1);
  if (job->in_data == NULL)
    return FZ_ENOMEM;
  *in = job->in_data;
  return pread_range(job, 0, job->in_len, job->in_data);
}

int fzd_job_read_into(fzd_job *job, void *dst) {
  const void *src = job->in_ptr != NULL ? job->in_ptr : job->in_data;
  if (!input_in_memory(job))
    return pread_range(job, 0, job->in_len, dst);
  if (job->in_len > 0)
    memcpy(dst, src, job->in_len);
  return 0;
}

static int inline_too_large(fzd_job *job, size_t len) {
  if (len <= job->max_inline)
    return 0;
  snprintf(job->why, sizeof(job->why),
           "result of %zu bytes exceeds max_inline_bytes (%llu); pass out_fd", len,
           (unsigned long long)job->max_inline);
  return FZ_EMSGSIZE;
}

/* FZ_ENOSPC, with the size needed, when a result of len bytes does not fit
 * where out_fd may take it: within out_length when the client gave one, and
 * within a fixed-size (sealed) memfd, which cannot grow. */
static int check_room(fzd_job *job, uint64_t len) {
  if (job->out_cap && len > job->out_cap) {
    snprintf(job->why, sizeof(job->why),
             "the result of %llu bytes does not fit out_length (%llu bytes)",
             (unsigned long long)len, (unsigned long long)job->out_cap);
    return FZ_ENOSPC;
  }
  struct stat st;
  if (job->out_truncate || fstat(job->fds[job->out_fd], &st) < 0)
    return 0;
  uint64_t size = (uint64_t)st.st_size;
  if (job->out_off > size || len > size - job->out_off) {
    snprintf(job->why, sizeof(job->why),
             "the result needs %llu bytes at out_offset %llu but out_fd is a "
             "fixed-size memfd of %llu bytes: make it at least %llu bytes",
             (unsigned long long)len, (unsigned long long)job->out_off,
             (unsigned long long)size, (unsigned long long)(job->out_off + len));
    return FZ_ENOSPC;
  }
  return 0;
}

/* Writes len bytes at offset off of the output (relative to out_off). */
static int pwrite_range(fzd_job *job, uint64_t off, const void *data, size_t len) {
  int fd = job->fds[job->out_fd];
  size_t put = 0;
  while (put < len) {
    ssize_t n = pwrite(fd, (const char *)data + put, len - put,
                       (off_t)(job->out_off + off + put));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      snprintf(job->why, sizeof(job->why), "writing out_fd: %s",
               n < 0 ? strerror(errno) : "no progress");
      return n < 0 && errno == ENOSPC ? FZ_ENOSPC : FZ_EIO;
    }
    put += (size_t)n;
  }
  return 0;
}

/* Cuts a file after the len bytes of result (not a fixed-size memfd). */
static int truncate_output(fzd_job *job, uint64_t len) {
  if (job->out_truncate && ftruncate(job->fds[job->out_fd], (off_t)(job->out_off + len)) < 0) {
    snprintf(job->why, sizeof(job->why), "truncating out_fd: %s", strerror(errno));
    return FZ_EIO;
  }
  return 0;
}

/* Writes len bytes at out_off of out_fd and truncates a file after them. */
static int write_output(fzd_job *job, const void *data, size_t len) {
  int err = check_room(job, len);
  if (err == 0)
    err = pwrite_range(job, 0, data, len);
  if (err == 0)
    err = truncate_output(job, len);
  job->out_len = len;
  return err;
}

/* Delivers len bytes of result, taking data: to out_fd, or kept for the
 * inline reply. */
static int deliver(fzd_job *job, void *data, size_t len) {
  if (job->out_fd < 0) {
    int err = inline_too_large(job, len);
    if (err < 0) {
      free(data);
      return err;
    }
    job->out_data = data;
    job->out_len = len;
    return 0;
  }
  int err = write_output(job, data, len);
  free(data);
  return err;
}

int fzd_job_deliver_copy(fzd_job *job, const void *data, size_t len) {
  if (job->out_fd >= 0)
    return write_output(job, data, len);
  int err = inline_too_large(job, len);
  if (err < 0)
    return err;
  void *copy = malloc(len ? len : 1);
  if (copy == NULL)
    return FZ_ENOMEM;
  memcpy(copy, data, len);
  job->out_data = copy;
  job->out_len = len;
  return 0;
}

/* ---- the memory budget ---------------------------------------------------- */

/* Reserves need bytes of the budget for a job about to start. */
static int reserve_memory(fzd_pool *pool, fzd_job *job, uint64_t need) {
  int err = 0;
  pthread_mutex_lock(&pool->mu);
  uint64_t limit = pool->mem_limit, used = pool->mem_used;
  if (need > limit)
    err = FZ_ENOMEM;
  else if (need > limit - used)
    err = FZ_EBUSY;
  else
    pool->mem_used += need;
  pthread_mutex_unlock(&pool->mu);
  if (err == FZ_ENOMEM)
    snprintf(job->why, sizeof(job->why),
             "the job needs about %llu bytes of memory, more than memory_limit (%llu)%s",
             (unsigned long long)need, (unsigned long long)limit,
             job->out_fd < 0 ? "; pass out_fd to stream it" : "");
  else if (err == FZ_EBUSY)
    snprintf(job->why, sizeof(job->why),
             "the job needs about %llu bytes of memory and running jobs hold %llu of "
             "memory_limit (%llu); retry later", (unsigned long long)need,
             (unsigned long long)used, (unsigned long long)limit);
  return err;
}

static void release_memory(fzd_pool *pool, uint64_t bytes) {
  pthread_mutex_lock(&pool->mu);
  pool->mem_used -= bytes;
  pthread_mutex_unlock(&pool->mu);
}

/* The cgroup v2 memory.max of this process, or UINT64_MAX. */
static uint64_t cgroup_limit(void) {
  char line[512], path[600];
  uint64_t limit = UINT64_MAX;
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (f == NULL)
    return limit;
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "0::", 3) != 0)
      continue;
    line[strcspn(line, "\n")] = '\0';
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", line + 3);
    FILE *m = fopen(path, "r");
    unsigned long long v;
    if (m != NULL && fscanf(m, "%llu", &v) == 1)
      limit = v;
    if (m != NULL)
      fclose(m);
  }
  fclose(f);
  return limit;
}

/* memory_limit 0: three quarters of the physical memory, or of the
 * cgroup's limit when that is lower, leaving room for the daemon itself,
 * the page cache and the clients. */
static uint64_t derived_memory_limit(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t phys = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_C(1) << 32;
  uint64_t cg = cgroup_limit();
  if (cg < phys)
    phys = cg;
  return phys / 4 * 3;
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

/* The whole archive in memory: for inline results. */
static int compress_whole(worker *w, fzd_job *job, fz_plan *plan) {
  const void *in;
  int err = read_input(job, &in);
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
  uint64_t t0 = now_us();
  if ((err = fz_plan_compress(plan, in, job->in_len, arc, cap, &arc_len)) < 0 &&
      fz_plan_error(plan)[0])
    snprintf(job->why, sizeof(job->why), "%s", fz_plan_error(plan));
  job->time_us = now_us() - t0;
  if (err >= 0) {
    fz_archive_info info;
    if (fz_archive_inspect(arc, arc_len, &info) >= 0)
      job->eb_abs = info.eb_abs;
  }
  if (err >= 0 && job->verify) {
    void *back = malloc(job->in_len ? job->in_len : 1);
    size_t back_len = 0;
    fz_compare_result cmp;
    err = back == NULL ? FZ_ENOMEM
                       : fz_decompress(arc, arc_len, back, job->in_len, &back_len, 1);
    if (err >= 0)
      err = fz_compare(job->params.dtype, in, back,
                       job->in_len / fz_dtype_size(job->params.dtype), &cmp);
    if (err >= 0)
      merge_compare(job, &cmp);
    else
      verify_failed(job, err);
    free(back);
  }
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
 * in memory), an output window, a verify window, and the encoder's table. */
static uint64_t stream_compress_need(const fzd_job *job) {
  uint64_t w = window_for(job->in_len);
  return (input_in_memory(job) ? 0 : w) + w + (job->verify ? w : 0) +
         2 * (job->in_len / FZ_CHUNK_MIN + 1);
}

static uint64_t whole_compress_need(const fzd_job *job, const fz_plan *plan) {
  return (input_in_memory(job) ? 0 : job->in_len) + fz_plan_compress_bound(plan) +
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
  if ((!input_in_memory(job) && (inbuf = malloc(window)) == NULL) ||
      (outbuf = malloc(window)) == NULL ||
      (job->verify && (back = malloc(window)) == NULL))
    goto cleanup;
  err = 0;
  uint64_t t0 = now_us();
  const void *in;
  for (uint64_t off = 0; err == 0 && fz_encoder_needs_scan(enc) && off < job->in_len;
       off += window) {
    size_t len = job->in_len - off < window ? (size_t)(job->in_len - off) : window;
    if ((err = input_at(job, off, len, inbuf, &in)) == 0)
      err = fz_encoder_scan(enc, in, len);
  }
  job->eb_abs = fz_encoder_eb_abs(enc);
  size_t hl = fz_encoder_header_len(enc);
  uint64_t pos = hl, chunk = 0;
  bool fits = check_room(job, hl) == 0;
  for (uint64_t off = 0; err == 0 && off < job->in_len; off += window) {
    size_t len = job->in_len - off < window ? (size_t)(job->in_len - off) : window;
    size_t got = 0;
    if ((err = input_at(job, off, len, inbuf, &in)) < 0)
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
    fits = fits && check_room(job, pos + got) == 0;
    if (fits)
      err = pwrite_range(job, pos, outbuf, got);
    pos += got;
    chunk += (len + fz_encoder_chunk_bytes(enc) - 1) / fz_encoder_chunk_bytes(enc);
  }
  uint64_t total = 0;
  if (err == 0 && (hdr = malloc(hl)) == NULL)
    err = FZ_ENOMEM;
  if (err == 0)
    err = fz_encoder_finish(enc, hdr, hl, &total);
  if (err == 0)
    err = check_room(job, total); /* the message names the whole size */
  if (err == 0)
    err = pwrite_range(job, 0, hdr, hl);
  if (err == 0)
    err = truncate_output(job, total);
  job->time_us = now_us() - t0;
  job->out_len = (size_t)total;

cleanup:
  free(hdr);
  free(back);
  free(outbuf);
  free(inbuf);
  fz_encoder_destroy(enc);
  return err;
}

static int run_compress(worker *w, fzd_job *job) {
  fz_plan *plan;
  bool owned;
  int err = get_plan(w, job, &plan, &owned);
  if (err < 0)
    return err;
  snprintf(job->chain, sizeof(job->chain), "%s", fz_plan_chain(plan));
  bool stream = job->out_fd >= 0;
  uint64_t need = stream ? stream_compress_need(job) : whole_compress_need(job, plan);
  err = reserve_memory(w->pool, job, need);
  if (err == 0) {
    err = stream ? compress_stream(job, plan) : compress_whole(w, job, plan);
    release_memory(w->pool, need);
  }
  if (owned)
    fz_plan_destroy(plan);
  return err;
}

/* ---- decompression -------------------------------------------------------- */

/* Reads and validates the archive's header (a short prefix tells its
 * length) into a decoder, before any of the payload is read. */
static int open_archive(fzd_job *job, fz_decoder **dec) {
  uint8_t prefix[FZ_ARCHIVE_PREFIX_MAX];
  size_t plen = job->in_len < sizeof prefix ? job->in_len : sizeof prefix, hl;
  const void *at;
  int err = input_at(job, 0, plen, prefix, &at);
  if (err < 0)
    return err;
  if ((err = fz_archive_header_len(at, plen, job->in_len, &hl)) < 0)
    return err;
  void *head = input_in_memory(job) ? NULL : malloc(hl);
  if (!input_in_memory(job) && head == NULL)
    return FZ_ENOMEM;
  if ((err = input_at(job, 0, hl, head, &at)) == 0)
    err = fz_decoder_create(at, hl, job->in_len, dec);
  free(head);
  return err;
}

static int decompress_whole(fzd_job *job) {
  const void *in;
  int err = read_input(job, &in);
  if (err < 0)
    return err;
  size_t raw = (size_t)job->info.raw_bytes;
  void *out = malloc(raw ? raw : 1);
  if (out == NULL)
    return FZ_ENOMEM;
  size_t out_len = 0;
  uint64_t t0 = now_us();
  err = fz_decompress(in, job->in_len, out, raw, &out_len, 1);
  job->time_us = now_us() - t0;
  free(job->in_data);
  job->in_data = NULL;
  if (err < 0) {
    free(out);
    return err;
  }
  return deliver(job, out, out_len);
}

/* Raw output to out_fd, one group of chunks at a time; the payload
 * checksum is checked after the last. */
static int decompress_stream(fzd_job *job, fz_decoder *dec) {
  size_t window = window_for(job->info.raw_bytes);
  void *inbuf = NULL, *outbuf = malloc(window);
  int err = 0;
  if (outbuf == NULL || (!input_in_memory(job) && (inbuf = malloc(window)) == NULL))
    err = FZ_ENOMEM;
  uint64_t t0 = now_us(), put = 0, off;
  size_t stored, raw;
  while (err == 0 && fz_decoder_next(dec, window, &off, &stored, &raw) > 0) {
    const void *in;
    if ((err = input_at(job, off, stored, inbuf, &in)) < 0 ||
        (err = fz_decoder_decode(dec, in, stored, outbuf, window)) < 0 ||
        (err = pwrite_range(job, put, outbuf, raw)) < 0)
      break;
    put += raw;
  }
  if (err == 0)
    err = fz_decoder_finish(dec);
  if (err == 0)
    err = truncate_output(job, put);
  job->time_us = now_us() - t0;
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
    err = check_room(job, job->info.raw_bytes);
    uint64_t win = window_for(job->info.raw_bytes);
    need = (input_in_memory(job) ? 0 : win) + win +
           2 * job->info.chunks + FZ_ARCHIVE_PREFIX_MAX;
  } else {
    need = (input_in_memory(job) ? 0 : job->in_len) + job->info.raw_bytes;
  }
  if (err == 0 && (err = reserve_memory(w->pool, job, need)) == 0) {
    err = stream ? decompress_stream(job, dec) : decompress_whole(job);
    release_memory(w->pool, need);
  }
  fz_decoder_destroy(dec);
  return err;
}

/* A worker that finds nothing left to do gives back what the last jobs
 * grew: its archive buffer when large, and the allocator's free memory. */
static void worker_idle(worker *w) {
  if (w->arc_cap > KEEP_BYTES) {
    free(w->arc);
    w->arc = NULL;
    w->arc_cap = 0;
  }
  malloc_trim(0);
}

/* ---- threads -------------------------------------------------------------- */

/* On the CPU backend each worker owns a core: pinned, its caches stay warm
 * with its plans and chunks instead of following it around the machine.
 * Only the cores this process may use count; with more workers than cores
 * they share them in turn.  A failure to pin is harmless. */
static void pin_to_core(unsigned index) {
  cpu_set_t allowed, one;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
    return;
  int count = CPU_COUNT(&allowed);
  if (count <= 1)
    return;
  int want = (int)(index % (unsigned)count);
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
    if (!CPU_ISSET(cpu, &allowed) || want-- > 0)
      continue;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    return;
  }
}

/* A GPU worker looks at the queue for a while before it sleeps: a client's
 * next job often arrives within tens of microseconds of the answer to its
 * last, and waking a sleeping thread costs about as much again, which on
 * the GPU is the time of a whole small job.  (CPU workers own their cores
 * and sleep at once.) */
#define GPU_SPIN_US 250

static void spin_for_work(fzd_pool *pool) {
  uint64_t until = now_us() + GPU_SPIN_US;
  while (atomic_load_explicit(&pool->queued, memory_order_relaxed) == 0 && now_us() < until)
    sched_yield();
}

/* Waits (pool->mu held) for a job or the stop.  A GPU worker idle for
 * IDLE_TRIM_MS gives back its staging and device buffers once, and the
 * context's pool the memory no one uses, so that a daemon that ran one
 * large job does not keep its memory reserved for ever. */
#define IDLE_TRIM_MS 1000

static void idle_wait(worker *w) {
  fzd_pool *pool = w->pool;
  bool trimmed = w->gpu == NULL;
  while (pool->head == NULL && !pool->stop) {
    if (trimmed) {
      pthread_cond_wait(&pool->cv, &pool->mu);
      continue;
    }
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += IDLE_TRIM_MS / 1000;
    until.tv_nsec += (long)(IDLE_TRIM_MS % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    if (pthread_cond_timedwait(&pool->cv, &pool->mu, &until) == ETIMEDOUT &&
        pool->head == NULL) {
      pthread_mutex_unlock(&pool->mu);
      fzd_gpu_worker_idle(w->gpu);
      pthread_mutex_lock(&pool->mu);
      trimmed = true;
    }
  }
}

static void *worker_main(void *arg) {
  worker *w = arg;
  fzd_pool *pool = w->pool;
  if (w->gpu == NULL)
    pin_to_core(w->index);
  for (;;) {
    if (w->gpu != NULL)
      spin_for_work(pool);
    pthread_mutex_lock(&pool->mu);
    idle_wait(w);
    if (pool->head == NULL) {
      pthread_mutex_unlock(&pool->mu);
      break;
    }
    fzd_job *job = pool->head;
    pool->head = job->next;
    if (pool->head == NULL)
      pool->tail = NULL;
    atomic_store_explicit(&pool->queued, --pool->depth, memory_order_relaxed);
    pthread_mutex_unlock(&pool->mu);

    job->next = NULL;
    job->why[0] = '\0';
    if (job->kind == FZD_JOB_COMPRESS)
      canonical_pipeline(job);
    if (w->gpu != NULL)
      job->err = fzd_gpu_run(w->gpu, job);
    else
      job->err = job->kind == FZD_JOB_COMPRESS ? run_compress(w, job)
                                               : run_decompress(w, job);
    if (job->err > 0)
      job->err = 0;

    pthread_mutex_lock(&pool->mu);
    if (pool->done_tail)
      pool->done_tail->next = job;
    else
      pool->done_head = job;
    pool->done_tail = job;
    bool idle = pool->head == NULL;
    pthread_mutex_unlock(&pool->mu);
    uv_async_send(&pool->async);
    if (idle && w->gpu == NULL)
      worker_idle(w);
  }
  for (unsigned i = 0; w->plans != NULL && i < pool->plan_cache_entries; i++)
    fz_plan_destroy(w->plans[i].plan);
  free(w->arc);
  return NULL;
}

static void on_async(uv_async_t *h) {
  fzd_pool *pool = h->data;
  pthread_mutex_lock(&pool->mu);
  fzd_job *list = pool->done_head;
  pool->done_head = pool->done_tail = NULL;
  pthread_mutex_unlock(&pool->mu);
  while (list != NULL) {
    fzd_job *next = list->next;
    list->next = NULL;
    pool->done(list, pool->done_arg);
    list = next;
  }
}

int fzd_pool_start(fzd_pool **out, uv_loop_t *loop, unsigned n,
                   unsigned plan_cache_entries, uint64_t memory_limit, fzd_gpu *gpu,
                   void (*done)(fzd_job *job, void *arg), void *arg) {
  fzd_pool *pool = calloc(1, sizeof(*pool));
  if (pool == NULL)
    return FZ_ENOMEM;
  pool->nworkers = 0;
  pool->plan_cache_entries = plan_cache_entries;
  pool->mem_limit = memory_limit ? memory_limit : derived_memory_limit();
  if (gpu == NULL)
    fzd_info("memory_limit: %llu bytes for the running jobs' buffers",
             (unsigned long long)pool->mem_limit);
  mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD);
  pool->done = done;
  pool->done_arg = arg;
  pool->workers = calloc(n, sizeof(worker));
  if (pool->workers == NULL)
    goto err_pool;
  pthread_mutex_init(&pool->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&pool->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (uv_async_init(loop, &pool->async, on_async) < 0)
    goto err_mutex;
  pool->async.data = pool;
  int fail = FZ_ENOMEM;
  for (unsigned i = 0; i < n; i++) {
    worker *w = &pool->workers[i];
    w->pool = pool;
    w->index = i;
    if (gpu != NULL) {
      char why[256] = "";
      int err = fzd_gpu_worker_create(gpu, i, plan_cache_entries, &w->gpu, why, sizeof why);
      if (err < 0) {
        fzd_err("GPU worker %u: %s", i, why[0] ? why : fz_strerror(err));
        fail = err;
        break;
      }
    } else if (plan_cache_entries > 0) {
      w->plans = calloc(plan_cache_entries, sizeof(plan_entry));
      if (w->plans == NULL)
        break;
    }
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
      free(w->plans);
      w->plans = NULL;
      fzd_gpu_worker_destroy(w->gpu);
      w->gpu = NULL;
      break;
    }
    pool->nworkers++;
  }
  if (pool->nworkers < n) {
    fzd_err("started only %u of %u workers", pool->nworkers, n);
    fzd_pool_stop(pool);
    return fail;
  }
  *out = pool;
  return 0;

err_mutex:
  pthread_cond_destroy(&pool->cv);
  pthread_mutex_destroy(&pool->mu);
  free(pool->workers);
err_pool:
  free(pool);
  return FZ_ENOMEM;
}

int fzd_pool_submit(fzd_pool *pool, fzd_job *job, uint64_t capacity) {
  pthread_mutex_lock(&pool->mu);
  if (pool->depth >= capacity) {
    pthread_mutex_unlock(&pool->mu);
    return FZ_EBUSY;
  }
  job->next = NULL;
  if (pool->tail)
    pool->tail->next = job;
  else
    pool->head = job;
  pool->tail = job;
  atomic_store_explicit(&pool->queued, ++pool->depth, memory_order_relaxed);
  pthread_cond_signal(&pool->cv);
  pthread_mutex_unlock(&pool->mu);
  return 0;
}

void fzd_pool_cancel(fzd_pool *pool, const fzd_conn *conn) {
  fzd_job *taken = NULL, **tail = &taken;
  pthread_mutex_lock(&pool->mu);
  fzd_job **pp = &pool->head;
  pool->tail = NULL;
  while (*pp != NULL) {
    fzd_job *j = *pp;
    if (j->conn == conn) {
      *pp = j->next;
      j->next = NULL;
      *tail = j;
      tail = &j->next;
      atomic_store_explicit(&pool->queued, --pool->depth, memory_order_relaxed);
    } else {
      pool->tail = j;
      pp = &j->next;
    }
  }
  pthread_mutex_unlock(&pool->mu);
  while (taken != NULL) {
    fzd_job *next = taken->next;
    taken->next = NULL;
    taken->err = FZ_ECANCELED;
    pool->done(taken, pool->done_arg);
    taken = next;
  }
}

size_t fzd_pool_depth(fzd_pool *pool) {
  pthread_mutex_lock(&pool->mu);
  size_t d = pool->depth;
  pthread_mutex_unlock(&pool->mu);
  return d;
}

static void on_async_closed(uv_handle_t *h) {
  fzd_pool *pool = h->data;
  pthread_cond_destroy(&pool->cv);
  pthread_mutex_destroy(&pool->mu);
  free(pool->workers);
  free(pool);
}

void fzd_pool_stop(fzd_pool *pool) {
  pthread_mutex_lock(&pool->mu);
  pool->stop = true;
  pthread_cond_broadcast(&pool->cv);
  pthread_mutex_unlock(&pool->mu);
  for (unsigned i = 0; i < pool->nworkers; i++) {
    pthread_join(pool->workers[i].thread, NULL);
    free(pool->workers[i].plans);
    fzd_gpu_worker_destroy(pool->workers[i].gpu);
  }
  /* Jobs that finished after the last async wake-up still get their reply. */
  on_async(&pool->async);
  uv_close((uv_handle_t *)&pool->async, on_async_closed);
}
