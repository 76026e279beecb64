/*
 * test_device.c - the device-memory keys of compress and decompress (VMM
 * and pool buffers, buffer ids, IPC events) and the release method, where
 * no GPU is needed: malformed keys are refused with EPARAMS naming the key,
 * every device key is refused over TCP (ETRANSPORT) and on the Unix socket
 * of a daemon on the CPU backend (ENOGPU), descriptors that came with a
 * refused job are closed, and the connection stays usable throughout.
 * What the keys do on a GPU is tested in tests/gpu/gpu_device_memory.c.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fz.h"
#include "jobs_util.h"

#define TCP_SETTINGS "\"tcp_enabled\": true, \"tcp_port\": 0, \"tcp_token\": \"s3cret\""
#define UUID0 "GPU-00000000-0000-0000-0000-000000000000"

enum kv_type { KV_U64, KV_BIN, KV_STR, KV_NEG, KV_BOOL };

typedef struct kv {
  const char *key;
  enum kv_type type;
  uint64_t u;     /* KV_U64 value, KV_BIN length */
  const char *s;  /* KV_STR */
} kv;

/* A compress of 1024 f32 (input inline unless an in_ key names another),
 * with "device" and "nfds" when asked, and the extra pairs; fds go with it. */
static void send_job(wire *w, uint32_t msgid, const char *method, const kv *extra, size_t n,
                     const int *fds, unsigned nfds, bool device) {
  bool dev_in = false;
  for (size_t i = 0; i < n; i++)
    dev_in |= strncmp(extra[i].key, "in_", 3) == 0;
  bool compress = strcmp(method, "compress") == 0;
  uint32_t fields = (uint32_t)n + (compress ? 3 : 0) + (dev_in ? 0 : 1) + (device ? 1 : 0) +
                    (nfds ? 1 : 0) + (!compress && dev_in ? 1 : 0);
  msgpack_packer *pk = wire_begin(w, msgid, method, fields);
  if (compress) {
    fzp_pack_key(pk, "dtype");
    fzp_pack_key(pk, "f32");
    fzp_pack_key(pk, "shape");
    msgpack_pack_array(pk, 1);
    msgpack_pack_uint64(pk, 1024);
    fzp_pack_key(pk, "eb");
    msgpack_pack_double(pk, 1e-3);
  }
  if (!compress && dev_in) {
    fzp_pack_key(pk, "in_length");
    msgpack_pack_uint64(pk, 4096);
  }
  if (device) {
    fzp_pack_key(pk, "device");
    fzp_pack_key(pk, UUID0);
  }
  if (nfds) {
    fzp_pack_key(pk, "nfds");
    msgpack_pack_uint64(pk, nfds);
  }
  static unsigned char bytes[128];
  for (size_t i = 0; i < n; i++) {
    fzp_pack_key(pk, extra[i].key);
    switch (extra[i].type) {
    case KV_U64:
      msgpack_pack_uint64(pk, extra[i].u);
      break;
    case KV_BIN:
      msgpack_pack_bin_with_body(pk, bytes, (size_t)extra[i].u);
      break;
    case KV_STR:
      fzp_pack_key(pk, extra[i].s);
      break;
    case KV_NEG:
      msgpack_pack_int64(pk, -1);
      break;
    case KV_BOOL:
      msgpack_pack_true(pk);
      break;
    }
  }
  if (!dev_in) {
    static float x[1024];
    fzp_pack_key(pk, "data");
    msgpack_pack_bin_with_body(pk, x, sizeof x);
  }
  cr_assert_eq(wire_send(w, fds, nfds), 0);
}

/* Reads the reply to msgid: its code must be code and its message must hold
 * each of the NULL-terminated words. */
static void expect(wire *w, uint32_t msgid, int code, const char *word, const char *word2) {
  fzp_message m;
  cr_assert_eq(wire_recv(w, &m, 10000), 0, "no reply to %u", msgid);
  cr_assert_eq(m.msgid, msgid);
  int got = wire_code(&m);
  const char *text = "";
  uint32_t len = 0;
  fzp_get_str(&m.error, "message", &text, &len);
  char msg[512];
  snprintf(msg, sizeof msg, "%.*s", (int)len, text);
  cr_assert_eq(got, code, "request %u: got %s (%s), want %s", msgid, fz_err_name(got), msg,
               fz_err_name(code));
  cr_assert(word == NULL || strstr(msg, word) != NULL, "request %u: \"%s\" lacks \"%s\"",
            msgid, msg, word);
  cr_assert(word2 == NULL || strstr(msg, word2) != NULL, "request %u: \"%s\" lacks \"%s\"",
            msgid, msg, word2);
  fzp_message_free(&m);
}

