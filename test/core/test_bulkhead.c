/* SPDX-License-Identifier: MIT */
/* Bulkhead: limits, FIFO hand-off, deadlines on a fake clock, queue bound, run-time limit
 * changes, wait statistics, bad config, zero allocation. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <linkd/bulkhead.h>
#include <linkd/error.h>

#include "fake_clock.h"
#include "testutil.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

static lk_bulkhead *make(int64_t max, int64_t queue) {
  lk_bulkhead_config c = {max, queue};
  lk_bulkhead *b = NULL;
  const char *why = "unset";
  assert_int_equal(lk_bulkhead_new(&c, &b, &why), LK_OK);
  assert_null(why);
  assert_non_null(b);
  return b;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Spins (with sleeps) until pred-like condition holds; bounded at ~10 s. */
static bool wait_depth(lk_bulkhead *b, int64_t depth) {
  for (int i = 0; i < 10000; i++) {
    if (lk_bulkhead_queue_depth(b) == depth)
      return true;
    sleep_ms(1);
  }
  return false;
}

typedef struct waiter_arg {
  lk_bulkhead *b;
  const lk_clock *clock;
  lk_deadline deadline;
  int id;
  int rc;
  bool release_after; /* give the slot back after logging */
  _Atomic int done;
  int *log; /* grant order, written while holding the (max 1) slot */
  _Atomic int *log_n;
} waiter_arg;

static void *waiter_main(void *p) {
  waiter_arg *a = p;
  a->rc = lk_bulkhead_acquire(a->b, a->clock, a->deadline);
  if (a->rc == LK_OK && a->log)
    a->log[atomic_fetch_add(a->log_n, 1)] = a->id;
  if (a->rc == LK_OK && a->release_after)
    lk_bulkhead_release(a->b);
  atomic_store(&a->done, 1);
  return NULL;
}

static void bad_config_rejected(void **state) {
  (void)state;
  lk_bulkhead_config bad[] = {
      {0, 1}, {-1, 1}, {LK_BULKHEAD_LIMIT_MAX + 1, 1}, {1, -1}, {1, LK_BULKHEAD_LIMIT_MAX + 1}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *why = NULL;
    assert_int_equal(lk_bulkhead_config_validate(&bad[i], &why), LK_ECONFIG);
    assert_non_null(why);
    lk_bulkhead *b = (lk_bulkhead *)&bad[i];
    why = NULL;
    assert_int_equal(lk_bulkhead_new(&bad[i], &b, &why), LK_ECONFIG);
    assert_null(b);
    assert_non_null(why);
  }
  const char *why = NULL;
  assert_int_equal(lk_bulkhead_config_validate(NULL, &why), LK_ECONFIG);
  lk_bulkhead_config c;
  lk_bulkhead_config_init_default(&c);
  assert_int_equal(c.max_concurrent, 25);
  assert_int_equal(c.max_queue, 50);
  assert_int_equal(lk_bulkhead_new(&c, NULL, &why), LK_EINVAL);
  lk_bulkhead_free(NULL);
  /* Both ends of the valid range. */
  c.max_concurrent = LK_BULKHEAD_LIMIT_MAX;
  c.max_queue = 0;
  lk_bulkhead *b = NULL;
  assert_int_equal(lk_bulkhead_new(&c, &b, NULL), LK_OK);
  assert_int_equal(lk_bulkhead_max(b), LK_BULKHEAD_LIMIT_MAX);
  lk_bulkhead_free(b);
}

static void try_acquire_limits(void **state) {
  (void)state;
  lk_bulkhead *b = make(3, 2);
  for (int i = 0; i < 3; i++)
    assert_int_equal(lk_bulkhead_try_acquire(b), LK_OK);
  assert_int_equal(lk_bulkhead_in_use(b), 3);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_EBULKHEAD_FULL);
  lk_bulkhead_release(b);
  assert_int_equal(lk_bulkhead_in_use(b), 2);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_OK);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_EBULKHEAD_FULL);
  for (int i = 0; i < 3; i++)
    lk_bulkhead_release(b);
  /* A stray release on an idle bulkhead never drives the count below zero. */
  lk_bulkhead_release(b);
  assert_int_equal(lk_bulkhead_in_use(b), 0);
  lk_bulkhead_stats s;
  lk_bulkhead_get_stats(b, &s);
  assert_int_equal(s.rejected_full, 2);
  assert_int_equal(s.in_use, 0);
  assert_int_equal(s.max_concurrent, 3);
  assert_int_equal(s.waited, 0);
  lk_bulkhead_free(b);
}

