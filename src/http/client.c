/* SPDX-License-Identifier: MIT */
/* lk_http_client: a libcurl multi handle running many logical calls on one thread, with its own
 * poll loop or embedded in an external event loop. Retry delays and phase timeouts are timers
 * checked at every wake-up, never sleeps. */
#include "call_internal.h"

#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static bool curl_ok;
static void curl_init_once(void) { curl_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }

#define EASY_POOL_MAX 1024

static void easy_free(lk_easy *x) {
  curl_easy_cleanup(x->h);
  lk__tls_files_free(&x->tls);
  free(x);
}

lk_easy *lk__client_easy_get(lk_http_client *c) {
  if (c->neasy)
    return c->easy_pool[--c->neasy];
  lk_easy *x = calloc(1, sizeof *x);
  if (x && !(x->h = curl_easy_init())) {
    free(x);
    x = NULL;
  }
  if (x)
    x->client = c;
  if (x && lk__easy_init(x) != LK_OK) {
    easy_free(x);
    x = NULL;
  }
  return x;
}

void lk__client_easy_put(lk_http_client *c, lk_easy *e) {
  e->t = NULL;
  if (e->dns || e->resolve || e->connect_to) {
    /* the call's lists and DNS cache go with the call: the next user of the handle sees none */
    curl_easy_setopt(e->h, CURLOPT_RESOLVE, (struct curl_slist *)NULL);
    curl_easy_setopt(e->h, CURLOPT_CONNECT_TO, (struct curl_slist *)NULL);
    curl_easy_setopt(e->h, CURLOPT_SHARE, (CURLSH *)NULL);
    e->dns = NULL;
    e->resolve = false;
    e->connect_to = NULL;
  }
  if (c->neasy == c->cap_easy && c->cap_easy < EASY_POOL_MAX) {
    size_t nc = c->cap_easy ? 2 * c->cap_easy : 8;
    lk_easy **np = realloc(c->easy_pool, nc * sizeof *np);
    if (np) {
      c->easy_pool = np;
      c->cap_easy = nc;
    }
  }
  if (c->neasy < c->cap_easy)
    c->easy_pool[c->neasy++] = e;
  else
    easy_free(e);
}

int lk__client_tok_register(lk_http_client *c, lk_http_cancel *t) {
  for (size_t i = 0; i < c->ntoks; i++)
    if (c->toks[i].tok == t) {
      c->toks[i].refs++;
      return LK_OK;
    }
  if (c->ntoks == c->cap_toks) {
    size_t nc = c->cap_toks ? 2 * c->cap_toks : 4;
    lk_tok_reg *nt = realloc(c->toks, nc * sizeof *nt);
    if (!nt)
      return LK_ENOMEM;
    c->toks = nt;
    c->cap_toks = nc;
  }
  c->toks[c->ntoks++] = (lk_tok_reg){t, 1};
  if (c->external)
    c->cfg.socket_fn(c->cfg.loop_ud, t->fd, LK_HTTP_POLL_IN);
  return LK_OK;
}

void lk__client_tok_unregister(lk_http_client *c, lk_http_cancel *t) {
  for (size_t i = 0; i < c->ntoks; i++)
    if (c->toks[i].tok == t) {
      if (--c->toks[i].refs == 0) {
        c->toks[i] = c->toks[--c->ntoks];
        if (c->external)
          c->cfg.socket_fn(c->cfg.loop_ud, t->fd, 0);
      }
      return;
    }
}

void lk__client_unlink(lk_http_client *c, lk_call *k) {
  if (k->prev)
    k->prev->next = k->next;
  else
    c->calls = k->next;
  if (k->next)
    k->next->prev = k->prev;
  k->prev = k->next = NULL;
  c->ncalls--;
  c->changes++;
  c->ends++;
}

/* --- external loop plumbing ---------------------------------------------------------------- */
static int on_socket(CURL *e, curl_socket_t s, int what, void *userp, void *socketp) {
  (void)e, (void)socketp;
  lk_http_client *c = userp;
  int ev = 0;
  if (what != CURL_POLL_REMOVE) {
    if (what & CURL_POLL_IN)
      ev |= LK_HTTP_POLL_IN;
    if (what & CURL_POLL_OUT)
      ev |= LK_HTTP_POLL_OUT;
  }
  c->cfg.socket_fn(c->cfg.loop_ud, s, ev);
  return 0;
}

