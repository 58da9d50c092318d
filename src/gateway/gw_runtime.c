/* SPDX-License-Identifier: MIT */
/* The gateway's runtime: state that outlives a reload, shared by name between the configurations
 * attached to it, and the decisions made on it (endpoint pick, ejection, health, rollout).
 *
 * Shared entries (struct shared) live in one list per runtime under rt->mu, keyed by a string
 * that says what they are ("B\x1froute\x1fspec" for a budget, "E\x1fcluster\x1fhost:port" for an
 * endpoint, ...), and are counted by the configurations that use them: attach takes a reference
 * on each, the last unref of a configuration drops them, and an entry nobody uses is freed. The
 * per-configuration views (lk_gw_cluster_rt, lk_gw_route_rt, lk_gw_policy_rt) belong to the
 * configuration and only point at shared entries. */
#include "gw_config.h"
#include "gw_internal.h"

#include <linkd/shared.h>

#include <linkd/error.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ============================================================================================
 * Shared entries
 * ========================================================================================== */

typedef enum sh_kind {
  SH_BUDGET,
  SH_BREAKER,
  SH_LIMITER,
  SH_BULKHEAD,
  SH_ROLLOUT,
  SH_CLUSTER,
  SH_ENDPOINT,
  SH_SERIES
} sh_kind;

/* The gauges of a (route, policy version): state of something that exists only while a
 * configuration in use has it, so they leave /metrics with the last such configuration (their
 * counters and histograms stay, cumulative). */
#define SERIES_GAUGES 7

/* Endpoint state, guarded by its cluster entry's mutex. */
typedef struct ep_state {
  bool ejected;
  int64_t ejected_until;
  bool ever_ejected;
  int ejections; /* in a row */
  uint64_t ejections_total;
  int c5xx, cconn;
  bool healthy;
  int hc_ok, hc_bad;
  bool probe_scheduled;
  int64_t next_probe;
  /* metrics: labels cluster, endpoint */
  lk_counter *att[4]; /* by lk_gw_outcome */
  lk_hist *duration;
  lk_counter *ejections_c;
  lk_gauge *ejected_g, *healthy_g;
  lk_counter *hc_ok_c, *hc_bad_c;
} ep_state;

typedef struct rollout_state {
  pthread_mutex_t mu;
  uint64_t n[2], bad[2];
  atomic_bool rolled_back;
  bool reported;
} rollout_state;

typedef struct shared {
  struct shared *next;
  sh_kind kind;
  char *key;
  size_t refs; /* configurations using it; under rt->mu */
  union {
    lk_budget *budget;
    struct {
      lk_breaker *b;
      lk_rand_fast rng;
    } breaker;
    lk_limiter *limiter;
    lk_bulkhead *bulkhead;
    rollout_state rollout;
    pthread_mutex_t cluster_mu;
    ep_state ep;
    struct {                           /* SH_SERIES */
      lk_gauge *gauges[SERIES_GAUGES]; /* unused ones NULL */
      /* shared = : linkd_gw_shared_local_decisions_total of [0] the limiter, [1] the budget (NULL
       * without), the fleet-wide objects whose lk_shared_stats.fallback they count, and how much
       * of that count is counted already (see sync_local) */
      lk_counter *local[2];
      const lk_limiter *limiter;
      const lk_budget *budget;
      _Atomic uint64_t seen[2];
    } series;
  } u;
  struct shared *cluster; /* SH_ENDPOINT: its cluster entry (referenced) */
} shared;

/* Series of one (route, policy version). */
typedef struct route_series {
  lk_counter *requests[6]; /* code class: 0 = none, 1..5 = 1xx..5xx */
  lk_counter *attempts, *retries, *deadline, *streamed, *streamed_nr, *injected;
  lk_counter *refused[LK_GW_REFUSALS]; /* by lk_gw_refusal; [LK_GW_REFUSED_NONE] NULL */
  lk_hist *duration, *queue_wait;
  lk_gauge *retry_ratio, *budget_consumption, *breaker_state, *rollout_ratio, *rolled_back;
  /* shared = : [0] limiter, [1] budget; else NULL */
  lk_counter *shared_local[2];
  lk_gauge *shared_redis[2];
} route_series;

struct lk_gw_policy_rt {
  shared *budget, *breaker, *limiter, *bulkhead;
  shared *series; /* SH_SERIES of (route, version): hides the gauges with the last user */
  route_series m;
};

struct lk_gw_route_rt {
  shared *rollout; /* NULL without a candidate */
  lk_counter *rollbacks;
};

struct lk_gw_cluster_rt {
  shared *cluster;
  shared *eps[LK_GW_MAX_ENDPOINTS];
  size_t n;
  const lk_gw_cluster *conf;
};

struct lk_gw_runtime {
  pthread_mutex_t mu;
  lk_metrics *metrics;
  lk_rand_fast rng; /* under mu */
  uint64_t generation;
  size_t attached;
  shared *entries;
  lk_counter *reload_ok, *reload_err, *unrouted[6];
  lk_gauge *generation_g;
};

static void shared_free(shared *s) {
  switch (s->kind) {
  case SH_BUDGET: lk_budget_free(s->u.budget); break;
  case SH_BREAKER: lk_breaker_free(s->u.breaker.b); break;
  case SH_LIMITER: lk_limiter_free(s->u.limiter); break;
  case SH_BULKHEAD: lk_bulkhead_free(s->u.bulkhead); break;
  case SH_ROLLOUT: pthread_mutex_destroy(&s->u.rollout.mu); break;
  case SH_CLUSTER: pthread_mutex_destroy(&s->u.cluster_mu); break;
  case SH_ENDPOINT:
  case SH_SERIES: break;
  }
  free(s->key);
  free(s);
}

static shared *find(lk_gw_runtime *rt, sh_kind kind, const char *key) {
  for (shared *s = rt->entries; s; s = s->next)
    if (s->kind == kind && strcmp(s->key, key) == 0)
      return s;
  return NULL;
}

