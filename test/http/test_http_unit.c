/* SPDX-License-Identifier: MIT */
/* Unit tests of the HTTP layer's pure parts: classification from evidence, Retry-After and
 * HTTP-date parsing, Idempotency-Key generation, request validation, policy validation, response
 * header parsing and the JSON timeline. No network. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <linkd/http.h>
#include <linkd/idem.h>

#include "http/http_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- classification ------------------------------------------------------------------------ */
static lk_evidence ev(int code) {
  lk_evidence e;
  memset(&e, 0, sizeof e);
  e.curl_code = code;
  return e;
}

static void test_classify_connect_phase(void **s) {
  (void)s;
  lk_evidence e = ev(CURLE_COULDNT_RESOLVE_HOST);
  assert_int_equal(lk__classify(&e), LK_F_DNS_FAILED);
  e = ev(CURLE_COULDNT_CONNECT);
  e.socket_opened = true;
  e.os_errno = ECONNREFUSED;
  assert_int_equal(lk__classify(&e), LK_F_CONNECT_REFUSED);
  e.os_errno = ETIMEDOUT;
  assert_int_equal(lk__classify(&e), LK_F_CONNECT_TIMEOUT);
  e.os_errno = EHOSTUNREACH;
  assert_int_equal(lk__classify(&e), LK_F_CONNECT_FAILED);
  e = ev(CURLE_SSL_CONNECT_ERROR);
  e.socket_opened = e.connected = e.https = true;
  assert_int_equal(lk__classify(&e), LK_F_TLS_FAILED);
  assert_int_equal(lk__phase_of(&e), LK_PHASE_TLS);
  e = ev(CURLE_PEER_FAILED_VERIFICATION);
  e.socket_opened = e.connected = e.https = true;
  assert_int_equal(lk__classify(&e), LK_F_TLS_FAILED);
}

/* Error 28 says nothing about the phase: the evidence decides. */
static void test_classify_timeout_by_phase(void **s) {
  (void)s;
  lk_evidence e = ev(CURLE_OPERATION_TIMEDOUT);
  assert_int_equal(lk__classify(&e), LK_F_DNS_TIMEOUT);
  e.socket_opened = true;
  assert_int_equal(lk__classify(&e), LK_F_CONNECT_TIMEOUT);
  e.connected = true;
  e.https = true;
  assert_int_equal(lk__classify(&e), LK_F_TLS_TIMEOUT);
  e.tls_done = true;
  e.prereq = true;
  assert_int_equal(lk__classify(&e), LK_F_WRITE_TIMEOUT);
  e.fully_sent = true;
  assert_int_equal(lk__classify(&e), LK_F_READ_TIMEOUT);
  assert_int_equal(lk__phase_of(&e), LK_PHASE_WAIT);
  e.got_bytes = true;
  assert_int_equal(lk__classify(&e), LK_F_READ_TIMEOUT);
  assert_int_equal(lk__phase_of(&e), LK_PHASE_RECEIVE);
  /* the driver's own timers name their phase */
  e = ev(CURLE_OK);
  e.timer = LK_TIMER_FIRST_BYTE;
  assert_int_equal(lk__classify(&e), LK_F_FIRST_BYTE_TIMEOUT);
  e.timer = LK_TIMER_IDLE;
  assert_int_equal(lk__classify(&e), LK_F_IDLE_TIMEOUT);
  e.timer = LK_TIMER_WRITE;
  assert_int_equal(lk__classify(&e), LK_F_WRITE_TIMEOUT);
  e.timer = LK_TIMER_CONNECT;
  assert_int_equal(lk__classify(&e), LK_F_CONNECT_TIMEOUT);
  e.timer = LK_TIMER_DNS;
  assert_int_equal(lk__classify(&e), LK_F_DNS_TIMEOUT);
  e.timer = LK_TIMER_TLS;
  assert_int_equal(lk__classify(&e), LK_F_TLS_TIMEOUT);
  e.timer = LK_TIMER_ATTEMPT;
  e.prereq = e.socket_opened = e.connected = true;
  assert_int_equal(lk__classify(&e), LK_F_WRITE_TIMEOUT);
}

