/* SPDX-License-Identifier: MIT */
/* Unit tests of libraryd's capacity pieces that need no daemon: the admission queue and its
 * disciplines (time passed in), service-cost specs, the slowdown fault and the per-100 ms series.
 */
#include "admq.h"
#include "fault.h"
#include "series.h"
#include "work.h"

#include <linkd/clock.h>
#include <linkd/error.h>

#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define MS(x) ((int64_t)(x)*1000000)

static void push(lk_admq *q, intptr_t id, int64_t now) {
  assert_true(lk_admq_reserve(q));
  lk_admq_push(q, (void *)id, now);
}

/* Pops one item at `now` and checks its id and verdict. */
static void expect(lk_admq *q, int64_t now, intptr_t id, lk_admq_verdict v) {
  void *item = NULL;
  int64_t at = -1;
  lk_admq_verdict got = lk_admq_pop(q, now, &item, &at);
  if (got != v || (intptr_t)item != id)
    fprintf(stderr, "pop at %lld: verdict %d item %ld, want %d item %ld\n", (long long)now, got,
            (long)(intptr_t)item, v, (long)id);
  assert_int_equal(got, v);
  assert_int_equal((intptr_t)item, id);
}

static void test_qdisc_names(void **state) {
  (void)state;
  const char *names[] = {"fifo", "lifo", "adaptive-lifo", "codel"};
  for (int i = 0; i < 4; i++) {
    lk_qdisc d;
    assert_int_equal(lk_qdisc_parse(names[i], &d), LK_OK);
    assert_string_equal(lk_qdisc_name(d), names[i]);
  }
  lk_qdisc d;
  assert_int_equal(lk_qdisc_parse("LIFO", &d), LK_EPARSE);
  assert_int_equal(lk_qdisc_parse("", &d), LK_EPARSE);
  assert_int_equal(lk_qdisc_parse(NULL, &d), LK_EPARSE);
}

static void test_admq_bounds(void **state) {
  (void)state;
  lk_admq q;
  assert_int_equal(lk_admq_init(&q, 0, LK_QDISC_FIFO, MS(5), MS(100), 0), LK_EINVAL);
  assert_int_equal(lk_admq_init(&q, 2, LK_QDISC_FIFO, 0, MS(100), 0), LK_EINVAL);
  assert_int_equal(lk_admq_init(&q, 2, LK_QDISC_FIFO, MS(5), MS(100), 0), LK_OK);
  assert_true(lk_admq_reserve(&q));
  assert_true(lk_admq_reserve(&q));
  assert_false(lk_admq_reserve(&q)); /* reserved slots count, pushed or not */
  assert_int_equal(lk_admq_depth(&q), 2);
  lk_admq_unreserve(&q);
  assert_int_equal(lk_admq_depth(&q), 1);
  lk_admq_push(&q, (void *)1, 10);
  assert_true(lk_admq_reserve(&q));
  lk_admq_push(&q, (void *)2, 20);
  assert_false(lk_admq_reserve(&q));
  assert_int_equal(q.depth_max, 2);
  void *item;
  int64_t at;
  assert_int_equal(lk_admq_pop(&q, 30, &item, &at), LK_ADMQ_SERVE);
  assert_int_equal(at, 10);
  assert_true(lk_admq_reserve(&q)); /* a pop frees a slot */
  lk_admq_unreserve(&q);
  expect(&q, 40, 2, LK_ADMQ_SERVE);
  assert_int_equal(lk_admq_pop(&q, 50, &item, &at), LK_ADMQ_EMPTY);
  assert_int_equal(lk_admq_depth(&q), 0);
  lk_admq_destroy(&q);
}

static void test_fifo_and_lifo(void **state) {
  (void)state;
  lk_admq q;
  assert_int_equal(lk_admq_init(&q, 4, LK_QDISC_FIFO, MS(5), MS(100), 0), LK_OK);
  /* Wrap around the ring: the order survives. */
  for (int round = 0; round < 3; round++) {
    for (intptr_t i = 1; i <= 3; i++)
      push(&q, i, MS(round * 10 + i));
    for (intptr_t i = 1; i <= 3; i++)
      expect(&q, MS(1000), i, LK_ADMQ_SERVE); /* fifo never drops, however old */
  }
  lk_admq_destroy(&q);
  assert_int_equal(lk_admq_init(&q, 4, LK_QDISC_LIFO, MS(5), MS(100), 0), LK_OK);
  for (int round = 0; round < 3; round++) {
    for (intptr_t i = 1; i <= 3; i++)
      push(&q, i, MS(i));
    expect(&q, MS(4), 3, LK_ADMQ_SERVE);
    push(&q, 4, MS(5));
    expect(&q, MS(6), 4, LK_ADMQ_SERVE);
    expect(&q, MS(7), 2, LK_ADMQ_SERVE);
    expect(&q, MS(8), 1, LK_ADMQ_SERVE);
  }
  lk_admq_destroy(&q);
}

