/* SPDX-License-Identifier: MIT */
/* server.c: libmicrohttpd glue. One request goes through these steps (see docs/libraryd.md):
 *
 *   head      route, fault decision, reset_before_read, deadline (504 when already expired),
 *             caller identity, Idempotency-Key syntax and requirement, size limit
 *   body      read (413 past max_body)
 *   after     reset_after_read / close, body validation (415, 400), key: claim (409 while
 *   body      held), stored result (replay or 422), injected latency (the connection is
 *             suspended, no thread waits), bounded by the deadline
 *   run       status fault (before), deadline check (504), then the admission queue: 503 at once
 *             when full, else the connection is suspended until a worker (pool.c) has spent the
 *             service cost and run the handler (a write commits its effect and its key record
 *             together); replays, /healthz and /metrics skip the queue
 *   finish    after-processing faults, then send (a stall or slow body ends early when the
 *             client hangs up)
 *
 * Threads: MHD's poll(2) thread pool parses and sends; the workers run handlers; the waker thread
 * resumes connections suspended by faults (and paused streams whose client hung up); a purge
 * thread deletes expired keys.
 */
#include "core/sat.h"
#include "idem.h"
#include "server_impl.h"
#include "strict.h"
#include "util.h"

#include <linkd/error.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Set when we close a connection on purpose, so MHD's "application error" log line is muted. */
static _Thread_local bool tl_quiet_close;

__attribute__((format(printf, 2, 0))) static void mhd_log(void *cls, const char *fmt, va_list ap) {
  lk_server *s = cls;
  if (lk_head_mhd_log(s->guard, fmt)) /* answered the request itself (strict.h) */
    return;
  if (tl_quiet_close || s->cfg.log == LK_LOG_OFF)
    return;
  char msg[400], buf[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  msg[strcspn(msg, "\n")] = '\0';
  int len = snprintf(buf, sizeof buf, "libraryd: mhd: %s\n", msg);
  ssize_t w = write(s->cfg.log_fd, buf, (size_t)len);
  (void)w;
}

/* The admin listener's logger: the same lines, with its own connections' records. */
__attribute__((format(printf, 2, 0))) static void admin_mhd_log(void *cls, const char *fmt,
                                                                va_list ap) {
  lk_server *s = cls;
  if (lk_head_mhd_log(s->admin_guard, fmt))
    return;
  mhd_log(cls, fmt, ap);
}

void lk_server_config_init_default(lk_server_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->addr = "127.0.0.1";
  cfg->port = 8080;
  cfg->admin_port = -1;
  cfg->max_body = 64 * 1024;
  cfg->idem_retention_ns = 24 * 3600 * LK_NS_PER_S;
  cfg->drain_timeout_ns = 10 * LK_NS_PER_S;
  cfg->idle_timeout_s = 60;
  cfg->connection_limit = 4096; /* above the default queue: a queued request holds its connection */
  cfg->per_client_limit = 64;
  cfg->head_timeout_ns = 10 * LK_NS_PER_S;
  cfg->body_timeout_ns = 30 * LK_NS_PER_S;
  cfg->seed = 1;
  cfg->workers = 8;
  cfg->queue_limit = 1024;
  cfg->work = NULL;
  cfg->queue_discipline = LK_QDISC_DEFAULT;
  cfg->queue_target_ns = 5 * LK_NS_PER_MS;
  cfg->queue_interval_ns = 100 * LK_NS_PER_MS;
  cfg->log = LK_LOG_TEXT;
  cfg->log_fd = 2;
}

/* --- sending ----------------------------------------------------------------------------- */

static void add_headers(struct MHD_Response *m, const lk_resp *resp) {
  const char *p = resp->headers;
  while (*p) {
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    char line[LK_RESP_HDR_MAX];
    if (n < sizeof line) {
      memcpy(line, p, n);
      line[n] = '\0';
      char *colon = strstr(line, ": ");
      if (colon) {
        *colon = '\0';
        MHD_add_response_header(m, line, colon + 2);
      }
    }
    p += n + (nl != NULL);
  }
}

static enum MHD_Result queue(req *r, struct MHD_Response *m, const lk_resp *resp) {
  if (!m)
    return MHD_NO;
  add_headers(m, resp);
  if (atomic_load(&r->srv->draining))
    MHD_add_response_header(m, MHD_HTTP_HEADER_CONNECTION, "close");
  enum MHD_Result rc = MHD_queue_response(r->conn, (unsigned)resp->status, m);
  MHD_destroy_response(m);
  r->status = resp->status;
  r->ph = PH_DONE;
  return rc;
}

/* Queues resp; the body moves into MHD. */
static enum MHD_Result send_resp(req *r, lk_resp *resp) {
  struct MHD_Response *m;
  if (resp->body_len) {
    m = MHD_create_response_from_buffer(resp->body_len, resp->body, MHD_RESPMEM_MUST_FREE);
    if (m)
      resp->body = NULL;
  } else {
    m = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
  }
  enum MHD_Result rc = queue(r, m, resp);
  resp->body_len = 0;
  return rc;
}

static enum MHD_Result send_error(req *r, int status, const char *code, const char *msg) {
  resp_free(&r->resp);
  resp_error(&r->resp, status, code, "%s", msg);
  return send_resp(r, &r->resp);
}

static int conn_fd(req *r) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  return ci ? ci->connect_fd : -1;
}

