/*
 * test_frames_client.c - fz_client_frames() and fz_client_frames_setup()
 * against a real fzd: chunks made by the engine's encoder, laid out as an
 * HDF5 chunk table in one buffer (with a gap and out of order), come back
 * as the engine's own lists, sums and dense frames; a corrupt chunk fails
 * its frame only; bad tables are refused before anything is sent; the
 * chunks read by the daemon from a file passed as a descriptor; results
 * written by the daemon into a descriptor where the results say.
 */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fz.h"
#include "fz_frames.h"
#include "fzclient.h"
#include "testutil.h"

#define NPIX 4000 /* not a multiple of 8: the verbatim tail is exercised */
#define NF 5

static fz_client *connect_ok(const fzd_harness *h) {
  char addr[512];
  fz_client_opts o;
  fz_client_opts_init(&o);
  o.timeout_ms = 60000;
  fz_client *c = NULL;
  char why[256];
  int rc = fz_client_connect(&c, tu_unix_addr(h, addr, sizeof addr), &o, why, sizeof why);
  cr_assert_eq(rc, 0, "connect: %s", why);
  return c;
}

enum { ROWS = 10 };

/* NF frames of u32 and their chunks laid out as an HDF5 chunk table in one
 * buffer, with bytes before the first, gaps between and in reverse order;
 * bad the same with frame 3's first block length made to run past its
 * chunk. */
typedef struct batch {
  uint32_t px[NF][NPIX];
  uint8_t buf[NF * 20000 + 64], bad[NF * 20000 + 64];
  uint64_t offs[NF], lens[NF];
} batch;

static void make_batch(batch *b) {
  size_t at = 64;                     /* bytes before the first chunk, never sent */
  for (int f = NF - 1; f >= 0; f--) { /* stored in reverse order */
    uint32_t s = 77u + (uint32_t)f;
    for (size_t i = 0; i < NPIX; i++) {
      s = s * 1664525u + 1013904223u;
      b->px[f][i] = (s >> 24) < 8 ? 1000 + (s >> 20) % 500 : (s >> 28);
    }
    int64_t n = fz_bslz4_encode(FZ_BSLZ4_LZ4, b->px[f], NPIX, 4, 0, 0, b->buf + at,
                                sizeof b->buf - at, NULL, 0);
    cr_assert_gt(n, 0);
    b->offs[f] = at;
    b->lens[f] = (uint64_t)n;
    at += (size_t)n + 3; /* gaps between chunks */
  }
  memcpy(b->bad, b->buf, sizeof b->buf);
  b->bad[b->offs[3] + FZ_BSLZ4_HEADER] = 0x40;
}

/* A mask and a matrix of ROWS rows with i32 weights. */
typedef struct setup {
  uint8_t mask[NPIX];
  uint64_t indptr[ROWS + 1];
  uint32_t indices[NPIX];
  int32_t weights[NPIX];
} setup;

static fz_frames_setup_args make_setup(setup *u) {
  for (size_t i = 0; i < NPIX; i++)
    u->mask[i] = i % 11 != 0;
  for (size_t k = 0; k < NPIX; k++) {
    u->indices[k] = (uint32_t)((k * 7) % NPIX);
    u->weights[k] = (int32_t)(k % 3) - 1;
  }
  for (size_t r = 0; r <= ROWS; r++)
    u->indptr[r] = r * (NPIX / ROWS);
  return (fz_frames_setup_args){.npixels = NPIX,
                                .mask = u->mask,
                                .rows = ROWS,
                                .indptr = u->indptr,
                                .indices = u->indices,
                                .weights = u->weights,
                                .weights_i32 = 1};
}

