/* SPDX-License-Identifier: MIT */
/* Hedging policy: fixed and percentile delays, the schedule's boundaries, max hedges, the retry
 * budget hook, saturation, bad config, zero allocation. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <linkd/budget.h>
#include <linkd/error.h>
#include <linkd/hedge.h>
#include <linkd/hist.h>

#include "testutil.h"

#include <limits.h>
#include <math.h>

/* A stand-in histogram: returns a set value and remembers the quantile asked for. */
typedef struct fake_hist {
  int64_t value;
  double last_q;
  int calls;
} fake_hist;

static int64_t fake_percentile(void *ctx, double q) {
  fake_hist *h = ctx;
  h->last_q = q;
  h->calls++;
  return h->value;
}

/* A stand-in budget: `left` hedges, then LK_EBUDGET; records when it was asked. */
typedef struct fake_budget {
  int left;
  int calls;
  int64_t last_now;
  int refusal;
} fake_budget;

static int fake_spend(void *ctx, int64_t now) {
  fake_budget *b = ctx;
  b->calls++;
  b->last_now = now;
  if (b->left <= 0)
    return b->refusal;
  b->left--;
  return LK_OK;
}

static lk_hedge_policy fixed(int max_hedges, int64_t delay) {
  lk_hedge_policy p;
  lk_hedge_policy_init_default(&p);
  p.max_hedges = max_hedges;
  p.delay = delay;
  assert_int_equal(lk_hedge_policy_validate(&p, NULL), LK_OK);
  return p;
}

static void bad_config_rejected(void **state) {
  (void)state;
  lk_hedge_policy ok;
  lk_hedge_policy_init_default(&ok);
  const char *why = "unset";
  assert_int_equal(lk_hedge_policy_validate(&ok, &why), LK_OK);
  assert_null(why);
  assert_int_equal(ok.max_hedges, 1);
  assert_int_equal(ok.delay, LK_MS(100));
  lk_hedge_policy bad[9];
  for (int i = 0; i < 9; i++)
    bad[i] = ok;
  bad[0].max_hedges = -1;
  bad[1].max_hedges = LK_HEDGE_MAX_HEDGES + 1;
  bad[2].delay = -1;
  bad[3].quantile = NAN;
  bad[4].quantile = 100.5;
  bad[5].quantile = 95.0; /* no percentile function */
  bad[6].min_delay = -1;
  bad[7].min_delay = 10, bad[7].max_delay = 9;
  bad[8].quantile = -1.0;
  for (int i = 0; i < 9; i++) {
    why = NULL;
    assert_int_equal(lk_hedge_policy_validate(&bad[i], &why), LK_ECONFIG);
    assert_non_null(why);
  }
  assert_int_equal(lk_hedge_policy_validate(NULL, &why), LK_ECONFIG);
}

static void fixed_delay_schedule(void **state) {
  (void)state;
  lk_hedge_policy p = fixed(2, LK_MS(100));
  int64_t s = LK_SEC(50);
  lk_hedge_decision d = lk_hedge_decide(&p, s, s, 0);
  assert_false(d.send);
  assert_int_equal(d.next_at, s + LK_MS(100));
  assert_int_equal(d.reason, LK_OK);
  d = lk_hedge_decide(&p, s, s + LK_MS(100) - 1, 0);
  assert_false(d.send);
  assert_int_equal(d.next_at, s + LK_MS(100));
  d = lk_hedge_decide(&p, s, s + LK_MS(100), 0); /* exactly due */
  assert_true(d.send);
  assert_int_equal(d.next_at, s + LK_MS(200));
  d = lk_hedge_decide(&p, s, s + LK_MS(150), 1);
  assert_false(d.send);
  assert_int_equal(d.next_at, s + LK_MS(200));
  /* Late callers still get the due hedge, one per decision. */
  d = lk_hedge_decide(&p, s, s + LK_MS(900), 1);
  assert_true(d.send);
  assert_int_equal(d.next_at, INT64_MAX); /* that was the last */
  d = lk_hedge_decide(&p, s, s + LK_MS(900), 2);
  assert_false(d.send);
  assert_int_equal(d.next_at, INT64_MAX);
  assert_int_equal(d.reason, LK_EATTEMPTS);
  /* A clock reading before the start is simply not due yet. */
  d = lk_hedge_decide(&p, s, s - LK_SEC(1), 0);
  assert_false(d.send);
  assert_int_equal(d.next_at, s + LK_MS(100));
}

