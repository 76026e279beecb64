/*
 * pack.c - the encoders for the msgpack-RPC envelopes.  They only frame: the
 * caller packs the params or result map's pairs after a *_begin call, so a
 * result never has to be built twice.
 */
#include <string.h>

#include "fzp.h"

void fzp_pack_key(msgpack_packer *pk, const char *key) {
  size_t n = strlen(key);
  msgpack_pack_str(pk, n);
  msgpack_pack_str_body(pk, key, n);
}

void fzp_pack_request_begin(msgpack_packer *pk, uint32_t msgid,
                            const char *method, uint32_t nfields) {
  msgpack_pack_array(pk, 4);
  msgpack_pack_uint8(pk, FZP_REQUEST);
  msgpack_pack_uint32(pk, msgid);
  fzp_pack_key(pk, method);
  msgpack_pack_map(pk, nfields);
}

void fzp_pack_notify_begin(msgpack_packer *pk, const char *method,
                           uint32_t nfields) {
  msgpack_pack_array(pk, 3);
  msgpack_pack_uint8(pk, FZP_NOTIFY);
  fzp_pack_key(pk, method);
  msgpack_pack_map(pk, nfields);
}

void fzp_pack_result_begin(msgpack_packer *pk, uint32_t msgid, uint32_t nfields) {
  msgpack_pack_array(pk, 4);
  msgpack_pack_uint8(pk, FZP_RESPONSE);
  msgpack_pack_uint32(pk, msgid);
  msgpack_pack_nil(pk);
  msgpack_pack_map(pk, nfields);
}

void fzp_pack_error(msgpack_packer *pk, uint32_t msgid, int code,
                    const char *message) {
  if (message == NULL || message[0] == '\0')
    message = fz_strerror(code);
  msgpack_pack_array(pk, 4);
  msgpack_pack_uint8(pk, FZP_RESPONSE);
  msgpack_pack_uint32(pk, msgid);
  msgpack_pack_map(pk, 3);
  fzp_pack_key(pk, "code");
  msgpack_pack_int32(pk, code);
  fzp_pack_key(pk, "name");
  fzp_pack_key(pk, fz_err_name(code));
  fzp_pack_key(pk, "message");
  fzp_pack_key(pk, message);
  msgpack_pack_nil(pk);
}
