/* SPDX-License-Identifier: MIT */
/* The logical call as a state machine (DESIGN.md section 8): protections around each attempt,
 * attempts as their own objects (several in flight when the call hedges), and the end of each
 * attempt in five steps: evidence, classify, record, decide, finish. Order per attempt (DESIGN.md
 * section 2): deadline, bulkhead, limiter, breaker, attempt; then record, decide, wait (a timer).
 */
#include "call_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int64_t now_of(const lk_call *k) { return k->clock->now(k->clock); }

static void set_stop(lk_http_result *r, const char *s) {
  size_t n = strlen(s);
  if (n >= sizeof r->stop)
    n = sizeof r->stop - 1;
  memcpy(r->stop, s, n);
  r->stop[n] = '\0';
}

/* The caller's per-attempt hook: the attempt as soon as its decision is made. */
static void notify_attempt(const lk_call *k, const lk_http_attempt_info *a) {
  if (k->pol.on_attempt && a)
    k->pol.on_attempt(k->pol.on_attempt_ctx, a);
}

/* --- events (event.h) ------------------------------------------------------------------------ */

#define EMITTING(k) ((k)->pol.on_event != NULL)

/* The event scaffold; the caller fills the union. */
static void ev_init(const lk_call *k, lk_event *ev, lk_event_type type, int attempt, int64_t now) {
  memset(ev, 0, sizeof *ev);
  ev->size = (uint32_t)sizeof *ev;
  ev->type = type;
  ev->at = lk_sat_sub(now, k->t0);
  ev->attempt = attempt;
}

static void emit(const lk_call *k, const lk_event *ev) { k->pol.on_event(k->pol.event_ctx, ev); }

static void emit_wait(lk_call *k, int64_t now, lk_event_wait what, int64_t waited, bool granted) {
  if (!EMITTING(k))
    return;
  lk_event ev;
  ev_init(k, &ev, LK_EV_WAIT, k->number + 1, now);
  ev.u.wait.what = what;
  ev.u.wait.waited = waited;
  ev.u.wait.granted = granted;
  emit(k, &ev);
}

static void emit_transition(lk_call *k, int64_t now, int attempt, lk_breaker_state from) {
  lk_breaker_state to = lk_breaker_get_state(k->pol.breaker);
  if (from == to)
    return;
  lk_event ev;
  ev_init(k, &ev, LK_EV_BREAKER_TRANSITION, attempt, now);
  ev.u.breaker.from = from;
  ev.u.breaker.to = to;
  emit(k, &ev);
}

/* The attempt's entry in the timeline, as an event and to the per-attempt hook. */
static void attempt_told(lk_call *k, const lk_http_attempt_info *a, int64_t now) {
  notify_attempt(k, a);
  if (!EMITTING(k) || !a)
    return;
  lk_event ev;
  ev_init(k, &ev, LK_EV_ATTEMPT_END, a->number, now);
  ev.u.attempt_end.failure = a->failure;
  ev.u.attempt_end.sent = a->request_sent;
  ev.u.attempt_end.duration = a->duration;
  ev.u.attempt_end.retry_after = a->retry_after;
  emit(k, &ev);
}

/* Acquires a breaker permit; with events on, reports a transition the acquire caused. */
static int breaker_acquire(lk_call *k, lk_prot *ps, int64_t now) {
  lk_breaker *b = k->pol.breaker;
  if (!b || !EMITTING(k))
    return lk__breaker_acquire(b, ps, now);
  lk_breaker_state before = lk_breaker_get_state(b);
  int rc = lk__breaker_acquire(b, ps, now);
  emit_transition(k, now, k->number + 1, before);
  return rc;
}

/* --- the one transition function ------------------------------------------------------------ */

/* Every change of state passes here, so the legal ones are written down once (curl's
 * multistate()). DONE is final: the call's memory is gone or reused right after. */
static void call_state(lk_call *k, lk_call_state to) {
#ifndef NDEBUG
  static const unsigned char legal[4] = {
      [LK_CALL_ADMIT] = 1u << LK_CALL_ADMIT | 1u << LK_CALL_PERFORM | 1u << LK_CALL_DONE,
      [LK_CALL_PERFORM] = 1u << LK_CALL_PERFORM | 1u << LK_CALL_BACKOFF | 1u << LK_CALL_DONE,
      [LK_CALL_BACKOFF] = 1u << LK_CALL_ADMIT | 1u << LK_CALL_DONE,
      [LK_CALL_DONE] = 0,
  };
  assert(legal[k->state] & 1u << to);
#endif
  k->state = to;
}

/* --- attempts ------------------------------------------------------------------------------- */

/* A released slot may be handed to a call waiting in the bulkhead's queue: counted as a change
 * (lk_http_client.changes) so that no start skips the pass that finds that call due. */
static void release_slot(lk_call *k) {
  k->cl->changes++;
  lk__slot_release(&k->adm.slot, k->pol.bulkhead);
}

static void try_release_slot(lk_try *t) {
  if (t->bulkhead_held) {
    t->k->cl->changes++;
    lk_bulkhead_release(t->k->pol.bulkhead);
    t->bulkhead_held = false;
  }
}

/* Takes the attempt out of its transport. */
static void try_detach(lk_try *t) {
  lk_call *k = t->k;
  if (!t->live)
    return;
  t->tp->stop(t);
  t->live = false;
  k->live--;
}