static int on_timer(CURLM *m, long timeout_ms, void *userp) {
  (void)m;
  lk_http_client *c = userp;
  c->curl_timer_at = timeout_ms < 0 ? -1 : lk_now_ns() + (int64_t)timeout_ms * LK_NS_PER_MS;
  return 0;
}

/* --- lifecycle ------------------------------------------------------------------------------ */
lk_http_client *lk_http_client_new(const lk_http_client_config *cfg) {
  pthread_once(&curl_once, curl_init_once);
  if (!curl_ok)
    return NULL;
  lk_http_client *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  if (cfg)
    c->cfg = *cfg;
  c->external = c->cfg.socket_fn && c->cfg.timer_fn;
  c->curl_timer_at = -1;
  c->armed_delay_at = INT64_MIN;
  (void)lk_rand_fast_init(&c->rng); /* without entropy it is still seeded well enough for jitter */
  c->timer_fd = -1;
  c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  c->multi = curl_multi_init();
  if (c->wake_fd < 0 || !c->multi) {
    if (c->wake_fd >= 0)
      close(c->wake_fd);
    if (c->multi)
      curl_multi_cleanup(c->multi);
    free(c);
    return NULL;
  }
  if (lk__origin_config(c, cfg) != LK_OK) {
    close(c->wake_fd);
    curl_multi_cleanup(c->multi);
    free(c);
    return NULL;
  }
  if (c->external && c->cfg.transport == LK_HTTP_TRANSPORT_NATIVE && c->cfg.max_connections <= 0 &&
      c->cfg.max_host_connections <= 0 && !(c->h1 = lk__h1_new(c))) {
    lk__origins_free(c);
    close(c->wake_fd);
    curl_multi_cleanup(c->multi);
    free(c);
    return NULL;
  }
  c->cfg.origin_budget = NULL; /* copied: the caller's structs need not outlive the client */
  c->cfg.origin_breaker = NULL;
  if (c->cfg.max_connections > 0)
    curl_multi_setopt(c->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, c->cfg.max_connections);
  if (c->cfg.max_host_connections > 0)
    curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, c->cfg.max_host_connections);
  if (c->cfg.max_pool > 0)
    curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, c->cfg.max_pool);
  if (c->external) {
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, (void *)c);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, (void *)c);
    c->cfg.socket_fn(c->cfg.loop_ud, c->wake_fd, LK_HTTP_POLL_IN);
  }
  return c;
}

void lk_http_client_free(lk_http_client *c) {
  if (!c)
    return;
  c->depth++;
  while (c->calls)
    lk__call_abort(c->calls);
  lk__h1_free(c->h1);
  for (size_t i = 0; i < c->neasy; i++)
    easy_free(c->easy_pool[i]);
  if (c->external)
    c->cfg.socket_fn(c->cfg.loop_ud, c->wake_fd, 0);
  curl_multi_cleanup(c->multi);
  close(c->wake_fd);
  if (c->timer_fd >= 0)
    close(c->timer_fd);
  while (c->spare) {
    lk_call *k = c->spare;
    c->spare = k->next;
    lk__resp_free(&k->first.cur);
    free(k);
  }
  lk__origins_free(c); /* after the calls: they hold pointers to these */
  free(c->easy_pool);
  free(c->toks);
  free(c->wfds);
  free(c->conn_tags);
  free(c);
}

void lk__client_notify(lk_http_client *c) {
  uint64_t one = 1;
  ssize_t n = write(c->wake_fd, &one, sizeof one);
  (void)n;
}

void lk_http_client_wakeup(lk_http_client *c) {
  if (!c)
    return;
  atomic_fetch_add(&c->ext_wakes, 1);
  uint64_t one = 1;
  ssize_t n = write(c->wake_fd, &one, sizeof one);
  (void)n;
}

int lk_http_client_active(const lk_http_client *c) { return c ? c->ncalls : 0; }

static void drain(int fd) {
  uint64_t v;
  ssize_t n = read(fd, &v, sizeof v);
  (void)n;
}

