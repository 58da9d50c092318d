/* SPDX-License-Identifier: MIT */
/* The executor's contract at its edges, as a caller integrating it (and one trying to break it)
 * would test it: invalid arguments and policies, saturating extremes, out-of-range outcomes,
 * Retry-After against the deadline, deadline accounting over random policies, cancellation at
 * every point, the fallback, and callbacks that call back into the call or misbehave. Fake clock
 * and fake sleep throughout, so every bound is exact; run under ASan+UBSan for the "never a
 * crash, never UB, nothing leaked" half of each promise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <linkd/linkd.h>

#include "exec_fixture.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- the fixture (exec_fixture.h): attempts past the script repeat its last step -------- */

static void cfix_init(fix *f, const step *steps, int n) {
  fix_init(f, steps, n);
  f->sc.repeat_last = true;
}
#define REFUSED                                                                                    \
  { LK_F_CONNECT_REFUSED, false, -1, LK_MS(1) }

static int64_t sat_add(int64_t a, int64_t b) {
  if (b > 0 && a > INT64_MAX - b)
    return INT64_MAX;
  if (b < 0 && a < INT64_MIN - b)
    return INT64_MIN;
  return a + b;
}
#define OK_STEP                                                                                    \
  { LK_F_NONE, true, -1, LK_MS(1) }

/* --- invalid arguments ------------------------------------------------------------------- */

static void a_start_nop(void *ctx, lk_exec_call *call, const lk_exec_attempt *a) {
  (void)ctx, (void)call, (void)a;
}
static void a_timer_nop(void *ctx, lk_exec_call *call, int64_t delay) {
  (void)ctx, (void)call, (void)delay;
}
static void a_done_nop(void *ud, const lk_exec_result *res) { (void)ud, (void)res; }

static void test_null_arguments(void **state) {
  (void)state;
  static const step ok[] = {OK_STEP};
  fix f;
  cfix_init(&f, ok, 1);
  /* lk_exec_run: a clear error, *res filled (its timeline pointers kept), nothing run */
  memset(f.res.stop, 'x', sizeof f.res.stop);
  f.res.attempts = 99;
  assert_int_equal(lk_exec_run(NULL, scripted, &f.sc, NULL, &f.res), LK_EINVAL);
  assert_int_equal(f.res.err, LK_EINVAL);
  assert_int_equal(f.res.attempts, 0);
  assert_ptr_equal(f.res.timeline, f.tl);
  assert_int_equal(f.res.timeline_cap, 8);
  assert_string_equal(f.res.stop, "policy is NULL");
  assert_int_equal(lk_exec_run(&f.pol, NULL, NULL, NULL, &f.res), LK_EINVAL);
  assert_string_equal(f.res.stop, "attempt function is NULL");
  assert_int_equal(lk_exec_run(&f.pol, scripted, &f.sc, NULL, NULL), LK_EINVAL);
  assert_int_equal(f.sc.calls, 0);
  assert_int_equal(f.log.n, 0); /* no event for a call that did not start */

  /* lk_exec_start: every required pointer */
  lk_exec_loop loop = {a_start_nop, a_timer_nop, NULL, NULL, NULL};
  lk_exec_call *call = (lk_exec_call *)&loop; /* set to NULL on failure */
  assert_int_equal(lk_exec_start(NULL, &loop, NULL, NULL, 0, a_done_nop, NULL, &call), LK_EINVAL);
  assert_null(call);
  assert_int_equal(lk_exec_start(&f.pol, NULL, NULL, NULL, 0, a_done_nop, NULL, &call), LK_EINVAL);
  assert_int_equal(lk_exec_start(&f.pol, &loop, NULL, NULL, 0, NULL, NULL, &call), LK_EINVAL);
  loop.start = NULL;
  assert_int_equal(lk_exec_start(&f.pol, &loop, NULL, NULL, 0, a_done_nop, NULL, &call), LK_EINVAL);
  loop.start = a_start_nop;
  loop.timer = NULL;
  assert_int_equal(lk_exec_start(&f.pol, &loop, NULL, NULL, 0, a_done_nop, NULL, &call), LK_EINVAL);
  assert_null(call);
  lk_exec_outcome o = {LK_F_NONE, true, -1};
  assert_int_equal(lk_exec_attempt_end(NULL, &o), LK_EINVAL);
  assert_int_equal(lk_exec_timer(NULL), LK_EINVAL);
  assert_int_equal(lk_exec_abort(NULL), LK_EINVAL);

  /* an asynchronous call given a NULL outcome: refused, the call is unchanged */
  loop.timer = a_timer_nop;
  assert_int_equal(lk_exec_start(&f.pol, &loop, NULL, NULL, 0, a_done_nop, NULL, &call), LK_OK);
  assert_int_equal(lk_exec_timer(call), LK_OK); /* the attempt starts */
  assert_int_equal(lk_exec_attempt_end(call, NULL), LK_EINVAL);
  assert_int_equal(lk_exec_attempt_end(call, &o), LK_OK); /* ends and frees it */

  /* the token and the policy helpers */
  lk_cancel_fire(NULL);
  assert_false(lk_cancel_fired(NULL));
  lk_cancel_free(NULL);
  lk_exec_policy_init_default(NULL);
  const char *why = NULL;
  assert_int_equal(lk_exec_policy_validate(NULL, &why), LK_ECONFIG);
  assert_non_null(why);
  assert_int_equal(lk_exec_policy_validate(NULL, NULL), LK_ECONFIG);
}

/* Every invalid policy is LK_ECONFIG from validate, lk_exec_run (the reason in res.stop, the
 * operation never called, no fallback) and lk_exec_start (no call). The retry config counts:
 * it is a plain field a caller may edit after lk_retry_policy_init, or never initialise. */
typedef void (*spoil_fn)(lk_exec_policy *p);
static void bad_deadline_zero(lk_exec_policy *p) { p->deadline = 0; }
static void bad_deadline_neg(lk_exec_policy *p) { p->deadline = -LK_SEC(1); }
static void bad_deadline_min(lk_exec_policy *p) { p->deadline = INT64_MIN; }
static void bad_timeout_zero(lk_exec_policy *p) { p->attempt_timeout = 0; }
static void bad_timeout_neg(lk_exec_policy *p) { p->attempt_timeout = -1; }
static void bad_pool_neg(lk_exec_policy *p) { p->pool_timeout = -1; }
static void bad_attempts_zero(lk_exec_policy *p) { p->retry.cfg.max_attempts = 0; }
static void bad_attempts_neg(lk_exec_policy *p) { p->retry.cfg.max_attempts = INT_MIN; }
static void bad_resolution(lk_exec_policy *p) { p->retry.cfg.backoff.resolution = 0; }
static void bad_base(lk_exec_policy *p) { p->retry.cfg.backoff.base = 0; }
static void bad_max(lk_exec_policy *p) { p->retry.cfg.backoff.max = 1; }
static void bad_multiplier(lk_exec_policy *p) { p->retry.cfg.backoff.multiplier = NAN; }
static void bad_ratio(lk_exec_policy *p) { p->retry.cfg.backoff.ratio = 2.0; }
static void bad_jitter(lk_exec_policy *p) { p->retry.cfg.backoff.jitter = (lk_jitter_kind)99; }
static void bad_kind(lk_exec_policy *p) { p->retry.cfg.backoff.kind = (lk_backoff_kind)-1; }
static void bad_ra_cap(lk_exec_policy *p) { p->retry.cfg.retry_after_cap = -1; }
static void bad_min_attempt(lk_exec_policy *p) { p->retry.cfg.min_attempt = INT64_MIN; }
static void bad_backoff_zeroed(lk_exec_policy *p) { /* max_attempts set by hand, nothing else */
  memset(&p->retry, 0, sizeof p->retry);
  p->retry.cfg.max_attempts = 3;
}

static int fb_count;
static int count_fallback(void *ctx, const lk_exec_result *r) {
  (void)ctx, (void)r;
  fb_count++;
  return LK_ENOTFOUND;
}

