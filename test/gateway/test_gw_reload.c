/* SPDX-License-Identifier: MIT */
/* Configuration reloads and shutdown of `linkd serve`: a bad file is rejected with its line and
 * the running configuration keeps serving; SIGHUP and POST /config swap in a good one; reloads
 * under load fail no request (a load thread beside the reloads, so this also runs under TSan);
 * SIGTERM drains in-flight requests, and the drain deadline bounds it; a staged rollout whose
 * candidate is worse is rolled back. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "faultd_client.h"
#include "gwtest.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

/* Two clusters; the route `all` goes to cluster `target`. */
static void config(char *buf, size_t cap, const char *target, const char *listen_extra,
                   const char *route_extra) {
  snprintf(buf, cap,
           "[listen]\naddress = 127.0.0.1:0\n%s\n"
           "[admin]\naddress = 127.0.0.1:0\n\n"
           "[cluster one]\nendpoint = 127.0.0.1:%d\n\n"
           "[cluster two]\nendpoint = 127.0.0.1:%d\n\n"
           "[route all]\ncluster = %s\nmax-attempts = 2\nbase = 5ms\njitter = none\n%s\n",
           listen_extra ? listen_extra : "", faultd_port(&F1), faultd_port(&F2), target,
           route_extra ? route_extra : "");
}

static void two_upstreams(const char *mode, const char *const *args) {
  assert_int_equal(faultd_start(&F1, mode, args), 0);
  assert_int_equal(faultd_start(&F2, mode, args), 0);
}

static int generation_of(const gw_resp *r) {
  char v[32];
  return gw_header(r, "Linkd-Config-Generation", v, sizeof v) ? atoi(v) : -1;
}

static void test_bad_reload_rejected(void **state) {
  (void)state;
  two_upstreams("ok", NULL);
  char cfg[2048];
  config(cfg, sizeof cfg, "one", NULL, NULL);
  gw_start(&G, cfg);
  /* line 14 names a cluster that does not exist */
  config(cfg, sizeof cfg, "three", NULL, NULL);
  gw_write_config(&G, cfg);
  gw_resp r;
  gw_request(G.admin_port, "POST", "/config", NULL, NULL, &r);
  assert_int_equal(r.status, 400);
  assert_non_null(strstr(r.body, "gw.ini:14: cluster:"));
  assert_non_null(strstr(r.body, "cluster"));
  gw_resp_free(&r);
  kill(G.pid, SIGHUP);
  int64_t end = gw_now_ms() + 2000;
  while (!strstr(gw_stderr(&G), "reload rejected, the running configuration stays") &&
         gw_now_ms() < end)
    gw_sleep_ms(10);
  assert_non_null(strstr(gw_stderr(&G), "gw.ini:14: cluster:"));
  /* a body with a bad value: rejected with its line too */
  gw_request(G.admin_port, "POST", "/config", NULL,
             "[listen]\naddress = 127.0.0.1:0\n[cluster c]\nendpoint = 127.0.0.1:1\n"
             "[route r]\ncluster = c\nmax-attempts = lots\n",
             &r);
  assert_int_equal(r.status, 400);
  assert_non_null(strstr(r.body, ":7: max-attempts"));
  gw_resp_free(&r);
  /* the old configuration still serves */
  gw_request(G.port, "GET", "/x", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  assert_int_equal(generation_of(&r), 1);
  gw_resp_free(&r);
  assert_int_equal(faultd_request_count(&F1), 1);
  assert_int_equal(faultd_request_count(&F2), 0);
}

static void test_good_reloads(void **state) {
  (void)state;
  two_upstreams("ok", NULL);
  char cfg[2048];
  config(cfg, sizeof cfg, "one", NULL, NULL);
  gw_start(&G, cfg);
  config(cfg, sizeof cfg, "two", NULL, NULL);
  gw_write_config(&G, cfg);
  kill(G.pid, SIGHUP);
  gw_resp r;
  int gen = 1;
  int64_t end = gw_now_ms() + 2000;
  while (gen != 2 && gw_now_ms() < end) {
    gw_request(G.port, "GET", "/x", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    gen = generation_of(&r);
    gw_resp_free(&r);
  }
  assert_int_equal(gen, 2);
  int before = faultd_request_count(&F2);
  gw_request(G.port, "GET", "/x", NULL, NULL, &r);
  gw_resp_free(&r);
  assert_int_equal(faultd_request_count(&F2), before + 1);
  /* POST /config with the text in the body */
  config(cfg, sizeof cfg, "one", NULL, NULL);
  gw_request(G.admin_port, "POST", "/config", NULL, cfg, &r);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.body, "generation 3"));
  gw_resp_free(&r);
  int b1 = faultd_request_count(&F1);
  gw_request(G.port, "GET", "/x", NULL, NULL, &r);
  assert_int_equal(generation_of(&r), 3);
  gw_resp_free(&r);
  assert_int_equal(faultd_request_count(&F1), b1 + 1);
  gw_request(G.admin_port, "GET", "/metrics", NULL, NULL, &r);
  assert_non_null(strstr(r.body, "linkd_gw_config_reloads_total{result=\"ok\"} 2"));
  gw_resp_free(&r);
  /* a posted text naming an access log that cannot be opened: refused with why, before it is
   * attached (the next good one is generation 4, not 5) */
  char bad[2600];
  snprintf(bad, sizeof bad, "%s\n[log]\naccess = %s/no/such/dir/a.log\n", cfg, G.dir);
  gw_request(G.admin_port, "POST", "/config", NULL, bad, &r);
  assert_int_equal(r.status, 400);
  assert_non_null(strstr(r.body, "access: cannot open"));
  assert_non_null(strstr(r.body, "No such file or directory"));
  gw_resp_free(&r);
  /* generation-header = off, by reload: proxied responses no longer carry the generation */
  config(cfg, sizeof cfg, "one", "generation-header = off", NULL);
  gw_request(G.admin_port, "POST", "/config", NULL, cfg, &r);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.body, "generation 4"));
  gw_resp_free(&r);
  gw_request(G.port, "GET", "/x", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  assert_int_equal(generation_of(&r), -1);
  gw_resp_free(&r);
}

