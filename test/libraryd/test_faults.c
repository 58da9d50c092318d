/* SPDX-License-Identifier: MIT */
/* Every fault mode of libraryd, observed from a real libcurl client, plus the admin endpoint,
 * the flags, scripted counts and seeded reproducibility. */
#include "harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static lib_proc P;
static int64_t BOOK; /* a book with plenty of stock for loan faults */

static int group_setup(void **state) {
  (void)state;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const char *args[] = {"--seed", "7", NULL};
  if (lib_start(&P, args) != 0)
    return -1;
  BOOK = lib_create_book(P.port, 1000);
  return BOOK > 0 ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  int rc = lib_stop(&P);
  lib_cleanup(&P);
  curl_global_cleanup();
  return rc == 0 ? 0 : -1;
}

/* Replaces the daemon's rules with these (and reseeds when seed >= 0). */
static void set_faults(int64_t seed, const char *const *rules) {
  json_t *arr = json_array();
  for (int i = 0; rules && rules[i]; i++)
    json_array_append_new(arr, json_string(rules[i]));
  json_t *o = json_pack("{s:o}", "rules", arr);
  if (seed >= 0)
    json_object_set_new(o, "seed", json_integer(seed));
  char *body = json_dumps(o, 0);
  json_decref(o);
  http_res r;
  http_send(P.admin_port, "PUT", "/admin/faults", NULL, body, &r);
  if (r.status != 200)
    fprintf(stderr, "PUT /admin/faults: %ld %s\n", r.status, r.body);
  assert_int_equal(r.status, 200);
  http_res_free(&r);
  free(body);
}

static void one_fault(const char *rule) {
  const char *rules[] = {rule, NULL};
  set_faults(-1, rules);
}

static void loan(const char *key, http_res *r) {
  char path[64], kh[128];
  snprintf(path, sizeof path, "/books/%lld/loans", (long long)BOOK);
  snprintf(kh, sizeof kh, "Idempotency-Key: %s", key);
  const char *h[] = {key ? kh : NULL, NULL};
  http_send(P.port, "POST", path, h, "{\"borrower\":\"fault-test\"}", r);
}

static bool replayed(const http_res *r) {
  char v[16];
  return http_header(r, "Idempotent-Replayed", v, sizeof v) && !strcmp(v, "true");
}

/* A loan under a connection-level fault: the client sees `cc`, and the stock moves by `applied`.
 * Then, faults cleared, the same key is retried: exactly one loan in total. */
static void connection_fault(const char *kind, CURLcode cc, int applied) {
  char rule[128], key[64];
  snprintf(rule, sizeof rule, "route=POST /books/*/loans,kind=%s", kind);
  snprintf(key, sizeof key, "conn-%s", kind);
  one_fault(rule);
  int64_t before = lib_stock(P.port, BOOK);
  http_res r;
  loan(key, &r);
  if (r.cc != cc)
    fprintf(stderr, "%s: curl %d (%s), status %ld\n", kind, r.cc, curl_easy_strerror(r.cc),
            r.status);
  assert_int_equal(r.cc, cc);
  assert_int_equal(r.status, 0);
  http_res_free(&r);
  assert_int_equal(lib_stock(P.port, BOOK), before - applied);
  set_faults(-1, NULL);
  loan(key, &r);
  assert_int_equal(r.status, 201);
  assert_int_equal(replayed(&r), applied == 1);
  http_res_free(&r);
  assert_int_equal(lib_stock(P.port, BOOK), before - 1);
}

static void test_resets_and_closes(void **state) {
  (void)state;
  connection_fault("reset_before_read", CURLE_RECV_ERROR, 0);
  connection_fault("reset_after_read", CURLE_RECV_ERROR, 0);
  connection_fault("reset_after_processing", CURLE_RECV_ERROR, 1);
  connection_fault("close", CURLE_GOT_NOTHING, 0);
  connection_fault("close_after_processing", CURLE_GOT_NOTHING, 1);
  /* GETs see the same transport failures. */
  one_fault("route=GET /books/1,kind=reset_before_read");
  http_res r;
  http_get(P.port, "/books/1", &r);
  assert_int_equal(r.cc, CURLE_RECV_ERROR);
  http_res_free(&r);
  http_get(P.port, "/books/2", &r); /* other routes are untouched */
  assert_int_equal(r.status, 200);
  http_res_free(&r);
  set_faults(-1, NULL);
}

