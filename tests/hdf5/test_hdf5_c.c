/*
 * test_hdf5_c.c - the fzd HDF5 filter from C, as libh5z_fzd.so is loaded
 * through HDF5_PLUGIN_PATH (the daemon is off here; hdf5_filter.py drives
 * one): round trips of every element type within the bound, a chunk of
 * more dimensions than the engine takes, parameters refused when the
 * dataset is created with fzd's message on HDF5's error stack, and chunks
 * whose stored bytes are garbage, truncated or flipped, which must fail
 * the read with an error and never crash.  Chains spelled out in the
 * parameters (H5Z_FZD_CHAIN) round-trip within their bound, and those the
 * engine refuses are refused at creation with the engine's own message,
 * which the test asks the engine (fz_plan_create) for.
 */
#include <criterion/criterion.h>
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fz.h"
#include "h5z_fzd.h"

static char stack_text[4096];

static herr_t collect(unsigned n, const H5E_error2_t *e, void *data) {
  (void)n;
  (void)data;
  size_t len = strlen(stack_text);
  snprintf(stack_text + len, sizeof stack_text - len, "%s\n", e->desc ? e->desc : "");
  return 0;
}

/* The descriptions on the current error stack, joined. */
static const char *error_stack(void) {
  stack_text[0] = '\0';
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect, NULL);
  return stack_text;
}

static void setup(void) {
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  cr_assert(getenv("HDF5_PLUGIN_PATH"), "the test runs with HDF5_PLUGIN_PATH set");
}

static void teardown(void) { H5close(); }

TestSuite(hdf5_filter, .init = setup, .fini = teardown, .timeout = 120);

static hid_t mkfile(const char *name) {
  char path[256];
  snprintf(path, sizeof path, "test_hdf5_c_%s.h5", name);
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  cr_assert_geq(f, 0);
  return f;
}

static hid_t mkdcpl(int rank, const hsize_t *chunk, size_t ncd, const unsigned *cd) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  cr_assert_geq(H5Pset_chunk(dcpl, rank, chunk), 0);
  cr_assert_geq(H5Pset_filter(dcpl, H5Z_FILTER_FZD, H5Z_FLAG_MANDATORY, ncd, cd), 0);
  return dcpl;
}

static void user_cd(unsigned *cd, unsigned pipeline, unsigned mode, double eb) {
  memset(cd, 0, sizeof(unsigned) * H5Z_FZD_CD_USER_MAX);
  cd[H5Z_FZD_CD_PIPELINE] = pipeline;
  cd[H5Z_FZD_CD_MODE] = mode;
  h5z_fzd_put_double(cd + H5Z_FZD_CD_EB, eb);
}

Test(hdf5_filter, f64_abs_round_trip_and_completed_parameters) {
  enum { N0 = 33, N1 = 70 };
  static double x[N0][N1], y[N0][N1];
  for (int i = 0; i < N0; i++)
    for (int j = 0; j < N1; j++)
      x[i][j] = sin(i * 0.1) * exp(j * 0.01) * 1e3;
  unsigned cd[H5Z_FZD_CD_USER_MAX];
  user_cd(cd, H5Z_FZD_FAST, H5Z_FZD_ABS, 0.25);
  hsize_t dims[2] = {N0, N1}, chunk[2] = {16, 32};
  hid_t f = mkfile("f64"), s = H5Screate_simple(2, dims, NULL), p = mkdcpl(2, chunk, 4, cd);
  hid_t d = H5Dcreate2(f, "x", H5T_IEEE_F64LE, s, H5P_DEFAULT, p, H5P_DEFAULT);
  cr_assert_geq(d, 0, "%s", error_stack());
  cr_assert_geq(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, x), 0, "%s",
                error_stack());
  /* set_local appended the type and the chunk's shape. */
  hid_t p2 = H5Dget_create_plist(d);
  unsigned got[16], flags;
  size_t n = 16;
  cr_assert_geq(H5Pget_filter_by_id2(p2, H5Z_FILTER_FZD, &flags, &n, got, 0, NULL, NULL), 0);
  cr_assert_eq(n, H5Z_FZD_CD_DIMS + 2);
  cr_assert_eq(got[H5Z_FZD_CD_DTYPE], 10u); /* FZ_F64 */
  cr_assert_eq(got[H5Z_FZD_CD_NDIMS], 2u);
  cr_assert_eq(got[H5Z_FZD_CD_DIMS], 16u);
  cr_assert_eq(got[H5Z_FZD_CD_DIMS + 1], 32u);
  cr_assert_eq(h5z_fzd_get_double(got + H5Z_FZD_CD_EB), 0.25);
  H5Pclose(p2);
  H5Dclose(d);
  H5Fclose(f);

  f = H5Fopen("test_hdf5_c_f64.h5", H5F_ACC_RDONLY, H5P_DEFAULT);
  d = H5Dopen2(f, "x", H5P_DEFAULT);
  cr_assert_geq(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, y), 0, "%s",
                error_stack());
  double worst = 0;
  for (int i = 0; i < N0; i++)
    for (int j = 0; j < N1; j++)
      worst = fmax(worst, fabs(x[i][j] - y[i][j]));
  cr_assert_leq(worst, 0.25);
  cr_assert_gt(worst, 0.0, "a lossy bound of 0.25 on values up to 2e3 changes something");
  H5Dclose(d);
  H5Sclose(s);
  H5Pclose(p);
  H5Fclose(f);
}

