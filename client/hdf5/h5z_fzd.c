/*
 * h5z_fzd.c - the fzd filter for HDF5 (libh5z_fzd.so), a dynamically loaded
 * filter plugin: HDF5 finds it through HDF5_PLUGIN_PATH and asks it
 * H5PLget_plugin_type() and H5PLget_plugin_info(), the only symbols the
 * library exports.  It links no HDF5: each callback takes HDF5's calls from
 * the library that made it (h5api.c), so one plugin file serves Debian's
 * HDF5 1.10 and the 1.14 inside pip's h5py and netCDF4 wheels.
 *
 * can_apply refuses what the engine cannot take (types other than integers
 * of 1 to 8 bytes, f32 and f64) and a chain text it cannot parse; set_local
 * completes the writer's parameters (h5z_fzd.h: a preset or any chain
 * text, the bound and a fill value, else the dataset's own fill value)
 * with the element type, its byte order and the chunk's shape, and checks
 * that they make a plan, so that a bad bound or a chain that disagrees with
 * it fails when the dataset is created, not chunk by chunk; the filter
 * turns each chunk into one fzd archive (codec.c) and back, a big-endian
 * chunk swapped to little-endian and back around the engine.  Failures
 * push an HDF5 error that carries fzd's message and return 0, as HDF5
 * expects of a filter.
 *
 * Built with H5Z_FZD_LEGACY (libh5z_fzd_legacy.so) the same code claims
 * 305, the id files took before fzd moved to H5Z_FILTER_FZD, for reading
 * only: it decodes chunks that are fzd archives, names LZO (PyTables, the
 * registered owner of 305) for any other, and refuses to write.  HDF5
 * asks each plugin file for one filter class, hence two files.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "codec.h"
#include "h5api.h"
#include "h5z_fzd.h"

#ifdef H5Z_FZD_LEGACY
#define CLAIMED_ID H5Z_FILTER_FZD_LEGACY
#else
#define CLAIMED_ID H5Z_FILTER_FZD
#endif

/* A chunk of more dimensions than the engine takes is described by merging
 * its slowest ones: the archive's shape is then the chunk's, flattened. */
#define MAX_H5_RANK 32


/* The HDF5 library that called the callback this expands in (it must be
 * the callback itself, not a helper, for the return address to be
 * HDF5's). */
#define CALLER_API() h5zf_api_for(__builtin_return_address(0), why, sizeof why)

static void push(const h5zf_api *api, const char *func, int line, const char *msg) {
  api->Epush2(H5E_DEFAULT, "h5z_fzd.c", func, (unsigned)line, *api->ERR_CLS_g, *api->PLINE_g,
              *api->CANTFILTER_g, "fzd filter: %s", msg);
}

#define FAIL(...)                                                              \
  do {                                                                         \
    char msg_[640];                                                            \
    snprintf(msg_, sizeof msg_, __VA_ARGS__);                                  \
    push(api, __func__, __LINE__, msg_);                                       \
  } while (0)

/* Without HDF5's calls there is no error stack to push on: the reason goes
 * to stderr, once a process, and the callback fails. */
static void no_api(const char *why) {
  static int said;
  if (!said) {
    said = 1;
    fprintf(stderr, "fzd filter: cannot use the HDF5 library that loaded it: %s\n", why);
  }
}

#ifndef H5Z_FZD_LEGACY
/* The fz_dtype of an HDF5 type, or 0 when the engine cannot take it;
 * *big_endian tells the byte order, which the filter swaps. */
