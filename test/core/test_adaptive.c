/* SPDX-License-Identifier: MIT */
/* Adaptive concurrency limit on a fake time line: AIMD and gradient shrink under rising latency
 * and grow back, bounds, cooldown, unused-limit rule, min-RTT window, bulkhead driving, bad
 * config, zero allocation. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <linkd/adaptive.h>
#include <linkd/error.h>

#include "testutil.h"

#include <math.h>
#include <stdlib.h>

static lk_adaptive_config base_cfg(lk_adaptive_kind kind) {
  lk_adaptive_config c;
  lk_adaptive_config_init_default(&c);
  c.kind = kind;
  c.initial_limit = 10;
  c.min_limit = 2;
  c.max_limit = 40;
  c.decrease_cooldown = 0;
  return c;
}

static lk_adaptive *make(const lk_adaptive_config *c) {
  lk_adaptive *a = NULL;
  const char *why = "unset";
  assert_int_equal(lk_adaptive_new(c, &a, &why), LK_OK);
  assert_null(why);
  assert_non_null(a);
  return a;
}

static void bad_config_rejected(void **state) {
  (void)state;
  lk_adaptive_config ok;
  lk_adaptive_config_init_default(&ok);
  assert_int_equal(lk_adaptive_config_validate(&ok, NULL), LK_OK);
  assert_int_equal(ok.kind, LK_ADAPTIVE_AIMD);
  assert_int_equal(ok.initial_limit, 20);
  lk_adaptive_config bad[16];
  int n = 0;
  for (int i = 0; i < 16; i++)
    bad[i] = ok;
  bad[n++].kind = (lk_adaptive_kind)7;
  bad[n++].min_limit = 0;
  bad[n].min_limit = 10, bad[n++].max_limit = 9;
  bad[n++].max_limit = LK_BULKHEAD_LIMIT_MAX + 1;
  bad[n++].initial_limit = 0;
  bad[n++].initial_limit = 201;
  bad[n++].backoff_ratio = 1.0;
  bad[n++].backoff_ratio = NAN;
  bad[n++].decrease_cooldown = -1;
  bad[n++].latency_target = -1;
  bad[n++].increase = 0.0;
  bad[n++].increase = INFINITY;
  bad[n++].smoothing = 0.0;
  bad[n++].tolerance = 0.5;
  bad[n++].queue_size = NAN;
  bad[n++].min_rtt_window = -1;
  for (int i = 0; i < n; i++) {
    const char *why = NULL;
    assert_int_equal(lk_adaptive_config_validate(&bad[i], &why), LK_ECONFIG);
    assert_non_null(why);
    lk_adaptive *a = (lk_adaptive *)&bad[i];
    assert_int_equal(lk_adaptive_new(&bad[i], &a, NULL), LK_ECONFIG);
    assert_null(a);
  }
  assert_int_equal(lk_adaptive_config_validate(NULL, NULL), LK_ECONFIG);
  assert_int_equal(lk_adaptive_new(&ok, NULL, NULL), LK_EINVAL);
  assert_int_equal(lk_adaptive_attach(NULL, NULL), LK_EINVAL);
  lk_adaptive_free(NULL);
}

static void aimd_additive_increase_and_cap(void **state) {
  (void)state;
  lk_adaptive_config c = base_cfg(LK_ADAPTIVE_AIMD);
  lk_adaptive *a = make(&c);
  int64_t now = LK_SEC(1);
  assert_int_equal(lk_adaptive_limit(a), 10);
  /* +1/limit per good sample: 10 samples at limit 10 add 1 minus a little (10/10, 1/10.1...). */
  for (int i = 0; i < 10; i++)
    lk_adaptive_record(a, now += LK_MS(1), LK_MS(5), LK_ADAPTIVE_SUCCESS);
  assert_int_equal(lk_adaptive_limit(a), 10);
  assert_int_equal(lk_adaptive_record(a, now += LK_MS(1), LK_MS(5), LK_ADAPTIVE_SUCCESS), 11);
  for (int i = 0; i < 5000; i++)
    lk_adaptive_record(a, now += LK_MS(1), LK_MS(5), LK_ADAPTIVE_SUCCESS);
  assert_int_equal(lk_adaptive_limit(a), 40); /* max_limit */
  lk_adaptive_free(a);
}

