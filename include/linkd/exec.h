/* SPDX-License-Identifier: MIT */
/* linkd/exec.h: any operation under the policy (a database query, a cache command, an RPC).
 *
 * The caller supplies a function that performs ONE attempt and says how it ended; the executor
 * runs it under the same deadline, retry decision, retry budget, breaker, rate limiter,
 * bulkhead, call metrics and timeline as the HTTP driver's calls, in the same fixed order
 * (DESIGN.md section 2, docs/exec.md):
 *
 *   deadline = now + policy.deadline (or policy.deadline_at if earlier), fixed once
 *   the budget hears of one request; CALL_START
 *   for each attempt:
 *     cancelled?                                                     -> LK_ECANCELED
 *     no attempt starts once the deadline has passed                 -> LK_EDEADLINE
 *     bulkhead slot  (FIFO wait <= min(pool_timeout, remaining))     -> LK_EBULKHEAD_FULL, final
 *     rate limiter   (token; wait <= remaining - retry min_attempt)  -> LK_ERATE_LIMITED, final
 *     breaker allow? (with breaker_wait: wait for its next probe)    -> LK_EBREAKER_OPEN, final
 *     attempt timeout = min(attempt_timeout, remaining); ATTEMPT_START
 *     the operation runs and reports an lk_exec_outcome; ATTEMPT_END
 *     record into breaker (BREAKER_TRANSITION if it moved), budget, call metrics, the timeline;
 *       release the bulkhead slot
 *     decide with lk_retry_decide (Retry-After honoured, capped); a retry also needs a budget
 *       token (BUDGET_REFUSED); the delay must end before the deadline; RETRY_SCHEDULED
 *     wait the delay (cancellable)
 *   a call that failed for good goes to the fallback, if any (FALLBACK)
 *   CALL_END
 *
 * Classifying. The operation maps its errors onto lk_failure kinds and says whether the request
 * was sent: "connection refused" is LK_F_CONNECT_REFUSED (never sent: any operation may
 * retry), "connection reset before the statement was written" LK_F_RESET_BEFORE_SEND, "the
 * server answered with an error after the statement was sent" LK_F_SERVER_5XX with sent = true
 * (retried only when policy.idempotent), "the server says no and will keep saying it" (a syntax
 * error) LK_F_CLIENT_4XX. The retry rules of retry.h then apply unchanged: a MAYBE_PROCESSED
 * kind is retried only if the request was not sent or the operation is idempotent.
 *
 * Two ways to run a call:
 *  - lk_exec_run(): synchronous, on the calling thread. The attempt function is called there;
 *    delays and waits sleep on policy.sleep (default: a condition variable on CLOCK_MONOTONIC,
 *    woken early by a bulkhead grant or by the cancel token firing).
 *  - lk_exec_start(): asynchronous, for callers with their own event loop. The executor asks the
 *    loop to start an attempt (lk_exec_loop.start) and is told when it ends
 *    (lk_exec_attempt_end); it asks for one timer per call (lk_exec_loop.timer, the same model as
 *    the HTTP driver's timer_fn) and is told when it fires (lk_exec_timer). The result arrives
 *    through a completion callback.
 *
 * Threading. A call belongs to one thread at a time (the loop's); the shared protections are
 * thread-safe. lk_cancel_fire() is safe from any thread. Callbacks (attempt, events, fallback,
 * loop hooks except `wake`) run on the call's thread, never with a library lock held.
 *
 * Re-entrancy. A synchronous attempt function may run calls of its own (a nested lk_exec_run
 * on the same thread is a call of its own; one that waits for a bulkhead slot its caller holds
 * waits at most its pool_timeout) and fire the token. An asynchronous call's hooks and callbacks
 * (start, timer, expire, on_event, fallback, done) may call lk_exec_attempt_end, lk_exec_timer
 * and lk_exec_abort on their own call: what they ask for is recorded and carried out once the
 * step in progress is over, before the outermost lk_exec_* function returns — never in the
 * middle of a step. From the fallback, the CALL_END event, the final loop.timer(-1) and done the
 * call is over: those calls return LK_ESTATE. `wake` must only signal its loop.
 *
 * Deadline accounting. No attempt starts after the deadline, an attempt's timeout ends by it,
 * and no wait (bulkhead, limiter, breaker probe, backoff, Retry-After) lasts past it, so
 * `elapsed` is at most the deadline when every attempt keeps to its timeout: to the nanosecond
 * with a fake clock and a sleep that does not oversleep, plus the wake-up latency of a real
 * wait otherwise. The executor cannot stop an attempt: one that overruns its timeout is recorded
 * as it reports (a late success is a success), and no attempt follows it once the deadline has
 * passed, so `elapsed` exceeds the deadline by the overrun of the last attempt at most.
 *
 * Time and randomness. Every time is read from policy.clock and every random draw (backoff
 * jitter, trace span ids) comes from policy.rng, so a test with a fake clock, a fake sleep and
 * a seeded generator replays a call exactly.
 *
 * Memory. lk_exec_run() does not allocate (the timeline goes into the caller's array);
 * lk_exec_start() allocates the call once.
 */
