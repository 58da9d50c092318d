/* SPDX-License-Identifier: MIT */
/* linkd/bulkhead.h: a bulkhead (bounded concurrency) with a bounded FIFO wait queue.
 *
 * At most `max_concurrent` slots are in use at once. A caller that finds no free slot either gives
 * up at once (lk_bulkhead_try_acquire()) or queues behind at most `max_queue` other waiters, in
 * strict arrival order, until a slot is handed to it or its deadline passes: blocking
 * (lk_bulkhead_acquire()) or, for event loops, without blocking (lk_bulkhead_enqueue(), told by a
 * callback). Freed slots go to the head of the queue first: while anyone waits,
 * try_acquire refuses, so non-blocking callers never overtake queued ones.
 *
 * In-use count, queue length and limit share one 64-bit atomic word, so try_acquire and release
 * are a single compare-and-swap when nobody waits (no lock, no allocation), and the limit is
 * never exceeded even while it is changed at run time: after lk_bulkhead_set_max() lowers it,
 * no slot is granted until enough are released. Each field holds up to LK_BULKHEAD_LIMIT_MAX.
 * A blocking waiter sleeps on its own condition variable (in its stack frame, no allocation)
 * with pthread_cond_timedwait on CLOCK_MONOTONIC.
 *
 * Every function taking an lk_bulkhead * needs a valid one, except lk_bulkhead_free (NULL: no-op),
 * lk_bulkhead_enqueue and lk_bulkhead_set_max (LK_EINVAL).
 *
 * Thread-safety: an lk_bulkhead is safe to use from any number of threads at once; only
 * lk_bulkhead_free() needs exclusive use (no thread may be waiting in it).
 */
#ifndef LINKD_BULKHEAD_H
#define LINKD_BULKHEAD_H

#include <linkd/clock.h>
#include <linkd/common.h>
#include <linkd/deadline.h>

LK_BEGIN_DECLS

#define LK_BULKHEAD_LIMIT_MAX INT64_C(2097151) /* 2^21 - 1: each packed field is 21 bits */

typedef struct lk_bulkhead_config {
  int64_t max_concurrent; /* slots, in [1, LK_BULKHEAD_LIMIT_MAX]; default 25 */
  int64_t max_queue;      /* waiters, in [0, LK_BULKHEAD_LIMIT_MAX]; 0 = never wait; default 50 */
} lk_bulkhead_config;

typedef struct lk_bulkhead lk_bulkhead; /* opaque */

/* Counters for metrics. Wait times are measured on the clock passed to lk_bulkhead_acquire();
 * non-blocking waits (lk_bulkhead_enqueue) are counted in `waited` but timed by their caller. */
typedef struct lk_bulkhead_stats {
  int64_t in_use;             /* slots held now */
  int64_t queue_depth;        /* callers waiting now */
  int64_t max_concurrent;     /* the current limit */
  uint64_t waited;            /* acquire and enqueue calls that queued (whatever the outcome) */
  uint64_t rejected_full;     /* refused: no slot and (blocking) queue full / (try) no slot */
  uint64_t rejected_deadline; /* blocking acquires whose deadline passed before a slot came */
  int64_t wait_total_ns;      /* sum of queued time over all `waited` calls (saturating) */
  int64_t wait_last_ns;       /* queued time of the most recent waiting call to finish */
} lk_bulkhead_stats;

/* Sets every field to its default (25 slots, 50 waiters). */
LK_EXPORT void lk_bulkhead_config_init_default(lk_bulkhead_config *c);
/* LK_OK, or LK_ECONFIG with *why (if non-NULL) set to a static message (NULL on success). */
LK_EXPORT int lk_bulkhead_config_validate(const lk_bulkhead_config *c, const char **why);

/* Creates a bulkhead with all slots free. On success stores it in *out (free with
 * lk_bulkhead_free()) and returns LK_OK; otherwise LK_ECONFIG (with *why), LK_EINVAL (c or out
 * NULL), LK_ENOMEM or LK_ESYS (condition-variable attributes unavailable); *out is then NULL. */
LK_EXPORT int lk_bulkhead_new(const lk_bulkhead_config *c, lk_bulkhead **out, const char **why);
/* Frees the bulkhead. NULL is a no-op. No thread may be using it or waiting in it. */
LK_EXPORT void lk_bulkhead_free(lk_bulkhead *b);

/* Takes a slot without waiting: LK_OK, or LK_EBULKHEAD_FULL when all slots are in use or others
 * are queued. Lock-free; no allocation. Pair every LK_OK with one lk_bulkhead_release(). */
