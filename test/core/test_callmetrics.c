/* SPDX-License-Identifier: MIT */
/* Call metrics: every row of seed 001's observation table is fed and read back, both through the
 * snapshot and through the rendered exposition; shared series across bundles; breaker state set;
 * zero allocations on the recording path once a failure kind has been seen. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h> /* needs the three above first */

#include <linkd/callmetrics.h>
#include <linkd/error.h>

#include "testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *render(lk_metrics *m) {
  char *out = NULL;
  assert_int_equal(lk_metrics_render(m, &out, NULL), LK_OK);
  return out;
}

static void assert_line(const char *text, const char *line) {
  char want[512];
  snprintf(want, sizeof want, "\n%s\n", line);
  if (!strstr(text, want))
    fail_msg("missing line: %s\n--- exposition ---\n%s", line, text);
}

/* One scripted workload covering every row of the table. */
static void observation_table(void **state) {
  (void)state;
  lk_metrics *m = lk_metrics_new();
  lk_call_metrics *cm = lk_call_metrics_new(m, "books");
  assert_non_null(cm);

  /* Call 1: success on the first attempt, 2 ms. */
  lk_call_metrics_call_start(cm);
  lk_call_metrics_attempt_ex(cm, 1, LK_F_NONE, 200, LK_MS(2));
  lk_call_metrics_call_end(cm, true, true, 1, LK_MS(2), LK_OK);
  /* Call 2: read timeout, then 503, then success. */
  lk_call_metrics_call_start(cm);
  lk_call_metrics_attempt_ex(cm, 1, LK_F_READ_TIMEOUT, 0, LK_MS(100));
  lk_call_metrics_attempt_ex(cm, 2, LK_F_HTTP_503, 503, LK_MS(3));
  lk_call_metrics_attempt_ex(cm, 3, LK_F_NONE, 200, LK_MS(4));
  lk_call_metrics_call_end(cm, true, false, 3, LK_MS(150), LK_OK);
  /* Call 3: 429 from downstream, then the retry budget refuses. */
  lk_call_metrics_call_start(cm);
  lk_call_metrics_attempt(cm, 1, LK_F_TOO_MANY_REQUESTS, 429);
  lk_call_metrics_call_end(cm, false, false, 1, LK_MS(5), LK_EBUDGET);
  /* Call 4: the local limiter refuses before any attempt. */
  lk_call_metrics_call_start(cm);
  lk_call_metrics_call_end(cm, false, false, 0, -1, LK_ERATE_LIMITED);
  /* Call 5: still running. */
  lk_call_metrics_call_start(cm);
  lk_call_metrics_resend_detected(cm);
  lk_call_metrics_breaker_transition(cm, LK_CM_BREAKER_CLOSED, LK_CM_BREAKER_OPEN);
  lk_call_metrics_breaker_transition(cm, LK_CM_BREAKER_OPEN, LK_CM_BREAKER_HALF_OPEN);
  lk_call_metrics_breaker_transition(cm, LK_CM_BREAKER_HALF_OPEN, LK_CM_BREAKER_OPEN);
  lk_call_metrics_breaker_state(cm, (lk_cm_breaker_state)42); /* ignored */
  lk_call_metrics_bulkhead_queue_depth(cm, 3);
  lk_call_metrics_bulkhead_wait(cm, LK_MS(7));
  lk_call_metrics_bulkhead_wait(cm, 0);
  lk_call_metrics_bulkhead_wait(cm, -1); /* ignored */
  lk_call_metrics_budget_consumption(cm, 0.375);
  lk_call_metrics_budget_remaining(cm, 12);

  lk_call_metrics_snap s;
  assert_int_equal(lk_call_metrics_snapshot(cm, &s), LK_OK);
  assert_int_equal(s.requests, 5);
  assert_int_equal(s.attempts, 5);
  assert_int_equal(s.retries, 2);
  assert_int_equal(s.timeouts, 1);
  assert_int_equal(s.downstream_5xx, 1);
  assert_int_equal(s.rate_limited_downstream, 1);
  assert_int_equal(s.rate_limited_local, 1);
  assert_int_equal(s.calls_ok, 2);
  assert_int_equal(s.calls_failed, 2);
  assert_int_equal(s.first_attempt_ok, 1);
  assert_int_equal(s.resends, 1);
  assert_int_equal(s.active, 1);
  assert_true(s.retry_ratio == 2.0 / 5.0);
  assert_true(s.timeout_rate == 1.0 / 5.0);
  assert_true(s.success_rate == 0.5);
  assert_true(s.first_attempt_success_rate == 0.25);
  assert_true(s.attempts_per_call == 5.0 / 4.0);
  assert_int_equal(s.call_p50_ns,
                   lk_hist_highest_equivalent(lk_call_metrics_call_hist(cm), LK_MS(5)));
  assert_int_equal(s.call_p99_ns, LK_MS(150)); /* top rank: the exact max */
  assert_int_equal(s.call_p999_ns, LK_MS(150));
  assert_int_equal(s.breaker_state, LK_CM_BREAKER_OPEN);
  assert_int_equal(s.bulkhead_queue_depth, 3);
  assert_true(s.budget_consumption == 0.375);
  assert_int_equal(lk_hist_count(lk_call_metrics_attempt_hist(cm)), 4);
  assert_int_equal(lk_hist_count(lk_call_metrics_call_hist(cm)), 3);

  char *out = render(m);
  assert_line(out, "linkd_client_requests_total{client=\"books\"} 5");
  assert_line(out, "linkd_client_attempts_total{client=\"books\"} 5");
  assert_line(out, "linkd_client_retries_total{client=\"books\"} 2");
  assert_line(out, "linkd_client_attempt_timeouts_total{client=\"books\"} 1");
  assert_line(out, "linkd_client_attempt_failures_total{client=\"books\",kind=\"READ_TIMEOUT\"} 1");
  assert_line(out, "linkd_client_attempt_failures_total{client=\"books\",kind=\"HTTP_503\"} 1");
  assert_line(out,
              "linkd_client_attempt_failures_total{client=\"books\",kind=\"TOO_MANY_REQUESTS\"} 1");
  assert_line(out, "linkd_client_downstream_5xx_total{client=\"books\"} 1");
  assert_line(out, "linkd_client_rate_limited_total{client=\"books\",source=\"downstream\"} 1");
  assert_line(out, "linkd_client_rate_limited_total{client=\"books\",source=\"local\"} 1");
  assert_line(out, "linkd_client_calls_total{client=\"books\",result=\"success\"} 2");
  assert_line(out, "linkd_client_calls_total{client=\"books\",result=\"failure\"} 2");
  assert_line(out, "linkd_client_call_errors_total{client=\"books\",error=\"EBUDGET\"} 1");
  assert_line(out, "linkd_client_call_errors_total{client=\"books\",error=\"ERATE_LIMITED\"} 1");
  assert_line(out, "linkd_client_first_attempt_success_total{client=\"books\"} 1");
  assert_line(out, "linkd_client_active_calls{client=\"books\"} 1");
  assert_line(out, "linkd_client_resends_detected_total{client=\"books\"} 1");
  assert_line(out, "linkd_client_breaker_state{client=\"books\",state=\"closed\"} 0");
  assert_line(out, "linkd_client_breaker_state{client=\"books\",state=\"open\"} 1");
  assert_line(out, "linkd_client_breaker_state{client=\"books\",state=\"half_open\"} 0");
  assert_line(out, "linkd_client_breaker_transitions_total{client=\"books\",to=\"open\"} 2");
  assert_line(out, "linkd_client_breaker_transitions_total{client=\"books\",to=\"half_open\"} 1");
  assert_line(out, "linkd_client_breaker_transitions_total{client=\"books\",to=\"closed\"} 0");
  assert_line(out, "linkd_client_bulkhead_queue_depth{client=\"books\"} 3");
  assert_line(out, "linkd_client_bulkhead_wait_seconds_count{client=\"books\"} 2");
  assert_line(out, "linkd_client_bulkhead_wait_seconds_sum{client=\"books\"} 0.007");
  assert_line(out, "linkd_client_retry_budget_consumption_ratio{client=\"books\"} 0.375");
  assert_line(out, "linkd_client_retry_budget_remaining{client=\"books\"} 12");
  assert_line(out, "linkd_client_call_duration_seconds_count{client=\"books\"} 3");
  assert_line(out, "linkd_client_call_duration_seconds_sum{client=\"books\"} 0.157");
  assert_line(out, "linkd_client_call_duration_seconds_bucket{client=\"books\",le=\"0.0025\"} 1");
  assert_line(out, "linkd_client_call_duration_seconds_bucket{client=\"books\",le=\"0.005\"} 2");
  assert_line(out, "linkd_client_call_duration_seconds_bucket{client=\"books\",le=\"0.25\"} 3");
  assert_line(out, "linkd_client_attempt_duration_seconds_count{client=\"books\"} 4");
  /* Kinds and errors never seen have no series. */
  assert_null(strstr(out, "CONNECT_REFUSED"));
  assert_null(strstr(out, "EDEADLINE"));
  free(out);
  lk_call_metrics_free(cm);
  lk_metrics_free(m);
}

