/* SPDX-License-Identifier: MIT */
/* Group commit in libraryd's SQLite store, on real files with synchronous=FULL: concurrent keyed
 * loans from many threads all land exactly once; a write that fails inside a group (an explicit
 * rollback after its effect, a duplicate key, an expired deadline) leaves its neighbours
 * committed and only its own changes undone; with grouping off every write has its own
 * commit. */
#include "dbdir.h"
#include "store.h"
#include "writer_gate.h"

#include <linkd/clock.h>
#include <linkd/error.h>

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static lk_store *open_store(const fixture *f, bool group) {
  lk_store_config cfg;
  lk_store_config_init_default(&cfg);
  cfg.path = f->path;
  cfg.seed = false;
  cfg.sync = LK_STORE_SYNC_FULL;
  cfg.group_commit = group;
  lk_store *s = NULL;
  char err[256];
  int rc = lk_store_open(&cfg, &s, err, sizeof err);
  if (rc != LK_OK)
    fprintf(stderr, "open: %s\n", err);
  assert_int_equal(rc, LK_OK);
  return s;
}

typedef struct loan_op {
  lk_store *s;
  int64_t book;
  char key[64];
  bool fail_after; /* roll back on purpose after the effect */
  lk_deadline dl;
  int rc; /* from lk_store_write */
  lk_loan loan;
} loan_op;

static int loan_tx(lk_store_tx *tx, void *arg) {
  loan_op *op = arg;
  memset(&op->loan, 0, sizeof op->loan);
  op->loan.book_id = op->book;
  snprintf(op->loan.tenant, sizeof op->loan.tenant, "gc");
  snprintf(op->loan.idem_key, sizeof op->loan.idem_key, "%s", op->key);
  int rc = lk_store_tx_loan_create(tx, &op->loan);
  if (rc != LK_OK)
    return rc;
  lk_idem_record rec = {.status = 201,
                        .headers = "",
                        .body = (uint8_t *)"{}",
                        .body_len = 2,
                        .created_wall_ns = lk_wall_ns()};
  rc = lk_store_tx_idem_put(tx, "gc", op->key, &rec, 0);
  if (rc != LK_OK)
    return rc;
  return op->fail_after ? LK_EIO : LK_OK;
}

static void *loan_main(void *arg) {
  loan_op *op = arg;
  op->rc = lk_store_write(op->s, op->dl, loan_tx, op);
  return NULL;
}

static int create_book(lk_store_tx *tx, void *arg) {
  lk_book *b = arg;
  return lk_store_tx_book_create(tx, b, &b->id);
}

static int64_t new_book(lk_store *s, int64_t stock) {
  lk_book b;
  memset(&b, 0, sizeof b);
  snprintf(b.title, sizeof b.title, "T");
  snprintf(b.author, sizeof b.author, "A");
  b.stock = stock;
  assert_int_equal(lk_store_write(s, lk_deadline_none(), create_book, &b), LK_OK);
  return b.id;
}

static int64_t stock_of(lk_store *s, int64_t book) {
  lk_book b;
  assert_int_equal(lk_store_book_get(s, book, &b, lk_deadline_none()), LK_OK);
  return b.stock;
}

static bool has_record(lk_store *s, const char *key) {
  lk_idem_record rec;
  int rc = lk_store_idem_get(s, "gc", key, 0, &rec, lk_deadline_none());
  if (rc == LK_OK)
    lk_idem_record_clear(&rec);
  return rc == LK_OK;
}

/* --- many threads, every write lands once ---------------------------------------------------- */

#define THREADS 8
#define PER_THREAD 150

typedef struct stream {
  lk_store *s;
  int64_t book;
  int t;
  int failures;
  int64_t stock_after[PER_THREAD];
} stream;

