/*
 * frames_util.c - see frames_util.h.
 */
#include "frames_util.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "fz_frames.h"

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

void make_chunks(chunks *c) {
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

void free_chunks(chunks *c) {
  for (unsigned f = 0; f < NFRAMES; f++)
    free(c->buf[f]);
}

void pack_u16_shape(msgpack_packer *pk, size_t ni, size_t nj) {
  fzp_pack_key(pk, "dtype");
  fzp_pack_key(pk, "u16");
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, 2);
  msgpack_pack_uint64(pk, ni);
  msgpack_pack_uint64(pk, nj);
}

void pack_common(msgpack_packer *pk, double cut) {
  pack_u16_shape(pk, NI, NJ);
  fzp_pack_key(pk, "codec");
  fzp_pack_key(pk, "lz4");
  fzp_pack_key(pk, "cut");
  msgpack_pack_double(pk, cut);
}

void pack_table(msgpack_packer *pk, size_t n, const uint64_t *offs, const uint64_t *lens) {
  fzp_pack_key(pk, "offsets");
  msgpack_pack_array(pk, (uint32_t)n);
  for (size_t i = 0; i < n; i++)
    msgpack_pack_uint64(pk, offs[i]);
  fzp_pack_key(pk, "lengths");
  msgpack_pack_array(pk, (uint32_t)n);
  for (size_t i = 0; i < n; i++)
    msgpack_pack_uint64(pk, lens[i]);
}

void pack_chunk_list(msgpack_packer *pk, const chunks *c, int bad) {
  fzp_pack_key(pk, "chunks");
  msgpack_pack_array(pk, NFRAMES);
  for (int i = 0; i < NFRAMES; i++) {
    msgpack_pack_bin(pk, c->len[i]);
    if (i != bad) {
      msgpack_pack_bin_body(pk, c->buf[i], c->len[i]);
      continue;
    }
    uint8_t *b = malloc(c->len[i]);
    cr_assert_not_null(b);
    memcpy(b, c->buf[i], c->len[i]);
    b[FZ_BSLZ4_HEADER] = 0x7f; /* the first block's big-endian length */
    msgpack_pack_bin_body(pk, b, c->len[i]);
    free(b);
  }
}

int frames_setup_call(wire *w, uint32_t msgid, const uint8_t *mask, size_t npix,
                      const uint64_t *indptr, size_t rows, const uint32_t *indices,
                      const float *weights, int bad_csr, uint64_t *id) {
  msgpack_packer *pk = wire_begin(w, msgid, "frames_setup", 1 + (mask != NULL) + (rows > 0));
  fzp_pack_key(pk, "shape");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint64(pk, npix);
  if (mask != NULL) {
    fzp_pack_key(pk, "mask");
    msgpack_pack_bin(pk, npix);
    msgpack_pack_bin_body(pk, mask, npix);
  }
  if (rows > 0) {
    uint64_t nnz = indptr[rows];
    fzp_pack_key(pk, "csr");
    msgpack_pack_map(pk, 3);
    fzp_pack_key(pk, "indptr");
    msgpack_pack_bin(pk, (rows + 1) * 8);
    msgpack_pack_bin_body(pk, indptr, (rows + 1) * 8);
    fzp_pack_key(pk, "indices");
    uint32_t *ix = malloc(nnz * 4 + 4);
    cr_assert_not_null(ix);
    memcpy(ix, indices, nnz * 4);
    if (bad_csr == 2)
      ix[nnz - 1] = (uint32_t)npix;
    size_t n = bad_csr == 1 ? nnz - 1 : nnz;
    msgpack_pack_bin(pk, n * 4);
    msgpack_pack_bin_body(pk, ix, n * 4);
    free(ix);
    fzp_pack_key(pk, "weights");
    msgpack_pack_bin(pk, nnz * 4);
    msgpack_pack_bin_body(pk, weights, nnz * 4);
  }
  cr_assert_eq(wire_send(w, NULL, 0), 0);
  fzp_message m;
  cr_assert_eq(wire_recv(w, &m, 60000), 0);
  cr_assert_eq(m.msgid, msgid);
  int code = wire_code(&m);
  if (code == 0)
    cr_assert_eq(fzp_get_u64(&m.result, "id", id), 1);
  fzp_message_free(&m);
  return code;
}
