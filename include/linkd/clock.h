/* linkd/clock.h: the clock interface.
 *
 * Policy code never reads a clock: functions take `now` (int64_t ns on CLOCK_MONOTONIC) as a
 * parameter. Components that must read time themselves (the HTTP driver, daemons) take an
 * lk_clock, so tests can pass a fake one.
 *
 * Thread-safety: lk_clock_system() is safe from any thread. A fake clock may be read from many
 * threads while one thread advances it (the value is a C11 atomic).
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

/* A clock that moves only when told to. Embed it (no allocation); pass &fc->base as lk_clock. */
typedef struct lk_fake_clock {
  lk_clock base;
  _Atomic int64_t t;
} lk_fake_clock;

/* Initializes a fake clock reading `start` ns. */
LK_EXPORT void lk_fake_clock_init(lk_fake_clock *fc, int64_t start);
/* Moves the fake clock forward by `delta` ns (saturating; negative deltas are ignored). */
LK_EXPORT void lk_fake_clock_advance(lk_fake_clock *fc, int64_t delta);
/* Sets the fake clock to `t` ns. */
LK_EXPORT void lk_fake_clock_set(lk_fake_clock *fc, int64_t t);

LK_END_DECLS

#endif
