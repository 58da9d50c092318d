/* SPDX-License-Identifier: MIT */
/* The choice of event loop and HTTP/1 parser for `linkd serve`, measured (docs/BENCHMARKS.md).
 *
 * Parsers: one typical proxied request head (request line + 9 headers, 402 bytes) parsed in
 * full, headers delivered to the caller. Baseline: libhttp-parser 2.9 (Debian libhttp-parser-dev);
 * subject: picohttpparser as shipped inside Debian's libh2o-evloop (phr_parse_request; Debian
 * ships the library but not its header, so its one prototype is declared here).
 *
 * Loops: one ping-pong of a 64-byte message across a socketpair, both ends on one loop, through
 * each library's own stream API (what the proxy would use): libuv (uv_pipe_open, uv_read_start,
 * uv_try_write) is the baseline; the subjects are libevent 2.1 (bufferevent) and h2o's evloop
 * (h2o_socket_read_start, h2o_socket_write). One iteration = two reads and two writes.
 *
 * Usage: bench_gw_loop [rounds=11] */
#include "benchutil.h"

#define H2O_USE_LIBUV 0
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <h2o/socket.h>
#include <h2o/socket/evloop.h>
#include <http_parser.h>
#include <uv.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* --- parsers ---------------------------------------------------------------------------------- */

static const char REQ[] = "POST /v1/loans?member=42 HTTP/1.1\r\n"
                          "Host: library.example.internal:8080\r\n"
                          "User-Agent: linkd/0.1 (bench)\r\n"
                          "Accept: application/json\r\n"
                          "Content-Type: application/json\r\n"
                          "Content-Length: 27\r\n"
                          "Idempotency-Key: 7f1c0a52-8a3e-4c55-9d51-2b4f0e6a9c11\r\n"
                          "Linkd-Deadline: 2750\r\n"
                          "X-Request-Id: 1b7c9d0e2f3a4b5c6d7e8f90a1b2c3d4\r\n"
                          "Connection: keep-alive\r\n"
                          "\r\n";

struct phr_header {
  const char *name;
  size_t name_len;
  const char *value;
  size_t value_len;
};
int phr_parse_request(const char *buf, size_t len, const char **method, size_t *method_len,
                      const char **path, size_t *path_len, int *minor_version,
                      struct phr_header *headers, size_t *num_headers, size_t last_len);

typedef struct hp_ctx {
  http_parser p;
  http_parser_settings s;
  uint64_t sum;
} hp_ctx;

static int hp_field(http_parser *p, const char *at, size_t len) {
  ((hp_ctx *)p->data)->sum += len + (unsigned char)at[0];
  return 0;
}

static int hp_done(http_parser *p) {
  http_parser_pause(p, 1);
  return 0;
}

static uint64_t bench_http_parser(void *arg, uint64_t iters) {
  hp_ctx *c = arg;
  for (uint64_t i = 0; i < iters; i++) {
    http_parser_init(&c->p, HTTP_REQUEST);
    c->p.data = c;
    size_t n = http_parser_execute(&c->p, &c->s, REQ, sizeof REQ - 1);
    c->sum += n + c->p.method;
  }
  return c->sum;
}

static uint64_t bench_pico(void *arg, uint64_t iters) {
  (void)arg;
  uint64_t sum = 0;
  for (uint64_t i = 0; i < iters; i++) {
    const char *m, *path;
    size_t ml, pl, nh = 16;
    int minor;
    struct phr_header h[16];
    int n = phr_parse_request(REQ, sizeof REQ - 1, &m, &ml, &path, &pl, &minor, h, &nh, 0);
    sum += (uint64_t)n + ml + pl;
    for (size_t k = 0; k < nh; k++)
      sum += h[k].name_len + h[k].value_len + (unsigned char)h[k].name[0];
  }
  return sum;
}

/* --- loops ------------------------------------------------------------------------------------ */

static char MSG[64];

/* libuv */
typedef struct uv_ctx {
  uv_loop_t loop;
  uv_pipe_t a, b;
  char buf[256];
  uint64_t left; /* round trips still to do */
} uv_ctx;

static void uv_alloc(uv_handle_t *h, size_t sz, uv_buf_t *out) {
  (void)sz;
  uv_ctx *c = h->data;
  *out = uv_buf_init(c->buf, sizeof c->buf);
}

static void uv_send(uv_pipe_t *p) {
  uv_buf_t b = uv_buf_init(MSG, sizeof MSG);
  if (uv_try_write((uv_stream_t *)p, &b, 1) != (int)sizeof MSG)
    abort();
}

static void uv_on_b(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  (void)buf;
  uv_ctx *c = s->data;
  if (n > 0)
    uv_send(&c->b);
}

static void uv_on_a(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  (void)buf;
  uv_ctx *c = s->data;
  if (n <= 0)
    return;
  if (--c->left > 0)
    uv_send(&c->a);
  else
    uv_stop(&c->loop);
}

static uint64_t bench_uv(void *arg, uint64_t iters) {
  uv_ctx *c = arg;
  c->left = iters;
  uv_send(&c->a);
  uv_run(&c->loop, UV_RUN_DEFAULT);
  return iters;
}

static void uv_setup(uv_ctx *c, int fds[2]) {
  uv_loop_init(&c->loop);
  uv_pipe_init(&c->loop, &c->a, 0);
  uv_pipe_init(&c->loop, &c->b, 0);
  uv_pipe_open(&c->a, fds[0]);
  uv_pipe_open(&c->b, fds[1]);
  c->a.data = c->b.data = c;
  uv_read_start((uv_stream_t *)&c->a, uv_alloc, uv_on_a);
  uv_read_start((uv_stream_t *)&c->b, uv_alloc, uv_on_b);
}

