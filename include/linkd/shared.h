/* SPDX-License-Identifier: MIT */
/* linkd/shared.h: a rate limiter and a retry budget shared by a fleet of processes through Redis
 * (liblinkd-shared, on hiredis).
 *
 * Each constructor returns an ordinary lk_limiter / lk_budget (the backends of limiter.h and
 * budget.h), so the objects go wherever the local ones go: lk_http_policy.limiter and .budget,
 * the same calls, lk_limiter_free / lk_budget_free.
 *
 *   limiter: GCRA, as lk_limiter, with its one number (the theoretical arrival time) in a Redis
 *     key and the decision taken by a server-side Lua script (EVALSHA) on Redis' own clock, so
 *     every process sharing `prefix` draws from one bucket of `rate` per second and `burst`.
 *   budget: the RATIO form of budget.h over a sliding window, with the window's per-bucket
 *     request and retry counts in one Redis hash: retries of the whole fleet <= percent % of the
 *     fleet's requests + the floor. Requests are counted locally and added to Redis in batches
 *     by the connection's thread (every 10 ms and before each retry's check), so recording a
 *     request never waits.
 *
 * Waiting and falling back. Each decision waits for Redis at most `timeout` (default 2 ms), and
 * never longer than the caller's max_wait when that is shorter (a reservation never ends past
 * the caller's deadline). When Redis does not answer in time, is down, refuses the script or
 * is not connected yet, the object decides locally instead, with limits scaled to its share of
 * the fleet: rate / fleet_size (burst / fleet_size, at least 1) for the limiter; the same
 * percent of this process's own requests and floor / fleet_size for the budget. It counts each
 * such call (lk_shared_stats.fallback), logs once when it leaves Redis and once when it comes
 * back, and stays local for `retry_interval` after a timeout before trying Redis again; while
 * disconnected it reconnects every `retry_interval` and rejoins once connected and its scripts
 * are loaded. A call whose answer arrives after the timeout is decided locally; what Redis did
 * for it (a token or a retry taken) stays counted there, so a slow Redis makes the fleet
 * stricter, never looser.
 *
 * Keys: the limiter uses `prefix` as its key; the budget uses `prefix` as a hash. Objects that
 * share a prefix share their state; use a distinct prefix per route or downstream. Keys expire
 * when idle. One Redis (not a cluster) is assumed.
 *
 * Threads: each object has one connection and one thread for it. Every call is safe from any
 * number of threads at once; a call blocks its thread for at most the wait described above.
 */
#ifndef LINKD_SHARED_H
#define LINKD_SHARED_H

#include <linkd/budget.h>
#include <linkd/common.h>
#include <linkd/limiter.h>

LK_BEGIN_DECLS

typedef struct lk_shared_config {
  const char *url;        /* "redis://HOST:PORT" or "HOST:PORT" (copied); default
                             "redis://127.0.0.1:6379" */
  const char *prefix;     /* Redis key of the shared state (copied), 1-200 bytes; required */
  int fleet_size;         /* processes sharing the object, in [1, 100000]: the local fallback
                             allows 1 / fleet_size of the limits; default 1 */
  int64_t timeout;        /* ns a decision waits for Redis, in [1 us, 10 s]; default 2 ms */
  int64_t retry_interval; /* ns between reconnects, and after a timeout before Redis is tried
                             again, in [1 ms, 60 s]; default 100 ms */
  /* Where the fallback / rejoin lines go: NULL = stderr. Called from any thread. */
  void (*log)(void *arg, const char *line);
  void *log_arg;
} lk_shared_config;

/* Sets every field to its default (prefix NULL: the caller must set it). */
LK_EXPORT void lk_shared_config_init_default(lk_shared_config *c);
/* LK_OK, or LK_ECONFIG with *why (if non-NULL) naming the bad field. */
LK_EXPORT int lk_shared_config_validate(const lk_shared_config *c, const char **why);

/* A fleet-wide limiter of lc->rate per second and lc->burst (validated as for lk_limiter_new).
 * Starts connecting at once and decides locally until connected. LK_OK, LK_ECONFIG (*why),
 * LK_EINVAL (a NULL argument), LK_ENOMEM or LK_ESYS (no thread); *out NULL on failure.
 * lk_limiter_set_config changes the fleet's rate and burst for this process's calls (each
 * process sends its own with every decision) and the local fallback alike. */
LK_EXPORT int lk_shared_limiter_new(const lk_shared_config *sc, const lk_limiter_config *lc,
                                    lk_limiter **out, const char **why);

/* A fleet-wide RATIO retry budget (bc validated as for lk_budget_new_ratio). Same results as
 * lk_shared_limiter_new. lk_budget_stats_get reports the local view (this process's requests
 * and retries in the window, against its share of the floor). */
LK_EXPORT int lk_shared_budget_new(const lk_shared_config *sc, const lk_budget_ratio_config *bc,
                                   lk_budget **out, const char **why);

typedef struct lk_shared_stats {
  uint64_t shared;   /* decisions taken by Redis */
  uint64_t fallback; /* decisions taken locally (Redis down, slow, not ready) */
  uint64_t timeouts; /* decisions that waited the whole timeout for Redis */
  uint64_t errors;   /* error replies, failed connects and lost connections */
  uint64_t episodes; /* times the object went from Redis to local limits */
  uint64_t rejoins;  /* times it came back to Redis */
  bool using_redis;  /* decisions go to Redis right now */
} lk_shared_stats;

/* Counters of a limiter / budget made here: LK_OK, or LK_EINVAL when it was not made by
 * lk_shared_limiter_new / lk_shared_budget_new (or a NULL argument). */
LK_EXPORT int lk_shared_limiter_stats(const lk_limiter *l, lk_shared_stats *out);
LK_EXPORT int lk_shared_budget_stats(const lk_budget *b, lk_shared_stats *out);

LK_END_DECLS

#endif
