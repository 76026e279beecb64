/*
 * frames_model.c - the GPU frames decoder's device logic (fzf_dev.h) run on
 * the CPU, its warp loops as loops over 32 lanes, against the engine: the
 * LZ4 block decoder against liblz4 on valid and corrupted blocks, and the
 * whole batch (walk, decode, unshuffle and count, prefix sums, compaction,
 * matrix product) against fz_frames_sparse_batch and fz_frames_dense on
 * every dtype, odd frame sizes, partial blocks, empty frames, masks, cuts
 * and hostile chunks.  No GPU needed: this is what proves the kernels'
 * logic in CI, under AddressSanitizer (every scratch buffer is exactly as
 * large as the device's, so an out-of-bounds access is a crash here).
 */
#include <criterion/criterion.h>
#include <lz4.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frames_data.h"
#include "fzf_host.h"

/* The GPU plan's default: a warp's shared memory holds one 8 KiB block. */
#define MAX_BLOCK_BYTES 8192

/* ---- The batch as the kernels run it, frame by frame ---- */

typedef struct model_out {
  uint8_t *values, *dense;
  uint32_t *indices;
  size_t *counts;
  int *status, *reason;
  double *powder_f64;
  int64_t *powder_i64;
  char (*why)[160];
} model_out;

static uint64_t min64(uint64_t a, uint64_t b) {
  return a < b ? a : b;
}

/* The kernels' launches in their order (frames_kernels.cu): the walk of
 * every frame, the item bases, the decode of every item, the products,
 * the prefix sums of every frame, the compaction of every item; each
 * chunk and each block in a buffer of exactly its size. */
