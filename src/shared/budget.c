/* SPDX-License-Identifier: MIT */
/* budget.c: the fleet-wide RATIO retry budget, an lk_budget backend. */
#include "scripts.h"
#include "shared_internal.h"

#include <linkd/clock.h>
#include <linkd/error.h>

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MICRO_PER_RETRY 1000000 /* budget.h's RATIO units */

enum { S_DEPOSIT, S_RETRY };

typedef struct sh_budget {
  sh_conn *conn;
  lk_budget *local; /* the fallback, and the local view for stats */
  int64_t timeout;
  _Atomic int64_t pending; /* requests recorded, not yet added in Redis */
  char width_us[SH_ARG_LEN], buckets[SH_ARG_LEN], gain[SH_ARG_LEN], reserve[SH_ARG_LEN],
      cost[SH_ARG_LEN], ttl_ms[SH_ARG_LEN];
} sh_budget;

static const char *const scripts[] = {SH_SCRIPT_DEPOSIT, SH_SCRIPT_RETRY};

/* The connection's thread, each turn: the requests recorded since the last one, in one call. */
static void sb_tick(void *owner, sh_conn *c) {
  sh_budget *b = owner;
  int64_t n = atomic_exchange(&b->pending, 0);
  if (n <= 0)
    return;
  char count[SH_ARG_LEN];
  snprintf(count, sizeof count, "%lld", (long long)n);
  const char *args[] = {b->width_us, b->buckets, count, b->ttl_ms};
  sh_send(c, S_DEPOSIT, args, 4);
}

static int sb_acquire(void *arg, int64_t now, bool after_timeout, int64_t *charged) {
  sh_budget *b = arg;
  const char *args[] = {b->width_us, b->buckets, b->gain, b->reserve, b->cost, b->ttl_ms};
  long long reply;
  if (sh_call(b->conn, S_RETRY, args, 6, b->timeout, &reply) == LK_OK) {
    *charged = MICRO_PER_RETRY;
    return reply == 1 ? LK_OK : LK_EBUDGET;
  }
  lk_budget_ticket t = {0};
  int rc = lk_budget_acquire_retry_ticket(b->local, now, after_timeout, &t);
  *charged = t.cost;
  return rc;
}

static void sb_request(void *arg, int64_t now) {
  sh_budget *b = arg;
  /* Always locally too: the fallback then knows this process's recent traffic the moment it
   * is needed. Redis hears of it in the next batch when it is in use. */
  lk_budget_record_request(b->local, now);
  if (sh_usable(b->conn))
    atomic_fetch_add(&b->pending, 1);
}

static void sb_success(void *arg, int64_t now, int64_t cost) {
  (void)cost;
  lk_budget_record_success(((sh_budget *)arg)->local, now); /* RATIO ignores it */
}

static void sb_failure(void *arg, int64_t now) {
  lk_budget_record_failure(((sh_budget *)arg)->local, now); /* RATIO ignores it */
}

static int sb_stats(void *arg, int64_t now, lk_budget_stats *out) {
  return lk_budget_stats_get(((sh_budget *)arg)->local, now, out);
}

static void sb_free(void *arg) {
  sh_budget *b = arg;
  sh_conn_free(b->conn);
  lk_budget_free(b->local);
  free(b);
}

static const lk_budget_backend backend = {
    .acquire_retry = sb_acquire,
    .record_request = sb_request,
    .record_success = sb_success,
    .record_failure = sb_failure,
    .stats = sb_stats,
    .free = sb_free,
};

int lk_shared_budget_new(const lk_shared_config *sc, const lk_budget_ratio_config *bc,
                         lk_budget **out, const char **why) {
  if (out)
    *out = NULL;
  if (!sc || !bc || !out)
    return LK_EINVAL;
  int rc = lk_shared_config_validate(sc, why);
  if (rc == LK_OK)
    rc = lk_budget_ratio_config_validate(bc, why);
  if (rc != LK_OK)
    return rc;
  sh_budget *b = calloc(1, sizeof *b);
  if (!b)
    return LK_ENOMEM;
  b->timeout = sc->timeout;
  /* The same arithmetic as the local RATIO form (budget.c), fleet-wide. */
  int64_t width = bc->ttl / bc->buckets;
  int64_t reserve = (int64_t)bc->min_retries_per_sec * (width * bc->buckets / 1000);
  snprintf(b->width_us, sizeof b->width_us, "%lld", (long long)(width / 1000));
  snprintf(b->buckets, sizeof b->buckets, "%d", bc->buckets);
  snprintf(b->gain, sizeof b->gain, "%lld", (long long)llround(bc->percent * 10000.0));
  snprintf(b->reserve, sizeof b->reserve, "%lld", (long long)reserve);
  snprintf(b->cost, sizeof b->cost, "%d", MICRO_PER_RETRY);
  snprintf(b->ttl_ms, sizeof b->ttl_ms, "%lld", (long long)(bc->ttl / LK_NS_PER_MS + 1000));
  lk_budget_ratio_config local = *bc;
  local.min_retries_per_sec = bc->min_retries_per_sec / sc->fleet_size;
  rc = lk_budget_new_ratio(&local, &b->local, why);
  if (rc == LK_OK) {
    sh_conn_config cc = {sc, "budget", scripts, 2, sb_tick, b};
    rc = sh_conn_new(&cc, &b->conn, why);
  }
  if (rc == LK_OK)
    rc = lk_budget_new_backend(LK_BUDGET_RATIO, &backend, b, out);
  if (rc != LK_OK) {
    sh_conn_free(b->conn);
    lk_budget_free(b->local);
    free(b);
  }
  return rc;
}

int lk_shared_budget_stats(const lk_budget *bud, lk_shared_stats *out) {
  sh_budget *b = lk_budget_backend_arg(bud, &backend);
  if (!b || !out)
    return LK_EINVAL;
  sh_stats(b->conn, out);
  return LK_OK;
}
