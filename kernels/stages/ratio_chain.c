/*
 * ratio_chain.c - which chains the ratio kernels (ratio.cu) take, for the
 * plans that encode with them and the decoders that decode with them.
 */
#include "archive.h"
#include "ratio_gpu.h"

int fzk_ratio_chain(const fze_header *h) {
  const fze_chain *c = &h->chain;
  return (h->dtype == FZ_F32 || h->dtype == FZ_F64) && c->n == 4 &&
         c->st[0].id == FZE_STAGE_QUANT &&
         (c->st[1].id == FZE_STAGE_INTERP || c->st[1].id == FZE_STAGE_LORENZO) &&
         c->st[2].id == FZE_STAGE_HUFFMAN && c->st[3].id == FZE_STAGE_RZE && c->st[3].levels >= 1 &&
         c->st[3].levels <= FZE_RZE_MAX_LEVELS && c->st[1].pdims >= 1 && c->st[1].pdims <= 3;
}
