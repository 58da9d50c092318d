/* SPDX-License-Identifier: MIT */
/* The protocol-independent steps of a logical call (protect.h), shared by the executor and the
 * HTTP driver. */
#include "exec/protect.h"

#include "core/sat.h"

#include <linkd/error.h>
#include <linkd/event.h>

#include <string.h>

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
  *waited = lk_sat_sub(now, s->start); /* granted or refused, the wait is over */
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

void lk__admission_init(lk_admission *a) {
  memset(a, 0, sizeof *a);
  a->slot.start = INT64_MIN;
  a->limiter_wait_from = a->breaker_wait_from = INT64_MIN;
}

static lk_admit_result refused(const lk_admit_env *env, lk_failure k, int e, lk_failure *kind,
                               int *err) {
  env->hooks->release_slot(env->ctx);
  *kind = k;
  *err = e;
  return LK_ADMIT_REFUSED;
}

/* lk__slot_acquire's notify: marks the slot granted, so the next step takes it, and wakes the
 * call the driver's way. */
static void admission_granted(void *ud) {
  lk_admission *a = ud;
  atomic_store(&a->slot.granted, true);
  a->wake(a->wake_ctx);
}

lk_admit_result lk__admit(lk_admission *a, const lk_admit_env *env, lk_prot *ps, int64_t now,
                          int64_t deadline, int64_t *timer_at, lk_failure *kind, int *err) {
  if (env->bulkhead && !a->slot.held) {
    /* A slot, or a place in the bulkhead's FIFO queue shared with blocking acquirers: the grant
     * arrives through env->hooks->granted; the timer covers pool_timeout and the deadline. */
    bool was_queued = a->slot.queued;
    int64_t until = 0, waited = 0;
    lk_failure k = LK_F_NONE;
    if (!was_queued) { /* while queued, the releasing thread may read these */
      a->wake = env->hooks->granted;
      a->wake_ctx = env->ctx;
    }
    int rc = lk__slot_acquire(&a->slot, env->bulkhead, now, deadline, env->pool_timeout,
                              admission_granted, a, &until, &waited, &k);
    if (rc == LK_EAGAIN) {
      *timer_at = until;
      return LK_ADMIT_LATER;
    }
    if (was_queued)
      env->hooks->wait_ended(env->ctx, now, LK_EV_WAIT_BULKHEAD, waited, rc == LK_OK);
    if (rc != LK_OK) {
      *kind = k;
      *err = rc;
      return LK_ADMIT_REFUSED; /* nothing held: the slot was never granted */
    }
    if (env->metrics) {
      lk_call_metrics_bulkhead_wait(env->metrics, waited);
      lk_call_metrics_bulkhead_queue_depth(env->metrics, lk_bulkhead_queue_depth(env->bulkhead));
    }
  }
  if (env->limiter && !a->limiter_reserved) {
    /* a token that comes too late for a useful attempt would be spent on a certain timeout */
    int64_t w = lk_limiter_reserve(env->limiter, now,
                                   lk_sat_sub(lk_sat_sub(deadline, now), env->min_attempt));
    if (w < 0)
      return refused(env, LK_F_RATE_LIMITED, LK_ERATE_LIMITED, kind, err);
    a->limiter_reserved = true;
    if (w > 0) {
      a->limiter_wait_from = now;
      *timer_at = lk_sat_add(now, w);
      return LK_ADMIT_LATER;
    }
  }
  if (a->limiter_wait_from != INT64_MIN) {
    env->hooks->wait_ended(env->ctx, now, LK_EV_WAIT_LIMITER, lk_sat_sub(now, a->limiter_wait_from),
                           true);
    a->limiter_wait_from = INT64_MIN;
  }
  if (env->breaker && env->hooks->breaker_acquire(env->ctx, ps, now) != LK_OK) {
    /* nothing is held while waiting for the breaker */
    int64_t at =
        lk__breaker_wait_until(env->breaker, env->breaker_wait, now, deadline, env->min_attempt);
    if (at > 0) {
      env->hooks->release_slot(env->ctx);
      if (a->breaker_wait_from == INT64_MIN)
        a->breaker_wait_from = now;
      *timer_at = at;
      return LK_ADMIT_LATER;
    }
    if (a->breaker_wait_from != INT64_MIN)
      env->hooks->wait_ended(env->ctx, now, LK_EV_WAIT_BREAKER,
                             lk_sat_sub(now, a->breaker_wait_from), false);
    return refused(env, LK_F_BREAKER_OPEN, LK_EBREAKER_OPEN, kind, err);
  }
  if (a->breaker_wait_from != INT64_MIN) {
    env->hooks->wait_ended(env->ctx, now, LK_EV_WAIT_BREAKER, lk_sat_sub(now, a->breaker_wait_from),
                           true);
    a->breaker_wait_from = INT64_MIN;
  }
  a->limiter_reserved = false; /* the token is the attempt's now */
  return LK_ADMIT_GO;
}
