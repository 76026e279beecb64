/*
 * test_fzctl.c - the fzctl program against a real fzd: submit of several
 * files with --json checked field by field, decompression back to the
 * originals within the bound, .npy in and out, stdin to stdout through real
 * pipes, TCP, the read-only commands, and the exit codes scripts rely on
 * (1 for usage errors, 2 when no daemon listens); outputs that would
 * destroy an input, failed jobs that must leave existing files alone, and
 * batches that go on past a bad file.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fz.h"
#include "testutil.h"

#ifndef FZCTL_PATH
#error "FZCTL_PATH must name the fzctl binary"
#endif

static char dir[128];

static void make_dir(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/fzctl-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void) {
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
}

/* Runs "fzctl ARGS" in the test directory. */
static int fzctl(const char *args, char **out, char **err) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s", dir, FZCTL_PATH, args);
  return tu_run(cmd, out, err);
}

static const char *json_at(const char *line, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(line, pat);
  cr_assert_not_null(p, "no \"%s\" in %s", key, line);
  return p + strlen(pat);
}

static double json_num(const char *line, const char *key) {
  const char *p = json_at(line, key);
  char *end;
  double v = strtod(p, &end);
  cr_assert_neq(end, p, "\"%s\" is not a number in %s", key, line);
  return v;
}

static void json_str(const char *line, const char *key, char *buf, size_t cap) {
  const char *p = json_at(line, key);
  cr_assert_eq(*p, '"', "\"%s\" is not a string in %s", key, line);
  const char *e = strchr(p + 1, '"');
  cr_assert_not_null(e);
  snprintf(buf, cap, "%.*s", (int)(e - p - 1), p + 1);
}

static char *path_in_dir(const char *name) {
  static char buf[4][256];
  static int k;
  char *p = buf[k++ % 4];
  snprintf(p, 256, "%s/%s", dir, name);
  return p;
}

static size_t count_lines(const char *s) {
  size_t n = 0;
  for (; *s; s++)
    n += *s == '\n';
  return n;
}

Test(fzctl, submit_many_files_json_and_back) {
  make_dir();
  fzd_harness *h = tu_start(NULL);
  enum { NFILES = 5 };
  size_t rows = 120, cols = 241, n = rows * cols;
  float *fields[NFILES];
  for (int i = 0; i < NFILES; i++) {
    char name[32];
    snprintf(name, sizeof name, "field%d.f32", i);
    fields[i] = tu_field_f32(rows, cols, 0.4f * (float)i);
    tu_write_file(path_in_dir(name), fields[i], n * sizeof(float));
  }
  char args[1024], *out, *err;
  snprintf(args, sizeof args,
           "-S '%s' submit -j 3 --dtype f32 --shape 120x241 --eb 1e-3 --mode rel --verify "
           "--json field0.f32 field1.f32 field2.f32 field3.f32 field4.f32",
           fzd_harness_socket_path(h));
  int rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 0, "fzctl exited %d: %s", rc, err);
  cr_assert_eq(count_lines(out), NFILES, "one JSON object per file:\n%s", out);
  bool seen[NFILES] = {false};
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
    char file[64], output[64];
    json_str(line, "file", file, sizeof file);
    json_str(line, "output", output, sizeof output);
    int i = file[5] - '0';
    cr_assert(i >= 0 && i < NFILES && !seen[i], "unexpected file %s", file);
    seen[i] = true;
    char want[80];
    snprintf(want, sizeof want, "%s.fz", file);
    cr_assert_str_eq(output, want, "default naming x.f32 -> x.f32.fz");
    double bytes_in = json_num(line, "bytes_in"), bytes_out = json_num(line, "bytes_out");
    cr_assert_eq(bytes_in, (double)(n * sizeof(float)));
    cr_assert_gt(json_num(line, "ratio"), 1.0);
    double bound = 1e-3 * tu_range_f32(fields[i], n);
    cr_assert_leq(json_num(line, "max_error"), bound, "bound %.17g exceeded: %s", bound, line);
    cr_assert_geq(json_num(line, "time_ms"), 0.0);
    struct stat st;
    cr_assert_eq(stat(path_in_dir(output), &st), 0);
    cr_assert_eq((double)st.st_size, bytes_out, "the archive file holds bytes_out bytes");
  }
  free(out);
  free(err);
  for (int i = 0; i < NFILES; i++) {
    char name[32];
    snprintf(name, sizeof name, "field%d.f32", i);
    cr_assert_eq(unlink(path_in_dir(name)), 0);
  }

  snprintf(args, sizeof args,
           "-S 'unix:%s' submit -d --json field0.f32.fz field1.f32.fz field2.f32.fz "
           "field3.f32.fz field4.f32.fz",
           fzd_harness_socket_path(h));
  rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 0, "fzctl -d exited %d: %s", rc, err);
  cr_assert_eq(count_lines(out), NFILES, "%s", out);
  for (int i = 0; i < NFILES; i++) {
    char name[32];
    snprintf(name, sizeof name, "field%d.f32", i);
    size_t len;
    float *back = tu_read_file(path_in_dir(name), &len);
    cr_assert_eq(len, n * sizeof(float));
    fz_compare_result cmp;
    cr_assert_eq(fz_compare(FZ_F32, fields[i], back, n, &cmp), 0);
    cr_assert_leq(cmp.max_abs_error, 1e-3 * tu_range_f32(fields[i], n));
    free(back);
    free(fields[i]);
  }
  free(out);
  free(err);

  /* Outputs are not overwritten without -f, and that is a usage error. */
  snprintf(args, sizeof args, "-S '%s' submit -d field0.f32.fz", fzd_harness_socket_path(h));
  rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 2);
  cr_assert(strstr(err, "'field0.f32' exists (use -f to overwrite it, or -o") != NULL, "%s",
            err);
  /* The error is the whole report: no "-> (null): 0 -> 0 bytes" line. */
  cr_assert_str_empty(out, "a refused file printed a result line: %s", out);
  free(out);
  free(err);
  tu_stop(h);
  remove_dir();
}

