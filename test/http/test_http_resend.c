/* SPDX-License-Identifier: MIT */
/* libcurl's silent re-send: when a reused keep-alive connection dies before any reply, libcurl
 * writes the request again on a new connection within the same transfer. faultd's
 * keepalive_close mode (before_response) reads request 2 on a connection and closes it unanswered.
 * Each guard is checked against what the server actually received. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "httptest.h"

#include <linkd/callmetrics.h>
#include <linkd/metrics.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static faultd_proc FP;

static int teardown(void **s) {
  (void)s;
  faultd_stop(&FP);
  return 0;
}

/* One warm-up GET to put a connection in the pool, then `method` on the same client; returns the
 * second call's run (server log included). */
static void second_call(const char *method, lk_http_policy *pol, ht_run *r) {
  assert_int_equal(faultd_start(&FP, "keepalive_close", NULL), 0);
  lk_http_client *c = lk_http_client_new(NULL);
  assert_non_null(c);
  lk_http_policy warm;
  ht_policy(&warm);
  ht_run w;
  ht_call(&FP, c, "GET", NULL, 0, &warm, 1, &w);
  assert_int_equal(w.err, LK_OK);
  assert_int_equal(w.nreqs, 1);
  ht_free(&w);
  ht_call(&FP, c, method, strcmp(method, "GET") ? "{\"loan\":1}" : NULL, 10, pol, 2, r);
  lk_http_client_free(c);
}

