/* SPDX-License-Identifier: MIT */
/* Rate limiter (GCRA) on a fake time line: burst, refill boundaries, reserve and deadlines,
 * run-time changes, bad config, saturation, the rate*t+burst bound, zero allocation. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <linkd/error.h>
#include <linkd/limiter.h>
#include <linkd/rand.h>

#include "testutil.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>

static lk_limiter *make(double rate, int64_t burst) {
  lk_limiter_config c = {rate, burst};
  lk_limiter *l = NULL;
  const char *why = "unset";
  assert_int_equal(lk_limiter_new(&c, &l, &why), LK_OK);
  assert_null(why);
  assert_non_null(l);
  return l;
}

static void expect_bad(double rate, int64_t burst) {
  lk_limiter_config c = {rate, burst};
  const char *why = NULL;
  assert_int_equal(lk_limiter_config_validate(&c, &why), LK_ECONFIG);
  assert_non_null(why);
  lk_limiter *l = (lk_limiter *)&c; /* must be reset to NULL */
  why = NULL;
  assert_int_equal(lk_limiter_new(&c, &l, &why), LK_ECONFIG);
  assert_null(l);
  assert_non_null(why);
}

static void bad_config_rejected(void **state) {
  (void)state;
  expect_bad(0.0, 1);
  expect_bad(-1.0, 1);
  expect_bad(NAN, 1);
  expect_bad(INFINITY, 1);
  expect_bad(1e-10, 1);
  expect_bad(2e9, 1);
  expect_bad(10.0, 0);
  expect_bad(10.0, -5);
  const char *why = NULL;
  assert_int_equal(lk_limiter_config_validate(NULL, &why), LK_ECONFIG);
  assert_non_null(why);
  lk_limiter_config c;
  lk_limiter_config_init_default(&c);
  assert_true(c.rate == 100.0);
  assert_int_equal(c.burst, 10);
  assert_int_equal(lk_limiter_config_validate(&c, NULL), LK_OK);
  assert_int_equal(lk_limiter_new(&c, NULL, &why), LK_EINVAL);
  assert_non_null(why);
  lk_limiter_free(NULL);
  /* The extremes of the valid range work. */
  lk_limiter *l = make(LK_LIMITER_RATE_MIN, 1);
  assert_int_equal(lk_limiter_try_acquire(l, 0), LK_OK);
  assert_int_equal(lk_limiter_try_acquire(l, LK_SEC(86400)), LK_ERATE_LIMITED);
  lk_limiter_free(l);
}

/* 10/s = one token per 100 ms, burst 3. */
static void burst_then_refill_boundaries(void **state) {
  (void)state;
  lk_limiter *l = make(10.0, 3);
  int64_t t0 = LK_SEC(5);
  assert_int_equal(lk_limiter_available(l, t0), 3);
  for (int i = 0; i < 3; i++)
    assert_int_equal(lk_limiter_try_acquire(l, t0), LK_OK);
  assert_int_equal(lk_limiter_try_acquire(l, t0), LK_ERATE_LIMITED);
  assert_int_equal(lk_limiter_available(l, t0), 0);
  assert_int_equal(lk_limiter_wait_time(l, t0), LK_MS(100));
  /* One ns before the refill: still refused; at the refill: exactly one token. */
  assert_int_equal(lk_limiter_try_acquire(l, t0 + LK_MS(100) - 1), LK_ERATE_LIMITED);
  assert_int_equal(lk_limiter_wait_time(l, t0 + LK_MS(100) - 1), 1);
  assert_int_equal(lk_limiter_try_acquire(l, t0 + LK_MS(100)), LK_OK);
  assert_int_equal(lk_limiter_try_acquire(l, t0 + LK_MS(100)), LK_ERATE_LIMITED);
  /* A long idle period refills to the burst and no further. */
  int64_t t1 = t0 + LK_SEC(3600);
  assert_int_equal(lk_limiter_available(l, t1), 3);
  assert_int_equal(lk_limiter_wait_time(l, t1), 0);
  for (int i = 0; i < 3; i++)
    assert_int_equal(lk_limiter_try_acquire(l, t1), LK_OK);
  assert_int_equal(lk_limiter_try_acquire(l, t1), LK_ERATE_LIMITED);
  /* Partial refill: 250 ms later two whole tokens. */
  assert_int_equal(lk_limiter_available(l, t1 + LK_MS(250)), 2);
  lk_limiter_free(l);
}

