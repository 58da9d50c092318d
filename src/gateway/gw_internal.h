/* SPDX-License-Identifier: MIT */
/* Between the gateway configuration's modules: spec parsers and formatters, and the hook by
 * which the last reference to a configuration releases its runtime entries. */
#ifndef LINKD_GW_INTERNAL_H
#define LINKD_GW_INTERNAL_H

#include "gw_config.h"

/* A duration in the largest unit that states it exactly ("90s", "1500ms", "7ns"), so that a
 * dumped configuration loads back to the same values (lk_duration_format rounds). */
char *lk_gw_dur_exact(int64_t ns, char *buf, size_t cap);

/* The protection specs of a route (docs/gateway.md). parse: 0, or -1 with a message in m;
 * *on false for "none". format: the canonical spec, which parses back to the same config. */
int lk_gw_breaker_parse(const char *v, bool *on, lk_breaker_config *c, char *m, size_t cap);
char *lk_gw_breaker_format(bool on, const lk_breaker_config *c, char *buf, size_t cap);
int lk_gw_shared_parse(const char *v, lk_gw_shared *out, char *m, size_t cap);
char *lk_gw_shared_format(const lk_gw_shared *s, char *buf, size_t cap);
int lk_gw_limiter_parse(const char *v, bool *on, lk_limiter_config *c, char *m, size_t cap);
char *lk_gw_limiter_format(bool on, const lk_limiter_config *c, char *buf, size_t cap);
int lk_gw_bulkhead_parse(const char *v, bool *on, lk_bulkhead_config *c, char *m, size_t cap);
char *lk_gw_bulkhead_format(bool on, const lk_bulkhead_config *c, char *buf, size_t cap);

/* Releases what lk_gw_runtime_attach gave `c` (no-op if it was never attached). Called once, by
 * the last lk_gw_config_unref. */
void lk_gw_runtime_detach(lk_gw_config *c);

#endif
