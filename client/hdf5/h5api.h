/*
 * h5api.h - the few parts of HDF5's C API the filter plugin uses, declared
 * here rather than taken from hdf5.h, and resolved at run time from the
 * HDF5 library that loaded the plugin (h5api.c).
 *
 * The plugin links no libhdf5: a process may carry its own HDF5 (pip's
 * h5py and netCDF4 wheels bundle 1.12-1.14 under hashed names, Debian's
 * tools link 1.10), and a plugin linked to one of them would call a second
 * library from inside the first one's callbacks, whose identifiers mean
 * nothing there.  The types, enum values and the filter class layout below
 * are those of HDF5 1.10 to 1.14, which have not changed them: hid_t is 64
 * bits since 1.10, hsize_t 64 bits, H5Z_class2_t version 1.
 */
#ifndef H5ZF_H5API_H
#define H5ZF_H5API_H

#include <stddef.h>
#include <stdint.h>

typedef int64_t hid_t;
typedef int herr_t;
typedef int htri_t;
typedef unsigned long long hsize_t;
typedef int H5Z_filter_t;

#define H5E_DEFAULT ((hid_t)0)
#define H5Z_FLAG_MANDATORY 0x0000u
#define H5Z_FLAG_OPTIONAL 0x0001u
#define H5Z_FLAG_REVERSE 0x0100u
#define H5Z_CLASS_T_VERS 1

typedef enum H5PL_type_t { H5PL_TYPE_ERROR = -1, H5PL_TYPE_FILTER = 0 } H5PL_type_t;
typedef enum H5T_class_t { H5T_NO_CLASS = -1, H5T_INTEGER = 0, H5T_FLOAT = 1 } H5T_class_t;
typedef enum H5T_order_t { H5T_ORDER_ERROR = -1, H5T_ORDER_LE = 0, H5T_ORDER_BE = 1 } H5T_order_t;
typedef enum H5T_sign_t { H5T_SGN_ERROR = -1, H5T_SGN_NONE = 0, H5T_SGN_2 = 1 } H5T_sign_t;
typedef enum H5D_fill_value_t {
  H5D_FILL_VALUE_ERROR = -1,
  H5D_FILL_VALUE_UNDEFINED = 0,
  H5D_FILL_VALUE_DEFAULT = 1,
  H5D_FILL_VALUE_USER_DEFINED = 2
} H5D_fill_value_t;

typedef htri_t (*H5Z_can_apply_func_t)(hid_t dcpl_id, hid_t type_id, hid_t space_id);
typedef herr_t (*H5Z_set_local_func_t)(hid_t dcpl_id, hid_t type_id, hid_t space_id);
typedef size_t (*H5Z_func_t)(unsigned flags, size_t cd_nelmts, const unsigned cd_values[],
                             size_t nbytes, size_t *buf_size, void **buf);

/* What H5PLget_plugin_info() hands HDF5, field for field. */
typedef struct H5Z_class2_t {
  int version;
  H5Z_filter_t id;
  unsigned encoder_present;
  unsigned decoder_present;
  const char *name;
  H5Z_can_apply_func_t can_apply;
  H5Z_set_local_func_t set_local;
  H5Z_func_t filter;
} H5Z_class2_t;

/* The HDF5 calls and error-class identifiers of one loaded HDF5 library.
 * The error classes are the library's global variables (H5E_ERR_CLS_g and
 * the others that hdf5.h's macros read), so they are read at each use. */
typedef struct h5zf_api {
  herr_t (*Epush2)(hid_t stack, const char *file, const char *func, unsigned line, hid_t cls,
                   hid_t maj, hid_t min, const char *fmt, ...);
  H5T_class_t (*Tget_class)(hid_t type);
  size_t (*Tget_size)(hid_t type);
  H5T_order_t (*Tget_order)(hid_t type);
  H5T_sign_t (*Tget_sign)(hid_t type);
  herr_t (*Pget_filter_by_id2)(hid_t plist, H5Z_filter_t id, unsigned *flags, size_t *n,
                               unsigned cd[], size_t namelen, char name[], unsigned *config);
  herr_t (*Pmodify_filter)(hid_t plist, H5Z_filter_t id, unsigned flags, size_t n,
                           const unsigned cd[]);
  int (*Pget_chunk)(hid_t plist, int max_ndims, hsize_t dims[]);
  herr_t (*Pfill_value_defined)(hid_t plist, H5D_fill_value_t *status);
  herr_t (*Pget_fill_value)(hid_t plist, hid_t type, void *value);
  void *(*allocate_memory)(size_t size, _Bool clear);
  herr_t (*free_memory)(void *mem);
  const hid_t *ERR_CLS_g, *PLINE_g, *CANTFILTER_g;
  const void *base; /* where the library is mapped: the key of the table */
} h5zf_api;

/* The API of the HDF5 library whose code is at caller (a return address
 * taken in a callback HDF5 made), resolved at the first call for that
 * library and kept.  Where caller is not in a library that defines HDF5's
 * calls (a statically linked program, a wrapper between), the first
 * loaded object that defines H5Zregister is taken.  NULL, with why, when
 * none does or a symbol is missing. */
const h5zf_api *h5zf_api_for(const void *caller, char *why, size_t why_len);

#endif /* H5ZF_H5API_H */
