/* SPDX-License-Identifier: MIT */
/* Route policy keys of `linkd serve`, each observed end to end: header, retry-on, limiter,
 * bulkhead, connect-timeout, first-byte-timeout, breaker, budget, honor-retried (two gateways in
 * a chain). Upstreams: faultd, and an in-test echo server that answers every request with its
 * own head (so what the gateway sent is visible). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "faultd_client.h"
#include "gwtest.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static faultd_proc F;
static gw_proc G, G2;

/* --- the echo server: one thread, one connection at a time, keep-alive -------------------- */
static struct {
  int fd, port;
  _Atomic bool stop;
  pthread_t th;
} E;

static void *echo_main(void *arg) {
  (void)arg;
  while (!atomic_load(&E.stop)) {
    int c = accept(E.fd, NULL, NULL);
    if (c < 0)
      continue;
    char buf[16384];
    size_t len = 0;
    for (;;) {
      ssize_t n = recv(c, buf + len, sizeof buf - len - 1, 0);
      if (n <= 0)
        break;
      len += (size_t)n;
      buf[len] = '\0';
      char *end;
      while ((end = strstr(buf, "\r\n\r\n"))) {
        size_t head = (size_t)(end - buf) + 4;
        /* a body (Content-Length) is read and dropped: the answer echoes the head only */
        const char *cl = strstr(buf, "Content-Length: ");
        size_t body = cl && cl < end ? strtoul(cl + 16, NULL, 10) : 0;
        if (len < head + body)
          break; /* the rest of the body is still to come */
        char resp[20000];
        int m = snprintf(resp, sizeof resp,
                         "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: keep-alive\r\n"
                         "Keep-Alive: timeout=5\r\n\r\n",
                         head);
        memcpy(resp + m, buf, head);
        send(c, resp, (size_t)m + head, MSG_NOSIGNAL);
        memmove(buf, buf + head + body, len - head - body);
        len -= head + body;
        buf[len] = '\0';
      }
    }
    close(c);
  }
  return NULL;
}