static void still_served(wire *w) { cr_assert_eq(wire_call0(w, 999, "ping", NULL), 0); }

/* Descriptors process pid has open. */
static int open_fds(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
  DIR *d = opendir(path);
  cr_assert_not_null(d, "%s", path);
  int n = 0;
  while (readdir(d) != NULL)
    n++;
  closedir(d);
  return n;
}

/* ---- malformed keys: EPARAMS naming the key, before anything else --------- */

Test(device, malformed_keys_are_refused_with_the_key_named) {
  fzd_harness *h = start_daemon(NULL);
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  int fd = memfd_create("stand-in", 0);
  cr_assert_geq(fd, 0);
  struct {
    kv extra[3];
    size_t n;
    const char *word, *word2;
  } cases[] = {
      {{{"in_vmm_fd", KV_U64, 0, NULL}}, 1, "\"in_vmm_size\"", "cuMemCreate"},
      {{{"in_vmm_size", KV_U64, 1 << 21, NULL}}, 1, "\"in_vmm_fd\"", NULL},
      {{{"in_vmm_fd", KV_U64, 0, NULL}, {"in_vmm_size", KV_U64, 0, NULL}}, 2,
       "\"in_vmm_size\"", "above 0"},
      {{{"out_vmm_fd", KV_U64, 0, NULL}, {"out_vmm_size", KV_U64, 0, NULL}}, 2,
       "\"out_vmm_size\"", "above 0"},
      {{{"in_vmm_fd", KV_U64, 0, NULL}, {"in_vmm_size", KV_STR, 0, "2097152"}}, 2,
       "\"in_vmm_size\"", "unsigned"},
      {{{"in_vmm_fd", KV_U64, 0, NULL}, {"in_vmm_size", KV_NEG, 0, NULL}}, 2,
       "\"in_vmm_size\"", "unsigned"},
      {{{"in_vmm_fd", KV_STR, 0, "0"}, {"in_vmm_size", KV_U64, 1 << 21, NULL}}, 2,
       "\"in_vmm_fd\"", "unsigned"},
      {{{"in_pool_fd", KV_U64, 0, NULL}}, 1, "\"in_pool_ptr\"", NULL},
      {{{"out_pool_ptr", KV_BIN, 64, NULL}}, 1, "\"out_pool_fd\"", NULL},
      {{{"in_pool_fd", KV_U64, 0, NULL}, {"in_pool_ptr", KV_STR, 0, "x"}}, 2,
       "\"in_pool_ptr\"", "bin"},
      {{{"in_buffer_id", KV_U64, 7, NULL}}, 1, "\"in_buffer_id\"", NULL},
      {{{"out_buffer_id", KV_STR, 0, "7"}}, 1, "\"out_buffer_id\"", "unsigned"},
      {{{"in_ipc", KV_BIN, 64, NULL}, {"in_vmm_fd", KV_U64, 0, NULL},
        {"in_vmm_size", KV_U64, 1 << 21, NULL}}, 3, "at most one", "\"in_vmm_fd\""},
      {{{"out_vmm_fd", KV_U64, 0, NULL}, {"out_vmm_size", KV_U64, 1 << 21, NULL},
        {"out_pool_fd", KV_U64, 0, NULL}}, 3, "at most one", "\"out_pool_fd\""},
      {{{"wait_event", KV_STR, 0, "e"}}, 1, "\"wait_event\"", "bin"},
      {{{"done_event", KV_U64, 3, NULL}}, 1, "\"done_event\"", "bin"},
  };
  uint32_t id = 10;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++, id++) {
    /* With a descriptor, as a real client sends one; it is the job's and
     * closed with it. */
    send_job(&w, id, "compress", cases[i].extra, cases[i].n, &fd, 1, true);
    expect(&w, id, FZ_EPARAMS, cases[i].word, cases[i].word2);
    send_job(&w, id + 100, "decompress", cases[i].extra, cases[i].n, NULL, 0, true);
    expect(&w, id + 100, FZ_EPARAMS, cases[i].word, cases[i].word2);
  }
  /* A misspelt key is named too (and, with descriptors, ends the
   * connection, since they cannot be told from the next message's). */
  kv typo[] = {{"in_vmm_sz", KV_U64, 4096, NULL}};
  send_job(&w, 200, "compress", typo, 1, NULL, 0, true);
  expect(&w, 200, FZ_EPARAMS, "\"in_vmm_sz\"", "\"in_vmm_size\"");
  still_served(&w);
  cr_assert_eq(stat_u64(&w, "stats", "jobs_done"), 0);
  close(fd);
  wire_close(&w);
  stop_daemon(h);
}