#ifndef LINKD_EXEC_H
#define LINKD_EXEC_H

#include <linkd/adaptive.h>
#include <linkd/breaker.h>
#include <linkd/budget.h>
#include <linkd/bulkhead.h>
#include <linkd/callmetrics.h>
#include <linkd/clock.h>
#include <linkd/common.h>
#include <linkd/deadline.h>
#include <linkd/error.h>
#include <linkd/event.h>
#include <linkd/failure.h>
#include <linkd/limiter.h>
#include <linkd/rand.h>
#include <linkd/retry.h>

LK_BEGIN_DECLS

/* ============================================================================================
 * Cancellation
 * ========================================================================================== */

/* A cancellation token, shareable by many calls (like a context). Firing it ends every call that
 * uses it, with LK_ECANCELED and failure LK_F_CANCELLED: a call not yet started runs no attempt;
 * a synchronous call waiting for a backoff, a bulkhead slot, a limiter token or the breaker's
 * probe wakes at once (unless policy.sleep replaces the wait), giving back its place in the
 * bulkhead queue (a reserved limiter token cannot be given back); an attempt in progress sees it
 * through lk_cancel_fired() (the attempt function should poll it or hand it to its own I/O) and
 * the call ends after it returns — unless that attempt succeeded: the work is done, the call
 * ends LK_OK. A cancelled attempt's failure is not recorded in the breaker (its permit is given
 * back), the budget or the adaptive limit. The fallback, if any, is still called (a cancel is a
 * failure for good, as for HTTP calls). An asynchronous call sees the token at its next step
 * (its timer or attempt end); call lk_exec_abort() to end it at once. Firing twice is harmless.
 * Thread-safety: fire and fired are safe from any thread (not from signal handlers: fire takes
 * a mutex to wake sleepers); free only when no call uses the token. */
typedef struct lk_cancel lk_cancel;

/* A new, unfired token, or NULL on no memory. */
LK_EXPORT lk_cancel *lk_cancel_new(void);
/* Fires the token (idempotent). NULL is a no-op. */
LK_EXPORT void lk_cancel_fire(lk_cancel *c);
/* Whether the token has fired (false for NULL). */
LK_EXPORT bool lk_cancel_fired(const lk_cancel *c);
/* Frees the token. NULL is a no-op. */
LK_EXPORT void lk_cancel_free(lk_cancel *c);

/* ============================================================================================
 * One attempt
 * ========================================================================================== */

/* What the operation is given for one attempt. */
typedef struct lk_exec_attempt {
  int number;          /* 1-based */
  int64_t timeout;     /* ns: min(attempt_timeout, remaining); the operation must not run longer
                          (libpq: connect_timeout / statement_timeout; hiredis: redisSetTimeout) */
  int64_t end_at;      /* the same as an instant on policy.clock */
  int64_t remaining;   /* ns left before the call's deadline */
  lk_cancel *cancel;   /* the call's token, or NULL */
  const lk_traceparent *traceparent; /* this attempt's own span (a child of policy.traceparent,
                                        new span id per attempt), or NULL when none was given */
} lk_exec_attempt;