/* --- submission ----------------------------------------------------------------------------- */
static int pick_key(lk_call *k, const lk_http_policy *pol) {
  lk_http_result *res = k->res;
  const lk_http_request *r = k->req;
  int n = 0;
  if (r->idem_key) {
    n = lk_idem_key_compose(NULL, r->idem_key, res->idem_key, sizeof res->idem_key);
    k->key_in_request = true;
  } else if (pol->idem_mode == LK_IDEM_KEY) {
    n = lk_idem_key_compose(pol->idem_tenant, pol->idem_key, res->idem_key, sizeof res->idem_key);
  } else if (pol->idem_mode == LK_IDEM_ALWAYS ||
             (pol->idem_mode == LK_IDEM_AUTO && !r->idempotent)) {
    n = lk_idem_key_new(pol->idem_tenant, res->idem_key, sizeof res->idem_key);
  } else {
    return LK_OK;
  }
  if (n < 0)
    return n;
  res->has_key = true;
  snprintf(k->h_idem, sizeof k->h_idem, "Idempotency-Key: %s", res->idem_key);
  return LK_OK;
}

/* Copies `n` entries into a libcurl list: LK_OK (*out NULL when n is 0) or LK_ENOMEM. */
static int slist_of(const char *const *v, size_t n, struct curl_slist **out) {
  *out = NULL;
  for (size_t i = 0; i < n; i++) {
    struct curl_slist *l = curl_slist_append(*out, v[i]);
    if (!l) {
      curl_slist_free_all(*out);
      *out = NULL;
      return LK_ENOMEM;
    }
    *out = l;
  }
  return LK_OK;
}

/* The policy's resolve and connect-to entries, copied for the call, and the DNS cache its
 * resolve entries go in. LK_OK or LK_ENOMEM. */
