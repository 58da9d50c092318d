/* SPDX-License-Identifier: MIT */
/* The native HTTP/1.1 transport (LK_HTTP_TRANSPORT_NATIVE) against faultd and a scripted raw
 * server, on an external poll() loop of the test's own. Every fault scenario runs under both
 * transports and must end in the same failure kinds, phases and "sent" verdicts (the libcurl
 * path is the reference: test_http_faults.c checks it in its own loop); framing (chunked,
 * close-delimited, HEAD, 204, 1xx), pooled connections the server closed, reuse after a response
 * with trailing bytes, oversized heads and bodies, timeouts per phase and cancellation are the
 * native transport's own. */
// clang-format off
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
// clang-format on

#include "httptest.h"

#include <linkd/clock.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct done_slot {
  lk_http_result *res;
  bool done;
} done_slot;

static void on_done(void *ud, lk_http_result *res) {
  done_slot *d = ud;
  d->res = res;
  d->done = true;
}

typedef struct run {
  lk_http_result *res;
  int err;
  size_t nattempts;
  const lk_http_attempt_info *att;
  int64_t wall;
} run;

/* One call on the loop, bounded by 10 s of wall time. */
static void loop_call(ht_loop *l, const char *method, const char *url, const void *body, size_t len,
                      const lk_http_policy *pol, lk_http_cancel *cancel, run *out) {
  lk_http_request *r = lk_http_request_new(method, url);
  assert_non_null(r);
  if (body)
    assert_int_equal(lk_http_request_set_body(r, body, len), LK_OK);
  done_slot d = {NULL, false};
  int64_t t0 = lk_now_ns();
  assert_int_equal(lk_http_submit(l->c, r, pol, cancel, on_done, &d), LK_OK);
  lk_http_request_free(r);
  while (!d.done) {
    assert_true(lk_now_ns() - t0 < LK_SEC(10));
    ht_loop_once(l, 50);
  }
  out->wall = lk_now_ns() - t0;
  out->res = d.res;
  out->err = lk_http_result_err(d.res);
  out->att = lk_http_result_attempts(d.res, &out->nattempts);
}

static void run_free(run *r) {
  lk_http_result_free(r->res);
  memset(r, 0, sizeof *r);
}

static const char *tp_name(lk_http_transport tp) {
  return tp == LK_HTTP_TRANSPORT_NATIVE ? "native" : "curl";
}

/* --- fault scenarios under both transports ------------------------------------------------- */

typedef struct want {
  lk_failure kind;
  size_t attempts;
  int err;
  bool sent;
  lk_http_phase phase; /* LK_PHASE_QUEUED: not checked */
} want;

typedef struct scen {
  const char *mode;
  const char *args[8];
  const char *method;
  bool body;
  int64_t first_byte, idle, write; /* timeouts, 0: none */
  want w;
} scen;

static void check_run(const run *r, const want *w, lk_http_transport tp, const char *what) {
  print_message("%s %s: err %s, %zu attempts, first %s phase %s sent %d\n", tp_name(tp), what,
                lk_err_name(r->err), r->nattempts,
                r->nattempts ? lk_failure_name(r->att[0].failure) : "-",
                r->nattempts ? lk_http_phase_name(r->att[0].phase) : "-",
                r->nattempts ? r->att[0].request_sent : -1);
  assert_int_equal(r->err, w->err);
  assert_int_equal(r->nattempts, w->attempts);
  for (size_t i = 0; i < r->nattempts; i++) {
    assert_int_equal(r->att[i].native, tp == LK_HTTP_TRANSPORT_NATIVE);
    assert_int_equal(r->att[i].failure, w->kind);
    assert_int_equal(r->att[i].request_sent, w->sent);
    if (w->phase != LK_PHASE_QUEUED)
      assert_int_equal(r->att[i].phase, w->phase);
  }
}

static void scenario(const scen *sc) {
  for (int tpi = 0; tpi < 2; tpi++) {
    lk_http_transport tp = tpi ? LK_HTTP_TRANSPORT_NATIVE : LK_HTTP_TRANSPORT_CURL;
    const char *a[12];
    int n = 0;
    for (; sc->args[n]; n++)
      a[n] = sc->args[n];
    a[n++] = "--max-seconds";
    a[n++] = "60";
    a[n] = NULL;
    faultd_proc fp;
    assert_int_equal(faultd_start(&fp, sc->mode, a), 0);
    char url[128];
    assert_int_equal(faultd_url(&fp, "/x", url, sizeof url), 0);
    ht_loop l;
    ht_loop_init(&l, tp);
    lk_http_policy pol;
    ht_policy(&pol);
    pol.first_byte_timeout = sc->first_byte;
    pol.idle_timeout = sc->idle;
    pol.write_timeout = sc->write;
    run r;
    loop_call(&l, sc->method, url, sc->body ? "{\"book\":1}" : NULL, sc->body ? 10 : 0, &pol, NULL,
              &r);
    check_run(&r, &sc->w, tp, sc->mode);
    assert_true(r.wall < pol.deadline + LK_MS(100));
    run_free(&r);
    ht_loop_free(&l);
    faultd_stop(&fp);
  }
}

static void test_refused(void **s) {
  (void)s;
  scen sc = {
      "refuse", {NULL}, "GET", false,
      0,        0,      0,     {LK_F_CONNECT_REFUSED, 3, LK_EATTEMPTS, false, LK_PHASE_CONNECT}};
  scenario(&sc);
  sc.method = "POST";
  sc.body = true;
  scenario(&sc);
}

static void test_connect_timeout(void **s) {
  (void)s;
  scen sc = {"blackhole", {NULL},
             "POST",      true,
             0,           0,
             0,           {LK_F_CONNECT_TIMEOUT, 3, LK_EATTEMPTS, false, LK_PHASE_CONNECT}};
  scenario(&sc);
}

static void test_read_then_reset(void **s) {
  (void)s;
  scen sc = {"read_then_reset",
             {NULL},
             "GET",
             false,
             0,
             0,
             0,
             {LK_F_RESET_AFTER_SEND, 3, LK_EATTEMPTS, true, LK_PHASE_WAIT}};
  scenario(&sc);
  /* a POST without a key may have been processed: not retried */
  scen post = {"read_then_reset",
               {NULL},
               "POST",
               true,
               0,
               0,
               0,
               {LK_F_RESET_AFTER_SEND, 1, LK_ENOTRETRYABLE, true, LK_PHASE_WAIT}};
  scenario(&post);
}

