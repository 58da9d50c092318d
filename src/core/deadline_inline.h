/* SPDX-License-Identifier: MIT */
/* deadline_inline.h: the deadline arithmetic of deadline.h as inline functions; not installed.
 * deadline.c builds the exported functions from them, and the simulator, which asks them for
 * every simulated attempt, calls them directly: the same code, without a call into the library
 * three times per attempt. */
#ifndef LINKD_CORE_DEADLINE_INLINE_H
#define LINKD_CORE_DEADLINE_INLINE_H

#include <linkd/deadline.h>

#include "sat.h"

static inline int64_t lk__deadline_after_at(int64_t now, int64_t budget) {
  return budget <= 0 ? now : lk_sat_add(now, budget);
}

static inline int64_t lk__deadline_remaining(int64_t at, int64_t now) {
  if (at == LK_DEADLINE_NONE)
    return INT64_MAX;
  return lk_sat_sub(at, now);
}

static inline int64_t lk__attempt_timeout(int64_t cap, int64_t remaining) {
  if (cap <= 0 || remaining <= 0)
    return 0;
  return cap < remaining ? cap : remaining;
}

#endif
