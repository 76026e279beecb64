/*
 * frames_host.c - the GPU frames decoder's host logic that needs no CUDA
 * (fzf_host.h): cut keys, mask bits, the folded matrix, status messages.
 */
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
  int kind = fz_frames_kind(dtype);
  if (!m->indptr || (!m->w_f32) == (!m->w_i32) || m->nrows > SIZE_MAX / 16) {
    fzf_say(why, why_len, "frames (GPU): a matrix needs indptr and exactly one of w_f32, w_i32");
    return FZ_EINVAL;
  }
  if (m->w_i32 && (kind == FZ_FRAMES_FLOAT || fz_dtype_size(dtype) > 4)) {
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
