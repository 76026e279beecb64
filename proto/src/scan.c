/*
 * scan.c - the pre-scanner that stands between untrusted bytes and msgpack-c.
 *
 * msgpack-c's unpacker allocates an array of objects as soon as it reads a
 * container header, so a 5-byte "array32 of 4 billion" would make it ask for
 * ~100 GB.  fzp_scan() walks the encoding first, without allocating, and only
 * lets a message through when it is complete and every count it declares is
 * backed by bytes actually present: each element owed costs at least one byte,
 * so the sum of the elements still owed is a lower bound on the bytes still to
 * come, and a declaration that would push the message past max_message is
 * refused before any of those bytes arrive.
 *
 * The walk is one pass: each byte is looked at once, runs of one-byte
 * elements in a tight loop, and a caller that receives a message in pieces
 * keeps an fzp_scan_state so that each call resumes where the last stopped
 * (rescanning from the start on every read made a 64 MiB message of tiny
 * elements cost seconds).  The number of objects in a message is bounded
 * too, because msgpack-c spends a msgpack_object (24 bytes or more) on each.
 */
#include <stdbool.h>
#include <string.h>

#include "fzp.h"

#define SCAN_DEPTH_HARD FZP_SCAN_DEPTH_HARD

void fzp_limits_default(fzp_limits *lim) {
  lim->max_message = (64u << 20) + 4096u;
  lim->max_depth = 16;
  lim->max_container = 65536;
  lim->max_objects = FZP_MAX_OBJECTS_DEFAULT;
}

static uint64_t load_be(const uint8_t *p, unsigned n) {
  uint64_t v = 0;
  for (unsigned i = 0; i < n; i++)
    v = (v << 8) | p[i];
  return v;
}

/* What one head byte announces. */
typedef struct head {
  unsigned hdr;     /* bytes of the head byte plus its length field */
  unsigned lenbytes;/* size of the big-endian length field (0: none) */
  uint64_t payload; /* fixed payload bytes after the header */
  int kind;         /* 0 scalar, 1 array, 2 map, 3 str/bin (length field), 4 ext */
  uint64_t count;   /* for fix containers */
  int bad;          /* reserved byte */
} head;

static head classify(uint8_t b) {
  head h = {1, 0, 0, 0, 0, 0};
  if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
    return h;
  if (b >= 0x80 && b <= 0x8f) {
    h.kind = 2;
    h.count = b & 0x0f;
    return h;
  }
  if (b >= 0x90 && b <= 0x9f) {
    h.kind = 1;
    h.count = b & 0x0f;
    return h;
  }
  if (b >= 0xa0 && b <= 0xbf) {
    h.payload = b & 0x1f;
    return h;
  }
  switch (b) {
  case 0xc4: case 0xd9: h.kind = 3; h.lenbytes = 1; break; /* bin8, str8 */
  case 0xc5: case 0xda: h.kind = 3; h.lenbytes = 2; break;
  case 0xc6: case 0xdb: h.kind = 3; h.lenbytes = 4; break;
  case 0xc7: h.kind = 4; h.lenbytes = 1; break; /* ext8: len, type, data */
  case 0xc8: h.kind = 4; h.lenbytes = 2; break;
  case 0xc9: h.kind = 4; h.lenbytes = 4; break;
  case 0xca: h.payload = 4; break; /* float32 */
  case 0xcb: h.payload = 8; break;
  case 0xcc: case 0xd0: h.payload = 1; break;
  case 0xcd: case 0xd1: h.payload = 2; break;
  case 0xce: case 0xd2: h.payload = 4; break;
  case 0xcf: case 0xd3: h.payload = 8; break;
  case 0xd4: h.payload = 2; break; /* fixext: type + data */
  case 0xd5: h.payload = 3; break;
  case 0xd6: h.payload = 5; break;
  case 0xd7: h.payload = 9; break;
  case 0xd8: h.payload = 17; break;
  case 0xdc: case 0xdd: h.kind = 1; h.lenbytes = b == 0xdc ? 2 : 4; break;
  case 0xde: case 0xdf: h.kind = 2; h.lenbytes = b == 0xde ? 2 : 4; break;
  default: h.bad = 1; break; /* 0xc1, never used */
  }
  h.hdr += h.lenbytes;
  return h;
}

/* Objects of one byte that open nothing: fixints, nil, booleans and the
 * empty fixstr.  These take the fast path. */
static bool one_byte_scalar(uint8_t b) {
  return b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3 || b == 0xa0;
}

void fzp_scan_reset(fzp_scan_state *st) {
  st->pos = 0;
  st->owed = 1;
  st->objects = 0;
  st->depth = 0;
  st->left[0] = 1;
}

