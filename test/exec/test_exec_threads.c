/* SPDX-License-Identifier: MIT */
/* Synchronous calls on the real clock woken from other threads: a cancel during a retry delay,
 * a bulkhead, limiter or breaker wait or an attempt, a bulkhead slot handed over while the call
 * waits in the queue; many threads sharing one budget, breaker, bulkhead and call metrics, and
 * one token. Also run under TSan. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <linkd/linkd.h>

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
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

/* --- a cancel from another thread ends every kind of wait, and an attempt that polls it ------- */

typedef struct firer {
  lk_cancel *c;
  int64_t after;
} firer;

static void *fire_after(void *arg) {
  firer *f = arg;
  sleep_ns(f->after);
  lk_cancel_fire(f->c);
  lk_cancel_fire(f->c); /* twice: idempotent */
  return NULL;
}

/* Polls the token as the header asks of an attempt, bounded by its own timeout. */
static void polls_token(void *ctx, const lk_exec_attempt *a, lk_exec_outcome *out) {
  int *calls = ctx;
  (*calls)++;
  int64_t end = lk_now_ns() + a->timeout;
  while (!lk_cancel_fired(a->cancel) && lk_now_ns() < end)
    sleep_ns(LK_MS(1));
  out->failure = lk_cancel_fired(a->cancel) ? LK_F_CANCELLED : LK_F_READ_TIMEOUT;
}

enum { WAIT_BULKHEAD, WAIT_LIMITER, WAIT_BREAKER, WAIT_ATTEMPT, WAIT__N };

static void test_cancel_from_thread_every_wait(void **state) {
  (void)state;
  for (int w = 0; w < WAIT__N; w++) {
    lk_exec_policy p;
    lk_exec_policy_init_default(&p);
    p.deadline = LK_SEC(20);
    p.attempt_timeout = LK_SEC(10);
    lk_bulkhead_config hc = {1, 4};
    lk_bulkhead *bh = NULL;
    assert_int_equal(lk_bulkhead_new(&hc, &bh, NULL), LK_OK);
    lk_limiter_config lc = {0.1, 1}; /* one token per 10 s */
    lk_limiter *lim = NULL;
    assert_int_equal(lk_limiter_new(&lc, &lim, NULL), LK_OK);
    lk_breaker_config bc;
    lk_breaker_config_init_default(&bc);
    bc.window_size = bc.minimum_calls = 1;
    bc.wait_open = LK_SEC(10);
    lk_breaker *br = NULL;
    assert_int_equal(lk_breaker_new(&bc, &br, NULL), LK_OK);
    int64_t now = lk_now_ns();
    switch (w) {
    case WAIT_BULKHEAD:
      assert_int_equal(lk_bulkhead_try_acquire(bh), LK_OK);
      p.bulkhead = bh;
      break;
    case WAIT_LIMITER:
      assert_int_equal(lk_limiter_try_acquire(lim, now), LK_OK);
      p.limiter = lim;
      break;
    case WAIT_BREAKER:
      assert_int_equal(lk_breaker_acquire(br, now), LK_OK);
      lk_breaker_record(br, now, 0, LK_F_CONNECT_REFUSED);
      p.breaker = br;
      break;
    default: p.bulkhead = bh; break;
    }
    lk_cancel *c = lk_cancel_new();
    firer fr = {c, LK_MS(30)};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fire_after, &fr), 0);
    int calls = 0;
    lk_exec_result res;
    memset(&res, 0, sizeof res);
    int64_t t0 = lk_now_ns();
    assert_int_equal(lk_exec_run(&p, polls_token, &calls, c, &res), LK_ECANCELED);
    int64_t took = lk_now_ns() - t0;
    pthread_join(t, NULL);
    assert_true(took < LK_SEC(5)); /* woken, not the 10 s wait */
    assert_int_equal(calls, w == WAIT_ATTEMPT ? 1 : 0);
    assert_int_equal(res.failure, LK_F_CANCELLED);
    assert_int_equal(lk_bulkhead_queue_depth(bh), 0);
    assert_int_equal(lk_bulkhead_in_use(bh), w == WAIT_BULKHEAD ? 1 : 0);
    if (w == WAIT_BULKHEAD)
      lk_bulkhead_release(bh);
    lk_cancel_free(c);
    lk_breaker_free(br);
    lk_limiter_free(lim);
    lk_bulkhead_free(bh);
  }
}