static void test_status_faults(void **state) {
  (void)state;
  const int codes[] = {500, 502, 503, 504, 408, 429};
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    char rule[96];
    snprintf(rule, sizeof rule, "route=POST /books/*/loans,kind=status,code=%d", codes[i]);
    one_fault(rule);
    int64_t before = lib_stock(P.port, BOOK);
    http_res r;
    loan("status-x", &r);
    assert_int_equal(r.status, codes[i]);
    assert_non_null(strstr(r.body, "injected_fault"));
    http_res_free(&r);
    assert_int_equal(lib_stock(P.port, BOOK), before); /* when=before: nothing processed */
  }
  one_fault("route=GET /books/*,kind=429,retry_after=2");
  http_res r;
  http_get(P.port, "/books/3", &r);
  assert_int_equal(r.status, 429);
  char ra[64];
  assert_string_equal(http_header(&r, "Retry-After", ra, sizeof ra), "2");
  http_res_free(&r);
  one_fault("route=GET /books/*,kind=503,retry_after=date:30");
  http_get(P.port, "/books/3", &r);
  assert_int_equal(r.status, 503);
  assert_non_null(http_header(&r, "Retry-After", ra, sizeof ra));
  time_t when = curl_getdate(ra, NULL);
  time_t now = time(NULL);
  assert_true(when > 0);
  assert_in_range(when - now, 25, 35);
  http_res_free(&r);
  /* route=* fails everything but /metrics, which stays observable under its own faults; /healthz
   * may still be failed on purpose (an instance that reports itself unhealthy) */
  one_fault("route=*,kind=status,code=503");
  http_get(P.port, "/metrics", &r);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.body, "libraryd_"));
  http_res_free(&r);
  http_get(P.port, "/healthz", &r);
  assert_int_equal(r.status, 503);
  http_res_free(&r);
  set_faults(-1, NULL);
}

static void test_status_after_processing(void **state) {
  (void)state;
  one_fault("route=POST /books/*/loans,kind=500,when=after");
  int64_t before = lib_stock(P.port, BOOK);
  http_res r;
  loan("after-1", &r);
  assert_int_equal(r.status, 500);
  http_res_free(&r);
  assert_int_equal(lib_stock(P.port, BOOK), before - 1); /* applied, then the error */
  set_faults(-1, NULL);
  loan("after-1", &r);
  assert_int_equal(r.status, 201); /* the stored result is the real one */
  assert_true(replayed(&r));
  http_res_free(&r);
  assert_int_equal(lib_stock(P.port, BOOK), before - 1);
}

static void test_latency(void **state) {
  (void)state;
  one_fault("route=GET /books/4,kind=latency,delay=300ms");
  http_res r;
  http_get(P.port, "/books/4", &r);
  assert_int_equal(r.status, 200);
  assert_true(r.secs >= 0.29);
  assert_true(r.secs < 5.0);
  http_res_free(&r);
  one_fault("route=GET /books/4,kind=latency,delay=uniform:100ms:200ms");
  for (int i = 0; i < 3; i++) {
    http_get(P.port, "/books/4", &r);
    assert_int_equal(r.status, 200);
    assert_true(r.secs >= 0.099);
    http_res_free(&r);
  }
  /* Latency combines with a status fault: a slow 503. */
  const char *both[] = {"route=GET /books/4,kind=latency,delay=200ms",
                        "route=GET /books/4,kind=503", NULL};
  set_faults(-1, both);
  http_get(P.port, "/books/4", &r);
  assert_int_equal(r.status, 503);
  assert_true(r.secs >= 0.19);
  http_res_free(&r);
  set_faults(-1, NULL);
}

static void test_partial_then_stall(void **state) {
  (void)state;
  one_fault("route=GET /books/5,kind=partial_stall,stall=400ms");
  http_res r;
  http_get(P.port, "/books/5", &r);
  assert_int_equal(r.cc, CURLE_PARTIAL_FILE); /* headers and half the body, then a close */
  assert_int_equal(r.status, 200);
  char cl[32];
  assert_non_null(http_header(&r, "Content-Length", cl, sizeof cl));
  assert_true(r.len > 0 && r.len < (size_t)atoi(cl));
  assert_true(r.secs >= 0.39);
  http_res_free(&r);
  /* A client whose timeout is shorter than the stall times out holding a partial body. */
  one_fault("route=GET /books/5,kind=partial_stall,stall=3s");
  http_req rq = {.path = "/books/5", .timeout_ms = 300};
  http_do(P.port, &rq, &r);
  assert_int_equal(r.cc, CURLE_OPERATION_TIMEDOUT);
  assert_true(r.len > 0);
  http_res_free(&r);
  set_faults(-1, NULL);
}