/* How one attempt ended, filled by the operation. */
typedef struct lk_exec_outcome {
  lk_failure failure;  /* LK_F_NONE = success. A kind outside the enum counts as TRANSPORT_ERROR
                          with sent = true, whatever `sent` says (the most cautious failure).
                          TERMINAL kinds are the executor's own; reported by the operation they
                          end the call: DEADLINE_EXCEEDED as LK_EDEADLINE, the others (CANCELLED
                          without the token firing, BREAKER_OPEN, ...) as LK_ENOTRETRYABLE */
  bool sent;           /* the request (statement, command) was sent in full, so the server may
                          have acted on it; false = it cannot have (e.g. connect refused) */
  int64_t retry_after; /* ns the server asked to wait before the next attempt; < 0 (any negative
                          value) if none. Cut to retry.retry_after_cap; a wait that would not end
                          before the deadline ends the call at once with LK_EDEADLINE
                          ("Retry-After Xms >= remaining Yms"), it is never waited for */
} lk_exec_outcome;

/* The synchronous attempt function: performs one attempt, fills *out (pre-set to
 * TRANSPORT_ERROR, sent = true, retry_after = -1: an operation that forgets to say is treated as
 * the most cautious failure). */
typedef void (*lk_exec_fn)(void *ctx, const lk_exec_attempt *a, lk_exec_outcome *out);

/* ============================================================================================
 * Results and the timeline
 * ========================================================================================== */

/* One attempt of the timeline. An attempt refused by a protection (bulkhead, limiter, breaker)
 * or stopped by the deadline before it ran appears with refused = true and its terminal kind. */
typedef struct lk_exec_attempt_info {
  int number;          /* 1-based */
  int64_t start;       /* ns from the start of the call */
  int64_t duration;    /* ns */
  int64_t timeout;     /* the attempt timeout given */
  lk_failure failure;  /* as reported (LK_F_NONE = success) */
  bool sent;
  bool refused;        /* never handed to the operation */
  int64_t retry_after; /* ns, < 0 if none */
  lk_decision decision; /* what happened next: retry + delay, or why the call stopped */
  char reason[80];      /* lk_decision_format() text, or "success", "cancelled", ... */
} lk_exec_attempt_info;

/* The outcome of one call. The caller provides the timeline's storage; attempts beyond
 * timeline_cap are counted in `attempts` but not stored. */
typedef struct lk_exec_result {
  int err;             /* LK_OK, or the call's error (the same codes as lk_http_result_err:
                          LK_ENOTRETRYABLE, LK_EATTEMPTS, LK_EDEADLINE, LK_EBUDGET,
                          LK_EBREAKER_OPEN, LK_ERATE_LIMITED, LK_EBULKHEAD_FULL, LK_ECANCELED;
                          LK_EINVAL / LK_ECONFIG / LK_ESYS when the call could not start). LK_OK
                          when the fallback produced the result: see `fallback` */
  lk_failure failure;  /* the final attempt's kind (a TERMINAL kind when a protection, the
                          deadline or a cancel stopped the call) */
  int attempts;        /* timeline entries, refused ones included */
  int64_t elapsed;     /* ns from start to result */
  char stop[96];       /* why the call ended: "success", "attempts exhausted", ... */
  bool fallback;       /* the fallback produced the result */
  int original_err;    /* the error the call failed with before the fallback (LK_OK if none) */
  lk_exec_attempt_info *timeline; /* caller's array, or NULL */
  size_t timeline_cap;
  int fallback_err; /* what the fallback returned when it was called and could not help
                       (err is then the call's own error); LK_OK when it produced the result
                       or was not called */
} lk_exec_result;

/* The fallback: called exactly once when a call has failed for good — the deadline, a
 * protection and a cancel (token or lk_exec_abort) included — never for LK_OK and never for a
 * call that could not start (LK_EINVAL / LK_ECONFIG / LK_ESYS), with the final error in r->err,
 * the final kind in r->failure and the whole timeline (r->timeline may be NULL: the caller's
 * array). Return LK_OK when it produced a substitute result (a stale cached copy, a default
 * value; the caller keeps it in ctx): the call then ends with err = LK_OK, fallback = true and
 * original_err = the error, the timeline untouched, and lk_call_metrics_fallback(metrics, error)
 * counts it. Any other return leaves the call's error as it was and is reported in
 * fallback_err. Runs on the call's thread, after the call is over (see Re-entrancy above). */
typedef int (*lk_exec_fallback_fn)(void *ctx, const lk_exec_result *r);

/* Sleeps until `until` on the policy's clock, or less: returning early is fine, the executor
 * re-checks and sleeps again. It replaces the executor's own wait, so a cancel or a bulkhead
 * grant does not wake it (they are seen when it returns). A fake sleep for tests advances a fake
 * clock to `until`. */
