/* SPDX-License-Identifier: MIT */
/* --budget: a retry budget for the call, from a one-line spec.
 *
 *   none                                  no budget (the default)
 *   ratio:PERCENT[%][:min=N][:ttl=DUR]    retries <= PERCENT % of requests in a window of DUR
 *                                         (10s) plus a floor of N retries per second (10)
 *   tokens:MAX[:RATIO]                    gRPC throttling: MAX tokens, a failure takes 1, a
 *                                         success gives RATIO (0.1) back, retries only while
 *                                         tokens > MAX / 2
 *   quota:CAPACITY[:RETRY_COST[:TIMEOUT_COST]]   AWS SDK retry quota: CAPACITY units, a retry
 *                                         costs RETRY_COST (5), after a timeout TIMEOUT_COST (10)
 * See linkd/budget.h for the exact rules. One linkd process makes one logical call, so the
 * budget starts full for it: strict settings (ratio with min=0, tokens:2, a small quota) show
 * how a budget stops retries. */
#ifndef LINKD_CLI_BUDGET_SPEC_H
#define LINKD_CLI_BUDGET_SPEC_H

#include <linkd/budget.h>

#include <stdbool.h>
#include <stddef.h>

typedef struct cli_budget_spec {
  bool enabled;
  lk_budget_kind kind;
  lk_budget_ratio_config ratio;
  lk_budget_token_config token;
  lk_budget_quota_config quota;
} cli_budget_spec;

/* Parses and validates a spec. 0, or -1 with a message in err. */
int cli_budget_parse(const char *s, cli_budget_spec *out, char *err, size_t cap);
/* The spec in canonical form with every value spelled out ("ratio:20%:min=10:ttl=10s"). */
char *cli_budget_format(const cli_budget_spec *b, char *buf, size_t cap);
/* Makes the budget (NULL in *out when not enabled). 0, or the core's error (LK_ENOMEM, or
 * LK_ECONFIG for a spec its validator refuses) with a message. */
int cli_budget_new(const cli_budget_spec *b, lk_budget **out, char *err, size_t cap);

#endif
