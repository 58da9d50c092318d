/* SPDX-License-Identifier: MIT */
/* Broken and hostile servers, on both transports (libcurl and the native HTTP/1.1 one), on an
 * external poll() loop of the test's own: a raw server thread on 127.0.0.1 sends exact bytes
 * (junk status lines, heads that never end or exceed the head limit, smuggling-shaped framing,
 * bad lengths and chunk sizes, interim and unrequested 1xx heads, Retry-After variants, bodies
 * cut short or running past their length, silence) and the test checks what the client reports:
 * the error, every attempt's failure kind and phase, whether it retried and waited, and that the
 * call ended by its own timers or limits, never later. docs/http.md, "Broken and hostile
 * servers", tabulates the outcomes.
 *
 * Every server thread is bounded: it serves one connection at a time, each wait is a poll() of at
 * most 20 ms that also checks its stop flag, and it stops by itself after HS_LIFE_MS. */
// clang-format off
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
// clang-format on

#include <linkd/http.h>

#include "httptest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

/* The response head limit, the same on both transports: 80 KiB as docs/http.md says. */
_Static_assert(LK_HTTP_HEAD_MAX == 80 * 1024, "docs/http.md states 80 KiB");

static const lk_http_transport TRANSPORTS[] = {LK_HTTP_TRANSPORT_CURL, LK_HTTP_TRANSPORT_NATIVE};

static const char *tp_name(lk_http_transport tp) {
  return tp == LK_HTTP_TRANSPORT_NATIVE ? "native" : "curl";
}

/* --- a hostile server ------------------------------------------------------------------------ */

#define HS_LIFE_MS 20000 /* a server thread ends by itself after this */
#define HS_STEPS 4

typedef enum hs_end {
  HS_KEEP,  /* read the next request on the same connection */
  HS_CLOSE, /* FIN after the response */
  HS_RESET, /* RST after the response */
  HS_IDLE   /* say nothing more; hold the connection until the client closes or retries */
} hs_end;

typedef struct hs_step {
  const char *resp; /* sent after each request head; NULL: nothing */
  size_t len;       /* 0: strlen(resp) */
  hs_end end;
  const char *later; /* stray bytes sent `later_ms` after resp, on the same connection */
  int later_ms;
} hs_step;

typedef struct hs_cfg {
  hs_step step[HS_STEPS]; /* for requests 1, 2, ... over the server's life; the last repeats */
  int nsteps;
  const char *filler; /* after resp, written again and again: a head that never ends */
  int filler_ms;      /* pause between two fillers; 0: as fast as the socket takes them */
  size_t filler_max;  /* bound on the filler bytes after one response */
} hs_cfg;

typedef struct hs {
  int fd, port;
  hs_cfg cfg;
  pthread_mutex_t mu;
  char head[2048]; /* the last request head read (its first bytes), under mu */
  _Atomic int conns, reqs;
  _Atomic int strays; /* `later` bytes sent */
  _Atomic bool stop;
  int64_t life_end;
  pthread_t th;
} hs;

static bool hs_over(const hs *s) { return atomic_load(&s->stop) || lk_now_ns() >= s->life_end; }

/* A client waits to connect: the connection in hand is given up (the client has left it). */
static bool hs_pending(const hs *s) {
  struct pollfd p = {.fd = s->fd, .events = POLLIN};
  return poll(&p, 1, 0) > 0;
}

/* Waits up to `ms` for `fd` to become ready for `ev`; false when the server is over. */
static bool hs_wait(const hs *s, int fd, short ev, int ms, bool *ready) {
  *ready = false;
  while (ms > 0 && !hs_over(s)) {
    int step = ms < 20 ? ms : 20;
    struct pollfd p = {.fd = fd, .events = ev};
    int rc = poll(&p, 1, step);
    if (rc > 0) {
      *ready = true;
      return true;
    }
    ms -= step;
  }
  return !hs_over(s);
}

static bool hs_send(const hs *s, int c, const char *b, size_t n) {
  while (n > 0) {
    bool ready;
    if (!hs_wait(s, c, POLLOUT, 2000, &ready) || !ready)
      return false;
    ssize_t w = send(c, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EAGAIN || errno == EINTR))
      continue;
    if (w <= 0)
      return false;
    b += w;
    n -= (size_t)w;
  }
  return true;
}

/* Reads one request head (and a body its Content-Length announces) from `buf`/`c`. false on
 * EOF, error, the server's end, or a client waiting to connect while nothing has been read. */
static bool hs_read_request(hs *s, int c, char *buf, size_t cap, size_t *have) {
  for (;;) {
    char *end = *have ? memmem(buf, *have, "\r\n\r\n", 4) : NULL;
    if (end) {
      size_t used = (size_t)(end - buf) + 4;
      size_t body = 0;
      *end = '\0';
      pthread_mutex_lock(&s->mu);
      size_t hn = used - 4 < sizeof s->head - 1 ? used - 4 : sizeof s->head - 1;
      memcpy(s->head, buf, hn);
      s->head[hn] = '\0';
      pthread_mutex_unlock(&s->mu);
      for (char *l = strstr(buf, "\r\n"); l; l = strstr(l + 2, "\r\n"))
        if (strncasecmp(l + 2, "Content-Length:", 15) == 0)
          body = (size_t)strtoul(l + 17, NULL, 10);
      while (*have < used + body && *have < cap) { /* small bodies only */
        bool ready;
        if (!hs_wait(s, c, POLLIN, 2000, &ready) || !ready)
          return false;
        ssize_t n = read(c, buf + *have, cap - *have);
        if (n <= 0)
          return false;
        *have += (size_t)n;
      }
      used += body;
      if (used > *have)
        used = *have;
      memmove(buf, buf + used, *have - used);
      *have -= used;
      return true;
    }
    if (*have == cap)
      return false;
    bool ready = false;
    while (!ready) {
      if (*have == 0 && hs_pending(s))
        return false;
      if (!hs_wait(s, c, POLLIN, 20, &ready))
        return false;
    }
    ssize_t n = read(c, buf + *have, cap - *have);
    if (n <= 0)
      return false;
    *have += (size_t)n;
  }
}

/* Holds `c` without a word until the client closes it or connects anew (bounded). */
static void hs_hold(const hs *s, int c, int ms) {
  char sink[4096];
  while (ms > 0 && !hs_over(s) && !hs_pending(s)) {
    bool ready;
    if (!hs_wait(s, c, POLLIN, 20, &ready))
      return;
    ms -= 20;
    if (ready && read(c, sink, sizeof sink) <= 0)
      return;
  }
}

static void hs_serve(hs *s, int c) {
  char buf[16384];
  size_t have = 0;
  for (;;) {
    if (!hs_read_request(s, c, buf, sizeof buf, &have))
      break;
    int k = atomic_fetch_add(&s->reqs, 1);
    const hs_step *st = &s->cfg.step[k < s->cfg.nsteps ? k : s->cfg.nsteps - 1];
    if (st->resp && !hs_send(s, c, st->resp, st->len ? st->len : strlen(st->resp)))
      break;
    if (s->cfg.filler) {
      size_t fl = strlen(s->cfg.filler), sent = 0;
      while (sent + fl <= s->cfg.filler_max && !hs_over(s)) {
        if (!hs_send(s, c, s->cfg.filler, fl))
          break;
        sent += fl;
        bool ready;
        if (s->cfg.filler_ms && hs_wait(s, c, POLLIN, s->cfg.filler_ms, &ready) && ready)
          break; /* the client closed (or wrote): it has given up on this response */
      }
    }
    if (st->later) {
      bool ready;
      hs_wait(s, c, POLLIN, st->later_ms, &ready);
      if (!hs_send(s, c, st->later, strlen(st->later)))
        break;
      atomic_fetch_add(&s->strays, 1);
    }
    if (st->end == HS_KEEP)
      continue;
    if (st->end == HS_RESET) {
      struct linger lg = {1, 0};
      setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
      return; /* the caller's close() sends the RST */
    }
    if (st->end == HS_CLOSE)
      shutdown(c, SHUT_WR);
    hs_hold(s, c, st->end == HS_IDLE ? 3000 : 300);
    return;
  }
}

