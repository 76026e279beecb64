/*
 * test_service.c - fzd serving well-behaved clients: the handshake, the small
 * methods, compress/decompress round trips inline and through descriptors,
 * and many clients at once.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fz.h"
#include "jobs_util.h"

static bool str_is(const msgpack_object *map, const char *key, const char *want) {
  const char *s;
  uint32_t len;
  return fzp_get_str(map, key, &s, &len) == 1 && len == strlen(want) &&
         memcmp(s, want, len) == 0;
}

Test(service, handshake_and_small_methods) {
  fzd_harness *h = start_daemon("\"workers\": 2");
  wire w;
  wire_open(&w, h, false);

  msgpack_packer *pk = wire_begin(&w, 7, "hello", 2);
  fzp_pack_key(pk, "version");
  msgpack_pack_int(pk, 1);
  fzp_pack_key(pk, "client");
  fzp_pack_key(pk, "t");
  cr_assert_eq(wire_send(&w, NULL, 0), 0);
  fzp_message m;
  cr_assert_eq(wire_recv(&w, &m, 10000), 0);
  cr_assert_eq(m.msgid, 7u);
  cr_assert_eq(wire_code(&m), 0);
  uint64_t v = 0, pid = 0, max_inline = 0;
  cr_assert_eq(fzp_get_u64(&m.result, "version", &v), 1);
  cr_assert_eq(v, 1u);
  cr_assert(str_is(&m.result, "server", "fzd " FZ_VERSION_STRING));
  cr_assert(str_is(&m.result, "backend", "cpu"));
  cr_assert_eq(fzp_get_u64(&m.result, "pid", &pid), 1);
  cr_assert_eq((pid_t)pid, fzd_harness_pid(h));
  cr_assert_eq(fzp_get_u64(&m.result, "max_inline", &max_inline), 1);
  cr_assert_eq(max_inline, 64u << 20);
  fzp_message_free(&m);

  cr_assert_eq(wire_call0(&w, 8, "ping", &m), 0);
  uint64_t t1 = 0, t2 = 0;
  cr_assert_eq(fzp_get_u64(&m.result, "time_ns", &t1), 1);
  fzp_message_free(&m);
  cr_assert_eq(wire_call0(&w, 9, "ping", &m), 0);
  cr_assert_eq(fzp_get_u64(&m.result, "time_ns", &t2), 1);
  cr_assert_gt(t2, t1);
  fzp_message_free(&m);

  cr_assert_eq(wire_call0(&w, 10, "status", &m), 0);
  uint64_t workers = 0, conns = 0, cap = 0;
  cr_assert_eq(fzp_get_u64(&m.result, "workers", &workers), 1);
  cr_assert_eq(workers, 2u);
  cr_assert_eq(fzp_get_u64(&m.result, "connections", &conns), 1);
  cr_assert_eq(conns, 1u);
  cr_assert_eq(fzp_get_u64(&m.result, "queue_capacity", &cap), 1);
  cr_assert_eq(cap, 256u);
  cr_assert(str_is(&m.result, "backend", "cpu"));
  fzp_message_free(&m);

  cr_assert_eq(wire_call0(&w, 11, "presets", &m), 0);
  const msgpack_object *ps;
  cr_assert_eq(fzp_get_obj(&m.result, "presets", &ps), 1);
  cr_assert_eq(ps->type, MSGPACK_OBJECT_ARRAY);
  size_t n = 0;
  fz_presets(&n);
  cr_assert_eq(ps->via.array.size, n);
  bool balanced = false;
  for (uint32_t i = 0; i < ps->via.array.size; i++)
    balanced |= str_is(&ps->via.array.ptr[i], "name", "balanced");
  cr_assert(balanced);
  fzp_message_free(&m);

  cr_assert_eq(wire_call0(&w, 12, "stats", &m), 0);
  uint64_t done = 99;
  cr_assert_eq(fzp_get_u64(&m.result, "jobs_done", &done), 1);
  cr_assert_eq(done, 0u);
  const msgpack_object *comp;
  cr_assert_eq(fzp_get_obj(&m.result, "compress", &comp), 1);
  cr_assert_eq(comp->type, MSGPACK_OBJECT_MAP);
  fzp_message_free(&m);

  wire_close(&w);
  stop_daemon(h);
}

Test(service, inline_roundtrip_and_stats) {
  fzd_harness *h = start_daemon(NULL);
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  size_t n = 100000;
  float *x = malloc(n * sizeof(float));
  wire_field_f32(x, n, 1);
  roundtrip_inline(&w, 100, x, n, 1e-2);
  roundtrip_inline(&w, 200, x, n, 1e-4);

  fzp_message m;
  cr_assert_eq(wire_call0(&w, 300, "stats", &m), 0);
  uint64_t done = 0, failed = 9;
  cr_assert_eq(fzp_get_u64(&m.result, "jobs_done", &done), 1);
  cr_assert_eq(fzp_get_u64(&m.result, "jobs_failed", &failed), 1);
  cr_assert_eq(done, 4u);
  cr_assert_eq(failed, 0u);
  const msgpack_object *comp;
  uint64_t count = 0;
  cr_assert_eq(fzp_get_obj(&m.result, "compress", &comp), 1);
  cr_assert_eq(fzp_get_u64(comp, "count", &count), 1);
  cr_assert_eq(count, 2u);
  fzp_message_free(&m);
  free(x);
  wire_close(&w);
  stop_daemon(h);
}

/* A memfd holding bytes; sealed against shrinking when asked, which lets the
 * daemon map it instead of reading it. */
