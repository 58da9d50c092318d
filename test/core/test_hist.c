/* SPDX-License-Identifier: MIT */
/* Histogram: the 1 % bound over random values and ranges, percentiles against a sorted reference,
 * clamping, merge, reset, cumulative counts, in-place init, zero allocations when recording. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h> /* needs the three above first */

#include <linkd/error.h>
#include <linkd/hist.h>
#include <linkd/rand.h>

#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define REL_ERR 0.01

/* A value log-uniform in [lo, hi]: every magnitude gets exercised, not just the top one. */
static int64_t log_uniform(lk_rand *r, int64_t lo, int64_t hi) {
  double a = log((double)(lo < 1 ? 1 : lo)), b = log((double)hi);
  double u = (double)lk_rand_below(r, UINT64_C(1) << 53) / (double)(UINT64_C(1) << 53);
  double v = exp(a + (b - a) * u);
  int64_t x = v >= 9.2e18 ? hi : (int64_t)v;
  if (lo == 0 && lk_rand_below(r, 50) == 0)
    x = (int64_t)lk_rand_below(r, 300); /* small values, including 0 */
  return x < lo ? lo : x > hi ? hi : x;
}

static void assert_within(int64_t got, int64_t want) {
  double err = want == 0 ? (double)(got != 0) : fabs((double)got - (double)want) / (double)want;
  if (err > REL_ERR)
    fail_msg("got %lld want %lld (relative error %.5f)", (long long)got, (long long)want, err);
}

static void bad_arguments(void **state) {
  (void)state;
  assert_null(lk_hist_new(-1, 100));
  assert_null(lk_hist_new(10, 10));
  assert_null(lk_hist_new(10, 5));
  assert_int_equal(lk_hist_memsize(5, 5), 0);
  static _Alignas(LK_HIST_ALIGN) unsigned char mem[64 * 1024];
  lk_hist *h = NULL;
  size_t need = lk_hist_memsize(1, 1000000);
  assert_true(need > 0 && need <= sizeof mem);
  assert_int_equal(lk_hist_init(mem + 8, sizeof mem - 8, 1, 1000000, &h), LK_EINVAL);
  assert_int_equal(lk_hist_init(mem, need - 1, 1, 1000000, &h), LK_ERANGE);
  assert_int_equal(lk_hist_init(NULL, need, 1, 1000000, &h), LK_EINVAL);
  assert_int_equal(lk_hist_init(mem, need, 0, 0, &h), LK_EINVAL);
  assert_int_equal(lk_hist_init(mem, need, 1, 1000000, &h), LK_OK);
  lk_hist_record(h, 12345);
  assert_int_equal(lk_hist_count(h), 1);
  assert_int_equal(lk_hist_min(h), 12345);
  lk_hist_free(h); /* in place: no-op, must not crash */
  assert_int_equal(lk_hist_count(h), 1);
  lk_hist_free(NULL);
  lk_hist_record(NULL, 1);
  assert_int_equal(lk_hist_count(NULL), 0);
  assert_int_equal(lk_hist_percentile(NULL, 50), 0);
  assert_int_equal(lk_hist_merge(h, h), LK_EINVAL);
  assert_int_equal(lk_hist_merge(NULL, h), LK_EINVAL);
}

static void empty_histogram(void **state) {
  (void)state;
  lk_hist *h = lk_hist_new(0, LK_SEC(60));
  assert_non_null(h);
  assert_int_equal(lk_hist_count(h), 0);
  assert_int_equal(lk_hist_percentile(h, 50), 0);
  assert_int_equal(lk_hist_percentile(h, 100), 0);
  assert_int_equal(lk_hist_min(h), 0);
  assert_int_equal(lk_hist_max(h), 0);
  assert_true(lk_hist_mean(h) == 0.0);
  assert_int_equal(lk_hist_sum(h), 0);
  lk_hist_free(h);
}