typedef struct load {
  int port;
  _Atomic bool stop;
  _Atomic int ok, failed;
} load;

/* Keep-alive requests on one connection (a new one whenever the gateway closes it), bounded in
 * count and time. */
static void *load_thread(void *arg) {
  load *l = arg;
  int64_t end = gw_now_ms() + 8000;
  int fd = gw_connect(l->port);
  for (int i = 0; i < 5000 && !atomic_load(&l->stop) && gw_now_ms() < end; i++) {
    gw_send_str(fd, "GET /load HTTP/1.1\r\nHost: a\r\n\r\n");
    gw_resp r;
    if (gw_read(fd, &r, 3000, NULL) != 0 || r.status != 200) {
      atomic_fetch_add(&l->failed, 1);
      if (r.body)
        gw_resp_free(&r);
      close(fd);
      fd = gw_connect(l->port);
      continue;
    }
    atomic_fetch_add(&l->ok, 1);
    bool closed = r.closed;
    gw_resp_free(&r);
    if (closed) {
      close(fd);
      fd = gw_connect(l->port);
    }
  }
  close(fd);
  return NULL;
}

static void test_reload_under_load(void **state) {
  (void)state;
  const char *args[] = {"--delay-ms", "3", NULL};
  two_upstreams("ok", args);
  char cfg_one[2048], cfg_two[2048];
  config(cfg_one, sizeof cfg_one, "one", NULL, NULL);
  config(cfg_two, sizeof cfg_two, "two", NULL, "attempt-timeout = 400ms\n");
  gw_start(&G, cfg_one);
  load l = {.port = G.port};
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&th[i], NULL, load_thread, &l), 0);
  for (int i = 0; i < 10; i++) {
    gw_sleep_ms(40);
    gw_write_config(&G, i % 2 ? cfg_one : cfg_two);
    if (i % 3 == 2) {
      gw_resp r;
      gw_request(G.admin_port, "POST", "/config", NULL, NULL, &r);
      assert_int_equal(r.status, 200);
      gw_resp_free(&r);
    } else {
      kill(G.pid, SIGHUP);
    }
  }
  gw_sleep_ms(60);
  atomic_store(&l.stop, true);
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
  printf("# reload under load: %d ok, %d failed\n", atomic_load(&l.ok), atomic_load(&l.failed));
  assert_int_equal(atomic_load(&l.failed), 0);
  assert_true(atomic_load(&l.ok) > 50);
  assert_true(faultd_request_count(&F1) > 0);
  assert_true(faultd_request_count(&F2) > 0);
  gw_resp r;
  gw_request(G.admin_port, "GET", "/metrics", NULL, NULL, &r);
  assert_non_null(strstr(r.body, "linkd_gw_config_reloads_total{result=\"ok\"} 10"));
  gw_resp_free(&r);
}

/* SIGTERM with requests in flight: each is answered (with Connection: close), new connections
 * are refused, /ready says draining, and the process exits 0. */
