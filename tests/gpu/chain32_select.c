/*
 * chain32_select.c - which chains the 4-byte word kernels (chain32.cu)
 * take: fzk_desc_from_header must give every chain of the form
 * [quant] [diff] coder on 4-byte words (the coder bitpack, bitshuffle | rze
 * or rze) its coder, diff, map and rze levels, and so every chain
 * [quant] [diff] bitshuffle | rze on 8-byte words (chain64.cu), and leave
 * every other chain to the generic chunk kernels; and which chains the
 * ratio kernels (ratio.cu) take, with what of each.  No GPU needed: it
 * runs in CI.
 */
#include <criterion/criterion.h>

#include "archive.h"
#include "fzk.h"
#include "launch.h"
#include "gpu_ctx.h"
#include "gpu_plan.h"
#include "params_1d.h"
#include "ratio_gpu.h"

static fzk_desc desc_of(fz_dtype t, const char *chain) {
  fz_params p;
  fzt_params_1d(&p, t, 100000, chain);
  p.eb = 1e-3;
  fz_plan *pl = NULL;
  char why[256] = "";
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), 0, "%s: %s", chain, why);
  fzk_desc d;
  fzk_desc_from_header(&d, fze_plan_header(pl));
  fz_plan_destroy(pl);
  return d;
}

static void expect(fz_dtype t, const char *chain, unsigned k32, unsigned diff, unsigned nega,
                   unsigned lev) {
  fzk_desc d = desc_of(t, chain);
  cr_assert_eq(d.k32, k32, "%s %s: coder %u, not %u", fz_dtype_name(t), chain, d.k32, k32);
  cr_assert_eq(d.k32diff, diff, "%s: diff %u", chain, d.k32diff);
  cr_assert_eq(d.k32nega, nega, "%s: negabinary %u", chain, d.k32nega);
  cr_assert_eq(d.k32lev, lev, "%s: levels %u", chain, d.k32lev);
  if (k32) {
    /* The rze coders share the larger layout; the decoder of bitpack after
     * diff keeps the running sums of a chunk besides.  8-byte words have a
     * layout of their own, f64 `balanced`'s. */
    int w8 = fz_dtype_size(t) == 8;
    fzk_desc r = desc_of(w8 ? FZ_F64 : FZ_F32, k32 == 1 ? "fast" : "balanced");
    cr_assert_eq(d.smem_e32, r.smem_e32, "%s", chain);
    if (k32 == 1 && diff)
      cr_assert_eq(d.smem_d32, r.smem_d32 + ((d.cb + (w8 ? 256 : 128) + 15) & ~15u), "%s", chain);
    else
      cr_assert_eq(d.smem_d32, r.smem_d32, "%s", chain);
  }
}

Test(chain32_select, presets) {
  expect(FZ_F32, "fast", 1, 0, 0, 0);
  expect(FZ_F32, "balanced", 2, 1, 0, 4);
  expect(FZ_U32, "lossless", 2, 1, 0, 4);
}

Test(chain32_select, user_chains) {
  expect(FZ_F32, "quant | diff | bitpack", 1, 1, 0, 0);
  expect(FZ_F32, "quant | diff(map=negabinary) | bitpack", 1, 1, 1, 0);
  expect(FZ_F32, "quant | diff | rze", 3, 1, 0, 4);
  expect(FZ_F32, "quant | diff(map=negabinary) | rze(levels=1)", 3, 1, 1, 1);
  expect(FZ_F32, "quant | rze(levels=6)", 3, 0, 0, 6);
  expect(FZ_F32, "quant | bitshuffle | rze", 2, 0, 0, 4);
  expect(FZ_F32, "diff | rze", 3, 1, 0, 4);
  expect(FZ_I32, "diff(map=negabinary) | rze(levels=2)", 3, 1, 1, 2);
  expect(FZ_U32, "rze", 3, 0, 0, 4);
  expect(FZ_U32, "diff | bitpack", 1, 1, 0, 0);
  expect(FZ_I32, "bitpack", 1, 0, 0, 0);
}

Test(chain32_select, other_chains_stay_generic) {
  expect(FZ_F32, "quant | diff | diff | bitpack", 0, 0, 0, 0);
  expect(FZ_F32, "quant | diff | diff | rze", 0, 0, 0, 0);
  expect(FZ_F32, "diff | diff | bitshuffle | rze", 0, 0, 0, 0);
  expect(FZ_U64, "diff | diff | bitshuffle | rze", 0, 0, 0, 0);
  expect(FZ_F64, "quant | diff | diff | bitpack", 0, 0, 0, 0);
  expect(FZ_I64, "diff | diff | rze", 0, 0, 0, 0);
  expect(FZ_U16, "diff | rze", 0, 0, 0, 0);
  expect(FZ_U8, "bitpack", 0, 0, 0, 0);
}

/* The 8-byte word kernels (chain64.cu): [quant] [diff] bitshuffle | rze. */
Test(chain64_select, chains) {
  expect(FZ_F64, "balanced", 2, 1, 0, 4);
  expect(FZ_U64, "lossless", 2, 1, 0, 4);
  expect(FZ_I64, "lossless", 2, 1, 0, 4);
  expect(FZ_F64, "lossless", 2, 1, 0, 4);
  expect(FZ_F64, "quant | bitshuffle | rze(levels=5)", 2, 0, 0, 5);
  expect(FZ_F64, "quant | diff(map=negabinary) | bitshuffle | rze(levels=1)", 2, 1, 1, 1);
  expect(FZ_I64, "diff(map=negabinary) | bitshuffle | rze(levels=2)", 2, 1, 1, 2);
  expect(FZ_U64, "bitshuffle | rze(levels=6)", 2, 0, 0, 6);
}

