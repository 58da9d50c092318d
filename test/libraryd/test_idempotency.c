/* SPDX-License-Identifier: MIT */
/* Idempotency-Key rules, observed from a real client: replay, 422, 409, 400, the retention
 * window, tenant isolation, and keys surviving restarts (clean and kill -9). */
#include "harness.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static lib_proc P;

static int group_setup(void **state) {
  (void)state;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const char *args[] = {"--require-key", "POST /books/*/loans", NULL};
  return lib_start(&P, args);
}

static int group_teardown(void **state) {
  (void)state;
  int rc = lib_stop(&P);
  lib_cleanup(&P);
  curl_global_cleanup();
  return rc == 0 ? 0 : -1;
}

static void loans_path(int64_t book, char *out, size_t cap) {
  snprintf(out, cap, "/books/%lld/loans", (long long)book);
}

/* POST a loan with the given key header (and optional tenant header). */
static void keyed_loan(int port, int64_t book, const char *key, const char *tenant_hdr,
                       const char *body, http_res *r) {
  char path[64], kh[400];
  loans_path(book, path, sizeof path);
  snprintf(kh, sizeof kh, "Idempotency-Key: %s", key);
  const char *h[] = {kh, tenant_hdr, NULL};
  http_send(port, "POST", path, h, body, r);
}

static bool replayed(const http_res *r) {
  char v[16];
  return http_header(r, "Idempotent-Replayed", v, sizeof v) && !strcmp(v, "true");
}

static int64_t json_int(const http_res *r, const char *field) {
  json_t *j = http_json(r);
  int64_t v = j ? (int64_t)json_integer_value(json_object_get(j, field)) : -1;
  json_decref(j);
  return v;
}

static void test_replay_returns_the_stored_result(void **state) {
  (void)state;
  int64_t book = lib_create_book(P.port, 10);
  http_res a, b;
  keyed_loan(P.port, book, "replay-1", NULL, "{\"borrower\":\"ann\"}", &a);
  assert_int_equal(a.status, 201);
  assert_false(replayed(&a));
  keyed_loan(P.port, book, "replay-1", NULL, "{\"borrower\":\"ann\"}", &b);
  assert_int_equal(b.status, 201);
  assert_true(replayed(&b));
  assert_int_equal(a.len, b.len);
  assert_memory_equal(a.body, b.body, a.len); /* byte for byte */
  char la[64], lb[64];
  assert_string_equal(http_header(&a, "Location", la, sizeof la),
                      http_header(&b, "Location", lb, sizeof lb));
  http_res_free(&a);
  http_res_free(&b);
  assert_int_equal(lib_stock(P.port, book), 9); /* applied once */
  /* The quoted (structured-field string) form names the same key. */
  keyed_loan(P.port, book, "\"replay-1\"", NULL, "{\"borrower\":\"ann\"}", &b);
  assert_true(replayed(&b));
  http_res_free(&b);
  /* A business outcome is a result too: 404 is stored and replayed. */
  keyed_loan(P.port, 888888, "replay-404", NULL, NULL, &a);
  assert_int_equal(a.status, 404);
  assert_false(replayed(&a));
  keyed_loan(P.port, 888888, "replay-404", NULL, NULL, &b);
  assert_int_equal(b.status, 404);
  assert_true(replayed(&b));
  http_res_free(&a);
  http_res_free(&b);
}

static void test_other_writes_replay(void **state) {
  (void)state;
  json_t *st = lib_stats(&P);
  int64_t books_before = (int64_t)json_integer_value(json_object_get(st, "books"));
  json_decref(st);
  const char *h[] = {"Idempotency-Key: create-1", NULL};
  const char *body = "{\"title\":\"Keyed\",\"author\":\"K\",\"stock\":3}";
  http_res a, b;
  http_send(P.port, "POST", "/books", h, body, &a);
  http_send(P.port, "POST", "/books", h, body, &b);
  assert_int_equal(a.status, 201);
  assert_int_equal(b.status, 201);
  assert_true(replayed(&b));
  assert_int_equal(json_int(&a, "id"), json_int(&b, "id"));
  st = lib_stats(&P);
  assert_int_equal(json_integer_value(json_object_get(st, "books")), books_before + 1);
  json_decref(st);
  char path[64];
  snprintf(path, sizeof path, "/books/%lld", (long long)json_int(&a, "id"));
  http_res_free(&a);
  http_res_free(&b);
  const char *hd[] = {"Idempotency-Key: delete-1", NULL};
  http_send(P.port, "DELETE", path, hd, NULL, &a);
  http_send(P.port, "DELETE", path, hd, NULL, &b);
  assert_int_equal(a.status, 204);
  assert_int_equal(b.status, 204); /* not 404: the stored result */
  assert_true(replayed(&b));
  http_res_free(&a);
  http_res_free(&b);
}

