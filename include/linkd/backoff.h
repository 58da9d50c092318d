/* SPDX-License-Identifier: MIT */
/* linkd/backoff.h: delays between attempts.
 *
 * Base delay for retry number n (n = the number of the attempt that just failed, 1-based):
 *   FIXED        base
 *   LINEAR       base * n
 *   EXPONENTIAL  base * multiplier^(n-1); for multiplier 2 exactly the seed's doubling loop
 *                (for i in 1..n-1 while e < max: e = e > max/2 ? max : e*2)
 * each capped at max. Jitter then spreads it ("e" below), the result never exceeds max:
 *   NONE          e
 *   SYMMETRIC     the seed's formula bit for bit: spread = (int64)(e * ratio);
 *                 min(max, max(0, e - spread + below(2*spread + 1)))   -> uniform in
 *                 [e - spread, e + spread], clipped at max (mass piles up at max)
 *   FULL          below(e + 1)                                          -> uniform in [0, e]
 *   EQUAL         e/2 + below(e/2 + 1)                                  -> uniform in [e/2, e]
 *   DECORRELATED  min(max, base + below(3*prev - base + 1))             -> uniform in
 *                 [base, 3*prev] (prev = previous delay, base if none); ignores n
 * Each jitter mode draws exactly once per delay (NONE never draws).
 *
 * Arithmetic runs in whole units of `resolution` (default 1 ms, so draws match the seed's
 * millisecond code) and saturates: attempt numbers up to INT_MAX and caps up to INT64_MAX never
 * overflow, never give a negative delay and never exceed max.
 *
 * Thread-safety: configs are plain values; lk_backoff_delay() touches only the lk_rand given.
 */
#ifndef LINKD_BACKOFF_H
#define LINKD_BACKOFF_H

#include <linkd/common.h>
#include <linkd/rand.h>

LK_BEGIN_DECLS

typedef enum lk_backoff_kind {
  LK_BACKOFF_FIXED,
  LK_BACKOFF_LINEAR,
  LK_BACKOFF_EXPONENTIAL
} lk_backoff_kind;

typedef enum lk_jitter_kind {
  LK_JITTER_NONE,
  LK_JITTER_SYMMETRIC,
  LK_JITTER_FULL,
  LK_JITTER_EQUAL,
  LK_JITTER_DECORRELATED
} lk_jitter_kind;

typedef struct lk_backoff_config {
  lk_backoff_kind kind; /* default EXPONENTIAL */
  int64_t base;         /* ns, > 0 and >= resolution; default 200 ms */
  int64_t max;          /* ns cap, >= base; default 2 s */
  double multiplier;    /* EXPONENTIAL only, finite and >= 1; default 2 */
  lk_jitter_kind jitter; /* default SYMMETRIC */
  double ratio;         /* SYMMETRIC only, in [0, 1]; default 0.5 */
  int64_t resolution;   /* ns per drawn unit, > 0; default 1 ms */
} lk_backoff_config;

/* Sets every field to its default (the seed's example: exponential 200 ms .. 2 s, symmetric 0.5). */
LK_EXPORT void lk_backoff_config_init_default(lk_backoff_config *c);
/* LK_OK, or LK_ECONFIG with *why (if non-NULL) set to a static message naming the bad field. */
LK_EXPORT int lk_backoff_config_validate(const lk_backoff_config *c, const char **why);
/* The base delay for retry number n before jitter (n < 1 is treated as 1). Config must be valid. */
LK_EXPORT int64_t lk_backoff_base_delay(const lk_backoff_config *c, int n);
/* The delay to wait after attempt n failed; prev = the previous delay (0 if none). Draws from
 * `rng` as documented above. Config must be valid; rng may be NULL only for LK_JITTER_NONE. */
LK_EXPORT int64_t lk_backoff_delay(const lk_backoff_config *c, int n, int64_t prev, lk_rand *rng);

/* "fixed" / "linear" / "exponential" and "none" / "symmetric" / "full" / "equal" /
 * "decorrelated"; the parsers are case-insensitive and return 0 or LK_EINVAL. */
LK_EXPORT const char *lk_backoff_kind_name(lk_backoff_kind k);
LK_EXPORT const char *lk_jitter_kind_name(lk_jitter_kind k);
LK_EXPORT int lk_backoff_kind_parse(const char *s, lk_backoff_kind *out);
LK_EXPORT int lk_jitter_kind_parse(const char *s, lk_jitter_kind *out);

LK_END_DECLS

#endif
