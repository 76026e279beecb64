/*
 * fuzz_chain.c - libFuzzer target for the chain syntax users type
 * (`quant(eb=1e-3,mode=rel) | diff | bitshuffle | rze`).  Any text either
 * parses, or is refused with a message; a parsed chain prints as canonical
 * text that parses back to the same chain, and is checked against every
 * dtype without harm.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_text.h"
#include "engine.h"

/* Longer text than any chain the engine can hold is not worth the time. */
#define MAX_TEXT 2048

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size, MAX_TEXT);
  if (text == NULL)
    return 0;
  fze_chain c;
  char why[256] = "";
  if (fze_chain_parse(text, &c, why, sizeof why) < 0) {
    if (why[0] == '\0')
      abort(); /* a refusal must say why */
    free(text);
    return 0;
  }
  char canon[1024], again[1024];
  fze_chain_format(&c, canon, sizeof canon);
  fze_chain c2;
  if (fze_chain_parse(canon, &c2, why, sizeof why) < 0)
    abort(); /* the canonical text must parse */
  fze_chain_format(&c2, again, sizeof again);
  if (strcmp(canon, again) != 0 || c2.n != c.n)
    abort();
  for (int t = FZ_U8; t <= FZ_F64; t++) {
    why[0] = '\0';
    if (fze_chain_check(&c, (fz_dtype)t, why, sizeof why) < 0 && why[0] == '\0')
      abort();
  }
  free(text);
  return 0;
}
