/* SPDX-License-Identifier: MIT */
/* Stress: several threads on one shared budget or breaker, bounded in iterations and in time,
 * with invariants checked during and after the run. Meant to run under TSan as well
 * (-DLINKD_SANITIZE=thread). Time is a shared counter the threads advance (or lockstep rounds),
 * never the wall clock. Invariants:
 *   breaker  a half-open period never has more calls admitted (minus permissions given back)
 *            than permitted, even with manual transitions racing; transitions form one chain;
 *            callbacks, delivered outside the lock by whichever thread, run one at a time, in
 *            the order of the period counter, exactly once each, even when they re-enter;
 *            windows never drift (after the storm, n successes read 0 failures and n failures
 *            read n)
 *   RATIO    retries never exceed percent of the requests of the window plus the floor, checked
 *            per window in lockstep rounds, and exactly (balance conservation) at fixed time
 *   TOKEN    tokens stay in [0, max]; monotone phases land exactly where arithmetic says
 *   QUOTA    grants sum to the capacity exactly; refunding every ticket restores it */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <linkd/breaker.h>
#include <linkd/budget.h>
#include <linkd/clock.h>
#include <linkd/error.h>
#include <linkd/rand.h>

#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define THREADS 4
#define WALL_LIMIT LK_SEC(30) /* per test; loops stop early past it (invariants still checked) */

static uint64_t base_seed;

typedef void *(*thread_fn)(void *);

static void run_threads(thread_fn fn, void *ctx) {
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, fn, ctx), 0);
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_join(t[i], NULL), 0);
}

static bool out_of_time(int64_t start) { return lk_now_ns() - start > WALL_LIMIT; }

/* --- breaker: half-open admission ------------------------------------------------------------- */

#define PERIODS (1 << 16)
#define PERMITTED 3

typedef struct ho_ctx {
  lk_breaker *b;
  _Atomic int64_t clock;
  _Atomic int net[PERIODS]; /* admitted - given back, per half-open period */
  _Atomic int worst;        /* the largest net seen */
  _Atomic int probes;       /* half-open admissions in all */
  _Atomic int over_periods; /* periods beyond the table (would make the check vacuous) */
  _Atomic int next_id;
  /* Written by the callback only; callbacks run one at a time. */
  lk_breaker_state last_to;
  int chain_breaks;
  uint64_t callbacks;
  int64_t start;
} ho_ctx;

static void ho_transition(void *ctx, lk_breaker_state from, lk_breaker_state to, int64_t now) {
  (void)now;
  ho_ctx *c = ctx;
  if (from != c->last_to)
    c->chain_breaks++;
  c->last_to = to;
  c->callbacks++;
}

/* Ends one call: gives the permission back (25 %) or records an outcome. */
static void ho_finish(ho_ctx *c, lk_rand *rng, const lk_breaker_permit *p, int64_t now) {
  bool probe = p->state == LK_BREAKER_HALF_OPEN && p->period < PERIODS;
  uint64_t pick = lk_rand_below(rng, 100);
  if (pick < 25) {
    if (probe) /* count it back before the breaker can hand it out again */
      atomic_fetch_sub(&c->net[p->period], 1);
    lk_breaker_release_permit(c->b, p);
    return;
  }
  lk_failure k = pick < 70 ? LK_F_HTTP_503 : pick < 75 ? LK_F_CANCELLED : LK_F_NONE;
  if (k == LK_F_CANCELLED && probe) /* an ignored outcome gives the permission back */
    atomic_fetch_sub(&c->net[p->period], 1);
  lk_breaker_record_permit(c->b, p, now, (int64_t)lk_rand_below(rng, 3), k);
}

#define IN_FLIGHT 8

