/* SPDX-License-Identifier: MIT */
/* Circuit breaker: configuration, the state machine, acquire / record / release, queries.
 * The sliding windows live in breaker_window.c. */
#include "breaker_internal.h"
#include "sat.h"

#include <linkd/error.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RELAXED memory_order_relaxed

/* --- configuration ----------------------------------------------------------------------------- */

static uint64_t all_kinds(void) {
  return LK_F__COUNT >= 64 ? ~UINT64_C(0) : (UINT64_C(1) << LK_F__COUNT) - 1;
}

uint64_t lk_breaker_ignore_default(void) {
  return LK_FAILURE_BIT(LK_F_CANCELLED) | LK_FAILURE_BIT(LK_F_BREAKER_OPEN) |
         LK_FAILURE_BIT(LK_F_BUDGET_EXHAUSTED) | LK_FAILURE_BIT(LK_F_RATE_LIMITED) |
         LK_FAILURE_BIT(LK_F_BULKHEAD_FULL) | LK_FAILURE_BIT(LK_F_TOO_MANY_REQUESTS);
}

uint64_t lk_breaker_failures_default(void) {
  uint64_t not_failures = LK_FAILURE_BIT(LK_F_NONE) | LK_FAILURE_BIT(LK_F_CLIENT_4XX) |
                          LK_FAILURE_BIT(LK_F_HTTP_425) | LK_FAILURE_BIT(LK_F_KEY_IN_USE) |
                          lk_breaker_ignore_default();
  return all_kinds() & ~not_failures;
}

void lk_breaker_config_init_default(lk_breaker_config *c) {
  memset(c, 0, sizeof *c);
  c->window = LK_BREAKER_WINDOW_COUNT;
  c->window_size = 100;
  c->minimum_calls = 100;
  c->failure_rate_threshold = 50.0;
  c->slow_call_rate_threshold = 100.0;
  c->slow_call_duration = LK_SEC(60);
  c->wait_open = LK_SEC(60);
  c->wait_backoff = false;
  lk_backoff_config_init_default(&c->backoff);
  c->rng = NULL;
  c->permitted_half_open = 10;
  c->max_wait_half_open = 0;
  c->half_open_decide_early = true;
  c->failures = lk_breaker_failures_default();
  c->ignore = lk_breaker_ignore_default();
  c->on_transition = NULL;
  c->on_transition_ctx = NULL;
}

static bool bad_rate(double r) { return !(r > 0.0 && r <= 100.0) || llround(r * 10000.0) < 1; }

int lk_breaker_config_validate(const lk_breaker_config *c, const char **why) {
  const char *w = NULL;
  if (!c)
    w = "breaker config is NULL";
  else if (c->window != LK_BREAKER_WINDOW_COUNT && c->window != LK_BREAKER_WINDOW_TIME)
    w = "breaker window must be COUNT or TIME";
  else if (c->window == LK_BREAKER_WINDOW_COUNT && (c->window_size < 1 || c->window_size > 1000000))
    w = "breaker window_size must be within [1, 1000000] calls for a COUNT window";
  else if (c->window == LK_BREAKER_WINDOW_TIME && (c->window_size < 1 || c->window_size > 86400))
    w = "breaker window_size must be within [1, 86400] seconds for a TIME window";
  else if (c->minimum_calls < 1)
    w = "breaker minimum_calls must be >= 1";
  else if (bad_rate(c->failure_rate_threshold))
    w = "breaker failure_rate_threshold must be a percentage within (0, 100]";
  else if (bad_rate(c->slow_call_rate_threshold))
    w = "breaker slow_call_rate_threshold must be a percentage within (0, 100]";
  else if (c->slow_call_duration <= 0)
    w = "breaker slow_call_duration must be > 0";
  else if (!c->wait_backoff && c->wait_open <= 0)
    w = "breaker wait_open must be > 0";
  else if (c->wait_backoff && lk_backoff_config_validate(&c->backoff, &w) != LK_OK) {
    /* w names the bad backoff field */
  } else if (c->wait_backoff && c->backoff.jitter != LK_JITTER_NONE && !c->rng)
    w = "breaker rng must be set when the wait backoff has jitter";
  else if (c->permitted_half_open < 1 || c->permitted_half_open > 1000000)
    w = "breaker permitted_half_open must be within [1, 1000000]";
  else if (c->max_wait_half_open < 0)
    w = "breaker max_wait_half_open must be >= 0";
  else if (c->failures & ~all_kinds())
    w = "breaker failures has bits beyond the last lk_failure kind";
  else if (c->ignore & ~all_kinds())
    w = "breaker ignore has bits beyond the last lk_failure kind";
  else if (c->failures & LK_FAILURE_BIT(LK_F_NONE))
    w = "breaker failures must not contain LK_F_NONE (success)";
  else if (c->ignore & LK_FAILURE_BIT(LK_F_NONE))
    w = "breaker ignore must not contain LK_F_NONE (success)";
  if (why)
    *why = w;
  return w ? LK_ECONFIG : LK_OK;
}

