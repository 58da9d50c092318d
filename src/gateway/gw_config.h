/* SPDX-License-Identifier: MIT */
/* gw_config.h: the configuration of `linkd serve` and the runtime state that outlives a reload.
 *
 * Two objects, so that a reload is one pointer swap:
 *
 *  - lk_gw_config: everything the file says, parsed and validated completely by
 *    lk_gw_config_load(). Immutable once attached to a runtime, reference-counted: a request takes
 *    a reference to the configuration it started under and keeps it until it is answered, so a
 *    reload never changes the policy of a request in flight.
 *  - lk_gw_runtime: the state that must survive a reload, keyed by name: per cluster endpoint the
 *    outlier-ejection and health-check state (keyed by cluster name + "host:port"), per route the
 *    breaker, budget, limiter and bulkhead objects (keyed by route name + the spec of the object,
 *    so an unchanged spec keeps its state and a changed one starts fresh), the staged-rollout
 *    counters (keyed by route name + candidate policy version) and the metrics registry.
 *    lk_gw_runtime_attach() connects a new configuration to that state; from then on the routes and
 *    clusters of the configuration lead to it (lk_gw_route_choose, lk_gw_cluster_pick, ...).
 *
 * Reload, as the proxy does it:
 *     lk_gw_config *next = lk_gw_config_load(path, err, sizeof err);   // validates everything
 *     if (!next) { log(err); keep serving with the old one; }
 *     else if (lk_gw_runtime_attach(rt, next, now, err, sizeof err) != LK_OK) { unref(next); ... }
 *     else { old = swap(current, next); lk_gw_config_unref(old); }  // in-flight ones keep theirs
 *
 * The file is INI (libinih, the same reader as the CLI's config file, cmd/linkd/config.c):
 * sections [listen], [admin], [log], [cluster NAME] and [route NAME]; route policy keys are the
 * CLI's flag names with the CLI's parsers (src/spec/settings.h), so `attempt-timeout = 300ms`
 * means in a route what `--attempt-timeout 300ms` means on the command line. Every key, its
 * default and an example: docs/gateway.md, "Configuration reference". Errors read
 * "FILE:LINE: KEY: message" ("FILE:LINE: [route NAME]: message" for a section-level problem,
 * "FILE: message" when no line applies).
 *
 * Time and randomness. The decision functions below (pick, report, health, rollout) never read a
 * clock or a global generator: `now` (ns, CLOCK_MONOTONIC as the proxy reads it) and an lk_rand are
 * parameters, so tests drive them with fake clocks and seeded generators.
 *
 * Thread-safety: a configuration is immutable once loaded (only its reference count changes,
 * atomically) and may be read from any number of threads. The runtime functions are safe from any
 * thread (each cluster and route entry has its own lock; the metrics objects are lock-free).
 * lk_rand generators are per thread, as always.
 */
#ifndef LINKD_GW_CONFIG_H
#define LINKD_GW_CONFIG_H

#include "budget_spec.h"

#include <linkd/breaker.h>
#include <linkd/bulkhead.h>
#include <linkd/failure.h>
#include <linkd/hist.h>
#include <linkd/http.h>
#include <linkd/limiter.h>
#include <linkd/metrics.h>
#include <linkd/rand.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The largest configuration file read (1 MiB), as for the CLI's. */
#define LK_GW_CONFIG_MAX_BYTES (1 << 20)
/* Endpoints per cluster: a request's "already tried" set is one 64-bit mask. */
#define LK_GW_MAX_ENDPOINTS 64
/* Room for a host name or address literal, NUL included. */
#define LK_GW_HOST_MAX 256
/* Room for a policy version label ("p" + 8 hex digits), NUL included. */
#define LK_GW_VERSION_MAX 16

/* ============================================================================================
 * The configuration
 * ========================================================================================== */

/* host:port as written ("127.0.0.1:8080", "[::1]:8080", "localhost:8080"), host unbracketed.
 * The listen and admin addresses are IP literals (checked by the loader: they are bound, not
 * resolved); an endpoint may be a host name. */
typedef struct lk_gw_addr {
  char host[LK_GW_HOST_MAX];
  int port; /* 0..65535; 0 = any free port (tests read the bound port from the listener) */
} lk_gw_addr;

