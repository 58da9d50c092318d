/* SPDX-License-Identifier: MIT */
/* util.h: small parsers shared by libraryd's server and command line.
 * Thread-safety: pure functions. */
#ifndef LINKD_SERVER_UTIL_H
#define LINKD_SERVER_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A duration in whole seconds for an interface that counts in seconds (libmicrohttpd's
 * connection timeout): rounded up, so that 500ms is 1 s and not 0, which would mean "never";
 * at most max; 0 stays 0 and so does a negative value. */
unsigned lk_whole_seconds_up(int64_t ns, unsigned max);
/* Strict decimal int64 of the whole string (no sign unless allow_negative). 0 or LK_EPARSE /
 * LK_ERANGE. */
int lk_parse_i64(const char *s, size_t len, bool allow_negative, int64_t *out);
/* A resource id in its one canonical form: a positive decimal int64 of the whole string, no
 * sign, no leading zero, no whitespace ("1", not "01", "+1" or " 1"). 0 or LK_EPARSE /
 * LK_ERANGE. */
int lk_parse_id(const char *s, size_t len, int64_t *out);
/* A number in its one canonical form, as a query parameter takes it: a non-negative decimal
 * int64 of the whole string, no sign, no whitespace, no leading zero but in "0" itself ("5" and
 * "0", not "05", "+5", "00" or " 5"). 0 or LK_EPARSE / LK_ERANGE. */
int lk_parse_canonical(const char *s, size_t len, int64_t *out);

/* A route pattern is "METHOD PATH" or "PATH" or "*": METHOD "*" or absent matches any method;
 * in PATH a segment "*" matches exactly one non-empty segment and a final "**" matches the rest
 * (zero or more segments). Returns true when method + path match. */
bool lk_route_match(const char *pattern, const char *method, const char *path);
/* Checks a pattern's syntax. 0 or LK_EPARSE. */
int lk_route_pattern_check(const char *pattern);

/* Writes the formatted message into err (when err and cap are non-zero); returns LK_EPARSE, so a
 * parser can `return lk_parse_fail(err, cap, "...", ...)`. */
__attribute__((format(printf, 3, 4))) int lk_parse_fail(char *err, size_t cap, const char *fmt,
                                                        ...);

/* IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") of a wall-clock time; buf >= 30 bytes. */
void lk_http_date(int64_t wall_ns, char *buf, size_t cap);

#endif
