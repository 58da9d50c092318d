/* SPDX-License-Identifier: MIT */
/* Slow clients cannot lock others out: 80 connections from one address dribble a request head
 * (and 10 from another a body) one byte at a time for 3 s, against a daemon with room for 60
 * connections. The per-client cap keeps most of them out, the head and body deadlines close the
 * rest, and a normal client on 127.0.0.1 is answered quickly all along. */
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

enum { HEAD_CONNS = 80, BODY_CONNS = 10, N = HEAD_CONNS + BODY_CONNS };

typedef struct slow {
  int fd;
  const char *prefix; /* sent at once */
  size_t sent;
  double closed_at; /* seconds after the start; 0 while open */
} slow;

/* A non-blocking connection from `src` (a 127/8 address) to the daemon. */
static int connect_from(const char *src, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in me = {.sin_family = AF_INET};
  assert_int_equal(inet_pton(AF_INET, src, &me.sin_addr), 1);
  assert_int_equal(bind(fd, (struct sockaddr *)&me, sizeof me), 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

/* Has the server closed (or reset) it? */
static bool closed_by_server(int fd) {
  char b[256];
  for (;;) {
    ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
    if (n == 0)
      return true;
    if (n < 0)
      return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}

static void test_slow_clients_do_not_lock_out_others(void **state) {
  (void)state;
  lib_proc p;
  const char *args[] = {"--connection-limit",
                        "60",
                        "--per-client-limit",
                        "20",
                        "--head-timeout",
                        "1s",
                        "--body-timeout",
                        "1s",
                        "--log",
                        "off",
                        NULL};
  assert_int_equal(lib_start(&p, args), 0);
  slow s[N];
  double t0 = now_s();
  for (int i = 0; i < N; i++) {
    s[i].fd = connect_from(i < HEAD_CONNS ? "127.0.0.2" : "127.0.0.3", p.port);
    s[i].prefix = i < HEAD_CONNS
                      ? "GET /books/1 HTTP/1.1\r\nHost: x\r\nX-Slow: "
                      : "POST /books HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n";
    ssize_t w = send(s[i].fd, s[i].prefix, strlen(s[i].prefix), MSG_NOSIGNAL);
    (void)w; /* a connection over the per-client cap may already be closed */
    s[i].sent = 0;
    s[i].closed_at = 0;
  }
  int gets = 0, ok = 0;
  double worst = 0;
  /* Bounded: 3 s of dribbling, one byte per connection per round. */
  while (now_s() - t0 < 3.0) {
    for (int i = 0; i < N; i++) {
      if (s[i].closed_at > 0)
        continue;
      if (closed_by_server(s[i].fd) || send(s[i].fd, "a", 1, MSG_NOSIGNAL) < 0) {
        s[i].closed_at = now_s() - t0;
        continue;
      }
      s[i].sent++;
    }
    http_req rq = {.path = "/books/1", .timeout_ms = 1000};
    http_res r;
    http_do(p.port, &rq, &r);
    gets++;
    ok += r.status == 200;
    worst = r.secs > worst ? r.secs : worst;
    http_res_free(&r);
    sleep_ms(50);
  }
  int still_open = 0;
  double last_close = 0;
  for (int i = 0; i < N; i++) {
    if (s[i].closed_at == 0 && !closed_by_server(s[i].fd))
      still_open++;
    last_close = s[i].closed_at > last_close ? s[i].closed_at : last_close;
    close(s[i].fd);
  }
  fprintf(stderr,
          "normal GETs %d/%d ok (slowest %.3f s); slow connections still open %d, last "
          "closed at %.2f s\n",
          ok, gets, worst, still_open, last_close);
  assert_true(gets >= 10);
  assert_int_equal(ok, gets);
  assert_true(worst < 1.0);
  assert_int_equal(still_open, 0);
  assert_true(last_close < 2.8); /* 1 s limits, checked every 100 ms */
  assert_int_equal(lib_stop(&p), 0);
  lib_cleanup(&p);
}

/* Sends a GET on an open connection and waits (at most 2 s) for its status line: the proof
 * that the server accepted the connection, and in which order. */
static bool answered_on(int fd) {
  const char rq[] = "GET /books/1 HTTP/1.1\r\nHost: x\r\n\r\n";
  if (send(fd, rq, sizeof rq - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof rq - 1))
    return false;
  char b[512];
  size_t got = 0;
  for (int i = 0; i < 200; i++) { /* bounded: 2 s */
    ssize_t n = recv(fd, b + got, sizeof b - 1 - got, MSG_DONTWAIT);
    if (n == 0)
      return false;
    if (n > 0) {
      got += (size_t)n;
      b[got] = 0;
      if (strstr(b, "\r\n\r\n"))
        return strncmp(b, "HTTP/1.1 200", 12) == 0;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return false;
    }
    if (got == sizeof b - 1)
      return false;
    sleep_ms(10);
  }
  return false;
}

/* The cap alone: the connection over it is refused while the others stay. Each of the first
 * three is answered before the next is opened: the daemon's pool threads accept concurrently, so
 * four connections in the backlog at once could be counted in any order. */
static void test_per_client_cap(void **state) {
  (void)state;
  lib_proc p;
  const char *args[] = {"--per-client-limit", "3", "--log", "off", NULL};
  assert_int_equal(lib_start(&p, args), 0);
  int fd[3];
  for (int i = 0; i < 3; i++) {
    fd[i] = connect_from("127.0.0.4", p.port);
    assert_true(answered_on(fd[i]));
  }
  int extra = connect_from("127.0.0.4", p.port);
  bool refused = false;
  for (int i = 0; i < 200 && !refused; i++) { /* bounded: 2 s */
    refused = closed_by_server(extra);
    if (!refused)
      sleep_ms(10);
  }
  assert_true(refused);
  for (int i = 0; i < 3; i++)
    assert_false(closed_by_server(fd[i]));
  http_res r; /* another address is not affected */
  assert_int_equal(http_get(p.port, "/books/1", &r), 0);
  assert_int_equal(r.status, 200);
  http_res_free(&r);
  for (int i = 0; i < 3; i++)
    close(fd[i]);
  close(extra);
  assert_int_equal(lib_stop(&p), 0);
  lib_cleanup(&p);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_slow_clients_do_not_lock_out_others),
      cmocka_unit_test(test_per_client_cap),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return rc;
}
