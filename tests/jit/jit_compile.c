/*
 * jit_compile.c - the generated kernels without a GPU: for every chain
 * shape, dtype and quantizer mode, the source generated for each
 * direction runs the chain's stages in a straight line (no interpreter)
 * and NVRTC compiles it to a CUBIN for sm_80 and sm_90, as it does the
 * helper kernels' module; a broken source reports NVRTC's log, and a
 * missing NVRTC says so.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "archive.h"
#include "engine.h"
#include "fz.h"
#include "fzk.h"
#include "gpu_ctx.h"
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
};
#define NCASES (sizeof cases / sizeof cases[0])

/* The descriptor of a case, as a GPU plan makes it. */
static void desc_of(const jcase *c, fzk_desc *d) {
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
  fz_plan *plan = NULL;
  char why[256] = "";
  int rc = fz_plan_create(&p, &plan, why, sizeof why);
  cr_assert_eq(rc, 0, "%s on %s: %s", c->chain, fz_dtype_name(c->dtype), why);
  fzk_desc_from_header(d, fze_plan_header(plan));
  fz_plan_destroy(plan);
}

/* Each stage after the quantizer appears as its step, in order (the
 * inverse: last stage first); a 4-byte word chain instantiates the word
 * kernels' template with every chain constant fixed. */
static void check_straight_line(const fzk_desc *d, const char *src, fzk_jit_dir dir) {
  cr_assert_null(strstr(src, "interp"), "no interpreter in\n%s", src);
  cr_assert_null(strstr(src, "switch"), "no switch in\n%s", src);
  cr_assert_null(strstr(src, "FZK_RT"), "nothing read at run time in\n%s", src);
  if (d->k32) {
    char inst[96];
    const char *qk = !d->has_quant ? "FZK_Q_NONE" : d->mode[0] == FZ_EB_PWREL ? "FZK_Q_PW"
                                                                               : "FZK_Q_BINS";
    snprintf(inst, sizeof inst, "fzk_%s32_body<%s, %u, %u, %u, %u>(",
             dir == FZK_JIT_ENCODE ? "enc" : "dec", qk, d->k32, d->k32diff, d->k32nega,
             d->k32 == 1 ? 0u : d->k32lev);
    cr_assert_not_null(strstr(src, inst), "%s in\n%s", inst, src);
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

Test(jit_compile, every_case_has_a_test) {
  cr_assert_eq(NCASES, 18, "one CASE_TESTS line per case");
}

/* Both families have generated kernels; which family a chain is in. */
Test(jit_compile, both_families_are_generated) {
  static const struct {
    unsigned idx, k32;
  } want[] = {{0, 2}, {1, 1}, {2, 2}, {3, 3}, {4, 1}, {5, 3}, {6, 2}, {7, 0}, {8, 0}, {9, 0},
              {13, 0}, {15, 0}};
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
 * one (`fast` on f32), not elsewhere. */
Test(jit_compile, preference) {
  fzk_desc d;
  desc_of(&cases[1], &d);
  cr_assert_not(fzk_jit_preferred(&d), "fast on f32");
  for (unsigned i = 0; i < NCASES; i++) {
    if (i == 1)
      continue;
    desc_of(&cases[i], &d);
    cr_assert(fzk_jit_preferred(&d) || (d.k32 == 1 && !d.k32diff), "%s", cases[i].chain);
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
             strcmp(fzk_embedded_headers[i].name, "ops.h") == 0;
  }
  cr_assert_eq(found, 3);
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
