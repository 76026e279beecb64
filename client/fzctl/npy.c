/*
 * npy.c - numpy's .npy header, read and written without numpy.
 *
 * The file starts with "\x93NUMPY", a major and minor version byte, a
 * little-endian header length (2 bytes in version 1, 4 bytes in versions 2
 * and 3), and a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (1201, 2401), }
 * padded with spaces and ended by a newline.  Only what fzd can compress is
 * accepted: little-endian (or one-byte) integers and floats in C order.
 */
#include <stdio.h>
#include <string.h>

#include "fzctl.h"

static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

bool ctl_npy_is(const void *buf, size_t len) {
  return len >= sizeof magic && memcmp(buf, magic, sizeof magic) == 0;
}

typedef struct cursor {
  const char *p;
  const char *end;
} cursor;

static void skip_ws(cursor *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n'))
    c->p++;
}

static bool take(cursor *c, char ch) {
  skip_ws(c);
  if (c->p < c->end && *c->p == ch) {
    c->p++;
    return true;
  }
  return false;
}

/* A quoted Python string without escapes into buf. */
static bool take_str(cursor *c, char *buf, size_t cap) {
  skip_ws(c);
  if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
    return false;
  char q = *c->p++;
  const char *s = c->p;
  while (c->p < c->end && *c->p != q && *c->p != '\\')
    c->p++;
  if (c->p >= c->end || *c->p != q || (size_t)(c->p - s) >= cap)
    return false;
  memcpy(buf, s, (size_t)(c->p - s));
  buf[c->p - s] = '\0';
  c->p++;
  return true;
}

static bool take_word(cursor *c, const char *w) {
  skip_ws(c);
  size_t n = strlen(w);
  if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0)
    return false;
  c->p += n;
  return true;
}

/* "(1201, 2401)" or "(5,)" or "()". */
static bool take_shape(cursor *c, ctl_npy *out) {
  if (!take(c, '('))
    return false;
  out->ndims = 0;
  for (;;) {
    if (take(c, ')'))
      return true;
    skip_ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9' || out->ndims == FZ_CLIENT_MAX_DIMS)
      return false;
    uint64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
      if (v > (UINT64_MAX - 9) / 10)
        return false;
      v = v * 10 + (uint64_t)(*c->p++ - '0');
    }
    out->shape[out->ndims++] = v;
    if (!take(c, ',')) {
      if (take(c, ')'))
        return true;
      return false;
    }
  }
}

/* '<f4' -> "f32".  Big-endian multi-byte types are refused. */
static bool descr_to_dtype(const char *d, char *dtype) {
  char order = d[0];
  if (order != '<' && order != '|' && order != '=')
    return false;
  char kind = d[1];
  int bytes = d[2] - '0';
  if (d[2] == '\0' || d[3] != '\0' || (kind != 'f' && kind != 'i' && kind != 'u'))
    return false;
  if (bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8)
    return false;
  if (kind == 'f' && bytes < 4)
    return false;
  if (order == '|' && bytes != 1)
    return false;
  snprintf(dtype, 8, "%c%d", kind, bytes * 8);
  return true;
}

