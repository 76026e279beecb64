/*
 * h5z_fzd.c - the fzd filter for HDF5 (libh5z_fzd.so), a dynamically loaded
 * filter plugin: HDF5 finds it through HDF5_PLUGIN_PATH and asks it
 * H5PLget_plugin_type() and H5PLget_plugin_info(), the only symbols the
 * library exports.
 *
 * can_apply refuses what the engine cannot take (types other than
 * little-endian integers of 1 to 8 bytes, f32 and f64) and a chain text it
 * cannot parse; set_local completes the writer's parameters (h5z_fzd.h: a
 * preset or any chain text, the bound and a fill value) with the element
 * type and the chunk's shape, and checks that they make a plan, so that a
 * bad bound or a chain that disagrees with it fails when the dataset is
 * created, not chunk by chunk; the filter turns each chunk
 * into one fzd archive (codec.c) and back.  Failures push an HDF5 error that
 * carries fzd's message and return 0, as HDF5 expects of a filter.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <H5PLextern.h>
#include <hdf5.h>

#include "codec.h"
#include "h5z_fzd.h"

/* A chunk of more dimensions than the engine takes is described by merging
 * its slowest ones: the archive's shape is then the chunk's, flattened. */
#define MAX_H5_RANK 32

/* The presets by their id in cd[0]; H5Z_FZD_CHAIN has the text instead. */
static const char *const pipelines[] = {
    [H5Z_FZD_BALANCED] = "balanced", [H5Z_FZD_FAST] = "fast",
    [H5Z_FZD_LOSSLESS] = "lossless", [H5Z_FZD_CHAIN] = NULL, [H5Z_FZD_RATIO] = "ratio"};
#define N_PIPELINES (sizeof pipelines / sizeof pipelines[0])

static void push(const char *func, int line, const char *fmt, const char *msg) {
  H5Epush2(H5E_DEFAULT, "h5z_fzd.c", func, (unsigned)line, H5E_ERR_CLS, H5E_PLINE,
           H5E_CANTFILTER, fmt, msg);
}

#define FAIL(...)                                                              \
  do {                                                                         \
    char msg_[640];                                                            \
    snprintf(msg_, sizeof msg_, __VA_ARGS__);                                  \
    push(__func__, __LINE__, "fzd filter: %s", msg_);                          \
  } while (0)

/* The fz_dtype of an HDF5 type, or 0 when the engine cannot take it. */
static fz_dtype dtype_of(hid_t type, char *why, size_t why_len) {
  H5T_class_t cls = H5Tget_class(type);
  size_t size = H5Tget_size(type);
  if (cls != H5T_FLOAT && cls != H5T_INTEGER) {
    snprintf(why, why_len, "only integer and floating-point data can be compressed");
    return 0;
  }
  if (H5Tget_order(type) != H5T_ORDER_LE) {
    /* The filter sees the bytes in the file's order; the engine reads
     * little-endian values. */
    snprintf(why, why_len, "only little-endian data can be compressed");
    return 0;
  }
  if (cls == H5T_FLOAT) {
    if (size == 4)
      return FZ_F32;
    if (size == 8)
      return FZ_F64;
    snprintf(why, why_len, "floating-point data of %zu bytes cannot be compressed (f32, f64)",
             size);
    return 0;
  }
  int is_signed = H5Tget_sign(type) == H5T_SGN_2;
  switch (size) {
  case 1: return is_signed ? FZ_I8 : FZ_U8;
  case 2: return is_signed ? FZ_I16 : FZ_U16;
  case 4: return is_signed ? FZ_I32 : FZ_U32;
  case 8: return is_signed ? FZ_I64 : FZ_U64;
  default:
    snprintf(why, why_len, "integers of %zu bytes cannot be compressed", size);
    return 0;
  }
}

/* The most values the filter's parameters hold: the longest chain with the
 * plugin's additions. */
#define CD_MAX (H5Z_FZD_CHAIN_NELMTS(H5Z_FZD_CHAIN_MAX) + 2 + FZ_MAX_DIMS)
_Static_assert(CD_MAX <= 256, "H5Pget_filter_by_id2 reads at most 256 parameters");