/* --- construction ------------------------------------------------------------------------------ */

int lk_breaker_new(const lk_breaker_config *c, lk_breaker **out, const char **why) {
  if (out)
    *out = NULL;
  if (!c || !out)
    return LK_EINVAL;
  int rc = lk_breaker_config_validate(c, why);
  if (rc != LK_OK)
    return rc;
  size_t size = (sizeof(lk_breaker) + LK_BK_LINE - 1) / LK_BK_LINE * LK_BK_LINE;
  lk_breaker *b = aligned_alloc(LK_BK_LINE, size);
  if (!b)
    return LK_ENOMEM;
  memset(b, 0, size);
  b->wkind = c->window;
  b->n = c->window_size;
  b->min_calls = c->minimum_calls;
  if (b->wkind == LK_BREAKER_WINDOW_COUNT && b->min_calls > b->n)
    b->min_calls = b->n; /* Resilience4j caps it so a full window can always be judged */
  b->permitted = c->permitted_half_open;
  b->fail_ppm = llround(c->failure_rate_threshold * 10000.0);
  b->slow_ppm = llround(c->slow_call_rate_threshold * 10000.0);
  b->slow_ns = c->slow_call_duration;
  b->wait_open = c->wait_open;
  b->max_wait_ho = c->max_wait_half_open;
  b->decide_early = c->half_open_decide_early;
  b->failures = c->failures;
  b->ignore = c->ignore;
  b->wait_backoff = c->wait_backoff;
  b->backoff = c->backoff;
  b->rng = c->rng;
  b->on_transition = c->on_transition;
  b->on_transition_ctx = c->on_transition_ctx;
  atomic_init(&b->state, LK_BK_WORD(0, LK_BREAKER_CLOSED));
  atomic_init(&b->thead, LK_BK_EMPTY);
  b->st_head = LK_BK_EMPTY;
  if (b->wkind == LK_BREAKER_WINDOW_COUNT)
    b->slots = calloc((size_t)b->n, sizeof *b->slots);
  else
    b->buckets = calloc((size_t)b->n, sizeof *b->buckets);
  if (b->on_transition) { /* the first slots of the callback queue: transitions never allocate
                            while callbacks keep up */
    b->queue = calloc(LK_BK_QUEUE_INIT, sizeof *b->queue);
    b->qcap = LK_BK_QUEUE_INIT;
  }
  bool ok = (b->slots || b->buckets) && (b->queue || !b->on_transition);
  bool mu_ok = ok && pthread_mutex_init(&b->mu, NULL) == 0;
  if (!mu_ok || pthread_mutex_init(&b->dispatch_mu, NULL) != 0) {
    if (mu_ok)
      pthread_mutex_destroy(&b->mu);
    free(b->queue);
    free(b->slots);
    free(b->buckets);
    free(b);
    return LK_ENOMEM;
  }
  *out = b;
  return LK_OK;
}

void lk_breaker_set_single_thread(lk_breaker *b) {
  if (!b)
    return;
  pthread_mutex_lock(&b->mu); /* the window's position, as a reset would leave it */
  b->cursor = (uint32_t)(atomic_load_explicit(&b->seq, RELAXED) % (uint64_t)b->n);
  b->st = true;
  pthread_mutex_unlock(&b->mu);
}

void lk_breaker_free(lk_breaker *b) {
  if (!b)
    return;
  pthread_mutex_destroy(&b->dispatch_mu);
  pthread_mutex_destroy(&b->mu);
  free(b->queue);
  free(b->slots);
  free(b->buckets);
  free(b);
}

