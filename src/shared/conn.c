/* SPDX-License-Identifier: MIT */
/* conn.c: one hiredis async connection, its thread, and calls that wait a bounded time. */
#include "shared_internal.h"

#include <linkd/clock.h>
#include <linkd/error.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "core/sat.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define TICK_MS 10 /* how often the thread turns while connected (the budget's batches) */

enum { RQ_PENDING, RQ_DONE, RQ_ABANDONED };

typedef struct sh_req {
  int script, nargs;
  char args[SH_ARGS_MAX][SH_ARG_LEN];
  int state; /* under the connection's mu */
  int rc;
  long long reply;
  pthread_cond_t cv;
  struct sh_req *next;
} sh_req;

struct sh_conn {
  char *prefix;
  char host[256];
  int port;
  char what[16];
  int64_t retry;
  int fleet;
  const char *const *scripts;
  int n_scripts;
  sh_tick_fn tick;
  void *owner;
  void (*log)(void *, const char *);
  void *log_arg;

  pthread_mutex_t mu;
  sh_req *q_head, *q_tail; /* handed over, not yet sent */
  _Atomic bool stop;
  bool settled; /* the first connect attempt has ended, one way or the other */
  int efd;
  pthread_t th;
  bool th_started;

  /* The thread's own. */
  redisAsyncContext *ac;
  bool want_r, want_w;
  int64_t next_connect;
  char sha[SH_SCRIPTS_MAX][41];
  int loaded;

  _Atomic bool ready;         /* connected and every script loaded */
  _Atomic int64_t hold_until; /* after a timeout, Redis is not asked before this */
  _Atomic bool degraded;      /* the last decision was local: the next one from Redis rejoins */
  _Atomic uint64_t n_shared, n_fallback, n_timeouts, n_errors, n_episodes, n_rejoins;
};

static pthread_condattr_t mono_attr;
static pthread_once_t mono_once = PTHREAD_ONCE_INIT;
static void mono_init(void) {
  pthread_condattr_init(&mono_attr);
  pthread_condattr_setclock(&mono_attr, CLOCK_MONOTONIC);
}

static void logf_(sh_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(sh_conn *c, const char *fmt, ...) {
  char line[512];
  int n = snprintf(line, sizeof line, "linkd shared %s '%s' (Redis %s:%d): ", c->what, c->prefix,
                   c->host, c->port);
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < sizeof line)
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  if (c->log)
    c->log(c->log_arg, line);
  else
    fprintf(stderr, "%s\n", line);
}

/* --- outcomes: counters, and one log line per change between Redis and local limits --------- */

static void note(sh_conn *c, int rc) {
  if (rc == LK_OK) {
    atomic_fetch_add(&c->n_shared, 1);
    if (atomic_exchange(&c->degraded, false)) {
      atomic_fetch_add(&c->n_rejoins, 1);
      logf_(c, "answering again; deciding there");
    }
    return;
  }
  atomic_fetch_add(&c->n_fallback, 1);
  if (!atomic_exchange(&c->degraded, true)) {
    atomic_fetch_add(&c->n_episodes, 1);
    logf_(c, "%s; deciding locally at 1/%d of the limits until it is back",
          rc == LK_EDEADLINE ? "no answer in time"
          : rc == LK_EAGAIN  ? "not connected"
                             : "error or lost connection",
          c->fleet);
  }
}

/* --- the caller's side ----------------------------------------------------------------------- */

static void req_free(sh_req *r) {
  pthread_cond_destroy(&r->cv);
  free(r);
}

bool sh_usable(sh_conn *c) {
  return atomic_load(&c->ready) && lk_now_ns() >= atomic_load(&c->hold_until);
}

