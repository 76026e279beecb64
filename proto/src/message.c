/*
 * message.c - turning one scanned message into a checked msgpack-RPC shape,
 * and the typed lookups that the daemon and the client use on params and
 * result maps.  The message borrows the bytes it was parsed from (msgpack-c
 * points strings and bins into the buffer), so the buffer must outlive it.
 */
#include <stdio.h>
#include <string.h>

#include "fzp.h"

static int shape_error(fzp_message *msg, char *why, size_t why_len,
                       const char *text) {
  if (why != NULL && why_len > 0)
    snprintf(why, why_len, "%s", text);
  if (msg->zone != NULL) {
    msgpack_zone_free(msg->zone);
    msg->zone = NULL;
  }
  return FZ_EPROTO;
}

static bool as_u32(const msgpack_object *o, uint32_t *v) {
  if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > UINT32_MAX)
    return false;
  *v = (uint32_t)o->via.u64;
  return true;
}

int fzp_parse(const void *buf, size_t len, fzp_message *msg, char *why,
              size_t why_len) {
  memset(msg, 0, sizeof(*msg));
  if (buf == NULL || len == 0)
    return shape_error(msg, why, why_len, "empty message");

  msgpack_unpacked up;
  msgpack_unpacked_init(&up);
  size_t off = 0;
  msgpack_unpack_return r = msgpack_unpack_next(&up, buf, len, &off);
  if (r != MSGPACK_UNPACK_SUCCESS || off != len) {
    msgpack_unpacked_destroy(&up);
    return shape_error(msg, why, why_len,
                       r == MSGPACK_UNPACK_NOMEM_ERROR ? "out of memory"
                                                       : "not one msgpack object");
  }
  msg->zone = msgpack_unpacked_release_zone(&up);
  msgpack_unpacked_destroy(&up);
  msgpack_object root = up.data;

  if (root.type != MSGPACK_OBJECT_ARRAY || root.via.array.size < 3)
    return shape_error(msg, why, why_len,
                       "a message is an array [type, ...] of 3 or 4 elements");
  const msgpack_object *e = root.via.array.ptr;
  uint32_t n = root.via.array.size;
  uint32_t type;
  if (!as_u32(&e[0], &type) || type > FZP_NOTIFY)
    return shape_error(msg, why, why_len, "message type must be 0, 1 or 2");
  msg->type = (enum fzp_type)type;

  if (type == FZP_NOTIFY) {
    if (n != 3)
      return shape_error(msg, why, why_len,
                         "a notification is [2, method, params]");
  } else {
    if (n != 4)
      return shape_error(msg, why, why_len,
                         "a request or response has 4 elements");
    if (!as_u32(&e[1], &msg->msgid))
      return shape_error(msg, why, why_len, "msgid must be a uint32");
  }

  if (type == FZP_RESPONSE) {
    if (e[2].type != MSGPACK_OBJECT_NIL && e[2].type != MSGPACK_OBJECT_MAP)
      return shape_error(msg, why, why_len, "error must be nil or a map");
    msg->error = e[2];
    msg->result = e[3];
    return 0;
  }
  /* A notification has no msgid, so its method sits one slot earlier. */
  const msgpack_object *method = type == FZP_NOTIFY ? &e[1] : &e[2];
  const msgpack_object *params = method + 1;
  if (method->type != MSGPACK_OBJECT_STR || method->via.str.size == 0)
    return shape_error(msg, why, why_len, "method must be a non-empty str");
  if (params->type != MSGPACK_OBJECT_MAP)
    return shape_error(msg, why, why_len, "params must be a map");
  msg->method = method->via.str.ptr;
  msg->method_len = method->via.str.size;
  msg->params = *params;
  return 0;
}

void fzp_message_free(fzp_message *msg) {
  if (msg == NULL)
    return;
  if (msg->zone != NULL)
    msgpack_zone_free(msg->zone);
  msg->zone = NULL;
}

bool fzp_method_is(const fzp_message *msg, const char *name) {
  size_t n = strlen(name);
  return msg->method != NULL && msg->method_len == n &&
         memcmp(msg->method, name, n) == 0;
}

static const msgpack_object *lookup(const msgpack_object *map, const char *key) {
  if (map == NULL || map->type != MSGPACK_OBJECT_MAP)
    return NULL;
  size_t n = strlen(key);
  for (uint32_t i = 0; i < map->via.map.size; i++) {
    const msgpack_object *k = &map->via.map.ptr[i].key;
    if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
        memcmp(k->via.str.ptr, key, n) == 0)
      return &map->via.map.ptr[i].val;
  }
  return NULL;
}

int fzp_get_obj(const msgpack_object *map, const char *key,
                const msgpack_object **v) {
  const msgpack_object *o = lookup(map, key);
  if (o == NULL)
    return 0;
  *v = o;
  return 1;
}

int fzp_get_str(const msgpack_object *map, const char *key, const char **s,
                uint32_t *len) {
  const msgpack_object *o = lookup(map, key);
  if (o == NULL)
    return 0;
  if (o->type != MSGPACK_OBJECT_STR)
    return FZ_EPARAMS;
  *s = o->via.str.ptr;
  *len = o->via.str.size;
  return 1;
}

int fzp_get_bin(const msgpack_object *map, const char *key, const void **p,
                uint32_t *len) {
  const msgpack_object *o = lookup(map, key);
  if (o == NULL)
    return 0;
  if (o->type != MSGPACK_OBJECT_BIN)
    return FZ_EPARAMS;
  *p = o->via.bin.ptr;
  *len = o->via.bin.size;
  return 1;
}

int fzp_get_u64(const msgpack_object *map, const char *key, uint64_t *v) {
  const msgpack_object *o = lookup(map, key);
  if (o == NULL)
    return 0;
  if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
    return FZ_EPARAMS;
  *v = o->via.u64;
  return 1;
}

int fzp_get_i64(const msgpack_object *map, const char *key, int64_t *v) {
  const msgpack_object *o = lookup(map, key);
  if (o == NULL)
    return 0;
  if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
    *v = o->via.i64;
  else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
    *v = (int64_t)o->via.u64;
  else
    return FZ_EPARAMS;
  return 1;
}

int fzp_get_f64(const msgpack_object *map, const char *key, double *v) {
  const msgpack_object *o = lookup(map, key);
  if (o == NULL)
    return 0;
  switch (o->type) {
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64:
    *v = o->via.f64;
    return 1;
  case MSGPACK_OBJECT_POSITIVE_INTEGER:
    *v = (double)o->via.u64;
    return 1;
  case MSGPACK_OBJECT_NEGATIVE_INTEGER:
    *v = (double)o->via.i64;
    return 1;
  default:
    return FZ_EPARAMS;
  }
}

int fzp_get_bool(const msgpack_object *map, const char *key, bool *v) {
  const msgpack_object *o = lookup(map, key);
  if (o == NULL)
    return 0;
  if (o->type != MSGPACK_OBJECT_BOOLEAN)
    return FZ_EPARAMS;
  *v = o->via.boolean;
  return 1;
}

int fzp_error_decode(const msgpack_object *error, int *code, const char **text,
                     uint32_t *text_len) {
  if (error == NULL || error->type == MSGPACK_OBJECT_NIL)
    return 0;
  int64_t c;
  if (fzp_get_i64(error, "code", &c) != 1 || c >= 0 || c < INT32_MIN)
    return FZ_EPROTO;
  *code = (int)c;
  if (text != NULL) {
    *text = "";
    *text_len = 0;
    if (fzp_get_str(error, "message", text, text_len) < 0)
      return FZ_EPROTO;
  }
  return 1;
}