static void stale_now_never_admits_more(void **state) {
  (void)state;
  lk_limiter *l = make(10.0, 1);
  assert_int_equal(lk_limiter_try_acquire(l, LK_SEC(10)), LK_OK);
  /* A thread that read the clock earlier is judged against the later state. */
  assert_int_equal(lk_limiter_try_acquire(l, LK_SEC(9)), LK_ERATE_LIMITED);
  assert_int_equal(lk_limiter_try_acquire(l, LK_SEC(10) + LK_MS(99)), LK_ERATE_LIMITED);
  assert_int_equal(lk_limiter_try_acquire(l, LK_SEC(10) + LK_MS(100)), LK_OK);
  lk_limiter_free(l);
}

static void reserve_waits_and_respects_max_wait(void **state) {
  (void)state;
  lk_limiter *l = make(10.0, 1);
  int64_t t = LK_SEC(1);
  assert_int_equal(lk_limiter_reserve(l, t, 0), 0);
  assert_int_equal(lk_limiter_reserve(l, t, LK_SEC(1)), LK_MS(100));
  assert_int_equal(lk_limiter_reserve(l, t, LK_SEC(1)), LK_MS(200));
  /* Would need 300 ms: refused with max 299.999 ms, and nothing was reserved by the refusal. */
  assert_int_equal(lk_limiter_reserve(l, t, LK_MS(300) - 1), LK_ERATE_LIMITED);
  assert_int_equal(lk_limiter_wait_time(l, t), LK_MS(300));
  /* Exactly max_wait is allowed. */
  assert_int_equal(lk_limiter_reserve(l, t, LK_MS(300)), LK_MS(300));
  /* Reservations are spent tokens: try_acquire is refused until they are due. */
  assert_int_equal(lk_limiter_try_acquire(l, t + LK_MS(350)), LK_ERATE_LIMITED);
  assert_int_equal(lk_limiter_try_acquire(l, t + LK_MS(400)), LK_OK);
  /* A negative max_wait means "no waiting". */
  assert_int_equal(lk_limiter_reserve(l, t + LK_SEC(10), -5), 0);
  assert_int_equal(lk_limiter_reserve(l, t + LK_SEC(10), -5), LK_ERATE_LIMITED);
  lk_limiter_free(l);
}

static void reserve_until_deadline(void **state) {
  (void)state;
  lk_limiter *l = make(10.0, 1);
  int64_t t = LK_SEC(2);
  assert_int_equal(lk_limiter_reserve_until(l, t, lk_deadline_none()), 0);
  /* Next token in 100 ms: a deadline 99 ms away refuses, one exactly 100 ms away accepts. */
  assert_int_equal(lk_limiter_reserve_until(l, t, lk_deadline_after(t, LK_MS(99))),
                   LK_ERATE_LIMITED);
  assert_int_equal(lk_limiter_reserve_until(l, t, lk_deadline_after(t, LK_MS(100))), LK_MS(100));
  /* An expired deadline admits only an immediate token. */
  lk_deadline past = lk_deadline_after(t, -LK_MS(5));
  assert_int_equal(lk_limiter_reserve_until(l, t + LK_SEC(1), past), 0);
  assert_int_equal(lk_limiter_reserve_until(l, t + LK_SEC(1), past), LK_ERATE_LIMITED);
  /* No deadline: any wait. */
  assert_int_equal(lk_limiter_reserve_until(l, t + LK_SEC(1), lk_deadline_none()), LK_MS(100));
  lk_limiter_free(l);
}

