/* SPDX-License-Identifier: MIT */
/* engine.c: the event loop of the simulator. Logical calls (from clients, or from a tier's job to
 * the tier below) make attempts; an attempt crosses the network, queues at one server of its
 * tier, is served by a worker (and, for a tier that calls another, holds the worker during its
 * own downstream call), and its reply crosses the network back. Every decision about a failed
 * attempt is lk_retry_decide's, every retry asks the call site's lk_budget, every attempt asks its
 * lk_breaker and lk_limiter, and the per-attempt timeout is lk_attempt_timeout of the deadline's
 * remainder (core/deadline_inline.h, which the exported functions are built from): the core's
 * code, on the simulated clock.
 *
 * Calls and jobs live in pools with free lists, events in a calendar queue (heap.h); after
 * warm-up the loop allocates nothing. An event refers to its call or job by index and carries the
 * attempt's generation, so a timeout or reply that lost its race is recognised and ignored without
 * ever removing anything from the queue.
 */
#include "sim/exp.h"
#include "sim/heap.h"
#include "sim/sim.h"

#include <linkd/deadline.h>
#include <linkd/error.h>
#include <linkd/rand.h>

#include "core/deadline_inline.h"
#include "core/sat.h"

#include <math.h>
#include <string.h>

/* The handlers on every attempt's path, inlined into their few callers: each call's saves and
 * restores were a tenth of the policy row's instructions (docs/BENCHMARKS.md, fourth pass). */
#define HOT static inline __attribute__((always_inline))

enum {
  EV_CLOSED = 1, /* a closed-loop client starts a call; idx = group */
  EV_SEND,       /* a call starts its next attempt (after a backoff) */
  EV_ARRIVE,     /* an attempt reaches its tier; idx = job */
  EV_DONE,       /* a worker finished an attempt's local work; idx = job */
  EV_OCC_WRITE,  /* an OCC attempt's conditional write reaches the row; idx = job */
  EV_TIMEOUT,    /* an attempt's timeout; idx = call */
  EV_TRIG_ON,    /* idx = trigger */
  EV_TRIG_OFF,
  EV_TIMERS,    /* the first live entry of a site's timeout FIFO is due; idx = site */
  EV_WAKE,      /* the site's breaker may admit again: its waiters ask; idx = site */
  EV_GIVE_UP,   /* a call waiting for the breaker has no time left for an attempt; idx = call */
  EV_GIVE_UPS,  /* the first live entry of a site's give-up FIFO is due; idx = site */
  EV_REPLY = 32 /* + the attempt's lk_failure (LK_F_NONE = success); idx = call */
};

#define GEN_MASK 0xffffffu

/* One cache line, aligned (run.calls): most events about a call find it cold, and an 80-byte
 * record spanned two lines four times in five. */
typedef struct call {
  int64_t start, deadline, attempt_start, prev_delay;
  lk_budget_ticket ticket;
  uint64_t permit_period; /* lk_breaker_permit, in two fields */
  uint32_t gen;           /* attempts and their ends; never reset, so stale events stay stale */
  union {
    uint32_t parent; /* the job that made this call, or SIM_NIL for a client */
    uint32_t next;   /* free list */
  };
  uint8_t site; /* group index, or n_groups + tier for a tier's downstream calls */
  uint8_t target, live;
  uint8_t waiting;    /* in its site's breaker queue */
  uint8_t give_up_on; /* an EV_GIVE_UP for this call's current generation is in the queue */
  uint8_t permit_state;
  uint16_t attempt;
} call;
_Static_assert(sizeof(call) == 64, "a call is one cache line");

typedef struct job {
  int64_t deadline, svc_start;
  /* A leaf tier's attempt arrives at its server when it is sent (job_arrive from attempt_begin,
   * no EV_ARRIVE): the server runs `shift` (the inbound network delay) ahead of the caller's
   * clock for this job, deadline and give_up are in the server's time, and the reply adds shift
   * back. 0 for a job that arrived through EV_ARRIVE. */
  int64_t shift, give_up;
  uint32_t call, call_gen, next;
  uint64_t version; /* OCC: the row's version this attempt read */
  uint16_t server;
  uint8_t tier, downstream;
  uint8_t live; /* 1 from its attempt's start, 2 once a worker serves it; 0 free */
} job;

typedef struct server {
  int busy, cap;
  uint32_t qhead, qtail, qlen;
  uint64_t version; /* OCC row */
} server;

/* Timeouts of the full per-attempt length, in the order they were set. Nearly every one of them
 * loses its race (the reply comes first), and they are set at now + the same length, so they
 * come due in the order they were set: a FIFO per call site instead of the event queue, with one
 * event in the queue for its first live entry. Stale entries are dropped whenever that event
 * fires, without ever being ordered against anything (a third of the queue's work before). */
typedef struct tfifo {
  sim_ev *a;
  uint32_t head, n, cap; /* cap is a power of two */
  bool armed;            /* an EV_TIMERS event is in the queue */
} tfifo;

typedef struct site {
  tfifo timers;
  /* Calls the breaker refused that wait for it (breaker.wait=yes), in the order they came: woken
   * together by one EV_WAKE when the breaker's retry-at time comes or a probe's outcome makes it
   * known, instead of each asking again every 5 ms. An entry's t is its call's give-up time, or
   * INT64_MIN once the call has ended without leaving the queue; entries of calls that gave up
   * are stale. */
  tfifo waiters;
  /* Calls waiting, and the length the queue would have if every wake walked all of it (each
   * wake leaves only the calls still waiting; a call that gives up leaves a stale entry until
   * the next wake). That length, not the calls, decides whether a probe's outcome wakes: a
   * wake that stops early (waiters_wake) keeps the outputs what they were. */
  uint32_t waiting_n, walked_n;
  tfifo give_ups;     /* the waiters' give-up times in the order they were set, while that order is
                         also their time order (a call's deadline is mostly its start + a constant);
                         one out of order goes into the event queue as an EV_GIVE_UP */
  int64_t wake_at;    /* of the EV_WAKE in the queue; INT64_MAX for none */
  bool refused;       /* breaker_wait ran for the call a wake let ask */
  int64_t refused_at; /* the retry-at time it computed */
  const sim_policy *pol;
  lk_retry_policy retry;
  lk_budget *budget;
  lk_breaker *breaker;
  lk_limiter *limiter;
} site;

/* A window of the time series: its number, when the next one starts, its records (one per tier)
 * and its latency buckets (SIM_LAT_BUCKETS per tier). */
typedef struct wpos {
  int64_t w, next;
  sim_win *win;
  uint32_t *lat;
} wpos;

typedef struct run {
  const sim_scenario *sc;
  sim_result *r;
  sim_queue q;
  call *calls; /* 64-byte aligned within calls_raw */
  void *calls_raw;
  job *jobs;
  uint32_t ncalls, njobs, free_call, free_job, live_calls, live_jobs;
  server *srv[SIM_MAX_TIERS];
  uint32_t rr[SIM_MAX_TIERS];
  uint32_t queued[SIM_MAX_TIERS];
  site sites[SIM_MAX_GROUPS + SIM_MAX_TIERS];
  lk_rand_fast r_arr, r_svc, r_net, r_pol, r_brk;
  sim_exp_table zt; /* exponential draws (exp.h) */
  double slow[SIM_MAX_TIERS];
  /* A leaf tier's outages and slowdowns, for its jobs in the server's time (job.shift): looked up
   * at the moment on the callers' clock instead of following the trigger events. */
  uint8_t n_out[SIM_MAX_TIERS], n_slow[SIM_MAX_TIERS];
  uint8_t out_ix[SIM_MAX_TIERS][SIM_MAX_TRIGGERS], slow_ix[SIM_MAX_TIERS][SIM_MAX_TRIGGERS];
  lk_failure outage[SIM_MAX_TIERS];
  int outage_on[SIM_MAX_TIERS];
  double burst[SIM_MAX_GROUPS];
  int64_t issued[SIM_MAX_GROUPS];                /* closed: calls started */
  /* Open-loop groups' next arrivals, outside the event queue: the loop takes the earliest of
   * them when it is no later than the queue's first event. Half the events of a healthy run
   * are arrivals; each was a push and a pop (docs/BENCHMARKS.md). INT64_MAX: no more. */
  int64_t open_at[SIM_MAX_GROUPS];
  int64_t open_min; /* the earliest of open_at, of group open_g */
  int open_g;
  uint64_t *acc[SIM_MAX_TIERS + SIM_MAX_GROUPS]; /* latencies, copied into lk_hist at the end */
  int64_t now;
  wpos cur; /* the window R->now is in (window_to moves it) */
  int64_t span;          /* duration + drain: events after it are not processed */
  int64_t last_fold;     /* the latest reply handled without an event (end_time) */
  int oom;
} run;

