/*
 * test_frames_method.c - the "frames" method on a real fzd (CPU backend):
 * chunks made by the engine's encoder go through the daemon and come back
 * as the same sparse lists and dense frames the engine gives in process;
 * a corrupt chunk fails its own frame only; ranges past "data", bad params
 * and a batch larger than memory_limit are refused with their codes.
 */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fz.h"
#include "frames_util.h"
#include "fz_frames.h"
#include "jobs_util.h"
#include "wire.h"

/* The sparse frames of a reply against the engine's own, frame by frame;
 * bad is the index of the frame that must fail (-1: none). */
static void check_sparse_top(const fzp_message *m, const chunks *c, double cut, size_t top,
                             int bad) {
  const msgpack_object *frames = NULL;
  cr_assert_eq(fzp_get_obj(&m->result, "frames", &frames), 1);
  cr_assert_eq(frames->type, MSGPACK_OBJECT_ARRAY);
  cr_assert_eq(frames->via.array.size, NFRAMES);
  fz_frames_params fp = {.dtype = FZ_U16, .npixels = NPIX, .codec = FZ_BSLZ4_LZ4};
  fz_frames *f = NULL;
  cr_assert_eq(fz_frames_create(&fp, &f, NULL, 0), 0);
  static uint16_t vals[NPIX];
  static uint32_t idx[NPIX];
  for (int i = 0; i < NFRAMES; i++) {
    const msgpack_object *fr = &frames->via.array.ptr[i];
    int64_t status = 1;
    uint64_t count = 0;
    cr_assert_eq(fzp_get_i64(fr, "status", &status), 1);
    if (i == bad) {
      cr_assert(status == FZ_ECORRUPT || status == FZ_ETRUNC, "frame %d: status %lld", i,
                (long long)status);
      const msgpack_object *err = NULL;
      cr_assert_eq(fzp_get_obj(fr, "error", &err), 1);
      continue;
    }
    cr_assert_eq(status, 0, "frame %d failed", i);
    fz_frames_out o = {.values = vals, .indices = idx, .cap = NPIX};
    int64_t want = fz_frames_sparse(f, c->buf[i], c->len[i], cut, top, &o, NULL, 0);
    cr_assert_gt(want, 0);
    cr_assert_eq(fzp_get_u64(fr, "count", &count), 1);
    cr_assert_eq(count, (uint64_t)want);
    const void *v = NULL, *ix = NULL;
    uint32_t vl = 0, il = 0;
    cr_assert_eq(fzp_get_bin(fr, "values", &v, &vl), 1);
    cr_assert_eq(fzp_get_bin(fr, "indices", &ix, &il), 1);
    cr_assert_eq(vl, o.count * 2);
    cr_assert_eq(il, o.count * 4);
    cr_assert_eq(memcmp(v, vals, vl), 0, "frame %d: values differ", i);
    cr_assert_eq(memcmp(ix, idx, il), 0, "frame %d: indices differ", i);
    /* And against the frame itself: every listed pixel is above the cut. */
    for (size_t k = 0; k < o.count; k++)
      cr_assert(c->px[i][idx[k]] > cut && c->px[i][idx[k]] == vals[k]);
  }
  fz_frames_destroy(f);
}

static void check_sparse(const fzp_message *m, const chunks *c, double cut, int bad) {
  check_sparse_top(m, c, cut, 0, bad);
}

/* A list of chunks, one of them (bad >= 0) with a byte of its first block
 * flipped into a length past the chunk. */
static int call_list(wire *w, uint32_t id, chunks *c, double cut, int bad, const char *output,
                     fzp_message *m) {
  msgpack_packer *pk = wire_begin(w, id, "frames", output ? 6 : 5);
  pack_common(pk, cut);
  if (output) {
    fzp_pack_key(pk, "output");
    fzp_pack_key(pk, output);
  }
  pack_chunk_list(pk, c, bad);
  cr_assert_eq(wire_send(w, NULL, 0), 0);
  cr_assert_eq(wire_recv(w, m, 60000), 0);
  cr_assert_eq(m->msgid, id);
  return wire_code(m);
}

