/*
 * jit.c - NVRTC, the driver's module calls, and the modules each context
 * has loaded (jit.h).
 *
 * NVRTC is opened with dlopen, once per process, so that fzd starts and
 * serves (with the ahead-of-time kernels) where it is not installed.  The
 * driver calls come through the runtime (cudaGetDriverEntryPointByVersion)
 * for the reason import.c gives: linking the driver library would keep the
 * program from starting on a machine without one.  Modules are loaded into
 * the device's primary context, the one the runtime uses, so a CUfunction
 * launches on the runtime's streams.
 *
 * A context keeps one entry per generated source: the module and its
 * function once loaded, or the fact that it failed, so a chain whose
 * compile failed is not compiled again for every plan.  Lookups hold the
 * context's lock; the compile itself runs outside it, in the module cache,
 * which makes concurrent first callers of one source wait for one build.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "fze_chain.h"
#include "gpu_err.h"
#include "jit.h"
#include "fzk_sha256.h"
#include "jit_cache.h"
#include "ratio_gpu.h"

/* ---- NVRTC ---- */

/* nvrtc.h's calls, as pointers: nvrtcResult is an int enum, nvrtcProgram a
 * pointer. */
typedef void *nvrtc_prog;
static struct {
  int (*create)(nvrtc_prog *p, const char *src, const char *name, int nh, const char *const *h,
                const char *const *names);
  int (*compile)(nvrtc_prog p, int n, const char *const *opts);
  int (*destroy)(nvrtc_prog *p);
  int (*log_size)(nvrtc_prog p, size_t *n);
  int (*log)(nvrtc_prog p, char *buf);
  int (*cubin_size)(nvrtc_prog p, size_t *n);
  int (*cubin)(nvrtc_prog p, char *buf);
  int (*version)(int *major, int *minor);
  const char *(*err)(int r);
  int major, minor;
  int rc;             /* of the one load */
  char why[256];      /* why it failed */
} nv;
static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

static void nv_open(void) {
  const char *names[] = {getenv("FZ_NVRTC_LIBRARY"), "libnvrtc.so.13", "libnvrtc.so"};
  void *h = NULL;
  const char *tried = NULL;
  for (unsigned i = 0; i < 3 && h == NULL; i++) {
    if (names[i] == NULL || names[i][0] == 0)
      continue;
    h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL && tried == NULL) {
      const char *e = dlerror();
      snprintf(nv.why, sizeof nv.why, "NVRTC not found: %s", e ? e : names[i]);
      tried = names[i];
    }
    /* A library named by the environment is the only one tried. */
    if (i == 0)
      break;
  }
  if (h == NULL) {
    nv.rc = FZ_ENOSYS;
    return;
  }
#define NV_SYM(field, name)                                                    \
  do {                                                                         \
    *(void **)&nv.field = dlsym(h, name);                                      \
    if (nv.field == NULL) {                                                    \
      snprintf(nv.why, sizeof nv.why, "NVRTC has no %s", name);                \
      nv.rc = FZ_ENOSYS;                                                       \
      return;                                                                  \
    }                                                                          \
  } while (0)
  NV_SYM(create, "nvrtcCreateProgram");
  NV_SYM(compile, "nvrtcCompileProgram");
  NV_SYM(destroy, "nvrtcDestroyProgram");
  NV_SYM(log_size, "nvrtcGetProgramLogSize");
  NV_SYM(log, "nvrtcGetProgramLog");
  NV_SYM(cubin_size, "nvrtcGetCUBINSize");
  NV_SYM(cubin, "nvrtcGetCUBIN");
  NV_SYM(version, "nvrtcVersion");
  NV_SYM(err, "nvrtcGetErrorString");
#undef NV_SYM
  if (nv.version(&nv.major, &nv.minor) != 0) {
    snprintf(nv.why, sizeof nv.why, "nvrtcVersion failed");
    nv.rc = FZ_ENOSYS;
    return;
  }
  nv.rc = 0;
}

int fzk_nvrtc_load(char *why, size_t why_len) {
  pthread_once(&nv_once, nv_open);
  if (nv.rc < 0)
    fze_why(why, why_len, "%s", nv.why);
  return nv.rc;
}

void fzk_nvrtc_version(int *major, int *minor) {
  *major = nv.major;
  *minor = nv.minor;
}

