/* SPDX-License-Identifier: MIT */
/* Internal layout of lk_breaker, shared by breaker.c (state machine) and breaker_window.c (the
 * sliding windows of the CLOSED / METRICS_ONLY states). */
#ifndef LINKD_BREAKER_INTERNAL_H
#define LINKD_BREAKER_INTERNAL_H

#include <linkd/breaker.h>

#include "st_atomic.h"

#include <pthread.h>
#include <stdatomic.h>

#define LK_BK_LINE 64

/* The state word: period (transitions so far) << 3 | state. Every transition makes a new period,
 * so a CAS-free "is this still the state I saw" check is one comparison. */
#define LK_BK_STATE(w) ((lk_breaker_state)((w)&7u))
#define LK_BK_PERIOD(w) ((w) >> 3)
#define LK_BK_WORD(period, st) (((uint64_t)(period) << 3) | (uint64_t)(st))

/* Outcome bits of one call. */
#define LK_BK_FAIL 1u
#define LK_BK_SLOW 2u

/* The half-open permission word: low 40 bits of the period << 24 | permissions left. */
#define LK_BK_LEFT_BITS 24
#define LK_BK_LEFT_MASK ((UINT64_C(1) << LK_BK_LEFT_BITS) - 1)
#define LK_BK_TAG_MASK ((UINT64_C(1) << 40) - 1)

#define LK_BK_EMPTY INT64_MIN /* time window: no head second yet */

/* A transition waiting for its callback. */
typedef struct lk_bk_event {
  int64_t now;
  lk_breaker_state from, to;
} lk_bk_event;

/* Pending callbacks: the queue starts with LK_BK_QUEUE_INIT slots (allocated with the breaker, so
 * the call path never allocates while callbacks keep up) and doubles up to LK_BK_QUEUE_MAX, which
 * bounds the memory a stalled callback can make the breaker hold (1 MiB). */
#define LK_BK_QUEUE_INIT 16u
#define LK_BK_QUEUE_MAX 65536u

typedef struct lk_bk_tally {
  int64_t calls, failed, slow;
} lk_bk_tally;

/* One second of a time window. */
typedef struct lk_bk_bucket {
  _Atomic int64_t calls, failed, slow;
} lk_bk_bucket;

struct lk_breaker {
  /* Read on every call, written only on transitions. */
  _Alignas(LK_BK_LINE) _Atomic uint64_t state;
  _Atomic int64_t open_until; /* OPEN: end of the wait */
  _Atomic int64_t open_since; /* OPEN: when it was entered (a clock that steps back, see
                                 breaker.c: elapsed) */
  _Atomic int64_t ho_since;   /* HALF_OPEN: when it was entered */

  /* Configuration, immutable after construction. */
  lk_breaker_window wkind;
  int n;                   /* window size: calls or seconds */
  int min_calls;           /* effective minimum */
  int permitted;           /* HALF_OPEN permissions */
  int64_t fail_ppm;        /* failure-rate threshold, parts per million */
  int64_t slow_ppm;        /* slow-call-rate threshold, parts per million */
  int64_t slow_ns;         /* slower than this is slow */
  int64_t wait_open;       /* fixed wait in OPEN */
  int64_t max_wait_ho;     /* 0 = none */
  bool decide_early;       /* half_open_decide_early */
  bool st;                 /* lk_breaker_set_single_thread: no atomic read-modify-writes */
  uint64_t failures, ignore;
  bool wait_backoff;
  lk_backoff_config backoff;
  lk_rand *rng;
  lk_breaker_transition_fn on_transition;
  void *on_transition_ctx;

  /* COUNT window: records this period, the packed failed/slow totals, and the ring of outcomes
   * (period << 2 | outcome bits: a slot written in an earlier period counts as empty). */
  _Alignas(LK_BK_LINE) _Atomic uint64_t seq;
  uint32_t cursor; /* single-threaded: seq % n, kept instead of divided */
  _Alignas(LK_BK_LINE) _Atomic uint64_t totals; /* tag 16 | failed 24 | slow 24 (signed) */
  _Atomic uint64_t *slots;

  /* TIME window: a seqlock-published snapshot {head second, sums of the completed seconds still
   * in the window}, and one bucket per second. */
  _Alignas(LK_BK_LINE) _Atomic uint64_t tseq;
  _Atomic int64_t thead, tcalls, tfailed, tslow;
  lk_bk_bucket *buckets;
  /* Single-threaded: the snapshot as last read and the head's bucket, so a record skips the
   * seqlock and the division that finds the bucket. Only a record past st_head moves the head,
   * and it takes the long way and refreshes these; a reset empties them (LK_BK_EMPTY: none). */
  int64_t st_head;
  lk_bk_tally st_agg;
  lk_bk_bucket *st_bucket;

  /* HALF_OPEN: permissions (lock-free) and the tally (written under mu). */
  _Alignas(LK_BK_LINE) _Atomic uint64_t permits;
  _Atomic int64_t ho_calls, ho_failed, ho_slow;

  _Alignas(LK_BK_LINE) _Atomic uint64_t not_permitted;

  /* Transitions, half-open records and time-window rollover. */
  _Alignas(LK_BK_LINE) pthread_mutex_t mu;
  _Atomic int openings; /* written under mu */
  int64_t last_wait;    /* under mu: the previous backoff delay */
  /* Transitions whose callback is pending, in transition order (a ring, under mu). */
  lk_bk_event *queue;
  uint32_t qcap, qhead, qlen;
  _Atomic uint64_t undelivered; /* callbacks dropped: the queue was full or could not grow */

  /* Held by the one thread that delivers queued callbacks; never held together with mu. */
  _Alignas(LK_BK_LINE) pthread_mutex_t dispatch_mu;
};

/* Starts an empty window for `period` (caller holds mu). */
void lk__bk_window_reset(lk_breaker *b, uint64_t period);
/* Adds one outcome to the window of `period` at `now`. Returns true and fills *after when the
 * window's rates may have changed (false: nothing to evaluate, or the record was stale). */
bool lk__bk_window_record(lk_breaker *b, uint64_t period, int64_t now, unsigned outcome,
                          lk_bk_tally *after);
/* The window's content as of `now`, read-only. */
void lk__bk_window_tally(const lk_breaker *b, int64_t now, lk_bk_tally *out);

#endif