int sh_call(sh_conn *c, int script, const char *const *args, int nargs, int64_t wait,
            long long *reply) {
  if (!sh_usable(c)) {
    pthread_mutex_lock(&c->mu);
    bool settled = c->settled;
    pthread_mutex_unlock(&c->mu);
    if (settled)
      note(c, LK_EAGAIN);
    else
      atomic_fetch_add(&c->n_fallback, 1); /* still connecting at start: not an outage */
    return LK_EAGAIN;
  }
  sh_req *r = calloc(1, sizeof *r);
  if (!r) {
    note(c, LK_EAGAIN);
    return LK_EAGAIN;
  }
  r->script = script;
  r->nargs = nargs < SH_ARGS_MAX ? nargs : SH_ARGS_MAX;
  for (int i = 0; i < r->nargs; i++)
    snprintf(r->args[i], SH_ARG_LEN, "%s", args[i]);
  r->state = RQ_PENDING;
  pthread_once(&mono_once, mono_init);
  pthread_cond_init(&r->cv, &mono_attr);
  int64_t until = lk_sat_add(lk_now_ns(), wait);
  pthread_mutex_lock(&c->mu);
  if (c->q_tail)
    c->q_tail->next = r;
  else
    c->q_head = r;
  c->q_tail = r;
  pthread_mutex_unlock(&c->mu);
  uint64_t one = 1;
  if (write(c->efd, &one, sizeof one) < 0) { /* a full counter still wakes the thread */
  }
  struct timespec ts = {(time_t)(until / LK_NS_PER_S), (long)(until % LK_NS_PER_S)};
  pthread_mutex_lock(&c->mu);
  while (r->state == RQ_PENDING)
    if (pthread_cond_timedwait(&r->cv, &c->mu, &ts) == ETIMEDOUT)
      break;
  int rc;
  if (r->state == RQ_DONE) {
    rc = r->rc;
    *reply = r->reply;
    pthread_mutex_unlock(&c->mu);
    req_free(r);
    if (rc != LK_OK)
      atomic_fetch_add(&c->n_errors, 1);
  } else {
    r->state = RQ_ABANDONED; /* the thread frees it when its reply (or the disconnect) comes */
    pthread_mutex_unlock(&c->mu);
    rc = LK_EDEADLINE;
    atomic_fetch_add(&c->n_timeouts, 1);
    /* A slow Redis: stay local for a while rather than make every call wait the timeout. */
    atomic_store(&c->hold_until, lk_sat_add(lk_now_ns(), c->retry));
  }
  note(c, rc);
  return rc;
}

/* --- the thread's side ----------------------------------------------------------------------- */

static void complete(sh_conn *c, sh_req *r, int rc, long long reply) {
  pthread_mutex_lock(&c->mu);
  if (r->state == RQ_ABANDONED) {
    pthread_mutex_unlock(&c->mu);
    req_free(r);
    return;
  }
  r->state = RQ_DONE;
  r->rc = rc;
  r->reply = reply;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&c->mu);
}

static void set_ready(sh_conn *c, bool ready) {
  atomic_store(&c->ready, ready);
  pthread_mutex_lock(&c->mu);
  c->settled = true;
  pthread_mutex_unlock(&c->mu);
}

static void reload_scripts(sh_conn *c);

/* The script cache was emptied (SCRIPT FLUSH, or a different server behind the address). */
static void check_noscript(sh_conn *c, const redisReply *rep) {
  if (rep && rep->type == REDIS_REPLY_ERROR && rep->str && !strncmp(rep->str, "NOSCRIPT", 8) &&
      atomic_load(&c->ready)) {
    set_ready(c, false);
    reload_scripts(c);
  }
}

static void on_reply(redisAsyncContext *ac, void *reply, void *priv) {
  sh_conn *c = ac->data;
  redisReply *rep = reply;
  if (!priv) { /* sent with sh_send: nobody waits */
    check_noscript(c, rep);
    return;
  }
  if (!rep) {
    complete(c, priv, LK_EIO, 0);
    return;
  }
  if (rep->type == REDIS_REPLY_INTEGER) {
    complete(c, priv, LK_OK, rep->integer);
    return;
  }
  check_noscript(c, rep);
  complete(c, priv, LK_EIO, 0);
}

static void on_loaded(redisAsyncContext *ac, void *reply, void *priv) {
  sh_conn *c = ac->data;
  redisReply *rep = reply;
  int i = (int)(intptr_t)priv;
  if (!rep || rep->type != REDIS_REPLY_STRING || rep->len != 40) {
    if (rep) {
      atomic_fetch_add(&c->n_errors, 1);
      logf_(c, "SCRIPT LOAD failed: %s", rep->type == REDIS_REPLY_ERROR ? rep->str : "bad reply");
    }
    return;
  }
  memcpy(c->sha[i], rep->str, 40);
  c->sha[i][40] = '\0';
  if (++c->loaded == c->n_scripts)
    set_ready(c, true);
}

static void reload_scripts(sh_conn *c) {
  c->loaded = 0;
  for (int i = 0; i < c->n_scripts; i++)
    redisAsyncCommand(c->ac, on_loaded, (void *)(intptr_t)i, "SCRIPT LOAD %s", c->scripts[i]);
}