/* [listen]: the downstream side. */
typedef struct lk_gw_listen {
  lk_gw_addr addr;          /* address = ; default 127.0.0.1:8080 */
  int backlog;              /* backlog = ; default 511 */
  int max_connections;      /* max-connections = ; open downstream connections; default 10000 */
  size_t max_header_bytes;  /* max-header-bytes = ; request line + headers; default 16 KiB */
  int max_headers;          /* max-headers = ; header fields per request; default 100 */
  size_t body_buffer;       /* body-buffer = ; a request body up to this size is buffered and
                               replayable (retried); a larger one is streamed and never retried
                               once sent; default 64 KiB */
  size_t max_body;          /* max-body = ; a larger body is refused with 413; 0 = no limit;
                               default 16 MiB */
  int64_t header_timeout;   /* header-timeout = ; whole request head must arrive within; 10 s */
  int64_t idle_timeout;     /* idle-timeout = ; keep-alive connection idle; default 60 s */
  int64_t drain_timeout;    /* drain-timeout = ; SIGTERM: in-flight requests get this long; 10 s */
  lk_http_transport upstream_client; /* upstream-client = native | curl; how upstream attempts
                                        do their I/O (read at start only); default native */
  bool generation_header; /* generation-header = ; Linkd-Config-Generation on every proxied
                             response (staged rollouts: which configuration served it); on */
  int line;                 /* where [listen] is, 0 if absent */
  int addr_line;            /* where address = is, 0 if not set */
} lk_gw_listen;

/* [admin]: /metrics, /config, /healthz, /ready, POST /config. */
typedef struct lk_gw_admin {
  bool enabled;   /* the section is present (and not `enabled = false`); default false */
  lk_gw_addr addr; /* address = ; default 127.0.0.1:9901 */
  int line;
  int addr_line; /* where address = is, 0 if not set */
} lk_gw_admin;

typedef enum lk_gw_log_level {
  LK_GW_LOG_ERROR,
  LK_GW_LOG_WARN,
  LK_GW_LOG_INFO,
  LK_GW_LOG_DEBUG
} lk_gw_log_level;

/* [log]. */
typedef struct lk_gw_log {
  char *access;          /* access = ; NULL (off, the default), "-" (stdout) or a file path */
  lk_gw_log_level level; /* level = error|warn|info|debug, the process log on stderr; info */
  int line;
  int access_line; /* where access = is, 0 if not set */
} lk_gw_log;

/* Outlier ejection of a cluster's endpoints (Envoy's outlier detection, simplified). */
typedef struct lk_gw_outlier {
  int consecutive_5xx;             /* eject-5xx = ; consecutive 5xx answers that eject; 0 = off;
                                      default 5 */
  int consecutive_connect_failures; /* eject-connect-failures = ; consecutive connection failures
                                       (refused, connect timeout, reset before a reply); 0 = off;
                                       default 3 */
  int64_t base_time;    /* eject-base-time = ; the n-th ejection in a row lasts n * base; 5 s */
  int64_t max_time;     /* eject-max-time = ; cap of one ejection; also: an endpoint that stays
                           without an ejection this long starts again at n = 1; default 5 min */
  double max_percent;   /* eject-max-percent = ; at most this share of the endpoints is ejected at
                           once (rounded down, but at least one when > 0; 0 = never eject);
                           default 50 */
} lk_gw_outlier;

/* Optional active health check of a cluster's endpoints. */
typedef struct lk_gw_health {
  bool enabled;          /* health-path is set; default false */
  char *path;            /* health-path = ; GET this path; 2xx = healthy */
  int64_t interval;      /* health-interval = ; default 5 s */
  int64_t timeout;       /* health-timeout = ; per probe, < interval; default 1 s */
  int healthy_threshold;   /* health-healthy = ; consecutive good probes to return; default 2 */
  int unhealthy_threshold; /* health-unhealthy = ; consecutive bad probes to remove; default 3 */
} lk_gw_health;

typedef struct lk_gw_endpoint {
  lk_gw_addr addr;
  char *key;      /* "host:port" ("[v6]:port"): the runtime key and the metrics label */
  char *base_url; /* "http://host:port" ("http://[v6]:port"); the proxy appends the path */
  int line;
} lk_gw_endpoint;