typedef void (*lk_exec_sleep_fn)(void *ctx, int64_t until);

/* ============================================================================================
 * The policy
 * ========================================================================================== */

/* Everything that governs one call. Plain value: fill with lk_exec_policy_init_default() and
 * change fields; copied when a call starts; pointed-to objects are not copied and must outlive
 * every call that uses them. Durations are ns; arithmetic on them saturates. */
typedef struct lk_exec_policy {
  int64_t deadline;        /* the whole call, > 0; default 3 s */
  lk_deadline deadline_at; /* optional absolute deadline on `clock`; the earlier wins; default none */
  int64_t attempt_timeout; /* per-attempt cap, > 0; default 800 ms */
  int64_t pool_timeout;    /* longest bulkhead wait; 0 = up to the deadline; default 0 */
  lk_retry_policy retry;   /* default: lk_retry_config_init_default() (4 attempts, ...) */
  bool idempotent;         /* the operation may safely run twice (a read, an upsert keyed by the
                              caller): MAYBE_PROCESSED kinds are then retried after sending, as
                              for an HTTP request with an Idempotency-Key; default false */
  lk_budget *budget;       /* optional; one request per call, every retry asks for a token */
  lk_breaker *breaker;     /* optional; asked before every attempt, every outcome recorded */
  bool breaker_wait;       /* wait for the open breaker's next probe when the deadline allows
                              (as lk_http_policy.breaker_wait); default true */
  lk_limiter *limiter;     /* optional; one token reserved before every attempt */
  lk_bulkhead *bulkhead;   /* optional; one slot held for the duration of every attempt */
  lk_call_metrics *metrics; /* optional; the same series as HTTP calls */
  lk_adaptive *adaptive;   /* optional; fed every attempt's outcome (lk_adaptive_outcome_of its
                              kind) and duration while its bulkhead slot still counts as in use;
                              cancelled attempts are not fed. Attached to `bulkhead`
                              (lk_adaptive_attach) it is that bulkhead's limit, as for HTTP calls */
  lk_exec_fallback_fn fallback; /* optional */
  void *fallback_ctx;
  lk_event_fn on_event;    /* optional per-call events (event.h) */
  void *event_ctx;
  const lk_traceparent *traceparent; /* optional parent; each attempt gets a child (copied) */
  const lk_clock *clock;   /* NULL = lk_clock_system() */
  lk_rand *rng;            /* NULL = a generator of the calling thread's own, seeded from
                              getrandom on first use */
  lk_exec_sleep_fn sleep;  /* synchronous calls only; NULL = the executor's own wait */
  void *sleep_ctx;
} lk_exec_policy;

/* Sets every field to its default (see the struct). */
LK_EXPORT void lk_exec_policy_init_default(lk_exec_policy *p);
/* LK_OK or LK_ECONFIG with *why (if non-NULL) a static message naming the field. The retry
 * config is checked as lk_retry_policy_init checks it (max_attempts, the backoff, the
 * Retry-After cap, min_attempt), since `retry` is a plain field a caller may edit after init or
 * never initialise. A NULL policy is LK_ECONFIG. */
LK_EXPORT int lk_exec_policy_validate(const lk_exec_policy *p, const char **why);

/* Runs a call synchronously: `fn(ctx, ...)` once per attempt, on this thread. `cancel` is
 * optional. *res is filled in every case (its timeline / timeline_cap are the caller's: set
 * them, or leave NULL / 0). Returns res->err: LK_EINVAL for a NULL policy or fn (NULL res:
 * LK_EINVAL, nothing filled), LK_ECONFIG for an invalid policy, LK_ESYS if this thread's wait
 * could not be set up (not seen on glibc); for these the call does not start (no attempt, no
 * event, no fallback) and res->stop says why (the validation message for LK_ECONFIG). */
LK_EXPORT int lk_exec_run(const lk_exec_policy *p, lk_exec_fn fn, void *ctx, lk_cancel *cancel,
                          lk_exec_result *res);

/* ============================================================================================
 * Asynchronous calls (an external event loop)
 * ========================================================================================== */

typedef struct lk_exec_call lk_exec_call; /* opaque; one call in flight */

/* The loop's side. All hooks except `wake` run on the call's thread from inside an lk_exec_*
 * function. */
