/*
 * test_proto.c - the wire library on its own: the pre-scanner's limits and
 * its answers on whole, partial and hostile input; the msgpack-RPC shape
 * checks; typed lookups; and encoder output parsed back.
 */
#include <criterion/criterion.h>
#include <string.h>

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