static void test_invalid_policies(void **state) {
  (void)state;
  static const spoil_fn bad[] = {
      bad_deadline_zero, bad_deadline_neg,  bad_deadline_min,  bad_timeout_zero, bad_timeout_neg,
      bad_pool_neg,      bad_attempts_zero, bad_attempts_neg,  bad_resolution,   bad_base,
      bad_max,           bad_multiplier,    bad_ratio,         bad_jitter,       bad_kind,
      bad_ra_cap,        bad_min_attempt,   bad_backoff_zeroed};
  /* the attempt fails and would be retried: a bad backoff would be computed */
  static const step steps[] = {REFUSED, REFUSED};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    fix f;
    cfix_init(&f, steps, 2);
    f.pol.fallback = count_fallback;
    fb_count = 0;
    bad[i](&f.pol);
    const char *why = NULL;
    assert_int_equal(lk_exec_policy_validate(&f.pol, &why), LK_ECONFIG);
    assert_non_null(why);
    assert_int_equal(fix_run_cancel(&f, NULL), LK_ECONFIG);
    assert_int_equal(f.res.err, LK_ECONFIG);
    assert_string_equal(f.res.stop, why); /* the caller learns which field */
    assert_int_equal(f.sc.calls, 0);
    assert_int_equal(fb_count, 0);
    assert_int_equal(f.log.n, 0);
    lk_exec_loop loop = {a_start_nop, a_timer_nop, NULL, NULL, NULL};
    lk_exec_call *call = NULL;
    assert_int_equal(lk_exec_start(&f.pol, &loop, NULL, NULL, 0, a_done_nop, NULL, &call),
                     LK_ECONFIG);
    assert_null(call);
  }
  /* a policy never initialised at all */
  lk_exec_policy zero;
  memset(&zero, 0, sizeof zero);
  assert_int_equal(lk_exec_policy_validate(&zero, NULL), LK_ECONFIG);
  /* the defaults are valid */
  lk_exec_policy_init_default(&zero);
  assert_int_equal(lk_exec_policy_validate(&zero, NULL), LK_OK);
}

/* --- extremes saturate ----------------------------------------------------------------------- */

static void check_delays(const evlog *l, int64_t deadline_rel) {
  for (int i = 0; i < l->n; i++) {
    const lk_event *e = &l->ev[i];
    assert_true(e->at >= 0);
    if (i > 0)
      assert_true(e->at >= l->ev[i - 1].at);
    if (e->type == LK_EV_RETRY_SCHEDULED) {
      assert_true(e->u.retry.delay >= 0);
      assert_true(sat_add(e->at, e->u.retry.delay) < deadline_rel);
    }
    if (e->type == LK_EV_ATTEMPT_START) {
      assert_true(e->u.attempt_start.timeout > 0);
      assert_true(e->u.attempt_start.timeout <= e->u.attempt_start.remaining);
    }
  }
}

static void test_extremes_saturate(void **state) {
  (void)state;
  /* a backoff whose exponential overflows every type: the delay saturates at max (INT64_MAX),
   * never negative, and a delay past the deadline ends the call at once */
  static const step steps[] = {REFUSED, REFUSED, REFUSED};
  fix f;
  cfix_init(&f, steps, 3);
  lk_retry_config rc = f.pol.retry.cfg;
  rc.max_attempts = INT_MAX;
  rc.backoff.base = LK_SEC(1);
  rc.backoff.max = INT64_MAX;
  rc.backoff.multiplier = 1e300;
  rc.backoff.resolution = 1;
  assert_int_equal(lk_retry_policy_init(&f.pol.retry, &rc, NULL), LK_OK);
  f.pol.deadline = INT64_MAX; /* saturates: no deadline */
  f.pol.attempt_timeout = INT64_MAX;
  assert_int_equal(fix_run_cancel(&f, NULL), LK_EDEADLINE);
  assert_int_equal(f.sc.calls, 2); /* 1 s, then 1e300 s: more than is left of time itself */
  assert_true(f.tl[0].decision.delay == LK_SEC(1));
  assert_int_equal(f.tl[1].decision.reason, LK_REASON_DELAY_TOO_LONG);
  assert_int_equal(f.tl[1].decision.computed, INT64_MAX);
  assert_true(f.sc.last.timeout > 0 && f.sc.last.remaining > 0);
  assert_true(f.sc.last.end_at > T0); /* saturated, not wrapped */
  check_delays(&f.log, INT64_MAX);

  /* every kind of backoff and jitter at INT64_MAX: still never negative */
  for (int kind = LK_BACKOFF_FIXED; kind <= LK_BACKOFF_EXPONENTIAL; kind++)
    for (int j = LK_JITTER_NONE; j <= LK_JITTER_DECORRELATED; j++) {
      lk_rand_fast rng;
      lk_rand_fast_seeded(&rng, (uint64_t)(kind * 10 + j));
      cfix_init(&f, steps, 3);
      rc = f.pol.retry.cfg;
      rc.backoff.kind = (lk_backoff_kind)kind;
      rc.backoff.jitter = (lk_jitter_kind)j;
      rc.backoff.base = INT64_MAX / 2;
      rc.backoff.max = INT64_MAX;
      rc.backoff.resolution = 1;
      rc.backoff.multiplier = 3.0;
      rc.max_attempts = INT_MAX;
      assert_int_equal(lk_retry_policy_init(&f.pol.retry, &rc, NULL), LK_OK);
      f.pol.rng = &rng.base;
      f.pol.deadline = INT64_MAX;
      int err = fix_run_cancel(&f, NULL);
      assert_true(err == LK_EDEADLINE || err == LK_OK);
      check_delays(&f.log, INT64_MAX);
    }

  /* max_attempts INT_MAX with attempts of 1 ms and delays of 1 ms: the deadline ends it */
  cfix_init(&f, steps, 1);
  rc = f.pol.retry.cfg;
  rc.max_attempts = INT_MAX;
  rc.backoff.kind = LK_BACKOFF_FIXED;
  rc.backoff.base = rc.backoff.max = LK_MS(1);
  assert_int_equal(lk_retry_policy_init(&f.pol.retry, &rc, NULL), LK_OK);
  f.pol.deadline = LK_MS(100);
  f.pol.on_event = NULL;
  assert_int_equal(fix_run_cancel(&f, NULL), LK_EDEADLINE);
  assert_int_equal(f.sc.calls, 50);
  assert_int_equal(f.res.attempts, 50);
  assert_true(f.res.elapsed <= LK_MS(100));

  /* an absolute deadline at the bottom of time, and pool_timeout at the top */
  cfix_init(&f, steps, 1);
  f.pol.deadline_at.at = INT64_MIN;
  assert_int_equal(fix_run_cancel(&f, NULL), LK_EDEADLINE);
  assert_int_equal(f.sc.calls, 0);
  assert_int_equal(f.res.elapsed, 0);
  lk_bulkhead_config hc = {1, 1};
  lk_bulkhead *bh = NULL;
  assert_int_equal(lk_bulkhead_new(&hc, &bh, NULL), LK_OK);
  static const step ok[] = {OK_STEP};
  cfix_init(&f, ok, 1);
  f.pol.bulkhead = bh;
  f.pol.pool_timeout = INT64_MAX;
  assert_int_equal(fix_run_cancel(&f, NULL), LK_OK);
  assert_int_equal(lk_bulkhead_in_use(bh), 0);
  lk_bulkhead_free(bh);
}

/* --- what the operation reports ------------------------------------------------------------ */