static void test_sigterm_drain(void **state) {
  (void)state;
  const char *args[] = {"--delay-ms", "300", NULL};
  two_upstreams("slow", args);
  char cfg[2048];
  config(cfg, sizeof cfg, "one", "drain-timeout = 3s\n", "attempt-timeout = 2s\n");
  gw_start(&G, cfg);
  enum { N = 6 };
  int fds[N];
  for (int i = 0; i < N; i++) {
    fds[i] = gw_connect(G.port);
    gw_send_str(fds[i], "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n");
  }
  int idle = gw_connect(G.port); /* a keep-alive connection with nothing in flight */
  assert_int_equal(faultd_wait_requests(&F1, N, 2000), N);
  int64_t t0 = gw_now_ms();
  kill(G.pid, SIGTERM);
  gw_sleep_ms(50);
  gw_resp r;
  gw_request(G.admin_port, "GET", "/ready", NULL, NULL, &r);
  assert_int_equal(r.status, 503);
  gw_resp_free(&r);
  assert_true(gw_closed(idle, 1000));
  close(idle);
  for (int i = 0; i < N; i++) {
    assert_int_equal(gw_read(fds[i], &r, 3000, NULL), 0);
    assert_int_equal(r.status, 200);
    assert_true(r.closed);
    gw_resp_free(&r);
    close(fds[i]);
  }
  int st;
  int64_t end = gw_now_ms() + 3000;
  pid_t w = 0;
  while ((w = waitpid(G.pid, &st, WNOHANG)) == 0 && gw_now_ms() < end)
    gw_sleep_ms(5);
  assert_int_equal(w, G.pid);
  G.pid = 0;
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  assert_true(gw_now_ms() - t0 < 1500);
}

/* A request still in flight at the drain deadline: the gateway stops then and says so. */
static void test_drain_deadline(void **state) {
  (void)state;
  const char *args[] = {"--delay-ms", "3000", NULL};
  two_upstreams("slow", args);
  char cfg[2048];
  config(cfg, sizeof cfg, "one", "drain-timeout = 300ms\n", "attempt-timeout = 5s\ndeadline = 6s\n");
  gw_start(&G, cfg);
  int fd = gw_connect(G.port);
  gw_send_str(fd, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n");
  assert_int_equal(faultd_wait_requests(&F1, 1, 2000), 1);
  int64_t t0 = gw_now_ms();
  kill(G.pid, SIGTERM);
  assert_true(gw_closed(fd, 2000));
  close(fd);
  int64_t took = gw_now_ms() - t0;
  assert_true(took >= 280 && took < 1500);
  int st;
  assert_int_equal(waitpid(G.pid, &st, 0), G.pid);
  G.pid = 0;
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 1);
}

/* A candidate policy whose requests all time out is rolled back after its sample, and logged;
 * both versions are labelled in the metrics. */
static void test_rollout_rollback(void **state) {
  (void)state;
  const char *args[] = {"--delay-ms", "30", NULL};
  two_upstreams("slow", args);
  char cfg[2048];
  config(cfg, sizeof cfg, "one", NULL,
         "deadline = 2s\nnext.deadline = 10ms\nrollout-percent = 50\nrollout-margin = 10\n"
         "rollout-min-sample = 8\n");
  gw_start(&G, cfg);
  int bad = 0, n = 0;
  int64_t end = gw_now_ms() + 8000;
  while (!strstr(gw_stderr(&G), "rolled back") && n < 200 && gw_now_ms() < end) {
    gw_resp r;
    gw_request(G.port, "GET", "/x", NULL, NULL, &r);
    bad += r.status != 200;
    gw_resp_free(&r);
    n++;
  }
  assert_non_null(strstr(gw_stderr(&G), "rolled back"));
  assert_true(bad >= 8);
  /* from now on every request gets the stable policy */
  for (int i = 0; i < 20; i++) {
    gw_resp r;
    gw_request(G.port, "GET", "/x", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    gw_resp_free(&r);
  }
  gw_resp r;
  gw_request(G.admin_port, "GET", "/metrics", NULL, NULL, &r);
  const char *m = r.body;
  int versions = 0;
  for (const char *p = m; (p = strstr(p, "linkd_gw_requests_total{route=\"all\",policy=\"")); p++)
    versions++;
  assert_true(versions >= 2);
  gw_resp_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_bad_reload_rejected, teardown),
      cmocka_unit_test_teardown(test_good_reloads, teardown),
      cmocka_unit_test_teardown(test_reload_under_load, teardown),
      cmocka_unit_test_teardown(test_sigterm_drain, teardown),
      cmocka_unit_test_teardown(test_drain_deadline, teardown),
      cmocka_unit_test_teardown(test_rollout_rollback, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
