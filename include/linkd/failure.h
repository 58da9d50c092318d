/* SPDX-License-Identifier: MIT */
/* linkd/failure.h: how an attempt ended.
 *
 * Every attempt ends in exactly one lk_failure kind. The first eight after LK_F_NONE are the seed's
 * RetryPolicy.Failure values; the rest are finer kinds, each of which maps onto one seed kind
 * (lk_failure_seed_kind) and one class that says whether the request may have reached the server's
 * application (DESIGN.md section 3).
 *
 * Thread-safety: pure functions over constant tables.
 */
#ifndef LINKD_FAILURE_H
#define LINKD_FAILURE_H

#include <linkd/common.h>

LK_BEGIN_DECLS

/* X(name, seed kind, class). Append only (numbers are used in bit masks, max 64 kinds). */
#define LK_FAILURE_MAP(X)                                                                        \
  X(NONE, NONE, NONE)                                                                            \
  X(CONNECT_FAILED, CONNECT_FAILED, NOT_SENT)                                                    \
  X(RESET_BEFORE_SEND, RESET_BEFORE_SEND, NOT_SENT)                                              \
  X(READ_TIMEOUT, READ_TIMEOUT, MAYBE_PROCESSED)                                                 \
  X(RESET_AFTER_SEND, RESET_AFTER_SEND, MAYBE_PROCESSED)                                         \
  X(SERVER_5XX, SERVER_5XX, MAYBE_PROCESSED)                                                     \
  X(TOO_MANY_REQUESTS, TOO_MANY_REQUESTS, REFUSED)                                               \
  X(CLIENT_4XX, CLIENT_4XX, PERMANENT)                                                           \
  X(DEADLINE_EXCEEDED, DEADLINE_EXCEEDED, TERMINAL)                                              \
  X(DNS_FAILED, CONNECT_FAILED, NOT_SENT)                                                        \
  X(DNS_TIMEOUT, CONNECT_FAILED, NOT_SENT)                                                       \
  X(CONNECT_REFUSED, CONNECT_FAILED, NOT_SENT)                                                   \
  X(CONNECT_TIMEOUT, CONNECT_FAILED, NOT_SENT)                                                   \
  X(TLS_FAILED, CONNECT_FAILED, NOT_SENT)                                                        \
  X(TLS_TIMEOUT, CONNECT_FAILED, NOT_SENT)                                                       \
  X(POOL_TIMEOUT, CONNECT_FAILED, NOT_SENT)                                                      \
  X(WRITE_TIMEOUT, RESET_BEFORE_SEND, NOT_SENT)                                                  \
  X(FIRST_BYTE_TIMEOUT, READ_TIMEOUT, MAYBE_PROCESSED)                                           \
  X(IDLE_TIMEOUT, READ_TIMEOUT, MAYBE_PROCESSED)                                                 \
  X(EMPTY_RESPONSE, RESET_AFTER_SEND, MAYBE_PROCESSED)                                           \
  X(JUNK_RESPONSE, RESET_AFTER_SEND, MAYBE_PROCESSED)                                            \
  X(PARTIAL_BODY, RESET_AFTER_SEND, MAYBE_PROCESSED)                                             \
  X(HTTP_500, SERVER_5XX, MAYBE_PROCESSED)                                                       \
  X(HTTP_502, SERVER_5XX, MAYBE_PROCESSED)                                                       \
  X(HTTP_503, SERVER_5XX, MAYBE_PROCESSED)                                                       \
  X(HTTP_504, SERVER_5XX, MAYBE_PROCESSED)                                                       \
  X(HTTP_408, CLIENT_4XX, REFUSED)                                                               \
  X(HTTP_425, CLIENT_4XX, REFUSED)                                                               \
  X(CANCELLED, DEADLINE_EXCEEDED, TERMINAL)                                                      \
  X(BREAKER_OPEN, DEADLINE_EXCEEDED, TERMINAL)                                                   \
  X(BUDGET_EXHAUSTED, DEADLINE_EXCEEDED, TERMINAL)                                               \
  X(RATE_LIMITED, DEADLINE_EXCEEDED, TERMINAL)                                                   \
  X(BULKHEAD_FULL, DEADLINE_EXCEEDED, TERMINAL)                                                  \
  X(RESULT_RETRYABLE, SERVER_5XX, MAYBE_PROCESSED)                                               \
  X(TRANSPORT_ERROR, RESET_AFTER_SEND, MAYBE_PROCESSED)                                          \
  X(KEY_IN_USE, CLIENT_4XX, REFUSED)

typedef enum lk_failure {
#define LK_FAILURE_ENUM_(name, seed, cls) LK_F_##name,
  LK_FAILURE_MAP(LK_FAILURE_ENUM_)
#undef LK_FAILURE_ENUM_
  LK_F__COUNT
} lk_failure;

/* Whether the request may have been processed by the server's application. */
typedef enum lk_failure_class {
  LK_FC_NONE,            /* success */
  LK_FC_NOT_SENT,        /* never reached the application: any method may retry */
  LK_FC_MAYBE_PROCESSED, /* may have run: safe/idempotent method, an Idempotency-Key, or unsent */
  LK_FC_REFUSED,         /* the server refused without processing (429, 408, 425): any method */
  LK_FC_PERMANENT,       /* processed and will not change (other 4xx): never by default */
  LK_FC_TERMINAL         /* deadline, cancel, breaker, budget, limiter, bulkhead: never */
} lk_failure_class;

#define LK_FAILURE_BIT(kind) (UINT64_C(1) << (unsigned)(kind))

/* "CONNECT_FAILED", ... ("UNKNOWN" out of range). */
LK_EXPORT const char *lk_failure_name(lk_failure kind);
/* Parses a kind name (case-insensitive, '-' accepted for '_'). 0 or LK_EINVAL. */
LK_EXPORT int lk_failure_from_name(const char *name, lk_failure *out);
/* The seed kind this kind refines (itself for the seed's eight; LK_F_NONE for NONE). */
LK_EXPORT lk_failure lk_failure_seed_kind(lk_failure kind);
/* The class of a kind; LK_FC_TERMINAL (never retried) for a kind out of range. */
LK_EXPORT lk_failure_class lk_failure_class_of(lk_failure kind);
/* Kind for an HTTP status: 1xx-3xx -> NONE, 408, 425, 429, 500, 502, 503, 504 -> their own kinds,
 * other 5xx -> SERVER_5XX, other 4xx -> CLIENT_4XX; anything outside 100-599 -> JUNK_RESPONSE. */
LK_EXPORT lk_failure lk_failure_from_status(int status);
/* true for GET HEAD PUT DELETE OPTIONS TRACE, ASCII case-insensitive (RFC 9110 idempotent). */
LK_EXPORT bool lk_method_is_idempotent(const char *method);
/* true for GET HEAD OPTIONS TRACE, ASCII case-insensitive (RFC 9110 safe). */
LK_EXPORT bool lk_method_is_safe(const char *method);

LK_END_DECLS

#endif
