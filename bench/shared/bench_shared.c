/* SPDX-License-Identifier: MIT */
/* bench_shared: what the fleet-wide limiter and budget (linkd/shared.h) cost per call against a
 * real redis-server on 127.0.0.1 (started here in a temporary directory).
 *
 * Closed loop, one call at a time per process: per-call latency (p50, p99) and calls/s of
 *   local    lk_limiter_try_acquire on a plain limiter (the baseline: what the call costs today)
 *   shared   lk_limiter_try_acquire on a shared limiter (an EVALSHA round trip to Redis)
 *   budget   lk_budget_acquire_retry on a shared RATIO budget (its script sums the window)
 * in ROUNDS interleaved rounds (local and shared alternate which goes first); "added" is
 * shared p50/p99 minus local p50/p99 of the same round. Then FLEET processes at once, each
 * reporting its own calls/s and p50/p99 on one shared limiter (Redis serialises their scripts).
 * Rates are set so that every call is admitted: each one runs the whole script.
 *
 *   bench_shared [CALLS_PER_ROUND] [ROUNDS] [FLEET]     (default 20000 5 3)
 * LINKD_BENCH_CPUS=A pins this process (and the fleet's) to CPU A; Redis is never pinned. */
#include <linkd/clock.h>
#include <linkd/error.h>
#include <linkd/limiter.h>
#include <linkd/shared.h>

#include "benchutil.h"
#include "tmpsrv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct sample {
  double p50_us, p99_us, calls_per_s;
} sample;

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

typedef int (*call_fn)(void *obj);
static int call_limiter(void *obj) { return lk_limiter_try_acquire(obj, lk_now_ns()); }
static int call_budget(void *obj) { return lk_budget_acquire_retry(obj, lk_now_ns(), false); }

static sample measure(call_fn fn, void *obj, int n, int64_t *lat) {
  int64_t start = lk_now_ns();
  for (int i = 0; i < n; i++) {
    int64_t t0 = lk_now_ns();
    lk_bench_sink += (uint64_t)fn(obj);
    lat[i] = lk_now_ns() - t0;
  }
  int64_t total = lk_now_ns() - start;
  qsort(lat, (size_t)n, sizeof *lat, cmp_i64);
  sample s = {lat[n / 2] / 1e3, lat[(int)((int64_t)n * 99 / 100)] / 1e3, n / (total / 1e9)};
  return s;
}

static void shared_cfg(lk_shared_config *c, const char *url, const char *prefix) {
  lk_shared_config_init_default(c);
  c->url = url;
  c->prefix = prefix;
  c->timeout = LK_MS(50); /* measure Redis, not the fallback */
}

static void wait_ready(lk_limiter *l) {
  for (int i = 0; i < 500; i++) {
    lk_shared_stats st;
    lk_shared_limiter_stats(l, &st);
    if (st.shared > 0)
      return;
    lk_limiter_try_acquire(l, lk_now_ns());
    usleep(10000);
  }
  fprintf(stderr, "bench_shared: the shared limiter never reached Redis\n");
  exit(1);
}

