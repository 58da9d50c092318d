/* SPDX-License-Identifier: MIT */
/* Log-linear histogram (HdrHistogram's bucket layout, 128 sub-buckets per power of two). */
#include <linkd/error.h>
#include <linkd/hist.h>

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* 256 sub-buckets in the first (linear) range, 128 in each later power of two: a bucket is at
 * most 1/128 of its smallest value wide, which is what keeps the error under 1 %. */
#define SUB_BITS 8
#define HALF_BITS (SUB_BITS - 1)
#define HALF_COUNT (1u << HALF_BITS)
/* count and sum live in a few stripes (picked by bucket) so threads recording different values
 * do not all bounce one cache line. */
#define STRIPES 4

typedef struct stripe {
  _Atomic uint64_t count;
  _Atomic uint64_t sum;
  char pad[LK_HIST_ALIGN - 2 * sizeof(uint64_t)];
} stripe;

struct lk_hist {
  int64_t lowest;
  int64_t highest;
  uint32_t unit; /* log2 of the first range's bucket width */
  uint32_t n_counts;
  bool owned;
  _Alignas(LK_HIST_ALIGN) _Atomic int64_t min;
  _Atomic int64_t max;
  _Atomic uint64_t under;
  _Atomic uint64_t over;
  _Alignas(LK_HIST_ALIGN) stripe stripes[STRIPES];
  _Alignas(LK_HIST_ALIGN) _Atomic uint64_t counts[];
};

#define RELAXED memory_order_relaxed

/* Counts and sums stick at UINT64_MAX instead of wrapping (a huge lk_hist_record_n, a merge into
 * a full histogram, a sum of many values near the top of the range): a wrapped count would read
 * as a few values, a wrapped sum as a small mean. On the common path this costs one compare. */
