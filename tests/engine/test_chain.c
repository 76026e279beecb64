/*
 * test_chain.c - the pipeline syntax: presets, canonical text, and a clear
 * error (exact code, offending text quoted) for every malformed chain.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "fz.h"
#include "params_1d.h"

static int plan_rc(const char *pipe, fz_dtype t, double eb, char *why, size_t len) {
  fz_params p;
  fzt_params_1d(&p, t, 100, pipe);
  p.eb = eb;
  fz_plan *pl = NULL;
  why[0] = 0;
  int rc = fz_plan_create(&p, &pl, why, len);
  if (rc == 0)
    fz_plan_destroy(pl);
  else
    cr_assert_null(pl);
  return rc;
}

static const char *canonical(const char *pipe, fz_dtype t) {
  static char buf[256];
  fz_params p;
  fzt_params_1d(&p, t, 10, pipe);
  /* A chain that names its bound gets a job without one. */
  p.eb = strstr(pipe, "eb") ? 0 : 1e-3;
  fz_plan *pl;
  char why[256];
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), 0, "'%s': %s", pipe, why);
  strcpy(buf, fz_plan_chain(pl));
  fz_plan_destroy(pl);
  return buf;
}

Test(chain, presets_expand) {
  size_t n;
  const fz_preset *pr = fz_presets(&n);
  cr_assert_eq(n, 3);
  cr_assert_str_eq(pr[0].name, "fast");
  cr_assert_str_eq(canonical("fast", FZ_F32), "quant(eb=0.001,mode=rel) | bitpack");
  cr_assert_str_eq(canonical("balanced", FZ_F32),
                   "quant(eb=0.001,mode=rel) | diff(map=zigzag) | bitshuffle | rze(levels=4)");
  cr_assert_str_eq(canonical("lossless", FZ_I16), "diff(map=zigzag) | bitshuffle | rze(levels=4)");
  cr_assert_str_eq(canonical("  balanced  ", FZ_F64),
                   "quant(eb=0.001,mode=rel) | diff(map=zigzag) | bitshuffle | rze(levels=4)");
}

Test(chain, spelled_out_chains) {
  cr_assert_str_eq(canonical("quant(eb=1e-3,mode=rel) | diff | bitshuffle | rze", FZ_F32),
                   "quant(eb=0.001,mode=rel) | diff(map=zigzag) | bitshuffle | rze(levels=4)");
  cr_assert_str_eq(canonical("quant( eb = 0.25 , mode = pwrel )|diff(map=negabinary)|bitpack", FZ_F32),
                   "quant(eb=0.25,mode=pwrel) | diff(map=negabinary) | bitpack");
  cr_assert_str_eq(canonical("quant()|rze(levels=6)", FZ_F64),
                   "quant(eb=0.001,mode=rel) | rze(levels=6)");
  /* The canonical text parses to itself. */
  const char *c = "quant(eb=0.0001,mode=abs) | diff(map=zigzag) | bitshuffle | rze(levels=3)";
  cr_assert_str_eq(canonical(c, FZ_F32), c);
}

struct bad {
  const char *pipe;
  fz_dtype t;
  double eb;
  int rc;
  const char *quote; /* must appear in the message */
};

