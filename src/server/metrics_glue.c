/* SPDX-License-Identifier: MIT */
/* metrics_glue.c: libraryd's series in the core's metrics registry (GET /metrics).
 *
 * Per-request series (requests by route, method and status; latency by route) are registered
 * lazily and cached in a fixed table, so the hot path is an atomic load and an atomic add. The
 * server's own atomic counters are mirrored into registry counters when /metrics is rendered.
 */
#include "server_impl.h"

#include <linkd/error.h>
#include <linkd/metrics.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_ROUTES (RT_LOAN + 1)
#define N_METHODS 6
#define N_KNOWN 18                /* statuses with a code label of their own */
#define N_CODES (N_KNOWN + 5 + 1) /* + "1xx".."5xx" for any other status, + "none" */

static const char *const route_names[N_ROUTES] = {
    [RT_NONE] = "other",       [RT_HEALTHZ] = "/healthz", [RT_METRICS] = "/metrics",
    [RT_BOOKS] = "/books",     [RT_BOOK] = "/books/{id}", [RT_LOANS] = "/books/{id}/loans",
    [RT_LOAN] = "/loans/{id}",
};
static const char *const method_names[N_METHODS] = {"GET", "HEAD",   "POST",
                                                    "PUT", "DELETE", "OTHER"};
/* What libraryd answers itself, and the usual injected statuses. Any other status is counted
 * under its class ("4xx"), so that code=~"5.." still finds every server error, and the label
 * stays bounded (a fault rule may inject any status from 400 to 599). */
static const int codes[N_KNOWN] = {200, 201, 204, 400, 404, 405, 408, 409, 413,
                                   414, 415, 422, 429, 500, 501, 502, 503, 504};
static const char *const classes[5] = {"1xx", "2xx", "3xx", "4xx", "5xx"};

typedef struct mirror {
  const char *name, *help, *lname, *lvalue;
  size_t offset; /* of the atomic in lk_server_stats */
  lk_counter *c;
} mirror;

struct lk_server_metrics {
  lk_metrics *reg;
  pthread_mutex_t mu; /* registration of lazy series and mirroring */
  _Atomic(lk_counter *) requests[N_ROUTES][N_METHODS][N_CODES];
  lk_hist *latency[N_ROUTES];
  lk_gauge *active, *inflight_keys, *queue_depth, *workers;
  lk_hist *queue_wait;
  lk_counter *busy;    /* seconds, scaled from ns */
  lk_counter *commits; /* the store's commits and writes: writes / commits is the mean */
  lk_counter *writes;  /* group-commit size */
  mirror mirrors[16];
};

#define STAT(field) offsetof(lk_server_stats, field)
#define DROPPED_HELP "Requests answered 503/504 by the admission queue without running"
#define WORK_HELP                                                                                  \
  "Requests run by a worker, by whether the caller was still waiting when the work ended"