Test(frames_client, lists_sums_dense_and_a_bad_frame, .timeout = 120) {
  static batch bt;
  make_batch(&bt);
  uint32_t(*px)[NPIX] = bt.px;
  uint8_t *buf = bt.buf, *bad = bt.bad;
  uint64_t *offs = bt.offs, *lens = bt.lens;
  static setup su;
  fz_frames_setup_args sa = make_setup(&su);
  uint64_t *indptr = su.indptr;
  uint32_t *indices = su.indices;
  int32_t *weights = su.weights;
  uint8_t *mask = su.mask;

  fzd_harness *h = tu_start(NULL);
  fz_client *c = connect_ok(h);
  uint64_t id = 0;
  cr_assert_eq(fz_client_frames_setup(c, &sa, &id), 0, "%s", fz_client_errmsg(c));

  fz_frames_csr csr = {.nrows = ROWS, .indptr = indptr, .indices = indices, .w_i32 = weights};
  fz_frames_params fp = {
      .dtype = FZ_U32, .npixels = NPIX, .codec = FZ_BSLZ4_LZ4, .mask = mask, .csr = &csr};
  fz_frames *eng = NULL;
  cr_assert_eq(fz_frames_create(&fp, &eng, NULL, 0), 0);

  fz_frames_request rq = {.dtype = "u32",
                          .ndims = 2,
                          .shape = {40, 100},
                          .cut = 100,
                          .setup = id,
                          .data = bad,
                          .offsets = offs,
                          .lengths = lens,
                          .nframes = NF};
  static fz_frame_result res[NF];
  static uint32_t vals[NPIX], idx[NPIX];
  for (int pass = 0; pass < 2; pass++) {
    rq.top_n = pass ? 7 : 0;
    cr_assert_eq(fz_client_frames(c, &rq, res), 0, "%s", fz_client_errmsg(c));
    for (int f = 0; f < NF; f++) {
      if (f == 3) {
        cr_assert(res[f].status == FZ_ECORRUPT || res[f].status == FZ_ETRUNC);
        cr_assert_neq(res[f].message[0], '\0');
        cr_assert_null(res[f].values);
        continue;
      }
      int64_t sums[ROWS];
      fz_frames_out o = {.values = vals, .indices = idx, .cap = NPIX, .powder_i64 = sums};
      int64_t want = fz_frames_sparse(eng, buf + offs[f], lens[f], 100, rq.top_n, &o, NULL, 0);
      cr_assert_gt(want, 0);
      cr_assert_eq(res[f].status, 0, "frame %d: %s", f, res[f].message);
      cr_assert_eq(res[f].count, (uint64_t)want);
      cr_assert_eq(res[f].listed, o.count);
      cr_assert_eq(memcmp(res[f].values, vals, o.count * 4), 0);
      cr_assert_eq(memcmp(res[f].indices, idx, o.count * 4), 0);
      cr_assert_eq(res[f].rows, ROWS);
      cr_assert_eq(memcmp(res[f].powder, sums, sizeof sums), 0, "frame %d: sums differ", f);
    }
    fz_client_frame_results_free(res, NF);
  }
  fz_frames_destroy(eng);

  /* Dense frames: the originals, bit for bit. */
  rq.dense = 1;
  rq.setup = 0;
  rq.data = buf;
  cr_assert_eq(fz_client_frames(c, &rq, res), 0, "%s", fz_client_errmsg(c));
  for (int f = 0; f < NF; f++) {
    cr_assert_eq(res[f].status, 0);
    cr_assert_eq(res[f].listed, NPIX);
    cr_assert_null(res[f].indices);
    cr_assert_eq(memcmp(res[f].values, px[f], sizeof px[f]), 0, "frame %d differs", f);
  }
  fz_client_frame_results_free(res, NF);

  /* The same chunks from a file with the same table: the daemon reads them
   * itself, and the frames are the same. */
  char path[] = "/tmp/fz_frames_client_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  unlink(path);
  cr_assert_eq(write(fd, buf, sizeof bt.buf), (ssize_t)sizeof bt.buf);
  rq.has_fd = 1;
  rq.fd = fd;
  rq.data = NULL;
  cr_assert_eq(fz_client_frames(c, &rq, res), 0, "%s", fz_client_errmsg(c));
  for (int f = 0; f < NF; f++) {
    cr_assert_eq(res[f].status, 0);
    cr_assert_eq(memcmp(res[f].values, px[f], sizeof px[f]), 0, "frame %d differs", f);
  }
  fz_client_frame_results_free(res, NF);
  close(fd);
  rq.has_fd = 0;
  rq.data = buf;

  /* A table whose offset and length overflow is refused by the library;
   * an unknown setup id by the daemon, and the handle goes on. */
  uint64_t wrap[NF];
  memcpy(wrap, lens, sizeof wrap);
  wrap[1] = UINT64_MAX - offs[1] + 5;
  rq.lengths = wrap;
  cr_assert_eq(fz_client_frames(c, &rq, res), FZ_ESIZE);
  rq.lengths = lens;
  rq.setup = 12345;
  cr_assert_eq(fz_client_frames(c, &rq, res), FZ_EPARAMS);
  cr_assert_eq(fz_client_ping(c, NULL), 0);
  fz_client_close(c);
  tu_stop(h);
}

