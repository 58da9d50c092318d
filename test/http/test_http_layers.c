/* SPDX-License-Identifier: MIT */
/* Two hooks for a caller that is itself a tier of a chain (`linkd serve`):
 * - lk_http_policy.attempt_url: each attempt goes to the URL the hook gives, so a retry reaches
 *   another replica;
 * - lk_http_policy.honor_retried: a response saying "Linkd-Retried" (the tier below has retried
 *   already) is not retried again, so attempts do not multiply across tiers. */
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_attempt_url_moves_each_attempt),
      cmocka_unit_test(test_retried_header_stops_retries),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