int ctl_npy_parse(const void *buf, size_t len, ctl_npy *out, char *why,
                  size_t why_len) {
  const unsigned char *b = buf;
  if (!ctl_npy_is(buf, len) || len < 10) {
    snprintf(why, why_len, "not a .npy file (bad magic)");
    return -1;
  }
  unsigned major = b[6];
  size_t hlen, start;
  if (major == 1) {
    hlen = (size_t)b[8] | (size_t)b[9] << 8;
    start = 10;
  } else if (major == 2 || major == 3) {
    if (len < 12) {
      snprintf(why, why_len, "truncated .npy header");
      return -1;
    }
    hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    start = 12;
  } else {
    snprintf(why, why_len, "unsupported .npy version %u.%u", major, b[7]);
    return -1;
  }
  if (hlen > len - start) {
    snprintf(why, why_len, "truncated .npy header (%zu bytes declared)", hlen);
    return -1;
  }
  cursor c = {.p = (const char *)b + start, .end = (const char *)b + start + hlen};
  char key[32], descr[16] = "";
  bool have_order = false, have_shape = false;
  memset(out, 0, sizeof *out);
  if (!take(&c, '{'))
    goto malformed;
  while (!take(&c, '}')) {
    if (!take_str(&c, key, sizeof key) || !take(&c, ':'))
      goto malformed;
    if (strcmp(key, "descr") == 0) {
      if (!take_str(&c, descr, sizeof descr)) {
        snprintf(why, why_len, "unsupported .npy descr (structured types are not arrays of numbers)");
        return -1;
      }
    } else if (strcmp(key, "fortran_order") == 0) {
      if (take_word(&c, "True")) {
        snprintf(why, why_len, "'fortran_order': True is not supported (save the array in C order)");
        return -1;
      }
      if (!take_word(&c, "False"))
        goto malformed;
      have_order = true;
    } else if (strcmp(key, "shape") == 0) {
      if (!take_shape(&c, out)) {
        snprintf(why, why_len, "unsupported .npy shape (1 to %d dimensions)", FZ_CLIENT_MAX_DIMS);
        return -1;
      }
      have_shape = true;
    } else {
      snprintf(why, why_len, "unknown .npy header key '%s'", key);
      return -1;
    }
    if (!take(&c, ',')) {
      if (take(&c, '}'))
        break;
      goto malformed;
    }
  }
  if (!descr[0] || !have_order || !have_shape)
    goto malformed;
  if (!descr_to_dtype(descr, out->dtype)) {
    snprintf(why, why_len, "unsupported .npy descr '%s' (little-endian ints and floats only)", descr);
    return -1;
  }
  if (out->ndims == 0) {
    snprintf(why, why_len, "0-dimensional .npy arrays are not supported");
    return -1;
  }
  for (unsigned i = 0; i < out->ndims; i++)
    if (out->shape[i] == 0) {
      snprintf(why, why_len, "empty .npy array (a dimension is 0)");
      return -1;
    }
  out->data_offset = start + hlen;
  return 0;

malformed: {
  /* Quote at most 20 bytes, never past the header, printable only. */
  char near[21];
  size_t n = (size_t)(c.end - c.p) < 20 ? (size_t)(c.end - c.p) : 20;
  for (size_t i = 0; i < n; i++)
    near[i] = c.p[i] >= 0x20 && c.p[i] < 0x7f ? c.p[i] : '?';
  near[n] = '\0';
  snprintf(why, why_len, "malformed .npy header dict near '%s'", near);
  return -1;
}
}

int ctl_npy_header(const char *dtype, unsigned ndims, const uint64_t *shape,
                   char buf[CTL_NPY_HEADER_BYTES]) {
  char kind = dtype[0];
  int bits = 0;
  if (sscanf(dtype + 1, "%d", &bits) != 1 || (kind != 'f' && kind != 'i' && kind != 'u'))
    return -1;
  char dict[CTL_NPY_HEADER_BYTES];
  int n = snprintf(dict, sizeof dict, "{'descr': '%c%c%d', 'fortran_order': False, 'shape': (",
                   bits == 8 ? '|' : '<', kind, bits / 8);
  for (unsigned i = 0; i < ndims; i++)
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%llu,%s",
                  (unsigned long long)shape[i], i + 1 < ndims ? " " : "");
  n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
  size_t hlen = CTL_NPY_HEADER_BYTES - 10;
  if ((size_t)n + 1 > hlen)
    return -1;
  memcpy(buf, magic, sizeof magic);
  buf[6] = 1;
  buf[7] = 0;
  buf[8] = (char)(hlen & 0xff);
  buf[9] = (char)(hlen >> 8);
  memset(buf + 10, ' ', hlen);
  memcpy(buf + 10, dict, (size_t)n);
  buf[CTL_NPY_HEADER_BYTES - 1] = '\n';
  return 0;
}
