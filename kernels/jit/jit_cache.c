/*
 * jit_cache.c - the JIT module cache: compiled kernel images in memory and in
 * a directory that several daemons (one per GPU) may share.
 *
 * Key.  SHA-256 over the format version (4 bytes, little-endian) and the
 * source, the options and the target, each preceded by its length (8 bytes,
 * little-endian), so no two different triples give the same message.  The
 * target names the architecture and the NVRTC and driver versions, so a new
 * toolkit or GPU never sees an old image.
 *
 * Entry.  One file per key, named by the key in 64 lowercase hex digits:
 *   magic "FZJITMOD" (8) | format version (u32) | header length 88 (u32) |
 *   key (32) | image length (u64) | SHA-256 of the image (32) | image
 * (integers little-endian).  A load checks all of it: the magic, the version,
 * the header length, that the key is the requested one (which is also the
 * file's name), that the image length is the file size less the header, and
 * the image's digest.  Anything else, and anything that is not a regular
 * file or cannot be read, is rejected (counted), removed if it is still the
 * file that was looked at, and the image is built again: a bad entry costs a
 * compilation, never a wrong image.
 *
 * Writes.  An entry is written to a temporary file of its own in the same
 * directory (".fzjit-tmp.<pid>.<sequence>.<nanoseconds>", created with
 * O_EXCL), fsync'ed, renamed over the entry's name and the directory
 * fsync'ed; a reader therefore sees the whole old entry, the whole new one
 * or none.  A failed write removes its temporary file and only counts: the
 * get still returns the image it built.
 *
 * Trust.  An image from the directory is loaded into fzd's CUDA context, so
 * the directory is opened one component at a time without following links,
 * and is used only when no other user could have put anything in it: every
 * directory on the way belongs to root or to this process's user and is
 * writable by no one else (a sticky one excepted), the cache directory is
 * this user's and writable by no one else, and an entry is loaded only when
 * it is this user's and writable by no one else (OpenSSH's StrictModes
 * rules).  A directory that fails is not used (memory only, with the
 * reason); an entry that fails is rejected like a corrupt one.
 *
 * Bound.  After each write (and at open) the directory is listed; when the
 * entries' sizes add up to more than the bound, the oldest by mtime go
 * first until the rest fit.  A disk hit touches its entry, so the order is
 * that of last use.  Files with other names are left alone, except the
 * temporary files of this cache (of any process) older than ten minutes,
 * which a crash left behind.  Another process may remove an entry at any
 * moment; every step takes "it is gone" as an ordinary outcome.
 *
 * Threads.  One mutex guards the map of keys and the counters, and is never
 * held across build() or disk I/O.  The first get of a key puts a pending
 * entry in the map, then reads the disk or builds; later gets of that key
 * wait on a condition variable for its outcome.  A failure is handed to all
 * of them and the pending entry leaves the map, so the next get tries again.
 * A second mutex keeps this process's directory listings one at a time.
 */
#include "jit_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fze_chain.h"
#include "fz_error.h"
#include "fzk_sha256.h"

#define FORMAT_VERSION 1u
#define HEADER_LEN 88u
#define KEY_HEX (2 * FZK_SHA256_LEN)
/* No kernel image comes near this; a larger file is not trusted enough to
 * allocate for. */
#define MAX_IMAGE ((uint64_t)1 << 30)
#define TMP_PREFIX ".fzjit-tmp."
#define STALE_TMP_SEC 600
static const unsigned char MAGIC[8] = {'F', 'Z', 'J', 'I', 'T', 'M', 'O', 'D'};

typedef enum entry_state { PENDING, READY, FAILED } entry_state;

typedef struct entry {
  unsigned char key[FZK_SHA256_LEN];
  entry_state state;
  void *image; /* READY */
  size_t len;
  int rc;   /* FAILED: the build's code and message */
  char *msg;
  unsigned refs; /* gets that will still look at it while it is not READY */
  struct entry *next;
} entry;

