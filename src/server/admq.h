/* SPDX-License-Identifier: MIT */
/* admq.h: libraryd's bounded admission queue and its disciplines, sans I/O: the caller passes the
 * time (CLOCK_MONOTONIC ns) and holds whatever lock protects the queue.
 *
 *   fifo           oldest first
 *   lifo           newest first
 *   adaptive-lifo  oldest first while the oldest has waited at most `target`; newest first while
 *                  it has waited longer, so that under overload fresh requests, whose callers are
 *                  still waiting, are served and the stale ones wait (Facebook's adaptive LIFO,
 *                  "Fail at Scale", ACM Queue 13(8), 2015)
 *   codel          oldest first, but a request that waited longer than the limit is dropped at
 *                  dequeue; the limit is `interval` while the queue has been empty within the last
 *                  `interval`, and `target` once it has not (the controlled-delay variant that the
 *                  same article describes: a standing queue is bounded to `target` of delay)
 *
 * Capacity is taken in two steps, lk_admq_reserve then lk_admq_push, so that a caller can refuse
 * a request before committing to it (libraryd suspends the connection between the two).
 *
 * Thread-safety: none; the owner serialises every call.
 */
#ifndef LINKD_SERVER_ADMQ_H
#define LINKD_SERVER_ADMQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum lk_qdisc {
  LK_QDISC_FIFO,
  LK_QDISC_LIFO,
  LK_QDISC_ADAPTIVE_LIFO,
  LK_QDISC_CODEL,
} lk_qdisc;

/* libraryd's default, chosen by the goodput experiment in docs/BENCHMARKS.md. */
#define LK_QDISC_DEFAULT LK_QDISC_CODEL

/* "fifo", "lifo", "adaptive-lifo", "codel". 0 or LK_EPARSE. */
int lk_qdisc_parse(const char *s, lk_qdisc *out);
const char *lk_qdisc_name(lk_qdisc d);

typedef struct lk_admq_slot {
  void *item;
  int64_t t; /* when it was pushed */
} lk_admq_slot;

typedef struct lk_admq {
  lk_admq_slot *ring;
  size_t cap, head, n; /* ring[head] is the oldest of n queued items */
  size_t reserved;     /* slots taken: queued + reserved but not yet pushed */
  size_t depth_max;    /* the largest `reserved` seen */
  lk_qdisc disc;
  int64_t target_ns, interval_ns;
  int64_t empty_at; /* codel: the last instant the queue was empty */
} lk_admq;

/* cap >= 1; target and interval > 0. 0, LK_EINVAL or LK_ENOMEM. */
int lk_admq_init(lk_admq *q, size_t cap, lk_qdisc d, int64_t target_ns, int64_t interval_ns,
                 int64_t now);
void lk_admq_destroy(lk_admq *q);
/* Takes a slot; false when all cap slots are taken. */
bool lk_admq_reserve(lk_admq *q);
/* Gives back a reserved slot without pushing. */
void lk_admq_unreserve(lk_admq *q);
/* Queues item in a slot taken by lk_admq_reserve. */
void lk_admq_push(lk_admq *q, void *item, int64_t now);

typedef enum lk_admq_verdict {
  LK_ADMQ_EMPTY, /* nothing queued */
  LK_ADMQ_SERVE, /* run it */
  LK_ADMQ_DROP,  /* codel: it waited too long; answer it without running it */
} lk_admq_verdict;

/* Takes the next item by the discipline and frees its slot; *item and *queued_at describe it. */
lk_admq_verdict lk_admq_pop(lk_admq *q, int64_t now, void **item, int64_t *queued_at);
/* Slots taken (queued + reserved). */
size_t lk_admq_depth(const lk_admq *q);

#endif