Test(frames_method, sparse_round_trip_and_one_bad_frame, .timeout = 120) {
  static chunks c;
  make_chunks(&c);
  fzd_harness *h = start_daemon("\"workers\": 1");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  fzp_message m;
  cr_assert_eq(call_list(&w, 2, &c, 10, -1, NULL, &m), 0);
  check_sparse(&m, &c, 10, -1);
  fzp_message_free(&m);
  cr_assert_eq(call_list(&w, 3, &c, 50, 2, "sparse", &m), 0);
  check_sparse(&m, &c, 50, 2);
  fzp_message_free(&m);
  /* The connection is still usable. */
  cr_assert_eq(wire_call0(&w, 4, "ping", NULL), 0);
  wire_close(&w);
  stop_daemon(h);
  free_chunks(&c);
}

/* top_n: the top_n largest pixels above the cut of each frame, in pixel
 * order, as the engine keeps them (on the GPU backend the decoder lists
 * them all and the worker selects). */
Test(frames_method, top_n_as_the_engine_keeps, .timeout = 120) {
  static chunks c;
  make_chunks(&c);
  fzd_harness *h = start_daemon("\"workers\": 1");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  static const size_t tops[] = {1, 3, 40, 100000};
  for (unsigned k = 0; k < sizeof tops / sizeof tops[0]; k++) {
    msgpack_packer *pk = wire_begin(&w, 2 + k, "frames", 6);
    pack_common(pk, 2);
    fzp_pack_key(pk, "top_n");
    msgpack_pack_uint64(pk, tops[k]);
    pack_chunk_list(pk, &c, k == 2 ? 1 : -1);
    cr_assert_eq(wire_send(&w, NULL, 0), 0);
    fzp_message m;
    cr_assert_eq(wire_recv(&w, &m, 60000), 0);
    cr_assert_eq(wire_code(&m), 0, "top %zu: code %d", tops[k], wire_code(&m));
    check_sparse_top(&m, &c, 2, tops[k], k == 2 ? 1 : -1);
    /* The frames have more pixels above the cut than the small tops. */
    const msgpack_object *frames = NULL;
    uint64_t count = 0;
    cr_assert_eq(fzp_get_obj(&m.result, "frames", &frames), 1);
    cr_assert_eq(fzp_get_u64(&frames->via.array.ptr[0], "count", &count), 1);
    cr_assert(tops[k] > 40 || count > tops[k], "top %zu of %llu", tops[k],
              (unsigned long long)count);
    fzp_message_free(&m);
  }
  wire_close(&w);
  stop_daemon(h);
  free_chunks(&c);
}

Test(frames_method, dense_frames_equal_the_originals, .timeout = 120) {
  static chunks c;
  make_chunks(&c);
  fzd_harness *h = start_daemon("\"workers\": 1");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  fzp_message m;
  cr_assert_eq(call_list(&w, 2, &c, 0, -1, "dense", &m), 0);
  const msgpack_object *frames = NULL;
  cr_assert_eq(fzp_get_obj(&m.result, "frames", &frames), 1);
  for (unsigned i = 0; i < NFRAMES; i++) {
    const void *v = NULL;
    uint32_t vl = 0;
    cr_assert_eq(fzp_get_bin(&frames->via.array.ptr[i], "values", &v, &vl), 1);
    cr_assert_eq(vl, sizeof c.px[i]);
    cr_assert_eq(memcmp(v, c.px[i], vl), 0, "frame %u differs", i);
  }
  fzp_message_free(&m);
  wire_close(&w);
  stop_daemon(h);
  free_chunks(&c);
}

/* One "data" bin with offsets and lengths: the same results; a range past
 * the end is ESIZE before anything runs. */
