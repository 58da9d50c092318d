/* SPDX-License-Identifier: MIT */
/* Downstream HTTP/1 connections: accept, parse (libhttp-parser), limits and timeouts, one request
 * at a time, the response written before the next request is read. */
#include "gwp.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* Bytes a connection may hold beyond the request being served (pipelined requests); past it, it
 * stops reading until its response is out. */
#define GWP_PENDING_MAX (64 * 1024)
/* A streamed body's bytes held at once, received but not yet taken upstream. */
#define GWP_STREAM_MAX (64 * 1024)

/* A connection as this file allocates (gwp_conn_accept) and frees (on_handle_closed) it: the
 * gwp_conn every file sees, and what only the parser callbacks here need. */
typedef struct conn_parse {
  gwp_conn c;   /* first: a gwp_conn * points at its conn_parse */
  bool tail_lf; /* the bytes parsed so far end in LF and then only SP/HT: a header value that
                   follows is a continuation line (obs_fold) */
} conn_parse;

/* The buffer http_parser_execute is parsing on this thread (feed sets it): a callback looks
 * back in it from where its piece starts. */
static _Thread_local const char *exec_start;

int64_t gwp_now(void) { return lk_now_ns(); }

static const lk_gw_listen *limits(const gwp_conn *c) { return &c->srv->cfg->listen; }

/* The largest request body (0: no limit). The admin listener takes a configuration at most
 * (POST /config), whatever [listen] max-body says: a proxy's small max-body does not refuse a
 * configuration, and max-body = 0 does not let the admin port buffer any body at all. */
static uint64_t body_limit(const gwp_conn *c) {
  return c->admin ? LK_GW_CONFIG_MAX_BYTES : limits(c)->max_body;
}

static uint64_t ms_of(int64_t ns) {
  if (ns <= 0)
    return 0;
  return (uint64_t)(ns / LK_NS_PER_MS + (ns % LK_NS_PER_MS != 0)); /* up, without overflow */
}

static void on_handle_closed(uv_handle_t *h) {
  gwp_conn *c = h->data;
  if (--c->handles_open > 0)
    return;
  free(c->pending);
  free(c);
}

static void req_free(gwp_req *r) {
  if (!r)
    return;
  free(r->head);
  free(r->hoff);
  free(r->body);
  free(r->url);
  free(r->out);
  lk_http_result_free(r->res);
  lk_http_request_free(r->hr);
  lk_gw_config_unref(r->cfg);
  free(r);
}

void gwp_conn_close(gwp_conn *c) {
  if (c->state == GWP_CLOSING)
    return;
  gwp_server *s = c->srv;
  if (c->state == GWP_BUSY || c->state == GWP_STREAMING) {
    /* the upstream call still refers to the request: it frees it when it completes */
    c->req->conn = NULL;
    c->req = NULL;
    s->nbusy--;
  }
  if (c->state != GWP_WRITING) /* a pending write's callback frees its request */
    req_free(c->req);
  c->state = GWP_CLOSING;
  c->req = NULL;
  if (c->prev)
    c->prev->next = c->next;
  else
    s->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  s->nconns--;
  atomic_fetch_sub(&s->sh->conns_total, 1);
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *)&c->timer, on_handle_closed);
  uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

static void read_stop(gwp_conn *c) {
  if (c->reading) {
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = false;
  }
}

/* --- timers ---------------------------------------------------------------------------------- */

static void on_timer(uv_timer_t *t) {
  gwp_conn *c = t->data;
  if (c->state == GWP_READING && c->req) {
    /* slow headers (or a body that stopped): 408, then close */
    gwp_log(c->srv, LK_GW_LOG_DEBUG, "request timeout on a connection: closing");
    read_stop(c);
    c->state = GWP_BUSY;
    c->srv->nbusy++;
    if (!c->admin)
      lk_gw_runtime_observe_unrouted(c->srv->rt, 408);
    gwp_respond_error(c->req, 408, true, NULL);
    return;
  }
  if (c->state == GWP_IDLE || c->state == GWP_READING)
    gwp_conn_close(c);
}

