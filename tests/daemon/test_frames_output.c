/*
 * test_frames_output.c - "frames" results into a descriptor on a real fzd:
 * each frame's arrays lie where the reply's offsets say, laid out as
 * docs/protocol.md says (values, indices from the next multiple of 4, the
 * product from the next multiple of 8, the next frame from the next
 * multiple of 8, zeros between), byte for byte the arrays of the inline
 * reply to the same request; a failed frame takes no room; a file is cut
 * after the results, a fixed-size memfd is not; an output too small fails
 * the frame that does not fit and every frame after it with ENOSPC; results
 * past max_inline_bytes come through; an O_APPEND descriptor and a device
 * output on the CPU backend are refused.  The suite runs on either backend
 * (FZD_TEST_BACKEND).
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frames_util.h"
#include "fz.h"
#include "jobs_util.h"
#include "wire.h"

#define JUNK 0xab

/* Where a request's results go: inline (fd < 0) or fd at offset, with
 * out_length when length > 0. */
typedef struct out_spec {
  int fd;
  uint64_t offset, length;
} out_spec;

static const out_spec inline_out = {-1, 0, 0};

/* A "frames" request of the chunks (chunk bad corrupt; -1: none), sparse
 * above a cut of 10 or dense, with a setup's id (0: none); its reply in m,
 * the code returned. */
static int call(wire *w, uint32_t id, const chunks *c, int bad, bool dense, uint64_t setup,
                const out_spec *o, fzp_message *m) {
  uint32_t n = 6 + (setup != 0) + (o->fd >= 0 ? 3 + (o->length > 0) : 0);
  msgpack_packer *pk = wire_begin(w, id, "frames", n);
  pack_common(pk, 10);
  fzp_pack_key(pk, "output");
  fzp_pack_key(pk, dense ? "dense" : "sparse");
  if (setup) {
    fzp_pack_key(pk, "setup");
    msgpack_pack_uint64(pk, setup);
  }
  pack_chunk_list(pk, c, bad);
  if (o->fd >= 0) {
    fzp_pack_key(pk, "out_fd");
    msgpack_pack_uint64(pk, 0);
    fzp_pack_key(pk, "nfds");
    msgpack_pack_uint64(pk, 1);
    fzp_pack_key(pk, "out_offset");
    msgpack_pack_uint64(pk, o->offset);
    if (o->length > 0) {
      fzp_pack_key(pk, "out_length");
      msgpack_pack_uint64(pk, o->length);
    }
  }
  cr_assert_eq(wire_send(w, o->fd >= 0 ? &o->fd : NULL, o->fd >= 0 ? 1 : 0), 0);
  cr_assert_eq(wire_recv(w, m, 60000), 0);
  cr_assert_eq(m->msgid, id);
  return wire_code(m);
}

/* One frame of an inline reply, copied out of it (a reply borrows the
 * wire's buffer only until the next call). */
typedef struct ref_frame {
  int64_t status;
  uint64_t count;
  void *v, *ix, *pw;
  uint32_t vl, il, pl;
} ref_frame;

static const msgpack_object *frames_of(const fzp_message *m) {
  const msgpack_object *frames = NULL;
  cr_assert_eq(fzp_get_obj(&m->result, "frames", &frames), 1);
  cr_assert_eq(frames->type, MSGPACK_OBJECT_ARRAY);
  cr_assert_eq(frames->via.array.size, NFRAMES);
  return frames;
}

static void *copy_bin(const msgpack_object *fr, const char *key, uint32_t *len) {
  const void *p = NULL;
  *len = 0;
  if (fzp_get_bin(fr, key, &p, len) != 1)
    return NULL;
  void *q = malloc(*len + 1);
  cr_assert_not_null(q);
  memcpy(q, p, *len);
  return q;
}

/* The inline reply to the request: it must succeed. */
static void take_ref(wire *w, uint32_t id, const chunks *c, int bad, bool dense, uint64_t setup,
                     ref_frame *ref) {
  fzp_message m;
  cr_assert_eq(call(w, id, c, bad, dense, setup, &inline_out, &m), 0);
  const msgpack_object *frames = frames_of(&m);
  for (unsigned i = 0; i < NFRAMES; i++) {
    const msgpack_object *fr = &frames->via.array.ptr[i];
    ref_frame *r = &ref[i];
    cr_assert_eq(fzp_get_i64(fr, "status", &r->status), 1);
    cr_assert_eq(fzp_get_u64(fr, "count", &r->count), 1);
    r->v = copy_bin(fr, "values", &r->vl);
    r->ix = copy_bin(fr, "indices", &r->il);
    r->pw = copy_bin(fr, "powder", &r->pl);
    cr_assert((r->status < 0) == (r->v == NULL));
  }
  fzp_message_free(&m);
}

