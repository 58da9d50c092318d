/* SPDX-License-Identifier: MIT */
/* Circuit breaker, driven by a fake clock (time is always a parameter).
 *
 * Behavioural reference: Resilience4j's documented CircuitBreaker state machine
 * (resilience4j.readme.io/docs/circuitbreaker). Documented scenarios reproduced here:
 *  R1  CLOSED -> OPEN when the failure rate is equal to or greater than the threshold
 *        count_opens_at_failure_threshold, count_threshold_boundary
 *  R2  no rate before minimumNumberOfCalls ("if only 9 calls have been recorded the breaker will
 *      not transition to open even if all 9 calls have failed")   count_opens_at_failure_threshold
 *  R3  COUNT_BASED window = circular array of the last N outcomes, subtract-on-evict
 *        count_window_slides, window_matches_model
 *  R4  TIME_BASED window = N one-second buckets, older seconds evicted
 *        time_window_expiry, time_window_long_gap, window_matches_model
 *  R5  slow calls: duration above slowCallDurationThreshold; CLOSED -> OPEN when the slow-call
 *      rate is equal to or greater than its threshold              slow_calls_open
 *  R6  OPEN rejects calls (CallNotPermittedException -> LK_EBREAKER_OPEN), counted as not
 *      permitted                                                   open_rejects_then_half_open
 *  R7  after waitDurationInOpenState OPEN -> HALF_OPEN (on the next call, like Resilience4j
 *      without automaticTransitionFromOpenToHalfOpenEnabled)       open_rejects_then_half_open
 *  R8  HALF_OPEN admits permittedNumberOfCallsInHalfOpenState calls, rejects further calls
 *      until they complete; releasePermission gives one back      half_open_permits_and_release
 *  R9  HALF_OPEN -> OPEN if the rate over the permitted calls >= threshold, else -> CLOSED
 *        half_open_closes, half_open_reopens, half_open_boundary, half_open_slow_reopens
 *  R10 maxWaitDurationInHalfOpenState: HALF_OPEN -> OPEN after it; 0 = wait for all permitted
 *      calls                                                       half_open_max_wait
 *  R11 waitIntervalFunctionInOpenState: the wait grows with consecutive openings and is reset
 *      once the breaker closes                           wait_backoff_grows_and_resets,
 *                                                        wait_backoff_jitter_seeded
 *  R12 recordExceptions / ignoreExceptions: listed failures count, others are successes,
 *      ignored ones count as neither (and give a half-open permission back)
 *        failure_masks, ignored_kinds
 *  R13 DISABLED: always allow, no metrics, no transitions         disabled_state
 *  R14 FORCED_OPEN: always deny                                    forced_open_state
 *  R15 METRICS_ONLY: always allow, record metrics, never transition   metrics_only_state
 *  R16 manual transitions (transitionToXxxState) and reset()       manual_transitions_every_pair,
 *                                                                  reset_clears
 *  R17 state transition events                                     every test checks the callback
 *  R18 for COUNT_BASED, minimumNumberOfCalls above slidingWindowSize is capped at it
 *        min_calls_capped_for_count_window
 * Beyond Resilience4j: permits tied to their half-open period (permit_exactness), no allocation
 * per call (no_allocation_per_call), configuration errors (config_rejected), transition callbacks
 * that run outside the lock: re-entrant (callback_may_reenter), slow without stalling other
 * threads (slow_callback_blocks_no_other_thread), stalled past the queue bound
 * (stalled_callback_drops_and_counts). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <linkd/breaker.h>
#include <linkd/clock.h>
#include <linkd/error.h>
#include <linkd/rand.h>

#include "fake_clock.h"
#include "testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --- fixtures --------------------------------------------------------------------------------- */

typedef struct ev {
  lk_breaker_state from, to;
  int64_t now;
} ev;

typedef struct events {
  ev e[256];
  int n;
} events;

static void on_transition(void *ctx, lk_breaker_state from, lk_breaker_state to, int64_t now) {
  events *r = ctx;
  if (r->n < 256)
    r->e[r->n++] = (ev){from, to, now};
}

static void expect_event(const events *r, int i, lk_breaker_state from, lk_breaker_state to,
                         int64_t now) {
  assert_true(i < r->n);
  assert_int_equal(r->e[i].from, from);
  assert_int_equal(r->e[i].to, to);
  assert_int_equal(r->e[i].now, now);
}

static lk_fake_clock fc;
static int64_t T(void) { return fc.base.now(&fc.base); }
static void advance(int64_t d) { lk_fake_clock_advance(&fc, d); }

static int setup(void **state) {
  (void)state;
  lk_fake_clock_init(&fc, LK_SEC(1000));
  return 0;
}

/* COUNT window of 10, minimum 10, 50 %, slow > 1 s at 100 %, 10 s open, 3 half-open calls. */
static lk_breaker_config small(events *r) {
  lk_breaker_config c;
  lk_breaker_config_init_default(&c);
  c.window_size = 10;
  c.minimum_calls = 10;
  c.failure_rate_threshold = 50;
  c.slow_call_duration = LK_SEC(1);
  c.wait_open = LK_SEC(10);
  c.permitted_half_open = 3;
  c.half_open_decide_early = false; /* the Resilience4j scenarios wait for every probe */
  c.on_transition = on_transition;
  c.on_transition_ctx = r;
  return c;
}

static lk_breaker *make(const lk_breaker_config *c) {
  lk_breaker *b = NULL;
  const char *why = NULL;
  assert_int_equal(lk_breaker_new(c, &b, &why), LK_OK);
  assert_null(why);
  return b;
}

/* One admitted call at the fake clock's time. */
static void call(lk_breaker *b, int64_t duration, lk_failure kind) {
  assert_int_equal(lk_breaker_acquire(b, T()), LK_OK);
  lk_breaker_record(b, T(), duration, kind);
}

static void calls(lk_breaker *b, int n, lk_failure kind) {
  for (int i = 0; i < n; i++)
    call(b, 0, kind);
}

static lk_breaker_metrics metrics(lk_breaker *b) {
  lk_breaker_metrics m;
  assert_int_equal(lk_breaker_metrics_get(b, T(), &m), LK_OK);
  return m;
}

/* Trips a `small` breaker: 10 failures. */
static void trip(lk_breaker *b) {
  calls(b, 10, LK_F_HTTP_500);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_OPEN);
}

/* --- configuration ---------------------------------------------------------------------------- */

static void defaults_match_resilience4j(void **state) {
  (void)state;
  lk_breaker_config c;
  lk_breaker_config_init_default(&c);
  assert_int_equal(c.window, LK_BREAKER_WINDOW_COUNT);
  assert_int_equal(c.window_size, 100);
  assert_int_equal(c.minimum_calls, 100);
  assert_true(c.failure_rate_threshold == 50.0);
  assert_true(c.slow_call_rate_threshold == 100.0);
  assert_int_equal(c.slow_call_duration, LK_SEC(60));
  assert_int_equal(c.wait_open, LK_SEC(60));
  assert_false(c.wait_backoff);
  assert_int_equal(c.permitted_half_open, 10);
  assert_int_equal(c.max_wait_half_open, 0);
  assert_int_equal(c.failures, lk_breaker_failures_default());
  assert_int_equal(c.ignore, lk_breaker_ignore_default());
  assert_null(c.on_transition);
  assert_int_equal(lk_breaker_config_validate(&c, NULL), LK_OK);
  assert_true(c.failures & LK_FAILURE_BIT(LK_F_CONNECT_REFUSED));
  /* linkd's one departure from Resilience4j's defaults: a 429 counts as nothing (see breaker.h) */
  assert_false(c.failures & LK_FAILURE_BIT(LK_F_TOO_MANY_REQUESTS));
  assert_true(c.ignore & LK_FAILURE_BIT(LK_F_TOO_MANY_REQUESTS));
  assert_false(c.failures & LK_FAILURE_BIT(LK_F_CLIENT_4XX));
  assert_true(c.ignore & LK_FAILURE_BIT(LK_F_CANCELLED));
  assert_false(c.failures & c.ignore);
  lk_breaker *b = make(&c);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_CLOSED);
  lk_breaker_free(b);
}