/* Latencies are counted in a plain array with lk_hist's layout (128 sub-buckets per power of
 * two) and handed to lk_hist once, at the end: lk_hist is built for many threads, and its atomic
 * adds were a fifth of the loop's time. */
#define ACC_SLOTS (58 * 128)

static inline uint32_t acc_index(int64_t v) {
  uint64_t u = v > 0 ? (uint64_t)v : 0;
  if (u < 128)
    return (uint32_t)u;
  int e = 63 - __builtin_clzll(u);
  return (uint32_t)(e - 6) * 128u + (uint32_t)((u >> (e - 7)) & 127u);
}

static inline int64_t acc_value(uint32_t i) {
  if (i < 128)
    return (int64_t)i;
  int e = (int)(i / 128) + 6;
  return (int64_t)((128u + (i % 128u)) << (e - 7));
}

static void acc_flush(const uint64_t *acc, lk_hist *h) {
  for (uint32_t i = 0; i < ACC_SLOTS; i++)
    if (acc[i])
      lk_hist_record_n(h, acc_value(i), acc[i]);
}

/* --- randomness --------------------------------------------------------------------------------
 */

static inline double unit(lk_rand_fast *g) { /* [0, 1) */
  return (double)(lk_rand_fast_next64(g) >> 11) * 0x1p-53;
}

/* The rarer shapes, out of line: the common ones below are inlined where they are drawn (a
 * constant costs no call, and the generator's state stays in registers). */
__attribute__((noinline)) static int64_t draw_rare(const sim_dist *d, lk_rand_fast *g) {
  switch (d->kind) {
  case SIM_D_NORMAL: {
    /* Box-Muller; one value per draw keeps the stream simple to reason about. */
    double u1 = 1.0 - unit(g), u2 = unit(g);
    double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    double v = fabs((double)d->a + (double)d->b * z);
    return v < 9e18 ? (int64_t)v : INT64_MAX / 4;
  }
  case SIM_D_CHOICE: {
    uint32_t x = (uint32_t)lk_rand_fast_below(g, d->cum[d->n - 1]);
    int i = 0;
    while (i < d->n - 1 && x >= d->cum[i])
      i++;
    return d->v[i];
  }
  default: return d->a;
  }
}

static inline int64_t draw(const run *R, const sim_dist *d, lk_rand_fast *g) {
  switch (d->kind) {
  case SIM_D_CONST: return d->a;
  case SIM_D_EXP: {
    double v = (double)d->a * sim_exp_draw(&R->zt, g);
    return v < 9e18 ? (int64_t)v : INT64_MAX / 4;
  }
  case SIM_D_UNIFORM: return d->a + (int64_t)lk_rand_fast_below(g, (uint64_t)(d->b - d->a) + 1);
  default: return draw_rare(d, g);
  }
}

/* --- bookkeeping --------------------------------------------------------------------------------
 */

/* The current window's record for `tier`. The window follows R->now in the main loop (a
 * division per record was a measurable part of the loop). */
static inline sim_win *win(run *R, int tier) {
  return &R->cur.win[tier];
}

/* Moves R->cur on to the window of time t (>= its own; the last window takes all that follows),
 * by steps, without a division. */
static inline void window_to(run *R, int64_t t) {
  while (t >= R->cur.next && R->cur.w < R->r->n_windows - 1) {
    R->cur.w++;
    R->cur.next = lk_sat_add(R->cur.next, R->sc->window);
    R->cur.win += R->sc->n_tiers;
    R->cur.lat += (size_t)R->sc->n_tiers * SIM_LAT_BUCKETS;
  }
}

static inline int lat_bucket(int64_t ns) {
  uint64_t us = ns > 0 ? (uint64_t)ns / 1000u : 0;
  if (us == 0)
    return 0;
  int e = 63 - __builtin_clzll(us);
  unsigned frac = e >= 2 ? (unsigned)(us >> (e - 2)) & 3u : (unsigned)(us << (2 - e)) & 3u;
  int k = 4 * e + (int)frac;
  return k < SIM_LAT_BUCKETS ? k : SIM_LAT_BUCKETS - 1;
}

int64_t sim_win_latency(const sim_result *r, int w, int tier, double q) {
  const uint32_t *b = &r->lat[((size_t)w * (size_t)r->sc.n_tiers + (size_t)tier) * SIM_LAT_BUCKETS];
  uint64_t total = 0;
  for (int k = 0; k < SIM_LAT_BUCKETS; k++)
    total += b[k];
  if (total == 0)
    return 0;
  uint64_t rank = (uint64_t)ceil(q / 100.0 * (double)total);
  if (rank < 1)
    rank = 1;
  uint64_t acc = 0;
  for (int k = 0; k < SIM_LAT_BUCKETS; k++) {
    acc += b[k];
    if (acc >= rank) {
      int e = k / 4, frac = k % 4;
      return (int64_t)(((uint64_t)(5 + frac) << e) * 1000u / 4u);
    }
  }
  return 0;
}

static inline void push(run *R, int64_t t, uint32_t type, uint32_t idx, uint32_t gen) {
  sim_ev e = {t, idx, type << 24 | (gen & GEN_MASK)};
  if (sim_queue_push(&R->q, e) != 0)
    R->oom = 1;
  else if (R->q.n > R->r->peak_events)
    R->r->peak_events = (uint32_t)R->q.n;
}

/* The pool doubles: out of line, so that the common case below stays small enough to inline. */
__attribute__((noinline)) static void calls_grow(run *R) {
  uint32_t n = R->ncalls ? R->ncalls * 2 : 1024;
  size_t old = R->calls ? (size_t)((char *)R->calls - (char *)R->calls_raw) : 0;
  char *raw = realloc(R->calls_raw, (size_t)n * sizeof(call) + 64);
  if (!raw) {
    R->oom = 1;
    return;
  }
  size_t off = (64 - (uintptr_t)raw % 64) % 64;
  if (off != old) /* realloc kept the bytes, not their alignment */
    memmove(raw + off, raw + old, (size_t)R->ncalls * sizeof(call));
  R->calls_raw = raw;
  call *c = (call *)(void *)(raw + off);
  memset(c + R->ncalls, 0, (size_t)(n - R->ncalls) * sizeof *c);
  for (uint32_t i = n; i-- > R->ncalls;) {
    c[i].next = R->free_call;
    R->free_call = i;
  }
  R->calls = c;
  R->ncalls = n;
}

static inline uint32_t call_alloc(run *R) {
  if (R->free_call == SIM_NIL) {
    calls_grow(R);
    if (R->free_call == SIM_NIL)
      return SIM_NIL;
  }
  uint32_t i = R->free_call;
  R->free_call = R->calls[i].next;
  if (R->free_call != SIM_NIL) /* the next call's slot, freed who knows when: load it now */
    __builtin_prefetch(&R->calls[R->free_call]);
  if (++R->live_calls > R->r->peak_calls)
    R->r->peak_calls = R->live_calls;
  return i;
}