static void model_run(model_out *mo, fz_dtype t, size_t npx, const uint8_t *mask,
                      const fz_frames_csr *csr, const mframes *mf, double cut, size_t cap) {
  unsigned w = (unsigned)fz_dtype_size(t);
  int kind = fz_frames_kind(t);
  uint32_t n = (uint32_t)mf->nframes;
  uint8_t *active = mask ? fzf_mask_bits(mask, npx) : NULL;
  fzf_frame_view fv = {w, kind, fz_frames_cut_of(cut, w, kind), active};
  fzf_csr fc = {0};
  char why[256];
  if (csr)
    cr_assert_eq(fzf_csr_fold(csr, active, npx, t, &fc, why, sizeof why), 0, "%s", why);
  memset(mo, 0, sizeof *mo);
  mo->values = calloc(n * cap * w + 1, 1);
  mo->indices = calloc(n * cap + 1, 4);
  mo->counts = calloc(n + 1, sizeof *mo->counts);
  mo->status = calloc(n + 1, sizeof *mo->status);
  mo->reason = calloc(n + 1, sizeof *mo->reason);
  mo->dense = calloc(n * npx * w + 1, 1);
  mo->why = calloc(n + 1, sizeof *mo->why);
  if (fc.wf)
    mo->powder_f64 = calloc(n * fc.nrows + 1, 8);
  if (fc.wi)
    mo->powder_i64 = calloc(n * fc.nrows + 1, 8);
  size_t stride = npx / 8 + 2;
  uint32_t *starts = malloc(n * stride * 4 + 4), *base_of = malloc((n + 1) * 4);
  uint32_t *count = malloc(n * stride * 4 + 4), *off = malloc(n * stride * 4 + 4);
  uint64_t *status = malloc(n * 8 + 8);
  fzf_walk *walks = malloc(n * sizeof *walks + 1);
  uint8_t **chunk = malloc(n * sizeof *chunk + 1);
  /* walk_kernel */
  for (uint32_t f = 0; f < n; f++) {
    size_t len = mf->lengths[f];
    chunk[f] = malloc(len ? len : 1);
    memcpy(chunk[f], mf->base + mf->offsets[f], len);
    walks[f] = fzf_walk_chunk(chunk[f], len, w, npx, MAX_BLOCK_BYTES, starts + f * stride);
    status[f] = walks[f].status;
  }
  /* items_kernel */
  fzf_item_bases(walks, n, base_of);
  /* decode_kernel, one warp an item */
  for (uint32_t item = 0; item < base_of[n]; item++) {
    uint32_t f = fzf_frame_of(base_of, n, item), i = item - base_of[f], ne;
    uint64_t base;
    const uint32_t *st = starts + f * stride;
    uint8_t *dense = mo->dense + (f * npx + 0) * w;
    count[item] = 0;
    if (fzf_item_block(&walks[f], npx, i, &ne, &base)) {
      uint8_t *blk = malloc((size_t)ne * w);
      int rc = fzf_lz4_block(chunk[f] + st[i] + 4, st[i + 1] - st[i] - 4, blk, ne * w);
      if (rc)
        status[f] = min64(status[f], fzf_status(FZF_PLACE_DATA(i), (unsigned)rc));
      else
        count[item] = fzf_unshuffle_count(blk, ne, base, dense + base * w, &fv, 1);
      free(blk);
    } else {
      count[item] = fzf_tail_count(chunk[f] + st[i], ne, base, dense + base * w, &fv, 1);
    }
  }
  /* product_kernel */
  for (uint32_t f = 0; f < n; f++) {
    const uint8_t *dense = mo->dense + f * npx * w;
    for (size_t r = 0; r < fc.nrows && status[f] == FZF_STATUS_OK; r++) {
      if (fc.wf) {
        mo->powder_f64[f * fc.nrows + r] =
            fzf_row_f64(fc.indptr, fc.cols, fc.wf, dense, w, kind, r);
      } else {
        int over = 0;
        mo->powder_i64[f * fc.nrows + r] =
            fzf_row_i64(fc.indptr, fc.cols, fc.wi, dense, w, kind, r, &over);
        if (over)
          status[f] = min64(status[f], fzf_status(FZF_PLACE_LAST, FZF_R_RANGE));
      }
    }
  }
  /* scan_kernel */
  for (uint32_t f = 0; f < n; f++) {
    mo->counts[f] = 0;
    if (status[f] != FZF_STATUS_OK)
      continue;
    uint64_t total = fzf_scan_items(count, off, base_of[f], base_of[f + 1]);
    if (total > cap)
      status[f] = fzf_status(FZF_PLACE_LAST, FZF_R_NOSPACE);
    else
      mo->counts[f] = total;
  }
  /* compact_kernel */
  for (uint32_t item = 0; item < base_of[n]; item++) {
    uint32_t f = fzf_frame_of(base_of, n, item), i = item - base_of[f], ne;
    if (!count[item] || status[f] != FZF_STATUS_OK)
      continue;
    uint64_t base;
    fzf_item_block(&walks[f], npx, i, &ne, &base);
    fzf_compact(mo->dense + (f * npx + base) * w, ne, base, &fv, mo->values + f * cap * w,
                mo->indices + f * cap, off[item]);
  }
  for (uint32_t f = 0; f < n; f++) {
    mo->status[f] = fzf_status_code(status[f]);
    mo->reason[f] = (int)(status[f] & 0xff);
    fzf_status_text(status[f], mo->why[f], sizeof mo->why[f]);
    free(chunk[f]);
  }
  free(starts), free(base_of), free(count), free(off), free(status), free(walks), free(chunk);
  free(active);
  fzf_csr_free(&fc);
}

static void model_free(model_out *mo) {
  free(mo->values), free(mo->indices), free(mo->counts), free(mo->status), free(mo->dense);
  free(mo->reason);
  free(mo->powder_f64), free(mo->powder_i64), free(mo->why);
}

/* ---- LZ4 blocks against liblz4 ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}

/* Blocks of several kinds: shuffled-detector-like (long zero runs with a
 * few bytes), random, short periods (overlapping matches), runs. */