static void test_out_of_range_outcome(void **state) {
  (void)state;
  /* kinds outside the enum count as TRANSPORT_ERROR (sent: the most cautious failure); negative
   * Retry-After values as none; an operation that fills nothing likewise */
  static const int bad_kinds[] = {-1, INT_MIN, LK_F__COUNT, LK_F__COUNT + 1, INT_MAX};
  lk_breaker_config bc;
  lk_breaker_config_init_default(&bc);
  lk_breaker *br = NULL;
  assert_int_equal(lk_breaker_new(&bc, &br, NULL), LK_OK);
  lk_metrics *m = lk_metrics_new();
  lk_call_metrics *cm = lk_call_metrics_new(m, "oor");
  for (size_t i = 0; i < sizeof bad_kinds / sizeof bad_kinds[0]; i++) {
    step steps[] = {{(lk_failure)bad_kinds[i], false, INT64_MIN, LK_MS(1)}, OK_STEP};
    fix f;
    cfix_init(&f, steps, 2);
    f.pol.breaker = br;
    f.pol.metrics = cm;
    assert_int_equal(fix_run_cancel(&f, NULL),
                     LK_ENOTRETRYABLE); /* treated as sent, whatever it said */
    assert_true(f.tl[0].sent);
    assert_int_equal(f.res.failure, LK_F_TRANSPORT_ERROR);
    assert_int_equal(f.tl[0].failure, LK_F_TRANSPORT_ERROR);
    assert_int_equal(f.tl[0].retry_after, -1);
    assert_string_equal(f.res.stop, "not retryable: TRANSPORT_ERROR");
    assert_int_equal(f.log.ev[2].u.attempt_end.failure, LK_F_TRANSPORT_ERROR);
    /* an idempotent operation retries it */
    cfix_init(&f, steps, 2);
    f.pol.idempotent = true;
    assert_int_equal(fix_run_cancel(&f, NULL), LK_OK);
    assert_int_equal(f.res.attempts, 2);
  }
  lk_breaker_metrics bm;
  assert_int_equal(lk_breaker_metrics_get(br, T0, &bm), LK_OK);
  assert_int_equal(bm.failed, 5); /* recorded as the transport errors they count as */

  static const step any[] = {OK_STEP};
  fix f;
  cfix_init(&f, any, 1);
  f.sc.fill_nothing = true;
  assert_int_equal(fix_run_cancel(&f, NULL), LK_ENOTRETRYABLE);
  assert_int_equal(f.res.failure, LK_F_TRANSPORT_ERROR);
  assert_true(f.tl[0].sent);
  lk_call_metrics_free(cm);
  lk_metrics_free(m);
  lk_breaker_free(br);
}

/* Kinds that only the executor should produce, reported by the operation: DEADLINE_EXCEEDED ends
 * the call as LK_EDEADLINE, the other TERMINAL kinds as LK_ENOTRETRYABLE (never retried, never
 * held against the breaker). */
static void test_terminal_kinds_from_operation(void **state) {
  (void)state;
  lk_breaker_config bc;
  lk_breaker_config_init_default(&bc);
  lk_breaker *br = NULL;
  assert_int_equal(lk_breaker_new(&bc, &br, NULL), LK_OK);
  static const lk_failure kinds[] = {LK_F_CANCELLED, LK_F_BREAKER_OPEN, LK_F_BUDGET_EXHAUSTED,
                                     LK_F_RATE_LIMITED, LK_F_BULKHEAD_FULL};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    step steps[] = {{kinds[i], false, -1, LK_MS(1)}, OK_STEP};
    fix f;
    cfix_init(&f, steps, 2);
    f.pol.idempotent = true;
    f.pol.breaker = br;
    assert_int_equal(fix_run_cancel(&f, NULL), LK_ENOTRETRYABLE);
    assert_int_equal(f.sc.calls, 1);
    assert_int_equal(f.res.failure, kinds[i]);
  }
  lk_breaker_metrics bm;
  assert_int_equal(lk_breaker_metrics_get(br, T0, &bm), LK_OK);
  assert_int_equal(bm.failed, 0); /* ignored kinds */
  step dl[] = {{LK_F_DEADLINE_EXCEEDED, false, -1, LK_MS(1)}, OK_STEP};
  fix f;
  cfix_init(&f, dl, 2);
  assert_int_equal(fix_run_cancel(&f, NULL), LK_EDEADLINE);
  assert_int_equal(f.sc.calls, 1);
  lk_breaker_free(br);
}

/* A Retry-After hint is honoured up to retry_after_cap and never past the deadline: a hint that
 * does not fit ends the call at once (no wait), as LK_EDEADLINE. */
static void test_retry_after_capped(void **state) {
  (void)state;
  static const step long_ra[] = {{LK_F_TOO_MANY_REQUESTS, true, LK_SEC(5), LK_MS(10)}, OK_STEP};
  fix f;
  cfix_init(&f, long_ra, 2);
  assert_int_equal(fix_run_cancel(&f, NULL), LK_EDEADLINE); /* 5 s hint, 3 s deadline */
  assert_int_equal(f.sc.calls, 1);
  assert_int_equal(f.sl.calls, 0); /* did not sleep toward it */
  assert_int_equal(f.res.elapsed, LK_MS(10));
  assert_int_equal(f.tl[0].decision.reason, LK_REASON_DELAY_TOO_LONG);
  assert_int_equal(f.tl[0].decision.computed, LK_SEC(5));
  assert_string_equal(f.res.stop, "Retry-After 5000ms >= remaining 2990ms");

  /* INT64_MAX hint with an uncapped policy and no deadline: capped by nothing but time itself */
  static const step max_ra[] = {{LK_F_TOO_MANY_REQUESTS, true, INT64_MAX, LK_MS(10)}, OK_STEP};
  cfix_init(&f, max_ra, 2);
  lk_retry_config rc = f.pol.retry.cfg;
  rc.retry_after_cap = INT64_MAX;
  assert_int_equal(lk_retry_policy_init(&f.pol.retry, &rc, NULL), LK_OK);
  f.pol.deadline = INT64_MAX;
  assert_int_equal(fix_run_cancel(&f, NULL), LK_EDEADLINE);
  assert_int_equal(f.sl.calls, 0);

  /* a hint past the cap is cut to it */
  cfix_init(&f, max_ra, 2);
  rc = f.pol.retry.cfg;
  rc.retry_after_cap = LK_SEC(1);
  assert_int_equal(lk_retry_policy_init(&f.pol.retry, &rc, NULL), LK_OK);
  assert_int_equal(fix_run_cancel(&f, NULL), LK_OK);
  assert_int_equal(f.tl[0].decision.delay, LK_SEC(1));
  assert_true(f.tl[0].decision.from_retry_after);
  assert_int_equal(f.tl[1].start, LK_MS(10) + LK_SEC(1));

  /* a hint that fits is waited for, exactly; one that is not honoured is not */
  static const step fits[] = {{LK_F_TOO_MANY_REQUESTS, true, LK_MS(1500), LK_MS(10)}, OK_STEP};
  cfix_init(&f, fits, 2);
  assert_int_equal(fix_run_cancel(&f, NULL), LK_OK);
  assert_int_equal(f.tl[1].start, LK_MS(1510));
  cfix_init(&f, fits, 2);
  rc = f.pol.retry.cfg;
  rc.honor_retry_after = false;
  assert_int_equal(lk_retry_policy_init(&f.pol.retry, &rc, NULL), LK_OK);
  assert_int_equal(fix_run_cancel(&f, NULL), LK_OK);
  assert_int_equal(f.tl[1].start, LK_MS(210));
}

/* --- deadline accounting over random policies ------------------------------------------------ */

static uint64_t draw(lk_rand *r, uint64_t n) { return lk_rand_below(r, n); }

/* ns on a log scale from 1 ns to about 2^33 ns (8.6 s) */
static int64_t draw_ns(lk_rand *r) { return (int64_t)1 << draw(r, 34) | (int64_t)draw(r, 1000); }

typedef struct rand_op {
  lk_fake_clock *fc;
  lk_rand *rng;
  int calls, max_calls;
  int64_t deadline_at; /* absolute */
  int64_t cap;
} rand_op;

