/*
 * frames.c - `fzctl frames`: the frames of an HDF5 detector dataset (HDF5
 * filter 32008, bitshuffle with LZ4 or zstd, one frame a chunk) decoded by
 * fzd into the pixels above a cut, written to an HDF5 file h5py opens
 * (docs/frames.md gives the layout).
 *
 * The dataset is read with the HDF5 library for its description only: its
 * type, shape, chunking, filter parameters and chunk table.  On the Unix
 * socket the daemon gets the file itself as a descriptor with the chunks'
 * offsets and lengths, and no chunk byte crosses the socket.  A frame whose
 * chunk is not a plain bitshuffle chunk (a chunk the filter skipped, a chunk
 * never written), and every frame over TCP or with --inline, goes inline
 * instead: a stored chunk as H5Dread_chunk gives it, the others read by
 * H5Dread (the fill value, or the pixels stored as they are) and encoded
 * here as the filter would.  A frame the daemon fails (a corrupt chunk) is
 * reported by number and left empty in the output; the others are written.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#ifdef FZCTL_HAVE_BSLZ4
#include "fz_frames.h"
#endif
#include "fz.h"
#include "fzctl.h"

#define BITSHUFFLE_FILTER 32008
#define MAX_BATCH 4096

typedef struct fr_opts {
  const char *in_spec;
  const char *out_path;
  const char *mask_spec;
  double cut;
  uint64_t top_n;
  uint64_t batch;
  uint64_t start, stop;
  bool have_range, have_cut, dense, force, quiet, inline_data;
} fr_opts;

/* The source dataset and what its description says. */
typedef struct fr_source {
  char *path;       /* the file */
  const char *name; /* the dataset's path inside it */
  hid_t file, dset;
  hid_t type;    /* the pixels in memory and in the output: little-endian */
  char dtype[8]; /* "u16", ... */
  size_t esize;
  uint64_t nframes, rows, cols, npix;
  const char *codec; /* "lz4" or "zstd" */
  int codec_id;      /* the filter's cd_values[4] */
  unsigned block;    /* cd_values[3]: elements a block, 0 = the filter's default */
  haddr_t base;      /* the file's base address (its user block) */
  int fd;
} fr_source;

/* The output file and its datasets. */
typedef struct fr_sink {
  hid_t file, group;
  hid_t ptr, index, values, count, status, data;
  uint64_t listed; /* entries in index and values so far */
} fr_sink;

static int frames_usage(const char *fmt, const char *a, const char *b) {
  return ctl_usage_error("frames", fmt, a, b);
}

/* --frames START:STOP, either side may be left out. */
static bool parse_range(const char *text, fr_opts *o) {
  const char *colon = strchr(text, ':');
  if (!colon)
    goto bad;
  char head[32];
  size_t hl = (size_t)(colon - text);
  if (hl >= sizeof head)
    goto bad;
  memcpy(head, text, hl);
  head[hl] = '\0';
  o->start = 0, o->stop = UINT64_MAX;
  if (hl && !ctl_parse_u64("--frames", head, 0, UINT64_MAX - 1, &o->start))
    return false;
  if (colon[1] && !ctl_parse_u64("--frames", colon + 1, 1, UINT64_MAX, &o->stop))
    return false;
  if (o->stop <= o->start)
    goto bad;
  o->have_range = true;
  return true;
bad:
  ctl_err("invalid value '%s' for --frames (expected START:STOP with START < STOP, such as "
          "0:100, 10: or :50)",
          text);
  return false;
}

