/* SPDX-License-Identifier: MIT */
/* Metrics registry: families of counters, gauges and histograms; Prometheus text 0.0.4 output. */
#include <linkd/error.h>
#include <linkd/metrics.h>

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_LINE 64

/* One cache line per value, so hot counters updated by different threads never share a line. */
struct lk_counter {
  _Alignas(CACHE_LINE) _Atomic uint64_t v;
};
struct lk_gauge {
  _Alignas(CACHE_LINE) _Atomic int64_t v;
};

typedef enum fam_type { FAM_COUNTER, FAM_GAUGE, FAM_HIST } fam_type;

typedef struct series {
  struct series *next;
  char **values; /* family's n_labels label values */
  void *obj;     /* lk_counter *, lk_gauge * or lk_hist * */
  bool hidden;   /* lk_metrics_hide: left out of the exposition until registered again */
} series;

typedef struct family {
  struct family *next;
  char *name;
  char *help;
  fam_type type;
  size_t n_labels;
  char **label_names;
  double scale; /* exported = stored / scale (1 for plain counters and gauges) */
  lk_hist_opts opts;
  int64_t bound_units[LK_METRICS_MAX_BOUNDS]; /* histogram bounds in recorded units */
  series *head, *tail;
} family;

struct lk_metrics {
  pthread_mutex_t mu;
  family *head, *tail;
};

/* ---- names, labels and text validity ------------------------------------------------------- */