typedef void (*mutator)(lk_breaker_config *);
static lk_rand_fast cfg_rng;
static void m_window(lk_breaker_config *c) { c->window = (lk_breaker_window)7; }
static void m_count0(lk_breaker_config *c) { c->window_size = 0; }
static void m_count_big(lk_breaker_config *c) { c->window_size = 1000001; }
static void m_time_big(lk_breaker_config *c) {
  c->window = LK_BREAKER_WINDOW_TIME;
  c->window_size = 86401;
}
static void m_min0(lk_breaker_config *c) { c->minimum_calls = 0; }
static void m_fail0(lk_breaker_config *c) { c->failure_rate_threshold = 0; }
static void m_fail_big(lk_breaker_config *c) { c->failure_rate_threshold = 100.5; }
static void m_fail_nan(lk_breaker_config *c) { c->failure_rate_threshold = NAN; }
static void m_fail_tiny(lk_breaker_config *c) { c->failure_rate_threshold = 0.00001; }
static void m_slow0(lk_breaker_config *c) { c->slow_call_rate_threshold = -1; }
static void m_slowd(lk_breaker_config *c) { c->slow_call_duration = 0; }
static void m_wait(lk_breaker_config *c) { c->wait_open = 0; }
static void m_backoff(lk_breaker_config *c) {
  c->wait_backoff = true;
  c->backoff.base = 0;
}
static void m_rng(lk_breaker_config *c) {
  c->wait_backoff = true;
  c->backoff.jitter = LK_JITTER_FULL;
}
static void m_permitted0(lk_breaker_config *c) { c->permitted_half_open = 0; }
static void m_permitted_big(lk_breaker_config *c) { c->permitted_half_open = 1000001; }
static void m_maxwait(lk_breaker_config *c) { c->max_wait_half_open = -1; }
static void m_fail_bits(lk_breaker_config *c) { c->failures |= UINT64_C(1) << 63; }
static void m_ignore_bits(lk_breaker_config *c) { c->ignore |= UINT64_C(1) << 62; }
static void m_fail_none(lk_breaker_config *c) { c->failures |= LK_FAILURE_BIT(LK_F_NONE); }
static void m_ignore_none(lk_breaker_config *c) { c->ignore |= LK_FAILURE_BIT(LK_F_NONE); }

static void config_rejected(void **state) {
  (void)state;
  const struct {
    mutator m;
    const char *words;
  } cases[] = {
      {m_window, "window must be COUNT or TIME"},
      {m_count0, "window_size must be within [1, 1000000]"},
      {m_count_big, "window_size must be within [1, 1000000]"},
      {m_time_big, "window_size must be within [1, 86400] seconds"},
      {m_min0, "minimum_calls"},
      {m_fail0, "failure_rate_threshold"},
      {m_fail_big, "failure_rate_threshold"},
      {m_fail_nan, "failure_rate_threshold"},
      {m_fail_tiny, "failure_rate_threshold"},
      {m_slow0, "slow_call_rate_threshold"},
      {m_slowd, "slow_call_duration"},
      {m_wait, "wait_open"},
      {m_backoff, "backoff base"},
      {m_rng, "rng"},
      {m_permitted0, "permitted_half_open"},
      {m_permitted_big, "permitted_half_open"},
      {m_maxwait, "max_wait_half_open"},
      {m_fail_bits, "failures has bits"},
      {m_ignore_bits, "ignore has bits"},
      {m_fail_none, "failures must not contain LK_F_NONE"},
      {m_ignore_none, "ignore must not contain LK_F_NONE"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    lk_breaker_config c;
    lk_breaker_config_init_default(&c);
    cases[i].m(&c);
    const char *why = NULL;
    lk_breaker *b = (lk_breaker *)&c;
    assert_int_equal(lk_breaker_new(&c, &b, &why), LK_ECONFIG);
    assert_null(b);
    assert_non_null(why);
    if (!strstr(why, cases[i].words))
      fail_msg("case %zu: \"%s\" lacks \"%s\"", i, why, cases[i].words);
  }
  /* Fine: wait_open unused with a backoff; rng not needed without jitter. */
  lk_breaker_config c;
  lk_breaker_config_init_default(&c);
  c.wait_backoff = true;
  c.wait_open = 0;
  c.backoff.jitter = LK_JITTER_NONE;
  assert_int_equal(lk_breaker_config_validate(&c, NULL), LK_OK);
  c.backoff.jitter = LK_JITTER_FULL;
  lk_rand_fast_seeded(&cfg_rng, 1);
  c.rng = &cfg_rng.base;
  assert_int_equal(lk_breaker_config_validate(&c, NULL), LK_OK);
  /* NULL arguments. */
  lk_breaker *b = NULL;
  assert_int_equal(lk_breaker_new(NULL, &b, NULL), LK_EINVAL);
  assert_int_equal(lk_breaker_new(&c, NULL, NULL), LK_EINVAL);
  const char *why = NULL;
  assert_int_equal(lk_breaker_config_validate(NULL, &why), LK_ECONFIG);
  assert_non_null(why);
  lk_breaker_metrics m;
  assert_int_equal(lk_breaker_metrics_get(NULL, 0, &m), LK_EINVAL);
  assert_int_equal(lk_breaker_transition(NULL, LK_BREAKER_OPEN, 0), LK_EINVAL);
  lk_breaker_free(NULL);
  lk_breaker_reset(NULL, 0);
}

/* --- CLOSED: the windows ---------------------------------------------------------------------- */

static void count_opens_at_failure_threshold(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  lk_breaker *b = make(&c);
  calls(b, 9, LK_F_CONNECT_REFUSED); /* R2: 9 of 9 failed, still below the minimum */
  lk_breaker_metrics m = metrics(b);
  assert_int_equal(m.state, LK_BREAKER_CLOSED);
  assert_int_equal(m.calls, 9);
  assert_int_equal(m.failed, 9);
  assert_true(m.failure_rate == -1.0);
  assert_int_equal(r.n, 0);
  advance(LK_MS(5));
  call(b, 0, LK_F_NONE); /* 9 of 10 */
  m = metrics(b);
  assert_int_equal(m.state, LK_BREAKER_OPEN);
  assert_true(m.failure_rate == 90.0);
  assert_int_equal(m.openings, 1);
  assert_int_equal(m.open_until, T() + LK_SEC(10));
  assert_int_equal(m.transitions, 1);
  assert_int_equal(r.n, 1);
  expect_event(&r, 0, LK_BREAKER_CLOSED, LK_BREAKER_OPEN, T());
  lk_breaker_free(b);
}

static void count_threshold_boundary(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  lk_breaker *b = make(&c);
  calls(b, 4, LK_F_HTTP_503);
  calls(b, 6, LK_F_NONE);
  lk_breaker_metrics m = metrics(b);
  assert_int_equal(m.state, LK_BREAKER_CLOSED); /* 40 % < 50 % */
  assert_true(m.failure_rate == 40.0);
  lk_breaker_free(b);
  b = make(&c);
  calls(b, 5, LK_F_HTTP_503);
  calls(b, 4, LK_F_NONE);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_CLOSED);
  call(b, 0, LK_F_NONE); /* exactly 50 %: equal opens */
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_OPEN);
  assert_int_equal(r.n, 1);
  lk_breaker_free(b);
}

/* The oldest outcome leaves as a new one comes in. */
static void count_window_slides(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  lk_breaker *b = make(&c);
  calls(b, 4, LK_F_READ_TIMEOUT);
  calls(b, 6, LK_F_NONE);
  /* Four more failures evict the four old ones: still 4 of 10. */
  for (int i = 0; i < 4; i++) {
    call(b, 0, LK_F_READ_TIMEOUT);
    lk_breaker_metrics m = metrics(b);
    assert_int_equal(m.state, LK_BREAKER_CLOSED);
    assert_int_equal(m.calls, 10);
    assert_int_equal(m.failed, 4);
  }
  /* The next one evicts a success: 5 of 10. */
  call(b, 0, LK_F_READ_TIMEOUT);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_OPEN);
  lk_breaker_free(b);
}

/* Property: the windows agree with a straightforward model for random outcomes and times. */
static void window_matches_model(void **state) {
  (void)state;
  lk_rand_fast rng;
  lk_rand_fast_seeded(&rng, lk_test_seed());
  for (int kind = 0; kind < 2; kind++) {
    lk_breaker_config c;
    lk_breaker_config_init_default(&c);
    c.window = kind ? LK_BREAKER_WINDOW_TIME : LK_BREAKER_WINDOW_COUNT;
    c.window_size = kind ? 5 : 7;
    c.minimum_calls = 1;
    c.slow_call_duration = LK_MS(100);
    lk_breaker *b = make(&c);
    assert_int_equal(lk_breaker_transition(b, LK_BREAKER_METRICS_ONLY, T()), LK_OK);
    enum { N = 3000 };
    static int64_t when[N];
    static unsigned what[N];
    int n = 0;
    int64_t now = LK_SEC(50);
    for (int i = 0; i < N; i++) {
      now += kind ? (int64_t)lk_rand_below(&rng.base, (uint64_t)LK_MS(1700)) : 1;
      uint64_t pick = lk_rand_below(&rng.base, 4);
      lk_failure k = pick == 0 ? LK_F_HTTP_502 : pick == 1 ? LK_F_CANCELLED : LK_F_NONE;
      int64_t d = (int64_t)lk_rand_below(&rng.base, (uint64_t)LK_MS(200));
      assert_int_equal(lk_breaker_acquire(b, now), LK_OK);
      lk_breaker_record(b, now, d, k);
      if (k != LK_F_CANCELLED) {
        when[n] = now;
        what[n++] = (k != LK_F_NONE ? 1u : 0u) | (d > LK_MS(100) ? 2u : 0u);
      }
      int64_t mc = 0, mf = 0, ms = 0;
      for (int j = n - 1; j >= 0; j--) {
        bool in = kind ? when[j] / LK_NS_PER_S > now / LK_NS_PER_S - 5 : n - j <= 7;
        if (!in)
          break;
        mc++;
        mf += what[j] & 1u;
        ms += (what[j] >> 1) & 1u;
      }
      lk_breaker_metrics m;
      lk_breaker_metrics_get(b, now, &m);
      if (m.calls != mc || m.failed != mf || m.slow != ms)
        fail_msg("kind %d step %d: got %lld/%lld/%lld, model %lld/%lld/%lld", kind, i,
                 (long long)m.calls, (long long)m.failed, (long long)m.slow, (long long)mc,
                 (long long)mf, (long long)ms);
    }
    assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_METRICS_ONLY);
    lk_breaker_free(b);
  }
}

