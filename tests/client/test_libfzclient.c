/*
 * test_libfzclient.c - libfzclient against a real fzd over real sockets:
 * synchronous and asynchronous round trips on the Unix socket and on TCP,
 * descriptor passing, answers out of order, callbacks, and the errors a
 * caller must be able to tell apart.  Every round trip checks exact sizes
 * and the error bound with the engine's own fz_compare().
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fz.h"
#include "fzclient.h"
#include "testutil.h"

static fz_client *connect_ok(const char *addr, const char *token) {
  fz_client_opts o;
  fz_client_opts_init(&o);
  o.token = token;
  o.timeout_ms = 60000;
  fz_client *c = NULL;
  char why[256];
  int rc = fz_client_connect(&c, addr, &o, why, sizeof why);
  cr_assert_eq(rc, 0, "connect %s: %s (%s)", addr, fz_strerror(rc), why);
  return c;
}

static void job_f32(fz_job *j, const float *v, size_t rows, size_t cols, double eb) {
  fz_job_init(j);
  j->dtype = "f32";
  j->ndims = 2;
  j->shape[0] = rows;
  j->shape[1] = cols;
  j->eb = eb;
  j->mode = "rel";
  j->in = v;
  j->in_len = rows * cols * sizeof(float);
}

/* Decompresses archive inline and checks shape, size and the bound. */
static void check_roundtrip_f32(fz_client *c, const float *v, size_t rows, size_t cols,
                                const void *arc, size_t arc_len, double eb_rel) {
  size_t n = rows * cols;
  float *back = malloc(n * sizeof *back);
  fz_job d;
  fz_job_init(&d);
  d.in = arc;
  d.in_len = arc_len;
  d.out = back;
  d.out_cap = n * sizeof *back;
  fz_result r;
  int rc = fz_client_decompress(c, &d, &r);
  cr_assert_eq(rc, 0, "decompress: %s: %s", fz_strerror(rc), r.message);
  cr_assert_eq(r.data, (void *)back);
  cr_assert_eq(r.data_len, n * sizeof(float));
  cr_assert_eq(r.bytes_out, n * sizeof(float));
  cr_assert_eq(r.bytes_in, arc_len);
  cr_assert_str_eq(r.dtype, "f32");
  cr_assert_eq(r.ndims, 2);
  cr_assert_eq(r.shape[0], rows);
  cr_assert_eq(r.shape[1], cols);
  fz_compare_result cmp;
  cr_assert_eq(fz_compare(FZ_F32, v, back, n, &cmp), 0);
  double bound = eb_rel * tu_range_f32(v, n);
  cr_assert_leq(cmp.max_abs_error, bound, "max error %g over the bound %g", cmp.max_abs_error, bound);
  cr_assert_eq(cmp.nonfinite_mismatches, 0);
  free(back);
}

Test(libfzclient, sync_round_trip_unix) {
  fzd_harness *h = tu_start(NULL);
  char addr[160];
  fz_client *c = connect_ok(tu_unix_addr(h, addr, sizeof addr), NULL);
  fz_server_info info;
  cr_assert_eq(fz_client_info(c, &info), 0);
  cr_assert_eq(info.transport, FZ_TRANSPORT_UNIX);
  cr_assert_eq(info.protocol, 1);
  cr_assert_str_eq(info.backend, "cpu");
  cr_assert_gt(info.max_inline, 0);
  cr_assert_eq(info.pid, (int64_t)fzd_harness_pid(h));

  size_t rows = 300, cols = 400;
  float *v = tu_field_f32(rows, cols, 0.3f);
  fz_job j;
  job_f32(&j, v, rows, cols, 1e-3);
  j.verify = 1;
  fz_result r;
  int rc = fz_client_compress(c, &j, &r);
  cr_assert_eq(rc, 0, "compress: %s: %s", fz_strerror(rc), r.message);
  cr_assert_eq(r.status, 0);
  cr_assert_eq(r.bytes_in, rows * cols * sizeof(float));
  cr_assert_eq(r.data_len, r.bytes_out);
  cr_assert_lt(r.bytes_out, r.bytes_in, "a smooth field must shrink");
  cr_assert_gt(r.ratio, 1.0);
  cr_assert(r.has_max_error);
  double bound = 1e-3 * tu_range_f32(v, rows * cols);
  cr_assert_leq(r.max_error, bound);
  cr_assert_leq(r.eb_abs, bound * (1 + 1e-12));
  cr_assert_neq(r.chain[0], '\0');
  check_roundtrip_f32(c, v, rows, cols, r.data, r.data_len, 1e-3);
  fz_client_free(r.data);
  cr_assert_eq(fz_client_pending(c), 0);
  fz_client_close(c);
  free(v);
  tu_stop(h);
}

Test(libfzclient, sync_round_trip_tcp_with_token) {
  fzd_harness *h = tu_start("\"tcp_enabled\": true, \"tcp_port\": 0, \"tcp_token\": \"s3cret\"");
  char addr[160];
  tu_tcp_addr(h, addr, sizeof addr);
  fz_client *c = connect_ok(addr, "s3cret");
  fz_server_info info;
  fz_client_info(c, &info);
  cr_assert_eq(info.transport, FZ_TRANSPORT_TCP);

  size_t rows = 128, cols = 200, n = rows * cols;
  double *v = tu_field_f64(rows, cols, 0.1);
  fz_job j;
  fz_job_init(&j);
  j.dtype = "f64";
  j.ndims = 2;
  j.shape[0] = rows;
  j.shape[1] = cols;
  j.eb = 1e-4;
  j.mode = "abs";
  j.in = v;
  j.in_len = n * sizeof(double);
  fz_result r;
  int rc = fz_client_compress(c, &j, &r);
  cr_assert_eq(rc, 0, "compress: %s: %s", fz_strerror(rc), r.message);
  cr_assert_eq(r.bytes_in, n * sizeof(double));
  cr_assert_eq(r.data_len, r.bytes_out);

  fz_job d;
  fz_job_init(&d);
  d.in = r.data;
  d.in_len = r.data_len;
  fz_result b;
  rc = fz_client_decompress(c, &d, &b);
  cr_assert_eq(rc, 0, "decompress: %s: %s", fz_strerror(rc), b.message);
  cr_assert_eq(b.data_len, n * sizeof(double));
  cr_assert_str_eq(b.dtype, "f64");
  fz_compare_result cmp;
  cr_assert_eq(fz_compare(FZ_F64, v, b.data, n, &cmp), 0);
  cr_assert_leq(cmp.max_abs_error, 1e-4);
  fz_client_free(b.data);

  /* Descriptors cannot cross TCP: refused before anything is sent. */
  fz_job f;
  job_f32(&f, NULL, 1, 1, 1e-3);
  f.in_fd = 0;
  rc = fz_client_compress(c, &f, &b);
  cr_assert_eq(rc, FZ_ETRANSPORT, "got %s", fz_err_name(rc));
  cr_assert_eq(fz_client_ping(c, NULL), 0, "the connection must stay usable");
  fz_client_free(r.data);
  fz_client_close(c);

  /* A wrong or missing token is refused by the server. */
  fz_client_opts o;
  fz_client_opts_init(&o);
  o.token = "wrong";
  char why[256];
  fz_client *bad = NULL;
  rc = fz_client_connect(&bad, addr, &o, why, sizeof why);
  cr_assert_eq(rc, FZ_EAUTH, "wrong token gave %s (%s)", fz_err_name(rc), why);
  cr_assert_null(bad);
  unsetenv("FZD_TOKEN");
  rc = fz_client_connect(&bad, addr, NULL, why, sizeof why);
  cr_assert_eq(rc, FZ_EAUTH, "no token gave %s (%s)", fz_err_name(rc), why);
  free(v);
  tu_stop(h);
}

