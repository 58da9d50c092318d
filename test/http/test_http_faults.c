/* SPDX-License-Identifier: MIT */
/* Real calls through libcurl against faultd, one fault mode at a time: for each, the failure kind,
 * the number of attempts, which methods are retried (POST without a key never once the request may
 * have been sent; POST with a key and GET are), one Idempotency-Key on every attempt as the server
 * recorded it, and the wall time within deadline + 50 ms. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "httptest.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static faultd_proc FP;

static int teardown(void **s) {
  (void)s;
  faultd_stop(&FP);
  return 0;
}

typedef enum { GET, POST_NOKEY, POST_KEY } flavour;

static void flavour_policy(lk_http_policy *p, flavour f) {
  p->idem_mode = f == POST_KEY ? LK_IDEM_AUTO : LK_IDEM_NONE;
}

static const char *method_of(flavour f) { return f == GET ? "GET" : "POST"; }

/* One call in a fresh faultd; checks the invariants every scenario shares. */
static void scenario(flavour f, const char *mode, const char *const *args, lk_http_policy *pol,
                     const void *body, size_t len, int expect_reqs, ht_run *r) {
  const char *a[24];
  int n = 0;
  for (; args && args[n]; n++)
    a[n] = args[n];
  a[n++] = "--max-seconds";
  a[n++] = "60";
  a[n] = NULL;
  assert_int_equal(faultd_start(&FP, mode, a), 0);
  flavour_policy(pol, f);
  if (f != GET && !body) {
    body = "{\"book\":1}";
    len = 10;
  }
  ht_call(&FP, NULL, method_of(f), body, len, pol, expect_reqs, r);
  ht_within_deadline(r, pol);
  ht_server_saw_one_key(r, pol);
  if (f == POST_KEY)
    assert_non_null(lk_http_result_idempotency_key(r->res));
  else
    assert_null(lk_http_result_idempotency_key(r->res));
  faultd_stop(&FP);
}

/* Faults before the request is written: every method is retried. */
static void not_sent_case(const char *mode, const char *const *args, lk_failure kind) {
  for (flavour f = GET; f <= POST_KEY; f++) {
    lk_http_policy pol;
    ht_policy(&pol);
    ht_run r;
    scenario(f, mode, args, &pol, NULL, 0, 0, &r);
    ht_all_kinds(&r, kind);
    assert_int_equal(r.nattempts, 3);
    assert_int_equal(r.err, LK_EATTEMPTS);
    assert_int_equal(r.nreqs, 0);
    assert_null(lk_http_result_response(r.res)); /* nothing real arrived: no synthetic blank */
    for (size_t i = 0; i < r.nattempts; i++)
      assert_false(r.att[i].request_sent);
    ht_free(&r);
  }
}

static void test_refused(void **s) {
  (void)s;
  not_sent_case("refuse", NULL, LK_F_CONNECT_REFUSED);
}

static void test_connect_timeout(void **s) {
  (void)s;
  not_sent_case("blackhole", NULL, LK_F_CONNECT_TIMEOUT);
}

/* Faults after the request was written: GET and keyed POST retried, unkeyed POST stops at 1. */
static void maybe_processed_case(const char *mode, const char *const *args, lk_failure kind,
                                 bool server_logs) {
  for (flavour f = GET; f <= POST_KEY; f++) {
    lk_http_policy pol;
    ht_policy(&pol);
    ht_run r;
    int want = f == POST_NOKEY ? 1 : 3;
    scenario(f, mode, args, &pol, NULL, 0, server_logs ? want : 0, &r);
    ht_all_kinds(&r, kind);
    assert_int_equal(r.nattempts, want);
    assert_int_equal(r.err, f == POST_NOKEY ? LK_ENOTRETRYABLE : LK_EATTEMPTS);
    if (server_logs)
      assert_int_equal(r.nreqs, want);
    for (size_t i = 0; i < r.nattempts; i++)
      assert_true(r.att[i].request_sent);
    if (f == POST_NOKEY) /* "not retryable: KIND" */
      assert_string_equal(lk_http_result_stop(r.res), r.att[0].reason);
    ht_free(&r);
  }
}

static void test_accept_noread(void **s) {
  (void)s;
  maybe_processed_case("accept_noread", NULL, LK_F_READ_TIMEOUT, false);
}

static void test_read_then_reset(void **s) {
  (void)s;
  maybe_processed_case("read_then_reset", NULL, LK_F_RESET_AFTER_SEND, true);
}

static void test_read_then_close(void **s) {
  (void)s;
  maybe_processed_case("read_then_close", NULL, LK_F_EMPTY_RESPONSE, true);
}

/* RST before the server read anything, after the client wrote: the client cannot tell the
 * request was not processed, so it is "maybe processed". */
static void test_reset_before_read(void **s) {
  (void)s;
  const char *args[] = {"--delay-ms", "30", NULL};
  maybe_processed_case("reset_before_read", args, LK_F_RESET_AFTER_SEND, false);
}

