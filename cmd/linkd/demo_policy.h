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
 *   linkd  linkd's policy: one deadline for the whole call (the demo's deadline), 300 ms per
 *          attempt, phase-aware retry rules (a POST is retried after it may have been processed
 *          only because it carries an Idempotency-Key), exponential backoff with seeded
 *          symmetric jitter, Retry-After honoured, a retry budget and a circuit breaker shared by
 *          all its calls.
 *
 * Thread-safety: a demo_protect and the policies built on it belong to the demo's thread (the
 * jitter generators are not shared across threads).
 */
#ifndef LINKD_DEMO_POLICY_H
#define LINKD_DEMO_POLICY_H

#include "demo_types.h"

#include <linkd/http.h>
#include <linkd/rand.h>

/* The shared protection objects of one client (only linkd's uses them). */
typedef struct demo_protect {
  lk_budget *budget;
  lk_breaker *breaker;
  lk_rand_fast jitter; /* retry delays, seeded from --seed */
  lk_rand_fast breaker_rng;
} demo_protect;

/* Fills *pol for client `which` (DEMO_NAIVE, DEMO_FIXED, DEMO_DEFAULTS, DEMO_LINKD); `deadline` is the
 * demo's deadline (used by defaults and linkd). Creates the budget and breaker in *prot when needed.
 * 0, or -1 with a message in err. Free *prot with demo_protect_free() in every case. */
int demo_policy_make(int which, int64_t deadline, uint64_t seed, demo_protect *prot,
                     lk_http_policy *pol, char *err, size_t errcap);
void demo_protect_free(demo_protect *prot);

/* Sets the name, title, one-line description and implementation note of client `which`. */
void demo_client_describe(int which, demo_client_stats *st);

#endif
