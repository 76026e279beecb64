/*
 * test_device_logic.c - what libfzclient's device calls decide, export,
 * cache and release, without a GPU: the suite runs with fake_libcuda.c as
 * libcuda.so.1 (LD_LIBRARY_PATH, set by CMake), which answers the driver
 * queries for allocations the test declares, against a real fzd on the CPU
 * backend.  That daemon refuses device buffers ("need the GPU backend"), so
 * a job the library exported and sent comes back FZ_ENOGPU with the
 * daemon's message, while memory the library must refuse comes back
 * FZ_EINVAL with its own, and nothing sent.  The driver counts its calls:
 * one export per allocation however many jobs use it, a new one for memory
 * allocated again at the same address, events made once and recorded per
 * job.  tests/gpu/gpu_client_device.c runs the same calls on a real GPU.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_libcuda.h"
#include "fzclient.h"
#include "testutil.h"

static fake_add_fn fake_add;
static fake_count_fn count_of;

/* The fake driver, the same library libfzclient will load. */
static void load_fake(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(h, "libcuda.so.1: %s", dlerror());
  void *a = dlsym(h, "fake_cuda_add"), *n = dlsym(h, "fake_cuda_count");
  cr_assert(a && n, "libcuda.so.1 is not the fake driver (LD_LIBRARY_PATH)");
  memcpy(&fake_add, &a, sizeof a);
  memcpy(&count_of, &n, sizeof n);
}

static void *declare(uint64_t base, size_t size, uint64_t id, fake_kind kind) {
  fake_alloc a = {.base = base, .size = size, .buffer_id = id, .kind = kind};
  fake_add(&a);
  return (void *)(uintptr_t)base;
}

static fz_client *start(fzd_harness **h) {
  load_fake();
  *h = tu_start(NULL);
  char addr[160];
  fz_client_opts o;
  fz_client_opts_init(&o);
  o.timeout_ms = 60000;
  fz_client *c = NULL;
  char why[256];
  cr_assert_eq(fz_client_connect(&c, tu_unix_addr(*h, addr, sizeof addr), &o, why, sizeof why),
               0, "%s", why);
  return c;
}

static void job_f32(fz_job *j, size_t n) {
  fz_job_init(j);
  j->dtype = "f32";
  j->ndims = 1;
  j->shape[0] = n;
  j->eb = 1e-3;
}

#define MiB ((size_t)1 << 20)

/* A job the library sent: the CPU daemon's refusal of device buffers. */
static void expect_sent(int rc, const fz_result *r, const char *what) {
  cr_assert_eq(rc, FZ_ENOGPU, "%s: got %s: %s", what, fz_err_name(rc), r->message);
  cr_assert(strstr(r->message, "libcuda") == NULL, "%s: the library's refusal: %s", what,
            r->message);
}

static void expect_refused(int rc, const fz_result *r, const char *needle) {
  cr_assert_eq(rc, FZ_EINVAL, "'%s': got %s: %s", needle, fz_err_name(rc), r->message);
  cr_assert(strstr(r->message, needle) != NULL, "'%s' not in: %s", needle, r->message);
}

/* Memory that cannot be shared: the message names what to use instead, to
 * its end (it must fit fz_result.message). */
static void expect_unshareable(int rc, const fz_result *r, const char *needle) {
  expect_refused(rc, r, needle);
  size_t n = strlen(r->message), tail = strlen("cudaMemHandleTypePosixFileDescriptor");
  cr_assert(n >= tail && strcmp(r->message + n - tail, "cudaMemHandleTypePosixFileDescriptor") == 0,
            "cut short: %s", r->message);
  cr_assert(strstr(r->message, "cudaMalloc") && strstr(r->message, "cuMemCreate"), "%s",
            r->message);
}

Test(device_logic, legacy_memory_exported_once_per_allocation) {
  fzd_harness *h;
  fz_client *c = start(&h);
  char *in = declare(0x10000000, 8 * MiB, 11, FAKE_LEGACY);
  char *out = declare(0x20000000, 8 * MiB, 12, FAKE_LEGACY);
  fz_job j;
  job_f32(&j, MiB / 4);
  fz_result r;
  for (int i = 0; i < 5; i++) {
    /* Offsets inside the allocations: the handle is made from the base. */
    int rc = fz_client_compress_device(c, &j, in + 4096 * i, MiB, out + 64, 4 * MiB, NULL, &r);
    expect_sent(rc, &r, "legacy");
    cr_assert(strstr(r.message, "GPU backend") != NULL, "%s", r.message);
  }
  cr_assert_eq(count_of(FAKE_IPC_HANDLES), 2, "one export per allocation, not %lu",
               count_of(FAKE_IPC_HANDLES));
  /* Both legacy handles were made in the allocation's context. */
  cr_assert_geq(count_of(FAKE_PUSHES), 2);
  /* A range past its allocation: refused here, nothing exported again. */
  int rc = fz_client_compress_device(c, &j, in + 8 * MiB - 4096, MiB, out, 4 * MiB, NULL, &r);
  expect_refused(rc, &r, "runs past the end of its allocation");
  rc = fz_client_decompress_device(c, in, 100, out + 8 * MiB - 10, 11, NULL, &r);
  expect_refused(rc, &r, "runs past the end of its allocation");
  cr_assert_eq(count_of(FAKE_IPC_HANDLES), 2);
  /* Decompression uses the same exports. */
  rc = fz_client_decompress_device(c, out + 64, 1000, in, MiB, NULL, &r);
  expect_sent(rc, &r, "decompress");
  cr_assert_eq(count_of(FAKE_IPC_HANDLES), 2);
  cr_assert_eq(fz_client_pending(c), 0);
  fz_client_close(c);
  tu_stop(h);
}

