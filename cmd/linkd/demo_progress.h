/* SPDX-License-Identifier: MIT */
/* demo_progress.h: progress of `linkd demo` on stderr. On a terminal, one bar redrawn in place
 * (at most every 100 ms); otherwise plain lines at each quarter, so logs stay readable.
 *
 * Thread-safety: one thread.
 */
#ifndef LINKD_DEMO_PROGRESS_H
#define LINKD_DEMO_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct demo_progress {
  FILE *out;
  bool tty;
  int64_t last_draw; /* ns */
  int quarter;       /* last quarter printed (plain mode) */
} demo_progress;

/* Plain mode unless `out` is a terminal. */
void demo_progress_init(demo_progress *p, FILE *out);
/* Starts a new client's bar. */
void demo_progress_begin(demo_progress *p, const char *title);

typedef struct demo_progress_state {
  const char *title;
  uint64_t done, total, ok, attempts;
  bool outage; /* the outage rule is active */
} demo_progress_state;

/* Redraws (rate-limited unless `force`). */
void demo_progress_update(demo_progress *p, const demo_progress_state *s, bool force);
/* Ends the bar with a summary line. */
void demo_progress_end(demo_progress *p, const demo_progress_state *s, double seconds);

#endif
