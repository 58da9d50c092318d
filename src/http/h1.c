/* SPDX-License-Identifier: MIT */
/* The native HTTP/1.1 transport (lk_http_client_config.transport = LK_HTTP_TRANSPORT_NATIVE):
 * an attempt's I/O done on the client's external loop itself, without libcurl. Plain http://
 * to an IP literal or localhost only; every other attempt runs on libcurl (lk__h1_target).
 *
 * One connection per attempt in flight, taken from a keep-alive pool per origin (bounded, idle
 * age from pool_idle_lifetime) or connected afresh (non-blocking connect). The request head and
 * a buffered body go out in one sendmsg; the response is parsed by libhttp-parser (1xx skipped;
 * HEAD, 204 and 304 have no body; Content-Length, chunked or close-delimited bodies), its final
 * head checked like libcurl's before a body byte is taken (lk__resp_head_check). A streamed request
 * body is pulled a chunk at a time as the socket takes it. A pooled connection stays watched for
 * reading, so the loop's own read event tells when the server closed it or sent what nobody asked
 * for; a non-blocking peek when it is taken from the pool covers an event the loop has not
 * delivered yet (no poll). A connection is reused only after a complete response that allows it
 * (HTTP/1.1 without Connection: close, or 1.0 with keep-alive), with no byte beyond it, and never
 * after an error, a timeout or a cancellation.
 *
 * The attempt's evidence goes where libcurl's callbacks put it (lk_att, t->cur) and its end is
 * told with the CURLcode libcurl gives for the same evidence, so classify.c decides both
 * transports' failure kinds. As libcurl does, a request whose reused connection gives nothing
 * (the server closed it while the request was on its way) is written again once on a new
 * connection, and the resend guard (lk_http_policy.resend_guard) applies to that second write. */
#include "call_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <http_parser.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define H1_ORIGINS_MAX 256     /* origins with a pool; connections to others are not kept */
#define H1_IDLE_PER_ORIGIN 256 /* idle connections kept per origin */
#define H1_IDLE_TOTAL 1024     /* idle connections kept per client (max_pool when set) */
#define H1_READ_BUF 16384
#define H1_STREAM_BUF 16384 /* a streamed body is written in chunks of at most this */

/* The head limit is libhttp-parser's own (HTTP_MAX_HEADER_SIZE, counted per head), which the
 * libcurl transport counts alike (LK_HTTP_HEAD_MAX, attempt.c) */
_Static_assert(HTTP_MAX_HEADER_SIZE == LK_HTTP_HEAD_MAX, "one head limit for both transports");

typedef struct h1_origin h1_origin;

typedef enum h1_state {
  H1_CONNECTING, /* connect() in progress: waiting for writable */
  H1_WRITING,    /* the request is (partly) written */
  H1_READING,    /* the whole request is written; the response is awaited */
  H1_IDLE,       /* in the pool */
  H1_FAILED      /* failed inside start: the end is reported by the next pass (lk__h1_flush) */
} h1_state;

typedef struct h1_conn {
  struct h1_conn *next, *prev; /* the origin's idle list, or the client's failed list */
  h1_origin *origin;           /* NULL: not pooled (too many origins) */
  int fd;
  h1_state state;
  lk_try *t;          /* the attempt using it (CONNECTING .. READING, FAILED) */
  int watched;        /* events last asked of socket_fn */
  bool connected;     /* the TCP handshake completed */
  bool reused;        /* it served a request before this one */
  int os_errno;       /* connect() failure */
  int fail_code;      /* FAILED: the CURLcode to report */
  int64_t idle_since; /* system ns */
  /* the request: head (owned buffer) + body (the request's, not copied) */
  char *head;
  size_t head_len, head_cap;
  const unsigned char *body;
  size_t body_len;
  size_t written; /* bytes of head + body written */
  /* a streamed body (lk_http_request_set_body_stream): pulled into sbuf a chunk at a time, the
   * chunk being `body` */
  bool streaming;
  bool ready; /* on the client's ready list: the stream has bytes again */
  char *sbuf;
  uint64_t stream_left; /* declared bytes not pulled yet */
  struct h1_conn *rnext;
  /* the response */
  http_parser parser;
  char *fld; /* the header being parsed: name pieces, then value pieces */
  size_t fld_len, fld_cap, name_len;
  bool in_value;
  bool msg_done;
  bool in_msg;  /* a head has begun since the last interim one ended */
  bool interim; /* an interim (1xx) head ended */
  int proto;    /* bytes of the head's "HTTP/" checked (proto_ok) */
  bool bad;     /* an error of the driver's own (no memory, body too big) stopped the parse */
} h1_conn;

struct h1_origin {
  struct sockaddr_storage addr;
  socklen_t alen;
  h1_conn *idle; /* most recently used first */
  int nidle;
};

struct lk_h1 {
  lk_http_client *c;
  h1_origin *origins;
  size_t norigins;
  h1_conn **by_fd; /* every open connection by descriptor */
  size_t cap_fd;
  h1_conn *failed; /* FAILED connections whose attempt has yet to hear */
  h1_conn *ready;  /* paused streams whose body has bytes again (lk__h1_body_ready) */
  int nidle;
  int idle_max;
  http_parser_settings settings;
  char rbuf[H1_READ_BUF];
};

