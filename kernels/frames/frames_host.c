/*
 * frames_host.c - the GPU frames decoder's host logic that needs no CUDA
 * (fzf_host.h): cut keys, mask bits, the folded matrix, status messages.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fzf_host.h"

void fzf_say(char *why, size_t why_len, const char *fmt, ...) {
  if (!why || !why_len)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, why_len, fmt, ap);
  va_end(ap);
}

int fzf_kind(fz_dtype t) {
  switch (t) {
  case FZ_I8:
  case FZ_I16:
  case FZ_I32:
  case FZ_I64: return FZF_SIGNED;
  case FZ_F32:
  case FZ_F64: return FZF_FLOAT;
  default: return FZF_UNSIGNED;
  }
}

fzf_cut fzf_cut_of(double cut, unsigned w, int kind) {
  fzf_cut c = {FZF_CUT_KEY, 0, ~0ull};
  if (isnan(cut)) {
    c.mode = FZF_CUT_NONE;
    return c;
  }
  if (kind == FZF_FLOAT) {
    uint64_t bits;
    if (w == 4) {
      /* The largest float at or below the cut: a float is above the cut
       * exactly when it is above that one.  A zero cut is +0, as neither
       * -0 nor +0 is above -0.0. */
      float f = (float)cut;
      if ((double)f > cut)
        f = nextafterf(f, -INFINITY);
      if (f == 0.0f)
        f = 0.0f;
      uint32_t b;
      memcpy(&b, &f, 4);
      bits = b;
      float inf = INFINITY;
      memcpy(&b, &inf, 4);
      c.kinf = fzf_order_key(b, 4, kind);
    } else {
      double d = cut == 0.0 ? 0.0 : cut, inf = INFINITY;
      memcpy(&bits, &d, 8);
      uint64_t b;
      memcpy(&b, &inf, 8);
      c.kinf = fzf_order_key(b, 8, kind);
    }
    c.k = fzf_order_key(bits, w, kind);
    return c;
  }
  double lo, hi; /* the dtype's range */
  if (kind == FZF_SIGNED) {
    lo = -ldexp(1.0, (int)(8 * w - 1));
    hi = ldexp(1.0, (int)(8 * w - 1)) - 1.0;
  } else {
    lo = 0.0;
    hi = ldexp(1.0, (int)(8 * w)) - 1.0; /* rounds to 2^64 for w = 8 */
  }
  if (cut < lo) {
    c.mode = FZF_CUT_ALL;
  } else if (cut >= hi) {
    c.mode = FZF_CUT_NONE;
  } else {
    double t = floor(cut);
    uint64_t x = kind == FZF_SIGNED ? (uint64_t)(int64_t)t : (uint64_t)t;
    if (w < 8)
      x &= (1ull << (8 * w)) - 1;
    c.k = fzf_order_key(x, w, kind);
  }
  return c;
}

uint8_t *fzf_mask_bits(const uint8_t *mask, size_t npixels) {
  uint8_t *bits = calloc(npixels / 8 + 16, 1);
  if (!bits)
    return NULL;
  for (size_t i = 0; i < npixels; i++)
    bits[i / 8] |= (uint8_t)((mask[i] != 0) << (i % 8));
  return bits;
}

void fzf_csr_free(fzf_csr *c) {
  if (!c)
    return;
  free(c->indptr);
  free(c->cols);
  free(c->wf);
  free(c->wi);
  memset(c, 0, sizeof *c);
}

