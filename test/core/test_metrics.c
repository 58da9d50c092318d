/* SPDX-License-Identifier: MIT */
/* Metrics registry: name rules, dedupe, conflicts, exact exposition text (escaping, units,
 * histogram and summary series), concurrent registration and updates, zero-allocation updates. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h> /* needs the three above first */

#include <linkd/error.h>
#include <linkd/metrics.h>

#include "testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static char *render(lk_metrics *m) {
  char *out = NULL;
  size_t len = 0;
  assert_int_equal(lk_metrics_render(m, &out, &len), LK_OK);
  assert_non_null(out);
  assert_int_equal(strlen(out), len);
  return out;
}

static void name_rules(void **state) {
  (void)state;
  assert_true(lk_metrics_valid_name("a"));
  assert_true(lk_metrics_valid_name("linkd:client_requests_total"));
  assert_true(lk_metrics_valid_name("_x9"));
  assert_false(lk_metrics_valid_name(""));
  assert_false(lk_metrics_valid_name(NULL));
  assert_false(lk_metrics_valid_name("9abc"));
  assert_false(lk_metrics_valid_name("a-b"));
  assert_false(lk_metrics_valid_name("a b"));
  assert_false(lk_metrics_valid_name("caf\xc3\xa9"));
  assert_true(lk_metrics_valid_label_name("client"));
  assert_true(lk_metrics_valid_label_name("_x"));
  assert_false(lk_metrics_valid_label_name("__name__"));
  assert_false(lk_metrics_valid_label_name("a:b"));
  assert_false(lk_metrics_valid_label_name("1a"));
  assert_false(lk_metrics_valid_label_name(""));

  lk_metrics *m = lk_metrics_new();
  assert_non_null(m);
  /* Counter names end in _total; other types must not. */
  assert_null(lk_metrics_counter(m, "requests", "Requests.", NULL));
  assert_null(lk_metrics_gauge(m, "active_total", "Active.", NULL));
  assert_null(lk_metrics_histogram(m, "latency_total", "Latency.", NULL));
  /* Bad names, help, labels. */
  assert_null(lk_metrics_counter(m, "bad-name_total", "Help.", NULL));
  assert_null(lk_metrics_counter(m, "x_total", NULL, NULL));
  assert_null(lk_metrics_counter(m, "x_total", "", NULL));
  assert_null(lk_metrics_counter(m, "x_total", "bad \xff utf8", NULL));
  assert_null(lk_metrics_counter(m, "x_total", "Help.", L("__reserved", "v")));
  assert_null(lk_metrics_counter(m, "x_total", "Help.", L("a-b", "v")));
  assert_null(lk_metrics_counter(m, "x_total", "Help.", L("a", "1", "a", "2")));
  assert_null(lk_metrics_counter(m, "x_total", "Help.", ((const char *const[]){"a", NULL})));
  assert_null(lk_metrics_counter(m, "x_total", "Help.", L("a", "\xc0\x80")));     /* overlong NUL */
  assert_null(lk_metrics_counter(m, "x_total", "Help.", L("a", "\xed\xa0\x80"))); /* surrogate */
  assert_null(lk_metrics_histogram(m, "h_seconds", "Help.", L("le", "1")));
  lk_hist_opts o;
  lk_hist_opts_init_default(&o);
  o.type = LK_METRIC_SUMMARY;
  assert_null(lk_metrics_histogram_ex(m, "s_seconds", "Help.", L("quantile", "1"), &o));
  assert_non_null(lk_metrics_histogram_ex(m, "s_seconds", "Help.", L("le", "1"), &o));
  assert_null(lk_metrics_counter(NULL, "x_total", "Help.", NULL));
  assert_null(lk_metrics_gauge_scaled(m, "g", "Help.", NULL, 0.0));
  /* Bad histogram options. */
  lk_hist_opts_init_default(&o);
  o.bounds[3] = o.bounds[2];
  assert_null(lk_metrics_histogram_ex(m, "b1_seconds", "Help.", NULL, &o));
  lk_hist_opts_init_default(&o);
  o.lowest = 10;
  o.highest = 10;
  assert_null(lk_metrics_histogram_ex(m, "b2_seconds", "Help.", NULL, &o));
  lk_hist_opts_init_default(&o);
  o.type = LK_METRIC_SUMMARY;
  o.quantiles[0] = 1.5;
  assert_null(lk_metrics_histogram_ex(m, "b3_seconds", "Help.", NULL, &o));
  lk_hist_opts_init_default(&o);
  o.n_bounds = LK_METRICS_MAX_BOUNDS + 1;
  assert_null(lk_metrics_histogram_ex(m, "b4_seconds", "Help.", NULL, &o));
  assert_null(lk_metrics_histogram_ex(m, "b5_seconds", "Help.", NULL, NULL));
  /* Only s_seconds was registered. */
  char *out = render(m);
  assert_non_null(strstr(out, "# TYPE s_seconds summary\n"));
  assert_null(strstr(out, "x_total"));
  assert_null(strstr(out, "b1_seconds"));
  free(out);
  lk_metrics_free(m);
  lk_metrics_free(NULL);
}