Test(libfzclient, descriptors_in_and_out) {
  fzd_harness *h = tu_start(NULL);
  char addr[160];
  fz_client *c = connect_ok(tu_unix_addr(h, addr, sizeof addr), NULL);
  size_t rows = 256, cols = 512, n = rows * cols, bytes = n * sizeof(float);
  float *v = tu_field_f32(rows, cols, 1.0f);
  /* The input sits behind a 64-byte prefix, as in a file with a header. */
  int in = memfd_create("in", 0), arc = memfd_create("arc", 0), out = memfd_create("out", 0);
  cr_assert(in >= 0 && arc >= 0 && out >= 0);
  char prefix[64] = {0};
  cr_assert_eq(pwrite(in, prefix, sizeof prefix, 0), (ssize_t)sizeof prefix);
  cr_assert_eq(pwrite(in, v, bytes, 64), (ssize_t)bytes);

  fz_job j;
  job_f32(&j, NULL, rows, cols, 1e-2);
  j.in = NULL;
  j.in_len = 0;
  j.in_fd = in;
  j.in_offset = 64;
  j.in_length = bytes;
  j.out_fd = arc;
  fz_result r;
  int rc = fz_client_compress(c, &j, &r);
  cr_assert_eq(rc, 0, "compress by fd: %s: %s", fz_strerror(rc), r.message);
  cr_assert_null(r.data, "the archive went to the descriptor, not inline");
  cr_assert_eq(r.bytes_in, bytes);
  struct stat st;
  cr_assert_eq(fstat(arc, &st), 0);
  cr_assert_eq((uint64_t)st.st_size, r.bytes_out, "the archive file is exactly the archive");

  fz_job d;
  fz_job_init(&d);
  d.in_fd = arc;
  d.out_fd = out;
  d.out_offset = 4096;
  fz_result b;
  rc = fz_client_decompress(c, &d, &b);
  cr_assert_eq(rc, 0, "decompress by fd: %s: %s", fz_strerror(rc), b.message);
  cr_assert_eq(b.bytes_out, bytes);
  cr_assert_eq(fstat(out, &st), 0);
  cr_assert_eq((uint64_t)st.st_size, 4096 + bytes);
  float *back = mmap(NULL, 4096 + bytes, PROT_READ, MAP_SHARED, out, 0);
  cr_assert_neq(back, MAP_FAILED);
  fz_compare_result cmp;
  cr_assert_eq(fz_compare(FZ_F32, v, (const char *)back + 4096, n, &cmp), 0);
  cr_assert_leq(cmp.max_abs_error, 1e-2 * tu_range_f32(v, n));
  munmap(back, 4096 + bytes);
  close(in);
  close(arc);
  close(out);
  free(v);
  fz_client_close(c);
  tu_stop(h);
}

Test(libfzclient, many_in_flight_out_of_order) {
  fzd_harness *h = tu_start(NULL);
  char addr[160];
  fz_client *c = connect_ok(tu_unix_addr(h, addr, sizeof addr), NULL);
  enum { NJOBS = 24 };
  float *fields[NJOBS];
  size_t rows[NJOBS], cols = 256;
  /* The first job is large, the others small: with two workers the small
   * ones finish while the large one still runs (32 MiB, so that it does even
   * when other test suites load the machine's cores). */
  for (int i = 0; i < NJOBS; i++) {
    rows[i] = i == 0 ? 32768 : (size_t)(8 + i);
    fields[i] = tu_field_f32(rows[i], cols, (float)i);
  }
  uint64_t ids[NJOBS];
  for (int i = 0; i < NJOBS; i++) {
    fz_job j;
    job_f32(&j, fields[i], rows[i], cols, 1e-3);
    int rc = fz_client_submit(c, FZ_OP_COMPRESS, &j, NULL, (void *)(intptr_t)i, &ids[i]);
    cr_assert_eq(rc, 0, "submit %d: %s", i, fz_client_errmsg(c));
  }
  cr_assert_eq(fz_client_pending(c), NJOBS);
  int order[NJOBS], got = 0;
  bool seen[NJOBS] = {false};
  void *archives[NJOBS];
  size_t arc_len[NJOBS];
  fz_completion done;
  while (got < NJOBS) {
    int rc = fz_client_wait(c, 60000, &done);
    cr_assert_eq(rc, 1, "wait gave %d after %d completions", rc, got);
    int i = (int)(intptr_t)done.user;
    cr_assert(i >= 0 && i < NJOBS && !seen[i]);
    cr_assert_eq(done.id, ids[i], "the completion carries its own id");
    cr_assert_eq(done.op, FZ_OP_COMPRESS);
    cr_assert_eq(done.result.status, 0, "job %d: %s", i, done.result.message);
    cr_assert_eq(done.result.bytes_in, rows[i] * cols * sizeof(float));
    cr_assert_eq(done.result.data_len, done.result.bytes_out);
    seen[i] = true;
    archives[i] = done.result.data;
    arc_len[i] = done.result.data_len;
    order[got++] = i;
  }
  cr_assert_eq(fz_client_wait(c, 0, &done), 0, "nothing is left");
  cr_assert_eq(fz_client_pending(c), 0);
  cr_assert_neq(order[0], 0, "the large job finished first: the answers came in order");
  for (int i = 0; i < NJOBS; i++) {
    check_roundtrip_f32(c, fields[i], rows[i], cols, archives[i], arc_len[i], 1e-3);
    fz_client_free(archives[i]);
    free(fields[i]);
  }
  fz_client_close(c);
  tu_stop(h);
}

/* Large inline inputs travel in the handle's memfds (8 slots); with 20 in
 * flight some slots are taken and the rest go inline, and a slot is reused
 * only once its job has answered: every archive must be its own input's. */
Test(libfzclient, large_inputs_in_flight_keep_their_bytes) {
  fzd_harness *h = tu_start(NULL);
  char addr[160];
  fz_client *c = connect_ok(tu_unix_addr(h, addr, sizeof addr), NULL);
  enum { NJOBS = 20, ROUNDS = 2 };
  size_t rows = 1024, cols = 256; /* 1 MiB each */
  for (int round = 0; round < ROUNDS; round++) {
    float *fields[NJOBS];
    for (int i = 0; i < NJOBS; i++) {
      fields[i] = tu_field_f32(rows, cols, (float)(i + NJOBS * round));
      fz_job j;
      job_f32(&j, fields[i], rows, cols, 1e-3);
      cr_assert_eq(fz_client_submit(c, FZ_OP_COMPRESS, &j, NULL, (void *)(intptr_t)i, NULL),
                   0, "submit %d: %s", i, fz_client_errmsg(c));
      /* The caller may reuse its buffer at once. */
      memset(fields[i] + rows * cols / 2, 0xff, 64);
      free(fields[i]);
      fields[i] = tu_field_f32(rows, cols, (float)(i + NJOBS * round));
    }
    for (int got = 0; got < NJOBS; got++) {
      fz_completion done;
      cr_assert_eq(fz_client_wait(c, 60000, &done), 1);
      int i = (int)(intptr_t)done.user;
      cr_assert_eq(done.result.status, 0, "job %d: %s", i, done.result.message);
      check_roundtrip_f32(c, fields[i], rows, cols, done.result.data, done.result.data_len,
                          1e-3);
      fz_client_free(done.result.data);
      free(fields[i]);
    }
  }
  fz_client_close(c);
  tu_stop(h);
}

typedef struct cb_state {
  int calls;
  uint64_t bytes;
} cb_state;

static void on_done(fz_client *c, uint64_t id, void *user, fz_result *res) {
  (void)c;
  (void)id;
  cb_state *s = user;
  cr_assert_eq(res->status, 0, "%s", res->message);
  s->calls++;
  s->bytes += res->bytes_in;
}

