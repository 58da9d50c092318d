/* SPDX-License-Identifier: MIT */
/* Hostile clients against `linkd serve`: slow headers, huge headers, too many headers, a body
 * over the limit, bad chunking, pipelined garbage, a client that never reads its responses. Each
 * gets a 4xx or a close, and the gateway keeps serving a well-behaved client meanwhile. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "faultd_client.h"
#include "gwtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static faultd_proc F;
static gw_proc G;

static char big_body[100 * 1024];

/* The upstream answers `body` ("fine" unless the test needs big responses). */
static void start_all(const char *body) {
  const char *args[] = {"--body", body, NULL};
  assert_int_equal(faultd_start(&F, "ok", args), 0);
  char cfg[2048];
  snprintf(cfg, sizeof cfg,
           "[listen]\naddress = 127.0.0.1:0\nheader-timeout = 300ms\nmax-header-bytes = 2048\n"
           "max-headers = 20\nmax-body = 4096\nbody-buffer = 4096\n\n"
           "[cluster up]\nendpoint = 127.0.0.1:%d\n\n"
           "[route all]\ncluster = up\n",
           faultd_port(&F));
  gw_start(&G, cfg);
}

static int setup(void **state) {
  (void)state;
  start_all("fine");
  return 0;
}

static int setup_big(void **state) {
  (void)state;
  memset(big_body, 'B', sizeof big_body - 1);
  start_all(big_body);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  assert_int_equal(gw_stop(&G, 5000), 0);
  faultd_stop(&F);
  return 0;
}