static void dedupe_and_conflicts(void **state) {
  (void)state;
  lk_metrics *m = lk_metrics_new();
  lk_counter *a = lk_metrics_counter(m, "req_total", "Requests.", L("client", "a"));
  lk_counter *a2 = lk_metrics_counter(m, "req_total", "Other help is ignored.", L("client", "a"));
  lk_counter *b = lk_metrics_counter(m, "req_total", "Requests.", L("client", "b"));
  assert_non_null(a);
  assert_ptr_equal(a, a2);
  assert_non_null(b);
  assert_ptr_not_equal(a, b);
  /* Same family with other label names, or another type, is refused. */
  assert_null(lk_metrics_counter(m, "req_total", "Requests.", L("host", "a")));
  assert_null(lk_metrics_counter(m, "req_total", "Requests.", NULL));
  assert_null(lk_metrics_counter(m, "req_total", "Requests.", L("client", "a", "x", "y")));
  lk_gauge *g = lk_metrics_gauge(m, "depth", "Depth.", NULL);
  assert_ptr_equal(g, lk_metrics_gauge(m, "depth", "Depth.", NULL));
  assert_null(lk_metrics_gauge_scaled(m, "depth", "Depth.", NULL, 1000.0));
  /* A counter family is scaled or not, with one scale. */
  assert_null(lk_metrics_counter_scaled(m, "req_total", "Requests.", L("client", "c"), 1e9));
  lk_counter *t = lk_metrics_counter_scaled(m, "busy_seconds_total", "Busy.", NULL, 1e9);
  assert_non_null(t);
  assert_ptr_equal(t, lk_metrics_counter_scaled(m, "busy_seconds_total", "Busy.", NULL, 1e9));
  assert_null(lk_metrics_counter_scaled(m, "busy_seconds_total", "Busy.", NULL, 1e6));
  assert_null(lk_metrics_counter(m, "busy_seconds_total", "Busy.", NULL));
  assert_null(lk_metrics_counter_scaled(m, "x_total", "X.", NULL, 0.0));
  assert_null(lk_metrics_counter_scaled(m, "x_seconds", "Not a counter name.", NULL, 1e9));
  assert_null(lk_metrics_histogram(m, "depth", "Depth.", NULL));
  /* Histogram generated names collide both ways. */
  lk_hist *h = lk_metrics_histogram(m, "lat_seconds", "Latency.", L("client", "a"));
  assert_non_null(h);
  assert_ptr_equal(h, lk_metrics_histogram(m, "lat_seconds", "Latency.", L("client", "a")));
  assert_null(lk_metrics_gauge(m, "lat_seconds_count", "Clash.", NULL));
  assert_null(lk_metrics_gauge(m, "lat_seconds_bucket", "Clash.", NULL));
  assert_null(lk_metrics_gauge(m, "lat_seconds_sum", "Clash.", NULL));
  assert_non_null(lk_metrics_gauge(m, "q_count", "Fine alone.", NULL));
  assert_null(lk_metrics_histogram(m, "q", "Clash.", NULL));
  /* Same histogram name with other options is refused. */
  lk_hist_opts o;
  lk_hist_opts_init_default(&o);
  o.n_bounds = 3;
  assert_null(lk_metrics_histogram_ex(m, "lat_seconds", "Latency.", L("client", "b"), &o));
  lk_hist_opts_init_default(&o);
  assert_ptr_equal(h, lk_metrics_histogram_ex(m, "lat_seconds", "Latency.", L("client", "a"), &o));
  lk_metrics_free(m);
}