static void blocking_fast_path_and_immediate_refusals(void **state) {
  (void)state;
  lk_fake_clock fc;
  lk_fake_clock_init(&fc, LK_SEC(100));
  lk_bulkhead *b = make(1, 0);
  /* A free slot is taken at once, even with a deadline that has passed. */
  lk_deadline past = lk_deadline_after(LK_SEC(99), 0);
  assert_int_equal(lk_bulkhead_acquire(b, &fc.base, past), LK_OK);
  /* Full and expired: LK_EDEADLINE without queueing. */
  assert_int_equal(lk_bulkhead_acquire(b, &fc.base, past), LK_EDEADLINE);
  /* Full, time left, but no queue room: LK_EBULKHEAD_FULL at once. */
  assert_int_equal(lk_bulkhead_acquire(b, &fc.base, lk_deadline_none()), LK_EBULKHEAD_FULL);
  lk_bulkhead_stats s;
  lk_bulkhead_get_stats(b, &s);
  assert_int_equal(s.rejected_deadline, 1);
  assert_int_equal(s.rejected_full, 1);
  assert_int_equal(s.waited, 0);
  assert_int_equal(s.queue_depth, 0);
  lk_bulkhead_release(b);
  /* NULL clock means the system clock. */
  assert_int_equal(lk_bulkhead_acquire(b, NULL, lk_deadline_after(lk_now_ns(), LK_SEC(1))), LK_OK);
  lk_bulkhead_release(b);
  lk_bulkhead_free(b);
}

/* The remaining time is read from the caller's (fake) clock once and waited on CLOCK_MONOTONIC. */
static void deadline_bounds_the_wait(void **state) {
  (void)state;
  lk_fake_clock fc;
  lk_fake_clock_init(&fc, LK_SEC(7));
  lk_bulkhead *b = make(1, 4);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_OK);
  int64_t t0 = lk_now_ns();
  int rc = lk_bulkhead_acquire(b, &fc.base, lk_deadline_after(LK_SEC(7), LK_MS(60)));
  int64_t took = lk_now_ns() - t0;
  assert_int_equal(rc, LK_EDEADLINE);
  assert_true(took >= LK_MS(60));
  assert_true(took < LK_SEC(30)); /* generous: loaded machines */
  /* The waiter left the queue and holds nothing. */
  assert_int_equal(lk_bulkhead_queue_depth(b), 0);
  assert_int_equal(lk_bulkhead_in_use(b), 1);
  lk_bulkhead_stats s;
  lk_bulkhead_get_stats(b, &s);
  assert_int_equal(s.waited, 1);
  assert_int_equal(s.rejected_deadline, 1);
  assert_int_equal(s.wait_last_ns, 0); /* the fake clock did not move */
  lk_bulkhead_release(b);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_OK);
  lk_bulkhead_release(b);
  lk_bulkhead_free(b);
}

/* A queued waiter gets the released slot; wait time is measured on the given clock. */
static void release_hands_off_and_measures_wait(void **state) {
  (void)state;
  lk_fake_clock fc;
  lk_fake_clock_init(&fc, LK_SEC(1));
  lk_bulkhead *b = make(1, 4);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_OK);
  waiter_arg a = {.b = b, .clock = &fc.base, .deadline = lk_deadline_none()};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, waiter_main, &a), 0);
  assert_true(wait_depth(b, 1));
  /* While someone waits, a non-blocking caller may not overtake it. */
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_EBULKHEAD_FULL);
  lk_fake_clock_advance(&fc, LK_MS(7));
  lk_bulkhead_release(b);
  pthread_join(th, NULL);
  assert_int_equal(a.rc, LK_OK);
  assert_int_equal(lk_bulkhead_in_use(b), 1); /* the slot moved to the waiter */
  assert_int_equal(lk_bulkhead_queue_depth(b), 0);
  lk_bulkhead_stats s;
  lk_bulkhead_get_stats(b, &s);
  assert_int_equal(s.waited, 1);
  assert_int_equal(s.wait_last_ns, LK_MS(7));
  assert_int_equal(s.wait_total_ns, LK_MS(7));
  lk_bulkhead_release(b);
  assert_int_equal(lk_bulkhead_in_use(b), 0);
  lk_bulkhead_free(b);
}

