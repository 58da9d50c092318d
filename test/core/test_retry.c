/* SPDX-License-Identifier: MIT */
/* The retry decision: equal to the seed's RetryPolicy.decide for every input, configurable beyond
 * it, rejecting bad configuration, allocation-free. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <linkd/linkd.h>

#include "testutil.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

/* --- a transliteration of the seed's Java RetryPolicy, kept deliberately literal ------------ */
typedef struct {
  int max_attempts;
  int64_t base, max; /* ms */
  double jitter;
  lk_rand *random;
} seed_policy;

typedef struct {
  bool retry;
  int64_t delay_ms;
  char reason[96];
} seed_decision;

static bool seed_is_idempotent(const char *m) {
  char up[16] = {0};
  for (size_t i = 0; m[i] && i < sizeof up - 1; i++)
    up[i] = (char)toupper((unsigned char)m[i]);
  return strlen(m) < sizeof up &&
         (!strcmp(up, "GET") || !strcmp(up, "HEAD") || !strcmp(up, "PUT") ||
          !strcmp(up, "DELETE") || !strcmp(up, "OPTIONS") || !strcmp(up, "TRACE"));
}

static bool seed_retryable(lk_failure f, const char *method, bool key, bool sent) {
  switch (f) {
  case LK_F_CONNECT_FAILED:
  case LK_F_RESET_BEFORE_SEND: return true;
  case LK_F_READ_TIMEOUT:
  case LK_F_RESET_AFTER_SEND:
  case LK_F_SERVER_5XX: return !sent || key || seed_is_idempotent(method);
  case LK_F_TOO_MANY_REQUESTS: return true;
  default: return false;
  }
}

static int64_t seed_backoff(seed_policy *p, int n) {
  int64_t exponential = p->base;
  for (int i = 1; i < n && exponential < p->max; i++)
    exponential = exponential > p->max / 2 ? p->max : exponential * 2;
  int64_t spread = (int64_t)((double)exponential * p->jitter);
  int64_t jittered = exponential - spread + (int64_t)lk_rand_below(p->random, (uint64_t)(2 * spread + 1));
  int64_t v = jittered > 0 ? jittered : 0;
  return v < p->max ? v : p->max;
}

static seed_decision seed_decide(seed_policy *p, int n, const char *method, bool key, bool sent,
                                 lk_failure f, int64_t remaining) {
  seed_decision d = {false, 0, ""};
  if (f == LK_F_DEADLINE_EXCEEDED) {
    strcpy(d.reason, "deadline exceeded");
    return d;
  }
  if (!seed_retryable(f, method, key, sent)) {
    snprintf(d.reason, sizeof d.reason, "not retryable: %s", lk_failure_name(f));
    return d;
  }
  if (n >= p->max_attempts) {
    strcpy(d.reason, "attempts exhausted");
    return d;
  }
  int64_t delay = seed_backoff(p, n);
  if (delay >= remaining) {
    snprintf(d.reason, sizeof d.reason, "delay %lldms >= remaining %lldms", (long long)delay,
             (long long)remaining);
    return d;
  }
  d.retry = true;
  d.delay_ms = delay;
  snprintf(d.reason, sizeof d.reason, "retry %s", lk_failure_name(f));
  return d;
}

static void init_policy(lk_retry_policy *p, int max_attempts, int64_t base_ms, int64_t max_ms,
                        double jitter) {
  lk_retry_config c;
  lk_retry_config_init_default(&c);
  c.max_attempts = max_attempts;
  c.backoff.base = LK_MS(base_ms);
  c.backoff.max = LK_MS(max_ms);
  c.backoff.ratio = jitter;
  assert_int_equal(lk_retry_policy_init(p, &c, NULL), LK_OK);
}

/* Every seed kind x method spelling x key x sent x attempt number x remaining, over several
 * configurations: the same decision, delay, reason text, and the same random draws. */
