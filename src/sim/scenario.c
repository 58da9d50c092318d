/* SPDX-License-Identifier: MIT */
/* scenario.c: the scenario language of `linkd sim` (docs/sim.md): one directive per line,
 * `directive [name] key=value ...`, `#` to the end of a line is a comment. Every error names its
 * line, but what the file lacks as a whole (no tier, no client). A key that has no effect where it
 * is written is refused. Policies are checked by the core's own validators, so a scenario cannot
 * hold a policy the library would refuse. */
#include "sim/sim.h"

#include <linkd/duration.h>
#include <linkd/error.h>

#include "core/sat.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define LINE_MAX_ 4096
#define TOK_MAX 64

typedef struct pctx {
  sim_scenario *s;
  int line;
  int timing_line; /* the last duration, drain or window line: what a check of them names */
  char *err;
  size_t cap;
} pctx;

static int fail(pctx *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "line N: message", or the message alone for what the file lacks as a whole (p->line 0). */
static int fail(pctx *p, const char *fmt, ...) {
  if (p->err && p->cap) {
    int n = p->line > 0 ? snprintf(p->err, p->cap, "line %d: ", p->line) : 0;
    if (n >= 0 && (size_t)n < p->cap) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(p->err + n, p->cap - (size_t)n, fmt, ap);
      va_end(ap);
    }
  }
  return LK_EPARSE;
}

static int dur(pctx *p, const char *key, const char *v, int64_t *out) {
  char e[96];
  if (lk_duration_parse(v, out, e, sizeof e) != LK_OK)
    return fail(p, "%s: %s", key, e);
  return LK_OK;
}

static int num(pctx *p, const char *key, const char *v, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double d = strtod(v, &end);
  if (end == v || *end || errno || !isfinite(d) || d < lo || d > hi)
    return fail(p, "%s: '%s' is not a number in [%g, %g]", key, v, lo, hi);
  *out = d;
  return LK_OK;
}

static int integer(pctx *p, const char *key, const char *v, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (end == v || *end || errno || n < lo || n > hi)
    return fail(p, "%s: '%s' is not a whole number in [%lld, %lld]", key, v, (long long)lo,
                (long long)hi);
  *out = n;
  return LK_OK;
}

static int boolean(pctx *p, const char *key, const char *v, bool *out) {
  if (!strcmp(v, "yes") || !strcmp(v, "on") || !strcmp(v, "true")) {
    *out = true;
    return LK_OK;
  }
  if (!strcmp(v, "no") || !strcmp(v, "off") || !strcmp(v, "false")) {
    *out = false;
    return LK_OK;
  }
  return fail(p, "%s: '%s' is not yes or no", key, v);
}

/* Splits s at `sep` into at most n parts (in place). Returns the count. */
static int split(char *s, char sep, char **parts, int n) {
  int k = 0;
  parts[k++] = s;
  for (char *c = s; *c && k < n; c++)
    if (*c == sep) {
      *c = '\0';
      parts[k++] = c + 1;
    }
  return k;
}

static int dist(pctx *p, const char *key, const char *v, sim_dist *d) {
  char buf[256];
  if (strlen(v) >= sizeof buf)
    return fail(p, "%s: too long", key);
  strcpy(buf, v);
  memset(d, 0, sizeof *d);
  char *part[SIM_CHOICE_MAX + 2];
  char *colon = strchr(buf, ':');
  if (!colon)
    return dur(p, key, buf, &d->a); /* a bare duration is a constant */
  *colon = '\0';
  const char *kind = buf;
  char *rest = colon + 1;
  if (!strcmp(kind, "choice")) {
    int n = split(rest, ',', part, SIM_CHOICE_MAX + 1);
    if (n > SIM_CHOICE_MAX)
      return fail(p, "%s: at most %d choices", key, SIM_CHOICE_MAX);
    d->kind = SIM_D_CHOICE;
    d->n = n;
    uint32_t cum = 0;
    for (int i = 0; i < n; i++) {
      char *slash = strchr(part[i], '/');
      if (!slash)
        return fail(p, "%s: a choice is DURATION/WEIGHT, not '%s'", key, part[i]);
      *slash = '\0';
      int64_t w = 0;
      if (dur(p, key, part[i], &d->v[i]) || integer(p, key, slash + 1, 1, 1000000, &w))
        return LK_EPARSE;
      cum += (uint32_t)w;
      d->cum[i] = cum;
    }
    return LK_OK;
  }
  int n = split(rest, ':', part, 3);
  if (!strcmp(kind, "const") && n == 1) {
    d->kind = SIM_D_CONST;
    return dur(p, key, part[0], &d->a);
  }
  if (!strcmp(kind, "exp") && n == 1) {
    d->kind = SIM_D_EXP;
    return dur(p, key, part[0], &d->a);
  }
  if ((!strcmp(kind, "uniform") || !strcmp(kind, "normal")) && n == 2) {
    d->kind = kind[0] == 'u' ? SIM_D_UNIFORM : SIM_D_NORMAL;
    if (dur(p, key, part[0], &d->a) || dur(p, key, part[1], &d->b))
      return LK_EPARSE;
    if (d->kind == SIM_D_UNIFORM && d->b < d->a)
      return fail(p, "%s: uniform:LOW:HIGH needs LOW <= HIGH", key);
    return LK_OK;
  }
  return fail(p,
              "%s: '%s' is not const:D, exp:MEAN, uniform:LOW:HIGH, normal:MEAN:SD or "
              "choice:D/W,...",
              key, v);
}

static int find_name(const char *names, size_t stride, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(names + stride * (size_t)i, name))
      return i;
  return -1;
}

int sim_policy_find(const sim_scenario *s, const char *name) {
  return find_name(s->policies[0].name, sizeof s->policies[0], s->n_policies, name);
}