static void *stream_main(void *arg) {
  stream *st = arg;
  for (int i = 0; i < PER_THREAD; i++) {
    loan_op op = {.s = st->s, .book = st->book, .dl = lk_deadline_none()};
    snprintf(op.key, sizeof op.key, "t%d-%d", st->t, i);
    if (lk_store_write(st->s, op.dl, loan_tx, &op) != LK_OK)
      st->failures++;
    st->stock_after[i] = op.loan.stock_after;
  }
  return NULL;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static void concurrent_loans(const fixture *f, bool group, lk_store_commit_stats *cs) {
  lk_store *s = open_store(f, group);
  const int64_t stock = 1000000;
  int64_t book = new_book(s, stock);
  static stream st[THREADS];
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) {
    st[t] = (stream){.s = s, .book = book, .t = t};
    assert_int_equal(pthread_create(&th[t], NULL, stream_main, &st[t]), 0);
  }
  for (int t = 0; t < THREADS; t++)
    pthread_join(th[t], NULL);
  static int64_t all[THREADS * PER_THREAD];
  for (int t = 0; t < THREADS; t++) {
    assert_int_equal(st[t].failures, 0);
    memcpy(all + t * PER_THREAD, st[t].stock_after, sizeof st[t].stock_after);
  }
  /* Each loan saw its own stock value: none lost, none applied twice or on a stale read. */
  qsort(all, THREADS * PER_THREAD, sizeof all[0], cmp_i64);
  for (int i = 0; i < THREADS * PER_THREAD; i++)
    assert_int_equal(all[i], stock - THREADS * PER_THREAD + i);
  lk_store_counts c;
  assert_int_equal(lk_store_counts_get(s, &c), LK_OK);
  assert_int_equal(c.keyed_loans, THREADS * PER_THREAD);
  assert_int_equal(c.idem_records, THREADS * PER_THREAD);
  assert_int_equal(stock_of(s, book), stock - THREADS * PER_THREAD);
  lk_store_commit_stats_get(s, cs);
  lk_store_close(s);
  /* And all of it is in the file. */
  s = open_store(f, group);
  assert_int_equal(stock_of(s, book), stock - THREADS * PER_THREAD);
  lk_store_close(s);
}

static void test_concurrent_keyed_loans_grouped(void **state) {
  lk_store_commit_stats cs;
  concurrent_loans(*state, true, &cs);
  fprintf(stderr, "grouped: %lld writes in %lld commits, largest group %lld\n",
          (long long)cs.writes, (long long)cs.commits, (long long)cs.largest);
  assert_int_equal(cs.writes, 1 + THREADS * PER_THREAD);
  /* Eight writers on one fsync-bound connection queue up behind every COMMIT. */
  assert_true(cs.commits < cs.writes / 2);
  assert_true(cs.largest > 1 && cs.largest <= THREADS);
}

static void test_concurrent_keyed_loans_ungrouped(void **state) {
  lk_store_commit_stats cs;
  concurrent_loans(*state, false, &cs);
  assert_int_equal(cs.writes, 1 + THREADS * PER_THREAD);
  assert_int_equal(cs.commits, cs.writes);
  assert_int_equal(cs.largest, 1);
}

/* --- a failing write inside a group (the writer held by writer_gate.h's gate, so that the writes
 * started meanwhile queue up and form the next group together) --------------------------- */

enum { M_GOOD_A, M_FAILS, M_GOOD_B, M_SAME_KEY, M_LATE, M_GOOD_C, M_N };

