/* SPDX-License-Identifier: MIT */
/* linkd/budget.h: retry budgets, three forms behind one handle.
 *
 * A retry budget caps the retries of *all* calls sharing it, so that when a downstream fails as a
 * whole, retries cannot multiply its load (retry storms). Every retry asks the budget first
 * (lk_budget_acquire_retry); a refusal ends the call with LK_EBUDGET (reason LK_REASON_BUDGET).
 * Pick one of three forms at construction; all use the same five calls:
 *
 *   RATIO (Finagle's RetryBudget): over a sliding window of `ttl`, retries <= percent % of the
 *     requests recorded in the window + a floor of min_retries_per_sec * ttl. The window is a ring
 *     of `buckets` time buckets; deposits and withdrawals expire with their bucket. Integer
 *     micro-retries: a request deposits percent * 10^4 units, a retry costs 10^6.
 *     record_request deposits; acquire_retry withdraws; successes and failures are not used.
 *   TOKEN (gRPC's retry throttling, gRFC A6): a token count starting at max_tokens; each failure
 *     takes 1, each success gives token_ratio back (capped at max_tokens, floored at 0);
 *     retries are allowed only while tokens > max_tokens / 2. Retries themselves cost nothing
 *     (the failure that caused them paid). Integer milli-tokens: no floating drift.
 *   QUOTA (the AWS SDKs' "standard" retry quota): `capacity` units starting full; a retry costs
 *     retry_cost (5), a retry after a timeout timeout_cost (10); a success refunds what the call's
 *     last retry took (pass the lk_budget_ticket) or no_retry_increment (1) when it took nothing;
 *     capped at capacity. A retry is refused when fewer units than its cost are left.
 *
 * Time is a parameter (`now`, ns, CLOCK_MONOTONIC); only RATIO looks at it. A `now` a little
 * behind another thread's counts in the window's newest bucket; one from before the whole window
 * (a clock that stepped back by more than ttl) starts the window over there, so what was
 * deposited and withdrawn before the step expires at once instead of staying for as long as the
 * clock went back. No call allocates.
 * Every function taking an lk_budget * requires a valid, non-NULL budget, except
 * lk_budget_free, lk_budget_stats_get, lk_budget_remaining and lk_budget_consumption.
 *
 * Thread-safety: an lk_budget is safe to use from any number of threads at once; the hot path is
 * lock-free (C11 atomics); RATIO takes a small internal lock only when its window moves to a new
 * bucket. A budget that only one thread uses may say so (lk_budget_set_single_thread) and then
 * does without atomic read-modify-writes. Config structs are plain values.
 */
#ifndef LINKD_BUDGET_H
#define LINKD_BUDGET_H

#include <linkd/common.h>

LK_BEGIN_DECLS

typedef struct lk_budget lk_budget; /* opaque, thread-safe */

typedef enum lk_budget_kind {
  LK_BUDGET_RATIO,
  LK_BUDGET_TOKEN,
  LK_BUDGET_QUOTA
} lk_budget_kind;

/* --- configuration ---------------------------------------------------------------------------- */

typedef struct lk_budget_ratio_config {
  double percent;          /* retries allowed per 100 requests, in [0, 1000]; default 20 */
  int64_t ttl;             /* window length in ns, in [1 ms, 1 hour]; default 10 s */
  int min_retries_per_sec; /* floor, in [0, 1000000]; default 10 (reserve = floor * ttl) */
  int buckets;             /* ring size, in [1, 3600], ttl / buckets >= 1 ms; default 10 */
} lk_budget_ratio_config;

typedef struct lk_budget_token_config {
  double max_tokens;  /* in (0, 1000], rounded to 0.001; default 10 */
  double token_ratio; /* tokens a success gives back, in [0.001, 1000], rounded to 0.001;
                         default 0.1 */
} lk_budget_token_config;

typedef struct lk_budget_quota_config {
  int64_t capacity;           /* units, in [1, 10^12]; default 500 */
  int64_t retry_cost;         /* in [1, capacity]; default 5 */
  int64_t timeout_cost;       /* cost of a retry after a timeout, in [1, capacity]; default 10 */
  int64_t no_retry_increment; /* refund of a success that took nothing, in [0, capacity];
                                 default 1 */
} lk_budget_quota_config;