/* The number of the writer's values in cd (n of them): 7 for a preset (the
 * short form of 4 counts as 7), 8 and the text's for a chain; set_local's
 * additions come after them.  Checks the chain's layout and the fill flag,
 * not the pipeline itself; -1 with a message. */
static int writer_part(size_t n, const unsigned *cd, size_t *user, char *why, size_t why_len) {
  if (cd[H5Z_FZD_CD_PIPELINE] != H5Z_FZD_CHAIN) {
    *user = H5Z_FZD_CD_USER_MAX;
    if (n == H5Z_FZD_CD_USER_MIN)
      return 0; /* no fill value */
  } else {
    if (n <= H5Z_FZD_CD_CHAIN_LEN) {
      snprintf(why, why_len,
               "%zu filter parameters: a chain (pipeline %u) takes 8 and its text's", n,
               H5Z_FZD_CHAIN);
      return -1;
    }
    unsigned len = cd[H5Z_FZD_CD_CHAIN_LEN];
    if (len < 1 || len > H5Z_FZD_CHAIN_MAX) {
      snprintf(why, why_len, "a chain text of %u bytes: give 1 to %u", len, H5Z_FZD_CHAIN_MAX);
      return -1;
    }
    *user = H5Z_FZD_CHAIN_NELMTS(len);
    if (n < *user) {
      snprintf(why, why_len, "%zu filter parameters: a chain text of %u bytes takes %zu", n,
               len, *user);
      return -1;
    }
    for (unsigned i = 0; i < len; i++)
      if (((cd[H5Z_FZD_CD_CHAIN + i / 4] >> (8 * (i % 4))) & 0xffu) == 0) {
        snprintf(why, why_len, "the chain text of %u bytes has a zero byte at %u", len, i);
        return -1;
      }
  }
  if (cd[H5Z_FZD_CD_HAS_FILL] > 1) {
    snprintf(why, why_len, "parameter 4 (has a fill value) is %u, not 0 or 1",
             cd[H5Z_FZD_CD_HAS_FILL]);
    return -1;
  }
  return 0;
}

/* The chain text of cd (writer_part() accepted it) into buf. */
static void chain_text(const unsigned *cd, char *buf) {
  unsigned len = cd[H5Z_FZD_CD_CHAIN_LEN];
  for (unsigned i = 0; i < len; i++)
    buf[i] = (char)((cd[H5Z_FZD_CD_CHAIN + i / 4] >> (8 * (i % 4))) & 0xffu);
  buf[len] = '\0';
}

/* The writer's parameters, read when the dataset is created: n of them into
 * cd (CD_MAX values); -1 when there is no filter or there are more. */
static int get_params(hid_t dcpl, unsigned *flags, size_t *n, unsigned *cd) {
  *n = CD_MAX;
  if (H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FZD, flags, n, cd, 0, NULL, NULL) < 0) {
    FAIL("the dataset has no fzd filter to set up");
    return -1;
  }
  if (*n > CD_MAX) {
    FAIL("%zu filter parameters: a chain of %u bytes, the longest, takes %zu", *n,
         H5Z_FZD_CHAIN_MAX, (size_t)H5Z_FZD_CHAIN_NELMTS(H5Z_FZD_CHAIN_MAX));
    return -1;
  }
  return 0;
}

/* Refuses, before set_local, the parameters that are wrong whatever the
 * data: a chain's layout, and its text where the engine cannot parse it
 * (FZ_EPIPELINE with the engine's message), so that an optional filter
 * (h5py's compression=) fails the creation rather than being left out.
 * Types the engine cannot take are only not applicable (0). */
static htri_t can_apply(hid_t dcpl, hid_t type, hid_t space) {
  (void)space;
  char why[512];
  unsigned flags = 0, cd[CD_MAX];
  size_t n = 0, user = 0;
  if (get_params(dcpl, &flags, &n, cd) < 0)
    return -1;
  if (n > 0 && cd[H5Z_FZD_CD_PIPELINE] == H5Z_FZD_CHAIN) {
    if (writer_part(n, cd, &user, why, sizeof why) < 0) {
      FAIL("%s", why);
      return -1;
    }
    char text[H5Z_FZD_CHAIN_MAX + 1], canon[4096];
    chain_text(cd, text);
    int rc = fz_pipeline_canonical(text, canon, sizeof canon, why, sizeof why);
    if (rc == FZ_EPIPELINE) {
      FAIL("%s (%s)", why, fz_err_name(rc));
      return -1;
    }
  }
  if (!dtype_of(type, why, sizeof why)) {
    FAIL("%s", why);
    return 0;
  }
  hsize_t dims[MAX_H5_RANK];
  if (H5Pget_chunk(dcpl, MAX_H5_RANK, dims) < 1) {
    FAIL("the dataset must be chunked");
    return 0;
  }
  return 1;
}

