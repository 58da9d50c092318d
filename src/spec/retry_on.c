/* SPDX-License-Identifier: MIT */
#include "retry_on.h"

#include <linkd/failure.h>
#include <linkd/retry.h>

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Compares a keyword with '-' and '_' treated alike, ignoring case. */
static bool word_eq(const char *s, size_t len, const char *word) {
  size_t i = 0;
  for (; i < len && word[i]; i++) {
    char a = s[i] == '_' ? '-' : (char)tolower((unsigned char)s[i]);
    char b = word[i] == '_' ? '-' : word[i];
    if (a != b)
      return false;
  }
  return i == len && !word[i];
}

static uint64_t class_set(lk_failure_class c) {
  uint64_t m = 0;
  for (int k = 0; k < LK_F__COUNT; k++)
    if (lk_failure_class_of((lk_failure)k) == c)
      m |= LK_FAILURE_BIT(k);
  return m;
}

static uint64_t status_range_set(int lo, int hi) {
  uint64_t m = 0;
  for (int st = lo; st <= hi; st++)
    m |= LK_FAILURE_BIT(lk_failure_from_status(st));
  return m;
}

/* One token (no sign) into a set; -1 with a message. */
static int token_set(const char *t, size_t len, uint64_t *out, char *err, size_t cap) {
  if (len == 3 && isdigit((unsigned char)t[0]) && isdigit((unsigned char)t[1]) &&
      isdigit((unsigned char)t[2])) {
    int st = (t[0] - '0') * 100 + (t[1] - '0') * 10 + (t[2] - '0');
    lk_failure k = lk_failure_from_status(st);
    if (st < 100 || st >= 600)
      snprintf(err, cap, "'%.*s' is not an HTTP status", (int)len, t);
    else if (k == LK_F_NONE)
      snprintf(err, cap, "status %d is a success, not a failure", st);
    else if (k == LK_F_CLIENT_4XX)
      snprintf(err, cap,
               "status %d has no kind of its own: 'client-4xx' is every other 4xx, '4xx' all", st);
    else if (k == LK_F_SERVER_5XX)
      snprintf(err, cap,
               "status %d has no kind of its own: 'server-5xx' is every other 5xx, '5xx' all", st);
    else {
      *out = LK_FAILURE_BIT(k);
      return 0;
    }
    return -1;
  }
  static const struct {
    const char *word;
    int cls; /* lk_failure_class, or -1 for special words */
  } classes[] = {
      {"not-sent", LK_FC_NOT_SENT},
      {"maybe-processed", LK_FC_MAYBE_PROCESSED},
      {"refused", LK_FC_REFUSED},
      {"permanent", LK_FC_PERMANENT},
  };
  for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++)
    if (word_eq(t, len, classes[i].word)) {
      *out = class_set((lk_failure_class)classes[i].cls);
      return 0;
    }
  if (word_eq(t, len, "4xx")) {
    /* KEY_IN_USE is a 409 answered to a keyed request with a Retry-After */
    *out = status_range_set(400, 499) | LK_FAILURE_BIT(LK_F_KEY_IN_USE);
    return 0;
  }
  if (word_eq(t, len, "5xx")) {
    *out = status_range_set(500, 599);
    return 0;
  }
  if (word_eq(t, len, "default")) {
    *out = lk_retry_on_default();
    return 0;
  }
  char name[64];
  lk_failure k;
  if (len < sizeof name) {
    memcpy(name, t, len);
    name[len] = '\0';
    if (lk_failure_from_name(name, &k) == 0) {
      if (k == LK_F_NONE) {
        snprintf(err, cap, "'%s' is success, not a failure", name);
        return -1;
      }
      if (lk_failure_class_of(k) == LK_FC_TERMINAL) {
        snprintf(err, cap, "%s is terminal and never retried", lk_failure_name(k));
        return -1;
      }
      *out = LK_FAILURE_BIT(k);
      return 0;
    }
  }
  snprintf(err, cap,
           "unknown item '%.*s' (use a status like 503, 4xx, 5xx, a failure kind like "
           "read-timeout, a class like not-sent, default or none)",
           (int)(len > 60 ? 60 : len), t);
  return -1;
}