/* --- helpers ----------------------------------------------------------------------------------- */

/* now - since >= d, without overflow (d >= 0). A `now` more than d *before* `since` counts as
 * elapsed too: the clock stepped back further than the wait, and the wait must not last for as
 * long as the clock went back (a breaker stuck OPEN, or HALF_OPEN with its probes lost, for
 * hours). A `now` only a little behind `since` (another thread's clock) is not elapsed. */
static bool elapsed(int64_t now, int64_t since, int64_t d) {
  if (now >= since)
    return (uint64_t)now - (uint64_t)since >= (uint64_t)d;
  return (uint64_t)since - (uint64_t)now > (uint64_t)d;
}

/* OPEN: whether the wait has ended at `now` (elapsed() from open_since; a torn read of the two
 * fields, when another transition races, falls back to now >= open_until). */
static bool open_wait_over(const lk_breaker *b, int64_t now) {
  int64_t since = atomic_load_explicit(&b->open_since, RELAXED);
  int64_t until = atomic_load_explicit(&b->open_until, RELAXED);
  if (now >= until)
    return true;
  return now < since && (uint64_t)since - (uint64_t)now > (uint64_t)until - (uint64_t)since;
}

static bool rate_ge(int64_t part, int64_t calls, int64_t ppm) {
  if (calls <= INT64_C(9000000000000))
    return part * 1000000 >= ppm * calls;
  return (double)part * 1e6 >= (double)ppm * (double)calls;
}

static bool exceeded(const lk_breaker *b, const lk_bk_tally *t, int64_t minimum) {
  return t->calls >= minimum &&
         (rate_ge(t->failed, t->calls, b->fail_ppm) || rate_ge(t->slow, t->calls, b->slow_ppm));
}

static int64_t open_wait(lk_breaker *b, int n) {
  if (!b->wait_backoff)
    return b->wait_open;
  int64_t d = lk_backoff_delay(&b->backoff, n, b->last_wait, b->rng);
  b->last_wait = d;
  return d;
}

/* --- transition callbacks ---------------------------------------------------------------------- */

/* The callback never runs under mu: user code that is slow would stall every thread that needs
 * the lock, and user code that calls back into the breaker would deadlock on it. Instead, the
 * transition is queued under mu (so the queue order is the period order) and delivered after the
 * lock is released by dispatch(). */

/* Makes room for one more event (caller holds mu). False when the queue is at LK_BK_QUEUE_MAX or
 * cannot grow: the transition itself still happens, only its callback is dropped (counted). */
static bool queue_room(lk_breaker *b) {
  if (b->qlen < b->qcap)
    return true;
  if (b->qcap >= LK_BK_QUEUE_MAX)
    return false;
  uint32_t cap = b->qcap * 2;
  lk_bk_event *q = malloc(cap * sizeof *q);
  if (!q)
    return false;
  for (uint32_t i = 0; i < b->qlen; i++)
    q[i] = b->queue[(b->qhead + i) % b->qcap];
  free(b->queue);
  b->queue = q;
  b->qcap = cap;
  b->qhead = 0;
  return true;
}

static void enqueue_locked(lk_breaker *b, lk_breaker_state from, lk_breaker_state to, int64_t now) {
  if (!queue_room(b)) {
    atomic_fetch_add_explicit(&b->undelivered, 1, RELAXED);
    return;
  }
  b->queue[(b->qhead + b->qlen) % b->qcap] = (lk_bk_event){now, from, to};
  b->qlen++;
}

static bool dequeue(lk_breaker *b, lk_bk_event *e) {
  pthread_mutex_lock(&b->mu);
  bool got = b->qlen > 0;
  if (got) {
    *e = b->queue[b->qhead];
    b->qhead = (b->qhead + 1) % b->qcap;
    b->qlen--;
  }
  pthread_mutex_unlock(&b->mu);
  return got;
}

static bool queue_empty(lk_breaker *b) {
  pthread_mutex_lock(&b->mu);
  bool empty = b->qlen == 0;
  pthread_mutex_unlock(&b->mu);
  return empty;
}