/* The nvcc build's arithmetic flags (kernels/CMakeLists.txt): the archive
 * bytes depend on them.  -default-device: the lambdas inside device
 * functions (chain32_ops.cuh) are device code, as nvcc takes them. */
static const char *const base_opts[] = {"-fmad=false", "--prec-div=true", "--prec-sqrt=true",
                                         "--ftz=false", "--std=c++17", "-default-device",
                                         "--pre-include=fzk_rtc.h"};
#define NBASE (sizeof base_opts / sizeof base_opts[0])

void fzk_nvrtc_options(unsigned arch, char *buf, size_t len) {
  size_t o = (size_t)snprintf(buf, len, "--gpu-architecture=sm_%u", arch);
  for (unsigned i = 0; i < NBASE && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, " %s", base_opts[i]);
}

int fzk_nvrtc_compile(const char *source, unsigned arch, void **image, size_t *len, char *why,
                      size_t why_len) {
  *image = NULL;
  *len = 0;
  int rc = fzk_nvrtc_load(why, why_len);
  if (rc < 0)
    return rc;
  const char *names[64], *texts[64];
  unsigned nh = fzk_embedded_count < 64 ? fzk_embedded_count : 64;
  for (unsigned i = 0; i < nh; i++) {
    names[i] = fzk_embedded_headers[i].name;
    texts[i] = fzk_embedded_headers[i].text;
  }
  char archopt[40];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=sm_%u", arch);
  const char *opts[NBASE + 1];
  opts[0] = archopt;
  for (unsigned i = 0; i < NBASE; i++)
    opts[i + 1] = base_opts[i];
  nvrtc_prog p = NULL;
  int r = nv.create(&p, source, "fzk_gen.cu", (int)nh, texts, names);
  if (r != 0) {
    fze_why(why, why_len, "nvrtcCreateProgram: %s", nv.err(r));
    return FZ_ECUDA;
  }
  r = nv.compile(p, NBASE + 1, opts);
  if (r != 0) {
    size_t n = 0;
    char *log = NULL;
    if (nv.log_size(p, &n) == 0 && n > 0 && (log = malloc(n)) != NULL && nv.log(p, log) == 0)
      fze_why(why, why_len, "NVRTC (sm_%u): %s: %s", arch, nv.err(r), log);
    else
      fze_why(why, why_len, "NVRTC (sm_%u): %s", arch, nv.err(r));
    free(log);
    nv.destroy(&p);
    return FZ_ECUDA;
  }
  size_t n = 0;
  void *img = NULL;
  if ((r = nv.cubin_size(p, &n)) != 0 || n == 0 || (img = malloc(n)) == NULL ||
      (r = nv.cubin(p, img)) != 0) {
    fze_why(why, why_len, "nvrtcGetCUBIN: %s", r ? nv.err(r) : "no image");
    free(img);
    nv.destroy(&p);
    return r ? FZ_ECUDA : FZ_ENOMEM;
  }
  nv.destroy(&p);
  *image = img;
  *len = n;
  return 0;
}

/* ---- the driver's module calls ---- */