static void odd_inputs(void **state) {
  (void)state;
  lk_metrics *m = lk_metrics_new();
  assert_null(lk_call_metrics_new(NULL, "x"));
  assert_null(lk_call_metrics_new(m, NULL));
  assert_null(lk_call_metrics_new(m, "bad \xff utf8"));
  lk_call_metrics *cm = lk_call_metrics_new(m, "we\"ird\\ name\n");
  assert_non_null(cm);
  /* An unsuccessful call without a code, and an unknown code. */
  lk_call_metrics_call_end(cm, false, false, 1, 10, LK_OK);
  lk_call_metrics_call_end(cm, false, false, 1, 10, -9999);
  lk_call_metrics_attempt(cm, 1, (lk_failure)999, 0); /* out of range kind: attempt counted */
  lk_call_metrics_attempt(cm, 1, LK_F_CONNECT_REFUSED, 0);
  lk_call_metrics_attempt(cm, 1, LK_F_NONE, 599);
  lk_call_metrics_budget_consumption(cm, 7.0);
  char *out = render(m);
  assert_non_null(strstr(out, "error=\"UNKNOWN\"} 2\n"));
  assert_non_null(strstr(out, "client=\"we\\\"ird\\\\ name\\n\""));
  assert_non_null(strstr(out, "kind=\"CONNECT_REFUSED\"} 1\n"));
  assert_line(out, "linkd_client_downstream_5xx_total{client=\"we\\\"ird\\\\ name\\n\"} 1");
  assert_line(out,
              "linkd_client_retry_budget_consumption_ratio{client=\"we\\\"ird\\\\ name\\n\"} 1");
  free(out);
  lk_call_metrics_snap s;
  assert_int_equal(lk_call_metrics_snapshot(cm, &s), LK_OK);
  assert_int_equal(s.attempts, 3);
  assert_int_equal(s.active, -2); /* ends without starts: reported as is */
  assert_int_equal(lk_call_metrics_snapshot(NULL, &s), LK_EINVAL);
  assert_int_equal(lk_call_metrics_snapshot(cm, NULL), LK_EINVAL);
  lk_call_metrics_free(cm);
  /* NULL bundle: every call is a no-op. */
  lk_call_metrics_call_start(NULL);
  lk_call_metrics_attempt(NULL, 1, LK_F_NONE, 200);
  lk_call_metrics_call_end(NULL, true, true, 1, 1, LK_OK);
  lk_call_metrics_resend_detected(NULL);
  lk_call_metrics_breaker_state(NULL, LK_CM_BREAKER_OPEN);
  lk_call_metrics_breaker_transition(NULL, LK_CM_BREAKER_OPEN, LK_CM_BREAKER_CLOSED);
  lk_call_metrics_bulkhead_queue_depth(NULL, 1);
  lk_call_metrics_bulkhead_wait(NULL, 1);
  lk_call_metrics_budget_consumption(NULL, 0.5);
  lk_call_metrics_budget_remaining(NULL, 1);
  assert_null(lk_call_metrics_attempt_hist(NULL));
  lk_call_metrics_free(NULL);
  assert_string_equal(lk_cm_breaker_state_name(LK_CM_BREAKER_METRICS_ONLY), "metrics_only");
  assert_string_equal(lk_cm_breaker_state_name((lk_cm_breaker_state)-1), "unknown");
  lk_metrics_free(m);
}