int64_t fzp_scan(const void *buf, size_t len, const fzp_limits *lim) {
  return fzp_scan_ex(buf, len, lim, NULL);
}

int64_t fzp_scan_ex(const void *buf, size_t len, const fzp_limits *lim,
                    uint64_t *need) {
  fzp_scan_state st;
  fzp_scan_reset(&st);
  return fzp_scan_resume(&st, buf, len, lim, need);
}

/* The state holds where the walk stopped (pos), the elements still owed per
 * open container (left[]) and their sum (owed), so a call picks up at pos
 * and never looks at a byte twice: a message that arrives in many reads
 * costs one pass, not one pass per read. */
int64_t fzp_scan_resume(fzp_scan_state *st, const void *buf, size_t len,
                        const fzp_limits *lim, uint64_t *need) {
  fzp_limits def;
  uint64_t need_local;
  if (need == NULL)
    need = &need_local;
  *need = 0;
  if (lim == NULL) {
    fzp_limits_default(&def);
    lim = &def;
  }
  const uint8_t *p = buf;
  uint32_t max_depth = lim->max_depth < SCAN_DEPTH_HARD ? lim->max_depth
                                                        : SCAN_DEPTH_HARD;
  uint64_t max_objects = lim->max_objects ? lim->max_objects : UINT64_MAX;
  uint64_t *left = st->left;
  uint32_t depth = st->depth;
  uint64_t owed = st->owed, pos = st->pos, objects = st->objects;
  int64_t ret;

  for (;;) {
    while (left[depth] == 0) {
      if (depth == 0) {
        ret = (int64_t)pos;
        goto out;
      }
      depth--;
    }
    if (pos + owed > lim->max_message) {
      ret = FZ_EMSGSIZE;
      goto out;
    }
    if (pos >= len) {
      *need = pos + owed;
      ret = 0;
      goto out;
    }
    /* Runs of one-byte scalars (the smallest elements, and the bulk of any
     * message built to be slow) go through a tight loop: pos + owed stays
     * the same, so no limit can be crossed inside it. */
    if (one_byte_scalar(p[pos])) {
      uint64_t run = left[depth];
      if (run > len - pos)
        run = len - pos;
      if (run > max_objects - objects)
        run = max_objects - objects + 1;
      uint64_t i = 0;
      while (i < run && one_byte_scalar(p[pos + i]))
        i++;
      pos += i;
      left[depth] -= i;
      owed -= i;
      objects += i;
      if (objects > max_objects) {
        ret = FZ_EPROTO;
        goto out;
      }
      continue;
    }
    if (++objects > max_objects) {
      ret = FZ_EPROTO;
      goto out;
    }
    head h = classify(p[pos]);
    if (h.bad) {
      ret = FZ_EPROTO;
      goto out;
    }
    /* Nothing is consumed until the whole head is present, so that a
     * resumed scan starts again at this byte. */
    if (pos + h.hdr + owed - 1 > lim->max_message) {
      ret = FZ_EMSGSIZE;
      goto out;
    }
    if (pos + h.hdr > len) {
      objects--;
      *need = pos + h.hdr + owed - 1;
      ret = 0;
      goto out;
    }
    uint64_t n = h.lenbytes ? load_be(p + pos + 1, h.lenbytes) : h.count;
    if (h.kind == 1 || h.kind == 2) {
      if (n > lim->max_container || depth + 1 > max_depth) {
        ret = FZ_EPROTO;
        goto out;
      }
      uint64_t elems = h.kind == 2 ? 2 * n : n;
      if (pos + h.hdr + owed - 1 + elems > lim->max_message) {
        ret = FZ_EMSGSIZE;
        goto out;
      }
      left[depth]--;
      owed--;
      pos += h.hdr;
      depth++;
      left[depth] = elems;
      owed += elems;
      continue;
    }
    uint64_t body = h.payload;
    if (h.kind == 3)
      body = n;
    else if (h.kind == 4)
      body = n + 1; /* the type byte, then n bytes of data */
    if (pos + h.hdr + body + owed - 1 > lim->max_message) {
      ret = FZ_EMSGSIZE;
      goto out;
    }
    if (pos + h.hdr + body > len) {
      objects--;
      *need = pos + h.hdr + body + owed - 1;
      ret = 0;
      goto out;
    }
    left[depth]--;
    owed--;
    pos += h.hdr + body;
  }
out:
  st->depth = depth;
  st->owed = owed;
  st->pos = pos;
  st->objects = objects;
  return ret;
}
