/* SPDX-License-Identifier: MIT */
/* strict.c: request-head checks on top of libmicrohttpd 0.9.75 (see strict.h). */
#include "strict.h"
#include "server_impl.h"
#include "util.h"

#include "core/sat.h"

#include <linkd/clock.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* What lk_head_uri_log saw of the current request's target. */
typedef struct target_note {
  const char *uri; /* where the target starts in MHD's buffer */
  size_t uri_len;  /* its strlen before decoding: short of the version when it held a NUL */
  bool seen;       /* set for each request line, cleared by lk_head_check */
  bool pct_nul;    /* "%00": decodes to a NUL that would cut the path */
  bool bad_byte;   /* whitespace, a control byte or a non-ASCII byte */
} target_note;

/* Where a connection is in its current request, for the read deadlines. */
enum { PHASE_HEAD, PHASE_BODY, PHASE_RUN, PHASE_IDLE, PHASE_CUT };

/* One per connection (MHD's socket context), listed in its guard while open. */
typedef struct conn_note {
  target_note target;
  lk_guard *guard;
  struct MHD_Connection *conn;
  int fd;
  _Atomic uintptr_t owner; /* thread_id() of the MHD thread that parses its requests */
  _Atomic int phase;
  _Atomic int64_t since; /* CLOCK_MONOTONIC ns when the phase began */
  struct conn_note *prev, *next;
} conn_note;

struct lk_guard {
  int64_t head_ns, body_ns, idle_ns;
  int log_fd; /* -1: no log */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  conn_note *head;
  bool stop;
  pthread_t thread;
  _Atomic uint64_t cut_head, cut_body;
};

/* A number for the calling thread, unique among live threads: where its own copy of a
 * thread-local lives. */
static _Thread_local char tl_anchor;
static uintptr_t thread_id(void) { return (uintptr_t)&tl_anchor; }

static void set_phase(conn_note *n, int ph) {
  atomic_store(&n->since, lk_now_ns());
  atomic_store(&n->phase, ph);
}

static void cut_log(lk_guard *g, const char *what, int64_t limit_ns) {
  if (g->log_fd < 0)
    return;
  char buf[160];
  int len =
      snprintf(buf, sizeof buf, "libraryd: closed a connection: %s not received within %lld ms\n",
               what, (long long)(limit_ns / LK_NS_PER_MS));
  ssize_t w = write(g->log_fd, buf, (size_t)len);
  (void)w;
}

/* Every tick: a connection whose head (or body) is not complete within its limit is shut down.
 * MHD still owns the descriptor and closes it when it sees the EOF; the list lock is held
 * across shutdown(2) and MHD's close notification takes it before closing the descriptor, so
 * the number is never one that was reused. Each byte resets MHD's idle timer, which is why a
 * client dribbling bytes is only stopped here. */
static void *guard_main(void *arg) {
  lk_guard *g = arg;
  pthread_setname_np(pthread_self(), "lk-guard");
  int64_t tick = g->head_ns < g->body_ns ? g->head_ns : g->body_ns;
  tick /= 10;
  tick = tick < 10 * LK_NS_PER_MS ? 10 * LK_NS_PER_MS : tick;
  tick = tick > 250 * LK_NS_PER_MS ? 250 * LK_NS_PER_MS : tick;
  pthread_mutex_lock(&g->mu);
  while (!g->stop) {
    int64_t due = lk_now_ns() + tick;
    struct timespec ts = {(time_t)(due / LK_NS_PER_S), (long)(due % LK_NS_PER_S)};
    pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    int64_t now = lk_now_ns();
    for (conn_note *n = g->head; n && !g->stop; n = n->next) {
      int ph = atomic_load(&n->phase);
      int64_t age = now - atomic_load(&n->since);
      const char *what = NULL;
      int64_t limit = 0;
      if (ph == PHASE_HEAD && g->head_ns > 0 && age > g->head_ns) {
        what = "the request head";
        limit = g->head_ns;
        atomic_fetch_add(&g->cut_head, 1);
      } else if (ph == PHASE_BODY && g->body_ns > 0 && age > g->body_ns) {
        what = "the request body";
        limit = g->body_ns;
        atomic_fetch_add(&g->cut_body, 1);
      } else if (ph == PHASE_IDLE && g->idle_ns > 0 && age > lk_sat_add(g->idle_ns, g->head_ns)) {
        /* after a response: the next head, dribbled, must still end within idle + head */
        what = "the next request head";
        limit = lk_sat_add(g->idle_ns, g->head_ns);
        atomic_fetch_add(&g->cut_head, 1);
      }
      if (what) {
        atomic_store(&n->phase, PHASE_CUT);
        shutdown(n->fd, SHUT_RDWR);
        cut_log(g, what, limit);
      }
    }
  }
  pthread_mutex_unlock(&g->mu);
  return NULL;
}