struct lk_gw_cluster_rt; /* runtime state of one cluster (opaque) */

/* [cluster NAME]. */
typedef struct lk_gw_cluster {
  char *name;
  lk_gw_endpoint *endpoints; /* endpoint = host:port, one key per endpoint, in order; >= 1 */
  size_t n_endpoints;        /* <= LK_GW_MAX_ENDPOINTS */
  lk_gw_outlier outlier;
  lk_gw_health health;
  int line;
  struct lk_gw_cluster_rt *rt; /* set by lk_gw_runtime_attach */
} lk_gw_cluster;

/* What a route does with Idempotency-Key. */
typedef enum lk_gw_idem {
  LK_GW_IDEM_PASS,  /* idempotency = pass (default): forward the caller's key, if any, as is */
  LK_GW_IDEM_INJECT /* idempotency = inject: a non-idempotent request without a key gets a fresh
                       one (the same on every attempt) so the gateway's own retries of a write are
                       safe against a server that honours keys; the response then carries
                       "Linkd-Idempotency-Key-Injected: <key>" */
} lk_gw_idem;

/* An extra header sent upstream on every attempt (route key `header = Name: value`, the CLI's
 * -H syntax; "Name:" removes a header the caller sent). */
typedef struct lk_gw_header {
  char *name;
  char *value; /* NULL: remove */
} lk_gw_header;

struct lk_gw_policy_rt; /* the protection objects of one policy version (opaque) */

/* Where a route's limiter and budget live when a fleet of gateways shares them (shared = ). */
typedef struct lk_gw_shared {
  char url[200];   /* redis://HOST:PORT; "" = none (the objects are this process's own) */
  int fleet;       /* gateways sharing them: the fallback allows 1/fleet; default 1 */
  int64_t timeout; /* longest wait for Redis per decision; default 2 ms */
} lk_gw_shared;

/* One version of a route's policy. */
typedef struct lk_gw_policy {
  char version[LK_GW_VERSION_MAX]; /* "p" + 8 hex digits of a hash of `canonical`: equal policies
                                      have equal versions across reloads; the metrics label */
  char *canonical;                 /* every key = value of the version, defaults spelled out, one
                                      per line, in reference order (for /config and the hash) */
  /* Ready to copy into a call. Built by the CLI's settings-to-policy code over
   * lk_http_policy_init_default(); default_protection is false, and budget / breaker / limiter /
   * bulkhead point at the runtime's objects once attached (NULL = none configured). The proxy
   * sets deadline / deadline_at from the request, clock, rng and hooks per call. */
  lk_http_policy http;
  cli_budget_spec budget;    /* budget = ; default ratio:20%:min=1:ttl=10s (the HTTP layer's
                                per-origin default with a floor of 1 retry/s, not 10); none */
  bool breaker_on;           /* breaker = ; default: lk_http_origin_breaker_default(); none */
  lk_breaker_config breaker; /* (rng and on_transition are the runtime's) */
  bool limiter_on;           /* limiter = RATE/s[:burst=N]; default none */
  lk_limiter_config limiter;
  bool bulkhead_on;          /* bulkhead = MAX[:queue=N]; default none */
  lk_bulkhead_config bulkhead;
  lk_gw_shared shared;       /* shared = none | redis://HOST:PORT[,fleet=N][,timeout=DUR]: the
                                route's limiter and (ratio) budget are the fleet's, on Redis
                                (shared.h), with the local fallback at 1/fleet; default none */
  lk_gw_idem idem;           /* idempotency = pass|inject */
  int64_t deadline;          /* deadline = ; for a caller that sends none; default 3 s */
  int64_t deadline_cap;      /* deadline-cap = ; a caller's Linkd-Deadline / grpc-timeout is cut
                                to this; default: the route's deadline */
  /* deadline-reserve = is http.deadline_reserve: taken off what is left when the deadline is sent
   * upstream; default 0. honor-retried = is http.honor_retried: an upstream answer carrying
   * Linkd-Retried (the tier below already retried) is not retried again; default true.
   * max-response-body = is http.max_response_body: an upstream body over it is no answer (the
   * client gets 502); 1 byte to 1 GiB, default 64 MiB (the HTTP layer's) */
  lk_gw_header *headers;     /* header = , in order */
  size_t n_headers;
  struct lk_gw_policy_rt *rt; /* set by lk_gw_runtime_attach */
} lk_gw_policy;

