/* SPDX-License-Identifier: MIT */
/* One proxied request: route, deadline in, policy, endpoint per attempt, the call on lk_http, the
 * answer downstream with the gateway's headers. */
#include "gwp.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Headers that are about one connection, not the request (RFC 9110 7.6.1), or that the HTTP
 * layer sets itself per attempt; never forwarded as the caller sent them. */
static bool hop_by_hop(const char *name) {
  /* asked for every header of every request and response: the length rules out most names
   * before any case-insensitive comparison */
  static const struct {
    const char *s;
    size_t n;
  } names[] = {
#define HOP(x) {x, sizeof x - 1}
      HOP("Connection"),
      HOP("Keep-Alive"),
      HOP("Proxy-Connection"),
      HOP("Transfer-Encoding"),
      HOP("TE"),
      HOP("Trailer"),
      HOP("Upgrade"),
      HOP("Content-Length"),
      HOP("Expect"),
      HOP("Proxy-Authorization"),
      HOP("Linkd-Deadline"),
      HOP("grpc-timeout"),
      HOP("Linkd-Attempt"),
      HOP(LK_HTTP_RETRIED_HEADER),
#undef HOP
  };
  size_t n = strlen(name);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (names[i].n == n && strcasecmp(name, names[i].s) == 0)
      return true;
  return false;
}

/* Whether `name` is one of the comma-separated tokens of a Connection header value: those
 * headers belong to the hop too (RFC 9110 7.6.1). */
static bool named_by_connection(const char *conn, const char *name) {
  if (!conn)
    return false;
  size_t n = strlen(name);
  for (const char *p = conn; *p;) {
    while (*p == ' ' || *p == '\t' || *p == ',')
      p++;
    const char *e = p;
    while (*e && *e != ',' && *e != ' ' && *e != '\t')
      e++;
    if ((size_t)(e - p) == n && strncasecmp(p, name, n) == 0)
      return true;
    p = e;
  }
  return false;
}

static bool method_idempotent(unsigned m) {
  return m == HTTP_GET || m == HTTP_HEAD || m == HTTP_OPTIONS || m == HTTP_PUT ||
         m == HTTP_DELETE || m == HTTP_TRACE;
}

/* Linkd-Deadline's milliseconds: any number of ASCII digits (the header size limit bounds them),
 * as lk_ms_timeout_parse() reads them, except that a number of more than its 18 digits is still
 * a number: LK_ERANGE, too large for the clock, as a 18-digit one over INT64_MAX ns is (it was
 * LK_EPARSE, so 19 digits were answered 400 while 18 nines were capped). Leading zeros do not
 * count: 0...0100 is 100. Empty, a sign, a space or any other byte is LK_EPARSE. */
static int ms_deadline_parse(const char *v, size_t len, int64_t *ns) {
  size_t z = 0;
  while (z + 1 < len && v[z] == '0')
    z++;
  if (len - z <= 18)
    return lk_ms_timeout_parse(v + z, len - z, ns);
  for (size_t i = z; i < len; i++)
    if (v[i] < '0' || v[i] > '9')
      return LK_EPARSE;
  return LK_ERANGE;
}

/* The caller's deadline: Linkd-Deadline (ms) first, else grpc-timeout. 1: found (*ns, may be
 * 0), 0: none, -1: malformed (*why says which). A well-formed value too large for int64 ns (any
 * Linkd-Deadline of more than 18 significant digits; 8 digits of hours are valid gRPC) is the
 * longest deadline: the route's cap decides. grpc-timeout keeps the gRPC spec's "at most 8
 * digits": a 9th is malformed. */
