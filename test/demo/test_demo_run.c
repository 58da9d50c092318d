/* SPDX-License-Identifier: MIT */
/* Integration tests of `linkd demo`: the real linkd and libraryd binaries, real sockets on
 * 127.0.0.1, real SQLite files. A run at the default lengths is checked for the outcome the demo
 * exists to show (docs/demo.md), in both scenarios:
 *   - linkd's policy: no loan applied twice (libraryd's own records), no call longer than the
 *     deadline + 50 ms, less load on libraryd than the naive and fixed-interval clients;
 *   - faults: linkd's policy at least as successful as the best other client;
 *   - storm: the naive and fixed-interval clients never recover from the slowdown (a metastable
 *     failure), linkd's policy recovers within 1.5 s and succeeds at least twice as often;
 * and that the demo leaves nothing behind: no libraryd process, no temporary file, only the
 * report (self-contained HTML with SVG). Also: Ctrl-C stops everything and cleans up. */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include "demo_proc.h"
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Starts `linkd demo ARGS... --report R` with TMPDIR set to a private directory. */
static void start(run *r, const char *const *args) {
  prepare(r, "it");
  const char *argv[32];
  int n = 0;
  for (; args[n] && n < 28; n++)
    argv[n] = args[n];
  argv[n++] = "--report";
  argv[n++] = r->report;
  argv[n] = NULL;
  start_full(r, argv, NULL, NULL);
}

static int processes_mentioning(const char *needle) { return processes_with(needle, NULL, NULL); }

static json_t *client(json_t *sc, const char *name) {
  json_t *cl = json_object_get(sc, "clients");
  for (size_t i = 0; i < json_array_size(cl); i++) {
    json_t *c = json_array_get(cl, i);
    if (!strcmp(json_string_value(json_object_get(c, "name")), name))
      return c;
  }
  fail_msg("no client '%s' in the JSON", name);
  return NULL;
}

static double num(json_t *o, const char *name) {
  json_t *v = json_object_get(o, name);
  assert_true(json_is_number(v));
  return json_number_value(v);
}

static json_t *scenario(json_t *root, const char *name) {
  json_t *a = json_object_get(root, "scenarios");
  for (size_t i = 0; i < json_array_size(a); i++)
    if (!strcmp(json_string_value(json_object_get(json_array_get(a, i), "name")), name))
      return json_array_get(a, i);
  fail_msg("no scenario '%s' in the JSON", name);
  return NULL;
}

static const char *const names[] = {"naive", "fixed", "defaults", "linkd"};

/* What holds in both scenarios: every operation accounted for, libraryd's own numbers present,
 * linkd's policy without a duplicate loan or a deadline overrun and with the lowest load. */
static void common_rows(json_t *sc, int ops) {
  assert_int_equal((int)num(sc, "ops"), ops);
  assert_int_equal(json_array_size(json_object_get(sc, "clients")), 4);
  for (int i = 0; i < 4; i++) {
    json_t *c = client(sc, names[i]);
    assert_int_equal((int)num(c, "completed"), ops);
    assert_false(json_is_true(json_object_get(c, "cut_short")));
    assert_true(json_is_object(json_object_get(c, "server")));
    assert_true(num(c, "attempts") >= num(c, "ops") - num(c, "refused_by_breaker"));
    assert_true(json_is_array(json_object_get(json_object_get(c, "series"), "server")));
  }
  json_t *linkd = client(sc, "linkd");
  assert_int_equal((int)num(linkd, "duplicate_loans"), 0);
  assert_int_equal((int)num(linkd, "deadline_overruns"), 0);
  double lk = num(json_object_get(linkd, "server"), "requests_per_op");
  for (int i = 0; i < 2; i++) /* the two clients without linkd's ideas */
    assert_true(num(json_object_get(client(sc, names[i]), "server"), "requests_per_op") > lk);
}