static void *hs_main(void *arg) {
  hs *s = arg;
  while (!hs_over(s)) {
    bool ready;
    if (!hs_wait(s, s->fd, POLLIN, 20, &ready) || !ready)
      continue;
    int c = accept(s->fd, NULL, NULL);
    if (c < 0)
      continue;
    atomic_fetch_add(&s->conns, 1);
    hs_serve(s, c);
    close(c);
  }
  return NULL;
}

/* Servers still running: a case that fails leaves through cmocka's longjmp, past its hs_stop(),
 * and the teardown stops them (their threads must not outlive the test). */
#define HS_LIVE 8
static hs *hs_live[HS_LIVE];

static hs *hs_start(const hs_cfg *cfg) {
  hs *s = calloc(1, sizeof *s);
  assert_non_null(s);
  s->cfg = *cfg;
  pthread_mutex_init(&s->mu, NULL);
  if (s->cfg.nsteps == 0)
    s->cfg.nsteps = 1;
  s->life_end = lk_now_ns() + LK_MS(HS_LIFE_MS);
  s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(s->fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(s->fd, 16), 0);
  socklen_t al = sizeof a;
  assert_int_equal(getsockname(s->fd, (struct sockaddr *)&a, &al), 0);
  s->port = ntohs(a.sin_port);
  int slot = 0;
  while (slot < HS_LIVE && hs_live[slot])
    slot++;
  assert_true(slot < HS_LIVE);
  assert_int_equal(pthread_create(&s->th, NULL, hs_main, s), 0);
  hs_live[slot] = s;
  return s;
}

static void hs_stop(hs *s) {
  for (int i = 0; i < HS_LIVE; i++)
    if (hs_live[i] == s)
      hs_live[i] = NULL;
  atomic_store(&s->stop, true);
  pthread_join(s->th, NULL);
  close(s->fd);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* Whether the last request head `s` read holds `needle` (case-sensitive). */
static bool hs_saw(hs *s, const char *needle) {
  pthread_mutex_lock(&s->mu);
  bool found = strstr(s->head, needle) != NULL;
  pthread_mutex_unlock(&s->mu);
  return found;
}

static int hs_teardown(void **state) {
  (void)state;
  for (int i = 0; i < HS_LIVE; i++)
    if (hs_live[i])
      hs_stop(hs_live[i]);
  return 0;
}

/* A server that answers every request with `resp` and then ends the connection as `end`. */
static hs_cfg one(const char *resp, hs_end end) {
  hs_cfg c = {.nsteps = 1};
  c.step[0].resp = resp;
  c.step[0].end = end;
  return c;
}

typedef struct run {
  lk_http_result *res;
  bool done;
  int err;
  size_t nattempts;
  const lk_http_attempt_info *att;
  const lk_http_response *resp;
  int64_t wall;
} run;

static void on_done(void *ud, lk_http_result *res) {
  run *r = ud;
  r->res = res;
  r->done = true;
}

static void print_run(const run *r, lk_http_transport tp, const char *what) {
  char *js = NULL;
  if (lk_http_result_json(r->res, &js, NULL) == LK_OK) {
    print_message("# %s %s: wall %.1f ms %s\n", tp_name(tp), what, (double)r->wall / 1e6, js);
    free(js);
  }
}

/* One call of `method` to `s`'s "/x", bounded by 10 s of wall time. `start_now`: the loop starts
 * it at once (lk_http_client_start_submitted) instead of from its timer. */
static void call_req(ht_loop *l, lk_http_request *r, const lk_http_policy *pol, bool start_now,
                     run *out);

static void call_ex(ht_loop *l, const hs *s, const char *method, const lk_http_policy *pol,
                    bool start_now, run *out) {
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/x", s->port);
  lk_http_request *r = lk_http_request_new(method, url);
  assert_non_null(r);
  call_req(l, r, pol, start_now, out);
}

/* One call of request `r` (the caller's reference is dropped), bounded by 10 s of wall time. */
static void call_req(ht_loop *l, lk_http_request *r, const lk_http_policy *pol, bool start_now,
                     run *out) {
  memset(out, 0, sizeof *out);
  int64_t t0 = lk_now_ns();
  assert_int_equal(lk_http_submit(l->c, r, pol, NULL, on_done, out), LK_OK);
  lk_http_request_free(r);
  if (start_now)
    assert_int_equal(lk_http_client_start_submitted(l->c), LK_OK);
  while (!out->done) {
    assert_true(lk_now_ns() - t0 < LK_SEC(10));
    ht_loop_once(l, 20);
  }
  out->wall = lk_now_ns() - t0;
  out->err = lk_http_result_err(out->res);
  out->att = lk_http_result_attempts(out->res, &out->nattempts);
  out->resp = lk_http_result_response(out->res);
}

static void call(ht_loop *l, const hs *s, const char *method, const lk_http_policy *pol, run *out) {
  call_ex(l, s, method, pol, false, out);
}

static void run_free(run *r) {
  lk_http_result_free(r->res);
  memset(r, 0, sizeof *r);
}

/* One call on one transport, the shape of most cases here: a server for `cfg`, a client on a
 * loop of that transport, one call of `method`; tp_done() frees all three. */
typedef struct tp_env {
  hs *srv;
  ht_loop l;
} tp_env;

static void tp_call(tp_env *e, const hs_cfg *cfg, lk_http_transport tp, const char *method,
                    const lk_http_policy *pol, run *r) {
  e->srv = hs_start(cfg);
  ht_loop_init(&e->l, tp);
  call(&e->l, e->srv, method, pol, r);
}

static void tp_done(tp_env *e, run *r) {
  run_free(r);
  ht_loop_free(&e->l);
  hs_stop(e->srv);
}

/* Deadline 2 s, attempts of 250 ms, connect 150 ms, 3 attempts 10 ms apart (no jitter), no
 * default protection (a budget or breaker would blur what the retry rules decide). */
static void policy(lk_http_policy *p, int attempts) {
  lk_http_policy_init_default(p);
  p->deadline = LK_SEC(2);
  p->attempt_timeout = LK_MS(250);
  p->connect_timeout = LK_MS(150);
  p->default_protection = false;
  lk_retry_config rc = p->retry.cfg;
  rc.max_attempts = attempts;
  rc.backoff.kind = LK_BACKOFF_FIXED;
  rc.backoff.base = LK_MS(10);
  rc.backoff.max = LK_MS(10);
  rc.backoff.jitter = LK_JITTER_NONE;
  assert_int_equal(lk_retry_policy_init(&p->retry, &rc, NULL), LK_OK);
}

/* What a call must report. */
typedef struct want {
  int err;
  lk_failure kind;     /* of every attempt */
  size_t attempts;     /* 1: not retried */
  lk_http_phase phase; /* of every attempt; LK_PHASE_QUEUED: not checked */
  int64_t max_wall;    /* the call ended within this (its timers, not later) */
} want;

/* `on_curl`: every attempt runs on libcurl, whatever the client's transport (a call the native
 * transport leaves to libcurl). */
static void check_on(const run *r, const want *w, lk_http_transport tp, const char *what,
                     bool on_curl) {
  print_run(r, tp, what);
  if (r->err != w->err || r->nattempts != w->attempts)
    fail_msg("%s %s: %s after %zu attempts, want %s after %zu", tp_name(tp), what,
             lk_err_name(r->err), r->nattempts, lk_err_name(w->err), w->attempts);
  for (size_t i = 0; i < r->nattempts; i++) {
    const lk_http_attempt_info *a = &r->att[i];
    assert_int_equal(a->native, tp == LK_HTTP_TRANSPORT_NATIVE && !on_curl);
    if (a->failure != w->kind)
      fail_msg("%s %s: attempt %zu %s, want %s", tp_name(tp), what, i + 1,
               lk_failure_name(a->failure), lk_failure_name(w->kind));
    if (w->phase != LK_PHASE_QUEUED && a->phase != w->phase)
      fail_msg("%s %s: attempt %zu phase %s, want %s", tp_name(tp), what, i + 1,
               lk_http_phase_name(a->phase), lk_http_phase_name(w->phase));
  }
  if (r->wall > w->max_wall)
    fail_msg("%s %s: took %.1f ms, want <= %.1f ms", tp_name(tp), what, (double)r->wall / 1e6,
             (double)w->max_wall / 1e6);
}

static void check(const run *r, const want *w, lk_http_transport tp, const char *what) {
  check_on(r, w, tp, what, false);
}

/* `cfg`'s server, one GET on each transport, checked against `w` (check_on()). */
static void expect_on(const hs_cfg *cfg, const lk_http_policy *pol, const want *w, const char *what,
                      bool on_curl) {
  for (size_t i = 0; i < 2; i++) {
    tp_env e;
    run r;
    tp_call(&e, cfg, TRANSPORTS[i], "GET", pol, &r);
    check_on(&r, w, TRANSPORTS[i], what, on_curl);
    /* a failed attempt never leaves its connection to the next one */
    if (w->err != LK_OK)
      assert_int_equal(atomic_load(&e.srv->conns), (int)w->attempts);
    tp_done(&e, &r);
  }
}

static void expect(const hs_cfg *cfg, const lk_http_policy *pol, const want *w, const char *what) {
  expect_on(cfg, pol, w, what, false);
}

/* --- status lines ---------------------------------------------------------------------------- */

/* A status line that is not HTTP/1.0 or 1.1 with a 3-digit status: junk, retried as junk (a GET
 * may be asked again), on both transports alike; never a success. */
static void test_junk_status_lines(void **s) {
  (void)s;
  static const char *const lines[] = {
      "HTTP/9.9 200 OK", "HTTP/1.2 200 OK", "HTTP/0.9 200 OK",  "ICY 200 OK",
      "200 OK",          "HTTP/1.1 OK",     "HTTP/1.1 2000 OK", "HTTP/1.1 -20 OK",
      "XTTP/1.1 200 OK", "HTTX/1.1 200 OK", "HXXP/1.1 200 OK",  "HTTP/2 200 OK",
      "HTTP/2.0 200 OK", "HTTP 200 OK",     "HTTP/1.1 099 OK",
  };
  lk_http_policy pol;
  policy(&pol, 3);
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    char resp[128];
    snprintf(resp, sizeof resp, "%s\r\nContent-Length: 2\r\n\r\nok", lines[i]);
    hs_cfg cfg = one(resp, HS_CLOSE);
    want w = {LK_EATTEMPTS, LK_F_JUNK_RESPONSE, 3, LK_PHASE_RECEIVE, LK_MS(600)};
    expect(&cfg, &pol, &w, lines[i]);
  }
  /* the same after an interim head, or in it */
  static const char *const after[] = {
      "HTTP/1.1 100 Continue\r\n\r\nHTTX/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/9.9 200 OK\r\nContent-Length: 2\r\n\r\nok",
      "HTTP/9.9 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
      "HXXP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
  };
  for (size_t i = 0; i < sizeof after / sizeof after[0]; i++) {
    hs_cfg cfg = one(after[i], HS_CLOSE);
    want w = {LK_EATTEMPTS, LK_F_JUNK_RESPONSE, 3, LK_PHASE_RECEIVE, LK_MS(600)};
    expect(&cfg, &pol, &w, after[i]);
  }
  /* a well-formed line with a status beyond 599: the response is read whole, and is junk */
  hs_cfg cfg = one("HTTP/1.1 600 OK\r\nContent-Length: 2\r\n\r\nok", HS_CLOSE);
  want w = {LK_EATTEMPTS, LK_F_JUNK_RESPONSE, 3, LK_PHASE_DONE, LK_MS(600)};
  expect(&cfg, &pol, &w, "status 600");
}

