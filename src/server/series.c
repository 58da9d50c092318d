/* SPDX-License-Identifier: MIT */
/* series.c: a ring of 100 ms buckets, each tagged with the bucket number it holds so that stale
 * slots read as zero without a sweeper. */
#include "series.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lk_series_init(lk_series *s, int64_t now) {
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  for (int i = 0; i < LK_SERIES_BUCKETS; i++)
    s->epoch[i] = -1;
  s->start = now / LK_SERIES_WINDOW_NS;
}

void lk_series_destroy(lk_series *s) { pthread_mutex_destroy(&s->mu); }

void lk_series_add(lk_series *s, lk_series_field f, int64_t now) {
  int64_t b = now / LK_SERIES_WINDOW_NS;
  int i = (int)(b % LK_SERIES_BUCKETS);
  pthread_mutex_lock(&s->mu);
  if (s->epoch[i] != b) {
    if (s->epoch[i] > b) { /* a late add for a bucket already recycled: drop it */
      pthread_mutex_unlock(&s->mu);
      return;
    }
    s->epoch[i] = b;
    memset(s->count[i], 0, sizeof s->count[i]);
  }
  s->count[i][f]++;
  pthread_mutex_unlock(&s->mu);
}

char *lk_series_json(lk_series *s, int64_t now) {
  int64_t last = now / LK_SERIES_WINDOW_NS;
  pthread_mutex_lock(&s->mu);
  int64_t first = last - (LK_SERIES_BUCKETS - 1);
  if (first < s->start)
    first = s->start;
  size_t cap = 64 + (size_t)(last - first + 1) * 192, len = 0;
  char *out = malloc(cap);
  if (!out) {
    pthread_mutex_unlock(&s->mu);
    return NULL;
  }
  len += (size_t)snprintf(out, cap, "{\"window_ns\":%lld,\"buckets\":[",
                          (long long)LK_SERIES_WINDOW_NS);
  for (int64_t b = first; b <= last; b++) {
    int i = (int)(b % LK_SERIES_BUCKETS);
    uint64_t c[LK_SERIES_FIELDS] = {0};
    if (s->epoch[i] == b)
      memcpy(c, s->count[i], sizeof c);
    /* 192 bytes per entry hold the longest one (five 20-digit numbers and the keys: 158). */
    len += (size_t)snprintf(
        out + len, cap - len,
        "%s{\"t_ns\":%lld,\"arrivals\":%llu,\"completed\":%llu,"
        "\"abandoned\":%llu,\"dropped\":%llu}",
        b == first ? "" : ",", (long long)(b * LK_SERIES_WINDOW_NS),
        (unsigned long long)c[LK_SERIES_ARRIVALS], (unsigned long long)c[LK_SERIES_COMPLETED],
        (unsigned long long)c[LK_SERIES_ABANDONED], (unsigned long long)c[LK_SERIES_DROPPED]);
  }
  pthread_mutex_unlock(&s->mu);
  snprintf(out + len, cap - len, "]}");
  return out;
}