Test(frames_method, data_with_offsets_and_hostile_ranges, .timeout = 120) {
  static chunks c;
  make_chunks(&c);
  size_t total = 0;
  for (unsigned i = 0; i < NFRAMES; i++)
    total += c.len[i];
  uint8_t *all = malloc(total);
  cr_assert_not_null(all);
  uint64_t offs[NFRAMES], lens[NFRAMES];
  size_t at = 0;
  for (unsigned i = 0; i < NFRAMES; i++) {
    memcpy(all + at, c.buf[i], c.len[i]);
    offs[i] = at;
    lens[i] = c.len[i];
    at += c.len[i];
  }
  fzd_harness *h = start_daemon("\"workers\": 1");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  /* Past the end by one byte, by many, and a length whose sum with the
   * offset wraps around. */
  const uint64_t bad_len[2] = {1, (uint64_t)1 << 40};
  for (unsigned k = 0; k < 4; k++) {
    msgpack_packer *pk = wire_begin(&w, 10 + k, "frames", 7);
    pack_common(pk, 10);
    fzp_pack_key(pk, "data");
    msgpack_pack_bin(pk, total);
    msgpack_pack_bin_body(pk, all, total);
    fzp_pack_key(pk, "offsets");
    msgpack_pack_array(pk, NFRAMES);
    for (unsigned i = 0; i < NFRAMES; i++)
      msgpack_pack_uint64(pk, offs[i]);
    fzp_pack_key(pk, "lengths");
    msgpack_pack_array(pk, NFRAMES);
    for (unsigned i = 0; i < NFRAMES; i++)
      msgpack_pack_uint64(pk, i != NFRAMES - 1 || k == 0 ? lens[i]
                              : k == 3                   ? UINT64_MAX - offs[i] + 1
                                                         : lens[i] + bad_len[k - 1]);
    cr_assert_eq(wire_send(&w, NULL, 0), 0);
    fzp_message m;
    cr_assert_eq(wire_recv(&w, &m, 60000), 0);
    if (k == 0) {
      cr_assert_eq(wire_code(&m), 0);
      check_sparse(&m, &c, 10, -1);
    } else {
      cr_assert_eq(wire_code(&m), FZ_ESIZE, "k %u: code %d", k, wire_code(&m));
    }
    fzp_message_free(&m);
  }
  /* Bad params: an unknown codec, a zero extent, a chunk that is not bin. */
  msgpack_packer *pk = wire_begin(&w, 20, "frames", 4);
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, "u16");
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, 2);
  msgpack_pack_uint64(pk, 0);
  msgpack_pack_uint64(pk, 4);
  fzp_pack_key(pk, "codec");
  fzp_pack_key(pk, "lz4");
  fzp_pack_key(pk, "chunks");
  msgpack_pack_array(pk, 1);
  msgpack_pack_bin(pk, 0);
  cr_assert_eq(wire_send(&w, NULL, 0), 0);
  fzp_message m;
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), FZ_ESHAPE);
  fzp_message_free(&m);
  pk = wire_begin(&w, 21, "frames", 5);
  pack_common(pk, 1);
  fzp_pack_key(pk, "chunks");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint64(pk, 5);
  cr_assert_eq(wire_send(&w, NULL, 0), 0);
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), FZ_EPARAMS);
  fzp_message_free(&m);
  /* Chunks in device memory: the CPU backend refuses them (ENOGPU); on the
   * GPU backend a handle that names no allocation fails the import.  Either
   * way the connection goes on.  "in_offset" with inline data is EPARAMS. */
  const char *backend = getenv("FZD_TEST_BACKEND");
  bool gpu = backend != NULL && strcmp(backend, "gpu") == 0;
  static const unsigned char zero_handle[64];
  for (unsigned k = 0; k < 2; k++) {
    pk = wire_begin(&w, 22 + k, "frames", 8);
    pack_common(pk, 10);
    if (k == 0) {
      fzp_pack_key(pk, "in_ipc");
      msgpack_pack_bin(pk, sizeof zero_handle);
      msgpack_pack_bin_body(pk, zero_handle, sizeof zero_handle);
      fzp_pack_key(pk, "in_length");
      msgpack_pack_uint64(pk, total);
    } else {
      fzp_pack_key(pk, "data");
      msgpack_pack_bin(pk, total);
      msgpack_pack_bin_body(pk, all, total);
      fzp_pack_key(pk, "in_offset");
      msgpack_pack_uint64(pk, 0);
    }
    pack_table(pk, NFRAMES, offs, lens);
    cr_assert_eq(wire_send(&w, NULL, 0), 0);
    cr_assert_eq(wire_recv(&w, &m, 60000), 0);
    if (k == 1)
      cr_assert_eq(wire_code(&m), FZ_EPARAMS, "code %d", wire_code(&m));
    else if (!gpu)
      cr_assert_eq(wire_code(&m), FZ_ENOGPU, "code %d", wire_code(&m));
    else
      cr_assert_lt(wire_code(&m), 0);
    fzp_message_free(&m);
  }
  /* And a good batch still runs. */
  pk = wire_begin(&w, 30, "frames", 7);
  pack_common(pk, 10);
  fzp_pack_key(pk, "data");
  msgpack_pack_bin(pk, total);
  msgpack_pack_bin_body(pk, all, total);
  pack_table(pk, NFRAMES, offs, lens);
  cr_assert_eq(wire_send(&w, NULL, 0), 0);
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), 0);
  check_sparse(&m, &c, 10, -1);
  fzp_message_free(&m);
  wire_close(&w);
  stop_daemon(h);
  free(all);
  free_chunks(&c);
}

