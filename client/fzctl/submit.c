/*
 * submit.c - `fzctl submit`: compress arrays or decompress archives, many
 * files with several jobs in flight on one connection.
 *
 * Every input becomes a descriptor first: a file is opened, stdin is copied
 * into a memfd.  Over the Unix socket the descriptors themselves go to the
 * daemon (SCM_RIGHTS), which reads the input and writes the output file in
 * place; nothing is copied through the socket.  Over TCP, or with --inline,
 * the input is mapped and sent in the message and the output comes back in
 * the answer.  stdout is fed from a memfd (descriptor mode) or from the
 * answer, since the daemon cannot pwrite() into a pipe.
 *
 * A .npy input gives dtype and shape from its header, and the data offset; an
 * output named *.npy gets a header written after the daemon filled the data
 * behind a fixed-size header slot.
 *
 * Outputs never overwrite anything before a job succeeded: each is written
 * to a new temporary file in the target's directory (O_EXCL, never O_TRUNC
 * or O_APPEND) and renamed over the target only once the job and fzctl's own
 * writes are done; a failure removes the temporary file and leaves whatever
 * was at the output path as it was.  An output that is one of the inputs
 * (the same device and inode, through symlinks too) is refused before any
 * job runs.  A file that cannot be used fails alone: the rest of the batch
 * still runs, and every failure gets its own line.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fz.h"
#include "fzctl.h"

typedef struct sub_opts {
  bool decompress, verify, json, inline_data, force, quiet;
  const char *output;
  uint64_t jobs;
  const char *dtype;   /* canonical name, or NULL */
  unsigned ndims;
  uint64_t shape[FZ_CLIENT_MAX_DIMS];
  const char *pipeline;
  double eb;
  const char *eb_text; /* as given, for messages */
  bool have_eb;
  const char *mode;
  bool have_fill;
  double fill;         /* --fill: the data's fill value (netCDF _FillValue) */
} sub_opts;

typedef struct item {
  const char *in_path;   /* "-" is stdin */
  char *out_path;        /* "-" is stdout */
  int in_fd;
  dev_t in_dev;          /* the input's identity, to refuse it as an output */
  ino_t in_ino;
  uint64_t in_offset;
  uint64_t in_length;
  char dtype[8];
  unsigned ndims;
  uint64_t shape[FZ_CLIENT_MAX_DIMS];
  int out_fd;            /* the temporary file, stdout's memfd, or a stream */
  uint64_t out_offset;   /* CTL_NPY_HEADER_BYTES for a .npy output */
  bool out_npy;
  bool out_stream;       /* stdout or an existing non-regular file (a pipe,
                            /dev/null): written in order with write() */
  int stream_fd;         /* where a stream output finally goes */
  char *target;          /* the file a regular output replaces (a symlink's
                            target), and the temporary file beside it */
  char *tmp_path;
  void *map;             /* inline mode: the mapped input */
  size_t map_len;
  double t_submit;
  double time_ms;
  fz_result res;
  bool failed;
  bool server_said;      /* res.message is the server's (or the library's) */
  unsigned busy_retries;
} item;

/* A job the server refused with EBUSY (its queue was full) is sent again
 * after a pause that doubles from BUSY_PAUSE_NS to BUSY_PAUSE_MAX_NS, up
 * to this many times (about 19 s of pauses in all): busy is backpressure,
 * not failure, and a server with long jobs queued stays busy for a while. */
#define BUSY_RETRIES 100
#define BUSY_PAUSE_NS 20000000L
#define BUSY_PAUSE_MAX_NS 200000000L

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Marks an item failed with code and a message (kept for its report line);
 * returns exit_code. */
static int item_fail(item *it, int exit_code, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int item_fail(item *it, int exit_code, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(it->res.message, sizeof it->res.message, fmt, ap);
  va_end(ap);
  it->res.status = code;
  it->failed = true;
  return exit_code;
}

static int errno_code(int e) {
  return e == EACCES || e == EPERM ? FZ_EACCES : e == ENOMEM ? FZ_ENOMEM : FZ_EIO;
}

/* Copies fd 0 into a memfd so that it can be passed like a file.  Sealed
 * against shrinking once full, the memfd can be mapped by the daemon rather
 * than copied. */
static int stdin_to_memfd(void) {
  int fd = memfd_create("fzctl-stdin", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return -1;
  static char buf[1 << 20];
  for (;;) {
    ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
    if (n == 0) {
      if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) < 0) {
        close(fd);
        return -1;
      }
      return fd;
    }
    if (n < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(fd, buf + off, (size_t)(n - off));
      if (w < 0) {
        close(fd);
        return -1;
      }
      off += w;
    }
  }
  int e = errno;
  close(fd);
  errno = e;
  return -1;
}

