/* SPDX-License-Identifier: MIT */
#include "policy.h"

#include <linkd/duration.h>

#include <stdio.h>

static bool from_flag(const cli_settings *s, cli_field f) {
  return (s->set & CLI_BIT(f)) && s->origin[f] == cli_origin_flag;
}

int cli_settings_to_policy(const cli_settings *s, lk_http_policy *p, cli_policy_error *e) {
  e->from_flags = false;
  e->msg[0] = '\0';
  lk_http_policy_init_default(p);
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  unsigned set = s->set;
  if (set & CLI_BIT(CLI_F_DEADLINE))
    p->deadline = s->deadline;
  if (set & CLI_BIT(CLI_F_ATTEMPT_TIMEOUT))
    p->attempt_timeout = s->attempt_timeout;
  if (set & CLI_BIT(CLI_F_CONNECT_TIMEOUT))
    p->connect_timeout = s->connect_timeout;
  if (set & CLI_BIT(CLI_F_DNS_TIMEOUT))
    p->dns_timeout = s->dns_timeout;
  if (set & CLI_BIT(CLI_F_TLS_TIMEOUT))
    p->tls_timeout = s->tls_timeout;
  if (set & CLI_BIT(CLI_F_WRITE_TIMEOUT))
    p->write_timeout = s->write_timeout;
  if (set & CLI_BIT(CLI_F_FIRST_BYTE_TIMEOUT))
    p->first_byte_timeout = s->first_byte_timeout;
  if (set & CLI_BIT(CLI_F_IDLE_TIMEOUT))
    p->idle_timeout = s->idle_timeout;
  /* The driver caps the connect timeout at the attempt's; one given larger on purpose would
   * silently mean less than it says. (The default 500ms under a shorter attempt-timeout is just
   * the cap at work.) */
  if ((set & CLI_BIT(CLI_F_CONNECT_TIMEOUT)) && p->connect_timeout > p->attempt_timeout) {
    char a[32], b[32];
    e->from_flags = from_flag(s, CLI_F_CONNECT_TIMEOUT) || from_flag(s, CLI_F_ATTEMPT_TIMEOUT);
    snprintf(e->msg, sizeof e->msg, "connect-timeout %s is longer than attempt-timeout %s",
             lk_duration_format(p->connect_timeout, a, sizeof a),
             lk_duration_format(p->attempt_timeout, b, sizeof b));
    return -1;
  }
  if (set & CLI_BIT(CLI_F_MAX_ATTEMPTS))
    rc.max_attempts = s->max_attempts;
  if (set & CLI_BIT(CLI_F_BACKOFF)) {
    rc.backoff.kind = s->backoff;
    rc.backoff.multiplier = s->multiplier;
  }
  if (set & CLI_BIT(CLI_F_JITTER)) {
    rc.backoff.jitter = s->jitter;
    rc.backoff.ratio = s->jitter_ratio;
  }
  if (set & CLI_BIT(CLI_F_BASE)) {
    rc.backoff.base = s->base;
    if (!(set & CLI_BIT(CLI_F_MAX_DELAY)) && rc.backoff.max < s->base)
      rc.backoff.max = s->base;
  }
  if (set & CLI_BIT(CLI_F_MAX_DELAY))
    rc.backoff.max = s->max_delay;
  if (rc.backoff.max < rc.backoff.base) {
    char a[32], b[32];
    e->from_flags = from_flag(s, CLI_F_MAX_DELAY) || from_flag(s, CLI_F_BASE);
    snprintf(e->msg, sizeof e->msg, "max-delay %s is less than base %s%s",
             lk_duration_format(rc.backoff.max, a, sizeof a),
             lk_duration_format(rc.backoff.base, b, sizeof b),
             (set & CLI_BIT(CLI_F_BASE)) ? "" : " (the default; set base too)");
    return -1;
  }
  if (set & CLI_BIT(CLI_F_RETRY_ON))
    rc.retry_on = cli_retry_edit_apply(&s->retry_on, rc.retry_on);
  const char *why = NULL;
  if (lk_retry_policy_init(&p->retry, &rc, &why) != 0) {
    e->from_flags = true;
    for (int f = 0; f < CLI_F__COUNT; f++)
      e->from_flags = e->from_flags && !(set & CLI_BIT(f) && !from_flag(s, (cli_field)f));
    snprintf(e->msg, sizeof e->msg, "invalid retry policy: %s", why ? why : "?");
    return -1;
  }
  if (set & CLI_BIT(CLI_F_IDEMPOTENCY_KEY)) {
    p->idem_mode = s->idem_mode;
    p->idem_key = s->idem_mode == LK_IDEM_KEY ? s->idem_key : NULL;
  }
  if (set & CLI_BIT(CLI_F_CACERT))
    p->ca_file = s->cacert; /* owned by the settings, which outlive the call (so are these) */
  if ((set & (CLI_BIT(CLI_F_KEY) | CLI_BIT(CLI_F_PASS))) && !(set & CLI_BIT(CLI_F_CERT))) {
    cli_field f = (set & CLI_BIT(CLI_F_KEY)) ? CLI_F_KEY : CLI_F_PASS;
    e->from_flags = from_flag(s, f);
    snprintf(e->msg, sizeof e->msg, "%s is given without cert (the client certificate it is for)",
             cli_settings_key(f));
    return -1;
  }
  if (set & CLI_BIT(CLI_F_CERT))
    p->client_cert = s->cert;
  if (set & CLI_BIT(CLI_F_KEY))
    p->client_key = s->key;
  if (set & CLI_BIT(CLI_F_PASS))
    p->key_password = s->pass;
  if (lk_http_policy_validate(p, &why) != 0) {
    e->from_flags = true;
    for (int f = 0; f < CLI_F__COUNT; f++)
      e->from_flags = e->from_flags && !(set & CLI_BIT(f) && !from_flag(s, (cli_field)f));
    snprintf(e->msg, sizeof e->msg, "invalid policy: %s", why ? why : "?");
    return -1;
  }
  return 0;
}