/* The ratio preset by its id: its chunks are format version 7 archives
 * (interpolation over the chunk's shape) and read back within the bound. */
Test(hdf5_filter, ratio_preset_by_id) {
  enum { N0 = 96, N1 = 150 };
  static float x[N0][N1], y[N0][N1];
  for (int i = 0; i < N0; i++)
    for (int j = 0; j < N1; j++)
      x[i][j] = (float)(sin(i * 0.05) * cos(j * 0.03) * 50.0 + i * 0.2);
  unsigned cd[H5Z_FZD_CD_USER_MAX];
  user_cd(cd, H5Z_FZD_RATIO, H5Z_FZD_ABS, 0.01);
  hsize_t dims[2] = {N0, N1}, chunk[2] = {64, 128};
  hid_t f = mkfile("ratio"), s = H5Screate_simple(2, dims, NULL), p = mkdcpl(2, chunk, 4, cd);
  hid_t d = H5Dcreate2(f, "x", H5T_IEEE_F32LE, s, H5P_DEFAULT, p, H5P_DEFAULT);
  cr_assert_geq(d, 0, "%s", error_stack());
  cr_assert_geq(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x), 0, "%s",
                error_stack());
  cr_assert_geq(H5Dflush(d), 0);
  hsize_t off[2] = {0, 0}, size = 0;
  cr_assert_geq(H5Dget_chunk_storage_size(d, off, &size), 0);
  uint8_t *arc = malloc(size);
  uint32_t mask = 0;
  cr_assert_geq(H5Dread_chunk(d, H5P_DEFAULT, off, &mask, arc), 0);
  cr_assert_eq(arc[4], 7, "a ratio chunk is a version 7 archive, not version %u", arc[4]);
  free(arc);
  H5Dclose(d);
  H5Fclose(f);

  f = H5Fopen("test_hdf5_c_ratio.h5", H5F_ACC_RDONLY, H5P_DEFAULT);
  d = H5Dopen2(f, "x", H5P_DEFAULT);
  cr_assert_geq(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, y), 0, "%s",
                error_stack());
  double worst = 0;
  for (int i = 0; i < N0; i++)
    for (int j = 0; j < N1; j++)
      worst = fmax(worst, fabs((double)x[i][j] - (double)y[i][j]));
  cr_assert_leq(worst, 0.01);
  H5Dclose(d);
  H5Sclose(s);
  H5Pclose(p);
  H5Fclose(f);
}

/* Lossless for every integer type, with the default parameters (none),
 * in a 5-D chunk that set_local folds into the engine's four dimensions. */
