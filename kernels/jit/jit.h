/*
 * jit.h - run-time compiled kernels: NVRTC (loaded with dlopen, so that the
 * library runs where it is absent), the driver API calls that load and
 * launch a CUBIN (found through the runtime, as import.c finds its own),
 * the code generator (jit_gen.c) and the per-context map of loaded modules.
 *
 * A generated kernel is one source per (chain, dtype, chunk size,
 * direction): a small extern "C" entry that runs the chain's device ops
 * (chain_body.cuh, or the word kernels' chain32_ops.cuh on 4-byte words
 * and chain64_ops.cuh on 8-byte words, for d->k32) with
 * every fixed parameter a constant.  Its CUBIN comes
 * from the module cache (jit_cache.h: memory, then disk, else one compile
 * for all concurrent callers); the context loads each module once.  When
 * NVRTC is missing or a compile fails, the caller keeps the ahead-of-time
 * kernel, and the failure's text (the NVRTC log) waits in the context until
 * it is fetched, once.
 */
#ifndef FZK_JIT_H
#define FZK_JIT_H

#include <stddef.h>
#include <stdint.h>

#include "fz_gpu.h"
#include "fzk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- NVRTC, process-wide ---- */

/* Loads NVRTC once (libnvrtc.so.13, then libnvrtc.so; the environment's
 * FZ_NVRTC_LIBRARY names another file instead).  0, or FZ_ENOSYS with the
 * dlopen error in why. */
int fzk_nvrtc_load(char *why, size_t why_len);
/* NVRTC's version (after a successful load). */
void fzk_nvrtc_version(int *major, int *minor);
/* The options every generated kernel is compiled with for sm_<arch>: the
 * nvcc build's IEEE flags and the prelude (fzk_rtc.h), space-separated, for
 * cache keys. */
void fzk_nvrtc_options(unsigned arch, char *buf, size_t len);
/* Compiles source (which includes the embedded headers by name) to a CUBIN
 * for sm_<arch> (80, 90, ...); *image is malloc'd.  On a compile error,
 * FZ_ECUDA with "NVRTC: <log>" in why (the log cut to fit). */
int fzk_nvrtc_compile(const char *source, unsigned arch, void **image, size_t *len, char *why,
                      size_t why_len);

/* The embedded headers (generated at build time from kernels/ops and
 * engine/include: fzk_embedded.c). */
typedef struct fzk_embedded {
  const char *name;
  const char *text;
} fzk_embedded;
extern const fzk_embedded fzk_embedded_headers[];
extern const unsigned fzk_embedded_count;

/* The digest of n headers (the first 8 bytes of the SHA-256 of each one's
 * name and text, each as its length, 8 bytes little-endian, then its
 * bytes) in 16 lowercase hexadecimal digits and a NUL.  The embedded
 * headers' digest is part of every cache key's target (fzk_jit_target), so
 * that an fzd built from other headers, whose generated sources may read
 * the same (the ratio module's is one #include), misses rather than loads
 * an image compiled from the old ones. */
void fzk_headers_digest(const fzk_embedded *h, unsigned n, char out[17]);
/* A cache key's target: "sm_<arch> nvrtc <major>.<minor> driver <driver>
 * headers <digest of the embedded headers>". */
void fzk_jit_target(unsigned arch, int nvrtc_major, int nvrtc_minor, int driver, char *buf,
                    size_t len);

/* ---- code generation (jit_gen.c) ---- */

typedef enum fzk_jit_dir { FZK_JIT_ENCODE = 0, FZK_JIT_DECODE = 1 } fzk_jit_dir;
#define FZK_JIT_ENTRY_ENCODE "fzk_gen_encode"
#define FZK_JIT_ENTRY_DECODE "fzk_gen_decode"

/* Whether the generator has a kernel for d's chain in direction dir: the
 * generic chunk family (chain_body.cuh) and the word chains (d->k32:
 * chain32_ops.cuh on 4-byte words, chain64_ops.cuh on 8-byte words, every
 * coder). */
int fzk_jit_supported(const fzk_desc *d, fzk_jit_dir dir);
/* Whether a plan of d's chain should take the generated kernels where the
 * built-in ones run too: not where the built-in kernel is as specialised
 * and measured faster, nor on 8-byte words where chain64.cu built the
 * coder (measured at the f32 presets' speed); yes for an 8-byte word coder
 * it did not build (d from fzk_desc_from_header_jit). */
int fzk_jit_preferred(const fzk_desc *d);
/* The source of the kernel for d in direction dir, malloc'd (NULL when out
 * of memory).  Its entry has the ahead-of-time kernel's parameters. */
char *fzk_jit_source(const fzk_desc *d, fzk_jit_dir dir);

/* The generated word kernels (4- or 8-byte words), launched with the
 * arguments of fzk_launch_encode32 and fzk_launch_decode32 (fzk.h). */
int fzk_jit_launch_encode32(void *fn, const fzk_desc *d, const void *d_in,
                            const fzk_qparams *d_qp, uint8_t *d_out, uint64_t out_cap,
                            uint64_t header_len, uint64_t table_off, uint32_t *d_crcs,
                            uint64_t *d_lb, const uint32_t *d_tab, fz_gpu_stream s);
int fzk_jit_launch_decode32(void *fn, const fzk_desc *d, const uint8_t *d_pay, uint64_t pay_len,
                            const uint64_t *d_offs, const uint8_t *d_sizes16, const fzk_qparams *d_qp,
                            void *d_out, int out_vec, uint32_t *d_status, uint32_t *d_crcs,
                            const uint32_t *d_tab, fz_gpu_stream s);

/* The source of the helper kernels' module (helper_kernels.cuh), and of
 * the ratio chains' (ratio_kernels.cuh). */
const char *fzk_jit_helpers_source(void);
const char *fzk_jit_ratio_source(void);

/* ---- per context ---- */

typedef struct fzk_jit fzk_jit;

/* device: the context's device ordinal (its compute capability picks the
 * architecture).  JIT starts enabled, with a memory-only cache. */
int fzk_jit_create(int device, fzk_jit **out, char *why, size_t why_len);
void fzk_jit_destroy(fzk_jit *j); /* NULL is a no-op; unloads every module */
int fzk_jit_config(fzk_jit *j, const char *cache_dir, uint64_t max_disk_bytes, int enabled,
                   char *why, size_t why_len);
/* The loaded kernel (a CUfunction) for d in direction dir, with its
 * dynamic shared memory limit raised to d->smem.  *fn = NULL (and 0) when
 * JIT is off, has no kernel for the chain, or failed for it: the caller
 * runs the ahead-of-time kernel.  A failure is remembered per source (no
 * retry) and its text kept for fz_gpu_ctx_jit_failure(). */
int fzk_jit_kernel(fzk_jit *j, const fzk_desc *d, fzk_jit_dir dir, void **fn);
void fzk_jit_stats(fzk_jit *j, fz_gpu_jit_counts *out);
/* Compiles and loads the helper kernels (once per context), for a context
 * that runs no built-in kernel; *out stays valid until destroy. */
int fzk_jit_helpers(fzk_jit *j, const fzk_kern **out, char *why, size_t why_len);
/* The same for the ratio chains' kernels (FZR_K_* of ratio_gpu.h), when the
 * chain asks for them; a compile that failed is not tried again. */
int fzk_jit_ratio(fzk_jit *j, const fzk_kern **out, char *why, size_t why_len);
/* The text of failures not fetched yet; see fz_gpu_ctx_jit_failure. */
int fzk_jit_failure(fzk_jit *j, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
