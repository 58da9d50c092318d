/* SPDX-License-Identifier: MIT */
/* Stress: several threads on one shared limiter, bulkhead and adaptive limit, bounded in
 * iterations, with invariants checked after the run (cmocka's asserts are not thread-safe, so
 * threads only count violations). Meant to run under TSan as well (-DLINKD_SANITIZE=thread):
 * the plain (non-atomic) counters touched while holding a max-1 slot make TSan check that the
 * bulkhead's acquire/release really order memory. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <linkd/adaptive.h>
#include <linkd/bulkhead.h>
#include <linkd/error.h>
#include <linkd/limiter.h>
#include <linkd/rand.h>

#include "testutil.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#define US(x) ((int64_t)(x)*LK_NS_PER_US)

enum { THREADS = 4, LIMITER_ITERS = 20000, BULKHEAD_ITERS = 10000 };

static uint64_t seed;

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
  nanosleep(&ts, NULL);
}

/* ---- limiter: never more than (t_max - t_min + max_wait + span) / interval grants ---------- */

typedef struct lim_ctx {
  lk_limiter *l;
  _Atomic int64_t clock; /* shared fake time line, advanced by every attempt */
  _Atomic int64_t granted;
  _Atomic int stop;
  int64_t max_step, max_wait;
  int id;
} lim_ctx;

typedef struct lim_worker {
  lim_ctx *c;
  int id;
} lim_worker;

static void *lim_main(void *p) {
  lim_worker *w = p;
  lim_ctx *c = w->c;
  lk_rand_fast rng;
  lk_rand_fast_seeded(&rng, seed + (uint64_t)w->id);
  int64_t granted = 0;
  for (int i = 0; i < LIMITER_ITERS; i++) {
    int64_t step = (int64_t)lk_rand_below(&rng.base, (uint64_t)c->max_step) + 1;
    int64_t now = atomic_fetch_add(&c->clock, step) + step;
    if (i & 1) {
      granted += lk_limiter_try_acquire(c->l, now) == LK_OK;
    } else {
      int64_t mw = (int64_t)lk_rand_below(&rng.base, (uint64_t)c->max_wait + 1);
      int64_t wait = lk_limiter_reserve(c->l, now, mw);
      granted += wait >= 0 && wait <= mw;
    }
  }
  atomic_fetch_add(&c->granted, granted);
  return NULL;
}

static void *lim_reconfig(void *p) {
  lim_ctx *c = p;
  lk_limiter_config a = {1000.0, 5}, b = {4000.0, 20};
  for (int i = 0; !atomic_load(&c->stop) && i < 1000000; i++) {
    lk_limiter_set_config(c->l, (i & 1) ? &a : &b, NULL);
    if (i % 64 == 0)
      sched_yield();
  }
  return NULL;
}

static void run_limiter(bool reconfig) {
  lk_limiter_config cfg = {1000.0, 5}; /* 1 ms per token */
  lim_ctx c = {.max_step = US(250), .max_wait = LK_MS(3)};
  assert_int_equal(lk_limiter_new(&cfg, &c.l, NULL), LK_OK);
  int64_t t0 = LK_SEC(1000);
  atomic_init(&c.clock, t0);
  atomic_init(&c.granted, 0);
  atomic_init(&c.stop, 0);
  pthread_t th[THREADS], rc;
  lim_worker w[THREADS];
  if (reconfig)
    assert_int_equal(pthread_create(&rc, NULL, lim_reconfig, &c), 0);
  for (int i = 0; i < THREADS; i++) {
    w[i] = (lim_worker){&c, i};
    assert_int_equal(pthread_create(&th[i], NULL, lim_main, &w[i]), 0);
  }
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  atomic_store(&c.stop, 1);
  if (reconfig)
    pthread_join(rc, NULL);
  int64_t span = atomic_load(&c.clock) - t0;
  /* Fastest interval and largest burst*interval among the configs used. */
  int64_t min_interval = reconfig ? US(250) : LK_MS(1);
  int64_t max_span = LK_MS(5);
  int64_t bound = (span + c.max_wait + max_span) / min_interval;
  int64_t granted = atomic_load(&c.granted);
  fprintf(stderr, "limiter%s: %lld ms of fake time, %lld granted, bound %lld\n",
          reconfig ? " (reconfigured)" : "", (long long)(span / LK_MS(1)), (long long)granted,
          (long long)bound);
  assert_true(granted <= bound);
  /* Not vacuous: attempts outnumber tokens ~8:1, so nearly every token is handed out. */
  assert_true(granted >= span / LK_MS(1) * 9 / 10);
  lk_limiter_free(c.l);
}

static void limiter_never_exceeds_rate_t_plus_burst(void **state) {
  (void)state;
  run_limiter(false);
}

static void limiter_bound_holds_while_reconfigured(void **state) {
  (void)state;
  run_limiter(true);
}

/* ---- bulkhead: never more than the limit in use; counters add up; memory is ordered -------- */

