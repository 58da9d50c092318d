/* SPDX-License-Identifier: MIT */
/* Internal layout of lk_budget, shared by budget.c (all forms) and budget_ratio.c (the window). */
#ifndef LINKD_BUDGET_INTERNAL_H
#define LINKD_BUDGET_INTERNAL_H

#include <linkd/budget.h>

#include "st_atomic.h"

#include <pthread.h>
#include <stdatomic.h>

#define LK_BUDGET_LINE 64
#define LK_RATIO_RETRY INT64_C(1000000) /* one retry in micro-retries */
#define LK_RATIO_EMPTY INT64_MIN        /* head epoch before the first event */

/* One time bucket of the RATIO window: what was deposited and withdrawn during `epoch`. */
typedef struct lk_ratio_bucket {
  _Atomic int64_t epoch;    /* floor(now / width) this bucket holds */
  _Atomic int64_t requests; /* requests recorded */
  _Atomic int64_t retries;  /* retries granted */
} lk_ratio_bucket;

struct lk_budget {
  /* Immutable after construction (st: once, before the budget is shared), read on every call
   * (shares its line with `head`). */
  lk_budget_kind kind;
  bool st;              /* lk_budget_set_single_thread: no atomic read-modify-writes */
  int n;                /* RATIO: buckets */
  int64_t max;          /* TOKEN: max milli-tokens; QUOTA: capacity */
  int64_t gain;         /* TOKEN: milli-tokens per success; QUOTA: no-retry increment;
                           RATIO: micro-retries per request */
  int64_t cost;         /* QUOTA: retry cost; RATIO: LK_RATIO_RETRY */
  int64_t cost_timeout; /* QUOTA: retry-after-timeout cost; RATIO: LK_RATIO_RETRY */
  int64_t reserve;      /* RATIO: micro-retries always allowed per window (the floor) */
  int64_t width;        /* RATIO: ns per bucket */
  lk_ratio_bucket *ring;
  _Atomic int64_t head; /* RATIO: newest epoch in the ring; changes once per bucket width */
  /* RATIO, single-threaded: the head bucket and the times it covers, [st_from, st_to), so that
   * an event in it finds it without two divisions (st_from > st_to: none yet). */
  lk_ratio_bucket *st_bucket;
  int64_t st_from, st_to;

  /* The balance: RATIO micro-retries, TOKEN milli-tokens, QUOTA units. Hot: own line. */
  _Alignas(LK_BUDGET_LINE) _Atomic int64_t level;
  _Alignas(LK_BUDGET_LINE) _Atomic uint64_t refused;
  pthread_mutex_t mu; /* RATIO: serialises moving the window to a new bucket */
  const lk_budget_backend *be; /* NULL: the balance is here; set at creation only */
  void *be_arg;
};

/* RATIO: the bucket events at `now` go to, moving the window first if `now` is past its head
 * (events from before the head are counted in the head bucket, unless they are from before the
 * whole window: a clock that stepped back that far starts the window over at `now`). */
lk_ratio_bucket *lk__ratio_bucket(lk_budget *b, int64_t now);
/* RATIO: sums of the buckets still inside the window at `now` (read-only). */
void lk__ratio_sums(const lk_budget *b, int64_t now, int64_t *requests, int64_t *retries);
/* floor(a / b) for b > 0. */
int64_t lk__floor_div(int64_t a, int64_t b);

#endif
