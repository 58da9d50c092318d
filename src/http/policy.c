/* SPDX-License-Identifier: MIT */
/* Policy defaults and validation. */
#include "http_internal.h"

#include <linkd/hist.h>

#include <string.h>

void lk_http_policy_init_default(lk_http_policy *p) {
  memset(p, 0, sizeof *p);
  p->deadline = LK_SEC(3);
  p->deadline_at = lk_deadline_none();
  p->attempt_timeout = LK_MS(800);
  p->connect_timeout = LK_MS(500);
  p->pool_idle_lifetime = LK_SEC(30);
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  lk_retry_policy_init(&p->retry, &rc, NULL);
  p->idem_mode = LK_IDEM_NONE;
  p->resend_guard = LK_RESEND_ABORT;
  p->default_protection = true;
  p->breaker_wait = true;
  p->send_deadline = true;
  p->send_attempt = true;
  p->honor_retried = true;
  p->max_response_body = (size_t)64 << 20;
  p->verify_tls = true;
  lk_hedge_policy_init_default(&p->hedge);
  p->hedge.max_hedges = 0; /* hedging is asked for, not a default */
}

int64_t lk_http_hist_percentile(void *hist, double q) { return lk_hist_percentile(hist, q); }

int lk_http_policy_validate(const lk_http_policy *p, const char **why) {
  const char *w = NULL;
  if (!p)
    w = "policy is NULL";
  else if (p->deadline <= 0)
    w = "deadline must be > 0";
  else if (p->attempt_timeout <= 0)
    w = "attempt timeout must be > 0";
  else if (p->connect_timeout < 0 || p->dns_timeout < 0 || p->pool_timeout < 0 ||
           p->tls_timeout < 0 || p->write_timeout < 0 || p->first_byte_timeout < 0 ||
           p->idle_timeout < 0)
    w = "phase timeouts must be >= 0";
  else if (p->pool_idle_lifetime < LK_SEC(1))
    w = "pool idle lifetime must be >= 1s";
  else if (p->deadline_reserve < 0)
    w = "deadline reserve must be >= 0";
  else if (p->deadline > LK_HTTP_DURATION_MAX || p->attempt_timeout > LK_HTTP_DURATION_MAX ||
           p->connect_timeout > LK_HTTP_DURATION_MAX || p->dns_timeout > LK_HTTP_DURATION_MAX ||
           p->pool_timeout > LK_HTTP_DURATION_MAX || p->tls_timeout > LK_HTTP_DURATION_MAX ||
           p->write_timeout > LK_HTTP_DURATION_MAX ||
           p->first_byte_timeout > LK_HTTP_DURATION_MAX || p->idle_timeout > LK_HTTP_DURATION_MAX ||
           p->pool_idle_lifetime > LK_HTTP_DURATION_MAX ||
           p->deadline_reserve > LK_HTTP_DURATION_MAX)
    w = "durations must be <= 100 days (LK_HTTP_DURATION_MAX)";
  else if ((unsigned)p->idem_mode > LK_IDEM_KEY)
    w = "unknown idempotency mode";
  else if ((unsigned)p->resend_guard > LK_RESEND_ALLOW)
    w = "unknown resend guard";
  else if (p->idem_tenant && *p->idem_tenant &&
           !lk_idem_key_valid(p->idem_tenant, strlen(p->idem_tenant)))
    w = "idempotency tenant must be visible ASCII";
  else if (p->user_agent && strpbrk(p->user_agent, "\r\n"))
    w = "user agent must not contain CR or LF"; /* it becomes a header line */
  else if (p->ca_file && (!*p->ca_file || strpbrk(p->ca_file, "\r\n")))
    w = "CA file must be a non-empty path without CR or LF";
  else if (p->idem_mode == LK_IDEM_KEY) {
    char buf[LK_IDEM_KEY_MAX];
    if (!p->idem_key || lk_idem_key_compose(p->idem_tenant, p->idem_key, buf, sizeof buf) < 0)
      w = "idempotency key missing, not visible ASCII, or too long";
  }
  if (!w && p->hedge.max_hedges != 0 && lk_hedge_policy_validate(&p->hedge, &w) != LK_OK && !w)
    w = "invalid hedge policy";
  if (!w) {
    lk_retry_policy tmp;
    if (lk_retry_policy_init(&tmp, &p->retry.cfg, &w) != LK_OK && !w)
      w = "invalid retry policy";
  }
  if (why)
    *why = w;
  return w ? LK_ECONFIG : LK_OK;
}

const lk_clock *lk__policy_clock(const lk_http_policy *p) {
  return p->clock ? p->clock : lk_clock_system();
}

void lk_http_client_config_init_default(lk_http_client_config *c) { memset(c, 0, sizeof *c); }

const char *lk_http_phase_name(lk_http_phase p) {
  static const char *const n[] = {"QUEUED", "DNS",  "CONNECT", "TLS",
                                  "SEND",   "WAIT", "RECEIVE", "DONE"};
  return (unsigned)p < sizeof n / sizeof n[0] ? n[p] : "UNKNOWN";
}