static void fill_block(uint8_t *b, size_t n, int kind) {
  for (size_t i = 0; i < n; i++) {
    switch (kind % 5) {
    case 0: b[i] = rnd() % 97 == 0 ? (uint8_t)rnd() : 0; break;
    case 1: b[i] = (uint8_t)rnd(); break;
    case 2: b[i] = (uint8_t)(i % (1 + kind % 7)); break;
    case 3: b[i] = (uint8_t)(i / 300); break;
    default: b[i] = (uint8_t)(rnd() % 3 ? b[i ? i - 1 : 0] : rnd()); break;
    }
  }
}

/* Decodes with the model into an exactly-sized buffer: 0 or a reason. */
static int model_lz4(const uint8_t *src, size_t clen, uint8_t **out, size_t n) {
  *out = malloc(n ? n : 1);
  cr_assert(*out);
  return fzf_lz4_block(src, (uint32_t)clen, *out, (uint32_t)n);
}

Test(frames_model, lz4_valid_blocks) {
  for (int t = 0; t < 400; t++) {
    size_t n = 8 + 8 * (rnd() % 2048);
    uint8_t *raw = malloc(n), *dec;
    fill_block(raw, n, t);
    int cap = LZ4_compressBound((int)n);
    uint8_t *c = malloc((size_t)cap);
    int clen = LZ4_compress_default((const char *)raw, (char *)c, (int)n, cap);
    cr_assert_gt(clen, 0);
    int rc = model_lz4(c, (size_t)clen, &dec, n);
    cr_assert_eq(rc, 0, "block %d of %zu bytes: reason %d", t, n, rc);
    cr_assert_eq(memcmp(dec, raw, n), 0, "block %d of %zu bytes differs", t, n);
    free(raw), free(c), free(dec);
  }
}

/* Corrupted blocks: whatever the model accepts liblz4 accepts, with the
 * same bytes, and the model never touches a byte outside its buffers.
 * liblz4 accepts a few streams that break the format's end rules (its
 * fast paths skip checks the format makes); the model refuses those, and
 * they stay rare. */
Test(frames_model, lz4_hostile_blocks) {
  size_t both = 0, model_only_refused = 0, offset0 = 0, trials = 0;
  for (int t = 0; t < 300; t++) {
    size_t n = 8 + 8 * (rnd() % 1100);
    uint8_t *raw = malloc(n);
    fill_block(raw, n, t);
    int cap = LZ4_compressBound((int)n);
    uint8_t *c = malloc((size_t)cap), *ref = malloc(n);
    int clen = LZ4_compress_default((const char *)raw, (char *)c, (int)n, cap);
    for (int k = 0; k < 40; k++, trials++) {
      size_t len = (size_t)clen;
      uint8_t *m = malloc(len + 1);
      memcpy(m, c, len);
      switch (k % 4) {
      case 0: m[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8)); break;
      case 1: m[rnd() % len] = (uint8_t)rnd(); break;
      case 2: len = rnd() % len; break; /* truncated */
      default:
        for (int j = 0; j < 4; j++)
          m[rnd() % len] = (uint8_t)rnd();
        break;
      }
      uint8_t *dec;
      uint8_t *src = malloc(len ? len : 1);
      memcpy(src, m, len);
      int rc = len ? model_lz4(src, len, &dec, n) : (dec = NULL, FZF_R_LZ4_LIT_LEN);
      int got = LZ4_decompress_safe((const char *)src, (char *)ref, (int)len, (int)n);
      int lib_ok = got == (int)n;
      if (rc == 0) {
        cr_assert(lib_ok, "block %d trial %d: the model accepts what liblz4 refuses", t, k);
        cr_assert_eq(memcmp(dec, ref, n), 0, "block %d trial %d: bytes differ", t, k);
        both++;
      } else if (lib_ok && rc == FZF_R_LZ4_OFFSET0) {
        offset0++;
      } else if (lib_ok) {
        model_only_refused++;
      }
      free(dec), free(src), free(m);
    }
    free(raw), free(c), free(ref);
  }
  cr_log_info("corrupted LZ4 blocks: %zu trials, %zu still valid, %zu with offset 0, %zu refused "
              "by the model only",
              trials, both, offset0, model_only_refused);
  cr_assert_leq(model_only_refused * 1000, trials, "%zu of %zu refused by the model only",
                model_only_refused, trials);
}