/* Delivers the queued callbacks; called after every transition, without mu. One thread at a time
 * delivers (dispatch_mu), so callbacks run one after another in queue order. A thread that finds
 * dispatch_mu taken leaves its event to the holder: that is another thread, whose loop will
 * reach it, or this same thread inside a callback (a re-entrant transition), whose outer loop
 * delivers it as soon as the callback returns. The holder looks at the queue again after
 * releasing dispatch_mu, so an event queued between its last dequeue and the release, whose
 * thread then failed the trylock, is not stranded. */
static void dispatch(lk_breaker *b) {
  if (!b->on_transition)
    return;
  do {
    if (pthread_mutex_trylock(&b->dispatch_mu) != 0)
      return;
    lk_bk_event e;
    while (dequeue(b, &e))
      b->on_transition(b->on_transition_ctx, e.from, e.to, e.now);
    pthread_mutex_unlock(&b->dispatch_mu);
  } while (!queue_empty(b));
}

/* --- transitions ------------------------------------------------------------------------------- */

/* Performs the transition from the state word `from` (current, caller holds mu); the callback is
 * queued, the caller runs dispatch() after releasing mu. */
static void transition_locked(lk_breaker *b, uint64_t from, lk_breaker_state to, int64_t now) {
  uint64_t period = LK_BK_PERIOD(from) + 1;
  int openings = atomic_load_explicit(&b->openings, RELAXED);
  switch (to) {
  case LK_BREAKER_OPEN: {
    openings = openings < INT32_MAX ? openings + 1 : openings;
    int64_t wait = open_wait(b, openings);
    atomic_store_explicit(&b->open_since, now, RELAXED);
    atomic_store_explicit(&b->open_until, lk_sat_add(now, wait < 0 ? 0 : wait), RELAXED);
    break;
  }
  case LK_BREAKER_HALF_OPEN:
    atomic_store_explicit(&b->ho_since, now, RELAXED);
    atomic_store_explicit(&b->ho_calls, 0, RELAXED);
    atomic_store_explicit(&b->ho_failed, 0, RELAXED);
    atomic_store_explicit(&b->ho_slow, 0, RELAXED);
    atomic_store_explicit(&b->permits,
                          (period & LK_BK_TAG_MASK) << LK_BK_LEFT_BITS | (uint64_t)b->permitted,
                          RELAXED);
    break;
  case LK_BREAKER_CLOSED:
  case LK_BREAKER_METRICS_ONLY:
    lk__bk_window_reset(b, period);
    openings = 0;
    b->last_wait = 0;
    break;
  default: /* DISABLED, FORCED_OPEN */
    openings = 0;
    b->last_wait = 0;
    break;
  }
  atomic_store_explicit(&b->openings, openings, RELAXED);
  /* Publishing the state last makes everything above visible to whoever sees the new state. */
  atomic_store_explicit(&b->state, LK_BK_WORD(period, to), memory_order_release);
  if (b->on_transition)
    enqueue_locked(b, LK_BK_STATE(from), to, now);
}

/* Transitions only if the state is still `from`: of all threads racing on one observation,
 * exactly one moves the breaker. */
static void try_transition(lk_breaker *b, uint64_t from, lk_breaker_state to, int64_t now) {
  pthread_mutex_lock(&b->mu);
  if (atomic_load_explicit(&b->state, RELAXED) == from)
    transition_locked(b, from, to, now);
  pthread_mutex_unlock(&b->mu);
  dispatch(b);
}

static int reject(lk_breaker *b) {
  lk__st_add_u64(b->st, &b->not_permitted, 1);
  return LK_EBREAKER_OPEN;
}

/* --- acquire / release ------------------------------------------------------------------------- */

enum { TAKEN, NONE_LEFT, STALE };

static int take_permit(lk_breaker *b, uint64_t w) {
  uint64_t tag = LK_BK_PERIOD(w) & LK_BK_TAG_MASK;
  uint64_t v = atomic_load_explicit(&b->permits, memory_order_acquire);
  for (;;) {
    if (v >> LK_BK_LEFT_BITS != tag)
      return STALE; /* the half-open period ended meanwhile */
    if ((v & LK_BK_LEFT_MASK) == 0)
      return NONE_LEFT;
    if (lk__st_cas_u64(b->st, &b->permits, &v, v - 1, memory_order_acq_rel, memory_order_acquire))
      return TAKEN;
  }
}