static void test_payload_mismatch_is_422(void **state) {
  (void)state;
  int64_t book = lib_create_book(P.port, 10), other = lib_create_book(P.port, 10);
  http_res r;
  keyed_loan(P.port, book, "mismatch-1", NULL, "{\"borrower\":\"ann\"}", &r);
  assert_int_equal(r.status, 201);
  http_res_free(&r);
  keyed_loan(P.port, book, "mismatch-1", NULL, "{\"borrower\":\"bob\"}", &r);
  assert_int_equal(r.status, 422);
  assert_non_null(strstr(r.body, "idempotency_key_reused"));
  http_res_free(&r);
  keyed_loan(P.port, other, "mismatch-1", NULL, "{\"borrower\":\"ann\"}", &r);
  assert_int_equal(r.status, 422); /* same key, other path */
  http_res_free(&r);
  assert_int_equal(lib_stock(P.port, book), 9);
  assert_int_equal(lib_stock(P.port, other), 10);
}

static void test_missing_and_malformed_keys_are_400(void **state) {
  (void)state;
  int64_t book = lib_create_book(P.port, 5);
  char path[64];
  loans_path(book, path, sizeof path);
  http_res r;
  http_send(P.port, "POST", path, NULL, NULL, &r);
  assert_int_equal(r.status, 400);
  assert_non_null(strstr(r.body, "idempotency_key_required"));
  http_res_free(&r);
  char longkey[300];
  memset(longkey, 'k', 256);
  longkey[256] = '\0';
  const char *bad[] = {longkey, "has space", "\"unterminated", "caf\xc3\xa9"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    keyed_loan(P.port, book, bad[i], NULL, NULL, &r);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "bad_idempotency_key"));
    http_res_free(&r);
  }
  longkey[255] = '\0'; /* 255 characters is the longest valid key */
  keyed_loan(P.port, book, longkey, NULL, NULL, &r);
  assert_int_equal(r.status, 201);
  http_res_free(&r);
  assert_int_equal(lib_stock(P.port, book), 4);
  /* Routes not listed with --require-key accept requests without a key. */
  http_send(P.port, "POST", "/books", NULL, "{\"title\":\"t\",\"author\":\"a\"}", &r);
  assert_int_equal(r.status, 201);
  http_res_free(&r);
}

static void test_tenants_never_share_keys(void **state) {
  (void)state;
  int64_t book = lib_create_book(P.port, 10);
  const char *who[] = {"X-Tenant: alpha", "X-Tenant: beta", "X-API-Key: secret-a",
                       "X-API-Key: secret-b", NULL};
  for (int i = 0; i < 5; i++) {
    http_res r;
    keyed_loan(P.port, book, "shared-key", who[i], NULL, &r);
    assert_int_equal(r.status, 201);
    assert_false(replayed(&r));
    http_res_free(&r);
  }
  assert_int_equal(lib_stock(P.port, book), 5);
  for (int i = 0; i < 5; i++) {
    http_res r;
    keyed_loan(P.port, book, "shared-key", who[i], NULL, &r);
    assert_true(replayed(&r));
    http_res_free(&r);
  }
  assert_int_equal(lib_stock(P.port, book), 5);
}

typedef struct bg {
  int port;
  int64_t book;
  http_res res;
} bg;

static void *bg_loan(void *arg) {
  bg *b = arg;
  keyed_loan(b->port, b->book, "slow-1", NULL, NULL, &b->res);
  return NULL;
}

static void test_concurrent_duplicate_is_409(void **state) {
  (void)state;
  int64_t book = lib_create_book(P.port, 10);
  char rule[128];
  snprintf(rule, sizeof rule, "route=POST /books/%lld/loans,kind=latency,delay=2500ms,count=1",
           (long long)book);
  http_res r;
  http_send(P.admin_port, "POST", "/admin/faults", NULL, rule, &r);
  assert_int_equal(r.status, 201);
  http_res_free(&r);
  bg b = {P.port, book, {0}};
  pthread_t th;
  pthread_create(&th, NULL, bg_loan, &b);
  /* Wait (bounded) until the first request holds its key. */
  int64_t executing = 0;
  for (int i = 0; i < 200 && executing == 0; i++) {
    json_t *st = lib_stats(&P);
    executing = (int64_t)json_integer_value(
        json_object_get(json_object_get(st, "server"), "keys_executing"));
    json_decref(st);
    if (!executing)
      sleep_ms(5);
  }
  assert_int_equal(executing, 1);
  keyed_loan(P.port, book, "slow-1", NULL, NULL, &r);
  assert_int_equal(r.status, 409);
  assert_non_null(strstr(r.body, "idempotency_key_in_use"));
  char ra[16];
  assert_non_null(http_header(&r, "Retry-After", ra, sizeof ra));
  http_res_free(&r);
  pthread_join(th, NULL);
  assert_int_equal(b.res.status, 201);
  assert_false(replayed(&b.res));
  http_res_free(&b.res);
  keyed_loan(P.port, book, "slow-1", NULL, NULL, &r);
  assert_int_equal(r.status, 201);
  assert_true(replayed(&r));
  http_res_free(&r);
  assert_int_equal(lib_stock(P.port, book), 9);
}