static void exposition_text(void **state) {
  (void)state;
  lk_metrics *m = lk_metrics_new();
  lk_counter *c = lk_metrics_counter(m, "linkd_req_total", "Requests \\ sent.\nSecond line.",
                                     L("client", "a\\b\"c\nd", "zone", "eu"));
  lk_counter_add(c, 41);
  lk_counter_add(c, 1);
  lk_gauge *g = lk_metrics_gauge(m, "linkd_active", "Active calls.", NULL);
  lk_gauge_set(g, 5);
  lk_gauge_add(g, -7);
  lk_gauge *r = lk_metrics_gauge_scaled(m, "linkd_budget_ratio", "Ratio.", NULL, 1e6);
  lk_gauge_set(r, 250000);
  lk_counter *busy = lk_metrics_counter_scaled(m, "linkd_busy_seconds_total", "Busy.", NULL, 1e9);
  lk_counter_add(busy, 1500000000);
  lk_hist_opts o;
  lk_hist_opts_init_default(&o);
  o.n_bounds = 3;
  o.bounds[0] = 0.001;
  o.bounds[1] = 0.01;
  o.bounds[2] = 2.5;
  lk_hist *h = lk_metrics_histogram_ex(m, "linkd_lat_seconds", "Latency.", L("client", "x"), &o);
  lk_hist_record(h, LK_MS(1)); /* exactly on a bound: counts as <= 0.001 */
  lk_hist_record(h, LK_MS(5));
  lk_hist_record(h, LK_SEC(3));
  lk_hist_opts_init_default(&o);
  o.type = LK_METRIC_SUMMARY;
  o.n_quantiles = 2;
  o.quantiles[0] = 0.5;
  o.quantiles[1] = 0.99;
  lk_hist *s = lk_metrics_histogram_ex(m, "linkd_wait_seconds", "Wait.", NULL, &o);
  lk_hist_record(s, LK_MS(200));
  lk_metrics_histogram_ex(m, "linkd_idle_seconds", "Never used.", NULL, &o);
  char *out = render(m);
  const char *want = "# HELP linkd_req_total Requests \\\\ sent.\\nSecond line.\n"
                     "# TYPE linkd_req_total counter\n"
                     "linkd_req_total{client=\"a\\\\b\\\"c\\nd\",zone=\"eu\"} 42\n"
                     "# HELP linkd_active Active calls.\n"
                     "# TYPE linkd_active gauge\n"
                     "linkd_active -2\n"
                     "# HELP linkd_budget_ratio Ratio.\n"
                     "# TYPE linkd_budget_ratio gauge\n"
                     "linkd_budget_ratio 0.25\n"
                     "# HELP linkd_busy_seconds_total Busy.\n"
                     "# TYPE linkd_busy_seconds_total counter\n"
                     "linkd_busy_seconds_total 1.5\n"
                     "# HELP linkd_lat_seconds Latency.\n"
                     "# TYPE linkd_lat_seconds histogram\n"
                     "linkd_lat_seconds_bucket{client=\"x\",le=\"0.001\"} 1\n"
                     "linkd_lat_seconds_bucket{client=\"x\",le=\"0.01\"} 2\n"
                     "linkd_lat_seconds_bucket{client=\"x\",le=\"2.5\"} 2\n"
                     "linkd_lat_seconds_bucket{client=\"x\",le=\"+Inf\"} 3\n"
                     "linkd_lat_seconds_sum{client=\"x\"} 3.006\n"
                     "linkd_lat_seconds_count{client=\"x\"} 3\n"
                     "# HELP linkd_wait_seconds Wait.\n"
                     "# TYPE linkd_wait_seconds summary\n"
                     "linkd_wait_seconds{quantile=\"0.5\"} 0.2\n"
                     "linkd_wait_seconds{quantile=\"0.99\"} 0.2\n"
                     "linkd_wait_seconds_sum 0.2\n"
                     "linkd_wait_seconds_count 1\n"
                     "# HELP linkd_idle_seconds Never used.\n"
                     "# TYPE linkd_idle_seconds summary\n"
                     "linkd_idle_seconds{quantile=\"0.5\"} NaN\n"
                     "linkd_idle_seconds{quantile=\"0.99\"} NaN\n"
                     "linkd_idle_seconds_sum 0\n"
                     "linkd_idle_seconds_count 0\n";
  assert_string_equal(out, want);
  free(out);
  lk_metrics_free(m);

  /* An empty registry renders as an empty string. */
  m = lk_metrics_new();
  size_t len = 99;
  assert_int_equal(lk_metrics_render(m, &out, &len), LK_OK);
  assert_int_equal(len, 0);
  assert_string_equal(out, "");
  free(out);
  assert_int_equal(lk_metrics_render(m, NULL, &len), LK_EINVAL);
  assert_int_equal(lk_metrics_render(NULL, &out, &len), LK_EINVAL);
  lk_metrics_free(m);
}