Test(libfzclient, callbacks_and_sync_calls_interleave) {
  fzd_harness *h = tu_start(NULL);
  char addr[160];
  fz_client *c = connect_ok(tu_unix_addr(h, addr, sizeof addr), NULL);
  size_t rows = 64, cols = 300;
  float *v = tu_field_f32(rows, cols, 2.0f);
  cb_state s = {0, 0};
  for (int i = 0; i < 10; i++) {
    fz_job j;
    job_f32(&j, v, rows, cols, 1e-3);
    cr_assert_eq(fz_client_submit(c, FZ_OP_COMPRESS, &j, on_done, &s, NULL), 0);
  }
  /* A synchronous call in the middle gets its own answer; the others wait. */
  fz_job j;
  job_f32(&j, v, rows, cols, 1e-2);
  fz_result r;
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "%s", r.message);
  cr_assert_eq(s.calls, 0, "callbacks run only inside fz_client_wait()");
  cr_assert_eq(fz_client_ping(c, NULL), 0);
  fz_client_free(r.data);
  while (fz_client_pending(c) > 0)
    cr_assert_eq(fz_client_wait(c, 60000, NULL), 0);
  cr_assert_eq(s.calls, 10);
  cr_assert_eq(s.bytes, 10 * rows * cols * sizeof(float));
  free(v);
  fz_client_close(c);
  tu_stop(h);
}

Test(libfzclient, server_errors_keep_the_connection) {
  fzd_harness *h = tu_start("\"max_inline_bytes\": 65536");
  char addr[160];
  fz_client *c = connect_ok(tu_unix_addr(h, addr, sizeof addr), NULL);
  fz_server_info info;
  fz_client_info(c, &info);
  cr_assert_eq(info.max_inline, 65536);
  float *v = tu_field_f32(32, 64, 0.0f);
  fz_job j;
  fz_result r;

  job_f32(&j, v, 32, 64, 1e-3);
  j.pipeline = "quant | nosuchstage";
  cr_assert_eq(fz_client_compress(c, &j, &r), FZ_EPIPELINE, "got %s: %s",
               fz_err_name(r.status), r.message);
  cr_assert_neq(r.message[0], '\0');

  job_f32(&j, v, 32, 64, 1e-3);
  j.shape[0] = 33; /* more data promised than sent */
  int rc = fz_client_compress(c, &j, &r);
  cr_assert(rc == FZ_ESIZE || rc == FZ_EPARAMS, "got %s", fz_err_name(rc));

  job_f32(&j, v, 32, 64, 1e-3);
  cr_assert_eq(fz_client_compress(c, &j, &r), 0);
  unsigned char *arc = r.data;
  arc[r.data_len / 2] ^= 0x5a;
  fz_job d;
  fz_job_init(&d);
  d.in = arc;
  d.in_len = r.data_len;
  fz_result b;
  rc = fz_client_decompress(c, &d, &b);
  cr_assert(rc == FZ_ECORRUPT || rc == FZ_EFORMAT || rc == FZ_ETRUNC,
            "a damaged archive gave %s", fz_err_name(rc));
  arc[r.data_len / 2] ^= 0x5a;

  /* The caller's buffer is too small for the answer. */
  float small[16];
  d.out = small;
  d.out_cap = sizeof small;
  cr_assert_eq(fz_client_decompress(c, &d, &b), FZ_ENOSPC);
  fz_client_free(r.data);

  /* Inline input over max_inline is refused before it is sent. */
  float *big = tu_field_f32(128, 256, 0.0f);
  job_f32(&j, big, 128, 256, 1e-3);
  cr_assert_eq(fz_client_compress(c, &j, &r), FZ_EMSGSIZE);
  cr_assert(strstr(fz_client_errmsg(c), "max_inline") != NULL, "%s", fz_client_errmsg(c));

  uint64_t t1, t2;
  cr_assert_eq(fz_client_ping(c, &t1), 0, "the connection must stay usable");
  cr_assert_eq(fz_client_ping(c, &t2), 0);
  cr_assert_geq(t2, t1, "the server clock is monotonic");
  fz_client_close(c);
  free(v);
  free(big);
  tu_stop(h);
}

Test(libfzclient, service_calls) {
  fzd_harness *h = tu_start(NULL);
  char addr[160];
  fz_client *c = connect_ok(fzd_harness_socket_path(h), NULL); /* a plain path */
  (void)addr;
  fz_preset_info p[16];
  size_t n = 0;
  cr_assert_eq(fz_client_presets(c, p, 16, &n), 0);
  bool fast = false, balanced = false, lossless = false;
  for (size_t i = 0; i < n && i < 16; i++) {
    fast |= strcmp(p[i].name, "fast") == 0;
    balanced |= strcmp(p[i].name, "balanced") == 0;
    lossless |= strcmp(p[i].name, "lossless") == 0;
    cr_assert_neq(p[i].chain[0], '\0');
  }
  cr_assert(fast && balanced && lossless, "presets: %zu", n);

  float *v = tu_field_f32(16, 1024, 0.0f);
  fz_job j;
  job_f32(&j, v, 16, 1024, 1e-3);
  fz_result r;
  cr_assert_eq(fz_client_compress(c, &j, &r), 0);
  fz_client_free(r.data);

  fz_server_status st;
  cr_assert_eq(fz_client_status(c, &st), 0);
  cr_assert_str_eq(st.backend, "cpu");
  cr_assert_eq(st.workers, 2);
  cr_assert_geq(st.connections, 1);
  cr_assert_geq(st.jobs_done, 1);
  cr_assert_gt(st.queue_capacity, 0);
  fz_server_stats ss;
  cr_assert_eq(fz_client_stats(c, &ss), 0);
  cr_assert_geq(ss.compress.count, 1);
  cr_assert_geq(ss.compress.bytes_in, 16 * 1024 * sizeof(float));
  free(v);
  fz_client_close(c);
  tu_stop(h);
}

Test(libfzclient, connect_errors) {
  char why[256];
  fz_client *c = (fz_client *)&why; /* must be reset to NULL */
  int rc = fz_client_connect(&c, "unix:/nonexistent/fzd.sock", NULL, why, sizeof why);
  cr_assert_eq(rc, FZ_ECONNREFUSED, "got %s", fz_err_name(rc));
  cr_assert_null(c);
  cr_assert(strstr(why, "/nonexistent/fzd.sock") != NULL, "%s", why);
  rc = fz_client_connect(&c, "tcp:localhost", NULL, why, sizeof why);
  cr_assert_eq(rc, FZ_EINVAL);
  cr_assert(strstr(why, "'tcp:localhost'") != NULL, "the message quotes the address: %s", why);
  rc = fz_client_connect(&c, "tcp:127.0.0.1:1", NULL, why, sizeof why);
  cr_assert_eq(rc, FZ_ECONNREFUSED, "got %s", fz_err_name(rc));
  setenv("FZD_SOCKET", "/nonexistent/env.sock", 1);
  cr_assert_str_eq(fz_client_default_address(), "/nonexistent/env.sock");
  rc = fz_client_connect(&c, NULL, NULL, why, sizeof why);
  cr_assert_eq(rc, FZ_ECONNREFUSED);
  cr_assert(strstr(why, "/nonexistent/env.sock") != NULL, "%s", why);
  fz_client_close(NULL); /* a harmless no-op */
  cr_assert_eq(fz_client_version(), (unsigned)FZCLIENT_VERSION_HEX);
  cr_assert_str_eq(fz_strerror(FZ_EAUTH), "authentication failed");
}

/* With FZD_SOCKET unset or empty the library looks for the system socket,
 * then for the one a plain user's fzd makes under XDG_RUNTIME_DIR, and names
 * the system socket when neither exists.  (Where a machine has a system
 * fzd, /run/fzd/fzd.sock exists and wins, which is checked instead.) */
