/* SPDX-License-Identifier: MIT */
#include <linkd/adaptive.h>
#include <linkd/error.h>

#include "sat.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct lk_adaptive {
  pthread_mutex_t mu;
  lk_adaptive_config c;
  double est;     /* the real-valued estimate, within [min_limit, max_limit] */
  bool decreased; /* a multiplicative decrease happened at last_decrease */
  int64_t last_decrease;
  bool window_started; /* min RTT in two windows: the current one and the one before */
  int64_t window_start, cur_min, prev_min;
  lk_bulkhead *bulkhead;
  _Atomic int64_t limit;   /* floor(est), readable without the mutex */
  _Atomic int64_t min_rtt; /* for lk_adaptive_min_rtt() */
};

lk_adaptive_outcome lk_adaptive_outcome_of(lk_failure kind) {
  switch (kind) {
  case LK_F_NONE: return LK_ADAPTIVE_SUCCESS;
  case LK_F_CLIENT_4XX:
  case LK_F_HTTP_408:
  case LK_F_HTTP_425:
  case LK_F_KEY_IN_USE:
  case LK_F_DNS_FAILED:
  case LK_F_DNS_TIMEOUT:
  case LK_F_TLS_FAILED:
  case LK_F_CANCELLED:
  case LK_F_BREAKER_OPEN:
  case LK_F_BUDGET_EXHAUSTED:
  case LK_F_RATE_LIMITED:
  case LK_F_BULKHEAD_FULL: return LK_ADAPTIVE_IGNORE;
  default: return (unsigned)kind < LK_F__COUNT ? LK_ADAPTIVE_DROP : LK_ADAPTIVE_IGNORE;
  }
}

void lk_adaptive_config_init_default(lk_adaptive_config *c) {
  c->kind = LK_ADAPTIVE_AIMD;
  c->initial_limit = 20;
  c->min_limit = 1;
  c->max_limit = 200;
  c->backoff_ratio = 0.9;
  c->decrease_cooldown = LK_MS(100);
  c->latency_target = 0;
  c->increase = 1.0;
  c->smoothing = 0.2;
  c->tolerance = 1.5;
  c->queue_size = 0.0;
  c->min_rtt_window = LK_SEC(30);
}

int lk_adaptive_config_validate(const lk_adaptive_config *c, const char **why) {
  const char *w = NULL;
  if (!c)
    w = "adaptive config is NULL";
  else if ((unsigned)c->kind > LK_ADAPTIVE_GRADIENT)
    w = "adaptive kind must be AIMD or GRADIENT";
  else if (c->min_limit < 1)
    w = "adaptive min_limit must be >= 1";
  else if (c->max_limit < c->min_limit || c->max_limit > LK_BULKHEAD_LIMIT_MAX)
    w = "adaptive max_limit must be within [min_limit, 2097151]";
  else if (c->initial_limit < c->min_limit || c->initial_limit > c->max_limit)
    w = "adaptive initial_limit must be within [min_limit, max_limit]";
  else if (!(c->backoff_ratio >= 0.1 && c->backoff_ratio < 1.0))
    w = "adaptive backoff_ratio must be within [0.1, 1)";
  else if (c->decrease_cooldown < 0)
    w = "adaptive decrease_cooldown must be >= 0";
  else if (c->latency_target < 0)
    w = "adaptive latency_target must be >= 0 (0 = none)";
  else if (!(c->increase > 0.0) || !isfinite(c->increase))
    w = "adaptive increase must be a finite number > 0";
  else if (!(c->smoothing > 0.0 && c->smoothing <= 1.0))
    w = "adaptive smoothing must be within (0, 1]";
  else if (!(c->tolerance >= 1.0 && c->tolerance <= 100.0))
    w = "adaptive tolerance must be within [1, 100]";
  else if (!(c->queue_size >= 0.0) || !isfinite(c->queue_size))
    w = "adaptive queue_size must be a finite number >= 0";
  else if (c->min_rtt_window < 0)
    w = "adaptive min_rtt_window must be >= 0";
  if (why)
    *why = w;
  return w ? LK_ECONFIG : LK_OK;
}

int lk_adaptive_new(const lk_adaptive_config *c, lk_adaptive **out, const char **why) {
  if (!out || !c) {
    if (out)
      *out = NULL;
    if (why)
      *why = !c ? "adaptive config is NULL" : "adaptive output pointer is NULL";
    return LK_EINVAL;
  }
  *out = NULL;
  int rc = lk_adaptive_config_validate(c, why);
  if (rc != LK_OK)
    return rc;
  lk_adaptive *a = calloc(1, sizeof *a);
  if (!a)
    return LK_ENOMEM;
  if (pthread_mutex_init(&a->mu, NULL) != 0) {
    free(a);
    return LK_ESYS;
  }
  a->c = *c;
  a->est = (double)c->initial_limit;
  a->cur_min = a->prev_min = INT64_MAX;
  atomic_init(&a->limit, c->initial_limit);
  atomic_init(&a->min_rtt, 0);
  *out = a;
  return LK_OK;
}

void lk_adaptive_free(lk_adaptive *a) {
  if (!a)
    return;
  pthread_mutex_destroy(&a->mu);
  free(a);
}