static void default_equals_seed_for_every_input(void **state) {
  (void)state;
  static const char *methods[] = {"GET", "get", "Head", "PUT", "delete", "OPTIONS", "trace",
                                  "POST", "post", "PATCH", "CONNECT", "GETX", "GE"};
  static const lk_failure kinds[] = {LK_F_CONNECT_FAILED, LK_F_RESET_BEFORE_SEND,
                                     LK_F_READ_TIMEOUT,   LK_F_RESET_AFTER_SEND,
                                     LK_F_SERVER_5XX,     LK_F_TOO_MANY_REQUESTS,
                                     LK_F_CLIENT_4XX,     LK_F_DEADLINE_EXCEEDED};
  static const int64_t remainings[] = {-5, 0, 1, 99, 100, 250, 582, 1000, 2001, 1000000};
  static const struct {
    int max_attempts;
    int64_t base, max;
    double jitter;
  } cfgs[] = {{4, 200, 2000, 0.5}, {1, 1, 1, 0.0}, {6, 100, 5000, 1.0}, {10, 7, 1000, 0.33}};
  long compared = 0;
  for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
    lk_retry_policy p;
    init_policy(&p, cfgs[ci].max_attempts, cfgs[ci].base, cfgs[ci].max, cfgs[ci].jitter);
    lk_rand_l64x128 ours, theirs;
    lk_rand_l64x128_init(&ours, 7 + (int64_t)ci);
    lk_rand_l64x128_init(&theirs, 7 + (int64_t)ci);
    seed_policy sp = {cfgs[ci].max_attempts, cfgs[ci].base, cfgs[ci].max, cfgs[ci].jitter,
                      &theirs.base};
    for (size_t mi = 0; mi < sizeof methods / sizeof methods[0]; mi++)
      for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++)
        for (int key = 0; key < 2; key++)
          for (int sent = 0; sent < 2; sent++)
            for (int n = 1; n <= 12; n++)
              for (size_t ri = 0; ri < sizeof remainings / sizeof remainings[0]; ri++) {
                lk_attempt a = {n, methods[mi], key, sent, kinds[ki], -1, 0};
                lk_decision d;
                assert_int_equal(
                    lk_retry_decide(&p, &a, LK_MS(remainings[ri]), &ours.base, &d), LK_OK);
                seed_decision s = seed_decide(&sp, n, methods[mi], key, sent, kinds[ki],
                                              remainings[ri]);
                char reason[128];
                lk_decision_format(&d, reason, sizeof reason);
                assert_int_equal(d.retry, s.retry);
                assert_int_equal(d.delay, LK_MS(s.delay_ms));
                assert_string_equal(reason, s.reason);
                /* Draw for draw: both generators must still be in the same state. */
                assert_true(ours.s == theirs.s && ours.x0 == theirs.x0);
                compared++;
              }
  }
  assert_true(compared > 50000);
}

static lk_decision decide(const lk_retry_policy *p, int n, const char *m, bool key, bool sent,
                          lk_failure f, int64_t retry_after, int64_t remaining) {
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, 1);
  lk_attempt a = {n, m, key, sent, f, retry_after, 0};
  lk_decision d;
  assert_int_equal(lk_retry_decide(p, &a, remaining, &r.base, &d), LK_OK);
  return d;
}

