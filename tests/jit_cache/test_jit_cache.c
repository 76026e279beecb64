/*
 * test_jit_cache.c - the JIT module cache (kernels/jit/jit_cache.c): its
 * SHA-256 against the FIPS 180-4 vectors, hits from memory and from disk
 * across a close, the entry format on disk, every kind of bad entry
 * (rejected, counted, rebuilt, never returned), atomic writes, the bound on
 * the directory, one build for concurrent gets of a key, builds of different
 * keys in parallel, two processes on one directory, and a directory that
 * cannot be written.  No GPU and no CUDA: the images are made-up bytes.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fz_error.h"
#include "fzk_sha256.h"
#include "jit_cache.h"

#define HEADER_LEN 88
#define WAIT_SEC 30 /* generous: CI machines are loaded */

/* ---- helpers ------------------------------------------------------------ */

static void hex(const unsigned char *d, size_t n, char *out) {
  for (size_t i = 0; i < n; i++)
    sprintf(out + 2 * i, "%02x", d[i]);
}

static void sha_hex(const void *p, size_t n, char out[65]) {
  unsigned char d[32];
  fzk_sha256(p, n, d);
  hex(d, 32, out);
}

/* The entry's file name, computed as docs/gpu.md says: SHA-256 over the
 * format version and the length-prefixed source, options and target. */
static void entry_name(const char *src, const char *opt, const char *tgt, char out[65]) {
  fzk_sha256_ctx s;
  unsigned char v[4] = {1, 0, 0, 0}, d[32];
  fzk_sha256_init(&s);
  fzk_sha256_update(&s, v, 4);
  const char *f[3] = {src, opt, tgt};
  for (int i = 0; i < 3; i++) {
    unsigned char n[8];
    uint64_t len = strlen(f[i]);
    for (int b = 0; b < 8; b++)
      n[b] = (unsigned char)(len >> (8 * b));
    fzk_sha256_update(&s, n, 8);
    fzk_sha256_update(&s, f[i], len);
  }
  fzk_sha256_final(&s, d);
  hex(d, 32, out);
}

static char *path_in(const char *dir, const char *name) {
  static _Thread_local char p[1024];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return p;
}

/* The test's directories, removed by remove_dir() or, when an assertion
 * ended the test first, by the suites' fini: no run leaves files in /tmp. */
static char *test_dirs[4];

static char *make_dir(void) {
  char *d = strdup("/tmp/fzjit-test-XXXXXX");
  cr_assert_not_null(mkdtemp(d));
  for (int i = 0; i < 4; i++)
    if (test_dirs[i] == NULL) {
      test_dirs[i] = d;
      return d;
    }
  cr_assert_fail("too many test directories");
  return NULL;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  chmod(p, 0700);
  return remove(p);
}

static void remove_dir(char *d) {
  chmod(d, 0700);
  nftw(d, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  for (int i = 0; i < 4; i++)
    if (test_dirs[i] == d)
      test_dirs[i] = NULL;
  free(d);
}

static void remove_dirs(void) {
  for (int i = 0; i < 4; i++)
    if (test_dirs[i])
      remove_dir(test_dirs[i]);
}

TestSuite(jit_cache, .fini = remove_dirs);
TestSuite(jit_cache_threads, .fini = remove_dirs);
TestSuite(jit_cache_processes, .fini = remove_dirs);

/* The names in dir: entries (64 hex digits), our temporary files, others. */
typedef struct listing {
  int entries, tmps, others;
} listing;

static listing list_dir(const char *dir) {
  listing l = {0, 0, 0};
  DIR *d = opendir(dir);
  cr_assert_not_null(d);
  for (struct dirent *de; (de = readdir(d)) != NULL;) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    if (strlen(de->d_name) == 64 && strspn(de->d_name, "0123456789abcdef") == 64)
      l.entries++;
    else if (strncmp(de->d_name, ".fzjit-tmp.", 11) == 0)
      l.tmps++;
    else
      l.others++;
  }
  closedir(d);
  return l;
}

static bool exists(const char *p) {
  struct stat st;
  return lstat(p, &st) == 0;
}

static uint64_t monotonic_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static void set_age(const char *p, long seconds_ago) {
  struct timespec now, t[2];
  clock_gettime(CLOCK_REALTIME, &now);
  t[0] = t[1] = (struct timespec){now.tv_sec - seconds_ago, 0};
  cr_assert_eq(utimensat(AT_FDCWD, p, t, AT_SYMLINK_NOFOLLOW), 0, "%s: %s", p, strerror(errno));
}

/* A build that makes the image `text` repeated to `size` bytes (or once),
 * or fails with `fail`; it can first wait until `wait_waiters` gets wait for
 * it, or until a flag is raised. */
typedef struct builder {
  const char *text;
  size_t size;
  int fail;
  fzk_jit_cache *cache;
  unsigned wait_waiters;
  atomic_int *raise, *await; /* sets *raise, then waits for *await */
  long sleep_ms;
  atomic_int calls;
  atomic_int timed_out;
} builder;

static void fill_image(const char *text, size_t size, unsigned char *p) {
  size_t tl = strlen(text);
  for (size_t i = 0; i < size; i++)
    p[i] = (unsigned char)text[i % tl];
}

static size_t image_size(const builder *b) { return b->size ? b->size : strlen(b->text); }

/* Polls until *flag (an atomic_int, or the cache's waiting count reaching
 * n when flag is NULL); false after WAIT_SEC. */
static bool wait_until(atomic_int *flag, fzk_jit_cache *c, unsigned n) {
  uint64_t deadline = monotonic_us() + WAIT_SEC * 1000000ull;
  while (flag ? !atomic_load(flag) : fzk_jit_cache_waiting(c) < n) {
    if (monotonic_us() > deadline)
      return false;
    sleep_ms(1);
  }
  return true;
}

