/* SPDX-License-Identifier: MIT */
/* fault.c: fault rule parsing and the per-request decision. */
#include "fault.h"
#include "util.h"

#include <linkd/clock.h>
#include <linkd/duration.h>
#include <linkd/error.h>
#include <linkd/rand.h>

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RULES LK_FAULT_RULES_MAX

static const char *const kind_names[] = {
    [LK_FAULT_NONE] = "none",
    [LK_FAULT_LATENCY] = "latency",
    [LK_FAULT_STATUS] = "status",
    [LK_FAULT_RESET_BEFORE_READ] = "reset_before_read",
    [LK_FAULT_RESET_AFTER_READ] = "reset_after_read",
    [LK_FAULT_RESET_AFTER_PROCESSING] = "reset_after_processing",
    [LK_FAULT_CLOSE] = "close",
    [LK_FAULT_CLOSE_AFTER_PROCESSING] = "close_after_processing",
    [LK_FAULT_PARTIAL_STALL] = "partial_stall",
    [LK_FAULT_SLOW_BODY] = "slow_body",
    [LK_FAULT_SLOWDOWN] = "slowdown",
};

const char *lk_fault_kind_name(lk_fault_kind k) {
  if ((size_t)k >= sizeof kind_names / sizeof kind_names[0])
    return "unknown";
  return kind_names[k];
}

static int parse_count(const char *v, int64_t *out) {
  return lk_parse_i64(v, strlen(v), false, out);
}

static int parse_delay(const char *v, lk_fault_action *a) {
  if (!strncmp(v, "uniform:", 8)) {
    char lo[32];
    const char *colon = strchr(v + 8, ':');
    if (!colon || (size_t)(colon - (v + 8)) >= sizeof lo)
      return LK_EPARSE;
    memcpy(lo, v + 8, (size_t)(colon - (v + 8)));
    lo[colon - (v + 8)] = '\0';
    if (lk_duration_parse(lo, &a->delay_a, NULL, 0) ||
        lk_duration_parse(colon + 1, &a->delay_b, NULL, 0) || a->delay_b < a->delay_a)
      return LK_EPARSE;
    a->dist = LK_DELAY_UNIFORM;
    return LK_OK;
  }
  if (!strncmp(v, "exp:", 4)) {
    if (lk_duration_parse(v + 4, &a->delay_a, NULL, 0) || a->delay_a <= 0)
      return LK_EPARSE;
    a->dist = LK_DELAY_EXP;
    return LK_OK;
  }
  a->dist = LK_DELAY_FIXED;
  return lk_duration_parse(v, &a->delay_a, NULL, 0);
}

/* A duration of one request's fault, bounded: a typo such as "30h" for "30s" would otherwise hold
 * a connection (and the client) for as long. */
static int parse_fault_duration(const char *v, int64_t *out) {
  if (lk_duration_parse(v, out, NULL, 0) || *out > LK_FAULT_DURATION_MAX_NS)
    return LK_EPARSE;
  return LK_OK;
}

/* Every key a rule may hold, each at most once: a repeated key is a mistake, not an override. */
static const char *const rule_keys[] = {"route",  "kind",  "p",        "count",       "skip",
                                        "factor", "for",   "code",     "retry_after", "when",
                                        "delay",  "stall", "interval", "chunk"};

static int set_kind(const char *v, lk_fault_action *a) {
  for (size_t i = 1; i < sizeof kind_names / sizeof kind_names[0]; i++) {
    if (!strcmp(v, kind_names[i])) {
      a->kind = (lk_fault_kind)i;
      return LK_OK;
    }
  }
  int64_t code;
  /* A bare status code is shorthand for kind=status,code=N. */
  if (lk_parse_i64(v, strlen(v), false, &code) == LK_OK && code >= 400 && code <= 599) {
    a->kind = LK_FAULT_STATUS;
    a->status = (int)code;
    return LK_OK;
  }
  return LK_EPARSE;
}

