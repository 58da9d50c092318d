/* SPDX-License-Identifier: MIT */
/* linkd/adaptive.h: an adaptive concurrency limit that follows observed latency and errors.
 *
 * Feed it one sample per finished call (now, round-trip time, outcome); it keeps a limit within
 * [min_limit, max_limit] and can drive a bulkhead's max (lk_adaptive_attach()). Two algorithms:
 *
 * AIMD (TCP congestion avoidance, Netflix concurrency-limits' AIMDLimit):
 *   good sample (SUCCESS with rtt <= latency_target, or no target): limit += increase / limit,
 *     i.e. `increase` per window of `limit` good samples;
 *   DROP, or SUCCESS slower than latency_target: limit *= backoff_ratio.
 *
 * GRADIENT (TCP Vegas / Netflix GradientLimit): with min_rtt the lowest RTT seen recently,
 *   gradient = clamp(tolerance * min_rtt / rtt, 0.5, 1)
 *   limit    = (1 - smoothing) * limit + smoothing * (limit * gradient + queue)
 *   (queue = queue_size, or sqrt(limit) when queue_size is 0): the limit grows by about the queue
 *   allowance while latency stays near min_rtt and shrinks (at most halving per step) as queueing
 *   delay builds. min_rtt forgets samples older than one to two min_rtt_window so that a
 *   lasting change of the backend's base latency is learnt. DROP and a latency_target overrun
 *   act as in AIMD.
 *
 * Common rules: a multiplicative decrease happens at most once per decrease_cooldown (one
 * overload event makes every in-flight call fail at about the same time: one signal, not many);
 * when the caller reports how many calls were in flight (or an attached bulkhead tells) and that
 * is under half the limit, the sample neither raises nor lowers the limit: the limit is not being
 * used, so a good sample says nothing about a higher one, and a drop was not caused by it (a
 * limit lowered by every drop but raised only when used falls to min_limit under any background
 * error rate at low load, and then holds calls back when load comes; Netflix's AIMDLimit, which
 * lowers on every drop, has that ratchet).
 * Results are clamped to [min_limit, max_limit]; the integer limit is the floor of the estimate.
 *
 * Time is a parameter (ns on CLOCK_MONOTONIC or a fake time line). A sample whose `now` is a
 * little behind another's is judged as usual (it falls within the cooldown and the current
 * min_rtt window); one earlier than the start of the cooldown or of the min_rtt window by more
 * than its length (a clock that stepped back) ends it, so neither stays frozen for as long as
 * the clock went back. Every function taking an lk_adaptive * needs a valid one, except
 * lk_adaptive_free and lk_adaptive_attach (NULL: no-op / LK_EINVAL).
 * Thread-safety: an lk_adaptive is safe to use from any number of threads at once (samples are
 * applied under an internal mutex; lk_adaptive_limit() is a lock-free read); only
 * lk_adaptive_free() needs exclusive use.
 */
#ifndef LINKD_ADAPTIVE_H
#define LINKD_ADAPTIVE_H

#include <linkd/bulkhead.h>
#include <linkd/common.h>
#include <linkd/failure.h>

LK_BEGIN_DECLS

typedef enum lk_adaptive_kind { LK_ADAPTIVE_AIMD, LK_ADAPTIVE_GRADIENT } lk_adaptive_kind;

typedef enum lk_adaptive_outcome {
  LK_ADAPTIVE_SUCCESS, /* the call completed; its rtt is judged */
  LK_ADAPTIVE_DROP,    /* an overload signal: timeout, 5xx, 429/503, connection refused */
  LK_ADAPTIVE_IGNORE   /* says nothing about load (4xx, cancelled): leaves everything as is */
} lk_adaptive_outcome;

/* The outcome an attempt that ended in `kind` reports: LK_F_NONE -> SUCCESS; timeouts (TLS,
 * write, read, first-byte, idle), resets, empty/junk responses, 5xx, 429, refused/timed-out
 * connections, pool timeouts and an exceeded deadline -> DROP; other 4xx (incl. 408, 425,
 * KEY_IN_USE), DNS_FAILED and DNS_TIMEOUT (the resolver's health, not the backend's),
 * TLS_FAILED, cancellation, local rejections (breaker, budget, rate limiter, bulkhead) and kinds
 * out of range -> IGNORE, since they say nothing about the backend's load. */