/* An abortive close: connect(AF_UNSPEC) disconnects a TCP socket, which sends RST, while the
 * descriptor stays MHD's to close. */
static enum MHD_Result do_reset(req *r) {
  int fd = conn_fd(r);
  if (fd >= 0) {
    struct sockaddr sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_family = AF_UNSPEC;
    (void)connect(fd, &sa, sizeof sa);
  }
  r->outcome = "reset";
  tl_quiet_close = true;
  return MHD_NO;
}

/* An orderly close (FIN) without a response. */
static enum MHD_Result do_close(req *r) {
  int fd = conn_fd(r);
  if (fd >= 0)
    shutdown(fd, SHUT_RDWR);
  r->outcome = "close";
  tl_quiet_close = true;
  return MHD_NO;
}

static void resume_cb(void *arg) {
  req *r = arg;
  MHD_resume_connection(r->conn);
}

static void suspend_until(req *r, int64_t due) {
  MHD_suspend_connection(r->conn);
  lk_waker_at(r->srv->waker, due, resume_cb, r);
}

static void resume_or_gone_cb(void *arg, bool hup) {
  req *r = arg;
  if (hup) { /* r is left alone while suspended; the resume hands it back to the MHD thread */
    atomic_store(&r->client_gone, true);
    r->outcome = "client_gone"; /* also when MHD, not stream_reader, then sees the reset */
  }
  MHD_resume_connection(r->conn);
}

/* A response stream's pause (a stall, a slow body's interval): MHD does not watch a suspended
 * connection's socket, so without this a client that left would hold its connection, its slot
 * in the connection and per-client limits and the drain until the pause ended (up to 1 h). The
 * waker watches the socket and resumes at once when the client hangs up; the stream then ends.
 * The effect was applied before the stream began, so nothing else changes. */
static void suspend_stream(req *r, int64_t due) {
  MHD_suspend_connection(r->conn);
  lk_waker_at_fd(r->srv->waker, due, r->fd, resume_or_gone_cb, r);
}

/* Body of partial_stall and slow_body responses, produced as MHD asks for it. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
  req *r = cls;
  lk_server *s = r->srv;
  if (atomic_load(&s->hard_stop)) {
    tl_quiet_close = true;
    return MHD_CONTENT_READER_END_WITH_ERROR;
  }
  if (atomic_load(&r->client_gone)) { /* hung up during a pause: nobody to send the rest to */
    tl_quiet_close = true;
    return MHD_CONTENT_READER_END_WITH_ERROR;
  }
  size_t len = r->resp.body_len;
  if (pos >= len)
    return MHD_CONTENT_READER_END_OF_STREAM;
  if (r->plan.act.kind == LK_FAULT_PARTIAL_STALL) {
    if (pos < r->stream_limit) {
      size_t n = r->stream_limit - (size_t)pos;
      n = n < max ? n : max;
      memcpy(buf, r->resp.body + pos, n);
      return (ssize_t)n;
    }
    if (!r->stream_waiting) {
      r->stream_waiting = true;
      r->outcome = "stall";
      suspend_stream(r, lk_sat_add(lk_now_ns(), r->plan.act.stall_ns));
      return 0;
    }
    tl_quiet_close = true; /* the stall is over: drop the connection */
    return MHD_CONTENT_READER_END_WITH_ERROR;
  }
  if (r->stream_can_send) {
    r->stream_can_send = false;
    size_t n = len - (size_t)pos;
    n = n < max ? n : max;
    n = n < r->plan.act.chunk ? n : r->plan.act.chunk;
    memcpy(buf, r->resp.body + pos, n);
    return (ssize_t)n;
  }
  r->stream_can_send = true; /* only this thread reads it; the waker just resumes */
  suspend_stream(r, lk_sat_add(lk_now_ns(), r->plan.act.interval_ns));
  return 0;
}

