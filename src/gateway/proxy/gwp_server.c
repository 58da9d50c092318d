/* SPDX-License-Identifier: MIT */
/* The loop: listeners, libcurl's descriptors and timer on libuv, signals (SIGHUP reload,
 * SIGTERM/SIGINT drain), active health checks, start-up and shutdown. */
#include "gw_proxy.h"
#include "gwp.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* While draining, a connection with nothing in flight is closed once it has been quiet this
 * long: one that served a request is closed as its response goes out (next_request), but one
 * accepted just before SIGTERM may have its first request on the wire. */
#define GWP_DRAIN_QUIET LK_MS(100)

/* --- lk_http on the loop ---------------------------------------------------------------------- */

/* One watcher per upstream descriptor, kept across libcurl's REMOVE / re-add of the same
 * descriptor (a pooled connection is unwatched between its transfers): stopping a uv_poll drops
 * its epoll registration at once (so a number that libcurl closes and reuses starts clean), and
 * keeping the handle saves a close and an init per request. */
typedef struct gwp_poll {
  uv_poll_t h;
  int fd;
  int events; /* what is being watched (UV_READABLE | UV_WRITABLE), 0 stopped */
} gwp_poll;

static void on_poll(uv_poll_t *h, int status, int events) {
  gwp_server *s = h->loop->data;
  int ev = 0;
  if (status < 0)
    ev = LK_HTTP_POLL_IN | LK_HTTP_POLL_OUT; /* let libcurl find the error */
  if (events & UV_READABLE)
    ev |= LK_HTTP_POLL_IN;
  if (events & UV_WRITABLE)
    ev |= LK_HTTP_POLL_OUT;
  lk_http_client_socket_action(s->client, ((gwp_poll *)h)->fd, ev);
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
  int uv_ev = (events & LK_HTTP_POLL_IN ? UV_READABLE : 0) |
              (events & LK_HTTP_POLL_OUT ? UV_WRITABLE : 0);
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
  if (uv_ev == w->events)
    return;
  w->events = uv_ev;
  if (uv_ev == 0)
    uv_poll_stop(&w->h);
  else
    uv_poll_start(&w->h, uv_ev, on_poll);
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

static void timer_fn(void *ud, int64_t delay) {
  gwp_server *s = ud;
  if (delay < 0) {
    uv_timer_stop(&s->curl_timer);
    return;
  }
  uint64_t ms = (uint64_t)((delay + LK_NS_PER_MS - 1) / LK_NS_PER_MS);
  uv_timer_start(&s->curl_timer, on_curl_timer, ms, 0);
}

/* --- active health checks ---------------------------------------------------------------------- */

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
  arm_health(s);
}

