/* SPDX-License-Identifier: MIT */
/* The asynchronous driver: hundreds of concurrent calls on one thread, retry delays as timers,
 * embedding in an external epoll loop, cancellation from another thread, and the shared
 * protections (bulkhead, limiter) around attempts. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "httptest.h"

#include <linkd/bulkhead.h>
#include <linkd/limiter.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

static faultd_proc FP;

static int teardown(void **s) {
  (void)s;
  faultd_stop(&FP);
  return 0;
}

typedef struct tally {
  int done, ok, err[32];
  int kinds[LK_F__COUNT]; /* lk_http_result_failure of each result */
  int attempts[8];
  int64_t max_elapsed;
  lk_http_result *keep; /* first result, for inspection */
} tally;

static void on_done(void *ud, lk_http_result *res) {
  tally *t = ud;
  t->done++;
  int e = lk_http_result_err(res);
  if (e == LK_OK)
    t->ok++;
  if (-e >= 0 && -e < 32)
    t->err[-e]++;
  if ((unsigned)lk_http_result_failure(res) < LK_F__COUNT)
    t->kinds[lk_http_result_failure(res)]++;
  size_t n;
  lk_http_result_attempts(res, &n);
  if (n < 8)
    t->attempts[n]++;
  if (lk_http_result_elapsed(res) > t->max_elapsed)
    t->max_elapsed = lk_http_result_elapsed(res);
  if (!t->keep)
    t->keep = res;
  else
    lk_http_result_free(res);
}

static lk_http_request *req_for(const char *method, const char *path) {
  char url[128];
  assert_int_equal(faultd_url(&FP, path, url, sizeof url), 0);
  lk_http_request *r = lk_http_request_new(method, url);
  assert_non_null(r);
  return r;
}

static void run_all(lk_http_client *c) {
  int64_t t = lk_now_ns();
  while (lk_http_client_active(c) > 0) {
    assert_true(lk_http_client_run(c, LK_SEC(1)) >= 0);
    assert_true(lk_now_ns() - t < LK_SEC(60));
  }
}

/* 256 calls in flight at once against a server that takes 200 ms per answer: one thread, and
 * the whole batch takes about one answer's time, not 256 of them. */