/* Opens the input and works out what the job needs to know about it.
 * Returns CTL_OK, or CTL_USAGE with the item marked failed. */
static int prepare_input(item *it, const sub_opts *o) {
  it->in_fd = strcmp(it->in_path, "-") == 0 ? stdin_to_memfd()
                                            : open(it->in_path, O_RDONLY | O_CLOEXEC);
  if (it->in_fd < 0)
    return item_fail(it, CTL_USAGE, errno_code(errno), "cannot read '%s': %s",
                     it->in_path, strerror(errno));
  struct stat st;
  if (fstat(it->in_fd, &st) < 0 || !S_ISREG(st.st_mode))
    return item_fail(it, CTL_USAGE, FZ_EINVAL, "'%s' is not a regular file", it->in_path);
  it->in_dev = st.st_dev;
  it->in_ino = st.st_ino;
  uint64_t size = (uint64_t)st.st_size;
  if (o->decompress) {
    it->in_length = size;
    return CTL_OK;
  }
  char head[4096];
  ssize_t n = pread(it->in_fd, head, sizeof head, 0);
  bool npy_name = ends_with(it->in_path, ".npy") || ends_with(it->in_path, ".NPY");
  if (n > 0 && ctl_npy_is(head, (size_t)n)) {
    ctl_npy npy;
    char why[160];
    if (ctl_npy_parse(head, (size_t)n, &npy, why, sizeof why) < 0)
      return item_fail(it, CTL_USAGE, FZ_EINVAL, "'%s': %s", it->in_path, why);
    if ((o->dtype && strcmp(o->dtype, npy.dtype) != 0) ||
        (o->ndims && (o->ndims != npy.ndims ||
                      memcmp(o->shape, npy.shape, sizeof(uint64_t) * npy.ndims) != 0)))
      return item_fail(it, CTL_USAGE, FZ_EINVAL,
                       "'%s': --dtype/--shape disagree with its .npy header (%s, %u dimensions)",
                       it->in_path, npy.dtype, npy.ndims);
    memcpy(it->dtype, npy.dtype, sizeof it->dtype);
    it->ndims = npy.ndims;
    memcpy(it->shape, npy.shape, sizeof it->shape);
    it->in_offset = npy.data_offset;
  } else if (npy_name) {
    /* A file named .npy is read as one; compressing its bytes as raw data
     * would hide that it is not what its name says. */
    return item_fail(it, CTL_USAGE, FZ_EINVAL,
                     "'%s': bad .npy header (the file does not start with the .npy magic "
                     "\\x93NUMPY)", it->in_path);
  } else {
    if (!o->dtype)
      return item_fail(it, CTL_USAGE, FZ_EINVAL,
                       "'%s' needs --dtype (and --shape), or a .npy header", it->in_path);
    snprintf(it->dtype, sizeof it->dtype, "%s", o->dtype);
    if (o->ndims) {
      it->ndims = o->ndims;
      memcpy(it->shape, o->shape, sizeof it->shape);
    }
  }
  fz_dtype t;
  fz_dtype_parse(it->dtype, &t);
  uint64_t esize = fz_dtype_size(t);
  uint64_t payload = size >= it->in_offset ? size - it->in_offset : 0;
  if (it->ndims == 0) {
    /* Without a shape the file is one dimension of whole elements. */
    if (payload == 0 || payload % esize)
      return item_fail(it, CTL_USAGE, FZ_ESIZE,
                       "'%s' holds %" PRIu64 " bytes, not a whole number of %s elements",
                       it->in_path, payload, it->dtype);
    it->ndims = 1;
    it->shape[0] = payload / esize;
  }
  uint64_t need = esize;
  for (unsigned i = 0; i < it->ndims; i++) {
    if (it->shape[i] && need > UINT64_MAX / it->shape[i])
      return item_fail(it, CTL_USAGE, FZ_ESHAPE, "'%s': the shape is too large", it->in_path);
    need *= it->shape[i];
  }
  if (need != payload)
    return item_fail(it, CTL_USAGE, FZ_ESIZE,
                     "'%s' holds %" PRIu64 " bytes of data but %s of that shape needs %" PRIu64,
                     it->in_path, payload, it->dtype, need);
  it->in_length = payload;
  return CTL_OK;
}

