/*
 * warm.c - `fzctl warm`: asks the daemon to prepare plans before the jobs
 * that need them (fz_client_warm), so that the first compression of a shape
 * finds its plan made and checked.  One plan from the options submit takes
 * (-t -s -p -e -m), and any number from a JSON file written as the daemon's
 * "warm" setting is (an array of {"pipeline", "dtype", "shape", "eb",
 * "mode"}), sent FZ_CLIENT_WARM_MAX at a time.  One line per plan; the exit
 * status is 2 when any plan failed.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fz.h"
#include "fzctl.h"

/* Plans from the file and the options; the strings point into the JSON
 * tree or argv, which outlive the requests. */
#define WARM_FILE_MAX 4096
#define WARM_FILE_BYTES (1u << 20)

typedef struct plan_list {
  fz_warm_plan *p;
  size_t n, cap;
} plan_list;

static fz_warm_plan *plan_add(plan_list *l) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 16;
    fz_warm_plan *p = realloc(l->p, cap * sizeof *p);
    if (p == NULL)
      return NULL;
    l->p = p;
    l->cap = cap;
  }
  memset(&l->p[l->n], 0, sizeof l->p[0]);
  return &l->p[l->n++];
}

/* One entry of the file; false after printing an error naming the file,
 * the index and the key. */
static bool file_entry(const char *path, int i, const cJSON *o, fz_warm_plan *p) {
  if (!cJSON_IsObject(o)) {
    ctl_err("%s: entry %d: expected an object with \"dtype\" and \"shape\"", path, i);
    return false;
  }
  for (const cJSON *k = o->child; k != NULL; k = k->next) {
    fz_dtype t;
    fz_eb_mode m;
    if (strcmp(k->string, "dtype") == 0 && cJSON_IsString(k) &&
        fz_dtype_parse(k->valuestring, &t) == 0) {
      p->dtype = k->valuestring;
    } else if (strcmp(k->string, "pipeline") == 0 && cJSON_IsString(k) &&
               k->valuestring[0]) {
      p->pipeline = k->valuestring;
    } else if (strcmp(k->string, "mode") == 0 && cJSON_IsString(k) &&
               fz_eb_mode_parse(k->valuestring, &m) == 0) {
      p->mode = k->valuestring;
    } else if (strcmp(k->string, "eb") == 0 && cJSON_IsNumber(k)) {
      p->eb = k->valuedouble;
    } else if (strcmp(k->string, "shape") == 0 && cJSON_IsArray(k) &&
               cJSON_GetArraySize(k) >= 1 && cJSON_GetArraySize(k) <= FZ_CLIENT_MAX_DIMS) {
      p->ndims = 0;
      for (const cJSON *d = k->child; d != NULL; d = d->next) {
        if (!cJSON_IsNumber(d) || d->valuedouble < 1 || d->valuedouble > 9.007199254740992e15 ||
            d->valuedouble != (double)(uint64_t)d->valuedouble) {
          ctl_err("%s: entry %d: \"shape\"[%u] must be a positive integer", path, i, p->ndims);
          return false;
        }
        p->shape[p->ndims++] = (uint64_t)d->valuedouble;
      }
    } else {
      char *v = cJSON_PrintUnformatted(k);
      ctl_err("%s: entry %d: bad \"%s\": %s", path, i, k->string, v ? v : "?");
      cJSON_free(v);
      return false;
    }
  }
  if (p->dtype == NULL || p->ndims == 0) {
    ctl_err("%s: entry %d: \"%s\" is required", path, i, p->dtype ? "shape" : "dtype");
    return false;
  }
  return true;
}

static cJSON *read_file(const char *path, plan_list *l) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    ctl_err("%s: %s", path, strerror(errno));
    return NULL;
  }
  char *text = malloc(WARM_FILE_BYTES + 1);
  size_t n = text ? fread(text, 1, WARM_FILE_BYTES + 1, f) : 0;
  fclose(f);
  if (text == NULL || n > WARM_FILE_BYTES) {
    ctl_err("%s: %s", path, text ? "larger than 1 MiB" : "out of memory");
    free(text);
    return NULL;
  }
  text[n] = '\0';
  cJSON *root = cJSON_ParseWithLength(text, n);
  free(text);
  if (root == NULL || !cJSON_IsArray(root) || cJSON_GetArraySize(root) < 1 ||
      cJSON_GetArraySize(root) > WARM_FILE_MAX) {
    ctl_err("%s: expected a JSON array of 1 to %d plans, as in the daemon's \"warm\" setting",
            path, WARM_FILE_MAX);
    cJSON_Delete(root);
    return NULL;
  }
  int i = 0;
  for (const cJSON *o = root->child; o != NULL; o = o->next, i++) {
    fz_warm_plan *p = plan_add(l);
    if (p == NULL || !file_entry(path, i, o, p)) {
      if (p == NULL)
        ctl_err("out of memory");
      cJSON_Delete(root);
      return NULL;
    }
  }
  return root;
}

static void print_shape(FILE *f, const fz_warm_plan *p) {
  for (unsigned d = 0; d < p->ndims; d++)
    fprintf(f, "%s%" PRIu64, d ? "x" : "", p->shape[d]);
}