/* Resets: whether the request was fully written decides "not sent" vs "maybe processed". */
static void test_classify_resets(void **s) {
  (void)s;
  lk_evidence e = ev(CURLE_RECV_ERROR);
  e.socket_opened = e.connected = e.prereq = true;
  assert_int_equal(lk__classify(&e), LK_F_RESET_BEFORE_SEND);
  e.fully_sent = true;
  assert_int_equal(lk__classify(&e), LK_F_RESET_AFTER_SEND);
  e.got_bytes = true;
  e.status = 200;
  assert_int_equal(lk__classify(&e), LK_F_PARTIAL_BODY);
  e = ev(CURLE_SEND_ERROR);
  e.socket_opened = e.connected = e.prereq = true;
  assert_int_equal(lk__classify(&e), LK_F_RESET_BEFORE_SEND);
  e = ev(CURLE_GOT_NOTHING);
  e.prereq = e.fully_sent = true;
  assert_int_equal(lk__classify(&e), LK_F_EMPTY_RESPONSE);
  e.fully_sent = false;
  assert_int_equal(lk__classify(&e), LK_F_RESET_BEFORE_SEND);
  e = ev(CURLE_PARTIAL_FILE);
  e.prereq = e.fully_sent = e.got_bytes = true;
  assert_int_equal(lk__classify(&e), LK_F_PARTIAL_BODY);
  e = ev(CURLE_WEIRD_SERVER_REPLY);
  e.prereq = e.fully_sent = e.got_bytes = true;
  assert_int_equal(lk__classify(&e), LK_F_JUNK_RESPONSE);
  e = ev(CURLE_ABORTED_BY_CALLBACK);
  e.prereq = e.fully_sent = true;
  e.resend_aborted = true;
  assert_int_equal(lk__classify(&e), LK_F_RESET_AFTER_SEND);
  /* an unknown failure before the first write cannot have reached the server */
  e = ev(CURLE_FAILED_INIT);
  assert_int_equal(lk_failure_class_of(lk__classify(&e)), LK_FC_NOT_SENT);
  e.prereq = e.fully_sent = true;
  assert_int_equal(lk_failure_class_of(lk__classify(&e)), LK_FC_MAYBE_PROCESSED);
}

static void test_classify_status_and_terminal(void **s) {
  (void)s;
  lk_evidence e = ev(CURLE_OK);
  e.prereq = e.fully_sent = e.got_bytes = e.complete = true;
  int st[] = {200, 204, 301, 404, 408, 425, 429, 500, 502, 503, 504, 599};
  for (size_t i = 0; i < sizeof st / sizeof st[0]; i++) {
    e.status = st[i];
    assert_int_equal(lk__classify(&e), lk_failure_from_status(st[i]));
  }
  assert_int_equal(lk__phase_of(&e), LK_PHASE_DONE);
  e.cancelled = true;
  assert_int_equal(lk__classify(&e), LK_F_CANCELLED);
  assert_true(lk__kind_is_timeout(LK_F_IDLE_TIMEOUT));
  assert_true(lk__kind_is_timeout(LK_F_POOL_TIMEOUT));
  assert_false(lk__kind_is_timeout(LK_F_RESET_AFTER_SEND));
}

/* --- Retry-After and HTTP-date --------------------------------------------------------------- */
static int64_t ra(const char *v, int64_t now_wall, int *rc) {
  int64_t out = -7;
  *rc = lk_http_retry_after_parse(v, strlen(v), now_wall, &out);
  return out;
}

