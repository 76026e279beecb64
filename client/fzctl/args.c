/*
 * args.c - parsing command-line values.  Every parser rejects trailing junk,
 * and every error quotes the text it could not use.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fzctl.h"

bool ctl_parse_u64(const char *opt, const char *text, uint64_t min, uint64_t max,
                   uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (!*text || *end || errno || text[0] == '-' || v < min || v > max) {
    ctl_err("invalid value '%s' for %s (expected an integer from %llu to %llu)",
            text, opt, (unsigned long long)min, (unsigned long long)max);
    return false;
  }
  *out = v;
  return true;
}

bool ctl_parse_double(const char *opt, const char *text, double *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  /* strtod() sets ERANGE for a denormal too (5e-324): a finite value that
   * is not 0 is what was written, so only an underflow to 0 or an overflow
   * is out of range. */
  bool range = errno == ERANGE && (v == 0 || !isfinite(v));
  if (!*text || *end || (errno && errno != ERANGE) || range || !isfinite(v) || v < 0 ||
      signbit(v)) {
    ctl_err("invalid value '%s' for %s (expected a non-negative number such as 1e-3%s)",
            text, opt, range ? "; this one is out of the range of a double" : "");
    return false;
  }
  *out = v;
  return true;
}

bool ctl_parse_shape(const char *text, unsigned *ndims, uint64_t *dims) {
  const char *p = text;
  unsigned n = 0;
  for (;;) {
    char *end;
    errno = 0;
    if (*p < '0' || *p > '9')
      goto bad;
    unsigned long long v = strtoull(p, &end, 10);
    if (errno || v == 0 || n == FZ_CLIENT_MAX_DIMS)
      goto bad;
    dims[n++] = v;
    if (*end == '\0')
      break;
    if (*end != 'x' && *end != ',')
      goto bad;
    p = end + 1;
  }
  *ndims = n;
  return true;
bad:
  ctl_err("invalid shape '%s' (expected 1 to %d positive sizes, slowest first, "
          "such as 1201x2401)", text, FZ_CLIENT_MAX_DIMS);
  return false;
}

/* Length of the well-formed UTF-8 sequence at p (1 to 4), or 0: overlong
 * forms, surrogates and code points over U+10FFFF are not well-formed. */
static size_t utf8_len(const unsigned char *p) {
  unsigned c = p[0];
  size_t n;
  unsigned cp, min;
  if (c < 0x80)
    return 1;
  if ((c & 0xe0) == 0xc0) {
    n = 2, cp = c & 0x1f, min = 0x80;
  } else if ((c & 0xf0) == 0xe0) {
    n = 3, cp = c & 0x0f, min = 0x800;
  } else if ((c & 0xf8) == 0xf0) {
    n = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  for (size_t i = 1; i < n; i++) {
    if ((p[i] & 0xc0) != 0x80)
      return 0; /* also stops at the NUL */
    cp = cp << 6 | (p[i] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

/* JSON text must be UTF-8, and a file name is any bytes: each byte that is
 * not part of a well-formed sequence becomes U+FFFD, the replacement
 * character, so the line stays valid JSON (docs/client.md). */
void ctl_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    size_t n = utf8_len(p);
    if (n == 0) {
      fputs("\\ufffd", f);
      p++;
      continue;
    }
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20 || *p == 0x7f)
      fprintf(f, "\\u%04x", *p);
    else
      fwrite(p, 1, n, f);
    p += n;
  }
  fputc('"', f);
}
