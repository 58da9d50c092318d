/* SPDX-License-Identifier: MIT */
/* 10 000 sequential keep-alive GETs on loopback per variant: liblinkd's lk_http_call (deadline,
 * per-attempt timers, phase evidence, result object and timeline) against raw libcurl (one reused
 * easy handle) in the same run, interleaved in rounds so machine noise hits all alike.
 * Two pairs, so the library's own cost is told apart from the cost of the extra headers:
 *   raw             curl_easy_perform, no extra headers
 *   linkd-bare      lk_http_call with Linkd-Deadline / Linkd-Attempt off     (ratio vs raw)
 *   raw+headers     curl_easy_perform sending the same two headers, rebuilt per request
 *   linkd           lk_http_call with the default policy (both headers)      (ratio vs raw+headers)
 * Also prints the median of per-round paired ratios (robust to the VM's speed drifting between
 * rounds). Goal: ratio <= 1.03.  Usage: bench_http_seq [per-variant=10000] [rounds=20] */
#include "benchserver.h"

#include <linkd/http.h>

#include <curl/curl.h>
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

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmpd);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define NV 4
static const char *const names[NV] = {"raw libcurl", "liblinkd (no prop. headers)",
                                      "raw libcurl + 2 headers", "liblinkd (default policy)"};
static void (*const fns[NV])(ctx *) = {raw_plain, linkd_bare, raw_headers, linkd_full};

int main(int argc, char **argv) {
  int total = argc > 1 ? atoi(argv[1]) : 10000;
  int rounds = argc > 2 ? atoi(argv[2]) : 20;
  if (rounds < 1 || total < rounds)
    return 2;
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
  for (int r = 0; r < rounds; r++) {
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
  }
  /* Paired ratios: within one round the variants run back to back, so a drift of the VM's speed
   * between rounds cancels out; their median is the steadier estimate. (Computed before median()
   * sorts per_round in place.) */
  double *pair_bare = malloc(sizeof(double) * (size_t)rounds);
  double *pair_full = malloc(sizeof(double) * (size_t)rounds);
  for (int r = 0; r < rounds; r++) {
    pair_bare[r] = per_round[1][r] / per_round[0][r];
    pair_full[r] = per_round[3][r] / per_round[2][r];
  }
  double med[NV];
  printf("sequential keep-alive GETs on loopback: %d per variant, %d interleaved rounds\n",
         per * rounds, rounds);
  printf("%-30s %12s %10s %10s\n", "", "median/op", "p50", "p99");
  for (int v = 0; v < NV; v++) {
    med[v] = median(per_round[v], rounds);
    printf("%-30s %9.2f us %7.2f us %7.2f us\n", names[v], med[v] / 1e3, pct(lat[v], nlat[v], 50),
           pct(lat[v], nlat[v], 99));
  }
  printf("ratio liblinkd / raw libcurl, no extra headers:  %.3f (%+.2f us per call)\n",
         med[1] / med[0], (med[1] - med[0]) / 1e3);
  printf("ratio liblinkd / raw libcurl, same 2 headers:     %.3f (%+.2f us per call)\n",
         med[3] / med[2], (med[3] - med[2]) / 1e3);
  printf("median of per-round paired ratios: no extra headers %.3f, same 2 headers %.3f\n",
         median(pair_bare, rounds), median(pair_full, rounds));
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