static void give_permit(lk_breaker *b, uint64_t period) {
  uint64_t tag = period & LK_BK_TAG_MASK;
  uint64_t v = atomic_load_explicit(&b->permits, memory_order_acquire);
  for (;;) {
    if (v >> LK_BK_LEFT_BITS != tag || (v & LK_BK_LEFT_MASK) >= (uint64_t)b->permitted)
      return;
    if (lk__st_cas_u64(b->st, &b->permits, &v, v + 1, memory_order_acq_rel, memory_order_acquire))
      return;
  }
}

int lk_breaker_acquire_permit(lk_breaker *b, int64_t now, lk_breaker_permit *p) {
  for (;;) {
    uint64_t w = atomic_load_explicit(&b->state, memory_order_acquire);
    switch (LK_BK_STATE(w)) {
    case LK_BREAKER_OPEN:
      if (!open_wait_over(b, now))
        return reject(b);
      try_transition(b, w, LK_BREAKER_HALF_OPEN, now);
      continue;
    case LK_BREAKER_HALF_OPEN: {
      if (b->max_wait_ho > 0 &&
          elapsed(now, atomic_load_explicit(&b->ho_since, RELAXED), b->max_wait_ho)) {
        try_transition(b, w, LK_BREAKER_OPEN, now);
        continue;
      }
      int r = take_permit(b, w);
      if (r == STALE)
        continue;
      if (r == NONE_LEFT)
        return reject(b);
      break;
    }
    case LK_BREAKER_FORCED_OPEN: return reject(b);
    default: break; /* CLOSED, DISABLED, METRICS_ONLY */
    }
    if (p) {
      p->period = LK_BK_PERIOD(w);
      p->state = LK_BK_STATE(w);
    }
    return LK_OK;
  }
}

int lk_breaker_acquire(lk_breaker *b, int64_t now) {
  return lk_breaker_acquire_permit(b, now, NULL);
}

void lk_breaker_release_permit(lk_breaker *b, const lk_breaker_permit *p) {
  if (p->state == LK_BREAKER_HALF_OPEN)
    give_permit(b, p->period);
}

void lk_breaker_release(lk_breaker *b) {
  uint64_t w = atomic_load_explicit(&b->state, memory_order_acquire);
  if (LK_BK_STATE(w) == LK_BREAKER_HALF_OPEN)
    give_permit(b, LK_BK_PERIOD(w));
}

/* --- record ------------------------------------------------------------------------------------ */

/* Where the half-open tally leads: OPEN or CLOSED once the outcome of the period is certain,
 * HALF_OPEN while it is not. Rates are over `permitted` calls. Waiting for every permitted probe
 * (Resilience4j) lets one slow probe hold the breaker shut for its whole timeout while the others
 * already proved the downstream healthy; deciding as soon as the remaining probes cannot change
 * the verdict gives the same verdict, earlier. */
static int half_open_verdict(const lk_breaker *b, const lk_bk_tally *t) {
  if (t->calls >= b->permitted)
    return exceeded(b, t, b->permitted) ? LK_BREAKER_OPEN : LK_BREAKER_CLOSED;
  if (!b->decide_early)
    return LK_BREAKER_HALF_OPEN;
  int64_t left = b->permitted - t->calls;
  if (rate_ge(t->failed, b->permitted, b->fail_ppm) || rate_ge(t->slow, b->permitted, b->slow_ppm))
    return LK_BREAKER_OPEN; /* even if every remaining probe succeeds */
  if (!rate_ge(t->failed + left, b->permitted, b->fail_ppm) &&
      !rate_ge(t->slow + left, b->permitted, b->slow_ppm))
    return LK_BREAKER_CLOSED; /* even if every remaining probe fails */
  return LK_BREAKER_HALF_OPEN;
}

