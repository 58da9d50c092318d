/* SPDX-License-Identifier: MIT */
#include "output.h"

#include <linkd/duration.h>
#include "exitcodes.h"

#include <linkd/version.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char *class_text(lk_failure k) {
  switch (lk_failure_class_of(k)) {
  case LK_FC_NONE: return "success";
  case LK_FC_NOT_SENT: return "not sent";
  case LK_FC_MAYBE_PROCESSED: return "may have been processed";
  case LK_FC_REFUSED: return "refused by the server";
  case LK_FC_PERMANENT: return "permanent";
  case LK_FC_TERMINAL: return "terminal";
  }
  return "?";
}

static const char *origin_of(const cli_settings *s, cli_field f) {
  return (s->set & CLI_BIT(f)) && s->origin[f] ? s->origin[f] : "default";
}

void cli_print_policy(FILE *f, const cli_call_info *ci) {
  const lk_http_policy *p = ci->policy;
  const lk_backoff_config *b = &p->retry.cfg.backoff;
  const cli_settings *s = ci->eff;
  char d[32], e[80];
  fprintf(f, "* linkd %s: %s %s\n", lk_version(), ci->opts->method, ci->opts->url);
  if (ci->config_path) {
    fprintf(f, "* config: %s, sections:", ci->config_path);
    for (size_t i = 0; i < ci->nsections; i++)
      fprintf(f, " [%s]", ci->sections[i]);
    fprintf(f, "%s\n", ci->nsections ? "" : " none for this host");
  } else {
    fprintf(f, "* config: none\n");
  }
  fprintf(f, "* %-16s %-24s (%s)\n", "deadline", lk_duration_format(p->deadline, d, sizeof d),
          origin_of(s, CLI_F_DEADLINE));
  fprintf(f, "* %-16s %-24s (%s)\n", "attempt-timeout",
          lk_duration_format(p->attempt_timeout, d, sizeof d),
          origin_of(s, CLI_F_ATTEMPT_TIMEOUT));
  fprintf(f, "* %-16s %-24s (%s)\n", "connect-timeout",
          p->connect_timeout ? lk_duration_format(p->connect_timeout, d, sizeof d)
                             : "attempt timeout",
          origin_of(s, CLI_F_CONNECT_TIMEOUT));
  const struct {
    const char *name;
    int64_t v;
    cli_field f;
  } phases[] = {{"dns-timeout", p->dns_timeout, CLI_F_DNS_TIMEOUT},
                {"tls-timeout", p->tls_timeout, CLI_F_TLS_TIMEOUT},
                {"write-timeout", p->write_timeout, CLI_F_WRITE_TIMEOUT},
                {"first-byte-timeout", p->first_byte_timeout, CLI_F_FIRST_BYTE_TIMEOUT},
                {"idle-timeout", p->idle_timeout, CLI_F_IDLE_TIMEOUT}};
  for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++)
    fprintf(f, "* %-18s %-22s (%s)\n", phases[i].name,
            phases[i].v ? lk_duration_format(phases[i].v, d, sizeof d) : "attempt timeout",
            origin_of(s, phases[i].f));
  fprintf(f, "* %-16s %-24d (%s)\n", "max-attempts", p->retry.cfg.max_attempts,
          origin_of(s, CLI_F_MAX_ATTEMPTS));
  if (b->kind == LK_BACKOFF_EXPONENTIAL && b->multiplier != 2.0)
    snprintf(e, sizeof e, "exponential:%g", b->multiplier);
  else
    snprintf(e, sizeof e, "%s", lk_backoff_kind_name(b->kind));
  fprintf(f, "* %-16s %-24s (%s)\n", "backoff", e, origin_of(s, CLI_F_BACKOFF));
  fprintf(f, "* %-16s %-24s (%s)\n", "base", lk_duration_format(b->base, d, sizeof d),
          origin_of(s, CLI_F_BASE));
  fprintf(f, "* %-16s %-24s (%s)\n", "max-delay", lk_duration_format(b->max, d, sizeof d),
          origin_of(s, CLI_F_MAX_DELAY));
  if (p->ca_file)
    fprintf(f, "* %-16s %-24s (%s)\n", "cacert", p->ca_file, origin_of(s, CLI_F_CACERT));
  if (p->client_cert)
    fprintf(f, "* %-16s %-24s (%s)\n", "cert", p->client_cert, origin_of(s, CLI_F_CERT));
  if (p->client_key)
    fprintf(f, "* %-16s %-24s (%s)\n", "key", p->client_key, origin_of(s, CLI_F_KEY));
  if (p->key_password) /* said to be there, never shown */
    fprintf(f, "* %-16s %-24s (%s)\n", "pass", "(set)", origin_of(s, CLI_F_PASS));
  if (b->jitter == LK_JITTER_SYMMETRIC)
    snprintf(e, sizeof e, "symmetric:%g", b->ratio);
  else
    snprintf(e, sizeof e, "%s", lk_jitter_kind_name(b->jitter));
  fprintf(f, "* %-16s %-24s (%s)\n", "jitter", e, origin_of(s, CLI_F_JITTER));
  fprintf(f, "* %-16s %-24s (%s)\n", "idempotency-key",
          p->idem_mode == LK_IDEM_KEY ? p->idem_key : lk_idem_mode_name(p->idem_mode),
          origin_of(s, CLI_F_IDEMPOTENCY_KEY));
  char set[1024];
  fprintf(f, "* %-16s %-24s (%s)\n", "retry-on",
          cli_retry_on_format(p->retry.cfg.retry_on, set, sizeof set),
          origin_of(s, CLI_F_RETRY_ON));
  char bud[128];
  fprintf(f, "* %-16s %-24s (%s)\n", "budget", cli_budget_format(&s->budget, bud, sizeof bud),
          origin_of(s, CLI_F_BUDGET));
  for (size_t i = 0; i < s->nheaders; i++)
    fprintf(f, "* %-16s %s: %s\n", "header", s->headers[i].name, s->headers[i].value);
  if (p->compressed)
    fprintf(f, "* %-16s %-24s (%s)\n", "compressed", "gzip, deflate", "command line");
  const cli_entries *lists[] = {ci->resolve, ci->connect_to};
  const char *names[] = {"resolve", "connect-to"};
  for (size_t l = 0; l < 2; l++)
    for (size_t i = 0; lists[l] && i < lists[l]->n; i++)
      fprintf(f, "* %-16s %-24s (%s)\n", names[l], lists[l]->v[i], lists[l]->origin[i]);
}

