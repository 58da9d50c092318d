/* SPDX-License-Identifier: MIT */
/* Backoff: every mode's bounds over many seeds against an independent model, uniformity, saturation
 * at the extremes, the seed's table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h> /* needs the three above first */

#include <linkd/linkd.h>

#include "testutil.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static lk_backoff_config cfg(lk_backoff_kind k, lk_jitter_kind j, int64_t base, int64_t max) {
  lk_backoff_config c;
  lk_backoff_config_init_default(&c);
  c.kind = k;
  c.jitter = j;
  c.base = base;
  c.max = max;
  assert_int_equal(lk_backoff_config_validate(&c, NULL), LK_OK);
  return c;
}

static void base_delays(void **state) {
  (void)state;
  lk_backoff_config c = cfg(LK_BACKOFF_EXPONENTIAL, LK_JITTER_NONE, LK_MS(200), LK_MS(2000));
  int64_t want[] = {200, 400, 800, 1600, 2000, 2000};
  for (int n = 1; n <= 6; n++) {
    assert_int_equal(lk_backoff_base_delay(&c, n), LK_MS(want[n - 1]));
    assert_int_equal(lk_backoff_delay(&c, n, 0, NULL), LK_MS(want[n - 1]));
  }
  c.kind = LK_BACKOFF_LINEAR;
  assert_int_equal(lk_backoff_base_delay(&c, 3), LK_MS(600));
  assert_int_equal(lk_backoff_base_delay(&c, 11), LK_MS(2000));
  c.kind = LK_BACKOFF_FIXED;
  assert_int_equal(lk_backoff_base_delay(&c, 9), LK_MS(200));
  c.kind = LK_BACKOFF_EXPONENTIAL;
  c.multiplier = 3.0;
  assert_int_equal(lk_backoff_base_delay(&c, 2), LK_MS(600));
  assert_int_equal(lk_backoff_base_delay(&c, 3), LK_MS(1800));
  assert_int_equal(lk_backoff_base_delay(&c, 4), LK_MS(2000));
  c.multiplier = 1.0;
  assert_int_equal(lk_backoff_base_delay(&c, 50), LK_MS(200));
  /* n < 1 is treated as 1. */
  assert_int_equal(lk_backoff_base_delay(&c, 0), LK_MS(200));
  assert_int_equal(lk_backoff_base_delay(&c, INT_MIN), LK_MS(200));
}

/* The seed's table: retries 1-4 with base 200, max 2000, symmetric 0.5. */
static void symmetric_matches_seed_table(void **state) {
  (void)state;
  lk_backoff_config c = cfg(LK_BACKOFF_EXPONENTIAL, LK_JITTER_SYMMETRIC, LK_MS(200), LK_MS(2000));
  int64_t lo[] = {100, 200, 400, 800}, hi[] = {300, 600, 1200, 2000};
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, lk_test_seed());
  for (int n = 1; n <= 4; n++) {
    int64_t seen_lo = INT64_MAX, seen_hi = 0;
    for (int i = 0; i < 20000; i++) {
      int64_t d = lk_backoff_delay(&c, n, 0, &r.base);
      assert_true(d >= LK_MS(lo[n - 1]) && d <= LK_MS(hi[n - 1]));
      assert_int_equal(d % LK_MS(1), 0);
      seen_lo = d < seen_lo ? d : seen_lo;
      seen_hi = d > seen_hi ? d : seen_hi;
    }
    /* The whole range is reached (20000 draws over <= 1601 values). */
    assert_int_equal(seen_lo, LK_MS(lo[n - 1]));
    assert_int_equal(seen_hi, LK_MS(hi[n - 1]));
  }
}

/* The documented base delay (backoff.h), computed independently of the code under test in long
 * double: FIXED base, LINEAR base * n, EXPONENTIAL base * multiplier^(n-1), capped at max. */
static long double model_base(const lk_backoff_config *c, int n) {
  if (n < 1)
    n = 1;
  long double e = (long double)c->base;
  switch (c->kind) {
  case LK_BACKOFF_FIXED: break;
  case LK_BACKOFF_LINEAR: e *= (long double)n; break;
  case LK_BACKOFF_EXPONENTIAL:
    for (int i = 1; i < n && e < (long double)c->max; i++)
      e *= (long double)c->multiplier;
    break;
  }
  return e > (long double)c->max ? (long double)c->max : e;
}

/* Property: for every mode, kind, seed and extreme input, 0 <= delay <= max, and the delay lies
 * in the documented range around the model's base delay (one resolution unit of slack for the
 * whole-unit arithmetic, plus long double rounding). */