/* Staged rollout of a route's candidate policy (`next.KEY = value` keys). */
typedef struct lk_gw_rollout {
  double percent;      /* rollout-percent = ; share of requests that get the candidate, [0, 100];
                          default 10 */
  double margin;       /* rollout-margin = ; roll back when the candidate's bad-outcome rate
                          (5xx answered by the gateway, 504, deadline) exceeds the stable one's by
                          more than this many percentage points; default 5 */
  uint64_t min_sample; /* rollout-min-sample = ; requests each version needs before judging;
                          default 100 */
} lk_gw_rollout;

struct lk_gw_route_rt; /* runtime state of one route (opaque) */

/* [route NAME]. */
typedef struct lk_gw_route {
  char *name;
  char *host;      /* host = ; lower case, no port; NULL = any host (the default, or "*") */
  char *prefix;    /* prefix = ; path prefix, starts with '/'; default "/" */
  lk_gw_cluster *cluster; /* cluster = NAME (required) */
  lk_gw_policy policy;    /* the stable policy */
  lk_gw_policy *next;     /* the candidate (the stable policy with the next.* keys over it), or
                             NULL when the route has no next.* key */
  lk_gw_rollout rollout;
  int line;
  struct lk_gw_route_rt *rt; /* set by lk_gw_runtime_attach */
} lk_gw_route;

typedef struct lk_gw_config {
  char *path;           /* as given to the loader */
  uint64_t digest;      /* FNV-1a 64 of the file's bytes */
  uint64_t generation;  /* 0 until attached; then the runtime's count of attached configs (1, 2,
                           ...): the "version" /config reports */
  lk_gw_listen listen;
  lk_gw_admin admin;
  lk_gw_log log;
  lk_gw_cluster *clusters;
  size_t n_clusters;
  lk_gw_route *routes; /* in file order */
  size_t n_routes;
  /* private */
  struct lk_gw_runtime *runtime;
  int _Atomic refs;
} lk_gw_config;

/* Reads and validates the file at `path` completely: syntax, every value, references (a route's
 * cluster), duplicates (sections, keys other than endpoint and header, two routes with the same
 * host and prefix), every policy through lk_http_policy_validate and the protection configs'
 * own validators, and the files it names (lk_gw_config_check_files). Returns a new
 * configuration with one reference (the caller's), or NULL with "FILE:LINE: KEY: message" in
 * err (always NUL-terminated when cap > 0). */
lk_gw_config *lk_gw_config_load(const char *path, char *err, size_t cap);

/* The same from memory (`len` bytes, no NUL needed); `name` stands for the path in messages.
 * For tests, the fuzz target and POST /config with a body. It opens no file: the access log is
 * checked by lk_gw_config_load, or when it is opened. */
lk_gw_config *lk_gw_config_load_mem(const char *text, size_t len, const char *name, char *err,
                                    size_t cap);

/* Opens the access log file `c` names (not "-") for append and closes it again, as `nginx -t`
 * does: creates it when missing, never truncates. So a file that passes --check (or a reload's
 * validation) does not then fail to start on it. LK_OK, or LK_ESYS with
 * "FILE:LINE: access: cannot open PATH for append: REASON" in err. */
int lk_gw_config_check_files(const lk_gw_config *c, char *err, size_t cap);

/* Takes a reference (returns c). Any thread. */
lk_gw_config *lk_gw_config_ref(lk_gw_config *c);

/* Drops a reference; the last one frees the configuration and releases its runtime entries (an
 * entry no attached configuration uses any more is freed; its metrics series stay). NULL is a
 * no-op. Any thread. */
void lk_gw_config_unref(lk_gw_config *c);

/* The route for a request: among the routes whose host equals `host` (case-insensitive; a port in
 * `host` is ignored; NULL or "" matches only any-host routes), the one with the longest prefix
 * of `path`; if none, the any-host route with the longest prefix. Prefixes compare as bytes (no
 * segment rule, like nginx's `location` and Envoy's `prefix`). NULL if no route matches. */
const lk_gw_route *lk_gw_config_match(const lk_gw_config *c, const char *host, const char *path);