/* Whether a period of length d that began at `since` is over at `now`. A `now` more than d
 * before `since` counts as over too: the clock stepped back further than the period, which must
 * not last (no decrease allowed, an old min RTT kept) for as long as the clock went back. A `now`
 * only a little behind (a sample of another thread's) is not over. */
static bool period_over(int64_t now, int64_t since, int64_t d) {
  return now >= lk_sat_add(since, d) || now < lk_sat_sub(since, d);
}

/* Tracks the lowest RTT over the current and the previous window. Mutex held. */
static int64_t update_min_rtt(lk_adaptive *a, int64_t now, int64_t rtt) {
  int64_t w = a->c.min_rtt_window;
  if (!a->window_started) {
    a->window_started = true;
    a->window_start = now;
    a->cur_min = rtt;
  } else if (w > 0 && period_over(now, a->window_start, w)) {
    a->prev_min = a->cur_min;
    a->cur_min = rtt;
    a->window_start = now;
  } else if (rtt < a->cur_min) {
    a->cur_min = rtt;
  }
  int64_t m = a->cur_min < a->prev_min ? a->cur_min : a->prev_min;
  atomic_store_explicit(&a->min_rtt, m, memory_order_relaxed);
  return m;
}

static double gradient_step(const lk_adaptive *a, double est, int64_t min_rtt, int64_t rtt) {
  double g = a->c.tolerance * (double)min_rtt / (double)rtt;
  if (g < 0.5) /* at most halve per step: one slow sample is not a collapse */
    g = 0.5;
  if (g > 1.0)
    g = 1.0;
  double queue = a->c.queue_size > 0.0 ? a->c.queue_size : sqrt(est);
  double target = est * g + queue;
  return est * (1.0 - a->c.smoothing) + target * a->c.smoothing;
}

int64_t lk_adaptive_record_inflight(lk_adaptive *a, int64_t now, int64_t rtt,
                                    lk_adaptive_outcome outcome, int64_t inflight) {
  if (outcome != LK_ADAPTIVE_SUCCESS && outcome != LK_ADAPTIVE_DROP)
    return lk_adaptive_limit(a);
  pthread_mutex_lock(&a->mu);
  const lk_adaptive_config *c = &a->c;
  if (inflight < 0 && a->bulkhead)
    inflight = lk_bulkhead_in_use(a->bulkhead);
  double est = a->est;
  bool timed = outcome == LK_ADAPTIVE_SUCCESS && rtt > 0;
  int64_t min_rtt = timed ? update_min_rtt(a, now, rtt) : 0;
  bool drop = outcome == LK_ADAPTIVE_DROP || (c->latency_target > 0 && rtt > c->latency_target);
  /* A limit that is not being used (under half of it in flight) did not cause what this sample
   * says, and learns nothing from it either way: not raised by a success, not lowered by a drop.
   * Lowered by drops only, it would fall to min_limit under any background error rate at low
   * load (never raised there) and then hold calls back when load comes (docs/demo.md). */
  bool unused = inflight >= 0 && (double)inflight * 2.0 < est;
  if (drop) {
    if (!unused && (!a->decreased || period_over(now, a->last_decrease, c->decrease_cooldown))) {
      est *= c->backoff_ratio;
      a->decreased = true;
      a->last_decrease = now;
    }
  } else {
    double next = est;
    if (c->kind == LK_ADAPTIVE_AIMD)
      next = est + c->increase / est;
    else if (timed)
      next = gradient_step(a, est, min_rtt, rtt);
    if (!(unused && next > est))
      est = next;
  }
  if (est < (double)c->min_limit)
    est = (double)c->min_limit;
  if (est > (double)c->max_limit)
    est = (double)c->max_limit;
  a->est = est;
  int64_t limit = (int64_t)est;
  if (limit != atomic_load_explicit(&a->limit, memory_order_relaxed)) {
    atomic_store_explicit(&a->limit, limit, memory_order_relaxed);
    /* Under our mutex so that concurrent samples reach the bulkhead in order. */
    if (a->bulkhead)
      lk_bulkhead_set_max(a->bulkhead, limit);
  }
  pthread_mutex_unlock(&a->mu);
  return limit;
}

int64_t lk_adaptive_record(lk_adaptive *a, int64_t now, int64_t rtt, lk_adaptive_outcome outcome) {
  return lk_adaptive_record_inflight(a, now, rtt, outcome, -1);
}

int64_t lk_adaptive_limit(const lk_adaptive *a) {
  return atomic_load_explicit(&a->limit, memory_order_relaxed);
}

int64_t lk_adaptive_min_rtt(const lk_adaptive *a) {
  return atomic_load_explicit(&a->min_rtt, memory_order_relaxed);
}

int lk_adaptive_attach(lk_adaptive *a, lk_bulkhead *b) {
  if (!a)
    return LK_EINVAL;
  pthread_mutex_lock(&a->mu);
  a->bulkhead = b;
  if (b)
    lk_bulkhead_set_max(b, atomic_load_explicit(&a->limit, memory_order_relaxed));
  pthread_mutex_unlock(&a->mu);
  return LK_OK;
}
