/* SPDX-License-Identifier: MIT */
/* config.c: lk_shared_config defaults and validation. */
#include <linkd/error.h>
#include <linkd/shared.h>

#include <stddef.h>
#include <string.h>

void lk_shared_config_init_default(lk_shared_config *c) {
  c->url = "redis://127.0.0.1:6379";
  c->prefix = NULL;
  c->fleet_size = 1;
  c->timeout = LK_MS(2);
  c->retry_interval = LK_MS(100);
  c->log = NULL;
  c->log_arg = NULL;
}

int lk_shared_config_validate(const lk_shared_config *c, const char **why) {
  const char *w = NULL;
  if (!c)
    w = "shared config is NULL";
  else if (!c->url || !*c->url)
    w = "shared url is missing";
  else if (!c->prefix || !*c->prefix || strlen(c->prefix) > 200)
    w = "shared prefix must be 1-200 bytes";
  else if (c->fleet_size < 1 || c->fleet_size > 100000)
    w = "shared fleet_size must be within [1, 100000]";
  else if (c->timeout < LK_NS_PER_US || c->timeout > LK_SEC(10))
    w = "shared timeout must be within [1 us, 10 s]";
  else if (c->retry_interval < LK_MS(1) || c->retry_interval > LK_SEC(60))
    w = "shared retry_interval must be within [1 ms, 60 s]";
  if (why)
    *why = w;
  return w ? LK_ECONFIG : LK_OK;
}