/* The finer kinds follow their class. */
static void finer_kinds_follow_their_class(void **state) {
  (void)state;
  lk_retry_policy p;
  init_policy(&p, 4, 200, 2000, 0.5);
  const int64_t plenty = LK_SEC(100);
  /* Never sent: POST without a key may retry. */
  lk_failure not_sent[] = {LK_F_DNS_TIMEOUT, LK_F_CONNECT_REFUSED, LK_F_CONNECT_TIMEOUT,
                           LK_F_TLS_TIMEOUT, LK_F_WRITE_TIMEOUT,   LK_F_POOL_TIMEOUT};
  for (size_t i = 0; i < sizeof not_sent / sizeof not_sent[0]; i++)
    assert_true(decide(&p, 1, "POST", false, false, not_sent[i], -1, plenty).retry);
  /* No such host, TLS protocol/certificate failure: not retried by default, even for GET... */
  lk_failure permanent_not_sent[] = {LK_F_DNS_FAILED, LK_F_TLS_FAILED};
  for (size_t i = 0; i < 2; i++) {
    lk_decision d = decide(&p, 1, "GET", false, false, permanent_not_sent[i], -1, plenty);
    assert_false(d.retry);
    assert_int_equal(d.reason, LK_REASON_NOT_RETRYABLE);
    /* ...but opted in, they are not-sent kinds: any method */
    lk_retry_config oc = p.cfg;
    oc.retry_on |= LK_FAILURE_BIT(permanent_not_sent[i]);
    lk_retry_policy op;
    assert_int_equal(lk_retry_policy_init(&op, &oc, NULL), LK_OK);
    assert_true(decide(&op, 1, "POST", false, false, permanent_not_sent[i], -1, plenty).retry);
  }
  /* Maybe processed: POST without a key stops, with a key retries, GET retries. */
  lk_failure maybe[] = {LK_F_FIRST_BYTE_TIMEOUT, LK_F_IDLE_TIMEOUT, LK_F_EMPTY_RESPONSE,
                        LK_F_JUNK_RESPONSE,      LK_F_PARTIAL_BODY, LK_F_HTTP_500,
                        LK_F_HTTP_502,           LK_F_HTTP_503,     LK_F_HTTP_504};
  for (size_t i = 0; i < sizeof maybe / sizeof maybe[0]; i++) {
    lk_decision d = decide(&p, 1, "POST", false, true, maybe[i], -1, plenty);
    assert_false(d.retry);
    assert_int_equal(d.reason, LK_REASON_NOT_RETRYABLE);
    assert_true(decide(&p, 1, "POST", true, true, maybe[i], -1, plenty).retry);
    assert_true(decide(&p, 1, "GET", false, true, maybe[i], -1, plenty).retry);
  }
  /* Refused: 408 and 425 retry for any method, like 429. */
  assert_true(decide(&p, 1, "POST", false, true, LK_F_HTTP_408, -1, plenty).retry);
  assert_true(decide(&p, 1, "PATCH", false, true, LK_F_HTTP_425, -1, plenty).retry);
  assert_true(decide(&p, 1, "POST", true, true, LK_F_KEY_IN_USE, -1, plenty).retry);
  /* ... while a plain 409 is the resource's verdict */
  assert_false(decide(&p, 1, "POST", true, true, LK_F_CLIENT_4XX, -1, plenty).retry);
  /* Terminal: never, whatever retry_on says. */
  lk_retry_config c = p.cfg;
  c.retry_on = UINT64_MAX;
  lk_retry_policy all;
  assert_int_equal(lk_retry_policy_init(&all, &c, NULL), LK_OK);
  lk_failure terminal[] = {LK_F_CANCELLED, LK_F_BREAKER_OPEN, LK_F_BUDGET_EXHAUSTED,
                           LK_F_RATE_LIMITED, LK_F_BULKHEAD_FULL};
  for (size_t i = 0; i < sizeof terminal / sizeof terminal[0]; i++)
    assert_false(decide(&all, 1, "GET", false, false, terminal[i], -1, plenty).retry);
  /* PERMANENT kinds opted in follow the maybe-processed rule. */
  assert_true(decide(&all, 1, "GET", false, true, LK_F_CLIENT_4XX, -1, plenty).retry);
  assert_false(decide(&all, 1, "POST", false, true, LK_F_CLIENT_4XX, -1, plenty).retry);
  /* Opting out: 408 removed from retry_on. */
  c = p.cfg;
  c.retry_on &= ~LK_FAILURE_BIT(LK_F_HTTP_408);
  lk_retry_policy no408;
  assert_int_equal(lk_retry_policy_init(&no408, &c, NULL), LK_OK);
  assert_false(decide(&no408, 1, "GET", false, true, LK_F_HTTP_408, -1, plenty).retry);
}

