/*
 * h5api.c - finds the HDF5 library that calls the plugin and takes its
 * functions from it (h5api.h says why the plugin links none).
 *
 * The library that calls a callback is the one whose code holds the
 * callback's return address: dladdr() names its file, and dlopen() of that
 * file with RTLD_NOLOAD hands back the copy already mapped (never a second
 * one), from which dlsym() takes each symbol.  Two HDF5 libraries may load
 * the same plugin file in one process (Debian's PyTables beside pip's
 * h5py: dlopen() of one path gives one mapping), so the table is kept per
 * library, keyed by where it is mapped, and each callback asks for its own.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr, dl_iterate_phdr, RTLD_NOLOAD */
#endif
#include "h5api.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* More HDF5 libraries than this in one process is not a case to plan for;
 * past it the oldest entries are not replaced, the lookup just fails. */
#define MAX_LIBS 8

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static h5zf_api libs[MAX_LIBS];
static unsigned n_libs;

/* Takes every symbol from handle into api; the name of the first missing
 * one into why, -1. */
static int resolve(void *handle, h5zf_api *api, char *why, size_t why_len) {
  static const struct {
    const char *name;
    size_t offset;
  } syms[] = {
#define SYM(field, name) {name, offsetof(h5zf_api, field)}
      SYM(Epush2, "H5Epush2"),
      SYM(Tget_class, "H5Tget_class"),
      SYM(Tget_size, "H5Tget_size"),
      SYM(Tget_order, "H5Tget_order"),
      SYM(Tget_sign, "H5Tget_sign"),
      SYM(Pget_filter_by_id2, "H5Pget_filter_by_id2"),
      SYM(Pmodify_filter, "H5Pmodify_filter"),
      SYM(Pget_chunk, "H5Pget_chunk"),
      SYM(Pfill_value_defined, "H5Pfill_value_defined"),
      SYM(Pget_fill_value, "H5Pget_fill_value"),
      SYM(allocate_memory, "H5allocate_memory"),
      SYM(free_memory, "H5free_memory"),
      SYM(ERR_CLS_g, "H5E_ERR_CLS_g"),
      SYM(PLINE_g, "H5E_PLINE_g"),
      SYM(CANTFILTER_g, "H5E_CANTFILTER_g"),
#undef SYM
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *p = dlsym(handle, syms[i].name);
    if (!p) {
      snprintf(why, why_len, "the HDF5 library has no %s", syms[i].name);
      return -1;
    }
    /* Function and object pointers share a representation on every
     * platform with dlsym(); POSIX requires it. */
    memcpy((char *)api + syms[i].offset, &p, sizeof p);
  }
  return 0;
}

/* An already loaded object that defines H5Zregister: the HDF5 library of a
 * process whose callbacks do not come straight from it. */
struct scan {
  void *handle;
  const void *base;
};

static int scan_one(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  struct scan *s = arg;
  /* The main program has an empty name; dlopen(NULL) is its handle. */
  const char *name = info->dlpi_name && *info->dlpi_name ? info->dlpi_name : NULL;
  void *h = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
  if (!h)
    return 0;
  void *reg = dlsym(h, "H5Zregister");
  Dl_info where;
  if (reg && dladdr(reg, &where) && where.dli_fbase) {
    s->handle = h;
    s->base = where.dli_fbase;
    return 1;
  }
  dlclose(h);
  return 0;
}

/* The handle and base of the library holding caller, when it defines
 * H5Zregister; else those of the first loaded object that does. */
static void *library_of(const void *caller, const void **base, char *why, size_t why_len) {
  Dl_info where;
  if (caller && dladdr(caller, &where) && where.dli_fname && where.dli_fbase) {
    void *h = dlopen(*where.dli_fname ? where.dli_fname : NULL, RTLD_LAZY | RTLD_NOLOAD);
    if (h && dlsym(h, "H5Zregister")) {
      *base = where.dli_fbase;
      return h;
    }
    if (h)
      dlclose(h);
  }
  struct scan s = {NULL, NULL};
  dl_iterate_phdr(scan_one, &s);
  if (!s.handle) {
    snprintf(why, why_len, "no HDF5 library (one that defines H5Zregister) is loaded");
    return NULL;
  }
  *base = s.base;
  return s.handle;
}

const h5zf_api *h5zf_api_for(const void *caller, char *why, size_t why_len) {
  /* The entry of the library at caller's base, when there is one. */
  Dl_info where;
  const void *key = caller && dladdr(caller, &where) ? where.dli_fbase : NULL;
  const h5zf_api *found = NULL;
  pthread_mutex_lock(&lock);
  for (unsigned i = 0; i < n_libs && !found; i++)
    if (key && libs[i].base == key)
      found = &libs[i];
  if (!found) {
    const void *base = NULL;
    void *h = library_of(caller, &base, why, why_len);
    for (unsigned i = 0; h && i < n_libs && !found; i++)
      if (libs[i].base == base)
        found = &libs[i];
    if (h && !found) {
      h5zf_api api;
      memset(&api, 0, sizeof api);
      if (n_libs == MAX_LIBS)
        snprintf(why, why_len, "more than %d HDF5 libraries in one process", MAX_LIBS);
      else if (resolve(h, &api, why, why_len) == 0) {
        api.base = base;
        libs[n_libs] = api;
        found = &libs[n_libs++];
      }
    }
    /* The library calling us stays loaded while it calls: the handle's
     * reference is not needed to keep the functions valid. */
    if (h)
      dlclose(h);
  }
  pthread_mutex_unlock(&lock);
  return found;
}