static void test_many_concurrent(void **s) {
  (void)s;
  const char *args[] = {"--delay-ms", "200", "--max-conns", "300", "--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&FP, "slow", args), 0);
  lk_http_client *c = lk_http_client_new(NULL);
  lk_http_policy pol;
  ht_policy(&pol);
  pol.deadline = LK_SEC(20);
  pol.attempt_timeout = LK_SEC(15);
  pol.connect_timeout = LK_SEC(5);
  lk_http_request *req = req_for("GET", "/many");
  tally t = {0};
  int64_t start = lk_now_ns();
  for (int i = 0; i < 256; i++)
    assert_int_equal(lk_http_submit(c, req, &pol, NULL, on_done, &t), LK_OK);
  lk_http_request_free(req); /* the calls hold their own references */
  assert_int_equal(lk_http_client_active(c), 256);
  run_all(c);
  int64_t wall = lk_now_ns() - start;
  printf("# 256 concurrent calls of 200 ms: %.0f ms\n", (double)wall / 1e6);
  assert_int_equal(t.done, 256);
  assert_int_equal(t.ok, 256);
  assert_true(wall < LK_SEC(10)); /* sequentially: 51 s */
  assert_int_equal(faultd_wait_requests(&FP, 256, 1000), 256);
  lk_http_result_free(t.keep);
  lk_http_client_free(c);
}

/* Retry delays are timers: 100 calls, each with 3 attempts and 150 ms between them, finish in
 * about 2 delays, not 200. */
static void test_delays_are_timers(void **s) {
  (void)s;
  const char *args[] = {"--max-conns", "300", "--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&FP, "read_then_close", args), 0);
  lk_http_client *c = lk_http_client_new(NULL);
  lk_http_policy pol;
  ht_policy(&pol);
  pol.deadline = LK_SEC(20);
  pol.attempt_timeout = LK_SEC(5);
  pol.connect_timeout = LK_SEC(5);
  ht_backoff(&pol, LK_MS(150), LK_MS(150));
  pol.default_protection = false; /* every retry is under test: no budget, no breaker */
  lk_http_request *req = req_for("GET", "/timers");
  tally t = {0};
  int64_t start = lk_now_ns();
  for (int i = 0; i < 100; i++)
    assert_int_equal(lk_http_submit(c, req, &pol, NULL, on_done, &t), LK_OK);
  run_all(c);
  int64_t wall = lk_now_ns() - start;
  printf("# 100 calls x 3 attempts, 150 ms delays: %.0f ms\n", (double)wall / 1e6);
  assert_int_equal(t.done, 100);
  assert_int_equal(t.attempts[3], 100);
  assert_int_equal(t.err[-LK_EATTEMPTS], 100);
  assert_true(wall < LK_SEC(8)); /* sleeping threads one at a time: 30 s */
  size_t n;
  const lk_http_attempt_info *a = lk_http_result_attempts(t.keep, &n);
  for (size_t i = 1; i < n; i++)
    assert_true(a[i].start >= a[i - 1].start + a[i - 1].duration + LK_MS(150));
  lk_http_result_free(t.keep);
  lk_http_request_free(req);
  lk_http_client_free(c);
}

/* --- an external epoll loop ---------------------------------------------------------------- */
typedef struct ext_loop {
  int ep;
  int64_t timer_at; /* -1 none */
  int watched;
  int socket_calls, timer_calls;
  /* close_fn: closes seen, and those of a descriptor already closed or still watched */
  int closes, closes_bad;
  bool want[1024]; /* descriptors with a non-zero interest */
} ext_loop;

static void ext_socket(void *ud, int fd, int events) {
  ext_loop *l = ud;
  l->socket_calls++;
  struct epoll_event ev = {0};
  ev.data.fd = fd;
  if (events & LK_HTTP_POLL_IN)
    ev.events |= EPOLLIN;
  if (events & LK_HTTP_POLL_OUT)
    ev.events |= EPOLLOUT;
  if (fd >= 0 && fd < 1024)
    l->want[fd] = events != 0;
  if (events == 0) {
    if (epoll_ctl(l->ep, EPOLL_CTL_DEL, fd, NULL) == 0)
      l->watched--;
    return;
  }
  if (epoll_ctl(l->ep, EPOLL_CTL_MOD, fd, &ev) != 0) {
    assert_int_equal(epoll_ctl(l->ep, EPOLL_CTL_ADD, fd, &ev), 0);
    l->watched++;
  }
}

static void ext_timer(void *ud, int64_t delay) {
  ext_loop *l = ud;
  l->timer_calls++;
  l->timer_at = delay < 0 ? -1 : lk_now_ns() + delay;
}

static void ext_run(lk_http_client *c, ext_loop *l) {
  int64_t start = lk_now_ns();
  while (lk_http_client_active(c) > 0) {
    assert_true(lk_now_ns() - start < LK_SEC(30));
    int ms = 1000;
    if (l->timer_at >= 0) {
      int64_t d = l->timer_at - lk_now_ns();
      ms = d <= 0 ? 0 : (int)((d + LK_NS_PER_MS - 1) / LK_NS_PER_MS);
    }
    struct epoll_event evs[64];
    int n = epoll_wait(l->ep, evs, 64, ms);
    for (int i = 0; i < n; i++) {
      int e = (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR) ? LK_HTTP_POLL_IN : 0) |
              (evs[i].events & EPOLLOUT ? LK_HTTP_POLL_OUT : 0);
      assert_int_equal(lk_http_client_socket_action(c, evs[i].data.fd, e), LK_OK);
    }
    if (l->timer_at >= 0 && lk_now_ns() >= l->timer_at) {
      l->timer_at = -1;
      assert_int_equal(lk_http_client_timer_action(c), LK_OK);
    }
  }
}

static void test_external_loop(void **s) {
  (void)s;
  const char *args[] = {"--script", "503:ra=0,ok", "--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&FP, "status", args), 0);
  ext_loop l = {.ep = epoll_create1(EPOLL_CLOEXEC), .timer_at = -1};
  assert_true(l.ep >= 0);
  lk_http_client_config cfg;
  lk_http_client_config_init_default(&cfg);
  cfg.socket_fn = ext_socket;
  cfg.timer_fn = ext_timer;
  cfg.loop_ud = &l;
  lk_http_client *c = lk_http_client_new(&cfg);
  assert_non_null(c);
  assert_int_equal(l.watched, 1); /* the wake-up descriptor */
  /* the client's own loop is not available in external mode */
  assert_int_equal(lk_http_client_run(c, 0), LK_ESTATE);
  lk_http_request *req = req_for("GET", "/ext");
  lk_http_result *res = NULL;
  assert_int_equal(lk_http_call(c, req, &(lk_http_policy){0}, NULL, &res), LK_ESTATE);
  lk_http_result_free(res);
  lk_http_policy pol;
  ht_policy(&pol);
  tally t = {0};
  for (int i = 0; i < 40; i++)
    assert_int_equal(lk_http_submit(c, req, &pol, NULL, on_done, &t), LK_OK);
  assert_int_equal(t.done, 0); /* never completes inside submit */
  ext_run(c, &l);
  assert_int_equal(t.done, 40);
  assert_int_equal(t.ok, 40);
  assert_int_equal(t.attempts[1] + t.attempts[2], 40);
  assert_int_equal(t.attempts[2], 1); /* the script's one 503, then retried */
  assert_true(l.socket_calls > 1 && l.timer_calls > 0);
  lk_http_result_free(t.keep);
  /* a cancellation token is watched through the loop's callbacks while a call uses it */
  memset(&t, 0, sizeof t);
  lk_http_cancel *tok = lk_http_cancel_new();
  assert_int_equal(lk_http_submit(c, req, &pol, tok, on_done, &t), LK_OK);
  assert_int_equal(l.watched, 2);
  lk_http_cancel_fire(tok);
  ext_run(c, &l);
  assert_int_equal(t.err[-LK_ECANCELED], 1);
  assert_int_equal(l.watched, 1);
  lk_http_cancel_free(tok);
  lk_http_result_free(t.keep);
  lk_http_request_free(req);
  lk_http_client_free(c);
  assert_int_equal(l.watched, 0); /* everything unregistered */
  close(l.ep);
}

static void ext_close(void *ud, int fd) {
  ext_loop *l = ud;
  l->closes++;
  /* told before the close (the number still names the socket), after its interest went */
  if (fcntl(fd, F_GETFD) == -1 || fd < 0 || fd >= 1024 || l->want[fd])
    l->closes_bad++;
}

/* close_fn hears of every connection the client closes, while the descriptor is still open and
 * after socket_fn dropped its interest: what lets a loop keep a pooled connection's watcher
 * between transfers (linkd serve) without a stale registration on a reused number. */
static void test_external_close_hook(void **s) {
  (void)s;
  /* the server closes each connection after its answer while advertising keep-alive: the
   * client pools it, finds it dead when the next batch would reuse it, and closes it */
  const char *args[] = {"--max-seconds",  "60", "--close-after", "1", "--close-when",
                        "after_response", NULL};
  assert_int_equal(faultd_start(&FP, "keepalive_close", args), 0);
  ext_loop l = {.ep = epoll_create1(EPOLL_CLOEXEC), .timer_at = -1};
  assert_true(l.ep >= 0);
  lk_http_client_config cfg;
  lk_http_client_config_init_default(&cfg);
  cfg.socket_fn = ext_socket;
  cfg.timer_fn = ext_timer;
  cfg.close_fn = ext_close;
  cfg.loop_ud = &l;
  lk_http_client *c = lk_http_client_new(&cfg);
  assert_non_null(c);
  lk_http_request *req = req_for("GET", "/close");
  lk_http_policy pol;
  ht_policy(&pol);
  tally t = {0};
  for (int batch = 0; batch < 2; batch++) {
    for (int i = 0; i < 8; i++)
      assert_int_equal(lk_http_submit(c, req, &pol, NULL, on_done, &t), LK_OK);
    ext_run(c, &l);
  }
  assert_int_equal(t.ok, 16);
  int during = l.closes;
  lk_http_result_free(t.keep);
  lk_http_request_free(req);
  lk_http_client_free(c); /* closes what the pool still holds */
  printf("# close_fn: %d during the calls, %d in all\n", during, l.closes);
  assert_true(during >= 1);
  assert_true(l.closes >= 8); /* at least a connection per call of a batch, each one told */
  assert_int_equal(l.closes_bad, 0);
  close(l.ep);
}

/* --- cancellation ---------------------------------------------------------------------------- */
typedef struct canceller {
  lk_http_cancel *tok;
  int delay_ms;
  int64_t fired_at;
} canceller;

static void *cancel_later(void *arg) {
  canceller *k = arg;
  struct timespec ts = {k->delay_ms / 1000, (long)(k->delay_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  k->fired_at = lk_now_ns();
  lk_http_cancel_fire(k->tok);
  return NULL;
}

/* Cancelling from another thread ends a call at once: during an attempt, and during a delay. */
static void test_cancel_from_thread(void **s) {
  (void)s;
  const char *modes[] = {"accept_noread", "read_then_close"};
  for (int m = 0; m < 2; m++) {
    const char *args[] = {"--max-seconds", "60", NULL};
    assert_int_equal(faultd_start(&FP, modes[m], args), 0);
    lk_http_policy pol;
    ht_policy(&pol);
    pol.deadline = LK_SEC(30);
    pol.attempt_timeout = LK_SEC(20);
    ht_backoff(&pol, LK_SEC(10), LK_SEC(10)); /* a long delay */
    lk_http_cancel *tok = lk_http_cancel_new();
    canceller k = {tok, 200, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, cancel_later, &k), 0);
    lk_http_request *req = req_for("GET", "/cancel");
    lk_http_result *res = NULL;
    int rc = lk_http_call(NULL, req, &pol, tok, &res);
    int64_t end = lk_now_ns();
    pthread_join(th, NULL);
    assert_int_equal(rc, LK_ECANCELED);
    assert_int_equal(lk_http_result_failure(res), LK_F_CANCELLED);
    assert_true(lk_http_cancel_fired(tok));
    printf("# %s: cancel took effect after %.3f ms\n", modes[m], (double)(end - k.fired_at) / 1e6);
    assert_true(end - k.fired_at < LK_MS(250)); /* at once; generous for a loaded machine */
    size_t n;
    const lk_http_attempt_info *a = lk_http_result_attempts(res, &n);
    assert_int_equal(n, 1);
    if (m == 0)
      assert_int_equal(a[0].failure, LK_F_CANCELLED); /* cancelled mid-attempt */
    else
      assert_true(a[0].decision.retry); /* cancelled while waiting for the retry */
    lk_http_result_free(res);
    lk_http_request_free(req);
    lk_http_cancel_free(tok);
    faultd_stop(&FP);
  }
}

/* A client moves between threads ("one thread at a time"): calls submitted on this thread are
 * retried, with jitter drawn for every delay, by another thread while this one keeps retrying
 * calls on a second client. Each client draws from its own generator, so under TSan there is no
 * race (a generator captured per thread at submit would be shared by both threads). */
typedef struct mover {
  lk_http_client *c;
  tally t;
  int rc;
} mover;

static void *run_moved(void *arg) {
  mover *m = arg;
  int64_t t = lk_now_ns();
  m->rc = 0;
  while (m->rc >= 0 && lk_http_client_active(m->c) > 0 && lk_now_ns() - t < LK_SEC(30))
    m->rc = lk_http_client_run(m->c, LK_SEC(1));
  return NULL;
}

static void test_client_moves_between_threads(void **s) {
  (void)s;
  ht_start(&FP, "status", "--status", "503", NULL);
  lk_http_policy pol;
  ht_policy(&pol);
  pol.deadline = LK_SEC(10);
  lk_retry_config rc = pol.retry.cfg;
  rc.max_attempts = 20;
  pol.default_protection = false; /* all 20 attempts are wanted: no budget, no breaker */
  rc.backoff.kind = LK_BACKOFF_EXPONENTIAL;
  rc.backoff.base = LK_MS(1);
  rc.backoff.max = LK_MS(2);
  rc.backoff.jitter = LK_JITTER_FULL;
  assert_int_equal(lk_retry_policy_init(&pol.retry, &rc, NULL), LK_OK);
  lk_http_request *req = req_for("GET", "/moves");
  mover m = {.c = lk_http_client_new(NULL)};
  lk_http_client *mine = lk_http_client_new(NULL);
  assert_non_null(m.c);
  assert_non_null(mine);
  tally t = {0};
  for (int i = 0; i < 4; i++) {
    assert_int_equal(lk_http_submit(m.c, req, &pol, NULL, on_done, &m.t), LK_OK);
    assert_int_equal(lk_http_submit(mine, req, &pol, NULL, on_done, &t), LK_OK);
  }
  pthread_t th; /* hands m.c over: from now on only that thread uses it */
  assert_int_equal(pthread_create(&th, NULL, run_moved, &m), 0);
  run_all(mine);
  pthread_join(th, NULL);
  assert_true(m.rc >= 0);
  assert_int_equal(lk_http_client_active(m.c), 0);
  for (tally *x = &t; x; x = x == &t ? &m.t : NULL) {
    assert_int_equal(x->done, 4);
    assert_int_equal(x->err[-LK_EATTEMPTS], 4);
    size_t n;
    const lk_http_attempt_info *a = lk_http_result_attempts(x->keep, &n);
    assert_int_equal(n, 20);
    assert_true(a[0].decision.delay <= LK_MS(1)); /* a jittered draw in [0, base] */
    lk_http_result_free(x->keep);
  }
  lk_http_request_free(req);
  lk_http_client_free(m.c);
  lk_http_client_free(mine);
}

/* A token already fired: the call ends before any attempt. One token cancels many calls. */
static void test_cancel_many(void **s) {
  (void)s;
  const char *args[] = {"--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&FP, "accept_noread", args), 0);
  lk_http_request *req = req_for("GET", "/many-cancel");
  lk_http_policy pol;
  ht_policy(&pol);
  pol.deadline = LK_SEC(30);
  pol.attempt_timeout = LK_SEC(20);
  lk_http_cancel *tok = lk_http_cancel_new();
  lk_http_cancel_fire(tok);
  lk_http_result *res = NULL;
  assert_int_equal(lk_http_call(NULL, req, &pol, tok, &res), LK_ECANCELED);
  size_t n;
  lk_http_result_attempts(res, &n);
  assert_int_equal(n, 0);
  lk_http_result_free(res);
  lk_http_cancel_free(tok);

  tok = lk_http_cancel_new();
  lk_http_client *c = lk_http_client_new(NULL);
  tally t = {0};
  for (int i = 0; i < 50; i++)
    assert_int_equal(lk_http_submit(c, req, &pol, tok, on_done, &t), LK_OK);
  assert_true(lk_http_client_run(c, LK_MS(100)) == 50); /* all stuck in the server */
  canceller k = {tok, 50, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, cancel_later, &k), 0);
  run_all(c);
  int64_t end = lk_now_ns();
  pthread_join(th, NULL);
  assert_int_equal(t.done, 50);
  assert_int_equal(t.err[-LK_ECANCELED], 50);
  assert_true(end - k.fired_at < LK_MS(250));
  lk_http_result_free(t.keep);
  lk_http_client_free(c);
  lk_http_cancel_free(tok);
  lk_http_request_free(req);
}

/* Freeing a client ends what is in flight, each callback runs once with LK_ECANCELED. */
static void test_free_cancels(void **s) {
  (void)s;
  const char *args[] = {"--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&FP, "accept_noread", args), 0);
  lk_http_request *req = req_for("POST", "/free");
  assert_int_equal(lk_http_request_set_body(req, "x", 1), LK_OK);
  assert_int_equal(lk_http_request_set_body(req, "y", 1), LK_OK);
  lk_http_client *c = lk_http_client_new(NULL);
  lk_http_policy pol;
  ht_policy(&pol);
  tally t = {0};
  for (int i = 0; i < 10; i++)
    assert_int_equal(lk_http_submit(c, req, &pol, NULL, on_done, &t), LK_OK);
  /* the request is in use by calls: it may not change under them */
  assert_int_equal(lk_http_request_set_body(req, "z", 1), LK_ESTATE);
  lk_http_client_run(c, LK_MS(50));
  lk_http_client_free(c);
  assert_int_equal(t.done, 10);
  assert_int_equal(t.err[-LK_ECANCELED], 10);
  assert_int_equal(lk_http_request_set_body(req, "z", 1), LK_OK);
  lk_http_result_free(t.keep);
  lk_http_request_free(req);
}

/* A callback may chain: submit the next call from inside the completion. */
typedef struct chain {
  lk_http_client *c;
  lk_http_request *req;
  lk_http_policy pol;
  int left, ok;
} chain;

static void chain_done(void *ud, lk_http_result *res) {
  chain *ch = ud;
  if (lk_http_result_err(res) == LK_OK)
    ch->ok++;
  lk_http_result_free(res);
  if (--ch->left > 0)
    assert_int_equal(lk_http_submit(ch->c, ch->req, &ch->pol, NULL, chain_done, ch), LK_OK);
}

typedef struct waker {
  lk_http_client *c;
  int delay_ms;
  int64_t woke_at;
} waker;

static void *wake_later(void *arg) {
  waker *w = arg;
  struct timespec ts = {0, (long)w->delay_ms * 1000000L};
  nanosleep(&ts, NULL);
  w->woke_at = lk_now_ns();
  lk_http_client_wakeup(w->c);
  return NULL;
}

static void test_chain_and_wakeup(void **s) {
  (void)s;
  const char *args[] = {"--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&FP, "ok", args), 0);
  chain ch = {.c = lk_http_client_new(NULL), .req = req_for("GET", "/chain"), .left = 20};
  ht_policy(&ch.pol);
  assert_int_equal(lk_http_submit(ch.c, ch.req, &ch.pol, NULL, chain_done, &ch), LK_OK);
  run_all(ch.c);
  assert_int_equal(ch.ok, 20);
  assert_int_equal(faultd_connections(&FP), 1); /* one kept-alive connection for all */
  /* nothing in flight: run returns at once */
  int64_t t0 = lk_now_ns();
  assert_int_equal(lk_http_client_run(ch.c, LK_SEC(5)), 0);
  assert_true(lk_now_ns() - t0 < LK_MS(100));
  /* a call waiting out a 10 s retry delay: a wake-up from another thread ends a 5 s run early,
   * with the call still in flight */
  lk_http_policy slow;
  ht_policy(&slow);
  slow.deadline = LK_SEC(30);
  ht_backoff(&slow, LK_SEC(10), LK_SEC(10));
  lk_http_request *refused = lk_http_request_new("GET", "http://127.0.0.1:1/");
  tally t = {0};
  assert_int_equal(lk_http_submit(ch.c, refused, &slow, NULL, on_done, &t), LK_OK);
  assert_int_equal(lk_http_client_run(ch.c, 0), 1); /* refused at once; the delay starts */
  waker w = {ch.c, 100, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, wake_later, &w), 0);
  t0 = lk_now_ns();
  assert_int_equal(lk_http_client_run(ch.c, LK_SEC(5)), 1);
  int64_t end = lk_now_ns();
  pthread_join(th, NULL);
  assert_true(end >= w.woke_at);
  assert_true(end - t0 < LK_MS(900)); /* not the 5 s, nor the 1 s poll cap */
  assert_int_equal(t.done, 0);
  lk_http_client_free(ch.c); /* cancels it */
  assert_int_equal(t.done, 1);
  assert_int_equal(t.err[-LK_ECANCELED], 1);
  lk_http_result_free(t.keep);
  lk_http_request_free(refused);
  lk_http_request_free(ch.req);
}

/* A synchronous call on a client with asynchronous calls in flight: it returns with its own
 * result while the others progress (their callbacks may run inside it). */
static void test_sync_amid_async(void **s) {
  (void)s;
  const char *args[] = {"--script", "slow:300,slow:300,slow:300,ok", "--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&FP, "ok", args), 0);
  lk_http_client *c = lk_http_client_new(NULL);
  lk_http_request *req = req_for("GET", "/mixed");
  lk_http_policy pol;
  ht_policy(&pol);
  pol.deadline = LK_SEC(10);
  pol.attempt_timeout = LK_SEC(5);
  tally t = {0};
  for (int i = 0; i < 3; i++)
    assert_int_equal(lk_http_submit(c, req, &pol, NULL, on_done, &t), LK_OK);
  int64_t tw = lk_now_ns(); /* until the three are waiting at the server */
  while (faultd_request_count(&FP) < 3) {
    assert_true(lk_http_client_run(c, LK_MS(5)) >= 0);
    assert_true(lk_now_ns() - tw < LK_SEC(2));
  }
  lk_http_result *res = NULL;
  int64_t t0 = lk_now_ns();
  assert_int_equal(lk_http_call(c, req, &pol, NULL, &res), LK_OK);
  assert_true(lk_now_ns() - t0 < LK_MS(250)); /* did not wait for the slow ones */
  lk_http_result_free(res);
  run_all(c);
  assert_int_equal(t.ok, 3);
  lk_http_result_free(t.keep);
  lk_http_request_free(req);
  lk_http_client_free(c);
}

/* A bulkhead of 2 slots: 8 calls of 100 ms never have more than 2 attempts in flight; with a
 * pool timeout shorter than the queue, the late ones are refused as POOL_TIMEOUT. */
static void test_bulkhead(void **s) {
  (void)s;
  const char *args[] = {"--delay-ms", "100", "--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&FP, "slow", args), 0);
  lk_bulkhead_config bc;
  lk_bulkhead_config_init_default(&bc);
  bc.max_concurrent = 2;
  lk_bulkhead *bh = NULL;
  assert_int_equal(lk_bulkhead_new(&bc, &bh, NULL), LK_OK);
  lk_http_client *c = lk_http_client_new(NULL);
  lk_http_request *req = req_for("GET", "/bulkhead");
  lk_http_policy pol;
  ht_policy(&pol);
  pol.deadline = LK_SEC(10);
  pol.attempt_timeout = LK_SEC(5);
  pol.bulkhead = bh;
  tally t = {0};
  int64_t start = lk_now_ns();
  for (int i = 0; i < 8; i++)
    assert_int_equal(lk_http_submit(c, req, &pol, NULL, on_done, &t), LK_OK);
  run_all(c);
  int64_t wall = lk_now_ns() - start;
  assert_int_equal(t.ok, 8);
  assert_true(wall >= LK_MS(390)); /* 4 waves of 2 */
  assert_int_equal(lk_bulkhead_in_use(bh), 0);
  /* On the server: each request is held 100 ms, so three in flight at once would put three
   * arrivals within 100 ms; with 2 slots a third arrives only after one was answered. */
  faultd_req reqs[8];
  assert_int_equal(faultd_requests(&FP, reqs, 8), 8);
  for (int i = 0; i + 2 < 8; i++)
    if (reqs[i + 2].t_ms - reqs[i].t_ms < 99)
      fail_msg("requests %d..%d arrived within %lld ms: more than 2 in flight", i + 1, i + 3,
               reqs[i + 2].t_ms - reqs[i].t_ms);
  lk_http_result_free(t.keep);

  memset(&t, 0, sizeof t);
  pol.pool_timeout = LK_MS(50);
  for (int i = 0; i < 4; i++)
    assert_int_equal(lk_http_submit(c, req, &pol, NULL, on_done, &t), LK_OK);
  run_all(c);
  assert_int_equal(t.ok, 2);
  assert_int_equal(t.err[-LK_EBULKHEAD_FULL], 2);
  assert_int_equal(t.kinds[LK_F_POOL_TIMEOUT], 2);
  assert_int_equal(lk_bulkhead_in_use(bh), 0);
  lk_http_result_free(t.keep);
  lk_http_request_free(req);
  lk_http_client_free(c);
  lk_bulkhead_free(bh);
}

/* Async calls and a blocking acquirer share one bulkhead queue, served in arrival order: async
 * A1, then the blocking thread, then async A2 (a driver that polled try_acquire would lose every
 * race to the blocking waiter, which the bulkhead serves first). Each records its turn while it
 * holds the slot (the hook runs before the slot is released). */
static _Atomic int turn;
typedef struct turn_rec {
  int at;
} turn_rec;

static lk_failure record_turn(void *ctx, const lk_http_response *resp, lk_failure kind) {
  (void)resp;
  ((turn_rec *)ctx)->at = atomic_fetch_add(&turn, 1);
  return kind;
}

typedef struct blocker {
  lk_bulkhead *bh;
  int rc, at;
} blocker;

static void *block_on_bulkhead(void *arg) {
  blocker *b = arg;
  b->rc = lk_bulkhead_acquire(b->bh, NULL, lk_deadline_after(lk_now_ns(), LK_SEC(10)));
  if (b->rc == LK_OK) {
    b->at = atomic_fetch_add(&turn, 1);
    struct timespec ts = {0, 20000000L}; /* hold it a little: A2 must still wait */
    nanosleep(&ts, NULL);
    lk_bulkhead_release(b->bh);
  }
  return NULL;
}

/* Runs the client without blocking until the bulkhead has `depth` waiters (bounded). */
static void run_until_queued(lk_http_client *c, lk_bulkhead *bh, int64_t depth) {
  int64_t t = lk_now_ns();
  while (lk_bulkhead_queue_depth(bh) < depth) {
    assert_true(lk_http_client_run(c, LK_MS(1)) >= 0);
    assert_true(lk_now_ns() - t < LK_SEC(5));
  }
}

static void test_bulkhead_fifo_with_blocking_waiter(void **s) {
  (void)s;
  ht_start(&FP, "ok", NULL);
  lk_bulkhead_config bc;
  lk_bulkhead_config_init_default(&bc);
  bc.max_concurrent = 1;
  lk_bulkhead *bh = NULL;
  assert_int_equal(lk_bulkhead_new(&bc, &bh, NULL), LK_OK);
  assert_int_equal(lk_bulkhead_try_acquire(bh), LK_OK); /* the test holds the only slot */
  lk_http_client *c = lk_http_client_new(NULL);
  lk_http_request *req = req_for("GET", "/fifo");
  lk_http_policy pol;
  ht_policy(&pol);
  pol.deadline = LK_SEC(10);
  pol.bulkhead = bh;
  pol.classify = record_turn;
  turn_rec a1 = {-1}, a2 = {-1};
  tally t = {0};
  atomic_store(&turn, 0);
  pol.classify_ctx = &a1;
  assert_int_equal(lk_http_submit(c, req, &pol, NULL, on_done, &t), LK_OK);
  run_until_queued(c, bh, 1);
  blocker b = {bh, 1, -1};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, block_on_bulkhead, &b), 0);
  run_until_queued(c, bh, 2);
  pol.classify_ctx = &a2;
  assert_int_equal(lk_http_submit(c, req, &pol, NULL, on_done, &t), LK_OK);
  run_until_queued(c, bh, 3);
  lk_bulkhead_release(bh);
  run_all(c);
  pthread_join(th, NULL);
  assert_int_equal(t.ok, 2);
  assert_int_equal(b.rc, LK_OK);
  printf("# turns: A1 %d, blocking %d, A2 %d\n", a1.at, b.at, a2.at);
  assert_int_equal(a1.at, 0);
  assert_int_equal(b.at, 1);
  assert_int_equal(a2.at, 2);
  assert_int_equal(lk_bulkhead_in_use(bh), 0);
  assert_int_equal(lk_bulkhead_queue_depth(bh), 0);
  lk_http_result_free(t.keep);

  /* The slot held elsewhere: a queued call ends at pool_timeout as POOL_TIMEOUT (phase QUEUED,
   * LK_EBULKHEAD_FULL), and at the deadline as DEADLINE_EXCEEDED when that comes first; either
   * way it leaves the queue. */
  assert_int_equal(lk_bulkhead_try_acquire(bh), LK_OK);
  pol.classify = NULL;
  const int64_t pool[] = {LK_MS(60), 0};
  for (int i = 0; i < 2; i++) {
    pol.pool_timeout = pool[i];
    pol.deadline = i == 0 ? LK_SEC(5) : LK_MS(80);
    ht_run r;
    ht_call_url(c, "GET", "http://127.0.0.1:1/never", NULL, 0, &pol, &r);
    int64_t waited = lk_http_result_elapsed(r.res);
    if (i == 0) {
      assert_int_equal(r.err, LK_EBULKHEAD_FULL);
      assert_int_equal(r.nattempts, 1);
      assert_int_equal(r.att[0].phase, LK_PHASE_QUEUED);
      assert_int_equal(r.att[0].failure, LK_F_POOL_TIMEOUT);
      assert_true(waited >= LK_MS(60) && waited < LK_MS(200));
    } else { /* the deadline passed before any attempt could start */
      assert_int_equal(r.err, LK_EDEADLINE);
      assert_int_equal(r.nattempts, 0);
      assert_int_equal(lk_http_result_failure(r.res), LK_F_DEADLINE_EXCEEDED);
      assert_true(waited >= LK_MS(80) && waited < LK_MS(220));
    }
    assert_int_equal(lk_bulkhead_queue_depth(bh), 0);
    ht_free(&r);
  }
  lk_bulkhead_release(bh);
  lk_http_request_free(req);
  lk_http_client_free(c);
  lk_bulkhead_free(bh);
}

/* A limiter of 20/s with burst 1 spaces 5 calls ~50 ms apart; one that would wait past its
 * deadline is refused at once. */

/* The per-attempt hook runs once per attempt, as soon as its decision is made: before the retry
 * delay, with the entry the timeline will hold. */
typedef struct seen_attempts {
  int n;
  int number[8];
  int64_t at[8];
  bool retry[8];
} seen_attempts;

static void record_attempt(void *ctx, const lk_http_attempt_info *a) {
  seen_attempts *s = ctx;
  if (s->n < 8) {
    s->number[s->n] = a->number;
    s->retry[s->n] = a->decision.retry;
    s->at[s->n++] = lk_now_ns();
  }
}

static void test_attempt_hook(void **s) {
  (void)s;
  ht_start(&FP, "status", "--script", "503,200", NULL);
  lk_http_policy pol;
  ht_policy(&pol);
  ht_backoff(&pol, LK_MS(300), LK_MS(300));
  seen_attempts seen = {0};
  pol.on_attempt = record_attempt;
  pol.on_attempt_ctx = &seen;
  lk_http_client *c = lk_http_client_new(NULL);
  lk_http_request *req = req_for("GET", "/hook");
  lk_http_result *res = NULL;
  int64_t t0 = lk_now_ns();
  assert_int_equal(lk_http_call(c, req, &pol, NULL, &res), LK_OK);
  size_t n;
  const lk_http_attempt_info *a = lk_http_result_attempts(res, &n);
  assert_int_equal(n, 2);
  assert_int_equal(seen.n, 2);
  assert_int_equal(seen.number[0], 1);
  assert_int_equal(seen.number[1], 2);
  assert_true(seen.retry[0]);
  assert_false(seen.retry[1]);
  /* attempt 1 was reported before its 300 ms delay, not when the call ended */
  assert_true(seen.at[0] - t0 < a[1].start - LK_MS(100));
  lk_http_result_free(res);
  lk_http_request_free(req);
  lk_http_client_free(c);
}

static void test_limiter(void **s) {
  (void)s;
  const char *args[] = {"--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&FP, "ok", args), 0);
  lk_limiter_config lc;
  lk_limiter_config_init_default(&lc);
  lc.rate = 20;
  lc.burst = 1;
  lk_limiter *lim = NULL;
  assert_int_equal(lk_limiter_new(&lc, &lim, NULL), LK_OK);
  lk_http_client *c = lk_http_client_new(NULL);
  lk_http_request *req = req_for("GET", "/limiter");
  lk_http_policy pol;
  ht_policy(&pol);
  pol.limiter = lim;
  tally t = {0};
  int64_t start = lk_now_ns();
  for (int i = 0; i < 5; i++)
    assert_int_equal(lk_http_submit(c, req, &pol, NULL, on_done, &t), LK_OK);
  run_all(c);
  assert_int_equal(t.ok, 5);
  assert_true(lk_now_ns() - start >= LK_MS(190));
  lk_http_result_free(t.keep);

  /* a fresh limiter holds one token: the first of three calls takes it, the two others would
   * wait 50 and 100 ms, past their 20 ms deadline, and are refused at once */
  lk_limiter_free(lim);
  assert_int_equal(lk_limiter_new(&lc, &lim, NULL), LK_OK);
  pol.limiter = lim;
  memset(&t, 0, sizeof t);
  pol.deadline = LK_MS(20);
  for (int i = 0; i < 3; i++)
    assert_int_equal(lk_http_submit(c, req, &pol, NULL, on_done, &t), LK_OK);
  start = lk_now_ns();
  run_all(c);
  assert_int_equal(t.ok, 1);
  assert_int_equal(t.err[-LK_ERATE_LIMITED], 2);
  assert_int_equal(t.kinds[LK_F_RATE_LIMITED], 2);
  assert_true(lk_now_ns() - start < LK_MS(20) + LK_MS(50));
  lk_http_result_free(t.keep);
  lk_http_request_free(req);
  lk_http_client_free(c);
  lk_limiter_free(lim);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_many_concurrent, teardown),
      cmocka_unit_test_teardown(test_delays_are_timers, teardown),
      cmocka_unit_test_teardown(test_external_loop, teardown),
      cmocka_unit_test_teardown(test_external_close_hook, teardown),
      cmocka_unit_test_teardown(test_cancel_from_thread, teardown),
      cmocka_unit_test_teardown(test_cancel_many, teardown),
      cmocka_unit_test_teardown(test_client_moves_between_threads, teardown),
      cmocka_unit_test_teardown(test_free_cancels, teardown),
      cmocka_unit_test_teardown(test_chain_and_wakeup, teardown),
      cmocka_unit_test_teardown(test_sync_amid_async, teardown),
      cmocka_unit_test_teardown(test_bulkhead, teardown),
      cmocka_unit_test_teardown(test_bulkhead_fifo_with_blocking_waiter, teardown),
      cmocka_unit_test_teardown(test_limiter, teardown),
      cmocka_unit_test_teardown(test_attempt_hook, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