static void retry_after_is_honoured_and_capped(void **state) {
  (void)state;
  lk_retry_config c;
  lk_retry_config_init_default(&c);
  c.backoff.jitter = LK_JITTER_NONE;
  c.retry_after_cap = LK_SEC(5);
  lk_retry_policy p;
  assert_int_equal(lk_retry_policy_init(&p, &c, NULL), LK_OK);
  /* Retry-After longer than the backoff wins. */
  lk_decision d = decide(&p, 1, "GET", false, true, LK_F_TOO_MANY_REQUESTS, LK_SEC(2), LK_SEC(10));
  assert_true(d.retry);
  assert_int_equal(d.delay, LK_SEC(2));
  assert_true(d.from_retry_after);
  /* Shorter: the backoff (200 ms) wins. */
  d = decide(&p, 1, "GET", false, true, LK_F_HTTP_503, LK_MS(50), LK_SEC(10));
  assert_int_equal(d.delay, LK_MS(200));
  assert_false(d.from_retry_after);
  /* Hostile: capped at 5 s. */
  d = decide(&p, 1, "GET", false, true, LK_F_HTTP_503, INT64_MAX, LK_SEC(10));
  assert_true(d.retry);
  assert_int_equal(d.delay, LK_SEC(5));
  /* Does not fit the remaining budget: stop with a Retry-After reason. */
  d = decide(&p, 1, "GET", false, true, LK_F_TOO_MANY_REQUESTS, LK_SEC(3), LK_SEC(1));
  assert_false(d.retry);
  assert_int_equal(d.reason, LK_REASON_DELAY_TOO_LONG);
  char buf[96];
  lk_decision_format(&d, buf, sizeof buf);
  assert_string_equal(buf, "Retry-After 3000ms >= remaining 1000ms");
  /* Not honoured when disabled. */
  c.honor_retry_after = false;
  assert_int_equal(lk_retry_policy_init(&p, &c, NULL), LK_OK);
  d = decide(&p, 1, "GET", false, true, LK_F_TOO_MANY_REQUESTS, LK_SEC(3), LK_SEC(10));
  assert_int_equal(d.delay, LK_MS(200));
}

static void min_attempt_time_must_fit(void **state) {
  (void)state;
  lk_retry_config c;
  lk_retry_config_init_default(&c);
  c.backoff.jitter = LK_JITTER_NONE;
  c.min_attempt = LK_MS(100);
  lk_retry_policy p;
  assert_int_equal(lk_retry_policy_init(&p, &c, NULL), LK_OK);
  assert_true(decide(&p, 1, "GET", false, false, LK_F_CONNECT_FAILED, -1, LK_MS(300)).retry);
  lk_decision d = decide(&p, 1, "GET", false, false, LK_F_CONNECT_FAILED, -1, LK_MS(299));
  assert_false(d.retry);
  assert_int_equal(d.reason, LK_REASON_NO_TIME_FOR_ATTEMPT);
  char buf[96];
  lk_decision_format(&d, buf, sizeof buf);
  assert_string_equal(buf, "delay 200ms + attempt 100ms > remaining 299ms");
}

static void bad_config_is_rejected(void **state) {
  (void)state;
  lk_retry_config c;
  lk_retry_policy p;
  const char *why;
#define REJECT(stmt, needle)                                                                       \
  do {                                                                                             \
    lk_retry_config_init_default(&c);                                                             \
    stmt;                                                                                          \
    why = NULL;                                                                                    \
    assert_int_equal(lk_retry_policy_init(&p, &c, &why), LK_ECONFIG);                            \
    assert_non_null(why);                                                                          \
    assert_non_null(strstr(why, needle));                                                          \
  } while (0)
  REJECT(c.max_attempts = 0, "max attempts");
  REJECT(c.max_attempts = -3, "max attempts");
  REJECT(c.backoff.base = 0, "base");
  REJECT(c.backoff.base = -1, "base");
  REJECT(c.backoff.max = LK_MS(100), "max");
  REJECT(c.backoff.ratio = -0.1, "ratio");
  REJECT(c.backoff.ratio = 1.01, "ratio");
  REJECT(c.backoff.ratio = NAN, "ratio");
  REJECT(c.backoff.multiplier = 0.5, "multiplier");
  REJECT(c.backoff.multiplier = INFINITY, "multiplier");
  REJECT(c.backoff.resolution = 0, "resolution");
  REJECT(c.backoff.kind = (lk_backoff_kind)7, "kind");
  REJECT(c.backoff.jitter = (lk_jitter_kind)9, "jitter");
  REJECT(c.retry_after_cap = -1, "Retry-After");
  REJECT(c.min_attempt = -1, "minimum attempt");
#undef REJECT
  assert_int_equal(lk_retry_policy_init(NULL, &c, &why), LK_ECONFIG);
  assert_int_equal(lk_retry_policy_init(&p, NULL, &why), LK_ECONFIG);
  /* Boundaries that are valid: ratio 0 and 1, base == max, one attempt. */
  lk_retry_config_init_default(&c);
  c.backoff.ratio = 0;
  c.backoff.max = c.backoff.base;
  c.max_attempts = 1;
  assert_int_equal(lk_retry_policy_init(&p, &c, &why), LK_OK);
  assert_null(why);
}

