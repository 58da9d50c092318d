/* SPDX-License-Identifier: MIT */
/* Graceful shutdown on SIGTERM / SIGINT: stop accepting, drain in-flight requests within the
 * drain timeout, close the database cleanly. */
#include "harness.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

typedef struct bg {
  int port;
  const char *path;
  long timeout_ms;
  http_res res;
} bg;

static void *bg_get(void *arg) {
  bg *b = arg;
  http_req rq = {.path = b->path, .timeout_ms = b->timeout_ms};
  http_do(b->port, &rq, &b->res);
  return NULL;
}

static void wait_in_flight(const lib_proc *p, int64_t n) {
  int64_t v = 0;
  for (int i = 0; i < 400 && v < n; i++) {
    json_t *st = lib_stats(p);
    v = (int64_t)json_integer_value(
        json_object_get(json_object_get(st, "server"), "requests_in_flight"));
    json_decref(st);
    if (v < n)
      sleep_ms(5);
  }
  assert_true(v >= n);
}

static bool file_exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static void drain(int sig) {
  lib_proc p;
  const char *args[] = {"--fault", "route=GET /books/1,kind=latency,delay=1500ms", NULL};
  assert_int_equal(lib_start(&p, args), 0);
  bg b = {p.port, "/books/1", 10000, {0}};
  pthread_t th;
  pthread_create(&th, NULL, bg_get, &b);
  wait_in_flight(&p, 1);
  double t0 = now_s();
  kill(p.pid, sig);
  /* New connections are refused while the accepted request finishes. */
  bool refused = false;
  while (!refused && now_s() - t0 < 1.2) {
    http_res r;
    http_req rq = {.path = "/healthz", .timeout_ms = 300};
    http_do(p.port, &rq, &r);
    refused = r.cc == CURLE_COULDNT_CONNECT;
    http_res_free(&r);
    if (!refused)
      sleep_ms(10);
  }
  assert_true(refused);
  pthread_join(th, NULL);
  assert_int_equal(b.res.cc, CURLE_OK);
  assert_int_equal(b.res.status, 200);
  http_res_free(&b.res);
  assert_int_equal(lib_stop_sig(&p, sig, 10000), 0);
  /* Closed cleanly: the last connection checkpointed and removed the WAL. */
  char wal[400];
  snprintf(wal, sizeof wal, "%s-wal", p.db);
  assert_false(file_exists(wal));
  assert_int_equal(lib_log_count(&p, "draining"), 1);
  lib_cleanup(&p);
}

static void test_sigterm_drains(void **state) {
  (void)state;
  drain(SIGTERM);
}

static void test_sigint_drains(void **state) {
  (void)state;
  drain(SIGINT);
}

static void test_drain_timeout_cuts_stragglers(void **state) {
  (void)state;
  lib_proc p;
  const char *args[] = {"--drain-timeout",
                        "300ms",
                        "--fault",
                        "route=GET /books/1,kind=latency,delay=20s",
                        "--fault",
                        "route=GET /books/2,kind=partial_stall,stall=20s",
                        NULL};
  assert_int_equal(lib_start(&p, args), 0);
  bg slow = {p.port, "/books/1", 15000, {0}}, stall = {p.port, "/books/2", 15000, {0}};
  pthread_t t1, t2;
  pthread_create(&t1, NULL, bg_get, &slow);
  pthread_create(&t2, NULL, bg_get, &stall);
  wait_in_flight(&p, 2);
  double t0 = now_s();
  assert_int_equal(lib_stop(&p), 0);
  double took = now_s() - t0;
  assert_true(took < 5.0); /* not the 20 s the faults asked for */
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  assert_int_equal(slow.res.status, 503); /* told, not dropped */
  assert_non_null(strstr(slow.res.body, "shutting_down"));
  assert_int_equal(stall.res.cc, CURLE_PARTIAL_FILE);
  http_res_free(&slow.res);
  http_res_free(&stall.res);
  assert_int_equal(lib_log_count(&p, "2 request(s) cut"), 1);
  lib_cleanup(&p);
}

static void test_data_survives_clean_restart(void **state) {
  (void)state;
  lib_proc p;
  assert_int_equal(lib_start(&p, NULL), 0);
  int64_t id = lib_create_book(p.port, 3);
  assert_true(id > 0);
  assert_int_equal(lib_stop(&p), 0);
  assert_int_equal(lib_restart(&p, NULL), 0);
  assert_int_equal(lib_stock(p.port, id), 3);
  http_res r;
  http_get(p.port, "/healthz", &r);
  assert_int_equal(r.status, 200);
  http_res_free(&r);
  assert_int_equal(lib_stop(&p), 0);
  lib_cleanup(&p);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sigterm_drains),
      cmocka_unit_test(test_sigint_drains),
      cmocka_unit_test(test_drain_timeout_cuts_stragglers),
      cmocka_unit_test(test_data_survives_clean_restart),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return rc;
}
