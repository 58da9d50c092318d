/* SPDX-License-Identifier: MIT */
/* The process log (stderr, by level) and the access log: one JSON object per line per request. */
#include "gwp.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *level_name(lk_gw_log_level l) {
  switch (l) {
  case LK_GW_LOG_ERROR: return "error";
  case LK_GW_LOG_WARN: return "warn";
  case LK_GW_LOG_INFO: return "info";
  default: return "debug";
  }
}

void gwp_log(gwp_server *s, lk_gw_log_level lvl, const char *fmt, ...) {
  if (s->cfg && lvl > s->cfg->log.level)
    return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "linkd serve: %s: %s\n", level_name(lvl), msg);
}

/* JSON string body for `s` (quotes and controls escaped). */
static void put_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

void gwp_access_log(gwp_server *s, const gwp_req *r, const lk_http_result *res) {
  if (!atomic_load_explicit(&s->sh->access_on, memory_order_relaxed))
    return; /* no log: no lock taken on the request path */
  pthread_mutex_lock(&s->sh->mu); /* whole lines, one thread at a time */
  FILE *f = s->sh->access;
  if (!f) {
    pthread_mutex_unlock(&s->sh->mu);
    return;
  }
  int64_t now = gwp_now();
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  fprintf(f, "{\"ts\":%lld.%03ld,\"method\":", (long long)ts.tv_sec, ts.tv_nsec / 1000000);
  put_str(f, http_method_str(r->method));
  fputs(",\"path\":", f);
  put_str(f, r->path ? r->path : r->head);
  fputs(",\"route\":", f);
  if (r->route)
    put_str(f, r->route->name);
  else
    fputs("null", f);
  fputs(",\"policy\":", f);
  if (r->pol)
    put_str(f, r->pol->version);
  else
    fputs("null", f);
  fprintf(f, ",\"status\":%d", r->status);
  size_t natt = 0;
  const lk_http_attempt_info *att = res ? lk_http_result_attempts(res, &natt) : NULL;
  fprintf(f, ",\"attempts\":%d,\"endpoints\":[", gwp_attempts_made(res));
  int shown = 0;
  for (size_t i = 0; i < natt && i < GWP_MAX_TRACKED; i++) {
    if (att[i].phase == LK_PHASE_QUEUED || (int)i >= r->nattempts)
      continue;
    if (shown++)
      fputc(',', f);
    put_str(f, r->route->cluster->endpoints[r->ep[i]].key);
  }
  fputs("],\"final\":", f);
  put_str(f, lk_failure_name(r->final));
  fputs(",\"stop\":", f);
  put_str(f, r->stop);
  if (r->deadline > 0)
    fprintf(f, ",\"deadline_ms\":%.3f,\"deadline_left_ms\":%.3f", (double)r->deadline / 1e6,
            (double)lk_sat_sub(r->deadline_at, now) / 1e6);
  else
    fputs(",\"deadline_ms\":null,\"deadline_left_ms\":null", f);
  fprintf(f, ",\"duration_ms\":%.3f,\"streamed\":%s,\"key_injected\":%s}\n",
          (double)lk_sat_sub(now, r->t_start) / 1e6, r->streamed ? "true" : "false",
          r->key_injected && res && lk_http_result_idempotency_key(res) ? "true" : "false");
  pthread_mutex_unlock(&s->sh->mu);
}

int gwp_access_open(gwp_shared *s, const lk_gw_config *c) {
  FILE *f = NULL;
  bool owned = false;
  if (c->log.access) {
    if (strcmp(c->log.access, "-") == 0) {
      f = stdout;
      /* setvbuf only before a stream's first use: once for stdout, not again at each reload */
      static atomic_flag stdout_set = ATOMIC_FLAG_INIT;
      if (!atomic_flag_test_and_set(&stdout_set))
        setvbuf(f, NULL, _IOLBF, 0);
    } else {
      f = fopen(c->log.access, "a");
      if (!f)
        return LK_ESYS;
      owned = true;
      setvbuf(f, NULL, _IOLBF, 0); /* whole lines, at once: tail -f and tests read them */
    }
  }
  pthread_mutex_lock(&s->mu);
  if (s->access && s->access_owned)
    fclose(s->access);
  s->access = f;
  s->access_owned = owned;
  atomic_store(&s->access_on, f != NULL);
  pthread_mutex_unlock(&s->mu);
  return LK_OK;
}