int lk_fault_rule_parse(const char *spec, lk_fault_rule *out, char *err, size_t errcap) {
  memset(out, 0, sizeof *out);
  snprintf(out->route, sizeof out->route, "*");
  out->p = 1.0;
  out->count = -1;
  out->act.retry_after = -1;
  out->act.stall_ns = 30 * INT64_C(1000000000);
  out->act.chunk = 16;
  out->act.interval_ns = 100 * INT64_C(1000000);
  out->act.for_ns = -1;
  if (!spec || strlen(spec) >= sizeof out->spec)
    return lk_parse_fail(err, errcap, "rule is empty or longer than %d bytes",
                         LK_FAULT_SPEC_MAX - 1);
  snprintf(out->spec, sizeof out->spec, "%s", spec);
  char buf[LK_FAULT_SPEC_MAX];
  snprintf(buf, sizeof buf, "%s", spec);
  bool have_kind = false, have_delay = false, have_factor = false, have_for = false;
  bool have_pcs = false; /* p, count or skip given */
  unsigned seen = 0;     /* bit i: rule_keys[i] given */
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ')
      tok++;
    char *eq = strchr(tok, '=');
    if (!eq)
      return lk_parse_fail(err, errcap, "'%s' is not key=value", tok);
    *eq = '\0';
    const char *k = tok, *v = eq + 1;
    int64_t n;
    size_t ki = 0;
    while (ki < sizeof rule_keys / sizeof rule_keys[0] && strcmp(k, rule_keys[ki]))
      ki++;
    if (ki == sizeof rule_keys / sizeof rule_keys[0])
      return lk_parse_fail(err, errcap, "unknown key '%s'", k);
    if (seen & (1u << ki))
      return lk_parse_fail(err, errcap, "key '%s' given twice", k);
    seen |= 1u << ki;
    if (!strcmp(k, "route")) {
      if (lk_route_pattern_check(v) || strlen(v) >= sizeof out->route)
        return lk_parse_fail(err, errcap, "bad route pattern '%s' (want 'METHOD /path/*' or '*')",
                             v);
      snprintf(out->route, sizeof out->route, "%s", v);
    } else if (!strcmp(k, "kind")) {
      if (set_kind(v, &out->act))
        return lk_parse_fail(err, errcap, "unknown kind '%s'", v);
      have_kind = true;
    } else if (!strcmp(k, "p")) {
      char *end;
      double p = strtod(v, &end);
      if (end == v || *end || !(p >= 0.0 && p <= 1.0))
        return lk_parse_fail(err, errcap, "p must be a number in [0, 1], not '%s'", v);
      out->p = p;
      have_pcs = true;
    } else if (!strcmp(k, "count")) {
      if (parse_count(v, &out->count))
        return lk_parse_fail(err, errcap, "bad count '%s'", v);
      have_pcs = true;
    } else if (!strcmp(k, "skip")) {
      if (parse_count(v, &out->skip))
        return lk_parse_fail(err, errcap, "bad skip '%s'", v);
      have_pcs = true;
    } else if (!strcmp(k, "factor")) {
      char *end;
      double f = strtod(v, &end);
      if (end == v || *end || !(f >= 1.0 && f <= 1e6))
        return lk_parse_fail(err, errcap, "factor must be a number in [1, 1e6], not '%s'", v);
      out->act.factor = f;
      have_factor = true;
    } else if (!strcmp(k, "for")) {
      if (lk_duration_parse(v, &out->act.for_ns, NULL, 0))
        return lk_parse_fail(err, errcap, "bad for duration '%s'", v);
      have_for = true;
    } else if (!strcmp(k, "code")) {
      if (parse_count(v, &n) || n < 400 || n > 599)
        return lk_parse_fail(err, errcap, "code must be 400-599, not '%s'", v);
      out->act.status = (int)n;
    } else if (!strcmp(k, "retry_after")) {
      const char *num = v;
      if (!strncmp(v, "date:", 5)) {
        out->act.retry_after_date = true;
        num = v + 5;
      }
      if (parse_count(num, &out->act.retry_after) || out->act.retry_after > 86400 * 365)
        return lk_parse_fail(err, errcap, "retry_after must be SECONDS or date:SECONDS, not '%s'",
                             v);
    } else if (!strcmp(k, "when")) {
      if (strcmp(v, "before") && strcmp(v, "after"))
        return lk_parse_fail(err, errcap, "when must be before or after, not '%s'", v);
      out->act.after = !strcmp(v, "after");
    } else if (!strcmp(k, "delay")) {
      const lk_fault_action *a = &out->act;
      if (parse_delay(v, &out->act) ||
          (a->dist == LK_DELAY_UNIFORM ? a->delay_b : a->delay_a) > LK_FAULT_DURATION_MAX_NS)
        return lk_parse_fail(err, errcap,
                             "bad delay '%s' (100ms, uniform:10ms:50ms, exp:20ms; at most 1h)", v);
      have_delay = true;
    } else if (!strcmp(k, "stall")) {
      if (parse_fault_duration(v, &out->act.stall_ns))
        return lk_parse_fail(err, errcap, "bad stall duration '%s' (at most 1h)", v);
    } else if (!strcmp(k, "interval")) {
      if (parse_fault_duration(v, &out->act.interval_ns))
        return lk_parse_fail(err, errcap, "bad interval duration '%s' (at most 1h)", v);
    } else if (!strcmp(k, "chunk")) {
      if (parse_count(v, &n) || n < 1 || n > 65536)
        return lk_parse_fail(err, errcap, "chunk must be 1-65536 bytes, not '%s'", v);
      out->act.chunk = (size_t)n;
    } else {
      return lk_parse_fail(err, errcap, "unknown key '%s'", k);
    }
  }
  if (!have_kind)
    return lk_parse_fail(err, errcap, "kind is required");
  if (out->act.kind == LK_FAULT_LATENCY && !have_delay)
    return lk_parse_fail(err, errcap, "kind=latency needs delay=");
  if (out->act.kind != LK_FAULT_LATENCY && have_delay)
    return lk_parse_fail(err, errcap, "delay= only goes with kind=latency");
  bool slowdown = out->act.kind == LK_FAULT_SLOWDOWN;
  if (slowdown && !have_factor)
    return lk_parse_fail(err, errcap, "kind=slowdown needs factor=");
  if (!slowdown && (have_factor || have_for))
    return lk_parse_fail(err, errcap, "factor= and for= only go with kind=slowdown");
  if (slowdown && have_pcs)
    return lk_parse_fail(err, errcap,
                         "kind=slowdown applies to every matching request: no p, count, skip");
  if (out->act.kind == LK_FAULT_STATUS && out->act.status == 0)
    out->act.status = 503;
  if (out->act.kind != LK_FAULT_STATUS && (out->act.status || out->act.retry_after >= 0))
    return lk_parse_fail(err, errcap, "code= and retry_after= only go with kind=status");
  return LK_OK;
}

