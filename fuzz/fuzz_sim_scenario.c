/* SPDX-License-Identifier: MIT */
/* libFuzzer: the `linkd sim` scenario parser is total (no crash, no overflow: UBSan aborts on
 * signed overflow), never reads past the input (ASan: the copy below has no NUL after it),
 * names a line in every error (but "no tier: ..." and "no client: ...", which the file
 * lacks as a whole), and what it accepts is a scenario the engine can run: every
 * reference resolved, tiers calling only later tiers, windows and sizes within their bounds,
 * and no drop_expired that no caller could give a deadline to act on. */
#include "sim/sim.h"

#include <linkd/error.h>

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  char *text = malloc(size ? size : 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  static sim_scenario s;
  char err[256];
  memset(err, 'x', sizeof err);
  int rc = sim_scenario_parse(text, size, &s, err, sizeof err);
  free(text);
  if (rc == LK_EPARSE) {
    if (!memchr(err, '\0', sizeof err) ||
        (strncmp(err, "line ", 5) != 0 && strncmp(err, "no tier: ", 9) != 0 &&
         strncmp(err, "no client: ", 11) != 0))
      abort();
    return 0;
  }
  if (rc != LK_OK)
    abort();
  if (s.n_tiers < 1 || s.n_tiers > SIM_MAX_TIERS || s.n_groups < 1 || s.n_groups > SIM_MAX_GROUPS ||
      s.n_policies > SIM_MAX_POLICIES || s.n_triggers > SIM_MAX_TRIGGERS || s.window <= 0 ||
      s.window > s.duration || s.drain < 0 || (s.duration + s.drain) / s.window >= SIM_MAX_WINDOWS)
    abort();
  for (int t = 0; t < s.n_tiers; t++) {
    const sim_tier *tier = &s.tiers[t];
    if (tier->servers < 1 || tier->workers < 1 || tier->queue < 0)
      abort();
    if (tier->calls >= 0 && (tier->calls <= t || tier->calls >= s.n_tiers || tier->policy < 0 ||
                             tier->policy >= s.n_policies))
      abort();
  }
  bool any_propagates = false;
  for (int i = 0; i < s.n_policies; i++)
    any_propagates |= s.policies[i].propagate;
  for (int t = 0; t < s.n_tiers; t++) {
    if (!s.tiers[t].drop_expired)
      continue;
    bool called = false, acts = false;
    for (int g = 0; g < s.n_groups; g++)
      if (s.groups[g].target == t)
        called = true, acts |= any_propagates; /* --compare may put it on any policy */
    for (int u = 0; u < t; u++)
      if (s.tiers[u].calls == t)
        called = true, acts |= s.policies[s.tiers[u].policy].propagate;
    if (called && !acts)
      abort();
  }
  for (int g = 0; g < s.n_groups; g++) {
    const sim_group *gr = &s.groups[g];
    if (gr->target < 0 || gr->target >= s.n_tiers || gr->policy < 0 || gr->policy >= s.n_policies ||
        (!gr->closed && !(gr->rate > 0)))
      abort();
  }
  for (int i = 0; i < s.n_triggers; i++) {
    const sim_trigger *tr = &s.triggers[i];
    if (tr->to <= tr->from)
      abort();
    if (tr->kind == SIM_TRIG_BURST ? tr->group < 0 || tr->group >= s.n_groups
                                   : tr->tier < 0 || tr->tier >= s.n_tiers)
      abort();
  }
  return 0;
}
