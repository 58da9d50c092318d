/* SPDX-License-Identifier: MIT */
/* The gateway runtime from many threads at once, as a multi-threaded proxy would use it: picks,
 * reports, health probes, rollout records and request metrics on the current configuration while
 * another thread reloads (attach a new configuration, drop the old one) and renders /metrics.
 * Checks the invariants that survive concurrency (every pick in range, every record counted,
 * nothing leaked or freed early) and runs under TSan in CI (label "threaded"). Bounded: a fixed
 * number of operations per thread. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gw_config.h"

#include <linkd/error.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORKERS 4
#define OPS 20000
#define RELOADS 5000 /* at most; the reloading thread stops when the workers are done */

static const char *conf_text[2] = {
    "[cluster b]\nendpoint = 127.0.0.1:1\nendpoint = 127.0.0.1:2\nendpoint = 127.0.0.1:3\n"
    "eject-5xx = 2\neject-connect-failures = 2\neject-base-time = 1ms\neject-max-time = 5ms\n"
    "health-path = /h\nhealth-interval = 2ms\nhealth-timeout = 1ms\n"
    "[route r]\ncluster = b\nrollout-min-sample = 50\nnext.max-attempts = 2\n",
    "[cluster b]\nendpoint = 127.0.0.1:2\nendpoint = 127.0.0.1:3\nendpoint = 127.0.0.1:4\n"
    "eject-5xx = 2\neject-connect-failures = 2\neject-base-time = 1ms\neject-max-time = 5ms\n"
    "[route r]\ncluster = b\nrollout-min-sample = 50\nnext.max-attempts = 3\n",
};

typedef struct shared_state {
  lk_gw_runtime *rt;
  pthread_mutex_t mu; /* guards `current` (the proxy's swap) */
  lk_gw_config *current;
  atomic_int stop; /* workers finished */
  atomic_long observed;
  atomic_long bad_picks;
} shared_state;

static lk_gw_config *take_current(shared_state *s) {
  pthread_mutex_lock(&s->mu);
  lk_gw_config *c = lk_gw_config_ref(s->current);
  pthread_mutex_unlock(&s->mu);
  return c;
}

static void *worker(void *arg) {
  shared_state *s = arg;
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, (uint64_t)(uintptr_t)&r);
  for (int i = 0; i < OPS; i++) {
    lk_gw_config *c = take_current(s);
    const int64_t now = (int64_t)i * 100000; /* 0.1 ms steps of a per-thread fake clock */
    const lk_gw_route *rt = lk_gw_config_match(c, "x", "/any");
    const lk_gw_cluster *k = rt->cluster;
    int idx = -1;
    if (lk_gw_cluster_pick(k, now, &r.base, (uint64_t)(i & 3), &idx) != LK_OK || idx < 0 ||
        (size_t)idx >= k->n_endpoints)
      atomic_fetch_add(&s->bad_picks, 1);
    else
      lk_gw_cluster_report(k, idx, now, 1000, (lk_gw_outcome)(i % 4));
    int due[LK_GW_MAX_ENDPOINTS];
    size_t n = lk_gw_cluster_health_due(k, now, due, LK_GW_MAX_ENDPOINTS);
    for (size_t j = 0; j < n; j++)
      lk_gw_cluster_health_report(k, due[j], now, (i & 1) != 0);
    int v = lk_gw_route_choose(rt, &r.base);
    lk_gw_route_record(rt, v, v == 1 && (i % 3) == 0, NULL);
    lk_gw_request_obs o = {.status = 200, .attempts = 1 + (i & 1), .duration = 1000,
                           .queue_wait = -1};
    lk_gw_route_observe(rt, v, &o);
    atomic_fetch_add(&s->observed, 1);
    lk_gw_config_unref(c);
  }
  atomic_fetch_add(&s->stop, 1);
  return NULL;
}

static void test_concurrent_use_and_reload(void **state) {
  (void)state;
  shared_state s;
  memset(&s, 0, sizeof s);
  pthread_mutex_init(&s.mu, NULL);
  lk_rand_fast seed;
  lk_rand_fast_seeded(&seed, 3);
  s.rt = lk_gw_runtime_new(&seed.base);
  assert_non_null(s.rt);
  char err[512];
  s.current = lk_gw_config_load_mem(conf_text[0], strlen(conf_text[0]), "a", err, sizeof err);
  assert_non_null(s.current);
  assert_int_equal(lk_gw_runtime_attach(s.rt, s.current, 0, err, sizeof err), LK_OK);
  pthread_t th[WORKERS];
  for (int i = 0; i < WORKERS; i++)
    assert_int_equal(pthread_create(&th[i], NULL, worker, &s), 0);
  /* The reloading thread: attach, swap, release the old one; render metrics now and then. */
  int reloads = 0;
  for (int i = 1; i <= RELOADS && atomic_load(&s.stop) < WORKERS; i++) {
    reloads++;
    const char *t = conf_text[i % 2];
    lk_gw_config *next = lk_gw_config_load_mem(t, strlen(t), "b", err, sizeof err);
    assert_non_null(next);
    assert_int_equal(lk_gw_runtime_attach(s.rt, next, (int64_t)i * 1000000, err, sizeof err),
                     LK_OK);
    pthread_mutex_lock(&s.mu);
    lk_gw_config *old = s.current;
    s.current = next;
    pthread_mutex_unlock(&s.mu);
    lk_gw_runtime_record_reload(s.rt, next, true);
    lk_gw_config_unref(old);
    if (i % 20 == 0) {
      lk_gw_config *c = take_current(&s);
      lk_gw_runtime_refresh(s.rt, c, (int64_t)i * 1000000);
      char *text = NULL;
      assert_int_equal(lk_metrics_render(lk_gw_runtime_metrics(s.rt), &text, NULL), LK_OK);
      assert_non_null(strstr(text, "linkd_gw_requests_total"));
      free(text);
      lk_gw_config_unref(c);
    }
  }
  for (int i = 0; i < WORKERS; i++)
    pthread_join(th[i], NULL);
  assert_int_equal(atomic_load(&s.bad_picks), 0);
  print_message("reloads during the run: %d\n", reloads);
  assert_true(reloads >= 2); /* the workers ran across configuration swaps */
  assert_int_equal(atomic_load(&s.observed), (long)WORKERS * OPS);
  /* Every request was counted once, across versions and reloads. */
  lk_gw_runtime_refresh(s.rt, s.current, 0);
  char *text = NULL;
  assert_int_equal(lk_metrics_render(lk_gw_runtime_metrics(s.rt), &text, NULL), LK_OK);
  long total = 0;
  for (const char *p = text; (p = strstr(p, "\nlinkd_gw_requests_total{")); p++) {
    const char *sp = strchr(p + 1, '\n');
    const char *v = sp;
    while (v > p && v[-1] != ' ')
      v--;
    total += atol(v);
  }
  free(text);
  assert_int_equal(total, (long)WORKERS * OPS);
  assert_int_equal(lk_gw_runtime_free(s.rt), LK_ESTATE);
  lk_gw_config_unref(s.current);
  assert_int_equal(lk_gw_runtime_free(s.rt), LK_OK);
  pthread_mutex_destroy(&s.mu);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_concurrent_use_and_reload)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
