/* SPDX-License-Identifier: MIT */
/* Hostile clients against `linkd serve`: slow headers, huge headers, too many headers, a body
 * over the limit, bad chunking, pipelined garbage, a client that never reads its responses,
 * folded header lines, transfer codings it does not know, a NUL in a value. Each gets a 4xx (or
 * 501) or a close, and the gateway keeps serving a well-behaved client meanwhile. What reaches
 * the upstream of a well-formed request (trailing blanks of values, a value split across reads)
 * is checked against an upstream that echoes the head it received. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "faultd_client.h"
#include "gwtest.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
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

/* The echo upstream: a child process answering each request with the head it received as the
 * body, one connection at a time (Connection: close, so nothing waits in a pool). */
static pid_t echo_pid;

/* Answers one request with the head it received as the body. */
static void serve_echo(int c) {
  static char buf[16384];
  size_t n = 0;
  const char *end = NULL;
  while (!end && n < sizeof buf - 1) {
    ssize_t k = read(c, buf + n, sizeof buf - 1 - n);
    if (k <= 0)
      break;
    n += (size_t)k;
    buf[n] = '\0';
    end = strstr(buf, "\r\n\r\n");
  }
  size_t hl = end ? (size_t)(end - buf) + 4 : n;
  char head[128];
  int hn = snprintf(head, sizeof head,
                    "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n", hl);
  if (write(c, head, (size_t)hn) < 0 || write(c, buf, hl) < 0)
    return;
}

static int setup_echo(void **state) {
  (void)state;
  int port;
  echo_pid = gw_fork_server(serve_echo, 0, 120, &port);
  char cfg[1024];
  snprintf(cfg, sizeof cfg,
           "[listen]\naddress = 127.0.0.1:0\n\n"
           "[cluster up]\nendpoint = 127.0.0.1:%d\n\n"
           "[route all]\ncluster = up\n\n"
           "[route host]\ncluster = up\nprefix = /host\nheader = Host: rewritten.test\n",
           port);
  gw_start(&G, cfg);
  return 0;
}

static int teardown_echo(void **state) {
  (void)state;
  assert_int_equal(gw_stop(&G, 5000), 0);
  gw_fork_server_stop(echo_pid);
  return 0;
}

/* One request on a fresh connection, written in the given pieces with a pause between them so
 * the gateway reads them apart; the response. */
static void send_in_pieces(const char *const *pieces, size_t n, gw_resp *r) {
  int fd = gw_connect(G.port);
  for (size_t i = 0; i < n; i++) {
    if (i)
      gw_sleep_ms(50);
    gw_send_str(fd, pieces[i]);
  }
  bool to = false;
  assert_int_equal(gw_read(fd, r, 3000, &to), 0);
  close(fd);
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

/* RFC 9110 5.5: the blanks after a field value are not part of it. They made a Linkd-Deadline
 * malformed (400) and went upstream with every other header. */
static void test_header_values_trimmed(void **state) {
  (void)state;
  gw_resp r;
  gw_request(G.port, "GET", "/t", "X-Trail: v \t\r\nX-Mid: a \t b\t\r\nX-Blank: \t \r\n", NULL, &r);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.body, "\r\nX-Trail: v\r\n"));
  assert_non_null(strstr(r.body, "\r\nX-Mid: a \t b\r\n")); /* inside a value they stay */
  assert_null(strstr(r.body, "X-Blank: "));                 /* now empty */
  gw_resp_free(&r);
  gw_request(G.port, "GET", "/t", "Linkd-Deadline: 2000 \t\r\n", NULL, &r);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  gw_request(G.port, "GET", "/t", "grpc-timeout: 2S \r\n", NULL, &r);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  /* a route's header = Host: ... is applied (it replaces the caller's) */
  gw_request(G.port, "GET", "/host", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.body, "\r\nHost: rewritten.test\r\n"));
  assert_null(strstr(r.body, "gw.test"));
  gw_resp_free(&r);
}

/* A header value split across two reads (the parser reports it in two pieces, the second at
 * the start of the second read) is one value, not a fold. */
