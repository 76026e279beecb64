/*
 * test_frames_client.c - fz_client_frames() and fz_client_frames_setup()
 * against a real fzd: chunks made by the engine's encoder, laid out as an
 * HDF5 chunk table in one buffer (with a gap and out of order), come back
 * as the engine's own lists, sums and dense frames; a corrupt chunk fails
 * its frame only; bad tables are refused before anything is sent; the
 * chunks read by the daemon from a file passed as a descriptor.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
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

Test(frames_client, lists_sums_dense_and_a_bad_frame, .timeout = 120) {
  static uint32_t px[NF][NPIX];
  static uint8_t buf[NF * 20000 + 64];
  uint64_t offs[NF], lens[NF];
  size_t at = 64;                     /* bytes before the first chunk, never sent */
  for (int f = NF - 1; f >= 0; f--) { /* stored in reverse order */
    uint32_t s = 77u + (uint32_t)f;
    for (size_t i = 0; i < NPIX; i++) {
      s = s * 1664525u + 1013904223u;
      px[f][i] = (s >> 24) < 8 ? 1000 + (s >> 20) % 500 : (s >> 28);
    }
    int64_t n =
        fz_bslz4_encode(FZ_BSLZ4_LZ4, px[f], NPIX, 4, 0, 0, buf + at, sizeof buf - at, NULL, 0);
    cr_assert_gt(n, 0);
    offs[f] = at;
    lens[f] = (uint64_t)n;
    at += (size_t)n + 3; /* gaps between chunks */
  }
  /* Frame 3's first block length is made to run past its chunk. */
  static uint8_t bad[sizeof buf];
  memcpy(bad, buf, sizeof buf);
  bad[offs[3] + FZ_BSLZ4_HEADER] = 0x40;

  static uint8_t mask[NPIX];
  for (size_t i = 0; i < NPIX; i++)
    mask[i] = i % 11 != 0;
  enum { ROWS = 10 };
  uint64_t indptr[ROWS + 1];
  static uint32_t indices[NPIX];
  static int32_t weights[NPIX];
  for (size_t k = 0; k < NPIX; k++) {
    indices[k] = (uint32_t)((k * 7) % NPIX);
    weights[k] = (int32_t)(k % 3) - 1;
  }
  for (size_t r = 0; r <= ROWS; r++)
    indptr[r] = r * (NPIX / ROWS);

  fzd_harness *h = tu_start(NULL);
  fz_client *c = connect_ok(h);
  fz_frames_setup_args sa = {.npixels = NPIX,
                             .mask = mask,
                             .rows = ROWS,
                             .indptr = indptr,
                             .indices = indices,
                             .weights = weights,
                             .weights_i32 = 1};
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
  cr_assert_eq(write(fd, buf, sizeof buf), (ssize_t)sizeof buf);
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
