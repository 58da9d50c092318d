/* SPDX-License-Identifier: MIT */
/* ns per op for the rate limiter and the bulkhead, single-threaded and with 2 threads hammering
 * one shared object, against baselines measured in the same run: one atomic fetch_add on a
 * private counter (single thread) and on one shared counter (2 threads), the floor for any
 * lock-free shared object. Also the hedge decision and an adaptive-limit sample, for reference.
 *
 * Each row runs in rounds interleaved with its baseline.
 * Usage: bench_limiter_bulkhead [rounds=15] */
#include <linkd/adaptive.h>
#include <linkd/bulkhead.h>
#include <linkd/error.h>
#include <linkd/hedge.h>
#include <linkd/limiter.h>

#include "benchutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct ctx {
  lk_limiter *grant;  /* 1e9/s, huge burst: every try succeeds (a CAS each time) */
  lk_limiter *refuse; /* empty bucket at the times used: every try is refused (loads only) */
  lk_bulkhead *bh;    /* limit far above 2: every try_acquire succeeds */
  lk_adaptive *adaptive;
  lk_hedge_policy hedge;
  int64_t epoch; /* fake-time origin of the current run, moved forward by the drivers */
  _Alignas(64) _Atomic uint64_t shared;
  _Alignas(64) _Atomic uint64_t priv;
} ctx;

/* ---- bodies: each runs `iters` ops; `lane` keeps two threads' fake clocks apart ------------ */

typedef uint64_t (*body_fn)(ctx *x, uint64_t iters, int lane);

static uint64_t body_private_faa(ctx *x, uint64_t iters, int lane) {
  (void)lane;
  for (uint64_t i = 0; i < iters; i++)
    atomic_fetch_add_explicit(&x->priv, 1, memory_order_relaxed);
  return atomic_load(&x->priv);
}

static uint64_t body_shared_faa(ctx *x, uint64_t iters, int lane) {
  (void)lane;
  for (uint64_t i = 0; i < iters; i++)
    atomic_fetch_add_explicit(&x->shared, 1, memory_order_relaxed);
  return atomic_load(&x->shared);
}

static uint64_t body_limiter_grant(ctx *x, uint64_t iters, int lane) {
  uint64_t ok = 0;
  /* 4 fake ns per op per thread against 1 ns per token: supply always exceeds demand. */
  int64_t base = x->epoch + lane;
  for (uint64_t i = 0; i < iters; i++)
    ok += lk_limiter_try_acquire(x->grant, base + (int64_t)i * 4) == LK_OK;
  return ok;
}

static uint64_t body_limiter_refuse(ctx *x, uint64_t iters, int lane) {
  uint64_t ok = 0;
  for (uint64_t i = 0; i < iters; i++)
    ok += lk_limiter_try_acquire(x->refuse, (int64_t)(i & 1023) + lane) == LK_OK;
  return ok;
}

static uint64_t body_limiter_reserve(ctx *x, uint64_t iters, int lane) {
  uint64_t acc = 0;
  int64_t base = x->epoch + lane;
  for (uint64_t i = 0; i < iters; i++)
    acc += (uint64_t)lk_limiter_reserve(x->grant, base + (int64_t)i * 4, LK_MS(1));
  return acc;
}

static uint64_t body_bulkhead(ctx *x, uint64_t iters, int lane) {
  (void)lane;
  uint64_t ok = 0;
  for (uint64_t i = 0; i < iters; i++) {
    if (lk_bulkhead_try_acquire(x->bh) == LK_OK) {
      ok++;
      lk_bulkhead_release(x->bh);
    }
  }
  return ok;
}

static uint64_t body_hedge(ctx *x, uint64_t iters, int lane) {
  (void)lane;
  uint64_t acc = 0;
  for (uint64_t i = 0; i < iters; i++) {
    lk_hedge_decision d = lk_hedge_decide(&x->hedge, 0, (int64_t)(i & 255) * LK_MS(1), 0);
    acc += d.send + (uint64_t)(d.next_at & 1);
  }
  return acc;
}

static uint64_t body_adaptive(ctx *x, uint64_t iters, int lane) {
  (void)lane;
  uint64_t acc = 0;
  for (uint64_t i = 0; i < iters; i++)
    acc +=
        (uint64_t)lk_adaptive_record(x->adaptive, (int64_t)i * 1000, LK_MS(10) + (int64_t)(i & 7),
                                     (i & 63) ? LK_ADAPTIVE_SUCCESS : LK_ADAPTIVE_DROP);
  return acc;
}

/* ---- single thread and 2-thread drivers for lk_bench_run ------------------------------------ */

typedef struct job {
  ctx *x;
  body_fn body;
} job;

/* Each run starts its fake clocks after everything the previous run used. */
static void next_epoch(ctx *x) { x->epoch += INT64_C(1) << 40; }

static uint64_t run_single(void *p, uint64_t iters) {
  job *j = p;
  next_epoch(j->x);
  return j->body(j->x, iters, 0);
}