static void arm(gwp_conn *c, int64_t ns) { uv_timer_start(&c->timer, on_timer, ms_of(ns), 0); }

/* --- parser callbacks ------------------------------------------------------------------------ */

static gwp_req *req_of(http_parser *p) { return ((gwp_conn *)p->data)->req; }

static int fail(gwp_conn *c, int status) {
  c->close_after = true;
  if (c->req)
    c->req->status = status; /* the caller of execute answers it */
  return -1;
}

static bool head_put(gwp_req *r, const char *at, size_t len, bool terminate_first) {
  size_t need = r->head_len + len + 2;
  if (need > r->head_cap) {
    size_t cap = r->head_cap ? r->head_cap : 512;
    while (cap < need)
      cap *= 2;
    char *n = realloc(r->head, cap);
    if (!n)
      return false;
    r->head = n;
    r->head_cap = cap;
  }
  if (terminate_first)
    r->head[r->head_len++] = '\0';
  memcpy(r->head + r->head_len, at, len);
  r->head_len += len;
  return true;
}

static bool off_push(gwp_req *r, size_t off) {
  if (r->nh == r->hcap) {
    size_t cap = r->hcap ? r->hcap * 2 : 16;
    uint32_t *n = realloc(r->hoff, cap * sizeof *n);
    if (!n)
      return false;
    r->hoff = n;
    r->hcap = cap;
  }
  r->hoff[r->nh++] = (uint32_t)off;
  return true;
}

static int on_message_begin(http_parser *p) {
  gwp_conn *c = p->data;
  gwp_req *r = calloc(1, sizeof *r);
  if (!r)
    return -1;
  r->conn = c;
  r->srv = c->srv;
  r->t_start = gwp_now();
  r->status = 0;
  c->req = r;
  c->state = GWP_READING;
  arm(c, limits(c)->header_timeout);
  return 0;
}

static int on_piece(http_parser *p, int kind, const char *at, size_t len) {
  gwp_conn *c = p->data;
  gwp_req *r = req_of(p);
  const lk_gw_listen *l = limits(c);
  r->head_bytes += len;
  if (r->head_bytes > l->max_header_bytes)
    return fail(c, kind == 1 ? 414 : 431);
  bool fresh = r->last_cb != kind;
  if (fresh && kind == 2 && (int)(r->nh / 2) >= l->max_headers)
    return fail(c, 431);
  if (fresh && r->last_cb != 0) {
    if (!head_put(r, "", 0, true))
      return fail(c, 500);
  }
  if (fresh && kind != 1 && !off_push(r, r->head_len))
    return fail(c, 500);
  if (!head_put(r, at, len, false))
    return fail(c, 500);
  r->last_cb = kind;
  return 0;
}

/* RFC 9112 5.2: a header value that starts a line (LF, then only SP/HT) is obs-fold, a
 * continuation line. http-parser 2.9 adds it to the value above it ("Host: x\r\n Folded: y"
 * reads as Host "x Folded: y"), and servers behind would each read it their own way: refused
 * with 400, as nginx and HAProxy do. Any other value piece follows its field's colon (and OWS)
 * or, when a read ended inside it, its previous piece at the end of that read. */
static bool obs_fold(const gwp_conn *c, const char *at) {
  const char *q = at;
  while (q > exec_start && (q[-1] == ' ' || q[-1] == '\t'))
    q--;
  if (q > exec_start)
    return q[-1] == '\n';
  return ((const conn_parse *)c)->tail_lf; /* the line break may have ended the previous read */
}

static int on_url(http_parser *p, const char *at, size_t len) { return on_piece(p, 1, at, len); }
static int on_field(http_parser *p, const char *at, size_t len) { return on_piece(p, 2, at, len); }
static int on_value(http_parser *p, const char *at, size_t len) {
  gwp_req *r = req_of(p);
  /* an empty piece adds nothing (the parser reports an empty value where the next line starts) */
  if (len > 0 && obs_fold(p->data, at))
    return fail(p->data, 400);
  if (r->last_cb == 2 || r->last_cb == 3)
    return on_piece(p, 3, at, len);
  return -1;
}