static int64_t in_flight(void) {
  json_t *st = lib_stats(&P);
  assert_non_null(st);
  int64_t n = (int64_t)json_integer_value(
      json_object_get(json_object_get(st, "server"), "requests_in_flight"));
  json_decref(st);
  return n;
}

/* A client that gives up during a stall or a slow body's pause frees its request (and its
 * connection, its slot in the connection limits) at once, not when the pause ends: libmicrohttpd
 * does not watch a suspended connection, so libraryd does. */
static void test_stall_ends_when_client_leaves(void **state) {
  (void)state;
  const char *rules[] = {"route=GET /books/5,kind=partial_stall,stall=30s",
                         "route=GET /books/6,kind=slow_body,chunk=16,interval=30s", NULL};
  set_faults(-1, rules);
  int gone = lib_log_count(&P, "outcome=client_gone");
  const char *paths[] = {"/books/5", "/books/6"};
  for (size_t i = 0; i < 2; i++) {
    http_res r;
    http_req rq = {.path = paths[i], .timeout_ms = 300};
    http_do(P.port, &rq, &r); /* libcurl closes the connection at its timeout */
    assert_int_equal(r.cc, CURLE_OPERATION_TIMEDOUT);
    assert_int_equal(r.status, 200);
    assert_true(r.len > 0); /* part of the body came, then the pause */
    http_res_free(&r);
    double t0 = now_s();
    while (in_flight() > 0 && now_s() - t0 < 3.0)
      sleep_ms(10);
    double waited = now_s() - t0;
    if (waited >= 3.0)
      fprintf(stderr, "%s: still in flight %.1f s after the client left\n", paths[i], waited);
    assert_true(waited < 3.0); /* the pause is 30 s */
  }
  /* Each ended as the client's departure, in the access log. */
  for (int i = 0; i < 200 && lib_log_count(&P, "outcome=client_gone") < gone + 2; i++)
    sleep_ms(10);
  assert_int_equal(lib_log_count(&P, "outcome=client_gone"), gone + 2);
  /* A client that is still there, with its next request pipelined behind the stalled one, is
   * not taken for gone: data to read is no hang-up. */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)P.port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  static const char two[] = "GET /books/5 HTTP/1.1\r\nHost: x\r\n\r\n"
                            "GET /books/1 HTTP/1.1\r\nHost: x\r\n\r\n";
  assert_int_equal(write(fd, two, sizeof two - 1), (ssize_t)(sizeof two - 1));
  char buf[2048];
  assert_true(read(fd, buf, sizeof buf) > 0); /* the head and half the body */
  sleep_ms(400);
  assert_int_equal(in_flight(), 1);
  close(fd);
  double t0 = now_s();
  while (in_flight() > 0 && now_s() - t0 < 3.0)
    sleep_ms(10);
  assert_true(now_s() - t0 < 3.0);
  set_faults(-1, NULL);
}

static void test_slow_body(void **state) {
  (void)state;
  one_fault("route=GET /books/6,kind=slow_body,chunk=16,interval=40ms");
  http_res r;
  http_get(P.port, "/books/6", &r);
  assert_int_equal(r.cc, CURLE_OK);
  assert_int_equal(r.status, 200);
  json_t *j = http_json(&r);
  assert_non_null(j); /* complete and intact */
  json_decref(j);
  size_t chunks = (r.len + 15) / 16;
  assert_true(r.secs >= 0.8 * 0.04 * (double)(chunks - 1));
  http_res_free(&r);
  set_faults(-1, NULL);
}

/* The statuses of n sequential GET /books/1, as a string of '0' (200) and '1' (503). */
static void status_pattern(int port, int n, char *out) {
  for (int i = 0; i < n; i++) {
    http_res r;
    http_get(port, "/books/1", &r);
    out[i] = r.status == 503 ? '1' : r.status == 200 ? '0' : '?';
    http_res_free(&r);
  }
  out[n] = '\0';
}