static int parse_frames(int argc, char **argv, fr_opts *o) {
  static const struct option opts[] = {
      {"cut", required_argument, NULL, 'c'},
      {"top", required_argument, NULL, 'n'},
      {"mask", required_argument, NULL, 'M'},
      {"frames", required_argument, NULL, 'r'},
      {"batch", required_argument, NULL, 'b'},
      {"dense", no_argument, NULL, 'D'},
      {"inline", no_argument, NULL, 'I'},
      {"force", no_argument, NULL, 'f'},
      {"quiet", no_argument, NULL, 'q'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  memset(o, 0, sizeof *o);
  o->batch = 64;
  o->stop = UINT64_MAX;
  int c;
  while ((c = getopt_long(argc, argv, ":c:n:M:r:b:fqh", opts, NULL)) != -1) {
    switch (c) {
    case 'c': {
      /* Any number a pixel can be compared with, negative ones and the
       * infinities included; NaN lists nothing and is refused. */
      char *end;
      errno = 0;
      o->cut = strtod(optarg, &end);
      if (!*optarg || *end || isnan(o->cut) || (errno == ERANGE && o->cut == 0))
        return frames_usage("invalid value '%s' for --cut (expected a number such as 10%s)", optarg,
                            "");
      o->have_cut = true;
      break;
    }
    case 'n':
      if (!ctl_parse_u64("--top", optarg, 1, UINT32_MAX, &o->top_n))
        return CTL_USAGE;
      break;
    case 'M':
      if (!*optarg)
        return frames_usage("invalid value '%s' for --mask%s", optarg, "");
      o->mask_spec = optarg;
      break;
    case 'r':
      if (!parse_range(optarg, o))
        return CTL_USAGE;
      break;
    case 'b':
      if (!ctl_parse_u64("--batch", optarg, 1, MAX_BATCH, &o->batch))
        return CTL_USAGE;
      break;
    case 'D': o->dense = true; break;
    case 'I': o->inline_data = true; break;
    case 'f': o->force = true; break;
    case 'q': o->quiet = true; break;
    case 'h': ctl_print_usage(stdout, ctl_find_command("frames")); return CTL_OK;
    case ':': return frames_usage("option '%s' needs a value%s", argv[optind - 1], "");
    default: return frames_usage("unknown option '%s' for frames%s", argv[optind - 1], "");
    }
  }
  if (argc - optind != 2)
    return frames_usage("frames needs FILE.h5:/DATASET and OUT.h5%s%s", "", "");
  o->in_spec = argv[optind];
  o->out_path = argv[optind + 1];
  if (o->dense && (o->have_cut || o->top_n || o->mask_spec))
    return frames_usage("--dense writes whole frames: it takes no --cut, --top or --mask%s%s", "",
                        "");
  return -1;
}

/* FILE.h5:/DATASET: the first ":/" whose left side is a file, so that a
 * file name with ":/" in it (a folder "a:") still works. */
static int split_spec(const char *spec, char **path, const char **name) {
  const char *last = NULL;
  for (const char *p = strstr(spec, ":/"); p; p = strstr(p + 1, ":/")) {
    char *head = strndup(spec, (size_t)(p - spec));
    if (!head)
      return CTL_SERVER;
    struct stat st;
    if (stat(head, &st) == 0 && S_ISREG(st.st_mode)) {
      *path = head, *name = p + 1;
      return CTL_OK;
    }
    free(head);
    last = p;
  }
  if (!last)
    return frames_usage("'%s' names no dataset (expected FILE.h5:/path/to/dataset, such as "
                        "data.h5:/entry/data/data)%s",
                        spec, "");
  char *head = strndup(spec, (size_t)(last - spec));
  ctl_err("cannot open '%s': %s", head ? head : spec, strerror(ENOENT));
  free(head);
  return CTL_SERVER;
}

static void source_close(fr_source *s) {
  if (s->fd >= 0)
    close(s->fd);
  if (s->type > 0)
    H5Tclose(s->type);
  if (s->dset > 0)
    H5Dclose(s->dset);
  if (s->file > 0)
    H5Fclose(s->file);
  free(s->path);
}

/* The dtype of an HDF5 type the daemon decodes: little-endian integers and
 * IEEE floats of 1 to 8 bytes.  Sets s->type (little-endian, for memory
 * and for the output) and returns true. */
static bool dtype_of(hid_t t, fr_source *s) {
  H5T_class_t cls = H5Tget_class(t);
  size_t n = H5Tget_size(t);
  if ((cls != H5T_INTEGER && cls != H5T_FLOAT) || (n != 1 && n != 2 && n != 4 && n != 8))
    return false;
  if (n > 1 && H5Tget_order(t) != H5T_ORDER_LE)
    return false;
  hid_t le;
  char kind;
  if (cls == H5T_FLOAT) {
    if (n < 4 || H5Tequal(t, n == 4 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE) <= 0)
      return false;
    kind = 'f', le = n == 4 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE;
  } else {
    /* The H5T_STD_ names are calls (the library opens them), not constants. */
    bool u = H5Tget_sign(t) == H5T_SGN_NONE;
    kind = u ? 'u' : 'i';
    le = n == 1   ? (u ? H5T_STD_U8LE : H5T_STD_I8LE)
         : n == 2 ? (u ? H5T_STD_U16LE : H5T_STD_I16LE)
         : n == 4 ? (u ? H5T_STD_U32LE : H5T_STD_I32LE)
                  : (u ? H5T_STD_U64LE : H5T_STD_I64LE);
  }
  s->type = H5Tcopy(le);
  s->esize = n;
  snprintf(s->dtype, sizeof s->dtype, "%c%zu", kind, n * 8);
  return s->type >= 0;
}

/* Opens the dataset and checks it is what the frames method decodes.
 * Returns CTL_OK or CTL_SERVER (2, a refused file) after saying why. */
static int source_open(fr_source *s, const char *spec) {
  int rc = split_spec(spec, &s->path, &s->name);
  if (rc != CTL_OK)
    return rc;
  s->file = H5Fopen(s->path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (s->file < 0) {
    ctl_err("'%s' is not an HDF5 file HDF5 can open", s->path);
    return CTL_SERVER;
  }
  /* H5Lexists fails on a path whose groups are missing too: both are "no
   * such object". */
  if (H5Lexists(s->file, s->name, H5P_DEFAULT) <= 0) {
    ctl_err("'%s' has no dataset '%s'", s->path, s->name);
    return CTL_SERVER;
  }
  s->dset = H5Dopen2(s->file, s->name, H5P_DEFAULT);
  if (s->dset < 0) {
    ctl_err("'%s:%s' is not a dataset", s->path, s->name);
    return CTL_SERVER;
  }
  hid_t space = H5Dget_space(s->dset), ftype = H5Dget_type(s->dset);
  hid_t dcpl = H5Dget_create_plist(s->dset), fcpl = H5Fget_create_plist(s->file);
  hsize_t dims[3] = {0, 0, 0}, chunk[3] = {0, 0, 0};
  int rank = H5Sget_simple_extent_ndims(space);
  rc = CTL_SERVER;
  if (rank != 3) {
    ctl_err("%s: a frames dataset has 3 dimensions (frames, rows, columns), this one %d", spec,
            rank);
    goto done;
  }
  H5Sget_simple_extent_dims(space, dims, NULL);
  if (!dtype_of(ftype, s)) {
    ctl_err("%s: its pixels are not little-endian integers or IEEE floats of 1, 2, 4 or 8 "
            "bytes, which fzd decodes",
            spec);
    goto done;
  }
  if (H5Pget_layout(dcpl) != H5D_CHUNKED || H5Pget_chunk(dcpl, 3, chunk) != 3 || chunk[0] != 1 ||
      chunk[1] != dims[1] || chunk[2] != dims[2]) {
    ctl_err("%s: a frames dataset is chunked one frame a chunk, (1, %llu, %llu); this one is "
            "not",
            spec, (unsigned long long)dims[1], (unsigned long long)dims[2]);
    goto done;
  }
  unsigned flags = 0, cd[16] = {0}, config = 0;
  size_t ncd = 16;
  char fname[64] = "";
  int nf = H5Pget_nfilters(dcpl);
  H5Z_filter_t id =
      nf == 1 ? H5Pget_filter2(dcpl, 0, &flags, &ncd, cd, sizeof fname, fname, &config) : -1;
  if (id != BITSHUFFLE_FILTER) {
    ctl_err("%s: its chunks are not bitshuffle chunks: a frames dataset has the bitshuffle "
            "filter (%d) alone, this one has %d filter%s%s%s",
            spec, BITSHUFFLE_FILTER, nf, nf == 1 ? " (" : "s", nf == 1 ? fname : "",
            nf == 1 ? ")" : "");
    goto done;
  }
  /* The filter's parameters: version (2), element size, block size in
   * elements (0: the default), compression (0 none, 2 LZ4, 3 zstd). */
  if (ncd < 5 || (cd[4] != 2 && cd[4] != 3)) {
    ctl_err("%s: the bitshuffle filter stores its chunks %s, and fzd decodes LZ4 (2) or "
            "zstd (3) chunks",
            spec, ncd < 5 || cd[4] == 0 ? "uncompressed" : "with an unknown compression");
    goto done;
  }
  if (ncd > 2 && cd[2] != 0 && cd[2] != s->esize) {
    ctl_err("%s: the filter's element size is %u bytes, the dataset's %zu", spec, cd[2], s->esize);
    goto done;
  }
  s->codec_id = (int)cd[4];
  s->codec = cd[4] == 2 ? "lz4" : "zstd";
  s->block = cd[3];
  s->nframes = dims[0], s->rows = dims[1], s->cols = dims[2];
  s->npix = dims[1] * dims[2];
  if (s->npix == 0 || s->npix > UINT32_MAX) {
    ctl_err("%s: frames of %llu pixels; fzd takes 1 to 2^32 - 1", spec,
            (unsigned long long)s->npix);
    goto done;
  }
  /* Chunk addresses are relative to the file's base address, which a user
   * block moves. */
  hsize_t ub = 0;
  H5Pget_userblock(fcpl, &ub);
  s->base = ub;
  rc = CTL_OK;
done:
  H5Sclose(space), H5Tclose(ftype), H5Pclose(dcpl), H5Pclose(fcpl);
  return rc;
}

/* ---- the mask ---------------------------------------------------------------- */

/* A mask from an HDF5 dataset (FILE.h5:/path) of rows x columns (or as
 * many pixels) integers or bools, nonzero = the pixel is used. */
static int mask_from_h5(const fr_source *s, const char *spec, uint8_t *mask) {
  char *path = NULL;
  const char *name;
  int rc = split_spec(spec, &path, &name);
  if (rc != CTL_OK)
    return rc;
  rc = CTL_SERVER;
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), d = -1, t = -1, sp = -1, mt = -1;
  if (f < 0) {
    ctl_err("--mask: '%s' is not an HDF5 file HDF5 can open", path);
    goto out;
  }
  if (H5Lexists(f, name, H5P_DEFAULT) <= 0 || (d = H5Dopen2(f, name, H5P_DEFAULT)) < 0) {
    ctl_err("--mask: '%s' has no dataset '%s'", path, name);
    goto out;
  }
  t = H5Dget_type(d), sp = H5Dget_space(d);
  H5T_class_t cls = H5Tget_class(t);
  hssize_t n = H5Sget_simple_extent_npoints(sp);
  if ((cls != H5T_INTEGER && cls != H5T_ENUM) || n < 0 || (uint64_t)n != s->npix) {
    ctl_err("--mask: '%s' is not %llu x %llu integers (one a pixel, nonzero = used)", spec,
            (unsigned long long)s->rows, (unsigned long long)s->cols);
    goto out;
  }
  /* Integers are read as int64 (a negative value stays nonzero), h5py's
   * bools (an enum of int8) as their own bytes. */
  size_t w = cls == H5T_ENUM ? H5Tget_size(t) : 8;
  mt = cls == H5T_ENUM ? H5Tget_native_type(t, H5T_DIR_ASCEND) : H5Tcopy(H5T_NATIVE_INT64);
  uint8_t *buf = malloc(s->npix * w);
  if (!buf || H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
    ctl_err("--mask: cannot read '%s'", spec);
    free(buf);
    goto out;
  }
  for (uint64_t i = 0; i < s->npix; i++) {
    uint8_t any = 0;
    for (size_t k = 0; k < w; k++)
      any |= buf[i * w + k];
    mask[i] = any != 0;
  }
  free(buf);
  rc = CTL_OK;
out:
  if (mt >= 0)
    H5Tclose(mt);
  if (sp >= 0)
    H5Sclose(sp);
  if (t >= 0)
    H5Tclose(t);
  if (d >= 0)
    H5Dclose(d);
  if (f >= 0)
    H5Fclose(f);
  free(path);
  return rc;
}

/* A mask from a .npy file of integers, rows x columns or as many pixels. */
static int mask_from_npy(const fr_source *s, const char *path, uint8_t *mask) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    ctl_err("--mask: cannot open '%s': %s", path, strerror(errno));
    return CTL_SERVER;
  }
  char head[4096], why[256];
  size_t got = fread(head, 1, sizeof head, f);
  ctl_npy npy;
  int rc = CTL_SERVER;
  uint8_t *buf = NULL;
  /* numpy's bools are bytes of 0 and 1: read as u8, which the header
   * parser (made for arrays fzd compresses) knows. */
  char *b1 = memmem(head, got < 256 ? got : 256, "'|b1'", 5);
  if (b1)
    memcpy(b1, "'|u1'", 5);
  if (ctl_npy_parse(head, got, &npy, why, sizeof why) < 0) {
    ctl_err("--mask: '%s': %s", path, why);
    goto out;
  }
  uint64_t n = 1;
  for (unsigned i = 0; i < npy.ndims; i++)
    n *= npy.shape[i];
  size_t w = (size_t)atoi(npy.dtype + 1) / 8;
  if (npy.dtype[0] == 'f' || n != s->npix) {
    ctl_err("--mask: '%s' is not %llu x %llu integers (one a pixel, nonzero = used)", path,
            (unsigned long long)s->rows, (unsigned long long)s->cols);
    goto out;
  }
  buf = malloc(n * w);
  if (!buf || fseeko(f, (off_t)npy.data_offset, SEEK_SET) != 0 || fread(buf, w, n, f) != n) {
    ctl_err("--mask: '%s' is shorter than its header says", path);
    goto out;
  }
  for (uint64_t i = 0; i < n; i++) {
    uint8_t any = 0;
    for (size_t k = 0; k < w; k++)
      any |= buf[i * w + k];
    mask[i] = any != 0;
  }
  rc = CTL_OK;
out:
  free(buf);
  fclose(f);
  return rc;
}

