/* SPDX-License-Identifier: MIT */
/* linkd/limiter.h: a rate limiter (token bucket with burst, as GCRA).
 *
 * The Generic Cell Rate Algorithm keeps one number, the theoretical arrival time (TAT): the instant
 * at which the bucket would be full again. A request at `now` takes one token when
 *   max(TAT, now) + interval <= now + burst * interval          (interval = 1 s / rate)
 * and then moves TAT to max(TAT, now) + interval. This is exactly a token bucket holding at most
 * `burst` tokens refilled at `rate` per second, so over any span of t seconds at most
 * rate * t + burst requests are admitted. TAT is one C11 atomic updated by compare-and-swap, so
 * acquiring is lock-free; a refused request touches nothing.
 *
 * The interval is a whole number of nanoseconds rounded up (1e9 / rate), so the effective rate
 * is never above the configured one (rates up to 1e9 per second; at high rates the rounding
 * lowers the effective rate, e.g. 3e8/s runs as 2.5e8/s).
 *
 * Time is a parameter: `now` is int64_t ns on CLOCK_MONOTONIC (or any monotonic time line, e.g. a
 * fake clock). Calls with a `now` older than what another thread already used are fine: they are
 * judged against the later state and can only be refused more, never admitted beyond the bound.
 * So a clock that steps back by d makes the limiter refuse (and lk_limiter_wait_time() report
 * up to d more) until it is back where it was: spent tokens are instants on the time line, and a
 * TAT far ahead cannot be told from tokens legitimately reserved that far ahead. Waits are never
 * negative, and lk_limiter_reserve() never waits past max_wait whatever the clock does.
 * Every function taking an lk_limiter * needs a valid one, except lk_limiter_free,
 * lk_limiter_set_config (LK_EINVAL) and lk_limiter_backend_arg.
 *
 * Thread-safety: an lk_limiter is safe to use from any number of threads at once, including
 * lk_limiter_set_config() while others acquire; only lk_limiter_free() needs exclusive use.
 */
#ifndef LINKD_LIMITER_H
#define LINKD_LIMITER_H

#include <linkd/common.h>
#include <linkd/deadline.h>

LK_BEGIN_DECLS

#define LK_LIMITER_RATE_MIN 1e-9 /* per second: one token per ~31.7 years */
#define LK_LIMITER_RATE_MAX 1e9  /* per second: one token per ns */

typedef struct lk_limiter_config {
  double rate;   /* tokens per second, finite, within [LK_LIMITER_RATE_MIN, _MAX]; default 100 */
  int64_t burst; /* tokens an idle limiter hands out at once, >= 1; default 10 */
} lk_limiter_config;

typedef struct lk_limiter lk_limiter; /* opaque */

/* Sets every field to its default (100 per second, burst 10). */
LK_EXPORT void lk_limiter_config_init_default(lk_limiter_config *c);
/* LK_OK, or LK_ECONFIG with *why (if non-NULL) set to a static message naming the bad field
 * (NULL on success). Rejects NaN/infinite/out-of-range rates and bursts < 1. */
LK_EXPORT int lk_limiter_config_validate(const lk_limiter_config *c, const char **why);

/* Creates a limiter with a full bucket (`burst` tokens available at any `now`). On success
 * stores the handle in *out (free it with lk_limiter_free()) and returns LK_OK; otherwise
 * returns LK_ECONFIG (with *why as for validate), LK_EINVAL (c or out NULL) or LK_ENOMEM, and
 * leaves *out NULL. The config is copied. */
LK_EXPORT int lk_limiter_new(const lk_limiter_config *c, lk_limiter **out, const char **why);
/* Frees the limiter. NULL is a no-op. No other thread may be using it. */
LK_EXPORT void lk_limiter_free(lk_limiter *l);

/* Takes one token if one is available at `now`: LK_OK, or LK_ERATE_LIMITED (nothing taken).
 * Lock-free; no allocation. */
LK_EXPORT int lk_limiter_try_acquire(lk_limiter *l, int64_t now);