/* Small values are exact with lowest 0, and memory is what the header promises. */
static void small_values_exact(void **state) {
  (void)state;
  assert_true(lk_hist_memsize(0, LK_SEC(3600)) < 40 * 1024);
  lk_hist *h = lk_hist_new(0, LK_SEC(3600));
  for (int64_t v = 0; v < 256; v++) {
    assert_int_equal(lk_hist_lowest_equivalent(h, v), v);
    assert_int_equal(lk_hist_highest_equivalent(h, v), v);
  }
  lk_hist_record(h, 0);
  lk_hist_record(h, 7);
  lk_hist_record(h, 255);
  assert_int_equal(lk_hist_percentile(h, 0), 0);
  assert_int_equal(lk_hist_percentile(h, 50), 7);
  assert_int_equal(lk_hist_percentile(h, 100), 255);
  lk_hist_free(h);
}

/* Every value's bucket is within 1 % of it, across ranges and magnitudes. */
static void relative_error_random(void **state) {
  (void)state;
  const int64_t ranges[][2] = {{0, LK_SEC(3600)},     {1, LK_SEC(60)}, {1000, LK_SEC(10)},
                               {999999, LK_SEC(100)}, {1, INT64_MAX},  {123456789, 987654321012}};
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, lk_test_seed());
  for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++) {
    lk_hist *h = lk_hist_new(ranges[k][0], ranges[k][1]);
    assert_non_null(h);
    for (int i = 0; i < 200000; i++) {
      int64_t v = log_uniform(&r.base, ranges[k][0], ranges[k][1]);
      int64_t lo = lk_hist_lowest_equivalent(h, v), hi = lk_hist_highest_equivalent(h, v);
      assert_true(lo <= v && v <= hi);
      assert_within(lo, v);
      assert_within(hi, v);
      /* A histogram holding only v reports v within 1 % at every percentile. */
      if (i % 1000 == 0) {
        lk_hist_reset(h);
        lk_hist_record(h, v);
        assert_int_equal(lk_hist_percentile(h, 50), v); /* clamped to exact min/max */
        assert_int_equal(lk_hist_count(h), 1);
      }
    }
    lk_hist_free(h);
  }
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Percentiles against the exact nearest-rank value of a sorted copy. */
static void percentiles_vs_sorted(void **state) {
  (void)state;
  enum { N = 100000 };
  int64_t *vals = malloc(N * sizeof *vals);
  assert_non_null(vals);
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, lk_test_seed() + 1);
  lk_hist *h = lk_hist_new(1000, LK_SEC(60));
  uint64_t sum = 0;
  for (int i = 0; i < N; i++) {
    /* A latency-like mix: a body around 2 ms and a long tail to seconds. */
    vals[i] = lk_rand_below(&r.base, 20) == 0 ? log_uniform(&r.base, LK_MS(5), LK_SEC(5))
                                              : log_uniform(&r.base, LK_MS(1), LK_MS(3));
    lk_hist_record(h, vals[i]);
    sum += (uint64_t)vals[i];
  }
  qsort(vals, N, sizeof *vals, cmp_i64);
  const double qs[] = {0, 1, 10, 50, 90, 99, 99.9, 99.99, 100};
  for (size_t k = 0; k < sizeof qs / sizeof qs[0]; k++) {
    size_t rank = (size_t)ceil(qs[k] / 100.0 * N - 1e-9);
    int64_t want = vals[rank == 0 ? 0 : rank - 1];
    int64_t got = lk_hist_percentile(h, qs[k]);
    assert_within(got, want);
    assert_true(got >= want); /* reported at the top of the bucket */
    /* At most (100 - q) % of the sample lies above the reported value. */
    size_t above = 0;
    while (above < N && vals[N - 1 - above] > got)
      above++;
    assert_true((double)above <= (100.0 - qs[k]) / 100.0 * N + 1e-9);
  }
  assert_int_equal(lk_hist_count(h), N);
  assert_int_equal(lk_hist_min(h), vals[0]);
  assert_int_equal(lk_hist_max(h), vals[N - 1]);
  assert_int_equal(lk_hist_sum(h), sum);
  assert_true(fabs(lk_hist_mean(h) - (double)sum / N) < 1e-6 * ((double)sum / N));
  /* Out-of-range q is clamped; NaN reads as 0. */
  assert_int_equal(lk_hist_percentile(h, -5), vals[0]);
  assert_int_equal(lk_hist_percentile(h, 250), vals[N - 1]);
  assert_int_equal(lk_hist_percentile(h, NAN), vals[0]);
  lk_hist_free(h);
  free(vals);
}

