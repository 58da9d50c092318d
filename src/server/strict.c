/* strict.c: request-head checks on top of libmicrohttpd 0.9.75 (see strict.h). */
#include "strict.h"
#include "server_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* What lk_head_uri_log saw of the current request's target. */
typedef struct conn_note {
  const char *uri; /* where the target starts in MHD's buffer */
  size_t uri_len;  /* its strlen before decoding: short of the version when it held a NUL */
  bool seen;       /* set for each request line, cleared by lk_head_check */
  bool pct_nul;    /* "%00": decodes to a NUL that would cut the path */
  bool bad_byte;   /* whitespace, a control byte or a non-ASCII byte */
} conn_note;

void lk_head_notify_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                               enum MHD_ConnectionNotificationCode code) {
  (void)cls;
  (void)c;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    *socket_context = calloc(1, sizeof(conn_note)); /* NULL: lk_head_check answers 503 */
  } else {
    free(*socket_context);
    *socket_context = NULL;
  }
}

static conn_note *note_of(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

void *lk_head_uri_log(void *cls, const char *uri, struct MHD_Connection *c) {
  (void)cls;
  conn_note *n = note_of(c);
  if (!n)
    return NULL;
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

static const struct {
  const char *name;
  size_t len;
} known[LK_HDR_COUNT] = {
#define K(s)                                                                                       \
  { s, sizeof s - 1 }
    [LK_HDR_HOST] = K("Host"),
    [LK_HDR_CONTENT_LENGTH] = K("Content-Length"),
    [LK_HDR_TRANSFER_ENCODING] = K("Transfer-Encoding"),
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
  conn_note *n = note_of(c);
  if (!n) {
    resp_error(out, 503, "out_of_memory", "no memory for the connection");
    return false;
  }
  conn_note note = *n;
  memset(n, 0, sizeof *n);
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
