/* SPDX-License-Identifier: MIT */
/* Synchronous calls on the real clock woken from other threads: a cancel during a retry delay
 * and a bulkhead slot handed over while the call waits in the queue. Also run under TSan. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <linkd/linkd.h>

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

static void sleep_ns(int64_t ns) {
  struct timespec ts = {(time_t)(ns / LK_NS_PER_S), (long)(ns % LK_NS_PER_S)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static void refused(void *ctx, const lk_exec_attempt *a, lk_exec_outcome *out) {
  (void)a;
  int *calls = ctx;
  (*calls)++;
  out->failure = LK_F_CONNECT_REFUSED;
  out->sent = false;
}

static void succeed(void *ctx, const lk_exec_attempt *a, lk_exec_outcome *out) {
  (void)a;
  int *calls = ctx;
  (*calls)++;
  out->failure = LK_F_NONE;
}

static void *fire_later(void *arg) {
  sleep_ns(LK_MS(50));
  lk_cancel_fire(arg);
  return NULL;
}

static void test_cancel_wakes_delay(void **state) {
  (void)state;
  lk_exec_policy p;
  lk_exec_policy_init_default(&p);
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  rc.backoff.jitter = LK_JITTER_NONE;
  rc.backoff.base = LK_SEC(5); /* the first delay would be 5 s */
  rc.backoff.max = LK_SEC(5);
  assert_int_equal(lk_retry_policy_init(&p.retry, &rc, NULL), LK_OK);
  p.deadline = LK_SEC(20);
  lk_cancel *c = lk_cancel_new();
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, fire_later, c), 0);
  int calls = 0;
  lk_exec_result res;
  memset(&res, 0, sizeof res);
  int64_t t0 = lk_now_ns();
  assert_int_equal(lk_exec_run(&p, refused, &calls, c, &res), LK_ECANCELED);
  int64_t took = lk_now_ns() - t0;
  pthread_join(t, NULL);
  assert_int_equal(calls, 1);
  assert_true(took < LK_SEC(2)); /* woken, not the 5 s delay */
  assert_true(took >= LK_MS(40));
  lk_cancel_free(c);
}

typedef struct holder {
  lk_bulkhead *bh;
  int64_t hold;
} holder;

static void *release_later(void *arg) {
  holder *h = arg;
  sleep_ns(h->hold);
  lk_bulkhead_release(h->bh);
  return NULL;
}

typedef struct waits {
  int64_t waited;
  bool granted;
  int n;
} waits;

static void on_event(void *ctx, const lk_event *ev) {
  waits *w = ctx;
  if (ev->type == LK_EV_WAIT && ev->u.wait.what == LK_EV_WAIT_BULKHEAD) {
    w->waited = ev->u.wait.waited;
    w->granted = ev->u.wait.granted;
    w->n++;
  }
}

static void test_bulkhead_grant_wakes_wait(void **state) {
  (void)state;
  lk_bulkhead_config hc = {1, 4};
  lk_bulkhead *bh = NULL;
  assert_int_equal(lk_bulkhead_new(&hc, &bh, NULL), LK_OK);
  assert_int_equal(lk_bulkhead_try_acquire(bh), LK_OK);
  holder h = {bh, LK_MS(50)};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, release_later, &h), 0);
  lk_exec_policy p;
  lk_exec_policy_init_default(&p);
  p.bulkhead = bh;
  p.deadline = LK_SEC(10);
  waits w = {0, false, 0};
  p.on_event = on_event;
  p.event_ctx = &w;
  int calls = 0;
  lk_exec_result res;
  memset(&res, 0, sizeof res);
  int64_t t0 = lk_now_ns();
  assert_int_equal(lk_exec_run(&p, succeed, &calls, NULL, &res), LK_OK);
  int64_t took = lk_now_ns() - t0;
  pthread_join(t, NULL);
  assert_int_equal(calls, 1);
  assert_int_equal(w.n, 1);
  assert_true(w.granted);
  assert_true(w.waited >= LK_MS(40));
  assert_true(took < LK_SEC(5)); /* woken by the grant, not by the end of the wait */
  assert_int_equal(lk_bulkhead_in_use(bh), 0);
  lk_bulkhead_free(bh);
}

