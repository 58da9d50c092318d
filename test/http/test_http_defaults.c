/* SPDX-License-Identifier: MIT */
/* The protection a user gets without configuring any: the client's per-origin retry budget and
 * circuit breaker (lk_http_policy.default_protection), and waiting for the breaker's next probe
 * (lk_http_policy.breaker_wait). Real calls through libcurl against faultd on 127.0.0.1. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "httptest.h"

#include <linkd/budget.h>
#include <linkd/breaker.h>

#include <stdio.h>
#include <string.h>

static faultd_proc FP;

static int teardown(void **s) {
  (void)s;
  faultd_stop(&FP);
  return 0;
}

typedef struct tally {
  int done, ok;
  int sent; /* attempts that went on the wire */
  int err[64];
} tally;

static void on_done(void *ud, lk_http_result *res) {
  tally *t = ud;
  t->done++;
  int e = lk_http_result_err(res);
  t->ok += e == LK_OK;
  t->err[e <= 0 && -e < 64 ? -e : 63]++;
  size_t n = 0;
  const lk_http_attempt_info *a = lk_http_result_attempts(res, &n);
  for (size_t i = 0; i < n; i++)
    t->sent += a[i].phase != LK_PHASE_QUEUED;
  lk_http_result_free(res);
}

/* 200 GETs at once against a server that answers 503 to everything, with the library's default
 * policy (4 attempts): requests at the server per call. */
static double storm(bool protect, tally *t) {
  ht_start(&FP, "status", "--status", "503", "--max-conns", "300", NULL);
  lk_http_client *c = lk_http_client_new(NULL);
  assert_non_null(c);
  lk_http_policy pol;
  lk_http_policy_init_default(&pol);
  if (!protect) { /* room for all 4 attempts of 200 calls, even on a loaded machine */
    pol.deadline = LK_SEC(20);
    pol.attempt_timeout = LK_SEC(10);
  } /* else the library's 3 s deadline: the budget's reserve (10 retries/s over 10 s) and the
     * breaker's probes are what a failing origin sees */
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  rc.backoff.base = LK_MS(20);
  rc.backoff.max = LK_MS(40);
  assert_int_equal(lk_retry_policy_init(&pol.retry, &rc, NULL), LK_OK);
  pol.default_protection = protect;
  char url[128];
  assert_int_equal(faultd_url(&FP, "/storm", url, sizeof url), 0);
  lk_http_request *req = lk_http_request_new("GET", url);
  for (int i = 0; i < 200; i++)
    assert_int_equal(lk_http_submit(c, req, &pol, NULL, on_done, t), LK_OK);
  lk_http_request_free(req);
  while (lk_http_client_run(c, LK_MS(100)) > 0) {
  }
  assert_int_equal(t->done, 200);
  if (protect) {
    lk_breaker *br = lk_http_client_origin_breaker(c, url);
    assert_non_null(br);
    lk_breaker_metrics m;
    assert_int_equal(lk_breaker_metrics_get(br, lk_now_ns(), &m), LK_OK);
    assert_true(m.transitions >= 1); /* it opened */
    assert_non_null(lk_http_client_origin_budget(c, url));
  } else {
    assert_null(lk_http_client_origin_breaker(c, url));
  }
  lk_http_client_free(c);
  int n = faultd_request_count(&FP);
  faultd_stop(&FP);
  return n / 200.0;
}

static void defaults_contain_a_storm(void **s) {
  (void)s;
  tally naked = {0}, guarded = {0};
  double without = storm(false, &naked);
  double with = storm(true, &guarded);
  printf("# requests per call against a failing server: %.2f without default protection, "
         "%.2f with it\n", without, with);
  /* every unprotected call sent its 4 attempts (the server may log fewer: 200 connections at
   * once can overflow its accept queue) */
  assert_int_equal(naked.sent, 4 * 200);
  assert_true(without > 3.0);
  assert_true(with <= 1.3);    /* the budget and the breaker stop the multiplication */
  assert_true(guarded.sent <= 1.3 * 200);
  assert_int_equal(guarded.done, 200);
}

/* A breaker opened by a short outage: a call with deadline to spare waits for the next probe and
 * succeeds once the server is back; without breaker_wait the same call fails at once. */
static void breaker_wait_rides_out_an_outage(void **s) {
  (void)s;
  for (int wait = 0; wait < 2; wait++) {
    /* requests 1-4 fail, the rest succeed */
    ht_start(&FP, "status", "--script", "503,503,503,503,ok", NULL);
    lk_breaker_config bc;
    lk_breaker_config_init_default(&bc);
    bc.window_size = 4;
    bc.minimum_calls = 4;
    bc.wait_open = LK_MS(300);
    bc.permitted_half_open = 1;
    lk_breaker *br = NULL;
    assert_int_equal(lk_breaker_new(&bc, &br, NULL), LK_OK);
    lk_http_policy pol;
    ht_policy(&pol);
    pol.breaker = br;
    pol.breaker_wait = wait;
    pol.deadline = LK_SEC(1);
    lk_http_client *c = lk_http_client_new(NULL);
    ht_run r;
    ht_call(&FP, c, "GET", NULL, 0, &pol, 3, &r); /* 3 attempts, 503 each */
    assert_int_equal(r.err, LK_EATTEMPTS);
    ht_free(&r);
    ht_call(&FP, c, "GET", NULL, 0, &pol, 4, &r); /* the 4th 503 opens it */
    if (wait) {
      /* waited ~300 ms for the probe, which succeeded */
      assert_int_equal(r.err, LK_OK);
      assert_true(r.wall >= LK_MS(250));
      ht_within_deadline(&r, &pol);
      assert_int_equal(lk_breaker_get_state(br), LK_BREAKER_CLOSED);
    } else {
      assert_int_equal(r.err, LK_EBREAKER_OPEN);
      assert_true(r.wall < LK_MS(250));
    }
    ht_free(&r);
    /* a wait that would not leave time for an attempt is not taken */
    if (wait) {
      lk_breaker_transition(br, LK_BREAKER_OPEN, lk_now_ns());
      pol.deadline = LK_MS(200);
      ht_call(&FP, c, "GET", NULL, 0, &pol, 5, &r);
      assert_int_equal(r.err, LK_EBREAKER_OPEN);
      assert_true(r.wall < LK_MS(100));
      ht_free(&r);
    }
    lk_http_client_free(c);
    lk_breaker_free(br);
    faultd_stop(&FP);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(defaults_contain_a_storm, teardown),
      cmocka_unit_test_teardown(breaker_wait_rides_out_an_outage, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