/* A version 1.0 header as numpy writes it: padded so the data is aligned. */
static void write_npy(const char *path, const char *descr, const char *order,
                      size_t rows, size_t cols, const void *data, size_t bytes) {
  char dict[118];
  int len = snprintf(dict, sizeof dict,
                     "{'descr': '%s', 'fortran_order': %s, 'shape': (%zu, %zu), }", descr,
                     order, rows, cols);
  memset(dict + len, ' ', sizeof dict - (size_t)len - 1);
  dict[sizeof dict - 1] = '\n';
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, sizeof dict, 0};
  fwrite(pre, 1, sizeof pre, f);
  fwrite(dict, 1, sizeof dict, f);
  fwrite(data, 1, bytes, f);
  fclose(f);
}

Test(fzctl, npy_in_and_out) {
  make_dir();
  fzd_harness *h = tu_start(NULL);
  size_t rows = 90, cols = 130, n = rows * cols;
  double *v = tu_field_f64(rows, cols, 0.7);
  write_npy(path_in_dir("x.npy"), "<f8", "False", rows, cols, v, n * sizeof(double));
  char args[1024], *out, *err;
  snprintf(args, sizeof args, "-S '%s' submit -p balanced --eb 1e-5 --mode abs --json x.npy",
           fzd_harness_socket_path(h));
  int rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert_eq(json_num(out, "bytes_in"), (double)(n * sizeof(double)),
               "only the array, not the header, is compressed");
  free(out);
  free(err);
  snprintf(args, sizeof args, "-S '%s' submit -d -o y.npy x.npy.fz", fzd_harness_socket_path(h));
  rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  free(out);
  free(err);
  size_t len;
  unsigned char *y = tu_read_file(path_in_dir("y.npy"), &len);
  cr_assert_eq(memcmp(y, "\x93NUMPY", 6), 0);
  size_t hlen = (size_t)y[8] | (size_t)y[9] << 8;
  cr_assert_eq(len, 10 + hlen + n * sizeof(double));
  cr_assert((10 + hlen) % 64 == 0, "numpy aligns the data to 64 bytes");
  char *hdr = strndup((char *)y + 10, hlen);
  cr_assert(strstr(hdr, "'descr': '<f8'") != NULL, "%s", hdr);
  cr_assert(strstr(hdr, "'shape': (90, 130,)") != NULL, "%s", hdr);
  cr_assert(strstr(hdr, "'fortran_order': False") != NULL, "%s", hdr);
  fz_compare_result cmp;
  cr_assert_eq(fz_compare(FZ_F64, v, y + 10 + hlen, n, &cmp), 0);
  cr_assert_leq(cmp.max_abs_error, 1e-5);
  free(hdr);
  free(y);

  /* Fortran order is refused, quoting why. */
  float four[4] = {1, 2, 3, 4};
  write_npy(path_in_dir("f.npy"), "<f4", "True", 2, 2, four, sizeof four);
  snprintf(args, sizeof args, "-S '%s' submit --eb 1e-3 f.npy", fzd_harness_socket_path(h));
  rc = fzctl(args, NULL, &err);
  cr_assert_eq(rc, 2);
  cr_assert(strstr(err, "fortran_order") != NULL, "%s", err);
  free(err);
  free(v);
  tu_stop(h);
  remove_dir();
}

Test(fzctl, stdin_to_stdout_through_pipes_and_tcp) {
  make_dir();
  fzd_harness *h = tu_start("\"tcp_enabled\": true, \"tcp_port\": 0");
  size_t rows = 100, cols = 333, n = rows * cols;
  float *v = tu_field_f32(rows, cols, 0.9f);
  tu_write_file(path_in_dir("in.f32"), v, n * sizeof(float));
  char cmd[2048], tcp[64], *err;
  for (int pass = 0; pass < 2; pass++) {
    const char *addr = pass == 0 ? fzd_harness_socket_path(h) : tu_tcp_addr(h, tcp, sizeof tcp);
    /* cat | fzctl - -o - | fzctl -d - | cat: stdin and stdout are pipes. */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && rm -f out.f32 && cat in.f32 | '%s' -S '%s' submit -q --dtype f32 "
             "--shape %zux%zu --eb 1e-3 - | '%s' -S '%s' submit -q -d - | cat > out.f32",
             dir, FZCTL_PATH, addr, rows, cols, FZCTL_PATH, addr);
    int rc = tu_run(cmd, NULL, &err);
    cr_assert_eq(rc, 0, "pass %d: %s", pass, err);
    free(err);
    size_t len;
    float *back = tu_read_file(path_in_dir("out.f32"), &len);
    cr_assert_eq(len, n * sizeof(float), "pass %d", pass);
    fz_compare_result cmp;
    cr_assert_eq(fz_compare(FZ_F32, v, back, n, &cmp), 0);
    cr_assert_leq(cmp.max_abs_error, 1e-3 * tu_range_f32(v, n));
    free(back);
  }
  /* Files over TCP travel inline; --json says the same as over Unix. */
  char args[512], *out;
  snprintf(args, sizeof args, "-S '%s' submit --dtype f32 --eb 1e-2 --verify --json in.f32",
           tcp);
  int rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert_eq(json_num(out, "bytes_in"), (double)(n * sizeof(float)), "1-D by default");
  cr_assert_leq(json_num(out, "max_error"), 1e-2 * tu_range_f32(v, n));
  free(out);
  free(err);
  free(v);
  tu_stop(h);
  remove_dir();
}