/* An asynchronous call on a poll() loop: queued for a bulkhead slot that another thread releases;
 * the wake hook runs on that thread and only writes an eventfd, the loop then steps the call. */
typedef struct ploop {
  int efd;
  int64_t timer_at; /* lk_now_ns() + delay; INT64_MAX disarmed */
  atomic_int wakes;
  int starts;
  lk_exec_call *call; /* the attempt to end, set by start */
  bool done;
  int err;
} ploop;

static void p_start(void *ctx, lk_exec_call *call, const lk_exec_attempt *a) {
  (void)a;
  ploop *l = ctx;
  l->starts++;
  l->call = call;
}

static void p_timer(void *ctx, lk_exec_call *call, int64_t delay) {
  (void)call;
  ploop *l = ctx;
  l->timer_at = delay < 0 ? INT64_MAX : lk_now_ns() + delay;
}

static void p_wake(void *ctx, lk_exec_call *call) {
  (void)call;
  ploop *l = ctx;
  atomic_fetch_add(&l->wakes, 1);
  uint64_t one = 1;
  ssize_t n = write(l->efd, &one, sizeof one);
  (void)n;
}

static void p_done(void *ud, const lk_exec_result *res) {
  ploop *l = ud;
  l->done = true;
  l->err = res->err;
}

static void test_async_wake_from_other_thread(void **state) {
  (void)state;
  lk_bulkhead_config hc = {1, 4};
  lk_bulkhead *bh = NULL;
  assert_int_equal(lk_bulkhead_new(&hc, &bh, NULL), LK_OK);
  assert_int_equal(lk_bulkhead_try_acquire(bh), LK_OK);
  lk_exec_policy p;
  lk_exec_policy_init_default(&p);
  p.bulkhead = bh;
  p.deadline = LK_SEC(10);
  ploop l = {.efd = eventfd(0, EFD_NONBLOCK), .timer_at = INT64_MAX};
  atomic_init(&l.wakes, 0);
  assert_true(l.efd >= 0);
  lk_exec_loop loop = {p_start, p_timer, NULL, p_wake, &l};
  lk_exec_call *call = NULL;
  assert_int_equal(lk_exec_start(&p, &loop, NULL, NULL, 0, p_done, &l, &call), LK_OK);
  holder h = {bh, LK_MS(30)};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, release_later, &h), 0);
  int64_t t0 = lk_now_ns();
  /* the loop: bounded in iterations and time */
  for (int i = 0; i < 10000 && !l.done && lk_now_ns() - t0 < LK_SEC(5); i++) {
    if (l.call) { /* the attempt runs: it succeeds at once */
      lk_exec_call *c = l.call;
      l.call = NULL;
      lk_exec_outcome ok = {LK_F_NONE, true, -1};
      assert_int_equal(lk_exec_attempt_end(c, &ok), LK_OK);
      continue;
    }
    int64_t now = lk_now_ns();
    int ms = l.timer_at == INT64_MAX ? 1000 : (int)((l.timer_at - now) / LK_NS_PER_MS);
    if (ms < 0)
      ms = 0;
    struct pollfd pf = {l.efd, POLLIN, 0};
    int rc = poll(&pf, 1, ms);
    if (rc > 0) {
      uint64_t v;
      ssize_t n = read(l.efd, &v, sizeof v);
      (void)n;
      assert_int_equal(lk_exec_timer(call), LK_OK);
    } else if (lk_now_ns() >= l.timer_at) {
      assert_int_equal(lk_exec_timer(call), LK_OK);
    }
  }
  int64_t took = lk_now_ns() - t0;
  pthread_join(t, NULL);
  assert_true(l.done);
  assert_int_equal(l.err, LK_OK);
  assert_int_equal(l.starts, 1);
  assert_int_equal(atomic_load(&l.wakes), 1);
  assert_true(took >= LK_MS(25));
  assert_true(took < LK_SEC(5)); /* woken by the grant, not the 10 s end of the wait */
  assert_int_equal(lk_bulkhead_in_use(bh), 0);
  close(l.efd);
  lk_bulkhead_free(bh);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cancel_wakes_delay),
      cmocka_unit_test(test_bulkhead_grant_wakes_wait),
      cmocka_unit_test(test_async_wake_from_other_thread),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
