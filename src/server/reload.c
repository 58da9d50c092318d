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
  lk_faults_clear(s->faults);
  lk_faults_reseed(s->faults, seed);
  int rc = LK_OK;
  for (size_t i = 0; i < n; i++) {
    if (lk_faults_add(s->faults, &rules[i]) < 0) {
      snprintf(err, errcap, "too many fault rules (%zu added)", i);
      rc = LK_ECONFIG;
      break;
    }
  }
  free(rules);
  return rc;
}