/* Names the output and checks it against every input of the batch (items,
 * n of them), so that no job can write over a file some job reads.
 * Returns CTL_OK, or CTL_USAGE with the item marked failed. */
static int name_output(item *it, const sub_opts *o, const item *items, size_t n) {
  if (o->output) {
    it->out_path = strdup(o->output);
  } else if (strcmp(it->in_path, "-") == 0) {
    it->out_path = strdup("-");
  } else if (!o->decompress) {
    size_t len = strlen(it->in_path);
    it->out_path = malloc(len + 4);
    if (it->out_path)
      snprintf(it->out_path, len + 4, "%s.fz", it->in_path);
  } else {
    if (!ends_with(it->in_path, ".fz") || strlen(it->in_path) == 3)
      return item_fail(it, CTL_USAGE, FZ_EINVAL,
                       "cannot name the output of '%s': it does not end in .fz (use -o)",
                       it->in_path);
    it->out_path = strndup(it->in_path, strlen(it->in_path) - 3);
  }
  if (!it->out_path)
    return item_fail(it, CTL_USAGE, FZ_ENOMEM, "out of memory");
  it->out_npy = o->decompress && ends_with(it->out_path, ".npy");
  it->out_offset = it->out_npy ? CTL_NPY_HEADER_BYTES : 0;
  if (strcmp(it->out_path, "-") == 0) {
    it->out_stream = true;
    return CTL_OK;
  }
  struct stat st;
  if (stat(it->out_path, &st) == 0) {
    /* stat() follows symlinks: a link to an input is that input. */
    for (size_t i = 0; i < n; i++)
      if (items[i].in_fd >= 0 && items[i].in_dev == st.st_dev && items[i].in_ino == st.st_ino)
        return item_fail(it, CTL_USAGE, FZ_EINVAL,
                         "output '%s' is the input '%s' (the same file): writing it would "
                         "destroy the input; choose another output with -o",
                         it->out_path, items[i].in_path);
    if (!o->force)
      return item_fail(it, CTL_USAGE, FZ_EINVAL,
                       "'%s' exists (use -f to overwrite it, or -o to name another output)",
                       it->out_path);
    if (!S_ISREG(st.st_mode)) {
      /* A device or a pipe (-o /dev/null) is written in place, in order. */
      it->out_stream = true;
      return CTL_OK;
    }
  } else if (errno != ENOENT) {
    return item_fail(it, CTL_USAGE, errno_code(errno), "cannot use output '%s': %s",
                     it->out_path, strerror(errno));
  }
  /* A symlink at the output path is followed: the file it names is the one
   * replaced, as a plain write through the link would. */
  struct stat lst;
  char *real = NULL;
  if (lstat(it->out_path, &lst) == 0 && S_ISLNK(lst.st_mode))
    real = realpath(it->out_path, NULL);
  it->target = real ? real : strdup(it->out_path);
  char *dcopy = it->target ? strdup(it->target) : NULL;
  if (dcopy) {
    const char *d = dirname(dcopy);
    size_t len = strlen(d) + 32;
    it->tmp_path = malloc(len);
    if (it->tmp_path)
      snprintf(it->tmp_path, len, "%s/.fzctl-XXXXXX", d);
    free(dcopy);
  }
  if (!it->target || !it->tmp_path)
    return item_fail(it, CTL_USAGE, FZ_ENOMEM, "out of memory");
  return CTL_OK;
}

/* Opens the output just before the job leaves, so that a refused connection
 * leaves no files behind: a fresh temporary file beside the target (with the
 * mode a new file gets under the umask), stdout's memfd, or the stream. */
