/* SPDX-License-Identifier: MIT */
#include "budget_spec.h"

#include <linkd/duration.h>

#include <linkd/error.h>

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Splits s at ':' into at most `max` fields (in place in buf). Returns the count or -1. */
static int split(const char *s, char *buf, size_t cap, char **fields, int max) {
  if (strlen(s) >= cap)
    return -1;
  strcpy(buf, s);
  int n = 0;
  for (char *p = buf;;) {
    if (n == max)
      return -1;
    fields[n++] = p;
    char *c = strchr(p, ':');
    if (!c)
      break;
    *c = '\0';
    p = c + 1;
  }
  return n;
}

static int num(const char *s, double lo, double hi, double *out) {
  if (!isdigit((unsigned char)*s) && *s != '.')
    return -1;
  char *end;
  errno = 0;
  double d = strtod(s, &end);
  if (errno || *end || !isfinite(d) || d < lo || d > hi)
    return -1;
  *out = d;
  return 0;
}

static int integer(const char *s, long long lo, long long hi, long long *out) {
  if (!isdigit((unsigned char)*s))
    return -1;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || v < lo || v > hi)
    return -1;
  *out = v;
  return 0;
}

int cli_budget_parse(const char *s, cli_budget_spec *out, char *err, size_t cap) {
  cli_budget_spec b;
  memset(&b, 0, sizeof b);
  lk_budget_ratio_config_init_default(&b.ratio);
  lk_budget_token_config_init_default(&b.token);
  lk_budget_quota_config_init_default(&b.quota);
  if (strcasecmp(s, "none") == 0) {
    *out = b;
    return 0;
  }
  char buf[256], *f[5];
  int n = split(s, buf, sizeof buf, f, 5);
  const char *why = NULL;
  double d;
  long long v;
  if (n >= 2 && strcasecmp(f[0], "ratio") == 0) {
    b.kind = LK_BUDGET_RATIO;
    size_t len = strlen(f[1]);
    if (len && f[1][len - 1] == '%')
      f[1][len - 1] = '\0';
    if (num(f[1], 0, 1000, &d) != 0)
      goto bad;
    b.ratio.percent = d;
    for (int i = 2; i < n; i++) {
      if (strncmp(f[i], "min=", 4) == 0 && integer(f[i] + 4, 0, 1000000, &v) == 0)
        b.ratio.min_retries_per_sec = (int)v;
      else if (strncmp(f[i], "ttl=", 4) == 0) {
        char m[128];
        if (lk_duration_parse(f[i] + 4, &b.ratio.ttl, m, sizeof m) != 0)
          goto bad;
      } else
        goto bad;
    }
    lk_budget_ratio_config_validate(&b.ratio, &why);
  } else if (n >= 2 && n <= 3 &&
             (strcasecmp(f[0], "tokens") == 0 || strcasecmp(f[0], "token") == 0)) {
    b.kind = LK_BUDGET_TOKEN;
    if (num(f[1], 0, 1e9, &b.token.max_tokens) != 0 ||
        (n == 3 && num(f[2], 0, 1e9, &b.token.token_ratio) != 0))
      goto bad;
    lk_budget_token_config_validate(&b.token, &why);
  } else if (n >= 2 && n <= 4 && strcasecmp(f[0], "quota") == 0) {
    b.kind = LK_BUDGET_QUOTA;
    if (integer(f[1], 0, INT64_C(1000000000000000), &v) != 0)
      goto bad;
    b.quota.capacity = v;
    if (n >= 3) {
      if (integer(f[2], 0, INT64_C(1000000000000000), &v) != 0)
        goto bad;
      b.quota.retry_cost = v;
      /* A timeout retry costs at least a plain one unless said otherwise. */
      if (b.quota.timeout_cost < v)
        b.quota.timeout_cost = v;
    }
    if (n == 4) {
      if (integer(f[3], 0, INT64_C(1000000000000000), &v) != 0)
        goto bad;
      b.quota.timeout_cost = v;
    }
    lk_budget_quota_config_validate(&b.quota, &why);
  } else {
    goto bad;
  }
  if (why) {
    snprintf(err, cap, "'%s': %s", s, why);
    return -1;
  }
  b.enabled = true;
  *out = b;
  return 0;
bad:
  snprintf(err, cap,
           "'%s' is not a budget: use none, ratio:PERCENT%%[:min=N][:ttl=DUR], "
           "tokens:MAX[:RATIO] or quota:CAPACITY[:RETRY_COST[:TIMEOUT_COST]]",
           s);
  return -1;
}

char *cli_budget_format(const cli_budget_spec *b, char *buf, size_t cap) {
  char d[32];
  if (!b->enabled)
    snprintf(buf, cap, "none");
  else if (b->kind == LK_BUDGET_RATIO)
    snprintf(buf, cap, "ratio:%g%%:min=%d:ttl=%s", b->ratio.percent, b->ratio.min_retries_per_sec,
             lk_duration_format(b->ratio.ttl, d, sizeof d));
  else if (b->kind == LK_BUDGET_TOKEN)
    snprintf(buf, cap, "tokens:%g:%g", b->token.max_tokens, b->token.token_ratio);
  else
    snprintf(buf, cap, "quota:%lld:%lld:%lld", (long long)b->quota.capacity,
             (long long)b->quota.retry_cost, (long long)b->quota.timeout_cost);
  return buf;
}

int cli_budget_new(const cli_budget_spec *b, lk_budget **out, char *err, size_t cap) {
  *out = NULL;
  if (!b->enabled)
    return 0;
  const char *why = NULL;
  int rc;
  if (b->kind == LK_BUDGET_RATIO)
    rc = lk_budget_new_ratio(&b->ratio, out, &why);
  else if (b->kind == LK_BUDGET_TOKEN)
    rc = lk_budget_new_token(&b->token, out, &why);
  else
    rc = lk_budget_new_quota(&b->quota, out, &why);
  if (rc != 0) {
    snprintf(err, cap, "retry budget: %s", why ? why : lk_strerror(rc));
    return rc;
  }
  return 0;
}