static void runtime_rate_and_burst_change(void **state) {
  (void)state;
  lk_limiter *l = make(10.0, 2);
  int64_t t = LK_SEC(1);
  assert_int_equal(lk_limiter_try_acquire(l, t), LK_OK);
  assert_int_equal(lk_limiter_try_acquire(l, t), LK_OK);
  assert_int_equal(lk_limiter_try_acquire(l, t), LK_ERATE_LIMITED);
  /* TAT = t + 200 ms. At 1000/s (1 ms each) with burst 2: one token 1 ms before TAT, two at it. */
  lk_limiter_config c = {1000.0, 2};
  const char *why = "unset";
  assert_int_equal(lk_limiter_set_config(l, &c, &why), LK_OK);
  assert_null(why);
  lk_limiter_config got;
  lk_limiter_get_config(l, &got);
  assert_true(got.rate == 1000.0);
  assert_int_equal(got.burst, 2);
  assert_int_equal(lk_limiter_try_acquire(l, t + LK_MS(199) - 1), LK_ERATE_LIMITED);
  assert_int_equal(lk_limiter_available(l, t + LK_MS(199)), 1);
  assert_int_equal(lk_limiter_try_acquire(l, t + LK_MS(199)), LK_OK);
  assert_int_equal(lk_limiter_try_acquire(l, t + LK_MS(199)), LK_ERATE_LIMITED);
  assert_int_equal(lk_limiter_try_acquire(l, t + LK_MS(200)), LK_OK);
  /* Raising the burst makes the extra tokens available at once. */
  int64_t u = t + LK_SEC(1);
  c.burst = 50;
  assert_int_equal(lk_limiter_set_config(l, &c, NULL), LK_OK);
  assert_int_equal(lk_limiter_available(l, u), 50);
  for (int i = 0; i < 50; i++)
    assert_int_equal(lk_limiter_try_acquire(l, u), LK_OK);
  assert_int_equal(lk_limiter_try_acquire(l, u), LK_ERATE_LIMITED);
  /* Lowering the burst keeps the debt (TAT = u + 50 ms): with burst 1 the next token comes at
   * TAT itself, 50 ms from now. */
  c.burst = 1;
  assert_int_equal(lk_limiter_set_config(l, &c, NULL), LK_OK);
  assert_int_equal(lk_limiter_wait_time(l, u), LK_MS(50));
  assert_int_equal(lk_limiter_try_acquire(l, u + LK_MS(50) - 1), LK_ERATE_LIMITED);
  assert_int_equal(lk_limiter_try_acquire(l, u + LK_MS(50)), LK_OK);
  /* A bad change is refused and leaves the config alone. */
  lk_limiter_config bad = {NAN, 5};
  assert_int_equal(lk_limiter_set_config(l, &bad, &why), LK_ECONFIG);
  assert_non_null(why);
  bad.rate = 5.0;
  bad.burst = 0;
  assert_int_equal(lk_limiter_set_config(l, &bad, &why), LK_ECONFIG);
  assert_int_equal(lk_limiter_set_config(NULL, &c, &why), LK_EINVAL);
  lk_limiter_get_config(l, &got);
  assert_true(got.rate == 1000.0);
  assert_int_equal(got.burst, 1);
  lk_limiter_free(l);
}

/* The interval is rounded up: the effective rate never exceeds the configured one. */
static void interval_rounds_up(void **state) {
  (void)state;
  lk_limiter *l = make(3e8, 1); /* 3.33 ns -> 4 ns */
  assert_int_equal(lk_limiter_try_acquire(l, 0), LK_OK);
  assert_int_equal(lk_limiter_try_acquire(l, 3), LK_ERATE_LIMITED);
  assert_int_equal(lk_limiter_try_acquire(l, 4), LK_OK);
  lk_limiter_free(l);
  l = make(3.0, 1); /* 333333333.3 ns -> 333333334 ns */
  assert_int_equal(lk_limiter_try_acquire(l, 0), LK_OK);
  assert_int_equal(lk_limiter_try_acquire(l, 333333333), LK_ERATE_LIMITED);
  assert_int_equal(lk_limiter_try_acquire(l, 333333334), LK_OK);
  lk_limiter_free(l);
}

