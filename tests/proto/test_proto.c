/*
 * test_proto.c - the wire library on its own: the pre-scanner's limits and
 * its answers on whole, partial and hostile input; the msgpack-RPC shape
 * checks; typed lookups; and encoder output parsed back.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fzp.h"

static fzp_limits small_limits(void) {
  fzp_limits l = {.max_message = 1024, .max_depth = 4, .max_container = 8};
  return l;
}

Test(scan, defaults) {
  fzp_limits l;
  fzp_limits_default(&l);
  cr_assert_eq(l.max_message, (64u << 20) + 4096u);
  cr_assert_eq(l.max_depth, 16u);
  cr_assert_eq(l.max_container, 65536u);
  cr_assert_eq(l.max_objects, FZP_MAX_OBJECTS_DEFAULT);
}

Test(scan, whole_and_partial) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  fzp_pack_request_begin(&pk, 42, "compress", 2);
  fzp_pack_key(&pk, "data");
  msgpack_pack_bin(&pk, 300);
  char body[300] = {0};
  msgpack_pack_bin_body(&pk, body, 300);
  fzp_pack_key(&pk, "eb");
  msgpack_pack_double(&pk, 0.5);
  size_t len = sb.size;
  fzp_limits l = small_limits();
  cr_assert_eq(fzp_scan(sb.data, len, &l), (int64_t)len);
  /* Every strict prefix needs more bytes; a second message after it is not
   * part of the first. */
  for (size_t i = 0; i < len; i++) {
    uint64_t need = 0;
    cr_assert_eq(fzp_scan_ex(sb.data, i, &l, &need), 0, "prefix %zu", i);
    cr_assert_gt(need, i);
    cr_assert_leq(need, len, "the hint never overshoots");
  }
  msgpack_pack_nil(&pk);
  cr_assert_eq(fzp_scan(sb.data, sb.size, &l), (int64_t)len);
  /* The same message under a smaller size limit. */
  l.max_message = 200;
  cr_assert_eq(fzp_scan(sb.data, 10, &l), 0);
  cr_assert_eq(fzp_scan(sb.data, len, &l), FZ_EMSGSIZE);
  msgpack_sbuffer_destroy(&sb);
}

Test(scan, hostile_declarations) {
  fzp_limits l = small_limits();
  const unsigned char c1[] = {0xc1};
  cr_assert_eq(fzp_scan(c1, 1, &l), FZ_EPROTO);
  const unsigned char nested_c1[] = {0x92, 0x01, 0xc1};
  cr_assert_eq(fzp_scan(nested_c1, 3, &l), FZ_EPROTO);
  /* bin32 / str32 / ext32 declaring 4 GiB: refused from the header alone. */
  const unsigned char bin32[] = {0xc6, 0xff, 0xff, 0xff, 0xff};
  cr_assert_eq(fzp_scan(bin32, sizeof(bin32), &l), FZ_EMSGSIZE);
  const unsigned char str32[] = {0xdb, 0xff, 0xff, 0xff, 0xff};
  cr_assert_eq(fzp_scan(str32, sizeof(str32), NULL), FZ_EMSGSIZE);
  const unsigned char ext32[] = {0xc9, 0x7f, 0xff, 0xff, 0xff, 0x01};
  cr_assert_eq(fzp_scan(ext32, sizeof(ext32), NULL), FZ_EMSGSIZE);
  /* Containers over the element limit, and counts the size limit cannot
   * hold (each element takes at least one byte). */
  const unsigned char arr9[] = {0x99};
  cr_assert_eq(fzp_scan(arr9, 1, &l), FZ_EPROTO);
  const unsigned char arr32[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
  cr_assert_eq(fzp_scan(arr32, sizeof(arr32), NULL), FZ_EPROTO);
  fzp_limits wide = {.max_message = 100, .max_depth = 4, .max_container = 1000};
  const unsigned char arr16[] = {0xdc, 0x00, 0xc8}; /* 200 elements */
  cr_assert_eq(fzp_scan(arr16, sizeof(arr16), &wide), FZ_EMSGSIZE);
  const unsigned char map16[] = {0xde, 0x00, 0x40}; /* 64 pairs = 128 objects */
  cr_assert_eq(fzp_scan(map16, sizeof(map16), &wide), FZ_EMSGSIZE);
  /* Depth: 4 levels are fine, 5 are not. */
  const unsigned char d4[] = {0x91, 0x91, 0x91, 0x91, 0x01};
  cr_assert_eq(fzp_scan(d4, sizeof(d4), &l), (int64_t)sizeof(d4));
  const unsigned char d5[] = {0x91, 0x91, 0x91, 0x91, 0x91, 0x01};
  cr_assert_eq(fzp_scan(d5, sizeof(d5), &l), FZ_EPROTO);
  /* Empty input and truncated scalars wait for more. */
  cr_assert_eq(fzp_scan("", 0, &l), 0);
  const unsigned char f64[] = {0xcb, 0, 0, 0};
  cr_assert_eq(fzp_scan(f64, sizeof(f64), &l), 0);
  const unsigned char fixext16[18] = {0xd8, 0x01};
  cr_assert_eq(fzp_scan(fixext16, sizeof(fixext16), &l), 18);
}

/* Feeding a message in pieces to a resumed scan gives the same answers as
 * scanning each prefix from the start, for every split point. */
Test(scan, resume_matches_whole) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  fzp_pack_request_begin(&pk, 7, "compress", 3);
  fzp_pack_key(&pk, "shape");
  msgpack_pack_array(&pk, 3);
  for (int i = 0; i < 3; i++)
    msgpack_pack_uint64(&pk, 1000u << i);
  fzp_pack_key(&pk, "data");
  msgpack_pack_bin(&pk, 100);
  char body[100] = {0};
  msgpack_pack_bin_body(&pk, body, 100);
  fzp_pack_key(&pk, "eb");
  msgpack_pack_double(&pk, 0.5);
  fzp_limits l;
  fzp_limits_default(&l);
  for (size_t step = 1; step < sb.size; step++) {
    fzp_scan_state st;
    fzp_scan_reset(&st);
    int64_t r = 0;
    size_t have = 0;
    while (r == 0) {
      have = have + step < sb.size ? have + step : sb.size;
      uint64_t need = 0, need_whole = 0;
      r = fzp_scan_resume(&st, sb.data, have, &l, &need);
      cr_assert_eq(r, fzp_scan_ex(sb.data, have, &l, &need_whole), "step %zu", step);
      cr_assert_eq(need, need_whole, "step %zu at %zu", step, have);
    }
    cr_assert_eq(r, (int64_t)sb.size, "step %zu", step);
  }
  msgpack_sbuffer_destroy(&sb);
}