static void test_http_date_forms(void **s) {
  (void)s;
  int64_t t;
  int64_t now = INT64_C(1767225600) * LK_NS_PER_S; /* 2026-01-01T00:00:00Z */
  /* RFC 9110's example instant in its three forms */
  assert_int_equal(lk_http_date_parse("Sun, 06 Nov 1994 08:49:37 GMT", 29, now, &t), LK_OK);
  assert_int_equal(t, 784111777);
  const char *rfc850 = "Sunday, 06-Nov-94 08:49:37 GMT";
  assert_int_equal(lk_http_date_parse(rfc850, strlen(rfc850), now, &t), LK_OK);
  assert_int_equal(t, 784111777);
  const char *asc = "Sun Nov  6 08:49:37 1994";
  assert_int_equal(lk_http_date_parse(asc, strlen(asc), now, &t), LK_OK);
  assert_int_equal(t, 784111777);
  const char *leap = "Thu, 29 Feb 2024 00:00:00 GMT";
  assert_int_equal(lk_http_date_parse(leap, strlen(leap), now, &t), LK_OK);
  assert_int_equal(t, 1709164800);
  const char *bad[] = {"Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 6 Nov 1994 08:49:37 GMT",
                       "Sun, 30 Feb 1994 08:49:37 GMT", "Sun, 06 Nov 1994 24:00:00 GMT",
                       "Xyz, 06 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 GMT ",
                       "Fri, 29 Feb 2023 00:00:00 GMT", "", "Sun Nov 6 08:49:37 1994"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(lk_http_date_parse(bad[i], strlen(bad[i]), now, &t), LK_EPARSE);
  /* never reads past len */
  assert_int_equal(lk_http_date_parse("Sun, 06 Nov 1994 08:49:37 GMT", 28, now, &t), LK_EPARSE);
}

/* An HTTP-date read at wall time now_s (seconds); -1 when refused. */
static int64_t date_at(const char *v, int64_t now_s) {
  int64_t t = -1;
  if (lk_http_date_parse(v, strlen(v), now_s * LK_NS_PER_S, &t) != LK_OK)
    return -1;
  return t;
}

/* RFC 9110 5.6.7: a two-digit year more than 50 years ahead of now is the most recent past year
 * with those digits; the window moves with the wall time passed in, there is no fixed pivot. */
static void test_http_date_rfc850_years(void **s) {
  (void)s;
  const int64_t y2026 = INT64_C(1767225600); /* 2026-01-01T00:00:00Z */
  assert_int_equal(date_at("Thursday, 01-Jan-70 00:00:00 GMT", y2026), INT64_C(3155760000));
  assert_int_equal(date_at("Saturday, 01-Jan-77 00:00:00 GMT", y2026), INT64_C(220924800));
  /* Exactly 50 years ahead is not "more than 50": 2076; one second more is 1976. */
  assert_int_equal(date_at("Wednesday, 01-Jan-76 00:00:00 GMT", y2026), INT64_C(3345062400));
  assert_int_equal(date_at("Thursday, 01-Jan-76 00:00:01 GMT", y2026), INT64_C(189302401));
  /* "70" meant 1970 only while 2070 was more than 50 years ahead: until 2020-01-01. */
  assert_int_equal(date_at("Thursday, 01-Jan-70 00:00:00 GMT", INT64_C(1577836799)), 0);
  assert_int_equal(date_at("Thursday, 01-Jan-70 00:00:00 GMT", INT64_C(1577836800)),
                   INT64_C(3155760000));
  /* At RFC 9110's example instant: 94 is 1994, 44 is 2044 (exactly 50 years), 45 is 1945. */
  const int64_t y1994 = INT64_C(784111777);
  assert_int_equal(date_at("Sunday, 06-Nov-94 08:49:37 GMT", y1994), y1994);
  assert_int_equal(date_at("Sunday, 06-Nov-44 08:49:37 GMT", y1994), INT64_C(2362034977));
  assert_int_equal(date_at("Tuesday, 06-Nov-45 08:49:37 GMT", y1994), INT64_C(-762189023));
  /* Near a century's end the next century's years are the near future: in 2099, 01 is 2101. */
  const int64_t y2099 = INT64_C(4083955200); /* 2099-06-01 */
  assert_int_equal(date_at("Tuesday, 01-Mar-01 00:00:00 GMT", y2099), INT64_C(4139078400));
  assert_int_equal(date_at("Thursday, 01-Mar-01 00:00:00 GMT", y2026), INT64_C(983404800));
  /* The other two forms carry four digits and ignore the wall time. */
  assert_int_equal(date_at("Sun, 06 Nov 1994 08:49:37 GMT", y2099), y1994);
  assert_int_equal(date_at("Sun Nov  6 08:49:37 1994", y2099), y1994);
  /* A Retry-After in RFC 850 form with year 70, received in 2026, is 44 years away, not past. */
  int64_t out = -1;
  const char *ra70 = "Thursday, 01-Jan-70 00:00:00 GMT";
  assert_int_equal(lk_http_retry_after_parse(ra70, strlen(ra70), y2026 * LK_NS_PER_S, &out),
                   LK_OK);
  assert_int_equal(out, (INT64_C(3155760000) - y2026) * LK_NS_PER_S);
}

static void test_retry_after(void **s) {
  (void)s;
  int rc;
  int64_t now = INT64_C(784111777) * LK_NS_PER_S; /* the example instant, on the second */
  assert_int_equal(ra("120", now, &rc), LK_SEC(120));
  assert_int_equal(rc, LK_OK);
  assert_int_equal(ra("  0\t", now, &rc), 0);
  assert_int_equal(rc, LK_OK);
  /* hostile: saturates instead of overflowing; the policy caps it */
  assert_int_equal(ra("99999999999999999999999", now, &rc), INT64_MAX);
  assert_int_equal(rc, LK_OK);
  /* a date 10 s ahead, and a date in the past */
  assert_int_equal(ra("Sun, 06 Nov 1994 08:49:47 GMT", now, &rc), LK_SEC(10));
  assert_int_equal(ra("Sun, 06 Nov 1994 08:49:47 GMT", now + LK_MS(250), &rc), LK_MS(9750));
  assert_int_equal(ra("Sun, 06 Nov 1994 08:00:00 GMT", now, &rc), 0);
  assert_int_equal(rc, LK_OK);
  const char *bad[] = {"-1", "1.5", "12a", "", "   ", "soon", "+5"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ra(bad[i], now, &rc);
    assert_int_equal(rc, LK_EPARSE);
  }
}

/* --- idempotency keys ------------------------------------------------------------------------ */
static bool is_uuid4(const char *u) {
  if (strlen(u) != 36)
    return false;
  for (int i = 0; i < 36; i++) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (u[i] != '-')
        return false;
    } else if (!strchr("0123456789abcdef", u[i])) {
      return false;
    }
  }
  return u[14] == '4' && strchr("89ab", u[19]) != NULL;
}