static void saturates_at_the_extremes(void **state) {
  (void)state;
  /* A huge burst at the lowest rate (1e18 ns per token): burst * interval saturates at
   * INT64_MAX instead of overflowing, so from time 0 only 9 tokens fit on the time line. */
  lk_limiter *l = make(LK_LIMITER_RATE_MIN, INT64_MAX);
  for (int i = 0; i < 5; i++)
    assert_int_equal(lk_limiter_try_acquire(l, 0), LK_OK);
  assert_int_equal(lk_limiter_available(l, 0), 4);
  for (int i = 0; i < 4; i++)
    assert_int_equal(lk_limiter_try_acquire(l, 0), LK_OK);
  assert_int_equal(lk_limiter_try_acquire(l, 0), LK_ERATE_LIMITED);
  lk_limiter_free(l);
  /* Time values at both ends of the line. */
  l = make(1e9, 3);
  assert_int_equal(lk_limiter_try_acquire(l, INT64_MIN), LK_OK);
  assert_int_equal(lk_limiter_available(l, INT64_MIN), 2);
  assert_int_equal(lk_limiter_try_acquire(l, INT64_MAX - 3), LK_OK);
  assert_int_equal(lk_limiter_try_acquire(l, INT64_MAX - 3), LK_OK);
  /* The next would put TAT at the end of the line: refused, and nothing wraps negative. */
  assert_int_equal(lk_limiter_try_acquire(l, INT64_MAX - 3), LK_ERATE_LIMITED);
  assert_int_equal(lk_limiter_reserve(l, INT64_MAX - 3, INT64_MAX), LK_ERATE_LIMITED);
  assert_true(lk_limiter_wait_time(l, INT64_MAX - 3) >= 0);
  assert_true(lk_limiter_available(l, INT64_MAX) >= 0);
  lk_limiter_free(l);
}

/* Random arrivals: over every window [t_i, t_j] of the sequence, admitted <= rate*t + burst. */
static void never_more_than_rate_t_plus_burst(void **state) {
  (void)state;
  lk_rand_fast rng;
  lk_rand_fast_seeded(&rng, lk_test_seed());
  enum { N = 1500 };
  static int64_t at[N];
  int n = 0;
  int64_t interval = LK_MS(10), burst = 4;
  lk_limiter *l = make(100.0, burst);
  int64_t now = LK_SEC(1);
  for (int i = 0; i < 20000 && n < N; i++) {
    now += (int64_t)lk_rand_below(&rng.base, (uint64_t)LK_MS(6));
    bool ok =
        (i & 1) ? lk_limiter_try_acquire(l, now) == LK_OK : lk_limiter_reserve(l, now, 0) == 0;
    if (ok)
      at[n++] = now;
  }
  assert_true(n > 100);
  for (int i = 0; i < n; i++)
    for (int j = i; j < n; j++)
      assert_true((int64_t)(j - i + 1) <= (at[j] - at[i]) / interval + burst);
  lk_limiter_free(l);
}

static void no_allocation_per_call(void **state) {
  (void)state;
  lk_limiter *l = make(1000.0, 5);
  lk_limiter_config c = {500.0, 3};
  lk_test_alloc_count_start();
  int64_t sink = 0;
  for (int i = 0; i < 10000; i++) {
    sink += lk_limiter_try_acquire(l, (int64_t)i * 1000);
    sink += lk_limiter_reserve(l, (int64_t)i * 1000, LK_MS(1));
    sink += lk_limiter_available(l, (int64_t)i * 1000);
    if (i % 1000 == 0)
      lk_limiter_set_config(l, &c, NULL);
  }
  uint64_t allocs = lk_test_alloc_count_stop();
  assert_true(sink != 42);
  assert_int_equal(allocs, 0);
#if LK_TEST_ALLOC_COUNTING
  /* The counter does see allocations, so the zero above means something. */
  lk_test_alloc_count_start();
  void *volatile p = malloc(16); /* volatile: keeps the pair from being optimized out */
  free(p);
  assert_int_equal(lk_test_alloc_count_stop(), 1);
#endif
  lk_limiter_free(l);
}