static void *ho_worker(void *arg) {
  ho_ctx *c = arg;
  int id = atomic_fetch_add(&c->next_id, 1);
  lk_rand_fast rng;
  lk_rand_fast_seeded(&rng, base_seed + (uint64_t)id);
  /* Each thread keeps up to IN_FLIGHT calls open, so calls outlive state periods. */
  lk_breaker_permit open[IN_FLIGHT];
  int n_open = 0;
  for (int i = 0; i < 20000 && !out_of_time(c->start); i++) {
    int64_t now = atomic_fetch_add(&c->clock, 20 * LK_NS_PER_US) + 20 * LK_NS_PER_US;
    if (id == 0 && i % 40 == 20) {
      /* Manual transitions race with everything else. */
      lk_breaker_state to = (lk_breaker_state)lk_rand_below(&rng.base, 3); /* CLOSED/OPEN/HO */
      lk_breaker_transition(c->b, to, now);
      continue;
    }
    if (n_open == IN_FLIGHT || (n_open > 0 && lk_rand_below(&rng.base, 3) == 0)) {
      int j = (int)lk_rand_below(&rng.base, (uint64_t)n_open);
      ho_finish(c, &rng.base, &open[j], now);
      open[j] = open[--n_open];
      continue;
    }
    lk_breaker_permit p;
    if (lk_breaker_acquire_permit(c->b, now, &p) != LK_OK)
      continue;
    if (p.state == LK_BREAKER_HALF_OPEN) {
      if (p.period >= PERIODS) {
        atomic_fetch_add(&c->over_periods, 1);
      } else {
        int n = atomic_fetch_add(&c->net[p.period], 1) + 1;
        atomic_fetch_add(&c->probes, 1);
        int w = atomic_load(&c->worst);
        while (n > w && !atomic_compare_exchange_weak(&c->worst, &w, n))
          ;
      }
    }
    open[n_open++] = p;
  }
  int64_t now = atomic_load(&c->clock);
  while (n_open > 0)
    ho_finish(c, &rng.base, &open[--n_open], now);
  return NULL;
}

static void half_open_never_admits_more_than_permitted(void **state) {
  (void)state;
  ho_ctx *c = calloc(1, sizeof *c);
  assert_non_null(c);
  lk_breaker_config cfg;
  lk_breaker_config_init_default(&cfg);
  cfg.window_size = 8;
  cfg.minimum_calls = 4;
  cfg.wait_open = 200 * LK_NS_PER_US;
  cfg.permitted_half_open = PERMITTED;
  cfg.slow_call_duration = 1;
  cfg.slow_call_rate_threshold = 60;
  cfg.on_transition = ho_transition;
  cfg.on_transition_ctx = c;
  assert_int_equal(lk_breaker_new(&cfg, &c->b, NULL), LK_OK);
  c->last_to = LK_BREAKER_CLOSED;
  c->start = lk_now_ns();
  run_threads(ho_worker, c);
  lk_breaker_metrics m;
  lk_breaker_metrics_get(c->b, atomic_load(&c->clock), &m);
  print_message("half-open: %d probes, worst net %d, %llu transitions\n", atomic_load(&c->probes),
                atomic_load(&c->worst), (unsigned long long)m.transitions);
  assert_int_equal(atomic_load(&c->over_periods), 0);
  assert_true(atomic_load(&c->worst) <= PERMITTED);
  assert_true(atomic_load(&c->probes) > 100); /* the storm really went through HALF_OPEN */
  assert_int_equal(c->chain_breaks, 0);
  assert_int_equal(c->callbacks, m.transitions);
  assert_int_equal(c->last_to, m.state);
  lk_breaker_free(c->b);
  free(c);
}

/* --- breaker: callbacks in period order --------------------------------------------------------- */

#define ORDER_EVENTS (1 << 17)
#define ORDER_OBS 4096
/* Far below the breaker's bound on pending callbacks (65536), so none may be dropped whatever
 * the scheduling. */
#define ORDER_MAX_TRANSITIONS 40000

typedef struct order_obs {
  uint64_t period;
  lk_breaker_state state;
} order_obs;