/* Streams made by hand: offsets before the block, offset 0, matches into
 * the last 5 bytes, literals past the end, length extensions that run
 * out, a missing last sequence. */
Test(frames_model, lz4_crafted_streams) {
  static const struct {
    uint8_t s[24];
    size_t len, n;
    int want;
  } cases[] = {
      /* 16 literals "AAAA..." then an end: valid */
      {{0xf0, 0x01, 'A', 'A', 'A', 'A', 'A', 'A', 'A', 'A', 'A', 'A', 'A', 'A', 'A', 'A', 'A', 'A'},
       18,
       16,
       0},
      /* 1 literal, match offset 2 (before the block) */
      {{0x14, 'A', 0x02, 0x00, 0x50, 'B', 'B', 'B', 'B', 'B'}, 10, 29, FZF_R_LZ4_OFFSET},
      /* 1 literal, match offset 0 */
      {{0x14, 'A', 0x00, 0x00, 0x50, 'B', 'B', 'B', 'B', 'B'}, 10, 29, FZF_R_LZ4_OFFSET0},
      /* 1 literal, match of 23 at offset 1, then 5 literals: valid */
      {{0x1f, 'A', 0x01, 0x00, 0x04, 0x50, 'B', 'B', 'B', 'B', 'B'}, 11, 29, 0},
      /* the same ending 1 byte short: the last literals end the input but
       * not the output */
      {{0x1f, 'A', 0x01, 0x00, 0x04, 0x40, 'B', 'B', 'B', 'B'}, 10, 29, FZF_R_LZ4_SHORT},
      /* a match that ends in the last 5 bytes */
      {{0x1f, 'A', 0x01, 0x00, 0x07, 0x20, 'B', 'B', 'B', 'B', 'B'}, 11, 29, FZF_R_LZ4_MATCH_END},
      /* literals claiming more than the input holds */
      {{0x50, 'A', 'B'}, 3, 5, FZF_R_LZ4_LIT_END},
      /* a literal extension that runs out */
      {{0xf0, 0xff, 0xff}, 3, 600, FZF_R_LZ4_LIT_LEN},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t *src = malloc(cases[i].len), *dec, *ref = malloc(cases[i].n);
    memcpy(src, cases[i].s, cases[i].len);
    int rc = model_lz4(src, cases[i].len, &dec, cases[i].n);
    cr_assert_eq(rc, cases[i].want, "case %zu: reason %d, expected %d", i, rc, cases[i].want);
    int got =
        LZ4_decompress_safe((const char *)src, (char *)ref, (int)cases[i].len, (int)cases[i].n);
    if (rc == 0) {
      cr_assert_eq(got, (int)cases[i].n, "case %zu: liblz4 refuses it", i);
      cr_assert_eq(memcmp(dec, ref, cases[i].n), 0, "case %zu", i);
    } else if (i != 2) {
      /* liblz4 takes offset 0 as a copy of the bytes at the output (its
       * own contents); the format forbids it and so does the model. */
      cr_assert_neq(got, (int)cases[i].n, "case %zu: liblz4 accepts it", i);
    }
    free(src), free(dec), free(ref);
  }
}

/* ---- Whole batches against the engine ---- */

static const fz_dtype all_dtypes[] = {FZ_U8,  FZ_I8,  FZ_U16, FZ_I16, FZ_U32,
                                      FZ_I32, FZ_U64, FZ_I64, FZ_F32, FZ_F64};

