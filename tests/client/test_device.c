/*
 * test_device.c - the device-pointer calls of libfzclient where no GPU is
 * needed, against a real fzd: arguments refused with FZ_EINVAL before the
 * driver is even loaded, TCP refused with FZ_ETRANSPORT, a machine without
 * the CUDA driver answered with FZ_ENOGPU naming libcuda.so.1, and
 * fz_client_release_device() on a handle that exported nothing (quietly
 * accepted by a daemon that does not know the method).  The handle serves
 * ordinary jobs afterwards.  The GPU half is tests/gpu/gpu_client_device.c.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fzclient.h"
#include "testutil.h"

static fz_client *connect_to(const char *addr, const char *token) {
  fz_client_opts o;
  fz_client_opts_init(&o);
  o.timeout_ms = 60000;
  o.token = token;
  fz_client *c = NULL;
  char why[256];
  int rc = fz_client_connect(&c, addr, &o, why, sizeof why);
  cr_assert_eq(rc, 0, "connect %s: %s (%s)", addr, fz_err_name(rc), why);
  return c;
}

static void job_f32(fz_job *j, size_t n) {
  fz_job_init(j);
  j->dtype = "f32";
  j->ndims = 1;
  j->shape[0] = n;
  j->eb = 1e-3;
}

/* Whether this process can load the CUDA driver at all. */
static bool have_driver(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h)
    dlclose(h);
  return h != NULL;
}

/* The handle still runs an ordinary job. */
static void assert_usable(fz_client *c) {
  size_t rows = 64, cols = 64;
  float *v = tu_field_f32(rows, cols, 0.2f);
  fz_job j;
  job_f32(&j, rows * cols);
  j.in = v;
  j.in_len = rows * cols * sizeof(float);
  fz_result r;
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "after the device calls: %s", r.message);
  cr_assert_gt(r.data_len, 0);
  fz_client_free(r.data);
  free(v);
}

static void expect_einval(fz_client *c, int rc, const fz_result *r, const char *needle) {
  cr_assert_eq(rc, FZ_EINVAL, "'%s': got %s: %s", needle, fz_err_name(rc), r->message);
  cr_assert_eq(r->status, FZ_EINVAL);
  cr_assert(strstr(r->message, needle) != NULL, "'%s' not in '%s'", needle, r->message);
  cr_assert(strstr(fz_client_errmsg(c), needle) != NULL, "'%s' not in '%s'", needle,
            fz_client_errmsg(c));
}

/* Made-up device addresses: never dereferenced, since every call here is
 * refused before (or where) the driver would look at them. */
#define D_IN ((const void *)(uintptr_t)0x7f0000100000ull)
#define D_OUT ((void *)(uintptr_t)0x7f0000900000ull)

