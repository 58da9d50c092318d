/* SPDX-License-Identifier: MIT */
/* sim.h: a discrete-event simulator of clients, tiers of services and servers, whose every retry,
 * backoff, budget, breaker, limiter and deadline decision is made by liblinkd-core's own code on a
 * simulated clock with seeded generators. Not installed: used by `linkd sim`, its tests and its
 * benchmark. docs/sim.md describes the model, the scenario language and the limits.
 *
 * A run is a pure function of its scenario (seed included): same scenario, same output, byte for
 * byte. Nothing here reads a clock or a global generator.
 *
 * Thread-safety: a sim_run belongs to one thread; distinct runs share nothing.
 */
#ifndef LINKD_SIM_H
#define LINKD_SIM_H

#include <linkd/breaker.h>
#include <linkd/budget.h>
#include <linkd/failure.h>
#include <linkd/hist.h>
#include <linkd/limiter.h>
#include <linkd/retry.h>

#include <stdio.h>

#define SIM_MAX_TIERS 8
#define SIM_MAX_GROUPS 8
#define SIM_MAX_POLICIES 16
#define SIM_MAX_TRIGGERS 16
#define SIM_NAME_MAX 32
#define SIM_CHOICE_MAX 4
#define SIM_NIL UINT32_MAX
#define SIM_MAX_WINDOWS 20000 /* of the time series: (duration + drain) / window */

/* --- the scenario ---------------------------------------------------------------------------- */

typedef enum sim_dist_kind {
  SIM_D_CONST,   /* a */
  SIM_D_EXP,     /* exponential with mean a */
  SIM_D_UNIFORM, /* uniform in [a, b] */
  SIM_D_NORMAL,  /* |normal(a, sd b)| (Brooker's network model) */
  SIM_D_CHOICE   /* v[i] with weight w[i] */
} sim_dist_kind;

typedef struct sim_dist {
  sim_dist_kind kind;
  int n;                        /* SIM_D_CHOICE: values */
  int64_t a, b;                 /* ns */
  int64_t v[SIM_CHOICE_MAX];    /* SIM_D_CHOICE: ns */
  uint32_t cum[SIM_CHOICE_MAX]; /* SIM_D_CHOICE: cumulative weights */
} sim_dist;

typedef enum sim_budget_kind {
  SIM_BUDGET_NONE,
  SIM_BUDGET_RATIO,
  SIM_BUDGET_TOKEN,
  SIM_BUDGET_QUOTA
} sim_budget_kind;

typedef struct sim_policy {
  char name[SIM_NAME_MAX];
  lk_retry_config retry; /* attempts, backoff, retry_on */
  int64_t timeout;       /* per-attempt cap, ns (default 1 s) */
  int64_t deadline;      /* per logical call, ns; 0 = none */
  bool propagate;        /* the deadline travels with the attempt (servers may drop expired work) */
  sim_budget_kind budget;
  lk_budget_ratio_config ratio;
  lk_budget_token_config token;
  lk_budget_quota_config quota;
  bool breaker;
  lk_breaker_config breaker_cfg; /* rng and callbacks are set by the run */
  bool breaker_wait; /* a refused call waits for the next probe while its deadline allows
                        (lk_http_policy.breaker_wait), else it fails at once */
  bool limiter;
  lk_limiter_config limiter_cfg;
} sim_policy;

typedef enum sim_discipline { SIM_Q_FIFO, SIM_Q_LIFO } sim_discipline;
typedef enum sim_tier_kind { SIM_TIER_QUEUE, SIM_TIER_OCC } sim_tier_kind;

typedef struct sim_tier {
  char name[SIM_NAME_MAX];
  sim_tier_kind kind;
  int servers;      /* >= 1, attempts go round robin */
  int workers;      /* per server */
  sim_dist service; /* local work of one attempt */
  int64_t queue;    /* per server, waiting attempts at most; beyond: 503 */
  sim_discipline discipline;
  bool drop_expired; /* at dequeue, drop an attempt whose propagated deadline has passed */
  bool drop_short;   /* also answer 504 without working when the caller's remaining time is
                        shorter than the work (drop_expired=short; libraryd's rule) */
  int calls;         /* index of the tier each attempt calls after its local work; -1 none */
  int policy;        /* the policy of that downstream call */
} sim_tier;

