/*
 * config.c - the settings table and the JSON loader.  A setting exists only
 * as a row of `settings[]`: its default is written there as the JSON text a
 * user would write and goes through the same validation as the file, so a
 * default can never be a value the loader would refuse.  Every error names
 * the file, the key and the offending value, because the person reading it
 * is editing that file.
 */
#include "config.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fz_error.h"
#include "log.h"

enum stype { T_BOOL, T_UINT, T_STR, T_ENUM, T_MODE, T_GPU, T_DIR, T_WARM };

typedef struct choice {
  const char *name;
  uint64_t value;
} choice;

typedef struct setting {
  const char *name;
  enum stype type;
  size_t offset;
  uint64_t min, max; /* numbers: bounds; strings: max length */
  const char *def;   /* JSON text */
  bool reloadable;
  const choice *choices; /* T_ENUM, NULL-name terminated */
  const char *description;
} setting;

/* T_DIR: null (the setting's derived default) or a string; T_WARM: an array
 * of plan entries.  One setting of each, so their fields are named here. */
#define DIR_FLAG(cfg) ((cfg)->jit_cache_dir_derived)

static const choice backend_choices[] = {{"auto", FZD_BACKEND_AUTO},
                                         {"cpu", FZD_BACKEND_CPU},
                                         {"gpu", FZD_BACKEND_GPU},
                                         {NULL, 0}};
static const choice level_choices[] = {{"error", FZD_LOG_ERROR},
                                       {"warning", FZD_LOG_WARNING},
                                       {"info", FZD_LOG_INFO},
                                       {"debug", FZD_LOG_DEBUG},
                                       {NULL, 0}};

#define OFF(f) offsetof(fzd_config, f)
#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

