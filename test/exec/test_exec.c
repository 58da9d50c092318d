/* SPDX-License-Identifier: MIT */
/* The executor through its public API: scripted attempts on a fake clock with a fake sleep, so
 * every delay, deadline and event is exact; the protections are the real shared objects. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <linkd/linkd.h>

#include "exec_fixture.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK_STEP(t)                                                                                 \
  { LK_F_NONE, true, -1, (t) }

/* --- tests --------------------------------------------------------------------------------- */

static void test_success_first_attempt(void **state) {
  (void)state;
  static const step steps[] = {OK_STEP(LK_MS(5))};
  fix f;
  fix_init(&f, steps, 1);
  assert_int_equal(fix_run(&f), LK_OK);
  assert_int_equal(f.res.attempts, 1);
  assert_int_equal(f.res.failure, LK_F_NONE);
  assert_string_equal(f.res.stop, "success");
  assert_int_equal(f.res.elapsed, LK_MS(5));
  assert_false(f.res.fallback);
  assert_int_equal(f.tl[0].number, 1);
  assert_int_equal(f.tl[0].duration, LK_MS(5));
  assert_int_equal(f.tl[0].timeout, LK_MS(800));
  assert_string_equal(f.tl[0].reason, "success");
  /* the attempt was told its timeout, number and deadline */
  assert_int_equal(f.sc.seen[0].number, 1);
  assert_int_equal(f.sc.seen[0].timeout, LK_MS(800));
  assert_int_equal(f.sc.seen[0].remaining, LK_SEC(3));
  assert_int_equal(f.sc.seen[0].end_at, LK_SEC(1000) + LK_MS(800));
  assert_null(f.sc.seen[0].traceparent);
  /* events in order */
  assert_int_equal(f.log.n, 4);
  assert_int_equal(f.log.ev[0].type, LK_EV_CALL_START);
  assert_int_equal(f.log.ev[1].type, LK_EV_ATTEMPT_START);
  assert_int_equal(f.log.ev[1].attempt, 1);
  assert_int_equal(f.log.ev[1].u.attempt_start.timeout, LK_MS(800));
  assert_int_equal(f.log.ev[2].type, LK_EV_ATTEMPT_END);
  assert_int_equal(f.log.ev[2].u.attempt_end.failure, LK_F_NONE);
  assert_int_equal(f.log.ev[2].u.attempt_end.duration, LK_MS(5));
  assert_int_equal(f.log.ev[3].type, LK_EV_CALL_END);
  assert_int_equal(f.log.ev[3].u.end.err, LK_OK);
  assert_int_equal(f.log.ev[3].u.end.attempts, 1);
  assert_int_equal(f.log.ev[3].at, LK_MS(5));
}

static void test_retries_not_sent_with_backoff(void **state) {
  (void)state;
  /* connection refused, reset before send: never reached the server, so even a
   * non-idempotent operation is retried, after 200 then 400 ms */
  static const step steps[] = {{LK_F_CONNECT_REFUSED, false, -1, LK_MS(1)},
                               {LK_F_RESET_BEFORE_SEND, false, -1, LK_MS(2)},
                               OK_STEP(LK_MS(3))};
  fix f;
  fix_init(&f, steps, 3);
  assert_int_equal(fix_run(&f), LK_OK);
  assert_int_equal(f.res.attempts, 3);
  assert_int_equal(f.tl[0].start, 0);
  assert_true(f.tl[0].decision.retry);
  assert_int_equal(f.tl[0].decision.delay, LK_MS(200));
  assert_string_equal(f.tl[0].reason, "retry CONNECT_REFUSED");
  assert_int_equal(f.tl[1].start, LK_MS(201));
  assert_int_equal(f.tl[1].decision.delay, LK_MS(400));
  assert_int_equal(f.tl[2].start, LK_MS(603));
  assert_int_equal(f.res.elapsed, LK_MS(606));
  /* each attempt's timeout is min(cap, remaining) */
  assert_int_equal(f.sc.seen[2].timeout, LK_MS(800));
  assert_int_equal(f.sc.seen[2].remaining, LK_SEC(3) - LK_MS(603));
  const lk_event *r0 = find_ev(&f.log, LK_EV_RETRY_SCHEDULED, 0);
  const lk_event *r1 = find_ev(&f.log, LK_EV_RETRY_SCHEDULED, 1);
  assert_non_null(r0);
  assert_non_null(r1);
  assert_int_equal(r0->attempt, 1);
  assert_int_equal(r0->u.retry.delay, LK_MS(200));
  assert_int_equal(r0->u.retry.failure, LK_F_CONNECT_REFUSED);
  assert_int_equal(r1->u.retry.delay, LK_MS(400));
  assert_int_equal(count_ev(&f.log, LK_EV_ATTEMPT_START), 3);
  assert_int_equal(count_ev(&f.log, LK_EV_ATTEMPT_END), 3);
  assert_int_equal(f.log.ev[f.log.n - 1].type, LK_EV_CALL_END);
}