static void free_ref(ref_frame *ref) {
  for (unsigned i = 0; i < NFRAMES; i++) {
    free(ref[i].v);
    free(ref[i].ix);
    free(ref[i].pw);
  }
}

static uint64_t up(uint64_t x, uint64_t to) {
  return (x + to - 1) / to * to;
}

/* Where frame i ends when the frames before it end at end (a frame of no
 * bytes takes no room). */
static uint64_t frame_end(const ref_frame *r, uint64_t end) {
  if (r->vl + r->il + r->pl == 0)
    return end;
  uint64_t at = up(end, 8) + r->vl;
  if (r->ix != NULL)
    at = up(at, 4) + r->il;
  if (r->pw != NULL)
    at = up(at, 8) + r->pl;
  return at;
}

/* The reply m to a request into fd at base, against the inline reply ref:
 * the frames that failed inline fail, frames from full_from on fail with
 * ENOSPC naming full_from, and the other frames' offsets follow the layout
 * and the output holds exactly their arrays with zeros between, from base
 * to base + "bytes".  Returns "bytes". */
static uint64_t check_output(const fzp_message *m, const ref_frame *ref, int fd, uint64_t base,
                             unsigned full_from) {
  const msgpack_object *frames = frames_of(m);
  uint64_t bytes = 0, end = 0;
  cr_assert_eq(fzp_get_u64(&m->result, "bytes", &bytes), 1);
  uint8_t *want = calloc(1, bytes + 1), *got = malloc(bytes + 1);
  cr_assert(want != NULL && got != NULL);
  for (unsigned i = 0; i < NFRAMES; i++) {
    const msgpack_object *fr = &frames->via.array.ptr[i];
    const ref_frame *r = &ref[i];
    int64_t status = 1;
    const void *unused = NULL;
    uint32_t ul = 0;
    cr_assert_eq(fzp_get_i64(fr, "status", &status), 1);
    cr_assert_eq(fzp_get_bin(fr, "values", &unused, &ul), 0, "frame %u: values inline", i);
    if (r->status < 0) {
      cr_assert_eq(status, r->status, "frame %u: status %lld", i, (long long)status);
      continue;
    }
    if (i >= full_from) {
      const msgpack_object *err = NULL;
      const char *msg = NULL;
      uint32_t len = 0;
      char text[64];
      cr_assert_eq(status, FZ_ENOSPC, "frame %u: status %lld", i, (long long)status);
      cr_assert_eq(fzp_get_obj(fr, "error", &err), 1);
      cr_assert_eq(fzp_get_str(err, "message", &msg, &len), 1);
      snprintf(text, sizeof text, "from frame %u on", full_from);
      cr_assert_not_null(memmem(msg, len, text, strlen(text)), "frame %u: %.*s", i, (int)len, msg);
      continue;
    }
    cr_assert_eq(status, 0, "frame %u failed", i);
    uint64_t count = 0, listed = 0, vat = 0, iat = 0, pat = 0;
    cr_assert_eq(fzp_get_u64(fr, "count", &count), 1);
    cr_assert_eq(count, r->count);
    cr_assert_eq(fzp_get_u64(fr, "listed", &listed), 1);
    cr_assert_eq(listed * 2, r->vl);
    cr_assert_eq(fzp_get_u64(fr, "values_at", &vat), 1);
    cr_assert_eq(fzp_get_u64(fr, "indices_at", &iat), r->ix != NULL ? 1 : 0);
    cr_assert_eq(fzp_get_u64(fr, "powder_at", &pat), r->pw != NULL ? 1 : 0);
    /* A failed frame before this one took no room. */
    cr_assert_eq(vat, up(end, 8), "frame %u: values_at %llu", i, (unsigned long long)vat);
    cr_assert_leq(frame_end(r, end), bytes);
    memcpy(want + vat, r->v, r->vl);
    if (r->ix != NULL) {
      cr_assert_eq(iat, up(vat + r->vl, 4));
      memcpy(want + iat, r->ix, r->il);
    }
    if (r->pw != NULL) {
      cr_assert_eq(pat, up(r->ix != NULL ? iat + r->il : vat + r->vl, 8));
      memcpy(want + pat, r->pw, r->pl);
    }
    end = frame_end(r, end);
  }
  cr_assert_eq(bytes, end);
  cr_assert_eq(pread(fd, got, bytes, (off_t)base), (ssize_t)bytes);
  for (uint64_t k = 0; k < bytes; k++)
    cr_assert_eq(got[k], want[k], "byte %llu of the results: %u, %u expected",
                 (unsigned long long)k, got[k], want[k]);
  free(want);
  free(got);
  return bytes;
}

