/* SPDX-License-Identifier: MIT */
/* Timeout advisor: per-attempt timeout = latency percentile matching the false-timeout rate. */
#include <linkd/advisor.h>
#include <linkd/error.h>

#include <math.h>
#include <string.h>

/* The automatic minimum wants about this many samples beyond the chosen percentile. */
#define TAIL_SAMPLES 10.0

void lk_timeout_advisor_opts_init_default(lk_timeout_advisor_opts *o) {
  memset(o, 0, sizeof *o);
  o->false_timeout_rate = 0.001;
  o->min_samples = 0;
  o->headroom = 1.0;
  o->floor_ns = 0;
  o->cap_ns = 0;
}

int lk_timeout_advisor_opts_validate(const lk_timeout_advisor_opts *o) {
  if (!o)
    return LK_EINVAL;
  if (!(o->false_timeout_rate > 0 && o->false_timeout_rate < 1))
    return LK_ECONFIG;
  if (!(o->headroom >= 1) || !isfinite(o->headroom))
    return LK_ECONFIG;
  if (o->floor_ns < 0 || o->cap_ns < 0 || (o->floor_ns && o->cap_ns && o->floor_ns > o->cap_ns))
    return LK_ECONFIG;
  return LK_OK;
}

static uint64_t needed_samples(const lk_timeout_advisor_opts *o) {
  if (o->min_samples)
    return o->min_samples;
  double x = TAIL_SAMPLES / o->false_timeout_rate;
  double n = ceil(x - x * 1e-12); /* 10 / 0.001 must give 10000, not 10001 */
  return n >= 1.8e19 ? UINT64_MAX : (uint64_t)n;
}

int lk_timeout_advise(const lk_hist *latency, const lk_timeout_advisor_opts *opts,
                      lk_timeout_advice *out) {
  if (!latency || !out)
    return LK_EINVAL;
  lk_timeout_advisor_opts defaults;
  if (!opts) {
    lk_timeout_advisor_opts_init_default(&defaults);
    opts = &defaults;
  }
  memset(out, 0, sizeof *out);
  int rc = lk_timeout_advisor_opts_validate(opts);
  if (rc != LK_OK)
    return rc;
  out->percentile = 100.0 * (1.0 - opts->false_timeout_rate);
  out->needed = needed_samples(opts);
  out->samples = lk_hist_count(latency);
  if (out->samples < out->needed)
    return LK_EAGAIN;
  int64_t p = lk_hist_percentile(latency, out->percentile);
  out->percentile_ns = p;
  /* Saturate: a huge percentile times headroom must not wrap into a negative timeout. */
  double t = ceil((double)p * opts->headroom);
  int64_t timeout = t >= 9.2233720368547758e18 ? INT64_MAX : (int64_t)t;
  if (timeout < p)
    timeout = p;
  if (opts->floor_ns && timeout < opts->floor_ns)
    timeout = opts->floor_ns;
  if (opts->cap_ns && timeout > opts->cap_ns)
    timeout = opts->cap_ns;
  out->timeout_ns = timeout;
  return LK_OK;
}
