/* SPDX-License-Identifier: MIT */
/* linkd/retry.h: the retry decision.
 *
 * lk_retry_decide() answers two questions for a failed attempt: may it be retried, and how long to
 * wait first. With the default configuration it is the seed's RetryPolicy.decide for every input:
 *   1. DEADLINE_EXCEEDED                          -> stop "deadline exceeded"
 *   2. not retryable (kind, method, key, sent)   -> stop "not retryable: KIND"
 *   3. attempt number >= max_attempts             -> stop "attempts exhausted"
 *   4. delay = backoff(number)   (the only random draw, made only here)
 *      with Retry-After honoured: delay = max(delay, min(retry_after, retry_after_cap))
 *   5. delay >= remaining                         -> stop "delay Xms >= remaining Yms"
 *      (stricter, if min_attempt > 0: delay + min_attempt > remaining -> stop)
 *   6. retry "retry KIND" after delay
 * Retryable: a kind in `retry_on` whose class is NOT_SENT or REFUSED; a MAYBE_PROCESSED (or a
 * PERMANENT kind the caller added to retry_on) only if the request was not fully sent, carries an
 * Idempotency-Key, or its method is idempotent (GET HEAD PUT DELETE OPTIONS TRACE, any case).
 * TERMINAL kinds are never retried, whatever retry_on says.
 *
 * Neither call allocates. Thread-safety: a policy is immutable after init and may be shared by
 * any number of threads; each thread passes its own lk_rand.
 */
#ifndef LINKD_RETRY_H
#define LINKD_RETRY_H

#include <linkd/backoff.h>
#include <linkd/common.h>
#include <linkd/failure.h>
#include <linkd/rand.h>

LK_BEGIN_DECLS

typedef struct lk_retry_config {
  int max_attempts;          /* attempts in all, first included, >= 1; default 4 */
  lk_backoff_config backoff; /* default: lk_backoff_config_init_default() */
  uint64_t retry_on;         /* LK_FAILURE_BIT set of kinds; default LK_RETRY_ON_DEFAULT */
  bool honor_retry_after;    /* default true */
  int64_t retry_after_cap;   /* ns, hostile Retry-After values are cut to this; default 60 s */
  int64_t min_attempt;       /* ns; 0 = the seed's rule (delay < remaining); default 0 */
} lk_retry_config;

/* Every kind of class NOT_SENT, MAYBE_PROCESSED and REFUSED (408, 425, KEY_IN_USE included), except
 * DNS_FAILED (no such host) and TLS_FAILED (TLS protocol or certificate failure), which a retry
 * would only repeat; DNS_TIMEOUT and TLS_TIMEOUT are in the set. */
LK_EXPORT uint64_t lk_retry_on_default(void);

typedef struct lk_retry_policy {
  lk_retry_config cfg; /* validated copy; do not modify after init */
} lk_retry_policy;

typedef struct lk_attempt {
  int number;              /* 1-based */
  const char *method;      /* HTTP method, any case; not retained */
  bool idempotency_key;    /* the request carries an Idempotency-Key */
  bool request_fully_sent; /* every byte of the request was written */
  lk_failure failure;
  int64_t retry_after;     /* ns from the response's Retry-After; < 0 if none */
  int64_t prev_delay;      /* the delay before this attempt (0 for the first); DECORRELATED */
} lk_attempt;

typedef enum lk_reason {
  LK_REASON_RETRY,
  LK_REASON_DEADLINE,          /* "deadline exceeded" */
  LK_REASON_NOT_RETRYABLE,     /* "not retryable: KIND" */
  LK_REASON_ATTEMPTS,          /* "attempts exhausted" */
  LK_REASON_DELAY_TOO_LONG,    /* "delay Xms >= remaining Yms" */
  LK_REASON_NO_TIME_FOR_ATTEMPT, /* "delay Xms + attempt Zms > remaining Yms" */
  LK_REASON_BUDGET,            /* set by callers: "retry budget exhausted" */
  LK_REASON_SUCCESS            /* set by callers: "success" */
} lk_reason;

typedef struct lk_decision {
  bool retry;
  int64_t delay;        /* ns to wait before the next attempt; 0 when !retry */
  lk_reason reason;
  lk_failure failure;   /* the attempt's kind, for the message */
  int64_t computed;     /* the delay computed before a stop (steps 5), for the message */
  int64_t remaining;    /* as passed in */
  int64_t min_attempt;  /* as configured, for the message */
  bool from_retry_after; /* the delay came from Retry-After */
} lk_decision;

/* Sets every field to its default (see the struct). */
LK_EXPORT void lk_retry_config_init_default(lk_retry_config *c);
/* Validates and copies `c`. LK_OK or LK_ECONFIG with *why (if non-NULL) a static message:
 * max attempts < 1, base <= 0, max < base, ratio outside [0, 1] or NaN, ... */
LK_EXPORT int lk_retry_policy_init(lk_retry_policy *p, const lk_retry_config *c, const char **why);
/* Decides for attempt `a` with `remaining` ns left before the deadline. LK_OK and *out filled,
 * or LK_EINVAL (number < 1, method NULL or blank, kind out of range, or any NULL pointer except
 * rng when the jitter is NONE). */
LK_EXPORT int lk_retry_decide(const lk_retry_policy *p, const lk_attempt *a, int64_t remaining,
                              lk_rand *rng, lk_decision *out);
/* Whether `a` is retryable at all (step 2 above). false for a NULL p or a, a kind out of range
 * and a NULL method where the method decides. */
LK_EXPORT bool lk_retry_is_retryable(const lk_retry_policy *p, const lk_attempt *a);
/* The seed's reason text, e.g. "retry CONNECT_FAILED", "delay 582ms >= remaining 100ms".
 * Durations print as whole ms when exact, else with three decimals. Returns snprintf's length
 * (buf NULL with cap 0 measures), or LK_EINVAL for a NULL d, or a NULL buf with cap > 0. */
LK_EXPORT int lk_decision_format(const lk_decision *d, char *buf, size_t cap);
/* "RETRY", "DEADLINE", ... */
LK_EXPORT const char *lk_reason_name(lk_reason r);

LK_END_DECLS

#endif
