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

/* Copies s for the text log as printable ASCII: a space, control, DEL, non-ASCII byte or '\\'
 * becomes \\xHH (a decoded path may hold any byte but NUL), so a line stays one line and every
 * byte can be recovered; cut at cap. */
static void clean(char *dst, size_t cap, const char *s) {
  static const char hex[] = "0123456789abcdef";
  size_t n = 0;
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    bool esc = c <= 0x20 || c >= 0x7f || c == '\\';
    if (n + (esc ? 4 : 1) >= cap)
      break;
    if (esc) {
      dst[n++] = '\\';
      dst[n++] = 'x';
      dst[n++] = hex[c >> 4];
      dst[n++] = hex[c & 15];
    } else {
      dst[n++] = (char)c;
    }
  }
  if (n == 0 && cap > 1)
    dst[n++] = '-';
  dst[n] = '\0';
}

/* The length of the valid UTF-8 sequence at s (RFC 3629: no overlongs, surrogates or code points
 * above U+10FFFF), 0 if there is none. */
static size_t utf8_seq(const unsigned char *s) {
  if (s[0] < 0x80)
    return 1;
  size_t n = s[0] >= 0xc2 && s[0] <= 0xdf   ? 2
             : s[0] >= 0xe0 && s[0] <= 0xef ? 3
             : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4
                                            : 0;
  if (n == 0)
    return 0;
  unsigned char lo = 0x80, hi = 0xbf; /* the second byte's range */
  if (s[0] == 0xe0)
    lo = 0xa0;
  else if (s[0] == 0xed)
    hi = 0x9f;
  else if (s[0] == 0xf0)
    lo = 0x90;
  else if (s[0] == 0xf4)
    hi = 0x8f;
  if (s[1] < lo || s[1] > hi)
    return 0;
  for (size_t i = 2; i < n; i++)
    if (s[i] < 0x80 || s[i] > 0xbf)
      return 0;
  return n;
}

/* Copies s for the JSON log with each byte that is not part of valid UTF-8 replaced by U+FFFD
 * (jansson refuses such strings, and the line would be lost). cap >= 3 * strlen(s) + 1 never
 * cuts; NULL stays NULL. */
static const char *utf8_clean(char *dst, size_t cap, const char *s) {
  if (!s)
    return NULL;
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    size_t k = utf8_seq(p);
    const char *src = k ? (const char *)p : "\xef\xbf\xbd";
    size_t len = k ? k : 3;
    if (n + len >= cap)
      break;
    memcpy(dst + n, src, len);
    n += len;
    p += k ? k : 1;
  }
  dst[n] = '\0';
  return dst;
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
    /* Header values may carry bytes >= 0x80 and the decoded path any byte but NUL. */
    char path[3 * LK_PATH_MAX], tenant[3 * sizeof r->tenant], key[3 * sizeof r->key],
        att[3 * sizeof r->attempt], rid[3 * sizeof r->request_id];
    json_t *o = json_pack(
        "{s:s,s:s,s:s,s:i,s:f,s:s?,s:s?,s:s?,s:s?,s:s?,s:s,s:s}", "ts", ts, "method", r->method,
        "path", utf8_clean(path, sizeof path, r->path), "status", r->status, "ms", ms, "tenant",
        r->tenant[0] ? utf8_clean(tenant, sizeof tenant, r->tenant) : NULL, "key",
        r->keyed ? utf8_clean(key, sizeof key, r->key) : NULL, "attempt",
        r->attempt[0] ? utf8_clean(att, sizeof att, r->attempt) : NULL, "request_id",
        r->request_id[0] ? utf8_clean(rid, sizeof rid, r->request_id) : NULL, "fault", fault,
        "outcome", r->outcome, "end", toe_name(toe));
    char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    /* No fixed buffer: an escaped control byte takes 6 characters, and a cut line is no JSON. */
    size_t len = txt ? strlen(txt) : 0;
    char *out = txt ? malloc(len + 1) : NULL;
    if (out) {
      memcpy(out, txt, len);
      out[len] = '\n';
      ssize_t w = write(s->cfg.log_fd, out, len + 1);
      (void)w;
    } else {
      static const char oom[] = "libraryd: access log: out of memory, a line is lost\n";
      ssize_t w = write(s->cfg.log_fd, oom, sizeof oom - 1);
      (void)w;
    }
    free(out);
    free(txt);
    return;
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