/* --- many threads, one set of protections -------------------------------------------------------
 */

enum { THREADS = 8, CALLS = 100 };

typedef struct shared {
  lk_exec_policy pol;
  atomic_int inflight, max_inflight, handed, fallbacks_ok;
  int ok, failed, budget_refusals, per_err[32];
  pthread_mutex_t mu; /* for the tallies above that are not atomic */
} shared;

typedef struct call_ctx {
  shared *sh;
  lk_rand_fast rng;
  int handed;
} call_ctx;

static void shared_attempt(void *ctx, const lk_exec_attempt *a, lk_exec_outcome *out) {
  call_ctx *c = ctx;
  (void)a;
  c->handed++;
  atomic_fetch_add(&c->sh->handed, 1);
  int in = atomic_fetch_add(&c->sh->inflight, 1) + 1;
  int m = atomic_load(&c->sh->max_inflight);
  while (in > m && !atomic_compare_exchange_weak(&c->sh->max_inflight, &m, in)) {
  }
  sleep_ns((int64_t)lk_rand_below(&c->rng.base, 100) * 1000); /* 0-100 us */
  uint64_t r = lk_rand_below(&c->rng.base, 10);
  out->retry_after = -1;
  out->sent = true;
  if (r < 6) {
    out->failure = LK_F_NONE;
  } else if (r < 8) {
    out->failure = LK_F_CONNECT_REFUSED;
    out->sent = false;
  } else if (r < 9) {
    out->failure = LK_F_SERVER_5XX;
  } else {
    out->failure = LK_F_TOO_MANY_REQUESTS;
    out->retry_after = LK_MS(1);
  }
  atomic_fetch_sub(&c->sh->inflight, 1);
}

static int shared_fallback(void *ctx, const lk_exec_result *r) {
  shared *sh = ctx;
  if (r->err == LK_EBREAKER_OPEN) { /* a default value for the open breaker only */
    atomic_fetch_add(&sh->fallbacks_ok, 1);
    return LK_OK;
  }
  return LK_ENOTFOUND;
}

static void *shared_worker(void *arg) {
  shared *sh = arg;
  call_ctx c = {sh, {{0}, {0}}, 0};
  lk_rand_fast_seeded(&c.rng, (uint64_t)(uintptr_t)&c);
  int ok = 0, failed = 0, refusals = 0, per_err[32] = {0};
  for (int i = 0; i < CALLS; i++) {
    lk_exec_attempt_info tl[16];
    lk_exec_result res;
    memset(&res, 0, sizeof res);
    res.timeline = tl;
    res.timeline_cap = 16;
    c.handed = 0;
    int err = lk_exec_run(&sh->pol, shared_attempt, &c, NULL, &res);
    int orig = res.fallback ? res.original_err : err;
    if (orig == LK_OK)
      ok++;
    else
      failed++;
    refusals += orig == LK_EBUDGET;
    per_err[-orig & 31]++;
    /* the timeline agrees with what the operation saw: refused entries only at the end */
    if (res.attempts <= 16) {
      int handed = 0;
      for (int j = 0; j < res.attempts; j++) {
        handed += !tl[j].refused;
        if (tl[j].refused && j != res.attempts - 1)
          fail_msg("refused entry %d of %d", j, res.attempts);
      }
      if (handed != c.handed)
        fail_msg("timeline %d attempts, operation %d", handed, c.handed);
    }
    if (res.elapsed > sh->pol.deadline + LK_MS(500)) /* real time: the sleep's own lateness */
      fail_msg("elapsed %lld", (long long)res.elapsed);
  }
  pthread_mutex_lock(&sh->mu);
  sh->ok += ok;
  sh->failed += failed;
  sh->budget_refusals += refusals;
  for (int i = 0; i < 32; i++)
    sh->per_err[i] += per_err[i];
  pthread_mutex_unlock(&sh->mu);
  return NULL;
}