/* A free attempt object: the inline one for attempts the driver starts itself (nothing else is
 * in flight then), another for a hedge. NULL on no memory. */
static lk_try *try_get(lk_call *k, bool hedge) {
  if (!hedge)
    return &k->first;
  for (int i = 0; i < k->nextra; i++)
    if (!k->extra[i]->live)
      return k->extra[i];
  if (k->nextra == LK_HEDGE_MAX_HEDGES)
    return NULL;
  lk_try *t = calloc(1, sizeof *t);
  if (!t)
    return NULL;
  size_t need = k->req->nheaders + LK__DRIVER_HEADERS;
  t->nodes = need <= sizeof t->inline_nodes / sizeof t->inline_nodes[0]
                 ? t->inline_nodes
                 : malloc(need * sizeof *t->nodes);
  if (!t->nodes) {
    free(t);
    return NULL;
  }
  t->k = k;
  k->extra[k->nextra++] = t;
  return t;
}

void lk__call_free_extra(lk_call *k) {
  for (int i = 0; i < k->nextra; i++) {
    lk_try *t = k->extra[i];
    try_detach(t);
    if (t->ex)
      lk__client_easy_put(k->cl, t->ex);
    if (t->nodes != t->inline_nodes)
      free(t->nodes);
    lk__decoder_free(t->dec);
    lk__resp_free(&t->cur);
    free(t);
  }
  k->nextra = 0;
}

/* Starts attempt `t` (its protections already granted: slot, token, permit). LK_OK or
 * LK_ENOMEM (nothing started; the caller gives the permit and slot back). */
static int try_launch(lk_call *k, lk_try *t, int64_t now, bool hedge) {
  const lk_http_policy *p = &k->pol;
  int64_t remaining = lk_sat_sub(k->deadline, now);
  t->hedge = hedge;
  t->number = k->number + 1;
  lk_att *a = &t->att;
  memset(a, 0, sizeof *a);
  a->start = now;
  a->timeout = lk_attempt_timeout(p->attempt_timeout, remaining);
  a->ctimeout =
      p->connect_timeout > 0 && p->connect_timeout < a->timeout ? p->connect_timeout : a->timeout;
  a->end_at = lk_sat_add(now, a->timeout);
  lk__decoder_free(t->dec); /* the last attempt's ended with it; never carried over */
  t->dec = NULL;
  lk__resp_reset(&t->cur);
  lk__attempt_prepare(t);
  t->tp = k->native && lk__h1_target(t) ? &lk__h1_transport : &lk__curl_transport;
  if (t->tp->start(t) != LK_OK)
    return LK_ENOMEM;
  k->number++;
  t->live = true;
  k->live++;
  k->last_start = now;
  if (EMITTING(k)) {
    lk_event ev;
    ev_init(k, &ev, LK_EV_ATTEMPT_START, t->number, now);
    ev.u.attempt_start.timeout = a->timeout;
    ev.u.attempt_start.remaining = remaining;
    emit(k, &ev);
  }
  return LK_OK;
}

/* The earliest of an attempt's timers (clock ns) and which phase it is. */
static int64_t try_timer(const lk_try *t, lk_timer_kind *which) {
  const lk_http_policy *p = &t->k->pol;
  const lk_att *a = &t->att;
  int64_t at = a->end_at;
  lk_timer_kind w = LK_TIMER_ATTEMPT;
#define CAND(t, kind)                                                                              \
  do {                                                                                             \
    int64_t t_ = (t);                                                                              \
    if (t_ < at) {                                                                                 \
      at = t_;                                                                                     \
      w = (kind);                                                                                  \
    }                                                                                              \
  } while (0)
  if (a->got_bytes) {
    if (p->idle_timeout)
      CAND(lk_sat_add(a->t_last, p->idle_timeout), LK_TIMER_IDLE);
  } else if (a->prereq_calls) {
    if (!a->sent) {
      if (p->write_timeout)
        CAND(lk_sat_add(a->t_prereq, p->write_timeout), LK_TIMER_WRITE);
    } else if (p->first_byte_timeout) {
      CAND(lk_sat_add(a->t_sent, p->first_byte_timeout), LK_TIMER_FIRST_BYTE);
    }
  } else if (!a->sock_seen) {
    if (p->dns_timeout)
      CAND(lk_sat_add(a->start, p->dns_timeout), LK_TIMER_DNS);
  } else if (a->tls_started) {
    if (p->tls_timeout)
      CAND(lk_sat_add(a->t_tls, p->tls_timeout), LK_TIMER_TLS);
  } else {
    /* between socket creation and the request: TCP connecting, unless the transport says it is
     * up */
    if (!t->tp->connected(t))
      CAND(lk_sat_add(a->t_sock, a->ctimeout), LK_TIMER_CONNECT);
  }
#undef CAND
  *which = w;
  return at;
}

static lk_try *try_at(lk_call *k, int i) { return i == 0 ? &k->first : k->extra[i - 1]; }

int64_t lk__call_next_timer(lk_call *k) {
  if (k->state != LK_CALL_PERFORM) {
    if (lk__slot_due(&k->adm.slot))
      return INT64_MIN; /* a slot is waiting for it: due now */
    return k->timer_at;
  }
  int64_t at = k->timer_at; /* the next hedge */
  lk_timer_kind w;
  for (int i = 0; i <= k->nextra; i++) {
    const lk_try *t = try_at(k, i);
    if (t->live) {
      int64_t ta = try_timer(t, &w);
      if (ta < at)
        at = ta;
    }
  }
  return at;
}

