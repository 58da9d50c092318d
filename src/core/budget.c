/* SPDX-License-Identifier: MIT */
/* Retry budgets: configuration, construction, and the interface dispatched over the three forms.
 * The RATIO window lives in budget_ratio.c. */
#include "budget_internal.h"
#include "sat.h"

#include <linkd/error.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RELAXED memory_order_relaxed

/* --- configuration ----------------------------------------------------------------------------- */

void lk_budget_ratio_config_init_default(lk_budget_ratio_config *c) {
  c->percent = 20.0;
  c->ttl = LK_SEC(10);
  c->min_retries_per_sec = 10;
  c->buckets = 10;
}

void lk_budget_token_config_init_default(lk_budget_token_config *c) {
  c->max_tokens = 10.0;
  c->token_ratio = 0.1;
}

void lk_budget_quota_config_init_default(lk_budget_quota_config *c) {
  c->capacity = 500;
  c->retry_cost = 5;
  c->timeout_cost = 10;
  c->no_retry_increment = 1;
}

static int verdict(const char *w, const char **why) {
  if (why)
    *why = w;
  return w ? LK_ECONFIG : LK_OK;
}

int lk_budget_ratio_config_validate(const lk_budget_ratio_config *c, const char **why) {
  const char *w = NULL;
  if (!c)
    w = "ratio budget config is NULL";
  else if (!(c->percent >= 0.0 && c->percent <= 1000.0))
    w = "ratio budget percent must be within [0, 1000]";
  else if (c->ttl < LK_MS(1) || c->ttl > LK_SEC(3600))
    w = "ratio budget ttl must be within [1 ms, 1 hour]";
  else if (c->min_retries_per_sec < 0 || c->min_retries_per_sec > 1000000)
    w = "ratio budget min_retries_per_sec must be within [0, 1000000]";
  else if (c->buckets < 1 || c->buckets > 3600)
    w = "ratio budget buckets must be within [1, 3600]";
  else if (c->ttl / c->buckets < LK_MS(1))
    w = "ratio budget ttl / buckets must be >= 1 ms";
  return verdict(w, why);
}

int lk_budget_token_config_validate(const lk_budget_token_config *c, const char **why) {
  const char *w = NULL;
  if (!c)
    w = "token budget config is NULL";
  else if (!(c->max_tokens > 0.0 && c->max_tokens <= 1000.0) || llround(c->max_tokens * 1000) < 1)
    w = "token budget max_tokens must be within (0, 1000]";
  else if (!(c->token_ratio >= 0.001 && c->token_ratio <= 1000.0))
    w = "token budget token_ratio must be within [0.001, 1000]";
  return verdict(w, why);
}

int lk_budget_quota_config_validate(const lk_budget_quota_config *c, const char **why) {
  const char *w = NULL;
  if (!c)
    w = "quota budget config is NULL";
  else if (c->capacity < 1 || c->capacity > INT64_C(1000000000000))
    w = "quota budget capacity must be within [1, 10^12]";
  else if (c->retry_cost < 1 || c->retry_cost > c->capacity)
    w = "quota budget retry_cost must be within [1, capacity]";
  else if (c->timeout_cost < 1 || c->timeout_cost > c->capacity)
    w = "quota budget timeout_cost must be within [1, capacity]";
  else if (c->no_retry_increment < 0 || c->no_retry_increment > c->capacity)
    w = "quota budget no_retry_increment must be within [0, capacity]";
  return verdict(w, why);
}

/* --- construction ------------------------------------------------------------------------------ */

static lk_budget *budget_alloc(lk_budget_kind kind) {
  size_t size = (sizeof(lk_budget) + LK_BUDGET_LINE - 1) / LK_BUDGET_LINE * LK_BUDGET_LINE;
  lk_budget *b = aligned_alloc(LK_BUDGET_LINE, size);
  if (!b)
    return NULL;
  memset(b, 0, size);
  b->kind = kind;
  atomic_init(&b->head, LK_RATIO_EMPTY);
  atomic_init(&b->level, 0);
  atomic_init(&b->refused, 0);
  if (pthread_mutex_init(&b->mu, NULL) != 0) {
    free(b);
    return NULL;
  }
  return b;
}

static int start(int rc, lk_budget **out) {
  if (out)
    *out = NULL;
  return rc;
}

int lk_budget_new_ratio(const lk_budget_ratio_config *c, lk_budget **out, const char **why) {
  if (!c || !out)
    return start(LK_EINVAL, out);
  int rc = lk_budget_ratio_config_validate(c, why);
  if (rc != LK_OK)
    return start(rc, out);
  lk_budget *b = budget_alloc(LK_BUDGET_RATIO);
  if (!b)
    return start(LK_ENOMEM, out);
  b->n = c->buckets;
  b->width = c->ttl / c->buckets;
  b->gain = llround(c->percent * 10000.0); /* percent of 10^6 micro-retries */
  b->cost = b->cost_timeout = LK_RATIO_RETRY;
  /* floor/s * window seconds * 10^6 micro-retries = floor * window_ns / 1000; <= 3.6e18. */
  b->reserve = (int64_t)c->min_retries_per_sec * (b->width * b->n / 1000);
  b->ring = calloc((size_t)b->n, sizeof *b->ring);
  if (!b->ring) {
    lk_budget_free(b);
    return start(LK_ENOMEM, out);
  }
  atomic_init(&b->level, b->reserve);
  *out = b;
  return LK_OK;
}