/* Two bundles for one client share series; another client gets its own. */
static void bundles_share_series(void **state) {
  (void)state;
  lk_metrics *m = lk_metrics_new();
  lk_call_metrics *a = lk_call_metrics_new(m, "svc");
  lk_call_metrics_breaker_state(a, LK_CM_BREAKER_FORCED_OPEN);
  lk_call_metrics *b = lk_call_metrics_new(m, "svc");
  lk_call_metrics *c = lk_call_metrics_new(m, "other");
  lk_call_metrics_call_start(a);
  lk_call_metrics_call_start(b);
  lk_call_metrics_call_start(c);
  lk_call_metrics_snap s;
  lk_call_metrics_snapshot(a, &s);
  assert_int_equal(s.requests, 2);
  /* b did not reset the state a had set. */
  assert_int_equal(s.breaker_state, LK_CM_BREAKER_FORCED_OPEN);
  assert_ptr_equal(lk_call_metrics_call_hist(a), lk_call_metrics_call_hist(b));
  assert_ptr_not_equal(lk_call_metrics_call_hist(a), lk_call_metrics_call_hist(c));
  lk_call_metrics_snapshot(c, &s);
  assert_int_equal(s.requests, 1);
  assert_int_equal(s.breaker_state, LK_CM_BREAKER_CLOSED);
  lk_call_metrics_free(a);
  lk_call_metrics_free(b);
  lk_call_metrics_free(c);
  lk_metrics_free(m);
}