static int mask_load(const fr_source *s, const char *spec, uint8_t *mask) {
  size_t n = strlen(spec);
  if (n > 4 && strcmp(spec + n - 4, ".npy") == 0)
    return mask_from_npy(s, spec, mask);
  if (strstr(spec, ":/"))
    return mask_from_h5(s, spec, mask);
  return frames_usage("invalid value '%s' for --mask (expected FILE.npy or FILE.h5:/DATASET)%s",
                      spec, "");
}

/* ---- the output ---------------------------------------------------------------- */

static void attr_str(hid_t obj, const char *name, const char *value) {
  hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  hid_t a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, t, &value);
  H5Aclose(a), H5Sclose(sp), H5Tclose(t);
}

static void attr_num(hid_t obj, const char *name, hid_t type, size_t n, const void *v) {
  hsize_t dim = n;
  hid_t sp = n == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &dim, NULL);
  hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, type, v);
  H5Aclose(a), H5Sclose(sp);
}

/* A dataset of n elements, or growing from 0 when n is 0 (chunked). */
static hid_t make_1d(hid_t group, const char *name, hid_t type, hsize_t n, bool grows) {
  hsize_t dim = grows ? 0 : n, max = grows ? H5S_UNLIMITED : n, chunk = 1 << 16;
  hid_t sp = H5Screate_simple(1, &dim, &max), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (grows)
    H5Pset_chunk(dcpl, 1, &chunk);
  hid_t d = H5Dcreate2(group, name, type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Pclose(dcpl), H5Sclose(sp);
  return d;
}

static int sink_open(fr_sink *k, const char *tmp, const fr_source *s, const fr_opts *o,
                     uint64_t n) {
  memset(k, 0, sizeof *k);
  k->ptr = k->index = k->values = k->count = k->status = k->data = -1;
  k->file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (k->file < 0)
    return -1;
  hid_t entry = H5Gcreate2(k->file, "entry", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  k->group = H5Gcreate2(entry, o->dense ? "data" : "sparse", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Gclose(entry);
  if (k->group < 0)
    return -1;
  uint64_t shape[2] = {s->rows, s->cols}, range[2] = {o->start, o->start + n};
  attr_num(k->group, "shape", H5T_STD_U64LE, 2, shape);
  attr_num(k->group, "frames", H5T_STD_U64LE, 2, range);
  attr_str(k->group, "source_file", s->path);
  attr_str(k->group, "source_dataset", s->name);
  attr_str(k->group, "codec", s->codec);
  attr_num(k->group, "block_size", H5T_NATIVE_UINT, 1, &s->block);
  if (!o->dense) {
    attr_num(k->group, "cut", H5T_IEEE_F64LE, 1, &o->cut);
    attr_num(k->group, "top_n", H5T_STD_U64LE, 1, &o->top_n);
    attr_str(k->group, "mask", o->mask_spec ? o->mask_spec : "");
    k->ptr = make_1d(k->group, "frame_ptr", H5T_STD_U64LE, n + 1, false);
    k->index = make_1d(k->group, "index", H5T_STD_U32LE, 0, true);
    k->values = make_1d(k->group, "values", s->type, 0, true);
    k->count = make_1d(k->group, "count", H5T_STD_U64LE, n, false);
  } else {
    hsize_t dims[3] = {n, s->rows, s->cols}, chunk[3] = {1, s->rows, s->cols};
    hid_t sp = H5Screate_simple(3, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 3, chunk);
    k->data = H5Dcreate2(k->group, "data", s->type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl), H5Sclose(sp);
  }
  k->status = make_1d(k->group, "status", H5T_STD_I32LE, n, false);
  if (k->status < 0 || (o->dense ? k->data < 0 : k->ptr < 0 || k->index < 0 || k->values < 0))
    return -1;
  if (!o->dense) {
    uint64_t zero = 0;
    hsize_t at = 0, one = 1;
    hid_t fs = H5Dget_space(k->ptr), ms = H5Screate_simple(1, &one, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, &at, NULL, &one, NULL);
    herr_t e = H5Dwrite(k->ptr, H5T_STD_U64LE, ms, fs, H5P_DEFAULT, &zero);
    H5Sclose(ms), H5Sclose(fs);
    if (e < 0)
      return -1;
  }
  return 0;
}

/* Writes n elements of buf at [at, at + n) of the 1-D dataset d. */
static int write_1d(hid_t d, hid_t type, hsize_t at, hsize_t n, const void *buf) {
  if (n == 0)
    return 0;
  hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &n, NULL);
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, &at, NULL, &n, NULL);
  herr_t e = H5Dwrite(d, type, ms, fs, H5P_DEFAULT, buf);
  H5Sclose(ms), H5Sclose(fs);
  return e < 0 ? -1 : 0;
}

/* Appends n elements to the growing dataset d of `have` elements. */
static int append_1d(hid_t d, hid_t type, hsize_t have, hsize_t n, const void *buf) {
  hsize_t size = have + n;
  if (n == 0)
    return 0;
  if (H5Dset_extent(d, &size) < 0)
    return -1;
  return write_1d(d, type, have, n, buf);
}

static void sink_close(fr_sink *k) {
  hid_t *ds[] = {&k->ptr, &k->index, &k->values, &k->count, &k->status, &k->data};
  for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
    if (*ds[i] >= 0)
      H5Dclose(*ds[i]);
  if (k->group >= 0)
    H5Gclose(k->group);
  if (k->file >= 0)
    H5Fclose(k->file);
  k->file = k->group = -1;
}

/* ---- the chunks ---------------------------------------------------------------- */

typedef struct fr_batch {
  uint64_t first; /* the source frame of entry 0 */
  uint64_t offsets[MAX_BATCH], lengths[MAX_BATCH];
  uint8_t *data; /* inline chunks */
  size_t cap;
} fr_batch;

/* Where frame f's chunk is in the file: true with *off and *len when it is
 * written and went through the filter. */
static bool chunk_at(const fr_source *s, uint64_t f, uint64_t *off, uint64_t *len) {
  hsize_t coord[3] = {f, 0, 0};
  unsigned mask = 0;
  haddr_t addr = HADDR_UNDEF;
  hsize_t size = 0;
  if (H5Dget_chunk_info_by_coord(s->dset, coord, &mask, &addr, &size) < 0 || addr == HADDR_UNDEF ||
      mask != 0 || size == 0)
    return false;
  *off = s->base + addr;
  *len = size;
  return true;
}

static bool reserve(fr_batch *b, size_t need) {
  if (need <= b->cap)
    return true;
  size_t cap = b->cap ? b->cap : 1 << 20;
  while (cap < need)
    cap *= 2;
  uint8_t *p = realloc(b->data, cap);
  if (!p)
    return false;
  b->data = p, b->cap = cap;
  return true;
}

/* Appends frame f's chunk to the inline data at *used: its stored bytes, or
 * the frame read by H5Dread and encoded here.  Returns 0, or -1 with why. */
static int inline_chunk(const fr_source *s, uint64_t f, fr_batch *b, size_t *used, char *why,
                        size_t cap) {
  hsize_t coord[3] = {f, 0, 0};
  uint64_t off, len;
  if (chunk_at(s, f, &off, &len)) {
    uint32_t mask = 0;
    if (!reserve(b, *used + len))
      return snprintf(why, cap, "out of memory"), -1;
    if (H5Dread_chunk(s->dset, H5P_DEFAULT, coord, &mask, b->data + *used) < 0)
      return snprintf(why, cap, "HDF5 cannot read its chunk"), -1;
    *used += len;
    return 0;
  }
#ifdef FZCTL_HAVE_BSLZ4
  /* Not a bitshuffle chunk: the pixels as HDF5 gives them (stored as they
   * are where the filter skipped the chunk, the fill value where none was
   * written), encoded as the filter would. */
  size_t raw = s->npix * s->esize;
  size_t bound = fz_bslz4_bound((fz_bslz4_codec)s->codec_id, s->npix, s->esize, s->block);
  uint8_t *pix = malloc(raw);
  if (!pix || bound == 0 || !reserve(b, *used + bound)) {
    free(pix);
    return snprintf(why, cap, "out of memory"), -1;
  }
  hsize_t count[3] = {1, s->rows, s->cols};
  hid_t fs = H5Dget_space(s->dset), ms = H5Screate_simple(3, count, NULL);
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, coord, NULL, count, NULL);
  herr_t e = H5Dread(s->dset, s->type, ms, fs, H5P_DEFAULT, pix);
  H5Sclose(ms), H5Sclose(fs);
  if (e < 0) {
    free(pix);
    return snprintf(why, cap, "HDF5 cannot read it"), -1;
  }
  int64_t n = fz_bslz4_encode((fz_bslz4_codec)s->codec_id, pix, s->npix, s->esize, s->block, 3,
                              b->data + *used, bound, why, cap);
  free(pix);
  if (n < 0)
    return -1;
  *used += (size_t)n;
  return 0;
#else
  return snprintf(why, cap,
                  "its chunk is not a bitshuffle chunk (never written, or stored unfiltered), "
                  "and this fzctl has no encoder (built without liblz4 and libzstd)"),
         -1;
#endif
}

