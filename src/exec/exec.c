/* SPDX-License-Identifier: MIT */
/* The executor (exec.h): one logical call of any operation under the policy. One state machine
 * serves both kinds of call: an asynchronous call is stepped by the caller's loop (timer fired,
 * attempt ended); lk_exec_run steps the same machine from its own loop, calling the attempt
 * function in place and sleeping between steps. The protocol-independent pieces (protections,
 * decision, stop error) are the HTTP driver's, in protect.c. */
#include "exec/protect.h"

#include "core/sat.h"

#include <linkd/exec.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* lk_retry_decide wants a method: an RFC 9110 token that is not idempotent, so that only
 * policy.idempotent (passed as the "key") allows retrying a MAYBE_PROCESSED kind once sent. */
static const char exec_method[] = "EXEC";

/* --- cancellation ------------------------------------------------------------------------- */

struct lk_cancel {
  atomic_bool fired;
  pthread_mutex_t mu; /* with cv: synchronous calls using the token sleep here */
  pthread_cond_t cv;  /* CLOCK_MONOTONIC; broadcast on fire and on bulkhead grants */
};

static int cond_init_monotonic(pthread_cond_t *cv) {
  pthread_condattr_t a;
  if (pthread_condattr_init(&a) != 0)
    return LK_ESYS;
  int rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC) == 0 && pthread_cond_init(cv, &a) == 0
               ? LK_OK
               : LK_ESYS;
  pthread_condattr_destroy(&a);
  return rc;
}

lk_cancel *lk_cancel_new(void) {
  lk_cancel *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  atomic_init(&c->fired, false);
  if (pthread_mutex_init(&c->mu, NULL) != 0) {
    free(c);
    return NULL;
  }
  if (cond_init_monotonic(&c->cv) != LK_OK) {
    pthread_mutex_destroy(&c->mu);
    free(c);
    return NULL;
  }
  return c;
}

