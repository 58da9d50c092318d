/* SPDX-License-Identifier: MIT */
/* demo_table.h: the comparison table of `linkd demo`, as text (terminal), as rows (for the HTML
 * report) and as JSON (--json, for tests). One source for all three, so they never disagree.
 *
 * Thread-safety: pure functions of their arguments.
 */
#ifndef LINKD_DEMO_TABLE_H
#define LINKD_DEMO_TABLE_H

#include "demo_types.h"

#include <stdio.h>

#define DEMO_ROWS_MAX 16

typedef struct demo_row {
  char label[64];
  char cell[DEMO_NCLIENTS][32];
  const char *hint; /* what the row means, one sentence */
} demo_row;

/* Fills up to `max` rows; returns how many. */
int demo_table_rows(const demo_summary *s, demo_row *rows, int max);
/* The table, aligned, for a terminal. */
void demo_table_print(FILE *f, const demo_summary *s);
/* The scenarios as one JSON object {"scenarios":[...],"report":...,"complete":...,"error":...}
 * (schema in docs/demo.md); report_path and error may be NULL. `complete`: every scenario asked
 * for ran (an interrupted or failed run lists only those that finished). 0, or -1 on no memory
 * or a write error. */
int demo_table_json(FILE *f, const demo_summary *const *s, int n, const char *report_path,
                    bool complete, const char *error);
/* The schedule's length in seconds (ops / rate). */
double demo_span_s(const demo_summary *s);
/* Share of libraryd's work done for callers already gone, or -1 when not reported. */
double demo_abandoned_share(const demo_client_stats *c);
/* Whether most of the client's operations waited for one of the driver's --concurrency slots:
 * the schedule was more than the driver could carry, and its rows describe that queue. */
bool demo_driver_saturated(const demo_client_stats *c);

/* Human durations: "850us", "2.14ms", "1.25s". */
void demo_fmt_duration(int64_t ns, char *buf, size_t cap);
/* successes / ops as a ratio in [0, 1] (0 when ops is 0). */
double demo_success_rate(const demo_client_stats *c);
/* requests sent / operations (0 when ops is 0). */
double demo_attempts_per_op(const demo_client_stats *c);

#endif
