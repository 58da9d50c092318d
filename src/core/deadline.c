/* SPDX-License-Identifier: MIT */
#include <linkd/deadline.h>
#include <linkd/error.h>

#include "deadline_inline.h"
#include "sat.h"

#include <stdio.h>

lk_deadline lk_deadline_after(int64_t now, int64_t budget) {
  lk_deadline d = {lk__deadline_after_at(now, budget)};
  return d;
}

lk_deadline lk_deadline_none(void) {
  lk_deadline d = {LK_DEADLINE_NONE};
  return d;
}

int64_t lk_deadline_remaining(lk_deadline d, int64_t now) {
  return lk__deadline_remaining(d.at, now);
}

/* LK_DEADLINE_NONE never expires, not even at now == INT64_MAX (where lk_deadline_remaining
 * still says INT64_MAX): the two never disagree. */
bool lk_deadline_expired(lk_deadline d, int64_t now) {
  return d.at != LK_DEADLINE_NONE && now >= d.at;
}

lk_deadline lk_deadline_min(lk_deadline a, lk_deadline b) { return a.at <= b.at ? a : b; }

lk_deadline lk_deadline_child(lk_deadline parent, int64_t reserve) {
  if (reserve <= 0 || parent.at == LK_DEADLINE_NONE)
    return parent;
  lk_deadline d = {lk_sat_sub(parent.at, reserve)};
  return d;
}

int64_t lk_attempt_timeout(int64_t cap, int64_t remaining) {
  return lk__attempt_timeout(cap, remaining);
}

/* --- wire forms ---------------------------------------------------------------------------- */

static const struct {
  char unit;
  int64_t ns;
} grpc_units[] = {{'n', 1},
                  {'u', LK_NS_PER_US},
                  {'m', LK_NS_PER_MS},
                  {'S', LK_NS_PER_S},
                  {'M', 60 * LK_NS_PER_S},
                  {'H', 3600 * LK_NS_PER_S}};

#define GRPC_MAX_VALUE INT64_C(99999999) /* 8 digits */

int lk_grpc_timeout_format(int64_t ns, char *buf, size_t cap) {
  if (!buf)
    return LK_EINVAL;
  if (ns < 0)
    ns = 0;
  for (size_t i = 0; i < sizeof grpc_units / sizeof grpc_units[0]; i++) {
    int64_t unit = grpc_units[i].ns;
    /* Round up, as gRPC does: a positive remainder never reaches the receiver as 0 (passed);
     * it gains less than one unit, under 1/99999 of the value past the first unit (the finer
     * unit's 8 digits did not hold it: 100000001 ns is 100001u, 999 ns more). */
    int64_t v = ns / unit + (ns % unit != 0);
    /* Hours stop at the largest value that still parses back into int64 ns. */
    if (grpc_units[i].unit == 'H' && v > INT64_MAX / unit)
      v = INT64_MAX / unit;
    if (v <= GRPC_MAX_VALUE) {
      int n = snprintf(buf, cap, "%lld%c", (long long)v, grpc_units[i].unit);
      return (n < 0 || (size_t)n >= cap) ? LK_ETOOBIG : n;
    }
  }
  return LK_ERANGE; /* unreachable: int64 ns always fits in 8 digits of hours */
}

/* Parses 1..maxdigits ASCII digits exactly filling s[0..len). */
static int parse_digits(const char *s, size_t len, size_t maxdigits, int64_t *out) {
  if (len == 0 || len > maxdigits)
    return LK_EPARSE;
  int64_t v = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9')
      return LK_EPARSE;
    int d = s[i] - '0';
    if (v > (INT64_MAX - d) / 10)
      return LK_ERANGE;
    v = v * 10 + d;
  }
  *out = v;
  return LK_OK;
}

int lk_grpc_timeout_parse(const char *s, size_t len, int64_t *ns) {
  if (!s || !ns)
    return LK_EINVAL;
  if (len < 2)
    return LK_EPARSE;
  char unit = s[len - 1];
  int64_t mult = 0;
  for (size_t i = 0; i < sizeof grpc_units / sizeof grpc_units[0]; i++)
    if (grpc_units[i].unit == unit)
      mult = grpc_units[i].ns;
  if (mult == 0)
    return LK_EPARSE;
  int64_t v;
  int rc = parse_digits(s, len - 1, 8, &v);
  if (rc != LK_OK)
    return rc;
  if (v > INT64_MAX / mult)
    return LK_ERANGE;
  *ns = v * mult;
  return LK_OK;
}

int lk_ms_timeout_format(int64_t ns, char *buf, size_t cap) {
  if (!buf)
    return LK_EINVAL;
  if (ns < 0)
    ns = 0;
  int64_t ms = ns / LK_NS_PER_MS;
  if (ms == 0 && ns > 0)
    ms = 1; /* 0 says the deadline has passed; under a millisecond left has not */
  int n = snprintf(buf, cap, "%lld", (long long)ms);
  return (n < 0 || (size_t)n >= cap) ? LK_ETOOBIG : n;
}

int lk_ms_timeout_parse(const char *s, size_t len, int64_t *ns) {
  if (!s || !ns)
    return LK_EINVAL;
  int64_t v;
  int rc = parse_digits(s, len, 18, &v);
  if (rc != LK_OK)
    return rc;
  if (v > INT64_MAX / LK_NS_PER_MS)
    return LK_ERANGE;
  *ns = v * LK_NS_PER_MS;
  return LK_OK;
}