static enum MHD_Result send_streamed(req *r) {
  lk_resp *resp = &r->resp;
  if (resp->body_len == 0)
    return send_resp(r, resp);
  r->stream_limit = resp->body_len / 2;
  r->stream_can_send = true;
  r->outcome = r->plan.act.kind == LK_FAULT_PARTIAL_STALL ? "partial" : "slow";
  struct MHD_Response *m =
      MHD_create_response_from_callback(resp->body_len, 4096, stream_reader, r, NULL);
  return queue(r, m, resp);
}

static enum MHD_Result send_fault_status(req *r) {
  const lk_fault_action *a = &r->plan.act;
  resp_free(&r->resp);
  resp_error(&r->resp, a->status, "injected_fault", "status %d injected by fault rule %d",
             a->status, r->plan.rule_id);
  if (a->retry_after >= 0) {
    char v[64];
    if (a->retry_after_date)
      lk_http_date(lk_wall_ns() + a->retry_after * LK_NS_PER_S, v, sizeof v);
    else
      snprintf(v, sizeof v, "%lld", (long long)a->retry_after);
    resp_header(&r->resp, "Retry-After", v);
  }
  r->outcome = "fault";
  return send_resp(r, &r->resp);
}

static void release_claim(req *r) { idem_release(r); }

/* --- the steps ----------------------------------------------------------------------------- */

/* Sends what the handler (or the queue logic) produced, with the after-processing faults. */
static enum MHD_Result finish(req *r) {
  const lk_fault_action *a = &r->plan.act;
  release_claim(r);
  if (r->dropped) /* never ran: no after-processing fault applies to it */
    return send_resp(r, &r->resp);
  switch (a->kind) {
  case LK_FAULT_RESET_AFTER_PROCESSING: return do_reset(r);
  case LK_FAULT_CLOSE_AFTER_PROCESSING: return do_close(r);
  case LK_FAULT_STATUS: return send_fault_status(r); /* when=after: applied, then an error */
  case LK_FAULT_PARTIAL_STALL:
  case LK_FAULT_SLOW_BODY: return send_streamed(r);
  default: return send_resp(r, &r->resp);
  }
}

/* Health checks and metrics stay answerable under overload: they skip the queue. */
static bool needs_worker(const req *r) {
  return !r->replay && r->route != RT_HEALTHZ && r->route != RT_METRICS;
}

static enum MHD_Result run(req *r) {
  lk_server *s = r->srv;
  const lk_fault_action *a = &r->plan.act;
  if (atomic_load(&s->hard_stop)) {
    release_claim(r);
    return send_error(r, 503, "shutting_down", "the server is shutting down");
  }
  if (a->kind == LK_FAULT_STATUS && !a->after) {
    release_claim(r);
    return send_fault_status(r);
  }
  if (lk_deadline_expired(r->dl, lk_now_ns())) {
    release_claim(r);
    atomic_fetch_add(&s->stats.deadline_expired_in_flight, 1);
    return send_error(r, 504, "deadline_exceeded", "the request's deadline passed before it ran");
  }
  if (!needs_worker(r)) {
    if (!r->replay) {
      resp_init(&r->resp, 500);
      handle(r, &r->resp);
    }
    return finish(r);
  }
  bool idle;
  int slot = pool_reserve(s, &idle);
  if (slot <= 0) {
    release_claim(r);
    if (slot < 0)
      return send_error(r, 503, "shutting_down", "the server is shutting down");
    atomic_fetch_add(&s->stats.dropped_queue_full, 1);
    lk_series_add(&s->series, LK_SERIES_DROPPED, lk_now_ns());
    resp_free(&r->resp);
    resp_error(&r->resp, 503, "overloaded", "the admission queue is full (%zu requests)",
               s->cfg.queue_limit);
    resp_header(&r->resp, "Retry-After", "1");
    r->outcome = "overloaded";
    return send_resp(r, &r->resp);
  }
  atomic_fetch_add(&s->stats.admitted, 1);
  /* Suspended before it is pushed, so a worker can never resume it before the suspension. */
  r->ph = PH_QUEUED;
  MHD_suspend_connection(r->conn);
  pool_push(s, r, idle);
  return MHD_YES;
}

