/* SPDX-License-Identifier: MIT */
/* The gateway runtime with a fake clock (plain `now` values) and seeded or scripted generators:
 * endpoint pick, outlier ejection and its growth, cap and share, health transitions, staged
 * rollout and rollback, state carried across a reload, and the metrics series. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gw_config.h"

#include <linkd/error.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S(x) ((int64_t)(x) * 1000000000)

/* A generator that returns scripted draws (mod bound), then 0. */
typedef struct script_rand {
  lk_rand base;
  const uint64_t *v;
  size_t n, i;
} script_rand;

static uint64_t script_below(lk_rand *r, uint64_t bound) {
  script_rand *s = (script_rand *)r;
  uint64_t x = s->i < s->n ? s->v[s->i++] : 0;
  return bound ? x % bound : 0;
}
static uint64_t script_next(lk_rand *r) { return script_below(r, UINT64_MAX); }
static void script_init(script_rand *s, const uint64_t *v, size_t n) {
  s->base.below = script_below;
  s->base.next64 = script_next;
  s->v = v;
  s->n = n;
  s->i = 0;
}

static lk_gw_runtime *new_runtime(void) {
  lk_rand_fast seed;
  lk_rand_fast_seeded(&seed, 42);
  lk_gw_runtime *rt = lk_gw_runtime_new(&seed.base);
  assert_non_null(rt);
  return rt;
}

static lk_gw_config *attach(lk_gw_runtime *rt, const char *text, int64_t now) {
  char err[512];
  lk_gw_config *c = lk_gw_config_load_mem(text, strlen(text), "gw.conf", err, sizeof err);
  if (!c)
    fail_msg("%s", err);
  if (lk_gw_runtime_attach(rt, c, now, err, sizeof err) != LK_OK)
    fail_msg("%s", err);
  return c;
}

static const char *three = "[cluster b]\n"
                           "endpoint = 127.0.0.1:1001\n"
                           "endpoint = 127.0.0.1:1002\n"
                           "endpoint = 127.0.0.1:1003\n"
                           "eject-5xx = 2\n"
                           "eject-connect-failures = 1\n"
                           "eject-base-time = 10s\n"
                           "eject-max-time = 25s\n"
                           "eject-max-percent = 67\n"
                           "[route r]\ncluster = b\n";

static void test_pick_prefers_untried(void **state) {
  (void)state;
  lk_gw_runtime *rt = new_runtime();
  lk_gw_config *c = attach(rt, three, 0);
  const lk_gw_cluster *k = &c->clusters[0];
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, 7);
  int seen[3] = {0};
  for (int i = 0; i < 300; i++) {
    int idx = -1;
    assert_int_equal(lk_gw_cluster_pick(k, 0, &r.base, 0, &idx), LK_OK);
    assert_in_range(idx, 0, 2);
    seen[idx]++;
    /* With one endpoint tried, the retry goes to another one, every time. */
    int next = -1;
    assert_int_equal(lk_gw_cluster_pick(k, 0, &r.base, UINT64_C(1) << idx, &next), LK_OK);
    assert_int_not_equal(next, idx);
    /* With two tried, the third. */
    int third = -1;
    uint64_t tried = (UINT64_C(1) << idx) | (UINT64_C(1) << next);
    assert_int_equal(lk_gw_cluster_pick(k, 0, &r.base, tried, &third), LK_OK);
    assert_int_equal(third, 3 - idx - next);
    /* All tried: any of them again. */
    assert_int_equal(lk_gw_cluster_pick(k, 0, &r.base, 7, &third), LK_OK);
    assert_in_range(third, 0, 2);
  }
  for (int i = 0; i < 3; i++)
    assert_in_range(seen[i], 60, 140); /* uniform: 100 each expected */
  int idx;
  assert_int_equal(lk_gw_cluster_pick(NULL, 0, &r.base, 0, &idx), LK_EINVAL);
  lk_gw_config_unref(c);
  assert_int_equal(lk_gw_runtime_free(rt), LK_OK);
}

