/* SPDX-License-Identifier: MIT */
/* Configuration reloads and shutdown of `linkd serve`: a bad file is rejected with its line and
 * the running configuration keeps serving; SIGHUP and POST /config swap in a good one; reloads
 * under load fail no request (a load thread beside the reloads, so this also runs under TSan);
 * SIGTERM drains in-flight requests, and the drain deadline (or a second SIGTERM) bounds it;
 * SIGUSR1 reopens the access log; a posted configuration is named as such; a staged rollout whose
 * candidate is worse is rolled back; /metrics stays valid and cumulative across reloads that
 * add, remove and rename routes and clusters. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "faultd_client.h"
#include "gwtest.h"

#include <math.h>
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

/* SIGTERM, then SIGTERM (or SIGINT: Ctrl-C again) while requests are still in flight: the
 * second one does not wait for the drain deadline (10 s here); it closes what is left at once,
 * and the exit status says requests were cut off (1), as at the deadline. */
static void test_second_signal_stops_now(void **state) {
  (void)state;
  const char *args[] = {"--delay-ms", "4000", NULL};
  two_upstreams("slow", args);
  const int sigs[] = {SIGTERM, SIGINT};
  for (size_t k = 0; k < 2; k++) {
    char cfg[2048];
    config(cfg, sizeof cfg, "one", "drain-timeout = 10s\n",
           "attempt-timeout = 8s\ndeadline = 9s\n");
    gw_start(&G, cfg);
    int fd = gw_connect(G.port);
    gw_send_str(fd, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_int_equal(faultd_wait_requests(&F1, (int)k + 1, 2000), (int)k + 1);
    kill(G.pid, SIGTERM);
    int64_t end = gw_now_ms() + 2000;
    while (!strstr(gw_stderr(&G), "draining:") && gw_now_ms() < end)
      gw_sleep_ms(5);
    assert_non_null(strstr(gw_stderr(&G), "draining:"));
    int64_t t0 = gw_now_ms();
    kill(G.pid, sigs[k]);
    assert_true(gw_closed(fd, 2000));
    close(fd);
    int st;
    pid_t w = 0;
    end = gw_now_ms() + 2000;
    while ((w = waitpid(G.pid, &st, WNOHANG)) == 0 && gw_now_ms() < end)
      gw_sleep_ms(5);
    assert_int_equal(w, G.pid);
    G.pid = 0;
    assert_true(gw_now_ms() - t0 < 1500);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 1);
    assert_non_null(strstr(gw_stderr(&G), "while draining: closing 1 connections"));
    assert_int_equal(gw_stop(&G, 1000), 0); /* removes its files */
  }
}

/* SIGUSR1 reopens the access log, as nginx's does (logrotate's postrotate sends it): after a
 * rename the old file keeps what was written before, the new one gets what follows; the
 * process goes on serving (USR1's default action would have ended it). */