static int build(void *arg, void **image, size_t *len, char *why, size_t why_len) {
  builder *b = arg;
  atomic_fetch_add(&b->calls, 1);
  if (b->wait_waiters && !wait_until(NULL, b->cache, b->wait_waiters))
    atomic_store(&b->timed_out, 1);
  if (b->raise)
    atomic_store(b->raise, 1);
  if (b->await && !wait_until(b->await, NULL, 0)) {
    atomic_store(&b->timed_out, 1);
    snprintf(why, why_len, "the other build never started");
    return FZ_ETIMEDOUT;
  }
  if (b->sleep_ms)
    sleep_ms(b->sleep_ms);
  if (b->fail) {
    snprintf(why, why_len, "nvrtc: error: %s does not compile", b->text);
    return b->fail;
  }
  size_t n = image_size(b);
  unsigned char *p = malloc(n);
  if (p == NULL)
    return FZ_ENOMEM;
  fill_image(b->text, n, p);
  *image = p;
  *len = n;
  return 0;
}

/* Asserts that image is the one b makes. */
static void assert_image(const builder *b, const void *image, size_t len) {
  size_t n = image_size(b);
  cr_assert_eq(len, n);
  unsigned char *want = malloc(n);
  fill_image(b->text, n, want);
  cr_assert_eq(memcmp(image, want, n), 0, "wrong image for %s", b->text);
  free(want);
}

static fzk_jit_cache *open_ok(const char *dir, uint64_t max) {
  fzk_jit_cache *c = NULL;
  char why[512] = "x";
  cr_assert_eq(fzk_jit_cache_open(dir, max, &c, why, sizeof why), 0, "%s", why);
  cr_assert_str_empty(why);
  cr_assert_null(fzk_jit_cache_disk_error(c));
  return c;
}

static const void *get_ok(fzk_jit_cache *c, const char *src, const char *opt, const char *tgt,
                          builder *b) {
  const void *img = NULL;
  size_t len = 0;
  char why[512] = "";
  int rc = fzk_jit_cache_get(c, src, opt, tgt, build, b, &img, &len, why, sizeof why);
  cr_assert_eq(rc, 0, "get %s: %d %s", src, rc, why);
  assert_image(b, img, len);
  return img;
}

static fzk_jit_counts counts(fzk_jit_cache *c) {
  fzk_jit_counts n;
  fzk_jit_cache_counts(c, &n);
  return n;
}

#define TGT "sm_90 nvrtc 13.0 driver 13000"

/* ---- SHA-256 ------------------------------------------------------------ */

Test(jit_sha256, fips_180_4_vectors) {
  static const struct {
    const char *msg, *digest;
  } v[] = {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrl"
       "mnopqrsmnopqrstnopqrstu",
       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
  };
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    char h[65];
    sha_hex(v[i].msg, strlen(v[i].msg), h);
    cr_assert_str_eq(h, v[i].digest, "vector %zu", i);
  }
}

Test(jit_sha256, one_million_a_in_pieces) {
  size_t n = 1000000;
  char *a = malloc(n);
  memset(a, 'a', n);
  char h[65];
  sha_hex(a, n, h);
  cr_assert_str_eq(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  /* Pieces of every length from 1 to 130 cross the block boundary at every
   * offset: the digest must not depend on how the message is split. */
  for (size_t step = 1; step <= 130; step += 3) {
    fzk_sha256_ctx s;
    unsigned char d[32];
    fzk_sha256_init(&s);
    for (size_t off = 0; off < n; off += step)
      fzk_sha256_update(&s, a + off, off + step <= n ? step : n - off);
    fzk_sha256_final(&s, d);
    hex(d, 32, h);
    cr_assert_str_eq(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
                     "pieces of %zu", step);
  }
  free(a);
}

/* Lengths 55, 56, 63 and 64 are where the padding needs a second block. */
Test(jit_sha256, padding_edges) {
  static const struct {
    size_t n;
    const char *digest;
  } v[] = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
  };
  char a[64], h[65];
  memset(a, 'a', sizeof a);
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    sha_hex(a, v[i].n, h);
    cr_assert_str_eq(h, v[i].digest, "%zu bytes of 'a'", v[i].n);
  }
}

/* ---- memory and disk ---------------------------------------------------- */

Test(jit_cache, memory_only_hit) {
  const char *dirs[2] = {NULL, ""};
  for (int k = 0; k < 2; k++) {
    fzk_jit_cache *c = open_ok(dirs[k], 0);
    builder b = {.text = "kernel-a"};
    const void *i1 = get_ok(c, "src", "-arch", TGT, &b);
    const void *i2 = get_ok(c, "src", "-arch", TGT, &b);
    cr_assert_eq(i1, i2, "a memory hit hands out the image it keeps");
    cr_assert_eq(atomic_load(&b.calls), 1);
    fzk_jit_counts n = counts(c);
    cr_assert_eq(n.mem_hits, 1);
    cr_assert_eq(n.misses, 1);
    cr_assert_eq(n.compiles, 1);
    cr_assert_eq(n.disk_hits + n.disk_writes + n.disk_bytes, 0);
    fzk_jit_cache_close(c);
  }
  fzk_jit_cache_close(NULL);
  fzk_jit_counts z;
  memset(&z, 0xff, sizeof z);
  fzk_jit_cache_counts(NULL, &z);
  cr_assert_eq(z.misses + z.mem_hits, 0);
}

Test(jit_cache, options_null_is_empty) {
  fzk_jit_cache *c = open_ok(NULL, 0);
  builder b = {.text = "k"};
  const void *i1 = get_ok(c, "src", NULL, TGT, &b);
  const void *i2 = get_ok(c, "src", "", TGT, &b);
  cr_assert_eq(i1, i2);
  cr_assert_eq(atomic_load(&b.calls), 1);
  fzk_jit_cache_close(c);
}

