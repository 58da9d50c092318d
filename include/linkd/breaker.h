/* SPDX-License-Identifier: MIT */
/* linkd/breaker.h: circuit breaker (Resilience4j's state machine).
 *
 * States and automatic transitions:
 *   CLOSED     calls pass; outcomes go into a sliding window (the last window_size calls, or the
 *              calls of the last window_size seconds in 1 s buckets). Once the window holds at
 *              least minimum_calls outcomes and the failure rate >= failure_rate_threshold or the
 *              slow-call rate >= slow_call_rate_threshold -> OPEN.
 *   OPEN       acquire fails with LK_EBREAKER_OPEN. The first acquire at or after the end of the
 *              wait (wait_open, or the backoff delay for the n-th consecutive opening) moves the
 *              breaker to HALF_OPEN and is then admitted like any HALF_OPEN acquire.
 *   HALF_OPEN  at most permitted_half_open calls are admitted (released permissions come back);
 *              rates are over permitted_half_open calls: any rate >= its threshold -> OPEN, else
 *              -> CLOSED. With half_open_decide_early (the default) the transition happens as
 *              soon as the recorded outcomes settle it whatever the remaining probes return;
 *              otherwise (Resilience4j) once all permitted outcomes are recorded. With
 *              max_wait_half_open > 0, the first acquire or record at or after that long in
 *              HALF_OPEN -> OPEN.
 * Special states, entered and left only by lk_breaker_transition() / lk_breaker_reset():
 *   DISABLED     every call admitted, nothing recorded, never transitions.
 *   FORCED_OPEN  every call rejected (counted as not permitted), never transitions.
 *   METRICS_ONLY every call admitted, outcomes recorded and rates computed, never transitions.
 * Entering CLOSED or METRICS_ONLY starts an empty window; OPEN keeps the window that tripped it
 * (for metrics); entering HALF_OPEN starts an empty half-open tally. "Consecutive openings" count
 * every entry into OPEN and reset when the breaker enters any state but OPEN and HALF_OPEN.
 *
 * Outcomes: kind LK_F_NONE is a success. A kind in `ignore` counts as nothing (in HALF_OPEN it
 * gives its permission back, as Resilience4j does); else a kind in `failures` is a failure; any
 * other kind is a success, except a kind out of range (>= LK_F__COUNT), which is a failure. A
 * call is slow when duration > slow_call_duration (failed calls can be slow too: they count in
 * both rates).
 *
 * Time is a parameter (`now`, ns, CLOCK_MONOTONIC); randomness (backoff jitter) comes from the
 * lk_rand in the config. Nothing here reads a clock. A `now` a little behind another thread's is
 * judged as usual (a TIME window counts it in its newest second). A `now` that is before the
 * start of OPEN's wait, HALF_OPEN's max wait or the TIME window by more than their length (a
 * clock that stepped back) ends the wait, or starts the window over at `now`: the breaker never
 * stays shut, or keeps outcomes, for as long as the clock went back. Every function taking an
 * lk_breaker * requires a valid, non-NULL breaker, except lk_breaker_free, lk_breaker_transition,
 * lk_breaker_reset and lk_breaker_metrics_get (which reject NULL).
 *
 * Concurrency: the breaker may be shared by any number of threads. acquire / record / release
 * are lock-free in CLOSED, OPEN, DISABLED, FORCED_OPEN and METRICS_ONLY (a few atomic operations,
 * no allocation); a small internal lock is taken for state transitions, for recording outcomes
 * in HALF_OPEN and when a time window moves to a new second; it is never held while user code
 * (the transition callback) runs. Rates are evaluated on the atomic counters, so under contention
 * a decision may see a call a moment early or late; an outcome that races with a state transition
 * counts in the state it lands in (Resilience4j's rule) or is lost.
 * The half-open admission limit is exact: use the permit functions to also make releases and
 * records exact across transitions (see lk_breaker_acquire_permit).
 */
#ifndef LINKD_BREAKER_H
#define LINKD_BREAKER_H

#include <linkd/backoff.h>
#include <linkd/common.h>
#include <linkd/failure.h>
#include <linkd/rand.h>

LK_BEGIN_DECLS