/* Bytes at off of fd against want. */
static void check_at(int fd, uint64_t off, const void *want, size_t len, const char *what, int f) {
  uint8_t *got = malloc(len + 1);
  cr_assert_not_null(got);
  cr_assert_eq(pread(fd, got, len, (off_t)off), (ssize_t)len);
  cr_assert_eq(memcmp(got, want, len), 0, "frame %d: %s differ", f, what);
  free(got);
}

/* Results into a descriptor: a memfd at an offset, the arrays where
 * values_at, indices_at and powder_at say and the same bytes as inline,
 * the memfd cut after them; an out_length too small fails the frame that
 * misses and every later one with FZ_ENOSPC; a request with two outputs
 * is refused by the library. */
Test(frames_client, results_into_a_descriptor, .timeout = 120) {
  static batch bt;
  make_batch(&bt);
  static setup su;
  fz_frames_setup_args sa = make_setup(&su);
  fzd_harness *h = tu_start(NULL);
  fz_client *c = connect_ok(h);
  uint64_t id = 0;
  cr_assert_eq(fz_client_frames_setup(c, &sa, &id), 0, "%s", fz_client_errmsg(c));
  fz_frames_request rq = {.dtype = "u32",
                          .ndims = 2,
                          .shape = {40, 100},
                          .cut = 100,
                          .setup = id,
                          .data = bt.bad,
                          .offsets = bt.offs,
                          .lengths = bt.lens,
                          .nframes = NF};
  static fz_frame_result inl[NF], res[NF];
  cr_assert_eq(fz_client_frames(c, &rq, inl), 0, "%s", fz_client_errmsg(c));
  int fd = memfd_create("frames-out", MFD_CLOEXEC);
  cr_assert_geq(fd, 0);
  cr_assert_eq(ftruncate(fd, 1 << 20), 0);
  const uint64_t base = 24;
  rq.has_out_fd = 1;
  rq.out_fd = fd;
  rq.out_offset = base;
  cr_assert_eq(fz_client_frames(c, &rq, res), 0, "%s", fz_client_errmsg(c));
  uint64_t end = 0;
  for (int f = 0; f < NF; f++) {
    cr_assert_eq(res[f].status, inl[f].status, "frame %d: %s", f, res[f].message);
    if (f == 3) {
      cr_assert_lt(res[f].status, 0);
      continue;
    }
    cr_assert(res[f].values == NULL && res[f].indices == NULL && res[f].powder == NULL);
    cr_assert_eq(res[f].count, inl[f].count);
    cr_assert_eq(res[f].listed, inl[f].listed);
    cr_assert_eq(res[f].rows, ROWS);
    cr_assert_eq(res[f].values_at % 8, 0);
    cr_assert_geq(res[f].values_at, end);
    check_at(fd, base + res[f].values_at, inl[f].values, inl[f].listed * 4, "values", f);
    check_at(fd, base + res[f].indices_at, inl[f].indices, inl[f].listed * 4, "indices", f);
    check_at(fd, base + res[f].powder_at, inl[f].powder, ROWS * 8, "sums", f);
    end = res[f].powder_at + ROWS * 8;
  }
  struct stat st;
  cr_assert_eq(fstat(fd, &st), 0);
  cr_assert_eq((uint64_t)st.st_size, base + end, "not cut after the results");

  /* Room for frames 0 and 1, not all of frame 2: it fails, frame 3 keeps
   * its own error, frame 4 fails too. */
  rq.out_length = res[2].powder_at;
  cr_assert_eq(fz_client_frames(c, &rq, res), 0, "%s", fz_client_errmsg(c));
  cr_assert(res[0].status == 0 && res[1].status == 0);
  cr_assert_eq(res[2].status, FZ_ENOSPC);
  cr_assert_neq(strstr(res[2].message, "from frame 2"), NULL, "%s", res[2].message);
  cr_assert_eq(res[3].status, inl[3].status);
  cr_assert_eq(res[4].status, FZ_ENOSPC);
  check_at(fd, base + res[1].values_at, inl[1].values, inl[1].listed * 4, "values", 1);

  static uint8_t d_fake[8];
  rq.d_out = d_fake;
  rq.d_out_len = sizeof d_fake;
  cr_assert_eq(fz_client_frames(c, &rq, res), FZ_EINVAL);
  cr_assert_eq(fz_client_ping(c, NULL), 0);
  fz_client_frame_results_free(inl, NF);
  close(fd);
  fz_client_close(c);
  tu_stop(h);
}