/* A file (a temporary file, or a memfd) of size bytes of JUNK. */
static int junk_file(bool memfd, size_t size, unsigned flags) {
  int fd;
  if (memfd) {
    fd = memfd_create("frames-out", MFD_CLOEXEC | flags);
  } else {
    char path[] = "/tmp/fz_frames_out_XXXXXX";
    fd = mkstemp(path);
    if (fd >= 0)
      unlink(path);
  }
  cr_assert_geq(fd, 0);
  uint8_t *b = malloc(size + 1);
  cr_assert_not_null(b);
  memset(b, JUNK, size);
  cr_assert_eq(pwrite(fd, b, size, 0), (ssize_t)size);
  free(b);
  return fd;
}

static uint64_t file_size(int fd) {
  struct stat st;
  cr_assert_eq(fstat(fd, &st), 0);
  return (uint64_t)st.st_size;
}

/* The bytes before the output were left alone. */
static void check_prefix(int fd, uint64_t base) {
  uint8_t b[256];
  cr_assert_leq(base, sizeof b);
  cr_assert_eq(pread(fd, b, base, 0), (ssize_t)base);
  for (uint64_t k = 0; k < base; k++)
    cr_assert_eq(b[k], JUNK, "byte %llu before out_offset was written", (unsigned long long)k);
}

/* Sparse and dense results into a regular file and a memfd, at an offset,
 * with a corrupt chunk in the middle: the inline reply's arrays, and the
 * file cut after them. */
Test(frames_output, sparse_and_dense_into_a_file_and_a_memfd, .timeout = 120) {
  static chunks c;
  make_chunks(&c);
  fzd_harness *h = start_daemon("\"workers\": 1");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  uint32_t id = 2;
  for (int dense = 0; dense < 2; dense++) {
    ref_frame ref[NFRAMES];
    take_ref(&w, id++, &c, 1, dense, 0, ref);
    cr_assert_lt(ref[1].status, 0);
    for (int memfd = 0; memfd < 2; memfd++) {
      const uint64_t base = 100 + (uint64_t)memfd * 13;
      int fd = junk_file(memfd, base + (1 << 16), 0);
      out_spec o = {fd, base, 0};
      fzp_message m;
      cr_assert_eq(call(&w, id++, &c, 1, dense, 0, &o, &m), 0);
      uint64_t bytes = check_output(&m, ref, fd, base, NFRAMES);
      fzp_message_free(&m);
      cr_assert_eq(file_size(fd), base + bytes, "not cut after the results");
      check_prefix(fd, base);
      close(fd);
    }
    free_ref(ref);
  }
  cr_assert_eq(wire_call0(&w, id, "ping", NULL), 0);
  wire_close(&w);
  stop_daemon(h);
  free_chunks(&c);
}

/* A setup's matrix: each frame's product at powder_at. */
Test(frames_output, a_matrix_product_at_powder_at, .timeout = 120) {
  static chunks c;
  make_chunks(&c);
  static uint8_t mask[NPIX];
  static uint32_t indices[NPIX];
  static float weights[NPIX];
  enum { ROWS = 5 };
  uint64_t indptr[ROWS + 1];
  for (size_t i = 0; i < NPIX; i++) {
    mask[i] = (uint8_t)(i % 5 != 1);
    indices[i] = (uint32_t)(NPIX - 1 - i);
    weights[i] = 0.25f + (float)(i % 3);
  }
  for (size_t r = 0; r <= ROWS; r++)
    indptr[r] = r * (NPIX / ROWS);
  fzd_harness *h = start_daemon("\"workers\": 1");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  uint64_t setup = 0;
  cr_assert_eq(frames_setup_call(&w, 2, mask, NPIX, indptr, ROWS, indices, weights, 0, &setup), 0);
  for (int dense = 0; dense < 2; dense++) {
    ref_frame ref[NFRAMES];
    take_ref(&w, 3 + 2 * (uint32_t)dense, &c, 2, dense, setup, ref);
    cr_assert_eq(ref[0].pl, ROWS * 8);
    int fd = junk_file(true, 64, 0);
    out_spec o = {fd, 8, 0};
    fzp_message m;
    cr_assert_eq(call(&w, 4 + 2 * (uint32_t)dense, &c, 2, dense, setup, &o, &m), 0);
    check_output(&m, ref, fd, 8, NFRAMES);
    uint64_t rows = 0;
    cr_assert_eq(fzp_get_u64(&m.result, "rows", &rows), 1);
    cr_assert_eq(rows, ROWS);
    fzp_message_free(&m);
    close(fd);
    free_ref(ref);
  }
  wire_close(&w);
  stop_daemon(h);
  free_chunks(&c);
}

