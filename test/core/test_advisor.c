/* SPDX-License-Identifier: MIT */
/* Timeout advisor: refuses until enough samples, recommends the percentile matching the accepted
 * false-timeout rate (checked against the sample itself), headroom, floor and cap, bad options. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h> /* needs the three above first */

#include <linkd/advisor.h>
#include <linkd/error.h>
#include <linkd/rand.h>

#include "testutil.h"

#include <math.h>
#include <stdlib.h>

static void defaults_and_validation(void **state) {
  (void)state;
  lk_timeout_advisor_opts o;
  lk_timeout_advisor_opts_init_default(&o);
  assert_true(o.false_timeout_rate == 0.001);
  assert_int_equal(o.min_samples, 0);
  assert_true(o.headroom == 1.0);
  assert_int_equal(lk_timeout_advisor_opts_validate(&o), LK_OK);
  assert_int_equal(lk_timeout_advisor_opts_validate(NULL), LK_EINVAL);
  const double bad_rates[] = {0, 1, -0.1, 2, NAN};
  for (size_t i = 0; i < sizeof bad_rates / sizeof bad_rates[0]; i++) {
    lk_timeout_advisor_opts_init_default(&o);
    o.false_timeout_rate = bad_rates[i];
    assert_int_equal(lk_timeout_advisor_opts_validate(&o), LK_ECONFIG);
  }
  lk_timeout_advisor_opts_init_default(&o);
  o.headroom = 0.9;
  assert_int_equal(lk_timeout_advisor_opts_validate(&o), LK_ECONFIG);
  o.headroom = INFINITY;
  assert_int_equal(lk_timeout_advisor_opts_validate(&o), LK_ECONFIG);
  lk_timeout_advisor_opts_init_default(&o);
  o.floor_ns = LK_SEC(2);
  o.cap_ns = LK_SEC(1);
  assert_int_equal(lk_timeout_advisor_opts_validate(&o), LK_ECONFIG);
  o.cap_ns = -1;
  o.floor_ns = 0;
  assert_int_equal(lk_timeout_advisor_opts_validate(&o), LK_ECONFIG);

  lk_hist *h = lk_hist_new(0, LK_SEC(60));
  lk_timeout_advice a;
  assert_int_equal(lk_timeout_advise(NULL, NULL, &a), LK_EINVAL);
  assert_int_equal(lk_timeout_advise(h, NULL, NULL), LK_EINVAL);
  o.cap_ns = 0;
  o.false_timeout_rate = 0;
  assert_int_equal(lk_timeout_advise(h, &o, &a), LK_ECONFIG);
  lk_hist_free(h);
}