static void slow_calls_open(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  c.slow_call_rate_threshold = 50;
  lk_breaker *b = make(&c);
  for (int i = 0; i < 5; i++)
    call(b, LK_SEC(1), LK_F_NONE); /* exactly the duration: not slow */
  call(b, -5, LK_F_NONE);           /* negative counts as 0 */
  for (int i = 0; i < 3; i++)
    call(b, LK_SEC(1) + 1, LK_F_NONE);
  lk_breaker_metrics m = metrics(b);
  assert_int_equal(m.slow, 3);
  assert_int_equal(m.state, LK_BREAKER_CLOSED);
  call(b, LK_SEC(2), LK_F_NONE); /* 4 of 10: 40 % */
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_CLOSED);
  call(b, LK_SEC(2), LK_F_NONE); /* evicts a fast one: 5 of 10 */
  m = metrics(b);
  assert_int_equal(m.state, LK_BREAKER_OPEN);
  assert_int_equal(m.failed, 0);
  assert_true(m.failure_rate == 0.0);
  assert_true(m.slow_call_rate == 50.0);
  lk_breaker_free(b);
  /* A slow failure counts in both rates. */
  b = make(&c);
  lk_breaker_transition(b, LK_BREAKER_METRICS_ONLY, T());
  call(b, LK_SEC(5), LK_F_HTTP_500);
  m = metrics(b);
  assert_int_equal(m.calls, 1);
  assert_int_equal(m.failed, 1);
  assert_int_equal(m.slow, 1);
  lk_breaker_free(b);
}

static void time_window_expiry(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  c.window = LK_BREAKER_WINDOW_TIME;
  c.window_size = 10;
  c.minimum_calls = 5;
  lk_breaker *b = make(&c);
  int64_t t0 = T(); /* a whole second */
  calls(b, 4, LK_F_HTTP_500);
  lk_fake_clock_set(&fc, t0 + LK_SEC(10) - 1); /* second t0+9: t0's calls still in */
  call(b, 0, LK_F_NONE);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_OPEN);
  lk_breaker_free(b);

  lk_fake_clock_set(&fc, t0);
  b = make(&c);
  calls(b, 4, LK_F_HTTP_500);
  lk_fake_clock_set(&fc, t0 + LK_SEC(10)); /* t0's second has left */
  call(b, 0, LK_F_NONE);
  lk_breaker_metrics m = metrics(b);
  assert_int_equal(m.state, LK_BREAKER_CLOSED);
  assert_int_equal(m.calls, 1);
  assert_int_equal(m.failed, 0);
  advance(LK_MS(500));
  calls(b, 3, LK_F_HTTP_500); /* 3 of 4: below the minimum */
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_CLOSED);
  call(b, 0, LK_F_HTTP_500); /* 4 of 5 */
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_OPEN);
  lk_breaker_free(b);
}

static void time_window_long_gap(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  c.window = LK_BREAKER_WINDOW_TIME;
  c.window_size = 3;
  c.minimum_calls = 3;
  lk_breaker *b = make(&c);
  calls(b, 2, LK_F_HTTP_500);
  advance(LK_SEC(1));
  calls(b, 1, LK_F_NONE);
  lk_breaker_metrics m = metrics(b);
  assert_int_equal(m.calls, 3);
  assert_true(fabs(m.failure_rate - 200.0 / 3.0) < 1e-9);
  assert_int_equal(m.state, LK_BREAKER_OPEN);
  lk_breaker_reset(b, T());
  calls(b, 2, LK_F_HTTP_500); /* the reset emptied the window */
  assert_int_equal(metrics(b).calls, 2);
  advance(LK_SEC(1000)); /* queries judge the window as of now without moving it */
  m = metrics(b);
  assert_int_equal(m.calls, 0);
  assert_true(m.failure_rate == -1.0);
  calls(b, 2, LK_F_HTTP_500);
  call(b, 0, LK_F_NONE);
  assert_int_equal(metrics(b).calls, 3);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_OPEN);
  lk_breaker_free(b);
}

static void min_calls_capped_for_count_window(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  c.window_size = 5;
  c.minimum_calls = 100;
  lk_breaker *b = make(&c);
  calls(b, 5, LK_F_HTTP_500);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_OPEN);
  lk_breaker_free(b);
  c.window = LK_BREAKER_WINDOW_TIME; /* not capped for a time window */
  c.window_size = 1;
  b = make(&c);
  calls(b, 99, LK_F_HTTP_500);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_CLOSED);
  call(b, 0, LK_F_HTTP_500);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_OPEN);
  lk_breaker_free(b);
}

/* --- OPEN and HALF_OPEN ----------------------------------------------------------------------- */

static void open_rejects_then_half_open(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  lk_breaker *b = make(&c);
  trip(b);
  int64_t opened = T();
  lk_breaker_metrics m = metrics(b);
  assert_int_equal(m.open_until, opened + LK_SEC(10));
  assert_int_equal(m.not_permitted, 0);
  for (int i = 0; i < 3; i++)
    assert_int_equal(lk_breaker_acquire(b, T()), LK_EBREAKER_OPEN);
  lk_breaker_record(b, T(), 0, LK_F_HTTP_500); /* a late outcome: OPEN records nothing */
  lk_fake_clock_set(&fc, opened + LK_SEC(10) - 1);
  assert_int_equal(lk_breaker_acquire(b, T()), LK_EBREAKER_OPEN);
  m = metrics(b);
  assert_int_equal(m.not_permitted, 4);
  assert_int_equal(m.calls, 10); /* the window that tripped it is kept for metrics */
  assert_int_equal(m.state, LK_BREAKER_OPEN);
  advance(1);
  assert_int_equal(lk_breaker_acquire(b, T()), LK_OK);
  m = metrics(b);
  assert_int_equal(m.state, LK_BREAKER_HALF_OPEN);
  assert_int_equal(m.half_open_left, 2);
  assert_int_equal(m.calls, 0);
  assert_int_equal(m.open_until, 0);
  assert_int_equal(r.n, 2);
  expect_event(&r, 1, LK_BREAKER_OPEN, LK_BREAKER_HALF_OPEN, opened + LK_SEC(10));
  lk_breaker_free(b);
}

static void half_open_permits_and_release(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  lk_breaker *b = make(&c);
  trip(b);
  advance(LK_SEC(10));
  for (int i = 0; i < 3; i++)
    assert_int_equal(lk_breaker_acquire(b, T()), LK_OK);
  assert_int_equal(lk_breaker_acquire(b, T()), LK_EBREAKER_OPEN);
  assert_int_equal(lk_breaker_acquire(b, T() + LK_SEC(3600)), LK_EBREAKER_OPEN); /* no max wait */
  lk_breaker_release(b);
  assert_int_equal(metrics(b).half_open_left, 1);
  assert_int_equal(lk_breaker_acquire(b, T()), LK_OK);
  assert_int_equal(lk_breaker_acquire(b, T()), LK_EBREAKER_OPEN);
  for (int i = 0; i < 10; i++)
    lk_breaker_release(b); /* never more than permitted */
  assert_int_equal(metrics(b).half_open_left, 3);
  assert_int_equal(metrics(b).not_permitted, 3);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_HALF_OPEN);
  lk_breaker_free(b);
}

static void half_open_closes(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  lk_breaker *b = make(&c);
  trip(b);
  advance(LK_SEC(10));
  call(b, 0, LK_F_NONE);
  call(b, 0, LK_F_CLIENT_4XX); /* not a failure by default */
  lk_breaker_metrics m = metrics(b);
  assert_int_equal(m.state, LK_BREAKER_HALF_OPEN);
  assert_int_equal(m.calls, 2);
  assert_true(m.failure_rate == -1.0); /* judged once all permitted calls are in */
  call(b, 0, LK_F_NONE);
  m = metrics(b);
  assert_int_equal(m.state, LK_BREAKER_CLOSED);
  assert_int_equal(m.calls, 0); /* a fresh window */
  assert_int_equal(m.openings, 0);
  assert_int_equal(r.n, 3);
  expect_event(&r, 2, LK_BREAKER_HALF_OPEN, LK_BREAKER_CLOSED, T());
  /* The fresh window judges from scratch. */
  calls(b, 9, LK_F_HTTP_500);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_CLOSED);
  lk_breaker_free(b);
}