int fzf_csr_fold(const fz_frames_csr *m, const uint8_t *active, size_t npixels, fz_dtype dtype,
                 fzf_csr *out, char *why, size_t why_len) {
  memset(out, 0, sizeof *out);
  int kind = fzf_kind(dtype);
  if (!m->indptr || (!m->w_f32) == (!m->w_i32) || m->nrows > SIZE_MAX / 16) {
    fzf_say(why, why_len, "frames (GPU): a matrix needs indptr and exactly one of w_f32, w_i32");
    return FZ_EINVAL;
  }
  if (m->w_i32 && (kind == FZF_FLOAT || fz_dtype_size(dtype) > 4)) {
    fzf_say(why, why_len,
            "frames (GPU): integer weights need integer pixels of at most 4 bytes, not %s",
            fz_dtype_name(dtype));
    return FZ_EDTYPE;
  }
  uint64_t nnz = m->indptr[m->nrows];
  if (m->indptr[0] != 0 || nnz > SIZE_MAX / 8 || (nnz && !m->indices)) {
    fzf_say(why, why_len, "frames (GPU): matrix indptr starts at %llu and ends at %llu",
            (unsigned long long)m->indptr[0], (unsigned long long)nnz);
    return FZ_EINVAL;
  }
  out->nrows = m->nrows;
  out->indptr = malloc((m->nrows + 1) * sizeof *out->indptr);
  out->cols = malloc((nnz ? nnz : 1) * sizeof *out->cols);
  if (m->w_f32)
    out->wf = malloc((nnz ? nnz : 1) * sizeof *out->wf);
  else
    out->wi = malloc((nnz ? nnz : 1) * sizeof *out->wi);
  if (!out->indptr || !out->cols || (!out->wf && !out->wi)) {
    fzf_csr_free(out);
    fzf_say(why, why_len, "frames (GPU): out of memory for a matrix of %llu entries",
            (unsigned long long)nnz);
    return FZ_ENOMEM;
  }
  size_t kept = 0;
  out->indptr[0] = 0;
  for (size_t r = 0; r < m->nrows; r++) {
    if (m->indptr[r + 1] < m->indptr[r] || m->indptr[r + 1] > nnz) {
      fzf_say(why, why_len, "frames (GPU): matrix indptr falls or overruns at row %zu", r);
      fzf_csr_free(out);
      return FZ_EINVAL;
    }
    for (uint64_t j = m->indptr[r]; j < m->indptr[r + 1]; j++) {
      uint32_t col = m->indices[j];
      if (col >= npixels) {
        fzf_say(why, why_len, "frames (GPU): matrix entry %llu names pixel %u of %zu",
                (unsigned long long)j, col, npixels);
        fzf_csr_free(out);
        return FZ_EINVAL;
      }
      if (!fzf_used(active, col))
        continue;
      out->cols[kept] = col;
      if (out->wf)
        out->wf[kept] = m->w_f32[j];
      else
        out->wi[kept] = m->w_i32[j];
      kept++;
    }
    out->indptr[r + 1] = kept;
  }
  out->nnz = kept;
  return 0;
}

static const struct {
  int code;
  const char *text;
} reasons[] = {
/* The OK row's code is 0, spelt FZ_0 by the row macro. */
#define FZ_0 0
#define FZF_REASON_ROW(name, code, text) {FZ_##code, text},
    FZF_REASONS(FZF_REASON_ROW)
#undef FZF_REASON_ROW
#undef FZ_0
};

int fzf_status_code(uint64_t status) {
  if (status == FZF_STATUS_OK)
    return 0;
  unsigned r = (unsigned)(status & 0xff);
  return r < FZF_R_COUNT && r ? reasons[r].code : FZ_ECORRUPT;
}

void fzf_status_text(uint64_t status, char *why, size_t why_len) {
  if (!why || !why_len)
    return;
  if (status == FZF_STATUS_OK) {
    snprintf(why, why_len, "no error");
    return;
  }
  unsigned r = (unsigned)(status & 0xff);
  uint64_t place = status >> 24;
  const char *text = r < FZF_R_COUNT ? reasons[r].text : "unknown failure";
  if (place == 0 || place >= FZF_PLACE_LAST)
    fzf_say(why, why_len, "frames (GPU): %s", text);
  else if (place % 2)
    fzf_say(why, why_len, "frames (GPU): block %llu: %s", (unsigned long long)(place - 1) / 2,
            text);
  else
    fzf_say(why, why_len, "frames (GPU): block %llu: %s", (unsigned long long)(place - 2) / 2,
            text);
}
