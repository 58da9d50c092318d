/* SPDX-License-Identifier: MIT */
/* The admin listener: GET /metrics (Prometheus text), GET /config (the running configuration and
 * its generation), GET /healthz, GET /ready, POST /config (reload: the body is a new
 * configuration, or, empty, the configured file is read again). And the reload itself, shared
 * with SIGHUP: validate completely, attach to the runtime, swap the pointer. */
#include "gwp.h"

#include <stdlib.h>
#include <string.h>

int gwp_reload(gwp_server *s, const char *text, size_t len, char *err, size_t cap) {
  gwp_shared *sh = s->sh;
  lk_gw_config *next = text ? lk_gw_config_load_mem(text, len, sh->config_path, err, cap)
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
    snprintf(err, cap, "%s: log access: cannot open %s", sh->config_path, next->log.access);
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
          (unsigned long long)next->generation, sh->config_path);
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
    char msg[64];
    int n = snprintf(msg, sizeof msg, "generation %llu\n", (unsigned long long)s->cfg->generation);
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
