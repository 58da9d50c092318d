/* SPDX-License-Identifier: MIT */
/* linkd/metrics.h: a registry of counters, gauges and histograms, rendered as Prometheus text
 * exposition format 0.0.4.
 *
 * A metric is a family (name, help, type, label names) with one series per distinct set of label
 * values. Registering the same name + label values again returns the same object, so independent
 * components can ask for "their" series without coordinating. Objects live as long as the
 * registry: never free them, never use them after lk_metrics_free.
 *
 * Names (checked at registration; a bad one makes the call return NULL):
 *  - metric names match [a-zA-Z_:][a-zA-Z0-9_:]*; label names [a-zA-Z_][a-zA-Z0-9_]* and must not
 *    start with "__" or repeat within a series;
 *  - counters must end in "_total"; gauges, histograms and summaries must not;
 *  - histograms may not use the label "le", summaries not "quantile";
 *  - a name may not collide with another family's name or its generated series (name_bucket,
 *    name_sum, name_count of a histogram or summary);
 *  - every series of a family has the same label names in the same order; help must be
 *    non-empty; help and label values must be valid UTF-8 (they are escaped on output).
 *    Registering an existing family again with different help keeps the first help.
 *
 * Units: durations are recorded in ns (the library's unit) and exported in seconds: histograms and
 * summaries divide by their `scale` (default 1e9) on output, and their names should end in
 * "_seconds". Gauges can carry a scale too (lk_metrics_gauge_scaled), e.g. 1e6 to store a ratio
 * as parts per million in an integer.
 *
 * Histogram export. lk_metrics_histogram exports a Prometheus *histogram* (cumulative `le`
 * buckets + _sum + _count), not a summary, because bucket counters can be summed across instances
 * and rated over any window: histogram_quantile(0.99, rate(x_bucket[5m])) is a recent p99, while a
 * summary of an ever-growing HdrHistogram could only show the quantile since process start.
 * The default `le` bounds are 100 us .. 60 s in 1-2.5-5 steps (LK_METRICS_DEFAULT_BOUNDS); pass
 * your own with lk_metrics_histogram_ex. A value on a bound is counted in that bound's bucket;
 * so may be one less than 1/128 above it (its lk_hist bucket starts at or below the bound, see
 * lk_hist_cumulative), never one further above (after clamping into [lowest, highest]: a bound
 * above highest also counts the values clamped down to highest). The in-process histogram
 * still gives exact-to-1 % percentiles (lk_hist_percentile) for the timeout advisor and
 * hedging. A summary export (quantiles 0.5/0.9/0.99/0.999 over everything recorded since
 * creation or lk_hist_reset) is available with LK_METRIC_SUMMARY for processes that want exact
 * quantiles without PromQL.
 *
 * Thread-safety: registration and rendering take the registry's mutex and may run from any thread;
 * updates (lk_counter_add, lk_gauge_*, lk_hist_record) are lock-free atomics, never allocate, and
 * accept NULL as a no-op (so a failed registration degrades to a missing metric, not a crash).
 */
#ifndef LINKD_METRICS_H
#define LINKD_METRICS_H

#include <linkd/common.h>
#include <linkd/hist.h>

LK_BEGIN_DECLS

typedef struct lk_metrics lk_metrics;
typedef struct lk_counter lk_counter; /* monotonically increasing uint64 */
typedef struct lk_gauge lk_gauge;     /* int64 that goes up and down */

/* Creates an empty registry. NULL on out of memory. */
LK_EXPORT lk_metrics *lk_metrics_new(void);
/* Frees the registry and every metric object it handed out. NULL: no-op. Not concurrent with any
 * other use of the registry or its objects. */
LK_EXPORT void lk_metrics_free(lk_metrics *m);

/* Registers (or finds) a counter series. `labels`: NULL or a NULL-terminated array of alternating
 * label name, label value strings (copied), e.g. (const char *const[]){"client", "books", NULL}.
 * Returns NULL on a bad name/label/help (see above), a type conflict, or out of memory. */
LK_EXPORT lk_counter *lk_metrics_counter(lk_metrics *m, const char *name, const char *help,
                                         const char *const *labels);
/* A counter whose exported value is stored / scale (scale > 0 and finite), e.g. scale 1e9 for a
 * counter of busy time added in ns and exported as seconds (name ending in "_seconds_total").
 * Re-registration must use the same scale (else NULL); a family is either scaled or not. */
LK_EXPORT lk_counter *lk_metrics_counter_scaled(lk_metrics *m, const char *name, const char *help,
                                                const char *const *labels, double scale);
/* Registers (or finds) a gauge series; exported value = stored int64 (scale 1). */
LK_EXPORT lk_gauge *lk_metrics_gauge(lk_metrics *m, const char *name, const char *help,
                                     const char *const *labels);
/* A gauge whose exported value is stored / scale (scale > 0 and finite), e.g. scale 1e9 for a
 * gauge set in ns but exported in seconds. Re-registration must use the same scale (else NULL). */