/* libevent */
typedef struct ev_ctx {
  struct event_base *base;
  struct bufferevent *a, *b;
  uint64_t left;
} ev_ctx;

static void ev_on_b(struct bufferevent *bev, void *arg) {
  (void)arg;
  struct evbuffer *in = bufferevent_get_input(bev);
  evbuffer_drain(in, evbuffer_get_length(in));
  bufferevent_write(bev, MSG, sizeof MSG);
}

static void ev_on_a(struct bufferevent *bev, void *arg) {
  ev_ctx *c = arg;
  struct evbuffer *in = bufferevent_get_input(bev);
  evbuffer_drain(in, evbuffer_get_length(in));
  if (--c->left > 0)
    bufferevent_write(bev, MSG, sizeof MSG);
  else
    event_base_loopbreak(c->base);
}

static uint64_t bench_ev(void *arg, uint64_t iters) {
  ev_ctx *c = arg;
  c->left = iters;
  bufferevent_write(c->a, MSG, sizeof MSG);
  event_base_dispatch(c->base);
  return iters;
}

static void ev_setup(ev_ctx *c, int fds[2]) {
  c->base = event_base_new();
  c->a = bufferevent_socket_new(c->base, fds[0], 0);
  c->b = bufferevent_socket_new(c->base, fds[1], 0);
  bufferevent_setcb(c->a, ev_on_a, NULL, NULL, c);
  bufferevent_setcb(c->b, ev_on_b, NULL, NULL, c);
  bufferevent_enable(c->a, EV_READ | EV_WRITE);
  bufferevent_enable(c->b, EV_READ | EV_WRITE);
}

/* h2o evloop */
typedef struct h2_ctx {
  h2o_evloop_t *loop;
  h2o_socket_t *a, *b;
  uint64_t left;
  int stop;
} h2_ctx;

static h2_ctx h2;

/* h2o allows one write in flight per socket and reports its end from the loop, so a reply
 * that is due before the previous write's callback ran waits for it (s->data counts them). */
static void h2_write_now(h2o_socket_t *s);

static void h2_written(h2o_socket_t *s, const char *err) {
  (void)err;
  uintptr_t owed = (uintptr_t)s->data;
  if (owed > 1) {
    s->data = (void *)(owed - 1);
    h2_write_now(s);
  } else {
    s->data = NULL;
  }
}

static void h2_write_now(h2o_socket_t *s) {
  h2o_iovec_t v = h2o_iovec_init(MSG, sizeof MSG);
  h2o_socket_write(s, &v, 1, h2_written);
}

static void h2_send(h2o_socket_t *s) {
  uintptr_t owed = (uintptr_t)s->data;
  s->data = (void *)(owed + 1);
  if (owed == 0)
    h2_write_now(s);
}

static void h2_on_b(h2o_socket_t *s, const char *err) {
  if (err)
    return;
  h2o_buffer_consume(&s->input, s->input->size);
  h2_send(s);
}

static void h2_on_a(h2o_socket_t *s, const char *err) {
  if (err)
    return;
  h2o_buffer_consume(&s->input, s->input->size);
  if (--h2.left > 0)
    h2_send(s);
  else
    h2.stop = 1;
}

static uint64_t bench_h2o(void *arg, uint64_t iters) {
  h2_ctx *c = arg;
  c->left = iters;
  c->stop = 0;
  h2_send(c->a);
  while (!c->stop)
    h2o_evloop_run(c->loop, INT32_MAX);
  return iters;
}

static void h2_setup(h2_ctx *c, int fds[2]) {
  c->loop = h2o_evloop_create();
  c->a = h2o_evloop_socket_create(c->loop, fds[0], H2O_SOCKET_FLAG_DONT_READ);
  c->b = h2o_evloop_socket_create(c->loop, fds[1], H2O_SOCKET_FLAG_DONT_READ);
  h2o_socket_read_start(c->a, h2_on_a);
  h2o_socket_read_start(c->b, h2_on_b);
}

static void pair(int fds[2]) {
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds) != 0) {
    perror("socketpair");
    exit(1);
  }
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 11;
  lk_bench_print_placement("bench_gw_loop");
  lk_bench_pin(LK_BENCH_MAIN);
  memset(MSG, 'x', sizeof MSG);

  hp_ctx hp = {0};
  http_parser_settings_init(&hp.s);
  hp.s.on_url = hp_field;
  hp.s.on_header_field = hp_field;
  hp.s.on_header_value = hp_field;
  hp.s.on_headers_complete = hp_done;
  lk_bench_header("HTTP/1 request-head parser (402-byte head, 9 headers)", "libhttp-parser 2.9");
  lk_bench_cmp c = lk_bench_compare(bench_http_parser, &hp, bench_pico, NULL, rounds);
  lk_bench_row("picohttpparser (libh2o-evloop 2.2.5)", &c);

  int f1[2], f2[2], f3[2];
  pair(f1);
  pair(f2);
  pair(f3);
  static uv_ctx uvc;
  static ev_ctx evc;
  uv_setup(&uvc, f1);
  ev_setup(&evc, f2);
  h2_setup(&h2, f3);
  lk_bench_header("event loop: one 64-byte ping-pong over a socketpair", "libuv 1.44 stream");
  c = lk_bench_compare(bench_uv, &uvc, bench_ev, &evc, rounds);
  lk_bench_row("libevent 2.1 bufferevent", &c);
  c = lk_bench_compare(bench_uv, &uvc, bench_h2o, &h2, rounds);
  lk_bench_row("h2o 2.2 evloop socket", &c);
  return 0;
}