Test(scan, object_limit) {
  fzp_limits l = {.max_message = 1 << 20, .max_depth = 4, .max_container = 1000,
                  .max_objects = 100};
  unsigned char msg[4 + 99] = {0x92, 0xdc, 0x00, 0x62};
  /* [[98 zeros], 0] is 101 objects with the two arrays: one too many. */
  cr_assert_eq(fzp_scan(msg, sizeof msg, &l), FZ_EPROTO);
  l.max_objects = 101;
  cr_assert_eq(fzp_scan(msg, sizeof msg, &l), (int64_t)sizeof msg);
  l.max_objects = 0; /* no limit */
  cr_assert_eq(fzp_scan(msg, sizeof msg, &l), (int64_t)sizeof msg);
  /* Bigger heads count too: 100 float64. */
  unsigned char f[3 + 900] = {0xdc, 0x00, 0x64};
  for (int i = 0; i < 100; i++)
    f[3 + 9 * i] = 0xcb;
  l.max_objects = 100;
  cr_assert_eq(fzp_scan(f, sizeof f, &l), FZ_EPROTO);
  l.max_objects = 101;
  cr_assert_eq(fzp_scan(f, sizeof f, &l), (int64_t)sizeof f);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The worst case: 64 MiB of the smallest elements (one byte each),
 * as an array and as a map, received in 1 MiB reads and scanned after each
 * one, as the daemon does.  The bar is 200 ms for the whole message; the
 * limit here is ten times that so that a loaded or sanitized build passes,
 * while a scan that restarts on every read (64 passes, about 2 GiB of bytes
 * walked) takes seconds. */
static void scan_tiny(bool map) {
  /* 1024 containers of 65535 one-byte elements (the most an array16
   * holds; 32767 pairs for a map): 64 MiB. */
  const size_t outer = 1024, inner = map ? 65534 : 65535;
  size_t len = 5 + outer * (3 + inner);
  unsigned char *b = malloc(len);
  cr_assert_not_null(b);
  size_t at = 0;
  b[at++] = 0xdd; /* array32 of outer */
  b[at++] = 0; b[at++] = 0; b[at++] = (unsigned char)(outer >> 8); b[at++] = (unsigned char)outer;
  for (size_t i = 0; i < outer; i++) {
    size_t count = map ? inner / 2 : inner; /* pairs or elements */
    b[at++] = map ? 0xde : 0xdc;
    b[at++] = (unsigned char)(count >> 8);
    b[at++] = (unsigned char)count;
    memset(b + at, (int)(i & 0x7f), inner);
    at += inner;
  }
  cr_assert_eq(at, len);
  fzp_limits l = {.max_message = len, .max_depth = 4, .max_container = 65536,
                  .max_objects = 0};
  fzp_scan_state st;
  fzp_scan_reset(&st);
  double t0 = now_s();
  int64_t r = 0;
  for (size_t have = 1u << 20; r == 0; have += 1u << 20)
    r = fzp_scan_resume(&st, b, have < len ? have : len, &l, NULL);
  double t = now_s() - t0;
  cr_assert_eq(r, (int64_t)len);
  cr_log_info("scan of %zu bytes of one-byte elements (%s) in 1 MiB reads: %.1f ms",
              len, map ? "map" : "array", t * 1e3);
  cr_assert_lt(t, 2.0, "%.3f s", t);
  /* With the default object limit the same message is refused early. */
  fzp_limits_default(&l);
  l.max_message = len;
  t0 = now_s();
  cr_assert_eq(fzp_scan(b, len, &l), FZ_EPROTO);
  cr_assert_lt(now_s() - t0, 1.0);
  free(b);
}

Test(scan, tiny_elements_64mib_array, .timeout = 60) { scan_tiny(false); }
Test(scan, tiny_elements_64mib_map, .timeout = 60) { scan_tiny(true); }

static int parse_bytes(const void *b, size_t n, fzp_message *m) {
  char why[128];
  cr_assert_eq(fzp_scan(b, n, NULL), (int64_t)n);
  return fzp_parse(b, n, m, why, sizeof(why));
}

Test(parse, shapes) {
  fzp_message m;
  const unsigned char req[] = {0x94, 0x00, 0x07, 0xa4, 'p', 'i', 'n', 'g', 0x80};
  cr_assert_eq(parse_bytes(req, sizeof(req), &m), 0);
  cr_assert_eq(m.type, FZP_REQUEST);
  cr_assert_eq(m.msgid, 7u);
  cr_assert(fzp_method_is(&m, "ping"));
  cr_assert_not(fzp_method_is(&m, "pin"));
  cr_assert_eq(m.params.type, MSGPACK_OBJECT_MAP);
  fzp_message_free(&m);

  const unsigned char note[] = {0x93, 0x02, 0xa1, 'x', 0x80};
  cr_assert_eq(parse_bytes(note, sizeof(note), &m), 0);
  cr_assert_eq(m.type, FZP_NOTIFY);
  cr_assert(fzp_method_is(&m, "x"));
  fzp_message_free(&m);

  const unsigned char resp[] = {0x94, 0x01, 0x09, 0xc0, 0x81, 0xa1, 'a', 0x05};
  cr_assert_eq(parse_bytes(resp, sizeof(resp), &m), 0);
  cr_assert_eq(m.type, FZP_RESPONSE);
  int code = 1;
  cr_assert_eq(fzp_error_decode(&m.error, &code, NULL, NULL), 0);
  uint64_t a = 0;
  cr_assert_eq(fzp_get_u64(&m.result, "a", &a), 1);
  cr_assert_eq(a, 5u);
  fzp_message_free(&m);

  /* Wrong shapes: the msgid is still reported when it could be read. */
  const unsigned char params_array[] = {0x94, 0x00, 0x0b, 0xa1, 'x', 0x90};
  cr_assert_eq(parse_bytes(params_array, sizeof(params_array), &m), FZ_EPROTO);
  cr_assert_eq(m.msgid, 11u);
  const unsigned char bad_type[] = {0x94, 0x05, 0x01, 0xa1, 'x', 0x80};
  cr_assert_eq(parse_bytes(bad_type, sizeof(bad_type), &m), FZ_EPROTO);
  const unsigned char neg_id[] = {0x94, 0x00, 0xff, 0xa1, 'x', 0x80};
  cr_assert_eq(parse_bytes(neg_id, sizeof(neg_id), &m), FZ_EPROTO);
  const unsigned char num_method[] = {0x94, 0x00, 0x01, 0x05, 0x80};
  cr_assert_eq(parse_bytes(num_method, sizeof(num_method), &m), FZ_EPROTO);
  const unsigned char three[] = {0x93, 0x00, 0x01, 0xa1};
  char why[64] = "";
  cr_assert_eq(fzp_parse(three, 3, &m, why, sizeof(why)), FZ_EPROTO);
  cr_assert_eq(fzp_parse(three, sizeof(three), &m, why, sizeof(why)), FZ_EPROTO);
  cr_assert_gt(strlen(why), 0u);
  const unsigned char scalar[] = {0x01};
  cr_assert_eq(parse_bytes(scalar, 1, &m), FZ_EPROTO);
}

Test(parse, typed_lookups_and_encoders) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  fzp_pack_result_begin(&pk, 77, 6);
  fzp_pack_key(&pk, "s");
  fzp_pack_key(&pk, "text");
  fzp_pack_key(&pk, "u");
  msgpack_pack_uint64(&pk, UINT64_MAX);
  fzp_pack_key(&pk, "i");
  msgpack_pack_int64(&pk, -5);
  fzp_pack_key(&pk, "f");
  msgpack_pack_float(&pk, 0.25f);
  fzp_pack_key(&pk, "b");
  msgpack_pack_true(&pk);
  fzp_pack_key(&pk, "bin");
  msgpack_pack_bin(&pk, 3);
  msgpack_pack_bin_body(&pk, "abc", 3);
  fzp_message m;
  cr_assert_eq(parse_bytes(sb.data, sb.size, &m), 0);
  cr_assert_eq(m.msgid, 77u);
  const char *s;
  uint32_t len;
  cr_assert_eq(fzp_get_str(&m.result, "s", &s, &len), 1);
  cr_assert(len == 4 && memcmp(s, "text", 4) == 0);
  uint64_t u;
  cr_assert_eq(fzp_get_u64(&m.result, "u", &u), 1);
  cr_assert_eq(u, UINT64_MAX);
  int64_t i;
  cr_assert_eq(fzp_get_i64(&m.result, "i", &i), 1);
  cr_assert_eq(i, -5);
  cr_assert_eq(fzp_get_i64(&m.result, "u", &i), FZ_EPARAMS, "UINT64_MAX is no int64");
  cr_assert_eq(fzp_get_u64(&m.result, "i", &u), FZ_EPARAMS);
  double d;
  cr_assert_eq(fzp_get_f64(&m.result, "f", &d), 1);
  cr_assert_eq(d, 0.25);
  cr_assert_eq(fzp_get_f64(&m.result, "i", &d), 1);
  cr_assert_eq(d, -5.0);
  cr_assert_eq(fzp_get_f64(&m.result, "s", &d), FZ_EPARAMS);
  bool b = false;
  cr_assert_eq(fzp_get_bool(&m.result, "b", &b), 1);
  cr_assert(b);
  const void *p;
  cr_assert_eq(fzp_get_bin(&m.result, "bin", &p, &len), 1);
  cr_assert(len == 3 && memcmp(p, "abc", 3) == 0);
  cr_assert_eq(fzp_get_bin(&m.result, "s", &p, &len), FZ_EPARAMS);
  cr_assert_eq(fzp_get_str(&m.result, "missing", &s, &len), 0);
  const msgpack_object *o;
  cr_assert_eq(fzp_get_obj(&m.result, "b", &o), 1);
  cr_assert_eq(o->type, MSGPACK_OBJECT_BOOLEAN);
  fzp_message_free(&m);

  msgpack_sbuffer_clear(&sb);
  fzp_pack_error(&pk, 3, FZ_EBUSY, NULL);
  cr_assert_eq(parse_bytes(sb.data, sb.size, &m), 0);
  int code = 0;
  const char *text;
  cr_assert_eq(fzp_error_decode(&m.error, &code, &text, &len), 1);
  cr_assert_eq(code, FZ_EBUSY);
  cr_assert(len == strlen(fz_strerror(FZ_EBUSY)) && memcmp(text, fz_strerror(FZ_EBUSY), len) == 0);
  cr_assert_eq(fzp_get_str(&m.error, "name", &s, &len), 1);
  cr_assert(len == 5 && memcmp(s, "EBUSY", 5) == 0);
  cr_assert_eq(m.result.type, MSGPACK_OBJECT_NIL);
  fzp_message_free(&m);

  msgpack_sbuffer_clear(&sb);
  fzp_pack_notify_begin(&pk, "progress", 0);
  cr_assert_eq(parse_bytes(sb.data, sb.size, &m), 0);
  cr_assert_eq(m.type, FZP_NOTIFY);
  cr_assert(fzp_method_is(&m, "progress"));
  fzp_message_free(&m);
  msgpack_sbuffer_destroy(&sb);
}