const char *gwp_req_header(const gwp_req *r, const char *name) {
  for (size_t i = 0; i + 1 < r->nh; i += 2)
    if (strcasecmp(r->head + r->hoff[i], name) == 0)
      return r->head + r->hoff[i + 1];
  return NULL;
}

static void dispatch(gwp_conn *c);
static void read_start(gwp_conn *c);

static void on_continue_written(uv_write_t *w, int status) {
  (void)status;
  free(w);
}

/* RFC 9112 6.1 and 6.3: chunked is the only transfer coding understood here. http-parser takes
 * "gzip, chunked" for chunked and the gzip coding would be dropped unsaid (the body forwarded
 * still compressed, as if it were not): another coding is 501 (a SHOULD), and a list in which
 * chunked is not the last coding, or comes twice, leaves the body's length unknown: 400 (a
 * MUST). 0 when the request's codings are fine (or it has none). */
static int transfer_coding_status(const gwp_req *r) {
  bool te = false, last_chunked = false;
  int chunked = 0, other = 0;
  for (size_t i = 0; i + 1 < r->nh; i += 2) {
    if (strcasecmp(r->head + r->hoff[i], "Transfer-Encoding") != 0)
      continue;
    te = true;
    for (const char *v = r->head + r->hoff[i + 1];;) {
      v += strspn(v, " \t,"); /* OWS and empty list elements */
      if (!*v)
        break;
      size_t n = strcspn(v, ","), t = n;
      while (t > 0 && (v[t - 1] == ' ' || v[t - 1] == '\t'))
        t--;
      last_chunked = t == 7 && strncasecmp(v, "chunked", 7) == 0;
      chunked += last_chunked;
      other += !last_chunked;
      v += n;
    }
  }
  if (!te)
    return 0;
  if (!last_chunked || chunked > 1)
    return 400;
  return other > 0 ? 501 : 0;
}

static int on_headers_complete(http_parser *p) {
  gwp_conn *c = p->data;
  gwp_req *r = req_of(p);
  if (!head_put(r, "", 0, true)) /* terminates the last value (or the URL) */
    return fail(c, 500);
  if (r->last_cb == 2) /* a field without a value: http-parser does not allow it anyway */
    return fail(c, 400);
  if (r->nh % 2) /* a name whose value was empty: give it one */
    if (!off_push(r, r->head_len - 1))
      return fail(c, 500);
  /* RFC 9110 5.5: the whitespace around a field value is not part of it; http-parser drops the
   * leading one only ("Linkd-Deadline: 100 " is 100, and no value goes upstream with it) */
  for (size_t i = 1; i < r->nh; i += 2) {
    char *v = r->head + r->hoff[i];
    size_t n = strlen(v);
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
      v[--n] = '\0';
  }
  r->method = p->method;
  r->major = p->http_major;
  r->minor = p->http_minor;
  r->keep_alive = http_should_keep_alive(p);
  if (r->major != 1 || r->minor > 1)
    return fail(c, 505);
  int te = transfer_coding_status(r);
  if (te)
    return fail(c, te);
  /* RFC 9112 3.2: a 1.1 request without Host (or with two) is refused */
  if (r->minor == 1 && !c->admin) {
    int hosts = 0;
    for (size_t i = 0; i + 1 < r->nh; i += 2)
      hosts += strcasecmp(r->head + r->hoff[i], "Host") == 0;
    if (hosts != 1)
      return fail(c, 400);
  }
  const lk_gw_listen *l = limits(c);
  uint64_t max_body = body_limit(c);
  if (max_body > 0 && p->content_length != ULLONG_MAX && p->content_length > max_body)
    return fail(c, 413);
  r->content_length = p->content_length;
  const char *ex = gwp_req_header(r, "Expect");
  if (ex) {
    if (strcasecmp(ex, "100-continue") != 0)
      return fail(c, 417);
    if (r->major == 1 && r->minor >= 1) {
      /* the client waits for this before it sends the body */
      static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
      uv_write_t *w = malloc(sizeof *w);
      if (!w)
        return fail(c, 500);
      uv_buf_t b = uv_buf_init((char *)cont, sizeof cont - 1);
      if (uv_write(w, (uv_stream_t *)&c->tcp, &b, 1, on_continue_written) != 0) {
        free(w);
        return fail(c, 500);
      }
      r->continue_sent = true;
    }
  }
  /* A declared body larger than the replay buffer goes upstream as it arrives: the call starts
   * now and pulls the body from the request's buffer (gwp_proxy.c) */
  if (!c->admin && r->content_length != ULLONG_MAX && r->content_length > l->body_buffer) {
    r->streaming = true;
    c->state = GWP_STREAMING;
    dispatch(c);
    if (c->state == GWP_CLOSING)
      return -1;
  }
  return 0;
}