/* 99.9 % of 1000 values is rank 999, not 1000 (floating point must not round the rank up). */
static void rank_rounding(void **state) {
  (void)state;
  lk_hist *h = lk_hist_new(0, 10000000);
  lk_hist_record_n(h, 1000, 999);
  lk_hist_record(h, 1000000);
  assert_within(lk_hist_percentile(h, 99.9), 1000);
  assert_int_equal(lk_hist_percentile(h, 99.95), 1000000);
  lk_hist_reset(h);
  for (int64_t v = 1; v <= 1000; v++)
    lk_hist_record(h, v * 100);
  assert_within(lk_hist_percentile(h, 50), 50000);
  assert_within(lk_hist_percentile(h, 90), 90000);
  assert_within(lk_hist_percentile(h, 99), 99000);
  assert_within(lk_hist_percentile(h, 99.9), 99900);
  lk_hist_free(h);
}

static void clamping_is_counted(void **state) {
  (void)state;
  lk_hist *h = lk_hist_new(1000, 1000000);
  lk_hist_record(h, 5);
  lk_hist_record(h, -7);
  lk_hist_record(h, INT64_MAX);
  lk_hist_record(h, 5000);
  assert_int_equal(lk_hist_count(h), 4);
  assert_int_equal(lk_hist_underflows(h), 2);
  assert_int_equal(lk_hist_overflows(h), 1);
  assert_int_equal(lk_hist_min(h), 1000);
  assert_int_equal(lk_hist_max(h), 1000000);
  assert_int_equal(lk_hist_percentile(h, 100), 1000000);
  assert_int_equal(lk_hist_percentile(h, 0), 1000);
  assert_int_equal(lk_hist_sum(h), 1000 + 1000 + 1000000 + 5000);
  assert_int_equal(lk_hist_lowest(h), 1000);
  assert_int_equal(lk_hist_highest(h), 1000000);
  lk_hist_record_n(h, 2000, 10);
  lk_hist_record_n(h, 2000, 0);
  assert_int_equal(lk_hist_count(h), 14);
  assert_int_equal(lk_hist_percentile(h, 50), lk_hist_highest_equivalent(h, 2000));
  lk_hist_reset(h);
  assert_int_equal(lk_hist_count(h), 0);
  assert_int_equal(lk_hist_underflows(h), 0);
  assert_int_equal(lk_hist_overflows(h), 0);
  assert_int_equal(lk_hist_max(h), 0);
  lk_hist_record(h, 3000);
  assert_int_equal(lk_hist_min(h), 3000);
  assert_int_equal(lk_hist_max(h), 3000);
  lk_hist_free(h);
}

