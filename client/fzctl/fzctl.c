/*
 * fzctl.c - the command-line client of fzd: global options, the table of
 * subcommands, and the help generated from it.
 *
 * `fzctl [-S ADDR] [--token T] [COMMAND [ARGS...]]`.  A bare `fzctl` runs
 * `status`, the read-only view.  The global options may also follow the
 * command (`fzctl submit -S ADDR ...`): they are taken out of the command's
 * arguments before it parses them.  Exit codes: 0 success, 1 usage error, 2 the
 * server or the transport failed.
 */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fzctl.h"

static int cmd_help(const ctl_global *g, int argc, char **argv);

static const ctl_command commands[] = {
  {"submit", ctl_cmd_submit, "compress or decompress files",
   "[OPTIONS] FILE...\n"
   "  -d, --decompress      decompress archives (default: compress arrays)\n"
   "  -o, --output PATH     output file (one input only); '-' is stdout\n"
   "  -j, --jobs N          jobs in flight at once (default 4)\n"
   "  -t, --dtype TYPE      element type: f32 f64 u8 i8 u16 i16 u32 i32 u64 i64\n"
   "  -s, --shape DIMS      shape, slowest dimension first: 1201x2401\n"
   "                        (default: read from a .npy header, or 1-D)\n"
   "  -p, --pipeline P      fast | balanced | ratio | lossless | a chain (default balanced)\n"
   "  -e, --eb BOUND        error bound, e.g. 1e-3\n"
   "  -m, --mode MODE       abs | rel | pwrel (default rel)\n"
   "      --fill VALUE      the data's fill value (netCDF _FillValue): kept exactly,\n"
   "                        left out of the value range of rel\n"
   "      --verify          ask the server for the max error\n"
   "      --json            one JSON object per file on stdout\n"
   "      --inline          send data in messages, not as file descriptors\n"
   "  -f, --force           replace existing outputs (only once their job succeeded)\n"
   "  -q, --quiet           no per-file lines and no progress bar\n"
   "FILE '-' is stdin.  Outputs are named FILE.fz, and FILE.fz -> FILE with -d.\n"
   "Each output is written to a temporary file and renamed when its job succeeded;\n"
   "an output that is an input is refused.  A bad file does not stop the others."},
  {"status", ctl_cmd_status, "show the server's state (the default)", "[--json]"},
  {"stats", ctl_cmd_stats, "show the server's job counters", "[--json]"},
  {"ping", ctl_cmd_ping, "measure round trips to the server",
   "[-c COUNT] [-i MILLISECONDS]\n"
   "  -c, --count N         round trips (default 5)\n"
   "  -i, --interval MS     pause between them (default 0)"},
  {"presets", ctl_cmd_presets, "list the server's pipeline presets", "[--json]"},
  {"warm", ctl_cmd_warm, "have the server prepare plans before the jobs that need them",
   "[OPTIONS]\n"
   "  -t, --dtype TYPE      element type: f32 f64 u8 i8 u16 i16 u32 i32 u64 i64\n"
   "  -s, --shape DIMS      shape, slowest dimension first: 1201x2401\n"
   "  -p, --pipeline P      fast | balanced | ratio | lossless | a chain (default balanced)\n"
   "  -e, --eb BOUND        error bound, e.g. 1e-3\n"
   "  -m, --mode MODE       abs | rel | pwrel (default rel)\n"
   "  -f, --file PLANS      a JSON array of plans, as the daemon's \"warm\" setting\n"
   "      --json            one JSON object per plan on stdout\n"
   "Each plan is made and checked against the CPU engine on the daemon; one line per\n"
   "plan says whether it was made or already cached.  Exit status 2 if any failed."},
  {"frames", ctl_cmd_frames, "decode an HDF5 detector dataset to its pixels above a cut",
   "[OPTIONS] FILE.h5:/DATASET OUT.h5\n"
   "  -c, --cut VALUE       list the pixels whose value is above VALUE (default 0)\n"
   "  -n, --top N           only the N largest of them in each frame\n"
   "  -M, --mask MASK       FILE.npy or FILE.h5:/DATASET, one integer a pixel,\n"
   "                        nonzero = the pixel is used\n"
   "  -r, --frames A:B      frames A to B - 1 only (either may be left out)\n"
   "  -b, --batch N         frames a request (default 64, at most 4096)\n"
   "      --dense           write the whole frames instead of the lists\n"
   "      --inline          send the chunks in messages, not the file's descriptor\n"
   "  -f, --force           replace an existing OUT.h5\n"
   "  -q, --quiet           no summary line and no progress bar\n"
   "DATASET is (frames, rows, columns), chunked one frame a chunk, with the bitshuffle\n"
   "filter (32008) and LZ4 or zstd.  OUT.h5 holds /entry/sparse/{frame_ptr, index,\n"
   "values, count, status} (--dense: /entry/data/{data, status}); docs/frames.md.\n"
   "A frame that fails (a corrupt chunk) is reported and left empty, the others are\n"
   "written, and the exit status is 2."},
  {"info", ctl_cmd_info, "print the header of archive files (no daemon needed)",
   "[--json] FILE.fz...\n"
   "      --json            one JSON object per file on stdout"},
  {"help", cmd_help, "show help for a command", "[COMMAND]"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

const ctl_command *ctl_find_command(const char *name) {
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (strcmp(commands[i].name, name) == 0)
      return &commands[i];
  return NULL;
}

static void verr(const char *fmt, va_list ap) {
  fputs("fzctl: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

void ctl_err(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  verr(fmt, ap);
  va_end(ap);
}

int ctl_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  verr(fmt, ap);
  va_end(ap);
  fprintf(stderr, "Try 'fzctl help%s%s'.\n", cmd ? " " : "", cmd ? cmd : "");
  return CTL_USAGE;
}

void ctl_print_usage(FILE *f, const ctl_command *cmd) {
  const char *nl = strchr(cmd->usage, '\n');
  fprintf(f, "usage: fzctl %s %.*s\n%s\n", cmd->name,
          nl ? (int)(nl - cmd->usage) : (int)strlen(cmd->usage), cmd->usage,
          cmd->summary);
  if (nl)
    fprintf(f, "%s\n", nl + 1);
}

static void print_help(FILE *f) {
  fprintf(f,
          "usage: fzctl [-S ADDRESS] [--token TOKEN] [COMMAND [ARGS...]]\n"
          "Client of fzd, the compression daemon for scientific arrays.\n\n"
          "Commands:\n");
  for (size_t i = 0; i < NCOMMANDS; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(f,
          "\nOptions:\n"
          "  -S, --socket ADDRESS  unix:PATH, tcp:HOST:PORT or a socket path\n"
          "                        (default $FZD_SOCKET, else /run/fzd/fzd.sock if it\n"
          "                        exists, else $XDG_RUNTIME_DIR/fzd/fzd.sock if it\n"
          "                        exists, else /run/fzd/fzd.sock)\n"
          "      --token TOKEN     TCP token (default $FZD_TOKEN)\n"
          "  -h, --help            this help; 'fzctl help COMMAND' for a command\n"
          "  -V, --version         print the version\n\n"
          "Exit status: 0 success, 1 usage error, 2 server or transport error.\n");
}

static int cmd_help(const ctl_global *g, int argc, char **argv) {
  (void)g;
  if (argc > 2)
    return ctl_usage_error(NULL, "help takes one command, got '%s' too", argv[2]);
  if (argc == 2) {
    const ctl_command *c = ctl_find_command(argv[1]);
    if (!c)
      return ctl_usage_error(NULL, "unknown command '%s'", argv[1]);
    ctl_print_usage(stdout, c);
    return CTL_OK;
  }
  print_help(stdout);
  return CTL_OK;
}

int ctl_connect(const ctl_global *g, fz_client **out) {
  fz_client_opts o;
  fz_client_opts_init(&o);
  o.token = g->token;
  o.name = "fzctl";
  char why[256];
  int rc = fz_client_connect(out, g->address, &o, why, sizeof why);
  if (rc < 0) {
    ctl_err("%s", why[0] ? why : fz_strerror(rc));
    /* Where a plain `fzd` listens depends on who runs it, and fzctl finds
     * both places by itself: say so, rather than suggest a command that
     * would leave the user at another socket. */
    if (rc == FZ_ECONNREFUSED)
      fprintf(stderr,
              "No fzd is listening at '%s'.  Start one: 'systemctl start fzd' where it is "
              "installed as a service, or run 'fzd' (as root it listens at /run/fzd/fzd.sock, "
              "as another user at $XDG_RUNTIME_DIR/fzd/fzd.sock; fzctl looks at both), or "
              "'fzd --socket PATH' and point fzctl at it with -S PATH or FZD_SOCKET=PATH.\n",
              g->address ? g->address : fz_client_default_address());
    return CTL_SERVER;
  }
  return CTL_OK;
}

/* Takes -S/--socket and --token out of a command's arguments (up to a
 * "--"), so that they may follow the command; the rest keep their order.
 * Returns -1 to go on, else an exit code. */
static int take_global_options(ctl_global *g, int *argc, char **argv) {
  int w = 1;
  for (int r = 1; r < *argc; r++) {
    const char *a = argv[r];
    if (strcmp(a, "--") == 0) {
      while (r < *argc)
        argv[w++] = argv[r++];
      break;
    }
    const char **slot = NULL;
    const char *val = NULL;
    const char *name = NULL;
    if (strcmp(a, "-S") == 0 || strcmp(a, "--socket") == 0) {
      slot = &g->address, name = a;
    } else if (strcmp(a, "--token") == 0) {
      slot = &g->token, name = a;
    } else if (strncmp(a, "-S", 2) == 0) {
      slot = &g->address, name = "-S", val = a + 2;
    } else if (strncmp(a, "--socket=", 9) == 0) {
      slot = &g->address, name = "--socket", val = a + 9;
    } else if (strncmp(a, "--token=", 8) == 0) {
      slot = &g->token, name = "--token", val = a + 8;
    }
    if (!slot) {
      argv[w++] = argv[r];
      continue;
    }
    if (!val) {
      if (r + 1 >= *argc)
        return ctl_usage_error(NULL, "option '%s' needs a value", name);
      val = argv[++r];
    }
    if (slot == &g->address && !*val)
      return ctl_usage_error(NULL, "invalid address '' for --socket");
    *slot = val;
  }
  argv[w] = NULL;
  *argc = w;
  return -1;
}

int main(int argc, char **argv) {
  static const struct option opts[] = {
    {"socket", required_argument, NULL, 'S'},
    {"token", required_argument, NULL, 'T'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
  };
  ctl_global g = {.address = NULL, .token = NULL};
  int c;
  opterr = 0;
  /* '+': options after the command belong to the command. */
  while ((c = getopt_long(argc, argv, "+:S:hV", opts, NULL)) != -1) {
    switch (c) {
    case 'S':
      if (!*optarg)
        return ctl_usage_error(NULL, "invalid address '' for --socket");
      g.address = optarg;
      break;
    case 'T':
      g.token = optarg;
      break;
    case 'h':
      print_help(stdout);
      return CTL_OK;
    case 'V':
      printf("fzctl %s\n", fz_client_version_string());
      return CTL_OK;
    case ':':
      return ctl_usage_error(NULL, "option '%s' needs a value", argv[optind - 1]);
    default:
      return ctl_usage_error(NULL, "unknown option '%s'", argv[optind - 1]);
    }
  }
  const char *name = optind < argc ? argv[optind] : "status";
  const ctl_command *cmd = ctl_find_command(name);
  if (!cmd)
    return ctl_usage_error(NULL, "unknown command '%s'", name);
  int sub_argc = optind < argc ? argc - optind : 1;
  char *status_argv[] = {(char *)"status", NULL};
  char **sub_argv = optind < argc ? argv + optind : status_argv;
  if (cmd->fn != cmd_help) {
    int rc = take_global_options(&g, &sub_argc, sub_argv);
    if (rc >= 0)
      return rc;
  }
  optind = 0; /* 0 makes glibc reinitialize getopt for the command's options */
  return cmd->fn(&g, sub_argc, sub_argv);
}