typedef struct order_ctx {
  lk_breaker *b;
  _Atomic int64_t clock;
  _Atomic int next_id;
  int64_t start;
  _Atomic int inside;   /* callbacks running right now */
  _Atomic int overlaps; /* a callback started while another ran */
  /* Written by the callback only; callbacks run one at a time, on whichever thread. */
  lk_breaker_state *to; /* the delivered `to`s, in delivery order */
  uint64_t delivered;
  uint64_t beyond;  /* delivered past the table (would make the check vacuous) */
  int chain_breaks; /* `from` differs from the previous `to` */
  int early;        /* delivered before the breaker had made that many transitions */
  uint64_t reentered;
  lk_breaker_state last_to;
  /* What the workers saw: a permit names the state of its period. */
  order_obs obs[THREADS][ORDER_OBS];
  int n_obs[THREADS];
} order_ctx;

static void order_transition(void *ctx, lk_breaker_state from, lk_breaker_state to, int64_t now) {
  order_ctx *c = ctx;
  if (atomic_fetch_add(&c->inside, 1) != 0)
    atomic_fetch_add(&c->overlaps, 1);
  uint64_t k = c->delivered++; /* the k-th callback must be the transition into period k + 1 */
  if (from != c->last_to)
    c->chain_breaks++;
  c->last_to = to;
  if (k < ORDER_EVENTS)
    c->to[k] = to;
  else
    c->beyond++;
  lk_breaker_metrics m;
  lk_breaker_metrics_get(c->b, now, &m);
  if (m.transitions < k + 1)
    c->early++;
  if (k % 64 == 63) { /* re-entry from whichever thread is delivering, racing with the others */
    lk_breaker_transition(c->b, LK_BREAKER_CLOSED, now);
    c->reentered++;
  }
  atomic_fetch_sub(&c->inside, 1);
}

static void *order_worker(void *arg) {
  order_ctx *c = arg;
  int id = atomic_fetch_add(&c->next_id, 1);
  lk_rand_fast rng;
  lk_rand_fast_seeded(&rng, base_seed + 100 + (uint64_t)id);
  for (int i = 0; i < 20000 && !out_of_time(c->start); i++) {
    int64_t now = atomic_fetch_add(&c->clock, 20 * LK_NS_PER_US) + 20 * LK_NS_PER_US;
    lk_breaker_metrics m;
    if (i % 64 == 0 && lk_breaker_metrics_get(c->b, now, &m) == LK_OK &&
        m.transitions > ORDER_MAX_TRANSITIONS)
      break;
    uint64_t pick = lk_rand_below(&rng.base, 32);
    if (pick == 0) {
      lk_breaker_state to = (lk_breaker_state)lk_rand_below(&rng.base, 8);
      lk_breaker_transition(c->b, (unsigned)to > LK_BREAKER_METRICS_ONLY ? LK_BREAKER_CLOSED : to,
                            now);
      continue;
    }
    if (pick == 1) {
      lk_breaker_reset(c->b, now);
      continue;
    }
    lk_breaker_permit p;
    if (lk_breaker_acquire_permit(c->b, now, &p) != LK_OK)
      continue;
    if (c->n_obs[id] < ORDER_OBS && i % 2 == 0)
      c->obs[id][c->n_obs[id]++] = (order_obs){p.period, p.state};
    lk_failure k = lk_rand_below(&rng.base, 100) < 60 ? LK_F_HTTP_503 : LK_F_NONE;
    lk_breaker_record_permit(c->b, &p, now, 0, k);
  }
  return NULL;
}

