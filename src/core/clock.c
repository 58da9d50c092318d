/* SPDX-License-Identifier: MIT */
#include <linkd/clock.h>

#include <time.h>

static int64_t ts_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * LK_NS_PER_S + ts.tv_nsec;
}

int64_t lk_now_ns(void) { return ts_ns(CLOCK_MONOTONIC); }
int64_t lk_wall_ns(void) { return ts_ns(CLOCK_REALTIME); }

static int64_t system_now(const lk_clock *self) {
  (void)self;
  return lk_now_ns();
}

static const lk_clock system_clock = {system_now};
const lk_clock *lk_clock_system(void) { return &system_clock; }