/* The close comes in the middle of a head (after whole lines: libcurl sees a head a line at a
 * time): no response, JUNK_RESPONSE, retried as junk; never the success libcurl 7.88 makes of a
 * head without its blank line. */
static void test_head_cut_short(void **s) {
  (void)s;
  static const char *const heads[] = {
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n",
      "HTTP/1.1 200 OK\r\n",
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nX-A: 1\r\n",
      "HTTP/1.1 204 No Content\r\n",
  };
  lk_http_policy pol;
  policy(&pol, 3);
  for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
    hs_cfg cfg = one(heads[i], HS_CLOSE);
    want w = {LK_EATTEMPTS, LK_F_JUNK_RESPONSE, 3, LK_PHASE_RECEIVE, LK_MS(200)};
    char what[32];
    snprintf(what, sizeof what, "head cut short %zu", i);
    expect(&cfg, &pol, &w, what);
  }
}

/* --- heads that never end, heads too large ------------------------------------------------- */

/* Header lines trickle in, one every 20 ms, and the blank line never comes: the idle timer
 * (100 ms) never fires, the attempt timer does (READ_TIMEOUT, retried), and nothing waits longer.
 */
static void test_head_trickles_forever(void **s) {
  (void)s;
  hs_cfg cfg = one("HTTP/1.1 200 OK\r\n", HS_IDLE);
  cfg.filler = "X-A: b\r\n";
  cfg.filler_ms = 20;
  cfg.filler_max = 8 * 1000; /* 20 s worth, beyond any attempt here */
  lk_http_policy pol;
  policy(&pol, 2);
  pol.idle_timeout = LK_MS(100);
  want w = {LK_EATTEMPTS, LK_F_READ_TIMEOUT, 2, LK_PHASE_RECEIVE, LK_MS(650)};
  expect(&cfg, &pol, &w, "head trickles forever");
}

/* A flood of header lines without an end (bounded at 4 MiB by the server): the head limit ends
 * the attempt long before the timers, as JUNK_RESPONSE with LK_ETOOBIG, not retried (the same
 * head would come again). Also one endless header line, and endless trailers after a chunked
 * body (the limit counts them afresh). */
