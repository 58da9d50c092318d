/* SPDX-License-Identifier: MIT */
#include <linkd/error.h>
#include <linkd/retry.h>

#include <stdio.h>

uint64_t lk_retry_on_default(void) {
  uint64_t m = 0;
  for (int k = 0; k < LK_F__COUNT; k++) {
    lk_failure_class c = lk_failure_class_of((lk_failure)k);
    if (c == LK_FC_NOT_SENT || c == LK_FC_MAYBE_PROCESSED || c == LK_FC_REFUSED)
      m |= LK_FAILURE_BIT(k);
  }
  /* no such host, or a TLS protocol / certificate failure: asking again gets the same answer
   * (curl gives up at once too); their timeouts stay retryable */
  return m & ~(LK_FAILURE_BIT(LK_F_DNS_FAILED) | LK_FAILURE_BIT(LK_F_TLS_FAILED));
}

void lk_retry_config_init_default(lk_retry_config *c) {
  c->max_attempts = 4;
  lk_backoff_config_init_default(&c->backoff);
  c->retry_on = lk_retry_on_default();
  c->honor_retry_after = true;
  c->retry_after_cap = LK_SEC(60);
  c->min_attempt = 0;
}

int lk_retry_policy_init(lk_retry_policy *p, const lk_retry_config *c, const char **why) {
  const char *w = NULL;
  if (!p || !c)
    w = "retry policy or config is NULL";
  else if (c->max_attempts < 1)
    w = "max attempts must be >= 1";
  else if (c->retry_after_cap < 0)
    w = "Retry-After cap must be >= 0";
  else if (c->min_attempt < 0)
    w = "minimum attempt time must be >= 0";
  else
    lk_backoff_config_validate(&c->backoff, &w);
  if (why)
    *why = w;
  if (w)
    return LK_ECONFIG;
  p->cfg = *c;
  return LK_OK;
}

static bool is_blank(const char *s) {
  for (; *s; s++)
    if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r' && *s != '\f' && *s != '\v')
      return false;
  return true;
}

bool lk_retry_is_retryable(const lk_retry_policy *p, const lk_attempt *a) {
  if (!p || !a) /* a question about nothing: no, rather than a crash */
    return false;
  lk_failure k = a->failure;
  if ((unsigned)k >= LK_F__COUNT || !(p->cfg.retry_on & LK_FAILURE_BIT(k)))
    return false;
  switch (lk_failure_class_of(k)) {
  case LK_FC_NOT_SENT:
  case LK_FC_REFUSED:
    return true;
  case LK_FC_MAYBE_PROCESSED:
  case LK_FC_PERMANENT: /* only when the caller opted in through retry_on */
    return !a->request_fully_sent || a->idempotency_key || lk_method_is_idempotent(a->method);
  default:
    return false;
  }
}

static void stop(lk_decision *out, lk_reason r) {
  out->retry = false;
  out->delay = 0;
  out->reason = r;
}

int lk_retry_decide(const lk_retry_policy *p, const lk_attempt *a, int64_t remaining,
                    lk_rand *rng, lk_decision *out) {
  if (!p || !a || !out || a->number < 1 || !a->method || is_blank(a->method) ||
      (unsigned)a->failure >= LK_F__COUNT ||
      (!rng && p->cfg.backoff.jitter != LK_JITTER_NONE))
    return LK_EINVAL;
  out->failure = a->failure;
  out->remaining = remaining;
  out->min_attempt = p->cfg.min_attempt;
  out->computed = 0;
  out->from_retry_after = false;

  if (a->failure == LK_F_DEADLINE_EXCEEDED) {
    stop(out, LK_REASON_DEADLINE);
    return LK_OK;
  }
  if (!lk_retry_is_retryable(p, a)) {
    stop(out, LK_REASON_NOT_RETRYABLE);
    return LK_OK;
  }
  if (a->number >= p->cfg.max_attempts) {
    stop(out, LK_REASON_ATTEMPTS);
    return LK_OK;
  }
  int64_t delay = lk_backoff_delay(&p->cfg.backoff, a->number, a->prev_delay, rng);
  if (p->cfg.honor_retry_after && a->retry_after >= 0) {
    int64_t ra = a->retry_after < p->cfg.retry_after_cap ? a->retry_after : p->cfg.retry_after_cap;
    if (ra > delay) {
      delay = ra;
      out->from_retry_after = true;
    }
  }
  out->computed = delay;
  if (delay >= remaining) {
    stop(out, LK_REASON_DELAY_TOO_LONG);
    return LK_OK;
  }
  if (p->cfg.min_attempt > 0 && delay > remaining - p->cfg.min_attempt) {
    stop(out, LK_REASON_NO_TIME_FOR_ATTEMPT);
    return LK_OK;
  }
  out->retry = true;
  out->delay = delay;
  out->reason = LK_REASON_RETRY;
  return LK_OK;
}

/* Whole milliseconds when exact (the seed's format), else three decimals. */
static int fmt_ms(char *buf, size_t cap, int64_t ns) {
  if (ns % LK_NS_PER_MS == 0)
    return snprintf(buf, cap, "%lldms", (long long)(ns / LK_NS_PER_MS));
  return snprintf(buf, cap, "%.3fms", (double)ns / (double)LK_NS_PER_MS);
}

int lk_decision_format(const lk_decision *d, char *buf, size_t cap) {
  /* a caller's mistake gets an error, not a crash (snprintf(NULL, cap > 0) is undefined) */
  if (!d || (!buf && cap > 0))
    return LK_EINVAL;
  char a[32], b[32], c[32];
  const char *kind = lk_failure_name(d->failure);
  switch (d->reason) {
  case LK_REASON_RETRY:
    return snprintf(buf, cap, "retry %s", kind);
  case LK_REASON_DEADLINE:
    return snprintf(buf, cap, "deadline exceeded");
  case LK_REASON_NOT_RETRYABLE:
    return snprintf(buf, cap, "not retryable: %s", kind);
  case LK_REASON_ATTEMPTS:
    return snprintf(buf, cap, "attempts exhausted");
  case LK_REASON_DELAY_TOO_LONG:
    fmt_ms(a, sizeof a, d->computed);
    fmt_ms(b, sizeof b, d->remaining);
    return snprintf(buf, cap, "%s %s >= remaining %s", d->from_retry_after ? "Retry-After" : "delay",
                    a, b);
  case LK_REASON_NO_TIME_FOR_ATTEMPT:
    fmt_ms(a, sizeof a, d->computed);
    fmt_ms(b, sizeof b, d->min_attempt);
    fmt_ms(c, sizeof c, d->remaining);
    return snprintf(buf, cap, "delay %s + attempt %s > remaining %s", a, b, c);
  case LK_REASON_BUDGET:
    return snprintf(buf, cap, "retry budget exhausted");
  case LK_REASON_SUCCESS:
    return snprintf(buf, cap, "success");
  }
  return snprintf(buf, cap, "unknown");
}

const char *lk_reason_name(lk_reason r) {
  static const char *const n[] = {"RETRY",  "DEADLINE",        "NOT_RETRYABLE", "ATTEMPTS",
                                  "DELAY_TOO_LONG", "NO_TIME_FOR_ATTEMPT", "BUDGET", "SUCCESS"};
  return (unsigned)r < sizeof n / sizeof n[0] ? n[r] : "UNKNOWN";
}