Test(device, argument_errors_before_the_driver) {
  fzd_harness *h = tu_start(NULL);
  char addr[160];
  fz_client *c = connect_to(tu_unix_addr(h, addr, sizeof addr), NULL);
  fz_job j;
  job_f32(&j, 1024);
  fz_result r;
  uint64_t id = 99;

  cr_assert_eq(fz_client_compress_device(NULL, &j, D_IN, 4096, D_OUT, 8192, NULL, &r),
               FZ_EINVAL);
  cr_assert_eq(fz_client_compress_device(c, &j, D_IN, 4096, D_OUT, 8192, NULL, NULL),
               FZ_EINVAL);
  cr_assert_eq(fz_client_decompress_device(NULL, D_IN, 100, D_OUT, 4096, NULL, &r), FZ_EINVAL);
  cr_assert_eq(fz_client_submit_device(NULL, FZ_OP_COMPRESS, &j, D_IN, 4096, D_OUT, 8192,
                                       NULL, NULL, NULL, &id), FZ_EINVAL);
  cr_assert_eq(fz_client_release_device(NULL, D_IN), FZ_EINVAL);

  /* Each refusal names its reason, in the result and on the handle. */
  expect_einval(c, fz_client_compress_device(c, NULL, D_IN, 4096, D_OUT, 8192, NULL, &r), &r,
                "needs a job");
  expect_einval(c, fz_client_compress_device(c, &j, NULL, 4096, D_OUT, 8192, NULL, &r), &r,
                "input pointer");
  expect_einval(c, fz_client_compress_device(c, &j, D_IN, 4096, NULL, 8192, NULL, &r), &r,
                "output pointer");
  expect_einval(c, fz_client_compress_device(c, &j, D_IN, 0, D_OUT, 8192, NULL, &r), &r,
                "input has a length of 0");
  expect_einval(c, fz_client_compress_device(c, &j, D_IN, 4096, D_OUT, 0, NULL, &r), &r,
                "output has a length of 0");
  expect_einval(c, fz_client_compress_device(c, &j, D_IN, 4096, (char *)D_IN + 4095, 16,
                                             NULL, &r), &r, "overlaps");
  expect_einval(c, fz_client_decompress_device(c, NULL, 100, D_OUT, 4096, NULL, &r), &r,
                "input pointer");
  expect_einval(c, fz_client_decompress_device(c, D_IN, 100, NULL, 4096, NULL, &r), &r,
                "output pointer");
  expect_einval(c, fz_client_decompress_device(c, D_IN, 0, D_OUT, 4096, NULL, &r), &r,
                "input has a length of 0");
  expect_einval(c, fz_client_decompress_device(c, D_IN, 100, D_OUT, 0, NULL, &r), &r,
                "output has a length of 0");

  cr_assert_eq(fz_client_submit_device(c, (fz_op)7, &j, D_IN, 4096, D_OUT, 8192, NULL, NULL,
                                       NULL, &id), FZ_EINVAL);
  cr_assert(strstr(fz_client_errmsg(c), "unknown operation"), "%s", fz_client_errmsg(c));
  cr_assert_eq(fz_client_submit_device(c, FZ_OP_COMPRESS, NULL, D_IN, 4096, D_OUT, 8192, NULL,
                                       NULL, NULL, &id), FZ_EINVAL);
  cr_assert_eq(fz_client_submit_device(c, FZ_OP_DECOMPRESS, NULL, D_IN, 0, D_OUT, 8192, NULL,
                                       NULL, NULL, &id), FZ_EINVAL);
  cr_assert_eq(id, 99, "a refused submission must not set the id");
  cr_assert_eq(fz_client_pending(c), 0, "nothing was sent");
  assert_usable(c);
  fz_client_close(c);
  tu_stop(h);
}

Test(device, no_driver_is_enogpu_naming_libcuda) {
  if (have_driver())
    cr_skip_test("this machine has a CUDA driver (tests/gpu covers it)");
  fzd_harness *h = tu_start(NULL);
  char addr[160];
  fz_client *c = connect_to(tu_unix_addr(h, addr, sizeof addr), NULL);
  fz_job j;
  job_f32(&j, 1024);
  fz_result r;
  int rc = fz_client_compress_device(c, &j, D_IN, 4096, D_OUT, 8192, NULL, &r);
  cr_assert_eq(rc, FZ_ENOGPU, "got %s: %s", fz_err_name(rc), r.message);
  cr_assert_eq(r.status, FZ_ENOGPU);
  cr_assert(strstr(r.message, "libcuda.so.1") != NULL, "%s", r.message);
  cr_assert(strstr(fz_client_errmsg(c), "libcuda.so.1") != NULL, "%s", fz_client_errmsg(c));
  /* Every call, every time (the load is tried once per process). */
  rc = fz_client_decompress_device(c, D_IN, 100, D_OUT, 4096, (void *)0x1, &r);
  cr_assert_eq(rc, FZ_ENOGPU, "got %s: %s", fz_err_name(rc), r.message);
  cr_assert(strstr(r.message, "libcuda.so.1") != NULL, "%s", r.message);
  uint64_t id = 0;
  rc = fz_client_submit_device(c, FZ_OP_COMPRESS, &j, D_IN, 4096, D_OUT, 8192, NULL, NULL,
                               NULL, &id);
  cr_assert_eq(rc, FZ_ENOGPU, "got %s", fz_err_name(rc));
  cr_assert(strstr(fz_client_errmsg(c), "libcuda.so.1") != NULL, "%s", fz_client_errmsg(c));
  cr_assert_eq(fz_client_pending(c), 0);
  /* Arguments are still checked first. */
  cr_assert_eq(fz_client_compress_device(c, &j, D_IN, 0, D_OUT, 8192, NULL, &r), FZ_EINVAL);
  assert_usable(c);
  fz_client_close(c);
  tu_stop(h);
}

