/* SPDX-License-Identifier: MIT */
/* Response framing a server gets wrong, from a raw socket server (faultd only sends well-formed
 * replies): a body shorter than its Content-Length, a length that does not parse or overflows,
 * conflicting lengths, a head too large for libcurl. None of them is a complete response; the
 * transfer kinds say which (PARTIAL_BODY, JUNK_RESPONSE). Also: a response whose view cannot be
 * built for the classification hook (no memory) fails the attempt instead of passing unseen, and
 * a call whose result cannot be allocated is refused by lk_http_submit.
 *
 * Built with linkd_fail_allocations(): linkd's own allocations can be made to fail on cue
 * (allocfail.h). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "allocfail.h"
#include "httptest.h"

#include "http/http_internal.h" /* sizeof (lk_http_result) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ht_raw RAW;

static int teardown(void **s) {
  (void)s;
  ht_raw_stop(&RAW);
  return 0;
}

/* One GET against RAW serving `resp`. */
static void raw_call(const char *resp, size_t len, const lk_http_policy *pol, ht_run *r) {
  ht_raw_start(&RAW, resp, len);
  char url[64];
  ht_raw_url(&RAW, url, sizeof url);
  ht_call_url(NULL, "GET", url, NULL, 0, pol, r);
}

static void expect_failure(const char *resp, lk_failure kind, int err, int attempts) {
  lk_http_policy pol;
  ht_policy(&pol);
  ht_run r;
  raw_call(resp, strlen(resp), &pol, &r);
  assert_int_equal(r.err, err);
  assert_int_equal(r.nattempts, (size_t)attempts);
  ht_all_kinds(&r, kind);
  assert_int_not_equal(r.att[0].phase, LK_PHASE_DONE);
  assert_int_equal(atomic_load(&RAW.requests), attempts);
  ht_free(&r);
}

/* A length too large for any integer, 3 body bytes, close: libcurl reads to the close and calls
 * it done; the body is shorter than what was declared. */
static void test_overflowing_length(void **s) {
  (void)s;
  expect_failure("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n"
                 "Connection: close\r\n\r\nabc",
                 LK_F_JUNK_RESPONSE, LK_EATTEMPTS, 3);
}

/* Two different lengths: which one frames the body is ambiguous (response splitting). */
static void test_conflicting_lengths(void **s) {
  (void)s;
  expect_failure("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 10\r\n"
                 "Connection: close\r\n\r\nabcdefghij",
                 LK_F_JUNK_RESPONSE, LK_EATTEMPTS, 3);
  ht_raw_stop(&RAW);
  expect_failure("HTTP/1.1 200 OK\r\nContent-Length: 10, 3\r\n"
                 "Connection: close\r\n\r\nabcdefghij",
                 LK_F_JUNK_RESPONSE, LK_EATTEMPTS, 3);
}

