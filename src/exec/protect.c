/* SPDX-License-Identifier: MIT */
/* The protocol-independent steps of a logical call (protect.h), shared by the executor and the
 * HTTP driver. */
#include "exec/protect.h"

#include "core/sat.h"

#include <linkd/error.h>

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

bool lk__kind_is_timeout(lk_failure k) {
  switch (k) {
  case LK_F_READ_TIMEOUT:
  case LK_F_DNS_TIMEOUT:
  case LK_F_CONNECT_TIMEOUT:
  case LK_F_TLS_TIMEOUT:
  case LK_F_POOL_TIMEOUT:
  case LK_F_WRITE_TIMEOUT:
  case LK_F_FIRST_BYTE_TIMEOUT:
  case LK_F_IDLE_TIMEOUT:
  case LK_F_DEADLINE_EXCEEDED: return true;
  default: return false;
  }
}

int64_t lk__breaker_wait_until(lk_breaker *b, bool wait, int64_t now, int64_t deadline,
                               int64_t min_attempt) {
  if (!wait || !b)
    return 0;
  int64_t at = lk_breaker_retry_at(b, now);
  if (at == LK_BREAKER_RETRY_UNKNOWN || at <= now) /* probes out: their outcome decides */
    at = lk_sat_add(now, LK_BREAKER_POLL);
  int64_t need = min_attempt > 0 ? min_attempt : LK_MS(1);
  if (at >= deadline || lk_sat_sub(deadline, at) < need)
    return 0;
  return at;
}

void lk__decide(const lk_retry_policy *rp, const lk_attempt *at, int64_t remaining, lk_rand *rng,
                lk_budget *budget, lk_prot *ps, int64_t now, lk_decision *d) {
  if (lk_retry_decide(rp, at, remaining, rng, d) != LK_OK) {
    d->retry = false;
    d->reason = LK_REASON_NOT_RETRYABLE;
  }
  if (remaining <= 0 && (d->retry || d->reason == LK_REASON_DELAY_TOO_LONG ||
                         d->reason == LK_REASON_NO_TIME_FOR_ATTEMPT)) {
    d->retry = false;
    d->delay = 0;
    d->reason = LK_REASON_DEADLINE;
  }
  if (d->retry && lk__budget_retry(budget, ps, now, lk__kind_is_timeout(at->failure)) != LK_OK) {
    d->retry = false;
    d->delay = 0;
    d->reason = LK_REASON_BUDGET;
  }
}

int lk__stop_err(const lk_decision *d, int not_retryable) {
  switch (d->reason) {
  case LK_REASON_NOT_RETRYABLE: return not_retryable;
  case LK_REASON_ATTEMPTS: return LK_EATTEMPTS;
  case LK_REASON_BUDGET: return LK_EBUDGET;
  default: return LK_EDEADLINE;
  }
}

int lk__slot_acquire(lk_slot *s, lk_bulkhead *b, int64_t now, int64_t deadline,
                     int64_t pool_timeout, void (*notify)(void *ud), void *ud, int64_t *until,
                     int64_t *waited, lk_failure *kind) {
  if (s->start == INT64_MIN)
    s->start = now;
  int64_t limit = deadline;
  int64_t pool_end = lk_sat_add(s->start, pool_timeout);
  if (pool_timeout > 0 && pool_end < limit)
    limit = pool_end;
  int rc;
  if (!s->queued) {
    atomic_store(&s->granted, false);
    rc = lk_bulkhead_enqueue(b, &s->w, notify, ud);
    s->queued = rc == LK_EAGAIN;
  } else if (atomic_load(&s->granted) && lk_bulkhead_waiter_granted(b, &s->w)) {
    /* (the locked check also waits for the notification to finish with this call) */
    s->queued = false;
    rc = LK_OK;
  } else if (now >= limit) {
    s->queued = false;
    rc = lk_bulkhead_waiter_cancel(b, &s->w) ? LK_EDEADLINE : LK_OK;
  } else {
    rc = LK_EAGAIN;
  }
  if (rc == LK_EAGAIN) {
    *until = limit;
    return LK_EAGAIN;
  }
  if (rc == LK_EBULKHEAD_FULL) {
    s->start = INT64_MIN;
    *kind = LK_F_BULKHEAD_FULL;
    return LK_EBULKHEAD_FULL;
  }
  if (rc != LK_OK) {
    s->start = INT64_MIN;
    *kind = limit == deadline ? LK_F_DEADLINE_EXCEEDED : LK_F_POOL_TIMEOUT;
    return limit == deadline ? LK_EDEADLINE : LK_EBULKHEAD_FULL;
  }
  s->held = true;
  *waited = lk_sat_sub(now, s->start);
  s->start = INT64_MIN;
  return LK_OK;
}

void lk__slot_release(lk_slot *s, lk_bulkhead *b) {
  if (s->queued) {
    s->queued = false;
    if (!lk_bulkhead_waiter_cancel(b, &s->w))
      s->held = true; /* granted meanwhile: given back below */
  }
  if (s->held) {
    lk_bulkhead_release(b);
    s->held = false;
  }
}