static const setting settings[] = {
    {"socket_path", T_STR, OFF(socket_path), 1, 107, "\"/run/fzd/fzd.sock\"",
     false, NULL,
     "Unix socket the daemon listens on (ignored when systemd passes a socket)"},
    {"socket_mode", T_MODE, OFF(socket_mode), 0, 0777, "\"0660\"", false, NULL,
     "permissions of the Unix socket, an octal string; world-writable modes are refused"},
    {"socket_group", T_STR, OFF(socket_group), 0, 64, "\"\"", false, NULL,
     "group that owns the Unix socket; empty keeps the daemon's group"},
    {"tcp_enabled", T_BOOL, OFF(tcp_enabled), 0, 1, "false", false, NULL,
     "also listen on TCP (inline data only, no descriptors)"},
    {"tcp_address", T_STR, OFF(tcp_address), 1, 64, "\"127.0.0.1\"", false,
     NULL, "numeric IPv4 or IPv6 address of the TCP listener"},
    {"tcp_port", T_UINT, OFF(tcp_port), 0, 65535, "7878", false, NULL,
     "TCP port; 0 picks a free one (reported in the log and the STATUS= line)"},
    {"tcp_token", T_STR, OFF(tcp_token), 0, 255, "\"\"", true, NULL,
     "shared secret TCP clients must send in hello; empty means none"},
    {"backend", T_ENUM, OFF(backend), 0, 0, "\"auto\"", false, backend_choices,
     "auto (the GPU when there is one, else the CPU), gpu (fail without one) or cpu"},
    {"gpu", T_GPU, OFF(gpu), 0, 64, "\"0\"", false, NULL,
     "GPU to pin: a CUDA index or a UUID string (GPU backend only)"},
    {"gpu_memory_limit", T_UINT, OFF(gpu_memory_limit), 0, UINT64_C(1) << 50, "0",
     false, NULL,
     "device bytes the workers' buffers and plans may hold together (GPU backend); "
     "beyond it a job gets EGPUOOM; 0 means no limit but the GPU's"},
    {"workers", T_UINT, OFF(workers), 0, 1024, "0", false, NULL,
     "worker threads; 0 means one per online CPU (CPU backend) or 4 (GPU backend, one stream each)"},
    {"queue_capacity", T_UINT, OFF(queue_capacity), 1, 1048576, "256", true,
     NULL, "jobs waiting for a worker; beyond it requests get EBUSY"},
    {"max_inflight_per_connection", T_UINT, OFF(max_inflight_per_connection),
     1, 65536, "64", true, NULL,
     "accepted but unanswered jobs per connection; beyond it the daemon stops reading it"},
    {"max_connections", T_UINT, OFF(max_connections), 1, 1048576, "1024", true,
     NULL, "open connections on the Unix socket; more are refused with EBUSY "
     "(TCP connections are counted apart)"},
    {"max_connections_per_user", T_UINT, OFF(max_connections_per_user), 1, 1048576, "256",
     true, NULL,
     "open connections on the Unix socket from one user (the peer's uid); more are "
     "refused with EBUSY"},
    {"max_tcp_connections", T_UINT, OFF(max_tcp_connections), 1, 1048576, "256", true,
     NULL, "open TCP connections; more are refused with EBUSY"},
    {"max_unauthenticated", T_UINT, OFF(max_unauthenticated), 1, 65536, "16", true,
     NULL, "TCP connections that have not completed hello; more are refused with EBUSY"},
    {"tcp_handshake_timeout_ms", T_UINT, OFF(tcp_handshake_timeout_ms), 100, 3600000,
     "3000", true, NULL,
     "a TCP connection that has not completed hello (with its token) this long after "
     "connecting gets EHANDSHAKE and is closed"},
    {"max_reply_bytes_per_connection", T_UINT, OFF(max_reply_bytes_per_connection),
     64 * KiB, UINT64_C(1) << 40, "67108864", true, NULL,
     "bytes of replies a connection may owe (unsent, or reserved for the inline results "
     "of its jobs in flight); beyond it the daemon stops reading it until it reads"},
    {"max_reply_bytes_total", T_UINT, OFF(max_reply_bytes_total), 64 * KiB,
     UINT64_C(1) << 40, "134217728", true, NULL,
     "bytes of replies all connections may owe together; beyond it new jobs get EBUSY"},
    {"max_fds_per_connection", T_UINT, OFF(max_fds_per_connection), 32, 65536, "64",
     true, NULL,
     "descriptors a connection may have passed and not yet got back (waiting for their "
     "message or held by its jobs); near it the daemon stops reading it"},
    {"max_fds_total", T_UINT, OFF(max_fds_total), 0, UINT64_C(1) << 24, "0", true, NULL,
     "descriptors passed by all connections that the daemon holds at once; beyond it a "
     "message's descriptors get EBUSY; 0 means half the RLIMIT_NOFILE soft limit"},
    {"handshake_timeout_ms", T_UINT, OFF(handshake_timeout_ms), 0, 3600000, "10000",
     true, NULL,
     "a connection that has not completed hello this long after connecting gets "
     "EHANDSHAKE and is closed; 0 waits forever"},
    {"message_timeout_ms", T_UINT, OFF(message_timeout_ms), 100, 3600000, "10000", true,
     NULL,
     "a connection that sends part of a message and then nothing for this long gets "
     "ETIMEDOUT and is closed"},
    {"max_message_bytes", T_UINT, OFF(max_message_bytes), 64 * KiB, 4 * GiB,
     "67112960", true, NULL,
     "largest message accepted (64 MiB + 4 KiB); larger ones get EMSGSIZE and a close"},
    {"max_inline_bytes", T_UINT, OFF(max_inline_bytes), 0, 4 * GiB, "67108864",
     true, NULL,
     "largest inline data in a request or a result (must stay 4 KiB below max_message_bytes)"},
    {"max_job_bytes", T_UINT, OFF(max_job_bytes), 1, UINT64_C(1) << 40,
     "4294967296", true, NULL,
     "largest input or output of one job passed by descriptor"},
    {"memory_limit", T_UINT, OFF(memory_limit), 0, UINT64_C(1) << 50, "0", false,
     NULL,
     "host bytes the running jobs' buffers may hold together (CPU backend); a job that "
     "cannot fit gets EBUSY while others run, ENOMEM when it never can; 0 means 3/4 of "
     "the physical memory (or of the cgroup's limit when lower)"},
    {"max_mapped_bytes", T_UINT, OFF(max_mapped_bytes), 0, UINT64_C(1) << 46,
     "1099511627776", true, NULL,
     "address space of sealed-memfd inputs mapped in place, all connections together; "
     "past it (or past max_mapped_bytes_per_connection) inputs are read with pread"},
    {"max_mapped_bytes_per_connection", T_UINT, OFF(max_mapped_bytes_per_connection), 0,
     UINT64_C(1) << 46, "68719476736", true, NULL,
     "address space of sealed-memfd inputs mapped in place for one connection"},
    {"plan_cache_entries", T_UINT, OFF(plan_cache_entries), 0, 4096, "16",
     false, NULL, "finalized plans the workers share (LRU), besides one slot per worker"},
    {"plan_cache_bytes", T_UINT, OFF(plan_cache_bytes), 0, UINT64_C(1) << 50, "2147483648",
     false, NULL,
     "memory the kept plans may hold together (device workspace on the GPU, work buffers "
     "on the CPU); idle plans are dropped, least recently used first, to stay under it, "
     "and a plan that cannot fit serves its one job and is then dropped; 0 means no byte "
     "bound, only plan_cache_entries"},
    {"warm", T_WARM, 0, 0, FZD_WARM_MAX, "[]", false, NULL,
     "plans prepared before READY=1: an array of {\"pipeline\", \"dtype\", \"shape\", "
     "\"eb\", \"mode\"} as in a compress request; each is made, and a synthetic field "
     "of its shape compressed and decompressed by the backend and by the CPU engine must "
     "agree byte for byte, or fzd exits"},
    {"cpu_affinity", T_BOOL, OFF(cpu_affinity), 0, 1, "false", false, NULL,
     "pin each worker thread to a core of its own (both backends): for dedicated nodes; "
     "on shared machines pinned workers queue behind other processes"},
    {"busy_poll_us", T_UINT, OFF(busy_poll_us), 0, 1000000, "0", false, NULL,
     "how long a worker looks at the queue, and the loop at its sockets, without "
     "sleeping after a job (a small job's answer and its client's next request come "
     "within tens of microseconds; waking a thread costs several); each spinning "
     "thread keeps a core busy meanwhile.  0 means the backend's choice: 250 us for the "
     "workers and 300 us for the loop on the GPU, none on the CPU"},
    {"jit", T_BOOL, OFF(jit), 0, 1, "true", false, NULL,
     "compile fused kernels for each plan's chain at run time (NVRTC; GPU backend); false "
     "runs the ahead-of-time kernels only"},
    {"jit_cache_dir", T_DIR, OFF(jit_cache_dir), 0, 200, "null", false, NULL,
     "directory of the compiled-module cache; null means $STATE_DIRECTORY/jit under "
     "systemd, else $XDG_CACHE_HOME/fzd/jit or $HOME/.cache/fzd/jit; \"\" keeps modules "
     "in memory only"},
    {"jit_cache_max_bytes", T_UINT, OFF(jit_cache_max_bytes), 1048576, UINT64_C(1) << 44,
     "268435456", false, NULL,
     "bytes the module cache directory may hold; the oldest modules go first"},
    {"log_level", T_ENUM, OFF(log_level), 0, 0, "\"info\"", true, level_choices,
     "error, warning, info or debug"},
    {"watchdog", T_BOOL, OFF(watchdog), 0, 1, "true", false, NULL,
     "send WATCHDOG=1 every WATCHDOG_USEC/2 when systemd asks for it"},
    {"shutdown_timeout_s", T_UINT, OFF(shutdown_timeout_s), 0, 86400, "60",
     true, NULL,
     "on SIGTERM, how long to wait for accepted jobs and their replies; 0 waits forever"},
};
#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