/* --- the engine ------------------------------------------------------------------------------ */

struct lk_faults {
  pthread_mutex_t mu;
  atomic_int n; /* read without the lock on the hot path */
  int next_id;
  uint64_t seed;
  lk_rand_fast rng;
  lk_fault_rule rules[MAX_RULES];
};

lk_faults *lk_faults_new(uint64_t seed) {
  lk_faults *f = calloc(1, sizeof *f);
  if (!f)
    return NULL;
  pthread_mutex_init(&f->mu, NULL);
  f->next_id = 1;
  f->seed = seed;
  lk_rand_fast_seeded(&f->rng, seed);
  return f;
}

void lk_faults_free(lk_faults *f) {
  if (!f)
    return;
  pthread_mutex_destroy(&f->mu);
  free(f);
}

int lk_faults_add(lk_faults *f, const lk_fault_rule *r) {
  pthread_mutex_lock(&f->mu);
  int n = atomic_load(&f->n);
  if (n >= MAX_RULES) {
    pthread_mutex_unlock(&f->mu);
    return LK_ETOOBIG;
  }
  f->rules[n] = *r;
  f->rules[n].id = f->next_id++;
  f->rules[n].matched = f->rules[n].fired = 0;
  f->rules[n].added_ns = lk_now_ns();
  int id = f->rules[n].id;
  atomic_store(&f->n, n + 1);
  pthread_mutex_unlock(&f->mu);
  return id;
}

int lk_faults_remove(lk_faults *f, int id) {
  int rc = LK_ENOTFOUND;
  pthread_mutex_lock(&f->mu);
  int n = atomic_load(&f->n);
  for (int i = 0; i < n; i++) {
    if (f->rules[i].id == id) {
      memmove(&f->rules[i], &f->rules[i + 1], (size_t)(n - i - 1) * sizeof f->rules[0]);
      atomic_store(&f->n, n - 1);
      rc = LK_OK;
      break;
    }
  }
  pthread_mutex_unlock(&f->mu);
  return rc;
}

int lk_faults_replace(lk_faults *f, const lk_fault_rule *rules, size_t n, bool reseed,
                      uint64_t seed, int *ids) {
  if (n > MAX_RULES)
    return LK_ETOOBIG;
  int64_t now = lk_now_ns();
  /* One critical section: lk_faults_decide never sees the table empty or half filled. */
  pthread_mutex_lock(&f->mu);
  if (reseed) {
    f->seed = seed;
    lk_rand_fast_seeded(&f->rng, seed);
  }
  for (size_t i = 0; i < n; i++) {
    f->rules[i] = rules[i];
    f->rules[i].id = f->next_id++;
    f->rules[i].matched = f->rules[i].fired = 0;
    f->rules[i].added_ns = now;
    if (ids)
      ids[i] = f->rules[i].id;
  }
  atomic_store(&f->n, (int)n);
  pthread_mutex_unlock(&f->mu);
  return LK_OK;
}