static int net_setup(lk_call *k, const lk_http_policy *pol) {
  if (slist_of(pol->resolve, pol->nresolve, &k->resolve) != LK_OK ||
      slist_of(pol->connect_to, pol->nconnect_to, &k->connect_to) != LK_OK)
    return LK_ENOMEM;
  if (k->resolve) {
    k->dns = curl_share_init();
    if (!k->dns || curl_share_setopt(k->dns, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK)
      return LK_ENOMEM;
  }
  return LK_OK;
}

void lk__call_net_free(lk_call *k) {
  curl_slist_free_all(k->resolve);
  curl_slist_free_all(k->connect_to);
  if (k->dns)
    curl_share_cleanup(k->dns); /* after every handle of the call left it (easy_put) */
  k->resolve = k->connect_to = NULL;
  k->dns = NULL;
}

static void rearm(lk_http_client *c);

/* A new call is due at once: nothing can be due earlier, so the timer is armed for now without
 * a pass over every call in flight (what rearm() would find). */
static void arm_now(lk_http_client *c) {
  int64_t now = lk_now_ns();
  if (c->armed_delay_at == INT64_MIN || c->armed_delay_at > now) {
    if (!c->fresh_armed) { /* what was armed before the first of these calls */
      c->fresh_armed = true;
      c->fresh_prev_armed = c->armed_delay_at;
    }
    c->armed_delay_at = now;
    c->cfg.timer_fn(c->cfg.loop_ud, 0);
  }
}

int lk_http_submit(lk_http_client *c, lk_http_request *req, const lk_http_policy *pol,
                   lk_http_cancel *cancel, lk_http_done_fn done, void *ud) {
  if (!c || !req || !pol || !done)
    return LK_EINVAL;
  /* Validation is a function of the policy's bytes and of the strings it points to; a policy
   * byte-identical to the last one validated here, with no strings, needs no second look (most
   * callers submit the same policy again and again). */
  bool no_strings = !pol->idem_tenant && !pol->idem_key && !pol->user_agent && !pol->ca_file &&
                    !pol->client_cert && !pol->client_key && !pol->key_password && !pol->resolve &&
                    !pol->connect_to;
  if (!(no_strings && c->valid_pol_set && memcmp(pol, &c->valid_pol, sizeof *pol) == 0)) {
    if (lk_http_policy_validate(pol, NULL) != LK_OK)
      return LK_ECONFIG;
    if (no_strings) {
      memcpy(&c->valid_pol, pol, sizeof *pol); /* bytes, padding included, for memcmp */
      c->valid_pol_set = true;
    }
  }
  lk_call *k = c->spare;
  if (k) {
    /* reuse the memory of a finished call, keeping its response buffers (see lk_call) */
    c->spare = k->next;
    c->nspare--;
    memset(k, 0, offsetof(lk_call, first));
  } else if (!(k = calloc(1, sizeof *k))) {
    return LK_ENOMEM;
  }
  k->cl = c;
  k->req = req;
  k->pol = *pol;
  k->clock = lk__policy_clock(pol);
  k->rng = pol->rng ? pol->rng : &c->rng.base;
  k->cancel = cancel;
  k->done = done;
  k->ud = ud;
  lk__admission_init(&k->adm);
  if (pol->traceparent) {
    k->parent = *pol->traceparent;
    k->pol.traceparent = &k->parent;
  }
  k->https = req->https;
  lk_try *t = &k->first;
  t->k = k;
  t->number = 0;
  t->live = t->hedge = t->bulkhead_held = false;
  t->nodes =
      req->nheaders + LK__DRIVER_HEADERS <= sizeof t->inline_nodes / sizeof t->inline_nodes[0]
          ? t->inline_nodes
          : malloc((req->nheaders + LK__DRIVER_HEADERS) * sizeof *t->nodes);
  k->res = lk__result_new();
  int rc = t->nodes && k->res ? LK_OK : LK_ENOMEM;
  if (rc == LK_OK)
    rc = pick_key(k, pol);
  if (rc == LK_OK)
    rc = net_setup(k, pol);
  k->pol.resolve = k->pol.connect_to = NULL; /* copied: the call's own */
  k->pol.nresolve = k->pol.nconnect_to = 0;
  /* the key is computed; the policy's strings are not kept */
  k->pol.idem_key = k->pol.idem_tenant = NULL;
  /* no result is no memory: rc says so, and the call is freed below */
  bool keyed = k->res && k->res->has_key;
  k->unsafe = !req->idempotent && !keyed && !pol->assume_idempotent;
  /* a hedge is a second send: never for an unsafe request, nor for a streamed body (read once) */
  k->hedging = pol->hedge.max_hedges > 0 && !k->unsafe && !req->stream;
  /* Native attempts need no easy handle: one is taken when an attempt runs on libcurl after
   * all (its URL is not for the native transport). TLS files are kept on a handle only, so a
   * call with one stays on libcurl, and so does one the native transport would not honour:
   * it neither decodes a body nor takes resolve or connect-to entries. */
  k->native = c->h1 && !req->has_expect && !pol->ca_file && !pol->client_cert && !pol->compressed &&
              !k->resolve && !k->connect_to;
  t->ex = NULL;
  t->easy = NULL;
  if (rc == LK_OK && !k->native) {
    k->ex = t->ex = lk__client_easy_get(c);
    if (k->ex) {
      k->ex->t = t;
      t->easy = k->ex->h;
    }
    rc = k->ex ? lk__attempt_setup_call(k, k->ex) : LK_ENOMEM;
  }
  if (rc == LK_OK && pol->user_agent && *pol->user_agent) {
    size_t ul = strlen(pol->user_agent);
    k->ua_line = malloc(ul + 13);
    if (!k->ua_line)
      rc = LK_ENOMEM;
    else
      snprintf(k->ua_line, ul + 13, "User-Agent: %s", pol->user_agent);
  }
  k->pol.user_agent = NULL;
  /* set on the handle above (libcurl copies them); not needed after */
  k->pol.ca_file = k->pol.client_cert = k->pol.client_key = k->pol.key_password = NULL;
  if (rc == LK_OK && pol->default_protection && (!pol->budget || !pol->breaker))
    rc = lk__origin_protect(c, req, &k->pol.budget, &k->pol.breaker);
  if (rc == LK_OK && cancel)
    rc = lk__client_tok_register(c, cancel);
  if (rc != LK_OK) {
    if (k->ex)
      lk__client_easy_put(c, k->ex);
    lk__call_net_free(k);
    free(k->ua_line);
    lk_http_result_free(k->res);
    if (t->nodes != t->inline_nodes)
      free(t->nodes);
    lk__resp_free(&t->cur);
    free(k);
    return rc;
  }
  lk__request_ref(req);
  k->t0 = k->clock->now(k->clock);
  int64_t at = lk_sat_add(k->t0, pol->deadline);
  k->deadline = pol->deadline_at.at < at ? pol->deadline_at.at : at;
  k->state = LK_CALL_ADMIT;
  k->timer_at = k->t0; /* the first attempt starts from the loop, never inside submit */
  k->fresh = true;
  c->submits++;
  k->next = c->calls;
  if (c->calls)
    c->calls->prev = k;
  c->calls = k;
  c->ncalls++;
  lk_call_metrics_call_start(pol->metrics);
  lk__budget_request(k->pol.budget, k->t0);
  if (c->external && c->depth == 0 && !c->cfg.start_submitted)
    arm_now(c); /* with start_submitted the loop starts it (lk_http_client_start_submitted) */
  return LK_OK;
}

/* --- the loop ------------------------------------------------------------------------------- */
static void process_msgs(lk_http_client *c) {
  CURLMsg *m;
  int left;
  while ((m = curl_multi_info_read(c->multi, &left))) {
    if (m->msg != CURLMSG_DONE)
      continue;
    lk_easy *x = NULL;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
    if (x && x->t)
      lk__call_transfer_done(x->t, (int)m->data.result);
  }
}

/* Calls on the system clock (nearly all) share one clock read per pass. */
static int64_t call_now(const lk_call *k, const lk_clock *sys, int64_t sys_now) {
  return k->clock == sys ? sys_now : k->clock->now(k->clock);
}

/* k's next timer as an instant on the system clock, not before sys_now; INT64_MAX if none. */
static int64_t call_due(lk_call *k, const lk_clock *sys, int64_t sys_now) {
  int64_t at = lk__call_next_timer(k);
  if (at == INT64_MAX)
    return INT64_MAX;
  int64_t d = lk_sat_sub(at, call_now(k, sys, sys_now));
  return lk_sat_add(sys_now, d < 0 ? 0 : d);
}

/* Arms the loop's timer for `at` (system ns) unless something earlier is armed already. */
static void arm_earlier(lk_http_client *c, int64_t at) {
  if (c->armed_delay_at == INT64_MIN || at < c->armed_delay_at) {
    int64_t now = lk_now_ns();
    c->armed_delay_at = at;
    c->cfg.timer_fn(c->cfg.loop_ud, at > now ? at - now : 0);
  }
}

/* One call's turn in a pass: a fired cancellation ends it, a due timer runs (either may end
 * and free k). False when the cancellation ended it. */
static bool step_call(lk_call *k, const lk_clock *sys, int64_t sys_now) {
  k->fresh = false;
  int64_t now = call_now(k, sys, sys_now);
  if (lk_http_cancel_fired(k->cancel)) {
    lk__call_abort(k);
    return false;
  }
  if (now >= lk__call_next_timer(k))
    lk__call_timer(k, now);
  return true;
}

static void service_calls(lk_http_client *c) {
  if (!c->calls)
    return;
  const lk_clock *sys = lk_clock_system();
  int64_t sys_now = lk_now_ns();
  c->pass_now = sys_now;
  c->fresh_armed = false; /* this pass and the rearm() after it see every call */
  lk_call *next;
  for (lk_call *k = c->calls; k; k = next) {
    next = k->next; /* k may finish (and be freed) below; new calls go to the head */
    step_call(k, sys, sys_now);
  }
}

/* ns until the earliest call timer (>= 0), INT64_MAX if none. */
static int64_t next_wait(lk_http_client *c) {
  const lk_clock *sys = lk_clock_system();
  int64_t sys_now = lk_now_ns();
  int64_t best = INT64_MAX;
  if (lk__h1_pending(c))
    return 0;
  for (lk_call *k = c->calls; k; k = k->next) {
    int64_t at = call_due(k, sys, sys_now);
    if (at != INT64_MAX && at - sys_now < best)
      best = at - sys_now;
  }
  return best;
}

static void service(lk_http_client *c) {
  lk__h1_flush(c);
  process_msgs(c);
  service_calls(c);
}

static void rearm(lk_http_client *c) {
  int64_t now = lk_now_ns();
  int64_t at = c->curl_timer_at >= 0 ? c->curl_timer_at : INT64_MAX;
  int64_t w = next_wait(c);
  if (w != INT64_MAX && lk_sat_add(now, w) < at)
    at = lk_sat_add(now, w);
  if (at == INT64_MAX) {
    if (c->armed_delay_at != INT64_MIN)
      c->cfg.timer_fn(c->cfg.loop_ud, -1);
    c->armed_delay_at = INT64_MIN;
  } else {
    /* Only ever earlier: a timer that fires before anything is due costs one pass over the
     * calls (timer_action re-arms then), while moving it later on every socket action (the
     * earliest call finished) cost a timer heap update per action (~3.8k instructions per
     * proxied request in linkd serve at 64 requests in flight). */
    arm_earlier(c, at);
  }
}

/* curl_multi_poll waits in whole milliseconds, rounded up, so a timer due in 1.2 ms fired at 2
 * ms: a hedge after 3 ms went at 3 to 4 (docs/BENCHMARKS.md). For a wait short enough for that
 * to matter (under 100 ms, and not a whole number of milliseconds), a timerfd armed for the
 * exact wait joins the poll. Arming it resets its expiry count, so it is readable only once this
 * wait has passed and needs no read. False (the rounded wait alone) if it cannot be created. */
static bool precise_wait(lk_http_client *c, int64_t wait) {
  if (wait <= 0 || wait >= LK_MS(100) || wait % LK_NS_PER_MS == 0)
    return false;
  if (c->timer_fd < 0 &&
      (c->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK)) < 0)
    return false;
  struct itimerspec its = {.it_value = {0, (long)wait}};
  return timerfd_settime(c->timer_fd, 0, &its, NULL) == 0;
}

