/* SPDX-License-Identifier: MIT */
/* The RATIO budget's sliding window: a ring of time buckets. Deposits (requests) and withdrawals
 * (retries) go to the bucket of their time and into the shared balance; when a bucket leaves the
 * window, its contents are taken back out of the balance (subtract on evict), so the balance
 * always equals reserve + deposits - withdrawals of the buckets in the window. */
#include "budget_internal.h"

int64_t lk__floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

static int ring_index(const lk_budget *b, int64_t epoch) {
  int64_t m = epoch % b->n;
  return (int)(m < 0 ? m + b->n : m);
}

/* Empties a bucket that leaves the window and gives it to `epoch`. Exchanges (not stores) so an
 * event racing with the eviction is either taken out with the bucket or kept in the new one:
 * the balance and the buckets never drift apart. */
static void evict(lk_budget *b, lk_ratio_bucket *k, int64_t epoch) {
  int64_t req = atomic_exchange_explicit(&k->requests, 0, memory_order_relaxed);
  int64_t ret = atomic_exchange_explicit(&k->retries, 0, memory_order_relaxed);
  int64_t delta = ret * LK_RATIO_RETRY - req * b->gain;
  if (delta != 0)
    atomic_fetch_add_explicit(&b->level, delta, memory_order_relaxed);
  atomic_store_explicit(&k->epoch, epoch, memory_order_relaxed);
}

/* Whether an event at epoch e must move the head: the first event, one past the head, or one
 * from before the whole window (the clock stepped back by more than the window: counting it in
 * the head would keep the window, and what it withdrew, from expiring for as long as the clock
 * went back; the window starts over at e instead). Epochs are ns / width with width >= 1 ms, so
 * neither e - h nor h - b->n can overflow. */
static bool must_roll(const lk_budget *b, int64_t h, int64_t e) {
  return h == LK_RATIO_EMPTY || e > h || e <= h - b->n;
}

/* Moves the head to epoch e (rare: once per bucket width), under the lock. Returns the head. */
static int64_t roll(lk_budget *b, int64_t e) {
  pthread_mutex_lock(&b->mu);
  int64_t h = atomic_load_explicit(&b->head, memory_order_relaxed);
  if (must_roll(b, h, e)) {
    int64_t steps = (h == LK_RATIO_EMPTY || e <= h || e - h >= b->n) ? b->n : e - h;
    for (int64_t ep = e - steps + 1; ep <= e; ep++)
      evict(b, &b->ring[ring_index(b, ep)], ep);
    atomic_store_explicit(&b->head, e, memory_order_release);
    h = e;
  }
  pthread_mutex_unlock(&b->mu);
  return h;
}

lk_ratio_bucket *lk__ratio_bucket(lk_budget *b, int64_t now) {
  if (b->st && now >= b->st_from && now < b->st_to)
    return b->st_bucket;
  int64_t e = lk__floor_div(now, b->width);
  int64_t h = atomic_load_explicit(&b->head, memory_order_acquire);
  if (must_roll(b, h, e))
    h = roll(b, e);
  lk_ratio_bucket *k = &b->ring[ring_index(b, h)];
  int64_t from, to;
  if (b->st && !__builtin_mul_overflow(h, b->width, &from) &&
      !__builtin_add_overflow(from, b->width, &to)) {
    b->st_bucket = k; /* the head's own times: an event before it still goes the long way */
    b->st_from = from;
    b->st_to = to;
  }
  return k;
}

void lk__ratio_sums(const lk_budget *b, int64_t now, int64_t *requests, int64_t *retries) {
  int64_t e = lk__floor_div(now, b->width), req = 0, ret = 0;
  int64_t h = atomic_load_explicit(&b->head, memory_order_acquire);
  /* A `now` before the whole window sees it as the next event there would leave it: empty. */
  if (h != LK_RATIO_EMPTY && e > h - b->n) {
    for (int i = 0; i < b->n; i++) {
      lk_ratio_bucket *k = &b->ring[i];
      /* Buckets newer than `now` (a caller's clock behind another's) still count. */
      if (atomic_load_explicit(&k->epoch, memory_order_relaxed) > e - b->n) {
        req += atomic_load_explicit(&k->requests, memory_order_relaxed);
        ret += atomic_load_explicit(&k->retries, memory_order_relaxed);
      }
    }
  }
  *requests = req;
  *retries = ret;
}
