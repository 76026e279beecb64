/*
 * ratio_threads.c - the ratio preset's GPU kernels (ratio_dec.cuh,
 * ratio_enc.cuh) compiled as their device code, with each block's FZR_NT
 * threads as real threads, so that the races test_kernel_ratio cannot see
 * show here.  test_kernel_ratio runs a phase's threads one after another,
 * which is one valid schedule of the kernel and checks its arithmetic; a
 * thread that reads what another writes in the same phase, or a phase that
 * needs a barrier it lacks, still gives the right bytes there.  Here the
 * headers take their __CUDA_ARCH__ branches: threadIdx is a thread-local,
 * __syncthreads() a pthread barrier of the block, the atomics __atomic
 * builtins, the integer intrinsics small functions; then every thread
 * reads its own copy of the launch's parameter, as on the device, and runs
 * the kernel's loop (ratio_kernels.cuh, which is C++ only for its
 * `extern "C" __global__`): take a chunk from the shared counter between
 * two barriers, code it, take the next.  Two blocks run side by side where
 * there are two chunks or more, each in its own slot of scratch, so that a
 * write out of a block's slot or chunk races with the other block.  Under
 * ThreadSanitizer (tests/run.sh runs this binary from the ci-tsan build)
 * any such race fails the run.  In every build the threads of a block
 * must meet at the same barrier (the device's rule: control flow around a
 * barrier the same in every thread), a launch must end (one that hangs
 * fails after FZT_HANG_S), and the bytes must be the CPU
 * engine's: each chunk the encoder stages, its size and CRC, as in the
 * archive fz_plan_compress makes, and the decoder's output as
 * fz_decompress's.  The block's shared state is garbage before each chunk,
 * and the scratch and the outputs garbage before the launch, as on the
 * device.  The cases are few and small (threads cost far more here than
 * in test_kernel_ratio, ThreadSanitizer's more still): each test is one
 * chain in one direction, so that a failure names what broke; the
 * lossless-ratio preset's chain (lorenzo | byteplanes) among them.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "archive.h"
#include "engine.h"
#include "fz.h"

#ifdef FZT_PLAIN
/* The ThreadSanitizer build: Criterion's runner cannot start under it
 * (its sandbox's arena meets the sanitizer's memory layout: Criterion
 * issue 274), so there the same tests run from a plain main, the first
 * failed assertion ending the run with its message. */
static void fzt_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "%s:%d: failed: %s: ", file, line, cond);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}
#define FZT_ASSERT_(cond, ...) ((cond) ? (void)0 : fzt_fail(__FILE__, __LINE__, #cond, __VA_ARGS__))
#define FZT_EQ_(a, b, ...) FZT_ASSERT_((a) == (b), __VA_ARGS__)
#define cr_assert(...) FZT_ASSERT_(__VA_ARGS__, "")
#define cr_assert_eq(...) FZT_EQ_(__VA_ARGS__, "")
#define FZT_TEST(name) static void name(void)
#else
#include <criterion/criterion.h>
#define FZT_TEST(name) Test(ratio_threads, name)
#endif

/* ---- the device's idiom on host threads ---- */

#define FZT_NT 256u
typedef struct fzt_dim {
  unsigned x;
} fzt_dim;
static _Thread_local fzt_dim threadIdx;
static const fzt_dim blockDim = {FZT_NT};
/* A block's barrier, and where each of its threads called it, for two
 * barriers in turn: a thread reads thread 0's entry after the barrier,
 * before thread 0 can write that entry again two barriers on. */
typedef struct fzt_bar {
  pthread_barrier_t bar;
  const char *file[2][FZT_NT];
  int line[2][FZT_NT];
} fzt_bar;
static _Thread_local fzt_bar *fzt_my_bar;
static _Thread_local unsigned fzt_gen;

/* The threads of a block must all meet at the same __syncthreads (the
 * device's rule); pthread barriers would pair different ones, so a
 * thread that was not where thread 0 was stops the run. */