/* A batch whose buffers can never fit memory_limit is ENOMEM with the
 * limit in the message; the connection goes on. */
Test(frames_method, batch_over_memory_limit, .timeout = 120) {
  fzd_harness *h = start_daemon("\"workers\": 1, \"memory_limit\": 67108864");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  /* One dense frame of 32 Mi u16 pixels: 64 MiB of result and its scratch. */
  msgpack_packer *pk = wire_begin(&w, 2, "frames", 5);
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, "u16");
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, 2);
  msgpack_pack_uint64(pk, 8192);
  msgpack_pack_uint64(pk, 4096);
  fzp_pack_key(pk, "codec");
  fzp_pack_key(pk, "zstd");
  fzp_pack_key(pk, "output");
  fzp_pack_key(pk, "dense");
  fzp_pack_key(pk, "chunks");
  msgpack_pack_array(pk, 1);
  msgpack_pack_bin(pk, 1);
  msgpack_pack_bin_body(pk, "x", 1);
  cr_assert_eq(wire_send(&w, NULL, 0), 0);
  fzp_message m;
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), FZ_ENOMEM, "code %d", wire_code(&m));
  fzp_message_free(&m);
  cr_assert_eq(wire_call0(&w, 3, "ping", NULL), 0);
  wire_close(&w);
  stop_daemon(h);
}

/* A mask and a matrix set up once serve several calls, whose lists and
 * sums equal the engine's in process; bad matrices, unknown ids and the
 * per-connection limits are refused. */
