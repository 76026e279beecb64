/*
 * test_chain.c - the pipeline syntax: presets, canonical text, and a clear
 * error (exact code, offending text quoted) for every malformed chain.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
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
  cr_assert_eq(n, 5);
  cr_assert_str_eq(pr[0].name, "fast");
  cr_assert_str_eq(pr[2].name, "ratio");
  /* The job's shape picks lorenzo's dims when the plan is made. */
  cr_assert_str_eq(canonical("ratio", FZ_F32),
                   "quant(eb=0.001,mode=rel) | interp(dims=1) | huffman | rze(levels=4)");
  cr_assert_str_eq(canonical("fast", FZ_F32), "quant(eb=0.001,mode=rel) | bitpack");
  cr_assert_str_eq(canonical("balanced", FZ_F32),
                   "quant(eb=0.001,mode=rel) | diff(map=zigzag) | bitshuffle | rze(levels=4)");
  cr_assert_str_eq(canonical("lossless", FZ_I16), "diff(map=zigzag) | bitshuffle | rze(levels=4)");
  cr_assert_str_eq(pr[4].name, "lossless-ratio");
  cr_assert_str_eq(canonical("lossless-ratio", FZ_I32), "lorenzo(dims=1) | byteplanes");
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
      {"byteplanes | rze", FZ_U16, 1e-3, FZ_EPIPELINE, "byteplanes must be the last"},
      {"bitshuffle | byteplanes", FZ_U16, 1e-3, FZ_EPIPELINE, "needs words"},
      {"byteplanes(levels=2)", FZ_U16, 1e-3, FZ_EPIPELINE, "'levels'"},
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

/* A plan's outcome for a pipeline and a job bound (eb, mode); the message
 * lands in why. */
static int plan_job(const char *pipe, double eb, fz_eb_mode mode, char *why, size_t len) {
  fz_params p;
  fzt_params_1d(&p, FZ_F32, 100, pipe);
  p.eb = eb;
  p.eb_mode = mode;
  fz_plan *pl = NULL;
  why[0] = 0;
  int rc = fz_plan_create(&p, &pl, why, len);
  fz_plan_destroy(pl);
  return rc;
}

/* Numbers are parsed whole: 1.<61 zeros>e-5 is 1e-5, not the first 63
 * characters of it (which read as 1). */
Test(chain, long_numbers_are_parsed_whole_or_refused) {
  char pipe[512], num[300];
  strcpy(num, "1.");
  for (int i = 0; i < 61; i++)
    strcat(num, "0");
  strcat(num, "e-5");
  snprintf(pipe, sizeof pipe, "quant(eb=%s,mode=abs) | bitpack", num);
  cr_assert_str_eq(canonical(pipe, FZ_F32), "quant(eb=1.0000000000000001e-05,mode=abs) | bitpack");
  /* Longer than any number needs: refused, quoted. */
  strcpy(num, "1.");
  for (int i = 0; i < 200; i++)
    strcat(num, "0");
  strcat(num, "e-5");
  snprintf(pipe, sizeof pipe, "quant(eb=%s,mode=abs) | bitpack", num);
  char why[1024];
  cr_assert_eq(plan_job(pipe, 0, FZ_EB_REL, why, sizeof why), FZ_EPIPELINE, "%s", why);
  cr_assert(strstr(why, "1.0000000000") != NULL && strstr(why, "205 characters") != NULL,
            "%s", why);
  /* So is a number that overflows or underflows. */
  cr_assert_eq(plan_job("quant(eb=1e999,mode=abs) | bitpack", 0, FZ_EB_REL, why, sizeof why),
               FZ_EBOUND);
  cr_assert(strstr(why, "'1e999'") != NULL, "%s", why);
  cr_assert_eq(plan_job("quant(eb=1e-999,mode=abs) | bitpack", 0, FZ_EB_REL, why, sizeof why),
               FZ_EBOUND);
  cr_assert(strstr(why, "'1e-999'") != NULL, "%s", why);
  cr_assert_eq(plan_job("quant(eb=1e-3,fill=1e999) | bitpack", 0, FZ_EB_REL, why, sizeof why),
               FZ_EPIPELINE);
  cr_assert(strstr(why, "'1e999'") != NULL, "%s", why);
  /* A long key is not cut into a known one either. */
  cr_assert_eq(plan_job("quant(ebbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb=1) | bitpack", 1e-3,
                        FZ_EB_REL, why, sizeof why), FZ_EPIPELINE);
  cr_assert(strstr(why, "unknown parameter 'ebbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb") != NULL, "%s", why);
}

/* Bounds whose bins would overflow are refused before work with the value
 * and the accepted range, never turned into an archive the decoder refuses. */
