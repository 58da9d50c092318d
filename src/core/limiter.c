/* SPDX-License-Identifier: MIT */
#include <linkd/error.h>
#include <linkd/limiter.h>

#include "sat.h"

#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* TAT is written on every admitted request while the config is read-mostly: they live on
 * separate cache lines so that acquirers do not invalidate each other's copy of the config. */
struct lk_limiter {
  _Alignas(64) _Atomic int64_t tat; /* theoretical arrival time; INT64_MIN = bucket full */
  /* Config under a sequence lock: seq is odd while a writer is storing, so a reader that saw
   * the same even value before and after its loads read one consistent pair. */
  _Alignas(64) _Atomic uint64_t seq;
  _Atomic int64_t interval; /* ns per token, >= 1 */
  _Atomic int64_t span;     /* burst * interval, saturated */
  _Atomic double rate;
  _Atomic int64_t burst;
  const lk_limiter_backend *be; /* NULL: the tokens are here; set at creation only */
  void *be_arg;
};

typedef struct params {
  int64_t interval, span;
} params;

void lk_limiter_config_init_default(lk_limiter_config *c) {
  c->rate = 100.0;
  c->burst = 10;
}

int lk_limiter_config_validate(const lk_limiter_config *c, const char **why) {
  const char *w = NULL;
  if (!c)
    w = "limiter config is NULL";
  else if (!(c->rate >= LK_LIMITER_RATE_MIN && c->rate <= LK_LIMITER_RATE_MAX))
    w = "limiter rate must be a finite number within [1e-9, 1e9] per second";
  else if (c->burst < 1)
    w = "limiter burst must be >= 1";
  if (why)
    *why = w;
  return w ? LK_ECONFIG : LK_OK;
}

/* Rounded up so that the effective rate never exceeds the configured one. */
static params params_of(const lk_limiter_config *c) {
  double ns = ceil(1e9 / c->rate);
  params p;
  p.interval = ns < 1.0 ? 1 : (int64_t)ns; /* <= 1e18 by validation */
  p.span = c->burst > INT64_MAX / p.interval ? INT64_MAX : c->burst * p.interval;
  return p;
}

static params params_load(const lk_limiter *l) {
  const lk_limiter *m = l;
  for (;;) {
    uint64_t s1 = atomic_load_explicit(&m->seq, memory_order_acquire);
    /* Acquire loads keep the second seq load after them (no standalone fence: TSan-friendly). */
    params p;
    p.interval = atomic_load_explicit(&m->interval, memory_order_acquire);
    p.span = atomic_load_explicit(&m->span, memory_order_acquire);
    uint64_t s2 = atomic_load_explicit(&m->seq, memory_order_relaxed);
    if (s1 == s2 && !(s1 & 1))
      return p;
  }
}

int lk_limiter_new(const lk_limiter_config *c, lk_limiter **out, const char **why) {
  if (!out || !c) {
    if (out)
      *out = NULL;
    if (why)
      *why = !c ? "limiter config is NULL" : "limiter output pointer is NULL";
    return LK_EINVAL;
  }
  *out = NULL;
  int rc = lk_limiter_config_validate(c, why);
  if (rc != LK_OK)
    return rc;
  lk_limiter *l = aligned_alloc(64, (sizeof *l + 63) / 64 * 64);
  if (!l)
    return LK_ENOMEM;
  memset(l, 0, sizeof *l);
  params p = params_of(c);
  atomic_init(&l->tat, INT64_MIN);
  atomic_init(&l->seq, 0);
  atomic_init(&l->interval, p.interval);
  atomic_init(&l->span, p.span);
  atomic_init(&l->rate, c->rate);
  atomic_init(&l->burst, c->burst);
  *out = l;
  return LK_OK;
}

int lk_limiter_new_backend(const lk_limiter_config *c, const lk_limiter_backend *be, void *arg,
                           lk_limiter **out, const char **why) {
  if (!be || !be->reserve) {
    if (out)
      *out = NULL;
    if (why)
      *why = "limiter backend or its reserve is NULL";
    return LK_EINVAL;
  }
  int rc = lk_limiter_new(c, out, why);
  if (rc == LK_OK) {
    (*out)->be = be;
    (*out)->be_arg = arg;
  }
  return rc;
}

void *lk_limiter_backend_arg(const lk_limiter *l, const lk_limiter_backend *be) {
  return l && be && l->be == be ? l->be_arg : NULL;
}

void lk_limiter_free(lk_limiter *l) {
  if (l && l->be && l->be->free)
    l->be->free(l->be_arg);
  free(l);
}

int lk_limiter_try_acquire(lk_limiter *l, int64_t now) {
  if (l->be)
    return l->be->reserve(l->be_arg, now, 0) >= 0 ? LK_OK : LK_ERATE_LIMITED;
  params p = params_load(l);
  int64_t tat = atomic_load_explicit(&l->tat, memory_order_relaxed);
  for (;;) {
    int64_t next = lk_sat_add(tat > now ? tat : now, p.interval);
    if (lk_sat_sub(next, now) > p.span || next == INT64_MAX) /* INT64_MAX: time line exhausted */
      return LK_ERATE_LIMITED;
    /* TAT guards no other data, so relaxed ordering is enough for the count to hold. */
    if (atomic_compare_exchange_weak_explicit(&l->tat, &tat, next, memory_order_relaxed,
                                              memory_order_relaxed))
      return LK_OK;
  }
}