/* Identical repeated lengths are allowed (RFC 9112 6.3) and frame the body. */
static void test_repeated_equal_lengths(void **s) {
  (void)s;
  const char *resp = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3, 3\r\n"
                     "Connection: close\r\n\r\nabc";
  lk_http_policy pol;
  ht_policy(&pol);
  ht_run r;
  raw_call(resp, strlen(resp), &pol, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(r.nattempts, 1);
  const lk_http_response *rs = lk_http_result_response(r.res);
  assert_non_null(rs);
  assert_true(rs->complete);
  assert_int_equal(rs->body_len, 3);
  ht_free(&r);
}

/* Fewer body bytes than declared, then a close. */
static void test_short_body(void **s) {
  (void)s;
  expect_failure("HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nabc",
                 LK_F_PARTIAL_BODY, LK_EATTEMPTS, 3);
}

/* A length that is not a number. */
static void test_unparsable_length(void **s) {
  (void)s;
  expect_failure("HTTP/1.1 200 OK\r\nContent-Length: 3x\r\nConnection: close\r\n\r\nabc",
                 LK_F_JUNK_RESPONSE, LK_EATTEMPTS, 3);
}

/* A header line beyond libcurl's limit (CURL_MAX_HTTP_HEADER, 100 KiB): junk, and asking again
 * would get the same head, so it is not retried. */
static void test_head_too_large(void **s) {
  (void)s;
  size_t n = 200 * 1024;
  char *resp = malloc(n + 128);
  assert_non_null(resp);
  int h = snprintf(resp, 128, "HTTP/1.1 200 OK\r\nX-Big: ");
  memset(resp + h, 'a', n);
  strcpy(resp + h + n, "\r\nContent-Length: 2\r\n\r\nok");
  lk_http_policy pol;
  ht_policy(&pol);
  ht_run r;
  raw_call(resp, strlen(resp), &pol, &r);
  assert_int_equal(r.err, LK_ETOOBIG);
  assert_int_equal(r.nattempts, 1);
  assert_int_equal(r.att[0].failure, LK_F_JUNK_RESPONSE);
  assert_false(r.att[0].decision.retry);
  assert_int_equal(atomic_load(&RAW.requests), 1);
  ht_free(&r);
  ht_raw_stop(&RAW); /* its thread may still be sending from resp */
  free(resp);
}

/* --- the classification hook's view ---------------------------------------------------------- */
static int hook_calls;
static size_t hook_headers;

static lk_failure count_hook(void *ctx, const lk_http_response *resp, lk_failure kind) {
  (void)ctx;
  hook_calls++;
  hook_headers = resp->header_count;
  return kind;
}

static void test_view_oom_fails_attempt(void **s) {
  (void)s;
  const char *resp = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n"
                     "E: 5\r\nF: 6\r\nG: 7\r\nH: 8\r\nI: 9\r\nJ: 10\r\nK: 11\r\nL: 12\r\n"
                     "M: 13\r\nN: 14\r\nO: 15\r\nP: 16\r\nQ: 17\r\nR: 18\r\nS: 19\r\nT: 20\r\n"
                     "U: 21\r\nV: 22\r\nW: 23\r\nX: 24\r\nY: 25\r\nZ: 26\r\n"
                     "Connection: close\r\n\r\nok";
  lk_http_policy pol;
  ht_policy(&pol);
  pol.classify = count_hook;
  ht_run r;
  raw_call(resp, strlen(resp), &pol, &r); /* learns the view's size */
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(hook_calls, 1);
  assert_int_equal(hook_headers, 28);
  ht_free(&r);

  hook_calls = 0;
  allocfail_size(hook_headers * sizeof(lk_http_header));
  char url[64];
  ht_raw_url(&RAW, url, sizeof url);
  ht_call_url(NULL, "GET", url, NULL, 0, &pol, &r);
  assert_false(allocfail_size_pending()); /* the injected failure was hit */
  assert_int_equal(hook_calls, 0);
  assert_int_equal(r.err, LK_ENOMEM);
  assert_int_equal(r.nattempts, 1);
  assert_int_not_equal(r.att[0].failure, LK_F_NONE);
  assert_false(r.att[0].decision.retry);
  ht_free(&r);
}

static void never_done(void *ud, lk_http_result *res) {
  (void)ud;
  lk_http_result_free(res);
  fail_msg("a call refused by lk_http_submit must not complete");
}

/* No memory for the call's result: lk_http_submit says LK_ENOMEM and frees what it took (it
 * read the result's key flag through the missing result and crashed, found by clang's static
 * analyzer). The call never reaches the network, so no server is needed. */
static void test_submit_without_memory_for_result(void **s) {
  (void)s;
  lk_http_client *c = lk_http_client_new(NULL);
  assert_non_null(c);
  lk_http_request *req = lk_http_request_new("POST", "http://127.0.0.1:9/books/1/loans");
  assert_non_null(req);
  lk_http_policy pol;
  ht_policy(&pol);
  allocfail_size(sizeof(lk_http_result));
  int rc = lk_http_submit(c, req, &pol, NULL, never_done, NULL);
  assert_false(allocfail_size_pending()); /* the injected failure was hit */
  assert_int_equal(rc, LK_ENOMEM);
  lk_http_request_free(req);
  assert_int_equal(lk_http_client_run(c, 0), 0); /* no call in flight */
  lk_http_client_free(c);
}

/* lk_http_request_create says which: an argument no request can be made of, or no memory. */
static void test_request_create_says_why(void **s) {
  (void)s;
  lk_http_request *r = (lk_http_request *)&r; /* set to NULL on failure */
  assert_int_equal(lk_http_request_create("GET", "ftp://127.0.0.1/x", &r), LK_EINVAL);
  assert_null(r);
  assert_int_equal(lk_http_request_create("G T", "http://127.0.0.1/x", &r), LK_EINVAL);
  assert_int_equal(lk_http_request_create("GET", "http://127.0.0.1/x", NULL), LK_EINVAL);
  for (long n = 1; n <= 3; n++) { /* the request, its method, its URL */
    allocfail_nth(n);
    assert_int_equal(lk_http_request_create("GET", "http://127.0.0.1/x", &r), LK_ENOMEM);
    assert_true(allocfail_end());
    assert_null(r);
  }
  assert_int_equal(lk_http_request_create("GET", "http://127.0.0.1/x", &r), LK_OK);
  assert_non_null(r);
  lk_http_request_free(r);
}

typedef struct sweep_out {
  int done, err, status;
} sweep_out;

static void sweep_done(void *ud, lk_http_result *res) {
  sweep_out *o = ud;
  o->done++;
  o->err = lk_http_result_err(res);
  o->status = lk_http_result_status(res);
  lk_http_result_free(res);
}

/* One call of shape `post` (a GET, or a POST with a body, a header and an Idempotency-Key)
 * with the n-th allocation of this thread from the request's creation on failing, on `c` (its
 * own loop) or on `loop` (the native transport). Returns false when the call made fewer than n
 * allocations: then it must have ended as `want_err` with `want_status`. */
static bool call_failing_nth(lk_http_client *c, ht_loop *loop, const char *url, bool post,
                             int want_err, int want_status, long n) {
  allocfail_nth(n);
  lk_http_request *req = lk_http_request_new(post ? "POST" : "GET", url);
  int rc = req ? LK_OK : LK_ENOMEM;
  if (rc == LK_OK && post) {
    rc = lk_http_request_add_header(req, "Content-Type", "application/json");
    if (rc == LK_OK)
      rc = lk_http_request_set_body(req, "{\"borrower\":\"reader-1\"}", 23);
  }
  sweep_out o = {0};
  if (rc == LK_OK) {
    lk_http_policy pol;
    ht_policy(&pol);
    pol.idem_mode = LK_IDEM_AUTO;
    rc = lk_http_submit(loop ? loop->c : c, req, &pol, NULL, sweep_done, &o);
  }
  lk_http_request_free(req);
  bool submitted = rc == LK_OK;
  /* the policy's deadline is 1.5 s: every call ends well within 200 passes of 20 ms */
  for (int i = 0; submitted && !o.done && i < 200; i++) {
    if (loop)
      ht_loop_once(loop, 20);
    else /* no memory for the poll set: the calls stay in flight, and the next run goes on */
      assert_true(lk_http_client_run(c, LK_MS(20)) >= 0 || allocfail_hit());
  }
  bool hit = allocfail_end();
  if (submitted)
    assert_int_equal(o.done, 1); /* a submitted call ends, once, whatever failed inside it */
  if (!hit) {
    assert_true(submitted);
    assert_int_equal(o.err, want_err);
    assert_int_equal(o.status, want_status);
  }
  return hit;
}

/* Every allocation of one call fails in turn, the request's included, on both transports, for
 * a GET answered at once and for a keyed POST answered 503 three times (three attempts): each
 * call ends in an error or its answer, its callback runs exactly once, and (under ASan in CI)
 * nothing is leaked or touched after it is freed. A sweep stops at the first call that made
 * fewer allocations than the one that was to fail. */
static void test_every_allocation_of_a_call_fails_in_turn(void **s) {
  (void)s;
  static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
  static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n";
  for (int post = 0; post < 2; post++) {
    ht_raw_start(&RAW, post ? busy : ok, strlen(post ? busy : ok));
    char url[64];
    ht_raw_url(&RAW, url, sizeof url);
    for (int native = 0; native < 2; native++) {
      ht_loop loop;
      lk_http_client *c = NULL;
      if (native)
        ht_loop_init(&loop, LK_HTTP_TRANSPORT_NATIVE);
      else
        assert_non_null(c = lk_http_client_new(NULL));
      long n = 1;
      while (call_failing_nth(c, native ? &loop : NULL, url, post, post ? LK_EATTEMPTS : LK_OK,
                              post ? 503 : 200, n))
        assert_true(++n < 5000);
      assert_true(n > (post ? 10 : 5)); /* the sweep went through the call's allocations */
      if (native)
        ht_loop_free(&loop);
      else
        lk_http_client_free(c);
    }
    ht_raw_stop(&RAW);
  }
}

/* The same for a client's creation: NULL or a client that works. */
static void test_every_allocation_of_a_client_fails_in_turn(void **s) {
  (void)s;
  for (long n = 1;; n++) {
    assert_true(n < 5000);
    allocfail_nth(n);
    lk_http_client *c = lk_http_client_new(NULL);
    bool hit = allocfail_end();
    if (!hit) {
      assert_non_null(c);
      lk_http_client_free(c);
      break;
    }
    lk_http_client_free(c);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_overflowing_length, teardown),
      cmocka_unit_test_teardown(test_conflicting_lengths, teardown),
      cmocka_unit_test_teardown(test_repeated_equal_lengths, teardown),
      cmocka_unit_test_teardown(test_short_body, teardown),
      cmocka_unit_test_teardown(test_unparsable_length, teardown),
      cmocka_unit_test_teardown(test_head_too_large, teardown),
      cmocka_unit_test_teardown(test_view_oom_fails_attempt, teardown),
      cmocka_unit_test(test_submit_without_memory_for_result),
      cmocka_unit_test(test_request_create_says_why),
      cmocka_unit_test_teardown(test_every_allocation_of_a_call_fails_in_turn, teardown),
      cmocka_unit_test(test_every_allocation_of_a_client_fails_in_turn),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