static void arm_health(gwp_server *s) {
  if (s->draining)
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

/* --- listeners, signals, drain ----------------------------------------------------------------- */

static void on_connection(uv_stream_t *l, int status) {
  gwp_listener *li = l->data;
  if (status < 0)
    return;
  gwp_conn_accept(li->srv, l, li->admin);
}

static int listen_on(gwp_server *s, gwp_listener *li, const lk_gw_addr *a, int backlog,
                     int *port) {
  struct sockaddr_storage ss;
  if (uv_ip4_addr(a->host, a->port, (struct sockaddr_in *)&ss) != 0 &&
      uv_ip6_addr(a->host, a->port, (struct sockaddr_in6 *)&ss) != 0) {
    gwp_log(s, LK_GW_LOG_ERROR, "%s: not an IP address (listen addresses are literals)",
            a->host);
    return -1;
  }
  uv_tcp_init(s->loop, &li->tcp);
  li->tcp.data = li;
  li->srv = s;
  li->open = true;
  int rc = uv_tcp_bind(&li->tcp, (struct sockaddr *)&ss, 0);
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)&li->tcp, backlog, on_connection);
  if (rc != 0) {
    gwp_log(s, LK_GW_LOG_ERROR, "%s:%d: %s", a->host, a->port, uv_strerror(rc));
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

static void stop_everything(gwp_server *s) {
  gwp_conn *c = s->conns;
  while (c) {
    gwp_conn *n = c->next;
    gwp_conn_close(c);
    c = n;
  }
  close_listener(&s->admin);
  uv_stop(s->loop);
}

/* The drain deadline: whatever is left is closed. */
static void on_drain_timer(uv_timer_t *t) {
  gwp_server *s = t->data;
  gwp_log(s, LK_GW_LOG_WARN, "drain deadline: closing %d connections (%d requests in flight)",
          s->nconns, s->nbusy);
  s->exit_code = s->nbusy > 0 ? 1 : 0;
  uv_timer_stop(&s->drain_poll);
  stop_everything(s);
}

static void on_drain_poll(uv_timer_t *t) {
  gwp_server *s = t->data;
  gwp_close_idle(s, GWP_DRAIN_QUIET);
  if (s->nbusy == 0 && s->nconns == 0) {
    uv_timer_stop(t);
    uv_timer_stop(&s->drain_timer);
    stop_everything(s);
  }
}

static void start_drain(gwp_server *s) {
  if (s->draining)
    return;
  s->draining = true;
  gwp_log(s, LK_GW_LOG_INFO, "draining: %d connections, %d requests in flight (up to %lld ms)",
          s->nconns, s->nbusy, (long long)(s->cfg->listen.drain_timeout / LK_NS_PER_MS));
  close_listener(&s->listener);
  uv_timer_stop(&s->health_timer);
  gwp_close_idle(s, GWP_DRAIN_QUIET);
  uv_timer_start(&s->drain_timer, on_drain_timer,
                 (uint64_t)(s->cfg->listen.drain_timeout / LK_NS_PER_MS), 0);
  /* connections that become idle are closed as their responses go out (next_request); this
   * also catches a connection idle between two checks */
  uv_timer_start(&s->drain_poll, on_drain_poll, 0, 10);
}

static void on_signal(uv_signal_t *h, int sig) {
  gwp_server *s = h->data;
  if (sig == SIGHUP) {
    char err[512];
    if (gwp_reload(s, NULL, 0, err, sizeof err) != LK_OK)
      gwp_log(s, LK_GW_LOG_ERROR, "reload rejected, the running configuration stays: %s", err);
    return;
  }
  start_drain(s);
}

/* --- start and stop ---------------------------------------------------------------------------- */

static void close_walk(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h))
    uv_close(h, NULL);
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
  gwp_server *s = calloc(1, sizeof *s);
  if (!s) {
    lk_gw_config_unref(cfg);
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  lk_rand_fast_init(&s->rng);
  s->config_path = strdup(o->config_path);
  s->rt = lk_gw_runtime_new(&s->rng.base);
  int code = 1;
  if (!s->config_path || !s->rt ||
      lk_gw_runtime_attach(s->rt, cfg, gwp_now(), err, sizeof err) != LK_OK) {
    fprintf(stderr, "linkd serve: %s\n", s->rt ? err : "out of memory");
    lk_gw_config_unref(cfg);
    lk_gw_runtime_free(s->rt);
    free(s->config_path);
    free(s);
    return 2;
  }
  s->cfg = cfg;
  if (gwp_access_open(s, cfg) != LK_OK) {
    fprintf(stderr, "linkd serve: %s: log access: cannot open %s: %s\n", o->config_path,
            cfg->log.access, strerror(errno));
    goto out_cfg;
  }
  s->loop = uv_default_loop();
  s->loop->data = s;
  lk_http_client_config cc;
  lk_http_client_config_init_default(&cc);
  cc.socket_fn = socket_fn;
  cc.timer_fn = timer_fn;
  cc.loop_ud = s;
  uv_timer_init(s->loop, &s->curl_timer);
  s->curl_timer.data = s;
  s->client = lk_http_client_new(&cc);
  if (!s->client) {
    fprintf(stderr, "linkd serve: cannot create the HTTP client\n");
    goto out_cfg;
  }
  if (listen_on(s, &s->listener, &cfg->listen.addr, cfg->listen.backlog, &s->port) != 0)
    goto out_loop;
  if (cfg->admin.enabled &&
      listen_on(s, &s->admin, &cfg->admin.addr, 64, &s->admin_port) != 0)
    goto out_loop;
  s->admin.admin = true;
  uv_signal_init(s->loop, &s->sig_hup);
  uv_signal_init(s->loop, &s->sig_term);
  uv_signal_init(s->loop, &s->sig_int);
  s->sig_hup.data = s->sig_term.data = s->sig_int.data = s;
  uv_signal_start(&s->sig_hup, on_signal, SIGHUP);
  uv_signal_start(&s->sig_term, on_signal, SIGTERM);
  uv_signal_start(&s->sig_int, on_signal, SIGINT);
  uv_timer_init(s->loop, &s->drain_timer);
  s->drain_timer.data = s;
  uv_timer_init(s->loop, &s->drain_poll);
  s->drain_poll.data = s;
  uv_timer_init(s->loop, &s->health_timer);
  s->health_timer.data = s;
  arm_health(s);
  if (o->port_file) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", o->port_file);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d %d\n", s->port, s->admin_port) < 0 || fclose(f) != 0 ||
        rename(tmp, o->port_file) != 0) {
      fprintf(stderr, "linkd serve: --port-file %s: %s\n", o->port_file, strerror(errno));
      goto out_loop;
    }
  }
  gwp_log(s, LK_GW_LOG_INFO, "listening on %s:%d%s, configuration generation %llu",
          cfg->listen.addr.host, s->port, cfg->admin.enabled ? " (admin listener on too)" : "",
          (unsigned long long)cfg->generation);
  s->exit_code = 0;
  uv_run(s->loop, UV_RUN_DEFAULT);
  code = s->exit_code;
  gwp_log(s, LK_GW_LOG_INFO, "stopped");
out_loop:
  /* in-flight calls are cancelled; their callbacks run now and free their requests */
  lk_http_client_free(s->client);
  s->client = NULL;
  polls_free(s);
  uv_walk(s->loop, close_walk, NULL);
  uv_run(s->loop, UV_RUN_DEFAULT);
  uv_loop_close(s->loop);
out_cfg:
  if (s->access && s->access_owned)
    fclose(s->access);
  else if (s->access)
    fflush(s->access);
  lk_gw_config_unref(s->cfg);
  lk_gw_runtime_free(s->rt);
  free(s->config_path);
  free(s);
  return code;
}