Test(chain, malformed_chains_are_rejected_with_a_reason) {
  static const struct bad cases[] = {
      {"", FZ_F32, 1e-3, FZ_EPIPELINE, "expected a stage name"},
      {"foo", FZ_F32, 1e-3, FZ_EPIPELINE, "'foo'"},
      {"quant | ", FZ_F32, 1e-3, FZ_EPIPELINE, "expected a stage name"},
      {"quant || rze", FZ_F32, 1e-3, FZ_EPIPELINE, "expected a stage name"},
      {"quant rze", FZ_F32, 1e-3, FZ_EPIPELINE, "expected '|'"},
      {"quant(eb=abc)", FZ_F32, 1e-3, FZ_EBOUND, "'abc'"},
      {"quant(eb=-1)", FZ_F32, 1e-3, FZ_EBOUND, "'-1'"},
      {"quant(eb=1e-3", FZ_F32, 1e-3, FZ_EPIPELINE, "expected ',' or ')'"},
      {"quant(eb)", FZ_F32, 1e-3, FZ_EPIPELINE, "expected key=value"},
      {"quant(eb=)", FZ_F32, 1e-3, FZ_EPIPELINE, "missing value"},
      {"quant(mode=weird)", FZ_F32, 1e-3, FZ_EPIPELINE, "'weird'"},
      {"quant(colour=red)", FZ_F32, 1e-3, FZ_EPIPELINE, "'colour'"},
      {"diff(map=gray)", FZ_F32, 1e-3, FZ_EPIPELINE, "'gray'"},
      {"rze(levels=9)", FZ_F32, 1e-3, FZ_EPIPELINE, "'9'"},
      {"diff | quant", FZ_F32, 1e-3, FZ_EPIPELINE, "quant must be the first"},
      {"rze | diff", FZ_F32, 1e-3, FZ_EPIPELINE, "rze must be the last"},
      {"bitpack | rze", FZ_F32, 1e-3, FZ_EPIPELINE, "bitpack must be the last"},
      {"bitshuffle | diff", FZ_F32, 1e-3, FZ_EPIPELINE, "needs words"},
      {"quant | bitpack", FZ_I32, 1e-3, FZ_EDTYPE, "i32"},
      {"balanced", FZ_F32, 0, FZ_EBOUND, "error bound"},
      {"quant(eb=2,mode=pwrel) | bitpack", FZ_F32, 0, FZ_EBOUND, "below 1"},
      {"diff|diff|diff|diff|diff|diff|diff|diff|diff", FZ_F32, 1e-3, FZ_EPIPELINE, "too many"},
  };
  char why[256];
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int rc = plan_rc(cases[i].pipe, cases[i].t, cases[i].eb, why, sizeof why);
    cr_expect_eq(rc, cases[i].rc, "'%s': got %s (%s), want %s", cases[i].pipe,
                 fz_err_name(rc), why, fz_err_name(cases[i].rc));
    cr_expect(strstr(why, cases[i].quote) != NULL, "'%s': message '%s' lacks '%s'",
              cases[i].pipe, why, cases[i].quote);
  }
}

Test(chain, bad_params_are_rejected) {
  fz_params p;
  fz_params_init(&p);
  p.ndims = 0;
  p.eb = 1e-3;
  fz_plan *pl;
  char why[256];
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_ESHAPE);
  p.ndims = 5;
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_ESHAPE);
  p.ndims = 3;
  p.dims[0] = p.dims[1] = p.dims[2] = UINT64_C(1) << 30;
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_ESHAPE);
  p.ndims = 1;
  p.dims[0] = 10;
  p.chunk_bytes = 5000;
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_EINVAL);
  cr_assert(strstr(why, "5000") != NULL);
  p.chunk_bytes = 0;
  p.dtype = (fz_dtype)99;
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_EDTYPE);
  cr_assert_eq(fz_plan_create(NULL, &pl, why, sizeof why), FZ_EINVAL);
}

Test(chain, names_and_errors) {
  fz_dtype t;
  cr_assert_eq(fz_dtype_parse("<f4", &t), 0);
  cr_assert_eq(t, FZ_F32);
  cr_assert_eq(fz_dtype_parse("float64", &t), 0);
  cr_assert_eq(t, FZ_F64);
  cr_assert_eq(fz_dtype_parse("f16", &t), FZ_EDTYPE);
  cr_assert_str_eq(fz_err_name(FZ_ECORRUPT), "ECORRUPT");
  cr_assert_str_eq(fz_strerror(FZ_ETRUNC), "archive is truncated");
  cr_assert_str_eq(fz_strerror(12345), "unknown error");
  cr_assert_eq(fz_version(), FZ_VERSION_HEX);
}
