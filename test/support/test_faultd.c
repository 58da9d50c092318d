/* SPDX-License-Identifier: MIT */
/* faultd tested from the outside with raw sockets (and libcurl where the fault is about libcurl's
 * behaviour): every mode produces its fault, and the log records what arrived. */
/* cmocka.h needs these three first. */
// clang-format off
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
// clang-format on

#include "faultd_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef FAULTD_HAVE_CURL
#include <curl/curl.h>
#endif

static faultd_proc P;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Teardown: a faultd that did not exit 0 (a crash, a sanitizer report) fails the test. */
static int stop_faultd(void **state) {
  (void)state;
  bool running = P.pid > 0;
  faultd_stop(&P);
  if (running && P.exit_status != 0) {
    fprintf(stderr, "faultd exited with status %d\n", P.exit_status);
    return -1;
  }
  return 0;
}

/* Stops faultd in the middle of a test, with the same check. */
static void restart_point(void) { assert_int_equal(stop_faultd(NULL), 0); }

/* Starts faultd in mode with a NULL-terminated list of extra arguments. */
static void start(const char *mode, ...) {
  const char *args[32];
  int n = 0;
  va_list ap;
  va_start(ap, mode);
  for (const char *a = va_arg(ap, const char *); a && n < 31; a = va_arg(ap, const char *))
    args[n++] = a;
  va_end(ap);
  args[n] = NULL;
  assert_int_equal(faultd_start(&P, mode, args), 0);
  assert_true(faultd_port(&P) > 0);
}

static struct sockaddr_in loopback(int port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

/* A blocking connection; 0 on success with *fd set, else -errno. */
static int tcp_connect(int port, int *fd) {
  *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(*fd >= 0);
  struct timeval tv = {5, 0};
  setsockopt(*fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  struct sockaddr_in a = loopback(port);
  if (connect(*fd, (struct sockaddr *)&a, sizeof a) != 0) {
    int err = errno;
    close(*fd);
    *fd = -1;
    return -err;
  }
  return 0;
}

static int connect_ok(void) {
  int fd;
  assert_int_equal(tcp_connect(faultd_port(&P), &fd), 0);
  return fd;
}

static void send_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    assert_true(w > 0);
    p += w;
    n -= (size_t)w;
  }
}

static void send_str(int fd, const char *s) { send_all(fd, s, strlen(s)); }

/* A client connection with a receive buffer that keeps bytes across responses. */
typedef struct {
  int fd;
  char buf[96 * 1024];
  size_t len;
} tconn;

/* Reads more bytes: >0 read, 0 EOF, -errno on error, -ETIMEDOUT after timeout_ms. */
static int tc_fill(tconn *c, int timeout_ms) {
  struct pollfd p = {.fd = c->fd, .events = POLLIN};
  int n = poll(&p, 1, timeout_ms);
  if (n == 0)
    return -ETIMEDOUT;
  if (c->len + 1 >= sizeof c->buf)
    return -ENOBUFS;
  ssize_t r = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len - 1, 0);
  if (r < 0)
    return -errno;
  c->len += (size_t)r;
  c->buf[c->len] = '\0';
  return (int)r;
}

/* Reads one response (head + Content-Length body). Returns its status with head and body copied
 * out (each NUL-terminated), 0 on EOF before a whole response, -errno or -ETIMEDOUT. */
static int tc_response(tconn *c, int timeout_ms, char *head, size_t hcap, char *body, size_t bcap) {
  int64_t end = now_ms() + timeout_ms;
  for (;;) {
    char *he = strstr(c->buf, "\r\n\r\n");
    if (c->len > 0 && he) {
      size_t hlen = (size_t)(he - c->buf) + 4;
      const char *cl = strstr(c->buf, "Content-Length: ");
      size_t blen = cl && cl < he ? (size_t)strtoul(cl + 16, NULL, 10) : 0;
      if (c->len >= hlen + blen) {
        int status = 0;
        sscanf(c->buf, "HTTP/1.1 %d", &status);
        snprintf(head, hcap, "%.*s", (int)hlen, c->buf);
        snprintf(body, bcap, "%.*s", (int)blen, c->buf + hlen);
        memmove(c->buf, c->buf + hlen + blen, c->len - hlen - blen);
        c->len -= hlen + blen;
        c->buf[c->len] = '\0';
        return status;
      }
    }
    int64_t left = end - now_ms();
    int rc = tc_fill(c, left > 0 ? (int)left : 0);
    if (rc <= 0)
      return rc;
  }
}

