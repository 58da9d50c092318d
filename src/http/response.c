/* SPDX-License-Identifier: MIT */
/* Response accumulation: header lines and body bytes as libcurl delivers them. */
#include "http_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

void lk__resp_reset(lk_resp *r) {
  r->status = 0;
  r->version = 0;
  r->reason[0] = '\0';
  r->status_seen = false;
  r->headers_done = false;
  r->hdr_len = r->nhdr = 0;
  r->body_len = 0;
  r->wire_len = 0;
  r->decoded = false;
  r->complete = false;
}

void lk__resp_free(lk_resp *r) {
  if (!r->borrowed) {
    free(r->hdr);
    free(r->body);
    free(r->views);
  }
  memset(r, 0, sizeof *r);
}

static bool grow(char **buf, size_t *cap, size_t need) {
  if (need <= *cap)
    return true;
  size_t nc = *cap ? *cap : 256;
  while (nc < need) {
    if (nc > SIZE_MAX / 2)
      return false;
    nc *= 2;
  }
  char *nb = realloc(*buf, nc);
  if (!nb)
    return false;
  *buf = nb;
  *cap = nc;
  return true;
}

static bool blank(char ch) { return ch == ' ' || ch == '\t'; }

/* "1.1" -> 11, "1.0" -> 10, "2" or "2.0" -> 20, "3" -> 30; anything else 0. libcurl writes
 * HTTP/2 and HTTP/3 status lines as "HTTP/2 200". */
static int status_version(const char *v, size_t len) {
  if (len == 1 && v[0] >= '1' && v[0] <= '9')
    return (v[0] - '0') * 10;
  if (len == 3 && v[0] >= '1' && v[0] <= '9' && v[1] == '.' && v[2] >= '0' && v[2] <= '9')
    return (v[0] - '0') * 10 + (v[2] - '0');
  return 0;
}

/* Keeps the reason phrase without its trailing blanks, cut to fit; a NUL inside ends it (the
 * view is a C string). */
static void set_reason(lk_resp *r, const char *p, size_t len) {
  while (len && blank(p[len - 1]))
    len--;
  const char *nul = memchr(p, '\0', len);
  if (nul)
    len = (size_t)(nul - p);
  if (len > sizeof r->reason - 1)
    len = sizeof r->reason - 1;
  memcpy(r->reason, p, len);
  r->reason[len] = '\0';
}

bool lk__resp_header_line(lk_resp *r, const char *line, size_t len) {
  while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
    len--;
  if (len == 0) {
    /* end of a header block; an interim 1xx block is followed by the real one */
    if (r->status >= 200 || r->status == 0)
      r->headers_done = true;
    return true;
  }
  if (len > 5 && memcmp(line, "HTTP/", 5) == 0) {
    /* a status line starts a new response: forget an interim one's headers */
    r->hdr_len = r->nhdr = 0;
    r->headers_done = false;
    r->status_seen = true;
    const char *sp = memchr(line, ' ', len);
    int st = 0;
    r->reason[0] = '\0';
    r->version = status_version(line + 5, sp ? (size_t)(sp - line) - 5 : len - 5);
    if (sp) {
      size_t i = (size_t)(sp - line) + 1;
      int n = 0;
      for (; i < len && line[i] >= '0' && line[i] <= '9' && n < 3; i++, n++)
        st = st * 10 + (line[i] - '0');
      if (n != 3 || (i < len && line[i] != ' ' && line[i] != '\r' && line[i] != '\n'))
        st = 0; /* "2000" is not a status (RFC 9112 section 4: 3DIGIT, then SP) */
      else if (i < len && line[i] == ' ')
        set_reason(r, line + i + 1, len - i - 1);
    }
    r->status = st;
    return true;
  }
  const char *colon = memchr(line, ':', len);
  if (!colon || colon == line)
    return true; /* not a header line (obs-fold or junk): ignored */
  const char *v = colon + 1;
  return lk__resp_header(r, line, (size_t)(colon - line), v, (size_t)(line + len - v));
}