static void *field(const fzd_config *cfg, const setting *s) {
  return (char *)cfg + s->offset;
}

static int fail(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t why_len, const char *fmt, ...) {
  if (why != NULL && why_len > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
  }
  return FZ_ECONFIG;
}

/* The value as the user wrote it, for error messages; shortened. */
static void quote_value(const cJSON *v, char *buf, size_t len) {
  char *text = cJSON_PrintUnformatted(v);
  snprintf(buf, len, "%s", text ? text : "?");
  if (text != NULL && strlen(text) >= len && len > 4)
    memcpy(buf + len - 4, "...", 4);
  cJSON_free(text);
}

static bool as_uint(const cJSON *v, uint64_t *out) {
  if (!cJSON_IsNumber(v))
    return false;
  double d = v->valuedouble;
  if (!(d >= 0) || d != floor(d) || d > 9007199254740992.0)
    return false;
  *out = (uint64_t)d;
  return true;
}

/* One entry of "warm" from its JSON object: the keys of a compress
 * request that shape a plan.  The engine's checks come later (cross_check,
 * when max_job_bytes is known). */
static int warm_entry(const cJSON *o, fzd_warm_entry *e, char *why, size_t why_len) {
  memset(e, 0, sizeof *e);
  e->eb_mode = FZ_EB_REL;
  if (!cJSON_IsObject(o))
    return fail(why, why_len, "expected an object with \"dtype\", \"shape\" and "
                "optionally \"pipeline\", \"eb\", \"mode\"");
  bool has_dtype = false, has_shape = false;
  for (const cJSON *k = o->child; k != NULL; k = k->next) {
    char q[80];
    quote_value(k, q, sizeof q);
    if (strcmp(k->string, "dtype") == 0) {
      if (!cJSON_IsString(k) || fz_dtype_parse(k->valuestring, &e->dtype) < 0)
        return fail(why, why_len, "\"dtype\": bad value %s: expected a dtype such as \"f32\"",
                    q);
      has_dtype = true;
    } else if (strcmp(k->string, "shape") == 0) {
      int n = cJSON_IsArray(k) ? cJSON_GetArraySize(k) : -1;
      if (n < 1 || n > FZ_MAX_DIMS)
        return fail(why, why_len, "\"shape\": bad value %s: expected an array of 1 to %d "
                    "extents", q, FZ_MAX_DIMS);
      e->ndims = (unsigned)n;
      unsigned i = 0;
      for (const cJSON *d = k->child; d != NULL; d = d->next, i++)
        if (!as_uint(d, &e->dims[i]) || e->dims[i] == 0)
          return fail(why, why_len, "\"shape\": bad value %s: shape[%u] must be a positive "
                      "integer", q, i);
      has_shape = true;
    } else if (strcmp(k->string, "eb") == 0) {
      if (!cJSON_IsNumber(k))
        return fail(why, why_len, "\"eb\": bad value %s: expected a number", q);
      e->eb = k->valuedouble;
    } else if (strcmp(k->string, "mode") == 0) {
      if (!cJSON_IsString(k) || fz_eb_mode_parse(k->valuestring, &e->eb_mode) < 0)
        return fail(why, why_len, "\"mode\": bad value %s: expected \"abs\", \"rel\" or "
                    "\"pwrel\"", q);
    } else if (strcmp(k->string, "pipeline") == 0) {
      if (!cJSON_IsString(k) || strlen(k->valuestring) >= sizeof e->pipeline)
        return fail(why, why_len, "\"pipeline\": bad value %s: expected a preset or a chain "
                    "of fewer than %zu bytes", q, sizeof e->pipeline);
      memcpy(e->pipeline, k->valuestring, strlen(k->valuestring));
    } else {
      return fail(why, why_len, "unknown key \"%s\" (value %s); an entry takes \"pipeline\", "
                  "\"dtype\", \"shape\", \"eb\" and \"mode\"", k->string, q);
    }
  }
  if (!has_dtype || !has_shape)
    return fail(why, why_len, "\"%s\" is required", has_dtype ? "shape" : "dtype");
  return 0;
}

