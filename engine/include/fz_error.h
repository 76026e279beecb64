/*
 * fz_error.h - the error codes of every fzd library, and of the wire.
 *
 * One table, FZ_ERRNO_MAP, generates the enum, fz_strerror() and
 * fz_err_name().  Every fallible call in the engine, the protocol layer, the
 * daemon and libfzclient returns an int: >= 0 means success, a negative value
 * is one of these codes.  The integers are stable: they travel in wire error
 * replies and must never be renumbered.  System-flavoured codes reuse the
 * Linux errno numbers (negated); project codes live at -4000 and below so they
 * can never collide with -errno.
 */
#ifndef FZ_ERROR_H
#define FZ_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

#define FZ_ERRNO_MAP(XX)                                                       \
  XX(EIO, -5, "input/output error")                                            \
  XX(ENOMEM, -12, "out of memory")                                             \
  XX(EACCES, -13, "permission denied")                                         \
  XX(EBUSY, -16, "server busy: queue full, try again later")                   \
  XX(EINVAL, -22, "invalid argument")                                          \
  XX(ENOSPC, -28, "output buffer too small")                                   \
  XX(EPIPE, -32, "broken pipe")                                                \
  XX(ERANGE, -34, "value out of range")                                        \
  XX(ENOSYS, -38, "not implemented by this build")                             \
  XX(EPROTO, -71, "protocol error")                                            \
  XX(EMSGSIZE, -90, "message too large")                                       \
  XX(ECONNRESET, -104, "connection reset by peer")                             \
  XX(ETIMEDOUT, -110, "timed out")                                             \
  XX(ECONNREFUSED, -111, "connection refused")                                 \
  XX(ECANCELED, -125, "operation canceled")                                    \
  XX(EFORMAT, -4001, "not an fzd archive (bad magic)")                         \
  XX(EVERSION, -4002, "unsupported archive or protocol version")               \
  XX(ETRUNC, -4003, "archive is truncated")                                    \
  XX(ECORRUPT, -4004, "archive is corrupt (checksum or structure mismatch)")   \
  XX(EPIPELINE, -4005, "malformed pipeline specification")                    \
  XX(EDTYPE, -4006, "data type not supported by this pipeline")               \
  XX(ESHAPE, -4007, "invalid shape")                                           \
  XX(EBOUND, -4008, "invalid error bound")                                     \
  XX(ENOGPU, -4009, "no usable GPU")                                           \
  XX(ECUDA, -4010, "CUDA error")                                               \
  XX(ENVRTC, -4011, "run-time kernel compilation failed")                      \
  XX(EGPUOOM, -4012, "out of GPU memory")                                      \
  XX(EHANDSHAKE, -4013, "handshake required before any other request")         \
  XX(EAUTH, -4014, "authentication failed")                                    \
  XX(EMETHOD, -4015, "unknown method")                                         \
  XX(EPARAMS, -4016, "missing or invalid request parameter")                   \
  XX(ESHUTDOWN, -4017, "server is shutting down")                              \
  XX(ECONFIG, -4018, "invalid configuration")                                  \
  XX(ETRANSPORT, -4019, "operation not allowed on this transport")            \
  XX(ESIZE, -4020, "buffer size does not match dtype and shape")

typedef enum fz_errno {
#define FZ_ERR_ENUM_(name, value, msg) FZ_##name = (value),
  FZ_ERRNO_MAP(FZ_ERR_ENUM_)
#undef FZ_ERR_ENUM_
  FZ_ERRNO_MAX_ = -4096
} fz_errno;

/* The message for an error code; "unknown error" for anything else.  Never
 * returns NULL; the string is static. */
const char *fz_strerror(int err);

/* The symbolic name ("EINVAL", "ECORRUPT") for an error code; "UNKNOWN" for
 * anything else. */
const char *fz_err_name(int err);

#ifdef __cplusplus
}
#endif
#endif /* FZ_ERROR_H */