LK_EXPORT int lk_bulkhead_try_acquire(lk_bulkhead *b);

/* Takes a slot, waiting in FIFO order if none is free. A free slot (with nobody queued) is taken
 * at once without reading the clock, even when the deadline has passed; otherwise the caller
 * queues for at most the time the deadline leaves on `clock` (NULL = lk_clock_system()),
 * converted once into a CLOCK_MONOTONIC timeout. Returns LK_OK (slot held; release it later),
 * LK_EBULKHEAD_FULL (the queue already holds max_queue waiters; returned at once), or
 * LK_EDEADLINE (the deadline had passed or passed while queued; nothing held), or LK_ESYS (the
 * condition variable could not be set up; not seen on glibc). No allocation; blocks the calling
 * thread. */
LK_EXPORT int lk_bulkhead_acquire(lk_bulkhead *b, const lk_clock *clock, lk_deadline deadline);

/* --- non-blocking waiting (event loops) --------------------------------------------------------
 * A caller that must not block joins the same FIFO queue as blocking acquirers and is told when a
 * slot has been handed to it. The caller owns the storage (no allocation); it must stay valid
 * and unmoved from lk_bulkhead_enqueue() until the wait ends: granted and seen by
 * lk_bulkhead_waiter_granted(), or lk_bulkhead_waiter_cancel(). Time stays with the caller: it
 * arms its own timer for its deadline and cancels the wait when it fires. */
typedef struct lk_bulkhead_waiter {
  union { /* a union, not _Alignas: the header stays valid C99 and C++ */
    void *align_p_;
    int64_t align_i_;
    unsigned char opaque_[48];
  } u_;
} lk_bulkhead_waiter;

/* Takes a free slot at once when nobody is queued (LK_OK: slot held), or queues `w` behind every
 * waiter already queued, blocking or not (LK_EAGAIN), or returns LK_EBULKHEAD_FULL when
 * max_queue callers wait already (nothing queued). Once a slot is handed to a queued `w`,
 * notify(ud) runs on the releasing thread with the bulkhead's lock held: it must only signal
 * (write an eventfd, set a flag) and must not call back into the bulkhead. LK_EINVAL for a NULL
 * argument. No allocation. */
LK_EXPORT int lk_bulkhead_enqueue(lk_bulkhead *b, lk_bulkhead_waiter *w, void (*notify)(void *ud),
                                  void *ud);
/* Whether a slot has been handed to the queued `w` (the caller then holds it and releases it
 * with lk_bulkhead_release()). Takes the bulkhead's lock briefly. */
LK_EXPORT bool lk_bulkhead_waiter_granted(lk_bulkhead *b, lk_bulkhead_waiter *w);
/* Ends a wait: leaves the queue if `w` is still in it. Returns true when nothing is held, false
 * when a slot had been handed to `w`, whether or not lk_bulkhead_waiter_granted() saw it: the
 * caller holds it and must release it. A second call returns true. */
LK_EXPORT bool lk_bulkhead_waiter_cancel(lk_bulkhead *b, lk_bulkhead_waiter *w);

/* Gives back a slot taken by either acquire. If anyone is queued, the slot passes straight to
 * the longest waiter (when the limit allows). A release without a held slot is a caller bug;
 * the count never goes below 0. */
LK_EXPORT void lk_bulkhead_release(lk_bulkhead *b);

/* Changes the limit at run time (used by lk_adaptive to drive it). Raising it hands the new
 * slots to queued waiters at once; lowering it lets current holders finish and grants nothing
 * until in-use falls below the new limit. LK_OK or LK_EINVAL (max outside
 * [1, LK_BULKHEAD_LIMIT_MAX] or b NULL). */
LK_EXPORT int lk_bulkhead_set_max(lk_bulkhead *b, int64_t max_concurrent);

/* Lock-free snapshots, for metrics. */
LK_EXPORT int64_t lk_bulkhead_max(const lk_bulkhead *b);
LK_EXPORT int64_t lk_bulkhead_in_use(const lk_bulkhead *b);
LK_EXPORT int64_t lk_bulkhead_queue_depth(const lk_bulkhead *b);
/* Fills *out with a snapshot of every counter (fields read one by one, each exact). */
LK_EXPORT void lk_bulkhead_get_stats(const lk_bulkhead *b, lk_bulkhead_stats *out);

LK_END_DECLS

#endif