/* --- finish --------------------------------------------------------------------------------- */

/* Hedged attempts end out of order; the timeline lists them by number. */
static void sort_timeline(lk_http_result *r) {
  for (size_t i = 1; i < r->nattempts; i++) {
    lk_http_attempt_info tmp = r->attempts[i];
    size_t j = i;
    while (j > 0 && r->attempts[j - 1].number > tmp.number) {
      r->attempts[j] = r->attempts[j - 1];
      j--;
    }
    r->attempts[j] = tmp;
  }
}

/* The substitute response of a fallback, built as if it had arrived (the same parser), so it
 * reads like any other. false on no memory or a header line that does not fit the rules. */
static bool build_response(lk_resp *r, const lk_http_fallback_response *f) {
  char line[64];
  int n = snprintf(line, sizeof line, "HTTP/1.1 %d Fallback\r\n", f->status);
  if (!lk__resp_header_line(r, line, (size_t)n))
    return false;
  for (size_t i = 0; i < f->nheaders; i++) {
    const char *h = f->headers[i];
    if (!h || strpbrk(h, "\r\n") || !strchr(h, ':'))
      return false;
    size_t hl = strlen(h);
    char *buf = malloc(hl + 3);
    if (!buf)
      return false;
    memcpy(buf, h, hl);
    memcpy(buf + hl, "\r\n", 3);
    bool fed = lk__resp_header_line(r, buf, hl + 2);
    free(buf);
    if (!fed)
      return false;
  }
  bool too_big = false;
  if (!lk__resp_header_line(r, "\r\n", 2) ||
      (f->body && f->body_len && !lk__resp_body(r, f->body, f->body_len, SIZE_MAX, &too_big)))
    return false;
  r->complete = true;
  return lk__resp_view(r);
}

/* The last stage: the caller's fallback may substitute a response for the failure. The timeline
 * stays as it was; the error it replaced is kept and counted by cause. */
static void fallback(lk_call *k, int64_t now) {
  lk_http_result *res = k->res;
  lk_http_fallback_response out = {.status = 200};
  if (k->pol.fallback(k->pol.fallback_ctx, res, &out) != LK_OK)
    return;
  lk_resp sub = {0};
  if (out.status < 100 || out.status > 999 || !build_response(&sub, &out)) {
    lk__resp_free(&sub);
    return;
  }
  int err = res->err;
  lk__resp_free(&res->resp);
  res->resp = sub;
  res->has_resp = true;
  res->original_err = err;
  res->fallback = true;
  res->err = LK_OK;
  /* "fallback after: <stop>", cut to fit */
  char stop[sizeof res->stop];
  memcpy(stop, "fallback after: ", 16);
  size_t n = strlen(res->stop);
  if (n > sizeof stop - 17)
    n = sizeof stop - 17;
  memcpy(stop + 16, res->stop, n);
  stop[16 + n] = '\0';
  set_stop(res, stop);
  lk_call_metrics_fallback(k->pol.metrics, err);
  if (EMITTING(k)) {
    lk_event ev;
    ev_init(k, &ev, LK_EV_FALLBACK, 0, now);
    ev.u.fallback.err = err;
    ev.u.fallback.failure = res->failure;
    emit(k, &ev);
  }
}

static void finish_at(lk_call *k, int64_t now, int err, lk_failure kind, const char *stop) {
  lk_http_client *c = k->cl;
  lk_http_result *res = k->res;
  release_slot(k);
  res->err = err;
  res->failure = kind;
  res->elapsed = lk_sat_sub(now, k->t0);
  if (stop)
    set_stop(res, stop);
  if (k->nextra)
    sort_timeline(res);
  if (res->has_resp && !lk__resp_settle(&res->resp, res->inl, sizeof res->inl, &k->first.cur) &&
      res->err == LK_OK)
    res->err = LK_ENOMEM;
  bool ok = res->err == LK_OK;
  lk_call_metrics_call_end(k->pol.metrics, ok, ok && k->number == 1, k->number, res->elapsed,
                           res->err);
  if (!ok && k->pol.fallback)
    fallback(k, now);
  if (EMITTING(k)) {
    lk_event ev;
    ev_init(k, &ev, LK_EV_CALL_END, 0, now);
    ev.u.end.err = res->err;
    ev.u.end.failure = res->failure;
    ev.u.end.attempts = (int)res->nattempts;
    ev.u.end.elapsed = res->elapsed;
    ev.u.end.fallback = res->fallback;
    emit(k, &ev);
  }
  try_detach(&k->first);
  if (k->ex) {
    lk__client_easy_put(c, k->ex);
    k->ex = NULL;
  }
  lk__call_free_extra(k);
  lk__call_net_free(k); /* every handle of the call is back in the pool, without them */
  lk__decoder_free(k->first.dec);
  k->first.dec = NULL;
  free(k->ua_line);
  if (k->cancel)
    lk__client_tok_unregister(c, k->cancel);
  call_state(k, LK_CALL_DONE);
  lk__client_unlink(c, k);
  lk_http_request_free(k->req);
  if (k->first.nodes != k->first.inline_nodes)
    free(k->first.nodes);
  lk_http_done_fn done = k->done;
  void *ud = k->ud;
  if (c->nspare < LK_SPARE_MAX) {
    /* large response buffers are not kept by the many spares, only small ones */
    if (!k->first.cur.borrowed && (k->first.cur.body_cap > 16384 || k->first.cur.hdr_cap > 16384))
      lk__resp_free(&k->first.cur);
    k->next = c->spare; /* its memory serves a later call */
    c->spare = k;
    c->nspare++;
  } else {
    lk__resp_free(&k->first.cur);
    free(k);
  }
  done(ud, res);
}