static void test_head_flood(void **s) {
  (void)s;
  static char fill[1025];
  memset(fill, 'a', 1024);
  const char *line = "X-Fill: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
  const char *fillers[] = {line, fill, line};
  const char *starts[] = {"HTTP/1.1 200 OK\r\n", "HTTP/1.1 200 OK\r\nX-Big: ",
                          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n"};
  const char *what[] = {"header flood", "endless header line", "trailer flood"};
  for (int i = 0; i < 3; i++) {
    hs_cfg cfg = one(starts[i], HS_IDLE);
    cfg.filler = fillers[i];
    cfg.filler_max = (size_t)4 << 20;
    lk_http_policy pol;
    policy(&pol, 3);
    want w = {LK_ETOOBIG, LK_F_JUNK_RESPONSE, 1, LK_PHASE_RECEIVE, LK_MS(200)};
    expect(&cfg, &pol, &w, what[i]);
  }
}

/* A head of `size` bytes exactly (status line, header lines, the blank line), then a 2-byte
 * body. */
static char *head_of(size_t size) {
  char *b = malloc(size + 3);
  assert_non_null(b);
  const char *start = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n";
  size_t n = strlen(start);
  memcpy(b, start, n);
  while (size - n - 2 > 1000) { /* lines of 1000 bytes, then one of what is left */
    memcpy(b + n, "X-F: ", 5);
    memset(b + n + 5, 'f', 993);
    memcpy(b + n + 998, "\r\n", 2);
    n += 1000;
  }
  size_t last = size - n - 2;
  assert_true(last >= 8);
  memcpy(b + n, "X-L: ", 5);
  memset(b + n + 5, 'l', last - 7);
  memcpy(b + n + last - 2, "\r\n\r\nok", 6);
  b[size + 2] = '\0';
  return b;
}

/* The limit is LK_HTTP_HEAD_MAX bytes of head on both transports, to the byte: a head of exactly
 * that is read, one byte more is JUNK_RESPONSE + LK_ETOOBIG. */
static void test_head_limit_same_on_both(void **s) {
  (void)s;
  for (int over = 0; over < 2; over++) {
    char *resp = head_of(LK_HTTP_HEAD_MAX + (size_t)over);
    hs_cfg cfg = one(resp, HS_KEEP);
    lk_http_policy pol;
    policy(&pol, 3);
    if (over) {
      want w = {LK_ETOOBIG, LK_F_JUNK_RESPONSE, 1, LK_PHASE_RECEIVE, LK_MS(200)};
      expect(&cfg, &pol, &w, "head 1 byte over the limit");
    } else {
      want w = {LK_OK, LK_F_NONE, 1, LK_PHASE_DONE, LK_MS(200)};
      expect(&cfg, &pol, &w, "head at the limit");
    }
    free(resp);
  }
}

/* --- framing: lengths, chunks, smuggling shapes -------------------------------------------- */

/* Each of these heads frames its body ambiguously or not at all. On a kept-alive connection (the
 * server says nothing about closing), each is JUNK_RESPONSE as soon as the head is in, retried
 * on a new connection (the old one is never reused), never a guess at which length was meant. */
static void test_ambiguous_framing(void **s) {
  (void)s;
  static const struct {
    const char *resp, *what;
  } cases[] = {
      {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
       "5\r\nhello\r\n0\r\n\r\n",
       "Content-Length with chunked"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n"
       "5\r\nhello\r\n0\r\n\r\n",
       "chunked with Content-Length 0"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 10\r\n\r\nabcdefghij",
       "two Content-Lengths"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 10, 3\r\n\r\nabcdefghij", "a list of two lengths"},
      {"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nabc", "a negative length"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\nabc",
       "an overflowing length"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551616\r\n\r\nabc", "a length of 2^64"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 0x10\r\n\r\nabc", "a hex length"},
      {"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\nabc", "an empty length"},
  };
  lk_http_policy pol;
  policy(&pol, 3);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    hs_cfg cfg = one(cases[i].resp, HS_KEEP);
    want w = {LK_EATTEMPTS, LK_F_JUNK_RESPONSE, 3, LK_PHASE_QUEUED, LK_MS(200)};
    expect(&cfg, &pol, &w, cases[i].what);
  }
}

/* A chunk size that is junk or overflows: the body's framing broke after it began, which libcurl
 * reports as a receive error and both transports classify as PARTIAL_BODY (a reply cut short),
 * retried, at once (no timer). */
static void test_bad_chunks(void **s) {
  (void)s;
  static const char *const cases[] = {
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "fffffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
  };
  lk_http_policy pol;
  policy(&pol, 3);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    hs_cfg cfg = one(cases[i], HS_KEEP);
    want w = {LK_EATTEMPTS, LK_F_PARTIAL_BODY, 3, LK_PHASE_RECEIVE, LK_MS(200)};
    char what[32];
    snprintf(what, sizeof what, "bad chunk %zu", i);
    expect(&cfg, &pol, &w, what);
  }
}

/* --- 1xx -------------------------------------------------------------------------------------- */

/* 100 and 103 before the final head are skipped: the 200 after them is the response, with its
 * own headers only (an interim Retry-After or Link is not the final response's). */
static void test_interim_heads(void **s) {
  (void)s;
  hs_cfg cfg = one("HTTP/1.1 100 Continue\r\n\r\n"
                   "HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\nRetry-After: 1\r\n\r\n"
                   "HTTP/1.1 503 Unavailable\r\nContent-Length: 0\r\n\r\n",
                   HS_KEEP);
  cfg.step[1].resp = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n"
                     "\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
  cfg.step[1].end = HS_KEEP;
  cfg.nsteps = 2;
  for (size_t i = 0; i < 2; i++) {
    lk_http_policy pol;
    policy(&pol, 3);
    tp_env e;
    run r;
    tp_call(&e, &cfg, TRANSPORTS[i], "GET", &pol, &r);
    want w = {LK_OK, LK_F_NONE, 2, LK_PHASE_QUEUED, LK_MS(200)};
    print_run(&r, TRANSPORTS[i], "interim heads");
    assert_int_equal(r.err, w.err);
    assert_int_equal(r.nattempts, 2);
    assert_int_equal(r.att[0].failure, LK_F_HTTP_503);
    assert_int_equal(r.att[0].status, 503);
    assert_int_equal(r.att[0].retry_after, -1); /* the 103's is not the 503's */
    assert_true(r.att[1].start - (r.att[0].start + r.att[0].duration) < LK_MS(200));
    assert_int_equal(r.att[1].failure, LK_F_NONE);
    assert_true(r.att[1].reused_connection);
    assert_non_null(r.resp);
    assert_int_equal(r.resp->status, 200);
    assert_string_equal(r.resp->reason, "OK");
    assert_null(lk_http_response_header(r.resp, "Link"));
    assert_int_equal(r.resp->body_len, 2);
    assert_true(r.resp->complete);
    tp_done(&e, &r);
  }
}

/* Interim heads and then the close, or silence: never a success with status 100. */
static void test_interim_only(void **s) {
  (void)s;
  lk_http_policy pol;
  policy(&pol, 2);
  hs_cfg cfg = one("HTTP/1.1 100 Continue\r\nX-A: 1\r\n\r\n", HS_CLOSE);
  want w = {LK_EATTEMPTS, LK_F_EMPTY_RESPONSE, 2, LK_PHASE_RECEIVE, LK_MS(200)};
  for (size_t i = 0; i < 2; i++) { /* no response: a 100 is none */
    tp_env e;
    run r;
    tp_call(&e, &cfg, TRANSPORTS[i], "GET", &pol, &r);
    check(&r, &w, TRANSPORTS[i], "100 then close");
    assert_int_equal(r.att[0].status, 0);
    assert_null(r.resp);
    assert_int_equal(lk_http_result_status(r.res), 0);
    tp_done(&e, &r);
  }
  cfg = one("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", HS_IDLE);
  pol.idle_timeout = LK_MS(80);
  want w2 = {LK_EATTEMPTS, LK_F_IDLE_TIMEOUT, 2, LK_PHASE_RECEIVE, LK_MS(400)};
  expect(&cfg, &pol, &w2, "103 then silence");
}

/* A 101 nobody asked for: the connection would speak another protocol from here on, which the
 * client cannot. JUNK_RESPONSE at the end of its head, whether the server then closes or holds
 * the connection (no wait for a timer), never a success. */
static void test_unrequested_101(void **s) {
  (void)s;
  const char *resp = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\n\r\n";
  lk_http_policy pol;
  policy(&pol, 2);
  hs_end ends[] = {HS_IDLE, HS_CLOSE, HS_KEEP};
  for (int i = 0; i < 3; i++) {
    hs_cfg cfg = one(resp, ends[i]);
    want w = {LK_EATTEMPTS, LK_F_JUNK_RESPONSE, 2, LK_PHASE_RECEIVE, LK_MS(150)};
    expect(&cfg, &pol, &w, "unrequested 101");
  }
}

/* --- Retry-After --------------------------------------------------------------------------------
 */