static int open_output(item *it, bool use_fds, mode_t new_mode) {
  if (it->out_fd >= 0)
    return 0; /* a job sent again after EBUSY */
  if (it->out_stream) {
    if (strcmp(it->out_path, "-") == 0) {
      it->stream_fd = STDOUT_FILENO;
    } else {
      it->stream_fd = open(it->out_path, O_WRONLY | O_CLOEXEC);
      if (it->stream_fd < 0)
        goto fail;
    }
    /* The daemon cannot pwrite() into a pipe: it fills a memfd. */
    it->out_fd = use_fds ? memfd_create("fzctl-stdout", MFD_CLOEXEC) : it->stream_fd;
  } else {
    it->out_fd = mkostemp(it->tmp_path, O_CLOEXEC);
    if (it->out_fd >= 0 && fchmod(it->out_fd, new_mode) < 0) {
      int e = errno;
      close(it->out_fd);
      unlink(it->tmp_path);
      it->out_fd = -1;
      errno = e;
    }
    if (it->out_fd < 0)
      it->tmp_path[0] = '\0'; /* nothing to remove */
  }
  if (it->out_fd < 0)
    goto fail;
  return 0;
fail:
  item_fail(it, CTL_USAGE, errno_code(errno), "cannot write '%s': %s", it->out_path,
            strerror(errno));
  return -1;
}

static int map_input(item *it) {
  if (it->in_length == 0 || it->map)
    return 0;
  it->map_len = (size_t)(it->in_offset + it->in_length);
  it->map = mmap(NULL, it->map_len, PROT_READ, MAP_PRIVATE, it->in_fd, 0);
  if (it->map == MAP_FAILED) {
    it->map = NULL;
    ctl_err("cannot map '%s': %s", it->in_path, strerror(errno));
    return -1;
  }
  return 0;
}

static int write_all(int fd, const void *p, size_t len, uint64_t off, bool positional) {
  const char *b = p;
  while (len > 0) {
    ssize_t n = positional ? pwrite(fd, b, len, (off_t)off) : write(fd, b, len);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    b += n;
    len -= (size_t)n;
    off += (uint64_t)n;
  }
  return 0;
}

/* Moves a job's output where it belongs once the daemon answered: the data
 * and the .npy header into the temporary file, which then replaces the
 * target, or everything in order into the stream.  Returns 0, or -1 with the
 * item marked failed. */
static int finish_output(item *it, bool use_fds) {
  fz_result *r = &it->res;
  char hdr[CTL_NPY_HEADER_BYTES];
  if (it->out_npy && ctl_npy_header(r->dtype, r->ndims, r->shape, hdr) < 0) {
    item_fail(it, CTL_SERVER, FZ_EINVAL, "'%s': cannot write a .npy header for dtype '%s'",
              it->out_path, r->dtype);
    return -1;
  }
  if (it->out_stream && !use_fds) {
    if ((it->out_npy && write_all(it->stream_fd, hdr, sizeof hdr, 0, false) < 0) ||
        write_all(it->stream_fd, r->data, r->data_len, 0, false) < 0)
      goto write_error;
    return 0;
  }
  if (!use_fds) {
    if (write_all(it->out_fd, r->data, r->data_len, it->out_offset, true) < 0 ||
        ftruncate(it->out_fd, (off_t)(it->out_offset + r->data_len)) < 0)
      goto write_error;
  }
  if (it->out_npy && write_all(it->out_fd, hdr, sizeof hdr, 0, true) < 0)
    goto write_error;
  if (it->out_stream) {
    /* The daemon wrote into a memfd; now it goes down the stream. */
    uint64_t left = it->out_offset + r->bytes_out;
    off_t off = 0;
    static char buf[1 << 20];
    while (left > 0) {
      ssize_t n = pread(it->out_fd, buf, left < sizeof buf ? left : sizeof buf, off);
      if (n <= 0 || write_all(it->stream_fd, buf, (size_t)n, 0, false) < 0)
        goto write_error;
      off += n;
      left -= (uint64_t)n;
    }
    return 0;
  }
  if (rename(it->tmp_path, it->target) < 0)
    goto write_error;
  it->tmp_path[0] = '\0'; /* it is the target now */
  return 0;
write_error:
  item_fail(it, CTL_SERVER, errno_code(errno), "cannot write '%s': %s", it->out_path,
            strerror(errno));
  return -1;
}