/* --- admission: deadline, bulkhead, limiter, breaker ------------------------------------------ */

/* The bulkhead handed a slot to the queued call: runs on the releasing thread, the bulkhead's
 * lock held; the call cannot end meanwhile (ending it cancels the wait under that lock). */
static void bulkhead_granted(void *ud) {
  lk_call *k = ud;
  lk__client_notify(k->cl);
}

/* lk__admit's hooks (protect.h). */
static void admit_wait_ended(void *ctx, int64_t now, lk_event_wait what, int64_t waited,
                             bool granted) {
  emit_wait(ctx, now, what, waited, granted);
}

static void admit_release_slot(void *ctx) { release_slot(ctx); }

static int admit_breaker_acquire(void *ctx, lk_prot *ps, int64_t now) {
  return breaker_acquire(ctx, ps, now);
}

static const lk_admit_hooks admit_hooks = {bulkhead_granted, admit_wait_ended, admit_release_slot,
                                           admit_breaker_acquire};

/* An attempt refused before any I/O: recorded in the timeline (phase QUEUED) and final. */
static void refuse(lk_call *k, int64_t now, lk_failure kind, int err) {
  lk_http_attempt_info *a = lk__result_add_attempt(k->res);
  if (a) {
    a->number = k->number + 1;
    a->start = lk_sat_sub(now, k->t0);
    a->phase = LK_PHASE_QUEUED;
    a->failure = a->classified = kind;
    a->retry_after = -1;
    a->decision.reason = LK_REASON_NOT_RETRYABLE;
    a->decision.failure = kind;
    a->decision.remaining = lk_sat_sub(k->deadline, now);
    lk_decision_format(&a->decision, a->reason, sizeof a->reason);
    attempt_told(k, a, now);
  }
  finish_at(k, now, err, kind, a ? a->reason : lk_strerror(err));
}

/* ADMIT: asks each protection in turn; starts the attempt when all agree, waits (timer_at) when
 * one says later, ends the call when one refuses. */
static void admit(lk_call *k, int64_t now) {
  lk_http_policy *p = &k->pol;
  if (!k->ev_started && EMITTING(k)) {
    k->ev_started = true;
    lk_event ev;
    ev_init(k, &ev, LK_EV_CALL_START, 0, k->t0);
    emit(k, &ev);
  }
  if (lk_http_cancel_fired(k->cancel)) {
    lk__call_abort(k);
    return;
  }
  int64_t remaining = lk_sat_sub(k->deadline, now);
  if (remaining <= 0) {
    release_slot(k);
    finish_at(k, now, LK_EDEADLINE, LK_F_DEADLINE_EXCEEDED, "deadline exceeded");
    return;
  }
  lk_try *t = &k->first;
  lk_admit_env env = {p->bulkhead,     p->limiter,      p->breaker,
                      p->metrics,      p->pool_timeout, p->retry.cfg.min_attempt,
                      p->breaker_wait, &admit_hooks,    k};
  lk_failure kind = LK_F_NONE;
  int err = LK_OK;
  switch (lk__admit(&k->adm, &env, &t->prot, now, k->deadline, &k->timer_at, &kind, &err)) {
  case LK_ADMIT_LATER: return;
  case LK_ADMIT_REFUSED: refuse(k, now, kind, err); return;
  case LK_ADMIT_GO: break;
  }
  if (try_launch(k, t, now, false) != LK_OK) {
    lk__breaker_release(p->breaker, &t->prot);
    finish_at(k, now, LK_ENOMEM, LK_F_TRANSPORT_ERROR, "libcurl refused the transfer");
    return;
  }
  t->bulkhead_held = k->adm.slot.held; /* the slot is the attempt's now */
  k->adm.slot.held = false;
  k->round_start = now;
  k->hedges = 0;
  k->timer_at = k->hedging ? lk_sat_add(now, lk_hedge_delay(&p->hedge)) : INT64_MAX;
  call_state(k, LK_CALL_PERFORM);
}

/* --- hedges --------------------------------------------------------------------------------- */

/* PERFORM, the hedge timer is due: one more attempt alongside those in flight, if it is due by
 * the hedge policy, leaves time before the deadline, and every protection admits it at once
 * (a hedge that has to wait is no use: the attempts in flight are already waiting). The retry
 * budget pays for it as for a retry; a refusal ends hedging for this round. */
