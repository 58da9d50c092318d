/* SPDX-License-Identifier: MIT */
#include <linkd/backoff.h>
#include <linkd/error.h>

#include <limits.h>
#include <math.h>
#include <strings.h>

void lk_backoff_config_init_default(lk_backoff_config *c) {
  c->kind = LK_BACKOFF_EXPONENTIAL;
  c->base = LK_MS(200);
  c->max = LK_MS(2000);
  c->multiplier = 2.0;
  c->jitter = LK_JITTER_SYMMETRIC;
  c->ratio = 0.5;
  c->resolution = LK_MS(1);
}

int lk_backoff_config_validate(const lk_backoff_config *c, const char **why) {
  const char *w = NULL;
  if (!c)
    w = "backoff config is NULL";
  else if ((unsigned)c->kind > LK_BACKOFF_EXPONENTIAL)
    w = "backoff kind must be fixed, linear or exponential";
  else if ((unsigned)c->jitter > LK_JITTER_DECORRELATED)
    w = "jitter must be none, symmetric, full, equal or decorrelated";
  else if (c->resolution <= 0)
    w = "backoff resolution must be > 0";
  else if (c->base <= 0)
    w = "backoff base must be > 0";
  else if (c->base < c->resolution)
    w = "backoff base must be >= its resolution";
  else if (c->max < c->base)
    w = "backoff max must be >= base";
  else if (!(c->multiplier >= 1.0) || !isfinite(c->multiplier))
    w = "backoff multiplier must be a finite number >= 1";
  else if (!(c->ratio >= 0.0 && c->ratio <= 1.0))
    w = "jitter ratio must be within [0, 1]";
  if (why)
    *why = w;
  return w ? LK_ECONFIG : LK_OK;
}

static int64_t sat_mul(int64_t a, int64_t b) { /* a, b >= 0 */
  if (a != 0 && b > INT64_MAX / a)
    return INT64_MAX;
  return a * b;
}

/* Exponential base in units, capped at max (units). */
static int64_t exp_units(const lk_backoff_config *c, int64_t base, int64_t max, int n) {
  int64_t e = base;
  if (c->multiplier == 2.0) {
    /* The seed's loop; at most 63 turns before e reaches max. */
    for (int i = 1; i < n && e < max; i++)
      e = e > max / 2 ? max : e * 2;
    return e;
  }
  if (c->multiplier == 1.0 || n <= 1)
    return e;
  double v = (double)base * pow(c->multiplier, (double)(n - 1));
  if (!(v < (double)max)) /* also catches inf */
    return max;
  e = (int64_t)v;
  return e < base ? base : e;
}

static int64_t base_units(const lk_backoff_config *c, int64_t base, int64_t max, int n) {
  if (n < 1)
    n = 1;
  int64_t e;
  switch (c->kind) {
  case LK_BACKOFF_FIXED: e = base; break;
  case LK_BACKOFF_LINEAR: e = sat_mul(base, n); break;
  default: e = exp_units(c, base, max, n); break;
  }
  return e > max ? max : e;
}

int64_t lk_backoff_base_delay(const lk_backoff_config *c, int n) {
  int64_t res = c->resolution, base = c->base / res, max = c->max / res;
  return base_units(c, base, max, n) * res;
}

int64_t lk_backoff_delay(const lk_backoff_config *c, int n, int64_t prev, lk_rand *rng) {
  int64_t res = c->resolution, base = c->base / res, max = c->max / res;
  int64_t e = base_units(c, base, max, n);
  uint64_t d; /* units; unsigned so e + spread cannot overflow */
  switch (c->jitter) {
  case LK_JITTER_SYMMETRIC: {
    double sd = (double)e * c->ratio; /* Java's (long) cast: truncate, saturate */
    int64_t spread = sd >= 9223372036854775807.0 ? INT64_MAX : (int64_t)sd;
    if (spread > e)
      spread = e;
    d = (uint64_t)(e - spread) + lk_rand_below(rng, 2 * (uint64_t)spread + 1);
    break;
  }
  case LK_JITTER_FULL: d = lk_rand_below(rng, (uint64_t)e + 1); break;
  case LK_JITTER_EQUAL: d = (uint64_t)(e / 2) + lk_rand_below(rng, (uint64_t)(e / 2) + 1); break;
  case LK_JITTER_DECORRELATED: {
    int64_t p = prev / res;
    if (p < base)
      p = base;
    int64_t hi = sat_mul(p, 3);
    if (hi > max)
      hi = max; /* draws above max would be clipped anyway */
    d = (uint64_t)base + lk_rand_below(rng, (uint64_t)(hi - base) + 1);
    break;
  }
  default: d = (uint64_t)e; break;
  }
  if (d > (uint64_t)max)
    d = (uint64_t)max;
  return (int64_t)d * res;
}

static const char *const kind_names[] = {"fixed", "linear", "exponential"};
static const char *const jitter_names[] = {"none", "symmetric", "full", "equal", "decorrelated"};

const char *lk_backoff_kind_name(lk_backoff_kind k) {
  return (unsigned)k <= LK_BACKOFF_EXPONENTIAL ? kind_names[k] : "unknown";
}

const char *lk_jitter_kind_name(lk_jitter_kind k) {
  return (unsigned)k <= LK_JITTER_DECORRELATED ? jitter_names[k] : "unknown";
}

int lk_backoff_kind_parse(const char *s, lk_backoff_kind *out) {
  for (int i = 0; s && out && i <= LK_BACKOFF_EXPONENTIAL; i++)
    if (strcasecmp(s, kind_names[i]) == 0) {
      *out = (lk_backoff_kind)i;
      return LK_OK;
    }
  return LK_EINVAL;
}

int lk_jitter_kind_parse(const char *s, lk_jitter_kind *out) {
  for (int i = 0; s && out && i <= LK_JITTER_DECORRELATED; i++)
    if (strcasecmp(s, jitter_names[i]) == 0) {
      *out = (lk_jitter_kind)i;
      return LK_OK;
    }
  return LK_EINVAL;
}
