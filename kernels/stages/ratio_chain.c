/*
 * ratio_chain.c - which chains the ratio kernels (ratio.cu) take, for the
 * plans that encode with them and the decoders that decode with them, and
 * what the kernels take of each.
 */
#include "archive.h"
#include "ratio_gpu.h"

/* lorenzo | byteplanes on 4- or 8-byte words. */
static int planes_chain(const fze_header *h) {
  const fze_chain *c = &h->chain;
  size_t w = fz_dtype_size(h->dtype);
  return (w == 4 || w == 8) && c->n == 2 && c->st[0].id == FZE_STAGE_LORENZO &&
         c->st[0].pdims >= 1 && c->st[0].pdims <= 3 && c->st[1].id == FZE_STAGE_BYTEPLANES;
}

int fzk_ratio_chain(const fze_header *h) {
  const fze_chain *c = &h->chain;
  return planes_chain(h) ||
         ((h->dtype == FZ_F32 || h->dtype == FZ_F64) && c->n == 4 &&
          c->st[0].id == FZE_STAGE_QUANT &&
          (c->st[1].id == FZE_STAGE_INTERP || c->st[1].id == FZE_STAGE_LORENZO) &&
          c->st[2].id == FZE_STAGE_HUFFMAN && c->st[3].id == FZE_STAGE_RZE &&
          c->st[3].levels >= 1 && c->st[3].levels <= FZE_RZE_MAX_LEVELS && c->st[1].pdims >= 1 &&
          c->st[1].pdims <= 3);
}

fzk_ratio_form fzk_ratio_form_of(const fze_header *h) {
  const fze_chain *c = &h->chain;
  fzk_ratio_form f = {0};
  if (planes_chain(h)) {
    f.pdims = c->st[0].pdims;
    f.lorenzo = 1;
    f.planes = 1;
    f.ext = c->st[0].ext;
    return f;
  }
  f.levels = c->st[3].levels;
  f.pdims = c->st[1].pdims;
  f.lorenzo = c->st[1].id == FZE_STAGE_LORENZO;
  f.pwrel = c->st[0].mode == FZ_EB_PWREL;
  f.lv = c->st[1].lv;
  f.hform = c->st[2].lv;
  f.step = c->st[0].step;
  f.ext = c->st[1].ext;
  return f;
}