Test(libfzclient, default_address_order) {
  struct stat st;
  const int system_fzd = stat("/run/fzd/fzd.sock", &st) == 0;
  char xdg[] = "/tmp/fzclient-xdg-XXXXXX";
  cr_assert_not_null(mkdtemp(xdg));
  char sub[64], sock[96];
  snprintf(sub, sizeof sub, "%s/fzd", xdg);
  snprintf(sock, sizeof sock, "%s/fzd.sock", sub);
  setenv("XDG_RUNTIME_DIR", xdg, 1);
  setenv("FZD_SOCKET", "", 1); /* empty counts as unset */
  cr_assert_str_eq(fz_client_default_address(), "/run/fzd/fzd.sock");
  cr_assert_eq(mkdir(sub, 0700), 0);
  FILE *f = fopen(sock, "w"); /* what exists is looked at, not what it is */
  cr_assert_not_null(f);
  fclose(f);
  cr_assert_str_eq(fz_client_default_address(), system_fzd ? "/run/fzd/fzd.sock" : sock);
  unsetenv("FZD_SOCKET");
  cr_assert_str_eq(fz_client_default_address(), system_fzd ? "/run/fzd/fzd.sock" : sock);
  setenv("FZD_SOCKET", "unix:/elsewhere.sock", 1);
  cr_assert_str_eq(fz_client_default_address(), "unix:/elsewhere.sock");
  unsetenv("FZD_SOCKET");
  setenv("XDG_RUNTIME_DIR", "relative/dir", 1); /* not a path to trust */
  cr_assert_str_eq(fz_client_default_address(), "/run/fzd/fzd.sock");
  unlink(sock);
  rmdir(sub);
  rmdir(xdg);
}

/* CUDA IPC jobs: the library checks them before sending (one input, one
 * output, a device, lengths, never over TCP), and a daemon on the CPU
 * backend refuses them with ENOGPU and keeps the connection. */
Test(libfzclient, ipc_jobs_checked_and_refused_on_cpu) {
  fzd_harness *h = tu_start("\"tcp_enabled\": true, \"tcp_port\": 0");
  char addr[160];
  fz_client *c = connect_ok(tu_unix_addr(h, addr, sizeof addr), NULL);
  unsigned char handle[FZ_CLIENT_IPC_HANDLE_BYTES] = {1, 2, 3};
  float v[256] = {0};
  fz_job j;
  fz_result r;

  job_f32(&j, NULL, 16, 16, 1e-3);
  j.in_len = 0;
  j.in_ipc = handle;
  cr_assert_eq(fz_client_compress(c, &j, &r), FZ_EINVAL, "no device");
  cr_assert(strstr(fz_client_errmsg(c), "UUID") != NULL, "%s", fz_client_errmsg(c));
  j.device = "GPU-00000000-0000-0000-0000-000000000000";
  j.in = v;
  cr_assert_eq(fz_client_compress(c, &j, &r), FZ_EINVAL, "two inputs");
  j.in = NULL;
  j.out_ipc = handle;
  cr_assert_eq(fz_client_compress(c, &j, &r), FZ_EINVAL, "out_ipc without out_length");
  j.out_length = 4096;
  cr_assert_eq(fz_client_compress(c, &j, &r), FZ_ENOGPU, "%s", r.message);
  cr_assert(strstr(r.message, "GPU backend") != NULL, "%s", r.message);
  fz_job d;
  fz_job_init(&d);
  d.in_ipc = handle;
  d.device = j.device;
  cr_assert_eq(fz_client_decompress(c, &d, &r), FZ_EINVAL, "decompress needs in_length");
  d.in_length = 100;
  cr_assert_eq(fz_client_decompress(c, &d, &r), FZ_ENOGPU, "%s", r.message);
  cr_assert_eq(fz_client_ping(c, NULL), 0);
  fz_client_close(c);

  c = connect_ok(tu_tcp_addr(h, addr, sizeof addr), NULL);
  cr_assert_eq(fz_client_compress(c, &j, &r), FZ_ETRANSPORT);
  fz_client_close(c);
  tu_stop(h);
}

/* VMM and pool buffers, buffer ids and events: the library checks them
 * (one kind per side, sizes, export data, device, never over TCP) and sends
 * them under the daemon's key names with the descriptor attached, which a
 * daemon on the CPU backend refuses with ENOGPU naming the key. */
Test(libfzclient, device_kinds_checked_and_refused_on_cpu) {
  fzd_harness *h = tu_start("\"tcp_enabled\": true, \"tcp_port\": 0");
  char addr[160];
  fz_client *c = connect_ok(tu_unix_addr(h, addr, sizeof addr), NULL);
  unsigned char handle[FZ_CLIENT_IPC_HANDLE_BYTES] = {1, 2, 3};
  int fd = memfd_create("stand-in", 0);
  cr_assert_geq(fd, 0);
  float v[256] = {0};
  fz_job j;
  fz_result r;

  job_f32(&j, NULL, 16, 16, 1e-3);
  j.in_len = 0;
  j.device = "GPU-00000000-0000-0000-0000-000000000000";
  j.in_vmm_fd = fd;
  cr_assert_eq(fz_client_compress(c, &j, &r), FZ_EINVAL, "VMM input without its size");
  j.in_vmm_size = 1 << 21;
  j.in_ipc = handle;
  cr_assert_eq(fz_client_compress(c, &j, &r), FZ_EINVAL, "two kinds of input");
  j.in_ipc = NULL;
  j.in_buffer_id = 77;
  cr_assert_eq(fz_client_compress(c, &j, &r), FZ_ENOGPU, "%s", r.message);
  cr_assert(strstr(r.message, "in_vmm_fd") != NULL, "%s", r.message);

  job_f32(&j, v, 16, 16, 1e-3);
  j.device = "GPU-00000000-0000-0000-0000-000000000000";
  j.out_pool_fd = fd;
  j.out_length = 4096;
  cr_assert_eq(fz_client_compress(c, &j, &r), FZ_EINVAL, "pool output without export data");
  j.out_pool_ptr = handle;
  j.out_buffer_id = 78;
  cr_assert_eq(fz_client_compress(c, &j, &r), FZ_ENOGPU, "%s", r.message);
  cr_assert(strstr(r.message, "out_pool_fd") != NULL, "%s", r.message);

  fz_job d;
  fz_job_init(&d);
  d.in_pool_fd = fd;
  d.in_pool_ptr = handle;
  d.in_length = 100;
  cr_assert_eq(fz_client_decompress(c, &d, &r), FZ_EINVAL, "no device");
  d.device = j.device;
  d.out_vmm_fd = fd;
  d.out_vmm_size = 1 << 21;
  d.out_length = 4096;
  cr_assert_eq(fz_client_decompress(c, &d, &r), FZ_ENOGPU, "%s", r.message);
  cr_assert(strstr(r.message, "in_pool_fd") != NULL, "%s", r.message);

  job_f32(&j, v, 16, 16, 1e-3);
  j.wait_event = handle;
  cr_assert_eq(fz_client_compress(c, &j, &r), FZ_EINVAL, "an event without device");
  j.device = d.device;
  cr_assert_eq(fz_client_compress(c, &j, &r), FZ_ENOGPU, "%s", r.message);
  cr_assert(strstr(r.message, "wait_event") != NULL, "%s", r.message);
  j.wait_event = NULL;
  j.done_event = handle;
  cr_assert_eq(fz_client_compress(c, &j, &r), FZ_ENOGPU, "%s", r.message);
  cr_assert(strstr(r.message, "done_event") != NULL, "%s", r.message);
  cr_assert_eq(fz_client_ping(c, NULL), 0);
  fz_client_close(c);

  c = connect_ok(tu_tcp_addr(h, addr, sizeof addr), NULL);
  cr_assert_eq(fz_client_compress(c, &j, &r), FZ_ETRANSPORT);
  cr_assert_eq(fz_client_decompress(c, &d, &r), FZ_ETRANSPORT);
  fz_client_close(c);
  close(fd);
  tu_stop(h);
}