static void test_adaptive_lifo(void **state) {
  (void)state;
  lk_admq q;
  assert_int_equal(lk_admq_init(&q, 8, LK_QDISC_ADAPTIVE_LIFO, MS(5), MS(100), 0), LK_OK);
  push(&q, 1, MS(0));
  push(&q, 2, MS(1));
  push(&q, 3, MS(2));
  expect(&q, MS(4), 1, LK_ADMQ_SERVE); /* the oldest waited 4 ms <= 5 ms: fifo */
  expect(&q, MS(6), 2, LK_ADMQ_SERVE); /* 5 ms exactly: still fifo */
  push(&q, 4, MS(7));
  push(&q, 5, MS(8));
  expect(&q, MS(8), 5, LK_ADMQ_SERVE); /* the oldest (3) waited 6 ms: newest first */
  expect(&q, MS(9), 4, LK_ADMQ_SERVE);
  expect(&q, MS(9), 3, LK_ADMQ_SERVE); /* nothing is ever dropped */
  push(&q, 6, MS(20));
  push(&q, 7, MS(21));
  expect(&q, MS(22), 6, LK_ADMQ_SERVE); /* back to fifo once the queue is fresh */
  lk_admq_destroy(&q);
}

static void test_codel(void **state) {
  (void)state;
  lk_admq q;
  assert_int_equal(lk_admq_init(&q, 16, LK_QDISC_CODEL, MS(5), MS(100), 0), LK_OK);
  /* The queue was empty within the last interval: requests may wait up to the interval. */
  push(&q, 1, MS(1000));
  push(&q, 2, MS(1000));
  push(&q, 3, MS(1000));
  expect(&q, MS(1050), 1, LK_ADMQ_SERVE);
  expect(&q, MS(1090), 2, LK_ADMQ_SERVE); /* 90 ms: within the interval, not yet standing */
  /* Not empty for more than the interval now: the limit drops to the target. */
  push(&q, 4, MS(1108));
  expect(&q, MS(1110), 3, LK_ADMQ_DROP);  /* waited 110 ms */
  expect(&q, MS(1111), 4, LK_ADMQ_SERVE); /* waited 3 ms <= 5 ms */
  /* The queue emptied at 1111: the interval applies again. */
  push(&q, 5, MS(1200));
  push(&q, 6, MS(1200));
  expect(&q, MS(1260), 5, LK_ADMQ_SERVE);
  expect(&q, MS(1290), 6, LK_ADMQ_SERVE);
  push(&q, 7, MS(1290)); /* the queue was empty at 1290 */
  expect(&q, MS(1295), 7, LK_ADMQ_SERVE);
  /* A standing queue: everything older than 5 ms is dropped, fresher requests are served. */
  for (intptr_t i = 10; i < 16; i++)
    push(&q, i, MS(1400) + MS(i - 10) * 30);
  expect(&q, MS(1560), 10, LK_ADMQ_DROP); /* 160 ms, and not empty since 1400 */
  expect(&q, MS(1560), 11, LK_ADMQ_DROP);
  expect(&q, MS(1560), 12, LK_ADMQ_DROP);
  expect(&q, MS(1560), 13, LK_ADMQ_DROP);
  expect(&q, MS(1560), 14, LK_ADMQ_DROP);          /* pushed at 1520: 40 ms */
  expect(&q, MS(1552) + MS(2), 15, LK_ADMQ_SERVE); /* pushed at 1550: 4 ms */
  lk_admq_destroy(&q);
}

