/* SPDX-License-Identifier: MIT */
/* The loop: listeners, libcurl's descriptors and timer on libuv, signals (SIGHUP reload,
 * SIGTERM/SIGINT drain), active health checks, start-up and shutdown. */
#include "gw_proxy.h"
#include "gwp.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* While draining, a connection with nothing in flight is closed once it has been quiet this
 * long: one that served a request is closed as its response goes out (next_request), but one
 * accepted just before SIGTERM may have its first request on the wire. */
#define GWP_DRAIN_QUIET LK_MS(100)

/* --- lk_http on the loop ---------------------------------------------------------------------- */

/* One watcher per upstream descriptor, kept across libcurl's REMOVE / re-add of the same
 * descriptor: a pooled connection is unwatched between its transfers, but its registration
 * stays in epoll (`registered`) and the next transfer, which waits for the same POLLIN, needs no
 * epoll_ctl at all (an ADD and a DEL per request otherwise). Readiness on a descriptor libcurl
 * does not want (a parked connection the upstream closed) stops the watcher then, once. Before
 * libcurl closes a descriptor (close_fn) its watcher is stopped, which drops the registration
 * while the number still names that socket: a number reused by the next socket starts clean. */
typedef struct gwp_poll {
  uv_poll_t h;
  int fd;
  int wanted;     /* what libcurl asked for (UV_READABLE | UV_WRITABLE), 0: nothing */
  int registered; /* what the uv_poll watches, 0 stopped */
} gwp_poll;

static void on_poll(uv_poll_t *h, int status, int events);

static void poll_set(gwp_poll *w, int uv_ev) {
  if (uv_ev == w->registered)
    return;
  w->registered = uv_ev;
  if (uv_ev == 0)
    uv_poll_stop(&w->h);
  else
    uv_poll_start(&w->h, uv_ev, on_poll);
}

static void on_poll(uv_poll_t *h, int status, int events) {
  gwp_server *s = h->loop->data;
  gwp_poll *w = (gwp_poll *)h;
  if (w->wanted == 0) { /* parked: libcurl checks the connection when it reuses it */
    poll_set(w, 0);
    return;
  }
  int ev = 0;
  if (status < 0)
    ev = LK_HTTP_POLL_IN | LK_HTTP_POLL_OUT; /* let libcurl find the error */
  if (events & UV_READABLE)
    ev |= LK_HTTP_POLL_IN;
  if (events & UV_WRITABLE)
    ev |= LK_HTTP_POLL_OUT;
  lk_http_client_socket_action(s->client, w->fd, ev);
}

static void on_poll_closed(uv_handle_t *h) { free(h); }

static void socket_fn(void *ud, int fd, int events) {
  gwp_server *s = ud;
  if (fd < 0)
    return;
  if ((size_t)fd >= s->npolls) {
    if (events == 0)
      return;
    size_t n = s->npolls ? s->npolls : 64;
    while (n <= (size_t)fd)
      n *= 2;
    gwp_poll **p = realloc(s->polls, n * sizeof *p);
    if (!p)
      return;
    memset(p + s->npolls, 0, (n - s->npolls) * sizeof *p);
    s->polls = p;
    s->npolls = n;
  }
  gwp_poll *w = s->polls[fd];
  int uv_ev =
      (events & LK_HTTP_POLL_IN ? UV_READABLE : 0) | (events & LK_HTTP_POLL_OUT ? UV_WRITABLE : 0);
  if (!w) {
    if (uv_ev == 0)
      return;
    w = calloc(1, sizeof *w);
    if (!w || uv_poll_init_socket(s->loop, &w->h, fd) != 0) {
      free(w);
      gwp_log(s, LK_GW_LOG_ERROR, "cannot watch an upstream socket");
      return;
    }
    w->fd = fd;
    s->polls[fd] = w;
  }
  w->wanted = uv_ev;
  if (uv_ev != 0) /* REMOVE leaves the registration as it is (see above) */
    poll_set(w, uv_ev);
}

/* libcurl is about to close `fd`: its watcher stops while the number is still that socket's. */
static void close_fn(void *ud, int fd) {
  gwp_server *s = ud;
  if (fd < 0 || (size_t)fd >= s->npolls || !s->polls[fd])
    return;
  s->polls[fd]->wanted = 0;
  poll_set(s->polls[fd], 0);
}