static int caller_deadline(const gwp_req *r, int64_t *ns, const char **why) {
  /* one deadline each: two could disagree, and which one an upstream would read is anyone's
   * guess (RFC 9110 5.3: a singleton field sent twice) */
  int nd = 0, ng = 0;
  for (size_t i = 0; i + 1 < r->nh; i += 2) {
    nd += strcasecmp(r->head + r->hoff[i], "Linkd-Deadline") == 0;
    ng += strcasecmp(r->head + r->hoff[i], "grpc-timeout") == 0;
  }
  if (nd > 1 || ng > 1) {
    *why = nd > 1 ? "Linkd-Deadline sent more than once" : "grpc-timeout sent more than once";
    return -1;
  }
  const char *v = gwp_req_header(r, "Linkd-Deadline");
  int rc;
  if (v) {
    rc = ms_deadline_parse(v, strlen(v), ns);
    *why = "malformed Linkd-Deadline (digits of milliseconds)";
  } else if ((v = gwp_req_header(r, "grpc-timeout"))) {
    rc = lk_grpc_timeout_parse(v, strlen(v), ns);
    *why = "malformed grpc-timeout (1 to 8 digits and one of H M S m u n)";
  } else {
    return 0;
  }
  if (rc == LK_ERANGE)
    *ns = INT64_MAX;
  return rc == LK_OK || rc == LK_ERANGE ? 1 : -1;
}

static const char *attempt_url(void *ctx, int attempt) {
  gwp_req *r = ctx;
  const lk_gw_cluster *cl = r->route->cluster;
  int idx = 0;
  if (lk_gw_cluster_pick(cl, gwp_now(), &r->srv->rng.base, r->tried, &idx) != LK_OK)
    idx = 0;
  r->tried |= UINT64_C(1) << idx;
  if (attempt >= 1 && attempt <= GWP_MAX_TRACKED)
    r->ep[attempt - 1] = idx;
  r->nattempts = attempt;
  const char *base = cl->endpoints[idx].base_url;
  size_t need = strlen(base) + strlen(r->path) + 1;
  if (need > r->url_cap) {
    char *n = realloc(r->url, need);
    if (!n)
      return NULL; /* the request's own URL (the first endpoint) */
    r->url = n;
    r->url_cap = need;
  }
  strcpy(r->url, base);
  strcat(r->url, r->path);
  return r->url;
}

/* A streamed body, pulled by the HTTP layer as it writes: what has arrived, else wait (and read
 * from the client again if its buffer was full). */
static long body_pull(void *ctx, char *buf, size_t cap) {
  gwp_req *r = ctx;
  size_t avail = r->body_len - r->body_off;
  if (avail == 0) {
    if (!r->conn || r->body_done)
      return LK_HTTP_BODY_ABORT; /* the client went away before its whole body */
    gwp_conn_resume_body(r->conn);
    return LK_HTTP_BODY_WAIT;
  }
  size_t n = avail < cap ? avail : cap;
  memcpy(buf, r->body + r->body_off, n);
  r->body_off += n;
  if (r->conn)
    gwp_conn_resume_body(r->conn);
  return (long)n;
}

static void on_attempt(void *ctx, const lk_http_attempt_info *a) {
  gwp_req *r = ctx;
  if (a->phase == LK_PHASE_QUEUED || a->number < 1 || a->number > GWP_MAX_TRACKED ||
      a->number > r->nattempts)
    return; /* refused by a protection: no endpoint was asked */
  const lk_gw_cluster *cl = r->route->cluster;
  int idx = r->ep[a->number - 1];
  lk_gw_outcome o = lk_gw_outcome_of(a->failure, a->status);
  if (lk_gw_cluster_report(cl, idx, gwp_now(), a->duration, o))
    gwp_log(r->srv, LK_GW_LOG_WARN, "cluster %s: endpoint %s ejected after %s", cl->name,
            cl->endpoints[idx].key, lk_failure_name(a->failure));
  /* a retry the policy wanted but the body could not be sent again */
  if (a->failure != LK_F_NONE && r->streamed &&
      (strcmp(a->reason, "streamed body not replayable") == 0 ||
       (!r->streaming && a->decision.reason == LK_REASON_ATTEMPTS && a->request_sent)))
    r->retry_wanted = true;
}