static void test_ejection_grows_caps_and_expires(void **state) {
  (void)state;
  lk_gw_runtime *rt = new_runtime();
  lk_gw_config *c = attach(rt, three, 0);
  const lk_gw_cluster *k = &c->clusters[0];
  lk_gw_endpoint_state st;
  /* One 5xx is not enough (eject-5xx = 2); an OK in between resets the count. */
  assert_false(lk_gw_cluster_report(k, 0, S(1), 1000, LK_GW_5XX));
  assert_false(lk_gw_cluster_report(k, 0, S(1), 1000, LK_GW_OK));
  assert_false(lk_gw_cluster_report(k, 0, S(1), 1000, LK_GW_5XX));
  assert_true(lk_gw_cluster_report(k, 0, S(1), 1000, LK_GW_5XX));
  assert_int_equal(lk_gw_cluster_endpoint_state(k, 0, S(1), &st), LK_OK);
  assert_true(st.ejected);
  assert_int_equal(st.ejected_until, S(11)); /* 1 * base */
  assert_int_equal(st.ejections, 1);
  /* Ejected endpoints are not picked while others are usable. */
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, 3);
  for (int i = 0; i < 50; i++) {
    int idx;
    assert_int_equal(lk_gw_cluster_pick(k, S(5), &r.base, 0, &idx), LK_OK);
    assert_int_not_equal(idx, 0);
  }
  /* Back at 11 s; the second ejection in a row lasts 2 * base = 20 s, the third is capped at
   * eject-max-time = 25 s. */
  assert_int_equal(lk_gw_cluster_endpoint_state(k, 0, S(11), &st), LK_OK);
  assert_false(st.ejected);
  assert_true(lk_gw_cluster_report(k, 0, S(12), 0, LK_GW_CONNECT_FAIL));
  assert_int_equal(lk_gw_cluster_endpoint_state(k, 0, S(12), &st), LK_OK);
  assert_int_equal(st.ejected_until, S(32));
  assert_int_equal(st.ejections, 2);
  assert_true(lk_gw_cluster_report(k, 0, S(33), 0, LK_GW_CONNECT_FAIL));
  assert_int_equal(lk_gw_cluster_endpoint_state(k, 0, S(33), &st), LK_OK);
  assert_int_equal(st.ejected_until, S(58));
  assert_int_equal(st.ejections_total, 3);
  /* A quiet spell of eject-max-time after the ejection ends starts again at 1 * base. */
  assert_true(lk_gw_cluster_report(k, 0, S(58) + S(25), 0, LK_GW_CONNECT_FAIL));
  assert_int_equal(lk_gw_cluster_endpoint_state(k, 0, S(83), &st), LK_OK);
  assert_int_equal(st.ejected_until, S(93));
  assert_int_equal(st.ejections, 1);
  /* OTHER outcomes do not count. */
  for (int i = 0; i < 10; i++)
    assert_false(lk_gw_cluster_report(k, 1, S(84), 0, LK_GW_OTHER));
  lk_gw_config_unref(c);
  lk_gw_runtime_free(rt);
}