/* The pointwise relative bound of a chain that quantizes in PWREL, from the
 * server's canonical chain text; false for any other chain. */
static bool pwrel_bound(const char *chain, double *eb) {
  const char *q = strstr(chain, "quant(");
  if (!q || !strstr(q, "mode=pwrel"))
    return false;
  const char *e = strstr(q, "eb=");
  *eb = e ? strtod(e + 3, NULL) : 0;
  return true;
}

/* One line per file: the error on stderr for a failure, and with --json one
 * object on the report stream for every file, failed or not. */
static void report(FILE *f, const item *it, const sub_opts *o) {
  const fz_result *r = &it->res;
  if (it->failed) {
    if (it->server_said)
      ctl_err("'%s': %s (%s)", it->in_path, r->message, fz_err_name(r->status));
    else
      ctl_err("%s", r->message);
    /* The error line is the whole text report of a failed file: it has no
     * output and no byte counts to show.  JSON gets its object below. */
    if (!o->json)
      return;
  }
  if (o->json) {
    fprintf(f, "{\"file\":");
    ctl_json_str(f, it->in_path);
    fprintf(f, ",\"output\":");
    if (it->out_path)
      ctl_json_str(f, it->out_path);
    else
      fprintf(f, "null");
    fprintf(f, ",\"op\":\"%s\"", o->decompress ? "decompress" : "compress");
    if (it->failed) {
      fprintf(f, ",\"error\":{\"code\":%d,\"name\":\"%s\",\"message\":", r->status,
              fz_err_name(r->status));
      ctl_json_str(f, r->message);
      fprintf(f, "}}\n");
      return;
    }
    double ratio = o->decompress ? (r->bytes_in ? (double)r->bytes_out / (double)r->bytes_in : 0)
                                 : r->ratio;
    fprintf(f, ",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64 ",\"ratio\":%.17g",
            r->bytes_in, r->bytes_out, ratio);
    if (r->has_max_error)
      fprintf(f, ",\"max_error\":%.17g", r->max_error);
    else
      fprintf(f, ",\"max_error\":null");
    if (r->has_max_rel_error)
      fprintf(f, ",\"max_rel_error\":%.17g", r->max_rel_error);
    else
      fprintf(f, ",\"max_rel_error\":null");
    fprintf(f, ",\"time_ms\":%.3f,\"server_time_ms\":%.3f}\n", it->time_ms,
            (double)r->time_us / 1000.0);
    return;
  }
  if (o->quiet)
    return;
  fprintf(f, "%s -> %s: %" PRIu64 " -> %" PRIu64 " bytes", it->in_path, it->out_path,
          r->bytes_in, r->bytes_out);
  if (!o->decompress)
    fprintf(f, ", ratio %.2f", r->ratio);
  double pw_eb;
  if (r->has_max_error && r->has_max_rel_error && pwrel_bound(r->chain, &pw_eb))
    /* A pointwise bound is judged by the pointwise error, never by the
     * absolute one (which can be far above the bound and still fine). */
    fprintf(f, ", max rel error %.3g (bound %.3g pointwise)", r->max_rel_error, pw_eb);
  else if (r->has_max_error)
    fprintf(f, ", max error %.3g (bound %.3g)", r->max_error, r->eb_abs);
  fprintf(f, ", %.1f ms\n", it->time_ms);
}

/* Judges the pipeline and the bound with the engine fzd runs, before any
 * file is touched, so that a misspelt preset, a malformed chain or a missing
 * bound is a usage error quoting the value rather than one failed job per
 * file.  What depends on the data (the value range of REL) or on a file's
 * dtype is left to the server.  Returns -1 to go on, else CTL_USAGE. */
