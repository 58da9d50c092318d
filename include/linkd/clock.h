/* SPDX-License-Identifier: MIT */
/* linkd/clock.h: the clock interface.
 *
 * Policy code never reads a clock: functions take `now` (int64_t ns on CLOCK_MONOTONIC) as a
 * parameter. Components that must read time themselves (the HTTP driver, daemons) take an
 * lk_clock, so tests can pass their own (an lk_clock is just a `now` function; a struct that
 * embeds it as its first member can carry state).
 *
 * Thread-safety: lk_clock_system() is safe from any thread.
 */
#ifndef LINKD_CLOCK_H
#define LINKD_CLOCK_H

#include <linkd/common.h>

LK_BEGIN_DECLS

typedef struct lk_clock lk_clock;
struct lk_clock {
  /* Current time in ns on this clock's monotonic time line. */
  int64_t (*now)(const lk_clock *self);
};

/* The process-wide CLOCK_MONOTONIC clock. Static object; never freed. */
LK_EXPORT const lk_clock *lk_clock_system(void);
/* CLOCK_MONOTONIC now, in ns. */
LK_EXPORT int64_t lk_now_ns(void);
/* CLOCK_REALTIME now, in ns since the Unix epoch: only for HTTP-dates and logs. */
LK_EXPORT int64_t lk_wall_ns(void);

LK_END_DECLS

#endif
