/* SPDX-License-Identifier: MIT */
/* Benchmark harness shared by every bench program.
 *
 * These machines are noisy and their speed drifts (other jobs share the 2 cores; a VM's vCPUs
 * differ), so a subject is never timed alone: it runs in rounds interleaved with a baseline
 * measured in the same process (round k: baseline then subject, round k+1: subject then
 * baseline), each round gives one paired ratio subject / baseline, and the report leads with the
 * median and min–max of those ratios; absolute medians come second.
 *
 * CPU placement matters as much as noise (loopback ping-pong on one vCPU and on two differ ~5x),
 * so every round records the CPU each thread started and ended on, and LINKD_BENCH_CPUS pins:
 *   LINKD_BENCH_CPUS=A      every thread (and a forked server) on CPU A
 *   LINKD_BENCH_CPUS=A,B    the measuring thread / client on A; the second thread / server on B
 * Unset: nothing is pinned, and the report says which CPUs each round actually ran on. */
#ifndef LINKD_BENCHUTIL_H
#define LINKD_BENCHUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The body runs `iters` times per call; returns a value the harness sinks to defeat DCE. */
typedef uint64_t (*lk_bench_fn)(void *ctx, uint64_t iters);

/* Median and range of a sample. */
typedef struct lk_bench_stats {
  double median, min, max;
} lk_bench_stats;

/* The roles LINKD_BENCH_CPUS assigns CPUs to. */
enum { LK_BENCH_MAIN = 0, LK_BENCH_SECOND = 1 };

#define LK_BENCH_MAX_ROUNDS 101

/* Where one run of a thread was: CPU at start and at end (-1: unknown / thread not used). */
typedef struct lk_bench_where {
  short main0, main1, second0, second1;
} lk_bench_where;

/* One subject against its baseline over interleaved rounds: per-round ratio subject / baseline
 * and ns per op of each, plus where the subject's runs were. */
typedef struct lk_bench_cmp {
  int rounds;
  lk_bench_stats ratio, base_ns, subj_ns;
  lk_bench_where where[LK_BENCH_MAX_ROUNDS];
} lk_bench_cmp;

/* Median/min/max of v[0..n) (v is not modified). n >= 1. */
lk_bench_stats lk_bench_stats_of(const double *v, int n);

/* Pins the calling thread to the CPU LINKD_BENCH_CPUS gives `role`; returns that CPU, or -1 when
 * the variable is unset. Exits with a message if it is malformed or the CPU cannot be used, so a
 * pinned run never silently runs unpinned. */
int lk_bench_pin(int role);
/* A second thread calls this at the start and end of each run it does for a comparison, so the
 * round can say where it ran. */
void lk_bench_second_mark(int end);
/* The CPU process `pid` last ran on (from /proc), or -1. */
int lk_bench_proc_cpu(pid_t pid);
/* Writes the calling thread's affinity mask as "0-1" / "0,3". */
void lk_bench_affinity(char *buf, size_t n);
/* Prints the placement line every program starts with: pinning asked for, affinity, CPU. */
void lk_bench_print_placement(const char *program);

/* Runs baseline and subject in `rounds` interleaved rounds (order alternating), each run long
 * enough for ~20 ms (iterations calibrated once per function, so each round does the same work).
 * rounds is clamped to 1..LK_BENCH_MAX_ROUNDS. */
lk_bench_cmp lk_bench_compare(lk_bench_fn base, void *base_ctx, lk_bench_fn subj, void *subj_ctx,
                              int rounds);
/* Table header and one row: ratio median [min–max] first, then baseline and subject ns/op
 * median [min–max], then the subject's placement per round ("main/second", ">" for a run that
 * moved CPU). */
void lk_bench_header(const char *title, const char *baseline);
void lk_bench_row(const char *name, const lk_bench_cmp *c);
/* Formats "0.971 [0.965-0.980]" with `decimals` digits after the point. */
void lk_bench_fmt(char *buf, size_t n, lk_bench_stats s, int decimals);

/* Sink for results so the compiler cannot remove work. */
extern volatile uint64_t lk_bench_sink;

#endif