static void test_work_spec(void **state) {
  (void)state;
  lk_work_spec w;
  char err[300];
  assert_int_equal(lk_work_parse(LK_WORK_DEFAULT, &w, err, sizeof err), LK_OK);
  assert_int_equal(w.n, 2);
  assert_int_equal(lk_work_find(&w, "GET", "/books/7")->ns, MS(1));
  assert_int_equal(lk_work_find(&w, "POST", "/books/7/loans")->ns, MS(3));
  assert_null(lk_work_find(&w, "GET", "/books"));
  assert_null(lk_work_find(&w, "PUT", "/books/7"));
  assert_int_equal(
      lk_work_parse(" GET /books/1=cpu:250us , GET /books/*=1.5ms,* = 2ms", &w, err, sizeof err),
      LK_OK);
  assert_int_equal(w.n, 3);
  const lk_work_entry *e = lk_work_find(&w, "GET", "/books/1"); /* first match wins */
  assert_true(e->cpu);
  assert_int_equal(e->ns, 250000);
  e = lk_work_find(&w, "GET", "/books/2");
  assert_false(e->cpu);
  assert_int_equal(e->ns, 1500000);
  assert_int_equal(lk_work_find(&w, "DELETE", "/loans/3")->ns, MS(2));
  assert_int_equal(lk_work_parse("none", &w, err, sizeof err), LK_OK);
  assert_int_equal(w.n, 0);
  assert_null(lk_work_find(&w, "GET", "/books/1"));
  const char *bad[] = {"",
                       "GET /books/*",
                       "GET /books/*=5",
                       "GET /books/*=-1ms",
                       "books=1ms",
                       "GET /books/*=cpu:",
                       "GET /books/*=1ms,",
                       "=1ms",
                       "GET /books/*=1ms,,GET /books=1ms"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = '\0';
    if (lk_work_parse(bad[i], &w, err, sizeof err) != LK_EPARSE)
      fail_msg("'%s' was accepted", bad[i]);
    assert_true(err[0] != '\0');
  }
  assert_int_equal(lk_work_scaled(MS(2), 1.5), MS(3));
  assert_int_equal(lk_work_scaled(0, 100.0), 0);
  assert_int_equal(lk_work_scaled(INT64_MAX / 2, 1e6), INT64_MAX); /* saturates */
}

