/* SPDX-License-Identifier: MIT */
/* The client of the chain scenario (bench/serve/chain.sh): N logical GETs of one URL, C in flight
 * at once, each under the policy of a mode, on liblinkd's asynchronous driver:
 *
 *   naive   every tier's habit without linkd's defaults: up to A attempts on any retryable
 *           failure, no retry budget, no breaker, and Linkd-Retried ignored (honor_retried off)
 *   linkd   lk_http_policy_init_default() with max_attempts = A: the per-origin budget and
 *           breaker, the deadline sent down (Linkd-Deadline), Linkd-Retried honoured
 *
 * Both use the deadline D and the same backoff (base B, cap M), so the modes differ only in what
 * linkd adds. Prints one line of key=value pairs: calls, attempts (client side), ok, statuses, the
 * slowest answer, and `late`: calls answered more than SLACK after their deadline (0 is the goal:
 * every caller gets its answer within its deadline).
 *   chain_client MODE URL N C A DEADLINE BASE MAX_DELAY [SLACK=20ms] */
#include <linkd/duration.h>
#include <linkd/http.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct run {
  const char *url;
  lk_http_policy pol;
  lk_http_client *client;
  int total, started, done;
  long attempts, ok, late, no_response, status_5xx, status_other;
  int64_t slowest, deadline, slack;
} run;

static int submit_next(run *r);

static void done(void *ud, lk_http_result *res) {
  run *r = ud;
  r->done++;
  size_t n = 0;
  lk_http_result_attempts(res, &n);
  r->attempts += (long)n;
  int st = lk_http_result_status(res);
  if (lk_http_result_err(res) == LK_OK)
    r->ok++;
  if (st == 0)
    r->no_response++;
  else if (st >= 500)
    r->status_5xx++;
  else if (st >= 300)
    r->status_other++;
  int64_t el = lk_http_result_elapsed(res);
  if (el > r->slowest)
    r->slowest = el;
  if (el > r->deadline + r->slack)
    r->late++;
  lk_http_result_free(res);
  submit_next(r);
}

static int submit_next(run *r) {
  if (r->started >= r->total)
    return 0;
  lk_http_request *req = lk_http_request_new("GET", r->url);
  if (!req)
    return -1;
  int rc = lk_http_submit(r->client, req, &r->pol, NULL, done, r);
  lk_http_request_free(req);
  if (rc != LK_OK) {
    fprintf(stderr, "chain_client: submit: %s\n", lk_strerror(rc));
    return -1;
  }
  r->started++;
  return 0;
}

static int64_t dur(const char *s) {
  int64_t v;
  char err[128];
  if (lk_duration_parse(s, &v, err, sizeof err) != 0) {
    fprintf(stderr, "chain_client: %s: %s\n", s, err);
    exit(2);
  }
  return v;
}

int main(int argc, char **argv) {
  if (argc < 9 || argc > 10) {
    fprintf(stderr, "usage: chain_client naive|linkd URL N C ATTEMPTS DEADLINE BASE MAX_DELAY "
                    "[SLACK]\n");
    return 2;
  }
  run r;
  memset(&r, 0, sizeof r);
  bool naive = strcmp(argv[1], "naive") == 0;
  if (!naive && strcmp(argv[1], "linkd") != 0) {
    fprintf(stderr, "chain_client: mode %s: naive or linkd\n", argv[1]);
    return 2;
  }
  r.url = argv[2];
  r.total = atoi(argv[3]);
  int conc = atoi(argv[4]);
  int attempts = atoi(argv[5]);
  r.deadline = dur(argv[6]);
  r.slack = argc == 10 ? dur(argv[9]) : LK_MS(20);
  if (r.total < 1 || conc < 1 || attempts < 1) {
    fprintf(stderr, "chain_client: N, C and ATTEMPTS must be >= 1\n");
    return 2;
  }
  lk_http_policy_init_default(&r.pol);
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  rc.max_attempts = attempts;
  rc.backoff.base = dur(argv[7]);
  rc.backoff.max = dur(argv[8]);
  const char *why = NULL;
  if (lk_retry_policy_init(&r.pol.retry, &rc, &why) != 0) {
    fprintf(stderr, "chain_client: retry policy: %s\n", why ? why : "?");
    return 2;
  }
  r.pol.deadline = r.deadline;
  if (r.pol.attempt_timeout > r.deadline)
    r.pol.attempt_timeout = r.deadline;
  if (naive) {
    r.pol.default_protection = false; /* no budget, no breaker */
    r.pol.honor_retried = false;
    r.pol.breaker_wait = false;
  }
  lk_http_client_config cc;
  lk_http_client_config_init_default(&cc);
  r.client = lk_http_client_new(&cc);
  if (!r.client) {
    fprintf(stderr, "chain_client: no client\n");
    return 1;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < conc; i++)
    if (submit_next(&r) != 0)
      return 1;
  while (r.done < r.total) {
    int left = lk_http_client_run(r.client, LK_MS(100));
    if (left < 0) {
      fprintf(stderr, "chain_client: run: %s\n", lk_strerror(left));
      return 1;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  char slow[32];
  printf("mode=%s calls=%d client_attempts=%ld ok=%ld status_5xx=%ld status_other=%ld "
         "no_response=%ld slowest=%s late=%ld seconds=%.2f\n",
         argv[1], r.total, r.attempts, r.ok, r.status_5xx, r.status_other, r.no_response,
         lk_duration_format(r.slowest, slow, sizeof slow), r.late, secs);
  lk_http_client_free(r.client);
  return 0;
}