/* A first-byte timeout is its own kind, enforced by the driver's timer. */
static void test_first_byte_timeout(void **s) {
  (void)s;
  const char *args[] = {"--delay-ms", "1000", NULL};
  for (flavour f = GET; f <= POST_NOKEY; f++) {
    lk_http_policy pol;
    ht_policy(&pol);
    pol.first_byte_timeout = LK_MS(100);
    ht_run r;
    scenario(f, "slow", args, &pol, NULL, 0, f == GET ? 3 : 1, &r);
    ht_all_kinds(&r, LK_F_FIRST_BYTE_TIMEOUT);
    assert_int_equal(r.nattempts, f == GET ? 3 : 1);
    for (size_t i = 0; i < r.nattempts; i++) {
      assert_int_equal(r.att[i].phase, LK_PHASE_WAIT);
      /* fired by the first-byte timer, well before the 300 ms attempt timeout */
      assert_true(r.att[i].duration >= LK_MS(95) && r.att[i].duration < LK_MS(250));
    }
    ht_free(&r);
  }
}

/* Bytes trickle slower than the idle timeout allows. */
static void test_idle_timeout(void **s) {
  (void)s;
  const char *args[] = {"--delay-ms", "0", "--drip-ms", "250", NULL};
  lk_http_policy pol;
  ht_policy(&pol);
  pol.idle_timeout = LK_MS(100);
  pol.attempt_timeout = LK_MS(1000);
  ht_run r;
  scenario(GET, "slow", args, &pol, NULL, 0, 1, &r);
  ht_all_kinds(&r, LK_F_IDLE_TIMEOUT);
  assert_int_equal(r.att[0].phase, LK_PHASE_RECEIVE);
  assert_true(r.att[0].bytes_received > 0);
  ht_free(&r);
}

/* Half a response, then silence: the partial response is kept as the last real one. */
static void test_partial_stall(void **s) {
  (void)s;
  for (int idle = 0; idle <= 1; idle++) {
    lk_http_policy pol;
    ht_policy(&pol);
    ht_attempts(&pol, 2);
    if (idle)
      pol.idle_timeout = LK_MS(100);
    ht_run r;
    scenario(GET, "partial_stall", NULL, &pol, NULL, 0, 2, &r);
    ht_all_kinds(&r, idle ? LK_F_IDLE_TIMEOUT : LK_F_READ_TIMEOUT);
    assert_int_equal(r.nattempts, 2);
    assert_int_equal(r.att[0].phase, LK_PHASE_RECEIVE);
    assert_int_equal(r.att[0].status, 200);
    const lk_http_response *resp = lk_http_result_response(r.res);
    assert_non_null(resp);
    assert_int_equal(resp->status, 200);
    assert_false(resp->complete);
    assert_int_equal(resp->body_len, 10);
    assert_int_equal(r.err, LK_EATTEMPTS);
    ht_free(&r);
  }
}

/* 503 with Retry-After in seconds: GET waits ~1 s; an unkeyed POST gets the 503 back at once. */
static void test_503_retry_after_seconds(void **s) {
  (void)s;
  const char *args[] = {"--status", "503", "--retry-after", "1", "--body", "busy", NULL};
  for (flavour f = GET; f <= POST_KEY; f++) {
    lk_http_policy pol;
    ht_policy(&pol);
    pol.deadline = LK_SEC(3);
    ht_attempts(&pol, 2);
    ht_run r;
    int want = f == POST_NOKEY ? 1 : 2;
    scenario(f, "status", args, &pol, NULL, 0, want, &r);
    ht_all_kinds(&r, LK_F_HTTP_503);
    assert_int_equal(r.nattempts, want);
    assert_int_equal(r.nreqs, want);
    assert_int_equal(r.att[0].retry_after, LK_SEC(1));
    const lk_http_response *resp = lk_http_result_response(r.res);
    assert_non_null(resp);
    assert_int_equal(resp->status, 503);
    assert_int_equal(resp->version, 11);
    assert_string_equal(resp->reason, "Service Unavailable");
    assert_string_equal(resp->body, "busy");
    assert_string_equal(lk_http_response_header(resp, "Retry-After"), "1");
    if (want == 2) {
      assert_true(r.att[0].decision.from_retry_after);
      assert_int_equal(r.att[0].decision.delay, LK_SEC(1));
      assert_true(r.att[1].start - r.att[0].start >= LK_SEC(1));
      assert_true(r.reqs[1].t_ms - r.reqs[0].t_ms >= 990);
      assert_int_equal(r.err, LK_EATTEMPTS);
    } else {
      assert_int_equal(r.err, LK_EHTTP);
    }
    ht_free(&r);
  }
}