bool lk__resp_header(lk_resp *r, const char *name, size_t nl, const char *v, size_t vl) {
  while (vl && blank(*v))
    v++, vl--;
  while (vl && blank(v[vl - 1]))
    vl--;
  if (!grow(&r->hdr, &r->hdr_cap, r->hdr_len + nl + vl + 2))
    return false;
  memcpy(r->hdr + r->hdr_len, name, nl);
  r->hdr[r->hdr_len + nl] = '\0';
  memcpy(r->hdr + r->hdr_len + nl + 1, v, vl);
  r->hdr[r->hdr_len + nl + 1 + vl] = '\0';
  r->hdr_len += nl + vl + 2;
  r->nhdr++;
  return true;
}

void lk__resp_reason_add(lk_resp *r, const char *p, size_t len) {
  size_t have = strlen(r->reason);
  if (have + len > sizeof r->reason - 1)
    len = sizeof r->reason - 1 - have;
  const char *nul = memchr(p, '\0', len);
  if (nul)
    len = (size_t)(nul - p);
  memcpy(r->reason + have, p, len);
  r->reason[have + len] = '\0';
}

bool lk__resp_body(lk_resp *r, const char *data, size_t len, size_t max, bool *too_big) {
  if (len > max || r->body_len > max - len) {
    *too_big = true;
    return false;
  }
  if (!grow(&r->body, &r->body_cap, r->body_len + len + 1))
    return false;
  memcpy(r->body + r->body_len, data, len);
  r->body_len += len;
  return true;
}

/* Fills r->views (room for nhdr entries) and r->view from the buffers. */
static void fill_view(lk_resp *r) {
  const char *p = r->hdr;
  for (size_t i = 0; i < r->nhdr; i++) {
    r->views[i].name = p;
    p += strlen(p) + 1;
    r->views[i].value = p;
    p += strlen(p) + 1;
  }
  if (r->body)
    r->body[r->body_len] = '\0';
  r->view.status = r->status;
  r->view.headers = r->views;
  r->view.header_count = r->nhdr;
  r->view.body = r->body ? r->body : "";
  r->view.body_len = r->body_len;
  r->view.complete = r->complete;
  r->view.version = r->version;
  r->view.reason = r->reason;
}

bool lk__resp_view(lk_resp *r) {
  free(r->views);
  r->views = NULL;
  if (r->nhdr && !(r->views = malloc(r->nhdr * sizeof *r->views)))
    return false;
  fill_view(r);
  return true;
}

bool lk__resp_settle(lk_resp *r, char *space, size_t cap, lk_resp *spare) {
  /* nhdr <= hdr_len / 2, so the sum cannot overflow once both lengths are <= cap */
  size_t vsz = r->nhdr * sizeof *r->views;
  if (r->borrowed) {
    fill_view(r); /* the struct may have moved since: the view's reason points into it */
    return true;
  }
  if (r->hdr_len > cap || r->body_len > cap || vsz + r->hdr_len + r->body_len + 1 > cap)
    return lk__resp_view(r);
  char *h = space + vsz, *b = h + r->hdr_len;
  if (r->hdr_len)
    memcpy(h, r->hdr, r->hdr_len);
  if (r->body_len)
    memcpy(b, r->body, r->body_len);
  lk__resp_free(spare);
  spare->hdr = r->hdr;
  spare->hdr_cap = r->hdr_cap;
  spare->body = r->body;
  spare->body_cap = r->body_cap;
  spare->views = r->views;
  r->hdr = h;
  r->body = b;
  r->views = (lk_http_header *)(void *)space;
  r->hdr_cap = r->body_cap = 0;
  r->borrowed = true;
  fill_view(r);
  return true;
}

const char *lk__resp_find(const lk_resp *r, const char *name) {
  const char *p = r->hdr;
  for (size_t i = 0; i < r->nhdr; i++) {
    const char *v = p + strlen(p) + 1;
    if (strcasecmp(p, name) == 0)
      return v;
    p = v + strlen(v) + 1;
  }
  return NULL;
}

const char *lk_http_response_header(const lk_http_response *resp, const char *name) {
  if (!resp || !name)
    return NULL;
  for (size_t i = 0; i < resp->header_count; i++)
    if (strcasecmp(resp->headers[i].name, name) == 0)
      return resp->headers[i].value;
  return NULL;
}