static void test_max_percent_and_panic(void **state) {
  (void)state;
  lk_gw_runtime *rt = new_runtime();
  lk_gw_config *c = attach(rt, three, 0); /* 67 % of 3: two may be ejected */
  const lk_gw_cluster *k = &c->clusters[0];
  assert_true(lk_gw_cluster_report(k, 0, 0, 0, LK_GW_CONNECT_FAIL));
  assert_true(lk_gw_cluster_report(k, 1, 0, 0, LK_GW_CONNECT_FAIL));
  assert_false(lk_gw_cluster_report(k, 2, 0, 0, LK_GW_CONNECT_FAIL)); /* the share is full */
  lk_gw_endpoint_state st;
  lk_gw_cluster_endpoint_state(k, 2, 0, &st);
  assert_false(st.ejected);
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, 5);
  int idx;
  for (int i = 0; i < 20; i++) {
    assert_int_equal(lk_gw_cluster_pick(k, S(1), &r.base, 0, &idx), LK_OK);
    assert_int_equal(idx, 2);
  }
  /* Tried the only usable one: a retry goes to it again rather than to an ejected one. */
  assert_int_equal(lk_gw_cluster_pick(k, S(1), &r.base, 4, &idx), LK_OK);
  assert_int_equal(idx, 2);
  lk_gw_config_unref(c);
  /* One endpoint, ejected: panic mode still sends to it. */
  c = attach(rt, "[cluster one]\nendpoint = 127.0.0.1:9\neject-connect-failures = 1\n"
                 "eject-max-percent = 1\n[route r]\ncluster = one\n",
             0);
  k = &c->clusters[0];
  assert_true(lk_gw_cluster_report(k, 0, 0, 0, LK_GW_CONNECT_FAIL)); /* at least one */
  assert_int_equal(lk_gw_cluster_pick(k, S(1), &r.base, 0, &idx), LK_OK);
  assert_int_equal(idx, 0);
  assert_int_equal(lk_gw_cluster_pick(k, S(1), &r.base, 1, &idx), LK_OK);
  assert_int_equal(idx, 0);
  lk_gw_config_unref(c);
  /* eject-max-percent = 0 never ejects; eject-5xx = 0 ignores 5xx. */
  c = attach(rt, "[cluster z]\nendpoint = 127.0.0.1:9\nendpoint = 127.0.0.1:10\n"
                 "eject-max-percent = 0\neject-5xx = 0\n[route r]\ncluster = z\n",
             0);
  k = &c->clusters[0];
  for (int i = 0; i < 10; i++)
    assert_false(lk_gw_cluster_report(k, 0, 0, 0, LK_GW_CONNECT_FAIL));
  lk_gw_config_unref(c);
  assert_int_equal(lk_gw_runtime_free(rt), LK_OK);
}

static void test_outcome_of(void **state) {
  (void)state;
  assert_int_equal(lk_gw_outcome_of(LK_F_NONE, 200), LK_GW_OK);
  assert_int_equal(lk_gw_outcome_of(LK_F_CLIENT_4XX, 404), LK_GW_OK);
  assert_int_equal(lk_gw_outcome_of(LK_F_HTTP_503, 503), LK_GW_5XX);
  assert_int_equal(lk_gw_outcome_of(LK_F_SERVER_5XX, 501), LK_GW_5XX);
  assert_int_equal(lk_gw_outcome_of(LK_F_CONNECT_REFUSED, 0), LK_GW_CONNECT_FAIL);
  assert_int_equal(lk_gw_outcome_of(LK_F_CONNECT_TIMEOUT, 0), LK_GW_CONNECT_FAIL);
  assert_int_equal(lk_gw_outcome_of(LK_F_RESET_AFTER_SEND, 0), LK_GW_CONNECT_FAIL);
  assert_int_equal(lk_gw_outcome_of(LK_F_READ_TIMEOUT, 0), LK_GW_OTHER);
  assert_int_equal(lk_gw_outcome_of(LK_F_CANCELLED, 0), LK_GW_OTHER);
}