Test(chain, bounds_out_of_range_are_refused_with_the_range) {
  char why[512];
  cr_assert_eq(plan_job("quant(eb=1e308,mode=abs) | bitpack", 0, FZ_EB_REL, why, sizeof why),
               FZ_EBOUND);
  cr_assert(strstr(why, "1e+308") && strstr(why, "8.988465674311579e+307"), "%s", why);
  cr_assert_eq(plan_job("balanced", 1e300 * 1e8, FZ_EB_ABS, why, sizeof why), FZ_EBOUND);
  cr_assert(strstr(why, "1e+308") && strstr(why, "0 < eb <="), "%s", why);
  /* 1e300 is within the range: accepted (it was refused as "needs a
   * positive error bound"). */
  cr_assert_eq(plan_job("balanced", 1e300, FZ_EB_ABS, why, sizeof why), 0, "%s", why);
  cr_assert_eq(plan_job("balanced", 8.9884656743115785e+307, FZ_EB_ABS, why, sizeof why), 0,
               "%s", why);
  cr_assert_eq(plan_job("fast", 1, FZ_EB_PWREL, why, sizeof why), FZ_EBOUND);
  cr_assert(strstr(why, "pwrel bound 1 ") && strstr(why, "below 1"), "%s", why);
  cr_assert_eq(plan_job("fast", -1, FZ_EB_ABS, why, sizeof why), FZ_EBOUND);
  cr_assert(strstr(why, "-1"), "%s", why);
  cr_assert_eq(plan_job("fast", 0, FZ_EB_ABS, why, sizeof why), FZ_EBOUND);
  cr_assert(strstr(why, "needs an error bound"), "%s", why);
}

/* One bound per job: a chain without one takes the job's, a job without one
 * (eb 0) takes the chain's, and two that differ are refused, both quoted. */
Test(chain, job_and_chain_bounds_must_agree) {
  char why[512];
  cr_assert_eq(plan_job("quant(eb=1e-3,mode=rel) | diff | bitshuffle | rze", 1e-2, FZ_EB_ABS,
                        why, sizeof why), FZ_EPIPELINE);
  cr_assert(strstr(why, "eb=0.01 mode=abs") && strstr(why, "quant(eb=0.001,mode=rel)"), "%s",
            why);
  cr_assert_eq(plan_job("quant(eb=1e-2,mode=pwrel) | bitpack", 1e-4, FZ_EB_ABS, why, sizeof why),
               FZ_EPIPELINE);
  cr_assert(strstr(why, "0.0001") && strstr(why, "eb=0.01,mode=pwrel"), "%s", why);
  /* Only the mode differs. */
  cr_assert_eq(plan_job("quant(mode=rel) | bitpack", 1e-3, FZ_EB_ABS, why, sizeof why),
               FZ_EPIPELINE);
  cr_assert(strstr(why, "mode=abs") && strstr(why, "quant(mode=rel)"), "%s", why);
  cr_assert_eq(plan_job("quant(eb=1e-3) | bitpack", 1e-2, FZ_EB_REL, why, sizeof why),
               FZ_EPIPELINE);
  /* The same bound twice, or once. */
  cr_assert_eq(plan_job("quant(eb=1e-3,mode=abs) | bitpack", 1e-3, FZ_EB_ABS, why, sizeof why), 0,
               "%s", why);
  cr_assert_eq(plan_job("quant(eb=1e-3,mode=pwrel) | bitpack", 0, FZ_EB_ABS, why, sizeof why), 0,
               "%s", why);
  cr_assert_eq(plan_job("quant(mode=pwrel) | bitpack", 1e-3, FZ_EB_PWREL, why, sizeof why), 0,
               "%s", why);
  cr_assert_eq(plan_job("quant(eb=1e-3) | bitpack", 1e-3, FZ_EB_PWREL, why, sizeof why), 0,
               "%s", why);
  /* A chain bound and a job without one: the chain's eb with the job's mode
   * where the chain names none. */
  fz_params p;
  fzt_params_1d(&p, FZ_F32, 10, "quant(eb=0.5) | bitpack");
  p.eb_mode = FZ_EB_ABS;
  fz_plan *pl;
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq(fz_plan_chain(pl), "quant(eb=0.5,mode=abs) | bitpack");
  fz_plan_destroy(pl);
}