Test(frames_method, setup_once_used_twice_and_limits, .timeout = 120) {
  static chunks c;
  make_chunks(&c);
  static uint8_t mask[NPIX];
  for (size_t i = 0; i < NPIX; i++)
    mask[i] = (uint8_t)(i % 7 != 3);
  /* 8 rows, each summing a band of pixels with weights 0.5 .. */
  enum { ROWS = 8 };
  uint64_t indptr[ROWS + 1];
  static uint32_t indices[NPIX];
  static float weights[NPIX];
  indptr[0] = 0;
  for (size_t k = 0; k < NPIX; k++) {
    indices[k] = (uint32_t)k;
    weights[k] = 0.5f + (float)(k % 5);
  }
  for (size_t r = 1; r <= ROWS; r++)
    indptr[r] = r * (NPIX / ROWS);
  fzd_harness *h = start_daemon("\"workers\": 1, \"max_job_bytes\": 1048576");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  uint64_t id = 0, other = 0;
  cr_assert_eq(frames_setup_call(&w, 2, NULL, NPIX, indptr, ROWS, indices, weights, 1, &id),
               FZ_ESIZE);
  cr_assert_eq(frames_setup_call(&w, 3, NULL, NPIX, indptr, ROWS, indices, weights, 2, &id),
               FZ_EINVAL);
  cr_assert_eq(frames_setup_call(&w, 4, mask, NPIX, indptr, ROWS, indices, weights, 0, &id), 0);
  cr_assert_eq(frames_setup_call(&w, 5, mask, NPIX, NULL, 0, NULL, NULL, 0, &other), 0);
  cr_assert_neq(id, other);

  fz_frames_csr csr = {.nrows = ROWS, .indptr = indptr, .indices = indices, .w_f32 = weights};
  fz_frames_params fp = {
      .dtype = FZ_U16, .npixels = NPIX, .codec = FZ_BSLZ4_LZ4, .mask = mask, .csr = &csr};
  fz_frames *f = NULL;
  cr_assert_eq(fz_frames_create(&fp, &f, NULL, 0), 0);
  static uint16_t vals[NPIX];
  static uint32_t idx[NPIX];
  for (unsigned call = 0; call < 2; call++) {
    const double cut = call == 0 ? 1 : 60;
    msgpack_packer *pk = wire_begin(&w, 10 + call, "frames", 6);
    pack_common(pk, cut);
    fzp_pack_key(pk, "setup");
    msgpack_pack_uint64(pk, id);
    pack_chunk_list(pk, &c, -1);
    cr_assert_eq(wire_send(&w, NULL, 0), 0);
    fzp_message m;
    cr_assert_eq(wire_recv(&w, &m, 60000), 0);
    cr_assert_eq(wire_code(&m), 0);
    const msgpack_object *frames = NULL;
    cr_assert_eq(fzp_get_obj(&m.result, "frames", &frames), 1);
    for (unsigned i = 0; i < NFRAMES; i++) {
      const msgpack_object *fr = &frames->via.array.ptr[i];
      double powder[ROWS];
      fz_frames_out o = {.values = vals, .indices = idx, .cap = NPIX, .powder_f64 = powder};
      int64_t want = fz_frames_sparse(f, c.buf[i], c.len[i], cut, 0, &o, NULL, 0);
      cr_assert_geq(want, 0);
      uint64_t count = 0;
      const void *v = NULL, *ix = NULL, *pw = NULL;
      uint32_t vl = 0, il = 0, pl = 0;
      cr_assert_eq(fzp_get_u64(fr, "count", &count), 1);
      cr_assert_eq(count, (uint64_t)want);
      cr_assert_eq(fzp_get_bin(fr, "values", &v, &vl), 1);
      cr_assert_eq(fzp_get_bin(fr, "indices", &ix, &il), 1);
      cr_assert_eq(fzp_get_bin(fr, "powder", &pw, &pl), 1);
      cr_assert_eq(vl, o.count * 2);
      cr_assert_eq(memcmp(v, vals, vl), 0);
      cr_assert_eq(memcmp(ix, idx, il), 0);
      cr_assert_eq(pl, sizeof powder);
      cr_assert_eq(memcmp(pw, powder, pl), 0, "call %u frame %u: sums differ", call, i);
      /* The mask holds: no listed pixel is a masked one. */
      for (size_t k = 0; k < o.count; k++)
        cr_assert_neq(idx[k] % 7, 3u);
    }
    fzp_message_free(&m);
  }
  fz_frames_destroy(f);

  /* An unknown id, and a setup for frames of another size. */
  msgpack_packer *pk = wire_begin(&w, 20, "frames", 6);
  pack_common(pk, 1);
  fzp_pack_key(pk, "setup");
  msgpack_pack_uint64(pk, 999);
  fzp_pack_key(pk, "chunks");
  msgpack_pack_array(pk, 1);
  msgpack_pack_bin(pk, c.len[0]);
  msgpack_pack_bin_body(pk, c.buf[0], c.len[0]);
  cr_assert_eq(wire_send(&w, NULL, 0), 0);
  fzp_message m;
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), FZ_EPARAMS);
  fzp_message_free(&m);

  /* Past max_job_bytes (1 MiB) together: refused; then entries up to the
   * most a connection may hold, and one more refused. */
  static uint8_t big[1 << 20];
  cr_assert_eq(frames_setup_call(&w, 30, big, sizeof big, NULL, 0, NULL, NULL, 0, &other),
               FZ_ERANGE);
  unsigned made = 2;
  while (made < 8) {
    cr_assert_eq(frames_setup_call(&w, 40 + made, mask, NPIX, NULL, 0, NULL, NULL, 0, &other), 0);
    made++;
  }
  cr_assert_eq(frames_setup_call(&w, 60, mask, NPIX, NULL, 0, NULL, NULL, 0, &other), FZ_ERANGE);
  cr_assert_eq(wire_call0(&w, 61, "ping", NULL), 0);
  wire_close(&w);
  /* A new connection starts with none: the old ids mean nothing there. */
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  cr_assert_eq(frames_setup_call(&w, 2, mask, NPIX, NULL, 0, NULL, NULL, 0, &other), 0);
  wire_close(&w);
  stop_daemon(h);
  free_chunks(&c);
}