/* Latency rises over the target: the limit shrinks to the floor; latency recovers: it grows. */
static void aimd_shrinks_under_rising_latency_and_grows_back(void **state) {
  (void)state;
  lk_adaptive_config c = base_cfg(LK_ADAPTIVE_AIMD);
  c.latency_target = LK_MS(100);
  c.initial_limit = 30;
  lk_adaptive *a = make(&c);
  int64_t now = LK_SEC(1), prev = 30;
  assert_int_equal(lk_adaptive_record(a, now, LK_MS(100), LK_ADAPTIVE_SUCCESS), 30);
  /* Latency climbs 90 .. 190 ms; past 100 ms every sample cuts by 0.9. */
  for (int i = 0; i < 40; i++) {
    int64_t lim = lk_adaptive_record(a, now += LK_MS(1), LK_MS(90 + i * 5), LK_ADAPTIVE_SUCCESS);
    assert_true(lim <= prev);
    prev = lim;
  }
  assert_int_equal(lk_adaptive_limit(a), 2); /* min_limit */
  /* Back under the target: grows again. */
  for (int i = 0; i < 300; i++) {
    int64_t lim = lk_adaptive_record(a, now += LK_MS(1), LK_MS(20), LK_ADAPTIVE_SUCCESS);
    assert_true(lim >= prev);
    prev = lim;
  }
  assert_true(lk_adaptive_limit(a) >= 20);
  /* Errors are drops too: exact multiplicative decrease from a known estimate. */
  lk_adaptive_free(a);
  c.latency_target = 0;
  c.initial_limit = 20;
  a = make(&c);
  assert_int_equal(lk_adaptive_record(a, now, 0, LK_ADAPTIVE_DROP), 18);
  assert_int_equal(lk_adaptive_record(a, now, 0, LK_ADAPTIVE_DROP), 16); /* 16.2 */
  assert_int_equal(lk_adaptive_record(a, now, 0, LK_ADAPTIVE_IGNORE), 16);
  /* No target: any latency is fine. */
  assert_int_equal(lk_adaptive_record(a, now, LK_SEC(100), LK_ADAPTIVE_SUCCESS), 16);
  lk_adaptive_free(a);
}

static void cooldown_limits_decreases(void **state) {
  (void)state;
  lk_adaptive_config c = base_cfg(LK_ADAPTIVE_AIMD);
  c.initial_limit = 20;
  c.decrease_cooldown = LK_MS(100);
  lk_adaptive *a = make(&c);
  int64_t t = LK_SEC(3);
  assert_int_equal(lk_adaptive_record(a, t, 0, LK_ADAPTIVE_DROP), 18);
  /* A burst of failures from the same event is one signal. */
  for (int i = 0; i < 50; i++)
    assert_int_equal(lk_adaptive_record(a, t + LK_MS(99), 0, LK_ADAPTIVE_DROP), 18);
  assert_int_equal(lk_adaptive_record(a, t + LK_MS(100), 0, LK_ADAPTIVE_DROP), 16);
  lk_adaptive_free(a);
}

static void unused_limit_is_not_raised(void **state) {
  (void)state;
  lk_adaptive_config c = base_cfg(LK_ADAPTIVE_AIMD);
  c.initial_limit = 20;
  lk_adaptive *a = make(&c);
  int64_t t = LK_SEC(1);
  for (int i = 0; i < 200; i++)
    lk_adaptive_record_inflight(a, t += LK_MS(1), LK_MS(1), LK_ADAPTIVE_SUCCESS, 9);
  assert_int_equal(lk_adaptive_limit(a), 20);
  /* Nor lowered by a drop: one call in flight of 20 allowed did not cause it. */
  assert_int_equal(lk_adaptive_record_inflight(a, t, 0, LK_ADAPTIVE_DROP, 1), 20);
  /* In use (half of it in flight), a drop lowers it. */
  assert_int_equal(lk_adaptive_record_inflight(a, t, 0, LK_ADAPTIVE_DROP, 10), 18);
  /* Half used is used: 10 in flight lets it grow, until the limit is twice that. */
  for (int i = 0; i < 200; i++)
    lk_adaptive_record_inflight(a, t += LK_MS(1), LK_MS(1), LK_ADAPTIVE_SUCCESS, 10);
  assert_int_equal(lk_adaptive_limit(a), 20);
  lk_adaptive_free(a);
}

