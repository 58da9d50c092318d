/* SPDX-License-Identifier: MIT */
/* st_atomic.h: the read-modify-writes of the core's shared counters, for objects that may be
 * declared single-threaded (lk_budget_set_single_thread, lk_breaker_set_single_thread). Such an
 * object is changed by one thread at a time, so an atomic read-modify-write (a locked
 * instruction: a fifth of the simulator's cycles went to them) becomes a relaxed load and a
 * relaxed store, which compile to plain moves. The counters stay _Atomic, so another thread
 * reading them (a metrics scrape) still sees whole values; not installed. */
#ifndef LINKD_CORE_ST_ATOMIC_H
#define LINKD_CORE_ST_ATOMIC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define LK__ST_RELAXED memory_order_relaxed

/* *p += d; returns the value before. */
static inline int64_t lk__st_add_i64(bool st, _Atomic int64_t *p, int64_t d) {
  if (!st)
    return atomic_fetch_add_explicit(p, d, LK__ST_RELAXED);
  int64_t v = atomic_load_explicit(p, LK__ST_RELAXED);
  atomic_store_explicit(p, v + d, LK__ST_RELAXED);
  return v;
}

static inline uint64_t lk__st_add_u64(bool st, _Atomic uint64_t *p, uint64_t d) {
  if (!st)
    return atomic_fetch_add_explicit(p, d, LK__ST_RELAXED);
  uint64_t v = atomic_load_explicit(p, LK__ST_RELAXED);
  atomic_store_explicit(p, v + d, LK__ST_RELAXED);
  return v;
}

/* A weak compare-and-exchange with the given orders; with one thread there is nobody to lose the
 * race to: *expected is what the caller loaded (or what a failed exchange left there). */
static inline bool lk__st_cas_i64(bool st, _Atomic int64_t *p, int64_t *expected, int64_t desired) {
  if (!st)
    return atomic_compare_exchange_weak_explicit(p, expected, desired, LK__ST_RELAXED,
                                                 LK__ST_RELAXED);
  int64_t v = atomic_load_explicit(p, LK__ST_RELAXED);
  if (v != *expected) {
    *expected = v;
    return false;
  }
  atomic_store_explicit(p, desired, LK__ST_RELAXED);
  return true;
}

static inline bool lk__st_cas_u64(bool st, _Atomic uint64_t *p, uint64_t *expected,
                                  uint64_t desired, memory_order success, memory_order failure) {
  if (!st)
    return atomic_compare_exchange_weak_explicit(p, expected, desired, success, failure);
  uint64_t v = atomic_load_explicit(p, LK__ST_RELAXED);
  if (v != *expected) {
    *expected = v;
    return false;
  }
  atomic_store_explicit(p, desired, LK__ST_RELAXED);
  return true;
}

#endif