/* Each sets every field to its default (listed with the fields). */
LK_EXPORT void lk_budget_ratio_config_init_default(lk_budget_ratio_config *c);
LK_EXPORT void lk_budget_token_config_init_default(lk_budget_token_config *c);
LK_EXPORT void lk_budget_quota_config_init_default(lk_budget_quota_config *c);

/* LK_OK, or LK_ECONFIG with *why (if non-NULL) set to a static message naming the bad field. */
LK_EXPORT int lk_budget_ratio_config_validate(const lk_budget_ratio_config *c, const char **why);
LK_EXPORT int lk_budget_token_config_validate(const lk_budget_token_config *c, const char **why);
LK_EXPORT int lk_budget_quota_config_validate(const lk_budget_quota_config *c, const char **why);

/* --- construction ----------------------------------------------------------------------------- */

/* Each validates `c` (copied; not retained) and stores a new budget in *out, starting full.
 * Returns LK_OK, LK_ECONFIG (*why, if non-NULL, gets a static message), LK_EINVAL (c or out
 * NULL) or LK_ENOMEM. *out is set to NULL on failure. Free with lk_budget_free(). */
LK_EXPORT int lk_budget_new_ratio(const lk_budget_ratio_config *c, lk_budget **out,
                                  const char **why);
LK_EXPORT int lk_budget_new_token(const lk_budget_token_config *c, lk_budget **out,
                                  const char **why);
LK_EXPORT int lk_budget_new_quota(const lk_budget_quota_config *c, lk_budget **out,
                                  const char **why);

/* Frees the budget; NULL is a no-op. No other thread may be using it. */
LK_EXPORT void lk_budget_free(lk_budget *b);

/* Declares that from now on one thread at a time acquires from and records into b (a budget of
 * one event loop, a simulator's): its balance and counters are then updated with plain loads and
 * stores instead of atomic read-modify-writes (a locked instruction each, most of what a record
 * costs), with the same results. The queries (lk_budget_stats_get, lk_budget_remaining,
 * lk_budget_consumption) stay safe from any thread. Call it before b is shared with another
 * thread, never while another thread uses it; it cannot be undone. A backend budget
 * (lk_budget_new_backend) ignores it for what its backend holds. NULL is a no-op. */
LK_EXPORT void lk_budget_set_single_thread(lk_budget *b);

/* --- the interface shared by all forms -------------------------------------------------------- */

/* Asks for one retry (or one hedge) at `now`. after_timeout: the attempt being retried ended in a
 * timeout (QUOTA charges timeout_cost instead of retry_cost; other forms ignore it).
 * Returns LK_OK (the budget was charged) or LK_EBUDGET (nothing charged; do not retry). */
LK_EXPORT int lk_budget_acquire_retry(lk_budget *b, int64_t now, bool after_timeout);
/* One logical call started (its original request, not its retries). RATIO deposits; others
 * ignore it. */
LK_EXPORT void lk_budget_record_request(lk_budget *b, int64_t now);
/* An attempt succeeded. TOKEN gives token_ratio back; QUOTA refunds no_retry_increment (use
 * lk_budget_record_success_ticket after a paid retry to refund its cost instead); RATIO ignores
 * it. */
LK_EXPORT void lk_budget_record_success(lk_budget *b, int64_t now);
/* An attempt failed. TOKEN takes one token; others ignore it. */
LK_EXPORT void lk_budget_record_failure(lk_budget *b, int64_t now);

/* --- tickets: exact refunds for QUOTA --------------------------------------------------------- */

/* What a call's last granted retry cost, kept by the caller for one logical call (on its stack,
 * zero-initialised, e.g. `lk_budget_ticket t = {0};`). */
typedef struct lk_budget_ticket {
  int64_t cost; /* budget units charged by the last granted retry; 0 if none */
} lk_budget_ticket;

/* lk_budget_acquire_retry that also stores the charge in *t (QUOTA: the cost; RATIO: 10^6
 * micro-retries; TOKEN: 0). On LK_EBUDGET, *t is left unchanged. t must not be NULL. */