LK_EXPORT lk_adaptive_outcome lk_adaptive_outcome_of(lk_failure kind);

typedef struct lk_adaptive_config {
  lk_adaptive_kind kind;     /* default AIMD */
  int64_t initial_limit;     /* in [min_limit, max_limit]; default 20 */
  int64_t min_limit;         /* >= 1; default 1 */
  int64_t max_limit;         /* <= LK_BULKHEAD_LIMIT_MAX; default 200 */
  double backoff_ratio;      /* multiplicative decrease, in [0.1, 1); default 0.9 */
  int64_t decrease_cooldown; /* ns between two multiplicative decreases, >= 0; default 100 ms */
  int64_t latency_target;    /* ns; a success slower than this counts as a drop; 0 = none;
                                default 0 */
  /* AIMD */
  double increase; /* added per window of `limit` good samples, finite and > 0; default 1 */
  /* GRADIENT */
  double smoothing;       /* weight of each new estimate, in (0, 1]; default 0.2 */
  double tolerance;       /* rtt up to tolerance * min_rtt is not queueing, in [1, 100];
                             default 1.5 */
  double queue_size;      /* growth allowance, finite and >= 0; 0 = sqrt(limit); default 0 */
  int64_t min_rtt_window; /* ns, >= 0; 0 = min_rtt never forgets; default 30 s */
} lk_adaptive_config;

typedef struct lk_adaptive lk_adaptive; /* opaque */

/* Sets every field to its default (see above). */
LK_EXPORT void lk_adaptive_config_init_default(lk_adaptive_config *c);
/* LK_OK, or LK_ECONFIG with *why (if non-NULL) set to a static message (NULL on success). */
LK_EXPORT int lk_adaptive_config_validate(const lk_adaptive_config *c, const char **why);

/* Creates an adaptive limit at initial_limit. LK_OK with *out set (free with
 * lk_adaptive_free()), or LK_ECONFIG (with *why) / LK_EINVAL (c or out NULL) / LK_ENOMEM / LK_ESYS,
 * leaving *out NULL. The config is copied. */
LK_EXPORT int lk_adaptive_new(const lk_adaptive_config *c, lk_adaptive **out, const char **why);
/* Frees it. NULL is a no-op. Does not free an attached bulkhead. */
LK_EXPORT void lk_adaptive_free(lk_adaptive *a);

/* Applies one sample: `rtt` ns of a call that ended at `now` with `outcome`. A SUCCESS with
 * rtt <= 0 carries no latency information and counts as IGNORE for the gradient. Returns the
 * limit after the sample. No allocation. */
LK_EXPORT int64_t lk_adaptive_record(lk_adaptive *a, int64_t now, int64_t rtt,
                                     lk_adaptive_outcome outcome);
/* As lk_adaptive_record(), also telling how many calls were in flight when this one ran
 * (including it). inflight < 0 means unknown: the attached bulkhead's in-use count is used if
 * there is one, else the "limit not used" rule is skipped. */
LK_EXPORT int64_t lk_adaptive_record_inflight(lk_adaptive *a, int64_t now, int64_t rtt,
                                              lk_adaptive_outcome outcome, int64_t inflight);

/* The current limit (lock-free read). */
LK_EXPORT int64_t lk_adaptive_limit(const lk_adaptive *a);
/* The min RTT the gradient currently compares against (ns; 0 before the first sample). */
LK_EXPORT int64_t lk_adaptive_min_rtt(const lk_adaptive *a);

/* Makes the limit drive `b`: sets b's max to the current limit now and after every change.
 * NULL detaches. The bulkhead must outlive the attachment. Returns LK_OK or LK_EINVAL. */
LK_EXPORT int lk_adaptive_attach(lk_adaptive *a, lk_bulkhead *b);

LK_END_DECLS

#endif