static void start_in_order(waiter_arg *args, pthread_t *th, int n, lk_bulkhead *b) {
  for (int i = 0; i < n; i++) {
    assert_int_equal(pthread_create(&th[i], NULL, waiter_main, &args[i]), 0);
    assert_true(wait_depth(b, i + 1));
  }
}

/* Waits until the queue holds `depth` waiters or `gone` finished; true in the first case. */
static bool wait_depth_or_done(lk_bulkhead *b, int64_t depth, _Atomic int *gone) {
  for (int i = 0; i < 10000; i++) {
    if (lk_bulkhead_queue_depth(b) == depth)
      return true;
    if (atomic_load(gone))
      return false;
    sleep_ms(1);
  }
  return false;
}

/* One round: waiter 2 queues with `patience` and gives up; true when all N were seen queued at
 * once (so 3 and 4 were behind 2 when it left), with the grant order checked either way. */
static bool fifo_round(int64_t patience) {
  enum { N = 5 };
  lk_bulkhead *b = make(1, N);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_OK);
  int log[N];
  _Atomic int log_n = 0;
  waiter_arg args[N];
  pthread_t th[N];
  for (int i = 0; i < N; i++) {
    args[i] = (waiter_arg){.b = b,
                           .clock = lk_clock_system(),
                           .deadline = lk_deadline_none(),
                           .id = i,
                           .release_after = true,
                           .log = log,
                           .log_n = &log_n};
  }
  bool all_queued = true;
  for (int i = 0; i < N; i++) {
    if (i == 2)
      args[2].deadline = lk_deadline_after(lk_now_ns(), patience);
    assert_int_equal(pthread_create(&th[i], NULL, waiter_main, &args[i]), 0);
    if (i < 2)
      assert_true(wait_depth(b, i + 1));
    else
      all_queued = all_queued && wait_depth_or_done(b, i + 1, &args[2].done);
  }
  pthread_join(th[2], NULL); /* the slot is held: waiter 2 can only time out */
  assert_int_equal(args[2].rc, LK_EDEADLINE);
  assert_true(wait_depth(b, N - 1));
  lk_bulkhead_release(b); /* each waiter releases after logging: a chain of hand-offs */
  for (int i = 0; i < N; i++)
    if (i != 2)
      pthread_join(th[i], NULL);
  assert_int_equal(atomic_load(&log_n), N - 1);
  int want[] = {0, 1, 3, 4};
  for (int i = 0; i < N - 1; i++)
    assert_int_equal(log[i], want[i]);
  assert_int_equal(lk_bulkhead_in_use(b), 0);
  lk_bulkhead_free(b);
  return all_queued;
}

/* Waiters are served strictly in arrival order; one that times out leaves its place. The
 * bulkhead waits on CLOCK_MONOTONIC, so no fake clock can end waiter 2's wait; instead the test
 * observes whether 3 and 4 queued behind it before it left, and repeats with twice the patience
 * when they did not (a slow machine), so it never passes without seeing the case. */
static void fifo_order_with_a_timeout_in_the_middle(void **state) {
  (void)state;
  int64_t patience = LK_MS(100);
  bool seen = false;
  for (int round = 0; round < 7 && !seen; round++, patience *= 2)
    seen = fifo_round(patience);
  assert_true(seen);
}