Test(hdf5_filter, integers_lossless_5d_no_parameters) {
  const hid_t types[] = {H5T_STD_U8LE,  H5T_STD_I8LE,  H5T_STD_U16LE, H5T_STD_I16LE,
                         H5T_STD_U32LE, H5T_STD_I32LE, H5T_STD_U64LE, H5T_STD_I64LE};
  hsize_t dims[5] = {3, 4, 5, 6, 7}, chunk[5] = {2, 3, 4, 5, 6};
  size_t count = 3 * 4 * 5 * 6 * 7;
  uint8_t *x = malloc(count * 8), *y = malloc(count * 8);
  cr_assert(x && y);
  uint64_t r = 88172645463325252ull;
  for (size_t k = 0; k < count * 8; k++) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    x[k] = (uint8_t)(k % 8 < 2 ? r : 0); /* compressible, not trivial */
  }
  hid_t f = mkfile("ints"), s = H5Screate_simple(5, dims, NULL), p = mkdcpl(5, chunk, 0, NULL);
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    char name[8];
    snprintf(name, sizeof name, "t%zu", t);
    hid_t d = H5Dcreate2(f, name, types[t], s, H5P_DEFAULT, p, H5P_DEFAULT);
    cr_assert_geq(d, 0, "%s", error_stack());
    cr_assert_geq(H5Dwrite(d, types[t], H5S_ALL, H5S_ALL, H5P_DEFAULT, x), 0, "%s",
                  error_stack());
    H5Dclose(d);
  }
  H5Fclose(f);
  f = H5Fopen("test_hdf5_c_ints.h5", H5F_ACC_RDONLY, H5P_DEFAULT);
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    char name[8];
    snprintf(name, sizeof name, "t%zu", t);
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    hid_t p2 = H5Dget_create_plist(d);
    unsigned got[16], flags;
    size_t n = 16;
    cr_assert_geq(H5Pget_filter_by_id2(p2, H5Z_FILTER_FZD, &flags, &n, got, 0, NULL, NULL), 0);
    cr_assert_eq(got[H5Z_FZD_CD_PIPELINE], H5Z_FZD_LOSSLESS);
    cr_assert_eq(got[H5Z_FZD_CD_NDIMS], 4u);
    cr_assert_eq(got[H5Z_FZD_CD_DIMS], 6u); /* 2 x 3 */
    memset(y, 0xEE, count * 8);
    cr_assert_geq(H5Dread(d, types[t], H5S_ALL, H5S_ALL, H5P_DEFAULT, y), 0, "%s",
                  error_stack());
    cr_assert_eq(memcmp(x, y, count * H5Tget_size(types[t])), 0, "type %zu not bit-exact", t);
    H5Pclose(p2);
    H5Dclose(d);
  }
  H5Fclose(f);
  H5Sclose(s);
  H5Pclose(p);
  free(x);
  free(y);
}

/* Refusals come when the dataset is created, with fzd's reason. */
static void refused(hid_t type, size_t ncd, const unsigned *cd, const char *want) {
  hsize_t dims[1] = {1000}, chunk[1] = {100};
  char name[32], path[64]; /* tests run side by side: a file each, removed */
  snprintf(name, sizeof name, "refused_%d", (int)getpid());
  snprintf(path, sizeof path, "test_hdf5_c_%s.h5", name);
  hid_t f = mkfile(name), s = H5Screate_simple(1, dims, NULL), p = mkdcpl(1, chunk, ncd, cd);
  hid_t d = H5Dcreate2(f, "x", type, s, H5P_DEFAULT, p, H5P_DEFAULT);
  const char *text = error_stack();
  cr_assert_lt(d, 0, "created, expected: %s", want);
  cr_assert(strstr(text, "fzd filter") && strstr(text, want), "stack: %s (want %s)", text, want);
  H5Sclose(s);
  H5Pclose(p);
  H5Fclose(f);
  remove(path);
}

Test(hdf5_filter, bad_parameters_refused_at_creation) {
  unsigned cd[H5Z_FZD_CD_DIMS + 4] = {0}; /* room for the 8 values refused below */
  user_cd(cd, H5Z_FZD_BALANCED, H5Z_FZD_ABS, -1.0);
  refused(H5T_IEEE_F32LE, 4, cd, "bound");
  user_cd(cd, H5Z_FZD_BALANCED, H5Z_FZD_PWREL, 2.0);
  refused(H5T_IEEE_F32LE, 4, cd, "bound");
  user_cd(cd, 9, H5Z_FZD_ABS, 1e-3);
  refused(H5T_IEEE_F32LE, 4, cd, "pipeline 9");
  user_cd(cd, H5Z_FZD_RATIO + 1, H5Z_FZD_ABS, 1e-3);
  refused(H5T_IEEE_F32LE, 4, cd, "pipeline 5");
  user_cd(cd, H5Z_FZD_BALANCED, 7, 1e-3);
  refused(H5T_IEEE_F32LE, 4, cd, "mode 7");
  user_cd(cd, H5Z_FZD_BALANCED, H5Z_FZD_ABS, 1e-3);
  refused(H5T_IEEE_F32LE, 5, cd, "5 filter parameters");
  refused(H5T_IEEE_F32LE, 8, cd, "8 filter parameters");
  cd[H5Z_FZD_CD_HAS_FILL] = 3;
  refused(H5T_IEEE_F32LE, 7, cd, "not 0, 1 or 2");
  refused(H5T_IEEE_F32LE, 1, cd, "the balanced preset needs a bound");
  refused(H5T_IEEE_F32LE, 2, cd, "2 filter parameters");
  user_cd(cd, H5Z_FZD_LOSSLESS, H5Z_FZD_ABS, 0);
  refused(H5T_NATIVE_LDOUBLE, 4, cd, "floating-point data of");
  refused(H5T_C_S1, 4, cd, "only integer and floating-point");
}