int lk_budget_new_token(const lk_budget_token_config *c, lk_budget **out, const char **why) {
  if (!c || !out)
    return start(LK_EINVAL, out);
  int rc = lk_budget_token_config_validate(c, why);
  if (rc != LK_OK)
    return start(rc, out);
  lk_budget *b = budget_alloc(LK_BUDGET_TOKEN);
  if (!b)
    return start(LK_ENOMEM, out);
  b->max = llround(c->max_tokens * 1000.0);
  b->gain = llround(c->token_ratio * 1000.0);
  atomic_init(&b->level, b->max);
  *out = b;
  return LK_OK;
}

int lk_budget_new_quota(const lk_budget_quota_config *c, lk_budget **out, const char **why) {
  if (!c || !out)
    return start(LK_EINVAL, out);
  int rc = lk_budget_quota_config_validate(c, why);
  if (rc != LK_OK)
    return start(rc, out);
  lk_budget *b = budget_alloc(LK_BUDGET_QUOTA);
  if (!b)
    return start(LK_ENOMEM, out);
  b->max = c->capacity;
  b->cost = c->retry_cost;
  b->cost_timeout = c->timeout_cost;
  b->gain = c->no_retry_increment;
  atomic_init(&b->level, b->max);
  *out = b;
  return LK_OK;
}

int lk_budget_new_backend(lk_budget_kind kind, const lk_budget_backend *be, void *arg,
                          lk_budget **out) {
  if (!be || !be->acquire_retry || !be->record_request || !be->record_success ||
      !be->record_failure || !be->stats || !out || (unsigned)kind > LK_BUDGET_QUOTA)
    return start(LK_EINVAL, out);
  lk_budget *b = budget_alloc(kind);
  if (!b)
    return start(LK_ENOMEM, out);
  b->be = be;
  b->be_arg = arg;
  *out = b;
  return LK_OK;
}

void *lk_budget_backend_arg(const lk_budget *b, const lk_budget_backend *be) {
  return b && be && b->be == be ? b->be_arg : NULL;
}

void lk_budget_set_single_thread(lk_budget *b) {
  if (!b)
    return;
  b->st_from = INT64_MAX; /* no head bucket cached yet */
  b->st_to = INT64_MIN;
  b->st = true;
}

void lk_budget_free(lk_budget *b) {
  if (!b)
    return;
  if (b->be && b->be->free)
    b->be->free(b->be_arg);
  pthread_mutex_destroy(&b->mu);
  free(b->ring);
  free(b);
}

/* --- the shared interface ---------------------------------------------------------------------- */

/* Takes `cost` from the balance if at least that much is there (never goes below it). */
static bool withdraw(lk_budget *b, int64_t cost) {
  int64_t v = atomic_load_explicit(&b->level, RELAXED);
  while (v >= cost)
    if (lk__st_cas_i64(b->st, &b->level, &v, v - cost))
      return true;
  return false;
}

/* Adds `delta` (may be negative) to the balance, clamped to [0, b->max]. The common healthy case
 * (a success on a full budget) is a load only. */
static void adjust_clamped(lk_budget *b, int64_t delta) {
  int64_t v = atomic_load_explicit(&b->level, RELAXED), n;
  do {
    /* Saturating: delta may be a caller's ticket cost of any size, and a wrapped sum would be
     * clamped to 0, emptying the budget instead of filling it. */
    n = lk_sat_add(v, delta);
    n = n < 0 ? 0 : n > b->max ? b->max : n;
    if (n == v)
      return;
  } while (!lk__st_cas_i64(b->st, &b->level, &v, n));
}

static int acquire(lk_budget *b, int64_t now, bool after_timeout, int64_t *charged) {
  bool ok;
  int64_t cost = 0;
  if (b->be) {
    ok = b->be->acquire_retry(b->be_arg, now, after_timeout, &cost) == LK_OK;
  } else {
    switch (b->kind) {
    case LK_BUDGET_RATIO: {
      lk_ratio_bucket *k = lk__ratio_bucket(b, now);
      cost = LK_RATIO_RETRY;
      ok = withdraw(b, cost);
      if (ok)
        lk__st_add_i64(b->st, &k->retries, 1);
      break;
    }
    case LK_BUDGET_TOKEN:
      /* tokens > max / 2, exactly, in milli-tokens */
      ok = atomic_load_explicit(&b->level, RELAXED) * 2 > b->max;
      break;
    default:
      cost = after_timeout ? b->cost_timeout : b->cost;
      ok = withdraw(b, cost);
      break;
    }
  }
  if (!ok) {
    lk__st_add_u64(b->st, &b->refused, 1);
    return LK_EBUDGET;
  }
  *charged = cost;
  return LK_OK;
}