/* --- the target of an attempt ---------------------------------------------------------------- */

/* "http://" host [":" port] [path]: host an IPv4 literal, a bracketed IPv6 literal or
 * "localhost" (127.0.0.1: libcurl resolves it to the loopback too), no user info, no bytes a
 * request line cannot carry. Fills the address, the Host header's value (as libcurl sends it:
 * the URL's host, its port only when not 80) and the path. */
bool lk__h1_target(lk_try *t) {
  const char *u = t->url;
  if (strncasecmp(u, "http://", 7) != 0)
    return false;
  const char *h = u + 7, *p = h;
  char host[64];
  size_t hl;
  const char *hs = h; /* the host as written, for Host */
  if (*p == '[') {
    const char *e = strchr(p, ']');
    if (!e || (size_t)(e - p - 1) >= sizeof host)
      return false;
    hl = (size_t)(e - p - 1);
    memcpy(host, p + 1, hl);
    p = e + 1;
  } else {
    while (*p && *p != ':' && *p != '/' && *p != '?' && *p != '#')
      p++;
    hl = (size_t)(p - h);
    if (hl == 0 || hl >= sizeof host)
      return false;
    memcpy(host, h, hl);
  }
  host[hl] = '\0';
  size_t host_shown = (size_t)(p - hs);
  long port = 80;
  if (*p == ':') {
    p++;
    if (*p >= '0' && *p <= '9') {
      port = 0;
      while (*p >= '0' && *p <= '9' && port <= 65535)
        port = port * 10 + (*p++ - '0');
      if (port < 1 || port > 65535)
        return false;
    }
  }
  if (*p && *p != '/' && *p != '?' && *p != '#')
    return false;
  const char *path = p;
  size_t plen = 0;
  for (const char *q = path; *q && *q != '#'; q++, plen++)
    if ((unsigned char)*q <= ' ' || (unsigned char)*q >= 0x7f)
      return false; /* libcurl would escape it: let it */
  lk_h1_target *tg = &t->h1t;
  memset(&tg->addr, 0, sizeof tg->addr);
  if (strcasecmp(host, "localhost") == 0)
    memcpy(host, "127.0.0.1", 10);
  struct sockaddr_in *a4 = (struct sockaddr_in *)&tg->addr;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&tg->addr;
  if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)port);
    tg->alen = sizeof *a4;
  } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)port);
    tg->alen = sizeof *a6;
  } else {
    return false; /* a name: libcurl resolves it */
  }
  if (host_shown + 7 > sizeof tg->host)
    return false;
  size_t n = 0;
  memcpy(tg->host, hs, host_shown);
  n = host_shown;
  if (port != 80) {
    char tmp[8];
    int i = 0;
    long v = port;
    do {
      tmp[i++] = (char)('0' + v % 10);
      v /= 10;
    } while (v);
    tg->host[n++] = ':';
    while (i)
      tg->host[n++] = tmp[--i];
  }
  tg->host_len = n;
  tg->path = plen ? path : "/";
  tg->path_len = plen ? plen : 1;
  if (*tg->path != '/') { /* "http://h?q": the path is "/?q" */
    tg->path = NULL;
    tg->path_len = plen;
    tg->query = path;
  } else {
    tg->query = NULL;
  }
  return true;
}

/* --- connections ---------------------------------------------------------------------------- */

static void watch(lk_h1 *h, h1_conn *cn, int ev) {
  if (cn->watched == ev)
    return;
  cn->watched = ev;
  h->c->cfg.socket_fn(h->c->cfg.loop_ud, cn->fd, ev);
}

static bool fd_set_conn(lk_h1 *h, int fd, h1_conn *cn) {
  if ((size_t)fd >= h->cap_fd) {
    size_t n = h->cap_fd ? h->cap_fd : 64;
    while (n <= (size_t)fd)
      n *= 2;
    h1_conn **p = realloc(h->by_fd, n * sizeof *p);
    if (!p)
      return false;
    memset(p + h->cap_fd, 0, (n - h->cap_fd) * sizeof *p);
    h->by_fd = p;
    h->cap_fd = n;
  }
  h->by_fd[fd] = cn;
  return true;
}

static void unlink_idle(h1_conn *cn) {
  h1_origin *o = cn->origin;
  if (cn->prev)
    cn->prev->next = cn->next;
  else
    o->idle = cn->next;
  if (cn->next)
    cn->next->prev = cn->prev;
  cn->next = cn->prev = NULL;
  o->nidle--;
}

/* The connection no longer reads the request's stream. */
static void stream_detach(lk_h1 *h, h1_conn *cn) {
  if (cn->ready) {
    for (h1_conn **p = &h->ready; *p; p = &(*p)->rnext)
      if (*p == cn) {
        *p = cn->rnext;
        break;
      }
    cn->ready = false;
  }
  if (cn->streaming && cn->t) {
    lk_http_request *r = cn->t->k->req;
    if (r->stream_try == cn->t) {
      r->stream_try = NULL;
      r->stream_paused = false;
    }
  }
  cn->streaming = false;
}

