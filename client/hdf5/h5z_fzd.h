/*
 * h5z_fzd.h - the fzd HDF5 filter: its id and the layout of its filter
 * parameters (cd_values), for programs that set the filter with
 * H5Pset_filter().  The plugin itself (libh5z_fzd.so) is found by HDF5
 * through HDF5_PLUGIN_PATH; this header is all a writer needs besides
 * hdf5.h, and a reader needs nothing.
 *
 * cd_values a writer gives (docs/hdf5.md):
 *   [0] pipeline: H5Z_FZD_BALANCED, H5Z_FZD_FAST or H5Z_FZD_LOSSLESS
 *   [1] mode: H5Z_FZD_ABS, H5Z_FZD_REL (relative to each chunk's range) or
 *       H5Z_FZD_PWREL
 *   [2] [3] the bound, a double: its low and its high 32 bits
 *   [4] optional: 1 when a fill value follows, else 0
 *   [5] [6] the fill value, a double: low and high 32 bits
 * The plugin's set_local callback completes them with the element type and
 * the chunk's shape (H5Z_FZD_CD_DTYPE and after), which the archive of every
 * chunk records as well.
 */
#ifndef H5Z_FZD_H
#define H5Z_FZD_H

#include <stdint.h>
#include <string.h>

/* From the range HDF5 leaves for testing (256-511): provisional until an
 * id is registered with The HDF Group. */
#define H5Z_FILTER_FZD 305

#define H5Z_FZD_BALANCED 0u
#define H5Z_FZD_FAST 1u
#define H5Z_FZD_LOSSLESS 2u

#define H5Z_FZD_ABS 0u
#define H5Z_FZD_REL 1u
#define H5Z_FZD_PWREL 2u

/* Indices into cd_values. */
#define H5Z_FZD_CD_PIPELINE 0
#define H5Z_FZD_CD_MODE 1
#define H5Z_FZD_CD_EB 2        /* and 3 */
#define H5Z_FZD_CD_HAS_FILL 4
#define H5Z_FZD_CD_FILL 5      /* and 6 */
#define H5Z_FZD_CD_DTYPE 7     /* set by the plugin: fz_dtype of fz.h */
#define H5Z_FZD_CD_NDIMS 8     /* set by the plugin */
#define H5Z_FZD_CD_DIMS 9      /* set by the plugin: the chunk's dims */
#define H5Z_FZD_CD_USER_MIN 4  /* a writer gives 4 or 7 values */
#define H5Z_FZD_CD_USER_MAX 7

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

#endif /* H5Z_FZD_H */