/* Compares the model's batch with the engine's on the same chunks. */
static void check_batch(fz_dtype t, size_t npixels, const uint8_t *mask, const fz_frames_csr *csr,
                        mframes *mf, double cut, size_t cap) {
  size_t w = fz_dtype_size(t), n = mf->nframes;
  fz_frames_params p = {
      .dtype = t, .npixels = npixels, .codec = FZ_BSLZ4_LZ4, .mask = mask, .csr = csr};
  fz_frames *f;
  char why[256];
  cr_assert_eq(fz_frames_create(&p, &f, why, sizeof why), 0, "%s", why);
  size_t rows = fz_frames_rows(f);
  int i64 = csr && csr->w_i32;
  uint8_t *cv = calloc(n * cap * w + 1, 1);
  uint32_t *ci = calloc(n * cap + 1, 4);
  size_t *cc = calloc(n, sizeof *cc);
  int *cs = calloc(n, sizeof *cs);
  double *cpf = rows && !i64 ? calloc(n * rows, 8) : NULL;
  int64_t *cpi = rows && i64 ? calloc(n * rows, 8) : NULL;
  fz_frames_batch b = {.base = mf->base,
                       .offsets = mf->offsets,
                       .lengths = mf->lengths,
                       .nframes = n,
                       .cut = cut,
                       .values = cv,
                       .indices = ci,
                       .cap = cap,
                       .counts = cc,
                       .status = cs,
                       .powder_f64 = cpf,
                       .powder_i64 = cpi};
  cr_assert_geq(fz_frames_sparse_batch(f, &b, 1, why, sizeof why), 0, "%s", why);

  model_out mo;
  model_run(&mo, t, npixels, mask, csr, mf, cut, cap);
  size_t offset0 = 0;
  for (size_t i = 0; i < n; i++) {
    /* An LZ4 offset of 0: liblz4 copies its buffer's stale bytes and goes
     * on, the GPU fails the frame there (fzf_lz4_parse).  Rare. */
    if (mo.reason[i] == FZF_R_LZ4_OFFSET0) {
      cr_assert_lt(++offset0 * 20, n + 20, "%zu frames of %zu with an LZ4 offset 0", offset0, n);
      continue;
    }
    cr_assert_eq(mo.status[i], cs[i], "%s frame %zu of %zu pixels: status %d, CPU %d (%s)",
                 fz_dtype_name(t), i, npixels, mo.status[i], cs[i], mo.why[i]);
    cr_assert_eq(mo.counts[i], cc[i], "%s frame %zu: count %zu, CPU %zu", fz_dtype_name(t), i,
                 mo.counts[i], cc[i]);
    if (cs[i])
      continue;
    cr_assert_eq(memcmp(mo.values + i * cap * w, cv + i * cap * w, cc[i] * w), 0,
                 "%s frame %zu: values differ", fz_dtype_name(t), i);
    cr_assert_eq(memcmp(mo.indices + i * cap, ci + i * cap, cc[i] * 4), 0,
                 "%s frame %zu: indices differ", fz_dtype_name(t), i);
    if (cpf)
      cr_assert_eq(memcmp(mo.powder_f64 + i * rows, cpf + i * rows, rows * 8), 0,
                   "%s frame %zu: f64 sums differ", fz_dtype_name(t), i);
    if (cpi)
      cr_assert_eq(memcmp(mo.powder_i64 + i * rows, cpi + i * rows, rows * 8), 0,
                   "%s frame %zu: i64 sums differ", fz_dtype_name(t), i);
    /* The dense frame the model unshuffled is the engine's. */
    uint8_t *dense = malloc(npixels * w + 1);
    cr_assert_eq(fz_frames_dense(f, mf->base + mf->offsets[i], mf->lengths[i], dense, npixels * w,
                                 NULL, NULL, why, sizeof why),
                 0, "%s", why);
    cr_assert_eq(memcmp(dense, mo.dense + i * npixels * w, npixels * w), 0,
                 "%s frame %zu: dense frames differ", fz_dtype_name(t), i);
    free(dense);
  }
  model_free(&mo);
  free(cv), free(ci), free(cc), free(cs), free(cpf), free(cpi);
  fz_frames_destroy(f);
}

