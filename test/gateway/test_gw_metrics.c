/* SPDX-License-Identifier: MIT */
/* /metrics of `linkd serve` against real upstreams (faultd): what the gateway refused itself,
 * counted per route and reason (breaker, budget, limiter, bulkhead, deadline) and kept across a
 * reload; attempts a protection refused are no upstream attempts; a 503 sent as it came is no
 * deadline 504; a client gone before its answer is counted as given none. Every scrape passes
 * promtool (gw_scrape). */
/* cmocka.h needs these three first. */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include "faultd_client.h"
#include "gwtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static faultd_proc F1, F2;
static gw_proc G;

static int teardown(void **state) {
  (void)state;
  int rc = gw_stop(&G, 5000);
  faultd_stop(&F1);
  faultd_stop(&F2);
  return rc == 0 ? 0 : -1;
}

/* Checks that go on after a failure, so one run tells every one that fails; the test fails at
 * its end (expect_done) if any did. */
static int failed_checks;
#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      printf("# FAILED: " __VA_ARGS__);                                                            \
      printf("\n");                                                                                \
      failed_checks++;                                                                             \
    }                                                                                              \
  } while (0)

static void expect_done(const char *m) {
  if (failed_checks)
    fail_msg("%d checks failed (above); the last scrape:\n%s", failed_checks, m);
}

/* The sum of the samples `name{route="ROUTE",policy="...REST VALUE` (REST: the labels after
 * policy and the closing brace, e.g. `,reason="breaker"}` or `}`); -1 when there is none. */
static double route_value(const char *m, const char *name, const char *route, const char *rest) {
  char head[256];
  snprintf(head, sizeof head, "%s{route=\"%s\",policy=\"", name, route);
  size_t n = strlen(head), rn = strlen(rest);
  double sum = 0;
  int found = 0;
  for (const char *p = m; (p = strstr(p, head)); p += n) {
    if (p != m && p[-1] != '\n')
      continue;
    const char *q = strchr(p + n, '"'); /* the end of the policy label */
    assert_non_null(q);
    if (strncmp(q + 1, rest, rn) != 0 || q[1 + rn] != ' ')
      continue;
    sum += strtod(q + 1 + rn + 1, NULL);
    found++;
  }
  return found ? sum : -1;
}

static double refused(const char *m, const char *route, const char *reason) {
  char rest[64];
  snprintf(rest, sizeof rest, ",reason=\"%s\"}", reason);
  return route_value(m, "linkd_gw_refused_total", route, rest);
}

static const char *const reasons[] = {"breaker", "budget", "limiter", "bulkhead", "deadline"};

/* Every reason of `route` is counted `want` times for the one named, 0 for the others (-1:
 * no such sample). */
static void expect_refusals(const char *m, const char *route, const char *reason, double want) {
  for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++) {
    double v = refused(m, route, reasons[i]);
    double w = strcmp(reasons[i], reason) == 0 ? want : 0;
    EXPECT(v == w, "linkd_gw_refused_total{route=\"%s\",reason=\"%s\"} is %g, not %g", route,
           reasons[i], v, w);
  }
}

/* A route's counter `name` (no labels but route and policy) is `want`. */
static void expect_counter(const char *m, const char *name, const char *route, double want) {
  double v = route_value(m, name, route, "}");
  EXPECT(v == want, "%s{route=\"%s\"} is %g, not %g", name, route, v, want);
}

/* GET path: the status must be `want`, and Linkd-Retried `retried` (NULL: not checked). */
static void get_retried(const char *path, const char *extra, int want, const char *retried) {
  gw_resp r;
  gw_request(G.port, "GET", path, extra, NULL, &r);
  if (r.status != want)
    fail_msg("GET %s: %d, not %d: %s", path, r.status, want, r.body ? r.body : "");
  char v[32];
  const char *got = gw_header(&r, "Linkd-Retried", v, sizeof v);
  if (retried && (!got || strcmp(got, retried) != 0))
    fail_msg("GET %s: Linkd-Retried %s, not %s", path, got ? got : "(none)", retried);
  gw_resp_free(&r);
}

static void get(const char *path, const char *extra, int want) {
  get_retried(path, extra, want, NULL);
}

/* Cluster `bad` answers 503, cluster `slow` 200 after 400 ms. One route per refusal, each over
 * a real failing or slow upstream, and `cut` whose deadline cuts its attempt short. */