/* Whether the chunks' bytes lie in the descriptor where the chunk table
 * says: the first written chunk of the range, read both ways, must agree.
 * HDF5 gives chunk addresses relative to the file's base address (which a
 * user block moves); should a library give them otherwise, the chunks go
 * inline rather than wrong. */
static bool table_is_right(const fr_source *s, uint64_t first, uint64_t n) {
  for (uint64_t f = first; f < first + n; f++) {
    uint64_t off, len;
    if (!chunk_at(s, f, &off, &len))
      continue;
    uint8_t *a = malloc(len), *b = malloc(len);
    hsize_t coord[3] = {f, 0, 0};
    uint32_t mask = 0;
    bool same = a && b && pread(s->fd, a, len, (off_t)off) == (ssize_t)len &&
                H5Dread_chunk(s->dset, H5P_DEFAULT, coord, &mask, b) >= 0 && memcmp(a, b, len) == 0;
    free(a), free(b);
    return same;
  }
  return true;
}

/* ---- the run ------------------------------------------------------------------- */

typedef struct fr_run {
  const fr_opts *o;
  fr_source *s;
  fr_sink *k;
  fz_client *c;
  uint64_t setup;
  bool use_fd;
  uint64_t done, failed, pixels;
  ctl_progress bar;
} fr_run;

