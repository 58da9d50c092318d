/* SPDX-License-Identifier: MIT */
/* The executor's own cost per call (lk_exec_run around an attempt function that succeeds or
 * fails at once), in rounds interleaved with a baseline: the same attempt function called
 * directly through a pointer, as a hand-written call site would. Time comes from a counting
 * clock and the retry delay from a sleep that moves it, so no row waits or reads a real clock.
 * Usage: bench_exec [rounds=15] */
#include <linkd/linkd.h>

#include "benchutil.h"

#include <stdio.h>
#include <stdlib.h>

/* A clock that moves only when the sleep hook says so (and 1 ns per read, so durations are
 * never 0): the executor's clock reads cost a call, as a real clock's do. */
typedef struct tick_clock {
  lk_clock base;
  int64_t t;
} tick_clock;

static int64_t tick_now(const lk_clock *c) {
  tick_clock *k = (tick_clock *)(uintptr_t)c;
  return ++k->t;
}

static void tick_sleep(void *ctx, int64_t until) {
  tick_clock *k = ctx;
  if (until > k->t)
    k->t = until;
}

typedef struct ctx_t {
  lk_exec_policy pol;
  tick_clock clock;
  lk_rand_fast rng;
  int fail_first; /* attempts to fail before succeeding, per call */
  int left;
  uint64_t events;
  lk_exec_attempt_info tl[4];
} ctx_t;

static void op(void *c, const lk_exec_attempt *a, lk_exec_outcome *out) {
  ctx_t *x = c;
  (void)a;
  if (x->left > 0) {
    x->left--;
    out->failure = LK_F_CONNECT_REFUSED;
    out->sent = false;
  } else {
    out->failure = LK_F_NONE;
  }
}

static void (*volatile op_ptr)(void *, const lk_exec_attempt *, lk_exec_outcome *) = op;

static uint64_t bench_direct(void *c, uint64_t iters) {
  ctx_t *x = c;
  uint64_t acc = 0;
  lk_exec_attempt a = {1, LK_MS(800), 0, LK_SEC(3), NULL, NULL};
  for (uint64_t i = 0; i < iters; i++) {
    lk_exec_outcome o = {LK_F_TRANSPORT_ERROR, true, -1};
    x->left = 0;
    op_ptr(x, &a, &o);
    acc += (uint64_t)o.failure;
  }
  return acc;
}

static uint64_t bench_run(void *c, uint64_t iters) {
  ctx_t *x = c;
  uint64_t acc = 0;
  for (uint64_t i = 0; i < iters; i++) {
    lk_exec_result res = {.timeline = x->tl, .timeline_cap = 4};
    x->left = x->fail_first;
    acc += (uint64_t)(lk_exec_run(&x->pol, op, x, NULL, &res) + res.attempts);
  }
  return acc;
}

static void count_event(void *ctx, const lk_event *ev) {
  ctx_t *x = ctx;
  x->events += (uint64_t)ev->type;
}

static void ctx_init(ctx_t *x) {
  lk_exec_policy_init_default(&x->pol);
  x->clock.base.now = tick_now;
  x->clock.t = LK_SEC(1);
  x->pol.clock = &x->clock.base;
  x->pol.sleep = tick_sleep;
  x->pol.sleep_ctx = &x->clock;
  lk_rand_fast_seeded(&x->rng, 42);
  x->pol.rng = &x->rng.base;
  x->fail_first = 0;
  x->events = 0;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 15;
  static ctx_t base, plain, prot, retry, events;
  ctx_init(&base);
  ctx_init(&plain);
  ctx_init(&prot);
  ctx_init(&retry);
  ctx_init(&events);

  lk_metrics *m = lk_metrics_new();
  lk_call_metrics *cm = lk_call_metrics_new(m, "bench");
  lk_budget_ratio_config rc;
  lk_budget_ratio_config_init_default(&rc);
  lk_budget *budget = NULL;
  lk_breaker_config bc;
  lk_breaker_config_init_default(&bc);
  lk_breaker *breaker = NULL;
  if (!cm || lk_budget_new_ratio(&rc, &budget, NULL) != LK_OK ||
      lk_breaker_new(&bc, &breaker, NULL) != LK_OK) {
    fprintf(stderr, "bench_exec: setup failed\n");
    return 1;
  }
  prot.pol.budget = budget;
  prot.pol.breaker = breaker;
  prot.pol.metrics = cm;
  retry.fail_first = 1;
  events.pol.on_event = count_event;
  events.pol.event_ctx = &events;

  lk_bench_pin(LK_BENCH_MAIN);
  lk_bench_print_placement("bench_exec");
  lk_bench_header("exec: lk_exec_run per call (single thread, fake attempt)",
                  "the attempt function called directly");
  const struct {
    const char *name;
    ctx_t *ctx;
  } rows[] = {
      {"lk_exec_run, success, no protections", &plain},
      {"lk_exec_run, success, budget + breaker + metrics", &prot},
      {"lk_exec_run, one retry then success", &retry},
      {"lk_exec_run, success, event callback (4 events)", &events},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    lk_bench_cmp cmp = lk_bench_compare(bench_direct, &base, bench_run, rows[i].ctx, rounds);
    lk_bench_row(rows[i].name, &cmp);
  }
  lk_breaker_free(breaker);
  lk_budget_free(budget);
  lk_call_metrics_free(cm);
  lk_metrics_free(m);
  return 0;
}
