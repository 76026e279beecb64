/*
 * test_memory.c - fzd's memory and address space stay bounded: jobs with
 * descriptor input and output stream through their chunks (the archive is
 * the same as an inline job's, and a 512 MiB job peaks far below its size),
 * idle workers give their buffers back, memory_limit is checked before a
 * job starts (ENOMEM when it can never fit, EBUSY while others hold it),
 * sealed memfds are mapped only where a job reads them and within the
 * mapping budgets, a too-small fixed-size memfd output is ENOSPC with the
 * size needed, and a preset and its spelled-out chain share one plan.
 *
 * Resident-memory bars are not asserted when fzd runs under AddressSanitizer
 * or ThreadSanitizer, whose shadow memory (and ASan's quarantine of freed
 * blocks) is resident too; the jobs still run and their results are still
 * checked there.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fz.h"
#include "jobs_util.h"

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

/* A field of /proc/PID/status in bytes (VmSize, VmRSS, VmHWM). */
static uint64_t proc_status(pid_t pid, const char *key) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  uint64_t kib = 0;
  size_t kl = strlen(key);
  while (fgets(line, sizeof line, f) != NULL)
    if (strncmp(line, key, kl) == 0 && line[kl] == ':')
      kib = strtoull(line + kl + 1, NULL, 10);
  fclose(f);
  return kib * 1024;
}

/* Bytes of the daemon's address space mapped from memfds named name. */
static uint64_t memfd_mapped(pid_t pid, const char *name) {
  char path[64], line[512], want[96];
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  snprintf(want, sizeof want, "/memfd:%s", name);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  uint64_t total = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    unsigned long long lo, hi;
    if (strstr(line, want) != NULL && sscanf(line, "%llx-%llx", &lo, &hi) == 2)
      total += hi - lo;
  }
  fclose(f);
  return total;
}

/* Whether the daemon runs under AddressSanitizer or ThreadSanitizer (their
 * run-time libraries are mapped), whose shadow memory is resident too. */
static bool sanitized(pid_t pid) {
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  bool found = false;
  while (!found && fgets(line, sizeof line, f) != NULL)
    found = strstr(line, "/libasan") != NULL || strstr(line, "/libtsan") != NULL;
  fclose(f);
  return found;
}

typedef struct job_spec {
  const char *method;   /* "compress" or "decompress" */
  uint64_t n;           /* compress: f32 elements */
  const char *mode;
  double eb;
  const char *pipeline; /* NULL: the default */
  bool verify;
  int in;               /* descriptor */
  uint64_t in_off, in_len; /* in_len 0: not sent */
  int out;              /* descriptor, or -1 for an inline result */
} job_spec;

static void send_job(wire *w, uint32_t msgid, const job_spec *j) {
  bool c = strcmp(j->method, "compress") == 0;
  uint32_t fields = 3 + (j->in_len ? 1 : 0) + (j->out >= 0 ? 1 : 0) +
                    (c ? 4 + (j->verify ? 1 : 0) + (j->pipeline ? 1 : 0) : 0);
  msgpack_packer *pk = wire_begin(w, msgid, j->method, fields);
  if (c) {
    fzp_pack_key(pk, "dtype");
    fzp_pack_key(pk, "f32");
    fzp_pack_key(pk, "shape");
    msgpack_pack_array(pk, 1);
    msgpack_pack_uint64(pk, j->n);
    fzp_pack_key(pk, "eb");
    msgpack_pack_double(pk, j->eb);
    fzp_pack_key(pk, "mode");
    fzp_pack_key(pk, j->mode);
    if (j->verify) {
      fzp_pack_key(pk, "verify");
      msgpack_pack_true(pk);
    }
    if (j->pipeline) {
      fzp_pack_key(pk, "pipeline");
      fzp_pack_key(pk, j->pipeline);
    }
  }
  int fds[2] = {j->in, j->out};
  unsigned nfds = j->out >= 0 ? 2 : 1;
  fzp_pack_key(pk, "nfds");
  msgpack_pack_uint64(pk, nfds);
  fzp_pack_key(pk, "in_fd");
  msgpack_pack_uint64(pk, 0);
  fzp_pack_key(pk, "in_offset");
  msgpack_pack_uint64(pk, j->in_off);
  if (j->in_len) {
    fzp_pack_key(pk, "in_length");
    msgpack_pack_uint64(pk, j->in_len);
  }
  if (j->out >= 0) {
    fzp_pack_key(pk, "out_fd");
    msgpack_pack_uint64(pk, 1);
  }
  cr_assert_eq(wire_send(w, fds, nfds), 0);
}