static void merge_same_and_different_ranges(void **state) {
  (void)state;
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, lk_test_seed() + 2);
  lk_hist *a = lk_hist_new(0, LK_SEC(60)), *b = lk_hist_new(0, LK_SEC(60));
  lk_hist *all = lk_hist_new(0, LK_SEC(60));
  lk_hist *other = lk_hist_new(LK_MS(1), LK_SEC(3600)); /* different unit and size */
  enum { N = 50000 };
  int64_t *vals = malloc(2 * N * sizeof *vals);
  for (int i = 0; i < 2 * N; i++) {
    vals[i] = log_uniform(&r.base, LK_MS(1), LK_SEC(30));
    lk_hist_record(i < N ? a : b, vals[i]);
    lk_hist_record(all, vals[i]);
  }
  assert_int_equal(lk_hist_merge(other, a), LK_OK);
  assert_int_equal(lk_hist_merge(a, b), LK_OK);
  assert_int_equal(lk_hist_merge(other, b), LK_OK);
  assert_int_equal(lk_hist_count(a), 2 * N);
  assert_int_equal(lk_hist_sum(a), lk_hist_sum(all));
  assert_int_equal(lk_hist_min(a), lk_hist_min(all));
  assert_int_equal(lk_hist_max(a), lk_hist_max(all));
  assert_int_equal(lk_hist_count(other), 2 * N);
  assert_int_equal(lk_hist_sum(other), lk_hist_sum(all));
  qsort(vals, 2 * N, sizeof *vals, cmp_i64);
  const double qs[] = {0, 25, 50, 90, 99, 99.9, 100};
  for (size_t k = 0; k < sizeof qs / sizeof qs[0]; k++) {
    /* Same range: bucket-for-bucket identical to recording everything in one. */
    assert_int_equal(lk_hist_percentile(a, qs[k]), lk_hist_percentile(all, qs[k]));
    size_t rank = (size_t)ceil(qs[k] / 100.0 * 2 * N - 1e-9);
    assert_within(lk_hist_percentile(other, qs[k]), vals[rank == 0 ? 0 : rank - 1]);
  }
  /* Merging into a narrower range clamps and counts. */
  lk_hist *narrow = lk_hist_new(LK_MS(2), LK_SEC(1));
  assert_int_equal(lk_hist_merge(narrow, all), LK_OK);
  assert_int_equal(lk_hist_count(narrow), 2 * N);
  assert_true(lk_hist_underflows(narrow) > 0);
  assert_true(lk_hist_overflows(narrow) > 0);
  assert_int_equal(lk_hist_max(narrow), LK_SEC(1));
  /* Merging an empty histogram changes nothing. */
  lk_hist *empty = lk_hist_new(0, 10);
  assert_int_equal(lk_hist_merge(a, empty), LK_OK);
  assert_int_equal(lk_hist_count(a), 2 * N);
  lk_hist_free(empty);
  lk_hist_free(narrow);
  lk_hist_free(a);
  lk_hist_free(b);
  lk_hist_free(all);
  lk_hist_free(other);
  free(vals);
}

/* Cumulative counts against a brute-force count over the recorded values. */
static void cumulative_counts(void **state) {
  (void)state;
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, lk_test_seed() + 3);
  lk_hist *h = lk_hist_new(0, LK_SEC(100));
  enum { N = 20000 };
  int64_t *vals = malloc(N * sizeof *vals);
  for (int i = 0; i < N; i++) {
    vals[i] = log_uniform(&r.base, 0, LK_SEC(120)); /* some overflow */
    lk_hist_record(h, vals[i]);
  }
  const int64_t bounds[] = {0, 100, LK_MS(1), LK_MS(10), LK_MS(250), LK_SEC(1), LK_SEC(50)};
  enum { NB = sizeof bounds / sizeof bounds[0] };
  uint64_t counts[NB], total = 0;
  assert_int_equal(lk_hist_cumulative(h, bounds, NB, counts, &total), LK_OK);
  assert_int_equal(total, N);
  for (size_t j = 0; j < NB; j++) {
    uint64_t want = 0;
    for (int i = 0; i < N; i++) {
      int64_t v = vals[i] > LK_SEC(100) ? LK_SEC(100) : vals[i];
      want += lk_hist_lowest_equivalent(h, v) <= bounds[j];
    }
    assert_int_equal(counts[j], want);
    assert_true(j == 0 || counts[j] >= counts[j - 1]);
  }
  const int64_t bad[] = {5, 4};
  assert_int_equal(lk_hist_cumulative(h, bad, 2, counts, NULL), LK_EINVAL);
  assert_int_equal(lk_hist_cumulative(h, NULL, 0, NULL, &total), LK_OK);
  assert_int_equal(lk_hist_cumulative(NULL, bounds, 1, counts, NULL), LK_EINVAL);
  lk_hist_free(h);
  free(vals);
}