Test(jit_cache, bad_arguments) {
  fzk_jit_cache *c = open_ok(NULL, 0);
  builder b = {.text = "k"};
  const void *img = (const void *)1;
  size_t len = 1;
  char why[256] = "";
  cr_assert_eq(fzk_jit_cache_get(c, NULL, "", TGT, build, &b, &img, &len, why, sizeof why),
               FZ_EINVAL);
  cr_assert_null(img);
  cr_assert_str_not_empty(why);
  cr_assert_eq(fzk_jit_cache_get(c, "s", "", NULL, build, &b, &img, &len, why, sizeof why),
               FZ_EINVAL);
  cr_assert_eq(fzk_jit_cache_get(c, "s", "", TGT, NULL, &b, &img, &len, why, sizeof why),
               FZ_EINVAL);
  cr_assert_eq(fzk_jit_cache_get(NULL, "s", "", TGT, build, &b, &img, &len, NULL, 0), FZ_EINVAL);
  cr_assert_eq(fzk_jit_cache_open(NULL, 0, NULL, why, sizeof why), FZ_EINVAL);
  cr_assert_eq(atomic_load(&b.calls), 0);
  fzk_jit_cache_close(c);
}

static int build_nothing(void *arg, void **image, size_t *len, char *why, size_t why_len) {
  (void)arg, (void)why, (void)why_len;
  *image = NULL;
  *len = 0;
  return 0;
}

Test(jit_cache, build_without_image_is_a_failure) {
  char *dir = make_dir();
  fzk_jit_cache *c = open_ok(dir, 0);
  const void *img = NULL;
  size_t len = 0;
  char why[256] = "";
  cr_assert_eq(fzk_jit_cache_get(c, "s", "", TGT, build_nothing, NULL, &img, &len, why, sizeof why),
               FZ_EINVAL);
  cr_assert(strstr(why, "no image"), "%s", why);
  fzk_jit_counts n = counts(c);
  cr_assert_eq(n.compiles, 1);
  cr_assert_eq(n.compile_failures, 1);
  cr_assert_eq(list_dir(dir).entries, 0);
  fzk_jit_cache_close(c);
  remove_dir(dir);
}

Test(jit_cache, disk_hit_across_close_and_open) {
  char *dir = make_dir();
  builder b = {.text = "cubin-bytes-", .size = 5000, .sleep_ms = 20};
  fzk_jit_cache *c = open_ok(dir, 0);
  get_ok(c, "__global__ void k() {}", "-fmad=false", TGT, &b);
  fzk_jit_counts n = counts(c);
  cr_assert_eq(n.compiles, 1);
  cr_assert_eq(n.disk_writes, 1);
  cr_assert_geq(n.compile_us, 20000, "compile_us counts the time inside build()");
  cr_assert_eq(n.disk_bytes, HEADER_LEN + 5000);
  fzk_jit_cache_close(c);

  /* The entry as docs/gpu.md describes it. */
  char name[65];
  entry_name("__global__ void k() {}", "-fmad=false", TGT, name);
  FILE *f = fopen(path_in(dir, name), "rb");
  cr_assert_not_null(f, "the entry is named by its key");
  unsigned char h[HEADER_LEN];
  cr_assert_eq(fread(h, 1, HEADER_LEN, f), HEADER_LEN);
  fclose(f);
  cr_assert_eq(memcmp(h, "FZJITMOD", 8), 0);
  cr_assert_eq(h[8] | h[9] << 8 | h[10] << 16 | (unsigned)h[11] << 24, 1u);
  cr_assert_eq(h[12] | h[13] << 8, HEADER_LEN);
  char key[65];
  hex(h + 16, 32, key);
  cr_assert_str_eq(key, name);
  cr_assert_eq(h[48] | h[49] << 8 | h[50] << 16, 5000);
  struct stat st;
  cr_assert_eq(stat(path_in(dir, name), &st), 0);
  cr_assert_eq(st.st_size, HEADER_LEN + 5000);
  cr_assert_eq(st.st_mode & 0777, 0600);

  builder none = {.text = "cubin-bytes-", .size = 5000, .fail = FZ_ENVRTC};
  fzk_jit_cache *c2 = open_ok(dir, 0);
  get_ok(c2, "__global__ void k() {}", "-fmad=false", TGT, &none);
  get_ok(c2, "__global__ void k() {}", "-fmad=false", TGT, &none);
  cr_assert_eq(atomic_load(&none.calls), 0, "a disk hit builds nothing");
  n = counts(c2);
  cr_assert_eq(n.misses, 1);
  cr_assert_eq(n.disk_hits, 1);
  cr_assert_eq(n.mem_hits, 1);
  cr_assert_eq(n.compiles + n.disk_writes + n.disk_rejected, 0);
  fzk_jit_cache_close(c2);
  remove_dir(dir);
}

Test(jit_cache, creates_missing_directories_0700) {
  char *dir = make_dir();
  char sub[512];
  snprintf(sub, sizeof sub, "%s/state/jit", dir);
  fzk_jit_cache *c = open_ok(sub, 0);
  struct stat st;
  cr_assert_eq(stat(sub, &st), 0);
  cr_assert(S_ISDIR(st.st_mode));
  cr_assert_eq(st.st_mode & 0777, 0700);
  builder b = {.text = "k"};
  get_ok(c, "s", "", TGT, &b);
  cr_assert_eq(list_dir(sub).entries, 1);
  fzk_jit_cache_close(c);
  remove_dir(dir);
}

Test(jit_cache, every_part_of_the_key_counts) {
  char *dir = make_dir();
  /* The length prefixes keep ("ab", "c") and ("a", "bc") apart. */
  static const char *keys[][3] = {
      {"src", "opt", TGT},  {"src2", "opt", TGT}, {"src", "opt2", TGT},
      {"src", "opt", "sm_80 nvrtc 13.0 driver 13000"}, {"ab", "c", TGT}, {"a", "bc", TGT},
      {"src", "opt", "sm_90 nvrtc 13.0 driver 13010"},
  };
  size_t nk = sizeof keys / sizeof *keys;
  builder b[7];
  char text[7][32];
  fzk_jit_cache *c = open_ok(dir, 0);
  for (size_t i = 0; i < nk; i++) {
    snprintf(text[i], sizeof text[i], "image-%zu-", i);
    b[i] = (builder){.text = text[i], .size = 100 + i};
    get_ok(c, keys[i][0], keys[i][1], keys[i][2], &b[i]);
    cr_assert_eq(atomic_load(&b[i].calls), 1, "key %zu is a new key", i);
  }
  cr_assert_eq(list_dir(dir).entries, (int)nk);
  fzk_jit_cache_close(c);
  fzk_jit_cache *c2 = open_ok(dir, 0);
  for (size_t i = nk; i-- > 0;) {
    b[i].fail = FZ_ENVRTC;
    get_ok(c2, keys[i][0], keys[i][1], keys[i][2], &b[i]);
  }
  cr_assert_eq(counts(c2).disk_hits, nk);
  fzk_jit_cache_close(c2);
  remove_dir(dir);
}

