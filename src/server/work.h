/* SPDX-License-Identifier: MIT */
/* work.h: the service cost of a request, which a worker spends before running the handler so that
 * libraryd has a real, configurable capacity (workers / cost requests per second).
 *
 * A spec is comma-separated ROUTE=COST entries, the same text for --work and the config file;
 * LK_WORK_DEFAULT below is an example ("GET /books" followed by "=cpu:500us" would be another).
 * ROUTE is a route pattern (lk_route_match); COST a duration (lk_duration_parse) slept in the
 * worker, like waiting on I/O, or cpu:DURATION of busy CPU time of the worker's thread. The first
 * matching entry wins; no match costs nothing. "none" is the empty spec.
 *
 * Thread-safety: a parsed spec is read-only and may be shared by any number of threads.
 */
#ifndef LINKD_SERVER_WORK_H
#define LINKD_SERVER_WORK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LK_WORK_DEFAULT "GET /books/*=1ms,POST /books/*/loans=3ms"
#define LK_WORK_MAX 32
#define LK_WORK_ROUTE_MAX 256

typedef struct lk_work_entry {
  char route[LK_WORK_ROUTE_MAX];
  int64_t ns; /* >= 0 */
  bool cpu;   /* busy CPU time rather than a sleep */
} lk_work_entry;

typedef struct lk_work_spec {
  lk_work_entry e[LK_WORK_MAX];
  size_t n;
} lk_work_spec;

/* Parses a spec. 0 or LK_EPARSE with a message in err. */
int lk_work_parse(const char *spec, lk_work_spec *out, char *err, size_t errcap);
/* The first entry matching method + path, NULL when none does. */
const lk_work_entry *lk_work_find(const lk_work_spec *w, const char *method, const char *path);
/* cost × factor, rounded down and saturated to INT64_MAX. */
int64_t lk_work_scaled(int64_t cost_ns, double factor);

#endif
