/* SPDX-License-Identifier: MIT */
/* linkd/callmetrics.h: the metrics seed 001 says to watch once timeouts and retries are live,
 * as one bundle of registry series per client that the call path records into.
 *
 * Series (all labelled client="<client>"; durations exported in seconds):
 *   linkd_client_requests_total                 original (logical) requests       call_start
 *   linkd_client_attempts_total                 every attempt, first and retries  attempt
 *   linkd_client_retries_total                  attempts with attempt_number > 1  attempt
 *   linkd_client_attempt_timeouts_total         attempts that ended in a timeout kind
 *   linkd_client_attempt_failures_total{kind}   failed attempts by lk_failure_name(kind)
 *   linkd_client_downstream_5xx_total           attempts answered 500-599
 *   linkd_client_rate_limited_total{source}     source="downstream": 429 answers;
 *                                               source="local": calls ended LK_ERATE_LIMITED
 *   linkd_client_calls_total{result}            finished calls: result="success" | "failure"
 *   linkd_client_call_errors_total{error}       failed calls by lk_err_name(err) ("EDEADLINE")
 *   linkd_client_first_attempt_success_total    calls that succeeded on attempt 1
 *   linkd_client_call_duration_seconds          histogram of whole-call latency (all attempts)
 *   linkd_client_attempt_duration_seconds       histogram of per-attempt latency
 *   linkd_client_active_calls                   gauge: calls started and not ended
 *   linkd_client_resends_detected_total         re-sends of an already-seen request detected
 *   linkd_client_fallbacks_total{cause}         calls whose result came from a fallback, by
 *                                               lk_err_name() of the error it replaced (such a
 *                                               call still counts as a failure in calls_total)
 *   linkd_client_breaker_state{state}           1 for the current state, 0 for the others
 *   linkd_client_breaker_transitions_total{to}  transitions into each state
 *   linkd_client_bulkhead_queue_depth           gauge: callers waiting for a bulkhead slot
 *   linkd_client_bulkhead_wait_seconds          histogram of time spent waiting for a slot
 *   linkd_client_retry_budget_consumption_ratio gauge in [0, 1]: share of the budget in use
 *   linkd_client_retry_budget_remaining         gauge: remaining retries/tokens (budget's unit)
 *
 * Ratios are left to PromQL, because a ratio over a recent window is what alerts need and
 * Prometheus computes it from the counters exactly (a ratio baked in at render time would be a
 * lifetime average). With R(x) = rate(x[5m]) and C = sum without (result) (R(calls_total)),
 * names shortened by their linkd_client_ prefix, the seed's ratios are:
 *   retry ratio             R(retries_total) / R(requests_total)
 *   timeout rate            R(attempt_timeouts_total) / R(attempts_total)
 *   final success rate      R(calls_total{result="success"}) / C
 *   first-attempt success   R(first_attempt_success_total) / C
 *   p99 / p999 latency      histogram_quantile(0.99, R(call_duration_seconds_bucket))
 * The budget consumption ratio is the exception: it is the budget's own state, set by the caller.
 * lk_call_metrics_snapshot gives the same numbers in-process (lifetime totals, exact percentiles).
 *
 * Ownership: the series belong to the registry and outlive the bundle; lk_call_metrics_free only
 * frees the bundle. Free every bundle before the registry. Two bundles for the same client share
 * the same series.
 *
 * Thread-safety: every recording function is lock-free, allocation-free on its common path and
 * safe from any number of threads; the first failure of a new kind or error code registers its
 * series once (under the registry mutex, which allocates). Breaker-state updates take a small
 * per-bundle mutex so exactly one state series reads 1. NULL cm is a no-op everywhere.
 */
#ifndef LINKD_CALLMETRICS_H
#define LINKD_CALLMETRICS_H

#include <linkd/common.h>
#include <linkd/error.h>
#include <linkd/failure.h>
#include <linkd/hist.h>
#include <linkd/metrics.h>

LK_BEGIN_DECLS

typedef struct lk_call_metrics lk_call_metrics;

/* Breaker states as exported in the state label (Resilience4j's set and order). Callers with
 * their own enum map onto these indices. */
typedef enum lk_cm_breaker_state {
  LK_CM_BREAKER_CLOSED = 0,
  LK_CM_BREAKER_OPEN,
  LK_CM_BREAKER_HALF_OPEN,
  LK_CM_BREAKER_DISABLED,
  LK_CM_BREAKER_FORCED_OPEN,
  LK_CM_BREAKER_METRICS_ONLY,
  LK_CM_BREAKER__COUNT
} lk_cm_breaker_state;

/* Registers (or finds) the bundle's series in `m` for label client="<client>" (copied; any UTF-8
 * string). The breaker state starts as CLOSED. Returns NULL on NULL/invalid arguments or out of
 * memory. Free with lk_call_metrics_free. */
LK_EXPORT lk_call_metrics *lk_call_metrics_new(lk_metrics *m, const char *client);
/* Frees the bundle (not its series). NULL: no-op. */
LK_EXPORT void lk_call_metrics_free(lk_call_metrics *cm);

/* A logical call begins: active calls +1, original requests +1. */
LK_EXPORT void lk_call_metrics_call_start(lk_call_metrics *cm);

