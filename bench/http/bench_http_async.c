/* SPDX-License-Identifier: MIT */
/* The asynchronous driver against raw curl multi: N requests with C in flight at once (default
 * 20 000 with 256 concurrent) on one thread against a loopback responder. Rounds interleave raw
 * (the baseline) and liblinkd, alternating which goes first; each round gives one paired
 * throughput ratio liblinkd / raw. Reports that ratio's median and min-max first, then requests/s
 * and latency percentiles, and the CPUs client and server were on in each round (pin them with
 * LINKD_BENCH_CPUS=client,server).
 *   bench_http_async [requests=20000] [concurrency=256] [rounds=7] */
#include "benchserver.h"
#include "benchutil.h"

#include <linkd/http.h>

#include <curl/curl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t drop(char *p, size_t sz, size_t n, void *ud) {
  (void)p, (void)ud;
  return sz * n;
}

typedef struct run {
  int total, started, done, fails;
  int64_t *lat;
} run;

/* --- raw curl multi ------------------------------------------------------------------------ */
typedef struct raw_slot {
  CURL *e;
  int64_t t0;
} raw_slot;

static double raw_multi(const char *url, int total, int conc, run *r) {
  CURLM *m = curl_multi_init();
  raw_slot *slots = calloc((size_t)conc, sizeof *slots);
  int64_t start = lk_now_ns();
  for (int i = 0; i < conc && r->started < total; i++) {
    slots[i].e = curl_easy_init();
    curl_easy_setopt(slots[i].e, CURLOPT_URL, url);
    curl_easy_setopt(slots[i].e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(slots[i].e, CURLOPT_WRITEFUNCTION, drop);
    curl_easy_setopt(slots[i].e, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(slots[i].e, CURLOPT_PRIVATE, (void *)&slots[i]);
    slots[i].t0 = lk_now_ns();
    curl_multi_add_handle(m, slots[i].e);
    r->started++;
  }
  while (r->done < total) {
    int running;
    curl_multi_perform(m, &running);
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left))) {
      if (msg->msg != CURLMSG_DONE)
        continue;
      raw_slot *s;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
      long code = 0;
      curl_easy_getinfo(s->e, CURLINFO_RESPONSE_CODE, &code);
      r->fails += msg->data.result != CURLE_OK || code != 200;
      r->lat[r->done++] = lk_now_ns() - s->t0;
      curl_multi_remove_handle(m, s->e);
      if (r->started < total) {
        s->t0 = lk_now_ns();
        curl_multi_add_handle(m, s->e);
        r->started++;
      }
    }
    if (r->done < total)
      curl_multi_poll(m, NULL, 0, 1000, NULL);
  }
  double secs = (double)(lk_now_ns() - start) / 1e9;
  for (int i = 0; i < conc; i++)
    if (slots[i].e)
      curl_easy_cleanup(slots[i].e);
  free(slots);
  curl_multi_cleanup(m);
  return secs;
}

/* --- liblinkd's driver --------------------------------------------------------------------- */
typedef struct lk_ctx {
  lk_http_client *c;
  lk_http_request *req;
  lk_http_policy pol;
  run *r;
} lk_ctx;

typedef struct lk_slot {
  lk_ctx *x;
  int64_t t0;
} lk_slot;

static void on_done(void *ud, lk_http_result *res) {
  lk_slot *s = ud;
  run *r = s->x->r;
  r->fails += lk_http_result_err(res) != LK_OK;
  r->lat[r->done++] = lk_now_ns() - s->t0;
  lk_http_result_free(res);
  if (r->started < r->total) {
    s->t0 = lk_now_ns();
    r->started++;
    if (lk_http_submit(s->x->c, s->x->req, &s->x->pol, NULL, on_done, s) != LK_OK)
      r->fails++;
  }
}

static double linkd_async(lk_ctx *x, int total, int conc) {
  lk_slot *slots = calloc((size_t)conc, sizeof *slots);
  int64_t start = lk_now_ns();
  for (int i = 0; i < conc && x->r->started < total; i++) {
    slots[i] = (lk_slot){x, lk_now_ns()};
    x->r->started++;
    lk_http_submit(x->c, x->req, &x->pol, NULL, on_done, &slots[i]);
  }
  while (lk_http_client_active(x->c) > 0)
    lk_http_client_run(x->c, -1);
  double secs = (double)(lk_now_ns() - start) / 1e9;
  free(slots);
  return secs;
}