typedef struct sim_group {
  char name[SIM_NAME_MAX];
  bool closed;    /* closed loop: each of `count` clients waits for its call, thinks,
                     calls again; open loop: arrivals at `rate` whatever happens */
  int64_t count;  /* closed: clients */
  double rate;    /* open: logical calls per second */
  bool poisson;   /* open: exponential gaps (else evenly spaced) */
  sim_dist think; /* closed: before each call (the first included) */
  int64_t ops;    /* closed: calls per client (0 = until the end) */
  int target;     /* tier */
  int policy;
} sim_group;

typedef enum sim_trigger_kind {
  SIM_TRIG_OUTAGE,   /* the tier answers every attempt at once with `fail` */
  SIM_TRIG_SLOWDOWN, /* service times multiplied by factor */
  SIM_TRIG_CAPACITY, /* workers per server set to `workers` */
  SIM_TRIG_BURST     /* an open-loop group's rate multiplied by factor */
} sim_trigger_kind;

typedef struct sim_trigger {
  sim_trigger_kind kind;
  int64_t from, to; /* ns of simulated time */
  int tier, group;  /* -1 when not used */
  double factor;
  int workers;
  lk_failure fail; /* OUTAGE: HTTP_503 (default), CONNECT_REFUSED, or NONE for a black hole
                      (no answer: the callers time out) */
} sim_trigger;

typedef struct sim_scenario {
  uint64_t seed;
  int64_t duration; /* arrivals stop here */
  int64_t drain;    /* then calls in flight may finish for this long */
  int64_t window;   /* of the time series */
  sim_dist net;     /* one-way network delay */
  int n_policies, n_tiers, n_groups, n_triggers;
  sim_policy policies[SIM_MAX_POLICIES];
  sim_tier tiers[SIM_MAX_TIERS];
  sim_group groups[SIM_MAX_GROUPS];
  sim_trigger triggers[SIM_MAX_TRIGGERS];
  bool plain_heap; /* not in the language: events in one 4-ary heap instead of the calendar
                      queue (bench/sim compares the two); the same model, but simultaneous
                      events may pop in another order */
} sim_scenario;

/* Parses a scenario (docs/sim.md). LK_OK, or LK_EPARSE with "line N: message" in err (the line
 * of the offending directive, a key that does not apply there included), or, for what the file
 * lacks as a whole, a message without a line: "no tier: ..." or "no client: ...". A UTF-8 byte
 * order mark starting the text is skipped. Never reads past len and needs no NUL. */
int sim_scenario_parse(const char *text, size_t len, sim_scenario *out, char *err, size_t cap);
/* sim_scenario_parse of a file's contents; LK_ESYS (message in err) when it cannot be read. */
int sim_scenario_load(const char *path, sim_scenario *out, char *err, size_t cap);
/* Index of the named policy, or -1. */
int sim_policy_find(const sim_scenario *s, const char *name);

/* --- results --------------------------------------------------------------------------------- */

/* Per window and tier. */
typedef struct sim_win {
  uint32_t attempts;    /* attempts that reached the tier (offered load) */
  uint32_t calls;       /* logical calls to the tier that started */
  uint32_t ok;          /* logical calls to the tier that succeeded (goodput), by their end */
  uint32_t failed;      /* logical calls to the tier that failed, by their end */
  uint32_t done;        /* attempts whose work finished */
  uint32_t wasted;      /* of which for callers that had given up */
  uint32_t dropped;     /* dropped expired at dequeue */
  uint32_t rejected;    /* queue full or outage */
  uint32_t queue_max;   /* deepest queue (all servers) seen in the window */
  uint32_t in_deadline; /* client calls (tier 0 targets) that succeeded within their deadline */
} sim_win;

