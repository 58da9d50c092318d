/* SPDX-License-Identifier: MIT */
/* The breaker's sliding windows (Resilience4j's two kinds, subtract-on-evict, O(1) snapshots).
 *
 * COUNT: a ring of the last n outcomes. A record takes a sequence number (slot = seq % n),
 * swaps its outcome into the slot (CAS) and, only when the evicted outcome differs, applies the
 * difference to the packed failed/slow totals; calls = min(seq, n). Slots and totals carry the
 * period they belong to, so a window is reset in O(1) and a record from an earlier period cannot
 * corrupt a later one. Steady state (a success replacing a success) is two atomic operations.
 *
 * TIME: one bucket per second; the sums of the completed seconds are recomputed under the lock
 * when the head moves to a new second (once a second at most) and published with a seqlock, so a
 * record adds to its bucket and reads the snapshot: no lock, and no drift ever accumulates. */
#include "breaker_internal.h"

#include <sched.h>

#define RELAXED memory_order_relaxed

/* --- COUNT ------------------------------------------------------------------------------------ */

#define FIELD_MASK ((UINT64_C(1) << 24) - 1)

static int64_t sext24(uint64_t v) {
  v &= FIELD_MASK;
  return (v & (UINT64_C(1) << 23)) ? (int64_t)v - (INT64_C(1) << 24) : (int64_t)v;
}

static uint64_t totals_pack(uint64_t tag, int64_t failed, int64_t slow) {
  return (tag & 0xffffu) << 48 | ((uint64_t)failed & FIELD_MASK) << 24 |
         ((uint64_t)slow & FIELD_MASK);
}

static int64_t clampi(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static bool count_record(lk_breaker *b, uint64_t period, unsigned outcome, lk_bk_tally *after) {
  bool st = b->st;
  uint64_t i = lk__st_add_u64(st, &b->seq, 1), ix;
  if (st) { /* the slot without a division (a 64-bit one is most of a record's time) */
    ix = b->cursor;
    b->cursor = ix + 1 == (uint64_t)b->n ? 0 : (uint32_t)ix + 1;
  } else {
    ix = i % (uint64_t)b->n;
  }
  _Atomic uint64_t *slot = &b->slots[ix];
  uint64_t mine = period << 2 | outcome;
  uint64_t old = atomic_load_explicit(slot, RELAXED);
  do {
    if (old >> 2 > period)
      return false; /* a late record of an earlier period: never overwrite a newer one */
  } while (!lk__st_cas_u64(st, slot, &old, mine, RELAXED, RELAXED));
  uint64_t oldp = old >> 2;
  unsigned oldo = 0; /* an empty slot or one from an earlier period contributes nothing */
  if (oldp == period)
    oldo = (unsigned)(old & 3u);
  int64_t calls = i + 1 < (uint64_t)b->n ? (int64_t)(i + 1) : b->n;
  int64_t df = (int64_t)(outcome & LK_BK_FAIL) - (int64_t)(oldo & LK_BK_FAIL);
  int64_t ds = (int64_t)((outcome & LK_BK_SLOW) >> 1) - (int64_t)((oldo & LK_BK_SLOW) >> 1);
  uint64_t tag = period & 0xffffu;
  uint64_t t = atomic_load_explicit(&b->totals, RELAXED);
  if (df == 0 && ds == 0) {
    if (i >= (uint64_t)b->n)
      return false; /* nothing changed: same outcome evicted, window already full */
  } else {
    uint64_t nt;
    do {
      if (t >> 48 != tag)
        return false; /* the window was reset meanwhile: this record is stale */
      nt = totals_pack(tag, sext24(t >> 24) + df, sext24(t) + ds);
    } while (!lk__st_cas_u64(st, &b->totals, &t, nt, RELAXED, RELAXED));
    t = nt;
  }
  if (t >> 48 != tag)
    return false;
  after->calls = calls;
  after->failed = clampi(sext24(t >> 24), 0, calls);
  after->slow = clampi(sext24(t), 0, calls);
  return true;
}

/* --- TIME ------------------------------------------------------------------------------------- */

static int64_t floor_sec(int64_t now) {
  int64_t q = now / LK_NS_PER_S;
  return (now % LK_NS_PER_S != 0 && now < 0) ? q - 1 : q;
}

static lk_bk_bucket *bucket_of(const lk_breaker *b, int64_t sec) {
  int64_t m = sec % b->n;
  return &b->buckets[m < 0 ? m + b->n : m];
}

static void snapshot_read(const lk_breaker *b, int64_t *head, lk_bk_tally *agg) {
  for (unsigned spins = 0;; spins++) {
    uint64_t s1 = atomic_load_explicit(&b->tseq, memory_order_acquire);
    if (!(s1 & 1)) {
      *head = atomic_load_explicit(&b->thead, RELAXED);
      agg->calls = atomic_load_explicit(&b->tcalls, RELAXED);
      agg->failed = atomic_load_explicit(&b->tfailed, RELAXED);
      agg->slow = atomic_load_explicit(&b->tslow, RELAXED);
      atomic_thread_fence(memory_order_acquire);
      if (atomic_load_explicit(&b->tseq, RELAXED) == s1)
        return;
    }
    if (spins > 64)
      sched_yield(); /* the writer holds the lock and was preempted */
  }
}

/* Caller holds mu. */
static void snapshot_write(lk_breaker *b, int64_t head, const lk_bk_tally *agg) {
  uint64_t s = atomic_load_explicit(&b->tseq, RELAXED);
  atomic_store_explicit(&b->tseq, s + 1, RELAXED);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&b->thead, head, RELAXED);
  atomic_store_explicit(&b->tcalls, agg->calls, RELAXED);
  atomic_store_explicit(&b->tfailed, agg->failed, RELAXED);
  atomic_store_explicit(&b->tslow, agg->slow, RELAXED);
  atomic_store_explicit(&b->tseq, s + 2, memory_order_release);
}

