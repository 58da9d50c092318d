/* SPDX-License-Identifier: MIT */
/* libFuzzer: the native HTTP/1.1 transport (src/http/h1.c) reading an upstream's response. The
 * input is what a hostile server on 127.0.0.1 sends after reading the request, in up to four
 * writes (split at 0x00 0x01 marker pairs), then it closes. Never a crash, a leak or a hang; the
 * call ends with a known error; a success has a status of three digits and a body no longer than
 * what was sent; an attempt is never reported as not sent once the server has read the request. */
#include <linkd/error.h>
#include <linkd/http.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

#define NFDS 16

static struct {
  int fd[NFDS], ev[NFDS], n;
  int64_t timer_at;
  lk_http_client *c;
  int lfd;
  char url[64];
} L;

static void socket_fn(void *ud, int fd, int events) {
  (void)ud;
  for (int i = 0; i < L.n; i++)
    if (L.fd[i] == fd) {
      if (events) {
        L.ev[i] = events;
      } else {
        L.fd[i] = L.fd[--L.n];
        L.ev[i] = L.ev[L.n];
      }
      return;
    }
  if (events) {
    if (L.n == NFDS)
      abort();
    L.fd[L.n] = fd;
    L.ev[L.n++] = events;
  }
}

static void timer_fn(void *ud, int64_t delay) {
  (void)ud;
  L.timer_at = delay < 0 ? INT64_MAX : lk_now_ns() + delay;
}

static void close_fn(void *ud, int fd) { socket_fn(ud, fd, 0); }

static void setup(void) {
  L.timer_at = INT64_MAX;
  L.lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (L.lfd < 0 || bind(L.lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(L.lfd, 16) != 0 ||
      getsockname(L.lfd, (struct sockaddr *)&a, &al) != 0)
    abort();
  snprintf(L.url, sizeof L.url, "http://127.0.0.1:%d/x", ntohs(a.sin_port));
  lk_http_client_config cc;
  lk_http_client_config_init_default(&cc);
  cc.socket_fn = socket_fn;
  cc.timer_fn = timer_fn;
  cc.close_fn = close_fn;
  cc.transport = LK_HTTP_TRANSPORT_NATIVE;
  L.c = lk_http_client_new(&cc);
  if (!L.c)
    abort();
}

/* The server side of one call: the accepted connection and what is left to write. */
typedef struct server {
  int fd;
  bool read_head; /* the request's blank line was read */
  char head[8192];
  size_t head_len;
  const unsigned char *parts[4];
  size_t part_len[4];
  int nparts, next;
  bool closed;
} server;

static void server_step(server *s) {
  if (s->fd < 0) {
    s->fd = accept4(L.lfd, NULL, NULL, SOCK_NONBLOCK);
    if (s->fd < 0)
      return;
  }
  if (!s->read_head) {
    ssize_t n = read(s->fd, s->head + s->head_len, sizeof s->head - 1 - s->head_len);
    if (n > 0) {
      s->head_len += (size_t)n;
      s->head[s->head_len] = '\0';
      s->read_head = strstr(s->head, "\r\n\r\n") != NULL || s->head_len == sizeof s->head - 1;
    } else if (n == 0) {
      s->read_head = true;
    }
    return;
  }
  if (s->next < s->nparts) {
    const unsigned char *p = s->parts[s->next];
    size_t left = s->part_len[s->next];
    while (left) { /* a response that does not fit the socket buffer at once: small inputs do */
      ssize_t w = send(s->fd, p, left, MSG_NOSIGNAL);
      if (w <= 0)
        break;
      p += w;
      left -= (size_t)w;
    }
    s->next++;
    return;
  }
  if (!s->closed) {
    close(s->fd);
    s->fd = -1;
    s->closed = true;
  }
}

static void on_done(void *ud, lk_http_result *res) { *(lk_http_result **)ud = res; }

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  if (!L.c)
    setup();
  server s = {.fd = -1};
  size_t start = 0;
  for (size_t i = 0; i + 1 < size && s.nparts < 3; i++)
    if (data[i] == 0x00 && data[i + 1] == 0x01) {
      s.parts[s.nparts] = data + start;
      s.part_len[s.nparts++] = i - start;
      start = i + 2;
      i++;
    }
  s.parts[s.nparts] = data + start;
  s.part_len[s.nparts++] = size - start;

  lk_http_policy pol;
  lk_http_policy_init_default(&pol);
  pol.deadline = LK_MS(400);
  pol.attempt_timeout = LK_MS(300);
  pol.default_protection = false; /* no breaker learning across inputs */
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  rc.max_attempts = 1;
  if (lk_retry_policy_init(&pol.retry, &rc, NULL) != LK_OK)
    abort();
  lk_http_request *rq = lk_http_request_new("GET", L.url);
  lk_http_result *res = NULL;
  if (!rq || lk_http_submit(L.c, rq, &pol, NULL, on_done, &res) != LK_OK)
    abort();
  lk_http_request_free(rq);
  int64_t until = lk_now_ns() + LK_SEC(5);
  while (!res) {
    if (lk_now_ns() > until)
      abort(); /* the call outlived its deadline by seconds: a hang */
    struct pollfd p[NFDS + 2];
    int n = L.n;
    for (int i = 0; i < n; i++)
      p[i] = (struct pollfd){.fd = L.fd[i],
                             .events = (short)((L.ev[i] & LK_HTTP_POLL_IN ? POLLIN : 0) |
                                               (L.ev[i] & LK_HTTP_POLL_OUT ? POLLOUT : 0))};
    int ms = 1;
    if (L.timer_at != INT64_MAX && L.timer_at <= lk_now_ns())
      ms = 0;
    if (poll(p, (nfds_t)n, ms) < 0 && errno != EINTR)
      abort();
    for (int i = 0; i < n; i++) {
      if (!p[i].revents)
        continue;
      int ev = (p[i].revents & (POLLIN | POLLHUP | POLLERR) ? LK_HTTP_POLL_IN : 0) |
               (p[i].revents & (POLLOUT | POLLERR) ? LK_HTTP_POLL_OUT : 0);
      if (lk_http_client_socket_action(L.c, p[i].fd, ev) != LK_OK)
        abort();
    }
    if (L.timer_at != INT64_MAX && lk_now_ns() >= L.timer_at) {
      L.timer_at = INT64_MAX;
      if (lk_http_client_timer_action(L.c) != LK_OK)
        abort();
    }
    server_step(&s);
  }
  if (s.fd >= 0)
    close(s.fd);
  int err = lk_http_result_err(res);
  if (!lk_strerror(err) || err > 0)
    abort();
  size_t natt = 0;
  const lk_http_attempt_info *att = lk_http_result_attempts(res, &natt);
  if (natt != 1)
    abort();
  if (err == LK_OK) {
    const lk_http_response *r = lk_http_result_response(res);
    if (!r || r->status < 100 || r->status > 999 || r->body_len > size)
      abort();
  }
  if (s.read_head && s.head_len > 0 && strstr(s.head, "\r\n\r\n") && !att[0].request_sent)
    abort(); /* the server read the whole request: it was sent */
  lk_http_result_free(res);
  return 0;
}