static void fmt(char *b, size_t n, const double *v, int k, int d) {
  lk_bench_fmt(b, n, lk_bench_stats_of(v, k), d);
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20000;
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  int fleet = argc > 3 ? atoi(argv[3]) : 3;
  if (n < 100 || rounds < 1 || rounds > 21 || fleet < 1 || fleet > 16) {
    fprintf(stderr, "usage: bench_shared [CALLS >= 100] [ROUNDS 1-21] [FLEET 1-16]\n");
    return 2;
  }
  lk_bench_pin(LK_BENCH_MAIN);
  lk_bench_print_placement("bench_shared");
  lk_tmpsrv redis;
  memset(&redis, 0, sizeof redis);
  if (lk_tmpsrv_redis_start(&redis) != 0)
    return 1;
  char url[64];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", redis.port);
  int64_t *lat = calloc((size_t)n, sizeof *lat);
  lk_limiter_config lc = {.rate = 1e9, .burst = 1000000000};
  lk_limiter *local, *shared;
  lk_shared_config sc;
  shared_cfg(&sc, url, "bench:limiter");
  lk_budget_ratio_config bc = {
      .percent = 1000, .ttl = LK_SEC(10), .min_retries_per_sec = 1000000, .buckets = 10};
  lk_budget *budget;
  if (!lat || lk_limiter_new(&lc, &local, NULL) != LK_OK ||
      lk_shared_limiter_new(&sc, &lc, &shared, NULL) != LK_OK)
    return 1;
  lk_shared_config bsc;
  shared_cfg(&bsc, url, "bench:budget");
  if (lk_shared_budget_new(&bsc, &bc, &budget, NULL) != LK_OK)
    return 1;
  wait_ready(shared);
  measure(call_budget, budget, 100, lat); /* connects and loads its scripts */

  printf("one process, %d calls per run, %d interleaved rounds (Redis %s)\n", n, rounds, url);
  printf("%-6s %-7s %10s %10s %10s %10s %10s %10s %12s %12s\n", "round", "first", "local p50",
         "local p99", "shared p50", "shared p99", "added p50", "added p99", "local/s", "shared/s");
  double a50[21], a99[21], s50[21], s99[21], lps[21], sps[21], b50[21], b99[21], bps[21];
  for (int k = 0; k < rounds; k++) {
    sample l, s;
    if (k % 2 == 0) {
      l = measure(call_limiter, local, n, lat);
      s = measure(call_limiter, shared, n, lat);
    } else {
      s = measure(call_limiter, shared, n, lat);
      l = measure(call_limiter, local, n, lat);
    }
    sample b = measure(call_budget, budget, n, lat);
    a50[k] = s.p50_us - l.p50_us;
    a99[k] = s.p99_us - l.p99_us;
    s50[k] = s.p50_us;
    s99[k] = s.p99_us;
    lps[k] = l.calls_per_s;
    sps[k] = s.calls_per_s;
    b50[k] = b.p50_us;
    b99[k] = b.p99_us;
    bps[k] = b.calls_per_s;
    printf("%-6d %-7s %9.3fus %9.3fus %9.1fus %9.1fus %9.1fus %9.1fus %12.0f %12.0f\n", k + 1,
           k % 2 == 0 ? "local" : "shared", l.p50_us, l.p99_us, s.p50_us, s.p99_us, a50[k], a99[k],
           l.calls_per_s, s.calls_per_s);
  }
  char f1[64], f2[64], f3[64];
  printf("\nmedian [min-max] over %d rounds:\n", rounds);
  fmt(f1, sizeof f1, a50, rounds, 1);
  fmt(f2, sizeof f2, a99, rounds, 1);
  printf("  shared limiter: added latency p50 %s us, p99 %s us\n", f1, f2);
  fmt(f1, sizeof f1, s50, rounds, 1);
  fmt(f2, sizeof f2, s99, rounds, 1);
  fmt(f3, sizeof f3, sps, rounds, 0);
  printf("  shared limiter: p50 %s us, p99 %s us, %s calls/s\n", f1, f2, f3);
  fmt(f3, sizeof f3, lps, rounds, 0);
  printf("  local limiter:  %s calls/s\n", f3);
  fmt(f1, sizeof f1, b50, rounds, 1);
  fmt(f2, sizeof f2, b99, rounds, 1);
  fmt(f3, sizeof f3, bps, rounds, 0);
  printf("  shared budget acquire_retry: p50 %s us, p99 %s us, %s calls/s\n", f1, f2, f3);
  lk_limiter_free(local);
  lk_limiter_free(shared);
  lk_budget_free(budget);

  /* The fleet: each process its own connection, one shared limiter. */
  printf("\n%d processes at once on one shared limiter, %d calls each:\n", fleet, n);
  int fds[16][2];
  pid_t pids[16];
  for (int i = 0; i < fleet; i++) {
    if (pipe(fds[i]) != 0)
      return 1;
    pids[i] = fork();
    if (pids[i] == 0) {
      close(fds[i][0]);
      lk_limiter *l;
      if (lk_shared_limiter_new(&sc, &lc, &l, NULL) != LK_OK)
        _exit(2);
      wait_ready(l);
      sample s = measure(call_limiter, l, n, lat);
      lk_limiter_free(l);
      _exit(write(fds[i][1], &s, sizeof s) == (ssize_t)sizeof s ? 0 : 3);
    }
    close(fds[i][1]);
  }
  double total = 0;
  for (int i = 0; i < fleet; i++) {
    sample s = {0};
    ssize_t r = read(fds[i][0], &s, sizeof s);
    close(fds[i][0]);
    int st;
    waitpid(pids[i], &st, 0);
    if (r != (ssize_t)sizeof s)
      return 1;
    total += s.calls_per_s;
    printf("  process %d: %.0f calls/s, p50 %.1f us, p99 %.1f us\n", i + 1, s.calls_per_s, s.p50_us,
           s.p99_us);
  }
  printf("  fleet: %.0f calls/s in all\n", total);
  free(lat);
  lk_tmpsrv_destroy(&redis);
  return 0;
}
