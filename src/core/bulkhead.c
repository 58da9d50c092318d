/* SPDX-License-Identifier: MIT */
#include <linkd/bulkhead.h>
#include <linkd/error.h>

#include "sat.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The state word packs three 21-bit fields: bits 0-20 in use, 21-41 waiters, 42-62 limit.
 * One CAS then checks "nobody waits and in use < limit" and takes the slot, so the limit holds
 * exactly even while set_max changes it. Waiters change only under the mutex, and the queue
 * length always equals the waiters field whenever the mutex is free. Invariant (mutex free):
 * waiters > 0 implies in use >= limit, so a queued caller is never left behind a free slot. */
#define FIELD_BITS 21
#define FIELD_MASK ((UINT64_C(1) << FIELD_BITS) - 1)
#define WAITER_ONE (UINT64_C(1) << FIELD_BITS)
#define MAX_SHIFT (2 * FIELD_BITS)

/* A queued caller: a blocking one (cond, in its stack frame) or a non-blocking one (notify, in
 * the caller's lk_bulkhead_waiter). Both queue in one FIFO. */
typedef struct waiter {
  struct waiter *next, *prev;
  pthread_cond_t *cond;     /* blocking: signalled on grant; NULL for a non-blocking waiter */
  void (*notify)(void *ud); /* non-blocking: called on grant, mutex held */
  void *ud;
  bool granted; /* set under the mutex by whoever handed us a slot */
  bool queued;  /* non-blocking: in the queue (read under the mutex) */
} waiter;

_Static_assert(sizeof(waiter) <= sizeof(((lk_bulkhead_waiter *)0)->u_.opaque_),
               "lk_bulkhead_waiter too small for the internal waiter");
_Static_assert(_Alignof(waiter) <= _Alignof(lk_bulkhead_waiter),
               "lk_bulkhead_waiter under-aligned");

static waiter *waiter_of(lk_bulkhead_waiter *w) { return (waiter *)(void *)w->u_.opaque_; }

struct lk_bulkhead {
  _Alignas(64) _Atomic uint64_t state;
  /* Slow-path data: the queue and counters, away from the hot word. */
  _Alignas(64) pthread_mutex_t mu;
  pthread_condattr_t cond_attr; /* CLOCK_MONOTONIC, shared read-only by all waiters */
  waiter *head, *tail;
  int64_t max_queue;
  _Atomic uint64_t waited, rejected_full, rejected_deadline;
  _Atomic int64_t wait_total, wait_last;
};

static uint64_t in_use_of(uint64_t s) { return s & FIELD_MASK; }
static uint64_t waiters_of(uint64_t s) { return (s >> FIELD_BITS) & FIELD_MASK; }
static uint64_t max_of(uint64_t s) { return (s >> MAX_SHIFT) & FIELD_MASK; }

void lk_bulkhead_config_init_default(lk_bulkhead_config *c) {
  c->max_concurrent = 25;
  c->max_queue = 50;
}

int lk_bulkhead_config_validate(const lk_bulkhead_config *c, const char **why) {
  const char *w = NULL;
  if (!c)
    w = "bulkhead config is NULL";
  else if (c->max_concurrent < 1 || c->max_concurrent > LK_BULKHEAD_LIMIT_MAX)
    w = "bulkhead max_concurrent must be within [1, 2097151]";
  else if (c->max_queue < 0 || c->max_queue > LK_BULKHEAD_LIMIT_MAX)
    w = "bulkhead max_queue must be within [0, 2097151]";
  if (why)
    *why = w;
  return w ? LK_ECONFIG : LK_OK;
}

