/* SPDX-License-Identifier: MIT */
/* shared = : two `linkd serve` processes whose route limiter is the fleet's, on a real
 * redis-server the test starts, admit together what one limiter would; the same two with their
 * own limiters admit twice as much. Redis killed: each falls back to its share (1/fleet), and
 * counts the decisions it took alone in a counter that a reload does not take back. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "faultd_client.h"
#include "gwtest.h"
#include "tmpsrv.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static faultd_proc F;
static gw_proc G[2];
static lk_tmpsrv R;

static int teardown(void **state) {
  (void)state;
  for (int i = 0; i < 2; i++)
    gw_stop(&G[i], 3000);
  faultd_stop(&F);
  lk_tmpsrv_destroy(&R);
  return 0;
}

/* 10 per second for the route, a burst of 1, and a deadline long enough that every call waits
 * for its token: the rate of answers is the rate of tokens. */
static void start_gateway(gw_proc *g, const char *shared) {
  char cfg[2048];
  snprintf(cfg, sizeof cfg,
           "[listen]\naddress = 127.0.0.1:0\n\n[admin]\naddress = 127.0.0.1:0\n\n"
           "[cluster c]\nendpoint = 127.0.0.1:%d\n\n"
           "[route r]\ncluster = c\nlimiter = 10/s:burst=1\ndeadline = 2s\n"
           "max-attempts = 1\nshared = %s\n",
           faultd_port(&F), shared);
  gw_start(g, cfg);
}

typedef struct driver {
  int port;
  int64_t until_ms;
  int ok, refused, other;
  pthread_t th;
} driver;

static void *drive(void *arg) {
  driver *d = arg;
  for (int i = 0; i < 5000 && gw_now_ms() < d->until_ms; i++) {
    gw_resp r;
    gw_request(d->port, "GET", "/s", NULL, NULL, &r);
    if (r.status == 200)
      d->ok++;
    else if (r.status == 503 || r.status == 504) /* no token in time; or it came too late */
      d->refused++;
    else if (d->other++ < 3)
      printf("# other: %d %.200s\n", r.status, r.head);
    gw_resp_free(&r);
  }
  return NULL;
}

/* Both gateways called as fast as they answer for `ms`: the 200s of both together. */
static int run_both(int ms) {
  driver d[2];
  int64_t until = gw_now_ms() + ms;
  for (int i = 0; i < 2; i++) {
    d[i] = (driver){.port = G[i].port, .until_ms = until};
    assert_int_equal(pthread_create(&d[i].th, NULL, drive, &d[i]), 0);
  }
  int ok = 0;
  for (int i = 0; i < 2; i++) {
    pthread_join(d[i].th, NULL);
    printf("# gateway %d: %d ok, %d refused, %d other\n", i, d[i].ok, d[i].refused, d[i].other);
    assert_int_equal(d[i].other, 0);
    assert_int_equal(d[i].refused, 0);
    ok += d[i].ok;
  }
  return ok;
}

static void test_fleet_limiter_across_gateways(void **state) {
  (void)state;
  assert_int_equal(lk_tmpsrv_redis_start(&R), 0);
  assert_int_equal(faultd_start(&F, "ok", NULL), 0);
  char shared[128];
  /* a generous wait for Redis: this test is about sharing, not about a loaded machine */
  snprintf(shared, sizeof shared, "redis://127.0.0.1:%d,fleet=2,timeout=50ms", R.port);
  for (int i = 0; i < 2; i++)
    start_gateway(&G[i], shared);
  /* 2 s at 10/s for the fleet: about 20, where two limiters of their own admit about 40 */
  int ok = run_both(2000);
  printf("# shared: %d admitted in 2 s by both gateways (10/s for the fleet)\n", ok);
  assert_in_range(ok, 16, 26);
  /* Redis gone: each decides alone at its share, 5/s, so the fleet stays near 10/s */
  assert_int_equal(lk_tmpsrv_stop(&R, SIGKILL), 0);
  gw_sleep_ms(200);
  ok = run_both(2000);
  printf("# Redis down: %d admitted in 2 s (each at 1/2 of 10/s)\n", ok);
  assert_in_range(ok, 14, 28);
  const char *err = gw_stderr(&G[0]);
  assert_non_null(strstr(err, "deciding locally"));
  /* and says so on /metrics */
  gw_resp m;
  gw_request(G[0].admin_port, "GET", "/metrics", NULL, NULL, &m);
  assert_int_equal(m.status, 200);
  const char *using_redis = strstr(m.body, "linkd_gw_shared_using_redis{route=\"r\"");
  assert_non_null(using_redis);
  assert_non_null(strstr(using_redis, "object=\"limiter\"} 0\n"));
  long n = -1;
  for (const char *line = m.body; line && *line;
       line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char buf[512];
    snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), line);
    static const char name[] = "linkd_gw_shared_local_decisions_total{route=\"r\"";
    if (strncmp(buf, name, sizeof name - 1) == 0 &&
        strstr(buf, "object=\"limiter\"}"))
      n = strtol(strchr(buf, '}') + 1, NULL, 10);
  }
  if (n <= 0) {
    const char *x = strstr(m.body, "linkd_gw_shared");
    fail_msg("no local decisions of the limiter on /metrics:\n%.600s", x ? x : m.body);
  }
  gw_resp_free(&m);
  for (int i = 0; i < 2; i++)
    assert_int_equal(gw_stop(&G[i], 3000), 0);

  /* the baseline: the same gateways with limiters of their own admit twice as much */
  for (int i = 0; i < 2; i++)
    start_gateway(&G[i], "none");
  ok = run_both(2000);
  printf("# own limiters: %d admitted in 2 s\n", ok);
  assert_in_range(ok, 34, 46);
}