/* A 503 with `ra_lines` (header lines, CRLF-terminated), then a 200: the retry waits `min_gap`
 * .. `max_gap` between the attempts, and the timeline shows `retry_after` (-1: none). */
static void retry_after_case(const char *ra_lines, int64_t retry_after, int64_t min_gap,
                             int64_t max_gap) {
  char resp[512];
  snprintf(resp, sizeof resp, "HTTP/1.1 503 Unavailable\r\n%sContent-Length: 0\r\n\r\n", ra_lines);
  hs_cfg cfg = {.nsteps = 2};
  cfg.step[0] = (hs_step){.resp = resp, .end = HS_KEEP};
  cfg.step[1] = (hs_step){.resp = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", .end = HS_KEEP};
  for (size_t i = 0; i < 2; i++) {
    lk_http_policy pol;
    policy(&pol, 2);
    pol.deadline = LK_SEC(3);
    tp_env e;
    run r;
    tp_call(&e, &cfg, TRANSPORTS[i], "GET", &pol, &r);
    print_run(&r, TRANSPORTS[i], ra_lines);
    assert_int_equal(r.err, LK_OK);
    assert_int_equal(r.nattempts, 2);
    assert_int_equal(r.att[0].failure, LK_F_HTTP_503);
    if (r.att[0].retry_after != retry_after)
      fail_msg("%s %s: retry_after %lld, want %lld", tp_name(TRANSPORTS[i]), ra_lines,
               (long long)r.att[0].retry_after, (long long)retry_after);
    int64_t gap = r.att[1].start - (r.att[0].start + r.att[0].duration);
    if (gap < min_gap || gap > max_gap)
      fail_msg("%s %s: waited %.1f ms, want %.1f..%.1f", tp_name(TRANSPORTS[i]), ra_lines,
               (double)gap / 1e6, (double)min_gap / 1e6, (double)max_gap / 1e6);
    assert_int_equal(r.att[0].decision.from_retry_after, min_gap >= LK_MS(500));
    tp_done(&e, &r);
  }
}

static void test_retry_after_variants(void **s) {
  (void)s;
  const int64_t backoff_lo = LK_MS(9), backoff_hi = LK_MS(150);
  /* honoured: one line, one second */
  retry_after_case("Retry-After: 1\r\n", LK_SEC(1), LK_MS(990), LK_MS(1300));
  /* lines that disagree: which one the server meant is unknown, so neither (the backoff) */
  retry_after_case("Retry-After: 1\r\nRetry-After: 0\r\n", -1, backoff_lo, backoff_hi);
  retry_after_case("Retry-After: 0\r\nRetry-After: 1\r\n", -1, backoff_lo, backoff_hi);
  retry_after_case("Retry-After: 1\r\nRetry-After: soon\r\n", -1, backoff_lo, backoff_hi);
  /* the same value twice says one thing */
  retry_after_case("Retry-After: 1\r\nRetry-After: 1\r\n", LK_SEC(1), LK_MS(990), LK_MS(1300));
  /* a date in the past: now, so the backoff */
  retry_after_case("Retry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\n", 0, backoff_lo, backoff_hi);
  /* not a delay: ignored */
  retry_after_case("Retry-After: -5\r\n", -1, backoff_lo, backoff_hi);
  retry_after_case("Retry-After: soon\r\n", -1, backoff_lo, backoff_hi);
  retry_after_case("Retry-After: 1.5\r\n", -1, backoff_lo, backoff_hi);
  retry_after_case("Retry-After: 1, 2\r\n", -1, backoff_lo, backoff_hi);
}

/* A huge Retry-After saturates (INT64_MAX ns), is capped at retry_after_cap (60 s), which no
 * deadline here leaves: the call stops at once (LK_EDEADLINE), without waiting, on both. */
static void test_retry_after_huge(void **s) {
  (void)s;
  hs_cfg cfg = one("HTTP/1.1 503 Unavailable\r\nRetry-After: 99999999999999999999999999\r\n"
                   "Content-Length: 0\r\n\r\n",
                   HS_KEEP);
  for (size_t i = 0; i < 2; i++) {
    lk_http_policy pol;
    policy(&pol, 3);
    tp_env e;
    run r;
    tp_call(&e, &cfg, TRANSPORTS[i], "GET", &pol, &r);
    want w = {LK_EDEADLINE, LK_F_HTTP_503, 1, LK_PHASE_DONE, LK_MS(200)};
    check(&r, &w, TRANSPORTS[i], "huge Retry-After");
    assert_int_equal(r.att[0].retry_after, INT64_MAX);
    assert_int_equal(r.att[0].decision.reason, LK_REASON_DELAY_TOO_LONG);
    assert_true(r.att[0].decision.from_retry_after);
    tp_done(&e, &r);
  }
}

/* --- sizes ----------------------------------------------------------------------------------- */

/* A declared Content-Length above max_response_body fails when the head ends, not after the
 * body (here it never comes): TRANSPORT_ERROR, LK_ETOOBIG, not retried, no timer waited. A HEAD
 * with the same head is fine (no body). */
static void test_declared_length_too_big(void **s) {
  (void)s;
  hs_cfg cfg = one("HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\nabc", HS_IDLE);
  lk_http_policy pol;
  policy(&pol, 3);
  pol.max_response_body = 1000;
  want w = {LK_ETOOBIG, LK_F_TRANSPORT_ERROR, 1, LK_PHASE_RECEIVE, LK_MS(150)};
  expect(&cfg, &pol, &w, "declared length too big");
  cfg.step[0].end = HS_KEEP;
  for (size_t i = 0; i < 2; i++) {
    tp_env e;
    run r;
    tp_call(&e, &cfg, TRANSPORTS[i], "HEAD", &pol, &r);
    want ok = {LK_OK, LK_F_NONE, 1, LK_PHASE_DONE, LK_MS(150)};
    check(&r, &ok, TRANSPORTS[i], "HEAD, declared length too big");
    tp_done(&e, &r);
  }
}

/* --- silence -----------------------------------------------------------------------------------
 */

/* The server reads the request and says nothing: the first-byte timer (80 ms), phase WAIT. */
static void test_silent_server(void **s) {
  (void)s;
  hs_cfg cfg = one(NULL, HS_IDLE);
  lk_http_policy pol;
  policy(&pol, 2);
  pol.first_byte_timeout = LK_MS(80);
  want w = {LK_EATTEMPTS, LK_F_FIRST_BYTE_TIMEOUT, 2, LK_PHASE_WAIT, LK_MS(400)};
  expect(&cfg, &pol, &w, "silent");
}

/* Part of the head (whole lines on both transports: libcurl tells of head bytes a line at a
 * time), then silence: the idle timer (80 ms), phase RECEIVE. */
static void test_head_then_idle(void **s) {
  (void)s;
  hs_cfg cfg = one("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n", HS_IDLE);
  lk_http_policy pol;
  policy(&pol, 2);
  pol.first_byte_timeout = LK_MS(80);
  pol.idle_timeout = LK_MS(80);
  want w = {LK_EATTEMPTS, LK_F_IDLE_TIMEOUT, 2, LK_PHASE_RECEIVE, LK_MS(400)};
  expect(&cfg, &pol, &w, "head then idle");
}

/* --- bodies cut short ------------------------------------------------------------------------ */

/* The connection ends in the middle of the body (FIN or RST; Content-Length or chunked): a
 * PARTIAL_BODY, the partial body kept with complete == false, never a success with a short body. */
static void test_cut_mid_body(void **s) {
  (void)s;
  static const struct {
    const char *resp;
    hs_end end;
    const char *what;
    size_t kept;
  } cases[] = {
      {"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc", HS_CLOSE, "length, FIN", 3},
      {"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc", HS_RESET, "length, RST", 3},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n5\r\nwo", HS_CLOSE,
       "chunked, FIN", 0},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", HS_RESET,
       "chunked, RST", 0},
  };
  lk_http_policy pol;
  policy(&pol, 2);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    for (size_t i = 0; i < 2; i++) {
      hs_cfg cfg = one(cases[c].resp, cases[c].end);
      tp_env e;
      run r;
      tp_call(&e, &cfg, TRANSPORTS[i], "GET", &pol, &r);
      want w = {LK_EATTEMPTS, LK_F_PARTIAL_BODY, 2, LK_PHASE_RECEIVE, LK_MS(250)};
      check(&r, &w, TRANSPORTS[i], cases[c].what);
      assert_non_null(r.resp);
      assert_int_equal(r.resp->status, 200);
      assert_false(r.resp->complete);
      if (cases[c].kept) /* a chunked body may be kept up to its last whole chunk, or not */
        assert_int_equal(r.resp->body_len, cases[c].kept);
      tp_done(&e, &r);
    }
  }
}

