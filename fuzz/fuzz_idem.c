/* SPDX-License-Identifier: MIT */
/* libFuzzer: libraryd's Idempotency-Key rules. The input is split at its first NUL: the first
 * part is an Idempotency-Key header value, and, for the caller identity, an X-API-Key; the second
 * part an X-Tenant. Accepted keys are 1-255 visible ASCII characters (space allowed only when
 * quoted); identities have one of the three documented shapes. */
#include "idem_rules.h"

#include <linkd/error.h>

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  char *s = malloc(size + 2);
  if (!s)
    return 0;
  memcpy(s, data, size);
  s[size] = s[size + 1] = '\0';
  const char *a = s, *b = s + strlen(s) + 1;
  bool has_b = (size_t)(b - s) <= size;

  char key[IDEM_KEY_LEN_MAX + 1];
  int rc = idem_key_parse(a, key, sizeof key);
  if (rc == LK_OK) {
    size_t n = strlen(key);
    if (n == 0 || n > IDEM_KEY_LEN_MAX)
      abort();
    for (size_t i = 0; i < n; i++)
      if (key[i] < 0x20 || key[i] > 0x7e || (key[i] == ' ' && a[0] != '"'))
        abort();
  } else if (rc != LK_EPARSE) {
    abort();
  }

  char who[IDEM_TENANT_MAX + 16];
  /* API key (with or without a tenant), tenant only, neither. */
  for (int mode = 0; mode < 3; mode++) {
    const char *api = mode == 0 ? a : NULL;
    const char *tenant = mode == 2 ? NULL : (has_b ? b : a);
    memset(who, 0, sizeof who);
    rc = idem_tenant(api, tenant, who, sizeof who);
    if (rc == LK_OK) {
      size_t n = strlen(who);
      bool shape = (!strncmp(who, "key:", 4) && n == 4 + 32) ||
                   (!strncmp(who, "tenant:", 7) && n > 7 && n <= 7 + IDEM_TENANT_MAX) ||
                   !strcmp(who, "anonymous");
      if (!shape)
        abort();
    } else if (rc != LK_EPARSE) {
      abort();
    }
  }
  free(s);
  return 0;
}