static void test_uuid4(void **s) {
  (void)s;
  char prev[LK_UUID_STR_LEN] = "", u[LK_UUID_STR_LEN];
  for (int i = 0; i < 1000; i++) {
    assert_int_equal(lk_uuid4(u), LK_OK);
    assert_true(is_uuid4(u));
    assert_string_not_equal(u, prev);
    memcpy(prev, u, sizeof u);
  }
}

static void test_idem_keys(void **s) {
  (void)s;
  char k[LK_IDEM_KEY_MAX];
  int n = lk_idem_key_new("tenant-7", k, sizeof k);
  assert_int_equal(n, 9 + 36);
  assert_memory_equal(k, "tenant-7:", 9);
  assert_true(is_uuid4(k + 9));
  assert_int_equal(lk_idem_key_new(NULL, k, sizeof k), 36);
  assert_int_equal(lk_idem_key_new("", k, sizeof k), 36);
  assert_int_equal(lk_idem_key_new("a b", k, sizeof k), LK_EINVAL);
  assert_int_equal(lk_idem_key_new(NULL, k, 36), LK_ETOOBIG);
  assert_int_equal(lk_idem_key_compose("t", "order-1", k, sizeof k), 9);
  assert_string_equal(k, "t:order-1");
  assert_int_equal(lk_idem_key_compose(NULL, "bad\r\nX: y", k, sizeof k), LK_EINVAL);
  char big[300];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  assert_int_equal(lk_idem_key_compose(NULL, big, k, sizeof k), LK_EINVAL);
  assert_false(lk_idem_key_valid(NULL, 0));
  assert_false(lk_idem_key_valid("", 0));
  assert_true(lk_idem_key_valid("x", 1));
  lk_idem_mode m;
  assert_int_equal(lk_idem_mode_parse("AUTO", &m), LK_OK);
  assert_int_equal(m, LK_IDEM_AUTO);
  assert_string_equal(lk_idem_mode_name(LK_IDEM_ALWAYS), "always");
  assert_int_equal(lk_idem_mode_parse("sometimes", &m), LK_EINVAL);
}