static void bucket_clear(lk_bk_bucket *k) {
  /* Rates first, calls last: a concurrent reader sees too few failures, never too many. */
  atomic_store_explicit(&k->failed, 0, RELAXED);
  atomic_store_explicit(&k->slow, 0, RELAXED);
  atomic_store_explicit(&k->calls, 0, RELAXED);
}

static void bucket_add(lk_bk_tally *t, const lk_bk_bucket *k) {
  t->calls += atomic_load_explicit(&k->calls, RELAXED);
  t->failed += atomic_load_explicit(&k->failed, RELAXED);
  t->slow += atomic_load_explicit(&k->slow, RELAXED);
}

/* Whether a record at second `sec` finds its bucket in the window headed by `head`: at the head
 * or behind it (another thread's clock ran ahead), but not from before the whole window. Such a
 * `sec` means the clock stepped back by more than the window; counting it in the head would keep
 * every outcome recorded before the step in the window for as long as the clock went back (a
 * breaker tripping on hour-old failures), so the window starts over at `sec` instead. Seconds
 * are ns / 1e9, so head - n cannot overflow. */
static bool in_window(const lk_breaker *b, int64_t head, int64_t sec) {
  return head != LK_BK_EMPTY && sec <= head && sec > head - b->n;
}

/* Moves the head to second `sec` (at most once a second, or restarts the window there). */
static void time_roll(lk_breaker *b, int64_t sec) {
  pthread_mutex_lock(&b->mu);
  int64_t h = atomic_load_explicit(&b->thead, RELAXED);
  if (!in_window(b, h, sec)) {
    /* Seconds are ns / 1e9, so sec - h cannot overflow. */
    int64_t steps = (h == LK_BK_EMPTY || sec <= h || sec - h >= b->n) ? b->n : sec - h;
    for (int64_t s = sec - steps + 1; s <= sec; s++)
      bucket_clear(bucket_of(b, s));
    lk_bk_tally agg = {0, 0, 0};
    lk_bk_bucket *head = bucket_of(b, sec);
    for (int i = 0; i < b->n; i++)
      if (&b->buckets[i] != head)
        bucket_add(&agg, &b->buckets[i]);
    snapshot_write(b, sec, &agg);
  }
  pthread_mutex_unlock(&b->mu);
}