typedef struct lk_breaker lk_breaker; /* opaque, thread-safe */

typedef enum lk_breaker_state {
  LK_BREAKER_CLOSED,
  LK_BREAKER_OPEN,
  LK_BREAKER_HALF_OPEN,
  LK_BREAKER_DISABLED,
  LK_BREAKER_FORCED_OPEN,
  LK_BREAKER_METRICS_ONLY
} lk_breaker_state;

typedef enum lk_breaker_window {
  LK_BREAKER_WINDOW_COUNT, /* the last window_size recorded calls */
  LK_BREAKER_WINDOW_TIME   /* the calls recorded in the last window_size seconds (1 s buckets) */
} lk_breaker_window;

/* Called once per state transition, in transition order (the order of the period counter,
 * lk_breaker_metrics.transitions), across all threads. It is never called with a breaker lock
 * held: the transition is queued under the lock and delivered after it is released, so a slow
 * callback delays no other thread's acquire / record / release, and the callback may call any
 * function on the same breaker, lk_breaker_transition and lk_breaker_reset included (not
 * lk_breaker_free). Callbacks run one at a time, on any thread that uses the breaker: usually
 * the one whose call made the transition; while a callback runs, transitions made meanwhile (by
 * other threads, or by the callback itself) are delivered by the thread running it, right after
 * it returns. So a transition made inside the callback is never delivered inside it, and when a
 * function that transitioned returns, its callback may not have run yet (another thread may be
 * delivering it). The state change is made at once whatever happens to the callback: when the
 * callback falls more than 65536 transitions behind (or the queue of pending transitions cannot
 * grow for lack of memory), the callbacks of the transitions beyond are dropped and counted in
 * lk_breaker_metrics.transitions_undelivered (the next delivered `from` then differs from the
 * previous `to`). `now` is the time of the call that caused the transition. */
typedef void (*lk_breaker_transition_fn)(void *ctx, lk_breaker_state from, lk_breaker_state to,
                                         int64_t now);

typedef struct lk_breaker_config {
  lk_breaker_window window;        /* default COUNT */
  int window_size;                 /* calls (COUNT, [1, 1000000]) or seconds (TIME, [1, 86400]);
                                      default 100 */
  int minimum_calls;               /* >= 1; outcomes needed before rates are judged; for COUNT,
                                      values above window_size mean window_size; default 100 */
  double failure_rate_threshold;   /* percent, (0, 100]; default 50 */
  double slow_call_rate_threshold; /* percent, (0, 100]; default 100 */
  int64_t slow_call_duration;      /* ns, > 0; default 60 s */
  int64_t wait_open;               /* ns in OPEN when !wait_backoff, > 0; default 60 s */
  bool wait_backoff;               /* wait for the n-th consecutive opening =
                                      lk_backoff_delay(&backoff, n, previous wait, rng);
                                      default false */
  lk_backoff_config backoff;       /* used when wait_backoff; default
                                      lk_backoff_config_init_default() */
  lk_rand *rng;                    /* jitter for the backoff; not owned, must outlive the breaker
                                      and is used only under the breaker's lock (so no other
                                      thread may use it); NULL allowed when the jitter is NONE or
                                      !wait_backoff; default NULL */
  int permitted_half_open;         /* calls admitted in HALF_OPEN, [1, 1000000]; default 10 */
  int64_t max_wait_half_open;      /* ns, >= 0; 0 = stay until the half-open verdict is
                                      reached; default 0 */
  bool half_open_decide_early;     /* leave HALF_OPEN as soon as the outcome is certain (one slow
                                      probe then cannot hold the breaker shut while the others
                                      already decided); false = wait for every permitted call,
                                      as Resilience4j does; default true */
  uint64_t failures;               /* LK_FAILURE_BIT set of kinds that count as failures; must not
                                      contain LK_F_NONE; default lk_breaker_failures_default() */
  uint64_t ignore;                 /* LK_FAILURE_BIT set of kinds that count as nothing; wins over
                                      `failures`; must not contain LK_F_NONE; default
                                      lk_breaker_ignore_default() */
  lk_breaker_transition_fn on_transition; /* NULL for none; default NULL */
  void *on_transition_ctx;                /* passed to on_transition; not owned */
} lk_breaker_config;