/* ---- bad entries -------------------------------------------------------- */

typedef enum damage {
  FLIP_IMAGE_BYTE,
  FLIP_DIGEST_BYTE,
  TRUNCATE_IMAGE,
  TRUNCATE_HEADER,
  APPEND_BYTE,
  WRONG_MAGIC,
  WRONG_VERSION,
  WRONG_LENGTH_FIELD,
  OTHER_KEYS_ENTRY,
  ZERO_LENGTH,
  EMPTY_DIRECTORY,
  SYMLINK,
  FIFO,
  HUGE,
  DAMAGE_KINDS
} damage;

static const char *damage_name[] = {
    "flipped image byte", "flipped digest byte", "truncated image", "truncated header",
    "appended byte", "wrong magic", "wrong version", "wrong length field", "another key's entry",
    "zero-length file", "empty directory", "symlink", "fifo", "huge (sparse) file"};

static void patch(const char *p, off_t off, unsigned char x) {
  int fd = open(p, O_RDWR);
  cr_assert_geq(fd, 0);
  unsigned char v;
  cr_assert_eq(pread(fd, &v, 1, off), 1);
  v ^= x;
  cr_assert_eq(pwrite(fd, &v, 1, off), 1);
  close(fd);
}

static void do_damage(damage d, const char *dir, const char *name, const char *other) {
  char p[512], q[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  snprintf(q, sizeof q, "%s/%s", dir, other);
  struct stat st;
  cr_assert_eq(stat(p, &st), 0);
  switch (d) {
  case FLIP_IMAGE_BYTE:
    patch(p, HEADER_LEN + 700, 0x01);
    break;
  case FLIP_DIGEST_BYTE:
    patch(p, 60, 0x80);
    break;
  case TRUNCATE_IMAGE:
    cr_assert_eq(truncate(p, st.st_size - 1), 0);
    break;
  case TRUNCATE_HEADER:
    cr_assert_eq(truncate(p, 40), 0);
    break;
  case APPEND_BYTE: {
    FILE *f = fopen(p, "ab");
    fputc(0, f);
    fclose(f);
    break;
  }
  case WRONG_MAGIC:
    patch(p, 0, 'F' ^ 'G');
    break;
  case WRONG_VERSION:
    patch(p, 8, 1 ^ 2);
    break;
  case WRONG_LENGTH_FIELD:
    patch(p, 48, 0x01);
    break;
  case OTHER_KEYS_ENTRY:
    cr_assert_eq(rename(q, p), 0);
    break;
  case ZERO_LENGTH:
    cr_assert_eq(truncate(p, 0), 0);
    break;
  case EMPTY_DIRECTORY:
    cr_assert_eq(unlink(p), 0);
    cr_assert_eq(mkdir(p, 0700), 0);
    break;
  case SYMLINK: /* to a valid entry, but of another key */
    cr_assert_eq(unlink(p), 0);
    cr_assert_eq(symlink(other, p), 0);
    break;
  case FIFO:
    cr_assert_eq(unlink(p), 0);
    cr_assert_eq(mkfifo(p, 0600), 0);
    break;
  case HUGE: /* more than any image may be: refused before it is read */
    cr_assert_eq(truncate(p, ((off_t)1 << 30) + HEADER_LEN + 1), 0);
    break;
  default:
    cr_assert_fail();
  }
}

Test(jit_cache, bad_entries_rejected_counted_rebuilt, .timeout = 120) {
  for (int d = 0; d < DAMAGE_KINDS; d++) {
    char *dir = make_dir();
    builder a = {.text = "right-image-", .size = 3000};
    builder o = {.text = "other-image-", .size = 3000};
    char name[65], other[65];
    entry_name("kernel A", "", TGT, name);
    entry_name("kernel B", "", TGT, other);
    fzk_jit_cache *c = open_ok(dir, 0);
    get_ok(c, "kernel A", "", TGT, &a);
    get_ok(c, "kernel B", "", TGT, &o);
    fzk_jit_cache_close(c);
    do_damage((damage)d, dir, name, other);

    c = open_ok(dir, 0);
    get_ok(c, "kernel A", "", TGT, &a); /* asserts the right bytes */
    fzk_jit_counts n = counts(c);
    cr_assert_eq(n.disk_rejected, 1, "%s: counted", damage_name[d]);
    cr_assert_eq(n.disk_hits, 0, "%s: not a hit", damage_name[d]);
    cr_assert_eq(n.compiles, 1, "%s: rebuilt", damage_name[d]);
    cr_assert_eq(n.disk_writes, 1, "%s: written again", damage_name[d]);
    cr_assert_eq(atomic_load(&a.calls), 2, "%s", damage_name[d]);
    fzk_jit_cache_close(c);

    /* The rewritten entry is good: a third cache reads it, and B's entry
     * (which a symbolic link pointed to) is untouched unless it was moved. */
    c = open_ok(dir, 0);
    a.fail = FZ_ENVRTC;
    get_ok(c, "kernel A", "", TGT, &a);
    cr_assert_eq(counts(c).disk_hits, 1, "%s: the new entry loads", damage_name[d]);
    if (d != OTHER_KEYS_ENTRY) {
      o.fail = FZ_ENVRTC;
      get_ok(c, "kernel B", "", TGT, &o);
      cr_assert_eq(counts(c).disk_hits, 2, "%s: the other entry is intact", damage_name[d]);
    }
    cr_assert_eq(list_dir(dir).tmps, 0);
    fzk_jit_cache_close(c);
    remove_dir(dir);
  }
}

/* A directory that cannot be removed stands where the entry goes: the get
 * still returns the built image, the failed write is counted and leaves no
 * temporary file. */
Test(jit_cache, failed_write_leaves_nothing_and_does_not_fail) {
  char *dir = make_dir();
  char name[65], p[512];
  entry_name("kernel", "", TGT, name);
  snprintf(p, sizeof p, "%s/%s", dir, name);
  cr_assert_eq(mkdir(p, 0700), 0);
  cr_assert_eq(mkdir(path_in(p, "x"), 0700), 0);
  fzk_jit_cache *c = open_ok(dir, 0);
  builder b = {.text = "img", .size = 400};
  get_ok(c, "kernel", "", TGT, &b);
  fzk_jit_counts n = counts(c);
  cr_assert_eq(n.disk_rejected, 1);
  cr_assert_eq(n.disk_writes, 0);
  cr_assert_eq(n.disk_write_failures, 1);
  listing l = list_dir(dir);
  cr_assert_eq(l.tmps, 0, "no temporary file left behind");
  cr_assert_eq(l.entries, 1, "only the directory that was there");
  get_ok(c, "kernel", "", TGT, &b);
  cr_assert_eq(counts(c).mem_hits, 1);
  fzk_jit_cache_close(c);
  remove_dir(dir);
}

/* A write cut short half way (the file size limit stands in for a full
 * disk) leaves neither an entry nor a temporary file, and the get still
 * succeeds. */
Test(jit_cache, write_cut_short_leaves_nothing) {
  char *dir = make_dir();
  fzk_jit_cache *c = open_ok(dir, 0);
  struct rlimit old, small = {.rlim_cur = 2048, .rlim_max = RLIM_INFINITY};
  cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
  small.rlim_max = old.rlim_max;
  signal(SIGXFSZ, SIG_IGN); /* write() fails with EFBIG instead */
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
  builder b = {.text = "big image", .size = 10000};
  get_ok(c, "big kernel", "", TGT, &b);
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
  fzk_jit_counts n = counts(c);
  cr_assert_eq(n.disk_writes, 0);
  cr_assert_eq(n.disk_write_failures, 1);
  listing l = list_dir(dir);
  cr_assert_eq(l.entries + l.tmps + l.others, 0, "nothing of the write is left");
  get_ok(c, "big kernel", "", TGT, &b);
  cr_assert_eq(counts(c).mem_hits, 1, "the image stays in memory");
  /* With room again, another cache writes it whole. */
  fzk_jit_cache *c2 = open_ok(dir, 0);
  get_ok(c2, "big kernel", "", TGT, &b);
  cr_assert_eq(counts(c2).disk_writes, 1);
  fzk_jit_cache_close(c2);
  fzk_jit_cache_close(c);
  remove_dir(dir);
}

Test(jit_cache, writes_leave_no_temporary_files) {
  char *dir = make_dir();
  fzk_jit_cache *c = open_ok(dir, 0);
  char src[32];
  for (int i = 0; i < 20; i++) {
    snprintf(src, sizeof src, "kernel %d", i);
    builder b = {.text = src, .size = 1000 + (size_t)i};
    get_ok(c, src, "", TGT, &b);
  }
  listing l = list_dir(dir);
  cr_assert_eq(l.entries, 20);
  cr_assert_eq(l.tmps + l.others, 0);
  /* A failed build writes nothing. */
  builder bad = {.text = "bad", .fail = FZ_ENVRTC};
  const void *img;
  size_t len;
  char why[256];
  cr_assert_eq(fzk_jit_cache_get(c, "bad", "", TGT, build, &bad, &img, &len, why, sizeof why),
               FZ_ENVRTC);
  l = list_dir(dir);
  cr_assert_eq(l.entries, 20);
  cr_assert_eq(l.tmps + l.others, 0);
  fzk_jit_cache_close(c);
  remove_dir(dir);
}

Test(jit_cache, stale_temporaries_removed_other_files_kept) {
  char *dir = make_dir();
  const char *names[] = {".fzjit-tmp.1.2.3", ".fzjit-tmp.4.5.6", "README", "notes.txt"};
  for (int i = 0; i < 4; i++) {
    FILE *f = fopen(path_in(dir, names[i]), "wb");
    fputs("not an entry, with some length to it", f);
    fclose(f);
  }
  set_age(path_in(dir, names[0]), 3600);
  set_age(path_in(dir, names[2]), 3600);
  fzk_jit_cache *c = open_ok(dir, 10);
  cr_assert_not(exists(path_in(dir, names[0])), "a stale temporary file goes");
  cr_assert(exists(path_in(dir, names[1])), "a fresh one may be another process's write");
  cr_assert(exists(path_in(dir, names[2])), "other files are not ours");
  cr_assert(exists(path_in(dir, names[3])));
  cr_assert_eq(counts(c).disk_bytes, 0, "and do not count against the bound");
  fzk_jit_cache_close(c);
  remove_dir(dir);
}

/* ---- the bound ---------------------------------------------------------- */

Test(jit_cache, bound_removes_oldest_first) {
  char *dir = make_dir();
  const uint64_t entry = HEADER_LEN + 1000, bound = 2 * entry + 500; /* room for two */
  builder A = {.text = "A", .size = 1000}, B = {.text = "B", .size = 1000},
          C = {.text = "C", .size = 1000}, D = {.text = "D", .size = 1000};
  char a[65], b[65], cn[65], d[65];
  entry_name("A", "", TGT, a);
  entry_name("B", "", TGT, b);
  entry_name("C", "", TGT, cn);
  entry_name("D", "", TGT, d);

  fzk_jit_cache *c = open_ok(dir, bound);
  get_ok(c, "A", "", TGT, &A);
  get_ok(c, "B", "", TGT, &B);
  cr_assert_eq(counts(c).disk_evicted, 0);
  cr_assert_eq(counts(c).disk_bytes, 2 * entry);
  set_age(path_in(dir, a), 300);
  set_age(path_in(dir, b), 200);
  get_ok(c, "C", "", TGT, &C);
  fzk_jit_counts n = counts(c);
  cr_assert_eq(n.disk_evicted, 1);
  cr_assert_eq(n.disk_bytes, 2 * entry);
  cr_assert_not(exists(path_in(dir, a)), "the oldest goes");
  cr_assert(exists(path_in(dir, b)));
  cr_assert(exists(path_in(dir, cn)), "the newest stays");
  fzk_jit_cache_close(c);

  /* A disk hit makes B the most recently used: C goes before it now. */
  set_age(path_in(dir, cn), 100);
  c = open_ok(dir, bound);
  get_ok(c, "B", "", TGT, &B);
  cr_assert_eq(counts(c).disk_hits, 1);
  get_ok(c, "D", "", TGT, &D);
  cr_assert_not(exists(path_in(dir, cn)));
  cr_assert(exists(path_in(dir, b)), "touched on the hit");
  cr_assert(exists(path_in(dir, d)));
  fzk_jit_cache_close(c);

  /* Open enforces a smaller bound at once; the memory keeps what it had. */
  set_age(path_in(dir, b), 50);
  c = open_ok(dir, entry + 10);
  n = counts(c);
  cr_assert_eq(n.disk_evicted, 1);
  cr_assert_eq(n.disk_bytes, entry);
  cr_assert_not(exists(path_in(dir, b)));
  cr_assert(exists(path_in(dir, d)));
  fzk_jit_cache_close(c);
  remove_dir(dir);
}

/* ---- threads ------------------------------------------------------------ */

#define NTHREADS 8

typedef struct getter {
  fzk_jit_cache *c;
  const char *src;
  builder *b;
  pthread_barrier_t *start;
  int rc;
  const void *image;
  size_t len;
  char why[256];
} getter;

static void *run_get(void *arg) {
  getter *g = arg;
  if (g->start)
    pthread_barrier_wait(g->start);
  g->rc = fzk_jit_cache_get(g->c, g->src, "", TGT, build, g->b, &g->image, &g->len, g->why,
                            sizeof g->why);
  return NULL;
}

static void run_getters(getter *g, int n) {
  pthread_t t[NTHREADS];
  for (int i = 0; i < n; i++)
    cr_assert_eq(pthread_create(&t[i], NULL, run_get, &g[i]), 0);
  for (int i = 0; i < n; i++)
    pthread_join(t[i], NULL);
}

Test(jit_cache_threads, one_key_builds_once, .timeout = 120) {
  char *dir = make_dir();
  fzk_jit_cache *c = open_ok(dir, 0);
  /* The build waits until all the others wait for it. */
  builder b = {.text = "shared", .size = 2000, .cache = c, .wait_waiters = NTHREADS - 1};
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, NTHREADS);
  getter g[NTHREADS];
  for (int i = 0; i < NTHREADS; i++)
    g[i] = (getter){.c = c, .src = "one kernel", .b = &b, .start = &start};
  run_getters(g, NTHREADS);
  cr_assert_eq(atomic_load(&b.timed_out), 0, "the others waited for the build");
  cr_assert_eq(atomic_load(&b.calls), 1, "one build");
  for (int i = 0; i < NTHREADS; i++) {
    cr_assert_eq(g[i].rc, 0, "%s", g[i].why);
    cr_assert_eq(g[i].image, g[0].image, "one image for all");
    assert_image(&b, g[i].image, g[i].len);
  }
  fzk_jit_counts n = counts(c);
  cr_assert_eq(n.misses, 1);
  cr_assert_eq(n.mem_hits, NTHREADS - 1);
  cr_assert_eq(n.compiles, 1);
  cr_assert_eq(n.disk_writes, 1);
  cr_assert_eq(fzk_jit_cache_waiting(c), 0);
  fzk_jit_cache_close(c);
  pthread_barrier_destroy(&start);
  remove_dir(dir);
}