Test(fzctl, read_only_commands) {
  make_dir();
  fzd_harness *h = tu_start(NULL);
  char args[512], *out, *err;
  snprintf(args, sizeof args, "-S '%s'", fzd_harness_socket_path(h));
  int rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 0, "bare fzctl runs status: %s", err);
  cr_assert(strstr(out, "backend      cpu") != NULL, "%s", out);
  free(out);
  free(err);
  snprintf(args, sizeof args, "-S '%s' status --json", fzd_harness_socket_path(h));
  rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert_eq(json_num(out, "workers"), 2.0);
  cr_assert_eq(json_num(out, "pid"), (double)fzd_harness_pid(h));
  free(out);
  free(err);
  snprintf(args, sizeof args, "-S '%s' ping -c 3", fzd_harness_socket_path(h));
  rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert(strstr(out, "3 round trips: min") != NULL, "%s", out);
  free(out);
  free(err);
  snprintf(args, sizeof args, "-S '%s' presets", fzd_harness_socket_path(h));
  rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert(strstr(out, "balanced") && strstr(out, "fast") && strstr(out, "lossless"), "%s", out);
  free(out);
  free(err);
  snprintf(args, sizeof args, "-S '%s' stats --json", fzd_harness_socket_path(h));
  rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert_geq(json_num(out, "jobs_done"), 0.0);
  json_at(out, "compress");
  free(out);
  free(err);
  tu_stop(h);
  remove_dir();
}

/* Usage errors exit 1, files that fail exit 2, and both quote the bad
 * value. */
static void failure_case(const char *args, int status, const char *quoted) {
  char *err;
  int rc = fzctl(args, NULL, &err);
  cr_assert_eq(rc, status, "'fzctl %s' exited %d, not %d: %s", args, rc, status, err);
  cr_assert(strstr(err, quoted) != NULL, "'fzctl %s' does not quote %s: %s", args, quoted, err);
  free(err);
}

static void usage_case(const char *args, const char *quoted) { failure_case(args, 1, quoted); }
static void file_case(const char *args, const char *quoted) { failure_case(args, 2, quoted); }

Test(fzctl, exit_codes) {
  make_dir();
  float v[64] = {0};
  tu_write_file(path_in_dir("a.f32"), v, sizeof v);
  tu_write_file(path_in_dir("odd.bin"), v, 10);
  usage_case("bogus", "'bogus'");
  usage_case("--frobnicate", "'--frobnicate'");
  usage_case("submit --eb abc --dtype f32 a.f32", "'abc'");
  usage_case("submit --eb 1e-3 --dtype f33 a.f32", "'f33'");
  usage_case("submit --eb 1e-3 --dtype f32 --shape 4x0 a.f32", "'4x0'");
  usage_case("submit --eb 1e-3 --dtype f32 --mode relative a.f32", "'relative'");
  usage_case("submit --eb 1e-3 --dtype f32 -j 0 a.f32", "'0'");
  file_case("submit --eb 1e-3 --dtype f32 --shape 3x3 a.f32", "'a.f32'");
  file_case("submit --eb 1e-3 --dtype f32 missing.f32", "'missing.f32'");
  file_case("submit --eb 1e-3 --dtype f32 odd.bin", "'odd.bin'");
  usage_case("submit --dtype f32 a.f32", "'balanced'");
  file_case("submit -d a.f32", "'a.f32'");
  usage_case("submit -o x a.f32 a.f32", "'x'");
  usage_case("ping -c many", "'many'");
  usage_case("help nosuch", "'nosuch'");
  char *out;
  cr_assert_eq(fzctl("help", &out, NULL), 0);
  cr_assert(strstr(out, "submit") && strstr(out, "presets"), "%s", out);
  free(out);
  cr_assert_eq(fzctl("help submit", &out, NULL), 0);
  cr_assert(strstr(out, "--verify"), "%s", out);
  free(out);

  /* No daemon listens: a transport error, exit 2, and nothing written. */
  char *err;
  int rc = fzctl("-S unix:./nobody.sock status", NULL, &err);
  cr_assert_eq(rc, 2, "%s", err);
  cr_assert(strstr(err, "nobody.sock") != NULL, "%s", err);
  /* The advice names every way of starting fzd and where each listens. */
  cr_assert(strstr(err, "'systemctl start fzd'") && strstr(err, "/run/fzd/fzd.sock") &&
                strstr(err, "$XDG_RUNTIME_DIR/fzd/fzd.sock") && strstr(err, "--socket PATH"),
            "%s", err);
  free(err);
  rc = fzctl("-S ./nobody.sock submit --dtype f32 --eb 1e-3 a.f32", NULL, &err);
  cr_assert_eq(rc, 2, "%s", err);
  free(err);
  struct stat st;
  cr_assert_neq(stat(path_in_dir("a.f32.fz"), &st), 0, "no output is left behind");
  rc = fzctl("-S tcp:127.0.0.1:1 ping", NULL, &err);
  cr_assert_eq(rc, 2, "%s", err);
  free(err);
  remove_dir();
}

