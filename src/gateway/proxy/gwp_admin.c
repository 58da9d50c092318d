/* SPDX-License-Identifier: MIT */
/* The admin listener: GET /metrics (Prometheus text), GET /config (the running configuration and
 * its generation), GET /healthz, GET /ready, POST /config (reload: the body is a new
 * configuration, or, empty, the configured file is read again). And the reload itself, shared
 * with SIGHUP: validate completely, attach to the runtime, swap the pointer. */
#include "gwp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static bool addr_eq(const lk_gw_addr *a, const lk_gw_addr *b) {
  return a->port == b->port && strcmp(a->host, b->host) == 0;
}

static void addr_str(const lk_gw_addr *a, int port, char *buf, size_t cap) {
  bool v6 = strchr(a->host, ':') != NULL;
  snprintf(buf, cap, "%s%s%s:%d", v6 ? "[" : "", a->host, v6 ? "]" : "", port);
}

/* The settings of `next` read at start only that differ from what the process started with:
 * a line each in out (what GET /config now shows is not what is listening), logged too. */
static void start_only_changes(gwp_server *s, const lk_gw_config *next, char *out, size_t cap) {
  const gwp_shared *sh = s->sh;
  char now[LK_GW_HOST_MAX + 16], then[LK_GW_HOST_MAX + 16], line[320];
  size_t n = 0;
  out[0] = '\0';
  for (int k = 0; k < 5; k++) {
    line[0] = '\0';
    if (k == 0 && !addr_eq(&next->listen.addr, &sh->started.listen)) {
      addr_str(&next->listen.addr, next->listen.addr.port, now, sizeof now);
      addr_str(&sh->started.listen, sh->started.listen_port, then, sizeof then);
      snprintf(line, sizeof line, "[listen] address = %s", now);
    } else if (k == 1 && next->listen.backlog != sh->started.backlog) {
      snprintf(line, sizeof line, "[listen] backlog = %d", next->listen.backlog);
      snprintf(then, sizeof then, "%d", sh->started.backlog);
    } else if (k == 2 && next->listen.upstream_client != sh->started.client) {
      snprintf(line, sizeof line, "[listen] upstream-client = %s",
               next->listen.upstream_client == LK_HTTP_TRANSPORT_NATIVE ? "native" : "curl");
      snprintf(then, sizeof then, "%s",
               sh->started.client == LK_HTTP_TRANSPORT_NATIVE ? "native" : "curl");
    } else if (k == 3 && next->admin.enabled != sh->started.admin_on) {
      snprintf(line, sizeof line, "[admin] %s", next->admin.enabled ? "enabled" : "disabled");
      snprintf(then, sizeof then, "%s", sh->started.admin_on ? "on" : "off");
    } else if (k == 4 && next->admin.enabled && sh->started.admin_on &&
               !addr_eq(&next->admin.addr, &sh->started.admin)) {
      addr_str(&next->admin.addr, next->admin.addr.port, now, sizeof now);
      addr_str(&sh->started.admin, sh->started.admin_port, then, sizeof then);
      snprintf(line, sizeof line, "[admin] address = %s", now);
    }
    if (!line[0])
      continue;
    gwp_log(s, LK_GW_LOG_WARN, "%s: read at start only, not applied until a restart (running: %s)",
            line, then);
    int w =
        snprintf(out + n, cap - n,
                 "%s: read at start only, not applied until a restart (running: %s)\n", line, then);
    if (w > 0 && (size_t)w < cap - n)
      n += (size_t)w;
  }
}

int gwp_reload(gwp_server *s, const char *text, size_t len, char *err, size_t cap) {
  gwp_shared *sh = s->sh;
  /* a posted text is named for where it came from, in its errors ("POST /config:7: ...": the
   * file on disk is not what is wrong), in GET /config's "from" and in the log */
  lk_gw_config *next = text ? lk_gw_config_load_mem(text, len, GWP_POSTED_CONFIG, err, cap)
                            : lk_gw_config_load(sh->config_path, err, cap);
  /* a text posted to /config names files too: checked before anything is attached, as a file's
   * are by its loader (the generation is not used up by a configuration that is refused) */
  if (next && text && lk_gw_config_check_files(next, err, cap) != LK_OK) {
    lk_gw_config_unref(next);
    next = NULL;
  }
  if (!next) {
    sh->reloads_failed++;
    lk_gw_runtime_record_reload(s->rt, s->cfg, false);
    return LK_ECONFIG;
  }
  int rc = lk_gw_runtime_attach(s->rt, next, gwp_now(), err, cap);
  if (rc != LK_OK) {
    lk_gw_config_unref(next);
    sh->reloads_failed++;
    lk_gw_runtime_record_reload(s->rt, s->cfg, false);
    return rc;
  }
  if (gwp_access_open(sh, next) != LK_OK) {
    snprintf(err, cap, "%s:%d: access: cannot open %s for append: %s", next->path,
             next->log.access_line, next->log.access, strerror(errno));
    lk_gw_config_unref(next);
    sh->reloads_failed++;
    lk_gw_runtime_record_reload(s->rt, s->cfg, false);
    return LK_ESYS;
  }
  /* the swap: requests in flight hold their own reference to the old configuration; each
   * worker drops its reference when it takes the new one */
  pthread_mutex_lock(&sh->mu);
  lk_gw_config *old = sh->cfg;
  sh->cfg = next;
  pthread_mutex_unlock(&sh->mu);
  lk_gw_config_unref(old);
  lk_gw_config *mine = s->cfg;
  s->cfg = lk_gw_config_ref(next);
  lk_gw_config_unref(mine);
  gwp_publish_config(s);
  sh->reloads_ok++;
  lk_gw_runtime_record_reload(s->rt, s->cfg, true);
  gwp_log(s, LK_GW_LOG_INFO, "configuration generation %llu loaded from %s",
          (unsigned long long)next->generation, next->path);
  start_only_changes(s, next, err, cap);
  return LK_OK;
}

