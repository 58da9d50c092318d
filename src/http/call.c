/* SPDX-License-Identifier: MIT */
/* The logical call: protections around each attempt, classification, the retry decision and the
 * result. Order per attempt (DESIGN.md section 2): deadline, bulkhead, limiter, breaker, attempt;
 * then record, decide, wait (a timer). */
#include "call_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void release_slot(lk_call *k) {
  if (k->bulkhead_queued) {
    k->bulkhead_queued = false;
    if (!lk_bulkhead_waiter_cancel(k->pol.bulkhead, &k->bw))
      k->bulkhead_held = true; /* granted meanwhile: given back below */
  }
  if (k->bulkhead_held) {
    lk_bulkhead_release(k->pol.bulkhead);
    k->bulkhead_held = false;
  }
}

/* lk__call_finish with the current time already read */
static void finish_at(lk_call *k, int64_t now, int err, lk_failure kind, const char *stop) {
  lk_http_client *c = k->cl;
  lk_http_result *res = k->res;
  release_slot(k);
  res->err = err;
  res->failure = kind;
  res->elapsed = lk_sat_sub(now, k->t0);
  if (stop)
    set_stop(res, stop);
  if (res->has_resp && !lk__resp_settle(&res->resp, res->inl, sizeof res->inl, &k->cur) &&
      res->err == LK_OK)
    res->err = LK_ENOMEM;
  bool ok = res->err == LK_OK;
  lk_call_metrics_call_end(k->pol.metrics, ok, ok && k->number == 1, k->number, res->elapsed,
                           res->err);
  if (k->ex) {
    if (k->easy_added)
      curl_multi_remove_handle(c->multi, k->easy);
    k->easy_added = false;
    lk__client_easy_put(c, k->ex);
    k->ex = NULL;
    k->easy = NULL;
  }
  free(k->ua_line);
  if (k->cancel)
    lk__client_tok_unregister(c, k->cancel);
  k->state = LK_CALL_DONE;
  lk__client_unlink(c, k);
  lk_http_request_free(k->req);
  if (k->nodes != k->inline_nodes)
    free(k->nodes);
  lk_http_done_fn done = k->done;
  void *ud = k->ud;
  if (!c->spare) {
    c->spare = k; /* its memory serves the next call */
  } else {
    lk__resp_free(&k->cur);
    free(k);
  }
  done(ud, res);
}

void lk__call_finish(lk_call *k, int err, lk_failure kind, const char *stop) {
  finish_at(k, now_of(k), err, kind, stop);
}

/* The bulkhead handed a slot to the queued call: runs on the releasing thread, the bulkhead's
 * lock held; the call cannot end meanwhile (ending it cancels the wait under that lock). */
static void bulkhead_granted(void *ud) {
  lk_call *k = ud;
  atomic_store(&k->bulkhead_granted, true);
  lk__client_notify(k->cl);
}

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
    notify_attempt(k, a);
  }
  lk__call_finish(k, err, kind, a ? a->reason : lk_strerror(err));
}

/* When a call the breaker refused may ask again, or 0 to fail now. A refusal is a request that
 * was never sent, and the breaker knows when its next probe goes out: a call with time to spare
 * waits for that moment (as it waits for a Retry-After) instead of failing at once; the breaker
 * still admits only its probes, so waiting adds no load. */
static int64_t breaker_wait_until(const lk_call *k, int64_t now) {
  const lk_http_policy *p = &k->pol;
  if (!p->breaker_wait)
    return 0;
  int64_t at = lk_breaker_retry_at(p->breaker, now);
  if (at == LK_BREAKER_RETRY_UNKNOWN || at <= now) /* probes out: their outcome decides */
    at = lk_sat_add(now, LK_BREAKER_POLL);
  int64_t need = p->retry.cfg.min_attempt > 0 ? p->retry.cfg.min_attempt : LK_MS(1);
  if (at >= k->deadline || lk_sat_sub(k->deadline, at) < need)
    return 0;
  return at;
}