/* A background error rate at low load (the demo's faults scenario: one call in flight, a tenth
 * of them failing, now and then a stall that holds four) leaves the limit where it is. Lowered by
 * every drop and raised only when used, it fell to min_limit within seconds and then held calls
 * back behind stalled ones. Once the load uses the limit, the same drops lower it. */
static void background_errors_at_low_load_do_not_ratchet(void **state) {
  (void)state;
  lk_adaptive_config c = base_cfg(LK_ADAPTIVE_AIMD);
  c.initial_limit = 16;
  c.min_limit = 2;
  c.max_limit = 64;
  c.latency_target = LK_MS(100);
  lk_adaptive *a = make(&c);
  int64_t t = LK_SEC(1);
  for (int i = 0; i < 5000; i++) { /* 20 s at 250 samples/s */
    t += LK_MS(4);
    int64_t inflight = i % 50 < 5 ? 4 : 1;
    lk_adaptive_outcome o = i % 10 == 0 ? LK_ADAPTIVE_DROP : LK_ADAPTIVE_SUCCESS;
    int64_t rtt = i % 50 == 0 ? LK_MS(800) : LK_MS(2); /* a stall: slow and a drop */
    lk_adaptive_record_inflight(a, t, rtt, o, inflight);
  }
  assert_int_equal(lk_adaptive_limit(a), 16);
  /* The load comes: 12 in flight of 16 is in use, and a drop every 100 ms lowers it. */
  for (int i = 0; i < 10; i++)
    lk_adaptive_record_inflight(a, t += LK_MS(100), 0, LK_ADAPTIVE_DROP, 12);
  assert_true(lk_adaptive_limit(a) < 12);
  lk_adaptive_free(a);
}

/* Gradient: steady latency grows the limit; queueing delay shrinks it; recovery grows it back. */
static void gradient_shrinks_under_rising_latency_and_grows_back(void **state) {
  (void)state;
  lk_adaptive_config c = base_cfg(LK_ADAPTIVE_GRADIENT);
  c.initial_limit = 10;
  c.max_limit = 100;
  c.min_limit = 1;
  lk_adaptive *a = make(&c);
  int64_t t = LK_SEC(1), prev = 10;
  for (int i = 0; i < 30; i++) {
    int64_t lim = lk_adaptive_record(a, t += LK_MS(10), LK_MS(10), LK_ADAPTIVE_SUCCESS);
    assert_true(lim >= prev);
    prev = lim;
  }
  assert_int_equal(lk_adaptive_min_rtt(a), LK_MS(10));
  int64_t grown = lk_adaptive_limit(a);
  assert_true(grown >= 25);
  /* Within tolerance (1.5 x min RTT) latency is not queueing: no decrease. */
  assert_true(lk_adaptive_record(a, t += LK_MS(10), LK_MS(15), LK_ADAPTIVE_SUCCESS) >= grown);
  /* Latency rises from 2x to 4x: the limit falls steadily (each step towards the equilibrium
   * of L = L * gradient + sqrt(L), which falls as the gradient does). */
  prev = lk_adaptive_limit(a);
  for (int i = 0; i < 60; i++) {
    int64_t rtt = LK_MS(20) + LK_MS(i);
    int64_t lim = lk_adaptive_record(a, t += LK_MS(40), rtt > LK_MS(40) ? LK_MS(40) : rtt,
                                     LK_ADAPTIVE_SUCCESS);
    assert_true(lim <= prev);
    prev = lim;
  }
  int64_t shrunk = lk_adaptive_limit(a);
  assert_true(shrunk <= 8); /* equilibrium of L = L/2 + sqrt(L) is 4 */
  assert_int_equal(lk_adaptive_min_rtt(a), LK_MS(10));
  /* Latency recovers: the limit grows back. */
  for (int i = 0; i < 60; i++) {
    int64_t lim = lk_adaptive_record(a, t += LK_MS(10), LK_MS(10), LK_ADAPTIVE_SUCCESS);
    assert_true(lim >= prev);
    prev = lim;
  }
  assert_true(lk_adaptive_limit(a) >= 30);
  /* Drops multiply by backoff_ratio as in AIMD; a success with no RTT changes nothing. */
  int64_t before = lk_adaptive_limit(a);
  assert_int_equal(lk_adaptive_record(a, t, 0, LK_ADAPTIVE_SUCCESS), before);
  assert_true(lk_adaptive_record(a, t, 0, LK_ADAPTIVE_DROP) < before);
  lk_adaptive_free(a);
}