/* Which local refusal ended a call, from its error and timeline (lk_http_result_*). */
static void test_refusal_of(void **state) {
  (void)state;
  assert_int_equal(lk_gw_refusal_of(LK_OK, NULL, 0), LK_GW_REFUSED_NONE);
  assert_int_equal(lk_gw_refusal_of(LK_EATTEMPTS, NULL, 0), LK_GW_REFUSED_NONE);
  assert_int_equal(lk_gw_refusal_of(LK_ENOTRETRYABLE, NULL, 0), LK_GW_REFUSED_NONE);
  assert_int_equal(lk_gw_refusal_of(LK_EHTTP, NULL, 0), LK_GW_REFUSED_NONE);
  assert_int_equal(lk_gw_refusal_of(LK_EBREAKER_OPEN, NULL, 0), LK_GW_REFUSED_BREAKER);
  assert_int_equal(lk_gw_refusal_of(LK_EBUDGET, NULL, 0), LK_GW_REFUSED_BUDGET);
  assert_int_equal(lk_gw_refusal_of(LK_ERATE_LIMITED, NULL, 0), LK_GW_REFUSED_LIMITER);
  assert_int_equal(lk_gw_refusal_of(LK_EBULKHEAD_FULL, NULL, 0), LK_GW_REFUSED_BULKHEAD);
  /* the deadline: before any attempt, or while one waited to be admitted */
  assert_int_equal(lk_gw_refusal_of(LK_EDEADLINE, NULL, 0), LK_GW_REFUSED_DEADLINE);
  lk_http_attempt_info a[3];
  memset(a, 0, sizeof a);
  a[0].phase = LK_PHASE_QUEUED;
  a[0].failure = LK_F_DEADLINE_EXCEEDED;
  a[0].decision.reason = LK_REASON_NOT_RETRYABLE;
  assert_int_equal(lk_gw_refusal_of(LK_EDEADLINE, a, 1), LK_GW_REFUSED_DEADLINE);
  /* an attempt the deadline cut short is the upstream's slowness */
  a[0].phase = LK_PHASE_WAIT;
  a[0].failure = LK_F_READ_TIMEOUT;
  a[0].decision.reason = LK_REASON_DEADLINE;
  assert_int_equal(lk_gw_refusal_of(LK_EDEADLINE, a, 1), LK_GW_REFUSED_NONE);
  /* a retry whose delay does not fit is refused; a hedge cancelled after it does not decide */
  a[0].phase = LK_PHASE_DONE;
  a[0].failure = LK_F_HTTP_503;
  a[0].status = 503;
  a[0].decision.reason = LK_REASON_DELAY_TOO_LONG;
  a[1].phase = LK_PHASE_WAIT;
  a[1].failure = LK_F_CANCELLED;
  a[1].decision.reason = LK_REASON_NOT_RETRYABLE;
  assert_int_equal(lk_gw_refusal_of(LK_EDEADLINE, a, 2), LK_GW_REFUSED_DEADLINE);
  a[0].decision.reason = LK_REASON_NO_TIME_FOR_ATTEMPT;
  assert_int_equal(lk_gw_refusal_of(LK_EDEADLINE, a, 2), LK_GW_REFUSED_DEADLINE);
  a[0].decision.reason = LK_REASON_DEADLINE;
  assert_int_equal(lk_gw_refusal_of(LK_EDEADLINE, a, 2), LK_GW_REFUSED_NONE);
  assert_string_equal(lk_gw_refusal_name(LK_GW_REFUSED_BREAKER), "breaker");
  assert_string_equal(lk_gw_refusal_name(LK_GW_REFUSED_BUDGET), "budget");
  assert_string_equal(lk_gw_refusal_name(LK_GW_REFUSED_LIMITER), "limiter");
  assert_string_equal(lk_gw_refusal_name(LK_GW_REFUSED_BULKHEAD), "bulkhead");
  assert_string_equal(lk_gw_refusal_name(LK_GW_REFUSED_DEADLINE), "deadline");
  assert_string_equal(lk_gw_refusal_name(LK_GW_REFUSED_NONE), "none");
}

