/*
 * quant_model.c - the GPU quantizer's shortcut, on the CPU.  The 4-byte word
 * kernels (chain32.cu: fzk_q32, fzk_dq32) do not convert the bin between
 * double and int32: fzo_quant_f32_sum and fzo_dequant_f32_sum (ops.h) read
 * it off the low word of t + 1.5 * 2^52 and build the double back from the
 * int32 the same way.  Built here for the CPU, they must give exactly the
 * words and values of the engine's fzo_quant_f32 and fzo_dequant_f32 for
 * every kind of input (specials, bins at the limits, any 32-bit word a
 * hostile archive may hold).  No GPU needed; the GPU suites check the
 * kernels themselves against the CPU archives.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "ops.h"
#include "xorshift.h"

static uint32_t dequant_sum(uint32_t code, double step) {
  return fzo_f32_bits(fzo_dequant_f32_sum(code, step));
}

static void check_quant(uint32_t b, double eb) {
  const double step = 2 * eb * (1 - 0x1p-20), inv = 1.0 / step;
  uint32_t want = 0, got = 0;
  bool ok_want = fzo_quant_f32(fzo_bits_f32(b), inv, step, eb, &want);
  bool ok_got = fzo_quant_f32_sum(fzo_bits_f32(b), inv, step, eb, &got);
  if (!ok_want)
    want = 0;
  cr_assert_eq(ok_got, ok_want, "word %08x, eb %g: outlier %d, want %d", b, eb, !ok_got,
               !ok_want);
  cr_assert_eq(got, want, "word %08x, eb %g: bin %08x, want %08x", b, eb, got, want);
}

/* Random words of every exponent, and the specials. */
Test(kernel_quant, bins_match_the_engine) {
  const double ebs[] = {1e-30, 1e-6, 1e-3, 0.37, 1.0, 1e3, 1e30};
  uint64_t s = 42;
  for (size_t k = 0; k < sizeof ebs / sizeof ebs[0]; k++) {
    for (int i = 0; i < 200000; i++)
      check_quant((uint32_t)(xorshift64(&s) >> 32), ebs[k]);
    const uint32_t specials[] = {0, 0x80000000u, 1, 0x807fffffu, 0x7f800000u, 0xff800000u,
                                 0x7fc00000u, 0x00800000u, 0x7f7fffffu, 0xff7fffffu};
    for (size_t j = 0; j < sizeof specials / sizeof specials[0]; j++)
      check_quant(specials[j], ebs[k]);
  }
}

/* Values right at bin edges and at the largest bin, where rounding and the
 * limit decide. */
Test(kernel_quant, edges_match_the_engine) {
  const double eb = 1e-3, step = 2 * eb * (1 - 0x1p-20);
  const double bins[] = {0, 1, 2, 12345, 1e6, FZO_QMAX_F32 - 1, FZO_QMAX_F32, FZO_QMAX_F32 + 1};
  for (size_t i = 0; i < sizeof bins / sizeof bins[0]; i++)
    for (int sign = -1; sign <= 1; sign += 2)
      for (int half = 0; half <= 1; half++) {
        float x = (float)(sign * (bins[i] + 0.5 * half) * step);
        uint32_t b = fzo_f32_bits(x);
        for (int d = -3; d <= 3; d++)
          check_quant(b + (uint32_t)d, eb);
      }
}

/* Any 32-bit word decodes to the engine's value, including words no encoder
 * writes (a hostile archive's). */
Test(kernel_quant, dequant_matches_the_engine) {
  const double steps[] = {2e-3, 0.5, 3.0, 1e-30, 1e30};
  uint64_t s = 7;
  for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
    for (uint64_t c = 0; c <= 0xffffffffu; c += 65537) {
      uint32_t want = fzo_f32_bits(fzo_dequant_f32((uint32_t)c, steps[k]));
      cr_assert_eq(dequant_sum((uint32_t)c, steps[k]), want, "code %08x", (unsigned)c);
    }
    const uint32_t edges[] = {0, 1, 0x7fffffffu, 0x80000000u, 0x80000001u, 0xffffffffu};
    for (size_t j = 0; j < sizeof edges / sizeof edges[0]; j++) {
      uint32_t want = fzo_f32_bits(fzo_dequant_f32(edges[j], steps[k]));
      cr_assert_eq(dequant_sum(edges[j], steps[k]), want, "code %08x", edges[j]);
    }
    for (int i = 0; i < 100000; i++) {
      uint32_t c = (uint32_t)(xorshift64(&s) >> 32);
      cr_assert_eq(dequant_sum(c, steps[k]), fzo_f32_bits(fzo_dequant_f32(c, steps[k])),
                   "code %08x", c);
    }
  }
}
