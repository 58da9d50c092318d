/* SPDX-License-Identifier: MIT */
/* The seed's printed example (000: RetryPolicy with L64X128MixRandom(42), maxAttempts=4,
 * base=200ms, max=2000ms, jitter 0.5), reproduced through the public API. Shared by the golden
 * test and `linkd seed-example`, so the two can never drift apart. */
#include <linkd/deadline.h>
#include <linkd/error.h>
#include <linkd/retry.h>
#include <linkd/seed_example.h>

#include <stdio.h>

static int line(char *buf, size_t cap, const lk_retry_policy *p, lk_rand *rng, const char *label,
                int number, const char *method, bool key, bool sent, lk_failure f,
                int64_t remaining_ms) {
  lk_attempt a = {number, method, key, sent, f, -1, 0};
  lk_decision d;
  int rc = lk_retry_decide(p, &a, LK_MS(remaining_ms), rng, &d);
  if (rc != LK_OK)
    return rc;
  char reason[128];
  lk_decision_format(&d, reason, sizeof reason);
  return snprintf(buf, cap, "%s -> retry=%s delay=%lld reason=%s\n", label,
                  d.retry ? "true" : "false", (long long)(d.delay / LK_NS_PER_MS), reason);
}

int lk_seed_example(char *buf, size_t cap) {
  if (!buf && cap > 0)
    return LK_EINVAL;
  lk_retry_config c;
  lk_retry_config_init_default(&c);
  c.max_attempts = 4;
  c.backoff.base = LK_MS(200);
  c.backoff.max = LK_MS(2000);
  c.backoff.ratio = 0.5;
  lk_retry_policy p;
  int rc = lk_retry_policy_init(&p, &c, NULL);
  if (rc != LK_OK)
    return rc;
  lk_rand_l64x128 rng;
  lk_rand_l64x128_init(&rng, 42);
  /* The seed's remaining budget where it is not printed: Long.MAX_VALUE-like "plenty". */
  const int64_t plenty = INT64_MAX / LK_NS_PER_MS;
  size_t off = 0;
  struct {
    const char *label;
    int n;
    const char *m;
    bool key, sent;
    lk_failure f;
    int64_t rem;
  } rows[] = {
      {"GET connect failed #1", 1, "GET", false, false, LK_F_CONNECT_FAILED, plenty},
      {"POST read timeout #2 no key", 2, "POST", false, true, LK_F_READ_TIMEOUT, plenty},
      {"POST read timeout #2 with key", 2, "POST", true, true, LK_F_READ_TIMEOUT, plenty},
      {"GET 500 #4", 4, "GET", false, true, LK_F_SERVER_5XX, plenty},
      {"GET 429 #2 remaining 100", 2, "GET", false, true, LK_F_TOO_MANY_REQUESTS, 100},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    /* Once the text no longer fits, keep measuring with (NULL, 0): buf + off past the end of
     * buf (or off added to a NULL buf) is undefined even when nothing is written there. */
    int n =
        line(off < cap ? buf + off : NULL, off < cap ? cap - off : 0, &p, &rng.base, rows[i].label,
             rows[i].n, rows[i].m, rows[i].key, rows[i].sent, rows[i].f, rows[i].rem);
    if (n < 0)
      return n;
    off += (size_t)n;
  }
  static const int64_t timeouts[][2] = {{800, 300}, {800, 2000}};
  for (size_t i = 0; i < 2; i++) {
    int64_t t = lk_attempt_timeout(LK_MS(timeouts[i][0]), LK_MS(timeouts[i][1]));
    int n = snprintf(off < cap ? buf + off : NULL, off < cap ? cap - off : 0,
                     "attemptTimeout(%lld, %lld) = %lld\n", (long long)timeouts[i][0],
                     (long long)timeouts[i][1], (long long)(t / LK_NS_PER_MS));
    off += (size_t)n;
  }
  return off < cap ? (int)off : LK_ETOOBIG;
}