static void random_attempt(void *ctx, const lk_exec_attempt *a, lk_exec_outcome *out) {
  rand_op *o = ctx;
  o->calls++;
  /* the executor's side of the promise: a timeout within the deadline and the cap */
  assert_true(a->timeout > 0);
  assert_true(a->timeout <= o->cap);
  assert_true(a->timeout <= a->remaining);
  assert_true(a->end_at <= o->deadline_at);
  assert_int_equal(a->end_at - a->timeout, o->fc->base.now(&o->fc->base));
  /* the operation's side: it keeps to its timeout */
  lk_fake_clock_advance(o->fc, (int64_t)draw(o->rng, (uint64_t)a->timeout + 1));
  out->failure = o->calls >= o->max_calls ? LK_F_NONE : (lk_failure)((int)draw(o->rng, 44) - 3);
  out->sent = draw(o->rng, 2);
  switch (draw(o->rng, 5)) {
  case 0: out->retry_after = -1; break;
  case 1: out->retry_after = INT64_MIN; break;
  case 2: out->retry_after = INT64_MAX; break;
  default: out->retry_after = draw_ns(o->rng); break;
  }
}

static void test_deadline_property(void **state) {
  (void)state;
  lk_rand_fast gen, jit;
  lk_rand_fast_seeded(&gen, 20240601);
  lk_rand_fast_seeded(&jit, 7);
  lk_rand *g = &gen.base;
  int by_err[32] = {0};
  for (int iter = 0; iter < 3000; iter++) {
    fix f;
    cfix_init(&f, NULL, 0);
    lk_retry_config rc;
    lk_retry_config_init_default(&rc);
    rc.max_attempts = draw(g, 8) == 0 ? INT_MAX : 1 + (int)draw(g, 12);
    rc.backoff.kind = (lk_backoff_kind)draw(g, 3);
    rc.backoff.jitter = (lk_jitter_kind)draw(g, 5);
    rc.backoff.resolution = draw(g, 2) ? LK_MS(1) : 1 + (int64_t)draw(g, 1000);
    rc.backoff.base = rc.backoff.resolution + draw_ns(g);
    rc.backoff.max = draw(g, 4) == 0 ? INT64_MAX : rc.backoff.base + draw_ns(g);
    rc.backoff.multiplier = draw(g, 4) == 0 ? 1e300 : 1.0 + (double)draw(g, 40) / 10.0;
    rc.backoff.ratio = (double)draw(g, 11) / 10.0;
    rc.honor_retry_after = draw(g, 2);
    rc.retry_after_cap = draw(g, 4) == 0 ? INT64_MAX : draw_ns(g);
    rc.min_attempt = draw(g, 2) ? 0 : draw_ns(g);
    assert_int_equal(lk_retry_policy_init(&f.pol.retry, &rc, NULL), LK_OK);
    f.pol.rng = &jit.base;
    f.pol.deadline = draw(g, 16) == 0 ? INT64_MAX : draw_ns(g);
    if (draw(g, 4) == 0) /* an inherited deadline, maybe already past */
      f.pol.deadline_at.at = T0 - LK_SEC(1) + draw_ns(g);
    f.pol.attempt_timeout = draw(g, 8) == 0 ? INT64_MAX : draw_ns(g);
    f.pol.idempotent = draw(g, 2);
    lk_limiter *lim = NULL;
    if (draw(g, 4) == 0) {
      lk_limiter_config lc = {1.0 + (double)draw(g, 1000), 1};
      assert_int_equal(lk_limiter_new(&lc, &lim, NULL), LK_OK);
      assert_int_equal(lk_limiter_try_acquire(lim, T0), LK_OK); /* the next token is later */
      f.pol.limiter = lim;
    }
    int64_t deadline = sat_add(T0, f.pol.deadline);
    if (f.pol.deadline_at.at < deadline)
      deadline = f.pol.deadline_at.at;
    rand_op o = {&f.fc, g, 0, 40, deadline, f.pol.attempt_timeout};
    int err = lk_exec_run(&f.pol, random_attempt, &o, NULL, &f.res);
    assert_int_equal(err, f.res.err);
    assert_true(err <= 0 && -err < 32);
    by_err[-err]++;
    /* the promise: with attempts that keep to their timeouts, never past the deadline */
    int64_t rel = sat_add(deadline, -T0);
    assert_true(f.res.elapsed >= 0);
    assert_true(f.res.elapsed <= (rel > 0 ? rel : 0));
    assert_true(o.calls <= rc.max_attempts);
    assert_true(f.res.attempts >= o.calls && f.res.attempts <= o.calls + 1);
    check_delays(&f.log, rel);
    assert_int_equal(count_ev(&f.log, LK_EV_ATTEMPT_START), o.calls);
    assert_int_equal(count_ev(&f.log, LK_EV_ATTEMPT_END), f.res.attempts);
    assert_int_equal(count_ev(&f.log, LK_EV_CALL_END), 1);
    assert_int_equal(f.log.ev[f.log.n - 1].type, LK_EV_CALL_END);
    for (int i = 0; i < f.res.attempts && i < 8; i++) {
      assert_true(f.tl[i].duration >= 0);
      assert_true(f.tl[i].start + f.tl[i].duration <= f.res.elapsed);
    }
    lk_limiter_free(lim);
  }
  printf("# OK %d, EDEADLINE %d, EATTEMPTS %d, ENOTRETRYABLE %d, ERATE_LIMITED %d\n", by_err[0],
         by_err[-LK_EDEADLINE], by_err[-LK_EATTEMPTS], by_err[-LK_ENOTRETRYABLE],
         by_err[-LK_ERATE_LIMITED]);
  assert_true(by_err[0] > 0 && by_err[-LK_EDEADLINE] > 0 && by_err[-LK_EATTEMPTS] > 0);
}

/* An operation that blocks past its timeout cannot be stopped by a synchronous call: the call
 * ends as soon as it returns, with no attempt after the deadline, so elapsed exceeds the
 * deadline by that attempt's overrun and nothing else. */
static void test_overrun_attempt(void **state) {
  (void)state;
  static const step slow_fail[] = {{LK_F_CONNECT_TIMEOUT, false, -1, LK_SEC(2)}, OK_STEP};
  fix f;
  cfix_init(&f, slow_fail, 2);
  f.pol.deadline = LK_SEC(1);
  assert_int_equal(fix_run_cancel(&f, NULL), LK_EDEADLINE);
  assert_int_equal(f.sc.calls, 1);
  assert_int_equal(f.sc.last.timeout, LK_MS(800));
  assert_int_equal(f.res.elapsed, LK_SEC(2));
  assert_int_equal(f.tl[0].duration, LK_SEC(2)); /* recorded as it was */
  assert_int_equal(f.tl[0].decision.reason, LK_REASON_DEADLINE);
  assert_int_equal(f.sl.calls, 0);
  /* a success that comes late is still a success */
  static const step slow_ok[] = {{LK_F_NONE, true, -1, LK_SEC(2)}};
  cfix_init(&f, slow_ok, 1);
  f.pol.deadline = LK_SEC(1);
  assert_int_equal(fix_run_cancel(&f, NULL), LK_OK);
  assert_int_equal(f.res.elapsed, LK_SEC(2));
  /* an overrun that leaves time: the next attempt gets what is left, the total stays bounded */
  static const step over[] = {{LK_F_CONNECT_TIMEOUT, false, -1, LK_MS(1500)},
                              {LK_F_CONNECT_TIMEOUT, false, -1, LK_MS(1300)}};
  cfix_init(&f, over, 2);
  assert_int_equal(fix_run_cancel(&f, NULL), LK_EDEADLINE);
  assert_int_equal(f.sc.calls, 2);
  assert_int_equal(f.sc.last.timeout, LK_MS(800));
  assert_int_equal(f.res.elapsed, LK_MS(1500 + 200 + 1300)); /* = the deadline */
}

/* --- cancellation ----------------------------------------------------------------------------- */

typedef struct fb_rec {
  int calls, err, attempts, answer;
  lk_failure failure;
} fb_rec;

static int record_fallback(void *ctx, const lk_exec_result *r) {
  fb_rec *c = ctx;
  c->calls++;
  c->err = r->err;
  c->failure = r->failure;
  c->attempts = r->attempts;
  return c->answer;
}