static void test_scripts_and_seeds(void **state) {
  (void)state;
  char p[33];
  one_fault("route=GET /books/1,kind=503,count=3");
  status_pattern(P.port, 6, p);
  assert_string_equal(p, "111000");
  one_fault("route=GET /books/1,kind=503,skip=1,count=2");
  status_pattern(P.port, 5, p);
  assert_string_equal(p, "01100");
  /* Probabilistic rules replay exactly from the seed. */
  const char *coin[] = {"route=GET /books/1,kind=503,p=0.5", NULL};
  char a[33], b[33], c[33];
  set_faults(11, coin);
  status_pattern(P.port, 32, a);
  set_faults(11, coin);
  status_pattern(P.port, 32, b);
  assert_string_equal(a, b);
  assert_non_null(strchr(a, '0'));
  assert_non_null(strchr(a, '1'));
  set_faults(12, coin);
  status_pattern(P.port, 32, c);
  assert_string_not_equal(a, c);
  /* A fresh daemon configured by flags with the same seed and rule draws the same faults. */
  lib_proc q;
  const char *args[] = {"--seed", "11", "--fault", coin[0], "--log", "off", NULL};
  assert_int_equal(lib_start(&q, args), 0);
  status_pattern(q.port, 32, c);
  assert_string_equal(a, c);
  assert_int_equal(lib_stop(&q), 0);
  lib_cleanup(&q);
  set_faults(7, NULL);
}

static void test_admin_endpoint(void **state) {
  (void)state;
  set_faults(-1, NULL);
  http_res r;
  http_send(P.admin_port, "POST", "/admin/faults", NULL, "route=GET /books/2,kind=503", &r);
  assert_int_equal(r.status, 201);
  json_t *j = http_json(&r);
  int id = (int)json_integer_value(json_object_get(j, "id"));
  json_decref(j);
  http_res_free(&r);
  http_send(P.admin_port, "POST", "/admin/faults", NULL,
            "{\"rule\":\"route=GET /books/3,kind=close\"}", &r);
  assert_int_equal(r.status, 201);
  http_res_free(&r);
  http_get(P.port, "/books/2", &r);
  assert_int_equal(r.status, 503);
  http_res_free(&r);
  http_get(P.admin_port, "/admin/faults", &r);
  assert_int_equal(r.status, 200);
  j = http_json(&r);
  json_t *rules = json_object_get(j, "rules");
  assert_int_equal(json_array_size(rules), 2);
  json_t *first = json_array_get(rules, 0);
  assert_int_equal(json_integer_value(json_object_get(first, "fired")), 1);
  assert_string_equal(json_string_value(json_object_get(first, "kind")), "status");
  json_decref(j);
  http_res_free(&r);
  char path[64];
  snprintf(path, sizeof path, "/admin/faults/%d", id);
  http_send(P.admin_port, "DELETE", path, NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  http_res_free(&r);
  http_send(P.admin_port, "DELETE", path, NULL, NULL, &r);
  assert_int_equal(r.status, 404);
  http_res_free(&r);
  http_get(P.port, "/books/2", &r);
  assert_int_equal(r.status, 200);
  http_res_free(&r);
  http_send(P.admin_port, "POST", "/admin/faults", NULL, "kind=explode", &r);
  assert_int_equal(r.status, 400);
  assert_non_null(strstr(r.body, "unknown kind"));
  http_res_free(&r);
  /* A bad rule in a replacement leaves the current rules in place. */
  http_send(P.admin_port, "PUT", "/admin/faults", NULL, "{\"rules\":[\"kind=503\",\"kind=nope\"]}",
            &r);
  assert_int_equal(r.status, 400);
  http_res_free(&r);
  http_get(P.admin_port, "/admin/faults", &r);
  j = http_json(&r);
  assert_int_equal(json_array_size(json_object_get(j, "rules")), 1);
  json_decref(j);
  http_res_free(&r);
  http_send(P.admin_port, "DELETE", "/admin/faults", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  http_res_free(&r);
  http_get(P.port, "/books/3", &r);
  assert_int_equal(r.status, 200);
  http_res_free(&r);
  /* The admin listener is never subject to faults. */
  one_fault("kind=reset_before_read");
  http_get(P.admin_port, "/admin/healthz", &r);
  assert_int_equal(r.status, 200);
  http_res_free(&r);
  set_faults(-1, NULL);
}

/* An admin request's status, with its error code checked (NULL: not an error). */
static void admin_expect(const char *method, const char *path, const char *body, size_t body_len,
                         long status, const char *error) {
  http_req rq = {.method = method, .path = path, .body = body, .body_len = body_len};
  http_res r;
  http_do(P.admin_port, &rq, &r);
  if (r.status != status)
    fprintf(stderr, "%s %s: %ld %s\n", method, path, r.status, r.body);
  assert_int_equal(r.status, status);
  if (error) {
    json_t *j = http_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "error")), error);
    json_decref(j);
  }
  http_res_free(&r);
}