static void test_shared_protections_many_threads(void **state) {
  (void)state;
  static shared sh;
  memset(&sh, 0, sizeof sh);
  pthread_mutex_init(&sh.mu, NULL);
  lk_exec_policy_init_default(&sh.pol);
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  rc.backoff.base = LK_MS(1);
  rc.backoff.max = LK_MS(4);
  assert_int_equal(lk_retry_policy_init(&sh.pol.retry, &rc, NULL), LK_OK);
  sh.pol.deadline = LK_MS(50);
  sh.pol.attempt_timeout = LK_MS(20);
  sh.pol.pool_timeout = LK_MS(20);
  sh.pol.idempotent = true;
  lk_budget_ratio_config brc;
  lk_budget_ratio_config_init_default(&brc);
  lk_budget *bu = NULL;
  assert_int_equal(lk_budget_new_ratio(&brc, &bu, NULL), LK_OK);
  lk_breaker_config bc;
  lk_breaker_config_init_default(&bc);
  bc.window_size = 20;
  bc.minimum_calls = 10;
  bc.failure_rate_threshold = 30;
  bc.wait_open = LK_MS(5);
  bc.permitted_half_open = 2;
  lk_breaker *br = NULL;
  assert_int_equal(lk_breaker_new(&bc, &br, NULL), LK_OK);
  lk_bulkhead_config hc = {2, 64};
  lk_bulkhead *bh = NULL;
  assert_int_equal(lk_bulkhead_new(&hc, &bh, NULL), LK_OK);
  lk_metrics *m = lk_metrics_new();
  lk_call_metrics *cm = lk_call_metrics_new(m, "shared");
  sh.pol.budget = bu;
  sh.pol.breaker = br;
  sh.pol.bulkhead = bh;
  sh.pol.metrics = cm;
  sh.pol.fallback = shared_fallback;
  sh.pol.fallback_ctx = &sh;
  pthread_t t[THREADS];
  int64_t t0 = lk_now_ns();
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, shared_worker, &sh), 0);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  int64_t took = lk_now_ns() - t0;
  printf("# %d calls in %lld ms: ok %d, failed %d (EATTEMPTS %d, ENOTRETRYABLE %d, EDEADLINE %d, "
         "EBUDGET %d, EBREAKER_OPEN %d, EBULKHEAD_FULL %d), %d attempts, max in flight %d\n",
         THREADS * CALLS, (long long)(took / LK_NS_PER_MS), sh.ok, sh.failed,
         sh.per_err[-LK_EATTEMPTS], sh.per_err[-LK_ENOTRETRYABLE], sh.per_err[-LK_EDEADLINE],
         sh.per_err[-LK_EBUDGET], sh.per_err[-LK_EBREAKER_OPEN], sh.per_err[-LK_EBULKHEAD_FULL],
         atomic_load(&sh.handed), atomic_load(&sh.max_inflight));
  /* every call ended, and the counters agree with what the callers and the operation saw */
  assert_int_equal(sh.ok + sh.failed, THREADS * CALLS);
  assert_true(atomic_load(&sh.max_inflight) <= 2); /* the bulkhead held */
  assert_int_equal(lk_bulkhead_in_use(bh), 0);
  assert_int_equal(lk_bulkhead_queue_depth(bh), 0);
  lk_call_metrics_snap s;
  assert_int_equal(lk_call_metrics_snapshot(cm, &s), LK_OK);
  assert_int_equal(s.requests, THREADS * CALLS);
  assert_int_equal(s.calls_ok, sh.ok);
  assert_int_equal(s.calls_failed, sh.failed);
  assert_int_equal(s.attempts, atomic_load(&sh.handed));
  assert_int_equal(s.active, 0);
  assert_int_equal(s.fallbacks, atomic_load(&sh.fallbacks_ok));
  lk_budget_stats bs;
  assert_int_equal(lk_budget_stats_get(bu, lk_now_ns(), &bs), LK_OK);
  assert_int_equal(bs.refused, sh.budget_refusals); /* one refusal per EBUDGET call */
  lk_breaker_metrics bm;
  assert_int_equal(lk_breaker_metrics_get(br, lk_now_ns(), &bm), LK_OK);
  if (bm.state == LK_BREAKER_HALF_OPEN) /* no permit was lost */
    assert_true(bm.half_open_left >= 0 && bm.half_open_left <= bc.permitted_half_open);
  assert_true(took < LK_SEC(30));
  lk_call_metrics_free(cm);
  lk_metrics_free(m);
  lk_bulkhead_free(bh);
  lk_breaker_free(br);
  lk_budget_free(bu);
  pthread_mutex_destroy(&sh.mu);
}