/* Reserves one token, possibly in the future. Returns the ns the caller must wait (from `now`)
 * before using it, >= 0; the token is then taken. Returns LK_ERATE_LIMITED, reserving nothing,
 * when the wait would exceed max_wait (a max_wait < 0 is treated as 0, so it never waits). Pass
 * the time left before the caller's deadline as max_wait so that nobody waits past it (see
 * lk_limiter_reserve_until()). A reserved token cannot be given back: it is spent even if the
 * caller then gives up. Lock-free; no allocation. */
LK_EXPORT int64_t lk_limiter_reserve(lk_limiter *l, int64_t now, int64_t max_wait);
/* lk_limiter_reserve(l, now, lk_deadline_remaining(deadline, now)): a reservation whose wait
 * ends no later than the deadline. An expired deadline admits only an immediate token. */
LK_EXPORT int64_t lk_limiter_reserve_until(lk_limiter *l, int64_t now, lk_deadline deadline);

/* Replaces rate and burst at run time, atomically with respect to concurrent acquirers (each
 * acquire uses either the old pair or the new one, never a mix). Spent tokens stay spent as
 * time: TAT is kept, so afterwards (now + burst * interval - TAT) / interval tokens are available
 * with the new values. Lowering the burst can leave the bucket empty for a while; raising it
 * makes the extra tokens available at once. LK_OK, LK_ECONFIG (with *why; nothing changed; a
 * NULL c is a bad config) or LK_EINVAL (l is NULL). */
LK_EXPORT int lk_limiter_set_config(lk_limiter *l, const lk_limiter_config *c, const char **why);
/* Copies the current config into *out (a consistent pair). */
LK_EXPORT void lk_limiter_get_config(const lk_limiter *l, lk_limiter_config *out);

/* Whole tokens available at `now`, in [0, burst]; for metrics. A racy snapshot under
 * concurrency. */
LK_EXPORT int64_t lk_limiter_available(const lk_limiter *l, int64_t now);
/* The wait an lk_limiter_reserve() at `now` would get (>= 0), without reserving anything. */
LK_EXPORT int64_t lk_limiter_wait_time(const lk_limiter *l, int64_t now);

/* --- backends: a limiter whose tokens live elsewhere ------------------------------------------ */

/* A limiter can hand its decisions to a backend (for example linkd/shared.h's fleet-wide limiter
 * on Redis). Every call above then goes to the backend: try_acquire is reserve with max_wait 0,
 * reserve_until computes max_wait as usual. The backend is called from any thread at once and
 * must honour max_wait as the limiter's contract says; it may take its own time to decide (the
 * caller accepts that by choosing such a limiter), except when max_wait < 0 (a reserve_until
 * whose deadline has passed): then it must answer at once, as for 0. get_config returns the config given here;
 * set_config is forwarded when the backend has one (LK_ECONFIG with *why otherwise). */
typedef struct lk_limiter_backend {
  int64_t (*reserve)(void *arg, int64_t now, int64_t max_wait);               /* required */
  int64_t (*available)(void *arg, int64_t now);                               /* NULL: 0 */
  int64_t (*wait_time)(void *arg, int64_t now);                               /* NULL: 0 */
  int (*set_config)(void *arg, const lk_limiter_config *c, const char **why); /* may be NULL */
  void (*free)(void *arg); /* called by lk_limiter_free; may be NULL */
} lk_limiter_backend;

/* Creates a limiter that forwards to `be` (not copied: it must outlive the limiter) with `arg`.
 * `c` is validated and reported by lk_limiter_get_config. LK_OK, LK_EINVAL (a NULL argument or
 * be->reserve), LK_ECONFIG or LK_ENOMEM; *out NULL on failure (be->free is not called then). */
LK_EXPORT int lk_limiter_new_backend(const lk_limiter_config *c, const lk_limiter_backend *be,
                                     void *arg, lk_limiter **out, const char **why);
/* The backend argument of a limiter made by lk_limiter_new_backend with `be`, else NULL. */
LK_EXPORT void *lk_limiter_backend_arg(const lk_limiter *l, const lk_limiter_backend *be);

LK_END_DECLS

#endif