static bool is_alpha_(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool lk_metrics_valid_name(const char *name) {
  if (!name || !*name || !(is_alpha_(name[0]) || name[0] == ':'))
    return false;
  for (const char *p = name + 1; *p; p++)
    if (!(is_alpha_(*p) || is_digit(*p) || *p == ':'))
      return false;
  return true;
}

bool lk_metrics_valid_label_name(const char *name) {
  if (!name || !*name || !is_alpha_(name[0]) || strncmp(name, "__", 2) == 0)
    return false;
  for (const char *p = name + 1; *p; p++)
    if (!(is_alpha_(*p) || is_digit(*p)))
      return false;
  return true;
}

/* Strict UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF). */
static bool valid_utf8(const char *str) {
  const unsigned char *s = (const unsigned char *)str;
  while (*s) {
    unsigned char c = *s;
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      s++;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1, cp = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2, cp = c & 0x0Fu;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3, cp = c & 0x07u;
    } else {
      return false;
    }
    for (size_t i = 1; i <= n; i++) {
      if ((s[i] & 0xC0) != 0x80)
        return false;
      cp = (cp << 6) | (s[i] & 0x3Fu);
    }
    if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
      return false;
    s += n + 1;
  }
  return true;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Checks the label array; *n_out receives the number of pairs. */
static bool valid_labels(const char *const *labels, fam_type type, lk_metric_hist_type ht,
                         size_t *n_out) {
  size_t n = 0;
  if (labels) {
    for (; labels[2 * n]; n++) {
      const char *k = labels[2 * n], *v = labels[2 * n + 1];
      if (!v || !lk_metrics_valid_label_name(k) || !valid_utf8(v))
        return false;
      if (type == FAM_HIST && strcmp(k, ht == LK_METRIC_SUMMARY ? "quantile" : "le") == 0)
        return false;
      for (size_t j = 0; j < n; j++)
        if (strcmp(labels[2 * j], k) == 0)
          return false;
    }
  }
  *n_out = n;
  return true;
}

static const char *const hist_suffixes[] = {"_bucket", "_sum", "_count"};

/* Does `name` equal base + one of the generated series suffixes of a histogram/summary? */
static bool is_generated(const char *name, const char *base) {
  size_t bl = strlen(base);
  if (strncmp(name, base, bl) != 0)
    return false;
  for (size_t i = 0; i < sizeof hist_suffixes / sizeof hist_suffixes[0]; i++)
    if (strcmp(name + bl, hist_suffixes[i]) == 0)
      return true;
  return false;
}

static bool collides(const lk_metrics *m, const char *name, fam_type type) {
  for (const family *f = m->head; f; f = f->next) {
    if (f->type == FAM_HIST && is_generated(name, f->name))
      return true;
    if (type == FAM_HIST && is_generated(f->name, name))
      return true;
  }
  return false;
}

static bool valid_hist_opts(const lk_hist_opts *o) {
  if (lk_hist_memsize(o->lowest, o->highest) == 0 || !(o->scale > 0) || !isfinite(o->scale))
    return false;
  if (o->type == LK_METRIC_HISTOGRAM) {
    if (o->n_bounds > LK_METRICS_MAX_BOUNDS)
      return false;
    for (size_t i = 0; i < o->n_bounds; i++) {
      if (!isfinite(o->bounds[i]) || (i > 0 && !(o->bounds[i] > o->bounds[i - 1])))
        return false;
      double units = o->bounds[i] * o->scale;
      if (!(units > -9.2e18 && units < 9.2e18))
        return false;
    }
    return true;
  }
  if (o->type != LK_METRIC_SUMMARY || o->n_quantiles > LK_METRICS_MAX_QUANTILES)
    return false;
  for (size_t i = 0; i < o->n_quantiles; i++)
    if (!(o->quantiles[i] >= 0 && o->quantiles[i] <= 1) ||
        (i > 0 && !(o->quantiles[i] > o->quantiles[i - 1])))
      return false;
  return true;
}

static bool same_hist_opts(const lk_hist_opts *a, const lk_hist_opts *b) {
  if (a->type != b->type || a->lowest != b->lowest || a->highest != b->highest ||
      a->scale != b->scale)
    return false;
  if (a->type == LK_METRIC_HISTOGRAM) {
    if (a->n_bounds != b->n_bounds)
      return false;
    for (size_t i = 0; i < a->n_bounds; i++)
      if (a->bounds[i] != b->bounds[i])
        return false;
    return true;
  }
  if (a->n_quantiles != b->n_quantiles)
    return false;
  for (size_t i = 0; i < a->n_quantiles; i++)
    if (a->quantiles[i] != b->quantiles[i])
      return false;
  return true;
}

void lk_hist_opts_init_default(lk_hist_opts *o) {
  static const double bounds[] = {LK_METRICS_DEFAULT_BOUNDS};
  static const double quantiles[] = {0.5, 0.9, 0.99, 0.999};
  memset(o, 0, sizeof *o);
  o->type = LK_METRIC_HISTOGRAM;
  o->lowest = 0;
  o->highest = LK_SEC(3600);
  o->scale = 1e9;
  o->n_bounds = sizeof bounds / sizeof bounds[0];
  memcpy(o->bounds, bounds, sizeof bounds);
  o->n_quantiles = sizeof quantiles / sizeof quantiles[0];
  memcpy(o->quantiles, quantiles, sizeof quantiles);
}

/* ---- registry ------------------------------------------------------------------------------ */

lk_metrics *lk_metrics_new(void) {
  lk_metrics *m = calloc(1, sizeof *m);
  if (!m)
    return NULL;
  if (pthread_mutex_init(&m->mu, NULL) != 0) {
    free(m);
    return NULL;
  }
  return m;
}

static void free_strings(char **v, size_t n) {
  if (!v)
    return;
  for (size_t i = 0; i < n; i++)
    free(v[i]);
  free(v);
}

static void free_obj(fam_type type, void *obj) {
  if (type == FAM_HIST)
    lk_hist_free(obj);
  else
    free(obj);
}

static void free_family(family *f) {
  series *s = f->head;
  while (s) {
    series *next = s->next;
    free_strings(s->values, f->n_labels);
    free_obj(f->type, s->obj);
    free(s);
    s = next;
  }
  free_strings(f->label_names, f->n_labels);
  free(f->name);
  free(f->help);
  free(f);
}

void lk_metrics_free(lk_metrics *m) {
  if (!m)
    return;
  family *f = m->head;
  while (f) {
    family *next = f->next;
    free_family(f);
    f = next;
  }
  pthread_mutex_destroy(&m->mu);
  free(m);
}

/* Copies labels[offset], labels[offset + 2], ... (n of them). */
static char **copy_strided(const char *const *labels, size_t n, size_t offset) {
  char **v = calloc(n ? n : 1, sizeof *v);
  if (!v)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    v[i] = strdup(labels[2 * i + offset]);
    if (!v[i]) {
      free_strings(v, i);
      return NULL;
    }
  }
  return v;
}