/* HALF_OPEN record under the lock. Returns false if the state is no longer `w` (re-dispatch). */
static bool half_open_record(lk_breaker *b, uint64_t w, int64_t now, unsigned outcome) {
  pthread_mutex_lock(&b->mu);
  if (atomic_load_explicit(&b->state, RELAXED) != w) {
    pthread_mutex_unlock(&b->mu);
    return false;
  }
  if (b->max_wait_ho > 0 &&
      elapsed(now, atomic_load_explicit(&b->ho_since, RELAXED), b->max_wait_ho)) {
    transition_locked(b, w, LK_BREAKER_OPEN, now); /* as if its timer had fired first */
    pthread_mutex_unlock(&b->mu);
    dispatch(b);
    return true;
  }
  lk_bk_tally t;
  t.calls = atomic_load_explicit(&b->ho_calls, RELAXED) + 1;
  t.failed = atomic_load_explicit(&b->ho_failed, RELAXED) + (outcome & LK_BK_FAIL ? 1 : 0);
  t.slow = atomic_load_explicit(&b->ho_slow, RELAXED) + (outcome & LK_BK_SLOW ? 1 : 0);
  atomic_store_explicit(&b->ho_calls, t.calls, RELAXED);
  atomic_store_explicit(&b->ho_failed, t.failed, RELAXED);
  atomic_store_explicit(&b->ho_slow, t.slow, RELAXED);
  int verdict = half_open_verdict(b, &t);
  if (verdict != LK_BREAKER_HALF_OPEN)
    transition_locked(b, w, (lk_breaker_state)verdict, now);
  pthread_mutex_unlock(&b->mu);
  dispatch(b);
  return true;
}

static void record(lk_breaker *b, const lk_breaker_permit *p, int64_t now, int64_t duration,
                   lk_failure kind) {
  bool known = (unsigned)kind < LK_F__COUNT;
  if (known && (b->ignore & LK_FAILURE_BIT(kind))) {
    if (p)
      lk_breaker_release_permit(b, p);
    else
      lk_breaker_release(b);
    return;
  }
  unsigned outcome = 0;
  if (kind != LK_F_NONE && (!known || (b->failures & LK_FAILURE_BIT(kind))))
    outcome |= LK_BK_FAIL;
  if (duration > b->slow_ns)
    outcome |= LK_BK_SLOW;
  for (;;) {
    uint64_t w = atomic_load_explicit(&b->state, memory_order_acquire);
    lk_breaker_state st = LK_BK_STATE(w);
    if (st == LK_BREAKER_CLOSED || st == LK_BREAKER_METRICS_ONLY) {
      if (p && p->period != LK_BK_PERIOD(w))
        return; /* admitted before a transition: not an outcome of this window */
      lk_bk_tally t;
      if (lk__bk_window_record(b, LK_BK_PERIOD(w), now, outcome, &t) && st == LK_BREAKER_CLOSED &&
          exceeded(b, &t, b->min_calls))
        try_transition(b, w, LK_BREAKER_OPEN, now);
      return;
    }
    if (st != LK_BREAKER_HALF_OPEN)
      return; /* OPEN, DISABLED, FORCED_OPEN record nothing */
    if (p && (p->state != LK_BREAKER_HALF_OPEN || p->period != LK_BK_PERIOD(w)))
      return; /* not a probe of this half-open period */
    if (half_open_record(b, w, now, outcome))
      return;
  }
}

void lk_breaker_record(lk_breaker *b, int64_t now, int64_t duration, lk_failure kind) {
  record(b, NULL, now, duration, kind);
}

void lk_breaker_record_permit(lk_breaker *b, const lk_breaker_permit *p, int64_t now,
                              int64_t duration, lk_failure kind) {
  record(b, p, now, duration, kind);
}

/* --- manual control ---------------------------------------------------------------------------- */

int lk_breaker_transition(lk_breaker *b, lk_breaker_state to, int64_t now) {
  if (!b || (unsigned)to > LK_BREAKER_METRICS_ONLY)
    return LK_EINVAL;
  pthread_mutex_lock(&b->mu);
  transition_locked(b, atomic_load_explicit(&b->state, RELAXED), to, now);
  pthread_mutex_unlock(&b->mu);
  dispatch(b);
  return LK_OK;
}

void lk_breaker_reset(lk_breaker *b, int64_t now) {
  if (!b)
    return;
  pthread_mutex_lock(&b->mu);
  atomic_store_explicit(&b->not_permitted, 0, RELAXED);
  transition_locked(b, atomic_load_explicit(&b->state, RELAXED), LK_BREAKER_CLOSED, now);
  pthread_mutex_unlock(&b->mu);
  dispatch(b);
}

/* --- queries ----------------------------------------------------------------------------------- */

