/*
 * jit_compile.c - the generated kernels without a GPU: for every chain
 * shape, dtype and quantizer mode, the source generated for each
 * direction runs the chain's stages in a straight line (no interpreter)
 * and NVRTC compiles it to a CUBIN for sm_80 and sm_90, as it does the
 * helper kernels' module; every chain of the 8-byte word kernels (f64,
 * u64, i64, each coder, quantizer and diff map) instantiates the 64-bit
 * bodies of chain64_ops.cuh and compiles; so do the ratio chains' kernels;
 * which descriptor and path a plan
 * takes when its kernel is not generated; a broken source reports NVRTC's
 * log, and a missing NVRTC says so.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "archive.h"
#include "engine.h"
#include "fz.h"
#include "fzk.h"
#include "launch.h"
#include "gpu_ctx.h"
#include "gpu_plan.h"
#include "jit.h"

typedef struct jcase {
  const char *chain;
  fz_dtype dtype;
  fz_eb_mode mode;
} jcase;

static const jcase cases[] = {
    {"balanced", FZ_F32, FZ_EB_REL},
    {"fast", FZ_F32, FZ_EB_REL},
    {"lossless", FZ_F32, FZ_EB_REL},
    {"quant | diff | rze", FZ_F32, FZ_EB_REL},
    {"quant | diff | bitpack", FZ_F32, FZ_EB_REL},
    {"diff | rze", FZ_F32, FZ_EB_REL},
    {"quant | bitshuffle | rze", FZ_F32, FZ_EB_REL},
    {"balanced", FZ_F64, FZ_EB_REL},
    {"fast", FZ_F64, FZ_EB_ABS},
    {"quant | diff | rze", FZ_F64, FZ_EB_PWREL},
    {"quant(mode=abs) | diff(map=negabinary) | bitshuffle | rze(levels=3)", FZ_F32, FZ_EB_ABS},
    {"quant | diff | bitshuffle | rze", FZ_F32, FZ_EB_PWREL},
    {"quant | diff | bitpack", FZ_F32, FZ_EB_ABS},
    {"lossless", FZ_U8, FZ_EB_REL},
    {"lossless", FZ_U16, FZ_EB_REL},
    {"diff | bitpack", FZ_U16, FZ_EB_REL},
    {"diff | bitshuffle | rze", FZ_I64, FZ_EB_REL},
    {"bitshuffle | rze(levels=1)", FZ_U8, FZ_EB_REL},
    {"quant | diff | diff | rze", FZ_F64, FZ_EB_REL},
};
#define NCASES (sizeof cases / sizeof cases[0])

/* The header of a case's plan (*plan to destroy). */
static const fze_header *header_of(const jcase *c, fz_plan **plan) {
  fz_params p;
  fz_params_init(&p);
  p.dtype = c->dtype;
  p.ndims = 1;
  p.dims[0] = 1u << 16;
  p.pipeline = c->chain;
  p.eb = c->mode == FZ_EB_PWREL ? 1e-2 : 1e-3;
  p.eb_mode = c->mode;
  if (fze_dtype_is_float(c->dtype) == 0)
    p.eb = 0;
  char why[256] = "";
  *plan = NULL;
  int rc = fz_plan_create(&p, plan, why, sizeof why);
  cr_assert_eq(rc, 0, "%s on %s: %s", c->chain, fz_dtype_name(c->dtype), why);
  return fze_plan_header(*plan);
}

/* The descriptor of a case as the code generation gets it (every 8-byte
 * word coder), or (aot) as the built-in kernels do. */
static void desc_for(const jcase *c, fzk_desc *d, int aot) {
  fz_plan *plan;
  const fze_header *h = header_of(c, &plan);
  if (aot)
    fzk_desc_from_header(d, h);
  else
    fzk_desc_from_header_jit(d, h);
  fz_plan_destroy(plan);
}
static void desc_of(const jcase *c, fzk_desc *d) { desc_for(c, d, 0); }

