/* SPDX-License-Identifier: MIT */
/* Retry budgets, one test per behaviour, all with time passed in (a fake clock is just a number).
 *   RATIO  Finagle's RetryBudget shape: floor, percentage, sliding window, bucket boundaries
 *   TOKEN  gRFC A6 retry throttling: the worked example (10 tokens, ratio 0.1), clamps, milli units
 *   QUOTA  AWS SDK standard retry quota: 500 / 5 / 10 / +1, refunds through tickets */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <linkd/budget.h>
#include <linkd/error.h>
#include <linkd/rand.h>

#include "testutil.h"

#include <math.h>
#include <string.h>

#define R LK_SEC(1)

static lk_budget *ratio(double percent, int floor_per_s, int64_t ttl, int buckets) {
  lk_budget_ratio_config c;
  lk_budget_ratio_config_init_default(&c);
  c.percent = percent;
  c.min_retries_per_sec = floor_per_s;
  c.ttl = ttl;
  c.buckets = buckets;
  lk_budget *b = NULL;
  assert_int_equal(lk_budget_new_ratio(&c, &b, NULL), LK_OK);
  return b;
}

static lk_budget *token(double max, double ratio_) {
  lk_budget_token_config c = {max, ratio_};
  lk_budget *b = NULL;
  assert_int_equal(lk_budget_new_token(&c, &b, NULL), LK_OK);
  return b;
}

static lk_budget *quota_default(void) {
  lk_budget_quota_config c;
  lk_budget_quota_config_init_default(&c);
  lk_budget *b = NULL;
  assert_int_equal(lk_budget_new_quota(&c, &b, NULL), LK_OK);
  return b;
}

/* Grants retries at `now` until refused; returns how many were granted (bounded). */
static int drain(lk_budget *b, int64_t now, bool after_timeout) {
  int n = 0;
  while (n < 100000 && lk_budget_acquire_retry(b, now, after_timeout) == LK_OK)
    n++;
  return n;
}

/* A budget declared single-threaded gives the same answers as a shared one: the same seeded
 * sequence of requests, retries (after timeouts or not), successes, failures and queries, with
 * time moving on in steps that cross the ratio window's buckets (and sometimes back), on a
 * twin that is declared single-threaded after its first steps. */
static void single_thread_same_results(void **state) {
  (void)state;
  for (int form = 0; form < 3; form++) {
    lk_budget *a = form == 0 ? ratio(20, 1, LK_SEC(2), 4) : form == 1 ? token(10, 0.1) : quota_default();
    lk_budget *b = form == 0 ? ratio(20, 1, LK_SEC(2), 4) : form == 1 ? token(10, 0.1) : quota_default();
    lk_rand_fast g;
    lk_rand_fast_seeded(&g, 7 + (uint64_t)form);
    int64_t now = LK_SEC(100);
    lk_budget_ticket ta = {0}, tb = {0};
    for (int i = 0; i < 20000; i++) {
      if (i == 50)
        lk_budget_set_single_thread(b);
      uint64_t r = lk_rand_next64(&g.base);
      switch (r % 6) {
      case 0:
      case 1:
        lk_budget_record_request(a, now);
        lk_budget_record_request(b, now);
        break;
      case 2: {
        bool after = (r >> 8) & 1;
        assert_int_equal(lk_budget_acquire_retry_ticket(a, now, after, &ta),
                         lk_budget_acquire_retry_ticket(b, now, after, &tb));
        assert_int_equal(ta.cost, tb.cost);
        break;
      }
      case 3:
        lk_budget_record_success_ticket(a, now, &ta);
        lk_budget_record_success_ticket(b, now, &tb);
        break;
      case 4:
        lk_budget_record_failure(a, now);
        lk_budget_record_failure(b, now);
        break;
      default: break;
      }
      /* mostly forward, by up to 0.4 s; one step in 16 goes back by up to 0.1 s */
      int64_t step = (int64_t)((r >> 16) % (uint64_t)LK_MS(400));
      now += ((r >> 40) & 15) == 0 ? -step / 4 : step / 50;
      lk_budget_stats sa, sb;
      assert_int_equal(lk_budget_stats_get(a, now, &sa), LK_OK);
      assert_int_equal(lk_budget_stats_get(b, now, &sb), LK_OK);
      assert_int_equal(sa.level, sb.level);
      assert_int_equal(sa.capacity, sb.capacity);
      assert_int_equal(sa.remaining, sb.remaining);
      assert_int_equal(sa.refused, sb.refused);
    }
    lk_budget_stats sa;
    assert_int_equal(lk_budget_stats_get(a, now, &sa), LK_OK);
    assert_true(sa.refused > 0); /* the sequence did reach the budget's limit */
    lk_budget_free(a);
    lk_budget_free(b);
  }
  lk_budget_set_single_thread(NULL); /* a no-op */
}

