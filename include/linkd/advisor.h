/* SPDX-License-Identifier: MIT */
/* linkd/advisor.h: recommends a per-attempt timeout from observed latency.
 *
 * Seed 001 and the AWS Builders' Library ("Timeouts, retries and backoff with jitter") advise
 * setting the per-attempt timeout at the latency percentile that matches the false-timeout rate
 * you accept: if 0.1 % of attempts may be cut off although they would have succeeded, time out at
 * p99.9 of the downstream's latency. Because lk_hist_percentile reports the top of the bucket
 * holding the rank, at most that share of the observed sample exceeds the advice (before
 * headroom).
 *
 * A percentile from too few samples is noise, so the advisor refuses (LK_EAGAIN) until the
 * histogram holds enough values: by default enough that about 10 samples lie beyond the chosen
 * percentile (10 / rate: 10000 samples for 0.1 %).
 *
 * Thread-safety: lk_timeout_advise only reads the histogram (which others may record into
 * concurrently) and the options; it never allocates.
 */
#ifndef LINKD_ADVISOR_H
#define LINKD_ADVISOR_H

#include <linkd/common.h>
#include <linkd/hist.h>

LK_BEGIN_DECLS

/* Plain options; set defaults with lk_timeout_advisor_opts_init_default. */
typedef struct lk_timeout_advisor_opts {
  double false_timeout_rate; /* acceptable share of attempts cut off, in (0, 1); default 0.001 */
  uint64_t min_samples;      /* 0 = automatic: ceil(10 / false_timeout_rate); default 0 */
  double headroom;           /* multiplier >= 1 applied to the percentile; default 1.0 */
  int64_t floor_ns;          /* advice is at least this (0 = none); default 0 */
  int64_t cap_ns;            /* advice is at most this (0 = none); default 0 */
} lk_timeout_advisor_opts;

/* What the advisor saw and recommends. */
typedef struct lk_timeout_advice {
  int64_t timeout_ns;    /* the recommended per-attempt timeout (after headroom, floor, cap) */
  int64_t percentile_ns; /* the raw latency percentile */
  double percentile;     /* which percentile, in [0, 100]: 100 * (1 - false_timeout_rate) */
  uint64_t samples;      /* values in the histogram when advised */
  uint64_t needed;       /* minimum samples that applied */
} lk_timeout_advice;

/* Sets every field to its default (see the struct). */
LK_EXPORT void lk_timeout_advisor_opts_init_default(lk_timeout_advisor_opts *o);

/* Checks options: LK_OK or LK_ECONFIG (rate not in (0, 1), headroom < 1 or not finite, negative
 * floor/cap, or floor > cap when both are set). */
LK_EXPORT int lk_timeout_advisor_opts_validate(const lk_timeout_advisor_opts *o);

/* Recommends a per-attempt timeout from `latency` (ns). opts NULL means defaults.
 * *out is always filled as far as known (samples, needed, percentile); timeout_ns and
 * percentile_ns are valid only on LK_OK. The product with headroom saturates at INT64_MAX.
 * Returns LK_OK, LK_EINVAL (NULL latency/out), LK_ECONFIG (bad options), or LK_EAGAIN (fewer
 * than the minimum samples; try again later). */
LK_EXPORT int lk_timeout_advise(const lk_hist *latency, const lk_timeout_advisor_opts *opts,
                                lk_timeout_advice *out);

LK_END_DECLS

#endif