static void queue_bound(void **state) {
  (void)state;
  lk_bulkhead *b = make(1, 2);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_OK);
  waiter_arg args[2];
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    args[i] = (waiter_arg){
        .b = b, .clock = lk_clock_system(), .deadline = lk_deadline_none(), .release_after = true};
  start_in_order(args, th, 2, b);
  assert_int_equal(lk_bulkhead_acquire(b, NULL, lk_deadline_none()), LK_EBULKHEAD_FULL);
  lk_bulkhead_release(b);
  for (int i = 0; i < 2; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(args[i].rc, LK_OK);
  }
  assert_int_equal(lk_bulkhead_in_use(b), 0);
  lk_bulkhead_free(b);
}

static void set_max_lower_and_raise(void **state) {
  (void)state;
  lk_bulkhead *b = make(3, 4);
  for (int i = 0; i < 3; i++)
    assert_int_equal(lk_bulkhead_try_acquire(b), LK_OK);
  assert_int_equal(lk_bulkhead_set_max(b, 0), LK_EINVAL);
  assert_int_equal(lk_bulkhead_set_max(b, LK_BULKHEAD_LIMIT_MAX + 1), LK_EINVAL);
  assert_int_equal(lk_bulkhead_set_max(NULL, 3), LK_EINVAL);
  /* Lowered to 1: holders finish; nothing is granted until in use < 1. */
  assert_int_equal(lk_bulkhead_set_max(b, 1), LK_OK);
  assert_int_equal(lk_bulkhead_max(b), 1);
  lk_bulkhead_release(b);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_EBULKHEAD_FULL);
  lk_bulkhead_release(b);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_EBULKHEAD_FULL);
  /* A waiter queued behind the lowered limit is not granted by a release that stays above it. */
  waiter_arg args[2];
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    args[i] = (waiter_arg){.b = b, .clock = lk_clock_system(), .deadline = lk_deadline_none()};
  start_in_order(args, th, 2, b);
  /* Raising the limit hands the new slots to the queue at once. */
  assert_int_equal(lk_bulkhead_set_max(b, 3), LK_OK);
  for (int i = 0; i < 2; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(args[i].rc, LK_OK);
  }
  assert_int_equal(lk_bulkhead_in_use(b), 3);
  assert_int_equal(lk_bulkhead_queue_depth(b), 0);
  for (int i = 0; i < 3; i++)
    lk_bulkhead_release(b);
  assert_int_equal(lk_bulkhead_in_use(b), 0);
  lk_bulkhead_free(b);
}

static _Atomic int go, waiter_running;

/* Non-blocking waiters share the FIFO: a release hands the slot to the first, notifies it once,
 * and a cancel before or after a grant says whether a slot is held. */
static int notified[3];
static void note(void *ud) { notified[(int)(intptr_t)ud]++; }

static void nonblocking_waiters(void **state) {
  (void)state;
  lk_bulkhead_config c = {.max_concurrent = 1, .max_queue = 2};
  lk_bulkhead *b = NULL;
  assert_int_equal(lk_bulkhead_new(&c, &b, NULL), LK_OK);
  lk_bulkhead_waiter w[3];
  assert_int_equal(lk_bulkhead_enqueue(b, &w[0], note, (void *)0), LK_OK); /* free slot */
  assert_int_equal(lk_bulkhead_enqueue(b, &w[1], note, (void *)1), LK_EAGAIN);
  assert_int_equal(lk_bulkhead_enqueue(b, &w[2], note, (void *)2), LK_EAGAIN);
  lk_bulkhead_waiter extra;
  assert_int_equal(lk_bulkhead_enqueue(b, &extra, note, (void *)0), LK_EBULKHEAD_FULL);
  assert_int_equal(lk_bulkhead_queue_depth(b), 2);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_EBULKHEAD_FULL);
  assert_false(lk_bulkhead_waiter_granted(b, &w[1]));
  lk_bulkhead_release(b); /* to w[1], the first queued */
  assert_int_equal(notified[1], 1);
  assert_int_equal(notified[2], 0);
  assert_true(lk_bulkhead_waiter_granted(b, &w[1]));
  assert_false(lk_bulkhead_waiter_granted(b, &w[2]));
  assert_int_equal(lk_bulkhead_in_use(b), 1);
  assert_int_equal(lk_bulkhead_queue_depth(b), 1);
  assert_true(lk_bulkhead_waiter_cancel(b, &w[2])); /* still queued: nothing held */
  assert_int_equal(lk_bulkhead_queue_depth(b), 0);
  assert_true(lk_bulkhead_waiter_cancel(b, &w[2]));
  lk_bulkhead_release(b);
  assert_int_equal(notified[2], 0);
  assert_int_equal(lk_bulkhead_in_use(b), 0);
  /* granted but not yet seen: the cancel reports the slot, which the caller then releases */
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_OK);
  assert_int_equal(lk_bulkhead_enqueue(b, &w[0], note, (void *)0), LK_EAGAIN);
  lk_bulkhead_release(b);
  assert_int_equal(notified[0], 1);
  assert_false(lk_bulkhead_waiter_cancel(b, &w[0]));
  assert_int_equal(lk_bulkhead_in_use(b), 1);
  lk_bulkhead_release(b);
  lk_bulkhead_stats st;
  lk_bulkhead_get_stats(b, &st);
  assert_int_equal(st.waited, 3);
  assert_int_equal(st.rejected_full, 2); /* the extra waiter and the try_acquire */
  assert_int_equal(lk_bulkhead_enqueue(NULL, &w[0], note, NULL), LK_EINVAL);
  lk_bulkhead_free(b);
}