/* A quantizing chain without a coder would store every chunk raw. */
Test(chain, quantizing_chains_need_a_coder) {
  static const char *const refused[] = {"quant(eb=1e-3)", "quant | diff", "quant | bitshuffle",
                                        "quant | diff(map=negabinary) | bitshuffle",
                                        "quant | diff | diff"};
  char why[512];
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
    cr_expect_eq(plan_job(refused[i], strstr(refused[i], "eb") ? 0 : 1e-3, FZ_EB_REL, why,
                          sizeof why), FZ_EPIPELINE, "'%s': %s", refused[i], why);
    cr_expect(strstr(why, "rze or bitpack") && strstr(why, "stored raw"), "'%s': %s", refused[i],
              why);
  }
  /* Every preset and every coder-ending chain stays accepted. */
  static const char *const accepted[] = {
      "fast", "balanced", "quant | rze(levels=1)", "quant | bitshuffle | rze",
      "quant | diff | diff | bitpack", "quant | diff(map=negabinary) | bitshuffle | rze(levels=6)"};
  for (size_t i = 0; i < sizeof accepted / sizeof *accepted; i++)
    cr_expect_eq(plan_job(accepted[i], 1e-3, FZ_EB_REL, why, sizeof why), 0, "'%s': %s",
                 accepted[i], why);
  /* Lossless chains quantize nothing; they are not judged. */
  fz_params p;
  fzt_params_1d(&p, FZ_U8, 100, "diff");
  fz_plan *pl;
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), 0, "%s", why);
  fz_plan_destroy(pl);
}

/* A name that is neither a preset nor a stage says so and lists both. */
Test(chain, unknown_names_list_presets_and_stages) {
  char why[512];
  cr_assert_eq(plan_job("turbo", 1e-3, FZ_EB_REL, why, sizeof why), FZ_EPIPELINE);
  cr_assert(strstr(why, "unknown preset or stage 'turbo'"), "%s", why);
  cr_assert(strstr(why, "presets: fast, balanced, ratio, lossless, lossless-ratio; stages: "
                        "quant, diff, bitshuffle, rze, bitpack, lorenzo, huffman, interp, "
                        "byteplanes)"), "%s", why);
  cr_assert_eq(plan_job("quant | turbo", 1e-3, FZ_EB_REL, why, sizeof why), FZ_EPIPELINE);
  cr_assert(strstr(why, "unknown stage 'turbo'"), "%s", why);
  cr_assert_eq(plan_job("balanced | rze", 1e-3, FZ_EB_REL, why, sizeof why), FZ_EPIPELINE);
  cr_assert(strstr(why, "preset 'balanced' stands alone") &&
            strstr(why, "'quant | diff | bitshuffle | rze'"), "%s", why);
}

/* The fill value: in the chain or the job, spelled in the canonical text,
 * refused when it names no value of the type or disagrees. */
Test(chain, fill_values) {
  cr_assert_str_eq(canonical("quant(eb=1e-3,mode=rel,fill=-1e10) | bitpack", FZ_F32),
                   "quant(eb=0.001,mode=rel,fill=-10000000000) | bitpack");
  cr_assert_str_eq(canonical("quant(fill=9.96921e36) | bitpack", FZ_F64),
                   "quant(eb=0.001,mode=rel,fill=9.9692099999999994e+36) | bitpack");
  fz_params p;
  fzt_params_1d(&p, FZ_F32, 10, "fast");
  p.eb = 1e-3;
  p.has_fill = 1;
  p.fill_value = -1e10;
  fz_plan *pl;
  char why[512];
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq(fz_plan_chain(pl), "quant(eb=0.001,mode=rel,fill=-10000000000) | bitpack");
  fz_plan_destroy(pl);
  /* The same fill in both: fine; two different ones: refused. */
  p.pipeline = "quant(fill=-1e10) | bitpack";
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), 0, "%s", why);
  fz_plan_destroy(pl);
  p.pipeline = "quant(fill=-9999) | bitpack";
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_EPIPELINE);
  cr_assert(strstr(why, "-1e+10") && strstr(why, "fill=-9999"), "%s", why);
  /* Not a float: overflows, or underflows to 0. */
  p.pipeline = "fast";
  p.fill_value = 1e39;
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_EBOUND);
  cr_assert(strstr(why, "1e+39") && strstr(why, "f32"), "%s", why);
  p.fill_value = 0x1.ffffffp+127; /* rounds to infinity as a float */
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_EBOUND);
  p.fill_value = 0x1.fffffefffffffp+127; /* rounds to FLT_MAX */
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), 0, "%s", why);
  fz_plan_destroy(pl);
  p.fill_value = 1e-50;
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_EBOUND);
  p.dtype = FZ_F64;
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), 0, "%s", why);
  fz_plan_destroy(pl);
  p.fill_value = NAN;
  cr_assert_eq(fz_plan_create(&p, &pl, why, sizeof why), FZ_EBOUND);
  cr_assert_eq(plan_job("quant(eb=1e-3,fill=nan) | bitpack", 0, FZ_EB_REL, why, sizeof why),
               FZ_EPIPELINE);
  cr_assert(strstr(why, "'nan'"), "%s", why);
  cr_assert_eq(plan_job("diff(fill=1)", 0, FZ_EB_REL, why, sizeof why), FZ_EPIPELINE);
  cr_assert(strstr(why, "unknown parameter 'fill'"), "%s", why);
}
