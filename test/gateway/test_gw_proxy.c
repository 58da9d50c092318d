/* SPDX-License-Identifier: MIT */
/* `linkd serve` in front of faultd processes: proxying, retries on another endpoint, ejection and
 * return, the deadline in and out, Linkd-Retried, Idempotency-Key injection, bodies too large to
 * replay, pipelining, chunked bodies, Expect: 100-continue, the admin listener. Every test runs a
 * real gateway process and real upstream servers on 127.0.0.1. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "faultd_client.h"
#include "gwtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static faultd_proc F1, F2;
static gw_proc G;

static int teardown(void **state) {
  (void)state;
  int rc = gw_stop(&G, 5000);
  faultd_stop(&F1);
  faultd_stop(&F2);
  return rc == 0 ? 0 : -1;
}

static void start_faultd(faultd_proc *f, const char *mode, const char *const *args) {
  assert_int_equal(faultd_start(f, mode, args), 0);
}

static void start_gw_attempts(const char *endpoints, const char *route_extra,
                              const char *listen_extra, int attempts);

/* A configuration with one cluster of the given endpoints and one route over it; `route_extra`
 * adds route keys, `listen_extra` [listen] keys. */
static void start_gw(const char *endpoints, const char *route_extra, const char *listen_extra) {
  start_gw_attempts(endpoints, route_extra, listen_extra, 3);
}

static int threads = 2;

static void start_gw_attempts(const char *endpoints, const char *route_extra,
                              const char *listen_extra, int attempts) {
  char cfg[4096];
  snprintf(cfg, sizeof cfg,
           "[listen]\naddress = 127.0.0.1:0\n%s\n"
           "[admin]\naddress = 127.0.0.1:0\n\n"
           "[log]\naccess = %%ACCESS%%\nlevel = debug\n\n"
           "[cluster up]\n%s\n"
           "[route all]\ncluster = up\nprefix = /\nmax-attempts = %d\nbase = 5ms\n"
           "max-delay = 20ms\njitter = none\nattempt-timeout = 500ms\ndeadline = 2s\n%s\n",
           listen_extra ? listen_extra : "", endpoints, attempts, route_extra ? route_extra : "");
  gw_start_threads(&G, cfg, threads);
}

static void endpoint_line(char *buf, size_t cap, const faultd_proc *f) {
  snprintf(buf, cap, "endpoint = 127.0.0.1:%d\n", faultd_port(f));
}

/* With one loop thread (a one-CPU machine's default: no SO_REUSEPORT group) as with two. */
static void test_proxies_and_logs(void **state) {
  threads = *(int *)*state;
  const char *args[] = {"--body", "hello", NULL};
  start_faultd(&F1, "ok", args);
  char ep[128];
  endpoint_line(ep, sizeof ep, &F1);
  start_gw(ep, NULL, NULL);
  gw_resp r;
  gw_request(G.port, "GET", "/books/1?x=y", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.body, "hello");
  char v[128];
  assert_non_null(gw_header(&r, "Linkd-Config-Generation", v, sizeof v));
  assert_string_equal(v, "1");
  assert_null(gw_header(&r, "Linkd-Retried", v, sizeof v)); /* a success says nothing */
  gw_resp_free(&r);
  faultd_req q[4];
  assert_int_equal(faultd_wait_requests(&F1, 1, 2000), 1);
  assert_int_equal(faultd_requests(&F1, q, 4), 1);
  assert_string_equal(q[0].path, "/books/1?x=y");
  assert_true(q[0].has_deadline); /* the deadline goes out */
  assert_true(atoi(q[0].deadline) <= 500);
  /* one JSON line per request with route, attempts, endpoints, final kind, deadline left */
  int64_t end = gw_now_ms() + 2000;
  while (gw_access_lines(&G) < 1 && gw_now_ms() < end)
    gw_sleep_ms(10);
  const char *log = gw_access(&G);
  assert_non_null(strstr(log, "\"route\":\"all\""));
  assert_non_null(strstr(log, "\"attempts\":1"));
  char want[96];
  snprintf(want, sizeof want, "\"endpoints\":[\"127.0.0.1:%d\"]", faultd_port(&F1));
  assert_non_null(strstr(log, want));
  assert_non_null(strstr(log, "\"final\":\"NONE\""));
  assert_non_null(strstr(log, "\"deadline_left_ms\":"));
  /* HEAD: the length GET would have, no body; the connection stays usable */
  int fd = gw_connect(G.port);
  gw_send_str(fd, "HEAD /books/1 HTTP/1.1\r\nHost: a\r\n\r\n");
  assert_int_equal(gw_read_head(fd, &r, 3000), 0);
  assert_int_equal(r.status, 200);
  assert_string_equal(gw_header(&r, "Content-Length", v, sizeof v), "5");
  gw_resp_free(&r);
  gw_send_str(fd, "GET /books/2 HTTP/1.1\r\nHost: a\r\n\r\n");
  assert_int_equal(gw_read(fd, &r, 3000, NULL), 0);
  assert_string_equal(r.body, "hello");
  gw_resp_free(&r);
  close(fd);
  /* unknown route: a host-specific route only, other hosts get 404 */
}