static int on_body(http_parser *p, const char *at, size_t len) {
  gwp_conn *c = p->data;
  gwp_req *r = req_of(p);
  uint64_t max_body = body_limit(c);
  if (r->streaming) {
    if (c->state != GWP_STREAMING)
      return 0; /* answered already: the rest of the body is read and dropped */
    if (r->body_off > 0) { /* what upstream took makes room at the front */
      memmove(r->body, r->body + r->body_off, r->body_len - r->body_off);
      r->body_len -= r->body_off;
      r->body_off = 0;
    }
  } else if (max_body > 0 && r->body_len + len > max_body) {
    return fail(c, 413);
  }
  if (r->body_len + len > r->body_cap) {
    size_t cap = r->body_cap ? r->body_cap : 1024;
    while (cap < r->body_len + len)
      cap *= 2;
    char *n = realloc(r->body, cap);
    if (!n)
      return fail(c, 500);
    r->body = n;
    r->body_cap = cap;
  }
  memcpy(r->body + r->body_len, at, len);
  r->body_len += len;
  if (r->streaming) {
    /* a bounded buffer: past it the client waits until upstream has taken some */
    if (r->body_len - r->body_off >= GWP_STREAM_MAX)
      read_stop(c);
    lk_http_request_body_ready(r->hr);
  }
  return 0;
}

static int on_message_complete(http_parser *p) {
  gwp_conn *c = p->data;
  gwp_req *r = req_of(p);
  if (r->streaming) {
    r->body_done = true;
    if (c->state == GWP_STREAMING)
      c->state = GWP_BUSY;
    http_parser_pause(p, 1);
    return 0;
  }
  c->state = GWP_BUSY;
  http_parser_pause(p, 1); /* the rest of the buffer waits for this request's answer */
  return 0;
}

static const http_parser_settings SETTINGS = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_field,
    .on_header_value = on_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* --- reading -----------------------------------------------------------------------------------
 */

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
  (void)hint;
  gwp_conn *c = h->data;
  *b = uv_buf_init(c->srv->rbuf, sizeof c->srv->rbuf);
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b);

static void dispatch(gwp_conn *c) {
  gwp_req *r = c->req;
  uv_timer_stop(&c->timer);
  c->srv->nbusy++;
  if (c->admin)
    gwp_admin_dispatch(r);
  else
    gwp_proxy_dispatch(r);
}

static int status_for_parse_error(enum http_errno e) {
  switch (e) {
  case HPE_HEADER_OVERFLOW: return 431;
  default: return 400;
  }
}


static void read_start(gwp_conn *c) {
  if (!c->reading) {
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    c->reading = true;
  }
}

void gwp_conn_resume_body(gwp_conn *c) {
  if (c->state == GWP_STREAMING)
    read_start(c);
}