static int tier_find(const sim_scenario *s, const char *name) {
  return find_name(s->tiers[0].name, sizeof s->tiers[0], s->n_tiers, name);
}

static int group_find(const sim_scenario *s, const char *name) {
  return find_name(s->groups[0].name, sizeof s->groups[0], s->n_groups, name);
}

static int set_name(pctx *p, char *dst, const char *what, const char *name) {
  if (!name)
    return fail(p, "%s needs a name", what);
  size_t n = strlen(name);
  if (n == 0 || n >= SIM_NAME_MAX || strchr(name, '='))
    return fail(p, "%s name '%s': 1 to %d characters, no '='", what, name, SIM_NAME_MAX - 1);
  for (const char *c = name; *c; c++)
    if (!(*c == '-' || *c == '_' || *c == '.' || (*c >= '0' && *c <= '9') ||
          (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z')))
      return fail(p, "%s name '%s': letters, digits, '-', '_' and '.' only", what, name);
  memcpy(dst, name, n + 1);
  return LK_OK;
}

/* --- directives ------------------------------------------------------------------------------- */

static void policy_defaults(sim_policy *pol) {
  memset(pol, 0, sizeof *pol);
  lk_retry_config_init_default(&pol->retry);
  pol->timeout = LK_SEC(1);
  lk_budget_ratio_config_init_default(&pol->ratio);
  lk_budget_token_config_init_default(&pol->token);
  lk_budget_quota_config_init_default(&pol->quota);
  lk_breaker_config_init_default(&pol->breaker_cfg);
  lk_limiter_config_init_default(&pol->limiter_cfg);
}

static int policy_kv(pctx *p, sim_policy *pol, const char *k, const char *v) {
  lk_retry_config *rc = &pol->retry;
  lk_backoff_config *b = &rc->backoff;
  lk_breaker_config *bc = &pol->breaker_cfg;
  int64_t n;
  double d;
  if (!strcmp(k, "attempts")) {
    if (integer(p, k, v, 1, 1000000000, &n))
      return LK_EPARSE;
    rc->max_attempts = (int)n;
  } else if (!strcmp(k, "backoff")) {
    if (!strcmp(v, "none")) { /* the next attempt at once: a 1 ns fixed delay, no draw */
      b->kind = LK_BACKOFF_FIXED;
      b->base = b->max = b->resolution = 1;
      b->jitter = LK_JITTER_NONE;
    } else if (lk_backoff_kind_parse(v, &b->kind) != LK_OK) {
      return fail(p, "backoff: '%s' is not none, fixed, linear or exponential", v);
    }
  } else if (!strcmp(k, "base")) {
    return dur(p, k, v, &b->base);
  } else if (!strcmp(k, "max")) {
    return dur(p, k, v, &b->max);
  } else if (!strcmp(k, "resolution")) {
    return dur(p, k, v, &b->resolution);
  } else if (!strcmp(k, "multiplier")) {
    return num(p, k, v, 1, 1000, &b->multiplier);
  } else if (!strcmp(k, "jitter")) {
    if (lk_jitter_kind_parse(v, &b->jitter) != LK_OK)
      return fail(p, "jitter: '%s' is not none, symmetric, full, equal or decorrelated", v);
  } else if (!strcmp(k, "ratio")) {
    return num(p, k, v, 0, 1, &b->ratio);
  } else if (!strcmp(k, "retry_on")) {
    if (!strcmp(v, "all"))
      rc->retry_on = ~UINT64_C(0) >> (64 - LK_F__COUNT) & ~UINT64_C(1);
    else if (!strcmp(v, "default"))
      rc->retry_on = lk_retry_on_default();
    else
      return fail(p, "retry_on: '%s' is not default or all", v);
  } else if (!strcmp(k, "timeout")) {
    if (dur(p, k, v, &pol->timeout))
      return LK_EPARSE;
    if (pol->timeout <= 0)
      return fail(p, "timeout: must be > 0");
  } else if (!strcmp(k, "deadline")) {
    if (!strcmp(v, "none"))
      pol->deadline = 0;
    else if (dur(p, k, v, &pol->deadline))
      return LK_EPARSE;
  } else if (!strcmp(k, "propagate")) {
    return boolean(p, k, v, &pol->propagate);
  } else if (!strcmp(k, "budget")) {
    if (!strcmp(v, "none"))
      pol->budget = SIM_BUDGET_NONE;
    else if (!strcmp(v, "ratio"))
      pol->budget = SIM_BUDGET_RATIO;
    else if (!strcmp(v, "token"))
      pol->budget = SIM_BUDGET_TOKEN;
    else if (!strcmp(v, "quota"))
      pol->budget = SIM_BUDGET_QUOTA;
    else
      return fail(p, "budget: '%s' is not none, ratio, token or quota", v);
  } else if (!strcmp(k, "budget.percent")) {
    return num(p, k, v, 0, 1000, &pol->ratio.percent);
  } else if (!strcmp(k, "budget.ttl")) {
    return dur(p, k, v, &pol->ratio.ttl);
  } else if (!strcmp(k, "budget.min_per_sec")) {
    if (integer(p, k, v, 0, 1000000, &n))
      return LK_EPARSE;
    pol->ratio.min_retries_per_sec = (int)n;
  } else if (!strcmp(k, "budget.tokens")) {
    return num(p, k, v, 0, 1000, &pol->token.max_tokens);
  } else if (!strcmp(k, "budget.token_ratio")) {
    return num(p, k, v, 0, 1000, &pol->token.token_ratio);
  } else if (!strcmp(k, "budget.capacity")) {
    return integer(p, k, v, 1, INT64_C(1000000000000), &pol->quota.capacity);
  } else if (!strcmp(k, "breaker")) {
    return boolean(p, k, v, &pol->breaker);
  } else if (!strcmp(k, "breaker.window")) {
    if (integer(p, k, v, 1, 1000000, &n))
      return LK_EPARSE;
    bc->window_size = (int)n;
  } else if (!strcmp(k, "breaker.min")) {
    if (integer(p, k, v, 1, 1000000, &n))
      return LK_EPARSE;
    bc->minimum_calls = (int)n;
  } else if (!strcmp(k, "breaker.rate")) {
    return num(p, k, v, 0, 100, &bc->failure_rate_threshold);
  } else if (!strcmp(k, "breaker.open")) {
    if (dur(p, k, v, &bc->wait_open))
      return LK_EPARSE;
    bc->backoff.base = bc->wait_open;
    if (!bc->wait_backoff && bc->backoff.max < bc->backoff.base) /* an open_max given is kept */
      bc->backoff.max = bc->backoff.base;
  } else if (!strcmp(k, "breaker.open_max")) {
    /* The n-th consecutive opening waits open * 2^(n-1), capped here (no jitter). */
    if (dur(p, k, v, &bc->backoff.max))
      return LK_EPARSE;
    bc->wait_backoff = true;
    bc->backoff.kind = LK_BACKOFF_EXPONENTIAL;
    bc->backoff.jitter = LK_JITTER_NONE;
  } else if (!strcmp(k, "breaker.probes")) {
    if (integer(p, k, v, 1, 1000000, &n))
      return LK_EPARSE;
    bc->permitted_half_open = (int)n;
  } else if (!strcmp(k, "breaker.wait")) {
    return boolean(p, k, v, &pol->breaker_wait);
  } else if (!strcmp(k, "limiter")) {
    char buf[64];
    if (strlen(v) >= sizeof buf)
      return fail(p, "limiter: too long");
    strcpy(buf, v);
    char *part[3];
    if (split(buf, ':', part, 2) != 2)
      return fail(p, "limiter: RATE:BURST, not '%s'", v);
    if (num(p, k, part[0], 1e-9, 1e9, &d) || integer(p, k, part[1], 1, INT32_MAX, &n))
      return LK_EPARSE;
    pol->limiter = true;
    pol->limiter_cfg.rate = d;
    pol->limiter_cfg.burst = n;
  } else {
    return fail(p, "policy: unknown key '%s'", k);
  }
  return LK_OK;
}

static int policy_check(pctx *p, sim_policy *pol) {
  const char *why = NULL;
  lk_retry_policy rp;
  if (lk_retry_policy_init(&rp, &pol->retry, &why) != LK_OK)
    return fail(p, "policy %s: %s", pol->name, why);
  if (pol->budget == SIM_BUDGET_RATIO && lk_budget_ratio_config_validate(&pol->ratio, &why))
    return fail(p, "policy %s: %s", pol->name, why);
  if (pol->budget == SIM_BUDGET_TOKEN && lk_budget_token_config_validate(&pol->token, &why))
    return fail(p, "policy %s: %s", pol->name, why);
  if (pol->budget == SIM_BUDGET_QUOTA && lk_budget_quota_config_validate(&pol->quota, &why))
    return fail(p, "policy %s: %s", pol->name, why);
  const lk_breaker_config *bc = &pol->breaker_cfg;
  if (pol->breaker && bc->wait_backoff && bc->backoff.max < bc->backoff.base) {
    char a[32], b[32];
    return fail(p, "policy %s: breaker.open_max (%s) is shorter than breaker.open (%s)", pol->name,
                lk_duration_format(bc->backoff.max, a, sizeof a),
                lk_duration_format(bc->backoff.base, b, sizeof b));
  }
  if (pol->breaker && lk_breaker_config_validate(bc, &why))
    return fail(p, "policy %s: %s", pol->name, why);
  if (pol->limiter && lk_limiter_config_validate(&pol->limiter_cfg, &why))
    return fail(p, "policy %s: %s", pol->name, why);
  return LK_OK;
}

/* Tier and group references are kept by name until the end, so a tier may name a tier or policy
 * defined further down. */
typedef struct refs {
  char tier_calls[SIM_MAX_TIERS][SIM_NAME_MAX];
  char tier_policy[SIM_MAX_TIERS][SIM_NAME_MAX];
  int tier_line[SIM_MAX_TIERS];
  bool tier_service[SIM_MAX_TIERS]; /* service= was given */
  char group_target[SIM_MAX_GROUPS][SIM_NAME_MAX];
  char group_policy[SIM_MAX_GROUPS][SIM_NAME_MAX];
  int group_line[SIM_MAX_GROUPS];
  char trig_tier[SIM_MAX_TRIGGERS][SIM_NAME_MAX];
  char trig_group[SIM_MAX_TRIGGERS][SIM_NAME_MAX];
  int trig_line[SIM_MAX_TRIGGERS];
  bool trig_workers[SIM_MAX_TRIGGERS]; /* workers= was given */
} refs;

static int copy_ref(pctx *p, char *dst, const char *k, const char *v) {
  if (strlen(v) >= SIM_NAME_MAX || !*v)
    return fail(p, "%s: '%s' is not a name", k, v);
  strcpy(dst, v);
  return LK_OK;
}

static int tier_kv(pctx *p, sim_tier *t, refs *rf, int ix, const char *k, const char *v) {
  int64_t n;
  if (!strcmp(k, "servers")) {
    if (integer(p, k, v, 1, 65535, &n))
      return LK_EPARSE;
    t->servers = (int)n;
  } else if (!strcmp(k, "workers")) {
    if (integer(p, k, v, 1, 100000000, &n))
      return LK_EPARSE;
    t->workers = (int)n;
  } else if (!strcmp(k, "service")) {
    rf->tier_service[ix] = true;
    return dist(p, k, v, &t->service);
  } else if (!strcmp(k, "queue")) {
    return integer(p, k, v, 0, INT32_MAX, &t->queue);
  } else if (!strcmp(k, "discipline")) {
    if (!strcmp(v, "fifo"))
      t->discipline = SIM_Q_FIFO;
    else if (!strcmp(v, "lifo"))
      t->discipline = SIM_Q_LIFO;
    else
      return fail(p, "discipline: '%s' is not fifo or lifo", v);
  } else if (!strcmp(k, "drop_expired")) {
    if (!strcmp(v, "short")) {
      t->drop_expired = t->drop_short = true;
      return LK_OK;
    }
    t->drop_short = false;
    return boolean(p, k, v, &t->drop_expired);
  } else if (!strcmp(k, "kind")) {
    if (!strcmp(v, "queue"))
      t->kind = SIM_TIER_QUEUE;
    else if (!strcmp(v, "occ"))
      t->kind = SIM_TIER_OCC;
    else
      return fail(p, "kind: '%s' is not queue or occ", v);
  } else if (!strcmp(k, "calls")) {
    return copy_ref(p, rf->tier_calls[ix], k, v);
  } else if (!strcmp(k, "policy")) {
    return copy_ref(p, rf->tier_policy[ix], k, v);
  } else {
    return fail(p, "tier: unknown key '%s'", k);
  }
  return LK_OK;
}

static int group_kv(pctx *p, sim_group *g, refs *rf, int ix, const char *k, const char *v) {
  if (!strcmp(k, "loop")) {
    if (!strcmp(v, "open"))
      g->closed = false;
    else if (!strcmp(v, "closed"))
      g->closed = true;
    else
      return fail(p, "loop: '%s' is not open or closed", v);
  } else if (!strcmp(k, "count")) {
    return integer(p, k, v, 1, 100000000, &g->count);
  } else if (!strcmp(k, "rate")) {
    char buf[64];
    size_t n = strlen(v);
    if (n >= sizeof buf)
      return fail(p, "rate: too long");
    strcpy(buf, v);
    if (n > 2 && !strcmp(buf + n - 2, "/s"))
      buf[n - 2] = '\0';
    return num(p, k, buf, 0, 1e9, &g->rate);
  } else if (!strcmp(k, "arrivals")) {
    if (!strcmp(v, "poisson"))
      g->poisson = true;
    else if (!strcmp(v, "uniform"))
      g->poisson = false;
    else
      return fail(p, "arrivals: '%s' is not poisson or uniform", v);
  } else if (!strcmp(k, "think")) {
    return dist(p, k, v, &g->think);
  } else if (!strcmp(k, "ops")) {
    return integer(p, k, v, 0, INT32_MAX, &g->ops);
  } else if (!strcmp(k, "target")) {
    return copy_ref(p, rf->group_target[ix], k, v);
  } else if (!strcmp(k, "policy")) {
    return copy_ref(p, rf->group_policy[ix], k, v);
  } else {
    return fail(p, "client: unknown key '%s'", k);
  }
  return LK_OK;
}

static int trigger_kv(pctx *p, sim_trigger *t, refs *rf, int ix, const char *k, const char *v) {
  if (!strcmp(k, "from")) {
    return dur(p, k, v, &t->from);
  } else if (!strcmp(k, "to")) {
    return dur(p, k, v, &t->to);
  } else if (!strcmp(k, "tier")) {
    return copy_ref(p, rf->trig_tier[ix], k, v);
  } else if (!strcmp(k, "client")) {
    return copy_ref(p, rf->trig_group[ix], k, v);
  } else if (!strcmp(k, "factor")) {
    return num(p, k, v, 1e-3, 1e6, &t->factor);
  } else if (!strcmp(k, "workers")) {
    int64_t n = 0;
    if (integer(p, k, v, 0, 100000000, &n))
      return LK_EPARSE;
    t->workers = (int)n;
    rf->trig_workers[ix] = true;
  } else if (!strcmp(k, "fail")) {
    if (!strcmp(v, "503"))
      t->fail = LK_F_HTTP_503;
    else if (!strcmp(v, "refused"))
      t->fail = LK_F_CONNECT_REFUSED;
    else if (!strcmp(v, "none"))
      t->fail = LK_F_NONE;
    else
      return fail(p, "fail: '%s' is not 503, refused or none (no answer)", v);
  } else {
    return fail(p, "trigger: unknown key '%s'", k);
  }
  return LK_OK;
}

/* --- keys that do not apply --------------------------------------------------------------------
 * A key that has no effect where it is written is refused, naming the key and what it needs: its
 * author believes it does something. They are checked once the whole line is read, so the order
 * of the keys on it does not matter. keys[0..nk) are the line's keys (each value follows its
 * key's NUL: the '=' was cut there). */

static bool in(const char *k, const char *const *list) {
  for (; *list; list++)
    if (!strcmp(k, *list))
      return true;
  return false;
}

static const char *value_of(const char *key) { return key + strlen(key) + 1; }

static int policy_applies(pctx *p, const sim_policy *pol, char **keys, int nk) {
  static const char *const retry_keys[] = {"backoff", "base",  "max",        "multiplier",
                                           "jitter",  "ratio", "resolution", "retry_on",
                                           "budget",  NULL};
  static const char *const delay_keys[] = {"base",  "max",        "multiplier", "jitter",
                                           "ratio", "resolution", NULL};
  static const char *const ratio_keys[] = {"budget.percent", "budget.ttl", "budget.min_per_sec",
                                           NULL};
  static const char *const token_keys[] = {"budget.tokens", "budget.token_ratio", NULL};
  static const char *const quota_keys[] = {"budget.capacity", NULL};
  static const char *const budget_names[] = {"none", "ratio", "token", "quota"};
  const lk_backoff_config *b = &pol->retry.backoff;
  bool no_backoff = false;
  for (int i = 0; i < nk; i++)
    if (!strcmp(keys[i], "backoff"))
      no_backoff = !strcmp(value_of(keys[i]), "none");
  for (int i = 0; i < nk; i++) {
    const char *k = keys[i];
    sim_budget_kind need = SIM_BUDGET_NONE;
    if (in(k, ratio_keys))
      need = SIM_BUDGET_RATIO;
    else if (in(k, token_keys))
      need = SIM_BUDGET_TOKEN;
    else if (in(k, quota_keys))
      need = SIM_BUDGET_QUOTA;
    if (pol->retry.max_attempts == 1 && (in(k, retry_keys) || need != SIM_BUDGET_NONE))
      return fail(p, "policy %s: %s does not apply with attempts=1 (there is no retry)", pol->name,
                  k);
    if (!strncmp(k, "breaker.", 8) && !pol->breaker)
      return fail(p, "policy %s: %s applies only with breaker=yes", pol->name, k);
    if (need != SIM_BUDGET_NONE && pol->budget != need)
      return fail(p, "policy %s: %s applies only with budget=%s (the policy's budget is %s)",
                  pol->name, k, budget_names[need], budget_names[pol->budget]);
    if (no_backoff && in(k, delay_keys))
      return fail(p, "policy %s: %s does not apply with backoff=none (the next attempt at once)",
                  pol->name, k);
    if (!strcmp(k, "multiplier") && b->kind != LK_BACKOFF_EXPONENTIAL)
      return fail(p, "policy %s: multiplier applies only with backoff=exponential", pol->name);
    if (!strcmp(k, "multiplier") && b->jitter == LK_JITTER_DECORRELATED)
      return fail(p,
                  "policy %s: multiplier does not apply with jitter=decorrelated (it draws "
                  "between base and 3 times the previous delay)",
                  pol->name);
    if (!strcmp(k, "ratio") && b->jitter != LK_JITTER_SYMMETRIC)
      return fail(p, "policy %s: ratio (of the jitter) applies only with jitter=symmetric",
                  pol->name);
  }
  return LK_OK;
}

static int tier_applies(pctx *p, const sim_tier *t, char **keys, int nk) {
  static const char *const queue_only[] = {"workers",    "service",      "queue",
                                           "discipline", "drop_expired", NULL};
  for (int i = 0; i < nk; i++) {
    const char *k = keys[i];
    if (t->kind == SIM_TIER_OCC && in(k, queue_only))
      return fail(p,
                  "tier %s: %s does not apply to kind=occ (an occ tier has no workers and no "
                  "queue)",
                  t->name, k);
    if (t->queue == 0 && !strcmp(k, "discipline"))
      return fail(p, "tier %s: discipline does not apply with queue=0 (nothing waits)", t->name);
    if (t->queue == 0 && !strcmp(k, "drop_expired") && t->drop_expired && !t->drop_short)
      return fail(p,
                  "tier %s: drop_expired=yes does not apply with queue=0 (it drops attempts "
                  "that waited; drop_expired=short also refuses work at its start)",
                  t->name);
  }
  return LK_OK;
}

static int group_applies(pctx *p, const sim_group *g, char **keys, int nk) {
  static const char *const open_only[] = {"rate", "arrivals", NULL};
  static const char *const closed_only[] = {"count", "think", "ops", NULL};
  for (int i = 0; i < nk; i++) {
    const char *k = keys[i];
    if (g->closed && in(k, open_only))
      return fail(p, "client %s: %s applies only with loop=open (this group is loop=closed)",
                  g->name, k);
    if (!g->closed && in(k, closed_only))
      return fail(p,
                  "client %s: %s applies only with loop=closed (this group is loop=open, the "
                  "default)",
                  g->name, k);
  }
  return LK_OK;
}

static int trigger_applies(pctx *p, const sim_trigger *t, char **keys, int nk) {
  static const char *const names[] = {"outage", "slowdown", "capacity", "burst"};
  static const char *const outage[] = {"from", "to", "tier", "fail", NULL};
  static const char *const slowdown[] = {"from", "to", "tier", "factor", NULL};
  static const char *const capacity[] = {"from", "to", "tier", "workers", NULL};
  static const char *const burst[] = {"from", "to", "client", "factor", NULL};
  static const char *const *const allowed[] = {outage, slowdown, capacity, burst};
  static const char *const lists[] = {"from, to, tier, fail", "from, to, tier, factor",
                                      "from, to, tier, workers", "from, to, client, factor"};
  for (int i = 0; i < nk; i++)
    if (!in(keys[i], allowed[t->kind]))
      return fail(p, "trigger %s: %s does not apply (its keys: %s)", names[t->kind], keys[i],
                  lists[t->kind]);
  return LK_OK;
}

/* drop_expired (yes or short) acts only on attempts that carry their caller's deadline, that
 * is, whose caller's policy has propagate=yes (engine.c: a job's deadline is none otherwise). A
 * tier's callers are the client groups that target it, which may run any policy of the file
 * (--compare puts every group on each policy in turn), and the tiers that call it, each with its
 * own calls= policy, which --compare leaves alone. A tier none of whose possible callers
 * propagates would drop nothing in any run: the key is refused, like every key without effect.
 * A tier that nothing calls is not the key's fault and is left alone, and so is a file that
 * has a propagating policy only its --compare runs use (the examples' storm and metastable). */
static int drop_expired_acts(pctx *p, const refs *rf) {
  const sim_scenario *s = p->s;
  bool any_propagates = false;
  for (int i = 0; i < s->n_policies; i++)
    any_propagates |= s->policies[i].propagate;
  for (int i = 0; i < s->n_tiers; i++) {
    const sim_tier *t = &s->tiers[i];
    if (!t->drop_expired)
      continue;
    bool targeted = false;
    int caller = -1, callers = 0; /* the first tier calling this one, for the message */
    for (int g = 0; g < s->n_groups; g++)
      targeted |= s->groups[g].target == i;
    bool acts = targeted && any_propagates;
    for (int j = 0; j < i; j++) /* tiers call only tiers defined after them */
      if (s->tiers[j].calls == i) {
        acts |= s->policies[s->tiers[j].policy].propagate;
        caller = caller < 0 ? j : caller;
        callers++;
      }
    if (acts || (!targeted && callers == 0))
      continue;
    p->line = rf->tier_line[i];
    const char *what = t->drop_short ? "drop_expired=short" : "drop_expired=yes";
    if (!any_propagates)
      return fail(p,
                  "tier %s: %s acts only on attempts whose caller's policy has propagate=yes, "
                  "and no policy has it",
                  t->name, what);
    /* Some policy propagates, so no client group targets this tier: only tiers call it. */
    return fail(p,
                "tier %s: %s acts only on attempts whose caller's policy has propagate=yes, and "
                "tier %s calls it with policy %s, which has not%s",
                t->name, what, s->tiers[caller].name, s->policies[s->tiers[caller].policy].name,
                callers > 1 ? " (nor have the other callers' policies)" : "");
  }
  return LK_OK;
}

static int resolve(pctx *p, refs *rf) {
  sim_scenario *s = p->s;
  for (int i = 0; i < s->n_tiers; i++) {
    sim_tier *t = &s->tiers[i];
    p->line = rf->tier_line[i];
    t->calls = -1;
    if (rf->tier_calls[i][0]) {
      t->calls = tier_find(s, rf->tier_calls[i]);
      if (t->calls < 0)
        return fail(p, "tier %s calls '%s': no such tier", t->name, rf->tier_calls[i]);
      if (t->calls <= i)
        return fail(p, "tier %s calls '%s': a tier may call only a tier defined after it", t->name,
                    rf->tier_calls[i]);
      if (t->kind == SIM_TIER_OCC)
        return fail(p, "tier %s: an occ tier calls nothing", t->name);
      if (!rf->tier_policy[i][0])
        return fail(p, "tier %s calls %s: needs policy=NAME for those calls", t->name,
                    rf->tier_calls[i]);
      t->policy = sim_policy_find(s, rf->tier_policy[i]);
      if (t->policy < 0)
        return fail(p, "tier %s policy '%s': no such policy", t->name, rf->tier_policy[i]);
    } else if (rf->tier_policy[i][0]) {
      return fail(p, "tier %s: policy= without calls=", t->name);
    }
  }
  for (int i = 0; i < s->n_groups; i++) {
    sim_group *g = &s->groups[i];
    p->line = rf->group_line[i];
    if (!rf->group_target[i][0])
      return fail(p, "client %s: needs target=TIER", g->name);
    if ((g->target = tier_find(s, rf->group_target[i])) < 0)
      return fail(p, "client %s: target '%s' is not a tier", g->name, rf->group_target[i]);
    if (!rf->group_policy[i][0])
      return fail(p, "client %s: needs policy=NAME", g->name);
    if ((g->policy = sim_policy_find(s, rf->group_policy[i])) < 0)
      return fail(p, "client %s: policy '%s' is not a policy", g->name, rf->group_policy[i]);
    if (!g->closed && g->rate <= 0)
      return fail(p, "client %s: an open loop needs rate=N/s > 0", g->name);
  }
  for (int i = 0; i < s->n_triggers; i++) {
    sim_trigger *t = &s->triggers[i];
    p->line = rf->trig_line[i];
    t->tier = t->group = -1;
    if (t->to <= t->from)
      return fail(p, "trigger: to= must be after from=");
    if (t->kind == SIM_TRIG_BURST) {
      if (!rf->trig_group[i][0])
        return fail(p, "trigger burst: needs client=GROUP");
      if ((t->group = group_find(s, rf->trig_group[i])) < 0)
        return fail(p, "trigger burst: client '%s' is not a client group", rf->trig_group[i]);
      if (s->groups[t->group].closed)
        return fail(p, "trigger burst: client %s is closed-loop (a burst needs an open loop)",
                    rf->trig_group[i]);
    } else if (!rf->trig_tier[i][0]) {
      return fail(p, "trigger: needs tier=TIER");
    } else if ((t->tier = tier_find(s, rf->trig_tier[i])) < 0) {
      return fail(p, "trigger: tier '%s' is not a tier", rf->trig_tier[i]);
    }
    if ((t->kind == SIM_TRIG_SLOWDOWN || t->kind == SIM_TRIG_BURST) && t->factor <= 0)
      return fail(p, "trigger: needs factor=X");
    /* No default: a capacity trigger without a number of workers would be 0 workers (nothing
     * starts while it lasts), which nobody writes by leaving the key out. */
    if (t->kind == SIM_TRIG_CAPACITY && !rf->trig_workers[i])
      return fail(p, "trigger capacity: needs workers=N (workers per server while it lasts; 0: "
                     "no attempt starts)");
  }
  if (drop_expired_acts(p, rf) != LK_OK)
    return LK_EPARSE;
  p->line = 0; /* what the file lacks: no line to name */
  if (s->n_tiers == 0)
    return fail(p, "no tier: a scenario needs at least one `tier` line");
  if (s->n_groups == 0)
    return fail(p, "no client: a scenario needs at least one `client` line");
  return LK_OK;
}

static int directive(pctx *p, refs *rf, char **tok, int n) {
  sim_scenario *s = p->s;
  const char *d = tok[0];
  int first = 1;
  /* a key given twice on a line is refused: which one would win is not the author's intent */
  for (int i = 1; i < n; i++) {
    const char *eq = strchr(tok[i], '=');
    if (!eq)
      continue;
    size_t kl = (size_t)(eq - tok[i]);
    for (int j = 1; j < i; j++)
      if (!strncmp(tok[i], tok[j], kl) && tok[j][kl] == '=')
        return fail(p, "%s: %.*s= given twice", d, (int)kl, tok[i]);
  }
  if (!strcmp(d, "seed")) {
    if (n != 2)
      return fail(p, "seed N");
    char *end;
    errno = 0;
    unsigned long long v = strtoull(tok[1], &end, 10);
    if (end == tok[1] || *end || errno || tok[1][0] == '-')
      return fail(p, "seed: '%s' is not a whole number", tok[1]);
    s->seed = v;
    return LK_OK;
  }
  if (!strcmp(d, "duration") || !strcmp(d, "drain") || !strcmp(d, "window")) {
    if (n != 2)
      return fail(p, "%s DURATION", d);
    int64_t v;
    if (dur(p, d, tok[1], &v))
      return LK_EPARSE;
    p->timing_line = p->line;
    if (d[1] == 'u') {
      if (v <= 0 || v > LK_SEC(86400 * 365))
        return fail(p, "duration: in (0, 1 year]");
      s->duration = v;
    } else if (d[0] == 'd') {
      if (v > LK_SEC(86400 * 365))
        return fail(p, "drain: at most 1 year");
      s->drain = v;
    } else {
      if (v < LK_NS_PER_US)
        return fail(p, "window: at least 1us");
      s->window = v;
    }
    return LK_OK;
  }
  if (!strcmp(d, "network")) {
    for (int i = 1; i < n; i++) {
      char *eq = strchr(tok[i], '=');
      if (!eq || strncmp(tok[i], "delay=", 6))
        return fail(p, "network: unknown key '%s' (delay=DIST)", tok[i]);
      if (dist(p, "delay", eq + 1, &s->net))
        return LK_EPARSE;
    }
    return LK_OK;
  }
  int ix;
  if (!strcmp(d, "policy")) {
    if (s->n_policies == SIM_MAX_POLICIES)
      return fail(p, "at most %d policies", SIM_MAX_POLICIES);
    ix = s->n_policies;
    sim_policy *pol = &s->policies[ix];
    policy_defaults(pol);
    if (n < 2 || strchr(tok[1], '='))
      return fail(p, "policy NAME key=value ...");
    if (set_name(p, pol->name, "policy", tok[1]))
      return LK_EPARSE;
    if (sim_policy_find(s, pol->name) >= 0)
      return fail(p, "policy %s defined twice", pol->name);
    s->n_policies++;
  } else if (!strcmp(d, "tier")) {
    if (s->n_tiers == SIM_MAX_TIERS)
      return fail(p, "at most %d tiers", SIM_MAX_TIERS);
    ix = s->n_tiers;
    sim_tier *t = &s->tiers[ix];
    memset(t, 0, sizeof *t);
    t->servers = 1;
    t->workers = 1;
    t->queue = 1000;
    t->calls = -1;
    if (n < 2 || strchr(tok[1], '='))
      return fail(p, "tier NAME key=value ...");
    if (set_name(p, t->name, "tier", tok[1]))
      return LK_EPARSE;
    if (tier_find(s, t->name) >= 0)
      return fail(p, "tier %s defined twice", t->name);
    rf->tier_line[ix] = p->line;
    s->n_tiers++;
  } else if (!strcmp(d, "client")) {
    if (s->n_groups == SIM_MAX_GROUPS)
      return fail(p, "at most %d client groups", SIM_MAX_GROUPS);
    ix = s->n_groups;
    sim_group *g = &s->groups[ix];
    memset(g, 0, sizeof *g);
    g->count = 1;
    g->poisson = true;
    if (n < 2 || strchr(tok[1], '='))
      return fail(p, "client NAME key=value ...");
    if (set_name(p, g->name, "client", tok[1]))
      return LK_EPARSE;
    if (group_find(s, g->name) >= 0)
      return fail(p, "client %s defined twice", g->name);
    rf->group_line[ix] = p->line;
    s->n_groups++;
  } else if (!strcmp(d, "trigger")) {
    if (s->n_triggers == SIM_MAX_TRIGGERS)
      return fail(p, "at most %d triggers", SIM_MAX_TRIGGERS);
    ix = s->n_triggers;
    sim_trigger *t = &s->triggers[ix];
    memset(t, 0, sizeof *t);
    t->fail = LK_F_HTTP_503;
    if (n < 2)
      return fail(p, "trigger KIND key=value ...");
    if (!strcmp(tok[1], "outage"))
      t->kind = SIM_TRIG_OUTAGE;
    else if (!strcmp(tok[1], "slowdown"))
      t->kind = SIM_TRIG_SLOWDOWN;
    else if (!strcmp(tok[1], "capacity"))
      t->kind = SIM_TRIG_CAPACITY;
    else if (!strcmp(tok[1], "burst"))
      t->kind = SIM_TRIG_BURST;
    else
      return fail(p, "trigger: '%s' is not outage, slowdown, capacity or burst", tok[1]);
    rf->trig_line[ix] = p->line;
    s->n_triggers++;
  } else {
    return fail(p,
                "unknown directive '%s' (seed, duration, drain, window, network, policy, "
                "tier, client, trigger)",
                d);
  }
  first = 2;
  for (int i = first; i < n; i++) {
    char *eq = strchr(tok[i], '=');
    if (!eq || eq == tok[i])
      return fail(p, "'%s' is not key=value", tok[i]);
    *eq = '\0';
    const char *k = tok[i], *v = eq + 1;
    if (!*v)
      return fail(p, "%s: empty value", k);
    int rc;
    if (d[0] == 'p')
      rc = policy_kv(p, &s->policies[ix], k, v);
    else if (d[0] == 't' && d[1] == 'i')
      rc = tier_kv(p, &s->tiers[ix], rf, ix, k, v);
    else if (d[0] == 'c')
      rc = group_kv(p, &s->groups[ix], rf, ix, k, v);
    else
      rc = trigger_kv(p, &s->triggers[ix], rf, ix, k, v);
    if (rc)
      return rc;
  }
  char **keys = tok + first;
  int nk = n - first, rc;
  if (d[0] == 'p')
    rc = policy_applies(p, &s->policies[ix], keys, nk);
  else if (d[0] == 't' && d[1] == 'i')
    rc = tier_applies(p, &s->tiers[ix], keys, nk);
  else if (d[0] == 'c')
    rc = group_applies(p, &s->groups[ix], keys, nk);
  else
    rc = trigger_applies(p, &s->triggers[ix], keys, nk);
  if (rc)
    return rc;
  if (d[0] == 'p')
    return policy_check(p, &s->policies[ix]);
  if (d[0] == 't' && d[1] == 'i' && s->tiers[ix].kind == SIM_TIER_QUEUE &&
      !rf->tier_service[ix] && !rf->tier_calls[ix][0])
    return fail(p, "tier %s: needs service=DIST", s->tiers[ix].name);
  return LK_OK;
}

int sim_scenario_parse(const char *text, size_t len, sim_scenario *out, char *err, size_t cap) {
  memset(out, 0, sizeof *out);
  out->seed = 1;
  out->duration = LK_SEC(10);
  out->drain = LK_SEC(10);
  out->window = LK_MS(100);
  out->net.kind = SIM_D_CONST;
  out->net.a = 500 * LK_NS_PER_US;
  refs *rf = calloc(1, sizeof *rf);
  if (!rf) {
    if (err && cap)
      snprintf(err, cap, "out of memory");
    return LK_ENOMEM;
  }
  pctx p = {out, 0, 0, err, cap};
  size_t i = 0;
  /* A UTF-8 byte order mark (what some Windows editors write first) is not part of the first
   * line; skipped, as the gateway's config loader does, so `seed 1` on line 1 still counts. */
  if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
    i = 3;
  int rc = LK_OK;
  char line[LINE_MAX_];
  while (i < len && rc == LK_OK) {
    p.line++;
    size_t n = 0;
    bool too_long = false;
    while (i < len && text[i] != '\n') {
      if (text[i] == '\0') {
        rc = fail(&p, "NUL byte");
        break;
      }
      if (n + 1 < sizeof line)
        line[n++] = text[i];
      else
        too_long = true;
      i++;
    }
    i++; /* the newline */
    if (rc)
      break;
    if (too_long) {
      rc = fail(&p, "longer than %d bytes", LINE_MAX_ - 1);
      break;
    }
    line[n] = '\0';
    char *hash = strchr(line, '#');
    if (hash)
      *hash = '\0';
    char *tok[TOK_MAX];
    int nt = 0;
    for (char *c = line; *c;) {
      while (*c == ' ' || *c == '\t' || *c == '\r')
        *c++ = '\0';
      if (!*c)
        break;
      if (nt == TOK_MAX) {
        rc = fail(&p, "more than %d words", TOK_MAX);
        break;
      }
      tok[nt++] = c;
      while (*c && *c != ' ' && *c != '\t' && *c != '\r')
        c++;
    }
    if (rc || nt == 0)
      continue;
    rc = directive(&p, rf, tok, nt);
  }
  if (rc == LK_OK)
    rc = resolve(&p, rf);
  /* checks of the three together: at the last of their lines (1 when all are defaults) */
  if (rc == LK_OK && out->window > out->duration) {
    p.line = p.timing_line > 0 ? p.timing_line : 1;
    rc = fail(&p, "window longer than the duration");
  }
  if (rc == LK_OK && lk_sat_add(out->duration, out->drain) / out->window >= SIM_MAX_WINDOWS) {
    p.line = p.timing_line > 0 ? p.timing_line : 1;
    rc = fail(&p, "more than %d windows in duration + drain: make window= longer",
              SIM_MAX_WINDOWS - 1);
  }
  free(rf);
  return rc;
}

int sim_scenario_load(const char *path, sim_scenario *out, char *err, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, cap, "%s: %s", path, strerror(errno));
    return LK_ESYS;
  }
  size_t size = 0, alloc = 0;
  char *buf = NULL;
  for (;;) {
    if (size == alloc) {
      if (alloc >= (size_t)16 << 20) {
        free(buf);
        fclose(f);
        snprintf(err, cap, "%s: larger than 16 MiB", path);
        return LK_EPARSE;
      }
      alloc = alloc ? alloc * 2 : 4096;
      char *nb = realloc(buf, alloc);
      if (!nb) {
        free(buf);
        fclose(f);
        snprintf(err, cap, "%s: out of memory", path);
        return LK_ENOMEM;
      }
      buf = nb;
    }
    size_t got = fread(buf + size, 1, alloc - size, f);
    size += got;
    if (got == 0)
      break;
  }
  bool bad = ferror(f) != 0;
  fclose(f);
  if (bad) {
    free(buf);
    snprintf(err, cap, "%s: read error", path);
    return LK_ESYS;
  }
  char msg[512];
  int rc = sim_scenario_parse(buf, size, out, msg, sizeof msg);
  free(buf);
  if (rc != LK_OK)
    snprintf(err, cap, "%s: %s", path, msg);
  return rc;
}