static void test_state_survives_reload(void **state) {
  (void)state;
  lk_gw_runtime *rt = new_runtime();
  lk_gw_config *a = attach(rt, three, 0);
  assert_int_equal(a->generation, 1);
  assert_true(lk_gw_cluster_report(&a->clusters[0], 1, S(1), 0, LK_GW_CONNECT_FAIL));
  lk_budget *budget_a = a->routes[0].policy.http.budget;
  lk_breaker *breaker_a = a->routes[0].policy.http.breaker;
  assert_non_null(budget_a);
  assert_non_null(breaker_a);
  /* The same cluster with endpoint 1002 listed first and 1001 dropped; the route's policy
   * changes its attempts but not its budget or breaker spec. */
  lk_gw_config *b = attach(rt,
                           "[cluster b]\nendpoint = 127.0.0.1:1002\nendpoint = 127.0.0.1:1003\n"
                           "[route r]\ncluster = b\nmax-attempts = 2\n",
                           S(2));
  assert_int_equal(b->generation, 2);
  lk_gw_endpoint_state st;
  assert_int_equal(lk_gw_cluster_endpoint_state(&b->clusters[0], 0, S(2), &st), LK_OK);
  assert_true(st.ejected); /* 127.0.0.1:1002, ejected under the old configuration */
  assert_int_equal(st.ejected_until, S(11));
  assert_ptr_equal(b->routes[0].policy.http.budget, budget_a);
  assert_ptr_equal(b->routes[0].policy.http.breaker, breaker_a);
  /* The old configuration still works for its requests in flight. */
  int idx;
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, 1);
  assert_int_equal(lk_gw_cluster_pick(&a->clusters[0], S(2), &r.base, 0, &idx), LK_OK);
  assert_int_not_equal(idx, 1);
  lk_gw_config_unref(a);
  /* A changed budget spec gets a fresh budget. */
  lk_gw_config *c = attach(rt, "[cluster b]\nendpoint = 127.0.0.1:1002\n"
                               "[route r]\ncluster = b\nbudget = ratio:5%\n",
                           S(3));
  assert_ptr_not_equal(c->routes[0].policy.http.budget, budget_a);
  assert_ptr_equal(c->routes[0].policy.http.breaker, breaker_a);
  assert_int_equal(lk_gw_runtime_free(rt), LK_ESTATE); /* b and c are attached */
  lk_gw_config_unref(b);
  lk_gw_config_unref(c);
  /* Everything released: a new configuration starts from scratch. */
  lk_gw_config *d = attach(rt, three, S(4));
  assert_int_equal(lk_gw_cluster_endpoint_state(&d->clusters[0], 1, S(4), &st), LK_OK);
  assert_false(st.ejected);
  assert_int_equal(st.ejections_total, 0);
  char err[128];
  assert_int_equal(lk_gw_runtime_attach(rt, d, 0, err, sizeof err), LK_ESTATE);
  lk_gw_config_unref(d);
  assert_int_equal(lk_gw_runtime_free(rt), LK_OK);
}

static void test_health_transitions(void **state) {
  (void)state;
  lk_gw_runtime *rt = new_runtime();
  lk_gw_config *c = attach(rt,
                           "[cluster h]\nendpoint = 127.0.0.1:1\nendpoint = 127.0.0.1:2\n"
                           "health-path = /healthz\nhealth-interval = 1s\nhealth-timeout = 100ms\n"
                           "health-healthy = 2\nhealth-unhealthy = 3\n"
                           "[route r]\ncluster = h\n",
                           0);
  const lk_gw_cluster *k = &c->clusters[0];
  /* The first probes are spread over the first interval. */
  int64_t first = lk_gw_cluster_health_next(k);
  assert_in_range(first, 0, S(1) - 1);
  int idx[4];
  size_t n = lk_gw_cluster_health_due(k, S(1), idx, 4);
  assert_int_equal(n, 2);
  assert_int_equal(lk_gw_cluster_health_due(k, S(1), idx, 4), 0); /* rescheduled */
  assert_int_equal(lk_gw_cluster_health_next(k), S(2));
  /* Three failures in a row take endpoint 0 out; a success in between resets. */
  assert_int_equal(lk_gw_cluster_health_report(k, 0, 0, false), LK_GW_HEALTH_SAME);
  assert_int_equal(lk_gw_cluster_health_report(k, 0, 0, false), LK_GW_HEALTH_SAME);
  assert_int_equal(lk_gw_cluster_health_report(k, 0, 0, true), LK_GW_HEALTH_SAME);
  assert_int_equal(lk_gw_cluster_health_report(k, 0, 0, false), LK_GW_HEALTH_SAME);
  assert_int_equal(lk_gw_cluster_health_report(k, 0, 0, false), LK_GW_HEALTH_SAME);
  assert_int_equal(lk_gw_cluster_health_report(k, 0, 0, false), LK_GW_HEALTH_DOWN);
  lk_gw_endpoint_state st;
  lk_gw_cluster_endpoint_state(k, 0, 0, &st);
  assert_false(st.healthy);
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, 9);
  for (int i = 0; i < 20; i++) {
    int p;
    assert_int_equal(lk_gw_cluster_pick(k, 0, &r.base, 0, &p), LK_OK);
    assert_int_equal(p, 1);
  }
  /* Two good probes bring it back. */
  assert_int_equal(lk_gw_cluster_health_report(k, 0, 0, true), LK_GW_HEALTH_SAME);
  assert_int_equal(lk_gw_cluster_health_report(k, 0, 0, true), LK_GW_HEALTH_UP);
  lk_gw_cluster_endpoint_state(k, 0, 0, &st);
  assert_true(st.healthy);
  /* A cluster without health checks: nothing is due, ever. */
  lk_gw_config *d = attach(rt, three, 0);
  assert_int_equal(lk_gw_cluster_health_next(&d->clusters[0]), INT64_MAX);
  assert_int_equal(lk_gw_cluster_health_due(&d->clusters[0], S(100), idx, 4), 0);
  assert_int_equal(lk_gw_cluster_health_report(&d->clusters[0], 0, 0, false), LK_GW_HEALTH_SAME);
  lk_gw_config_unref(c);
  lk_gw_config_unref(d);
  lk_gw_runtime_free(rt);
}