static uint32_t job_alloc(run *R) {
  if (R->free_job == SIM_NIL) {
    uint32_t n = R->njobs ? R->njobs * 2 : 1024;
    job *j = realloc(R->jobs, (size_t)n * sizeof *j);
    if (!j) {
      R->oom = 1;
      return SIM_NIL;
    }
    memset(j + R->njobs, 0, (size_t)(n - R->njobs) * sizeof *j);
    for (uint32_t i = n; i-- > R->njobs;) {
      j[i].next = R->free_job;
      R->free_job = i;
    }
    R->jobs = j;
    R->njobs = n;
  }
  uint32_t i = R->free_job;
  R->free_job = R->jobs[i].next;
  if (++R->live_jobs > R->r->peak_jobs)
    R->r->peak_jobs = R->live_jobs;
  return i;
}

static void job_free(run *R, uint32_t i) {
  R->jobs[i].live = 0;
  R->jobs[i].next = R->free_job;
  R->free_job = i;
  R->live_jobs--;
  R->r->jobs_ended++;
}

/* At least 1 ns, like every gap the engine schedules itself: simulated time must advance, or a
 * zero-delay scenario (an outage answering at once, a retry without backoff) would spin at one
 * instant. */
static inline int64_t net(run *R) {
  int64_t d = draw(R, &R->sc->net, &R->r_net);
  return d > 0 ? d : 1;
}

/* --- calls
 * ---------------------------------------------------------------------------------------- */

static void attempt_begin(run *R, uint32_t ci);
static void job_finish(run *R, uint32_t ji, bool ok);
static inline void job_arrive(run *R, uint32_t ji);

HOT void call_start(run *R, int site_ix, int target, uint32_t parent, int64_t parent_deadline) {
  uint32_t ci = call_alloc(R);
  if (ci == SIM_NIL)
    return;
  call *c = &R->calls[ci];
  site *s = &R->sites[site_ix];
  c->start = R->now;
  c->deadline =
      s->pol->deadline > 0 ? lk__deadline_after_at(R->now, s->pol->deadline) : LK_DEADLINE_NONE;
  if (parent_deadline < c->deadline)
    c->deadline = parent_deadline;
  c->prev_delay = 0;
  c->parent = parent;
  c->site = (uint8_t)site_ix;
  c->target = (uint8_t)target;
  c->attempt = 0;
  c->live = 1;
  c->waiting = 0;    /* the slot's last call may have ended waiting, its give-up still queued */
  c->give_up_on = 0; /* (stale by gen): this call's own must be set when it waits */
  c->ticket.cost = 0;
  R->r->calls_started++;
  R->r->tier[target].calls++;
  win(R, target)->calls++;
  if (site_ix < R->sc->n_groups)
    R->r->group[site_ix].calls++;
  if (s->budget)
    lk_budget_record_request(s->budget, R->now);
  attempt_begin(R, ci);
}

static void call_end(run *R, uint32_t ci, lk_failure kind, lk_reason reason) {
  call *c = &R->calls[ci];
  if (!c->live) {
    R->r->double_ends++;
    return;
  }
  c->live = 0;
  c->gen++; /* whatever is still in flight for it is stale now */
  int64_t now = R->now;
  sim_result *r = R->r;
  bool ok = kind == LK_F_NONE;
  sim_tier_stats *ts = &r->tier[c->target];
  sim_win *w = win(R, c->target);
  int64_t took = now - c->start;
  uint32_t ai = acc_index(took); /* once: the counters below may alias c->start for the compiler */
  if (ok) {
    ts->ok++;
    w->ok++;
    R->acc[c->target][ai]++;
    R->cur.lat[(size_t)c->target * SIM_LAT_BUCKETS + (size_t)lat_bucket(took)]++;
  } else {
    ts->failed++;
    w->failed++;
    ts->ends[kind]++;
  }
  if (c->site < R->sc->n_groups) {
    sim_group_stats *g = &r->group[c->site];
    if (now > g->last_end) /* a reply handled at once may be later than the next event */
      g->last_end = now;
    if (ok) {
      g->ok++;
      g->by_reason[LK_REASON_SUCCESS]++;
      R->acc[SIM_MAX_TIERS + c->site][ai]++;
      if (now <= c->deadline) {
        g->in_deadline++;
        w->in_deadline++;
      }
    } else {
      g->failed++;
      g->ends[kind]++;
      g->by_reason[reason]++;
    }
  }
  r->calls_ended++;
  uint32_t parent = c->parent;
  int site_ix = c->site;
  c->next = R->free_call;
  R->free_call = ci;
  R->live_calls--;
  if (parent != SIM_NIL) {
    job_finish(R, parent, ok);
  } else if (R->sc->groups[site_ix].closed) {
    const sim_group *g = &R->sc->groups[site_ix];
    int64_t think = draw(R, &g->think, &R->r_arr);
    int64_t t = lk_sat_add(now, think > 0 ? think : 1); /* a refused call takes no time */
    bool more = g->ops == 0 || R->issued[site_ix] < g->count * g->ops;
    if (more && t < R->sc->duration)
      push(R, t, EV_CLOSED, (uint32_t)site_ix, 0);
  }
}

static inline bool call_current(const run *R, uint32_t ci, uint32_t gen);

/* Drops the entries of attempts that have ended, keeping the others in order. Without it the
 * FIFO held every attempt of the last timeout's length (rate x timeout: 272 MB for 200 000
 * attempts/s under a 1 h timeout) instead of those in flight. The EV_TIMERS event in the queue
 * stays as it is: timers_due would have skipped the dropped entries there, so the run's events,
 * and its outputs, are the same. */
static void timers_compact(const run *R, tfifo *q) {
  uint32_t w = 0, mask = q->cap - 1;
  for (uint32_t i = 0; i < q->n; i++) {
    sim_ev e = q->a[(q->head + i) & mask];
    if (call_current(R, e.idx, e.tg))
      q->a[(q->head + w++) & mask] = e; /* w <= i: never over an entry still to be read */
  }
  q->n = w;
}

static void timer_add(run *R, int site_ix, int64_t t, uint32_t ci, uint32_t gen) {
  tfifo *q = &R->sites[site_ix].timers;
  bool grow = q->cap == 0;
  if (!grow && q->n == q->cap) {
    timers_compact(R, q);
    /* grown when more than half is live, so that a compaction's walk is paid for by the adds
     * that filled the half it freed */
    grow = q->n > q->cap / 2;
  }
  if (grow) {
    uint32_t cap = q->cap ? q->cap * 2 : 1024;
    sim_ev *a = malloc((size_t)cap * sizeof *a);
    if (!a) {
      R->oom = 1;
      return;
    }
    for (uint32_t i = 0; i < q->n; i++)
      a[i] = q->a[(q->head + i) & (q->cap - 1)];
    free(q->a);
    q->a = a;
    q->head = 0;
    q->cap = cap;
  }
  q->a[(q->head + q->n) & (q->cap - 1)] = (sim_ev){t, ci, gen & GEN_MASK};
  q->n++;
  if (!q->armed) {
    q->armed = true;
    push(R, t, EV_TIMERS, (uint32_t)site_ix, 0);
  }
}

static inline void attempt_end(run *R, uint32_t ci, lk_failure kind);
static inline bool call_current(const run *R, uint32_t ci, uint32_t gen);