/* The limiter's local decisions of route r (any policy version), from a scrape. */
static double local_decisions(const char *m) {
  static const char name[] = "linkd_gw_shared_local_decisions_total{route=\"r\",policy=\"";
  double sum = 0;
  int found = 0;
  for (const char *p = m; (p = strstr(p, name)); p++) {
    if (p != m && p[-1] != '\n')
      continue;
    const char *q = strstr(p, "\",object=\"limiter\"} ");
    const char *eol = strchr(p, '\n');
    if (!q || (eol && q > eol))
      continue;
    sum += strtod(q + strlen("\",object=\"limiter\"} "), NULL);
    found++;
  }
  if (!found)
    fail_msg("no linkd_gw_shared_local_decisions_total of the limiter:\n%s", m);
  return sum;
}

/* Redis away from the start (nothing listens on its port): every decision of the fleet-wide
 * limiter is taken here. They are counted (TYPE counter, promtool), and a reload that drops the
 * route's shared limiter and one that brings it back (a fresh object, counting from 0) do not
 * take the count back. */
static void test_local_decisions_counter(void **state) {
  (void)state;
  assert_int_equal(faultd_start(&F, "ok", NULL), 0);
  /* a port bound but never listened on: connecting to it is refused */
  int hole = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(hole >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(hole, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t alen = sizeof a;
  assert_int_equal(getsockname(hole, (struct sockaddr *)&a, &alen), 0);
  char shared[128], with[2048], without[2048];
  snprintf(shared, sizeof shared, "redis://127.0.0.1:%d,fleet=2", ntohs(a.sin_port));
  static const char fmt[] = "[listen]\naddress = 127.0.0.1:0\n\n[admin]\naddress = 127.0.0.1:0\n\n"
                            "[cluster c]\nendpoint = 127.0.0.1:%d\n\n"
                            "[route r]\ncluster = c\nlimiter = 1000/s:burst=100\nmax-attempts = 1\n"
                            "shared = %s\n";
  snprintf(with, sizeof with, fmt, faultd_port(&F), shared);
  snprintf(without, sizeof without, fmt, faultd_port(&F), "none");
  gw_start(&G[0], with);
  for (int i = 0; i < 10; i++) {
    gw_resp r;
    gw_request(G[0].port, "GET", "/l", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    gw_resp_free(&r);
  }
  char *m = gw_scrape(&G[0]);
  const char *type = gw_metric_type(m, "linkd_gw_shared_local_decisions_total");
  assert_non_null(type);
  assert_string_equal(type, "counter");
  assert_true(gw_metric_help(m, "linkd_gw_shared_local_decisions_total"));
  assert_null(gw_metric_type(m, "linkd_gw_shared_local_decisions")); /* the gauge is gone */
  double first = local_decisions(m);
  printf("# %g local decisions for 10 requests\n", first);
  assert_true(first >= 10);
  free(m);
  /* the route without its shared limiter, then with it again: the same policy version as
   * before, on a new limiter whose own count starts at 0 */
  const char *cfgs[] = {without, with};
  for (int i = 0; i < 2; i++) {
    gw_resp r;
    gw_request(G[0].admin_port, "POST", "/config", NULL, cfgs[i], &r);
    assert_int_equal(r.status, 200);
    gw_resp_free(&r);
  }
  gw_resp r;
  gw_request(G[0].port, "GET", "/l", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  m = gw_scrape(&G[0]);
  double after = local_decisions(m);
  printf("# %g local decisions after two reloads and one more request\n", after);
  if (after < first + 1)
    fail_msg("the local decisions went from %g to %g across reloads:\n%s", first, after, m);
  free(m);
  close(hole);
  assert_int_equal(gw_stop(&G[0], 3000), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_fleet_limiter_across_gateways, teardown),
      cmocka_unit_test_teardown(test_local_decisions_counter, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
