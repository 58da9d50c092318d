/* SPDX-License-Identifier: MIT */
/* demo_policy.h: the four clients of `linkd demo`, all on the same lk_http layer.
 *
 *   naive  "catch everything, retry 3 times at once": every failure kind retried (404 too), every
 *          request treated as idempotent, no Idempotency-Key, no backoff (1 ns), a 1 s read
 *          timeout but no deadline, Retry-After ignored, libcurl's silent re-send allowed.
 *   fixed  a hand-written retry loop: a 1 s read timeout per attempt, transport failures, 5xx and
 *          429 retried every 100 ms up to 4 attempts, every request treated as idempotent, no
 *          key, no overall deadline, Retry-After ignored.
 *   defaults  lk_http_policy_init_default() with the demo's deadline, nothing else: what a user
 *          who configures nothing gets (the client's per-origin budget and breaker included).
 *   linkd  linkd's policy: the defaults plus an Idempotency-Key on every POST (the same on all its
 *          attempts), libraryd's 409 "key in use" classified as a refusal, no attempt started
 *          with less than 50 ms left, seeded jitter, and an adaptive concurrency limit (AIMD,
 *          latency target 100 ms) over a bulkhead whose waiters give up after 100 ms.
 *
 * Thread-safety: a demo_protect and the policies built on it belong to the demo's thread (the
 * jitter generators are not shared across threads).
 */
#ifndef LINKD_DEMO_POLICY_H
#define LINKD_DEMO_POLICY_H

#include "demo_types.h"

#include <linkd/http.h>
#include <linkd/rand.h>

/* What a client's policy points to (only linkd's uses it). */
typedef struct demo_protect {
  lk_rand_fast jitter;   /* retry delays, seeded from --seed */
  lk_bulkhead *bulkhead; /* linkd's policy: its adaptive limit's slots */
  lk_adaptive *adaptive;
} demo_protect;

/* Fills *pol for client `which` (DEMO_NAIVE, DEMO_FIXED, DEMO_DEFAULTS, DEMO_LINKD); `deadline` is the
 * demo's deadline (used by defaults and linkd). Fills *prot when needed.
 * 0, or -1 with a message in err. Free *prot with demo_protect_free() in every case. */
int demo_policy_make(int which, int64_t deadline, uint64_t seed, demo_protect *prot,
                     lk_http_policy *pol, char *err, size_t errcap);
void demo_protect_free(demo_protect *prot);

/* Sets the name, title, one-line description and implementation note of client `which`. */
void demo_client_describe(int which, demo_client_stats *st);

#endif
