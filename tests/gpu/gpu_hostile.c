/*
 * gpu_hostile.c - corrupt, truncated and hostile archives decoded on the
 * GPU: every one must give an error (the CPU decoder's code), never a crash
 * or an access out of bounds (run under compute-sanitizer by run.sh).
 */
#include <criterion/criterion.h>

#include "archive_fixup.h"
#include "gpu_util.h"

static uint8_t *make_archive(const char *preset, size_t n, size_t *len) {
  fz_params p;
  fzt_params_1d(&p, FZ_F32, n, preset);
  p.eb = 1e-3;
  fz_plan *pl;
  cr_assert_eq(fz_plan_create(&p, &pl, NULL, 0), 0);
  float *x = gen_data(FZ_F32, n, GEN_SPECIAL, 3);
  size_t bound = fz_plan_compress_bound(pl);
  uint8_t *a = malloc(bound);
  cr_assert_eq(fz_plan_compress(pl, x, n * 4, a, bound, len), 0);
  fz_plan_destroy(pl);
  free(x);
  return a;
}

/* Decodes arc on both backends; both must fail with the same code or both
 * succeed with the same bytes. */
static void both(const uint8_t *arc, size_t len, size_t raw) {
  fz_gpu_ctx *ctx = test_ctx();
  uint8_t *o_cpu = malloc(raw + 1), *o_gpu = malloc(raw + 1);
  size_t ol = 0;
  int rc_cpu = fz_decompress(arc, len, o_cpu, raw, &ol, 1);
  void *d_arc = to_device(arc, len), *d_out = NULL;
  CUDA_OK(cudaMalloc(&d_out, raw + 1));
  char why[256] = "";
  int rc_gpu = fz_gpu_decompress(ctx, d_arc, len, d_out, raw, &ol, NULL, why, sizeof why);
  cr_assert_eq(rc_gpu, rc_cpu, "gpu %s (%s), cpu %s", fz_err_name(rc_gpu), why,
               fz_err_name(rc_cpu));
  if (rc_cpu == 0) {
    CUDA_OK(cudaMemcpy(o_gpu, d_out, raw, cudaMemcpyDeviceToHost));
    cr_assert(memcmp(o_cpu, o_gpu, raw) == 0);
  }
  cudaFree(d_arc);
  cudaFree(d_out);
  free(o_cpu);
  free(o_gpu);
}

Test(hostile, truncations) {
  const char *presets[] = {"fast", "balanced", "lossless"};
  for (int p = 0; p < 3; p++) {
    size_t len, n = 9000;
    uint8_t *a = make_archive(presets[p], n, &len);
    for (size_t cut = 0; cut < len; cut += 1 + cut / 3)
      both(a, cut, n * 4);
    free(a);
  }
}

Test(hostile, byte_flips) {
  const char *presets[] = {"fast", "balanced", "lossless"};
  for (int p = 0; p < 3; p++) {
    size_t len, n = 9000;
    uint8_t *a = make_archive(presets[p], n, &len);
    uint64_t s = 99;
    for (int k = 0; k < 120; k++) {
      uint8_t *b = malloc(len);
      memcpy(b, a, len);
      size_t at = (size_t)(rng_next(&s) % len);
      b[at] ^= (uint8_t)(1 + rng_next(&s) % 255);
      both(b, len, n * 4);
      free(b);
    }
    free(a);
  }
}

/* Many bytes of the payload garbled at once. */
Test(hostile, garbled_payload) {
  size_t len, n = 20000;
  uint8_t *a = make_archive("balanced", n, &len);
  uint64_t s = 7;
  for (int k = 0; k < 40; k++) {
    uint8_t *b = malloc(len);
    memcpy(b, a, len);
    for (int j = 0; j < 8; j++)
      b[len - 1 - (size_t)(rng_next(&s) % (len / 2))] = (uint8_t)rng_next(&s);
    both(b, len, n * 4);
    free(b);
  }
  free(a);
}

Test(hostile, wrong_output_capacity) {
  size_t len, n = 5000;
  uint8_t *a = make_archive("balanced", n, &len);
  fz_gpu_ctx *ctx = test_ctx();
  void *d_arc = to_device(a, len), *d_out = NULL;
  CUDA_OK(cudaMalloc(&d_out, n * 4));
  size_t ol;
  cr_assert_eq(fz_gpu_decompress(ctx, d_arc, len, d_out, n * 4 - 1, &ol, NULL, NULL, 0),
               FZ_ENOSPC);
  cudaFree(d_arc);
  cudaFree(d_out);
  free(a);
}

