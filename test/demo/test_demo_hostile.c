/* SPDX-License-Identifier: MIT */
/* `linkd demo` run as a careless or hostile user would: a --libraryd that is not libraryd (exits
 * at once, never listens, forks), libraryd dying mid-run, Ctrl-C at awkward moments, a --report
 * or TMPDIR that cannot be used, a full stdout, two demos at once. Real processes on 127.0.0.1,
 * small runs (the faults scenario, --ops 10) so the file stays in the default, fast set. Each
 * test checks the exit code, the message, that --json still prints one valid document, and that
 * nothing is left behind (no process, no temporary file). */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include "demo_proc.h"
#include "demo_run.h"
#include "demo_server.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* stdout is one JSON document; returns it (the caller decrefs). */
static json_t *json_out(const run *r) {
  char *out = slurp(r->out);
  assert_non_null(out);
  json_error_t je;
  json_t *root = json_loads(out, 0, &je);
  if (!root)
    fprintf(stderr, "stdout is not JSON (%s): '%s'\n", je.text, out);
  free(out);
  assert_non_null(root);
  return root;
}

/* A fake libraryd: a shell script in r->base with `body` after the #! line. */
static void fake(const run *r, const char *name, const char *body, char *path, size_t cap) {
  snprintf(path, cap, "%s/%s", r->base, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, "#!/bin/sh\n%s\n", body);
  fclose(f);
  assert_int_equal(chmod(path, 0755), 0);
}

/* A sleep whose command line no other process has: "sleep 1<pid><n>" seconds. */
static void marker(char *buf, size_t cap, int n) {
  snprintf(buf, cap, "sleep 1%d%d", (int)getpid(), n);
}

/* A --libraryd that starts a child and exits at once: a clear error naming it, and its child
 * does not outlive the demo (it was left running: only the process started was signalled). */
static void test_libraryd_exits_at_once(void **state) {
  (void)state;
  run r;
  prepare(&r, "ht");
  char mark[64], body[160], bin[256];
  marker(mark, sizeof mark, 1);
  snprintf(body, sizeof body, "%s &\necho 'not libraryd' >&2\nexit 3", mark);
  fake(&r, "exits", body, bin, sizeof bin);
  const char *const args[] = {"--scenario", "faults", "--ops",    "10",     "--json",
                              "--libraryd", bin,      "--report", r.report, NULL};
  start_plain(&r, args);
  assert_int_equal(finish(&r, 20), 1);
  assert_true(has_text(r.err, "exited at start (status 3: not libraryd)"));
  assert_true(has_text(r.err, bin));
  json_t *root = json_out(&r);
  assert_false(json_is_true(json_object_get(root, "complete")));
  assert_non_null(strstr(json_string_value(json_object_get(root, "error")), "exited at start"));
  assert_int_equal(json_array_size(json_object_get(root, "scenarios")), 0);
  json_decref(root);
  assert_int_equal(survivors(mark), 0);
  assert_int_equal(dir_entries(r.tmp), 0);
  assert_int_equal(access(r.report, F_OK), -1);
  cleanup(&r);
}

/* A signal while a --libraryd that never writes its ports is starting: out at once (it waited
 * the whole 10 s for the ports), and the program's own child is gone too. SIGHUP (the terminal
 * closed) is handled like SIGINT and SIGTERM: it killed linkd and left the temporary files. */
static void never_listens_signalled(int sig, int n) {
  run r;
  prepare(&r, "ht");
  char mark[64], body[160], bin[256];
  marker(mark, sizeof mark, n);
  snprintf(body, sizeof body, "%s &\nwait", mark);
  fake(&r, "never", body, bin, sizeof bin);
  const char *const args[] = {"--scenario", "faults", "--ops",    "10",     "--json",
                              "--libraryd", bin,      "--report", r.report, NULL};
  start_plain(&r, args);
  bool running = false;
  for (int waited = 0; waited < 5000 && !running; waited += 20) {
    running = processes_with(mark, NULL, NULL) > 0;
    sleep_ms(20);
  }
  assert_true(running);
  int64_t t = now_ms();
  kill(r.pid, sig);
  int code = finish(&r, 30);
  int64_t took = now_ms() - t;
  if (code != 130 || took > 3000)
    dump(&r);
  assert_int_equal(code, 130);
  assert_true(took < 3000);
  json_t *root = json_out(&r);
  assert_string_equal(json_string_value(json_object_get(root, "error")), "interrupted");
  json_decref(root);
  assert_int_equal(survivors(mark), 0);
  assert_int_equal(dir_entries(r.tmp), 0);
  cleanup(&r);
}