/* --- requests and policies ------------------------------------------------------------------- */
static void test_request_validation(void **s) {
  (void)s;
  assert_null(lk_http_request_new("GET", "ftp://x/"));
  assert_null(lk_http_request_new("GE T", "http://127.0.0.1/"));
  assert_null(lk_http_request_new("", "http://127.0.0.1/"));
  assert_null(lk_http_request_new("GET", "not a url"));
  lk_http_request *r = lk_http_request_new("post", "http://127.0.0.1:1/x");
  assert_non_null(r);
  assert_string_equal(lk_http_request_method(r), "post");
  assert_int_equal(lk_http_request_add_header(r, "X-Ok", "v"), LK_OK);
  assert_int_equal(lk_http_request_add_header(r, "X-Bad", "v\r\nInjected: 1"), LK_EINVAL);
  assert_int_equal(lk_http_request_add_header(r, "Bad Name", "v"), LK_EINVAL);
  assert_int_equal(lk_http_request_add_header(r, "linkd-attempt", "9"), LK_EINVAL);
  assert_int_equal(lk_http_request_add_header(r, "Content-Length", "9"), LK_EINVAL);
  assert_int_equal(lk_http_request_add_header(r, "Idempotency-Key", "bad key"), LK_EINVAL);
  assert_int_equal(lk_http_request_add_header(r, "Idempotency-Key", "k1"), LK_OK);
  assert_int_equal(lk_http_request_add_header(r, "Idempotency-Key", "k2"), LK_EINVAL);
  assert_int_equal(lk_http_request_add_header(r, "X-Empty", ""), LK_OK);
  assert_int_equal(lk_http_request_set_body(r, "abc", 3), LK_OK);
  assert_int_equal(lk_http_request_set_body(r, NULL, 3), LK_EINVAL);
  lk_http_request_free(r);
  lk_http_request_free(NULL);
}

static void test_policy_validation(void **s) {
  (void)s;
  lk_http_policy p;
  lk_http_policy_init_default(&p);
  const char *why = "x";
  assert_int_equal(lk_http_policy_validate(&p, &why), LK_OK);
  assert_null(why);
  assert_int_equal(p.deadline, LK_SEC(3));
  assert_int_equal(p.attempt_timeout, LK_MS(800));
  assert_int_equal(p.connect_timeout, LK_MS(500));
  assert_int_equal(p.retry.cfg.max_attempts, 4);
  lk_http_policy q = p;
  q.deadline = 0;
  assert_int_equal(lk_http_policy_validate(&q, &why), LK_ECONFIG);
  assert_non_null(why);
  q = p;
  q.idle_timeout = -1;
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_ECONFIG);
  q = p;
  q.idem_mode = LK_IDEM_KEY;
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_ECONFIG);
  q.idem_key = "order 1";
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_ECONFIG);
  q.idem_key = "order-1";
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_OK);
  q.idem_tenant = "t\n";
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_ECONFIG);
  q = p; /* the user agent becomes a header line: no CR/LF smuggling */
  q.user_agent = "linkd/1\r\nX-Injected: 1";
  assert_int_equal(lk_http_policy_validate(&q, &why), LK_ECONFIG);
  assert_non_null(strstr(why, "user agent"));
  q.user_agent = "linkd/1 (test)";
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_OK);
  q = p; /* a CA file name: a path, not empty, nothing that would end a line */
  q.ca_file = "";
  assert_int_equal(lk_http_policy_validate(&q, &why), LK_ECONFIG);
  assert_non_null(strstr(why, "CA file"));
  q.ca_file = "/etc/ca.pem\n";
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_ECONFIG);
  q.ca_file = "/etc/ca\r.pem";
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_ECONFIG);
  q.ca_file = "/etc/my ca.pem";
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_OK);
  q = p; /* a client certificate: the same rules; a key or pass phrase only with one */
  q.client_key = "/k.pem";
  assert_int_equal(lk_http_policy_validate(&q, &why), LK_ECONFIG);
  assert_non_null(strstr(why, "needs a client certificate"));
  q.client_key = NULL;
  q.key_password = "x";
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_ECONFIG);
  q.client_cert = "/c.pem";
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_OK);
  q.client_key = "/k.pem";
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_OK);
  q.client_cert = "";
  assert_int_equal(lk_http_policy_validate(&q, &why), LK_ECONFIG);
  assert_non_null(strstr(why, "client certificate file"));
  q.client_cert = "/c\n.pem";
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_ECONFIG);
  q.client_cert = "/c.pem";
  q.client_key = "/k\r.pem";
  assert_int_equal(lk_http_policy_validate(&q, &why), LK_ECONFIG);
  assert_non_null(strstr(why, "client key file"));
  q.client_key = "";
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_ECONFIG);
  q = p;
  q.retry.cfg.max_attempts = 0;
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_ECONFIG);
  q = p;
  q.pool_idle_lifetime = LK_MS(10);
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_ECONFIG);
  /* hedging is off by default; its policy is checked once it is asked for */
  assert_int_equal(p.hedge.max_hedges, 0);
  q = p;
  q.hedge.delay = -1; /* not used while max_hedges is 0 */
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_OK);
  q.hedge.max_hedges = 1;
  assert_int_equal(lk_http_policy_validate(&q, &why), LK_ECONFIG);
  assert_non_null(strstr(why, "hedge"));
  q.hedge.delay = LK_MS(10);
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_OK);
  q.hedge.max_hedges = LK_HEDGE_MAX_HEDGES + 1;
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_ECONFIG);
  q.hedge.max_hedges = 2;
  q.hedge.quantile = 95; /* a percentile delay needs its function */
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_ECONFIG);
  q.hedge.percentile = lk_http_hist_percentile;
  assert_int_equal(lk_http_policy_validate(&q, NULL), LK_OK);
}

