/* SPDX-License-Identifier: MIT */
/* libFuzzer: the small value parsers behind libraryd's flags and config file (--work specs,
 * sizes, integers, route patterns, queue disciplines) and its query parameters (integers in
 * their canonical form). The first byte picks the parser; the rest is the text. Accepted values
 * are in range and agree with a second reading; refused ones carry a message where the parser
 * writes one. */
#include "admq.h"
#include "conf_size.h"
#include "util.h"
#include "work.h"

#include <linkd/error.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static void work(const char *s) {
  static lk_work_spec w, again;
  char err[256] = "";
  int rc = lk_work_parse(s, &w, err, sizeof err);
  if (rc != LK_OK) {
    if (rc != LK_EPARSE || err[0] == '\0')
      abort();
    return;
  }
  if (w.n > LK_WORK_MAX)
    abort();
  for (size_t i = 0; i < w.n; i++) {
    const lk_work_entry *e = &w.e[i];
    if (e->ns < 0 || !memchr(e->route, '\0', sizeof e->route) ||
        lk_route_pattern_check(e->route) != LK_OK)
      abort();
    if (lk_work_scaled(e->ns, 1e6) < 0 || lk_work_scaled(e->ns, 0.5) > e->ns)
      abort();
  }
  /* Lookups never read past an entry and find only entries that match. */
  static const char *const probes[][2] = {
      {"GET", "/books/1"}, {"POST", "/books/1/loans"}, {"DELETE", "/"}, {"GET", "/a/b/c/d"}};
  for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
    const lk_work_entry *e = lk_work_find(&w, probes[i][0], probes[i][1]);
    if (e && !lk_route_match(e->route, probes[i][0], probes[i][1]))
      abort();
  }
  /* The same text parses to the same spec. */
  if (lk_work_parse(s, &again, NULL, 0) != LK_OK || again.n != w.n)
    abort();
  for (size_t i = 0; i < w.n; i++)
    if (again.e[i].ns != w.e[i].ns || again.e[i].cpu != w.e[i].cpu ||
        strcmp(again.e[i].route, w.e[i].route) != 0)
      abort();
}

static void size_value(const char *s) {
  uint64_t v;
  int rc = conf_parse_size(s, UINT64_MAX, &v);
  if (rc != 0 && rc != -1 && rc != 1)
    abort();
  if (rc == 0) {
    /* The digits alone are the value in bytes, or that times a power of 1024 (up to 1024^4). */
    if (strspn(s, "0123456789") == 0)
      abort();
    uint64_t d = strtoull(s, NULL, 10); /* in range: the parse succeeded */
    bool found = false;
    for (unsigned shift = 0; shift <= 40 && !found; shift += 10)
      found = d <= UINT64_MAX >> shift && v == d << shift;
    if (!found)
      abort();
    uint64_t w;
    if (v > 0 && conf_parse_size(s, v - 1, &w) != 1) /* one below the value: over the limit */
      abort();
  }
}

static void integer(const char *s, size_t len) {
  for (int neg = 0; neg < 2; neg++) {
    int64_t v;
    int rc = lk_parse_i64(s, len, neg, &v);
    if (rc != LK_OK && rc != LK_EPARSE && rc != LK_ERANGE)
      abort();
    if (rc != LK_OK)
      continue;
    if (!neg && v < 0)
      abort();
    /* Printing the value gives the text back, but for leading zeros (and "-0"). */
    const char *t = s;
    size_t n = len;
    bool minus = n > 0 && *t == '-';
    if (minus)
      t++, n--;
    while (n > 1 && *t == '0')
      t++, n--;
    char buf[32];
    int k =
        snprintf(buf, sizeof buf, "%s%.*s", minus && !(n == 1 && *t == '0') ? "-" : "", (int)n, t);
    char back[32];
    snprintf(back, sizeof back, "%" PRId64, v);
    if (k < 0 || strcmp(buf, back) != 0)
      abort();
  }
  /* The canonical reading (query parameters) accepts exactly the texts a non-negative value
   * prints as: the same value, and nothing lk_parse_i64 refuses. */
  int64_t v, c;
  char back[32];
  int rc = lk_parse_i64(s, len, false, &v);
  bool prints_back = rc == LK_OK && snprintf(back, sizeof back, "%" PRId64, v) == (int)len &&
                     memcmp(back, s, len) == 0;
  int crc = lk_parse_canonical(s, len, &c);
  if ((crc == LK_OK) != prints_back || (crc == LK_OK && c != v))
    abort();
  if (crc != LK_OK && crc != LK_EPARSE && crc != LK_ERANGE)
    abort();
}

static void route(const char *s) {
  /* "PATTERN\nMETHOD\nPATH": any text as each part; only a checked pattern is matched. */
  char *nl1 = strchr(s, '\n');
  char *nl2 = nl1 ? strchr(nl1 + 1, '\n') : NULL;
  if (!nl2)
    return;
  *nl1 = *nl2 = '\0';
  const char *pat = s, *method = nl1 + 1, *path = nl2 + 1;
  int rc = lk_route_pattern_check(pat);
  if (rc != LK_OK && rc != LK_EPARSE)
    abort();
  if (rc == LK_OK) {
    bool m = lk_route_match(pat, method, path);
    /* "**" and "*" match every method and path, a pattern matches itself when it is literal. */
    if (!strcmp(pat, "*") && !m)
      abort();
    if (!strchr(pat, '*') && pat[0] == '/' && !lk_route_match(pat, "GET", pat))
      abort();
  }
}

static void qdisc(const char *s) {
  lk_qdisc d;
  int rc = lk_qdisc_parse(s, &d);
  if (rc == LK_OK) {
    if (strcmp(lk_qdisc_name(d), s) != 0)
      abort();
  } else if (rc != LK_EPARSE) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  if (size == 0)
    return 0;
  char *s = malloc(size);
  if (!s)
    return 0;
  memcpy(s, data + 1, size - 1);
  s[size - 1] = '\0';
  switch (data[0] % 5) {
  case 0: work(s); break;
  case 1: size_value(s); break;
  case 2: integer(s, size - 1); break;
  case 3: route(s); break;
  default: qdisc(s); break;
  }
  free(s);
  return 0;
}
