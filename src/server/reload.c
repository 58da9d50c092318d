/* SPDX-License-Identifier: MIT */
/* reload.c: replacing the fault rules of a running server (SIGHUP re-reads the config file). */
#include "server_impl.h"

#include <linkd/error.h>

#include <stdio.h>
#include <stdlib.h>

int lk_server_replace_faults(lk_server *s, const char *const *specs, size_t n, uint64_t seed,
                             char *err, size_t errcap) {
  char scratch[256];
  if (!err || !errcap) {
    err = scratch;
    errcap = sizeof scratch;
  }
  err[0] = '\0';
  lk_fault_rule *rules = calloc(n ? n : 1, sizeof *rules);
  if (!rules)
    return LK_ENOMEM;
  /* All rules are parsed before any is replaced: a bad file leaves the running set alone. */
  for (size_t i = 0; i < n; i++) {
    char msg[160];
    if (lk_fault_rule_parse(specs[i], &rules[i], msg, sizeof msg) != LK_OK) {
      snprintf(err, errcap, "fault '%.200s': %s", specs[i], msg);
      free(rules);
      return LK_ECONFIG;
    }
  }
  /* one swap: a request decided meanwhile sees the old set or the new one, never none */
  int rc = LK_OK;
  if (lk_faults_replace(s->faults, rules, n, true, seed, NULL) != LK_OK) {
    snprintf(err, errcap, "%zu fault rules: at most %d", n, LK_FAULT_RULES_MAX);
    rc = LK_ECONFIG;
  }
  free(rules);
  return rc;
}
