/* SPDX-License-Identifier: MIT */
#include "benchutil.h"

#include <linkd/clock.h>

#include <stdio.h>
#include <stdlib.h>

volatile uint64_t lk_bench_sink;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

lk_bench_result lk_bench_run(lk_bench_fn fn, void *ctx, int reps) {
  if (reps < 1)
    reps = 1;
  if (reps > 101)
    reps = 101;
  /* Calibrate: grow iterations until one run takes >= 20 ms (bounded). */
  uint64_t iters = 1000;
  for (int i = 0; i < 24; i++) {
    int64_t t0 = lk_now_ns();
    lk_bench_sink += fn(ctx, iters);
    int64_t dt = lk_now_ns() - t0;
    if (dt >= 20 * 1000000LL)
      break;
    iters *= 2;
  }
  double per[101];
  for (int r = 0; r < reps; r++) {
    int64_t t0 = lk_now_ns();
    lk_bench_sink += fn(ctx, iters);
    per[r] = (double)(lk_now_ns() - t0) / (double)iters;
  }
  qsort(per, (size_t)reps, sizeof per[0], cmp_double);
  lk_bench_result res = {per[reps / 2], per[0], per[reps - 1]};
  return res;
}

void lk_bench_header(const char *title) {
  printf("\n## %s\n%-44s %10s %10s %10s %8s\n", title, "benchmark", "median_ns", "min_ns",
         "max_ns", "ratio");
}

void lk_bench_print(const char *name, lk_bench_result r, lk_bench_result baseline) {
  printf("%-44s %10.2f %10.2f %10.2f %8.2f\n", name, r.median_ns, r.min_ns, r.max_ns,
         baseline.median_ns > 0 ? r.median_ns / baseline.median_ns : 0.0);
}