static void test_cancel_points(void **state) {
  (void)state;
  static const step steps[] = {REFUSED, REFUSED, OK_STEP};
  fix f;
  fb_rec fb = {0, 0, 0, LK_ENOTFOUND, LK_F_NONE};

  /* before the start: nothing runs; the fallback still hears of it (cancellation is a failure
   * for good, as for HTTP calls) */
  lk_cancel *c = lk_cancel_new();
  lk_cancel_fire(c);
  lk_cancel_fire(c); /* twice: idempotent */
  assert_true(lk_cancel_fired(c));
  cfix_init(&f, steps, 3);
  f.pol.fallback = record_fallback;
  f.pol.fallback_ctx = &fb;
  assert_int_equal(fix_run_cancel(&f, c), LK_ECANCELED);
  assert_int_equal(f.sc.calls, 0);
  assert_int_equal(f.res.attempts, 0);
  assert_int_equal(f.res.failure, LK_F_CANCELLED);
  assert_string_equal(f.res.stop, "cancelled");
  assert_int_equal(fb.calls, 1);
  assert_int_equal(fb.err, LK_ECANCELED);
  assert_int_equal(f.res.fallback_err, LK_ENOTFOUND);
  assert_int_equal(f.log.ev[0].type, LK_EV_CALL_START);
  assert_int_equal(f.log.ev[1].type, LK_EV_CALL_END);
  assert_int_equal(f.log.n, 2);
  /* the same fired token again: the same answer (a token does not reset) */
  cfix_init(&f, steps, 3);
  assert_int_equal(fix_run_cancel(&f, c), LK_ECANCELED);
  lk_cancel_free(c);

  /* during an attempt that then fails: the call ends after it, with every protection given back
   * and nothing held against the server (the breaker and budget hear nothing) */
  lk_breaker_config bc;
  lk_breaker_config_init_default(&bc);
  lk_breaker *br = NULL;
  assert_int_equal(lk_breaker_new(&bc, &br, NULL), LK_OK);
  lk_budget_token_config tc;
  lk_budget_token_config_init_default(&tc);
  lk_budget *bu = NULL;
  assert_int_equal(lk_budget_new_token(&tc, &bu, NULL), LK_OK);
  lk_bulkhead_config hc = {1, 4};
  lk_bulkhead *bh = NULL;
  assert_int_equal(lk_bulkhead_new(&hc, &bh, NULL), LK_OK);
  lk_budget_stats bs0, bs1;
  assert_int_equal(lk_budget_stats_get(bu, T0, &bs0), LK_OK);
  c = lk_cancel_new();
  cfix_init(&f, steps, 3);
  f.pol.breaker = br;
  f.pol.budget = bu;
  f.pol.bulkhead = bh;
  f.sc.fire_on_call = c;
  f.sc.cancel_at = 1;
  assert_int_equal(fix_run_cancel(&f, c), LK_ECANCELED);
  assert_int_equal(f.sc.calls, 1);
  assert_int_equal(f.res.attempts, 1);
  assert_string_equal(f.tl[0].reason, "cancelled");
  assert_int_equal(count_ev(&f.log, LK_EV_RETRY_SCHEDULED), 0);
  lk_breaker_metrics bm;
  assert_int_equal(lk_breaker_metrics_get(br, T0, &bm), LK_OK);
  assert_int_equal(bm.calls, 0);
  assert_int_equal(lk_bulkhead_in_use(bh), 0);
  assert_int_equal(lk_budget_stats_get(bu, T0, &bs1), LK_OK);
  assert_int_equal(bs1.level, bs0.level);
  lk_cancel_free(c);

  /* during an attempt that then succeeds: the success is kept (the work was done) */
  static const step ok[] = {OK_STEP};
  c = lk_cancel_new();
  cfix_init(&f, ok, 1);
  f.sc.fire_on_call = c;
  f.sc.cancel_at = 1;
  f.pol.breaker = br;
  assert_int_equal(fix_run_cancel(&f, c), LK_OK);
  assert_int_equal(f.res.failure, LK_F_NONE);
  lk_cancel_free(c);

  /* during the backoff: woken early, the next attempt never starts */
  c = lk_cancel_new();
  cfix_init(&f, steps, 3);
  f.sl.fire = c;
  f.sl.fire_on = 1;
  f.pol.bulkhead = bh;
  assert_int_equal(fix_run_cancel(&f, c), LK_ECANCELED);
  assert_int_equal(f.sc.calls, 1);
  assert_int_equal(f.res.elapsed, LK_MS(1)); /* not the 200 ms delay */
  assert_int_equal(f.res.attempts, 1);
  assert_string_equal(f.tl[0].reason, "retry CONNECT_REFUSED"); /* what was decided */
  assert_int_equal(lk_bulkhead_in_use(bh), 0);
  lk_cancel_free(c);

  /* while queued for a bulkhead slot: the place in the queue is given up */
  assert_int_equal(lk_bulkhead_try_acquire(bh), LK_OK);
  c = lk_cancel_new();
  cfix_init(&f, steps, 3);
  f.sl.fire = c;
  f.sl.fire_on = 1;
  f.pol.bulkhead = bh;
  assert_int_equal(fix_run_cancel(&f, c), LK_ECANCELED);
  assert_int_equal(f.sc.calls, 0);
  assert_int_equal(lk_bulkhead_queue_depth(bh), 0);
  assert_int_equal(lk_bulkhead_in_use(bh), 1); /* ours */
  lk_bulkhead_release(bh);
  lk_cancel_free(c);

  /* while waiting for a limiter token: no attempt */
  lk_limiter_config lc = {2.0, 1};
  lk_limiter *lim = NULL;
  assert_int_equal(lk_limiter_new(&lc, &lim, NULL), LK_OK);
  assert_int_equal(lk_limiter_try_acquire(lim, T0), LK_OK);
  c = lk_cancel_new();
  cfix_init(&f, steps, 3);
  f.sl.fire = c;
  f.sl.fire_on = 1;
  f.pol.limiter = lim;
  assert_int_equal(fix_run_cancel(&f, c), LK_ECANCELED);
  assert_int_equal(f.sc.calls, 0);
  lk_cancel_free(c);
  lk_limiter_free(lim);

  /* while waiting for the open breaker's probe: the breaker is left as it was */
  lk_breaker_free(br);
  bc.window_size = bc.minimum_calls = 1;
  bc.wait_open = LK_MS(500);
  assert_int_equal(lk_breaker_new(&bc, &br, NULL), LK_OK);
  assert_int_equal(lk_breaker_acquire(br, T0), LK_OK);
  lk_breaker_record(br, T0, 0, LK_F_CONNECT_REFUSED);
  assert_int_equal(lk_breaker_get_state(br), LK_BREAKER_OPEN);
  c = lk_cancel_new();
  cfix_init(&f, steps, 3);
  f.sl.fire = c;
  f.sl.fire_on = 1;
  f.pol.breaker = br;
  assert_int_equal(fix_run_cancel(&f, c), LK_ECANCELED);
  assert_int_equal(f.sc.calls, 0);
  assert_int_equal(lk_breaker_get_state(br), LK_BREAKER_OPEN);
  /* its probe is still there for the next caller */
  assert_int_equal(lk_breaker_acquire(br, T0 + LK_MS(500)), LK_OK);
  lk_breaker_record(br, T0 + LK_MS(500), 0, LK_F_NONE);
  lk_cancel_free(c);

  lk_bulkhead_free(bh);
  lk_budget_free(bu);
  lk_breaker_free(br);
}

/* --- fallback -----------------------------------------------------------------------------------
 */