/* Writes chunk 0 of a 1-D f32 dataset of 4096 values through the filter,
 * then replaces its stored bytes with `len` bytes from `damage` (the
 * archive itself when damage is NULL) and reads. */
static void read_damaged(const char *what, void (*damage)(uint8_t *arc, size_t *len)) {
  enum { N = 4096 };
  static float x[N], y[N];
  for (int i = 0; i < N; i++)
    x[i] = (float)sin(i * 0.01);
  unsigned cd[H5Z_FZD_CD_USER_MAX];
  user_cd(cd, H5Z_FZD_BALANCED, H5Z_FZD_REL, 1e-3);
  hsize_t dims[1] = {N}, chunk[1] = {N};
  hid_t f = mkfile("damaged"), s = H5Screate_simple(1, dims, NULL), p = mkdcpl(1, chunk, 4, cd);
  hid_t d = H5Dcreate2(f, "x", H5T_IEEE_F32LE, s, H5P_DEFAULT, p, H5P_DEFAULT);
  cr_assert_geq(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x), 0, "%s",
                error_stack());
  cr_assert_geq(H5Dflush(d), 0);
  hsize_t off[1] = {0}, size = 0;
  cr_assert_geq(H5Dget_chunk_storage_size(d, off, &size), 0);
  uint8_t *arc = malloc(size + 64);
  uint32_t mask = 0;
  cr_assert_geq(H5Dread_chunk(d, H5P_DEFAULT, off, &mask, arc), 0);
  size_t len = size;
  damage(arc, &len);
  cr_assert_geq(H5Dwrite_chunk(d, H5P_DEFAULT, 0, off, len, arc), 0, "%s", error_stack());
  H5Dclose(d);
  H5Fclose(f);
  free(arc);
  f = H5Fopen("test_hdf5_c_damaged.h5", H5F_ACC_RDONLY, H5P_DEFAULT);
  d = H5Dopen2(f, "x", H5P_DEFAULT);
  herr_t rc = H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, y);
  const char *text = error_stack();
  cr_assert_lt(rc, 0, "%s: the damaged chunk read", what);
  cr_assert(strstr(text, "fzd filter"), "%s: stack: %s", what, text);
  H5Dclose(d);
  H5Sclose(s);
  H5Pclose(p);
  H5Fclose(f);
}

static void flip_payload(uint8_t *arc, size_t *len) { arc[*len - 5] ^= 0x10; }
static void flip_header(uint8_t *arc, size_t *len) { (void)len; arc[12] ^= 0x01; }
static void truncate_half(uint8_t *arc, size_t *len) { (void)arc; *len /= 2; }
static void garbage(uint8_t *arc, size_t *len) {
  for (size_t k = 0; k < *len; k++)
    arc[k] = (uint8_t)(k * 131u + 7u);
}
static void one_byte(uint8_t *arc, size_t *len) { (void)arc; *len = 1; }

Test(hdf5_filter, damaged_chunks_fail_without_crashing) {
  read_damaged("a flipped payload bit", flip_payload);
  read_damaged("a flipped header bit", flip_header);
  read_damaged("half the archive", truncate_half);
  read_damaged("garbage", garbage);
  read_damaged("one byte", one_byte);
}

/* ---- chains in the parameters (H5Z_FZD_CHAIN) ------------------------------ */

