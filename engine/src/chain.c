/*
 * chain.c - the pipeline text syntax: parsing, checking and canonical form.
 *
 *   chain  := stage ( '|' stage )*
 *   stage  := name [ '(' key '=' value ( ',' key '=' value )* ')' ]
 *
 * Stages: quant(eb=FLOAT, mode=abs|rel|pwrel, fill=FLOAT),
 * diff(map=zigzag|negabinary), lorenzo(dims=1..3), interp(dims=1..3), huffman,
 * bitshuffle, rze(levels=1..6), bitpack.  A preset name stands for its chain.
 * Every error quotes the offending text.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

static const char *const stage_names[] = {
    [FZE_STAGE_QUANT] = "quant",           [FZE_STAGE_DIFF] = "diff",
    [FZE_STAGE_BITSHUFFLE] = "bitshuffle", [FZE_STAGE_RZE] = "rze",
    [FZE_STAGE_BITPACK] = "bitpack",       [FZE_STAGE_LORENZO] = "lorenzo",
    [FZE_STAGE_HUFFMAN] = "huffman",       [FZE_STAGE_INTERP] = "interp",
    [FZE_STAGE_BYTEPLANES] = "byteplanes",
};
#define NSTAGE_NAMES (sizeof stage_names / sizeof stage_names[0])

/* The longest parameter value taken: far more than any number needs, and
 * anything longer is refused rather than cut. */
#define TOKEN_MAX 127

static const char *skip_ws(const char *p) {
  while (isspace((unsigned char)*p))
    p++;
  return p;
}

/* Copies an identifier-like token ([A-Za-z0-9_.+-]) into buf and sets *len
 * to its full length, which is at least `cap` when it did not fit. */
static const char *token(const char *p, char *buf, size_t cap, size_t *len) {
  size_t k = 0;
  while (isalnum((unsigned char)*p) || *p == '_' || *p == '.' || *p == '+' ||
         *p == '-') {
    if (k + 1 < cap)
      buf[k] = *p;
    k++;
    p++;
  }
  buf[k < cap ? k : cap - 1] = 0;
  *len = k;
  return p;
}

/* A whole number, or false: nothing before or after it, no overflow to
 * infinity or underflow to zero (what the user wrote would not be what
 * runs), and no NaN or Inf spelled out. */
static bool parse_number(const char *val, double *out) {
  char *end;
  errno = 0;
  double v = strtod(val, &end);
  if (*val == 0 || *end != 0 || !isfinite(v) || (errno == ERANGE && v == 0))
    return false;
  *out = v;
  return true;
}

static int set_param(fze_stage *st, const char *key, const char *val,
                     char *why, size_t why_len) {
  const char *sname = stage_names[st->id];
  if (st->id == FZE_STAGE_QUANT && strcmp(key, "eb") == 0) {
    double eb;
    if (!parse_number(val, &eb) || !(eb > 0)) {
      fze_why(why, why_len, "quant: eb must be a positive number, not '%s'", val);
      return FZ_EBOUND;
    }
    st->eb = eb;
    st->has_eb = true;
    return 0;
  }
  if (st->id == FZE_STAGE_QUANT && strcmp(key, "fill") == 0) {
    double f;
    if (!parse_number(val, &f)) {
      fze_why(why, why_len,
              "quant: fill must be a finite number, not '%s' (NaN and Inf are "
              "always kept exactly)", val);
      return FZ_EPIPELINE;
    }
    st->fill = f;
    st->has_fill = true;
    return 0;
  }
  if (st->id == FZE_STAGE_QUANT && strcmp(key, "mode") == 0) {
    fz_eb_mode m;
    if (fz_eb_mode_parse(val, &m) != 0) {
      fze_why(why, why_len, "quant: mode must be abs, rel or pwrel, not '%s'", val);
      return FZ_EPIPELINE;
    }
    st->mode = (uint8_t)m;
    st->has_mode = true;
    return 0;
  }
  if (st->id == FZE_STAGE_DIFF && strcmp(key, "map") == 0) {
    if (strcmp(val, "zigzag") == 0)
      st->mode = FZE_MAP_ZIGZAG;
    else if (strcmp(val, "negabinary") == 0)
      st->mode = FZE_MAP_NEGABINARY;
    else {
      fze_why(why, why_len, "diff: map must be zigzag or negabinary, not '%s'", val);
      return FZ_EPIPELINE;
    }
    return 0;
  }
  if ((st->id == FZE_STAGE_LORENZO || st->id == FZE_STAGE_INTERP) &&
      strcmp(key, "dims") == 0) {
    if (strlen(val) != 1 || val[0] < '1' || val[0] > '3') {
      fze_why(why, why_len, "%s: dims must be 1, 2 or 3, not '%s'", sname, val);
      return FZ_EPIPELINE;
    }
    st->pdims = (uint8_t)(val[0] - '0');
    return 0;
  }
  if (st->id == FZE_STAGE_RZE && strcmp(key, "levels") == 0) {
    char *end;
    long v = strtol(val, &end, 10);
    if (*val == 0 || *end != 0 || v < 1 || v > FZE_RZE_MAX_LEVELS) {
      fze_why(why, why_len, "rze: levels must be 1..%d, not '%s'",
              FZE_RZE_MAX_LEVELS, val);
      return FZ_EPIPELINE;
    }
    st->levels = (uint8_t)v;
    return 0;
  }
  fze_why(why, why_len, "%s: unknown parameter '%s'", sname, key);
  return FZ_EPIPELINE;
}