typedef struct bh_ctx {
  lk_bulkhead *b;
  int64_t limit_bound; /* active must never exceed this */
  _Atomic int active;
  _Atomic int violations;
  _Atomic uint64_t ok, full, deadline;
  _Atomic int stop;
  uint64_t plain; /* touched only while holding a slot of a max-1 bulkhead */
  bool touch_plain;
  lk_adaptive *adaptive;
} bh_ctx;

typedef struct bh_worker {
  bh_ctx *c;
  int id;
} bh_worker;

static void *bh_main(void *p) {
  bh_worker *w = p;
  bh_ctx *c = w->c;
  lk_rand_fast rng;
  lk_rand_fast_seeded(&rng, seed ^ (0x9e37u + (uint64_t)w->id));
  uint64_t ok = 0, full = 0, dl = 0;
  for (int i = 0; i < BULKHEAD_ITERS; i++) {
    int rc;
    int64_t t0 = lk_now_ns();
    switch (lk_rand_below(&rng.base, 3)) {
    case 0: rc = lk_bulkhead_try_acquire(c->b); break;
    case 1:
      rc = lk_bulkhead_acquire(c->b, NULL,
                               lk_deadline_after(t0, (int64_t)lk_rand_below(&rng.base, 2000000)));
      break;
    default: rc = lk_bulkhead_acquire(c->b, lk_clock_system(), lk_deadline_after(t0, LK_SEC(5)));
    }
    if (rc == LK_OK) {
      ok++;
      /* Relaxed: this counter must not order memory itself, or it would hide a missing
       * acquire/release in the bulkhead from TSan (the `plain` check below). */
      int now_active = atomic_fetch_add_explicit(&c->active, 1, memory_order_relaxed) + 1;
      if (now_active > c->limit_bound)
        atomic_fetch_add(&c->violations, 1);
      if (c->touch_plain)
        c->plain++;
      if (lk_rand_below(&rng.base, 4) == 0)
        sched_yield();
      atomic_fetch_sub_explicit(&c->active, 1, memory_order_relaxed);
      if (c->adaptive) {
        int64_t rtt = lk_now_ns() - t0;
        lk_adaptive_record(c->adaptive, lk_now_ns(), rtt + (int64_t)(i % 7) * US(20),
                           (i % 11) ? LK_ADAPTIVE_SUCCESS : LK_ADAPTIVE_DROP);
      }
      lk_bulkhead_release(c->b);
    } else if (rc == LK_EBULKHEAD_FULL) {
      full++;
    } else if (rc == LK_EDEADLINE) {
      dl++;
    } else {
      atomic_fetch_add(&c->violations, 1);
    }
  }
  atomic_fetch_add(&c->ok, ok);
  atomic_fetch_add(&c->full, full);
  atomic_fetch_add(&c->deadline, dl);
  return NULL;
}

static void run_bulkhead(bh_ctx *c) {
  pthread_t th[THREADS];
  bh_worker w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (bh_worker){c, i};
    assert_int_equal(pthread_create(&th[i], NULL, bh_main, &w[i]), 0);
  }
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  lk_bulkhead_stats s;
  lk_bulkhead_get_stats(c->b, &s);
  fprintf(stderr, "bulkhead: %llu ok, %llu full, %llu deadline, %llu waited, %lld ns waiting\n",
          (unsigned long long)c->ok, (unsigned long long)c->full, (unsigned long long)c->deadline,
          (unsigned long long)s.waited, (long long)s.wait_total_ns);
  assert_int_equal(atomic_load(&c->violations), 0);
  assert_int_equal(s.in_use, 0);
  assert_int_equal(s.queue_depth, 0);
  assert_int_equal(atomic_load(&c->ok) + atomic_load(&c->full) + atomic_load(&c->deadline),
                   (uint64_t)THREADS * BULKHEAD_ITERS);
  assert_int_equal(s.rejected_full, atomic_load(&c->full));
  assert_int_equal(s.rejected_deadline, atomic_load(&c->deadline));
  assert_true(atomic_load(&c->ok) > 0);
}

static void bulkhead_never_exceeds_limit(void **state) {
  (void)state;
  lk_bulkhead_config cfg = {3, 8};
  bh_ctx c = {.limit_bound = 3};
  assert_int_equal(lk_bulkhead_new(&cfg, &c.b, NULL), LK_OK);
  run_bulkhead(&c);
  lk_bulkhead_free(c.b);
}

static void bulkhead_orders_memory(void **state) {
  (void)state;
  lk_bulkhead_config cfg = {1, 8};
  bh_ctx c = {.limit_bound = 1, .touch_plain = true};
  assert_int_equal(lk_bulkhead_new(&cfg, &c.b, NULL), LK_OK);
  run_bulkhead(&c);
  assert_int_equal(c.plain, atomic_load(&c.ok));
  lk_bulkhead_free(c.b);
}