int server_metrics_init(lk_server *s) {
  struct lk_server_metrics *m = calloc(1, sizeof *m);
  if (!m)
    return LK_ENOMEM;
  m->reg = lk_metrics_new();
  if (!m->reg) {
    free(m);
    return LK_ENOMEM;
  }
  pthread_mutex_init(&m->mu, NULL);
  for (int r = 0; r < N_ROUTES; r++)
    m->latency[r] = lk_metrics_histogram(m->reg, "libraryd_request_duration_seconds",
                                         "Time from the request head to the end of the response",
                                         (const char *const[]){"route", route_names[r], NULL});
  m->active = lk_metrics_gauge(m->reg, "libraryd_requests_in_flight",
                               "Requests received and not yet completed", NULL);
  m->inflight_keys = lk_metrics_gauge(m->reg, "libraryd_idempotency_keys_executing",
                                      "Idempotency-Keys whose first request is executing", NULL);
  m->queue_depth =
      lk_metrics_gauge(m->reg, "libraryd_queue_depth", "Requests in the admission queue", NULL);
  m->workers = lk_metrics_gauge(m->reg, "libraryd_workers", "Worker threads", NULL);
  lk_gauge_set(m->workers, (int64_t)s->cfg.workers);
  m->queue_wait = lk_metrics_histogram(m->reg, "libraryd_queue_wait_seconds",
                                       "Time from admission to a worker taking the request", NULL);
  m->busy = lk_metrics_counter_scaled(m->reg, "libraryd_worker_busy_seconds_total",
                                      "Time the workers spent on requests, summed over workers",
                                      NULL, 1e9);
  m->commits = lk_metrics_counter(m->reg, "libraryd_store_commits_total",
                                  "Write transactions committed or attempted (SQLite: one fsync "
                                  "each with --sync full)",
                                  NULL);
  m->writes = lk_metrics_counter(m->reg, "libraryd_store_writes_total",
                                 "Writes that reached the store's writer (several share a commit "
                                 "with group commit)",
                                 NULL);
  const mirror defs[] = {
      {"libraryd_idempotent_replays_total", "Keyed requests answered with the stored result", NULL,
       NULL, STAT(replays), NULL},
      {"libraryd_idempotency_rejections_total", "Keyed requests rejected", "reason", "in_progress",
       STAT(key_conflicts), NULL},
      {"libraryd_idempotency_rejections_total", "Keyed requests rejected", "reason",
       "payload_mismatch", STAT(key_mismatches), NULL},
      {"libraryd_idempotency_rejections_total", "Keyed requests rejected", "reason", "key_missing",
       STAT(key_missing), NULL},
      {"libraryd_deadline_exceeded_total", "Requests answered 504 because their deadline passed",
       "when", "on_arrival", STAT(deadline_expired_on_arrival), NULL},
      {"libraryd_deadline_exceeded_total", "Requests answered 504 because their deadline passed",
       "when", "in_flight", STAT(deadline_expired_in_flight), NULL},
      {"libraryd_faults_injected_total", "Requests that got an injected fault or latency", NULL,
       NULL, STAT(faults_injected), NULL},
      {"libraryd_loans_applied_total", "Loans committed (stock decremented)", NULL, NULL,
       STAT(loans_applied), NULL},
      {"libraryd_write_errors_total", "Writes that failed in the store", NULL, NULL,
       STAT(write_errors), NULL},
      {"libraryd_dropped_total", DROPPED_HELP, "cause", "queue_full", STAT(dropped_queue_full),
       NULL},
      {"libraryd_dropped_total", DROPPED_HELP, "cause", "deadline_expired",
       STAT(dropped_deadline_expired), NULL},
      {"libraryd_dropped_total", DROPPED_HELP, "cause", "deadline_too_short",
       STAT(dropped_deadline_too_short), NULL},
      {"libraryd_dropped_total", DROPPED_HELP, "cause", "codel", STAT(dropped_codel), NULL},
      {"libraryd_work_total", WORK_HELP, "outcome", "done", STAT(work_done), NULL},
      {"libraryd_work_total", WORK_HELP, "outcome", "abandoned", STAT(work_abandoned), NULL},
  };
  _Static_assert(sizeof defs / sizeof defs[0] <= sizeof m->mirrors / sizeof m->mirrors[0],
                 "mirror table too small");
  for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
    m->mirrors[i] = defs[i];
    const char *const labels[] = {defs[i].lname, defs[i].lvalue, NULL};
    m->mirrors[i].c =
        lk_metrics_counter(m->reg, defs[i].name, defs[i].help, defs[i].lname ? labels : NULL);
  }
  s->metrics = m;
  return LK_OK;
}

void server_metrics_free(lk_server *s) {
  struct lk_server_metrics *m = s->metrics;
  if (!m)
    return;
  lk_metrics_free(m->reg);
  pthread_mutex_destroy(&m->mu);
  free(m);
  s->metrics = NULL;
}

static int method_index(const char *method) {
  for (int i = 0; i < N_METHODS - 1; i++)
    if (!strcmp(method, method_names[i]))
      return i;
  return N_METHODS - 1;
}

