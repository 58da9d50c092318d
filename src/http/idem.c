/* SPDX-License-Identifier: MIT */
/* Idempotency-Key generation (UUIDv4 from getrandom) and validation. */
#include <linkd/error.h>
#include <linkd/idem.h>
#include <linkd/rand.h>

#include <string.h>
#include <strings.h>

int lk_uuid4(char out[LK_UUID_STR_LEN]) {
  static const char hex[] = "0123456789abcdef";
  unsigned char b[16];
  if (!out)
    return LK_EINVAL;
  if (lk_os_random(b, sizeof b) != LK_OK)
    return LK_ESYS;
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 9562 variant */
  char *p = out;
  for (int i = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10)
      *p++ = '-';
    *p++ = hex[b[i] >> 4];
    *p++ = hex[b[i] & 15];
  }
  *p = '\0';
  return LK_OK;
}

bool lk_idem_key_valid(const char *key, size_t len) {
  if (!key || len == 0 || len >= LK_IDEM_KEY_MAX)
    return false;
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)key[i] < 0x21 || (unsigned char)key[i] > 0x7e)
      return false;
  return true;
}

int lk_idem_key_compose(const char *tenant, const char *key, char *buf, size_t cap) {
  if (!buf || !key)
    return LK_EINVAL;
  size_t tl = tenant ? strlen(tenant) : 0, kl = strlen(key);
  if (!lk_idem_key_valid(key, kl) || (tl && !lk_idem_key_valid(tenant, tl)))
    return LK_EINVAL;
  size_t total = tl ? tl + 1 + kl : kl;
  if (total >= LK_IDEM_KEY_MAX)
    return LK_EINVAL;
  if (total + 1 > cap)
    return LK_ETOOBIG;
  if (tl) {
    memcpy(buf, tenant, tl);
    buf[tl] = ':';
    memcpy(buf + tl + 1, key, kl + 1);
  } else {
    memcpy(buf, key, kl + 1);
  }
  return (int)total;
}

int lk_idem_key_new(const char *tenant, char *buf, size_t cap) {
  char u[LK_UUID_STR_LEN];
  if (!buf)
    return LK_EINVAL;
  size_t tl = tenant ? strlen(tenant) : 0;
  if (tl && !lk_idem_key_valid(tenant, tl))
    return LK_EINVAL;
  if ((tl ? tl + 1 : 0) + (LK_UUID_STR_LEN - 1) >= LK_IDEM_KEY_MAX)
    return LK_EINVAL;
  if ((tl ? tl + 1 : 0) + LK_UUID_STR_LEN > cap)
    return LK_ETOOBIG;
  if (lk_uuid4(u) != LK_OK)
    return LK_ESYS;
  return lk_idem_key_compose(tenant, u, buf, cap);
}

static const char *const mode_names[] = {"none", "auto", "always", "key"};

const char *lk_idem_mode_name(lk_idem_mode m) {
  return (unsigned)m < 4 ? mode_names[m] : "unknown";
}

int lk_idem_mode_parse(const char *s, lk_idem_mode *out) {
  if (!s || !out)
    return LK_EINVAL;
  for (unsigned i = 0; i < 4; i++)
    if (strcasecmp(s, mode_names[i]) == 0) {
      *out = (lk_idem_mode)i;
      return LK_OK;
    }
  return LK_EINVAL;
}