/* At shutdown: every watcher goes. */
static void polls_free(gwp_server *s) {
  for (size_t i = 0; i < s->npolls; i++)
    if (s->polls[i])
      uv_close((uv_handle_t *)&s->polls[i]->h, on_poll_closed);
  free(s->polls);
  s->polls = NULL;
  s->npolls = 0;
}

static void on_curl_timer(uv_timer_t *t) {
  gwp_server *s = t->data;
  lk_http_client_timer_action(s->client);
}

/* The client is created with start_submitted: lk_http_submit() arms no timer, and each call
 * submitted outside the client's callbacks is started by lk_http_client_start_submitted(), at
 * once after a downstream read (gwp_conn.c on_read) or a health timer's probes
 * (on_health_timer), and otherwise here, before the loop polls again (a pipelined request
 * parsed after a response was written). */
static void on_start_check(uv_check_t *h) {
  gwp_server *s = h->data;
  lk_http_client_start_submitted(s->client);
}

static void timer_fn(void *ud, int64_t delay) {
  gwp_server *s = ud;
  if (delay < 0) {
    uv_timer_stop(&s->curl_timer);
    return;
  }
  uint64_t ms = (uint64_t)(delay / LK_NS_PER_MS + (delay % LK_NS_PER_MS != 0)); /* up */
  uv_timer_start(&s->curl_timer, on_curl_timer, ms, 0);
}

/* --- active health checks ----------------------------------------------------------------------
 */

typedef struct probe {
  gwp_server *srv;
  lk_gw_config *cfg;
  const lk_gw_cluster *cl;
  int idx;
} probe;

static void arm_health(gwp_server *s);

static void on_probe_done(void *ud, lk_http_result *res) {
  probe *p = ud;
  int st = lk_http_result_status(res);
  bool ok = lk_http_result_err(res) == LK_OK && st >= 200 && st < 300;
  lk_gw_health_change ch = lk_gw_cluster_health_report(p->cl, p->idx, gwp_now(), ok);
  if (ch != LK_GW_HEALTH_SAME)
    gwp_log(p->srv, LK_GW_LOG_WARN, "cluster %s: endpoint %s %s", p->cl->name,
            p->cl->endpoints[p->idx].key, ch == LK_GW_HEALTH_DOWN ? "unhealthy" : "healthy again");
  lk_http_result_free(res);
  lk_gw_config_unref(p->cfg);
  free(p);
}

static void send_probe(gwp_server *s, const lk_gw_cluster *cl, int idx) {
  probe *p = malloc(sizeof *p);
  if (!p)
    return;
  *p = (probe){s, lk_gw_config_ref(s->cfg), cl, idx};
  size_t n = strlen(cl->endpoints[idx].base_url) + strlen(cl->health.path) + 1;
  char *url = malloc(n);
  lk_http_request *rq = NULL;
  if (url) {
    snprintf(url, n, "%s%s", cl->endpoints[idx].base_url, cl->health.path);
    rq = lk_http_request_new("GET", url);
    free(url);
  }
  lk_http_policy pol;
  lk_http_policy_init_default(&pol);
  pol.deadline = cl->health.timeout;
  pol.attempt_timeout = cl->health.timeout;
  pol.connect_timeout = 0;
  pol.default_protection = false;
  pol.send_attempt = false;
  lk_retry_config rc = pol.retry.cfg;
  rc.max_attempts = 1;
  lk_retry_policy_init(&pol.retry, &rc, NULL);
  pol.rng = &s->rng.base;
  if (!rq || lk_http_submit(s->client, rq, &pol, NULL, on_probe_done, p) != LK_OK) {
    lk_gw_cluster_health_report(cl, idx, gwp_now(), false);
    lk_gw_config_unref(p->cfg);
    free(p);
  }
  lk_http_request_free(rq);
}

