/* SPDX-License-Identifier: MIT */
/* One attempt on libcurl: easy-handle options, the evidence callbacks and the per-attempt
 * headers (Idempotency-Key, Linkd-Deadline, grpc-timeout, Linkd-Attempt). */
#include "call_internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

static int64_t now_of(const lk_try *t) { return t->k->clock->now(t->k->clock); }

/* "<prefix><decimal>" into buf (large enough); the per-attempt headers are built on every
 * attempt, so this avoids snprintf's cost on the hot path. */
static void fmt_header(char *buf, const char *prefix, uint64_t v) {
  size_t n = strlen(prefix);
  memcpy(buf, prefix, n);
  char tmp[24];
  int i = 0;
  do {
    tmp[i++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (i)
    buf[n++] = tmp[--i];
  buf[n] = '\0';
}

/* A socket is created once the name is resolved: DNS is over, TCP connect starts. */
static int on_sockopt(void *ud, curl_socket_t fd, curlsocktype purpose) {
  lk_try *t = ((lk_easy *)ud)->t;
  lk_att *a = &t->att;
  if (purpose == CURLSOCKTYPE_IPCXN && !a->sock_seen) {
    a->sock_seen = true;
    a->t_sock = now_of(t);
  }
  if (purpose == CURLSOCKTYPE_IPCXN) /* one of them becomes the connection (conn_tag_set) */
    a->fds[a->nfds++ % 4] = (int)fd;
  return CURL_SOCKOPT_OK;
}

/* OpenSSL's context is made once TCP is connected, just before the handshake: the evidence that
 * the connect phase ended and the TLS phase began (libcurl stamps CONNECT_TIME only once the
 * whole connection, TLS included, is up). */
static CURLcode on_ssl_ctx(CURL *e, void *sslctx, void *ud) {
  (void)e, (void)sslctx;
  lk_try *t = ((lk_easy *)ud)->t;
  if (!t->att.tls_started) {
    t->att.tls_started = true;
    t->att.t_tls = now_of(t);
  }
  return CURLE_OK;
}

/* --- libcurl's sockets by connection ------------------------------------------------------- */
/* libcurl 7.88 takes a pooled connection with unread bytes for alive (cf_socket_conn_is_alive
 * peeks for a FIN only) and does not say, while a transfer runs, which socket it reuses
 * (CURLINFO_ACTIVESOCKET is the handle's last connection). The pre-request callback gets the
 * connection's addresses: a new connection's socket is filed under them, and a reused one is
 * looked up by them. */

static uint64_t conn_key(const char *ip, int port, const char *local_ip, int local_port) {
  uint64_t h = 1469598103934665603u; /* FNV-1a */
  for (const char *s = ip; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211u;
  h = (h ^ (uint64_t)port) * 1099511628211u;
  for (const char *s = local_ip; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211u;
  h = (h ^ (uint64_t)local_port) * 1099511628211u;
  return h ? h : 1;
}

/* Files the new connection's socket: the one of the attempt's whose local port is the
 * connection's (happy eyeballs may have opened two). */
static void conn_tag_set(lk_try *t, uint64_t key, int local_port) {
  lk_http_client *c = t->k->cl;
  lk_att *a = &t->att;
  if (!c->conn_tags && !(c->conn_tags = calloc(LK_CONN_TAGS, sizeof *c->conn_tags)))
    return;
  for (int i = 0; i < 4 && i < a->nfds; i++) {
    int fd = a->fds[(a->nfds - 1 - i) % 4];
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
      continue;
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ss;
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;
    int port = ss.ss_family == AF_INET ? ntohs(s4->sin_port) : ntohs(s6->sin6_port);
    if (port == local_port) {
      c->conn_tags[key % LK_CONN_TAGS] = (lk_conn_tag){key, fd};
      return;
    }
  }
  if (c->conn_tags[key % LK_CONN_TAGS].key == key) /* an older connection's: not this one's */
    c->conn_tags[key % LK_CONN_TAGS].key = 0;
}

/* Whether bytes wait unread on the reused connection filed under `key`. */
static bool stray_bytes(const lk_try *t, uint64_t key) {
  const lk_conn_tag *g = t->k->cl->conn_tags ? &t->k->cl->conn_tags[key % LK_CONN_TAGS] : NULL;
  if (!g || g->key != key)
    return false; /* not filed (or its slot was taken): unchecked */
  char b;
  return recv(g->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

/* Runs just before libcurl writes the request. A second run within one attempt is libcurl
 * re-sending the request on a fresh connection after a reused one died. */
static int on_prereq(void *ud, char *ip, char *local_ip, int port, int local_port) {
  lk_try *t = ((lk_easy *)ud)->t;
  lk_call *k = t->k;
  lk_att *a = &t->att;
  int64_t now = now_of(t);
  /* plain http only: over TLS, records may come unasked (session tickets) */
  bool plain = strncasecmp(t->url, "http:", 5) == 0 && ip && local_ip;
  uint64_t key = plain ? conn_key(ip, port, local_ip, local_port) : 0;
  if (++a->prereq_calls == 1) {
    a->reused = !a->sock_seen;
    /* Bytes already waiting on a pooled connection came before the request, so they answer
     * nothing it asks (a body longer than its Content-Length, a 408 to an idle connection, a
     * forged response), yet libcurl 7.88 would read them as this request's answer. The request
     * is not written (an attempt not sent: retried for any method) and libcurl closes the
     * connection, as after any aborted transfer. */
    if (plain && a->reused && stray_bytes(t, key))
      return CURL_PREREQFUNC_ABORT;
    if (plain && !a->reused)
      conn_tag_set(t, key, local_port);
  } else {
    a->resends++;
    lk_call_metrics_resend_detected(k->pol.metrics);
    if (k->unsafe && k->pol.resend_guard == LK_RESEND_ABORT) {
      a->resend_aborted = true;
      return CURL_PREREQFUNC_ABORT;
    }
    a->sent = false; /* a new write of the whole request starts */
    if (plain)
      conn_tag_set(t, key, local_port); /* on a new connection */
  }
  a->t_prereq = now;
  if (k->req->body_len == 0) {
    /* nothing but headers: they are handed to the kernel right after this callback; a failed
     * write shows up as CURLE_SEND_ERROR, which the classifier treats as not sent */
    a->sent = true;
    a->t_sent = now;
  }
  return CURL_PREREQFUNC_OK;
}

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow) {
  (void)dltotal, (void)dlnow, (void)ultotal;
  lk_try *t = ((lk_easy *)ud)->t;
  lk_att *a = &t->att;
  a->uploaded = ulnow;
  if (a->prereq_calls > 0 && !a->sent && ulnow >= (curl_off_t)t->k->req->body_len) {
    a->sent = true;
    a->t_sent = now_of(t);
  }
  return 0;
}

static void got_bytes(lk_try *t, size_t n) {
  lk_att *a = &t->att;
  a->got_bytes = true;
  if (t->k->pol.idle_timeout > 0) /* the idle timer is the only reader of t_last */
    a->t_last = now_of(t);
  a->rx_bytes += n;
}

/* The final head is in, before libcurl takes a byte of the body: its status line and framing
 * are checked as the native transport checks them (refusing the bytes ends the transfer with
 * CURLE_WRITE_ERROR, and libcurl never pools the connection). */
static bool final_head_ok(lk_try *t) {
  lk_resp *r = &t->cur;
  lk_att *a = &t->att;
  /* Plain http speaks HTTP/1.0 or 1.1 only; libcurl 7.88 also takes "HTTP/2 200" (and a
   * version-less "HTTP 200", which leaves no status here) from a server that never spoke
   * HTTP/2, and would read a body framed by whatever follows */
  bool version_ok = r->version == 10 || r->version == 11 || strncasecmp(t->url, "http:", 5) != 0;
  bool too_big = false;
  size_t max = t->k->pol.max_response_body;
  /* compressed: a body to decode (its Content-Encoding) gets its decoder now; the limit counts
   * decoded bytes, so a declared length (of the encoded ones) is not held against it */
  if (t->k->pol.compressed && r->status_seen && r->status >= 200 && r->status != 204 &&
      r->status != 304 && !t->k->req->head) {
    int rc = lk__decoder_new(r, &t->dec);
    if (rc == LK_ENOMEM) {
      a->oom = true;
      return false;
    }
    if (rc != LK_OK) {
      a->body_junk = true;
      return false;
    }
    if (t->dec)
      max = SIZE_MAX;
  }
  if (!r->status_seen || r->status == 0 || !version_ok ||
      lk__resp_head_check(r, t->k->req->head, max, &too_big) != LK_F_NONE) {
    a->head_junk = true;
    return false;
  }
  if (too_big) {
    a->too_big = true;
    return false;
  }
  return true;
}

static size_t on_header(char *buf, size_t size, size_t n, void *ud) {
  lk_try *t = ((lk_easy *)ud)->t;
  lk_att *a = &t->att;
  lk_resp *r = &t->cur;
  size_t len = size * n;
  got_bytes(t, len);
  /* LK_HTTP_HEAD_MAX, counted as libhttp-parser counts it on the native transport: every byte
   * of a head, afresh for each head (an interim one, then the trailers). libcurl's own limits
   * (100 KiB per line, 300 KiB in all in Debian's 7.88) are higher, and its total is reported
   * as a receive error, retried as a cut-short body. */
  a->head_bytes += len;
  if (a->head_bytes > LK_HTTP_HEAD_MAX) {
    a->head_too_big = true;
    return 0;
  }
  size_t l = len;
  while (l && (buf[l - 1] == '\n' || buf[l - 1] == '\r'))
    l--;
  bool blank = l == 0;
  if (blank)
    a->head_bytes = 0;
  bool was_done = r->headers_done;
  if (!lk__resp_header_line(r, buf, len)) {
    a->oom = true;
    return 0;
  }
  if (!blank || was_done)
    return len; /* a line of the head, or a trailer */
  if (r->status >= 100 && r->status < 200 && r->status != 101) {
    lk__resp_reset(r); /* an interim head is no response; the final one follows */
    return len;
  }
  return final_head_ok(t) ? len : 0;
}

static size_t on_body(char *buf, size_t size, size_t n, void *ud) {
  lk_try *t = ((lk_easy *)ud)->t;
  size_t len = size * n;
  got_bytes(t, len);
  if (t->dec) {
    int rc =
        lk__decoder_write(t->dec, buf, len, &t->cur, t->k->pol.max_response_body, &t->att.too_big);
    if (rc == LK_OK)
      return len;
    if (rc == LK_EPARSE)
      t->att.body_junk = true;
    else if (rc == LK_ENOMEM)
      t->att.oom = true;
    return 0; /* CURLE_WRITE_ERROR */
  }
  if (!lk__resp_body(&t->cur, buf, len, t->k->pol.max_response_body, &t->att.too_big)) {
    if (!t->att.too_big)
      t->att.oom = true;
    return 0; /* CURLE_WRITE_ERROR */
  }
  return len;
}

/* A streamed body: the caller's function fills libcurl's buffer, or pauses the transfer. */
static size_t on_stream_read(char *buf, size_t size, size_t n, void *ud) {
  lk_call *k = ((lk_easy *)ud)->t->k;
  lk_http_request *r = k->req;
  long got = r->stream(r->stream_ctx, buf, size * n);
  if (got == LK_HTTP_BODY_WAIT) {
    r->stream_paused = true;
    return CURL_READFUNC_PAUSE;
  }
  if (got < 0 || (size_t)got > size * n)
    return CURL_READFUNC_ABORT;
  r->stream_read += (uint64_t)got;
  return (size_t)got;
}

/* A connection's socket is closed: an external loop that asked (close_fn) drops its watcher
 * first. The connection remembers the handle that opened it, whose `client` outlives it. */
static int on_close_socket(void *ud, curl_socket_t fd) {
  lk_http_client *c = ud;
  c->cfg.close_fn(c->cfg.loop_ud, (int)fd);
  return close(fd);
}

#define SET(opt, val)                                                                              \
  do {                                                                                             \
    if (curl_easy_setopt(e, opt, val) != CURLE_OK)                                                 \
      return LK_ENOMEM;                                                                            \
  } while (0)

int lk__easy_init(lk_easy *x) {
  CURL *e = x->h;
  SET(CURLOPT_PRIVATE, (void *)x);
  SET(CURLOPT_NOSIGNAL, 1L);
  SET(CURLOPT_SOCKOPTFUNCTION, on_sockopt);
  SET(CURLOPT_SOCKOPTDATA, (void *)x);
  SET(CURLOPT_PREREQFUNCTION, on_prereq);
  SET(CURLOPT_PREREQDATA, (void *)x);
  SET(CURLOPT_DNS_CACHE_TIMEOUT, -1L); /* see curl_setup */
  SET(CURLOPT_XFERINFOFUNCTION, on_progress);
  SET(CURLOPT_XFERINFODATA, (void *)x);
  SET(CURLOPT_HEADERFUNCTION, on_header);
  SET(CURLOPT_HEADERDATA, (void *)x);
  SET(CURLOPT_WRITEFUNCTION, on_body);
  SET(CURLOPT_WRITEDATA, (void *)x);
  /* A body comes as it was sent: the driver decodes one itself, and only when the policy asks
   * (lk_http_policy.compressed; a proxy forwards bytes as received) */
  SET(CURLOPT_HTTP_CONTENT_DECODING, 0L);
  x->errbuf[0] = '\0';
  SET(CURLOPT_ERRORBUFFER, x->errbuf);
  if (x->client && x->client->external && x->client->cfg.close_fn) {
    SET(CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
    SET(CURLOPT_CLOSESOCKETDATA, (void *)x->client);
  }
  /* An attempt abandoned while libcurl's threaded resolver is still in getaddrinfo (a resolver
   * that never answers) must not block the loop: without QUICK_EXIT, removing the transfer joins
   * the resolver thread, which glibc keeps for timeout x attempts (~10 s by default), far past
   * the deadline. With it (libcurl >= 7.87) the thread is detached and frees itself when
   * getaddrinfo returns. Built against an older libcurl, a lookup cannot be abandoned. */
#if LIBCURL_VERSION_NUM >= 0x075700
  SET(CURLOPT_QUICK_EXIT, 1L);
#endif
  /* TLS backends without this callback still work: the TLS phase is then told from
   * CONNECT_TIME / APPCONNECT_TIME only */
  if (curl_easy_setopt(e, CURLOPT_SSL_CTX_FUNCTION, on_ssl_ctx) == CURLE_OK)
    curl_easy_setopt(e, CURLOPT_SSL_CTX_DATA, (void *)x);
  return LK_OK;
}

void lk__tls_files_free(lk_tls_files *f) {
  if (f->pass)
    explicit_bzero(f->pass, strlen(f->pass));
  free(f->ca);
  free(f->cert);
  free(f->key);
  free(f->pass);
  memset(f, 0, sizeof *f);
}

static bool same_str(const char *a, const char *b) { return a ? b && strcmp(a, b) == 0 : !b; }

/* The pass phrase a handle gets: a certificate without one gets "", so that an encrypted key
 * fails the handshake instead of OpenSSL asking for a pass phrase on the terminal (its default
 * when no callback is set), which would block the loop. */
static const char *pass_of(const lk_http_policy *p) {
  return p->key_password ? p->key_password : p->client_cert ? "" : NULL;
}

static bool tls_files_same(const lk_tls_files *f, const lk_http_policy *p) {
  return same_str(f->ca, p->ca_file) && same_str(f->cert, p->client_cert) &&
         same_str(f->key, p->client_key) && same_str(f->pass, pass_of(p));
}

/* Sets the policy's TLS files on a handle whose files differ. */
static int tls_files_set(lk_easy *x, const lk_http_policy *p) {
  if (x->tls.ca && !p->ca_file) {
    /* Back to libcurl's default bundle. Setting CURLOPT_CAINFO to NULL would mean no bundle
     * at all, and the built-in default can only be read from 7.84 on: start the handle
     * afresh instead (rare: a handle pooled from a call with a CA file). Connections, DNS
     * and TLS session caches live in the multi handle and are kept. */
    curl_easy_reset(x->h);
    lk__tls_files_free(&x->tls);
    x->sig = 0;
    x->timeout_ms = 0;
    x->hdrs = NULL;
    x->dns_prune = false;
    int rc = lk__easy_init(x);
    if (rc != LK_OK)
      return rc;
  }
  struct {
    char **have;
    const char *want;
    CURLoption opt;
  } files[] = {{&x->tls.ca, p->ca_file, CURLOPT_CAINFO},
               {&x->tls.cert, p->client_cert, CURLOPT_SSLCERT},
               {&x->tls.key, p->client_key, CURLOPT_SSLKEY},
               {&x->tls.pass, pass_of(p), CURLOPT_KEYPASSWD}};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    if (same_str(*files[i].have, files[i].want))
      continue;
    char *copy = files[i].want ? strdup(files[i].want) : NULL;
    if (files[i].want && !copy)
      return LK_ENOMEM;
    /* libcurl keeps its own copy; NULL takes a certificate, key or pass phrase off */
    if (curl_easy_setopt(x->h, files[i].opt, copy) != CURLE_OK) {
      free(copy);
      return LK_ENOMEM;
    }
    if (files[i].have == &x->tls.pass && x->tls.pass)
      explicit_bzero(x->tls.pass, strlen(x->tls.pass));
    free(*files[i].have);
    *files[i].have = copy;
  }
  return LK_OK;
}

int lk__attempt_setup_call(lk_call *k, lk_easy *x) {
  CURL *e = x->h;
  const lk_http_request *r = k->req;
  const lk_http_policy *p = &k->pol;
  /* a streamed body cannot be written twice, so libcurl's silent re-send must not happen */
  /* nor may a connection made to a resolve entry's address serve another call, or a pooled one
   * made to what DNS says serve this call: libcurl's pool knows host names, not addresses */
  bool pinned = k->resolve != NULL;
  bool fresh = (k->unsafe && p->resend_guard == LK_RESEND_FRESH_CONNECTION) || r->stream || pinned;
  long maxage = (long)(p->pool_idle_lifetime / LK_NS_PER_S);
  unsigned sig = (unsigned)fresh | (unsigned)p->verify_tls << 1 |
                 (unsigned)(maxage & 0xffffff) << 2 | (unsigned)pinned << 26 |
                 (unsigned)p->compressed << 27;
  /* a pooled handle set up for the same request version and options needs nothing new */
  bool tls_same = tls_files_same(&x->tls, p);
  if (x->req_id == r->id && x->sig == sig && tls_same)
    return LK_OK;
  x->req_id = 0;
  if (!tls_same) {
    int rc = tls_files_set(x, p);
    if (rc != LK_OK)
      return rc;
  }
  SET(CURLOPT_URL, r->url);
  SET(CURLOPT_CUSTOMREQUEST, (char *)NULL);
  bool get = strcmp(r->method, "GET") == 0, head = strcmp(r->method, "HEAD") == 0;
  if (r->stream) {
    SET(CURLOPT_POSTFIELDS, (char *)NULL);
    SET(CURLOPT_POST, 1L);
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    SET(CURLOPT_READFUNCTION, on_stream_read);
    SET(CURLOPT_READDATA, (void *)x);
    if (strcmp(r->method, "POST") != 0)
      SET(CURLOPT_CUSTOMREQUEST, r->method);
  } else if (!r->body) {
    SET(CURLOPT_HTTPGET, 1L);
    if (head)
      SET(CURLOPT_NOBODY, 1L);
    else if (!get)
      SET(CURLOPT_CUSTOMREQUEST, r->method);
  } else {
    /* POSTFIELDS does not copy and lets libcurl rewind: the body is replayed on every attempt */
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    SET(CURLOPT_POSTFIELDS, (const char *)r->body);
    if (strcmp(r->method, "POST") != 0)
      SET(CURLOPT_CUSTOMREQUEST, r->method);
  }
  /* The progress callback only tells when a body was fully written (a request without one is
   * written once the pre-request callback returns). Enabled, it runs on every pass of libcurl's
   * state machine, so requests without a body go without it. */
  SET(CURLOPT_NOPROGRESS, r->body_len > 0 || r->stream ? 0L : 1L);
  SET(CURLOPT_FRESH_CONNECT, (long)fresh);
  SET(CURLOPT_FORBID_REUSE, (long)pinned);
  /* the codings the driver decodes (lk__decoder_new); a request's own Accept-Encoding wins */
  SET(CURLOPT_ACCEPT_ENCODING, p->compressed ? "gzip, deflate" : (char *)NULL);
  SET(CURLOPT_MAXAGE_CONN, maxage);
  SET(CURLOPT_SSL_VERIFYPEER, (long)p->verify_tls);
  SET(CURLOPT_SSL_VERIFYHOST, p->verify_tls ? 2L : 0L);
  x->req_id = r->id;
  x->sig = sig;
  return LK_OK;
}

static struct curl_slist *node(lk_try *t, char *data) {
  struct curl_slist *n = &t->nodes[t->nnodes++];
  n->data = data;
  n->next = NULL;
  return n;
}

void lk__attempt_prepare(lk_try *t) {
  lk_call *k = t->k;
  const lk_http_request *r = k->req;
  const lk_http_policy *p = &k->pol;
  lk_att *a = &t->att;

  /* An endpoint chosen per attempt (NULL: the request's own URL). */
  t->url = r->url;
  if (p->attempt_url) {
    const char *url = p->attempt_url(p->attempt_url_ctx, t->number);
    if (url)
      t->url = url;
  }

  /* Headers: the caller's, then the driver's, as a list built in place. */
  t->nnodes = 0;
  for (size_t i = 0; i < r->nheaders; i++)
    node(t, r->headers[i]);
  if (k->ua_line)
    node(t, k->ua_line);
  if (r->body_len > 0 && !r->has_expect)
    node(t, "Expect:"); /* no 100-continue round trip: the body follows the headers */
  /* "Name:" is libcurl's "do not send this header"; the native transport reads it the same way */
  if (r->verbatim && !r->has_accept)
    node(t, "Accept:");
  if (r->verbatim && !r->has_ctype && (r->body || r->stream))
    node(t, "Content-Type:");
  if (k->res->has_key && !k->key_in_request)
    node(t, k->h_idem);
  int64_t budget = a->timeout - p->deadline_reserve;
  if (budget < 0)
    budget = 0;
  if (p->send_deadline) {
    /* whole milliseconds, rounded down, but never 0 while time is left: 0 says "passed", and a
     * deadline-aware server would answer 504 without trying */
    uint64_t ms = (uint64_t)(budget / LK_NS_PER_MS);
    fmt_header(t->h_deadline, "Linkd-Deadline: ", ms == 0 && budget > 0 ? 1 : ms);
    node(t, t->h_deadline);
  }
  if (p->send_grpc_timeout) {
    memcpy(t->h_grpc, "grpc-timeout: ", 14);
    if (lk_grpc_timeout_format(budget, t->h_grpc + 14, sizeof t->h_grpc - 14) > 0)
      node(t, t->h_grpc);
  }
  if (p->send_attempt) {
    fmt_header(t->h_attempt, "Linkd-Attempt: ", (uint64_t)t->number);
    node(t, t->h_attempt);
  }
  if (p->traceparent) {
    /* a span of its own per attempt, so a trace shows each try (and each hedge) apart */
    lk_traceparent span;
    memcpy(t->h_trace, "traceparent: ", 13);
    if (lk_traceparent_child(p->traceparent, k->rng, &span) == LK_OK &&
        lk_traceparent_format(&span, t->h_trace + 13, sizeof t->h_trace - 13) > 0)
      node(t, t->h_trace);
  }
  for (size_t i = 1; i < t->nnodes; i++)
    t->nodes[i - 1].next = &t->nodes[i];
}

/* --- the libcurl transport ------------------------------------------------------------------ */

/* The attempt's handle: the call's own for the attempts the driver starts itself, a pooled one
 * for a hedge (another connection), set up for the call's request and options. */
static int curl_handle(lk_try *t) {
  lk_call *k = t->k;
  if (t->ex)
    return LK_OK;
  t->ex = lk__client_easy_get(k->cl);
  if (!t->ex)
    return LK_ENOMEM;
  t->easy = t->ex->h;
  /* the policy's TLS files were dropped at submit; the call's own handle keeps copies */
  const lk_tls_files *own = k->ex ? &k->ex->tls : NULL;
  k->pol.ca_file = own ? own->ca : NULL;
  k->pol.client_cert = own ? own->cert : NULL;
  k->pol.client_key = own ? own->key : NULL;
  k->pol.key_password = own && own->cert ? own->pass : NULL;
  int rc = lk__attempt_setup_call(k, t->ex);
  k->pol.ca_file = k->pol.client_cert = k->pol.client_key = k->pol.key_password = NULL;
  if (rc != LK_OK) {
    lk__client_easy_put(k->cl, t->ex);
    t->ex = NULL;
    t->easy = NULL;
    return LK_ENOMEM;
  }
  if (t == &k->first)
    k->ex = t->ex; /* a call that started on another transport keeps it from now on */
  return LK_OK;
}

/* Per attempt options. */
static int curl_setup(lk_try *t) {
  lk_call *k = t->k;
  CURL *e = t->easy;
  lk_att *a = &t->att;

  lk_easy *x = t->ex;

  /* libcurl's timer is a backstop 2 ms behind the driver's own, which know the phase (libcurl
   * rounds to whole ms and may fire up to 1 ms early). It covers the connect phase too: a
   * separate CURLOPT_CONNECTTIMEOUT_MS of the same value would only add a second expiry timer
   * to every transfer. Options are set only when they change (setopt is not free). */
  long ms = (long)(lk_sat_add(a->timeout, LK_NS_PER_MS - 1) / LK_NS_PER_MS) + 2;
  if (x->timeout_ms != ms) {
    SET(CURLOPT_TIMEOUT_MS, ms);
    x->timeout_ms = ms;
  }

  /* libcurl prunes its DNS cache on every transfer by walking the whole cache hash (71 buckets
   * in a multi handle, against 7 in the private one of curl_easy_perform): ~800 instructions
   * per request on a warm connection. Handles keep entries forever (-1) except for the first
   * transfer started each second, which prunes with libcurl's default lifetime (60 s), so a
   * name is still re-resolved once its entry is 60 s (at most 61 s) old. */
  lk_http_client *c = k->cl;
  bool prune = c->pass_now >= c->dns_prune_at;
  if (prune)
    c->dns_prune_at = c->pass_now + LK_SEC(1);
  if (prune != x->dns_prune) {
    SET(CURLOPT_DNS_CACHE_TIMEOUT, prune ? 60L : -1L);
    x->dns_prune = prune;
  }

  if (k->req->stream) {
    /* this attempt reads the stream; a pause left by an earlier attempt is lifted (driver state
     * kept in the request: a streamed request serves one call at a time) */
    k->req->stream_easy = e;
    k->req->stream_paused = false;
    curl_easy_pause(e, CURLPAUSE_CONT);
  }

  /* An endpoint chosen per attempt: the URL is set for this transfer only, and the handle's
   * cached request options are marked stale so the next call sets the request's URL again. */
  if (t->url != k->req->url) {
    SET(CURLOPT_URL, t->url);
    x->req_id = 0;
  }

  /* The call's resolve entries, in its own DNS cache, loaded again by every transfer (libcurl
   * reads CURLOPT_RESOLVE once after it is set); its connect-to entries, read by every
   * transfer. Both lists belong to the call; the pool takes them off (lk__client_easy_put). */
  if (k->resolve) {
    if (x->dns != k->dns) {
      SET(CURLOPT_SHARE, k->dns);
      x->dns = k->dns;
    }
    SET(CURLOPT_RESOLVE, k->resolve);
    x->resolve = true;
  }
  if (x->connect_to != k->connect_to) {
    SET(CURLOPT_CONNECT_TO, k->connect_to);
    x->connect_to = k->connect_to;
  }

  /* libcurl keeps the pointer and reads the list when the transfer starts; the list is rebuilt
   * in place (lk__attempt_prepare), so the same pointer needs no new setopt */
  struct curl_slist *list = t->nnodes ? t->nodes : NULL;
  if (x->hdrs != list) {
    SET(CURLOPT_HTTPHEADER, list);
    x->hdrs = list;
  }
  return LK_OK;
}

static int curl_start(lk_try *t) {
  if (curl_handle(t) != LK_OK)
    return LK_ENOMEM;
  t->ex->t = t;
  if (curl_setup(t) != LK_OK || curl_multi_add_handle(t->k->cl->multi, t->easy) != CURLM_OK)
    return LK_ENOMEM;
  return LK_OK;
}

/* A hedge's handle goes back to the pool (the next hedge may find another connection on
 * another); the call's own stays with it. */
static void curl_stop(lk_try *t) {
  lk_call *k = t->k;
  curl_multi_remove_handle(k->cl->multi, t->easy);
  if (k->req->stream) { /* the handle goes back to the pool: body_ready must not touch it */
    k->req->stream_easy = NULL;
    k->req->stream_paused = false;
  }
  if (t->hedge && t->ex) {
    lk__client_easy_put(k->cl, t->ex);
    t->ex = NULL;
    t->easy = NULL;
  }
}

static bool curl_connected(const lk_try *t) {
  curl_off_t conn_us = 0;
  curl_easy_getinfo(t->easy, CURLINFO_CONNECT_TIME_T, &conn_us);
  return conn_us != 0;
}

/* The info is read from the handle; a hedge gave its handle back at stop and has none. */
static void curl_facts(const lk_try *t, bool failed, lk_conn_facts *f) {
  const lk_call *k = t->k;
  const lk_att *a = &t->att;
  CURL *e = t->easy;
  memset(f, 0, sizeof *f);
  if (!e)
    return;
  curl_off_t conn_us = 0, app_us = 0;
  if (failed && a->prereq_calls == 0) {
    long oserr = 0;
    curl_easy_getinfo(e, CURLINFO_OS_ERRNO, &oserr);
    f->os_errno = (int)oserr;
    curl_easy_getinfo(e, CURLINFO_CONNECT_TIME_T, &conn_us);
    curl_easy_getinfo(e, CURLINFO_APPCONNECT_TIME_T, &app_us);
  }
  f->connected = conn_us > 0;
  f->tls_done = app_us > 0;
  /* libcurl tells a TLS alert only in its message: OpenSSL's reason strings for one read from
   * the peer are "tlsv13 alert ...", "tlsv1 alert ..." and "sslv3 alert ..." */
  f->peer_alert = failed && t->ex &&
                  (strstr(t->ex->errbuf, "tlsv13 alert ") ||
                   strstr(t->ex->errbuf, "tlsv1 alert ") || strstr(t->ex->errbuf, "sslv3 alert "));
  curl_off_t req_size = 0;
  long req_hdr = 0;
  curl_easy_getinfo(e, CURLINFO_REQUEST_SIZE, &req_hdr);
  if (k->req->body_len > 0) /* no body: nothing is uploaded beyond the head */
    curl_easy_getinfo(e, CURLINFO_SIZE_UPLOAD_T, &req_size);
  f->bytes_sent = (uint64_t)req_hdr;
  if ((uint64_t)req_size > f->bytes_sent)
    f->bytes_sent = (uint64_t)req_size;
}

const lk_transport lk__curl_transport = {
    .name = "curl",
    .start = curl_start,
    .stop = curl_stop,
    .connected = curl_connected,
    .facts = curl_facts,
};