/* What the gateway answers when no attempt got a response. */
static int status_without_response(int err, lk_failure kind) {
  switch (err) {
  case LK_EDEADLINE: return 504;
  case LK_EBREAKER_OPEN:
  case LK_ERATE_LIMITED:
  case LK_EBULKHEAD_FULL:
  case LK_EBUDGET: return 503;
  default: break;
  }
  switch (kind) {
  case LK_F_CONNECT_TIMEOUT:
  case LK_F_READ_TIMEOUT:
  case LK_F_FIRST_BYTE_TIMEOUT:
  case LK_F_IDLE_TIMEOUT:
  case LK_F_WRITE_TIMEOUT:
  case LK_F_DNS_TIMEOUT:
  case LK_F_TLS_TIMEOUT:
  case LK_F_POOL_TIMEOUT:
  case LK_F_DEADLINE_EXCEEDED: return 504;
  default: return 502;
  }
}

/* Appends "Name: value\r\n" to a growing buffer; false on no memory. */
typedef struct sbuf {
  char *p;
  size_t len, cap;
  bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
  if (b->oom)
    return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 512;
    while (cap < b->len + n + 1)
      cap *= 2;
    char *q = realloc(b->p, cap);
    if (!q) {
      b->oom = true;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void sb_hdr(sbuf *b, const char *name, const char *value) {
  sb_put(b, name, strlen(name));
  sb_put(b, ": ", 2);
  sb_put(b, value, strlen(value));
  sb_put(b, "\r\n", 2);
}

int gwp_attempts_made(const lk_http_result *res) {
  size_t natt = 0;
  const lk_http_attempt_info *att = res ? lk_http_result_attempts(res, &natt) : NULL;
  int made = 0;
  for (size_t i = 0; i < natt; i++)
    made += att[i].phase != LK_PHASE_QUEUED;
  return made;
}

/* Whether the call's last upstream attempt timed out at the deadline: its timeout was
 * min(cap, remaining) = remaining, and it ran that long. A timeout the attempt timeout or a phase
 * timeout set, with deadline left, is not the deadline's doing. */
static bool cut_by_deadline(const gwp_req *r, const lk_http_attempt_info *att, size_t natt) {
  while (natt > 0 && att[natt - 1].phase == LK_PHASE_QUEUED)
    natt--;
  if (natt == 0)
    return false;
  const lk_http_attempt_info *a = &att[natt - 1];
  return a->timeout < r->pol->http.attempt_timeout && a->duration >= a->timeout;
}

static void finish(gwp_req *r, lk_http_result *res) {
  gwp_server *s = r->srv;
  int err = lk_http_result_err(res);
  const lk_http_response *resp = lk_http_result_response(res);
  size_t natt = 0;
  const lk_http_attempt_info *att = lk_http_result_attempts(res, &natt);
  r->final = lk_http_result_failure(res);
  r->stop = lk_http_result_stop(res);
  int64_t now = gwp_now();

  sbuf h = {0};
  int status;
  const char *body = NULL;
  size_t body_len = 0;
  /* A body cut short (the connection broke, or it outgrew max_response_body) is no answer:
   * forwarded with its status it would pass for the whole resource. */
  if (resp && !resp->complete)
    resp = NULL;
  if (resp) {
    status = resp->status;
    const char *conn_hdr = lk_http_response_header(resp, "Connection");
    for (size_t i = 0; i < resp->header_count; i++)
      if (!hop_by_hop(resp->headers[i].name) &&
          !named_by_connection(conn_hdr, resp->headers[i].name))
        sb_hdr(&h, resp->headers[i].name, resp->headers[i].value);
    body = resp->body;
    body_len = resp->body_len;
    if (r->method == HTTP_HEAD) {
      const char *cl = lk_http_response_header(resp, "Content-Length");
      /* digits only: the value goes into our head as is */
      if (cl && *cl && strspn(cl, "0123456789") == strlen(cl) && strlen(cl) <= 19)
        r->head_length = cl;
    }
  } else {
    status = status_without_response(err, r->final);
    sb_hdr(&h, "Content-Type", "text/plain");
  }
  char num[32];
  if (err != LK_OK) {
    /* this tier is done retrying: a caller that honours it does not retry again; N is what
     * went upstream */
    snprintf(num, sizeof num, "%d", gwp_attempts_made(res));
    sb_hdr(&h, LK_HTTP_RETRIED_HEADER, num);
  }
  const char *key = lk_http_result_idempotency_key(res);
  if (r->key_injected && key)
    sb_hdr(&h, "Linkd-Idempotency-Key-Injected", key);
  if (r->cfg->listen.generation_header) {
    char gen[24];
    gen[gwp_u64_dec(gen, r->cfg->generation)] = '\0';
    sb_hdr(&h, "Linkd-Config-Generation", gen);
  }
  if (h.oom) {
    free(h.p);
    lk_http_result_free(res);
    r->status = 500;
    gwp_respond_error(r, 500, true, NULL);
    return;
  }

  int made = gwp_attempts_made(res);
  lk_gw_request_obs obs = {
      /* a client gone before the answer gets none (status class "none") */
      .status = r->conn ? status : 0,
      .failure = r->final,
      .attempts = made,
      .refused = lk_gw_refusal_of(err, att, natt),
      .duration = lk_sat_sub(now, r->t_start),
      /* the first attempt starts once the bulkhead slot and the limiter token are there */
      .queue_wait = (r->pol->bulkhead_on || r->pol->limiter_on) && natt > 0 ? att[0].start : -1,
      /* answered 504 for it: the deadline stopped the call with a 504 to send, or its last
       * attempt timed out at the deadline (a POST cut short is "not retryable"); the last
       * response of a call the deadline ended (a 503 with no time left for its retry) is sent
       * as it came, and an attempt timeout with deadline left is the upstream's slowness */
      .deadline_exceeded =
          status == 504 && (err == LK_EDEADLINE || (!resp && cut_by_deadline(r, att, natt))),
      .streamed = r->streamed,
      .streamed_not_retried = r->retry_wanted,
      .key_injected = r->key_injected && key,
  };
  lk_gw_route_observe(r->route, r->version, &obs);
  lk_gw_rollback why;
  if (lk_gw_route_record(r->route, r->version, lk_gw_request_bad(status), &why))
    gwp_log(s, LK_GW_LOG_WARN,
            "route %s: candidate policy %s rolled back: bad %.2f%% (%llu/%llu) vs stable %.2f%% "
            "(%llu/%llu)",
            r->route->name, why.version, why.next_rate, (unsigned long long)why.next_bad,
            (unsigned long long)why.next_n, why.stable_rate, (unsigned long long)why.stable_bad,
            (unsigned long long)why.stable_n);
  r->status = status;
  gwp_access_log(s, r, res);
  if (resp) {
    gwp_respond(r, status, resp->reason, h.p, body, body_len, res);
  } else {
    char msg[160];
    int n = snprintf(msg, sizeof msg, "%d %s: %s\n", status, gwp_status_text(status),
                     r->stop ? r->stop : lk_failure_name(r->final));
    lk_http_result_free(res);
    gwp_respond(r, status, NULL, h.p, msg, (size_t)n, NULL);
  }
  free(h.p);
}

static void on_done(void *ud, lk_http_result *res) { finish(ud, res); }

/* A request the gateway answers itself (no upstream call), still counted and logged; `why` is
 * the one line of the body after the status, and the access log's stop. */
static void answer_local(gwp_req *r, int status, const char *extra, const char *why) {
  r->status = status;
  r->final = status == 504 ? LK_F_DEADLINE_EXCEEDED : LK_F_NONE;
  r->stop = why;
  if (r->route) {
    /* a 504 here is a deadline gone on arrival: refused before any attempt */
    lk_gw_request_obs obs = {.status = status,
                             .failure = r->final,
                             .refused = status == 504 ? LK_GW_REFUSED_DEADLINE : LK_GW_REFUSED_NONE,
                             .duration = lk_sat_sub(gwp_now(), r->t_start),
                             .queue_wait = -1,
                             .deadline_exceeded = status == 504};
    lk_gw_route_observe(r->route, r->version, &obs);
    lk_gw_route_record(r->route, r->version, lk_gw_request_bad(status), NULL);
  } else {
    lk_gw_runtime_observe_unrouted(r->srv->rt, status);
  }
  gwp_access_log(r->srv, r, NULL);
  char body[256], hdr[128];
  int n = snprintf(body, sizeof body, "%d %s: %s\n", status, gwp_status_text(status), why);
  if (n < 0 || (size_t)n >= sizeof body)
    n = (int)sizeof body - 1;
  snprintf(hdr, sizeof hdr, "Content-Type: text/plain\r\n%s", extra ? extra : "");
  gwp_respond(r, status, NULL, hdr, body, (size_t)n, NULL);
}

void gwp_proxy_dispatch(gwp_req *r) {
  gwp_server *s = r->srv;
  r->cfg = lk_gw_config_ref(s->cfg);
  const char *url = r->head; /* the request target */
  const char *host = gwp_req_header(r, "Host");
  char hostbuf[LK_GW_HOST_MAX];
  if (r->method == HTTP_CONNECT) { /* a tunnel is a forward proxy's business, not a route's */
    /* what follows may be the tunnel's bytes, not a request */
    if (r->conn)
      r->conn->close_after = true;
    answer_local(r, 501, NULL, "CONNECT is not supported: this is a reverse proxy");
    return;
  }
  if (url[0] != '/') {
    /* absolute form (RFC 9112 3.2.2): the authority in it is the host */
    struct http_parser_url u;
    http_parser_url_init(&u);
    if (http_parser_parse_url(url, strlen(url), 0, &u) != 0 || !(u.field_set & (1 << UF_HOST)) ||
        u.field_data[UF_HOST].len >= sizeof hostbuf) {
      answer_local(r, 400, NULL, "request target without a usable host");
      return;
    }
    memcpy(hostbuf, url + u.field_data[UF_HOST].off, u.field_data[UF_HOST].len);
    hostbuf[u.field_data[UF_HOST].len] = '\0';
    host = hostbuf;
    url = (u.field_set & (1 << UF_PATH)) ? url + u.field_data[UF_PATH].off : "/";
  }
  r->path = url;
  r->route = lk_gw_config_match(r->cfg, host, url);
  if (!r->route) {
    answer_local(r, 404, NULL, "no route for this host and path");
    return;
  }
  r->version = lk_gw_route_choose(r->route, &s->rng.base);
  r->pol = lk_gw_route_policy(r->route, r->version);
  const lk_gw_policy *pol = r->pol;

  /* the deadline in: the caller's, capped by the route; gone already -> 504 at once */
  int64_t d = pol->deadline;
  int64_t in = 0;
  const char *bad = NULL;
  int got = caller_deadline(r, &in, &bad);
  if (got < 0) {
    answer_local(r, 400, NULL, bad);
    return;
  }
  if (got > 0) {
    if (in <= 0) {
      answer_local(r, 504, LK_HTTP_RETRIED_HEADER ": 0\r\n", "deadline expired on arrival");
      return;
    }
    d = in < pol->deadline_cap ? in : pol->deadline_cap;
  }
  /* the time already spent reading the request counts against it */
  int64_t spent = lk_sat_sub(gwp_now(), r->t_start);
  if (got > 0 && spent >= d) {
    answer_local(r, 504, LK_HTTP_RETRIED_HEADER ": 0\r\n",
                 "deadline expired while the request was read");
    return;
  }
  if (got > 0)
    d -= spent;
  r->deadline = d;
  r->deadline_at = lk_sat_add(gwp_now(), d);

  const lk_gw_cluster *cl = r->route->cluster;
  size_t need = strlen(cl->endpoints[0].base_url) + strlen(url) + 1;
  r->url = malloc(need);
  if (!r->url) {
    answer_local(r, 500, NULL, "out of memory");
    return;
  }
  r->url_cap = need;
  strcpy(r->url, cl->endpoints[0].base_url);
  strcat(r->url, url);
  lk_http_request *hr = NULL;
  int made = lk_http_request_create(http_method_str(r->method), r->url, &hr);
  if (made == LK_ENOMEM) {
    answer_local(r, 500, NULL, "out of memory");
    return;
  }
  if (made != LK_OK) {
    answer_local(r, 400, NULL, "request target not usable in a URL");
    return;
  }
  lk_http_request_set_verbatim(hr, true); /* forward what the client sent, add no Accept */
  bool has_key = false;
  const char *conn_hdr = gwp_req_header(r, "Connection");
  for (size_t i = 0; i + 1 < r->nh; i += 2) {
    const char *name = r->head + r->hoff[i], *value = r->head + r->hoff[i + 1];
    if (hop_by_hop(name) || named_by_connection(conn_hdr, name))
      continue;
    bool removed = false;
    for (size_t k = 0; k < pol->n_headers; k++)
      if (strcasecmp(pol->headers[k].name, name) == 0)
        removed = true; /* replaced or removed by the route */
    if (removed)
      continue;
    if (strcasecmp(name, "Idempotency-Key") == 0)
      has_key = true;
    if (lk_http_request_add_header(hr, name, value) != LK_OK) {
      lk_http_request_free(hr);
      answer_local(r, 400, NULL,
                   strcasecmp(name, "Idempotency-Key") == 0
                       ? "Idempotency-Key: one key of 1 to 255 visible ASCII characters"
                       : "a header the gateway cannot forward");
      return;
    }
  }
  for (size_t k = 0; k < pol->n_headers; k++)
    if (pol->headers[k].value)
      lk_http_request_add_header(hr, pol->headers[k].name, pol->headers[k].value);
  if (r->streaming)
    lk_http_request_set_body_stream(hr, (size_t)r->content_length, body_pull, r);
  else if (r->body_len > 0 || (r->method != HTTP_GET && r->method != HTTP_HEAD && r->body))
    lk_http_request_set_body_ref(hr, r->body ? r->body : "", r->body_len);

  lk_http_policy p = pol->http;
  p.deadline = d;
  p.deadline_at = lk_deadline_none();
  p.attempt_url = attempt_url;
  p.attempt_url_ctx = r;
  p.on_attempt = on_attempt;
  p.on_attempt_ctx = r;
  p.rng = &s->rng.base;
  p.clock = NULL;
  /* a caller's key is the call's key (it is forwarded as a header); otherwise inject, or what
   * the route's idempotency-key setting says; a key the gateway made is always said */
  if (pol->idem == LK_GW_IDEM_INJECT && !has_key && !method_idempotent(r->method))
    p.idem_mode = LK_IDEM_AUTO;
  r->key_injected = !has_key && p.idem_mode != LK_IDEM_NONE;
  if (r->streaming) {
    /* sent as it arrives: the HTTP layer retries it only if none of it was taken */
    r->streamed = true;
  } else if (r->body_len > s->cfg->listen.body_buffer) {
    /* a chunked body that outgrew the replay buffer: it was read whole (bounded by max-body),
     * and goes in one attempt only (counted, never silently) */
    r->streamed = true;
    lk_retry_config rc = p.retry.cfg;
    rc.max_attempts = 1;
    lk_retry_policy_init(&p.retry, &rc, NULL);
  }
  int rc = lk_http_submit(s->client, hr, &p, NULL, on_done, r);
  if (r->streaming)
    r->hr = hr; /* on_body tells it when more of the body is there; freed with r */
  else
    lk_http_request_free(hr);
  if (rc != LK_OK) {
    gwp_log(s, LK_GW_LOG_ERROR, "route %s: the call could not start: %s", r->route->name,
            lk_strerror(rc));
    answer_local(r, 500, NULL, "the upstream call could not start");
  }
}