static void test_read_then_close(void **s) {
  (void)s;
  scen sc = {"read_then_close",
             {NULL},
             "POST",
             true,
             0,
             0,
             0,
             {LK_F_EMPTY_RESPONSE, 1, LK_ENOTRETRYABLE, true, LK_PHASE_WAIT}};
  scenario(&sc);
}

static void test_reset_before_read(void **s) {
  (void)s;
  scen sc = {"reset_before_read",
             {"--delay-ms", "30", NULL},
             "GET",
             false,
             0,
             0,
             0,
             {LK_F_RESET_AFTER_SEND, 3, LK_EATTEMPTS, true, LK_PHASE_QUEUED}};
  scenario(&sc);
}

static void test_accept_noread(void **s) {
  (void)s;
  scen sc = {"accept_noread",
             {NULL},
             "GET",
             false,
             0,
             0,
             0,
             {LK_F_READ_TIMEOUT, 3, LK_EATTEMPTS, true, LK_PHASE_WAIT}};
  scenario(&sc);
}

static void test_first_byte_timeout(void **s) {
  (void)s;
  scen sc = {"slow",     {"--delay-ms", "1000", NULL},
             "GET",      false,
             LK_MS(100), 0,
             0,          {LK_F_FIRST_BYTE_TIMEOUT, 3, LK_EATTEMPTS, true, LK_PHASE_WAIT}};
  scenario(&sc);
}

static void test_idle_timeout(void **s) {
  (void)s;
  scen sc = {"partial_stall",
             {NULL},
             "GET",
             false,
             0,
             LK_MS(80),
             0,
             {LK_F_IDLE_TIMEOUT, 3, LK_EATTEMPTS, true, LK_PHASE_RECEIVE}};
  scenario(&sc);
}

static void test_503(void **s) {
  (void)s;
  scen sc = {"status", {"--status", "503", NULL},
             "GET",    false,
             0,        0,
             0,        {LK_F_HTTP_503, 3, LK_EATTEMPTS, true, LK_PHASE_DONE}};
  scenario(&sc);
}

/* A large upload the server never reads: the write timer, request not sent. */
static void test_write_timeout(void **s) {
  (void)s;
  for (int tpi = 0; tpi < 2; tpi++) {
    lk_http_transport tp = tpi ? LK_HTTP_TRANSPORT_NATIVE : LK_HTTP_TRANSPORT_CURL;
    faultd_proc fp;
    const char *a[] = {"--max-seconds", "60", NULL};
    assert_int_equal(faultd_start(&fp, "accept_noread", a), 0);
    char url[128];
    faultd_url(&fp, "/x", url, sizeof url);
    size_t n = (size_t)32 << 20;
    void *blob = ht_blob(n);
    ht_loop l;
    ht_loop_init(&l, tp);
    lk_http_policy pol;
    ht_policy(&pol);
    pol.write_timeout = LK_MS(150);
    run r;
    loop_call(&l, "POST", url, blob, n, &pol, NULL, &r);
    want w = {LK_F_WRITE_TIMEOUT, 3, LK_EATTEMPTS, false, LK_PHASE_SEND};
    check_run(&r, &w, tp, "write timeout");
    for (size_t i = 0; i < r.nattempts; i++)
      assert_true(r.att[i].bytes_sent > 0 && r.att[i].bytes_sent < n);
    run_free(&r);
    ht_loop_free(&l);
    free(blob);
    faultd_stop(&fp);
  }
}

/* RST in the middle of a large upload: not fully written, so even an unkeyed POST is retried. */
static void test_reset_mid_upload(void **s) {
  (void)s;
  for (int tpi = 0; tpi < 2; tpi++) {
    lk_http_transport tp = tpi ? LK_HTTP_TRANSPORT_NATIVE : LK_HTTP_TRANSPORT_CURL;
    faultd_proc fp;
    const char *a[] = {"--rcvbuf", "4096", "--max-seconds", "60", NULL};
    assert_int_equal(faultd_start(&fp, "reset_mid_upload", a), 0);
    char url[128];
    faultd_url(&fp, "/x", url, sizeof url);
    size_t n = (size_t)16 << 20;
    void *blob = ht_blob(n);
    ht_loop l;
    ht_loop_init(&l, tp);
    lk_http_policy pol;
    ht_policy(&pol);
    run r;
    loop_call(&l, "POST", url, blob, n, &pol, NULL, &r);
    want w = {LK_F_RESET_BEFORE_SEND, 3, LK_EATTEMPTS, false, LK_PHASE_QUEUED};
    check_run(&r, &w, tp, "reset mid upload");
    run_free(&r);
    ht_loop_free(&l);
    free(blob);
    faultd_stop(&fp);
  }
}

/* --- keep-alive ------------------------------------------------------------------------------ */

/* Calls in a row on one client reuse one connection: faultd sees seq 1, 2, 3 on connection 1,
 * and the request carried the body and the driver's headers. */
static void test_reuse_and_wire(void **s) {
  (void)s;
  faultd_proc fp;
  const char *a[] = {"--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&fp, "ok", a), 0);
  char url[128];
  faultd_url(&fp, "/x?q=1", url, sizeof url);
  ht_loop l;
  ht_loop_init(&l, LK_HTTP_TRANSPORT_NATIVE);
  lk_http_policy pol;
  ht_policy(&pol);
  pol.idem_mode = LK_IDEM_AUTO;
  for (int i = 0; i < 3; i++) {
    run r;
    loop_call(&l, "POST", url, "{\"book\":1}", 10, &pol, NULL, &r);
    assert_int_equal(r.err, LK_OK);
    assert_int_equal(r.nattempts, 1);
    assert_int_equal(r.att[0].reused_connection, i > 0);
    assert_true(r.att[0].native);
    assert_true(r.att[0].bytes_sent > 10);
    const lk_http_response *rs = lk_http_result_response(r.res);
    assert_non_null(rs);
    assert_int_equal(rs->status, 200);
    assert_int_equal(rs->body_len, strlen("{\"ok\":true}"));
    assert_memory_equal(rs->body, "{\"ok\":true}", rs->body_len);
    run_free(&r);
  }
  faultd_req q[4];
  assert_int_equal(faultd_wait_requests(&fp, 3, 2000), 3);
  assert_int_equal(faultd_requests(&fp, q, 4), 3);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(q[i].conn, 1);
    assert_int_equal(q[i].seq, i + 1);
    assert_string_equal(q[i].method, "POST");
    assert_string_equal(q[i].path, "/x?q=1");
    assert_true(q[i].complete);
    assert_int_equal(q[i].body_bytes, 10);
    assert_true(q[i].has_idempotency_key);
    assert_string_equal(q[i].attempt, "1");
    assert_true(q[i].has_deadline);
  }
  ht_loop_free(&l);
  faultd_stop(&fp);
}