static bool at(const gwp_req *r, const char *path) {
  const char *u = r->head;
  size_t n = strlen(path);
  return strncmp(u, path, n) == 0 && (u[n] == '\0' || u[n] == '?');
}

/* HEAD is GET without the body (RFC 9110 9.3.2), as for any resource: gwp_respond leaves it out */
static bool is(const gwp_req *r, unsigned method, const char *path) {
  return (r->method == method || (method == HTTP_GET && r->method == HTTP_HEAD)) && at(r, path);
}

void gwp_admin_dispatch(gwp_req *r) {
  gwp_server *s = r->srv;
  if (is(r, HTTP_GET, "/healthz")) {
    gwp_respond(r, 200, NULL, "Content-Type: text/plain\r\n", "ok\n", 3, NULL);
    return;
  }
  if (is(r, HTTP_GET, "/ready")) {
    if (gwp_draining(s))
      gwp_respond(r, 503, NULL, "Content-Type: text/plain\r\n", "draining\n", 9, NULL);
    else
      gwp_respond(r, 200, NULL, "Content-Type: text/plain\r\n", "ready\n", 6, NULL);
    return;
  }
  if (is(r, HTTP_GET, "/metrics")) {
    lk_gw_runtime_refresh(s->rt, s->cfg, gwp_now());
    char *out = NULL;
    size_t len = 0;
    if (lk_metrics_render(lk_gw_runtime_metrics(s->rt), &out, &len) != LK_OK) {
      gwp_respond_error(r, 500, false, NULL);
      return;
    }
    gwp_respond(r, 200, NULL, "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n", out,
                len, NULL);
    free(out);
    return;
  }
  if (is(r, HTTP_GET, "/config")) {
    char *out = NULL;
    size_t len = 0;
    if (lk_gw_config_dump(s->cfg, &out, &len) != LK_OK) {
      gwp_respond_error(r, 500, false, NULL);
      return;
    }
    char hdr[96];
    snprintf(hdr, sizeof hdr, "Content-Type: text/plain\r\nLinkd-Config-Generation: %llu\r\n",
             (unsigned long long)s->cfg->generation);
    gwp_respond(r, 200, NULL, hdr, out, len, NULL);
    free(out);
    return;
  }
  if (is(r, HTTP_POST, "/config")) {
    char err[512] = "";
    int rc = r->body_len > 0 ? gwp_reload(s, r->body, r->body_len, err, sizeof err)
                             : gwp_reload(s, NULL, 0, err, sizeof err);
    if (rc != LK_OK) {
      gwp_log(s, LK_GW_LOG_ERROR, "reload rejected, the running configuration stays: %s", err);
      size_t n = strlen(err);
      if (n + 1 < sizeof err)
        err[n++] = '\n';
      gwp_respond(r, 400, NULL, "Content-Type: text/plain\r\n", err, n, NULL);
      return;
    }
    char msg[600];
    int n = snprintf(msg, sizeof msg, "generation %llu\n%s", (unsigned long long)s->cfg->generation,
                     err);
    if (n < 0 || (size_t)n >= sizeof msg)
      n = n < 0 ? 0 : (int)sizeof msg - 1;
    gwp_respond(r, 200, NULL, "Content-Type: text/plain\r\n", msg, (size_t)n, NULL);
    return;
  }
  /* a known resource asked with another method: 405 and what it allows (RFC 9110 15.5.6) */
  if (at(r, "/config")) {
    gwp_respond_error(r, 405, false, "Allow: GET, HEAD, POST\r\n");
    return;
  }
  if (at(r, "/healthz") || at(r, "/ready") || at(r, "/metrics")) {
    gwp_respond_error(r, 405, false, "Allow: GET, HEAD\r\n");
    return;
  }
  gwp_respond_error(r, 404, false, NULL);
}