typedef struct lk_exec_loop {
  /* Begin attempt `a` (copy what you need; `a` lives during the hook only) and report its end
   * later with lk_exec_attempt_end(call, ...) — from inside this hook too, if it failed at once.
   * Required. */
  void (*start)(void *ctx, lk_exec_call *call, const lk_exec_attempt *a);
  /* (Re)arm the call's one timer to fire `delay` ns from now on the policy's clock (0 = as soon
   * as possible); delay < 0 disarms it. When it fires, call lk_exec_timer(call). Required. */
  void (*timer)(void *ctx, lk_exec_call *call, int64_t delay);
  /* Optional: the attempt in progress reached its timeout (its end_at); stop it and report
   * (e.g. LK_F_READ_TIMEOUT) through lk_exec_attempt_end, from inside this hook if it can.
   * Called again each time the timer fires after end_at while no report has come: the call
   * waits for the report, past its deadline if need be (the executor cannot stop what the loop
   * runs). NULL: the operation keeps its own time and the executor arms no timer during
   * attempts. */
  void (*expire)(void *ctx, lk_exec_call *call);
  /* Optional with a bulkhead: a slot was handed to this queued call. Runs on the thread that
   * released the slot, with the bulkhead's lock held: only signal your loop (write an eventfd),
   * which then calls lk_exec_timer(call). NULL: the call re-checks when its timer fires (the
   * timer is armed for the end of its wait, so without `wake` a slot is seen late). */
  void (*wake)(void *ctx, lk_exec_call *call);
  void *ctx;
} lk_exec_loop;

/* Completion: `res` is valid during the callback only (copy what you need); the timeline is the
 * array given to lk_exec_start. Just before it, loop.timer is called with -1 (disarm); the call
 * is freed after it returns and must not be passed to any lk_exec_* function again. */
typedef void (*lk_exec_done_fn)(void *ud, const lk_exec_result *res);

/* Starts a call asynchronously. The policy and loop are copied; `cancel` (optional) must outlive
 * the call. `timeline` / `timeline_cap` (optional) receive the timeline and must stay valid until
 * `done` has run. The first step runs from the loop: the timer is armed with delay 0 before this
 * returns, nothing else happens inside it (unless loop.timer calls lk_exec_timer at once: then
 * the first attempt starts before this returns, and done may have run). Returns LK_OK (done will
 * run exactly once), or LK_EINVAL / LK_ECONFIG / LK_ENOMEM without calling done (*out NULL).
 * *out (optional) gets the call. */
LK_EXPORT int lk_exec_start(const lk_exec_policy *p, const lk_exec_loop *loop, lk_cancel *cancel,
                            lk_exec_attempt_info *timeline, size_t timeline_cap,
                            lk_exec_done_fn done, void *ud, lk_exec_call **out);

/* The attempt started through loop.start ended as `o`. LK_OK, or LK_EINVAL (NULL), or
 * LK_ESTATE when the call has no attempt in progress or it was reported already (nothing
 * changes). Exactly one report per started attempt. May run `done`: the call is then gone, and
 * a report after that (a timeout and a completion both heard of, a hedged twin) is a use after
 * free — a loop that may hear twice of one attempt must drop the second itself. */
LK_EXPORT int lk_exec_attempt_end(lk_exec_call *call, const lk_exec_outcome *o);

/* The timer armed through loop.timer fired (early is fine: the call re-checks). LK_OK, or
 * LK_ESTATE once the call is over (from its fallback, CALL_END or done). */
LK_EXPORT int lk_exec_timer(lk_exec_call *call);

/* Ends the call now, with LK_ECANCELED: a waiting call finishes at once (done runs inside);
 * with an attempt in progress the call ends when that attempt reports (ask your operation to
 * stop), with LK_OK if it succeeded. From a hook or event of the call it takes effect at the end
 * of the step in progress: an abort during an admission (WAIT, BREAKER_TRANSITION) starts no
 * attempt, one from ATTEMPT_START waits for that attempt, one from the event of a step that ends
 * the call anyway (BUDGET_REFUSED, a final ATTEMPT_END) leaves that result. LK_OK (twice is
 * fine while the call lasts), or LK_ESTATE once the call is over (from its fallback, CALL_END or
 * done). */
LK_EXPORT int lk_exec_abort(lk_exec_call *call);

LK_END_DECLS

#endif
