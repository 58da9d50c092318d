/* SPDX-License-Identifier: MIT */
/* series.h: per-100 ms counts of the last 120 s (arrivals, completed work, abandoned work, queue
 * drops) for GET /admin/series, so a load experiment can plot what the server saw over time.
 *
 * Thread-safety: lk_series_add and lk_series_json are safe from any thread (one mutex; each add
 * is a few loads and stores under it).
 */
#ifndef LINKD_SERVER_SERIES_H
#define LINKD_SERVER_SERIES_H

#include <pthread.h>
#include <stdint.h>

#define LK_SERIES_WINDOW_NS INT64_C(100000000) /* 100 ms */
#define LK_SERIES_BUCKETS 1200                 /* 120 s */

typedef enum lk_series_field {
  LK_SERIES_ARRIVALS,
  LK_SERIES_COMPLETED,
  LK_SERIES_ABANDONED,
  LK_SERIES_DROPPED,
  LK_SERIES_FIELDS
} lk_series_field;

typedef struct lk_series {
  pthread_mutex_t mu;
  int64_t start;                    /* bucket number of the first add or of init */
  int64_t epoch[LK_SERIES_BUCKETS]; /* which bucket number the slot holds; -1 = none */
  uint64_t count[LK_SERIES_BUCKETS][LK_SERIES_FIELDS];
} lk_series;

void lk_series_init(lk_series *s, int64_t now);
void lk_series_destroy(lk_series *s);
/* Adds one to the field of the bucket holding `now` (CLOCK_MONOTONIC ns, >= 0). */
void lk_series_add(lk_series *s, lk_series_field f, int64_t now);
/* {"window_ns":100000000,"buckets":[{"t_ns":..,"arrivals":..,"completed":..,"abandoned":..,
 * "dropped":..},...]}: one entry per bucket from max(init, now - 120 s) to now, oldest first,
 * as a malloc'd string; NULL on out of memory. */
char *lk_series_json(lk_series *s, int64_t now);

#endif