/* The coders of the user chains on 4-byte words (diff before bitpack, rze
 * on the words): chunks whose bytes are wrong but whose checksums are
 * right, so that the kernels' own checks meet them.  Bytes flipped, runs
 * garbled, chunk boundaries moved (one chunk shorter, the next longer),
 * chunks cut short: the GPU gives the CPU's error, or the CPU's bytes. */
static const char *const hostile32[] = {
    "quant | diff | bitpack", "quant | diff(map=negabinary) | bitpack",
    "quant | diff | rze", "quant | rze(levels=1)",
    "quant | diff(map=negabinary) | rze(levels=6)", "diff | rze(levels=2)",
    "diff | bitpack",
};

static uint8_t *make_archive32(const char *chain, fz_dtype t, size_t n, size_t *len,
                               fze_header *h) {
  fz_params p;
  fzt_params_1d(&p, t, n, chain);
  p.eb = 1e-3;
  p.chunk_bytes = 4096;
  fz_plan *pl;
  cr_assert_eq(fz_plan_create(&p, &pl, NULL, 0), 0, "%s", chain);
  void *x = gen_data(t, n, t == FZ_F32 || t == FZ_F64 ? GEN_SPECIAL : GEN_SMOOTH, 5);
  size_t bound = fz_plan_compress_bound(pl);
  uint8_t *a = malloc(bound);
  cr_assert_eq(fz_plan_compress(pl, x, n * fz_dtype_size(t), a, bound, len), 0);
  cr_assert_eq(fze_header_parse(a, *len, h), 0);
  fz_plan_destroy(pl);
  free(x);
  return a;
}

static size_t table_at(const fze_header *h) { return h->header_len - 4 - 2 * (size_t)h->nchunks; }

static unsigned chunk_len(const uint8_t *a, const fze_header *h, uint64_t i) {
  return a[table_at(h) + 2 * i] | (unsigned)a[table_at(h) + 2 * i + 1] << 8;
}

static void set_chunk_len(uint8_t *a, const fze_header *h, uint64_t i, unsigned v) {
  a[table_at(h) + 2 * i] = (uint8_t)v;
  a[table_at(h) + 2 * i + 1] = (uint8_t)(v >> 8);
}

Test(hostile, user_chains32_coded_bytes) {
  const size_t n = 5 * 1024 + 333;
  for (size_t c = 0; c < sizeof hostile32 / sizeof hostile32[0]; c++) {
    fz_dtype t = strncmp(hostile32[c], "quant", 5) == 0 ? FZ_F32 : FZ_I32;
    fze_header h;
    size_t len;
    uint8_t *a = make_archive32(hostile32[c], t, n, &len, &h);
    uint8_t *b = malloc(len);
    uint64_t s = 1234 + c;
    for (int k = 0; k < 60; k++) {
      memcpy(b, a, len);
      size_t at = h.header_len + (size_t)(rng_next(&s) % (len - h.header_len));
      unsigned runs = k < 40 ? 1 : 1 + (unsigned)(rng_next(&s) % 16);
      for (unsigned r = 0; r < runs && at + r < len; r++)
        b[at + r] ^= (uint8_t)(1 + rng_next(&s) % 255);
      archive_fix_checksums(b, len, &h);
      both(b, len, n * 4);
    }
    free(b);
    free(a);
  }
}

Test(hostile, user_chains32_moved_boundaries) {
  const size_t n = 5 * 1024 + 333;
  for (size_t c = 0; c < sizeof hostile32 / sizeof hostile32[0]; c++) {
    fz_dtype t = strncmp(hostile32[c], "quant", 5) == 0 ? FZ_F32 : FZ_I32;
    fze_header h;
    size_t len;
    uint8_t *a = make_archive32(hostile32[c], t, n, &len, &h);
    uint8_t *b = malloc(len);
    for (uint64_t i = 0; i + 1 < h.nchunks; i++)
      for (unsigned d = 1; d <= 9; d += 4) {
        memcpy(b, a, len);
        unsigned l0 = chunk_len(a, &h, i), l1 = chunk_len(a, &h, i + 1);
        if (l0 > d) {
          set_chunk_len(b, &h, i, l0 - d);
          set_chunk_len(b, &h, i + 1, l1 + d);
          archive_fix_checksums(b, len, &h);
          both(b, len, n * 4);
        }
        /* A chunk cut short: its bytes and the archive end earlier. */
        memcpy(b, a, len);
        if (l0 > d) {
          size_t at = h.header_len;
          for (uint64_t j = 0; j < i; j++)
            at += chunk_len(a, &h, j);
          memmove(b + at + l0 - d, b + at + l0, len - (at + l0));
          set_chunk_len(b, &h, i, l0 - d);
          archive_fix_checksums(b, len - d, &h);
          both(b, len - d, n * 4);
        }
      }
    free(b);
    free(a);
  }
}

