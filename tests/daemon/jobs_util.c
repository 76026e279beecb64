/*
 * jobs_util.c - see jobs_util.h.
 */
#include "jobs_util.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "fz.h"

fzd_harness *start_daemon(const char *settings) {
  fzd_harness_options o = {.settings = settings};
  fzd_harness *h = NULL;
  int err = fzd_harness_start(&o, &h);
  cr_assert_eq(err, 0, "fzd did not start: %d", err);
  return h;
}

void stop_daemon(fzd_harness *h) {
  int st = fzd_harness_stop(h, 30000);
  cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "fzd did not exit cleanly (status %d)", st);
}

uint64_t stat_u64(wire *w, const char *method, const char *key) {
  fzp_message m;
  cr_assert_eq(wire_call0(w, 500, method, &m), 0);
  uint64_t v = 0;
  cr_assert_eq(fzp_get_u64(&m.result, key, &v), 1, "%s has no %s", method, key);
  fzp_message_free(&m);
  return v;
}

void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

void send_compress_inline(wire *w, uint32_t msgid, const float *x, size_t n,
                          double eb) {
  msgpack_packer *pk = wire_begin(w, msgid, "compress", 6);
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, "f32");
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint64(pk, n);
  fzp_pack_key(pk, "eb");
  msgpack_pack_double(pk, eb);
  fzp_pack_key(pk, "mode");
  fzp_pack_key(pk, "abs");
  fzp_pack_key(pk, "verify");
  msgpack_pack_true(pk);
  fzp_pack_key(pk, "data");
  msgpack_pack_bin(pk, n * sizeof(float));
  msgpack_pack_bin_body(pk, x, n * sizeof(float));
  cr_assert_eq(wire_send(w, NULL, 0), 0);
}

void roundtrip_inline(wire *w, uint32_t msgid, const float *x, size_t n, double eb) {
  send_compress_inline(w, msgid, x, n, eb);
  fzp_message m;
  cr_assert_eq(wire_recv(w, &m, 60000), 0);
  cr_assert_eq(m.msgid, msgid);
  cr_assert_eq(wire_code(&m), 0);
  const void *arc;
  uint32_t arc_len;
  uint64_t bytes_in = 0, bytes_out = 0;
  double max_error = -1;
  cr_assert_eq(fzp_get_bin(&m.result, "archive", &arc, &arc_len), 1);
  cr_assert_eq(fzp_get_u64(&m.result, "bytes_in", &bytes_in), 1);
  cr_assert_eq(fzp_get_u64(&m.result, "bytes_out", &bytes_out), 1);
  cr_assert_eq(fzp_get_f64(&m.result, "max_error", &max_error), 1);
  cr_assert_eq(bytes_in, n * sizeof(float));
  cr_assert_eq(bytes_out, arc_len);
  cr_assert_leq(max_error, eb);
  void *copy = malloc(arc_len);
  memcpy(copy, arc, arc_len);
  fzp_message_free(&m);

  msgpack_packer *pk = wire_begin(w, msgid + 1, "decompress", 1);
  fzp_pack_key(pk, "data");
  msgpack_pack_bin(pk, arc_len);
  msgpack_pack_bin_body(pk, copy, arc_len);
  cr_assert_eq(wire_send(w, NULL, 0), 0);
  free(copy);
  cr_assert_eq(wire_recv(w, &m, 60000), 0);
  cr_assert_eq(m.msgid, msgid + 1);
  cr_assert_eq(wire_code(&m), 0);
  const void *data;
  uint32_t data_len;
  cr_assert_eq(fzp_get_bin(&m.result, "data", &data, &data_len), 1);
  cr_assert_eq(data_len, n * sizeof(float));
  const char *dt;
  uint32_t dt_len;
  cr_assert_eq(fzp_get_str(&m.result, "dtype", &dt, &dt_len), 1);
  cr_assert(dt_len == 3 && memcmp(dt, "f32", 3) == 0);
  fz_compare_result cmp;
  cr_assert_eq(fz_compare(FZ_F32, x, data, n, &cmp), 0);
  cr_assert_leq(cmp.max_abs_error, eb, "max error %g over bound %g", cmp.max_abs_error, eb);
  cr_assert_eq(cmp.nonfinite_mismatches, 0u);
  fzp_message_free(&m);
}
