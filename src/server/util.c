/* SPDX-License-Identifier: MIT */
/* util.c: durations, sizes, integers, route patterns, HTTP dates. */
#include "util.h"

#include <linkd/common.h>
#include <linkd/error.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int lk_parse_i64(const char *s, size_t len, bool allow_negative, int64_t *out) {
  if (!s || !len)
    return LK_EPARSE;
  bool neg = false;
  size_t i = 0;
  if (allow_negative && s[0] == '-') {
    neg = true;
    i = 1;
    if (len == 1)
      return LK_EPARSE;
  }
  uint64_t v = 0;
  const uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; i < len; i++) {
    if (s[i] < '0' || s[i] > '9')
      return LK_EPARSE;
    unsigned d = (unsigned)(s[i] - '0');
    if (v > (limit - d) / 10)
      return LK_ERANGE;
    v = v * 10 + d;
  }
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return LK_OK;
}

int lk_parse_id(const char *s, size_t len, int64_t *out) {
  if (!s || !len || s[0] == '0') /* "0", "00", "01": never an id, or not the id's own spelling */
    return LK_EPARSE;
  return lk_parse_i64(s, len, false, out);
}

int lk_parse_canonical(const char *s, size_t len, int64_t *out) {
  if (s && len > 1 && s[0] == '0') /* "00", "05": 0 and 5 under another spelling */
    return LK_EPARSE;
  return lk_parse_i64(s, len, false, out);
}

unsigned lk_whole_seconds_up(int64_t ns, unsigned max) {
  if (ns <= 0)
    return 0;
  int64_t s = ns / LK_NS_PER_S + (ns % LK_NS_PER_S != 0);
  return s > (int64_t)max ? max : (unsigned)s;
}

/* Matches path segments against pattern segments ("*" one, final "**" the rest). */
static bool path_match(const char *pat, const char *path) {
  for (;;) {
    if (!strcmp(pat, "/**"))
      return true; /* the rest, including nothing */
    if (*pat != '/' || *path != '/')
      return *pat == '\0' && *path == '\0';
    pat++;
    path++;
    size_t pl = strcspn(pat, "/");
    size_t sl = strcspn(path, "/");
    if (pl == 2 && pat[0] == '*' && pat[1] == '*' && pat[2] == '\0')
      return true;
    if (pl == 1 && pat[0] == '*') {
      if (sl == 0)
        return false;
    } else if (pl != sl || memcmp(pat, path, pl) != 0) {
      return false;
    }
    pat += pl;
    path += sl;
  }
}

bool lk_route_match(const char *pattern, const char *method, const char *path) {
  if (!strcmp(pattern, "*"))
    return true;
  const char *sp = strchr(pattern, ' ');
  const char *pat_path = pattern;
  if (sp) {
    size_t ml = (size_t)(sp - pattern);
    if (!(ml == 1 && pattern[0] == '*') && (strlen(method) != ml || memcmp(pattern, method, ml)))
      return false;
    pat_path = sp + 1;
  }
  return path_match(pat_path, path);
}

int lk_route_pattern_check(const char *pattern) {
  if (!pattern || !*pattern)
    return LK_EPARSE;
  if (!strcmp(pattern, "*"))
    return LK_OK;
  const char *sp = strchr(pattern, ' ');
  const char *p = pattern;
  if (sp) {
    if (sp == pattern || sp - pattern > 15)
      return LK_EPARSE;
    for (const char *m = pattern; m < sp; m++)
      if (!((*m >= 'A' && *m <= 'Z') || (*m == '*' && sp - pattern == 1)))
        return LK_EPARSE;
    p = sp + 1;
  }
  if (*p != '/' || strchr(p, ' '))
    return LK_EPARSE;
  const char *dd = strstr(p, "**");
  if (dd && (dd[-1] != '/' || dd[2] != '\0'))
    return LK_EPARSE;
  return LK_OK;
}

void lk_http_date(int64_t wall_ns, char *buf, size_t cap) {
  time_t t = (time_t)(wall_ns / LK_NS_PER_S);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, cap, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

int lk_parse_fail(char *err, size_t cap, const char *fmt, ...) {
  if (err && cap) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
  }
  return LK_EPARSE;
}
