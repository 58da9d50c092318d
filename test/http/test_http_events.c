/* SPDX-License-Identifier: MIT */
/* The last stage and the observers of an HTTP call: the fallback (a substitute response for a
 * call that failed for good, counted by cause, the original error kept), the per-call event
 * callback (event.h) and the W3C traceparent sent on every attempt. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "httptest.h"

#include <linkd/breaker.h>
#include <linkd/budget.h>
#include <linkd/callmetrics.h>
#include <linkd/event.h>
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

/* --- fallback ------------------------------------------------------------------------------- */
typedef struct fb_ctx {
  int calls;
  int seen_err;
  size_t seen_attempts;
  int seen_status;
  bool decline;
} fb_ctx;

static int stale_copy(void *ctx, const lk_http_result *failed, lk_http_fallback_response *out) {
  fb_ctx *f = ctx;
  f->calls++;
  f->seen_err = lk_http_result_err(failed);
  lk_http_result_attempts(failed, &f->seen_attempts);
  f->seen_status = lk_http_result_status(failed);
  if (f->decline)
    return LK_EINVAL;
  static const char *const hdrs[] = {"Content-Type: application/json", "Warning: 110 stale"};
  static const char body[] = "{\"stale\":true}";
  out->headers = hdrs;
  out->nheaders = 2;
  out->body = body;
  out->body_len = sizeof body - 1;
  return LK_OK;
}

/* Every attempt gets a 503: the fallback is told the failure and its timeline and substitutes a
 * stale copy; the result says OK and fallback, keeps EATTEMPTS as the original error and the
 * three failed attempts in its timeline; the metrics count one fallback. */
static void test_fallback_substitutes_response(void **s) {
  (void)s;
  ht_start(&FP, "status", "--status", "503", NULL);
  lk_metrics *m = lk_metrics_new();
  lk_call_metrics *cm = lk_call_metrics_new(m, "t");
  fb_ctx f = {0};
  lk_http_policy pol;
  ht_policy(&pol);
  pol.metrics = cm;
  pol.fallback = stale_copy;
  pol.fallback_ctx = &f;
  ht_run r;
  ht_call(&FP, NULL, "GET", NULL, 0, &pol, 3, &r);
  assert_int_equal(f.calls, 1);
  assert_int_equal(f.seen_err, LK_EATTEMPTS);
  assert_int_equal(f.seen_attempts, 3);
  assert_int_equal(f.seen_status, 503);
  assert_int_equal(r.err, LK_OK);
  assert_true(lk_http_result_fallback(r.res));
  assert_int_equal(lk_http_result_original_err(r.res), LK_EATTEMPTS);
  assert_int_equal(lk_http_result_failure(r.res), LK_F_HTTP_503);
  assert_string_equal(lk_http_result_stop(r.res), "fallback after: attempts exhausted");
  const lk_http_response *resp = lk_http_result_response(r.res);
  assert_non_null(resp);
  assert_int_equal(resp->status, 200);
  assert_true(resp->complete);
  assert_string_equal(resp->body, "{\"stale\":true}");
  assert_string_equal(lk_http_response_header(resp, "warning"), "110 stale");
  assert_int_equal(r.nattempts, 3);
  for (size_t i = 0; i < 3; i++)
    assert_int_equal(r.att[i].status, 503);
  lk_call_metrics_snap snap;
  assert_int_equal(lk_call_metrics_snapshot(cm, &snap), LK_OK);
  assert_int_equal(snap.fallbacks, 1);
  char *text = NULL;
  assert_int_equal(lk_metrics_render(m, &text, NULL), LK_OK);
  assert_non_null(strstr(text, "linkd_client_fallbacks_total{client=\"t\",cause=\"EATTEMPTS\"} 1"));
  free(text);
  char *js = NULL;
  assert_int_equal(lk_http_result_json(r.res, &js, NULL), LK_OK);
  assert_non_null(strstr(js, "\"fallback\":true,\"original_error\":\"EATTEMPTS\""));
  free(js);
  ht_free(&r);
  lk_call_metrics_free(cm);
  lk_metrics_free(m);
}