enum { THREADS = 4, CALLS = 20000 };

static void *worker(void *arg) {
  lk_call_metrics *cm = arg;
  for (int i = 0; i < CALLS; i++) {
    lk_call_metrics_call_start(cm);
    bool retry = i % 4 == 0;
    lk_call_metrics_attempt_ex(cm, 1, retry ? LK_F_CONNECT_TIMEOUT : LK_F_NONE, 0, 1000 + i);
    if (retry)
      lk_call_metrics_attempt_ex(cm, 2, LK_F_NONE, 200, 2000);
    if (i % 100 == 0)
      lk_call_metrics_breaker_state(cm, (lk_cm_breaker_state)(i / 100 % LK_CM_BREAKER__COUNT));
    lk_call_metrics_call_end(cm, true, !retry, retry ? 2 : 1, 3000 + i, LK_OK);
  }
  return NULL;
}

static void concurrent_calls(void **state) {
  (void)state;
  lk_metrics *m = lk_metrics_new();
  lk_call_metrics *cm = lk_call_metrics_new(m, "c");
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, worker, cm), 0);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  lk_call_metrics_snap s;
  lk_call_metrics_snapshot(cm, &s);
  const uint64_t n = (uint64_t)THREADS * CALLS;
  assert_int_equal(s.requests, n);
  assert_int_equal(s.attempts, n + n / 4);
  assert_int_equal(s.retries, n / 4);
  assert_int_equal(s.timeouts, n / 4);
  assert_int_equal(s.calls_ok, n);
  assert_int_equal(s.first_attempt_ok, n - n / 4);
  assert_int_equal(s.active, 0);
  /* Exactly one breaker state reads 1 after the racing setters. */
  char *out = render(m);
  int ones = 0;
  for (const char *p = out; (p = strstr(p, "linkd_client_breaker_state{")) != NULL; p++)
    ones += strstr(p, "} 1\n") == strchr(p, '}');
  assert_int_equal(ones, 1);
  free(out);
  lk_call_metrics_free(cm);
  lk_metrics_free(m);
}

static void recording_allocates_nothing(void **state) {
  (void)state;
  lk_metrics *m = lk_metrics_new();
  lk_call_metrics *cm = lk_call_metrics_new(m, "z");
  /* First sight of a kind / error registers its series (allowed to allocate). */
  lk_call_metrics_attempt(cm, 1, LK_F_READ_TIMEOUT, 0);
  lk_call_metrics_call_end(cm, false, false, 1, 5, LK_EDEADLINE);
  lk_test_alloc_count_start();
  for (int i = 0; i < 1000; i++) {
    lk_call_metrics_call_start(cm);
    lk_call_metrics_attempt_ex(cm, 1, LK_F_READ_TIMEOUT, 0, 100);
    lk_call_metrics_attempt_ex(cm, 2, LK_F_NONE, 200, 100);
    lk_call_metrics_call_end(cm, i % 2 == 0, false, 2, 300, i % 2 ? LK_EDEADLINE : LK_OK);
    lk_call_metrics_bulkhead_wait(cm, 10);
    lk_call_metrics_bulkhead_queue_depth(cm, i);
    lk_call_metrics_budget_consumption(cm, 0.1);
    lk_call_metrics_resend_detected(cm);
  }
  uint64_t allocs = lk_test_alloc_count_stop();
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && !defined(LK_NO_ALLOC_HOOK)
  assert_int_equal(allocs, 0);
#else
  (void)allocs;
#endif
  lk_call_metrics_free(cm);
  lk_metrics_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(observation_table),           cmocka_unit_test(odd_inputs),
      cmocka_unit_test(bundles_share_series),        cmocka_unit_test(concurrent_calls),
      cmocka_unit_test(recording_allocates_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
