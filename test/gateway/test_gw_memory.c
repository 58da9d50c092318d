/* SPDX-License-Identifier: MIT */
/* Memory per idle keep-alive connection: 10 000 client connections, each having made one request
 * and kept open, cost `linkd serve` at most 10 KiB each (resident set growth / connections).
 * Labelled slow (10 000 requests and sockets). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "faultd_client.h"
#include "gwtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

enum { CONNS = 10000, BATCH = 200 };

static void test_idle_connections_memory(void **state) {
  (void)state;
  struct rlimit rl;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur < CONNS + 100) {
    /* root may raise the hard limit too (CI runs as root, often with a hard limit of 4096) */
    if (rl.rlim_max < CONNS + 200 && geteuid() == 0)
      rl.rlim_max = CONNS + 200;
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  }
  /* a machine that cannot hold them fails the test: the goal is 10 000 */
  assert_true(rl.rlim_cur >= CONNS + 100);
  faultd_proc f;
  assert_int_equal(faultd_start(&f, "ok", NULL), 0);
  char cfg[1024];
  snprintf(cfg, sizeof cfg,
           "[listen]\naddress = 127.0.0.1:0\nmax-connections = 20000\nbacklog = 4096\n\n"
           "[cluster up]\nendpoint = 127.0.0.1:%d\n\n[route all]\ncluster = up\n",
           faultd_port(&f));
  gw_proc g;
  gw_start(&g, cfg);
  /* warm: the first requests allocate the HTTP client, its pool and the metrics series */
  for (int i = 0; i < 50; i++) {
    gw_resp r;
    gw_request(g.port, "GET", "/warm", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    gw_resp_free(&r);
  }
  gw_sleep_ms(100);
  long before = gw_rss_kib(g.pid);
  assert_true(before > 0);
  int *fds = malloc(CONNS * sizeof *fds);
  assert_non_null(fds);
  int64_t end = gw_now_ms() + 60000;
  for (int b = 0; b < CONNS; b += BATCH) {
    for (int i = b; i < b + BATCH; i++) {
      fds[i] = gw_connect(g.port);
      gw_send_str(fds[i], "GET /idle HTTP/1.1\r\nHost: a\r\n\r\n");
    }
    for (int i = b; i < b + BATCH; i++) {
      gw_resp r;
      assert_int_equal(gw_read(fds[i], &r, 5000, NULL), 0);
      assert_int_equal(r.status, 200);
      assert_false(r.closed);
      gw_resp_free(&r);
    }
    assert_true(gw_now_ms() < end);
  }
  gw_sleep_ms(200);
  long after = gw_rss_kib(g.pid);
  double per = (double)(after - before) * 1024.0 / CONNS;
  printf("# %d idle keep-alive connections: RSS %ld KiB -> %ld KiB, %.0f bytes each\n", CONNS,
         before, after, per);
  assert_true(per <= 10240.0);
  /* still serving */
  gw_resp r;
  gw_request(g.port, "GET", "/after", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  for (int i = 0; i < CONNS; i++)
    close(fds[i]);
  free(fds);
  assert_int_equal(gw_stop(&g, 10000), 0);
  faultd_stop(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_idle_connections_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
