/* SPDX-License-Identifier: MIT */
/* The protocol-independent steps of one logical call, shared by the executor (exec.c) and the
 * HTTP driver (src/http): glue to the shared protection objects that need per-call state or a
 * NULL check (budget, breaker; their gauges in the call metrics), when a call the breaker refused
 * may ask again, and the retry decision with its deadline and budget rules. Each protection is
 * optional: NULL means "not used". The limiter, bulkhead and call metrics are called directly
 * where they are used. Not installed. */
#ifndef LINKD_EXEC_PROTECT_H
#define LINKD_EXEC_PROTECT_H

#include <linkd/breaker.h>
#include <linkd/budget.h>
#include <linkd/bulkhead.h>
#include <linkd/callmetrics.h>
#include <linkd/event.h>
#include <linkd/limiter.h>
#include <linkd/rand.h>
#include <linkd/retry.h>

#include <stdatomic.h>

/* A call refused by a breaker whose probes are all out asks again this often. */
#define LK_BREAKER_POLL LK_MS(5)

/* Per-call state the shared protections hand out: the breaker's permit (so a record or release
 * lands in the state period that admitted the attempt) and the budget's ticket (so QUOTA refunds
 * exactly what the call's retry cost). */
typedef struct lk_prot {
  lk_breaker_permit permit;
  lk_budget_ticket ticket;
} lk_prot;

/* NULL budget / breaker: not used (every call succeeds, nothing is recorded). */
void lk__budget_request(lk_budget *b, int64_t now);
void lk__budget_outcome(lk_budget *b, lk_prot *ps, int64_t now, bool success);
int lk__budget_retry(lk_budget *b, lk_prot *ps, int64_t now, bool after_timeout);
int lk__breaker_acquire(lk_breaker *b, lk_prot *ps, int64_t now);
void lk__breaker_record(lk_breaker *b, lk_prot *ps, int64_t now, int64_t duration, lk_failure kind);
void lk__breaker_release(lk_breaker *b, lk_prot *ps);
/* Copies budget and breaker state into the call metrics (gauges), when both are set. */
void lk__cm_protection_state(lk_call_metrics *m, lk_budget *b, lk_breaker *br, int64_t now);

/* A call's hold on a bulkhead slot, or its place in the bulkhead's FIFO queue (shared with
 * blocking acquirers) while it waits without blocking. Zero it, then set start = INT64_MIN. */
typedef struct lk_slot {
  int64_t start;        /* when the wait began; INT64_MIN: not waiting */
  bool held, queued;    /* a slot is held / `w` is in the queue */
  _Atomic bool granted; /* set by the grant notification (another thread, maybe) */
  lk_bulkhead_waiter w;
} lk_slot;

/* One step of getting a slot without blocking; *waited = ns spent queued unless LK_EAGAIN. LK_OK:
 * held. LK_EAGAIN: queued; come back at *until (the end of pool_timeout or the deadline) or
 * when notify(ud) runs (on the releasing thread, bulkhead lock held: it must only signal). Any
 * other return is a refusal, nothing held: LK_EBULKHEAD_FULL with *kind BULKHEAD_FULL (queue
 * full) or POOL_TIMEOUT (pool_timeout passed), LK_EDEADLINE with DEADLINE_EXCEEDED. */
int lk__slot_acquire(lk_slot *s, lk_bulkhead *b, int64_t now, int64_t deadline,
                     int64_t pool_timeout, void (*notify)(void *ud), void *ud, int64_t *until,
                     int64_t *waited, lk_failure *kind);
/* Whether a queued wait has been granted and is due now (cheap; no lock). */
static inline bool lk__slot_due(lk_slot *s) { return s->queued && atomic_load(&s->granted); }
/* Gives back the slot or leaves the queue, whichever applies. */
void lk__slot_release(lk_slot *s, lk_bulkhead *b);