static bool pending_add(gwp_conn *c, const char *data, size_t len) {
  char *n = realloc(c->pending, c->pending_len + len);
  if (!n)
    return false;
  memcpy(n + c->pending_len, data, len);
  c->pending = n;
  c->pending_len += len;
  return true;
}

/* Parses `len` bytes; keeps what follows a complete request in c->pending. */
static void feed(gwp_conn *c, const char *data, size_t len) {
  http_parser *p = &c->parser;
  const char *outer = exec_start;
  exec_start = data;
  size_t done = http_parser_execute(p, &SETTINGS, data, len);
  exec_start = outer;
  enum http_errno e = HTTP_PARSER_ERRNO(p);
  if (e == HPE_OK) {
    /* for obs_fold: a value at the start of the next read continues a line only if this one
     * did not end with a line break (and blanks) */
    size_t i = len;
    while (i > 0 && (data[i - 1] == ' ' || data[i - 1] == '\t'))
      i--;
    if (i > 0)
      ((conn_parse *)c)->tail_lf = data[i - 1] == '\n';
  }
  if (e == HPE_PAUSED) {
    http_parser_pause(p, 0);
    size_t rest = len - done;
    if (rest > 0 && !pending_add(c, data + done, rest))
      c->close_after = true;
    /* The socket stays watched while the request is served (no epoll change per request); what
     * arrives meanwhile waits in `pending`, up to GWP_PENDING_MAX (on_read). */
    if (c->pending_len >= GWP_PENDING_MAX)
      read_stop(c);
    if (!c->req->streaming) /* a streamed request was dispatched at its head */
      dispatch(c);
    return;
  }
  if (e != HPE_OK) {
    if (c->state == GWP_CLOSING)
      return;
    /* a hostile or broken request: answer what is wrong (if a request started) and close */
    read_stop(c);
    if (!c->req && on_message_begin(p) != 0) {
      gwp_conn_close(c);
      return;
    }
    int st = c->req->status ? c->req->status : status_for_parse_error(e);
    c->state = GWP_BUSY;
    c->srv->nbusy++;
    if (!c->admin)
      lk_gw_runtime_observe_unrouted(c->srv->rt, st); /* refused before routing: counted */
    gwp_respond_error(c->req, st, true, NULL);
  }
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b) {
  gwp_conn *c = st->data;
  if (n == 0)
    return;
  bool serving = c->state == GWP_BUSY || c->state == GWP_WRITING;
  if (n < 0) {
    if (n == UV_EOF && serving) {
      /* a client may shut down its side once it has sent its request: it still gets the
       * answer, then the connection closes */
      read_stop(c);
      c->peer_eof = true;
      return;
    }
    /* EOF between requests, or an error: a request half-read is dropped */
    gwp_conn_close(c);
    return;
  }
  c->last_io = gwp_now();
  if (serving) {
    /* pipelined bytes: parsed once the current response is out */
    if (!pending_add(c, b->base, (size_t)n)) {
      gwp_conn_close(c);
      return;
    }
    if (c->pending_len >= GWP_PENDING_MAX)
      read_stop(c);
    return;
  }
  if (c->state == GWP_IDLE && !gwp_draining(c->srv))
    arm(c, limits(c)->header_timeout);
  gwp_server *srv = c->srv; /* c may be gone after feed */
  feed(c, b->base, (size_t)n);
  /* the request submitted leaves now, in the pass that read it, not after the pass's other
   * events from the client's timer */
  lk_http_client_start_submitted(srv->client);
}

/* After a response: the next request, from the pipelined bytes first, then from the socket. */
static void next_request(gwp_conn *c) {
  c->state = GWP_IDLE;
  c->last_io = gwp_now();
  if ((gwp_draining(c->srv) || c->peer_eof) && !c->pending) {
    gwp_conn_close(c);
    return;
  }
  arm(c, limits(c)->idle_timeout);
  if (c->pending) {
    char *data = c->pending;
    size_t len = c->pending_len;
    c->pending = NULL;
    c->pending_len = 0;
    arm(c, limits(c)->header_timeout);
    feed(c, data, len);
    free(data);
    if (c->state == GWP_BUSY || c->state == GWP_WRITING || c->state == GWP_CLOSING)
      return;
  }
  if (!c->reading) {
    if (c->peer_eof) { /* the peer has shut down its side: nothing more will come */
      gwp_conn_close(c);
      return;
    }
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    c->reading = true;
  }
}