static void config(char *buf, size_t cap, const char *extra) {
  snprintf(buf, cap,
           "[listen]\naddress = 127.0.0.1:0\n\n[admin]\naddress = 127.0.0.1:0\n\n"
           "[cluster bad]\nendpoint = 127.0.0.1:%d\n\n"
           "[cluster slow]\nendpoint = 127.0.0.1:%d\n\n"
           /* two 503s open it; open for 5 s, longer than the deadline: refused at once */
           "[route brk]\ncluster = bad\nprefix = /brk\nmax-attempts = 1\n"
           "breaker = window=4:min-calls=2:failure-rate=50%%:wait=5s\n\n"
           /* a budget that allows no retry */
           "[route bud]\ncluster = bad\nprefix = /bud\nmax-attempts = 3\nbase = 5ms\n"
           "jitter = none\nbudget = ratio:0%%:min=0\nbreaker = none\n\n"
           /* a retry's delay of 1 s does not fit in a deadline of 300 ms */
           "[route dl]\ncluster = bad\nprefix = /dl\nmax-attempts = 3\nbase = 1s\n"
           "jitter = none\ndeadline = 300ms\nbudget = none\nbreaker = none\n\n"
           /* one token a second: the second call in a row has none within its deadline */
           "[route lim]\ncluster = bad\nprefix = /lim\nmax-attempts = 1\nlimiter = 1/s:burst=1\n"
           "deadline = 200ms\nbreaker = none\n\n"
           /* one attempt in flight, nobody waits */
           "[route blk]\ncluster = slow\nprefix = /blk\nmax-attempts = 1\n"
           "bulkhead = 1:queue=0\nbreaker = none\n\n"
           /* the deadline cuts the attempt: a timeout, not a refusal */
           "[route cut]\ncluster = slow\nprefix = /cut\nmax-attempts = 1\ndeadline = 150ms\n"
           "breaker = none\n\n"
           /* the attempt timeout ends the attempt with most of the deadline left: a 504, and
            * not one for the deadline */
           "[route tmo]\ncluster = slow\nprefix = /tmo\nmax-attempts = 1\nattempt-timeout = 100ms\n"
           "deadline = 5s\nbreaker = none\n%s",
           faultd_port(&F1), faultd_port(&F2), extra ? extra : "");
}

static void test_refused_by_reason(void **state) {
  (void)state;
  const char *bad[] = {"--status", "503", NULL};
  const char *slow[] = {"--delay-ms", "400", NULL};
  assert_int_equal(faultd_start(&F1, "status", bad), 0);
  assert_int_equal(faultd_start(&F2, "slow", slow), 0);
  char cfg[4096];
  config(cfg, sizeof cfg, NULL);
  gw_start(&G, cfg);

  /* a fresh gateway: every reason of every route is there, at 0, so a rate() has a start */
  failed_checks = 0;
  char *m = gw_scrape(&G);
  const char *type = gw_metric_type(m, "linkd_gw_refused_total");
  EXPECT(type && strcmp(type, "counter") == 0, "linkd_gw_refused_total is of type %s",
         type ? type : "(none)");
  EXPECT(gw_metric_help(m, "linkd_gw_refused_total"), "linkd_gw_refused_total has no HELP");
  static const char *const routes[] = {"brk", "bud", "dl", "lim", "blk", "cut", "tmo"};
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
    expect_refusals(m, routes[i], "breaker", 0);
  free(m);

  /* breaker: two 503s open it, the third call is refused without reaching the upstream */
  get("/brk", NULL, 503);
  get("/brk", NULL, 503);
  assert_int_equal(faultd_wait_requests(&F1, 2, 2000), 2);
  /* Linkd-Retried counts what went upstream: none here, one for the budget's call */
  get_retried("/brk", NULL, 503, "0");
  /* budget: the first attempt's 503 is sent back, its retry refused */
  get_retried("/bud", NULL, 503, "1");
  /* deadline: no time for the retry's delay (the 503 is sent as it came), then a deadline gone
   * on arrival */
  get("/dl", NULL, 503);
  get("/dl", "Linkd-Deadline: 0\r\n", 504);
  /* limiter: the first call takes the token, the second finds none in time */
  get("/lim", NULL, 503);
  get("/lim", NULL, 503);
  /* bulkhead: one call holds the slot while a second comes */
  int hold = gw_connect(G.port);
  gw_send_str(hold, "GET /blk HTTP/1.1\r\nHost: gw.test\r\n\r\n");
  assert_int_equal(faultd_wait_requests(&F2, 1, 2000), 1);
  get("/blk", NULL, 503);
  gw_resp r;
  assert_int_equal(gw_read(hold, &r, 3000, NULL), 0);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  close(hold);
  /* the deadline cuts an attempt short: 504, counted as a deadline 504, not as a refusal */
  get("/cut", NULL, 504);
  get("/tmo", NULL, 504);
  gw_sleep_ms(50);
  assert_int_equal(faultd_request_count(&F1), 5); /* brk 2, bud 1, dl 1, lim 1 */
  assert_int_equal(faultd_request_count(&F2), 3); /* blk 1, cut 1, tmo 1 */

  m = gw_scrape(&G);
  expect_refusals(m, "brk", "breaker", 1);
  expect_refusals(m, "bud", "budget", 1);
  expect_refusals(m, "dl", "deadline", 2);
  expect_refusals(m, "lim", "limiter", 1);
  expect_refusals(m, "blk", "bulkhead", 1);
  expect_refusals(m, "cut", "deadline", 0);
  /* an attempt a protection refused never went upstream: not an upstream attempt, not a retry */
  expect_counter(m, "linkd_gw_attempts_total", "brk", 2);
  expect_counter(m, "linkd_gw_retries_total", "brk", 0);
  expect_counter(m, "linkd_gw_attempts_total", "lim", 1);
  expect_counter(m, "linkd_gw_attempts_total", "blk", 1);
  expect_counter(m, "linkd_gw_attempts_total", "bud", 1);
  /* answered 504 for the deadline: the one gone on arrival and the attempt cut short; the 503
   * of /dl, sent as it came when its retry did not fit, is no deadline 504 */
  expect_counter(m, "linkd_gw_deadline_exceeded_total", "dl", 1);
  expect_counter(m, "linkd_gw_deadline_exceeded_total", "cut", 1);
  expect_counter(m, "linkd_gw_deadline_exceeded_total", "brk", 0);
  expect_counter(m, "linkd_gw_deadline_exceeded_total", "tmo", 0);
  expect_refusals(m, "tmo", "deadline", 0);
  expect_done(m);
  free(m);

  /* a reload (another route added, the others unchanged) keeps the counts, and the breaker,
   * whose spec is unchanged, is still open: its next refusal counts on from 1 */
  config(cfg, sizeof cfg, "\n[route more]\ncluster = bad\nprefix = /more\n");
  gw_request(G.admin_port, "POST", "/config", NULL, cfg, &r);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  get("/brk", NULL, 503);
  m = gw_scrape(&G);
  expect_refusals(m, "brk", "breaker", 2);
  expect_refusals(m, "bud", "budget", 1);
  expect_refusals(m, "dl", "deadline", 2);
  expect_refusals(m, "lim", "limiter", 1);
  expect_refusals(m, "blk", "bulkhead", 1);
  expect_refusals(m, "more", "deadline", 0);
  expect_done(m);
  free(m);
  assert_int_equal(faultd_request_count(&F1), 5);
}