static family *find_family(const lk_metrics *m, const char *name) {
  for (family *f = m->head; f; f = f->next)
    if (strcmp(f->name, name) == 0)
      return f;
  return NULL;
}

static bool same_label_names(const family *f, const char *const *labels, size_t n) {
  if (f->n_labels != n)
    return false;
  for (size_t i = 0; i < n; i++)
    if (strcmp(f->label_names[i], labels[2 * i]) != 0)
      return false;
  return true;
}

static series *find_series(const family *f, const char *const *labels) {
  for (series *s = f->head; s; s = s->next) {
    size_t i = 0;
    while (i < f->n_labels && strcmp(s->values[i], labels[2 * i + 1]) == 0)
      i++;
    if (i == f->n_labels)
      return s;
  }
  return NULL;
}

static family *new_family(const char *name, const char *help, fam_type type,
                          const char *const *labels, size_t n, double scale,
                          const lk_hist_opts *opts) {
  family *f = calloc(1, sizeof *f);
  if (!f)
    return NULL;
  f->type = type;
  f->n_labels = n;
  f->scale = scale;
  if (opts) {
    f->opts = *opts;
    for (size_t i = 0; i < opts->n_bounds; i++)
      f->bound_units[i] = llround(opts->bounds[i] * opts->scale);
  }
  f->name = strdup(name);
  f->help = strdup(help);
  f->label_names = copy_strided(labels, n, 0);
  if (!f->name || !f->help || !f->label_names) {
    free_family(f);
    return NULL;
  }
  return f;
}

static void *new_obj(fam_type type, const lk_hist_opts *opts) {
  if (type == FAM_HIST)
    return lk_hist_new(opts->lowest, opts->highest);
  /* Both value types are one cache line, aligned to it. */
  void *p = aligned_alloc(CACHE_LINE, CACHE_LINE);
  if (!p)
    return NULL;
  memset(p, 0, CACHE_LINE);
  if (type == FAM_COUNTER)
    atomic_init(&((lk_counter *)p)->v, 0);
  else
    atomic_init(&((lk_gauge *)p)->v, 0);
  return p;
}

static void *add_series(family *f, const char *const *labels) {
  series *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->values = copy_strided(labels, f->n_labels, 1);
  s->obj = s->values ? new_obj(f->type, &f->opts) : NULL;
  if (!s->obj) {
    free_strings(s->values, f->n_labels);
    free(s);
    return NULL;
  }
  if (f->tail)
    f->tail->next = s;
  else
    f->head = s;
  f->tail = s;
  return s->obj;
}

/* Finds or creates the series; all validation of the family's shape happens here. */
static void *reg(lk_metrics *m, const char *name, const char *help, const char *const *labels,
                 fam_type type, double scale, const lk_hist_opts *opts) {
  if (!m || !lk_metrics_valid_name(name) || !help || !*help || !valid_utf8(help))
    return NULL;
  bool counter_name = ends_with(name, "_total");
  if ((type == FAM_COUNTER) != counter_name)
    return NULL;
  size_t n;
  if (!valid_labels(labels, type, opts ? opts->type : LK_METRIC_HISTOGRAM, &n))
    return NULL;
  void *obj = NULL;
  pthread_mutex_lock(&m->mu);
  family *f = find_family(m, name);
  if (f) {
    bool same = f->type == type && same_label_names(f, labels, n) &&
                (type == FAM_HIST || f->scale == scale) &&
                (type != FAM_HIST || same_hist_opts(&f->opts, opts));
    if (same) {
      series *s = find_series(f, labels);
      if (s)
        s->hidden = false; /* registered again: its subject is back */
      obj = s ? s->obj : add_series(f, labels);
    }
  } else if (!collides(m, name, type)) {
    f = new_family(name, help, type, labels, n, scale, opts);
    if (f) {
      obj = add_series(f, labels);
      if (obj) {
        if (m->tail)
          m->tail->next = f;
        else
          m->head = f;
        m->tail = f;
      } else {
        free_family(f);
      }
    }
  }
  pthread_mutex_unlock(&m->mu);
  return obj;
}