/* What a call holds or waits for between admission steps, for the attempt about to start. */
typedef struct lk_admission {
  lk_slot slot;          /* bulkhead slot or place in its queue */
  bool limiter_reserved; /* a limiter token is reserved (a reservation cannot be returned) */
  int64_t limiter_wait_from, breaker_wait_from; /* INT64_MIN: not waiting (for WAIT events) */
  void (*wake)(void *ctx); /* the hooks' `granted` and the env's ctx, while the slot is queued */
  void *wake_ctx;
} lk_admission;

/* Zeroes an admission and marks it not waiting. */
void lk__admission_init(lk_admission *a);

/* Where the executor and the HTTP driver differ in an admission step: how a grant wakes the
 * call, how a wait is reported, how a slot is given back, how a breaker permit is asked for
 * (each reports breaker transitions its own way). One static table per driver; ctx is its call. */
typedef struct lk_admit_hooks {
  /* The bulkhead granted the queued call its slot (slot.granted is set already): runs on the
   * releasing thread with the bulkhead's lock held, so it must only wake the call. */
  void (*granted)(void *ctx);
  void (*wait_ended)(void *ctx, int64_t now, lk_event_wait what, int64_t waited, bool granted);
  void (*release_slot)(void *ctx);
  int (*breaker_acquire)(void *ctx, lk_prot *ps, int64_t now);
} lk_admit_hooks;

/* What a driver lends an admission step: its protections (NULL: not used), the policy's limits
 * and its hooks. */
typedef struct lk_admit_env {
  lk_bulkhead *bulkhead;
  lk_limiter *limiter;
  lk_breaker *breaker;
  lk_call_metrics *metrics;
  int64_t pool_timeout, min_attempt;
  bool breaker_wait;
  const lk_admit_hooks *hooks;
  void *ctx;
} lk_admit_env;

typedef enum lk_admit_result {
  LK_ADMIT_GO,      /* every protection agreed: the slot is held (if any), the permit in *ps */
  LK_ADMIT_LATER,   /* come back at *timer_at, or sooner when the bulkhead grants a slot */
  LK_ADMIT_REFUSED, /* *kind and *err say why; nothing is held */
} lk_admit_result;

/* One admission step, in the fixed order bulkhead, limiter, breaker. A wait is reported when it
 * ends: granted, or in the refusal that ends it. A refusal by the breaker becomes a wait for its
 * next probe when the policy allows it (breaker_wait). */
lk_admit_result lk__admit(lk_admission *a, const lk_admit_env *env, lk_prot *ps, int64_t now,
                          int64_t deadline, int64_t *timer_at, lk_failure *kind, int *err);

/* Whether a kind is a timeout (for budgets and metrics). */
bool lk__kind_is_timeout(lk_failure k);

/* When a call the breaker refused may ask again, or 0 to fail now. A refusal is a request that
 * was never sent, and the breaker knows when its next probe goes out: a call with time to spare
 * (`wait` set, and at least min_attempt, or 1 ms, left after that moment) waits for it, as it
 * waits for a Retry-After, instead of failing at once; the breaker still admits only its probes,
 * so waiting adds no load. */
int64_t lk__breaker_wait_until(lk_breaker *b, bool wait, int64_t now, int64_t deadline,
                               int64_t min_attempt);

/* The decision after a failed attempt, in the fixed order: lk_retry_decide (an invalid input
 * stops as NOT_RETRYABLE); no time left at all stops as DEADLINE (rather than "delay 30ms >=
 * remaining -1ms"); a retry then needs a token from the budget (LK_REASON_BUDGET if refused).
 * `remaining` may be <= 0. */
void lk__decide(const lk_retry_policy *rp, const lk_attempt *at, int64_t remaining, lk_rand *rng,
                lk_budget *budget, lk_prot *ps, int64_t now, lk_decision *d);

/* The call's error for a decision that stopped it: NOT_RETRYABLE -> `not_retryable` (the HTTP
 * driver says LK_EHTTP for a status), ATTEMPTS -> LK_EATTEMPTS, BUDGET -> LK_EBUDGET, the rest
 * (deadline, delay too long) -> LK_EDEADLINE. */
int lk__stop_err(const lk_decision *d, int not_retryable);

#endif