LK_EXPORT lk_gauge *lk_metrics_gauge_scaled(lk_metrics *m, const char *name, const char *help,
                                            const char *const *labels, double scale);
/* Registers (or finds) a histogram series with the default options (lk_hist_opts_init_default):
 * values in ns, range [0, 1 h], exported in seconds as a Prometheus histogram.
 * The returned lk_hist belongs to the registry (do not lk_hist_free it). */
LK_EXPORT lk_hist *lk_metrics_histogram(lk_metrics *m, const char *name, const char *help,
                                        const char *const *labels);

typedef enum lk_metric_hist_type {
  LK_METRIC_HISTOGRAM = 0, /* Prometheus histogram: cumulative le buckets, _sum, _count */
  LK_METRIC_SUMMARY = 1    /* Prometheus summary: quantile series, _sum, _count */
} lk_metric_hist_type;

#define LK_METRICS_MAX_BOUNDS 64
#define LK_METRICS_MAX_QUANTILES 16

/* Options for lk_metrics_histogram_ex. Plain struct; set defaults with lk_hist_opts_init_default.
 */
typedef struct lk_hist_opts {
  lk_metric_hist_type type; /* default LK_METRIC_HISTOGRAM */
  int64_t lowest;           /* recording range, see lk_hist_new; default 0 */
  int64_t highest;          /* default 3600 s in ns */
  double scale;             /* exported value = recorded / scale; default 1e9 (ns -> s) */
  /* Histogram: ascending upper bounds in exported units (+Inf is implicit). Default: the
   * LK_METRICS_DEFAULT_BOUNDS (18 bounds). Bounds convert to recorded units as bound * scale,
   * rounded to the nearest integer. */
  double bounds[LK_METRICS_MAX_BOUNDS];
  size_t n_bounds;
  /* Summary: quantiles in [0, 1], ascending. Default 0.5, 0.9, 0.99, 0.999. */
  double quantiles[LK_METRICS_MAX_QUANTILES];
  size_t n_quantiles;
} lk_hist_opts;

/* 100 us .. 60 s, 1-2.5-5 steps, in seconds. */
#define LK_METRICS_DEFAULT_BOUNDS                                                                  \
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, \
      25, 60

/* Sets every field to its default (see the struct). */
LK_EXPORT void lk_hist_opts_init_default(lk_hist_opts *o);

/* Registers (or finds) a histogram or summary series with explicit options (copied). A family's
 * options are fixed by its first registration; later registrations of the same name must pass
 * equal options (else NULL). Returns NULL also for bad options (range, scale, bounds not strictly
 * ascending or not finite, quantiles outside [0, 1], too many). */
LK_EXPORT lk_hist *lk_metrics_histogram_ex(lk_metrics *m, const char *name, const char *help,
                                           const char *const *labels, const lk_hist_opts *opts);

/* Leaves one series out of the exposition: `series` is what lk_metrics_counter*,
 * lk_metrics_gauge* or lk_metrics_histogram* returned. For a series whose subject is gone (an
 * upstream removed by a reload, say), whose gauge nobody sets any more and would otherwise show
 * its last value forever. The object stays valid and updatable (nothing is freed: a thread still
 * holding it is safe); registering the same name and label values again returns the same object
 * and shows it again, with its value. A family whose every series is hidden is left out
 * entirely (no HELP or TYPE without a sample). Returns LK_OK, LK_EINVAL (NULL m or series) or
 * LK_ENOTFOUND (not a series of m). */
LK_EXPORT int lk_metrics_hide(lk_metrics *m, const void *series);

/* Adds n to the counter (wraps at 2^64). Lock-free; NULL: no-op. */
LK_EXPORT void lk_counter_add(lk_counter *c, uint64_t n);
/* The current value (0 for NULL). */
LK_EXPORT uint64_t lk_counter_value(const lk_counter *c);
/* Sets / adds to the gauge (the stored int64, before scale). Lock-free; NULL: no-op. lk_gauge_add
 * saturates at INT64_MIN / INT64_MAX. */
LK_EXPORT void lk_gauge_set(lk_gauge *g, int64_t v);
LK_EXPORT void lk_gauge_add(lk_gauge *g, int64_t delta);
/* The stored value (0 for NULL). */
LK_EXPORT int64_t lk_gauge_value(const lk_gauge *g);

/* Renders every family, in registration order, as Prometheus text exposition format 0.0.4
 * (Content-Type: text/plain; version=0.0.4; charset=utf-8) into a malloc'd, NUL-terminated buffer
 * the caller frees with free(). *len receives the length without the NUL (len may be NULL).
 * Returns LK_OK, LK_EINVAL (NULL m/out) or LK_ENOMEM (*out is then NULL). */
LK_EXPORT int lk_metrics_render(lk_metrics *m, char **out, size_t *len);

/* Checks a metric / label name against the rules above (type-independent part). */
LK_EXPORT bool lk_metrics_valid_name(const char *name);
LK_EXPORT bool lk_metrics_valid_label_name(const char *name);

LK_END_DECLS

#endif