static enum MHD_Result after_body(req *r) {
  lk_server *s = r->srv;
  if (r->too_big) {
    char msg[96];
    snprintf(msg, sizeof msg, "the body exceeds %zu bytes", s->cfg.max_body);
    return send_error(r, 413, "body_too_large", msg);
  }
  if (r->plan.act.kind == LK_FAULT_RESET_AFTER_READ)
    return do_reset(r);
  if (r->plan.act.kind == LK_FAULT_CLOSE)
    return do_close(r);
  resp_init(&r->resp, 500);
  if (!input_parse(r, &r->resp))
    return send_resp(r, &r->resp);
  if (r->write && r->keyed) {
    idem_fingerprint(r->method, r->path, r->body, r->body_len, r->fp);
    if (idem_begin(r, &r->resp) == IDEM_ANSWERED)
      return send_resp(r, &r->resp);
  }
  if (r->plan.delay_ns > 0) {
    int64_t now = lk_now_ns();
    int64_t due = lk_sat_add(now, r->plan.delay_ns);
    if (r->dl.at < due)
      due = r->dl.at; /* work in progress stops at the deadline */
    r->ph = PH_DELAY;
    suspend_until(r, due);
    return MHD_YES;
  }
  return run(r);
}

/* Parses the propagated deadline headers; false (and a 400 in early) on a malformed value. */
static bool parse_deadline(req *r, const lk_head *h) {
  static const struct {
    lk_hdr hdr;
    const char *name;
    int (*parse)(const char *, size_t, int64_t *);
  } forms[] = {{LK_HDR_LINKD_DEADLINE, "Linkd-Deadline", lk_ms_timeout_parse},
               {LK_HDR_GRPC_TIMEOUT, "grpc-timeout", lk_grpc_timeout_parse}};
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    const char *v = h->v[forms[i].hdr];
    if (!v)
      continue;
    size_t n = strlen(v);
    /* The core's plain parser takes 1-18 digits. Longer runs of digits are well formed too:
     * leading zeros are dropped, and a number still longer than 18 digits is, like an 18-digit
     * one that overflows, beyond int64 ns, which means no deadline (docs/libraryd.md). */
    bool long_ms = forms[i].hdr == LK_HDR_LINKD_DEADLINE && n > 18 && strspn(v, "0123456789") == n;
    if (long_ms) {
      while (n > 1 && *v == '0')
        v++, n--;
    }
    int64_t ns;
    int rc = n > 18 && long_ms ? LK_ERANGE : forms[i].parse(v, n, &ns);
    if (rc == LK_ERANGE)
      continue; /* well formed but beyond int64 ns: no deadline to speak of */
    if (rc != LK_OK) {
      resp_error(&r->early, 400, "bad_deadline", "%s: '%.40s' is not a valid value", forms[i].name,
                 v);
      return false;
    }
    r->dl = lk_deadline_min(r->dl, lk_deadline_after(r->t0, ns));
  }
  return true;
}

static bool visible_ascii(const char *v, size_t max) {
  size_t n = 0;
  for (; v[n]; n++)
    if (v[n] < 0x21 || v[n] > 0x7e || n >= max)
      return false;
  return n > 0;
}

static bool key_required(const lk_server *s, const req *r) {
  for (size_t i = 0; i < s->n_require_key; i++)
    if (lk_route_match(s->require_key[i], r->method, r->path))
      return true;
  return false;
}

/* Caller identity, key and request id of a write; false (and early filled) on bad input. */
static bool parse_identity(req *r, const lk_head *h) {
  const char *api = h->v[LK_HDR_API_KEY];
  const char *ten = h->v[LK_HDR_TENANT];
  if (idem_tenant(api, ten, r->tenant, sizeof r->tenant) != LK_OK) {
    resp_error(&r->early, 400, "bad_tenant",
               "X-Tenant must be 1-%d of [A-Za-z0-9._-]; X-API-Key must not be empty",
               IDEM_TENANT_MAX);
    return false;
  }
  const char *rid = h->v[LK_HDR_REQUEST_ID];
  if (rid) {
    if (!visible_ascii(rid, IDEM_KEY_LEN_MAX)) {
      resp_error(&r->early, 400, "bad_request_id", "X-Request-Id must be 1-%d visible ASCII",
                 IDEM_KEY_LEN_MAX);
      return false;
    }
    snprintf(r->request_id, sizeof r->request_id, "%s", rid);
  }
  if (!r->write)
    return true;
  const char *key = h->v[LK_HDR_IDEMPOTENCY_KEY];
  if (key) {
    if (idem_key_parse(key, r->key, sizeof r->key) != LK_OK) {
      resp_error(&r->early, 400, "bad_idempotency_key",
                 "Idempotency-Key must be 1-%d visible ASCII characters (a token or a quoted "
                 "string)",
                 IDEM_KEY_LEN_MAX);
      return false;
    }
    r->keyed = true;
  } else if (key_required(r->srv, r)) {
    atomic_fetch_add(&r->srv->stats.key_missing, 1);
    resp_error(&r->early, 400, "idempotency_key_required",
               "%s %s requires an Idempotency-Key header", r->method, r->path);
    return false;
  }
  return true;
}