Test(frames_model, every_dtype_and_size) {
  static const size_t sizes[] = {0, 1, 7, 8, 9, 100, 4095, 4096, 4103, 8192 + 13, 65536 + 77};
  for (size_t d = 0; d < sizeof all_dtypes / sizeof all_dtypes[0]; d++) {
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      size_t npx = sizes[s], bes[] = {0, 64, 1000};
      for (size_t k = 0; k < 3; k++) {
        mframes mf;
        mframes_make(&mf, all_dtypes[d], npx, 3, bes[k], 17 + s, 0.01);
        check_batch(all_dtypes[d], npx, NULL, NULL, &mf, 10, npx + 1);
        check_batch(all_dtypes[d], npx, NULL, NULL, &mf, -INFINITY, npx + 1);
        check_batch(all_dtypes[d], npx, NULL, NULL, &mf, NAN, npx + 1);
        check_batch(all_dtypes[d], npx, NULL, NULL, &mf, 0.5, npx + 1);
        mframes_free(&mf);
      }
    }
  }
}

Test(frames_model, masks_products_and_room) {
  size_t npx = 123 * 77;
  uint8_t *mask = malloc(npx);
  for (size_t i = 0; i < npx; i++)
    mask[i] = (i % 13) != 0 && (i / 77) != 40;
  size_t rows = 50, nnz = npx;
  uint64_t *indptr = malloc((rows + 1) * 8);
  uint32_t *cols = malloc(nnz * 4);
  float *wf = malloc(nnz * 4);
  int32_t *wi = malloc(nnz * 4);
  for (size_t r = 0; r <= rows; r++)
    indptr[r] = r * nnz / rows;
  for (size_t j = 0; j < nnz; j++) {
    cols[j] = (uint32_t)((j * 7919) % npx);
    wf[j] = (float)((int)(rnd() % 2001) - 1000) / 997.0f;
    wi[j] = (int32_t)(rnd() % 20001) - 10000;
  }
  fz_frames_csr cf = {.nrows = rows, .indptr = indptr, .indices = cols, .w_f32 = wf};
  fz_frames_csr ci = {.nrows = rows, .indptr = indptr, .indices = cols, .w_i32 = wi};
  for (size_t d = 0; d < sizeof all_dtypes / sizeof all_dtypes[0]; d++) {
    fz_dtype t = all_dtypes[d];
    mframes mf;
    mframes_make(&mf, t, npx, 4, 0, 5 + d, 0.02);
    check_batch(t, npx, mask, &cf, &mf, 10, npx);
    if (fz_frames_kind(t) != FZ_FRAMES_FLOAT && fz_dtype_size(t) <= 4)
      check_batch(t, npx, mask, &ci, &mf, 3, npx);
    /* Lists that do not fit: FZ_ENOSPC for those frames only. */
    check_batch(t, npx, mask, NULL, &mf, -INFINITY, 100);
    mframes_free(&mf);
  }
  free(mask), free(indptr), free(cols), free(wf), free(wi);
}

/* Every truncation of a small chunk, and corrupted bytes anywhere: the
 * model's status is the engine's, frame by frame. */
Test(frames_model, hostile_chunks) {
  for (size_t d = 0; d < 4; d++) {
    fz_dtype t = (fz_dtype[]){FZ_U8, FZ_U16, FZ_I32, FZ_F64}[d];
    size_t npx = 1000 + d * 333;
    mframes good;
    mframes_make(&good, t, npx, 1, 64, 3, 0.05);
    size_t len = good.lengths[0];
    /* Every truncation, as one batch. */
    mframes cut;
    mframes_variants(&cut, &good, len + 1);
    for (size_t i = 0; i <= len; i++)
      cut.lengths[i] = i;
    check_batch(t, npx, NULL, NULL, &cut, 2, npx);
    mframes_free(&cut);
    /* Corrupted bytes, with good frames beside them. */
    mframes bad;
    mframes_variants(&bad, &good, 400);
    for (size_t i = 0; i < 400; i += 2) {
      uint8_t *c = (uint8_t *)bad.base + bad.offsets[i];
      int flips = 1 + (int)(rnd() % 3);
      for (int j = 0; j < flips; j++)
        c[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
    }
    check_batch(t, npx, NULL, NULL, &bad, 2, npx);
    mframes_free(&bad);
    mframes_free(&good);
  }
}