static void hedge(lk_call *k, int64_t now) {
  lk_http_policy *p = &k->pol;
  lk_hedge_policy hp = p->hedge;
  hp.spend = NULL; /* paid below, once the other protections agreed */
  lk_hedge_decision d = lk_hedge_decide(&hp, k->round_start, now, k->hedges);
  k->timer_at = INT64_MAX;
  if (!d.send) {
    k->timer_at = d.next_at; /* not yet due (a percentile delay grew), or no more */
    return;
  }
  int64_t need = p->retry.cfg.min_attempt > 0 ? p->retry.cfg.min_attempt : LK_MS(1);
  if (lk_sat_sub(k->deadline, now) < need || k->number >= p->retry.cfg.max_attempts)
    return;
  lk_try *t = try_get(k, true);
  if (!t)
    return;
  bool slot = false;
  if (p->bulkhead) {
    if (lk_bulkhead_try_acquire(p->bulkhead) != LK_OK)
      return;
    slot = true;
  }
  if (breaker_acquire(k, &t->prot, now) != LK_OK) {
    if (slot)
      lk_bulkhead_release(p->bulkhead);
    return;
  }
  int64_t prev_start = k->last_start;
  bool paid = lk__budget_retry(p->budget, &k->prot, now, false) == LK_OK &&
              (!p->hedge.spend || p->hedge.spend(p->hedge.spend_ctx, now) == LK_OK) &&
              (!p->limiter || lk_limiter_try_acquire(p->limiter, now) == LK_OK);
  if (!paid || try_launch(k, t, now, true) != LK_OK) {
    lk__breaker_release(p->breaker, &t->prot);
    if (slot)
      lk_bulkhead_release(p->bulkhead);
    return;
  }
  t->bulkhead_held = slot;
  k->hedges++;
  k->res->hedges++;
  k->timer_at = d.next_at;
  if (EMITTING(k)) {
    lk_event ev;
    ev_init(k, &ev, LK_EV_HEDGE_STARTED, t->number, now);
    ev.u.hedge.in_flight = k->live;
    ev.u.hedge.delay = lk_sat_sub(now, prev_start);
    emit(k, &ev);
  }
}

/* --- the end of an attempt: evidence, classify, record, decide, finish ------------------------ */

/* What one ended attempt left behind, passed from step to step. */
typedef struct lk_outcome {
  int64_t now;
  lk_evidence ev;
  lk_conn_facts facts;         /* the transport's, read once with the evidence */
  lk_failure kind, classified; /* after and before the classification hook */
  int64_t retry_after;         /* ns, -1 none */
  bool cancelled;
  bool lost;                  /* cancelled because another attempt of the call answered first */
  lk_http_attempt_info *info; /* the timeline entry (or scratch space) */
  lk_http_attempt_info scratch;
  lk_attempt at; /* the attempt as the retry policy sees it */
} lk_outcome;

/* evidence: everything known about how the transfer ended. */
static void attempt_evidence(lk_try *t, int code, lk_timer_kind timer, lk_outcome *o) {
  lk_call *k = t->k;
  lk_att *a = &t->att;
  lk_evidence *e = &o->ev;
  bool cancelled = o->cancelled;
  /* A head that never ended is no response: libcurl tells of its status line at once, the
   * native transport only with the whole head. Forgotten here, so both report alike (status 0,
   * no response kept), and the peer's close or reset inside it is junk, not a cut-short body
   * (libcurl 7.88 even calls a head without its blank line a complete transfer). */
  bool head_cut = t->cur.status_seen && !t->cur.headers_done && !a->head_junk;
  if (head_cut)
    lk__resp_reset(&t->cur);
  memset(e, 0, sizeof *e);
  e->curl_code = code;
  e->status = t->cur.status_seen ? t->cur.status : 0;
  e->https = k->https;
  e->socket_opened = a->sock_seen;
  /* the connection evidence matters only for failures before the first write */
  bool failed = code != CURLE_OK || timer != LK_TIMER_NONE || cancelled;
  lk_conn_facts *f = &o->facts;
  t->tp->facts(t, failed, f);
  e->os_errno = f->os_errno;
  e->connected = a->reused || f->connected || a->tls_started || a->prereq_calls > 0;
  e->tls_done = k->https && (a->reused || f->tls_done || a->prereq_calls > 0);
  e->prereq = a->prereq_calls > 0;
  e->fully_sent = a->sent && code != CURLE_SEND_ERROR;
  /* libcurl refuses a status line it cannot read before any callback sees a byte of it */
  e->got_bytes =
      a->got_bytes ||
      (a->sent && (code == CURLE_WEIRD_SERVER_REPLY || code == CURLE_UNSUPPORTED_PROTOCOL));
  e->complete = code == CURLE_OK && timer == LK_TIMER_NONE && !cancelled;
  if (e->complete) {
    e->framing = t->cur.headers_done ? lk__resp_framing(&t->cur, k->req->head) : LK_F_JUNK_RESPONSE;
    e->complete = e->framing == LK_F_NONE;
  } else if (a->head_junk || (head_cut && code == CURLE_PARTIAL_FILE)) {
    /* the transport refused the head when it ended, or the peer's close cut it short once
     * libcurl knew a length (a reset is a receive error: junk without a status; libcurl's own
     * timeout keeps its kind) */
    e->framing = LK_F_JUNK_RESPONSE;
  }
  /* compressed: a body whose bytes do not decode is junk, whatever the transfer says; one whose
   * compressed stream stopped short of its end is cut short even when the transfer completed
   * (libcurl 7.88 would call it whole) */
  if (a->body_junk) {
    e->framing = LK_F_JUNK_RESPONSE;
    e->complete = false;
  } else if (e->complete && !lk__decoder_done(t->dec)) {
    e->framing = LK_F_PARTIAL_BODY;
    e->complete = false;
  }
  lk__decoder_free(t->dec);
  t->dec = NULL;
  /* Past LK_HTTP_HEAD_MAX (the transport refused the bytes), or past libcurl's own per-line
   * limit: libcurl 7.88 reports that as CURLE_OUT_OF_MEMORY, 8.6+ as CURLE_TOO_LARGE (100, not
   * in 7.88's headers); the driver's own allocation failures end the transfer with
   * CURLE_WRITE_ERROR instead */
  e->head_too_big = a->head_too_big || ((code == CURLE_OUT_OF_MEMORY || code == 100) &&
                                        a->got_bytes && !t->cur.headers_done);
  e->resend_aborted = a->resend_aborted;
  e->too_big = a->too_big;
  e->peer_alert = f->peer_alert;
  e->cancelled = cancelled;
  e->timer = timer;
}

