/* SPDX-License-Identifier: MIT */
/* demo_types.h: what `linkd demo` measures, shared by the runner, the table and the report.
 *
 * The demo runs scenarios (faults, storm); one demo_summary holds one scenario's settings and one
 * demo_client_stats per client. The client side counts come from the completed calls (lk_http
 * results); the server side counts come from libraryd's own records (GET /admin/stats and
 * /admin/series), never from client-side guesses.
 *
 * Thread-safety: plain values, owned by the demo's single thread.
 */
#ifndef LINKD_DEMO_TYPES_H
#define LINKD_DEMO_TYPES_H

#include <linkd/hist.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The clients, in table order: two written without linkd's ideas, then linkd's library defaults
 * (lk_http_policy_init_default() with the demo's deadline and nothing else), then linkd's
 * policy as the demo configures it. */
enum { DEMO_NAIVE, DEMO_FIXED, DEMO_DEFAULTS, DEMO_LINKD, DEMO_NCLIENTS };

typedef enum demo_scenario { DEMO_SC_FAULTS, DEMO_SC_STORM, DEMO_NSCENARIOS } demo_scenario;

/* Buckets of the attempts-per-operation chart: 0 (nothing sent: refused by the breaker), 1, 2,
 * 3, 4 or more requests sent. */
#define DEMO_ATTEMPT_BUCKETS 5
/* lk_err codes are small negatives; counts are kept per code (index = -err). */
#define DEMO_ERR_SLOTS 64
/* The time series: 100 ms windows from the first operation's scheduled start. */
#define DEMO_WINDOW LK_MS(100)
#define DEMO_RECOVERY_TOO_SHORT (-2) /* demo_client_stats.recovery: too soon to tell */
#define DEMO_WINDOWS 600             /* the series covers the schedule's first 60 s */

typedef struct demo_series {
  uint32_t ok[DEMO_WINDOWS];     /* operations that succeeded within the deadline, by end time */
  uint32_t failed[DEMO_WINDOWS]; /* operations that failed (or answered too late), by end time */
  uint32_t sent[DEMO_WINDOWS];   /* requests sent by the client, by attempt start */
  uint32_t server[DEMO_WINDOWS]; /* requests reaching libraryd (its /admin/series) */
  uint32_t abandoned[DEMO_WINDOWS]; /* work libraryd finished for a caller already gone */
  bool have_server;
  int n; /* windows in use */
} demo_series;

typedef struct demo_client_stats {
  const char *name;  /* short id: "naive", "fixed", "defaults", "linkd" */
  const char *title; /* column header */
  const char *how;   /* one line: how it behaves */
  const char *impl;  /* how it is built (the same lk_http layer, configured as ...) */

  /* client side */
  uint64_t ops, done; /* operations planned / completed */
  uint64_t successes; /* a definitive answer: 2xx, or 404 for the missing-book lookups */
  uint64_t successes_in_time; /* ... that arrived within the deadline + margin (a caller with
                                 that deadline was still waiting for it) */
  uint64_t attempts;  /* requests sent (attempts that reached the wire) */
  uint64_t refused;   /* attempts refused locally (breaker open); not sent */
  uint64_t by_attempts[DEMO_ATTEMPT_BUCKETS]; /* operations by requests sent */
  uint64_t overruns;                          /* operations slower than deadline + margin */
  uint64_t resends;                           /* libcurl silent re-sends detected */
  uint64_t loan_ops, loans_confirmed;         /* loan operations / those answered 2xx */
  uint64_t errors[DEMO_ERR_SLOTS];            /* final lk_err of each operation, by -code */
  uint64_t held;    /* operations due while the driver was at its --concurrency cap */
  int64_t held_max; /* ns: the longest of their waits for a slot */
  lk_hist *latency; /* ns per successful operation, from its start (its submit, or when it
                       was due if the driver held it) to its result (a fast refusal is not a
                       fast success) */
  int64_t p50, p99, p999, max; /* ns, of successes */
  double wall_s;       /* seconds from the first submit to the last result */
  bool cut_short;      /* interrupted or stopped by the safety limit */
  double goodput;      /* successes within the deadline per second of the schedule */
  double baseline;     /* storm: successes within deadline per window before the trigger */
  int64_t recovery;    /* ns from the end of the trigger until a 500 ms moving average of
                          successes within deadline is back to 90 % of the baseline; -1 never
                          (within the run); DEMO_RECOVERY_TOO_SHORT: too soon to tell (the
                          run, or the series: DEMO_WINDOWS, the first 60 s, ended less than
                          500 ms after the trigger, or before a recovery) */
  demo_series *series; /* allocated by the runner */

  /* server side (libraryd's /admin/stats, this client's own fresh database) */
  bool server_ok;          /* the stats were read */
  int64_t server_requests; /* requests libraryd received during the workload */
  int64_t loans_applied;   /* loan rows written */
  int64_t duplicate_loans; /* loan rows beyond the first per (book, X-Request-Id) */
  int64_t replays;         /* keyed retries answered from the stored result */
  int64_t faults_injected;
  int64_t work_done;       /* requests libraryd's workers ran for a caller still waiting */
  int64_t work_abandoned;  /* ... and for a caller that had already given up (deadline passed
                              or the connection closed before the answer); -1: not reported */
} demo_client_stats;

typedef struct demo_summary {
  demo_scenario scenario;
  const char *name;  /* "faults", "storm" */
  uint64_t ops;
  uint64_t seed;
  int concurrency;
  int rate;               /* operations started per second (open loop) */
  int64_t deadline;       /* ns: the callers' deadline, and the bar for every client's overruns */
  int64_t overrun_margin; /* ns added to the deadline before a call counts as an overrun */
  int64_t trigger_from, trigger_to; /* ns from the schedule's start: outage / slowdown */
  const char *trigger_rule;          /* libraryd rule added for the trigger */
  const char *const *fault_rules;    /* the baseline fault profile, as libraryd rule specs */
  size_t n_fault_rules;
  const char *server_args; /* libraryd's capacity flags, as text */
  double capacity;         /* storm: measured requests/s libraryd completed at saturation */
  const char *libraryd;    /* path of the binary used */
  double total_s;          /* the scenario, start to table */
  demo_client_stats c[DEMO_NCLIENTS];
} demo_summary;

#endif
