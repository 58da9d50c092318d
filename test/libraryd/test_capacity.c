/* SPDX-License-Identifier: MIT */
/* Capacity, queueing and overload of the real daemon: throughput = workers / cost, a full queue
 * answers 503 at once, the dequeue drops expired and too-short deadlines without applying the
 * effect, the slowdown fault, codel and lifo order, abandoned work, the stats, /admin/series and
 * the metrics, and a drain with requests still queued. */
#include "harness.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static lib_proc P;

static int group_setup(void **state) {
  (void)state;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  return 0;
}

/* After a failed assertion too: no daemon outlives its test. */
static int test_teardown(void **state) {
  (void)state;
  lib_cleanup(&P);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  curl_global_cleanup();
  return 0;
}

static void start(const char *const *args) {
  if (lib_start(&P, args) != 0)
    fail_msg("libraryd did not start");
}

static void stop(void) {
  int rc = lib_stop(&P);
  lib_cleanup(&P);
  assert_int_equal(rc, 0);
}

static json_t *server_stats(void) {
  json_t *st = lib_stats(&P);
  assert_non_null(st);
  json_t *srv = json_incref(json_object_get(st, "server"));
  json_decref(st);
  return srv;
}

static int64_t stat_of(const char *name) {
  json_t *s = server_stats();
  json_t *v = json_object_get(s, name);
  if (!v)
    fail_msg("no server.%s in /admin/stats", name);
  int64_t n = (int64_t)json_integer_value(v);
  json_decref(s);
  return n;
}

/* Waits (bounded) until server.name reaches want. */
static void wait_stat(const char *name, int64_t want) {
  for (int i = 0; i < 400; i++) {
    if (stat_of(name) >= want)
      return;
    sleep_ms(5);
  }
  fail_msg("server.%s stayed below %lld", name, (long long)want);
}

/* --- background requests --------------------------------------------------------------------- */

typedef struct bg {
  pthread_t t;
  http_req rq;
  const char *hdrs[4];
  char h0[160], h1[160];
  char path[64];
  http_res res;
  double done_at;
} bg;

static void *bg_main(void *arg) {
  bg *b = arg;
  http_do(P.port, &b->rq, &b->res);
  b->done_at = now_s();
  return NULL;
}

/* Starts method path (with up to two headers) on a thread. */
static void bg_start(bg *b, const char *method, const char *path, const char *h0, const char *h1,
                     long timeout_ms) {
  memset(b, 0, sizeof *b);
  snprintf(b->path, sizeof b->path, "%s", path);
  int n = 0;
  if (h0) {
    snprintf(b->h0, sizeof b->h0, "%s", h0);
    b->hdrs[n++] = b->h0;
  }
  if (h1) {
    snprintf(b->h1, sizeof b->h1, "%s", h1);
    b->hdrs[n++] = b->h1;
  }
  b->hdrs[n] = NULL;
  b->rq =
      (http_req){.method = method, .path = b->path, .headers = b->hdrs, .timeout_ms = timeout_ms};
  if (!strcmp(method, "POST"))
    b->rq.body = "{}";
  assert_int_equal(pthread_create(&b->t, NULL, bg_main, b), 0);
}

static void bg_join(bg *b) { pthread_join(b->t, NULL); }

/* --- throughput ------------------------------------------------------------------------------ */

typedef struct loader {
  pthread_t t;
  double until;
  atomic_int *ok;
  int other;
} loader;

/* A closed-loop client on one keep-alive connection: GET /books/1 until `until`. */
static void *loader_main(void *arg) {
  loader *l = arg;
  CURL *c = curl_easy_init();
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/books/1", P.port);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
  FILE *devnull = fopen("/dev/null", "w");
  curl_easy_setopt(c, CURLOPT_WRITEDATA, devnull);
  for (int i = 0; i < 100000 && now_s() < l->until; i++) {
    long status = 0;
    if (curl_easy_perform(c) == CURLE_OK)
      curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (status == 200)
      atomic_fetch_add(l->ok, 1);
    else
      l->other++;
  }
  fclose(devnull);
  curl_easy_cleanup(c);
  return NULL;
}