static void print_result(const fz_warm_plan *p, const fz_warm_result *r, size_t index,
                         bool json) {
  if (json) {
    printf("{\"index\":%zu,\"dtype\":", index);
    ctl_json_str(stdout, p->dtype);
    printf(",\"chain\":");
    ctl_json_str(stdout, r->chain);
    if (r->status < 0) {
      printf(",\"error\":");
      ctl_json_str(stdout, fz_err_name(r->status));
      printf(",\"message\":");
      ctl_json_str(stdout, r->message);
      printf("}\n");
    } else {
      printf(",\"cached\":%s,\"ms\":%.3f,\"identical\":true}\n", r->cached ? "true" : "false",
             r->ms);
    }
    return;
  }
  printf("%-6s %s ", r->status < 0 ? "error" : r->cached ? "cached" : "made", p->dtype);
  print_shape(stdout, p);
  if (r->status < 0)
    printf(" %s: %s (%s)\n", p->pipeline ? p->pipeline : "balanced", r->message,
           fz_err_name(r->status));
  else
    printf(" in %.1f ms, identical to the CPU engine: %s\n", r->ms, r->chain);
}

int ctl_cmd_warm(const ctl_global *g, int argc, char **argv) {
  static const struct option opts[] = {
    {"dtype", required_argument, NULL, 't'},
    {"shape", required_argument, NULL, 's'},
    {"pipeline", required_argument, NULL, 'p'},
    {"eb", required_argument, NULL, 'e'},
    {"mode", required_argument, NULL, 'm'},
    {"file", required_argument, NULL, 'f'},
    {"json", no_argument, NULL, 'J'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
  };
  fz_warm_plan one = {0};
  const char *file = NULL;
  bool json = false, has_one = false;
  int c;
  while ((c = getopt_long(argc, argv, ":t:s:p:e:m:f:h", opts, NULL)) != -1) {
    fz_dtype t;
    fz_eb_mode m;
    switch (c) {
    case 't':
      if (fz_dtype_parse(optarg, &t) < 0)
        return ctl_usage_error("warm", "invalid dtype '%s' (f32 f64 u8 i8 u16 i16 u32 i32 u64 i64)", optarg);
      one.dtype = fz_dtype_name(t);
      has_one = true;
      break;
    case 's':
      if (!ctl_parse_shape(optarg, &one.ndims, one.shape))
        return CTL_USAGE;
      has_one = true;
      break;
    case 'p':
      if (!*optarg)
        return ctl_usage_error("warm", "invalid pipeline '' for --pipeline");
      one.pipeline = optarg;
      has_one = true;
      break;
    case 'e':
      if (!ctl_parse_double("--eb", optarg, &one.eb))
        return CTL_USAGE;
      has_one = true;
      break;
    case 'm':
      if (fz_eb_mode_parse(optarg, &m) < 0)
        return ctl_usage_error("warm", "invalid mode '%s' (abs, rel or pwrel)", optarg);
      one.mode = fz_eb_mode_name(m);
      has_one = true;
      break;
    case 'f':
      file = optarg;
      break;
    case 'J':
      json = true;
      break;
    case 'h':
      ctl_print_usage(stdout, ctl_find_command("warm"));
      return CTL_OK;
    case ':':
      return ctl_usage_error("warm", "option '%s' needs a value", argv[optind - 1]);
    default:
      return ctl_usage_error("warm", "unknown option '%s' for warm", argv[optind - 1]);
    }
  }
  if (optind < argc)
    return ctl_usage_error("warm", "warm takes no file argument, got '%s' (plans come from "
                           "the options or --file)", argv[optind]);
  if (has_one && (one.dtype == NULL || one.ndims == 0))
    return ctl_usage_error("warm", "a plan needs --dtype and --shape");
  if (!has_one && file == NULL)
    return ctl_usage_error("warm", "give a plan (--dtype, --shape, ...) or --file PLANS.json");

  plan_list l = {NULL, 0, 0};
  cJSON *tree = NULL;
  int rc = CTL_OK;
  if (file != NULL && (tree = read_file(file, &l)) == NULL) {
    free(l.p);
    return CTL_USAGE;
  }
  fz_warm_plan *p;
  if (has_one && (p = plan_add(&l)) != NULL)
    *p = one;
  fz_client *cl = NULL;
  fz_warm_result res[FZ_CLIENT_WARM_MAX];
  if ((rc = ctl_connect(g, &cl)) != CTL_OK)
    goto out;
  for (size_t at = 0; at < l.n; at += FZ_CLIENT_WARM_MAX) {
    size_t n = l.n - at < FZ_CLIENT_WARM_MAX ? l.n - at : FZ_CLIENT_WARM_MAX;
    int err = fz_client_warm(cl, l.p + at, n, res);
    if (err < 0) {
      ctl_err("warm: %s (%s)", fz_client_errmsg(cl)[0] ? fz_client_errmsg(cl) : fz_strerror(err),
              fz_err_name(err));
      rc = CTL_SERVER;
      break;
    }
    for (size_t i = 0; i < n; i++) {
      print_result(&l.p[at + i], &res[i], at + i, json);
      if (res[i].status < 0)
        rc = CTL_SERVER;
    }
  }
  fz_client_close(cl);
out:
  cJSON_Delete(tree);
  free(l.p);
  return rc;
}