static int set_warm(fzd_config *cfg, const setting *s, const cJSON *v, const char *what,
                    char *why, size_t why_len) {
  int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
  if (n < 0 || (uint64_t)n > s->max) {
    char q[80];
    quote_value(v, q, sizeof q);
    return fail(why, why_len, "%s: setting \"%s\": bad value %s: expected an array of at "
                "most %llu plan entries", what, s->name, q, (unsigned long long)s->max);
  }
  memset(cfg->warm, 0, sizeof cfg->warm);
  cfg->nwarm = 0;
  unsigned i = 0;
  for (const cJSON *o = v->child; o != NULL; o = o->next, i++) {
    char sub[400];
    if (warm_entry(o, &cfg->warm[i], sub, sizeof sub) < 0)
      return fail(why, why_len, "%s: setting \"%s\": entry %u: %s", what, s->name, i, sub);
  }
  cfg->nwarm = (uint64_t)n;
  return 0;
}

/* Validates one value and stores it.  `what` says where it came from. */
static int set_value(fzd_config *cfg, const setting *s, const cJSON *v,
                     const char *what, char *why, size_t why_len) {
  char q[80];
  quote_value(v, q, sizeof(q));
  /* The token is a secret: an error about it (which a reload logs) must
   * not carry it. */
  if (strcmp(s->name, "tcp_token") == 0 && cJSON_IsString(v))
    snprintf(q, sizeof q, "(a string of %zu bytes, not shown)", strlen(v->valuestring));
  void *dst = field(cfg, s);
  uint64_t u;
  switch (s->type) {
  case T_BOOL:
    if (!cJSON_IsBool(v))
      return fail(why, why_len, "%s: setting \"%s\": bad value %s: expected true or false",
                  what, s->name, q);
    *(bool *)dst = cJSON_IsTrue(v);
    return 0;
  case T_UINT:
    if (!as_uint(v, &u) || u < s->min || u > s->max)
      return fail(why, why_len,
                  "%s: setting \"%s\": bad value %s: expected an integer in [%llu, %llu]",
                  what, s->name, q, (unsigned long long)s->min,
                  (unsigned long long)s->max);
    *(uint64_t *)dst = u;
    return 0;
  case T_GPU:
    if (as_uint(v, &u) && u < 1024) {
      snprintf(dst, FZD_CONFIG_STR, "%llu", (unsigned long long)u);
      return 0;
    }
    /* Not an index, so it must be a UUID string. */
    /* fall through */
  case T_STR: {
    if (!cJSON_IsString(v))
      return fail(why, why_len, "%s: setting \"%s\": bad value %s: expected a string%s",
                  what, s->name, q, s->type == T_GPU ? " or an index" : "");
    size_t n = strlen(v->valuestring);
    if (n < s->min || n > s->max)
      return fail(why, why_len,
                  "%s: setting \"%s\": bad value %s: length must be in [%llu, %llu]",
                  what, s->name, q, (unsigned long long)s->min,
                  (unsigned long long)s->max);
    memcpy(dst, v->valuestring, n + 1);
    return 0;
  }
  case T_ENUM:
    if (cJSON_IsString(v))
      for (const choice *c = s->choices; c->name != NULL; c++)
        if (strcmp(c->name, v->valuestring) == 0) {
          *(uint64_t *)dst = c->value;
          return 0;
        }
    {
      char names[128] = "";
      for (const choice *c = s->choices; c->name != NULL; c++) {
        strncat(names, names[0] ? ", " : "", sizeof(names) - strlen(names) - 1);
        strncat(names, c->name, sizeof(names) - strlen(names) - 1);
      }
      return fail(why, why_len, "%s: setting \"%s\": bad value %s: expected one of %s",
                  what, s->name, q, names);
    }
  case T_MODE: {
    char *end = NULL;
    unsigned long m = 0;
    if (cJSON_IsString(v) && v->valuestring[0] != '\0' &&
        strspn(v->valuestring, "01234567") == strlen(v->valuestring)) {
      errno = 0;
      m = strtoul(v->valuestring, &end, 8);
    }
    if (end == NULL || *end != '\0' || errno != 0 || m > s->max)
      return fail(why, why_len,
                  "%s: setting \"%s\": bad value %s: expected an octal mode string such as \"0660\"",
                  what, s->name, q);
    *(uint64_t *)dst = m;
    return 0;
  }
  case T_DIR:
    if (cJSON_IsNull(v)) {
      DIR_FLAG(cfg) = true;
      memset(dst, 0, FZD_CONFIG_STR);
      return 0;
    }
    if (!cJSON_IsString(v) || strlen(v->valuestring) > s->max ||
        (v->valuestring[0] != '\0' && v->valuestring[0] != '/'))
      return fail(why, why_len,
                  "%s: setting \"%s\": bad value %s: expected null, \"\" or an absolute "
                  "path of at most %llu bytes", what, s->name, q, (unsigned long long)s->max);
    DIR_FLAG(cfg) = false;
    memset(dst, 0, FZD_CONFIG_STR);
    memcpy(dst, v->valuestring, strlen(v->valuestring));
    return 0;
  case T_WARM:
    return set_warm(cfg, s, v, what, why, why_len);
  }
  return fail(why, why_len, "%s: setting \"%s\": unsupported type", what, s->name);
}

