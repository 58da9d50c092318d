/* SPDX-License-Identifier: MIT */
/* demo_policy.c: the naive, fixed-interval and linkd policies of `linkd demo`. */
#include "demo_policy.h"

#include <stdio.h>
#include <string.h>

/* libraryd answers 409 "idempotency_key_in_use" (with Retry-After) while an earlier attempt with
 * the same key is still executing: the server refused without processing, like a 429, so linkd's
 * policy classifies it as one and waits as told. Any other 409 (out of stock) stays final. */
static lk_failure classify_key_in_use(void *ctx, const lk_http_response *resp, lk_failure kind) {
  (void)ctx;
  if (resp->status == 409 && resp->body && strstr(resp->body, "idempotency_key_in_use"))
    return LK_F_TOO_MANY_REQUESTS;
  return kind;
}

static int retry_init(lk_http_policy *pol, const lk_retry_config *rc, char *err, size_t cap) {
  const char *why = NULL;
  if (lk_retry_policy_init(&pol->retry, rc, &why) != LK_OK) {
    snprintf(err, cap, "retry policy: %s", why ? why : "invalid");
    return -1;
  }
  return 0;
}

static int naive(lk_http_policy *pol, char *err, size_t cap) {
  pol->deadline = LK_SEC(3600); /* "no deadline" */
  pol->attempt_timeout = LK_SEC(1); /* the read timeout an HTTP client is usually given */
  pol->connect_timeout = 0;
  pol->assume_idempotent = true;
  pol->idem_mode = LK_IDEM_NONE;
  pol->resend_guard = LK_RESEND_ALLOW;
  pol->send_deadline = false;
  pol->send_attempt = false;
  pol->default_protection = false; /* no retry budget, no breaker */
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  rc.max_attempts = 4; /* the first + 3 retries */
  /* catch (Exception e): every kind (terminal ones never retry whatever the set says) */
  rc.retry_on = 0;
  for (int k = LK_F_NONE + 1; k < LK_F__COUNT; k++)
    rc.retry_on |= LK_FAILURE_BIT(k);
  rc.honor_retry_after = false;
  rc.backoff.kind = LK_BACKOFF_FIXED;
  rc.backoff.jitter = LK_JITTER_NONE;
  rc.backoff.resolution = 1; /* the smallest delay the layer accepts: 1 ns, "at once" */
  rc.backoff.base = 1;
  rc.backoff.max = 1;
  return retry_init(pol, &rc, err, cap);
}

static int fixed(lk_http_policy *pol, char *err, size_t cap) {
  pol->deadline = LK_SEC(3600); /* no overall deadline: only a per-attempt read timeout */
  pol->attempt_timeout = LK_SEC(1);
  pol->connect_timeout = LK_SEC(1);
  pol->assume_idempotent = true;
  pol->idem_mode = LK_IDEM_NONE;
  pol->resend_guard = LK_RESEND_ALLOW;
  pol->send_deadline = false;
  pol->send_attempt = false;
  pol->default_protection = false;
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  rc.max_attempts = 4;
  rc.honor_retry_after = false;
  rc.backoff.kind = LK_BACKOFF_FIXED;
  rc.backoff.jitter = LK_JITTER_NONE;
  rc.backoff.base = LK_MS(100);
  rc.backoff.max = LK_MS(100);
  return retry_init(pol, &rc, err, cap);
}

/* linkd's policy: the library's defaults (800 ms per attempt, 4 attempts, exponential backoff
 * 200 ms..2 s with symmetric jitter, the client's per-origin retry budget and breaker, waiting
 * for the breaker's probe) plus what only the application knows: its writes carry an
 * Idempotency-Key, and libraryd's 409 "key in use" is a refusal to wait on. No attempt starts
 * with less than 50 ms left. Earlier versions tuned a budget, a breaker and a 300 ms attempt
 * timeout for the faults scenario; they lost to these defaults in the storm (docs/demo.md). */