/* One token shared by calls on many threads, some of them queued for the bulkhead, the others in
 * long backoffs: firing it from another thread ends every call promptly, and nothing is held. */
typedef struct cancel_all {
  lk_exec_policy pol;
  lk_cancel *c;
  atomic_int cancelled, other;
} cancel_all;

static void *cancel_worker(void *arg) {
  cancel_all *ca = arg;
  int calls = 0;
  lk_exec_result res;
  memset(&res, 0, sizeof res);
  int err = lk_exec_run(&ca->pol, refused, &calls, ca->c, &res);
  atomic_fetch_add(err == LK_ECANCELED ? &ca->cancelled : &ca->other, 1);
  return NULL;
}

static void test_shared_cancel_many_threads(void **state) {
  (void)state;
  static cancel_all ca;
  memset(&ca, 0, sizeof ca);
  lk_exec_policy_init_default(&ca.pol);
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  rc.backoff.base = rc.backoff.max = LK_SEC(5);
  rc.backoff.jitter = LK_JITTER_NONE;
  assert_int_equal(lk_retry_policy_init(&ca.pol.retry, &rc, NULL), LK_OK);
  ca.pol.deadline = LK_SEC(20);
  lk_bulkhead_config hc = {2, 16};
  lk_bulkhead *bh = NULL;
  assert_int_equal(lk_bulkhead_new(&hc, &bh, NULL), LK_OK);
  assert_int_equal(lk_bulkhead_try_acquire(bh), LK_OK); /* one slot for the calls */
  ca.pol.bulkhead = bh;
  ca.c = lk_cancel_new();
  pthread_t t[THREADS];
  int64_t t0 = lk_now_ns();
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, cancel_worker, &ca), 0);
  sleep_ns(LK_MS(50));
  lk_cancel_fire(ca.c);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  int64_t took = lk_now_ns() - t0;
  assert_int_equal(atomic_load(&ca.cancelled), THREADS);
  assert_true(took < LK_SEC(4));               /* not one 5 s backoff */
  assert_int_equal(lk_bulkhead_in_use(bh), 1); /* ours */
  assert_int_equal(lk_bulkhead_queue_depth(bh), 0);
  lk_bulkhead_release(bh);
  lk_bulkhead_free(bh);
  lk_cancel_free(ca.c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cancel_wakes_delay),
      cmocka_unit_test(test_bulkhead_grant_wakes_wait),
      cmocka_unit_test(test_async_wake_from_other_thread),
      cmocka_unit_test(test_cancel_from_thread_every_wait),
      cmocka_unit_test(test_shared_protections_many_threads),
      cmocka_unit_test(test_shared_cancel_many_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