/* 4 workers x 10 ms of (sleep) cost = 400 requests/s, whatever the number of callers. */
static void test_throughput_is_workers_over_cost(void **state) {
  (void)state;
  const char *args[] = {"--queue-discipline", "fifo",  "--workers", "4", "--work",
                        "GET /books/*=10ms",  "--log", "off",       NULL};
  start(args);
  enum { CONNS = 12 };
  loader l[CONNS];
  atomic_int ok = 0;
  double t0 = now_s(), dur = 2.0;
  for (int i = 0; i < CONNS; i++) {
    l[i] = (loader){.until = t0 + dur, .ok = &ok};
    assert_int_equal(pthread_create(&l[i].t, NULL, loader_main, &l[i]), 0);
  }
  int other = 0;
  for (int i = 0; i < CONNS; i++) {
    pthread_join(l[i].t, NULL);
    other += l[i].other;
  }
  double elapsed = now_s() - t0;
  double rate = atomic_load(&ok) / elapsed;
  fprintf(stderr, "throughput: %d ok in %.2f s = %.0f/s (other %d)\n", atomic_load(&ok), elapsed,
          rate, other);
  assert_int_equal(other, 0);
  /* Above 440: the cost was skipped or more workers ran. The lower bound is loose: a starved
   * machine (ASan at load 8) stretches each 10 ms by a few ms (330/s was seen), and that all
   * four workers ran is checked from their busy time below. */
  assert_in_range((long)rate, 250, 440);
  /* The workers were busy the whole time: busy_ns ~ 4 x elapsed. */
  double busy = (double)stat_of("busy_ns") / 1e9;
  assert_true(busy > 0.85 * 4 * dur);
  assert_true(stat_of("queue_depth_max") >= CONNS - 4 - 1);
  stop();
}

/* --- a full queue ---------------------------------------------------------------------------- */

static void test_full_queue_is_503_at_once(void **state) {
  (void)state;
  const char *args[] = {"--queue-discipline", "fifo", "--workers", "1", "--queue", "2", "--work",
                        "GET /books/*=400ms", NULL};
  start(args);
  bg b[3];
  for (int i = 0; i < 3; i++) {
    bg_start(&b[i], "GET", "/books/1", NULL, NULL, 5000);
    wait_stat("admitted", i + 1);
  }
  assert_int_equal(stat_of("queue_depth"), 2); /* one running, two waiting */
  http_res r;
  http_get(P.port, "/books/2", &r);
  assert_int_equal(r.status, 503);
  assert_true(r.secs < 0.05); /* while the worker is busy for 400 ms more */
  char v[32];
  assert_non_null(http_header(&r, "Retry-After", v, sizeof v));
  assert_string_equal(v, "1");
  json_t *j = http_json(&r);
  assert_string_equal(json_string_value(json_object_get(j, "error")), "overloaded");
  json_decref(j);
  http_res_free(&r);
  /* Replays and early errors need no worker: still answered at once. */
  http_get(P.port, "/books/0", &r);
  assert_int_equal(r.status, 400);
  assert_true(r.secs < 0.05);
  http_res_free(&r);
  http_get(P.port, "/healthz", &r);
  assert_int_equal(r.status, 200);
  http_res_free(&r);
  for (int i = 0; i < 3; i++) {
    bg_join(&b[i]);
    assert_int_equal(b[i].res.status, 200);
    http_res_free(&b[i].res);
  }
  assert_int_equal(stat_of("dropped_queue_full"), 1);
  assert_int_equal(stat_of("work_done"), 3);
  stop();
}

/* --- deadlines at dequeue -------------------------------------------------------------------- */