/* --- writing -----------------------------------------------------------------------------------
 */

static void on_written(uv_write_t *w, int status) {
  gwp_req *r = w->data;
  gwp_conn *c = r->conn;
  c->req = NULL;
  req_free(r);
  if (c->state == GWP_CLOSING)
    return;
  if (status != 0 || c->close_after) {
    gwp_conn_close(c);
    return;
  }
  next_request(c);
}

const char *gwp_status_text(int status) {
  switch (status) {
  case 200: return "OK";
  case 400: return "Bad Request";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 408: return "Request Timeout";
  case 413: return "Content Too Large";
  case 414: return "URI Too Long";
  case 417: return "Expectation Failed";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 505: return "HTTP Version Not Supported";
  default: return "";
  }
}

static char *put(char *o, const char *s, size_t n) {
  memcpy(o, s, n);
  return o + n;
}

size_t gwp_u64_dec(char *buf, uint64_t v) {
  char tmp[20];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  for (size_t i = 0; i < n; i++)
    buf[i] = tmp[n - 1 - i];
  return n;
}

static bool bodiless(const gwp_req *r, int status) {
  return r->method == HTTP_HEAD || status == 204 || status == 304 ||
         (status >= 100 && status < 200);
}

void gwp_respond(gwp_req *r, int status, const char *reason, const char *extra, const char *body,
                 size_t body_len, lk_http_result *res) {
  gwp_conn *c = r->conn;
  if (!c) { /* the connection closed while the request was served */
    lk_http_result_free(res);
    req_free(r);
    return;
  }
  c->srv->nbusy--;
  r->status = status;
  if (!reason || !*reason)
    reason = gwp_status_text(status);
  /* a streamed body not yet all read leaves bytes in the way of the next request */
  bool close = c->close_after || !r->keep_alive || gwp_draining(c->srv) ||
               (r->streaming && !r->body_done);
  c->close_after = close;
  const char *extra_s = extra ? extra : "";
  size_t cap =
      128 + strlen(reason) + strlen(extra_s) + (r->head_length ? strlen(r->head_length) : 0);
  bool copy_body = !res && body_len > 0;
  if (copy_body)
    cap += body_len;
  r->out = malloc(cap);
  if (!r->out) {
    lk_http_result_free(res);
    gwp_conn_close(c);
    return;
  }
  bool nobody = bodiless(r, status);
  /* Appended by hand: the head's fixed parts take at most 80 of the 128 spare bytes of cap (a
   * status of 10 digits and a length of 20 included), and four snprintf calls were ~8 % of a
   * proxied request's user-space instructions. */
  char *o = r->out;
  o = put(o, "HTTP/1.1 ", 9);
  o += gwp_u64_dec(o, (uint64_t)(unsigned)status);
  *o++ = ' ';
  o = put(o, reason, strlen(reason));
  o = put(o, "\r\n", 2);
  o = put(o, extra_s, strlen(extra_s));
  if (r->method == HTTP_HEAD && r->head_length) {
    /* the length a GET would have had (RFC 9110 9.3.2), not that of the empty body here */
    o = put(o, "Content-Length: ", 16);
    o = put(o, r->head_length, strlen(r->head_length));
    o = put(o, "\r\n", 2);
  } else if (!(status == 204 || status == 304 || (status >= 100 && status < 200))) {
    o = put(o, "Content-Length: ", 16);
    o += gwp_u64_dec(o, (uint64_t)body_len);
    o = put(o, "\r\n", 2);
  }
  if (close)
    o = put(o, "Connection: close\r\n", 19);
  o = put(o, "\r\n", 2);
  size_t head_len = (size_t)(o - r->out);
  if (copy_body && !nobody) {
    memcpy(r->out + head_len, body, body_len);
    head_len += body_len;
  }
  r->res = res;
  uv_buf_t bufs[2] = {uv_buf_init(r->out, (unsigned)head_len), uv_buf_init(NULL, 0)};
  unsigned nb = 1;
  if (res && body_len > 0 && !nobody) {
    bufs[1] = uv_buf_init((char *)body, (unsigned)body_len);
    nb = 2;
  }
  c->state = GWP_WRITING;
  r->wr.data = r;
  /* A response nearly always fits the socket's buffer: written here at once it skips libuv's
   * write request, whose completion stops and restarts the descriptor's POLLOUT interest (one
   * epoll_ctl per response). Not with pipelined bytes waiting: the next request would then be
   * parsed from inside this call (a parser callback or the upstream call's completion). */
  if (!c->pending && c->tcp.write_queue_size == 0) {
    int w = uv_try_write((uv_stream_t *)&c->tcp, bufs, nb);
    if (w < 0 && w != UV_EAGAIN) {
      on_written(&r->wr, w);
      return;
    }
    size_t done = w > 0 ? (size_t)w : 0;
    while (nb > 0 && done >= bufs[0].len) {
      done -= bufs[0].len;
      bufs[0] = bufs[1];
      nb--;
    }
    if (nb == 0) {
      on_written(&r->wr, 0);
      return;
    }
    bufs[0].base += done;
    bufs[0].len -= done;
  }
  if (uv_write(&r->wr, (uv_stream_t *)&c->tcp, bufs, nb, on_written) != 0) {
    c->req = NULL;
    c->state = GWP_IDLE;
    req_free(r);
    gwp_conn_close(c);
  }
}

