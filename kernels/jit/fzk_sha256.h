/*
 * fzk_sha256.h - SHA-256 (FIPS 180-4), for the keys and checksums of the JIT
 * module cache.  Plain C, no CUDA: it builds in every preset.
 *
 * Use fzk_sha256() for one buffer, or init / update (any number of times,
 * any lengths) / final for a message in pieces; the digest is the same.
 */
#ifndef FZK_SHA256_H
#define FZK_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define FZK_SHA256_LEN 32

typedef struct fzk_sha256_ctx {
  uint32_t h[8];
  uint64_t bytes;       /* message length so far */
  unsigned char buf[64]; /* the partial block */
  size_t fill;
} fzk_sha256_ctx;

void fzk_sha256_init(fzk_sha256_ctx *s);
void fzk_sha256_update(fzk_sha256_ctx *s, const void *p, size_t n);
/* Writes the digest; the context must be initialised again before reuse. */
void fzk_sha256_final(fzk_sha256_ctx *s, unsigned char out[FZK_SHA256_LEN]);
void fzk_sha256(const void *p, size_t n, unsigned char out[FZK_SHA256_LEN]);

#endif