static void test_never_listens_interrupted(void **state) {
  (void)state;
  never_listens_signalled(SIGINT, 2);
  never_listens_signalled(SIGTERM, 3);
  never_listens_signalled(SIGHUP, 4);
}

/* A --report that cannot be written, a TMPDIR that does not exist: said before anything runs
 * (the report's was found only after the whole run), with --json still one document. */
static void test_unusable_report_and_tmpdir(void **state) {
  (void)state;
  run r;
  prepare(&r, "ht");
  const char *const dir_report[] = {"--scenario", "faults",   "--ops", "10",
                                    "--json",     "--report", r.base,  NULL};
  start_plain(&r, dir_report);
  assert_int_equal(finish(&r, 5), 73); /* EX_CANTCREAT, as for the CLI's -o */
  assert_true(has_text(r.err, "is a directory"));
  assert_false(has_text(r.err, "running the"));
  json_t *root = json_out(&r);
  assert_false(json_is_true(json_object_get(root, "complete")));
  json_decref(root);
  char missing[256];
  snprintf(missing, sizeof missing, "%s/no/such/dir/r.html", r.base);
  const char *const missing_report[] = {"--scenario", "faults", "--ops", "10",
                                        "--report",   missing,  NULL};
  start_plain(&r, missing_report);
  assert_int_equal(finish(&r, 5), 73);
  assert_true(has_text(r.err, "cannot create a file in"));
  assert_false(has_text(r.err, "running the"));
  /* the message names the directory and the variable to change */
  const char *const ok_report[] = {"--scenario", "faults", "--ops", "10",
                                   "--report",   r.report, NULL};
  start_full(&r, ok_report, "/nonexistent-linkd-tmp", NULL);
  assert_int_equal(finish(&r, 5), 1);
  assert_true(has_text(r.err, "/nonexistent-linkd-tmp"));
  assert_true(has_text(r.err, "TMPDIR"));
  assert_int_equal(access(r.report, F_OK), -1);
  cleanup(&r);
}

/* Ctrl-C in the second scenario: 130, and --json lists the scenario that finished, whole (it
 * printed nothing). */
static void test_interrupted_json_keeps_finished_scenarios(void **state) {
  (void)state;
  run r;
  prepare(&r, "ht");
  const char *const args[] = {"--ops",  "10",       "--storm-seconds", "5",
                              "--json", "--report", r.report,          NULL};
  start_plain(&r, args);
  bool in_storm = wait_for_text(r.err, "scenario storm", 90000);
  if (!in_storm)
    dump(&r);
  assert_true(in_storm);
  kill(r.pid, SIGINT);
  assert_int_equal(finish(&r, 30), 130);
  json_t *root = json_out(&r);
  assert_false(json_is_true(json_object_get(root, "complete")));
  assert_string_equal(json_string_value(json_object_get(root, "error")), "interrupted");
  assert_true(json_is_null(json_object_get(root, "report")));
  json_t *scs = json_object_get(root, "scenarios");
  assert_int_equal(json_array_size(scs), 1);
  json_t *f = json_array_get(scs, 0);
  assert_string_equal(json_string_value(json_object_get(f, "name")), "faults");
  json_t *cl = json_object_get(f, "clients");
  assert_int_equal(json_array_size(cl), 4);
  for (size_t i = 0; i < 4; i++) {
    json_t *c = json_array_get(cl, i);
    assert_int_equal(json_integer_value(json_object_get(c, "completed")), 10);
    assert_true(json_is_object(json_object_get(c, "server")));
  }
  json_decref(root);
  assert_int_equal(access(r.report, F_OK), -1);
  assert_int_equal(dir_entries(r.tmp), 0);
  assert_int_equal(processes_with(r.tmp, NULL, NULL), 0);
  cleanup(&r);
}