static int check_pipeline(const sub_opts *o) {
  const char *p = o->pipeline ? o->pipeline : "balanced";
  fz_params prm;
  fz_params_init(&prm);
  fz_dtype_parse(o->dtype ? o->dtype : "f32", &prm.dtype);
  prm.ndims = 1;
  prm.dims[0] = 1;
  prm.pipeline = p;
  prm.eb = o->eb;
  fz_eb_mode m = FZ_EB_REL;
  if (o->mode)
    fz_eb_mode_parse(o->mode, &m);
  prm.eb_mode = m;
  fz_plan *plan = NULL;
  char why[256] = "";
  int rc = fz_plan_create(&prm, &plan, why, sizeof why);
  fz_plan_destroy(plan);
  if (rc >= 0)
    return -1;
  if (rc == FZ_EPIPELINE) {
    /* A bare word that is no stage was meant as a preset. */
    char unknown[300];
    snprintf(unknown, sizeof unknown, "unknown stage '%s'", p);
    if (strncmp(why, unknown, strlen(unknown)) == 0) {
      char names[160] = "";
      size_t np;
      const fz_preset *pr = fz_presets(&np);
      for (size_t i = 0; i < np; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                 i ? ", " : "", pr[i].name);
      return ctl_usage_error("submit",
                             "unknown preset '%s' for --pipeline (presets: %s; or a chain "
                             "of stages such as 'quant | diff | bitshuffle | rze')",
                             p, names);
    }
    return ctl_usage_error("submit", "invalid pipeline '%s': %s", p, why);
  }
  if (rc == FZ_EBOUND) {
    if (!o->have_eb)
      return ctl_usage_error("submit", "pipeline '%s' is lossy and needs --eb (%s)", p, why);
    return ctl_usage_error("submit", "invalid value '%s' for --eb with pipeline '%s': %s",
                           o->eb_text, p, why);
  }
  return -1;
}