/* The path of an absolute-form target ("http://host/books/1", RFC 9112 3.2.2: a server MUST
 * accept it, as a proxy sends it), or the target as it is. */
static const char *origin_path(const char *url) {
  size_t n = strncasecmp(url, "http://", 7) == 0 ? 7 : strncasecmp(url, "https://", 8) == 0 ? 8 : 0;
  if (n == 0)
    return url;
  const char *slash = strchr(url + n, '/');
  return slash ? slash : "/";
}

static enum MHD_Result on_head(req *r, const char *url, const char *method, const char *version) {
  lk_server *s = r->srv;
  resp_init(&r->early, 500);
  snprintf(r->method, sizeof r->method, "%s", method);
  lk_head h;
  if (!lk_head_check(r->conn, method, url, version, &h, &r->early))
    return send_resp(r, &r->early); /* before the route and the fault draw: no effect at all */
  url = origin_path(url); /* after the check, which compares the target with the raw line */
  if (strlen(url) >= sizeof r->path) {
    lk_head_free(&h);
    resp_error(&r->early, 414, "uri_too_long", "the path exceeds %d bytes", LK_PATH_MAX - 1);
    return send_resp(r, &r->early);
  }
  snprintf(r->path, sizeof r->path, "%s", url);
  if (h.v[LK_HDR_LINKD_ATTEMPT])
    snprintf(r->attempt, sizeof r->attempt, "%s", h.v[LK_HDR_LINKD_ATTEMPT]);
  input_content_type(r, h.v[LK_HDR_CONTENT_TYPE]);
  bool ok = route_parse(r, &r->early) && route_method_ok(r, &r->early);
  /* /metrics is how the faults' effect is watched: never failed by them (`route=*`) */
  if (ok && r->route == RT_METRICS)
    memset(&r->plan, 0, sizeof r->plan);
  else
    lk_faults_decide(s->faults, r->method, r->path, &r->plan);
  if (r->plan.act.kind != LK_FAULT_NONE || r->plan.delay_ns)
    atomic_fetch_add(&s->stats.faults_injected, 1);
  if (r->plan.act.kind == LK_FAULT_RESET_BEFORE_READ) {
    lk_head_free(&h);
    return do_reset(r);
  }
  ok = ok && parse_deadline(r, &h);
  if (ok && lk_deadline_expired(r->dl, r->t0)) {
    atomic_fetch_add(&s->stats.deadline_expired_on_arrival, 1);
    resp_error(&r->early, 504, "deadline_exceeded", "the request arrived after its deadline");
    ok = false;
  }
  ok = ok && parse_identity(r, &h);
  if (ok && h.content_length >= 0 && (uint64_t)h.content_length > s->cfg.max_body) {
    resp_error(&r->early, 413, "body_too_large", "the body exceeds %zu bytes", s->cfg.max_body);
    ok = false;
  }
  lk_head_free(&h);
  if (!ok) /* answered now: MHD skips (and closes after) any body still to come */
    return send_resp(r, &r->early);
  r->ph = PH_BODY;
  return MHD_YES;
}