static const setting *find_setting(const char *name) {
  for (size_t i = 0; i < NSETTINGS; i++)
    if (strcmp(settings[i].name, name) == 0)
      return &settings[i];
  return NULL;
}

void fzd_config_defaults(fzd_config *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  for (size_t i = 0; i < NSETTINGS; i++) {
    cJSON *v = cJSON_Parse(settings[i].def);
    char why[256];
    /* The table is ours; a default the loader refuses is a bug caught by the
     * config tests, which check every default round-trips. */
    if (v == NULL || set_value(cfg, &settings[i], v, "default", why, sizeof(why)) < 0)
      fzd_err("config: bad default for \"%s\"", settings[i].name);
    cJSON_Delete(v);
  }
}

static int cross_check(const fzd_config *cfg, const char *path, char *why,
                       size_t why_len) {
  /* Numeric only: a name would need a resolver at start (and a choice among
   * its addresses), and "localhost" may not mean the loopback. */
  unsigned char addr[sizeof(struct in6_addr)];
  if (inet_pton(AF_INET, cfg->tcp_address, addr) != 1 &&
      inet_pton(AF_INET6, cfg->tcp_address, addr) != 1)
    return fail(why, why_len,
                "%s: setting \"tcp_address\": bad value \"%s\": expected a numeric IPv4 or "
                "IPv6 address such as \"127.0.0.1\" or \"::1\" (names are not resolved)",
                path, cfg->tcp_address);
  /* A relative path would name a different socket for every working
   * directory fzd or a client starts in. */
  if (cfg->socket_path[0] != '/')
    return fail(why, why_len,
                "%s: setting \"socket_path\": bad value \"%s\": expected an absolute path",
                path, cfg->socket_path);
  if (cfg->socket_mode & 0002)
    return fail(why, why_len,
                "%s: setting \"socket_mode\": bad value \"%04llo\": world-writable; any "
                "local user could use fzd (use a group, e.g. \"0660\" with socket_group)",
                path, (unsigned long long)cfg->socket_mode);
  if (cfg->max_inline_bytes + 4096 > cfg->max_message_bytes)
    return fail(why, why_len,
                "%s: setting \"max_inline_bytes\": bad value %llu: must be at most "
                "max_message_bytes - 4096 (%llu)",
                path, (unsigned long long)cfg->max_inline_bytes,
                (unsigned long long)(cfg->max_message_bytes - 4096));
  for (unsigned i = 0; i < cfg->nwarm; i++) {
    char sub[400];
    if (fzd_warm_entry_check(&cfg->warm[i], cfg->max_job_bytes, sub, sizeof sub) < 0)
      return fail(why, why_len, "%s: setting \"warm\": entry %u: %s", path, i, sub);
  }
  return 0;
}