static void test_value_split_across_reads(void **state) {
  (void)state;
  const char *const cuts[][2] = {
      {"GET /s HTTP/1.1\r\nHost: gw.test\r\nX-Split: ab", "cd\r\n\r\n"},
      {"GET /s HTTP/1.1\r\nHost: gw.test\r\nX-Split: ab ", "cd\r\n\r\n"},
      {"GET /s HTTP/1.1\r\nHost: gw.test\r\nX-Split:", " abcd\r\n\r\n"},
      {"GET /s HTTP/1.1\r\nHost: gw.test\r\nX-Split: abcd", "\r\n\r\n"},
      {"GET /s HTTP/1.1\r\nHost: gw.test\r\nX-Split: abcd\r\n", "\r\n"},
      {"GET /s HTTP/1.1\r\nHost: gw.test\r\nX-Empty:\r\n", "X-Split: abcd\r\n\r\n"},
  };
  const char *const want[] = {"X-Split: abcd\r\n", "X-Split: ab cd\r\n", "X-Split: abcd\r\n",
                              "X-Split: abcd\r\n", "X-Split: abcd\r\n",  "X-Split: abcd\r\n"};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    gw_resp r;
    send_in_pieces(cuts[i], 2, &r);
    assert_int_equal(r.status, 200);
    if (!strstr(r.body, want[i]))
      fail_msg("cut %zu: upstream got:\n%s", i, r.body);
    gw_resp_free(&r);
  }
}

/* RFC 9112 5.2: obs-fold (a header line that starts with SP or HTAB) is refused with 400, as
 * nginx and HAProxy do; it was merged into the header above ("Host: x Folded: y") and sent on.
 * Also when the fold arrives in a read of its own, and after an empty first line. */
static void test_obs_fold(void **state) {
  (void)state;
  const char *whole[] = {
      "GET /f HTTP/1.1\r\nHost: a\r\n Folded: y\r\n\r\n",
      "GET /f HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n\tmore\r\n\r\n",
      "GET /f HTTP/1.1\r\nHost: a\r\nX-A:\r\n more\r\n\r\n",
      "GET /f HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n \r\n\r\n",
      "GET /f HTTP/1.1\r\nHost: a\nX-A: 1\n more\n\n",
  };
  for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++)
    expect(whole[i], strlen(whole[i]), 400);
  const char *const cuts[][2] = {
      {"GET /f HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n", " more\r\n\r\n"},
      {"GET /f HTTP/1.1\r\nHost: a\r\nX-A: 1", "\r\n more\r\n\r\n"},
      {"GET /f HTTP/1.1\r\nHost: a\r\nX-A: 1\r", "\n more\r\n\r\n"},
      {"GET /f HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n ", "more\r\n\r\n"},
      {"GET /f HTTP/1.1\r\nHost: a\r\nX-A:\r\n", " more\r\n\r\n"},
  };
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    gw_resp r;
    send_in_pieces(cuts[i], 2, &r);
    if (r.status != 400)
      fail_msg("cut %zu: %d", i, r.status);
    assert_true(r.closed);
    gw_resp_free(&r);
  }
  assert_int_equal(faultd_request_count(&F), (int)(sizeof whole / sizeof whole[0]));
}

/* RFC 9112 6.1: chunked is the only transfer coding the gateway knows. "gzip, chunked" was
 * taken for chunked, the gzip coding dropped, and the still-compressed body forwarded as if it
 * were plain: now 501 and a close. Where chunked is not the last coding (or comes twice) the
 * body's length is unknown: 400 (RFC 9112 6.3). Case and spaces do not matter (http-parser
 * refuses a trailing tab or an empty list element in Transfer-Encoding itself: 400). */
static void test_transfer_codings(void **state) {
  (void)state;
  const char *gz = "POST /te HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
                   "3\r\nabc\r\n0\r\n\r\n";
  expect(gz, strlen(gz), 501);
  const char *two = "POST /te HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
  expect(two, strlen(two), 501);
  const char *last = "POST /te HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"
                     "3\r\nabc\r\n0\r\n\r\n";
  expect(last, strlen(last), 400);
  const char *only = "POST /te HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\nabc";
  expect(only, strlen(only), 400);
  const char *twice = "POST /te HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"
                      "3\r\nabc\r\n0\r\n\r\n";
  expect(twice, strlen(twice), 400);
  assert_int_equal(faultd_request_count(&F), 5); /* the still_serving ones only */
  int fd = gw_connect(G.port);
  gw_send_str(fd, "POST /te HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:  Chunked  \r\n\r\n"
                  "3\r\nabc\r\n0\r\n\r\n");
  gw_resp r;
  assert_int_equal(gw_read(fd, &r, 3000, NULL), 0);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  close(fd);
  faultd_req q[8];
  assert_int_equal(faultd_requests(&F, q, 8), 6);
  assert_string_equal(q[5].path, "/te");
  assert_int_equal(q[5].body_bytes, 3);
}

