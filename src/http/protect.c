/* Glue to the shared protection objects (budget, breaker, limiter, bulkhead, call metrics).
 * Each is optional; NULL means "not used". The headers are written by other parts of the project;
 * a part whose header is absent compiles to "not used" (no object of that type can exist then). */
#include "http_internal.h"

#if __has_include(<linkd/limiter.h>)
#include <linkd/limiter.h>
#define LK_HAVE_LIMITER 1
#endif
#if __has_include(<linkd/bulkhead.h>)
#include <linkd/bulkhead.h>
#define LK_HAVE_BULKHEAD 1
#endif
#if __has_include(<linkd/callmetrics.h>)
#include <linkd/callmetrics.h>
#define LK_HAVE_CALLMETRICS 1
#endif

void lk__budget_request(lk_budget *b, int64_t now) {
#ifdef LK_HAVE_BUDGET
  if (b)
    lk_budget_record_request(b, now);
#else
  (void)b, (void)now;
#endif
}

void lk__budget_outcome(lk_budget *b, lk_prot *ps, int64_t now, bool success) {
#ifdef LK_HAVE_BUDGET
  if (b) {
    if (success)
      lk_budget_record_success_ticket(b, now, &ps->ticket);
    else
      lk_budget_record_failure(b, now);
  }
#else
  (void)b, (void)ps, (void)now, (void)success;
#endif
}

int lk__budget_retry(lk_budget *b, lk_prot *ps, int64_t now, bool after_timeout) {
#ifdef LK_HAVE_BUDGET
  if (b)
    return lk_budget_acquire_retry_ticket(b, now, after_timeout, &ps->ticket);
#else
  (void)b, (void)ps, (void)now, (void)after_timeout;
#endif
  return LK_OK;
}

int lk__breaker_acquire(lk_breaker *b, lk_prot *ps, int64_t now) {
#ifdef LK_HAVE_BREAKER
  if (b)
    return lk_breaker_acquire_permit(b, now, &ps->permit);
#else
  (void)b, (void)ps, (void)now;
#endif
  return LK_OK;
}

void lk__breaker_record(lk_breaker *b, lk_prot *ps, int64_t now, int64_t duration,
                        lk_failure kind) {
#ifdef LK_HAVE_BREAKER
  if (b)
    lk_breaker_record_permit(b, &ps->permit, now, duration, kind);
#else
  (void)b, (void)ps, (void)now, (void)duration, (void)kind;
#endif
}

void lk__breaker_release(lk_breaker *b, lk_prot *ps) {
#ifdef LK_HAVE_BREAKER
  if (b)
    lk_breaker_release_permit(b, &ps->permit);
#else
  (void)b, (void)ps;
#endif
}

void lk__cm_protection_state(lk_call_metrics *m, lk_budget *b, lk_breaker *br, int64_t now) {
#ifdef LK_HAVE_CALLMETRICS
  if (!m)
    return;
#ifdef LK_HAVE_BUDGET
  if (b) {
    lk_call_metrics_budget_consumption(m, lk_budget_consumption(b, now));
    lk_call_metrics_budget_remaining(m, lk_budget_remaining(b, now));
  }
#endif
#ifdef LK_HAVE_BREAKER
  if (br) /* lk_breaker_state and lk_cm_breaker_state list the states in the same order */
    lk_call_metrics_breaker_state(m, (lk_cm_breaker_state)lk_breaker_get_state(br));
#endif
#endif
  (void)m, (void)b, (void)br, (void)now;
}

int64_t lk__limiter_reserve(lk_limiter *l, int64_t now, int64_t max_wait) {
#ifdef LK_HAVE_LIMITER
  if (l)
    return lk_limiter_reserve(l, now, max_wait);
#else
  (void)l, (void)now, (void)max_wait;
#endif
  return 0;
}

int lk__bulkhead_try(lk_bulkhead *b) {
#ifdef LK_HAVE_BULKHEAD
  if (b)
    return lk_bulkhead_try_acquire(b);
#else
  (void)b;
#endif
  return LK_OK;
}

void lk__bulkhead_release(lk_bulkhead *b) {
#ifdef LK_HAVE_BULKHEAD
  if (b)
    lk_bulkhead_release(b);
#else
  (void)b;
#endif
}

int64_t lk__bulkhead_queue(lk_bulkhead *b) {
#ifdef LK_HAVE_BULKHEAD
  if (b)
    return lk_bulkhead_queue_depth(b);
#else
  (void)b;
#endif
  return 0;
}

void lk__cm_call_start(lk_call_metrics *m) {
#ifdef LK_HAVE_CALLMETRICS
  lk_call_metrics_call_start(m);
#else
  (void)m;
#endif
}

void lk__cm_attempt(lk_call_metrics *m, int n, lk_failure kind, int status, int64_t dur) {
#ifdef LK_HAVE_CALLMETRICS
  lk_call_metrics_attempt_ex(m, n, kind, status, dur);
#else
  (void)m, (void)n, (void)kind, (void)status, (void)dur;
#endif
}

void lk__cm_call_end(lk_call_metrics *m, bool ok, bool first_ok, int attempts, int64_t lat,
                     int err) {
#ifdef LK_HAVE_CALLMETRICS
  lk_call_metrics_call_end(m, ok, first_ok, attempts, lat, err);
#else
  (void)m, (void)ok, (void)first_ok, (void)attempts, (void)lat, (void)err;
#endif
}

void lk__cm_resend(lk_call_metrics *m) {
#ifdef LK_HAVE_CALLMETRICS
  lk_call_metrics_resend_detected(m);
#else
  (void)m;
#endif
}

void lk__cm_bulkhead_wait(lk_call_metrics *m, int64_t wait, int64_t depth) {
#ifdef LK_HAVE_CALLMETRICS
  if (m) {
    lk_call_metrics_bulkhead_wait(m, wait);
    lk_call_metrics_bulkhead_queue_depth(m, depth);
  }
#else
  (void)m, (void)wait, (void)depth;
#endif
}
