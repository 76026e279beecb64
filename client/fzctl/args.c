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
  if (!*text || *end || errno || !isfinite(v) || v < 0) {
    ctl_err("invalid value '%s' for %s (expected a non-negative number such as 1e-3)",
            text, opt);
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

void ctl_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}
