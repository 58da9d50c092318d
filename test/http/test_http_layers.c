/* SPDX-License-Identifier: MIT */
/* Two hooks for a caller that is itself a tier of a chain (`linkd serve`):
 * - lk_http_policy.attempt_url: each attempt goes to the URL the hook gives, so a retry reaches
 *   another replica;
 * - lk_http_policy.honor_retried: a response saying "Linkd-Retried" (the tier below has retried
 *   already) is not retried again, so attempts do not multiply across tiers;
 * - lk_http_request_set_body_stream: a body pulled as it is written, never replayed once it has
 *   started, retried when nothing of it was taken. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "httptest.h"

#include <stdio.h>
#include <string.h>

static const char R503[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                           "Connection: close\r\n\r\n";
static const char R503_RETRIED[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                   "Linkd-Retried: 3\r\nConnection: close\r\n\r\n";
static const char R200[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";

typedef struct urls {
  char u[3][64];
  int calls[4]; /* attempt numbers seen, in order */
  int n;
} urls;

static const char *pick(void *ctx, int attempt) {
  urls *x = ctx;
  if (x->n < 4)
    x->calls[x->n++] = attempt;
  return x->u[(attempt - 1) % 3];
}

/* attempt 1 -> a 503 server, attempt 2 -> another 503 server, attempt 3 -> a 200 server: the
 * call succeeds on its third attempt, each server saw exactly one request. */