/* Reads the spec from cd_values completed by set_local; 0 or a message. */
static int spec_of(size_t n, const unsigned *cd, h5zf_spec *s, char *why, size_t why_len) {
  memset(s, 0, sizeof *s);
  size_t base = 0;
  if (n < H5Z_FZD_CD_USER_MAX || writer_part(n, cd, &base, why, why_len) < 0 ||
      n < base + 3 || cd[base + 1] < 1 || cd[base + 1] > FZ_MAX_DIMS ||
      n < base + 2 + cd[base + 1]) {
    snprintf(why, why_len, "%zu filter parameters do not describe a chunk", n);
    return -1;
  }
  if (cd[H5Z_FZD_CD_PIPELINE] >= N_PIPELINES || cd[H5Z_FZD_CD_MODE] > FZ_EB_PWREL) {
    snprintf(why, why_len, "pipeline %u or mode %u unknown", cd[H5Z_FZD_CD_PIPELINE],
             cd[H5Z_FZD_CD_MODE]);
    return -1;
  }
  if (cd[H5Z_FZD_CD_PIPELINE] == H5Z_FZD_CHAIN)
    chain_text(cd, s->pipeline);
  else
    snprintf(s->pipeline, sizeof s->pipeline, "%s", pipelines[cd[H5Z_FZD_CD_PIPELINE]]);
  s->mode = (fz_eb_mode)cd[H5Z_FZD_CD_MODE];
  s->eb = h5z_fzd_get_double(cd + H5Z_FZD_CD_EB);
  s->has_fill = cd[H5Z_FZD_CD_HAS_FILL] != 0;
  s->fill_value = s->has_fill ? h5z_fzd_get_double(cd + H5Z_FZD_CD_FILL) : 0.0;
  s->dtype = (fz_dtype)cd[base];
  if (fz_dtype_size(s->dtype) == 0) {
    snprintf(why, why_len, "element type %u unknown", cd[base]);
    return -1;
  }
  s->ndims = cd[base + 1];
  for (unsigned i = 0; i < s->ndims; i++)
    s->dims[i] = cd[base + 2 + i];
  return 0;
}