/* Runs one job and returns its error code; the reply stays in *m. */
static int run_job(wire *w, uint32_t msgid, const job_spec *j, fzp_message *m) {
  send_job(w, msgid, j);
  cr_assert_eq(wire_recv(w, m, 240000), 0, "no reply to %s", j->method);
  return wire_code(m);
}

static void reply_message(const fzp_message *m, char *buf, size_t len) {
  int code;
  const char *text = "";
  uint32_t text_len = 0;
  buf[0] = '\0';
  if (fzp_error_decode(&m->error, &code, &text, &text_len) == 1)
    snprintf(buf, len, "%.*s", (int)text_len, text);
}

/* A file of n smooth f32 values (a field written block by block). */
/* The job files live only as descriptors: unlinked at once, so that the
 * daemon's directory goes with the harness and no test leaves gigabytes
 * behind. */
static int field_file(const char *dir, const char *name, uint64_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0);
  cr_assert_eq(unlink(path), 0);
  size_t block = 1 << 20;
  float *x = malloc(block * sizeof(float));
  for (uint64_t at = 0; at < n; at += block) {
    size_t k = n - at < block ? (size_t)(n - at) : block;
    wire_field_f32(x, k, (unsigned)(at / block));
    cr_assert_eq(pwrite(fd, x, k * sizeof(float), (off_t)(at * sizeof(float))),
                 (ssize_t)(k * sizeof(float)));
  }
  free(x);
  return fd;
}

static int empty_file(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0);
  cr_assert_eq(unlink(path), 0);
  return fd;
}

static uint8_t *read_all(int fd, size_t *len) {
  off_t end = lseek(fd, 0, SEEK_END);
  cr_assert_geq(end, 0);
  uint8_t *b = malloc((size_t)end + 1);
  cr_assert_eq(pread(fd, b, (size_t)end, 0), (ssize_t)end);
  *len = (size_t)end;
  return b;
}

/* ---- streaming ------------------------------------------------------------ */

/* 40 MiB (three windows) to a file: the same archive as the inline job,
 * verified window by window, and decompressed file to file back to what
 * the inline archive decodes to. */
Test(memory, streamed_archive_equals_inline_one, .timeout = 300) {
  fzd_harness *h = start_daemon("\"workers\": 1");
  const char *dir = fzd_harness_dir(h);
  uint64_t n = 10 * MiB;
  int in = field_file(dir, "in.f32", n);
  int arc = empty_file(dir, "out.fz"), back = empty_file(dir, "back.f32");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  /* A stale longer file is cut to the archive. */
  cr_assert_eq(ftruncate(arc, (off_t)(n * 8)), 0);

  static const char *const modes[] = {"rel", "abs", "pwrel"};
  for (unsigned k = 0; k < 3; k++) {
    job_spec j = {.method = "compress", .n = n, .mode = modes[k], .eb = 1e-3,
                  .verify = true, .in = in, .out = arc};
    fzp_message m;
    cr_assert_eq(run_job(&w, 1, &j, &m), 0, "streamed %s compress failed", modes[k]);
    double max_error = -1;
    cr_assert_eq(fzp_get_f64(&m.result, "max_error", &max_error), 1);
    cr_assert_geq(max_error, 0);
    fzp_message_free(&m);

    /* The same job with the archive inline (n floats fit max_inline_bytes). */
    j.out = -1;
    cr_assert_eq(run_job(&w, 2, &j, &m), 0);
    const void *inl;
    uint32_t inl_len;
    cr_assert_eq(fzp_get_bin(&m.result, "archive", &inl, &inl_len), 1);
    size_t got_len;
    uint8_t *got = read_all(arc, &got_len);
    cr_assert_eq(got_len, inl_len, "%s: streamed %zu bytes, inline %u", modes[k], got_len,
                 inl_len);
    cr_assert(memcmp(got, inl, inl_len) == 0, "%s: the streamed archive differs", modes[k]);
    size_t raw = (size_t)n * 4, ref_len;
    uint8_t *ref = malloc(raw), *dec;
    cr_assert_eq(fz_decompress(inl, inl_len, ref, raw, &ref_len, 1), 0);
    fzp_message_free(&m);

    job_spec d = {.method = "decompress", .in = arc, .out = back};
    cr_assert_eq(run_job(&w, 3, &d, &m), 0);
    fzp_message_free(&m);
    size_t dec_len;
    dec = read_all(back, &dec_len);
    cr_assert_eq(dec_len, raw);
    cr_assert(memcmp(dec, ref, raw) == 0, "%s: streamed decompression differs", modes[k]);
    free(dec);
    free(ref);
    free(got);
  }

  /* A changed payload byte is caught by the streamed decompression. */
  size_t len;
  uint8_t *a = read_all(arc, &len);
  uint8_t flip = a[len - 100] ^ 0x40;
  cr_assert_eq(pwrite(arc, &flip, 1, (off_t)(len - 100)), 1);
  job_spec d = {.method = "decompress", .in = arc, .out = back};
  fzp_message m;
  cr_assert_eq(run_job(&w, 4, &d, &m), FZ_ECORRUPT);
  fzp_message_free(&m);
  free(a);
  close(in);
  close(arc);
  close(back);
  wire_close(&w);
  stop_daemon(h);
}