static void test_fallback_contract(void **state) {
  (void)state;
  /* once, with the final error and kind, for each way of failing for good */
  static const step refused[] = {REFUSED, REFUSED, REFUSED, REFUSED, REFUSED};
  static const step perm[] = {{LK_F_CLIENT_4XX, true, -1, LK_MS(1)}};
  static const step slow[] = {
      {LK_F_CONNECT_TIMEOUT, false, -1, LK_MS(800)}, REFUSED, REFUSED, REFUSED};
  struct {
    const step *steps;
    int n;
    int64_t deadline;
    int err, attempts;
    lk_failure failure;
  } cases[] = {
      {refused, 5, LK_SEC(3), LK_EATTEMPTS, 4, LK_F_CONNECT_REFUSED},
      {perm, 1, LK_SEC(3), LK_ENOTRETRYABLE, 1, LK_F_CLIENT_4XX},
      {slow, 4, LK_MS(900), LK_EDEADLINE, 1, LK_F_CONNECT_TIMEOUT},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    for (int answer = 0; answer < 2; answer++) {
      fb_rec fb = {0, 0, 0, answer ? LK_ENOTFOUND : LK_OK, LK_F_NONE};
      fix f;
      cfix_init(&f, cases[i].steps, cases[i].n);
      f.pol.deadline = cases[i].deadline;
      f.pol.fallback = record_fallback;
      f.pol.fallback_ctx = &fb;
      int err = fix_run_cancel(&f, NULL);
      assert_int_equal(fb.calls, 1);
      assert_int_equal(fb.err, cases[i].err);
      assert_int_equal(fb.failure, cases[i].failure);
      assert_int_equal(fb.attempts, cases[i].attempts);
      assert_int_equal(f.res.failure, cases[i].failure);
      if (answer) { /* it could not help: its own failure is reported, the error kept */
        assert_int_equal(err, cases[i].err);
        assert_false(f.res.fallback);
        assert_int_equal(f.res.original_err, LK_OK);
        assert_int_equal(f.res.fallback_err, LK_ENOTFOUND);
        assert_int_equal(count_ev(&f.log, LK_EV_FALLBACK), 0);
      } else {
        assert_int_equal(err, LK_OK);
        assert_true(f.res.fallback);
        assert_int_equal(f.res.original_err, cases[i].err);
        assert_int_equal(f.res.fallback_err, LK_OK);
        assert_int_equal(count_ev(&f.log, LK_EV_FALLBACK), 1);
      }
    }
  }
  /* never for a success, an invalid policy or invalid arguments */
  fb_rec fb = {0, 0, 0, LK_OK, LK_F_NONE};
  static const step ok[] = {OK_STEP};
  fix f;
  cfix_init(&f, ok, 1);
  f.pol.fallback = record_fallback;
  f.pol.fallback_ctx = &fb;
  assert_int_equal(fix_run_cancel(&f, NULL), LK_OK);
  assert_false(f.res.fallback);
  f.pol.attempt_timeout = 0;
  assert_int_equal(fix_run_cancel(&f, NULL), LK_ECONFIG);
  assert_int_equal(lk_exec_run(&f.pol, NULL, NULL, NULL, &f.res), LK_EINVAL);
  assert_int_equal(fb.calls, 0);
  /* a fallback that substitutes for a cancelled call: LK_OK, the cancel in original_err */
  lk_cancel *c = lk_cancel_new();
  lk_cancel_fire(c);
  cfix_init(&f, ok, 1);
  f.pol.fallback = record_fallback;
  f.pol.fallback_ctx = &fb;
  assert_int_equal(fix_run_cancel(&f, c), LK_OK);
  assert_int_equal(fb.calls, 1);
  assert_true(f.res.fallback);
  assert_int_equal(f.res.original_err, LK_ECANCELED);
  lk_cancel_free(c);
}

/* --- asynchronous calls: callbacks that call back in -------------------------------------------
 */

/* A scripted loop on the fake clock: start records the attempt (the test reports it), timer
 * records the delay. `abort_on` makes the event callback abort the call at the nth event of
 * that type; `timer_on` makes it call lk_exec_timer instead. */
typedef struct aloop {
  lk_fake_clock *fc;
  lk_exec_call *call;
  bool attempt; /* an attempt is in progress */
  int starts, dones, expires;
  int64_t timer;        /* last delay; -1 disarmed */
  bool inline_timer;    /* loop.timer runs a 0 delay at once (lk_exec_timer from inside) */
  bool report_in_start; /* loop.start reports the failure at once */
  bool ignore_expire;   /* expire does nothing (a misbehaving operation) */
  lk_event_type abort_on, timer_on;
  int abort_nth;
  int abort_rc, reentry_rc;
  bool abort_in_fallback, abort_in_done;
  int fallback_rc, fallback_answer, done_rc[3];
  lk_exec_result res;
  evlog log;
  int64_t start_at[8];
} aloop;

static void al_start(void *ctx, lk_exec_call *call, const lk_exec_attempt *a) {
  aloop *l = ctx;
  if (!l->call) /* inside lk_exec_start: it has not returned the call yet */
    l->call = call;
  assert_ptr_equal(call, l->call);
  assert_false(l->attempt);
  if (l->starts < 8)
    l->start_at[l->starts] = l->fc->base.now(&l->fc->base) - T0;
  l->starts++;
  l->attempt = true;
  (void)a;
  if (l->report_in_start) {
    l->attempt = false;
    lk_exec_outcome o = {LK_F_CONNECT_REFUSED, false, -1};
    assert_int_equal(lk_exec_attempt_end(call, &o), LK_OK);
    assert_int_equal(lk_exec_attempt_end(call, &o), LK_ESTATE); /* once */
  }
}

static void al_timer(void *ctx, lk_exec_call *call, int64_t delay) {
  aloop *l = ctx;
  if (!l->call)
    l->call = call;
  assert_ptr_equal(call, l->call);
  l->timer = delay;
  if (l->inline_timer && delay == 0)
    assert_int_equal(lk_exec_timer(call), LK_OK);
}

static void al_expire(void *ctx, lk_exec_call *call) {
  aloop *l = ctx;
  l->expires++;
  if (l->ignore_expire)
    return;
  l->attempt = false;
  lk_exec_outcome o = {LK_F_READ_TIMEOUT, true, -1};
  assert_int_equal(lk_exec_attempt_end(call, &o), LK_OK); /* from inside the hook */
}

static void al_done(void *ud, const lk_exec_result *res) {
  aloop *l = ud;
  l->dones++;
  l->res = *res;
  if (l->abort_in_done) { /* the call still exists during done, but it is over */
    l->done_rc[0] = lk_exec_abort(l->call);
    l->done_rc[1] = lk_exec_timer(l->call);
    lk_exec_outcome o = {LK_F_NONE, true, -1};
    l->done_rc[2] = lk_exec_attempt_end(l->call, &o);
  }
}

static void al_event(void *ctx, const lk_event *ev) {
  aloop *l = ctx;
  on_event(&l->log, ev);
  if (!l->call)
    return; /* CALL_START: lk_exec_start has not returned the call yet */
  if (ev->type == l->abort_on && l->abort_nth-- == 0)
    l->abort_rc = lk_exec_abort(l->call);
  if (ev->type == l->timer_on)
    l->reentry_rc = lk_exec_timer(l->call);
}

static int al_fallback(void *ctx, const lk_exec_result *r) {
  aloop *l = ctx;
  (void)r;
  if (l->abort_in_fallback)
    l->fallback_rc = lk_exec_abort(l->call);
  return l->fallback_answer;
}

#define NO_EVENT ((lk_event_type)LK_EV__COUNT)

static void aloop_init(aloop *l, lk_fake_clock *fc) {
  memset(l, 0, sizeof *l);
  l->fc = fc;
  l->timer = -2;
  l->abort_on = l->timer_on = NO_EVENT;
  l->abort_rc = l->reentry_rc = l->fallback_rc = 1;
  l->fallback_answer = LK_ENOTFOUND;
}

/* Runs the call to its end: reports every attempt as `o`, fires every timer after its delay.
 * Bounded. */
static void drive(aloop *l, lk_exec_call *call, lk_exec_outcome o) {
  for (int i = 0; i < 200 && l->dones == 0; i++) {
    if (l->attempt) {
      l->attempt = false;
      assert_int_equal(lk_exec_attempt_end(call, &o), LK_OK);
    } else {
      assert_true(l->timer >= 0);
      lk_fake_clock_advance(l->fc, l->timer);
      assert_int_equal(lk_exec_timer(call), LK_OK);
    }
  }
  assert_int_equal(l->dones, 1);
}