static void zero_hedges_and_zero_delay(void **state) {
  (void)state;
  lk_hedge_policy off = fixed(0, LK_MS(10));
  lk_hedge_decision d = lk_hedge_decide(&off, 0, LK_SEC(100), 0);
  assert_false(d.send);
  assert_int_equal(d.next_at, INT64_MAX);
  assert_int_equal(d.reason, LK_EATTEMPTS);
  /* Delay 0: every hedge is due at the start (parallel requests). */
  lk_hedge_policy par = fixed(3, 0);
  for (int sent = 0; sent < 3; sent++) {
    d = lk_hedge_decide(&par, LK_SEC(1), LK_SEC(1), sent);
    assert_true(d.send);
    assert_int_equal(d.next_at, sent < 2 ? LK_SEC(1) : INT64_MAX);
  }
  assert_false(lk_hedge_decide(&par, LK_SEC(1), LK_SEC(1), 3).send);
}

static void percentile_delay(void **state) {
  (void)state;
  fake_hist h = {LK_MS(42), 0.0, 0};
  lk_hedge_policy p = fixed(1, LK_MS(500));
  p.quantile = 95.0;
  p.percentile = fake_percentile;
  p.percentile_ctx = &h;
  assert_int_equal(lk_hedge_policy_validate(&p, NULL), LK_OK);
  assert_int_equal(lk_hedge_delay(&p), LK_MS(42));
  assert_true(h.last_q == 95.0);
  lk_hedge_decision d = lk_hedge_decide(&p, 0, LK_MS(41), 0);
  assert_false(d.send);
  assert_int_equal(d.next_at, LK_MS(42));
  assert_true(lk_hedge_decide(&p, 0, LK_MS(42), 0).send);
  /* Clamped to [min_delay, max_delay]. */
  p.min_delay = LK_MS(50);
  p.max_delay = LK_MS(80);
  assert_int_equal(lk_hedge_delay(&p), LK_MS(50));
  h.value = LK_MS(300);
  assert_int_equal(lk_hedge_delay(&p), LK_MS(80));
  /* No data yet (<= 0): the fixed delay, clamped too. */
  h.value = 0;
  assert_int_equal(lk_hedge_delay(&p), LK_MS(80));
  p.max_delay = INT64_MAX;
  assert_int_equal(lk_hedge_delay(&p), LK_MS(500));
  h.value = -7;
  assert_int_equal(lk_hedge_delay(&p), LK_MS(500));
  /* Fixed mode never consults the histogram. */
  int calls = h.calls;
  p.quantile = 0.0;
  assert_int_equal(lk_hedge_delay(&p), LK_MS(500));
  assert_int_equal(h.calls, calls);
}

static void hedges_spend_the_budget(void **state) {
  (void)state;
  fake_budget b = {1, 0, 0, LK_EBUDGET};
  lk_hedge_policy p = fixed(3, LK_MS(10));
  p.spend = fake_spend;
  p.spend_ctx = &b;
  /* Not due: the budget is not asked. */
  assert_false(lk_hedge_decide(&p, 0, LK_MS(5), 0).send);
  assert_int_equal(b.calls, 0);
  lk_hedge_decision d = lk_hedge_decide(&p, 0, LK_MS(10), 0);
  assert_true(d.send);
  assert_int_equal(b.calls, 1);
  assert_int_equal(b.last_now, LK_MS(10));
  /* Budget exhausted: hedging is over for this call. */
  d = lk_hedge_decide(&p, 0, LK_MS(20), 1);
  assert_false(d.send);
  assert_int_equal(d.reason, LK_EBUDGET);
  assert_int_equal(d.next_at, INT64_MAX);
  assert_int_equal(b.calls, 2);
  /* Max reached: the budget is not asked either. */
  b.left = 5;
  assert_int_equal(lk_hedge_decide(&p, 0, LK_SEC(1), 3).reason, LK_EATTEMPTS);
  assert_int_equal(b.calls, 2);
  /* A hook's own negative code is passed on; a bogus positive one counts as LK_EBUDGET. */
  b.left = 0;
  b.refusal = LK_EBREAKER_OPEN;
  assert_int_equal(lk_hedge_decide(&p, 0, LK_SEC(1), 0).reason, LK_EBREAKER_OPEN);
  b.refusal = 3;
  assert_int_equal(lk_hedge_decide(&p, 0, LK_SEC(1), 0).reason, LK_EBUDGET);
}

