/*
 * ratio_stage.h - gpu_plan.c's encode of the ratio preset as the host
 * models run it (test_kernel_ratio, test_kernel_ratio_threads): the
 * CRC-32C byte table the kernels take, the encoder's job for the CPU's
 * archive of a field with its scratch and staging area (full of garbage,
 * as on the device), and the check of each staged chunk, size and CRC
 * against the archive's.  Included after ratio_enc.cuh and Criterion's
 * header (or test_kernel_ratio_threads's own cr_assert).
 */
#ifndef FZ_TEST_RATIO_STAGE_H
#define FZ_TEST_RATIO_STAGE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "archive.h"
#include "engine.h"
#include "fz.h"

/* The reflected byte table of CRC-32C. */
static inline void ratio_crc_table(uint32_t tab[256]) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
    tab[i] = c;
  }
}

/* One encode: the archive's header, the job (J.ticket is left to the
 * caller) and its buffers, over slots slots of scratch (a launch of that
 * many blocks). */
typedef struct ratio_stage {
  fze_header h;
  uint32_t cb;
  uint64_t nc, slots;
  double qp[2];
  uint8_t *scratch, *stage;
  uint32_t *sizes, *crcs;
  fzre_job J;
} ratio_stage;

/* The job for the CPU's archive a of x over as many slots as it has chunks,
 * at least one and at most max_slots: the quantizer's parameters as the
 * CPU chose them (the prep kernel's are the same, as for every chain);
 * lorenzo | byteplanes (the lossless-ratio preset) has none. */
static inline void ratio_stage_open(ratio_stage *R, const uint8_t *a, size_t len, const void *x,
                                    uint64_t max_slots, const uint32_t *crc_tab,
                                    const char *what) {
  memset(R, 0, sizeof *R);
  cr_assert_eq(fze_header_parse(a, len, &R->h), 0, "%s", what);
  const fze_chain *ch = &R->h.chain;
  uint32_t w = (uint32_t)fz_dtype_size(R->h.dtype), cb = R->h.chunk_bytes;
  uint64_t nc = R->h.nchunks, slots = nc < max_slots ? nc : max_slots;
  if (slots == 0)
    slots = 1;
  const int planes = ch->n == 2 && ch->st[1].id == FZE_STAGE_BYTEPLANES;
  const fze_stage *pr = &ch->st[planes ? 0 : 1]; /* the predictor */
  const unsigned levels = planes ? 0 : ch->st[3].levels;
  fzre_layout L = fzre_layout_of(cb, w, levels);
  R->cb = cb;
  R->nc = nc;
  R->slots = slots;
  R->scratch = malloc(L.stride * slots);
  R->stage = malloc(nc * cb + 1);
  R->sizes = malloc(4 * nc + 4);
  R->crcs = malloc(4 * nc + 4);
  cr_assert(R->scratch && R->stage && R->sizes && R->crcs);
  memset(R->scratch, 0xa5, L.stride * slots);
  memset(R->stage, 0x5a, nc * cb + 1);
  memset(R->sizes, 0x5a, 4 * nc + 4);
  memset(R->crcs, 0x5a, 4 * nc + 4);
  R->qp[0] = ch->st[0].eb_abs;
  R->qp[1] = ch->st[0].step;
  fzre_job J = {.in = x, .raw_bytes = R->h.raw_bytes, .cb = cb, .w = w,
                .levels = levels, .pdims = pr->pdims,
                .lorenzo = pr->id == FZE_STAGE_LORENZO, .planes = (uint32_t)planes,
                .pwrel = !planes && ch->st[0].mode == FZ_EB_PWREL, .lv = planes ? 0u : pr->lv,
                .hform = planes ? 0u : ch->st[2].lv, .qp = planes ? NULL : R->qp, .scratch = R->scratch,
                .stride = L.stride, .nchunks = nc, .stage = R->stage, .sizes = R->sizes,
                .crcs = R->crcs, .crc_tab = crc_tab};
  memcpy(J.ext, pr->ext, sizeof J.ext);
  R->J = J;
}

/* Each staged chunk, its size and its CRC are the archive's. */
static inline void ratio_stage_check(const ratio_stage *R, const uint8_t *a, size_t len,
                                     const char *what) {
  uint64_t off = R->h.header_len;
  for (uint64_t c = 0; c < R->nc; c++) {
    uint64_t want = fze_chunk_size_at(&R->h, c);
    cr_assert_eq(R->sizes[c], want, "%s: chunk %llu of %llu: size %u, the CPU's %llu", what,
                 (unsigned long long)c, (unsigned long long)R->nc, R->sizes[c],
                 (unsigned long long)want);
    cr_assert(off + want <= len && memcmp(R->stage + c * R->cb, a + off, want) == 0,
              "%s: chunk %llu: bytes differ", what, (unsigned long long)c);
    cr_assert_eq(R->crcs[c], fze_crc32c(0, a + off, want), "%s: chunk %llu: crc", what,
                 (unsigned long long)c);
    off += want;
  }
  cr_assert_eq(off, len, "%s", what);
}

static inline void ratio_stage_close(ratio_stage *R) {
  free(R->crcs);
  free(R->sizes);
  free(R->stage);
  free(R->scratch);
}

#endif
