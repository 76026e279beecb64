/*
 * info.c - the read-only commands: status (the default), stats, ping and
 * presets, which connect, ask, and print either aligned text or, with
 * --json, one JSON object; and info, which reads archive headers with
 * libfzclient alone (no daemon).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fzctl.h"

/* Parses a command that takes only --json; returns -1 to go on, else an exit
 * code. */
static int parse_json_only(const char *name, int argc, char **argv, bool *json) {
  static const struct option opts[] = {
    {"json", no_argument, NULL, 'j'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
  };
  int c;
  *json = false;
  while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
    if (c == 'j') {
      *json = true;
    } else if (c == 'h') {
      ctl_print_usage(stdout, ctl_find_command(name));
      return CTL_OK;
    } else {
      return ctl_usage_error(name, "unknown option '%s' for %s", argv[optind - 1], name);
    }
  }
  if (optind < argc)
    return ctl_usage_error(name, "%s takes no argument, got '%s'", name, argv[optind]);
  return -1;
}

static int server_error(fz_client *c, const char *what, int rc) {
  ctl_err("%s: %s (%s)", what, fz_client_errmsg(c)[0] ? fz_client_errmsg(c) : fz_strerror(rc),
          fz_err_name(rc));
  fz_client_close(c);
  return CTL_SERVER;
}

int ctl_cmd_status(const ctl_global *g, int argc, char **argv) {
  bool json;
  int rc = parse_json_only("status", argc, argv, &json);
  if (rc >= 0)
    return rc;
  fz_client *c;
  if ((rc = ctl_connect(g, &c)) != CTL_OK)
    return rc;
  fz_server_status st;
  fz_server_info info;
  fz_client_info(c, &info);
  if ((rc = fz_client_status(c, &st)) < 0)
    return server_error(c, "status", rc);
  const char *addr = g->address ? g->address : fz_client_default_address();
  if (json) {
    printf("{\"address\":");
    ctl_json_str(stdout, addr);
    printf(",\"server\":");
    ctl_json_str(stdout, st.server);
    printf(",\"pid\":%" PRId64 ",\"backend\":", info.pid);
    ctl_json_str(stdout, st.backend);
    printf(",\"device\":");
    ctl_json_str(stdout, st.device);
    printf(",\"uptime_s\":%.3f,\"workers\":%" PRIu64 ",\"connections\":%" PRIu64
           ",\"queue_depth\":%" PRIu64 ",\"queue_capacity\":%" PRIu64
           ",\"jobs_done\":%" PRIu64 ",\"jobs_failed\":%" PRIu64
           ",\"max_inline\":%" PRIu64 "}\n",
           st.uptime_s, st.workers, st.connections, st.queue_depth,
           st.queue_capacity, st.jobs_done, st.jobs_failed, info.max_inline);
  } else {
    printf("server       %s (pid %" PRId64 ")\n", st.server, info.pid);
    printf("address      %s\n", addr);
    bool dev = st.device[0] && strcmp(st.device, st.backend) != 0;
    printf("backend      %s%s%s\n", st.backend, dev ? ", " : "", dev ? st.device : "");
    printf("uptime       %.1f s\n", st.uptime_s);
    printf("workers      %" PRIu64 "\n", st.workers);
    printf("connections  %" PRIu64 "\n", st.connections);
    printf("queue        %" PRIu64 " / %" PRIu64 "\n", st.queue_depth, st.queue_capacity);
    printf("jobs         %" PRIu64 " done, %" PRIu64 " failed\n", st.jobs_done, st.jobs_failed);
    printf("max inline   %" PRIu64 " bytes\n", info.max_inline);
  }
  fz_client_close(c);
  return CTL_OK;
}

static void print_op_json(const char *name, const fz_op_stats *s) {
  printf(",\"%s\":{\"count\":%" PRIu64 ",\"bytes_in\":%" PRIu64
         ",\"bytes_out\":%" PRIu64 ",\"time_us\":%" PRIu64 ",\"parse_us\":%" PRIu64
         ",\"queue_us\":%" PRIu64 ",\"worker_us\":%" PRIu64 ",\"reply_us\":%" PRIu64 "}",
         name, s->count, s->bytes_in, s->bytes_out, s->time_us, s->parse_us, s->queue_us,
         s->worker_us, s->reply_us);
}

