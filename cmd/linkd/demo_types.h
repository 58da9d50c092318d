/* demo_types.h: what `linkd demo` measures, shared by the runner, the table and the report.
 *
 * One demo_summary holds the run's settings and one demo_client_stats per client. The client
 * side counts come from the completed calls (lk_http results); the server side counts come from
 * libraryd's own records (GET /admin/stats), never from client-side guesses.
 *
 * Thread-safety: plain values, owned by the demo's single thread.
 */
#ifndef LINKD_DEMO_TYPES_H
#define LINKD_DEMO_TYPES_H

#include <linkd/hist.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { DEMO_NAIVE, DEMO_FIXED, DEMO_LINKD, DEMO_NCLIENTS };

/* Buckets of the attempts-per-operation chart: 0 (nothing sent: refused by the breaker), 1, 2,
 * 3, 4 or more requests sent. */
#define DEMO_ATTEMPT_BUCKETS 5
/* lk_err codes are small negatives; counts are kept per code (index = -err). */
#define DEMO_ERR_SLOTS 64

typedef struct demo_client_stats {
  const char *name;  /* short id: "naive", "fixed", "linkd" */
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
  lk_hist *latency;                           /* ns per operation, submit to result */
  int64_t p50, p99, p999, max;                /* ns */
  double wall_s;                              /* seconds from the first submit to the last result */
  bool cut_short;                             /* interrupted or stopped by the safety limit */

  /* server side (libraryd's /admin/stats, this client's own fresh database) */
  bool server_ok;          /* the stats were read */
  int64_t server_requests; /* requests libraryd received during the workload */
  int64_t loans_applied;   /* loan rows written */
  int64_t duplicate_loans; /* loan rows beyond the first per (book, X-Request-Id) */
  int64_t replays;         /* keyed retries answered from the stored result */
  int64_t faults_injected;
} demo_client_stats;

typedef struct demo_summary {
  uint64_t ops;
  uint64_t seed;
  int concurrency;
  int rate;               /* operations started per second (open loop) */
  int64_t deadline;       /* ns: linkd's deadline, and the bar for every client's overruns */
  int64_t overrun_margin; /* ns added to the deadline before a call counts as an overrun */
  uint64_t outage_from, outage_to; /* operation indexes during which libraryd is mostly down */
  const char *const *fault_rules;  /* the baseline fault profile, as libraryd rule specs */
  size_t n_fault_rules;
  const char *outage_rule;
  const char *libraryd; /* path of the binary used */
  double total_s;       /* the whole demo, start to table */
  demo_client_stats c[DEMO_NCLIENTS];
} demo_summary;

#endif