static fz_dtype dtype_of(const h5zf_api *api, hid_t type, int *big_endian, char *why,
                         size_t why_len) {
  H5T_class_t cls = api->Tget_class(type);
  size_t size = api->Tget_size(type);
  if (cls != H5T_FLOAT && cls != H5T_INTEGER) {
    snprintf(why, why_len, "only integer and floating-point data can be compressed");
    return 0;
  }
  H5T_order_t order = api->Tget_order(type);
  if (order != H5T_ORDER_LE && order != H5T_ORDER_BE) {
    snprintf(why, why_len, "only little- and big-endian data can be compressed");
    return 0;
  }
  *big_endian = order == H5T_ORDER_BE;
  if (cls == H5T_FLOAT) {
    if (size == 4)
      return FZ_F32;
    if (size == 8)
      return FZ_F64;
    snprintf(why, why_len, "floating-point data of %zu bytes cannot be compressed (f32, f64)",
             size);
    return 0;
  }
  int is_signed = api->Tget_sign(type) == H5T_SGN_2;
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
#endif

/* Reverses the byte order of n values of size bytes each, in place. */
static void swap_bytes(void *buf, size_t nbytes, size_t size) {
  unsigned char *p = buf;
  for (size_t at = 0; at + size <= nbytes; at += size)
    for (size_t a = at, b = at + size - 1; a < b; a++, b--) {
      unsigned char t = p[a];
      p[a] = p[b];
      p[b] = t;
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
  if (cd[H5Z_FZD_CD_HAS_FILL] > H5Z_FZD_FILL_DATASET) {
    snprintf(why, why_len, "parameter 4 (has a fill value) is %u, not 0, 1 or 2",
             cd[H5Z_FZD_CD_HAS_FILL]);
    return -1;
  }
  return 0;
}

/* The chunk a completed cd describes: its type, byte order and shape, the
 * values set_local appended after the writer's (read with the writer's
 * layout, whatever the pipeline: a reader needs no more).  -1 with a
 * message when they are missing or make no chunk. */
static int chunk_of(size_t n, const unsigned *cd, h5zf_spec *s, int *big_endian, char *why,
                    size_t why_len) {
  memset(s, 0, sizeof *s);
  size_t base = 0;
  if (n < H5Z_FZD_CD_USER_MAX || writer_part(n, cd, &base, why, why_len) < 0 ||
      n < base + 3 || cd[base + 1] < 1 || cd[base + 1] > FZ_MAX_DIMS ||
      n != base + 2 + cd[base + 1]) {
    snprintf(why, why_len, "%zu filter parameters do not describe a chunk", n);
    return -1;
  }
  *big_endian = (cd[base] & H5Z_FZD_DTYPE_BE) != 0;
  s->dtype = (fz_dtype)(cd[base] & ~H5Z_FZD_DTYPE_BE);
  if (fz_dtype_size(s->dtype) == 0) {
    snprintf(why, why_len, "element type %u unknown", cd[base]);
    return -1;
  }
  s->ndims = cd[base + 1];
  for (unsigned i = 0; i < s->ndims; i++) {
    s->dims[i] = cd[base + 2 + i];
    if (s->dims[i] == 0) {
      snprintf(why, why_len, "a chunk dimension of 0 in the filter parameters");
      return -1;
    }
  }
  if (h5zf_chunk_bytes(s) == 0) {
    snprintf(why, why_len, "the filter parameters describe a chunk too large for memory");
    return -1;
  }
  return 0;
}

#ifndef H5Z_FZD_LEGACY
/* The presets by their id in cd[0]; H5Z_FZD_CHAIN has the text instead. */
static const char *const pipelines[] = {
    [H5Z_FZD_BALANCED] = "balanced", [H5Z_FZD_FAST] = "fast",
    [H5Z_FZD_LOSSLESS] = "lossless", [H5Z_FZD_CHAIN] = NULL, [H5Z_FZD_RATIO] = "ratio"};
#define N_PIPELINES (sizeof pipelines / sizeof pipelines[0])

/* The chain text of cd (writer_part() accepted it) into buf. */
static void chain_text(const unsigned *cd, char *buf) {
  unsigned len = cd[H5Z_FZD_CD_CHAIN_LEN];
  for (unsigned i = 0; i < len; i++)
    buf[i] = (char)((cd[H5Z_FZD_CD_CHAIN + i / 4] >> (8 * (i % 4))) & 0xffu);
  buf[len] = '\0';
}

/* The writer's parameters, read when the dataset is created: n of them into
 * cd (CD_MAX values); -1 when there is no filter or there are more. */
static int get_params(const h5zf_api *api, hid_t dcpl, unsigned *flags, size_t *n,
                      unsigned *cd) {
  *n = CD_MAX;
  if (api->Pget_filter_by_id2(dcpl, CLAIMED_ID, flags, n, cd, 0, NULL, NULL) < 0) {
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
  const h5zf_api *api = CALLER_API();
  if (!api) {
    no_api(why);
    return -1;
  }
  unsigned flags = 0, cd[CD_MAX];
  size_t n = 0, user = 0;
  if (get_params(api, dcpl, &flags, &n, cd) < 0)
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
  int big_endian = 0;
  if (!dtype_of(api, type, &big_endian, why, sizeof why)) {
    FAIL("%s", why);
    return 0;
  }
  hsize_t dims[MAX_H5_RANK];
  if (api->Pget_chunk(dcpl, MAX_H5_RANK, dims) < 1) {
    FAIL("the dataset must be chunked");
    return 0;
  }
  return 1;
}


/* Reads the whole spec from cd_values completed by set_local; 0 or a
 * message. */
static int spec_of(size_t n, const unsigned *cd, h5zf_spec *s, int *big_endian, char *why,
                   size_t why_len) {
  if (chunk_of(n, cd, s, big_endian, why, why_len) < 0)
    return -1;
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
  return 0;
}

/* The dataset's own fill value, when it has one set by the writer of the
 * dataset (H5Pset_fill_value, h5py's fillvalue=, netCDF's _FillValue) and
 * the data is floating-point: the value the engine keeps exact and leaves
 * out of a REL range.  HDF5's default fill (0) is no missing-value mark,
 * and a fill must be finite (fz.h).  1 with *fill, else 0. */
static int dataset_fill(const h5zf_api *api, hid_t dcpl, hid_t type, fz_dtype dt,
                        int big_endian, double *fill) {
  H5D_fill_value_t status = H5D_FILL_VALUE_UNDEFINED;
  if ((dt != FZ_F32 && dt != FZ_F64) || api->Pfill_value_defined(dcpl, &status) < 0 ||
      status != H5D_FILL_VALUE_USER_DEFINED)
    return 0;
  unsigned char raw[8];
  /* In the dataset's own type, so in its byte order. */
  if (api->Pget_fill_value(dcpl, type, raw) < 0)
    return 0;
  size_t size = fz_dtype_size(dt);
  if (big_endian)
    swap_bytes(raw, size, size);
  if (dt == FZ_F32) {
    float f;
    memcpy(&f, raw, sizeof f);
    *fill = f;
  } else {
    memcpy(fill, raw, sizeof *fill);
  }
  return isfinite(*fill) ? 1 : 0;
}

static herr_t set_local(hid_t dcpl, hid_t type, hid_t space) {
  (void)space;
  char why[512];
  const h5zf_api *api = CALLER_API();
  if (!api) {
    no_api(why);
    return -1;
  }
  unsigned flags = 0, cd[CD_MAX];
  size_t n = 0, user = H5Z_FZD_CD_USER_MAX;
  if (get_params(api, dcpl, &flags, &n, cd) < 0)
    return -1;
  /* No parameters: lossless, so that leaving them out loses nothing; the
   * id of a lossless preset alone likewise (h5py's compression_opts=(2,)).
   * A writer gives 4 (no fill value) or 7 for a preset, 8 and the text's
   * for a chain; a copied property list may hold the completed ones, whose
   * first are the writer's, and the plugin's additions are made anew. */
  int writers_only = 1;
  if (n == 0 || (n == 1 && cd[H5Z_FZD_CD_PIPELINE] == H5Z_FZD_LOSSLESS)) {
    memset(cd, 0, sizeof cd);
    cd[H5Z_FZD_CD_PIPELINE] = H5Z_FZD_LOSSLESS;
  } else if (n == 1 && cd[H5Z_FZD_CD_PIPELINE] < N_PIPELINES &&
             cd[H5Z_FZD_CD_PIPELINE] != H5Z_FZD_CHAIN) {
    FAIL("the %s preset needs a bound: give 4 filter parameters (pipeline, mode, bound) or "
         "7 (and a fill value); 1 alone is for lossless (%u)",
         pipelines[cd[H5Z_FZD_CD_PIPELINE]], H5Z_FZD_LOSSLESS);
    return -1;
  } else if (n < H5Z_FZD_CD_USER_MIN && cd[H5Z_FZD_CD_PIPELINE] != H5Z_FZD_CHAIN) {
    FAIL("%zu filter parameters: give 0, 1 (lossless), 4 (pipeline, mode, bound) or 7 (and a "
         "fill value)",
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
      FAIL("%zu filter parameters: give 0, 1 (lossless), 4 (pipeline, mode, bound) or 7 (and "
           "a fill value)",
           n);
    return -1;
  } else if (n != user) {
    writers_only = 0;
  }

  int big_endian = 0;
  fz_dtype dt = dtype_of(api, type, &big_endian, why, sizeof why);
  if (!dt) {
    FAIL("%s", why);
    return -1;
  }
  hsize_t dims[MAX_H5_RANK];
  int rank = api->Pget_chunk(dcpl, MAX_H5_RANK, dims);
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
  /* The dataset's fill value where the writer gave none: taken anew when
   * an earlier set_local took it (2), kept out of a completed list copied
   * from another dataset whose writer gave none (0: its chunks were made
   * without one, and a copy says what they were made with). */
  unsigned has_fill = cd[H5Z_FZD_CD_HAS_FILL];
  double fill = 0;
  if (has_fill == H5Z_FZD_FILL_DATASET || (has_fill == 0 && writers_only)) {
    int took = dataset_fill(api, dcpl, type, dt, big_endian, &fill);
    cd[H5Z_FZD_CD_HAS_FILL] = took ? H5Z_FZD_FILL_DATASET : 0;
    h5z_fzd_put_double(cd + H5Z_FZD_CD_FILL, took ? fill : 0.0);
  }
  cd[user] = (unsigned)dt | (big_endian ? H5Z_FZD_DTYPE_BE : 0u);
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
  int be = 0;
  if (spec_of(total, cd, &spec, &be, why, sizeof why) < 0) {
    FAIL("%s", why);
    return -1;
  }
  int rc = h5zf_check(&spec, why, sizeof why);
  if (rc < 0 && cd[H5Z_FZD_CD_HAS_FILL] == H5Z_FZD_FILL_DATASET) {
    /* A pipeline that takes no fill value (one without quant) is not the
     * writer's mistake when the fill is the dataset's: it goes without. */
    cd[H5Z_FZD_CD_HAS_FILL] = cd[H5Z_FZD_CD_FILL] = cd[H5Z_FZD_CD_FILL + 1] = 0;
    spec.has_fill = 0;
    spec.fill_value = 0;
    rc = h5zf_check(&spec, why, sizeof why);
  }
  if (rc < 0) {
    FAIL("%s (%s)", why, fz_err_name(rc));
    return -1;
  }
  if (api->Pmodify_filter(dcpl, CLAIMED_ID, flags, total, cd) < 0) {
    FAIL("cannot store the filter parameters");
    return -1;
  }
  return 0;
}
#else /* H5Z_FZD_LEGACY */

/* The legacy id is never written. */
static htri_t can_apply(hid_t dcpl, hid_t type, hid_t space) {
  (void)dcpl;
  (void)type;
  (void)space;
  char why[512];
  const h5zf_api *api = CALLER_API();
  if (!api) {
    no_api(why);
    return -1;
  }
  FAIL("filter %d is read-only: it reads files written before fzd took filter id %d; write "
       "with %d (H5Z_FILTER_FZD, fzd.h5.FILTER_ID), the same parameters",
       H5Z_FILTER_FZD_LEGACY, H5Z_FILTER_FZD, H5Z_FILTER_FZD);
  return -1;
}
#endif /* H5Z_FZD_LEGACY */

static void *h5_alloc(void *ctx, size_t size) {
  return ((const h5zf_api *)ctx)->allocate_memory(size, 0);
}
static void h5_release(void *ctx, void *p) { ((const h5zf_api *)ctx)->free_memory(p); }

static size_t filter(unsigned flags, size_t cd_nelmts, const unsigned cd_values[],
                     size_t nbytes, size_t *buf_size, void **buf) {
  char why[512];
  const h5zf_api *api = CALLER_API();
  if (!api) {
    no_api(why);
    return 0;
  }
  h5zf_mem mem = {h5_alloc, h5_release, (void *)api};
  h5zf_spec spec;
  int big_endian = 0;
  void *out = NULL;
  size_t out_len = 0;
  int rc;
  if (flags & H5Z_FLAG_REVERSE) {
    /* The archive describes itself; the parameters say what the chunk must
     * be, and nothing is decoded without them. */
#ifdef H5Z_FZD_LEGACY
    /* Whatever its parameters say, a chunk that is no fzd archive is
     * another filter's: LZO's, PyTables', not registered in this process. */
    if (!h5zf_is_archive(*buf, nbytes)) {
      FAIL("the chunk is not an fzd archive: filter %d is registered to LZO (PyTables), and "
           "this plugin reads only the fzd files written with %d before fzd took %d; "
           "import tables to read LZO",
           H5Z_FILTER_FZD_LEGACY, H5Z_FILTER_FZD_LEGACY, H5Z_FILTER_FZD);
      return 0;
    }
#endif
    if (chunk_of(cd_nelmts, cd_values, &spec, &big_endian, why, sizeof why) < 0) {
      FAIL("%s: the chunk's size is unknown, nothing is decoded", why);
      return 0;
    }
    rc = h5zf_decompress(&spec, *buf, nbytes, &mem, &out, &out_len, why, sizeof why);
    if (rc == 0 && big_endian)
      swap_bytes(out, out_len, fz_dtype_size(spec.dtype));
  } else {
#ifdef H5Z_FZD_LEGACY
    FAIL("filter %d is read-only: write with %d (H5Z_FILTER_FZD)", H5Z_FILTER_FZD_LEGACY,
         H5Z_FILTER_FZD);
    return 0;
#else
    if (spec_of(cd_nelmts, cd_values, &spec, &big_endian, why, sizeof why) < 0) {
      FAIL("%s", why);
      return 0;
    }
    /* The engine reads little-endian values; the swap is undone when the
     * chunk fails, since HDF5 then stores it as it was (optional filter). */
    size_t size = fz_dtype_size(spec.dtype);
    if (big_endian)
      swap_bytes(*buf, nbytes, size);
    rc = h5zf_compress(&spec, *buf, nbytes, *buf_size, &mem, &out, &out_len, why, sizeof why);
    if (rc < 0 && big_endian)
      swap_bytes(*buf, nbytes, size);
#endif
  }
  if (rc < 0) {
    FAIL("%s (%s)", why, fz_err_name(rc));
    return 0;
  }
  if (out != *buf) {
    api->free_memory(*buf);
    *buf = out;
    *buf_size = out_len;
  }
  return out_len;
}

static const H5Z_class2_t fzd_class = {
    .version = H5Z_CLASS_T_VERS,
    .id = CLAIMED_ID,
    .encoder_present = 1,
    .decoder_present = 1,
#ifdef H5Z_FZD_LEGACY
    .name = "fzd error-bounded compression, legacy id 305, read-only (docs/hdf5.md)",
    .set_local = NULL,
#else
    .name = "fzd error-bounded compression (docs/hdf5.md)",
    .set_local = set_local,
#endif
    .can_apply = can_apply,
    .filter = filter,
};

__attribute__((visibility("default"))) H5PL_type_t H5PLget_plugin_type(void) {
  return H5PL_TYPE_FILTER;
}

/* Resolves HDF5's calls from the library asking, so that a process without
 * a usable one learns why as the plugin loads, not at its first chunk. */
__attribute__((visibility("default"))) const void *H5PLget_plugin_info(void) {
  char why[512];
  if (!CALLER_API()) {
    no_api(why);
    return NULL;
  }
  return &fzd_class;
}