/* Throughput counts the original (raw) bytes in both directions: what went
 * into a compression, what came out of a decompression.  The archive's
 * bytes would make a decompression look as slow as its ratio is high. */
static void print_op_text(const char *name, const fz_op_stats *s, bool raw_is_out) {
  uint64_t raw = raw_is_out ? s->bytes_out : s->bytes_in;
  double mbs = s->time_us ? (double)raw / (double)s->time_us : 0;
  printf("%-11s  %" PRIu64 " jobs, %" PRIu64 " -> %" PRIu64 " bytes, %.1f MB/s\n",
         name, s->count, s->bytes_in, s->bytes_out, mbs);
  if (s->count == 0)
    return;
  const double n = (double)s->count;
  printf("%-11s  per job: parse %.1f us, queue %.1f us, worker %.1f us (backend %.1f us), "
         "reply %.1f us\n", "", (double)s->parse_us / n, (double)s->queue_us / n,
         (double)s->worker_us / n, (double)s->time_us / n, (double)s->reply_us / n);
}

int ctl_cmd_stats(const ctl_global *g, int argc, char **argv) {
  bool json;
  int rc = parse_json_only("stats", argc, argv, &json);
  if (rc >= 0)
    return rc;
  fz_client *c;
  if ((rc = ctl_connect(g, &c)) != CTL_OK)
    return rc;
  fz_server_stats st;
  if ((rc = fz_client_stats(c, &st)) < 0)
    return server_error(c, "stats", rc);
  if (json) {
    printf("{\"jobs_done\":%" PRIu64 ",\"jobs_failed\":%" PRIu64
           ",\"jobs_canceled\":%" PRIu64 ",\"busy_rejections\":%" PRIu64
           ",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64,
           st.jobs_done, st.jobs_failed, st.jobs_canceled, st.busy_rejections,
           st.bytes_in, st.bytes_out);
    print_op_json("compress", &st.compress);
    print_op_json("decompress", &st.decompress);
    printf(",\"plans\":{\"hits\":%" PRIu64 ",\"created\":%" PRIu64 ",\"dropped\":%" PRIu64
           ",\"held\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"budget\":%" PRIu64
           ",\"transient\":%" PRIu64 "}",
           st.plan_hits, st.plans_created, st.plans_dropped, st.plans_held, st.plan_bytes,
           st.plan_budget, st.plans_transient);
    if (st.has_jit)
      printf(",\"jit\":{\"mem_hits\":%" PRIu64 ",\"disk_hits\":%" PRIu64 ",\"misses\":%" PRIu64
             ",\"compiles\":%" PRIu64 ",\"compile_failures\":%" PRIu64
             ",\"compile_ms\":%" PRIu64 ",\"disk_writes\":%" PRIu64
             ",\"disk_rejected\":%" PRIu64 ",\"disk_evicted\":%" PRIu64
             ",\"disk_bytes\":%" PRIu64 "}",
             st.jit_mem_hits, st.jit_disk_hits, st.jit_misses, st.jit_compiles,
             st.jit_compile_failures, st.jit_compile_ms, st.jit_disk_writes,
             st.jit_disk_rejected, st.jit_disk_evicted, st.jit_disk_bytes);
    printf("}\n");
  } else {
    printf("jobs         %" PRIu64 " done, %" PRIu64 " failed, %" PRIu64
           " canceled, %" PRIu64 " refused busy\n",
           st.jobs_done, st.jobs_failed, st.jobs_canceled, st.busy_rejections);
    printf("bytes        %" PRIu64 " in, %" PRIu64 " out\n", st.bytes_in, st.bytes_out);
    print_op_text("compress", &st.compress, false);
    print_op_text("decompress", &st.decompress, true);
    printf("plans        %" PRIu64 " held, %" PRIu64 " made, %" PRIu64 " found ready, %" PRIu64
           " dropped\n", st.plans_held, st.plans_created, st.plan_hits, st.plans_dropped);
    if (st.plan_budget)
      printf("plan memory  %" PRIu64 " of %" PRIu64 " bytes, %" PRIu64
             " plans too large to keep\n", st.plan_bytes, st.plan_budget, st.plans_transient);
    else
      printf("plan memory  %" PRIu64 " bytes (no budget)\n", st.plan_bytes);
    if (st.has_jit)
      printf("jit          %" PRIu64 " compiles (%" PRIu64 " failed, %" PRIu64 " ms), %" PRIu64
             " memory hits, %" PRIu64 " disk hits, %" PRIu64 " misses; disk: %" PRIu64
             " bytes, %" PRIu64 " written, %" PRIu64 " rejected, %" PRIu64 " evicted\n",
             st.jit_compiles, st.jit_compile_failures, st.jit_compile_ms, st.jit_mem_hits,
             st.jit_disk_hits, st.jit_misses, st.jit_disk_bytes, st.jit_disk_writes,
             st.jit_disk_rejected, st.jit_disk_evicted);
  }
  fz_client_close(c);
  return CTL_OK;
}

