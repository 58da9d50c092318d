/* SPDX-License-Identifier: MIT */
#include "fake_clock.h"

#include <stdatomic.h>

static int64_t fake_now(const lk_clock *self) {
  const lk_fake_clock *fc = (const lk_fake_clock *)self;
  return atomic_load_explicit(&fc->t, memory_order_acquire);
}

void lk_fake_clock_init(lk_fake_clock *fc, int64_t start) {
  fc->base.now = fake_now;
  atomic_init(&fc->t, start);
}

void lk_fake_clock_advance(lk_fake_clock *fc, int64_t delta) {
  if (delta <= 0)
    return;
  int64_t cur = atomic_load_explicit(&fc->t, memory_order_relaxed);
  int64_t next;
  do {
    next = cur > INT64_MAX - delta ? INT64_MAX : cur + delta;
  } while (!atomic_compare_exchange_weak_explicit(&fc->t, &cur, next, memory_order_acq_rel,
                                                  memory_order_relaxed));
}

void lk_fake_clock_set(lk_fake_clock *fc, int64_t t) {
  atomic_store_explicit(&fc->t, t, memory_order_release);
}