/* The configuration as INI text with every default spelled out (what GET /config shows), headed
 * by "# generation N, digest HEX, from PATH". Loading the text again gives an equal
 * configuration. malloc'd, NUL-terminated; the caller frees it. LK_OK, LK_EINVAL or LK_ENOMEM. */
int lk_gw_config_dump(const lk_gw_config *c, char **out, size_t *len);

/* The cluster named `name`, or NULL. */
const lk_gw_cluster *lk_gw_config_cluster(const lk_gw_config *c, const char *name);

/* ============================================================================================
 * The runtime
 * ========================================================================================== */

typedef struct lk_gw_runtime lk_gw_runtime;

/* Creates an empty runtime with its own metrics registry. `rng` (used during this call only)
 * seeds the runtime's own generator, which seeds each breaker's (open-wait jitter) and draws the
 * first health-probe offsets at attach time. NULL on no memory or a NULL rng. */
lk_gw_runtime *lk_gw_runtime_new(lk_rand *rng);

/* Frees the runtime and its metrics registry. Every configuration attached to it must have been
 * released first; otherwise nothing is freed and LK_ESTATE is returned. NULL: LK_OK. */
int lk_gw_runtime_free(lk_gw_runtime *rt);

/* Attaches `c` (not yet attached) to `rt`: finds or creates the runtime entry of every cluster,
 * endpoint, policy version and route; sets the rt pointers and the protection pointers of every
 * lk_gw_policy.http; gives `c` the next generation number. State carried over: ejections and
 * health of an endpoint listed again in a cluster of the same name; breaker / budget / limiter /
 * bulkhead of a route of the same name whose spec of that object is unchanged (a changed spec
 * gets a fresh object: its old state described another policy); rollout counters of a route
 * whose candidate version is unchanged (a rolled-back candidate stays rolled back until its
 * policy changes). `now` starts the new entries' clocks. LK_OK, or LK_ENOMEM / LK_ECONFIG /
 * LK_ESTATE (already attached) with a message in err; on failure `c` is unchanged and still
 * unattached. */
int lk_gw_runtime_attach(lk_gw_runtime *rt, lk_gw_config *c, int64_t now, char *err, size_t cap);

/* The registry /metrics renders (call lk_gw_runtime_refresh first). */
lk_metrics *lk_gw_runtime_metrics(lk_gw_runtime *rt);

/* Updates the gauges that are read rather than counted, as of `now`: ejected and healthy for
 * every endpoint in use, and retry ratio, budget consumption, breaker state and rollout share for
 * the routes of `current` (the configuration serving new requests; NULL: endpoints only); and
 * adds to linkd_gw_shared_local_decisions_total what the fleet-wide objects of those routes
 * decided locally since the last call. Call before rendering /metrics. */
void lk_gw_runtime_refresh(lk_gw_runtime *rt, const lk_gw_config *current, int64_t now);

/* Counts a reload attempt (linkd_gw_config_reloads_total{result="ok"|"error"}) and sets
 * linkd_gw_config_generation to current's generation (attach sets it too, so the first
 * configuration reads 1 before any reload). */
void lk_gw_runtime_record_reload(lk_gw_runtime *rt, const lk_gw_config *current, bool ok);

/* ============================================================================================
 * Endpoints: pick, outcome, ejection, health
 * ========================================================================================== */

/* What one upstream attempt said about the endpoint. */
typedef enum lk_gw_outcome {
  LK_GW_OK,           /* a reply that is not a 5xx (4xx included: the endpoint works) */
  LK_GW_5XX,          /* a 5xx status */
  LK_GW_CONNECT_FAIL, /* refused, connect / DNS / TLS failure or timeout, reset before a reply */
  LK_GW_OTHER         /* timeouts after sending, cancellation, local refusals: not counted */
} lk_gw_outcome;

/* The outcome for an attempt's failure kind and status (lk_http_attempt_info.failure, .status). */
lk_gw_outcome lk_gw_outcome_of(lk_failure kind, int status);

