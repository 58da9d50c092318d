/* SPDX-License-Identifier: MIT */
/* lk_http_result: the final response, the typed error and the attempt timeline (+ JSON). */
#include "http_internal.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

lk_http_result *lk__result_new(void) {
  /* Not calloc: glibc's calloc bypasses the per-thread cache, and a result is allocated and
   * freed once per call; only the head needs zeroing */
  lk_http_result *r = malloc(sizeof *r);
  if (r) {
    memset(r, 0, offsetof(lk_http_result, first));
    r->stop[0] = r->idem_key[0] = '\0';
    r->failure = LK_F_NONE;
    r->attempts = &r->first; /* most calls take one attempt: no second allocation */
    r->cap_attempts = 1;
  }
  return r;
}

lk_http_attempt_info *lk__result_add_attempt(lk_http_result *r) {
  if (r->nattempts == r->cap_attempts) {
    size_t nc = r->cap_attempts < 4 ? 4 : 2 * r->cap_attempts;
    bool inl = r->attempts == &r->first;
    lk_http_attempt_info *na = realloc(inl ? NULL : r->attempts, nc * sizeof *na);
    if (!na)
      return NULL;
    if (inl)
      na[0] = r->first;
    r->attempts = na;
    r->cap_attempts = nc;
  }
  lk_http_attempt_info *a = &r->attempts[r->nattempts++];
  memset(a, 0, sizeof *a);
  return a;
}

int lk_http_result_err(const lk_http_result *r) { return r ? r->err : LK_EINVAL; }
lk_failure lk_http_result_failure(const lk_http_result *r) { return r ? r->failure : LK_F_NONE; }

const lk_http_response *lk_http_result_response(const lk_http_result *r) {
  return r && r->has_resp ? &r->resp.view : NULL;
}

int lk_http_result_status(const lk_http_result *r) {
  return r && r->has_resp ? r->resp.view.status : 0;
}

const lk_http_attempt_info *lk_http_result_attempts(const lk_http_result *r, size_t *n) {
  if (n)
    *n = r ? r->nattempts : 0;
  return r ? r->attempts : NULL;
}

const char *lk_http_result_stop(const lk_http_result *r) { return r ? r->stop : ""; }

const char *lk_http_result_idempotency_key(const lk_http_result *r) {
  return r && r->has_key ? r->idem_key : NULL;
}

int64_t lk_http_result_elapsed(const lk_http_result *r) { return r ? r->elapsed : 0; }
int lk_http_result_resends(const lk_http_result *r) { return r ? r->resends : 0; }
int lk_http_result_hedges(const lk_http_result *r) { return r ? r->hedges : 0; }
bool lk_http_result_fallback(const lk_http_result *r) { return r && r->fallback; }
int lk_http_result_original_err(const lk_http_result *r) { return r ? r->original_err : LK_OK; }

void lk_http_result_free(lk_http_result *r) {
  if (!r)
    return;
  lk__resp_free(&r->resp);
  if (r->attempts != &r->first)
    free(r->attempts);
  free(r);
}

/* --- JSON -------------------------------------------------------------------------------------- */
void lk__j_raw(lk_jbuf *j, const char *s, size_t n) {
  if (j->oom)
    return;
  if (j->len + n + 1 > j->cap) {
    size_t nc = j->cap ? j->cap : 512;
    while (nc < j->len + n + 1)
      nc *= 2;
    char *np = realloc(j->p, nc);
    if (!np) {
      j->oom = true;
      return;
    }
    j->p = np;
    j->cap = nc;
  }
  memcpy(j->p + j->len, s, n);
  j->len += n;
  j->p[j->len] = '\0';
}

void lk__j_fmt(lk_jbuf *j, const char *fmt, ...) {
  char tmp[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) {
    j->oom = true;
    return;
  }
  lk__j_raw(j, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

void lk__j_str(lk_jbuf *j, const char *s) {
  if (!s) {
    lk__j_raw(j, "null", 4);
    return;
  }
  lk__j_raw(j, "\"", 1);
  const char *run = s;
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch >= 0x20 && ch != '"' && ch != '\\')
      continue;
    lk__j_raw(j, run, (size_t)(s - run));
    if (ch == '"')
      lk__j_raw(j, "\\\"", 2);
    else if (ch == '\\')
      lk__j_raw(j, "\\\\", 2);
    else
      lk__j_fmt(j, "\\u%04x", ch);
    run = s + 1;
  }
  lk__j_raw(j, run, (size_t)(s - run));
  lk__j_raw(j, "\"", 1);
}

void lk__j_ms(lk_jbuf *j, int64_t ns) {
  /* exact decimal: whole ms and three digits of fraction, no float rounding */
  const char *sign = ns < 0 ? "-" : "";
  uint64_t a = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
  lk__j_fmt(j, "%s%llu.%03llu", sign, (unsigned long long)(a / 1000000),
            (unsigned long long)(a / 1000 % 1000));
}