static int linkd(lk_http_policy *pol, int64_t deadline, uint64_t seed, demo_protect *prot,
                 char *err, size_t cap) {
  pol->deadline = deadline;
  pol->idem_mode = LK_IDEM_AUTO; /* one key per POST, the same on every attempt */
  pol->classify = classify_key_in_use;
  lk_rand_fast_seeded(&prot->jitter, seed ^ UINT64_C(0x6c696e6b64));
  pol->rng = &prot->jitter.base; /* the run is reproducible from --seed */
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  rc.min_attempt = LK_MS(50); /* never start an attempt with almost nothing left */
  /* An adaptive concurrency limit (AIMD) over a bulkhead: an attempt slower than 100 ms (ten
   * times libraryd's healthy service time) means libraryd is queueing, so the limit shrinks;
   * a call that finds no slot within 100 ms fails at once instead of joining that queue. In a
   * slowdown this sheds the calls libraryd cannot serve in time and keeps the queue, and so
   * every success's latency, short; without it the queue kept alive by the deadline took
   * seconds to drain after the slowdown (docs/demo.md). */
  lk_bulkhead_config bc;
  lk_bulkhead_config_init_default(&bc);
  bc.max_concurrent = 64;
  bc.max_queue = 64;
  lk_adaptive_config ac;
  lk_adaptive_config_init_default(&ac);
  ac.initial_limit = 16;
  ac.min_limit = 2;
  ac.max_limit = 64;
  ac.latency_target = LK_MS(100);
  const char *why = NULL;
  if (lk_bulkhead_new(&bc, &prot->bulkhead, &why) != LK_OK ||
      lk_adaptive_new(&ac, &prot->adaptive, &why) != LK_OK ||
      lk_adaptive_attach(prot->adaptive, prot->bulkhead) != LK_OK) {
    snprintf(err, cap, "adaptive limit: %s", why ? why : "cannot attach");
    return -1;
  }
  pol->bulkhead = prot->bulkhead;
  pol->adaptive = prot->adaptive;
  pol->pool_timeout = LK_MS(100);
  return retry_init(pol, &rc, err, cap);
}

/* What a user who sets nothing but the deadline gets: the per-origin retry budget and breaker
 * of the client come with the defaults. */
static int defaults(lk_http_policy *pol, int64_t deadline) {
  pol->deadline = deadline;
  return 0;
}

int demo_policy_make(int which, int64_t deadline, uint64_t seed, demo_protect *prot,
                     lk_http_policy *pol, char *err, size_t errcap) {
  memset(prot, 0, sizeof *prot);
  lk_http_policy_init_default(pol);
  int rc;
  switch (which) {
  case DEMO_NAIVE: rc = naive(pol, err, errcap); break;
  case DEMO_FIXED: rc = fixed(pol, err, errcap); break;
  case DEMO_DEFAULTS: rc = defaults(pol, deadline); break;
  case DEMO_LINKD: rc = linkd(pol, deadline, seed, prot, err, errcap); break;
  default: snprintf(err, errcap, "unknown client %d", which); return -1;
  }
  const char *why = NULL;
  if (rc == 0 && lk_http_policy_validate(pol, &why) != LK_OK) {
    snprintf(err, errcap, "policy: %s", why ? why : "invalid");
    rc = -1;
  }
  return rc;
}

void demo_protect_free(demo_protect *prot) {
  lk_adaptive_free(prot->adaptive);
  lk_bulkhead_free(prot->bulkhead);
  memset(prot, 0, sizeof *prot); /* the generator lives in the struct */
}

void demo_client_describe(int which, demo_client_stats *st) {
  static const struct {
    const char *name, *title, *how, *impl;
  } d[DEMO_NCLIENTS] = {
      {"naive", "naive",
       "catch everything (404 too), retry 3 times at once; 1 s read timeout; no keys, no "
       "deadline",
       "lk_http with retry_on=all, assume_idempotent, backoff fixed 1ns, idempotency none, "
       "attempt timeout 1s, deadline 1h, Retry-After ignored, libcurl re-send allowed, no "
       "budget or breaker"},
      {"fixed", "fixed interval",
       "retry 5xx/429/transport failures every 100 ms, 4 attempts; 1 s read timeout; no keys, "
       "no overall deadline",
       "lk_http with assume_idempotent, backoff fixed 100ms without jitter, attempt timeout "
       "1s, deadline 1h, idempotency none, Retry-After ignored, libcurl re-send allowed, no "
       "budget or breaker"},
      {"defaults", "linkd defaults",
       "linkd's library defaults, only the deadline set: 800 ms per attempt, 4 attempts, "
       "jittered backoff, retry budget and breaker per origin",
       "lk_http_policy_init_default() with deadline 2s: attempt timeout 800ms, connect 500ms, "
       "exponential 200ms..2s symmetric jitter, no Idempotency-Key (so a POST is not retried "
       "once it may have been processed), the client's per-origin ratio budget 20%/10s and "
       "breaker 50% of 50, waiting for the breaker's probe within the deadline"},
      {"linkd", "linkd policy",
       "linkd's defaults plus Idempotency-Keys on writes: deadline, 800 ms per attempt, "
       "phase-aware retries, jittered backoff, Retry-After, retry budget and breaker per origin, "
       "adaptive concurrency limit",
       "lk_http_policy_init_default() with deadline 2s, idempotency auto (a POST is retried "
       "safely after it may have been processed), the 409 key-in-use answer classified as a "
       "refusal, min_attempt 50ms, seeded jitter; the client's per-origin budget and breaker; "
       "an AIMD concurrency limit (2..64, latency target 100ms) over a bulkhead, 100ms to "
       "wait for a slot"},
  };
  if (which < 0 || which >= DEMO_NCLIENTS)
    return;
  st->name = d[which].name;
  st->title = d[which].title;
  st->how = d[which].how;
  st->impl = d[which].impl;
}