/* Parses one Content-Length value: a comma-separated list of 1*DIGIT (RFC 9110 8.6; identical
 * repeats are allowed, RFC 9112 6.3). Returns false on anything else, an overflow, or
 * elements that differ; *v keeps the value across calls (-1: none yet). */
static bool length_value(const char *p, int64_t *v) {
  for (;;) {
    while (*p == ' ' || *p == '\t')
      p++;
    if (*p < '0' || *p > '9')
      return false;
    int64_t n = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
      if (n > (INT64_MAX - (*p - '0')) / 10)
        return false;
      n = n * 10 + (*p - '0');
    }
    while (*p == ' ' || *p == '\t')
      p++;
    if (*v >= 0 && n != *v)
      return false;
    *v = n;
    if (*p == '\0')
      return true;
    if (*p++ != ',')
      return false;
  }
}

/* The response's Content-Length in *len (-1: none). False when a value is no length, or two
 * values disagree (length_value). */
static bool content_length(const lk_resp *r, int64_t *len) {
  *len = -1;
  const char *p = r->hdr;
  for (size_t i = 0; i < r->nhdr; i++) {
    const char *v = p + strlen(p) + 1;
    if (strcasecmp(p, "Content-Length") == 0 && !length_value(v, len))
      return false;
    p = v + strlen(v) + 1;
  }
  return true;
}

lk_failure lk__resp_framing(const lk_resp *r, bool head) {
  if (!r->status_seen || head || r->status < 200 || r->status == 204 || r->status == 304)
    return LK_F_NONE;
  if (lk__resp_find(r, "Transfer-Encoding"))
    return LK_F_NONE; /* the chunked framing (checked by libcurl) overrides any length */
  int64_t len;
  if (!content_length(r, &len))
    return LK_F_JUNK_RESPONSE;
  /* a decoded body's length says nothing of the bytes the length counts */
  size_t got = r->decoded ? r->wire_len : r->body_len;
  if (len >= 0 && (uint64_t)got < (uint64_t)len)
    return LK_F_PARTIAL_BODY;
  return LK_F_NONE;
}

lk_failure lk__resp_head_check(const lk_resp *r, bool head, size_t max_body, bool *too_big) {
  /* Only a 101 gets here among the 1xx (the others are interim): the connection would speak
   * another protocol from now on, which nobody asked for and the client cannot */
  if (r->status >= 100 && r->status < 200)
    return LK_F_JUNK_RESPONSE;
  if (head || r->status == 204 || r->status == 304)
    return LK_F_NONE; /* no body follows, whatever the lengths say */
  int64_t len;
  if (!content_length(r, &len))
    return LK_F_JUNK_RESPONSE;
  /* RFC 9112 6.3: both together "ought to be handled as an error" (request smuggling, response
   * splitting); libcurl 7.88 lets chunked win, libhttp-parser refuses: refused on both */
  if (len >= 0 && lk__resp_find(r, "Transfer-Encoding"))
    return LK_F_JUNK_RESPONSE;
  if (len >= 0 && (uint64_t)len > (uint64_t)max_body)
    *too_big = true; /* known now: reading the body first would only waste the time */
  return LK_F_NONE;
}

/* --- content decoding (lk_http_policy.compressed) ------------------------------------------------
 * zlib is what libcurl decodes gzip and deflate with, but libcurl 7.88 calls a compressed stream
 * that stops short a complete transfer (a cut gzip stream, its 8-byte trailer missing, within a
 * right Content-Length or chunked framing), so the driver takes the bytes as they came
 * (CURLOPT_HTTP_CONTENT_DECODING off) and inflates them itself, which tells the stream's end.
 */

struct lk_decoder {
  z_stream z;
  bool gzip;   /* gzip / x-gzip; else deflate (zlib-wrapped, or raw as some servers send) */
  bool raw;    /* deflate without its zlib wrapper (found at the first bytes) */
  bool ended;  /* the compressed stream ended (its checksum verified) */
  uint64_t in; /* compressed bytes fed */
  unsigned char out[16384];
};

/* The coding a response's Content-Encoding lines name: 0 none (absent, identity), 1 gzip, 2
 * deflate, -1 one linkd does not decode (or several stacked). */
