/* SPDX-License-Identifier: MIT */
/* Saturating int64 arithmetic on instants and durations (ns), shared by the core and the HTTP
 * layer; not installed. A sum or difference that would overflow sticks at INT64_MAX ("never",
 * LK_DEADLINE_NONE) or INT64_MIN ("long ago") instead of wrapping: a huge timeout stays huge and
 * an expired deadline stays expired, whatever values a caller or an inherited deadline brings. */
#ifndef LINKD_CORE_SAT_H
#define LINKD_CORE_SAT_H

#include <stdint.h>

static inline int64_t lk_sat_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    return b > 0 ? INT64_MAX : INT64_MIN;
  return r;
}

static inline int64_t lk_sat_sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r))
    return b < 0 ? INT64_MAX : INT64_MIN;
  return r;
}

#endif