/* cd for a chain with mode and bound, no fill value; the count to give. */
static size_t chain_cd(unsigned *cd, const char *chain, unsigned mode, double eb) {
  memset(cd, 0, sizeof(unsigned) * H5Z_FZD_CHAIN_NELMTS(strlen(chain)));
  cd[H5Z_FZD_CD_MODE] = mode;
  h5z_fzd_put_double(cd + H5Z_FZD_CD_EB, eb);
  return h5z_fzd_put_chain(cd, chain);
}

/* Writes x (CN0 x CN1 f32, chunks 16 x 32 with partial ones at the edges)
 * with the chain into a file of its own, checks the stored parameters (the
 * writer's values kept, the type and shape after the text), makes a second
 * dataset from the first one's completed property list, and reads both
 * back from the reopened file (not from HDF5's chunk cache): the largest
 * error over both is returned. */
enum { CN0 = 45, CN1 = 70 };
static double chain_round_trip(const char *name, const char *chain, unsigned mode, double eb,
                               const float (*x)[CN1]) {
  static float y[CN0][CN1];
  unsigned cd[256];
  size_t ncd = chain_cd(cd, chain, mode, eb);
  hsize_t dims[2] = {CN0, CN1}, chunk[2] = {16, 32};
  hid_t f = mkfile(name), s = H5Screate_simple(2, dims, NULL), p = mkdcpl(2, chunk, ncd, cd);
  hid_t d = H5Dcreate2(f, "x", H5T_IEEE_F32LE, s, H5P_DEFAULT, p, H5P_DEFAULT);
  cr_assert_geq(d, 0, "%s: %s", chain, error_stack());
  cr_assert_geq(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x), 0, "%s",
                error_stack());

  hid_t p2 = H5Dget_create_plist(d);
  unsigned got[256], flags;
  size_t n = 256;
  cr_assert_geq(H5Pget_filter_by_id2(p2, H5Z_FILTER_FZD, &flags, &n, got, 0, NULL, NULL), 0);
  cr_assert_eq(n, ncd + 4, "%zu parameters stored for %zu given", n, ncd);
  cr_assert_eq(memcmp(got, cd, ncd * sizeof cd[0]), 0, "the writer's values changed");
  cr_assert_eq(got[ncd], 9u); /* FZ_F32 */
  cr_assert_eq(got[ncd + 1], 2u);
  cr_assert_eq(got[ncd + 2], 16u);
  cr_assert_eq(got[ncd + 3], 32u);
  /* A property list copied from the dataset holds the completed values:
   * set_local makes its additions anew, after the text. */
  hid_t d2 = H5Dcreate2(f, "copy", H5T_IEEE_F32LE, s, H5P_DEFAULT, p2, H5P_DEFAULT);
  cr_assert_geq(d2, 0, "%s", error_stack());
  cr_assert_geq(H5Dwrite(d2, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x), 0, "%s",
                error_stack());
  hid_t p3 = H5Dget_create_plist(d2);
  n = 256;
  cr_assert_geq(H5Pget_filter_by_id2(p3, H5Z_FILTER_FZD, &flags, &n, got, 0, NULL, NULL), 0);
  cr_assert_eq(n, ncd + 4, "the copy stores %zu parameters", n);
  H5Pclose(p3);
  H5Pclose(p2);
  H5Dclose(d2);
  H5Dclose(d);
  H5Fclose(f);

  char path[256];
  snprintf(path, sizeof path, "test_hdf5_c_%s.h5", name);
  f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  cr_assert_geq(f, 0);
  double worst = 0;
  const char *names[2] = {"x", "copy"};
  for (int k = 0; k < 2; k++) {
    d = H5Dopen2(f, names[k], H5P_DEFAULT);
    cr_assert(H5Dget_storage_size(d) < sizeof(float) * CN0 * CN1, "%s does not compress",
              chain);
    memset(y, 0, sizeof y);
    cr_assert_geq(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, y), 0, "%s",
                  error_stack());
    for (int i = 0; i < CN0; i++)
      for (int j = 0; j < CN1; j++)
        worst = fmax(worst, fabs((double)x[i][j] - (double)y[i][j]));
    H5Dclose(d);
  }
  H5Sclose(s);
  H5Pclose(p);
  H5Fclose(f);
  return worst;
}