static void half_open_reopens(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  lk_breaker *b = make(&c);
  trip(b);
  advance(LK_SEC(10));
  call(b, 0, LK_F_NONE);
  call(b, 0, LK_F_HTTP_500);
  call(b, 0, LK_F_CONNECT_TIMEOUT);
  lk_breaker_metrics m = metrics(b);
  assert_int_equal(m.state, LK_BREAKER_OPEN);
  assert_int_equal(m.openings, 2);
  assert_int_equal(m.open_until, T() + LK_SEC(10));
  expect_event(&r, 2, LK_BREAKER_HALF_OPEN, LK_BREAKER_OPEN, T());
  lk_breaker_free(b);
}

static void half_open_boundary(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  c.permitted_half_open = 4;
  lk_breaker *b = make(&c);
  trip(b);
  advance(LK_SEC(10));
  calls(b, 2, LK_F_HTTP_500);
  calls(b, 2, LK_F_NONE); /* 50 %: equal reopens */
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_OPEN);
  advance(LK_SEC(10));
  calls(b, 1, LK_F_HTTP_500);
  calls(b, 3, LK_F_NONE); /* 25 % */
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_CLOSED);
  lk_breaker_free(b);
}

static void half_open_slow_reopens(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  c.permitted_half_open = 2;
  c.slow_call_rate_threshold = 50;
  lk_breaker *b = make(&c);
  trip(b);
  advance(LK_SEC(10));
  call(b, LK_SEC(3), LK_F_NONE);
  call(b, 0, LK_F_NONE);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_OPEN);
  lk_breaker_free(b);
}

static void half_open_max_wait(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  c.max_wait_half_open = LK_SEC(5);
  lk_breaker *b = make(&c);
  trip(b);
  advance(LK_SEC(10));
  int64_t since = T();
  assert_int_equal(lk_breaker_acquire(b, since), LK_OK);
  assert_int_equal(lk_breaker_acquire(b, since + LK_SEC(5) - 1), LK_OK);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_HALF_OPEN);
  assert_int_equal(lk_breaker_acquire(b, since + LK_SEC(5)), LK_EBREAKER_OPEN);
  lk_breaker_metrics m;
  lk_breaker_metrics_get(b, since + LK_SEC(5), &m);
  assert_int_equal(m.state, LK_BREAKER_OPEN);
  assert_int_equal(m.open_until, since + LK_SEC(15));
  assert_int_equal(m.openings, 2);
  expect_event(&r, 2, LK_BREAKER_HALF_OPEN, LK_BREAKER_OPEN, since + LK_SEC(5));
  /* A record arriving after the max wait also ends the half-open period. */
  lk_fake_clock_set(&fc, since + LK_SEC(15));
  since = T();
  assert_int_equal(lk_breaker_acquire(b, since), LK_OK);
  lk_breaker_record(b, since + LK_SEC(5), 0, LK_F_NONE);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_OPEN);
  expect_event(&r, 4, LK_BREAKER_HALF_OPEN, LK_BREAKER_OPEN, since + LK_SEC(5));
  lk_breaker_free(b);
}

/* Drives a `small` breaker through one failed half-open period; returns the wait it got. */
static int64_t reopen(lk_breaker *b) {
  lk_breaker_metrics m = metrics(b);
  lk_fake_clock_set(&fc, m.open_until);
  calls(b, 3, LK_F_HTTP_500);
  m = metrics(b);
  assert_int_equal(m.state, LK_BREAKER_OPEN);
  return m.open_until - T();
}

static void wait_backoff_grows_and_resets(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  c.wait_backoff = true;
  c.backoff.kind = LK_BACKOFF_EXPONENTIAL;
  c.backoff.base = LK_SEC(1);
  c.backoff.max = LK_SEC(8);
  c.backoff.jitter = LK_JITTER_NONE;
  lk_breaker *b = make(&c);
  trip(b);
  assert_int_equal(metrics(b).open_until - T(), LK_SEC(1));
  const int64_t expect[] = {LK_SEC(2), LK_SEC(4), LK_SEC(8), LK_SEC(8)};
  for (int i = 0; i < 4; i++)
    assert_int_equal(reopen(b), expect[i]);
  assert_int_equal(metrics(b).openings, 5);
  /* Close it: the next opening waits the base again. */
  lk_fake_clock_set(&fc, metrics(b).open_until);
  calls(b, 3, LK_F_NONE);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_CLOSED);
  trip(b);
  assert_int_equal(metrics(b).openings, 1);
  assert_int_equal(metrics(b).open_until - T(), LK_SEC(1));
  lk_breaker_free(b);
}

static void wait_backoff_jitter_seeded(void **state) {
  (void)state;
  events r = {0};
  lk_rand_fast rng, replay;
  lk_rand_fast_seeded(&rng, 42);
  lk_rand_fast_seeded(&replay, 42);
  lk_breaker_config c = small(&r);
  c.wait_backoff = true;
  c.backoff.base = LK_SEC(1);
  c.backoff.max = LK_SEC(30);
  c.backoff.jitter = LK_JITTER_FULL;
  c.rng = &rng.base;
  lk_breaker *b = make(&c);
  trip(b);
  int64_t prev = lk_backoff_delay(&c.backoff, 1, 0, &replay.base);
  assert_int_equal(metrics(b).open_until - T(), prev);
  for (int n = 2; n <= 6; n++) {
    int64_t want = lk_backoff_delay(&c.backoff, n, prev, &replay.base);
    int64_t got = reopen(b);
    assert_int_equal(got, want);
    assert_true(got >= 0 && got <= lk_backoff_base_delay(&c.backoff, n));
    prev = want;
  }
  lk_breaker_free(b);
}

/* --- outcome classification ------------------------------------------------------------------- */

static void ignored_kinds(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  lk_breaker *b = make(&c);
  calls(b, 10, LK_F_CANCELLED);
  calls(b, 10, LK_F_BULKHEAD_FULL);
  lk_breaker_metrics m = metrics(b);
  assert_int_equal(m.calls, 0);
  assert_int_equal(m.state, LK_BREAKER_CLOSED);
  trip(b);
  advance(LK_SEC(10));
  for (int i = 0; i < 3; i++)
    assert_int_equal(lk_breaker_acquire(b, T()), LK_OK);
  assert_int_equal(metrics(b).half_open_left, 0);
  lk_breaker_record(b, T(), 0, LK_F_CANCELLED); /* gives its permission back */
  m = metrics(b);
  assert_int_equal(m.half_open_left, 1);
  assert_int_equal(m.calls, 0);
  lk_breaker_free(b);
}

static void failure_masks(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  c.failures = LK_FAILURE_BIT(LK_F_HTTP_503);
  c.ignore = LK_FAILURE_BIT(LK_F_HTTP_504) | LK_FAILURE_BIT(LK_F_HTTP_503); /* ignore wins */
  lk_breaker *b = make(&c);
  lk_breaker_transition(b, LK_BREAKER_METRICS_ONLY, T());
  call(b, 0, LK_F_HTTP_500); /* not listed: a success */
  call(b, 0, LK_F_HTTP_503); /* ignored */
  call(b, 0, LK_F_HTTP_504); /* ignored */
  lk_breaker_metrics m = metrics(b);
  assert_int_equal(m.calls, 1);
  assert_int_equal(m.failed, 0);
  lk_breaker_free(b);
  lk_breaker_config_init_default(&c);
  b = make(&c);
  lk_breaker_transition(b, LK_BREAKER_METRICS_ONLY, T());
  call(b, 0, LK_F_CLIENT_4XX);                       /* success */
  call(b, 0, LK_F_HTTP_408);                         /* failure */
  call(b, 0, (lk_failure)(LK_F__COUNT + 3));         /* unknown: failure */
  call(b, 0, LK_F_NONE);                             /* success */
  m = metrics(b);
  assert_int_equal(m.calls, 4);
  assert_int_equal(m.failed, 2);
  lk_breaker_free(b);
}

/* --- special states and manual control -------------------------------------------------------- */

static void disabled_state(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  lk_breaker *b = make(&c);
  calls(b, 3, LK_F_HTTP_500);
  assert_int_equal(lk_breaker_transition(b, LK_BREAKER_DISABLED, T()), LK_OK);
  calls(b, 100, LK_F_HTTP_500);
  lk_breaker_metrics m = metrics(b);
  assert_int_equal(m.state, LK_BREAKER_DISABLED);
  assert_int_equal(m.calls, 3); /* nothing recorded */
  assert_int_equal(m.not_permitted, 0);
  assert_int_equal(r.n, 1);
  expect_event(&r, 0, LK_BREAKER_CLOSED, LK_BREAKER_DISABLED, T());
  lk_breaker_release(b); /* harmless */
  assert_int_equal(lk_breaker_transition(b, LK_BREAKER_CLOSED, T()), LK_OK);
  assert_int_equal(metrics(b).calls, 0);
  lk_breaker_free(b);
}

