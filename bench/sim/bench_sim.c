/* SPDX-License-Identifier: MIT */
/* The simulator's speed: simulated attempts per second of wall time, on one core.
 * Baseline: the same run with every event in one 4-ary heap instead of the calendar queue
 * (sim_scenario.plain_heap), interleaved round by round; the ratio is calendar CPU time / heap
 * CPU time, then simulated attempts per second of the thread's CPU time and of wall time.
 * Rows: one attempt per call with constant times (the engine alone), a lean tier with retries and
 * jitter (no protection), the demo's linkd policy (deadline, budget, breaker that waits for its
 * probe) through an overload, and a fleet of 1 000 000 closed-loop clients over three tiers for
 * 10 simulated seconds (the events of a million thinking clients are what the calendar is for).
 * Usage: bench_sim [rounds=5] */
#include "benchutil.h"

#include "sim/sim.h"

#include <linkd/error.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One run, timed on CLOCK_MONOTONIC (wall) and on the thread's CPU clock; returns wall ns, stores
 * CPU ns and the attempts it simulated. One run is milliseconds to seconds, so rounds are single
 * runs (lk_bench_compare's calibration starts at a thousand calls of its body). On a loaded
 * machine wall time includes waiting for a core; CPU time is what one core spent. */
static double timed_run(const sim_scenario *sc, uint64_t *attempts, double *cpu_ns) {
  struct timespec a, b, ca, cb;
  sim_result r;
  const char *why = NULL;
  clock_gettime(CLOCK_MONOTONIC, &a);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ca);
  if (sim_run(sc, &r, &why) != LK_OK) {
    fprintf(stderr, "bench_sim: %s\n", why ? why : "sim_run failed");
    exit(1);
  }
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cb);
  clock_gettime(CLOCK_MONOTONIC, &b);
  *attempts = r.attempts;
  sim_result_free(&r);
  *cpu_ns = (double)(cb.tv_sec - ca.tv_sec) * 1e9 + (double)(cb.tv_nsec - ca.tv_nsec);
  return (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
}

static const char minimal[] =
    "seed 1\nduration 5s\ndrain 1s\nwindow 100ms\nnetwork delay=const:200us\n"
    "policy p attempts=1 timeout=50ms\n"
    "tier a servers=8 workers=128 service=const:1ms queue=1000\n"
    "client c rate=1000000/s arrivals=uniform target=a policy=p\n";

static const char lean[] =
    "seed 1\nduration 1s\ndrain 1s\nwindow 100ms\nnetwork delay=uniform:100us:300us\n"
    "policy p attempts=3 backoff=exponential base=10ms max=100ms jitter=full timeout=50ms\n"
    "tier a servers=8 workers=128 service=exp:1ms queue=1000\n"
    "client c rate=500000/s target=a policy=p\n";

/* The storm row's policy (the demo's linkd policy: deadline, propagation, ratio budget, breaker
 * that waits for its probe, jittered backoff) at half the tier's capacity and no trigger: every
 * attempt runs the whole of the core's policy code, as in a healthy system. */
static const char policy[] =
    "seed 1\nduration 2s\ndrain 1s\nwindow 100ms\nnetwork delay=uniform:100us:300us\n"
    "policy linkd attempts=4 backoff=exponential base=200ms max=2s jitter=symmetric "
    "timeout=800ms deadline=2s propagate=yes budget=ratio budget.percent=20 budget.ttl=10s "
    "breaker=yes breaker.window=50 breaker.min=20 breaker.open=100ms breaker.open_max=500ms "
    "breaker.probes=5 breaker.wait=yes\n"
    "tier a servers=8 workers=128 service=exp:1ms queue=1000 drop_expired=yes\n"
    "client c rate=500000/s target=a policy=linkd\n";

