/* SPDX-License-Identifier: MIT */
#include <linkd/duration.h>
#include <linkd/error.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const struct {
  const char *name;
  int64_t ns;
} units[] = {
    /* Longest names first so "ms" is not read as "m" followed by junk. */
    {"ns", INT64_C(1)},         {"us", INT64_C(1000)},       {"ms", INT64_C(1000000)},
    {"s", INT64_C(1000000000)}, {"m", INT64_C(60000000000)}, {"h", INT64_C(3600000000000)},
};

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

int lk_duration_parse(const char *s, int64_t *out, char *err, size_t cap) {
  if (!err)
    cap = 0; /* snprintf(NULL, 0, ...) only measures */
  if (!s || !out) {
    snprintf(err, cap, "no duration given");
    return LK_EINVAL;
  }
  if (!*s) {
    snprintf(err, cap, "empty duration (use e.g. 250ms, 3s, 1m)");
    return LK_EPARSE;
  }
  const char *p = s;
  int64_t total = 0;
  while (*p) {
    if (!is_digit(*p) && !(*p == '.' && is_digit(p[1]))) {
      snprintf(err, cap, "'%s' is not a duration (use e.g. 250ms, 3s, 1m)", s);
      return LK_EPARSE;
    }
    int64_t whole = 0;
    bool too_big = false;
    for (; is_digit(*p); p++) {
      if (whole > (INT64_MAX - (*p - '0')) / 10)
        too_big = true;
      else
        whole = whole * 10 + (*p - '0');
    }
    const char *frac = NULL;
    size_t nfrac = 0;
    if (*p == '.') {
      frac = ++p;
      for (; is_digit(*p); p++)
        nfrac++;
      if (nfrac == 0) {
        snprintf(err, cap, "'%s' is not a duration (digits must follow '.')", s);
        return LK_EPARSE;
      }
    }
    const char *u = p;
    while (*p && !is_digit(*p) && *p != '.')
      p++;
    size_t ulen = (size_t)(p - u);
    if (ulen == 0) {
      snprintf(err, cap, "'%s' needs a unit: ns, us, ms, s, m or h (e.g. 250ms, 3s)", s);
      return LK_EPARSE;
    }
    int64_t unit = 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
      if (strlen(units[i].name) == ulen && memcmp(units[i].name, u, ulen) == 0)
        unit = units[i].ns;
    if (unit == 0) {
      snprintf(err, cap, "unknown unit '%.*s' in '%s' (use ns, us, ms, s, m or h)", (int)ulen, u,
               s);
      return LK_EPARSE;
    }
    /* floor(unit * 0.d1d2...dn) exactly, by dividing from the last digit up (nested floors of
     * divisions by 10 compose into one). Dividing the unit by 10 per digit instead truncated
     * each digit on its own: 1 m and 1 h are not 10^k ns, so "0.00000000009m" (5.4 ns) gave 0.
     * fracns stays below one unit, so the bound is checked once below. */
    int64_t fracns = 0;
    for (size_t i = nfrac; i-- > 0;)
      fracns = ((frac[i] - '0') * unit + fracns) / 10;
    if (too_big || whole > (INT64_MAX - fracns) / unit) {
      snprintf(err, cap, "'%s' is too long a duration", s);
      return LK_ERANGE;
    }
    int64_t term = whole * unit + fracns;
    if (term > INT64_MAX - total) {
      snprintf(err, cap, "'%s' is too long a duration", s);
      return LK_ERANGE;
    }
    total += term;
  }
  *out = total;
  return LK_OK;
}

/* Prints v / div with up to three decimals, trailing zeros dropped. */
static void print_scaled(char *buf, size_t cap, uint64_t v, uint64_t div, const char *unit) {
  uint64_t whole = v / div;
  uint64_t milli = (v % div) / (div / 1000);
  if (milli == 0) {
    snprintf(buf, cap, "%llu%s", (unsigned long long)whole, unit);
    return;
  }
  char frac[24];
  snprintf(frac, sizeof frac, "%03u", (unsigned)milli); /* milli < 1000 */
  for (int i = 2; i > 0 && frac[i] == '0'; i--)
    frac[i] = '\0';
  snprintf(buf, cap, "%llu.%s%s", (unsigned long long)whole, frac, unit);
}

char *lk_duration_format(int64_t ns, char *buf, size_t cap) {
  if (cap == 0 || !buf)
    return buf;
  size_t off = 0;
  uint64_t v = (uint64_t)ns;
  if (ns < 0) {
    v = (uint64_t)0 - (uint64_t)ns;
    if (cap > 1)
      buf[off++] = '-';
    buf[off] = '\0';
  }
  char *b = buf + off;
  size_t c = cap - off;
  if (v >= UINT64_C(1000000000))
    print_scaled(b, c, v, UINT64_C(1000000000), "s");
  else if (v >= UINT64_C(1000000))
    print_scaled(b, c, v, UINT64_C(1000000), "ms");
  else if (v >= UINT64_C(1000))
    print_scaled(b, c, v, UINT64_C(1000), "us");
  else
    snprintf(b, c, "%lluns", (unsigned long long)v);
  return buf;
}