/* Picks an endpoint of `c` for an attempt. `tried` has bit i set for every endpoint this request
 * already used. Preference, each step uniform at random (rng) among its candidates:
 *   1. not ejected, not unhealthy, not tried;
 *   2. not ejected, not unhealthy (every such one tried: a retry goes to one of them again);
 *   3. panic: every endpoint is ejected or unhealthy, so any one not tried, else any (a cluster
 *      is never empty; sending somewhere beats failing everything, as Envoy's panic threshold).
 * An ejection that has expired by `now` ends here. Stores the index in *idx. LK_OK, or LK_EINVAL
 * (NULL argument or an unattached cluster). */
int lk_gw_cluster_pick(const lk_gw_cluster *c, int64_t now, lk_rand *rng, uint64_t tried,
                       int *idx);

/* Reports an attempt's outcome on endpoint `idx` at `now` taking `duration` ns; counts it in the
 * endpoint's metrics (attempts by result, duration histogram). An OK resets the consecutive
 * counters; a 5xx or a connection failure that reaches its threshold ejects the endpoint for
 * n * base_time (n = ejections in a row, capped at max_time) unless that would exceed
 * max_percent of the cluster ejected. Returns true when this report ejected the endpoint (the
 * proxy logs it). */
bool lk_gw_cluster_report(const lk_gw_cluster *c, int idx, int64_t now, int64_t duration,
                          lk_gw_outcome o);

/* Active health checks. Endpoints of a cluster with health.enabled start healthy. */
typedef enum lk_gw_health_change {
  LK_GW_HEALTH_SAME,
  LK_GW_HEALTH_DOWN, /* became unhealthy: not picked (unless panic) */
  LK_GW_HEALTH_UP    /* became healthy again */
} lk_gw_health_change;

/* Writes into idx[0..cap) the endpoints whose probe is due at `now` and schedules their next probe
 * one interval later (the first probe of a new endpoint is due at attach time + a uniform offset
 * in [0, interval) drawn from the runtime's generator, so probes of many endpoints spread out).
 * Returns the count (0 if the cluster has no health check). Call it with the current
 * configuration's clusters only (their interval applies). */
size_t lk_gw_cluster_health_due(const lk_gw_cluster *c, int64_t now, int *idx, size_t cap);

/* The earliest time a probe of `c` is due (INT64_MAX if it has no health check): for the timer. */
int64_t lk_gw_cluster_health_next(const lk_gw_cluster *c);

/* Records a probe result (ok: a 2xx within health.timeout). */
lk_gw_health_change lk_gw_cluster_health_report(const lk_gw_cluster *c, int idx, int64_t now,
                                                bool ok);

/* An endpoint's state, for /config, logs and tests. */
typedef struct lk_gw_endpoint_state {
  bool ejected;          /* as of `now` */
  int64_t ejected_until; /* valid when ejected */
  int ejections;         /* ejections in a row (the n of n * base_time) */
  uint64_t ejections_total;
  int consecutive_5xx;
  int consecutive_connect_failures;
  bool healthy;          /* true without a health check */
} lk_gw_endpoint_state;

int lk_gw_cluster_endpoint_state(const lk_gw_cluster *c, int idx, int64_t now,
                                 lk_gw_endpoint_state *out);

/* ============================================================================================
 * Staged rollout
 * ========================================================================================== */

/* Which policy a new request of route `r` gets: 0 = the stable policy, 1 = the candidate. Always
 * 0 without a candidate or once it was rolled back; otherwise 1 with probability
 * rollout.percent / 100 (one draw of rng in [0, 10000)). */
int lk_gw_route_choose(const lk_gw_route *r, lk_rand *rng);

/* The policy of a version from lk_gw_route_choose (the stable one for 0 or an unknown value). */
const lk_gw_policy *lk_gw_route_policy(const lk_gw_route *r, int version);

/* Why a rollout ended, filled when lk_gw_route_record returns true. */
typedef struct lk_gw_rollback {
  char version[LK_GW_VERSION_MAX]; /* the candidate rolled back */
  uint64_t stable_n, stable_bad, next_n, next_bad;
  double stable_rate, next_rate; /* percent */
} lk_gw_rollback;

/* Records a request's final outcome under `version` (bad: the gateway answered 5xx, or the
 * deadline ended the request; lk_gw_request_bad() says it). Once both versions have
 * rollout.min_sample requests and the candidate's bad rate exceeds the stable one's by more than
 * rollout.margin points, the candidate is rolled back: later choices give 0 to every request, and
 * this call returns true once with *why filled (the proxy logs it). */
