/* SPDX-License-Identifier: MIT */
/* Policy defaults and validation. */
#include "http_internal.h"

#include <linkd/hist.h>

#include <arpa/inet.h>
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

/* --- resolve and connect-to entries ------------------------------------------------------- */

/* A host name as libcurl matches it: letters, digits, '-', '.', '_' (no ':', which ends it). */
static bool host_name(const char *s, size_t n) {
  if (n == 0 || n > 255)
    return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '.' || c == '_'))
      return false;
  }
  return true;
}

/* An IPv4 or IPv6 address of n bytes (no brackets). */
static bool ip_literal(const char *s, size_t n) {
  char buf[INET6_ADDRSTRLEN + 1];
  unsigned char out[sizeof(struct in6_addr)];
  if (n == 0 || n >= sizeof buf)
    return false;
  memcpy(buf, s, n);
  buf[n] = '\0';
  return inet_pton(AF_INET, buf, out) == 1 || inet_pton(AF_INET6, buf, out) == 1;
}

/* A port of n bytes: 1 to 65535, decimal digits only. */
static bool port_number(const char *s, size_t n) {
  if (n == 0 || n > 5)
    return false;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return false;
    v = v * 10 + (s[i] - '0');
  }
  return v >= 1 && v <= 65535;
}

int lk_http_resolve_check(const char *e, const char **why) {
  const char *w = NULL;
  const char *c1 = e ? strchr(e, ':') : NULL;
  const char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
  if (!e || !*e)
    w = "empty; expected HOST:PORT:ADDR[,ADDR...]";
  else if (*e == '+' || *e == '-')
    w = "libcurl's '+' and '-' prefixes are not taken; expected HOST:PORT:ADDR[,ADDR...]";
  else if (!c1 || !c2)
    w = "expected HOST:PORT:ADDR[,ADDR...]";
  else if (!(c1 - e == 1 && *e == '*') && !host_name(e, (size_t)(c1 - e)))
    w = "HOST must be a host name (letters, digits, '-', '.', '_') or '*'";
  else if (!port_number(c1 + 1, (size_t)(c2 - c1 - 1)))
    w = "PORT must be a number from 1 to 65535";
  else {
    const char *a = c2 + 1;
    for (;;) {
      size_t n = strcspn(a, ",");
      const char *s = a;
      size_t m = n;
      if (m >= 2 && s[0] == '[' && s[m - 1] == ']') {
        s++;
        m -= 2;
      }
      if (!ip_literal(s, m)) {
        w = "each ADDR must be an IPv4 or IPv6 address (IPv6 optionally in brackets)";
        break;
      }
      if (!a[n])
        break;
      a += n + 1;
    }
  }
  if (why)
    *why = w;
  return w ? LK_EINVAL : LK_OK;
}

/* One HOST of a connect-to entry at *s: empty, a name or "[IPv6]"; *s moves to the ':' after
 * it. false if it is neither or no ':' follows. */
static bool connect_host(const char **s) {
  const char *p = *s, *end;
  if (*p == '[') {
    end = strchr(p, ']');
    if (!end || !ip_literal(p + 1, (size_t)(end - p - 1)))
      return false;
    end++;
  } else {
    end = p + strcspn(p, ":");
    if (end != p && !host_name(p, (size_t)(end - p)))
      return false;
  }
  if (*end != ':')
    return false;
  *s = end;
  return true;
}

int lk_http_connect_to_check(const char *e, const char **why) {
  const char *w = NULL, *p = e;
  if (!e || !*e)
    w = "empty; expected HOST1:PORT1:HOST2:PORT2";
  else if (!connect_host(&p))
    w = "HOST1 must be empty, a host name or an IPv6 address in brackets, then ':'";
  else {
    const char *q = strchr(p + 1, ':');
    if (!q || (q != p + 1 && !port_number(p + 1, (size_t)(q - p - 1))))
      w = "PORT1 must be empty or a number from 1 to 65535, then ':'";
    else if (p = q + 1, !connect_host(&p))
      w = "HOST2 must be empty, a host name or an IPv6 address in brackets, then ':'";
    else if (p[1] && !port_number(p + 1, strlen(p + 1)))
      w = "PORT2 must be empty or a number from 1 to 65535 (and nothing after it)";
  }
  if (why)
    *why = w;
  return w ? LK_EINVAL : LK_OK;
}

static bool entries_ok(const char *const *v, size_t n, int (*check)(const char *, const char **)) {
  if (n && !v)
    return false;
  for (size_t i = 0; i < n; i++)
    if (check(v[i], NULL) != LK_OK)
      return false;
  return true;
}

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
  else if (p->client_cert && (!*p->client_cert || strpbrk(p->client_cert, "\r\n")))
    w = "client certificate file must be a non-empty path without CR or LF";
  else if (p->client_key && (!*p->client_key || strpbrk(p->client_key, "\r\n")))
    w = "client key file must be a non-empty path without CR or LF";
  else if ((p->client_key || p->key_password) && !p->client_cert)
    w = "a client key or key password needs a client certificate";
  else if (!entries_ok(p->resolve, p->nresolve, lk_http_resolve_check))
    w = "resolve entries must be HOST:PORT:ADDR[,ADDR...] (lk_http_resolve_check)";
  else if (!entries_ok(p->connect_to, p->nconnect_to, lk_http_connect_to_check))
    w = "connect-to entries must be HOST1:PORT1:HOST2:PORT2 (lk_http_connect_to_check)";
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
