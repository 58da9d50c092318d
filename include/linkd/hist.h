/* SPDX-License-Identifier: MIT */
/* linkd/hist.h: log-linear histogram of int64 values (latencies in ns, typically).
 *
 * HdrHistogram's layout: values are split into power-of-two ranges, each cut into 128 equal
 * sub-buckets, so a bucket is never wider than 1/128 of the values it holds. Every value in
 * [lowest, highest] is therefore reported within 0.8 % (< 1 %) of what was recorded, for any
 * magnitude, with memory fixed at creation (about 128 counters of 8 bytes per power of two
 * between lowest and highest: 1 ns .. 1 h is about 37 KiB).
 *
 * Values outside [lowest, highest] are clamped to the nearest bound and counted
 * (lk_hist_underflows / lk_hist_overflows), never dropped. Counts and the sum saturate: past
 * UINT64_MAX they stay at UINT64_MAX instead of wrapping to a small number.
 *
 * Percentiles use the nearest-rank rule and report the highest value that is equivalent to the
 * bucket holding the rank (clamped to the exact recorded max), so at most (100 - q) % of the
 * recorded values are greater than lk_hist_percentile(h, q): a timeout chosen from it never times
 * out more of the observed sample than asked for.
 *
 * Thread-safety: recording (lk_hist_record, lk_hist_record_n, and lk_hist_merge into a histogram)
 * is lock-free and safe from any number of threads at once; readers may run concurrently with
 * recorders and see a recent, possibly slightly torn, snapshot (count, sum and buckets are separate
 * relaxed atomics). lk_hist_reset concurrent with recording loses or keeps those records
 * arbitrarily but never corrupts the histogram. Nothing here allocates except lk_hist_new.
 */
#ifndef LINKD_HIST_H
#define LINKD_HIST_H

#include <linkd/common.h>

LK_BEGIN_DECLS

typedef struct lk_hist lk_hist;

/* Alignment required of the memory passed to lk_hist_init (one cache line). */
#define LK_HIST_ALIGN 64

/* Creates a histogram for values in [lowest, highest].
 * lowest >= 0 and highest > lowest; lowest only sets how coarse the smallest buckets may be (the
 * 1 % bound holds from lowest upwards; 0 and 1 keep every value < 256 exact).
 * Returns NULL on bad arguments or out of memory. Free with lk_hist_free. */
LK_EXPORT lk_hist *lk_hist_new(int64_t lowest, int64_t highest);

/* Bytes lk_hist_init needs for this range, or 0 on bad arguments. */
LK_EXPORT size_t lk_hist_memsize(int64_t lowest, int64_t highest);

/* Builds a histogram in caller-provided memory `mem` (LK_HIST_ALIGN-aligned, `size` bytes, at least
 * lk_hist_memsize(lowest, highest)), e.g. a static buffer. *out receives the handle.
 * Returns LK_OK, LK_EINVAL (bad range, NULL, misaligned) or LK_ERANGE (size too small).
 * The caller keeps ownership of `mem`; lk_hist_free on such a histogram does nothing. */
LK_EXPORT int lk_hist_init(void *mem, size_t size, int64_t lowest, int64_t highest, lk_hist **out);

/* Frees a histogram made by lk_hist_new. NULL and lk_hist_init histograms: no-op. */
LK_EXPORT void lk_hist_free(lk_hist *h);

/* Records one value (clamped into [lowest, highest]). Lock-free, no allocation. NULL: no-op. */
LK_EXPORT void lk_hist_record(lk_hist *h, int64_t value);
/* Records `n` occurrences of `value`. Lock-free, no allocation. NULL or n == 0: no-op. */
LK_EXPORT void lk_hist_record_n(lk_hist *h, int64_t value, uint64_t n);

/* The value at percentile q (q in [0, 100], e.g. 99.9; clamped into that range, NaN counts as 0):
 * the smallest bucket such that at least q % of the values are in it or below, reported as that
 * bucket's highest equivalent value and clamped to [min, max]. q == 0 gives min, q == 100 gives
 * max. Returns 0 for an empty histogram. */
LK_EXPORT int64_t lk_hist_percentile(const lk_hist *h, double q);

/* Number of values recorded (including clamped ones). 0 for NULL. */
LK_EXPORT uint64_t lk_hist_count(const lk_hist *h);
/* Exact smallest / largest value recorded (after clamping); 0 when empty. */
LK_EXPORT int64_t lk_hist_min(const lk_hist *h);
LK_EXPORT int64_t lk_hist_max(const lk_hist *h);
/* Exact sum of the recorded (clamped) values; UINT64_MAX once it would pass it. */
LK_EXPORT uint64_t lk_hist_sum(const lk_hist *h);
/* sum / count; 0.0 when empty. */
LK_EXPORT double lk_hist_mean(const lk_hist *h);
/* How many recorded values were below lowest / above highest (and were clamped). */
LK_EXPORT uint64_t lk_hist_underflows(const lk_hist *h);
LK_EXPORT uint64_t lk_hist_overflows(const lk_hist *h);
/* The range given at creation. */
LK_EXPORT int64_t lk_hist_lowest(const lk_hist *h);
LK_EXPORT int64_t lk_hist_highest(const lk_hist *h);

/* The smallest and largest values that share value's bucket (value clamped into the range first).
 * Two values are reported identically exactly when they have the same lowest equivalent. */
LK_EXPORT int64_t lk_hist_lowest_equivalent(const lk_hist *h, int64_t value);
LK_EXPORT int64_t lk_hist_highest_equivalent(const lk_hist *h, int64_t value);

/* Cumulative counts in one pass: counts[i] = number of values whose bucket starts at or below
 * bounds[i] (so values within 1 % above a bound may be included). `bounds` must be ascending.
 * *total (if not NULL) receives the total of the same pass, so counts[i] <= *total always.
 * Returns LK_OK or LK_EINVAL (NULL h/bounds/counts with n > 0, or bounds not ascending). */
LK_EXPORT int lk_hist_cumulative(const lk_hist *h, const int64_t *bounds, size_t n,
                                 uint64_t *counts, uint64_t *total);

/* Adds every value of src into dst. Same range: bucket counts are added exactly. Different range:
 * each source bucket is re-recorded at its lowest value, clamped into dst's range (and counted
 * as under/overflow there), which keeps the 1 % bound. sum, min and max merge exactly. Lock-free
 * with respect to recorders of dst; src may be recorded into concurrently (its snapshot is merged).
 * Returns LK_OK or LK_EINVAL (NULL, or dst == src). */
LK_EXPORT int lk_hist_merge(lk_hist *dst, const lk_hist *src);

/* Forgets every value (count, sum, min, max, under/overflows, buckets). NULL: no-op. */
LK_EXPORT void lk_hist_reset(lk_hist *h);

LK_END_DECLS

#endif