int lk_bulkhead_new(const lk_bulkhead_config *c, lk_bulkhead **out, const char **why) {
  if (!out || !c) {
    if (out)
      *out = NULL;
    if (why)
      *why = !c ? "bulkhead config is NULL" : "bulkhead output pointer is NULL";
    return LK_EINVAL;
  }
  *out = NULL;
  int rc = lk_bulkhead_config_validate(c, why);
  if (rc != LK_OK)
    return rc;
  lk_bulkhead *b = aligned_alloc(64, (sizeof *b + 63) / 64 * 64);
  if (!b)
    return LK_ENOMEM;
  memset(b, 0, sizeof *b);
  if (pthread_condattr_init(&b->cond_attr) != 0) {
    free(b);
    return LK_ESYS;
  }
  if (pthread_condattr_setclock(&b->cond_attr, CLOCK_MONOTONIC) != 0 ||
      pthread_mutex_init(&b->mu, NULL) != 0) {
    pthread_condattr_destroy(&b->cond_attr);
    free(b);
    return LK_ESYS;
  }
  atomic_init(&b->state, (uint64_t)c->max_concurrent << MAX_SHIFT);
  b->max_queue = c->max_queue;
  *out = b;
  return LK_OK;
}

void lk_bulkhead_free(lk_bulkhead *b) {
  if (!b)
    return;
  pthread_mutex_destroy(&b->mu);
  pthread_condattr_destroy(&b->cond_attr);
  free(b);
}

/* One CAS: succeeds only when nobody is queued and a slot is free. */
static bool take_fast(lk_bulkhead *b) {
  uint64_t s = atomic_load_explicit(&b->state, memory_order_relaxed);
  for (;;) {
    if (waiters_of(s) != 0 || in_use_of(s) >= max_of(s))
      return false;
    if (atomic_compare_exchange_weak_explicit(&b->state, &s, s + 1, memory_order_acquire,
                                              memory_order_relaxed))
      return true;
  }
}

int lk_bulkhead_try_acquire(lk_bulkhead *b) {
  if (take_fast(b))
    return LK_OK;
  atomic_fetch_add_explicit(&b->rejected_full, 1, memory_order_relaxed);
  return LK_EBULKHEAD_FULL;
}

/* Hands free slots to the head of the queue while the limit allows. Mutex held. */
static void grant_locked(lk_bulkhead *b) {
  while (b->head) {
    uint64_t s = atomic_load_explicit(&b->state, memory_order_relaxed);
    if (in_use_of(s) >= max_of(s))
      return;
    /* The slot moves to the waiter: in use + 1, waiters - 1. */
    if (!atomic_compare_exchange_weak_explicit(&b->state, &s, s + 1 - WAITER_ONE,
                                               memory_order_acq_rel, memory_order_relaxed))
      continue;
    waiter *w = b->head;
    b->head = w->next;
    if (b->head)
      b->head->prev = NULL;
    else
      b->tail = NULL;
    w->granted = true;
    w->queued = false;
    /* Under the mutex: a blocking waiter cannot destroy its cond, nor a non-blocking one learn
     * of the grant (lk_bulkhead_waiter_granted locks) and free its waiter, until we unlock. */
    if (w->cond)
      pthread_cond_signal(w->cond);
    else
      w->notify(w->ud);
  }
}

static void unlink_locked(lk_bulkhead *b, waiter *w) {
  if (w->prev)
    w->prev->next = w->next;
  else
    b->head = w->next;
  if (w->next)
    w->next->prev = w->prev;
  else
    b->tail = w->prev;
}

/* Takes a free slot when nobody waits (LK_OK), or appends `w` to the queue (LK_EAGAIN), or
 * LK_EBULKHEAD_FULL when max_queue wait already. Mutex held. */
static int enqueue_locked(lk_bulkhead *b, waiter *w) {
  uint64_t s = atomic_load_explicit(&b->state, memory_order_relaxed);
  for (;;) {
    if (waiters_of(s) == 0 && in_use_of(s) < max_of(s)) {
      if (atomic_compare_exchange_weak_explicit(&b->state, &s, s + 1, memory_order_acquire,
                                                memory_order_relaxed))
        return LK_OK;
      continue;
    }
    if ((int64_t)waiters_of(s) >= b->max_queue)
      return LK_EBULKHEAD_FULL;
    /* Publishing waiters > 0 sends every later release through the mutex, so none is lost. */
    if (atomic_compare_exchange_weak_explicit(&b->state, &s, s + WAITER_ONE, memory_order_relaxed,
                                              memory_order_relaxed))
      break;
  }
  w->next = NULL;
  w->prev = b->tail;
  w->granted = false;
  if (b->tail)
    b->tail->next = w;
  else
    b->head = w;
  b->tail = w;
  return LK_EAGAIN;
}