void cli_print_attempt(FILE *f, const lk_http_attempt_info *a) {
  char t1[32], t2[32], t3[32];
  {
    fprintf(f, "* attempt %d at +%s: took %s, timeout %s", a->number,
            lk_duration_format(a->start, t1, sizeof t1),
            lk_duration_format(a->duration, t2, sizeof t2),
            lk_duration_format(a->timeout, t3, sizeof t3));
    if (a->connect_timeout > 0)
      fprintf(f, " (connect %s)", lk_duration_format(a->connect_timeout, t1, sizeof t1));
    fprintf(f, ", %s connection\n", a->reused_connection ? "reused" : "new");
    fprintf(f, "*   phase %s, ", lk_http_phase_name(a->phase));
    if (a->status)
      fprintf(f, "status %d, ", a->status);
    fprintf(f, "outcome %s (%s)", lk_failure_name(a->failure), class_text(a->failure));
    if (a->classified != a->failure)
      fprintf(f, " [classified %s]", lk_failure_name(a->classified));
    fprintf(f, ", request %s, %" PRIu64 " B sent, %" PRIu64 " B received",
            a->request_sent ? "sent" : "not fully sent", a->bytes_sent, a->bytes_received);
    if (a->curl_code)
      fprintf(f, ", curl error %d", a->curl_code);
    if (a->retry_after >= 0)
      fprintf(f, ", Retry-After %s", lk_duration_format(a->retry_after, t1, sizeof t1));
    if (a->resends)
      fprintf(f, ", %d silent re-send%s detected", a->resends, a->resends == 1 ? "" : "s");
    fputc('\n', f);
    if (a->decision.retry)
      fprintf(f, "*   decision RETRY, delay %s%s: %s\n",
              lk_duration_format(a->decision.delay, t1, sizeof t1),
              a->decision.from_retry_after ? " (from Retry-After)" : "", a->reason);
    else
      fprintf(f, "*   decision %s: %s\n", lk_reason_name(a->decision.reason), a->reason);
  }
}

void cli_print_timeline(FILE *f, const lk_http_result *r) {
  size_t n = 0;
  const lk_http_attempt_info *a = lk_http_result_attempts(r, &n);
  for (size_t i = 0; i < n; i++)
    cli_print_attempt(f, &a[i]);
  if (n == 0)
    fprintf(f, "* no attempt was made\n");
}

void cli_print_summary(FILE *f, const cli_call_info *ci, const lk_http_result *r, int code) {
  size_t n = 0;
  lk_http_result_attempts(r, &n);
  char t[32];
  int err = lk_http_result_err(r);
  fprintf(f, "linkd: %s %s: %s", ci->method, ci->url,
          ci->stop                                         ? "redirect not followed"
          : code == CLI_EXIT_CANTCREAT && ci->output_error ? "output not written"
          : code == CLI_EXIT_OK                            ? "ok"
                                                           : lk_strerror(err));
  fprintf(f, " (%s, %s), %zu attempt%s in %s", lk_err_name(err),
          lk_failure_name(lk_http_result_failure(r)), n, n == 1 ? "" : "s",
          lk_duration_format(lk_http_result_elapsed(r), t, sizeof t));
  if (lk_http_result_status(r))
    fprintf(f, ", status %d", lk_http_result_status(r));
  const char *stop = ci->stop ? ci->stop : lk_http_result_stop(r);
  if (stop && *stop)
    fprintf(f, ": %s", stop);
  fprintf(f, " [exit %d]\n", code);
}