static struct {
  CUresult (*load)(CUmodule *m, const void *image);
  CUresult (*unload)(CUmodule m);
  CUresult (*get)(CUfunction *f, CUmodule m, const char *name);
  CUresult (*attr)(CUfunction f, CUfunction_attribute a, int v);
  CUresult (*errname)(CUresult e, const char **s);
  const char *missing;
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void *entry(const char *name) { return fzk_driver_entry(name, &drv.missing); }

static void drv_load(void) {
  *(void **)&drv.load = entry("cuModuleLoadData");
  *(void **)&drv.unload = entry("cuModuleUnload");
  *(void **)&drv.get = entry("cuModuleGetFunction");
  *(void **)&drv.attr = entry("cuFuncSetAttribute");
  *(void **)&drv.errname = entry("cuGetErrorName");
}

static int drv_ready(char *why, size_t why_len) {
  pthread_once(&drv_once, drv_load);
  if (drv.missing != NULL) {
    fze_why(why, why_len, "the CUDA driver has no %s", drv.missing);
    return FZ_ECUDA;
  }
  return 0;
}

static int drv_error(CUresult e, const char *what, char *why, size_t why_len) {
  const char *name = NULL;
  if (drv.errname == NULL || drv.errname(e, &name) != CUDA_SUCCESS || name == NULL)
    name = "unknown";
  fze_why(why, why_len, "%s: %s", what, name);
  return e == CUDA_ERROR_OUT_OF_MEMORY ? FZ_EGPUOOM : FZ_ECUDA;
}

/* The dynamic shared memory of the kernel for d in direction dir. */
static uint32_t smem_of(const fzk_desc *d, fzk_jit_dir dir) {
  if (!d->k32)
    return d->smem;
  return dir == FZK_JIT_ENCODE ? d->smem_e32 : d->smem_d32;
}

int fzk_jit_launch_encode32(void *fn, const fzk_desc *d, const void *d_in,
                            const fzk_qparams *d_qp, uint8_t *d_out, uint64_t out_cap,
                            uint64_t header_len, uint64_t table_off, uint32_t *d_crcs,
                            uint64_t *d_lb, const uint32_t *d_tab, fz_gpu_stream s) {
  if (d->nchunks == 0)
    return 0;
  fzk_desc dv = *d;
  void *args[] = {&dv,  &d_in,      &d_qp,   &d_out, &out_cap,
                  &header_len, &table_off, &d_crcs, &d_lb,  &d_tab};
  return fzk_driver_launch(fn, (unsigned)d->nchunks, FZK_NT, d->smem_e32, s, args);
}

int fzk_jit_launch_decode32(void *fn, const fzk_desc *d, const uint8_t *d_pay, uint64_t pay_len,
                            const uint64_t *d_offs, const uint8_t *d_sizes16, const fzk_qparams *d_qp,
                            void *d_out, int out_vec, uint32_t *d_status, uint32_t *d_crcs,
                            const uint32_t *d_tab, fz_gpu_stream s) {
  if (d->nchunks == 0)
    return 0;
  fzk_desc dv = *d;
  void *args[] = {&dv,  &d_pay,    &pay_len,  &d_offs,  &d_sizes16, &d_qp,
                  &d_out, &out_vec, &d_status, &d_crcs, &d_tab};
  return fzk_driver_launch(fn, (unsigned)d->nchunks, FZK_NT, d->smem_d32, s, args);
}

/* ---- the modules of one context ---- */

typedef struct module {
  char *source;
  CUmodule mod;
  CUfunction fn;
  int failed;
  struct module *next;
} module;

struct fzk_jit {
  pthread_mutex_t lock;
  int device;
  unsigned arch;
  int enabled;
  char options[256];
  int driver;         /* the driver's version, for the cache key's target */
  fzk_jit_cache *cache;
  module *mods;
  uint64_t loads;
  int chain_used;     /* a plan or a decoder asked for a chain's kernel */
  fzk_kern helpers;   /* with have_helpers: fzk_jit_helpers */
  int have_helpers;
  fzk_kern ratio;     /* with have_ratio: fzk_jit_ratio; ratio_failed: its */
  int have_ratio;     /* compile failed, not tried again */
  int ratio_failed;
  char failure[2048]; /* failures not fetched yet, one line each */
  atomic_int pending; /* failure is not empty: read without the lock, so
                       * callers that ask after every job pay no lock */
};

int fzk_jit_create(int device, fzk_jit **out, char *why, size_t why_len) {
  *out = NULL;
  int major = 0, minor = 0, dv = 0, rc = 0;
  if ((rc = fzk_cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                           "cudaDeviceGetAttribute", why, why_len)) < 0 ||
      (rc = fzk_cuda_check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
                           "cudaDeviceGetAttribute", why, why_len)) < 0 ||
      (rc = fzk_cuda_check(cudaDriverGetVersion(&dv), "cudaDriverGetVersion", why, why_len)) < 0)
    return rc;
  fzk_jit *j = calloc(1, sizeof *j);
  if (j == NULL)
    return FZ_ENOMEM;
  pthread_mutex_init(&j->lock, NULL);
  j->device = device;
  j->arch = (unsigned)(10 * major + minor);
  j->enabled = 1;
  j->driver = dv;
  fzk_nvrtc_options(j->arch, j->options, sizeof j->options);
  if ((rc = fzk_jit_cache_open(NULL, 0, &j->cache, why, why_len)) < 0) {
    fzk_jit_destroy(j);
    return rc;
  }
  *out = j;
  return 0;
}