static size_t rule_count(void) {
  http_res r;
  http_get(P.admin_port, "/admin/faults", &r);
  json_t *j = http_json(&r);
  size_t n = json_array_size(json_object_get(j, "rules"));
  json_decref(j);
  http_res_free(&r);
  return n;
}

/* A PUT body of n rules, the last one "route=GET /books/1,kind=503" (malloc'd). */
static char *many_rules(int n) {
  json_t *arr = json_array();
  for (int i = 0; i < n - 1; i++) {
    char rule[64];
    snprintf(rule, sizeof rule, "route=GET /elsewhere/%d,kind=close", i);
    json_array_append_new(arr, json_string(rule));
  }
  json_array_append_new(arr, json_string("route=GET /books/1,kind=503"));
  json_t *o = json_pack("{s:o}", "rules", arr);
  char *body = json_dumps(o, 0);
  json_decref(o);
  return body;
}

static void test_admin_rule_limit(void **state) {
  (void)state;
  one_fault("route=GET /books/2,kind=503");
  /* Over the limit as a whole: refused, naming the limit, and the old rule stays. */
  char *body = many_rules(70);
  http_res r;
  http_send(P.admin_port, "PUT", "/admin/faults", NULL, body, &r);
  assert_int_equal(r.status, 400);
  assert_non_null(strstr(r.body, "too_many_rules"));
  assert_non_null(strstr(r.body, "at most 64 rules"));
  http_res_free(&r);
  free(body);
  assert_int_equal(rule_count(), 1);
  /* Exactly at the limit: installed, every id positive; one more POST is refused with it. */
  body = many_rules(64);
  http_send(P.admin_port, "PUT", "/admin/faults", NULL, body, &r);
  assert_int_equal(r.status, 200);
  json_t *j = http_json(&r);
  json_t *ids = json_object_get(j, "ids");
  assert_int_equal(json_array_size(ids), 64);
  for (size_t i = 0; i < 64; i++)
    assert_true(json_integer_value(json_array_get(ids, i)) > 0);
  json_decref(j);
  http_res_free(&r);
  http_send(P.admin_port, "POST", "/admin/faults", NULL, "kind=close", &r);
  assert_int_equal(r.status, 409);
  assert_non_null(strstr(r.body, "at most 64 rules"));
  http_res_free(&r);
  free(body);
  set_faults(-1, NULL);
}

typedef struct hammer {
  pthread_t t;
  atomic_bool stop;
  int requests, not_503;
} hammer;

static void *hammer_main(void *arg) {
  hammer *h = arg;
  while (!atomic_load(&h->stop)) {
    http_res r;
    http_get(P.port, "/books/1", &r);
    h->requests++;
    h->not_503 += r.status != 503;
    http_res_free(&r);
  }
  return NULL;
}

/* A replacement is one swap: a request never finds the rule set empty or half filled. */
static void test_admin_replace_is_atomic(void **state) {
  (void)state;
  char *body = many_rules(64); /* the only rule that matches is the last one added */
  http_res r;
  http_send(P.admin_port, "PUT", "/admin/faults", NULL, body, &r);
  assert_int_equal(r.status, 200);
  http_res_free(&r);
  hammer h = {.requests = 0};
  atomic_init(&h.stop, false);
  assert_int_equal(pthread_create(&h.t, NULL, hammer_main, &h), 0);
  double until = now_s() + 1.5;
  while (now_s() < until) {
    http_send(P.admin_port, "PUT", "/admin/faults", NULL, body, &r);
    assert_int_equal(r.status, 200);
    http_res_free(&r);
  }
  atomic_store(&h.stop, true);
  pthread_join(h.t, NULL);
  free(body);
  assert_true(h.requests > 0);
  if (h.not_503)
    fprintf(stderr, "%d of %d requests saw no rule\n", h.not_503, h.requests);
  assert_int_equal(h.not_503, 0);
  set_faults(-1, NULL);
}