uint64_t fzd_warm_entry_bytes(const fzd_warm_entry *e) {
  uint64_t bytes = fz_dtype_size(e->dtype);
  for (unsigned i = 0; i < e->ndims; i++) {
    if (e->dims[i] == 0 || bytes > UINT64_MAX / e->dims[i])
      return 0;
    bytes *= e->dims[i];
  }
  return e->ndims > 0 ? bytes : 0;
}

int fzd_warm_entry_check(const fzd_warm_entry *e, uint64_t max_bytes, char *why,
                         size_t why_len) {
  uint64_t bytes = fzd_warm_entry_bytes(e);
  if (bytes == 0) {
    snprintf(why, why_len, "\"shape\": the shape's bytes overflow 64 bits");
    return FZ_ESHAPE;
  }
  if (bytes > max_bytes) {
    snprintf(why, why_len, "\"shape\": a field of this shape is %llu bytes, more than "
             "max_job_bytes (%llu)", (unsigned long long)bytes, (unsigned long long)max_bytes);
    return FZ_EMSGSIZE;
  }
  /* The engine's validation is the plan itself: what a job with these
   * parameters would be told.  Its tables grow with the shape, whose
   * extents were checked above, so a smaller one of the same rank stands
   * in for it (the plan made at start or by the worker is the real one). */
  fz_params p;
  fz_params_init(&p);
  p.dtype = e->dtype;
  p.ndims = e->ndims;
  for (unsigned i = 0; i < e->ndims; i++)
    p.dims[i] = e->dims[i] < 64 ? e->dims[i] : 64;
  p.eb = e->eb;
  p.eb_mode = e->eb_mode;
  p.pipeline = e->pipeline[0] ? e->pipeline : NULL;
  p.threads = 1;
  fz_plan *plan = NULL;
  char sub[256] = "";
  int err = fz_plan_create(&p, &plan, sub, sizeof sub);
  fz_plan_destroy(plan);
  if (err < 0)
    snprintf(why, why_len, "%s", sub[0] ? sub : fz_strerror(err));
  return err < 0 ? err : 0;
}

