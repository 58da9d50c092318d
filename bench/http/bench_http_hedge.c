/* SPDX-License-Identifier: MIT */
/* Hedged calls against a server with a slow tail: 5 % of its answers take 20x the others
 * (default 1 ms and 20 ms; which ones is fixed by the request's arrival number, so both sides of
 * a round see the same mix). Rounds interleave liblinkd without hedging (the baseline) and with
 * one hedge, alternating which goes first; each round gives the paired ratio of p99 latencies,
 * hedged / not, and the extra requests the hedges cost (attempts sent / calls - 1).
 * Goal (issue 9): p99 ratio <= 0.5 at <= 10 % extra requests.
 *   bench_http_hedge [calls=2000] [concurrency=8] [rounds=5] [base_us=1000] [hedge_delay_us=3000]
 * hedge_delay_us 0: the delay is the p90 of the live attempt histogram (lk_call_metrics). */
#include "benchutil.h"

#include <linkd/http.h>
#include <linkd/metrics.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* --- the slow-tail server (forked; one thread per connection) ------------------------------ */
static int64_t g_base_ns;
static _Atomic uint64_t g_seq;

/* 5 of every 100 arrivals, spread by a multiplicative hash so they are not periodic. */
static bool slow_one(uint64_t n) { return (n * 0x9E3779B97F4A7C15ull >> 32) % 100 < 5; }

static void *conn_main(void *arg) {
  int fd = (int)(intptr_t)arg;
  char buf[4096];
  size_t have = 0;
  static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
  for (;;) {
    ssize_t r = read(fd, buf + have, sizeof buf - have);
    if (r <= 0)
      break;
    have += (size_t)r;
    char *end;
    while ((end = memmem(buf, have, "\r\n\r\n", 4))) {
      uint64_t n = atomic_fetch_add(&g_seq, 1);
      int64_t d = slow_one(n) ? 20 * g_base_ns : g_base_ns;
      struct timespec ts = {(time_t)(d / 1000000000), (long)(d % 1000000000)};
      nanosleep(&ts, NULL);
      if (write(fd, resp, sizeof resp - 1) < 0)
        goto out;
      size_t used = (size_t)(end + 4 - buf);
      memmove(buf, buf + used, have - used);
      have -= used;
    }
    if (have == sizeof buf)
      break;
  }
out:
  close(fd);
  return NULL;
}

static pid_t server_start(int *port) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 256) != 0 ||
      getsockname(ls, (struct sockaddr *)&a, &al) != 0)
    return -1;
  *port = ntohs(a.sin_port);
  pid_t pid = fork();
  if (pid != 0) {
    close(ls);
    return pid;
  }
  lk_bench_pin(LK_BENCH_SECOND);
  for (;;) {
    int fd = accept(ls, NULL, NULL);
    if (fd < 0)
      continue;
    setsockopt(fd, IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof one);
    pthread_t th;
    if (pthread_create(&th, NULL, conn_main, (void *)(intptr_t)fd) == 0)
      pthread_detach(th);
    else
      close(fd);
  }
}

/* --- the client ---------------------------------------------------------------------------- */
typedef struct run {
  lk_http_client *c;
  lk_http_request *req;
  const lk_http_policy *pol;
  int total, started, done, fails;
  long attempts, hedges;
  int64_t *lat;
} run;

static void on_done(void *ud, lk_http_result *res) {
  run *r = ud;
  size_t n = 0;
  lk_http_result_attempts(res, &n);
  r->attempts += (long)n;
  r->hedges += lk_http_result_hedges(res);
  r->fails += lk_http_result_err(res) != LK_OK;
  r->lat[r->done++] = lk_http_result_elapsed(res);
  lk_http_result_free(res);
  if (r->started < r->total) {
    r->started++;
    if (lk_http_submit(r->c, r->req, r->pol, NULL, on_done, r) != LK_OK)
      r->fails++;
  }
}

