/* sha256.h: SHA-256 (FIPS 180-4), for request fingerprints and API-key identities.
 * Thread-safety: a context belongs to one thread; lk_sha256() is pure. */
#ifndef LINKD_SERVER_SHA256_H
#define LINKD_SERVER_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct lk_sha256_ctx {
  uint32_t h[8];
  uint64_t total; /* bytes hashed so far */
  uint8_t buf[64];
  size_t buflen;
} lk_sha256_ctx;

void lk_sha256_init(lk_sha256_ctx *c);
void lk_sha256_update(lk_sha256_ctx *c, const void *data, size_t len);
void lk_sha256_final(lk_sha256_ctx *c, uint8_t out[32]);
/* One-shot digest of `len` bytes. */
void lk_sha256(const void *data, size_t len, uint8_t out[32]);
/* Lower-case hex of `n` bytes into out (2n + 1 bytes with the NUL). */
void lk_hex(const uint8_t *in, size_t n, char *out);

#endif