lk_counter *lk_metrics_counter(lk_metrics *m, const char *name, const char *help,
                               const char *const *labels) {
  return reg(m, name, help, labels, FAM_COUNTER, 1.0, NULL);
}

lk_counter *lk_metrics_counter_scaled(lk_metrics *m, const char *name, const char *help,
                                      const char *const *labels, double scale) {
  if (!(scale > 0) || !isfinite(scale))
    return NULL;
  return reg(m, name, help, labels, FAM_COUNTER, scale, NULL);
}

lk_gauge *lk_metrics_gauge(lk_metrics *m, const char *name, const char *help,
                           const char *const *labels) {
  return reg(m, name, help, labels, FAM_GAUGE, 1.0, NULL);
}

lk_gauge *lk_metrics_gauge_scaled(lk_metrics *m, const char *name, const char *help,
                                  const char *const *labels, double scale) {
  if (!(scale > 0) || !isfinite(scale))
    return NULL;
  return reg(m, name, help, labels, FAM_GAUGE, scale, NULL);
}

lk_hist *lk_metrics_histogram(lk_metrics *m, const char *name, const char *help,
                              const char *const *labels) {
  lk_hist_opts o;
  lk_hist_opts_init_default(&o);
  return lk_metrics_histogram_ex(m, name, help, labels, &o);
}

lk_hist *lk_metrics_histogram_ex(lk_metrics *m, const char *name, const char *help,
                                 const char *const *labels, const lk_hist_opts *opts) {
  if (!opts || !valid_hist_opts(opts))
    return NULL;
  /* Normalise the unused half so equal options compare equal. */
  lk_hist_opts o = *opts;
  if (o.type == LK_METRIC_HISTOGRAM) {
    memset(o.quantiles, 0, sizeof o.quantiles);
    o.n_quantiles = 0;
  } else {
    memset(o.bounds, 0, sizeof o.bounds);
    o.n_bounds = 0;
  }
  return reg(m, name, help, labels, FAM_HIST, o.scale, &o);
}

int lk_metrics_hide(lk_metrics *m, const void *obj) {
  if (!m || !obj)
    return LK_EINVAL;
  int rc = LK_ENOTFOUND;
  pthread_mutex_lock(&m->mu);
  for (family *f = m->head; f && rc != LK_OK; f = f->next)
    for (series *s = f->head; s; s = s->next)
      if (s->obj == obj) {
        s->hidden = true;
        rc = LK_OK;
        break;
      }
  pthread_mutex_unlock(&m->mu);
  return rc;
}

/* ---- updates ------------------------------------------------------------------------------- */

void lk_counter_add(lk_counter *c, uint64_t n) {
  if (c)
    atomic_fetch_add_explicit(&c->v, n, memory_order_relaxed);
}

uint64_t lk_counter_value(const lk_counter *c) {
  return c ? atomic_load_explicit(&c->v, memory_order_relaxed) : 0;
}

void lk_gauge_set(lk_gauge *g, int64_t v) {
  if (g)
    atomic_store_explicit(&g->v, v, memory_order_relaxed);
}

void lk_gauge_add(lk_gauge *g, int64_t delta) {
  if (!g || delta == 0)
    return;
  int64_t cur = atomic_load_explicit(&g->v, memory_order_relaxed), next;
  do {
    if (delta > 0 && cur > INT64_MAX - delta)
      next = INT64_MAX;
    else if (delta < 0 && cur < INT64_MIN - delta)
      next = INT64_MIN;
    else
      next = cur + delta;
  } while (!atomic_compare_exchange_weak_explicit(&g->v, &cur, next, memory_order_relaxed,
                                                  memory_order_relaxed));
}