static void test_failing_write_spares_its_group(void **state) {
  fixture *f = *state;
  lk_store *s = open_store(f, true);
  const int64_t stock = 100;
  int64_t book = new_book(s, stock);
  lk_store_commit_stats before; /* read before the gate holds the writer (and its lock) */
  lk_store_commit_stats_get(s, &before);
  gate g = GATE_INIT;
  gate_arg ga = {s, &g, -1};
  pthread_t gt;
  assert_int_equal(gate_hold(&ga, &gt), 0);

  static loan_op op[M_N];
  pthread_t th[M_N];
  for (int i = 0; i < M_N; i++) {
    op[i] = (loan_op){.s = s, .book = book, .dl = lk_deadline_none(), .rc = 1};
    snprintf(op[i].key, sizeof op[i].key, "m%d", i);
  }
  op[M_FAILS].fail_after = true; /* effect, then rollback */
  snprintf(op[M_SAME_KEY].key, sizeof op[M_SAME_KEY].key, "m%d", M_GOOD_A); /* dup key */
  op[M_LATE].dl = lk_deadline_after(lk_now_ns(), LK_MS(100)); /* expires while queued */
  /* One at a time, each queued before the next starts, so the group runs them in this order. */
  for (int i = 0; i < M_N; i++) {
    assert_int_equal(pthread_create(&th[i], NULL, loan_main, &op[i]), 0);
    for (int k = 0; k < 500 && lk_store_queued(s) < (size_t)i + 1; k++)
      usleep(2 * 1000);
    assert_int_equal(lk_store_queued(s), i + 1);
  }
  usleep(150 * 1000); /* past M_LATE's deadline */
  gate_open(&g);
  pthread_join(gt, NULL);
  for (int i = 0; i < M_N; i++)
    pthread_join(th[i], NULL);
  assert_int_equal(ga.rc, LK_OK);

  lk_store_commit_stats after;
  lk_store_commit_stats_get(s, &after);
  /* The six formed one group: one commit for all of them (the gate's own is counted before). */
  assert_int_equal(after.writes - before.writes, M_N + 1);
  assert_int_equal(after.commits - before.commits, 2);
  assert_int_equal(after.largest, M_N);

  assert_int_equal(op[M_GOOD_B].rc, LK_OK);
  assert_int_equal(op[M_GOOD_C].rc, LK_OK);
  assert_int_equal(op[M_FAILS].rc, LK_EIO);
  assert_int_equal(op[M_LATE].rc, LK_EDEADLINE);
  /* Of the two with one key, the first in the group won and the other hit its record. */
  assert_int_equal(op[M_GOOD_A].rc, LK_OK);
  assert_int_equal(op[M_SAME_KEY].rc, LK_ECONFLICT);
  assert_true(has_record(s, "m0") && has_record(s, "m2") && has_record(s, "m5"));
  assert_false(has_record(s, "m1"));
  assert_false(has_record(s, "m4"));
  lk_store_counts c;
  assert_int_equal(lk_store_counts_get(s, &c), LK_OK);
  assert_int_equal(c.keyed_loans, 3); /* m0 (once), m2, m5: the failed ones' loans rolled back */
  assert_int_equal(c.idem_records, 3);
  assert_int_equal(stock_of(s, book), stock - 3);
  lk_store_close(s);
}

/* --- asynchronous writes ---------------------------------------------------------------------- */

#define ASYNC_N 5

typedef struct async_op {
  loan_op op;
  int calls, rc;
  pthread_t thread;     /* the one that called done */
  bool durable_at_done; /* the key's record was readable from another connection by then */
} async_op;

static void async_done(void *arg, int rc) {
  async_op *a = arg;
  a->calls++;
  a->rc = rc;
  a->thread = pthread_self();
  a->durable_at_done = has_record(a->op.s, a->op.key);
}

/* With no group running, the caller commits its own write and is told before the call returns. */
static void test_async_write_alone(void **state) {
  lk_store *s = open_store(*state, true);
  int64_t book = new_book(s, 10);
  async_op a = {.op = {.s = s, .book = book, .dl = lk_deadline_none()}};
  snprintf(a.op.key, sizeof a.op.key, "alone");
  lk_store_write_async(s, a.op.dl, loan_tx, &a.op, async_done, &a);
  assert_int_equal(a.calls, 1);
  assert_int_equal(a.rc, LK_OK);
  assert_true(pthread_equal(a.thread, pthread_self()));
  assert_true(a.durable_at_done);
  assert_int_equal(stock_of(s, book), 9);
  lk_store_close(s);
}

/* Behind a running group, asynchronous writes only queue; the leader commits them with the
 * waiter queued after them in one group and calls each done once, after that COMMIT. */