typedef struct partner {
  job *j;
  uint64_t iters;
  _Atomic int *ready;
  uint64_t result;
} partner;

static void start_together(_Atomic int *ready) {
  atomic_fetch_add(ready, 1);
  while (atomic_load(ready) < 2) {
  }
}

static void *partner_main(void *p) {
  partner *pt = p;
  lk_bench_pin(LK_BENCH_SECOND);
  lk_bench_second_mark(0);
  start_together(pt->ready);
  pt->result = pt->j->body(pt->j->x, pt->iters, 1);
  lk_bench_second_mark(1);
  return NULL;
}

/* Both threads run `iters` ops on the same object at once: wall time / iters = ns per op as each
 * thread experiences it under contention. */
static uint64_t run_pair(void *p, uint64_t iters) {
  job *j = p;
  next_epoch(j->x); /* before pthread_create, which orders it for the partner */
  _Atomic int ready = 0;
  partner pt = {j, iters, &ready, 0};
  pthread_t th;
  if (pthread_create(&th, NULL, partner_main, &pt) != 0) {
    fprintf(stderr, "pthread_create failed\n");
    exit(1);
  }
  start_together(&ready);
  uint64_t r = j->body(j->x, iters, 0);
  pthread_join(th, NULL);
  return r + pt.result;
}

static void row(const char *name, lk_bench_fn drive, job *base, ctx *x, body_fn body, int rounds) {
  job j = {x, body};
  lk_bench_cmp c = lk_bench_compare(drive, base, drive, &j, rounds);
  lk_bench_row(name, &c);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 15;
  lk_bench_pin(LK_BENCH_MAIN);
  lk_bench_print_placement("bench_limiter_bulkhead");
  static ctx x;
  lk_limiter_config lc = {1e9, INT64_C(1) << 40};
  lk_limiter_config rc = {1.0, 1};
  lk_bulkhead_config bc = {1000, 10};
  lk_adaptive_config ac;
  lk_adaptive_config_init_default(&ac);
  ac.kind = LK_ADAPTIVE_GRADIENT;
  if (lk_limiter_new(&lc, &x.grant, NULL) != LK_OK ||
      lk_limiter_new(&rc, &x.refuse, NULL) != LK_OK || lk_bulkhead_new(&bc, &x.bh, NULL) != LK_OK ||
      lk_adaptive_new(&ac, &x.adaptive, NULL) != LK_OK) {
    fprintf(stderr, "setup failed\n");
    return 1;
  }
  lk_limiter_try_acquire(x.refuse, 0); /* empty for the next second of fake time */
  lk_hedge_policy_init_default(&x.hedge);
  x.hedge.max_hedges = 2;
  atomic_init(&x.shared, 0);
  atomic_init(&x.priv, 0);

  /* The "granted" rows must really grant (a CAS each), or they would time the refusal path. */
  job jg = {&x, body_limiter_grant};
  uint64_t n = 1000000, g1 = run_single(&jg, n), g2 = run_pair(&jg, n);
  printf("sanity: granted %.4f of tries single, %.4f with 2 threads\n", (double)g1 / (double)n,
         (double)g2 / (double)(2 * n));

  job jb = {&x, body_private_faa};
  lk_bench_header("limiter / bulkhead: single thread (ns/op)", "atomic fetch_add (private)");
  row("lk_limiter_try_acquire (granted, CAS)", run_single, &jb, &x, body_limiter_grant, rounds);
  row("lk_limiter_try_acquire (refused)", run_single, &jb, &x, body_limiter_refuse, rounds);
  row("lk_limiter_reserve (granted)", run_single, &jb, &x, body_limiter_reserve, rounds);
  row("lk_bulkhead_try_acquire + release", run_single, &jb, &x, body_bulkhead, rounds);
  row("lk_hedge_decide (fixed delay)", run_single, &jb, &x, body_hedge, rounds);
  row("lk_adaptive_record (gradient, mutex)", run_single, &jb, &x, body_adaptive, rounds);

  job js = {&x, body_shared_faa};
  lk_bench_header("limiter / bulkhead: 2 threads on one shared object (ns/op per thread)",
                  "atomic fetch_add on one shared counter, 2 threads");
  row("lk_limiter_try_acquire (granted, 2 thr)", run_pair, &js, &x, body_limiter_grant, rounds);
  row("lk_limiter_try_acquire (refused, 2 thr)", run_pair, &js, &x, body_limiter_refuse, rounds);
  row("lk_bulkhead_try_acquire + release (2 thr)", run_pair, &js, &x, body_bulkhead, rounds);
  row("lk_adaptive_record (2 thr)", run_pair, &js, &x, body_adaptive, rounds);
  printf("\n(ratio = per-round subject / baseline; median [min-max] over the rounds)\n");

  lk_adaptive_free(x.adaptive);
  lk_bulkhead_free(x.bh);
  lk_limiter_free(x.refuse);
  lk_limiter_free(x.grant);
  return 0;
}