static void on_health_timer(uv_timer_t *t) {
  gwp_server *s = t->data;
  int64_t now = gwp_now();
  for (size_t i = 0; i < s->cfg->n_clusters; i++) {
    const lk_gw_cluster *cl = &s->cfg->clusters[i];
    if (!cl->health.enabled)
      continue;
    int due[LK_GW_MAX_ENDPOINTS];
    size_t n = lk_gw_cluster_health_due(cl, now, due, LK_GW_MAX_ENDPOINTS);
    for (size_t k = 0; k < n; k++)
      send_probe(s, cl, due[k]);
  }
  /* now, not at the check after the next poll: on an idle loop that is the next timer, an
   * interval away, and the probe's health-timeout would have passed before it connected */
  lk_http_client_start_submitted(s->client);
  arm_health(s);
}

static void arm_health(gwp_server *s) {
  if (gwp_draining(s))
    return;
  int64_t next = INT64_MAX;
  for (size_t i = 0; i < s->cfg->n_clusters; i++) {
    int64_t t = lk_gw_cluster_health_next(&s->cfg->clusters[i]);
    if (t < next)
      next = t;
  }
  if (next == INT64_MAX) {
    /* no health check now; a reload may add one, so look again in a second */
    uv_timer_start(&s->health_timer, on_health_timer, 1000, 0);
    return;
  }
  int64_t d = lk_sat_sub(next, gwp_now());
  uv_timer_start(&s->health_timer, on_health_timer, d > 0 ? (uint64_t)(d / LK_NS_PER_MS) + 1 : 0,
                 0);
}

/* --- listeners ----------------------------------------------------------------------------------
 */

static void on_connection(uv_stream_t *l, int status) {
  gwp_listener *li = l->data;
  if (status < 0)
    return;
  gwp_conn_accept(li->srv, l, li->admin);
}

/* Binds `a` (its port, or `port_override` when > 0) with SO_REUSEPORT, so every worker has a
 * listener of its own on the same port and the kernel spreads connections over them. */
static int listen_on(gwp_server *s, gwp_listener *li, const lk_gw_addr *a, int port_override,
                     int backlog, bool reuseport, int *port) {
  struct sockaddr_storage ss;
  int p = port_override > 0 ? port_override : a->port;
  memset(&ss, 0, sizeof ss);
  if (uv_ip4_addr(a->host, p, (struct sockaddr_in *)&ss) != 0 &&
      uv_ip6_addr(a->host, p, (struct sockaddr_in6 *)&ss) != 0) {
    gwp_log(s, LK_GW_LOG_ERROR, "%s: not an IP address (listen addresses are literals)", a->host);
    return -1;
  }
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) ||
      bind(fd, (struct sockaddr *)&ss,
           ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in)) !=
          0) {
    gwp_log(s, LK_GW_LOG_ERROR, "%s:%d: %s", a->host, p, strerror(errno));
    if (fd >= 0)
      close(fd);
    return -1;
  }
  uv_tcp_init(s->loop, &li->tcp);
  li->tcp.data = li;
  li->srv = s;
  li->open = true;
  int rc = uv_tcp_open(&li->tcp, fd);
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)&li->tcp, backlog, on_connection);
  if (rc != 0) {
    gwp_log(s, LK_GW_LOG_ERROR, "%s:%d: %s", a->host, p, uv_strerror(rc));
    return -1;
  }
  struct sockaddr_storage bound;
  int len = sizeof bound;
  uv_tcp_getsockname(&li->tcp, (struct sockaddr *)&bound, &len);
  *port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                            : ((struct sockaddr_in *)&bound)->sin_port);
  return 0;
}

static void close_listener(gwp_listener *li) {
  if (li->open) {
    li->open = false;
    uv_close((uv_handle_t *)&li->tcp, NULL);
  }
}

/* --- commands between workers, drain ---------------------------------------------------------- */

static void send_cmd(gwp_server *w, int cmd) {
  atomic_fetch_or(&w->cmd, cmd);
  uv_async_send(&w->async);
}