/* A 512 MiB job file to file (verified) and back stays far below its size
 * in resident memory: under 256 MiB at the peak.  Whole in memory it took
 * over 1 GiB (input and archive). */
Test(memory, large_descriptor_job_peaks_low, .timeout = 600) {
  fzd_harness *h = start_daemon("\"workers\": 1");
  const char *dir = fzd_harness_dir(h);
  uint64_t n = 128 * MiB;
  int in = field_file(dir, "big.f32", n);
  int arc = empty_file(dir, "big.fz"), back = empty_file(dir, "big.back");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  job_spec j = {.method = "compress", .n = n, .mode = "rel", .eb = 1e-3, .verify = true,
                .in = in, .out = arc};
  fzp_message m;
  cr_assert_eq(run_job(&w, 1, &j, &m), 0);
  fzp_message_free(&m);
  uint64_t hwm_c = proc_status(fzd_harness_pid(h), "VmHWM");
  job_spec d = {.method = "decompress", .in = arc, .out = back};
  cr_assert_eq(run_job(&w, 2, &d, &m), 0);
  fzp_message_free(&m);
  uint64_t hwm_d = proc_status(fzd_harness_pid(h), "VmHWM");
  cr_assert_eq(lseek(back, 0, SEEK_END), (off_t)(n * 4));
  /* Spot-check the values within the bound (the range of the field is what
   * wire_field_f32 makes; REL 1e-3 of it). */
  float *x = malloc(MiB * 4), *y = malloc(MiB * 4);
  cr_assert_eq(pread(in, x, MiB * 4, (off_t)(77 * MiB * 4)), (ssize_t)(MiB * 4));
  cr_assert_eq(pread(back, y, MiB * 4, (off_t)(77 * MiB * 4)), (ssize_t)(MiB * 4));
  fz_compare_result cmp;
  cr_assert_eq(fz_compare(FZ_F32, x, y, MiB, &cmp), 0);
  cr_assert_gt(cmp.max_abs_error, 0);
  free(x);
  free(y);
  close(in);
  close(arc);
  close(back);
  wire_close(&w);
  bool san = sanitized(fzd_harness_pid(h));
  stop_daemon(h);
  if (san)
    cr_skip("resident memory is not measured under a sanitizer");
  cr_assert_lt(hwm_c, 256 * MiB, "a 512 MiB compress peaked at %llu MiB resident",
               (unsigned long long)(hwm_c / MiB));
  cr_assert_lt(hwm_d, 256 * MiB, "a 512 MiB decompress peaked at %llu MiB resident",
               (unsigned long long)(hwm_d / MiB));
}

/* Two workers each run a 56 MiB job with an inline result; once the
 * connections are gone the daemon is back under 64 MiB resident.  Workers
 * used to keep their largest archive buffer for good. */