static void callbacks_arrive_in_period_order(void **state) {
  (void)state;
  order_ctx *c = calloc(1, sizeof *c);
  assert_non_null(c);
  c->to = calloc(ORDER_EVENTS, sizeof *c->to);
  assert_non_null(c->to);
  lk_breaker_config cfg;
  lk_breaker_config_init_default(&cfg);
  cfg.window_size = 8;
  cfg.minimum_calls = 4;
  cfg.wait_open = 200 * LK_NS_PER_US;
  cfg.permitted_half_open = PERMITTED;
  cfg.on_transition = order_transition;
  cfg.on_transition_ctx = c;
  assert_int_equal(lk_breaker_new(&cfg, &c->b, NULL), LK_OK);
  c->last_to = LK_BREAKER_CLOSED;
  c->start = lk_now_ns();
  run_threads(order_worker, c);
  lk_breaker_metrics m;
  lk_breaker_metrics_get(c->b, atomic_load(&c->clock), &m);
  /* Each permit saw period P in state S: the P-th callback must have been "-> S". */
  int checked = 0, misplaced = 0;
  for (int t = 0; t < THREADS; t++)
    for (int i = 0; i < c->n_obs[t]; i++) {
      uint64_t period = c->obs[t][i].period;
      if (period == 0 || period > ORDER_EVENTS)
        continue;
      checked++;
      misplaced += c->to[period - 1] != c->obs[t][i].state;
    }
  print_message("callbacks: %llu delivered, %llu transitions, %d permits checked, %llu re-entrant\n",
                (unsigned long long)c->delivered, (unsigned long long)m.transitions, checked,
                (unsigned long long)c->reentered);
  assert_int_equal(atomic_load(&c->overlaps), 0);
  assert_int_equal(c->beyond, 0);
  assert_int_equal(m.transitions_undelivered, 0);
  /* Once every thread has returned, nothing is left in the queue: exactly once each. */
  assert_int_equal(c->delivered, m.transitions);
  assert_int_equal(c->chain_breaks, 0);
  assert_int_equal(c->early, 0);
  assert_int_equal(misplaced, 0);
  assert_int_equal(c->last_to, m.state);
  assert_true(m.transitions > 500); /* the storm really went through many transitions */
  assert_true(checked > 1000);
  assert_true(c->reentered > 0);
  lk_breaker_free(c->b);
  free(c->to);
  free(c);
}

/* --- breaker: windows do not drift ------------------------------------------------------------ */

typedef struct win_ctx {
  lk_breaker *b;
  _Atomic int64_t clock;
  _Atomic int next_id;
  _Atomic int bad_reads;
  int64_t start;
  int n;
  bool toggle; /* one thread also resets the window now and then */
} win_ctx;

static void *win_worker(void *arg) {
  win_ctx *c = arg;
  int id = atomic_fetch_add(&c->next_id, 1);
  lk_rand_fast rng;
  lk_rand_fast_seeded(&rng, base_seed ^ (uint64_t)(id * 7919));
  for (int i = 0; i < 30000 && !out_of_time(c->start); i++) {
    int64_t now = atomic_fetch_add(&c->clock, 200 * LK_NS_PER_US) + 200 * LK_NS_PER_US;
    if (c->toggle && id == 0 && i % 1000 == 999) {
      lk_breaker_transition(c->b, LK_BREAKER_METRICS_ONLY, now);
      continue;
    }
    if (id == 1 && i % 64 == 0) {
      lk_breaker_metrics m;
      lk_breaker_metrics_get(c->b, now, &m);
      if (m.calls < 0 || m.failed < 0 || m.slow < 0 || m.failed > m.calls || m.slow > m.calls ||
          (m.calls > c->n && c->n > 0))
        atomic_fetch_add(&c->bad_reads, 1);
    }
    uint64_t pick = lk_rand_below(&rng.base, 8);
    lk_breaker_record(c->b, now, pick & 1 ? LK_SEC(2) : 0, pick & 2 ? LK_F_HTTP_500 : LK_F_NONE);
  }
  return NULL;
}