/* --- responses ------------------------------------------------------------------------------- */
static void feed(lk_resp *r, const char *line) {
  assert_true(lk__resp_header_line(r, line, strlen(line)));
}

static void test_response_headers(void **s) {
  (void)s;
  lk_resp r;
  memset(&r, 0, sizeof r);
  feed(&r, "HTTP/1.1 100 Continue\r\n");
  feed(&r, "X-Interim: 1\r\n");
  feed(&r, "\r\n");
  assert_false(r.headers_done);
  feed(&r, "HTTP/1.1 503 Service Unavailable\r\n");
  feed(&r, "Retry-After:   7  \r\n");
  feed(&r, "Content-Type: text/plain\r\n");
  feed(&r, "\r\n");
  assert_true(r.headers_done);
  bool big = false;
  assert_true(lk__resp_body(&r, "busy", 4, 10, &big));
  assert_false(lk__resp_body(&r, "0123456789", 10, 10, &big));
  assert_true(big);
  assert_true(lk__resp_view(&r));
  assert_int_equal(r.view.status, 503);
  assert_int_equal(r.view.header_count, 2);
  assert_string_equal(lk_http_response_header(&r.view, "retry-after"), "7");
  assert_null(lk_http_response_header(&r.view, "X-Interim"));
  assert_string_equal(r.view.body, "busy");
  assert_int_equal(r.view.body_len, 4);
  assert_int_equal(r.view.version, 11);
  assert_string_equal(r.view.reason, "Service Unavailable");
  lk__resp_free(&r);
}

