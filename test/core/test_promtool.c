/* SPDX-License-Identifier: MIT */
/* Validates the registry's exposition with the reference parser and linter: `promtool check
 * metrics` (Debian package prometheus) must accept it with no complaint. Covers every metric type,
 * escaping in help and label values, non-ASCII label values, scaled gauges, empty and full
 * histograms and summaries, and the whole call-metrics bundle. A missing promtool fails the test:
 * a skip would show as passed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h> /* needs the three above first */

#include <linkd/callmetrics.h>
#include <linkd/error.h>
#include <linkd/metrics.h>

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static const char *promtool_path(void) {
  const char *env = getenv("PROMTOOL");
  if (env && access(env, X_OK) == 0)
    return env;
  return access("/usr/bin/promtool", X_OK) == 0 ? "/usr/bin/promtool" : NULL;
}

/* Runs promtool on `text`; returns its exit status and copies its output into msg. */
static int promtool_check(const char *tool, const char *text, char *msg, size_t msg_size) {
  char path[] = "/tmp/linkd_promtool_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  size_t len = strlen(text);
  assert_int_equal(write(fd, text, len), (ssize_t)len);
  close(fd);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "'%s' check metrics < '%s' 2>&1", tool, path);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t n = fread(msg, 1, msg_size - 1, p);
  msg[n] = '\0';
  int status = pclose(p);
  unlink(path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void fill(lk_metrics *m) {
  lk_counter_add(lk_metrics_counter(m, "app_requests_total", "Requests with \\ and\nnewline.",
                                    L("path", "/a\"b\\c\nd", "method", "GET")),
                 7);
  lk_counter_add(lk_metrics_counter(m, "app_requests_total", "ignored",
                                    L("path", "/\xe4\xb9\xa6", "method", "POST")),
                 1);
  lk_gauge_set(lk_metrics_gauge(m, "app_queue_depth", "Queue depth.", NULL), -3);
  lk_gauge_set(lk_metrics_gauge_scaled(m, "app_load_ratio", "Load.", L("zone", ""), 1e6), 333333);
  lk_counter_add(lk_metrics_counter_scaled(m, "app_busy_seconds_total", "Busy.", NULL, 1e9), 12345);
  lk_hist *h = lk_metrics_histogram(m, "app_latency_seconds", "Latency.", L("route", "x"));
  for (int i = 1; i <= 1000; i++)
    lk_hist_record(h, (int64_t)i * LK_MS(1) / 3);
  lk_metrics_histogram(m, "app_latency_seconds", "Latency.", L("route", "empty"));
  lk_hist_opts o;
  lk_hist_opts_init_default(&o);
  o.type = LK_METRIC_SUMMARY;
  lk_hist *s = lk_metrics_histogram_ex(m, "app_wait_seconds", "Wait.", NULL, &o);
  for (int i = 0; i < 100; i++)
    lk_hist_record(s, (int64_t)i * LK_NS_PER_US);
  lk_metrics_histogram_ex(m, "app_idle_seconds", "Nothing yet.", NULL, &o);

  lk_call_metrics *cm = lk_call_metrics_new(m, "books \"primary\"\n");
  lk_call_metrics_call_start(cm);
  lk_call_metrics_attempt_ex(cm, 1, LK_F_CONNECT_TIMEOUT, 0, LK_SEC(1));
  lk_call_metrics_attempt_ex(cm, 2, LK_F_HTTP_502, 502, LK_MS(20));
  lk_call_metrics_attempt_ex(cm, 3, LK_F_TOO_MANY_REQUESTS, 429, LK_MS(1));
  lk_call_metrics_call_end(cm, false, false, 3, LK_SEC(2), LK_EBUDGET);
  lk_call_metrics_breaker_transition(cm, LK_CM_BREAKER_CLOSED, LK_CM_BREAKER_OPEN);
  lk_call_metrics_bulkhead_wait(cm, LK_MS(3));
  lk_call_metrics_budget_consumption(cm, 0.2);
  lk_call_metrics_resend_detected(cm);
  lk_call_metrics_free(cm);
  lk_call_metrics_free(lk_call_metrics_new(m, "second"));
}

static void exposition_passes_promtool(void **state) {
  (void)state;
  const char *tool = promtool_path();
  if (!tool)
    fail_msg("promtool not found (install Debian package prometheus, or set PROMTOOL)");
  lk_metrics *m = lk_metrics_new();
  fill(m);
  char *text = NULL;
  assert_int_equal(lk_metrics_render(m, &text, NULL), LK_OK);
  char msg[8192];
  int rc = promtool_check(tool, text, msg, sizeof msg);
  if (rc != 0 || msg[0] != '\0')
    fail_msg("promtool rc=%d: %s\n--- exposition ---\n%s", rc, msg, text);
  free(text);
  lk_metrics_free(m);
}

/* The check is real: promtool rejects what the registry must never produce. */
static void promtool_rejects_bad_text(void **state) {
  (void)state;
  const char *tool = promtool_path();
  if (!tool)
    fail_msg("promtool not found (install Debian package prometheus, or set PROMTOOL)");
  char msg[4096];
  /* An unescaped quote inside a label value. */
  assert_int_not_equal(promtool_check(tool,
                                      "# HELP x_total X.\n# TYPE x_total counter\n"
                                      "x_total{a=\"b\"c\"} 1\n",
                                      msg, sizeof msg),
                       0);
  /* A counter without _total is linted. */
  assert_int_not_equal(
      promtool_check(tool, "# HELP x X.\n# TYPE x counter\nx 1\n", msg, sizeof msg), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(exposition_passes_promtool),
      cmocka_unit_test(promtool_rejects_bad_text),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
