/*
 * fzp.h - the fzd wire contract, linked by the daemon and by libfzclient.
 *
 * The wire is a stream of msgpack objects in msgpack-RPC shapes:
 *   request       [0, msgid, method, params]
 *   response      [1, msgid, error, result]
 *   notification  [2, method, params]
 * params and results are maps with string keys; error is nil or a map
 * {"code": int, "name": str, "message": str} whose code is an fz_errno
 * (fz_error.h).  docs/protocol.md is the full specification.
 *
 * Untrusted bytes go through fzp_scan() first: it walks the msgpack encoding
 * without allocating and enforces hard limits (message size, nesting depth,
 * container counts checked against the bytes actually present), so that the
 * msgpack-c unpacker that fzp_parse() runs afterwards never allocates from a
 * declared count the message cannot back.
 */
#ifndef FZP_H
#define FZP_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include <msgpack.h>

#include "fz_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FZP_PROTOCOL_VERSION 1

enum fzp_type { FZP_REQUEST = 0, FZP_RESPONSE = 1, FZP_NOTIFY = 2 };

typedef struct fzp_limits {
  uint64_t max_message;   /* bytes of one encoded message */
  uint32_t max_depth;     /* nesting of arrays and maps */
  uint32_t max_container; /* elements of one array or map */
  uint64_t max_objects;   /* objects in one message, all levels; 0: no limit */
} fzp_limits;

/* The default object limit: no request or reply of the protocol comes near
 * it, and msgpack-c's objects for a message at the limit take about 12 MiB. */
#define FZP_MAX_OBJECTS_DEFAULT 262144u

/* 64 MiB + 4 KiB, depth 16, 65536 elements, FZP_MAX_OBJECTS_DEFAULT
 * objects. */
void fzp_limits_default(fzp_limits *lim);

/* Scans the front of buf.  Returns the length (> 0) of the first complete
 * msgpack object when it is whole and within the limits; 0 when more bytes are
 * needed (and the prefix seen so far is within the limits); FZ_EMSGSIZE when
 * the object is or must become larger than max_message; FZ_EPROTO when the
 * bytes are not msgpack (reserved byte 0xc1), nest deeper than max_depth,
 * declare a container larger than max_container or hold more than
 * max_objects objects.  Linear in the bytes scanned.  Never allocates.  lim may
 * be NULL for fzp_limits_default(); depths above 64 count as 64. */
int64_t fzp_scan(const void *buf, size_t len, const fzp_limits *lim);

/* fzp_scan() that also tells a reader how long to wait: when it returns 0 and
 * need is not NULL, *need receives a lower bound on the length of the whole
 * message, so a reader can skip scanning again until it holds that many
 * bytes (a large bin is then scanned twice, not once per read). */
int64_t fzp_scan_ex(const void *buf, size_t len, const fzp_limits *lim,
                    uint64_t *need);

/* A scan that resumes: where fzp_scan_ex() starts from byte 0 on every call,
 * fzp_scan_resume() continues from where the previous call on the same state
 * stopped, so a message received in pieces is scanned in one pass.  buf must
 * hold the same message from its first byte on every call (it may move and
 * grow between calls); reset the state before each new message.  Returns
 * what fzp_scan_ex() returns.  After an error the state is spent. */
#define FZP_SCAN_DEPTH_HARD 64
typedef struct fzp_scan_state {
  uint64_t pos, owed, objects;
  uint32_t depth;
  uint64_t left[FZP_SCAN_DEPTH_HARD + 1];
} fzp_scan_state;

void fzp_scan_reset(fzp_scan_state *st);
int64_t fzp_scan_resume(fzp_scan_state *st, const void *buf, size_t len,
                        const fzp_limits *lim, uint64_t *need);

typedef struct fzp_message {
  enum fzp_type type;
  uint32_t msgid;          /* requests and responses */
  const char *method;      /* requests and notifications; not NUL-terminated */
  uint32_t method_len;
  msgpack_object params;   /* requests and notifications: a map */
  msgpack_object error;    /* responses: nil or the error map */
  msgpack_object result;   /* responses */
  msgpack_zone *zone;      /* owns everything above */
} fzp_message;

/* Parses one whole message (a prefix of buf that fzp_scan() accepted) and
 * checks its msgpack-RPC shape.  FZ_EPROTO with a reason in why when the shape
 * is wrong; msg->msgid then still holds the msgid when one could be read (0
 * otherwise), so the error reply can name it.  On success call
 * fzp_message_free().  Strings and bins of the message point into buf, which
 * must outlive the message.*/
int fzp_parse(const void *buf, size_t len, fzp_message *msg, char *why,
              size_t why_len);
void fzp_message_free(fzp_message *msg);

/* True when the method name equals name. */
bool fzp_method_is(const fzp_message *msg, const char *name);

/* Typed lookups in a params or result map.  Each returns 1 when the key is
 * present with the right type (the value is stored), 0 when absent, and
 * FZ_EPARAMS when present with another type.  Strings and bins point into the
 * message; they are not NUL-terminated. */
int fzp_get_str(const msgpack_object *map, const char *key, const char **s,
                uint32_t *len);
int fzp_get_bin(const msgpack_object *map, const char *key, const void **p,
                uint32_t *len);
int fzp_get_u64(const msgpack_object *map, const char *key, uint64_t *v);
int fzp_get_i64(const msgpack_object *map, const char *key, int64_t *v);
int fzp_get_f64(const msgpack_object *map, const char *key, double *v); /* ints too */
int fzp_get_bool(const msgpack_object *map, const char *key, bool *v);
int fzp_get_obj(const msgpack_object *map, const char *key,
                const msgpack_object **v); /* any type */

/* Reads a response's error: 0 when it is nil (success), 1 when it is a
 * well-formed error map (the code and, when text is not NULL, the message,
 * not NUL-terminated, are stored), FZ_EPROTO when it is malformed. */
int fzp_error_decode(const msgpack_object *error, int *code, const char **text,
                     uint32_t *text_len);

/* Encoding.  Each writes through a msgpack_packer.  After a *_begin call the
 * caller packs exactly nfields key/value pairs of the params or result map. */
void fzp_pack_request_begin(msgpack_packer *pk, uint32_t msgid,
                            const char *method, uint32_t nfields);
void fzp_pack_notify_begin(msgpack_packer *pk, const char *method,
                           uint32_t nfields);
void fzp_pack_result_begin(msgpack_packer *pk, uint32_t msgid, uint32_t nfields);
void fzp_pack_error(msgpack_packer *pk, uint32_t msgid, int code,
                    const char *message);
void fzp_pack_key(msgpack_packer *pk, const char *key); /* a str */

#ifdef __cplusplus
}
#endif
#endif /* FZP_H */