/* Every kind except LK_F_NONE, CLIENT_4XX, HTTP_425 and KEY_IN_USE (the server answered: not its
 * fault) and the ignored defaults below. 408 counts: the server is slow. */
LK_EXPORT uint64_t lk_breaker_failures_default(void);
/* Kinds that say nothing about the downstream's health: CANCELLED, BREAKER_OPEN,
 * BUDGET_EXHAUSTED, RATE_LIMITED, BULKHEAD_FULL (never reached it), and TOO_MANY_REQUESTS: a 429 is
 * the server's deliberate per-client refusal with its own back-off instruction (Retry-After, which
 * the retry policy honours); counting it would open the breaker on a healthy server that is
 * throttling one caller. */
LK_EXPORT uint64_t lk_breaker_ignore_default(void);

/* Sets every field to its default (Resilience4j's defaults; listed with the fields). */
LK_EXPORT void lk_breaker_config_init_default(lk_breaker_config *c);
/* LK_OK, or LK_ECONFIG with *why (if non-NULL) set to a static message naming the bad field. */
LK_EXPORT int lk_breaker_config_validate(const lk_breaker_config *c, const char **why);

/* Validates `c` (copied; rng and ctx pointers are kept, not owned) and stores a new breaker in
 * CLOSED in *out. LK_OK, LK_ECONFIG (*why set), LK_EINVAL (NULL c or out) or LK_ENOMEM; *out is
 * NULL on failure. */
LK_EXPORT int lk_breaker_new(const lk_breaker_config *c, lk_breaker **out, const char **why);
/* Frees the breaker; NULL is a no-op. No other thread may be using it. */
LK_EXPORT void lk_breaker_free(lk_breaker *b);

/* Declares that from now on one thread at a time acquires, records, releases and transitions b
 * (the breaker of one event loop, a simulator's): its window and counters are then updated with
 * plain loads and stores instead of atomic read-modify-writes, and a window finds its slot or
 * bucket without a division, with the same results. Reading it (lk_breaker_get_state,
 * lk_breaker_metrics_get, lk_breaker_retry_at) stays safe from any thread. Call it before b is
 * shared with another thread, never while another thread uses it; it cannot be undone. NULL is
 * a no-op. */
LK_EXPORT void lk_breaker_set_single_thread(lk_breaker *b);

/* --- acquire / record ------------------------------------------------------------------------ */

/* Asks permission for one call at `now`. LK_OK: make the call, then report it with exactly one
 * lk_breaker_record or lk_breaker_release. LK_EBREAKER_OPEN: do not make the call (OPEN,
 * FORCED_OPEN, or HALF_OPEN with all permissions taken); never retry on it. May move OPEN ->
 * HALF_OPEN or HALF_OPEN -> OPEN (see above). */
LK_EXPORT int lk_breaker_acquire(lk_breaker *b, int64_t now);
/* Records the outcome of an admitted call that ended at `now` after `duration` ns (negative
 * counts as 0); kind LK_F_NONE = success. Counts in the current state; may transition. */
LK_EXPORT void lk_breaker_record(lk_breaker *b, int64_t now, int64_t duration, lk_failure kind);
/* Gives back a permission that was acquired but not used (no call was made). Only HALF_OPEN
 * counts permissions: it gets one back (never more than permitted_half_open). */
LK_EXPORT void lk_breaker_release(lk_breaker *b);

/* A permission tied to the state period it was granted in. Filled by lk_breaker_acquire_permit;
 * pass it back unchanged. */
typedef struct lk_breaker_permit {
  uint64_t period;        /* transitions the breaker had made when the permit was granted */
  lk_breaker_state state; /* the state it was granted in */
} lk_breaker_permit;

/* lk_breaker_acquire that also fills *p (on LK_OK). With the permit, a release or record is
 * counted only in the state period that granted it: releasing gives a permission back only to the
 * HALF_OPEN period that granted it, a call admitted in HALF_OPEN is recorded in HALF_OPEN only in
 * that same period, a call admitted outside HALF_OPEN is never counted as a half-open probe, and
 * a call admitted before a transition (a reset, a trip and recovery) is not counted in the fresh
 * window that followed it. */