void fzk_jit_destroy(fzk_jit *j) {
  if (j == NULL)
    return;
  for (module *m = j->mods, *n; m; m = n) {
    n = m->next;
    if (m->mod != NULL && drv.unload != NULL)
      drv.unload(m->mod);
    free(m->source);
    free(m);
  }
  fzk_jit_cache_close(j->cache);
  pthread_mutex_destroy(&j->lock);
  free(j);
}

/* Appends one failure line for fzk_jit_failure (under the lock); the
 * oldest text stays when there is no room. */
static void note_failure(fzk_jit *j, const char *text) {
  size_t o = strlen(j->failure);
  if (o + 2 < sizeof j->failure)
    snprintf(j->failure + o, sizeof j->failure - o, "%s%s", o ? "\n" : "", text);
  atomic_store(&j->pending, j->failure[0] != 0);
}

int fzk_jit_config(fzk_jit *j, const char *cache_dir, uint64_t max_disk_bytes, int enabled,
                   char *why, size_t why_len) {
  fzk_jit_cache *c = NULL;
  int rc = fzk_jit_cache_open(cache_dir, max_disk_bytes, &c, why, why_len);
  if (rc < 0)
    return rc;
  pthread_mutex_lock(&j->lock);
  /* A directory it cannot use leaves the cache in memory: said once. */
  const char *disk = fzk_jit_cache_disk_error(c);
  if (disk != NULL)
    note_failure(j, disk);
  if (j->mods != NULL) {
    pthread_mutex_unlock(&j->lock);
    fzk_jit_cache_close(c);
    fze_why(why, why_len, "the JIT is configured before the context's first plan");
    return FZ_EINVAL;
  }
  fzk_jit_cache_close(j->cache);
  j->cache = c;
  j->enabled = enabled != 0;
  pthread_mutex_unlock(&j->lock);
  return 0;
}

int fzk_jit_failure(fzk_jit *j, char *buf, size_t len) {
  if (!atomic_load(&j->pending))
    return 0;
  pthread_mutex_lock(&j->lock);
  int had = j->failure[0] != 0;
  if (had) {
    if (buf != NULL && len > 0)
      snprintf(buf, len, "%s", j->failure);
    j->failure[0] = 0;
    atomic_store(&j->pending, 0);
  }
  pthread_mutex_unlock(&j->lock);
  return had;
}

typedef struct build_arg {
  const char *source;
  unsigned arch;
} build_arg;

static int build(void *arg, void **image, size_t *len, char *why, size_t why_len) {
  const build_arg *b = arg;
  return fzk_nvrtc_compile(b->source, b->arch, image, len, why, why_len);
}

void fzk_headers_digest(const fzk_embedded *h, unsigned n, char out[17]) {
  fzk_sha256_ctx c;
  fzk_sha256_init(&c);
  for (unsigned i = 0; i < n; i++)
    for (int part = 0; part < 2; part++) {
      const char *txt = part ? h[i].text : h[i].name;
      uint64_t len = strlen(txt);
      unsigned char le[8];
      for (unsigned b = 0; b < 8; b++)
        le[b] = (unsigned char)(len >> (8 * b));
      fzk_sha256_update(&c, le, 8);
      fzk_sha256_update(&c, txt, len);
    }
  unsigned char d[FZK_SHA256_LEN];
  fzk_sha256_final(&c, d);
  for (unsigned b = 0; b < 8; b++)
    snprintf(out + 2 * b, 3, "%02x", d[b]);
}

static char headers_hex[17];
static pthread_once_t headers_once = PTHREAD_ONCE_INIT;
static void headers_init(void) {
  fzk_headers_digest(fzk_embedded_headers, fzk_embedded_count, headers_hex);
}

void fzk_jit_target(unsigned arch, int nvrtc_major, int nvrtc_minor, int driver, char *buf,
                    size_t len) {
  pthread_once(&headers_once, headers_init);
  snprintf(buf, len, "sm_%u nvrtc %d.%d driver %d headers %s", arch, nvrtc_major, nvrtc_minor,
           driver, headers_hex);
}

static module *find(fzk_jit *j, const char *source) {
  for (module *m = j->mods; m; m = m->next)
    if (strcmp(m->source, source) == 0)
      return m;
  return NULL;
}

/* Compiles src (through the module cache) and loads it; the functions
 * named.  Nothing is left loaded on failure. */