static void test_demo_outcome(void **state) {
  (void)state;
  char seed[32];
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)lk_test_seed());
  const char *const args[] = {"--seed", seed, "--json", NULL}; /* the defaults, as users run it */
  run r;
  start(&r, args);
  int code = finish(&r, 280);
  if (code != 0)
    dump(&r);
  assert_int_equal(code, 0);
  char *out = slurp(r.out);
  assert_non_null(out);
  json_error_t je;
  json_t *root = json_loads(out, 0, &je);
  if (!root)
    fprintf(stderr, "not JSON (%s): %s\n", je.text, out);
  assert_non_null(root);
  free(out);
  assert_int_equal(json_array_size(json_object_get(root, "scenarios")), 2);

  /* faults: keys make retried loans replays, the deadline bounds every call, and linkd's policy
   * is at least as successful as the best of the others (2 points of slack for a small run) */
  json_t *f = scenario(root, "faults");
  common_rows(f, (int)num(f, "ops"));
  json_t *naive = client(f, "naive"), *fixed = client(f, "fixed"), *linkd = client(f, "linkd");
  assert_true(num(json_object_get(linkd, "server"), "replays") >= 1);
  assert_true(num(naive, "duplicate_loans") >= 1);
  double best = num(naive, "success_in_deadline_rate");
  best = num(fixed, "success_in_deadline_rate") > best ? num(fixed, "success_in_deadline_rate")
                                                       : best;
  printf("# faults: success within deadline linkd %.3f, best other %.3f\n",
         num(linkd, "success_in_deadline_rate"), best);
  assert_true(num(linkd, "success_in_deadline_rate") >= best - 0.02);

  /* storm: the naive and fixed-interval clients collapse and stay down; linkd's policy keeps
   * succeeding, recovers within about a second, and libraryd wastes no work on it */
  json_t *st = scenario(root, "storm");
  assert_true(num(st, "capacity") > 0);
  common_rows(st, (int)num(st, "ops"));
  naive = client(st, "naive");
  fixed = client(st, "fixed");
  linkd = client(st, "linkd");
  json_t *defaults = client(st, "defaults");
  best = num(naive, "success_in_deadline_rate");
  best = num(fixed, "success_in_deadline_rate") > best ? num(fixed, "success_in_deadline_rate")
                                                       : best;
  printf("# storm: success within deadline linkd %.3f, defaults %.3f, best other %.3f\n",
         num(linkd, "success_in_deadline_rate"), num(defaults, "success_in_deadline_rate"), best);
  assert_true(num(linkd, "success_in_deadline_rate") >= 2 * best);
  assert_true(json_is_null(json_object_get(naive, "recovery_ms"))); /* metastable: never back */
  assert_true(json_is_null(json_object_get(fixed, "recovery_ms")));
  assert_true(json_is_number(json_object_get(linkd, "recovery_ms")));
  assert_true(num(linkd, "recovery_ms") <= 1500);
  assert_true(json_is_number(json_object_get(defaults, "recovery_ms"))); /* the defaults survive */
  assert_true(num(naive, "abandoned_work_share") > 0.5);
  assert_true(num(linkd, "abandoned_work_share") < 0.05);
  /* its adaptive limit sheds what libraryd cannot serve in time instead of queueing it, so its
   * successes stay fast through and after the slowdown (the others' are slow or lost) */
  double p99 = num(json_object_get(linkd, "latency_ms"), "p99");
  printf("# storm: success p99 linkd %.1f ms, naive %.1f ms, fixed %.1f ms\n", p99,
         num(json_object_get(naive, "latency_ms"), "p99"),
         num(json_object_get(fixed, "latency_ms"), "p99"));
  assert_true(p99 < num(json_object_get(naive, "latency_ms"), "p99"));
  assert_true(p99 < num(json_object_get(fixed, "latency_ms"), "p99"));

  /* the report: where the JSON says, self-contained HTML with the charts */
  char canon[PATH_MAX];
  assert_non_null(realpath(r.report, canon));
  assert_string_equal(json_string_value(json_object_get(root, "report")), canon);
  char *html = slurp(r.report);
  assert_non_null(html);
  assert_non_null(strstr(html, "<svg"));
  assert_non_null(strstr(strstr(html, "<svg") + 4, "<svg"));
  assert_non_null(strstr(html, "<polyline"));
  assert_non_null(strstr(html, "</html>"));
  free(html);
  json_decref(root);

  /* progress went to stderr as plain lines (not a terminal) */
  char *err = slurp(r.err);
  assert_non_null(err);
  assert_non_null(strstr(err, "operations done"));
  assert_null(strstr(err, "\033[K"));
  free(err);

  /* nothing left behind: no temporary file, no libraryd */
  assert_int_equal(dir_entries(r.tmp), 0);
  assert_int_equal(processes_mentioning(r.tmp), 0);
  cleanup(&r);
}

/* A run too short to judge the recovery (faults --ops 100: 400 ms of schedule, the outage
 * ends at 220 ms) says "n/a", not "never" (it said "never" for every client). */
static void test_demo_short_run_recovery(void **state) {
  (void)state;
  const char *const args[] = {"--scenario", "faults", "--ops", "100", "--json", NULL};
  run r;
  start(&r, args);
  int code = finish(&r, 60);
  if (code != 0)
    dump(&r);
  assert_int_equal(code, 0);
  char *out = slurp(r.out);
  assert_non_null(out);
  json_error_t je;
  json_t *root = json_loads(out, 0, &je);
  assert_non_null(root);
  json_t *cl = json_object_get(scenario(root, "faults"), "clients");
  assert_int_equal(json_array_size(cl), 4);
  for (size_t i = 0; i < 4; i++) {
    json_t *c = json_array_get(cl, i);
    assert_true(json_is_null(json_object_get(c, "recovery_ms")));
    assert_true(json_is_true(json_object_get(c, "recovery_too_short")));
  }
  json_decref(root);
  free(out);
  cleanup(&r);
}

static void test_demo_interrupted(void **state) {
  (void)state;
  const char *const args[] = {"--ops", "5000", NULL}; /* would take over a minute */
  run r;
  start(&r, args);
  bool started = wait_for_text(r.err, "running the naive client", 20000);
  if (!started)
    dump(&r);
  assert_true(started);
  sleep_ms(500);
  assert_true(processes_mentioning(r.tmp) >= 1); /* libraryd is running in our TMPDIR */
  kill(r.pid, SIGINT);
  int code = finish(&r, 30);
  if (code != 130)
    dump(&r);
  assert_int_equal(code, 130);
  assert_true(wait_for_text(r.err, "interrupted", 100));
  assert_int_equal(access(r.report, F_OK), -1); /* no report from a cut run */
  assert_int_equal(dir_entries(r.tmp), 0);
  assert_int_equal(processes_mentioning(r.tmp), 0);
  cleanup(&r);
}

static void test_demo_usage(void **state) {
  (void)state;
  const char *const args[] = {"--ops", "many", NULL};
  run r;
  start(&r, args);
  assert_int_equal(finish(&r, 20), 64);
  assert_true(wait_for_text(r.err, "--ops", 100));
  assert_int_equal(dir_entries(r.tmp), 0);
  cleanup(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_demo_usage),
      cmocka_unit_test(test_demo_outcome),
      cmocka_unit_test(test_demo_interrupted),
      cmocka_unit_test(test_demo_short_run_recovery),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
