/*
 * fuzz_text.h - what the targets for text parsers share: the input as a
 * NUL-terminated string, refused (NULL) past the size worth a fuzzer's time.
 */
#ifndef FZ_FUZZ_TEXT_H
#define FZ_FUZZ_TEXT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline char *fuzz_text(const uint8_t *data, size_t size, size_t max) {
  if (size > max)
    return NULL;
  char *text = malloc(size + 1);
  if (text == NULL)
    return NULL;
  memcpy(text, data, size);
  text[size] = '\0';
  return text;
}

#endif