/* The response's Retry-After in ns, -1 for none. Given more than once, the values must agree:
 * which of two the server meant is unknown, so disagreeing ones (or one that does not parse
 * beside one that does) are all ignored rather than the first taken. */
static int64_t retry_after_of(const lk_resp *r) {
  int64_t at = -1, wall = 0;
  const char *p = r->hdr;
  for (size_t i = 0; i < r->nhdr; i++) {
    const char *v = p + strlen(p) + 1;
    if (strcasecmp(p, "Retry-After") == 0) {
      if (at < 0)
        wall = lk_wall_ns(); /* one reading for every line */
      int64_t d;
      if (lk_http_retry_after_parse(v, strlen(v), wall, &d) != LK_OK || (at >= 0 && d != at))
        return -1;
      at = d;
    }
    p = v + strlen(v) + 1;
  }
  return at;
}

/* classify: the failure kind from the evidence, then the caller's hook; Retry-After. */
static void attempt_classify(lk_try *t, lk_outcome *o) {
  lk_call *k = t->k;
  const lk_http_policy *p = &k->pol;
  o->kind = o->classified = lk__classify(&o->ev);
  t->cur.complete = o->ev.complete;
  o->retry_after = -1;
  if (!t->cur.status_seen)
    return;
  if (o->ev.status >= 300)
    o->retry_after = retry_after_of(&t->cur);
  /* A keyed request answered 409 with a Retry-After: the key's first request is still being
   * processed (libraryd, the IETF Idempotency-Key draft). This one was not; asking again later
   * gets the first one's result. Without a key or a Retry-After a 409 is the resource's verdict. */
  if (o->kind == LK_F_CLIENT_4XX && o->ev.status == 409 && o->retry_after >= 0 && k->res->has_key)
    o->kind = LK_F_KEY_IN_USE;
  if (p->classify && !o->cancelled) {
    if (lk__resp_view(&t->cur)) {
      lk_failure f = p->classify(p->classify_ctx, &t->cur.view, o->kind);
      if ((unsigned)f < LK_F__COUNT)
        o->kind = f;
    } else {
      /* the hook cannot see the response: what it would say is unknown, so the attempt fails
       * (LK_ENOMEM below) rather than pass as whatever the status alone says */
      t->att.oom = true;
      if (o->kind == LK_F_NONE)
        o->kind = LK_F_TRANSPORT_ERROR;
    }
  }
}

/* record: the timeline entry, the response kept, breaker, budget, metrics, adaptive limit; the
 * attempt's bulkhead slot is given back. */
static void attempt_record(lk_try *t, lk_outcome *o) {
  lk_call *k = t->k;
  lk_http_policy *p = &k->pol;
  lk_att *a = &t->att;
  lk_http_result *res = k->res;
  int64_t now = o->now;
  lk_failure kind = o->kind;
  lk_http_attempt_info *info = lk__result_add_attempt(res);
  if (!info) {
    memset(&o->scratch, 0, sizeof o->scratch);
    info = &o->scratch;
  }
  o->info = info;
  info->number = t->number;
  info->hedge = t->hedge;
  info->start = lk_sat_sub(a->start, k->t0);
  info->duration = lk_sat_sub(now, a->start);
  info->phase = lk__phase_of(&o->ev);
  info->failure = kind;
  info->classified = o->classified;
  info->status = o->ev.status;
  info->curl_code = o->ev.timer != LK_TIMER_NONE || o->cancelled ? 0 : o->ev.curl_code;
  info->bytes_sent = o->facts.bytes_sent;
  info->bytes_received = a->rx_bytes;
  info->request_sent = o->ev.fully_sent;
  info->reused_connection = a->reused;
  info->native = t->tp == &lk__h1_transport;
  info->resends = a->resends;
  info->timeout = a->timeout;
  info->connect_timeout = a->ctimeout;
  info->retry_after = o->retry_after;
  res->resends += a->resends;

  /* the last real response is kept, so exhaustion returns what the server last said; an
   * attempt that lost to another's answer leaves that answer in place */
  if (t->cur.status_seen && !o->lost) {
    lk_resp tmp = res->resp;
    res->resp = t->cur;
    t->cur = tmp;
    res->has_resp = true;
  }

  o->at = (lk_attempt){
      .number = t->number,
      .method = k->req->method,
      .idempotency_key = res->has_key || p->assume_idempotent,
      .request_fully_sent = o->ev.fully_sent,
      .failure = kind,
      .retry_after = o->retry_after,
      .prev_delay = k->prev_delay,
  };

  bool local = o->cancelled || a->oom; /* a local failure says nothing about the server */
  if (local) {
    lk__breaker_release(p->breaker, &t->prot);
  } else if (p->breaker && EMITTING(k)) {
    lk_breaker_state before = lk_breaker_get_state(p->breaker);
    lk__breaker_record(p->breaker, &t->prot, now, info->duration, kind);
    emit_transition(k, now, t->number, before);
  } else {
    lk__breaker_record(p->breaker, &t->prot, now, info->duration, kind);
  }
  /* The budget hears of a failure only when the policy would retry it (gRPC's throttling counts
   * only retryable statuses): a 404, or a 503 to a POST without a key, costs no retry and must
   * not drain a TOKEN budget. RATIO and QUOTA ignore failures (budget.h). */
  if (!o->cancelled && (kind == LK_F_NONE || (!a->too_big && !a->oom && !o->ev.head_too_big &&
                                              lk_retry_is_retryable(&p->retry, &o->at))))
    lk__budget_outcome(p->budget, &k->prot, now, kind == LK_F_NONE);
  lk_call_metrics_attempt_ex(p->metrics, t->number, kind, o->ev.status, info->duration);
  if (p->metrics && (p->budget || p->breaker))
    lk__cm_protection_state(p->metrics, p->budget, p->breaker, now);
  /* the adaptive limit hears of the attempt while its slot still counts as in use */
  if (p->adaptive && !local)
    lk_adaptive_record_inflight(p->adaptive, now, info->duration, lk_adaptive_outcome_of(kind), -1);
  try_release_slot(t);
}