/* Retry-After as an HTTP-date (2 s ahead at 1 s resolution: the wait is in (1 s, 2 s]). */
static void test_503_retry_after_date(void **s) {
  (void)s;
  const char *args[] = {"--status", "503", "--retry-after", "date+2", NULL};
  lk_http_policy pol;
  ht_policy(&pol);
  pol.deadline = LK_SEC(4);
  ht_attempts(&pol, 2);
  ht_run r;
  scenario(GET, "status", args, &pol, NULL, 0, 2, &r);
  assert_int_equal(r.nattempts, 2);
  int64_t ra = r.att[0].retry_after;
  assert_true(ra > LK_MS(900) && ra <= LK_SEC(2));
  assert_int_equal(r.att[0].decision.delay, ra);
  assert_true(r.att[1].start - r.att[0].start >= ra);
  ht_free(&r);
}

/* 429 means "refused, not processed": even an unkeyed POST is retried. The final response is the
 * last real 429. */
static void test_429_retried_for_post(void **s) {
  (void)s;
  const char *args[] = {"--status", "429", "--retry-after", "0", NULL};
  lk_http_policy pol;
  ht_policy(&pol);
  ht_run r;
  scenario(POST_NOKEY, "status", args, &pol, NULL, 0, 3, &r);
  ht_all_kinds(&r, LK_F_TOO_MANY_REQUESTS);
  assert_int_equal(r.nattempts, 3);
  assert_int_equal(r.nreqs, 3);
  assert_int_equal(r.err, LK_EATTEMPTS);
  assert_int_equal(lk_http_result_status(r.res), 429);
  ht_free(&r);
}

/* A hostile Retry-After is capped by the policy; a cap beyond the deadline stops at once. */
static void test_hostile_retry_after(void **s) {
  (void)s;
  const char *args[] = {"--status", "503", "--retry-after", "99999999999999999999", NULL};
  lk_http_policy pol;
  ht_policy(&pol);
  lk_retry_config rc = pol.retry.cfg;
  rc.max_attempts = 2;
  rc.retry_after_cap = LK_MS(100);
  assert_int_equal(lk_retry_policy_init(&pol.retry, &rc, NULL), LK_OK);
  ht_run r;
  scenario(GET, "status", args, &pol, NULL, 0, 2, &r);
  assert_int_equal(r.nattempts, 2);
  assert_int_equal(r.att[0].retry_after, INT64_MAX);
  assert_int_equal(r.att[0].decision.delay, LK_MS(100));
  ht_free(&r);

  ht_policy(&pol); /* default cap 60 s > the 1.5 s deadline */
  scenario(GET, "status", args, &pol, NULL, 0, 1, &r);
  assert_int_equal(r.nattempts, 1);
  assert_int_equal(r.att[0].decision.reason, LK_REASON_DELAY_TOO_LONG);
  assert_int_equal(r.err, LK_EDEADLINE);
  assert_true(r.wall < LK_MS(500)); /* it did not wait for a delay it could not finish */
  ht_free(&r);
}

/* A large upload the server never reads: the write blocks, the write timer fires; the request was
 * not fully written, so an unkeyed POST is retried too. */
static void test_write_timeout_large_upload(void **s) {
  (void)s;
  size_t n = (size_t)32 << 20;
  void *blob = ht_blob(n);
  lk_http_policy pol;
  ht_policy(&pol);
  pol.write_timeout = LK_MS(150);
  ht_run r;
  scenario(POST_NOKEY, "accept_noread", NULL, &pol, blob, n, 0, &r);
  ht_all_kinds(&r, LK_F_WRITE_TIMEOUT);
  assert_int_equal(r.nattempts, 3);
  for (size_t i = 0; i < r.nattempts; i++) {
    assert_int_equal(r.att[i].phase, LK_PHASE_SEND);
    assert_false(r.att[i].request_sent);
    assert_true(r.att[i].bytes_sent < n);
  }
  ht_free(&r);
  free(blob);
}

/* RST in the middle of a large upload: not fully written -> retried for any method. */
static void test_reset_mid_upload(void **s) {
  (void)s;
  size_t n = (size_t)16 << 20;
  void *blob = ht_blob(n);
  const char *args[] = {"--rcvbuf", "4096", NULL};
  lk_http_policy pol;
  ht_policy(&pol);
  ht_run r;
  scenario(POST_NOKEY, "reset_mid_upload", args, &pol, blob, n, 3, &r);
  ht_all_kinds(&r, LK_F_RESET_BEFORE_SEND);
  assert_int_equal(r.nattempts, 3);
  assert_int_equal(r.nreqs, 3);
  for (int i = 0; i < r.nreqs; i++)
    assert_false(r.reqs[i].complete);
  ht_free(&r);
  free(blob);
}

/* The deadline bounds everything: the one attempt gets only what is left. */
static void test_deadline_cuts_attempt(void **s) {
  (void)s;
  lk_http_policy pol;
  ht_policy(&pol);
  pol.deadline = LK_MS(250);
  pol.attempt_timeout = LK_SEC(5);
  pol.connect_timeout = 0;
  ht_run r;
  scenario(GET, "blackhole", NULL, &pol, NULL, 0, 0, &r);
  assert_int_equal(r.nattempts, 1);
  assert_int_equal(r.att[0].failure, LK_F_CONNECT_TIMEOUT);
  assert_true(r.att[0].timeout <= LK_MS(250) && r.att[0].timeout > LK_MS(240));
  assert_int_equal(r.att[0].decision.reason, LK_REASON_DEADLINE);
  assert_int_equal(r.err, LK_EDEADLINE);
  assert_true(r.wall >= LK_MS(245));
  ht_free(&r);
}