/* An attempt ended. attempt_number counts from 1 (> 1 counts as a retry). kind: LK_F_NONE for
 * success, else how it failed (timeout kinds: DNS/CONNECT/TLS/POOL/WRITE/READ/FIRST_BYTE/IDLE
 * timeouts and DEADLINE_EXCEEDED). status: the HTTP status if a response arrived, else 0; a 5xx
 * status or a 5xx kind counts as downstream 5xx, status 429 or TOO_MANY_REQUESTS as rate-limited
 * by downstream. */
LK_EXPORT void lk_call_metrics_attempt(lk_call_metrics *cm, int attempt_number, lk_failure kind,
                                       int status);
/* The same, also recording the attempt's duration in ns into the attempt-duration histogram
 * (duration_ns < 0: not recorded). */
LK_EXPORT void lk_call_metrics_attempt_ex(lk_call_metrics *cm, int attempt_number, lk_failure kind,
                                          int status, int64_t duration_ns);

/* A logical call ended: active calls -1, calls_total{result="success"|"failure"} +1, on failure
 * call_errors_total{error=lk_err_name(err)} +1 ("UNKNOWN" for err == LK_OK or unknown codes),
 * first-attempt successes +1 if first_attempt_success, latency into the call-duration histogram
 * (latency_ns < 0: not recorded), local rate limiting +1 if err == LK_ERATE_LIMITED.
 * attempts (how many attempts were made) is accepted for the call path's convenience but not
 * counted again: attempts are counted by lk_call_metrics_attempt. */
LK_EXPORT void lk_call_metrics_call_end(lk_call_metrics *cm, bool success,
                                        bool first_attempt_success, int attempts,
                                        int64_t latency_ns, int err);

/* A fallback produced the result of a call that failed with `err` (the cause label). The call
 * itself is still recorded as failed by lk_call_metrics_call_end. */
LK_EXPORT void lk_call_metrics_fallback(lk_call_metrics *cm, int err);

/* A re-send of a request already seen (e.g. same Idempotency-Key) was detected. */
LK_EXPORT void lk_call_metrics_resend_detected(lk_call_metrics *cm);

/* The breaker is now in `state` (out-of-range values are ignored): exactly one state series is 1.
 */
LK_EXPORT void lk_call_metrics_breaker_state(lk_call_metrics *cm, lk_cm_breaker_state state);
/* The breaker moved from one state to another: counts the transition into `to` and sets the state
 * as lk_call_metrics_breaker_state(cm, to) does. `from` is accepted for symmetry with transition
 * callbacks; out-of-range `to` is ignored. */
LK_EXPORT void lk_call_metrics_breaker_transition(lk_call_metrics *cm, lk_cm_breaker_state from,
                                                  lk_cm_breaker_state to);
/* Name of a state as exported ("closed", "open", "half_open", "disabled", "forced_open",
 * "metrics_only"), or "unknown". */
LK_EXPORT const char *lk_cm_breaker_state_name(lk_cm_breaker_state state);

/* Current number of callers queued for a bulkhead slot. */
LK_EXPORT void lk_call_metrics_bulkhead_queue_depth(lk_call_metrics *cm, int64_t depth);
/* One caller waited wait_ns for a bulkhead slot (0 if it got one at once; < 0 ignored). */
LK_EXPORT void lk_call_metrics_bulkhead_wait(lk_call_metrics *cm, int64_t wait_ns);

/* Retry-budget state: consumption in [0, 1] (clamped; NaN ignored), exported with 1e-6
 * resolution, and the remaining retries/tokens in the budget's own unit. */
LK_EXPORT void lk_call_metrics_budget_consumption(lk_call_metrics *cm, double consumption);
LK_EXPORT void lk_call_metrics_budget_remaining(lk_call_metrics *cm, int64_t remaining);

/* The per-attempt and whole-call latency histograms (ns), for the timeout advisor and hedging.
 * Owned by the registry. NULL for NULL cm. */
LK_EXPORT lk_hist *lk_call_metrics_attempt_hist(const lk_call_metrics *cm);
LK_EXPORT lk_hist *lk_call_metrics_call_hist(const lk_call_metrics *cm);

/* In-process view of the bundle: lifetime totals and the ratios derived from them. */
typedef struct lk_call_metrics_snap {
  uint64_t requests, attempts, retries, timeouts, downstream_5xx;
  uint64_t rate_limited_downstream, rate_limited_local;
  uint64_t calls_ok, calls_failed, first_attempt_ok, resends;
  int64_t active;
  double retry_ratio;                             /* retries / requests */
  double timeout_rate;                            /* timeouts / attempts */
  double success_rate;                            /* calls_ok / (calls_ok + calls_failed) */
  double first_attempt_success_rate;              /* first_attempt_ok / (calls_ok + calls_failed) */
  double attempts_per_call;                       /* attempts / (calls_ok + calls_failed) */
  int64_t call_p50_ns, call_p99_ns, call_p999_ns; /* whole-call latency percentiles */
  lk_cm_breaker_state breaker_state;
  int64_t bulkhead_queue_depth;
  double budget_consumption;
  uint64_t fallbacks; /* over every cause */
} lk_call_metrics_snap;

/* Fills *out (ratios are 0 when their denominator is 0). Returns LK_OK or LK_EINVAL. */
LK_EXPORT int lk_call_metrics_snapshot(const lk_call_metrics *cm, lk_call_metrics_snap *out);

LK_END_DECLS

#endif
