/* SPDX-License-Identifier: MIT */
/* log.c: one access-log line per request, written with a single write(2) so lines from many
 * threads never interleave. */
#include "server_impl.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *toe_name(enum MHD_RequestTerminationCode toe) {
  switch (toe) {
  case MHD_REQUEST_TERMINATED_COMPLETED_OK: return "completed";
  case MHD_REQUEST_TERMINATED_WITH_ERROR: return "error";
  case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED: return "timeout";
  case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN: return "shutdown";
  case MHD_REQUEST_TERMINATED_READ_ERROR: return "read_error";
  case MHD_REQUEST_TERMINATED_CLIENT_ABORT: return "client_abort";
  default: return "other";
  }
}

/* Copies s with control characters and spaces replaced, so a line stays one line. */
static void clean(char *dst, size_t cap, const char *s) {
  size_t n = 0;
  for (; s && *s && n + 1 < cap; s++)
    dst[n++] = ((unsigned char)*s <= 0x20 || *s == 0x7f) ? '?' : *s;
  if (n == 0 && cap > 1)
    dst[n++] = '-';
  dst[n] = '\0';
}

void access_log(const req *r, enum MHD_RequestTerminationCode toe) {
  const lk_server *s = r->srv;
  if (s->cfg.log == LK_LOG_OFF)
    return;
  double ms = (double)(lk_now_ns() - r->t0) / 1e6;
  int64_t wall = lk_wall_ns();
  time_t secs = (time_t)(wall / 1000000000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char ts[40];
  size_t tl = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(ts + tl, sizeof ts - tl, ".%03dZ", (int)(wall / 1000000 % 1000));
  const char *fault = r->plan.act.kind != LK_FAULT_NONE ? lk_fault_kind_name(r->plan.act.kind)
                      : r->plan.delay_ns                ? "latency"
                                                        : NULL;
  char line[2048];
  int n;
  if (s->cfg.log == LK_LOG_JSON) {
    json_t *o = json_pack("{s:s,s:s,s:s,s:i,s:f,s:s?,s:s?,s:s?,s:s?,s:s?,s:s,s:s}", "ts", ts,
                          "method", r->method, "path", r->path, "status", r->status, "ms", ms,
                          "tenant", r->tenant[0] ? r->tenant : NULL, "key",
                          r->keyed ? r->key : NULL, "attempt", r->attempt[0] ? r->attempt : NULL,
                          "request_id", r->request_id[0] ? r->request_id : NULL, "fault", fault,
                          "outcome", r->outcome, "end", toe_name(toe));
    char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!txt)
      return;
    n = snprintf(line, sizeof line, "%s\n", txt);
    free(txt);
  } else {
    char path[512], tenant[96], key[96], att[32], rid[96];
    clean(path, sizeof path, r->path);
    clean(tenant, sizeof tenant, r->tenant);
    clean(key, sizeof key, r->keyed ? r->key : NULL);
    clean(att, sizeof att, r->attempt);
    clean(rid, sizeof rid, r->request_id);
    n = snprintf(line, sizeof line,
                 "%s %s %s %d %.3fms tenant=%s key=%s attempt=%s rid=%s fault=%s outcome=%s "
                 "end=%s\n",
                 ts, r->method, path, r->status, ms, tenant, key, att, rid, fault ? fault : "-",
                 r->outcome, toe_name(toe));
  }
  if (n <= 0)
    return;
  size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
  line[len - 1] = '\n';
  ssize_t w = write(s->cfg.log_fd, line, len);
  (void)w;
}