Test(fzctl, server_refusal_exits_2) {
  make_dir();
  fzd_harness *h = tu_start(NULL);
  float v[1024];
  for (int i = 0; i < 1024; i++)
    v[i] = (float)i;
  tu_write_file(path_in_dir("a.f32"), v, sizeof v);
  tu_write_file(path_in_dir("junk.fz"), v, sizeof v);
  char args[512], *out, *err;
  snprintf(args, sizeof args, "-S '%s' submit -d --json junk.fz", fzd_harness_socket_path(h));
  int rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 2, "%s", err);
  cr_assert(strstr(out, "\"error\":{") != NULL, "%s", out);
  cr_assert(strstr(err, "'junk.fz'") != NULL, "%s", err);
  struct stat st;
  cr_assert_neq(stat(path_in_dir("junk"), &st), 0, "a failed job leaves no output");
  free(out);
  free(err);
  tu_stop(h);
  remove_dir();
}

Test(fzctl, busy_server_is_retried) {
  make_dir();
  /* One worker and a queue of one: with 8 jobs in flight most are refused
   * busy at first, and fzctl must send them again until all are done. */
  fzd_harness *h = tu_start("\"workers\": 1, \"queue_capacity\": 1");
  size_t rows = 1024, cols = 1024, n = rows * cols; /* jobs long enough to queue up */
  float *v = tu_field_f32(rows, cols, 0.2f);
  char files[512] = "";
  for (int i = 0; i < 8; i++) {
    char name[32];
    snprintf(name, sizeof name, "b%d.f32", i);
    tu_write_file(path_in_dir(name), v, n * sizeof(float));
    strcat(files, name);
    strcat(files, " ");
  }
  char args[1024], *out, *err;
  snprintf(args, sizeof args, "-S '%s' submit -j 8 --json --dtype f32 --eb 1e-3 %s",
           fzd_harness_socket_path(h), files);
  int rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert_eq(count_lines(out), 8, "%s", out);
  cr_assert_null(strstr(out, "\"error\":{"), "%s", out);
  free(out);
  free(err);
  snprintf(args, sizeof args, "-S '%s' stats --json", fzd_harness_socket_path(h));
  rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert_eq(json_num(out, "jobs_done"), 8.0, "%s", out);
  cr_assert_gt(json_num(out, "busy_rejections"), 0.0, "the queue never filled: %s", out);
  free(out);
  free(err);
  free(v);
  tu_stop(h);
  remove_dir();
}

static bool same_bytes(const char *path, const void *want, size_t len) {
  size_t got_len;
  void *got = tu_read_file(path, &got_len);
  bool same = got_len == len && memcmp(got, want, len) == 0;
  free(got);
  return same;
}

/* Whether a temporary output of fzctl was left in the test directory. */
static bool temp_left(void) {
  char cmd[300], *out;
  snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -c '^\\.fzctl-' || true", dir);
  cr_assert_eq(tu_run(cmd, &out, NULL), 0);
  bool left = atoi(out) != 0;
  free(out);
  return left;
}

Test(fzctl, output_that_is_the_input_is_refused) {
  make_dir();
  fzd_harness *h = tu_start(NULL);
  size_t rows = 60, cols = 70, n = rows * cols;
  float *v = tu_field_f32(rows, cols, 0.5f);
  tu_write_file(path_in_dir("precious.f32"), v, n * sizeof(float));
  cr_assert_eq(symlink("precious.f32", path_in_dir("link.f32")), 0);
  const char *sock = fzd_harness_socket_path(h);
  char args[1024], *err;
  /* With and without -f, by name and through a symlink: the input is never
   * touched and the refusal names both. */
  const char *cases[] = {"-f -o precious.f32", "-o precious.f32", "-f -o link.f32",
                         "-f --inline -o link.f32"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(args, sizeof args, "-S '%s' submit --dtype f32 --eb 1e-3 %s precious.f32", sock,
             cases[i]);
    int rc = fzctl(args, NULL, &err);
    cr_assert_eq(rc, 2, "%s: exited %d: %s", cases[i], rc, err);
    cr_assert(strstr(err, "is the input 'precious.f32'") != NULL, "%s: %s", cases[i], err);
    cr_assert(same_bytes(path_in_dir("precious.f32"), v, n * sizeof(float)),
              "%s destroyed the input", cases[i]);
    free(err);
  }
  /* The same for an archive decompressed onto itself. */
  snprintf(args, sizeof args, "-S '%s' submit -q --dtype f32 --eb 1e-3 precious.f32", sock);
  int rc = fzctl(args, NULL, &err);
  cr_assert_eq(rc, 0, "%s", err);
  free(err);
  size_t arc_len;
  void *arc = tu_read_file(path_in_dir("precious.f32.fz"), &arc_len);
  cr_assert_eq(symlink("precious.f32.fz", path_in_dir("link.fz")), 0);
  const char *dcases[] = {"-d -f -o precious.f32.fz", "-d -f -o link.fz"};
  for (size_t i = 0; i < 2; i++) {
    snprintf(args, sizeof args, "-S '%s' submit %s precious.f32.fz", sock, dcases[i]);
    rc = fzctl(args, NULL, &err);
    cr_assert_eq(rc, 2, "%s: exited %d: %s", dcases[i], rc, err);
    cr_assert(strstr(err, "is the input") != NULL, "%s: %s", dcases[i], err);
    cr_assert(same_bytes(path_in_dir("precious.f32.fz"), arc, arc_len), "%s destroyed the input",
              dcases[i]);
    free(err);
  }
  /* In a batch, an output that is another file's input is refused too. */
  tu_write_file(path_in_dir("b.f32"), v, n * sizeof(float));
  snprintf(args, sizeof args, "-S '%s' submit -f --dtype f32 --eb 1e-3 precious.f32 precious.f32.fz",
           sock);
  rc = fzctl(args, NULL, &err);
  cr_assert_eq(rc, 2, "%s", err);
  cr_assert(strstr(err, "'precious.f32.fz' is the input 'precious.f32.fz'") != NULL, "%s", err);
  free(err);
  cr_assert(!temp_left());
  free(arc);
  free(v);
  tu_stop(h);
  remove_dir();
}

