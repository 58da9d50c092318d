/* SPDX-License-Identifier: MIT */
/* A test double for lk_clock: a clock that moves only when told to.
 *
 * It lives with the tests, not in the public API: it holds a C11 atomic, which C++ and C99
 * consumers of <linkd/clock.h> could not compile, and no production code needs it.
 *
 * Thread-safety: may be read from many threads while one thread advances it.
 */
#ifndef LINKD_TEST_FAKE_CLOCK_H
#define LINKD_TEST_FAKE_CLOCK_H

#include <linkd/clock.h>

/* Embed it (no allocation); pass &fc->base as lk_clock. */
typedef struct lk_fake_clock {
  lk_clock base;
  _Atomic int64_t t;
} lk_fake_clock;

/* Initializes a fake clock reading `start` ns. */
void lk_fake_clock_init(lk_fake_clock *fc, int64_t start);
/* Moves the fake clock forward by `delta` ns (saturating; negative deltas are ignored). */
void lk_fake_clock_advance(lk_fake_clock *fc, int64_t delta);
/* Sets the fake clock to `t` ns. */
void lk_fake_clock_set(lk_fake_clock *fc, int64_t t);

#endif