/* Shared buffers: with max_inline_bytes at 4 KiB the daemon refuses every
 * inline payload larger than that, so these jobs succeed only if the input
 * and the output really travel as the buffers' descriptors. */
Test(libfzclient, shared_buffers_in_place) {
  fzd_harness *h = tu_start("\"max_inline_bytes\": 4096");
  char addr[160];
  fz_client *c = connect_ok(tu_unix_addr(h, addr, sizeof addr), NULL);
  size_t rows = 100, cols = 160, n = rows * cols, raw = n * sizeof(float);
  float *v = tu_field_f32(rows, cols, 0.7f);
  cr_assert_null(fz_client_buffer_alloc(c, 0));
  cr_assert_neq(fz_client_errmsg(c)[0], '\0');

  /* The input sits at an offset inside its buffer; the archive goes to an
   * offset of another, with a canary after the region given. */
  char *in = fz_client_buffer_alloc(c, raw + 4096);
  char *out = fz_client_buffer_alloc(c, 2 * raw);
  cr_assert(in && out, "%s", fz_client_errmsg(c));
  memcpy(in + 4096, v, raw);
  memset(out, 0xa5, 2 * raw);
  fz_job j;
  job_f32(&j, (const float *)(in + 4096), rows, cols, 1e-3);
  j.verify = 1;
  j.out = out + 100;
  j.out_cap = raw;
  fz_result r;
  int rc = fz_client_compress(c, &j, &r);
  cr_assert_eq(rc, 0, "compress: %s: %s", fz_strerror(rc), r.message);
  cr_assert_eq(r.data, (void *)(out + 100), "the archive is where out points");
  cr_assert_eq(r.data_len, r.bytes_out);
  cr_assert_gt(r.bytes_out, 4096, "the archive must be too large to come inline");
  cr_assert_eq((unsigned char)out[99], 0xa5, "nothing is written before the region");
  cr_assert_eq((unsigned char)out[100 + r.bytes_out], 0xa5, "nor after the archive");
  cr_assert_leq(r.max_error, 1e-3 * tu_range_f32(v, n));
  size_t arc_len = r.data_len;

  /* Back again, from the shared archive into a third buffer. */
  float *back = fz_client_buffer_alloc(c, raw);
  cr_assert_not_null(back);
  fz_job d;
  fz_job_init(&d);
  d.in = out + 100;
  d.in_len = arc_len;
  d.out = back;
  d.out_cap = raw;
  rc = fz_client_decompress(c, &d, &r);
  cr_assert_eq(rc, 0, "decompress: %s: %s", fz_strerror(rc), r.message);
  cr_assert_eq(r.data, (void *)back);
  cr_assert_eq(r.bytes_out, raw);
  fz_compare_result cmp;
  cr_assert_eq(fz_compare(FZ_F32, v, back, n, &cmp), 0);
  cr_assert_leq(cmp.max_abs_error, 1e-3 * tu_range_f32(v, n));

  /* An output region too small: ENOSPC, and the region's neighbour intact. */
  memset(out, 0xa5, 2 * raw);
  j.out = out;
  j.out_cap = 64;
  rc = fz_client_compress(c, &j, &r);
  cr_assert_eq(rc, FZ_ENOSPC, "got %s: %s", fz_err_name(rc), r.message);
  cr_assert_not_null(strstr(r.message, "out_length"), "%s", r.message);
  for (size_t i = 0; i < 2 * raw; i++)
    cr_assert_eq((unsigned char)out[i], 0xa5, "byte %zu was written", i);

  /* Output over the input: refused before anything is sent. */
  job_f32(&j, (const float *)(in + 4096), rows, cols, 1e-3);
  j.out = in;
  j.out_cap = 8192;
  rc = fz_client_compress(c, &j, &r);
  cr_assert_eq(rc, FZ_EINVAL, "got %s: %s", fz_err_name(rc), r.message);
  cr_assert_eq(fz_client_pending(c), 0);

  /* A region that runs past the buffer's end is ordinary memory: it goes
   * inline, which this daemon refuses for its size. */
  job_f32(&j, (const float *)(in + 4096 + 4), rows, cols, 1e-3);
  j.in_len = raw;
  rc = fz_client_compress(c, &j, &r);
  cr_assert_eq(rc, FZ_EMSGSIZE, "got %s: %s", fz_err_name(rc), r.message);

  /* The same buffers serve again after new data is written into them. */
  for (size_t i = 0; i < n; i++)
    v[i] = -v[i];
  memcpy(in + 4096, v, raw);
  job_f32(&j, (const float *)(in + 4096), rows, cols, 1e-3);
  j.verify = 1;
  j.out = out;
  j.out_cap = 2 * raw;
  rc = fz_client_compress(c, &j, &r);
  cr_assert_eq(rc, 0, "compress again: %s: %s", fz_strerror(rc), r.message);
  cr_assert_leq(r.max_error, 1e-3 * tu_range_f32(v, n));
  d.in = out;
  d.in_len = r.bytes_out;
  rc = fz_client_decompress(c, &d, &r);
  cr_assert_eq(rc, 0, "decompress again: %s: %s", fz_strerror(rc), r.message);
  cr_assert_eq(fz_compare(FZ_F32, v, back, n, &cmp), 0);
  cr_assert_leq(cmp.max_abs_error, 1e-3 * tu_range_f32(v, n));

  fz_client_buffer_free(c, back);
  fz_client_buffer_free(c, in);
  /* `out` is left for fz_client_close() to free. */
  fz_client_close(c);
  free(v);
  tu_stop(h);
}

/* Noise that no pipeline shrinks much: its archive is about as large as the
 * array itself. */
static float *noise_f32(size_t n, uint32_t seed) {
  float *v = malloc(n * sizeof *v);
  cr_assert_not_null(v);
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = (float)(seed >> 8) / 65536.0f - 128.0f;
  }
  return v;
}

Test(libfzclient, results_over_max_inline_come_through_a_memfd) {
  fzd_harness *h = tu_start("\"max_inline_bytes\": 65536");
  char addr[160];
  fz_client *c = connect_ok(tu_unix_addr(h, addr, sizeof addr), NULL);
  size_t rows = 256, cols = 1024, n = rows * cols; /* 1 MiB, 16 x max_inline */
  float *v = noise_f32(n, 7);
  fz_job j;
  job_f32(&j, v, rows, cols, 0);
  j.pipeline = "lossless";
  fz_result r;
  int rc = fz_client_compress(c, &j, &r);
  cr_assert_eq(rc, 0, "compress: %s: %s", fz_err_name(rc), r.message);
  cr_assert_gt(r.data_len, 65536, "the archive is over max_inline (%zu bytes)", r.data_len);
  cr_assert_eq(r.data_len, r.bytes_out);

  /* The bound the library gives covers the archive. */
  uint64_t bound = 0;
  char why[256];
  cr_assert_eq(fz_client_compress_bound(&j, &bound, why, sizeof why), 0, "%s", why);
  cr_assert_geq(bound, r.bytes_out);

  /* Decompressed inline into a library buffer, and into the caller's. */
  fz_job d;
  fz_job_init(&d);
  d.in = r.data;
  d.in_len = r.data_len;
  fz_result b;
  rc = fz_client_decompress(c, &d, &b);
  cr_assert_eq(rc, 0, "decompress: %s: %s", fz_err_name(rc), b.message);
  cr_assert_eq(b.data_len, n * sizeof(float));
  cr_assert_eq(memcmp(b.data, v, n * sizeof(float)), 0, "lossless is bit-exact");
  fz_client_free(b.data);
  float *back = malloc(n * sizeof *back);
  d.out = back;
  d.out_cap = n * sizeof *back;
  rc = fz_client_decompress(c, &d, &b);
  cr_assert_eq(rc, 0, "decompress into out: %s: %s", fz_err_name(rc), b.message);
  cr_assert_eq(b.data, (void *)back);
  cr_assert_eq(memcmp(back, v, n * sizeof(float)), 0);
  /* A caller's buffer too small for it is still ENOSPC. */
  d.out_cap = 65536 * 2;
  cr_assert_eq(fz_client_decompress(c, &d, &b), FZ_ENOSPC, "got %s: %s",
               fz_err_name(b.status), b.message);
  cr_assert_eq(fz_client_ping(c, NULL), 0);
  fz_client_free(r.data);
  free(back);
  free(v);
  fz_client_close(c);
  tu_stop(h);
}