Test(jit_cache_threads, failed_build_fails_all_then_retries, .timeout = 120) {
  char *dir = make_dir();
  fzk_jit_cache *c = open_ok(dir, 0);
  builder b = {.text = "broken kernel", .fail = FZ_ENVRTC, .cache = c,
               .wait_waiters = NTHREADS - 1};
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, NTHREADS);
  getter g[NTHREADS];
  for (int i = 0; i < NTHREADS; i++)
    g[i] = (getter){.c = c, .src = "one kernel", .b = &b, .start = &start};
  run_getters(g, NTHREADS);
  cr_assert_eq(atomic_load(&b.timed_out), 0);
  cr_assert_eq(atomic_load(&b.calls), 1, "one build, failed, reported to all");
  for (int i = 0; i < NTHREADS; i++) {
    cr_assert_eq(g[i].rc, FZ_ENVRTC);
    cr_assert_null(g[i].image);
    cr_assert(strstr(g[i].why, "nvrtc: error: broken kernel does not compile"), "%s", g[i].why);
  }
  fzk_jit_counts n = counts(c);
  cr_assert_eq(n.compiles, 1);
  cr_assert_eq(n.compile_failures, 1);
  cr_assert_eq(n.mem_hits, 0);
  cr_assert_eq(list_dir(dir).entries + list_dir(dir).tmps, 0, "a failure is not stored");

  /* Not remembered: the next get builds again, and succeeds. */
  builder ok = {.text = "fixed", .size = 64};
  get_ok(c, "one kernel", "", TGT, &ok);
  n = counts(c);
  cr_assert_eq(n.compiles, 2);
  cr_assert_eq(n.compile_failures, 1);
  cr_assert_eq(list_dir(dir).entries, 1);
  fzk_jit_cache_close(c);
  pthread_barrier_destroy(&start);
  remove_dir(dir);
}