int cli_retry_on_parse(const char *spec, cli_retry_edit *out, char *err, size_t cap) {
  cli_retry_edit e = {false, 0, 0};
  if (!spec) {
    snprintf(err, cap, "empty list");
    return -1;
  }
  /* First pass: does any item lack a sign? Then the spec states the whole set. */
  for (const char *p = spec;;) {
    while (*p == ' ' || *p == '\t')
      p++;
    if (*p && *p != ',' && *p != '+' && *p != '-')
      e.replace = true;
    p = strchr(p, ',');
    if (!p)
      break;
    p++;
  }
  int items = 0;
  for (const char *p = spec;;) {
    const char *end = strchr(p, ',');
    if (!end)
      end = p + strlen(p);
    const char *a = p, *b = end;
    while (a < b && (*a == ' ' || *a == '\t'))
      a++;
    while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
      b--;
    if (a == b) {
      snprintf(err, cap, "empty item in '%s'", spec);
      return -1;
    }
    char sign = 0;
    if (*a == '+' || *a == '-')
      sign = *a++;
    if (word_eq(a, (size_t)(b - a), "none")) {
      if (sign) {
        snprintf(err, cap, "'none' takes no sign");
        return -1;
      }
      e.add = 0;
      e.remove = 0;
    } else {
      uint64_t m;
      if (token_set(a, (size_t)(b - a), &m, err, cap) != 0)
        return -1;
      if (sign == '-') {
        e.remove |= m;
        e.add &= ~m;
      } else {
        e.add |= m;
        e.remove &= ~m;
      }
    }
    items++;
    if (!*end)
      break;
    p = end + 1;
  }
  *out = e;
  return items > 0 ? 0 : -1;
}

uint64_t cli_retry_edit_apply(const cli_retry_edit *e, uint64_t inherited) {
  uint64_t s = e->replace ? 0 : inherited;
  return (s & ~e->remove) | e->add;
}

void cli_retry_edit_then(cli_retry_edit *first, const cli_retry_edit *second) {
  if (second->replace) {
    *first = *second;
    return;
  }
  /* apply(second, apply(first, S)) = (base & ~(r1|r2)) | (a1 & ~r2) | a2 */
  first->add = (first->add & ~second->remove) | second->add;
  first->remove |= second->remove;
}

static int popcount64(uint64_t v) {
  int n = 0;
  for (; v; v &= v - 1)
    n++;
  return n;
}

/* Appends "<sep><prefix><NAME>" for every kind in m; returns the new offset. */
static size_t put_names(char *buf, size_t cap, size_t off, uint64_t m, const char *prefix) {
  for (int k = 0; k < LK_F__COUNT; k++) {
    if (!(m & LK_FAILURE_BIT(k)))
      continue;
    /* Past the end, only count (a size-0 snprintf into a valid pointer). */
    char *at = off < cap ? buf + off : buf + cap - 1;
    int n = snprintf(at, off < cap ? cap - off : 0, "%s%s%s", off ? "," : "", prefix,
                     lk_failure_name((lk_failure)k));
    if (n > 0)
      off += (size_t)n;
  }
  return off;
}

char *cli_retry_on_format(uint64_t set, char *buf, size_t cap) {
  if (cap == 0)
    return buf;
  buf[0] = '\0';
  uint64_t def = lk_retry_on_default();
  if (set == 0) {
    snprintf(buf, cap, "none");
    return buf;
  }
  uint64_t plus = set & ~def, minus = def & ~set;
  size_t off = 0;
  if (popcount64(plus) + popcount64(minus) < popcount64(set)) {
    off = (size_t)snprintf(buf, cap, "default");
    off = put_names(buf, cap, off, minus, "-");
    put_names(buf, cap, off, plus, "+");
  } else {
    put_names(buf, cap, 0, set, "");
  }
  return buf;
}