static int run_internal(lk_http_client *c, int64_t max_wait, const bool *stop) {
  int64_t start = max_wait >= 0 ? lk_now_ns() : 0;
  int rc = 0;
  c->depth++;
  service_calls(c); /* start what is due first, so the first perform already writes requests */
  for (;;) {
    int running;
    if (curl_multi_perform(c->multi, &running) != CURLM_OK) {
      rc = LK_ESYS;
      break;
    }
    service(c);
    if (stop ? *stop : c->ncalls == 0)
      break;
    int64_t wait = next_wait(c);
    long cm = -1;
    curl_multi_timeout(c->multi, &cm);
    if (cm >= 0 && (int64_t)cm * LK_NS_PER_MS < wait)
      wait = (int64_t)cm * LK_NS_PER_MS;
    if (max_wait >= 0) {
      int64_t left = lk_sat_sub(lk_sat_add(start, max_wait), lk_now_ns());
      if (left <= 0 && max_wait > 0)
        break;
      if (left < wait)
        wait = left < 0 ? 0 : left;
    }
    /* ms granularity, rounded up so timers never fire early; capped so a fake clock that moves
     * without I/O is still noticed */
    int ms = wait >= LK_SEC(1) ? 1000 : (int)((wait + LK_NS_PER_MS - 1) / LK_NS_PER_MS);
    bool precise = precise_wait(c, wait);
    size_t need = 1 + c->ntoks + (precise ? 1 : 0);
    if (need > c->cap_wfds) {
      struct curl_waitfd *nw = realloc(c->wfds, need * sizeof *nw);
      if (!nw) {
        rc = LK_ENOMEM;
        break;
      }
      c->wfds = nw;
      c->cap_wfds = need;
    }
    c->wfds[0] = (struct curl_waitfd){.fd = c->wake_fd, .events = CURL_WAIT_POLLIN};
    for (size_t i = 0; i < c->ntoks; i++)
      c->wfds[1 + i] = (struct curl_waitfd){.fd = c->toks[i].tok->fd, .events = CURL_WAIT_POLLIN};
    if (precise) /* armed just now, so readable only once it expires */
      c->wfds[need - 1] = (struct curl_waitfd){.fd = c->timer_fd, .events = CURL_WAIT_POLLIN};
    if (curl_multi_poll(c->multi, c->wfds, (unsigned)need, ms, NULL) != CURLM_OK) {
      rc = LK_ESYS;
      break;
    }
    bool woken = c->wfds[0].revents & CURL_WAIT_POLLIN;
    if (woken)
      drain(c->wake_fd);
    /* only the caller's wake-ups end a bounded run early, not the driver's own notifications */
    bool asked = woken && atomic_exchange(&c->ext_wakes, 0) > 0;
    if (max_wait == 0 || (asked && max_wait > 0 && !stop))
      break;
  }
  c->depth--;
  return rc < 0 ? rc : c->ncalls;
}