int lk_budget_acquire_retry(lk_budget *b, int64_t now, bool after_timeout) {
  int64_t charged;
  return acquire(b, now, after_timeout, &charged);
}

int lk_budget_acquire_retry_ticket(lk_budget *b, int64_t now, bool after_timeout,
                                   lk_budget_ticket *t) {
  int64_t charged;
  int rc = acquire(b, now, after_timeout, &charged);
  if (rc == LK_OK)
    t->cost = charged;
  return rc;
}

void lk_budget_record_request(lk_budget *b, int64_t now) {
  if (b->be) {
    b->be->record_request(b->be_arg, now);
    return;
  }
  if (b->kind != LK_BUDGET_RATIO)
    return;
  lk_ratio_bucket *k = lk__ratio_bucket(b, now);
  /* Balance first: an eviction racing with us can then only leave the balance above the window's
   * sums for a moment (never below), and the two agree again once both adds are done. */
  lk__st_add_i64(b->st, &b->level, b->gain);
  lk__st_add_i64(b->st, &k->requests, 1);
}

void lk_budget_record_success(lk_budget *b, int64_t now) {
  if (b->be) {
    b->be->record_success(b->be_arg, now, 0);
    return;
  }
  if (b->kind != LK_BUDGET_RATIO)
    adjust_clamped(b, b->gain);
}

void lk_budget_record_success_ticket(lk_budget *b, int64_t now, lk_budget_ticket *t) {
  if (b->be) {
    b->be->record_success(b->be_arg, now, t->cost);
    t->cost = 0;
    return;
  }
  if (b->kind == LK_BUDGET_QUOTA)
    adjust_clamped(b, t->cost > 0 ? t->cost : b->gain);
  else if (b->kind == LK_BUDGET_TOKEN)
    adjust_clamped(b, b->gain);
  t->cost = 0;
}

void lk_budget_record_failure(lk_budget *b, int64_t now) {
  if (b->be) {
    b->be->record_failure(b->be_arg, now);
    return;
  }
  if (b->kind == LK_BUDGET_TOKEN)
    adjust_clamped(b, -1000);
}

/* --- queries ----------------------------------------------------------------------------------- */

static double clamp01(double x) { return x < 0.0 ? 0.0 : x > 1.0 ? 1.0 : x; }

int lk_budget_stats_get(const lk_budget *cb, int64_t now, lk_budget_stats *out) {
  if (!cb || !out)
    return LK_EINVAL;
  const lk_budget *b = cb;
  memset(out, 0, sizeof *out);
  if (b->be) {
    int rc = b->be->stats(b->be_arg, now, out);
    out->kind = b->kind;
    out->refused = atomic_load_explicit(&b->refused, RELAXED);
    return rc;
  }
  out->kind = b->kind;
  out->refused = atomic_load_explicit(&b->refused, RELAXED);
  switch (b->kind) {
  case LK_BUDGET_RATIO: {
    int64_t req, ret;
    lk__ratio_sums(b, now, &req, &ret);
    int64_t allowance = b->reserve + req * b->gain, used = ret * LK_RATIO_RETRY;
    out->capacity = allowance;
    out->level = allowance - used;
    out->remaining = out->level > 0 ? out->level / LK_RATIO_RETRY : 0;
    out->consumption = allowance > 0 ? clamp01((double)used / (double)allowance) : 1.0;
    break;
  }
  case LK_BUDGET_TOKEN: {
    int64_t t = atomic_load_explicit(&b->level, RELAXED);
    out->capacity = b->max;
    out->level = t;
    /* Failures until tokens <= max/2: smallest k with (t - 1000k) * 2 <= max. */
    int64_t over = t * 2 - b->max;
    out->remaining = over > 0 ? (over + 1999) / 2000 : 0;
    out->consumption = over > 0 ? clamp01((double)(b->max - t) * 2.0 / (double)b->max) : 1.0;
    break;
  }
  default: {
    int64_t a = atomic_load_explicit(&b->level, RELAXED);
    out->capacity = b->max;
    out->level = a;
    out->remaining = a / b->cost;
    out->consumption = a < b->cost ? 1.0 : clamp01((double)(b->max - a) / (double)b->max);
    break;
  }
  }
  return LK_OK;
}

int64_t lk_budget_remaining(const lk_budget *b, int64_t now) {
  lk_budget_stats s;
  return lk_budget_stats_get(b, now, &s) == LK_OK ? s.remaining : 0;
}

double lk_budget_consumption(const lk_budget *b, int64_t now) {
  lk_budget_stats s;
  return lk_budget_stats_get(b, now, &s) == LK_OK ? s.consumption : 0.0;
}

lk_budget_kind lk_budget_kind_of(const lk_budget *b) { return b->kind; }

const char *lk_budget_kind_name(lk_budget_kind k) {
  switch (k) {
  case LK_BUDGET_RATIO: return "ratio";
  case LK_BUDGET_TOKEN: return "token";
  case LK_BUDGET_QUOTA: return "quota";
  default: return "unknown";
  }
}