#define SIM_LAT_BUCKETS 128 /* log-spaced, 4 per octave from 1 us */

typedef struct sim_tier_stats {
  uint64_t attempts, calls, ok, failed, done, wasted, dropped, rejected, queue_max;
  uint64_t ends[LK_F__COUNT]; /* failed calls by the kind of their last failure */
  uint64_t busy_ns;           /* worker time spent within [0, busy_end] (sim_result), work
                                 still in service at the end included up to then */
  uint64_t wasted_ns;         /* of which for callers that had given up */
  lk_hist *latency;           /* successful logical calls to the tier */
} sim_tier_stats;

typedef struct sim_group_stats {
  uint64_t calls, ok, failed, in_deadline;
  uint64_t ends[LK_F__COUNT];
  uint64_t by_reason[8]; /* lk_reason of the final decision (RETRY unused; SUCCESS for ok) */
  uint64_t attempts;     /* attempts these calls made (first tier only) */
  lk_hist *latency;      /* successes */
  int64_t last_end;      /* simulated time of the last call's end */
} sim_group_stats;

typedef struct sim_result {
  sim_scenario sc;
  int n_windows;
  sim_win *win;  /* [n_windows * n_tiers], tier-major within a window */
  uint32_t *lat; /* [n_windows * n_tiers * SIM_LAT_BUCKETS] success latencies */
  sim_tier_stats tier[SIM_MAX_TIERS];
  sim_group_stats group[SIM_MAX_GROUPS];
  uint64_t events;      /* events processed */
  uint64_t waiter_asks; /* calls waiting for a breaker that a wake let ask it again */
  uint64_t attempts;    /* attempts made, all tiers */
  uint64_t calls_started, calls_ended, calls_unfinished, double_ends;
  uint64_t jobs_started, jobs_ended;
  uint32_t peak_calls, peak_jobs, peak_events; /* in flight at once */
  size_t peak_bytes;                           /* pool and heap memory at its largest */
  int64_t end_time;                            /* simulated time of the last event */
  int64_t busy_end; /* what the summary's busy % is measured over: end_time, or duration + drain
                       when workers were still busy as the run stopped */
} sim_result;

/* Runs `sc` and fills *out (free it with sim_result_free). LK_OK, or LK_ENOMEM or LK_ECONFIG (a
 * policy that core code rejects) with a static message in *why; on failure nothing is left to
 * free. */
int sim_run(const sim_scenario *sc, sim_result *out, const char **why);
void sim_result_free(sim_result *r);

static inline const sim_win *sim_win_at(const sim_result *r, int w, int tier) {
  return &r->win[(size_t)w * (size_t)r->sc.n_tiers + (size_t)tier];
}
/* Percentile q of the window's success latencies at `tier` (bucket upper bound, ns); 0 if none. */
int64_t sim_win_latency(const sim_result *r, int w, int tier, double q);

/* Recovery after trigger `t` ends: ns from its end until client goodput (successes within the
 * deadline of the calls of all groups, over a 500 ms moving window) is back to 90 % of what it was
 * before the trigger; SIM_RECOVERY_NEVER if never within the run; SIM_RECOVERY_NO_BASELINE if
 * there was nothing to compare (no goodput before the trigger); SIM_RECOVERY_TOO_LATE if the
 * arrivals stop less than the 500 ms window after it ends (or before it starts), so no recovery
 * could be seen whatever happened. */
#define SIM_RECOVERY_NEVER (-1)
#define SIM_RECOVERY_NO_BASELINE INT64_MIN
#define SIM_RECOVERY_TOO_LATE (INT64_MIN + 1)
int64_t sim_recovery(const sim_result *r, int t);

/* The outputs (sim_output.c). */
void sim_write_summary(FILE *f, const sim_result *r);
void sim_write_csv(FILE *f, const sim_result *r);

#endif