static const char storm[] =
    "seed 1\nduration 1s\ndrain 2s\nwindow 100ms\nnetwork delay=uniform:100us:300us\n"
    "policy linkd attempts=4 backoff=exponential base=200ms max=2s jitter=symmetric "
    "timeout=800ms deadline=2s propagate=yes budget=ratio budget.percent=20 budget.ttl=10s "
    "breaker=yes breaker.window=50 breaker.min=20 breaker.open=100ms breaker.open_max=500ms "
    "breaker.probes=5 breaker.wait=yes\n"
    "tier a servers=8 workers=128 service=exp:1ms queue=1000 drop_expired=yes\n"
    "client c rate=500000/s target=a policy=linkd\n"
    "trigger slowdown tier=a from=0.3s to=0.5s factor=3\n";

static const char fleet[] =
    "seed 1\nduration 10s\ndrain 2s\nwindow 1s\nnetwork delay=uniform:200us:600us\n"
    "policy client attempts=3 backoff=exponential base=50ms max=1s jitter=full timeout=500ms "
    "deadline=2s propagate=yes budget=ratio budget.percent=10\n"
    "policy inner attempts=2 backoff=exponential base=10ms max=100ms jitter=full timeout=200ms "
    "propagate=yes\n"
    "tier edge servers=50 workers=64 service=exp:1ms queue=2000 calls=app policy=inner\n"
    "tier app servers=100 workers=32 service=exp:2ms queue=2000 calls=db policy=inner\n"
    "tier db servers=40 workers=32 service=exp:5ms queue=2000\n"
    "client users loop=closed count=1000000 think=exp:10s target=edge policy=client\n";

static void row(const char *name, const char *text, int rounds) {
  sim_scenario cal, heap;
  char err[300];
  if (sim_scenario_parse(text, strlen(text), &cal, err, sizeof err) != LK_OK) {
    fprintf(stderr, "bench_sim: %s\n", err);
    exit(1);
  }
  heap = cal;
  heap.plain_heap = true;
  double ratio[LK_BENCH_MAX_ROUNDS], mc[LK_BENCH_MAX_ROUNDS], mh[LK_BENCH_MAX_ROUNDS];
  double cc[LK_BENCH_MAX_ROUNDS];
  uint64_t ac = 0, ah = 0;
  for (int k = 0; k < rounds; k++) { /* A B, B A, ...: neither always runs first */
    double tc, th, cpu_c, cpu_h;
    if (k % 2 == 0) {
      th = timed_run(&heap, &ah, &cpu_h);
      tc = timed_run(&cal, &ac, &cpu_c);
    } else {
      tc = timed_run(&cal, &ac, &cpu_c);
      th = timed_run(&heap, &ah, &cpu_h);
    }
    (void)th; /* the heap run is compared by CPU time only */
    ratio[k] = cpu_c / cpu_h;
    mc[k] = (double)ac / tc * 1e3; /* M attempts per second */
    cc[k] = (double)ac / cpu_c * 1e3;
    mh[k] = (double)ah / cpu_h * 1e3;
  }
  char r[64], c[64], u[64], h[64];
  lk_bench_fmt(r, sizeof r, lk_bench_stats_of(ratio, rounds), 3);
  lk_bench_fmt(c, sizeof c, lk_bench_stats_of(mc, rounds), 2);
  lk_bench_fmt(u, sizeof u, lk_bench_stats_of(cc, rounds), 2);
  lk_bench_fmt(h, sizeof h, lk_bench_stats_of(mh, rounds), 2);
  printf("%-31s %-20s %-20s %-20s %-20s %llu\n", name, r, u, c, h, (unsigned long long)ac);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 5;
  lk_bench_print_placement("bench_sim");
  lk_bench_pin(LK_BENCH_MAIN);
  if (rounds < 1 || rounds > LK_BENCH_MAX_ROUNDS)
    rounds = 5;
  printf("%-31s %-20s %-20s %-20s %-20s %s\n", "run (M = million attempts/s)", "CPU calendar/heap",
         "calendar M/CPU-s", "calendar M/wall-s", "heap M/CPU-s", "attempts per run");
  row("minimal: 1M calls/s x 5s, 1 att", minimal, rounds);
  row("lean tier, 500k calls/s", lean, rounds);
  row("linkd policy, 500k calls/s", policy, rounds);
  row("storm policy, 500k calls/s", storm, rounds);
  row("fleet 1M clients, 3 tiers, 10s", fleet, rounds);
  return 0;
}
