/* SPDX-License-Identifier: MIT */
/* Histogram and counter recording cost, single-threaded and with 2 threads on one shared object.
 * Baseline: one relaxed atomic add on a private counter (the floor of any lock-free record).
 * Usage: bench_hist [reps]   (default 11) */
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
  lk_bench_sink += p->fn(p->c, p->iters);
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
  int reps = argc > 1 ? atoi(argv[1]) : 11;
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

  lk_bench_header("histogram and counter record (ns/op per thread)");
  lk_bench_result base = lk_bench_run(base_atomic, NULL, reps);
  lk_bench_print("baseline: relaxed atomic add (private)", base, base);
  lk_bench_print("lk_hist_record, 1 thread", lk_bench_run(hist_record, &c, reps), base);
  lk_bench_print("lk_counter_add, 1 thread", lk_bench_run(counter_add, &c, reps), base);
  two t_shared = {shared_atomic, &c}, t_hist = {hist_record, &c}, t_ctr = {counter_add, &c};
  lk_bench_print("reference: atomic add, 2 threads, shared", lk_bench_run(run_two, &t_shared, reps),
                 base);
  lk_bench_print("lk_hist_record, 2 threads, one histogram", lk_bench_run(run_two, &t_hist, reps),
                 base);
  lk_bench_print("lk_counter_add, 2 threads, one counter", lk_bench_run(run_two, &t_ctr, reps),
                 base);
  lk_bench_print("lk_hist_percentile(99), min..max scan", lk_bench_run(hist_p99, &c, reps), base);
  lk_metrics_free(m);
  return 0;
}