lk_guard *lk_guard_new(int64_t head_ns, int64_t body_ns, int64_t idle_ns, int log_fd) {
  lk_guard *g = calloc(1, sizeof *g);
  if (!g)
    return NULL;
  g->head_ns = head_ns;
  g->body_ns = body_ns;
  g->idle_ns = idle_ns;
  g->log_fd = log_fd;
  pthread_mutex_init(&g->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&g->cv, &ca);
  pthread_condattr_destroy(&ca);
  if ((head_ns > 0 || body_ns > 0) && pthread_create(&g->thread, NULL, guard_main, g) != 0) {
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
    return NULL;
  }
  return g;
}

void lk_guard_free(lk_guard *g) {
  if (!g)
    return;
  if (g->head_ns > 0 || g->body_ns > 0) {
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
  }
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
  free(g);
}

uint64_t lk_guard_cut(const lk_guard *g) {
  return atomic_load(&((lk_guard *)g)->cut_head) + atomic_load(&((lk_guard *)g)->cut_body);
}

void lk_head_notify_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                               enum MHD_ConnectionNotificationCode code) {
  lk_guard *g = cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    conn_note *n = calloc(1, sizeof *n); /* NULL: lk_head_check answers 503 */
    *socket_context = n;
    if (!n)
      return;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    n->fd = ci ? ci->connect_fd : -1;
    n->guard = g;
    n->conn = c;
    set_phase(n, PHASE_HEAD); /* the first head is timed from the accept */
    if (g && n->fd >= 0) {
      pthread_mutex_lock(&g->mu);
      n->next = g->head;
      if (g->head)
        g->head->prev = n;
      g->head = n;
      pthread_mutex_unlock(&g->mu);
    }
  } else {
    conn_note *n = *socket_context;
    if (n && n->guard && n->fd >= 0) {
      lk_guard *ng = n->guard;
      pthread_mutex_lock(&ng->mu);
      if (n->prev)
        n->prev->next = n->next;
      else
        ng->head = n->next;
      if (n->next)
        n->next->prev = n->prev;
      pthread_mutex_unlock(&ng->mu);
    }
    free(n);
    *socket_context = NULL;
  }
}