void gwp_publish_config(gwp_server *s) {
  gwp_shared *sh = s->sh;
  if (sh->nworkers < 2)
    return;
  pthread_mutex_lock(&sh->mu);
  sh->acks = 0;
  pthread_mutex_unlock(&sh->mu);
  for (int i = 1; i < sh->nworkers; i++)
    send_cmd(sh->workers[i], GWP_CMD_CONFIG);
  /* each worker only swaps a reference: a wait beyond a second means one is stuck, and then
   * serving with the old configuration there a little longer beats stalling worker 0 */
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 1;
  pthread_mutex_lock(&sh->mu);
  while (sh->acks < sh->nworkers - 1)
    if (pthread_cond_timedwait(&sh->acked, &sh->mu, &until) != 0)
      break;
  pthread_mutex_unlock(&sh->mu);
}

static void take_config(gwp_server *w) {
  gwp_shared *sh = w->sh;
  pthread_mutex_lock(&sh->mu);
  lk_gw_config *next = lk_gw_config_ref(sh->cfg);
  sh->acks++;
  pthread_cond_broadcast(&sh->acked);
  pthread_mutex_unlock(&sh->mu);
  lk_gw_config *old = w->cfg;
  w->cfg = next;
  lk_gw_config_unref(old);
}

static void stop_everything(gwp_server *s) {
  gwp_conn *c = s->conns;
  while (c) {
    gwp_conn *n = c->next;
    gwp_conn_close(c);
    c = n;
  }
  close_listener(&s->listener);
  close_listener(&s->admin);
  uv_timer_stop(&s->drain_poll);
  uv_stop(s->loop);
}

static int busy_total(const gwp_shared *sh) {
  int n = 0;
  for (int i = 0; i < sh->nworkers; i++)
    n += atomic_load(&sh->workers[i]->nbusy);
  return n;
}

static int conns_total(const gwp_shared *sh) {
  int n = 0;
  for (int i = 0; i < sh->nworkers; i++)
    n += atomic_load(&sh->workers[i]->nconns);
  return n;
}

/* Worker 0, at the drain deadline or on a second SIGTERM / SIGINT: whatever is left,
 * everywhere, is closed; the exit status is 1 if that cut requests off. */
static void stop_now(gwp_server *s, const char *why) {
  gwp_shared *sh = s->sh;
  int busy = busy_total(sh);
  gwp_log(s, LK_GW_LOG_WARN, "%s: closing %d connections (%d requests in flight)", why,
          conns_total(sh), busy);
  sh->exit_code = busy > 0 ? 1 : 0;
  for (int i = 1; i < sh->nworkers; i++)
    send_cmd(sh->workers[i], GWP_CMD_STOP);
  uv_timer_stop(&s->drain_timer);
  stop_everything(s);
}

static void on_drain_timer(uv_timer_t *t) { stop_now(t->data, "drain deadline"); }

/* Worker 0 stops once every worker is done and its own connections are gone. */
static void check_all_done(gwp_server *s) {
  gwp_shared *sh = s->sh;
  if (s->done && atomic_load(&sh->workers_done) == sh->nworkers) {
    uv_timer_stop(&s->drain_timer);
    stop_everything(s);
  }
}

static void on_drain_poll(uv_timer_t *t) {
  gwp_server *s = t->data;
  gwp_close_idle(s, GWP_DRAIN_QUIET);
  if (!s->done && s->nbusy == 0 && s->nconns == 0) {
    s->done = true;
    uv_timer_stop(t);
    atomic_fetch_add(&s->sh->workers_done, 1);
    if (s->id == 0) {
      check_all_done(s);
    } else {
      send_cmd(s->sh->workers[0], GWP_CMD_CHECK);
      stop_everything(s);
    }
  }
}

/* Every worker: stop accepting, close what is idle, answer what is in flight. */
static void drain_worker(gwp_server *s) {
  close_listener(&s->listener);
  uv_timer_stop(&s->health_timer);
  gwp_close_idle(s, GWP_DRAIN_QUIET);
  /* connections that become idle are closed as their responses go out (next_request); this
   * also catches a connection idle between two checks */
  uv_timer_start(&s->drain_poll, on_drain_poll, 0, 10);
}