/* A fallback that declines leaves the failure as it was, uncounted; a success never asks. */
static void test_fallback_declines_or_not_asked(void **s) {
  (void)s;
  ht_start(&FP, "status", "--script", "404,200", NULL);
  lk_metrics *m = lk_metrics_new();
  lk_call_metrics *cm = lk_call_metrics_new(m, "t");
  fb_ctx f = {.decline = true};
  lk_http_policy pol;
  ht_policy(&pol);
  pol.metrics = cm;
  pol.fallback = stale_copy;
  pol.fallback_ctx = &f;
  ht_run r;
  ht_call(&FP, NULL, "GET", NULL, 0, &pol, 1, &r);
  assert_int_equal(f.calls, 1);
  assert_int_equal(r.err, LK_EHTTP);
  assert_false(lk_http_result_fallback(r.res));
  assert_int_equal(lk_http_result_original_err(r.res), LK_OK);
  assert_int_equal(lk_http_result_status(r.res), 404);
  ht_free(&r);
  ht_call(&FP, NULL, "GET", NULL, 0, &pol, 2, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(f.calls, 1);
  ht_free(&r);
  lk_call_metrics_snap snap;
  assert_int_equal(lk_call_metrics_snapshot(cm, &snap), LK_OK);
  assert_int_equal(snap.fallbacks, 0);
  lk_call_metrics_free(cm);
  lk_metrics_free(m);
}

/* --- events --------------------------------------------------------------------------------- */
#define EV_MAX 64
typedef struct ev_log {
  lk_event ev[EV_MAX];
  int n;
} ev_log;

static void on_event(void *ctx, const lk_event *ev) {
  ev_log *l = ctx;
  assert_int_equal(ev->size, sizeof *ev);
  if (l->n < EV_MAX)
    l->ev[l->n++] = *ev;
}

static void expect_types(const ev_log *l, const lk_event_type *want, int n) {
  for (int i = 0; i < l->n; i++)
    printf("# event %d: %s attempt %d at %.3f ms\n", i, lk_event_type_name(l->ev[i].type),
           l->ev[i].attempt, (double)l->ev[i].at / 1e6);
  assert_int_equal(l->n, n);
  for (int i = 0; i < n; i++)
    assert_string_equal(lk_event_type_name(l->ev[i].type), lk_event_type_name(want[i]));
}

/* A 503 then a 200: start, two attempts with the retry between them, end. */
static void test_events_of_a_retried_call(void **s) {
  (void)s;
  ht_start(&FP, "status", "--script", "503,200", NULL);
  ev_log l = {0};
  lk_http_policy pol;
  ht_policy(&pol);
  pol.on_event = on_event;
  pol.event_ctx = &l;
  ht_run r;
  ht_call(&FP, NULL, "GET", NULL, 0, &pol, 2, &r);
  assert_int_equal(r.err, LK_OK);
  static const lk_event_type want[] = {
      LK_EV_CALL_START,    LK_EV_ATTEMPT_START, LK_EV_ATTEMPT_END, LK_EV_RETRY_SCHEDULED,
      LK_EV_ATTEMPT_START, LK_EV_ATTEMPT_END,   LK_EV_CALL_END};
  expect_types(&l, want, 7);
  assert_int_equal(l.ev[2].attempt, 1);
  assert_int_equal(l.ev[2].u.attempt_end.failure, LK_F_HTTP_503);
  assert_true(l.ev[2].u.attempt_end.sent);
  assert_int_equal(l.ev[3].u.retry.delay, LK_MS(30));
  assert_int_equal(l.ev[3].u.retry.failure, LK_F_HTTP_503);
  assert_int_equal(l.ev[4].attempt, 2);
  assert_true(l.ev[4].at >= l.ev[3].at + LK_MS(30));
  assert_int_equal(l.ev[5].u.attempt_end.failure, LK_F_NONE);
  assert_int_equal(l.ev[6].u.end.err, LK_OK);
  assert_int_equal(l.ev[6].u.end.attempts, 2);
  assert_false(l.ev[6].u.end.fallback);
  ht_free(&r);
}

/* The budget refuses the retry: BUDGET_REFUSED after the attempt's end; a fallback then
 * produces the result: FALLBACK before CALL_END, which says so. */
static void test_events_budget_refused_and_fallback(void **s) {
  (void)s;
  ht_start(&FP, "read_then_close", NULL);
  lk_budget_token_config tc;
  lk_budget_token_config_init_default(&tc);
  tc.max_tokens = 2;
  lk_budget *b = NULL;
  assert_int_equal(lk_budget_new_token(&tc, &b, NULL), LK_OK);
  ev_log l = {0};
  fb_ctx f = {0};
  lk_http_policy pol;
  ht_policy(&pol);
  pol.budget = b;
  pol.on_event = on_event;
  pol.event_ctx = &l;
  pol.fallback = stale_copy;
  pol.fallback_ctx = &f;
  ht_run r;
  ht_call(&FP, NULL, "GET", NULL, 0, &pol, 1, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(lk_http_result_original_err(r.res), LK_EBUDGET);
  static const lk_event_type want[] = {LK_EV_CALL_START,     LK_EV_ATTEMPT_START, LK_EV_ATTEMPT_END,
                                       LK_EV_BUDGET_REFUSED, LK_EV_FALLBACK,      LK_EV_CALL_END};
  expect_types(&l, want, 6);
  assert_int_equal(l.ev[3].u.budget.failure, LK_F_EMPTY_RESPONSE);
  assert_int_equal(l.ev[4].u.fallback.err, LK_EBUDGET);
  assert_int_equal(l.ev[4].u.fallback.failure, LK_F_EMPTY_RESPONSE);
  assert_int_equal(l.ev[5].u.end.err, LK_OK);
  assert_true(l.ev[5].u.end.fallback);
  ht_free(&r);
  lk_budget_free(b);
}

/* A hedge: HEDGE_STARTED between the two attempt starts, with both in flight. */
static void test_events_of_a_hedge(void **s) {
  (void)s;
  ht_start(&FP, "ok", "--script", "slow:300,ok", NULL);
  ev_log l = {0};
  lk_http_policy pol;
  ht_policy(&pol);
  pol.attempt_timeout = LK_MS(800);
  lk_hedge_policy_init_default(&pol.hedge);
  pol.hedge.delay = LK_MS(40);
  pol.on_event = on_event;
  pol.event_ctx = &l;
  ht_run r;
  ht_call(&FP, NULL, "GET", NULL, 0, &pol, 2, &r);
  assert_int_equal(r.err, LK_OK);
  static const lk_event_type want[] = {
      LK_EV_CALL_START,  LK_EV_ATTEMPT_START, LK_EV_ATTEMPT_START, LK_EV_HEDGE_STARTED,
      LK_EV_ATTEMPT_END, LK_EV_ATTEMPT_END,   LK_EV_CALL_END};
  expect_types(&l, want, 7);
  assert_int_equal(l.ev[3].attempt, 2);
  assert_int_equal(l.ev[3].u.hedge.in_flight, 2);
  assert_true(l.ev[3].u.hedge.delay >= LK_MS(40));
  assert_int_equal(l.ev[4].attempt, 2); /* the hedge answered first */
  assert_int_equal(l.ev[4].u.attempt_end.failure, LK_F_NONE);
  assert_int_equal(l.ev[5].attempt, 1);
  assert_int_equal(l.ev[5].u.attempt_end.failure, LK_F_CANCELLED);
  ht_free(&r);
}

/* A breaker that opens on this call's failures: BREAKER_TRANSITION CLOSED -> OPEN. */
static void test_events_breaker_transition(void **s) {
  (void)s;
  ht_start(&FP, "status", "--status", "503", NULL);
  lk_breaker_config bc;
  lk_breaker_config_init_default(&bc);
  bc.window_size = 2;
  bc.minimum_calls = 2;
  lk_breaker *br = NULL;
  assert_int_equal(lk_breaker_new(&bc, &br, NULL), LK_OK);
  ev_log l = {0};
  lk_http_policy pol;
  ht_policy(&pol);
  pol.breaker = br;
  pol.breaker_wait = false;
  pol.on_event = on_event;
  pol.event_ctx = &l;
  ht_run r;
  ht_call(&FP, NULL, "GET", NULL, 0, &pol, 2, &r);
  assert_int_equal(r.err, LK_EBREAKER_OPEN);
  int found = -1;
  for (int i = 0; i < l.n; i++)
    if (l.ev[i].type == LK_EV_BREAKER_TRANSITION)
      found = i;
  assert_true(found > 0);
  assert_int_equal(l.ev[found].attempt, 2);
  assert_int_equal(l.ev[found].u.breaker.from, LK_BREAKER_CLOSED);
  assert_int_equal(l.ev[found].u.breaker.to, LK_BREAKER_OPEN);
  assert_int_equal(l.ev[l.n - 1].type, LK_EV_CALL_END);
  ht_free(&r);
  lk_breaker_free(br);
}

/* --- traceparent ----------------------------------------------------------------------------- */

/* Every attempt sends the parent's trace id and flags with a span id of its own. */
static void test_traceparent_on_every_attempt(void **s) {
  (void)s;
  static const char resp[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                             "Connection: close\r\n\r\n";
  ht_raw srv;
  ht_raw_start(&srv, resp, sizeof resp - 1);
  char url[64];
  ht_raw_url(&srv, url, sizeof url);
  static const char parent_s[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  lk_traceparent parent;
  assert_int_equal(lk_traceparent_parse(parent_s, sizeof parent_s - 1, &parent), LK_OK);
  lk_http_policy pol;
  ht_policy(&pol);
  pol.traceparent = &parent;
  ht_run r;
  ht_call_url(NULL, "GET", url, NULL, 0, &pol, &r);
  assert_int_equal(r.err, LK_EATTEMPTS);
  assert_int_equal(atomic_load(&srv.requests), 3);
  char spans[3][17];
  for (int i = 0; i < 3; i++) {
    const char *h = strstr(srv.heads[i], "traceparent: ");
    assert_non_null(h);
    h += 13;
    lk_traceparent got;
    assert_int_equal(lk_traceparent_parse(h, LK_TRACEPARENT_LEN, &got), LK_OK);
    assert_memory_equal(got.trace_id, parent.trace_id, 16);
    assert_int_equal(got.flags, parent.flags);
    assert_memory_not_equal(got.parent_id, parent.parent_id, 8);
    memcpy(spans[i], h + 36, 16);
    spans[i][16] = '\0';
  }
  assert_string_not_equal(spans[0], spans[1]);
  assert_string_not_equal(spans[1], spans[2]);
  assert_string_not_equal(spans[0], spans[2]);
  ht_free(&r);
  ht_raw_stop(&srv);
}

/* Without a parent nothing is sent. */
static void test_no_traceparent_by_default(void **s) {
  (void)s;
  static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  ht_raw srv;
  ht_raw_start(&srv, resp, sizeof resp - 1);
  char url[64];
  ht_raw_url(&srv, url, sizeof url);
  lk_http_policy pol;
  ht_policy(&pol);
  ht_run r;
  ht_call_url(NULL, "GET", url, NULL, 0, &pol, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(atomic_load(&srv.requests), 1);
  assert_null(strstr(srv.heads[0], "traceparent"));
  ht_free(&r);
  ht_raw_stop(&srv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_fallback_substitutes_response, teardown),
      cmocka_unit_test_teardown(test_fallback_declines_or_not_asked, teardown),
      cmocka_unit_test_teardown(test_events_of_a_retried_call, teardown),
      cmocka_unit_test_teardown(test_events_budget_refused_and_fallback, teardown),
      cmocka_unit_test_teardown(test_events_of_a_hedge, teardown),
      cmocka_unit_test_teardown(test_events_breaker_transition, teardown),
      cmocka_unit_test(test_traceparent_on_every_attempt),
      cmocka_unit_test(test_no_traceparent_by_default),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