void lk_faults_clear(lk_faults *f) {
  pthread_mutex_lock(&f->mu);
  atomic_store(&f->n, 0);
  pthread_mutex_unlock(&f->mu);
}

void lk_faults_reseed(lk_faults *f, uint64_t seed) {
  pthread_mutex_lock(&f->mu);
  f->seed = seed;
  lk_rand_fast_seeded(&f->rng, seed);
  for (int i = 0; i < atomic_load(&f->n); i++)
    f->rules[i].matched = f->rules[i].fired = 0;
  pthread_mutex_unlock(&f->mu);
}

uint64_t lk_faults_seed(lk_faults *f) {
  pthread_mutex_lock(&f->mu);
  uint64_t s = f->seed;
  pthread_mutex_unlock(&f->mu);
  return s;
}

int lk_faults_snapshot(lk_faults *f, lk_fault_rule *out, int max) {
  pthread_mutex_lock(&f->mu);
  int n = atomic_load(&f->n);
  for (int i = 0; i < n && i < max; i++)
    out[i] = f->rules[i];
  pthread_mutex_unlock(&f->mu);
  return n;
}

/* A uniform double in [0, 1) from the top 53 bits. */
static double unit(lk_rand *r) { return (double)(lk_rand_next64(r) >> 11) * 0x1.0p-53; }

static int64_t sample_delay(const lk_fault_action *a, lk_rand *r) {
  switch (a->dist) {
  case LK_DELAY_UNIFORM:
    return a->delay_a + (int64_t)lk_rand_below(r, (uint64_t)(a->delay_b - a->delay_a) + 1);
  case LK_DELAY_EXP: {
    double d = -(double)a->delay_a * log1p(-unit(r));
    double cap = 20.0 * (double)a->delay_a;
    return (int64_t)(d < cap ? d : cap);
  }
  case LK_DELAY_FIXED:
  default: return a->delay_a;
  }
}

void lk_faults_decide(lk_faults *f, const char *method, const char *path, lk_fault_plan *out) {
  memset(out, 0, sizeof *out);
  if (atomic_load_explicit(&f->n, memory_order_relaxed) == 0)
    return;
  pthread_mutex_lock(&f->mu);
  lk_rand *rng = &f->rng.base;
  int n = atomic_load(&f->n);
  for (int i = 0; i < n; i++) {
    lk_fault_rule *r = &f->rules[i];
    if (r->act.kind == LK_FAULT_SLOWDOWN || !lk_route_match(r->route, method, path))
      continue;
    r->matched++;
    bool latency = r->act.kind == LK_FAULT_LATENCY;
    if (!latency && out->act.kind != LK_FAULT_NONE)
      continue; /* an action is already chosen; consume no draw */
    if (r->matched <= (uint64_t)r->skip)
      continue;
    if (r->count >= 0 && r->fired >= (uint64_t)r->count)
      continue;
    if (r->p < 1.0 && !(unit(rng) < r->p))
      continue;
    r->fired++;
    if (latency) {
      int64_t d = sample_delay(&r->act, rng);
      out->delay_ns = out->delay_ns > INT64_MAX - d ? INT64_MAX : out->delay_ns + d;
    } else {
      out->act = r->act;
      out->rule_id = r->id;
    }
  }
  pthread_mutex_unlock(&f->mu);
}

double lk_faults_slowdown(lk_faults *f, const char *method, const char *path, int64_t now) {
  if (atomic_load_explicit(&f->n, memory_order_relaxed) == 0)
    return 1.0;
  double factor = 1.0;
  pthread_mutex_lock(&f->mu);
  int n = atomic_load(&f->n);
  for (int i = 0; i < n; i++) {
    lk_fault_rule *r = &f->rules[i];
    if (r->act.kind != LK_FAULT_SLOWDOWN)
      continue;
    /* Both instants are CLOCK_MONOTONIC readings, so the difference cannot overflow. */
    if (r->act.for_ns >= 0 && now - r->added_ns >= r->act.for_ns)
      continue; /* expired: inert from now on */
    if (method) {
      if (!lk_route_match(r->route, method, path))
        continue;
      r->matched++;
      r->fired++;
    }
    factor *= r->act.factor;
    if (factor > 1e9)
      factor = 1e9;
  }
  pthread_mutex_unlock(&f->mu);
  return factor;
}