/* Success: status, headers and body; AUTO keys only non-idempotent methods; the deadline header
 * is this attempt's budget minus the reserve. */
static void test_ok_and_headers(void **s) {
  (void)s;
  for (flavour f = GET; f <= POST_KEY; f++) {
    lk_http_policy pol;
    ht_policy(&pol);
    pol.deadline_reserve = LK_MS(100);
    ht_run r;
    const char *args[] = {"--body", "{\"id\":7}", NULL};
    scenario(f, "ok", args, &pol, NULL, 0, 1, &r);
    assert_int_equal(r.err, LK_OK);
    assert_int_equal(r.nattempts, 1);
    assert_int_equal(r.att[0].failure, LK_F_NONE);
    assert_int_equal(r.att[0].phase, LK_PHASE_DONE);
    assert_int_equal(r.att[0].decision.reason, LK_REASON_SUCCESS);
    const lk_http_response *resp = lk_http_result_response(r.res);
    assert_non_null(resp);
    assert_int_equal(resp->status, 200);
    assert_true(resp->complete);
    assert_string_equal(resp->body, "{\"id\":7}");
    assert_int_equal(r.nreqs, 1);
    assert_true(atoll(r.reqs[0].deadline) <= 200);
    assert_true(atoll(r.reqs[0].deadline) >= 150);
    assert_true(r.reqs[0].complete);
    assert_int_equal(r.reqs[0].body_bytes, f == GET ? 0 : 10);
    ht_free(&r);
  }
}