static bool ring_add(run *R, tfifo *q, sim_ev e) {
  if (q->n == q->cap) {
    uint32_t cap = q->cap ? q->cap * 2 : 1024;
    sim_ev *a = malloc((size_t)cap * sizeof *a);
    if (!a) {
      R->oom = 1;
      return false;
    }
    for (uint32_t i = 0; i < q->n; i++)
      a[i] = q->a[(q->head + i) & (q->cap - 1)];
    free(q->a);
    q->a = a;
    q->head = 0;
    q->cap = cap;
  }
  q->a[(q->head + q->n) & (q->cap - 1)] = e;
  q->n++;
  return true;
}

static void wake_at(run *R, int site_ix, int64_t t) {
  site *s = &R->sites[site_ix];
  if (t < s->wake_at) {
    s->wake_at = t;
    push(R, t, EV_WAKE, (uint32_t)site_ix, 0);
  }
}

/* The breaker refused call ci: it waits while its deadline leaves at least 1 ms for an attempt
 * after the breaker's retry-at time, else fails. With the probes out the retry-at time is unknown
 * until one's outcome is recorded (attempt_end wakes the waiters then); a retry-at time that has
 * come already (the breaker refused anyway) is asked again 5 ms later, as the HTTP layer does. */
static void breaker_wait(run *R, uint32_t ci) {
  call *c = &R->calls[ci];
  site *s = &R->sites[c->site];
  int64_t give_up = lk_sat_sub(c->deadline, LK_MS(1));
  int64_t at = s->pol->breaker_wait ? lk_breaker_retry_at(s->breaker, R->now) : INT64_MAX;
  if (at != LK_BREAKER_RETRY_UNKNOWN && at <= R->now)
    at = lk_sat_add(R->now, LK_MS(5));
  s->refused_at = at;
  if (at >= give_up || R->now >= give_up) {
    s->refused = true;
    call_end(R, ci, LK_F_BREAKER_OPEN, LK_REASON_NOT_RETRYABLE);
    return;
  }
  if (!ring_add(R, &s->waiters, (sim_ev){give_up, ci, c->gen & GEN_MASK}))
    return;
  c->waiting = 1;
  s->waiting_n++;
  s->walked_n++;
  s->refused = true;
  if (!c->give_up_on && give_up <= R->span) {
    c->give_up_on = 1;
    tfifo *g = &s->give_ups;
    if (g->n > 0 && g->a[(g->head + g->n - 1) & (g->cap - 1)].t > give_up) {
      push(R, give_up, EV_GIVE_UP, ci, c->gen);
    } else if (ring_add(R, g, (sim_ev){give_up, ci, c->gen & GEN_MASK}) && !g->armed) {
      g->armed = true;
      push(R, give_up, EV_GIVE_UPS, (uint32_t)c->site, 0);
    }
  }
  if (at != LK_BREAKER_RETRY_UNKNOWN)
    wake_at(R, c->site, at);
}

/* The breaker refused, at this wake, the call whose entry was just requeued at the back of q (or
 * that ended): every call behind it would be refused the same way. Nothing between their asks
 * can change the breaker: a refusal changes no state that lk_breaker_acquire_permit or
 * lk_breaker_retry_at read, an admitted attempt's outcome comes in a later event, and a call that
 * ends here touches only other sites (its parent's, a closed-loop client's next call). Each would
 * then have been requeued in the same order, or have ended (breaker_wait) when its give-up time
 * is no later than the breaker's retry-at time `at` (or now, when that is unknown). So only those
 * are touched, found by the give-up times in the entries, in queue order; the rest stay where
 * they are, cold, and the refused call goes back in front of them. The stale entries this
 * leaves behind go when a wake reaches them: the queue holds the entries of the calls that came
 * since its oldest waiting call did, which waits in it anyway (its head asks first at every
 * wake, so it goes in at the next half-open period or gives up). */
static void waiters_refused(run *R, int site_ix, uint32_t left, bool requeued, int64_t at) {
  site *s = &R->sites[site_ix];
  tfifo *q = &s->waiters;
  uint32_t mask = q->cap - 1;
  if (requeued) { /* from the back to the front: where it was, ahead of those not asked */
    sim_ev e = q->a[(q->head + q->n - 1) & mask];
    q->head = (q->head - 1) & mask;
    q->a[q->head] = e;
  }
  bool known = at != LK_BREAKER_RETRY_UNKNOWN;
  int64_t bound = known && at > R->now ? at : R->now;
  bool woken = !known || s->wake_at <= at;
  for (uint32_t k = 0, i = (q->head + (requeued ? 1u : 0u)) & mask; k < left && !R->oom;
       k++, i = (i + 1) & mask) {
    sim_ev *e = &q->a[i];
    if (e->t == INT64_MIN)
      continue;
    if (e->t > bound) {
      /* Still waiting: an entry whose give-up time has not come belongs to a call that waits (a
       * call ended here is marked, and a waiting call has one entry). */
      if (!woken) {
        woken = true;
        wake_at(R, site_ix, at);
      }
      continue;
    }
    call *c = &R->calls[e->idx];
    if (!call_current(R, e->idx, e->tg) || !c->waiting)
      continue;
    c->waiting = 0;
    s->waiting_n--;
    e->t = INT64_MIN;
    call_end(R, e->idx, LK_F_BREAKER_OPEN, LK_REASON_NOT_RETRYABLE);
  }
}

#define WAKE_AHEAD 8

/* EV_WAKE: every call waiting at the site asks the breaker again, in the order they came; those
 * refused again queue behind. Once one is refused the rest are settled without asking
 * (waiters_refused), unless a limiter comes first: each ask takes one of its tokens. */
static void waiters_wake(run *R, int site_ix, int64_t t) {
  site *s = &R->sites[site_ix];
  if (t != s->wake_at)
    return; /* an earlier wake replaced it */
  s->wake_at = INT64_MAX;
  tfifo *q = &s->waiters;
  for (uint32_t k = q->n; k > 0 && !R->oom; k--) {
    if (k > WAKE_AHEAD) /* the calls are cold and their indices known: load them early */
      __builtin_prefetch(&R->calls[q->a[(q->head + WAKE_AHEAD) & (q->cap - 1)].idx]);
    sim_ev e = q->a[q->head];
    q->head = (q->head + 1) & (q->cap - 1);
    q->n--;
    if (e.t < t)
      continue; /* gave up already, or ended (INT64_MIN) */
    call *c = &R->calls[e.idx];
    if (!call_current(R, e.idx, e.tg) || !c->waiting)
      continue;
    c->waiting = 0;
    s->waiting_n--;
    s->refused = false;
    R->r->waiter_asks++;
    attempt_begin(R, e.idx);
    if (s->refused && !s->limiter) {
      waiters_refused(R, site_ix, k - 1, R->calls[e.idx].waiting, s->refused_at);
      break;
    }
  }
  s->walked_n = s->waiting_n;
}

static void waiter_give_up(run *R, uint32_t ci, uint32_t gen);

/* EV_GIVE_UPS: the due entries of the site's give-up FIFO, and an event for its first live one. */
static void give_ups_due(run *R, int site_ix) {
  tfifo *q = &R->sites[site_ix].give_ups;
  while (q->n > 0) {
    sim_ev e = q->a[q->head];
    if (call_current(R, e.idx, e.tg) && e.t > R->now)
      break;
    q->head = (q->head + 1) & (q->cap - 1);
    q->n--;
    waiter_give_up(R, e.idx, e.tg); /* ignores a stale entry; adds none */
  }
  if (q->n > 0)
    push(R, q->a[q->head].t, EV_GIVE_UPS, (uint32_t)site_ix, 0);
  else
    q->armed = false;
}