static void append_body(req *r, const char *data, size_t n) {
  size_t max = r->srv->cfg.max_body;
  if (r->too_big || n > max - r->body_len) {
    r->too_big = true;
    return;
  }
  if (r->body_len + n > r->body_cap) {
    size_t cap = r->body_cap ? r->body_cap : 1024;
    while (cap < r->body_len + n)
      cap *= 2;
    if (cap > max)
      cap = max;
    char *b = realloc(r->body, cap);
    if (!b) {
      r->too_big = true;
      return;
    }
    r->body = b;
    r->body_cap = cap;
  }
  memcpy(r->body + r->body_len, data, n);
  r->body_len += n;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  lk_server *s = cls;
  req *r = *con_cls;
  tl_quiet_close = false;
  if (!r) {
    r = calloc(1, sizeof *r);
    if (!r)
      return MHD_NO;
    *con_cls = r;
    r->srv = s;
    r->conn = conn;
    r->fd = conn_fd(r);
    r->t0 = lk_now_ns();
    lk_series_add(&s->series, LK_SERIES_ARRIVALS, r->t0);
    r->dl = lk_deadline_none();
    r->outcome = "ok";
    atomic_fetch_add(&s->active, 1);
    atomic_fetch_add(&s->stats.requests, 1);
    return on_head(r, url, method, version);
  }
  if (*upload_size) {
    if (r->ph == PH_BODY)
      append_body(r, upload, *upload_size);
    *upload_size = 0;
    return MHD_YES;
  }
  switch (r->ph) {
  case PH_BODY: lk_head_body_done(conn); return after_body(r);
  case PH_DELAY: return run(r);
  case PH_WORKED: return finish(r);
  case PH_QUEUED:
  case PH_HEAD:
  case PH_DONE:
  default: return MHD_YES;
  }
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)conn;
  lk_server *s = cls;
  req *r = *con_cls;
  tl_quiet_close = false;
  if (!r)
    return;
  lk_head_request_done(conn);
  release_claim(r);
  int64_t dur = lk_now_ns() - r->t0;
  access_log(r, toe);
  server_metrics_request(s, r, dur);
  free(r->body);
  resp_free(&r->resp);
  resp_free(&r->early);
  free(r);
  *con_cls = NULL;
  atomic_fetch_sub(&s->active, 1);
}

/* --- lifecycle ----------------------------------------------------------------------------- */

static int listen_on(const char *addr, int port, int *bound, char *err, size_t cap) {
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  socklen_t len;
  struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
  if (port < 0 || port > 65535) {
    snprintf(err, cap, "port %d out of range", port);
    return -1;
  }
  if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons((uint16_t)port);
    len = sizeof *v4;
  } else if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons((uint16_t)port);
    len = sizeof *v6;
  } else {
    snprintf(err, cap, "'%s' is not an IPv4 or IPv6 address", addr);
    return -1;
  }
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    snprintf(err, cap, "socket: %s", strerror(errno));
    return -1;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 1024) != 0) {
    snprintf(err, cap, "bind/listen %s:%d: %s", addr, port, strerror(errno));
    close(fd);
    return -1;
  }
  len = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &len);
  *bound = ntohs(ss.ss_family == AF_INET ? v4->sin_port : v6->sin6_port);
  return fd;
}

static void *purge_main(void *arg) {
  lk_server *s = arg;
  pthread_setname_np(pthread_self(), "lk-purge");
  int64_t every = s->cfg.purge_interval_ns;
  if (every <= 0) {
    every = s->cfg.idem_retention_ns / 4;
    if (every > 60 * LK_NS_PER_S)
      every = 60 * LK_NS_PER_S;
    if (every < 100 * LK_NS_PER_MS)
      every = 100 * LK_NS_PER_MS;
  }
  pthread_mutex_lock(&s->purge_mu);
  while (!s->purge_stop) {
    int64_t due = lk_now_ns() + every;
    struct timespec ts = {(time_t)(due / LK_NS_PER_S), (long)(due % LK_NS_PER_S)};
    pthread_cond_timedwait(&s->purge_cv, &s->purge_mu, &ts);
    if (s->purge_stop || lk_now_ns() < due)
      continue;
    pthread_mutex_unlock(&s->purge_mu);
    lk_store_idem_purge(s->store, lk_wall_ns() - s->cfg.idem_retention_ns, NULL);
    pthread_mutex_lock(&s->purge_mu);
  }
  pthread_mutex_unlock(&s->purge_mu);
  return NULL;
}

static int config_error(lk_server *s, int rc) {
  lk_server_free(s);
  return rc;
}