void cli_print_head(FILE *f, const lk_http_response *resp) {
  /* curl's form: "HTTP/1.1 200 OK", and "HTTP/2 200" (no reason phrase from HTTP/2 on) */
  if (resp->version >= 20 && resp->version % 10 == 0)
    fprintf(f, "HTTP/%d %d", resp->version / 10, resp->status);
  else if (resp->version > 0)
    fprintf(f, "HTTP/%d.%d %d", resp->version / 10, resp->version % 10, resp->status);
  else
    fprintf(f, "HTTP %d", resp->status); /* a version that did not parse is not invented */
  if (resp->reason && *resp->reason)
    fprintf(f, " %s", resp->reason);
  fputs("\r\n", f);
  for (size_t i = 0; i < resp->header_count; i++)
    fprintf(f, "%s: %s\r\n", resp->headers[i].name, resp->headers[i].value);
  fputs("\r\n", f);
}

/* Length of the valid UTF-8 sequence at s (1-4), or 0 if it is not one. */
static int utf8_len(const unsigned char *s) {
  if (s[0] < 0x80)
    return 1;
  int n = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 && s[0] < 0xE0 ? 2 : 0;
  if (n == 0)
    return 0;
  for (int i = 1; i < n; i++)
    if ((s[i] & 0xC0) != 0x80)
      return 0;
  /* Overlong forms, surrogates and code points above U+10FFFF. */
  if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0) ||
      (s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90))
    return 0;
  return n;
}

void cli_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    unsigned char c = *p;
    if (c == '"' || c == '\\') {
      fputc('\\', f);
      fputc(c, f);
      p++;
    } else if (c < 0x20 || c == 0x7F) {
      static const char esc[] = "btn?fr";
      if (c >= '\b' && c <= '\r' && c != 0x0B)
        fprintf(f, "\\%c", esc[c - '\b']);
      else
        fprintf(f, "\\u%04x", c);
      p++;
    } else {
      int n = utf8_len(p);
      if (n == 0) {
        fputs("\\ufffd", f);
        p++;
      } else {
        fwrite(p, 1, (size_t)n, f);
        p += n;
      }
    }
  }
  fputc('"', f);
}

static void json_ms(FILE *f, const char *key, int64_t ns, bool comma) {
  fprintf(f, "%s\"%s\":%.3f", comma ? "," : "", key, (double)ns / 1e6);
}

static void json_policy(FILE *f, const lk_http_policy *p, const cli_budget_spec *budget) {
  const lk_backoff_config *b = &p->retry.cfg.backoff;
  fputc('{', f);
  json_ms(f, "deadline_ms", p->deadline, false);
  json_ms(f, "attempt_timeout_ms", p->attempt_timeout, true);
  json_ms(f, "connect_timeout_ms", p->connect_timeout, true);
  json_ms(f, "dns_timeout_ms", p->dns_timeout, true);
  json_ms(f, "tls_timeout_ms", p->tls_timeout, true);
  json_ms(f, "write_timeout_ms", p->write_timeout, true);
  json_ms(f, "first_byte_timeout_ms", p->first_byte_timeout, true);
  json_ms(f, "idle_timeout_ms", p->idle_timeout, true);
  fprintf(f, ",\"max_attempts\":%d,\"backoff\":\"%s\",\"multiplier\":%g", p->retry.cfg.max_attempts,
          lk_backoff_kind_name(b->kind), b->multiplier);
  json_ms(f, "base_ms", b->base, true);
  json_ms(f, "max_delay_ms", b->max, true);
  fprintf(f, ",\"jitter\":\"%s\",\"jitter_ratio\":%g,\"idempotency_key\":\"%s\"",
          lk_jitter_kind_name(b->jitter), b->ratio, lk_idem_mode_name(p->idem_mode));
  fputs(",\"retry_on\":[", f);
  bool first = true;
  for (int k = 0; k < LK_F__COUNT; k++)
    if (p->retry.cfg.retry_on & LK_FAILURE_BIT(k)) {
      fprintf(f, "%s\"%s\"", first ? "" : ",", lk_failure_name((lk_failure)k));
      first = false;
    }
  char bud[128];
  fputs("],\"budget\":", f);
  cli_json_string(f, cli_budget_format(budget, bud, sizeof bud));
  fprintf(f, ",\"verify_tls\":%s,\"ca_file\":", p->verify_tls ? "true" : "false");
  const char *files[] = {p->ca_file, p->client_cert, p->client_key};
  const char *file_keys[] = {"ca_file", "client_cert", "client_key"};
  for (size_t i = 0; i < 3; i++) {
    if (i)
      fprintf(f, ",\"%s\":", file_keys[i]);
    if (files[i])
      cli_json_string(f, files[i]);
    else
      fputs("null", f);
  }
  /* whether there is a pass phrase, never the phrase */
  fprintf(f, ",\"key_password\":%s", p->key_password ? "true" : "false");
  fprintf(f, ",\"compressed\":%s", p->compressed ? "true" : "false");
  const char *const *lists[] = {p->resolve, p->connect_to};
  const size_t counts[] = {p->nresolve, p->nconnect_to};
  const char *names[] = {"resolve", "connect_to"};
  for (size_t l = 0; l < 2; l++) {
    fprintf(f, ",\"%s\":[", names[l]);
    for (size_t i = 0; i < counts[l]; i++) {
      if (i)
        fputc(',', f);
      cli_json_string(f, lists[l][i]);
    }
    fputc(']', f);
  }
  fputc('}', f);
}