static void record_allocates_nothing(void **state) {
  (void)state;
  lk_hist *h = lk_hist_new(0, LK_SEC(60));
  lk_hist *h2 = lk_hist_new(0, LK_SEC(60));
  lk_test_alloc_count_start();
  for (int64_t i = 0; i < 100000; i++)
    lk_hist_record(h, i * 7919);
  lk_hist_record_n(h, 5, 3);
  int64_t p = lk_hist_percentile(h, 99.9);
  lk_hist_merge(h2, h);
  uint64_t allocs = lk_test_alloc_count_stop();
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && !defined(LK_NO_ALLOC_HOOK)
  assert_int_equal(allocs, 0);
#else
  (void)allocs;
#endif
  assert_true(p > 0);
  assert_int_equal(lk_hist_count(h2), 100003);
  lk_hist_free(h);
  lk_hist_free(h2);
}

/* Counts and sums pin at UINT64_MAX: a wrapped count would read as a handful of values and a
 * wrapped sum as a tiny mean. */
static void counts_saturate(void **state) {
  (void)state;
  const uint64_t half = UINT64_MAX / 2 + 1;
  lk_hist *h = lk_hist_new(1, LK_SEC(3600));
  lk_hist_record_n(h, 1000, half);
  lk_hist_record_n(h, 1000, half); /* 2^64: one past the top */
  lk_hist_record_n(h, LK_SEC(7200), half);
  lk_hist_record_n(h, LK_SEC(7200), half); /* clamped: the overflow count passes the top too */
  lk_hist_record_n(h, 0, UINT64_MAX);      /* clamped up: underflows */
  assert_int_equal(lk_hist_count(h), UINT64_MAX);
  assert_int_equal(lk_hist_sum(h), UINT64_MAX); /* 3.6e12 * 2^63 alone is past it */
  assert_int_equal(lk_hist_overflows(h), UINT64_MAX);
  assert_int_equal(lk_hist_underflows(h), UINT64_MAX);
  /* Every bucket is full, so ranks stay sane: the median is in the biggest of equal thirds. */
  int64_t p50 = lk_hist_percentile(h, 50);
  assert_true(p50 >= 1 && p50 <= 1010);
  assert_int_equal(lk_hist_percentile(h, 100), LK_SEC(3600));
  const int64_t bounds[] = {2000, LK_SEC(3600)};
  uint64_t cum[2], total = 0;
  assert_int_equal(lk_hist_cumulative(h, bounds, 2, cum, &total), LK_OK);
  assert_int_equal(cum[0], UINT64_MAX);
  assert_int_equal(cum[1], UINT64_MAX);
  assert_int_equal(total, UINT64_MAX);
  /* A merge of a full histogram into another stays full. */
  lk_hist *d = lk_hist_new(1, LK_SEC(3600));
  lk_hist_record_n(d, 5, 7);
  assert_int_equal(lk_hist_merge(d, h), LK_OK);
  assert_int_equal(lk_hist_count(d), UINT64_MAX);
  assert_int_equal(lk_hist_sum(d), UINT64_MAX);
  assert_int_equal(lk_hist_overflows(d), UINT64_MAX);
  lk_hist_free(d);
  lk_hist_free(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bad_arguments),         cmocka_unit_test(empty_histogram),
      cmocka_unit_test(small_values_exact),    cmocka_unit_test(relative_error_random),
      cmocka_unit_test(percentiles_vs_sorted), cmocka_unit_test(rank_rounding),
      cmocka_unit_test(clamping_is_counted),   cmocka_unit_test(merge_same_and_different_ranges),
      cmocka_unit_test(cumulative_counts),     cmocka_unit_test(record_allocates_nothing),
      cmocka_unit_test(counts_saturate),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
