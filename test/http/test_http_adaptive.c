/* SPDX-License-Identifier: MIT */
/* An adaptive concurrency limit (adaptive.h) as the bulkhead limit of HTTP calls
 * (lk_http_policy.adaptive): it falls while the server is slow and recovers once it is fast
 * again, and the bulkhead's max follows it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "httptest.h"

#include <linkd/adaptive.h>
#include <linkd/bulkhead.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static faultd_proc FP;

static int teardown(void **s) {
  (void)s;
  faultd_stop(&FP);
  return 0;
}

typedef struct batch {
  int done, ok;
  int64_t max_in_use;
  lk_bulkhead *b;
} batch;

static void done_cb(void *ud, lk_http_result *res) {
  batch *bt = ud;
  bt->done++;
  if (lk_http_result_err(res) == LK_OK)
    bt->ok++;
  lk_http_result_free(res);
}

/* The classification hook runs while the attempt still holds its slot: it samples how many
 * slots are in use. */
static lk_failure sample_in_use(void *ctx, const lk_http_response *resp, lk_failure kind) {
  (void)resp;
  batch *bt = ctx;
  int64_t u = lk_bulkhead_in_use(bt->b);
  if (u > bt->max_in_use)
    bt->max_in_use = u;
  return kind;
}

/* Runs n calls, `inflight` submitted at a time, on one client; bounded by 20 s of real time. */
static void run_batch(lk_http_client *c, const char *url, const lk_http_policy *pol, int n,
                      int inflight, batch *bt) {
  lk_http_request *req = lk_http_request_new("GET", url);
  assert_non_null(req);
  int submitted = 0;
  int64_t end = lk_now_ns() + LK_SEC(20);
  bt->done = bt->ok = 0;
  while (bt->done < n && lk_now_ns() < end) {
    while (submitted < n && submitted - bt->done < inflight) {
      assert_int_equal(lk_http_submit(c, req, pol, NULL, done_cb, bt), LK_OK);
      submitted++;
    }
    assert_true(lk_http_client_run(c, LK_MS(5)) >= 0);
  }
  assert_int_equal(bt->done, n);
  lk_http_request_free(req);
}

static void test_limit_follows_server_latency(void **s) {
  (void)s;
  /* 40 requests 40 ms slow, then fast ones */
  char script[512] = "";
  for (int i = 0; i < 40; i++)
    strcat(script, "slow:40,");
  strcat(script, "ok");
  ht_start(&FP, "ok", "--script", script, NULL);
  char url[128];
  assert_int_equal(faultd_url(&FP, "/x", url, sizeof url), 0);

  lk_adaptive_config ac;
  lk_adaptive_config_init_default(&ac);
  ac.initial_limit = 16;
  ac.max_limit = 32;
  ac.latency_target = LK_MS(20); /* a success slower than this is an overload signal */
  ac.decrease_cooldown = 0;
  lk_adaptive *ad = NULL;
  assert_int_equal(lk_adaptive_new(&ac, &ad, NULL), LK_OK);
  lk_bulkhead_config bc;
  lk_bulkhead_config_init_default(&bc);
  bc.max_concurrent = 16;
  lk_bulkhead *b = NULL;
  assert_int_equal(lk_bulkhead_new(&bc, &b, NULL), LK_OK);
  assert_int_equal(lk_adaptive_attach(ad, b), LK_OK);

  lk_http_policy pol;
  ht_policy(&pol);
  pol.deadline = LK_SEC(10);
  pol.attempt_timeout = LK_SEC(2);
  pol.bulkhead = b;
  pol.adaptive = ad;
  lk_http_client *c = lk_http_client_new(NULL);
  batch bt = {.b = b};
  pol.classify = sample_in_use;
  pol.classify_ctx = &bt;

  /* the server is slow: every sample is a drop, the limit and the bulkhead's max fall */
  run_batch(c, url, &pol, 40, 16, &bt);
  assert_int_equal(bt.ok, 40);
  int64_t low = lk_adaptive_limit(ad);
  printf("# limit after the slow phase: %lld (from 16)\n", (long long)low);
  assert_true(low <= 4);
  assert_int_equal(lk_bulkhead_max(b), low);
  assert_true(bt.max_in_use <= 16);

  /* fast again: with the bulkhead full (calls queue for its slots) the limit climbs back */
  bt.max_in_use = 0;
  run_batch(c, url, &pol, 300, 32, &bt);
  assert_int_equal(bt.ok, 300);
  int64_t high = lk_adaptive_limit(ad);
  printf("# limit after the fast phase: %lld, most slots in use %lld\n", (long long)high,
         (long long)bt.max_in_use);
  assert_true(high >= 12);
  assert_int_equal(lk_bulkhead_max(b), high);
  assert_true(bt.max_in_use > low); /* the bulkhead let more calls through as the limit rose */

  lk_http_client_free(c);
  lk_adaptive_attach(ad, NULL);
  lk_adaptive_free(ad);
  lk_bulkhead_free(b);
}

/* Without the policy option, the same slow server leaves the limit where it was. */
static void test_without_option_limit_stays(void **s) {
  (void)s;
  ht_start(&FP, "slow", "--delay-ms", "40", NULL);
  char url[128];
  assert_int_equal(faultd_url(&FP, "/x", url, sizeof url), 0);
  lk_adaptive_config ac;
  lk_adaptive_config_init_default(&ac);
  ac.initial_limit = 16;
  ac.latency_target = LK_MS(20);
  ac.decrease_cooldown = 0;
  lk_adaptive *ad = NULL;
  assert_int_equal(lk_adaptive_new(&ac, &ad, NULL), LK_OK);
  lk_bulkhead_config bc;
  lk_bulkhead_config_init_default(&bc);
  bc.max_concurrent = 16;
  lk_bulkhead *b = NULL;
  assert_int_equal(lk_bulkhead_new(&bc, &b, NULL), LK_OK);
  assert_int_equal(lk_adaptive_attach(ad, b), LK_OK);
  lk_http_policy pol;
  ht_policy(&pol);
  pol.bulkhead = b;
  lk_http_client *c = lk_http_client_new(NULL);
  batch bt = {.b = b};
  run_batch(c, url, &pol, 16, 16, &bt);
  assert_int_equal(bt.ok, 16);
  assert_int_equal(lk_adaptive_limit(ad), 16);
  lk_http_client_free(c);
  lk_adaptive_attach(ad, NULL);
  lk_adaptive_free(ad);
  lk_bulkhead_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_limit_follows_server_latency, teardown),
      cmocka_unit_test_teardown(test_without_option_limit_stays, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