static void fzt_sync(const char *file, int line) {
  fzt_bar *b = fzt_my_bar;
  unsigned g = fzt_gen++ & 1u, t = threadIdx.x;
  b->file[g][t] = file;
  b->line[g][t] = line;
  pthread_barrier_wait(&b->bar);
  if (line != b->line[g][0] || strcmp(file, b->file[g][0]) != 0) {
    fprintf(stderr, "thread %u at the barrier of %s:%d, thread 0 at %s:%d\n", t, file, line,
            b->file[g][0], b->line[g][0]);
    abort();
  }
}

#define __CUDA_ARCH__ 900
#define __device__
#define __forceinline__ inline
#define __syncthreads() fzt_sync(__FILE__, __LINE__)

/* CUDA's atomics are relaxed; the barriers order everything else.  Only
 * the overloads CUDA has, so that a call CUDA would refuse fails here. */
static inline unsigned fzt_add_u(unsigned *p, unsigned v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
static inline int fzt_add_i(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline unsigned long long fzt_add_ull(unsigned long long *p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
static inline unsigned fzt_or_u(unsigned *p, unsigned v) {
  return __atomic_fetch_or(p, v, __ATOMIC_RELAXED);
}
static inline int fzt_or_i(int *p, int v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }
static inline unsigned long long fzt_or_ull(unsigned long long *p, unsigned long long v) {
  return __atomic_fetch_or(p, v, __ATOMIC_RELAXED);
}
#define FZT_MAX(name, T)                                                                    \
  static inline T name(T *p, T v) {                                                         \
    T o = __atomic_load_n(p, __ATOMIC_RELAXED);                                             \
    while (o < v && !__atomic_compare_exchange_n(p, &o, v, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) \
      ;                                                                                     \
    return o;                                                                               \
  }
FZT_MAX(fzt_max_u, unsigned)
FZT_MAX(fzt_max_i, int)
FZT_MAX(fzt_max_ull, unsigned long long)
#define atomicAdd(p, v)                                                                     \
  _Generic((p), unsigned *: fzt_add_u, int *: fzt_add_i, unsigned long long *: fzt_add_ull)( \
      (p), (v))
#define atomicOr(p, v)                                                                      \
  _Generic((p), unsigned *: fzt_or_u, int *: fzt_or_i, unsigned long long *: fzt_or_ull)((p), \
                                                                                        (v))
#define atomicMax(p, v)                                                                     \
  _Generic((p), unsigned *: fzt_max_u, int *: fzt_max_i, unsigned long long *: fzt_max_ull)( \
      (p), (v))

/* The intrinsics the headers' device branches take. */
static inline unsigned __brev(unsigned v) {
  unsigned r = 0;
  for (unsigned j = 0; j < 32; j++)
    r |= ((v >> j) & 1u) << (31 - j);
  return r;
}
static inline int __clzll(long long v) { return v ? __builtin_clzll((unsigned long long)v) : 64; }
static inline int __ffsll(long long v) { return __builtin_ffsll(v); }
static inline int __double2loint(double x) {
  uint64_t u;
  memcpy(&u, &x, 8);
  return (int)(uint32_t)u;
}
static inline double __hiloint2double(int hi, int lo) {
  uint64_t u = (uint64_t)(uint32_t)hi << 32 | (uint32_t)lo;
  double x;
  memcpy(&x, &u, 8);
  return x;
}

/* The device branches ask nvcc to unroll (#pragma unroll), which the host
 * compiler does not know. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunknown-pragmas"
#include "ratio_dec.cuh"
#include "ratio_enc.cuh"
#pragma GCC diagnostic pop
#include "ratio_fields.h"
#include "ratio_stage.h"

_Static_assert(FZR_NT == FZT_NT, "a block is FZR_NT threads");

/* ---- the launch: blocks of FZR_NT threads, the kernels' loop ---- */

typedef struct fzt_block {
  fzt_bar bar;
  void *S;                 /* the block's shared state */
  unsigned long long next; /* the block's chunk (the kernel's __shared__) */
  unsigned id;
  const struct fzt_launch *L;
} fzt_block;

typedef struct fzt_launch {
  int enc;            /* the encoder, else the decoder */
  const void *job;    /* fzre_job or fzr_job: the kernel's parameter */
  size_t state_bytes; /* sizeof fzre_state or fzr_state */
  unsigned seed;      /* the shared state's garbage */
} fzt_launch;

typedef struct fzt_arg {
  fzt_block *b;
  unsigned t;
} fzt_arg;

/* fzr_take (ratio_kernels.cuh), with the shared state made garbage before
 * each chunk once no thread of the block still reads it. */
static unsigned long long fzt_take(fzt_block *b, unsigned long long *ticket) {
  __syncthreads();
  if (threadIdx.x == 0) {
    b->next = atomicAdd(ticket, 1ull);
    memset(b->S, (int)((b->next * 37 + b->L->seed + b->id) & 0xffu) | 0x41, b->L->state_bytes);
  }
  __syncthreads();
  return b->next;
}

static void *fzt_thread(void *arg) {
  const fzt_arg *a = arg;
  fzt_block *b = a->b;
  threadIdx.x = a->t;
  fzt_my_bar = &b->bar;
  fzt_gen = 0;
  if (b->L->enc) {
    fzre_job J = *(const fzre_job *)b->L->job;
    for (unsigned long long c; (c = fzt_take(b, J.ticket)) < J.nchunks;)
      fzre_chunk(b->S, &J, c, b->id);
  } else {
    fzr_job J = *(const fzr_job *)b->L->job;
    for (unsigned long long c; (c = fzt_take(b, J.ticket)) < J.nchunks;)
      fzr_chunk(b->S, &J, c, b->id);
  }
  return NULL;
}

/* A launch here takes seconds, ThreadSanitizer's too: one still running
 * after this long has threads waiting at different barriers (control
 * flow that differs between the threads of a block), which hangs. */
#define FZT_HANG_S 120

/* Runs the launch on `blocks` blocks (at most 2) and waits for it. */
static void fzt_run(const fzt_launch *L, unsigned blocks, const char *what) {
  static fzt_block blk[2];
  static fzt_arg args[2][FZT_NT];
  static pthread_t th[2][FZT_NT];
  cr_assert(blocks >= 1 && blocks <= 2);
  for (unsigned k = 0; k < blocks; k++) {
    blk[k].S = malloc(L->state_bytes);
    cr_assert(blk[k].S);
    blk[k].id = k;
    blk[k].L = L;
    cr_assert_eq(pthread_barrier_init(&blk[k].bar.bar, NULL, FZT_NT), 0);
  }
  for (unsigned k = 0; k < blocks; k++)
    for (unsigned t = 0; t < FZT_NT; t++) {
      args[k][t] = (fzt_arg){&blk[k], t};
      cr_assert_eq(pthread_create(&th[k][t], NULL, fzt_thread, &args[k][t]), 0);
    }
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += FZT_HANG_S;
  for (unsigned k = 0; k < blocks; k++)
    for (unsigned t = 0; t < FZT_NT; t++)
      cr_assert_eq(pthread_timedjoin_np(th[k][t], NULL, &until), 0,
                   "%s: block %u thread %u still running after %d s: the block's threads "
                   "wait at different barriers", what, k, t, FZT_HANG_S);
  for (unsigned k = 0; k < blocks; k++) {
    pthread_barrier_destroy(&blk[k].bar.bar);
    free(blk[k].S);
  }
}

/* ---- the cases ---- */

static uint32_t crc_tab[256];

static void setup(void) { ratio_crc_table(crc_tab); }

/* Blocks side by side: two, where there are two chunks for them. */
#define MAX_BLOCKS 2u
static unsigned blocks_for(uint64_t nc) {
  return nc >= MAX_BLOCKS ? MAX_BLOCKS : nc ? (unsigned)nc : 1u;
}

/* gpu_plan.c's encode of the CPU's archive a of x (ratio_model.c's
 * model_encode_once): the quantizer's parameters as the CPU chose them,
 * each chunk staged in its slot; then each slot, size and CRC against
 * the archive's. */
static void encode(const uint8_t *a, size_t len, const void *x, const char *what) {
  ratio_stage R;
  ratio_stage_open(&R, a, len, x, MAX_BLOCKS, crc_tab, what);
  unsigned blocks = (unsigned)R.slots;
  unsigned long long ticket = 0;
  R.J.ticket = &ticket;
  fzt_launch run = {.enc = 1, .job = &R.J, .state_bytes = sizeof(fzre_state),
                    .seed = (unsigned)len};
  fzt_run(&run, blocks, what);
  cr_assert_eq(ticket, R.nc + blocks, "%s: tickets", what);
  ratio_stage_check(&R, a, len, what);
  ratio_stage_close(&R);
}

/* gpu_decode.c's ratio path (ratio_model.c's model_decode): the header on
 * the host, the kernel over the chunks into out + out_off (3: off the
 * elements' alignment), the payload CRC from the chunks' CRCs; the bytes
 * must be fz_decompress's. */
static void decode(const uint8_t *a, size_t len, size_t out_off, const char *what) {
  fze_header h;
  cr_assert_eq(fze_header_parse(a, len, &h), 0, "%s", what);
  const fze_chain *ch = &h.chain;
  uint64_t nc = h.nchunks, raw = h.raw_bytes;
  unsigned blocks = blocks_for(nc);
  uint64_t *offs = malloc(8 * (nc + 1));
  uint32_t *sizes = malloc(4 * nc + 4), *crcs = malloc(4 * nc + 4), status = 0;
  uint8_t *ref = malloc(raw + 1), *got = malloc(raw + 8);
  uint64_t stride = fzr_stride(h.chunk_bytes);
  uint8_t *scratch = malloc(stride * blocks);
  cr_assert(offs && sizes && crcs && ref && got && scratch);
  size_t ref_len = 0;
  cr_assert_eq(fz_decompress(a, len, ref, raw + 1, &ref_len, 1), 0, "%s", what);
  cr_assert_eq(ref_len, raw, "%s", what);
  uint64_t run = 0;
  for (uint64_t c = 0; c < nc; c++) {
    const uint8_t *p = h.sizes + 4 * c;
    sizes[c] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
               (uint32_t)p[3] << 24;
    offs[c] = run;
    run += sizes[c];
  }
  memset(scratch, 0x5a, stride * blocks);
  memset(got, 0xa5, raw + 8);
  memset(crcs, 0xa5, 4 * nc + 4);
  unsigned long long ticket = 0;
  uint32_t w = (uint32_t)fz_dtype_size(h.dtype);
  /* lorenzo | byteplanes: the predictor first, no quant, no rze. */
  const int planes = ch->n == 2 && ch->st[1].id == FZE_STAGE_BYTEPLANES;
  const fze_stage *pr = &ch->st[planes ? 0 : 1];
  fzr_job J = {.pay = a + h.header_len, .pay_len = len - h.header_len, .offs = offs,
               .sizes = sizes, .raw_bytes = raw, .cb = h.chunk_bytes, .w = w,
               .levels = planes ? 0 : ch->st[3].levels, .pdims = pr->pdims,
               .lorenzo = pr->id == FZE_STAGE_LORENZO, .planes = (uint32_t)planes,
               .pwrel = !planes && ch->st[0].mode == FZ_EB_PWREL, .lv = planes ? 0u : pr->lv,
               .hform = planes ? 0u : ch->st[2].lv,
               .step = planes ? 0.0 : ch->st[0].step,
               .scratch = scratch, .stride = stride, .nchunks = nc, .ticket = &ticket,
               .out = got + out_off, .out_aligned = out_off % w == 0, .status = &status,
               .crcs = crcs, .crc_tab = crc_tab};
  memcpy(J.ext, pr->ext, sizeof J.ext);
  fzt_launch L = {.enc = 0, .job = &J, .state_bytes = sizeof(fzr_state),
                  .seed = (unsigned)len + 1};
  fzt_run(&L, blocks, what);
  cr_assert_eq(ticket, nc + blocks, "%s: tickets", what);
  cr_assert_eq(status, 0, "%s: a chunk marked corrupt", what);
  uint8_t le[4];
  uint32_t pc = 0;
  for (uint64_t c = 0; c < nc; c++) {
    for (int k = 0; k < 4; k++)
      le[k] = (uint8_t)(crcs[c] >> (8 * k));
    pc = fze_crc32c(pc, le, 4);
  }
  cr_assert_eq(pc, h.payload_crc, "%s: payload crc", what);
  cr_assert(memcmp(ref, got + out_off, raw) == 0, "%s: bytes differ (out + %zu)", what,
            out_off);
  free(scratch);
  free(got);
  free(ref);
  free(crcs);
  free(sizes);
  free(offs);
}

/* 1-D to 4-D, odd extents, extents of 1, one element; the two large ones
 * have several 256 KiB chunks, one short, as f32 and f64. */
static const shape shapes[] = {
    {1, {1}}, {2, {37, 61}}, {3, {9, 1, 33}}, {3, {6, 11, 29}}, {4, {2, 3, 7, 33}},
    {1, {70001}}, {2, {300, 301}},
};
#define NSMALL 5u

static const struct {
  fz_eb_mode m;
  double eb;
} bounds[] = {{FZ_EB_REL, 1e-2}, {FZ_EB_ABS, 1e-3}, {FZ_EB_PWREL, 1e-3}, {FZ_EB_REL, 1e-5}};
#define NBOUNDS (sizeof bounds / sizeof *bounds)

/* One chain in one direction over the shapes and both types, the small
 * shapes in 4 KiB chunks (one to a handful), each large one in 256 KiB
 * chunks as one type; the bound and the kind of field turn with the
 * shape, the type and the chain, so that each chain meets every bound
 * with both types. */
static void chain_cases(const char *pipe, unsigned ci, int enc) {
  for (unsigned si = 0; si < sizeof shapes / sizeof *shapes; si++)
    for (int f32 = 0; f32 < 2; f32++) {
      const shape *s = &shapes[si];
      int small = si < NSMALL;
      if (!small && ((si + ci + (unsigned)f32) & 1))
        continue;
      enum kind k = (enum kind)((si + (unsigned)f32 + ci) % KINDS);
      void *x = field(s, f32, k, si * 31 + (uint64_t)k);
      unsigned chunk = small ? 4096 : 262144;
      unsigned b = (si + 2 * (unsigned)f32 + ci) % NBOUNDS;
      size_t len;
      uint8_t *a =
          compress(s, f32 ? FZ_F32 : FZ_F64, x, pipe, bounds[b].m, bounds[b].eb, chunk, &len);
      char what[200];
      snprintf(what, sizeof what, "%s: %s shape %u %s kind %d bound %u chunk %u", pipe,
               enc ? "encode" : "decode", si, f32 ? "f32" : "f64", (int)k, b, chunk);
      if (enc)
        encode(a, len, x, what);
      else
        decode(a, len, (si + (unsigned)f32) & 1 ? 3 : 0, what);
      free(a);
      free(x);
    }
}

/* A bound below what the type resolves: quant's words are the values'
 * bits (the encoder copies them for the interpolation), no side list. */
static void lossless_cases(int enc) {
  static const shape ls[] = {{2, {40, 50}}, {3, {7, 11, 13}}};
  for (unsigned si = 0; si < 2; si++)
    for (int f32 = 0; f32 < 2; f32++) {
      void *x = field(&ls[si], f32, si ? SMOOTH : SPECIAL, 5 + si);
      size_t len;
      uint8_t *a = compress(&ls[si], f32 ? FZ_F32 : FZ_F64, x, "ratio", FZ_EB_ABS,
                            f32 ? 1e-45 : 1e-320, 4096, &len);
      char what[120];
      snprintf(what, sizeof what, "lossless: %s shape %u %s", enc ? "encode" : "decode", si,
               f32 ? "f32" : "f64");
      fze_header h;
      cr_assert_eq(fze_header_parse(a, len, &h), 0, "%s", what);
      cr_assert(h.chain.st[0].step == 0, "%s: not lossless", what);
      if (enc)
        encode(a, len, x, what);
      else
        decode(a, len, si ? 3 : 0, what);
      free(a);
      free(x);
    }
}

/* The lossless-ratio preset (lorenzo | byteplanes) on the small shapes,
 * f32 and f64, smooth (planes of zeros, coded planes and planes kept as
 * they are) and special values, one or two dims. */
static void planes_cases(int enc) {
  static const char *const pipes[] = {"lossless-ratio", "lorenzo(dims=1) | byteplanes"};
  for (unsigned si = 0; si < NSMALL; si++)
    for (int f32 = 0; f32 < 2; f32++) {
      const shape *s = &shapes[si];
      enum kind k = (si + (unsigned)f32) & 1 ? SPECIAL : SMOOTH;
      void *x = field(s, f32, k, 9 + si);
      size_t len;
      const char *pipe = pipes[(si + (unsigned)f32) % 2];
      uint8_t *a = compress(s, f32 ? FZ_F32 : FZ_F64, x, pipe, FZ_EB_ABS, 0, 4096, &len);
      char what[160];
      snprintf(what, sizeof what, "%s: %s shape %u %s kind %d", pipe, enc ? "encode" : "decode",
               si, f32 ? "f32" : "f64", (int)k);
      if (enc)
        encode(a, len, x, what);
      else
        decode(a, len, si & 1 ? 3 : 0, what);
      free(a);
      free(x);
    }
}

#define RATIO "ratio"
#define INTERP1 "quant | interp(dims=1) | huffman | rze(levels=2)"
#define LORENZO "quant | lorenzo | huffman | rze"

FZT_TEST(encode_ratio) { chain_cases(RATIO, 0, 1); }
FZT_TEST(decode_ratio) { chain_cases(RATIO, 0, 0); }
FZT_TEST(encode_interp_dims1) { chain_cases(INTERP1, 1, 1); }
FZT_TEST(decode_interp_dims1) { chain_cases(INTERP1, 1, 0); }
FZT_TEST(encode_lorenzo) { chain_cases(LORENZO, 2, 1); }
FZT_TEST(decode_lorenzo) { chain_cases(LORENZO, 2, 0); }
FZT_TEST(encode_lossless) { lossless_cases(1); }
FZT_TEST(decode_lossless) { lossless_cases(0); }
FZT_TEST(encode_planes) { planes_cases(1); }
FZT_TEST(decode_planes) { planes_cases(0); }

#ifdef FZT_PLAIN
int main(void) {
  static const struct {
    const char *name;
    void (*run)(void);
  } tests[] = {{"encode_ratio", encode_ratio},       {"decode_ratio", decode_ratio},
               {"encode_interp_dims1", encode_interp_dims1},
               {"decode_interp_dims1", decode_interp_dims1},
               {"encode_lorenzo", encode_lorenzo},   {"decode_lorenzo", decode_lorenzo},
               {"encode_lossless", encode_lossless}, {"decode_lossless", decode_lossless},
               {"encode_planes", encode_planes},     {"decode_planes", decode_planes}};
  setup();
  for (size_t i = 0; i < sizeof tests / sizeof *tests; i++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tests[i].run();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("ratio_threads::%s passed (%.2f s)\n", tests[i].name,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    fflush(stdout);
  }
  return 0;
}
#else
TestSuite(ratio_threads, .init = setup, .timeout = 300);
#endif