static void test_usr1_reopens_access_log(void **state) {
  (void)state;
  two_upstreams("ok", NULL);
  char cfg[2048];
  config(cfg, sizeof cfg, "one", "[log]\naccess = %ACCESS%\n", NULL);
  /* [log] inside listen_extra: the sections after it are still read as their own */
  gw_start(&G, cfg);
  gw_resp r;
  gw_request(G.port, "GET", "/before", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  assert_int_equal(gw_access_lines(&G), 1);
  char rotated[400];
  snprintf(rotated, sizeof rotated, "%s.1", G.access_path);
  assert_int_equal(rename(G.access_path, rotated), 0);
  kill(G.pid, SIGUSR1);
  int64_t end = gw_now_ms() + 2000;
  while (!strstr(gw_stderr(&G), "reopened") && gw_now_ms() < end)
    gw_sleep_ms(5);
  assert_non_null(strstr(gw_stderr(&G), "access log"));
  gw_request(G.port, "GET", "/after", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  assert_int_equal(gw_access_lines(&G), 1);
  assert_non_null(strstr(gw_access(&G), "\"path\":\"/after\""));
  FILE *f = fopen(rotated, "r");
  assert_non_null(f);
  char line[1024] = "";
  assert_non_null(fgets(line, sizeof line, f));
  assert_null(fgets(line + strlen(line), (int)(sizeof line - strlen(line)), f));
  fclose(f);
  assert_non_null(strstr(line, "\"path\":\"/before\""));
  unlink(rotated);
}

/* --pid-file: the running process's id, written once it listens (logrotate's postrotate sends
 * `kill -USR1 $(cat FILE)`), and removed when it exits. */
static void test_pid_file(void **state) {
  (void)state;
  two_upstreams("ok", NULL);
  char cfg[2048], pidf[400];
  config(cfg, sizeof cfg, "one", NULL, NULL);
  snprintf(pidf, sizeof pidf, "%s/linkd-test-%d.pid", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (int)getpid());
  unlink(pidf);
  const char *const extra[] = {"--pid-file", pidf, NULL};
  gw_start_args(&G, cfg, 2, extra);
  FILE *f = fopen(pidf, "r");
  assert_non_null(f);
  long pid = 0;
  assert_int_equal(fscanf(f, "%ld", &pid), 1);
  fclose(f);
  assert_int_equal(pid, (long)G.pid);
  assert_int_equal(gw_stop(&G, 5000), 0);
  assert_int_equal(access(pidf, F_OK), -1);
}

/* A configuration posted to /config: named "POST /config" in its errors, in GET /config and in
 * the log (the file on disk is not what was read), and bounded by the size of a configuration,
 * not by [listen] max-body: a proxy's small max-body does not refuse a configuration, and a
 * body larger than any configuration is 413 before it is read. A reload that changes a setting
 * read at start only (the listen address) says it is not applied. */
static void test_posted_config(void **state) {
  (void)state;
  two_upstreams("ok", NULL);
  char cfg[4096];
  config(cfg, sizeof cfg, "one", "max-body = 1KiB\nbody-buffer = 1KiB\n", NULL);
  gw_start(&G, cfg);
  config(cfg, sizeof cfg, "two", "max-body = 1KiB\nbody-buffer = 1KiB\n", NULL);
  for (int i = 0; strlen(cfg) < 2048; i++) /* over max-body */
    snprintf(cfg + strlen(cfg), sizeof cfg - strlen(cfg), "# comment line %d, for size\n", i);
  gw_resp r;
  gw_request(G.admin_port, "POST", "/config", NULL, cfg, &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.body, "generation 2\n"); /* nothing read at start only changed */
  gw_resp_free(&r);
  gw_request(G.admin_port, "GET", "/config", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  assert_int_equal(strncmp(r.body, "# generation 2, digest ", 23), 0);
  assert_non_null(strstr(r.body, ", from POST /config\n"));
  gw_resp_free(&r);
  assert_non_null(strstr(gw_stderr(&G), "configuration generation 2 loaded from POST /config"));
  gw_request(G.admin_port, "POST", "/config", NULL,
             "[listen]\naddress = 127.0.0.1:0\n[cluster c]\nendpoint = 127.0.0.1:1\n"
             "[route r]\ncluster = c\nmax-attempts = lots\n",
             &r);
  assert_int_equal(r.status, 400);
  assert_int_equal(strncmp(r.body, "POST /config:7: max-attempts:", 29), 0);
  gw_resp_free(&r);
  assert_non_null(strstr(gw_stderr(&G), "stays: POST /config:7: max-attempts:"));
  int fd = gw_connect(G.admin_port);
  gw_send_str(fd, "POST /config HTTP/1.1\r\nHost: a\r\nContent-Length: 1048577\r\n\r\n");
  assert_int_equal(gw_read(fd, &r, 2000, NULL), 0);
  assert_int_equal(r.status, 413);
  gw_resp_free(&r);
  close(fd);
  /* the posted configuration (cluster two) still serves */
  gw_request(G.port, "GET", "/x", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  assert_int_equal(generation_of(&r), 2);
  gw_resp_free(&r);
  assert_int_equal(faultd_request_count(&F2), 1);
  /* a new listen address and upstream client are loaded (GET /config shows them) but read at
   * start only: the answer and the log say so, with what is running */
  config(cfg, sizeof cfg, "two", "upstream-client = curl\n", NULL);
  char *a = strstr(cfg, "address = 127.0.0.1:0\n");
  assert_non_null(a);
  memcpy(a, "address = 127.0.0.1:1\n", 22);
  gw_request(G.admin_port, "POST", "/config", NULL, cfg, &r);
  assert_int_equal(r.status, 200);
  char want[200];
  snprintf(want, sizeof want,
           "generation 3\n[listen] address = 127.0.0.1:1: read at start only, not applied until "
           "a restart (running: 127.0.0.1:%d)\n",
           G.port);
  assert_int_equal(strncmp(r.body, want, strlen(want)), 0);
  assert_non_null(strstr(r.body, "\n[listen] upstream-client = curl: read at start only"));
  gw_resp_free(&r);
  assert_non_null(strstr(gw_stderr(&G), "warn: [listen] address = 127.0.0.1:1: read at start"));
  gw_request(G.port, "GET", "/x", NULL, NULL, &r); /* still on the port it started on */
  assert_int_equal(r.status, 200);
  assert_int_equal(generation_of(&r), 3);
  gw_resp_free(&r);
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

/* ---- /metrics across reloads ------------------------------------------------------------- */

/* GET /metrics of G, checked by promtool (gw_scrape). Returns the body (caller frees). */
static char *scrape(void) { return gw_scrape(&G); }

/* The value of the sample line that starts with `series` + ' ' (series: name{labels}). */
static bool sample(const char *text, const char *series, double *v) {
  return gw_sample(text, series, v);
}

/* Whether a sample line starts with `prefix` (e.g. a name and the first labels). */
static bool has_series(const char *text, const char *prefix) {
  size_t n = strlen(prefix);
  for (const char *p = text; (p = strstr(p, prefix)); p += n)
    if (p == text || p[-1] == '\n')
      return true;
  return false;
}

/* Sum and number of the samples whose line starts with `prefix`. */
static double sum_series(const char *text, const char *prefix, int *count) {
  size_t n = strlen(prefix);
  double sum = 0;
  *count = 0;
  for (const char *p = text; (p = strstr(p, prefix)); p += n)
    if (p == text || p[-1] == '\n') {
      const char *sp = strchr(p, ' ');
      assert_non_null(sp);
      sum += strtod(sp + 1, NULL);
      (*count)++;
    }
  return sum;
}

/* Every counter and histogram sample of `before` that `after` has too is not smaller there;
 * returns how many were compared. */
static int assert_cumulative(const char *before, const char *after) {
  int compared = 0;
  bool cumulative = false;
  for (const char *p = before; *p;) {
    const char *eol = strchr(p, '\n');
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    char line[1024];
    assert_true(len < sizeof line);
    memcpy(line, p, len);
    line[len] = '\0';
    p += len + (eol != NULL);
    if (strncmp(line, "# TYPE ", 7) == 0) {
      const char *t = strrchr(line, ' ') + 1;
      cumulative = strcmp(t, "counter") == 0 || strcmp(t, "histogram") == 0;
      continue;
    }
    if (!cumulative || line[0] == '#' || !line[0])
      continue;
    char *sp = strrchr(line, ' ');
    assert_non_null(sp);
    *sp = '\0';
    double a = strtod(sp + 1, NULL), b;
    if (!sample(after, line, &b))
      continue;
    if (b < a)
      fail_msg("%s went down from %g to %g", line, a, b);
    compared++;
  }
  return compared;
}

/* Config A: route `all` (cluster one) with a candidate policy for half its requests, and route
 * `old` on cluster two. */
static void metrics_config_a(char *buf, size_t cap) {
  snprintf(buf, cap,
           "[listen]\naddress = 127.0.0.1:0\n[admin]\naddress = 127.0.0.1:0\n"
           "[cluster one]\nendpoint = 127.0.0.1:%d\n[cluster two]\nendpoint = 127.0.0.1:%d\n"
           "[route all]\ncluster = one\nmax-attempts = 2\nbase = 5ms\njitter = none\n"
           "next.max-attempts = 3\nrollout-percent = 50\nrollout-min-sample = 1000000\n"
           "[route old]\ncluster = two\nprefix = /old\n",
           faultd_port(&F1), faultd_port(&F2));
}

/* Config B: `all` unchanged but for its candidate, which is gone; `old` removed; cluster two
 * renamed three (the same endpoint), and route `new` on it. */
static void metrics_config_b(char *buf, size_t cap) {
  snprintf(buf, cap,
           "[listen]\naddress = 127.0.0.1:0\n[admin]\naddress = 127.0.0.1:0\n"
           "[cluster one]\nendpoint = 127.0.0.1:%d\n[cluster three]\nendpoint = 127.0.0.1:%d\n"
           "[route all]\ncluster = one\nmax-attempts = 2\nbase = 5ms\njitter = none\n"
           "[route new]\ncluster = three\nprefix = /new\n",
           faultd_port(&F1), faultd_port(&F2));
}

/* The state gauges of the configuration B serves, and none of what it removed. */
static bool shows_only_b(const char *m) {
  int n;
  double share = sum_series(m, "linkd_gw_rollout_ratio{route=\"all\",", &n);
  return n == 1 && fabs(share - 1) < 1e-9 &&
         !has_series(m, "linkd_gw_rollout_ratio{route=\"old\"") &&
         !has_series(m, "linkd_gw_breaker_state{route=\"old\"") &&
         !has_series(m, "linkd_gw_budget_consumption{route=\"old\"") &&
         !has_series(m, "linkd_gw_endpoint_healthy{cluster=\"two\"") &&
         !has_series(m, "linkd_gw_endpoint_ejected{cluster=\"two\"") &&
         has_series(m, "linkd_gw_endpoint_healthy{cluster=\"three\"") &&
         has_series(m, "linkd_gw_rollout_ratio{route=\"new\"");
}

static bool shows_only_a(const char *m) {
  int n;
  double share = sum_series(m, "linkd_gw_rollout_ratio{route=\"all\",", &n);
  return n == 2 && fabs(share - 1) < 1e-9 &&
         has_series(m, "linkd_gw_rollout_ratio{route=\"old\"") &&
         has_series(m, "linkd_gw_endpoint_healthy{cluster=\"two\"") &&
         !has_series(m, "linkd_gw_endpoint_healthy{cluster=\"three\"") &&
         !has_series(m, "linkd_gw_rollout_ratio{route=\"new\"") &&
         !has_series(m, "linkd_gw_breaker_state{route=\"new\"");
}

/* Scrapes until `pred` holds (a worker drops the old configuration just after the reload
 * answered) or 3 s pass; every scrape passes promtool and no counter goes down from *prev,
 * which becomes the last scrape. */
static bool scrape_until(bool (*pred)(const char *), char **prev) {
  int64_t end = gw_now_ms() + 3000;
  for (;;) {
    char *m = scrape();
    assert_true(assert_cumulative(*prev, m) > 50);
    free(*prev);
    *prev = m;
    if (pred(m))
      return true;
    if (gw_now_ms() > end)
      return false;
    gw_sleep_ms(20);
  }
}

/* /metrics through reloads that add, remove and rename routes and clusters, under load: every
 * scrape is valid (promtool) and no counter goes down; the state gauges (rollout share, breaker
 * state, budget use, endpoint health and ejection) exist only for what a configuration in use
 * has, so a removed candidate's share does not stay added to the route's 100 % and a removed
 * endpoint's health does not stay frozen; the counters of what was removed stay, and a route
 * that comes back shows its gauges again. */
static void test_metrics_across_reloads(void **state) {
  (void)state;
  two_upstreams("ok", NULL);
  char cfg_a[2048], cfg_b[2048];
  metrics_config_a(cfg_a, sizeof cfg_a);
  metrics_config_b(cfg_b, sizeof cfg_b);
  gw_start(&G, cfg_a);
  char *prev = scrape(); /* fresh start */
  assert_true(shows_only_a(prev));
  for (int i = 0; i < 10; i++) {
    gw_resp r;
    gw_request(G.port, "GET", "/old/x", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    gw_resp_free(&r);
  }
  load l = {.port = G.port};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, load_thread, &l), 0);
  gw_sleep_ms(100);
  char *m = scrape(); /* under load */
  assert_true(assert_cumulative(prev, m) > 50);
  free(prev);
  prev = m;
  int n;
  assert_true(sum_series(prev, "linkd_gw_requests_total{route=\"old\",", &n) == 10);
  /* B by POST /config, under load */
  char *at_b = strdup(prev);
  assert_non_null(at_b);
  gw_resp r;
  gw_request(G.admin_port, "POST", "/config", NULL, cfg_b, &r);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  if (!scrape_until(shows_only_b, &prev))
    fail_msg("after the reload to B, /metrics still shows what B removed:\n%s", prev);
  /* route all kept its stable version, whose counters go on from where they were (the
   * candidate's stay too) */
  char stable[160];
  const char *v = strstr(prev, "\nlinkd_gw_rollout_ratio{route=\"all\",policy=\"");
  assert_non_null(v);
  v = strstr(v, "policy=\"") + 8;
  snprintf(stable, sizeof stable,
           "linkd_gw_requests_total{route=\"all\",policy=\"%.*s\",code=\"2xx\"}",
           (int)(strchr(v, '"') - v), v);
  double before_b, after_b;
  assert_true(sample(at_b, stable, &before_b) && before_b > 0);
  assert_true(sample(prev, stable, &after_b) && after_b >= before_b);
  assert_true(sum_series(prev, "linkd_gw_requests_total{route=\"all\",", &n) > before_b);
  assert_int_equal(n, 12); /* 6 status classes of each version */
  free(at_b);
  /* the removed route's counters stay, with their values */
  assert_true(sum_series(prev, "linkd_gw_requests_total{route=\"old\",", &n) == 10);
  assert_true(has_series(prev, "linkd_gw_upstream_attempts_total{cluster=\"two\","));
  gw_request(G.port, "GET", "/new/x", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  gw_resp_free(&r);
  /* back to A by SIGHUP: route old, its candidate and cluster two come back */
  gw_write_config(&G, cfg_a);
  kill(G.pid, SIGHUP);
  if (!scrape_until(shows_only_a, &prev))
    fail_msg("after the reload back to A, /metrics does not show A:\n%s", prev);
  double gen;
  assert_true(sample(prev, "linkd_gw_config_generation", &gen) && gen == 3);
  assert_true(sum_series(prev, "linkd_gw_requests_total{route=\"old\",", &n) == 10);
  atomic_store(&l.stop, true);
  pthread_join(th, NULL);
  assert_int_equal(atomic_load(&l.failed), 0);
  assert_true(atomic_load(&l.ok) > 0);
  m = scrape();
  assert_true(assert_cumulative(prev, m) > 50);
  assert_true(sum_series(m, "linkd_gw_requests_total{route=\"all\",", &n) >= atomic_load(&l.ok));
  free(prev);
  free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_bad_reload_rejected, teardown),
      cmocka_unit_test_teardown(test_good_reloads, teardown),
      cmocka_unit_test_teardown(test_reload_under_load, teardown),
      cmocka_unit_test_teardown(test_sigterm_drain, teardown),
      cmocka_unit_test_teardown(test_drain_deadline, teardown),
      cmocka_unit_test_teardown(test_second_signal_stops_now, teardown),
      cmocka_unit_test_teardown(test_usr1_reopens_access_log, teardown),
      cmocka_unit_test_teardown(test_pid_file, teardown),
      cmocka_unit_test_teardown(test_posted_config, teardown),
      cmocka_unit_test_teardown(test_rollout_rollback, teardown),
      cmocka_unit_test_teardown(test_metrics_across_reloads, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
