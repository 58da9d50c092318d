/* SPDX-License-Identifier: MIT */
/* 10 000 sequential keep-alive GETs on loopback per variant: liblinkd's lk_http_call (deadline,
 * per-attempt timers, phase evidence, result object and timeline) against raw libcurl (one reused
 * easy handle) in the same run, interleaved in rounds so machine noise hits all alike.
 * Two pairs, so the library's own cost is told apart from the cost of the extra headers:
 *   raw             curl_easy_perform, no extra headers
 *   linkd-bare      lk_http_call with Linkd-Deadline / Linkd-Attempt off     (ratio vs raw)
 *   raw+headers     curl_easy_perform sending the same two headers, rebuilt per request
 *   linkd           lk_http_call with the default policy (both headers)      (ratio vs raw+headers)
 * Leads with the per-round paired ratios (median and min-max; robust to the VM's speed drifting
 * between rounds), then absolute times, then the CPUs client and server were on in each round
 * (pin them with LINKD_BENCH_CPUS=client,server). Goal: ratio <= 1.03.
 * Usage: bench_http_seq [per-variant=10000] [rounds=20] */
#include "benchserver.h"
#include "benchutil.h"

#include <linkd/http.h>

#include <curl/curl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sink {
  char buf[256];
  size_t len;
} sink;

static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
  sink *s = ud;
  size_t len = sz * n;
  if (s->len + len <= sizeof s->buf) {
    memcpy(s->buf + s->len, p, len);
    s->len += len;
  }
  return len;
}

typedef struct ctx {
  CURL *e;
  sink sk;
  lk_http_client *c;
  lk_http_request *req;
  lk_http_policy pol, bare;
  int fails;
} ctx;

static void raw_plain(ctx *x) {
  x->sk.len = 0;
  long code = 0;
  curl_easy_setopt(x->e, CURLOPT_HTTPHEADER, (struct curl_slist *)NULL);
  x->fails += curl_easy_perform(x->e) != CURLE_OK;
  curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &code);
  x->fails += code != 200;
}

/* What a careful caller would do by hand: compute the remaining budget, send it and the attempt
 * number on each request. */
static void raw_headers(ctx *x) {
  char dl[48], at[32];
  snprintf(dl, sizeof dl, "Linkd-Deadline: %lld", (long long)800);
  snprintf(at, sizeof at, "Linkd-Attempt: %d", 1);
  struct curl_slist h2 = {at, NULL}, h1 = {dl, &h2};
  x->sk.len = 0;
  long code = 0;
  curl_easy_setopt(x->e, CURLOPT_HTTPHEADER, &h1);
  x->fails += curl_easy_perform(x->e) != CURLE_OK;
  curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &code);
  x->fails += code != 200;
}

static void linkd_call(ctx *x, const lk_http_policy *pol) {
  lk_http_result *res;
  x->fails += lk_http_call(x->c, x->req, pol, NULL, &res) != LK_OK;
  x->fails += lk_http_result_status(res) != 200;
  lk_http_result_free(res);
}

static void linkd_bare(ctx *x) { linkd_call(x, &x->bare); }
static void linkd_full(ctx *x) { linkd_call(x, &x->pol); }

static int cmp64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static double pct(int64_t *v, size_t n, double q) {
  qsort(v, n, sizeof *v, cmp64);
  size_t i = (size_t)(q / 100.0 * (double)(n - 1) + 0.5);
  return (double)v[i] / 1e3;
}

#define NV 4
static const char *const names[NV] = {"raw libcurl", "liblinkd (no prop. headers)",
                                      "raw libcurl + 2 headers", "liblinkd (default policy)"};
static void (*const fns[NV])(ctx *) = {raw_plain, linkd_bare, raw_headers, linkd_full};