/* Stores the results of frames [at, at + n) of the output. */
static int store(fr_run *r, uint64_t at, size_t n, fz_frame_result *res) {
  const fr_opts *o = r->o;
  fr_sink *k = r->k;
  int32_t status[MAX_BATCH];
  uint64_t count[MAX_BATCH], ptr[MAX_BATCH];
  for (size_t i = 0; i < n; i++) {
    fz_frame_result *x = &res[i];
    if (x->status == 0 && o->dense && x->listed != r->s->npix) {
      x->status = FZ_EPROTO; /* a frame of another size: never written */
      snprintf(x->message, sizeof x->message, "the answer holds %zu pixels, not the frame's %llu",
               x->listed, (unsigned long long)r->s->npix);
    }
    if (x->status != 0) {
      ctl_progress_clear(&r->bar);
      ctl_err("%s: frame %" PRIu64 ": %s (%s)", o->in_spec, o->start + at + i,
              x->message[0] ? x->message : fz_strerror(x->status), fz_err_name(x->status));
      r->failed++;
    } else if (o->dense) {
      hsize_t start[3] = {at + i, 0, 0}, cnt[3] = {1, r->s->rows, r->s->cols};
      hid_t fs = H5Dget_space(k->data), ms = H5Screate_simple(3, cnt, NULL);
      H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
      herr_t e = H5Dwrite(k->data, r->s->type, ms, fs, H5P_DEFAULT, x->values);
      H5Sclose(ms), H5Sclose(fs);
      if (e < 0)
        return -1;
    } else {
      if (append_1d(k->index, H5T_STD_U32LE, k->listed, x->listed, x->indices) < 0 ||
          append_1d(k->values, r->s->type, k->listed, x->listed, x->values) < 0)
        return -1;
      k->listed += x->listed;
      r->pixels += x->listed;
    }
    ptr[i] = k->listed;
    status[i] = x->status;
    count[i] = x->count;
  }
  if (write_1d(k->status, H5T_STD_I32LE, at, n, status) < 0)
    return -1;
  if (!o->dense && (write_1d(k->ptr, H5T_STD_U64LE, at + 1, n, ptr) < 0 ||
                    write_1d(k->count, H5T_STD_U64LE, at, n, count) < 0))
    return -1;
  return 0;
}