static void *alloc_waiter(void *p) {
  waiter_arg *a = p;
  atomic_store(&waiter_running, 1);
  while (!atomic_load(&go))
    sched_yield();
  return waiter_main(a);
}

/* Neither the fast path nor a full wait-and-hand-off allocates. */
static void no_allocation_per_call(void **state) {
  (void)state;
  lk_bulkhead *b = make(2, 2);
  waiter_arg a = {
      .b = b, .clock = lk_clock_system(), .deadline = lk_deadline_none(), .release_after = true};
  pthread_t th;
  atomic_store(&go, 0);
  atomic_store(&waiter_running, 0);
  assert_int_equal(pthread_create(&th, NULL, alloc_waiter, &a), 0);
  /* Count only once the thread runs: its start-up (a sanitizer's bookkeeping among it) is not
   * the bulkhead's. */
  while (!atomic_load(&waiter_running))
    sched_yield();
  lk_test_alloc_count_start();
  int64_t sink = 0;
  for (int i = 0; i < 10000; i++) {
    sink += lk_bulkhead_try_acquire(b);
    lk_bulkhead_release(b);
    sink += lk_bulkhead_in_use(b);
  }
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_OK);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_OK);
  atomic_store(&go, 1);
  bool queued = wait_depth(b, 1);
  lk_bulkhead_release(b);
  while (!atomic_load(&a.done))
    sched_yield();
  uint64_t allocs = lk_test_alloc_count_stop();
  pthread_join(th, NULL);
  assert_true(queued);
  assert_int_equal(a.rc, LK_OK);
  assert_true(sink != 42);
  assert_int_equal(allocs, 0);
#if LK_TEST_ALLOC_COUNTING
  /* The counter does see allocations, so the zero above means something. */
  lk_test_alloc_count_start();
  void *volatile p = malloc(16); /* volatile: keeps the pair from being optimized out */
  free(p);
  assert_int_equal(lk_test_alloc_count_stop(), 1);
#endif
  lk_bulkhead_release(b);
  assert_int_equal(lk_bulkhead_in_use(b), 0);
  lk_bulkhead_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bad_config_rejected),
      cmocka_unit_test(nonblocking_waiters),
      cmocka_unit_test(try_acquire_limits),
      cmocka_unit_test(blocking_fast_path_and_immediate_refusals),
      cmocka_unit_test(deadline_bounds_the_wait),
      cmocka_unit_test(release_hands_off_and_measures_wait),
      cmocka_unit_test(fifo_order_with_a_timeout_in_the_middle),
      cmocka_unit_test(queue_bound),
      cmocka_unit_test(set_max_lower_and_raise),
      cmocka_unit_test(no_allocation_per_call),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