static conn_note *note_of(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

void lk_head_body_done(struct MHD_Connection *c) {
  conn_note *n = note_of(c);
  if (n && atomic_load(&n->phase) == PHASE_BODY)
    set_phase(n, PHASE_RUN);
}

void lk_head_taken(struct MHD_Connection *c) {
  conn_note *n = note_of(c);
  if (n)
    n->target.seen = false;
}

void lk_head_request_done(struct MHD_Connection *c) {
  conn_note *n = note_of(c);
  if (n && atomic_load(&n->phase) != PHASE_CUT)
    set_phase(n, PHASE_IDLE);
}

void *lk_head_uri_log(void *cls, const char *uri, struct MHD_Connection *c) {
  (void)cls;
  conn_note *cn = note_of(c);
  if (!cn)
    return NULL;
  if (atomic_load(&cn->phase) == PHASE_IDLE) /* keep-alive: the next head is timed from here */
    set_phase(cn, PHASE_HEAD);
  atomic_store(&cn->owner, thread_id());
  target_note *n = &cn->target;
  memset(n, 0, sizeof *n);
  n->seen = true;
  if (!uri)
    return NULL;
  n->uri = uri;
  n->uri_len = strlen(uri);
  for (size_t i = 0; i < n->uri_len; i++) {
    unsigned char b = (unsigned char)uri[i];
    if (b <= 0x20 || b >= 0x7f)
      n->bad_byte = true;
    if (b == '%' && uri[i + 1] == '0' && uri[i + 2] == '0')
      n->pct_nul = true;
  }
  return NULL;
}

/* --- Content-Length values libmicrohttpd refuses itself ------------------------------------ */

/* What 0.9.75's parse_connection_headers() logs just before it queues its own error response:
 * for a value that is not 1*DIGIT (-1, +2, abc) and for a number of 2^64 or more. */
static const char cl_malformed_msg[] =
    "Failed to parse `Content-Length' header. Closing connection.\n";
static const char cl_too_large_msg[] =
    "Too large value of 'Content-Length' header. Closing connection.\n";

/* The connection whose head MHD is refusing on this thread now, or NULL when that is not
 * certain. The log callback does not say which connection it is about, but the message is
 * logged while that connection is in MHD_CONNECTION_HEADERS_RECEIVED, on the thread that owns
 * it, before any response is queued; MHD passes every other connection of the thread through
 * that state and into the first handler call (which clears target.seen) within one step, so
 * exactly one of the thread's connections has its request line seen, its head complete
 * (REQUEST_HEADER_SIZE is known from HEADERS_RECEIVED on) and no response. Called with the
 * guard's lock held; only this thread's connections are inspected. */
static conn_note *refused_now(lk_guard *g) {
  uintptr_t me = thread_id();
  conn_note *found = NULL;
  int count = 0;
  for (conn_note *cn = g->head; cn; cn = cn->next) {
    if (atomic_load(&cn->owner) != me || !cn->target.seen)
      continue;
    if (!MHD_get_connection_info(cn->conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE))
      continue; /* head incomplete, or closed */
    if (MHD_get_connection_info(cn->conn, MHD_CONNECTION_INFO_HTTP_STATUS))
      continue; /* answered already */
    found = cn;
    count++;
  }
  return count == 1 ? found : NULL;
}

/* Writes the one response the client gets and shuts the socket down: MHD's own response then
 * fails to send (EPIPE) and MHD closes the connection, so its doubled header block never
 * leaves. The response fits in the socket buffer of a connection whose previous responses the
 * client read; when it does not fit whole, the connection is reset instead, so a client never
 * reads a truncated response as a complete one. No thread waits. */
static void answer_content_length(conn_note *cn, bool too_large) {
  lk_resp r;
  resp_init(&r, 500);
  if (too_large)
    resp_error(&r, 413, "body_too_large", "Content-Length does not fit in 64 bits");
  else
    resp_error(&r, 400, "bad_header", "Content-Length is not a decimal number");
  char date[64];
  lk_http_date(lk_wall_ns(), date, sizeof date);
  char head[LK_RESP_HDR_MAX + 256];
  size_t hl =
      (size_t)snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\nDate: %s\r\nConnection: close\r\n",
                       r.status, MHD_get_reason_phrase_for((unsigned)r.status), date);
  for (const char *p = r.headers; *p && hl < sizeof head;) { /* "Name: value\n" lines */
    size_t n = strcspn(p, "\n");
    hl += (size_t)snprintf(head + hl, sizeof head - hl, "%.*s\r\n", (int)n, p);
    p += n + (p[n] == '\n');
  }
  if (hl < sizeof head)
    hl += (size_t)snprintf(head + hl, sizeof head - hl, "Content-Length: %zu\r\n\r\n", r.body_len);
  ssize_t sent = -1;
  if (hl < sizeof head) {
    struct iovec iov[2] = {{head, hl}, {r.body, r.body_len}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = r.body_len ? 2 : 1};
    sent = sendmsg(cn->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  if (sent == (ssize_t)(hl + r.body_len)) {
    shutdown(cn->fd, SHUT_RDWR);
  } else {
    struct sockaddr sa; /* connect(AF_UNSPEC) disconnects: RST */
    memset(&sa, 0, sizeof sa);
    sa.sa_family = AF_UNSPEC;
    (void)connect(cn->fd, &sa, sizeof sa);
  }
  atomic_store(&cn->phase, PHASE_CUT); /* answered: no read deadline applies any more */
  resp_free(&r);
}

/* Set on the thread that answered, until its next message: transmit_error_response_len()
 * logs "Error processing request (HTTP response code is ...)" right after, about the response
 * libraryd kept from being sent. */
static _Thread_local bool tl_mute_mhd_error;

bool lk_head_mhd_log(lk_guard *g, const char *fmt) {
  if (!g || !fmt)
    return false;
  if (tl_mute_mhd_error) {
    tl_mute_mhd_error = false;
    if (!strncmp(fmt, "Error processing request", 24))
      return true;
  }
  bool too_large = !strcmp(fmt, cl_too_large_msg);
  if (!too_large && strcmp(fmt, cl_malformed_msg))
    return false;
  pthread_mutex_lock(&g->mu);
  conn_note *cn = refused_now(g);
  if (cn)
    answer_content_length(cn, too_large);
  pthread_mutex_unlock(&g->mu);
  if (!cn)
    return false; /* not certain which connection: MHD answers, as without this hook */
  tl_mute_mhd_error = true;
  if (g->log_fd >= 0) {
    char line[160];
    int len = snprintf(line, sizeof line, "libraryd: refused a request head: %s\n",
                       too_large ? "Content-Length does not fit in 64 bits (413)"
                                 : "Content-Length is not a decimal number (400)");
    ssize_t w = write(g->log_fd, line, (size_t)len);
    (void)w;
  }
  return true;
}

static const struct {
  const char *name;
  size_t len;
} known[LK_HDR_COUNT] = {
#define K(s)                                                                                       \
  { s, sizeof s - 1 }
    [LK_HDR_HOST] = K("Host"),
    [LK_HDR_CONTENT_LENGTH] = K("Content-Length"),
    [LK_HDR_TRANSFER_ENCODING] = K("Transfer-Encoding"),
    [LK_HDR_CONTENT_TYPE] = K("Content-Type"),
    [LK_HDR_IDEMPOTENCY_KEY] = K("Idempotency-Key"),
    [LK_HDR_API_KEY] = K("X-API-Key"),
    [LK_HDR_TENANT] = K("X-Tenant"),
    [LK_HDR_REQUEST_ID] = K("X-Request-Id"),
    [LK_HDR_LINKD_DEADLINE] = K("Linkd-Deadline"),
    [LK_HDR_GRPC_TIMEOUT] = K("grpc-timeout"),
    [LK_HDR_LINKD_ATTEMPT] = K("Linkd-Attempt"),
#undef K
};

/* RFC 9110 §5.6.2 tchar. */
static bool tchar(unsigned char b) {
  return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') ||
         (b && strchr("!#$%&'*+-.^_`|~", b));
}

static bool ows(char b) { return b == ' ' || b == '\t'; }

/* The walk over MHD's copy of the head: p is where the next field line must start. */
typedef struct walk {
  const char *p, *end;
  const char *val[LK_HDR_COUNT];
  size_t len[LK_HDR_COUNT];
  size_t te_raw_len; /* Transfer-Encoding with its trailing whitespace, as MHD compares it */
  int status;        /* 0 while fine */
  const char *code;
  char msg[160];
} walk;

static enum MHD_Result fail(walk *w, int status, const char *code, const char *msg,
                            const char *name, size_t nlen) {
  w->status = status;
  w->code = code;
  snprintf(w->msg, sizeof w->msg, "%s%s%.*s%s", msg, name ? " ('" : "",
           (int)(nlen > 60 ? 60 : nlen), name ? name : "", name ? "')" : "");
  return MHD_NO;
}

static bool inside(const walk *w, const char *q, size_t n) {
  return (uintptr_t)q >= (uintptr_t)w->p && (uintptr_t)q <= (uintptr_t)w->end &&
         n <= (size_t)(w->end - q);
}

/* Consumes the CR LF that MHD turned into two NULs; a bare LF (one NUL followed by text) or an
 * embedded NUL (text after a NUL) fails. */
static bool crlf(walk *w) {
  if (!inside(w, w->p, 2) || w->p[0] != '\0' || w->p[1] != '\0')
    return false;
  w->p += 2;
  return true;
}

static enum MHD_Result on_field(void *cls, enum MHD_ValueKind kind, const char *key, size_t klen,
                                const char *value, size_t vlen) {
  (void)kind;
  walk *w = cls;
  if (!key || !value)
    return fail(w, 400, "bad_header", "a header field without a value", NULL, 0);
  /* The line starts where the previous one ended: anything else means MHD joined or moved it
   * (an obs-fold continuation line, RFC 9112 §5.2 lets a server refuse it). */
  if (key != w->p || !inside(w, key, klen + 1) || key[klen] != '\0')
    return fail(w, 400, "bad_header", "a folded or malformed header line", key, klen);
  if (klen == 0)
    return fail(w, 400, "bad_header", "an empty header field name", NULL, 0);
  for (size_t i = 0; i < klen; i++)
    if (!tchar((unsigned char)key[i]))
      return fail(w, 400, "bad_header",
                  ows(key[i]) ? "whitespace between a header field name and its colon"
                              : "a header field name with a character outside RFC 9110 tokens",
                  key, klen);
  const char *q = key + klen + 1;
  while (q < value && inside(w, q, 1) && ows(*q))
    q++;
  if (q != value || !inside(w, value, vlen))
    return fail(w, 400, "bad_header", "a malformed header line", key, klen);
  for (size_t i = 0; i < vlen; i++) {
    unsigned char b = (unsigned char)value[i];
    if ((b < 0x20 && b != '\t') || b == 0x7f)
      return fail(w, 400, "bad_header", "a control character in the value of", key, klen);
  }
  size_t raw_len = vlen;
  w->p = value + vlen;
  if (!crlf(w))
    return fail(w, 400, "bad_header", "a NUL byte or a line not ending in CR LF in the value of",
                key, klen);
  while (vlen > 0 && ows(value[vlen - 1])) /* RFC 9110 §5.5: OWS is not part of the value */
    vlen--;
  for (int h = 0; h < LK_HDR_COUNT; h++) {
    if (klen != known[h].len || strncasecmp(key, known[h].name, klen))
      continue;
    if (w->val[h]) {
      if (h == LK_HDR_TRANSFER_ENCODING)
        return fail(w, 501, "unsupported_transfer_coding",
                    "only one Transfer-Encoding: chunked is supported", NULL, 0);
      return fail(w, 400, h == LK_HDR_IDEMPOTENCY_KEY ? "bad_idempotency_key" : "bad_header",
                  "more than one header line", known[h].name, known[h].len);
    }
    w->val[h] = value;
    w->len[h] = vlen;
    if (h == LK_HDR_TRANSFER_ENCODING)
      w->te_raw_len = raw_len;
  }
  return MHD_YES;
}

/* 1*DIGIT, saturating at INT64_MAX (far beyond any body limit). */
static bool content_length(const char *v, size_t n, int64_t *out) {
  if (n == 0)
    return false;
  int64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    if (v[i] < '0' || v[i] > '9')
      return false;
    int d = v[i] - '0';
    x = x > (INT64_MAX - d) / 10 ? INT64_MAX : x * 10 + d;
  }
  *out = x;
  return true;
}

static bool refuse(walk *w, struct lk_resp *out) {
  resp_error(out, w->status, w->code, "%s", w->msg);
  return false;
}

bool lk_head_check(struct MHD_Connection *c, const char *method, const char *url,
                   const char *version, lk_head *h, struct lk_resp *out) {
  memset(h, 0, sizeof *h);
  h->content_length = -1;
  walk w;
  memset(&w, 0, sizeof w);
  conn_note *cn = note_of(c);
  if (!cn) {
    resp_error(out, 503, "out_of_memory", "no memory for the connection");
    return false;
  }
  if (atomic_load(&cn->phase) != PHASE_CUT)
    set_phase(cn, PHASE_BODY); /* the head is in: the body deadline starts */
  target_note note = cn->target;
  memset(&cn->target, 0, sizeof cn->target);
  /* The target ends right before the version (MHD put a NUL on the space between them); when
   * its strlen stops short, a NUL byte inside it would have cut the path. */
  if (!note.seen || note.uri != url || url + note.uri_len + 1 != version) {
    fail(&w, 400, "bad_target", "a NUL byte in the request target", NULL, 0);
    return refuse(&w, out);
  }
  if (note.pct_nul) {
    fail(&w, 400, "bad_target", "%00 in the request target", NULL, 0);
    return refuse(&w, out);
  }
  if (note.bad_byte) {
    fail(&w, 400, "bad_target", "whitespace, a control or a non-ASCII byte in the request target",
         NULL, 0);
    return refuse(&w, out);
  }
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
  if (!ci) {
    fail(&w, 400, "bad_header", "the request head could not be inspected", NULL, 0);
    return refuse(&w, out);
  }
  w.p = version + strlen(version);
  w.end = method + ci->header_size;
  if ((uintptr_t)w.p < (uintptr_t)method || (uintptr_t)w.p > (uintptr_t)w.end || !crlf(&w)) {
    fail(&w, 400, "bad_header", "a request line not ending in CR LF", NULL, 0);
    return refuse(&w, out);
  }
  MHD_get_connection_values_n(c, MHD_HEADER_KIND, on_field, &w);
  if (w.status)
    return refuse(&w, out);
  if (!crlf(&w) || w.p != w.end) { /* the empty line that ends the head */
    fail(&w, 400, "bad_header", "a NUL byte or a bare LF in the request head", NULL, 0);
    return refuse(&w, out);
  }
  /* RFC 9112 §3.2: HTTP/1.1 needs exactly one Host (a second one failed above). */
  if (!strcmp(version, MHD_HTTP_VERSION_1_1) && !w.val[LK_HDR_HOST]) {
    fail(&w, 400, "bad_header", "an HTTP/1.1 request without Host", NULL, 0);
    return refuse(&w, out);
  }
  if (w.val[LK_HDR_TRANSFER_ENCODING]) {
    /* MHD decodes chunked only, and only when the value is exactly that word (trailing
     * whitespace included); with anything else it would wait for a body it cannot delimit
     * until the idle timeout. */
    if (w.te_raw_len != 7 || strncasecmp(w.val[LK_HDR_TRANSFER_ENCODING], "chunked", 7)) {
      fail(&w, 501, "unsupported_transfer_coding", "only Transfer-Encoding: chunked is supported",
           NULL, 0);
      return refuse(&w, out);
    }
    if (w.val[LK_HDR_CONTENT_LENGTH]) { /* RFC 9112 §6.1: a smuggling vector */
      fail(&w, 400, "bad_header", "both Transfer-Encoding and Content-Length", NULL, 0);
      return refuse(&w, out);
    }
  }
  if (w.val[LK_HDR_CONTENT_LENGTH] &&
      !content_length(w.val[LK_HDR_CONTENT_LENGTH], w.len[LK_HDR_CONTENT_LENGTH],
                      &h->content_length)) {
    fail(&w, 400, "bad_header", "Content-Length is not a decimal number", NULL, 0);
    return refuse(&w, out);
  }
  size_t total = 0;
  for (int i = 0; i < LK_HDR_COUNT; i++)
    total += w.val[i] ? w.len[i] + 1 : 0;
  if (total) {
    h->arena = malloc(total);
    if (!h->arena) {
      h->content_length = -1;
      resp_error(out, 503, "out_of_memory", "no memory for the request head");
      return false;
    }
    char *a = h->arena;
    for (int i = 0; i < LK_HDR_COUNT; i++) {
      if (!w.val[i])
        continue;
      memcpy(a, w.val[i], w.len[i]);
      a[w.len[i]] = '\0';
      h->v[i] = a;
      a += w.len[i] + 1;
    }
  }
  return true;
}

void lk_head_free(lk_head *h) {
  free(h->arena);
  memset(h, 0, sizeof *h);
  h->content_length = -1;
}