bool lk_gw_route_record(const lk_gw_route *r, int version, bool bad, lk_gw_rollback *why);

/* Whether a request's outcome counts as bad for the rollout: a final status >= 500 (the
 * gateway's own 502/503/504 included) or status 0 (no answer). */
bool lk_gw_request_bad(int status);

/* The candidate's state: "none", "rolling" or "rolled-back". */
const char *lk_gw_route_rollout_state(const lk_gw_route *r);

/* ============================================================================================
 * Request metrics (per route and policy version; endpoint series come from cluster_report)
 * ========================================================================================== */

/* Why the gateway itself ended a request's call, refusing an attempt the call would otherwise
 * have made (linkd_gw_refused_total{reason}). */
typedef enum lk_gw_refusal {
  LK_GW_REFUSED_NONE,     /* not refused here: an answer, or a stop the policy made (attempts
                             exhausted, not retryable, upstream already retried, ...) */
  LK_GW_REFUSED_BREAKER,  /* "breaker": the breaker refused an attempt (LK_EBREAKER_OPEN) */
  LK_GW_REFUSED_BUDGET,   /* "budget": the retry budget refused a retry (LK_EBUDGET) */
  LK_GW_REFUSED_LIMITER,  /* "limiter": no limiter token in time (LK_ERATE_LIMITED) */
  LK_GW_REFUSED_BULKHEAD, /* "bulkhead": no bulkhead slot, queue full (LK_EBULKHEAD_FULL) */
  LK_GW_REFUSED_DEADLINE  /* "deadline": the deadline left no time for an attempt: expired on
                             arrival, ran out before an attempt could start (waiting for a
                             bulkhead slot), or too short for a retry's delay (LK_EDEADLINE
                             without an attempt cut short by it) */
} lk_gw_refusal;
#define LK_GW_REFUSALS 6

/* The refusal of a call that ended with `err` (lk_http_result_err) after the timeline `att`
 * (`n` entries, lk_http_result_attempts). */
lk_gw_refusal lk_gw_refusal_of(int err, const lk_http_attempt_info *att, size_t n);

/* The `reason` label of a refusal: "breaker", "budget", "limiter", "bulkhead", "deadline"
 * ("none" for LK_GW_REFUSED_NONE or an unknown value). */
const char *lk_gw_refusal_name(lk_gw_refusal r);

/* What the proxy observed of one downstream request. */
typedef struct lk_gw_request_obs {
  int status;               /* sent to the caller; 0 if the connection closed before an answer */
  lk_failure failure;       /* the logical call's final kind (LK_F_NONE on success) */
  int attempts;             /* upstream attempts made (0: answered without one, e.g. an expired
                               deadline's 504; an attempt a protection refused is not one) */
  lk_gw_refusal refused;    /* the gateway refused an attempt and that ended the call */
  int64_t duration;         /* ns, request head read -> response head written */
  int64_t queue_wait;       /* ns spent waiting for a bulkhead slot or limiter token; -1: none */
  bool deadline_exceeded;   /* answered 504 for the deadline (on arrival or later) */
  bool streamed;            /* the body was larger than body_buffer and streamed */
  bool streamed_not_retried; /* streamed and a retry was wanted but not made */
  bool key_injected;        /* the gateway added an Idempotency-Key */
} lk_gw_request_obs;

/* Counts a request in its route's series (labels route, policy = version label):
 * linkd_gw_requests_total{code="2xx"...}, linkd_gw_attempts_total, linkd_gw_retries_total,
 * linkd_gw_request_duration_seconds, linkd_gw_queue_wait_seconds, linkd_gw_deadline_exceeded_total,
 * linkd_gw_streamed_total, linkd_gw_streamed_not_retried_total, linkd_gw_keys_injected_total,
 * linkd_gw_refused_total{reason}. Lock-free. */
void lk_gw_route_observe(const lk_gw_route *r, int version, const lk_gw_request_obs *obs);

/* A request that matched no route (404) or was refused before routing (4xx for a bad request):
 * linkd_gw_unrouted_total{code}. */
void lk_gw_runtime_observe_unrouted(lk_gw_runtime *rt, int status);

#endif
