/* SPDX-License-Identifier: MIT */
#include <linkd/error.h>
#include <linkd/hedge.h>

void lk_hedge_policy_init_default(lk_hedge_policy *p) {
  p->max_hedges = 1;
  p->delay = LK_MS(100);
  p->quantile = 0.0;
  p->min_delay = 0;
  p->max_delay = INT64_MAX;
  p->percentile = NULL;
  p->percentile_ctx = NULL;
  p->spend = NULL;
  p->spend_ctx = NULL;
}

int lk_hedge_policy_validate(const lk_hedge_policy *p, const char **why) {
  const char *w = NULL;
  if (!p)
    w = "hedge policy is NULL";
  else if (p->max_hedges < 0 || p->max_hedges > LK_HEDGE_MAX_HEDGES)
    w = "hedge max_hedges must be within [0, 16]";
  else if (p->delay < 0)
    w = "hedge delay must be >= 0";
  else if (!(p->quantile >= 0.0 && p->quantile <= 100.0))
    w = "hedge quantile must be 0 (fixed delay) or within (0, 100]";
  else if (p->quantile > 0.0 && !p->percentile)
    w = "hedge quantile needs a percentile function";
  else if (p->min_delay < 0)
    w = "hedge min_delay must be >= 0";
  else if (p->max_delay < p->min_delay)
    w = "hedge max_delay must be >= min_delay";
  if (why)
    *why = w;
  return w ? LK_ECONFIG : LK_OK;
}

int64_t lk_hedge_delay(const lk_hedge_policy *p) {
  if (p->quantile <= 0.0)
    return p->delay;
  int64_t d = p->percentile(p->percentile_ctx, p->quantile);
  if (d <= 0) /* no data yet */
    d = p->delay;
  if (d < p->min_delay)
    d = p->min_delay;
  if (d > p->max_delay)
    d = p->max_delay;
  return d;
}

/* start + k * delay, saturating at INT64_MAX (k >= 1, delay >= 0). */
static int64_t due_at(int64_t start, int k, int64_t delay) {
  int64_t off = delay > INT64_MAX / k ? INT64_MAX : delay * k;
  return start > INT64_MAX - off ? INT64_MAX : start + off;
}

lk_hedge_decision lk_hedge_decide(const lk_hedge_policy *p, int64_t start, int64_t now, int sent) {
  lk_hedge_decision d = {false, INT64_MAX, LK_OK};
  if (sent < 0)
    sent = 0;
  if (sent >= p->max_hedges) {
    d.reason = LK_EATTEMPTS;
    return d;
  }
  int64_t delay = lk_hedge_delay(p);
  int64_t due = due_at(start, sent + 1, delay);
  if (now < due || due == INT64_MAX) { /* INT64_MAX: never due on this time line */
    d.next_at = due;
    return d;
  }
  if (p->spend) {
    int rc = p->spend(p->spend_ctx, now);
    if (rc != LK_OK) {
      d.reason = rc < 0 ? rc : LK_EBUDGET;
      return d;
    }
  }
  d.send = true;
  if (sent + 1 < p->max_hedges)
    d.next_at = due_at(start, sent + 2, delay);
  return d;
}