static void test_admin_strict_rules(void **state) {
  (void)state;
  set_faults(-1, NULL);
  /* Durations of one request's fault are bounded like delay; 1h itself is accepted. */
  const char *too_long[] = {"kind=partial_stall,stall=999999h", "kind=slow_body,interval=2h",
                            "kind=latency,delay=2h", "kind=latency,delay=uniform:1s:2h"};
  for (size_t i = 0; i < sizeof too_long / sizeof too_long[0]; i++) {
    http_res r;
    http_send(P.admin_port, "POST", "/admin/faults", NULL, too_long[i], &r);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "at most 1h"));
    http_res_free(&r);
  }
  admin_expect("POST", "/admin/faults", "route=GET /none,kind=partial_stall,stall=1h", 0, 201,
               NULL);
  admin_expect("POST", "/admin/faults", "route=GET /none,kind=slow_body,interval=1h", 0, 201, NULL);
  const char *flag[] = {"--port",  "0",
                        "--db",    "/tmp/libraryd-never-created.db",
                        "--fault", "kind=partial_stall,stall=2h",
                        NULL};
  assert_int_equal(lib_run_args(flag), 2);
  set_faults(-1, NULL);
  /* A NUL byte is refused, not a place where the rule silently ends. */
  static const char nul[] = "route=GET /books/9,kind=close\0junk";
  admin_expect("POST", "/admin/faults", nul, sizeof nul - 1, 400, "bad_rule");
  /* Unknown JSON fields are refused as in the main API; so is a key given twice. */
  admin_expect("POST", "/admin/faults", "{\"rule\":\"kind=close\",\"x\":1}", 0, 400,
               "unknown_field");
  admin_expect("PUT", "/admin/faults", "{\"rules\":[],\"x\":1}", 0, 400, "unknown_field");
  admin_expect("POST", "/admin/faults", "kind=latency,delay=1s,delay=2s", 0, 400, "bad_rule");
  assert_int_equal(rule_count(), 0);
  /* A PUT without "rules" wipes nothing; [] is how to clear. */
  one_fault("route=GET /books/2,kind=503");
  admin_expect("PUT", "/admin/faults", "{\"seed\":7}", 0, 400, "missing_field");
  assert_int_equal(rule_count(), 1);
  admin_expect("PUT", "/admin/faults", "{\"rules\":[]}", 0, 200, NULL);
  assert_int_equal(rule_count(), 0);
  /* kind=status without code= answers 503 (documented default). */
  one_fault("route=GET /books/2,kind=status");
  http_res r;
  http_get(P.port, "/books/2", &r);
  assert_int_equal(r.status, 503);
  http_res_free(&r);
  set_faults(-1, NULL);
}

