/* SPDX-License-Identifier: MIT */
/* Histogram and counter recording cost, single-threaded and with 2 threads on one shared object.
 * Baseline: one relaxed atomic add on a private counter (the floor of any lock-free record).
 * Each row runs in rounds interleaved with its baseline (1-thread rows: that private add; 2-thread
 * rows: a shared atomic add by both threads).  Usage: bench_hist [rounds=11] */
#include "benchutil.h"

#include <linkd/hist.h>
#include <linkd/metrics.h>
#include <linkd/rand.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define NVALS 4096 /* power of two: index with a mask */

typedef struct ctx {
  lk_hist *h;
  lk_counter *c;
  const int64_t *vals;
  _Atomic uint64_t *shared;
} ctx;

static int64_t vals[NVALS];

static uint64_t base_atomic(void *arg, uint64_t iters) {
  (void)arg;
  _Atomic uint64_t local = 0;
  for (uint64_t i = 0; i < iters; i++)
    atomic_fetch_add_explicit(&local, i, memory_order_relaxed);
  return atomic_load(&local);
}

static uint64_t shared_atomic(void *arg, uint64_t iters) {
  ctx *c = arg;
  for (uint64_t i = 0; i < iters; i++)
    atomic_fetch_add_explicit(c->shared, 1, memory_order_relaxed);
  return iters;
}

static uint64_t hist_record(void *arg, uint64_t iters) {
  ctx *c = arg;
  for (uint64_t i = 0; i < iters; i++)
    lk_hist_record(c->h, c->vals[i & (NVALS - 1)]);
  return iters;
}

static uint64_t counter_add(void *arg, uint64_t iters) {
  ctx *c = arg;
  for (uint64_t i = 0; i < iters; i++)
    lk_counter_add(c->c, 1);
  return iters;
}

static uint64_t hist_p99(void *arg, uint64_t iters) {
  ctx *c = arg;
  uint64_t s = 0;
  for (uint64_t i = 0; i < iters; i++)
    s += (uint64_t)lk_hist_percentile(c->h, 99.0);
  return s;
}

/* Two threads run `fn` for `iters` each on the same ctx; reported time is per op of one thread,
 * i.e. what each caller pays while the other hammers the same object. */
typedef struct pair {
  lk_bench_fn fn;
  ctx *c;
  uint64_t iters;
} pair;

static void *pair_thread(void *arg) {
  pair *p = arg;
  lk_bench_pin(LK_BENCH_SECOND);
  lk_bench_second_mark(0);
  lk_bench_sink += p->fn(p->c, p->iters);
  lk_bench_second_mark(1);
  return NULL;
}

typedef struct two {
  lk_bench_fn fn;
  ctx *c;
} two;

static uint64_t run_two(void *arg, uint64_t iters) {
  two *t = arg;
  pair p = {t->fn, t->c, iters};
  pthread_t th;
  if (pthread_create(&th, NULL, pair_thread, &p) != 0)
    return t->fn(t->c, iters);
  uint64_t r = t->fn(t->c, iters);
  pthread_join(th, NULL);
  return r;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 11;
  lk_bench_pin(LK_BENCH_MAIN);
  lk_bench_print_placement("bench_hist");
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, 42);
  /* Latency-like values: 1-10 ms body, some tail to 2 s. */
  for (int i = 0; i < NVALS; i++)
    vals[i] = lk_rand_below(&r.base, 50) == 0 ? (int64_t)lk_rand_below(&r.base, 2000000000)
                                              : 1000000 + (int64_t)lk_rand_below(&r.base, 9000000);
  lk_metrics *m = lk_metrics_new();
  _Atomic uint64_t shared = 0;
  ctx c = {lk_metrics_histogram(m, "bench_seconds", "Bench.", NULL),
           lk_metrics_counter(m, "bench_total", "Bench.", NULL), vals, &shared};
  if (!c.h || !c.c) {
    fprintf(stderr, "registration failed\n");
    return 1;
  }

  two t_shared = {shared_atomic, &c}, t_hist = {hist_record, &c}, t_ctr = {counter_add, &c};
  lk_bench_cmp cmp;
  lk_bench_header("histogram and counter record, 1 thread (ns/op)",
                  "relaxed atomic add on a private counter");
  cmp = lk_bench_compare(base_atomic, NULL, hist_record, &c, rounds);
  lk_bench_row("lk_hist_record, 1 thread", &cmp);
  cmp = lk_bench_compare(base_atomic, NULL, counter_add, &c, rounds);
  lk_bench_row("lk_counter_add, 1 thread", &cmp);
  cmp = lk_bench_compare(base_atomic, NULL, hist_p99, &c, rounds);
  lk_bench_row("lk_hist_percentile(99), min..max scan", &cmp);
  lk_bench_header("histogram and counter record, 2 threads on one object (ns/op per thread)",
                  "relaxed atomic add, 2 threads on one shared counter");
  cmp = lk_bench_compare(run_two, &t_shared, run_two, &t_hist, rounds);
  lk_bench_row("lk_hist_record, 2 threads, one histogram", &cmp);
  cmp = lk_bench_compare(run_two, &t_shared, run_two, &t_ctr, rounds);
  lk_bench_row("lk_counter_add, 2 threads, one counter", &cmp);
  lk_metrics_free(m);
  return 0;
}