Test(memory, idle_daemon_gives_memory_back, .timeout = 300) {
  fzd_harness *h = start_daemon("\"workers\": 2");
  const char *dir = fzd_harness_dir(h);
  uint64_t n = 14 * MiB;
  /* Noise does not compress: the archive buffers are filled whole. */
  char path[512];
  snprintf(path, sizeof path, "%s/noise.f32", dir);
  int in = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  cr_assert_geq(in, 0);
  cr_assert_eq(unlink(path), 0);
  uint32_t *x = malloc(n * 4), s = 12345;
  for (uint64_t i = 0; i < n; i++) {
    s ^= s << 13, s ^= s >> 17, s ^= s << 5;
    x[i] = (s & 0x807fffffu) | 0x3f000000u; /* finite, in (-2, 2) */
  }
  cr_assert_eq(pwrite(in, x, n * 4, 0), (ssize_t)(n * 4));
  free(x);
  wire a, b;
  wire_open(&a, h, false);
  wire_open(&b, h, false);
  cr_assert_eq(wire_hello(&a, NULL), 0);
  cr_assert_eq(wire_hello(&b, NULL), 0);
  job_spec j = {.method = "compress", .n = n, .mode = "abs", .eb = 1e-9, .verify = true,
                .in = in, .out = -1};
  send_job(&a, 1, &j);
  send_job(&b, 2, &j);
  fzp_message m;
  cr_assert_eq(wire_recv(&a, &m, 240000), 0);
  cr_assert_eq(wire_code(&m), 0);
  fzp_message_free(&m);
  cr_assert_eq(wire_recv(&b, &m, 240000), 0);
  cr_assert_eq(wire_code(&m), 0);
  fzp_message_free(&m);
  uint64_t hwm = proc_status(fzd_harness_pid(h), "VmHWM");
  wire_close(&a);
  wire_close(&b);
  close(in);
  uint64_t rss = UINT64_MAX;
  for (int t = 0; t < 100 && rss >= 64 * MiB; t++) {
    sleep_ms(100);
    rss = proc_status(fzd_harness_pid(h), "VmRSS");
  }
  bool san = sanitized(fzd_harness_pid(h));
  stop_daemon(h);
  if (san)
    cr_skip("resident memory is not measured under a sanitizer");
  cr_assert_gt(hwm, 100 * MiB, "the jobs should have held their buffers while running");
  cr_assert_lt(rss, 64 * MiB, "idle after two 56 MiB jobs, fzd still holds %llu MiB",
               (unsigned long long)(rss / MiB));
}

/* ---- the memory budget ---------------------------------------------------- */

Test(memory, job_that_can_never_fit_is_enomem, .timeout = 300) {
  fzd_harness *h = start_daemon("\"workers\": 1, \"memory_limit\": 67108864");
  const char *dir = fzd_harness_dir(h);
  uint64_t n = 12 * MiB; /* 48 MiB */
  int in = field_file(dir, "in.f32", n), out = empty_file(dir, "out.fz");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  /* Inline result: input and archive whole in memory, about 96 MiB. */
  job_spec j = {.method = "compress", .n = n, .mode = "rel", .eb = 1e-3, .in = in, .out = -1};
  fzp_message m;
  cr_assert_eq(run_job(&w, 1, &j, &m), FZ_ENOMEM);
  char msg[512];
  reply_message(&m, msg, sizeof msg);
  cr_assert(strstr(msg, "memory_limit (67108864)") != NULL, "message: %s", msg);
  fzp_message_free(&m);
  /* The same job streamed to a file fits. */
  j.out = out;
  cr_assert_eq(run_job(&w, 2, &j, &m), 0);
  fzp_message_free(&m);
  close(in);
  close(out);
  wire_close(&w);
  stop_daemon(h);
}

/* With room for one streamed job (56 MiB: a verified one holds three 16 MiB
 * windows, an unverified one two), the two side by side do not fit: one of
 * them gets EBUSY; alone, each runs. */