/* The server closes a pooled connection right after its response: the close is seen by the
 * loop's read event while the connection is idle, so the next request goes on a new one and does
 * not fail; none is re-sent. */
static void test_pooled_closed_after_response(void **s) {
  (void)s;
  faultd_proc fp;
  const char *a[] = {
      "--close-after", "1", "--close-when", "after_response", "--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&fp, "keepalive_close", a), 0);
  char url[128];
  faultd_url(&fp, "/x", url, sizeof url);
  ht_loop l;
  ht_loop_init(&l, LK_HTTP_TRANSPORT_NATIVE);
  lk_http_policy pol;
  ht_policy(&pol);
  for (int i = 0; i < 3; i++) {
    run r;
    loop_call(&l, "POST", url, "{\"book\":1}", 10, &pol, NULL, &r);
    assert_int_equal(r.err, LK_OK);
    assert_int_equal(r.nattempts, 1);
    assert_int_equal(r.att[0].resends, 0);
    run_free(&r);
    /* let the FIN arrive and the loop see it, as a busy gateway's loop would */
    int64_t until = lk_now_ns() + LK_MS(50);
    while (lk_now_ns() < until)
      ht_loop_once(&l, 10);
  }
  faultd_req q[4];
  assert_int_equal(faultd_wait_requests(&fp, 3, 2000), 3);
  assert_int_equal(faultd_requests(&fp, q, 4), 3);
  for (int i = 0; i < 3; i++)
    assert_int_equal(q[i].seq, 1);
  assert_true(l.closes >= 2);
  ht_loop_free(&l);
  faultd_stop(&fp);
}

/* The server reads request 2 on the pooled connection and closes it unanswered: a GET is written
 * again on a new connection within the same attempt (as libcurl does) and succeeds; an unkeyed
 * POST is not (resend guard ABORT) and fails as maybe processed. */
static void test_pooled_closed_before_response(void **s) {
  (void)s;
  for (int post = 0; post < 2; post++) {
    for (int tpi = 0; tpi < 2; tpi++) {
      lk_http_transport tp = tpi ? LK_HTTP_TRANSPORT_NATIVE : LK_HTTP_TRANSPORT_CURL;
      faultd_proc fp;
      const char *a[] = {"--close-after", "1", "--max-seconds", "60", NULL};
      assert_int_equal(faultd_start(&fp, "keepalive_close", a), 0);
      char url[128];
      faultd_url(&fp, "/x", url, sizeof url);
      ht_loop l;
      ht_loop_init(&l, tp);
      lk_http_policy pol;
      ht_policy(&pol);
      const char *m = post ? "POST" : "GET";
      const void *body = post ? "{\"book\":1}" : NULL;
      run r;
      loop_call(&l, m, url, body, post ? 10 : 0, &pol, NULL, &r);
      assert_int_equal(r.err, LK_OK);
      run_free(&r);
      loop_call(&l, m, url, body, post ? 10 : 0, &pol, NULL, &r);
      print_message("%s %s second call: %s, %zu attempts, resends %d\n", tp_name(tp), m,
                    lk_err_name(r.err), r.nattempts, r.att[0].resends);
      assert_int_equal(r.att[0].native, tp == LK_HTTP_TRANSPORT_NATIVE);
      assert_int_equal(r.att[0].resends, 1);
      if (post) {
        assert_int_equal(r.err, LK_ENOTRETRYABLE);
        assert_int_equal(r.nattempts, 1);
        assert_int_equal(r.att[0].failure, LK_F_RESET_AFTER_SEND);
      } else {
        assert_int_equal(r.err, LK_OK);
        assert_int_equal(r.nattempts, 1);
        assert_int_equal(faultd_wait_requests(&fp, 3, 2000), 3);
      }
      run_free(&r);
      ht_loop_free(&l);
      faultd_stop(&fp);
    }
  }
}

/* --- a scripted raw server ------------------------------------------------------------------- */

/* One thread; each connection is served in turn: for each request head read (up to the blank
 * line, bodies are not expected), the next scripted response is written; a response marked
 * close ends the connection after it. Counts connections and requests. */
typedef struct rsrv {
  int fd, port;
  const char *const *resp; /* NULL-terminated; the last repeats */
  const bool *close_after;
  _Atomic int conns, reqs;
  _Atomic bool stop;
  pthread_t th;
} rsrv;

static void *rsrv_main(void *arg) {
  rsrv *v = arg;
  while (!atomic_load(&v->stop)) {
    struct pollfd p = {.fd = v->fd, .events = POLLIN};
    if (poll(&p, 1, 50) <= 0)
      continue;
    int c = accept(v->fd, NULL, NULL);
    if (c < 0)
      continue;
    atomic_fetch_add(&v->conns, 1);
    char buf[8192];
    size_t have = 0;
    bool open = true;
    while (open && !atomic_load(&v->stop)) {
      char *end = have ? memmem(buf, have, "\r\n\r\n", 4) : NULL;
      if (!end) {
        struct pollfd q = {.fd = c, .events = POLLIN};
        if (poll(&q, 1, 50) <= 0)
          continue;
        ssize_t n = read(c, buf + have, sizeof buf - have);
        if (n <= 0)
          break;
        have += (size_t)n;
        continue;
      }
      size_t used = (size_t)(end - buf) + 4;
      memmove(buf, buf + used, have - used);
      have -= used;
      int k = atomic_fetch_add(&v->reqs, 1);
      int last = 0;
      while (v->resp[last + 1])
        last++;
      int i = k < last ? k : last;
      const char *r = v->resp[i];
      size_t len = strlen(r);
      for (size_t off = 0; off < len;) {
        ssize_t w = write(c, r + off, len - off);
        if (w <= 0)
          break;
        off += (size_t)w;
      }
      if (v->close_after && v->close_after[i])
        open = false;
    }
    close(c);
  }
  return NULL;
}

static void rsrv_start(rsrv *v, const char *const *resp, const bool *close_after) {
  memset(v, 0, sizeof *v);
  v->resp = resp;
  v->close_after = close_after;
  v->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(v->fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(v->fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(v->fd, 16), 0);
  socklen_t al = sizeof a;
  getsockname(v->fd, (struct sockaddr *)&a, &al);
  v->port = ntohs(a.sin_port);
  assert_int_equal(pthread_create(&v->th, NULL, rsrv_main, v), 0);
}

static void rsrv_stop(rsrv *v) {
  atomic_store(&v->stop, true);
  pthread_join(v->th, NULL);
  close(v->fd);
}

/* n calls of `method` on one native client; the results' statuses and bodies. */
static void raw_calls(const char *const *resp, const bool *close_after, const char *method, int n,
                      const lk_http_policy *pol, run *out, rsrv *v) {
  rsrv_start(v, resp, close_after);
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/x", v->port);
  ht_loop l;
  ht_loop_init(&l, LK_HTTP_TRANSPORT_NATIVE);
  for (int i = 0; i < n; i++)
    loop_call(&l, method, url, NULL, 0, pol, NULL, &out[i]);
  ht_loop_free(&l);
  rsrv_stop(v);
}

static void expect_body(const run *r, int status, const char *body) {
  assert_int_equal(r->err, LK_OK);
  assert_true(r->att[0].native);
  const lk_http_response *rs = lk_http_result_response(r->res);
  assert_non_null(rs);
  assert_int_equal(rs->status, status);
  assert_true(rs->complete);
  assert_int_equal(rs->body_len, strlen(body));
  if (rs->body_len)
    assert_memory_equal(rs->body, body, rs->body_len);
}

/* Chunked (with an extension and a trailer), then a close-delimited body, then 204 and a 1xx
 * before a 200: each framed right, the connection reused only where the response allows. */
static void test_framing(void **s) {
  (void)s;
  const char *resp[] = {
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n"
      "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n",
      "HTTP/1.1 204 No Content\r\nX-B: 2\r\n\r\n",
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
      "HTTP/1.0 200 OK\r\nX-C: 3\r\n\r\nclose-delimited", NULL};
  const bool close_after[] = {false, false, false, true};
  lk_http_policy pol;
  ht_policy(&pol);
  run r[5];
  rsrv v;
  raw_calls(resp, close_after, "GET", 5, &pol, r, &v);
  expect_body(&r[0], 200, "hello world");
  assert_string_equal(lk_http_response_header(lk_http_result_response(r[0].res), "x-a"), "1");
  expect_body(&r[1], 204, "");
  assert_string_equal(lk_http_result_response(r[1].res)->reason, "No Content");
  expect_body(&r[2], 200, "ok");
  expect_body(&r[3], 200, "close-delimited");
  assert_string_equal(lk_http_response_header(lk_http_result_response(r[3].res), "X-C"), "3");
  expect_body(&r[4], 200, "close-delimited");
  assert_false(r[0].att[0].reused_connection);
  assert_true(r[1].att[0].reused_connection);
  assert_true(r[2].att[0].reused_connection);
  assert_true(r[3].att[0].reused_connection);
  assert_false(r[4].att[0].reused_connection); /* 1.0 without keep-alive, close-delimited */
  assert_int_equal(atomic_load(&v.conns), 2);
  for (int i = 0; i < 5; i++)
    run_free(&r[i]);
}

/* HEAD: a Content-Length describes no body; the connection serves the next request. */
static void test_head(void **s) {
  (void)s;
  const char *resp[] = {"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", NULL};
  lk_http_policy pol;
  ht_policy(&pol);
  run r[2];
  rsrv v;
  raw_calls(resp, NULL, "HEAD", 2, &pol, r, &v);
  expect_body(&r[0], 200, "");
  expect_body(&r[1], 200, "");
  assert_true(r[1].att[0].reused_connection);
  assert_int_equal(atomic_load(&v.conns), 1);
  for (int i = 0; i < 2; i++)
    run_free(&r[i]);
}

/* A response followed by bytes nobody asked for (a pipelined second response): the connection
 * is not reused, so the stray bytes never answer the next request. */
static void test_trailing_bytes_not_reused(void **s) {
  (void)s;
  const char *resp[] = {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n"
                        "Content-Length: 5\r\n\r\nstray",
                        "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ngood", NULL};
  lk_http_policy pol;
  ht_policy(&pol);
  run r[2];
  rsrv v;
  raw_calls(resp, NULL, "GET", 2, &pol, r, &v);
  expect_body(&r[0], 200, "ok");
  expect_body(&r[1], 200, "good");
  assert_false(r[1].att[0].reused_connection);
  assert_int_equal(atomic_load(&v.conns), 2);
  for (int i = 0; i < 2; i++)
    run_free(&r[i]);
}

/* A 101 hands the connection to another protocol, which nobody asked for: junk (a GET is asked
 * again), and its connection is never pooled. */
static void test_upgrade_not_reused(void **s) {
  (void)s;
  const char *resp[] = {
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", NULL};
  lk_http_policy pol;
  ht_policy(&pol);
  run r[2];
  rsrv v;
  raw_calls(resp, NULL, "GET", 2, &pol, r, &v);
  assert_int_equal(r[0].nattempts, 2);
  assert_int_equal(r[0].att[0].failure, LK_F_JUNK_RESPONSE);
  assert_int_equal(r[0].att[0].status, 101);
  expect_body(&r[0], 200, "ok");
  assert_false(r[0].att[1].reused_connection);
  expect_body(&r[1], 200, "ok");
  assert_true(r[1].att[0].reused_connection);
  assert_int_equal(atomic_load(&v.conns), 2);
  for (int i = 0; i < 2; i++)
    run_free(&r[i]);
}

/* Framing errors: junk, a short body, a head too large (not retried), a body over the limit. */
static void test_bad_responses(void **s) {
  (void)s;
  lk_http_policy pol;
  ht_policy(&pol);
  struct {
    const char *resp;
    lk_failure kind;
    int err;
    size_t attempts;
  } cases[] = {
      {"HTTP/1.1 2x0 OK\r\n\r\n", LK_F_JUNK_RESPONSE, LK_EATTEMPTS, 3},
      {"garbage\r\n\r\n", LK_F_JUNK_RESPONSE, LK_EATTEMPTS, 3},
      {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", LK_F_PARTIAL_BODY, LK_EATTEMPTS, 3},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", LK_F_PARTIAL_BODY,
       LK_EATTEMPTS, 3},
      {"HTTP/1.1 200 OK\r\nContent-Length: 3x\r\n\r\nabc", LK_F_JUNK_RESPONSE, LK_EATTEMPTS, 3},
      {"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 10\r\n\r\nabcdefghij",
       LK_F_JUNK_RESPONSE, LK_EATTEMPTS, 3},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *resp[] = {cases[i].resp, NULL};
    const bool close_after[] = {true};
    run r;
    rsrv v;
    raw_calls(resp, close_after, "GET", 1, &pol, &r, &v);
    print_message("case %zu: %s %zu attempts %s\n", i, lk_err_name(r.err), r.nattempts,
                  lk_failure_name(r.att[0].failure));
    assert_int_equal(r.err, cases[i].err);
    assert_int_equal(r.nattempts, cases[i].attempts);
    for (size_t k = 0; k < r.nattempts; k++)
      assert_int_equal(r.att[k].failure, cases[i].kind);
    run_free(&r);
  }
  /* a head beyond the limit: junk, not asked again */
  size_t n = 200 * 1024;
  char *big = malloc(n + 128);
  assert_non_null(big);
  int h = snprintf(big, 128, "HTTP/1.1 200 OK\r\nX-Big: ");
  memset(big + h, 'a', n);
  strcpy(big + h + n, "\r\nContent-Length: 2\r\n\r\nok");
  const char *resp[] = {big, NULL};
  const bool close_after[] = {true};
  run r;
  rsrv v;
  raw_calls(resp, close_after, "GET", 1, &pol, &r, &v);
  assert_int_equal(r.err, LK_ETOOBIG);
  assert_int_equal(r.nattempts, 1);
  assert_int_equal(r.att[0].failure, LK_F_JUNK_RESPONSE);
  run_free(&r);
  free(big);
  /* a body over max_response_body: not retried either */
  const char *long_body[] = {"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n01234567890123456789",
                             NULL};
  pol.max_response_body = 10;
  raw_calls(long_body, NULL, "GET", 1, &pol, &r, &v);
  assert_int_equal(r.err, LK_ETOOBIG);
  assert_int_equal(r.nattempts, 1);
  assert_int_equal(r.att[0].failure, LK_F_TRANSPORT_ERROR);
  run_free(&r);
}

/* --- cancellation, fallback ------------------------------------------------------------------ */

typedef struct canceller {
  lk_http_cancel *tok;
  int64_t after;
} canceller;

static void *cancel_later(void *arg) {
  canceller *c = arg;
  struct timespec ts = {0, (long)c->after};
  nanosleep(&ts, NULL);
  lk_http_cancel_fire(c->tok);
  return NULL;
}

/* Cancelled while waiting for the first byte: CANCELLED, and the connection is not pooled (the
 * next call opens another). */
static void test_cancel_mid_attempt(void **s) {
  (void)s;
  faultd_proc fp;
  const char *a[] = {"--delay-ms", "400", "--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&fp, "slow", a), 0);
  char url[128];
  faultd_url(&fp, "/x", url, sizeof url);
  ht_loop l;
  ht_loop_init(&l, LK_HTTP_TRANSPORT_NATIVE);
  lk_http_policy pol;
  ht_policy(&pol);
  pol.attempt_timeout = LK_SEC(1);
  lk_http_cancel *tok = lk_http_cancel_new();
  assert_non_null(tok);
  canceller cc = {tok, LK_MS(100)};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, cancel_later, &cc), 0);
  run r;
  loop_call(&l, "GET", url, NULL, 0, &pol, tok, &r);
  pthread_join(th, NULL);
  assert_int_equal(r.err, LK_ECANCELED);
  assert_int_equal(r.nattempts, 1);
  assert_int_equal(r.att[0].failure, LK_F_CANCELLED);
  assert_true(r.wall < LK_MS(350));
  run_free(&r);
  lk_http_cancel_free(tok);
  loop_call(&l, "GET", url, NULL, 0, &pol, NULL, &r);
  assert_int_equal(r.err, LK_OK);
  assert_false(r.att[0].reused_connection);
  run_free(&r);
  faultd_req q[4];
  assert_int_equal(faultd_wait_requests(&fp, 2, 2000), 2);
  assert_int_equal(faultd_requests(&fp, q, 4), 2);
  assert_int_equal(q[1].conn, 2);
  ht_loop_free(&l);
  faultd_stop(&fp);
}

/* A hedge runs on a connection of its own; the slow attempt that lost is cancelled and its
 * connection closed, not pooled; the hedge's is pooled and serves the next call. */
static void test_hedge(void **s) {
  (void)s;
  faultd_proc fp;
  const char *a[] = {"--script", "slow:400,ok", "--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&fp, "ok", a), 0);
  char url[128];
  faultd_url(&fp, "/x", url, sizeof url);
  ht_loop l;
  ht_loop_init(&l, LK_HTTP_TRANSPORT_NATIVE);
  lk_http_policy pol;
  ht_policy(&pol);
  lk_hedge_policy_init_default(&pol.hedge);
  pol.hedge.max_hedges = 1;
  pol.hedge.delay = LK_MS(50);
  pol.attempt_timeout = LK_MS(800);
  run r;
  loop_call(&l, "GET", url, NULL, 0, &pol, NULL, &r);
  assert_int_equal(r.err, LK_OK);
  assert_int_equal(r.nattempts, 2);
  assert_int_equal(r.att[0].failure, LK_F_CANCELLED);
  assert_true(r.att[1].hedge);
  assert_true(r.att[1].native);
  assert_int_equal(r.att[1].failure, LK_F_NONE);
  assert_true(r.wall < LK_MS(350));
  run_free(&r);
  pol.hedge.max_hedges = 0;
  loop_call(&l, "GET", url, NULL, 0, &pol, NULL, &r);
  assert_int_equal(r.err, LK_OK);
  assert_true(r.att[0].reused_connection); /* the hedge's connection, pooled */
  run_free(&r);
  faultd_req q[4];
  assert_int_equal(faultd_wait_requests(&fp, 3, 2000), 3);
  assert_int_equal(faultd_requests(&fp, q, 4), 3);
  assert_int_not_equal(q[0].conn, q[1].conn);
  assert_int_equal(q[2].conn, q[1].conn);
  ht_loop_free(&l);
  faultd_stop(&fp);
}

/* --- streamed request bodies ----------------------------------------------------------------- */

typedef struct feed {
  size_t total, avail, given;
  size_t abort_at; /* 0: never */
  int waits;
} feed;

static long feed_pull(void *ctx, char *buf, size_t cap) {
  feed *f = ctx;
  if (f->abort_at && f->given >= f->abort_at)
    return LK_HTTP_BODY_ABORT;
  if (f->given == f->avail) {
    f->waits++;
    return LK_HTTP_BODY_WAIT;
  }
  size_t n = f->avail - f->given;
  if (n > cap)
    n = cap;
  memset(buf, 'b', n);
  f->given += n;
  return (long)n;
}

/* One POST with a streamed body that arrives in three parts 20 ms apart (the loop is told with
 * lk_http_request_body_ready, as linkd serve does when its client sends more). */
static void stream_call(lk_http_transport tp, faultd_proc *fp, feed *f, run *out) {
  char url[128];
  faultd_url(fp, "/x", url, sizeof url);
  ht_loop l;
  ht_loop_init(&l, tp);
  lk_http_policy pol;
  ht_policy(&pol);
  lk_http_request *r = lk_http_request_new("POST", url);
  assert_non_null(r);
  assert_int_equal(lk_http_request_set_body_stream(r, f->total, feed_pull, f), LK_OK);
  done_slot d = {NULL, false};
  int64_t t0 = lk_now_ns(), next = t0 + LK_MS(20);
  f->avail = f->total / 3;
  assert_int_equal(lk_http_submit(l.c, r, &pol, NULL, on_done, &d), LK_OK);
  while (!d.done) {
    assert_true(lk_now_ns() - t0 < LK_SEC(10));
    ht_loop_once(&l, 5);
    if (lk_now_ns() >= next && f->avail < f->total) {
      f->avail = f->avail + f->total / 3 > f->total ? f->total : f->avail + f->total / 3;
      if (f->total - f->avail < 3)
        f->avail = f->total;
      next = lk_now_ns() + LK_MS(20);
      lk_http_request_body_ready(r);
    }
  }
  out->wall = lk_now_ns() - t0;
  out->res = d.res;
  out->err = lk_http_result_err(d.res);
  out->att = lk_http_result_attempts(d.res, &out->nattempts);
  assert_int_equal(lk_http_request_body_streamed(r), f->given);
  lk_http_request_free(r);
  ht_loop_free(&l);
}

static void test_stream_body(void **s) {
  (void)s;
  for (int tpi = 0; tpi < 2; tpi++) {
    lk_http_transport tp = tpi ? LK_HTTP_TRANSPORT_NATIVE : LK_HTTP_TRANSPORT_CURL;
    faultd_proc fp;
    const char *a[] = {"--max-seconds", "60", NULL};
    assert_int_equal(faultd_start(&fp, "ok", a), 0);
    feed f = {.total = 100000};
    run r;
    stream_call(tp, &fp, &f, &r);
    print_message("%s stream: %s, %zu attempts, %d waits\n", tp_name(tp), lk_err_name(r.err),
                  r.nattempts, f.waits);
    assert_int_equal(r.err, LK_OK);
    assert_int_equal(r.nattempts, 1);
    assert_int_equal(r.att[0].native, tp == LK_HTTP_TRANSPORT_NATIVE);
    assert_true(r.att[0].request_sent);
    assert_true(f.waits >= 2);
    assert_int_equal(f.given, f.total);
    faultd_req q[2];
    assert_int_equal(faultd_wait_requests(&fp, 1, 2000), 1);
    assert_int_equal(faultd_requests(&fp, q, 2), 1);
    assert_true(q[0].complete);
    assert_int_equal(q[0].body_bytes, (long long)f.total);
    run_free(&r);
    faultd_stop(&fp);
  }
}

/* The stream gives up half way: not sent whole, and not retried (its bytes are gone), on both
 * transports alike. */
static void test_stream_abort(void **s) {
  (void)s;
  lk_failure kinds[2];
  for (int tpi = 0; tpi < 2; tpi++) {
    lk_http_transport tp = tpi ? LK_HTTP_TRANSPORT_NATIVE : LK_HTTP_TRANSPORT_CURL;
    faultd_proc fp;
    const char *a[] = {"--max-seconds", "60", NULL};
    assert_int_equal(faultd_start(&fp, "ok", a), 0);
    feed f = {.total = 100000, .abort_at = 40000};
    run r;
    stream_call(tp, &fp, &f, &r);
    print_message("%s stream abort: %s, %zu attempts, %s, reason %s\n", tp_name(tp),
                  lk_err_name(r.err), r.nattempts, lk_failure_name(r.att[0].failure),
                  r.att[0].reason);
    assert_int_equal(r.nattempts, 1);
    assert_false(r.att[0].request_sent);
    assert_string_equal(r.att[0].reason, "streamed body not replayable");
    kinds[tpi] = r.att[0].failure;
    run_free(&r);
    faultd_stop(&fp);
  }
  assert_int_equal(kinds[0], kinds[1]);
}

/* URLs the native transport does not take (a name, user info) still work: on libcurl. */
static void test_fallback(void **s) {
  (void)s;
  faultd_proc fp;
  const char *a[] = {"--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&fp, "ok", a), 0);
  ht_loop l;
  ht_loop_init(&l, LK_HTTP_TRANSPORT_NATIVE);
  lk_http_policy pol;
  ht_policy(&pol);
  char url[128];
  const char *pre[] = {"http://u:p@127.0.0.1", "http://localhost", "http://127.0.0.1"};
  for (size_t i = 0; i < 3; i++) {
    snprintf(url, sizeof url, "%s:%d/x", pre[i], faultd_port(&fp));
    run r;
    loop_call(&l, "GET", url, NULL, 0, &pol, NULL, &r);
    assert_int_equal(r.err, LK_OK);
    assert_int_equal(r.att[0].native, i > 0); /* localhost is the loopback, no lookup */
    run_free(&r);
  }
  assert_int_equal(faultd_wait_requests(&fp, 3, 2000), 3);
  ht_loop_free(&l);
  faultd_stop(&fp);
}

/* lk_http_client_start_submitted(): the calls submitted start at once (their request is on its
 * connection before the loop polls again), the timer submit armed for now is put back to the
 * attempt's own timeouts, and the call completes from socket events alone, the timer never
 * firing. With lk_http_client_config.start_submitted, submit arms no timer at all. */
static void start_submitted_on(bool flag) {
  faultd_proc fp;
  const char *a[] = {"--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&fp, "ok", a), 0);
  char url[128];
  faultd_url(&fp, "/x", url, sizeof url);
  ht_loop l;
  ht_loop_init_with(&l, LK_HTTP_TRANSPORT_NATIVE, flag);
  lk_http_policy pol;
  ht_policy(&pol);
  for (int i = 0; i < 2; i++) { /* a new connection, then a pooled one */
    lk_http_request *r = lk_http_request_new("GET", url);
    assert_non_null(r);
    done_slot d = {NULL, false};
    int fds = l.n;
    assert_int_equal(lk_http_submit(l.c, r, &pol, NULL, on_done, &d), LK_OK);
    lk_http_request_free(r);
    if (flag)
      assert_true(l.timer_at == INT64_MAX); /* nothing armed: the loop starts it */
    else
      assert_true(l.timer_at <= lk_now_ns()); /* armed for now: the loop would start it */
    assert_int_equal(l.n, fds);
    assert_int_equal(lk_http_client_start_submitted(l.c), LK_OK);
    assert_false(d.done);
    int64_t left = l.timer_at - lk_now_ns();
    assert_true(left > LK_MS(100) && left <= LK_MS(300)); /* the connect or attempt timeout */
    if (i == 0)
      assert_int_equal(l.n, fds + 1); /* the connection is being made */
    else
      assert_int_equal(faultd_wait_requests(&fp, 2, 2000), 2); /* written already */
    int64_t t0 = lk_now_ns();
    while (!d.done) {
      assert_true(lk_now_ns() - t0 < LK_SEC(5));
      assert_true(l.timer_at > lk_now_ns()); /* never due: only socket events drive the call */
      struct pollfd p[HT_LOOP_FDS];
      for (int j = 0; j < l.n; j++)
        p[j] = (struct pollfd){.fd = l.fd[j],
                               .events = (short)((l.ev[j] & LK_HTTP_POLL_IN ? POLLIN : 0) |
                                                 (l.ev[j] & LK_HTTP_POLL_OUT ? POLLOUT : 0))};
      int n = l.n;
      assert_true(poll(p, (nfds_t)n, 20) >= 0 || errno == EINTR);
      for (int j = 0; j < n; j++) {
        if (!p[j].revents)
          continue;
        int ev = (p[j].revents & (POLLIN | POLLHUP | POLLERR) ? LK_HTTP_POLL_IN : 0) |
                 (p[j].revents & (POLLOUT | POLLERR) ? LK_HTTP_POLL_OUT : 0);
        assert_int_equal(lk_http_client_socket_action(l.c, p[j].fd, ev), LK_OK);
      }
    }
    assert_int_equal(lk_http_result_err(d.res), LK_OK);
    size_t na;
    const lk_http_attempt_info *att = lk_http_result_attempts(d.res, &na);
    assert_int_equal(na, 1);
    assert_int_equal(att[0].reused_connection, i > 0);
    lk_http_result_free(d.res);
  }
  assert_int_equal(lk_http_client_start_submitted(l.c), LK_OK); /* nothing submitted: no-op */
  ht_loop_free(&l);
  faultd_stop(&fp);
}

static void test_start_submitted(void **s) {
  (void)s;
  start_submitted_on(false);
  start_submitted_on(true);
}

typedef struct start_slot {
  done_slot d;
  lk_http_client *c;
  int rc_inside; /* lk_http_client_start_submitted() from inside the callback */
} start_slot;

static void on_done_start(void *ud, lk_http_result *res) {
  start_slot *ss = ud;
  ss->rc_inside = lk_http_client_start_submitted(ss->c);
  on_done(&ss->d, res);
}

/* A call that ends at once (its cancel token fired before it started) is delivered from inside
 * lk_http_client_start_submitted(), never from lk_http_submit(); the entry point refuses to run
 * from a callback and outside external mode. */
static void test_start_submitted_ends_at_once(void **s) {
  (void)s;
  ht_loop l;
  ht_loop_init(&l, LK_HTTP_TRANSPORT_NATIVE);
  lk_http_policy pol;
  ht_policy(&pol);
  lk_http_cancel *tok = lk_http_cancel_new();
  assert_non_null(tok);
  lk_http_cancel_fire(tok);
  lk_http_request *r = lk_http_request_new("GET", "http://127.0.0.1:9/x");
  assert_non_null(r);
  start_slot ss = {{NULL, false}, l.c, 0};
  assert_int_equal(lk_http_submit(l.c, r, &pol, tok, on_done_start, &ss), LK_OK);
  lk_http_request_free(r);
  assert_false(ss.d.done);
  assert_int_equal(lk_http_client_start_submitted(l.c), LK_OK);
  assert_true(ss.d.done);
  assert_int_equal(ss.rc_inside, LK_ESTATE);
  assert_int_equal(lk_http_result_err(ss.d.res), LK_ECANCELED);
  assert_int_equal(lk_http_client_active(l.c), 0);
  lk_http_result_free(ss.d.res);
  lk_http_cancel_free(tok);
  ht_loop_free(&l);
  lk_http_client *own = lk_http_client_new(NULL);
  assert_non_null(own);
  assert_int_equal(lk_http_client_start_submitted(own), LK_ESTATE);
  assert_int_equal(lk_http_client_start_submitted(NULL), LK_EINVAL);
  lk_http_client_free(own);
}

/* A native socket action re-arms for the call using that connection only (the armed timer bounds
 * every other call's): nothing made due elsewhere may be missed. While calls to a fast server
 * complete one after another, (1) a call to a slow one still times out when its first-byte
 * timeout (earlier than its connect timeout, so its timer moved earlier when its request was
 * written) is due; (2) a call queued in a bulkhead starts when the slot is handed over; (3) a
 * call submitted from a completion callback starts; (4) a cancelled call ends. */
typedef struct chain_slot {
  ht_loop *l;
  const char *url;
  const lk_http_policy *pol;
  int left; /* calls still to submit from the callback */
  int ok;
  bool done;
} chain_slot;

static void chain_on_done(void *ud, lk_http_result *res) {
  chain_slot *cs = ud;
  cs->ok += lk_http_result_err(res) == LK_OK;
  lk_http_result_free(res);
  if (cs->left-- > 0) {
    lk_http_request *r = lk_http_request_new("GET", cs->url);
    assert_non_null(r);
    assert_int_equal(lk_http_submit(cs->l->c, r, cs->pol, NULL, chain_on_done, cs), LK_OK);
    lk_http_request_free(r);
  } else {
    cs->done = true;
  }
}

static void test_native_action_others_due(void **s) {
  (void)s;
  faultd_proc ok, slow;
  const char *a[] = {"--max-seconds", "60", NULL};
  const char *b[] = {"--delay-ms", "2000", "--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&ok, "ok", a), 0);
  assert_int_equal(faultd_start(&slow, "slow", b), 0);
  char fast_url[128], slow_url[128];
  faultd_url(&ok, "/x", fast_url, sizeof fast_url);
  faultd_url(&slow, "/x", slow_url, sizeof slow_url);
  for (int flag = 0; flag < 2; flag++) {
    ht_loop l;
    ht_loop_init_with(&l, LK_HTTP_TRANSPORT_NATIVE, flag);
    lk_http_policy pol;
    ht_policy(&pol);
    pol.deadline = LK_SEC(5);
    pol.attempt_timeout = LK_SEC(3);
    pol.connect_timeout = LK_SEC(1);
    ht_attempts(&pol, 1);
    lk_http_policy fb = pol;
    fb.first_byte_timeout = LK_MS(100);
    lk_bulkhead_config bc;
    lk_bulkhead_config_init_default(&bc);
    bc.max_concurrent = 1;
    lk_bulkhead *bh = NULL;
    assert_int_equal(lk_bulkhead_new(&bc, &bh, NULL), LK_OK);
    lk_http_policy bp = pol;
    bp.bulkhead = bh;
    bp.pool_timeout = LK_SEC(3);
    lk_http_cancel *tok = lk_http_cancel_new();
    assert_non_null(tok);

    /* (1) alone first: nothing else runs a pass that would find it due */
    {
      done_slot d = {NULL, false};
      lk_http_request *r = lk_http_request_new("GET", slow_url);
      assert_non_null(r);
      int64_t t1 = lk_now_ns();
      assert_int_equal(lk_http_submit(l.c, r, &fb, NULL, on_done, &d), LK_OK);
      lk_http_request_free(r);
      if (flag)
        assert_int_equal(lk_http_client_start_submitted(l.c), LK_OK);
      while (!d.done) {
        assert_true(lk_now_ns() - t1 < LK_SEC(3));
        ht_loop_once(&l, 20);
      }
      int64_t took = lk_now_ns() - t1;
      assert_int_equal(lk_http_result_failure(d.res), LK_F_FIRST_BYTE_TIMEOUT);
      assert_true(took >= LK_MS(100) && took < LK_MS(600)); /* not at the 1 s connect timer */
      lk_http_result_free(d.res);
    }
    chain_slot cs = {&l, fast_url, &pol, 30, 0, false};
    done_slot fbd = {NULL, false}, cd = {NULL, false}, bd[3] = {{NULL, false}};
    lk_http_request *rf = lk_http_request_new("GET", fast_url);
    lk_http_request *rs = lk_http_request_new("GET", slow_url);
    assert_true(rf && rs);
    int64_t t0 = lk_now_ns();
    assert_int_equal(lk_http_submit(l.c, rf, &pol, NULL, chain_on_done, &cs), LK_OK);
    assert_int_equal(lk_http_submit(l.c, rs, &fb, NULL, on_done, &fbd), LK_OK);
    assert_int_equal(lk_http_submit(l.c, rs, &pol, tok, on_done, &cd), LK_OK);
    for (int i = 0; i < 3; i++)
      assert_int_equal(lk_http_submit(l.c, rf, &bp, NULL, on_done, &bd[i]), LK_OK);
    lk_http_request_free(rf);
    lk_http_request_free(rs);
    if (flag)
      assert_int_equal(lk_http_client_start_submitted(l.c), LK_OK);
    bool fired = false;
    int64_t fb_at = 0;
    while (!(cs.done && fbd.done && cd.done && bd[0].done && bd[1].done && bd[2].done)) {
      assert_true(lk_now_ns() - t0 < LK_SEC(4)); /* the slow server answers after 2 s */
      ht_loop_once(&l, 20);
      if (fbd.done && !fb_at)
        fb_at = lk_now_ns() - t0;
      if (!fired && lk_now_ns() - t0 > LK_MS(50)) {
        lk_http_cancel_fire(tok);
        fired = true;
      }
    }
    assert_int_equal(cs.ok, 31);
    assert_int_equal(lk_http_result_failure(fbd.res), LK_F_FIRST_BYTE_TIMEOUT);
    assert_true(fb_at >= LK_MS(100) && fb_at < LK_MS(600));
    assert_int_equal(lk_http_result_err(cd.res), LK_ECANCELED);
    for (int i = 0; i < 3; i++)
      assert_int_equal(lk_http_result_err(bd[i].res), LK_OK);
    assert_true(lk_now_ns() - t0 < LK_MS(1500)); /* nobody waited for the slow answers */
    lk_http_result_free(fbd.res);
    lk_http_result_free(cd.res);
    for (int i = 0; i < 3; i++)
      lk_http_result_free(bd[i].res);
    lk_http_cancel_free(tok);
    ht_loop_free(&l);
    lk_bulkhead_free(bh);
  }
  faultd_stop(&ok);
  faultd_stop(&slow);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_start_submitted),
      cmocka_unit_test(test_native_action_others_due),
      cmocka_unit_test(test_start_submitted_ends_at_once),
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_connect_timeout),
      cmocka_unit_test(test_read_then_reset),
      cmocka_unit_test(test_read_then_close),
      cmocka_unit_test(test_reset_before_read),
      cmocka_unit_test(test_accept_noread),
      cmocka_unit_test(test_first_byte_timeout),
      cmocka_unit_test(test_idle_timeout),
      cmocka_unit_test(test_503),
      cmocka_unit_test(test_write_timeout),
      cmocka_unit_test(test_reset_mid_upload),
      cmocka_unit_test(test_reuse_and_wire),
      cmocka_unit_test(test_pooled_closed_after_response),
      cmocka_unit_test(test_pooled_closed_before_response),
      cmocka_unit_test(test_framing),
      cmocka_unit_test(test_head),
      cmocka_unit_test(test_trailing_bytes_not_reused),
      cmocka_unit_test(test_upgrade_not_reused),
      cmocka_unit_test(test_bad_responses),
      cmocka_unit_test(test_cancel_mid_attempt),
      cmocka_unit_test(test_hedge),
      cmocka_unit_test(test_stream_body),
      cmocka_unit_test(test_stream_abort),
      cmocka_unit_test(test_fallback),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