static void test_server_error_after_send(void **state) {
  (void)state;
  /* a server error after the statement was sent: it may have run, so a non-idempotent
   * operation stops; the same failure before sending is retried */
  static const step sent[] = {{LK_F_SERVER_5XX, true, -1, LK_MS(1)}, OK_STEP(1)};
  fix f;
  fix_init(&f, sent, 2);
  assert_int_equal(fix_run(&f), LK_ENOTRETRYABLE);
  assert_int_equal(f.res.attempts, 1);
  assert_int_equal(f.res.failure, LK_F_SERVER_5XX);
  assert_string_equal(f.res.stop, "not retryable: SERVER_5XX");
  assert_true(f.tl[0].sent);

  fix_init(&f, sent, 2);
  f.pol.idempotent = true;
  assert_int_equal(fix_run(&f), LK_OK);
  assert_int_equal(f.res.attempts, 2);

  static const step unsent[] = {{LK_F_SERVER_5XX, false, -1, LK_MS(1)}, OK_STEP(1)};
  fix_init(&f, unsent, 2);
  assert_int_equal(fix_run(&f), LK_OK);
  assert_int_equal(f.res.attempts, 2);

  static const step perm[] = {{LK_F_CLIENT_4XX, true, -1, LK_MS(1)}};
  fix_init(&f, perm, 1);
  f.pol.idempotent = true;
  assert_int_equal(fix_run(&f), LK_ENOTRETRYABLE);
}

static void test_retry_after_and_exhaustion(void **state) {
  (void)state;
  static const step steps[] = {{LK_F_TOO_MANY_REQUESTS, true, LK_MS(700), LK_MS(1)},
                               {LK_F_CONNECT_REFUSED, false, -1, LK_MS(1)},
                               {LK_F_CONNECT_REFUSED, false, -1, LK_MS(1)},
                               {LK_F_CONNECT_REFUSED, false, -1, LK_MS(1)}};
  fix f;
  fix_init(&f, steps, 4);
  f.pol.deadline = LK_SEC(10);
  assert_int_equal(fix_run(&f), LK_EATTEMPTS);
  assert_int_equal(f.res.attempts, 4);
  assert_int_equal(f.tl[0].retry_after, LK_MS(700));
  assert_int_equal(f.tl[0].decision.delay, LK_MS(700)); /* max(200 ms, Retry-After) */
  assert_true(find_ev(&f.log, LK_EV_RETRY_SCHEDULED, 0)->u.retry.from_retry_after);
  assert_string_equal(f.res.stop, "attempts exhausted");
  assert_int_equal(f.res.failure, LK_F_CONNECT_REFUSED);
  assert_int_equal(find_ev(&f.log, LK_EV_CALL_END, 0)->u.end.err, LK_EATTEMPTS);
}

static void test_deadline_bounds_everything(void **state) {
  (void)state;
  /* the first attempt takes 700 ms of a 1 s deadline; the 200 ms delay fits in the 300 ms
   * left, so the second attempt gets a timeout of the remaining 100 ms, and then time is up */
  static const step steps[] = {{LK_F_CONNECT_TIMEOUT, false, -1, LK_MS(700)},
                               {LK_F_CONNECT_TIMEOUT, false, -1, LK_MS(100)}};
  fix f;
  fix_init(&f, steps, 2);
  f.pol.deadline = LK_SEC(1);
  assert_int_equal(fix_run(&f), LK_EDEADLINE);
  assert_int_equal(f.res.attempts, 2);
  assert_int_equal(f.sc.seen[1].timeout, LK_MS(100));
  assert_int_equal(f.tl[1].decision.reason, LK_REASON_DEADLINE);
  assert_int_equal(f.res.elapsed, LK_SEC(1));

  /* a delay that would end past the deadline stops the call */
  static const step slow[] = {{LK_F_CONNECT_TIMEOUT, false, -1, LK_MS(900)}};
  fix_init(&f, slow, 1);
  f.pol.deadline = LK_SEC(1);
  assert_int_equal(fix_run(&f), LK_EDEADLINE);
  assert_string_equal(f.res.stop, "delay 200ms >= remaining 100ms");

  /* an inherited absolute deadline that already passed: no attempt at all */
  fix_init(&f, slow, 1);
  f.pol.deadline_at = lk_deadline_after(LK_SEC(999), LK_SEC(1));
  assert_int_equal(fix_run(&f), LK_EDEADLINE);
  assert_int_equal(f.sc.calls, 0);
}

static void test_budget_refusal(void **state) {
  (void)state;
  lk_budget_token_config tc;
  lk_budget_token_config_init_default(&tc);
  tc.max_tokens = 2; /* each failure takes a token; retries only while tokens > 1 */
  lk_budget *b = NULL;
  assert_int_equal(lk_budget_new_token(&tc, &b, NULL), LK_OK);
  static const step steps[] = {{LK_F_CONNECT_REFUSED, false, -1, LK_MS(1)},
                               {LK_F_CONNECT_REFUSED, false, -1, LK_MS(1)},
                               {LK_F_CONNECT_REFUSED, false, -1, LK_MS(1)}};
  fix f;
  fix_init(&f, steps, 3);
  f.pol.budget = b;
  int rc = fix_run(&f);
  assert_int_equal(rc, LK_EBUDGET);
  assert_true(f.res.attempts < 3);
  const lk_event *br = find_ev(&f.log, LK_EV_BUDGET_REFUSED, 0);
  assert_non_null(br);
  assert_int_equal(br->u.budget.failure, LK_F_CONNECT_REFUSED);
  assert_int_equal(f.tl[f.res.attempts - 1].decision.reason, LK_REASON_BUDGET);
  assert_string_equal(f.res.stop, "retry budget exhausted");
  lk_budget_free(b);
}