/* ---- the transport and the backend --------------------------------------- */

/* One valid-looking use of each device key, for a side; n pairs in *out. */
static size_t device_case(int which, kv *out) {
  switch (which) {
  case 0:
    out[0] = (kv){"in_vmm_fd", KV_U64, 0, NULL};
    out[1] = (kv){"in_vmm_size", KV_U64, 1 << 21, NULL};
    out[2] = (kv){"in_buffer_id", KV_U64, 42, NULL};
    return 3;
  case 1:
    out[0] = (kv){"in_pool_fd", KV_U64, 0, NULL};
    out[1] = (kv){"in_pool_ptr", KV_BIN, 64, NULL};
    return 2;
  case 2:
    out[0] = (kv){"out_vmm_fd", KV_U64, 0, NULL};
    out[1] = (kv){"out_vmm_size", KV_U64, 1 << 21, NULL};
    out[2] = (kv){"out_length", KV_U64, 1 << 20, NULL};
    return 3;
  case 3:
    out[0] = (kv){"out_pool_fd", KV_U64, 0, NULL};
    out[1] = (kv){"out_pool_ptr", KV_BIN, 64, NULL};
    out[2] = (kv){"out_buffer_id", KV_U64, 43, NULL};
    out[3] = (kv){"out_length", KV_U64, 1 << 20, NULL};
    return 4;
  case 4:
    out[0] = (kv){"wait_event", KV_BIN, 64, NULL};
    return 1;
  default:
    out[0] = (kv){"done_event", KV_BIN, 64, NULL};
    return 1;
  }
}

static const char *const case_key[] = {"in_vmm_fd", "in_pool_fd", "out_vmm_fd",
                                       "out_pool_fd", "wait_event", "done_event"};

Test(device, device_keys_refused_over_tcp) {
  fzd_harness *h = start_daemon(TCP_SETTINGS);
  wire w;
  wire_open(&w, h, true);
  cr_assert_eq(wire_hello(&w, "s3cret"), 0);
  for (int i = 0; i < 6; i++) {
    kv extra[4];
    size_t n = device_case(i, extra);
    /* No descriptor can come over TCP, so the index names none: still the
     * transport is what is wrong. */
    send_job(&w, 20 + (uint32_t)i, "compress", extra, n, NULL, 0, true);
    expect(&w, 20 + (uint32_t)i, FZ_ETRANSPORT, case_key[i], "TCP");
    send_job(&w, 40 + (uint32_t)i, "decompress", extra, n, NULL, 0, true);
    expect(&w, 40 + (uint32_t)i, FZ_ETRANSPORT, case_key[i], "TCP");
  }
  still_served(&w);
  /* release has nothing to release over TCP, and says so without error. */
  msgpack_packer *pk = wire_begin(&w, 60, "release", 1);
  fzp_pack_key(pk, "all");
  msgpack_pack_true(pk);
  cr_assert_eq(wire_send(&w, NULL, 0), 0);
  fzp_message m;
  cr_assert_eq(wire_recv(&w, &m, 10000), 0);
  cr_assert_eq(wire_code(&m), 0);
  uint64_t released = 99;
  cr_assert_eq(fzp_get_u64(&m.result, "released", &released), 1);
  cr_assert_eq(released, 0);
  fzp_message_free(&m);
  wire_close(&w);
  stop_daemon(h);
}