/* Each stage after the quantizer appears as its step, in order (the
 * inverse: last stage first); a word chain instantiates the word kernels'
 * template of its word size with every chain constant fixed. */
static void check_straight_line(const fzk_desc *d, const char *src, fzk_jit_dir dir) {
  cr_assert_null(strstr(src, "interp"), "no interpreter in\n%s", src);
  cr_assert_null(strstr(src, "switch"), "no switch in\n%s", src);
  cr_assert_null(strstr(src, "FZK_RT"), "nothing read at run time in\n%s", src);
  if (d->k32) {
    char inst[96], other[32], inc[40];
    const char *qk = !d->has_quant ? "FZK_Q_NONE" : d->mode[0] == FZ_EB_PWREL ? "FZK_Q_PW"
                                                                               : "FZK_Q_BINS";
    const unsigned bits = d->w == 8 ? 64 : 32;
    cr_assert(d->w == 4 || d->w == 8, "word kernels on %u-byte words", d->w);
    snprintf(inst, sizeof inst, "fzk_%s%u_body<%s, %u, %u, %u, %u>(",
             dir == FZK_JIT_ENCODE ? "enc" : "dec", bits, qk, d->k32, d->k32diff, d->k32nega,
             d->k32 == 1 ? 0u : d->k32lev);
    cr_assert_not_null(strstr(src, inst), "%s in\n%s", inst, src);
    snprintf(other, sizeof other, "%u_body", bits == 64 ? 32u : 64u);
    cr_assert_null(strstr(src, other), "no %s in\n%s", other, src);
    snprintf(inc, sizeof inc, "#include \"chain%u_ops.cuh\"", bits);
    cr_assert_not_null(strstr(src, inc), "%s in\n%s", inc, src);
    return;
  }
  const char *at = src;
  for (unsigned k = 0; k + d->has_quant < d->nst; k++) {
    unsigned i = dir == FZK_JIT_ENCODE ? d->has_quant + k : d->nst - 1 - k;
    const char *name = d->id[i] == FZE_STAGE_DIFF         ? "diff("
                       : d->id[i] == FZE_STAGE_BITSHUFFLE ? "bitshuffle("
                       : d->id[i] == FZE_STAGE_RZE        ? "rze("
                                                          : "bitpack(";
    char step[40];
    snprintf(step, sizeof step, "fzk_%s_%s", dir == FZK_JIT_ENCODE ? "fwd" : "inv", name);
    const char *hit = strstr(at, step);
    cr_assert_not_null(hit, "step %s missing or out of order in\n%s", step, src);
    at = hit + 1;
  }
}

static void compile_ok(const char *src, unsigned arch, const char *what) {
  void *img = NULL;
  size_t len = 0;
  char why[4096] = "";
  int rc = fzk_nvrtc_compile(src, arch, &img, &len, why, sizeof why);
  cr_assert_eq(rc, 0, "%s for sm_%u: %s: %s", what, arch, fz_err_name(rc), why);
  cr_assert_gt(len, 64);
  cr_assert_eq(memcmp(img, "\177ELF", 4), 0, "a CUBIN is an ELF image");
  free(img);
}

/* One test per case and architecture, so the two cores share them. */
static void run_case(unsigned idx, unsigned arch) {
  const jcase *c = &cases[idx];
  fzk_desc d;
  desc_of(c, &d);
  unsigned tried = 0;
  for (int dir = FZK_JIT_ENCODE; dir <= FZK_JIT_DECODE; dir++) {
    if (!fzk_jit_supported(&d, (fzk_jit_dir)dir))
      continue;
    char *src = fzk_jit_source(&d, (fzk_jit_dir)dir);
    cr_assert_not_null(src);
    check_straight_line(&d, src, (fzk_jit_dir)dir);
    char what[160];
    snprintf(what, sizeof what, "%s of %s on %s", dir ? "decode" : "encode", c->chain,
             fz_dtype_name(c->dtype));
    compile_ok(src, arch, what);
    free(src);
    tried++;
  }
  cr_assert_eq(tried, 2, "%s on %s has both kernels", c->chain, fz_dtype_name(c->dtype));
}