static bool status_kind(lk_failure k) {
  lk_failure s = lk_failure_seed_kind(k);
  return s == LK_F_SERVER_5XX || s == LK_F_CLIENT_4XX || s == LK_F_TOO_MANY_REQUESTS ||
         k == LK_F_RESULT_RETRYABLE;
}

/* What the call does after an attempt ended. */
typedef enum lk_next { LK_NEXT_FINISH, LK_NEXT_RETRY, LK_NEXT_WAIT_OTHERS } lk_next;

/* decide: the attempt's decision (into its timeline entry) and what the call does next; *err
 * is the call's error when it finishes. */
static lk_next attempt_decide(lk_try *t, lk_outcome *o, int *err) {
  lk_call *k = t->k;
  lk_http_policy *p = &k->pol;
  lk_att *a = &t->att;
  lk_http_attempt_info *info = o->info;
  int64_t now = o->now;
  lk_failure kind = o->kind;
  lk_decision *d = &info->decision;
  memset(d, 0, sizeof *d);
  d->failure = kind;
  d->remaining = lk_sat_sub(k->deadline, now);
  if (kind == LK_F_NONE) {
    d->reason = LK_REASON_SUCCESS;
    memcpy(info->reason, "success", 8);
    *err = a->oom ? LK_ENOMEM : LK_OK;
    return LK_NEXT_FINISH;
  }
  if (o->cancelled) {
    d->reason = LK_REASON_NOT_RETRYABLE;
    snprintf(info->reason, sizeof info->reason, "cancelled");
    *err = LK_ECANCELED;
    return LK_NEXT_FINISH;
  }
  bool others = k->live > 0;
  if (a->too_big || a->oom || o->ev.head_too_big) {
    /* asking again would get the same oversized response; memory is a local failure */
    d->reason = LK_REASON_NOT_RETRYABLE;
    snprintf(info->reason, sizeof info->reason, "%s",
             a->too_big ? "response body too big"
             : a->oom   ? "out of memory"
                        : "response head too large");
    *err = a->oom ? LK_ENOMEM : LK_ETOOBIG;
    return LK_NEXT_FINISH;
  }
  /* the budget is asked below, once the response has had its say */
  lk__decide(&p->retry, &o->at, d->remaining, k->rng, NULL, &k->prot, now, d);
  /* the tier below has retried already: retrying here would multiply its attempts */
  bool retried_below = d->retry && p->honor_retried && o->ev.status != 0 && !o->lost &&
                       lk__resp_find(&k->res->resp, LK_HTTP_RETRIED_HEADER) != NULL;
  if (retried_below) {
    d->retry = false;
    d->delay = 0;
    d->reason = LK_REASON_NOT_RETRYABLE;
  }
  /* a streamed body that has started cannot be sent again */
  bool stream_spent = d->retry && k->req->stream && k->req->stream_read > 0;
  if (stream_spent) {
    d->retry = false;
    d->delay = 0;
    d->reason = LK_REASON_NOT_RETRYABLE;
  }
  if (others && !(d->reason == LK_REASON_NOT_RETRYABLE && o->ev.status != 0)) {
    /* Another attempt is still in flight: its answer decides (a definitive HTTP answer, such as
     * a 404, would end the call now, as a success does). */
    d->retry = false;
    d->delay = 0;
    lk_decision_format(d, info->reason, sizeof info->reason);
    size_t n = strlen(info->reason);
    snprintf(info->reason + n, sizeof info->reason - n, "; another attempt in flight");
    return LK_NEXT_WAIT_OTHERS;
  }
  /* with another attempt in flight no retry is scheduled, so the budget is asked only here */
  if (d->retry && lk__budget_retry(p->budget, &k->prot, now, lk__kind_is_timeout(kind)) != LK_OK) {
    d->retry = false;
    d->delay = 0;
    d->reason = LK_REASON_BUDGET;
  }
  if (retried_below)
    snprintf(info->reason, sizeof info->reason, "upstream already retried");
  else if (stream_spent)
    snprintf(info->reason, sizeof info->reason, "streamed body not replayable");
  else
    lk_decision_format(d, info->reason, sizeof info->reason);
  if (d->retry)
    return LK_NEXT_RETRY;
  *err = lk__stop_err(d, o->ev.status != 0 && status_kind(kind) ? LK_EHTTP : LK_ENOTRETRYABLE);
  return LK_NEXT_FINISH;
}