struct fzk_jit_cache {
  pthread_mutex_t mu; /* the map, the counters, waiting */
  pthread_cond_t done; /* some pending entry became READY or FAILED */
  entry **buckets;
  size_t nbuckets, count;
  unsigned waiting;
  fzk_jit_counts n;
  int dirfd; /* -1: memory only */
  uint64_t max_disk;
  char *disk_error;
  pthread_mutex_t scan_mu; /* one listing of the directory at a time */
};

static atomic_uint_fast64_t tmp_seq;

static uint64_t now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

static void put_le(unsigned char *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

static void hash_field(fzk_sha256_ctx *s, const char *text) {
  unsigned char n[8];
  size_t len = strlen(text);
  put_le(n, len, 8);
  fzk_sha256_update(s, n, 8);
  fzk_sha256_update(s, text, len);
}

static void make_key(const char *source, const char *options, const char *target,
                     unsigned char key[FZK_SHA256_LEN]) {
  fzk_sha256_ctx s;
  unsigned char v[4];
  put_le(v, FORMAT_VERSION, 4);
  fzk_sha256_init(&s);
  fzk_sha256_update(&s, v, 4);
  hash_field(&s, source);
  hash_field(&s, options);
  hash_field(&s, target);
  fzk_sha256_final(&s, key);
}

static void key_name(const unsigned char key[FZK_SHA256_LEN], char name[KEY_HEX + 1]) {
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < FZK_SHA256_LEN; i++) {
    name[2 * i] = hex[key[i] >> 4];
    name[2 * i + 1] = hex[key[i] & 15];
  }
  name[KEY_HEX] = '\0';
}