static void test_keys_survive_restarts(void **state) {
  (void)state;
  int64_t book = lib_create_book(P.port, 10);
  http_res a, b;
  keyed_loan(P.port, book, "restart-1", NULL, NULL, &a);
  assert_int_equal(a.status, 201);
  const char *args[] = {"--require-key", "POST /books/*/loans", NULL};
  assert_int_equal(lib_stop(&P), 0);
  assert_int_equal(lib_restart(&P, args), 0);
  keyed_loan(P.port, book, "restart-1", NULL, NULL, &b);
  assert_true(replayed(&b));
  assert_memory_equal(a.body, b.body, a.len);
  http_res_free(&b);
  lib_kill9(&P);
  assert_int_equal(lib_restart(&P, args), 0);
  keyed_loan(P.port, book, "restart-1", NULL, NULL, &b);
  assert_true(replayed(&b));
  assert_memory_equal(a.body, b.body, a.len);
  http_res_free(&a);
  http_res_free(&b);
  assert_int_equal(lib_stock(P.port, book), 9);
}

static void test_retention_window_and_purge(void **state) {
  (void)state;
  lib_proc q;
  const char *args[] = {"--idem-retention", "1s", "--purge-interval", "100ms", "--sync",
                        "normal",           NULL};
  assert_int_equal(lib_start(&q, args), 0);
  int64_t book = lib_create_book(q.port, 10);
  http_res r;
  keyed_loan(q.port, book, "window-1", NULL, NULL, &r);
  assert_int_equal(r.status, 201);
  http_res_free(&r);
  keyed_loan(q.port, book, "window-1", NULL, NULL, &r);
  assert_true(replayed(&r));
  http_res_free(&r);
  assert_int_equal(lib_stock(q.port, book), 9);
  /* Wait for the event, not a guessed time: a probe key created after window-1 answers a
   * different body with 422 while its record lives and executes it once the record has expired;
   * window-1 is older, so from then on it is past its window too. */
  int64_t probe_book = lib_create_book(q.port, 10);
  keyed_loan(q.port, probe_book, "window-probe", NULL, NULL, &r);
  assert_int_equal(r.status, 201);
  http_res_free(&r);
  long probe = 0;
  for (int i = 0; i < 200 && probe != 201; i++) {
    keyed_loan(q.port, probe_book, "window-probe", NULL, "{\"borrower\":\"other\"}", &r);
    probe = r.status;
    http_res_free(&r);
    assert_true(probe == 422 || probe == 201); /* 422 inside the window, 201 once past it */
    if (probe == 422)
      sleep_ms(50);
  }
  assert_int_equal(probe, 201);
  /* Past the window the key is forgotten: the same request is applied again. */
  keyed_loan(q.port, book, "window-1", NULL, NULL, &r);
  assert_int_equal(r.status, 201);
  assert_false(replayed(&r));
  http_res_free(&r);
  assert_int_equal(lib_stock(q.port, book), 8);
  /* And expired records are purged from the store (bounded wait). */
  int64_t records = -1;
  for (int i = 0; i < 60; i++) {
    json_t *st = lib_stats(&q);
    records = (int64_t)json_integer_value(json_object_get(st, "idempotency_records"));
    json_decref(st);
    if (records == 0)
      break;
    sleep_ms(50);
  }
  assert_int_equal(records, 0);
  assert_int_equal(lib_stop(&q), 0);
  lib_cleanup(&q);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_replay_returns_the_stored_result),
      cmocka_unit_test(test_other_writes_replay),
      cmocka_unit_test(test_payload_mismatch_is_422),
      cmocka_unit_test(test_missing_and_malformed_keys_are_400),
      cmocka_unit_test(test_tenants_never_share_keys),
      cmocka_unit_test(test_concurrent_duplicate_is_409),
      cmocka_unit_test(test_keys_survive_restarts),
      cmocka_unit_test(test_retention_window_and_purge),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