/* The fallback count of a fleet-wide object ([0] limiter, [1] budget); false without one. */
static bool local_decisions(const shared *s, int i, uint64_t *n) {
  lk_shared_stats ss;
  int rc = i == 0 ? (s->u.series.limiter ? lk_shared_limiter_stats(s->u.series.limiter, &ss) : -1)
                  : (s->u.series.budget ? lk_shared_budget_stats(s->u.series.budget, &ss) : -1);
  if (rc != LK_OK)
    return false;
  *n = ss.fallback;
  return true;
}

/* Adds to a (route, version)'s linkd_gw_shared_local_decisions_total what its fleet-wide objects
 * decided locally since the last look. An object counts from 0 when it is made, and a reload
 * that drops a version and brings it back makes it anew, so the counter is a counter of its own
 * (cumulative over the process's life), fed the object's increase; `seen` starts at the
 * object's count when the series entry is made (what it decided before, under another version
 * of the route, is that version's). Any thread: `seen` only moves up, by compare-and-swap. */
static void sync_local(shared *s) {
  if (!s || s->kind != SH_SERIES)
    return;
  for (int i = 0; i < 2; i++) {
    uint64_t now_n;
    if (!s->u.series.local[i] || !local_decisions(s, i, &now_n))
      continue;
    uint64_t prev = atomic_load(&s->u.series.seen[i]);
    while (now_n > prev) {
      if (atomic_compare_exchange_weak(&s->u.series.seen[i], &prev, now_n)) {
        lk_counter_add(s->u.series.local[i], now_n - prev);
        break;
      }
    }
  }
}

/* Takes a gone subject's gauges out of /metrics (they come back if it is attached again). */
static void hide_gauges(lk_gw_runtime *rt, shared *s) {
  if (s->kind == SH_ENDPOINT) {
    lk_metrics_hide(rt->metrics, s->u.ep.ejected_g);
    lk_metrics_hide(rt->metrics, s->u.ep.healthy_g);
  } else if (s->kind == SH_SERIES) {
    sync_local(s); /* the last decisions before the version went (its objects are still there) */
    for (int i = 0; i < SERIES_GAUGES; i++)
      if (s->u.series.gauges[i])
        lk_metrics_hide(rt->metrics, s->u.series.gauges[i]);
  }
}