/* One request for frames [at, at + n) of the output: by descriptor when
 * every chunk is a stored bitshuffle chunk and the socket takes one, else
 * inline.  Returns 0 with the results stored, FZ_EMSGSIZE when the answer
 * would not fit one message (the caller sends fewer frames), or another
 * error of the whole request. */
static int send_batch(fr_run *r, fr_batch *b, uint64_t at, size_t n) {
  fr_source *s = r->s;
  b->first = r->o->start + at;
  bool all_fd = r->use_fd;
  for (size_t i = 0; i < n && all_fd; i++)
    all_fd = chunk_at(s, b->first + i, &b->offsets[i], &b->lengths[i]);
  fz_frame_result *res = calloc(n, sizeof *res);
  if (!res)
    return FZ_ENOMEM;
  /* A frame whose chunk cannot be read here fails alone, as a corrupt one
   * fails on the daemon: the request holds the others. */
  size_t idx[MAX_BATCH], m = 0, used = 0;
  for (size_t i = 0; i < n; i++) {
    if (all_fd) {
      idx[m++] = i;
      continue;
    }
    size_t before = used;
    if (inline_chunk(s, b->first + i, b, &used, res[i].message, sizeof res[i].message) < 0) {
      res[i].status = FZ_EIO;
      continue;
    }
    b->offsets[m] = before, b->lengths[m] = used - before;
    idx[m++] = i;
  }
  int rc = 0;
  if (m > 0) {
    fz_frames_request q = {
        .dtype = s->dtype,
        .ndims = 2,
        .shape = {s->rows, s->cols},
        .codec = s->codec,
        .cut = r->o->cut,
        .top_n = r->o->top_n,
        .dense = r->o->dense,
        .setup = r->setup,
        .data = all_fd ? NULL : b->data,
        .offsets = b->offsets,
        .lengths = b->lengths,
        .nframes = m,
        .has_fd = all_fd,
        .fd = all_fd ? s->fd : -1,
    };
    fz_frame_result *got = calloc(m, sizeof *got);
    rc = got ? fz_client_frames(r->c, &q, got) : FZ_ENOMEM;
    if (rc == 0)
      for (size_t j = 0; j < m; j++)
        res[idx[j]] = got[j];
    free(got);
  }
  if (rc == 0) {
    rc = store(r, at, n, res) < 0 ? FZ_EIO : 0;
    if (rc < 0) {
      ctl_progress_clear(&r->bar);
      ctl_err("cannot write '%s'", r->o->out_path);
    }
    r->done += n;
    r->bar.files_done = (size_t)r->done;
    r->bar.bytes_done += n * s->npix * s->esize;
    ctl_progress_draw(&r->bar);
  }
  fz_client_frame_results_free(res, n);
  free(res);
  return rc;
}