static void test_breaker_opens_and_refuses(void **state) {
  (void)state;
  lk_breaker_config bc;
  lk_breaker_config_init_default(&bc);
  bc.window_size = 2;
  bc.minimum_calls = 2;
  bc.wait_open = LK_SEC(30);
  lk_breaker *br = NULL;
  assert_int_equal(lk_breaker_new(&bc, &br, NULL), LK_OK);
  static const step steps[] = {{LK_F_CONNECT_REFUSED, false, -1, LK_MS(1)},
                               {LK_F_CONNECT_REFUSED, false, -1, LK_MS(1)},
                               OK_STEP(1)};
  fix f;
  fix_init(&f, steps, 3);
  f.pol.breaker = br;
  f.pol.breaker_wait = false;
  /* two failures open the breaker; the third attempt is refused before it runs */
  assert_int_equal(fix_run(&f), LK_EBREAKER_OPEN);
  assert_int_equal(f.sc.calls, 2);
  assert_int_equal(f.res.attempts, 3);
  assert_true(f.tl[2].refused);
  assert_int_equal(f.tl[2].failure, LK_F_BREAKER_OPEN);
  assert_int_equal(f.res.failure, LK_F_BREAKER_OPEN);
  const lk_event *t = find_ev(&f.log, LK_EV_BREAKER_TRANSITION, 0);
  assert_non_null(t);
  assert_int_equal(t->attempt, 2);
  assert_int_equal(t->u.breaker.from, LK_BREAKER_CLOSED);
  assert_int_equal(t->u.breaker.to, LK_BREAKER_OPEN);
  const lk_event *end3 = find_ev(&f.log, LK_EV_ATTEMPT_END, 2);
  assert_non_null(end3);
  assert_int_equal(end3->u.attempt_end.failure, LK_F_BREAKER_OPEN);

  /* with breaker_wait, a call with time waits for the next probe (30 s: more than this
   * deadline leaves, so it still fails at once) */
  fix_init(&f, steps + 2, 1);
  f.pol.breaker = br;
  assert_int_equal(fix_run(&f), LK_EBREAKER_OPEN);
  assert_int_equal(f.sc.calls, 0);
  lk_breaker_free(br);
}

static void test_breaker_wait_for_probe(void **state) {
  (void)state;
  lk_breaker_config bc;
  lk_breaker_config_init_default(&bc);
  bc.window_size = 1;
  bc.minimum_calls = 1;
  bc.wait_open = LK_MS(500);
  bc.permitted_half_open = 1;
  lk_breaker *br = NULL;
  assert_int_equal(lk_breaker_new(&bc, &br, NULL), LK_OK);
  fix f;
  static const step steps[] = {OK_STEP(LK_MS(1))};
  fix_init(&f, steps, 1);
  assert_int_equal(lk_breaker_acquire(br, LK_SEC(1000)), LK_OK);
  lk_breaker_record(br, LK_SEC(1000), 0, LK_F_CONNECT_REFUSED); /* open until +500 ms */
  assert_int_equal(lk_breaker_get_state(br), LK_BREAKER_OPEN);
  f.pol.breaker = br;
  assert_int_equal(fix_run(&f), LK_OK);
  assert_int_equal(f.res.attempts, 1);
  const lk_event *w = find_ev(&f.log, LK_EV_WAIT, 0);
  assert_non_null(w);
  assert_int_equal(w->u.wait.what, LK_EV_WAIT_BREAKER);
  assert_true(w->u.wait.granted);
  assert_int_equal(w->u.wait.waited, LK_MS(500));
  /* OPEN -> HALF_OPEN on the probe, HALF_OPEN -> CLOSED on its success */
  assert_int_equal(count_ev(&f.log, LK_EV_BREAKER_TRANSITION), 2);
  assert_int_equal(find_ev(&f.log, LK_EV_BREAKER_TRANSITION, 1)->u.breaker.to, LK_BREAKER_CLOSED);
  lk_breaker_free(br);
}