/* A NUL byte in a header value: http-parser refuses it (HPE_INVALID_HEADER_TOKEN), so the
 * request is answered 400 and nothing of it goes upstream (it was reported as forwarded as
 * "X: a"; sent as raw bytes here, it is not). */
static void test_nul_in_header_value(void **state) {
  (void)state;
  static const char req[] = "GET /nul HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n";
  assert_non_null(memchr(req, '\0', sizeof req - 1));
  expect(req, sizeof req - 1, 400);
  static const char name[] = "GET /nul HTTP/1.1\r\nHost: a\r\nX\0Y: b\r\n\r\n";
  expect(name, sizeof name - 1, 400);
  assert_int_equal(faultd_request_count(&F), 2); /* the still_serving ones only */
}

/* `linkd serve --check` on `cfg`: its exit status; its output in out. */
static int check_config(const char *cfg, char *out, size_t cap) {
  gw_write_config_exact(&G, cfg);
  char cmd[1024], path[400];
  snprintf(path, sizeof path, "%s/check.out", G.dir);
  snprintf(cmd, sizeof cmd, "%s serve -c %s --check > %s 2>&1", LINKD_PATH, G.cfg_path, path);
  int rc = system(cmd);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(out, 1, cap - 1, f);
  out[n] = '\0';
  fclose(f);
  unlink(path);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* A configuration that cannot start is refused by --check (exit 2, file:line:key): a listen
 * address that is a name, or an access log that cannot be opened; they passed and the start
 * failed. A reload to such an access log is refused, logged, and the running one serves on. */
static void test_config_that_cannot_start(void **state) {
  (void)state;
  char out[4096], cfg[1024];
  char tail[256];
  snprintf(tail, sizeof tail, "[cluster up]\nendpoint = 127.0.0.1:%d\n[route all]\ncluster = up\n",
           faultd_port(&F));
  snprintf(cfg, sizeof cfg, "[listen]\naddress = localhost:0\n%s", tail);
  assert_int_equal(check_config(cfg, out, sizeof out), 2);
  assert_non_null(strstr(out, "gw.ini:2: address: 'localhost:0': the host must be an IP address"));
  snprintf(cfg, sizeof cfg, "[listen]\naddress = 127.0.0.1:0\n[log]\naccess = %s/no/dir/a.log\n%s",
           G.dir, tail);
  assert_int_equal(check_config(cfg, out, sizeof out), 2);
  assert_non_null(strstr(out, "gw.ini:4: access: cannot open "));
  assert_non_null(strstr(out, "/no/dir/a.log for append: No such file or directory"));
  /* the running gateway (setup's configuration was rewritten above, not reloaded; exact: no
   * upstream-client line to move the line numbers, a reload keeps the running client anyway) */
  gw_write_config_exact(&G, cfg);
  kill(G.pid, SIGHUP);
  int64_t end = gw_now_ms() + 2000;
  while (!strstr(gw_stderr(&G), "reload rejected") && gw_now_ms() < end)
    gw_sleep_ms(10);
  assert_non_null(strstr(gw_stderr(&G), "reload rejected, the running configuration stays: "));
  assert_non_null(strstr(gw_stderr(&G), "gw.ini:4: access: cannot open "));
  gw_resp r;
  gw_request(G.port, "GET", "/still", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  char v[32];
  assert_non_null(gw_header(&r, "Linkd-Config-Generation", v, sizeof v));
  assert_string_equal(v, "1");
  gw_resp_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_slow_headers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_huge_and_many_headers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bodies, setup, teardown),
      cmocka_unit_test_setup_teardown(test_garbage, setup, teardown),
      cmocka_unit_test_setup_teardown(test_client_that_never_reads, setup_big, teardown),
      cmocka_unit_test_setup_teardown(test_half_close, setup, teardown),
      cmocka_unit_test_setup_teardown(test_header_values_trimmed, setup_echo, teardown_echo),
      cmocka_unit_test_setup_teardown(test_value_split_across_reads, setup_echo, teardown_echo),
      cmocka_unit_test_setup_teardown(test_obs_fold, setup, teardown),
      cmocka_unit_test_setup_teardown(test_transfer_codings, setup, teardown),
      cmocka_unit_test_setup_teardown(test_nul_in_header_value, setup, teardown),
      cmocka_unit_test_setup_teardown(test_config_that_cannot_start, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