int lk_http_client_run(lk_http_client *c, int64_t max_wait) {
  if (!c)
    return LK_EINVAL;
  if (c->external || c->depth > 0)
    return LK_ESTATE;
  return run_internal(c, max_wait, NULL);
}

static int after_action(lk_http_client *c) {
  service(c);
  rearm(c);
  c->depth--;
  return LK_OK;
}

/* A call's timer (system ns) may be earlier than what is armed: armed earlier (and, between a
 * submit and lk_http_client_start_submitted(), kept in what that puts back). */
static void note_timer(lk_http_client *c, int64_t at) {
  if (c->fresh_armed && (c->fresh_prev_armed == INT64_MIN || at < c->fresh_prev_armed))
    c->fresh_prev_armed = at;
  arm_earlier(c, at);
}

/* After the I/O of one native connection: only the call using it (`k`, looked up before the
 * I/O) can have a new timer. The armed timer is a bound for every other call's (what every pass
 * and start keeps true), so k's timer is all there is to arm, without a pass over every call in
 * flight (~3k instructions per action at 64 in flight). A call ended by the I/O is gone (its
 * ending can make another due only through a bulkhead slot, and a slot granted wakes the
 * client's descriptor: a full pass then); calls its callback submitted are due now. False when
 * the full pass is needed: a native connection failed and waits for it, k is due or cancelled. */