static void forced_open_state(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  lk_breaker *b = make(&c);
  assert_int_equal(lk_breaker_transition(b, LK_BREAKER_FORCED_OPEN, T()), LK_OK);
  for (int i = 0; i < 5; i++) {
    advance(LK_SEC(3600)); /* no wait ever ends it */
    assert_int_equal(lk_breaker_acquire(b, T()), LK_EBREAKER_OPEN);
  }
  lk_breaker_record(b, T(), 0, LK_F_HTTP_500);
  lk_breaker_metrics m = metrics(b);
  assert_int_equal(m.state, LK_BREAKER_FORCED_OPEN);
  assert_int_equal(m.not_permitted, 5);
  assert_int_equal(m.calls, 0);
  assert_int_equal(m.open_until, 0);
  assert_int_equal(lk_breaker_transition(b, LK_BREAKER_CLOSED, T()), LK_OK);
  assert_int_equal(lk_breaker_acquire(b, T()), LK_OK);
  lk_breaker_free(b);
}

static void metrics_only_state(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  lk_breaker *b = make(&c);
  calls(b, 5, LK_F_HTTP_500);
  assert_int_equal(lk_breaker_transition(b, LK_BREAKER_METRICS_ONLY, T()), LK_OK);
  assert_int_equal(metrics(b).calls, 0); /* a fresh window */
  calls(b, 30, LK_F_HTTP_500);
  lk_breaker_metrics m = metrics(b);
  assert_int_equal(m.state, LK_BREAKER_METRICS_ONLY);
  assert_int_equal(m.calls, 10);
  assert_true(m.failure_rate == 100.0);
  assert_int_equal(r.n, 1);
  lk_breaker_free(b);
}

static void manual_transitions_every_pair(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  lk_breaker *b = make(&c);
  uint64_t transitions = 0;
  for (int from = 0; from <= LK_BREAKER_METRICS_ONLY; from++) {
    for (int to = 0; to <= LK_BREAKER_METRICS_ONLY; to++) {
      assert_int_equal(lk_breaker_transition(b, (lk_breaker_state)from, T()), LK_OK);
      int before = r.n;
      advance(LK_MS(1));
      assert_int_equal(lk_breaker_transition(b, (lk_breaker_state)to, T()), LK_OK);
      transitions += 2;
      lk_breaker_metrics m = metrics(b);
      assert_int_equal(m.state, to);
      assert_int_equal(m.transitions, transitions);
      expect_event(&r, before, (lk_breaker_state)from, (lk_breaker_state)to, T());
      if (to == LK_BREAKER_OPEN)
        assert_int_equal(m.open_until, T() + LK_SEC(10));
      if (to == LK_BREAKER_HALF_OPEN)
        assert_int_equal(m.half_open_left, 3);
      int expect_ok = to != LK_BREAKER_OPEN && to != LK_BREAKER_FORCED_OPEN;
      assert_int_equal(lk_breaker_acquire(b, T()) == LK_OK, expect_ok);
      r.n = 0;
    }
  }
  assert_int_equal(lk_breaker_transition(b, (lk_breaker_state)6, T()), LK_EINVAL);
  assert_int_equal(lk_breaker_transition(b, (lk_breaker_state)-1, T()), LK_EINVAL);
  lk_breaker_free(b);
}

static void reset_clears(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  lk_breaker *b = make(&c);
  trip(b);
  assert_int_equal(lk_breaker_acquire(b, T()), LK_EBREAKER_OPEN);
  lk_breaker_reset(b, T());
  lk_breaker_metrics m = metrics(b);
  assert_int_equal(m.state, LK_BREAKER_CLOSED);
  assert_int_equal(m.not_permitted, 0);
  assert_int_equal(m.openings, 0);
  assert_int_equal(m.calls, 0);
  expect_event(&r, 1, LK_BREAKER_OPEN, LK_BREAKER_CLOSED, T());
  lk_breaker_free(b);
}

/* --- permits ---------------------------------------------------------------------------------- */

static void permit_exactness(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  lk_breaker *b = make(&c);
  lk_breaker_permit closed_p, a, bp;
  assert_int_equal(lk_breaker_acquire_permit(b, T(), &closed_p), LK_OK);
  assert_int_equal(closed_p.state, LK_BREAKER_CLOSED);
  lk_breaker_transition(b, LK_BREAKER_HALF_OPEN, T()); /* period A */
  assert_int_equal(lk_breaker_acquire_permit(b, T(), &a), LK_OK);
  assert_int_equal(a.state, LK_BREAKER_HALF_OPEN);
  /* A call admitted in CLOSED is not a probe: its outcome does not count in HALF_OPEN. */
  lk_breaker_record_permit(b, &closed_p, T(), 0, LK_F_HTTP_500);
  assert_int_equal(metrics(b).calls, 0);
  lk_breaker_transition(b, LK_BREAKER_OPEN, T());
  lk_breaker_transition(b, LK_BREAKER_HALF_OPEN, T()); /* period B */
  assert_int_equal(lk_breaker_acquire_permit(b, T(), &bp), LK_OK);
  assert_true(bp.period > a.period);
  assert_int_equal(metrics(b).half_open_left, 2);
  lk_breaker_release_permit(b, &a); /* A's permission does not come back into B */
  assert_int_equal(metrics(b).half_open_left, 2);
  lk_breaker_record_permit(b, &a, T(), 0, LK_F_HTTP_500); /* nor does A's outcome */
  assert_int_equal(metrics(b).calls, 0);
  lk_breaker_record_permit(b, &bp, T(), 0, LK_F_HTTP_500);
  assert_int_equal(metrics(b).calls, 1);
  lk_breaker_release(b); /* the plain release credits the current period */
  assert_int_equal(metrics(b).half_open_left, 3);
  /* An ignored kind with a permit gives it back to its own period only. */
  assert_int_equal(lk_breaker_acquire_permit(b, T(), &bp), LK_OK);
  lk_breaker_record_permit(b, &bp, T(), 0, LK_F_CANCELLED);
  assert_int_equal(metrics(b).half_open_left, 3);
  /* A late outcome from before a transition does not count in the new window (it would count
   * as evidence of a period it was not part of); a permit of the current period does. */
  lk_breaker_transition(b, LK_BREAKER_CLOSED, T());
  lk_breaker_record_permit(b, &a, T(), 0, LK_F_HTTP_500);
  lk_breaker_record_permit(b, &closed_p, T(), 0, LK_F_NONE);
  assert_int_equal(metrics(b).calls, 0);
  lk_breaker_permit now_p;
  assert_int_equal(lk_breaker_acquire_permit(b, T(), &now_p), LK_OK);
  lk_breaker_record_permit(b, &now_p, T(), 0, LK_F_HTTP_500);
  assert_int_equal(metrics(b).calls, 1);
  assert_int_equal(metrics(b).failed, 1);
  lk_breaker_free(b);
}

static void state_names_and_parse(void **state) {
  (void)state;
  const char *names[] = {"CLOSED",   "OPEN",        "HALF_OPEN",
                         "DISABLED", "FORCED_OPEN", "METRICS_ONLY"};
  for (int i = 0; i < 6; i++) {
    assert_string_equal(lk_breaker_state_name((lk_breaker_state)i), names[i]);
    lk_breaker_state s;
    assert_int_equal(lk_breaker_state_parse(names[i], &s), LK_OK);
    assert_int_equal(s, i);
  }
  assert_string_equal(lk_breaker_state_name((lk_breaker_state)9), "UNKNOWN");
  lk_breaker_state s;
  assert_int_equal(lk_breaker_state_parse("half-open", &s), LK_OK);
  assert_int_equal(s, LK_BREAKER_HALF_OPEN);
  assert_int_equal(lk_breaker_state_parse("Forced_Open", &s), LK_OK);
  assert_int_equal(s, LK_BREAKER_FORCED_OPEN);
  assert_int_equal(lk_breaker_state_parse("OPENX", &s), LK_EINVAL);
  assert_int_equal(lk_breaker_state_parse("OPE", &s), LK_EINVAL);
  assert_int_equal(lk_breaker_state_parse("", &s), LK_EINVAL);
  assert_int_equal(lk_breaker_state_parse(NULL, &s), LK_EINVAL);
}

/* --- no allocation per call ------------------------------------------------------------------- */

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && !defined(LK_NO_ALLOC_HOOK)
#define COUNTS_ALLOCATIONS 1
#endif

