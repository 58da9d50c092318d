/* SPDX-License-Identifier: MIT */
/* Seed 001's observation table as one bundle of registry series per client. */
#include <linkd/callmetrics.h>
#include <linkd/error.h>

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Error codes are contiguous from 0 downwards; one extra slot for codes not in the table. */
#define LK_ERR_COUNT_(name, num, msg) +1
enum { N_ERRS = 0 LK_ERRNO_MAP(LK_ERR_COUNT_) };
#undef LK_ERR_COUNT_

#define PPM 1e6

struct lk_call_metrics {
  lk_metrics *m;
  char *client;
  lk_counter *requests, *attempts, *retries, *timeouts, *downstream_5xx;
  lk_counter *rate_limited_downstream, *rate_limited_local;
  lk_counter *calls_ok, *calls_failed, *first_attempt_ok, *resends;
  lk_gauge *active, *bulkhead_depth, *budget_consumption, *budget_remaining;
  lk_gauge *breaker[LK_CM_BREAKER__COUNT];
  lk_counter *transitions[LK_CM_BREAKER__COUNT];
  lk_hist *call_hist, *attempt_hist, *bulkhead_wait;
  /* Per-kind and per-error series are registered on first use: most never happen. */
  _Atomic(lk_counter *) by_kind[LK_F__COUNT];
  _Atomic(lk_counter *) by_err[N_ERRS + 1];
  _Atomic(lk_counter *) fallback_by_err[N_ERRS + 1];
  pthread_mutex_t breaker_mu;
};

static const char *const breaker_names[LK_CM_BREAKER__COUNT] = {
    "closed", "open", "half_open", "disabled", "forced_open", "metrics_only"};

const char *lk_cm_breaker_state_name(lk_cm_breaker_state state) {
  return (unsigned)state < LK_CM_BREAKER__COUNT ? breaker_names[state] : "unknown";
}

static lk_counter *counter(lk_call_metrics *cm, const char *name, const char *help, const char *key,
                           const char *value, bool *ok) {
  const char *labels[] = {"client", cm->client, key, value, NULL};
  lk_counter *c = lk_metrics_counter(cm->m, name, help, labels);
  *ok = *ok && c;
  return c;
}

static lk_gauge *gauge(lk_call_metrics *cm, const char *name, const char *help, double scale,
                       const char *key, const char *value, bool *ok) {
  const char *labels[] = {"client", cm->client, key, value, NULL};
  lk_gauge *g = lk_metrics_gauge_scaled(cm->m, name, help, labels, scale);
  *ok = *ok && g;
  return g;
}

static lk_hist *histogram(lk_call_metrics *cm, const char *name, const char *help, bool *ok) {
  const char *labels[] = {"client", cm->client, NULL};
  lk_hist *h = lk_metrics_histogram(cm->m, name, help, labels);
  *ok = *ok && h;
  return h;
}