static int run_frames(fr_run *r, uint64_t n) {
  fr_batch *b = calloc(1, sizeof *b);
  if (!b)
    return FZ_ENOMEM;
  uint64_t batch = r->o->batch;
  if (r->o->dense) {
    /* Whole frames come back in the answer: no more than fit in one. */
    fz_server_info info;
    fz_client_info(r->c, &info);
    uint64_t fit = info.max_inline / (r->s->npix * r->s->esize + 64);
    batch = fit < 1 ? 1 : fit < batch ? fit : batch;
  }
  int rc = 0, busy = 0;
  for (uint64_t at = 0; at < n && rc == 0;) {
    size_t k = (size_t)(n - at < batch ? n - at : batch);
    rc = send_batch(r, b, at, k);
    if (rc == FZ_EMSGSIZE && k > 1) {
      batch = k / 2; /* the answer did not fit one message: fewer frames */
      rc = 0;
      continue;
    }
    /* The daemon's memory or reply budget is held by other jobs now: the
     * same request again a little later, for up to about 10 s. */
    if (rc == FZ_EBUSY && busy < 200) {
      busy++;
      usleep(50000);
      rc = 0;
      continue;
    }
    busy = 0;
    if (rc < 0 && rc != FZ_EIO) {
      ctl_progress_clear(&r->bar);
      ctl_err("%s: frames %" PRIu64 " to %" PRIu64 ": %s", r->o->in_spec, r->o->start + at,
              r->o->start + at + k - 1,
              fz_client_errmsg(r->c)[0] ? fz_client_errmsg(r->c) : fz_strerror(rc));
    }
    at += k;
  }
  free(b->data);
  free(b);
  return rc;
}

/* The temporary output beside out: OUT's folder/.fzctl-XXXXXX, made. */
static char *temp_beside(const char *out) {
  char *copy = strdup(out);
  if (!copy)
    return NULL;
  const char *d = dirname(copy);
  size_t len = strlen(d) + 32;
  char *tmp = malloc(len);
  if (tmp) {
    snprintf(tmp, len, "%s/.fzctl-XXXXXX", d);
    int fd = mkstemp(tmp);
    if (fd < 0) {
      free(tmp);
      tmp = NULL;
    } else {
      /* The mode a new file gets under the umask, not mkstemp's 0600. */
      mode_t mask = umask(0);
      umask(mask);
      fchmod(fd, 0666 & ~mask);
      close(fd);
    }
  }
  free(copy);
  return tmp;
}