static herr_t set_local(hid_t dcpl, hid_t type, hid_t space) {
  (void)space;
  char why[512];
  unsigned flags = 0, cd[CD_MAX];
  size_t n = 0, user = H5Z_FZD_CD_USER_MAX;
  if (get_params(dcpl, &flags, &n, cd) < 0)
    return -1;
  /* No parameters: lossless, so that leaving them out loses nothing.
   * A writer gives 4 (no fill value) or 7 for a preset, 8 and the text's
   * for a chain; a copied property list may hold the completed ones, whose
   * first are the writer's, and the plugin's additions are made anew. */
  if (n == 0) {
    memset(cd, 0, sizeof cd);
    cd[H5Z_FZD_CD_PIPELINE] = H5Z_FZD_LOSSLESS;
  } else if (n < H5Z_FZD_CD_USER_MIN && cd[H5Z_FZD_CD_PIPELINE] != H5Z_FZD_CHAIN) {
    FAIL("%zu filter parameters: give 0, 4 (pipeline, mode, bound) or 7 (and a fill value)",
         n);
    return -1;
  } else if (writer_part(n, cd, &user, why, sizeof why) < 0) {
    FAIL("%s", why);
    return -1;
  } else if (cd[H5Z_FZD_CD_PIPELINE] != H5Z_FZD_CHAIN && n == H5Z_FZD_CD_USER_MIN) {
    cd[H5Z_FZD_CD_HAS_FILL] = cd[H5Z_FZD_CD_FILL] = cd[H5Z_FZD_CD_FILL + 1] = 0;
  } else if (n != user && (n < user + 3 || n > user + 2 + FZ_MAX_DIMS)) {
    if (cd[H5Z_FZD_CD_PIPELINE] == H5Z_FZD_CHAIN)
      FAIL("%zu filter parameters: a chain text of %u bytes takes %zu", n,
           cd[H5Z_FZD_CD_CHAIN_LEN], user);
    else
      FAIL("%zu filter parameters: give 0, 4 (pipeline, mode, bound) or 7 (and a fill value)",
           n);
    return -1;
  }

  fz_dtype dt = dtype_of(type, why, sizeof why);
  if (!dt) {
    FAIL("%s", why);
    return -1;
  }
  hsize_t dims[MAX_H5_RANK];
  int rank = H5Pget_chunk(dcpl, MAX_H5_RANK, dims);
  if (rank < 1) {
    FAIL("the dataset must be chunked");
    return -1;
  }
  /* Merge the slowest dimensions beyond the engine's four into one. */
  while (rank > FZ_MAX_DIMS) {
    dims[1] *= dims[0];
    memmove(dims, dims + 1, (size_t)(rank - 1) * sizeof dims[0]);
    rank--;
  }
  cd[user] = (unsigned)dt;
  cd[user + 1] = (unsigned)rank;
  for (int i = 0; i < rank; i++) {
    if (dims[i] > UINT32_MAX) {
      FAIL("a chunk dimension of %llu is too large", (unsigned long long)dims[i]);
      return -1;
    }
    cd[user + 2 + i] = (unsigned)dims[i];
  }
  size_t total = user + 2 + (size_t)rank;

  h5zf_spec spec;
  if (spec_of(total, cd, &spec, why, sizeof why) < 0) {
    FAIL("%s", why);
    return -1;
  }
  int rc = h5zf_check(&spec, why, sizeof why);
  if (rc < 0) {
    FAIL("%s (%s)", why, fz_err_name(rc));
    return -1;
  }
  if (H5Pmodify_filter(dcpl, H5Z_FILTER_FZD, flags, total, cd) < 0) {
    FAIL("cannot store the filter parameters");
    return -1;
  }
  return 0;
}

static void *h5_alloc(size_t size) { return H5allocate_memory(size, 0); }
static void h5_release(void *p) { H5free_memory(p); }

static size_t filter(unsigned flags, size_t cd_nelmts, const unsigned cd_values[],
                     size_t nbytes, size_t *buf_size, void **buf) {
  char why[512];
  h5zf_spec spec;
  int have_spec = spec_of(cd_nelmts, cd_values, &spec, why, sizeof why) == 0;
  size_t chunk_bytes = 0;
  if (have_spec) {
    chunk_bytes = fz_dtype_size(spec.dtype);
    for (unsigned i = 0; i < spec.ndims; i++)
      chunk_bytes *= spec.dims[i];
  }
  void *out = NULL;
  size_t out_len = 0;
  int rc;
  if (flags & H5Z_FLAG_REVERSE) {
    /* The archive describes itself; the parameters only say how large the
     * chunk must come out. */
    rc = h5zf_decompress(*buf, nbytes, chunk_bytes, h5_alloc, h5_release, &out, &out_len, why,
                         sizeof why);
  } else {
    if (!have_spec) {
      FAIL("%s", why);
      return 0;
    }
    rc = h5zf_compress(&spec, *buf, nbytes, *buf_size, h5_alloc, &out, &out_len, why,
                       sizeof why);
  }
  if (rc < 0) {
    FAIL("%s (%s)", why, fz_err_name(rc));
    return 0;
  }
  if (out != *buf) {
    H5free_memory(*buf);
    *buf = out;
    *buf_size = out_len;
  }
  return out_len;
}

static const H5Z_class2_t fzd_class = {
    .version = H5Z_CLASS_T_VERS,
    .id = H5Z_FILTER_FZD,
    .encoder_present = 1,
    .decoder_present = 1,
    .name = "fzd error-bounded compression (docs/hdf5.md)",
    .can_apply = can_apply,
    .set_local = set_local,
    .filter = filter,
};

H5PL_type_t H5PLget_plugin_type(void) { return H5PL_TYPE_FILTER; }
const void *H5PLget_plugin_info(void) { return &fzd_class; }