void fzd_config_jit_dir(const fzd_config *cfg, char *out, size_t len) {
  const char *v;
  if (!cfg->jit_cache_dir_derived)
    snprintf(out, len, "%s", cfg->jit_cache_dir);
  else if ((v = getenv("STATE_DIRECTORY")) != NULL && v[0] == '/')
    /* systemd may list several, colon-separated: the first is ours. */
    snprintf(out, len, "%.*s/jit", (int)strcspn(v, ":"), v);
  else if ((v = getenv("XDG_CACHE_HOME")) != NULL && v[0] == '/')
    snprintf(out, len, "%s/fzd/jit", v);
  else if ((v = getenv("HOME")) != NULL && v[0] == '/')
    snprintf(out, len, "%s/.cache/fzd/jit", v);
  else
    snprintf(out, len, "%s", "");
}

#define CONFIG_FILE_MAX (1u << 20)

int fzd_config_load(const char *path, fzd_config *cfg, char *why, size_t why_len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return fail(why, why_len, "%s: cannot open: %s", path, strerror(errno));
  char *text = malloc(CONFIG_FILE_MAX + 1);
  if (text == NULL) {
    fclose(f);
    return fail(why, why_len, "%s: out of memory", path);
  }
  size_t n = fread(text, 1, CONFIG_FILE_MAX + 1, f);
  int rerr = ferror(f);
  fclose(f);
  if (rerr || n > CONFIG_FILE_MAX) {
    free(text);
    return fail(why, why_len, "%s: %s", path,
                rerr ? "read error" : "larger than 1 MiB");
  }
  text[n] = '\0';
  int err = fzd_config_parse(text, n, path, cfg, why, why_len);
  free(text);
  return err;
}

/* The offset of the first \u0000 escape of the JSON text, or -1.  cJSON
 * keeps strings NUL-terminated, so "ab\u0000cd" would reach fzd as "ab": a
 * token or a path cut short without a word.  Escapes only occur inside
 * strings, and an escaped backslash is skipped whole, so this finds exactly
 * the NULs a string would contain. */
static long find_nul_escape(const char *text, size_t n) {
  for (size_t i = 0; i + 1 < n; i++) {
    if (text[i] != '\\')
      continue;
    if (text[i + 1] == 'u' && i + 5 < n && strncmp(text + i + 2, "0000", 4) == 0)
      return (long)i;
    i++; /* the escaped character, a backslash included */
  }
  return -1;
}

int fzd_config_parse(const char *text, size_t n, const char *path, fzd_config *cfg,
                     char *why, size_t why_len) {
  long nul = find_nul_escape(text, n);
  if (nul >= 0) {
    size_t line = 1;
    for (long i = 0; i < nul; i++)
      line += text[i] == '\n';
    return fail(why, why_len, "%s: a string holds \\u0000 (line %zu): NUL bytes are refused, "
                "since fzd would cut the value there", path, line);
  }
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, n + 1, &end, true);
  if (root == NULL) {
    size_t at = end != NULL && end >= text ? (size_t)(end - text) : 0;
    size_t line = 1;
    for (size_t i = 0; i < at && i < n; i++)
      line += text[i] == '\n';
    return fail(why, why_len, "%s: not valid JSON (near line %zu, byte %zu)",
                path, line, at);
  }
  int err = 0;
  if (!cJSON_IsObject(root)) {
    err = fail(why, why_len, "%s: the top level must be a JSON object", path);
    goto out;
  }
  fzd_config next = *cfg;
  for (const cJSON *item = root->child; item != NULL; item = item->next) {
    const setting *s = find_setting(item->string);
    if (s == NULL) {
      char q[80];
      quote_value(item, q, sizeof(q));
      err = fail(why, why_len, "%s: unknown setting \"%s\" (value %s)", path,
                 item->string, q);
      goto out;
    }
    for (const cJSON *prev = root->child; prev != item; prev = prev->next)
      if (strcmp(prev->string, item->string) == 0) {
        err = fail(why, why_len, "%s: setting \"%s\" appears twice", path,
                   item->string);
        goto out;
      }
    err = set_value(&next, s, item, path, why, why_len);
    if (err < 0)
      goto out;
    if (strcmp(s->name, "socket_path") == 0)
      next.socket_path_set = true;
  }
  err = cross_check(&next, path, why, why_len);
  if (err == 0)
    *cfg = next;