/* Chunks by descriptor: a file holding a header and the chunks, the chunk
 * table pointing into it; the same lists as inline.  A range past the
 * file's end is ESIZE; in_fd without a descriptor is EPARAMS. */
Test(frames_method, chunks_from_a_descriptor, .timeout = 120) {
  static chunks c;
  make_chunks(&c);
  char path[] = "/tmp/fz_frames_fd_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  unlink(path);
  uint64_t offs[NFRAMES], lens[NFRAMES];
  uint64_t at = 100; /* a header before the first chunk */
  cr_assert_eq(pwrite(fd, "HDF5-like header", 16, 0), 16);
  for (unsigned i = 0; i < NFRAMES; i++) {
    cr_assert_eq(pwrite(fd, c.buf[i], c.len[i], (off_t)at), (ssize_t)c.len[i]);
    offs[i] = at;
    lens[i] = c.len[i];
    at += c.len[i] + 10;
  }
  fzd_harness *h = start_daemon("\"workers\": 1");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  for (unsigned k = 0; k < 2; k++) {
    msgpack_packer *pk = wire_begin(&w, 2 + k, "frames", 8);
    pack_common(pk, 10);
    fzp_pack_key(pk, "in_fd");
    msgpack_pack_uint64(pk, 0);
    fzp_pack_key(pk, "nfds");
    msgpack_pack_uint64(pk, 1);
    fzp_pack_key(pk, "offsets");
    msgpack_pack_array(pk, NFRAMES);
    for (unsigned i = 0; i < NFRAMES; i++)
      msgpack_pack_uint64(pk, offs[i]);
    fzp_pack_key(pk, "lengths");
    msgpack_pack_array(pk, NFRAMES);
    for (unsigned i = 0; i < NFRAMES; i++)
      msgpack_pack_uint64(pk, k == 1 && i == 1 ? at : lens[i]);
    cr_assert_eq(wire_send(&w, &fd, 1), 0);
    fzp_message m;
    cr_assert_eq(wire_recv(&w, &m, 60000), 0);
    if (k == 0) {
      cr_assert_eq(wire_code(&m), 0);
      check_sparse(&m, &c, 10, -1);
    } else {
      cr_assert_eq(wire_code(&m), FZ_ESIZE, "code %d", wire_code(&m));
    }
    fzp_message_free(&m);
  }
  msgpack_packer *pk = wire_begin(&w, 9, "frames", 7);
  pack_common(pk, 10);
  fzp_pack_key(pk, "in_fd");
  msgpack_pack_uint64(pk, 0);
  fzp_pack_key(pk, "offsets");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint64(pk, offs[0]);
  fzp_pack_key(pk, "lengths");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint64(pk, lens[0]);
  cr_assert_eq(wire_send(&w, NULL, 0), 0);
  fzp_message m;
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), FZ_EPARAMS);
  fzp_message_free(&m);
  cr_assert_eq(wire_call0(&w, 10, "ping", NULL), 0);
  close(fd);
  wire_close(&w);
  stop_daemon(h);
  free_chunks(&c);
}