Test(hdf5_filter, chains_round_trip_within_the_bound) {
  static float x[CN0][CN1];
  for (int i = 0; i < CN0; i++)
    for (int j = 0; j < CN1; j++)
      x[i][j] = (float)(sin(i * 0.13) * cos(j * 0.05) * 20.0 + 3.0);
  double e = chain_round_trip("chain_rze", "quant | diff | bitshuffle | rze(levels=2)",
                              H5Z_FZD_ABS, 1e-3, x);
  cr_assert_leq(e, 1e-3);
  cr_assert_gt(e, 0.0, "a bound of 1e-3 on values up to 23 changes something");
  e = chain_round_trip("chain_bitpack", "quant | bitpack", H5Z_FZD_ABS, 1e-2, x);
  cr_assert_leq(e, 1e-2);
  cr_assert_gt(e, 0.0);
  /* Bound 0 in the parameters: the chain's own bound stands. */
  e = chain_round_trip("chain_own", "quant(eb=0.05,mode=abs) | diff | rze", H5Z_FZD_ABS, 0.0,
                       x);
  cr_assert_leq(e, 0.05);
  cr_assert_gt(e, 1e-3, "the chain's bound of 0.05 is the one used");
}

/* The chain is refused when the dataset is created, as the engine refuses
 * it for the same type, chunk and bound: its code's name and its message on
 * HDF5's error stack.  flags: mandatory or optional (h5py's compression=),
 * which must not let a bad chain be left out quietly. */
static void chain_refused(const char *chain, unsigned mode, double eb, unsigned flags) {
  hsize_t dims[1] = {1000}, chunk[1] = {100};
  fz_params fp;
  fz_params_init(&fp);
  fp.dtype = FZ_F32;
  fp.ndims = 1;
  fp.dims[0] = 100;
  fp.pipeline = chain;
  fp.eb = eb;
  fp.eb_mode = (fz_eb_mode)mode;
  fp.threads = 1;
  char why[512] = "";
  fz_plan *plan = NULL;
  int rc = fz_plan_create(&fp, &plan, why, sizeof why);
  fz_plan_destroy(plan);
  cr_assert_lt(rc, 0, "the engine takes '%s'", chain);

  unsigned cd[256];
  size_t ncd = chain_cd(cd, chain, mode, eb);
  hid_t f = mkfile("chain_refused"), s = H5Screate_simple(1, dims, NULL);
  hid_t p = H5Pcreate(H5P_DATASET_CREATE);
  cr_assert_geq(H5Pset_chunk(p, 1, chunk), 0);
  cr_assert_geq(H5Pset_filter(p, H5Z_FILTER_FZD, flags, ncd, cd), 0);
  hid_t d = H5Dcreate2(f, "x", H5T_IEEE_F32LE, s, H5P_DEFAULT, p, H5P_DEFAULT);
  const char *text = error_stack();
  char want[600];
  snprintf(want, sizeof want, "fzd filter: %s (%s)", why, fz_err_name(rc));
  cr_assert_lt(d, 0, "'%s' made a dataset; the engine says %s", chain, want);
  cr_assert(strstr(text, want), "stack: %s (want %s)", text, want);
  H5Sclose(s);
  H5Pclose(p);
  H5Fclose(f);
}

Test(hdf5_filter, chains_refused_as_the_engine_refuses_them) {
  /* Malformed. */
  chain_refused("quant | diff | bogus", H5Z_FZD_ABS, 1e-3, H5Z_FLAG_MANDATORY);
  chain_refused("quant | diff | bogus", H5Z_FZD_ABS, 1e-3, H5Z_FLAG_OPTIONAL);
  chain_refused("quant |", H5Z_FZD_ABS, 1e-3, H5Z_FLAG_OPTIONAL);
  chain_refused("quant | diff | bitshuffle | rze(levels=99)", H5Z_FZD_ABS, 1e-3,
                H5Z_FLAG_MANDATORY);
  /* Well-formed, and not with this bound or without a coder. */
  chain_refused("quant(eb=0.01) | diff | rze", H5Z_FZD_ABS, 1e-3, H5Z_FLAG_MANDATORY);
  chain_refused("quant(eb=1e-3,mode=rel) | bitpack", H5Z_FZD_ABS, 1e-3, H5Z_FLAG_OPTIONAL);
  chain_refused("quant | diff | rze", H5Z_FZD_PWREL, 2.0, H5Z_FLAG_MANDATORY);
  chain_refused("quant | diff", H5Z_FZD_ABS, 1e-3, H5Z_FLAG_MANDATORY);
}