/* Cluster of a 503 server and an OK server: a call that lands on the 503 first retries on the
 * other one, never on the same one; every call succeeds. */
static void test_retry_goes_to_another_endpoint(void **state) {
  (void)state;
  const char *bad[] = {"--status", "503", NULL};
  start_faultd(&F1, "status", bad);
  start_faultd(&F2, "ok", NULL);
  char ep[256], e2[128];
  endpoint_line(ep, sizeof ep, &F1);
  endpoint_line(e2, sizeof e2, &F2);
  strcat(ep, e2);
  /* no ejection: every call picks among both */
  start_gw(ep, "", NULL);
  for (int i = 0; i < 24; i++) {
    gw_resp r;
    gw_request(G.port, "GET", "/x", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    gw_resp_free(&r);
  }
  faultd_req q[64];
  int nb = faultd_requests(&F1, q, 64);
  assert_true(nb >= 1); /* 2^-24 odds of never landing first on the bad one */
  for (int i = 0; i < nb; i++)
    assert_string_equal(q[i].attempt, "1"); /* a retry never came back to it */
  int ng = faultd_requests(&F2, q, 64);
  assert_int_equal(ng, 24);
  int second = 0;
  for (int i = 0; i < ng; i++)
    second += strcmp(q[i].attempt, "2") == 0;
  assert_int_equal(second, nb); /* each call that met the 503 retried here */
}

/* An upstream that closes every connection after its answer while advertising keep-alive: the
 * gateway keeps a pooled connection's watcher registered between transfers, and libcurl closes
 * the dead connection when it would reuse it. The number is reused at once, by the next upstream
 * socket or a new client connection; a stale watcher would take that socket's events (a hang)
 * or make the loop abort on its registration. Every request is answered. */
static void one_round_of_closes(faultd_proc *f);

static void test_upstream_closes_pooled_connections(void **state) {
  (void)state;
  /* F1 closes after its answer while advertising keep-alive (libcurl finds the connection dead
   * when it would reuse it); F2 is asked for Connection: close (libcurl closes the connection as
   * its transfer ends, straight after its CURL_POLL_REMOVE, with no readiness in between) */
  const char *args[] = {"--close-after", "1", "--close-when", "after_response", NULL};
  start_faultd(&F1, "keepalive_close", args);
  start_faultd(&F2, "ok", NULL);
  char ep[128];
  endpoint_line(ep, sizeof ep, &F1);
  char cfg_extra[512];
  threads = 1; /* one loop: the numbers it frees are the ones it gets next */
  for (int round = 0; round < 2; round++) {
    if (round == 1) {
      assert_int_equal(gw_stop(&G, 5000), 0);
      endpoint_line(ep, sizeof ep, &F2);
    }
    snprintf(cfg_extra, sizeof cfg_extra, "%s", round == 1 ? "header = Connection: close" : "");
    start_gw(ep, cfg_extra, NULL);
    one_round_of_closes(round == 0 ? &F1 : &F2);
  }
  threads = 2;
}

static void one_round_of_closes(faultd_proc *f) {
  int kept = gw_connect(G.port);
  for (int i = 0; i < 40; i++) {
    gw_resp r;
    gw_request(G.port, "GET", "/fresh", NULL, NULL, &r); /* a new client connection */
    assert_int_equal(r.status, 200);
    gw_resp_free(&r);
    /* and one that stays, as the upstream side's numbers come and go */
    gw_send_str(kept, "GET /kept HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_int_equal(gw_read(kept, &r, 5000, NULL), 0);
    assert_int_equal(r.status, 200);
    gw_resp_free(&r);
  }
  close(kept);
  /* every answer came from upstream; a request written on a connection the server was closing
   * is sent again by libcurl on a new one (it had no answer), so the server may see a few more */
  faultd_req q[128];
  int seen = faultd_requests(f, q, 128);
  printf("# upstream saw %d requests for 80\n", seen);
  assert_true(seen >= 80);
}

/* eject-5xx = 2: the 503 server is ejected after two 5xx and gets nothing for the ejection time,
 * then it is picked again. */
static void test_ejection_and_return(void **state) {
  (void)state;
  const char *bad[] = {"--status", "503", NULL};
  start_faultd(&F1, "status", bad);
  start_faultd(&F2, "ok", NULL);
  char ep[512], e2[128];
  endpoint_line(ep, sizeof ep, &F1);
  endpoint_line(e2, sizeof e2, &F2);
  strcat(ep, e2);
  strcat(ep, "eject-5xx = 2\neject-base-time = 1s\neject-max-percent = 50\n");
  start_gw(ep, NULL, NULL);
  int64_t ejected_after = 0; /* the ejection happened during the last call of this loop */
  int n = 0;
  while (faultd_request_count(&F1) < 2 && n < 200) {
    gw_resp r;
    ejected_after = gw_now_ms();
    gw_request(G.port, "GET", "/x", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    gw_resp_free(&r);
    n++;
  }
  int64_t ejected_before = gw_now_ms();
  assert_int_equal(faultd_request_count(&F1), 2);
  /* ejected: 20 more calls, none reaches it (well within the 1 s) */
  for (int i = 0; i < 20; i++) {
    gw_resp r;
    gw_request(G.port, "GET", "/x", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    gw_resp_free(&r);
  }
  assert_true(gw_now_ms() - ejected_after < 1000);
  assert_int_equal(faultd_request_count(&F1), 2);
  assert_non_null(strstr(gw_stderr(&G), "ejected"));
  gw_sleep_ms((int)(1050 - (gw_now_ms() - ejected_before)));
  /* back: it is picked again */
  for (int i = 0; i < 60 && faultd_request_count(&F1) == 2; i++) {
    gw_resp r;
    gw_request(G.port, "GET", "/x", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    gw_resp_free(&r);
  }
  assert_true(faultd_request_count(&F1) > 2);
}

static void test_deadline_in_and_out(void **state) {
  (void)state;
  const char *slow[] = {"--delay-ms", "1000", NULL};
  start_faultd(&F1, "slow", slow);
  char ep[128];
  endpoint_line(ep, sizeof ep, &F1);
  /* the cap no shorter than the route's 2 s deadline; 6 attempts of 500 ms would take 3 s */
  start_gw_attempts(ep, "deadline-cap = 2s\n", NULL, 6);
  /* expired on arrival: 504 at once, nothing sent upstream */
  gw_resp r;
  int64_t t = gw_now_ms();
  gw_request(G.port, "GET", "/x", "Linkd-Deadline: 0\r\n", NULL, &r);
  assert_int_equal(r.status, 504);
  assert_true(gw_now_ms() - t < 100);
  gw_resp_free(&r);
  gw_request(G.port, "GET", "/x", "grpc-timeout: 0m\r\n", NULL, &r);
  assert_int_equal(r.status, 504);
  gw_resp_free(&r);
  assert_int_equal(faultd_request_count(&F1), 0);
  /* the caller's 5 s is capped at 2 s, which ends the call before its attempts do; the upstream
   * is told each attempt's end */
  t = gw_now_ms();
  gw_request(G.port, "GET", "/x", "Linkd-Deadline: 5000\r\n", NULL, &r);
  int64_t took = gw_now_ms() - t;
  assert_int_equal(r.status, 504);
  assert_true(took >= 1950 && took < 2700);
  char v[32];
  assert_non_null(gw_header(&r, "Linkd-Retried", v, sizeof v));
  gw_resp_free(&r);
  faultd_req q[4];
  assert_true(faultd_requests(&F1, q, 4) >= 1);
  assert_true(q[0].has_deadline);
  assert_true(atoi(q[0].deadline) <= 500);
  /* a caller's 150 ms under the cap wins */
  t = gw_now_ms();
  gw_request(G.port, "GET", "/x", "Linkd-Deadline: 150\r\n", NULL, &r);
  took = gw_now_ms() - t;
  assert_int_equal(r.status, 504);
  assert_true(took >= 130 && took < 800);
  gw_resp_free(&r);
  /* malformed: 400 */
  gw_request(G.port, "GET", "/x", "Linkd-Deadline: soon\r\n", NULL, &r);
  assert_int_equal(r.status, 400);
  gw_resp_free(&r);
}

/* An upstream that promises 100 bytes, sends 4 and closes. */
static void serve_cut_short(int c) {
  char buf[4096];
  if (read(c, buf, sizeof buf) <= 0)
    return;
  static const char cut[] = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123";
  if (write(c, cut, sizeof cut - 1) < 0)
    return;
}

/* A body cut short is no answer: its status is not forwarded with half a body (a 200 would pass
 * for the whole resource); the gateway answers 502/504 with why. */
static void test_incomplete_body_not_forwarded(void **state) {
  (void)state;
  int port;
  pid_t child = gw_fork_server(serve_cut_short, 4, 10, &port);
  char ep[128];
  snprintf(ep, sizeof ep, "endpoint = 127.0.0.1:%d\n", port);
  start_gw_attempts(ep, NULL, NULL, 2);
  gw_resp r;
  gw_request(G.port, "GET", "/x", NULL, NULL, &r);
  gw_fork_server_stop(child);
  assert_true(r.status == 502 || r.status == 504);
  char want[8];
  snprintf(want, sizeof want, "%d ", r.status);
  assert_true(strncmp(r.body, want, 4) == 0);
  char v[32];
  assert_non_null(gw_header(&r, "Linkd-Retried", v, sizeof v));
  assert_string_equal(v, "2");
  gw_resp_free(&r);
}

/* What the gateway refuses itself says why in its one-line body; a well-formed deadline too
 * large for the clock is the longest one, capped by the route, not malformed. */
static void test_local_answers_say_why(void **state) {
  (void)state;
  start_faultd(&F1, "ok", NULL);
  char ep[128];
  endpoint_line(ep, sizeof ep, &F1);
  start_gw(ep, NULL, NULL);
  gw_resp r;
  gw_request(G.port, "GET", "/x", "Linkd-Deadline: soon\r\n", NULL, &r);
  assert_int_equal(r.status, 400);
  assert_non_null(strstr(r.body, "400 Bad Request: malformed Linkd-Deadline"));
  gw_resp_free(&r);
  gw_request(G.port, "GET", "/x", "grpc-timeout: 5x\r\n", NULL, &r);
  assert_int_equal(r.status, 400);
  assert_non_null(strstr(r.body, "malformed grpc-timeout"));
  gw_resp_free(&r);
  gw_request(G.port, "GET", "/x", "Linkd-Deadline: 900\r\nLinkd-Deadline: 100\r\n", NULL, &r);
  assert_int_equal(r.status, 400);
  assert_non_null(strstr(r.body, "Linkd-Deadline sent more than once"));
  gw_resp_free(&r);
  gw_request(G.port, "GET", "/x", "Linkd-Deadline: 0\r\n", NULL, &r);
  assert_int_equal(r.status, 504);
  assert_non_null(strstr(r.body, "504 Gateway Timeout: deadline expired on arrival"));
  gw_resp_free(&r);
  gw_request(G.port, "POST", "/x", "Idempotency-Key: a b\r\n", "{}", &r);
  assert_int_equal(r.status, 400);
  assert_non_null(strstr(r.body, "Idempotency-Key"));
  gw_resp_free(&r);
  gw_request(G.port, "CONNECT", "/x", NULL, NULL, &r);
  assert_int_equal(r.status, 501);
  assert_non_null(strstr(r.body, "CONNECT is not supported"));
  gw_resp_free(&r);
  gw_request(G.port, "GET", "/x", "grpc-timeout: 99999999H\r\n", NULL, &r);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  gw_request(G.port, "GET", "/x", "Linkd-Deadline: 999999999999999999\r\n", NULL, &r);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  faultd_req q[8];
  int n = faultd_requests(&F1, q, 8);
  assert_int_equal(n, 2); /* the refused ones never went upstream */
  assert_true(atoi(q[0].deadline) > 0 && atoi(q[0].deadline) <= 2000); /* the route's 2 s */
}

/* Linkd-Deadline is a number of milliseconds however many digits it has: one of 19 or 30
 * digits is too large for the clock and capped by the route, as 18 nines are (it was answered
 * 400), and leading zeros do not count. What is not digits is still malformed, and so is a
 * grpc-timeout of 9 digits (the gRPC spec allows 8). */
static void test_long_deadline_is_capped(void **state) {
  (void)state;
  start_faultd(&F1, "ok", NULL);
  char ep[128];
  endpoint_line(ep, sizeof ep, &F1);
  start_gw(ep, NULL, NULL);
  static const struct {
    const char *header;
    int status, upstream_max_ms; /* the deadline the upstream saw, at most; 0: not sent */
  } cases[] = {
      {"Linkd-Deadline: 9999999999999999999\r\n", 200, 2000},
      {"Linkd-Deadline: 123456789012345678901234567890\r\n", 200, 2000},
      {"Linkd-Deadline: 000000000000000000000000000150\r\n", 200, 150},
      {"Linkd-Deadline: 0000000000000000000000000\r\n", 504, 0},
      {"Linkd-Deadline: 1234567890123456789012345678x0\r\n", 400, 0},
      {"Linkd-Deadline: -12345678901234567890\r\n", 400, 0},
      {"Linkd-Deadline: +12345678901234567890\r\n", 400, 0},
      {"Linkd-Deadline: 1234567890 1234567890\r\n", 400, 0},
      {"Linkd-Deadline:\r\n", 400, 0},
      {"grpc-timeout: 99999999H\r\n", 200, 2000},
      {"grpc-timeout: 999999999H\r\n", 400, 0},
      {"grpc-timeout: 000000001S\r\n", 400, 0},
  };
  int sent = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gw_resp r;
    gw_request(G.port, "GET", "/x", cases[i].header, NULL, &r);
    if (r.status != cases[i].status)
      fail_msg("%s: %d, want %d (%s)", cases[i].header, r.status, cases[i].status, r.body);
    if (cases[i].status == 400)
      assert_non_null(strstr(r.body, "400 Bad Request: malformed "));
    gw_resp_free(&r);
    if (!cases[i].upstream_max_ms)
      continue;
    faultd_req q[32];
    assert_int_equal(faultd_requests(&F1, q, 32), ++sent);
    int ms = atoi(q[sent - 1].deadline);
    if (ms <= 0 || ms > cases[i].upstream_max_ms)
      fail_msg("%s: the upstream saw Linkd-Deadline %d", cases[i].header, ms);
  }
}

/* max-response-body: an upstream body over a route's limit is no answer, the client gets 502
 * (it cannot be set anywhere but in the HTTP layer's policy, 64 MiB for every route); a body at
 * the limit, or on a route with a larger one, goes through. */
static void test_route_response_body_limit(void **state) {
  (void)state;
  static char body[1501];
  memset(body, 'b', sizeof body - 1);
  const char *args[] = {"--body", body, NULL};
  start_faultd(&F1, "ok", args);
  char ep[128];
  endpoint_line(ep, sizeof ep, &F1);
  start_gw(ep,
           "max-response-body = 1KiB\n\n[route big]\ncluster = up\nprefix = /big\n"
           "max-response-body = 1500\n",
           NULL);
  gw_resp r;
  gw_request(G.port, "GET", "/x", NULL, NULL, &r);
  assert_int_equal(r.status, 502);
  assert_non_null(strstr(r.body, "502 Bad Gateway: response body too big"));
  assert_null(strstr(r.body, "bbbb")); /* nothing of the body */
  char v[32];
  assert_non_null(gw_header(&r, "Linkd-Retried", v, sizeof v));
  assert_string_equal(v, "1"); /* asking again would get the same body */
  gw_resp_free(&r);
  assert_int_equal(faultd_wait_requests(&F1, 1, 2000), 1);
  gw_request(G.port, "GET", "/big/x", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.body, body);
  gw_resp_free(&r);
}

/* The gateway retried 3 times: its 503 says so, so the tier above does not retry again. */
static void test_retried_header(void **state) {
  (void)state;
  const char *bad[] = {"--status", "503", NULL};
  start_faultd(&F1, "status", bad);
  char ep[128];
  endpoint_line(ep, sizeof ep, &F1);
  start_gw(ep, NULL, NULL);
  gw_resp r;
  gw_request(G.port, "GET", "/x", NULL, NULL, &r);
  assert_int_equal(r.status, 503);
  char v[32];
  assert_non_null(gw_header(&r, "Linkd-Retried", v, sizeof v));
  assert_string_equal(v, "3");
  gw_resp_free(&r);
  assert_int_equal(faultd_wait_requests(&F1, 3, 2000), 3);
}

/* idempotency = inject: a POST without a key gets one, the same on every attempt, and the
 * response says which; a caller's key is passed as is. */
static void test_key_injection(void **state) {
  (void)state;
  const char *script[] = {"--script", "503,503,200", NULL};
  start_faultd(&F1, "status", script);
  char ep[128];
  endpoint_line(ep, sizeof ep, &F1);
  start_gw(ep, "idempotency = inject\n", NULL);
  gw_resp r;
  gw_request(G.port, "POST", "/loans", NULL, "{\"book\":1}", &r);
  assert_int_equal(r.status, 200);
  char key[128];
  assert_non_null(gw_header(&r, "Linkd-Idempotency-Key-Injected", key, sizeof key));
  gw_resp_free(&r);
  faultd_req q[8];
  assert_int_equal(faultd_requests(&F1, q, 8), 3);
  for (int i = 0; i < 3; i++) {
    assert_true(q[i].has_idempotency_key);
    assert_string_equal(q[i].idempotency_key, key);
    assert_int_equal(q[i].body_bytes, 10);
  }
  gw_request(G.port, "POST", "/loans", "Idempotency-Key: mine-1\r\n", "{}", &r);
  assert_int_equal(r.status, 200);
  assert_null(gw_header(&r, "Linkd-Idempotency-Key-Injected", key, sizeof key));
  gw_resp_free(&r);
  assert_int_equal(faultd_requests(&F1, q, 8), 4);
  assert_string_equal(q[3].idempotency_key, "mine-1");
}

/* A body over body-buffer is sent once and not retried, and that is counted. */
static void test_large_body_not_retried(void **state) {
  (void)state;
  const char *script[] = {"--script", "503,200", NULL};
  start_faultd(&F1, "status", script);
  char ep[128];
  endpoint_line(ep, sizeof ep, &F1);
  start_gw(ep, NULL, "body-buffer = 1024\n");
  char *body = malloc(4097);
  memset(body, 'b', 4096);
  body[4096] = '\0';
  gw_resp r;
  gw_request(G.port, "PUT", "/big", NULL, body, &r);
  assert_int_equal(r.status, 503);
  gw_resp_free(&r);
  assert_int_equal(faultd_request_count(&F1), 1);
  /* a small one is retried */
  gw_request(G.port, "PUT", "/small", NULL, "tiny", &r);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  free(body);
  gw_request(G.admin_port, "GET", "/metrics", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  const char *m = strstr(r.body, "linkd_gw_streamed_not_retried_total{route=\"all\"");
  assert_non_null(m);
  assert_int_equal(atoi(strchr(m, '}') + 1), 1);
  gw_resp_free(&r);
  const char *log = gw_access(&G);
  assert_non_null(strstr(log, "\"streamed\":true"));
}

/* A body over body-buffer goes upstream as it arrives: the upstream connection is open while
 * the client is still sending, and every byte arrives; a client that leaves mid-body does not
 * stop the gateway. */
static void test_body_streamed_as_it_arrives(void **state) {
  (void)state;
  start_faultd(&F1, "ok", NULL);
  char ep[128];
  endpoint_line(ep, sizeof ep, &F1);
  start_gw(ep, NULL, "body-buffer = 1024\n");
  enum { LEN = 300000, PIECE = 100000 };
  char *piece = malloc(PIECE);
  memset(piece, 'p', PIECE);
  int fd = gw_connect(G.port);
  char head[128];
  snprintf(head, sizeof head, "PUT /up HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n", LEN);
  gw_send_str(fd, head);
  gw_send(fd, piece, PIECE);
  int64_t end = gw_now_ms() + 2000;
  while (faultd_connections(&F1) < 1 && gw_now_ms() < end)
    gw_sleep_ms(5);
  assert_int_equal(faultd_connections(&F1), 1); /* upstream while 2/3 of the body are unsent */
  gw_sleep_ms(50);
  gw_send(fd, piece, PIECE);
  gw_sleep_ms(50);
  gw_send(fd, piece, PIECE);
  gw_resp r;
  assert_int_equal(gw_read(fd, &r, 3000, NULL), 0);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  close(fd);
  faultd_req q[4];
  assert_int_equal(faultd_requests(&F1, q, 4), 1);
  assert_int_equal(q[0].body_bytes, LEN);
  assert_true(q[0].complete);
  /* a client that leaves after a third of its body */
  fd = gw_connect(G.port);
  gw_send_str(fd, head);
  gw_send(fd, piece, PIECE);
  end = gw_now_ms() + 2000;
  while (faultd_connections(&F1) < 2 && gw_now_ms() < end)
    gw_sleep_ms(5);
  assert_int_equal(faultd_connections(&F1), 2);
  close(fd);
  free(piece);
  /* the attempt is abandoned: upstream logs a request whose body never completed */
  assert_int_equal(faultd_wait_requests(&F1, 2, 3000), 2);
  assert_int_equal(faultd_requests(&F1, q, 4), 2);
  assert_string_equal(q[1].path, "/up");
  assert_false(q[1].complete);
  assert_true(q[1].body_bytes < LEN);
  gw_request(G.port, "GET", "/after", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
}

/* Two requests in one write: both answered, in order, the second only after the first. */
static void test_pipelining_in_order(void **state) {
  (void)state;
  const char *script[] = {"--script", "slow:150,ok", "--body", "x", NULL};
  start_faultd(&F1, "ok", script);
  char ep[128];
  endpoint_line(ep, sizeof ep, &F1);
  start_gw(ep, NULL, NULL);
  int fd = gw_connect(G.port);
  gw_send_str(fd, "GET /first HTTP/1.1\r\nHost: a\r\n\r\nGET /second HTTP/1.1\r\nHost: a\r\n\r\n");
  gw_resp a, b;
  assert_int_equal(gw_read(fd, &a, 3000, NULL), 0);
  assert_int_equal(gw_read(fd, &b, 3000, NULL), 0);
  assert_int_equal(a.status, 200);
  assert_int_equal(b.status, 200);
  gw_resp_free(&a);
  gw_resp_free(&b);
  close(fd);
  faultd_req q[4];
  assert_int_equal(faultd_requests(&F1, q, 4), 2);
  assert_string_equal(q[0].path, "/first");
  assert_string_equal(q[1].path, "/second");
  assert_true(q[1].t_ms - q[0].t_ms >= 140); /* one at a time */
}

static void test_chunked_and_continue(void **state) {
  (void)state;
  start_faultd(&F1, "ok", NULL);
  char ep[128];
  endpoint_line(ep, sizeof ep, &F1);
  start_gw(ep, NULL, NULL);
  int fd = gw_connect(G.port);
  gw_send_str(fd, "POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                  "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  gw_resp r;
  assert_int_equal(gw_read(fd, &r, 3000, NULL), 0);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  /* Expect: 100-continue on the same connection: 100 first, then the body, then 200 */
  gw_send_str(fd, "PUT /e HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n");
  assert_int_equal(gw_read(fd, &r, 3000, NULL), 0);
  assert_int_equal(r.status, 100);
  gw_resp_free(&r);
  gw_send_str(fd, "abc");
  assert_int_equal(gw_read(fd, &r, 3000, NULL), 0);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  close(fd);
  faultd_req q[4];
  assert_int_equal(faultd_requests(&F1, q, 4), 2);
  assert_int_equal(q[0].body_bytes, 11);
  assert_true(q[0].complete);
  assert_int_equal(q[1].body_bytes, 3);
}

static void test_admin(void **state) {
  (void)state;
  start_faultd(&F1, "ok", NULL);
  char ep[128];
  endpoint_line(ep, sizeof ep, &F1);
  start_gw(ep, NULL, NULL);
  gw_resp r;
  gw_request(G.port, "GET", "/x", NULL, NULL, &r);
  gw_resp_free(&r);
  gw_request(G.admin_port, "GET", "/healthz", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  gw_request(G.admin_port, "GET", "/ready", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  gw_request(G.admin_port, "GET", "/config", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.body, "generation 1"));
  assert_non_null(strstr(r.body, "[route all]"));
  gw_resp_free(&r);
  gw_request(G.admin_port, "GET", "/nope", NULL, NULL, &r);
  assert_int_equal(r.status, 404);
  gw_resp_free(&r);
  /* HEAD is GET without the body; another method on a known resource is 405 with Allow */
  int hfd = gw_connect(G.admin_port);
  gw_send_str(hfd, "HEAD /metrics HTTP/1.1\r\nHost: a\r\n\r\n");
  assert_int_equal(gw_read_head(hfd, &r, 3000), 0);
  assert_int_equal(r.status, 200);
  char len[32];
  assert_non_null(gw_header(&r, "Content-Length", len, sizeof len));
  assert_true(atol(len) > 100);
  gw_resp_free(&r);
  close(hfd);
  gw_request(G.admin_port, "DELETE", "/config", NULL, NULL, &r);
  assert_int_equal(r.status, 405);
  char allow[64];
  assert_non_null(gw_header(&r, "Allow", allow, sizeof allow));
  assert_string_equal(allow, "GET, HEAD, POST");
  gw_resp_free(&r);
  gw_request(G.admin_port, "POST", "/metrics", NULL, NULL, &r);
  assert_int_equal(r.status, 405);
  gw_resp_free(&r);
  /* the absolute form routes by its authority */
  int fd = gw_connect(G.port);
  gw_send_str(fd, "GET http://gw.test/abs HTTP/1.1\r\nHost: gw.test\r\n\r\n");
  assert_int_equal(gw_read(fd, &r, 3000, NULL), 0);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  close(fd);
  faultd_req q[4];
  assert_int_equal(faultd_requests(&F1, q, 4), 2);
  assert_string_equal(q[1].path, "/abs");
  /* a request refused before routing is counted too */
  fd = gw_connect(G.port);
  gw_send_str(fd, "BAD\r\n\r\n");
  assert_int_equal(gw_read(fd, &r, 3000, NULL), 0);
  assert_int_equal(r.status, 400);
  gw_resp_free(&r);
  close(fd);
  gw_request(G.admin_port, "GET", "/metrics", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.body, "linkd_gw_requests_total"));
  assert_non_null(strstr(r.body, "linkd_gw_unrouted_total{code=\"4xx\"} 1"));
  /* promtool accepts the exposition */
  char path[400];
  snprintf(path, sizeof path, "%s/metrics.txt", G.dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fwrite(r.body, 1, r.body_len, f);
  fclose(f);
  gw_resp_free(&r);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "promtool check metrics < %s", path);
  int rc = system(cmd);
  assert_int_equal(rc, 0);
  unlink(path);
}

/* Active health checks: an endpoint whose /healthz fails goes out of the rotation; with one
 * attempt per request every request then succeeds. */
static void test_health_checks(void **state) {
  (void)state;
  const char *bad[] = {"--status", "503", NULL};
  start_faultd(&F1, "status", bad);
  start_faultd(&F2, "ok", NULL);
  char ep[512], e2[128];
  endpoint_line(ep, sizeof ep, &F1);
  endpoint_line(e2, sizeof e2, &F2);
  strcat(ep, e2);
  /* a probe timeout long enough that the healthy endpoint's probes never miss it, even under
   * TSan on a loaded machine (50 ms once did: F2 went unhealthy first) */
  strcat(ep, "eject-5xx = 0\nhealth-path = /healthz\nhealth-interval = 300ms\n"
             "health-timeout = 250ms\nhealth-unhealthy = 2\nhealth-healthy = 2\n");
  start_gw_attempts(ep, NULL, NULL, 1);
  char want[96];
  snprintf(want, sizeof want, "endpoint 127.0.0.1:%d unhealthy", faultd_port(&F1));
  int64_t end = gw_now_ms() + 5000;
  while (!strstr(gw_stderr(&G), want) && gw_now_ms() < end)
    gw_sleep_ms(20);
  assert_non_null(strstr(gw_stderr(&G), want));
  char other[96];
  snprintf(other, sizeof other, "endpoint 127.0.0.1:%d unhealthy", faultd_port(&F2));
  assert_null(strstr(gw_stderr(&G), other));
  int before = faultd_request_count(&F1);
  for (int i = 0; i < 20; i++) {
    gw_resp r;
    gw_request(G.port, "GET", "/x", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    gw_resp_free(&r);
  }
  /* the probes still reach it, the requests do not */
  faultd_req q[256];
  int n = faultd_requests(&F1, q, 256);
  for (int i = before; i < n; i++)
    assert_string_equal(q[i].path, "/healthz");
}

/* On an idle gateway a probe starts when it is sent: the health timer wakes the loop, and the
 * probe had waited for the next wake-up (the next timer, an interval later), by which time its
 * health-timeout had passed, so a healthy endpoint's probes failed without a connection. */
static void test_health_checks_when_idle(void **state) {
  (void)state;
  start_faultd(&F1, "ok", NULL);
  char ep[512];
  endpoint_line(ep, sizeof ep, &F1);
  strcat(ep, "eject-5xx = 0\nhealth-path = /healthz\nhealth-interval = 200ms\n"
             "health-timeout = 150ms\nhealth-unhealthy = 2\nhealth-healthy = 1\n");
  start_gw_attempts(ep, NULL, NULL, 1);
  gw_sleep_ms(1500); /* no request at all meanwhile */
  char bad[96];
  snprintf(bad, sizeof bad, "endpoint 127.0.0.1:%d unhealthy", faultd_port(&F1));
  if (strstr(gw_stderr(&G), bad))
    fail_msg("an idle gateway's probes of a healthy endpoint failed:\n%s", gw_stderr(&G));
  int n = faultd_request_count(&F1);
  if (n < 4)
    fail_msg("%d probes reached the endpoint in 1.5 s at a 200 ms interval", n);
}

/* The command line: --check (or -t) prints the configuration with its defaults; a bad file
 * exits 2 with its line; usage errors exit 64. */
static void test_command_line(void **state) {
  (void)state;
  gw_write_config_exact(&G, "[listen]\naddress = 127.0.0.1:0\n[cluster c]\n"
                            "endpoint = 127.0.0.1:9\n[route r]\ncluster = c\n");
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s serve -c %s --check > %s/out 2>&1", LINKD_PATH, G.cfg_path,
           G.dir);
  int rc = system(cmd);
  assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
  char path[400], buf[8192];
  snprintf(path, sizeof path, "%s/out", G.dir);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  assert_non_null(strstr(buf, "header-timeout = "));
  assert_non_null(strstr(buf, "upstream-client = native\n")); /* the default */
  assert_non_null(strstr(buf, "generation-header = on\n"));
  assert_non_null(strstr(buf, "[route r]"));
  /* -t is --check, as nginx -t: the same output, the same exit status */
  char cmd_t[1024], out_t[8192];
  snprintf(cmd_t, sizeof cmd_t, "%s serve -t -c %s > %s/out 2>&1", LINKD_PATH, G.cfg_path, G.dir);
  rc = system(cmd_t);
  assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
  f = fopen(path, "r");
  assert_non_null(f);
  size_t n_t = fread(out_t, 1, sizeof out_t - 1, f);
  out_t[n_t] = '\0';
  fclose(f);
  assert_string_equal(out_t, buf);
  /* -c DIR: a configuration error (2) that says why */
  snprintf(cmd_t, sizeof cmd_t, "%s serve -c %s --check > %s/out 2>&1", LINKD_PATH, G.dir, G.dir);
  rc = system(cmd_t);
  assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
  f = fopen(path, "r");
  n_t = fread(out_t, 1, sizeof out_t - 1, f);
  out_t[n_t] = '\0';
  fclose(f);
  assert_non_null(strstr(out_t, ": cannot read: Is a directory"));
  gw_write_config_exact(&G, "[listen]\naddress = 127.0.0.1:0\n[route r]\ncluster = nope\n");
  rc = system(cmd);
  assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
  f = fopen(path, "r");
  n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  assert_non_null(strstr(buf, "gw.ini:4: cluster:"));
  snprintf(cmd, sizeof cmd, "%s serve > /dev/null 2>&1", LINKD_PATH);
  rc = system(cmd);
  assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 64);
  const char *bad[] = {"--bogus", "--threads 0", "--threads 65", "--threads 2x", "--threads"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(cmd, sizeof cmd, "%s serve -c %s %s > /dev/null 2>&1", LINKD_PATH, G.cfg_path,
             bad[i]);
    rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 64);
  }
  unlink(path);
  unlink(G.cfg_path);
  rmdir(G.dir);
  memset(&G, 0, sizeof G);
}

int main(void) {
  static int one = 1, two = 2;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_prestate_setup_teardown(test_proxies_and_logs, NULL, teardown, &one),
      cmocka_unit_test_prestate_setup_teardown(test_proxies_and_logs, NULL, teardown, &two),
      cmocka_unit_test_teardown(test_retry_goes_to_another_endpoint, teardown),
      cmocka_unit_test_teardown(test_upstream_closes_pooled_connections, teardown),
      cmocka_unit_test_teardown(test_ejection_and_return, teardown),
      cmocka_unit_test_teardown(test_deadline_in_and_out, teardown),
      cmocka_unit_test_teardown(test_incomplete_body_not_forwarded, teardown),
      cmocka_unit_test_teardown(test_local_answers_say_why, teardown),
      cmocka_unit_test_teardown(test_long_deadline_is_capped, teardown),
      cmocka_unit_test_teardown(test_route_response_body_limit, teardown),
      cmocka_unit_test_teardown(test_retried_header, teardown),
      cmocka_unit_test_teardown(test_key_injection, teardown),
      cmocka_unit_test_teardown(test_large_body_not_retried, teardown),
      cmocka_unit_test_teardown(test_body_streamed_as_it_arrives, teardown),
      cmocka_unit_test_teardown(test_pipelining_in_order, teardown),
      cmocka_unit_test_teardown(test_chunked_and_continue, teardown),
      cmocka_unit_test_teardown(test_admin, teardown),
      cmocka_unit_test_teardown(test_health_checks, teardown),
      cmocka_unit_test_teardown(test_health_checks_when_idle, teardown),
      cmocka_unit_test_teardown(test_command_line, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