/* A batch of many megabytes from a descriptor, which the daemon reads on
 * several threads: every frame's list equals the engine's from the same
 * chunk, whichever thread read it, for two clients at once. */
Test(frames_method, a_large_batch_from_a_descriptor, .timeout = 240) {
  enum { N = 96, SIDE = 256, PX = SIDE * SIDE };
  static uint16_t px[PX];
  static uint16_t vals[PX];
  static uint32_t idx[PX];
  size_t bound = fz_bslz4_bound(FZ_BSLZ4_LZ4, PX, 2, 0);
  uint8_t *chunk = malloc(bound);
  uint64_t offs[N], lens[N], at = 4096;
  char path[] = "/tmp/fz_frames_large_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  unlink(path);
  uint64_t s = 12345;
  for (unsigned f = 0; f < N; f++) {
    /* Noise that LZ4 cannot shrink: about 128 KiB a chunk. */
    for (size_t i = 0; i < PX; i++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      px[i] = (uint16_t)(s >> 48);
    }
    int64_t len = fz_bslz4_encode(FZ_BSLZ4_LZ4, px, PX, 2, 0, 0, chunk, bound, NULL, 0);
    cr_assert_gt(len, 0);
    cr_assert_eq(pwrite(fd, chunk, (size_t)len, (off_t)at), len);
    offs[f] = at;
    lens[f] = (uint64_t)len;
    at += (uint64_t)len + 1 + f % 7;
  }
  cr_assert_gt(at, 8u << 20, "the batch must be large enough to be read on threads");
  /* The same batch from two clients at once: two workers' runs share the
   * daemon's readers. */
  fzd_harness *h = start_daemon("\"workers\": 2");
  wire w[2];
  for (int c = 0; c < 2; c++) {
    wire_open(&w[c], h, false);
    cr_assert_eq(wire_hello(&w[c], NULL), 0);
    msgpack_packer *pk = wire_begin(&w[c], 2, "frames", 8);
    pack_u16_shape(pk, SIDE, SIDE);
    fzp_pack_key(pk, "cut");
    msgpack_pack_double(pk, 65000);
    fzp_pack_key(pk, "in_fd");
    msgpack_pack_uint64(pk, 0);
    fzp_pack_key(pk, "nfds");
    msgpack_pack_uint64(pk, 1);
    fzp_pack_key(pk, "codec");
    fzp_pack_key(pk, "lz4");
    pack_table(pk, N, offs, lens);
    cr_assert_eq(wire_send(&w[c], &fd, 1), 0);
  }
  fz_frames_params fp = {.dtype = FZ_U16, .npixels = PX, .codec = FZ_BSLZ4_LZ4};
  fz_frames *f = NULL;
  cr_assert_eq(fz_frames_create(&fp, &f, NULL, 0), 0);
  for (int c = 0; c < 2; c++) {
    fzp_message m;
    cr_assert_eq(wire_recv(&w[c], &m, 120000), 0);
    cr_assert_eq(wire_code(&m), 0, "client %d: code %d", c, wire_code(&m));
    const msgpack_object *frames = NULL;
    cr_assert_eq(fzp_get_obj(&m.result, "frames", &frames), 1);
    cr_assert_eq(frames->via.array.size, N);
    for (unsigned i = 0; i < N; i++) {
      cr_assert_eq(pread(fd, chunk, lens[i], (off_t)offs[i]), (ssize_t)lens[i]);
      fz_frames_out o = {.values = vals, .indices = idx, .cap = PX};
      int64_t want = fz_frames_sparse(f, chunk, lens[i], 65000, 0, &o, NULL, 0);
      cr_assert_gt(want, 0);
      const msgpack_object *fr = &frames->via.array.ptr[i];
      uint64_t count = 0;
      const void *v = NULL, *ix = NULL;
      uint32_t vl = 0, il = 0;
      cr_assert_eq(fzp_get_u64(fr, "count", &count), 1, "client %d, frame %u", c, i);
      cr_assert_eq(count, (uint64_t)want, "client %d, frame %u", c, i);
      cr_assert_eq(fzp_get_bin(fr, "values", &v, &vl), 1);
      cr_assert_eq(fzp_get_bin(fr, "indices", &ix, &il), 1);
      cr_assert_eq(vl, o.count * 2);
      cr_assert(memcmp(v, vals, vl) == 0 && memcmp(ix, idx, il) == 0, "client %d, frame %u differs",
                c, i);
    }
    fzp_message_free(&m);
    wire_close(&w[c]);
  }
  fz_frames_destroy(f);
  close(fd);
  stop_daemon(h);
  free(chunk);
}