/* "unknown preset or stage" when the whole text is one bare name (which
 * could have meant either), else "unknown stage"; both list what exists.  A
 * preset's name inside a chain gets its stages instead. */
static void unknown_name(const char *text, const char *at, size_t len, char *why,
                         size_t why_len) {
  char list[256];
  size_t k = 0, np;
  const fz_preset *pr = fz_presets(&np);
  list[0] = 0;
  for (size_t i = 0; i < np && k < sizeof list; i++)
    k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "presets: ",
                          pr[i].name);
  for (size_t i = 1; i < NSTAGE_NAMES && k < sizeof list; i++)
    k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i > 1 ? ", " : "; stages: ",
                          stage_names[i]);
  bool alone = skip_ws(text) == at && *skip_ws(at + len) == 0;
  for (size_t i = 0; i < np; i++)
    if (strlen(pr[i].name) == len && strncmp(pr[i].name, at, len) == 0) {
      fze_why(why, why_len, "preset '%s' stands alone, not in a chain: spell out its "
                            "stages, '%s'", pr[i].name, pr[i].chain);
      return;
    }
  fze_why(why, why_len, "unknown %s '%.*s' (%s)", alone ? "preset or stage" : "stage",
          (int)len, at, list);
}

static void stage_defaults(fze_stage *st, uint8_t id) {
  memset(st, 0, sizeof *st);
  st->id = id;
  st->mode = id == FZE_STAGE_QUANT ? FZ_EB_REL : FZE_MAP_ZIGZAG;
  st->levels = id == FZE_STAGE_RZE ? 4 : 0;
}

int fze_chain_parse(const char *text, fze_chain *out, char *why, size_t why_len) {
  if (text == NULL || out == NULL)
    return FZ_EINVAL;
  size_t np;
  const fz_preset *pr = fz_presets(&np);
  const char *t = skip_ws(text);
  for (size_t i = 0; i < np; i++) {
    size_t l = strlen(pr[i].name);
    if (strncmp(t, pr[i].name, l) == 0 && *skip_ws(t + l) == 0)
      return fze_chain_parse(pr[i].chain, out, why, why_len);
  }

  memset(out, 0, sizeof *out);
  const char *p = text;
  for (;;) {
    char name[32], key[32], val[TOKEN_MAX + 1];
    size_t tl;
    p = skip_ws(p);
    const char *at = p;
    p = token(p, name, sizeof name, &tl);
    if (name[0] == 0) {
      fze_why(why, why_len, "expected a stage name at '%.20s' in '%s'", at, text);
      return FZ_EPIPELINE;
    }
    uint8_t id = 0;
    for (uint8_t k = 1; k < NSTAGE_NAMES; k++)
      if (tl < sizeof name && stage_names[k] && strcmp(stage_names[k], name) == 0)
        id = k;
    if (id == 0) {
      unknown_name(text, at, tl, why, why_len);
      return FZ_EPIPELINE;
    }
    if (out->n == FZE_MAX_STAGES) {
      fze_why(why, why_len, "too many stages (at most %d)", FZE_MAX_STAGES);
      return FZ_EPIPELINE;
    }
    fze_stage *st = &out->st[out->n++];
    stage_defaults(st, id);
    p = skip_ws(p);
    if (*p == '(') {
      p = skip_ws(p + 1);
      if (*p == ')') {
        p++;
      } else {
        for (;;) {
          at = p;
          p = skip_ws(token(p, key, sizeof key, &tl));
          if (key[0] == 0 || *p != '=') {
            fze_why(why, why_len, "%s: expected key=value at '%.20s'", name, at);
            return FZ_EPIPELINE;
          }
          if (tl >= sizeof key) {
            fze_why(why, why_len, "%s: unknown parameter '%.*s'", name, (int)tl, at);
            return FZ_EPIPELINE;
          }
          at = p = skip_ws(p + 1);
          p = skip_ws(token(p, val, sizeof val, &tl));
          if (val[0] == 0) {
            fze_why(why, why_len, "%s: missing value for '%s' at '%.20s'", name,
                    key, at);
            return FZ_EPIPELINE;
          }
          /* A value is taken whole or not at all: a cut number would run
           * with a bound nobody asked for. */
          if (tl > TOKEN_MAX) {
            fze_why(why, why_len, "%s: the value of '%s' is %zu characters, more than %d: '%.*s'",
                    name, key, tl, TOKEN_MAX, (int)tl, at);
            return FZ_EPIPELINE;
          }
          int rc = set_param(st, key, val, why, why_len);
          if (rc < 0)
            return rc;
          if (*p == ',') {
            p = skip_ws(p + 1);
            continue;
          }
          if (*p == ')') {
            p++;
            break;
          }
          fze_why(why, why_len, "%s: expected ',' or ')' at '%.20s'", name, p);
          return FZ_EPIPELINE;
        }
      }
    }
    p = skip_ws(p);
    if (*p == 0)
      break;
    if (*p != '|') {
      fze_why(why, why_len, "expected '|' between stages at '%.20s'", p);
      return FZ_EPIPELINE;
    }
    p++;
  }
  return 0;
}