static void run_calls(run *r, int conc) {
  for (int i = 0; i < conc && r->started < r->total; i++) {
    r->started++;
    lk_http_submit(r->c, r->req, r->pol, NULL, on_done, r);
  }
  while (lk_http_client_active(r->c) > 0)
    lk_http_client_run(r->c, -1);
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
  int total = argc > 1 ? atoi(argv[1]) : 2000;
  int conc = argc > 2 ? atoi(argv[2]) : 8;
  int rounds = argc > 3 ? atoi(argv[3]) : 5;
  int64_t base_us = argc > 4 ? atoll(argv[4]) : 1000;
  int64_t delay_us = argc > 5 ? atoll(argv[5]) : 3000;
  if (total < 100 || conc < 1 || rounds < 1 || rounds > LK_BENCH_MAX_ROUNDS || base_us < 1 ||
      delay_us < 0)
    return 2;
  g_base_ns = base_us * 1000;
  lk_bench_pin(LK_BENCH_MAIN);
  lk_bench_print_placement("bench_http_hedge");
  int port = 0;
  pid_t srv = server_start(&port);
  if (srv < 0) {
    perror("server");
    return 1;
  }
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/books/1", port);
  lk_metrics *m = lk_metrics_new();
  lk_call_metrics *cm = lk_call_metrics_new(m, "bench");
  lk_http_policy plain, hedged;
  lk_http_policy_init_default(&plain);
  plain.deadline = LK_SEC(10);
  plain.attempt_timeout = LK_SEC(5);
  plain.metrics = cm;
  hedged = plain;
  lk_hedge_policy_init_default(&hedged.hedge);
  hedged.hedge.max_hedges = 1;
  hedged.hedge.delay = delay_us * 1000;
  if (delay_us == 0) {
    hedged.hedge.delay = 20 * g_base_ns; /* until the histogram has data */
    hedged.hedge.quantile = 90;
    hedged.hedge.percentile = lk_http_hist_percentile;
    hedged.hedge.percentile_ctx = lk_call_metrics_attempt_hist(cm);
  }
  lk_http_client *c = lk_http_client_new(NULL);
  lk_http_request *req = lk_http_request_new("GET", url);
  int64_t *lat = malloc(sizeof(int64_t) * (size_t)total);
  double p99[2][LK_BENCH_MAX_ROUNDS], p50[2][LK_BENCH_MAX_ROUNDS], ratio[LK_BENCH_MAX_ROUNDS];
  double extra[LK_BENCH_MAX_ROUNDS];
  int fails = 0;
  /* warm-up: connections, and the histogram a percentile delay reads */
  run w = {.c = c, .req = req, .pol = &plain, .total = total / 4, .lat = lat};
  run_calls(&w, conc);
  for (int rd = 0; rd < rounds; rd++) {
    for (int k = 0; k < 2; k++) {
      int side = (k + rd) % 2; /* 0: no hedging, 1: hedged; alternating which goes first */
      run r = {.c = c, .req = req, .pol = side ? &hedged : &plain, .total = total, .lat = lat};
      run_calls(&r, conc);
      fails += r.fails;
      p50[side][rd] = pct_ms(lat, (size_t)r.done, 50);
      p99[side][rd] = pct_ms(lat, (size_t)r.done, 99);
      if (side)
        extra[rd] = (double)(r.attempts - r.done) / (double)r.done * 100.0;
    }
    ratio[rd] = p99[1][rd] / p99[0][rd];
  }
  char buf[64];
  printf("hedging: %d calls x %d interleaved rounds, %d in flight; server %lld us, 5 %% at 20x\n",
         total, rounds, conc, (long long)base_us);
  if (delay_us)
    printf("hedge delay fixed %lld us\n", (long long)delay_us);
  else
    printf("hedge delay p90 of the live attempt histogram (now %.3f ms)\n",
           (double)lk_hedge_delay(&hedged.hedge) / 1e6);
  lk_bench_fmt(buf, sizeof buf, lk_bench_stats_of(ratio, rounds), 3);
  printf("p99 ratio hedged / not (per round): %s   goal <= 0.5\n", buf);
  lk_bench_fmt(buf, sizeof buf, lk_bench_stats_of(extra, rounds), 1);
  printf("extra requests %% (hedged rounds):   %s   goal <= 10\n", buf);
  lk_bench_fmt(buf, sizeof buf, lk_bench_stats_of(p99[0], rounds), 2);
  printf("p99 ms without hedging: %s\n", buf);
  lk_bench_fmt(buf, sizeof buf, lk_bench_stats_of(p99[1], rounds), 2);
  printf("p99 ms with hedging:    %s\n", buf);
  lk_bench_fmt(buf, sizeof buf, lk_bench_stats_of(p50[0], rounds), 2);
  printf("p50 ms without / with:  %s", buf);
  lk_bench_fmt(buf, sizeof buf, lk_bench_stats_of(p50[1], rounds), 2);
  printf(" / %s\nfailures %d\n", buf, fails);
  lk_http_request_free(req);
  lk_http_client_free(c);
  lk_call_metrics_free(cm);
  lk_metrics_free(m);
  free(lat);
  kill(srv, SIGTERM);
  waitpid(srv, NULL, 0);
  return fails ? 1 : 0;
}
