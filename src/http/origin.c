/* SPDX-License-Identifier: MIT */
/* Default protection per origin: the retry budget and circuit breaker a client keeps for each
 * origin (scheme, host, port) its calls go to, used when a policy names none of its own. Finagle
 * gives every client a RetryBudget and the AWS SDKs a retry quota per client, switched on by
 * default, because a retry storm is made by clients whose authors never set anything. */
#include "call_internal.h"

#include <linkd/budget.h>
#include <linkd/breaker.h>

#include <stdlib.h>
#include <string.h>

struct lk_origin {
  char key[LK_ORIGIN_KEY_MAX]; /* "scheme://host:port", lower case */
  lk_budget *budget;
  lk_breaker *breaker;
  lk_rand_fast rng; /* jitter of the breaker's open wait; used only under the breaker's lock */
};

void lk_http_origin_budget_default(lk_budget_ratio_config *c) {
  lk_budget_ratio_config_init_default(c); /* Finagle's: 20 % of requests, 10 s, 10 retries/s */
}

void lk_http_origin_breaker_default(lk_breaker_config *c) {
  lk_breaker_config_init_default(c);
  c->window = LK_BREAKER_WINDOW_COUNT;
  c->window_size = 50;
  c->minimum_calls = 20;
  c->failure_rate_threshold = 50;
  /* 100 ms, doubling to 500 ms, symmetric jitter: with one origin and no other endpoint to send
   * to, a long open wait is downtime, and 5 probes every half second cost the origin next to
   * nothing; every call with a deadline above about a second can wait for the next probe
   * (breaker_wait) instead of failing. Measured in the demo's faults scenario: a 4 s cap refused
   * calls for seconds after a 0.7 s outage, a 1 s cap left libraryd idle for up to a second
   * after it came back, 500 ms recovers within the series' 100 ms resolution. */
  c->wait_backoff = true;
  lk_backoff_config_init_default(&c->backoff);
  c->backoff.kind = LK_BACKOFF_EXPONENTIAL;
  c->backoff.base = LK_MS(100);
  c->backoff.max = LK_MS(500);
  c->backoff.jitter = LK_JITTER_SYMMETRIC;
  c->permitted_half_open = 5;
  c->half_open_decide_early = true;
}

/* "scheme://host[:port]" of an absolute URL, lower case, with the scheme's default port made
 * explicit; false if the URL has no authority or it does not fit. */
static bool origin_key(const char *url, char *out, size_t cap) {
  const char *sep = strstr(url, "://");
  if (!sep)
    return false;
  const char *host = sep + 3;
  size_t hl = strcspn(host, "/?#");
  size_t sl = (size_t)(sep - url);
  if (hl == 0 || sl + 3 + hl + 7 > cap)
    return false;
  size_t n = 0;
  for (size_t i = 0; i < sl + 3 + hl; i++) {
    char ch = url[i];
    out[n++] = ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
  }
  out[n] = '\0';
  const char *last_colon = memchr(host, ':', hl) ? strrchr(out + sl + 3, ':') : NULL;
  const char *bracket = strrchr(out + sl + 3, ']'); /* [v6]:port */
  bool has_port = last_colon && (!bracket || last_colon > bracket);
  if (!has_port) {
    bool https = sl == 5 && !strncmp(out, "https", 5);
    memcpy(out + n, https ? ":443" : ":80", https ? 5 : 4);
  }
  return true;
}

static lk_origin *find(lk_http_client *c, const char *key) {
  for (size_t i = 0; i < c->norigins; i++)
    if (!strcmp(c->origins[i]->key, key))
      return c->origins[i];
  return NULL;
}

static void origin_free(lk_origin *o) {
  if (!o)
    return;
  lk_budget_free(o->budget);
  lk_breaker_free(o->breaker);
  free(o);
}

static int origin_get(lk_http_client *c, const lk_http_request *req, lk_origin **out) {
  *out = NULL;
  char key[LK_ORIGIN_KEY_MAX];
  if (!origin_key(req->url, key, sizeof key))
    return LK_OK; /* no authority to key on: no default protection */
  lk_origin *o = find(c, key);
  if (o) {
    *out = o;
    return LK_OK;
  }
  if (c->norigins >= LK_ORIGIN_MAX)
    return LK_OK; /* documented in http.h: beyond this many origins, none */
  if (c->norigins == c->cap_origins) {
    size_t cap = c->cap_origins ? c->cap_origins * 2 : 4;
    lk_origin **a = realloc(c->origins, cap * sizeof *a);
    if (!a)
      return LK_ENOMEM;
    c->origins = a;
    c->cap_origins = cap;
  }
  o = calloc(1, sizeof *o);
  if (!o)
    return LK_ENOMEM;
  memcpy(o->key, key, sizeof key);
  if (lk_rand_fast_init(&o->rng) != LK_OK) {
    free(o);
    return LK_ESYS;
  }
  lk_breaker_config bc = c->origin_breaker;
  bc.rng = &o->rng.base;
  int rc = lk_budget_new_ratio(&c->origin_budget, &o->budget, NULL);
  if (rc == LK_OK)
    rc = lk_breaker_new(&bc, &o->breaker, NULL);
  if (rc != LK_OK) {
    origin_free(o);
    return rc;
  }
  c->origins[c->norigins++] = o;
  *out = o;
  return LK_OK;
}

int lk__origin_protect(lk_http_client *c, const lk_http_request *req, lk_budget **budget,
                       lk_breaker **breaker) {
  lk_origin *o = NULL;
  int rc = origin_get(c, req, &o);
  if (rc == LK_OK && o) {
    if (!*budget)
      *budget = o->budget;
    if (!*breaker)
      *breaker = o->breaker;
  }
  return rc;
}

void lk__origins_free(lk_http_client *c) {
  for (size_t i = 0; i < c->norigins; i++)
    origin_free(c->origins[i]);
  free(c->origins);
  c->origins = NULL;
  c->norigins = c->cap_origins = 0;
}

int lk__origin_config(lk_http_client *c, const lk_http_client_config *cfg) {
  if (cfg && cfg->origin_budget)
    c->origin_budget = *cfg->origin_budget;
  else
    lk_http_origin_budget_default(&c->origin_budget);
  if (cfg && cfg->origin_breaker)
    c->origin_breaker = *cfg->origin_breaker;
  else
    lk_http_origin_breaker_default(&c->origin_breaker);
  lk_breaker_config bc = c->origin_breaker;
  lk_rand_fast probe;
  lk_rand_fast_seeded(&probe, 1);
  bc.rng = &probe.base; /* each origin gets its own generator; validate with a stand-in */
  if (lk_budget_ratio_config_validate(&c->origin_budget, NULL) != LK_OK ||
      lk_breaker_config_validate(&bc, NULL) != LK_OK)
    return LK_ECONFIG;
  return LK_OK;
}

static lk_origin *lookup(lk_http_client *c, const char *url) {
  char key[LK_ORIGIN_KEY_MAX];
  return c && url && origin_key(url, key, sizeof key) ? find(c, key) : NULL;
}

lk_budget *lk_http_client_origin_budget(lk_http_client *c, const char *url) {
  lk_origin *o = lookup(c, url);
  return o ? o->budget : NULL;
}

lk_breaker *lk_http_client_origin_breaker(lk_http_client *c, const char *url) {
  lk_origin *o = lookup(c, url);
  return o ? o->breaker : NULL;
}