static void no_allocation_per_call(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  c.wait_open = LK_MS(50);
  lk_breaker *count = make(&c);
  c.window = LK_BREAKER_WINDOW_TIME;
  c.minimum_calls = 5;
  lk_breaker *timed = make(&c);
  lk_breaker *bs[2] = {count, timed};
  lk_test_alloc_count_start();
  int64_t now = T();
  int ok = 0;
  for (int i = 0; i < 50000; i++) {
    now += LK_MS(3);
    for (int k = 0; k < 2; k++) {
      lk_breaker_permit p;
      if (lk_breaker_acquire_permit(bs[k], now, &p) != LK_OK)
        continue;
      ok++;
      if (i % 7 == 0)
        lk_breaker_release_permit(bs[k], &p);
      else
        lk_breaker_record_permit(bs[k], &p, now, i % 5 == 0 ? LK_SEC(2) : 0,
                                 i % 3 != 0 ? LK_F_HTTP_503 : LK_F_NONE);
      r.n = 0;
    }
  }
  uint64_t allocs = lk_test_alloc_count_stop();
#ifdef COUNTS_ALLOCATIONS
  assert_int_equal(allocs, 0);
#else
  (void)allocs;
#endif
  assert_true(ok > 1000);
  lk_breaker_metrics m;
  lk_breaker_metrics_get(count, now, &m);
  assert_true(m.transitions > 3); /* the loop went through the whole state machine */
  lk_breaker_free(count);
  lk_breaker_free(timed);
}


/* --- beyond Resilience4j: early half-open verdict, retry_at, 429 ----------------------------- */

static void half_open_decides_early(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  c.half_open_decide_early = true;
  c.permitted_half_open = 5;
  lk_breaker *b = make(&c);
  trip(b);
  advance(LK_SEC(10));
  /* Two probes out; one will hang. Three successes settle it: 2 failures of 5 < 50 %. */
  lk_breaker_permit slow;
  assert_int_equal(lk_breaker_acquire_permit(b, T(), &slow), LK_OK);
  call(b, 0, LK_F_NONE);
  call(b, 0, LK_F_NONE);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_HALF_OPEN);
  call(b, 0, LK_F_NONE);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_CLOSED);
  /* The hung probe's late outcome is not a probe of the new CLOSED period's tally. */
  lk_breaker_record_permit(b, &slow, T(), LK_MS(300), LK_F_READ_TIMEOUT);
  assert_int_equal(metrics(b).calls, 0);
  /* Three failures of five settle the other way. */
  trip(b);
  advance(LK_SEC(10));
  calls(b, 2, LK_F_HTTP_503);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_HALF_OPEN);
  call(b, 0, LK_F_HTTP_503);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_OPEN);
  lk_breaker_free(b);
}

static void retry_at_tells_when(void **state) {
  (void)state;
  events r = {0};
  lk_breaker_config c = small(&r);
  lk_breaker *b = make(&c);
  assert_int_equal(lk_breaker_retry_at(b, T()), T());
  trip(b);
  int64_t opened = T();
  advance(LK_SEC(3));
  assert_int_equal(lk_breaker_retry_at(b, T()), opened + LK_SEC(10));
  advance(LK_SEC(7));
  assert_int_equal(lk_breaker_retry_at(b, T()), T()); /* the next acquire is a probe */
  for (int i = 0; i < 3; i++)
    assert_int_equal(lk_breaker_acquire(b, T()), LK_OK);
  assert_int_equal(lk_breaker_retry_at(b, T()), LK_BREAKER_RETRY_UNKNOWN);
  lk_breaker_release(b);
  assert_int_equal(lk_breaker_retry_at(b, T()), T());
  lk_breaker_transition(b, LK_BREAKER_FORCED_OPEN, T());
  assert_int_equal(lk_breaker_retry_at(b, T()), INT64_MAX);
  lk_breaker_free(b);
  /* With a half-open time limit, a full half-open period ends at a known time. */
  c.max_wait_half_open = LK_SEC(5);
  b = make(&c);
  trip(b);
  advance(LK_SEC(10));
  int64_t since = T();
  for (int i = 0; i < 3; i++)
    assert_int_equal(lk_breaker_acquire(b, T()), LK_OK);
  assert_int_equal(lk_breaker_retry_at(b, T()), since + LK_SEC(5));
  lk_breaker_free(b);
}

static void too_many_requests_ignored_by_default(void **state) {
  (void)state;
  lk_breaker_config c;
  lk_breaker_config_init_default(&c);
  assert_true(c.half_open_decide_early);
  assert_false(c.failures & LK_FAILURE_BIT(LK_F_TOO_MANY_REQUESTS));
  assert_true(c.ignore & LK_FAILURE_BIT(LK_F_TOO_MANY_REQUESTS));
  c.window_size = 10;
  c.minimum_calls = 10;
  lk_breaker *b = make(&c);
  calls(b, 50, LK_F_TOO_MANY_REQUESTS); /* a throttling server is not a failing one */
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_CLOSED);
  assert_int_equal(metrics(b).calls, 0);
  lk_breaker_free(b);
}

/* The refusal pattern of `linkd demo` (faults scenario), on a fake clock: 250 calls/s, 16 %
 * background faults (3 % 429, 2 % stalls cut at 300 ms, 11 % quick 5xx), an outage of 0.36 s
 * (all 503) starting at 0.96 s, the demo's breaker (100 calls, 50 of them at least, 50 %, 100 ms
 * open, 5 probes), every call with a 2 s deadline and the demo's retries. Before the fix
 * (Resilience4j: a half-open period waits for its slowest probe, 429 counts as a failure, a
 * refused call fails at once) the breaker refused more calls than the outage covered (the demo
 * itself, with libraryd's real latencies, refused about twice as many); after it (early verdict, 429
 * ignored, a refused call waits for lk_breaker_retry_at while its deadline allows) almost none. */
typedef struct sim_call {
  int64_t arrive, wake, end;
  lk_breaker_permit permit;
  lk_failure kind;
  int attempts;
  bool admitted, done;
} sim_call;

static int sim_refused(bool fixed, int *outage_calls) {
  enum { N = 600 };
  static sim_call calls_[N];
  memset(calls_, 0, sizeof calls_);
  lk_breaker_config c;
  lk_breaker_config_init_default(&c);
  c.window_size = 100;
  c.minimum_calls = 50;
  c.failure_rate_threshold = 50;
  c.wait_open = LK_MS(100);
  c.permitted_half_open = 5;
  if (!fixed) {
    c.half_open_decide_early = false;
    c.failures |= LK_FAILURE_BIT(LK_F_TOO_MANY_REQUESTS);
    c.ignore &= ~LK_FAILURE_BIT(LK_F_TOO_MANY_REQUESTS);
  }
  lk_breaker *b = make(&c);
  lk_rand_fast rng;
  lk_rand_fast_seeded(&rng, 1);
  const int64_t t0 = LK_SEC(1000), outage_from = LK_MS(960), outage_to = LK_MS(1320);
  int refused = 0;
  *outage_calls = 0;
  for (int64_t t = 0; t <= LK_SEC(5); t += LK_MS(1)) {
    int64_t now = t0 + t;
    for (int i = 0; i < N; i++) { /* completions */
      sim_call *k = &calls_[i];
      if (k->admitted && !k->done && k->end <= now) {
        lk_breaker_record_permit(b, &k->permit, now, k->end - k->wake, k->kind);
        k->admitted = false;
        /* the demo's retries: 4 attempts, 50 ms doubling, a 429's Retry-After of 1 s */
        int64_t delay = k->kind == LK_F_TOO_MANY_REQUESTS ? LK_SEC(1) : LK_MS(50) << k->attempts;
        if (k->kind == LK_F_NONE || k->attempts >= 4 || now + delay > k->arrive + LK_SEC(2))
          k->done = true;
        else
          k->wake = now + delay;
      }
    }
    if (t % LK_MS(4) == 0 && t / LK_MS(4) < N) { /* an arrival */
      sim_call *k = &calls_[t / LK_MS(4)];
      k->arrive = k->wake = now;
      if (t >= outage_from && t < outage_to)
        (*outage_calls)++;
    }
    for (int i = 0; i < N && i <= t / LK_MS(4); i++) { /* calls due to ask the breaker */
      sim_call *k = &calls_[i];
      if (k->admitted || k->done || k->wake > now)
        continue;
      if (lk_breaker_acquire_permit(b, now, &k->permit) == LK_OK) {
        k->admitted = true;
        k->attempts++;
        k->wake = now;
        uint64_t x = lk_rand_below(&rng.base, 100);
        bool outage = now - t0 >= outage_from && now - t0 < outage_to;
        k->kind = outage ? LK_F_HTTP_503
                         : x < 3    ? LK_F_TOO_MANY_REQUESTS
                         : x < 5    ? LK_F_READ_TIMEOUT
                         : x < 16   ? LK_F_HTTP_503
                                    : LK_F_NONE;
        k->end = now + (k->kind == LK_F_READ_TIMEOUT ? LK_MS(300) : LK_MS(1));
        continue;
      }
      int64_t at = lk_breaker_retry_at(b, now);
      if (at == LK_BREAKER_RETRY_UNKNOWN)
        at = now + LK_MS(10);
      if (!fixed || at + LK_MS(50) > k->arrive + LK_SEC(2)) {
        k->done = true; /* refused: nothing sent */
        refused++;
      } else {
        k->wake = at;
      }
    }
  }
  lk_breaker_free(b);
  return refused;
}