static void expect_exact_after_storm(lk_breaker *b, int64_t now, lk_breaker_window w, int n) {
  lk_breaker_metrics m;
  /* A TIME window: move past it, then fill one second. A COUNT window: overwrite every slot. */
  if (w == LK_BREAKER_WINDOW_TIME)
    now += LK_SEC(1000);
  int fill = w == LK_BREAKER_WINDOW_TIME ? 500 : n;
  for (int i = 0; i < fill; i++)
    lk_breaker_record(b, now, 0, LK_F_NONE);
  lk_breaker_metrics_get(b, now, &m);
  assert_int_equal(m.calls, fill);
  assert_int_equal(m.failed, 0); /* would show any count left over from the storm */
  assert_int_equal(m.slow, 0);
  if (w == LK_BREAKER_WINDOW_TIME)
    now += LK_SEC(1000);
  for (int i = 0; i < fill; i++)
    lk_breaker_record(b, now, LK_SEC(2), LK_F_HTTP_500);
  lk_breaker_metrics_get(b, now, &m);
  assert_int_equal(m.failed, fill); /* and this any count missing (reads are clamped at 0) */
  assert_int_equal(m.slow, fill);
}

static void window_storm(lk_breaker_window w, bool toggle) {
  win_ctx *c = calloc(1, sizeof *c);
  assert_non_null(c);
  lk_breaker_config cfg;
  lk_breaker_config_init_default(&cfg);
  cfg.window = w;
  cfg.window_size = w == LK_BREAKER_WINDOW_COUNT ? 97 : 3;
  cfg.slow_call_duration = LK_SEC(1);
  assert_int_equal(lk_breaker_new(&cfg, &c->b, NULL), LK_OK);
  lk_breaker_transition(c->b, LK_BREAKER_METRICS_ONLY, 0);
  c->n = w == LK_BREAKER_WINDOW_COUNT ? 97 : 0;
  c->toggle = toggle;
  c->start = lk_now_ns();
  run_threads(win_worker, c);
  assert_int_equal(atomic_load(&c->bad_reads), 0);
  assert_int_equal(lk_breaker_get_state(c->b), LK_BREAKER_METRICS_ONLY);
  expect_exact_after_storm(c->b, atomic_load(&c->clock), w, 97);
  lk_breaker_free(c->b);
  free(c);
}

static void breaker_windows_do_not_drift(void **state) {
  (void)state;
  window_storm(LK_BREAKER_WINDOW_COUNT, false);
  window_storm(LK_BREAKER_WINDOW_COUNT, true);
  window_storm(LK_BREAKER_WINDOW_TIME, false);
  window_storm(LK_BREAKER_WINDOW_TIME, true);
}

/* --- RATIO budget ----------------------------------------------------------------------------- */

typedef struct ratio_ctx {
  lk_budget *b;
  pthread_barrier_t barrier;
  _Atomic int next_id;
  _Atomic int64_t requests, granted;
  int64_t start;
} ratio_ctx;

static void *ratio_fixed_worker(void *arg) {
  ratio_ctx *c = arg;
  int id = atomic_fetch_add(&c->next_id, 1);
  /* Requests and retries interleaved... */
  for (int i = 0; i < 30000 && !out_of_time(c->start); i++) {
    lk_budget_record_request(c->b, LK_SEC(7));
    atomic_fetch_add(&c->requests, 1);
    for (int k = 0; k <= id; k++) /* some threads try harder than others */
      if (lk_budget_acquire_retry(c->b, LK_SEC(7), k & 1) == LK_OK)
        atomic_fetch_add(&c->granted, 1);
  }
  pthread_barrier_wait(&c->barrier);
  /* ...then all threads race for what is left, until refused. */
  if (id == 0)
    for (int i = 0; i < 5000; i++)
      lk_budget_record_request(c->b, LK_SEC(7)); /* 1000 more retries to race for */
  if (id == 0)
    atomic_fetch_add(&c->requests, 5000);
  pthread_barrier_wait(&c->barrier);
  while (lk_budget_acquire_retry(c->b, LK_SEC(7), false) == LK_OK)
    atomic_fetch_add(&c->granted, 1);
  return NULL;
}

