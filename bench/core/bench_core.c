/* SPDX-License-Identifier: MIT */
/* ns per decide() (with its random draw), per backoff computation, per deadline check, each in
 * rounds interleaved with a baseline (one xoshiro draw, the cheapest thing decide() must do).
 * Usage: bench_core [rounds=15] */
#include <linkd/linkd.h>

#include "benchutil.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct {
  lk_retry_policy policy;
  lk_backoff_config backoff;
  lk_rand_fast rng;
  lk_attempt attempt;
} ctx_t;

static uint64_t bench_draw(void *c, uint64_t iters) {
  ctx_t *x = c;
  uint64_t acc = 0;
  for (uint64_t i = 0; i < iters; i++)
    acc += lk_rand_below(&x->rng.base, 401);
  return acc;
}

static uint64_t bench_decide_retry(void *c, uint64_t iters) {
  ctx_t *x = c;
  uint64_t acc = 0;
  lk_decision d;
  for (uint64_t i = 0; i < iters; i++) {
    x->attempt.number = 1 + (int)(i & 1);
    lk_retry_decide(&x->policy, &x->attempt, LK_SEC(3), &x->rng.base, &d);
    acc += (uint64_t)d.delay;
  }
  return acc;
}

static uint64_t bench_decide_stop(void *c, uint64_t iters) {
  ctx_t *x = c;
  uint64_t acc = 0;
  lk_decision d;
  lk_attempt a = {2, "POST", false, true, LK_F_READ_TIMEOUT, -1, 0};
  for (uint64_t i = 0; i < iters; i++) {
    lk_retry_decide(&x->policy, &a, LK_SEC(3), &x->rng.base, &d);
    acc += d.reason;
  }
  return acc;
}

static uint64_t bench_backoff(void *c, uint64_t iters) {
  ctx_t *x = c;
  uint64_t acc = 0;
  for (uint64_t i = 0; i < iters; i++)
    acc += (uint64_t)lk_backoff_delay(&x->backoff, 1 + (int)(i & 7), 0, &x->rng.base);
  return acc;
}

static uint64_t bench_deadline(void *c, uint64_t iters) {
  (void)c;
  uint64_t acc = 0;
  lk_deadline d = lk_deadline_after(1000, LK_SEC(3));
  for (uint64_t i = 0; i < iters; i++) {
    int64_t now = (int64_t)i;
    acc += (uint64_t)lk_attempt_timeout(LK_MS(800), lk_deadline_remaining(d, now));
    acc += lk_deadline_expired(d, now);
  }
  return acc;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 15;
  ctx_t x;
  lk_retry_config c;
  lk_retry_config_init_default(&c);
  lk_retry_policy_init(&x.policy, &c, NULL);
  x.backoff = c.backoff;
  lk_rand_fast_seeded(&x.rng, 42);
  lk_attempt a = {1, "GET", false, false, LK_F_CONNECT_FAILED, -1, 0};
  x.attempt = a;
  lk_bench_pin(LK_BENCH_MAIN);
  lk_bench_print_placement("bench_core");
  lk_bench_header("core: retry decision, backoff, deadline (single thread)",
                  "one lk_rand_below draw");
  const struct {
    const char *name;
    lk_bench_fn fn;
  } rows[] = {
      {"lk_retry_decide (retry path, 1 draw)", bench_decide_retry},
      {"lk_retry_decide (stop: not retryable)", bench_decide_stop},
      {"lk_backoff_delay (exp + symmetric jitter)", bench_backoff},
      {"deadline remaining + attempt timeout", bench_deadline},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    lk_bench_cmp cmp = lk_bench_compare(bench_draw, &x, rows[i].fn, &x, rounds);
    lk_bench_row(rows[i].name, &cmp);
  }
  return 0;
}