/* Default histogram: ns in, seconds out, 18 bounds + Inf. */
static void default_histogram_buckets(void **state) {
  (void)state;
  lk_metrics *m = lk_metrics_new();
  lk_hist *h = lk_metrics_histogram(m, "d_seconds", "Default.", NULL);
  lk_hist_record(h, 150 * LK_NS_PER_US); /* 0.00015 s -> first bucket at 0.00025 */
  lk_hist_record(h, LK_SEC(45));         /* -> 60 */
  lk_hist_record(h, LK_SEC(7200));       /* over the 1 h range: clamped, lands in +Inf only */
  char *out = render(m);
  assert_non_null(strstr(out, "d_seconds_bucket{le=\"0.0001\"} 0\n"));
  assert_non_null(strstr(out, "d_seconds_bucket{le=\"0.00025\"} 1\n"));
  assert_non_null(strstr(out, "d_seconds_bucket{le=\"25\"} 1\n"));
  assert_non_null(strstr(out, "d_seconds_bucket{le=\"60\"} 2\n"));
  assert_non_null(strstr(out, "d_seconds_bucket{le=\"+Inf\"} 3\n"));
  assert_non_null(strstr(out, "d_seconds_sum 3645.00015\n"));
  assert_non_null(strstr(out, "d_seconds_count 3\n"));
  int lines = 0;
  for (const char *p = out; (p = strstr(p, "d_seconds_bucket{")) != NULL; p++)
    lines++;
  assert_int_equal(lines, 19);
  assert_int_equal(lk_hist_overflows(h), 1);
  free(out);
  lk_metrics_free(m);
}

static void gauge_saturates_and_null_is_noop(void **state) {
  (void)state;
  lk_metrics *m = lk_metrics_new();
  lk_gauge *g = lk_metrics_gauge(m, "g", "Gauge.", NULL);
  lk_gauge_set(g, INT64_MAX - 1);
  lk_gauge_add(g, 10);
  assert_true(lk_gauge_value(g) == INT64_MAX);
  lk_gauge_set(g, INT64_MIN + 1);
  lk_gauge_add(g, -10);
  assert_true(lk_gauge_value(g) == INT64_MIN);
  lk_counter_add(NULL, 1);
  lk_gauge_set(NULL, 1);
  lk_gauge_add(NULL, 1);
  assert_int_equal(lk_counter_value(NULL), 0);
  assert_int_equal(lk_gauge_value(NULL), 0);
  lk_metrics_free(m);
}

enum { THREADS = 4, ITERS = 50000 };

static void *hammer(void *arg) {
  lk_metrics *m = arg;
  char client[16];
  for (int i = 0; i < ITERS; i++) {
    if (i % 1000 == 0) {
      /* Registration races with updates and with other registrations of the same series. */
      snprintf(client, sizeof client, "c%d", (i / 1000) % 5);
      lk_counter *c = lk_metrics_counter(m, "hits_total", "Hits.", L("client", client));
      lk_counter_add(c, 0);
    }
    lk_counter_add(lk_metrics_counter(m, "hits_total", "Hits.", L("client", "shared")), 1);
    lk_gauge_add(lk_metrics_gauge(m, "level", "Level.", NULL), 1);
    lk_hist_record(lk_metrics_histogram(m, "t_seconds", "T.", NULL), i);
  }
  return NULL;
}

static void *render_loop(void *arg) {
  lk_metrics *m = arg;
  for (int i = 0; i < 50; i++) {
    char *out = NULL;
    if (lk_metrics_render(m, &out, NULL) == LK_OK)
      free(out);
  }
  return NULL;
}

static void concurrent_registration_and_updates(void **state) {
  (void)state;
  lk_metrics *m = lk_metrics_new();
  pthread_t t[THREADS], rt;
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, hammer, m), 0);
  assert_int_equal(pthread_create(&rt, NULL, render_loop, m), 0);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  pthread_join(rt, NULL);
  lk_counter *c = lk_metrics_counter(m, "hits_total", "Hits.", L("client", "shared"));
  assert_int_equal(lk_counter_value(c), (uint64_t)THREADS * ITERS);
  assert_int_equal(lk_gauge_value(lk_metrics_gauge(m, "level", "Level.", NULL)), THREADS * ITERS);
  assert_int_equal(lk_hist_count(lk_metrics_histogram(m, "t_seconds", "T.", NULL)),
                   (uint64_t)THREADS * ITERS);
  char *out = render(m);
  /* One series per distinct label set, despite the races: shared + c0..c4. */
  int series = 0;
  for (const char *p = out; (p = strstr(p, "\nhits_total{")) != NULL; p++)
    series++;
  assert_int_equal(series, 6);
  free(out);
  lk_metrics_free(m);
}

