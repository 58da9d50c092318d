/* SPDX-License-Identifier: MIT */
/* The shared protections around real attempts, in DESIGN.md's order: a retry always asks the
 * budget, an open breaker refuses before any I/O and is never retried, and the call metrics see
 * every attempt. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "httptest.h"

#include <linkd/breaker.h>
#include <linkd/budget.h>
#include <linkd/callmetrics.h>
#include <linkd/metrics.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static faultd_proc FP;

static int teardown(void **s) {
  (void)s;
  faultd_stop(&FP);
  return 0;
}

/* A token budget of 2 allows retries only while more than 1 token is left: the first failure
 * takes one, so its retry is refused. The attempt's kind stays what it was; the call ends
 * LK_EBUDGET. */
static void test_budget_refuses_retry(void **s) {
  (void)s;
  assert_int_equal(faultd_start(&FP, "read_then_close", NULL), 0);
  lk_budget_token_config tc;
  lk_budget_token_config_init_default(&tc);
  tc.max_tokens = 2;
  lk_budget *b = NULL;
  assert_int_equal(lk_budget_new_token(&tc, &b, NULL), LK_OK);
  lk_http_policy pol;
  ht_policy(&pol);
  pol.budget = b;
  ht_run r;
  ht_call(&FP, NULL, "GET", NULL, 0, &pol, 1, &r);
  assert_int_equal(r.err, LK_EBUDGET);
  assert_int_equal(r.nattempts, 1);
  assert_int_equal(r.att[0].failure, LK_F_EMPTY_RESPONSE);
  assert_int_equal(r.att[0].decision.reason, LK_REASON_BUDGET);
  assert_string_equal(lk_http_result_stop(r.res), "retry budget exhausted");
  assert_int_equal(r.nreqs, 1);
  ht_free(&r);
  lk_budget_free(b);
}

/* A quota budget with room for exactly two retries: the first call spends both (3 attempts),
 * the second gets none. */
static void test_budget_shared_by_calls(void **s) {
  (void)s;
  assert_int_equal(faultd_start(&FP, "read_then_close", NULL), 0);
  lk_budget_quota_config qc;
  lk_budget_quota_config_init_default(&qc);
  qc.capacity = 10;
  qc.retry_cost = 5;
  lk_budget *b = NULL;
  assert_int_equal(lk_budget_new_quota(&qc, &b, NULL), LK_OK);
  lk_http_client *c = lk_http_client_new(NULL);
  lk_http_policy pol;
  ht_policy(&pol);
  pol.budget = b;
  ht_run r;
  ht_call(&FP, c, "GET", NULL, 0, &pol, 3, &r);
  assert_int_equal(r.err, LK_EATTEMPTS);
  assert_int_equal(r.nattempts, 3);
  ht_free(&r);
  ht_call(&FP, c, "GET", NULL, 0, &pol, 4, &r);
  assert_int_equal(r.err, LK_EBUDGET);
  assert_int_equal(r.nattempts, 1);
  ht_free(&r);
  lk_http_client_free(c);
  lk_budget_free(b);
}

/* gRPC's throttling counts only failures the policy would retry: five 404s (never retried) leave
 * a TOKEN budget of 3 full, so the 503 after them is still retried (tokens 3 -> 2 > 1.5). Were
 * the 404s counted, the budget would be empty and the 503 would end the call LK_EBUDGET. */