/* A lasting rise of the base latency is learnt after one to two windows. */
static void gradient_min_rtt_window_forgets(void **state) {
  (void)state;
  lk_adaptive_config c = base_cfg(LK_ADAPTIVE_GRADIENT);
  c.min_rtt_window = LK_SEC(1);
  lk_adaptive *a = make(&c);
  int64_t t = LK_SEC(10);
  lk_adaptive_record(a, t, LK_MS(10), LK_ADAPTIVE_SUCCESS);
  assert_int_equal(lk_adaptive_min_rtt(a), LK_MS(10));
  for (int i = 1; i <= 10; i++)
    lk_adaptive_record(a, t + i * LK_MS(100), LK_MS(30), LK_ADAPTIVE_SUCCESS);
  /* Window 1 (t .. t+1s) rolled at t+1s: the 10 ms sample is in the previous window. */
  assert_int_equal(lk_adaptive_min_rtt(a), LK_MS(10));
  for (int i = 11; i <= 20; i++)
    lk_adaptive_record(a, t + i * LK_MS(100), LK_MS(30), LK_ADAPTIVE_SUCCESS);
  assert_int_equal(lk_adaptive_min_rtt(a), LK_MS(30));
  lk_adaptive_free(a);
  /* Window 0: never forgets. */
  c.min_rtt_window = 0;
  a = make(&c);
  lk_adaptive_record(a, t, LK_MS(10), LK_ADAPTIVE_SUCCESS);
  lk_adaptive_record(a, t + LK_SEC(1000), LK_MS(30), LK_ADAPTIVE_SUCCESS);
  assert_int_equal(lk_adaptive_min_rtt(a), LK_MS(10));
  lk_adaptive_free(a);
}

static void drives_a_bulkhead(void **state) {
  (void)state;
  lk_bulkhead_config bc = {100, 0};
  lk_bulkhead *b = NULL;
  assert_int_equal(lk_bulkhead_new(&bc, &b, NULL), LK_OK);
  lk_adaptive_config c = base_cfg(LK_ADAPTIVE_AIMD);
  c.initial_limit = 4;
  c.min_limit = 1;
  lk_adaptive *a = make(&c);
  assert_int_equal(lk_adaptive_attach(a, b), LK_OK);
  assert_int_equal(lk_bulkhead_max(b), 4);
  /* The bulkhead's in-use count feeds the unused-limit rule: nothing held, no growth. */
  int64_t t = LK_SEC(1);
  for (int i = 0; i < 100; i++)
    lk_adaptive_record(a, t += LK_MS(1), LK_MS(1), LK_ADAPTIVE_SUCCESS);
  assert_int_equal(lk_bulkhead_max(b), 4);
  for (int i = 0; i < 4; i++)
    assert_int_equal(lk_bulkhead_try_acquire(b), LK_OK);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_EBULKHEAD_FULL);
  for (int i = 0; i < 5; i++)
    lk_adaptive_record(a, t += LK_MS(1), LK_MS(1), LK_ADAPTIVE_SUCCESS);
  assert_int_equal(lk_adaptive_limit(a), 5);
  assert_int_equal(lk_bulkhead_max(b), 5);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_OK);
  /* A drop lowers the bulkhead below what is in use: no new grants. */
  assert_int_equal(lk_adaptive_record(a, t, 0, LK_ADAPTIVE_DROP), 4);
  assert_int_equal(lk_bulkhead_max(b), 4);
  lk_bulkhead_release(b);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_EBULKHEAD_FULL);
  for (int i = 0; i < 4; i++)
    lk_bulkhead_release(b);
  /* Detached: the bulkhead no longer follows. */
  assert_int_equal(lk_adaptive_attach(a, NULL), LK_OK);
  lk_adaptive_record(a, t, 0, LK_ADAPTIVE_DROP); /* 4.6 -> 4.14 -> 3.73 */
  lk_adaptive_record(a, t, 0, LK_ADAPTIVE_DROP);
  assert_int_equal(lk_adaptive_limit(a), 3);
  assert_int_equal(lk_bulkhead_max(b), 4);
  lk_adaptive_free(a);
  lk_bulkhead_free(b);
}

