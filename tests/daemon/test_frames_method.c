/*
 * test_frames_method.c - the "frames" method on a real fzd (CPU backend):
 * chunks made by the engine's encoder go through the daemon and come back
 * as the same sparse lists and dense frames the engine gives in process;
 * a corrupt chunk fails its own frame only; ranges past "data", bad params
 * and a batch larger than memory_limit are refused with their codes.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fz.h"
#include "fz_frames.h"
#include "jobs_util.h"
#include "wire.h"

#define NI 48
#define NJ 64
#define NPIX (NI * NJ)
#define NFRAMES 4

/* A frame of u16: a low background with a few peaks, different per seed. */
static void make_frame(uint16_t *px, unsigned seed) {
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < NPIX; i++) {
    s = s * 1103515245u + 12345u;
    px[i] = (uint16_t)((s >> 16) % 4);
  }
  for (unsigned k = 0; k < 20 + seed; k++) {
    s = s * 1103515245u + 12345u;
    px[(s >> 8) % NPIX] = (uint16_t)(100 + k * 7);
  }
}

typedef struct chunks {
  uint8_t *buf[NFRAMES];
  size_t len[NFRAMES];
  uint16_t px[NFRAMES][NPIX];
} chunks;

static void make_chunks(chunks *c) {
  for (unsigned f = 0; f < NFRAMES; f++) {
    make_frame(c->px[f], f);
    size_t cap = fz_bslz4_bound(FZ_BSLZ4_LZ4, NPIX, 2, 0);
    c->buf[f] = malloc(cap);
    cr_assert_not_null(c->buf[f]);
    int64_t n = fz_bslz4_encode(FZ_BSLZ4_LZ4, c->px[f], NPIX, 2, 0, 0, c->buf[f], cap, NULL, 0);
    cr_assert_gt(n, 0);
    c->len[f] = (size_t)n;
  }
}

static void free_chunks(chunks *c) {
  for (unsigned f = 0; f < NFRAMES; f++)
    free(c->buf[f]);
}

/* Packs the common params: dtype u16, shape [NI, NJ], codec lz4, cut. */
static void pack_common(msgpack_packer *pk, double cut) {
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, "u16");
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, 2);
  msgpack_pack_uint64(pk, NI);
  msgpack_pack_uint64(pk, NJ);
  fzp_pack_key(pk, "codec");
  fzp_pack_key(pk, "lz4");
  fzp_pack_key(pk, "cut");
  msgpack_pack_double(pk, cut);
}

/* The sparse frames of a reply against the engine's own, frame by frame;
 * bad is the index of the frame that must fail (-1: none). */
static void check_sparse(const fzp_message *m, const chunks *c, double cut, int bad) {
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
    int64_t want = fz_frames_sparse(f, c->buf[i], c->len[i], cut, 0, &o, NULL, 0);
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
  fzp_pack_key(pk, "chunks");
  msgpack_pack_array(pk, NFRAMES);
  for (int i = 0; i < NFRAMES; i++) {
    uint8_t *b = malloc(c->len[i]);
    cr_assert_not_null(b);
    memcpy(b, c->buf[i], c->len[i]);
    if (i == bad)
      b[FZ_BSLZ4_HEADER] = 0x7f; /* the first block's big-endian length */
    msgpack_pack_bin(pk, c->len[i]);
    msgpack_pack_bin_body(pk, b, c->len[i]);
    free(b);
  }
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
  pk = wire_begin(&w, 21, "frames", 4);
  pack_common(pk, 1);
  fzp_pack_key(pk, "chunks");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint64(pk, 5);
  cr_assert_eq(wire_send(&w, NULL, 0), 0);
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), FZ_EPARAMS);
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
  /* 4096 frames of 4 Mi u16 pixels, dense: 32 GiB of results. */
  msgpack_packer *pk = wire_begin(&w, 2, "frames", 5);
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, "u16");
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, 2);
  msgpack_pack_uint64(pk, 2048);
  msgpack_pack_uint64(pk, 2048);
  fzp_pack_key(pk, "codec");
  fzp_pack_key(pk, "zstd");
  fzp_pack_key(pk, "output");
  fzp_pack_key(pk, "dense");
  fzp_pack_key(pk, "chunks");
  msgpack_pack_array(pk, 4096);
  for (unsigned i = 0; i < 4096; i++) {
    msgpack_pack_bin(pk, 1);
    msgpack_pack_bin_body(pk, "x", 1);
  }
  cr_assert_eq(wire_send(&w, NULL, 0), 0);
  fzp_message m;
  cr_assert_eq(wire_recv(&w, &m, 60000), 0);
  cr_assert_eq(wire_code(&m), FZ_ENOMEM, "code %d", wire_code(&m));
  fzp_message_free(&m);
  cr_assert_eq(wire_call0(&w, 3, "ping", NULL), 0);
  wire_close(&w);
  stop_daemon(h);
}