Test(device_logic, reallocated_address_is_exported_anew) {
  fzd_harness *h;
  fz_client *c = start(&h);
  char *in = declare(0x30000000, 4 * MiB, 21, FAKE_LEGACY);
  char *out = declare(0x40000000, 4 * MiB, 22, FAKE_LEGACY);
  fz_job j;
  job_f32(&j, MiB / 4);
  fz_result r;
  expect_sent(fz_client_compress_device(c, &j, in, MiB, out, 2 * MiB, NULL, &r), &r, "first");
  cr_assert_eq(count_of(FAKE_IPC_HANDLES), 2);
  /* Freed and allocated again at the same address: a new buffer id. */
  declare(0x30000000, 4 * MiB, 23, FAKE_LEGACY);
  expect_sent(fz_client_compress_device(c, &j, in, MiB, out, 2 * MiB, NULL, &r), &r, "again");
  cr_assert_eq(count_of(FAKE_IPC_HANDLES), 3, "the new allocation was not exported anew");
  expect_sent(fz_client_compress_device(c, &j, in, MiB, out, 2 * MiB, NULL, &r), &r, "cached");
  cr_assert_eq(count_of(FAKE_IPC_HANDLES), 3);
  /* Released: forgotten, exported again by the next job. */
  cr_assert_eq(fz_client_release_device(c, in + 100), 0, "%s", fz_client_errmsg(c));
  expect_sent(fz_client_compress_device(c, &j, in, MiB, out, 2 * MiB, NULL, &r), &r, "released");
  cr_assert_eq(count_of(FAKE_IPC_HANDLES), 4);
  cr_assert_eq(fz_client_release_device(c, NULL), 0, "%s", fz_client_errmsg(c));
  expect_sent(fz_client_compress_device(c, &j, in, MiB, out, 2 * MiB, NULL, &r), &r, "all");
  cr_assert_eq(count_of(FAKE_IPC_HANDLES), 6);
  fz_client_close(c);
  tu_stop(h);
}

Test(device_logic, many_allocations_evict_and_stay_correct) {
  fzd_harness *h;
  fz_client *c = start(&h);
  char *out = declare(0x50000000, 4 * MiB, 31, FAKE_LEGACY);
  fz_job j;
  job_f32(&j, 1024);
  fz_result r;
  /* More allocations than the cache holds, twice over: evictions release
   * on the daemon's side and the jobs go on. */
  for (int round = 0; round < 2; round++)
    for (uint64_t i = 0; i < 100; i++) {
      char *in = declare(0x60000000 + i * 2 * MiB, 2 * MiB, 100 + i, FAKE_LEGACY);
      expect_sent(fz_client_compress_device(c, &j, in, 4096, out, MiB, NULL, &r), &r, "many");
    }
  /* Every job exported its input (the cache holds fewer than 100) and the
   * output once more per eviction of it at most. */
  unsigned long n = count_of(FAKE_IPC_HANDLES);
  cr_assert_geq(n, 201, "%lu exports", n);
  cr_assert_leq(n, 260, "%lu exports: the output was not kept", n);
  cr_assert_eq(fz_client_ping(c, NULL), 0);
  fz_client_close(c);
  tu_stop(h);
}