/* A backend: every call goes to it, and its answers come back as the limiter's contract says. */
typedef struct fake_be {
  int reserves, frees;
  int64_t last_max_wait, answer;
} fake_be;

static int64_t fb_reserve(void *arg, int64_t now, int64_t max_wait) {
  (void)now;
  fake_be *f = arg;
  f->reserves++;
  f->last_max_wait = max_wait;
  return f->answer;
}
static int64_t fb_available(void *arg, int64_t now) {
  (void)arg;
  (void)now;
  return 7;
}
static void fb_free(void *arg) { ((fake_be *)arg)->frees++; }

static void backend_gets_every_call(void **state) {
  (void)state;
  static const lk_limiter_backend be = {.reserve = fb_reserve, .available = fb_available,
                                        .free = fb_free};
  fake_be f = {0};
  lk_limiter_config c = {.rate = 5, .burst = 2};
  lk_limiter *l;
  assert_int_equal(lk_limiter_new_backend(&c, &be, &f, &l, NULL), LK_OK);
  assert_ptr_equal(lk_limiter_backend_arg(l, &be), &f);
  f.answer = 0;
  assert_int_equal(lk_limiter_try_acquire(l, 1), LK_OK);
  assert_int_equal(f.last_max_wait, 0);
  f.answer = LK_ERATE_LIMITED;
  assert_int_equal(lk_limiter_try_acquire(l, 1), LK_ERATE_LIMITED);
  f.answer = LK_MS(5);
  assert_int_equal(lk_limiter_reserve(l, 1, LK_MS(10)), LK_MS(5));
  assert_int_equal(f.last_max_wait, LK_MS(10));
  /* A backend answering past max_wait is refused here: nobody waits past its deadline. */
  assert_int_equal(lk_limiter_reserve(l, 1, LK_MS(1)), LK_ERATE_LIMITED);
  assert_int_equal(lk_limiter_reserve_until(l, 100, lk_deadline_after(100, LK_MS(20))), LK_MS(5));
  assert_int_equal(f.last_max_wait, LK_MS(20));
  /* An expired deadline reaches the backend as a negative max_wait: answer at once. */
  f.answer = 0;
  assert_int_equal(lk_limiter_reserve_until(l, LK_MS(50), lk_deadline_after(0, LK_MS(10))), 0);
  assert_true(f.last_max_wait < 0);
  assert_int_equal(f.reserves, 6);
  assert_int_equal(lk_limiter_available(l, 1), 7);
  assert_int_equal(lk_limiter_wait_time(l, 1), 0); /* not provided */
  lk_limiter_config got;
  lk_limiter_get_config(l, &got);
  assert_true(got.rate == 5 && got.burst == 2);
  const char *why = NULL;
  assert_int_equal(lk_limiter_set_config(l, &c, &why), LK_ECONFIG); /* no set_config */
  assert_non_null(why);
  lk_limiter *plain;
  assert_int_equal(lk_limiter_new(&c, &plain, NULL), LK_OK);
  assert_null(lk_limiter_backend_arg(plain, &be));
  lk_limiter_free(plain);
  lk_limiter_free(l);
  assert_int_equal(f.frees, 1);
  static const lk_limiter_backend broken = {.reserve = NULL};
  assert_int_equal(lk_limiter_new_backend(&c, &broken, &f, &l, NULL), LK_EINVAL);
  assert_null(l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bad_config_rejected),
      cmocka_unit_test(burst_then_refill_boundaries),
      cmocka_unit_test(stale_now_never_admits_more),
      cmocka_unit_test(reserve_waits_and_respects_max_wait),
      cmocka_unit_test(reserve_until_deadline),
      cmocka_unit_test(runtime_rate_and_burst_change),
      cmocka_unit_test(interval_rounds_up),
      cmocka_unit_test(saturates_at_the_extremes),
      cmocka_unit_test(never_more_than_rate_t_plus_burst),
      cmocka_unit_test(no_allocation_per_call),
      cmocka_unit_test(backend_gets_every_call),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