static int check_output(const fr_opts *o, const fr_source *s) {
  struct stat in, out;
  if (stat(o->out_path, &out) != 0)
    return errno == ENOENT
               ? CTL_OK
               : (ctl_err("cannot use output '%s': %s", o->out_path, strerror(errno)), CTL_SERVER);
  if (stat(s->path, &in) == 0 && in.st_dev == out.st_dev && in.st_ino == out.st_ino) {
    ctl_err("output '%s' is the input '%s' (the same file): writing it would destroy the input",
            o->out_path, s->path);
    return CTL_SERVER;
  }
  if (!o->force) {
    ctl_err("'%s' exists (use -f to overwrite it)", o->out_path);
    return CTL_SERVER;
  }
  return CTL_OK;
}

int ctl_cmd_frames(const ctl_global *g, int argc, char **argv) {
  fr_opts o;
  int rc = parse_frames(argc, argv, &o);
  if (rc >= 0)
    return rc;
  /* HDF5's own error stack would print on every probe: fzctl says why. */
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  fr_source s = {.file = -1, .dset = -1, .type = -1, .fd = -1};
  fr_sink k = {.file = -1,
               .group = -1,
               .ptr = -1,
               .index = -1,
               .values = -1,
               .count = -1,
               .status = -1,
               .data = -1};
  fz_client *c = NULL;
  uint8_t *mask = NULL;
  char *tmp = NULL;
  rc = source_open(&s, o.in_spec);
  if (rc != CTL_OK)
    goto out;
  if (o.start >= s.nframes) {
    ctl_err("%s: --frames starts at %" PRIu64 ", and the dataset has %" PRIu64 " frames", o.in_spec,
            o.start, s.nframes);
    rc = CTL_SERVER;
    goto out;
  }
  uint64_t stop = o.stop < s.nframes ? o.stop : s.nframes;
  uint64_t n = stop - o.start;
  if (o.mask_spec) {
    mask = malloc(s.npix);
    rc = mask ? mask_load(&s, o.mask_spec, mask) : CTL_SERVER;
    if (rc != CTL_OK)
      goto out;
  }
  if ((rc = check_output(&o, &s)) != CTL_OK || (rc = ctl_connect(g, &c)) != CTL_OK)
    goto out;
  fz_server_info info;
  fz_client_info(c, &info);
  fr_run r = {.o = &o, .s = &s, .k = &k, .c = c};
  r.use_fd = info.transport == FZ_TRANSPORT_UNIX && !o.inline_data;
  if (r.use_fd && (s.fd = open(s.path, O_RDONLY | O_CLOEXEC)) < 0) {
    ctl_err("cannot open '%s': %s", s.path, strerror(errno));
    rc = CTL_SERVER;
    goto out;
  }
  if (r.use_fd && !table_is_right(&s, o.start, n))
    r.use_fd = false;
  if (mask) {
    fz_frames_setup_args a = {.npixels = s.npix, .mask = mask};
    if (fz_client_frames_setup(c, &a, &r.setup) < 0) {
      ctl_err("--mask: %s", fz_client_errmsg(c));
      rc = CTL_SERVER;
      goto out;
    }
  }
  tmp = temp_beside(o.out_path);
  if (!tmp || sink_open(&k, tmp, &s, &o, n) < 0) {
    ctl_err("cannot write '%s'", tmp ? o.out_path : "a temporary file beside the output");
    rc = CTL_SERVER;
    goto out;
  }
  ctl_progress_start(&r.bar, !o.quiet, (size_t)n, n * s.npix * s.esize);
  r.bar.unit = "frames";
  double t0 = ctl_now_s();
  int run = run_frames(&r, n);
  ctl_progress_clear(&r.bar);
  sink_close(&k);
  if (run < 0 && run != FZ_EIO) {
    rc = CTL_SERVER; /* the run stopped: no output */
    goto out;
  }
  if (run == FZ_EIO || rename(tmp, o.out_path) != 0) {
    ctl_err("cannot write '%s'%s%s", o.out_path, run == FZ_EIO ? "" : ": ",
            run == FZ_EIO ? "" : strerror(errno));
    rc = CTL_SERVER;
    goto out;
  }
  free(tmp);
  tmp = NULL;
  double secs = ctl_now_s() - t0;
  if (!o.quiet) {
    uint64_t good = r.done - r.failed;
    printf("%s -> %s: %" PRIu64 " frame%s", o.in_spec, o.out_path, good, good == 1 ? "" : "s");
    if (!o.dense)
      printf(", %" PRIu64 " pixels listed", r.pixels);
    if (r.failed)
      printf(", %" PRIu64 " failed", r.failed);
    printf(", %.1f frames/s (%s)\n", secs > 0 ? (double)r.done / secs : 0,
           r.use_fd ? "chunks read by fzd from the file" : "chunks sent inline");
  }
  rc = r.failed ? CTL_SERVER : CTL_OK;
out:
  sink_close(&k);
  if (tmp) {
    unlink(tmp);
    free(tmp);
  }
  fz_client_close(c);
  free(mask);
  source_close(&s);
  return rc;
}