Test(memory, job_beside_others_over_the_budget_is_ebusy, .timeout = 600) {
  fzd_harness *h = start_daemon("\"workers\": 2, \"memory_limit\": 58720256");
  const char *dir = fzd_harness_dir(h);
  uint64_t big = 96 * MiB, small = 4 * MiB;
  int in = field_file(dir, "in.f32", big), out = empty_file(dir, "out.fz");
  int out2 = empty_file(dir, "out2.fz");
  wire a, b;
  wire_open(&a, h, false);
  wire_open(&b, h, false);
  cr_assert_eq(wire_hello(&a, NULL), 0);
  cr_assert_eq(wire_hello(&b, NULL), 0);
  job_spec ja = {.method = "compress", .n = big, .mode = "rel", .eb = 1e-4, .verify = true,
                 .in = in, .out = out};
  job_spec jb = {.method = "compress", .n = small, .mode = "rel", .eb = 1e-4, .in = in,
                 .in_len = small * 4, .out = out2};
  send_job(&a, 1, &ja);
  bool busy = false, a_done = false;
  fzp_message m;
  char msg[512] = "";
  while (!busy && !a_done) {
    cr_assert_eq(run_job(&b, 2, &jb, &m) == 0 || wire_code(&m) == FZ_EBUSY, 1,
                 "unexpected error %d", wire_code(&m));
    busy = wire_code(&m) == FZ_EBUSY;
    if (busy)
      reply_message(&m, msg, sizeof msg);
    fzp_message_free(&m);
    if (!busy && wire_recv(&a, &m, 50) == 0) {
      /* The big job may itself be the one refused, when a small one got
       * to its worker first: the same budget at work. */
      int code = wire_code(&m);
      cr_assert(code == 0 || code == FZ_EBUSY, "unexpected error %d", code);
      busy = code == FZ_EBUSY;
      if (busy)
        reply_message(&m, msg, sizeof msg);
      fzp_message_free(&m);
      a_done = true;
    }
  }
  cr_assert(busy, "the big job finished before the second was ever refused");
  cr_assert(strstr(msg, "retry") != NULL, "message: %s", msg);
  if (!a_done) {
    cr_assert_eq(wire_recv(&a, &m, 300000), 0);
    cr_assert_eq(wire_code(&m), 0);
    fzp_message_free(&m);
  }
  /* Alone, it runs. */
  cr_assert_eq(run_job(&b, 3, &jb, &m), 0);
  fzp_message_free(&m);
  close(in);
  close(out);
  close(out2);
  wire_close(&a);
  wire_close(&b);
  stop_daemon(h);
}

/* ---- sealed memfds -------------------------------------------------------- */

static int sealed_memfd(const char *name, uint64_t size, const void *head, size_t head_len) {
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  cr_assert_geq(fd, 0);
  cr_assert_eq(ftruncate(fd, (off_t)size), 0);
  if (head_len)
    cr_assert_eq(pwrite(fd, head, head_len, 0), (ssize_t)head_len);
  cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  return fd;
}

/* Tiny jobs on a 32 GiB sparse memfd (at its start and near its end) map a
 * few pages, not the file: the daemon's address space barely moves, and
 * what it maps for the cache stays after the jobs. */
Test(memory, sealed_memfd_maps_only_the_job_range, .timeout = 120) {
  fzd_harness *h = start_daemon("\"workers\": 1");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  float x[4096];
  wire_field_f32(x, 4096, 3);
  uint64_t size = 32 * GiB;
  int fd = sealed_memfd("fzd-sparse", size, x, sizeof x);
  cr_assert_eq(pwrite(fd, x, sizeof x, (off_t)(size - sizeof x - 12)), (ssize_t)sizeof x);
  uint64_t offs[2] = {0, size - sizeof x - 12};
  for (int k = 0; k < 2; k++) {
    job_spec j = {.method = "compress", .n = 4096, .mode = "abs", .eb = 1e-3, .verify = true,
                  .in = fd, .in_off = offs[k], .in_len = sizeof x, .out = -1};
    fzp_message m;
    cr_assert_eq(run_job(&w, (uint32_t)k + 1, &j, &m), 0);
    const void *arc;
    uint32_t arc_len;
    cr_assert_eq(fzp_get_bin(&m.result, "archive", &arc, &arc_len), 1);
    float y[4096];
    size_t y_len;
    cr_assert_eq(fz_decompress(arc, arc_len, y, sizeof y, &y_len, 1), 0);
    fz_compare_result cmp;
    cr_assert_eq(fz_compare(FZ_F32, x, y, 4096, &cmp), 0);
    cr_assert_leq(cmp.max_abs_error, 1e-3);
    fzp_message_free(&m);
  }
  /* The second mapping took the first one's place in the cache. */
  uint64_t mapped = memfd_mapped(fzd_harness_pid(h), "fzd-sparse");
  cr_assert_gt(mapped, 0, "the memfd should be mapped, and cached");
  cr_assert_leq(mapped, 2 * sizeof x + 8192,
                "two 16 KiB jobs on a 32 GiB memfd keep %llu KiB of it mapped",
                (unsigned long long)(mapped / 1024));
  close(fd);
  wire_close(&w);
  stop_daemon(h);
}