Test(device_logic, kinds_that_cannot_be_shared) {
  fzd_harness *h;
  fz_client *c = start(&h);
  char *ok = declare(0x70000000, 4 * MiB, 41, FAKE_LEGACY);
  char *managed = declare(0x71000000, 4 * MiB, 42, FAKE_MANAGED);
  char *async = declare(0x72000000, 4 * MiB, 43, FAKE_DEFAULT_POOL);
  char *vmm_nofd = declare(0x73000000, 4 * MiB, 44, FAKE_VMM_NOFD);
  char *host = declare(0x74000000, 4 * MiB, 45, FAKE_HOST);
  char *unknown = (char *)(uintptr_t)0x7f000000;
  fz_job j;
  job_f32(&j, 1024);
  fz_result r;
  expect_unshareable(fz_client_compress_device(c, &j, managed, 4096, ok, MiB, NULL, &r), &r,
                     "managed memory");
  expect_unshareable(fz_client_compress_device(c, &j, ok, 4096, managed, MiB, NULL, &r), &r,
                     "the output");
  expect_unshareable(fz_client_compress_device(c, &j, async, 4096, ok, MiB, NULL, &r), &r,
                     "default pool");
  expect_unshareable(fz_client_decompress_device(c, vmm_nofd, 4096, ok, MiB, NULL, &r), &r,
                     "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR");
  expect_refused(fz_client_compress_device(c, &j, host, 4096, ok, MiB, NULL, &r), &r,
                 "host memory");
  expect_refused(fz_client_compress_device(c, &j, unknown, 4096, ok, MiB, NULL, &r), &r,
                 "not CUDA device memory");
  /* A VMM handle retained to find out is given back. */
  cr_assert_eq(count_of(FAKE_RETAINS), count_of(FAKE_RELEASES));
  cr_assert_eq(fz_client_pending(c), 0, "a refused job was sent");
  fz_client_close(c);
  tu_stop(h);
}

Test(device_logic, vmm_and_pool_memory_exported_once) {
  fzd_harness *h;
  fz_client *c = start(&h);
  char *vmm = declare(0x80000000, 4 * MiB, 51, FAKE_VMM);
  char *pool = declare(0x81000000, 4 * MiB, 52, FAKE_POOL);
  fz_job j;
  job_f32(&j, 1024);
  fz_result r;
  for (int i = 0; i < 3; i++) {
    int rc = fz_client_compress_device(c, &j, vmm + 8192, 4096, pool + 64, MiB, NULL, &r);
    /* The daemon's answer, not the library's refusal. */
    cr_assert(rc < 0 && rc != FZ_EINVAL, "got %s: %s", fz_err_name(rc), r.message);
  }
  /* One descriptor each (VMM, pool) and one pointer export, not three. */
  cr_assert_eq(count_of(FAKE_EXPORTS), 2, "%lu exports", count_of(FAKE_EXPORTS));
  cr_assert_eq(count_of(FAKE_POOL_POINTERS), 1);
  cr_assert_eq(count_of(FAKE_RETAINS), count_of(FAKE_RELEASES));
  /* The VMM range is the mapping, not the larger reservation around it. */
  int rc = fz_client_compress_device(c, &j, vmm + 4 * MiB - 2048, 4096, pool, MiB, NULL, &r);
  expect_refused(rc, &r, "runs past the end of its allocation");
  /* With no current context the primary context serves, retained once and
   * released when the handle closes. */
  cr_assert_eq(count_of(FAKE_PRIMARY_RETAINS), 1);
  fz_client_close(c);
  cr_assert_eq(count_of(FAKE_PRIMARY_RELEASES), 1);
  tu_stop(h);
}

Test(device_logic, stream_records_an_event_per_job) {
  fzd_harness *h;
  fz_client *c = start(&h);
  char *in = declare(0x90000000, 4 * MiB, 61, FAKE_LEGACY);
  char *out = declare(0x91000000, 4 * MiB, 62, FAKE_LEGACY);
  void *stream = (void *)FAKE_STREAM;
  fz_job j;
  job_f32(&j, 1024);
  fz_result r;
  for (int i = 0; i < 4; i++)
    expect_sent(fz_client_compress_device(c, &j, in, 4096, out, MiB, stream, &r), &r, "stream");
  /* One pair of interprocess events, recorded before each job; no host
   * synchronisation; the refused jobs give the stream nothing to wait on. */
  cr_assert_eq(count_of(FAKE_EVENTS), 2, "%lu events", count_of(FAKE_EVENTS));
  cr_assert_eq(count_of(FAKE_RECORDS), 4);
  cr_assert_eq(count_of(FAKE_STREAM_SYNCS), 0);
  cr_assert_eq(count_of(FAKE_STREAM_WAITS), 0);
  /* Asynchronous jobs in flight each hold their own pair. */
  uint64_t ids[3];
  for (int i = 0; i < 3; i++)
    cr_assert_eq(fz_client_submit_device(c, FZ_OP_COMPRESS, &j, in, 4096, out, MiB, stream,
                                         NULL, NULL, &ids[i]), 0, "%s", fz_client_errmsg(c));
  cr_assert_eq(count_of(FAKE_RECORDS), 7);
  cr_assert_geq(count_of(FAKE_EVENTS), 2 * 2, "jobs in flight shared one event pair");
  for (int got = 0; got < 3;) {
    fz_completion done;
    cr_assert_eq(fz_client_wait(c, -1, &done), 1);
    cr_assert_eq(done.result.status, FZ_ENOGPU, "%s", done.result.message);
    got++;
  }
  /* A stream the driver does not know. */
  int rc = fz_client_compress_device(c, &j, in, 4096, out, MiB, (void *)0x77, &r);
  expect_refused(rc, &r, "the stream");
  unsigned long made = count_of(FAKE_EVENTS);
  fz_client_close(c);
  cr_assert_eq(count_of(FAKE_EVENTS_DESTROYED), made, "events left behind");
  tu_stop(h);
}