/* At one instant nothing expires: every grant was paid for, and nothing is lost either. */
static void ratio_exact_at_fixed_time(void **state) {
  (void)state;
  ratio_ctx c = {0};
  lk_budget_ratio_config cfg;
  lk_budget_ratio_config_init_default(&cfg); /* 20 %, 10 s, 10/s: reserve 100 retries */
  assert_int_equal(lk_budget_new_ratio(&cfg, &c.b, NULL), LK_OK);
  assert_int_equal(pthread_barrier_init(&c.barrier, NULL, THREADS), 0);
  c.start = lk_now_ns();
  run_threads(ratio_fixed_worker, &c);
  pthread_barrier_destroy(&c.barrier);
  int64_t req = atomic_load(&c.requests), got = atomic_load(&c.granted);
  int64_t allowed = (100 * INT64_C(1000000) + req * 200000) / 1000000;
  print_message("ratio fixed: %lld requests, %lld retries granted, %lld allowed\n",
                (long long)req, (long long)got, (long long)allowed);
  assert_int_equal(got, allowed); /* never more, and the balance is exact: never less */
  lk_budget_free(c.b);
}

#define ROUNDS 200
#define ROUND_STEP LK_MS(300)

typedef struct rounds_ctx {
  lk_budget *b;
  pthread_barrier_t barrier;
  _Atomic int next_id;
  int64_t req[THREADS][ROUNDS], got[THREADS][ROUNDS];
} rounds_ctx;

static void *ratio_rounds_worker(void *arg) {
  rounds_ctx *c = arg;
  int id = atomic_fetch_add(&c->next_id, 1);
  lk_rand_fast rng;
  lk_rand_fast_seeded(&rng, base_seed + 99 + (uint64_t)id);
  for (int r = 0; r < ROUNDS; r++) {
    int64_t now = LK_SEC(100) + r * ROUND_STEP;
    /* Bursty load: some rounds carry no requests, so the floor alone must hold. */
    int load = (int)lk_rand_below(&rng.base, 60) - 10;
    for (int i = 0; i < 40; i++) {
      if (i < load) {
        lk_budget_record_request(c->b, now);
        c->req[id][r]++;
      }
      if (lk_budget_acquire_retry(c->b, now, false) == LK_OK)
        c->got[id][r]++;
    }
    /* Then only retries, racing for the rest of this window's allowance. */
    pthread_barrier_wait(&c->barrier);
    for (int i = 0; i < 40; i++)
      if (lk_budget_acquire_retry(c->b, now, false) == LK_OK)
        c->got[id][r]++;
    pthread_barrier_wait(&c->barrier);
  }
  return NULL;
}

/* With time moving (lockstep rounds, so each event's bucket is known): in every window, retries
 * <= percent of the window's requests + the floor. */