/* --- a body that runs past its length ------------------------------------------------------ */

/* Bytes past the Content-Length on a kept-alive connection (in the same write, or a forged
 * response sent while the connection idles in the pool): the second call never takes them for
 * its answer; it gets the server's real second response, on a new connection. `start_now`: the
 * second call is started before the loop looks at its sockets again (a gateway does so after a
 * read), which is when a stray byte is easiest to miss. The native transport sees the bytes when
 * it takes the connection from its pool and takes a new one; libcurl picks the connection
 * itself, so the driver can only refuse to write on it: that attempt fails unsent
 * (RESET_BEFORE_SEND) and the retry goes on a new connection. */
static void body_past_length(bool later, bool start_now) {
  const char *stray = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nPOISON";
  char first[256];
  snprintf(first, sizeof first, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok%s",
           later ? "" : stray);
  hs_cfg cfg = {.nsteps = 2};
  cfg.step[0] =
      (hs_step){.resp = first, .end = HS_KEEP, .later = later ? stray : NULL, .later_ms = 30};
  cfg.step[1] =
      (hs_step){.resp = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ngood", .end = HS_KEEP};
  for (size_t i = 0; i < 2; i++) {
    lk_http_policy pol;
    policy(&pol, 2);
    tp_env e;
    run r;
    tp_call(&e, &cfg, TRANSPORTS[i], "GET", &pol, &r);
    assert_int_equal(r.err, LK_OK);
    assert_int_equal(r.nattempts, 1);
    assert_int_equal(r.resp->body_len, 2);
    assert_memory_equal(r.resp->body, "ok", 2);
    run_free(&r);
    /* the stray response is on the connection before the next call; the loop does not run */
    for (int w = 0; later && atomic_load(&e.srv->strays) == 0 && w < 400; w++) {
      struct timespec ts = {0, 5 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
    assert_int_equal(atomic_load(&e.srv->strays), later ? 1 : 0);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    call_ex(&e.l, e.srv, "GET", &pol, start_now, &r);
    print_run(&r, TRANSPORTS[i], later ? "stray response while pooled" : "body past length");
    assert_int_equal(r.err, LK_OK);
    assert_non_null(r.resp);
    if (r.resp->body_len != 4 || memcmp(r.resp->body, "good", 4) != 0)
      fail_msg("%s: the second call got \"%.*s\"", tp_name(TRANSPORTS[i]), (int)r.resp->body_len,
               r.resp->body);
    /* libcurl with bytes still coming when it takes the connection: refused, unsent */
    bool refused = TRANSPORTS[i] == LK_HTTP_TRANSPORT_CURL && later;
    assert_int_equal(r.nattempts, refused ? 2 : 1);
    if (refused) {
      assert_int_equal(r.att[0].failure, LK_F_RESET_BEFORE_SEND);
      assert_true(r.att[0].reused_connection);
      assert_false(r.att[0].request_sent);
      assert_int_equal(r.att[0].bytes_sent, 0);
    }
    assert_false(r.att[r.nattempts - 1].reused_connection);
    assert_int_equal(atomic_load(&e.srv->conns), 2);
    assert_int_equal(atomic_load(&e.srv->reqs), 2); /* nothing written on the stray connection */
    tp_done(&e, &r);
  }
}

static void test_body_past_length(void **s) {
  (void)s;
  body_past_length(false, false);
  body_past_length(false, true);
  body_past_length(true, false);
  body_past_length(true, true);
}

/* --- content coding (lk_http_policy.compressed) ------------------------------------------------
 */

/* `n` bytes of `src` compressed by zlib: gzip (wbits 31), zlib-wrapped deflate (15) or raw
 * deflate (-15). malloc'd, *len set. */
static unsigned char *zip(const void *src, size_t n, int wbits, size_t *len) {
  z_stream z;
  memset(&z, 0, sizeof z);
  assert_int_equal(deflateInit2(&z, 9, Z_DEFLATED, wbits, 8, Z_DEFAULT_STRATEGY), Z_OK);
  size_t cap = deflateBound(&z, (uLong)n);
  unsigned char *out = malloc(cap);
  assert_non_null(out);
  z.next_in = (Bytef *)(uintptr_t)src;
  z.avail_in = (uInt)n;
  z.next_out = out;
  z.avail_out = (uInt)cap;
  assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
  *len = z.total_out;
  deflateEnd(&z);
  return out;
}

typedef enum frame { FR_LENGTH, FR_CHUNKED, FR_CLOSE } frame;

/* A 200 with `headers` (CRLF-terminated lines) and `body` framed as `fr` (FR_CLOSE: no length,
 * the close ends it). malloc'd, *len set (the body may hold NULs). */
static char *resp_of(const char *headers, const void *body, size_t blen, frame fr, size_t *len) {
  char head[512];
  int hn =
      fr == FR_LENGTH ? snprintf(head, sizeof head,
                                 "HTTP/1.1 200 OK\r\n%sContent-Length: %zu\r\n\r\n", headers, blen)
      : fr == FR_CHUNKED
          ? snprintf(head, sizeof head,
                     "HTTP/1.1 200 OK\r\n%sTransfer-Encoding: chunked\r\n\r\n%zx\r\n", headers,
                     blen)
          : snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\n%sConnection: close\r\n\r\n", headers);
  const char *tail = fr == FR_CHUNKED ? "\r\n0\r\n\r\n" : "";
  char *b = malloc((size_t)hn + blen + strlen(tail) + 1);
  assert_non_null(b);
  memcpy(b, head, (size_t)hn);
  memcpy(b + hn, body, blen);
  memcpy(b + (size_t)hn + blen, tail, strlen(tail) + 1);
  *len = (size_t)hn + blen + strlen(tail);
  return b;
}

/* 24 000 bytes of text that compress to a few hundred. */
static char *text_of(size_t *n) {
  *n = 24000;
  char *t = malloc(*n);
  assert_non_null(t);
  for (size_t i = 0; i < *n; i++)
    t[i] = "hello linkd, "[i % 13];
  return t;
}

/* gzip, x-gzip, deflate (zlib-wrapped and raw), framed by a length, chunks or the close: the
 * body is the decoded text; the head stays as received (Content-Encoding, the encoded length);
 * the request asked for them; bytes_received counts what came over the wire. On the native
 * client too: such a call runs on libcurl, which does what it asks. */
static void test_compressed_bodies(void **s) {
  (void)s;
  static const struct {
    const char *coding;
    int wbits;
    frame fr;
  } cases[] = {
      {"gzip", 31, FR_LENGTH},      {"x-gzip", 31, FR_CHUNKED}, {"deflate", 15, FR_LENGTH},
      {"deflate", -15, FR_CHUNKED}, {"gzip", 31, FR_CLOSE},
  };
  size_t tn;
  char *text = text_of(&tn);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    size_t zn, rn;
    unsigned char *z = zip(text, tn, cases[c].wbits, &zn);
    char hdr[64];
    snprintf(hdr, sizeof hdr, "Content-Encoding: %s\r\n", cases[c].coding);
    char *resp = resp_of(hdr, z, zn, cases[c].fr, &rn);
    hs_cfg cfg = one(resp, cases[c].fr == FR_CLOSE ? HS_CLOSE : HS_KEEP);
    cfg.step[0].len = rn;
    for (size_t i = 0; i < 2; i++) {
      lk_http_policy pol;
      policy(&pol, 3);
      pol.compressed = true;
      tp_env e;
      run r;
      tp_call(&e, &cfg, TRANSPORTS[i], "GET", &pol, &r);
      want w = {LK_OK, LK_F_NONE, 1, LK_PHASE_DONE, LK_MS(500)};
      check_on(&r, &w, TRANSPORTS[i], hdr, true);
      assert_true(hs_saw(e.srv, "\r\nAccept-Encoding: gzip, deflate"));
      assert_non_null(r.resp);
      assert_true(r.resp->complete);
      assert_int_equal(r.resp->body_len, tn);
      assert_memory_equal(r.resp->body, text, tn);
      assert_string_equal(lk_http_response_header(r.resp, "Content-Encoding"), cases[c].coding);
      if (cases[c].fr == FR_LENGTH)
        assert_int_equal(atol(lk_http_response_header(r.resp, "Content-Length")), (long)zn);
      assert_true(r.att[0].bytes_received < zn + 500); /* the wire's bytes, not the decoded */
      tp_done(&e, &r);
    }
    free(resp);
    free(z);
  }
  free(text);
}

/* Without `compressed` nothing is decoded, not even for a request carrying its own
 * Accept-Encoding (a proxy forwards what it receives): the body is the gzip bytes as sent, and
 * without that header the request asks for no coding at all. */
static void test_compressed_off(void **s) {
  (void)s;
  size_t tn, zn, rn;
  char *text = text_of(&tn);
  unsigned char *z = zip(text, tn, 31, &zn);
  char *resp = resp_of("Content-Encoding: gzip\r\n", z, zn, FR_LENGTH, &rn);
  hs_cfg cfg = one(resp, HS_KEEP);
  cfg.step[0].len = rn;
  for (size_t i = 0; i < 2; i++) {
    for (int own = 0; own < 2; own++) {
      hs *srv = hs_start(&cfg);
      ht_loop l;
      ht_loop_init(&l, TRANSPORTS[i]);
      lk_http_policy pol;
      policy(&pol, 3);
      char url[64];
      snprintf(url, sizeof url, "http://127.0.0.1:%d/x", srv->port);
      lk_http_request *req = lk_http_request_new("GET", url);
      assert_non_null(req);
      if (own)
        assert_int_equal(lk_http_request_add_header(req, "Accept-Encoding", "gzip"), LK_OK);
      run r;
      call_req(&l, req, &pol, false, &r);
      want w = {LK_OK, LK_F_NONE, 1, LK_PHASE_DONE, LK_MS(500)};
      check(&r, &w, TRANSPORTS[i], own ? "own Accept-Encoding" : "not compressed");
      assert_int_equal(hs_saw(srv, "Accept-Encoding"), own);
      assert_int_equal(r.resp->body_len, zn);
      assert_memory_equal(r.resp->body, z, zn);
      run_free(&r);
      ht_loop_free(&l);
      hs_stop(srv);
    }
  }
  free(resp);
  free(z);
  free(text);
}

/* The limit counts decoded bytes: 16 MiB of zeros in 16 KiB of gzip against a limit of 1 MiB
 * ends with LK_ETOOBIG as soon as the decoded bytes pass it (not retried, no timer waited); and
 * incompressible bytes whose gzip is longer than the limit, though they are not, pass. */
static void test_compressed_bomb(void **s) {
  (void)s;
  size_t bn = (size_t)16 << 20, zn, rn;
  char *zeros = calloc(1, bn);
  assert_non_null(zeros);
  unsigned char *z = zip(zeros, bn, 31, &zn);
  free(zeros);
  assert_true(zn < 64 * 1024);
  char *resp = resp_of("Content-Encoding: gzip\r\n", z, zn, FR_LENGTH, &rn);
  hs_cfg cfg = one(resp, HS_KEEP);
  cfg.step[0].len = rn;
  lk_http_policy pol;
  policy(&pol, 3);
  pol.compressed = true;
  pol.max_response_body = (size_t)1 << 20;
  want w = {LK_ETOOBIG, LK_F_TRANSPORT_ERROR, 1, LK_PHASE_RECEIVE, LK_MS(500)};
  expect_on(&cfg, &pol, &w, "gzip bomb", true);
  free(resp);
  free(z);

  unsigned char noise[2000];
  uint32_t x = 12345;
  for (size_t i = 0; i < sizeof noise; i++)
    noise[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 24);
  z = zip(noise, sizeof noise, 31, &zn);
  assert_true(zn > sizeof noise + 10);
  resp = resp_of("Content-Encoding: gzip\r\n", z, zn, FR_LENGTH, &rn);
  cfg = one(resp, HS_KEEP);
  cfg.step[0].len = rn;
  pol.max_response_body = sizeof noise + 5; /* under the encoded length, over the decoded */
  want ok = {LK_OK, LK_F_NONE, 1, LK_PHASE_DONE, LK_MS(500)};
  expect_on(&cfg, &pol, &ok, "incompressible, encoded length over the limit", true);
  free(resp);
  free(z);
}

/* Bodies that do not decode are junk; compressed streams that end early are cut short, even
 * when their framing is complete (libcurl 7.88 would call them whole). Both retried as broken
 * responses are (a GET is asked again), phase RECEIVE, never a success; a POST without a key is
 * not retried. */
static void test_compressed_broken(void **s) {
  (void)s;
  size_t tn, zn;
  char *text = text_of(&tn);
  unsigned char *z = zip(text, tn, 31, &zn);
  unsigned char bad_crc[1024], trailing[1024];
  assert_true(zn + 5 < sizeof bad_crc);
  memcpy(bad_crc, z, zn);
  bad_crc[zn - 8] ^= 0xff;
  memcpy(trailing, z, zn);
  memcpy(trailing + zn, "junk!", 5);
  static const unsigned char corrupt[] = "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03XXXXXXXXXXXX";
  const struct {
    const char *what, *coding;
    const void *body;
    size_t len;
    frame fr;
    lk_failure kind;
  } cases[] = {
      {"corrupt", "gzip", corrupt, sizeof corrupt - 1, FR_LENGTH, LK_F_JUNK_RESPONSE},
      {"not gzip at all", "gzip", "hello", 5, FR_LENGTH, LK_F_JUNK_RESPONSE},
      {"bad checksum", "gzip", bad_crc, zn, FR_LENGTH, LK_F_JUNK_RESPONSE},
      {"bytes after the stream", "gzip", trailing, zn + 5, FR_LENGTH, LK_F_JUNK_RESPONSE},
      {"a coding not asked for", "br", "hello", 5, FR_LENGTH, LK_F_JUNK_RESPONSE},
      {"two codings stacked", "gzip, gzip", z, zn, FR_LENGTH, LK_F_JUNK_RESPONSE},
      {"half the stream, length", "gzip", z, zn / 2, FR_LENGTH, LK_F_PARTIAL_BODY},
      {"half the stream, chunked", "gzip", z, zn / 2, FR_CHUNKED, LK_F_PARTIAL_BODY},
      {"half the stream, close", "gzip", z, zn / 2, FR_CLOSE, LK_F_PARTIAL_BODY},
      {"no trailer, length", "gzip", z, zn - 8, FR_LENGTH, LK_F_PARTIAL_BODY},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char hdr[64];
    size_t rn;
    snprintf(hdr, sizeof hdr, "Content-Encoding: %s\r\n", cases[c].coding);
    char *resp = resp_of(hdr, cases[c].body, cases[c].len, cases[c].fr, &rn);
    hs_cfg cfg = one(resp, HS_CLOSE);
    cfg.step[0].len = rn;
    lk_http_policy pol;
    policy(&pol, 3);
    pol.compressed = true;
    want w = {LK_EATTEMPTS, cases[c].kind, 3, LK_PHASE_RECEIVE, LK_MS(600)};
    expect_on(&cfg, &pol, &w, cases[c].what, true);
    /* the same to a POST without a key: it may have been processed, so it is not asked again */
    tp_env e;
    run r;
    tp_call(&e, &cfg, LK_HTTP_TRANSPORT_CURL, "POST", &pol, &r);
    want post = {LK_ENOTRETRYABLE, cases[c].kind, 1, LK_PHASE_RECEIVE, LK_MS(300)};
    check_on(&r, &post, LK_HTTP_TRANSPORT_CURL, cases[c].what, true);
    assert_non_null(r.resp);
    assert_int_equal(r.resp->status, 200);
    assert_false(r.resp->complete);
    tp_done(&e, &r);
    free(resp);
  }
  free(z);
  free(text);
}

/* --- where connections go: resolve, connect_to ---------------------------------------------- */

/* A made-up name resolved to the server by a resolve entry, on every attempt (a 503, then the
 * 200): each attempt gets a connection of its own; the Host header names the URL's host. A call
 * without the entry on the same client does not see the address (the call's DNS cache is its
 * own) and never reaches the server. On the native client too (such calls run on libcurl). */
static void test_resolve(void **s) {
  (void)s;
  hs_cfg cfg = {.nsteps = 2};
  cfg.step[0] =
      (hs_step){.resp = "HTTP/1.1 503 Unavailable\r\nContent-Length: 0\r\n\r\n", .end = HS_KEEP};
  cfg.step[1] = (hs_step){.resp = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", .end = HS_KEEP};
  for (size_t i = 0; i < 2; i++) {
    hs *srv = hs_start(&cfg);
    ht_loop l;
    ht_loop_init(&l, TRANSPORTS[i]);
    char url[64], entry[64], host[48];
    snprintf(url, sizeof url, "http://books.test:%d/x", srv->port);
    snprintf(entry, sizeof entry, "books.test:%d:127.0.0.1", srv->port);
    snprintf(host, sizeof host, "\r\nHost: books.test:%d\r\n", srv->port);
    const char *entries[] = {entry};
    lk_http_policy pol;
    policy(&pol, 3);
    pol.resolve = entries;
    pol.nresolve = 1;
    run r;
    call_req(&l, lk_http_request_new("GET", url), &pol, false, &r);
    print_run(&r, TRANSPORTS[i], "resolve");
    assert_int_equal(r.err, LK_OK);
    assert_int_equal(r.nattempts, 2);
    assert_int_equal(r.att[0].failure, LK_F_HTTP_503);
    assert_false(r.att[0].native);
    assert_false(r.att[1].reused_connection);
    assert_int_equal(atomic_load(&srv->reqs), 2);
    assert_int_equal(atomic_load(&srv->conns), 2);
    assert_true(hs_saw(srv, host));
    run_free(&r);
    /* the same name without the entry: not pinned for this call */
    pol.resolve = NULL;
    pol.nresolve = 0;
    pol.dns_timeout = LK_MS(200);
    ht_attempts(&pol, 1);
    call_req(&l, lk_http_request_new("GET", url), &pol, false, &r);
    print_run(&r, TRANSPORTS[i], "no resolve entry");
    assert_int_not_equal(r.err, LK_OK);
    assert_int_equal(lk_http_result_status(r.res), 0);
    assert_int_equal(atomic_load(&srv->reqs), 2);
    run_free(&r);
    ht_loop_free(&l);
    hs_stop(srv);
  }
}

/* connect_to sends a made-up host's requests (port 80) to the server, on every attempt, with
 * Host still the URL's; and an IP literal's, which the native transport would send itself,
 * run on libcurl where the entry is honoured (port 1 would refuse the connection). */
static void test_connect_to(void **s) {
  (void)s;
  hs_cfg cfg = {.nsteps = 2};
  cfg.step[0] =
      (hs_step){.resp = "HTTP/1.1 503 Unavailable\r\nContent-Length: 0\r\n\r\n", .end = HS_KEEP};
  cfg.step[1] = (hs_step){.resp = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", .end = HS_KEEP};
  for (size_t i = 0; i < 2; i++) {
    for (int literal = 0; literal < 2; literal++) {
      hs *srv = hs_start(&cfg);
      ht_loop l;
      ht_loop_init(&l, TRANSPORTS[i]);
      char entry[64];
      snprintf(entry, sizeof entry, "%s:127.0.0.1:%d", literal ? "127.0.0.1:1" : "books.test:80",
               srv->port);
      const char *entries[] = {"other.test::127.0.0.1:1", entry};
      lk_http_policy pol;
      policy(&pol, 3);
      pol.connect_to = entries;
      pol.nconnect_to = 2;
      run r;
      call_req(&l,
               lk_http_request_new("GET", literal ? "http://127.0.0.1:1/x" : "http://books.test/x"),
               &pol, false, &r);
      print_run(&r, TRANSPORTS[i], entry);
      assert_int_equal(r.err, LK_OK);
      assert_int_equal(r.nattempts, 2);
      assert_int_equal(r.att[0].failure, LK_F_HTTP_503);
      assert_false(r.att[0].native);
      assert_false(r.att[1].native);
      assert_int_equal(atomic_load(&srv->reqs), 2);
      assert_true(hs_saw(srv, literal ? "\r\nHost: 127.0.0.1:1\r\n" : "\r\nHost: books.test\r\n"));
      run_free(&r);
      ht_loop_free(&l);
      hs_stop(srv);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_junk_status_lines, hs_teardown),
      cmocka_unit_test_teardown(test_head_cut_short, hs_teardown),
      cmocka_unit_test_teardown(test_head_trickles_forever, hs_teardown),
      cmocka_unit_test_teardown(test_head_flood, hs_teardown),
      cmocka_unit_test_teardown(test_head_limit_same_on_both, hs_teardown),
      cmocka_unit_test_teardown(test_ambiguous_framing, hs_teardown),
      cmocka_unit_test_teardown(test_bad_chunks, hs_teardown),
      cmocka_unit_test_teardown(test_interim_heads, hs_teardown),
      cmocka_unit_test_teardown(test_interim_only, hs_teardown),
      cmocka_unit_test_teardown(test_unrequested_101, hs_teardown),
      cmocka_unit_test_teardown(test_retry_after_variants, hs_teardown),
      cmocka_unit_test_teardown(test_retry_after_huge, hs_teardown),
      cmocka_unit_test_teardown(test_declared_length_too_big, hs_teardown),
      cmocka_unit_test_teardown(test_silent_server, hs_teardown),
      cmocka_unit_test_teardown(test_head_then_idle, hs_teardown),
      cmocka_unit_test_teardown(test_cut_mid_body, hs_teardown),
      cmocka_unit_test_teardown(test_body_past_length, hs_teardown),
      cmocka_unit_test_teardown(test_compressed_bodies, hs_teardown),
      cmocka_unit_test_teardown(test_compressed_off, hs_teardown),
      cmocka_unit_test_teardown(test_compressed_bomb, hs_teardown),
      cmocka_unit_test_teardown(test_compressed_broken, hs_teardown),
      cmocka_unit_test_teardown(test_resolve, hs_teardown),
      cmocka_unit_test_teardown(test_connect_to, hs_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