static int memfd_with(const void *bytes, size_t len, bool sealed) {
  int fd = memfd_create("fzd-test", MFD_CLOEXEC | (sealed ? MFD_ALLOW_SEALING : 0));
  cr_assert_geq(fd, 0);
  cr_assert_eq(write(fd, bytes, len), (ssize_t)len);
  if (sealed)
    cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  return fd;
}

static void descriptor_roundtrip(bool sealed) {
  fzd_harness *h = start_daemon(NULL);
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  size_t n = 3 * 50000;
  float *x = malloc(n * sizeof(float));
  wire_field_f32(x, n, 2);
  /* The input sits after a 100-byte header, as in a file with a preamble. */
  char *file = malloc(100 + n * sizeof(float));
  memset(file, 0x5a, 100);
  memcpy(file + 100, x, n * sizeof(float));
  int in = memfd_with(file, 100 + n * sizeof(float), sealed);
  int out = memfd_create("fzd-out", MFD_CLOEXEC);
  int fds[2] = {in, out};
  double eb = 1e-3;

  msgpack_packer *pk = wire_begin(&w, 5, "compress", 9);
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, "f32");
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, 2);
  msgpack_pack_uint64(pk, 3);
  msgpack_pack_uint64(pk, 50000);
  fzp_pack_key(pk, "eb");
  msgpack_pack_double(pk, eb);
  fzp_pack_key(pk, "mode");
  fzp_pack_key(pk, "abs");
  fzp_pack_key(pk, "nfds");
  msgpack_pack_uint64(pk, 2);
  fzp_pack_key(pk, "in_fd");
  msgpack_pack_uint64(pk, 0);
  fzp_pack_key(pk, "in_offset");
  msgpack_pack_uint64(pk, 100);
  fzp_pack_key(pk, "out_fd");
  msgpack_pack_uint64(pk, 1);
  fzp_pack_key(pk, "out_offset");
  msgpack_pack_uint64(pk, 16);
  cr_assert_eq(wire_send(&w, fds, 2), 0);
  fzp_message m;
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), 0);
  uint64_t arc_len = 0;
  const void *dummy;
  uint32_t dummy_len;
  cr_assert_eq(fzp_get_u64(&m.result, "bytes_out", &arc_len), 1);
  cr_assert_eq(fzp_get_bin(&m.result, "archive", &dummy, &dummy_len), 0,
               "an archive written to out_fd must not come back inline");
  fzp_message_free(&m);
  cr_assert_eq(lseek(out, 0, SEEK_END), (off_t)(16 + arc_len));

  /* Decompress from the output memfd (at its offset) into a third memfd. */
  int back = memfd_create("fzd-back", MFD_CLOEXEC);
  int fds2[2] = {out, back};
  pk = wire_begin(&w, 6, "decompress", 5);
  fzp_pack_key(pk, "nfds");
  msgpack_pack_uint64(pk, 2);
  fzp_pack_key(pk, "in_fd");
  msgpack_pack_uint64(pk, 0);
  fzp_pack_key(pk, "in_offset");
  msgpack_pack_uint64(pk, 16);
  fzp_pack_key(pk, "in_length");
  msgpack_pack_uint64(pk, arc_len);
  fzp_pack_key(pk, "out_fd");
  msgpack_pack_uint64(pk, 1);
  cr_assert_eq(wire_send(&w, fds2, 2), 0);
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), 0);
  const msgpack_object *shape;
  cr_assert_eq(fzp_get_obj(&m.result, "shape", &shape), 1);
  cr_assert_eq(shape->via.array.size, 2u);
  cr_assert_eq(shape->via.array.ptr[0].via.u64, 3u);
  cr_assert_eq(shape->via.array.ptr[1].via.u64, 50000u);
  fzp_message_free(&m);

  float *y = malloc(n * sizeof(float));
  cr_assert_eq(pread(back, y, n * sizeof(float), 0), (ssize_t)(n * sizeof(float)));
  fz_compare_result cmp;
  cr_assert_eq(fz_compare(FZ_F32, x, y, n, &cmp), 0);
  cr_assert_leq(cmp.max_abs_error, eb);
  close(in);
  close(out);
  close(back);
  free(x);
  free(y);
  free(file);
  wire_close(&w);
  stop_daemon(h);
}

/* Compresses n floats of fd (from offset 0) with the archive inline; decodes
 * it here and checks it against want. */
