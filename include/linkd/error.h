/* SPDX-License-Identifier: MIT */
/* linkd/error.h: error codes.
 *
 * Every fallible function returns 0 (LK_OK) or a negative LK_E* code; failures are values and the
 * library never aborts or exits. Codes are append-only: a code's number never changes once
 * released. lk_strerror() and lk_err_name() are thread-safe and return static strings.
 */
#ifndef LINKD_ERROR_H
#define LINKD_ERROR_H

#include <linkd/common.h>

/* X(name, number, message). Append only. */
#define LK_ERRNO_MAP(X)                                                                          \
  X(OK, 0, "success")                                                                            \
  X(EINVAL, -1, "invalid argument")                                                              \
  X(ENOMEM, -2, "out of memory")                                                                 \
  X(ERANGE, -3, "value out of range")                                                            \
  X(EPARSE, -4, "malformed input")                                                               \
  X(EDEADLINE, -5, "deadline exceeded")                                                          \
  X(ECANCELED, -6, "operation cancelled")                                                        \
  X(EBREAKER_OPEN, -7, "circuit breaker open")                                                   \
  X(EBUDGET, -8, "retry budget exhausted")                                                       \
  X(ERATE_LIMITED, -9, "rate limited")                                                           \
  X(EBULKHEAD_FULL, -10, "bulkhead full")                                                        \
  X(EATTEMPTS, -11, "retries exhausted")                                                         \
  X(ENOTRETRYABLE, -12, "failure not retryable")                                                 \
  X(EHTTP, -13, "HTTP error status")                                                             \
  X(ETRANSPORT, -14, "transport failure")                                                        \
  X(EIO, -15, "input/output error")                                                              \
  X(ESTATE, -16, "operation not valid in the current state")                                     \
  X(EAGAIN, -17, "resource temporarily unavailable")                                             \
  X(ETOOBIG, -18, "too large")                                                                   \
  X(ENOTFOUND, -19, "not found")                                                                 \
  X(ECONFIG, -20, "invalid configuration")                                                       \
  X(ESYS, -21, "system call failed")                                                             \
  X(ECONFLICT, -22, "conflict")

LK_BEGIN_DECLS

typedef enum lk_err {
#define LK_ERR_ENUM_(name, num, msg) LK_##name = (num),
  LK_ERRNO_MAP(LK_ERR_ENUM_)
#undef LK_ERR_ENUM_
} lk_err;

/* A human-readable message for an error code ("unknown error" for codes not in the table). */
LK_EXPORT const char *lk_strerror(int err);
/* The code's name without prefix, e.g. "EDEADLINE" ("UNKNOWN" for codes not in the table). */
LK_EXPORT const char *lk_err_name(int err);

LK_END_DECLS

#endif