/* A client that resets its connection while its request is upstream gets no answer: the
 * request is counted in the status class "none", not under the status nobody received. */
static void test_client_gone_is_no_answer(void **state) {
  (void)state;
  const char *slow[] = {"--delay-ms", "300", NULL};
  assert_int_equal(faultd_start(&F1, "slow", slow), 0);
  char cfg[1024];
  snprintf(cfg, sizeof cfg,
           "[listen]\naddress = 127.0.0.1:0\n\n[admin]\naddress = 127.0.0.1:0\n\n"
           "[cluster c]\nendpoint = 127.0.0.1:%d\n\n[route r]\ncluster = c\nmax-attempts = 1\n",
           faultd_port(&F1));
  gw_start(&G, cfg);
  int fd = gw_connect(G.port);
  gw_send_str(fd, "GET /gone HTTP/1.1\r\nHost: gw.test\r\n\r\n");
  assert_int_equal(faultd_wait_requests(&F1, 1, 2000), 1);
  struct linger lg = {1, 0}; /* close with a reset: the gateway sees the client go at once */
  assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
  close(fd);
  /* the upstream answers 300 ms after the request; the gateway then has no one to send it to */
  double none = 0, ok = 0;
  char *m = NULL;
  for (int64_t end = gw_now_ms() + 3000; gw_now_ms() < end;) {
    free(m);
    m = gw_scrape(&G);
    none = route_value(m, "linkd_gw_requests_total", "r", ",code=\"none\"}");
    ok = route_value(m, "linkd_gw_requests_total", "r", ",code=\"2xx\"}");
    if (none + ok > 0)
      break;
    gw_sleep_ms(50);
  }
  if (none != 1 || ok != 0)
    fail_msg("a request whose client left: none %g, 2xx %g:\n%s", none, ok, m);
  free(m);
  /* a client that stays is counted as answered */
  get("/stay", NULL, 200);
  m = gw_scrape(&G);
  assert_true(route_value(m, "linkd_gw_requests_total", "r", ",code=\"2xx\"}") == 1);
  assert_true(route_value(m, "linkd_gw_requests_total", "r", ",code=\"none\"}") == 1);
  free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_refused_by_reason, teardown),
      cmocka_unit_test_teardown(test_client_gone_is_no_answer, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
