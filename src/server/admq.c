/* SPDX-License-Identifier: MIT */
/* admq.c: a ring buffer that can be taken from either end. */
#include "admq.h"

#include <linkd/error.h>

#include <stdlib.h>
#include <string.h>

static const char *const names[] = {
    [LK_QDISC_FIFO] = "fifo",
    [LK_QDISC_LIFO] = "lifo",
    [LK_QDISC_ADAPTIVE_LIFO] = "adaptive-lifo",
    [LK_QDISC_CODEL] = "codel",
};

int lk_qdisc_parse(const char *s, lk_qdisc *out) {
  for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++) {
    if (!strcmp(s, names[i])) {
      *out = (lk_qdisc)i;
      return LK_OK;
    }
  }
  return LK_EPARSE;
}

const char *lk_qdisc_name(lk_qdisc d) {
  return (size_t)d < sizeof names / sizeof names[0] ? names[d] : "unknown";
}

int lk_admq_init(lk_admq *q, size_t cap, lk_qdisc d, int64_t target_ns, int64_t interval_ns,
                 int64_t now) {
  memset(q, 0, sizeof *q);
  if (cap == 0 || cap > SIZE_MAX / sizeof *q->ring || target_ns <= 0 || interval_ns <= 0)
    return LK_EINVAL;
  q->ring = calloc(cap, sizeof *q->ring);
  if (!q->ring)
    return LK_ENOMEM;
  q->cap = cap;
  q->disc = d;
  q->target_ns = target_ns;
  q->interval_ns = interval_ns;
  q->empty_at = now;
  return LK_OK;
}

void lk_admq_destroy(lk_admq *q) {
  free(q->ring);
  memset(q, 0, sizeof *q);
}

bool lk_admq_reserve(lk_admq *q) {
  if (q->reserved >= q->cap)
    return false;
  q->reserved++;
  if (q->reserved > q->depth_max)
    q->depth_max = q->reserved;
  return true;
}

void lk_admq_unreserve(lk_admq *q) {
  if (q->reserved > q->n)
    q->reserved--;
}

void lk_admq_push(lk_admq *q, void *item, int64_t now) {
  if (q->n == 0)
    q->empty_at = now; /* empty until this instant */
  q->ring[(q->head + q->n) % q->cap] = (lk_admq_slot){item, now};
  q->n++;
}

static int64_t waited(int64_t now, int64_t t) { return now > t ? now - t : 0; }

lk_admq_verdict lk_admq_pop(lk_admq *q, int64_t now, void **item, int64_t *queued_at) {
  if (q->n == 0)
    return LK_ADMQ_EMPTY;
  const lk_admq_slot *oldest = &q->ring[q->head];
  bool newest = q->disc == LK_QDISC_LIFO ||
                (q->disc == LK_QDISC_ADAPTIVE_LIFO && waited(now, oldest->t) > q->target_ns);
  lk_admq_slot s;
  if (newest) {
    s = q->ring[(q->head + q->n - 1) % q->cap];
  } else {
    s = *oldest;
    q->head = (q->head + 1) % q->cap;
  }
  q->n--;
  q->reserved--;
  lk_admq_verdict v = LK_ADMQ_SERVE;
  if (q->disc == LK_QDISC_CODEL) {
    /* The standing-queue test uses the state before this pop: had the queue been empty within
     * the last interval? */
    int64_t limit = waited(now, q->empty_at) > q->interval_ns ? q->target_ns : q->interval_ns;
    if (waited(now, s.t) > limit)
      v = LK_ADMQ_DROP;
  }
  if (q->n == 0)
    q->empty_at = now;
  *item = s.item;
  *queued_at = s.t;
  return v;
}

size_t lk_admq_depth(const lk_admq *q) { return q->reserved; }
