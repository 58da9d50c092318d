/* SPDX-License-Identifier: MIT */
/* Glue to the shared protection objects that need per-call state or a NULL check on the driver's
 * path (budget, breaker; their gauges in the call metrics). Each is optional: NULL means "not
 * used". The limiter, bulkhead and call metrics are called directly where they are used. */
#include "http_internal.h"

#include <linkd/callmetrics.h>

void lk__budget_request(lk_budget *b, int64_t now) {
  if (b)
    lk_budget_record_request(b, now);
}

void lk__budget_outcome(lk_budget *b, lk_prot *ps, int64_t now, bool success) {
  if (!b)
    return;
  if (success)
    lk_budget_record_success_ticket(b, now, &ps->ticket);
  else
    lk_budget_record_failure(b, now);
}

int lk__budget_retry(lk_budget *b, lk_prot *ps, int64_t now, bool after_timeout) {
  return b ? lk_budget_acquire_retry_ticket(b, now, after_timeout, &ps->ticket) : LK_OK;
}

int lk__breaker_acquire(lk_breaker *b, lk_prot *ps, int64_t now) {
  return b ? lk_breaker_acquire_permit(b, now, &ps->permit) : LK_OK;
}

void lk__breaker_record(lk_breaker *b, lk_prot *ps, int64_t now, int64_t duration,
                        lk_failure kind) {
  if (b)
    lk_breaker_record_permit(b, &ps->permit, now, duration, kind);
}

void lk__breaker_release(lk_breaker *b, lk_prot *ps) {
  if (b)
    lk_breaker_release_permit(b, &ps->permit);
}

void lk__cm_protection_state(lk_call_metrics *m, lk_budget *b, lk_breaker *br, int64_t now) {
  if (!m)
    return;
  if (b) {
    lk_call_metrics_budget_consumption(m, lk_budget_consumption(b, now));
    lk_call_metrics_budget_remaining(m, lk_budget_remaining(b, now));
  }
  if (br) /* lk_breaker_state and lk_cm_breaker_state list the states in the same order */
    lk_call_metrics_breaker_state(m, (lk_cm_breaker_state)lk_breaker_get_state(br));
}
