/*
 * jit_gen.c - the source of a generated kernel: for one chain, dtype and
 * chunk size, an entry that runs the chunk body of chain_body.cuh with the
 * chain's stages called in a straight line (in place of the interpreter's
 * switch) and the descriptor's fixed fields as constants, so NVRTC folds
 * the element width, the maps, the rze levels and the buffer layout into
 * the code.  The chains of the word kernels (d->k32) get their templates
 * instead, instantiated with every chain constant fixed (the ahead-of-time
 * ones read some at run time): chain32_ops.cuh's on 4-byte words,
 * chain64_ops.cuh's on 8-byte words (every coder, also those chain64.cu
 * does not build ahead of time).  Only the
 * glue is generated; the ops are the hand-written ones the ahead-of-time
 * kernels run, which is why the bytes are the same.
 *
 * The source depends on nothing but those parameters (no shape, no bound):
 * it is the key of the module cache, so every plan of a chain and chunk
 * size shares one module whatever its shape.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fz_contract.h"
#include "jit.h"
#include "launch.h"

/* A growing string; on overflow of memory, NULL text and every later
 * append a no-op. */
typedef struct text {
  char *s;
  size_t len, cap;
} text;

__attribute__((format(printf, 2, 3))) static void put(text *t, const char *fmt, ...) {
  if (t->s == NULL)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      free(t->s);
      t->s = NULL;
      return;
    }
    if (t->len + (size_t)n < t->cap) {
      t->len += (size_t)n;
      return;
    }
    char *g = realloc(t->s, 2 * t->cap + (size_t)n);
    if (g == NULL) {
      free(t->s);
      t->s = NULL;
      return;
    }
    t->s = g;
    t->cap = 2 * t->cap + (size_t)n;
  }
}

int fzk_jit_supported(const fzk_desc *d, fzk_jit_dir dir) {
  (void)dir;
  return d->nst >= 1 && d->nst <= FZE_MAX_STAGES && d->k32 <= 3 &&
         (!d->k32 || d->w == 4 || d->w == 8);
}

int fzk_jit_preferred(const fzk_desc *d) {
  /* On 8-byte words the ahead-of-time kernels chain64.cu has (bitshuffle
   * | rze always, every coder with FZ_CHAIN64_ALL) measured at the f32
   * presets' speed (docs/benchmarks.md, "8-byte words"); the generated
   * ones serve the coders it lacks, which would otherwise run the generic
   * chunk family at half that. */
  if (d->w == 8 && d->k32)
    return !((fzk_chain64_coders() >> d->k32) & 1u);
  /* chain32.cu's kernels for [quant] | bitpack (the `fast` preset) fix
   * every constant a generated one would but the chunk size, and measured
   * faster on the H200 (docs/benchmarks.md, "JIT kernels"). */
  return !(d->k32 == 1 && !d->k32diff);
}

static const char *stage_name(unsigned id) {
  switch (id) {
  case FZE_STAGE_QUANT: return "quant";
  case FZE_STAGE_DIFF: return "diff";
  case FZE_STAGE_BITSHUFFLE: return "bitshuffle";
  case FZE_STAGE_RZE: return "rze";
  case FZE_STAGE_BITPACK: return "bitpack";
  default: return "?";
  }
}

/* The descriptor with the fields the chain fixes as constants; raw_bytes
 * and nchunks (the shape) stay the launch's. */
static void put_desc(text *t, const fzk_desc *d) {
  put(t, "__device__ __forceinline__ fzk_desc fzk_gen_desc(const fzk_desc &p) {\n"
         "  fzk_desc d = p;\n");
  put(t, "  d.nst = %uu; d.w = %uu; d.fkind = %uu; d.has_quant = %uu;\n", d->nst, d->w, d->fkind,
      d->has_quant);
  for (unsigned i = 0; i < FZE_MAX_STAGES; i++) {
    unsigned on = i < d->nst;
    put(t, "  d.id[%u] = %uu; d.mode[%u] = %uu; d.levels[%u] = %uu;\n", i, on ? d->id[i] : 0, i,
        on ? d->mode[i] : 0, i, on ? d->levels[i] : 0);
  }
  put(t, "  d.k32 = %uu; d.k32diff = %uu; d.k32nega = %uu; d.k32lev = %uu;\n", d->k32,
      d->k32diff, d->k32nega, d->k32lev);
  put(t, "  d.cb = %uu; d.cap = %uu; d.tcap = %uu; d.smem = %uu;\n", d->cb, d->cap, d->tcap,
      d->smem);
  put(t, "  d.smem_e32 = %uu; d.smem_d32 = %uu;\n", d->smem_e32, d->smem_d32);
  put(t, "  return d;\n}\n\n");
}