static void updates_allocate_nothing(void **state) {
  (void)state;
  lk_metrics *m = lk_metrics_new();
  lk_counter *c = lk_metrics_counter(m, "a_total", "A.", NULL);
  lk_gauge *g = lk_metrics_gauge(m, "b", "B.", NULL);
  lk_hist *h = lk_metrics_histogram(m, "c_seconds", "C.", NULL);
  lk_test_alloc_count_start();
  for (int i = 0; i < 10000; i++) {
    lk_counter_add(c, 1);
    lk_gauge_set(g, i);
    lk_gauge_add(g, 1);
    lk_hist_record(h, i * 1000);
  }
  uint64_t allocs = lk_test_alloc_count_stop();
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && !defined(LK_NO_ALLOC_HOOK)
  assert_int_equal(allocs, 0);
#else
  (void)allocs;
#endif
  assert_int_equal(lk_counter_value(c), 10000);
  lk_metrics_free(m);
}

/* A hidden series leaves the exposition (its family too once every series is hidden) and comes
 * back, with its value, when registered again; its object stays usable meanwhile. */
static void hidden_series(void **state) {
  (void)state;
  lk_metrics *m = lk_metrics_new();
  lk_gauge *up = lk_metrics_gauge(m, "ep_healthy", "Healthy.", L("ep", "a"));
  lk_gauge *gone = lk_metrics_gauge(m, "ep_healthy", "Healthy.", L("ep", "b"));
  lk_counter *c = lk_metrics_counter(m, "ep_attempts_total", "Attempts.", L("ep", "b"));
  lk_hist *h = lk_metrics_histogram(m, "ep_lat_seconds", "Latency.", L("ep", "b"));
  lk_gauge_set(up, 1);
  lk_gauge_set(gone, 0);
  lk_counter_add(c, 3);
  lk_hist_record(h, LK_MS(2));
  assert_int_equal(lk_metrics_hide(m, gone), LK_OK);
  assert_int_equal(lk_metrics_hide(m, h), LK_OK);
  assert_int_equal(lk_metrics_hide(m, h), LK_OK); /* twice is once */
  lk_gauge_set(gone, 7);                          /* still a valid object */
  lk_hist_record(h, LK_MS(3));
  char *out = render(m);
  assert_non_null(strstr(out, "# TYPE ep_healthy gauge\nep_healthy{ep=\"a\"} 1\n# HELP"));
  assert_null(strstr(out, "ep=\"b\"} 7"));
  assert_non_null(strstr(out, "ep_attempts_total{ep=\"b\"} 3\n"));
  assert_null(strstr(out, "ep_lat_seconds")); /* no HELP or TYPE without a sample */
  free(out);
  /* Registered again: the same objects, shown again with what they hold. */
  assert_ptr_equal(lk_metrics_gauge(m, "ep_healthy", "Healthy.", L("ep", "b")), gone);
  assert_ptr_equal(lk_metrics_histogram(m, "ep_lat_seconds", "Latency.", L("ep", "b")), h);
  out = render(m);
  assert_non_null(strstr(out, "ep_healthy{ep=\"a\"} 1\nep_healthy{ep=\"b\"} 7\n"));
  assert_non_null(strstr(out, "# TYPE ep_lat_seconds histogram\n"));
  assert_non_null(strstr(out, "ep_lat_seconds_count{ep=\"b\"} 2\n"));
  free(out);
  /* Not a series of this registry, or NULL. */
  lk_metrics *other = lk_metrics_new();
  lk_gauge *foreign = lk_metrics_gauge(other, "x", "X.", NULL);
  assert_int_equal(lk_metrics_hide(m, foreign), LK_ENOTFOUND);
  assert_int_equal(lk_metrics_hide(m, NULL), LK_EINVAL);
  assert_int_equal(lk_metrics_hide(NULL, up), LK_EINVAL);
  lk_metrics_free(other);
  lk_metrics_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(name_rules),
      cmocka_unit_test(dedupe_and_conflicts),
      cmocka_unit_test(exposition_text),
      cmocka_unit_test(hidden_series),
      cmocka_unit_test(default_histogram_buckets),
      cmocka_unit_test(gauge_saturates_and_null_is_noop),
      cmocka_unit_test(concurrent_registration_and_updates),
      cmocka_unit_test(updates_allocate_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
