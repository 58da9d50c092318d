/* SPDX-License-Identifier: MIT */
/* From merged settings to the lk_http_policy of one call. */
#ifndef LINKD_CLI_POLICY_H
#define LINKD_CLI_POLICY_H

#include "settings.h"

#include <linkd/http.h>

typedef struct cli_policy_error {
  bool from_flags; /* a flag took part: a usage error; otherwise the config file is at fault */
  char msg[256];
} cli_policy_error;

/* Builds the policy over lk_http_policy_init_default() from the merged settings `s`. When base
 * is given and max-delay is not, the cap is raised to the base if needed (a 5s base with the
 * default 2s cap means "5s"). Headers are not part of the policy. Returns 0, or -1 with *e filled.
 * The policy points into `s` (the idempotency key) and must not outlive it. */
int cli_settings_to_policy(const cli_settings *s, lk_http_policy *p, cli_policy_error *e);

#endif