static int parse_submit(int argc, char **argv, sub_opts *o) {
  static const struct option opts[] = {
    {"decompress", no_argument, NULL, 'd'},
    {"output", required_argument, NULL, 'o'},
    {"jobs", required_argument, NULL, 'j'},
    {"dtype", required_argument, NULL, 't'},
    {"shape", required_argument, NULL, 's'},
    {"pipeline", required_argument, NULL, 'p'},
    {"eb", required_argument, NULL, 'e'},
    {"mode", required_argument, NULL, 'm'},
    {"fill", required_argument, NULL, 'F'},
    {"verify", no_argument, NULL, 'V'},
    {"json", no_argument, NULL, 'J'},
    {"inline", no_argument, NULL, 'I'},
    {"force", no_argument, NULL, 'f'},
    {"quiet", no_argument, NULL, 'q'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
  };
  memset(o, 0, sizeof *o);
  o->jobs = 4;
  int c;
  fz_dtype t;
  fz_eb_mode m;
  while ((c = getopt_long(argc, argv, ":do:j:t:s:p:e:m:fqh", opts, NULL)) != -1) {
    switch (c) {
    case 'd': o->decompress = true; break;
    case 'o': o->output = optarg; break;
    case 'j':
      if (!ctl_parse_u64("--jobs", optarg, 1, 256, &o->jobs))
        return CTL_USAGE;
      break;
    case 't':
      if (fz_dtype_parse(optarg, &t) < 0)
        return ctl_usage_error("submit", "invalid dtype '%s' (f32 f64 u8 i8 u16 i16 u32 i32 u64 i64)", optarg);
      o->dtype = fz_dtype_name(t);
      break;
    case 's':
      if (!ctl_parse_shape(optarg, &o->ndims, o->shape))
        return CTL_USAGE;
      break;
    case 'p':
      if (!*optarg)
        return ctl_usage_error("submit", "invalid pipeline '' for --pipeline");
      o->pipeline = optarg;
      break;
    case 'e':
      if (!ctl_parse_double("--eb", optarg, &o->eb))
        return CTL_USAGE;
      o->eb_text = optarg;
      o->have_eb = true;
      break;
    case 'm':
      if (fz_eb_mode_parse(optarg, &m) < 0)
        return ctl_usage_error("submit", "invalid mode '%s' (abs, rel or pwrel)", optarg);
      o->mode = fz_eb_mode_name(m);
      break;
    case 'F': {
      /* Any finite number, negative ones included (-1e10, -9999). */
      char *end;
      errno = 0;
      o->fill = strtod(optarg, &end);
      if (!*optarg || *end || !isfinite(o->fill) || (errno == ERANGE && o->fill == 0))
        return ctl_usage_error("submit", "invalid value '%s' for --fill (expected a finite "
                                         "number such as -1e10)", optarg);
      o->have_fill = true;
      break;
    }
    case 'V': o->verify = true; break;
    case 'J': o->json = true; break;
    case 'I': o->inline_data = true; break;
    case 'f': o->force = true; break;
    case 'q': o->quiet = true; break;
    case 'h':
      ctl_print_usage(stdout, ctl_find_command("submit"));
      return CTL_OK;
    case ':':
      return ctl_usage_error("submit", "option '%s' needs a value", argv[optind - 1]);
    default:
      return ctl_usage_error("submit", "unknown option '%s' for submit", argv[optind - 1]);
    }
  }
  int nfiles = argc - optind;
  if (nfiles < 1)
    return ctl_usage_error("submit", "submit needs at least one FILE ('-' for stdin)");
  if (o->output && nfiles > 1)
    return ctl_usage_error("submit", "-o '%s' names one output but %d files are given",
                           o->output, nfiles);
  int stdin_uses = 0;
  for (int i = optind; i < argc; i++)
    stdin_uses += strcmp(argv[i], "-") == 0;
  if (stdin_uses > 1)
    return ctl_usage_error("submit", "'-' (stdin) is given %d times", stdin_uses);
  if (o->decompress && (o->dtype || o->ndims || o->pipeline || o->have_eb || o->mode ||
                       o->have_fill))
    return ctl_usage_error("submit", "-d takes no --dtype, --shape, --pipeline, --eb, "
                                     "--mode or --fill: archives describe themselves");
  if (o->ndims && !o->dtype)
    return ctl_usage_error("submit", "--shape needs --dtype");
  if (!o->decompress)
    return check_pipeline(o);
  return -1;
}

/* The exit code of the batch: 0, 1 for a usage error found before any file
 * ran, 2 when any file failed, whether fzctl refused it or its job failed. */
static void worse(int *exit_code, int code) {
  if (code > *exit_code)
    *exit_code = code;
}

int ctl_cmd_submit(const ctl_global *g, int argc, char **argv) {
  sub_opts o;
  int rc = parse_submit(argc, argv, &o);
  if (rc >= 0)
    return rc;
  size_t n = (size_t)(argc - optind);
  item *items = calloc(n, sizeof *items);
  if (!items) {
    ctl_err("out of memory");
    return CTL_SERVER;
  }
  /* A new file gets 0666 less the umask, as with any program's open(). */
  mode_t mask = umask(0);
  umask(mask);
  mode_t new_mode = 0666 & ~mask;
  int exit_code = CTL_OK;
  bool any_stdout = false;
  uint64_t total_bytes = 0;
  size_t nready = 0;
  for (size_t i = 0; i < n; i++) {
    item *it = &items[i];
    it->in_path = argv[optind + (int)i];
    it->in_fd = -1;
    it->out_fd = -1;
    it->stream_fd = -1;
  }
  /* Every input is opened first, so that each output can be checked
   * against all of them. */
  for (size_t i = 0; i < n; i++)
    prepare_input(&items[i], &o);
  for (size_t i = 0; i < n; i++) {
    item *it = &items[i];
    if (!it->failed)
      name_output(it, &o, items, n);
    any_stdout |= it->out_path && strcmp(it->out_path, "-") == 0;
  }
  /* With data on stdout, the report lines must not mix into it. */
  FILE *rep = any_stdout ? stderr : stdout;
  for (size_t i = 0; i < n; i++) {
    item *it = &items[i];
    if (it->failed) {
      report(rep, it, &o);
      worse(&exit_code, CTL_SERVER);
    } else {
      nready++;
      total_bytes += it->in_length;
    }
  }
  fz_client *c = NULL;
  if (nready == 0)
    goto done;
  if ((rc = ctl_connect(g, &c)) != CTL_OK) {
    worse(&exit_code, rc);
    goto done;
  }

  fz_server_info info;
  fz_client_info(c, &info);
  bool use_fds = info.transport == FZ_TRANSPORT_UNIX && !o.inline_data;
  ctl_progress prog;
  ctl_progress_start(&prog, !o.quiet, nready, total_bytes);
  ctl_progress_draw(&prog);
  size_t next = 0, done_count = n - nready;
  item **again = calloc(n, sizeof *again); /* refused busy, to send again */
  size_t nagain = 0;
  if (!again) {
    ctl_err("out of memory");
    worse(&exit_code, CTL_SERVER);
    done_count = n;
  }
  while (done_count < n) {
    while ((nagain > 0 || next < n) && fz_client_pending(c) < o.jobs) {
      item *it = nagain > 0 ? again[--nagain] : &items[next++];
      if (it->failed)
        continue; /* reported already */
      fz_job job;
      fz_job_init(&job);
      if (!o.decompress) {
        job.dtype = it->dtype;
        job.ndims = it->ndims;
        memcpy(job.shape, it->shape, sizeof job.shape);
        job.pipeline = o.pipeline;
        job.eb = o.eb;
        job.mode = o.mode;
        job.verify = o.verify;
        job.has_fill = o.have_fill;
        job.fill_value = o.fill;
      }
      if (open_output(it, use_fds, new_mode) < 0 ||
          (!use_fds && map_input(it) < 0)) {
        ctl_progress_clear(&prog);
        report(rep, it, &o);
        worse(&exit_code, CTL_SERVER);
        done_count++;
        continue;
      }
      if (use_fds) {
        job.in_fd = it->in_fd;
        job.in_offset = it->in_offset;
        job.in_length = it->in_length;
        job.out_fd = it->out_fd;
        job.out_offset = it->out_offset;
      } else {
        job.in = it->map ? (const char *)it->map + it->in_offset : "";
        job.in_len = (size_t)it->in_length;
      }
      if (it->busy_retries == 0)
        it->t_submit = ctl_now_s(); /* time_ms counts the retries too */
      rc = fz_client_submit(c, o.decompress ? FZ_OP_DECOMPRESS : FZ_OP_COMPRESS, &job,
                            NULL, it, NULL);
      if (rc < 0) {
        item_fail(it, CTL_SERVER, rc, "%s", fz_client_errmsg(c));
        it->server_said = true;
        ctl_progress_clear(&prog);
        report(rep, it, &o);
        worse(&exit_code, CTL_SERVER);
        done_count++;
      }
    }
    if (fz_client_pending(c) == 0)
      continue;
    fz_completion comp;
    rc = fz_client_wait(c, prog.on ? 250 : -1, &comp);
    if (rc == 0) {
      ctl_progress_draw(&prog);
      continue;
    }
    item *it = comp.user;
    if (comp.result.status == FZ_EBUSY && it->busy_retries < BUSY_RETRIES) {
      long ns = BUSY_PAUSE_NS << (it->busy_retries < 4 ? it->busy_retries : 4);
      it->busy_retries++;
      again[nagain++] = it;
      struct timespec pause = {.tv_sec = 0,
                               .tv_nsec = ns < BUSY_PAUSE_MAX_NS ? ns : BUSY_PAUSE_MAX_NS};
      nanosleep(&pause, NULL);
      continue;
    }
    it->res = comp.result;
    it->time_ms = (ctl_now_s() - it->t_submit) * 1e3;
    done_count++;
    ctl_progress_clear(&prog);
    if (it->res.status < 0) {
      it->failed = true;
      it->server_said = true;
    } else {
      finish_output(it, use_fds);
    }
    if (it->failed)
      worse(&exit_code, CTL_SERVER);
    report(rep, it, &o);
    fz_client_free(it->res.data);
    it->res.data = NULL;
    prog.files_done++;
    prog.bytes_done += it->in_length;
    ctl_progress_draw(&prog);
  }
  ctl_progress_clear(&prog);
  free(again);
  fz_client_close(c);

done:
  for (size_t i = 0; i < n; i++) {
    item *it = &items[i];
    if (it->map)
      munmap(it->map, it->map_len);
    if (it->in_fd >= 0)
      close(it->in_fd);
    if (it->out_fd >= 0 && it->out_fd != it->stream_fd)
      close(it->out_fd);
    if (it->stream_fd >= 0 && it->stream_fd != STDOUT_FILENO)
      close(it->stream_fd);
    /* A temporary file still here belongs to a job that did not succeed:
     * the target was never touched. */
    if (it->tmp_path && it->tmp_path[0] && it->out_fd >= 0)
      unlink(it->tmp_path);
    free(it->out_path);
    free(it->target);
    free(it->tmp_path);
  }
  free(items);
  fflush(stdout);
  return exit_code;
}