static void put_forward(text *t, const fzk_desc *d) {
  put(t, "struct fzk_gen_chain {\n"
         "  __device__ __forceinline__ bool operator()(const fzk_desc &, fzk_fwd_io &io) const {\n"
         "    return true");
  for (unsigned i = d->has_quant; i < d->nst; i++) {
    switch (d->id[i]) {
    case FZE_STAGE_DIFF: put(t, "\n        && fzk_fwd_diff(io, %uu, %uu)", d->w, d->mode[i]); break;
    case FZE_STAGE_BITSHUFFLE: put(t, "\n        && fzk_fwd_bitshuffle(io, %uu)", d->w); break;
    case FZE_STAGE_RZE: put(t, "\n        && fzk_fwd_rze(io, %uu)", d->levels[i]); break;
    case FZE_STAGE_BITPACK: put(t, "\n        && fzk_fwd_bitpack(io, %uu)", d->w); break;
    }
  }
  put(t, ";\n  }\n};\n\n");
  put(t, "extern \"C\" __global__ void __launch_bounds__(FZK_NT)\n"
         FZK_JIT_ENTRY_ENCODE "(fzk_desc p, const uint8_t *__restrict__ d_in, int in_vec,\n"
         "    const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_stage,\n"
         "    uint32_t *__restrict__ d_sizes) {\n"
         "  const fzk_desc d = fzk_gen_desc(p);\n"
         "  fzk_encode_chunk(d, d_in, in_vec, d_qp, d_stage, d_sizes, fzk_gen_chain());\n"
         "}\n");
}

static void put_inverse(text *t, const fzk_desc *d) {
  put(t, "struct fzk_gen_chain {\n"
         "  __device__ __forceinline__ bool operator()(const fzk_desc &, fzk_inv_io &io) const {\n"
         "    return true");
  for (unsigned i = d->nst; i-- > d->has_quant;) {
    /* The stage's input size: bitshuffle before it pads to groups of 8. */
    int padded = 0;
    for (unsigned k = d->has_quant; k < i; k++)
      padded |= d->id[k] == FZE_STAGE_BITSHUFFLE;
    char size[48];
    if (padded)
      snprintf(size, sizeof size, "fzk_bs_bytes(io.n, %uu)", d->w);
    else
      snprintf(size, sizeof size, "io.raw");
    switch (d->id[i]) {
    case FZE_STAGE_DIFF: put(t, "\n        && fzk_inv_diff(io, %uu, %uu)", d->w, d->mode[i]); break;
    case FZE_STAGE_BITSHUFFLE: put(t, "\n        && fzk_inv_bitshuffle(io, %uu)", d->w); break;
    case FZE_STAGE_RZE: put(t, "\n        && fzk_inv_rze(io, %s, %uu)", size, d->levels[i]); break;
    case FZE_STAGE_BITPACK: put(t, "\n        && fzk_inv_bitpack(io, %uu)", d->w); break;
    }
  }
  put(t, ";\n  }\n};\n\n");
  put(t, "extern \"C\" __global__ void __launch_bounds__(FZK_NT)\n"
         FZK_JIT_ENTRY_DECODE "(fzk_desc p, const uint8_t *__restrict__ d_pay, uint64_t pay_len,\n"
         "    const uint64_t *__restrict__ d_offs, const uint8_t *__restrict__ d_sizes16,\n"
         "    const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out, int out_vec,\n"
         "    uint32_t *__restrict__ d_status) {\n"
         "  const fzk_desc d = fzk_gen_desc(p);\n"
         "  fzk_decode_chunk(d, d_pay, pay_len, d_offs, d_sizes16, d_qp, d_out, out_vec, d_status,\n"
         "                   fzk_gen_chain());\n"
         "}\n");
}