static void start_drain(gwp_server *s) {
  gwp_shared *sh = s->sh;
  if (atomic_exchange(&sh->draining, true))
    return;
  gwp_log(s, LK_GW_LOG_INFO, "draining: %d connections, %d requests in flight (up to %lld ms)",
          conns_total(sh), busy_total(sh),
          (long long)(s->cfg->listen.drain_timeout / LK_NS_PER_MS));
  uv_timer_start(&s->drain_timer, on_drain_timer,
                 (uint64_t)(s->cfg->listen.drain_timeout / LK_NS_PER_MS), 0);
  for (int i = 1; i < sh->nworkers; i++)
    send_cmd(sh->workers[i], GWP_CMD_DRAIN);
  drain_worker(s);
}

static void on_async(uv_async_t *a) {
  gwp_server *w = a->data;
  int cmd = atomic_exchange(&w->cmd, 0);
  if (cmd & GWP_CMD_CONFIG)
    take_config(w);
  if (cmd & GWP_CMD_STOP) {
    stop_everything(w);
    return;
  }
  if (cmd & GWP_CMD_DRAIN)
    drain_worker(w);
  if (cmd & GWP_CMD_CHECK)
    check_all_done(w);
}

static void on_signal(uv_signal_t *h, int sig) {
  gwp_server *s = h->data;
  if (sig == SIGHUP) {
    char err[512];
    if (gwp_reload(s, NULL, 0, err, sizeof err) != LK_OK)
      gwp_log(s, LK_GW_LOG_ERROR, "reload rejected, the running configuration stays: %s", err);
    return;
  }
  if (sig == SIGUSR1) {
    /* nginx's USR1, what logrotate's postrotate sends: the access log file is opened again by
     * its name (a rotated file is left to its new name), whatever the configuration file now
     * says; SIGUSR1's default action would have ended the process */
    const char *a = s->cfg->log.access;
    if (!a || strcmp(a, "-") == 0)
      return;
    if (gwp_access_open(s->sh, s->cfg) != LK_OK)
      gwp_log(s, LK_GW_LOG_ERROR, "access log %s: cannot reopen, still writing where it was: %s", a,
              strerror(errno));
    else
      gwp_log(s, LK_GW_LOG_INFO, "access log %s reopened", a);
    return;
  }
  /* a second SIGTERM or SIGINT (Ctrl-C again) does not wait for the drain deadline */
  if (gwp_draining(s)) {
    stop_now(s, sig == SIGINT ? "SIGINT while draining" : "SIGTERM while draining");
    return;
  }
  start_drain(s);
}

/* --- workers: start, run, stop ---------------------------------------------------------------- */

static void close_walk(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h))
    uv_close(h, NULL);
}

/* Sets up worker `w` on `loop` (its own, or the main thread's default loop for worker 0),
 * listening on the shared port (`port` 0 for the first: it takes the configured one). */
static int worker_init(gwp_server *w, gwp_shared *sh, int id, uv_loop_t *loop, int port) {
  w->sh = sh;
  w->id = id;
  w->loop = loop;
  loop->data = w;
  w->rt = sh->rt;
  w->cfg = lk_gw_config_ref(sh->cfg);
  lk_rand_fast_init(&w->rng);
  uv_async_init(loop, &w->async, on_async);
  w->async.data = w;
  uv_timer_init(loop, &w->curl_timer);
  w->curl_timer.data = w;
  uv_check_init(loop, &w->start_check);
  w->start_check.data = w;
  uv_timer_init(loop, &w->drain_timer);
  w->drain_timer.data = w;
  uv_timer_init(loop, &w->drain_poll);
  w->drain_poll.data = w;
  uv_timer_init(loop, &w->health_timer);
  w->health_timer.data = w;
  lk_http_client_config cc;
  lk_http_client_config_init_default(&cc);
  cc.socket_fn = socket_fn;
  cc.timer_fn = timer_fn;
  cc.close_fn = close_fn;
  cc.loop_ud = w;
  cc.transport = w->cfg->listen.upstream_client; /* read at start: a reload keeps the client */
  cc.start_submitted = true;
  w->client = lk_http_client_new(&cc);
  if (!w->client) {
    gwp_log(w, LK_GW_LOG_ERROR, "cannot create the HTTP client");
    return -1;
  }
  uv_check_start(&w->start_check, on_start_check);
  uv_unref((uv_handle_t *)&w->start_check); /* it does not keep the loop alive */
  const lk_gw_listen *l = &w->cfg->listen;
  return listen_on(w, &w->listener, &l->addr, port, l->backlog, sh->nworkers > 1, &w->port);
}

