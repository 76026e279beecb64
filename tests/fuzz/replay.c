/*
 * replay.c - runs the fuzz target over every file of a corpus directory (and
 * over every prefix of each file), so the target is exercised by ctest on
 * machines without clang's libFuzzer.  Exit 0 when every input ran; a crash
 * or abort in the target fails the test.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  DIR *d = opendir(argv[1]);
  if (d == NULL) {
    perror(argv[1]);
    return 2;
  }
  unsigned files = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", argv[1], e->d_name);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
      perror(path);
      closedir(d);
      return 2;
    }
    uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    for (size_t i = 0; i <= n; i++) {
      /* Each prefix from an exact-size copy, so overreads are caught. */
      uint8_t *copy = malloc(i ? i : 1);
      if (copy == NULL)
        return 2;
      memcpy(copy, buf, i);
      LLVMFuzzerTestOneInput(copy, i);
      free(copy);
    }
    files++;
  }
  closedir(d);
  if (files == 0) {
    fprintf(stderr, "%s: empty corpus\n", argv[1]);
    return 1;
  }
  printf("replayed %u corpus files\n", files);
  return 0;
}