int64_t lk_breaker_retry_at(const lk_breaker *cb, int64_t now) {
  const lk_breaker *b = cb;
  uint64_t w = atomic_load_explicit(&b->state, memory_order_acquire);
  switch (LK_BK_STATE(w)) {
  case LK_BREAKER_OPEN:
    return open_wait_over(b, now) ? now : atomic_load_explicit(&b->open_until, RELAXED);
  case LK_BREAKER_HALF_OPEN: {
    uint64_t v = atomic_load_explicit(&b->permits, RELAXED);
    bool same = v >> LK_BK_LEFT_BITS == (LK_BK_PERIOD(w) & LK_BK_TAG_MASK);
    if (same && (v & LK_BK_LEFT_MASK) == 0) {
      if (b->max_wait_ho <= 0)
        return LK_BREAKER_RETRY_UNKNOWN; /* when a probe's outcome is recorded */
      int64_t since = atomic_load_explicit(&b->ho_since, RELAXED);
      return elapsed(now, since, b->max_wait_ho) ? now : lk_sat_add(since, b->max_wait_ho);
    }
    return now;
  }
  case LK_BREAKER_FORCED_OPEN: return INT64_MAX;
  default: return now;
  }
}

lk_breaker_state lk_breaker_get_state(const lk_breaker *cb) {
  const lk_breaker *b = cb;
  return LK_BK_STATE(atomic_load_explicit(&b->state, memory_order_acquire));
}

static double rate(int64_t part, int64_t calls, int64_t minimum) {
  return calls >= minimum && calls > 0 ? (double)part * 100.0 / (double)calls : -1.0;
}

int lk_breaker_metrics_get(const lk_breaker *cb, int64_t now, lk_breaker_metrics *out) {
  if (!cb || !out)
    return LK_EINVAL;
  const lk_breaker *b = cb;
  memset(out, 0, sizeof *out);
  uint64_t w = atomic_load_explicit(&b->state, memory_order_acquire);
  out->state = LK_BK_STATE(w);
  out->transitions = LK_BK_PERIOD(w);
  out->transitions_undelivered = atomic_load_explicit(&b->undelivered, RELAXED);
  out->not_permitted = atomic_load_explicit(&b->not_permitted, RELAXED);
  out->openings = atomic_load_explicit(&b->openings, RELAXED);
  lk_bk_tally t;
  int64_t minimum = b->min_calls;
  if (out->state == LK_BREAKER_HALF_OPEN) {
    t.calls = atomic_load_explicit(&b->ho_calls, RELAXED);
    t.failed = atomic_load_explicit(&b->ho_failed, RELAXED);
    t.slow = atomic_load_explicit(&b->ho_slow, RELAXED);
    minimum = b->permitted;
    uint64_t v = atomic_load_explicit(&b->permits, RELAXED);
    if (v >> LK_BK_LEFT_BITS == (LK_BK_PERIOD(w) & LK_BK_TAG_MASK))
      out->half_open_left = (int)(v & LK_BK_LEFT_MASK);
  } else {
    lk__bk_window_tally(b, now, &t);
  }
  if (out->state == LK_BREAKER_OPEN)
    out->open_until = atomic_load_explicit(&b->open_until, RELAXED);
  out->calls = t.calls;
  out->failed = t.failed;
  out->slow = t.slow;
  out->failure_rate = rate(t.failed, t.calls, minimum);
  out->slow_call_rate = rate(t.slow, t.calls, minimum);
  return LK_OK;
}

static const char *const state_names[] = {"CLOSED",   "OPEN",        "HALF_OPEN",
                                          "DISABLED", "FORCED_OPEN", "METRICS_ONLY"};

const char *lk_breaker_state_name(lk_breaker_state s) {
  return (unsigned)s <= LK_BREAKER_METRICS_ONLY ? state_names[s] : "UNKNOWN";
}

int lk_breaker_state_parse(const char *s, lk_breaker_state *out) {
  if (!s || !out)
    return LK_EINVAL;
  for (int i = 0; i <= LK_BREAKER_METRICS_ONLY; i++) {
    const char *a = state_names[i], *c = s;
    while (*a && *c) {
      char ch = *c == '-' ? '_' : *c;
      if (ch >= 'a' && ch <= 'z')
        ch = (char)(ch - 'a' + 'A');
      if (ch != *a)
        break;
      a++, c++;
    }
    if (!*a && !*c) {
      *out = (lk_breaker_state)i;
      return LK_OK;
    }
  }
  return LK_EINVAL;
}