static int load(fzk_jit *j, const char *src, unsigned nfn, const char *const *names,
                CUmodule *mod, CUfunction *fns, char *why, size_t why_len) {
  *mod = NULL;
  int rc = fzk_nvrtc_load(why, why_len);
  if (rc == 0)
    rc = drv_ready(why, why_len);
  if (rc < 0)
    return rc;
  int ma, mi;
  fzk_nvrtc_version(&ma, &mi);
  char target[160];
  fzk_jit_target(j->arch, ma, mi, j->driver, target, sizeof target);
  build_arg b = {src, j->arch};
  const void *img = NULL;
  size_t len = 0;
  rc = fzk_jit_cache_get(j->cache, src, j->options, target, build, &b, &img, &len, why, why_len);
  if (rc < 0)
    return rc;
  CUresult e = drv.load(mod, img);
  if (e != CUDA_SUCCESS) {
    *mod = NULL;
    return drv_error(e, "cuModuleLoadData", why, why_len);
  }
  for (unsigned i = 0; i < nfn; i++)
    if ((e = drv.get(&fns[i], *mod, names[i])) != CUDA_SUCCESS) {
      rc = drv_error(e, "cuModuleGetFunction", why, why_len);
      drv.unload(*mod);
      *mod = NULL;
      return rc;
    }
  return 0;
}

/* Records src's module (or its failure, rc < 0 with why) unless another
 * thread did meanwhile; the entry that stands.  NULL when out of memory
 * (mod is then unloaded). */
static module *record(fzk_jit *j, char *src, CUmodule mod, CUfunction fn, int rc,
                      const char *why) {
  pthread_mutex_lock(&j->lock);
  module *m = find(j, src);
  if (m != NULL) {
    if (mod != NULL)
      drv.unload(mod);
    free(src);
    pthread_mutex_unlock(&j->lock);
    return m;
  }
  m = calloc(1, sizeof *m);
  if (m == NULL) {
    if (mod != NULL)
      drv.unload(mod);
    free(src);
    pthread_mutex_unlock(&j->lock);
    return NULL;
  }
  m->source = src;
  m->mod = mod;
  m->fn = fn;
  m->failed = rc < 0;
  m->next = j->mods;
  j->mods = m;
  if (rc < 0)
    note_failure(j, why);
  else
    j->loads++;
  pthread_mutex_unlock(&j->lock);
  return m;
}

int fzk_jit_kernel(fzk_jit *j, const fzk_desc *d, fzk_jit_dir dir, void **fn) {
  *fn = NULL;
  if (j == NULL || !j->enabled || !fzk_jit_supported(d, dir))
    return 0;
  char *src = fzk_jit_source(d, dir);
  if (src == NULL)
    return FZ_ENOMEM;
  pthread_mutex_lock(&j->lock);
  j->chain_used = 1;
  module *m = find(j, src);
  pthread_mutex_unlock(&j->lock);
  if (m != NULL) {
    *fn = m->failed ? NULL : (void *)m->fn;
    free(src);
    return 0;
  }
  char why[1536] = "";
  const char *name = dir == FZK_JIT_ENCODE ? FZK_JIT_ENTRY_ENCODE : FZK_JIT_ENTRY_DECODE;
  CUmodule mod = NULL;
  CUfunction f = NULL;
  int rc = load(j, src, 1, &name, &mod, &f, why, sizeof why);
  CUresult e;
  if (rc == 0 &&
      (e = drv.attr(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem_of(d, dir))) !=
          CUDA_SUCCESS) {
    rc = drv_error(e, "cuFuncSetAttribute", why, sizeof why);
    drv.unload(mod);
    mod = NULL;
  }
  /* Out of memory is not the chain's fault: nothing is remembered. */
  if (rc == FZ_ENOMEM || rc == FZ_EGPUOOM) {
    free(src);
    return rc;
  }
  if ((m = record(j, src, mod, f, rc, why)) == NULL)
    return FZ_ENOMEM;
  *fn = m->failed ? NULL : (void *)m->fn;
  return 0;
}

/* The helper kernels' names in a module, in fzk_kern's order. */
static const char *const helper_names[FZK_K_COUNT] = {
    "fzk_prep_kernel",  "fzk_scan_kernel",  "fzk_scan_top_kernel",
    "fzk_zero_kernel",  "fzk_place_kernel", "fzk_check_kernel",
    "fzk_crc_kernel",   "fzk_seal_kernel",  "fzk_dec_head_kernel"};