/* EV_GIVE_UP: a waiting call whose deadline leaves no time fails as the breaker made it. */
static void waiter_give_up(run *R, uint32_t ci, uint32_t gen) {
  call *c = &R->calls[ci];
  if (!call_current(R, ci, gen))
    return;
  c->give_up_on = 0;
  if (c->waiting) {
    c->waiting = 0; /* its entry in the site's queue is stale once the call has ended */
    R->sites[c->site].waiting_n--;
    call_end(R, ci, LK_F_BREAKER_OPEN, LK_REASON_NOT_RETRYABLE);
  }
}

/* EV_TIMERS: fire what is due, drop what lost its race, and wait for the first live entry. */
static void timers_due(run *R, int site_ix) {
  tfifo *q = &R->sites[site_ix].timers;
  while (q->n > 0) {
    sim_ev e = q->a[q->head];
    if (call_current(R, e.idx, e.tg)) {
      if (e.t > R->now)
        break;
      q->head = (q->head + 1) & (q->cap - 1);
      q->n--;
      attempt_end(R, e.idx, LK_F_READ_TIMEOUT); /* may add entries: always behind this one */
      continue;
    }
    q->head = (q->head + 1) & (q->cap - 1);
    q->n--;
  }
  if (q->n > 0)
    push(R, q->a[q->head].t, EV_TIMERS, (uint32_t)site_ix, 0);
  else
    q->armed = false;
}

static void attempt_begin(run *R, uint32_t ci) {
  call *c = &R->calls[ci];
  site *s = &R->sites[c->site];
  int64_t now = R->now;
  int64_t remaining = lk__deadline_remaining(c->deadline, now);
  if (remaining <= 0) {
    call_end(R, ci, LK_F_DEADLINE_EXCEEDED, LK_REASON_DEADLINE);
    return;
  }
  if (s->limiter && lk_limiter_try_acquire(s->limiter, now) != LK_OK) {
    call_end(R, ci, LK_F_RATE_LIMITED, LK_REASON_NOT_RETRYABLE);
    return;
  }
  lk_breaker_permit permit;
  if (s->breaker && lk_breaker_acquire_permit(s->breaker, now, &permit) != LK_OK) {
    if (s->pol->breaker_wait)
      breaker_wait(R, ci);
    else
      call_end(R, ci, LK_F_BREAKER_OPEN, LK_REASON_NOT_RETRYABLE);
    return;
  }
  uint32_t ji = job_alloc(R);
  if (ji == SIM_NIL)
    return;
  if (s->breaker) {
    c->permit_period = permit.period;
    c->permit_state = (uint8_t)permit.state;
  }
  c->attempt++;
  c->gen++;
  c->give_up_on = 0; /* an EV_GIVE_UP still queued is stale now */
  c->attempt_start = now;
  if (c->site < R->sc->n_groups)
    R->r->group[c->site].attempts++;
  R->r->attempts++;
  int64_t timeout = lk__attempt_timeout(s->pol->timeout, remaining);
  int64_t attempt_end_at = lk_sat_add(now, timeout);
  if (timeout == s->pol->timeout)
    timer_add(R, c->site, attempt_end_at, ci, c->gen);
  else /* cut short by the deadline: out of the FIFO's order */
    push(R, attempt_end_at, EV_TIMEOUT, ci, c->gen);
  job *j = &R->jobs[ji];
  j->call = ci;
  j->call_gen = c->gen & GEN_MASK;
  /* What the server learns with a propagated deadline is when its caller stops waiting for
   * this attempt: the deadline, or the attempt's timeout if that comes first (libraryd knows it
   * from Linkd-Deadline, or from the connection the client closes). */
  j->deadline = s->pol->propagate ? attempt_end_at : LK_DEADLINE_NONE;
  j->tier = c->target;
  j->downstream = 0;
  j->live = 1;
  R->r->jobs_started++;
  int64_t d_in = net(R);
  const sim_tier *t = &R->sc->tiers[c->target];
  if (t->kind == SIM_TIER_QUEUE && t->calls < 0) {
    /* A leaf tier's server sees nothing but its own jobs, so its timeline may run ahead of the
     * callers' by each job's inbound delay: the attempt arrives now, in the server's time, and
     * an event is saved. Its arrivals are the sends in send order (iid delays keep a Poisson
     * stream Poisson); what the server compares with its clock moves by the same shift. */
    j->shift = d_in;
    j->give_up = lk_sat_sub(attempt_end_at, d_in);
    if (j->deadline != LK_DEADLINE_NONE)
      j->deadline = j->give_up;
    job_arrive(R, ji);
    return;
  }
  j->shift = 0;
  j->give_up = attempt_end_at;
  push(R, lk_sat_add(now, d_in), EV_ARRIVE, ji, 0);
}

/* The attempt of call ci ended with `kind` (LK_F_NONE = success) at R->now. */
HOT void attempt_end(run *R, uint32_t ci, lk_failure kind) {
  call *c = &R->calls[ci];
  site *s = &R->sites[c->site];
  int64_t now = R->now;
  c->gen++;
  if (s->breaker) {
    lk_breaker_permit permit = {c->permit_period, (lk_breaker_state)c->permit_state};
    lk_breaker_record_permit(s->breaker, &permit, now, now - c->attempt_start, kind);
    if (s->walked_n > 0) { /* a probe's outcome may say when the breaker admits again */
      int64_t at = lk_breaker_retry_at(s->breaker, now);
      if (at != LK_BREAKER_RETRY_UNKNOWN)
        wake_at(R, c->site, at > now ? at : now);
    }
  }
  if (kind == LK_F_NONE) {
    if (s->budget)
      lk_budget_record_success_ticket(s->budget, now, &c->ticket);
    call_end(R, ci, LK_F_NONE, LK_REASON_SUCCESS);
    return;
  }
  if (s->budget)
    lk_budget_record_failure(s->budget, now);
  lk_attempt a = {.number = c->attempt,
                  .method = "GET",
                  .idempotency_key = false,
                  .request_fully_sent = true,
                  .failure = kind,
                  .retry_after = -1,
                  .prev_delay = c->prev_delay};
  lk_decision d;
  int64_t remaining = lk__deadline_remaining(c->deadline, now);
  if (lk_retry_decide(&s->retry, &a, remaining, &R->r_pol.base, &d) != LK_OK || !d.retry) {
    call_end(R, ci, kind, d.reason);
    return;
  }
  if (s->budget && lk_budget_acquire_retry_ticket(s->budget, now, kind == LK_F_READ_TIMEOUT,
                                                  &c->ticket) != LK_OK) {
    call_end(R, ci, kind, LK_REASON_BUDGET);
    return;
  }
  c->prev_delay = d.delay;
  push(R, lk_sat_add(now, d.delay), EV_SEND, ci, c->gen);
}

static inline bool call_current(const run *R, uint32_t ci, uint32_t gen) {
  const call *c = &R->calls[ci];
  return c->live && (c->gen & GEN_MASK) == gen;
}

/* --- servers
 * -------------------------------------------------------------------------------------- */

/* Whether tier is out at time t of the callers' clock, and how it answers (*fail). */
static bool outage_at(const run *R, int tier, int64_t t, lk_failure *fail) {
  bool on = false;
  for (int k = 0; k < R->n_out[tier]; k++) {
    const sim_trigger *tr = &R->sc->triggers[R->out_ix[tier][k]];
    if (t >= tr->from && t < tr->to) {
      on = true;
      *fail = tr->fail;
    }
  }
  return on;
}

static double slow_at(const run *R, int tier, int64_t t) {
  double f = 1.0;
  for (int k = 0; k < R->n_slow[tier]; k++) {
    const sim_trigger *tr = &R->sc->triggers[R->slow_ix[tier][k]];
    if (t >= tr->from && t < tr->to)
      f *= tr->factor;
  }
  return f;
}

static void reply(run *R, const job *j, lk_failure kind) {
  push(R, lk_sat_add(R->now, lk_sat_add(j->shift, net(R))), EV_REPLY + (uint32_t)kind, j->call,
       j->call_gen);
}