/* Queues the caller as `w` (w->cond initialized); mutex held on entry and exit. Returns LK_OK,
 * LK_EBULKHEAD_FULL or LK_EDEADLINE; *queued tells whether it actually waited. */
static int wait_locked(lk_bulkhead *b, waiter *w, int64_t remaining, bool *queued) {
  int rc = enqueue_locked(b, w);
  if (rc != LK_EAGAIN)
    return rc;
  *queued = true;
  bool timed = remaining != INT64_MAX;
  struct timespec abs = {0, 0};
  if (timed) {
    int64_t at = lk_sat_add(lk_now_ns(), remaining);
    abs.tv_sec = (time_t)(at / LK_NS_PER_S);
    abs.tv_nsec = (long)(at % LK_NS_PER_S);
  }
  while (!w->granted) {
    int wr =
        timed ? pthread_cond_timedwait(w->cond, &b->mu, &abs) : pthread_cond_wait(w->cond, &b->mu);
    if (wr == ETIMEDOUT)
      break;
  }
  if (!w->granted) {
    /* Leaving keeps the invariant: in use is unchanged and one fewer waits. */
    unlink_locked(b, w);
    atomic_fetch_sub_explicit(&b->state, WAITER_ONE, memory_order_relaxed);
  }
  return w->granted ? LK_OK : LK_EDEADLINE;
}

