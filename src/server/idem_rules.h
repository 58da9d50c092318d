/* SPDX-License-Identifier: MIT */
/* idem_rules.h: Idempotency-Key rules (draft-ietf-httpapi-idempotency-key-header) that do not touch
 * the store: key syntax, caller identity, request fingerprints, and the table of keys whose first
 * request is still executing.
 *
 * Thread-safety: the parsers are pure; an lk_inflight is safe from many threads.
 */
#ifndef LINKD_SERVER_IDEM_RULES_H
#define LINKD_SERVER_IDEM_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IDEM_KEY_LEN_MAX 255
#define IDEM_TENANT_MAX 64

/* Parses an Idempotency-Key header value: either a structured-field string ("...", with \" and
 * \\ escapes) or a bare token; 1-255 characters of visible ASCII (0x21-0x7e, plus space inside
 * quotes). Writes the key (unquoted) into out (cap >= 256). 0 or LK_EPARSE. */
int idem_key_parse(const char *raw, char *out, size_t cap);

/* The caller's identity that scopes keys: "key:<first 16 bytes of SHA-256 of X-API-Key, hex>"
 * when an API key is given (the key itself is never stored), else "tenant:<X-Tenant>" (1-64 of
 * [A-Za-z0-9._-]), else "anonymous". 0 or LK_EPARSE (malformed tenant / empty API key). */
int idem_tenant(const char *api_key, const char *tenant, char *out, size_t cap);

/* SHA-256 over method, path and body, each length-prefixed so fields cannot run together. */
void idem_fingerprint(const char *method, const char *path, const void *body, size_t len,
                      uint8_t out[32]);

/* Keys currently being executed, per (tenant, key). */
typedef struct lk_inflight lk_inflight;
lk_inflight *lk_inflight_new(void);
void lk_inflight_free(lk_inflight *t);
/* true when the caller now owns (tenant, key); false when another request holds it (or OOM). */
bool lk_inflight_claim(lk_inflight *t, const char *tenant, const char *key);
void lk_inflight_release(lk_inflight *t, const char *tenant, const char *key);
/* Number of keys held (for tests and stats). */
size_t lk_inflight_count(lk_inflight *t);

#endif