/* After its loop ended (and its thread was joined): in-flight calls are cancelled (their
 * callbacks run now and free their requests), then every handle is closed. */
static void worker_fini(gwp_server *w) {
  if (!w->loop)
    return;
  lk_http_client_free(w->client);
  w->client = NULL;
  polls_free(w);
  uv_walk(w->loop, close_walk, NULL);
  uv_run(w->loop, UV_RUN_DEFAULT);
  uv_loop_close(w->loop);
  lk_gw_config_unref(w->cfg);
  w->cfg = NULL;
}

/* A worker thread only runs its loop: worker 0 tears it down after joining the thread, so a
 * command sent late (uv_async_send) never meets a closed loop. */
static void *worker_main(void *arg) {
  gwp_server *w = arg;
  uv_run(w->loop, UV_RUN_DEFAULT);
  return NULL;
}

/* Loop threads: --threads, else one per CPU this process may run on (HAProxy's nbthread
 * default), at most 64. */
static int default_threads(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    return 1;
  int n = CPU_COUNT(&set);
  return n < 1 ? 1 : n > 64 ? 64 : n;
}

/* Writes a small file whole: to "PATH.tmp", then renamed over PATH, so a reader never sees half
 * of it. 0, or -1 with errno set. */
__attribute__((format(printf, 2, 3))) static int write_whole(const char *path, const char *fmt,
                                                             ...) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
    errno = ENAMETOOLONG;
    return -1;
  }
  FILE *f = fopen(tmp, "w");
  if (!f)
    return -1;
  va_list ap;
  va_start(ap, fmt);
  int w = vfprintf(f, fmt, ap);
  va_end(ap);
  if (fclose(f) != 0 || w < 0 || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    errno = e;
    return -1;
  }
  return 0;
}

