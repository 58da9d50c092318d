/* SPDX-License-Identifier: MIT */
/* libFuzzer: the core's timing arithmetic with any values a config or a peer could give it:
 * backoff delays, the retry decision (Retry-After, remaining time, attempt numbers), deadlines
 * and attempt timeouts, the limiter's reservations. Under UBSan an overflow is a crash; beyond
 * that each result is checked against its header's contract: no negative delay, no delay past
 * the cap, no retry that does not fit the time left, no wait beyond what the caller allowed. */
#include <linkd/backoff.h>
#include <linkd/deadline.h>
#include <linkd/error.h>
#include <linkd/limiter.h>
#include <linkd/rand.h>
#include <linkd/retry.h>

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

typedef struct in {
  const unsigned char *p;
  size_t n;
} in;

static uint64_t u64(in *r) {
  uint64_t v = 0;
  size_t k = r->n < 8 ? r->n : 8;
  memcpy(&v, r->p, k);
  r->p += k;
  r->n -= k;
  return v;
}

static int64_t i64(in *r) { return (int64_t)u64(r); }

static unsigned u8(in *r) {
  if (!r->n)
    return 0;
  r->n--;
  return *r->p++;
}

/* Mostly plausible values, sometimes the extremes, sometimes anything. */
static int64_t ns(in *r) {
  switch (u8(r) % 4) {
  case 0: return (int64_t)(u64(r) % UINT64_C(10000000000)); /* up to 10 s */
  case 1: return INT64_MAX - (int64_t)(u8(r));
  case 2: return INT64_MIN + (int64_t)(u8(r));
  default: return i64(r);
  }
}

static double real(in *r) {
  double d;
  uint64_t v = u64(r);
  memcpy(&d, &v, sizeof d);
  return (u8(r) & 1) ? d : (double)(v % 1000) / 100.0;
}

static void backoff(in *r, lk_rand *rng) {
  lk_backoff_config c;
  lk_backoff_config_init_default(&c);
  c.kind = (lk_backoff_kind)(u8(r) % 3);
  c.jitter = (lk_jitter_kind)(u8(r) % 5);
  c.base = ns(r);
  c.max = ns(r);
  c.multiplier = real(r);
  c.ratio = real(r);
  c.resolution = (u8(r) & 1) ? ns(r) : 1;
  if (lk_backoff_config_validate(&c, NULL) != LK_OK)
    return;
  int64_t prev = 0;
  for (int i = 0; i < 8; i++) {
    int n = (u8(r) & 1) ? (int)(u64(r) & 0x7fffffff) : i + 1;
    int64_t b = lk_backoff_base_delay(&c, n);
    int64_t d = lk_backoff_delay(&c, n, prev, rng);
    if (b < 0 || b > c.max || d < 0 || d > c.max)
      abort();
    prev = (u8(r) & 1) ? ns(r) : d;
  }
}

static void decide(in *r, lk_rand *rng) {
  lk_retry_config c;
  lk_retry_config_init_default(&c);
  c.max_attempts = (int)(u8(r) % 12) - 1;
  c.backoff.kind = (lk_backoff_kind)(u8(r) % 3);
  c.backoff.jitter = (lk_jitter_kind)(u8(r) % 5);
  c.backoff.base = ns(r);
  c.backoff.max = ns(r);
  c.retry_after_cap = ns(r);
  c.min_attempt = ns(r);
  c.honor_retry_after = u8(r) & 1;
  c.retry_on = u64(r);
  lk_retry_policy p;
  if (lk_retry_policy_init(&p, &c, NULL) != LK_OK)
    return;
  static const char *const methods[] = {"GET", "POST", "put", "DELETE", "PATCH", " "};
  lk_attempt a = {.number = (int)(u8(r) % 14) - 1,
                  .method = methods[u8(r) % 6],
                  .idempotency_key = u8(r) & 1,
                  .request_fully_sent = u8(r) & 1,
                  .failure = (lk_failure)(u8(r) % (LK_F__COUNT + 1)),
                  .retry_after = ns(r),
                  .prev_delay = ns(r)};
  int64_t remaining = ns(r);
  lk_decision d;
  int rc = lk_retry_decide(&p, &a, remaining, rng, &d);
  if (rc != LK_OK) {
    if (rc != LK_EINVAL)
      abort();
    return;
  }
  if (d.retry && (d.delay < 0 || d.delay >= remaining || d.computed < d.delay ||
                  (c.min_attempt > 0 && d.delay > remaining - c.min_attempt)))
    abort();
  if (!d.retry && d.delay != 0)
    abort();
  char buf[160];
  if (lk_decision_format(&d, buf, sizeof buf) < 0)
    abort();
}

static void deadlines(in *r) {
  int64_t now = ns(r), budget = ns(r), reserve = ns(r), cap = ns(r);
  lk_deadline dl = lk_deadline_after(now, budget);
  if (budget > 0 && dl.at < now)
    abort(); /* saturates, never wraps into the past */
  int64_t left = lk_deadline_remaining(dl, now);
  if (budget > 0 && left < 0)
    abort();
  lk_deadline child = lk_deadline_child(dl, reserve);
  if (child.at > dl.at)
    abort();
  int64_t t = lk_attempt_timeout(cap, lk_deadline_remaining(child, ns(r)));
  if (t < 0 || t > (cap > 0 ? cap : 0))
    abort();
}

static void limiter(in *r) {
  lk_limiter_config c = {real(r), (int64_t)(u64(r) % 2000) - 1};
  lk_limiter *l = NULL;
  if (lk_limiter_new(&c, &l, NULL) != LK_OK)
    return;
  int64_t now = (u8(r) & 1) ? ns(r) : 0;
  for (int i = 0; i < 16 && r->n; i++) {
    int64_t step = ns(r);
    now = (u8(r) & 1) ? now + (step > 0 && now < INT64_MAX - step ? step : 0) : step;
    int64_t max_wait = ns(r);
    int64_t w = lk_limiter_reserve(l, now, max_wait);
    if (w != LK_ERATE_LIMITED && (w < 0 || w > (max_wait > 0 ? max_wait : 0)))
      abort();
    int64_t avail = lk_limiter_available(l, now);
    if (avail < 0 || avail > c.burst)
      abort();
    if (lk_limiter_wait_time(l, now) < 0)
      abort();
  }
  lk_limiter_free(l);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  in r = {data, size};
  lk_rand_fast g;
  lk_rand_fast_seeded(&g, u64(&r));
  switch (u8(&r) % 4) {
  case 0: backoff(&r, &g.base); break;
  case 1: decide(&r, &g.base); break;
  case 2: deadlines(&r); break;
  default: limiter(&r); break;
  }
  return 0;
}