static const char *b(bool v) { return v ? "true" : "false"; }

static void timeline(lk_jbuf *j, const lk_http_result *r) {
  lk__j_raw(j, "[", 1);
  for (size_t i = 0; i < r->nattempts; i++) {
    const lk_http_attempt_info *a = &r->attempts[i];
    lk__j_fmt(j, "%s{\"attempt\":%d,\"start_ms\":", i ? "," : "", a->number);
    lk__j_ms(j, a->start);
    lk__j_raw(j, ",\"duration_ms\":", 15);
    lk__j_ms(j, a->duration);
    lk__j_raw(j, ",\"phase\":", 9);
    lk__j_str(j, lk_http_phase_name(a->phase));
    lk__j_raw(j, ",\"failure\":", 11);
    lk__j_str(j, lk_failure_name(a->failure));
    lk__j_raw(j, ",\"classified\":", 14);
    lk__j_str(j, lk_failure_name(a->classified));
    lk__j_fmt(j, ",\"status\":%d,\"curl_code\":%d,\"bytes_sent\":%llu,\"bytes_received\":%llu",
              a->status, a->curl_code, (unsigned long long)a->bytes_sent,
              (unsigned long long)a->bytes_received);
    lk__j_fmt(j, ",\"request_sent\":%s,\"reused_connection\":%s,\"resends\":%d,\"timeout_ms\":",
              b(a->request_sent), b(a->reused_connection), a->resends);
    lk__j_ms(j, a->timeout);
    lk__j_raw(j, ",\"connect_timeout_ms\":", 22);
    lk__j_ms(j, a->connect_timeout);
    lk__j_raw(j, ",\"retry_after_ms\":", 18);
    if (a->retry_after < 0)
      lk__j_raw(j, "null", 4);
    else
      lk__j_ms(j, a->retry_after);
    lk__j_raw(j, ",\"decision\":", 12);
    lk__j_str(j, lk_reason_name(a->decision.reason));
    lk__j_fmt(j, ",\"retry\":%s,\"delay_ms\":", b(a->decision.retry));
    lk__j_ms(j, a->decision.delay);
    lk__j_raw(j, ",\"reason\":", 10);
    lk__j_str(j, a->reason);
    if (a->hedge) /* only when set: timelines of calls that do not hedge are unchanged */
      lk__j_raw(j, ",\"hedge\":true", 13);
    lk__j_raw(j, "}", 1);
  }
  lk__j_raw(j, "]", 1);
}

static int done(lk_jbuf *j, char **out, size_t *len) {
  if (j->oom) {
    free(j->p);
    return LK_ENOMEM;
  }
  *out = j->p;
  if (len)
    *len = j->len;
  return LK_OK;
}

int lk_http_result_timeline_json(const lk_http_result *r, char **out, size_t *len) {
  if (!r || !out)
    return LK_EINVAL;
  lk_jbuf j = {0};
  timeline(&j, r);
  return done(&j, out, len);
}

int lk_http_result_json(const lk_http_result *r, char **out, size_t *len) {
  if (!r || !out)
    return LK_EINVAL;
  lk_jbuf j = {0};
  lk__j_fmt(&j, "{\"ok\":%s,\"error\":", b(r->err == LK_OK));
  lk__j_str(&j, r->err == LK_OK ? "OK" : lk_err_name(r->err));
  lk__j_raw(&j, ",\"error_message\":", 17);
  lk__j_str(&j, lk_strerror(r->err));
  if (r->fallback) {
    lk__j_raw(&j, ",\"fallback\":true,\"original_error\":", 34);
    lk__j_str(&j, lk_err_name(r->original_err));
  }
  lk__j_raw(&j, ",\"failure\":", 11);
  lk__j_str(&j, lk_failure_name(r->failure));
  lk__j_fmt(&j, ",\"status\":%d,\"attempts\":%zu,\"elapsed_ms\":", lk_http_result_status(r),
            r->nattempts);
  lk__j_ms(&j, r->elapsed);
  lk__j_raw(&j, ",\"stop\":", 8);
  lk__j_str(&j, r->stop);
  lk__j_raw(&j, ",\"idempotency_key\":", 19);
  lk__j_str(&j, lk_http_result_idempotency_key(r));
  lk__j_fmt(&j, ",\"resends\":%d", r->resends);
  if (r->hedges)
    lk__j_fmt(&j, ",\"hedges\":%d", r->hedges);
  lk__j_fmt(&j, ",\"body_bytes\":%zu,\"timeline\":",
            r->has_resp ? r->resp.view.body_len : (size_t)0);
  timeline(&j, r);
  lk__j_raw(&j, "}", 1);
  return done(&j, out, len);
}