static int cmp64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static double pct_ms(int64_t *v, size_t n, double q) {
  qsort(v, n, sizeof *v, cmp64);
  return (double)v[(size_t)(q / 100.0 * (double)(n - 1) + 0.5)] / 1e6;
}

int main(int argc, char **argv) {
  int total = argc > 1 ? atoi(argv[1]) : 20000;
  int conc = argc > 2 ? atoi(argv[2]) : 256;
  int rounds = argc > 3 ? atoi(argv[3]) : 7;
  if (total < 1 || conc < 1 || rounds < 1 || rounds > LK_BENCH_MAX_ROUNDS)
    return 2;
  lk_bench_pin(LK_BENCH_MAIN);
  lk_bench_print_placement("bench_http_async");
  benchserver srv;
  if (benchserver_start(&srv) != 0) {
    perror("benchserver");
    return 1;
  }
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/books/1", srv.port);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  lk_ctx x = {.c = lk_http_client_new(NULL), .req = lk_http_request_new("GET", url)};
  lk_http_policy_init_default(&x.pol);
  x.pol.deadline = LK_SEC(10);
  x.pol.attempt_timeout = LK_SEC(5);

  int64_t *lat[2] = {malloc(sizeof(int64_t) * (size_t)total * (size_t)rounds),
                     malloc(sizeof(int64_t) * (size_t)total * (size_t)rounds)};
  double rps_round[2][LK_BENCH_MAX_ROUNDS], ratio[LK_BENCH_MAX_ROUNDS];
  char where[LK_BENCH_MAX_ROUNDS][48];
  int fails[2] = {0, 0};
  size_t n[2] = {0, 0};
  for (int rd = 0; rd < rounds; rd++) {
    int c0 = -1, c1 = -1, s1 = -1;
    for (int k = 0; k < 2; k++) {
      int side = (k + rd) % 2; /* alternate which goes first */
      run r = {.total = total, .lat = lat[side] + n[side]};
      double secs;
      int cpu0 = sched_getcpu();
      if (side == 0) {
        secs = raw_multi(url, total, conc, &r);
      } else {
        x.r = &r;
        secs = linkd_async(&x, total, conc);
        c0 = cpu0;
        c1 = sched_getcpu();
        s1 = lk_bench_proc_cpu(srv.pid);
      }
      rps_round[side][rd] = (double)r.done / secs;
      n[side] += (size_t)r.done;
      fails[side] += r.fails;
    }
    ratio[rd] = rps_round[1][rd] / rps_round[0][rd];
    if (c1 == c0)
      snprintf(where[rd], sizeof where[rd], "%d/%d", c0, s1);
    else /* the client moved during the run */
      snprintf(where[rd], sizeof where[rd], "%d>%d/%d", c0, c1, s1);
  }
  lk_bench_stats rs = lk_bench_stats_of(ratio, rounds);
  char buf[64];
  lk_bench_fmt(buf, sizeof buf, rs, 3);
  printf("async: %d requests x %d interleaved rounds, %d in flight, one thread, loopback\n", total,
         rounds, conc);
  printf("throughput ratio liblinkd / raw curl multi (per round): %s\n", buf);
  printf("  per round:");
  for (int rd = 0; rd < rounds; rd++)
    printf(" %.3f", ratio[rd]);
  printf("\n  cpus per round (client/server, liblinkd's run; server = CPU it last ran on):");
  for (int rd = 0; rd < rounds; rd++)
    printf(" %s", where[rd]);
  printf("\n%-24s %-26s %9s %9s %9s\n", "", "req/s med [min-max]", "p50", "p99", "p99.9");
  const char *names[2] = {"raw curl multi", "liblinkd lk_http_submit"};
  for (int s = 0; s < 2; s++) {
    lk_bench_fmt(buf, sizeof buf, lk_bench_stats_of(rps_round[s], rounds), 0);
    printf("%-24s %-26s %6.2f ms %6.2f ms %6.2f ms\n", names[s], buf, pct_ms(lat[s], n[s], 50),
           pct_ms(lat[s], n[s], 99), pct_ms(lat[s], n[s], 99.9));
  }
  printf("failures raw %d, liblinkd %d\n", fails[0], fails[1]);
  lk_http_request_free(x.req);
  lk_http_client_free(x.c);
  benchserver_stop(&srv);
  free(lat[0]);
  free(lat[1]);
  return fails[0] || fails[1];
}