static void every_mode_stays_in_bounds(void **state) {
  (void)state;
  uint64_t seed0 = lk_test_seed();
  static const int64_t bases[] = {1, LK_MS(1), LK_MS(200), LK_SEC(1), INT64_MAX / 4, INT64_MAX};
  static const int ns[] = {1, 2, 3, 10, 31, 62, 63, 64, 65, 1000, INT_MAX - 1, INT_MAX};
  long checked = 0;
  for (int seed = 0; seed < 64; seed++) {
    lk_rand_fast r;
    lk_rand_fast_seeded(&r, seed0 + (uint64_t)seed);
    for (int k = LK_BACKOFF_FIXED; k <= LK_BACKOFF_EXPONENTIAL; k++)
      for (int j = LK_JITTER_NONE; j <= LK_JITTER_DECORRELATED; j++)
        for (size_t bi = 0; bi < sizeof bases / sizeof bases[0]; bi++) {
          lk_backoff_config c;
          lk_backoff_config_init_default(&c);
          c.kind = (lk_backoff_kind)k;
          c.jitter = (lk_jitter_kind)j;
          c.resolution = seed % 2 ? 1 : LK_MS(1);
          c.base = bases[bi] < c.resolution ? c.resolution : bases[bi];
          c.max = seed % 3 == 0 ? INT64_MAX : (c.base > INT64_MAX / 8 ? c.base : c.base * 8);
          c.multiplier = seed % 4 == 1 ? 1.7 : 2.0;
          c.ratio = (double)(seed % 5) / 4.0;
          assert_int_equal(lk_backoff_config_validate(&c, NULL), LK_OK);
          int64_t prev = 0;
          for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            long double e = model_base(&c, ns[ni]);
            long double tol = (long double)c.resolution + e * 1e-12L;
            long double max = (long double)c.max;
            int64_t got_e = lk_backoff_base_delay(&c, ns[ni]);
            assert_true(fabsl((long double)got_e - e) <= tol);
            int64_t d = lk_backoff_delay(&c, ns[ni], prev, &r.base);
            long double dl = (long double)d;
            assert_true(d >= 0 && d <= c.max);
            long double lo = 0, hi = e;
            switch (c.jitter) {
            case LK_JITTER_NONE: lo = e; break;
            case LK_JITTER_FULL: break;
            case LK_JITTER_EQUAL: lo = e / 2; break;
            case LK_JITTER_SYMMETRIC:
              lo = e - e * (long double)c.ratio;
              hi = e + e * (long double)c.ratio;
              break;
            case LK_JITTER_DECORRELATED: {
              long double p = (long double)(prev < c.base ? c.base : prev);
              lo = (long double)c.base;
              hi = 3 * p;
              break;
            }
            }
            if (hi > max)
              hi = max;
            if (lo > max)
              lo = max;
            if (dl < lo - tol || dl > hi + tol)
              fail_msg("kind %d jitter %d base %lld max %lld n %d prev %lld: %lld outside "
                       "[%.0Lf, %.0Lf]",
                       k, j, (long long)c.base, (long long)c.max, ns[ni], (long long)prev,
                       (long long)d, lo, hi);
            prev = d;
            checked++;
          }
        }
  }
  assert_int_equal(checked, 64 * 3 * 5 * 6 * 12);
}

/* Pearson's chi-square of `draws` delays (in ms) against the uniform distribution on [lo, hi]
 * ms; every delay must fall in the range. */
static double chi_square_uniform(const lk_backoff_config *c, int n, int64_t prev, int64_t lo,
                                 int64_t hi, int per_bin, uint64_t seed) {
  size_t bins = (size_t)(hi - lo + 1);
  long *count = calloc(bins, sizeof *count);
  assert_non_null(count);
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, seed);
  long draws = (long)bins * per_bin;
  for (long i = 0; i < draws; i++) {
    int64_t d = lk_backoff_delay(c, n, prev, &r.base);
    assert_int_equal(d % LK_MS(1), 0);
    int64_t ms = d / LK_MS(1);
    assert_true(ms >= lo && ms <= hi);
    count[ms - lo]++;
  }
  double chi = 0;
  for (size_t b = 0; b < bins; b++) {
    double diff = (double)count[b] - per_bin;
    chi += diff * diff / per_bin;
  }
  free(count);
  return chi;
}

/* Each jitter's distribution is uniform on its documented range: a chi-square over 2000 draws
 * per value with a fixed seed stays below the p = 0.001 critical value of its degrees of
 * freedom (a biased or truncated draw, e.g. one value short of the range, exceeds it). */
static void distributions_are_uniform(void **state) {
  (void)state;
  const uint64_t seed = 0x6a09e667f3bcc908u;
  lk_backoff_config full = cfg(LK_BACKOFF_EXPONENTIAL, LK_JITTER_FULL, LK_MS(10), LK_MS(80));
  assert_true(chi_square_uniform(&full, 3, 0, 0, 40, 2000, seed) < 73.40); /* df 40 */
  lk_backoff_config equal = cfg(LK_BACKOFF_EXPONENTIAL, LK_JITTER_EQUAL, LK_MS(10), LK_MS(80));
  assert_true(chi_square_uniform(&equal, 3, 0, 20, 40, 2000, seed) < 45.31); /* df 20 */
  lk_backoff_config sym = cfg(LK_BACKOFF_EXPONENTIAL, LK_JITTER_SYMMETRIC, LK_MS(200), LK_SEC(2));
  assert_true(chi_square_uniform(&sym, 1, 0, 100, 300, 2000, seed) < 267.54); /* df 200 */
  lk_backoff_config dec =
      cfg(LK_BACKOFF_EXPONENTIAL, LK_JITTER_DECORRELATED, LK_MS(10), LK_SEC(10));
  assert_true(chi_square_uniform(&dec, 4, LK_MS(20), 10, 60, 2000, seed) < 86.66); /* df 50 */
}

