/* SPDX-License-Identifier: MIT */
/* linkd/duration.h: durations as people write them, for flags and configuration files.
 *
 * One syntax for every linkd program and file: "250ms", "3s", "1m30s", "1.5s", "24h". The
 * `linkd` command line, its config file, libraryd's flags, its config file and its fault rules all
 * parse durations with lk_duration_parse().
 *
 * Thread-safety: pure functions; safe from any thread.
 */
#ifndef LINKD_DURATION_H
#define LINKD_DURATION_H

#include <linkd/common.h>

LK_BEGIN_DECLS

/* Parses one or more <number><unit> terms, summed: number = digits with an optional fraction
 * (".5"), unit = ns | us | ms | s | m | h. No sign, no blanks, no bare numbers: "250" is refused
 * because its unit would be a guess. Fractions finer than 1 ns are dropped.
 * Returns LK_OK with *out in ns; LK_EPARSE (malformed) or LK_ERANGE (beyond int64 ns) with a
 * message (no trailing period) in err when err is non-NULL; LK_EINVAL if s or out is NULL. */
LK_EXPORT int lk_duration_parse(const char *s, int64_t *out, char *err, size_t cap);

/* Short form for humans in the largest unit that keeps the integer part >= 1, with at most three
 * decimals (truncated, trailing zeros dropped): "3s", "1.5s", "800ms", "12.345ms", "250us",
 * "17ns". Negative values print as "-" + the form of their magnitude. Writes at most cap bytes
 * (NUL included) into buf and returns buf (nothing written when cap is 0 or buf is NULL). */
LK_EXPORT char *lk_duration_format(int64_t ns, char *buf, size_t cap);

LK_END_DECLS

#endif