/* GET: libcurl's re-send is harmless and allowed, but counted. */
static void test_get_resend_counted(void **s) {
  (void)s;
  lk_http_policy pol;
  ht_policy(&pol);
  ht_run r;
  second_call("GET", &pol, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(r.nattempts, 1);
  assert_int_equal(r.att[0].resends, 1);
  assert_int_equal(lk_http_result_resends(r.res), 1);
  assert_true(r.att[0].reused_connection);
  faultd_wait_requests(&FP, 3, 2000);
  r.nreqs = faultd_requests(&FP, r.reqs, HT_MAX_REQS);
  assert_int_equal(r.nreqs, 3); /* warm-up, the dead write, the re-send */
  assert_string_equal(r.reqs[1].attempt, "1");
  assert_string_equal(r.reqs[2].attempt, "1");
  assert_int_equal(r.reqs[2].seq, 1); /* on a new connection */
  ht_free(&r);
}

/* POST without a key, default guard: the second write is stopped; the attempt is "reset after
 * send" (the first write may have been processed) and is not retried. The server saw it once. */
static void test_post_resend_aborted(void **s) {
  (void)s;
  lk_http_policy pol;
  ht_policy(&pol);
  lk_metrics *m = lk_metrics_new();
  lk_call_metrics *cm = lk_call_metrics_new(m, "resend-test");
  assert_non_null(cm);
  pol.metrics = cm;
  ht_run r;
  second_call("POST", &pol, &r);
  assert_int_equal(r.nattempts, 1);
  assert_int_equal(r.att[0].failure, LK_F_RESET_AFTER_SEND);
  assert_int_equal(r.att[0].resends, 1);
  assert_int_equal(r.err, LK_ENOTRETRYABLE);
  faultd_wait_requests(&FP, 3, 300); /* give a wrong re-send time to show up */
  r.nreqs = faultd_requests(&FP, r.reqs, HT_MAX_REQS);
  assert_int_equal(r.nreqs, 2);
  assert_string_equal(r.reqs[1].method, "POST");
  lk_call_metrics_snap snap;
  assert_int_equal(lk_call_metrics_snapshot(cm, &snap), LK_OK);
  assert_int_equal(snap.resends, 1);
  assert_int_equal(snap.requests, 1);
  assert_int_equal(snap.attempts, 1);
  lk_call_metrics_free(cm);
  lk_metrics_free(m);
  ht_free(&r);
}

/* LK_RESEND_ALLOW shows the problem the guard prevents: the POST reached the server twice while
 * the caller saw one success. */
static void test_post_resend_allowed_duplicates(void **s) {
  (void)s;
  lk_http_policy pol;
  ht_policy(&pol);
  pol.resend_guard = LK_RESEND_ALLOW;
  ht_run r;
  second_call("POST", &pol, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(r.nattempts, 1);
  assert_int_equal(r.att[0].resends, 1);
  faultd_wait_requests(&FP, 3, 2000);
  r.nreqs = faultd_requests(&FP, r.reqs, HT_MAX_REQS);
  assert_int_equal(r.nreqs, 3);
  assert_string_equal(r.reqs[1].method, "POST");
  assert_string_equal(r.reqs[2].method, "POST");
  ht_free(&r);
}

/* LK_RESEND_FRESH_CONNECTION: the unkeyed POST never rides a pooled connection, so there is
 * nothing for libcurl to re-send. */
static void test_post_fresh_connection(void **s) {
  (void)s;
  lk_http_policy pol;
  ht_policy(&pol);
  pol.resend_guard = LK_RESEND_FRESH_CONNECTION;
  ht_run r;
  second_call("POST", &pol, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(r.att[0].resends, 0);
  assert_false(r.att[0].reused_connection);
  faultd_wait_requests(&FP, 3, 300);
  r.nreqs = faultd_requests(&FP, r.reqs, HT_MAX_REQS);
  assert_int_equal(r.nreqs, 2);
  assert_int_equal(r.reqs[1].seq, 1);
  ht_free(&r);
}

/* A keyed POST may be re-sent (the server deduplicates by key): counted, same key twice. */
static void test_keyed_post_resend(void **s) {
  (void)s;
  lk_http_policy pol;
  ht_policy(&pol);
  pol.idem_mode = LK_IDEM_AUTO;
  ht_run r;
  second_call("POST", &pol, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(r.att[0].resends, 1);
  faultd_wait_requests(&FP, 3, 2000);
  r.nreqs = faultd_requests(&FP, r.reqs, HT_MAX_REQS);
  assert_int_equal(r.nreqs, 3);
  const char *key = lk_http_result_idempotency_key(r.res);
  assert_non_null(key);
  assert_string_equal(r.reqs[1].idempotency_key, key);
  assert_string_equal(r.reqs[2].idempotency_key, key);
  ht_free(&r);
}

/* Keep-alive works: sequential calls on one client share one connection. */
static void test_keepalive_reuse(void **s) {
  (void)s;
  assert_int_equal(faultd_start(&FP, "ok", NULL), 0);
  lk_http_client *c = lk_http_client_new(NULL);
  lk_http_policy pol;
  ht_policy(&pol);
  for (int i = 0; i < 5; i++) {
    ht_run r;
    ht_call(&FP, c, "GET", NULL, 0, &pol, i + 1, &r);
    assert_int_equal(r.err, LK_OK);
    assert_int_equal(r.att[0].reused_connection, i > 0);
    ht_free(&r);
  }
  assert_int_equal(faultd_connections(&FP), 1);
  lk_http_client_free(c);
}

/* The server closes kept-alive connections at other moments (right after a response, or after
 * an idle spell): sequential GETs on one client all succeed, each request reaching the server
 * at most twice (a counted re-send). */
static void test_keepalive_close_moments(void **s) {
  (void)s;
  const char *whens[] = {"after_response", "idle"};
  for (int w = 0; w < 2; w++) {
    const char *args[] = {"--close-when", whens[w], "--idle-ms", "20", NULL};
    assert_int_equal(faultd_start(&FP, "keepalive_close", args), 0);
    lk_http_client *c = lk_http_client_new(NULL);
    lk_http_policy pol;
    ht_policy(&pol);
    int resends = 0;
    for (int i = 0; i < 4; i++) {
      ht_run r;
      ht_call(&FP, c, "GET", NULL, 0, &pol, 0, &r);
      assert_int_equal(r.err, LK_OK);
      resends += lk_http_result_resends(r.res);
      ht_free(&r);
      /* the next call starts once the server has closed every connection it accepted */
      int64_t t = lk_now_ns();
      while (faultd_closed_connections(&FP) < faultd_connections(&FP)) {
        assert_true(lk_now_ns() - t < LK_SEC(2));
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
      }
    }
    int n = faultd_request_count(&FP);
    assert_true(n >= 4 && n <= 4 + resends);
    lk_http_client_free(c);
    faultd_stop(&FP);
  }
}

/* lk_http_call(NULL, ...) keeps connections alive across calls (the thread's default client);
 * a thread's default client, and its connection, go when the thread exits. */
static void *null_client_call(void *arg) {
  const char *url = arg;
  lk_http_request *req = lk_http_request_new("GET", url);
  lk_http_policy pol;
  lk_http_policy_init_default(&pol);
  lk_http_result *res = NULL;
  intptr_t rc = lk_http_call(NULL, req, &pol, NULL, &res);
  lk_http_result_free(res);
  lk_http_request_free(req);
  return (void *)rc;
}

static void test_null_client_keeps_connections(void **s) {
  (void)s;
  assert_int_equal(faultd_start(&FP, "ok", NULL), 0);
  lk_http_policy pol;
  ht_policy(&pol);
  for (int i = 0; i < 3; i++) {
    ht_run r;
    ht_call(&FP, NULL, "GET", NULL, 0, &pol, i + 1, &r);
    assert_int_equal(r.err, LK_OK);
    assert_int_equal(r.att[0].reused_connection, i > 0);
    ht_free(&r);
  }
  assert_int_equal(faultd_connections(&FP), 1);
  char url[128];
  assert_int_equal(faultd_url(&FP, "/thread", url, sizeof url), 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, null_client_call, url), 0);
  void *rc = NULL;
  pthread_join(th, &rc);
  assert_int_equal((intptr_t)rc, LK_OK);
  assert_int_equal(faultd_connections(&FP), 2); /* its own client: its own connection */
  int64_t t = lk_now_ns(); /* freed at thread exit: the server sees that connection close */
  while (faultd_closed_connections(&FP) < 1) {
    assert_true(lk_now_ns() - t < LK_SEC(2));
    struct timespec ts = {0, 1000000L};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(faultd_closed_connections(&FP), 1); /* the main thread's is still open */
}

/* An idle pooled connection older than pool_idle_lifetime is not reused. */
static void test_pool_idle_lifetime(void **s) {
  (void)s;
  assert_int_equal(faultd_start(&FP, "ok", NULL), 0);
  lk_http_client *c = lk_http_client_new(NULL);
  lk_http_policy pol;
  ht_policy(&pol);
  pol.pool_idle_lifetime = LK_SEC(1);
  ht_run r;
  ht_call(&FP, c, "GET", NULL, 0, &pol, 1, &r);
  ht_free(&r);
  ht_call(&FP, c, "GET", NULL, 0, &pol, 2, &r); /* young: reused */
  assert_true(r.att[0].reused_connection);
  ht_free(&r);
  struct timespec ts = {2, 200000000L}; /* libcurl counts whole idle seconds: > 1 means 2 */
  nanosleep(&ts, NULL);
  ht_call(&FP, c, "GET", NULL, 0, &pol, 3, &r); /* idle 2.2 s: a new connection */
  assert_int_equal(r.err, LK_OK);
  assert_false(r.att[0].reused_connection);
  ht_free(&r);
  assert_int_equal(faultd_connections(&FP), 2);
  lk_http_client_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_get_resend_counted, teardown),
      cmocka_unit_test_teardown(test_post_resend_aborted, teardown),
      cmocka_unit_test_teardown(test_post_resend_allowed_duplicates, teardown),
      cmocka_unit_test_teardown(test_post_fresh_connection, teardown),
      cmocka_unit_test_teardown(test_keyed_post_resend, teardown),
      cmocka_unit_test_teardown(test_keepalive_reuse, teardown),
      cmocka_unit_test_teardown(test_null_client_keeps_connections, teardown),
      cmocka_unit_test_teardown(test_pool_idle_lifetime, teardown),
      cmocka_unit_test_teardown(test_keepalive_close_moments, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