static void test_token_budget_ignores_permanent_failures(void **s) {
  (void)s;
  const char *args[] = {"--script", "404,404,404,404,404,503:ra=0,ok", NULL};
  assert_int_equal(faultd_start(&FP, "status", args), 0);
  lk_budget_token_config tc;
  lk_budget_token_config_init_default(&tc);
  tc.max_tokens = 3;
  lk_budget *b = NULL;
  assert_int_equal(lk_budget_new_token(&tc, &b, NULL), LK_OK);
  lk_http_client *c = lk_http_client_new(NULL);
  lk_http_policy pol;
  ht_policy(&pol);
  pol.budget = b;
  ht_run r;
  for (int i = 0; i < 5; i++) {
    ht_call(&FP, c, "GET", NULL, 0, &pol, 0, &r);
    assert_int_equal(r.err, LK_EHTTP);
    assert_int_equal(r.nattempts, 1);
    assert_int_equal(r.att[0].failure, LK_F_CLIENT_4XX);
    ht_free(&r);
  }
  lk_budget_stats st;
  assert_int_equal(lk_budget_stats_get(b, 0, &st), LK_OK);
  assert_int_equal(st.level, st.capacity); /* 3000 milli-tokens: nothing taken */
  ht_call(&FP, c, "GET", NULL, 0, &pol, 0, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(r.nattempts, 2);
  assert_int_equal(r.att[0].failure, LK_F_HTTP_503);
  assert_true(r.att[0].decision.retry);
  ht_free(&r);
  lk_http_client_free(c);
  lk_budget_free(b);
}

/* Two failed attempts open the breaker; the next call is refused before any I/O (phase QUEUED,
 * BREAKER_OPEN, never retried) and the server sees nothing more. */
static void test_breaker_opens(void **s) {
  (void)s;
  assert_int_equal(faultd_start(&FP, "read_then_reset", NULL), 0);
  lk_breaker_config bc;
  lk_breaker_config_init_default(&bc);
  bc.window_size = 2;
  bc.minimum_calls = 2;
  lk_breaker *br = NULL;
  assert_int_equal(lk_breaker_new(&bc, &br, NULL), LK_OK);
  lk_metrics *m = lk_metrics_new();
  lk_call_metrics *cm = lk_call_metrics_new(m, "breaker-test");
  lk_http_policy pol;
  ht_policy(&pol);
  lk_retry_config rc = pol.retry.cfg;
  rc.max_attempts = 2;
  assert_int_equal(lk_retry_policy_init(&pol.retry, &rc, NULL), LK_OK);
  pol.breaker = br;
  pol.metrics = cm;
  ht_run r;
  ht_call(&FP, NULL, "GET", NULL, 0, &pol, 2, &r);
  assert_int_equal(r.err, LK_EATTEMPTS);
  assert_int_equal(r.nattempts, 2);
  ht_free(&r);
  assert_int_equal(lk_breaker_get_state(br), LK_BREAKER_OPEN);

  ht_call(&FP, NULL, "GET", NULL, 0, &pol, 0, &r);
  assert_int_equal(r.err, LK_EBREAKER_OPEN);
  assert_int_equal(r.nattempts, 1);
  assert_int_equal(r.att[0].phase, LK_PHASE_QUEUED);
  assert_int_equal(r.att[0].failure, LK_F_BREAKER_OPEN);
  assert_false(r.att[0].decision.retry);
  assert_int_equal(lk_http_result_failure(r.res), LK_F_BREAKER_OPEN);
  assert_int_equal(r.nreqs, 2); /* nothing new reached the server */
  ht_free(&r);

  lk_call_metrics_snap snap;
  assert_int_equal(lk_call_metrics_snapshot(cm, &snap), LK_OK);
  assert_int_equal(snap.requests, 2);
  assert_int_equal(snap.attempts, 2);
  assert_int_equal(snap.retries, 1);
  assert_int_equal(snap.calls_failed, 2);
  assert_int_equal(snap.breaker_state, LK_CM_BREAKER_OPEN);
  char *text = NULL;
  size_t len = 0;
  assert_int_equal(lk_metrics_render(m, &text, &len), LK_OK);
  assert_non_null(strstr(text, "linkd_client_attempts_total{client=\"breaker-test\"} 2"));
  free(text);
  lk_call_metrics_free(cm);
  lk_metrics_free(m);
  lk_breaker_free(br);
}

/* Seed 001's observations for a mixed run: a success on the first attempt, one after a retry. */
static void test_call_metrics(void **s) {
  (void)s;
  const char *args[] = {"--script", "ok,503:ra=0,ok", NULL};
  assert_int_equal(faultd_start(&FP, "status", args), 0);
  lk_metrics *m = lk_metrics_new();
  lk_call_metrics *cm = lk_call_metrics_new(m, "mix");
  lk_http_client *c = lk_http_client_new(NULL);
  lk_http_policy pol;
  ht_policy(&pol);
  pol.metrics = cm;
  ht_run r;
  for (int i = 0; i < 2; i++) {
    ht_call(&FP, c, "GET", NULL, 0, &pol, 0, &r);
    assert_int_equal(r.err, LK_OK);
    ht_free(&r);
  }
  lk_call_metrics_snap snap;
  assert_int_equal(lk_call_metrics_snapshot(cm, &snap), LK_OK);
  assert_int_equal(snap.requests, 2);
  assert_int_equal(snap.attempts, 3);
  assert_int_equal(snap.retries, 1);
  assert_int_equal(snap.downstream_5xx, 1);
  assert_int_equal(snap.calls_ok, 2);
  assert_int_equal(snap.first_attempt_ok, 1);
  assert_int_equal(snap.active, 0);
  lk_http_client_free(c);
  lk_call_metrics_free(cm);
  lk_metrics_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_budget_refuses_retry, teardown),
      cmocka_unit_test_teardown(test_budget_shared_by_calls, teardown),
      cmocka_unit_test_teardown(test_token_budget_ignores_permanent_failures, teardown),
      cmocka_unit_test_teardown(test_breaker_opens, teardown),
      cmocka_unit_test_teardown(test_call_metrics, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