out:
  cJSON_Delete(root);
  return err;
}

static void value_text(const fzd_config *cfg, const setting *s, char *buf,
                       size_t len) {
  const void *p = field(cfg, s);
  switch (s->type) {
  case T_BOOL:
    snprintf(buf, len, "%s", *(const bool *)p ? "true" : "false");
    break;
  case T_UINT:
    snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)p);
    break;
  case T_MODE:
    snprintf(buf, len, "\"%04llo\"", (unsigned long long)*(const uint64_t *)p);
    break;
  case T_ENUM:
    snprintf(buf, len, "\"?\"");
    for (const choice *c = s->choices; c->name != NULL; c++)
      if (c->value == *(const uint64_t *)p)
        snprintf(buf, len, "\"%s\"", c->name);
    break;
  case T_DIR:
    if (DIR_FLAG(cfg))
      snprintf(buf, len, "null");
    else
      snprintf(buf, len, "\"%s\"", (const char *)p);
    break;
  case T_WARM:
    snprintf(buf, len, "%llu entries", (unsigned long long)cfg->nwarm);
    break;
  case T_STR:
  case T_GPU:
    /* The token is a secret: say that it changed, never what it is. */
    if (strcmp(s->name, "tcp_token") == 0)
      snprintf(buf, len, "%s", ((const char *)p)[0] ? "(set)" : "(empty)");
    else
      snprintf(buf, len, "\"%s\"", (const char *)p);
    break;
  }
}

static bool same_value(const fzd_config *a, const fzd_config *b, const setting *s) {
  switch (s->type) {
  case T_BOOL:
    return *(const bool *)field(a, s) == *(const bool *)field(b, s);
  case T_STR:
  case T_GPU:
    return strcmp(field(a, s), field(b, s)) == 0;
  case T_DIR:
    return DIR_FLAG(a) == DIR_FLAG(b) && strcmp(field(a, s), field(b, s)) == 0;
  case T_WARM:
    return a->nwarm == b->nwarm && memcmp(a->warm, b->warm, sizeof a->warm) == 0;
  default:
    return *(const uint64_t *)field(a, s) == *(const uint64_t *)field(b, s);
  }
}

unsigned fzd_config_apply_reload(fzd_config *cur, const fzd_config *next) {
  unsigned changed = 0;
  for (size_t i = 0; i < NSETTINGS; i++) {
    const setting *s = &settings[i];
    if (same_value(cur, next, s))
      continue;
    char was[FZD_CONFIG_STR + 8], now[FZD_CONFIG_STR + 8];
    value_text(cur, s, was, sizeof(was));
    value_text(next, s, now, sizeof(now));
    changed++;
    if (!s->reloadable) {
      fzd_warn("config: \"%s\" changed (%s -> %s) but needs a restart to take effect",
               s->name, was, now);
      continue;
    }
    switch (s->type) {
    case T_DIR:
    case T_WARM:
      break; /* not reloadable */
    case T_BOOL:
      *(bool *)field(cur, s) = *(const bool *)field(next, s);
      break;
    case T_STR:
    case T_GPU:
      memcpy(field(cur, s), field(next, s), FZD_CONFIG_STR);
      break;
    default:
      *(uint64_t *)field(cur, s) = *(const uint64_t *)field(next, s);
      break;
    }
    fzd_info("config: \"%s\" reloaded: %s -> %s", s->name, was, now);
  }
  return changed;
}

void fzd_config_print_help(FILE *out) {
  static const char *type_names[] = {"bool",          "integer",      "string",
                                     "choice",        "octal string", "index or UUID",
                                     "path or null",  "array"};
  fprintf(out, "Settings (keys of the JSON config file):\n");
  for (size_t i = 0; i < NSETTINGS; i++) {
    const setting *s = &settings[i];
    fprintf(out, "  %-28s %s, default %s%s\n      %s\n", s->name,
            type_names[s->type], s->def, s->reloadable ? ", reloadable" : "",
            s->description);
  }
}

const char *fzd_backend_name(uint64_t backend) {
  for (const choice *c = backend_choices; c->name != NULL; c++)
    if (c->value == backend)
      return c->name;
  return "?";
}