int64_t lk_gauge_value(const lk_gauge *g) {
  return g ? atomic_load_explicit(&g->v, memory_order_relaxed) : 0;
}

/* ---- rendering ----------------------------------------------------------------------------- */

typedef struct buf {
  char *p;
  size_t len, cap;
  bool oom;
} buf;

static void buf_reserve(buf *b, size_t extra) {
  if (b->oom || b->len + extra + 1 <= b->cap)
    return;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + extra + 1)
    cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) {
    b->oom = true;
    return;
  }
  b->p = p;
  b->cap = cap;
}

static void buf_putn(buf *b, const char *s, size_t n) {
  buf_reserve(b, n);
  if (b->oom)
    return;
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void buf_puts(buf *b, const char *s) { buf_putn(b, s, strlen(s)); }

static void buf_putc(buf *b, char c) { buf_putn(b, &c, 1); }

static void buf_u64(buf *b, uint64_t v) {
  char tmp[24];
  int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
  buf_putn(b, tmp, (size_t)n);
}

static void buf_i64(buf *b, int64_t v) {
  char tmp[24];
  int n = snprintf(tmp, sizeof tmp, "%lld", (long long)v);
  buf_putn(b, tmp, (size_t)n);
}

/* Shortest %g form that reads back as the same double; Prometheus spells infinities +Inf/-Inf. */
static void fmt_double(char *out, size_t size, double v) {
  if (isnan(v)) {
    snprintf(out, size, "NaN");
    return;
  }
  if (isinf(v)) {
    snprintf(out, size, "%s", v > 0 ? "+Inf" : "-Inf");
    return;
  }
  if (v == trunc(v) && fabs(v) < 1e15) {
    snprintf(out, size, "%.0f", v); /* "60", not "6e+01" */
  } else {
    for (int prec = 1; prec <= 17; prec++) {
      snprintf(out, size, "%.*g", prec, v);
      if (strtod(out, NULL) == v)
        break;
    }
  }
  /* printf follows LC_NUMERIC; the exposition format always uses '.'. */
  for (char *p = out; *p; p++)
    if (!is_digit(*p) && *p != 'e' && *p != '-' && *p != '+')
      *p = '.';
}

static void buf_double(buf *b, double v) {
  char tmp[48];
  fmt_double(tmp, sizeof tmp, v);
  buf_puts(b, tmp);
}

/* Label values escape backslash, double quote and newline; HELP escapes backslash and newline. */
static void buf_escaped(buf *b, const char *s, bool quote) {
  for (; *s; s++) {
    if (*s == '\\')
      buf_puts(b, "\\\\");
    else if (*s == '\n')
      buf_puts(b, "\\n");
    else if (quote && *s == '"')
      buf_puts(b, "\\\"");
    else
      buf_putc(b, *s);
  }
}

/* name{k="v",...,extra_key="extra_value"} with braces omitted when there are no labels. */
static void put_series_name(buf *b, const family *f, const series *s, const char *suffix,
                            const char *extra_key, const char *extra_value) {
  buf_puts(b, f->name);
  buf_puts(b, suffix);
  if (f->n_labels == 0 && !extra_key)
    return;
  buf_putc(b, '{');
  for (size_t i = 0; i < f->n_labels; i++) {
    if (i)
      buf_putc(b, ',');
    buf_puts(b, f->label_names[i]);
    buf_puts(b, "=\"");
    buf_escaped(b, s->values[i], true);
    buf_putc(b, '"');
  }
  if (extra_key) {
    if (f->n_labels)
      buf_putc(b, ',');
    buf_puts(b, extra_key);
    buf_puts(b, "=\"");
    buf_puts(b, extra_value);
    buf_putc(b, '"');
  }
  buf_putc(b, '}');
}

static void render_hist(buf *b, const family *f, const series *s) {
  const lk_hist *h = s->obj;
  const lk_hist_opts *o = &f->opts;
  char val[48];
  uint64_t total = 0;
  if (o->type == LK_METRIC_HISTOGRAM) {
    uint64_t counts[LK_METRICS_MAX_BOUNDS];
    lk_hist_cumulative(h, f->bound_units, o->n_bounds, counts, &total);
    for (size_t i = 0; i < o->n_bounds; i++) {
      fmt_double(val, sizeof val, o->bounds[i]);
      put_series_name(b, f, s, "_bucket", "le", val);
      buf_putc(b, ' ');
      buf_u64(b, counts[i]);
      buf_putc(b, '\n');
    }
    put_series_name(b, f, s, "_bucket", "le", "+Inf");
    buf_putc(b, ' ');
    buf_u64(b, total);
    buf_putc(b, '\n');
  } else {
    total = lk_hist_count(h);
    for (size_t i = 0; i < o->n_quantiles; i++) {
      fmt_double(val, sizeof val, o->quantiles[i]);
      put_series_name(b, f, s, "", "quantile", val);
      buf_putc(b, ' ');
      /* Prometheus clients report NaN for quantiles of an empty summary. */
      buf_double(b,
                 total ? (double)lk_hist_percentile(h, o->quantiles[i] * 100.0) / o->scale : NAN);
      buf_putc(b, '\n');
    }
  }
  put_series_name(b, f, s, "_sum", NULL, NULL);
  buf_putc(b, ' ');
  buf_double(b, (double)lk_hist_sum(h) / o->scale);
  buf_putc(b, '\n');
  put_series_name(b, f, s, "_count", NULL, NULL);
  buf_putc(b, ' ');
  buf_u64(b, total);
  buf_putc(b, '\n');
}

static void render_family(buf *b, const family *f) {
  static const char *const type_names[] = {"counter", "gauge", "histogram", "summary"};
  const series *first = f->head;
  while (first && first->hidden)
    first = first->next;
  if (!first) /* every series hidden: no HELP or TYPE without a sample */
    return;
  int t = f->type == FAM_HIST ? (f->opts.type == LK_METRIC_SUMMARY ? 3 : 2) : (int)f->type;
  buf_puts(b, "# HELP ");
  buf_puts(b, f->name);
  buf_putc(b, ' ');
  buf_escaped(b, f->help, false);
  buf_puts(b, "\n# TYPE ");
  buf_puts(b, f->name);
  buf_putc(b, ' ');
  buf_puts(b, type_names[t]);
  buf_putc(b, '\n');
  for (const series *s = first; s; s = s->next) {
    if (s->hidden)
      continue;
    if (f->type == FAM_HIST) {
      render_hist(b, f, s);
      continue;
    }
    put_series_name(b, f, s, "", NULL, NULL);
    buf_putc(b, ' ');
    if (f->type == FAM_COUNTER && f->scale == 1.0)
      buf_u64(b, lk_counter_value(s->obj));
    else if (f->type == FAM_COUNTER)
      buf_double(b, (double)lk_counter_value(s->obj) / f->scale);
    else if (f->scale == 1.0)
      buf_i64(b, lk_gauge_value(s->obj));
    else
      buf_double(b, (double)lk_gauge_value(s->obj) / f->scale);
    buf_putc(b, '\n');
  }
}

int lk_metrics_render(lk_metrics *m, char **out, size_t *len) {
  if (!m || !out)
    return LK_EINVAL;
  buf b = {0};
  buf_reserve(&b, 0);
  if (!b.oom)
    b.p[0] = '\0';
  pthread_mutex_lock(&m->mu);
  for (const family *f = m->head; f && !b.oom; f = f->next)
    render_family(&b, f);
  pthread_mutex_unlock(&m->mu);
  if (b.oom) {
    free(b.p);
    *out = NULL;
    return LK_ENOMEM;
  }
  *out = b.p;
  if (len)
    *len = b.len;
  return LK_OK;
}