/* lk_http_result_json()'s object with its "stop" replaced by `stop`. */
static void json_result_stop(FILE *f, const char *res, size_t len, const char *stop) {
  static const char key[] = ",\"stop\":";
  const char *k = strstr(res, key), *v = k ? k + strlen(key) : NULL;
  if (v && *v == '"')
    for (v++; *v && *v != '"'; v++)
      if (*v == '\\' && v[1])
        v++;
  if (!v || *v != '"') { /* not the shape http.h documents: leave it as it is */
    fwrite(res, 1, len, f);
    return;
  }
  fwrite(res, 1, (size_t)(k - res) + strlen(key), f);
  cli_json_string(f, stop);
  fwrite(v + 1, 1, len - (size_t)(v + 1 - res), f);
}

int cli_print_json(FILE *f, const cli_call_info *ci, const lk_http_result *r, int code) {
  char *res = NULL;
  size_t len = 0;
  if (lk_http_result_json(r, &res, &len) != 0)
    return -1;
  fprintf(f, "{\"linkd\":");
  cli_json_string(f, lk_version());
  fprintf(f, ",\"command\":\"%s\",\"method\":", ci->opts->command);
  cli_json_string(f, ci->method);
  fputs(",\"url\":", f);
  cli_json_string(f, ci->opts->url);
  fputs(",\"url_effective\":", f);
  cli_json_string(f, ci->url);
  fprintf(f, ",\"redirects\":%d", ci->redirects);
  fprintf(f, ",\"exit_code\":%d,\"exit\":\"%s\",\"output_error\":", code, cli_exit_name(code));
  if (ci->output_error)
    cli_json_string(f, ci->output_error);
  else
    fputs("null", f);
  fputs(",\"config\":", f);
  if (ci->config_path) {
    fputs("{\"path\":", f);
    cli_json_string(f, ci->config_path);
    fputs(",\"sections\":[", f);
    for (size_t i = 0; i < ci->nsections; i++) {
      if (i)
        fputc(',', f);
      cli_json_string(f, ci->sections[i]);
    }
    fputs("]}", f);
  } else {
    fputs("null", f);
  }
  fputs(",\"policy\":", f);
  json_policy(f, ci->policy, &ci->eff->budget);
  fputs(",\"response\":", f);
  const lk_http_response *resp = lk_http_result_response(r);
  if (resp) {
    fprintf(f, "{\"status\":%d,\"version\":", resp->status);
    /* as -i prints it: "1.1", "2"; null when the status line's version did not parse */
    if (resp->version >= 20 && resp->version % 10 == 0)
      fprintf(f, "\"%d\"", resp->version / 10);
    else if (resp->version > 0)
      fprintf(f, "\"%d.%d\"", resp->version / 10, resp->version % 10);
    else
      fputs("null", f);
    fputs(",\"reason\":", f);
    cli_json_string(f, resp->reason ? resp->reason : "");
    fprintf(f, ",\"complete\":%s,\"body_bytes\":%zu,\"headers\":[",
            resp->complete ? "true" : "false", resp->body_len);
    for (size_t i = 0; i < resp->header_count; i++) {
      fputs(i ? ",{\"name\":" : "{\"name\":", f);
      cli_json_string(f, resp->headers[i].name);
      fputs(",\"value\":", f);
      cli_json_string(f, resp->headers[i].value);
      fputc('}', f);
    }
    fputs("]}", f);
  } else {
    fputs("null", f);
  }
  fputs(",\"result\":", f);
  if (ci->stop)
    json_result_stop(f, res, len, ci->stop);
  else
    fwrite(res, 1, len, f);
  fputs("}\n", f);
  free(res);
  return 0;
}