static void async_policy(lk_exec_policy *p, lk_fake_clock *fc, aloop *l) {
  lk_exec_policy_init_default(p);
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  rc.backoff.jitter = LK_JITTER_NONE;
  assert_int_equal(lk_retry_policy_init(&p->retry, &rc, NULL), LK_OK);
  p->clock = &fc->base;
  p->on_event = al_event;
  p->event_ctx = l;
  p->fallback = al_fallback;
  p->fallback_ctx = l;
}

/* lk_exec_abort from an event callback, at every kind of event a call emits: the abort takes
 * effect once the step in progress is over (before the lk_exec_* function that emitted the event
 * returns), done runs exactly once, nothing is used after it is freed (ASan), and everything is
 * given back. Before the fix the call was freed under the step that emitted the event. */
static void test_async_abort_from_events(void **state) {
  (void)state;
  static const lk_event_type types[] = {LK_EV_WAIT,
                                        LK_EV_ATTEMPT_START,
                                        LK_EV_ATTEMPT_END,
                                        LK_EV_RETRY_SCHEDULED,
                                        LK_EV_BREAKER_TRANSITION,
                                        LK_EV_BUDGET_REFUSED,
                                        LK_EV_FALLBACK,
                                        LK_EV_CALL_END};
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    lk_fake_clock fc;
    lk_fake_clock_init(&fc, T0);
    aloop l;
    aloop_init(&l, &fc);
    lk_exec_policy p;
    async_policy(&p, &fc, &l);
    lk_limiter_config lc = {2.0, 1}; /* a WAIT before the first attempt */
    lk_limiter *lim = NULL;
    assert_int_equal(lk_limiter_new(&lc, &lim, NULL), LK_OK);
    assert_int_equal(lk_limiter_try_acquire(lim, T0), LK_OK);
    lk_breaker_config bc;
    lk_breaker_config_init_default(&bc);
    bc.window_size = bc.minimum_calls = 2;
    lk_breaker *br = NULL;
    assert_int_equal(lk_breaker_new(&bc, &br, NULL), LK_OK);
    lk_budget_token_config tc;
    lk_budget_token_config_init_default(&tc);
    tc.max_tokens = 3;
    lk_budget *bu = NULL;
    assert_int_equal(lk_budget_new_token(&tc, &bu, NULL), LK_OK);
    lk_bulkhead_config hc = {2, 2};
    lk_bulkhead *bh = NULL;
    assert_int_equal(lk_bulkhead_new(&hc, &bh, NULL), LK_OK);
    p.limiter = lim;
    p.bulkhead = bh;
    p.deadline = LK_SEC(30);
    if (types[t] == LK_EV_BREAKER_TRANSITION)
      p.breaker = br; /* two failures open it */
    if (types[t] == LK_EV_BUDGET_REFUSED)
      p.budget = bu;
    if (types[t] == LK_EV_FALLBACK)
      l.fallback_answer = LK_OK; /* it produces the result: event FALLBACK */
    l.abort_on = types[t];
    lk_exec_loop loop = {al_start, al_timer, NULL, NULL, &l};
    lk_exec_call *call = NULL;
    assert_int_equal(lk_exec_start(&p, &loop, NULL, NULL, 0, al_done, &l, &call), LK_OK);
    l.call = call;
    lk_exec_outcome refused = {LK_F_CONNECT_REFUSED, false, -1};
    drive(&l, call, refused);
    assert_int_equal(count_ev(&l.log, LK_EV_CALL_END), 1);
    assert_int_equal(l.log.ev[l.log.n - 1].type, LK_EV_CALL_END);
    if (types[t] == LK_EV_FALLBACK || types[t] == LK_EV_CALL_END) {
      assert_int_equal(l.abort_rc, LK_ESTATE); /* the call is over */
      assert_int_equal(l.res.err, types[t] == LK_EV_FALLBACK ? LK_OK : LK_EATTEMPTS);
    } else if (types[t] == LK_EV_BUDGET_REFUSED) { /* the event of the step that ends the call */
      assert_int_equal(l.abort_rc, LK_OK);
      assert_int_equal(l.res.err, LK_EBUDGET);
    } else {
      assert_int_equal(l.abort_rc, LK_OK);
      assert_int_equal(l.res.err, LK_ECANCELED);
    }
    if (types[t] == LK_EV_WAIT) { /* the attempt admitted by that wait never started */
      assert_int_equal(l.starts, 0);
    } else if (types[t] == LK_EV_ATTEMPT_START) { /* it ended when that attempt reported */
      assert_int_equal(l.starts, 1);
      assert_int_equal(l.res.attempts, 1);
    } else if (types[t] == LK_EV_ATTEMPT_END || types[t] == LK_EV_RETRY_SCHEDULED) {
      assert_int_equal(l.starts, 1); /* the retry it scheduled never ran */
    }
    assert_int_equal(lk_bulkhead_in_use(bh), 0);
    assert_int_equal(lk_bulkhead_queue_depth(bh), 0);
    lk_breaker_metrics bm;
    assert_int_equal(lk_breaker_metrics_get(br, T0, &bm), LK_OK);
    assert_true(bm.state != LK_BREAKER_HALF_OPEN || bm.half_open_left == bc.permitted_half_open);
    lk_bulkhead_free(bh);
    lk_budget_free(bu);
    lk_breaker_free(br);
    lk_limiter_free(lim);
  }
}

/* lk_exec_abort from the fallback, and every entry from done: the call is over, so LK_ESTATE,
 * and done still runs exactly once. */
static void test_async_reentry_after_the_end(void **state) {
  (void)state;
  lk_fake_clock fc;
  lk_fake_clock_init(&fc, T0);
  aloop l;
  aloop_init(&l, &fc);
  lk_exec_policy p;
  async_policy(&p, &fc, &l);
  p.retry.cfg.max_attempts = 1;
  l.abort_in_fallback = true;
  l.abort_in_done = true;
  lk_exec_loop loop = {al_start, al_timer, NULL, NULL, &l};
  lk_exec_call *call = NULL;
  assert_int_equal(lk_exec_start(&p, &loop, NULL, NULL, 0, al_done, &l, &call), LK_OK);
  l.call = call;
  lk_exec_outcome refused = {LK_F_CONNECT_REFUSED, false, -1};
  drive(&l, call, refused);
  assert_int_equal(l.fallback_rc, LK_ESTATE);
  assert_int_equal(l.res.err, LK_EATTEMPTS);
  assert_int_equal(l.res.fallback_err, LK_ENOTFOUND);
  assert_int_equal(l.done_rc[0], LK_ESTATE);
  assert_int_equal(l.done_rc[1], LK_ESTATE);
  assert_int_equal(l.done_rc[2], LK_ESTATE);
}

/* lk_exec_timer from an event callback (a loop that steps every call it hears of) runs after the
 * step in progress, not in the middle of it: before the fix, the call started its next attempt
 * from inside ATTEMPT_END, without its backoff. A loop whose timer hook runs a 0 delay at once,
 * and an operation that reports from inside start, go through the same path. */