Test(device, tcp_is_refused_before_the_driver) {
  fzd_harness *h = tu_start("\"tcp_enabled\": true, \"tcp_port\": 0, \"tcp_token\": \"t0k\"");
  char addr[160];
  fz_client *c = connect_to(tu_tcp_addr(h, addr, sizeof addr), "t0k");
  fz_job j;
  job_f32(&j, 1024);
  fz_result r;
  int rc = fz_client_compress_device(c, &j, D_IN, 4096, D_OUT, 8192, NULL, &r);
  cr_assert_eq(rc, FZ_ETRANSPORT, "got %s: %s", fz_err_name(rc), r.message);
  cr_assert(strstr(r.message, "Unix socket") != NULL, "%s", r.message);
  rc = fz_client_decompress_device(c, D_IN, 100, D_OUT, 4096, NULL, &r);
  cr_assert_eq(rc, FZ_ETRANSPORT, "got %s: %s", fz_err_name(rc), r.message);
  /* Nothing exported, nothing to release; over TCP nothing is asked. */
  cr_assert_eq(fz_client_release_device(c, D_IN), 0);
  cr_assert_eq(fz_client_release_device(c, NULL), 0);
  assert_usable(c);
  fz_client_close(c);
  tu_stop(h);
}

Test(device, release_of_nothing_needs_no_driver) {
  fzd_harness *h = tu_start(NULL);
  char addr[160];
  fz_client *c = connect_to(tu_unix_addr(h, addr, sizeof addr), NULL);
  /* A pointer the handle never sent: no request, no driver. */
  cr_assert_eq(fz_client_release_device(c, D_IN), 0, "%s", fz_client_errmsg(c));
  /* NULL asks the daemon to drop every import of the connection; a daemon
   * that does not know "release" answers FZ_EMETHOD, which the library
   * takes quietly, as does one that knows it. */
  cr_assert_eq(fz_client_release_device(c, NULL), 0, "%s", fz_client_errmsg(c));
  cr_assert_str_eq(fz_client_errmsg(c), "");
  cr_assert_eq(fz_client_pending(c), 0);
  assert_usable(c);
  fz_client_close(c);
  tu_stop(h);
}

/* Threads refused at once on one handle (the device calls lock it): no
 * crash, every call its own answer. */
typedef struct thr {
  fz_client *c;
  int rc;
  char msg[256];
} thr;

static void *refused_in_thread(void *arg) {
  thr *t = arg;
  fz_job j;
  job_f32(&j, 1024);
  for (int i = 0; i < 200; i++) {
    fz_result r;
    t->rc = fz_client_compress_device(t->c, &j, D_IN, 0, D_OUT, 8192, NULL, &r);
    snprintf(t->msg, sizeof t->msg, "%s", r.message);
    if (t->rc != FZ_EINVAL || !strstr(r.message, "length of 0"))
      break;
  }
  return NULL;
}

Test(device, threads_share_a_handle) {
  fzd_harness *h = tu_start(NULL);
  char addr[160];
  fz_client *c = connect_to(tu_unix_addr(h, addr, sizeof addr), NULL);
  pthread_t tid[8];
  thr t[8];
  for (int i = 0; i < 8; i++) {
    t[i].c = c;
    t[i].rc = 0;
    cr_assert_eq(pthread_create(&tid[i], NULL, refused_in_thread, &t[i]), 0);
  }
  for (int i = 0; i < 8; i++) {
    pthread_join(tid[i], NULL);
    cr_assert_eq(t[i].rc, FZ_EINVAL, "thread %d: %s", i, t[i].msg);
    cr_assert(strstr(t[i].msg, "length of 0"), "thread %d: %s", i, t[i].msg);
  }
  assert_usable(c);
  fz_client_close(c);
  tu_stop(h);
}
