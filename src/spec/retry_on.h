/* SPDX-License-Identifier: MIT */
/* --retry-on: which failure kinds a call may retry, as an edit of the inherited set.
 *
 * A spec is a comma-separated list of items, applied left to right. An item is a token, or a
 * token prefixed with '+' (add) or '-' (remove). If any item has no sign, the spec starts from
 * the empty set (it says the whole set, e.g. "503,429,read-timeout"); otherwise it edits the set
 * inherited from the config file or the built-in default (e.g. "-408" or "+4xx").
 * Tokens (case-insensitive, '-' and '_' alike):
 *   408 425 429 500 502 503 504      the status's own kind (HTTP_408, TOO_MANY_REQUESTS, ...)
 *   4xx / 5xx                        every 4xx / 5xx kind (4xx includes 408, 425 and 429)
 *   a failure kind name              e.g. read-timeout, CONNECT_REFUSED, server-5xx, client-4xx
 *   not-sent maybe-processed refused permanent   every kind of that class
 *   default                          the built-in set (every NOT_SENT, MAYBE_PROCESSED and
 *                                    REFUSED kind)
 *   none                             nothing (unsigned only)
 * Statuses without a kind of their own (404, 501, ...) are refused with a hint, and so are the
 * terminal kinds (DEADLINE_EXCEEDED, CANCELLED, ...), which are never retried. Whether a kind in
 * the set is actually retried still depends on the method, the Idempotency-Key and whether the
 * request was fully sent (linkd/retry.h). */
#ifndef LINKD_CLI_RETRY_ON_H
#define LINKD_CLI_RETRY_ON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cli_retry_edit {
  bool replace;    /* start from the empty set instead of the inherited one */
  uint64_t remove; /* LK_FAILURE_BIT set removed (applied before `add`) */
  uint64_t add;    /* LK_FAILURE_BIT set added */
} cli_retry_edit;

/* Parses a spec. 0, or -1 with a message naming the bad item in err. */
int cli_retry_on_parse(const char *spec, cli_retry_edit *out, char *err, size_t cap);

/* The set after applying `e` to `inherited`. */
uint64_t cli_retry_edit_apply(const cli_retry_edit *e, uint64_t inherited);

/* Makes *first the edit "first, then second". */
void cli_retry_edit_then(cli_retry_edit *first, const cli_retry_edit *second);

/* Writes a set the way a spec would say it: "default", "none", "default,-HTTP_408" when it is
 * close to the default, else the kind names. Returns buf (truncated if cap is too small). */
char *cli_retry_on_format(uint64_t set, char *buf, size_t cap);

#endif
