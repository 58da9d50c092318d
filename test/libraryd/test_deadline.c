/* SPDX-License-Identifier: MIT */
/* Deadline propagation: an expired request gets 504 without doing any work; work in progress
 * stops when the deadline passes; both wire forms are understood; malformed values are 400. */
#include "harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static lib_proc P;
static int64_t BOOK;

static int group_setup(void **state) {
  (void)state;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  if (lib_start(&P, NULL) != 0)
    return -1;
  BOOK = lib_create_book(P.port, 100);
  return BOOK > 0 ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  int rc = lib_stop(&P);
  lib_cleanup(&P);
  curl_global_cleanup();
  return rc == 0 ? 0 : -1;
}

static void loan(const char *key, const char *deadline_hdr, http_res *r) {
  char path[64], kh[128];
  snprintf(path, sizeof path, "/books/%lld/loans", (long long)BOOK);
  snprintf(kh, sizeof kh, "Idempotency-Key: %s", key);
  const char *h[] = {kh, deadline_hdr, NULL};
  http_send(P.port, "POST", path, h, NULL, r);
}

static int64_t server_stat(const char *name) {
  json_t *st = lib_stats(&P);
  int64_t v = (int64_t)json_integer_value(json_object_get(json_object_get(st, "server"), name));
  json_decref(st);
  return v;
}

static void test_expired_on_arrival_does_no_work(void **state) {
  (void)state;
  int64_t before = lib_stock(P.port, BOOK);
  int64_t expired = server_stat("deadline_expired_on_arrival");
  http_res r;
  loan("late-1", "Linkd-Deadline: 0", &r);
  assert_int_equal(r.status, 504);
  assert_non_null(strstr(r.body, "deadline_exceeded"));
  http_res_free(&r);
  loan("late-1", "grpc-timeout: 0n", &r);
  assert_int_equal(r.status, 504);
  http_res_free(&r);
  assert_int_equal(lib_stock(P.port, BOOK), before);
  assert_int_equal(server_stat("deadline_expired_on_arrival"), expired + 2);
  /* Nothing was recorded for the key: a retry with time left applies it, once. */
  loan("late-1", "Linkd-Deadline: 5000", &r);
  assert_int_equal(r.status, 201);
  http_res_free(&r);
  assert_int_equal(lib_stock(P.port, BOOK), before - 1);
}

static void test_work_stops_at_the_deadline(void **state) {
  (void)state;
  char rule[128];
  snprintf(rule, sizeof rule, "route=POST /books/%lld/loans,kind=latency,delay=6s",
           (long long)BOOK);
  http_res r;
  http_send(P.admin_port, "POST", "/admin/faults", NULL, rule, &r);
  assert_int_equal(r.status, 201);
  http_res_free(&r);
  int64_t before = lib_stock(P.port, BOOK);
  loan("slow-1", "Linkd-Deadline: 150", &r);
  assert_int_equal(r.status, 504);
  assert_true(r.secs >= 0.14);
  assert_true(r.secs < 4.0); /* answered at the deadline, not after the 6 s of "work" */
  http_res_free(&r);
  loan("slow-2", "grpc-timeout: 150m", &r);
  assert_int_equal(r.status, 504);
  assert_true(r.secs < 4.0);
  http_res_free(&r);
  assert_int_equal(lib_stock(P.port, BOOK), before);
  http_send(P.admin_port, "DELETE", "/admin/faults", NULL, NULL, &r);
  http_res_free(&r);
  /* Retried with time left, the key applies exactly once. */
  loan("slow-1", "Linkd-Deadline: 5000", &r);
  assert_int_equal(r.status, 201);
  http_res_free(&r);
  assert_int_equal(lib_stock(P.port, BOOK), before - 1);
}

static void test_reads_honour_deadlines(void **state) {
  (void)state;
  http_res r;
  http_send(P.admin_port, "POST", "/admin/faults", NULL, "route=GET /books/2,kind=latency,delay=6s",
            &r);
  http_res_free(&r);
  const char *h[] = {"Linkd-Deadline: 100", NULL};
  http_send(P.port, "GET", "/books/2", h, NULL, &r);
  assert_int_equal(r.status, 504);
  assert_true(r.secs < 4.0);
  http_res_free(&r);
  /* The earlier of two deadline headers wins. */
  const char *both[] = {"Linkd-Deadline: 60000", "grpc-timeout: 100m", NULL};
  http_send(P.port, "GET", "/books/2", both, NULL, &r);
  assert_int_equal(r.status, 504);
  assert_true(r.secs < 4.0);
  http_res_free(&r);
  /* Latency within the deadline: a slow 200. */
  http_send(P.admin_port, "POST", "/admin/faults", NULL,
            "route=GET /books/3,kind=latency,delay=200ms", &r);
  http_res_free(&r);
  const char *roomy[] = {"Linkd-Deadline: 5000", NULL};
  http_send(P.port, "GET", "/books/3", roomy, NULL, &r);
  assert_int_equal(r.status, 200);
  assert_true(r.secs >= 0.19);
  http_res_free(&r);
  http_send(P.admin_port, "DELETE", "/admin/faults", NULL, NULL, &r);
  http_res_free(&r);
}

static void test_malformed_deadlines(void **state) {
  (void)state;
  const char *bad[] = {"Linkd-Deadline: soon", "Linkd-Deadline: -5",       "Linkd-Deadline: 1.5",
                       "grpc-timeout: 10",     "grpc-timeout: 123456789S", "grpc-timeout: 5x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *h[] = {bad[i], NULL};
    http_res r;
    http_send(P.port, "GET", "/books/1", h, NULL, &r);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "bad_deadline"));
    http_res_free(&r);
  }
  /* Well formed but beyond what int64 nanoseconds hold: no deadline at all, whatever the number
   * of digits (the core's plain parser stops at 18). */
  const char *huge[] = {"Linkd-Deadline: 999999999999999999", "Linkd-Deadline: 9223372036854775808",
                        "Linkd-Deadline: 99999999999999999999999999999999999999999999"};
  for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
    const char *h[] = {huge[i], NULL};
    http_res r;
    http_send(P.port, "GET", "/books/1", h, NULL, &r);
    if (r.status != 200)
      fprintf(stderr, "%s: %ld %s\n", huge[i], r.status, r.body);
    assert_int_equal(r.status, 200);
    http_res_free(&r);
  }
  /* Leading zeros do not make a value huge: 23 zeros are an expired deadline. */
  const char *zeros[] = {"Linkd-Deadline: 00000000000000000000000", NULL};
  http_res z;
  http_send(P.port, "GET", "/books/1", zeros, NULL, &z);
  assert_int_equal(z.status, 504);
  http_res_free(&z);
  /* The earlier of two still wins when one is huge; grpc-timeout keeps gRPC's 8 digits. */
  const char *mixed[] = {"Linkd-Deadline: 99999999999999999999", "grpc-timeout: 0n", NULL};
  http_res r;
  http_send(P.port, "GET", "/books/1", mixed, NULL, &r);
  assert_int_equal(r.status, 504);
  http_res_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_expired_on_arrival_does_no_work),
      cmocka_unit_test(test_work_stops_at_the_deadline),
      cmocka_unit_test(test_reads_honour_deadlines),
      cmocka_unit_test(test_malformed_deadlines),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