static void ratio_never_exceeds_ratio_plus_floor(void **state) {
  (void)state;
  rounds_ctx *c = calloc(1, sizeof *c);
  assert_non_null(c);
  lk_budget_ratio_config cfg;
  cfg.percent = 10;
  cfg.ttl = LK_SEC(5);
  cfg.buckets = 5; /* 1 s buckets; rounds are 0.3 s */
  cfg.min_retries_per_sec = 2; /* reserve 10 retries per window */
  assert_int_equal(lk_budget_new_ratio(&cfg, &c->b, NULL), LK_OK);
  assert_int_equal(pthread_barrier_init(&c->barrier, NULL, THREADS), 0);
  run_threads(ratio_rounds_worker, c);
  pthread_barrier_destroy(&c->barrier);
  int64_t worst_slack = INT64_MAX, total_got = 0;
  for (int r = 0; r < ROUNDS; r++) {
    int64_t sec = (LK_SEC(100) + r * ROUND_STEP) / LK_NS_PER_S;
    int64_t req = 0, got = 0;
    for (int q = 0; q <= r; q++) {
      if ((LK_SEC(100) + q * ROUND_STEP) / LK_NS_PER_S <= sec - 5)
        continue; /* that round's bucket has left the window */
      for (int t = 0; t < THREADS; t++) {
        req += c->req[t][q];
        got += c->got[t][q];
      }
    }
    for (int t = 0; t < THREADS; t++)
      total_got += c->got[t][r];
    /* micro-retries: got * 10^6 <= 10 * 10^6 + req * 10 % * 10^6 */
    int64_t slack = 10 * INT64_C(1000000) + req * 100000 - got * INT64_C(1000000);
    if (slack < 0)
      fail_msg("round %d: %lld retries for %lld requests in the window", r, (long long)got,
               (long long)req);
    if (slack < worst_slack)
      worst_slack = slack;
  }
  print_message("ratio rounds: %lld retries granted, tightest window slack %lld micro-retries\n",
                (long long)total_got, (long long)worst_slack);
  assert_true(worst_slack < INT64_C(1000000)); /* the budget was really the limit somewhere */
  lk_budget_free(c->b);
  free(c);
}

/* --- TOKEN budget ----------------------------------------------------------------------------- */

typedef struct tok_ctx {
  lk_budget *b;
  int phase; /* 0 mixed, 1 failures only, 2 successes only */
  _Atomic int next_id;
  _Atomic int out_of_range;
  int64_t start;
} tok_ctx;

static void *token_worker(void *arg) {
  tok_ctx *c = arg;
  int id = atomic_fetch_add(&c->next_id, 1);
  lk_rand_fast rng;
  lk_rand_fast_seeded(&rng, base_seed + 1000 + (uint64_t)id);
  for (int i = 0; i < 20000 && !out_of_time(c->start); i++) {
    uint64_t pick = c->phase == 0 ? lk_rand_below(&rng.base, 3) : (uint64_t)c->phase;
    if (pick == 1)
      lk_budget_record_failure(c->b, 0);
    else if (pick == 2)
      lk_budget_record_success(c->b, 0);
    else
      lk_budget_acquire_retry(c->b, 0, false);
    if (i % 16 == 0) {
      lk_budget_stats s;
      lk_budget_stats_get(c->b, 0, &s);
      if (s.level < 0 || s.level > s.capacity)
        atomic_fetch_add(&c->out_of_range, 1);
    }
  }
  return NULL;
}

static void token_stays_in_range_and_adds_up(void **state) {
  (void)state;
  tok_ctx c = {0};
  lk_budget_token_config cfg = {100, 0.7};
  assert_int_equal(lk_budget_new_token(&cfg, &c.b, NULL), LK_OK);
  c.start = lk_now_ns();
  run_threads(token_worker, &c);
  assert_int_equal(atomic_load(&c.out_of_range), 0);
  /* Failures only: from wherever it is, 80000 failures reach exactly 0. */
  c.phase = 1;
  atomic_store(&c.next_id, 0);
  run_threads(token_worker, &c);
  lk_budget_stats s;
  lk_budget_stats_get(c.b, 0, &s);
  assert_int_equal(s.level, 0);
  /* Successes only: 700 each, capped at exactly 100000. */
  c.phase = 2;
  atomic_store(&c.next_id, 0);
  run_threads(token_worker, &c);
  lk_budget_stats_get(c.b, 0, &s);
  assert_int_equal(s.level, 100000);
  assert_int_equal(atomic_load(&c.out_of_range), 0);
  lk_budget_free(c.b);
}

/* --- QUOTA budget ----------------------------------------------------------------------------- */

#define QUOTA_TICKETS 4096

typedef struct quota_ctx {
  lk_budget *b;
  int phase; /* 0: acquire until refused; 1: refund own tickets; 2: mixed */
  _Atomic int next_id;
  _Atomic int64_t granted_cost;
  _Atomic int out_of_range;
  lk_budget_ticket tickets[THREADS][QUOTA_TICKETS];
  int held[THREADS];
  int64_t start;
} quota_ctx;