/* Less than a millisecond of budget goes out as Linkd-Deadline: 1, never 0 ("passed"). */
static void test_deadline_header_sub_ms(void **s) {
  (void)s;
  lk_http_policy pol;
  ht_policy(&pol);
  /* the deadline is 1.5 s, so the attempt's budget is its 300 ms cap less the reserve */
  pol.deadline_reserve = pol.attempt_timeout - 500 * LK_NS_PER_US;
  ht_run r;
  scenario(GET, "ok", NULL, &pol, NULL, 0, 1, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(r.nreqs, 1);
  assert_string_equal(r.reqs[0].deadline, "1");
  ht_free(&r);
}

/* A caller-supplied key with a tenant prefix goes out unchanged on every attempt. */
static void test_supplied_key(void **s) {
  (void)s;
  lk_http_policy pol;
  ht_policy(&pol);
  ht_run r;
  assert_int_equal(faultd_start(&FP, "read_then_close", NULL), 0);
  pol.idem_mode = LK_IDEM_KEY;
  pol.idem_key = "loan-42";
  pol.idem_tenant = "acme";
  ht_call(&FP, NULL, "POST", "x", 1, &pol, 3, &r);
  assert_string_equal(lk_http_result_idempotency_key(r.res), "acme:loan-42");
  assert_int_equal(r.nattempts, 3);
  assert_int_equal(r.nreqs, 3);
  ht_server_saw_one_key(&r, &pol);
  ht_free(&r);
  faultd_stop(&FP);
}

/* The classification hook turns a 200 that says "busy" into a retryable result. */
static lk_failure busy_hook(void *ctx, const lk_http_response *resp, lk_failure kind) {
  (*(int *)ctx)++;
  if (resp->status == 200 && strstr(resp->body, "busy"))
    return LK_F_RESULT_RETRYABLE;
  return kind;
}

static void test_classify_hook(void **s) {
  (void)s;
  const char *args[] = {"--script", "200,200,200", "--body", "busy", NULL};
  lk_http_policy pol;
  ht_policy(&pol);
  int calls = 0;
  pol.classify = busy_hook;
  pol.classify_ctx = &calls;
  ht_run r;
  scenario(GET, "ok", args, &pol, NULL, 0, 3, &r);
  assert_int_equal(calls, 3);
  ht_all_kinds(&r, LK_F_RESULT_RETRYABLE);
  assert_int_equal(r.att[0].classified, LK_F_NONE);
  assert_int_equal(r.err, LK_EATTEMPTS);
  assert_int_equal(lk_http_result_status(r.res), 200);
  ht_free(&r);
}

/* A script: 503, then 200: the call succeeds on attempt 2 and reports both. */
static void test_recovers(void **s) {
  (void)s;
  const char *args[] = {"--script", "503:ra=0,ok", NULL};
  lk_http_policy pol;
  ht_policy(&pol);
  ht_run r;
  scenario(GET, "status", args, &pol, NULL, 0, 2, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(r.nattempts, 2);
  assert_int_equal(r.att[0].failure, LK_F_HTTP_503);
  assert_true(r.att[0].decision.retry);
  assert_int_equal(r.att[1].failure, LK_F_NONE);
  assert_int_equal(lk_http_result_status(r.res), 200);
  assert_int_equal(lk_http_result_failure(r.res), LK_F_NONE);
  /* the kept response moved between attempts: its status line is the final one's */
  const lk_http_response *resp = lk_http_result_response(r.res);
  assert_non_null(resp);
  assert_int_equal(resp->version, 11);
  assert_string_equal(resp->reason, "OK");
  ht_free(&r);
}

/* A keyed POST answered 409 with a Retry-After is a resend that met its first request still
 * running: asked again, with the same key, it gets that request's result. Without the key, or
 * without the Retry-After, a 409 is the resource's answer and final. */
static void test_409_key_in_use(void **s) {
  (void)s;
  const char *wait[] = {"--script", "409:ra=0,201", NULL};
  lk_http_policy pol;
  ht_policy(&pol);
  ht_run r;
  scenario(POST_KEY, "status", wait, &pol, NULL, 0, 2, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(r.nattempts, 2);
  assert_int_equal(r.att[0].failure, LK_F_KEY_IN_USE);
  assert_true(r.att[0].decision.retry);
  assert_int_equal(lk_http_result_status(r.res), 201);
  ht_free(&r);
  ht_policy(&pol);
  scenario(POST_NOKEY, "status", wait, &pol, NULL, 0, 1, &r);
  assert_int_equal(r.nattempts, 1);
  assert_int_equal(r.att[0].failure, LK_F_CLIENT_4XX);
  assert_int_equal(lk_http_result_status(r.res), 409);
  ht_free(&r);
  const char *verdict[] = {"--script", "409,201", NULL};
  ht_policy(&pol);
  scenario(POST_KEY, "status", verdict, &pol, NULL, 0, 1, &r);
  assert_int_equal(r.nattempts, 1);
  assert_int_equal(r.att[0].failure, LK_F_CLIENT_4XX);
  assert_int_equal(r.err, LK_EHTTP);
  ht_free(&r);
}

/* 404 is final and typed as an HTTP error with the response. */
static void test_404_final(void **s) {
  (void)s;
  const char *args[] = {"--status", "404", NULL};
  lk_http_policy pol;
  ht_policy(&pol);
  ht_run r;
  scenario(GET, "status", args, &pol, NULL, 0, 1, &r);
  assert_int_equal(r.nattempts, 1);
  assert_int_equal(r.att[0].failure, LK_F_CLIENT_4XX);
  assert_int_equal(r.err, LK_EHTTP);
  assert_int_equal(lk_http_result_status(r.res), 404);
  ht_free(&r);
}

/* --- a few faults faultd does not script: a tiny raw server thread ------------------------- */
typedef enum { RAW_PARTIAL_CLOSE, RAW_JUNK, RAW_GREET, RAW_CAPTURE } raw_mode;

typedef struct raw_server {
  char head[4096]; /* RAW_CAPTURE: the last request head received */
  int lfd, port, conns;
  raw_mode mode;
  pthread_t th;
} raw_server;

static void *raw_serve(void *arg) {
  raw_server *rs = arg;
  for (int i = 0; i < rs->conns; i++) {
    int c = accept(rs->lfd, NULL, NULL);
    if (c < 0)
      break;
    char buf[4096];
    if (rs->mode != RAW_GREET) {
      size_t len = 0;
      while (len < sizeof buf - 1) { /* read the request head */
        ssize_t n = read(c, buf + len, sizeof buf - 1 - len);
        if (n <= 0)
          break;
        len += (size_t)n;
        buf[len] = '\0';
        if (strstr(buf, "\r\n\r\n"))
          break;
      }
      buf[len] = '\0';
      if (rs->mode == RAW_CAPTURE)
        memcpy(rs->head, buf, len + 1);
    }
    static const char *const replies[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello", /* then close: body cut short */
        "SSH-2.0-OpenSSH_9.2\r\n\r\n",                          /* not HTTP at all */
        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",        /* plain text to a TLS client */
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"};     /* a plain answer */
    const char *rep = replies[rs->mode];
    ssize_t w = write(c, rep, strlen(rep));
    (void)w;
    if (rs->mode == RAW_GREET) /* let the client's TLS layer read the junk before EOF */
      while (read(c, buf, sizeof buf) > 0) {
      }
    close(c);
  }
  return NULL;
}

static void raw_start(raw_server *rs, raw_mode mode, int conns) {
  rs->mode = mode;
  rs->conns = conns;
  rs->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  assert_int_equal(bind(rs->lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(rs->lfd, 16), 0);
  assert_int_equal(getsockname(rs->lfd, (struct sockaddr *)&a, &al), 0);
  rs->port = ntohs(a.sin_port);
  assert_int_equal(pthread_create(&rs->th, NULL, raw_serve, rs), 0);
}

static void raw_stop(raw_server *rs) {
  shutdown(rs->lfd, SHUT_RDWR); /* wakes accept if the client made fewer connections */
  pthread_join(rs->th, NULL);
  close(rs->lfd);
}

static raw_server RS; /* large: static, and readable after raw_case */

static void raw_case(raw_mode mode, const char *scheme, lk_http_policy *pol, int conns,
                     ht_run *r) {
  raw_server *rs = &RS;
  memset(rs, 0, sizeof *rs);
  raw_start(rs, mode, conns);
  char url[96];
  snprintf(url, sizeof url, "%s://127.0.0.1:%d/x", scheme, rs->port);
  ht_call_url(NULL, "GET", url, NULL, 0, pol, r);
  ht_within_deadline(r, pol);
  raw_stop(rs);
}

/* What goes on the wire: the propagation headers in both forms, the user agent, the caller's
 * headers, and no Expect for a request without a body. */
static void test_wire_headers(void **s) {
  (void)s;
  lk_http_policy pol;
  ht_policy(&pol);
  pol.send_grpc_timeout = true;
  pol.deadline_reserve = LK_MS(50);
  pol.user_agent = "linkd-test/1";
  ht_run r;
  raw_case(RAW_CAPTURE, "http", &pol, 1, &r);
  assert_int_equal(r.err, LK_OK);
  printf("# request head:\n%s", RS.head);
  assert_non_null(strstr(RS.head, "GET /x HTTP/1.1\r\n"));
  assert_non_null(strstr(RS.head, "\r\nLinkd-Deadline: 250\r\n"));   /* 300 ms - 50 ms */
  assert_non_null(strstr(RS.head, "\r\ngrpc-timeout: 250000u\r\n")); /* same, gRPC's form */
  assert_non_null(strstr(RS.head, "\r\nLinkd-Attempt: 1\r\n"));
  assert_non_null(strstr(RS.head, "\r\nUser-Agent: linkd-test/1\r\n"));
  assert_null(strstr(RS.head, "Expect"));
  assert_null(strstr(RS.head, "Idempotency-Key"));
  ht_free(&r);
}

/* Content-Length promised 100 bytes, 5 came, then FIN: a partial body (response kept). */
static void test_partial_body(void **s) {
  (void)s;
  lk_http_policy pol;
  ht_policy(&pol);
  ht_attempts(&pol, 2);
  ht_run r;
  raw_case(RAW_PARTIAL_CLOSE, "http", &pol, 2, &r);
  ht_all_kinds(&r, LK_F_PARTIAL_BODY);
  assert_int_equal(r.nattempts, 2);
  assert_int_equal(r.att[0].phase, LK_PHASE_RECEIVE);
  const lk_http_response *resp = lk_http_result_response(r.res);
  assert_non_null(resp);
  assert_false(resp->complete);
  assert_string_equal(resp->body, "hello");
  ht_free(&r);
}

/* A reply that is not HTTP. */
static void test_junk_response(void **s) {
  (void)s;
  lk_http_policy pol;
  ht_policy(&pol);
  ht_attempts(&pol, 1);
  ht_run r;
  raw_case(RAW_JUNK, "http", &pol, 1, &r);
  ht_all_kinds(&r, LK_F_JUNK_RESPONSE);
  assert_null(lk_http_result_response(r.res));
  ht_free(&r);
}

/* One GET with a client certificate (cert NULL: none): its kind; attempts counts the attempts
 * made of at most 3 (a certificate the server refuses is a verdict, not retried). */
static lk_failure cert_call(lk_http_client *c, const char *url, const char *ca, const char *cert,
                            const char *key, const char *pass, int *attempts) {
  lk_http_policy pol;
  ht_policy(&pol);
  ht_attempts(&pol, 3);
  pol.deadline = pol.attempt_timeout = LK_SEC(5); /* OpenSSL under sanitizers is slow */
  pol.connect_timeout = 0;
  pol.ca_file = ca;
  pol.client_cert = cert;
  pol.client_key = key;
  pol.key_password = pass;
  ht_run r;
  ht_call_url(c, "GET", url, NULL, 0, &pol, &r);
  lk_failure got = r.nattempts >= 1 ? r.att[r.nattempts - 1].failure : LK_F__COUNT;
  *attempts = (int)r.nattempts;
  ht_free(&r);
  return got;
}

/* One GET with `ca` as the CA file and no client certificate: its kind. */
static lk_failure ca_call(lk_http_client *c, const char *url, const char *ca) {
  int attempts;
  return cert_call(c, url, ca, NULL, NULL, NULL, &attempts);
}

/* ca_file: the server's own certificate verifies it; libcurl's default bundle and another CA do
 * not. One client, so the calls share pooled easy handles: a handle set up with a CA file must
 * not keep it for a call that asks for the default. */
static void test_ca_file(void **s) {
  (void)s;
  char dir[] = "/tmp/linkd-ca-XXXXXX";
  assert_non_null(mkdtemp(dir));
  ht_make_cert(dir, "server");
  ht_make_cert(dir, "other");
  char crt[128], key[128], other[128], url[64];
  snprintf(crt, sizeof crt, "%s/server-c.pem", dir);
  snprintf(key, sizeof key, "%s/server-k.pem", dir);
  snprintf(other, sizeof other, "%s/other-c.pem", dir);
  int port = 0;
  pid_t pid = ht_tls_server_start(crt, key, &port);
  bool up = pid > 0;
  snprintf(url, sizeof url, "https://127.0.0.1:%d/x", port);
  char missing[160];
  snprintf(missing, sizeof missing, "%s/missing.pem", dir);
  const struct {
    const char *ca;
    lk_failure want;
  } steps[] = {{crt, LK_F_NONE},          {NULL, LK_F_TLS_FAILED}, {other, LK_F_TLS_FAILED},
               {crt, LK_F_NONE},          {NULL, LK_F_TLS_FAILED}, {missing, LK_F_TLS_FAILED}};
  enum { NSTEPS = sizeof steps / sizeof steps[0] };
  lk_failure got[NSTEPS];
  lk_http_client *c = lk_http_client_new(NULL);
  for (size_t i = 0; i < NSTEPS; i++)
    got[i] = up && c ? ca_call(c, url, steps[i].ca) : LK_F__COUNT;
  /* the server goes before any check can fail, or it would outlive the test */
  lk_http_client_free(c);
  ht_tls_server_stop(pid);
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
  assert_true(up);
  assert_non_null(c);
  for (size_t i = 0; i < NSTEPS; i++)
    if (got[i] != steps[i].want)
      fail_msg("call %zu, CA file %s: %s, expected %s", i + 1,
               steps[i].ca ? steps[i].ca : "(default)",
               got[i] < LK_F__COUNT ? lk_failure_name(got[i]) : "no attempt",
               lk_failure_name(steps[i].want));
}

/* Mutual TLS against a server that asks for a certificate its CA ("client") verifies. One
 * client, so the calls share pooled handles and libcurl's connection pool: a connection made
 * with the right certificate must not serve a call with none or another, and a handle set up
 * with a certificate must not keep it for a call without. TLS 1.3 refuses a certificate after
 * the client's side of the handshake, with an alert where the answer would be: TLS_FAILED, one
 * attempt, not a reset after send retried three times. */
static void test_client_cert(void **s) {
  (void)s;
  char dir[] = "/tmp/linkd-mtls-XXXXXX";
  assert_non_null(mkdtemp(dir));
  ht_make_cert(dir, "server");
  ht_make_cert(dir, "client");
  ht_make_cert(dir, "other");
  char crt[128], key[128], ccrt[128], ckey[128], ocrt[128], okey[128], both[128], enc[128];
  char missing[128], cmd[1024], url[64];
  snprintf(crt, sizeof crt, "%s/server-c.pem", dir);
  snprintf(key, sizeof key, "%s/server-k.pem", dir);
  snprintf(ccrt, sizeof ccrt, "%s/client-c.pem", dir);
  snprintf(ckey, sizeof ckey, "%s/client-k.pem", dir);
  snprintf(ocrt, sizeof ocrt, "%s/other-c.pem", dir);
  snprintf(okey, sizeof okey, "%s/other-k.pem", dir);
  snprintf(both, sizeof both, "%s/both.pem", dir);
  snprintf(enc, sizeof enc, "%s/enc-k.pem", dir);
  snprintf(missing, sizeof missing, "%s/missing.pem", dir);
  /* the certificate and its key in one file; the key encrypted with a pass phrase */
  snprintf(cmd, sizeof cmd,
           "cat %s %s > %s && openssl pkey -in %s -aes256 -passout pass:s3cret -out %s "
           ">/dev/null 2>&1",
           ccrt, ckey, both, ckey, enc);
  assert_int_equal(system(cmd), 0);
  int port = 0;
  pid_t pid = ht_mtls_server_start(crt, key, ccrt, &port);
  bool up = pid > 0;
  snprintf(url, sizeof url, "https://127.0.0.1:%d/x", port);
  const struct {
    const char *cert, *key, *pass;
    lk_failure want;
  } steps[] = {
      {ccrt, ckey, NULL, LK_F_NONE},       {NULL, NULL, NULL, LK_F_TLS_FAILED},
      {ocrt, okey, NULL, LK_F_TLS_FAILED}, {ccrt, ckey, NULL, LK_F_NONE},
      {ccrt, okey, NULL, LK_F_TLS_FAILED}, {missing, ckey, NULL, LK_F_TLS_FAILED},
      {both, NULL, NULL, LK_F_NONE},       {ccrt, enc, "s3cret", LK_F_NONE},
      {ccrt, enc, NULL, LK_F_TLS_FAILED},  {ccrt, enc, "wrong", LK_F_TLS_FAILED},
      {NULL, NULL, NULL, LK_F_TLS_FAILED},
  };
  enum { NSTEPS = sizeof steps / sizeof steps[0] };
  lk_failure got[NSTEPS];
  int attempts[NSTEPS];
  lk_http_client *c = lk_http_client_new(NULL);
  for (size_t i = 0; i < NSTEPS; i++)
    got[i] = up && c
                 ? cert_call(c, url, crt, steps[i].cert, steps[i].key, steps[i].pass, &attempts[i])
                 : LK_F__COUNT;
  /* the server goes before any check can fail, or it would outlive the test */
  lk_http_client_free(c);
  ht_tls_server_stop(pid);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
  assert_true(up);
  assert_non_null(c);
  for (size_t i = 0; i < NSTEPS; i++) {
    if (got[i] != steps[i].want)
      fail_msg("call %zu, certificate %s, key %s: %s, expected %s", i + 1,
               steps[i].cert ? steps[i].cert : "(none)", steps[i].key ? steps[i].key : "(none)",
               got[i] < LK_F__COUNT ? lk_failure_name(got[i]) : "no attempt",
               lk_failure_name(steps[i].want));
    assert_int_equal(attempts[i], 1);
  }
}

/* TLS: a plain-text server breaks the handshake (TLS_FAILED: a protocol failure, which a retry
 * would only repeat, so it is not retried by default); a server that never reads stalls it
 * (TLS_TIMEOUT by the TLS timer, retried). */
static void test_tls_phases(void **s) {
  (void)s;
  lk_http_policy pol;
  ht_policy(&pol);
  ht_attempts(&pol, 2);
  pol.deadline = LK_SEC(5); /* OpenSSL's setup is slow under sanitizers: room to fail, not time out */
  pol.attempt_timeout = LK_SEC(2);
  ht_run r;
  raw_case(RAW_GREET, "https", &pol, 2, &r);
  ht_all_kinds(&r, LK_F_TLS_FAILED);
  assert_int_equal(r.nattempts, 1);
  assert_int_equal(r.err, LK_ENOTRETRYABLE);
  assert_int_equal(r.att[0].decision.reason, LK_REASON_NOT_RETRYABLE);
  assert_int_equal(r.att[0].phase, LK_PHASE_TLS);
  ht_free(&r);

  assert_int_equal(faultd_start(&FP, "accept_noread", NULL), 0);
  char url[96];
  snprintf(url, sizeof url, "https://127.0.0.1:%d/x", faultd_port(&FP));
  pol.tls_timeout = LK_MS(100);
  ht_call_url(NULL, "GET", url, NULL, 0, &pol, &r);
  ht_all_kinds(&r, LK_F_TLS_TIMEOUT);
  assert_int_equal(r.nattempts, 2);
  assert_int_equal(r.att[0].phase, LK_PHASE_TLS);
  assert_true(r.att[0].duration < LK_SEC(1)); /* the TLS timer, not the 2 s attempt */
  ht_free(&r);
  faultd_stop(&FP);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_refused, teardown),
      cmocka_unit_test_teardown(test_409_key_in_use, teardown),
      cmocka_unit_test_teardown(test_connect_timeout, teardown),
      cmocka_unit_test_teardown(test_accept_noread, teardown),
      cmocka_unit_test_teardown(test_read_then_reset, teardown),
      cmocka_unit_test_teardown(test_read_then_close, teardown),
      cmocka_unit_test_teardown(test_reset_before_read, teardown),
      cmocka_unit_test_teardown(test_first_byte_timeout, teardown),
      cmocka_unit_test_teardown(test_idle_timeout, teardown),
      cmocka_unit_test_teardown(test_partial_stall, teardown),
      cmocka_unit_test_teardown(test_503_retry_after_seconds, teardown),
      cmocka_unit_test_teardown(test_503_retry_after_date, teardown),
      cmocka_unit_test_teardown(test_429_retried_for_post, teardown),
      cmocka_unit_test_teardown(test_hostile_retry_after, teardown),
      cmocka_unit_test_teardown(test_write_timeout_large_upload, teardown),
      cmocka_unit_test_teardown(test_reset_mid_upload, teardown),
      cmocka_unit_test_teardown(test_deadline_cuts_attempt, teardown),
      cmocka_unit_test_teardown(test_ok_and_headers, teardown),
      cmocka_unit_test_teardown(test_deadline_header_sub_ms, teardown),
      cmocka_unit_test_teardown(test_supplied_key, teardown),
      cmocka_unit_test_teardown(test_classify_hook, teardown),
      cmocka_unit_test_teardown(test_recovers, teardown),
      cmocka_unit_test_teardown(test_404_final, teardown),
      cmocka_unit_test_teardown(test_partial_body, teardown),
      cmocka_unit_test_teardown(test_junk_response, teardown),
      cmocka_unit_test_teardown(test_tls_phases, teardown),
      cmocka_unit_test(test_ca_file),
      cmocka_unit_test(test_client_cert),
      cmocka_unit_test_teardown(test_wire_headers, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
