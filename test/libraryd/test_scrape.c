/* SPDX-License-Identifier: MIT */
/* GET /metrics while the store's writer is busy, on a server in this process (so the test can
 * hold the writer itself): the scrape answers at once, and so does a request that registers a
 * series of its own meanwhile. A scrape used to read the commit counts under the writer's lock
 * while it held the metrics lock, so it waited for a COMMIT's fsync, and every request whose
 * route, method and status had no series yet waited behind it (about 50 ms seen). */
#include "dbdir.h"
#include "harness.h"
#include "inproc.h"
#include "server.h"
#include "store.h"
#include "writer_gate.h"

#include <linkd/error.h>

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

/* The value of the unlabelled sample `name` in an exposition; -1 when absent. */
static long long sample(const char *text, const char *name) {
  size_t n = strlen(name);
  for (const char *p = text; (p = strstr(p, name)) != NULL; p += n)
    if ((p == text || p[-1] == '\n') && p[n] == ' ')
      return strtoll(p + n + 1, NULL, 10);
  return -1;
}

static void scrape_while_writer_held(const fixture *f, bool group) {
  lk_store_config scfg;
  lk_store_config_init_default(&scfg);
  scfg.path = f->path;
  scfg.sync = LK_STORE_SYNC_FULL;
  scfg.group_commit = group;
  lk_store *store = NULL;
  char err[256] = "";
  assert_int_equal(lk_store_open(&scfg, &store, err, sizeof err), LK_OK);
  lk_server *srv = inproc_start(store);
  int port = lk_server_port(srv);

  http_res r;
  assert_int_equal(http_get(port, "/metrics", &r), 0);
  assert_int_equal(r.status, 200);
  long long commits = sample(r.body, "libraryd_store_commits_total");
  long long writes = sample(r.body, "libraryd_store_writes_total");
  assert_true(commits >= 0 && writes >= commits);
  http_res_free(&r);

  gate g = GATE_INIT;
  gate_arg ga = {store, &g, -1};
  pthread_t gt;
  assert_int_equal(gate_hold(&ga, &gt), 0);

  /* The writer is held. A scrape answers, with the counts from before the held write... */
  http_req rq = {.path = "/metrics", .timeout_ms = 3000};
  http_do(port, &rq, &r);
  long status = r.status;
  double secs = r.secs;
  long long during = status == 200 ? sample(r.body, "libraryd_store_commits_total") : -2;
  http_res_free(&r);
  /* ...and so does a request whose (route, method, status) has no series yet: it registers one
   * under the metrics lock, which a waiting scrape would hold. */
  http_req nf = {.path = "/nowhere", .timeout_ms = 3000};
  http_do(port, &nf, &r);
  long nf_status = r.status;
  double nf_secs = r.secs;
  http_res_free(&r);

  gate_open(&g); /* whatever happened: the threads must end */
  pthread_join(gt, NULL);
  assert_int_equal(ga.rc, LK_OK);
  if (status != 200 || nf_status != 404)
    fail_msg("%s: with the writer held, /metrics got %ld after %.2f s and a new series' request "
             "%ld after %.2f s",
             group ? "group commit" : "no grouping", status, secs, nf_status, nf_secs);
  assert_int_equal(during, commits);

  /* The held write is counted once it is over, and the exposition is the same as before. */
  assert_int_equal(http_get(port, "/metrics", &r), 0);
  assert_int_equal(r.status, 200);
  assert_int_equal(sample(r.body, "libraryd_store_commits_total"), commits + 1);
  assert_int_equal(sample(r.body, "libraryd_store_writes_total"), writes + 1);
  assert_non_null(strstr(r.body, "\nlibraryd_requests_total{route=\"other\",method=\"GET\","
                                 "code=\"404\"} 1\n"));
  FILE *pt = popen("promtool check metrics >/dev/null 2>&1", "w"); /* a test dependency */
  assert_non_null(pt);
  fwrite(r.body, 1, r.len, pt);
  int st = pclose(pt);
  assert_int_equal(WEXITSTATUS(st), 0);
  http_res_free(&r);
  lk_server_free(srv);
  lk_store_close(store);
}

static void test_scrape_does_not_wait_for_the_writer(void **state) {
  scrape_while_writer_held(*state, true);
}

static void test_scrape_does_not_wait_for_the_writer_ungrouped(void **state) {
  scrape_while_writer_held(*state, false);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_scrape_does_not_wait_for_the_writer, dbdir_setup,
                                      dbdir_teardown),
      cmocka_unit_test_setup_teardown(test_scrape_does_not_wait_for_the_writer_ungrouped,
                                      dbdir_setup, dbdir_teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return rc;
}