int lk_gw_serve(const lk_gw_serve_opts *o) {
  char err[1024];
  lk_gw_config *cfg = lk_gw_config_load(o->config_path, err, sizeof err);
  if (!cfg) {
    fprintf(stderr, "linkd serve: %s\n", err);
    return 2;
  }
  if (o->check_only) {
    char *out = NULL;
    size_t len = 0;
    if (lk_gw_config_dump(cfg, &out, &len) == LK_OK)
      fwrite(out, 1, len, stdout);
    free(out);
    lk_gw_config_unref(cfg);
    return 0;
  }
  signal(SIGPIPE, SIG_IGN);
  gwp_shared *sh = calloc(1, sizeof *sh);
  int nw = o->threads > 0 ? o->threads : default_threads();
  gwp_server **ws = calloc((size_t)nw, sizeof *ws);
  lk_rand_fast seed;
  lk_rand_fast_init(&seed);
  if (!sh || !ws) {
    fprintf(stderr, "linkd serve: out of memory\n");
    lk_gw_config_unref(cfg);
    free(sh);
    free(ws);
    return 1;
  }
  pthread_mutex_init(&sh->mu, NULL);
  pthread_cond_init(&sh->acked, NULL);
  sh->nworkers = nw;
  sh->workers = ws;
  sh->config_path = strdup(o->config_path);
  sh->rt = lk_gw_runtime_new(&seed.base);
  if (!sh->config_path || !sh->rt ||
      lk_gw_runtime_attach(sh->rt, cfg, gwp_now(), err, sizeof err) != LK_OK) {
    fprintf(stderr, "linkd serve: %s\n", sh->rt ? err : "out of memory");
    lk_gw_config_unref(cfg);
    lk_gw_runtime_free(sh->rt);
    free(sh->config_path);
    free(sh);
    free(ws);
    return 2;
  }
  sh->cfg = cfg;
  sh->started.listen = cfg->listen.addr;
  sh->started.admin = cfg->admin.addr;
  sh->started.admin_on = cfg->admin.enabled;
  sh->started.backlog = cfg->listen.backlog;
  sh->started.client = cfg->listen.upstream_client;
  int code = 1;
  int started = 0; /* worker threads running */
  bool ran = false, pid_written = false;
  if (gwp_access_open(sh, cfg) != LK_OK) {
    fprintf(stderr, "linkd serve: %s: log access: cannot open %s: %s\n", o->config_path,
            cfg->log.access, strerror(errno));
    goto out;
  }
  for (int i = 0; i < nw; i++) {
    ws[i] = calloc(1, sizeof *ws[i]);
    if (!ws[i])
      goto out;
    uv_loop_t *loop = i == 0 ? uv_default_loop() : &ws[i]->own_loop;
    if (i > 0 && uv_loop_init(loop) != 0)
      goto out;
    if (worker_init(ws[i], sh, i, loop, i == 0 ? 0 : ws[0]->port) != 0)
      goto out;
  }
  gwp_server *s = ws[0];
  if (cfg->admin.enabled &&
      listen_on(s, &s->admin, &cfg->admin.addr, 0, 64, false, &s->admin_port) != 0)
    goto out;
  s->admin.admin = true;
  sh->started.listen_port = s->port;
  sh->started.admin_port = s->admin_port;
  uv_signal_init(s->loop, &s->sig_hup);
  uv_signal_init(s->loop, &s->sig_term);
  uv_signal_init(s->loop, &s->sig_int);
  uv_signal_init(s->loop, &s->sig_usr1);
  s->sig_hup.data = s->sig_term.data = s->sig_int.data = s->sig_usr1.data = s;
  uv_signal_start(&s->sig_hup, on_signal, SIGHUP);
  uv_signal_start(&s->sig_term, on_signal, SIGTERM);
  uv_signal_start(&s->sig_int, on_signal, SIGINT);
  uv_signal_start(&s->sig_usr1, on_signal, SIGUSR1);
  arm_health(s);
  for (int i = 1; i < nw; i++) {
    if (pthread_create(&ws[i]->thread, NULL, worker_main, ws[i]) != 0) {
      fprintf(stderr, "linkd serve: cannot start loop thread %d\n", i);
      goto out;
    }
    started = i;
  }
  /* the pid file before the port file: whoever waits for the port file (a test, a supervisor)
   * may read the pid file the moment the port file appears */
  if (o->pid_file) {
    if (write_whole(o->pid_file, "%ld\n", (long)getpid()) != 0) {
      fprintf(stderr, "linkd serve: --pid-file %s: %s\n", o->pid_file, strerror(errno));
      goto out;
    }
    pid_written = true;
  }
  if (o->port_file && write_whole(o->port_file, "%d %d\n", s->port, s->admin_port) != 0) {
    fprintf(stderr, "linkd serve: --port-file %s: %s\n", o->port_file, strerror(errno));
    goto out;
  }
  gwp_log(s, LK_GW_LOG_INFO,
          "listening on %s:%d (%d loop threads)%s, configuration generation %llu",
          cfg->listen.addr.host, s->port, nw, cfg->admin.enabled ? ", admin listener on" : "",
          (unsigned long long)cfg->generation);
  sh->exit_code = 0;
  uv_run(s->loop, UV_RUN_DEFAULT);
  code = sh->exit_code;
  ran = true;
out:
  /* threads still running (a failed start) are told to stop; all are joined */
  for (int i = 1; i <= started; i++)
    send_cmd(ws[i], GWP_CMD_STOP);
  for (int i = 1; i <= started; i++)
    pthread_join(ws[i]->thread, NULL);
  for (int i = 0; i < nw; i++) {
    if (!ws[i])
      continue;
    worker_fini(ws[i]);
    free(ws[i]);
  }
  if (pid_written)
    unlink(o->pid_file); /* as nginx does: a pid file names a running process */
  if (ran && sh->cfg->log.level >= LK_GW_LOG_INFO) /* `cfg` may be gone: reloaded */
    fprintf(stderr, "linkd serve: info: stopped\n");
  if (sh->access && sh->access_owned)
    fclose(sh->access);
  else if (sh->access)
    fflush(sh->access);
  lk_gw_config_unref(sh->cfg);
  lk_gw_runtime_free(sh->rt);
  free(sh->config_path);
  pthread_mutex_destroy(&sh->mu);
  pthread_cond_destroy(&sh->acked);
  free(ws);
  free(sh);
  return code;
}