Test(hdf5_filter, chain_layouts_refused_at_creation) {
  unsigned cd[256];
  size_t ncd = chain_cd(cd, "quant | bitpack", H5Z_FZD_ABS, 1e-3);
  refused(H5T_IEEE_F32LE, ncd - 1, cd, "a chain text of 15 bytes takes 12");
  refused(H5T_IEEE_F32LE, 7, cd, "7 filter parameters: a chain (pipeline 3) takes 8");
  refused(H5T_IEEE_F32LE, ncd + 1, cd, "13 filter parameters: a chain text of 15 bytes takes 12");
  cd[H5Z_FZD_CD_HAS_FILL] = 3;
  refused(H5T_IEEE_F32LE, ncd, cd, "not 0, 1 or 2");
  cd[H5Z_FZD_CD_HAS_FILL] = 0;
  cd[H5Z_FZD_CD_CHAIN + 1] &= ~0xff00u; /* byte 5 */
  refused(H5T_IEEE_F32LE, ncd, cd, "has a zero byte at 5");
  cd[H5Z_FZD_CD_CHAIN_LEN] = 0;
  refused(H5T_IEEE_F32LE, ncd, cd, "a chain text of 0 bytes: give 1 to 968");
  cd[H5Z_FZD_CD_CHAIN_LEN] = H5Z_FZD_CHAIN_MAX + 1;
  refused(H5T_IEEE_F32LE, ncd, cd, "a chain text of 969 bytes: give 1 to 968");
  /* The longest text the filter takes, spaces around one stage, works as
   * far as the engine parses it (1 is the plan, not the layout). */
  char longest[H5Z_FZD_CHAIN_MAX + 1];
  memset(longest, ' ', H5Z_FZD_CHAIN_MAX);
  memcpy(longest + 400, "quant | bitpack", 15);
  longest[H5Z_FZD_CHAIN_MAX] = '\0';
  ncd = chain_cd(cd, longest, H5Z_FZD_ABS, 1e-3);
  cr_assert_eq(ncd, 250u);
  hsize_t dims[1] = {1000}, chunk[1] = {100};
  hid_t f = mkfile("longest"), s = H5Screate_simple(1, dims, NULL), p = mkdcpl(1, chunk, ncd, cd);
  hid_t d = H5Dcreate2(f, "x", H5T_IEEE_F32LE, s, H5P_DEFAULT, p, H5P_DEFAULT);
  cr_assert_geq(d, 0, "the longest chain text: %s", error_stack());
  H5Dclose(d);
  H5Sclose(s);
  H5Pclose(p);
  H5Fclose(f);
}

/* Writes x (n values of file type ftype, memory type mtype, chunks of
 * chunk values) through the filter with the ncd values cd and reads it
 * back into y; returns the completed parameters' element type and fill
 * flag through dtype_cd and fill_cd.  fill, when not NULL, is the
 * dataset's own fill value (H5Pset_fill_value). */
static void round_trip(const char *name, hid_t ftype, hid_t mtype, const void *x, void *y,
                       hsize_t n, hsize_t chunk, size_t ncd, const unsigned *cd,
                       const float *fill, unsigned *dtype_cd, unsigned *fill_cd) {
  hsize_t dims[1] = {n};
  hid_t f = mkfile(name), s = H5Screate_simple(1, dims, NULL), p = mkdcpl(1, &chunk, ncd, cd);
  if (fill)
    cr_assert_geq(H5Pset_fill_value(p, H5T_NATIVE_FLOAT, fill), 0);
  hid_t d = H5Dcreate2(f, "x", ftype, s, H5P_DEFAULT, p, H5P_DEFAULT);
  cr_assert_geq(d, 0, "%s: %s", name, error_stack());
  cr_assert_geq(H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, x), 0, "%s", error_stack());
  hid_t p2 = H5Dget_create_plist(d);
  unsigned got[16], flags;
  size_t ngot = 16;
  cr_assert_geq(H5Pget_filter_by_id2(p2, H5Z_FILTER_FZD, &flags, &ngot, got, 0, NULL, NULL), 0);
  cr_assert_eq(ngot, H5Z_FZD_CD_DIMS + 1, "%s: %zu parameters stored", name, ngot);
  *dtype_cd = got[H5Z_FZD_CD_DTYPE];
  *fill_cd = got[H5Z_FZD_CD_HAS_FILL];
  H5Pclose(p2);
  H5Dclose(d);
  H5Fclose(f);
  /* Reopened, so that the values come from the filter, not HDF5's cache. */
  char path[256];
  snprintf(path, sizeof path, "test_hdf5_c_%s.h5", name);
  f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  d = H5Dopen2(f, "x", H5P_DEFAULT);
  cr_assert_geq(H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, y), 0, "%s", error_stack());
  H5Dclose(d);
  H5Sclose(s);
  H5Pclose(p);
  H5Fclose(f);
  remove(path);
}