/* libraryd killed in the middle of a client's run: the error says so (it named whichever admin
 * call failed next), 1, valid JSON, nothing left. */
static void test_libraryd_dies_mid_run(void **state) {
  (void)state;
  run r;
  prepare(&r, "ht");
  const char *const args[] = {"--scenario", "faults",   "--ops",  "2000",
                              "--json",     "--report", r.report, NULL};
  start_plain(&r, args);
  assert_true(wait_for_text(r.err, "running the fixed interval client", 30000));
  pid_t victim = 0;
  for (int waited = 0; waited < 5000 && !victim; waited += 20) {
    processes_with(r.tmp, "faults-fixed", &victim);
    sleep_ms(20);
  }
  assert_true(victim > 0);
  sleep_ms(300);
  kill(victim, SIGKILL);
  int code = finish(&r, 60);
  if (code != 1)
    dump(&r);
  assert_int_equal(code, 1);
  assert_true(has_text(r.err, "libraryd exited during the run (signal 9"));
  json_t *root = json_out(&r);
  assert_false(json_is_true(json_object_get(root, "complete")));
  assert_non_null(strstr(json_string_value(json_object_get(root, "error")), "libraryd exited"));
  json_decref(root);
  assert_int_equal(dir_entries(r.tmp), 0);
  assert_int_equal(processes_with(r.tmp, NULL, NULL), 0);
  cleanup(&r);
}

/* A driver that cannot keep up: one operation in flight at most, due every millisecond, each
 * taking longer than that. The operations wait for the slot, and their latency and deadline
 * count from when they were due: timed from the submit, every success took about one request's
 * time (1.5 ms at the median) however long it had waited. The linkd clients, whose deadline
 * starts then too, still never overrun it. */
static void test_held_operations_count_their_wait(void **state) {
  (void)state;
  run r;
  prepare(&r, "ht");
  const char *const args[] = {"--scenario",    "faults", "--ops",  "40",       "--rate", "1000",
                              "--concurrency", "1",      "--json", "--report", r.report, NULL};
  start_plain(&r, args);
  int rc = finish(&r, 120);
  if (rc != 0)
    dump(&r);
  assert_int_equal(rc, 0);
  json_t *root = json_out(&r);
  json_t *cl = json_object_get(json_array_get(json_object_get(root, "scenarios"), 0), "clients");
  assert_int_equal(json_array_size(cl), 4);
  for (size_t i = 0; i < 4; i++) {
    json_t *c = json_array_get(cl, i);
    const char *name = json_string_value(json_object_get(c, "name"));
    double p50 = json_real_value(json_object_get(json_object_get(c, "latency_ms"), "p50"));
    if (p50 < 5.0)
      fprintf(stderr, "%s: success p50 %.2f ms\n", name, p50);
    assert_true(p50 >= 5.0);
    if (!strcmp(name, "defaults") || !strcmp(name, "linkd"))
      assert_int_equal(json_integer_value(json_object_get(c, "deadline_overruns")), 0);
  }
  json_decref(root);
  assert_int_equal(dir_entries(r.tmp), 0);
  cleanup(&r);
}

/* Two demos at once, in one directory with one report path: no port or file clash, the report
 * whole, no temporary file beside it. One runs with the largest seed libraryd takes; the other
 * has a stdout that cannot be written, a failure (exit 73, not 0), the report written all the same.
 */
static void test_two_at_once(void **state) {
  (void)state;
  run a, b;
  prepare(&a, "ht");
  prepare(&b, "ht");
  const char *const args_a[] = {
      "--scenario",          "faults",   "--ops",  "10", "--json", "--seed",
      "9223372036854775807", "--report", a.report, NULL};
  const char *const args_b[] = {"--scenario", "faults", "--ops", "10", "--report", a.report, NULL};
  start_plain(&a, args_a);
  start_full(&b, args_b, NULL, "/dev/full");
  int ca = finish(&a, 90), cb = finish(&b, 90);
  if (ca != 0 || cb != 73) {
    dump(&a);
    dump(&b);
  }
  assert_int_equal(ca, 0);
  assert_int_equal(cb, 73);
  assert_true(has_text(b.err, "cannot write the results to stdout"));
  json_t *ja = json_out(&a);
  assert_true(json_is_true(json_object_get(ja, "complete")));
  json_t *sa = json_array_get(json_object_get(ja, "scenarios"), 0);
  assert_true(json_integer_value(json_object_get(sa, "seed")) == INT64_MAX);
  json_decref(ja);
  char *html = slurp(a.report);
  assert_non_null(html);
  assert_non_null(strstr(html, "</html>"));
  assert_null(strstr(html, "<script")); /* offline: nothing to run, nothing fetched */
  assert_null(strstr(html, "src=\""));
  assert_null(strstr(html, "href=\""));
  free(html);
  assert_int_equal(dir_entries(a.base), 3); /* stdout, stderr, report.html */
  assert_int_equal(dir_entries(a.tmp), 0);
  assert_int_equal(dir_entries(b.tmp), 0);
  cleanup(&a);
  cleanup(&b);
}