int lk_bulkhead_acquire(lk_bulkhead *b, const lk_clock *clock, lk_deadline deadline) {
  if (take_fast(b))
    return LK_OK;
  if (!clock)
    clock = lk_clock_system();
  int64_t start = clock->now(clock);
  int64_t remaining = lk_deadline_remaining(deadline, start);
  if (remaining <= 0) {
    atomic_fetch_add_explicit(&b->rejected_deadline, 1, memory_order_relaxed);
    return LK_EDEADLINE;
  }
  /* The waiter lives in this stack frame: no allocation, and its cond is ours alone. */
  pthread_cond_t cond;
  if (pthread_cond_init(&cond, &b->cond_attr) != 0)
    return LK_ESYS;
  waiter w = {.cond = &cond};
  bool queued = false;
  pthread_mutex_lock(&b->mu);
  int rc = wait_locked(b, &w, remaining, &queued);
  pthread_mutex_unlock(&b->mu);
  /* Granters signal under the mutex, so once we have left it nobody touches w.cond again. */
  pthread_cond_destroy(&cond);
  if (rc == LK_EBULKHEAD_FULL)
    atomic_fetch_add_explicit(&b->rejected_full, 1, memory_order_relaxed);
  else if (rc == LK_EDEADLINE)
    atomic_fetch_add_explicit(&b->rejected_deadline, 1, memory_order_relaxed);
  if (queued) {
    int64_t waited = lk_sat_sub(clock->now(clock), start);
    if (waited < 0)
      waited = 0;
    atomic_fetch_add_explicit(&b->waited, 1, memory_order_relaxed);
    atomic_store_explicit(&b->wait_last, waited, memory_order_relaxed);
    int64_t total = atomic_load_explicit(&b->wait_total, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&b->wait_total, &total, lk_sat_add(total, waited),
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
  }
  return rc;
}

int lk_bulkhead_enqueue(lk_bulkhead *b, lk_bulkhead_waiter *bw, void (*notify)(void *ud),
                        void *ud) {
  if (!b || !bw || !notify)
    return LK_EINVAL;
  waiter *w = waiter_of(bw);
  memset(w, 0, sizeof *w);
  if (take_fast(b))
    return LK_OK;
  w->notify = notify;
  w->ud = ud;
  pthread_mutex_lock(&b->mu);
  int rc = enqueue_locked(b, w);
  w->queued = rc == LK_EAGAIN;
  pthread_mutex_unlock(&b->mu);
  if (rc == LK_EAGAIN)
    atomic_fetch_add_explicit(&b->waited, 1, memory_order_relaxed);
  else if (rc == LK_EBULKHEAD_FULL)
    atomic_fetch_add_explicit(&b->rejected_full, 1, memory_order_relaxed);
  return rc;
}

bool lk_bulkhead_waiter_granted(lk_bulkhead *b, lk_bulkhead_waiter *bw) {
  waiter *w = waiter_of(bw);
  pthread_mutex_lock(&b->mu);
  bool g = w->granted;
  pthread_mutex_unlock(&b->mu);
  return g;
}

bool lk_bulkhead_waiter_cancel(lk_bulkhead *b, lk_bulkhead_waiter *bw) {
  waiter *w = waiter_of(bw);
  pthread_mutex_lock(&b->mu);
  bool was_queued = w->queued;
  if (was_queued) {
    /* as a blocking waiter's timeout: in use unchanged, one fewer waits */
    unlink_locked(b, w);
    w->queued = false;
    atomic_fetch_sub_explicit(&b->state, WAITER_ONE, memory_order_relaxed);
  }
  bool granted = w->granted;
  w->granted = false;
  pthread_mutex_unlock(&b->mu);
  return !granted;
}

void lk_bulkhead_release(lk_bulkhead *b) {
  uint64_t s = atomic_load_explicit(&b->state, memory_order_relaxed);
  for (;;) {
    if (waiters_of(s) != 0)
      break;
    if (in_use_of(s) == 0)
      return;
    if (atomic_compare_exchange_weak_explicit(&b->state, &s, s - 1, memory_order_release,
                                              memory_order_relaxed))
      return;
  }
  /* Someone waits: free the slot and hand it over under the mutex. */
  pthread_mutex_lock(&b->mu);
  s = atomic_load_explicit(&b->state, memory_order_relaxed);
  while (in_use_of(s) != 0 &&
         !atomic_compare_exchange_weak_explicit(&b->state, &s, s - 1, memory_order_acq_rel,
                                                memory_order_relaxed)) {
  }
  grant_locked(b);
  pthread_mutex_unlock(&b->mu);
}

int lk_bulkhead_set_max(lk_bulkhead *b, int64_t max_concurrent) {
  if (!b || max_concurrent < 1 || max_concurrent > LK_BULKHEAD_LIMIT_MAX)
    return LK_EINVAL;
  uint64_t s = atomic_load_explicit(&b->state, memory_order_relaxed);
  uint64_t m = (uint64_t)max_concurrent << MAX_SHIFT;
  while (!atomic_compare_exchange_weak_explicit(&b->state, &s, (s & ~(FIELD_MASK << MAX_SHIFT)) | m,
                                                memory_order_acq_rel, memory_order_relaxed)) {
  }
  /* A raised limit may let queued callers in; nobody else would wake them. */
  if (waiters_of(s) != 0 && (uint64_t)max_concurrent > max_of(s)) {
    pthread_mutex_lock(&b->mu);
    grant_locked(b);
    pthread_mutex_unlock(&b->mu);
  }
  return LK_OK;
}

static uint64_t state_of(const lk_bulkhead *b) {
  return atomic_load_explicit(&b->state, memory_order_relaxed);
}

int64_t lk_bulkhead_max(const lk_bulkhead *b) { return (int64_t)max_of(state_of(b)); }
int64_t lk_bulkhead_in_use(const lk_bulkhead *b) { return (int64_t)in_use_of(state_of(b)); }
int64_t lk_bulkhead_queue_depth(const lk_bulkhead *b) { return (int64_t)waiters_of(state_of(b)); }

void lk_bulkhead_get_stats(const lk_bulkhead *b, lk_bulkhead_stats *out) {
  const lk_bulkhead *m = b;
  uint64_t s = state_of(b);
  out->in_use = (int64_t)in_use_of(s);
  out->queue_depth = (int64_t)waiters_of(s);
  out->max_concurrent = (int64_t)max_of(s);
  out->waited = atomic_load_explicit(&m->waited, memory_order_relaxed);
  out->rejected_full = atomic_load_explicit(&m->rejected_full, memory_order_relaxed);
  out->rejected_deadline = atomic_load_explicit(&m->rejected_deadline, memory_order_relaxed);
  out->wait_total_ns = atomic_load_explicit(&m->wait_total, memory_order_relaxed);
  out->wait_last_ns = atomic_load_explicit(&m->wait_last, memory_order_relaxed);
}
