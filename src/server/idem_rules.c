/* SPDX-License-Identifier: MIT */
/* idem_rules.c: key syntax, caller identity, fingerprints and the in-flight table. */
#include "idem_rules.h"

#include <linkd/error.h>

#include <nettle/sha2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int idem_key_parse(const char *raw, char *out, size_t cap) {
  if (!raw || cap < IDEM_KEY_LEN_MAX + 1)
    return LK_EPARSE;
  size_t n = 0;
  if (raw[0] == '"') {
    const char *p = raw + 1;
    for (;; p++) {
      if (*p == '\0')
        return LK_EPARSE; /* unterminated */
      if (*p == '"')
        break;
      char ch = *p;
      if (ch == '\\') {
        ch = *++p;
        if (ch != '"' && ch != '\\')
          return LK_EPARSE;
      } else if (ch < 0x20 || ch > 0x7e) {
        return LK_EPARSE;
      }
      if (n >= IDEM_KEY_LEN_MAX)
        return LK_EPARSE;
      out[n++] = ch;
    }
    if (p[1] != '\0')
      return LK_EPARSE;
  } else {
    for (const char *p = raw; *p; p++) {
      if (*p < 0x21 || *p > 0x7e || n >= IDEM_KEY_LEN_MAX)
        return LK_EPARSE;
      out[n++] = *p;
    }
  }
  if (n == 0)
    return LK_EPARSE;
  out[n] = '\0';
  return LK_OK;
}

int idem_tenant(const char *api_key, const char *tenant, char *out, size_t cap) {
  if (api_key) {
    if (!*api_key)
      return LK_EPARSE;
    /* SHA-256 (nettle); a digest can be cut short, which keeps the identity 32 hex digits. */
    struct sha256_ctx c;
    uint8_t d[16];
    sha256_init(&c);
    sha256_update(&c, strlen(api_key), (const uint8_t *)api_key);
    sha256_digest(&c, sizeof d, d);
    char hex[2 * sizeof d + 1];
    for (size_t i = 0; i < sizeof d; i++)
      snprintf(hex + 2 * i, 3, "%02x", d[i]);
    snprintf(out, cap, "key:%s", hex);
    return LK_OK;
  }
  if (tenant) {
    size_t n = strlen(tenant);
    if (n == 0 || n > IDEM_TENANT_MAX)
      return LK_EPARSE;
    for (size_t i = 0; i < n; i++) {
      char c = tenant[i];
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '.' || c == '_' || c == '-'))
        return LK_EPARSE;
    }
    snprintf(out, cap, "tenant:%s", tenant);
    return LK_OK;
  }
  snprintf(out, cap, "anonymous");
  return LK_OK;
}

static void update_field(struct sha256_ctx *c, const void *p, size_t len) {
  uint8_t n[8];
  for (int i = 0; i < 8; i++)
    n[i] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
  sha256_update(c, sizeof n, n);
  sha256_update(c, len, p);
}

void idem_fingerprint(const char *method, const char *path, const void *body, size_t len,
                      uint8_t out[32]) {
  struct sha256_ctx c;
  sha256_init(&c);
  update_field(&c, method, strlen(method));
  update_field(&c, path, strlen(path));
  update_field(&c, body ? body : "", len);
  sha256_digest(&c, SHA256_DIGEST_SIZE, out);
}

/* --- in-flight table: chained hash set of "tenant\nkey" under one mutex. Held only for the
 * duration of a request, so it stays small. ---------------------------------------------------*/
#define INFLIGHT_BUCKETS 256

typedef struct entry {
  struct entry *next;
  uint64_t hash;
  char id[]; /* tenant '\n' key */
} entry;

struct lk_inflight {
  pthread_mutex_t mu;
  size_t count;
  entry *b[INFLIGHT_BUCKETS];
};

static uint64_t fnv1a(const char *a, const char *b) {
  uint64_t h = 1469598103934665603ULL;
  for (; *a; a++)
    h = (h ^ (uint8_t)*a) * 1099511628211ULL;
  h = (h ^ '\n') * 1099511628211ULL;
  for (; *b; b++)
    h = (h ^ (uint8_t)*b) * 1099511628211ULL;
  return h;
}

static bool same(const entry *e, uint64_t h, const char *tenant, const char *key) {
  size_t tl = strlen(tenant);
  return e->hash == h && !strncmp(e->id, tenant, tl) && e->id[tl] == '\n' &&
         !strcmp(e->id + tl + 1, key);
}

lk_inflight *lk_inflight_new(void) {
  lk_inflight *t = calloc(1, sizeof *t);
  if (t)
    pthread_mutex_init(&t->mu, NULL);
  return t;
}

void lk_inflight_free(lk_inflight *t) {
  if (!t)
    return;
  for (size_t i = 0; i < INFLIGHT_BUCKETS; i++)
    for (entry *e = t->b[i], *n; e; e = n) {
      n = e->next;
      free(e);
    }
  pthread_mutex_destroy(&t->mu);
  free(t);
}

bool lk_inflight_claim(lk_inflight *t, const char *tenant, const char *key) {
  uint64_t h = fnv1a(tenant, key);
  size_t tl = strlen(tenant), kl = strlen(key);
  entry *ne = malloc(sizeof *ne + tl + kl + 2);
  if (!ne)
    return false;
  ne->hash = h;
  memcpy(ne->id, tenant, tl);
  ne->id[tl] = '\n';
  memcpy(ne->id + tl + 1, key, kl + 1);
  pthread_mutex_lock(&t->mu);
  entry **slot = &t->b[h % INFLIGHT_BUCKETS];
  for (entry *e = *slot; e; e = e->next) {
    if (same(e, h, tenant, key)) {
      pthread_mutex_unlock(&t->mu);
      free(ne);
      return false;
    }
  }
  ne->next = *slot;
  *slot = ne;
  t->count++;
  pthread_mutex_unlock(&t->mu);
  return true;
}

void lk_inflight_release(lk_inflight *t, const char *tenant, const char *key) {
  uint64_t h = fnv1a(tenant, key);
  entry *found = NULL;
  pthread_mutex_lock(&t->mu);
  for (entry **pp = &t->b[h % INFLIGHT_BUCKETS]; *pp; pp = &(*pp)->next) {
    if (same(*pp, h, tenant, key)) {
      found = *pp;
      *pp = found->next;
      t->count--;
      break;
    }
  }
  pthread_mutex_unlock(&t->mu);
  free(found);
}

size_t lk_inflight_count(lk_inflight *t) {
  pthread_mutex_lock(&t->mu);
  size_t n = t->count;
  pthread_mutex_unlock(&t->mu);
  return n;
}