static const char *rolling = "[cluster b]\nendpoint = 127.0.0.1:1\n"
                             "[route r]\ncluster = b\n"
                             "rollout-percent = 12.34\nrollout-margin = 5\n"
                             "rollout-min-sample = 100\n"
                             "next.attempt-timeout = 100ms\n";

static void test_rollout_choose(void **state) {
  (void)state;
  lk_gw_runtime *rt = new_runtime();
  lk_gw_config *c = attach(rt, rolling, 0);
  const lk_gw_route *r = &c->routes[0];
  assert_string_equal(lk_gw_route_rollout_state(r), "rolling");
  /* 12.34 % = draws below 1234 of 10000. */
  const uint64_t draws[] = {0, 1233, 1234, 9999};
  script_rand s;
  script_init(&s, draws, 4);
  assert_int_equal(lk_gw_route_choose(r, &s.base), 1);
  assert_int_equal(lk_gw_route_choose(r, &s.base), 1);
  assert_int_equal(lk_gw_route_choose(r, &s.base), 0);
  assert_int_equal(lk_gw_route_choose(r, &s.base), 0);
  /* Over many seeded draws, close to the share. */
  lk_rand_fast f;
  lk_rand_fast_seeded(&f, 11);
  int ones = 0;
  for (int i = 0; i < 10000; i++)
    ones += lk_gw_route_choose(r, &f.base);
  assert_in_range(ones, 1100, 1370);
  lk_gw_config_unref(c);
  /* No candidate: always 0, state "none". */
  c = attach(rt, three, 0);
  assert_int_equal(lk_gw_route_choose(&c->routes[0], &f.base), 0);
  assert_string_equal(lk_gw_route_rollout_state(&c->routes[0]), "none");
  assert_false(lk_gw_route_record(&c->routes[0], 0, true, NULL));
  lk_gw_config_unref(c);
  lk_gw_runtime_free(rt);
}

