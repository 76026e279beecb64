/*
 * frames_data.c - synthetic detector frames (frames_data.h).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frames_data.h"

static uint64_t next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* One pixel's value, as the raw bits of a w-byte element. */
static uint64_t pixel(fz_dtype t, uint64_t *s, double peak_frac) {
  uint64_t r = next(s);
  int peak = (double)(r % 1000000) < peak_frac * 1e6;
  long v = peak ? (long)(20 + next(s) % 5000) : (long)(next(s) % 4);
  if (r % 97 == 5)
    v = -v; /* negative for the signed and float types */
  switch (t) {
  case FZ_F32: {
    float f = (float)v + (float)(next(s) % 8) / 8.0f;
    if (r % 1009 == 3)
      f = -0.0f;
    else if (r % 1013 == 4)
      f = NAN;
    else if (r % 1019 == 6)
      f = r % 2 ? INFINITY : -INFINITY;
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
  }
  case FZ_F64: {
    double d = (double)v + (double)(next(s) % 8) / 8.0;
    if (r % 1009 == 3)
      d = -0.0;
    else if (r % 1013 == 4)
      d = -NAN;
    uint64_t b;
    memcpy(&b, &d, 8);
    return b;
  }
  default: return (uint64_t)v;
  }
}

void mframes_make(mframes *mf, fz_dtype t, size_t npixels, size_t nframes, size_t block_elems,
                  unsigned seed, double peak_frac) {
  size_t w = fz_dtype_size(t);
  size_t bound = fz_bslz4_bound(FZ_BSLZ4_LZ4, npixels, w, block_elems);
  cr_assert_gt(bound, 0);
  mf->nframes = nframes;
  mf->base = malloc(nframes * bound + 1);
  mf->offsets = malloc((nframes + 1) * 8);
  mf->lengths = malloc((nframes + 1) * 8);
  uint8_t *frame = malloc(npixels * w + 1);
  cr_assert(mf->base && mf->offsets && mf->lengths && frame);
  uint64_t s = 0x853c49e6748fea9bull ^ ((uint64_t)seed * 0x9e3779b97f4a7c15ull), at = 0;
  char why[256];
  for (size_t i = 0; i < nframes; i++) {
    for (size_t p = 0; p < npixels; p++) {
      uint64_t v = pixel(t, &s, peak_frac);
      memcpy(frame + p * w, &v, w); /* little-endian hosts */
    }
    int64_t len = fz_bslz4_encode(FZ_BSLZ4_LZ4, frame, npixels, w, block_elems, 0, mf->base + at,
                                  bound, why, sizeof why);
    cr_assert_geq(len, 0, "%s", why);
    mf->offsets[i] = at;
    mf->lengths[i] = (uint64_t)len;
    at += (uint64_t)len;
  }
  free(frame);
}

void mframes_variants(mframes *out, const mframes *src, size_t count) {
  size_t len = src->lengths[0];
  out->nframes = count;
  out->base = malloc(count * len + 1);
  out->offsets = malloc((count + 1) * 8);
  out->lengths = malloc((count + 1) * 8);
  cr_assert(out->base && out->offsets && out->lengths);
  for (size_t i = 0; i < count; i++) {
    memcpy(out->base + i * len, src->base + src->offsets[0], len);
    out->offsets[i] = i * len;
    out->lengths[i] = len;
  }
}

void mframes_free(mframes *mf) {
  free(mf->base);
  free(mf->offsets);
  free(mf->lengths);
  memset(mf, 0, sizeof *mf);
}
