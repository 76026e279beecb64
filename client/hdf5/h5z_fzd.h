/*
 * h5z_fzd.h - the fzd HDF5 filter: its id and the layout of its filter
 * parameters (cd_values), for programs that set the filter with
 * H5Pset_filter().  The plugin itself (libh5z_fzd.so) is found by HDF5
 * through HDF5_PLUGIN_PATH; this header is all a writer needs besides
 * hdf5.h, and a reader needs nothing.
 *
 * cd_values a writer gives (docs/hdf5.md):
 *   [0] pipeline: H5Z_FZD_BALANCED, H5Z_FZD_FAST, H5Z_FZD_LOSSLESS,
 *       H5Z_FZD_RATIO, or H5Z_FZD_CHAIN: the pipeline's text follows the
 *       fill value
 *   [1] mode: H5Z_FZD_ABS, H5Z_FZD_REL (relative to each chunk's range) or
 *       H5Z_FZD_PWREL
 *   [2] [3] the bound, a double: its low and its high 32 bits
 *   [4] optional (required with H5Z_FZD_CHAIN): 1 when a fill value
 *       follows, else 0 (set_local then takes the dataset's own fill
 *       value of a floating-point dataset, if it has one, and writes 2)
 *   [5] [6] the fill value, a double: low and high 32 bits (0 0 for none)
 *   with H5Z_FZD_CHAIN only:
 *   [7] the chain text's length in bytes, 1 to H5Z_FZD_CHAIN_MAX
 *   [8] ... the text, 4 bytes per value, the first byte in the low 8 bits
 *       (little-endian), the last value padded with zero bytes
 * A lossless preset may be given as its id alone (1 value): bound 0.
 * The plugin's set_local callback completes them with the element type and
 * the chunk's shape, appended after the writer's values (at
 * H5Z_FZD_CD_DTYPE and after for the presets), which the archive of every
 * chunk records as well.
 */
#ifndef H5Z_FZD_H
#define H5Z_FZD_H

#include <stdint.h>
#include <string.h>

/* From the range HDF5 leaves for unregistered use (32768-65535), until The
 * HDF Group registers an id for fzd (docs/hdf5.md); the plugin will then
 * read both.  Files written before took 305, which the registry gives to
 * LZO (PyTables): the read-only plugin libh5z_fzd_legacy.so reads them, and
 * `python3 -m fzd.h5 migrate` rewrites them to H5Z_FILTER_FZD. */
#define H5Z_FILTER_FZD 62160
#define H5Z_FILTER_FZD_LEGACY 305

#define H5Z_FZD_BALANCED 0u
#define H5Z_FZD_FAST 1u
#define H5Z_FZD_LOSSLESS 2u
#define H5Z_FZD_CHAIN 3u /* any pipeline text fzd takes, in the values after [6] */
/* Presets added later take the ids after the chain's, so files written
 * before keep their meaning. */
#define H5Z_FZD_RATIO 4u

/* The longest chain text, in bytes.  fzd takes 1023 (docs/protocol.md),
 * but HDF5 hands a filter at most 256 of its parameters when a dataset is
 * created (H5Pget_filter_by_id2), and the text shares them with 8 values
 * before it and at most 6 that the plugin appends: 242 values of 4 bytes. */
#define H5Z_FZD_CHAIN_MAX 968u

#define H5Z_FZD_ABS 0u
#define H5Z_FZD_REL 1u
#define H5Z_FZD_PWREL 2u

/* Indices into cd_values.  DTYPE, NDIMS and DIMS are those of a preset's;
 * a chain's come H5Z_FZD_CHAIN_WORDS(len) + 1 values later, after its
 * text. */
#define H5Z_FZD_CD_PIPELINE 0
#define H5Z_FZD_CD_MODE 1
#define H5Z_FZD_CD_EB 2        /* and 3 */
#define H5Z_FZD_CD_HAS_FILL 4
#define H5Z_FZD_CD_FILL 5      /* and 6 */
#define H5Z_FZD_CD_DTYPE 7     /* set by the plugin: fz_dtype of fz.h, with
                                * H5Z_FZD_DTYPE_BE for big-endian data */
#define H5Z_FZD_CD_NDIMS 8     /* set by the plugin */
#define H5Z_FZD_CD_DIMS 9      /* set by the plugin: the chunk's dims */
#define H5Z_FZD_CD_USER_MIN 4  /* a writer gives 4 or 7 values for a preset */
#define H5Z_FZD_CD_USER_MAX 7
#define H5Z_FZD_CD_CHAIN_LEN 7 /* H5Z_FZD_CHAIN: the text's length in bytes */
#define H5Z_FZD_CD_CHAIN 8     /* H5Z_FZD_CHAIN: the text, 4 bytes a value */

/* Values of cd[H5Z_FZD_CD_HAS_FILL] beside 0 and 1: set_local took the
 * dataset's fill value (H5Pget_fill_value) because the writer gave none. */
#define H5Z_FZD_FILL_DATASET 2u
/* In the element type's value: the dataset's values are big-endian.  The
 * filter swaps them to little-endian before compressing and back after
 * decoding; the archive is little-endian, as every fzd archive. */
#define H5Z_FZD_DTYPE_BE 0x100u

/* The number of values that hold a chain text of len bytes. */
#define H5Z_FZD_CHAIN_WORDS(len) (((size_t)(len) + 3u) / 4u)
/* The number of values a writer gives with a chain text of len bytes. */
#define H5Z_FZD_CHAIN_NELMTS(len) (H5Z_FZD_CD_CHAIN + H5Z_FZD_CHAIN_WORDS(len))

/* Stores d in cd[0] (low 32 bits) and cd[1] (high 32 bits). */
static inline void h5z_fzd_put_double(unsigned *cd, double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  cd[0] = (unsigned)(u & 0xffffffffu);
  cd[1] = (unsigned)(u >> 32);
}

/* The double h5z_fzd_put_double() stored at cd. */
static inline double h5z_fzd_get_double(const unsigned *cd) {
  uint64_t u = (uint64_t)cd[0] | ((uint64_t)cd[1] << 32);
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

/* Stores the chain text's length at cd[H5Z_FZD_CD_CHAIN_LEN] and its bytes
 * from cd[H5Z_FZD_CD_CHAIN] on; cd must have H5Z_FZD_CHAIN_NELMTS(strlen)
 * values.  Sets cd[H5Z_FZD_CD_PIPELINE] to H5Z_FZD_CHAIN; the mode, bound
 * and fill value are the caller's.  Returns the number of values to give
 * H5Pset_filter(). */
static inline size_t h5z_fzd_put_chain(unsigned *cd, const char *chain) {
  size_t len = strlen(chain);
  cd[H5Z_FZD_CD_PIPELINE] = H5Z_FZD_CHAIN;
  cd[H5Z_FZD_CD_CHAIN_LEN] = (unsigned)len;
  for (size_t w = 0; w < H5Z_FZD_CHAIN_WORDS(len); w++) {
    unsigned v = 0;
    for (size_t b = 0; b < 4 && 4 * w + b < len; b++)
      v |= (unsigned)(unsigned char)chain[4 * w + b] << (8 * b);
    cd[H5Z_FZD_CD_CHAIN + w] = v;
  }
  return H5Z_FZD_CHAIN_NELMTS(len);
}

#endif /* H5Z_FZD_H */