/* out_length that the first two frames fit and the third misses by a
 * byte: those two come out right and the rest fail with ENOSPC from frame
 * 2 on; the file is cut after the frames written.  An out_length that is
 * exactly the results takes them all. */
Test(frames_output, out_length_too_small_fails_the_rest, .timeout = 120) {
  static chunks c;
  make_chunks(&c);
  fzd_harness *h = start_daemon("\"workers\": 1");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  uint32_t id = 2;
  for (int dense = 0; dense < 2; dense++) {
    ref_frame ref[NFRAMES];
    take_ref(&w, id++, &c, -1, dense, 0, ref);
    uint64_t end1 = frame_end(&ref[1], frame_end(&ref[0], 0));
    uint64_t all = end1;
    for (unsigned i = 2; i < NFRAMES; i++)
      all = frame_end(&ref[i], all);
    const uint64_t base = 40;
    int fd = junk_file(false, base + 3 * all, 0);
    out_spec o = {fd, base, frame_end(&ref[2], end1) - 1};
    fzp_message m;
    cr_assert_eq(call(&w, id++, &c, -1, dense, 0, &o, &m), 0);
    cr_assert_eq(check_output(&m, ref, fd, base, 2), end1);
    fzp_message_free(&m);
    cr_assert_eq(file_size(fd), base + end1);
    o.length = all;
    cr_assert_eq(call(&w, id++, &c, -1, dense, 0, &o, &m), 0);
    cr_assert_eq(check_output(&m, ref, fd, base, NFRAMES), all);
    fzp_message_free(&m);
    check_prefix(fd, base);
    close(fd);
    free_ref(ref);
  }
  wire_close(&w);
  stop_daemon(h);
  free_chunks(&c);
}

/* A memfd sealed against growing and shrinking is a buffer of fixed size:
 * a frame past its end fails with ENOSPC (and the frames after it), and it
 * is never cut, so the bytes after the results stay. */
Test(frames_output, a_fixed_size_memfd_is_not_cut, .timeout = 120) {
  static chunks c;
  make_chunks(&c);
  fzd_harness *h = start_daemon("\"workers\": 1");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  ref_frame ref[NFRAMES];
  take_ref(&w, 2, &c, -1, false, 0, ref);
  uint64_t end0 = frame_end(&ref[0], 0), all = end0;
  for (unsigned i = 1; i < NFRAMES; i++)
    all = frame_end(&ref[i], all);
  const uint64_t base = 16;
  const uint64_t sizes[2] = {base + frame_end(&ref[1], end0) - 1, base + all + 50};
  for (unsigned k = 0; k < 2; k++) {
    int fd = junk_file(true, sizes[k], MFD_ALLOW_SEALING);
    cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK), 0);
    out_spec o = {fd, base, 0};
    fzp_message m;
    cr_assert_eq(call(&w, 3 + k, &c, -1, false, 0, &o, &m), 0);
    uint64_t bytes = check_output(&m, ref, fd, base, k == 0 ? 1 : NFRAMES);
    cr_assert_eq(bytes, k == 0 ? end0 : all);
    fzp_message_free(&m);
    cr_assert_eq(file_size(fd), sizes[k]);
    uint8_t tail[50];
    cr_assert_eq(pread(fd, tail, sizeof tail, (off_t)(base + bytes)), (ssize_t)sizeof tail);
    for (size_t i = 0; i < sizeof tail; i++)
      cr_assert_eq(tail[i], JUNK, "byte %zu after the results was written", i);
    close(fd);
  }
  free_ref(ref);
  wire_close(&w);
  stop_daemon(h);
  free_chunks(&c);
}

/* Dense frames whose results together pass max_inline_bytes: refused
 * inline (EMSGSIZE), written whole into a memfd. */