static int coding_of(const lk_resp *r) {
  int kind = 0;
  const char *p = r->hdr;
  for (size_t i = 0; i < r->nhdr; i++) {
    const char *v = p + strlen(p) + 1;
    if (strcasecmp(p, "Content-Encoding") == 0) {
      for (const char *t = v; *t;) {
        while (*t == ' ' || *t == '\t' || *t == ',')
          t++;
        size_t n = strcspn(t, ", \t");
        int k = n == 0                                           ? 0
                : (n == 8 && strncasecmp(t, "identity", 8) == 0) ? 0
                : (n == 4 && strncasecmp(t, "gzip", 4) == 0)     ? 1
                : (n == 6 && strncasecmp(t, "x-gzip", 6) == 0)   ? 1
                : (n == 7 && strncasecmp(t, "deflate", 7) == 0)  ? 2
                                                                 : -1;
        if (k < 0 || (k > 0 && kind > 0))
          return -1;
        if (k > 0)
          kind = k;
        t += n;
      }
    }
    p = v + strlen(v) + 1;
  }
  return kind;
}

int lk__decoder_new(lk_resp *r, lk_decoder **out) {
  *out = NULL;
  int kind = coding_of(r);
  if (kind == 0)
    return LK_OK;
  if (kind < 0)
    return LK_EPARSE;
  lk_decoder *d = calloc(1, sizeof *d);
  if (!d)
    return LK_ENOMEM;
  d->gzip = kind == 1;
  if (inflateInit2(&d->z, d->gzip ? 16 + MAX_WBITS : MAX_WBITS) != Z_OK) {
    free(d);
    return LK_ENOMEM;
  }
  r->decoded = true;
  *out = d;
  return LK_OK;
}

int lk__decoder_write(lk_decoder *d, const char *in, size_t n, lk_resp *r, size_t max,
                      bool *too_big) {
  bool first = d->in == 0;
  d->in += n;
  r->wire_len += n;
  if (n && d->ended)
    return LK_EPARSE; /* bytes after the end of the stream: not this body */
  d->z.next_in = (Bytef *)(uintptr_t)in;
  d->z.avail_in = (uInt)n; /* libcurl hands at most CURL_MAX_WRITE_SIZE at a time */
  for (;;) {
    d->z.next_out = d->out;
    d->z.avail_out = sizeof d->out;
    int rc = inflate(&d->z, Z_NO_FLUSH);
    size_t got = sizeof d->out - d->z.avail_out;
    if (rc == Z_DATA_ERROR && !d->gzip && !d->raw && first && d->z.total_out == 0) {
      /* "deflate" without the zlib wrapper RFC 9110 asks for: raw, as libcurl also takes it */
      inflateEnd(&d->z);
      memset(&d->z, 0, sizeof d->z);
      d->raw = true;
      if (inflateInit2(&d->z, -MAX_WBITS) != Z_OK)
        return LK_ENOMEM;
      d->z.next_in = (Bytef *)(uintptr_t)in;
      d->z.avail_in = (uInt)n;
      continue;
    }
    if (got && !lk__resp_body(r, (const char *)d->out, got, max, too_big))
      return *too_big ? LK_ETOOBIG : LK_ENOMEM;
    if (rc == Z_STREAM_END) {
      d->ended = true;
      return d->z.avail_in ? LK_EPARSE : LK_OK; /* bytes after the end: not this body */
    }
    if (rc == Z_MEM_ERROR)
      return LK_ENOMEM;
    if (rc == Z_BUF_ERROR && d->z.avail_in == 0)
      return LK_OK; /* all taken, nothing more to give: the next bytes go on */
    if (rc != Z_OK)
      return LK_EPARSE; /* corrupt data, a bad checksum, a dictionary nobody has */
    if (d->z.avail_in == 0 && d->z.avail_out != 0)
      return LK_OK;
  }
}

bool lk__decoder_done(const lk_decoder *d) { return !d || d->ended || d->in == 0; }

void lk__decoder_free(lk_decoder *d) {
  if (!d)
    return;
  inflateEnd(&d->z);
  free(d);
}