/* The status line's version and reason phrase; libcurl writes HTTP/2's as "HTTP/2 200 ". */
static void test_response_status_line(void **s) {
  (void)s;
  static const struct {
    const char *line;
    int status, version;
    const char *reason;
  } cases[] = {
      {"HTTP/1.1 200 OK\r\n", 200, 11, "OK"},
      {"HTTP/1.0 404 Not  Found \r\n", 404, 10, "Not  Found"},
      {"HTTP/2 200 \r\n", 200, 20, ""},
      {"HTTP/2 204\r\n", 204, 20, ""},
      {"HTTP/3 503 \r\n", 503, 30, ""},
      {"HTTP/1.1 200\r\n", 200, 11, ""},
      {"HTTP/x.y 200 OK\r\n", 200, 0, "OK"},
      {"HTTP/11 200 OK\r\n", 200, 0, "OK"},
      {"HTTP/1.1 2000 OK\r\n", 0, 11, ""}, /* four digits: no status, not 200 */
      {"HTTP/1.1 20 OK\r\n", 0, 11, ""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    lk_resp r;
    memset(&r, 0, sizeof r);
    feed(&r, cases[i].line);
    feed(&r, "\r\n");
    assert_true(lk__resp_view(&r));
    assert_int_equal(r.view.status, cases[i].status);
    assert_int_equal(r.view.version, cases[i].version);
    assert_string_equal(r.view.reason, cases[i].reason);
    lk__resp_free(&r);
  }
  /* a long phrase is cut to LK_HTTP_REASON_MAX - 1 bytes; an interim response's is replaced */
  char line[256], want[LK_HTTP_REASON_MAX];
  memset(want, 'x', sizeof want - 1);
  want[sizeof want - 1] = '\0';
  snprintf(line, sizeof line, "HTTP/1.1 500 %s%s\r\n", want, "tail beyond the limit");
  lk_resp r;
  memset(&r, 0, sizeof r);
  feed(&r, "HTTP/1.1 103 Early Hints\r\n");
  feed(&r, "\r\n");
  feed(&r, line);
  feed(&r, "\r\n");
  assert_true(lk__resp_view(&r));
  assert_int_equal(r.view.status, 500);
  assert_string_equal(r.view.reason, want);
  /* a reset (next attempt) forgets both */
  lk__resp_reset(&r);
  assert_int_equal(r.version, 0);
  assert_string_equal(r.reason, "");
  lk__resp_free(&r);
}

/* --- JSON -------------------------------------------------------------------------------------- */
static void test_timeline_json(void **s) {
  (void)s;
  lk_http_result *r = lk__result_new();
  assert_non_null(r);
  lk_http_attempt_info *a = lk__result_add_attempt(r);
  a->number = 1;
  a->start = 0;
  a->duration = LK_MS(12) + 345678;
  a->phase = LK_PHASE_WAIT;
  a->failure = a->classified = LK_F_READ_TIMEOUT;
  a->timeout = LK_MS(800);
  a->connect_timeout = LK_MS(500);
  a->retry_after = -1;
  a->request_sent = true;
  a->decision.retry = true;
  a->decision.delay = LK_MS(250);
  a->decision.reason = LK_REASON_RETRY;
  snprintf(a->reason, sizeof a->reason, "retry \"READ_TIMEOUT\"\n");
  r->err = LK_EATTEMPTS;
  snprintf(r->stop, sizeof r->stop, "attempts exhausted");
  char *js = NULL;
  size_t len = 0;
  assert_int_equal(lk_http_result_timeline_json(r, &js, &len), LK_OK);
  assert_int_equal(strlen(js), len);
  assert_non_null(strstr(js, "\"attempt\":1,\"start_ms\":0.000,\"duration_ms\":12.345,"));
  assert_non_null(strstr(js, "\"phase\":\"WAIT\",\"failure\":\"READ_TIMEOUT\""));
  assert_non_null(strstr(js, "\"retry_after_ms\":null"));
  assert_non_null(strstr(js, "\"decision\":\"RETRY\",\"retry\":true,\"delay_ms\":250.000"));
  assert_non_null(strstr(js, "\"reason\":\"retry \\\"READ_TIMEOUT\\\"\\u000a\""));
  free(js);
  assert_int_equal(lk_http_result_json(r, &js, NULL), LK_OK);
  assert_non_null(strstr(js, "{\"ok\":false,\"error\":\"EATTEMPTS\""));
  assert_non_null(strstr(js, "\"idempotency_key\":null"));
  assert_non_null(strstr(js, "\"timeline\":[{"));
  free(js);
  assert_int_equal(lk_http_result_json(NULL, &js, NULL), LK_EINVAL);
  lk_http_result_free(r);
}

static void test_names(void **s) {
  (void)s;
  assert_string_equal(lk_http_phase_name(LK_PHASE_QUEUED), "QUEUED");
  assert_string_equal(lk_http_phase_name(LK_PHASE_DONE), "DONE");
  assert_string_equal(lk_http_phase_name((lk_http_phase)99), "UNKNOWN");
}

/* lk_http_request_new accepts a URL exactly when libcurl's parser does (with an http or https
 * scheme), whether it was judged by the fast path or by libcurl. */
static bool curl_accepts(const char *url) {
  CURLU *u = curl_url();
  char *scheme = NULL;
  bool ok = curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
            curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
            (strcmp(scheme, "http") == 0 || strcmp(scheme, "https") == 0);
  curl_free(scheme);
  curl_url_cleanup(u);
  return ok;
}

static void test_url_fast_path(void **s) {
  (void)s;
  const char *urls[] = {
      "http://127.0.0.1:8080/books/1?x=y", "HTTP://Example.com/a%20b", "https://h/", "http://h",
      "http://h:1", "http://h:65535/", "http://h:65536/", "http://h:0/", "http://h:/x",
      "http://h:99999999/", "http://-h/", "http://.h/", "http://h_x/", "http://h/a b",
      "http://h/a%2", "http://h/a%zz", "http://h/#frag", "http://h?q=1", "http://u:p@h/",
      "http://[::1]:80/", "http://h/\x01", "http://h/é", "http://h/[x]", "http://h/a|b",
      "http://h/~user/!$&'()*+,;=:@", "http://999.999.999.999/", "http://1.2.3/",
      "http://0x7f.1/", "http://h-/", "http://a..b/", "ftp://h/", "http:/h/", "http:///x", "http://h./x",
      "http://" "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/",
  };
  for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++) {
    lk_http_request *r = lk_http_request_new("GET", urls[i]);
    print_message("%s: linkd %d, libcurl %d\n", urls[i], r != NULL, curl_accepts(urls[i]));
    assert_int_equal(r != NULL, curl_accepts(urls[i]));
    lk_http_request_free(r);
  }
}

