/* SPDX-License-Identifier: MIT */
/* resp.c: building handler responses (status, header lines, JSON body). */
#include "server_impl.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void resp_init(lk_resp *r, int status) {
  r->status = status;
  r->headers[0] = '\0';
  r->hlen = 0;
  r->body = NULL;
  r->body_len = 0;
}

void resp_free(lk_resp *r) {
  free(r->body);
  r->body = NULL;
  r->body_len = 0;
}

void resp_header(lk_resp *r, const char *name, const char *value) {
  int n = snprintf(r->headers + r->hlen, sizeof r->headers - r->hlen, "%s: %s\n", name, value);
  /* Header lines are ours and short; one that does not fit is dropped whole. */
  if (n > 0 && (size_t)n < sizeof r->headers - r->hlen)
    r->hlen += (size_t)n;
  else
    r->headers[r->hlen] = '\0';
}

void resp_json_take(lk_resp *r, int status, char *body, size_t len) {
  resp_free(r);
  r->status = status;
  r->body = body;
  r->body_len = len;
  r->hlen = 0;
  r->headers[0] = '\0';
  resp_header(r, "Content-Type", "application/json");
}

void resp_error(lk_resp *r, int status, const char *code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  json_t *o = json_pack("{s:s,s:s,s:i}", "error", code, "message", msg, "status", status);
  char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  if (!body) {
    /* Out of memory or a message that is not UTF-8: fall back to the bare code. */
    body = malloc(64 + strlen(code));
    if (body)
      sprintf(body, "{\"error\":\"%s\",\"status\":%d}", code, status);
  }
  resp_json_take(r, status, body, body ? strlen(body) : 0);
}

void resp_from_record(lk_resp *out, const lk_idem_record *rec) {
  resp_free(out);
  resp_init(out, rec->status);
  size_t hl = strlen(rec->headers);
  if (hl >= sizeof out->headers)
    hl = sizeof out->headers - 1;
  memcpy(out->headers, rec->headers, hl);
  out->headers[hl] = '\0';
  out->hlen = hl;
  out->body = malloc(rec->body_len ? rec->body_len : 1);
  if (out->body) {
    memcpy(out->body, rec->body, rec->body_len);
    out->body_len = rec->body_len;
  }
  resp_header(out, "Idempotent-Replayed", "true");
}