/* --- configuration ---------------------------------------------------------------------------- */

static void defaults(void **state) {
  (void)state;
  lk_budget_ratio_config r;
  lk_budget_ratio_config_init_default(&r);
  assert_true(r.percent == 20.0);
  assert_int_equal(r.ttl, LK_SEC(10));
  assert_int_equal(r.min_retries_per_sec, 10);
  assert_int_equal(r.buckets, 10);
  assert_int_equal(lk_budget_ratio_config_validate(&r, NULL), LK_OK);
  lk_budget_token_config t;
  lk_budget_token_config_init_default(&t);
  assert_true(t.max_tokens == 10.0 && t.token_ratio == 0.1);
  assert_int_equal(lk_budget_token_config_validate(&t, NULL), LK_OK);
  lk_budget_quota_config q;
  lk_budget_quota_config_init_default(&q);
  assert_int_equal(q.capacity, 500);
  assert_int_equal(q.retry_cost, 5);
  assert_int_equal(q.timeout_cost, 10);
  assert_int_equal(q.no_retry_increment, 1);
  assert_int_equal(lk_budget_quota_config_validate(&q, NULL), LK_OK);
}

static void expect_bad_ratio(void (*mut)(lk_budget_ratio_config *), const char *field) {
  lk_budget_ratio_config c;
  lk_budget_ratio_config_init_default(&c);
  mut(&c);
  const char *why = NULL;
  lk_budget *b = (lk_budget *)&c; /* must be reset to NULL */
  assert_int_equal(lk_budget_new_ratio(&c, &b, &why), LK_ECONFIG);
  assert_null(b);
  assert_non_null(why);
  assert_non_null(strstr(why, field));
}

static void r_pct_neg(lk_budget_ratio_config *c) { c->percent = -0.5; }
static void r_pct_big(lk_budget_ratio_config *c) { c->percent = 1000.5; }
static void r_pct_nan(lk_budget_ratio_config *c) { c->percent = NAN; }
static void r_ttl_small(lk_budget_ratio_config *c) { c->ttl = LK_MS(1) - 1; }
static void r_ttl_big(lk_budget_ratio_config *c) { c->ttl = LK_SEC(3601); }
static void r_floor_neg(lk_budget_ratio_config *c) { c->min_retries_per_sec = -1; }
static void r_floor_big(lk_budget_ratio_config *c) { c->min_retries_per_sec = 1000001; }
static void r_buckets0(lk_budget_ratio_config *c) { c->buckets = 0; }
static void r_buckets_big(lk_budget_ratio_config *c) { c->buckets = 3601; }
static void r_width(lk_budget_ratio_config *c) {
  c->ttl = LK_MS(10);
  c->buckets = 11;
}

static void ratio_config_rejected(void **state) {
  (void)state;
  expect_bad_ratio(r_pct_neg, "percent");
  expect_bad_ratio(r_pct_big, "percent");
  expect_bad_ratio(r_pct_nan, "percent");
  expect_bad_ratio(r_ttl_small, "ttl");
  expect_bad_ratio(r_ttl_big, "ttl");
  expect_bad_ratio(r_floor_neg, "min_retries_per_sec");
  expect_bad_ratio(r_floor_big, "min_retries_per_sec");
  expect_bad_ratio(r_buckets0, "buckets");
  expect_bad_ratio(r_buckets_big, "buckets");
  expect_bad_ratio(r_width, "ttl / buckets");
  /* Edges that are fine. */
  lk_budget_ratio_config c;
  lk_budget_ratio_config_init_default(&c);
  c.percent = 0;
  c.min_retries_per_sec = 0;
  c.ttl = LK_MS(10);
  c.buckets = 10;
  assert_int_equal(lk_budget_ratio_config_validate(&c, NULL), LK_OK);
  c.percent = 1000;
  c.ttl = LK_SEC(3600);
  c.buckets = 3600;
  c.min_retries_per_sec = 1000000;
  assert_int_equal(lk_budget_ratio_config_validate(&c, NULL), LK_OK);
}