/* The adaptive limit moves the bulkhead's max under load; the max of maxes is never exceeded. */
static void bulkhead_driven_by_adaptive_limit(void **state) {
  (void)state;
  lk_bulkhead_config cfg = {4, 8};
  lk_adaptive_config ac;
  lk_adaptive_config_init_default(&ac);
  ac.initial_limit = 4;
  ac.min_limit = 1;
  ac.max_limit = 5;
  ac.decrease_cooldown = 0;
  bh_ctx c = {.limit_bound = 5};
  assert_int_equal(lk_bulkhead_new(&cfg, &c.b, NULL), LK_OK);
  assert_int_equal(lk_adaptive_new(&ac, &c.adaptive, NULL), LK_OK);
  assert_int_equal(lk_adaptive_attach(c.adaptive, c.b), LK_OK);
  run_bulkhead(&c);
  int64_t lim = lk_adaptive_limit(c.adaptive);
  assert_true(lim >= 1 && lim <= 5);
  assert_int_equal(lk_bulkhead_max(c.b), lim);
  lk_adaptive_free(c.adaptive);
  lk_bulkhead_free(c.b);
}

/* ---- FIFO: waiters queued in a known order are served in that order, rounds after rounds,
 * while a barging thread hammers try_acquire --------------------------------------------------- */

enum { ROUNDS = 25, FIFO_WAITERS = 4 };

typedef struct fifo_ctx {
  lk_bulkhead *b;
  int log[FIFO_WAITERS];
  int log_n;            /* plain: written only while holding the single slot */
  uint64_t barger_wins; /* plain, same */
  _Atomic int stop;
} fifo_ctx;

typedef struct fifo_waiter {
  fifo_ctx *c;
  int id;
  int rc;
} fifo_waiter;

static void *fifo_main(void *p) {
  fifo_waiter *w = p;
  w->rc = lk_bulkhead_acquire(w->c->b, NULL, lk_deadline_none());
  if (w->rc == LK_OK) {
    w->c->log[w->c->log_n++] = w->id;
    lk_bulkhead_release(w->c->b);
  }
  return NULL;
}

static void *barger_main(void *p) {
  fifo_ctx *c = p;
  while (!atomic_load(&c->stop)) {
    if (lk_bulkhead_try_acquire(c->b) == LK_OK) {
      c->barger_wins++;
      lk_bulkhead_release(c->b);
    }
    sched_yield();
  }
  return NULL;
}

static bool wait_depth(lk_bulkhead *b, int64_t depth) {
  for (int i = 0; i < 20000; i++) {
    if (lk_bulkhead_queue_depth(b) == depth)
      return true;
    sleep_us(500);
  }
  return false;
}

static void bulkhead_fifo_under_contention(void **state) {
  (void)state;
  lk_bulkhead_config cfg = {1, FIFO_WAITERS};
  fifo_ctx c = {0};
  atomic_init(&c.stop, 0);
  assert_int_equal(lk_bulkhead_new(&cfg, &c.b, NULL), LK_OK);
  pthread_t barger;
  assert_int_equal(pthread_create(&barger, NULL, barger_main, &c), 0);
  for (int r = 0; r < ROUNDS; r++) {
    /* Take the slot (the barger may hold it for a moment). */
    int tries = 0;
    while (lk_bulkhead_try_acquire(c.b) != LK_OK && tries++ < 1000000)
      sched_yield();
    assert_int_equal(lk_bulkhead_in_use(c.b), 1);
    c.log_n = 0;
    pthread_t th[FIFO_WAITERS];
    fifo_waiter w[FIFO_WAITERS];
    for (int i = 0; i < FIFO_WAITERS; i++) {
      w[i] = (fifo_waiter){&c, i, 1};
      assert_int_equal(pthread_create(&th[i], NULL, fifo_main, &w[i]), 0);
      assert_true(wait_depth(c.b, i + 1));
    }
    lk_bulkhead_release(c.b);
    for (int i = 0; i < FIFO_WAITERS; i++) {
      pthread_join(th[i], NULL);
      assert_int_equal(w[i].rc, LK_OK);
    }
    /* Joined: the waiters' plain writes are visible here. */
    assert_int_equal(c.log_n, FIFO_WAITERS);
    for (int i = 0; i < FIFO_WAITERS; i++)
      assert_int_equal(c.log[i], i);
  }
  atomic_store(&c.stop, 1);
  pthread_join(barger, NULL);
  fprintf(stderr, "fifo: %d rounds in order; barger won %llu times between rounds\n", ROUNDS,
          (unsigned long long)c.barger_wins);
  assert_int_equal(lk_bulkhead_in_use(c.b), 0);
  lk_bulkhead_free(c.b);
}

int main(void) {
  seed = lk_test_seed();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(limiter_never_exceeds_rate_t_plus_burst),
      cmocka_unit_test(limiter_bound_holds_while_reconfigured),
      cmocka_unit_test(bulkhead_never_exceeds_limit),
      cmocka_unit_test(bulkhead_orders_memory),
      cmocka_unit_test(bulkhead_driven_by_adaptive_limit),
      cmocka_unit_test(bulkhead_fifo_under_contention),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