/* Frames whose results together pass memory_limit: the first ones come
 * back, and a frame that finds no room fails alone with EBUSY (the room is
 * held by the batch itself, not beyond the limit).  Which frames find none
 * is not fixed: room the message's input held may come back meanwhile. */
Test(frames_method, frames_past_the_room_fail_with_ebusy, .timeout = 120) {
  enum { N = 12, SIDE = 256, PX = SIDE * SIDE };
  static uint16_t px[PX];
  for (size_t i = 0; i < PX; i++)
    px[i] = (uint16_t)(i % 1000);
  size_t bound = fz_bslz4_bound(FZ_BSLZ4_LZ4, PX, 2, 0);
  uint8_t *chunk = malloc(bound);
  int64_t len = fz_bslz4_encode(FZ_BSLZ4_LZ4, px, PX, 2, 0, 0, chunk, bound, NULL, 0);
  cr_assert_gt(len, 0);
  /* 1 MiB: the batch's scratch and a few 128 KiB dense frames. */
  fzd_harness *h = start_daemon("\"workers\": 1, \"memory_limit\": 1048576");
  wire w;
  wire_open(&w, h, false);
  cr_assert_eq(wire_hello(&w, NULL), 0);
  msgpack_packer *pk = wire_begin(&w, 2, "frames", 4);
  pack_u16_shape(pk, SIDE, SIDE);
  fzp_pack_key(pk, "output");
  fzp_pack_key(pk, "dense");
  fzp_pack_key(pk, "chunks");
  msgpack_pack_array(pk, N);
  for (int i = 0; i < N; i++) {
    msgpack_pack_bin(pk, (size_t)len);
    msgpack_pack_bin_body(pk, chunk, (size_t)len);
  }
  cr_assert_eq(wire_send(&w, NULL, 0), 0);
  fzp_message m;
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), 0, "code %d", wire_code(&m));
  const msgpack_object *frames = NULL;
  cr_assert_eq(fzp_get_obj(&m.result, "frames", &frames), 1);
  cr_assert_eq(frames->via.array.size, N);
  int done = 0, busy = 0;
  for (int i = 0; i < N; i++) {
    int64_t status = 1;
    cr_assert_eq(fzp_get_i64(&frames->via.array.ptr[i], "status", &status), 1);
    if (status == 0) {
      const void *v = NULL;
      uint32_t vl = 0;
      cr_assert_eq(fzp_get_bin(&frames->via.array.ptr[i], "values", &v, &vl), 1);
      cr_assert(vl == sizeof px && memcmp(v, px, vl) == 0, "frame %d differs", i);
      done++;
    } else {
      cr_assert_eq(status, FZ_EBUSY, "frame %d: status %lld", i, (long long)status);
      busy++;
    }
  }
  cr_assert(done > 0 && busy > 0, "%d frames decoded, %d found no room", done, busy);
  fzp_message_free(&m);
  cr_assert_eq(wire_call0(&w, 3, "ping", NULL), 0);
  wire_close(&w);
  stop_daemon(h);
  free(chunk);
}