static void on_connect(const redisAsyncContext *ac, int status) {
  sh_conn *c = ac->data;
  if (status != REDIS_OK) { /* hiredis frees the context after this returns */
    c->ac = NULL;
    c->want_r = c->want_w = false;
    atomic_fetch_add(&c->n_errors, 1);
    c->next_connect = lk_sat_add(lk_now_ns(), c->retry);
    set_ready(c, false);
    return;
  }
  reload_scripts(c);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
  (void)status;
  sh_conn *c = ac->data;
  c->ac = NULL; /* freed by hiredis after this returns */
  c->want_r = c->want_w = false;
  if (!atomic_load(&c->stop))
    atomic_fetch_add(&c->n_errors, 1);
  c->next_connect = lk_sat_add(lk_now_ns(), c->retry);
  set_ready(c, false);
}

/* The event-library hooks: the loop polls the socket for what hiredis asked for. */
static void ev_add_read(void *p) { ((sh_conn *)p)->want_r = true; }
static void ev_del_read(void *p) { ((sh_conn *)p)->want_r = false; }
static void ev_add_write(void *p) { ((sh_conn *)p)->want_w = true; }
static void ev_del_write(void *p) { ((sh_conn *)p)->want_w = false; }
static void ev_cleanup(void *p) {
  sh_conn *c = p;
  c->want_r = c->want_w = false;
}

static void do_connect(sh_conn *c) {
  redisAsyncContext *ac = redisAsyncConnect(c->host, c->port);
  if (!ac || ac->err) {
    if (ac)
      redisAsyncFree(ac);
    atomic_fetch_add(&c->n_errors, 1);
    c->next_connect = lk_sat_add(lk_now_ns(), c->retry);
    set_ready(c, false);
    return;
  }
  c->ac = ac;
  ac->data = c;
  ac->ev.data = c;
  ac->ev.addRead = ev_add_read;
  ac->ev.delRead = ev_del_read;
  ac->ev.addWrite = ev_add_write;
  ac->ev.delWrite = ev_del_write;
  ac->ev.cleanup = ev_cleanup;
  /* After the hooks: setting the connect callback asks for the first write event. */
  redisAsyncSetConnectCallback(ac, on_connect);
  redisAsyncSetDisconnectCallback(ac, on_disconnect);
}

static void send_req(sh_conn *c, int script, int nargs, char (*args)[SH_ARG_LEN], void *priv) {
  const char *argv[4 + SH_ARGS_MAX];
  size_t len[4 + SH_ARGS_MAX];
  int n = 0;
  argv[n++] = "EVALSHA";
  argv[n++] = c->sha[script];
  argv[n++] = "1";
  argv[n++] = c->prefix;
  for (int i = 0; i < nargs; i++)
    argv[n++] = args[i];
  for (int i = 0; i < n; i++)
    len[i] = strlen(argv[i]);
  if (!c->ac || redisAsyncCommandArgv(c->ac, on_reply, priv, n, argv, len) != REDIS_OK)
    if (priv)
      complete(c, priv, LK_EIO, 0);
}

void sh_send(sh_conn *c, int script, const char *const *args, int nargs) {
  char a[SH_ARGS_MAX][SH_ARG_LEN];
  if (nargs > SH_ARGS_MAX)
    nargs = SH_ARGS_MAX;
  for (int i = 0; i < nargs; i++)
    snprintf(a[i], SH_ARG_LEN, "%s", args[i]);
  send_req(c, script, nargs, a, NULL);
}

static void drain(sh_conn *c) {
  pthread_mutex_lock(&c->mu);
  sh_req *r = c->q_head;
  c->q_head = c->q_tail = NULL;
  pthread_mutex_unlock(&c->mu);
  for (sh_req *n; r; r = n) {
    n = r->next;
    if (atomic_load(&c->ready))
      send_req(c, r->script, r->nargs, r->args, r);
    else
      complete(c, r, LK_EIO, 0);
  }
}

