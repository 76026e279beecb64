/*
 * fuzz_wire.c - the libFuzzer target for the daemon's input path: the bytes a
 * client sends go through fzp_scan() and, when it accepts a prefix,
 * fzp_parse() and the typed lookups the daemon runs on params, exactly in
 * the order conn.c uses them.  A scanned length must never exceed the input,
 * and whatever the scanner lets through must parse without reading past it.
 * The same bytes are also fed to a resumed scan in pieces (as a socket
 * delivers them), which must give the same verdict as the one-shot scan.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fzp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fzp_limits lim = {.max_message = 1 << 16, .max_depth = 16, .max_container = 4096,
                    .max_objects = 2048};
  size_t off = 0;
  while (off < size) {
    uint64_t need = 0;
    int64_t r = fzp_scan_ex(data + off, size - off, &lim, &need);
    /* Pieces of 1, 2, 3... bytes: each call sees the prefix so far. */
    fzp_scan_state st;
    fzp_scan_reset(&st);
    int64_t rr = 0;
    uint64_t rneed = 0;
    for (size_t have = 0, step = 1; rr == 0 && have < size - off; step++) {
      have = have + step < size - off ? have + step : size - off;
      rr = fzp_scan_resume(&st, data + off, have, &lim, &rneed);
    }
    if (rr != r || (r == 0 && rneed != need))
      abort();
    if (r <= 0) {
      if (r == 0 && (need <= size - off || need > lim.max_message))
        abort(); /* the hint must ask for more, within the limit */
      break;
    }
    if ((uint64_t)r > size - off)
      abort();
    /* Parse from an exact-size copy so ASan sees any overread. */
    uint8_t *copy = malloc((size_t)r);
    if (copy == NULL)
      return 0;
    memcpy(copy, data + off, (size_t)r);
    fzp_message msg;
    char why[128];
    if (fzp_parse(copy, (size_t)r, &msg, why, sizeof(why)) == 0) {
      const msgpack_object *p = msg.type == FZP_RESPONSE ? &msg.result : &msg.params;
      const char *s;
      uint32_t len;
      const void *bin;
      uint64_t u;
      int64_t i;
      double d;
      bool b;
      const msgpack_object *o;
      fzp_get_str(p, "dtype", &s, &len);
      fzp_get_bin(p, "data", &bin, &len);
      fzp_get_u64(p, "nfds", &u);
      fzp_get_i64(p, "version", &i);
      fzp_get_f64(p, "eb", &d);
      fzp_get_bool(p, "verify", &b);
      fzp_get_obj(p, "shape", &o);
      int code;
      fzp_error_decode(&msg.error, &code, &s, &len);
      fzp_message_free(&msg);
    }
    free(copy);
    off += (size_t)r;
  }
  return 0;
}
