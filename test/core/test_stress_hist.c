/* SPDX-License-Identifier: MIT */
/* Histogram under concurrency: several threads record into one histogram (and merge into another)
 * while a reader polls; afterwards every count, the sum, min, max and each bucket add up to what a
 * single-threaded replay of the same values gives. Bounded in count; run under TSan in CI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h> /* needs the three above first */

#include <linkd/hist.h>
#include <linkd/rand.h>

#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>

enum { THREADS = 4, PER_THREAD = 100000 };

typedef struct worker {
  lk_hist *h;
  lk_hist *local; /* each thread also fills its own, merged into `merged` at the end */
  lk_hist *merged;
  uint64_t seed;
  uint64_t sum;
} worker;

static _Atomic int writers_done;

static int64_t draw(lk_rand *r) {
  /* Mostly a narrow latency body (threads collide on the same buckets), some wide values and
   * some outside the range. */
  uint64_t k = lk_rand_below(r, 100);
  if (k < 80)
    return LK_MS(2) + (int64_t)lk_rand_below(r, (uint64_t)LK_MS(1));
  if (k < 98)
    return (int64_t)lk_rand_below(r, (uint64_t)LK_SEC(10));
  return k == 98 ? -5 : LK_SEC(20);
}

static void *writer(void *arg) {
  worker *w = arg;
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, w->seed);
  for (int i = 0; i < PER_THREAD; i++) {
    int64_t v = draw(&r.base);
    lk_hist_record(w->h, v);
    lk_hist_record(w->local, v);
    w->sum += (uint64_t)(v < 0 ? 0 : v > LK_SEC(10) ? LK_SEC(10) : v);
  }
  lk_hist_merge(w->merged, w->local);
  atomic_fetch_add(&writers_done, 1);
  return NULL;
}

typedef struct reader_state {
  lk_hist *h;
  uint64_t polls;
  bool sane; /* count never went down, percentiles stayed in range */
} reader_state;

static void *reader(void *arg) {
  reader_state *rs = arg;
  uint64_t last = 0;
  /* Bounded: stops when the writers are done or after a fixed number of polls. */
  while (atomic_load(&writers_done) < THREADS && rs->polls < 1000000) {
    uint64_t c = lk_hist_count(rs->h);
    if (c < last)
      rs->sane = false;
    last = c;
    int64_t p = lk_hist_percentile(rs->h, 99.9);
    if (p < 0 || p > LK_SEC(10))
      rs->sane = false;
    rs->polls++;
  }
  return NULL;
}

static void counts_add_up(void **state) {
  (void)state;
  lk_hist *h = lk_hist_new(0, LK_SEC(10));
  lk_hist *merged = lk_hist_new(0, LK_SEC(10));
  lk_hist *replay = lk_hist_new(0, LK_SEC(10));
  assert_non_null(h);
  worker w[THREADS];
  pthread_t t[THREADS], rt;
  uint64_t seed = lk_test_seed();
  atomic_store(&writers_done, 0);
  reader_state rs = {h, 0, true};
  assert_int_equal(pthread_create(&rt, NULL, reader, &rs), 0);
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){h, lk_hist_new(0, LK_SEC(10)), merged, seed + (uint64_t)i, 0};
    assert_int_equal(pthread_create(&t[i], NULL, writer, &w[i]), 0);
  }
  uint64_t sum = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    sum += w[i].sum;
  }
  pthread_join(rt, NULL);
  assert_true(rs.sane);

  /* Replay the same values on one thread: the shared histograms must match it exactly. */
  for (int i = 0; i < THREADS; i++) {
    lk_rand_fast r;
    lk_rand_fast_seeded(&r, seed + (uint64_t)i);
    for (int k = 0; k < PER_THREAD; k++)
      lk_hist_record(replay, draw(&r.base));
  }
  const uint64_t n = (uint64_t)THREADS * PER_THREAD;
  lk_hist *check[] = {h, merged};
  for (int c = 0; c < 2; c++) {
    lk_hist *x = check[c];
    assert_int_equal(lk_hist_count(x), n);
    assert_int_equal(lk_hist_sum(x), sum);
    assert_int_equal(lk_hist_min(x), lk_hist_min(replay));
    assert_int_equal(lk_hist_max(x), lk_hist_max(replay));
    assert_int_equal(lk_hist_underflows(x), lk_hist_underflows(replay));
    assert_int_equal(lk_hist_overflows(x), lk_hist_overflows(replay));
    /* Every bucket: cumulative counts at every bucket boundary of the body and the tail. */
    int64_t bounds[512];
    size_t nb = 0;
    for (int64_t v = LK_MS(2); v < LK_MS(3) && nb < 256; v = lk_hist_highest_equivalent(x, v) + 1)
      bounds[nb++] = lk_hist_lowest_equivalent(x, v);
    for (int64_t v = 1; v < LK_SEC(10) && nb < 512; v = v * 11 / 10 + 1)
      if (v > bounds[nb - 1])
        bounds[nb++] = v;
    uint64_t got[512], want[512], tg = 0, tw = 0;
    assert_int_equal(lk_hist_cumulative(x, bounds, nb, got, &tg), 0);
    assert_int_equal(lk_hist_cumulative(replay, bounds, nb, want, &tw), 0);
    assert_int_equal(tg, tw);
    for (size_t j = 0; j < nb; j++)
      assert_int_equal(got[j], want[j]);
    const double qs[] = {0, 50, 90, 99, 99.9, 100};
    for (size_t k = 0; k < sizeof qs / sizeof qs[0]; k++)
      assert_int_equal(lk_hist_percentile(x, qs[k]), lk_hist_percentile(replay, qs[k]));
  }
  for (int i = 0; i < THREADS; i++)
    lk_hist_free(w[i].local);
  lk_hist_free(h);
  lk_hist_free(merged);
  lk_hist_free(replay);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(counts_add_up),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
