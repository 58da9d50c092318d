/* SPDX-License-Identifier: MIT */
/* Hedged calls (lk_http_policy.hedge) against faultd: a hedge starts after the hedge delay on
 * another connection, the first acceptable answer wins, the other attempts are cancelled, each
 * hedge asks the retry budget, and only requests that may be sent twice are hedged. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "fake_clock.h"
#include "httptest.h"

#include <linkd/budget.h>
#include <linkd/hist.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static faultd_proc FP;

static int teardown(void **s) {
  (void)s;
  faultd_stop(&FP);
  return 0;
}

/* ht_policy() with one hedge after `delay`. */
static void hedge_policy(lk_http_policy *p, int64_t delay) {
  ht_policy(p);
  lk_hedge_policy_init_default(&p->hedge);
  p->hedge.max_hedges = 1;
  p->hedge.delay = delay;
}

/* The attempts overlapped: b started before a ended. */
static void assert_overlap(const lk_http_attempt_info *a, const lk_http_attempt_info *b) {
  assert_true(b->start > a->start);
  assert_true(b->start < a->start + a->duration);
}

/* The first request is 400 ms slow, the second answers at once: the hedge at 50 ms wins; the
 * first attempt is cancelled, both appear in the timeline in number order, overlapping. */
static void test_hedge_wins_over_slow_attempt(void **s) {
  (void)s;
  ht_start(&FP, "ok", "--script", "slow:400,ok", NULL);
  lk_http_policy pol;
  hedge_policy(&pol, LK_MS(50));
  pol.attempt_timeout = LK_MS(800);
  ht_run r;
  ht_call(&FP, NULL, "GET", NULL, 0, &pol, 2, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(lk_http_result_status(r.res), 200);
  assert_int_equal(lk_http_result_hedges(r.res), 1);
  assert_int_equal(r.nattempts, 2);
  assert_int_equal(r.att[0].number, 1);
  assert_false(r.att[0].hedge);
  assert_int_equal(r.att[0].failure, LK_F_CANCELLED);
  assert_string_equal(r.att[0].reason, "cancelled: attempt 2 answered first");
  assert_int_equal(r.att[1].number, 2);
  assert_true(r.att[1].hedge);
  assert_int_equal(r.att[1].failure, LK_F_NONE);
  assert_true(r.att[1].start >= LK_MS(50) && r.att[1].start < LK_MS(250));
  assert_overlap(&r.att[0], &r.att[1]);
  assert_true(r.wall < LK_MS(350));
  assert_int_equal(r.nreqs, 2);
  assert_int_not_equal(r.reqs[0].conn, r.reqs[1].conn); /* another connection */
  assert_string_equal(r.reqs[0].attempt, "1");
  assert_string_equal(r.reqs[1].attempt, "2");
  char *js = NULL;
  assert_int_equal(lk_http_result_timeline_json(r.res, &js, NULL), LK_OK);
  assert_non_null(strstr(js, "\"hedge\":true"));
  free(js);
  ht_free(&r);
}

/* An answer before the hedge delay: no hedge, one request. */
static void test_fast_answer_sends_no_hedge(void **s) {
  (void)s;
  ht_start(&FP, "ok", NULL);
  lk_http_policy pol;
  hedge_policy(&pol, LK_MS(200));
  ht_run r;
  ht_call(&FP, NULL, "GET", NULL, 0, &pol, 1, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(lk_http_result_hedges(r.res), 0);
  assert_int_equal(r.nattempts, 1);
  assert_int_equal(faultd_wait_requests(&FP, 2, 300), 1);
  ht_free(&r);
}

/* A POST without a key may not be sent twice: it is never hedged. With a key it is, and both
 * requests carry the same key. */
static void test_only_idempotent_or_keyed_requests_hedge(void **s) {
  (void)s;
  ht_start(&FP, "ok", "--script", "slow:300,slow:300,ok", NULL);
  lk_http_policy pol;
  hedge_policy(&pol, LK_MS(30));
  pol.attempt_timeout = LK_MS(800);
  ht_run r;
  ht_call(&FP, NULL, "POST", "x", 1, &pol, 1, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(lk_http_result_hedges(r.res), 0);
  assert_int_equal(r.nattempts, 1);
  assert_true(r.wall >= LK_MS(290));
  ht_free(&r);

  pol.idem_mode = LK_IDEM_ALWAYS;
  ht_call(&FP, NULL, "POST", "x", 1, &pol, 3, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(lk_http_result_hedges(r.res), 1);
  assert_int_equal(r.nreqs, 3);
  const char *key = lk_http_result_idempotency_key(r.res);
  assert_non_null(key);
  assert_string_equal(r.reqs[1].idempotency_key, key);
  assert_string_equal(r.reqs[2].idempotency_key, key);
  ht_free(&r);
}

/* Every hedge asks the retry budget: a ratio budget that allows no retries per request and a
 * reserve of two (1 a second over 2 s) pays for the first two calls' hedges; the third call
 * waits for its slow answer. */
static void test_each_hedge_asks_the_budget(void **s) {
  (void)s;
  ht_start(&FP, "ok", "--script", "slow:250,ok,slow:250,ok,slow:250,ok", NULL);
  lk_budget_ratio_config rc;
  lk_budget_ratio_config_init_default(&rc);
  rc.percent = 0;
  rc.min_retries_per_sec = 1;
  rc.ttl = LK_SEC(2);
  rc.buckets = 2;
  lk_budget *b = NULL;
  assert_int_equal(lk_budget_new_ratio(&rc, &b, NULL), LK_OK);
  lk_http_client *c = lk_http_client_new(NULL);
  lk_http_policy pol;
  hedge_policy(&pol, LK_MS(30));
  pol.attempt_timeout = LK_MS(800);
  pol.budget = b;
  for (int i = 0; i < 2; i++) {
    ht_run r;
    ht_call(&FP, c, "GET", NULL, 0, &pol, 2 * (i + 1), &r);
    assert_int_equal(r.err, LK_OK);
    assert_int_equal(lk_http_result_hedges(r.res), 1);
    assert_true(r.wall < LK_MS(200));
    ht_free(&r);
  }
  ht_run r;
  ht_call(&FP, c, "GET", NULL, 0, &pol, 5, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(lk_http_result_hedges(r.res), 0);
  assert_int_equal(r.nattempts, 1);
  assert_true(r.wall >= LK_MS(240));
  ht_free(&r);
  lk_http_client_free(c);
  lk_budget_free(b);
}

static int spent;
static int refuse_spend(void *ctx, int64_t now) {
  (void)ctx, (void)now;
  spent++;
  return LK_EBUDGET;
}

/* The policy's own spend hook is asked too; its refusal means no hedge. */
static void test_spend_hook_refuses(void **s) {
  (void)s;
  ht_start(&FP, "ok", "--script", "slow:200,ok", NULL);
  lk_http_policy pol;
  hedge_policy(&pol, LK_MS(30));
  pol.hedge.spend = refuse_spend;
  spent = 0;
  ht_run r;
  ht_call(&FP, NULL, "GET", NULL, 0, &pol, 1, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(spent, 1);
  assert_int_equal(lk_http_result_hedges(r.res), 0);
  assert_int_equal(r.nattempts, 1);
  ht_free(&r);
}

/* The delay from a latency histogram's percentile: p90 of 20 ms samples puts the hedge near
 * 20 ms, far earlier than the 500 ms fixed fallback. */
static void test_percentile_delay(void **s) {
  (void)s;
  ht_start(&FP, "ok", "--script", "slow:400,ok", NULL);
  lk_hist *h = lk_hist_new(1000, LK_SEC(10));
  assert_non_null(h);
  for (int i = 0; i < 100; i++)
    lk_hist_record(h, LK_MS(20));
  lk_http_policy pol;
  hedge_policy(&pol, LK_MS(500));
  pol.attempt_timeout = LK_MS(800);
  pol.hedge.quantile = 90;
  pol.hedge.percentile = lk_http_hist_percentile;
  pol.hedge.percentile_ctx = h;
  ht_run r;
  ht_call(&FP, NULL, "GET", NULL, 0, &pol, 2, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(lk_http_result_hedges(r.res), 1);
  assert_int_equal(r.nattempts, 2);
  assert_true(r.att[1].start >= LK_MS(19) && r.att[1].start < LK_MS(200));
  ht_free(&r);
  lk_hist_free(h);
}

/* A definitive answer (404, not retried) from the first attempt ends the call at once although
 * a hedge is in flight: the hedge is cancelled. */
static void test_definitive_answer_cancels_hedge(void **s) {
  (void)s;
  ht_start(&FP, "status", "--script", "404:delay=150,slow:1000", NULL);
  lk_http_policy pol;
  hedge_policy(&pol, LK_MS(30));
  pol.attempt_timeout = LK_MS(1200);
  ht_run r;
  ht_call(&FP, NULL, "GET", NULL, 0, &pol, 2, &r);
  assert_int_equal(r.err, LK_EHTTP);
  assert_int_equal(lk_http_result_status(r.res), 404);
  assert_int_equal(r.nattempts, 2);
  assert_int_equal(r.att[0].status, 404);
  assert_true(r.att[1].hedge);
  assert_int_equal(r.att[1].failure, LK_F_CANCELLED);
  assert_true(r.wall < LK_MS(600));
  ht_free(&r);
}

/* On a fake clock the hedge is due only when the clock says so: real time passing does not
 * send it; advancing the clock past the delay does. */
static void done_cb(void *ud, lk_http_result *res) { *(lk_http_result **)ud = res; }

static void test_hedge_on_fake_clock(void **s) {
  (void)s;
  ht_start(&FP, "ok", "--script", "slow:600,ok", NULL);
  lk_fake_clock fc;
  lk_fake_clock_init(&fc, LK_SEC(1000));
  lk_http_policy pol;
  hedge_policy(&pol, LK_MS(100));
  pol.deadline = LK_SEC(5);
  pol.attempt_timeout = LK_SEC(2);
  pol.clock = &fc.base;
  char url[128];
  assert_int_equal(faultd_url(&FP, "/x", url, sizeof url), 0);
  lk_http_request *req = lk_http_request_new("GET", url);
  lk_http_client *c = lk_http_client_new(NULL);
  lk_http_result *res = NULL;
  assert_int_equal(lk_http_submit(c, req, &pol, NULL, done_cb, &res), LK_OK);
  for (int i = 0; i < 15 && !res; i++)
    lk_http_client_run(c, LK_MS(10)); /* 150 ms of real time, none on the fake clock */
  assert_null(res);
  assert_int_equal(faultd_wait_requests(&FP, 1, 500), 1);
  assert_int_equal(faultd_request_count(&FP), 1);
  lk_fake_clock_advance(&fc, LK_MS(100));
  for (int i = 0; i < 200 && !res; i++)
    lk_http_client_run(c, LK_MS(10));
  assert_non_null(res);
  assert_int_equal(lk_http_result_err(res), LK_OK);
  assert_int_equal(lk_http_result_hedges(res), 1);
  size_t n = 0;
  const lk_http_attempt_info *a = lk_http_result_attempts(res, &n);
  assert_int_equal(n, 2);
  assert_int_equal(a[1].start, LK_MS(100)); /* exactly when the fake clock made it due */
  assert_int_equal(a[0].failure, LK_F_CANCELLED);
  lk_http_result_free(res);
  lk_http_request_free(req);
  lk_http_client_free(c);
}

/* Cancelling a call cancels every attempt in flight. */
static void test_cancel_ends_all_attempts(void **s) {
  (void)s;
  ht_start(&FP, "slow", "--delay-ms", "2000", NULL);
  lk_http_policy pol;
  hedge_policy(&pol, LK_MS(20));
  pol.attempt_timeout = LK_SEC(1);
  char url[128];
  assert_int_equal(faultd_url(&FP, "/x", url, sizeof url), 0);
  lk_http_request *req = lk_http_request_new("GET", url);
  lk_http_client *c = lk_http_client_new(NULL);
  lk_http_cancel *tok = lk_http_cancel_new();
  lk_http_result *res = NULL;
  assert_int_equal(lk_http_submit(c, req, &pol, tok, done_cb, &res), LK_OK);
  for (int i = 0; i < 50 && faultd_request_count(&FP) < 2; i++)
    lk_http_client_run(c, LK_MS(10));
  assert_int_equal(faultd_request_count(&FP), 2);
  lk_http_cancel_fire(tok);
  for (int i = 0; i < 50 && !res; i++)
    lk_http_client_run(c, LK_MS(10));
  assert_non_null(res);
  assert_int_equal(lk_http_result_err(res), LK_ECANCELED);
  size_t n = 0;
  const lk_http_attempt_info *a = lk_http_result_attempts(res, &n);
  assert_int_equal(n, 2);
  assert_int_equal(a[0].failure, LK_F_CANCELLED);
  assert_int_equal(a[1].failure, LK_F_CANCELLED);
  assert_int_equal(lk_http_client_active(c), 0);
  lk_http_result_free(res);
  lk_http_request_free(req);
  lk_http_cancel_free(tok);
  lk_http_client_free(c);
}

/* With a per-attempt URL hook the hedge goes to another endpoint: the first replica is slow, the
 * hedge's answers at once. */
typedef struct two_urls {
  char slow[128], fast[128];
  int asked[4];
} two_urls;

static const char *pick_url(void *ctx, int attempt) {
  two_urls *u = ctx;
  if (attempt >= 1 && attempt <= 3)
    u->asked[attempt]++;
  return attempt == 1 ? u->slow : u->fast;
}

static void test_hedge_to_another_endpoint(void **s) {
  (void)s;
  faultd_proc fast;
  ht_start(&FP, "slow", "--delay-ms", "500", NULL);
  ht_start(&fast, "ok", NULL);
  two_urls u = {0};
  assert_int_equal(faultd_url(&FP, "/x", u.slow, sizeof u.slow), 0);
  assert_int_equal(faultd_url(&fast, "/x", u.fast, sizeof u.fast), 0);
  lk_http_policy pol;
  hedge_policy(&pol, LK_MS(40));
  pol.attempt_timeout = LK_MS(800);
  pol.attempt_url = pick_url;
  pol.attempt_url_ctx = &u;
  ht_run r;
  ht_call_url(NULL, "GET", u.slow, NULL, 0, &pol, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(lk_http_result_hedges(r.res), 1);
  assert_int_equal(u.asked[1], 1);
  assert_int_equal(u.asked[2], 1);
  assert_true(r.att[1].hedge);
  assert_int_equal(r.att[1].failure, LK_F_NONE);
  assert_true(r.wall < LK_MS(300));
  assert_int_equal(faultd_wait_requests(&FP, 1, 500), 1);
  assert_int_equal(faultd_wait_requests(&fast, 1, 500), 1);
  ht_free(&r);
  faultd_stop(&fast);
}

/* A hedge on a handle of its own keeps the call's CA file: the first attempt goes to a slow
 * plain-text replica, the hedge to an https one whose self-signed certificate only the CA file
 * verifies, and the hedge wins. */
static void test_hedge_keeps_ca_file(void **s) {
  (void)s;
  char dir[] = "/tmp/linkd-hedge-ca-XXXXXX";
  assert_non_null(mkdtemp(dir));
  ht_make_cert(dir, "server");
  char crt[128], key[128];
  snprintf(crt, sizeof crt, "%s/server-c.pem", dir);
  snprintf(key, sizeof key, "%s/server-k.pem", dir);
  int port = 0;
  pid_t pid = ht_tls_server_start(crt, key, &port);
  ht_start(&FP, "slow", "--delay-ms", "1500", NULL);
  two_urls u = {0};
  assert_int_equal(faultd_url(&FP, "/x", u.slow, sizeof u.slow), 0);
  snprintf(u.fast, sizeof u.fast, "https://127.0.0.1:%d/x", port);
  lk_http_policy pol;
  hedge_policy(&pol, LK_MS(50));
  pol.deadline = LK_SEC(5);
  pol.attempt_timeout = LK_SEC(3); /* OpenSSL under sanitizers is slow */
  pol.connect_timeout = 0;
  pol.ca_file = crt;
  pol.attempt_url = pick_url;
  pol.attempt_url_ctx = &u;
  ht_run r;
  if (pid > 0)
    ht_call_url(NULL, "GET", u.slow, NULL, 0, &pol, &r);
  ht_tls_server_stop(pid);
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
  assert_true(pid > 0);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(r.nattempts, 2);
  assert_true(r.att[1].hedge);
  assert_int_equal(r.att[1].failure, LK_F_NONE);
  assert_int_equal(r.att[0].failure, LK_F_CANCELLED);
  ht_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_hedge_wins_over_slow_attempt, teardown),
      cmocka_unit_test_teardown(test_fast_answer_sends_no_hedge, teardown),
      cmocka_unit_test_teardown(test_only_idempotent_or_keyed_requests_hedge, teardown),
      cmocka_unit_test_teardown(test_each_hedge_asks_the_budget, teardown),
      cmocka_unit_test_teardown(test_spend_hook_refuses, teardown),
      cmocka_unit_test_teardown(test_percentile_delay, teardown),
      cmocka_unit_test_teardown(test_definitive_answer_cancels_hedge, teardown),
      cmocka_unit_test_teardown(test_hedge_on_fake_clock, teardown),
      cmocka_unit_test_teardown(test_cancel_ends_all_attempts, teardown),
      cmocka_unit_test_teardown(test_hedge_to_another_endpoint, teardown),
      cmocka_unit_test_teardown(test_hedge_keeps_ca_file, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