static void test_slowdown_rules(void **state) {
  (void)state;
  lk_fault_rule r;
  char err[200];
  assert_int_equal(lk_fault_rule_parse("route=GET /books/*,kind=slowdown,factor=2.5,for=200ms", &r,
                                       err, sizeof err),
                   LK_OK);
  assert_int_equal(r.act.kind, LK_FAULT_SLOWDOWN);
  assert_true(r.act.factor == 2.5);
  assert_int_equal(r.act.for_ns, MS(200));
  const char *bad[] = {"kind=slowdown",
                       "kind=slowdown,factor=0.5",
                       "kind=slowdown,factor=x",
                       "kind=slowdown,factor=2,p=0.5",
                       "kind=slowdown,factor=2,count=1",
                       "kind=slowdown,factor=2,for=5",
                       "kind=latency,delay=1ms,factor=2",
                       "kind=close,for=1s"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (lk_fault_rule_parse(bad[i], &r, err, sizeof err) != LK_EPARSE)
      fail_msg("'%s' was accepted", bad[i]);

  lk_faults *f = lk_faults_new(1);
  int64_t t0 = lk_now_ns();
  assert_true(lk_faults_slowdown(f, "GET", "/books/1", t0) == 1.0);
  lk_fault_rule_parse("route=GET /books/*,kind=slowdown,factor=3,for=1s", &r, err, sizeof err);
  lk_faults_add(f, &r);
  lk_fault_rule_parse("kind=slowdown,factor=2", &r, err, sizeof err);
  int forever = lk_faults_add(f, &r);
  lk_fault_rule_parse("route=GET /books/*,kind=close", &r, err, sizeof err);
  lk_faults_add(f, &r);
  assert_true(lk_faults_slowdown(f, "GET", "/books/1", t0) == 6.0); /* they multiply */
  assert_true(lk_faults_slowdown(f, "POST", "/books/1/loans", t0) == 2.0);
  assert_true(lk_faults_slowdown(f, NULL, NULL, t0) == 6.0); /* every active rule */
  /* Past for=: inert. */
  assert_true(lk_faults_slowdown(f, "GET", "/books/1", t0 + MS(1100)) == 2.0);
  /* Slowdowns take no part in the action decision: the close rule still decides. */
  lk_fault_plan plan;
  lk_faults_decide(f, "GET", "/books/1", &plan);
  assert_int_equal(plan.act.kind, LK_FAULT_CLOSE);
  assert_int_equal(plan.delay_ns, 0);
  lk_fault_rule snap[4];
  assert_int_equal(lk_faults_snapshot(f, snap, 4), 3);
  assert_int_equal(snap[0].fired, 1); /* one matching GET while it was active */
  assert_int_equal(snap[1].fired, 3);
  assert_int_equal(lk_faults_remove(f, forever), LK_OK);
  assert_true(lk_faults_slowdown(f, "POST", "/books/1/loans", t0) == 1.0);
  lk_faults_free(f);
}

static void test_series(void **state) {
  (void)state;
  lk_series s;
  int64_t base = MS(100) * 5000; /* bucket 5000 */
  lk_series_init(&s, base + MS(30));
  lk_series_add(&s, LK_SERIES_ARRIVALS, base + MS(10));
  lk_series_add(&s, LK_SERIES_ARRIVALS, base + MS(99));
  lk_series_add(&s, LK_SERIES_COMPLETED, base + MS(99));
  lk_series_add(&s, LK_SERIES_DROPPED, base + MS(250));
  lk_series_add(&s, LK_SERIES_ABANDONED, base + MS(250));
  char *txt = lk_series_json(&s, base + MS(250));
  json_t *j = json_loads(txt, 0, NULL);
  free(txt);
  assert_non_null(j);
  assert_int_equal(json_integer_value(json_object_get(j, "window_ns")), MS(100));
  json_t *b = json_object_get(j, "buckets");
  assert_int_equal(json_array_size(b), 3); /* from the start's bucket to now's */
  json_t *b0 = json_array_get(b, 0), *b1 = json_array_get(b, 1), *b2 = json_array_get(b, 2);
  assert_int_equal(json_integer_value(json_object_get(b0, "t_ns")), base);
  assert_int_equal(json_integer_value(json_object_get(b0, "arrivals")), 2);
  assert_int_equal(json_integer_value(json_object_get(b0, "completed")), 1);
  assert_int_equal(json_integer_value(json_object_get(b1, "arrivals")), 0);
  assert_int_equal(json_integer_value(json_object_get(b2, "t_ns")), base + MS(200));
  assert_int_equal(json_integer_value(json_object_get(b2, "dropped")), 1);
  assert_int_equal(json_integer_value(json_object_get(b2, "abandoned")), 1);
  json_decref(j);
  /* 200 s later: only the last 120 s, and the old slots read as zero after reuse. */
  int64_t later = base + MS(200000);
  lk_series_add(&s, LK_SERIES_ARRIVALS, later);
  txt = lk_series_json(&s, later);
  j = json_loads(txt, 0, NULL);
  free(txt);
  b = json_object_get(j, "buckets");
  assert_int_equal(json_array_size(b), LK_SERIES_BUCKETS);
  uint64_t sum = 0;
  for (size_t i = 0; i < json_array_size(b); i++)
    sum += (uint64_t)json_integer_value(json_object_get(json_array_get(b, i), "arrivals"));
  assert_int_equal(sum, 1);
  json_t *last = json_array_get(b, LK_SERIES_BUCKETS - 1);
  assert_int_equal(json_integer_value(json_object_get(last, "t_ns")), later);
  json_decref(j);
  /* Reusing a slot clears it: the bucket 120 s after `later` holds only its own count. */
  lk_series_add(&s, LK_SERIES_ARRIVALS, later + MS(120000));
  txt = lk_series_json(&s, later + MS(120000));
  j = json_loads(txt, 0, NULL);
  free(txt);
  last = json_array_get(json_object_get(j, "buckets"), LK_SERIES_BUCKETS - 1);
  assert_int_equal(json_integer_value(json_object_get(last, "arrivals")), 1);
  json_decref(j);
  lk_series_destroy(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_qdisc_names),    cmocka_unit_test(test_admq_bounds),
      cmocka_unit_test(test_fifo_and_lifo),  cmocka_unit_test(test_adaptive_lifo),
      cmocka_unit_test(test_codel),          cmocka_unit_test(test_work_spec),
      cmocka_unit_test(test_slowdown_rules), cmocka_unit_test(test_series),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