/* Ctrl-C in the faults scenario, with its 2.5 s stalls in flight at libraryd: linkd exits without
 * waiting for libraryd's 2 s drain of requests whose callers it has just cancelled (it took
 * about 2 s), and leaves nothing behind. */
static void test_interrupt_does_not_wait_for_the_drain(void **state) {
  (void)state;
  run r;
  prepare(&r, "ht");
  const char *const args[] = {"--scenario", "faults", "--ops",    "5000",   "--json",
                              "--rate",     "500",    "--report", r.report, NULL};
  start_plain(&r, args);
  bool running = wait_for_text(r.err, "running the naive client", 30000);
  if (!running)
    dump(&r);
  assert_true(running);
  sleep_ms(1500); /* 2 % of the lookups stall 2.5 s: a dozen or more are in flight */
  int64_t t = now_ms();
  kill(r.pid, SIGINT);
  int code = finish(&r, 30);
  int64_t took = now_ms() - t;
  if (code != 130 || took > 1500)
    dump(&r);
  assert_int_equal(code, 130);
  assert_true(took < 1500);
  assert_int_equal(dir_entries(r.tmp), 0);
  assert_int_equal(processes_with(r.tmp, NULL, NULL), 0);
  cleanup(&r);
}

/* The storm's capacity probe ends as soon as the demo is told to stop (a Ctrl-C during it waited
 * its full 1.6 s). */
static void test_capacity_probe_stops(void **state) {
  (void)state;
  char dir[DEMO_PATH_MAX], err[1024];
  assert_int_equal(demo_tmpdir_create(dir, sizeof dir), 0);
  lk_http_cancel *stop = lk_http_cancel_new();
  assert_non_null(stop);
  demo_server srv;
  int rc = demo_server_start(&srv, LIBRARYD_BIN, dir, "probe", 1, NULL, 0, stop, err, sizeof err);
  if (rc)
    fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
  lk_http_client *admin = lk_http_client_new(NULL);
  assert_non_null(admin);
  int64_t ids[8];
  assert_int_equal(demo_server_create_books(&srv, admin, 8, 1000, ids, err, sizeof err), 0);
  demo_op ops[64];
  demo_workload_make(ops, 64, 1, 8);
  lk_http_cancel_fire(stop);
  int64_t t = now_ms();
  demo_measure_capacity(&srv, ops, 64, ids, 999999, 16, LK_MS(1600));
  int64_t took = now_ms() - t;
  assert_true(took < 800);
  lk_http_client_free(admin);
  demo_server_stop(&srv);
  assert_int_equal(srv.pid, 0);
  lk_http_cancel_free(stop);
  demo_tmpdir_remove(dir);
}

int main(int argc, char **argv) {
  if (argc > 1)
    cmocka_set_test_filter(argv[1]); /* one test by name (a pattern with '*') */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_libraryd_exits_at_once),
      cmocka_unit_test(test_never_listens_interrupted),
      cmocka_unit_test(test_unusable_report_and_tmpdir),
      cmocka_unit_test(test_capacity_probe_stops),
      cmocka_unit_test(test_interrupted_json_keeps_finished_scenarios),
      cmocka_unit_test(test_interrupt_does_not_wait_for_the_drain),
      cmocka_unit_test(test_libraryd_dies_mid_run),
      cmocka_unit_test(test_two_at_once),
      cmocka_unit_test(test_held_operations_count_their_wait),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