static void test_bulkhead_full_and_limiter_wait(void **state) {
  (void)state;
  lk_bulkhead_config hc = {1, 0};
  lk_bulkhead *bh = NULL;
  assert_int_equal(lk_bulkhead_new(&hc, &bh, NULL), LK_OK);
  assert_int_equal(lk_bulkhead_try_acquire(bh), LK_OK);
  static const step steps[] = {OK_STEP(LK_MS(1))};
  fix f;
  fix_init(&f, steps, 1);
  f.pol.bulkhead = bh;
  assert_int_equal(fix_run(&f), LK_EBULKHEAD_FULL);
  assert_int_equal(f.sc.calls, 0);
  assert_true(f.tl[0].refused);
  assert_int_equal(f.tl[0].failure, LK_F_BULKHEAD_FULL);
  lk_bulkhead_release(bh);
  /* a free slot is taken and given back */
  fix_init(&f, steps, 1);
  f.pol.bulkhead = bh;
  assert_int_equal(fix_run(&f), LK_OK);
  assert_int_equal(lk_bulkhead_in_use(bh), 0);
  lk_bulkhead_free(bh);

  lk_limiter_config lc = {2.0, 1}; /* one token every 500 ms */
  lk_limiter *lim = NULL;
  assert_int_equal(lk_limiter_new(&lc, &lim, NULL), LK_OK);
  assert_int_equal(lk_limiter_try_acquire(lim, LK_SEC(1000)), LK_OK);
  fix_init(&f, steps, 1);
  f.pol.limiter = lim;
  assert_int_equal(fix_run(&f), LK_OK);
  const lk_event *w = find_ev(&f.log, LK_EV_WAIT, 0);
  assert_non_null(w);
  assert_int_equal(w->u.wait.what, LK_EV_WAIT_LIMITER);
  assert_int_equal(w->u.wait.waited, LK_MS(500));
  assert_int_equal(f.tl[0].start, LK_MS(500));
  /* no token within the deadline: refused */
  fix_init(&f, steps, 1);
  f.pol.limiter = lim;
  f.pol.deadline = LK_MS(100);
  assert_int_equal(fix_run(&f), LK_ERATE_LIMITED);
  assert_int_equal(f.sc.calls, 0);
  /* a token in time for the deadline but not for a useful attempt (min_attempt) is not taken:
   * the call is refused and the next caller gets that token */
  fix_init(&f, steps, 1);
  int64_t t0 = LK_SEC(1000), w0 = lk_limiter_wait_time(lim, t0);
  assert_true(w0 > 0);
  f.pol.limiter = lim;
  f.pol.deadline = w0 + LK_MS(100);
  lk_retry_config rc = f.pol.retry.cfg;
  rc.min_attempt = LK_MS(300);
  assert_int_equal(lk_retry_policy_init(&f.pol.retry, &rc, NULL), LK_OK);
  assert_int_equal(fix_run(&f), LK_ERATE_LIMITED);
  assert_int_equal(f.sc.calls, 0);
  assert_int_equal(lk_limiter_wait_time(lim, t0), w0);
  lk_limiter_free(lim);
}

typedef struct fb_ctx {
  int calls;
  int seen_err;
  int seen_attempts;
  lk_failure seen_last;
  int answer;
  const char *value;
} fb_ctx;

static int fallback(void *ctx, const lk_exec_result *r) {
  fb_ctx *c = ctx;
  c->calls++;
  c->seen_err = r->err;
  c->seen_attempts = r->attempts;
  c->seen_last = r->timeline[r->attempts - 1].failure;
  if (c->answer == LK_OK)
    c->value = "stale copy";
  return c->answer;
}

static void test_fallback(void **state) {
  (void)state;
  lk_metrics *m = lk_metrics_new();
  lk_call_metrics *cm = lk_call_metrics_new(m, "exec");
  assert_non_null(cm);
  static const step steps[] = {{LK_F_SERVER_5XX, true, -1, LK_MS(1)}};
  fb_ctx fc = {0, 0, 0, LK_F_NONE, LK_OK, NULL};
  fix f;
  fix_init(&f, steps, 1);
  f.pol.fallback = fallback;
  f.pol.fallback_ctx = &fc;
  f.pol.metrics = cm;
  assert_int_equal(fix_run(&f), LK_OK);
  assert_int_equal(fc.calls, 1);
  assert_int_equal(fc.seen_err, LK_ENOTRETRYABLE);
  assert_int_equal(fc.seen_attempts, 1);
  assert_int_equal(fc.seen_last, LK_F_SERVER_5XX);
  assert_string_equal(fc.value, "stale copy");
  assert_true(f.res.fallback);
  assert_int_equal(f.res.original_err, LK_ENOTRETRYABLE);
  assert_int_equal(f.res.failure, LK_F_SERVER_5XX); /* the original failure stays visible */
  assert_int_equal(f.tl[0].failure, LK_F_SERVER_5XX);
  const lk_event *fe = find_ev(&f.log, LK_EV_FALLBACK, 0);
  assert_non_null(fe);
  assert_int_equal(fe->u.fallback.err, LK_ENOTRETRYABLE);
  const lk_event *end = find_ev(&f.log, LK_EV_CALL_END, 0);
  assert_true(end->u.end.fallback);
  assert_int_equal(end->u.end.err, LK_OK);
  assert_true(fe < end);

  /* a fallback that cannot help leaves the error as it was */
  fc.answer = LK_ENOTFOUND;
  fix_init(&f, steps, 1);
  f.pol.fallback = fallback;
  f.pol.fallback_ctx = &fc;
  f.pol.metrics = cm;
  assert_int_equal(fix_run(&f), LK_ENOTRETRYABLE);
  assert_false(f.res.fallback);
  assert_int_equal(count_ev(&f.log, LK_EV_FALLBACK), 0);

  /* never for a success */
  static const step ok[] = {OK_STEP(1)};
  fc.calls = 0;
  fix_init(&f, ok, 1);
  f.pol.fallback = fallback;
  f.pol.fallback_ctx = &fc;
  assert_int_equal(fix_run(&f), LK_OK);
  assert_int_equal(fc.calls, 0);

  /* metrics: both calls failed; one fallback, by its cause */
  lk_call_metrics_snap s;
  assert_int_equal(lk_call_metrics_snapshot(cm, &s), LK_OK);
  assert_int_equal(s.calls_failed, 2);
  assert_int_equal(s.calls_ok, 0);
  assert_int_equal(s.fallbacks, 1);
  assert_int_equal(s.requests, 2);
  assert_int_equal(s.attempts, 2);
  char *text = NULL;
  assert_int_equal(lk_metrics_render(m, &text, NULL), LK_OK);
  assert_non_null(
      strstr(text, "linkd_client_fallbacks_total{client=\"exec\",cause=\"ENOTRETRYABLE\"} 1"));
  free(text);
  lk_call_metrics_free(cm);
  lk_metrics_free(m);
}