int ctl_cmd_ping(const ctl_global *g, int argc, char **argv) {
  static const struct option opts[] = {
    {"count", required_argument, NULL, 'c'},
    {"interval", required_argument, NULL, 'i'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
  };
  uint64_t count = 5, interval_ms = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":c:i:h", opts, NULL)) != -1) {
    switch (c) {
    case 'c':
      if (!ctl_parse_u64("--count", optarg, 1, 1000000, &count))
        return CTL_USAGE;
      break;
    case 'i':
      if (!ctl_parse_u64("--interval", optarg, 0, 60000, &interval_ms))
        return CTL_USAGE;
      break;
    case 'h':
      ctl_print_usage(stdout, ctl_find_command("ping"));
      return CTL_OK;
    case ':':
      return ctl_usage_error("ping", "option '%s' needs a value", argv[optind - 1]);
    default:
      return ctl_usage_error("ping", "unknown option '%s' for ping", argv[optind - 1]);
    }
  }
  if (optind < argc)
    return ctl_usage_error("ping", "ping takes no argument, got '%s'", argv[optind]);
  fz_client *cl;
  int rc;
  if ((rc = ctl_connect(g, &cl)) != CTL_OK)
    return rc;
  double min = 1e30, max = 0, sum = 0;
  for (uint64_t i = 0; i < count; i++) {
    double t0 = ctl_now_s();
    if ((rc = fz_client_ping(cl, NULL)) < 0)
      return server_error(cl, "ping", rc);
    double us = (ctl_now_s() - t0) * 1e6;
    printf("ping %" PRIu64 ": %.1f us\n", i + 1, us);
    min = us < min ? us : min;
    max = us > max ? us : max;
    sum += us;
    if (interval_ms && i + 1 < count) {
      struct timespec ts = {.tv_sec = (time_t)(interval_ms / 1000),
                            .tv_nsec = (long)(interval_ms % 1000) * 1000000};
      nanosleep(&ts, NULL);
    }
  }
  printf("%" PRIu64 " round trips: min %.1f us, avg %.1f us, max %.1f us\n", count,
         min, sum / (double)count, max);
  fz_client_close(cl);
  return CTL_OK;
}

int ctl_cmd_presets(const ctl_global *g, int argc, char **argv) {
  bool json;
  int rc = parse_json_only("presets", argc, argv, &json);
  if (rc >= 0)
    return rc;
  fz_client *c;
  if ((rc = ctl_connect(g, &c)) != CTL_OK)
    return rc;
  fz_preset_info p[32];
  size_t n;
  if ((rc = fz_client_presets(c, p, 32, &n)) < 0)
    return server_error(c, "presets", rc);
  if (n > 32)
    n = 32;
  if (json)
    printf("[");
  for (size_t i = 0; i < n; i++) {
    if (json) {
      printf("%s{\"name\":", i ? "," : "");
      ctl_json_str(stdout, p[i].name);
      printf(",\"chain\":");
      ctl_json_str(stdout, p[i].chain);
      printf(",\"description\":");
      ctl_json_str(stdout, p[i].description);
      printf("}");
    } else {
      printf("%-10s %s\n           %s\n", p[i].name, p[i].description, p[i].chain);
    }
  }
  if (json)
    printf("]\n");
  fz_client_close(c);
  return CTL_OK;
}