static void test_async_timer_reentry(void **state) {
  (void)state;
  lk_fake_clock fc;
  lk_fake_clock_init(&fc, T0);
  aloop l;
  aloop_init(&l, &fc);
  lk_exec_policy p;
  async_policy(&p, &fc, &l);
  p.fallback = NULL;
  l.timer_on = LK_EV_ATTEMPT_END;
  lk_exec_loop loop = {al_start, al_timer, NULL, NULL, &l};
  lk_exec_call *call = NULL;
  assert_int_equal(lk_exec_start(&p, &loop, NULL, NULL, 0, al_done, &l, &call), LK_OK);
  l.call = call;
  lk_exec_outcome refused = {LK_F_CONNECT_REFUSED, false, -1};
  drive(&l, call, refused);
  assert_int_equal(l.reentry_rc, LK_OK);
  assert_int_equal(l.res.err, LK_EATTEMPTS);
  assert_int_equal(l.starts, 4);
  assert_int_equal(l.start_at[1], LK_MS(200)); /* after its backoff */
  assert_int_equal(l.start_at[2], LK_MS(600));
  assert_int_equal(l.start_at[3], LK_MS(1400));

  /* inline timer + report inside start: the first attempts run inside lk_exec_start and the
   * retries each inside lk_exec_timer, without recursion */
  aloop_init(&l, &fc);
  l.inline_timer = true;
  l.report_in_start = true;
  p.on_event = NULL;
  p.retry.cfg.max_attempts = 3;
  lk_exec_attempt_info tl[4];
  assert_int_equal(lk_exec_start(&p, &loop, NULL, tl, 4, al_done, &l, &call), LK_OK);
  assert_ptr_equal(l.call, call);
  assert_int_equal(l.starts, 1); /* the 0 delay ran inside lk_exec_start */
  assert_int_equal(l.timer, LK_MS(200));
  lk_fake_clock_advance(&fc, LK_MS(200));
  assert_int_equal(lk_exec_timer(call), LK_OK);
  lk_fake_clock_advance(&fc, LK_MS(400));
  assert_int_equal(lk_exec_timer(call), LK_OK);
  assert_int_equal(l.dones, 1);
  assert_int_equal(l.starts, 3);
  assert_int_equal(l.res.err, LK_EATTEMPTS);
}

/* The loop's side misbehaving: a report with no attempt in progress or twice, an expire the
 * operation ignores (the call waits for the report, even past its deadline: the executor cannot
 * stop what the loop runs), an abort repeated. */
static void test_async_misbehaving_loop(void **state) {
  (void)state;
  lk_fake_clock fc;
  lk_fake_clock_init(&fc, T0);
  aloop l;
  aloop_init(&l, &fc);
  lk_exec_policy p;
  async_policy(&p, &fc, &l);
  p.fallback = NULL;
  p.deadline = LK_SEC(1);
  l.ignore_expire = true;
  lk_exec_loop loop = {al_start, al_timer, al_expire, NULL, &l};
  lk_exec_call *call = NULL;
  assert_int_equal(lk_exec_start(&p, &loop, NULL, NULL, 0, al_done, &l, &call), LK_OK);
  l.call = call;
  lk_exec_outcome ok = {LK_F_NONE, true, -1};
  assert_int_equal(lk_exec_attempt_end(call, &ok), LK_ESTATE); /* not started yet */
  assert_int_equal(lk_exec_timer(call), LK_OK);
  assert_int_equal(l.starts, 1);
  assert_int_equal(l.timer, LK_MS(800));
  lk_fake_clock_advance(&fc, LK_MS(800));
  assert_int_equal(lk_exec_timer(call), LK_OK);
  assert_int_equal(l.expires, 1);
  lk_fake_clock_advance(&fc, LK_SEC(5)); /* far past the deadline, still no report */
  assert_int_equal(lk_exec_timer(call), LK_OK);
  assert_int_equal(l.expires, 2); /* asked again */
  assert_int_equal(l.dones, 0);
  assert_int_equal(lk_exec_abort(call), LK_OK); /* during the attempt: when it reports */
  assert_int_equal(lk_exec_abort(call), LK_OK); /* twice is fine */
  assert_int_equal(l.dones, 0);
  lk_exec_outcome late = {LK_F_READ_TIMEOUT, true, -1};
  assert_int_equal(lk_exec_attempt_end(call, &late), LK_OK);
  assert_int_equal(l.dones, 1);
  assert_int_equal(l.res.err, LK_ECANCELED);
  assert_int_equal(l.res.elapsed, LK_MS(5800));

  /* an abort while waiting, twice in a row would be a use after free: the first ends the call */
  aloop_init(&l, &fc);
  lk_exec_loop loop2 = {al_start, al_timer, NULL, NULL, &l};
  assert_int_equal(lk_exec_start(&p, &loop2, NULL, NULL, 0, al_done, &l, &call), LK_OK);
  l.call = call;
  assert_int_equal(lk_exec_abort(call), LK_OK);
  assert_int_equal(l.dones, 1);
  assert_int_equal(l.timer, -1);

  /* an abort during an attempt that then succeeds: the success is kept */
  aloop_init(&l, &fc);
  assert_int_equal(lk_exec_start(&p, &loop2, NULL, NULL, 0, al_done, &l, &call), LK_OK);
  assert_int_equal(lk_exec_timer(call), LK_OK);
  assert_int_equal(lk_exec_abort(call), LK_OK);
  assert_int_equal(l.dones, 0);
  assert_int_equal(lk_exec_attempt_end(call, &ok), LK_OK);
  assert_int_equal(l.dones, 1);
  assert_int_equal(l.res.err, LK_OK);
}

/* A synchronous operation that runs a call of its own (a nested lk_exec_run on the same thread,
 * with the same protections and token): each is a call of its own; a bulkhead the outer call
 * fills makes the inner one wait, bounded by its pool_timeout, never a deadlock. */
typedef struct nest {
  fix *f;
  int depth, inner_err;
} nest;

static void nested_attempt(void *ctx, const lk_exec_attempt *a, lk_exec_outcome *out) {
  nest *n = ctx;
  (void)a;
  lk_fake_clock_advance(&n->f->fc, LK_MS(1));
  if (n->depth++ == 0) {
    lk_exec_result inner;
    memset(&inner, 0, sizeof inner);
    lk_exec_policy p = n->f->pol;
    p.on_event = NULL;
    n->inner_err = lk_exec_run(&p, nested_attempt, n, a->cancel, &inner);
  }
  out->failure = LK_F_NONE;
}

static void test_sync_nested_call(void **state) {
  (void)state;
  fix f;
  cfix_init(&f, NULL, 0);
  lk_cancel *c = lk_cancel_new();
  nest n = {&f, 0, 1};
  assert_int_equal(lk_exec_run(&f.pol, nested_attempt, &n, c, &f.res), LK_OK);
  assert_int_equal(n.inner_err, LK_OK);
  assert_int_equal(n.depth, 2);
  lk_bulkhead_config hc = {1, 4};
  lk_bulkhead *bh = NULL;
  assert_int_equal(lk_bulkhead_new(&hc, &bh, NULL), LK_OK);
  cfix_init(&f, NULL, 0);
  f.pol.bulkhead = bh;
  f.pol.pool_timeout = LK_MS(50);
  n = (nest){&f, 0, 1};
  assert_int_equal(lk_exec_run(&f.pol, nested_attempt, &n, c, &f.res), LK_OK);
  assert_int_equal(n.inner_err, LK_EBULKHEAD_FULL); /* its slot is the outer call's */
  assert_int_equal(lk_bulkhead_in_use(bh), 0);
  assert_int_equal(lk_bulkhead_queue_depth(bh), 0);
  lk_bulkhead_free(bh);
  lk_cancel_free(c);
}

/* argv[1], if given, runs only the tests whose names match it (a cmocka pattern). */
int main(int argc, char **argv) {
  if (argc > 1)
    cmocka_set_test_filter(argv[1]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_null_arguments),
      cmocka_unit_test(test_invalid_policies),
      cmocka_unit_test(test_extremes_saturate),
      cmocka_unit_test(test_out_of_range_outcome),
      cmocka_unit_test(test_terminal_kinds_from_operation),
      cmocka_unit_test(test_retry_after_capped),
      cmocka_unit_test(test_deadline_property),
      cmocka_unit_test(test_overrun_attempt),
      cmocka_unit_test(test_cancel_points),
      cmocka_unit_test(test_fallback_contract),
      cmocka_unit_test(test_async_abort_from_events),
      cmocka_unit_test(test_async_reentry_after_the_end),
      cmocka_unit_test(test_async_timer_reentry),
      cmocka_unit_test(test_async_misbehaving_loop),
      cmocka_unit_test(test_sync_nested_call),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