void lk_cancel_fire(lk_cancel *c) {
  if (!c)
    return;
  pthread_mutex_lock(&c->mu);
  atomic_store(&c->fired, true);
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

bool lk_cancel_fired(const lk_cancel *c) { return c && atomic_load(&c->fired); }

void lk_cancel_free(lk_cancel *c) {
  if (!c)
    return;
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

/* --- the call ----------------------------------------------------------------------------- */

typedef enum { ST_WAIT, ST_ATTEMPT, ST_DONE } exec_state;

/* Where a synchronous call without a token sleeps: the thread's own, set up once. */
typedef struct sleeper {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool ready;
} sleeper;

struct lk_exec_call {
  lk_exec_policy pol; /* copy; pol.traceparent points at `parent` below */
  lk_exec_loop loop;
  lk_cancel *cancel;
  lk_exec_done_fn done;
  void *ud;
  lk_exec_result res;
  const lk_clock *clock;
  lk_rand *rng;
  exec_state state;
  int64_t t0, deadline, timer_at; /* clock ns; timer_at: when to step next */
  int number;                     /* attempts handed to the operation */
  int64_t prev_delay;
  lk_admission adm; /* the bulkhead slot, limiter token and waits of the next attempt */
  lk_prot prot;
  int64_t att_start, att_timeout;
  lk_traceparent parent, span;
  bool have_pending, aborted, heap;
  bool kick;               /* lk_exec_timer ran from inside a hook: step once it has returned */
  int busy;                /* lk_exec_* entries of this call on its thread's stack */
  lk_exec_outcome pending; /* reported from inside a hook (loop.start, expire, an event) */
  /* synchronous calls */
  bool sync, run_attempt;
  lk_exec_fn fn;
  void *fn_ctx;
  lk_exec_attempt att;
  pthread_mutex_t *wmu; /* the token's or the thread's sleeper */
  pthread_cond_t *wcv;
  bool woken; /* under *wmu */
};

static int64_t now_of(const lk_exec_call *k) { return k->clock->now(k->clock); }

static _Thread_local lk_rand_fast tl_rng;
static _Thread_local bool tl_rng_ready;
static _Thread_local sleeper tl_sleeper;

static lk_rand *thread_rng(void) {
  if (!tl_rng_ready) {
    lk_rand_fast_init(&tl_rng); /* LK_ESYS still leaves a usable generator (rand.h) */
    tl_rng_ready = true;
  }
  return &tl_rng.base;
}

static void set_stop(lk_exec_result *r, const char *s) {
  size_t n = strlen(s);
  if (n >= sizeof r->stop)
    n = sizeof r->stop - 1;
  memcpy(r->stop, s, n);
  r->stop[n] = '\0';
}

/* The event scaffold; the caller fills the union. */
static void ev_init(const lk_exec_call *k, lk_event *ev, lk_event_type t, int attempt,
                    int64_t now) {
  memset(ev, 0, sizeof *ev);
  ev->size = (uint32_t)sizeof *ev;
  ev->type = t;
  ev->at = lk_sat_sub(now, k->t0);
  ev->attempt = attempt;
}

static void emit(const lk_exec_call *k, const lk_event *ev) {
  k->pol.on_event(k->pol.event_ctx, ev);
}

#define EMITTING(k) ((k)->pol.on_event != NULL)

static void emit_wait(lk_exec_call *k, int64_t now, lk_event_wait what, int64_t waited,
                      bool granted) {
  if (!EMITTING(k))
    return;
  lk_event ev;
  ev_init(k, &ev, LK_EV_WAIT, k->number + 1, now);
  ev.u.wait.what = what;
  ev.u.wait.waited = waited;
  ev.u.wait.granted = granted;
  emit(k, &ev);
}

static void emit_transition(lk_exec_call *k, int64_t now, int attempt, lk_breaker_state from,
                            lk_breaker_state to) {
  if (from == to)
    return;
  if (k->pol.metrics) /* lk_breaker_state and lk_cm_breaker_state list the same states */
    lk_call_metrics_breaker_state(k->pol.metrics, (lk_cm_breaker_state)to);
  if (!EMITTING(k))
    return;
  lk_event ev;
  ev_init(k, &ev, LK_EV_BREAKER_TRANSITION, attempt, now);
  ev.u.breaker.from = from;
  ev.u.breaker.to = to;
  emit(k, &ev);
}

static void emit_attempt_end(lk_exec_call *k, int64_t now, const lk_exec_attempt_info *a) {
  if (!EMITTING(k))
    return;
  lk_event ev;
  ev_init(k, &ev, LK_EV_ATTEMPT_END, a->number, now);
  ev.u.attempt_end.failure = a->failure;
  ev.u.attempt_end.sent = a->sent;
  ev.u.attempt_end.duration = a->duration;
  ev.u.attempt_end.retry_after = a->retry_after;
  emit(k, &ev);
}

/* The next timeline entry, zeroed: the caller's array while it has room, else scratch. */
static lk_exec_attempt_info *add_attempt(lk_exec_call *k, lk_exec_attempt_info *scratch) {
  lk_exec_result *r = &k->res;
  size_t i = (size_t)r->attempts++;
  lk_exec_attempt_info *a = r->timeline && i < r->timeline_cap ? &r->timeline[i] : scratch;
  memset(a, 0, sizeof *a);
  return a;
}

static void free_call(lk_exec_call *k) {
  if (k->heap)
    free(k);
}

/* Ends the call. The state is DONE before any callback runs, so a fallback, an event callback,
 * loop.timer or done that calls back into the call is told LK_ESTATE; an asynchronous call is
 * freed by the outermost lk_exec_* entry once everything on the stack is done with it (leave). */
static void finish(lk_exec_call *k, int64_t now, int err, lk_failure kind, const char *stop) {
  lk_exec_policy *p = &k->pol;
  k->state = ST_DONE;
  lk__slot_release(&k->adm.slot, p->bulkhead);
  lk_exec_result *r = &k->res;
  r->err = err;
  r->failure = kind;
  r->elapsed = lk_sat_sub(now, k->t0);
  set_stop(r, stop);
  /* the call is counted as it ended; a fallback is counted apart, by the error it replaced */
  bool ok = err == LK_OK;
  lk_call_metrics_call_end(p->metrics, ok, ok && k->number == 1, k->number, r->elapsed, err);
  int frc = !ok && p->fallback ? p->fallback(p->fallback_ctx, r) : LK_OK;
  if (!ok && p->fallback && frc != LK_OK) {
    r->fallback_err = frc; /* it was asked and could not help: the error stays */
  } else if (!ok && p->fallback) {
    r->original_err = err;
    r->fallback = true;
    r->err = LK_OK;
    lk_call_metrics_fallback(p->metrics, err);
    if (EMITTING(k)) {
      lk_event ev;
      ev_init(k, &ev, LK_EV_FALLBACK, 0, now);
      ev.u.fallback.err = err;
      ev.u.fallback.failure = kind;
      emit(k, &ev);
    }
  }
  if (EMITTING(k)) {
    lk_event ev;
    ev_init(k, &ev, LK_EV_CALL_END, 0, now);
    ev.u.end.err = r->err;
    ev.u.end.failure = kind;
    ev.u.end.attempts = r->attempts;
    ev.u.end.elapsed = r->elapsed;
    ev.u.end.fallback = r->fallback;
    emit(k, &ev);
  }
  if (!k->sync) {
    k->loop.timer(k->loop.ctx, k, -1); /* the call is gone after done: nothing may fire for it */
    k->done(k->ud, r);
  }
}

/* An attempt refused before the operation ran: recorded in the timeline and final. */
static void refuse(lk_exec_call *k, int64_t now, lk_failure kind, int err) {
  lk_exec_attempt_info scratch, *a = add_attempt(k, &scratch);
  a->number = k->number + 1;
  a->start = lk_sat_sub(now, k->t0);
  a->refused = true;
  a->failure = kind;
  a->retry_after = -1;
  a->decision.reason = LK_REASON_NOT_RETRYABLE;
  a->decision.failure = kind;
  a->decision.remaining = lk_sat_sub(k->deadline, now);
  lk_decision_format(&a->decision, a->reason, sizeof a->reason);
  emit_attempt_end(k, now, a);
  finish(k, now, err, kind, a->reason);
}

static void cancelled(lk_exec_call *k, int64_t now) {
  k->adm.limiter_reserved = false; /* a reserved token cannot be returned (limiter.h) */
  finish(k, now, LK_ECANCELED, LK_F_CANCELLED, "cancelled");
}

/* The bulkhead handed a slot to the queued call: runs on the releasing thread, the bulkhead's
 * lock held; the call cannot end meanwhile (ending it cancels the wait under that lock). */
static void slot_granted(void *ud) {
  lk_exec_call *k = ud;
  if (k->sync) {
    pthread_mutex_lock(k->wmu);
    k->woken = true;
    pthread_cond_broadcast(k->wcv);
    pthread_mutex_unlock(k->wmu);
  } else if (k->loop.wake) {
    k->loop.wake(k->loop.ctx, k);
  }
}

static void arm(lk_exec_call *k, int64_t now) {
  if (k->sync)
    return; /* lk_exec_run sleeps until timer_at itself */
  int64_t d = lk_sat_sub(k->timer_at, now);
  k->loop.timer(k->loop.ctx, k, d > 0 ? d : 0);
}

/* lk__admit's hooks (protect.h). */
static void wait_ended(void *ctx, int64_t now, lk_event_wait what, int64_t waited, bool granted) {
  emit_wait(ctx, now, what, waited, granted);
}

static void release_slot(void *ctx) {
  lk_exec_call *k = ctx;
  lk__slot_release(&k->adm.slot, k->pol.bulkhead);
}

/* Reports the transition an acquire caused (to the metrics as well as to events). */
static int breaker_acquire(void *ctx, lk_prot *ps, int64_t now) {
  lk_exec_call *k = ctx;
  lk_breaker_state before = lk_breaker_get_state(k->pol.breaker);
  int rc = lk__breaker_acquire(k->pol.breaker, ps, now);
  emit_transition(k, now, k->number + 1, before, lk_breaker_get_state(k->pol.breaker));
  return rc;
}

static const lk_admit_hooks admit_hooks = {slot_granted, wait_ended, release_slot, breaker_acquire};

static void end_attempt(lk_exec_call *k, const lk_exec_outcome *o);

/* Runs the protections in the fixed order and hands the next attempt to the operation, or
 * arms the timer for the moment to come back. */
static void step(lk_exec_call *k, int64_t now) {
  lk_exec_policy *p = &k->pol;
  if (k->aborted || lk_cancel_fired(k->cancel)) {
    cancelled(k, now);
    return;
  }
  int64_t remaining = lk_sat_sub(k->deadline, now);
  if (remaining <= 0) {
    finish(k, now, LK_EDEADLINE, LK_F_DEADLINE_EXCEEDED, "deadline exceeded");
    return;
  }
  lk_admit_env env = {p->bulkhead,     p->limiter,      p->breaker,
                      p->metrics,      p->pool_timeout, p->retry.cfg.min_attempt,
                      p->breaker_wait, &admit_hooks,    k};
  lk_failure kind = LK_F_NONE;
  int err = LK_OK;
  switch (lk__admit(&k->adm, &env, &k->prot, now, k->deadline, &k->timer_at, &kind, &err)) {
  case LK_ADMIT_LATER: arm(k, now); return;
  case LK_ADMIT_REFUSED: refuse(k, now, kind, err); return;
  case LK_ADMIT_GO: break;
  }
  if (k->aborted || lk_cancel_fired(k->cancel)) {
    /* asked for from an event of this admission (WAIT, BREAKER_TRANSITION): the attempt does
     * not start; the breaker's permit goes back, the slot with the call (finish) */
    lk__breaker_release(p->breaker, &k->prot);
    cancelled(k, now);
    return;
  }
  k->number++;
  k->att_start = now;
  k->att_timeout = lk_attempt_timeout(p->attempt_timeout, remaining);
  lk_exec_attempt *a = &k->att;
  a->number = k->number;
  a->timeout = k->att_timeout;
  a->end_at = lk_sat_add(now, k->att_timeout);
  a->remaining = remaining;
  a->cancel = k->cancel;
  a->traceparent = NULL;
  if (p->traceparent && lk_traceparent_child(&k->parent, k->rng, &k->span) == LK_OK)
    a->traceparent = &k->span;
  if (EMITTING(k)) {
    lk_event ev;
    ev_init(k, &ev, LK_EV_ATTEMPT_START, k->number, now);
    ev.u.attempt_start.timeout = a->timeout;
    ev.u.attempt_start.remaining = remaining;
    emit(k, &ev);
  }
  k->state = ST_ATTEMPT;
  if (k->sync) {
    k->run_attempt = true;
    return;
  }
  if (k->loop.expire) {
    k->timer_at = a->end_at;
    arm(k, now);
  }
  k->loop.start(k->loop.ctx, k, a); /* a report from inside it is pending: see leave() */
}

static void end_attempt(lk_exec_call *k, const lk_exec_outcome *o) {
  lk_exec_policy *p = &k->pol;
  int64_t now = now_of(k);
  k->state = ST_WAIT;
  /* a kind outside the enum is an operation that cannot say what happened: the most cautious
   * failure, as if it had not filled the outcome (TRANSPORT_ERROR, sent) */
  bool known = (unsigned)o->failure < LK_F__COUNT;
  lk_failure kind = known ? o->failure : LK_F_TRANSPORT_ERROR;
  bool sent = known ? o->sent : true;
  /* a cancel seen after a failed attempt ends the call; a success is still a success */
  bool cancel = kind != LK_F_NONE && (k->aborted || lk_cancel_fired(k->cancel));

  lk_exec_attempt_info scratch, *info = add_attempt(k, &scratch);
  info->number = k->number;
  info->start = lk_sat_sub(k->att_start, k->t0);
  info->duration = lk_sat_sub(now, k->att_start);
  info->timeout = k->att_timeout;
  info->failure = kind;
  info->sent = sent;
  info->retry_after = o->retry_after >= 0 ? o->retry_after : -1;

  lk_attempt at = {
      .number = k->number,
      .method = exec_method,
      .idempotency_key = p->idempotent,
      .request_fully_sent = sent,
      .failure = kind,
      .retry_after = info->retry_after,
      .prev_delay = k->prev_delay,
  };

  /* record */
  if (p->breaker) {
    if (cancel) { /* a local failure says nothing about the server */
      lk__breaker_release(p->breaker, &k->prot);
    } else {
      lk_breaker_state before = lk_breaker_get_state(p->breaker);
      lk__breaker_record(p->breaker, &k->prot, now, info->duration, kind);
      emit_transition(k, now, k->number, before, lk_breaker_get_state(p->breaker));
    }
  }
  /* the budget hears of a failure only when the policy would retry it (as for HTTP calls) */
  if (!cancel && (kind == LK_F_NONE || lk_retry_is_retryable(&p->retry, &at)))
    lk__budget_outcome(p->budget, &k->prot, now, kind == LK_F_NONE);
  lk_call_metrics_attempt_ex(p->metrics, k->number, kind, 0, info->duration);
  if (p->metrics && (p->budget || p->breaker))
    lk__cm_protection_state(p->metrics, p->budget, p->breaker, now);
  /* the adaptive limit hears of the attempt while its slot still counts as in use */
  if (p->adaptive && !cancel)
    lk_adaptive_record_inflight(p->adaptive, now, info->duration, lk_adaptive_outcome_of(kind), -1);
  lk__slot_release(&k->adm.slot, p->bulkhead);

  /* decide */
  lk_decision *d = &info->decision;
  d->failure = kind;
  d->remaining = lk_sat_sub(k->deadline, now);
  if (kind == LK_F_NONE) {
    d->reason = LK_REASON_SUCCESS;
    memcpy(info->reason, "success", 8);
    emit_attempt_end(k, now, info);
    finish(k, now, LK_OK, LK_F_NONE, "success");
    return;
  }
  if (cancel) {
    d->reason = LK_REASON_NOT_RETRYABLE;
    memcpy(info->reason, "cancelled", 10);
    emit_attempt_end(k, now, info);
    finish(k, now, LK_ECANCELED, LK_F_CANCELLED, "cancelled");
    return;
  }
  lk__decide(&p->retry, &at, d->remaining, k->rng, p->budget, &k->prot, now, d);
  lk_decision_format(d, info->reason, sizeof info->reason);
  emit_attempt_end(k, now, info);
  if (d->reason == LK_REASON_BUDGET && EMITTING(k)) {
    lk_event ev;
    ev_init(k, &ev, LK_EV_BUDGET_REFUSED, k->number, now);
    ev.u.budget.failure = kind;
    emit(k, &ev);
  }
  if (d->retry) {
    k->prev_delay = d->delay;
    k->timer_at = lk_sat_add(now, d->delay);
    if (EMITTING(k)) {
      lk_event ev;
      ev_init(k, &ev, LK_EV_RETRY_SCHEDULED, k->number, now);
      ev.u.retry.delay = d->delay;
      ev.u.retry.failure = kind;
      ev.u.retry.from_retry_after = d->from_retry_after;
      emit(k, &ev);
    }
    arm(k, now);
    return;
  }
  finish(k, now, lk__stop_err(d, LK_ENOTRETRYABLE), kind, info->reason);
}

/* --- policy --------------------------------------------------------------------------------- */

void lk_exec_policy_init_default(lk_exec_policy *p) {
  if (!p)
    return;
  memset(p, 0, sizeof *p);
  p->deadline = LK_SEC(3);
  p->deadline_at = lk_deadline_none();
  p->attempt_timeout = LK_MS(800);
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  lk_retry_policy_init(&p->retry, &rc, NULL);
  p->breaker_wait = true;
}

int lk_exec_policy_validate(const lk_exec_policy *p, const char **why) {
  const char *w = NULL;
  if (!p)
    w = "policy is NULL";
  else if (p->deadline <= 0)
    w = "deadline must be > 0";
  else if (p->attempt_timeout <= 0)
    w = "attempt_timeout must be > 0";
  else if (p->pool_timeout < 0)
    w = "pool_timeout must be >= 0";
  else if (p->retry.cfg.max_attempts < 1)
    w = "retry: max_attempts must be >= 1 (initialise it with lk_retry_policy_init)";
  /* the rest of what lk_retry_policy_init checks: a config edited after init (or never
   * initialised) must not reach the backoff arithmetic (a resolution of 0 divides by zero) */
  else if (p->retry.cfg.retry_after_cap < 0)
    w = "retry: retry_after_cap must be >= 0";
  else if (p->retry.cfg.min_attempt < 0)
    w = "retry: min_attempt must be >= 0";
  else
    lk_backoff_config_validate(&p->retry.cfg.backoff, &w);
  if (why)
    *why = w;
  return w ? LK_ECONFIG : LK_OK;
}

/* Sets up a call in `k` (zeroed by the caller) and starts its clock. */
static int call_init(lk_exec_call *k, const lk_exec_policy *p, lk_cancel *cancel,
                     lk_exec_attempt_info *timeline, size_t cap, const char **why) {
  k->res.timeline = timeline;
  k->res.timeline_cap = timeline ? cap : 0;
  k->res.failure = LK_F_NONE;
  int rc = lk_exec_policy_validate(p, why);
  if (rc != LK_OK)
    return rc;
  k->pol = *p;
  if (p->traceparent) {
    k->parent = *p->traceparent;
    k->pol.traceparent = &k->parent;
  }
  k->cancel = cancel;
  k->clock = p->clock ? p->clock : lk_clock_system();
  k->rng = p->rng ? p->rng : thread_rng();
  lk__admission_init(&k->adm);
  k->state = ST_WAIT;
  k->t0 = now_of(k);
  int64_t at = lk_sat_add(k->t0, p->deadline);
  k->deadline = p->deadline_at.at < at ? p->deadline_at.at : at;
  k->timer_at = k->t0;
  lk_call_metrics_call_start(p->metrics);
  lk__budget_request(p->budget, k->t0);
  if (EMITTING(k)) {
    lk_event ev;
    ev_init(k, &ev, LK_EV_CALL_START, 0, k->t0);
    emit(k, &ev);
  }
  return LK_OK;
}

/* A call that could not start: err, and in stop why (the field validation named) or the
 * error's message. */
static void fill_invalid(lk_exec_result *res, int err, const char *why) {
  lk_exec_attempt_info *tl = res->timeline;
  size_t cap = res->timeline_cap;
  memset(res, 0, sizeof *res);
  res->timeline = tl;
  res->timeline_cap = cap;
  res->err = err;
  set_stop(res, why ? why : lk_strerror(err));
}

/* --- synchronous calls ---------------------------------------------------------------------- */

static sleeper *thread_sleeper(void) {
  sleeper *s = &tl_sleeper;
  if (!s->ready) {
    if (pthread_mutex_init(&s->mu, NULL) != 0 || cond_init_monotonic(&s->cv) != LK_OK)
      return NULL;
    s->ready = true;
  }
  return s;
}

/* Waits until `until` on the call's clock, a bulkhead grant or the token firing. The time left
 * on the policy's clock becomes one CLOCK_MONOTONIC timeout, so any clock that moves in step
 * with real time works; a fake clock needs policy.sleep to move it. */
static void sync_sleep(lk_exec_call *k, int64_t until) {
  if (k->pol.sleep) {
    k->pol.sleep(k->pol.sleep_ctx, until);
    return;
  }
  int64_t left = lk_sat_sub(until, now_of(k));
  if (left <= 0)
    return;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t abs_ns = lk_sat_add(lk_sat_add((int64_t)ts.tv_sec * LK_NS_PER_S, ts.tv_nsec), left);
  ts.tv_sec = (time_t)(abs_ns / LK_NS_PER_S);
  ts.tv_nsec = (long)(abs_ns % LK_NS_PER_S);
  pthread_mutex_lock(k->wmu);
  while (!k->woken && !lk_cancel_fired(k->cancel)) {
    if (pthread_cond_timedwait(k->wcv, k->wmu, &ts) != 0)
      break; /* timed out (or an error: the caller re-checks either way) */
  }
  k->woken = false;
  pthread_mutex_unlock(k->wmu);
}

int lk_exec_run(const lk_exec_policy *p, lk_exec_fn fn, void *ctx, lk_cancel *cancel,
                lk_exec_result *res) {
  if (!res)
    return LK_EINVAL;
  if (!p || !fn) {
    fill_invalid(res, LK_EINVAL, !p ? "policy is NULL" : "attempt function is NULL");
    return LK_EINVAL;
  }
  lk_exec_call k;
  memset(&k, 0, sizeof k);
  k.sync = true;
  k.fn = fn;
  k.fn_ctx = ctx;
  if (cancel) {
    k.wmu = &cancel->mu;
    k.wcv = &cancel->cv;
  } else if (p->bulkhead || !p->sleep) {
    /* the thread's own sleeper, set up once per thread: a call allocates nothing */
    sleeper *s = thread_sleeper();
    if (!s) {
      fill_invalid(res, LK_ESYS, NULL);
      return LK_ESYS;
    }
    k.wmu = &s->mu;
    k.wcv = &s->cv;
  }
  const char *why = NULL;
  int rc = call_init(&k, p, cancel, res->timeline, res->timeline_cap, &why);
  if (rc != LK_OK) {
    fill_invalid(res, rc, why);
    return rc;
  }
  while (k.state != ST_DONE) {
    if (k.run_attempt) {
      k.run_attempt = false;
      lk_exec_outcome o = {LK_F_TRANSPORT_ERROR, true, -1};
      fn(ctx, &k.att, &o);
      end_attempt(&k, &o);
      continue;
    }
    int64_t now = now_of(&k);
    if (now >= k.timer_at || lk__slot_due(&k.adm.slot) || lk_cancel_fired(cancel)) {
      step(&k, now);
      continue;
    }
    sync_sleep(&k, k.timer_at);
  }
  *res = k.res;
  return res->err;
}

/* --- asynchronous calls --------------------------------------------------------------------- */

/* Re-entrancy. Hooks and callbacks run inside lk_exec_* functions; one that calls back into the
 * same call (lk_exec_attempt_end from loop.start or expire, lk_exec_timer from loop.timer,
 * lk_exec_abort from an event callback, ...) must not run a step in the middle of another: the
 * outer one would go on with a call that has moved, or been freed. So an entry made while the
 * call is busy only records what was asked (the outcome, a timer, an abort), and the outermost
 * entry runs it once the step in progress is over; a finished call is freed there too. */
static void enter(lk_exec_call *k) { k->busy++; }

static void timer_fired(lk_exec_call *k);

static void leave(lk_exec_call *k) {
  if (--k->busy > 0)
    return;
  k->busy = 1; /* what runs here is a step too */
  while (k->state != ST_DONE) {
    if (k->have_pending) { /* set in ST_ATTEMPT only, which only end_attempt leaves */
      k->have_pending = false;
      end_attempt(k, &k->pending);
    } else if (k->aborted && k->state == ST_WAIT) {
      cancelled(k, now_of(k));
    } else if (k->kick) {
      k->kick = false;
      timer_fired(k);
    } else {
      break;
    }
  }
  k->busy = 0;
  if (k->state == ST_DONE)
    free_call(k);
}

int lk_exec_start(const lk_exec_policy *p, const lk_exec_loop *loop, lk_cancel *cancel,
                  lk_exec_attempt_info *timeline, size_t timeline_cap, lk_exec_done_fn done,
                  void *ud, lk_exec_call **out) {
  if (out)
    *out = NULL;
  if (!p || !loop || !loop->start || !loop->timer || !done)
    return LK_EINVAL;
  int rc = lk_exec_policy_validate(p, NULL);
  if (rc != LK_OK)
    return rc;
  lk_exec_call *k = calloc(1, sizeof *k);
  if (!k)
    return LK_ENOMEM;
  k->heap = true;
  k->loop = *loop;
  k->done = done;
  k->ud = ud;
  rc = call_init(k, p, cancel, timeline, timeline_cap, NULL);
  if (rc != LK_OK) {
    free(k);
    return rc;
  }
  if (out)
    *out = k;
  enter(k);
  arm(k, k->t0); /* the first step runs from the loop, never inside start */
  leave(k);      /* (unless loop.timer stepped the call from inside: then it has run here) */
  return LK_OK;
}

int lk_exec_attempt_end(lk_exec_call *k, const lk_exec_outcome *o) {
  if (!k || !o)
    return LK_EINVAL;
  if (k->state != ST_ATTEMPT || k->sync || k->have_pending)
    return LK_ESTATE;
  if (k->busy) { /* reported from inside a hook: handled once it returns */
    k->pending = *o;
    k->have_pending = true;
    return LK_OK;
  }
  enter(k);
  end_attempt(k, o);
  leave(k);
  return LK_OK;
}

static void timer_fired(lk_exec_call *k) {
  int64_t now = now_of(k);
  if (k->state == ST_ATTEMPT) {
    if (k->loop.expire && now >= k->att.end_at)
      k->loop.expire(k->loop.ctx, k);
    else if (k->loop.expire)
      arm(k, now);
    return;
  }
  if (k->state != ST_WAIT)
    return;
  if (now >= k->timer_at || lk__slot_due(&k->adm.slot) || k->aborted || lk_cancel_fired(k->cancel))
    step(k, now);
  else
    arm(k, now);
}

int lk_exec_timer(lk_exec_call *k) {
  if (!k || k->sync)
    return LK_EINVAL;
  if (k->state == ST_DONE)
    return LK_ESTATE;
  if (k->busy) { /* from inside a hook (a loop that runs a 0 delay at once): after it */
    k->kick = true;
    return LK_OK;
  }
  enter(k);
  timer_fired(k);
  leave(k);
  return LK_OK;
}

int lk_exec_abort(lk_exec_call *k) {
  if (!k || k->sync)
    return LK_EINVAL;
  if (k->state == ST_DONE) /* from the fallback, CALL_END or done: the call is over */
    return LK_ESTATE;
  k->aborted = true;
  if (k->busy || k->state != ST_WAIT) /* after the step in progress / when the attempt reports */
    return LK_OK;
  enter(k);
  cancelled(k, now_of(k));
  leave(k);
  return LK_OK;
}