/* Not enough data: LK_EAGAIN with the counts filled in; automatic minimum is 10 / rate. */
static void needs_enough_samples(void **state) {
  (void)state;
  lk_hist *h = lk_hist_new(0, LK_SEC(60));
  lk_timeout_advice a;
  assert_int_equal(lk_timeout_advise(h, NULL, &a), LK_EAGAIN);
  assert_int_equal(a.samples, 0);
  assert_int_equal(a.needed, 10000);
  assert_true(fabs(a.percentile - 99.9) < 1e-9);
  for (int i = 0; i < 9999; i++)
    lk_hist_record(h, LK_MS(10));
  assert_int_equal(lk_timeout_advise(h, NULL, &a), LK_EAGAIN);
  assert_int_equal(a.samples, 9999);
  lk_hist_record(h, LK_MS(10));
  assert_int_equal(lk_timeout_advise(h, NULL, &a), LK_OK);
  assert_int_equal(a.timeout_ns, LK_MS(10));
  /* An explicit minimum overrides the automatic one. */
  lk_timeout_advisor_opts o;
  lk_timeout_advisor_opts_init_default(&o);
  o.min_samples = 20000;
  assert_int_equal(lk_timeout_advise(h, &o, &a), LK_EAGAIN);
  assert_int_equal(a.needed, 20000);
  o.min_samples = 0;
  o.false_timeout_rate = 0.01;
  assert_int_equal(lk_timeout_advise(h, &o, &a), LK_OK);
  assert_int_equal(a.needed, 1000);
  lk_hist_free(h);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* On a latency-like sample, the advice cuts off no more than the accepted share and is within 1 %
 * of the exact percentile. */
static void advice_matches_rate(void **state) {
  (void)state;
  enum { N = 200000 };
  int64_t *v = malloc(N * sizeof *v);
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, lk_test_seed());
  lk_hist *h = lk_hist_new(0, LK_SEC(60));
  for (int i = 0; i < N; i++) {
    /* Body 5-15 ms, 2 % tail 50 ms - 2 s. */
    v[i] = lk_rand_below(&r.base, 50) == 0
               ? LK_MS(50) + (int64_t)lk_rand_below(&r.base, (uint64_t)LK_MS(1950))
               : LK_MS(5) + (int64_t)lk_rand_below(&r.base, (uint64_t)LK_MS(10));
    lk_hist_record(h, v[i]);
  }
  qsort(v, N, sizeof *v, cmp_i64);
  const double rates[] = {0.1, 0.01, 0.001, 0.0001};
  for (size_t k = 0; k < sizeof rates / sizeof rates[0]; k++) {
    lk_timeout_advisor_opts o;
    lk_timeout_advisor_opts_init_default(&o);
    o.false_timeout_rate = rates[k];
    lk_timeout_advice a;
    assert_int_equal(lk_timeout_advise(h, &o, &a), LK_OK);
    size_t cut = 0;
    while (cut < N && v[N - 1 - cut] > a.timeout_ns)
      cut++;
    assert_true((double)cut / N <= rates[k]);
    size_t rank = (size_t)ceil((1 - rates[k]) * N - 1e-9);
    int64_t exact = v[rank - 1];
    assert_true(a.timeout_ns >= exact);
    assert_true((double)(a.timeout_ns - exact) <= 0.01 * (double)exact);
    assert_int_equal(a.percentile_ns, a.timeout_ns);
    assert_int_equal(a.samples, N);
  }
  lk_hist_free(h);
  free(v);
}

static void headroom_floor_cap(void **state) {
  (void)state;
  lk_hist *h = lk_hist_new(0, INT64_MAX);
  lk_hist_record_n(h, LK_MS(100), 1000);
  lk_timeout_advisor_opts o;
  lk_timeout_advisor_opts_init_default(&o);
  o.min_samples = 1000;
  o.headroom = 1.5;
  lk_timeout_advice a;
  assert_int_equal(lk_timeout_advise(h, &o, &a), LK_OK);
  assert_int_equal(a.percentile_ns, LK_MS(100));
  assert_int_equal(a.timeout_ns, LK_MS(150));
  o.cap_ns = LK_MS(120);
  assert_int_equal(lk_timeout_advise(h, &o, &a), LK_OK);
  assert_int_equal(a.timeout_ns, LK_MS(120));
  o.cap_ns = 0;
  o.floor_ns = LK_MS(500);
  assert_int_equal(lk_timeout_advise(h, &o, &a), LK_OK);
  assert_int_equal(a.timeout_ns, LK_MS(500));
  /* Saturation: a huge percentile times headroom stays positive. */
  lk_hist_reset(h);
  lk_hist_record_n(h, INT64_MAX / 2 + 12345, 1000);
  o.floor_ns = 0;
  o.headroom = 3.0;
  assert_int_equal(lk_timeout_advise(h, &o, &a), LK_OK);
  assert_true(a.timeout_ns == INT64_MAX);
  lk_hist_free(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(defaults_and_validation),
      cmocka_unit_test(needs_enough_samples),
      cmocka_unit_test(advice_matches_rate),
      cmocka_unit_test(headroom_floor_cap),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