static void outcome_of_failure_kinds(void **state) {
  (void)state;
  assert_int_equal(lk_adaptive_outcome_of(LK_F_NONE), LK_ADAPTIVE_SUCCESS);
  lk_failure drops[] = {LK_F_READ_TIMEOUT,      LK_F_CONNECT_TIMEOUT,  LK_F_CONNECT_REFUSED,
                        LK_F_HTTP_503,          LK_F_SERVER_5XX,       LK_F_TOO_MANY_REQUESTS,
                        LK_F_DEADLINE_EXCEEDED, LK_F_RESET_AFTER_SEND, LK_F_POOL_TIMEOUT};
  for (size_t i = 0; i < sizeof drops / sizeof drops[0]; i++)
    assert_int_equal(lk_adaptive_outcome_of(drops[i]), LK_ADAPTIVE_DROP);
  lk_failure ignored[] = {LK_F_CLIENT_4XX,    LK_F_HTTP_408,         LK_F_CANCELLED,
                          LK_F_BREAKER_OPEN,  LK_F_BUDGET_EXHAUSTED, LK_F_RATE_LIMITED,
                          LK_F_BULKHEAD_FULL, LK_F_DNS_FAILED,       LK_F_TLS_FAILED,
                          (lk_failure)999};
  for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
    assert_int_equal(lk_adaptive_outcome_of(ignored[i]), LK_ADAPTIVE_IGNORE);
}

static void no_allocation_per_call(void **state) {
  (void)state;
  lk_adaptive_config c = base_cfg(LK_ADAPTIVE_GRADIENT);
  lk_adaptive *a = make(&c);
  lk_test_alloc_count_start();
  int64_t t = 0, sink = 0;
  for (int i = 0; i < 10000; i++)
    sink += lk_adaptive_record(a, t += LK_MS(1), LK_MS(10 + i % 30),
                               (i % 17) ? LK_ADAPTIVE_SUCCESS : LK_ADAPTIVE_DROP);
  uint64_t allocs = lk_test_alloc_count_stop();
  assert_true(sink > 0);
  assert_int_equal(allocs, 0);
  lk_adaptive_free(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bad_config_rejected),
      cmocka_unit_test(aimd_additive_increase_and_cap),
      cmocka_unit_test(aimd_shrinks_under_rising_latency_and_grows_back),
      cmocka_unit_test(cooldown_limits_decreases),
      cmocka_unit_test(unused_limit_is_not_raised),
      cmocka_unit_test(background_errors_at_low_load_do_not_ratchet),
      cmocka_unit_test(gradient_shrinks_under_rising_latency_and_grows_back),
      cmocka_unit_test(gradient_min_rtt_window_forgets),
      cmocka_unit_test(drives_a_bulkhead),
      cmocka_unit_test(outcome_of_failure_kinds),
      cmocka_unit_test(no_allocation_per_call),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