void lk__call_try_start(lk_call *k, int64_t now) {
  lk_http_policy *p = &k->pol;
  if (lk_http_cancel_fired(k->cancel)) {
    lk__call_abort(k);
    return;
  }
  int64_t remaining = lk_sat_sub(k->deadline, now);
  if (remaining <= 0) {
    release_slot(k);
    lk__call_finish(k, LK_EDEADLINE, LK_F_DEADLINE_EXCEEDED, "deadline exceeded");
    return;
  }
  if (p->bulkhead && !k->bulkhead_held) {
    /* A slot, or a place in the bulkhead's FIFO queue shared with blocking acquirers: the grant
     * arrives through bulkhead_granted(); the timer covers pool_timeout and the deadline. */
    if (k->bulkhead_wait_start == INT64_MIN)
      k->bulkhead_wait_start = now;
    int64_t limit = k->deadline;
    int64_t pool_end = lk_sat_add(k->bulkhead_wait_start, p->pool_timeout);
    if (p->pool_timeout > 0 && pool_end < limit)
      limit = pool_end;
    int rc;
    if (!k->bulkhead_queued) {
      atomic_store(&k->bulkhead_granted, false);
      rc = lk_bulkhead_enqueue(p->bulkhead, &k->bw, bulkhead_granted, k);
      k->bulkhead_queued = rc == LK_EAGAIN;
    } else if (atomic_load(&k->bulkhead_granted) &&
               lk_bulkhead_waiter_granted(p->bulkhead, &k->bw)) {
      /* (the locked check also waits for the notification to finish with this call) */
      k->bulkhead_queued = false;
      rc = LK_OK;
    } else if (now >= limit) {
      k->bulkhead_queued = false;
      rc = lk_bulkhead_waiter_cancel(p->bulkhead, &k->bw) ? LK_EDEADLINE : LK_OK;
    } else {
      rc = LK_EAGAIN;
    }
    if (rc == LK_EAGAIN) {
      k->timer_at = limit;
      return;
    }
    if (rc == LK_EBULKHEAD_FULL) {
      refuse(k, now, LK_F_BULKHEAD_FULL, LK_EBULKHEAD_FULL);
      return;
    }
    if (rc != LK_OK) {
      if (limit == k->deadline)
        refuse(k, now, LK_F_DEADLINE_EXCEEDED, LK_EDEADLINE);
      else
        refuse(k, now, LK_F_POOL_TIMEOUT, LK_EBULKHEAD_FULL);
      return;
    }
    k->bulkhead_held = true;
    if (p->metrics) {
      lk_call_metrics_bulkhead_wait(p->metrics, lk_sat_sub(now, k->bulkhead_wait_start));
      lk_call_metrics_bulkhead_queue_depth(p->metrics, lk_bulkhead_queue_depth(p->bulkhead));
    }
    k->bulkhead_wait_start = INT64_MIN;
  }
  if (p->limiter && !k->limiter_reserved) {
    int64_t w = lk_limiter_reserve(p->limiter, now, remaining);
    if (w < 0) {
      release_slot(k);
      refuse(k, now, LK_F_RATE_LIMITED, LK_ERATE_LIMITED);
      return;
    }
    k->limiter_reserved = true;
    if (w > 0) {
      k->timer_at = lk_sat_add(now, w);
      return;
    }
  }
  if (lk__breaker_acquire(p->breaker, &k->prot, now) != LK_OK) {
    release_slot(k); /* nothing is held while waiting for the breaker */
    int64_t at = breaker_wait_until(k, now);
    if (at > 0) {
      k->timer_at = at;
      return;
    }
    refuse(k, now, LK_F_BREAKER_OPEN, LK_EBREAKER_OPEN);
    return;
  }
  k->limiter_reserved = false;
  k->number++;
  lk_att *a = &k->att;
  memset(a, 0, sizeof *a);
  a->start = now;
  a->timeout = lk_attempt_timeout(p->attempt_timeout, remaining);
  a->ctimeout = p->connect_timeout > 0 && p->connect_timeout < a->timeout ? p->connect_timeout
                                                                          : a->timeout;
  a->end_at = lk_sat_add(now, a->timeout);
  lk__resp_reset(&k->cur);
  if (lk__attempt_setup(k) != LK_OK ||
      curl_multi_add_handle(k->cl->multi, k->easy) != CURLM_OK) {
    lk__breaker_release(p->breaker, &k->prot);
    k->number--;
    lk__call_finish(k, LK_ENOMEM, LK_F_TRANSPORT_ERROR, "libcurl refused the transfer");
    return;
  }
  k->easy_added = true;
  k->state = LK_CALL_ATTEMPT;
}