/* Ends attempt `t`, which has left the multi handle. Every step but the decision. */
static void attempt_settle(lk_try *t, int code, lk_timer_kind timer, lk_outcome *o) {
  attempt_evidence(t, code, timer, o);
  attempt_classify(t, o);
  attempt_record(t, o);
}

/* Cancels the attempts still in flight once `winner` answered (or the call ends otherwise):
 * each is recorded as cancelled, without a word to the breaker or the budget. */
static void cancel_others(lk_call *k, const lk_try *winner, int64_t now) {
  for (int i = 0; i <= k->nextra && k->live > 0; i++) {
    lk_try *t = try_at(k, i);
    if (!t->live || t == winner)
      continue;
    lk_outcome o = {.now = now, .cancelled = true, .lost = winner != NULL};
    try_detach(t);
    attempt_settle(t, CURLE_OK, LK_TIMER_NONE, &o);
    lk_decision *d = &o.info->decision;
    memset(d, 0, sizeof *d);
    d->reason = LK_REASON_NOT_RETRYABLE;
    d->failure = o.kind;
    d->remaining = lk_sat_sub(k->deadline, now);
    if (winner)
      snprintf(o.info->reason, sizeof o.info->reason, "cancelled: attempt %d answered first",
               winner->number);
    else
      snprintf(o.info->reason, sizeof o.info->reason, "cancelled");
    attempt_told(k, o.info, now);
  }
}

/* The one path from an ended attempt to what the call does next. */
static void attempt_end(lk_try *t, int code, lk_timer_kind timer, bool cancelled) {
  lk_call *k = t->k;
  lk_outcome o; /* every field is written by the steps before it is read (no 500-byte zeroing
                 per attempt on the hot path) */
  o.now = now_of(k);
  o.cancelled = cancelled;
  o.lost = false;
  try_detach(t);
  attempt_settle(t, code, timer, &o);
  int err = LK_OK;
  lk_next next = attempt_decide(t, &o, &err);
  attempt_told(k, o.info, o.now);
  const lk_decision *d = &o.info->decision;
  if (d->reason == LK_REASON_BUDGET && EMITTING(k)) {
    lk_event ev;
    ev_init(k, &ev, LK_EV_BUDGET_REFUSED, t->number, o.now);
    ev.u.budget.failure = o.kind;
    emit(k, &ev);
  }
  switch (next) {
  case LK_NEXT_WAIT_OTHERS: return; /* still PERFORM */
  case LK_NEXT_RETRY:
    k->prev_delay = d->delay;
    k->timer_at = lk_sat_add(o.now, d->delay);
    call_state(k, LK_CALL_BACKOFF);
    if (EMITTING(k)) {
      lk_event ev;
      ev_init(k, &ev, LK_EV_RETRY_SCHEDULED, t->number, o.now);
      ev.u.retry.delay = d->delay;
      ev.u.retry.failure = o.kind;
      ev.u.retry.from_retry_after = d->from_retry_after;
      emit(k, &ev);
    }
    return;
  case LK_NEXT_FINISH: break;
  }
  cancel_others(k, cancelled ? NULL : t, o.now);
  const char *stop = o.kind == LK_F_NONE ? "success" : o.cancelled ? "cancelled" : o.info->reason;
  lk_failure kind = o.cancelled ? LK_F_CANCELLED : o.kind;
  finish_at(k, o.now, err, kind, stop);
}

/* --- entry points from the loop -------------------------------------------------------------- */

void lk__call_timer(lk_call *k, int64_t now) {
  switch (k->state) {
  case LK_CALL_BACKOFF:
    call_state(k, LK_CALL_ADMIT);
    admit(k, now);
    return;
  case LK_CALL_ADMIT: admit(k, now); return;
  case LK_CALL_PERFORM:
    for (int i = 0; i <= k->nextra; i++) {
      lk_try *t = try_at(k, i);
      lk_timer_kind w;
      if (t->live && now >= try_timer(t, &w)) {
        attempt_end(t, CURLE_OK, w, false);
        return; /* the call may be gone; the next pass sees whatever else is due */
      }
    }
    if (now >= k->timer_at)
      hedge(k, now);
    return;
  case LK_CALL_DONE: return;
  }
}

void lk__call_transfer_done(lk_try *t, int code) {
  if (t->live && t->k->state == LK_CALL_PERFORM)
    attempt_end(t, code, LK_TIMER_NONE, false);
}

void lk__call_abort(lk_call *k) {
  if (k->state == LK_CALL_PERFORM) {
    /* the first attempt found in flight carries the cancellation; the others are cancelled
     * with it */
    for (int i = 0; i <= k->nextra; i++) {
      lk_try *t = try_at(k, i);
      if (t->live) {
        attempt_end(t, CURLE_OK, LK_TIMER_NONE, true);
        return;
      }
    }
  }
  if (k->adm.limiter_reserved)
    k->adm.limiter_reserved = false; /* a reserved token cannot be returned (limiter.h) */
  finish_at(k, now_of(k), LK_ECANCELED, LK_F_CANCELLED, "cancelled");
}