/* --- resolve and connect-to entries ------------------------------------------------------------
 */
static void test_net_entries(void **s) {
  (void)s;
  static const char *const resolve_ok[] = {"books.test:80:127.0.0.1", "*:443:10.0.0.1",
                                           "a-b_c.d:65535:::1,[::1],127.0.0.2"};
  static const char *const resolve_bad[] = {"",
                                            "books.test:80",
                                            "books.test:80:",
                                            "books.test:0:127.0.0.1",
                                            "books.test:65536:1.2.3.4",
                                            "books.test:x:1.2.3.4",
                                            "books.test:80:localhost",
                                            "books.test:80:1.2.3.4,",
                                            "+books.test:80:1.2.3.4",
                                            "-books.test:80",
                                            "bo oks:80:1.2.3.4",
                                            ":80:1.2.3.4"};
  static const char *const connect_ok[] = {"books.test:80:127.0.0.1:8080", "::127.0.0.1:8080",
                                           "books.test:80::", "[::1]:80:[::1]:81", "a:443:b:"};
  static const char *const connect_bad[] = {"",
                                            "books.test:80:127.0.0.1",
                                            "books.test:80:127.0.0.1:8080:9",
                                            "books.test:99999::",
                                            "b c::x:1",
                                            "[::1:80::",
                                            "books.test:80:host:0",
                                            "books.test"};
  const char *why;
  for (size_t i = 0; i < sizeof resolve_ok / sizeof *resolve_ok; i++)
    assert_int_equal(lk_http_resolve_check(resolve_ok[i], NULL), LK_OK);
  for (size_t i = 0; i < sizeof resolve_bad / sizeof *resolve_bad; i++) {
    why = NULL;
    if (lk_http_resolve_check(resolve_bad[i], &why) != LK_EINVAL)
      fail_msg("resolve '%s' taken", resolve_bad[i]);
    assert_non_null(why);
  }
  for (size_t i = 0; i < sizeof connect_ok / sizeof *connect_ok; i++)
    if (lk_http_connect_to_check(connect_ok[i], &why) != LK_OK)
      fail_msg("connect-to '%s' refused: %s", connect_ok[i], why);
  for (size_t i = 0; i < sizeof connect_bad / sizeof *connect_bad; i++) {
    why = NULL;
    if (lk_http_connect_to_check(connect_bad[i], &why) != LK_EINVAL)
      fail_msg("connect-to '%s' taken", connect_bad[i]);
    assert_non_null(why);
  }
  assert_int_equal(lk_http_resolve_check(NULL, NULL), LK_EINVAL);
  /* the policy checks them, and a count without its array */
  lk_http_policy p;
  lk_http_policy_init_default(&p);
  assert_false(p.compressed);
  assert_null(p.resolve);
  assert_null(p.connect_to);
  const char *good[] = {"books.test:80:127.0.0.1"}, *bad[] = {"books.test:80"};
  p.resolve = good;
  p.nresolve = 1;
  assert_int_equal(lk_http_policy_validate(&p, &why), LK_OK);
  p.resolve = bad;
  assert_int_equal(lk_http_policy_validate(&p, &why), LK_ECONFIG);
  assert_non_null(strstr(why, "resolve"));
  p.resolve = NULL;
  assert_int_equal(lk_http_policy_validate(&p, &why), LK_ECONFIG);
  p.nresolve = 0;
  p.connect_to = bad;
  p.nconnect_to = 1;
  assert_int_equal(lk_http_policy_validate(&p, &why), LK_ECONFIG);
  assert_non_null(strstr(why, "connect-to"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_classify_connect_phase),
      cmocka_unit_test(test_classify_timeout_by_phase),
      cmocka_unit_test(test_classify_resets),
      cmocka_unit_test(test_classify_status_and_terminal),
      cmocka_unit_test(test_http_date_forms),
      cmocka_unit_test(test_http_date_rfc850_years),
      cmocka_unit_test(test_retry_after),
      cmocka_unit_test(test_uuid4),
      cmocka_unit_test(test_idem_keys),
      cmocka_unit_test(test_request_validation),
      cmocka_unit_test(test_policy_validation),
      cmocka_unit_test(test_response_headers),
      cmocka_unit_test(test_response_status_line),
      cmocka_unit_test(test_timeline_json),
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_url_fast_path),
      cmocka_unit_test(test_net_entries),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