static void *quota_worker(void *arg) {
  quota_ctx *c = arg;
  int id = atomic_fetch_add(&c->next_id, 1);
  lk_rand_fast rng;
  lk_rand_fast_seeded(&rng, base_seed + 2000 + (uint64_t)id);
  if (c->phase == 0) {
    while (c->held[id] < QUOTA_TICKETS) {
      lk_budget_ticket *t = &c->tickets[id][c->held[id]];
      if (lk_budget_acquire_retry_ticket(c->b, 0, id & 1, t) != LK_OK)
        break;
      atomic_fetch_add(&c->granted_cost, t->cost);
      c->held[id]++;
    }
    /* A refusal of a 10 may leave room for a 5: take that too, so the quota really runs dry. */
    lk_budget_ticket t = {0};
    while (c->held[id] < QUOTA_TICKETS && lk_budget_acquire_retry_ticket(c->b, 0, false, &t) == 0) {
      c->tickets[id][c->held[id]++] = t;
      atomic_fetch_add(&c->granted_cost, t.cost);
    }
  } else if (c->phase == 1) {
    for (int i = 0; i < c->held[id]; i++)
      lk_budget_record_success_ticket(c->b, 0, &c->tickets[id][i]);
    c->held[id] = 0;
  } else {
    for (int i = 0; i < 20000 && !out_of_time(c->start); i++) {
      lk_budget_ticket t = {0};
      lk_budget_acquire_retry_ticket(c->b, 0, lk_rand_below(&rng.base, 2), &t);
      if (lk_rand_below(&rng.base, 4) == 0)
        lk_budget_record_success(c->b, 0); /* a first-attempt success elsewhere: +1 */
      lk_budget_record_success_ticket(c->b, 0, &t);
      lk_budget_stats s;
      lk_budget_stats_get(c->b, 0, &s);
      if (s.level < 0 || s.level > 500)
        atomic_fetch_add(&c->out_of_range, 1);
    }
  }
  return NULL;
}

static void quota_sums_exactly(void **state) {
  (void)state;
  quota_ctx *c = calloc(1, sizeof *c);
  assert_non_null(c);
  lk_budget_quota_config cfg;
  lk_budget_quota_config_init_default(&cfg);
  assert_int_equal(lk_budget_new_quota(&cfg, &c->b, NULL), LK_OK);
  c->start = lk_now_ns();
  run_threads(quota_worker, c);
  assert_int_equal(atomic_load(&c->granted_cost), 500); /* every unit granted exactly once */
  assert_int_equal(lk_budget_remaining(c->b, 0), 0);
  c->phase = 1;
  atomic_store(&c->next_id, 0);
  run_threads(quota_worker, c);
  lk_budget_stats s;
  lk_budget_stats_get(c->b, 0, &s);
  assert_int_equal(s.level, 500);
  c->phase = 2;
  atomic_store(&c->next_id, 0);
  run_threads(quota_worker, c);
  assert_int_equal(atomic_load(&c->out_of_range), 0);
  lk_budget_stats_get(c->b, 0, &s);
  assert_int_equal(s.level, 500); /* every ticket refunded: back to full */
  lk_budget_free(c->b);
  free(c);
}

int main(void) {
  base_seed = lk_test_seed();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(half_open_never_admits_more_than_permitted),
      cmocka_unit_test(callbacks_arrive_in_period_order),
      cmocka_unit_test(breaker_windows_do_not_drift),
      cmocka_unit_test(ratio_exact_at_fixed_time),
      cmocka_unit_test(ratio_never_exceeds_ratio_plus_floor),
      cmocka_unit_test(token_stays_in_range_and_adds_up),
      cmocka_unit_test(quota_sums_exactly),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