/* The request conforms once now' >= next - span; the wait is that instant minus now. */
static int64_t wait_for(int64_t next, int64_t span, int64_t now) {
  int64_t w = lk_sat_sub(lk_sat_sub(next, span), now);
  return w < 0 ? 0 : w;
}

int64_t lk_limiter_reserve(lk_limiter *l, int64_t now, int64_t max_wait) {
  if (l->be) {
    /* A negative max_wait goes through: the caller has no time left, not even for the
     * backend's own answer. */
    int64_t w = l->be->reserve(l->be_arg, now, max_wait);
    return w >= 0 && w <= (max_wait < 0 ? 0 : max_wait) ? w : LK_ERATE_LIMITED;
  }
  if (max_wait < 0)
    max_wait = 0;
  params p = params_load(l);
  int64_t tat = atomic_load_explicit(&l->tat, memory_order_relaxed);
  for (;;) {
    int64_t next = lk_sat_add(tat > now ? tat : now, p.interval);
    int64_t wait = wait_for(next, p.span, now);
    if (wait > max_wait || next == INT64_MAX) /* INT64_MAX: time line exhausted */
      return LK_ERATE_LIMITED;
    if (atomic_compare_exchange_weak_explicit(&l->tat, &tat, next, memory_order_relaxed,
                                              memory_order_relaxed))
      return wait;
  }
}

int64_t lk_limiter_reserve_until(lk_limiter *l, int64_t now, lk_deadline deadline) {
  return lk_limiter_reserve(l, now, lk_deadline_remaining(deadline, now));
}

int lk_limiter_set_config(lk_limiter *l, const lk_limiter_config *c, const char **why) {
  if (!l) {
    if (why)
      *why = "limiter is NULL";
    return LK_EINVAL;
  }
  int rc = lk_limiter_config_validate(c, why);
  if (rc != LK_OK)
    return rc;
  if (l->be) {
    if (!l->be->set_config) {
      if (why)
        *why = "this limiter's backend cannot change its config";
      return LK_ECONFIG;
    }
    rc = l->be->set_config(l->be_arg, c, why);
    if (rc != LK_OK)
      return rc;
  }
  params p = params_of(c);
  /* Writers serialize on seq: the CAS from even to odd is the lock. */
  uint64_t s = atomic_load_explicit(&l->seq, memory_order_relaxed);
  for (;;) {
    if (s & 1) {
      s = atomic_load_explicit(&l->seq, memory_order_relaxed);
      continue;
    }
    if (atomic_compare_exchange_weak_explicit(&l->seq, &s, s + 1, memory_order_acquire,
                                              memory_order_relaxed))
      break;
  }
  /* Release stores: a reader that sees a new value also sees seq already odd. */
  atomic_store_explicit(&l->interval, p.interval, memory_order_release);
  atomic_store_explicit(&l->span, p.span, memory_order_release);
  atomic_store_explicit(&l->rate, c->rate, memory_order_release);
  atomic_store_explicit(&l->burst, c->burst, memory_order_release);
  atomic_store_explicit(&l->seq, s + 2, memory_order_release);
  return LK_OK;
}

void lk_limiter_get_config(const lk_limiter *l, lk_limiter_config *out) {
  const lk_limiter *m = l;
  for (;;) {
    uint64_t s1 = atomic_load_explicit(&m->seq, memory_order_acquire);
    double rate = atomic_load_explicit(&m->rate, memory_order_acquire);
    int64_t burst = atomic_load_explicit(&m->burst, memory_order_acquire);
    uint64_t s2 = atomic_load_explicit(&m->seq, memory_order_relaxed);
    if (s1 == s2 && !(s1 & 1)) {
      out->rate = rate;
      out->burst = burst;
      return;
    }
  }
}

int64_t lk_limiter_available(const lk_limiter *l, int64_t now) {
  if (l->be)
    return l->be->available ? l->be->available(l->be_arg, now) : 0;
  params p = params_load(l);
  int64_t tat = atomic_load_explicit(&l->tat, memory_order_relaxed);
  int64_t base = tat > now ? tat : now;
  /* Room left before max(TAT, now) reaches now + span, in whole intervals. */
  int64_t room = lk_sat_sub(lk_sat_add(now, p.span), base);
  if (room <= 0)
    return 0;
  return room / p.interval;
}

int64_t lk_limiter_wait_time(const lk_limiter *l, int64_t now) {
  if (l->be)
    return l->be->wait_time ? l->be->wait_time(l->be_arg, now) : 0;
  params p = params_load(l);
  int64_t tat = atomic_load_explicit(&l->tat, memory_order_relaxed);
  return wait_for(lk_sat_add(tat > now ? tat : now, p.interval), p.span, now);
}