int fze_chain_check(const fze_chain *c, fz_dtype t, char *why, size_t why_len) {
  if (c->n == 0) {
    fze_why(why, why_len, "empty pipeline");
    return FZ_EPIPELINE;
  }
  bool bytes = false; /* the stream is words until bitshuffle or huffman */
  bool coded = false; /* huffman came: nothing but rze may follow */
  unsigned lorenzos = 0; /* a chunk names the dims of one lorenzo stage */
  for (unsigned i = 0; i < c->n; i++) {
    const fze_stage *st = &c->st[i];
    const char *name = (st->id < NSTAGE_NAMES && stage_names[st->id])
                           ? stage_names[st->id] : NULL;
    if (name == NULL) {
      fze_why(why, why_len, "unknown stage id %u", st->id);
      return FZ_EPIPELINE;
    }
    bool last = i + 1 == c->n;
    if (coded && st->id != FZE_STAGE_RZE) {
      fze_why(why, why_len, "%s cannot follow huffman: only rze can", name);
      return FZ_EPIPELINE;
    }
    switch (st->id) {
    case FZE_STAGE_QUANT:
      if (i != 0) {
        fze_why(why, why_len, "quant must be the first stage");
        return FZ_EPIPELINE;
      }
      if (!fze_dtype_is_float(t)) {
        fze_why(why, why_len, "quant needs f32 or f64 data, not %s",
                fz_dtype_name(t) ? fz_dtype_name(t) : "?");
        return FZ_EDTYPE;
      }
      if (st->mode > FZ_EB_PWREL) {
        fze_why(why, why_len, "quant: unknown mode %u", st->mode);
        return FZ_EPIPELINE;
      }
      break;
    case FZE_STAGE_DIFF:
    case FZE_STAGE_BITSHUFFLE:
    case FZE_STAGE_BITPACK:
    case FZE_STAGE_LORENZO:
    case FZE_STAGE_HUFFMAN:
    case FZE_STAGE_INTERP:
    case FZE_STAGE_BYTEPLANES:
      if (st->id == FZE_STAGE_INTERP && (i != 1 || c->st[0].id != FZE_STAGE_QUANT)) {
        fze_why(why, why_len, "interp predicts the values quant bins: it must come "
                              "right after quant");
        return FZ_EPIPELINE;
      }
      if (bytes) {
        fze_why(why, why_len, "%s needs words, but bitshuffle before it made bytes",
                name);
        return FZ_EPIPELINE;
      }
      if ((st->id == FZE_STAGE_LORENZO || st->id == FZE_STAGE_INTERP) && st->pdims > 3) {
        fze_why(why, why_len, "%s: dims must be 1, 2 or 3", name);
        return FZ_EPIPELINE;
      }
      if (st->id == FZE_STAGE_LORENZO && ++lorenzos > 1) {
        fze_why(why, why_len, "lorenzo may appear only once in a chain");
        return FZ_EPIPELINE;
      }
      if (st->id == FZE_STAGE_HUFFMAN)
        bytes = coded = true;
      if (st->id == FZE_STAGE_DIFF && st->mode > FZE_MAP_NEGABINARY) {
        fze_why(why, why_len, "diff: unknown map %u", st->mode);
        return FZ_EPIPELINE;
      }
      if (st->id == FZE_STAGE_BITSHUFFLE)
        bytes = true;
      if ((st->id == FZE_STAGE_BITPACK || st->id == FZE_STAGE_BYTEPLANES) && !last) {
        fze_why(why, why_len, "%s must be the last stage", name);
        return FZ_EPIPELINE;
      }
      break;
    case FZE_STAGE_RZE:
      if (!last) {
        fze_why(why, why_len, "rze must be the last stage");
        return FZ_EPIPELINE;
      }
      if (st->levels < 1 || st->levels > FZE_RZE_MAX_LEVELS) {
        fze_why(why, why_len, "rze: levels must be 1..%d", FZE_RZE_MAX_LEVELS);
        return FZ_EPIPELINE;
      }
      break;
    }
  }
  return 0;
}