static bool time_record(lk_breaker *b, int64_t now, unsigned outcome, lk_bk_tally *after) {
  int64_t sec = floor_sec(now), head;
  lk_bk_tally agg;
  lk_bk_bucket *k;
  if (b->st && in_window(b, b->st_head, sec)) {
    agg = b->st_agg; /* nobody else moves the head: the snapshot is still the one last read */
    k = b->st_bucket;
  } else {
    for (;;) {
      snapshot_read(b, &head, &agg);
      if (in_window(b, head, sec))
        break; /* a record from before the head (another thread's clock ran ahead) counts now */
      time_roll(b, sec);
    }
    k = bucket_of(b, head);
    if (b->st) {
      b->st_head = head;
      b->st_agg = agg;
      b->st_bucket = k;
    }
  }
  /* Calls first: a concurrent evaluation sees too few failures, never too many. */
  lk__st_add_i64(b->st, &k->calls, 1);
  if (outcome & LK_BK_FAIL)
    lk__st_add_i64(b->st, &k->failed, 1);
  if (outcome & LK_BK_SLOW)
    lk__st_add_i64(b->st, &k->slow, 1);
  *after = agg;
  bucket_add(after, k);
  return true;
}

/* --- shared ----------------------------------------------------------------------------------- */

void lk__bk_window_reset(lk_breaker *b, uint64_t period) {
  if (b->wkind == LK_BREAKER_WINDOW_COUNT) {
    atomic_store_explicit(&b->totals, totals_pack(period, 0, 0), RELAXED);
    atomic_store_explicit(&b->seq, 0, RELAXED);
    b->cursor = 0;
    return;
  }
  b->st_head = LK_BK_EMPTY;
  for (int i = 0; i < b->n; i++)
    bucket_clear(&b->buckets[i]);
  lk_bk_tally zero = {0, 0, 0};
  snapshot_write(b, LK_BK_EMPTY, &zero);
}

bool lk__bk_window_record(lk_breaker *b, uint64_t period, int64_t now, unsigned outcome,
                          lk_bk_tally *after) {
  if (b->wkind == LK_BREAKER_WINDOW_COUNT)
    return count_record(b, period, outcome, after);
  return time_record(b, now, outcome, after);
}

void lk__bk_window_tally(const lk_breaker *b, int64_t now, lk_bk_tally *out) {
  out->calls = out->failed = out->slow = 0;
  if (b->wkind == LK_BREAKER_WINDOW_COUNT) {
    uint64_t seq = atomic_load_explicit(&b->seq, RELAXED);
    uint64_t t = atomic_load_explicit(&b->totals, RELAXED);
    out->calls = seq < (uint64_t)b->n ? (int64_t)seq : b->n;
    out->failed = clampi(sext24(t >> 24), 0, out->calls);
    out->slow = clampi(sext24(t), 0, out->calls);
    return;
  }
  int64_t head, sec = floor_sec(now);
  lk_bk_tally agg;
  snapshot_read(b, &head, &agg);
  if (head == LK_BK_EMPTY || sec <= head - b->n)
    return; /* before the whole window: empty, as the next record there would find it */
  if (sec <= head) {
    *out = agg;
    bucket_add(out, bucket_of(b, head));
    return;
  }
  /* `now` is past the head: only the seconds still inside the window count. */
  int64_t from = sec - b->n + 1 > head - b->n + 1 ? sec - b->n + 1 : head - b->n + 1;
  for (int64_t s = from; s <= head; s++)
    bucket_add(out, bucket_of(b, s));
}