/* Starts the attempt's work, or (drop_expired=short) drops it when its caller's remaining time is
 * shorter than the work: libraryd's deadline-aware dequeue answers 504 without working. */
HOT void service_start(run *R, uint32_t ji) {
  job *j = &R->jobs[ji];
  const sim_tier *t = &R->sc->tiers[j->tier];
  server *sv = &R->srv[j->tier][j->server];
  double slow = j->shift > 0 ? slow_at(R, j->tier, lk_sat_add(R->now, j->shift)) : R->slow[j->tier];
  double d = (double)draw(R, &t->service, &R->r_svc) * slow;
  int64_t svc = d < 9e18 ? (int64_t)d : INT64_MAX / 4;
  if (t->drop_short && lk_sat_sub(j->deadline, R->now) < svc) {
    R->r->tier[j->tier].dropped++;
    win(R, j->tier)->dropped++;
    reply(R, j, LK_F_HTTP_504);
    job_free(R, ji);
    return;
  }
  sv->busy++;
  j->svc_start = R->now;
  j->live = 2; /* holds a worker: counted busy up to the run's end if it outlives it */
  push(R, lk_sat_add(R->now, svc), EV_DONE, ji, 0);
}

/* Takes queued attempts while a worker is free, dropping expired ones if the tier does. */
static void dispatch(run *R, int tier, int sx) {
  server *sv = &R->srv[tier][sx];
  const sim_tier *t = &R->sc->tiers[tier];
  while (sv->busy < sv->cap && sv->qlen > 0) {
    uint32_t ji = sv->qhead;
    job *j = &R->jobs[ji];
    sv->qhead = j->next;
    if (--sv->qlen == 0)
      sv->qtail = SIM_NIL;
    R->queued[tier]--;
    if (t->drop_expired && j->deadline <= R->now) {
      R->r->tier[tier].dropped++;
      win(R, tier)->dropped++;
      job_free(R, ji); /* the caller has given up already: nothing to answer */
      continue;
    }
    service_start(R, ji);
  }
}

HOT void job_arrive(run *R, uint32_t ji) {
  job *j = &R->jobs[ji];
  int tier = j->tier;
  const sim_tier *t = &R->sc->tiers[tier];
  sim_win *w = win(R, tier);
  R->r->tier[tier].attempts++;
  w->attempts++;
  uint32_t sx = R->rr[tier]; /* round robin, without a division per arrival */
  R->rr[tier] = sx + 1 == (uint32_t)t->servers ? 0 : sx + 1;
  j->server = (uint16_t)sx;
  server *sv = &R->srv[tier][sx];
  lk_failure fail = R->outage[tier];
  if (j->shift > 0 ? outage_at(R, tier, lk_sat_add(R->now, j->shift), &fail) : R->outage_on[tier]) {
    R->r->tier[tier].rejected++;
    w->rejected++;
    if (fail != LK_F_NONE)
      reply(R, j, fail);
    job_free(R, ji);
    return;
  }
  if (t->kind == SIM_TIER_OCC) {
    /* Brooker's OCC row: this attempt reads the version, its conditional write comes back one
     * round trip later and succeeds only if nobody wrote in between. */
    j->version = sv->version;
    push(R, lk_sat_add(R->now, lk_sat_add(net(R), net(R))), EV_OCC_WRITE, ji, 0);
    return;
  }
  if (sv->busy < sv->cap && sv->qlen == 0) {
    service_start(R, ji);
    return;
  }
  if ((int64_t)sv->qlen >= t->queue) {
    R->r->tier[tier].rejected++;
    w->rejected++;
    reply(R, j, LK_F_HTTP_503);
    job_free(R, ji);
    return;
  }
  if (t->discipline == SIM_Q_FIFO) {
    j->next = SIM_NIL;
    if (sv->qtail == SIM_NIL)
      sv->qhead = ji;
    else
      R->jobs[sv->qtail].next = ji;
    sv->qtail = ji;
  } else {
    j->next = sv->qhead;
    sv->qhead = ji;
    if (sv->qtail == SIM_NIL)
      sv->qtail = ji;
  }
  sv->qlen++;
  if (++R->queued[tier] > w->queue_max)
    w->queue_max = R->queued[tier];
  if (R->queued[tier] > R->r->tier[tier].queue_max)
    R->r->tier[tier].queue_max = R->queued[tier];
}

static void occ_write(run *R, uint32_t ji) {
  job *j = &R->jobs[ji];
  server *sv = &R->srv[j->tier][j->server];
  sim_tier_stats *ts = &R->r->tier[j->tier];
  ts->done++;
  win(R, j->tier)->done++;
  bool ok = j->version == sv->version;
  if (ok)
    sv->version++;
  reply(R, j, ok ? LK_F_NONE : LK_F_CLIENT_4XX); /* 409 Conflict */
  job_free(R, ji);
}

static void job_done(run *R, uint32_t ji) {
  job *j = &R->jobs[ji];
  const sim_tier *t = &R->sc->tiers[j->tier];
  if (t->calls >= 0 && !j->downstream) {
    j->downstream = 1; /* the worker stays busy while it waits for the tier below */
    call_start(R, R->sc->n_groups + j->tier, t->calls, ji, j->deadline);
    return;
  }
  job_finish(R, ji, true);
}

/* A success for a client's call that surely comes back before the attempt's timeout ends the
 * call here, at the reply's time, instead of through an EV_REPLY: nothing else can end the call
 * meanwhile (one attempt at a time, its timeout later), and what its end touches is the caller's
 * own counters plus its budget and breaker, which take the time as a parameter and are built for
 * callers whose times interleave (threads). A job below a tier keeps its event: its parent's
 * worker must stay busy until the reply. */
static bool reply_at_once(run *R, const job *j) {
  call *c = &R->calls[j->call];
  if (c->parent != SIM_NIL)
    return false;
  int64_t at = lk_sat_add(R->now, lk_sat_add(j->shift, net(R)));
  if (at >= lk_sat_add(j->give_up, j->shift) || at > R->span) {
    push(R, at, EV_REPLY + (uint32_t)LK_F_NONE, j->call, j->call_gen);
    return true;
  }
  int64_t now = R->now;
  R->now = at;
  if (at < R->cur.next) { /* the same window: nearly always */
    attempt_end(R, j->call, LK_F_NONE);
  } else {
    wpos cur = R->cur;
    window_to(R, at);
    attempt_end(R, j->call, LK_F_NONE);
    R->cur = cur;
  }
  if (at > R->last_fold)
    R->last_fold = at;
  R->now = now;
  return true;
}

static void job_finish(run *R, uint32_t ji, bool ok) {
  job *j = &R->jobs[ji];
  int tier = j->tier;
  sim_tier_stats *ts = &R->r->tier[tier];
  sim_win *w = win(R, tier);
  uint64_t spent = (uint64_t)(R->now - j->svc_start);
  ts->done++;
  w->done++;
  ts->busy_ns += spent;
  /* Its caller gave up meanwhile: the call moved on, or (a job in a server's time) the moment
   * its attempt times out has come on the caller's clock. */
  if (!call_current(R, j->call, j->call_gen) || (j->shift > 0 && R->now >= j->give_up)) {
    ts->wasted++;
    w->wasted++;
    ts->wasted_ns += spent;
  } else if (!ok || !reply_at_once(R, j)) {
    reply(R, j, ok ? LK_F_NONE : LK_F_HTTP_503);
  }
  uint16_t sx = j->server;
  server *sv = &R->srv[tier][sx];
  sv->busy--;
  job_free(R, ji);
  if (sv->qlen > 0) /* most ends find no queue: no call */
    dispatch(R, tier, sx);
}

/* --- triggers
 * ------------------------------------------------------------------------------------- */