static void saturates(void **state) {
  (void)state;
  lk_hedge_policy p = fixed(LK_HEDGE_MAX_HEDGES, INT64_MAX / 4);
  lk_hedge_decision d = lk_hedge_decide(&p, INT64_MAX - 10, INT64_MAX - 10, 5);
  assert_false(d.send);
  assert_int_equal(d.next_at, INT64_MAX);
  d = lk_hedge_decide(&p, 0, INT64_MAX / 4, 0);
  assert_true(d.send);
  assert_int_equal(d.next_at, INT64_MAX / 4 * 2);
  d = lk_hedge_decide(&p, 0, INT64_MAX - 1, 4); /* 5 * delay saturates */
  assert_false(d.send);
  assert_int_equal(d.next_at, INT64_MAX);
  /* Negative counts are treated as 0. */
  assert_int_equal(lk_hedge_decide(&p, 0, 0, -3).next_at, INT64_MAX / 4);
}

/* The adapters documented in hedge.h, with the real histogram and retry budget. */
static int64_t hist_pct(void *h, double q) { return lk_hist_percentile(h, q); }
static int budget_spend(void *b, int64_t now) { return lk_budget_acquire_retry(b, now, false); }

static void real_histogram_and_budget(void **state) {
  (void)state;
  lk_hist *h = lk_hist_new(1000, LK_SEC(60));
  assert_non_null(h);
  lk_budget_quota_config qc;
  lk_budget_quota_config_init_default(&qc);
  qc.capacity = 10;
  qc.retry_cost = 5;
  lk_budget *b = NULL;
  assert_int_equal(lk_budget_new_quota(&qc, &b, NULL), LK_OK);
  lk_hedge_policy p = fixed(3, LK_MS(200));
  p.quantile = 90.0;
  p.percentile = hist_pct;
  p.percentile_ctx = h;
  p.spend = budget_spend;
  p.spend_ctx = b;
  assert_int_equal(lk_hedge_policy_validate(&p, NULL), LK_OK);
  /* Empty histogram: the fixed delay. */
  assert_int_equal(lk_hedge_delay(&p), LK_MS(200));
  /* 90 % of calls take ~10 ms, 10 % take 1 s: p90 is ~10 ms (within the 1 % bucket error). */
  for (int i = 0; i < 1000; i++)
    lk_hist_record(h, i % 10 == 9 ? LK_SEC(1) : LK_MS(10));
  int64_t d = lk_hedge_delay(&p);
  assert_true(d >= LK_MS(10) && d <= LK_MS(10) + LK_MS(10) / 100);
  /* Capacity 10 at 5 per hedge: two hedges are paid for, the third is refused. */
  lk_hedge_decision r = lk_hedge_decide(&p, 0, d, 0);
  assert_true(r.send);
  assert_int_equal(r.next_at, 2 * d);
  assert_true(lk_hedge_decide(&p, 0, 2 * d, 1).send);
  r = lk_hedge_decide(&p, 0, 3 * d, 2);
  assert_false(r.send);
  assert_int_equal(r.reason, LK_EBUDGET);
  lk_budget_free(b);
  lk_hist_free(h);
}

static void no_allocation_per_call(void **state) {
  (void)state;
  fake_hist h = {LK_MS(3), 0.0, 0};
  fake_budget b = {1 << 30, 0, 0, LK_EBUDGET};
  lk_hedge_policy p = fixed(2, LK_MS(10));
  p.quantile = 99.0;
  p.percentile = fake_percentile;
  p.percentile_ctx = &h;
  p.spend = fake_spend;
  p.spend_ctx = &b;
  lk_test_alloc_count_start();
  int64_t sink = 0;
  for (int i = 0; i < 10000; i++) {
    lk_hedge_decision d = lk_hedge_decide(&p, 0, (int64_t)(i % 10) * LK_MS(1), i % 3);
    sink += d.send + (d.next_at & 1);
  }
  uint64_t allocs = lk_test_alloc_count_stop();
  assert_true(sink > 0);
  assert_int_equal(allocs, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bad_config_rejected),
      cmocka_unit_test(fixed_delay_schedule),
      cmocka_unit_test(zero_hedges_and_zero_delay),
      cmocka_unit_test(percentile_delay),
      cmocka_unit_test(hedges_spend_the_budget),
      cmocka_unit_test(saturates),
      cmocka_unit_test(real_histogram_and_budget),
      cmocka_unit_test(no_allocation_per_call),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