static void demo_refusal_pattern_fixed(void **state) {
  (void)state;
  int outage = 0;
  int before = sim_refused(false, &outage);
  assert_true(outage == 90);
  print_message("breaker refusals: before the fix %d, outage calls %d\n", before, outage);
  assert_true(before > outage); /* the demo's pattern: more refused than the outage covered */
  int after = sim_refused(true, &outage);
  print_message("breaker refusals: after the fix %d\n", after);
  assert_true(after <= outage / 10);
}

/* --- transition callbacks outside the lock ---------------------------------------------------- */

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Waits (bounded: ~5 s) until *flag reaches `want`. */
static bool wait_flag(_Atomic int *flag, int want) {
  for (int i = 0; i < 5000; i++) {
    if (atomic_load(flag) >= want)
      return true;
    sleep_ms(1);
  }
  return false;
}

/* A callback that re-enters its breaker: event k runs step k of a script. Checked on the main
 * thread afterwards (cmocka's asserts must not run on another thread). */
typedef struct reenter_ctx {
  lk_breaker *b;
  events r;
  int depth, max_depth;
  lk_breaker_state state_after[8]; /* the state right after step k's re-entrant calls */
  int delivered_after[8];          /* callbacks delivered by then */
  int bad_calls;                   /* re-entrant calls that did not return LK_OK */
  _Atomic int done;
} reenter_ctx;

static void reenter_transition(void *ctx, lk_breaker_state from, lk_breaker_state to, int64_t now) {
  reenter_ctx *c = ctx;
  int k = c->r.n;
  if (++c->depth > c->max_depth)
    c->max_depth = c->depth;
  on_transition(&c->r, from, to, now);
  switch (k) {
  case 0: /* CLOSED -> OPEN, made by the test */
    c->bad_calls += lk_breaker_transition(c->b, LK_BREAKER_HALF_OPEN, now + 1) != LK_OK;
    break;
  case 1: /* OPEN -> HALF_OPEN */ lk_breaker_reset(c->b, now + 1); break;
  case 2: /* HALF_OPEN -> CLOSED: two transitions from one callback, one by recording */
    for (int i = 0; i < 10; i++) {
      c->bad_calls += lk_breaker_acquire(c->b, now + 1) != LK_OK;
      lk_breaker_record(c->b, now + 1, 0, LK_F_HTTP_500);
    }
    c->bad_calls += lk_breaker_transition(c->b, LK_BREAKER_FORCED_OPEN, now + 2) != LK_OK;
    break;
  case 4: /* OPEN -> FORCED_OPEN (case 3, CLOSED -> OPEN, does nothing) */
    c->bad_calls += lk_breaker_transition(c->b, LK_BREAKER_CLOSED, now + 1) != LK_OK;
    break;
  default: break;
  }
  if (k < 8) {
    c->state_after[k] = lk_breaker_get_state(c->b);
    c->delivered_after[k] = c->r.n;
  }
  c->depth--;
}

static void *reenter_worker(void *arg) {
  reenter_ctx *c = arg;
  lk_breaker_transition(c->b, LK_BREAKER_OPEN, LK_SEC(1000));
  atomic_store(&c->done, 1);
  return NULL;
}

static void callback_may_reenter(void **state) {
  (void)state;
  reenter_ctx *c = calloc(1, sizeof *c);
  assert_non_null(c);
  lk_breaker_config cfg = small(&c->r);
  cfg.on_transition = reenter_transition;
  cfg.on_transition_ctx = c;
  c->b = make(&cfg);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, reenter_worker, c), 0);
  /* Under the lock, the first re-entrant call deadlocked: fail instead of hanging. */
  if (!wait_flag(&c->done, 1))
    fail_msg("a callback re-entering the breaker deadlocked");
  assert_int_equal(pthread_join(t, NULL), 0);
  int64_t t0 = LK_SEC(1000);
  /* Every transition exactly once, in order, all delivered before the outer call returned. */
  assert_int_equal(c->r.n, 6);
  expect_event(&c->r, 0, LK_BREAKER_CLOSED, LK_BREAKER_OPEN, t0);
  expect_event(&c->r, 1, LK_BREAKER_OPEN, LK_BREAKER_HALF_OPEN, t0 + 1);
  expect_event(&c->r, 2, LK_BREAKER_HALF_OPEN, LK_BREAKER_CLOSED, t0 + 2);
  expect_event(&c->r, 3, LK_BREAKER_CLOSED, LK_BREAKER_OPEN, t0 + 3);
  expect_event(&c->r, 4, LK_BREAKER_OPEN, LK_BREAKER_FORCED_OPEN, t0 + 4);
  expect_event(&c->r, 5, LK_BREAKER_FORCED_OPEN, LK_BREAKER_CLOSED, t0 + 5);
  assert_int_equal(c->bad_calls, 0);
  /* Never nested: a transition made inside the callback is delivered after it returns... */
  assert_int_equal(c->max_depth, 1);
  for (int k = 0; k < 6; k++)
    assert_int_equal(c->delivered_after[k], k + 1);
  /* ...but the state changed at once. */
  assert_int_equal(c->state_after[0], LK_BREAKER_HALF_OPEN);
  assert_int_equal(c->state_after[1], LK_BREAKER_CLOSED);
  assert_int_equal(c->state_after[2], LK_BREAKER_FORCED_OPEN);
  assert_int_equal(c->state_after[3], LK_BREAKER_FORCED_OPEN);
  assert_int_equal(c->state_after[4], LK_BREAKER_CLOSED);
  lk_breaker_metrics m = metrics(c->b);
  assert_int_equal(m.transitions, 6);
  assert_int_equal(m.transitions_undelivered, 0);
  assert_int_equal(m.state, LK_BREAKER_CLOSED);
  lk_breaker_free(c->b);
  free(c);
}

/* A callback that sleeps 50 ms on one thread while another thread records half-open outcomes
 * (each taking the breaker's lock). */
#define SLOW_RECORDS 200

typedef struct slow_ctx {
  lk_breaker *b;
  _Atomic int sleeping; /* 1 while the callback sleeps, 2 after */
  _Atomic int records;  /* recorded by the other thread */
  int during;           /* of which while the callback slept */
  int callbacks;
} slow_ctx;

static void slow_transition(void *ctx, lk_breaker_state from, lk_breaker_state to, int64_t now) {
  (void)from, (void)now;
  slow_ctx *c = ctx;
  c->callbacks++;
  if (to != LK_BREAKER_HALF_OPEN)
    return;
  int before = atomic_load(&c->records);
  atomic_store(&c->sleeping, 1);
  sleep_ms(50);
  c->during = atomic_load(&c->records) - before;
  atomic_store(&c->sleeping, 2);
}

static void *slow_worker(void *arg) {
  slow_ctx *c = arg;
  if (!wait_flag(&c->sleeping, 1))
    return NULL;
  int64_t now = LK_SEC(1000);
  for (int i = 0; i < 500000 && atomic_load(&c->sleeping) == 1; i++) {
    if (lk_breaker_acquire(c->b, now) != LK_OK)
      break;
    lk_breaker_record(c->b, now, 0, LK_F_NONE);
    atomic_fetch_add(&c->records, 1);
  }
  return NULL;
}

static void slow_callback_blocks_no_other_thread(void **state) {
  (void)state;
  slow_ctx c = {0};
  lk_breaker_config cfg;
  lk_breaker_config_init_default(&cfg);
  cfg.permitted_half_open = 1000000; /* the probes never reach a verdict */
  cfg.half_open_decide_early = false;
  cfg.on_transition = slow_transition;
  cfg.on_transition_ctx = &c;
  c.b = make(&cfg);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, slow_worker, &c), 0);
  assert_int_equal(lk_breaker_transition(c.b, LK_BREAKER_HALF_OPEN, LK_SEC(1000)), LK_OK);
  assert_int_equal(pthread_join(t, NULL), 0);
  print_message("records on another thread while the callback slept 50 ms: %d\n", c.during);
  assert_int_equal(c.callbacks, 1);
  assert_true(c.during >= SLOW_RECORDS);
  assert_int_equal(lk_breaker_get_state(c.b), LK_BREAKER_HALF_OPEN);
  lk_breaker_free(c.b);
}

/* The documented bound on pending callbacks (lk_breaker_transition_fn). */
#define QUEUE_MAX 65536
#define OVERFLOW 10