static bool after_h1_event(lk_http_client *c, lk_call *k, uint64_t ends, uint64_t submits) {
  if (lk__h1_pending(c))
    return false;
  int64_t sys_now = lk_now_ns();
  c->pass_now = sys_now;
  if (k && c->ends == ends) {
    if (lk_http_cancel_fired(k->cancel))
      return false;
    int64_t now = call_now(k, lk_clock_system(), sys_now);
    int64_t at = lk__call_next_timer(k);
    if (now >= at)
      return false;
    if (at != INT64_MAX)
      note_timer(c, lk_sat_add(sys_now, lk_sat_sub(at, now)));
  }
  if (c->submits != submits)
    note_timer(c, sys_now);
  if (c->ncalls == 0 && c->curl_timer_at < 0 && c->armed_delay_at != INT64_MIN) {
    c->armed_delay_at = INT64_MIN; /* nothing left to time (what rearm() would find) */
    c->cfg.timer_fn(c->cfg.loop_ud, -1);
  }
  return true;
}

int lk_http_client_socket_action(lk_http_client *c, int fd, int events) {
  if (!c)
    return LK_EINVAL;
  if (!c->external || c->depth > 0)
    return LK_ESTATE;
  c->depth++;
  if (fd == c->wake_fd) {
    drain(fd);
  } else {
    bool tok = false;
    for (size_t i = 0; i < c->ntoks && !tok; i++)
      tok = c->toks[i].tok->fd == fd;
    if (!tok && lk__h1_owns(c, fd)) {
      lk_call *k = lk__h1_call_of(c, fd);
      uint64_t ends = c->ends, submits = c->submits;
      lk__h1_event(c, fd, events);
      if (after_h1_event(c, k, ends, submits)) {
        c->depth--;
        return LK_OK;
      }
    } else if (!tok) {
      int mask = (events & LK_HTTP_POLL_IN ? CURL_CSELECT_IN : 0) |
                 (events & LK_HTTP_POLL_OUT ? CURL_CSELECT_OUT : 0);
      int running;
      if (curl_multi_socket_action(c->multi, fd, mask, &running) != CURLM_OK) {
        c->depth--;
        return LK_ESYS;
      }
    }
  }
  return after_action(c);
}

int lk_http_client_timer_action(lk_http_client *c) {
  if (!c)
    return LK_EINVAL;
  if (!c->external || c->depth > 0)
    return LK_ESTATE;
  c->depth++;
  c->armed_delay_at = INT64_MIN; /* the timer is one-shot: it fired */
  c->fresh_armed = false;
  if (c->curl_timer_at >= 0 && lk_now_ns() >= c->curl_timer_at - LK_MS(1)) {
    c->curl_timer_at = -1;
    int running;
    if (curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running) != CURLM_OK) {
      c->depth--;
      return LK_ESYS;
    }
  }
  return after_action(c);
}

/* Starts the calls submitted since the last pass: they are at the head of the list (new calls go
 * there), so this costs the calls started, not the calls in flight. The timer submit armed for
 * now is put back to the earliest of what was armed before and the started calls' own timers,
 * unless something may have made another call due (a call ended, a bulkhead slot was released)
 * or a native connection waits for the next pass (lk__h1_pending): a full rearm() then. */
