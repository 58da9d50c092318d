/* SPDX-License-Identifier: MIT */
/* ns per decide() (with its random draw), per backoff computation, per deadline check, against a
 * baseline measured in the same run (one xoshiro draw, the cheapest thing decide() must do). */
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
  int reps = argc > 1 ? atoi(argv[1]) : 15;
  ctx_t x;
  lk_retry_config c;
  lk_retry_config_init_default(&c);
  lk_retry_policy_init(&x.policy, &c, NULL);
  x.backoff = c.backoff;
  lk_rand_fast_seeded(&x.rng, 42);
  lk_attempt a = {1, "GET", false, false, LK_F_CONNECT_FAILED, -1, 0};
  x.attempt = a;
  lk_bench_header("core: retry decision, backoff, deadline (single thread)");
  lk_bench_result base = lk_bench_run(bench_draw, &x, reps);
  lk_bench_print("baseline: one lk_rand_below draw", base, base);
  lk_bench_print("lk_retry_decide (retry path, 1 draw)", lk_bench_run(bench_decide_retry, &x, reps), base);
  lk_bench_print("lk_retry_decide (stop: not retryable)", lk_bench_run(bench_decide_stop, &x, reps), base);
  lk_bench_print("lk_backoff_delay (exp + symmetric jitter)", lk_bench_run(bench_backoff, &x, reps), base);
  lk_bench_print("deadline remaining + attempt timeout", lk_bench_run(bench_deadline, &x, reps), base);
  return 0;
}