static void test_attempt_url_moves_each_attempt(void **state) {
  (void)state;
  ht_raw a, b, c;
  ht_raw_start(&a, R503, strlen(R503));
  ht_raw_start(&b, R503, strlen(R503));
  ht_raw_start(&c, R200, strlen(R200));
  urls x = {0};
  ht_raw_url(&a, x.u[0], sizeof x.u[0]);
  ht_raw_url(&b, x.u[1], sizeof x.u[1]);
  ht_raw_url(&c, x.u[2], sizeof x.u[2]);
  lk_http_policy pol;
  ht_policy(&pol);
  pol.default_protection = false;
  pol.attempt_url = pick;
  pol.attempt_url_ctx = &x;
  ht_run r;
  /* the request's own URL is a port nothing listens on: only the hook's URLs are used */
  ht_call_url(NULL, "GET", "http://127.0.0.1:1/never", NULL, 0, &pol, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(r.nattempts, 3);
  assert_int_equal(lk_http_result_status(r.res), 200);
  assert_int_equal(atomic_load(&a.requests), 1);
  assert_int_equal(atomic_load(&b.requests), 1);
  assert_int_equal(atomic_load(&c.requests), 1);
  assert_int_equal(x.n, 3);
  for (int i = 0; i < 3; i++)
    assert_int_equal(x.calls[i], i + 1);
  ht_free(&r);

  /* the next call on the same pooled handle without the hook goes to its own URL again */
  lk_http_policy plain;
  ht_policy(&plain);
  plain.default_protection = false;
  ht_call_url(NULL, "GET", x.u[2], NULL, 0, &plain, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(atomic_load(&c.requests), 2);
  assert_int_equal(atomic_load(&a.requests), 1);
  ht_free(&r);
  ht_raw_stop(&a);
  ht_raw_stop(&b);
  ht_raw_stop(&c);
}

static void run_503(const char *resp, bool honor, int want_attempts, const char *want_reason) {
  ht_raw s;
  ht_raw_start(&s, resp, strlen(resp));
  char url[64];
  ht_raw_url(&s, url, sizeof url);
  lk_http_policy pol;
  ht_policy(&pol);
  pol.default_protection = false;
  pol.honor_retried = honor;
  ht_run r;
  ht_call_url(NULL, "GET", url, NULL, 0, &pol, &r);
  assert_int_equal(r.nattempts, (size_t)want_attempts);
  assert_int_equal(atomic_load(&s.requests), want_attempts);
  assert_int_equal(lk_http_result_status(r.res), 503);
  assert_string_equal(r.att[r.nattempts - 1].reason, want_reason);
  assert_string_equal(lk_http_result_stop(r.res), want_reason);
  ht_free(&r);
  ht_raw_stop(&s);
}

static void test_retried_header_stops_retries(void **state) {
  (void)state;
  lk_http_policy def;
  lk_http_policy_init_default(&def);
  assert_true(def.honor_retried);
  /* a plain 503 is retried up to the policy's 3 attempts */
  run_503(R503, true, 3, "attempts exhausted");
  /* the tier below says it retried: one attempt, and the call says why it stopped */
  run_503(R503_RETRIED, true, 1, "upstream already retried");
  /* not honoured: retried as any 503 */
  run_503(R503_RETRIED, false, 3, "attempts exhausted");
}

typedef struct stream {
  size_t len, off;
  int calls;
} stream;

static long pull(void *ctx, char *buf, size_t cap) {
  stream *st = ctx;
  st->calls++;
  size_t n = st->len - st->off;
  if (n > cap)
    n = cap;
  if (n > 4096)
    n = 4096;
  memset(buf, 's', n);
  st->off += n;
  return (long)n;
}

static int stream_call(const char *url, lk_http_policy *pol, stream *st, size_t len,
                       lk_http_result **res) {
  lk_http_request *req = lk_http_request_new("PUT", url);
  assert_non_null(req);
  *st = (stream){.len = len};
  assert_int_equal(lk_http_request_set_body_stream(req, len, pull, st), LK_OK);
  int err = lk_http_call(NULL, req, pol, NULL, res);
  assert_int_equal(lk_http_request_body_streamed(req), len == st->off ? len : st->off);
  lk_http_request_free(req);
  return err;
}

static void test_streamed_body(void **state) {
  (void)state;
  faultd_proc ok, bad;
  ht_start(&ok, "ok", NULL);
  ht_start(&bad, "status", "--status", "503", NULL);
  lk_http_policy pol;
  ht_policy(&pol);
  pol.default_protection = false;
  char url[128];
  stream st;
  lk_http_result *res;
  /* 100 000 bytes pulled in pieces, all of them arrive */
  faultd_url(&ok, "/s", url, sizeof url);
  assert_int_equal(stream_call(url, &pol, &st, 100000, &res), LK_OK);
  assert_true(st.calls >= 25);
  lk_http_result_free(res);
  faultd_req q[4];
  assert_int_equal(faultd_wait_requests(&ok, 1, 2000), 1);
  faultd_requests(&ok, q, 4);
  assert_string_equal(q[0].method, "PUT");
  assert_int_equal(q[0].body_bytes, 100000);
  assert_true(q[0].complete);
  /* a 503 after the body went out: PUT is idempotent, but the body is gone, so no retry */
  faultd_url(&bad, "/s", url, sizeof url);
  assert_int_equal(stream_call(url, &pol, &st, 10000, &res), LK_EHTTP);
  size_t n;
  const lk_http_attempt_info *a = lk_http_result_attempts(res, &n);
  assert_int_equal(n, 1);
  assert_string_equal(a[0].reason, "streamed body not replayable");
  lk_http_result_free(res);
  assert_int_equal(faultd_wait_requests(&bad, 1, 2000), 1);
  /* refused before a byte was taken: retried (here, on the server that answers) */
  urls x = {0};
  snprintf(x.u[0], sizeof x.u[0], "http://127.0.0.1:1/s");
  faultd_url(&ok, "/s", x.u[1], sizeof x.u[1]);
  faultd_url(&ok, "/s", x.u[2], sizeof x.u[2]);
  pol.attempt_url = pick;
  pol.attempt_url_ctx = &x;
  assert_int_equal(stream_call(x.u[1], &pol, &st, 5000, &res), LK_OK);
  a = lk_http_result_attempts(res, &n);
  assert_int_equal(n, 2);
  assert_int_equal(a[0].failure, LK_F_CONNECT_REFUSED);
  lk_http_result_free(res);
  faultd_stop(&ok);
  faultd_stop(&bad);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_attempt_url_moves_each_attempt),
      cmocka_unit_test(test_retried_header_stops_retries),
      cmocka_unit_test(test_streamed_body),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