/* Over the per-connection mapping budget the input is read with pread: the
 * job still runs and gives the same archive. */
Test(memory, mapping_budget_falls_back_to_pread, .timeout = 120) {
  fzd_harness *h = start_daemon("\"workers\": 1, \"max_mapped_bytes_per_connection\": 1048576");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  size_t n = MiB; /* 4 MiB: four times the budget */
  float *x = malloc(n * 4);
  wire_field_f32(x, n, 9);
  int fd = sealed_memfd("fzd-sparse", n * 4, x, n * 4);
  job_spec j = {.method = "compress", .n = n, .mode = "abs", .eb = 1e-3, .in = fd, .out = -1};
  fzp_message m;
  cr_assert_eq(run_job(&w, 1, &j, &m), 0);
  const void *arc;
  uint32_t arc_len;
  cr_assert_eq(fzp_get_bin(&m.result, "archive", &arc, &arc_len), 1);
  float *y = malloc(n * 4);
  size_t y_len;
  cr_assert_eq(fz_decompress(arc, arc_len, y, n * 4, &y_len, 1), 0);
  fz_compare_result cmp;
  cr_assert_eq(fz_compare(FZ_F32, x, y, n, &cmp), 0);
  cr_assert_leq(cmp.max_abs_error, 1e-3);
  fzp_message_free(&m);
  /* A job within the budget is mapped (and cached) as before. */
  j.n = 4096;
  j.in_len = 4096 * 4;
  cr_assert_eq(run_job(&w, 2, &j, &m), 0);
  fzp_message_free(&m);
  uint64_t mapped = memfd_mapped(fzd_harness_pid(h), "fzd-sparse");
  cr_assert_gt(mapped, 0, "a job within the budget is mapped");
  cr_assert_leq(mapped, MiB, "%llu KiB mapped past a budget of 1 MiB",
                (unsigned long long)(mapped / 1024));
  free(x);
  free(y);
  close(fd);
  wire_close(&w);
  stop_daemon(h);
}

/* The global budget evicts another connection's idle mapping to make room:
 * one connection's cached memfds cannot starve the others. */
Test(memory, global_mapping_budget_evicts_idle_mappings, .timeout = 120) {
  fzd_harness *h = start_daemon("\"workers\": 1, \"max_mapped_bytes\": 1048576");
  wire a, b;
  wire_open(&a, h, false);
  wire_open(&b, h, false);
  cr_assert_eq(wire_hello(&a, NULL), 0);
  cr_assert_eq(wire_hello(&b, NULL), 0);
  size_t n = 160 * 1024; /* 640 KiB each: two do not fit 1 MiB */
  float *x = malloc(n * 4);
  wire_field_f32(x, n, 4);
  int fa = sealed_memfd("fzd-conn-a", n * 4, x, n * 4);
  int fb = sealed_memfd("fzd-conn-b", n * 4, x, n * 4);
  job_spec j = {.method = "compress", .n = n, .mode = "abs", .eb = 1e-3, .in = fa, .out = -1};
  fzp_message m;
  cr_assert_eq(run_job(&a, 1, &j, &m), 0);
  fzp_message_free(&m);
  pid_t pid = fzd_harness_pid(h);
  cr_assert_eq(memfd_mapped(pid, "fzd-conn-a"), n * 4, "the first input stays mapped");
  j.in = fb;
  cr_assert_eq(run_job(&b, 2, &j, &m), 0);
  fzp_message_free(&m);
  cr_assert_eq(memfd_mapped(pid, "fzd-conn-b"), n * 4, "the second input is mapped");
  cr_assert_eq(memfd_mapped(pid, "fzd-conn-a"), 0, "the idle first mapping made room");
  free(x);
  close(fa);
  close(fb);
  wire_close(&a);
  wire_close(&b);
  stop_daemon(h);
}