static void test_async_writes_join_the_next_group(void **state) {
  lk_store *s = open_store(*state, true);
  int64_t book = new_book(s, 100);
  lk_store_commit_stats before;
  lk_store_commit_stats_get(s, &before);
  gate g = GATE_INIT;
  gate_arg ga = {s, &g, -1};
  pthread_t gt;
  assert_int_equal(gate_hold(&ga, &gt), 0);

  static async_op a[ASYNC_N];
  for (int i = 0; i < ASYNC_N; i++) {
    a[i] = (async_op){.op = {.s = s, .book = book, .dl = lk_deadline_none()}};
    snprintf(a[i].op.key, sizeof a[i].op.key, "a%d", i);
    lk_store_write_async(s, a[i].op.dl, loan_tx, &a[i].op, async_done, &a[i]);
    assert_int_equal(a[i].calls, 0); /* queued, not committed: the call did not wait */
  }
  assert_int_equal(lk_store_queued(s), ASYNC_N);
  loan_op w = {.s = s, .book = book, .dl = lk_deadline_none(), .rc = 1};
  snprintf(w.key, sizeof w.key, "waiter");
  pthread_t wt;
  assert_int_equal(pthread_create(&wt, NULL, loan_main, &w), 0);
  for (int k = 0; k < 500 && lk_store_queued(s) < ASYNC_N + 1; k++)
    usleep(2 * 1000);
  assert_int_equal(lk_store_queued(s), ASYNC_N + 1);

  gate_open(&g);
  pthread_join(gt, NULL);
  pthread_join(wt, NULL);
  assert_int_equal(ga.rc, LK_OK);
  assert_int_equal(w.rc, LK_OK);
  for (int i = 0; i < ASYNC_N; i++) {
    assert_int_equal(a[i].calls, 1);
    assert_int_equal(a[i].rc, LK_OK);
    assert_true(pthread_equal(a[i].thread, gt)); /* the gate's thread led on */
    assert_true(a[i].durable_at_done);
  }
  lk_store_commit_stats after;
  lk_store_commit_stats_get(s, &after);
  assert_int_equal(after.writes - before.writes, ASYNC_N + 2);
  assert_int_equal(after.commits - before.commits, 2);
  assert_int_equal(after.largest, ASYNC_N + 1);
  assert_int_equal(stock_of(s, book), 100 - ASYNC_N - 1);
  lk_store_close(s);
}

/* A write joins a group only while one is being committed: never on the caller's thread. */
static void test_join_only_a_running_group(void **state) {
  lk_store *s = open_store(*state, true);
  int64_t book = new_book(s, 10);
  async_op idle = {.op = {.s = s, .book = book, .dl = lk_deadline_none()}};
  snprintf(idle.op.key, sizeof idle.op.key, "idle");
  assert_false(lk_store_write_join(s, idle.op.dl, loan_tx, &idle.op, async_done, &idle));
  assert_int_equal(idle.calls, 0);
  assert_false(has_record(s, "idle"));

  gate g = GATE_INIT;
  gate_arg ga = {s, &g, -1};
  pthread_t gt;
  assert_int_equal(gate_hold(&ga, &gt), 0);
  async_op j = {.op = {.s = s, .book = book, .dl = lk_deadline_none()}};
  snprintf(j.op.key, sizeof j.op.key, "joined");
  assert_true(lk_store_write_join(s, j.op.dl, loan_tx, &j.op, async_done, &j));
  assert_int_equal(j.calls, 0);
  assert_int_equal(lk_store_queued(s), 1);
  gate_open(&g);
  pthread_join(gt, NULL);
  assert_int_equal(j.calls, 1);
  assert_int_equal(j.rc, LK_OK);
  assert_true(pthread_equal(j.thread, gt));
  assert_true(j.durable_at_done);
  assert_int_equal(stock_of(s, book), 9);
  lk_store_close(s);

  /* Without grouping there is never a group to join. */
  s = open_store(*state, false);
  assert_false(lk_store_write_join(s, idle.op.dl, loan_tx, &idle.op, async_done, &idle));
  assert_int_equal(idle.calls, 0);
  lk_store_close(s);
}