/* Every admin resource answers a method it does not take with 405 and Allow. */
static void test_admin_methods(void **state) {
  (void)state;
  static const struct {
    const char *method, *path, *allow;
  } cases[] = {
      {"POST", "/admin/stats", "GET, HEAD"},
      {"PUT", "/admin/series", "GET, HEAD"},
      {"POST", "/admin/healthz", "GET, HEAD"},
      {"PATCH", "/admin/faults", "GET, HEAD, POST, PUT, DELETE"},
      {"GET", "/admin/faults/1", "DELETE"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    http_req rq = {.method = cases[i].method, .path = cases[i].path};
    http_res r;
    http_do(P.admin_port, &rq, &r);
    if (r.status != 405)
      fprintf(stderr, "%s %s: %ld %s\n", cases[i].method, cases[i].path, r.status, r.body);
    assert_int_equal(r.status, 405);
    assert_non_null(strstr(r.body, "method_not_allowed"));
    char allow[128];
    assert_non_null(http_header(&r, "Allow", allow, sizeof allow));
    assert_string_equal(allow, cases[i].allow);
    http_res_free(&r);
  }
  http_req head = {.method = "HEAD", .path = "/admin/healthz"};
  http_res r;
  http_do(P.admin_port, &head, &r);
  assert_int_equal(r.status, 200);
  http_res_free(&r);
  admin_expect("GET", "/admin/nothing", NULL, 0, 404, "not_found");
}

static void test_flags(void **state) {
  (void)state;
  const char *bad_rule[] = {
      "--port", "0", "--db", "/tmp/libraryd-never-created.db", "--fault", "kind=explode", NULL};
  assert_int_equal(lib_run_args(bad_rule), 2);
  const char *bad_flag[] = {"--no-such-flag", NULL};
  assert_int_equal(lib_run_args(bad_flag), 2);
  const char *bad_dur[] = {"--idem-retention", "soon", NULL};
  assert_int_equal(lib_run_args(bad_dur), 2);
  const char *help[] = {"--help", NULL};
  assert_int_equal(lib_run_args(help), 0);
  lib_proc q;
  const char *args[] = {"--fault", "route=GET /books/2,kind=503,count=1", "--fault",
                        "route=GET /books/3,kind=latency,delay=150ms", NULL};
  assert_int_equal(lib_start(&q, args), 0);
  http_res r;
  http_get(q.port, "/books/2", &r);
  assert_int_equal(r.status, 503);
  http_res_free(&r);
  http_get(q.port, "/books/2", &r);
  assert_int_equal(r.status, 200);
  http_res_free(&r);
  http_get(q.port, "/books/3", &r);
  assert_int_equal(r.status, 200);
  assert_true(r.secs >= 0.14);
  http_res_free(&r);
  assert_int_equal(lib_stop(&q), 0);
  /* Every request is logged, faults included. */
  assert_int_equal(lib_log_count(&q, "fault=status"), 1);
  assert_int_equal(lib_log_count(&q, "fault=latency"), 1);
  lib_cleanup(&q);
}

static void test_config_file_and_json_log(void **state) {
  (void)state;
  char ini[] = "/tmp/libraryd-ini-XXXXXX";
  int fd = mkstemp(ini);
  assert_true(fd >= 0);
  const char *text = "; libraryd options, same names as the flags\n"
                     "[libraryd]\n"
                     "log = json\n"
                     "seed = 5\n"
                     "fault = route=GET /books/2,kind=503,count=1\n"
                     "fault = route=GET /books/3,kind=502,count=1\n"
                     "[other-program]\n"
                     "ignored = yes\n";
  assert_true(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
  close(fd);
  lib_proc q;
  const char *args[] = {"--config", ini, NULL};
  assert_int_equal(lib_start(&q, args), 0);
  http_res r;
  http_get(q.port, "/books/2", &r);
  assert_int_equal(r.status, 503);
  http_res_free(&r);
  http_get(q.port, "/books/3", &r);
  assert_int_equal(r.status, 502);
  http_res_free(&r);
  const char *h[] = {"Linkd-Attempt: 2", "X-Request-Id: rid-9", NULL};
  http_send(q.port, "GET", "/books/1", h, NULL, &r);
  assert_int_equal(r.status, 200);
  http_res_free(&r);
  assert_int_equal(lib_stop(&q), 0);
  /* Access log lines are JSON objects with the attempt and request id. */
  FILE *f = fopen(q.log, "r");
  assert_non_null(f);
  char line[2048];
  int json_lines = 0, found = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] != '{')
      continue;
    json_t *j = json_loads(line, 0, NULL);
    assert_non_null(j);
    json_lines++;
    const char *att = json_string_value(json_object_get(j, "attempt"));
    if (att && !strcmp(att, "2")) {
      assert_string_equal(json_string_value(json_object_get(j, "request_id")), "rid-9");
      assert_int_equal(json_integer_value(json_object_get(j, "status")), 200);
      found++;
    }
    json_decref(j);
  }
  fclose(f);
  assert_int_equal(json_lines, 3);
  assert_int_equal(found, 1);
  lib_cleanup(&q);
  /* A bad line is a usage error. */
  fd = open(ini, O_WRONLY | O_TRUNC);
  assert_true(write(fd, "threads = many\n", 15) == 15);
  close(fd);
  const char *bad[] = {"--config", ini, NULL};
  assert_int_equal(lib_run_args(bad), 2);
  unlink(ini);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_resets_and_closes),
      cmocka_unit_test(test_status_faults),
      cmocka_unit_test(test_status_after_processing),
      cmocka_unit_test(test_latency),
      cmocka_unit_test(test_partial_then_stall),
      cmocka_unit_test(test_slow_body),
      cmocka_unit_test(test_stall_ends_when_client_leaves),
      cmocka_unit_test(test_scripts_and_seeds),
      cmocka_unit_test(test_admin_endpoint),
      cmocka_unit_test(test_admin_rule_limit),
      cmocka_unit_test(test_admin_replace_is_atomic),
      cmocka_unit_test(test_admin_strict_rules),
      cmocka_unit_test(test_admin_methods),
      cmocka_unit_test(test_flags),
      cmocka_unit_test(test_config_file_and_json_log),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