static void token_config_rejected(void **state) {
  (void)state;
  const struct {
    double max, ratio;
    const char *field;
  } bad[] = {{0, 0.1, "max_tokens"},      {-1, 0.1, "max_tokens"}, {1000.001, 0.1, "max_tokens"},
             {0.0004, 0.1, "max_tokens"}, {10, 0, "token_ratio"},  {10, 0.0009, "token_ratio"},
             {10, 1001, "token_ratio"},   {10, NAN, "token_ratio"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lk_budget_token_config c = {bad[i].max, bad[i].ratio};
    const char *why = NULL;
    lk_budget *b = NULL;
    assert_int_equal(lk_budget_new_token(&c, &b, &why), LK_ECONFIG);
    assert_null(b);
    assert_non_null(strstr(why, bad[i].field));
  }
}

static void quota_config_rejected(void **state) {
  (void)state;
  const struct {
    int64_t cap, cost, tcost, inc;
    const char *field;
  } bad[] = {{0, 5, 10, 1, "capacity"},         {INT64_C(1000000000001), 5, 10, 1, "capacity"},
             {500, 0, 10, 1, "retry_cost"},     {500, 501, 10, 1, "retry_cost"},
             {500, 5, 0, 1, "timeout_cost"},    {500, 5, 501, 1, "timeout_cost"},
             {500, 5, 10, -1, "no_retry_increment"}, {500, 5, 10, 501, "no_retry_increment"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lk_budget_quota_config c = {bad[i].cap, bad[i].cost, bad[i].tcost, bad[i].inc};
    const char *why = NULL;
    lk_budget *b = NULL;
    assert_int_equal(lk_budget_new_quota(&c, &b, &why), LK_ECONFIG);
    assert_null(b);
    assert_non_null(strstr(why, bad[i].field));
  }
}

static void null_arguments(void **state) {
  (void)state;
  lk_budget *b = NULL;
  lk_budget_ratio_config r;
  lk_budget_ratio_config_init_default(&r);
  assert_int_equal(lk_budget_new_ratio(NULL, &b, NULL), LK_EINVAL);
  assert_int_equal(lk_budget_new_ratio(&r, NULL, NULL), LK_EINVAL);
  assert_int_equal(lk_budget_new_token(NULL, &b, NULL), LK_EINVAL);
  assert_int_equal(lk_budget_new_quota(NULL, &b, NULL), LK_EINVAL);
  const char *why = NULL;
  assert_int_equal(lk_budget_ratio_config_validate(NULL, &why), LK_ECONFIG);
  assert_non_null(why);
  lk_budget_stats s;
  assert_int_equal(lk_budget_stats_get(NULL, 0, &s), LK_EINVAL);
  assert_int_equal(lk_budget_remaining(NULL, 0), 0);
  assert_true(lk_budget_consumption(NULL, 0) == 0.0);
  lk_budget_free(NULL);
  assert_string_equal(lk_budget_kind_name(LK_BUDGET_RATIO), "ratio");
  assert_string_equal(lk_budget_kind_name(LK_BUDGET_TOKEN), "token");
  assert_string_equal(lk_budget_kind_name(LK_BUDGET_QUOTA), "quota");
  assert_string_equal(lk_budget_kind_name((lk_budget_kind)7), "unknown");
}

/* --- RATIO ------------------------------------------------------------------------------------ */

/* Defaults: 20 %, 10 s, 10/s. With no traffic the floor alone allows 10/s * 10 s = 100. */
static void ratio_floor_alone(void **state) {
  (void)state;
  lk_budget *b = ratio(20, 10, LK_SEC(10), 10);
  assert_int_equal(lk_budget_kind_of(b), LK_BUDGET_RATIO);
  int64_t t = LK_SEC(1000);
  assert_int_equal(lk_budget_remaining(b, t), 100);
  assert_int_equal(drain(b, t, false), 100);
  lk_budget_stats s;
  assert_int_equal(lk_budget_stats_get(b, t, &s), LK_OK);
  assert_int_equal(s.remaining, 0);
  assert_true(s.consumption == 1.0);
  assert_int_equal(s.refused, 1);
  assert_int_equal(s.capacity, 100 * INT64_C(1000000));
  /* Withdrawals expire with their bucket: 10 s later the floor is whole again. */
  assert_int_equal(drain(b, t + LK_SEC(10) - 1, false), 0);
  assert_int_equal(drain(b, t + LK_SEC(10), false), 100);
  lk_budget_free(b);
}

/* percent % of the requests in the window, exactly, in micro-retries. */
static void ratio_percent(void **state) {
  (void)state;
  lk_budget *b = ratio(20, 0, LK_SEC(10), 10);
  assert_int_equal(drain(b, 0, false), 0); /* no floor, no requests: nothing */
  for (int i = 0; i < 9; i++)
    lk_budget_record_request(b, 0);
  assert_int_equal(lk_budget_remaining(b, 0), 1); /* 1.8 retries */
  assert_int_equal(drain(b, 0, true), 1);        /* after_timeout changes nothing here */
  lk_budget_record_request(b, 0);                 /* 10 requests = 2.0 */
  assert_int_equal(drain(b, 0, false), 1);
  lk_budget_stats s;
  lk_budget_stats_get(b, 0, &s);
  assert_int_equal(s.level, 0);
  assert_true(s.consumption == 1.0);
  for (int i = 0; i < 5; i++)
    lk_budget_record_request(b, 0);
  assert_int_equal(drain(b, 0, false), 1); /* 15 requests = 3.0 */
  /* Successes and failures do not matter to this form. */
  lk_budget_record_failure(b, 0);
  lk_budget_record_success(b, 0);
  assert_int_equal(drain(b, 0, false), 0);
  lk_budget_free(b);
}

/* Deposits and withdrawals leave the window with their bucket; boundaries are exact. */
static void ratio_window_slides(void **state) {
  (void)state;
  lk_budget *b = ratio(50, 0, LK_SEC(10), 10); /* 1 s buckets */
  for (int i = 0; i < 10; i++)
    lk_budget_record_request(b, 0);
  assert_int_equal(drain(b, 0, false), 5);
  for (int i = 0; i < 2; i++)
    lk_budget_record_request(b, LK_SEC(5));
  assert_int_equal(drain(b, LK_SEC(5), false), 1);
  /* Last ns of the window that holds second 0. */
  lk_budget_stats s;
  lk_budget_stats_get(b, LK_SEC(10) - 1, &s);
  assert_int_equal(s.capacity, 6 * INT64_C(1000000));
  assert_int_equal(s.level, 0);
  /* Second 0 leaves: 10 requests and 5 retries go with it; second 5 stays (2 req, 1 retry). */
  lk_budget_stats_get(b, LK_SEC(10), &s);
  assert_int_equal(s.capacity, INT64_C(1000000));
  assert_int_equal(s.level, 0);
  assert_int_equal(drain(b, LK_SEC(10), false), 0);
  lk_budget_record_request(b, LK_SEC(10));
  lk_budget_record_request(b, LK_SEC(10) + 1);
  assert_int_equal(drain(b, LK_SEC(10) + 2, false), 1);
  /* Second 5 leaves at 15 s: its two requests and its retry go together. */
  assert_int_equal(drain(b, LK_SEC(15), false), 0);
  lk_budget_stats_get(b, LK_SEC(15), &s);
  assert_int_equal(s.capacity, INT64_C(1000000)); /* the two requests of second 10 */
  assert_int_equal(s.level, 0);                    /* and its one retry */
  /* A jump far past the window empties it. */
  lk_budget_stats_get(b, LK_SEC(1000), &s);
  assert_int_equal(s.capacity, 0);
  assert_true(s.consumption == 1.0);
  assert_int_equal(drain(b, LK_SEC(1000), false), 0);
  lk_budget_record_request(b, LK_SEC(1000));
  lk_budget_record_request(b, LK_SEC(1000));
  assert_int_equal(drain(b, LK_SEC(1000), false), 1);
  lk_budget_free(b);
}

/* A caller whose clock is behind the head (within the window) counts in the head bucket; stats
 * never modify. (One from before the whole window restarts it: test_core_contract.c.) */
static void ratio_clock_behind_and_queries(void **state) {
  (void)state;
  lk_budget *b = ratio(100, 0, LK_SEC(2), 2);
  lk_budget_record_request(b, LK_SEC(5));
  lk_budget_record_request(b, LK_SEC(4)); /* behind: counted at second 5 */
  lk_budget_stats s;
  lk_budget_stats_get(b, LK_SEC(5), &s);
  assert_int_equal(s.remaining, 2);
  assert_true(s.consumption == 0.0);
  /* Querying the future shows the window empty but changes nothing. */
  assert_int_equal(lk_budget_remaining(b, LK_SEC(100)), 0);
  assert_int_equal(lk_budget_remaining(b, LK_SEC(5)), 2);
  assert_int_equal(drain(b, LK_SEC(6) - 1, false), 2);
  assert_true(lk_budget_consumption(b, LK_SEC(6) - 1) == 1.0);
  /* Negative times work too (floor division). */
  lk_budget *n = ratio(100, 0, LK_SEC(2), 2);
  lk_budget_record_request(n, -1);
  assert_int_equal(drain(n, -1, false), 1);
  lk_budget_record_request(n, -1);
  assert_int_equal(lk_budget_remaining(n, LK_SEC(1) - 1), 1); /* second -1 still counts */
  assert_int_equal(lk_budget_remaining(n, LK_SEC(1)), 0);     /* and then it left */
  assert_int_equal(drain(n, LK_SEC(1) - 1, false), 1);
  lk_budget_free(n);
  lk_budget_free(b);
}

/* Consumption is retries / allowance. */
static void ratio_consumption(void **state) {
  (void)state;
  lk_budget *b = ratio(10, 1, LK_SEC(10), 10); /* reserve 10 retries */
  for (int i = 0; i < 100; i++)
    lk_budget_record_request(b, 0); /* + 10 */
  for (int i = 0; i < 5; i++)
    assert_int_equal(lk_budget_acquire_retry(b, 0, false), LK_OK);
  lk_budget_stats s;
  lk_budget_stats_get(b, 0, &s);
  assert_int_equal(s.remaining, 15);
  assert_true(s.consumption > 0.2499 && s.consumption < 0.2501);
  lk_budget_free(b);
}

/* --- TOKEN ------------------------------------------------------------------------------------ */

/* gRFC A6: maxTokens 10, tokenRatio 0.1; retries while tokens > 5. */
static void token_grpc_example(void **state) {
  (void)state;
  lk_budget *b = token(10, 0.1);
  assert_int_equal(lk_budget_kind_of(b), LK_BUDGET_TOKEN);
  lk_budget_stats s;
  lk_budget_stats_get(b, 0, &s);
  assert_int_equal(s.level, 10000);
  assert_int_equal(s.capacity, 10000);
  assert_int_equal(s.remaining, 5);
  assert_true(s.consumption == 0.0);
  for (int i = 0; i < 4; i++) {
    lk_budget_record_failure(b, 0);
    assert_int_equal(lk_budget_acquire_retry(b, 0, false), LK_OK);
  }
  lk_budget_record_failure(b, 0); /* 5 tokens: not > 5 */
  assert_int_equal(lk_budget_acquire_retry(b, 0, true), LK_EBUDGET);
  lk_budget_stats_get(b, 0, &s);
  assert_int_equal(s.level, 5000);
  assert_int_equal(s.remaining, 0);
  assert_true(s.consumption == 1.0);
  assert_int_equal(s.refused, 1);
  lk_budget_record_success(b, 0); /* 5.1 */
  assert_int_equal(lk_budget_acquire_retry(b, 0, false), LK_OK);
  lk_budget_stats_get(b, 0, &s);
  assert_int_equal(s.level, 5100);
  assert_int_equal(s.remaining, 1);
  /* Retries themselves cost nothing. */
  assert_int_equal(lk_budget_acquire_retry(b, 0, false), LK_OK);
  assert_int_equal(lk_budget_remaining(b, 0), 1);
  /* Requests are not used. */
  lk_budget_record_request(b, 0);
  assert_int_equal(lk_budget_remaining(b, 0), 1);
  lk_budget_free(b);
}

static void token_clamps_and_milli_units(void **state) {
  (void)state;
  lk_budget *b = token(10, 0.001);
  for (int i = 0; i < 50; i++)
    lk_budget_record_failure(b, 0);
  lk_budget_stats s;
  lk_budget_stats_get(b, 0, &s);
  assert_int_equal(s.level, 0); /* floored at 0 */
  /* 10000 successes of 0.001 give exactly 10 tokens: integer milli-tokens, no drift. */
  for (int i = 0; i < 5001; i++)
    lk_budget_record_success(b, 0);
  lk_budget_stats_get(b, 0, &s);
  assert_int_equal(s.level, 5001);
  assert_int_equal(lk_budget_acquire_retry(b, 0, false), LK_OK);
  for (int i = 0; i < 4999; i++)
    lk_budget_record_success(b, 0);
  lk_budget_stats_get(b, 0, &s);
  assert_int_equal(s.level, 10000);
  for (int i = 0; i < 10; i++)
    lk_budget_record_success(b, 0);
  lk_budget_stats_get(b, 0, &s);
  assert_int_equal(s.level, 10000); /* capped at max */
  lk_budget_free(b);
  /* An odd max: 3 tokens, threshold 1.5. */
  b = token(3, 1);
  lk_budget_record_failure(b, 0); /* 2 */
  assert_int_equal(lk_budget_acquire_retry(b, 0, false), LK_OK);
  lk_budget_record_failure(b, 0); /* 1 */
  assert_int_equal(lk_budget_acquire_retry(b, 0, false), LK_EBUDGET);
  /* Rounding to 0.001: 2.0004 -> 2.000, ratio 0.0016 -> 0.002 */
  lk_budget_free(b);
  b = token(2.0004, 0.0016);
  lk_budget_stats_get(b, 0, &s);
  assert_int_equal(s.capacity, 2000);
  lk_budget_record_failure(b, 0);
  lk_budget_record_success(b, 0);
  lk_budget_stats_get(b, 0, &s);
  assert_int_equal(s.level, 1002);
  lk_budget_free(b);
}

/* --- QUOTA ------------------------------------------------------------------------------------ */

static void quota_costs(void **state) {
  (void)state;
  lk_budget *b = quota_default();
  assert_int_equal(lk_budget_kind_of(b), LK_BUDGET_QUOTA);
  assert_int_equal(lk_budget_remaining(b, 0), 100);
  assert_int_equal(drain(b, 0, true), 50); /* 500 / 10 */
  assert_int_equal(drain(b, 0, false), 0);
  lk_budget_stats s;
  lk_budget_stats_get(b, 0, &s);
  assert_int_equal(s.level, 0);
  assert_true(s.consumption == 1.0);
  assert_int_equal(s.refused, 2);
  lk_budget_free(b);
  b = quota_default();
  assert_int_equal(drain(b, 0, false), 100); /* 500 / 5 */
  /* Failures and requests cost nothing by themselves. */
  lk_budget_record_failure(b, 0);
  lk_budget_record_request(b, 0);
  lk_budget_stats_get(b, 0, &s);
  assert_int_equal(s.level, 0);
  lk_budget_free(b);
}

static void quota_refunds(void **state) {
  (void)state;
  lk_budget *b = quota_default();
  lk_budget_ticket t = {0};
  assert_int_equal(lk_budget_acquire_retry_ticket(b, 0, true, &t), LK_OK);
  assert_int_equal(t.cost, 10);
  assert_int_equal(lk_budget_acquire_retry_ticket(b, 0, false, &t), LK_OK);
  assert_int_equal(t.cost, 5); /* the last retry's cost is what a success refunds */
  lk_budget_stats s;
  lk_budget_stats_get(b, 0, &s);
  assert_int_equal(s.level, 485);
  assert_true(s.consumption > 0.0299 && s.consumption < 0.0301);
  lk_budget_record_success_ticket(b, 0, &t);
  assert_int_equal(t.cost, 0);
  lk_budget_stats_get(b, 0, &s);
  assert_int_equal(s.level, 490);
  /* A success that took nothing gives +1 (ticket at 0, or the plain call). */
  lk_budget_record_success_ticket(b, 0, &t);
  lk_budget_record_success(b, 0);
  lk_budget_stats_get(b, 0, &s);
  assert_int_equal(s.level, 492);
  /* Capped at capacity. */
  for (int i = 0; i < 20; i++)
    lk_budget_record_success(b, 0);
  lk_budget_stats_get(b, 0, &s);
  assert_int_equal(s.level, 500);
  /* A refused retry leaves the ticket alone. */
  assert_int_equal(drain(b, 0, false), 100);
  t.cost = 10;
  assert_int_equal(lk_budget_acquire_retry_ticket(b, 0, false, &t), LK_EBUDGET);
  assert_int_equal(t.cost, 10);
  lk_budget_record_success_ticket(b, 0, &t);
  assert_int_equal(lk_budget_remaining(b, 0), 2);
  lk_budget_free(b);
  /* A custom quota: no increment for plain successes. */
  lk_budget_quota_config c = {20, 3, 7, 0};
  assert_int_equal(lk_budget_new_quota(&c, &b, NULL), LK_OK);
  assert_int_equal(drain(b, 0, true), 2);
  assert_int_equal(drain(b, 0, false), 2); /* 6 left, then 3, then 0 */
  lk_budget_record_success(b, 0);
  assert_int_equal(lk_budget_remaining(b, 0), 0);
  lk_budget_free(b);
}

/* Tickets behave like the plain calls for the other forms. */
static void tickets_other_forms(void **state) {
  (void)state;
  lk_budget *b = ratio(0, 1, LK_SEC(1), 1);
  lk_budget_ticket t = {0};
  assert_int_equal(lk_budget_acquire_retry_ticket(b, 0, false, &t), LK_OK);
  assert_int_equal(t.cost, 1000000);
  lk_budget_record_success_ticket(b, 0, &t);
  assert_int_equal(t.cost, 0);
  assert_int_equal(lk_budget_remaining(b, 0), 0);
  lk_budget_free(b);
  b = token(10, 0.5);
  lk_budget_record_failure(b, 0);
  assert_int_equal(lk_budget_acquire_retry_ticket(b, 0, false, &t), LK_OK);
  assert_int_equal(t.cost, 0);
  lk_budget_record_success_ticket(b, 0, &t);
  lk_budget_stats s;
  lk_budget_stats_get(b, 0, &s);
  assert_int_equal(s.level, 9500);
  lk_budget_free(b);
}

/* --- no allocation on the hot path ------------------------------------------------------------ */

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && !defined(LK_NO_ALLOC_HOOK)
#define COUNTS_ALLOCATIONS 1
#endif

static void no_allocation_per_call(void **state) {
  (void)state;
  lk_budget *bs[3] = {ratio(20, 10, LK_SEC(10), 10), token(10, 0.1), quota_default()};
  lk_test_alloc_count_start();
  uint64_t granted = 0;
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < 20000; i++) {
      int64_t now = (int64_t)i * LK_MS(7); /* crosses many buckets */
      lk_budget_ticket t = {0};
      lk_budget_record_request(bs[k], now);
      if (lk_budget_acquire_retry_ticket(bs[k], now, i % 3 == 0, &t) == LK_OK)
        granted++;
      if (i % 2)
        lk_budget_record_success_ticket(bs[k], now, &t);
      else
        lk_budget_record_failure(bs[k], now);
      lk_budget_stats s;
      lk_budget_stats_get(bs[k], now, &s);
    }
  }
  uint64_t allocs = lk_test_alloc_count_stop();
#ifdef COUNTS_ALLOCATIONS
  assert_int_equal(allocs, 0);
#else
  (void)allocs;
#endif
  assert_true(granted > 0);
  for (int k = 0; k < 3; k++)
    lk_budget_free(bs[k]);
}

