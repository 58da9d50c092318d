/* SPDX-License-Identifier: MIT */
/* limiter.c: the fleet-wide GCRA limiter, an lk_limiter backend. */
#include "scripts.h"
#include "shared_internal.h"

#include <linkd/clock.h>
#include <linkd/error.h>

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sh_limiter {
  sh_conn *conn;
  lk_limiter *local; /* the fallback: this process's share of the fleet's limits */
  int fleet;
  int64_t timeout;
  pthread_mutex_t mu; /* guards the two strings below (set_config may change them) */
  char interval_us[SH_ARG_LEN], span_us[SH_ARG_LEN];
} sh_limiter;

static const char *const scripts[] = {SH_SCRIPT_GCRA};

static void local_config(const lk_limiter_config *c, int fleet, lk_limiter_config *out) {
  out->rate = c->rate / fleet;
  if (out->rate < LK_LIMITER_RATE_MIN)
    out->rate = LK_LIMITER_RATE_MIN;
  out->burst = c->burst / fleet > 0 ? c->burst / fleet : 1;
}

/* The same interval as lk_limiter's (whole ns, rounded up), in microseconds for the script. */
static void set_params(sh_limiter *l, const lk_limiter_config *c) {
  double ns = ceil(1e9 / c->rate);
  if (ns < 1.0)
    ns = 1.0;
  double span = ns * (double)c->burst;
  pthread_mutex_lock(&l->mu);
  snprintf(l->interval_us, sizeof l->interval_us, "%.3f", ns / 1000.0);
  snprintf(l->span_us, sizeof l->span_us, "%.3f", span / 1000.0);
  pthread_mutex_unlock(&l->mu);
}

static int64_t sl_reserve(void *arg, int64_t now, int64_t max_wait) {
  sh_limiter *l = arg;
  /* The caller's deadline has passed: no time to ask Redis. The local share answers (an
   * immediate token or nothing), and it is not an outage. */
  if (max_wait < 0)
    return lk_limiter_reserve(l->local, now, 0);
  /* Never wait for Redis longer than the caller would wait for its token. */
  int64_t wait = max_wait > 0 && max_wait < l->timeout ? max_wait : l->timeout;
  char mw[SH_ARG_LEN], iv[SH_ARG_LEN], sp[SH_ARG_LEN];
  snprintf(mw, sizeof mw, "%lld", (long long)(max_wait / 1000));
  pthread_mutex_lock(&l->mu);
  memcpy(iv, l->interval_us, sizeof iv);
  memcpy(sp, l->span_us, sizeof sp);
  pthread_mutex_unlock(&l->mu);
  const char *args[] = {iv, sp, mw};
  long long reply;
  if (sh_call(l->conn, 0, args, 3, wait, &reply) == LK_OK) {
    if (reply < 0)
      return LK_ERATE_LIMITED;
    /* Microseconds rounded up can exceed a max_wait that is not a whole microsecond. */
    int64_t w = reply > INT64_MAX / 1000 ? INT64_MAX : (int64_t)reply * 1000;
    return w > max_wait ? max_wait : w;
  }
  return lk_limiter_reserve(l->local, now, max_wait);
}

static int64_t sl_available(void *arg, int64_t now) {
  return lk_limiter_available(((sh_limiter *)arg)->local, now);
}

static int64_t sl_wait_time(void *arg, int64_t now) {
  return lk_limiter_wait_time(((sh_limiter *)arg)->local, now);
}

static int sl_set_config(void *arg, const lk_limiter_config *c, const char **why) {
  sh_limiter *l = arg;
  lk_limiter_config lc;
  local_config(c, l->fleet, &lc);
  int rc = lk_limiter_set_config(l->local, &lc, why);
  if (rc == LK_OK)
    set_params(l, c);
  return rc;
}

static void sl_free(void *arg) {
  sh_limiter *l = arg;
  sh_conn_free(l->conn);
  lk_limiter_free(l->local);
  pthread_mutex_destroy(&l->mu);
  free(l);
}

static const lk_limiter_backend backend = {
    .reserve = sl_reserve,
    .available = sl_available,
    .wait_time = sl_wait_time,
    .set_config = sl_set_config,
    .free = sl_free,
};

int lk_shared_limiter_new(const lk_shared_config *sc, const lk_limiter_config *lc, lk_limiter **out,
                          const char **why) {
  if (out)
    *out = NULL;
  if (!sc || !lc || !out)
    return LK_EINVAL;
  int rc = lk_shared_config_validate(sc, why);
  if (rc == LK_OK)
    rc = lk_limiter_config_validate(lc, why);
  if (rc != LK_OK)
    return rc;
  sh_limiter *l = calloc(1, sizeof *l);
  if (!l)
    return LK_ENOMEM;
  l->fleet = sc->fleet_size;
  l->timeout = sc->timeout;
  pthread_mutex_init(&l->mu, NULL);
  set_params(l, lc);
  lk_limiter_config local;
  local_config(lc, l->fleet, &local);
  rc = lk_limiter_new(&local, &l->local, why);
  if (rc == LK_OK) {
    sh_conn_config cc = {sc, "limiter", scripts, 1, NULL, NULL};
    rc = sh_conn_new(&cc, &l->conn, why);
  }
  if (rc == LK_OK)
    rc = lk_limiter_new_backend(lc, &backend, l, out, why);
  if (rc != LK_OK) {
    sh_conn_free(l->conn);
    lk_limiter_free(l->local);
    pthread_mutex_destroy(&l->mu);
    free(l);
  }
  return rc;
}

int lk_shared_limiter_stats(const lk_limiter *lim, lk_shared_stats *out) {
  sh_limiter *l = lk_limiter_backend_arg(lim, &backend);
  if (!l || !out)
    return LK_EINVAL;
  sh_stats(l->conn, out);
  return LK_OK;
}