/* --- statistics while the writer is busy ------------------------------------------------------ */

typedef struct stats_read {
  lk_store *s;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  lk_store_commit_stats cs;
} stats_read;

static void *stats_main(void *arg) {
  stats_read *sr = arg;
  lk_store_commit_stats cs;
  lk_store_commit_stats_get(sr->s, &cs);
  pthread_mutex_lock(&sr->mu);
  sr->cs = cs;
  sr->done = true;
  pthread_cond_broadcast(&sr->cv);
  pthread_mutex_unlock(&sr->mu);
  return NULL;
}

/* The commit statistics are read without the writer's lock: a /metrics scrape reads them, and it
 * used to wait for the writer (a COMMIT's fsync, a whole group) while it held the metrics lock
 * that requests registering a new series need. Here a write holds the writer (the gate) while
 * another thread reads them: the read returns at once, with the counts from before the gate's
 * write, and the gate's write is counted once it is over. */
static void stats_while_writer_held(const fixture *f, bool group) {
  lk_store *s = open_store(f, group);
  new_book(s, 10);
  lk_store_commit_stats before;
  lk_store_commit_stats_get(s, &before);
  assert_int_equal(before.writes, 1);
  assert_int_equal(before.commits, 1);
  gate g = GATE_INIT;
  gate_arg ga = {s, &g, -1};
  pthread_t gt;
  assert_int_equal(gate_hold(&ga, &gt), 0);

  stats_read sr = {s, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, {0, 0, 0}};
  pthread_t rt;
  assert_int_equal(pthread_create(&rt, NULL, stats_main, &sr), 0);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 5; /* the read takes microseconds; the gate stays shut until it is checked */
  pthread_mutex_lock(&sr.mu);
  while (!sr.done && pthread_cond_timedwait(&sr.cv, &sr.mu, &until) == 0)
    ;
  bool done = sr.done;
  lk_store_commit_stats during = sr.cs;
  pthread_mutex_unlock(&sr.mu);

  gate_open(&g); /* whatever happened, so the threads end */
  pthread_join(gt, NULL);
  pthread_join(rt, NULL);
  if (!done)
    fail_msg("lk_store_commit_stats_get waited for the writer (%s)",
             group ? "group commit" : "no grouping");
  assert_int_equal(during.writes, before.writes);
  assert_int_equal(during.commits, before.commits);
  assert_int_equal(ga.rc, LK_OK);
  lk_store_commit_stats after;
  lk_store_commit_stats_get(s, &after);
  assert_int_equal(after.writes, before.writes + 1);
  assert_int_equal(after.commits, before.commits + 1);
  assert_int_equal(after.largest, 1);
  lk_store_close(s);
}

static void test_stats_do_not_wait_for_the_writer(void **state) {
  stats_while_writer_held(*state, true);
  stats_while_writer_held(*state, false);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_concurrent_keyed_loans_grouped, dbdir_setup,
                                      dbdir_teardown),
      cmocka_unit_test_setup_teardown(test_concurrent_keyed_loans_ungrouped, dbdir_setup,
                                      dbdir_teardown),
      cmocka_unit_test_setup_teardown(test_failing_write_spares_its_group, dbdir_setup,
                                      dbdir_teardown),
      cmocka_unit_test_setup_teardown(test_async_write_alone, dbdir_setup, dbdir_teardown),
      cmocka_unit_test_setup_teardown(test_async_writes_join_the_next_group, dbdir_setup,
                                      dbdir_teardown),
      cmocka_unit_test_setup_teardown(test_join_only_a_running_group, dbdir_setup, dbdir_teardown),
      cmocka_unit_test_setup_teardown(test_stats_do_not_wait_for_the_writer, dbdir_setup,
                                      dbdir_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