/* Each build waits for the other to start: both finish only if they run at
 * the same time. */
Test(jit_cache_threads, different_keys_build_in_parallel, .timeout = 120) {
  char *dir = make_dir();
  fzk_jit_cache *c = open_ok(dir, 0);
  atomic_int started[2] = {0, 0};
  builder b0 = {.text = "zero", .raise = &started[0], .await = &started[1]};
  builder b1 = {.text = "one", .raise = &started[1], .await = &started[0]};
  getter g[2] = {{.c = c, .src = "kernel 0", .b = &b0}, {.c = c, .src = "kernel 1", .b = &b1}};
  run_getters(g, 2);
  for (int i = 0; i < 2; i++)
    cr_assert_eq(g[i].rc, 0, "%s", g[i].why);
  assert_image(&b0, g[0].image, g[0].len);
  assert_image(&b1, g[1].image, g[1].len);
  cr_assert_eq(counts(c).compiles, 2);
  fzk_jit_cache_close(c);
  remove_dir(dir);
}

/* While one key builds, a hit on another is answered: no lock is held
 * across build(). */
Test(jit_cache_threads, hits_are_served_during_a_build, .timeout = 120) {
  fzk_jit_cache *c = open_ok(NULL, 0);
  builder warm = {.text = "warm"};
  get_ok(c, "warm kernel", "", TGT, &warm);
  atomic_int building = 0, release = 0;
  builder slow = {.text = "slow", .raise = &building, .await = &release};
  getter g = {.c = c, .src = "slow kernel", .b = &slow};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, run_get, &g), 0);
  cr_assert(wait_until(&building, NULL, 0));
  get_ok(c, "warm kernel", "", TGT, &warm);
  fzk_jit_counts n;
  fzk_jit_cache_counts(c, &n);
  atomic_store(&release, 1);
  pthread_join(t, NULL);
  cr_assert_eq(g.rc, 0, "%s", g.why);
  cr_assert_eq(atomic_load(&slow.timed_out), 0);
  cr_assert_eq(n.mem_hits, 1);
  fzk_jit_cache_close(c);
}