/* The word chains: chain32_ops.cuh's templates with every chain constant
 * fixed, or chain64_ops.cuh's for 8-byte words (the same arguments). */
static void put_word(text *t, const fzk_desc *d, fzk_jit_dir dir) {
  const unsigned bits = d->w == 8 ? 64 : 32;
  const char *qk = !d->has_quant ? "FZK_Q_NONE" : d->mode[0] == FZK_EB_PWREL ? "FZK_Q_PW"
                                                                              : "FZK_Q_BINS";
  char consts[96];
  snprintf(consts, sizeof consts, "%s, %u, %u, %u, %u", qk, d->k32, d->k32diff, d->k32nega,
           d->k32 == 1 ? 0u : d->k32lev);
  if (dir == FZK_JIT_ENCODE)
    put(t, "extern \"C\" __global__ void __launch_bounds__(FZK_NT, FZK_ENC%u_BLOCKS)\n"
           FZK_JIT_ENTRY_ENCODE "(fzk_desc p, const uint8_t *__restrict__ d_in,\n"
           "    const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out,\n"
           "    uint64_t out_cap, uint64_t header_len, uint64_t table_off,\n"
           "    uint32_t *__restrict__ d_crcs, fzk_u64 *__restrict__ lb,\n"
           "    const uint32_t *__restrict__ d_tab) {\n"
           "  const fzk_desc d = fzk_gen_desc(p);\n"
           "  fzk_enc%u_body<%s>(d, d_in, d_qp, d_out, out_cap, header_len, table_off,\n"
           "                     d_crcs, lb, d_tab);\n"
           "}\n", bits, bits, consts);
  else
    put(t, "extern \"C\" __global__ void __launch_bounds__(FZK_NT, FZK_DEC%u_BLOCKS)\n"
           FZK_JIT_ENTRY_DECODE "(fzk_desc p, const uint8_t *__restrict__ d_pay,\n"
           "    uint64_t pay_len,\n"
           "    const uint64_t *__restrict__ d_offs, const uint8_t *__restrict__ d_sizes16,\n"
           "    const fzk_qparams *__restrict__ d_qp, uint8_t *__restrict__ d_out, int out_vec,\n"
           "    uint32_t *__restrict__ d_status, uint32_t *__restrict__ d_crcs,\n"
           "    const uint32_t *__restrict__ d_tab) {\n"
           "  const fzk_desc d = fzk_gen_desc(p);\n"
           "  fzk_dec%u_body<%s>(d, d_pay, pay_len, d_offs, d_sizes16, d_qp, d_out, out_vec,\n"
           "                     d_status, d_crcs, d_tab);\n"
           "}\n", bits, bits, consts);
}

char *fzk_jit_source(const fzk_desc *d, fzk_jit_dir dir) {
  text t = {malloc(4096), 0, 4096};
  put(&t, "/* fzd generated kernel: %s of", dir == FZK_JIT_ENCODE ? "encode" : "decode");
  for (unsigned i = 0; i < d->nst; i++)
    put(&t, "%s %s", i ? " |" : "", stage_name(d->id[i]));
  put(&t, " on %u-byte %s, chunks of %u bytes */\n", d->w,
      d->fkind == 1 ? "f32" : d->fkind == 2 ? "f64" : "integers", d->cb);
  put(&t, "#include \"%s\"\n\n", !d->k32 ? "chain_body.cuh"
                                 : d->w == 8 ? "chain64_ops.cuh"
                                             : "chain32_ops.cuh");
  put_desc(&t, d);
  if (d->k32)
    put_word(&t, d, dir);
  else if (dir == FZK_JIT_ENCODE)
    put_forward(&t, d);
  else
    put_inverse(&t, d);
  return t.s;
}

const char *fzk_jit_helpers_source(void) {
  return "/* fzd generated module: the kernels around the chunk coders */\n"
         "#include \"helper_kernels.cuh\"\n";
}

const char *fzk_jit_ratio_source(void) {
  return "/* fzd generated module: the kernels of the ratio preset's chains */\n"
         "#include \"ratio_kernels.cuh\"\n";
}