/* A well-behaved request still works. */
static void still_serving(void) {
  gw_resp r;
  gw_request(G.port, "GET", "/ok", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  assert_true(strcmp(r.body, "fine") == 0 || r.body_len == sizeof big_body - 1);
  gw_resp_free(&r);
}

/* Sends `req` on a fresh connection; expects `status` (and then a close), or just a close when
 * status is 0. */
static void expect(const char *req, size_t len, int status) {
  int fd = gw_connect(G.port);
  gw_send(fd, req, len);
  gw_resp r;
  bool to = false;
  int rc = gw_read(fd, &r, 3000, &to);
  assert_false(to);
  if (status) {
    assert_int_equal(rc, 0);
    assert_int_equal(r.status, status);
    assert_true(r.closed);
    gw_resp_free(&r);
  }
  assert_true(gw_closed(fd, 2000));
  close(fd);
  still_serving();
}

static void test_slow_headers(void **state) {
  (void)state;
  int fd = gw_connect(G.port);
  int64_t t0 = gw_now_ms();
  gw_send_str(fd, "GET /slow HTTP/1.1\r\nHost: a\r\n");
  /* another client is served while this one dawdles */
  still_serving();
  gw_send_str(fd, "X-A: 1\r\n");
  gw_resp r;
  assert_int_equal(gw_read(fd, &r, 3000, NULL), 0);
  assert_int_equal(r.status, 408);
  int64_t took = gw_now_ms() - t0;
  assert_true(took >= 280 && took < 1500);
  gw_resp_free(&r);
  assert_true(gw_closed(fd, 2000));
  close(fd);
  /* a connection that sends nothing at all is closed too */
  fd = gw_connect(G.port);
  assert_true(gw_closed(fd, 2000));
  close(fd);
  assert_int_equal(faultd_request_count(&F), 1); /* only the good requests went upstream */
}

static void test_huge_and_many_headers(void **state) {
  (void)state;
  char *big = malloc(8192);
  int n = snprintf(big, 8192, "GET /h HTTP/1.1\r\nHost: a\r\nX-Big: ");
  memset(big + n, 'x', 4000);
  n += 4000;
  n += snprintf(big + n, 8192 - (size_t)n, "\r\n\r\n");
  expect(big, (size_t)n, 431);
  n = snprintf(big, 8192, "GET /h HTTP/1.1\r\nHost: a\r\n");
  for (int i = 0; i < 30; i++)
    n += snprintf(big + n, 8192 - (size_t)n, "X-%d: v\r\n", i);
  n += snprintf(big + n, 8192 - (size_t)n, "\r\n");
  expect(big, (size_t)n, 431);
  n = snprintf(big, 8192, "GET /");
  memset(big + n, 'u', 3000);
  n += 3000;
  n += snprintf(big + n, 8192 - (size_t)n, " HTTP/1.1\r\nHost: a\r\n\r\n");
  expect(big, (size_t)n, 414);
  free(big);
  assert_int_equal(faultd_request_count(&F), 3);
}

static void test_bodies(void **state) {
  (void)state;
  /* declared over max-body: refused before it is read */
  const char *over = "POST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n";
  expect(over, strlen(over), 413);
  /* chunked over max-body */
  char *req = malloc(16384);
  int n = snprintf(req, 16384, "POST /b HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
  for (int i = 0; i < 5; i++) {
    n += snprintf(req + n, 16384 - (size_t)n, "400\r\n");
    memset(req + n, 'c', 1024);
    n += 1024;
    n += snprintf(req + n, 16384 - (size_t)n, "\r\n");
  }
  expect(req, (size_t)n, 413);
  free(req);
  /* bad chunking: a size that is not hex, a missing CRLF after the data */
  const char *bad1 = "POST /b HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n";
  expect(bad1, strlen(bad1), 400);
  const char *bad2 =
      "POST /b HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n0\r\n\r\n";
  expect(bad2, strlen(bad2), 400);
  /* both Content-Length and chunked is request smuggling's favourite: refused */
  const char *both = "POST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
  expect(both, strlen(both), 400);
  /* an unknown expectation */
  const char *ex = "PUT /b HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nExpect: magic\r\n\r\nx";
  expect(ex, strlen(ex), 417);
  assert_int_equal(faultd_request_count(&F), 6);
}

static void test_garbage(void **state) {
  (void)state;
  /* a good request followed by garbage in the same write: the first is answered, then 400 */
  const char *pipe = "GET /one HTTP/1.1\r\nHost: a\r\n\r\n\x01\x02garbage\r\n\r\n";
  int fd = gw_connect(G.port);
  gw_send_str(fd, pipe);
  gw_resp r;
  assert_int_equal(gw_read(fd, &r, 3000, NULL), 0);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  assert_int_equal(gw_read(fd, &r, 3000, NULL), 0);
  assert_int_equal(r.status, 400);
  gw_resp_free(&r);
  assert_true(gw_closed(fd, 2000));
  close(fd);
  expect("HELLO\r\n\r\n", 9, 400);
  expect("GET / HTTP/9.9\r\nHost: a\r\n\r\n", 27, 505);
  expect("GET / HTTP/1.1\r\n\r\n", 18, 400); /* no Host */
  expect("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 36, 400);
  expect("GET / HTTP/1.1\r\nBad Header\r\n\r\n", 30, 400);
  still_serving();
}

/* A client that pipelines many requests for 100 KiB responses and never reads: the gateway stops
 * reading from it (one request at a time; the next is read only once the previous response is
 * written, and that waits on the client), so what goes upstream is bounded by the socket buffers,
 * and others are served meanwhile. */
static void test_client_that_never_reads(void **state) {
  (void)state;
  int fd = gw_connect(G.port);
  int small = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  static char burst[200 * 40];
  size_t n = 0;
  for (int i = 0; i < 200; i++)
    n += (size_t)snprintf(burst + n, sizeof burst - n, "GET /p%d HTTP/1.1\r\nHost: a\r\n\r\n", i);
  gw_send(fd, burst, n);
  gw_sleep_ms(300);
  still_serving();
  /* what went upstream is bounded by what fits in the buffers, not the 200 asked for */
  int up = faultd_request_count(&F);
  close(fd);
  assert_true(up >= 2);
  assert_true(up < 200);
  still_serving();
}

/* A client that shuts down its side right after its (pipelined) requests still gets every
 * answer, in order, then the close. */
static void test_half_close(void **state) {
  (void)state;
  int fd = gw_connect(G.port);
  gw_send_str(fd, "GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n");
  shutdown(fd, SHUT_WR);
  gw_resp r;
  for (int i = 0; i < 2; i++) {
    assert_int_equal(gw_read(fd, &r, 3000, NULL), 0);
    assert_int_equal(r.status, 200);
    gw_resp_free(&r);
  }
  assert_true(gw_closed(fd, 2000));
  close(fd);
  faultd_req q[4];
  assert_int_equal(faultd_requests(&F, q, 4), 2);
  assert_string_equal(q[0].path, "/a");
  assert_string_equal(q[1].path, "/b");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_slow_headers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_huge_and_many_headers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bodies, setup, teardown),
      cmocka_unit_test_setup_teardown(test_garbage, setup, teardown),
      cmocka_unit_test_setup_teardown(test_client_that_never_reads, setup_big, teardown),
      cmocka_unit_test_setup_teardown(test_half_close, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
