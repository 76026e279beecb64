/*
 * fuzz_config.c - libFuzzer target for fzd's configuration reader (JSON
 * through cJSON, then the settings table).  Any text is either taken, giving
 * a configuration that passes the table's bounds and can be applied as a
 * reload, or refused with a message naming the file.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_text.h"
#include "config.h"
#include "log.h"

#define MAX_TEXT (64u << 10)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size, MAX_TEXT);
  if (text == NULL)
    return 0;
  fzd_log_set_level(FZD_LOG_ERROR); /* reloads log every change at info */
  fzd_config def, cfg;
  fzd_config_defaults(&def);
  cfg = def;
  char why[512] = "";
  int err = fzd_config_parse(text, size, "fuzz.json", &cfg, why, sizeof why);
  if (err < 0) {
    if (strncmp(why, "fuzz.json: ", 11) != 0)
      abort(); /* a refusal names the file and says why */
  } else {
    /* What was taken is taken again the same way, and applies as a reload. */
    fzd_config again = def;
    if (fzd_config_parse(text, size, "fuzz.json", &again, why, sizeof why) < 0 ||
        fzd_config_apply_reload(&again, &cfg) != 0)
      abort();
    fzd_config cur = def;
    fzd_config_apply_reload(&cur, &cfg);
  }
  free(text);
  return 0;
}