int64_t lk__call_next_timer(lk_call *k, lk_timer_kind *which) {
  if (k->state == LK_CALL_WAIT) {
    *which = LK_TIMER_NONE;
    if (k->bulkhead_queued && atomic_load(&k->bulkhead_granted))
      return INT64_MIN; /* a slot is waiting for it: due now */
    return k->timer_at;
  }
  const lk_http_policy *p = &k->pol;
  const lk_att *a = &k->att;
  int64_t at = a->end_at;
  lk_timer_kind w = LK_TIMER_ATTEMPT;
#define CAND(t, kind)                                                                            \
  do {                                                                                           \
    int64_t t_ = (t);                                                                            \
    if (t_ < at) {                                                                               \
      at = t_;                                                                                   \
      w = (kind);                                                                                \
    }                                                                                            \
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
    /* between socket creation and the request: TCP connecting, unless libcurl says it is up */
    curl_off_t conn_us = 0;
    curl_easy_getinfo(k->easy, CURLINFO_CONNECT_TIME_T, &conn_us);
    if (conn_us == 0)
      CAND(lk_sat_add(a->t_sock, a->ctimeout), LK_TIMER_CONNECT);
  }
#undef CAND
  *which = w;
  return at;
}

static bool status_kind(lk_failure k) {
  lk_failure s = lk_failure_seed_kind(k);
  return s == LK_F_SERVER_5XX || s == LK_F_CLIENT_4XX || s == LK_F_TOO_MANY_REQUESTS ||
         k == LK_F_RESULT_RETRYABLE;
}

static int err_for(const lk_decision *d, lk_failure kind, bool have_status) {
  switch (d->reason) {
  case LK_REASON_NOT_RETRYABLE:
    return have_status && status_kind(kind) ? LK_EHTTP : LK_ENOTRETRYABLE;
  case LK_REASON_ATTEMPTS:
    return LK_EATTEMPTS;
  case LK_REASON_BUDGET:
    return LK_EBUDGET;
  default:
    return LK_EDEADLINE;
  }
}

/* Fills the evidence of the attempt that just ended. */
static void evidence(lk_call *k, int code, lk_timer_kind timer, bool cancelled, lk_evidence *e) {
  lk_att *a = &k->att;
  memset(e, 0, sizeof *e);
  e->curl_code = code;
  e->status = k->cur.status_seen ? k->cur.status : 0;
  e->https = k->https;
  e->socket_opened = a->sock_seen;
  curl_off_t conn_us = 0, app_us = 0;
  /* the connection evidence matters only for failures before the first write */
  bool failed = code != CURLE_OK || timer != LK_TIMER_NONE || cancelled;
  if (failed && a->prereq_calls == 0) {
    long oserr = 0;
    curl_easy_getinfo(k->easy, CURLINFO_OS_ERRNO, &oserr);
    e->os_errno = (int)oserr;
    curl_easy_getinfo(k->easy, CURLINFO_CONNECT_TIME_T, &conn_us);
    curl_easy_getinfo(k->easy, CURLINFO_APPCONNECT_TIME_T, &app_us);
  }
  e->connected = a->reused || conn_us > 0 || a->tls_started || a->prereq_calls > 0;
  e->tls_done = k->https && (a->reused || app_us > 0 || a->prereq_calls > 0);
  e->prereq = a->prereq_calls > 0;
  e->fully_sent = a->sent && code != CURLE_SEND_ERROR;
  e->got_bytes = a->got_bytes;
  e->complete = code == CURLE_OK && timer == LK_TIMER_NONE && !cancelled;
  if (e->complete) {
    e->framing = lk__resp_framing(&k->cur, k->req->head);
    e->complete = e->framing == LK_F_NONE;
  }
  /* libcurl 7.88 reports a head line over CURL_MAX_HTTP_HEADER as CURLE_OUT_OF_MEMORY, 8.6+ as
   * CURLE_TOO_LARGE (100, not in 7.88's headers); the driver's own allocation failures end the
   * transfer with CURLE_WRITE_ERROR instead */
  e->head_too_big =
      (code == CURLE_OUT_OF_MEMORY || code == 100) && a->got_bytes && !k->cur.headers_done;
  e->resend_aborted = a->resend_aborted;
  e->too_big = a->too_big;
  e->cancelled = cancelled;
  e->timer = timer;
}