static int code_index(int status) {
  for (int i = 0; i < N_KNOWN; i++)
    if (codes[i] == status)
      return i;
  if (status >= 100 && status <= 599)
    return N_KNOWN + status / 100 - 1;
  return N_CODES - 1; /* "none": no response (status 0) */
}

void server_metrics_request(lk_server *s, const req *r, int64_t dur_ns) {
  struct lk_server_metrics *m = s->metrics;
  if (!m)
    return;
  int ri = (int)r->route, mi = method_index(r->method), ci = code_index(r->status);
  lk_counter *c = atomic_load_explicit(&m->requests[ri][mi][ci], memory_order_acquire);
  if (!c) {
    char code[16];
    if (ci == N_CODES - 1)
      snprintf(code, sizeof code, "none");
    else if (ci >= N_KNOWN)
      snprintf(code, sizeof code, "%s", classes[ci - N_KNOWN]);
    else
      snprintf(code, sizeof code, "%d", codes[ci]);
    pthread_mutex_lock(&m->mu);
    c = lk_metrics_counter(m->reg, "libraryd_requests_total",
                           "Requests by route, method and response status (none: the "
                           "connection was closed without a response)",
                           (const char *const[]){"route", route_names[ri], "method",
                                                 method_names[mi], "code", code, NULL});
    atomic_store_explicit(&m->requests[ri][mi][ci], c, memory_order_release);
    pthread_mutex_unlock(&m->mu);
  }
  lk_counter_add(c, 1);
  lk_hist_record(m->latency[ri], dur_ns);
}

void server_metrics_queue_wait(lk_server *s, int64_t ns) {
  if (s->metrics)
    lk_hist_record(s->metrics->queue_wait, ns > 0 ? ns : 0);
}

/* Raises registry counter c to `now` (never lowers it). Called with mu held: two scrapes at once
 * would otherwise both add the same difference. */
static void mirror_to(lk_counter *c, uint64_t now) {
  uint64_t had = lk_counter_value(c);
  if (now > had)
    lk_counter_add(c, now - had);
}

bool server_metrics_render(lk_server *s, lk_resp *out) {
  struct lk_server_metrics *m = s->metrics;
  if (!m)
    return false;
  /* Every source is read before mu is taken, so that mu is held only for the counter updates:
   * a request registering its first series of a kind (server_metrics_request) never waits for
   * what a scrape reads. A scrape that read older values than another's only finds its
   * counters already as high and adds nothing. */
  enum { N_MIRRORS = sizeof m->mirrors / sizeof m->mirrors[0] };
  uint64_t now[N_MIRRORS];
  for (size_t i = 0; i < N_MIRRORS; i++) {
    const atomic_uint_fast64_t *src =
        (const atomic_uint_fast64_t *)((const char *)&s->stats + m->mirrors[i].offset);
    now[i] = m->mirrors[i].c ? atomic_load(src) : 0;
  }
  uint64_t busy = atomic_load(&s->stats.busy_ns);
  lk_store_commit_stats cs;
  lk_store_commit_stats_get(s->store, &cs); /* never waits for the writer (store.h) */
  pthread_mutex_lock(&m->mu);
  for (size_t i = 0; i < N_MIRRORS; i++)
    if (m->mirrors[i].c)
      mirror_to(m->mirrors[i].c, now[i]);
  mirror_to(m->busy, busy);
  mirror_to(m->commits, cs.commits > 0 ? (uint64_t)cs.commits : 0);
  mirror_to(m->writes, cs.writes > 0 ? (uint64_t)cs.writes : 0);
  pthread_mutex_unlock(&m->mu);
  size_t depth, depth_max;
  pool_depth(s, &depth, &depth_max);
  lk_gauge_set(m->queue_depth, (int64_t)depth);
  lk_gauge_set(m->active, atomic_load(&s->active));
  lk_gauge_set(m->inflight_keys, (int64_t)lk_inflight_count(s->inflight));
  char *text;
  size_t len;
  if (lk_metrics_render(m->reg, &text, &len) != LK_OK)
    return false;
  resp_free(out);
  resp_init(out, 200);
  out->body = text;
  out->body_len = len;
  resp_header(out, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
  return true;
}
