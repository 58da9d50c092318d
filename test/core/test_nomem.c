/* SPDX-License-Identifier: MIT */
/* The core's objects without memory: every allocation of building (and first using) each one
 * fails in turn, n = 1, 2, ... until the construction makes fewer than n. Each failing
 * construction must say LK_ENOMEM (or NULL, where that is the whole answer) and leave nothing
 * behind (ASan in CI); the last must succeed. Allocation failure on cue: allocfail.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <linkd/adaptive.h>
#include <linkd/breaker.h>
#include <linkd/budget.h>
#include <linkd/bulkhead.h>
#include <linkd/callmetrics.h>
#include <linkd/error.h>
#include <linkd/hist.h>
#include <linkd/limiter.h>
#include <linkd/metrics.h>

#include "allocfail.h"

#include <stdlib.h>

typedef int (*make_fn)(void);

/* Runs make() with its n-th allocation failing for n = 1, 2, ...; returns how many allocations
 * the successful run made. make() frees what it made. */
static long sweep(make_fn make) {
  for (long n = 1;; n++) {
    assert_true(n < 100000);
    allocfail_nth(n);
    int rc = make();
    bool hit = allocfail_end();
    if (!hit) {
      assert_int_equal(rc, LK_OK);
      return n - 1;
    }
    assert_int_equal(rc, LK_ENOMEM);
  }
}

static int make_budgets(void) {
  lk_budget_ratio_config r;
  lk_budget_token_config t;
  lk_budget_quota_config q;
  lk_budget_ratio_config_init_default(&r);
  lk_budget_token_config_init_default(&t);
  lk_budget_quota_config_init_default(&q);
  lk_budget *a = NULL, *b = NULL, *c = NULL;
  int rc = lk_budget_new_ratio(&r, &a, NULL);
  if (rc == LK_OK)
    rc = lk_budget_new_token(&t, &b, NULL);
  if (rc == LK_OK)
    rc = lk_budget_new_quota(&q, &c, NULL);
  if (rc != LK_OK)
    assert_true(!a || !b || !c); /* the failed one's *out is NULL */
  lk_budget_free(a);
  lk_budget_free(b);
  lk_budget_free(c);
  return rc;
}

static int transitions;
static void on_transition(void *ctx, lk_breaker_state from, lk_breaker_state to, int64_t now) {
  (void)ctx;
  (void)from;
  (void)to;
  (void)now;
  transitions++;
}

/* A breaker that delivers transitions: its queue of pending ones grows under its lock. A
 * transition whose delivery has no memory is dropped and counted, never lost as a state. */
static int make_breaker(void) {
  lk_breaker_config c;
  lk_breaker_config_init_default(&c);
  c.on_transition = on_transition;
  lk_breaker *b = NULL;
  int rc = lk_breaker_new(&c, &b, NULL);
  if (rc != LK_OK) {
    assert_null(b);
    return rc;
  }
  transitions = 0;
  assert_int_equal(lk_breaker_transition(b, LK_BREAKER_OPEN, 1), LK_OK);
  assert_int_equal(lk_breaker_transition(b, LK_BREAKER_CLOSED, 2), LK_OK);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_CLOSED);
  lk_breaker_metrics m;
  assert_int_equal(lk_breaker_metrics_get(b, 3, &m), LK_OK);
  assert_int_equal((uint64_t)transitions + m.transitions_undelivered, 2);
  lk_breaker_free(b);
  return LK_OK;
}

static int make_limiter_bulkhead_adaptive(void) {
  lk_limiter_config lc;
  lk_bulkhead_config bc;
  lk_adaptive_config ac;
  lk_limiter_config_init_default(&lc);
  lk_bulkhead_config_init_default(&bc);
  lk_adaptive_config_init_default(&ac);
  lk_limiter *l = NULL;
  lk_bulkhead *bh = NULL;
  lk_adaptive *a = NULL;
  int rc = lk_limiter_new(&lc, &l, NULL);
  if (rc == LK_OK)
    rc = lk_bulkhead_new(&bc, &bh, NULL);
  if (rc == LK_OK)
    rc = lk_adaptive_new(&ac, &a, NULL);
  if (rc == LK_OK)
    rc = lk_adaptive_attach(a, bh);
  lk_adaptive_free(a);
  lk_bulkhead_free(bh);
  lk_limiter_free(l);
  return rc;
}

/* A registry with a counter, a histogram and a client's call metrics, rendered. */
static int make_metrics(void) {
  lk_metrics *m = lk_metrics_new();
  if (!m)
    return LK_ENOMEM;
  int rc = LK_OK;
  lk_counter *c = lk_metrics_counter(m, "demo_total", "A counter.", NULL);
  lk_hist *h = c ? lk_metrics_histogram(m, "demo_seconds", "A histogram.", NULL) : NULL;
  lk_call_metrics *cm = h ? lk_call_metrics_new(m, "books") : NULL;
  if (!cm) {
    rc = LK_ENOMEM;
  } else {
    lk_counter_add(c, 1);
    lk_hist_record(h, 1000);
    lk_call_metrics_call_start(cm);
    char *text = NULL;
    size_t len = 0;
    rc = lk_metrics_render(m, &text, &len);
    if (rc == LK_OK)
      assert_non_null(text);
    free(text);
  }
  lk_call_metrics_free(cm);
  lk_metrics_free(m);
  return rc;
}

static int make_hist(void) {
  lk_hist *h = lk_hist_new(1, LK_SEC(60));
  if (!h)
    return LK_ENOMEM;
  lk_hist *g = lk_hist_new(1, LK_SEC(60));
  int rc = g ? lk_hist_merge(g, h) : LK_ENOMEM;
  lk_hist_free(g);
  lk_hist_free(h);
  return rc;
}

static void test_budgets(void **s) {
  (void)s;
  assert_true(sweep(make_budgets) >= 3);
}

static void test_breaker(void **s) {
  (void)s;
  assert_true(sweep(make_breaker) >= 1);
}

static void test_limiter_bulkhead_adaptive(void **s) {
  (void)s;
  assert_true(sweep(make_limiter_bulkhead_adaptive) >= 3);
}

static void test_metrics(void **s) {
  (void)s;
  assert_true(sweep(make_metrics) >= 4);
}

static void test_hist(void **s) {
  (void)s;
  assert_true(sweep(make_hist) >= 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_budgets),
      cmocka_unit_test(test_breaker),
      cmocka_unit_test(test_limiter_bulkhead_adaptive),
      cmocka_unit_test(test_metrics),
      cmocka_unit_test(test_hist),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