static void test_deadline_checked_at_dequeue(void **state) {
  (void)state;
  const char *args[] = {"--queue-discipline",        "fifo", "--workers", "1", "--work",
                        "POST /books/*/loans=300ms", NULL};
  start(args);
  int64_t book = lib_create_book(P.port, 10);
  assert_true(book > 0);
  char path[64];
  snprintf(path, sizeof path, "/books/%lld/loans", (long long)book);
  int64_t applied0 = stat_of("loans_applied");
  /* The worker is busy for 300 ms with the first loan; the second's 100 ms pass in the queue. */
  bg busy, late;
  int64_t admitted0 = stat_of("admitted"); /* creating the book went through the queue too */
  bg_start(&busy, "POST", path, "Idempotency-Key: dq-busy", NULL, 5000);
  wait_stat("admitted", admitted0 + 1);
  bg_start(&late, "POST", path, "Idempotency-Key: dq-late", "Linkd-Deadline: 100", 5000);
  bg_join(&late);
  bg_join(&busy);
  assert_int_equal(busy.res.status, 201);
  assert_int_equal(late.res.status, 504);
  if (!strstr(late.res.body, "\"deadline_exceeded\""))
    fail_msg("late: %s", late.res.body);
  assert_true(late.done_at - busy.done_at < 0.05); /* answered as soon as a worker took it */
  http_res_free(&busy.res);
  http_res_free(&late.res);
  assert_int_equal(stat_of("loans_applied"), applied0 + 1);
  assert_int_equal(lib_stock(P.port, book), 9);
  assert_int_equal(stat_of("dropped_deadline_expired"), 1);
  assert_int_equal(stat_of("keys_executing"), 0); /* its claim is released */

  /* Time left, but less than the 300 ms the loan costs: 504 deadline_too_short, no work. */
  http_res r;
  const char *h[] = {"Idempotency-Key: dq-short", "Linkd-Deadline: 200", NULL};
  http_send(P.port, "POST", path, h, "{}", &r);
  assert_int_equal(r.status, 504);
  assert_non_null(strstr(r.body, "\"deadline_too_short\""));
  assert_true(r.secs < 0.1);
  http_res_free(&r);
  assert_int_equal(stat_of("dropped_deadline_too_short"), 1);
  assert_int_equal(lib_stock(P.port, book), 9);
  /* Nothing was stored for either key: retried with time left, each applies once. */
  const char *h2[] = {"Idempotency-Key: dq-late", "Linkd-Deadline: 5000", NULL};
  http_send(P.port, "POST", path, h2, "{}", &r);
  assert_int_equal(r.status, 201);
  http_res_free(&r);
  const char *h3[] = {"Idempotency-Key: dq-short", "Linkd-Deadline: 5000", NULL};
  http_send(P.port, "POST", path, h3, "{}", &r);
  assert_int_equal(r.status, 201);
  http_res_free(&r);
  assert_int_equal(lib_stock(P.port, book), 7);
  /* A replay needs no worker: answered at once even though a loan costs 300 ms. */
  http_send(P.port, "POST", path, h3, "{}", &r);
  assert_int_equal(r.status, 201);
  assert_true(r.secs < 0.1);
  http_res_free(&r);
  stop();
}

/* --- slowdown -------------------------------------------------------------------------------- */

static double timed_get(const char *path, const char *hdr, long *status) {
  http_res r;
  const char *h[] = {hdr, NULL};
  http_send(P.port, "GET", path, h, NULL, &r);
  *status = r.status;
  double s = r.secs;
  http_res_free(&r);
  return s;
}

static double slowdown_factor(void) {
  json_t *s = server_stats();
  double f = json_real_value(json_object_get(s, "slowdown_factor"));
  json_decref(s);
  return f;
}