void gwp_respond_error(gwp_req *r, int status, bool close, const char *extra) {
  if (close && r->conn)
    r->conn->close_after = true;
  char body[64];
  int n = snprintf(body, sizeof body, "%d %s\n", status, gwp_status_text(status));
  char hdr[256];
  snprintf(hdr, sizeof hdr, "Content-Type: text/plain\r\n%s", extra ? extra : "");
  gwp_respond(r, status, NULL, hdr, body, (size_t)n, NULL);
}

/* --- accepting ---------------------------------------------------------------------------------
 */

void gwp_conn_accept(gwp_server *s, uv_stream_t *listener, bool admin) {
  conn_parse *cp = calloc(1, sizeof *cp);
  if (!cp)
    return;
  gwp_conn *c = &cp->c;
  c->srv = s;
  c->admin = admin;
  uv_tcp_init(s->loop, &c->tcp);
  c->tcp.data = c;
  c->handles_open = 1;
  if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
    return;
  }
  uv_timer_init(s->loop, &c->timer);
  c->timer.data = c;
  c->handles_open = 2;
  c->next = s->conns;
  if (s->conns)
    s->conns->prev = c;
  s->conns = c;
  s->nconns++;
  if (atomic_fetch_add(&s->sh->conns_total, 1) + 1 > s->cfg->listen.max_connections && !admin) {
    gwp_log(s, LK_GW_LOG_WARN, "max-connections (%d) reached: closing a new connection",
            s->cfg->listen.max_connections);
    gwp_conn_close(c);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  http_parser_init(&c->parser, HTTP_REQUEST);
  c->parser.data = c;
  c->state = GWP_IDLE;
  c->last_io = gwp_now();
  arm(c, s->cfg->listen.header_timeout);
  uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  c->reading = true;
}

void gwp_close_idle(gwp_server *s, int64_t quiet) {
  int64_t now = gwp_now();
  gwp_conn *c = s->conns;
  while (c) {
    gwp_conn *next = c->next;
    if (c->state == GWP_IDLE && lk_sat_sub(now, c->last_io) >= quiet)
      gwp_conn_close(c);
    c = next;
  }
}