Test(libfzclient, compress_bound_and_archive_info_without_daemon) {
  fz_job j;
  float *v = tu_field_f32(40, 50, 0.3f);
  job_f32(&j, v, 40, 50, 1e-3);
  uint64_t bound = 0;
  char why[256];
  cr_assert_eq(fz_client_compress_bound(&j, &bound, why, sizeof why), 0, "%s", why);
  cr_assert_geq(bound, 40 * 50 * sizeof(float));
  j.pipeline = "quant | nosuchstage";
  cr_assert_eq(fz_client_compress_bound(&j, &bound, why, sizeof why), FZ_EPIPELINE);
  cr_assert(strstr(why, "nosuchstage") != NULL, "%s", why);
  j.pipeline = NULL;
  j.eb = 0;
  cr_assert_eq(fz_client_compress_bound(&j, &bound, NULL, 0), FZ_EBOUND);
  cr_assert_eq(fz_client_compress_bound(NULL, &bound, NULL, 0), FZ_EINVAL);

  /* An archive made by the engine, read back by the library. */
  fz_params p;
  fz_params_init(&p);
  p.dtype = FZ_F32;
  p.ndims = 2;
  p.dims[0] = 40;
  p.dims[1] = 50;
  p.eb = 1e-3;
  fz_plan *plan;
  cr_assert_eq(fz_plan_create(&p, &plan, NULL, 0), 0);
  size_t cap = fz_plan_compress_bound(plan), len = 0;
  unsigned char *arc = malloc(cap);
  cr_assert_eq(fz_plan_compress(plan, v, 40 * 50 * sizeof(float), arc, cap, &len), 0);
  fz_client_archive a;
  cr_assert_eq(fz_client_archive_info(arc, len, &a), 0);
  cr_assert_str_eq(a.dtype, "f32");
  cr_assert_eq(a.ndims, 2);
  cr_assert_eq(a.shape[0], 40);
  cr_assert_eq(a.shape[1], 50);
  cr_assert_eq(a.raw_bytes, 40 * 50 * sizeof(float));
  cr_assert_eq(a.archive_bytes, len);
  cr_assert_gt(a.chunks, 0);
  cr_assert_gt(a.eb_abs, 0.0);
  cr_assert_str_eq(a.chain, fz_plan_chain(plan));
  cr_assert_eq(fz_client_archive_info(arc, len - 1, &a), FZ_ETRUNC);
  arc[9] ^= 0x40; /* a shape byte: the header checksum catches it */
  cr_assert_lt(fz_client_archive_info(arc, len, &a), 0);
  cr_assert_eq(fz_client_archive_info("nope", 4, &a), FZ_EFORMAT);
  cr_assert_eq(fz_client_archive_info(NULL, 0, &a), FZ_EINVAL);
  fz_plan_destroy(plan);
  free(arc);
  free(v);
}

Test(libfzclient, pwrel_results_carry_the_relative_error) {
  fzd_harness *h = tu_start(NULL);
  char addr[160];
  fz_client *c = connect_ok(tu_unix_addr(h, addr, sizeof addr), NULL);
  size_t rows = 64, cols = 128, n = rows * cols;
  float *v = tu_field_f32(rows, cols, 0.1f);
  for (size_t i = 0; i < n; i++)
    v[i] += 500.0f; /* values far from 0: the absolute error is far above 1e-4 */
  fz_job j;
  job_f32(&j, v, rows, cols, 1e-4);
  j.mode = "pwrel";
  j.verify = 1;
  fz_result r;
  int rc = fz_client_compress(c, &j, &r);
  cr_assert_eq(rc, 0, "%s: %s", fz_err_name(rc), r.message);
  cr_assert(r.has_max_error && r.has_max_rel_error, "verify reports both errors");
  cr_assert_leq(r.max_rel_error, 1e-4, "pointwise bound exceeded: %g", r.max_rel_error);
  cr_assert_gt(r.max_error, 1e-4, "the absolute error is the other number (%g)", r.max_error);
  fz_compare_result cmp;
  float *back = malloc(n * sizeof *back);
  fz_job d;
  fz_job_init(&d);
  d.in = r.data;
  d.in_len = r.data_len;
  d.out = back;
  d.out_cap = n * sizeof *back;
  fz_result b;
  cr_assert_eq(fz_client_decompress(c, &d, &b), 0);
  cr_assert_eq(fz_compare(FZ_F32, v, back, n, &cmp), 0);
  cr_assert_eq(r.max_rel_error, cmp.max_rel_error, "the server's relative error is the real one");
  fz_client_free(r.data);
  free(back);
  free(v);
  fz_client_close(c);
  tu_stop(h);
}

Test(libfzclient, append_mode_output_is_refused) {
  fzd_harness *h = tu_start(NULL);
  char addr[160];
  fz_client *c = connect_ok(tu_unix_addr(h, addr, sizeof addr), NULL);
  char path[256];
  snprintf(path, sizeof path, "%s/old.fz", fzd_harness_dir(h));
  tu_write_file(path, "old contents", 12);
  int fd = open(path, O_RDWR | O_APPEND);
  cr_assert_geq(fd, 0);
  float *v = tu_field_f32(32, 64, 0.0f);
  fz_job j;
  job_f32(&j, v, 32, 64, 1e-3);
  j.out_fd = fd;
  fz_result r;
  int rc = fz_client_compress(c, &j, &r);
  cr_assert_eq(rc, FZ_EINVAL, "an O_APPEND output gave %s: %s", fz_err_name(rc), r.message);
  cr_assert(strstr(fz_client_errmsg(c), "O_APPEND") != NULL, "%s", fz_client_errmsg(c));
  size_t len;
  char *back = tu_read_file(path, &len);
  cr_assert_eq(len, 12);
  cr_assert_eq(memcmp(back, "old contents", 12), 0, "the file is untouched");
  free(back);
  close(fd);
  cr_assert_eq(unlink(path), 0);
  cr_assert_eq(fz_client_ping(c, NULL), 0);
  free(v);
  fz_client_close(c);
  tu_stop(h);
}

/* The pid of the daemon an address reaches, or the connect error. */
static long daemon_pid_at(const char *address, char *why, size_t why_len) {
  fz_client *c = NULL;
  int rc = fz_client_connect(&c, address, NULL, why, why_len);
  if (rc < 0)
    return rc;
  fz_server_info info;
  fz_client_info(c, &info);
  fz_client_close(c);
  return (long)info.pid;
}