/* The same for the chains of the 8-byte word kernels (chain64.cu), on f64
 * with outliers and on i64: the side list's 8-byte values, the 64 planes,
 * every rze level's checks. */
static const char *const hostile64[] = {
    "balanced", "quant | diff(map=negabinary) | bitshuffle | rze(levels=1)",
    "quant | bitshuffle | rze(levels=6)", "lossless", "diff | bitshuffle | rze(levels=2)",
    /* On the 8-byte word kernels when the build has them (FZ_CHAIN64_ALL). */
    "fast", "quant | diff | bitpack", "quant | diff(map=negabinary) | rze(levels=6)",
    "quant | rze(levels=1)", "diff | bitpack", "rze(levels=2)",
};

static fz_dtype hostile64_type(const char *chain) {
  return strncmp(chain, "quant", 5) == 0 || strcmp(chain, "balanced") == 0 ||
                 strcmp(chain, "fast") == 0
             ? FZ_F64
             : FZ_I64;
}

Test(hostile, chains64_coded_bytes) {
  const size_t n = 5 * 512 + 333;
  for (size_t c = 0; c < sizeof hostile64 / sizeof hostile64[0]; c++) {
    fz_dtype t = hostile64_type(hostile64[c]);
    fze_header h;
    size_t len;
    uint8_t *a = make_archive32(hostile64[c], t, n, &len, &h);
    uint8_t *b = malloc(len);
    uint64_t s = 4321 + c;
    for (int k = 0; k < 60; k++) {
      memcpy(b, a, len);
      size_t at = h.header_len + (size_t)(rng_next(&s) % (len - h.header_len));
      unsigned runs = k < 40 ? 1 : 1 + (unsigned)(rng_next(&s) % 16);
      for (unsigned r = 0; r < runs && at + r < len; r++)
        b[at + r] ^= (uint8_t)(1 + rng_next(&s) % 255);
      archive_fix_checksums(b, len, &h);
      both(b, len, n * 8);
    }
    free(b);
    free(a);
  }
}

Test(hostile, chains64_moved_boundaries) {
  const size_t n = 5 * 512 + 333;
  for (size_t c = 0; c < sizeof hostile64 / sizeof hostile64[0]; c++) {
    fz_dtype t = hostile64_type(hostile64[c]);
    fze_header h;
    size_t len;
    uint8_t *a = make_archive32(hostile64[c], t, n, &len, &h);
    uint8_t *b = malloc(len);
    for (uint64_t i = 0; i + 1 < h.nchunks; i++)
      for (unsigned d = 1; d <= 9; d += 4) {
        memcpy(b, a, len);
        unsigned l0 = chunk_len(a, &h, i), l1 = chunk_len(a, &h, i + 1);
        if (l0 > d) {
          set_chunk_len(b, &h, i, l0 - d);
          set_chunk_len(b, &h, i + 1, l1 + d);
          archive_fix_checksums(b, len, &h);
          both(b, len, n * 8);
        }
        memcpy(b, a, len);
        if (l0 > d) {
          size_t at = h.header_len;
          for (uint64_t j = 0; j < i; j++)
            at += chunk_len(a, &h, j);
          memmove(b + at + l0 - d, b + at + l0, len - (at + l0));
          set_chunk_len(b, &h, i, l0 - d);
          archive_fix_checksums(b, len - d, &h);
          both(b, len - d, n * 8);
        }
      }
    free(b);
    free(a);
  }
}

/* Truncations and plain byte flips (checksums left wrong) of f64 archives. */
Test(hostile, chains64_truncations_and_flips) {
  for (size_t c = 0; c < sizeof hostile64 / sizeof hostile64[0]; c++) {
    fz_dtype t = hostile64_type(hostile64[c]);
    fze_header h;
    size_t len, n = 3000;
    uint8_t *a = make_archive32(hostile64[c], t, n, &len, &h);
    for (size_t cut = 0; cut < len; cut += 1 + cut / 3)
      both(a, cut, n * 8);
    uint64_t s = 77 + c;
    uint8_t *b = malloc(len);
    for (int k = 0; k < 40; k++) {
      memcpy(b, a, len);
      b[(size_t)(rng_next(&s) % len)] ^= (uint8_t)(1 + rng_next(&s) % 255);
      both(b, len, n * 8);
    }
    free(b);
    free(a);
  }
}