static inline uint64_t sat_u64(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* A wrap is seen by the adder that caused it, which pins the counter; an adder that raced with it
 * only adds to a value about to be pinned (readers may see it in between: a torn snapshot). */
static inline void sat_fetch_add(_Atomic uint64_t *p, uint64_t n) {
  uint64_t old = atomic_fetch_add_explicit(p, n, RELAXED);
  if (old + n < old)
    atomic_store_explicit(p, UINT64_MAX, RELAXED);
}

static int msb64(uint64_t v) { return 63 - __builtin_clzll(v); }

static uint32_t index_of(uint32_t unit, uint64_t v) {
  /* OR-ing the first range's mask makes every value below 256 << unit land in range 0. */
  int range = msb64(v | ((uint64_t)255 << unit)) - (int)unit - HALF_BITS;
  uint64_t sub = v >> ((unsigned)range + unit);
  return (uint32_t)range * HALF_COUNT + (uint32_t)sub;
}

static uint64_t lowest_of(uint32_t unit, uint32_t i) {
  if (i < 2 * HALF_COUNT)
    return (uint64_t)i << unit;
  uint32_t range = (i >> HALF_BITS) - 1;
  uint64_t sub = (i & (HALF_COUNT - 1)) + HALF_COUNT;
  return sub << (range + unit);
}

static uint64_t width_of(uint32_t unit, uint32_t i) {
  uint32_t range = i < 2 * HALF_COUNT ? 0 : (i >> HALF_BITS) - 1;
  return (uint64_t)1 << (range + unit);
}

static bool valid_range(int64_t lowest, int64_t highest) { return lowest >= 0 && highest > lowest; }

static uint32_t unit_for(int64_t lowest) {
  /* Widest first-range bucket that still keeps `lowest` within 1/128. */
  if (lowest < (int64_t)HALF_COUNT)
    return 0;
  return (uint32_t)(msb64((uint64_t)lowest) - HALF_BITS);
}

size_t lk_hist_memsize(int64_t lowest, int64_t highest) {
  if (!valid_range(lowest, highest))
    return 0;
  uint32_t n = index_of(unit_for(lowest), (uint64_t)highest) + 1;
  size_t size = sizeof(struct lk_hist) + (size_t)n * sizeof(uint64_t);
  return (size + LK_HIST_ALIGN - 1) / LK_HIST_ALIGN * LK_HIST_ALIGN;
}

static void clear(lk_hist *h) {
  for (uint32_t i = 0; i < h->n_counts; i++)
    atomic_store_explicit(&h->counts[i], 0, RELAXED);
  for (int s = 0; s < STRIPES; s++) {
    atomic_store_explicit(&h->stripes[s].count, 0, RELAXED);
    atomic_store_explicit(&h->stripes[s].sum, 0, RELAXED);
  }
  atomic_store_explicit(&h->min, INT64_MAX, RELAXED);
  atomic_store_explicit(&h->max, INT64_MIN, RELAXED);
  atomic_store_explicit(&h->under, 0, RELAXED);
  atomic_store_explicit(&h->over, 0, RELAXED);
}

int lk_hist_init(void *mem, size_t size, int64_t lowest, int64_t highest, lk_hist **out) {
  if (!mem || !out || !valid_range(lowest, highest) || (uintptr_t)mem % LK_HIST_ALIGN != 0)
    return LK_EINVAL;
  size_t need = lk_hist_memsize(lowest, highest);
  if (size < need)
    return LK_ERANGE;
  memset(mem, 0, need);
  lk_hist *h = mem;
  h->lowest = lowest;
  h->highest = highest;
  h->unit = unit_for(lowest);
  h->n_counts = index_of(h->unit, (uint64_t)highest) + 1;
  h->owned = false;
  clear(h);
  *out = h;
  return LK_OK;
}

lk_hist *lk_hist_new(int64_t lowest, int64_t highest) {
  size_t size = lk_hist_memsize(lowest, highest);
  if (size == 0)
    return NULL;
  void *mem = aligned_alloc(LK_HIST_ALIGN, size);
  if (!mem)
    return NULL;
  lk_hist *h = NULL;
  if (lk_hist_init(mem, size, lowest, highest, &h) != LK_OK) {
    free(mem);
    return NULL;
  }
  h->owned = true;
  return h;
}

void lk_hist_free(lk_hist *h) {
  if (h && h->owned)
    free(h);
}

static void update_min_max(lk_hist *h, int64_t v) {
  /* Plain loads first: new extremes are rare, so the shared line is almost never written. */
  int64_t cur = atomic_load_explicit(&h->min, RELAXED);
  while (v < cur && !atomic_compare_exchange_weak_explicit(&h->min, &cur, v, RELAXED, RELAXED)) {
  }
  cur = atomic_load_explicit(&h->max, RELAXED);
  while (v > cur && !atomic_compare_exchange_weak_explicit(&h->max, &cur, v, RELAXED, RELAXED)) {
  }
}

static int64_t clamp_counted(lk_hist *h, int64_t v, uint64_t n) {
  if (v < h->lowest) {
    sat_fetch_add(&h->under, n);
    return h->lowest;
  }
  if (v > h->highest) {
    sat_fetch_add(&h->over, n);
    return h->highest;
  }
  return v;
}

void lk_hist_record_n(lk_hist *h, int64_t value, uint64_t n) {
  if (!h || n == 0)
    return;
  int64_t v = clamp_counted(h, value, n);
  uint32_t i = index_of(h->unit, (uint64_t)v);
  uint64_t add;
  if (__builtin_mul_overflow((uint64_t)v, n, &add))
    add = UINT64_MAX;
  sat_fetch_add(&h->counts[i], n);
  stripe *s = &h->stripes[i % STRIPES];
  sat_fetch_add(&s->count, n);
  sat_fetch_add(&s->sum, add);
  update_min_max(h, v);
}

void lk_hist_record(lk_hist *h, int64_t value) { lk_hist_record_n(h, value, 1); }

uint64_t lk_hist_count(const lk_hist *h) {
  if (!h)
    return 0;
  uint64_t c = 0;
  for (int s = 0; s < STRIPES; s++)
    c = sat_u64(c, atomic_load_explicit(&h->stripes[s].count, RELAXED));
  return c;
}

uint64_t lk_hist_sum(const lk_hist *h) {
  if (!h)
    return 0;
  uint64_t sum = 0;
  for (int s = 0; s < STRIPES; s++)
    sum = sat_u64(sum, atomic_load_explicit(&h->stripes[s].sum, RELAXED));
  return sum;
}

double lk_hist_mean(const lk_hist *h) {
  uint64_t c = lk_hist_count(h);
  return c ? (double)lk_hist_sum(h) / (double)c : 0.0;
}

int64_t lk_hist_min(const lk_hist *h) {
  if (!h)
    return 0;
  int64_t v = atomic_load_explicit(&h->min, RELAXED);
  int64_t mx = atomic_load_explicit(&h->max, RELAXED);
  return v <= mx ? v : 0; /* min > max only while empty */
}

int64_t lk_hist_max(const lk_hist *h) {
  if (!h)
    return 0;
  int64_t v = atomic_load_explicit(&h->max, RELAXED);
  int64_t mn = atomic_load_explicit(&h->min, RELAXED);
  return mn <= v ? v : 0;
}

uint64_t lk_hist_underflows(const lk_hist *h) {
  return h ? atomic_load_explicit(&h->under, RELAXED) : 0;
}

uint64_t lk_hist_overflows(const lk_hist *h) {
  return h ? atomic_load_explicit(&h->over, RELAXED) : 0;
}

int64_t lk_hist_lowest(const lk_hist *h) { return h ? h->lowest : 0; }
int64_t lk_hist_highest(const lk_hist *h) { return h ? h->highest : 0; }

static int64_t clamp_range(const lk_hist *h, int64_t v) {
  return v < h->lowest ? h->lowest : v > h->highest ? h->highest : v;
}

int64_t lk_hist_lowest_equivalent(const lk_hist *h, int64_t value) {
  if (!h)
    return 0;
  uint32_t i = index_of(h->unit, (uint64_t)clamp_range(h, value));
  return (int64_t)lowest_of(h->unit, i);
}

int64_t lk_hist_highest_equivalent(const lk_hist *h, int64_t value) {
  if (!h)
    return 0;
  uint32_t i = index_of(h->unit, (uint64_t)clamp_range(h, value));
  return (int64_t)(lowest_of(h->unit, i) + width_of(h->unit, i) - 1);
}

int64_t lk_hist_percentile(const lk_hist *h, double q) {
  if (!h)
    return 0;
  if (isnan(q) || q < 0)
    q = 0;
  if (q > 100)
    q = 100;
  int64_t mn = atomic_load_explicit(&h->min, RELAXED);
  int64_t mx = atomic_load_explicit(&h->max, RELAXED);
  bool bounded = mn <= mx; /* false when empty or while a reset races with us */
  /* Only buckets between min and max can hold values: scan just those. */
  uint32_t lo_i = bounded ? index_of(h->unit, (uint64_t)mn) : 0;
  uint32_t hi_i = bounded ? index_of(h->unit, (uint64_t)mx) : h->n_counts - 1;
  uint64_t total = 0;
  for (uint32_t i = lo_i; i <= hi_i; i++)
    total = sat_u64(total, atomic_load_explicit(&h->counts[i], RELAXED));
  if (total == 0)
    return 0;
  if (bounded && q == 0)
    return mn;
  if (bounded && q == 100)
    return mx;
  /* Nearest rank; the tiny relative slack stops 99.9 % of 1000 from rounding up to 1000. */
  double t = q / 100.0 * (double)total;
  double r = ceil(t - t * 1e-12);
  uint64_t target = r < 1 ? 1 : r >= (double)total ? total : (uint64_t)r;
  /* The answer is the first bucket where the running count reaches target. High percentiles find
   * it sooner from the top: skip buckets while the values above stay within total - target. */
  uint32_t i;
  if (target > total / 2) {
    uint64_t tail = 0, allowed = total - target;
    i = hi_i;
    while (i > lo_i) {
      uint64_t c = atomic_load_explicit(&h->counts[i], RELAXED);
      if (sat_u64(tail, c) > allowed)
        break;
      tail += c;
      i--;
    }
  } else {
    uint64_t cum = 0;
    for (i = lo_i; i < hi_i; i++) {
      cum = sat_u64(cum, atomic_load_explicit(&h->counts[i], RELAXED));
      if (cum >= target)
        break;
    }
  }
  int64_t v = (int64_t)(lowest_of(h->unit, i) + width_of(h->unit, i) - 1);
  if (v > h->highest) /* the top bucket may reach past highest */
    v = h->highest;
  if (bounded && v > mx)
    v = mx;
  if (bounded && v < mn)
    v = mn;
  return v;
}

int lk_hist_cumulative(const lk_hist *h, const int64_t *bounds, size_t n, uint64_t *counts,
                       uint64_t *total) {
  if (!h || (n > 0 && (!bounds || !counts)))
    return LK_EINVAL;
  for (size_t j = 1; j < n; j++)
    if (bounds[j] < bounds[j - 1])
      return LK_EINVAL;
  for (size_t j = 0; j < n; j++)
    counts[j] = 0;
  /* Each bucket's count goes to the first bound at or above its lowest value; a prefix sum then
   * turns those into cumulative counts, all from one read of each bucket. */
  uint64_t all = 0;
  size_t j = 0;
  for (uint32_t i = 0; i < h->n_counts; i++) {
    uint64_t c = atomic_load_explicit(&h->counts[i], RELAXED);
    if (c == 0)
      continue;
    int64_t lo = (int64_t)lowest_of(h->unit, i);
    while (j < n && bounds[j] < lo)
      j++;
    if (j < n)
      counts[j] = sat_u64(counts[j], c);
    all = sat_u64(all, c);
  }
  for (size_t k = 1; k < n; k++)
    counts[k] = sat_u64(counts[k], counts[k - 1]);
  if (total)
    *total = all;
  return LK_OK;
}

int lk_hist_merge(lk_hist *dst, const lk_hist *src) {
  if (!dst || !src || dst == src)
    return LK_EINVAL;
  bool same = dst->lowest == src->lowest && dst->highest == src->highest;
  uint64_t merged = 0;
  for (uint32_t i = 0; i < src->n_counts; i++) {
    uint64_t c = atomic_load_explicit(&src->counts[i], RELAXED);
    if (c == 0)
      continue;
    merged = sat_u64(merged, c);
    uint32_t di = i;
    if (!same) {
      /* The bucket's lowest value: dst then reports at most 1/128 above it and the source values
       * were at most 1/128 above it, so the 1 % bound survives re-binning. Clamped into src's
       * range first: the first bucket may start below src->lowest, where no recorded value
       * lies, and such a value is no underflow of a dst whose range holds src->lowest. */
      int64_t v = clamp_counted(dst, clamp_range(src, (int64_t)lowest_of(src->unit, i)), c);
      di = index_of(dst->unit, (uint64_t)v);
    }
    sat_fetch_add(&dst->counts[di], c);
  }
  if (merged == 0)
    return LK_OK;
  if (same) {
    sat_fetch_add(&dst->under, lk_hist_underflows(src));
    sat_fetch_add(&dst->over, lk_hist_overflows(src));
  }
  sat_fetch_add(&dst->stripes[0].count, merged);
  sat_fetch_add(&dst->stripes[0].sum, lk_hist_sum(src));
  int64_t mn = atomic_load_explicit(&src->min, RELAXED);
  int64_t mx = atomic_load_explicit(&src->max, RELAXED);
  if (mn <= mx) {
    update_min_max(dst, clamp_range(dst, mn));
    update_min_max(dst, clamp_range(dst, mx));
  }
  return LK_OK;
}

void lk_hist_reset(lk_hist *h) {
  if (h)
    clear(h);
}