/* Drops one reference (under rt->mu); frees the entry at zero. */
static void release(lk_gw_runtime *rt, shared *s) {
  if (!s || --s->refs)
    return;
  hide_gauges(rt, s);
  for (shared **p = &rt->entries; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  shared *cluster = s->kind == SH_ENDPOINT ? s->cluster : NULL;
  shared_free(s);
  release(rt, cluster);
}

static char *make_key(const char *a, const char *b, const char *c) {
  size_t n = strlen(a) + strlen(b) + (c ? strlen(c) : 0) + 3;
  char *k = malloc(n);
  if (k)
    snprintf(k, n, "%s\x1f%s%s%s", a, b, c ? "\x1f" : "", c ? c : "");
  return k;
}

/* A new entry, not yet in the list, with one reference. */
static shared *entry_new(sh_kind kind, char *key) {
  shared *s = calloc(1, sizeof *s);
  if (!s) {
    free(key);
    return NULL;
  }
  s->kind = kind;
  s->key = key;
  s->refs = 1;
  return s;
}

static void entry_add(lk_gw_runtime *rt, shared *s) {
  s->next = rt->entries;
  rt->entries = s;
}

/* ============================================================================================
 * The runtime
 * ========================================================================================== */

lk_gw_runtime *lk_gw_runtime_new(lk_rand *rng) {
  if (!rng)
    return NULL;
  lk_gw_runtime *rt = calloc(1, sizeof *rt);
  if (!rt)
    return NULL;
  if (pthread_mutex_init(&rt->mu, NULL) != 0 || !(rt->metrics = lk_metrics_new())) {
    free(rt);
    return NULL;
  }
  lk_rand_fast_seeded(&rt->rng, lk_rand_next64(rng));
  lk_metrics *m = rt->metrics;
  const char *help = "Configuration loads (SIGHUP, POST /config) by result";
  rt->reload_ok = lk_metrics_counter(m, "linkd_gw_config_reloads_total", help,
                                     (const char *const[]){"result", "ok", NULL});
  rt->reload_err = lk_metrics_counter(m, "linkd_gw_config_reloads_total", help,
                                      (const char *const[]){"result", "error", NULL});
  rt->generation_g = lk_metrics_gauge(m, "linkd_gw_config_generation",
                                      "Generation of the configuration serving new requests", NULL);
  static const char *const codes[6] = {"none", "1xx", "2xx", "3xx", "4xx", "5xx"};
  for (int i = 0; i < 6; i++)
    rt->unrouted[i] = lk_metrics_counter(
        m, "linkd_gw_unrouted_total",
        "Requests answered before routing (no route: 404; malformed: 4xx) by status class",
        (const char *const[]){"code", codes[i], NULL});
  return rt;
}

int lk_gw_runtime_free(lk_gw_runtime *rt) {
  if (!rt)
    return LK_OK;
  pthread_mutex_lock(&rt->mu);
  size_t attached = rt->attached;
  pthread_mutex_unlock(&rt->mu);
  if (attached)
    return LK_ESTATE;
  lk_metrics_free(rt->metrics);
  pthread_mutex_destroy(&rt->mu);
  free(rt);
  return LK_OK;
}

lk_metrics *lk_gw_runtime_metrics(lk_gw_runtime *rt) { return rt ? rt->metrics : NULL; }

void lk_gw_runtime_record_reload(lk_gw_runtime *rt, const lk_gw_config *current, bool ok) {
  if (!rt)
    return;
  lk_counter_add(ok ? rt->reload_ok : rt->reload_err, 1);
  if (current)
    lk_gauge_set(rt->generation_g, (int64_t)current->generation);
}

static int code_class(int status) { return status >= 100 && status < 600 ? status / 100 : 0; }

void lk_gw_runtime_observe_unrouted(lk_gw_runtime *rt, int status) {
  if (rt)
    lk_counter_add(rt->unrouted[code_class(status)], 1);
}

/* ============================================================================================
 * Attach and detach
 * ========================================================================================== */

static void series_for_route(lk_metrics *m, const char *route, const char *version, bool fleet,
                             route_series *s) {
  const char *const l[] = {"route", route, "policy", version, NULL};
  static const char *const codes[6] = {"none", "1xx", "2xx", "3xx", "4xx", "5xx"};
  for (int i = 0; i < 6; i++)
    s->requests[i] = lk_metrics_counter(
        m, "linkd_gw_requests_total",
        "Downstream requests by route, policy version and status class sent (none: no answer)",
        (const char *const[]){"route", route, "policy", version, "code", codes[i], NULL});
  s->attempts = lk_metrics_counter(m, "linkd_gw_attempts_total", "Upstream attempts", l);
  s->retries = lk_metrics_counter(m, "linkd_gw_retries_total",
                                  "Upstream attempts after the first of a request", l);
  s->deadline = lk_metrics_counter(m, "linkd_gw_deadline_exceeded_total",
                                   "Requests answered 504 because their deadline passed", l);
  s->streamed = lk_metrics_counter(m, "linkd_gw_streamed_total",
                                   "Requests whose body exceeded body-buffer and was streamed", l);
  s->streamed_nr = lk_metrics_counter(
      m, "linkd_gw_streamed_not_retried_total",
      "Streamed requests that would have been retried had their body been buffered", l);
  s->injected = lk_metrics_counter(m, "linkd_gw_keys_injected_total",
                                   "Requests given an Idempotency-Key by the gateway", l);
  for (int i = LK_GW_REFUSED_NONE + 1; i < LK_GW_REFUSALS; i++)
    s->refused[i] = lk_metrics_counter(
        m, "linkd_gw_refused_total",
        "Requests whose call the gateway ended by refusing an attempt itself, by reason: breaker "
        "open, retry budget exhausted, no limiter token, bulkhead full, deadline too short",
        (const char *const[]){"route", route, "policy", version, "reason",
                              lk_gw_refusal_name((lk_gw_refusal)i), NULL});
  s->duration = lk_metrics_histogram(m, "linkd_gw_request_duration_seconds",
                                     "Request head read to response head written", l);
  s->queue_wait = lk_metrics_histogram(m, "linkd_gw_queue_wait_seconds",
                                       "Time waiting for a bulkhead slot or limiter token", l);
  s->retry_ratio = lk_metrics_gauge_scaled(m, "linkd_gw_retry_ratio",
                                           "Retries per request since start", l, 1e6);
  s->budget_consumption = lk_metrics_gauge_scaled(
      m, "linkd_gw_budget_consumption", "Share of the retry budget in use (1: refusing)", l, 1e6);
  s->breaker_state = lk_metrics_gauge(
      m, "linkd_gw_breaker_state",
      "Breaker state: 0 closed, 1 open, 2 half-open, 3 disabled, 4 forced open, 5 metrics only; "
      "-1 no breaker",
      l);
  s->rollout_ratio =
      lk_metrics_gauge_scaled(m, "linkd_gw_rollout_ratio",
                              "Share of new requests given this policy version (0 to 1)", l, 1e6);
  s->rolled_back = lk_metrics_gauge(m, "linkd_gw_rollout_rolled_back",
                                    "1 if this candidate policy version was rolled back", l);
  static const char *const objects[2] = {"limiter", "budget"};
  for (int i = 0; fleet && i < 2; i++) {
    const char *const lo[] = {"route", route, "policy", version, "object", objects[i], NULL};
    s->shared_local[i] = lk_metrics_counter(
        m, "linkd_gw_shared_local_decisions_total",
        "Decisions of the route's fleet-wide object taken here, Redis being slow or away", lo);
    s->shared_redis[i] = lk_metrics_gauge(
        m, "linkd_gw_shared_using_redis", "1 while the fleet-wide object decides on Redis", lo);
  }
}

static void series_for_endpoint(lk_metrics *m, const char *cluster, const char *ep,
                                ep_state *s) {
  const char *const l[] = {"cluster", cluster, "endpoint", ep, NULL};
  static const char *const results[4] = {"ok", "5xx", "connect", "other"};
  for (int i = 0; i < 4; i++)
    s->att[i] = lk_metrics_counter(
        m, "linkd_gw_upstream_attempts_total",
        "Upstream attempts by endpoint and result (ok: any answer but a 5xx)",
        (const char *const[]){"cluster", cluster, "endpoint", ep, "result", results[i], NULL});
  s->duration = lk_metrics_histogram(m, "linkd_gw_upstream_duration_seconds",
                                     "Duration of upstream attempts by endpoint", l);
  s->ejections_c = lk_metrics_counter(m, "linkd_gw_ejections_total",
                                      "Outlier ejections of the endpoint", l);
  s->ejected_g = lk_metrics_gauge(m, "linkd_gw_endpoint_ejected", "1 while ejected", l);
  s->healthy_g = lk_metrics_gauge(m, "linkd_gw_endpoint_healthy",
                                  "1 unless the active health check marked it unhealthy", l);
  s->hc_ok_c = lk_metrics_counter(
      m, "linkd_gw_health_checks_total", "Active health probes by result",
      (const char *const[]){"cluster", cluster, "endpoint", ep, "result", "ok", NULL});
  s->hc_bad_c = lk_metrics_counter(
      m, "linkd_gw_health_checks_total", "Active health probes by result",
      (const char *const[]){"cluster", cluster, "endpoint", ep, "result", "fail", NULL});
}

/* Finds or creates the shared entry for a protection object of a policy. -1 no memory / -2
 * creation refused (message in err). */
static int protection(lk_gw_runtime *rt, sh_kind kind, const char *route, const char *spec,
                      const lk_gw_policy *p, shared **out, char *err, size_t cap) {
  static const char tags[] = {'B', 'K', 'L', 'H'};
  char tag[2] = {tags[kind], 0};
  char *key = make_key(tag, route, spec);
  if (!key)
    return -1;
  shared *s = find(rt, kind, key);
  if (s) {
    free(key);
    s->refs++;
    *out = s;
    return 0;
  }
  if (!(s = entry_new(kind, key)))
    return -1;
  const char *why = NULL;
  int rc = LK_OK;
  /* A fleet-wide object (shared = ): the fleet's limiter or ratio budget on Redis under a key
   * named after the route, deciding locally at 1/fleet when Redis is slow or away. */
  bool fleet = p->shared.url[0] && (kind == SH_BUDGET || kind == SH_LIMITER);
  lk_shared_config sc;
  lk_shared_config_init_default(&sc);
  char prefix[300];
  if (fleet) {
    snprintf(prefix, sizeof prefix, "linkd:gw:%s:%s", route,
             kind == SH_BUDGET ? "budget" : "limiter");
    sc.url = p->shared.url;
    sc.prefix = prefix;
    sc.fleet_size = p->shared.fleet;
    sc.timeout = p->shared.timeout;
  }
  switch (kind) {
  case SH_BUDGET: {
    if (fleet) {
      rc = lk_shared_budget_new(&sc, &p->budget.ratio, &s->u.budget, &why);
      break;
    }
    char m[256];
    if ((rc = cli_budget_new(&p->budget, &s->u.budget, m, sizeof m)) != 0)
      snprintf(err, cap, "route %s: %s", route, m); /* LK_ENOMEM stays itself (below) */
    break;
  }
  case SH_BREAKER: {
    lk_rand_fast_seeded(&s->u.breaker.rng, lk_rand_next64(&rt->rng.base));
    lk_breaker_config bc = p->breaker;
    bc.rng = &s->u.breaker.rng.base;
    bc.on_transition = NULL;
    rc = lk_breaker_new(&bc, &s->u.breaker.b, &why);
    break;
  }
  case SH_LIMITER:
    rc = fleet ? lk_shared_limiter_new(&sc, &p->limiter, &s->u.limiter, &why)
               : lk_limiter_new(&p->limiter, &s->u.limiter, &why);
    break;
  case SH_BULKHEAD: rc = lk_bulkhead_new(&p->bulkhead, &s->u.bulkhead, &why); break;
  default: rc = LK_EINVAL; break;
  }
  if (rc != LK_OK) {
    if (why)
      snprintf(err, cap, "route %s: %s", route, why);
    else if (!err[0])
      snprintf(err, cap, "route %s: %s", route, lk_strerror(rc));
    shared_free(s);
    return rc == LK_ENOMEM ? -1 : -2;
  }
  entry_add(rt, s);
  *out = s;
  return 0;
}

/* Counts p's (route, version) in use, for the gauges' lifetime (SH_SERIES). */
static int series_attach(lk_gw_runtime *rt, const char *route, lk_gw_policy *p) {
  char *key = make_key("M", route, p->version);
  if (!key)
    return -1;
  shared *s = find(rt, SH_SERIES, key);
  if (s) {
    free(key);
    s->refs++;
  } else {
    if (!(s = entry_new(SH_SERIES, key)))
      return -1;
    const route_series *m = &p->rt->m;
    lk_gauge *g[SERIES_GAUGES] = {m->retry_ratio,    m->budget_consumption, m->breaker_state,
                                  m->rollout_ratio,  m->rolled_back,        m->shared_redis[0],
                                  m->shared_redis[1]};
    memcpy(s->u.series.gauges, g, sizeof g);
    /* a version's objects are the same for as long as its entry lives: the version is a hash
     * of the policy, the objects are keyed by the route and their spec */
    s->u.series.local[0] = m->shared_local[0];
    s->u.series.local[1] = m->shared_local[1];
    s->u.series.limiter = p->http.limiter;
    s->u.series.budget = p->http.budget;
    for (int i = 0; i < 2; i++) {
      uint64_t n = 0;
      atomic_init(&s->u.series.seen[i], local_decisions(s, i, &n) ? n : 0);
    }
    entry_add(rt, s);
  }
  p->rt->series = s;
  return 0;
}

static void policy_rt_release(lk_gw_runtime *rt, lk_gw_policy *p) {
  if (!p || !p->rt)
    return;
  release(rt, p->rt->series); /* first: its last count reads the objects released below */
  release(rt, p->rt->budget);
  release(rt, p->rt->breaker);
  release(rt, p->rt->limiter);
  release(rt, p->rt->bulkhead);
  free(p->rt);
  p->rt = NULL;
  p->http.budget = NULL;
  p->http.breaker = NULL;
  p->http.limiter = NULL;
  p->http.bulkhead = NULL;
}

static int policy_attach(lk_gw_runtime *rt, const lk_gw_route *r, lk_gw_policy *p, char *err,
                         size_t cap) {
  if (!(p->rt = calloc(1, sizeof *p->rt)))
    return -1;
  char spec[512];
  int rc = 0;
  char where[300];
  lk_gw_shared_format(&p->shared, where, sizeof where);
  size_t n;
  if (p->budget.enabled) {
    cli_budget_format(&p->budget, spec, sizeof spec);
    n = strlen(spec);
    snprintf(spec + n, sizeof spec - n, " @%s", where); /* a local and a fleet budget differ */
    rc = protection(rt, SH_BUDGET, r->name, spec, p, &p->rt->budget, err, cap);
  }
  if (!rc && p->breaker_on) {
    lk_gw_breaker_format(true, &p->breaker, spec, sizeof spec);
    rc = protection(rt, SH_BREAKER, r->name, spec, p, &p->rt->breaker, err, cap);
  }
  if (!rc && p->limiter_on) {
    lk_gw_limiter_format(true, &p->limiter, spec, sizeof spec);
    n = strlen(spec);
    snprintf(spec + n, sizeof spec - n, " @%s", where);
    rc = protection(rt, SH_LIMITER, r->name, spec, p, &p->rt->limiter, err, cap);
  }
  if (!rc && p->bulkhead_on) {
    lk_gw_bulkhead_format(true, &p->bulkhead, spec, sizeof spec);
    rc = protection(rt, SH_BULKHEAD, r->name, spec, p, &p->rt->bulkhead, err, cap);
  }
  if (rc)
    return rc;
  p->http.budget = p->rt->budget ? p->rt->budget->u.budget : NULL;
  p->http.breaker = p->rt->breaker ? p->rt->breaker->u.breaker.b : NULL;
  p->http.limiter = p->rt->limiter ? p->rt->limiter->u.limiter : NULL;
  p->http.bulkhead = p->rt->bulkhead ? p->rt->bulkhead->u.bulkhead : NULL;
  series_for_route(rt->metrics, r->name, p->version, p->shared.url[0] != 0, &p->rt->m);
  return series_attach(rt, r->name, p);
}

static void cluster_rt_release(lk_gw_runtime *rt, lk_gw_cluster *c) {
  if (!c->rt)
    return;
  for (size_t i = 0; i < c->rt->n; i++)
    release(rt, c->rt->eps[i]);
  release(rt, c->rt->cluster);
  free(c->rt);
  c->rt = NULL;
}

static int cluster_attach(lk_gw_runtime *rt, lk_gw_cluster *c, int64_t now) {
  if (!(c->rt = calloc(1, sizeof *c->rt)))
    return -1;
  c->rt->conf = c;
  char *key = make_key("C", c->name, NULL);
  if (!key)
    return -1;
  shared *cl = find(rt, SH_CLUSTER, key);
  if (cl) {
    free(key);
    cl->refs++;
  } else {
    if (!(cl = entry_new(SH_CLUSTER, key)))
      return -1;
    if (pthread_mutex_init(&cl->u.cluster_mu, NULL) != 0) {
      free(cl->key);
      free(cl);
      return -1;
    }
    entry_add(rt, cl);
  }
  c->rt->cluster = cl;
  pthread_mutex_lock(&cl->u.cluster_mu);
  int rc = 0;
  for (size_t i = 0; i < c->n_endpoints && !rc; i++) {
    const lk_gw_endpoint *ep = &c->endpoints[i];
    char *ek = make_key("E", c->name, ep->key);
    if (!ek) {
      rc = -1;
      break;
    }
    shared *s = find(rt, SH_ENDPOINT, ek);
    if (s) {
      free(ek);
      s->refs++;
    } else if ((s = entry_new(SH_ENDPOINT, ek))) {
      s->cluster = cl;
      cl->refs++;
      s->u.ep.healthy = true;
      series_for_endpoint(rt->metrics, c->name, ep->key, &s->u.ep);
      lk_gauge_set(s->u.ep.healthy_g, 1);
      entry_add(rt, s);
    } else {
      rc = -1;
      break;
    }
    if (c->health.enabled && !s->u.ep.probe_scheduled) {
      s->u.ep.probe_scheduled = true;
      s->u.ep.next_probe =
          now + (int64_t)lk_rand_below(&rt->rng.base, (uint64_t)c->health.interval);
    } else if (!c->health.enabled) {
      /* No health check in this configuration: the endpoint is healthy, whatever an earlier one
       * concluded, and a later one starts probing afresh. */
      s->u.ep.probe_scheduled = false;
      s->u.ep.healthy = true;
      s->u.ep.hc_ok = s->u.ep.hc_bad = 0;
      lk_gauge_set(s->u.ep.healthy_g, 1);
    }
    c->rt->eps[c->rt->n++] = s;
  }
  pthread_mutex_unlock(&cl->u.cluster_mu);
  return rc;
}

static int route_attach(lk_gw_runtime *rt, lk_gw_route *r, char *err, size_t cap) {
  if (!(r->rt = calloc(1, sizeof *r->rt)))
    return -1;
  r->rt->rollbacks = lk_metrics_counter(rt->metrics, "linkd_gw_rollbacks_total",
                                        "Candidate policies rolled back automatically",
                                        (const char *const[]){"route", r->name, NULL});
  int rc = policy_attach(rt, r, &r->policy, err, cap);
  if (rc || !r->next)
    return rc;
  if ((rc = policy_attach(rt, r, r->next, err, cap)))
    return rc;
  char *key = make_key("R", r->name, r->next->version);
  if (!key)
    return -1;
  shared *s = find(rt, SH_ROLLOUT, key);
  if (s) {
    free(key);
    s->refs++;
  } else {
    if (!(s = entry_new(SH_ROLLOUT, key)))
      return -1;
    if (pthread_mutex_init(&s->u.rollout.mu, NULL) != 0) {
      free(s->key);
      free(s);
      return -1;
    }
    atomic_init(&s->u.rollout.rolled_back, false);
    entry_add(rt, s);
  }
  r->rt->rollout = s;
  return 0;
}

static void detach_locked(lk_gw_runtime *rt, lk_gw_config *c) {
  for (size_t i = 0; i < c->n_routes; i++) {
    lk_gw_route *r = &c->routes[i];
    policy_rt_release(rt, &r->policy);
    policy_rt_release(rt, r->next);
    if (r->rt) {
      release(rt, r->rt->rollout);
      free(r->rt);
      r->rt = NULL;
    }
  }
  for (size_t i = 0; i < c->n_clusters; i++)
    cluster_rt_release(rt, &c->clusters[i]);
}

int lk_gw_runtime_attach(lk_gw_runtime *rt, lk_gw_config *c, int64_t now, char *err, size_t cap) {
  char dummy[1];
  if (!err || !cap) {
    err = dummy;
    cap = sizeof dummy;
  }
  err[0] = '\0';
  if (!rt || !c)
    return LK_EINVAL;
  if (c->runtime) {
    snprintf(err, cap, "%s: already attached", c->path);
    return LK_ESTATE;
  }
  pthread_mutex_lock(&rt->mu);
  int rc = 0;
  for (size_t i = 0; i < c->n_clusters && !rc; i++)
    rc = cluster_attach(rt, &c->clusters[i], now);
  for (size_t i = 0; i < c->n_routes && !rc; i++)
    rc = route_attach(rt, &c->routes[i], err, cap);
  if (rc) {
    detach_locked(rt, c);
    pthread_mutex_unlock(&rt->mu);
    if (rc == -1) {
      snprintf(err, cap, "%s: out of memory", c->path);
      return LK_ENOMEM;
    }
    return LK_ECONFIG;
  }
  c->generation = ++rt->generation;
  c->runtime = rt;
  rt->attached++;
  /* An attached configuration is about to serve (the first one too, which no reload counts). */
  lk_gauge_set(rt->generation_g, (int64_t)c->generation);
  pthread_mutex_unlock(&rt->mu);
  return LK_OK;
}

void lk_gw_runtime_detach(lk_gw_config *c) {
  lk_gw_runtime *rt = c->runtime;
  if (!rt)
    return;
  pthread_mutex_lock(&rt->mu);
  detach_locked(rt, c);
  c->runtime = NULL;
  rt->attached--;
  pthread_mutex_unlock(&rt->mu);
}

/* ============================================================================================
 * Endpoints
 * ========================================================================================== */

lk_gw_outcome lk_gw_outcome_of(lk_failure kind, int status) {
  if (status >= 500 && status < 600)
    return LK_GW_5XX;
  if (status > 0)
    return LK_GW_OK;
  switch (kind) {
  case LK_F_NONE: return LK_GW_OK;
  case LK_F_DNS_TIMEOUT:
  case LK_F_DNS_FAILED:
  case LK_F_CONNECT_REFUSED:
  case LK_F_CONNECT_TIMEOUT:
  case LK_F_TLS_TIMEOUT:
  case LK_F_TLS_FAILED:
  case LK_F_RESET_BEFORE_SEND:
  case LK_F_RESET_AFTER_SEND:
  case LK_F_EMPTY_RESPONSE: return LK_GW_CONNECT_FAIL;
  default: return LK_GW_OTHER;
  }
}

static inline int64_t sat_add(int64_t a, int64_t b) {
  if (b > 0 && a > INT64_MAX - b)
    return INT64_MAX;
  if (b < 0 && a < INT64_MIN - b)
    return INT64_MIN;
  return a + b;
}

static inline int64_t sat_sub(int64_t a, int64_t b) {
  if (b < 0 && a > INT64_MAX + b)
    return INT64_MAX;
  if (b > 0 && a < INT64_MIN + b)
    return INT64_MIN;
  return a - b;
}

/* Ends an ejection that has run out (cluster lock held). */
static void expire(ep_state *e, int64_t now) {
  if (e->ejected && now >= e->ejected_until) {
    e->ejected = false;
    e->c5xx = e->cconn = 0;
    lk_gauge_set(e->ejected_g, 0);
  }
}

int lk_gw_cluster_pick(const lk_gw_cluster *c, int64_t now, lk_rand *rng, uint64_t tried,
                       int *idx) {
  if (!c || !c->rt || !rng || !idx || !c->rt->n)
    return LK_EINVAL;
  struct lk_gw_cluster_rt *k = c->rt;
  uint64_t usable = 0, all = k->n >= 64 ? UINT64_MAX : (UINT64_C(1) << k->n) - 1;
  pthread_mutex_lock(&k->cluster->u.cluster_mu);
  for (size_t i = 0; i < k->n; i++) {
    ep_state *e = &k->eps[i]->u.ep;
    expire(e, now);
    if (!e->ejected && e->healthy)
      usable |= UINT64_C(1) << i;
  }
  pthread_mutex_unlock(&k->cluster->u.cluster_mu);
  tried &= all;
  uint64_t sets[4] = {usable & ~tried, usable, all & ~tried, all};
  for (int s = 0; s < 4; s++) {
    uint64_t m = sets[s];
    if (!m)
      continue;
    int count = __builtin_popcountll(m);
    uint64_t pick = lk_rand_below(rng, (uint64_t)count);
    for (size_t i = 0; i < k->n; i++)
      if ((m >> i) & 1 && pick-- == 0) {
        *idx = (int)i;
        return LK_OK;
      }
  }
  return LK_EINVAL; /* not reached: `all` is never empty */
}

bool lk_gw_cluster_report(const lk_gw_cluster *c, int idx, int64_t now, int64_t duration,
                          lk_gw_outcome o) {
  if (!c || !c->rt || idx < 0 || (size_t)idx >= c->rt->n || o < LK_GW_OK || o > LK_GW_OTHER)
    return false;
  struct lk_gw_cluster_rt *k = c->rt;
  ep_state *e = &k->eps[idx]->u.ep;
  lk_counter_add(e->att[o], 1);
  if (duration >= 0)
    lk_hist_record(e->duration, duration);
  const lk_gw_outlier *ol = &c->outlier;
  bool ejected = false;
  pthread_mutex_lock(&k->cluster->u.cluster_mu);
  expire(e, now);
  bool trigger = false;
  switch (o) {
  case LK_GW_OK: e->c5xx = e->cconn = 0; break;
  case LK_GW_5XX:
    e->c5xx++;
    e->cconn = 0; /* it connected */
    trigger = ol->consecutive_5xx > 0 && e->c5xx >= ol->consecutive_5xx;
    break;
  case LK_GW_CONNECT_FAIL:
    e->cconn++;
    trigger = ol->consecutive_connect_failures > 0 && e->cconn >= ol->consecutive_connect_failures;
    break;
  case LK_GW_OTHER: break;
  }
  if (trigger && !e->ejected && ol->max_percent > 0) {
    size_t n_ejected = 0;
    for (size_t i = 0; i < k->n; i++) {
      ep_state *x = &k->eps[i]->u.ep;
      expire(x, now);
      n_ejected += x->ejected;
    }
    size_t allowed = (size_t)((double)k->n * ol->max_percent / 100.0);
    if (allowed < 1)
      allowed = 1;
    if (n_ejected < allowed) {
      /* A quiet spell of max_time since the last ejection ended starts the count afresh. */
      if (e->ever_ejected && sat_sub(now, e->ejected_until) >= ol->max_time)
        e->ejections = 0;
      if (e->ejections < INT32_MAX)
        e->ejections++;
      /* n * base, capped at max_time (base >= 1 ns, so the division is safe). */
      int64_t d = e->ejections > ol->max_time / ol->base_time
                      ? ol->max_time
                      : (int64_t)e->ejections * ol->base_time;
      if (d > ol->max_time)
        d = ol->max_time;
      e->ejected = true;
      e->ever_ejected = true;
      e->ejected_until = sat_add(now, d);
      e->ejections_total++;
      e->c5xx = e->cconn = 0;
      lk_counter_add(e->ejections_c, 1);
      lk_gauge_set(e->ejected_g, 1);
      ejected = true;
    }
  }
  pthread_mutex_unlock(&k->cluster->u.cluster_mu);
  return ejected;
}

size_t lk_gw_cluster_health_due(const lk_gw_cluster *c, int64_t now, int *idx, size_t cap) {
  if (!c || !c->rt || !c->health.enabled || !idx)
    return 0;
  struct lk_gw_cluster_rt *k = c->rt;
  size_t n = 0;
  pthread_mutex_lock(&k->cluster->u.cluster_mu);
  for (size_t i = 0; i < k->n && n < cap; i++) {
    ep_state *e = &k->eps[i]->u.ep;
    if (!e->probe_scheduled) { /* listed since by a configuration without health checks */
      e->probe_scheduled = true;
      e->next_probe = now;
    }
    if (e->next_probe <= now) {
      idx[n++] = (int)i;
      e->next_probe = sat_add(now, c->health.interval);
    }
  }
  pthread_mutex_unlock(&k->cluster->u.cluster_mu);
  return n;
}

int64_t lk_gw_cluster_health_next(const lk_gw_cluster *c) {
  if (!c || !c->rt || !c->health.enabled)
    return INT64_MAX;
  struct lk_gw_cluster_rt *k = c->rt;
  int64_t next = INT64_MAX;
  pthread_mutex_lock(&k->cluster->u.cluster_mu);
  for (size_t i = 0; i < k->n; i++) {
    ep_state *e = &k->eps[i]->u.ep;
    int64_t t = e->probe_scheduled ? e->next_probe : INT64_MIN;
    if (t < next)
      next = t;
  }
  pthread_mutex_unlock(&k->cluster->u.cluster_mu);
  return next;
}

lk_gw_health_change lk_gw_cluster_health_report(const lk_gw_cluster *c, int idx, int64_t now,
                                                bool ok) {
  (void)now; /* the thresholds count probes, not time */
  if (!c || !c->rt || idx < 0 || (size_t)idx >= c->rt->n || !c->health.enabled)
    return LK_GW_HEALTH_SAME;
  struct lk_gw_cluster_rt *k = c->rt;
  ep_state *e = &k->eps[idx]->u.ep;
  lk_counter_add(ok ? e->hc_ok_c : e->hc_bad_c, 1);
  lk_gw_health_change ch = LK_GW_HEALTH_SAME;
  pthread_mutex_lock(&k->cluster->u.cluster_mu);
  if (ok) {
    e->hc_bad = 0;
    if (e->hc_ok < INT32_MAX)
      e->hc_ok++;
    if (!e->healthy && e->hc_ok >= c->health.healthy_threshold) {
      e->healthy = true;
      ch = LK_GW_HEALTH_UP;
    }
  } else {
    e->hc_ok = 0;
    if (e->hc_bad < INT32_MAX)
      e->hc_bad++;
    if (e->healthy && e->hc_bad >= c->health.unhealthy_threshold) {
      e->healthy = false;
      ch = LK_GW_HEALTH_DOWN;
    }
  }
  if (ch != LK_GW_HEALTH_SAME)
    lk_gauge_set(e->healthy_g, e->healthy);
  pthread_mutex_unlock(&k->cluster->u.cluster_mu);
  return ch;
}

int lk_gw_cluster_endpoint_state(const lk_gw_cluster *c, int idx, int64_t now,
                                 lk_gw_endpoint_state *out) {
  if (!c || !c->rt || idx < 0 || (size_t)idx >= c->rt->n || !out)
    return LK_EINVAL;
  struct lk_gw_cluster_rt *k = c->rt;
  ep_state *e = &k->eps[idx]->u.ep;
  pthread_mutex_lock(&k->cluster->u.cluster_mu);
  expire(e, now);
  out->ejected = e->ejected;
  out->ejected_until = e->ejected_until;
  out->ejections = e->ejections;
  out->ejections_total = e->ejections_total;
  out->consecutive_5xx = e->c5xx;
  out->consecutive_connect_failures = e->cconn;
  out->healthy = e->healthy;
  pthread_mutex_unlock(&k->cluster->u.cluster_mu);
  return LK_OK;
}

/* ============================================================================================
 * Rollout
 * ========================================================================================== */

int lk_gw_route_choose(const lk_gw_route *r, lk_rand *rng) {
  if (!r || !r->next || !r->rt || !r->rt->rollout || !rng)
    return 0;
  if (atomic_load_explicit(&r->rt->rollout->u.rollout.rolled_back, memory_order_acquire))
    return 0;
  /* Hundredths of a percent: 12.34 % is 1234 draws in 10000. */
  uint64_t share = (uint64_t)(r->rollout.percent * 100.0 + 0.5);
  return lk_rand_below(rng, 10000) < share ? 1 : 0;
}

const lk_gw_policy *lk_gw_route_policy(const lk_gw_route *r, int version) {
  if (!r)
    return NULL;
  return version == 1 && r->next ? r->next : &r->policy;
}

bool lk_gw_request_bad(int status) { return status == 0 || status >= 500; }

bool lk_gw_route_record(const lk_gw_route *r, int version, bool bad, lk_gw_rollback *why) {
  if (!r || !r->next || !r->rt || !r->rt->rollout || (version != 0 && version != 1))
    return false;
  rollout_state *s = &r->rt->rollout->u.rollout;
  bool fire = false;
  pthread_mutex_lock(&s->mu);
  s->n[version]++;
  s->bad[version] += bad;
  if (!s->reported && s->n[0] >= r->rollout.min_sample && s->n[1] >= r->rollout.min_sample) {
    double stable = 100.0 * (double)s->bad[0] / (double)s->n[0];
    double next = 100.0 * (double)s->bad[1] / (double)s->n[1];
    if (next - stable > r->rollout.margin) {
      s->reported = true;
      atomic_store_explicit(&s->rolled_back, true, memory_order_release);
      fire = true;
      if (why) {
        snprintf(why->version, sizeof why->version, "%s", r->next->version);
        why->stable_n = s->n[0];
        why->stable_bad = s->bad[0];
        why->next_n = s->n[1];
        why->next_bad = s->bad[1];
        why->stable_rate = stable;
        why->next_rate = next;
      }
    }
  }
  pthread_mutex_unlock(&s->mu);
  if (fire)
    lk_counter_add(r->rt->rollbacks, 1);
  return fire;
}

const char *lk_gw_route_rollout_state(const lk_gw_route *r) {
  if (!r || !r->next || !r->rt || !r->rt->rollout)
    return "none";
  return atomic_load_explicit(&r->rt->rollout->u.rollout.rolled_back, memory_order_acquire)
             ? "rolled-back"
             : "rolling";
}

/* ============================================================================================
 * Metrics
 * ========================================================================================== */

const char *lk_gw_refusal_name(lk_gw_refusal r) {
  switch (r) {
  case LK_GW_REFUSED_BREAKER: return "breaker";
  case LK_GW_REFUSED_BUDGET: return "budget";
  case LK_GW_REFUSED_LIMITER: return "limiter";
  case LK_GW_REFUSED_BULKHEAD: return "bulkhead";
  case LK_GW_REFUSED_DEADLINE: return "deadline";
  case LK_GW_REFUSED_NONE: break;
  }
  return "none";
}

lk_gw_refusal lk_gw_refusal_of(int err, const lk_http_attempt_info *att, size_t n) {
  switch (err) {
  case LK_EBREAKER_OPEN: return LK_GW_REFUSED_BREAKER;
  case LK_EBUDGET: return LK_GW_REFUSED_BUDGET;
  case LK_ERATE_LIMITED: return LK_GW_REFUSED_LIMITER;
  case LK_EBULKHEAD_FULL: return LK_GW_REFUSED_BULKHEAD;
  case LK_EDEADLINE: break;
  default: return LK_GW_REFUSED_NONE;
  }
  /* The deadline ended the call. The attempt that decided it is the last one not cancelled (a
   * hedge that lost is cancelled after it): none, or one still queued (waiting for a bulkhead
   * slot), means no attempt could start in time; one that ran and left no time (LK_REASON_DEADLINE)
   * was cut short by the deadline, an upstream's slowness, not a refusal; any other decision
   * (delay >= remaining, delay + min attempt > remaining) is a retry refused for lack of time. */
  const lk_http_attempt_info *last = NULL;
  for (size_t i = n; att && i-- > 0;)
    if (att[i].failure != LK_F_CANCELLED) {
      last = &att[i];
      break;
    }
  if (!last || last->phase == LK_PHASE_QUEUED)
    return LK_GW_REFUSED_DEADLINE;
  return last->decision.reason == LK_REASON_DEADLINE ? LK_GW_REFUSED_NONE : LK_GW_REFUSED_DEADLINE;
}

void lk_gw_route_observe(const lk_gw_route *r, int version, const lk_gw_request_obs *obs) {
  const lk_gw_policy *p = lk_gw_route_policy(r, version);
  if (!p || !p->rt || !obs)
    return;
  route_series *m = &p->rt->m;
  lk_counter_add(m->requests[code_class(obs->status)], 1);
  if (obs->attempts > 0) {
    lk_counter_add(m->attempts, (uint64_t)obs->attempts);
    lk_counter_add(m->retries, (uint64_t)obs->attempts - 1);
  }
  if (obs->duration >= 0)
    lk_hist_record(m->duration, obs->duration);
  if (obs->queue_wait >= 0)
    lk_hist_record(m->queue_wait, obs->queue_wait);
  if (obs->deadline_exceeded)
    lk_counter_add(m->deadline, 1);
  if (obs->streamed)
    lk_counter_add(m->streamed, 1);
  if (obs->streamed_not_retried)
    lk_counter_add(m->streamed_nr, 1);
  if (obs->key_injected)
    lk_counter_add(m->injected, 1);
  if (obs->refused > LK_GW_REFUSED_NONE && obs->refused < LK_GW_REFUSALS)
    lk_counter_add(m->refused[obs->refused], 1);
}

static void refresh_policy(const lk_gw_route *r, const lk_gw_policy *p, int version,
                           int64_t now) {
  route_series *m = &p->rt->m;
  uint64_t req = 0;
  for (int i = 0; i < 6; i++)
    req += lk_counter_value(m->requests[i]);
  uint64_t retries = lk_counter_value(m->retries);
  lk_gauge_set(m->retry_ratio, req ? (int64_t)((double)retries / (double)req * 1e6) : 0);
  lk_gauge_set(m->budget_consumption,
               p->http.budget ? (int64_t)(lk_budget_consumption(p->http.budget, now) * 1e6) : 0);
  lk_gauge_set(m->breaker_state,
               p->http.breaker ? (int64_t)lk_breaker_get_state(p->http.breaker) : -1);
  const char *st = lk_gw_route_rollout_state(r);
  bool rolled = strcmp(st, "rolled-back") == 0;
  double percent = !r->next ? 100.0
                   : rolled ? (version ? 0 : 100.0)
                            : (version ? r->rollout.percent : 100.0 - r->rollout.percent);
  lk_gauge_set(m->rollout_ratio, (int64_t)(percent * 1e4 + 0.5)); /* millionths */
  lk_gauge_set(m->rolled_back, version == 1 && rolled);
  lk_shared_stats ss;
  if (m->shared_redis[0] && p->http.limiter && lk_shared_limiter_stats(p->http.limiter, &ss) == 0)
    lk_gauge_set(m->shared_redis[0], ss.using_redis);
  if (m->shared_redis[1] && p->http.budget && lk_shared_budget_stats(p->http.budget, &ss) == 0)
    lk_gauge_set(m->shared_redis[1], ss.using_redis);
  sync_local(p->rt->series);
}

void lk_gw_runtime_refresh(lk_gw_runtime *rt, const lk_gw_config *current, int64_t now) {
  if (!rt)
    return;
  pthread_mutex_lock(&rt->mu);
  for (shared *s = rt->entries; s; s = s->next) {
    if (s->kind != SH_ENDPOINT)
      continue;
    pthread_mutex_lock(&s->cluster->u.cluster_mu);
    expire(&s->u.ep, now);
    lk_gauge_set(s->u.ep.ejected_g, s->u.ep.ejected);
    lk_gauge_set(s->u.ep.healthy_g, s->u.ep.healthy);
    pthread_mutex_unlock(&s->cluster->u.cluster_mu);
  }
  pthread_mutex_unlock(&rt->mu);
  if (!current || current->runtime != rt)
    return;
  for (size_t i = 0; i < current->n_routes; i++) {
    const lk_gw_route *r = &current->routes[i];
    if (r->policy.rt)
      refresh_policy(r, &r->policy, 0, now);
    if (r->next && r->next->rt)
      refresh_policy(r, r->next, 1, now);
  }
}