static void trigger(run *R, int ti, bool on) {
  const sim_trigger *t = &R->sc->triggers[ti];
  switch (t->kind) {
  case SIM_TRIG_OUTAGE:
    R->outage_on[t->tier] += on ? 1 : -1;
    R->outage[t->tier] = t->fail;
    break;
  case SIM_TRIG_SLOWDOWN:
    R->slow[t->tier] = on ? R->slow[t->tier] * t->factor : R->slow[t->tier] / t->factor;
    break;
  case SIM_TRIG_CAPACITY: {
    const sim_tier *tier = &R->sc->tiers[t->tier];
    for (int s = 0; s < tier->servers; s++) {
      R->srv[t->tier][s].cap = on ? t->workers : tier->workers;
      dispatch(R, t->tier, s);
    }
    break;
  }
  case SIM_TRIG_BURST:
    R->burst[t->group] = on ? R->burst[t->group] * t->factor : R->burst[t->group] / t->factor;
    break;
  }
}

/* --- setup and the loop ----------------------------------------------------------------------- */

static int site_init(run *R, site *s, const sim_policy *p, const char **why) {
  s->pol = p;
  if (lk_retry_policy_init(&s->retry, &p->retry, why) != LK_OK)
    return LK_ECONFIG;
  int rc = LK_OK;
  switch (p->budget) {
  case SIM_BUDGET_NONE: break;
  case SIM_BUDGET_RATIO: rc = lk_budget_new_ratio(&p->ratio, &s->budget, why); break;
  case SIM_BUDGET_TOKEN: rc = lk_budget_new_token(&p->token, &s->budget, why); break;
  case SIM_BUDGET_QUOTA: rc = lk_budget_new_quota(&p->quota, &s->budget, why); break;
  }
  if (rc != LK_OK)
    return rc;
  lk_budget_set_single_thread(s->budget); /* a run is one thread's: no locked instructions */
  if (p->breaker) {
    lk_breaker_config bc = p->breaker_cfg;
    bc.rng = &R->r_brk.base;
    bc.on_transition = NULL;
    if ((rc = lk_breaker_new(&bc, &s->breaker, why)) != LK_OK)
      return rc;
    lk_breaker_set_single_thread(s->breaker);
  }
  if (p->limiter && (rc = lk_limiter_new(&p->limiter_cfg, &s->limiter, why)) != LK_OK)
    return rc;
  return LK_OK;
}

static void run_free(run *R) {
  for (int i = 0; i < SIM_MAX_GROUPS + SIM_MAX_TIERS; i++) {
    free(R->sites[i].timers.a);
    free(R->sites[i].waiters.a);
    free(R->sites[i].give_ups.a);
    lk_budget_free(R->sites[i].budget);
    lk_breaker_free(R->sites[i].breaker);
    lk_limiter_free(R->sites[i].limiter);
  }
  for (int t = 0; t < SIM_MAX_TIERS; t++)
    free(R->srv[t]);
  for (int i = 0; i < SIM_MAX_TIERS + SIM_MAX_GROUPS; i++)
    free(R->acc[i]);
  sim_queue_free(&R->q);
  free(R->calls_raw);
  free(R->jobs);
}

static int64_t open_gap(run *R, int g) {
  const sim_group *gr = &R->sc->groups[g];
  double rate = gr->rate * R->burst[g];
  double mean = 1e9 / rate;
  double gap = gr->poisson ? mean * sim_exp_draw(&R->zt, &R->r_arr) : mean;
  return gap < 1 ? 1 : gap < 9e18 ? (int64_t)gap : INT64_MAX / 4;
}

static void open_next(run *R) {
  if (R->sc->n_groups == 1) { /* the usual scenario */
    R->open_min = R->open_at[0];
    R->open_g = 0;
    return;
  }
  R->open_min = INT64_MAX;
  for (int g = 0; g < R->sc->n_groups; g++)
    if (R->open_at[g] < R->open_min) {
      R->open_min = R->open_at[g];
      R->open_g = g;
    }
}

/* Group g's arrival at R->now: its call starts and its next arrival is drawn. */
static void open_arrival(run *R, int g) {
  call_start(R, g, R->sc->groups[g].target, SIM_NIL, LK_DEADLINE_NONE);
  int64_t t = lk_sat_add(R->now, open_gap(R, g));
  R->open_at[g] = t < R->sc->duration ? t : INT64_MAX;
  open_next(R);
}

HOT void dispatch_event(run *R, const sim_ev *e) {
  uint32_t type = e->tg >> 24, gen = e->tg & GEN_MASK;
  switch (type) {
  case EV_CLOSED: {
    int g = (int)e->idx;
    R->issued[g]++;
    call_start(R, g, R->sc->groups[g].target, SIM_NIL, LK_DEADLINE_NONE);
    break;
  }
  case EV_SEND:
    if (call_current(R, e->idx, gen))
      attempt_begin(R, e->idx);
    break;
  case EV_ARRIVE: job_arrive(R, e->idx); break;
  case EV_DONE: job_done(R, e->idx); break;
  case EV_OCC_WRITE: occ_write(R, e->idx); break;
  case EV_TIMEOUT:
    if (call_current(R, e->idx, gen))
      attempt_end(R, e->idx, LK_F_READ_TIMEOUT);
    break;
  case EV_TIMERS: timers_due(R, (int)e->idx); break;
  case EV_WAKE: waiters_wake(R, (int)e->idx, e->t); break;
  case EV_GIVE_UP: waiter_give_up(R, e->idx, gen); break;
  case EV_GIVE_UPS: give_ups_due(R, (int)e->idx); break;
  case EV_TRIG_ON: trigger(R, (int)e->idx, true); break;
  case EV_TRIG_OFF: trigger(R, (int)e->idx, false); break;
  default:
    if (type >= EV_REPLY && call_current(R, e->idx, gen))
      attempt_end(R, e->idx, (lk_failure)(type - EV_REPLY));
    break;
  }
}