Test(fzctl, failed_job_leaves_the_existing_output_alone) {
  make_dir();
  fzd_harness *h = tu_start(NULL);
  const char *sock = fzd_harness_socket_path(h);
  float junk[256];
  for (int i = 0; i < 256; i++)
    junk[i] = (float)i;
  tu_write_file(path_in_dir("junk.fz"), junk, sizeof junk);
  tu_write_file(path_in_dir("kept"), "keep me", 7);
  char args[1024], *err;
  for (int pass = 0; pass < 2; pass++) {
    snprintf(args, sizeof args, "-S '%s' submit -d -f %s -o kept junk.fz", sock,
             pass ? "--inline" : "");
    int rc = fzctl(args, NULL, &err);
    cr_assert_eq(rc, 2, "pass %d: %s", pass, err);
    cr_assert(strstr(err, "'junk.fz'") != NULL, "%s", err);
    free(err);
    cr_assert(same_bytes(path_in_dir("kept"), "keep me", 7),
              "pass %d: a failed job changed or removed the file at the output path", pass);
    cr_assert(!temp_left(), "pass %d: the temporary output was not removed", pass);
  }
  /* A job that succeeds replaces it, with the mode a new file gets, and
   * through a symlink replaces the file the link names. */
  size_t rows = 50, cols = 80, n = rows * cols;
  float *v = tu_field_f32(rows, cols, 0.1f);
  tu_write_file(path_in_dir("a.f32"), v, n * sizeof(float));
  cr_assert_eq(symlink("kept", path_in_dir("link")), 0);
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "cd '%s' && umask 0 && '%s' -S '%s' submit -q -f --dtype f32 --eb 1e-3 -o link a.f32",
           dir, FZCTL_PATH, sock);
  int rc = tu_run(cmd, NULL, &err);
  cr_assert_eq(rc, 0, "%s", err);
  free(err);
  struct stat st, lst;
  cr_assert_eq(lstat(path_in_dir("link"), &lst), 0);
  cr_assert(S_ISLNK(lst.st_mode), "the symlink stays a symlink");
  cr_assert_eq(stat(path_in_dir("kept"), &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0666, "mode %o, not what umask 0 gives a new file",
               st.st_mode & 0777);
  size_t len;
  unsigned char *arc = tu_read_file(path_in_dir("kept"), &len);
  cr_assert_eq(memcmp(arc, "FZ", 2) == 0 || len > 7, true);
  char *out;
  rc = fzctl("info --json kept", &out, &err);
  cr_assert_eq(rc, 0, "the replaced file is an archive: %s", err);
  cr_assert_eq(json_num(out, "raw_bytes"), (double)(n * sizeof(float)));
  free(out);
  free(err);
  free(arc);
  cr_assert(!temp_left());
  free(v);
  tu_stop(h);
  remove_dir();
}

/* Every line of out must parse as JSON; returns the number of lines. */
static size_t check_json_lines(const char *out) {
  char *copy = strdup(out);
  size_t lines = 0;
  for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n")) {
    cJSON *j = cJSON_Parse(line);
    cr_assert_not_null(j, "not valid JSON: %s", line);
    cJSON_Delete(j);
    lines++;
  }
  free(copy);
  return lines;
}

Test(fzctl, one_bad_file_does_not_stop_the_batch) {
  make_dir();
  fzd_harness *h = tu_start(NULL);
  const char *sock = fzd_harness_socket_path(h);
  size_t rows = 30, cols = 40, n = rows * cols;
  float *v = tu_field_f32(rows, cols, 0.2f);
  write_npy(path_in_dir("good1.npy"), "<f4", "False", rows, cols, v, n * sizeof(float));
  write_npy(path_in_dir("good2.npy"), "<f4", "False", rows, cols, v, n * sizeof(float));
  write_npy(path_in_dir("bad\xff\xfename.npy"), "<f4", "False", rows, cols, v,
            n * sizeof(float));
  tu_write_file(path_in_dir("junk.npy"), "this is not numpy at all", 24);
  char args[1024], *out, *err;
  snprintf(args, sizeof args,
           "-S '%s' submit --eb 1e-3 --json good1.npy junk.npy missing.npy "
           "\"$(printf 'bad\\377\\376name.npy')\" good2.npy", sock);
  int rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 2, "a batch with failed files exits 2, got %d: %s", rc, err);
  cr_assert_eq(check_json_lines(out), 5, "one JSON line per file:\n%s", out);
  cr_assert(strstr(out, "\"file\":\"bad\\ufffd\\ufffdname.npy\"") != NULL,
            "invalid UTF-8 becomes U+FFFD: %s", out);
  cr_assert(strstr(err, "'junk.npy': bad .npy header") != NULL, "%s", err);
  cr_assert_null(strstr(err, "--dtype"), "a junk .npy is not a missing --dtype: %s", err);
  cr_assert(strstr(err, "'missing.npy'") != NULL, "%s", err);
  struct stat st;
  cr_assert_eq(stat(path_in_dir("good1.npy.fz"), &st), 0, "the files before the bad ones ran");
  cr_assert_eq(stat(path_in_dir("good2.npy.fz"), &st), 0, "the files after the bad ones ran");
  cr_assert_eq(stat(path_in_dir("bad\xff\xfename.npy.fz"), &st), 0);
  free(out);
  free(err);
  /* A job that fails in the daemon makes it exit 2, after the others ran. */
  float junk[64] = {1};
  tu_write_file(path_in_dir("junk.fz"), junk, sizeof junk);
  cr_assert_eq(unlink(path_in_dir("good1.npy")), 0);
  cr_assert_eq(unlink(path_in_dir("good2.npy")), 0);
  snprintf(args, sizeof args, "-S '%s' submit -d --json junk.fz good1.npy.fz good2.npy.fz",
           sock);
  rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 2, "%s", err);
  cr_assert_eq(check_json_lines(out), 3, "%s", out);
  cr_assert(strstr(err, "'junk.fz'") != NULL, "%s", err);
  cr_assert_eq(stat(path_in_dir("good1.npy"), &st), 0);
  cr_assert_eq(stat(path_in_dir("good2.npy"), &st), 0);
  free(out);
  free(err);
  free(v);
  tu_stop(h);
  remove_dir();
}

