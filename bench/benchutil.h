/* SPDX-License-Identifier: MIT */
/* Micro-benchmark harness: median ns/op over repeated runs, reported as a ratio against a baseline
 * measured in the same process (these machines are noisy; ratios travel, absolute ns less so). */
#ifndef LINKD_BENCHUTIL_H
#define LINKD_BENCHUTIL_H

#include <stdint.h>

/* The body runs `iters` times per call; returns a value the harness sinks to defeat DCE. */
typedef uint64_t (*lk_bench_fn)(void *ctx, uint64_t iters);

typedef struct lk_bench_result {
  double median_ns; /* per op */
  double min_ns;
  double max_ns;
} lk_bench_result;

/* Runs fn `reps` times (after one warm-up) with enough iterations for ~20 ms each. */
lk_bench_result lk_bench_run(lk_bench_fn fn, void *ctx, int reps);
/* Prints "name  median  min  max  ratio-vs-baseline" as one row. */
void lk_bench_print(const char *name, lk_bench_result r, lk_bench_result baseline);
/* Prints the table header. */
void lk_bench_header(const char *title);
/* Sink for results so the compiler cannot remove work. */
extern volatile uint64_t lk_bench_sink;

#endif