LK_EXPORT int lk_breaker_acquire_permit(lk_breaker *b, int64_t now, lk_breaker_permit *p);
/* lk_breaker_record for the call that got *p (p not NULL), with the rules above. */
LK_EXPORT void lk_breaker_record_permit(lk_breaker *b, const lk_breaker_permit *p, int64_t now,
                                        int64_t duration, lk_failure kind);
/* lk_breaker_release for the call that got *p (p not NULL), with the rules above. */
LK_EXPORT void lk_breaker_release_permit(lk_breaker *b, const lk_breaker_permit *p);

/* --- manual control --------------------------------------------------------------------------- */

/* Moves the breaker to `to` at `now` (any state, including the current one, which restarts it:
 * a fresh window / half-open tally / wait). Fires the callback. LK_OK or LK_EINVAL (bad state). */
LK_EXPORT int lk_breaker_transition(lk_breaker *b, lk_breaker_state to, int64_t now);
/* Back to CLOSED with an empty window, consecutive openings and the not-permitted count at 0.
 * Fires the callback (from the current state to CLOSED). */
LK_EXPORT void lk_breaker_reset(lk_breaker *b, int64_t now);

/* --- queries ----------------------------------------------------------------------------------- */

typedef struct lk_breaker_metrics {
  lk_breaker_state state;
  int64_t calls;          /* outcomes in the current window (the half-open tally in HALF_OPEN) */
  int64_t failed;         /* of which failures */
  int64_t slow;           /* of which slow (failed or not) */
  double failure_rate;    /* percent; -1 while calls < minimum (in HALF_OPEN: < permitted) */
  double slow_call_rate;  /* percent; -1 likewise */
  uint64_t not_permitted; /* acquires refused since creation or the last reset */
  uint64_t transitions;   /* state transitions since creation */
  uint64_t transitions_undelivered; /* transitions whose callback was dropped (see
                                       lk_breaker_transition_fn); 0 while callbacks keep up */
  int openings;                     /* consecutive openings (the n of the backoff) */
  int64_t open_until;               /* OPEN: when the next acquire may move to HALF_OPEN; else 0 */
  int half_open_left;               /* HALF_OPEN: permissions not taken; else 0 */
} lk_breaker_metrics;

/* When an acquire could next be admitted, as of `now` (lock-free, read-only):
 *   now                        it could be admitted now (CLOSED, DISABLED, METRICS_ONLY, HALF_OPEN
 *                              with permissions left, OPEN whose wait has ended)
 *   a later time               OPEN: the end of the wait, when the next acquire becomes a probe;
 *                              HALF_OPEN without permissions but with max_wait_half_open: its end
 *   LK_BREAKER_RETRY_UNKNOWN   HALF_OPEN without permissions: when a probe's outcome is recorded
 *   INT64_MAX                  FORCED_OPEN: not until someone transitions it
 * A caller with time to spare can wait until then instead of failing at once (the breaker still
 * admits only its probes, so waiting adds no load); another thread may be admitted first. */
#define LK_BREAKER_RETRY_UNKNOWN INT64_C(-1)
LK_EXPORT int64_t lk_breaker_retry_at(const lk_breaker *b, int64_t now);

/* The current state (one atomic load). */
LK_EXPORT lk_breaker_state lk_breaker_get_state(const lk_breaker *b);
/* Fills *out. A time window is judged as of `now` without being modified. LK_OK or LK_EINVAL.
 * Lock-free; a snapshot of values other threads keep updating. */
LK_EXPORT int lk_breaker_metrics_get(const lk_breaker *b, int64_t now, lk_breaker_metrics *out);
/* "CLOSED", "OPEN", "HALF_OPEN", "DISABLED", "FORCED_OPEN", "METRICS_ONLY" ("UNKNOWN" else). */
LK_EXPORT const char *lk_breaker_state_name(lk_breaker_state s);
/* Parses a state name (case-insensitive, '-' accepted for '_'). LK_OK or LK_EINVAL. */
LK_EXPORT int lk_breaker_state_parse(const char *s, lk_breaker_state *out);

LK_END_DECLS

#endif