Test(fzctl, bounds_presets_and_stages_are_judged_before_submitting) {
  make_dir();
  fzd_harness *h = tu_start(NULL);
  const char *sock = fzd_harness_socket_path(h);
  double d[512];
  /* Values of the bound's own scale, so that no derived step can overflow. */
  for (int i = 0; i < 512; i++)
    d[i] = (double)(i % 97) * 1e-320;
  tu_write_file(path_in_dir("a.f64"), d, sizeof d);
  char args[1024], *out, *err;
  /* A denormal is a positive bound. */
  snprintf(args, sizeof args,
           "-S '%s' submit --dtype f64 --eb 5e-324 --mode abs --verify --json a.f64", sock);
  int rc = fzctl(args, &out, &err);
  cr_assert_null(strstr(err, "invalid value '5e-324'"), "%s", err);
  cr_assert_eq(rc, 0, "exited %d: %s", rc, err);
  cr_assert_leq(json_num(out, "max_error"), 5e-324, "%s", out);
  free(out);
  free(err);
  cr_assert_eq(unlink(path_in_dir("a.f64.fz")), 0);
  /* Usage errors, exit 1, quoting the value. */
  const struct {
    const char *opts, *quoted;
  } cases[] = {
      {"--eb 0", "'0'"},
      {"--eb 0 -p fast", "'0'"},
      {"--eb 1e-400", "'1e-400'"},
      {"--eb 1e-3 -p turbo", "unknown preset or stage 'turbo'"},
      {"--eb 1e-3 -p 'quant | bogus'", "unknown stage 'bogus'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(args, sizeof args, "-S '%s' submit --dtype f64 %s a.f64", sock, cases[i].opts);
    rc = fzctl(args, NULL, &err);
    cr_assert_eq(rc, 1, "%s: exited %d: %s", cases[i].opts, rc, err);
    cr_assert(strstr(err, cases[i].quoted) != NULL, "%s: %s", cases[i].opts, err);
    free(err);
  }
  struct stat st;
  cr_assert_neq(stat(path_in_dir("a.f64.fz"), &st), 0, "nothing ran");
  tu_stop(h);
  remove_dir();
}

Test(fzctl, pwrel_reports_the_pointwise_error) {
  make_dir();
  fzd_harness *h = tu_start(NULL);
  size_t rows = 64, cols = 100, n = rows * cols;
  float *v = tu_field_f32(rows, cols, 0.3f);
  for (size_t i = 0; i < n; i++)
    v[i] += 1000.0f; /* the absolute error is then far above the bound */
  tu_write_file(path_in_dir("p.f32"), v, n * sizeof(float));
  char args[1024], *out, *err;
  snprintf(args, sizeof args,
           "-S '%s' submit --dtype f32 --eb 1e-5 --mode pwrel --verify --json p.f32",
           fzd_harness_socket_path(h));
  int rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  double rel = json_num(out, "max_rel_error");
  cr_assert_leq(rel, 1e-5, "%s", out);
  cr_assert_gt(json_num(out, "max_error"), 1e-5, "max_error stays the absolute one: %s", out);
  free(out);
  free(err);
  snprintf(args, sizeof args,
           "-S '%s' submit -f --dtype f32 --eb 1e-5 --mode pwrel --verify p.f32",
           fzd_harness_socket_path(h));
  rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  char want[128];
  snprintf(want, sizeof want, "max rel error %.3g (bound 1e-05 pointwise)", rel);
  cr_assert(strstr(out, want) != NULL, "want '%s' in %s", want, out);
  free(out);
  free(err);
  free(v);
  tu_stop(h);
  remove_dir();
}

Test(fzctl, stats_count_raw_bytes_for_decompression) {
  make_dir();
  fzd_harness *h = tu_start(NULL);
  const char *sock = fzd_harness_socket_path(h);
  size_t rows = 400, cols = 500, n = rows * cols;
  float *v = tu_field_f32(rows, cols, 0.0f);
  tu_write_file(path_in_dir("s.f32"), v, n * sizeof(float));
  char args[1024], *out, *err;
  snprintf(args, sizeof args, "-S '%s' submit -q --dtype f32 --eb 1e-2 s.f32", sock);
  cr_assert_eq(fzctl(args, NULL, NULL), 0);
  cr_assert_eq(unlink(path_in_dir("s.f32")), 0);
  snprintf(args, sizeof args, "-S '%s' submit -q -d s.f32.fz", sock);
  cr_assert_eq(fzctl(args, NULL, NULL), 0);
  snprintf(args, sizeof args, "-S '%s' stats --json", sock);
  cr_assert_eq(fzctl(args, &out, &err), 0, "%s", err);
  const char *dec = json_at(out, "decompress");
  double raw = json_num(dec, "bytes_out"), arc = json_num(dec, "bytes_in");
  double us = json_num(dec, "time_us");
  cr_assert_eq(raw, (double)(n * sizeof(float)));
  cr_assert_gt(raw, 4 * arc, "the ratio must tell the two apart");
  free(out);
  free(err);
  snprintf(args, sizeof args, "-S '%s' stats", sock);
  cr_assert_eq(fzctl(args, &out, &err), 0, "%s", err);
  char want[128];
  snprintf(want, sizeof want, "%.1f MB/s", us > 0 ? raw / us : 0.0);
  const char *line = strstr(out, "decompress");
  cr_assert_not_null(line, "%s", out);
  cr_assert(strstr(line, want) != NULL, "want '%s' (raw bytes per time) in %s", want, line);
  free(out);
  free(err);
  free(v);
  tu_stop(h);
  remove_dir();
}

Test(fzctl, global_options_after_the_command) {
  make_dir();
  fzd_harness *h = tu_start(NULL);
  const char *sock = fzd_harness_socket_path(h);
  float v[256] = {0};
  for (int i = 0; i < 256; i++)
    v[i] = (float)i * 0.5f;
  tu_write_file(path_in_dir("g.f32"), v, sizeof v);
  char args[1024], *out, *err;
  snprintf(args, sizeof args, "submit -S '%s' -q --dtype f32 --eb 1e-3 g.f32", sock);
  int rc = fzctl(args, NULL, &err);
  cr_assert_eq(rc, 0, "%s", err);
  free(err);
  snprintf(args, sizeof args, "status --json --socket='%s'", sock);
  rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert_eq(json_num(out, "pid"), (double)fzd_harness_pid(h));
  free(out);
  free(err);
  snprintf(args, sizeof args, "ping -c 1 --socket '%s'", sock);
  cr_assert_eq(fzctl(args, NULL, NULL), 0);
  tu_stop(h);

  /* Nothing listens: the message says how to start a daemon or where to
   * point fzctl. */
  rc = fzctl("status -S ./nobody.sock", NULL, &err);
  cr_assert_eq(rc, 2, "%s", err);
  cr_assert(strstr(err, "systemctl start fzd") != NULL, "%s", err);
  cr_assert(strstr(err, "FZD_SOCKET") != NULL, "%s", err);
  free(err);
  remove_dir();
}

Test(fzctl, info_prints_an_archive_header) {
  make_dir();
  fzd_harness *h = tu_start(NULL);
  size_t rows = 120, cols = 241, n = rows * cols;
  float *v = tu_field_f32(rows, cols, 0.4f);
  tu_write_file(path_in_dir("f.f32"), v, n * sizeof(float));
  char args[1024], *out, *err;
  snprintf(args, sizeof args,
           "-S '%s' submit -q --dtype f32 --shape 120x241 --eb 1e-3 --mode abs f.f32",
           fzd_harness_socket_path(h));
  cr_assert_eq(fzctl(args, NULL, NULL), 0);
  tu_stop(h); /* info needs no daemon */
  struct stat st;
  cr_assert_eq(stat(path_in_dir("f.f32.fz"), &st), 0);
  int rc = fzctl("info f.f32.fz", &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert(strstr(out, "dtype     f32\n") != NULL, "%s", out);
  cr_assert(strstr(out, "shape     120x241\n") != NULL, "%s", out);
  cr_assert(strstr(out, "chain     quant(eb=0.001,mode=abs)") != NULL, "%s", out);
  free(out);
  free(err);
  rc = fzctl("info --json f.f32.fz", &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert_eq(check_json_lines(out), 1);
  cr_assert_eq(json_num(out, "raw_bytes"), (double)(n * sizeof(float)));
  cr_assert_eq(json_num(out, "archive_bytes"), (double)st.st_size);
  cr_assert(strstr(out, "\"shape\":[120,241]") != NULL, "%s", out);
  free(out);
  free(err);
  tu_write_file(path_in_dir("junk.fz"), "not an archive", 14);
  rc = fzctl("info f.f32.fz junk.fz", &out, &err);
  cr_assert_eq(rc, 2, "%s", err);
  cr_assert(strstr(err, "'junk.fz'") && strstr(err, "EFORMAT"), "%s", err);
  cr_assert(strstr(out, "shape     120x241") != NULL, "the good file is still shown: %s", out);
  free(out);
  free(err);
  free(v);
  remove_dir();
}

/* --fill: land cells of -1e10 come back bit for bit (without the fill, REL
 * 1e-3 of a range of 1e10 moves them by up to 1e7); a bad value and --fill
 * with -d are usage errors. */
Test(fzctl, fill_value) {
  make_dir();
  fzd_harness *h = tu_start(NULL);
  size_t rows = 50, cols = 80, n = rows * cols;
  float *v = tu_field_f32(rows, cols, 0.7f);
  for (size_t i = 0; i < n; i += 3)
    v[i] = -1e10f;
  tu_write_file(path_in_dir("ocean.f32"), v, n * sizeof(float));
  char args[1024], *out, *err;
  snprintf(args, sizeof args,
           "-S '%s' submit --dtype f32 --shape 50x80 --eb 1e-3 --fill -1e10 --json ocean.f32",
           fzd_harness_socket_path(h));
  int rc = fzctl(args, &out, &err);
  cr_assert_eq(rc, 0, "fzctl exited %d: %s", rc, err);
  free(out);
  free(err);
  cr_assert_eq(unlink(path_in_dir("ocean.f32")), 0);
  snprintf(args, sizeof args, "-S '%s' submit -d ocean.f32.fz", fzd_harness_socket_path(h));
  rc = fzctl(args, NULL, &err);
  cr_assert_eq(rc, 0, "fzctl -d exited %d: %s", rc, err);
  free(err);
  size_t len;
  float *back = tu_read_file(path_in_dir("ocean.f32"), &len);
  cr_assert_eq(len, n * sizeof(float));
  for (size_t i = 0; i < n; i += 3)
    cr_assert(memcmp(&v[i], &back[i], 4) == 0, "fill at %zu came back as %g", i, back[i]);
  free(back);
  usage_case("submit --eb 1e-3 --dtype f32 --fill land a.f32", "'land'");
  usage_case("submit -d --fill -1 a.f32.fz", "--fill");
  free(v);
  tu_stop(h);
  remove_dir();
}

/* `fzctl warm`: one plan from the submit options, more from a file in the
 * daemon's "warm" format; the first time "made", then "cached"; a bad entry
 * of the file fails alone and makes the exit status 2; stats show the plans
 * and their bytes, and the first job of a warmed shape finds its plan. */
Test(fzctl, warm_plans) {
  make_dir();
  fzd_harness *h = tu_start(NULL);
  const char *sock = fzd_harness_socket_path(h);
  char args[1024], *out, *err;
  snprintf(args, sizeof args, "-S '%s' warm -t f32 -s 400x500 -e 1e-2 -p balanced", sock);
  cr_assert_eq(fzctl(args, &out, &err), 0, "%s", err);
  cr_assert(strncmp(out, "made   f32 400x500 in ", 22) == 0, "%s", out);
  cr_assert(strstr(out, "identical to the CPU engine: quant(eb=0.01,mode=rel)") != NULL, "%s",
            out);
  cr_assert_eq(count_lines(out), 1u);
  free(out);
  free(err);
  cr_assert_eq(fzctl(args, &out, &err), 0, "%s", err);
  cr_assert(strncmp(out, "cached f32 400x500 in ", 22) == 0, "%s", out);
  free(out);
  free(err);

  const char *plans = "[{\"dtype\": \"f64\", \"shape\": [1000], \"eb\": 1e-4, \"mode\": \"abs\", "
                      "\"pipeline\": \"fast\"},"
                      " {\"dtype\": \"f32\", \"shape\": [100]},"
                      " {\"dtype\": \"u16\", \"shape\": [30, 30], \"pipeline\": \"lossless\"}]";
  tu_write_file(path_in_dir("plans.json"), plans, strlen(plans));
  snprintf(args, sizeof args, "-S '%s' warm --file plans.json --json", sock);
  cr_assert_eq(fzctl(args, &out, &err), 2, "one plan has no bound: %s", err);
  cr_assert_eq(count_lines(out), 3u, "%s", out);
  const char *l1 = strchr(out, '\n') + 1, *l2 = strchr(l1, '\n') + 1;
  cr_assert(strstr(out, "\"cached\":false") < l1 && strstr(out, "\"identical\":true") < l1,
            "%s", out);
  json_at(l1, "error");
  cr_assert(strstr(l1, "plans[1]") != NULL && strstr(l1, "\"EBOUND\"") != NULL, "%s", l1);
  cr_assert(strstr(l2, "\"index\":2") != NULL && strstr(l2, "\"cached\":false") != NULL, "%s",
            l2);
  free(out);
  free(err);

  snprintf(args, sizeof args, "-S '%s' stats --json", sock);
  cr_assert_eq(fzctl(args, &out, &err), 0, "%s", err);
  const char *pl = json_at(out, "plans");
  cr_assert_eq(json_num(pl, "held"), 3.0, "%s", out);
  cr_assert_gt(json_num(pl, "bytes"), 0.0, "%s", out);
  cr_assert_eq(json_num(pl, "budget"), 2147483648.0, "%s", out);
  cr_assert(strstr(out, "\"jit\"") == NULL, "the CPU backend has no JIT: %s", out);
  double hits = json_num(pl, "hits");
  free(out);
  free(err);
  float *v = tu_field_f32(400, 500, 0.0f);
  tu_write_file(path_in_dir("w.f32"), v, 400 * 500 * sizeof(float));
  free(v);
  snprintf(args, sizeof args, "-S '%s' submit -q -t f32 -s 400x500 -e 1e-2 w.f32", sock);
  cr_assert_eq(fzctl(args, NULL, NULL), 0);
  snprintf(args, sizeof args, "-S '%s' stats --json", sock);
  cr_assert_eq(fzctl(args, &out, &err), 0, "%s", err);
  cr_assert_eq(json_num(json_at(out, "plans"), "hits"), hits + 1, "%s", out);
  free(out);
  free(err);

  usage_case("warm", "give a plan");
  usage_case("warm -t f32", "needs --dtype and --shape");
  usage_case("warm -t f16 -s 10", "invalid dtype 'f16'");
  tu_write_file(path_in_dir("bad.json"), "[{\"dtype\": \"f32\", \"shap\": [3]}]", 32);
  snprintf(args, sizeof args, "-S '%s' warm --file bad.json", sock);
  usage_case(args, "bad.json: entry 0: bad \"shap\"");
  tu_stop(h);
  remove_dir();
}