/* Big-endian datasets: swapped to little-endian for the engine and back,
 * the type recorded with H5Z_FZD_DTYPE_BE; lossy within the bound,
 * lossless bit for bit. */
Test(hdf5_filter, big_endian_datasets) {
  enum { N = 3000 };
  static float x[N], y[N];
  static int16_t i[N], j[N];
  for (int k = 0; k < N; k++) {
    x[k] = (float)(sin(k * 0.01) * 300.0);
    i[k] = (int16_t)(k * 7 - 9000);
  }
  unsigned cd[H5Z_FZD_CD_USER_MAX], dt, fl;
  user_cd(cd, H5Z_FZD_BALANCED, H5Z_FZD_ABS, 0.01);
  round_trip("be_f32", H5T_IEEE_F32BE, H5T_NATIVE_FLOAT, x, y, N, 1024, 4, cd, NULL, &dt, &fl);
  cr_assert_eq(dt, 9u | H5Z_FZD_DTYPE_BE);
  double worst = 0;
  for (int k = 0; k < N; k++)
    worst = fmax(worst, fabs((double)x[k] - (double)y[k]));
  cr_assert_leq(worst, 0.01);
  cr_assert_gt(worst, 0.0, "a lossy bound changes something");
  /* The lossless preset by its id alone: compression_opts=(2,). */
  unsigned one[1] = {H5Z_FZD_LOSSLESS};
  round_trip("be_i16", H5T_STD_I16BE, H5T_NATIVE_INT16, i, j, N, 700, 1, one, NULL, &dt, &fl);
  cr_assert_eq(dt, 4u | H5Z_FZD_DTYPE_BE);
  cr_assert_eq(memcmp(i, j, sizeof i), 0, "big-endian i16 lossless is not exact");
}

/* No fill value in the parameters: the dataset's own is taken (flag 2),
 * kept exact and left out of the REL range; without one set, none. */
Test(hdf5_filter, dataset_fill_value_taken) {
  enum { N = 4096 };
  static float x[N], y[N];
  const float fill = -9999.0f;
  float lo = 1e30f, hi = -1e30f;
  for (int k = 0; k < N; k++) {
    x[k] = k % 5 == 0 ? fill : (float)(20.0 + 5.0 * sin(k * 0.003));
    if (x[k] != fill) {
      lo = fminf(lo, x[k]);
      hi = fmaxf(hi, x[k]);
    }
  }
  unsigned cd[H5Z_FZD_CD_USER_MAX], dt, fl;
  const double eb = 1e-3;
  user_cd(cd, H5Z_FZD_BALANCED, H5Z_FZD_REL, eb);
  round_trip("fill", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, x, y, N, N, 4, cd, &fill, &dt, &fl);
  cr_assert_eq(fl, H5Z_FZD_FILL_DATASET, "the dataset's fill value was not taken (%u)", fl);
  double worst = 0;
  for (int k = 0; k < N; k++) {
    if (x[k] == fill)
      cr_assert_eq(y[k], fill, "fill cell %d came back as %g", k, (double)y[k]);
    else
      worst = fmax(worst, fabs((double)x[k] - (double)y[k]));
  }
  /* Relative to the range of the values without the fill (10 wide), not
   * to the 10,000 that the fill would stretch it to. */
  cr_assert_leq(worst, eb * ((double)hi - (double)lo));
  round_trip("nofill", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, x, y, N, N, 4, cd, NULL, &dt, &fl);
  cr_assert_eq(fl, 0u, "a fill value was taken from a dataset that has none");
}