LK_EXPORT int lk_budget_acquire_retry_ticket(lk_budget *b, int64_t now, bool after_timeout,
                                             lk_budget_ticket *t);
/* lk_budget_record_success for the call holding *t: QUOTA refunds t->cost (the balance never
 * exceeds capacity, whatever the ticket says), or no_retry_increment if it is <= 0 (the AWS
 * SDKs' rule); other forms behave as lk_budget_record_success. Sets t->cost to 0 so a refund
 * happens once. */
LK_EXPORT void lk_budget_record_success_ticket(lk_budget *b, int64_t now, lk_budget_ticket *t);

/* --- queries for metrics ---------------------------------------------------------------------- */

typedef struct lk_budget_stats {
  lk_budget_kind kind;
  int64_t remaining;  /* retries the budget would grant now if every attempt failed and nothing
                         else happened (QUOTA counts retries at retry_cost) */
  double consumption; /* share of the budget in use, in [0, 1]; 1 = retries are being refused.
                         RATIO: retries / allowance in the window; TOKEN: (max - tokens) /
                         (max / 2), capped; QUOTA: (capacity - available) / capacity, and 1
                         once less than retry_cost is left */
  int64_t level;      /* the form's own balance: RATIO micro-retries left in the window,
                         TOKEN milli-tokens, QUOTA units available */
  int64_t capacity;   /* the form's own maximum: RATIO micro-retries allowed in the window
                         (reserve + deposits), TOKEN max milli-tokens, QUOTA capacity */
  uint64_t refused;   /* retries refused since creation */
} lk_budget_stats;

/* Fills *out as of `now` (RATIO ignores buckets older than the window; nothing is modified).
 * LK_OK or LK_EINVAL (NULL argument). Lock-free; values are a consistent-enough snapshot while
 * other threads keep updating. */
LK_EXPORT int lk_budget_stats_get(const lk_budget *b, int64_t now, lk_budget_stats *out);
/* Shortcuts for lk_budget_stats_get's `remaining` and `consumption` (0 for NULL). */
LK_EXPORT int64_t lk_budget_remaining(const lk_budget *b, int64_t now);
LK_EXPORT double lk_budget_consumption(const lk_budget *b, int64_t now);
/* The form of the budget. */
LK_EXPORT lk_budget_kind lk_budget_kind_of(const lk_budget *b);
/* "ratio" / "token" / "quota" ("unknown" out of range). */
LK_EXPORT const char *lk_budget_kind_name(lk_budget_kind k);

/* --- backends: a budget whose balance lives elsewhere ----------------------------------------- */

/* A budget can hand every call to a backend (for example linkd/shared.h's fleet-wide RATIO
 * budget on Redis); the five calls, the ticket variants and the queries then go to it. Called
 * from any thread at once. acquire_retry returns LK_OK or LK_EBUDGET and stores what it charged
 * in *charged (for the ticket); refusals are counted here, in lk_budget_stats.refused. */
typedef struct lk_budget_backend {
  int (*acquire_retry)(void *arg, int64_t now, bool after_timeout, int64_t *charged);
  void (*record_request)(void *arg, int64_t now);
  void (*record_success)(void *arg, int64_t now, int64_t ticket_cost);
  void (*record_failure)(void *arg, int64_t now);
  int (*stats)(void *arg, int64_t now, lk_budget_stats *out); /* fills all but refused */
  void (*free)(void *arg);                                    /* may be NULL */
} lk_budget_backend;

/* A budget of form `kind` forwarding to `be` (not copied; must outlive the budget) with `arg`.
 * Every member but free is required. LK_OK, LK_EINVAL or LK_ENOMEM; *out NULL on failure. */
LK_EXPORT int lk_budget_new_backend(lk_budget_kind kind, const lk_budget_backend *be, void *arg,
                                    lk_budget **out);
/* The backend argument of a budget made by lk_budget_new_backend with `be`, else NULL. */
LK_EXPORT void *lk_budget_backend_arg(const lk_budget *b, const lk_budget_backend *be);

LK_END_DECLS

#endif