static void test_rollback(void **state) {
  (void)state;
  lk_gw_runtime *rt = new_runtime();
  lk_gw_config *c = attach(rt, rolling, 0);
  const lk_gw_route *r = &c->routes[0];
  lk_gw_rollback why;
  /* Stable 2 % bad, candidate 7 %: 5 points worse is not "more than 5". */
  for (int i = 0; i < 100; i++) {
    assert_false(lk_gw_route_record(r, 0, i < 2, &why));
    assert_false(lk_gw_route_record(r, 1, i < 7, &why));
  }
  assert_string_equal(lk_gw_route_rollout_state(r), "rolling");
  /* The candidate worsens: rolled back once, with the numbers. */
  bool fired = false;
  int count = 0;
  for (int i = 0; i < 10; i++)
    if (lk_gw_route_record(r, 1, true, &why)) {
      fired = true;
      count++;
    }
  assert_true(fired);
  assert_int_equal(count, 1);
  assert_string_equal(why.version, r->next->version);
  assert_int_equal(why.stable_n, 100);
  assert_int_equal(why.stable_bad, 2);
  assert_int_equal(why.next_n, 101);
  assert_int_equal(why.next_bad, 8);
  assert_true(why.next_rate - why.stable_rate > 5);
  assert_string_equal(lk_gw_route_rollout_state(r), "rolled-back");
  script_rand s;
  const uint64_t zero[] = {0};
  script_init(&s, zero, 1);
  assert_int_equal(lk_gw_route_choose(r, &s.base), 0);
  /* A reload with the same candidate keeps it rolled back; a changed candidate starts over. */
  lk_gw_config *same = attach(rt, rolling, S(1));
  assert_string_equal(lk_gw_route_rollout_state(&same->routes[0]), "rolled-back");
  lk_gw_config_unref(c);
  lk_gw_config *changed = attach(rt,
                                 "[cluster b]\nendpoint = 127.0.0.1:1\n[route r]\ncluster = b\n"
                                 "next.attempt-timeout = 200ms\n",
                                 S(2));
  assert_string_equal(lk_gw_route_rollout_state(&changed->routes[0]), "rolling");
  /* Below the minimum sample nothing is judged, however bad. */
  for (int i = 0; i < 99; i++) {
    assert_false(lk_gw_route_record(&changed->routes[0], 1, true, NULL));
    assert_false(lk_gw_route_record(&changed->routes[0], 0, false, NULL));
  }
  assert_false(lk_gw_route_record(&changed->routes[0], 1, true, NULL)); /* stable: 99 */
  assert_true(lk_gw_route_record(&changed->routes[0], 0, false, NULL));  /* both at 100 */
  assert_true(lk_gw_request_bad(0));
  assert_true(lk_gw_request_bad(503));
  assert_false(lk_gw_request_bad(404));
  lk_gw_config_unref(same);
  lk_gw_config_unref(changed);
  lk_gw_runtime_free(rt);
}

static bool has_line(const char *text, const char *line) {
  size_t n = strlen(line);
  for (const char *p = text; (p = strstr(p, line)); p += n)
    if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
      return true;
  return false;
}