Test(device, device_keys_refused_on_the_cpu_backend) {
  fzd_harness *h = start_daemon(NULL);
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  int before = open_fds(fzd_harness_pid(h));
  for (int i = 0; i < 6; i++) {
    kv extra[4];
    size_t n = device_case(i, extra);
    bool with_fd = i < 4;
    int fd = memfd_create("stand-in", 0);
    cr_assert_geq(fd, 0);
    send_job(&w, 20 + (uint32_t)i, "compress", extra, n, &fd, with_fd ? 1 : 0, true);
    expect(&w, 20 + (uint32_t)i, FZ_ENOGPU, case_key[i], "CPU backend");
    send_job(&w, 40 + (uint32_t)i, "decompress", extra, n, &fd, with_fd ? 1 : 0, true);
    expect(&w, 40 + (uint32_t)i, FZ_ENOGPU, case_key[i], "CPU backend");
    close(fd);
    /* Refused before "device" is looked at: the backend is what is wrong. */
    send_job(&w, 60 + (uint32_t)i, "compress", extra, n, NULL, 0, false);
    expect(&w, 60 + (uint32_t)i, FZ_ENOGPU, case_key[i], NULL);
  }
  /* fzd closed the descriptors of the refused jobs. */
  still_served(&w);
  cr_assert_eq(open_fds(fzd_harness_pid(h)), before, "fzd kept descriptors of refused jobs");
  cr_assert_eq(stat_u64(&w, "stats", "jobs_done"), 0);
  wire_close(&w);
  stop_daemon(h);
}

/* ---- release ----------------------------------------------------------------- */

static void send_release(wire *w, uint32_t msgid, int variant) {
  msgpack_packer *pk;
  switch (variant) {
  case 0: /* two ids */
    pk = wire_begin(w, msgid, "release", 1);
    fzp_pack_key(pk, "buffer_ids");
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint64(pk, 1);
    msgpack_pack_uint64(pk, UINT64_MAX);
    break;
  case 1: /* all */
    pk = wire_begin(w, msgid, "release", 1);
    fzp_pack_key(pk, "all");
    msgpack_pack_true(pk);
    break;
  case 2: /* no ids: nothing to do */
    pk = wire_begin(w, msgid, "release", 1);
    fzp_pack_key(pk, "buffer_ids");
    msgpack_pack_array(pk, 0);
    break;
  case 3: /* nothing */
    wire_begin(w, msgid, "release", 0);
    break;
  case 4: /* all: false */
    pk = wire_begin(w, msgid, "release", 1);
    fzp_pack_key(pk, "all");
    msgpack_pack_false(pk);
    break;
  case 5: /* both */
    pk = wire_begin(w, msgid, "release", 2);
    fzp_pack_key(pk, "all");
    msgpack_pack_true(pk);
    fzp_pack_key(pk, "buffer_ids");
    msgpack_pack_array(pk, 0);
    break;
  case 6: /* not an array */
    pk = wire_begin(w, msgid, "release", 1);
    fzp_pack_key(pk, "buffer_ids");
    msgpack_pack_uint64(pk, 5);
    break;
  case 7: /* a negative id */
    pk = wire_begin(w, msgid, "release", 1);
    fzp_pack_key(pk, "buffer_ids");
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint64(pk, 5);
    msgpack_pack_int64(pk, -5);
    break;
  case 8: /* all as a string */
    pk = wire_begin(w, msgid, "release", 1);
    fzp_pack_key(pk, "all");
    fzp_pack_key(pk, "yes");
    break;
  default: /* an unknown key */
    pk = wire_begin(w, msgid, "release", 1);
    fzp_pack_key(pk, "buffer_id");
    msgpack_pack_uint64(pk, 5);
    break;
  }
  cr_assert_eq(wire_send(w, NULL, 0), 0);
}

Test(device, release_answers_and_checks_its_params) {
  fzd_harness *h = start_daemon(NULL);
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  /* Nothing was imported (the CPU backend imports nothing): 0 released. */
  for (int v = 0; v < 3; v++) {
    send_release(&w, 10 + (uint32_t)v, v);
    fzp_message m;
    cr_assert_eq(wire_recv(&w, &m, 10000), 0);
    cr_assert_eq(wire_code(&m), 0, "variant %d refused", v);
    uint64_t released = 99;
    cr_assert_eq(fzp_get_u64(&m.result, "released", &released), 1);
    cr_assert_eq(released, 0);
    fzp_message_free(&m);
  }
  static const char *const words[] = {"exactly one", "\"all\" must be true", "exactly one",
                                      "array", "buffer_ids[1]", "\"all\"", "\"buffer_id\""};
  for (int v = 3; v < 10; v++) {
    send_release(&w, 20 + (uint32_t)v, v);
    expect(&w, 20 + (uint32_t)v, FZ_EPARAMS, words[v - 3], NULL);
  }
  still_served(&w);
  wire_close(&w);
  stop_daemon(h);
}