/* ---- processes ---------------------------------------------------------- */

#define NKEYS 16

static void key_text(int k, char *src, size_t n) { snprintf(src, n, "kernel %d", k); }

/* In a child: no Criterion asserts; 0 or the number of failures. */
static int child_gets(const char *dir, uint64_t bound, int order, int rounds, bool reopen) {
  int bad = 0;
  fzk_jit_cache *c = NULL;
  for (int r = 0; r < rounds; r++)
    for (int i = 0; i < NKEYS; i++) {
      int k = order ? NKEYS - 1 - i : i;
      char src[32], why[256];
      key_text(k, src, sizeof src);
      builder b = {.text = src, .size = 2000 + (size_t)k * 13};
      if (c == NULL && fzk_jit_cache_open(dir, bound, &c, why, sizeof why) != 0)
        return 1000;
      const void *img;
      size_t len;
      if (fzk_jit_cache_get(c, src, "", TGT, build, &b, &img, &len, why, sizeof why) != 0) {
        bad++;
      } else {
        unsigned char *want = malloc(image_size(&b));
        fill_image(src, image_size(&b), want);
        bad += len != image_size(&b) || memcmp(img, want, len) != 0;
        free(want);
      }
      if (reopen) {
        fzk_jit_cache_close(c);
        c = NULL;
      }
    }
  fzk_jit_cache_close(c);
  return bad;
}

static void two_processes(const char *dir, uint64_t bound, int rounds, bool reopen) {
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0)
    _exit(child_gets(dir, bound, 1, rounds, reopen) ? 1 : 0);
  int mine = child_gets(dir, bound, 0, rounds, reopen);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert_eq(mine, 0, "this process got %d wrong or failed images", mine);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the other process did not");
}

Test(jit_cache_processes, two_processes_share_a_directory, .timeout = 300) {
  char *dir = make_dir();
  two_processes(dir, 0, 2, false);
  listing l = list_dir(dir);
  cr_assert_eq(l.entries, NKEYS);
  cr_assert_eq(l.tmps + l.others, 0);
  /* Whichever process wrote them, every entry is whole: a third reads all
   * of them without a build. */
  fzk_jit_cache *c = open_ok(dir, 0);
  for (int k = 0; k < NKEYS; k++) {
    char src[32];
    key_text(k, src, sizeof src);
    builder b = {.text = src, .size = 2000 + (size_t)k * 13, .fail = FZ_ENVRTC};
    get_ok(c, src, "", TGT, &b);
  }
  cr_assert_eq(counts(c).disk_hits, NKEYS);
  cr_assert_eq(counts(c).disk_rejected, 0);
  fzk_jit_cache_close(c);
  remove_dir(dir);
}

/* A bound of a few entries: both processes keep evicting and rewriting what
 * the other reads, and reopen their cache for every get so each one goes to
 * the disk.  Entries vanish under readers; no get fails or sees a wrong
 * image. */
Test(jit_cache_processes, two_processes_under_a_small_bound, .timeout = 300) {
  char *dir = make_dir();
  two_processes(dir, 3 * (HEADER_LEN + 2200), 3, true);
  listing l = list_dir(dir);
  cr_assert_leq(l.entries, 3);
  cr_assert_eq(l.tmps + l.others, 0);
  remove_dir(dir);
}

/* ---- directories that cannot be used ------------------------------------ */

static void assert_memory_only(const char *dir) {
  fzk_jit_cache *c = NULL;
  char why[512] = "";
  cr_assert_eq(fzk_jit_cache_open(dir, 0, &c, why, sizeof why), 0, "%s", why);
  cr_assert(strstr(why, "memory only"), "the reason comes back as a warning: %s", why);
  cr_assert(strstr(why, dir), "and names the directory: %s", why);
  cr_assert_not_null(fzk_jit_cache_disk_error(c));
  cr_assert_str_eq(fzk_jit_cache_disk_error(c), why);
  builder b = {.text = "from memory"};
  const void *i1 = get_ok(c, "k", "", TGT, &b);
  const void *i2 = get_ok(c, "k", "", TGT, &b);
  cr_assert_eq(i1, i2);
  fzk_jit_counts n = counts(c);
  cr_assert_eq(n.compiles, 1);
  cr_assert_eq(n.mem_hits, 1);
  cr_assert_eq(n.disk_writes + n.disk_write_failures + n.disk_rejected, 0);
  fzk_jit_cache_close(c);
}

