/* SPDX-License-Identifier: MIT */
/* linkd/hedge.h: when to send a hedged attempt.
 *
 * Hedging sends a copy of a slow call before the first one has answered, and keeps whichever
 * answers first (gRPC's hedging policy; "The Tail at Scale"). Hedge k (1-based) is due at
 *   start + k * delay
 * where delay is either fixed or, to hedge only the slowest calls, a latency percentile read from
 * a histogram (e.g. p95: about 5 % of calls get a hedge). At most max_hedges are sent per call,
 * and each one must first be paid for by the retry budget: hedges are extra load exactly like
 * retries, so an overloaded backend stops receiving them. A hedge refused by the budget ends
 * hedging for that call.
 *
 * The policy is a plain value and lk_hedge_decide() is a decision function: it reads the clock
 * values given to it, the histogram (through `percentile`) and, only when a hedge is due, asks
 * the budget (through `spend`); the caller sends the hedge and counts it. It does not look at the
 * call's deadline: a hedge due after it is pointless, so compare next_at with the deadline.
 *
 * The hooks are plain function pointers so that this header depends on neither lk_hist nor
 * lk_budget. Both fit through one-line adapters (casting lk_hist_percentile itself to the hook
 * type would be undefined behaviour in C, and gcc's -Wcast-function-type rejects it):
 *   static int64_t hist_pct(void *h, double q) { return lk_hist_percentile(h, q); }
 *   static int budget_spend(void *b, int64_t now) {
 *     return lk_budget_acquire_retry(b, now, false);
 *   }
 *   policy.percentile = hist_pct; policy.percentile_ctx = my_hist;
 *   policy.spend = budget_spend;  policy.spend_ctx = my_budget;
 *
 * Thread-safety: the policy is read-only during decisions, so one policy may serve many threads
 * if its hooks are thread-safe (lk_hist_percentile and lk_budget_acquire_retry are).
 */
#ifndef LINKD_HEDGE_H
#define LINKD_HEDGE_H

#include <linkd/common.h>

LK_BEGIN_DECLS

#define LK_HEDGE_MAX_HEDGES 16

/* The q-th percentile (q in [0, 100]) of recent latencies in ns; <= 0 when there is no data.
 * lk_hist_percentile(const lk_hist *, double) has this shape with ctx = the histogram. */
typedef int64_t (*lk_hedge_percentile_fn)(void *ctx, double q);
/* Pays for one hedge at `now`: LK_OK (send it) or a negative code, e.g. LK_EBUDGET (do not).
 * lk_budget_acquire_retry(b, now, false) has this shape with ctx = the budget. */
typedef int (*lk_hedge_spend_fn)(void *ctx, int64_t now);

typedef struct lk_hedge_policy {
  int max_hedges;    /* extra attempts per call, in [0, LK_HEDGE_MAX_HEDGES]; 0 = no hedging;
                        default 1 */
  int64_t delay;     /* ns between the call's start and the first hedge and between hedges,
                        >= 0; also the fallback when the percentile has no data; default 100 ms */
  double quantile;   /* 0 = fixed delay; else in (0, 100]: delay = percentile(quantile), clamped
                        to [min_delay, max_delay]; default 0 */
  int64_t min_delay; /* ns, >= 0; default 0 */
  int64_t max_delay; /* ns, >= min_delay; default INT64_MAX */
  lk_hedge_percentile_fn percentile; /* required when quantile > 0 */
  void *percentile_ctx;
  lk_hedge_spend_fn spend; /* NULL = hedges cost nothing (not advised) */
  void *spend_ctx;
} lk_hedge_policy;

typedef struct lk_hedge_decision {
  bool send;       /* send one hedge now (already paid for) and count it */
  int64_t next_at; /* when the next hedge is due (ask again then); INT64_MAX = no more hedges */
  int reason;      /* LK_OK, or why hedging is over: LK_EATTEMPTS (max_hedges sent) or the
                      spend hook's refusal (e.g. LK_EBUDGET; a positive one is LK_EBUDGET) */
} lk_hedge_decision;

/* Sets every field to its default (one hedge after a fixed 100 ms, no hooks). */
LK_EXPORT void lk_hedge_policy_init_default(lk_hedge_policy *p);
/* LK_OK, or LK_ECONFIG with *why (if non-NULL) set to a static message (NULL on success). */
LK_EXPORT int lk_hedge_policy_validate(const lk_hedge_policy *p, const char **why);

/* The delay in force now: `delay` when quantile is 0, else the percentile clamped to
 * [min_delay, max_delay] (`delay`, also clamped, when the percentile is <= 0). Policy must be
 * valid. */
LK_EXPORT int64_t lk_hedge_delay(const lk_hedge_policy *p);

/* Decides for a call that started at `start`, at `now`, with `sent` hedges already sent
 * (0 for none; a negative count is taken as 0): hedge number sent+1 is due at
 * start + (sent+1) * delay (saturating; a due time of INT64_MAX is never reached; the delay
 * is read anew on each call, see lk_hedge_delay()). When it is due and `spend` (if set) pays
 * for it: send = true, next_at = when hedge sent+2 is due (INT64_MAX if sent+1 reaches
 * max_hedges). Not yet due: send = false, next_at = its due time. No more hedges (sent >=
 * max_hedges, or spend refused): send = false, next_at = INT64_MAX, reason says why. The spend
 * hook is called at most once per decision and only when a hedge is due. Policy must be valid;
 * no allocation. */
LK_EXPORT lk_hedge_decision lk_hedge_decide(const lk_hedge_policy *p, int64_t start, int64_t now,
                                            int sent);

LK_END_DECLS

#endif