/* A fixed-size (sealed) memfd too small for the result: ENOSPC, and the
 * message says how large it must be (it was EIO). */
Test(memory, small_fixed_size_memfd_output_is_enospc, .timeout = 120) {
  fzd_harness *h = start_daemon("\"workers\": 1");
  const char *dir = fzd_harness_dir(h);
  uint64_t n = 64 * 1024;
  int in = field_file(dir, "in.f32", n);
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  job_spec j = {.method = "compress", .n = n, .mode = "abs", .eb = 1e-3, .in = in, .out = -1};
  fzp_message m;
  cr_assert_eq(run_job(&w, 1, &j, &m), 0);
  const void *inl;
  uint32_t arc_len;
  cr_assert_eq(fzp_get_bin(&m.result, "archive", &inl, &arc_len), 1);
  void *arc = malloc(arc_len);
  memcpy(arc, inl, arc_len);
  fzp_message_free(&m);

  int out = memfd_create("fzd-small", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  cr_assert_eq(ftruncate(out, 4096), 0);
  cr_assert_eq(fcntl(out, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  j.out = out;
  cr_assert_eq(run_job(&w, 2, &j, &m), FZ_ENOSPC);
  char msg[512], want[64];
  reply_message(&m, msg, sizeof msg);
  snprintf(want, sizeof want, "needs %u bytes", arc_len);
  cr_assert(strstr(msg, want) != NULL, "message \"%s\" lacks \"%s\"", msg, want);
  fzp_message_free(&m);

  /* Decompression into it: the raw size is named. */
  int afd = memfd_create("fzd-arc", MFD_CLOEXEC);
  cr_assert_eq(pwrite(afd, arc, arc_len, 0), (ssize_t)arc_len);
  job_spec d = {.method = "decompress", .in = afd, .out = out};
  cr_assert_eq(run_job(&w, 3, &d, &m), FZ_ENOSPC);
  reply_message(&m, msg, sizeof msg);
  snprintf(want, sizeof want, "needs %llu bytes", (unsigned long long)(n * 4));
  cr_assert(strstr(msg, want) != NULL, "message \"%s\" lacks \"%s\"", msg, want);
  fzp_message_free(&m);
  free(arc);
  close(afd);
  close(out);
  close(in);
  wire_close(&w);
  stop_daemon(h);
}

/* ---- plans ---------------------------------------------------------------- */

static unsigned count_lines(const char *log, const char *needle) {
  unsigned k = 0;
  for (const char *p = log; (p = strstr(p, needle)) != NULL; p += strlen(needle))
    k++;
  return k;
}

/* "balanced", its spelled-out chain and the default make one plan. */
Test(memory, preset_and_its_chain_share_a_plan, .timeout = 120) {
  fzd_harness *h = start_daemon("\"workers\": 1");
  const char *dir = fzd_harness_dir(h);
  int in = field_file(dir, "in.f32", 8192);
  size_t np;
  const fz_preset *pr = fz_presets(&np);
  const char *chain = NULL;
  for (size_t i = 0; i < np; i++)
    if (strcmp(pr[i].name, "balanced") == 0)
      chain = pr[i].chain;
  cr_assert_not_null(chain);
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  const char *pipes[] = {"balanced", chain, NULL};
  for (unsigned k = 0; k < 3; k++) {
    job_spec j = {.method = "compress", .n = 8192, .mode = "rel", .eb = 1e-3,
                  .pipeline = pipes[k], .in = in, .out = -1};
    fzp_message m;
    cr_assert_eq(run_job(&w, k + 1, &j, &m), 0);
    fzp_message_free(&m);
  }
  /* Another chain is another plan. */
  job_spec j = {.method = "compress", .n = 8192, .mode = "rel", .eb = 1e-3,
                .pipeline = "fast", .in = in, .out = -1};
  fzp_message m;
  cr_assert_eq(run_job(&w, 9, &j, &m), 0);
  fzp_message_free(&m);
  char *log = fzd_harness_log(h);
  unsigned plans = count_lines(log, "plan created");
  free(log);
  cr_assert_eq(plans, 2, "%u plans were created for two chains", plans);
  close(in);
  wire_close(&w);
  stop_daemon(h);
}