int lk_server_start(const lk_server_config *cfg, lk_store *store, lk_server **out, char *err,
                    size_t errcap) {
  char scratch[256];
  if (!err || !errcap) {
    err = scratch;
    errcap = sizeof scratch;
  }
  err[0] = '\0';
  *out = NULL;
  lk_server *s = calloc(1, sizeof *s);
  if (!s)
    return LK_ENOMEM;
  s->cfg = *cfg;
  s->cfg.faults = NULL;
  s->cfg.require_key = NULL;
  s->cfg.addr = s->cfg.admin_addr = NULL; /* not kept */
  s->cfg.work = NULL;                     /* parsed into s->pool.work */
  s->store = store;
  s->port = s->admin_port = -1;
  pthread_mutex_init(&s->purge_mu, NULL);
  pthread_mutex_init(&s->pool.mu, NULL);
  s->started_ns = lk_now_ns();
  lk_series_init(&s->series, s->started_ns);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->purge_cv, &ca);
  pthread_condattr_destroy(&ca);
  atomic_store(&s->stopped, true); /* until the daemons run: shutdown has nothing to drain */
  if (s->cfg.threads == 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    s->cfg.threads = n > 0 ? (unsigned)n : 1;
  }
  if (s->cfg.max_body == 0 || s->cfg.idem_retention_ns <= 0 || s->cfg.connection_limit == 0) {
    snprintf(err, errcap, "max_body, idem retention and connection limit must be positive");
    return config_error(s, LK_ECONFIG);
  }
  s->faults = lk_faults_new(cfg->seed);
  s->inflight = lk_inflight_new();
  s->waker = lk_waker_new();
  s->require_key = calloc(cfg->n_require_key + 1, sizeof *s->require_key);
  if (!s->faults || !s->inflight || !s->waker || !s->require_key)
    return config_error(s, LK_ENOMEM);
  for (size_t i = 0; i < cfg->n_faults; i++) {
    lk_fault_rule rule;
    char msg[160];
    if (lk_fault_rule_parse(cfg->faults[i], &rule, msg, sizeof msg) != LK_OK) {
      snprintf(err, errcap, "fault '%.200s': %s", cfg->faults[i], msg);
      return config_error(s, LK_ECONFIG);
    }
    if (lk_faults_add(s->faults, &rule) < 0) {
      snprintf(err, errcap, "too many fault rules");
      return config_error(s, LK_ECONFIG);
    }
  }
  for (size_t i = 0; i < cfg->n_require_key; i++) {
    if (lk_route_pattern_check(cfg->require_key[i]) != LK_OK) {
      snprintf(err, errcap, "bad route pattern '%.200s' (want 'METHOD /path/*')",
               cfg->require_key[i]);
      return config_error(s, LK_ECONFIG);
    }
    s->require_key[i] = strdup(cfg->require_key[i]);
    if (!s->require_key[i])
      return config_error(s, LK_ENOMEM);
    s->n_require_key = i + 1;
  }
  if (server_metrics_init(s) != LK_OK)
    return config_error(s, LK_ENOMEM);
  int prc = pool_start(s, cfg->work, err, errcap);
  if (prc != LK_OK)
    return config_error(s, prc);
  s->guard = lk_guard_new(s->cfg.head_timeout_ns, s->cfg.body_timeout_ns,
                          (int64_t)s->cfg.idle_timeout_s * LK_NS_PER_S,
                          s->cfg.log == LK_LOG_OFF ? -1 : s->cfg.log_fd);
  if (!s->guard)
    return config_error(s, LK_ENOMEM);

  int fd = listen_on(cfg->addr ? cfg->addr : "127.0.0.1", cfg->port, &s->port, err, errcap);
  if (fd < 0)
    return config_error(s, LK_ESYS);
  /* poll(2), not epoll: with epoll and a thread pool, libmicrohttpd 0.9.75 sometimes misses the
   * EOF of a client that half-closes after a partial body, leaving the request open until the
   * idle timeout (seen in test_routes' garbage test); poll is level-triggered and does not. */
  unsigned flags =
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
                          s, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED,
                          on_completed, s, MHD_OPTION_THREAD_POOL_SIZE, s->cfg.threads,
                          MHD_OPTION_CONNECTION_LIMIT, s->cfg.connection_limit,
                          MHD_OPTION_CONNECTION_TIMEOUT, s->cfg.idle_timeout_s,
                          MHD_OPTION_PER_IP_CONNECTION_LIMIT, s->cfg.per_client_limit,
                          MHD_OPTION_NOTIFY_CONNECTION, lk_head_notify_connection, s->guard,
                          MHD_OPTION_URI_LOG_CALLBACK, lk_head_uri_log, s, MHD_OPTION_END);
  if (!s->d) {
    close(fd);
    snprintf(err, errcap, "libmicrohttpd failed to start");
    return config_error(s, LK_ESYS);
  }
  atomic_store(&s->stopped, false);
  if (cfg->admin_port >= 0) {
    const char *aa = cfg->admin_addr ? cfg->admin_addr : (cfg->addr ? cfg->addr : "127.0.0.1");
    int afd = listen_on(aa, cfg->admin_port, &s->admin_port, err, errcap);
    if (afd < 0)
      return config_error(s, LK_ESYS);
    s->admin_guard = lk_guard_new(0, 0, 0, s->cfg.log == LK_LOG_OFF ? -1 : s->cfg.log_fd);
    if (!s->admin_guard) {
      close(afd);
      return config_error(s, LK_ENOMEM);
    }
    s->admin = MHD_start_daemon(
        MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL, admin_handler, s,
        MHD_OPTION_EXTERNAL_LOGGER, admin_mhd_log, s, MHD_OPTION_LISTEN_SOCKET, afd,
        MHD_OPTION_NOTIFY_COMPLETED, admin_completed, s, MHD_OPTION_CONNECTION_TIMEOUT, 30u,
        MHD_OPTION_NOTIFY_CONNECTION, lk_head_notify_connection, s->admin_guard,
        MHD_OPTION_URI_LOG_CALLBACK, lk_head_uri_log, s, MHD_OPTION_END);
    if (!s->admin) {
      close(afd);
      snprintf(err, errcap, "libmicrohttpd failed to start the admin listener");
      return config_error(s, LK_ESYS);
    }
  }
  if (pthread_create(&s->purge_thread, NULL, purge_main, s) != 0) {
    snprintf(err, errcap, "cannot start the purge thread");
    return config_error(s, LK_ESYS);
  }
  s->purge_started = true;
  *out = s;
  return LK_OK;
}