Test(libfzclient, address_template_picks_the_daemon_of_the_local_rank) {
  /* Two daemons, one per "GPU", reached as gpu0.sock and gpu1.sock. */
  fzd_harness *h0 = tu_start(NULL), *h1 = tu_start(NULL);
  char dir[] = "/tmp/fzd-ranks-XXXXXX", l0[64], l1[64], tmpl[96], why[256];
  cr_assert_not_null(mkdtemp(dir));
  snprintf(l0, sizeof l0, "%s/gpu0.sock", dir);
  snprintf(l1, sizeof l1, "%s/gpu1.sock", dir);
  cr_assert_eq(symlink(fzd_harness_socket_path(h0), l0), 0);
  cr_assert_eq(symlink(fzd_harness_socket_path(h1), l1), 0);
  snprintf(tmpl, sizeof tmpl, "unix:%s/gpu%%l.sock", dir);
  const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                        "PMIX_LOCAL_RANK", "PMI_LOCAL_RANK", "FZD_DAEMONS_PER_NODE"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
    unsetenv(vars[i]);

  /* No launcher variable: a clear refusal that names them. */
  long pid = daemon_pid_at(tmpl, why, sizeof why);
  cr_assert_eq(pid, FZ_EINVAL, "connected without a local rank");
  cr_assert(strstr(why, "SLURM_LOCALID") != NULL, "%s", why);

  /* Each launcher's variable picks its daemon. */
  for (size_t i = 0; i < 5; i++) {
    setenv(vars[i], "1", 1);
    pid = daemon_pid_at(tmpl, why, sizeof why);
    cr_assert_eq(pid, (long)fzd_harness_pid(h1), "%s=1 reached pid %ld: %s", vars[i], pid, why);
    setenv(vars[i], "0", 1);
    pid = daemon_pid_at(tmpl, why, sizeof why);
    cr_assert_eq(pid, (long)fzd_harness_pid(h0), "%s=0 reached pid %ld: %s", vars[i], pid, why);
    unsetenv(vars[i]);
  }
  /* Eight ranks on two daemons: rank 3 shares the second one. */
  setenv("SLURM_LOCALID", "3", 1);
  setenv("FZD_DAEMONS_PER_NODE", "2", 1);
  pid = daemon_pid_at(tmpl, why, sizeof why);
  cr_assert_eq(pid, (long)fzd_harness_pid(h1), "rank 3 of 2 daemons: %s", why);
  /* Bad values and templates are refused, quoting them. */
  setenv("FZD_DAEMONS_PER_NODE", "0", 1);
  cr_assert_eq(daemon_pid_at(tmpl, why, sizeof why), FZ_EINVAL);
  cr_assert(strstr(why, "FZD_DAEMONS_PER_NODE is '0'") != NULL, "%s", why);
  unsetenv("FZD_DAEMONS_PER_NODE");
  setenv("SLURM_LOCALID", "one", 1);
  cr_assert_eq(daemon_pid_at(tmpl, why, sizeof why), FZ_EINVAL);
  cr_assert(strstr(why, "'one'") != NULL, "%s", why);
  cr_assert_eq(daemon_pid_at("unix:/tmp/gpu%d.sock", why, sizeof why), FZ_EINVAL);
  cr_assert(strstr(why, "'%d'") != NULL, "%s", why);

  unlink(l0);
  unlink(l1);
  rmdir(dir);
  tu_stop(h0);
  tu_stop(h1);
}

/* A fill value travels with the job (fill_value on the wire): the fill cells
 * come back bit for bit, the chain that ran names the fill, the REL bound is
 * scaled by the range of the other values alone, and the same plan is not
 * reused for a job without a fill.  A chain bound that disagrees with the
 * job's is refused with both quoted. */
Test(libfzclient, fill_value_and_one_bound) {
  fzd_harness *h = tu_start(NULL);
  char addr[160];
  fz_client *c = connect_ok(tu_unix_addr(h, addr, sizeof addr), NULL);
  size_t rows = 64, cols = 128, n = rows * cols;
  float *v = tu_field_f32(rows, cols, 0.1f);
  float lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < n; i++) {
    if (i % 5 == 0) {
      v[i] = -1e10f;
      continue;
    }
    lo = v[i] < lo ? v[i] : lo;
    hi = v[i] > hi ? v[i] : hi;
  }
  float *back = malloc(n * sizeof *back);
  for (int with_fill = 1; with_fill >= 0; with_fill--) {
    fz_job j;
    job_f32(&j, v, rows, cols, 1e-3);
    j.has_fill = with_fill;
    j.fill_value = -1e10;
    fz_result r;
    int rc = fz_client_compress(c, &j, &r);
    cr_assert_eq(rc, 0, "compress: %s: %s", fz_strerror(rc), r.message);
    double want = 1e-3 * ((double)hi - lo);
    if (with_fill) {
      cr_assert(strstr(r.chain, "fill=-10000000000") != NULL, "%s", r.chain);
      cr_assert(r.eb_abs <= want && r.eb_abs > 0.999 * want, "eb_abs %g, want %g", r.eb_abs, want);
    } else {
      cr_assert(strstr(r.chain, "fill") == NULL, "%s", r.chain);
      cr_assert_gt(r.eb_abs, 1e6, "without the fill the range spans -1e10: eb_abs %g", r.eb_abs);
    }
    fz_job d;
    fz_job_init(&d);
    d.in = r.data;
    d.in_len = r.data_len;
    d.out = back;
    d.out_cap = n * sizeof *back;
    fz_result b;
    rc = fz_client_decompress(c, &d, &b);
    cr_assert_eq(rc, 0, "decompress: %s: %s", fz_strerror(rc), b.message);
    if (with_fill)
      for (size_t i = 0; i < n; i++) {
        if (i % 5 == 0)
          cr_assert(memcmp(&v[i], &back[i], 4) == 0, "fill at %zu came back as %g", i, back[i]);
        else
          cr_assert_leq(fabs((double)v[i] - back[i]), want, "value %zu", i);
      }
    fz_client_free(r.data);
  }
  /* One bound per job. */
  fz_job j;
  job_f32(&j, v, rows, cols, 1e-4);
  j.mode = "abs";
  j.pipeline = "quant(eb=1e-2,mode=pwrel) | bitpack";
  fz_result r;
  cr_assert_eq(fz_client_compress(c, &j, &r), FZ_EPIPELINE, "got %s: %s", fz_err_name(r.status),
               r.message);
  cr_assert(strstr(r.message, "0.0001") && strstr(r.message, "eb=0.01,mode=pwrel"), "%s",
            r.message);
  free(back);
  free(v);
  fz_client_close(c);
  tu_stop(h);
}

/* The daemon's one plan cache, as "stats" counts it: the workers share
 * plans, a preset and its spelled-out chain are one plan, a new shape is a
 * new plan. */
Test(libfzclient, stats_count_the_plan_cache) {
  fzd_harness *h = tu_start("\"workers\": 2");
  char addr[160];
  fz_client *c = connect_ok(tu_unix_addr(h, addr, sizeof addr), NULL);
  size_t rows = 64, cols = 80;
  float *v = tu_field_f32(rows, cols, 0.4f);
  const char *pipelines[] = {"balanced", "balanced", "quant | diff | bitshuffle | rze", NULL};
  fz_job j;
  fz_result r;
  for (size_t i = 0; i < 4; i++) {
    /* The last job is another shape: half the rows. */
    job_f32(&j, v, i < 3 ? rows : rows / 2, cols, 1e-3);
    j.pipeline = pipelines[i];
    cr_assert_eq(fz_client_compress(c, &j, &r), 0, "job %zu: %s", i, r.message);
    fz_client_free(r.data);
  }
  fz_server_stats st;
  cr_assert_eq(fz_client_stats(c, &st), 0);
  cr_assert_eq(st.plans_created, 2, "plans made: %llu", (unsigned long long)st.plans_created);
  cr_assert_eq(st.plan_hits, 2, "plans found ready: %llu", (unsigned long long)st.plan_hits);
  cr_assert_eq(st.plans_held, 2);
  cr_assert_eq(st.plans_dropped, 0);
  cr_assert_gt(st.plan_bytes, 0);
  cr_assert_eq(st.plan_budget, 2147483648u);
  cr_assert_eq(st.plans_transient, 0);
  cr_assert_eq(st.has_jit, 0, "the CPU backend reports a JIT");
  fz_client_close(c);
  free(v);
  tu_stop(h);
}

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The stages "stats" reports for a direction: each job's parse, queue,
 * worker and reply times add up to less than the client waited for it, and
 * the worker's whole run holds the backend's own time.  Decompressions are
 * counted apart from compressions. */