static void tc_open(tconn *c) {
  memset(c, 0, sizeof *c);
  c->fd = connect_ok();
}

static void tc_close(tconn *c) {
  if (c->fd >= 0)
    close(c->fd);
  c->fd = -1;
}

/* What the next read on the connection sees: 0 EOF, -errno, -ETIMEDOUT, or >0 bytes. */
static int next_event(tconn *c, int timeout_ms) { return tc_fill(c, timeout_ms); }

#define HEAD_CAP 2048
#define BODY_CAP 2048

static int get(tconn *c, const char *path, char *head, char *body) {
  char req[512];
  snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
  send_str(c->fd, req);
  return tc_response(c, 5000, head, HEAD_CAP, body, BODY_CAP);
}

static int requests(faultd_req *out, int max) {
  int n = faultd_requests(&P, out, max);
  assert_true(n >= 0);
  return n;
}

/* The raw request log (caller frees). */
static char *raw_log(void) {
  FILE *f = fopen(P.log_path, "rb");
  assert_non_null(f);
  char *buf = calloc(1, 1 << 16);
  assert_non_null(buf);
  size_t n = fread(buf, 1, (1 << 16) - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

/* --- connect-level faults --------------------------------------------------------------------- */

static void refuse_is_refused(void **state) {
  (void)state;
  start("refuse", NULL);
  int fd;
  assert_int_equal(tcp_connect(faultd_port(&P), &fd), -ECONNREFUSED);
  assert_int_equal(tcp_connect(faultd_port(&P), &fd), -ECONNREFUSED);
  assert_int_equal(faultd_connections(&P), 0);
  assert_int_equal(faultd_request_count(&P), 0);
}

static void blackhole_connect_times_out(void **state) {
  (void)state;
  start("blackhole", NULL);
  int fds[2];
  for (int i = 0; i < 2; i++) {
    fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = loopback(faultd_port(&P));
    int rc = connect(fds[i], (struct sockaddr *)&a, sizeof a);
    assert_int_equal(rc, -1);
    assert_int_equal(errno, EINPROGRESS);
  }
  /* Neither connect completes, nor fails: the SYNs are dropped. */
  struct pollfd p[2] = {{.fd = fds[0], .events = POLLOUT}, {.fd = fds[1], .events = POLLOUT}};
  assert_int_equal(poll(p, 2, 1000), 0);
  close(fds[0]);
  close(fds[1]);
#ifdef FAULTD_HAVE_CURL
  CURL *h = curl_easy_init();
  char url[64];
  assert_int_equal(faultd_url(&P, "/", url, sizeof url), 0);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 300L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
  int64_t t0 = now_ms();
  CURLcode rc = curl_easy_perform(h);
  int64_t took = now_ms() - t0;
  assert_int_equal(rc, CURLE_OPERATION_TIMEDOUT);
  curl_off_t connect_time = -1;
  curl_easy_getinfo(h, CURLINFO_CONNECT_TIME_T, &connect_time);
  assert_int_equal(connect_time, 0); /* never connected */
  assert_true(took >= 250);
  assert_true(took < 4000);
  curl_easy_cleanup(h);
#endif
  assert_int_equal(faultd_connections(&P), 0);
}

static void accept_noread_blocks_the_writer(void **state) {
  (void)state;
  start("accept_noread", NULL);
  tconn *c = calloc(1, sizeof *c);
  tc_open(c);
  send_str(c->fd, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n");
  fcntl(c->fd, F_SETFL, O_NONBLOCK);
  static char chunk[64 * 1024];
  size_t sent = 0;
  int err = 0;
  while (sent < (size_t)256 << 20) {
    ssize_t w = send(c->fd, chunk, sizeof chunk, MSG_NOSIGNAL);
    if (w < 0) {
      err = errno;
      break;
    }
    sent += (size_t)w;
  }
  /* The writer fills both socket buffers and then blocks: nobody reads. */
  assert_int_equal(err, EAGAIN);
  assert_int_equal(next_event(c, 300), -ETIMEDOUT);
  assert_int_equal(faultd_connections(&P), 1);
  assert_int_equal(faultd_request_count(&P), 0);
  tc_close(c);
  free(c);
}

static void reset_before_read_resets(void **state) {
  (void)state;
  start("reset_before_read", NULL);
  tconn *c = calloc(1, sizeof *c);
  tc_open(c);
  assert_int_equal(next_event(c, 3000), -ECONNRESET);
  tc_close(c);
  assert_int_equal(faultd_connections(&P), 1);
  assert_int_equal(faultd_request_count(&P), 0);
  free(c);
}

/* --- faults after the request -------------------------------------------------------------- */

static const char post_with_headers[] = "POST /r?q=1 HTTP/1.1\r\nHost: x\r\n"
                                        "idempotency-KEY:   k-123 \r\nLINKD-attempt: 2\r\n"
                                        "linkd-deadline: 1500\r\nContent-Length: 5\r\n\r\nhello";

static void read_then_reset_logs_then_resets(void **state) {
  (void)state;
  start("read_then_reset", NULL);
  tconn *c = calloc(1, sizeof *c);
  tc_open(c);
  send_str(c->fd, post_with_headers);
  assert_int_equal(next_event(c, 3000), -ECONNRESET);
  tc_close(c);
  faultd_req r[4];
  assert_int_equal(requests(r, 4), 1);
  assert_int_equal(r[0].conn, 1);
  assert_int_equal(r[0].seq, 1);
  assert_int_equal(r[0].req, 1);
  assert_string_equal(r[0].method, "POST");
  assert_string_equal(r[0].path, "/r?q=1");
  assert_string_equal(r[0].idempotency_key, "k-123");
  assert_true(r[0].has_idempotency_key);
  assert_string_equal(r[0].attempt, "2");
  assert_string_equal(r[0].deadline, "1500");
  assert_int_equal(r[0].body_bytes, 5);
  assert_true(r[0].complete);
  /* The line itself, as the interface promises it. */
  char *log = raw_log();
  const char *line = "{\"conn\":1,\"seq\":1,\"method\":\"POST\",\"path\":\"/r?q=1\","
                     "\"idempotency_key\":\"k-123\",\"attempt\":\"2\",\"deadline\":\"1500\","
                     "\"body_bytes\":5,\"complete\":true,\"req\":1,\"t_ms\":";
  assert_memory_equal(log, line, strlen(line));
  free(log);
  free(c);
}

static void read_then_close_sends_fin(void **state) {
  (void)state;
  start("read_then_close", NULL);
  tconn *c = calloc(1, sizeof *c);
  tc_open(c);
  send_str(c->fd, "GET /g HTTP/1.1\r\nHost: x\r\n\r\n");
  assert_int_equal(next_event(c, 3000), 0); /* EOF, not a reset, and no byte before it */
  assert_int_equal(c->len, 0);
  tc_close(c);
  faultd_req r[2];
  assert_int_equal(requests(r, 2), 1);
  assert_string_equal(r[0].method, "GET");
  assert_string_equal(r[0].idempotency_key, "");
  assert_false(r[0].has_idempotency_key);
  assert_string_equal(r[0].attempt, "");
  assert_string_equal(r[0].deadline, "");
  assert_int_equal(r[0].body_bytes, 0);
  assert_true(r[0].complete);
  char *log = raw_log();
  assert_non_null(strstr(log, "\"idempotency_key\":null,\"attempt\":null,\"deadline\":null,"));
  free(log);
  free(c);
}

static void status_keeps_alive_with_retry_after(void **state) {
  (void)state;
  start("status", "--retry-after", "2", NULL);
  tconn *c = calloc(1, sizeof *c);
  tc_open(c);
  char head[HEAD_CAP], body[BODY_CAP];
  for (int i = 0; i < 2; i++) {
    assert_int_equal(get(c, "/s", head, body), 503);
    assert_non_null(strstr(head, "\r\nRetry-After: 2\r\n"));
    assert_non_null(strstr(head, "\r\nConnection: keep-alive\r\n"));
    assert_string_equal(body, "{\"status\":503}");
  }
  /* The client's "Connection: close" is honoured. */
  send_str(c->fd, "GET /s HTTP/1.1\r\nConnection: close\r\n\r\n");
  assert_int_equal(tc_response(c, 3000, head, sizeof head, body, sizeof body), 503);
  assert_non_null(strstr(head, "\r\nConnection: close\r\n"));
  assert_int_equal(next_event(c, 3000), 0);
  tc_close(c);
  faultd_req r[4];
  assert_int_equal(requests(r, 4), 3);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(r[i].conn, 1);
    assert_int_equal(r[i].seq, i + 1);
  }
  free(c);
}

static void status_retry_after_http_dates(void **state) {
  (void)state;
  start("status", "--status", "429", "--retry-after", "Wed, 21 Oct 2015 07:28:00 GMT", "--body",
        "{\"busy\":1}", NULL);
  tconn *c = calloc(1, sizeof *c);
  tc_open(c);
  char head[HEAD_CAP], body[BODY_CAP];
  assert_int_equal(get(c, "/", head, body), 429);
  assert_non_null(strstr(head, "HTTP/1.1 429 Too Many Requests\r\n"));
  assert_non_null(strstr(head, "\r\nRetry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\n"));
  assert_string_equal(body, "{\"busy\":1}");
  tc_close(c);
  restart_point();

  /* "date+N" is an IMF-fixdate N seconds after the response. */
  start("status", "--retry-after", "date+7", NULL);
  tc_open(c);
  time_t before = time(NULL);
  assert_int_equal(get(c, "/", head, body), 503);
  const char *ra = strstr(head, "\r\nRetry-After: ");
  assert_non_null(ra);
  struct tm tm;
  memset(&tm, 0, sizeof tm);
  const char *rest = strptime(ra + 15, "%a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
  assert_non_null(rest);
  long long delta = (long long)(timegm(&tm) - before);
  assert_true(delta >= 6 && delta <= 9);
  tc_close(c);
  free(c);
}

static void slow_delays_and_drips(void **state) {
  (void)state;
  start("slow", "--delay-ms", "300", NULL);
  tconn *c = calloc(1, sizeof *c);
  tc_open(c);
  char head[HEAD_CAP], body[BODY_CAP];
  int64_t t0 = now_ms();
  assert_int_equal(get(c, "/slow", head, body), 200);
  assert_true(now_ms() - t0 >= 290);
  assert_string_equal(body, "{\"ok\":true}");
  tc_close(c);
  restart_point();

  start("slow", "--delay-ms", "0", "--drip-ms", "50", "--body", "abcde", NULL);
  tc_open(c);
  t0 = now_ms();
  send_str(c->fd, "GET / HTTP/1.1\r\n\r\n");
  /* The head comes at once, the body a byte at a time. */
  while (!strstr(c->buf, "\r\n\r\n"))
    assert_true(tc_fill(c, 3000) > 0);
  assert_non_null(strstr(c->buf, "Content-Length: 5\r\n"));
  assert_true(strlen(strstr(c->buf, "\r\n\r\n") + 4) < 5);
  assert_int_equal(tc_response(c, 5000, head, sizeof head, body, sizeof body), 200);
  assert_true(now_ms() - t0 >= 240);
  assert_string_equal(body, "abcde");
  tc_close(c);
  free(c);
}

static void partial_stall_sends_ten_bytes(void **state) {
  (void)state;
  start("partial_stall", NULL);
  tconn *c = calloc(1, sizeof *c);
  tc_open(c);
  send_str(c->fd, "GET /p HTTP/1.1\r\n\r\n");
  char *he = NULL;
  while (!(he = strstr(c->buf, "\r\n\r\n")) || strlen(he + 4) < 10)
    assert_true(tc_fill(c, 3000) > 0);
  assert_non_null(strstr(c->buf, "HTTP/1.1 200 OK\r\n"));
  assert_non_null(strstr(c->buf, "Content-Length: 1000\r\n"));
  assert_string_equal(he + 4, "0123456789");
  /* Then nothing: no more bytes and no close. */
  assert_int_equal(next_event(c, 300), -ETIMEDOUT);
  tc_close(c);
  assert_int_equal(faultd_request_count(&P), 1);
  free(c);
}

static void reset_mid_upload_resets(void **state) {
  (void)state;
  start("reset_mid_upload", NULL);
  int fd = connect_ok();
  send_str(fd, "PUT /big HTTP/1.1\r\nIdempotency-Key: up-1\r\nContent-Length: 8388608\r\n\r\n");
  static char chunk[64 * 1024];
  memset(chunk, 'x', sizeof chunk);
  size_t sent = 0;
  int err = 0;
  while (sent < 8388608) {
    ssize_t w = send(fd, chunk, sizeof chunk, MSG_NOSIGNAL);
    if (w < 0) {
      err = errno;
      break;
    }
    sent += (size_t)w;
  }
  assert_true(err == ECONNRESET || err == EPIPE);
  close(fd);
  faultd_req r[2];
  assert_int_equal(requests(r, 2), 1);
  assert_string_equal(r[0].method, "PUT");
  assert_string_equal(r[0].idempotency_key, "up-1");
  assert_int_equal(r[0].body_bytes, 16384);
  assert_false(r[0].complete);
  restart_point();

  /* A body shorter than --reset-after arrives whole, and the connection is still reset. */
  start("reset_mid_upload", "--reset-after", "100", NULL);
  tconn *c = calloc(1, sizeof *c);
  tc_open(c);
  send_str(c->fd, "POST /s HTTP/1.1\r\nContent-Length: 50\r\n\r\n"
                  "01234567890123456789012345678901234567890123456789");
  assert_int_equal(next_event(c, 3000), -ECONNRESET);
  tc_close(c);
  assert_int_equal(requests(r, 2), 1);
  assert_int_equal(r[0].body_bytes, 50);
  assert_true(r[0].complete);
  free(c);
}

/* --- keep-alive closes ------------------------------------------------------------------------ */

static void keepalive_close_before_response(void **state) {
  (void)state;
  start("keepalive_close", "--close-after", "2", NULL);
  tconn *c = calloc(1, sizeof *c);
  tc_open(c);
  char head[HEAD_CAP], body[BODY_CAP];
  assert_int_equal(get(c, "/1", head, body), 200);
  assert_int_equal(get(c, "/2", head, body), 200);
  assert_non_null(strstr(head, "\r\nConnection: keep-alive\r\n"));
  assert_int_equal(get(c, "/3", head, body), 0); /* read, then closed without an answer */
  tc_close(c);
  faultd_req r[4];
  assert_int_equal(requests(r, 4), 3);
  assert_string_equal(r[2].path, "/3");
  assert_int_equal(r[2].conn, 1);
  assert_int_equal(r[2].seq, 3);
  assert_true(r[2].complete);
  free(c);
}

static void keepalive_close_after_response(void **state) {
  (void)state;
  start("keepalive_close", "--close-when", "after_response", NULL);
  tconn *c = calloc(1, sizeof *c);
  tc_open(c);
  char head[HEAD_CAP], body[BODY_CAP];
  assert_int_equal(get(c, "/1", head, body), 200);
  assert_non_null(strstr(head, "\r\nConnection: keep-alive\r\n"));
  assert_int_equal(next_event(c, 1000), 0);
  tc_close(c);
  assert_int_equal(faultd_request_count(&P), 1);
  free(c);
}

static void keepalive_close_idle(void **state) {
  (void)state;
  start("keepalive_close", "--close-when", "idle", "--idle-ms", "200", NULL);
  tconn *c = calloc(1, sizeof *c);
  tc_open(c);
  char head[HEAD_CAP], body[BODY_CAP];
  assert_int_equal(get(c, "/1", head, body), 200);
  int64_t t0 = now_ms();
  assert_int_equal(next_event(c, 3000), 0);
  assert_true(now_ms() - t0 >= 150);
  tc_close(c);
  assert_int_equal(faultd_request_count(&P), 1);

  /* A request sent into the idle window is read and logged, never answered. */
  tc_open(c);
  assert_int_equal(get(c, "/1", head, body), 200);
  assert_int_equal(get(c, "/late", head, body), 0);
  tc_close(c);
  faultd_req r[4];
  assert_int_equal(requests(r, 4), 3);
  assert_string_equal(r[2].path, "/late");
  assert_int_equal(r[2].conn, 2);
  assert_int_equal(r[2].seq, 2);
  free(c);
}

#ifdef FAULTD_HAVE_CURL
static size_t discard(char *p, size_t size, size_t n, void *u) {
  (void)p;
  (void)u;
  return size * n;
}

/* The fault the HTTP layer must detect: libcurl re-sends a POST on a new connection when the
 * reused one dies before any reply, and reports one success. */
static void keepalive_close_makes_curl_resend(void **state) {
  (void)state;
  start("keepalive_close", "--close-after", "1", NULL);
  CURL *h = curl_easy_init();
  char url[64];
  assert_int_equal(faultd_url(&P, "/a", url, sizeof url), 0);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, "x=1");
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
  long status = 0;
  assert_int_equal(curl_easy_perform(h), CURLE_OK);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  assert_int_equal(status, 200);
  assert_int_equal(faultd_url(&P, "/b", url, sizeof url), 0);
  curl_easy_setopt(h, CURLOPT_URL, url);
  assert_int_equal(curl_easy_perform(h), CURLE_OK);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  assert_int_equal(status, 200);
  curl_easy_cleanup(h);
  faultd_req r[4];
  assert_int_equal(requests(r, 4), 3);
  assert_string_equal(r[1].path, "/b");
  assert_int_equal(r[1].conn, 1);
  assert_int_equal(r[1].seq, 2);
  assert_string_equal(r[2].path, "/b");
  assert_int_equal(r[2].conn, 2);
  assert_int_equal(r[2].seq, 1);
  assert_string_equal(r[2].method, "POST");
  assert_int_equal(r[2].body_bytes, 3);
}
#endif

/* --- answers ---------------------------------------------------------------------------------- */

static void ok_answers_json_and_keeps_alive(void **state) {
  (void)state;
  start("ok", NULL);
  tconn *c = calloc(1, sizeof *c);
  tc_open(c);
  char head[HEAD_CAP], body[BODY_CAP];
  assert_int_equal(get(c, "/", head, body), 200);
  assert_non_null(strstr(head, "\r\nContent-Type: application/json\r\n"));
  assert_string_equal(body, "{\"ok\":true}");
  /* HEAD gets the head only; two pipelined requests get two answers in order. */
  send_str(c->fd, "HEAD / HTTP/1.1\r\n\r\n");
  while (!strstr(c->buf, "\r\n\r\n"))
    assert_true(tc_fill(c, 3000) > 0);
  assert_non_null(strstr(c->buf, "Content-Length: 11\r\n"));
  assert_int_equal(strlen(strstr(c->buf, "\r\n\r\n")), 4);
  c->len = 0;
  c->buf[0] = '\0';
  send_str(c->fd, "GET /p1 HTTP/1.1\r\n\r\nGET /p2 HTTP/1.1\r\n\r\n");
  assert_int_equal(tc_response(c, 3000, head, sizeof head, body, sizeof body), 200);
  assert_int_equal(tc_response(c, 3000, head, sizeof head, body, sizeof body), 200);
  tc_close(c);
  faultd_req r[8];
  assert_int_equal(faultd_wait_requests(&P, 4, 2000), 4);
  assert_int_equal(requests(r, 8), 4);
  assert_string_equal(r[1].method, "HEAD");
  assert_string_equal(r[3].path, "/p2");
  assert_int_equal(r[3].seq, 4);
  /* faultd_requests stores no more than max. */
  assert_int_equal(requests(r, 2), 2);
  free(c);
}

static void chunked_and_expect_continue(void **state) {
  (void)state;
  start("ok", NULL);
  tconn *c = calloc(1, sizeof *c);
  tc_open(c);
  char head[HEAD_CAP], body[BODY_CAP];
  send_str(c->fd, "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                  "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: y\r\n\r\n");
  assert_int_equal(tc_response(c, 3000, head, sizeof head, body, sizeof body), 200);
  send_str(c->fd, "POST /e HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
  assert_int_equal(tc_response(c, 3000, head, sizeof head, body, sizeof body), 100);
  assert_string_equal(head, "HTTP/1.1 100 Continue\r\n\r\n");
  send_str(c->fd, "abcd");
  assert_int_equal(tc_response(c, 3000, head, sizeof head, body, sizeof body), 200);
  tc_close(c);
  faultd_req r[4];
  assert_int_equal(requests(r, 4), 2);
  assert_int_equal(r[0].body_bytes, 11);
  assert_true(r[0].complete);
  assert_int_equal(r[1].body_bytes, 4);
  assert_true(r[1].complete);
  free(c);
}

static void script_runs_in_order_then_repeats(void **state) {
  (void)state;
  start("status", "--script", "503:ra=1,429:ra=2,reset,close,slow:150,200", NULL);
  tconn *c = calloc(1, sizeof *c);
  char head[HEAD_CAP], body[BODY_CAP];
  tc_open(c);
  assert_int_equal(get(c, "/", head, body), 503);
  assert_non_null(strstr(head, "\r\nRetry-After: 1\r\n"));
  assert_int_equal(get(c, "/", head, body), 429); /* same connection: the script is global */
  assert_non_null(strstr(head, "\r\nRetry-After: 2\r\n"));
  tc_close(c);
  tc_open(c);
  send_str(c->fd, "GET / HTTP/1.1\r\n\r\n");
  assert_int_equal(next_event(c, 3000), -ECONNRESET);
  tc_close(c);
  tc_open(c);
  assert_int_equal(get(c, "/", head, body), 0);
  tc_close(c);
  tc_open(c);
  int64_t t0 = now_ms();
  assert_int_equal(get(c, "/", head, body), 200);
  assert_true(now_ms() - t0 >= 140);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(get(c, "/", head, body), 200);
    assert_null(strstr(head, "Retry-After"));
  }
  tc_close(c);
  assert_int_equal(faultd_request_count(&P), 7);
  restart_point();

  /* Non-2xx entries without ra= take --retry-after. */
  start("ok", "--retry-after", "3", "--script", "503:delay=10,200", NULL);
  tc_open(c);
  assert_int_equal(get(c, "/", head, body), 503);
  assert_non_null(strstr(head, "\r\nRetry-After: 3\r\n"));
  assert_int_equal(get(c, "/", head, body), 200);
  assert_null(strstr(head, "Retry-After"));
  tc_close(c);
  free(c);
}

static void junk_is_logged_and_survived(void **state) {
  (void)state;
  start("ok", NULL);
  tconn *c = calloc(1, sizeof *c);
  char head[HEAD_CAP], body[BODY_CAP];
  static const char binary[] = "\x01\xff\"\\ / HTTP/1.1\r\n\r\n";
  const char *bad[] = {
      "GARBAGE\r\n\r\n",
      binary,
      "GET / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
      "GET / HTTP/1.1\r\nno colon here\r\n\r\n",
      "GET / HTTP/9.9\r\n\r\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tc_open(c);
    send_str(c->fd, bad[i]);
    assert_int_equal(tc_response(c, 3000, head, sizeof head, body, sizeof body), 400);
    assert_int_equal(next_event(c, 3000), 0);
    tc_close(c);
  }
  /* A head larger than faultd's buffer. */
  tc_open(c);
  static char big[80 * 1024];
  memset(big, 'a', sizeof big);
  memcpy(big, "GET /", 5);
  send_all(c->fd, big, sizeof big);
  assert_int_equal(tc_response(c, 3000, head, sizeof head, body, sizeof body), 400);
  tc_close(c);
  /* Requests cut short are logged as far as they arrived. */
  tc_open(c);
  send_str(c->fd, "POST /p HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc");
  shutdown(c->fd, SHUT_WR);
  assert_int_equal(next_event(c, 3000), 0);
  tc_close(c);
  tc_open(c);
  send_str(c->fd, "PUT /trunc HT");
  shutdown(c->fd, SHUT_WR);
  assert_int_equal(next_event(c, 3000), 0);
  tc_close(c);
  /* Still serving. */
  tc_open(c);
  assert_int_equal(get(c, "/alive", head, body), 200);
  tc_close(c);
  int n = (int)(sizeof bad / sizeof bad[0]) + 4;
  faultd_req r[16];
  assert_int_equal(faultd_wait_requests(&P, n, 2000), n);
  assert_int_equal(requests(r, 16), n);
  assert_string_equal(r[0].method, "GARBAGE");
  assert_false(r[0].complete);
  assert_string_equal(r[1].method, "\x01\xff\"\\"); /* escaped in the log, decoded back */
  /* Whatever arrived, the log is printable ASCII lines. */
  char *log = raw_log();
  for (const char *q = log; *q; q++)
    assert_true(*q == '\n' || (*q >= 0x20 && *q < 0x7f));
  free(log);
  assert_string_equal(r[n - 3].path, "/p");
  assert_int_equal(r[n - 3].body_bytes, 3);
  assert_false(r[n - 3].complete);
  assert_string_equal(r[n - 2].method, "PUT");
  assert_string_equal(r[n - 2].path, "/trunc");
  assert_false(r[n - 2].complete);
  assert_string_equal(r[n - 1].path, "/alive");
  assert_true(r[n - 1].complete);
  free(c);
}

enum { NCONC = 64 };

static void many_concurrent_connections(void **state) {
  (void)state;
  start("ok", "--delay-ms", "200", NULL);
  tconn *c = calloc(NCONC, sizeof *c);
  char head[HEAD_CAP], body[BODY_CAP];
  int64_t t0 = now_ms();
  for (int i = 0; i < NCONC; i++) {
    tc_open(&c[i]);
    send_str(c[i].fd, "GET /many HTTP/1.1\r\n\r\n");
  }
  for (int i = 0; i < NCONC; i++) {
    assert_int_equal(tc_response(&c[i], 10000, head, sizeof head, body, sizeof body), 200);
    tc_close(&c[i]);
  }
  /* Served side by side: one after another would take NCONC * 200 ms = 12.8 s. */
  assert_true(now_ms() - t0 < 6000);
  faultd_req r[NCONC];
  assert_int_equal(requests(r, NCONC), NCONC);
  int seen[NCONC + 1] = {0};
  for (int i = 0; i < NCONC; i++) {
    assert_in_range(r[i].conn, 1, NCONC);
    assert_int_equal(seen[r[i].conn]++, 0);
  }
  free(c);
}

/* --- lifecycle -------------------------------------------------------------------------------- */

static int wait_exit(pid_t pid, int timeout_ms) {
  int64_t end = now_ms() + timeout_ms;
  int st;
  while (now_ms() < end) {
    if (waitpid(pid, &st, WNOHANG) == pid)
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return -1;
}

static void exits_cleanly(void **state) {
  (void)state;
  /* SIGTERM with a connection parked in a stall: exit 0, promptly. */
  start("partial_stall", NULL);
  tconn *c = calloc(1, sizeof *c);
  tc_open(c);
  send_str(c->fd, "GET / HTTP/1.1\r\n\r\n");
  assert_int_equal(faultd_wait_requests(&P, 1, 3000), 1);
  faultd_stop(&P); /* SIGKILL after 5 s would show as 137 */
  assert_int_equal(P.exit_status, 0);
  tc_close(c);
  free(c);

  /* --max-seconds: exits by itself. */
  start("ok", "--max-seconds", "1", NULL);
  assert_int_equal(wait_exit(P.pid, 5000), 0);
  P.pid = 0;
  faultd_stop(&P);

  /* --parent-pid: a faultd whose parent is not that process leaves at once. */
  start("blackhole", "--parent-pid", "1", NULL);
  if (P.pid > 0) {
    P.exit_status = wait_exit(P.pid, 3000);
    P.pid = 0;
  }
  assert_int_equal(P.exit_status, 0);
  faultd_stop(&P);

  /* Usage errors fail the start. */
  faultd_proc q;
  assert_int_equal(faultd_start(&q, "no_such_mode", NULL), -1);
  assert_int_equal(q.exit_status, 2);
  const char *bad_script[] = {"--script", "503,wat", NULL};
  assert_int_equal(faultd_start(&q, "status", bad_script), -1);
  const char *script_mode[] = {"--script", "503", NULL};
  assert_int_equal(faultd_start(&q, "read_then_reset", script_mode), -1);
}

int main(void) {
#ifdef FAULTD_HAVE_CURL
  curl_global_init(CURL_GLOBAL_DEFAULT);
#endif
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(refuse_is_refused, stop_faultd),
      cmocka_unit_test_teardown(blackhole_connect_times_out, stop_faultd),
      cmocka_unit_test_teardown(accept_noread_blocks_the_writer, stop_faultd),
      cmocka_unit_test_teardown(reset_before_read_resets, stop_faultd),
      cmocka_unit_test_teardown(read_then_reset_logs_then_resets, stop_faultd),
      cmocka_unit_test_teardown(read_then_close_sends_fin, stop_faultd),
      cmocka_unit_test_teardown(status_keeps_alive_with_retry_after, stop_faultd),
      cmocka_unit_test_teardown(status_retry_after_http_dates, stop_faultd),
      cmocka_unit_test_teardown(slow_delays_and_drips, stop_faultd),
      cmocka_unit_test_teardown(partial_stall_sends_ten_bytes, stop_faultd),
      cmocka_unit_test_teardown(reset_mid_upload_resets, stop_faultd),
      cmocka_unit_test_teardown(keepalive_close_before_response, stop_faultd),
      cmocka_unit_test_teardown(keepalive_close_after_response, stop_faultd),
      cmocka_unit_test_teardown(keepalive_close_idle, stop_faultd),
#ifdef FAULTD_HAVE_CURL
      cmocka_unit_test_teardown(keepalive_close_makes_curl_resend, stop_faultd),
#endif
      cmocka_unit_test_teardown(ok_answers_json_and_keeps_alive, stop_faultd),
      cmocka_unit_test_teardown(chunked_and_expect_continue, stop_faultd),
      cmocka_unit_test_teardown(script_runs_in_order_then_repeats, stop_faultd),
      cmocka_unit_test_teardown(junk_is_logged_and_survived, stop_faultd),
      cmocka_unit_test_teardown(many_concurrent_connections, stop_faultd),
      cmocka_unit_test_teardown(exits_cleanly, stop_faultd),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
#ifdef FAULTD_HAVE_CURL
  curl_global_cleanup();
#endif
  return rc;
}
