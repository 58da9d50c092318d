/* SPDX-License-Identifier: MIT */
/* linkd/deadline.h: one deadline per logical operation, and its wire forms.
 *
 * A deadline is an absolute instant (ns, CLOCK_MONOTONIC) fixed once when the logical operation
 * starts; every attempt, backoff wait and queue wait is measured against it, so retries never
 * reset it. All arithmetic saturates: INT64_MAX means "no deadline".
 *
 * Thread-safety: plain values and pure functions; safe everywhere.
 */
#ifndef LINKD_DEADLINE_H
#define LINKD_DEADLINE_H

#include <linkd/common.h>

LK_BEGIN_DECLS

#define LK_DEADLINE_NONE INT64_MAX

typedef struct lk_deadline {
  int64_t at; /* absolute ns; LK_DEADLINE_NONE for none */
} lk_deadline;

/* now + budget, saturating. budget <= 0 gives a deadline that has already passed (at == now). */
LK_EXPORT lk_deadline lk_deadline_after(int64_t now, int64_t budget);
/* A deadline that never expires. */
LK_EXPORT lk_deadline lk_deadline_none(void);
/* Time left at `now`; <= 0 once expired; INT64_MAX for no deadline. */
LK_EXPORT int64_t lk_deadline_remaining(lk_deadline d, int64_t now);
/* true once now >= at; never for LK_DEADLINE_NONE (whatever `now`, INT64_MAX included). */
LK_EXPORT bool lk_deadline_expired(lk_deadline d, int64_t now);
/* The earlier of two deadlines. */
LK_EXPORT lk_deadline lk_deadline_min(lk_deadline a, lk_deadline b);
/* A deadline for a downstream call that keeps `reserve` ns for local work after it returns:
 * at - reserve (saturating), never later than the parent. A reserve <= 0 keeps the parent. */
LK_EXPORT lk_deadline lk_deadline_child(lk_deadline parent, int64_t reserve);

/* Per-attempt timeout = min(cap, remaining); 0 when either is <= 0. Exactly the seed's
 * RetryPolicy.attemptTimeoutMillis (unit-agnostic). */
LK_EXPORT int64_t lk_attempt_timeout(int64_t cap, int64_t remaining);

/* --- wire forms --------------------------------------------------------------------------------
 * gRPC's grpc-timeout: 1-8 ASCII digits then one unit of H M S m u n (hours, minutes, seconds,
 * milliseconds, microseconds, nanoseconds). Plain form: 1-18 ASCII digits of milliseconds.
 * Parsers are strict: no sign, no space, no empty value, no extra bytes, no overflow -> LK_EPARSE
 * (or LK_ERANGE when the number is well formed but does not fit in int64 ns). They never read
 * past `len` and need no NUL terminator.
 */
#define LK_GRPC_TIMEOUT_MAX 10 /* 8 digits + unit + NUL */
#define LK_MS_TIMEOUT_MAX 20   /* 19 digits + NUL */

/* Encodes `ns` (clamped to >= 0) in the finest unit whose 8 digits hold it, rounding up as gRPC
 * does, so a positive remainder is never sent as 0 (less than one unit gained: under 1/99999 of
 * the value, since the finer unit's 8 digits did not hold it). Values beyond 2562047H (about
 * 292 years, the largest that parses back into int64 ns) are sent as 2562047H. Writes at most
 * `cap` bytes incl. NUL; returns the length or LK_ETOOBIG / LK_EINVAL (NULL buf). */
LK_EXPORT int lk_grpc_timeout_format(int64_t ns, char *buf, size_t cap);
/* Parses a grpc-timeout value into ns. 0 or LK_EPARSE / LK_ERANGE / LK_EINVAL. */
LK_EXPORT int lk_grpc_timeout_parse(const char *s, size_t len, int64_t *ns);
/* Plain milliseconds (rounded down, clamped to >= 0; a positive value under 1 ms is 1, since 0
 * says the deadline has passed). Returns length or LK_ETOOBIG / LK_EINVAL. */
LK_EXPORT int lk_ms_timeout_format(int64_t ns, char *buf, size_t cap);
/* Parses plain milliseconds into ns. 0 or LK_EPARSE / LK_ERANGE / LK_EINVAL. */
LK_EXPORT int lk_ms_timeout_parse(const char *s, size_t len, int64_t *ns);

LK_END_DECLS

#endif