Test(frames_output, results_past_max_inline_go_through_out_fd, .timeout = 120) {
  static chunks c;
  make_chunks(&c);
  fzd_harness *h = start_daemon("\"workers\": 1, \"max_inline_bytes\": 8192");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  fzp_message m;
  cr_assert_eq(call(&w, 2, &c, -1, true, 0, &inline_out, &m), FZ_EMSGSIZE);
  fzp_message_free(&m);
  int fd = junk_file(true, 0, 0);
  out_spec o = {fd, 0, 0};
  cr_assert_eq(call(&w, 3, &c, -1, true, 0, &o, &m), 0);
  const msgpack_object *frames = frames_of(&m);
  uint64_t bytes = 0;
  cr_assert_eq(fzp_get_u64(&m.result, "bytes", &bytes), 1);
  cr_assert_eq(bytes, sizeof c.px);
  for (unsigned i = 0; i < NFRAMES; i++) {
    uint64_t at = 1;
    static uint16_t px[NPIX];
    cr_assert_eq(fzp_get_u64(&frames->via.array.ptr[i], "values_at", &at), 1);
    cr_assert_eq(at, (uint64_t)i * sizeof px);
    cr_assert_eq(pread(fd, px, sizeof px, (off_t)at), (ssize_t)sizeof px);
    cr_assert_eq(memcmp(px, c.px[i], sizeof px), 0, "frame %u differs", i);
  }
  fzp_message_free(&m);
  close(fd);
  wire_close(&w);
  stop_daemon(h);
  free_chunks(&c);
}

/* Outputs refused before anything runs, as compress refuses them: an
 * O_APPEND descriptor and out_offset without an output (EPARAMS), and a
 * device output, which the CPU backend cannot write (ENOGPU; the GPU
 * backend refuses this one too, as the device named is not its GPU).  The
 * connection goes on. */
Test(frames_output, outputs_refused, .timeout = 120) {
  static chunks c;
  make_chunks(&c);
  const char *backend = getenv("FZD_TEST_BACKEND");
  bool gpu = backend != NULL && strcmp(backend, "gpu") == 0;
  fzd_harness *h = start_daemon("\"workers\": 1");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  char path[] = "/tmp/fz_frames_append_XXXXXX";
  int tmp = mkstemp(path);
  cr_assert_geq(tmp, 0);
  int fd = open(path, O_RDWR | O_APPEND);
  cr_assert_geq(fd, 0);
  unlink(path);
  close(tmp);
  out_spec o = {fd, 0, 0};
  fzp_message m;
  cr_assert_eq(call(&w, 2, &c, -1, false, 0, &o, &m), FZ_EPARAMS);
  fzp_message_free(&m);
  cr_assert_eq(file_size(fd), 0);
  close(fd);

  msgpack_packer *pk = wire_begin(&w, 3, "frames", 6);
  pack_common(pk, 10);
  pack_chunk_list(pk, &c, -1);
  fzp_pack_key(pk, "out_offset");
  msgpack_pack_uint64(pk, 0);
  cr_assert_eq(wire_send(&w, NULL, 0), 0);
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), FZ_EPARAMS);
  fzp_message_free(&m);

  static const unsigned char zero_handle[64];
  pk = wire_begin(&w, 4, "frames", 8);
  pack_common(pk, 10);
  pack_chunk_list(pk, &c, -1);
  fzp_pack_key(pk, "out_ipc");
  msgpack_pack_bin(pk, sizeof zero_handle);
  msgpack_pack_bin_body(pk, zero_handle, sizeof zero_handle);
  fzp_pack_key(pk, "out_length");
  msgpack_pack_uint64(pk, 1 << 20);
  fzp_pack_key(pk, "device");
  fzp_pack_key(pk, "GPU-00000000-0000-0000-0000-000000000000");
  cr_assert_eq(wire_send(&w, NULL, 0), 0);
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), FZ_ENOGPU, "code %d", wire_code(&m));
  const char *msg = NULL;
  uint32_t len = 0;
  cr_assert_eq(fzp_get_str(&m.error, "message", &msg, &len), 1);
  const char *says = gpu ? "GPU-00000000" : "need the GPU backend";
  cr_assert_not_null(memmem(msg, len, says, strlen(says)), "%.*s", (int)len, msg);
  fzp_message_free(&m);
  cr_assert_eq(wire_call0(&w, 5, "ping", NULL), 0);
  wire_close(&w);
  stop_daemon(h);
  free_chunks(&c);
}