bool fze_chain_has_quant(const fze_chain *c) {
  return c->n > 0 && c->st[0].id == FZE_STAGE_QUANT;
}

bool fze_chain_has_ratio(const fze_chain *c) {
  for (unsigned i = 0; i < c->n; i++)
    if (fze_stage_is_ratio(c->st[i].id))
      return true;
  return false;
}

int fze_chain_resolve_shape(fze_chain *c, unsigned ndims, const uint64_t *dims,
                            char *why, size_t why_len) {
  for (unsigned i = 0; i < c->n; i++) {
    fze_stage *st = &c->st[i];
    if (st->id != FZE_STAGE_LORENZO && st->id != FZE_STAGE_INTERP)
      continue;
    if (st->pdims == 0)
      st->pdims = (uint8_t)(ndims < 3 ? ndims : 3);
    if (st->pdims < 1 || st->pdims > 3 || st->pdims > ndims) {
      fze_why(why, why_len, "%s: dims=%u, but the array has %u dimension%s",
              stage_names[st->id], st->pdims, ndims, ndims == 1 ? "" : "s");
      return FZ_EPIPELINE;
    }
    /* The leading dimensions fold into the slowest predicted one. */
    for (unsigned k = 1; k <= st->pdims; k++) {
      uint64_t fold = 1, *ext = st->ext[k - 1];
      for (unsigned d = 0; d + k <= ndims - 1; d++)
        fold *= dims[d];
      ext[0] = ext[1] = 1;
      ext[3 - k] = fold * dims[ndims - k];
      for (unsigned j = 1; j < k; j++)
        ext[3 - k + j] = dims[ndims - k + j];
    }
  }
  return 0;
}

static int format_quant(const fze_stage *st, const char *sep, char *buf, size_t len) {
  char params[96];
  size_t k = 0;
  params[0] = 0;
  if (st->has_eb)
    k += (size_t)snprintf(params + k, sizeof params - k, ",eb=%.17g", st->eb);
  if (st->has_mode && k < sizeof params)
    k += (size_t)snprintf(params + k, sizeof params - k, ",mode=%s",
                          fz_eb_mode_name((fz_eb_mode)st->mode));
  if (st->has_fill && k < sizeof params)
    k += (size_t)snprintf(params + k, sizeof params - k, ",fill=%.17g", st->fill);
  if (k == 0)
    return snprintf(buf, len, "%squant", sep);
  return snprintf(buf, len, "%squant(%s)", sep, params + 1);
}

void fze_chain_format(const fze_chain *c, char *buf, size_t len) {
  size_t k = 0;
  buf[0] = 0;
  for (unsigned i = 0; i < c->n && k < len; i++) {
    const fze_stage *st = &c->st[i];
    const char *sep = i ? " | " : "";
    int w;
    switch (st->id) {
    case FZE_STAGE_QUANT:
      /* What the text left to the job's parameters stays unsaid, so the
       * canonical text of any chain parses back to it. */
      w = format_quant(st, sep, buf + k, len - k);
      break;
    case FZE_STAGE_DIFF:
      w = snprintf(buf + k, len - k, "%sdiff(map=%s)", sep,
                   st->mode == FZE_MAP_ZIGZAG ? "zigzag" : "negabinary");
      break;
    case FZE_STAGE_RZE:
      w = snprintf(buf + k, len - k, "%srze(levels=%u)", sep, st->levels);
      break;
    case FZE_STAGE_LORENZO:
    case FZE_STAGE_INTERP:
      /* dims left to the job's shape stays unsaid, as quant's bound does. */
      w = st->pdims ? snprintf(buf + k, len - k, "%s%s(dims=%u)", sep, stage_names[st->id],
                               st->pdims)
                    : snprintf(buf + k, len - k, "%s%s", sep, stage_names[st->id]);
      break;
    default:
      w = snprintf(buf + k, len - k, "%s%s", sep,
                   st->id < NSTAGE_NAMES && stage_names[st->id]
                       ? stage_names[st->id] : "?");
      break;
    }
    if (w < 0)
      break;
    k += (size_t)w;
  }
}
