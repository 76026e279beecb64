/*
 * devitocomp.h - the DevitoComp provider ABI, as libdevitocomp.so of fzd
 * implements it.
 *
 * DevitoComp is the provider-neutral compression ABI of DevitoPRO: the
 * framework compresses the snapshots of a TimeFunction through a provider
 * library named libdevitocomp.so that exports the functions below.  The
 * public description of the ABI fixes its ideas (a plan made from an
 * optional options string, execution kinds host / CUDA / HIP, dimensions
 * and element strides slowest first, a per-snapshot host sidecar, a payload
 * alignment and a maximum compressed size in the limits, an ABI version),
 * but not the spelling of every name and type.  Where this header had to
 * choose, docs/devitocomp.md lists the choice, so that a provider built
 * against DevitoPRO's own header can be checked against it line by line.
 *
 * Every call returns a devitocomp_status_t; DEVITOCOMP_SUCCESS is 0.  A
 * failing call leaves a one-line reason for devitocomp_last_error() (per
 * thread).  No call prints, exits or aborts.  A plan is used by one thread
 * at a time; different plans are independent.
 */
#ifndef DEVITOCOMP_H
#define DEVITOCOMP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DEVITOCOMP_BUILDING) && defined(__GNUC__)
#define DEVITOCOMP_API __attribute__((visibility("default")))
#else
#define DEVITOCOMP_API
#endif

/* The ABI this header describes.  A provider reports the one it was built
 * with through devitocomp_abi_version(); the caller refuses a provider whose
 * version differs from its header's. */
#define DEVITOCOMP_ABI_VERSION 1

/* The most dimensions of one snapshot. */
#define DEVITOCOMP_MAX_RANK 4

typedef enum devitocomp_status {
  DEVITOCOMP_SUCCESS = 0,
  DEVITOCOMP_INVALID_ARGUMENT = 1, /* a NULL pointer, a bad shape or option */
  DEVITOCOMP_UNSUPPORTED = 2,      /* execution kind, dtype or layout */
  DEVITOCOMP_OUT_OF_MEMORY = 3,
  DEVITOCOMP_BUFFER_TOO_SMALL = 4, /* payload capacity below what is needed */
  DEVITOCOMP_CORRUPT = 5,          /* payload or sidecar does not decode */
  DEVITOCOMP_BACKEND_ERROR = 6     /* the compressor failed otherwise */
} devitocomp_status_t;

typedef enum devitocomp_execution_kind {
  DEVITOCOMP_EXECUTION_HOST = 0,
  DEVITOCOMP_EXECUTION_CUDA = 1,
  DEVITOCOMP_EXECUTION_HIP = 2
} devitocomp_execution_kind_t;

/* How the provider may reach the data pointers of one call.  HOST: host
 * pointers, threads (0: the provider chooses), no stream; host work is done
 * when the call returns.  CUDA and HIP: pointers of the active device and
 * an optional native stream (cudaStream_t / hipStream_t; NULL: the legacy
 * default stream); threads is ignored; device work may remain queued on
 * the stream when the call returns. */
typedef struct devitocomp_execution {
  devitocomp_execution_kind_t kind;
  int threads;
  void *stream;
} devitocomp_execution_t;

typedef enum devitocomp_dtype {
  DEVITOCOMP_FLOAT32 = 0,
  DEVITOCOMP_FLOAT64 = 1
} devitocomp_dtype_t;

/* One snapshot's layout: rank dimensions, slowest-varying first, and the
 * distance in elements between neighbours along each dimension (also
 * slowest first).  A C-contiguous tensor has strides[rank-1] = 1 and
 * strides[i] = strides[i+1] * shape[i+1]; padded (halo) layouts have larger
 * strides.  Strides must be positive. */
typedef struct devitocomp_tensor {
  devitocomp_dtype_t dtype;
  int rank;
  int64_t shape[DEVITOCOMP_MAX_RANK];
  int64_t strides[DEVITOCOMP_MAX_RANK];
} devitocomp_tensor_t;

/* What a plan needs from the caller's storage. */
typedef struct devitocomp_limits {
  size_t max_compressed_bytes; /* payload capacity that is always enough */
  size_t payload_alignment;    /* nonzero power of two */
  size_t sidecar_bytes;        /* per-snapshot host sidecar */
  size_t sidecar_alignment;    /* nonzero power of two */
} devitocomp_limits_t;

typedef struct devitocomp_plan devitocomp_plan_t;

/* DEVITOCOMP_ABI_VERSION of the library loaded at run time. */
DEVITOCOMP_API uint32_t devitocomp_abi_version(void);

/* A short name of the provider and its version ("fzd 0.2.0"); static. */
DEVITOCOMP_API const char *devitocomp_provider_name(void);

/* Text of a status; static storage. */
DEVITOCOMP_API const char *devitocomp_status_string(devitocomp_status_t status);

/* Why the last failing call on this thread failed; "" when none did. */
DEVITOCOMP_API const char *devitocomp_last_error(void);

/* Makes a plan for snapshots of tensor's dtype, shape and strides, run with
 * execution's kind (its stream and threads may differ per call).  options
 * is provider-defined; DevitoPRO passes the relative error of
 * DevitoComp(error=...) as a decimal string, or NULL for the provider's
 * default.  The error is fixed for the plan's life.  On success *plan is a
 * new plan to release with devitocomp_plan_destroy(). */
DEVITOCOMP_API devitocomp_status_t
devitocomp_plan_create(const devitocomp_tensor_t *tensor,
                       const devitocomp_execution_t *execution,
                       const char *options, devitocomp_plan_t **plan);

/* Releases a plan; NULL is a harmless no-op. */
DEVITOCOMP_API devitocomp_status_t devitocomp_plan_destroy(devitocomp_plan_t *plan);

DEVITOCOMP_API devitocomp_status_t
devitocomp_plan_limits(const devitocomp_plan_t *plan, devitocomp_limits_t *limits);

/* Compresses one snapshot at data (laid out as the plan's tensor) into
 * payload, at most payload_capacity bytes (limits.max_compressed_bytes is
 * always enough), and writes its sidecar (limits.sidecar_bytes of aligned
 * host storage).  *compressed_bytes and the sidecar are ready when the call
 * returns; with a CUDA stream the payload is ordered on that stream. */
DEVITOCOMP_API devitocomp_status_t
devitocomp_compress(devitocomp_plan_t *plan, const devitocomp_execution_t *execution,
                    const void *data, void *payload, size_t payload_capacity,
                    size_t *compressed_bytes, void *sidecar);

/* Decompresses the compressed_bytes of payload with its sidecar into data,
 * laid out as the plan's tensor (elements between the strided positions are
 * not touched). */
DEVITOCOMP_API devitocomp_status_t
devitocomp_decompress(devitocomp_plan_t *plan, const devitocomp_execution_t *execution,
                      const void *payload, size_t compressed_bytes,
                      const void *sidecar, void *data);

#ifdef __cplusplus
}
#endif
#endif /* DEVITOCOMP_H */