static void fd_job_matches(wire *w, uint32_t msgid, int fd, const float *want, size_t n) {
  msgpack_packer *pk = wire_begin(w, msgid, "compress", 7);
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, "f32");
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint64(pk, n);
  fzp_pack_key(pk, "eb");
  msgpack_pack_double(pk, 1e-3);
  fzp_pack_key(pk, "mode");
  fzp_pack_key(pk, "abs");
  fzp_pack_key(pk, "nfds");
  msgpack_pack_uint64(pk, 1);
  fzp_pack_key(pk, "in_fd");
  msgpack_pack_uint64(pk, 0);
  fzp_pack_key(pk, "in_length");
  msgpack_pack_uint64(pk, n * sizeof(float));
  cr_assert_eq(wire_send(w, &fd, 1), 0);
  fzp_message m;
  cr_assert_eq(wire_recv(w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), 0);
  const void *arc;
  uint32_t arc_len;
  cr_assert_eq(fzp_get_bin(&m.result, "archive", &arc, &arc_len), 1);
  float *y = malloc(n * sizeof(float));
  size_t y_len;
  cr_assert_eq(fz_decompress(arc, arc_len, y, n * sizeof(float), &y_len, 1), 0);
  fz_compare_result cmp;
  cr_assert_eq(fz_compare(FZ_F32, want, y, n, &cmp), 0);
  cr_assert_leq(cmp.max_abs_error, 1e-3, "job %u read stale or wrong input", msgid);
  free(y);
  fzp_message_free(&m);
}

/* The daemon keeps sealed memfds mapped between jobs: a client that rewrites
 * its memfd for the next time step, or grows it, must be compressed from
 * what the memfd holds now. */
Test(service, reused_sealed_memfd_follows_its_content) {
  fzd_harness *h = start_daemon(NULL);
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  size_t n = 100000;
  float *a = malloc(2 * n * sizeof(float)), *b = malloc(2 * n * sizeof(float));
  wire_field_f32(a, 2 * n, 3);
  for (size_t i = 0; i < 2 * n; i++)
    b[i] = a[i] * -2.0f + 5.0f;
  int fd = memfd_with(a, n * sizeof(float), true);
  fd_job_matches(&w, 1, fd, a, n);
  cr_assert_eq(pwrite(fd, b, n * sizeof(float), 0), (ssize_t)(n * sizeof(float)));
  fd_job_matches(&w, 2, fd, b, n);
  /* Growing past the mapping: the daemon maps the file anew. */
  cr_assert_eq(pwrite(fd, a, 2 * n * sizeof(float), 0), (ssize_t)(2 * n * sizeof(float)));
  fd_job_matches(&w, 3, fd, a, 2 * n);
  fd_job_matches(&w, 4, fd, a, n);
  close(fd);
  free(a);
  free(b);
  wire_close(&w);
  stop_daemon(h);
}

Test(service, descriptor_roundtrip) { descriptor_roundtrip(false); }
Test(service, sealed_memfd_roundtrip) { descriptor_roundtrip(true); }

typedef struct client_arg {
  const fzd_harness *h;
  unsigned seed;
  int ok;
} client_arg;

static void *client_main(void *p) {
  client_arg *a = p;
  wire w;
  wire_open(&w, a->h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  size_t n = 20000 + a->seed * 1000;
  float *x = malloc(n * sizeof(float));
  wire_field_f32(x, n, a->seed);
  /* Several jobs in flight on one connection; replies may come in any order. */
  for (uint32_t i = 0; i < 4; i++)
    send_compress_inline(&w, 10 + i, x, n, 1e-3);
  unsigned seen = 0;
  for (int i = 0; i < 4; i++) {
    fzp_message m;
    cr_assert_eq(wire_recv(&w, &m, 60000), 0);
    cr_assert_eq(wire_code(&m), 0);
    cr_assert(m.msgid >= 10 && m.msgid < 14);
    seen |= 1u << (m.msgid - 10);
    double err = 1;
    cr_assert_eq(fzp_get_f64(&m.result, "max_error", &err), 1);
    cr_assert_leq(err, 1e-3);
    fzp_message_free(&m);
  }
  cr_assert_eq(seen, 0xfu);
  roundtrip_inline(&w, 50, x, n, 1e-3);
  free(x);
  wire_close(&w);
  a->ok = 1;
  return NULL;
}

Test(service, sixteen_concurrent_clients) {
  fzd_harness *h = start_daemon("\"workers\": 2, \"max_inflight_per_connection\": 2");
  enum { N = 16 };
  pthread_t t[N];
  client_arg a[N];
  for (unsigned i = 0; i < N; i++) {
    a[i] = (client_arg){h, i, 0};
    cr_assert_eq(pthread_create(&t[i], NULL, client_main, &a[i]), 0);
  }
  for (unsigned i = 0; i < N; i++) {
    pthread_join(t[i], NULL);
    cr_assert_eq(a[i].ok, 1, "client %u failed", i);
  }
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  fzp_message m;
  cr_assert_eq(wire_call0(&w, 2, "stats", &m), 0);
  uint64_t done = 0;
  cr_assert_eq(fzp_get_u64(&m.result, "jobs_done", &done), 1);
  cr_assert_eq(done, N * 6u);
  fzp_message_free(&m);
  wire_close(&w);
  stop_daemon(h);
}