static bool is_entry_name(const char *name) {
  size_t i = 0;
  for (; name[i]; i++)
    if (i >= KEY_HEX || !((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
      return false;
  return i == KEY_HEX;
}

/* ---- the map ------------------------------------------------------------ */

static size_t bucket_of(const unsigned char *key, size_t nbuckets) {
  return (size_t)get_le(key, 8) & (nbuckets - 1);
}

static entry *find(fzk_jit_cache *c, const unsigned char *key) {
  for (entry *e = c->buckets[bucket_of(key, c->nbuckets)]; e; e = e->next)
    if (memcmp(e->key, key, FZK_SHA256_LEN) == 0)
      return e;
  return NULL;
}

/* Doubles the table when it is full; a failed growth only makes the chains
 * longer. */
static void grow(fzk_jit_cache *c) {
  if (c->count < c->nbuckets)
    return;
  size_t nb = c->nbuckets * 2;
  entry **b = calloc(nb, sizeof *b);
  if (b == NULL)
    return;
  for (size_t i = 0; i < c->nbuckets; i++)
    for (entry *e = c->buckets[i], *next; e; e = next) {
      next = e->next;
      size_t j = bucket_of(e->key, nb);
      e->next = b[j];
      b[j] = e;
    }
  free(c->buckets);
  c->buckets = b;
  c->nbuckets = nb;
}

static void insert(fzk_jit_cache *c, entry *e) {
  grow(c);
  size_t i = bucket_of(e->key, c->nbuckets);
  e->next = c->buckets[i];
  c->buckets[i] = e;
  c->count++;
}

static void unlink_entry(fzk_jit_cache *c, entry *e) {
  for (entry **p = &c->buckets[bucket_of(e->key, c->nbuckets)]; *p; p = &(*p)->next)
    if (*p == e) {
      *p = e->next;
      c->count--;
      return;
    }
}

static void free_entry(entry *e) {
  free(e->image);
  free(e->msg);
  free(e);
}

static void add(fzk_jit_cache *c, uint64_t *counter, uint64_t v) {
  pthread_mutex_lock(&c->mu);
  *counter += v;
  pthread_mutex_unlock(&c->mu);
}

/* ---- the directory ------------------------------------------------------ */

typedef struct listed {
  char name[KEY_HEX + 1];
  uint64_t size;
  struct timespec mtime;
} listed;

static int by_age(const void *a, const void *b) {
  const listed *x = a, *y = b;
  if (x->mtime.tv_sec != y->mtime.tv_sec)
    return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
  if (x->mtime.tv_nsec != y->mtime.tv_nsec)
    return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Lists the directory: removes stale temporary files, adds up the entries
 * and, over the bound, removes the oldest.  Best effort: a listing that
 * cannot be made leaves everything as it is. */
static void scan(fzk_jit_cache *c) {
  pthread_mutex_lock(&c->scan_mu);
  listed *v = NULL;
  size_t nv = 0, cap = 0;
  uint64_t total = 0, evicted = 0;
  /* A descriptor of its own: a dup() would share the position of the
   * directory stream, which the last listing left at the end. */
  int fd = openat(c->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (d == NULL) {
    if (fd >= 0)
      close(fd);
    goto out;
  }
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  for (struct dirent *de; (de = readdir(d)) != NULL;) {
    struct stat st;
    bool entry_name = is_entry_name(de->d_name);
    if (!entry_name && strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) != 0)
      continue;
    if (fstatat(c->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (!entry_name) {
      if (now.tv_sec - st.st_mtim.tv_sec > STALE_TMP_SEC)
        unlinkat(c->dirfd, de->d_name, 0);
      continue;
    }
    if (nv == cap) {
      size_t nc = cap ? 2 * cap : 64;
      listed *nvp = realloc(v, nc * sizeof *v);
      if (nvp == NULL)
        goto out_dir; /* without the whole list, evict nothing */
      v = nvp;
      cap = nc;
    }
    memcpy(v[nv].name, de->d_name, KEY_HEX + 1);
    v[nv].size = (uint64_t)st.st_size;
    v[nv].mtime = st.st_mtim;
    total += v[nv].size;
    nv++;
  }
  if (c->max_disk && total > c->max_disk) {
    qsort(v, nv, sizeof *v, by_age);
    for (size_t i = 0; i < nv && total > c->max_disk; i++) {
      if (unlinkat(c->dirfd, v[i].name, 0) == 0)
        evicted++;
      else if (errno != ENOENT)
        continue; /* still there: it still counts */
      total -= v[i].size;
    }
  }
  pthread_mutex_lock(&c->mu);
  c->n.disk_bytes = total;
  c->n.disk_evicted += evicted;
  pthread_mutex_unlock(&c->mu);
out_dir:
  closedir(d);
out:
  free(v);
  pthread_mutex_unlock(&c->scan_mu);
}

/* Counts a bad entry and removes it, if the name still refers to the file
 * that was examined (st, or st NULL when it could not be opened): another
 * process may have put a good entry there since. */
static void reject(fzk_jit_cache *c, const char *name, const struct stat *st) {
  add(c, &c->n.disk_rejected, 1);
  struct stat now;
  if (fstatat(c->dirfd, name, &now, AT_SYMLINK_NOFOLLOW) != 0)
    return;
  if (st && (now.st_dev != st->st_dev || now.st_ino != st->st_ino))
    return;
  unlinkat(c->dirfd, name, S_ISDIR(now.st_mode) ? AT_REMOVEDIR : 0);
}

static bool read_all(int fd, void *buf, size_t n, off_t off) {
  unsigned char *p = buf;
  while (n) {
    ssize_t r = pread(fd, p, n, off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    p += r;
    n -= (size_t)r;
    off += r;
  }
  return true;
}

static bool write_all(int fd, const void *buf, size_t n) {
  const unsigned char *p = buf;
  while (n) {
    ssize_t r = write(fd, p, n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    p += r;
    n -= (size_t)r;
  }
  return true;
}

/* The entry of key from disk, validated: true with *image (malloc'd) and
 * *len, or false when there is none or it was rejected. */
static bool load(fzk_jit_cache *c, const unsigned char *key, const char *name, void **image,
                 size_t *len) {
  /* Only regular files are opened (a device node must not be), and only
   * without following links and without blocking (a FIFO put in place
   * between the look and the open must not hang the get). */
  struct stat st;
  if (fstatat(c->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno != ENOENT)
      reject(c, name, NULL);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    reject(c, name, &st);
    return false;
  }
  int fd = openat(c->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    /* Out of descriptors or memory is no fault of the entry. */
    if (errno != ENOENT && errno != EMFILE && errno != ENFILE && errno != ENOMEM &&
        errno != EINTR)
      reject(c, name, NULL);
    return false;
  }
  unsigned char h[HEADER_LEN], digest[FZK_SHA256_LEN];
  void *img = NULL;
  if (fstat(fd, &st) != 0)
    goto bad_nostat;
  /* An entry another user made (or could have changed) is not ours to
   * load, whatever its digest says: the digest is inside the file. */
  if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) ||
      (uint64_t)st.st_size < HEADER_LEN ||
      (uint64_t)st.st_size - HEADER_LEN > MAX_IMAGE || !read_all(fd, h, HEADER_LEN, 0))
    goto bad;
  uint64_t n = (uint64_t)st.st_size - HEADER_LEN;
  if (memcmp(h, MAGIC, 8) != 0 || get_le(h + 8, 4) != FORMAT_VERSION ||
      get_le(h + 12, 4) != HEADER_LEN || memcmp(h + 16, key, FZK_SHA256_LEN) != 0 ||
      get_le(h + 48, 8) != n || n == 0)
    goto bad;
  img = malloc((size_t)n);
  if (img == NULL) {
    close(fd);
    return false; /* no memory is no fault of the entry: build instead */
  }
  if (!read_all(fd, img, (size_t)n, HEADER_LEN))
    goto bad;
  fzk_sha256(img, (size_t)n, digest);
  if (memcmp(digest, h + 56, FZK_SHA256_LEN) != 0)
    goto bad;
  futimens(fd, NULL); /* recently used: last to be evicted */
  close(fd);
  *image = img;
  *len = (size_t)n;
  return true;
bad:
  free(img);
  close(fd);
  reject(c, name, &st);
  return false;
bad_nostat:
  close(fd);
  reject(c, name, NULL);
  return false;
}

/* Creates a temporary file of this cache in the directory; -1 on failure. */
static int create_tmp(int dirfd, char *tmp, size_t tmp_len) {
  for (int attempt = 0; attempt < 16; attempt++) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    snprintf(tmp, tmp_len, TMP_PREFIX "%ld.%llu.%ld", (long)getpid(),
             (unsigned long long)atomic_fetch_add(&tmp_seq, 1), (long)t.tv_nsec);
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST)
      return fd;
  }
  return -1;
}

/* Writes the entry of key atomically; false if it could not be, with no
 * file of it left behind. */
static bool store(fzk_jit_cache *c, const unsigned char *key, const char *name,
                  const void *image, size_t len) {
  if ((uint64_t)len > MAX_IMAGE)
    return false;
  unsigned char h[HEADER_LEN];
  memcpy(h, MAGIC, 8);
  put_le(h + 8, FORMAT_VERSION, 4);
  put_le(h + 12, HEADER_LEN, 4);
  memcpy(h + 16, key, FZK_SHA256_LEN);
  put_le(h + 48, len, 8);
  fzk_sha256(image, len, h + 56);
  char tmp[64];
  int fd = create_tmp(c->dirfd, tmp, sizeof tmp);
  if (fd < 0)
    return false;
  bool ok = write_all(fd, h, HEADER_LEN) && write_all(fd, image, len) && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok || renameat(c->dirfd, tmp, c->dirfd, name) != 0) {
    unlinkat(c->dirfd, tmp, 0);
    return false;
  }
  /* The rename is done: the entry is there even if this fails, and a
   * load validates it either way. */
  fsync(c->dirfd);
  return true;
}

/* ---- opening ------------------------------------------------------------ */

/* The owner and mode rules of a directory on the way to the cache, as
 * OpenSSH's StrictModes has them: another user who can write a directory
 * on the path could put a directory of their own, and so images of their
 * own, in place of the cache.  Every directory on the way must belong to
 * root or to this process's user and be writable by no one else (a sticky
 * one such as /tmp excepted: there nobody else can move or remove what is
 * ours); the cache directory itself must be this user's and writable by
 * no one else, sticky or not.  "" when st passes, else why not. */
static void check_owner(const struct stat *st, const char *path, bool last, char *reason,
                        size_t len) {
  uid_t me = geteuid();
  bool others_write = (st->st_mode & (S_IWGRP | S_IWOTH)) != 0;
  reason[0] = '\0';
  if (last && st->st_uid != me)
    snprintf(reason, len, "%s belongs to uid %u, not to fzd's user (uid %u)", path,
             (unsigned)st->st_uid, (unsigned)me);
  else if (!last && st->st_uid != me && st->st_uid != 0)
    snprintf(reason, len, "%s, on the way to the cache, belongs to uid %u (neither root nor "
             "fzd's user, uid %u)", path, (unsigned)st->st_uid, (unsigned)me);
  else if (others_write && (last || !(st->st_mode & S_ISVTX)))
    snprintf(reason, len, "%s is writable by its group or by others (mode %04o)", path,
             (unsigned)(st->st_mode & 07777));
}

/* Opens dir one component at a time from the root (or the working
 * directory for a relative path) without following any link, makes the
 * missing ones (mode 0700) and checks each with check_owner().  Returns the
 * directory's descriptor; -1 with the reason in reason, or FZ_EINVAL (dir
 * or a component is not a directory) with why. */
static int open_strict(const char *dir, char *reason, size_t reason_len, char *why,
                       size_t why_len) {
  size_t n = strlen(dir);
  char *path = malloc(n + 1);
  if (path == NULL) {
    snprintf(reason, reason_len, "out of memory");
    return -1;
  }
  int fd = open(dir[0] == '/' ? "/" : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    snprintf(reason, reason_len, "cannot open %s: %s", dir[0] == '/' ? "/" : ".",
             strerror(errno));
  size_t i = 0;
  while (fd >= 0) {
    while (dir[i] == '/')
      i++;
    if (dir[i] == '\0')
      break;
    size_t j = i;
    while (dir[j] != '/' && dir[j] != '\0')
      j++;
    memcpy(path, dir, j);
    path[j] = '\0';
    const char *name = path + i;
    bool last = dir[j + strspn(dir + j, "/")] == '\0';
    int next = -1;
    if (strcmp(name, "..") == 0) {
      snprintf(reason, reason_len, "%s: \"..\" is not allowed in the path", dir);
    } else {
      next = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (next < 0 && errno == ENOENT) {
        if (mkdirat(fd, name, 0700) == 0 || errno == EEXIST)
          next = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        else
          snprintf(reason, reason_len, "cannot create %s: %s", path, strerror(errno));
      }
    }
    struct stat st;
    if (next < 0 && reason[0] == '\0') {
      int e = errno;
      if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
        snprintf(reason, reason_len, "%s is a symbolic link (not followed)", path);
      } else if (e == ENOTDIR) {
        fze_why(why, why_len, "jit cache directory %s: %s is not a directory", dir, path);
        close(fd);
        free(path);
        return FZ_EINVAL;
      } else {
        snprintf(reason, reason_len, "cannot open %s: %s", path, strerror(e));
      }
    }
    if (next >= 0) {
      if (fstat(next, &st) != 0)
        snprintf(reason, reason_len, "cannot stat %s: %s", path, strerror(errno));
      else
        check_owner(&st, path, last, reason, reason_len);
      if (reason[0] != '\0') {
        close(next);
        next = -1;
      }
    }
    close(fd);
    fd = next;
    i = j;
  }
  free(path);
  return fd;
}

/* Makes the directory usable, or says in c->disk_error why not; a negative
 * code only for the errors that fail open. */
static int open_dir(fzk_jit_cache *c, const char *dir, char *why, size_t why_len) {
  char reason[512] = "";
  int fd = open_strict(dir, reason, sizeof reason, why, why_len);
  if (fd == FZ_EINVAL)
    return FZ_EINVAL;
  c->dirfd = fd;
  if (c->dirfd >= 0) {
    /* The real test of writability: access() misses read-only mounts and
     * answers for the real, not the effective, user. */
    char tmp[64];
    int tfd = create_tmp(c->dirfd, tmp, sizeof tmp);
    if (tfd < 0) {
      snprintf(reason, sizeof reason, "cannot write in %s: %s", dir, strerror(errno));
      close(c->dirfd);
      c->dirfd = -1;
    } else {
      close(tfd);
      unlinkat(c->dirfd, tmp, 0);
    }
  }
  if (reason[0] != '\0') {
    char msg[600];
    snprintf(msg, sizeof msg, "jit cache on disk off, memory only: %s", reason);
    c->disk_error = strdup(msg);
    if (c->disk_error == NULL) {
      fze_why(why, why_len, "fzk_jit_cache_open: out of memory");
      return FZ_ENOMEM;
    }
    fze_why(why, why_len, "%s", msg);
  }
  return 0;
}

int fzk_jit_cache_open(const char *dir, uint64_t max_disk_bytes, fzk_jit_cache **out, char *why,
                       size_t why_len) {
  fze_why(why, why_len, "%s", "");
  if (out == NULL) {
    fze_why(why, why_len, "fzk_jit_cache_open: out is NULL");
    return FZ_EINVAL;
  }
  *out = NULL;
  int rc = FZ_ENOMEM;
  fzk_jit_cache *c = calloc(1, sizeof *c);
  if (c == NULL)
    goto err_alloc;
  c->dirfd = -1;
  c->max_disk = max_disk_bytes;
  c->nbuckets = 64;
  c->buckets = calloc(c->nbuckets, sizeof *c->buckets);
  if (c->buckets == NULL || pthread_mutex_init(&c->mu, NULL) != 0)
    goto err_buckets;
  if (pthread_cond_init(&c->done, NULL) != 0)
    goto err_mu;
  if (pthread_mutex_init(&c->scan_mu, NULL) != 0)
    goto err_cond;
  if (dir != NULL && dir[0] != '\0') {
    rc = open_dir(c, dir, why, why_len);
    if (rc < 0)
      goto err_dir;
    if (c->dirfd >= 0)
      scan(c);
  }
  *out = c;
  return 0;
err_dir:
  free(c->disk_error);
  pthread_mutex_destroy(&c->scan_mu);
err_cond:
  pthread_cond_destroy(&c->done);
err_mu:
  pthread_mutex_destroy(&c->mu);
err_buckets:
  free(c->buckets);
  free(c);
err_alloc:
  if (rc == FZ_ENOMEM) /* open_dir's own message says the same */
    fze_why(why, why_len, "fzk_jit_cache_open: out of memory");
  return rc;
}

void fzk_jit_cache_close(fzk_jit_cache *c) {
  if (c == NULL)
    return;
  for (size_t i = 0; i < c->nbuckets; i++)
    for (entry *e = c->buckets[i], *next; e; e = next) {
      next = e->next;
      free_entry(e);
    }
  free(c->buckets);
  if (c->dirfd >= 0)
    close(c->dirfd);
  free(c->disk_error);
  pthread_mutex_destroy(&c->scan_mu);
  pthread_cond_destroy(&c->done);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

/* ---- get ---------------------------------------------------------------- */

/* Waits, with c->mu held, for the pending entry e of another get. */
static int wait_for(fzk_jit_cache *c, entry *e, const void **image, size_t *len, char *why,
                    size_t why_len) {
  e->refs++;
  c->waiting++;
  while (e->state == PENDING)
    pthread_cond_wait(&c->done, &c->mu);
  c->waiting--;
  e->refs--;
  if (e->state == READY) {
    c->n.mem_hits++;
    *image = e->image;
    *len = e->len;
    return 0;
  }
  int rc = e->rc;
  fze_why(why, why_len, "%s", e->msg ? e->msg : fz_strerror(rc));
  if (e->refs == 0)
    free_entry(e);
  return rc;
}

/* Calls build() and checks what it gave; the counters are the caller's. */
static int run_build(fzk_jit_build_fn build, void *arg, void **image, size_t *len, char *why,
                     size_t why_len) {
  *image = NULL;
  *len = 0;
  int rc = build(arg, image, len, why, why_len);
  if (rc >= 0 && (*image == NULL || *len == 0)) {
    free(*image);
    *image = NULL;
    fze_why(why, why_len, "jit cache: the build returned no image");
    rc = FZ_EINVAL;
  } else if (rc < 0) {
    free(*image);
    *image = NULL;
    if (why && why_len && why[0] == '\0')
      fze_why(why, why_len, "jit cache: the build failed: %s", fz_strerror(rc));
  }
  return rc < 0 ? rc : 0;
}

int fzk_jit_cache_get(fzk_jit_cache *c, const char *source, const char *options,
                      const char *target, fzk_jit_build_fn build, void *arg, const void **image,
                      size_t *len, char *why, size_t why_len) {
  if (image)
    *image = NULL;
  if (len)
    *len = 0;
  if (c == NULL || source == NULL || target == NULL || build == NULL || image == NULL ||
      len == NULL) {
    fze_why(why, why_len, "fzk_jit_cache_get: NULL argument");
    return FZ_EINVAL;
  }
  /* The build's message is handed to the waiters too, so it needs a buffer
   * even when the caller gave none. */
  char own_why[256];
  if (why == NULL || why_len == 0) {
    why = own_why;
    why_len = sizeof own_why;
  }
  why[0] = '\0';
  unsigned char key[FZK_SHA256_LEN];
  make_key(source, options ? options : "", target, key);

  pthread_mutex_lock(&c->mu);
  entry *e = find(c, key);
  if (e != NULL) {
    int rc = 0;
    if (e->state == READY) {
      c->n.mem_hits++;
      *image = e->image;
      *len = e->len;
    } else {
      rc = wait_for(c, e, image, len, why, why_len);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
  }
  e = calloc(1, sizeof *e);
  if (e == NULL) {
    pthread_mutex_unlock(&c->mu);
    fze_why(why, why_len, "jit cache: out of memory");
    return FZ_ENOMEM;
  }
  memcpy(e->key, key, sizeof key);
  e->state = PENDING;
  insert(c, e);
  c->n.misses++;
  pthread_mutex_unlock(&c->mu);

  char name[KEY_HEX + 1];
  key_name(key, name);
  void *img = NULL;
  size_t n = 0;
  int rc = 0;
  bool from_disk = c->dirfd >= 0 && load(c, key, name, &img, &n);
  if (!from_disk) {
    uint64_t t0 = now_us();
    rc = run_build(build, arg, &img, &n, why, why_len);
    uint64_t dt = now_us() - t0;
    pthread_mutex_lock(&c->mu);
    c->n.compiles++;
    c->n.compile_us += dt;
    c->n.compile_failures += rc < 0;
    pthread_mutex_unlock(&c->mu);
  }

  pthread_mutex_lock(&c->mu);
  if (rc < 0) {
    unlink_entry(c, e);
    e->state = FAILED;
    e->rc = rc;
    e->msg = strdup(why); /* NULL: the waiters get fz_strerror(rc) */
    if (e->refs == 0)
      free_entry(e);
  } else {
    e->state = READY;
    e->image = img;
    e->len = n;
    c->n.disk_hits += from_disk;
    *image = img;
    *len = n;
  }
  pthread_cond_broadcast(&c->done);
  pthread_mutex_unlock(&c->mu);

  /* The waiters have their image; the writer alone pays for the disk. */
  if (rc == 0 && !from_disk && c->dirfd >= 0) {
    if (store(c, key, name, img, n)) {
      add(c, &c->n.disk_writes, 1);
      scan(c);
    } else {
      add(c, &c->n.disk_write_failures, 1);
    }
  }
  return rc;
}

void fzk_jit_cache_counts(fzk_jit_cache *c, fzk_jit_counts *out) {
  if (out == NULL)
    return;
  memset(out, 0, sizeof *out);
  if (c == NULL)
    return;
  pthread_mutex_lock(&c->mu);
  *out = c->n;
  pthread_mutex_unlock(&c->mu);
}

const char *fzk_jit_cache_disk_error(const fzk_jit_cache *c) {
  return c ? c->disk_error : NULL;
}

unsigned fzk_jit_cache_waiting(fzk_jit_cache *c) {
  if (c == NULL)
    return 0;
  pthread_mutex_lock(&c->mu);
  unsigned w = c->waiting;
  pthread_mutex_unlock(&c->mu);
  return w;
}