Test(device_logic, busy_events_fall_back_to_a_stream_synchronisation) {
  fzd_harness *h;
  fz_client *c = start(&h);
  char *in = declare(0x98000000, 4 * MiB, 71, FAKE_LEGACY);
  char *out = declare(0x99000000, 4 * MiB, 72, FAKE_LEGACY);
  fz_job j;
  job_f32(&j, 1024);
  /* Forty jobs in flight with a stream: 32 event pairs, then the stream is
   * synchronised instead for the other eight. */
  for (int i = 0; i < 40; i++)
    cr_assert_eq(fz_client_submit_device(c, FZ_OP_COMPRESS, &j, in, 4096, out, MiB,
                                         (void *)FAKE_STREAM, NULL, NULL, NULL), 0,
                 "job %d: %s", i, fz_client_errmsg(c));
  cr_assert_eq(count_of(FAKE_EVENTS), 64, "%lu events", count_of(FAKE_EVENTS));
  cr_assert_eq(count_of(FAKE_RECORDS), 32);
  cr_assert_eq(count_of(FAKE_STREAM_SYNCS), 8);
  while (fz_client_pending(c) > 0)
    cr_assert_geq(fz_client_wait(c, -1, NULL), 0);
  /* Answered, the pairs are free again: no new ones. */
  fz_result r;
  expect_sent(fz_client_compress_device(c, &j, in, 4096, out, MiB, (void *)FAKE_STREAM, &r),
              &r, "after");
  cr_assert_eq(count_of(FAKE_EVENTS), 64);
  cr_assert_eq(count_of(FAKE_RECORDS), 33);
  fz_client_close(c);
  tu_stop(h);
}

typedef struct thr {
  fz_client *c;
  int index;
  int bad;
  char why[300];
} thr;

static void *thread_main(void *arg) {
  thr *t = arg;
  char *in = (char *)(uintptr_t)(0xa0000000ull + (uint64_t)t->index * 16 * MiB);
  char *out = in + 8 * MiB;
  fz_job j;
  job_f32(&j, 1024);
  for (int i = 0; i < 40; i++) {
    fz_result r;
    void *stream = i % 2 ? (void *)FAKE_STREAM : NULL;
    int rc = i % 3 ? fz_client_compress_device(t->c, &j, in, 4096, out, MiB, stream, &r)
                   : fz_client_decompress_device(t->c, out, 1000, in, MiB, stream, &r);
    if (rc != FZ_ENOGPU || strstr(r.message, "GPU backend") == NULL) {
      t->bad++;
      snprintf(t->why, sizeof t->why, "job %d: %s: %s", i, fz_err_name(rc), r.message);
      break;
    }
  }
  return NULL;
}

Test(device_logic, eight_threads_on_one_handle) {
  fzd_harness *h;
  fz_client *c = start(&h);
  for (int i = 0; i < 8; i++) {
    uint64_t base = 0xa0000000ull + (uint64_t)i * 16 * MiB;
    declare(base, 8 * MiB, 1000 + 2 * (uint64_t)i, FAKE_LEGACY);
    declare(base + 8 * MiB, 8 * MiB, 1001 + 2 * (uint64_t)i, FAKE_LEGACY);
  }
  pthread_t tid[8];
  thr t[8];
  for (int i = 0; i < 8; i++) {
    memset(&t[i], 0, sizeof t[i]);
    t[i].c = c;
    t[i].index = i;
    cr_assert_eq(pthread_create(&tid[i], NULL, thread_main, &t[i]), 0);
  }
  for (int i = 0; i < 8; i++)
    pthread_join(tid[i], NULL);
  for (int i = 0; i < 8; i++)
    cr_assert_eq(t[i].bad, 0, "thread %d: %s", i, t[i].why);
  /* Sixteen allocations, each exported once, whatever the interleaving. */
  cr_assert_eq(count_of(FAKE_IPC_HANDLES), 16, "%lu exports", count_of(FAKE_IPC_HANDLES));
  cr_assert_eq(fz_client_pending(c), 0);
  cr_assert_eq(fz_client_ping(c, NULL), 0);
  fz_client_close(c);
  tu_stop(h);
}