int main(int argc, char **argv) {
  int total = argc > 1 ? atoi(argv[1]) : 10000;
  int rounds = argc > 2 ? atoi(argv[2]) : 20;
  if (rounds < 1 || rounds > LK_BENCH_MAX_ROUNDS || total < rounds)
    return 2;
  lk_bench_pin(LK_BENCH_MAIN);
  lk_bench_print_placement("bench_http_seq");
  int per = total / rounds;
  benchserver srv;
  if (benchserver_start(&srv) != 0) {
    perror("benchserver");
    return 1;
  }
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/books/1", srv.port);
  curl_global_init(CURL_GLOBAL_DEFAULT);

  ctx x = {0};
  x.e = curl_easy_init();
  curl_easy_setopt(x.e, CURLOPT_URL, url);
  curl_easy_setopt(x.e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(x.e, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(x.e, CURLOPT_WRITEDATA, &x.sk);
  curl_easy_setopt(x.e, CURLOPT_TIMEOUT_MS, 800L);
  x.c = lk_http_client_new(NULL);
  x.req = lk_http_request_new("GET", url);
  lk_http_policy_init_default(&x.pol);
  x.bare = x.pol;
  x.bare.send_deadline = x.bare.send_attempt = false;

  int64_t *lat[NV];
  double *per_round[NV];
  size_t nlat[NV] = {0};
  for (int v = 0; v < NV; v++) {
    lat[v] = malloc(sizeof(int64_t) * (size_t)(per * rounds));
    per_round[v] = malloc(sizeof(double) * (size_t)rounds);
  }
  for (int i = 0; i < 500; i++) /* warm-up: connections, caches, page faults */
    for (int v = 0; v < NV; v++)
      fns[v](&x);
  int cpu_start[LK_BENCH_MAX_ROUNDS], cpu_end[LK_BENCH_MAX_ROUNDS], cpu_srv[LK_BENCH_MAX_ROUNDS];
  for (int r = 0; r < rounds; r++) {
    cpu_start[r] = sched_getcpu();
    for (int k = 0; k < NV; k++) {
      int v = (k + r) % NV; /* rotate the order so none always runs first */
      int64_t t0 = lk_now_ns();
      for (int i = 0; i < per; i++) {
        int64_t t = lk_now_ns();
        fns[v](&x);
        lat[v][nlat[v]++] = lk_now_ns() - t;
      }
      per_round[v][r] = (double)(lk_now_ns() - t0) / per;
    }
    cpu_end[r] = sched_getcpu();
    cpu_srv[r] = lk_bench_proc_cpu(srv.pid);
  }
  /* Paired ratios: within one round the variants run back to back, so a drift of the VM's speed
   * between rounds cancels out; their median is the steadier estimate. */
  double *pair_bare = malloc(sizeof(double) * (size_t)rounds);
  double *pair_full = malloc(sizeof(double) * (size_t)rounds);
  for (int r = 0; r < rounds; r++) {
    pair_bare[r] = per_round[1][r] / per_round[0][r];
    pair_full[r] = per_round[3][r] / per_round[2][r];
  }
  char bb[64], bf[64];
  lk_bench_fmt(bb, sizeof bb, lk_bench_stats_of(pair_bare, rounds), 3);
  lk_bench_fmt(bf, sizeof bf, lk_bench_stats_of(pair_full, rounds), 3);
  printf("sequential keep-alive GETs on loopback: %d per variant, %d interleaved rounds\n",
         per * rounds, rounds);
  printf("ratio liblinkd / raw libcurl, per-round paired, median [min-max]:\n");
  printf("  no extra headers:  %s\n  same 2 headers:    %s\n", bb, bf);
  printf("  cpus per round (client/server; server = CPU it last ran on):");
  for (int r = 0; r < rounds; r++) {
    if (cpu_start[r] == cpu_end[r])
      printf(" %d/%d", cpu_start[r], cpu_srv[r]);
    else
      printf(" %d>%d/%d", cpu_start[r], cpu_end[r], cpu_srv[r]);
  }
  printf("\n%-30s %-26s %10s %10s\n", "", "us/op med [min-max]", "p50", "p99");
  double med[NV];
  for (int v = 0; v < NV; v++) {
    lk_bench_stats st = lk_bench_stats_of(per_round[v], rounds);
    med[v] = st.median;
    st.median /= 1e3, st.min /= 1e3, st.max /= 1e3;
    lk_bench_fmt(bb, sizeof bb, st, 2);
    printf("%-30s %-26s %7.2f us %7.2f us\n", names[v], bb, pct(lat[v], nlat[v], 50),
           pct(lat[v], nlat[v], 99));
  }
  printf("ratio of medians: no extra headers %.3f (%+.2f us per call), same 2 headers %.3f "
         "(%+.2f us)\n",
         med[1] / med[0], (med[1] - med[0]) / 1e3, med[3] / med[2], (med[3] - med[2]) / 1e3);
  printf("goal <= 1.03; failures %d\n", x.fails);
  free(pair_bare);
  free(pair_full);

  lk_http_request_free(x.req);
  lk_http_client_free(x.c);
  curl_easy_cleanup(x.e);
  benchserver_stop(&srv);
  for (int v = 0; v < NV; v++) {
    free(lat[v]);
    free(per_round[v]);
  }
  return x.fails ? 1 : 0;
}
