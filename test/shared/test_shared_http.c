/* SPDX-License-Identifier: MIT */
/* The shared limiter and budget in lk_http policies, against a real redis-server and a local
 * HTTP server that answers 503: the policy's budget decides retries through Redis, and a
 * bucket emptied by another holder of the same prefix refuses the call before any request. */
#include <linkd/clock.h>
#include <linkd/error.h>
#include <linkd/http.h>
#include <linkd/shared.h>

#include "httptest.h"
#include "tmpsrv.h"

#include <curl/curl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static lk_tmpsrv redis;
static ht_raw raw;
static const char resp503[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                              "Connection: close\r\n\r\n";

static int setup(void **state) {
  (void)state;
  memset(&redis, 0, sizeof redis);
  if (lk_tmpsrv_redis_start(&redis) != 0)
    return -1;
  ht_raw_start(&raw, resp503, sizeof resp503 - 1);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  ht_raw_stop(&raw);
  lk_tmpsrv_destroy(&redis);
  return 0;
}

static void shared_config(lk_shared_config *c, const char *prefix) {
  static char url[64];
  snprintf(url, sizeof url, "127.0.0.1:%d", redis.port);
  lk_shared_config_init_default(c);
  c->url = url;
  c->prefix = prefix;
  c->timeout = LK_MS(50); /* this test is about the policy, not the wait */
}

static void call(lk_http_policy *pol, ht_run *r) {
  char url[64];
  ht_raw_url(&raw, url, sizeof url);
  ht_call_url(NULL, "GET", url, NULL, 0, pol, r);
}

/* Bounded: until a first decision went through Redis (the connection is up). */
static void wait_budget_shared(lk_budget *b) {
  for (int i = 0; i < 300; i++) {
    lk_shared_stats st;
    lk_shared_budget_stats(b, &st);
    if (st.using_redis || st.shared > 0)
      return;
    (void)lk_budget_acquire_retry(b, lk_now_ns(), false);
    usleep(10 * 1000);
  }
  fail_msg("the shared budget never reached Redis");
}

static void test_budget_in_policy(void **state) {
  (void)state;
  lk_shared_config sc;
  shared_config(&sc, "http:budget");
  /* No retry at all for the fleet: no percent, no floor. */
  lk_budget_ratio_config none = {
      .percent = 0, .ttl = LK_SEC(10), .min_retries_per_sec = 0, .buckets = 10};
  lk_budget *b;
  assert_int_equal(lk_shared_budget_new(&sc, &none, &b, NULL), LK_OK);
  wait_budget_shared(b);
  lk_shared_stats before, after;
  lk_shared_budget_stats(b, &before);
  lk_http_policy pol;
  ht_policy(&pol);
  pol.budget = b;
  ht_run r;
  int seen = atomic_load(&raw.requests);
  call(&pol, &r);
  assert_int_equal(r.err, LK_EBUDGET);
  assert_int_equal(r.nattempts, 1);
  assert_int_equal(atomic_load(&raw.requests) - seen, 1);
  ht_free(&r);
  lk_shared_budget_stats(b, &after);
  assert_int_equal(after.shared - before.shared, 1); /* Redis refused the retry */
  assert_int_equal(after.fallback, before.fallback);
  lk_budget_free(b);

  /* Ten retries per request for the fleet: the call uses all its attempts. */
  lk_budget_ratio_config lots = none;
  lots.percent = 1000;
  shared_config(&sc, "http:budget-lots");
  assert_int_equal(lk_shared_budget_new(&sc, &lots, &b, NULL), LK_OK);
  wait_budget_shared(b);
  pol.budget = b;
  call(&pol, &r);
  assert_int_equal(r.err, LK_EATTEMPTS);
  assert_int_equal(r.nattempts, 3);
  ht_free(&r);
  lk_budget_free(b);
}

static void test_limiter_in_policy(void **state) {
  (void)state;
  lk_shared_config sc;
  shared_config(&sc, "http:limiter");
  sc.fleet_size = 1;
  lk_limiter_config lc = {.rate = 0.5, .burst = 1}; /* one token per 2 s */
  lk_limiter *mine, *other;
  assert_int_equal(lk_shared_limiter_new(&sc, &lc, &mine, NULL), LK_OK);
  assert_int_equal(lk_shared_limiter_new(&sc, &lc, &other, NULL), LK_OK);
  /* Another holder of the prefix takes the only token (bounded wait for the connection). */
  bool took = false;
  for (int i = 0; i < 300 && !took; i++) {
    lk_shared_stats st;
    took = lk_limiter_try_acquire(other, lk_now_ns()) == LK_OK &&
           lk_shared_limiter_stats(other, &st) == LK_OK && st.shared > 0;
    if (!took)
      usleep(10 * 1000);
  }
  assert_true(took);
  lk_http_policy pol;
  ht_policy(&pol);
  pol.deadline = LK_MS(500); /* the next token is ~2 s away: past the deadline */
  pol.limiter = mine;
  int seen = atomic_load(&raw.requests);
  ht_run r;
  call(&pol, &r);
  assert_int_equal(r.err, LK_ERATE_LIMITED);
  assert_int_equal(atomic_load(&raw.requests), seen); /* refused before any request */
  ht_free(&r);
  lk_shared_stats st;
  assert_int_equal(lk_shared_limiter_stats(mine, &st), LK_OK);
  assert_true(st.shared >= 1);
  assert_int_equal(st.fallback, 0);
  lk_limiter_free(mine);
  lk_limiter_free(other);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_budget_in_policy),
      cmocka_unit_test(test_limiter_in_policy),
  };
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  curl_global_cleanup();
  return rc;
}