static bool register_all(lk_call_metrics *cm) {
  bool ok = true;
  cm->requests = counter(cm, "linkd_client_requests_total", "Original (logical) requests started.",
                         NULL, NULL, &ok);
  cm->attempts = counter(cm, "linkd_client_attempts_total",
                         "Attempts sent, first attempts and retries.", NULL, NULL, &ok);
  cm->retries = counter(cm, "linkd_client_retries_total", "Retry attempts (attempt number > 1).",
                        NULL, NULL, &ok);
  cm->timeouts = counter(cm, "linkd_client_attempt_timeouts_total",
                         "Attempts that ended in a timeout.", NULL, NULL, &ok);
  cm->downstream_5xx = counter(cm, "linkd_client_downstream_5xx_total",
                               "Attempts answered with a 5xx status.", NULL, NULL, &ok);
  static const char rl_help[] =
      "Rate limiting: 429 answers from downstream, or calls refused by the local limiter.";
  cm->rate_limited_downstream =
      counter(cm, "linkd_client_rate_limited_total", rl_help, "source", "downstream", &ok);
  cm->rate_limited_local =
      counter(cm, "linkd_client_rate_limited_total", rl_help, "source", "local", &ok);
  static const char calls_help[] = "Logical calls finished, by final result.";
  cm->calls_ok = counter(cm, "linkd_client_calls_total", calls_help, "result", "success", &ok);
  cm->calls_failed = counter(cm, "linkd_client_calls_total", calls_help, "result", "failure", &ok);
  cm->first_attempt_ok = counter(cm, "linkd_client_first_attempt_success_total",
                                 "Calls that succeeded on their first attempt.", NULL, NULL, &ok);
  cm->resends = counter(cm, "linkd_client_resends_detected_total",
                        "Re-sends of an already seen request detected.", NULL, NULL, &ok);
  cm->active = gauge(cm, "linkd_client_active_calls", "Calls started and not yet finished.", 1.0,
                     NULL, NULL, &ok);
  cm->bulkhead_depth = gauge(cm, "linkd_client_bulkhead_queue_depth",
                             "Callers waiting for a bulkhead slot.", 1.0, NULL, NULL, &ok);
  cm->budget_consumption =
      gauge(cm, "linkd_client_retry_budget_consumption_ratio",
            "Share of the retry budget in use (0 to 1).", PPM, NULL, NULL, &ok);
  cm->budget_remaining = gauge(cm, "linkd_client_retry_budget_remaining",
                               "Retries or tokens left in the retry budget, in the budget's unit.",
                               1.0, NULL, NULL, &ok);
  for (int s = 0; s < LK_CM_BREAKER__COUNT; s++) {
    cm->breaker[s] = gauge(cm, "linkd_client_breaker_state",
                           "1 for the circuit breaker's current state, 0 for the others.", 1.0,
                           "state", breaker_names[s], &ok);
    cm->transitions[s] =
        counter(cm, "linkd_client_breaker_transitions_total",
                "Circuit breaker transitions, by the state entered.", "to", breaker_names[s], &ok);
  }
  cm->call_hist = histogram(cm, "linkd_client_call_duration_seconds",
                            "Latency of whole logical calls, all attempts and waits.", &ok);
  cm->attempt_hist =
      histogram(cm, "linkd_client_attempt_duration_seconds", "Latency of single attempts.", &ok);
  cm->bulkhead_wait = histogram(cm, "linkd_client_bulkhead_wait_seconds",
                                "Time spent waiting for a bulkhead slot.", &ok);
  return ok;
}

lk_call_metrics *lk_call_metrics_new(lk_metrics *m, const char *client) {
  if (!m || !client)
    return NULL;
  lk_call_metrics *cm = calloc(1, sizeof *cm);
  if (!cm)
    return NULL;
  cm->m = m;
  cm->client = strdup(client);
  for (int i = 0; i < LK_F__COUNT; i++)
    atomic_init(&cm->by_kind[i], NULL);
  for (int i = 0; i <= N_ERRS; i++)
    atomic_init(&cm->by_err[i], NULL);
  if (!cm->client || pthread_mutex_init(&cm->breaker_mu, NULL) != 0) {
    free(cm->client);
    free(cm);
    return NULL;
  }
  if (!register_all(cm)) {
    lk_call_metrics_free(cm);
    return NULL;
  }
  /* A bundle that is (re)created for a client whose breaker state is unknown yet says CLOSED
   * only if no state was set before (another bundle may share the series). */
  bool any = false;
  for (int s = 0; s < LK_CM_BREAKER__COUNT; s++)
    any = any || lk_gauge_value(cm->breaker[s]) != 0;
  if (!any)
    lk_gauge_set(cm->breaker[LK_CM_BREAKER_CLOSED], 1);
  return cm;
}

void lk_call_metrics_free(lk_call_metrics *cm) {
  if (!cm)
    return;
  pthread_mutex_destroy(&cm->breaker_mu);
  free(cm->client);
  free(cm);
}

/* Registers the labelled counter once; racing threads get the same series from the registry. */
static lk_counter *lazy_counter(lk_call_metrics *cm, _Atomic(lk_counter *) *slot, const char *name,
                                const char *help, const char *key, const char *value) {
  lk_counter *c = atomic_load_explicit(slot, memory_order_acquire);
  if (c)
    return c;
  bool ok = true;
  c = counter(cm, name, help, key, value, &ok);
  if (c)
    atomic_store_explicit(slot, c, memory_order_release);
  return c;
}

/* The by_err slot of an error code: -err for a code in the table, N_ERRS (the UNKNOWN series)
 * for LK_OK and anything else. err > -N_ERRS is tested before negating: -INT_MIN overflows. */
static int err_slot(int err, const char *name) {
  return err < 0 && err > -N_ERRS && strcmp(name, "UNKNOWN") != 0 ? -err : N_ERRS;
}

void lk_call_metrics_call_start(lk_call_metrics *cm) {
  if (!cm)
    return;
  lk_counter_add(cm->requests, 1);
  lk_gauge_add(cm->active, 1);
}