static void test_slowdown_fault(void **state) {
  (void)state;
  const char *args[] = {"--workers", "1",
                        "--work",    "GET /books/*=20ms",
                        "--fault",   "route=GET /books/*,kind=slowdown,factor=5,for=700ms",
                        NULL};
  double t_start = now_s();
  start(args);
  long st;
  double t = timed_get("/books/1", NULL, &st);
  assert_int_equal(st, 200);
  assert_true(slowdown_factor() == 5.0);
  assert_true(t >= 0.095 && t < 0.4); /* 20 ms x 5 */
  /* The expected service time (100 ms) no longer fits a 60 ms deadline. */
  timed_get("/books/1", "Linkd-Deadline: 60", &st);
  assert_int_equal(st, 504);
  /* The window opened when libraryd started, some time after t_start (long under a sanitizer
   * on a loaded machine): wait for its end as libraryd reports it, bounded. */
  while (now_s() < t_start + 0.8 || (slowdown_factor() != 1.0 && now_s() < t_start + 10))
    sleep_ms(10);
  /* for= is over: inert. The one worker's busy time says how long the request took to serve
   * (20 ms, not 100), whatever the loaded machine added around it. */
  double busy = (double)stat_of("busy_ns") / 1e9;
  t = timed_get("/books/1", NULL, &st);
  assert_int_equal(st, 200);
  busy = (double)stat_of("busy_ns") / 1e9 - busy;
  assert_true(t >= 0.019);
  assert_true(busy >= 0.019 && busy < 0.06);
  assert_true(slowdown_factor() == 1.0);
  timed_get("/books/1", "Linkd-Deadline: 60", &st);
  assert_int_equal(st, 200);

  /* At run time through the admin API; another route is untouched. */
  http_res r;
  http_send(P.admin_port, "POST", "/admin/faults", NULL,
            "route=GET /books/2,kind=slowdown,factor=10", &r);
  assert_int_equal(r.status, 201);
  json_t *j = http_json(&r);
  int id = (int)json_integer_value(json_object_get(j, "id"));
  json_decref(j);
  http_res_free(&r);
  t = timed_get("/books/2", NULL, &st);
  assert_int_equal(st, 200);
  assert_true(t >= 0.195);
  t = timed_get("/books/3", NULL, &st);
  assert_true(t < 0.09);
  assert_true(slowdown_factor() == 10.0);
  char path[64];
  snprintf(path, sizeof path, "/admin/faults/%d", id);
  http_send(P.admin_port, "DELETE", path, NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  http_res_free(&r);
  t = timed_get("/books/2", NULL, &st);
  assert_true(t < 0.09);
  /* A bad rule is refused with the reason. */
  http_send(P.admin_port, "POST", "/admin/faults", NULL, "kind=slowdown,factor=0.5", &r);
  assert_int_equal(r.status, 400);
  http_res_free(&r);
  stop();
}

/* --- disciplines ----------------------------------------------------------------------------- */

static void test_codel_drops_a_standing_queue(void **state) {
  (void)state;
  const char *args[] = {"--workers",
                        "1",
                        "--work",
                        "GET /books/*=300ms",
                        "--queue-discipline",
                        "codel",
                        "--queue-interval",
                        "50ms",
                        "--queue-target",
                        "5ms",
                        NULL};
  start(args);
  bg b[5];
  for (int i = 0; i < 5; i++) {
    bg_start(&b[i], "GET", "/books/1", NULL, NULL, 5000);
    wait_stat("admitted", i + 1);
  }
  int ok = 0, dropped = 0;
  for (int i = 0; i < 5; i++) {
    bg_join(&b[i]);
    if (b[i].res.status == 200)
      ok++;
    else if (b[i].res.status == 503 && strstr(b[i].res.body, "\"overloaded\""))
      dropped++;
    http_res_free(&b[i].res);
  }
  /* The first is served; the others waited ~300 ms in a queue not empty for > 50 ms. */
  assert_int_equal(ok, 1);
  assert_int_equal(dropped, 4);
  assert_int_equal(stat_of("dropped_codel"), 4);
  stop();
}

static void test_lifo_serves_the_newest_first(void **state) {
  (void)state;
  const char *args[] = {"--workers",          "1",    "--work", "GET /books/*=200ms",
                        "--queue-discipline", "lifo", NULL};
  start(args);
  bg b[4];
  for (int i = 0; i < 4; i++) {
    bg_start(&b[i], "GET", "/books/1", NULL, NULL, 5000);
    wait_stat("admitted", i + 1);
  }
  for (int i = 0; i < 4; i++) {
    bg_join(&b[i]);
    assert_int_equal(b[i].res.status, 200);
    http_res_free(&b[i].res);
  }
  /* b0 ran first (the queue was empty); then the newest: b3, b2, b1. */
  assert_true(b[0].done_at < b[3].done_at);
  assert_true(b[3].done_at < b[2].done_at);
  assert_true(b[2].done_at < b[1].done_at);
  stop();
}

/* --- abandoned work, series, metrics ---------------------------------------------------------- */

static void test_abandoned_work_series_and_metrics(void **state) {
  (void)state;
  const char *args[] = {"--workers", "1", "--work", "GET /books/*=300ms", NULL};
  start(args);
  /* The caller gives up after 100 ms; the work still runs and is counted as abandoned. */
  http_req rq = {.path = "/books/1", .timeout_ms = 100};
  http_res r;
  http_do(P.port, &rq, &r);
  assert_int_equal(r.status, 0);
  http_res_free(&r);
  wait_stat("work_abandoned", 1);
  long st;
  timed_get("/books/1", NULL, &st);
  assert_int_equal(st, 200);
  json_t *s = server_stats();
  assert_int_equal(json_integer_value(json_object_get(s, "work_done")), 1);
  assert_int_equal(json_integer_value(json_object_get(s, "work_abandoned")), 1);
  int64_t ab_ns = (int64_t)json_integer_value(json_object_get(s, "work_abandoned_ns"));
  int64_t work_ns = (int64_t)json_integer_value(json_object_get(s, "work_ns"));
  assert_true(ab_ns >= 300000000 && ab_ns < 1000000000);
  assert_true(work_ns >= 600000000 && work_ns >= ab_ns);
  assert_int_equal(json_integer_value(json_object_get(s, "workers")), 1);
  assert_int_equal(json_integer_value(json_object_get(s, "queue_limit")), 1024);
  assert_true(json_integer_value(json_object_get(s, "busy_ns")) >= work_ns);
  const char *keys[] = {
      "queue_depth",        "queue_depth_max",          "admitted",
      "dropped_queue_full", "dropped_deadline_expired", "dropped_deadline_too_short",
      "dropped_codel"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    if (!json_is_integer(json_object_get(s, keys[i])))
      fail_msg("server.%s missing", keys[i]);
  assert_true(json_is_real(json_object_get(s, "slowdown_factor")));
  json_decref(s);

  http_get(P.admin_port, "/admin/series", &r);
  assert_int_equal(r.status, 200);
  json_t *j = http_json(&r);
  http_res_free(&r);
  assert_int_equal(json_integer_value(json_object_get(j, "window_ns")), 100000000);
  json_t *b = json_object_get(j, "buckets");
  assert_true(json_array_size(b) >= 3 && json_array_size(b) <= 1200);
  int64_t sums[4] = {0}, prev = -1;
  const char *fields[] = {"arrivals", "completed", "abandoned", "dropped"};
  for (size_t i = 0; i < json_array_size(b); i++) {
    json_t *e = json_array_get(b, i);
    int64_t t = (int64_t)json_integer_value(json_object_get(e, "t_ns"));
    assert_true(prev < 0 || t == prev + 100000000);
    prev = t;
    for (int f = 0; f < 4; f++)
      sums[f] += (int64_t)json_integer_value(json_object_get(e, fields[f]));
  }
  json_decref(j);
  assert_int_equal(sums[0], 2); /* two requests on the main listener */
  assert_int_equal(sums[1], 1);
  assert_int_equal(sums[2], 1);
  assert_int_equal(sums[3], 0);

  http_get(P.port, "/metrics", &r);
  assert_int_equal(r.status, 200);
  const char *want[] = {"libraryd_queue_depth 0\n",
                        "libraryd_workers 1\n",
                        "libraryd_queue_wait_seconds_count 2\n",
                        "libraryd_dropped_total{cause=\"queue_full\"} 0\n",
                        "libraryd_dropped_total{cause=\"codel\"} 0\n",
                        "libraryd_work_total{outcome=\"done\"} 1\n",
                        "libraryd_work_total{outcome=\"abandoned\"} 1\n",
                        "libraryd_worker_busy_seconds_total 0.6"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    if (!strstr(r.body, want[i]))
      fail_msg("/metrics lacks '%s'", want[i]);
  FILE *pt = popen("promtool check metrics >/dev/null 2>&1", "w");
  assert_non_null(pt);
  fwrite(r.body, 1, r.len, pt);
  int rc = pclose(pt);
  assert_int_equal(rc, 0);
  http_res_free(&r);
  stop();
}

/* --- shutdown with requests queued ----------------------------------------------------------- */

static void test_drain_serves_or_refuses_the_queue(void **state) {
  (void)state;
  /* Within the drain budget, queued requests are served. */
  const char *args[] = {"--queue-discipline", "fifo", "--workers", "1", "--work",
                        "GET /books/*=100ms", NULL};
  start(args);
  bg b[4];
  for (int i = 0; i < 4; i++) {
    bg_start(&b[i], "GET", "/books/1", NULL, NULL, 10000);
    wait_stat("admitted", i + 1);
  }
  assert_int_equal(lib_stop(&P), 0);
  for (int i = 0; i < 4; i++) {
    bg_join(&b[i]);
    assert_int_equal(b[i].res.status, 200);
    http_res_free(&b[i].res);
  }
  lib_cleanup(&P);
  /* Past it, the rest get 503 shutting_down; no connection is left hanging. */
  const char *args2[] = {
      "--queue-discipline", "fifo",  "--workers", "1", "--work", "GET /books/*=300ms",
      "--drain-timeout",    "100ms", NULL};
  start(args2);
  for (int i = 0; i < 4; i++) {
    bg_start(&b[i], "GET", "/books/1", NULL, NULL, 10000);
    wait_stat("admitted", i + 1);
  }
  double t0 = now_s();
  assert_int_equal(lib_stop(&P), 0);
  assert_true(now_s() - t0 < 3.0);
  int refused = 0;
  for (int i = 0; i < 4; i++) {
    bg_join(&b[i]);
    assert_true(b[i].res.status == 503 || b[i].res.status == 200);
    refused += b[i].res.status == 503 && strstr(b[i].res.body, "shutting_down") != NULL;
    http_res_free(&b[i].res);
  }
  assert_true(refused >= 3); /* at most the one running could finish */
  lib_cleanup(&P);
}

/* --- configuration ------------------------------------------------------------------------- */

static void test_config_keys_and_bad_flags(void **state) {
  (void)state;
  char ini[] = "/tmp/libraryd-cap-ini-XXXXXX";
  int fd = mkstemp(ini);
  assert_true(fd >= 0);
  const char *text = "[libraryd]\n"
                     "workers = 3\n"
                     "queue = 7\n"
                     "work = GET /books/*=cpu:1ms, POST /books/*/loans=2ms\n"
                     "queue_discipline = adaptive-lifo\n"
                     "queue-target = 20ms\n"
                     "queue_interval = 1s\n"
                     "fault = route=GET /books/9,kind=slowdown,factor=1.5\n";
  assert_true(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
  close(fd);
  const char *args[] = {"--config", ini, NULL};
  start(args);
  unlink(ini);
  json_t *s = server_stats();
  assert_int_equal(json_integer_value(json_object_get(s, "workers")), 3);
  assert_int_equal(json_integer_value(json_object_get(s, "queue_limit")), 7);
  assert_string_equal(json_string_value(json_object_get(s, "queue_discipline")), "adaptive-lifo");
  assert_true(json_real_value(json_object_get(s, "slowdown_factor")) == 1.5);
  json_decref(s);
  long st;
  timed_get("/books/1", NULL, &st); /* 1 ms of CPU: quick, but it is work done */
  assert_int_equal(st, 200);
  assert_true(stat_of("work_ns") >= 1000000);
  stop();

  const char *bad[][3] = {{"--workers", "0", NULL},
                          {"--queue", "0", NULL},
                          {"--work", "GET /books/*", NULL},
                          {"--work", "GET /books/*=5", NULL},
                          {"--queue-discipline", "random", NULL},
                          {"--queue-target", "0ms", NULL},
                          {"--fault", "kind=slowdown,factor=0.9", NULL}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (lib_run_args(bad[i]) != 2)
      fail_msg("libraryd %s %s did not exit 2", bad[i][0], bad[i][1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_throughput_is_workers_over_cost, test_teardown),
      cmocka_unit_test_teardown(test_full_queue_is_503_at_once, test_teardown),
      cmocka_unit_test_teardown(test_deadline_checked_at_dequeue, test_teardown),
      cmocka_unit_test_teardown(test_slowdown_fault, test_teardown),
      cmocka_unit_test_teardown(test_codel_drops_a_standing_queue, test_teardown),
      cmocka_unit_test_teardown(test_lifo_serves_the_newest_first, test_teardown),
      cmocka_unit_test_teardown(test_abandoned_work_series_and_metrics, test_teardown),
      cmocka_unit_test_teardown(test_drain_serves_or_refuses_the_queue, test_teardown),
      cmocka_unit_test_teardown(test_config_keys_and_bad_flags, test_teardown),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