int lk_server_port(const lk_server *s) { return s->port; }
int lk_server_admin_port(const lk_server *s) { return s->admin_port; }

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int lk_server_shutdown(lk_server *s) {
  if (atomic_exchange(&s->stopped, true))
    return 0;
  atomic_store(&s->draining, true);
  /* Stop accepting: the listening socket is handed back and closed, so new connections are
   * refused while accepted ones finish. */
  MHD_socket lfd = MHD_quiesce_daemon(s->d);
  if (lfd != MHD_INVALID_SOCKET)
    close(lfd);
  int64_t until = lk_sat_add(lk_now_ns(), s->cfg.drain_timeout_ns);
  while (atomic_load(&s->active) > 0 && lk_now_ns() < until)
    sleep_ms(5);
  int left = atomic_load(&s->active);
  /* Past the drain budget: wake every suspended request so it ends now (503 / dropped
   * stream), then wait briefly for them, since MHD must not stop with a suspended connection. */
  atomic_store(&s->hard_stop, true);
  lk_waker_flush(s->waker);
  until = lk_now_ns() + 2 * LK_NS_PER_S;
  while (atomic_load(&s->active) > 0 && lk_now_ns() < until)
    sleep_ms(5);
  /* The workers answer whatever is still queued (503) and exit before MHD stops, so no
   * connection stays suspended and no worker resumes one on a stopped daemon. */
  pool_stop(s);
  MHD_stop_daemon(s->d);
  s->d = NULL;
  if (s->admin) {
    MHD_stop_daemon(s->admin);
    s->admin = NULL;
  }
  if (s->purge_started) {
    pthread_mutex_lock(&s->purge_mu);
    s->purge_stop = true;
    pthread_cond_signal(&s->purge_cv);
    pthread_mutex_unlock(&s->purge_mu);
    pthread_join(s->purge_thread, NULL);
    s->purge_started = false;
  }
  return left;
}

void lk_server_free(lk_server *s) {
  if (!s)
    return;
  lk_server_shutdown(s);
  if (s->d)
    MHD_stop_daemon(s->d);
  if (s->admin)
    MHD_stop_daemon(s->admin);
  if (s->purge_started) {
    pthread_mutex_lock(&s->purge_mu);
    s->purge_stop = true;
    pthread_cond_signal(&s->purge_cv);
    pthread_mutex_unlock(&s->purge_mu);
    pthread_join(s->purge_thread, NULL);
  }
  pool_stop(s);
  lk_guard_free(s->guard); /* after MHD stopped: no connection uses it */
  lk_guard_free(s->admin_guard);
  lk_waker_free(s->waker);
  lk_inflight_free(s->inflight);
  lk_faults_free(s->faults);
  server_metrics_free(s);
  for (size_t i = 0; i < s->n_require_key; i++)
    free(s->require_key[i]);
  free(s->require_key);
  pthread_cond_destroy(&s->purge_cv);
  pthread_mutex_destroy(&s->purge_mu);
  pthread_mutex_destroy(&s->pool.mu);
  lk_series_destroy(&s->series);
  free(s);
}