typedef struct flood_ctx {
  lk_breaker *b;
  _Atomic int blocked; /* 1: the first callback waits for the flood */
  _Atomic int flooded; /* 1: the other thread made its transitions */
  int64_t *nows;
  int n;
} flood_ctx;

static void flood_transition(void *ctx, lk_breaker_state from, lk_breaker_state to, int64_t now) {
  (void)from, (void)to;
  flood_ctx *c = ctx;
  if (c->n < QUEUE_MAX + OVERFLOW + 1)
    c->nows[c->n] = now;
  if (c->n++ == 0) {
    atomic_store(&c->blocked, 1);
    wait_flag(&c->flooded, 1);
  }
}

static void *flood_worker(void *arg) {
  flood_ctx *c = arg;
  if (wait_flag(&c->blocked, 1))
    for (int i = 1; i <= QUEUE_MAX + OVERFLOW; i++)
      lk_breaker_transition(c->b, i % 2 ? LK_BREAKER_CLOSED : LK_BREAKER_OPEN, i);
  atomic_store(&c->flooded, 1);
  return NULL;
}

static void stalled_callback_drops_and_counts(void **state) {
  (void)state;
  flood_ctx c = {0};
  c.nows = calloc(QUEUE_MAX + OVERFLOW + 1, sizeof *c.nows);
  assert_non_null(c.nows);
  lk_breaker_config cfg;
  lk_breaker_config_init_default(&cfg);
  cfg.on_transition = flood_transition;
  cfg.on_transition_ctx = &c;
  c.b = make(&cfg);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, flood_worker, &c), 0);
  lk_breaker_transition(c.b, LK_BREAKER_OPEN, 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  /* The stalled callback held no lock: every transition happened. The queue kept the first
   * QUEUE_MAX (delivered in order once the callback returned) and counted the rest. */
  lk_breaker_metrics m = metrics(c.b);
  assert_int_equal(m.transitions, 1 + QUEUE_MAX + OVERFLOW);
  assert_int_equal(m.state, LK_BREAKER_OPEN);
  assert_int_equal(m.transitions_undelivered, OVERFLOW);
  assert_int_equal(c.n, 1 + QUEUE_MAX);
  for (int i = 0; i < c.n; i++)
    assert_int_equal(c.nows[i], i);
  lk_breaker_free(c.b);
  free(c.nows);
}

/* A breaker declared single-threaded gives the same answers as a shared one: the same seeded
 * sequence of acquires, records (failures in bursts, so it opens, probes and closes again, some
 * slow, some ignored), releases and resets, for a count and a time window, with and without a
 * half-open time limit, on a twin declared single-threaded after its first calls (its window's
 * position must carry over). Both must also have moved through every state the sequence can reach. */
static void single_thread_same_results(void **state) {
  (void)state;
  for (int kind = 0; kind < 4; kind++) {
    events ra = {0}, rb = {0};
    lk_breaker_config ca = small(&ra), cb = small(&rb);
    if (kind & 1) {
      ca.window = cb.window = LK_BREAKER_WINDOW_TIME;
      ca.window_size = cb.window_size = 3; /* seconds */
      ca.minimum_calls = cb.minimum_calls = 5;
    }
    if (kind & 2) {
      ca.max_wait_half_open = cb.max_wait_half_open = LK_SEC(2);
      ca.half_open_decide_early = cb.half_open_decide_early = true;
    }
    ca.wait_open = cb.wait_open = LK_SEC(1);
    lk_breaker *a = make(&ca), *b = make(&cb);
    lk_rand_fast g;
    lk_rand_fast_seeded(&g, 11 + (uint64_t)kind);
    int64_t now = LK_SEC(1000);
    for (int i = 0; i < 20000; i++) {
      if (i == 37)
        lk_breaker_set_single_thread(b);
      if (i % 997 == 600) { /* a reset within a second of records: nothing from before counts */
        lk_breaker_reset(a, now);
        lk_breaker_reset(b, now);
      }
      uint64_t r = lk_rand_next64(&g.base);
      bool bad = (i / 500) % 2 == 1; /* half a second of failures in every second */
      lk_breaker_permit pa, pb;
      int rca = lk_breaker_acquire_permit(a, now, &pa), rcb = lk_breaker_acquire_permit(b, now, &pb);
      assert_int_equal(rca, rcb);
      if (rca == LK_OK) {
        assert_int_equal(pa.state, pb.state);
        unsigned pick = (unsigned)(r % 16);
        lk_failure f = pick < (bad ? 12u : 1u) ? LK_F_HTTP_503 : pick == 15 ? LK_F_CANCELLED : LK_F_NONE;
        int64_t took = (r >> 8) % 8 == 0 ? LK_SEC(2) : LK_MS(5);
        if (pick == 14) {
          lk_breaker_release_permit(a, &pa);
          lk_breaker_release_permit(b, &pb);
        } else {
          lk_breaker_record_permit(a, &pa, now, took, f);
          lk_breaker_record_permit(b, &pb, now, took, f);
        }
      }
      now += LK_MS(2);
      lk_breaker_metrics ma, mb;
      assert_int_equal(lk_breaker_metrics_get(a, now, &ma), LK_OK);
      assert_int_equal(lk_breaker_metrics_get(b, now, &mb), LK_OK);
      assert_int_equal(ma.state, mb.state);
      assert_int_equal(ma.calls, mb.calls);
      assert_int_equal(ma.failed, mb.failed);
      assert_int_equal(ma.slow, mb.slow);
      assert_int_equal(ma.not_permitted, mb.not_permitted);
      assert_int_equal(ma.transitions, mb.transitions);
      assert_int_equal(ma.half_open_left, mb.half_open_left);
      assert_int_equal(ma.open_until, mb.open_until);
    }
    assert_int_equal(ra.n, rb.n);
    bool seen[8] = {false};
    for (int k = 0; k < ra.n; k++) {
      assert_int_equal(ra.e[k].to, rb.e[k].to);
      assert_int_equal(ra.e[k].now, rb.e[k].now);
      seen[ra.e[k].to] = true;
    }
    assert_true(seen[LK_BREAKER_OPEN] && seen[LK_BREAKER_HALF_OPEN] && seen[LK_BREAKER_CLOSED]);
    lk_breaker_free(a);
    lk_breaker_free(b);
  }
  lk_breaker_set_single_thread(NULL); /* a no-op */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(defaults_match_resilience4j, setup),
      cmocka_unit_test_setup(config_rejected, setup),
      cmocka_unit_test_setup(count_opens_at_failure_threshold, setup),
      cmocka_unit_test_setup(count_threshold_boundary, setup),
      cmocka_unit_test_setup(count_window_slides, setup),
      cmocka_unit_test_setup(window_matches_model, setup),
      cmocka_unit_test_setup(slow_calls_open, setup),
      cmocka_unit_test_setup(time_window_expiry, setup),
      cmocka_unit_test_setup(time_window_long_gap, setup),
      cmocka_unit_test_setup(min_calls_capped_for_count_window, setup),
      cmocka_unit_test_setup(open_rejects_then_half_open, setup),
      cmocka_unit_test_setup(half_open_permits_and_release, setup),
      cmocka_unit_test_setup(half_open_closes, setup),
      cmocka_unit_test_setup(half_open_reopens, setup),
      cmocka_unit_test_setup(half_open_boundary, setup),
      cmocka_unit_test_setup(half_open_slow_reopens, setup),
      cmocka_unit_test_setup(half_open_max_wait, setup),
      cmocka_unit_test_setup(wait_backoff_grows_and_resets, setup),
      cmocka_unit_test_setup(wait_backoff_jitter_seeded, setup),
      cmocka_unit_test_setup(ignored_kinds, setup),
      cmocka_unit_test_setup(failure_masks, setup),
      cmocka_unit_test_setup(disabled_state, setup),
      cmocka_unit_test_setup(forced_open_state, setup),
      cmocka_unit_test_setup(metrics_only_state, setup),
      cmocka_unit_test_setup(manual_transitions_every_pair, setup),
      cmocka_unit_test_setup(reset_clears, setup),
      cmocka_unit_test_setup(permit_exactness, setup),
      cmocka_unit_test_setup(state_names_and_parse, setup),
      cmocka_unit_test_setup(no_allocation_per_call, setup),
      cmocka_unit_test_setup(half_open_decides_early, setup),
      cmocka_unit_test_setup(retry_at_tells_when, setup),
      cmocka_unit_test_setup(too_many_requests_ignored_by_default, setup),
      cmocka_unit_test_setup(demo_refusal_pattern_fixed, setup),
      cmocka_unit_test_setup(callback_may_reenter, setup),
      cmocka_unit_test_setup(slow_callback_blocks_no_other_thread, setup),
      cmocka_unit_test_setup(stalled_callback_drops_and_counts, setup),
      cmocka_unit_test_setup(single_thread_same_results, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