void lk__call_end_attempt(lk_call *k, int code, lk_timer_kind timer, bool cancelled) {
  lk_http_client *c = k->cl;
  lk_http_policy *p = &k->pol;
  lk_att *a = &k->att;
  int64_t now = now_of(k);
  if (k->easy_added) {
    curl_multi_remove_handle(c->multi, k->easy);
    k->easy_added = false;
  }
  k->state = LK_CALL_WAIT;

  lk_evidence ev;
  evidence(k, code, timer, cancelled, &ev);
  lk_failure kind = lk__classify(&ev);
  lk_failure classified = kind;
  k->cur.complete = ev.complete;

  int64_t retry_after = -1;
  if (k->cur.status_seen) {
    const char *ra = ev.status >= 300 ? lk__resp_find(&k->cur, "Retry-After") : NULL;
    int64_t v;
    if (ra && lk_http_retry_after_parse(ra, strlen(ra), lk_wall_ns(), &v) == LK_OK)
      retry_after = v;
    if (p->classify && !cancelled) {
      if (lk__resp_view(&k->cur)) {
        lk_failure o = p->classify(p->classify_ctx, &k->cur.view, kind);
        if ((unsigned)o < LK_F__COUNT)
          kind = o;
      } else {
        /* the hook cannot see the response: what it would say is unknown, so the attempt fails
         * (LK_ENOMEM below) rather than pass as whatever the status alone says */
        a->oom = true;
        if (kind == LK_F_NONE)
          kind = LK_F_TRANSPORT_ERROR;
      }
    }
  }

  lk_http_result *res = k->res;
  lk_http_attempt_info *info = lk__result_add_attempt(res);
  lk_http_attempt_info scratch;
  if (!info) {
    memset(&scratch, 0, sizeof scratch);
    info = &scratch;
  }
  info->number = k->number;
  info->start = lk_sat_sub(a->start, k->t0);
  info->duration = lk_sat_sub(now, a->start);
  info->phase = lk__phase_of(&ev);
  info->failure = kind;
  info->classified = classified;
  info->status = ev.status;
  info->curl_code = timer != LK_TIMER_NONE || cancelled ? 0 : code;
  curl_off_t req_size = 0;
  long req_hdr = 0;
  curl_easy_getinfo(k->easy, CURLINFO_REQUEST_SIZE, &req_hdr);
  if (k->req->body_len > 0) /* no body: nothing is uploaded beyond the head */
    curl_easy_getinfo(k->easy, CURLINFO_SIZE_UPLOAD_T, &req_size);
  info->bytes_sent = (uint64_t)req_hdr;
  if ((uint64_t)req_size > info->bytes_sent)
    info->bytes_sent = (uint64_t)req_size;
  info->bytes_received = a->rx_bytes;
  info->request_sent = ev.fully_sent;
  info->reused_connection = a->reused;
  info->resends = a->resends;
  info->timeout = a->timeout;
  info->connect_timeout = a->ctimeout;
  info->retry_after = retry_after;
  res->resends += a->resends;

  /* the last real response is kept, so exhaustion returns what the server last said */
  if (k->cur.status_seen) {
    lk_resp tmp = res->resp;
    res->resp = k->cur;
    k->cur = tmp;
    res->has_resp = true;
  }

  lk_attempt at = {
      .number = k->number,
      .method = k->req->method,
      .idempotency_key = res->has_key || p->assume_idempotent,
      .request_fully_sent = ev.fully_sent,
      .failure = kind,
      .retry_after = retry_after,
      .prev_delay = k->prev_delay,
  };

  /* record */
  if (cancelled || a->oom) /* a local failure says nothing about the server */
    lk__breaker_release(p->breaker, &k->prot);
  else
    lk__breaker_record(p->breaker, &k->prot, now, info->duration, kind);
  /* The budget hears of a failure only when the policy would retry it (gRPC's throttling counts
   * only retryable statuses): a 404, or a 503 to a POST without a key, costs no retry and must
   * not drain a TOKEN budget. RATIO and QUOTA ignore failures (budget.h). */
  if (!cancelled && (kind == LK_F_NONE || (!a->too_big && !a->oom && !ev.head_too_big &&
                                           lk_retry_is_retryable(&p->retry, &at))))
    lk__budget_outcome(p->budget, &k->prot, now, kind == LK_F_NONE);
  lk_call_metrics_attempt_ex(p->metrics, k->number, kind, ev.status, info->duration);
  if (p->metrics && (p->budget || p->breaker))
    lk__cm_protection_state(p->metrics, p->budget, p->breaker, now);
  release_slot(k);

  /* decide */
  lk_decision *d = &info->decision;
  memset(d, 0, sizeof *d);
  d->failure = kind;
  d->remaining = lk_sat_sub(k->deadline, now);
  if (kind == LK_F_NONE) {
    d->reason = LK_REASON_SUCCESS;
    memcpy(info->reason, "success", 8);
    notify_attempt(k, info);
    finish_at(k, now, a->oom ? LK_ENOMEM : LK_OK, LK_F_NONE, "success");
    return;
  }
  if (cancelled) {
    d->reason = LK_REASON_NOT_RETRYABLE;
    snprintf(info->reason, sizeof info->reason, "cancelled");
    notify_attempt(k, info);
    finish_at(k, now, LK_ECANCELED, LK_F_CANCELLED, "cancelled");
    return;
  }
  if (a->too_big || a->oom || ev.head_too_big) {
    /* asking again would get the same oversized response; memory is a local failure */
    d->reason = LK_REASON_NOT_RETRYABLE;
    snprintf(info->reason, sizeof info->reason, "%s",
             a->too_big ? "response body too big"
             : a->oom   ? "out of memory"
                        : "response head too large");
    notify_attempt(k, info);
    finish_at(k, now, a->oom ? LK_ENOMEM : LK_ETOOBIG, kind, info->reason);
    return;
  }
  lk_rand *rng = k->rng;
  if (lk_retry_decide(&p->retry, &at, d->remaining, rng, d) != LK_OK) {
    d->retry = false;
    d->reason = LK_REASON_NOT_RETRYABLE;
  }
  /* no time left at all: say so, rather than "delay 30ms >= remaining -1ms" */
  if (d->remaining <= 0 && (d->retry || d->reason == LK_REASON_DELAY_TOO_LONG ||
                            d->reason == LK_REASON_NO_TIME_FOR_ATTEMPT)) {
    d->retry = false;
    d->delay = 0;
    d->reason = LK_REASON_DEADLINE;
  }
  /* the tier below has retried already: retrying here would multiply its attempts */
  bool retried_below = d->retry && p->honor_retried && ev.status != 0 &&
                       lk__resp_find(&res->resp, LK_HTTP_RETRIED_HEADER) != NULL;
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
  notify_attempt(k, info);
  if (d->retry) {
    k->prev_delay = d->delay;
    k->timer_at = lk_sat_add(now, d->delay);
    return;
  }
  finish_at(k, now, err_for(d, kind, ev.status != 0), kind, info->reason);
}

void lk__call_abort(lk_call *k) {
  if (k->state == LK_CALL_ATTEMPT) {
    lk__call_end_attempt(k, CURLE_OK, LK_TIMER_NONE, true);
    return;
  }
  if (k->limiter_reserved)
    k->limiter_reserved = false; /* a reserved token cannot be returned (limiter.h) */
  lk__call_finish(k, LK_ECANCELED, LK_F_CANCELLED, "cancelled");
}
