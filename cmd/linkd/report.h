/* SPDX-License-Identifier: MIT */
/* report.h: the HTML report of `linkd demo`: one self-contained file (inline CSS and SVG, no
 * script, nothing fetched) with, per scenario, the comparison table, time series, a latency CDF of the clients, the
 * distribution of attempts per operation, the fault profile and the policies.
 *
 * Thread-safety: pure functions of their arguments.
 */
#ifndef LINKD_REPORT_H
#define LINKD_REPORT_H

#include "demo_types.h"

#include <stdio.h>

/* Writes the report of the n scenarios to `path`. A regular file (or a new one) is replaced
 * whole through a temporary file beside it, so a failed write leaves the previous file (or
 * none), never a cut one; anything else (/dev/stdout, a pipe) is written directly. 0, or -1 with
 * a message in err. */
int demo_report_write(const char *path, const demo_summary *const *s, int n, char *err,
                      size_t errcap);
/* Whether the report can plausibly be written to `path`, checked before the run: not a
 * directory; an existing file writable, or else its directory existing and writable. 0, or -1
 * with a message in err. (A full disk shows only when the report is written.) */
int demo_report_check(const char *path, char *err, size_t errcap);

/* The parts, for tests and reuse; each writes to `f`. */
/* Latency CDF: x = latency on a log scale, y = share of operations at or below it. */
void demo_report_svg_cdf(FILE *f, const demo_summary *s);
/* Client `which` over time: successes, failures and requests reaching libraryd (or sent, when
 * libraryd gave no series) per 100 ms window, the trigger window shaded. */
void demo_report_svg_series(FILE *f, const demo_summary *s, int which);
/* Grouped bars: share of operations by requests sent (0, 1, 2, 3, 4+), one bar per client. */
void demo_report_svg_attempts(FILE *f, const demo_summary *s);

/* Writes `s` with HTML's special characters escaped. */
void demo_html_escape(FILE *f, const char *s);

#endif
