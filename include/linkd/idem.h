/* SPDX-License-Identifier: MIT */
/* linkd/idem.h: Idempotency-Key generation and validation.
 *
 * One key per logical operation: it is generated (or taken from the caller) once, before the first
 * attempt, and every attempt sends it unchanged, so the server can recognise retries of the same
 * operation. A new key per attempt would defeat the purpose (seed 000, "错误二").
 *
 * Keys are UUIDv4 (RFC 9562, 122 random bits from getrandom) in lower-case 8-4-4-4-12 form,
 * optionally prefixed with a tenant: "<tenant>:<uuid>". A valid key is 1..LK_IDEM_KEY_MAX-1 bytes
 * of visible ASCII (0x21..0x7E), so it can never inject a header line.
 *
 * Thread-safety: all functions are thread-safe (no shared state).
 */
#ifndef LINKD_IDEM_H
#define LINKD_IDEM_H

#include <linkd/common.h>

LK_BEGIN_DECLS

/* Buffer size for any valid key, NUL included. */
#define LK_IDEM_KEY_MAX 256
/* Buffer size for a bare UUID string, NUL included. */
#define LK_UUID_STR_LEN 37

/* When the HTTP layer attaches an Idempotency-Key (lk_http_policy.idem_mode). */
typedef enum lk_idem_mode {
  LK_IDEM_NONE,   /* never (default): a key helps only when the server honours it */
  LK_IDEM_AUTO,   /* generate one for every non-idempotent method (POST, PATCH, unknown) */
  LK_IDEM_ALWAYS, /* generate one for every request, whatever the method */
  LK_IDEM_KEY     /* send the caller's key (lk_http_policy.idem_key) */
} lk_idem_mode;

/* Writes a fresh UUIDv4 as 36 characters + NUL into `out` (LK_UUID_STR_LEN bytes).
 * Returns LK_OK, LK_EINVAL (out NULL) or LK_ESYS (the kernel gave no entropy; `out` untouched). */
LK_EXPORT int lk_uuid4(char out[LK_UUID_STR_LEN]);

/* Makes a key: "<tenant>:<uuid4>", or just "<uuid4>" when tenant is NULL or "".
 * Writes at most `cap` bytes including the NUL. Returns the key length, or LK_EINVAL (buf NULL, or
 * tenant not valid key text), LK_ETOOBIG (cap too small; buf untouched), LK_ESYS (no entropy). */
LK_EXPORT int lk_idem_key_new(const char *tenant, char *buf, size_t cap);

/* Prefixes a caller's key with a tenant: "<tenant>:<key>" (just the key when tenant is NULL or "").
 * Returns the length, or LK_EINVAL (key or result not valid) / LK_ETOOBIG. */
LK_EXPORT int lk_idem_key_compose(const char *tenant, const char *key, char *buf, size_t cap);

/* true if `key` (len bytes, no NUL needed) is a valid key: 1..LK_IDEM_KEY_MAX-1 bytes of visible
 * ASCII. NULL is not valid. */
LK_EXPORT bool lk_idem_key_valid(const char *key, size_t len);

/* "none" / "auto" / "always" / "key"; the parser is case-insensitive: 0 or LK_EINVAL. */
LK_EXPORT const char *lk_idem_mode_name(lk_idem_mode m);
LK_EXPORT int lk_idem_mode_parse(const char *s, lk_idem_mode *out);

LK_END_DECLS

#endif