/* Closes and frees a connection that is in no list. The loop stops watching it first. */
static void conn_close(lk_h1 *h, h1_conn *cn) {
  lk_http_client *c = h->c;
  stream_detach(h, cn);
  if (cn->watched)
    c->cfg.socket_fn(c->cfg.loop_ud, cn->fd, 0);
  if (c->cfg.close_fn)
    c->cfg.close_fn(c->cfg.loop_ud, cn->fd);
  h->by_fd[cn->fd] = NULL;
  close(cn->fd);
  free(cn->head);
  free(cn->fld);
  free(cn->sbuf);
  free(cn);
}

static h1_origin *origin_of(lk_h1 *h, const lk_h1_target *tg) {
  for (size_t i = 0; i < h->norigins; i++)
    if (h->origins[i].alen == tg->alen && memcmp(&h->origins[i].addr, &tg->addr, tg->alen) == 0)
      return &h->origins[i];
  if (h->norigins == H1_ORIGINS_MAX)
    return NULL;
  if (!h->origins) {
    h->origins = calloc(H1_ORIGINS_MAX, sizeof *h->origins); /* fixed: conns point into it */
    if (!h->origins)
      return NULL;
  }
  h1_origin *o = &h->origins[h->norigins++];
  memcpy(&o->addr, &tg->addr, tg->alen);
  o->alen = tg->alen;
  return o;
}

/* Whether a pooled connection has something to read: bytes nobody asked for (a body longer than
 * its Content-Length, a 408 to an idle connection, a forged response) or the server's close.
 * The loop's read event says so too, but a call may start before the loop has delivered it
 * (lk_http_client_start_submitted() right after a read, or a timer served first), and those
 * bytes would then be read as the answer to the next request. */