/* A backend: the five calls and the queries go to it; refusals are counted by the handle. */
typedef struct fake_budget {
  int acquires, requests, successes, failures, frees;
  int64_t last_ticket;
  int answer;
} fake_budget;

static int fk_acquire(void *arg, int64_t now, bool after_timeout, int64_t *charged) {
  (void)now;
  (void)after_timeout;
  fake_budget *f = arg;
  f->acquires++;
  *charged = 42;
  return f->answer;
}
static void fk_request(void *arg, int64_t now) {
  (void)now;
  ((fake_budget *)arg)->requests++;
}
static void fk_success(void *arg, int64_t now, int64_t cost) {
  (void)now;
  fake_budget *f = arg;
  f->successes++;
  f->last_ticket = cost;
}
static void fk_failure(void *arg, int64_t now) {
  (void)now;
  ((fake_budget *)arg)->failures++;
}
static int fk_stats(void *arg, int64_t now, lk_budget_stats *out) {
  (void)arg;
  (void)now;
  out->remaining = 9;
  out->consumption = 0.25;
  return LK_OK;
}
static void fk_free(void *arg) { ((fake_budget *)arg)->frees++; }

static void backend_gets_every_call(void **state) {
  (void)state;
  static const lk_budget_backend be = {fk_acquire, fk_request, fk_success,
                                       fk_failure, fk_stats,   fk_free};
  fake_budget f = {0};
  lk_budget *b;
  assert_int_equal(lk_budget_new_backend(LK_BUDGET_RATIO, &be, &f, &b), LK_OK);
  assert_ptr_equal(lk_budget_backend_arg(b, &be), &f);
  lk_budget_record_request(b, 1);
  f.answer = LK_OK;
  lk_budget_ticket t = {0};
  assert_int_equal(lk_budget_acquire_retry_ticket(b, 1, false, &t), LK_OK);
  assert_int_equal(t.cost, 42);
  lk_budget_record_success_ticket(b, 1, &t);
  assert_int_equal(f.last_ticket, 42);
  assert_int_equal(t.cost, 0);
  f.answer = LK_EBUDGET;
  assert_int_equal(lk_budget_acquire_retry(b, 1, true), LK_EBUDGET);
  lk_budget_record_failure(b, 1);
  lk_budget_record_success(b, 1);
  assert_int_equal(f.requests, 1);
  assert_int_equal(f.acquires, 2);
  assert_int_equal(f.successes, 2);
  assert_int_equal(f.failures, 1);
  lk_budget_stats st;
  assert_int_equal(lk_budget_stats_get(b, 1, &st), LK_OK);
  assert_int_equal(st.kind, LK_BUDGET_RATIO);
  assert_int_equal(st.remaining, 9);
  assert_int_equal(st.refused, 1);
  assert_true(lk_budget_consumption(b, 1) == 0.25);
  lk_budget_free(b);
  assert_int_equal(f.frees, 1);
  static const lk_budget_backend partial = {.acquire_retry = fk_acquire};
  assert_int_equal(lk_budget_new_backend(LK_BUDGET_RATIO, &partial, &f, &b), LK_EINVAL);
  assert_null(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(defaults),
      cmocka_unit_test(ratio_config_rejected),
      cmocka_unit_test(token_config_rejected),
      cmocka_unit_test(quota_config_rejected),
      cmocka_unit_test(null_arguments),
      cmocka_unit_test(ratio_floor_alone),
      cmocka_unit_test(ratio_percent),
      cmocka_unit_test(ratio_window_slides),
      cmocka_unit_test(ratio_clock_behind_and_queries),
      cmocka_unit_test(ratio_consumption),
      cmocka_unit_test(token_grpc_example),
      cmocka_unit_test(token_clamps_and_milli_units),
      cmocka_unit_test(quota_costs),
      cmocka_unit_test(quota_refunds),
      cmocka_unit_test(tickets_other_forms),
      cmocka_unit_test(no_allocation_per_call),
      cmocka_unit_test(backend_gets_every_call),
      cmocka_unit_test(single_thread_same_results),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