static void echo_start(void) {
  E.fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(E.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(E.fd, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t l = sizeof a;
  getsockname(E.fd, (struct sockaddr *)&a, &l);
  E.port = ntohs(a.sin_port);
  assert_int_equal(listen(E.fd, 16), 0);
  struct timeval tv = {0, 100000}; /* accept wakes up to see `stop` */
  setsockopt(E.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  atomic_store(&E.stop, false);
  assert_int_equal(pthread_create(&E.th, NULL, echo_main, NULL), 0);
}

static void echo_stop(void) {
  if (!E.fd)
    return;
  atomic_store(&E.stop, true);
  pthread_join(E.th, NULL);
  close(E.fd);
  E.fd = 0;
}

static int teardown(void **state) {
  (void)state;
  int rc = gw_stop(&G, 5000);
  rc |= gw_stop(&G2, 5000);
  faultd_stop(&F);
  echo_stop();
  return rc == 0 ? 0 : -1;
}

/* One route `r` over one endpoint with the given keys. */
static void gw_over(gw_proc *g, int port, const char *route_keys) {
  char cfg[2048];
  snprintf(cfg, sizeof cfg,
           "[listen]\naddress = 127.0.0.1:0\n\n[admin]\naddress = 127.0.0.1:0\n\n"
           "[cluster c]\nendpoint = 127.0.0.1:%d\n\n"
           "[route r]\ncluster = c\nbase = 5ms\nmax-delay = 10ms\njitter = none\n%s\n",
           port, route_keys);
  gw_start(g, cfg);
}

static void test_headers(void **state) {
  (void)state;
  echo_start();
  gw_over(&G, E.port, "header = X-Route: yes\nheader = X-Drop:\n");
  gw_resp r;
  gw_request(G.port, "GET", "/h", "X-Drop: secret\r\nX-Keep: 1\r\nConnection: keep-alive, X-Hop\r\n"
                                  "Keep-Alive: timeout=1\r\nTE: trailers\r\nX-Hop: 1\r\n",
             NULL, &r);
  assert_int_equal(r.status, 200);
  const char *sent = r.body;
  assert_non_null(strstr(sent, "GET /h HTTP/1.1\r\n"));
  assert_non_null(strstr(sent, "Host: gw.test\r\n")); /* the caller's host */
  assert_non_null(strstr(sent, "X-Route: yes\r\n"));
  assert_non_null(strstr(sent, "X-Keep: 1\r\n"));
  assert_null(strstr(sent, "X-Drop"));
  assert_null(strstr(sent, "TE: trailers"));
  assert_null(strstr(sent, "X-Hop")); /* named by Connection: this hop only */
  assert_null(strstr(sent, "timeout=1")); /* the caller's Keep-Alive stays with its hop */
  assert_non_null(strstr(sent, "Linkd-Attempt: 1\r\n"));
  assert_non_null(strstr(sent, "Linkd-Deadline: "));
  assert_null(strstr(sent, "Accept")); /* the client sent none: none is added (curl's) */
  /* the upstream's hop-by-hop headers stay on its hop too */
  char v[64];
  assert_null(gw_header(&r, "Keep-Alive", v, sizeof v));
  gw_resp_free(&r);
}

/* A proxy forwards what its client sent: no Accept, no Content-Type the client did not send,
 * on either upstream transport (libcurl adds "Accept: * / *" and, to a body, a form type). */
static void test_headers_verbatim(void **state) {
  (void)state;
  echo_start();
  gw_over(&G, E.port, "");
  char cfg[1024];
  snprintf(cfg, sizeof cfg,
           "[listen]\naddress = 127.0.0.1:0\nupstream-client = curl\n\n"
           "[cluster c]\nendpoint = 127.0.0.1:%d\n\n[route r]\ncluster = c\n",
           E.port);
  gw_start(&G2, cfg);
  /* per case: what the client sends, what the upstream must see and must not */
  static const struct {
    const char *extra, *body, *seen[3], *unseen[3];
  } cases[] = {
      {"Idempotency-Key: k-verbatim-1\r\n",
       "a=1",
       {"POST /p HTTP/1.1\r\n", "Content-Length: 3\r\n", NULL},
       {"Content-Type", "Accept", NULL}},
      {"Accept: text/plain\r\nContent-Type: application/json\r\nIdempotency-Key: k-verbatim-2\r\n",
       "{}",
       {"Accept: text/plain\r\n", "Content-Type: application/json\r\n", NULL},
       {"*/*", "x-www-form-urlencoded", NULL}},
  };
  const gw_proc *gws[] = {&G, &G2};
  for (int i = 0; i < 2; i++)
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      gw_resp r;
      gw_request(gws[i]->port, "POST", "/p", cases[c].extra, cases[c].body, &r);
      assert_int_equal(r.status, 200);
      for (int k = 0; cases[c].seen[k]; k++)
        assert_non_null(strstr(r.body, cases[c].seen[k]));
      for (int k = 0; cases[c].unseen[k]; k++)
        assert_null(strstr(r.body, cases[c].unseen[k]));
      gw_resp_free(&r);
    }
}

static void test_retry_on_and_budget(void **state) {
  (void)state;
  const char *bad[] = {"--status", "503", NULL};
  assert_int_equal(faultd_start(&F, "status", bad), 0);
  gw_over(&G, faultd_port(&F), "max-attempts = 3\nretry-on = none\n");
  gw_over(&G2, faultd_port(&F), "max-attempts = 3\nbudget = ratio:0%:min=0\n");
  gw_resp r;
  gw_request(G.port, "GET", "/x", NULL, NULL, &r);
  assert_int_equal(r.status, 503);
  char v[16];
  assert_string_equal(gw_header(&r, "Linkd-Retried", v, sizeof v), "1");
  gw_resp_free(&r);
  assert_int_equal(faultd_wait_requests(&F, 1, 1000), 1);
  /* a budget that allows no retry */
  gw_request(G2.port, "GET", "/x", NULL, NULL, &r);
  assert_int_equal(r.status, 503);
  gw_resp_free(&r);
  gw_sleep_ms(100);
  assert_int_equal(faultd_request_count(&F), 2);
}

static void test_limiter_and_bulkhead(void **state) {
  (void)state;
  const char *slow[] = {"--delay-ms", "300", NULL};
  assert_int_equal(faultd_start(&F, "slow", slow), 0);
  gw_over(&G, faultd_port(&F), "limiter = 1/s:burst=1\ndeadline = 200ms\nmax-attempts = 1\n");
  gw_over(&G2, faultd_port(&F), "bulkhead = 1:queue=0\nmax-attempts = 1\n");
  /* limiter: the first call takes the one token; the second has none within its deadline */
  int a = gw_connect(G.port);
  gw_send_str(a, "GET /l HTTP/1.1\r\nHost: a\r\n\r\n");
  assert_int_equal(faultd_wait_requests(&F, 1, 2000), 1); /* it holds the token */
  gw_resp r;
  gw_request(G.port, "GET", "/l", NULL, NULL, &r);
  assert_int_equal(r.status, 503);
  gw_resp_free(&r);
  close(a);
  /* bulkhead: one in flight, no queue: a concurrent call is refused at once */
  int b = gw_connect(G2.port);
  gw_send_str(b, "GET /b HTTP/1.1\r\nHost: a\r\n\r\n");
  assert_int_equal(faultd_wait_requests(&F, 2, 2000), 2); /* it holds the slot */
  int64_t t = gw_now_ms();
  gw_request(G2.port, "GET", "/b", NULL, NULL, &r);
  assert_int_equal(r.status, 503);
  assert_true(gw_now_ms() - t < 200);
  gw_resp_free(&r);
  assert_int_equal(gw_read(b, &r, 2000, NULL), 0);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  close(b);
  /* both calls of the bulkhead route waited (or were refused) at the queue: observed */
  gw_request(G2.admin_port, "GET", "/metrics", NULL, NULL, &r);
  const char *q = strstr(r.body, "linkd_gw_queue_wait_seconds_count{route=\"r\"");
  assert_non_null(q);
  assert_true(atoi(strchr(q, '}') + 1) >= 1);
  gw_resp_free(&r);
}

static void test_phase_timeouts(void **state) {
  (void)state;
  const char *slow[] = {"--delay-ms", "1000", NULL};
  assert_int_equal(faultd_start(&F, "slow", slow), 0);
  gw_over(&G, faultd_port(&F), "first-byte-timeout = 100ms\nmax-attempts = 1\n");
  int64_t t = gw_now_ms();
  gw_resp r;
  gw_request(G.port, "GET", "/t", NULL, NULL, &r);
  int64_t took = gw_now_ms() - t;
  assert_int_equal(r.status, 504);
  assert_non_null(strstr(r.body, "Gateway Timeout"));
  assert_true(took >= 90 && took < 1000);
  gw_resp_free(&r);
  faultd_stop(&F);
  gw_stop(&G, 5000);
  assert_int_equal(faultd_start(&F, "blackhole", NULL), 0);
  gw_over(&G, faultd_port(&F), "connect-timeout = 100ms\nmax-attempts = 1\n");
  t = gw_now_ms();
  gw_request(G.port, "GET", "/t", NULL, NULL, &r);
  took = gw_now_ms() - t;
  assert_int_equal(r.status, 504);
  assert_true(took >= 90 && took < 1000);
  gw_resp_free(&r);
}

static void test_breaker(void **state) {
  (void)state;
  const char *bad[] = {"--status", "503", NULL};
  assert_int_equal(faultd_start(&F, "status", bad), 0);
  gw_over(&G, faultd_port(&F),
          "max-attempts = 1\nbreaker = window=4:min-calls=2:failure-rate=50%:wait=5s\n");
  gw_resp r;
  for (int i = 0; i < 2; i++) {
    gw_request(G.port, "GET", "/b", NULL, NULL, &r);
    assert_int_equal(r.status, 503);
    gw_resp_free(&r);
  }
  assert_int_equal(faultd_wait_requests(&F, 2, 1000), 2);
  /* open: refused without reaching the upstream */
  gw_request(G.port, "GET", "/b", NULL, NULL, &r);
  assert_int_equal(r.status, 503);
  assert_non_null(strstr(r.body, "BREAKER_OPEN"));
  gw_resp_free(&r);
  gw_sleep_ms(50);
  assert_int_equal(faultd_request_count(&F), 2);
}

/* client -> gateway A -> gateway B -> a failing server, 3 attempts at each gateway: B retries
 * and says so, A does not retry again (3 requests reach the server, not 9); with
 * honor-retried = false at A, 9 do. */
static void chain(const char *a_keys, int want) {
  const char *bad[] = {"--status", "503", NULL};
  assert_int_equal(faultd_start(&F, "status", bad), 0);
  gw_over(&G2, faultd_port(&F), "max-attempts = 3\nbudget = none\n");
  char keys[256];
  snprintf(keys, sizeof keys, "max-attempts = 3\nbudget = none\n%s", a_keys);
  gw_over(&G, G2.port, keys);
  gw_resp r;
  gw_request(G.port, "GET", "/chain", NULL, NULL, &r);
  assert_int_equal(r.status, 503);
  char v[16];
  assert_non_null(gw_header(&r, "Linkd-Retried", v, sizeof v));
  gw_resp_free(&r);
  gw_sleep_ms(100);
  assert_int_equal(faultd_request_count(&F), want);
}

static void test_chain_honours_retried(void **state) {
  (void)state;
  chain("", 3);
  assert_int_equal(teardown(NULL), 0);
  memset(&F, 0, sizeof F);
  chain("honor-retried = false\n", 9);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_headers, teardown),
      cmocka_unit_test_teardown(test_headers_verbatim, teardown),
      cmocka_unit_test_teardown(test_retry_on_and_budget, teardown),
      cmocka_unit_test_teardown(test_limiter_and_bulkhead, teardown),
      cmocka_unit_test_teardown(test_phase_timeouts, teardown),
      cmocka_unit_test_teardown(test_breaker, teardown),
      cmocka_unit_test_teardown(test_chain_honours_retried, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