static void *conn_main(void *arg) {
  sh_conn *c = arg;
  for (;;) {
    if (atomic_load(&c->stop))
      break;
    int64_t now = lk_now_ns();
    if (!c->ac && now >= c->next_connect)
      do_connect(c);
    if (c->tick && atomic_load(&c->ready))
      c->tick(c->owner, c);
    drain(c);
    struct pollfd p[2] = {{.fd = c->efd, .events = POLLIN}, {.fd = -1}};
    int np = 1, timeout = TICK_MS;
    if (c->ac) {
      p[1].fd = c->ac->c.fd;
      p[1].events = (short)((c->want_r ? POLLIN : 0) | (c->want_w ? POLLOUT : 0));
      np = 2;
    } else {
      int64_t left = c->next_connect - lk_now_ns();
      timeout = left <= 0 ? 0 : (int)(left / LK_NS_PER_MS) + 1;
    }
    if (poll(p, (nfds_t)np, timeout) < 0 && errno != EINTR)
      break;
    if (p[0].revents & POLLIN) {
      uint64_t v;
      if (read(c->efd, &v, sizeof v) < 0) { /* nothing to do: the counter is drained */
      }
    }
    if (np == 2 && c->ac && (p[1].revents & (POLLIN | POLLERR | POLLHUP)))
      redisAsyncHandleRead(c->ac);
    if (np == 2 && c->ac && (p[1].revents & POLLOUT))
      redisAsyncHandleWrite(c->ac);
  }
  return NULL;
}

/* --- construction ------------------------------------------------------------------------------
 */

static int parse_url(const char *url, char *host, size_t cap, int *port) {
  if (!strncmp(url, "redis://", 8))
    url += 8;
  const char *colon = strrchr(url, ':');
  size_t hl = colon ? (size_t)(colon - url) : strlen(url);
  if (hl == 0 || hl >= cap || strchr(url, '/') || strchr(url, '@'))
    return LK_ECONFIG;
  memcpy(host, url, hl);
  host[hl] = '\0';
  *port = 6379;
  if (colon) {
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p < 1 || p > 65535)
      return LK_ECONFIG;
    *port = (int)p;
  }
  return LK_OK;
}

int sh_conn_new(const sh_conn_config *cfg, sh_conn **out, const char **why) {
  *out = NULL;
  sh_conn *c = calloc(1, sizeof *c);
  if (!c)
    return LK_ENOMEM;
  if (parse_url(cfg->sc->url, c->host, sizeof c->host, &c->port) != LK_OK) {
    free(c);
    if (why)
      *why = "shared url must be redis://HOST:PORT or HOST:PORT";
    return LK_ECONFIG;
  }
  c->prefix = strdup(cfg->sc->prefix);
  c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (!c->prefix || c->efd < 0) {
    int rc = c->prefix ? LK_ESYS : LK_ENOMEM;
    free(c->prefix);
    if (c->efd >= 0)
      close(c->efd);
    free(c);
    return rc;
  }
  snprintf(c->what, sizeof c->what, "%s", cfg->what);
  c->retry = cfg->sc->retry_interval;
  c->fleet = cfg->sc->fleet_size;
  c->scripts = cfg->scripts;
  c->n_scripts = cfg->n_scripts;
  c->tick = cfg->tick;
  c->owner = cfg->owner;
  c->log = cfg->sc->log;
  c->log_arg = cfg->sc->log_arg;
  pthread_mutex_init(&c->mu, NULL);
  if (pthread_create(&c->th, NULL, conn_main, c) != 0) {
    sh_conn_free(c);
    return LK_ESYS;
  }
  c->th_started = true;
  *out = c;
  return LK_OK;
}

void sh_conn_free(sh_conn *c) {
  if (!c)
    return;
  if (c->th_started) {
    atomic_store(&c->stop, true);
    uint64_t one = 1;
    if (write(c->efd, &one, sizeof one) < 0) { /* the thread also wakes on its tick */
    }
    pthread_join(c->th, NULL);
  }
  if (c->ac)
    redisAsyncFree(c->ac); /* pending replies come back NULL: abandoned calls are freed */
  for (sh_req *r = c->q_head, *n; r; r = n) {
    n = r->next;
    req_free(r); /* no caller waits any more (the contract of free) */
  }
  pthread_mutex_destroy(&c->mu);
  close(c->efd);
  free(c->prefix);
  free(c);
}

const char *sh_prefix(const sh_conn *c) { return c->prefix; }

void sh_stats(sh_conn *c, lk_shared_stats *out) {
  out->shared = atomic_load(&c->n_shared);
  out->fallback = atomic_load(&c->n_fallback);
  out->timeouts = atomic_load(&c->n_timeouts);
  out->errors = atomic_load(&c->n_errors);
  out->episodes = atomic_load(&c->n_episodes);
  out->rejoins = atomic_load(&c->n_rejoins);
  out->using_redis = sh_usable(c) && !atomic_load(&c->degraded);
}