/* Bitpack and rze on 8-byte words: theirs when this build has their
 * kernels (FZ_CHAIN64_ALL), else the generic kernels'. */
static void expect64(fz_dtype t, const char *chain, unsigned k32, unsigned diff, unsigned nega,
                     unsigned lev) {
  if ((fzk_chain64_coders() >> k32) & 1u)
    expect(t, chain, k32, diff, nega, lev);
  else
    expect(t, chain, 0, 0, 0, 0);
}

Test(chain64_select, built_coders) {
  cr_assert_eq(fzk_chain64_coders() & (1u << 2), 1u << 2, "bitshuffle | rze is always built");
  expect64(FZ_F64, "fast", 1, 0, 0, 0);
  expect64(FZ_F64, "quant | diff | bitpack", 1, 1, 0, 0);
  expect64(FZ_I64, "diff(map=negabinary) | bitpack", 1, 1, 1, 0);
  expect64(FZ_F64, "quant | diff | rze", 3, 1, 0, 4);
  expect64(FZ_F64, "quant | rze(levels=1)", 3, 0, 0, 1);
  expect64(FZ_U64, "diff(map=negabinary) | rze(levels=2)", 3, 1, 1, 2);
  expect64(FZ_I64, "rze", 3, 0, 0, 4);
}

/* Their layout: a stream of 64 planes of chunk / 64 bytes, each padded,
 * 64-bit sums per warp; six blocks of either kernel fit in an SM of 228
 * KiB (1 KiB of each block reserved) at the default chunk size, as the
 * 4-byte word kernels' do. */
Test(chain64_select, layout) {
  fzk_desc d = desc_of(FZ_F64, "balanced"), f = desc_of(FZ_F32, "balanced");
  cr_assert_eq(d.cb, FZ_CHUNK_DEFAULT);
  cr_assert_gt(d.smem_e32, f.smem_e32, "the stream of 64 planes pads twice as many");
  cr_assert_gt(d.smem_e32, d.cb * 2);
  cr_assert_gt(d.smem_d32, d.cb + 4096);
  cr_assert_leq(6 * (d.smem_e32 + 1024), 228u * 1024, "encoder: %u bytes", d.smem_e32);
  cr_assert_leq(6 * (d.smem_d32 + 1024), 228u * 1024, "decoder: %u bytes", d.smem_d32);
}

/* The ratio kernels: the ratio preset's chains on f32 and f64, and
 * lorenzo | byteplanes (the lossless-ratio preset) on 4- and 8-byte
 * words, its form taken from the lorenzo stage; 1- and 2-byte words,
 * and other chains with a ratio stage, are the CPU engine's. */
static int ratio_of(fz_dtype t, const char *chain, fzk_ratio_form *f, fze_stage *pred) {
  static const size_t dims[3] = {6, 20, 30};
  fz_params p;
  fzt_params_shaped(&p, t, dims, 3, chain);
  p.eb = 1e-3;
  fz_plan *pl = NULL;
  char why[256] = "";
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), 0, "%s: %s", chain, why);
  const fze_header *h = fze_plan_header(pl);
  int r = fzk_ratio_chain(h);
  if (r) {
    *f = fzk_ratio_form_of(h);
    *pred = h->chain.st[f->planes ? 0 : 1];
  }
  fz_plan_destroy(pl);
  return r;
}

Test(ratio_select, chains) {
  static const fz_dtype words[] = {FZ_F32, FZ_F64, FZ_I32, FZ_U32, FZ_I64, FZ_U64};
  fzk_ratio_form f;
  fze_stage pred;
  for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
    const char *name = fz_dtype_name(words[i]);
    cr_assert(ratio_of(words[i], "lossless-ratio", &f, &pred), "%s", name);
    cr_assert(f.planes && f.lorenzo && f.levels == 0 && f.pwrel == 0 && f.step == 0, "%s", name);
    cr_assert_eq(f.pdims, 3, "%s", name);
    cr_assert_eq(pred.id, FZE_STAGE_LORENZO, "%s", name);
    cr_assert(memcmp(f.ext, pred.ext, sizeof pred.ext) == 0, "%s", name);
    cr_assert(ratio_of(words[i], "lorenzo(dims=2) | byteplanes", &f, &pred), "%s", name);
    cr_assert_eq(f.pdims, 2, "%s", name);
  }
  static const fz_dtype bytes[] = {FZ_U8, FZ_I8, FZ_U16, FZ_I16};
  for (size_t i = 0; i < sizeof bytes / sizeof *bytes; i++)
    cr_assert(!ratio_of(bytes[i], "lossless-ratio", &f, &pred), "%s", fz_dtype_name(bytes[i]));
  cr_assert(ratio_of(FZ_F32, "ratio", &f, &pred));
  cr_assert(!f.planes && !f.lorenzo && f.levels >= 1 && f.pdims == 3 && !f.pwrel);
  cr_assert(ratio_of(FZ_F64, "quant | lorenzo(dims=1) | huffman | rze(levels=2)", &f, &pred));
  cr_assert(!f.planes && f.lorenzo && f.levels == 2 && f.pdims == 1);
  cr_assert(!ratio_of(FZ_I32, "lorenzo | rze", &f, &pred));
  cr_assert(!ratio_of(FZ_F32, "quant | lorenzo | rze", &f, &pred));
  cr_assert(!ratio_of(FZ_I32, "diff | byteplanes", &f, &pred));
}