/* Prints one archive's header; returns CTL_OK, CTL_USAGE when the file
 * cannot be read, CTL_SERVER when it is not a valid archive. */
static int info_one(const char *path, bool json) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    ctl_err("cannot read '%s': %s", path, fd < 0 ? strerror(errno) : "not a regular file");
    if (fd >= 0)
      close(fd);
    return CTL_USAGE;
  }
  size_t len = (size_t)st.st_size;
  void *m = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
  close(fd);
  if (m == MAP_FAILED) {
    ctl_err("cannot map '%s': %s", path, strerror(errno));
    return CTL_USAGE;
  }
  fz_client_archive a;
  int rc = fz_client_archive_info(m ? m : "", len, &a);
  if (m)
    munmap(m, len);
  if (rc < 0) {
    ctl_err("'%s': %s (%s)", path, fz_strerror(rc), fz_err_name(rc));
    if (json) {
      printf("{\"file\":");
      ctl_json_str(stdout, path);
      printf(",\"error\":{\"code\":%d,\"name\":\"%s\",\"message\":", rc, fz_err_name(rc));
      ctl_json_str(stdout, fz_strerror(rc));
      printf("}}\n");
    }
    return CTL_SERVER;
  }
  double ratio = a.archive_bytes ? (double)a.raw_bytes / (double)a.archive_bytes : 0;
  if (json) {
    printf("{\"file\":");
    ctl_json_str(stdout, path);
    printf(",\"dtype\":\"%s\",\"shape\":[", a.dtype);
    for (unsigned i = 0; i < a.ndims; i++)
      printf("%s%" PRIu64, i ? "," : "", a.shape[i]);
    printf("],\"raw_bytes\":%" PRIu64 ",\"archive_bytes\":%" PRIu64
           ",\"ratio\":%.17g,\"chunks\":%" PRIu64 ",\"eb_abs\":%.17g,\"chain\":",
           a.raw_bytes, a.archive_bytes, ratio, a.chunks, a.eb_abs);
    ctl_json_str(stdout, a.chain);
    printf("}\n");
    return CTL_OK;
  }
  printf("file      %s\n", path);
  printf("dtype     %s\n", a.dtype);
  printf("shape     ");
  for (unsigned i = 0; i < a.ndims; i++)
    printf("%s%" PRIu64, i ? "x" : "", a.shape[i]);
  printf("\n");
  printf("raw       %" PRIu64 " bytes\n", a.raw_bytes);
  printf("archive   %" PRIu64 " bytes, ratio %.2f\n", a.archive_bytes, ratio);
  printf("chunks    %" PRIu64 "\n", a.chunks);
  if (a.eb_abs > 0)
    printf("eb_abs    %.17g\n", a.eb_abs);
  else
    printf("eb_abs    0 (lossless)\n");
  printf("chain     %s\n", a.chain);
  return CTL_OK;
}

int ctl_cmd_info(const ctl_global *g, int argc, char **argv) {
  (void)g;
  static const struct option opts[] = {
    {"json", no_argument, NULL, 'j'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
  };
  bool json = false;
  int c;
  while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
    if (c == 'j') {
      json = true;
    } else if (c == 'h') {
      ctl_print_usage(stdout, ctl_find_command("info"));
      return CTL_OK;
    } else {
      return ctl_usage_error("info", "unknown option '%s' for info", argv[optind - 1]);
    }
  }
  if (optind >= argc)
    return ctl_usage_error("info", "info needs at least one archive FILE");
  int exit_code = CTL_OK;
  for (int i = optind; i < argc; i++) {
    if (!json && i > optind)
      printf("\n");
    int rc = info_one(argv[i], json);
    if (rc > exit_code)
      exit_code = rc;
  }
  return exit_code;
}