static void test_metrics(void **state) {
  (void)state;
  lk_gw_runtime *rt = new_runtime();
  lk_gw_config *c = attach(rt, rolling, 0);
  const lk_gw_route *r = &c->routes[0];
  lk_gw_request_obs o = {.status = 200, .attempts = 1, .duration = 1000, .queue_wait = -1};
  lk_gw_route_observe(r, 0, &o);
  o.status = 502;
  o.attempts = 3;
  o.streamed = true;
  o.streamed_not_retried = true;
  o.refused = LK_GW_REFUSED_BREAKER; /* the breaker refused a 4th attempt */
  lk_gw_route_observe(r, 0, &o);
  o = (lk_gw_request_obs){.status = 504,
                          .deadline_exceeded = true,
                          .key_injected = true,
                          .duration = 5,
                          .queue_wait = 7,
                          .refused = LK_GW_REFUSED_DEADLINE};
  lk_gw_route_observe(r, 1, &o);
  lk_gw_cluster_report(&c->clusters[0], 0, 0, 2000, LK_GW_5XX);
  lk_gw_runtime_observe_unrouted(rt, 404);
  lk_gw_runtime_record_reload(rt, c, false);
  lk_gw_runtime_refresh(rt, c, 0);
  char *text = NULL;
  assert_int_equal(lk_metrics_render(lk_gw_runtime_metrics(rt), &text, NULL), LK_OK);
  char line[512];
  const char *v0 = r->policy.version, *v1 = r->next->version;
  snprintf(line, sizeof line, "linkd_gw_requests_total{route=\"r\",policy=\"%s\",code=\"2xx\"} 1",
           v0);
  assert_true(has_line(text, line));
  snprintf(line, sizeof line, "linkd_gw_requests_total{route=\"r\",policy=\"%s\",code=\"5xx\"} 2",
           v1);
  assert_false(has_line(text, line));
  snprintf(line, sizeof line, "linkd_gw_requests_total{route=\"r\",policy=\"%s\",code=\"5xx\"} 1",
           v1);
  assert_true(has_line(text, line));
  snprintf(line, sizeof line, "linkd_gw_attempts_total{route=\"r\",policy=\"%s\"} 4", v0);
  assert_true(has_line(text, line));
  /* refusals by reason, every reason there from the start */
  snprintf(line, sizeof line,
           "linkd_gw_refused_total{route=\"r\",policy=\"%s\",reason=\"breaker\"} 1", v0);
  assert_true(has_line(text, line));
  snprintf(line, sizeof line,
           "linkd_gw_refused_total{route=\"r\",policy=\"%s\",reason=\"deadline\"} 0", v0);
  assert_true(has_line(text, line));
  snprintf(line, sizeof line,
           "linkd_gw_refused_total{route=\"r\",policy=\"%s\",reason=\"deadline\"} 1", v1);
  assert_true(has_line(text, line));
  snprintf(line, sizeof line,
           "linkd_gw_refused_total{route=\"r\",policy=\"%s\",reason=\"bulkhead\"} 0", v1);
  assert_true(has_line(text, line));
  assert_non_null(strstr(text, "# TYPE linkd_gw_refused_total counter\n"));
  snprintf(line, sizeof line, "linkd_gw_retries_total{route=\"r\",policy=\"%s\"} 2", v0);
  assert_true(has_line(text, line));
  snprintf(line, sizeof line, "linkd_gw_retry_ratio{route=\"r\",policy=\"%s\"} 1", v0);
  assert_true(has_line(text, line));
  snprintf(line, sizeof line, "linkd_gw_streamed_not_retried_total{route=\"r\",policy=\"%s\"} 1",
           v0);
  assert_true(has_line(text, line));
  snprintf(line, sizeof line, "linkd_gw_deadline_exceeded_total{route=\"r\",policy=\"%s\"} 1", v1);
  assert_true(has_line(text, line));
  snprintf(line, sizeof line, "linkd_gw_keys_injected_total{route=\"r\",policy=\"%s\"} 1", v1);
  assert_true(has_line(text, line));
  snprintf(line, sizeof line, "linkd_gw_rollout_ratio{route=\"r\",policy=\"%s\"} 0.1234", v1);
  assert_true(has_line(text, line));
  snprintf(line, sizeof line, "linkd_gw_breaker_state{route=\"r\",policy=\"%s\"} 0", v0);
  assert_true(has_line(text, line));
  assert_true(has_line(text, "linkd_gw_upstream_attempts_total{cluster=\"b\","
                             "endpoint=\"127.0.0.1:1\",result=\"5xx\"} 1"));
  assert_true(
      has_line(text, "linkd_gw_endpoint_healthy{cluster=\"b\",endpoint=\"127.0.0.1:1\"} 1"));
  assert_true(has_line(text, "linkd_gw_unrouted_total{code=\"4xx\"} 1"));
  assert_true(has_line(text, "linkd_gw_config_reloads_total{result=\"error\"} 1"));
  assert_true(has_line(text, "linkd_gw_config_generation 1"));
  free(text);
  lk_gw_config_unref(c);
  lk_gw_runtime_free(rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pick_prefers_untried),
      cmocka_unit_test(test_ejection_grows_caps_and_expires),
      cmocka_unit_test(test_max_percent_and_panic),
      cmocka_unit_test(test_outcome_of),
      cmocka_unit_test(test_refusal_of),
      cmocka_unit_test(test_state_survives_reload),
      cmocka_unit_test(test_health_transitions),
      cmocka_unit_test(test_rollout_choose),
      cmocka_unit_test(test_rollback),
      cmocka_unit_test(test_metrics),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