static void test_cancel(void **state) {
  (void)state;
  lk_cancel *c = lk_cancel_new();
  assert_non_null(c);
  static const step steps[] = {{LK_F_CONNECT_REFUSED, false, -1, LK_MS(1)}, OK_STEP(1)};
  fix f;
  fix_init(&f, steps, 2);
  f.sc.fire_on_call = c;
  f.sc.cancel_at = 1;
  assert_int_equal(lk_exec_run(&f.pol, scripted, &f.sc, c, &f.res), LK_ECANCELED);
  assert_int_equal(f.sc.calls, 1);
  assert_int_equal(f.res.failure, LK_F_CANCELLED);
  assert_string_equal(f.tl[0].reason, "cancelled");
  assert_ptr_equal(f.sc.seen[0].cancel, c);
  /* a fired token: nothing runs */
  fix_init(&f, steps, 2);
  assert_int_equal(lk_exec_run(&f.pol, scripted, &f.sc, c, &f.res), LK_ECANCELED);
  assert_int_equal(f.sc.calls, 0);
  assert_int_equal(f.res.attempts, 0);
  lk_cancel_free(c);
}

/* jitter from a seeded generator; trace spans from the same generator */
static void test_traceparent_per_attempt(void **state) {
  (void)state;
  static const char parent_s[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  lk_traceparent parent;
  assert_int_equal(lk_traceparent_parse(parent_s, strlen(parent_s), &parent), LK_OK);
  static const step steps[] = {{LK_F_CONNECT_REFUSED, false, -1, LK_MS(1)}, OK_STEP(1)};
  lk_rand_fast rng;
  lk_rand_fast_seeded(&rng, 42);
  fix f;
  fix_init(&f, steps, 2);
  f.pol.traceparent = &parent;
  f.pol.rng = &rng.base;
  assert_int_equal(fix_run(&f), LK_OK);
  assert_true(f.sc.had_span[0] && f.sc.had_span[1]);
  assert_memory_equal(f.sc.spans[0].trace_id, parent.trace_id, 16);
  assert_memory_equal(f.sc.spans[1].trace_id, parent.trace_id, 16);
  assert_int_equal(f.sc.spans[0].flags, parent.flags);
  assert_memory_not_equal(f.sc.spans[0].parent_id, parent.parent_id, 8);
  assert_memory_not_equal(f.sc.spans[0].parent_id, f.sc.spans[1].parent_id, 8);
  /* the same seed replays the same spans */
  lk_traceparent first = f.sc.spans[0];
  lk_rand_fast_seeded(&rng, 42);
  fix_init(&f, steps, 2);
  f.pol.traceparent = &parent;
  f.pol.rng = &rng.base;
  assert_int_equal(fix_run(&f), LK_OK);
  assert_memory_equal(&f.sc.spans[0], &first, sizeof first);
}

static void test_invalid(void **state) {
  (void)state;
  fix f;
  static const step ok[] = {OK_STEP(1)};
  fix_init(&f, ok, 1);
  f.pol.deadline = 0;
  const char *why = NULL;
  assert_int_equal(lk_exec_policy_validate(&f.pol, &why), LK_ECONFIG);
  assert_non_null(why);
  assert_int_equal(fix_run(&f), LK_ECONFIG);
  assert_int_equal(f.res.err, LK_ECONFIG);
  assert_ptr_equal(f.res.timeline, f.tl);
  assert_int_equal(lk_exec_run(NULL, scripted, NULL, NULL, &f.res), LK_EINVAL);
  assert_int_equal(lk_exec_run(&f.pol, NULL, NULL, NULL, &f.res), LK_EINVAL);
  assert_int_equal(lk_exec_run(&f.pol, scripted, NULL, NULL, NULL), LK_EINVAL);
  /* a timeline shorter than the call: attempts are counted, only the first stored */
  static const step steps[] = {{LK_F_CONNECT_REFUSED, false, -1, 1}, OK_STEP(1)};
  fix_init(&f, steps, 2);
  f.res.timeline_cap = 1;
  assert_int_equal(fix_run(&f), LK_OK);
  assert_int_equal(f.res.attempts, 2);
  assert_int_equal(f.tl[1].number, 0);
}

/* A synchronous call with retries, protections and events allocates nothing (after the first
 * call has registered its failure kind's series). */
static void test_no_allocation(void **state) {
  (void)state;
  lk_metrics *m = lk_metrics_new();
  lk_call_metrics *cm = lk_call_metrics_new(m, "alloc");
  lk_budget_ratio_config rc;
  lk_budget_ratio_config_init_default(&rc);
  lk_budget *b = NULL;
  assert_int_equal(lk_budget_new_ratio(&rc, &b, NULL), LK_OK);
  lk_breaker_config bc;
  lk_breaker_config_init_default(&bc);
  lk_breaker *br = NULL;
  assert_int_equal(lk_breaker_new(&bc, &br, NULL), LK_OK);
  static const step steps[] = {{LK_F_CONNECT_REFUSED, false, -1, LK_MS(1)}, OK_STEP(1)};
  fix f;
  for (int i = 0; i < 2; i++) {
    fix_init(&f, steps, 2);
    f.pol.metrics = cm;
    f.pol.budget = b;
    f.pol.breaker = br;
    if (i == 1)
      lk_test_alloc_count_start();
    assert_int_equal(fix_run(&f), LK_OK);
    if (i == 1)
      assert_int_equal(lk_test_alloc_count_stop(), 0);
  }
  assert_int_equal(f.res.attempts, 2);
  lk_breaker_free(br);
  lk_budget_free(b);
  lk_call_metrics_free(cm);
  lk_metrics_free(m);
}

/* --- asynchronous calls: a scripted loop ------------------------------------------------- */

typedef struct aloop {
  lk_fake_clock *fc;
  int starts;
  int64_t timer; /* last armed delay; < 0 disarmed */
  int timers;
  lk_exec_call *call;
  bool fail_inside_start;
  bool done;
  lk_exec_result res;
  int expired;
  int wakes;
} aloop;

static void a_start(void *ctx, lk_exec_call *call, const lk_exec_attempt *a) {
  aloop *l = ctx;
  l->starts++;
  l->call = call;
  assert_int_equal(a->number, l->starts);
  if (l->fail_inside_start) {
    lk_exec_outcome o = {LK_F_CONNECT_REFUSED, false, -1};
    assert_int_equal(lk_exec_attempt_end(call, &o), LK_OK);
  }
}

static void a_timer(void *ctx, lk_exec_call *call, int64_t delay) {
  aloop *l = ctx;
  l->call = call;
  l->timer = delay;
  l->timers++;
}

static void a_expire(void *ctx, lk_exec_call *call) {
  aloop *l = ctx;
  l->expired++;
  lk_exec_outcome o = {LK_F_READ_TIMEOUT, true, -1};
  assert_int_equal(lk_exec_attempt_end(call, &o), LK_OK);
}

static void a_done(void *ud, const lk_exec_result *res) {
  aloop *l = ud;
  l->done = true;
  l->res = *res;
}

static void test_async(void **state) {
  (void)state;
  lk_fake_clock fc;
  lk_fake_clock_init(&fc, LK_SEC(5));
  lk_exec_policy p;
  lk_exec_policy_init_default(&p);
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  rc.backoff.jitter = LK_JITTER_NONE;
  lk_retry_policy_init(&p.retry, &rc, NULL);
  p.clock = &fc.base;
  evlog log = {.n = 0};
  p.on_event = on_event;
  p.event_ctx = &log;
  aloop l = {.fc = &fc, .timer = -2};
  lk_exec_loop loop = {a_start, a_timer, NULL, NULL, &l};
  lk_exec_attempt_info tl[4];
  lk_exec_call *call = NULL;
  assert_int_equal(lk_exec_start(&p, &loop, NULL, tl, 4, a_done, &l, &call), LK_OK);
  assert_non_null(call);
  assert_int_equal(l.starts, 0); /* nothing inside start but the timer */
  assert_int_equal(l.timer, 0);
  assert_int_equal(lk_exec_timer(call), LK_OK);
  assert_int_equal(l.starts, 1);
  lk_fake_clock_advance(&fc, LK_MS(10));
  lk_exec_outcome o = {LK_F_CONNECT_REFUSED, false, -1};
  assert_int_equal(lk_exec_attempt_end(call, &o), LK_OK);
  assert_int_equal(lk_exec_attempt_end(call, &o), LK_ESTATE); /* no attempt in progress */
  assert_int_equal(l.timer, LK_MS(200));
  /* early timer: re-armed for the rest */
  lk_fake_clock_advance(&fc, LK_MS(50));
  assert_int_equal(lk_exec_timer(call), LK_OK);
  assert_int_equal(l.starts, 1);
  assert_int_equal(l.timer, LK_MS(150));
  lk_fake_clock_advance(&fc, LK_MS(150));
  assert_int_equal(lk_exec_timer(call), LK_OK);
  assert_int_equal(l.starts, 2);
  lk_exec_outcome ok = {LK_F_NONE, true, -1};
  lk_fake_clock_advance(&fc, LK_MS(5));
  assert_int_equal(lk_exec_attempt_end(call, &ok), LK_OK);
  assert_true(l.done);
  assert_int_equal(l.timer, -1); /* disarmed before done */
  assert_int_equal(l.res.err, LK_OK);
  assert_int_equal(l.res.attempts, 2);
  assert_int_equal(l.res.elapsed, LK_MS(215));
  assert_int_equal(tl[1].start, LK_MS(210));
  assert_int_equal(count_ev(&log, LK_EV_RETRY_SCHEDULED), 1);
  assert_int_equal(log.ev[log.n - 1].type, LK_EV_CALL_END);

  /* an attempt that fails inside loop.start, and the expire hook at the attempt timeout */
  aloop l2 = {.fc = &fc, .timer = -2, .fail_inside_start = true};
  lk_exec_loop loop2 = {a_start, a_timer, a_expire, NULL, &l2};
  p.on_event = NULL;
  p.retry.cfg.max_attempts = 2;
  assert_int_equal(lk_exec_start(&p, &loop2, NULL, NULL, 0, a_done, &l2, &call), LK_OK);
  assert_int_equal(lk_exec_timer(call), LK_OK);
  assert_int_equal(l2.starts, 1);
  assert_int_equal(l2.timer, LK_MS(200)); /* the failure inside start scheduled the retry */
  lk_fake_clock_advance(&fc, LK_MS(200));
  l2.fail_inside_start = false;
  assert_int_equal(lk_exec_timer(call), LK_OK);
  assert_int_equal(l2.starts, 2);
  assert_int_equal(l2.timer, LK_MS(800)); /* armed for the attempt's end */
  lk_fake_clock_advance(&fc, LK_MS(800));
  assert_int_equal(lk_exec_timer(call), LK_OK);
  assert_int_equal(l2.expired, 1);
  assert_true(l2.done);
  /* a read timeout after sending may have run: not retried for a non-idempotent operation */
  assert_int_equal(l2.res.err, LK_ENOTRETRYABLE);
  assert_int_equal(l2.res.failure, LK_F_READ_TIMEOUT);

  /* abort while waiting */
  aloop l3 = {.fc = &fc, .timer = -2};
  lk_exec_loop loop3 = {a_start, a_timer, NULL, NULL, &l3};
  assert_int_equal(lk_exec_start(&p, &loop3, NULL, NULL, 0, a_done, &l3, &call), LK_OK);
  assert_int_equal(lk_exec_abort(call), LK_OK);
  assert_true(l3.done);
  assert_int_equal(l3.res.err, LK_ECANCELED);
  assert_int_equal(l3.starts, 0);

  assert_int_equal(lk_exec_start(&p, &loop3, NULL, NULL, 0, NULL, &l3, &call), LK_EINVAL);
  p.attempt_timeout = 0;
  assert_int_equal(lk_exec_start(&p, &loop3, NULL, NULL, 0, a_done, &l3, &call), LK_ECONFIG);
  assert_null(call);
}

static void a_wake(void *ctx, lk_exec_call *call) {
  aloop *l = ctx;
  assert_ptr_equal(call, l->call);
  l->wakes++;
}

/* An asynchronous call queued for a bulkhead slot is told through loop.wake when the slot is
 * handed over; a token fired while it waits ends it at its next step; an abort during an
 * attempt ends it when the attempt reports. */
static void test_async_bulkhead_cancel_abort(void **state) {
  (void)state;
  lk_fake_clock fc;
  lk_fake_clock_init(&fc, LK_SEC(5));
  lk_exec_policy p;
  lk_exec_policy_init_default(&p);
  p.clock = &fc.base;
  lk_bulkhead_config hc = {1, 4};
  lk_bulkhead *bh = NULL;
  assert_int_equal(lk_bulkhead_new(&hc, &bh, NULL), LK_OK);
  assert_int_equal(lk_bulkhead_try_acquire(bh), LK_OK);
  p.bulkhead = bh;
  p.pool_timeout = LK_MS(500);
  aloop l = {.fc = &fc, .timer = -2};
  lk_exec_loop loop = {a_start, a_timer, NULL, a_wake, &l};
  lk_exec_call *call = NULL;
  assert_int_equal(lk_exec_start(&p, &loop, NULL, NULL, 0, a_done, &l, &call), LK_OK);
  l.call = call;
  assert_int_equal(lk_exec_timer(call), LK_OK);
  assert_int_equal(l.starts, 0);
  assert_int_equal(l.timer, LK_MS(500)); /* queued: back at the end of pool_timeout */
  assert_int_equal(lk_bulkhead_queue_depth(bh), 1);
  lk_fake_clock_advance(&fc, LK_MS(20));
  lk_bulkhead_release(bh); /* hands the slot over: wake runs here */
  assert_int_equal(l.wakes, 1);
  assert_int_equal(lk_exec_timer(call), LK_OK);
  assert_int_equal(l.starts, 1);
  assert_int_equal(lk_bulkhead_in_use(bh), 1);
  lk_exec_outcome ok = {LK_F_NONE, true, -1};
  assert_int_equal(lk_exec_attempt_end(call, &ok), LK_OK);
  assert_true(l.done);
  assert_int_equal(l.res.err, LK_OK);
  assert_int_equal(lk_bulkhead_in_use(bh), 0);

  /* queued past pool_timeout: refused as POOL_TIMEOUT, nothing held */
  assert_int_equal(lk_bulkhead_try_acquire(bh), LK_OK);
  aloop l2 = {.fc = &fc, .timer = -2};
  loop.ctx = &l2;
  lk_exec_attempt_info tl[2];
  assert_int_equal(lk_exec_start(&p, &loop, NULL, tl, 2, a_done, &l2, &call), LK_OK);
  assert_int_equal(lk_exec_timer(call), LK_OK);
  lk_fake_clock_advance(&fc, LK_MS(500));
  assert_int_equal(lk_exec_timer(call), LK_OK);
  assert_true(l2.done);
  assert_int_equal(l2.res.err, LK_EBULKHEAD_FULL);
  assert_int_equal(l2.res.failure, LK_F_POOL_TIMEOUT);
  assert_true(tl[0].refused);
  assert_int_equal(lk_bulkhead_queue_depth(bh), 0);
  lk_bulkhead_release(bh);

  /* a token fired during the retry delay: the next step ends the call */
  p.bulkhead = NULL;
  lk_cancel *c = lk_cancel_new();
  aloop l3 = {.fc = &fc, .timer = -2};
  loop.ctx = &l3;
  assert_int_equal(lk_exec_start(&p, &loop, c, NULL, 0, a_done, &l3, &call), LK_OK);
  assert_int_equal(lk_exec_timer(call), LK_OK);
  lk_exec_outcome refused = {LK_F_CONNECT_REFUSED, false, -1};
  assert_int_equal(lk_exec_attempt_end(call, &refused), LK_OK);
  assert_false(l3.done);
  lk_cancel_fire(c);
  assert_int_equal(lk_exec_timer(call), LK_OK); /* early, but cancelled */
  assert_true(l3.done);
  assert_int_equal(l3.res.err, LK_ECANCELED);
  assert_int_equal(l3.starts, 1);
  lk_cancel_free(c);

  /* abort while an attempt runs: it ends when the attempt reports its failure */
  aloop l4 = {.fc = &fc, .timer = -2};
  loop.ctx = &l4;
  assert_int_equal(lk_exec_start(&p, &loop, NULL, NULL, 0, a_done, &l4, &call), LK_OK);
  assert_int_equal(lk_exec_timer(call), LK_OK);
  assert_int_equal(lk_exec_abort(call), LK_OK);
  assert_false(l4.done);
  assert_int_equal(lk_exec_attempt_end(call, &refused), LK_OK);
  assert_true(l4.done);
  assert_int_equal(l4.res.err, LK_ECANCELED);
  assert_int_equal(l4.res.failure, LK_F_CANCELLED);
  lk_bulkhead_free(bh);
}

/* An adaptive limit (adaptive.h) fed by the executor: it falls while the operation is slower
 * than its latency target and climbs back once it is fast, and an attached bulkhead's max
 * follows it. Fed detached from the bulkhead: these sequential calls hold a single slot, and a
 * limit that is not in use learns nothing from them, neither up nor down. */
static void test_adaptive_limit_follows_latency(void **state) {
  (void)state;
  enum { SLOW = 40, FAST = 120 };
  static step steps[SLOW + FAST];
  for (int i = 0; i < SLOW + FAST; i++)
    steps[i] = (step){LK_F_NONE, true, -1, i < SLOW ? LK_MS(40) : LK_MS(5)};
  static fix f;
  fix_init(&f, steps, SLOW + FAST);
  f.pol.on_event = NULL;
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
  f.pol.adaptive = ad;
  for (int i = 0; i < SLOW; i++)
    assert_int_equal(fix_run(&f), LK_OK);
  int64_t low = lk_adaptive_limit(ad);
  assert_true(low <= 2);
  assert_int_equal(lk_adaptive_attach(ad, b), LK_OK);
  assert_int_equal(lk_bulkhead_max(b), low);
  lk_adaptive_attach(ad, NULL);
  for (int i = 0; i < FAST; i++)
    assert_int_equal(fix_run(&f), LK_OK);
  int64_t high = lk_adaptive_limit(ad);
  assert_int_equal(lk_adaptive_attach(ad, b), LK_OK);
  printf("# limit %lld after the slow calls, %lld after the fast ones (from 16)\n",
         (long long)low, (long long)high);
  assert_true(high >= 12);
  assert_int_equal(lk_bulkhead_max(b), high);
  lk_adaptive_attach(ad, NULL);
  lk_adaptive_free(ad);
  lk_bulkhead_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_success_first_attempt),
      cmocka_unit_test(test_retries_not_sent_with_backoff),
      cmocka_unit_test(test_server_error_after_send),
      cmocka_unit_test(test_retry_after_and_exhaustion),
      cmocka_unit_test(test_deadline_bounds_everything),
      cmocka_unit_test(test_budget_refusal),
      cmocka_unit_test(test_breaker_opens_and_refuses),
      cmocka_unit_test(test_breaker_wait_for_probe),
      cmocka_unit_test(test_bulkhead_full_and_limiter_wait),
      cmocka_unit_test(test_fallback),
      cmocka_unit_test(test_cancel),
      cmocka_unit_test(test_traceparent_per_attempt),
      cmocka_unit_test(test_invalid),
      cmocka_unit_test(test_no_allocation),
      cmocka_unit_test(test_async),
      cmocka_unit_test(test_async_bulkhead_cancel_abort),
      cmocka_unit_test(test_adaptive_limit_follows_latency),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