#define TIMEOUT_KINDS                                                                              \
  (LK_FAILURE_BIT(LK_F_DNS_TIMEOUT) | LK_FAILURE_BIT(LK_F_CONNECT_TIMEOUT) |                       \
   LK_FAILURE_BIT(LK_F_TLS_TIMEOUT) | LK_FAILURE_BIT(LK_F_POOL_TIMEOUT) |                          \
   LK_FAILURE_BIT(LK_F_WRITE_TIMEOUT) | LK_FAILURE_BIT(LK_F_READ_TIMEOUT) |                        \
   LK_FAILURE_BIT(LK_F_FIRST_BYTE_TIMEOUT) | LK_FAILURE_BIT(LK_F_IDLE_TIMEOUT) |                   \
   LK_FAILURE_BIT(LK_F_DEADLINE_EXCEEDED))
#define SERVER_5XX_KINDS                                                                           \
  (LK_FAILURE_BIT(LK_F_SERVER_5XX) | LK_FAILURE_BIT(LK_F_HTTP_500) |                               \
   LK_FAILURE_BIT(LK_F_HTTP_502) | LK_FAILURE_BIT(LK_F_HTTP_503) | LK_FAILURE_BIT(LK_F_HTTP_504))

void lk_call_metrics_attempt_ex(lk_call_metrics *cm, int attempt_number, lk_failure kind,
                                int status, int64_t duration_ns) {
  if (!cm)
    return;
  lk_counter_add(cm->attempts, 1);
  if (attempt_number > 1)
    lk_counter_add(cm->retries, 1);
  uint64_t bit = (unsigned)kind < LK_F__COUNT ? LK_FAILURE_BIT(kind) : 0;
  if (bit & TIMEOUT_KINDS)
    lk_counter_add(cm->timeouts, 1);
  if ((status >= 500 && status <= 599) || (bit & SERVER_5XX_KINDS))
    lk_counter_add(cm->downstream_5xx, 1);
  if (status == 429 || kind == LK_F_TOO_MANY_REQUESTS)
    lk_counter_add(cm->rate_limited_downstream, 1);
  if (kind != LK_F_NONE && bit) {
    lk_counter_add(lazy_counter(cm, &cm->by_kind[kind], "linkd_client_attempt_failures_total",
                                "Failed attempts, by failure kind.", "kind", lk_failure_name(kind)),
                   1);
  }
  if (duration_ns >= 0)
    lk_hist_record(cm->attempt_hist, duration_ns);
}

void lk_call_metrics_attempt(lk_call_metrics *cm, int attempt_number, lk_failure kind, int status) {
  lk_call_metrics_attempt_ex(cm, attempt_number, kind, status, -1);
}

void lk_call_metrics_call_end(lk_call_metrics *cm, bool success, bool first_attempt_success,
                              int attempts, int64_t latency_ns, int err) {
  (void)attempts; /* counted per attempt by lk_call_metrics_attempt */
  if (!cm)
    return;
  lk_gauge_add(cm->active, -1);
  if (success) {
    lk_counter_add(cm->calls_ok, 1);
  } else {
    lk_counter_add(cm->calls_failed, 1);
    const char *name = lk_err_name(err);
    int slot = err_slot(err, name);
    bool known = slot != N_ERRS;
    lk_counter_add(lazy_counter(cm, &cm->by_err[slot], "linkd_client_call_errors_total",
                                "Failed calls, by final error code.", "error",
                                known ? name : "UNKNOWN"),
                   1);
  }
  if (first_attempt_success)
    lk_counter_add(cm->first_attempt_ok, 1);
  if (err == LK_ERATE_LIMITED)
    lk_counter_add(cm->rate_limited_local, 1);
  if (latency_ns >= 0)
    lk_hist_record(cm->call_hist, latency_ns);
}

void lk_call_metrics_fallback(lk_call_metrics *cm, int err) {
  if (!cm)
    return;
  const char *name = lk_err_name(err);
  int slot = err_slot(err, name);
  bool known = slot != N_ERRS;
  lk_counter_add(lazy_counter(cm, &cm->fallback_by_err[slot], "linkd_client_fallbacks_total",
                              "Calls whose result came from the fallback, by the error it "
                              "replaced.",
                              "cause", known ? name : "UNKNOWN"),
                 1);
}

void lk_call_metrics_resend_detected(lk_call_metrics *cm) {
  if (cm)
    lk_counter_add(cm->resends, 1);
}

static void set_state_locked(lk_call_metrics *cm, lk_cm_breaker_state state) {
  for (int s = 0; s < LK_CM_BREAKER__COUNT; s++)
    lk_gauge_set(cm->breaker[s], s == (int)state);
}