/* A module of fixed kernels (the helpers', the ratio chains'), compiled
 * and loaded once per context: its n functions named in names into *fns,
 * and *have set, under the lock; a compile that fails leaves *failed set
 * (when failed is not NULL) and its text for fz_gpu_ctx_jit_failure(). */
static int fixed_module(fzk_jit *j, const char *source, unsigned n, const char *const *names,
                        fzk_kern *fns, int *have, int *failed, const fzk_kern **out,
                        char *why, size_t why_len) {
  pthread_mutex_lock(&j->lock);
  int ready = *have, lost = failed != NULL && *failed;
  pthread_mutex_unlock(&j->lock);
  if (ready) {
    *out = fns;
    return 0;
  }
  if (lost) {
    fze_why(why, why_len, "their compile failed before");
    return FZ_ECUDA;
  }
  char *src = strdup(source);
  if (src == NULL)
    return FZ_ENOMEM;
  CUmodule mod = NULL;
  CUfunction f[FZK_K_COUNT];
  int rc = load(j, src, n, names, &mod, f, why, why_len);
  if (rc < 0) {
    free(src);
    /* Out of memory is not the kernels' fault: tried again next time. */
    if (failed != NULL && rc != FZ_ENOMEM && rc != FZ_EGPUOOM) {
      pthread_mutex_lock(&j->lock);
      *failed = 1;
      note_failure(j, why);
      pthread_mutex_unlock(&j->lock);
    }
    return rc;
  }
  pthread_mutex_lock(&j->lock);
  module *m = *have ? NULL : calloc(1, sizeof *m);
  if (m != NULL) {
    for (unsigned i = 0; i < n; i++)
      fns->fn[i] = (void *)f[i];
    *have = 1;
    m->source = src;
    m->mod = mod;
    m->fn = f[0];
    m->next = j->mods;
    j->mods = m;
    j->loads++;
    src = NULL;
    mod = NULL;
  }
  int ok = *have;
  pthread_mutex_unlock(&j->lock);
  /* Another thread's module stands, or there was no memory to record it. */
  if (mod != NULL)
    drv.unload(mod);
  free(src);
  if (!ok)
    return FZ_ENOMEM;
  *out = fns;
  return 0;
}

int fzk_jit_helpers(fzk_jit *j, const fzk_kern **out, char *why, size_t why_len) {
  return fixed_module(j, fzk_jit_helpers_source(), FZK_K_COUNT, helper_names, &j->helpers,
                      &j->have_helpers, NULL, out, why, why_len);
}

/* The ratio kernels' names, in ratio_gpu.h's order (FZR_K_*). */
static const char *const ratio_names[] = {"fzr_decode_kernel", "fzre_encode_kernel",
                                          "fzre_place_kernel", "fzr_decode_planes_kernel",
                                          "fzre_encode_planes_kernel"};
_Static_assert(sizeof ratio_names / sizeof *ratio_names == FZR_K_COUNT, "ratio kernels");
_Static_assert((int)FZR_K_COUNT <= (int)FZK_K_COUNT, "an fzk_kern holds the ratio kernels");

int fzk_jit_ratio(fzk_jit *j, const fzk_kern **out, char *why, size_t why_len) {
  return fixed_module(j, fzk_jit_ratio_source(), FZR_K_COUNT, ratio_names, &j->ratio,
                      &j->have_ratio, &j->ratio_failed, out, why, why_len);
}

void fzk_jit_stats(fzk_jit *j, fz_gpu_jit_counts *out) {
  memset(out, 0, sizeof *out);
  if (j == NULL)
    return;
  fzk_jit_counts c;
  pthread_mutex_lock(&j->lock);
  fzk_jit_cache_counts(j->cache, &c);
  out->modules_loaded = j->loads;
  pthread_mutex_unlock(&j->lock);
  out->mem_hits = c.mem_hits;
  out->disk_hits = c.disk_hits;
  out->misses = c.misses;
  out->compiles = c.compiles;
  out->compile_failures = c.compile_failures;
  out->compile_us = c.compile_us;
  out->disk_writes = c.disk_writes;
  out->disk_rejected = c.disk_rejected;
  out->disk_evicted = c.disk_evicted;
  out->disk_bytes = c.disk_bytes;
  out->disk_write_failures = c.disk_write_failures;
}