Test(jit_cache, unwritable_directory_is_memory_only) {
  /* /proc cannot take a file or a directory, even from root. */
  assert_memory_only("/proc");
  assert_memory_only("/proc/fzjit-cache");
  if (geteuid() != 0) { /* permissions bind everyone else */
    char *dir = make_dir();
    cr_assert_eq(chmod(dir, 0500), 0);
    assert_memory_only(dir);
    cr_assert_eq(list_dir(dir).entries, 0);
    remove_dir(dir);
  }
}

Test(jit_cache, a_file_is_not_a_directory) {
  char *dir = make_dir();
  char p[512];
  snprintf(p, sizeof p, "%s/file", dir);
  FILE *f = fopen(p, "w");
  fclose(f);
  fzk_jit_cache *c = (fzk_jit_cache *)&c;
  char why[512] = "";
  cr_assert_eq(fzk_jit_cache_open(p, 0, &c, why, sizeof why), FZ_EINVAL);
  cr_assert_null(c);
  cr_assert(strstr(why, "not a directory") && strstr(why, p), "%s", why);
  remove_dir(dir);
}

/* ---- another user on the machine (issue 27, item 2) ---------------------- */

/* A cache directory that another user can write, or that is reached
 * through a link, is not used: what another user put there would be
 * loaded into fzd's CUDA context.  The images planted below would be hits
 * if it were. */
Test(jit_cache, directories_others_can_write_are_not_used) {
  char *dir = make_dir();
  char cache[512], link[512];
  snprintf(cache, sizeof cache, "%s/jit", dir);
  snprintf(link, sizeof link, "%s/link", dir);
  builder b = {.text = "planted image"};
  fzk_jit_cache *c = open_ok(cache, 0);
  get_ok(c, "k", "", TGT, &b); /* an entry of key k is on disk now */
  fzk_jit_cache_close(c);

  const mode_t modes[] = {0770, 0707, 0777, 01777};
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
    cr_assert_eq(chmod(cache, modes[i]), 0);
    assert_memory_only(cache); /* k is built, not loaded */
  }
  cr_assert_eq(chmod(cache, 0700), 0);
  /* A parent others can write is as bad, unless it is sticky (/tmp). */
  char sub[600];
  snprintf(sub, sizeof sub, "%s/jit", cache);
  cr_assert_eq(chmod(dir, 0777), 0);
  c = NULL;
  char why0[512] = "";
  cr_assert_eq(fzk_jit_cache_open(sub, 0, &c, why0, sizeof why0), 0);
  cr_assert(strstr(why0, "memory only") && strstr(why0, dir) && strstr(why0, "0777"), "%s",
            why0);
  cr_assert_not_null(fzk_jit_cache_disk_error(c));
  fzk_jit_cache_close(c);
  cr_assert_eq(chmod(dir, 01777), 0);
  fzk_jit_cache_close(open_ok(sub, 0));
  cr_assert_eq(chmod(dir, 0700), 0);
  /* A link to a good directory is not followed. */
  cr_assert_eq(symlink(cache, link), 0);
  assert_memory_only(link);
  char why[512] = "";
  c = NULL;
  cr_assert_eq(fzk_jit_cache_open(link, 0, &c, why, sizeof why), 0);
  cr_assert(strstr(why, "symbolic link"), "%s", why);
  fzk_jit_cache_close(c);
  c = NULL;
  cr_assert_eq(chmod(cache, 0777), 0);
  cr_assert_eq(fzk_jit_cache_open(cache, 0, &c, why, sizeof why), 0);
  cr_assert(strstr(why, "writable by its group or by others"), "%s", why);
  fzk_jit_cache_close(c);
  cr_assert_eq(chmod(cache, 0700), 0);

  /* As root, play the other user: the directory and then an entry of
   * theirs.  (Without root, chown to another uid is not possible.) */
  if (geteuid() == 0) {
    cr_assert_eq(chown(cache, 4242, 4242), 0);
    assert_memory_only(cache);
    c = NULL;
    cr_assert_eq(fzk_jit_cache_open(cache, 0, &c, why, sizeof why), 0);
    cr_assert(strstr(why, "uid 4242"), "%s", why);
    fzk_jit_cache_close(c);
    cr_assert_eq(chown(cache, 0, 0), 0);

    char name[65];
    entry_name("k", "", TGT, name);
    cr_assert_eq(chown(path_in(cache, name), 4242, 4242), 0);
    builder fresh = {.text = "planted image"};
    c = open_ok(cache, 0);
    get_ok(c, "k", "", TGT, &fresh);
    fzk_jit_counts n = counts(c);
    cr_assert_eq(n.disk_hits, 0, "an entry of another user was loaded");
    cr_assert_eq(n.disk_rejected, 1);
    cr_assert_eq(atomic_load(&fresh.calls), 1);
    fzk_jit_cache_close(c);
    /* Ours again (rewritten by the build above), and 0660: rejected too. */
    struct stat st;
    cr_assert_eq(stat(path_in(cache, name), &st), 0);
    cr_assert_eq(st.st_uid, 0u);
    cr_assert_eq(chmod(path_in(cache, name), 0660), 0);
    builder again = {.text = "planted image"};
    c = open_ok(cache, 0);
    get_ok(c, "k", "", TGT, &again);
    cr_assert_eq(counts(c).disk_rejected, 1);
    cr_assert_eq(atomic_load(&again.calls), 1);
    fzk_jit_cache_close(c);
  } else {
    cr_log_warn("not root: the other user's directory and entry are not tried");
  }
  remove_dir(dir);
}