void lk_call_metrics_breaker_state(lk_call_metrics *cm, lk_cm_breaker_state state) {
  if (!cm || (unsigned)state >= LK_CM_BREAKER__COUNT)
    return;
  pthread_mutex_lock(&cm->breaker_mu);
  set_state_locked(cm, state);
  pthread_mutex_unlock(&cm->breaker_mu);
}

void lk_call_metrics_breaker_transition(lk_call_metrics *cm, lk_cm_breaker_state from,
                                        lk_cm_breaker_state to) {
  (void)from; /* the exported counter is keyed by the state entered */
  if (!cm || (unsigned)to >= LK_CM_BREAKER__COUNT)
    return;
  pthread_mutex_lock(&cm->breaker_mu);
  lk_counter_add(cm->transitions[to], 1);
  set_state_locked(cm, to);
  pthread_mutex_unlock(&cm->breaker_mu);
}

void lk_call_metrics_bulkhead_queue_depth(lk_call_metrics *cm, int64_t depth) {
  if (cm)
    lk_gauge_set(cm->bulkhead_depth, depth);
}

void lk_call_metrics_bulkhead_wait(lk_call_metrics *cm, int64_t wait_ns) {
  if (cm && wait_ns >= 0)
    lk_hist_record(cm->bulkhead_wait, wait_ns);
}

void lk_call_metrics_budget_consumption(lk_call_metrics *cm, double consumption) {
  if (!cm || isnan(consumption))
    return;
  double c = consumption < 0 ? 0 : consumption > 1 ? 1 : consumption;
  lk_gauge_set(cm->budget_consumption, (int64_t)llround(c * PPM));
}

void lk_call_metrics_budget_remaining(lk_call_metrics *cm, int64_t remaining) {
  if (cm)
    lk_gauge_set(cm->budget_remaining, remaining);
}

lk_hist *lk_call_metrics_attempt_hist(const lk_call_metrics *cm) {
  return cm ? cm->attempt_hist : NULL;
}

lk_hist *lk_call_metrics_call_hist(const lk_call_metrics *cm) { return cm ? cm->call_hist : NULL; }

static double ratio(uint64_t a, uint64_t b) { return b ? (double)a / (double)b : 0.0; }

int lk_call_metrics_snapshot(const lk_call_metrics *cm, lk_call_metrics_snap *out) {
  if (!cm || !out)
    return LK_EINVAL;
  memset(out, 0, sizeof *out);
  out->requests = lk_counter_value(cm->requests);
  out->attempts = lk_counter_value(cm->attempts);
  out->retries = lk_counter_value(cm->retries);
  out->timeouts = lk_counter_value(cm->timeouts);
  out->downstream_5xx = lk_counter_value(cm->downstream_5xx);
  out->rate_limited_downstream = lk_counter_value(cm->rate_limited_downstream);
  out->rate_limited_local = lk_counter_value(cm->rate_limited_local);
  out->calls_ok = lk_counter_value(cm->calls_ok);
  out->calls_failed = lk_counter_value(cm->calls_failed);
  out->first_attempt_ok = lk_counter_value(cm->first_attempt_ok);
  out->resends = lk_counter_value(cm->resends);
  out->active = lk_gauge_value(cm->active);
  uint64_t ended = out->calls_ok + out->calls_failed;
  out->retry_ratio = ratio(out->retries, out->requests);
  out->timeout_rate = ratio(out->timeouts, out->attempts);
  out->success_rate = ratio(out->calls_ok, ended);
  out->first_attempt_success_rate = ratio(out->first_attempt_ok, ended);
  out->attempts_per_call = ratio(out->attempts, ended);
  out->call_p50_ns = lk_hist_percentile(cm->call_hist, 50);
  out->call_p99_ns = lk_hist_percentile(cm->call_hist, 99);
  out->call_p999_ns = lk_hist_percentile(cm->call_hist, 99.9);
  out->breaker_state = LK_CM_BREAKER_CLOSED;
  for (int s = 0; s < LK_CM_BREAKER__COUNT; s++)
    if (lk_gauge_value(cm->breaker[s]) != 0)
      out->breaker_state = (lk_cm_breaker_state)s;
  out->bulkhead_queue_depth = lk_gauge_value(cm->bulkhead_depth);
  out->budget_consumption = (double)lk_gauge_value(cm->budget_consumption) / PPM;
  for (int e = 0; e <= N_ERRS; e++) {
    lk_counter *c = atomic_load_explicit(&cm->fallback_by_err[e], memory_order_acquire);
    if (c)
      out->fallbacks += lk_counter_value(c);
  }
  return LK_OK;
}