/* Full jitter covers [0, e]; equal covers [e/2, e]; decorrelated grows from base. */
static void distributions_cover_their_ranges(void **state) {
  (void)state;
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, lk_test_seed());
  lk_backoff_config full = cfg(LK_BACKOFF_EXPONENTIAL, LK_JITTER_FULL, LK_MS(10), LK_MS(80));
  lk_backoff_config equal = cfg(LK_BACKOFF_EXPONENTIAL, LK_JITTER_EQUAL, LK_MS(10), LK_MS(80));
  int64_t fmin = INT64_MAX, fmax = 0, emin = INT64_MAX, emax = 0;
  double fsum = 0;
  for (int i = 0; i < 50000; i++) {
    int64_t f = lk_backoff_delay(&full, 3, 0, &r.base), e = lk_backoff_delay(&equal, 3, 0, &r.base);
    fmin = f < fmin ? f : fmin, fmax = f > fmax ? f : fmax;
    emin = e < emin ? e : emin, emax = e > emax ? e : emax;
    fsum += (double)f;
  }
  assert_int_equal(fmin, 0);
  assert_int_equal(fmax, LK_MS(40));
  assert_int_equal(emin, LK_MS(20));
  assert_int_equal(emax, LK_MS(40));
  double mean = fsum / 50000 / LK_MS(1);
  assert_true(mean > 19 && mean < 21); /* uniform on 0..40 ms: mean 20 */
  lk_backoff_config dec =
      cfg(LK_BACKOFF_EXPONENTIAL, LK_JITTER_DECORRELATED, LK_MS(10), LK_SEC(10));
  int64_t prev = 0, hi = 0;
  for (int i = 0; i < 200; i++) {
    prev = lk_backoff_delay(&dec, i + 1, prev, &r.base);
    hi = prev > hi ? prev : hi;
  }
  assert_true(hi > LK_SEC(1)); /* it climbs towards the cap */
}

/* Each jitter mode draws exactly once; NONE never draws. */
static uint64_t draws;
static uint64_t counting_next(lk_rand *self) {
  (void)self;
  draws++;
  return 12345;
}
static uint64_t counting_below(lk_rand *self, uint64_t bound) {
  (void)self;
  draws++;
  return bound ? 7 % bound : 0;
}

static void draws_once_per_delay(void **state) {
  (void)state;
  lk_rand counter = {counting_below, counting_next};
  for (int j = LK_JITTER_NONE; j <= LK_JITTER_DECORRELATED; j++) {
    lk_backoff_config c = cfg(LK_BACKOFF_EXPONENTIAL, (lk_jitter_kind)j, LK_MS(200), LK_MS(2000));
    draws = 0;
    lk_backoff_delay(&c, 2, LK_MS(300), &counter);
    assert_int_equal(draws, j == LK_JITTER_NONE ? 0 : 1);
  }
}

static void names_round_trip(void **state) {
  (void)state;
  for (int k = LK_BACKOFF_FIXED; k <= LK_BACKOFF_EXPONENTIAL; k++) {
    lk_backoff_kind out;
    assert_int_equal(lk_backoff_kind_parse(lk_backoff_kind_name((lk_backoff_kind)k), &out), 0);
    assert_int_equal(out, k);
  }
  for (int j = LK_JITTER_NONE; j <= LK_JITTER_DECORRELATED; j++) {
    lk_jitter_kind out;
    assert_int_equal(lk_jitter_kind_parse(lk_jitter_kind_name((lk_jitter_kind)j), &out), 0);
    assert_int_equal(out, j);
  }
  lk_jitter_kind j;
  assert_int_equal(lk_jitter_kind_parse("FULL", &j), 0);
  assert_int_equal(j, LK_JITTER_FULL);
  assert_int_equal(lk_jitter_kind_parse("fuller", &j), LK_EINVAL);
  assert_int_equal(lk_jitter_kind_parse(NULL, &j), LK_EINVAL);
  assert_string_equal(lk_jitter_kind_name((lk_jitter_kind)99), "unknown");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(base_delays),
      cmocka_unit_test(symmetric_matches_seed_table),
      cmocka_unit_test(every_mode_stays_in_bounds),
      cmocka_unit_test(distributions_cover_their_ranges),
      cmocka_unit_test(distributions_are_uniform),
      cmocka_unit_test(draws_once_per_delay),
      cmocka_unit_test(names_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