Test(libfzclient, stats_split_the_daemons_time_into_stages) {
  fzd_harness *h = tu_start("\"workers\": 2");
  char addr[160];
  fz_client *c = connect_ok(tu_unix_addr(h, addr, sizeof addr), NULL);
  size_t rows = 256, cols = 1024;
  float *v = tu_field_f32(rows, cols, 0.3f);
  fz_job j;
  fz_result r;
  job_f32(&j, v, rows, cols, 1e-3);
  const unsigned jobs = 20;
  uint64_t waited = 0;
  for (unsigned i = 0; i < jobs; i++) {
    uint64_t t0 = mono_ns();
    cr_assert_eq(fz_client_compress(c, &j, &r), 0, "job %u: %s", i, r.message);
    waited += mono_ns() - t0;
    fz_client_free(r.data);
  }
  fz_server_stats st;
  cr_assert_eq(fz_client_stats(c, &st), 0);
  const fz_op_stats *op = &st.compress;
  cr_assert_eq(op->count, jobs);
  cr_assert_gt(op->worker_us, 0);
  cr_assert_geq(op->worker_us, op->time_us, "worker %llu us, backend %llu us",
                (unsigned long long)op->worker_us, (unsigned long long)op->time_us);
  uint64_t inside = op->parse_us + op->queue_us + op->worker_us + op->reply_us;
  waited /= 1000u; /* microseconds, rounded down once, as the daemon's sums are */
  cr_assert_leq(inside, waited, "stages %llu us, client waited %llu us",
                (unsigned long long)inside, (unsigned long long)waited);
  cr_assert_eq(st.decompress.count, 0);
  cr_assert_eq(st.decompress.worker_us + st.decompress.parse_us + st.decompress.queue_us +
                   st.decompress.reply_us, 0);
  fz_client_close(c);
  free(v);
  tu_stop(h);
}

/* A daemon that polls without sleeping (busy_poll_us, the GPU backend's
 * default, here on the CPU backend): one job at a time, answered while the
 * loop polls and the finished jobs are collected without a wake-up; a burst
 * that queues behind the one spinning worker and must spread over the
 * others; and a job after the loop and the workers went back to sleep,
 * whose request must wake them. */
Test(libfzclient, busy_polling_daemon_answers_every_job) {
  fzd_harness *h = tu_start("\"workers\": 3, \"busy_poll_us\": 2000");
  char addr[160];
  fz_client *c = connect_ok(tu_unix_addr(h, addr, sizeof addr), NULL);
  size_t rows = 64, cols = 256;
  float *v = tu_field_f32(rows, cols, 0.7f);
  fz_job j;
  fz_result r;
  job_f32(&j, v, rows, cols, 1e-3);
  for (int i = 0; i < 40; i++) {
    cr_assert_eq(fz_client_compress(c, &j, &r), 0, "job %d: %s", i, r.message);
    if (i % 8 == 0)
      check_roundtrip_f32(c, v, rows, cols, r.data, r.data_len, 1e-3);
    fz_client_free(r.data);
  }
  enum { BURST = 16 };
  for (int i = 0; i < BURST; i++)
    cr_assert_eq(fz_client_submit(c, FZ_OP_COMPRESS, &j, NULL, NULL, NULL), 0, "submit %d", i);
  for (int i = 0; i < BURST; i++) {
    fz_completion done;
    cr_assert_eq(fz_client_wait(c, 30000, &done), 1, "completion %d of the burst", i);
    cr_assert_eq(done.result.status, 0, "%s", done.result.message);
    fz_client_free(done.result.data);
  }
  struct timespec pause = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
  nanosleep(&pause, NULL); /* ten times busy_poll_us: the loop sleeps again */
  cr_assert_eq(fz_client_compress(c, &j, &r), 0, "after a pause: %s", r.message);
  check_roundtrip_f32(c, v, rows, cols, r.data, r.data_len, 1e-3);
  fz_client_free(r.data);
  fz_server_stats st;
  cr_assert_eq(fz_client_stats(c, &st), 0);
  cr_assert_eq(st.compress.count, 40 + BURST + 1);
  cr_assert_eq(st.jobs_failed, 0);
  fz_client_close(c);
  free(v);
  tu_stop(h);
}

/* fz_client_warm(): a new plan is made, a warmed one is cached, a bad plan
 * fails alone with its index, and the first job of a warmed shape finds its
 * plan; the count is checked before anything is sent. */
Test(libfzclient, warm_prepares_plans) {
  fzd_harness *h = tu_start("\"workers\": 2");
  char addr[160];
  fz_client *c = connect_ok(tu_unix_addr(h, addr, sizeof addr), NULL);
  fz_warm_plan p[3] = {
      {.dtype = "f32", .ndims = 2, .shape = {64, 80}, .eb = 1e-3},
      {.dtype = "f32", .ndims = 1, .shape = {100}, .eb = 1e-3, .pipeline = "quant | zap"},
      {.dtype = "f64", .ndims = 1, .shape = {5000}, .eb = 1e-6, .mode = "abs",
       .pipeline = "fast"}};
  fz_warm_result r[3];
  cr_assert_eq(fz_client_warm(c, p, 3, r), 0, "%s", fz_client_errmsg(c));
  cr_assert_eq(r[0].status, 0, "%s", r[0].message);
  cr_assert_eq(r[0].cached, 0);
  cr_assert_str_eq(r[0].chain, "quant(eb=0.001,mode=rel) | diff(map=zigzag) | bitshuffle | "
                               "rze(levels=4)");
  cr_assert_eq(r[1].status, FZ_EPIPELINE, "%s", fz_err_name(r[1].status));
  cr_assert(strncmp(r[1].message, "plans[1]: ", 10) == 0, "%s", r[1].message);
  cr_assert_eq(r[2].status, 0, "%s", r[2].message);
  cr_assert_geq(r[2].ms, 0.0);
  cr_assert_eq(fz_client_warm(c, p, 1, r), 0);
  cr_assert_eq(r[0].cached, 1);
  fz_server_stats st;
  cr_assert_eq(fz_client_stats(c, &st), 0);
  uint64_t hits = st.plan_hits;
  cr_assert_eq(st.plans_held, 2);
  float *v = tu_field_f32(64, 80, 0.4f);
  fz_job j;
  fz_result res;
  job_f32(&j, v, 64, 80, 1e-3);
  j.mode = "rel";
  cr_assert_eq(fz_client_compress(c, &j, &res), 0, "%s", res.message);
  fz_client_free(res.data);
  cr_assert_eq(fz_client_stats(c, &st), 0);
  cr_assert_eq(st.plan_hits, hits + 1);
  fz_warm_plan many[FZ_CLIENT_WARM_MAX + 1];
  fz_warm_result mr[FZ_CLIENT_WARM_MAX + 1];
  for (size_t i = 0; i <= FZ_CLIENT_WARM_MAX; i++)
    many[i] = p[0];
  cr_assert_eq(fz_client_warm(c, many, FZ_CLIENT_WARM_MAX + 1, mr), FZ_EPARAMS);
  cr_assert_eq(fz_client_warm(c, many, 0, mr), FZ_EPARAMS);
  free(v);
  fz_client_close(c);
  tu_stop(h);
}
