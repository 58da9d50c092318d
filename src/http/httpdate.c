/* SPDX-License-Identifier: MIT */
/* HTTP-date (RFC 9110 5.6.7) and Retry-After (RFC 9110 10.2.3) parsing. Strict, bounded by len.
 *
 * Why not libcurl's curl_getdate(): it parses free-form dates (any order of fields, missing
 * seconds or zone, other zones, trailing text), needs a NUL-terminated string, and reports failure
 * as -1, which is also a valid instant. A Retry-After that is not one of the three HTTP-date forms
 * must be refused, not guessed at, and RFC 850's two-digit years must be read relative to the
 * caller's wall time (below), so the parser stays. */
#include "http_internal.h"

#include <string.h>

static const char *const wkday[] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
static const char *const weekday[] = {"Monday", "Tuesday",  "Wednesday", "Thursday",
                                      "Friday", "Saturday", "Sunday"};
static const char *const month[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

typedef struct cur {
  const char *p, *end;
} cur;

static bool lit(cur *c, const char *s) {
  size_t n = strlen(s);
  if ((size_t)(c->end - c->p) < n || memcmp(c->p, s, n) != 0)
    return false;
  c->p += n;
  return true;
}

/* Exactly n digits. */
static bool digits(cur *c, int n, int *out) {
  int v = 0;
  for (int i = 0; i < n; i++) {
    if (c->p >= c->end || *c->p < '0' || *c->p > '9')
      return false;
    v = v * 10 + (*c->p++ - '0');
  }
  *out = v;
  return true;
}

static int one_of(cur *c, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (lit(c, names[i]))
      return i;
  return -1;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

/* The year (proleptic Gregorian, UTC) of a day count since 1970-01-01 (civil_from_days). */
static int64_t year_from_days(int64_t z) {
  z += 719468;
  int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  int64_t doe = z - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  return yoe + era * 400 + (mp >= 10);
}

/* RFC 9110 5.6.7: a two-digit year that would put the date more than 50 years after `now_s` is
 * the most recent past year with those digits. So: the latest year ending in `yy` whose date is
 * at most 50 years ahead (50 calendar years: the same date and time 50 years earlier is not after
 * now). The date fields are checked later by finish(); days_from_civil accepts any. */
static int64_t rfc850_year(int yy, int mon, int d, int h, int mi, int s, int64_t now_s) {
  int64_t now_days = now_s >= 0 ? now_s / 86400 : -((-now_s + 86399) / 86400);
  int64_t year = year_from_days(now_days);
  int64_t y = year - ((year % 100) + 100) % 100 + yy + 100;
  while (days_from_civil(y - 50, mon + 1, d) * 86400 + h * 3600 + mi * 60 + s > now_s)
    y -= 100;
  return y;
}

static bool leap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

static bool finish(int64_t y, int mon, int d, int h, int mi, int s, int64_t *out) {
  static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (mon < 0 || mon > 11 || d < 1 || d > mdays[mon] + (mon == 1 && leap(y)) || h > 23 ||
      mi > 59 || s > 60)
    return false;
  *out = days_from_civil(y, mon + 1, d) * 86400 + h * 3600 + mi * 60 + s;
  return true;
}

static bool hms(cur *c, int *h, int *mi, int *s) {
  return digits(c, 2, h) && lit(c, ":") && digits(c, 2, mi) && lit(c, ":") && digits(c, 2, s);
}

int lk_http_date_parse(const char *value, size_t len, int64_t now_wall, int64_t *epoch_seconds) {
  if (!value || !epoch_seconds)
    return LK_EINVAL;
  int d, y, h, mi, s, mon;
  cur c = {value, value + len};
  /* IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT */
  if (one_of(&c, wkday, 7) >= 0 && lit(&c, ", ")) {
    if (digits(&c, 2, &d) && lit(&c, " ") && (mon = one_of(&c, month, 12)) >= 0 &&
        lit(&c, " ") && digits(&c, 4, &y) && lit(&c, " ") && hms(&c, &h, &mi, &s) &&
        lit(&c, " GMT") && c.p == c.end && finish(y, mon, d, h, mi, s, epoch_seconds))
      return LK_OK;
    return LK_EPARSE;
  }
  /* rfc850-date: Sunday, 06-Nov-94 08:49:37 GMT (two-digit year: see rfc850_year) */
  c.p = value;
  if (one_of(&c, weekday, 7) >= 0 && lit(&c, ", ")) {
    if (digits(&c, 2, &d) && lit(&c, "-") && (mon = one_of(&c, month, 12)) >= 0 &&
        lit(&c, "-") && digits(&c, 2, &y) && lit(&c, " ") && hms(&c, &h, &mi, &s) &&
        lit(&c, " GMT") && c.p == c.end &&
        finish(rfc850_year(y, mon, d, h, mi, s, now_wall / LK_NS_PER_S), mon, d, h, mi, s,
               epoch_seconds))
      return LK_OK;
    return LK_EPARSE;
  }
  /* asctime-date: Sun Nov  6 08:49:37 1994 */
  c.p = value;
  if (one_of(&c, wkday, 7) >= 0 && lit(&c, " ") && (mon = one_of(&c, month, 12)) >= 0 &&
      lit(&c, " ")) {
    if (lit(&c, " ")) {
      if (!digits(&c, 1, &d))
        return LK_EPARSE;
    } else if (!digits(&c, 2, &d)) {
      return LK_EPARSE;
    }
    if (lit(&c, " ") && hms(&c, &h, &mi, &s) && lit(&c, " ") && digits(&c, 4, &y) &&
        c.p == c.end && finish(y, mon, d, h, mi, s, epoch_seconds))
      return LK_OK;
  }
  return LK_EPARSE;
}

int lk_http_retry_after_parse(const char *value, size_t len, int64_t now_wall, int64_t *out) {
  if (!value || !out)
    return LK_EINVAL;
  const char *b = value, *e = value + len;
  while (b < e && (*b == ' ' || *b == '\t'))
    b++;
  while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
    e--;
  if (b == e)
    return LK_EPARSE;
  if (*b >= '0' && *b <= '9') {
    int64_t ns = 0;
    for (const char *p = b; p < e; p++) {
      if (*p < '0' || *p > '9')
        return LK_EPARSE;
      int dgt = *p - '0';
      /* saturate: a hostile "99999999999999999999" becomes INT64_MAX, capped by the policy */
      if (ns > (INT64_MAX - dgt * LK_NS_PER_S) / 10)
        ns = INT64_MAX;
      else
        ns = ns * 10 + dgt * LK_NS_PER_S;
    }
    *out = ns;
    return LK_OK;
  }
  int64_t secs;
  if (lk_http_date_parse(b, (size_t)(e - b), now_wall, &secs) != LK_OK)
    return LK_EPARSE;
  int64_t now_s = now_wall / LK_NS_PER_S;
  if (secs <= now_s) {
    *out = 0;
    return LK_OK;
  }
  int64_t delta = secs - now_s;
  /* whole seconds: the date has 1 s resolution, subtract the fraction already elapsed */
  *out = delta > INT64_MAX / LK_NS_PER_S ? INT64_MAX
                                          : delta * LK_NS_PER_S - now_wall % LK_NS_PER_S;
  return LK_OK;
}