static bool conn_stale(const h1_conn *cn) {
  char b;
  ssize_t n = recv(cn->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* A pooled connection for t, or NULL. Connections idle past the policy's lifetime, closed by
 * the server or holding stray bytes are closed. */
static h1_conn *pool_take(lk_h1 *h, h1_origin *o, int64_t now, int64_t max_idle) {
  while (o && o->idle) {
    h1_conn *cn = o->idle;
    unlink_idle(cn);
    h->nidle--;
    if (lk_sat_sub(now, cn->idle_since) <= max_idle && !conn_stale(cn))
      return cn;
    conn_close(h, cn);
  }
  return NULL;
}

/* A connection whose response completed with keep-alive goes back to its origin's pool,
 * still watched for reading: the server's close (or any stray byte) is then noticed. */
static void pool_put(lk_h1 *h, h1_conn *cn) {
  h1_origin *o = cn->origin;
  int max = h->idle_max;
  if (!o || o->nidle >= H1_IDLE_PER_ORIGIN || h->nidle >= max) {
    conn_close(h, cn);
    return;
  }
  stream_detach(h, cn);
  cn->t = NULL;
  cn->state = H1_IDLE;
  cn->reused = true;
  cn->idle_since = lk_now_ns();
  cn->body = NULL;
  cn->next = o->idle;
  cn->prev = NULL;
  if (o->idle)
    o->idle->prev = cn;
  o->idle = cn;
  o->nidle++;
  h->nidle++;
  watch(h, cn, LK_HTTP_POLL_IN);
}

static h1_conn *conn_new(lk_h1 *h, const lk_h1_target *tg, h1_origin *o, int *err) {
  int fd = socket(tg->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = errno;
    return NULL;
  }
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* as libcurl does */
  h1_conn *cn = calloc(1, sizeof *cn);
  if (!cn || !fd_set_conn(h, fd, cn)) {
    free(cn);
    close(fd);
    *err = ENOMEM;
    return NULL;
  }
  cn->fd = fd;
  cn->origin = o;
  return cn;
}

/* --- the request ---------------------------------------------------------------------------- */

static bool head_add(h1_conn *cn, const char *s, size_t n) {
  if (cn->head_len + n > cn->head_cap) {
    size_t nc = cn->head_cap ? cn->head_cap : 512;
    while (nc < cn->head_len + n)
      nc *= 2;
    char *p = realloc(cn->head, nc);
    if (!p)
      return false;
    cn->head = p;
    cn->head_cap = nc;
  }
  memcpy(cn->head + cn->head_len, s, n);
  cn->head_len += n;
  return true;
}

static bool line_named(const char *line, const char *name, size_t nl) {
  return strncasecmp(line, name, nl) == 0 && (line[nl] == ':' || line[nl] == ';');
}

/* The head as libcurl writes it: request line, Host (unless the caller set one), Accept: * / *
 * (idem), the header list (a "Name:" line removes a header, "Name;" sends it empty),
 * Content-Length for a body. */
static bool build_head(h1_conn *cn, const lk_try *t) {
  const lk_call *k = t->k;
  const lk_http_request *r = k->req;
  const lk_h1_target *tg = &t->h1t;
  bool ok = true, has_host = false, has_accept = false;
  for (size_t i = 0; i < t->nnodes; i++) {
    const char *l = t->nodes[i].data;
    has_host = has_host || line_named(l, "Host", 4);
    has_accept = has_accept || line_named(l, "Accept", 6);
  }
  cn->head_len = 0;
  ok = ok && head_add(cn, r->method, strlen(r->method)) && head_add(cn, " ", 1);
  if (!tg->path)
    ok = ok && head_add(cn, "/", 1) && head_add(cn, tg->query, tg->path_len);
  else
    ok = ok && head_add(cn, tg->path, tg->path_len);
  ok = ok && head_add(cn, " HTTP/1.1\r\n", 11);
  if (!has_host)
    ok = ok && head_add(cn, "Host: ", 6) && head_add(cn, tg->host, tg->host_len) &&
         head_add(cn, "\r\n", 2);
  if (!has_accept)
    ok = ok && head_add(cn, "Accept: */*\r\n", 13);
  for (size_t i = 0; i < t->nnodes && ok; i++) {
    const char *l = t->nodes[i].data;
    size_t n = strlen(l);
    if (n && l[n - 1] == ':')
      continue; /* libcurl's "remove this header" */
    if (n && l[n - 1] == ';' && !memchr(l, ':', n)) {
      ok = head_add(cn, l, n - 1) && head_add(cn, ":\r\n", 3);
      continue;
    }
    ok = head_add(cn, l, n) && head_add(cn, "\r\n", 2);
  }
  if (r->body || r->stream) { /* a stream declares its length */
    char num[32] = "Content-Length: ";
    size_t n = 16;
    char tmp[24];
    int i = 0;
    size_t v = r->body_len;
    do {
      tmp[i++] = (char)('0' + v % 10);
      v /= 10;
    } while (v);
    while (i)
      num[n++] = tmp[--i];
    ok = ok && head_add(cn, num, n) && head_add(cn, "\r\n", 2);
  }
  ok = ok && head_add(cn, "\r\n", 2);
  cn->body = r->body;
  cn->body_len = r->body ? r->body_len : 0;
  cn->written = 0;
  cn->streaming = r->stream != NULL;
  cn->stream_left = r->stream ? r->body_len : 0;
  return ok;
}

/* --- ends ----------------------------------------------------------------------------------- */

/* The attempt ends with `code`: the connection is closed (never reused after a failure) and the
 * call hears. t may be freed by the time this returns. */
static void conn_fail(lk_h1 *h, h1_conn *cn, int code) {
  lk_try *t = cn->t;
  t->h1c = NULL;
  t->h1_connected = cn->connected;
  t->h1_errno = cn->os_errno;
  conn_close(h, cn);
  lk__call_transfer_done(t, code);
}

/* Reported from inside start, the failure waits for the next pass (lk__h1_flush): the call is
 * not ready to hear of its attempt's end before start has returned. */
static void conn_fail_later(lk_h1 *h, h1_conn *cn, int code) {
  cn->state = H1_FAILED;
  cn->fail_code = code;
  watch(h, cn, 0);
  cn->prev = NULL;
  cn->next = h->failed;
  if (h->failed)
    h->failed->prev = cn;
  h->failed = cn;
}

bool lk__h1_pending(const lk_http_client *c) { return c->h1 && (c->h1->failed || c->h1->ready); }

static void do_write(lk_h1 *h, h1_conn *cn, bool early);

void lk__h1_body_ready(void *tv) {
  lk_try *t = tv;
  h1_conn *cn = t->h1c;
  if (!cn || !cn->streaming || cn->ready || cn->state != H1_WRITING)
    return;
  lk_http_client *c = t->k->cl;
  lk_h1 *h = c->h1;
  cn->ready = true;
  cn->rnext = h->ready;
  h->ready = cn;
  /* written on the next pass, from the loop (this runs outside the driver): a due timer */
  c->armed_delay_at = lk_now_ns();
  c->cfg.timer_fn(c->cfg.loop_ud, 0);
}

void lk__h1_flush(lk_http_client *c) {
  lk_h1 *h = c->h1;
  while (h && h->ready) {
    h1_conn *cn = h->ready;
    h->ready = cn->rnext;
    cn->ready = false;
    if (cn->t && cn->state == H1_WRITING)
      do_write(h, cn, false);
  }
  while (h && h->failed) {
    h1_conn *cn = h->failed;
    h->failed = cn->next;
    if (h->failed)
      h->failed->prev = NULL;
    cn->next = NULL;
    conn_fail(h, cn, cn->fail_code);
  }
}

static void on_response_done(lk_h1 *h, h1_conn *cn, bool reusable) {
  lk_try *t = cn->t;
  t->h1c = NULL;
  t->h1_connected = true;
  t->h1_errno = 0;
  if (reusable)
    pool_put(h, cn);
  else
    conn_close(h, cn);
  lk__call_transfer_done(t, CURLE_OK);
}

/* --- writing -------------------------------------------------------------------------------- */

static bool start_fresh(lk_h1 *h, lk_try *t, h1_conn *old, int *err);

/* Writes what is left of the request. In start (`early`), failures wait for the next pass. */
static void do_write(lk_h1 *h, h1_conn *cn, bool early) {
  lk_try *t = cn->t;
  lk_att *a = &t->att;
  if (cn->written == 0 && !a->sent) {
    int64_t now = t->k->clock->now(t->k->clock);
    if (++a->prereq_calls == 1)
      a->reused = cn->reused;
    a->t_prereq = now;
  }
  lk_http_request *r = t->k->req;
  for (;;) {
    bool chunk_done = cn->body_len == 0 || cn->written >= cn->head_len + cn->body_len;
    if (cn->streaming && cn->stream_left > 0 && chunk_done && !r->stream_paused) {
      /* the next chunk of the stream (the first goes out with the head when it is there) */
      if (!cn->sbuf && !(cn->sbuf = malloc(H1_STREAM_BUF))) {
        a->oom = true;
        if (early)
          conn_fail_later(h, cn, CURLE_OUT_OF_MEMORY);
        else
          conn_fail(h, cn, CURLE_OUT_OF_MEMORY);
        return;
      }
      size_t cap = cn->stream_left < H1_STREAM_BUF ? (size_t)cn->stream_left : H1_STREAM_BUF;
      long got = r->stream(r->stream_ctx, cn->sbuf, cap);
      if (got == LK_HTTP_BODY_WAIT) {
        r->stream_paused = true; /* lk_http_request_body_ready() resumes; the head goes out */
        cn->body_len = 0;
      } else if (got <= 0 || (size_t)got > cap) { /* libcurl's CURL_READFUNC_ABORT */
        if (early)
          conn_fail_later(h, cn, CURLE_ABORTED_BY_CALLBACK);
        else
          conn_fail(h, cn, CURLE_ABORTED_BY_CALLBACK);
        return;
      } else {
        r->stream_read += (uint64_t)got;
        cn->stream_left -= (uint64_t)got;
        cn->body = (const unsigned char *)cn->sbuf;
        cn->body_len = (size_t)got;
        if (cn->written > cn->head_len)
          cn->written = cn->head_len;
      }
    }
    if (cn->written >= cn->head_len + cn->body_len) { /* all there is, is out */
      if (cn->streaming && cn->stream_left > 0) {
        if (!r->stream_paused)
          continue;
        cn->state = H1_WRITING;
        watch(h, cn, LK_HTTP_POLL_IN);
        return;
      }
      break;
    }
    /* An iovec's base is writable by type only: sendmsg reads the caller's const body, so the
     * qualifier goes through uintptr_t rather than a cast that drops it. */
    struct iovec iov[2];
    int n = 0;
    if (cn->written < cn->head_len) {
      iov[n++] = (struct iovec){cn->head + cn->written, cn->head_len - cn->written};
      if (cn->body_len)
        iov[n++] = (struct iovec){(void *)(uintptr_t)cn->body, cn->body_len};
    } else {
      size_t off = cn->written - cn->head_len;
      iov[n++] = (struct iovec){(void *)(uintptr_t)(cn->body + off), cn->body_len - off};
    }
    /* sendmsg for MSG_NOSIGNAL: a server's reset must not raise SIGPIPE (libcurl's send()s
     * pass the same flag) */
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t w = sendmsg(cn->fd, &mh, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      cn->state = H1_WRITING;
      watch(h, cn, LK_HTTP_POLL_IN | LK_HTTP_POLL_OUT);
      return;
    }
    if (w < 0) {
      if (early)
        conn_fail_later(h, cn, CURLE_SEND_ERROR);
      else
        conn_fail(h, cn, CURLE_SEND_ERROR);
      return;
    }
    cn->written += (size_t)w;
    a->tx_bytes += (uint64_t)w;
  }
  a->sent = true;
  a->t_sent = t->k->clock->now(t->k->clock);
  cn->state = H1_READING;
  watch(h, cn, LK_HTTP_POLL_IN);
}

static void on_connected(lk_h1 *h, h1_conn *cn) {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(cn->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
    err = errno;
  if (err) {
    cn->os_errno = err;
    conn_fail(h, cn, CURLE_COULDNT_CONNECT);
    return;
  }
  cn->connected = true;
  cn->state = H1_WRITING;
  do_write(h, cn, false);
}

/* --- the response (libhttp-parser callbacks) ------------------------------------------------- */

static bool fld_add(h1_conn *cn, const char *s, size_t n) {
  if (cn->fld_len + n + 1 > cn->fld_cap) {
    size_t nc = cn->fld_cap ? cn->fld_cap : 256;
    while (nc < cn->fld_len + n + 1)
      nc *= 2;
    char *p = realloc(cn->fld, nc);
    if (!p)
      return false;
    cn->fld = p;
    cn->fld_cap = nc;
  }
  memcpy(cn->fld + cn->fld_len, s, n);
  cn->fld_len += n;
  return true;
}

/* A callback could not keep what arrived: the parse stops, the attempt fails as libcurl's does
 * when a write callback refuses bytes. */
static int refused(h1_conn *cn, bool oom) {
  cn->bad = true;
  if (oom)
    cn->t->att.oom = true;
  return -1;
}

/* The header gathered so far goes to the response as one "Name: value" line would. */
static bool fld_flush(h1_conn *cn) {
  if (!cn->in_value)
    return true;
  cn->in_value = false;
  bool ok = lk__resp_header(&cn->t->cur, cn->fld, cn->name_len, cn->fld + cn->name_len,
                            cn->fld_len - cn->name_len);
  cn->fld_len = cn->name_len = 0;
  return ok;
}

static int on_msg_begin(http_parser *p) {
  h1_conn *cn = p->data;
  cn->in_msg = true;
  cn->fld_len = cn->name_len = 0;
  cn->in_value = false;
  lk_resp *r = &cn->t->cur;
  r->hdr_len = r->nhdr = 0;
  r->reason[0] = '\0';
  return 0;
}

static int on_status(http_parser *p, const char *at, size_t n) {
  h1_conn *cn = p->data;
  lk__resp_reason_add(&cn->t->cur, at, n);
  return 0;
}

static int on_hfield(http_parser *p, const char *at, size_t n) {
  h1_conn *cn = p->data;
  if (cn->in_value && !fld_flush(cn))
    return cn->bad = true, -1;
  if (!fld_add(cn, at, n))
    return refused(cn, true);
  cn->name_len = cn->fld_len;
  return 0;
}

static int on_hvalue(http_parser *p, const char *at, size_t n) {
  h1_conn *cn = p->data;
  cn->in_value = true;
  if (!fld_add(cn, at, n))
    return refused(cn, true);
  return 0;
}

static int on_headers_done(http_parser *p) {
  h1_conn *cn = p->data;
  if (!fld_flush(cn))
    return refused(cn, true);
  lk_resp *r = &cn->t->cur;
  size_t rl = strlen(r->reason);
  while (rl && (r->reason[rl - 1] == ' ' || r->reason[rl - 1] == '\t'))
    r->reason[--rl] = '\0';
  r->status = p->status_code;
  r->version = p->http_major * 10 + p->http_minor;
  r->status_seen = true;
  r->headers_done = p->status_code >= 200;
  lk_try *t = cn->t;
  /* libhttp-parser takes any digit for a version ("HTTP/9.9"), which libcurl refuses */
  bool version_ok = p->http_major == 1 && p->http_minor <= 1;
  if (version_ok && p->status_code < 200 && p->status_code != 101)
    return 1; /* an interim head: no body, the final one follows */
  /* the final head, checked as on libcurl before a body byte is taken */
  bool too_big = false;
  if (!version_ok ||
      lk__resp_head_check(r, t->k->req->head, t->k->pol.max_response_body, &too_big) != LK_F_NONE) {
    t->att.head_junk = true;
    return refused(cn, false);
  }
  if (too_big) {
    t->att.too_big = true;
    return refused(cn, false);
  }
  /* no body: HEAD, 204, 304 (1 tells the parser so) */
  return t->k->req->head || p->status_code == 204 || p->status_code == 304;
}

static int on_body(http_parser *p, const char *at, size_t n) {
  h1_conn *cn = p->data;
  lk_try *t = cn->t;
  if (!lk__resp_body(&t->cur, at, n, t->k->pol.max_response_body, &t->att.too_big)) {
    return refused(cn, !t->att.too_big);
  }
  return 0;
}

static int on_msg_done(http_parser *p) {
  h1_conn *cn = p->data;
  if (p->status_code < 200 && p->status_code != 101) {
    lk__resp_reset(&cn->t->cur); /* an interim response: the real one follows */
    cn->in_msg = false;
    cn->interim = true;
    http_parser_pause(p, 1); /* do_read learns where the next head starts (proto_ok) */
    return 0;
  }
  cn->msg_done = true;
  return 1; /* stop here: a byte past the response is not parsed (and forbids reuse) */
}

/* --- reading -------------------------------------------------------------------------------- */

/* An idle connection got an event: the server closed it, or sent what nobody asked for. */
static void idle_event(lk_h1 *h, h1_conn *cn) {
  unlink_idle(cn);
  h->nidle--;
  conn_close(h, cn);
}

/* The reused connection died before any response byte: written again once on a new one, as
 * libcurl does, unless the resend guard stops it. */
static void resend(lk_h1 *h, h1_conn *cn) {
  lk_try *t = cn->t;
  lk_call *k = t->k;
  lk_att *a = &t->att;
  a->resends++;
  lk_call_metrics_resend_detected(k->pol.metrics);
  if (k->unsafe && k->pol.resend_guard == LK_RESEND_ABORT) {
    a->resend_aborted = true;
    conn_fail(h, cn, CURLE_ABORTED_BY_CALLBACK);
    return;
  }
  a->sent = false;
  int err = 0;
  t->h1c = NULL;
  bool ok = start_fresh(h, t, cn, &err);
  conn_close(h, cn);
  if (!ok)
    lk__call_transfer_done(t, CURLE_COULDNT_CONNECT);
}

/* libhttp-parser as Debian builds it (HTTP_PARSER_STRICT=0) checks only the 'H' of a status
 * line's "HTTP/" ("HXXP/1.1 200 OK" would pass), so the protocol name is checked here as its
 * bytes arrive, for each head: an interim head pauses the parser where it ends, so the next
 * head's first byte is known. */
static bool proto_ok(h1_conn *cn, const char *p, size_t n) {
  static const char proto[] = "HTTP/";
  for (size_t i = 0; i < n && cn->proto < 5; i++) {
    if (cn->proto == 0 && (p[i] == '\r' || p[i] == '\n'))
      continue; /* line ends before a head are skipped, by the parser too */
    if (p[i] != proto[cn->proto++])
      return false;
  }
  return true;
}

/* Reads what arrived. true: the connection still runs the attempt (waiting for more); false:
 * the attempt ended (the connection may be gone, and the attempt too). */
static bool do_read(lk_h1 *h, h1_conn *cn) {
  lk_try *t = cn->t;
  for (;;) {
    ssize_t n = read(cn->fd, h->rbuf, sizeof h->rbuf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return true;
    lk_att *a = &t->att;
    if (n <= 0) {
      bool nothing = !a->got_bytes;
      if (nothing && cn->reused && a->prereq_calls == 1 && !t->k->req->stream) {
        resend(h, cn);
        return false;
      }
      if (n < 0) {
        conn_fail(h, cn, cn->state == H1_WRITING && nothing ? CURLE_SEND_ERROR : CURLE_RECV_ERROR);
        return false;
      }
      /* interim heads alone are no answer: libcurl's "Empty reply" too */
      if (nothing || (cn->interim && !cn->in_msg && !t->cur.status_seen)) {
        conn_fail(h, cn, CURLE_GOT_NOTHING);
        return false;
      }
      /* the close ends a close-delimited body; anything else is cut short */
      http_parser_execute(&cn->parser, &h->settings, NULL, 0);
      if (cn->msg_done) {
        on_response_done(h, cn, false);
        return false;
      }
      conn_fail(h, cn, t->cur.headers_done ? CURLE_PARTIAL_FILE : CURLE_RECV_ERROR);
      return false;
    }
    a->got_bytes = true;
    if (t->k->pol.idle_timeout > 0) /* the idle timer is the only reader of t_last */
      a->t_last = t->k->clock->now(t->k->clock);
    a->rx_bytes += (uint64_t)n;
    size_t used = 0;
    for (;;) {
      if (!proto_ok(cn, h->rbuf + used, (size_t)n - used)) {
        conn_fail(h, cn, CURLE_WEIRD_SERVER_REPLY);
        return false;
      }
      used += http_parser_execute(&cn->parser, &h->settings, h->rbuf + used, (size_t)n - used);
      if (HTTP_PARSER_ERRNO(&cn->parser) != HPE_PAUSED)
        break;
      http_parser_pause(&cn->parser, 0); /* an interim head ended: the next starts at `used` */
      cn->proto = 0;
      if (used == (size_t)n)
        break; /* (0 bytes would tell the parser of the close) */
    }
    if (cn->msg_done) {
      /* a 101's connection is the server's protocol now: never pooled */
      bool reusable = used == (size_t)n && cn->state == H1_READING && t->cur.status >= 200 &&
                      !cn->parser.upgrade && http_should_keep_alive(&cn->parser);
      on_response_done(h, cn, reusable);
      return false;
    }
    enum http_errno pe = HTTP_PARSER_ERRNO(&cn->parser);
    if (pe != HPE_OK) {
      int code = CURLE_WEIRD_SERVER_REPLY;
      if (cn->bad) {
        code = CURLE_WRITE_ERROR; /* the driver refused the bytes (too big, no memory, junk) */
      } else if (pe == HPE_HEADER_OVERFLOW) {
        a->head_too_big = true;     /* past LK_HTTP_HEAD_MAX: a head, or the trailers */
        code = CURLE_OUT_OF_MEMORY; /* libcurl 7.88's code for a head past its limit */
      } else if (t->cur.headers_done) {
        /* the body's framing broke after the head (a chunk size that is junk or overflows):
         * libcurl reports that as a receive error, a cut-short body */
        code = CURLE_RECV_ERROR;
      }
      conn_fail(h, cn, code);
      return false;
    }
    if ((size_t)n < sizeof h->rbuf)
      return true; /* the socket is drained: the next event brings more */
  }
}

void lk__h1_event(lk_http_client *c, int fd, int events) {
  lk_h1 *h = c->h1;
  h1_conn *cn = (size_t)fd < h->cap_fd ? h->by_fd[fd] : NULL;
  if (!cn)
    return;
  switch (cn->state) {
  case H1_IDLE: idle_event(h, cn); return;
  case H1_CONNECTING:
    if (events & (LK_HTTP_POLL_OUT | LK_HTTP_POLL_IN) || events == 0)
      on_connected(h, cn);
    return;
  case H1_WRITING:
    /* a response (or the server's close) may come before the whole body is written */
    if (events & LK_HTTP_POLL_IN || events == 0) {
      if (!do_read(h, cn))
        return;
    }
    do_write(h, cn, false);
    return;
  case H1_READING: (void)do_read(h, cn); return;
  case H1_FAILED: return;
  }
}

bool lk__h1_owns(const lk_http_client *c, int fd) {
  const lk_h1 *h = c->h1;
  return h && fd >= 0 && (size_t)fd < h->cap_fd && h->by_fd[fd];
}

lk_call *lk__h1_call_of(const lk_http_client *c, int fd) {
  const lk_h1 *h = c->h1;
  const h1_conn *cn = h && fd >= 0 && (size_t)fd < h->cap_fd ? h->by_fd[fd] : NULL;
  return cn && cn->t ? cn->t->k : NULL;
}

/* --- the transport -------------------------------------------------------------------------- */

static void conn_bind(h1_conn *cn, lk_try *t) {
  cn->t = t;
  cn->msg_done = cn->bad = cn->in_msg = cn->interim = false;
  cn->proto = 0;
  cn->os_errno = 0;
  http_parser_init(&cn->parser, HTTP_RESPONSE);
  cn->parser.data = cn;
  t->h1c = cn;
}

/* A new connection for t; false with *err when not even a socket could be had. `old`: the
 * connection whose request is written again (its head is taken over, since the URL the head was
 * built from may be another attempt's by now), or NULL. */
static bool start_fresh(lk_h1 *h, lk_try *t, h1_conn *old, int *err) {
  lk_att *a = &t->att;
  h1_origin *o = origin_of(h, &t->h1t);
  h1_conn *cn = conn_new(h, &t->h1t, o, err);
  if (!cn)
    return false;
  conn_bind(cn, t);
  a->sock_seen = true;
  a->t_sock = t->k->clock->now(t->k->clock);
  if (old) {
    char *hd = cn->head;
    size_t cap = cn->head_cap;
    cn->head = old->head;
    cn->head_cap = old->head_cap;
    cn->head_len = old->head_len;
    old->head = hd;
    old->head_cap = cap;
    cn->body = old->body;
    cn->body_len = old->body_len;
    cn->written = 0;
  } else if (!build_head(cn, t)) {
    conn_fail_later(h, cn, CURLE_OUT_OF_MEMORY);
    return true;
  }
  cn->state = H1_CONNECTING;
  int rc = connect(cn->fd, (const struct sockaddr *)&t->h1t.addr, t->h1t.alen);
  if (rc == 0) {
    cn->connected = true;
    do_write(h, cn, true);
  } else if (errno == EINPROGRESS) {
    watch(h, cn, LK_HTTP_POLL_OUT);
  } else {
    cn->os_errno = errno;
    conn_fail_later(h, cn, CURLE_COULDNT_CONNECT);
  }
  return true;
}

static int h1_start(lk_try *t) {
  lk_call *k = t->k;
  lk_h1 *h = k->cl->h1;
  t->h1c = NULL;
  t->h1_connected = false;
  t->h1_errno = 0;
  /* a request that must not be written twice never goes on a reused connection */
  bool fresh = (k->unsafe && k->pol.resend_guard == LK_RESEND_FRESH_CONNECTION) || k->req->stream;
  if (k->req->stream) { /* this attempt reads the stream (one call at a time uses it) */
    k->req->stream_try = t;
    k->req->stream_paused = false;
  }
  h1_origin *o = origin_of(h, &t->h1t);
  h1_conn *cn = fresh ? NULL : pool_take(h, o, lk_now_ns(), k->pol.pool_idle_lifetime);
  if (cn) {
    conn_bind(cn, t);
    if (!build_head(cn, t)) {
      conn_close(h, cn);
      t->h1c = NULL;
      return LK_ENOMEM;
    }
    do_write(h, cn, true);
    return LK_OK;
  }
  int err = 0;
  if (start_fresh(h, t, NULL, &err))
    return LK_OK;
  if (k->req->stream_try == t) /* nothing started: nothing reads the stream */
    k->req->stream_try = NULL;
  return LK_ENOMEM;
}

/* The attempt is abandoned (or ended): a connection still attached is closed, whatever its
 * state, so a half-read response never serves the next request. */
static void h1_stop(lk_try *t) {
  h1_conn *cn = t->h1c;
  if (!cn)
    return;
  lk_h1 *h = t->k->cl->h1;
  t->h1c = NULL;
  t->h1_connected = cn->connected;
  t->h1_errno = cn->os_errno;
  if (cn->state == H1_FAILED) {
    if (cn->prev)
      cn->prev->next = cn->next;
    else
      h->failed = cn->next;
    if (cn->next)
      cn->next->prev = cn->prev;
    cn->next = cn->prev = NULL;
  }
  conn_close(h, cn);
}

static bool h1_connected(const lk_try *t) { return t->h1c ? t->h1c->connected : t->h1_connected; }

static void h1_facts(const lk_try *t, bool failed, lk_conn_facts *f) {
  memset(f, 0, sizeof *f);
  f->connected = h1_connected(t);
  if (failed && t->att.prereq_calls == 0)
    f->os_errno = t->h1c ? t->h1c->os_errno : t->h1_errno;
  f->bytes_sent = t->att.tx_bytes;
}

const lk_transport lk__h1_transport = {
    .name = "native",
    .start = h1_start,
    .stop = h1_stop,
    .connected = h1_connected,
    .facts = h1_facts,
};

/* --- lifecycle ------------------------------------------------------------------------------ */

lk_h1 *lk__h1_new(lk_http_client *c) {
  lk_h1 *h = calloc(1, sizeof *h);
  if (!h)
    return NULL;
  h->c = c;
  h->idle_max = c->cfg.max_pool > 0
                    ? (int)(c->cfg.max_pool < H1_IDLE_TOTAL ? c->cfg.max_pool : H1_IDLE_TOTAL)
                    : H1_IDLE_TOTAL;
  http_parser_settings *s = &h->settings;
  http_parser_settings_init(s);
  s->on_message_begin = on_msg_begin;
  s->on_status = on_status;
  s->on_header_field = on_hfield;
  s->on_header_value = on_hvalue;
  s->on_headers_complete = on_headers_done;
  s->on_body = on_body;
  s->on_message_complete = on_msg_done;
  return h;
}

/* After every call is gone: the pools are closed. */
void lk__h1_free(lk_h1 *h) {
  if (!h)
    return;
  for (size_t i = 0; i < h->norigins; i++)
    while (h->origins[i].idle) {
      h1_conn *cn = h->origins[i].idle;
      unlink_idle(cn);
      conn_close(h, cn);
    }
  free(h->origins);
  free(h->by_fd);
  free(h);
}
