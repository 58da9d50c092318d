/* SPDX-License-Identifier: MIT */
/* work.c: parsing and lookup of service costs. */
#include "work.h"
#include "util.h"

#include <linkd/duration.h>
#include <linkd/error.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static char *trim(char *s) {
  while (*s == ' ')
    s++;
  size_t n = strlen(s);
  while (n && s[n - 1] == ' ')
    s[--n] = '\0';
  return s;
}

int lk_work_parse(const char *spec, lk_work_spec *out, char *err, size_t errcap) {
  memset(out, 0, sizeof *out);
  char buf[LK_WORK_MAX * (LK_WORK_ROUTE_MAX + 32)];
  if (!spec || strlen(spec) >= sizeof buf)
    return lk_parse_fail(err, errcap, "missing or too long");
  snprintf(buf, sizeof buf, "%s", spec);
  char *all = trim(buf);
  if (!strcmp(all, "none"))
    return LK_OK;
  if (!*all)
    return lk_parse_fail(err, errcap, "empty (use 'none' for no cost)");
  for (char *tok = all, *next; tok; tok = next) {
    /* Split by hand: strtok would skip an empty entry, which is a typo worth reporting. */
    char *comma = strchr(tok, ',');
    next = comma ? comma + 1 : NULL;
    if (comma)
      *comma = '\0';
    if (!*trim(tok))
      return lk_parse_fail(err, errcap, "empty entry (a stray comma?)");
    /* Route patterns never contain '=', so the last one separates the cost. */
    char *eq = strrchr(tok, '=');
    if (!eq)
      return lk_parse_fail(err, errcap, "'%s' is not ROUTE=COST", trim(tok));
    *eq = '\0';
    char *route = trim(tok), *cost = trim(eq + 1);
    if (out->n == LK_WORK_MAX)
      return lk_parse_fail(err, errcap, "more than %d entries", LK_WORK_MAX);
    if (lk_route_pattern_check(route) != LK_OK || strlen(route) >= LK_WORK_ROUTE_MAX)
      return lk_parse_fail(err, errcap, "bad route pattern '%s' (want 'METHOD /path/*')", route);
    lk_work_entry *e = &out->e[out->n];
    snprintf(e->route, sizeof e->route, "%s", route);
    if (!strncmp(cost, "cpu:", 4)) {
      e->cpu = true;
      cost += 4;
    }
    char why[128];
    if (lk_duration_parse(cost, &e->ns, why, sizeof why) != LK_OK)
      return lk_parse_fail(err, errcap, "%s: bad cost '%s': %s", route, cost, why);
    out->n++;
  }
  return LK_OK;
}

const lk_work_entry *lk_work_find(const lk_work_spec *w, const char *method, const char *path) {
  for (size_t i = 0; i < w->n; i++)
    if (lk_route_match(w->e[i].route, method, path))
      return &w->e[i];
  return NULL;
}

int64_t lk_work_scaled(int64_t cost_ns, double factor) {
  if (cost_ns <= 0 || !(factor > 0))
    return 0;
  double v = (double)cost_ns * factor;
  return v >= 9.2e18 ? INT64_MAX : (int64_t)v;
}