static void bad_attempt_is_rejected(void **state) {
  (void)state;
  lk_retry_policy p;
  init_policy(&p, 4, 200, 2000, 0.5);
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, 3);
  lk_decision d;
  lk_attempt a = {0, "GET", false, false, LK_F_CONNECT_FAILED, -1, 0};
  assert_int_equal(lk_retry_decide(&p, &a, LK_SEC(1), &r.base, &d), LK_EINVAL);
  a.number = 1;
  a.method = NULL;
  assert_int_equal(lk_retry_decide(&p, &a, LK_SEC(1), &r.base, &d), LK_EINVAL);
  a.method = " \t";
  assert_int_equal(lk_retry_decide(&p, &a, LK_SEC(1), &r.base, &d), LK_EINVAL);
  a.method = "";
  assert_int_equal(lk_retry_decide(&p, &a, LK_SEC(1), &r.base, &d), LK_EINVAL);
  a.method = "GET";
  a.failure = LK_F__COUNT;
  assert_int_equal(lk_retry_decide(&p, &a, LK_SEC(1), &r.base, &d), LK_EINVAL);
  a.failure = LK_F_CONNECT_FAILED;
  assert_int_equal(lk_retry_decide(&p, &a, LK_SEC(1), NULL, &d), LK_EINVAL);
  assert_int_equal(lk_retry_decide(&p, &a, LK_SEC(1), &r.base, NULL), LK_EINVAL);
  assert_int_equal(lk_retry_decide(&p, &a, LK_SEC(1), &r.base, &d), LK_OK);
}

/* Every decision path allocates nothing. */
static void decide_allocates_nothing(void **state) {
  (void)state;
#if LK_TEST_ALLOC_COUNTING
  lk_retry_policy p;
  init_policy(&p, 4, 200, 2000, 0.5);
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, 3);
  lk_decision d;
  lk_attempt attempts[] = {
      {1, "GET", false, false, LK_F_CONNECT_FAILED, -1, 0},       /* retry */
      {1, "POST", false, true, LK_F_READ_TIMEOUT, -1, 0},         /* not retryable */
      {4, "GET", false, true, LK_F_SERVER_5XX, -1, 0},            /* attempts */
      {1, "GET", false, true, LK_F_DEADLINE_EXCEEDED, -1, 0},     /* deadline */
      {2, "GET", false, true, LK_F_TOO_MANY_REQUESTS, LK_SEC(9), 0}, /* delay too long */
  };
  lk_test_alloc_count_start();
  for (int rep = 0; rep < 1000; rep++)
    for (size_t i = 0; i < sizeof attempts / sizeof attempts[0]; i++)
      lk_retry_decide(&p, &attempts[i], LK_SEC(5), &r.base, &d);
  uint64_t allocs = lk_test_alloc_count_stop();
  assert_int_equal(allocs, 0);
  /* And the counter works: one malloc is seen. */
  lk_test_alloc_count_start();
  void *volatile x = malloc(16);
  free(x);
  assert_int_equal(lk_test_alloc_count_stop(), 1);
#else
  skip();
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(default_equals_seed_for_every_input),
      cmocka_unit_test(finer_kinds_follow_their_class),
      cmocka_unit_test(retry_after_is_honoured_and_capped),
      cmocka_unit_test(min_attempt_time_must_fit),
      cmocka_unit_test(bad_config_is_rejected),
      cmocka_unit_test(bad_attempt_is_rejected),
      cmocka_unit_test(decide_allocates_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