int lk_http_client_start_submitted(lk_http_client *c) {
  if (!c)
    return LK_EINVAL;
  if (!c->external || c->depth > 0)
    return LK_ESTATE;
  if (!c->calls || !c->calls->fresh)
    return LK_OK;
  c->depth++;
  const lk_clock *sys = lk_clock_system();
  int64_t sys_now = lk_now_ns();
  c->pass_now = sys_now;
  uint64_t changes = c->changes;
  int64_t at = INT64_MAX; /* system ns: the earliest timer of the calls started */
  /* a callback of a call that ended at once may submit more: they go to the head, looked at by
   * the next round (bounded by what callbacks submit) */
  while (c->calls && c->calls->fresh) {
    lk_call *next;
    for (lk_call *k = c->calls; k && k->fresh; k = next) {
      next = k->next;
      if (!step_call(k, sys, sys_now) || c->changes != changes)
        continue; /* k may be gone; rearm() below looks at every call */
      int64_t kt = call_due(k, sys, sys_now);
      if (kt < at)
        at = kt;
    }
  }
  if (c->changes != changes || lk__h1_pending(c) || (!c->fresh_armed && !c->cfg.start_submitted)) {
    c->fresh_armed = false;
    rearm(c);
  } else {
    /* what was armed before these calls (put back: submit armed for now), or, with
     * start_submitted, what is armed (submit armed nothing): a bound for every other call */
    bool replace = c->fresh_armed;
    int64_t cur = replace ? c->fresh_prev_armed : c->armed_delay_at;
    c->fresh_armed = false;
    if (c->curl_timer_at >= 0 && c->curl_timer_at < at)
      at = c->curl_timer_at;
    if (cur != INT64_MIN && cur <= at)
      at = cur;
    if (at == INT64_MAX && replace) {
      c->armed_delay_at = INT64_MIN;
      c->cfg.timer_fn(c->cfg.loop_ud, -1);
    } else if (at != INT64_MAX && (replace || at != cur)) {
      int64_t now = lk_now_ns();
      c->armed_delay_at = at;
      c->cfg.timer_fn(c->cfg.loop_ud, at > now ? at - now : 0);
    }
  }
  c->depth--;
  return LK_OK;
}

/* --- synchronous calls ---------------------------------------------------------------------- */
typedef struct sync_slot {
  lk_http_result *res;
  bool done;
} sync_slot;

static void sync_done(void *ud, lk_http_result *res) {
  sync_slot *s = ud;
  s->res = res;
  s->done = true;
}

static lk_http_result *error_result(int err) {
  lk_http_result *r = lk__result_new();
  if (r) {
    r->err = err;
    r->failure = LK_F_NONE;
    snprintf(r->stop, sizeof r->stop, "%s", lk_strerror(err));
  }
  return r;
}

/* lk_http_call(NULL, ...): each thread's own client, so its connections are kept alive across
 * calls (a new connection per call costs a TCP handshake and ~20 % of throughput); freed by the
 * key's destructor when the thread exits. */
static pthread_key_t default_key;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static bool default_key_ok;

static void default_client_free(void *c) { lk_http_client_free(c); }
static void default_key_init(void) {
  default_key_ok = pthread_key_create(&default_key, default_client_free) == 0;
}

static lk_http_client *thread_default_client(void) {
  pthread_once(&default_once, default_key_init);
  if (!default_key_ok)
    return NULL;
  lk_http_client *c = pthread_getspecific(default_key);
  if (!c && (c = lk_http_client_new(NULL)) && pthread_setspecific(default_key, c) != 0) {
    lk_http_client_free(c);
    c = NULL;
  }
  return c;
}

int lk_http_call(lk_http_client *c, lk_http_request *req, const lk_http_policy *pol,
                 lk_http_cancel *cancel, lk_http_result **out) {
  if (out)
    *out = NULL;
  if (!req || !pol || !out)
    return LK_EINVAL;
  lk_http_client *tmp = NULL;
  if (!c) {
    c = thread_default_client();
    /* inside one of its own callbacks the thread's client is busy: a temporary one then */
    if (!c || c->depth > 0)
      c = tmp = lk_http_client_new(NULL);
    if (!c) {
      *out = error_result(LK_ENOMEM);
      return LK_ENOMEM;
    }
  }
  int rc;
  sync_slot slot = {NULL, false};
  if (c->external || c->depth > 0)
    rc = LK_ESTATE;
  else
    rc = lk_http_submit(c, req, pol, cancel, sync_done, &slot);
  if (rc == LK_OK) {
    while (!slot.done) {
      int r = run_internal(c, -1, &slot.done);
      if (r < 0 && !slot.done) {
        /* the poll itself failed: end the call rather than spin */
        for (lk_call *k = c->calls; k; k = k->next)
          if (k->ud == &slot) {
            lk__call_abort(k);
            break;
          }
        if (slot.res)
          slot.res->err = r;
      }
    }
    *out = slot.res;
    rc = slot.res ? slot.res->err : LK_ENOMEM;
  } else {
    *out = error_result(rc);
  }
  lk_http_client_free(tmp);
  return rc;
}