int sim_run(const sim_scenario *sc, sim_result *out, const char **why) {
  static const char *const nomem = "out of memory";
  memset(out, 0, sizeof *out);
  out->sc = *sc;
  if (why)
    *why = NULL;
  run R;
  memset(&R, 0, sizeof R);
  R.sc = &out->sc;
  R.r = out;
  R.free_call = R.free_job = SIM_NIL;
  if (sim_queue_init(&R.q) != 0) {
    if (why)
      *why = nomem;
    return LK_ENOMEM;
  }
  R.q.heap_only = sc->plain_heap;
  R.cur.next = sc->window;
  for (int i = 0; i < SIM_MAX_GROUPS + SIM_MAX_TIERS; i++)
    R.sites[i].wake_at = INT64_MAX;
  for (int g = 0; g < SIM_MAX_GROUPS; g++)
    R.open_at[g] = INT64_MAX;
  sim_exp_init(&R.zt);
  uint64_t seed = sc->seed;
  lk_rand_fast_seeded(&R.r_arr, seed ^ 0x61727269766c7321ull);
  lk_rand_fast_seeded(&R.r_svc, seed ^ 0x7365727669636521ull);
  lk_rand_fast_seeded(&R.r_net, seed ^ 0x6e6574776f726b21ull);
  lk_rand_fast_seeded(&R.r_pol, seed ^ 0x706f6c6963792121ull);
  lk_rand_fast_seeded(&R.r_brk, seed ^ 0x627265616b657221ull);
  int64_t span = lk_sat_add(sc->duration, sc->drain);
  R.span = span;
  int64_t nw = span / sc->window + 1;
  if (nw > SIM_MAX_WINDOWS)
    nw = SIM_MAX_WINDOWS;
  out->n_windows = (int)nw;
  size_t cells = (size_t)nw * (size_t)sc->n_tiers;
  out->win = calloc(cells, sizeof *out->win);
  out->lat = calloc(cells * SIM_LAT_BUCKETS, sizeof *out->lat);
  int rc = LK_OK;
  if (!out->win || !out->lat)
    goto oom;
  R.cur.win = out->win;
  R.cur.lat = out->lat;
  for (int t = 0; t < sc->n_tiers; t++) {
    const sim_tier *tier = &sc->tiers[t];
    R.srv[t] = calloc((size_t)tier->servers, sizeof(server));
    out->tier[t].latency = lk_hist_new(1000, LK_SEC(3600));
    R.acc[t] = calloc(ACC_SLOTS, sizeof(uint64_t));
    if (!R.srv[t] || !out->tier[t].latency || !R.acc[t])
      goto oom;
    for (int s = 0; s < tier->servers; s++) {
      R.srv[t][s].cap = tier->workers;
      R.srv[t][s].qhead = R.srv[t][s].qtail = SIM_NIL;
    }
    R.slow[t] = 1.0;
    if (tier->calls >= 0 &&
        (rc = site_init(&R, &R.sites[sc->n_groups + t], &sc->policies[tier->policy], why)) != 0)
      goto fail;
  }
  for (int g = 0; g < sc->n_groups; g++) {
    const sim_group *gr = &sc->groups[g];
    out->group[g].latency = lk_hist_new(1000, LK_SEC(3600));
    R.acc[SIM_MAX_TIERS + g] = calloc(ACC_SLOTS, sizeof(uint64_t));
    if (!out->group[g].latency || !R.acc[SIM_MAX_TIERS + g])
      goto oom;
    if ((rc = site_init(&R, &R.sites[g], &sc->policies[gr->policy], why)) != LK_OK)
      goto fail;
    R.burst[g] = 1.0;
    if (gr->closed) {
      for (int64_t i = 0; i < gr->count; i++)
        push(&R, draw(&R, &gr->think, &R.r_arr), EV_CLOSED, (uint32_t)g, 0);
    } else if (gr->rate > 0) {
      R.open_at[g] = 0;
    }
  }
  for (int t = 0; t < sc->n_triggers; t++) {
    const sim_trigger *tr = &sc->triggers[t];
    if (tr->kind == SIM_TRIG_OUTAGE)
      R.out_ix[tr->tier][R.n_out[tr->tier]++] = (uint8_t)t;
    else if (tr->kind == SIM_TRIG_SLOWDOWN)
      R.slow_ix[tr->tier][R.n_slow[tr->tier]++] = (uint8_t)t;
    push(&R, sc->triggers[t].from, EV_TRIG_ON, (uint32_t)t, 0);
    push(&R, sc->triggers[t].to, EV_TRIG_OFF, (uint32_t)t, 0);
  }
  if (R.oom)
    goto oom;
  open_next(&R);
  for (;;) {
    int got = sim_queue_fill(&R.q);
    if (got < 0)
      goto oom;
    int64_t tq = got ? sim_queue_top_time(&R.q) : INT64_MAX;
    if (R.open_min <= tq) { /* an arrival goes before the queue's events of its time */
      if (R.open_min > span)
        break; /* INT64_MAX too: nothing left anywhere */
      R.now = R.open_min;
      window_to(&R, R.now);
      out->events++;
      open_arrival(&R, R.open_g);
    } else {
      if (tq > span)
        break;
      sim_ev e;
      sim_queue_take(&R.q, &e);
      R.now = e.t;
      window_to(&R, R.now);
      out->events++;
      dispatch_event(&R, &e);
    }
    if (__builtin_expect(R.oom, 0))
      goto oom;
  }
  out->end_time = R.now > R.last_fold ? R.now : R.last_fold;
  /* Workers still busy when the run stops (work that would end after duration + drain, or a
   * worker waiting for its call below) were busy up to that moment: the run watched them until
   * the end of the drain. busy_ns counts the worker time within [0, busy_end], whether or not
   * the work ended in it. A pass over the pool, once, out of the loop. */
  out->busy_end = out->end_time;
  for (uint32_t i = 0; i < R.njobs; i++)
    if (R.jobs[i].live == 2) {
      out->busy_end = span;
      break;
    }
  for (uint32_t i = 0; i < R.njobs; i++) {
    const job *j = &R.jobs[i];
    if (j->live == 2 && j->svc_start < out->busy_end)
      out->tier[j->tier].busy_ns += (uint64_t)(out->busy_end - j->svc_start);
  }
  for (int t = 0; t < sc->n_tiers; t++)
    acc_flush(R.acc[t], out->tier[t].latency);
  for (int g = 0; g < sc->n_groups; g++)
    acc_flush(R.acc[SIM_MAX_TIERS + g], out->group[g].latency);
  out->calls_unfinished = R.live_calls;
  out->peak_bytes =
      sim_queue_bytes(&R.q) + (size_t)R.ncalls * sizeof(call) + (size_t)R.njobs * sizeof(job);
  for (int i = 0; i < SIM_MAX_GROUPS + SIM_MAX_TIERS; i++)
    out->peak_bytes +=
        (size_t)(R.sites[i].timers.cap + R.sites[i].waiters.cap + R.sites[i].give_ups.cap) *
        sizeof(sim_ev);
  run_free(&R);
  return LK_OK;
oom:
  rc = LK_ENOMEM;
fail:
  if (rc == LK_ENOMEM && why && !*why)
    *why = nomem; /* also when a core constructor (site_init) had no memory */
  run_free(&R);
  sim_result_free(out);
  return rc;
}

void sim_result_free(sim_result *r) {
  if (!r)
    return;
  free(r->win);
  free(r->lat);
  for (int t = 0; t < SIM_MAX_TIERS; t++)
    lk_hist_free(r->tier[t].latency);
  for (int g = 0; g < SIM_MAX_GROUPS; g++)
    lk_hist_free(r->group[g].latency);
  memset(r, 0, sizeof *r);
}

/* Client goodput of window w: successes within the deadline at the tiers client groups call
 * (each such tier once, however many groups call it). */
static double client_goodput(const sim_result *r, int w) {
  const sim_scenario *sc = &r->sc;
  double n = 0;
  for (int g = 0; g < sc->n_groups; g++) {
    bool seen = false;
    for (int h = 0; h < g; h++)
      seen |= sc->groups[h].target == sc->groups[g].target;
    if (!seen)
      n += sim_win_at(r, w, sc->groups[g].target)->in_deadline;
  }
  return n;
}

int64_t sim_recovery(const sim_result *r, int ti) {
  const sim_scenario *sc = &r->sc;
  const sim_trigger *t = &sc->triggers[ti];
  int w0 = (int)(t->from / sc->window), w1 = (int)(t->to / sc->window);
  int wend = (int)(sc->duration / sc->window);
  if (wend > r->n_windows)
    wend = r->n_windows;
  if (w0 > wend)
    w0 = wend;
  int span = (int)(LK_MS(500) / sc->window);
  if (span < 1)
    span = 1;
  if (w1 + span > wend) /* not one window of the arrivals left after it to measure */
    return SIM_RECOVERY_TOO_LATE;
  int skip = w0 / 5; /* leave out the warm-up */
  double before = 0;
  int nb = 0;
  for (int w = skip; w < w0; w++, nb++)
    before += client_goodput(r, w);
  if (nb == 0 || before <= 0)
    return SIM_RECOVERY_NO_BASELINE;
  before /= nb;
  for (int w = w1; w + span <= wend; w++) {
    double sum = 0;
    for (int k = w; k < w + span; k++)
      sum += client_goodput(r, k);
    if (sum / span >= 0.9 * before) {
      int64_t at = (int64_t)w * sc->window - t->to;
      return at > 0 ? at : 0;
    }
  }
  return SIM_RECOVERY_NEVER;
}