#define CASE_TESTS(i)                                                          \
  Test(jit_compile, case##i##_sm80, .timeout = 600) { run_case(i, 80); }      \
  Test(jit_compile, case##i##_sm90, .timeout = 600) { run_case(i, 90); }
CASE_TESTS(0)
CASE_TESTS(1)
CASE_TESTS(2)
CASE_TESTS(3)
CASE_TESTS(4)
CASE_TESTS(5)
CASE_TESTS(6)
CASE_TESTS(7)
CASE_TESTS(8)
CASE_TESTS(9)
CASE_TESTS(10)
CASE_TESTS(11)
CASE_TESTS(12)
CASE_TESTS(13)
CASE_TESTS(14)
CASE_TESTS(15)
CASE_TESTS(16)
CASE_TESTS(17)
CASE_TESTS(18)

Test(jit_compile, every_case_has_a_test) {
  cr_assert_eq(NCASES, 19, "one CASE_TESTS line per case");
}

/* ---- every chain of the 8-byte word kernels ---- */

static const char *const w8_coders[] = {"bitshuffle | rze", "bitpack", "rze"};
static const unsigned w8_k32[] = {2, 1, 3}; /* FZK_C32_SHUF_RZE, _BITPACK, _RZE */
static const char *const w8_diffs[] = {"", "diff | ", "diff(map=negabinary) | "};
static const fz_eb_mode w8_modes[] = {FZ_EB_ABS, FZ_EB_REL, FZ_EB_PWREL};

/* Every chain of one coder on one 8-byte dtype, each quantizer (on f64:
 * none, ABS, REL, PWREL) and diff map (none, zigzag, negabinary): the
 * word family's descriptor, the 64-bit bodies with its constants, and a
 * CUBIN for each direction. */
static void w8_shapes(fz_dtype t, unsigned coder, unsigned arch) {
  const unsigned nq = t == FZ_F64 ? 4 : 1;
  unsigned built = 0;
  for (unsigned q = 0; q < nq; q++)
    for (unsigned df = 0; df < 3; df++) {
      char chain[96];
      snprintf(chain, sizeof chain, "%s%s%s", q ? "quant | " : "", w8_diffs[df],
               w8_coders[coder]);
      const jcase c = {chain, t, q ? w8_modes[q - 1] : FZ_EB_REL};
      fzk_desc d;
      desc_of(&c, &d);
      cr_assert_eq(d.w, 8, "%s on %s", chain, fz_dtype_name(t));
      cr_assert_eq(d.k32, w8_k32[coder], "%s on %s: the word family", chain, fz_dtype_name(t));
      cr_assert_eq(d.has_quant, q != 0, "%s", chain);
      cr_assert_eq(d.k32diff, df != 0, "%s", chain);
      cr_assert_eq(d.k32nega, df == 2, "%s", chain);
      for (int dir = FZK_JIT_ENCODE; dir <= FZK_JIT_DECODE; dir++) {
        cr_assert(fzk_jit_supported(&d, (fzk_jit_dir)dir), "%s", chain);
        char *src = fzk_jit_source(&d, (fzk_jit_dir)dir);
        cr_assert_not_null(src);
        check_straight_line(&d, src, (fzk_jit_dir)dir);
        char what[160];
        snprintf(what, sizeof what, "%s of %s on %s (%s)", dir ? "decode" : "encode", chain,
                 fz_dtype_name(t), fz_eb_mode_name(c.mode));
        compile_ok(src, arch, what);
        free(src);
        built++;
      }
    }
  cr_assert_eq(built, 2 * 3 * nq);
}

#define W8_TESTS(name, t, k)                                                   \
  Test(jit_compile, w8_##name##_sm80, .timeout = 600) { w8_shapes(t, k, 80); } \
  Test(jit_compile, w8_##name##_sm90, .timeout = 600) { w8_shapes(t, k, 90); }
W8_TESTS(f64_shuf_rze, FZ_F64, 0)
W8_TESTS(f64_bitpack, FZ_F64, 1)
W8_TESTS(f64_rze, FZ_F64, 2)
W8_TESTS(u64_shuf_rze, FZ_U64, 0)
W8_TESTS(u64_bitpack, FZ_U64, 1)
W8_TESTS(u64_rze, FZ_U64, 2)
W8_TESTS(i64_shuf_rze, FZ_I64, 0)
W8_TESTS(i64_bitpack, FZ_I64, 1)
W8_TESTS(i64_rze, FZ_I64, 2)

/* A plan of 8-byte words generates the 64-bit bodies, with the descriptor
 * the built-in kernels have too (f64 balanced: chain64.cu always builds
 * bitshuffle | rze), never the 4-byte word ones. */
Test(jit_compile, w8_source_names_the_64_bit_bodies) {
  static const jcase w8[] = {{"balanced", FZ_F64, FZ_EB_REL},
                             {"lossless", FZ_I64, FZ_EB_REL},
                             {"fast", FZ_F64, FZ_EB_ABS},
                             {"diff | rze", FZ_U64, FZ_EB_REL}};
  for (unsigned i = 0; i < sizeof w8 / sizeof w8[0]; i++)
    for (int aot = 0; aot < 2; aot++) {
      fzk_desc d;
      desc_for(&w8[i], &d, aot);
      if (!d.k32) /* the built-in descriptor of a coder chain64.cu lacks */
        continue;
      for (int dir = FZK_JIT_ENCODE; dir <= FZK_JIT_DECODE; dir++) {
        char *src = fzk_jit_source(&d, (fzk_jit_dir)dir);
        const char *body = dir == FZK_JIT_ENCODE ? "fzk_enc64_body<" : "fzk_dec64_body<";
        const char *blocks = dir == FZK_JIT_ENCODE ? "FZK_ENC64_BLOCKS" : "FZK_DEC64_BLOCKS";
        cr_assert_not_null(strstr(src, body), "%s on %s: %s in\n%s", w8[i].chain,
                           fz_dtype_name(w8[i].dtype), body, src);
        cr_assert_not_null(strstr(src, blocks), "%s in\n%s", blocks, src);
        cr_assert_not_null(strstr(src, "#include \"chain64_ops.cuh\""), "%s", src);
        cr_assert_not_null(strstr(src, "d.w = 8u;"), "%s", src);
        cr_assert_null(strstr(src, "32_body"), "no 4-byte word body in\n%s", src);
        cr_assert_null(strstr(src, "chain32_ops.cuh"), "%s", src);
        free(src);
      }
    }
}

/* The descriptors of the two paths: the generated kernels get the word
 * family for every 8-byte coder, the built-in ones only for the coders
 * chain64.cu has (else the generic chunk family); 4-byte words the same
 * either way. */
Test(jit_compile, w8_descriptors_of_the_two_paths) {
  const unsigned built = fzk_chain64_coders();
  cr_assert(built & (1u << 2), "bitshuffle | rze is always built");
  for (unsigned t = 0; t < 3; t++)
    for (unsigned k = 0; k < 3; k++) {
      const fz_dtype dt = t == 0 ? FZ_F64 : t == 1 ? FZ_U64 : FZ_I64;
      char chain[64];
      snprintf(chain, sizeof chain, "%sdiff | %s", dt == FZ_F64 ? "quant | " : "", w8_coders[k]);
      const jcase c = {chain, dt, FZ_EB_REL};
      fzk_desc g, a;
      desc_for(&c, &g, 0);
      desc_for(&c, &a, 1);
      cr_assert_eq(g.k32, w8_k32[k], "%s", chain);
      cr_assert_eq(a.k32, (built >> w8_k32[k]) & 1u ? w8_k32[k] : 0u, "%s", chain);
      /* The generic family's layout is the same in both. */
      cr_assert_eq(g.smem, a.smem);
    }
  for (unsigned i = 0; i < NCASES; i++) {
    if (fz_dtype_size(cases[i].dtype) == 8)
      continue;
    fzk_desc g, a;
    desc_for(&cases[i], &g, 0);
    desc_for(&cases[i], &a, 1);
    cr_assert(memcmp(&g, &a, sizeof g) == 0, "%s", cases[i].chain);
  }
}

/* Where the kernel is not generated (here: no JIT, as in a context whose
 * JIT is off or whose NVRTC failed), a plan and a decoder get the
 * descriptor of a kernel this build has: the generic family for an
 * 8-byte word coder chain64.cu lacks, never an unbuilt one. */
Test(jit_compile, fallback_takes_a_built_kernel) {
  struct fz_gpu_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  const unsigned built = fzk_chain64_coders();
  static const jcase some[] = {{"fast", FZ_F64, FZ_EB_ABS},
                               {"quant | diff | bitpack", FZ_F64, FZ_EB_REL},
                               {"quant | diff | rze", FZ_F64, FZ_EB_PWREL},
                               {"diff | rze", FZ_U64, FZ_EB_REL},
                               {"lossless", FZ_I64, FZ_EB_REL},
                               {"balanced", FZ_F64, FZ_EB_REL},
                               {"quant | diff | rze", FZ_F32, FZ_EB_REL}};
  for (unsigned i = 0; i < sizeof some / sizeof some[0]; i++)
    for (int dir = FZK_JIT_ENCODE; dir <= FZK_JIT_DECODE; dir++) {
      fz_plan *plan;
      const fze_header *h = header_of(&some[i], &plan);
      fzk_desc d, a;
      void *fn = (void *)1;
      char why[256] = "";
      cr_assert_eq(fzk_desc_kernel(&ctx, h, dir, &d, &fn, why, sizeof why), 0, "%s", why);
      cr_assert_null(fn);
      fzk_desc_from_header(&a, h);
      cr_assert(memcmp(&d, &a, sizeof d) == 0, "%s: the built-in kernels' descriptor",
                some[i].chain);
      if (d.w == 8)
        cr_assert(d.k32 == 0 || ((built >> d.k32) & 1u), "%s: a coder chain64.cu built",
                  some[i].chain);
      fz_plan_destroy(plan);
    }
}

/* Both families have generated kernels; which family a chain is in (the
 * 8-byte word chains of the form [quant] [diff] coder in the word family,
 * whichever coders the built-in kernels have). */
Test(jit_compile, both_families_are_generated) {
  static const struct {
    unsigned idx, k32;
  } want[] = {{0, 2}, {1, 1}, {2, 2}, {3, 3}, {4, 1}, {5, 3}, {6, 2}, {7, 2}, {8, 1}, {9, 3},
              {13, 0}, {15, 0}, {16, 2}, {18, 0}};
  for (unsigned k = 0; k < sizeof want / sizeof want[0]; k++) {
    fzk_desc d;
    desc_of(&cases[want[k].idx], &d);
    cr_assert_eq(d.k32, want[k].k32, "%s on %s", cases[want[k].idx].chain,
                 fz_dtype_name(cases[want[k].idx].dtype));
    cr_assert(fzk_jit_supported(&d, FZK_JIT_ENCODE) && fzk_jit_supported(&d, FZK_JIT_DECODE),
              "%s", cases[want[k].idx].chain);
  }
}

/* The built-in kernel stays where it is as specialised as a generated
 * one (`fast` on f32) or measured as fast (the 8-byte word coders
 * chain64.cu built), not elsewhere. */
Test(jit_compile, preference) {
  fzk_desc d;
  desc_of(&cases[1], &d);
  cr_assert_not(fzk_jit_preferred(&d), "fast on f32");
  desc_of(&cases[7], &d);
  cr_assert_not(fzk_jit_preferred(&d), "balanced on f64: chain64.cu always has bitshuffle rze");
  const unsigned built = fzk_chain64_coders();
  for (unsigned i = 0; i < NCASES; i++) {
    if (i == 1 || i == 7)
      continue;
    desc_of(&cases[i], &d);
    int aot64 = d.w == 8 && d.k32 && ((built >> d.k32) & 1u);
    cr_assert_eq(fzk_jit_preferred(&d), !aot64 && !(d.k32 == 1 && !d.k32diff && d.w == 4),
                 "%s on %s", cases[i].chain, fz_dtype_name(cases[i].dtype));
  }
  desc_of(&cases[4], &d); /* quant | diff | bitpack: diff is the generated kernel's */
  cr_assert(fzk_jit_preferred(&d));
}

/* The constants are in the source: two chunk sizes, two sources. */
Test(jit_compile, source_names_the_constants) {
  fzk_desc a, b;
  desc_of(&cases[3], &a);
  b = a;
  b.cb = 8192;
  fzk_desc_layout(&b);
  char *sa = fzk_jit_source(&a, FZK_JIT_ENCODE), *sb = fzk_jit_source(&b, FZK_JIT_ENCODE);
  cr_assert(strcmp(sa, sb) != 0);
  cr_assert_not_null(strstr(sa, "d.cb = 16384u"), "%s", sa);
  cr_assert_not_null(strstr(sb, "d.cb = 8192u"), "%s", sb);
  /* The shape is not: another length, the same source. */
  fzk_desc c = a;
  c.raw_bytes *= 3;
  c.nchunks *= 3;
  char *sc = fzk_jit_source(&c, FZK_JIT_ENCODE);
  cr_assert_str_eq(sa, sc);
  free(sa);
  free(sb);
  free(sc);
}

/* The kernels around the chunk coders, for a GPU the built-in code cannot
 * run on: every one the launchers name is in the module. */
static void helpers_for(unsigned arch) {
  compile_ok(fzk_jit_helpers_source(), arch, "the helper kernels");
}
Test(jit_compile, helpers_sm80, .timeout = 600) { helpers_for(80); }
Test(jit_compile, helpers_sm90, .timeout = 600) { helpers_for(90); }

/* The ratio chains' kernels (ratio_kernels.cuh: their decoder, encoder and
 * place kernel), for such a GPU: the very headers the library's nvcc build
 * compiles, from the embedded copies. */
static void ratio_for(unsigned arch) {
  void *img = NULL;
  size_t len = 0;
  char why[4096] = "";
  int rc = fzk_nvrtc_compile(fzk_jit_ratio_source(), arch, &img, &len, why, sizeof why);
  cr_assert_eq(rc, 0, "the ratio kernels for sm_%u: %s: %s", arch, fz_err_name(rc), why);
  cr_assert_eq(memcmp(img, "\177ELF", 4), 0, "a CUBIN is an ELF image");
  /* Every entry jit.c looks up is in the image's symbols. */
  static const char *const names[] = {"fzr_decode_kernel", "fzre_encode_kernel",
                                      "fzre_place_kernel", "fzr_decode_planes_kernel",
                                      "fzre_encode_planes_kernel"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    cr_assert_not_null(memmem(img, len, names[i], strlen(names[i]) + 1), "%s is missing",
                       names[i]);
  free(img);
}
Test(jit_compile, ratio_sm80, .timeout = 600) { ratio_for(80); }
Test(jit_compile, ratio_sm90, .timeout = 600) { ratio_for(90); }

Test(jit_compile, broken_source_reports_the_log) {
  char why[4096] = "";
  void *img = (void *)1;
  size_t len = 1;
  int rc = fzk_nvrtc_compile("#include \"chain_body.cuh\"\nextern \"C\" __global__ void k() "
                             "{ fzk_no_such_op(); }\n",
                             90, &img, &len, why, sizeof why);
  cr_assert_eq(rc, FZ_ECUDA, "%s", fz_err_name(rc));
  cr_assert_null(img);
  cr_assert_eq(len, 0);
  cr_assert_not_null(strstr(why, "NVRTC"), "%s", why);
  cr_assert_not_null(strstr(why, "fzk_no_such_op"), "the log names the error: %s", why);
  cr_assert_not_null(strstr(why, "error"), "%s", why);
}

/* The embedded headers are what the sources include: nothing reads the
 * source tree. */
Test(jit_compile, headers_are_embedded) {
  int found = 0;
  for (unsigned i = 0; i < fzk_embedded_count; i++) {
    cr_assert_gt(strlen(fzk_embedded_headers[i].text), 100);
    found += strcmp(fzk_embedded_headers[i].name, "chain_body.cuh") == 0 ||
             strcmp(fzk_embedded_headers[i].name, "chunk_ops.cuh") == 0 ||
             strcmp(fzk_embedded_headers[i].name, "ops.h") == 0 ||
             strcmp(fzk_embedded_headers[i].name, "chain32_ops.cuh") == 0 ||
             strcmp(fzk_embedded_headers[i].name, "chain64_ops.cuh") == 0;
  }
  cr_assert_eq(found, 5);
}

/* Criterion runs each test in its own process, so this one's NVRTC is the
 * missing library it names. */
Test(jit_compile, missing_nvrtc_is_reported) {
  setenv("FZ_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so", 1);
  char why[512] = "";
  cr_assert_eq(fzk_nvrtc_load(why, sizeof why), FZ_ENOSYS);
  cr_assert_not_null(strstr(why, "NVRTC not found"), "%s", why);
  void *img = NULL;
  size_t len = 0;
  cr_assert_eq(fzk_nvrtc_compile("extern \"C\" __global__ void k() {}", 90, &img, &len, why,
                                 sizeof why),
               FZ_ENOSYS);
}

/* The cache key's target names the embedded headers' digest: an fzd built
 * from other headers (an upgrade) must miss the images an older one left
 * in the cache, since a generated source may be the same text (the ratio
 * module's is one #include).  Any byte of any header, or a header more,
 * changes the digest. */
Test(jit_compile, cache_target_names_the_headers) {
  cr_assert_gt(fzk_embedded_count, 3u);
  char real[17], other[17], target[160];
  fzk_headers_digest(fzk_embedded_headers, fzk_embedded_count, real);
  cr_assert_eq(strlen(real), 16u);
  fzk_jit_target(90, 13, 0, 13000, target, sizeof target);
  char want[160];
  snprintf(want, sizeof want, "sm_90 nvrtc 13.0 driver 13000 headers %s", real);
  cr_assert_str_eq(target, want);
  fzk_embedded *h = malloc((fzk_embedded_count + 1) * sizeof *h);
  cr_assert_not_null(h);
  memcpy(h, fzk_embedded_headers, fzk_embedded_count * sizeof *h);
  /* One byte of the last header's text changed. */
  unsigned last = fzk_embedded_count - 1;
  char *text = strdup(h[last].text);
  cr_assert_not_null(text);
  cr_assert_gt(strlen(text), 10u);
  text[strlen(text) / 2] ^= 1;
  h[last].text = text;
  fzk_headers_digest(h, fzk_embedded_count, other);
  cr_assert_str_neq(other, real);
  /* A header more; and the same ones give the same digest. */
  h[last] = fzk_embedded_headers[last];
  h[fzk_embedded_count] = (fzk_embedded){"extra.cuh", ""};
  fzk_headers_digest(h, fzk_embedded_count + 1, other);
  cr_assert_str_neq(other, real);
  fzk_headers_digest(h, fzk_embedded_count, other);
  cr_assert_str_eq(other, real);
  free(text);
  free(h);
}
