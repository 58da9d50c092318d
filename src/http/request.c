/* SPDX-License-Identifier: MIT */
/* lk_http_request: method, URL, headers and a replayable body; reference-counted. */
#include "http_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool is_tchar(unsigned char ch) {
  if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))
    return true;
  return ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

static bool is_token(const char *s) {
  if (!s || !*s)
    return false;
  for (; *s; s++)
    if (!is_tchar((unsigned char)*s))
      return false;
  return true;
}

static bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* The common case without libcurl's URL parser (~6k instructions, a sixth of a proxied
 * request's cost on the native transport): "http(s)://" + a host of letters, digits, '-' and
 * '.' + an optional port 1-65535 + a path and query of RFC 3986 characters (percent escapes
 * well-formed), no fragment. Only URLs libcurl accepts pass; anything else is for libcurl to
 * judge (test_url_fast_path compares the two). */
static int url_fast(const char *url) {
  const char *p = url;
  if (strncasecmp(p, "http://", 7) == 0)
    p += 7;
  else if (strncasecmp(p, "https://", 8) == 0)
    p += 8;
  else
    return -1;
  const char *h = p;
  while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
         *p == '-' || *p == '.')
    p++;
  if (p == h || p - h > 253 || *h == '.' || *h == '-')
    return -1;
  if (*p == ':') {
    const char *d = ++p;
    long port = 0;
    while (*p >= '0' && *p <= '9' && p - d < 5)
      port = port * 10 + (*p++ - '0');
    if (p == d || port < 1 || port > 65535)
      return -1;
  }
  if (*p && *p != '/' && *p != '?')
    return -1;
  for (; *p; p++) {
    unsigned char c = (unsigned char)*p;
    if (c == '%') {
      if (!is_hex(p[1]) || !is_hex(p[2]))
        return -1;
      p += 2;
    } else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 strchr("-._~!$&'()*+,;=:@/?", c))) {
      return -1;
    }
  }
  return 1;
}

static bool url_ok(const char *url) {
  if (url_fast(url) == 1)
    return true;
  CURLU *u = curl_url();
  if (!u)
    return false;
  char *scheme = NULL;
  bool ok = curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
            curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
            (strcmp(scheme, "http") == 0 || strcmp(scheme, "https") == 0);
  curl_free(scheme);
  curl_url_cleanup(u);
  return ok;
}

static _Atomic uint64_t next_id = 1;

void lk__request_touch(lk_http_request *r) { r->id = atomic_fetch_add(&next_id, 1); }

int lk_http_request_create(const char *method, const char *url, lk_http_request **out) {
  if (out)
    *out = NULL;
  if (!out || !is_token(method) || !url || !*url || !url_ok(url))
    return LK_EINVAL;
  lk_http_request *r = calloc(1, sizeof *r);
  if (!r)
    return LK_ENOMEM;
  atomic_init(&r->refs, 1);
  lk__request_touch(r);
  r->method = strdup(method);
  r->url = strdup(url);
  if (!r->method || !r->url) {
    lk_http_request_free(r);
    return LK_ENOMEM;
  }
  r->idempotent = lk_method_is_idempotent(method);
  r->head = strcmp(r->method, "HEAD") == 0;
  r->https = strncasecmp(url, "https:", 6) == 0;
  *out = r;
  return LK_OK;
}

lk_http_request *lk_http_request_new(const char *method, const char *url) {
  lk_http_request *r = NULL;
  lk_http_request_create(method, url, &r);
  return r;
}

void lk__request_ref(lk_http_request *r) { atomic_fetch_add(&r->refs, 1); }

bool lk__request_in_use(const lk_http_request *r) {
  return atomic_load(&r->refs) > 1; /* a load: through the const pointer */
}

static const char *const reserved[] = {"Linkd-Attempt", "Linkd-Deadline", "grpc-timeout",
                                       "Content-Length", "Transfer-Encoding"};

int lk_http_request_add_header(lk_http_request *r, const char *name, const char *value) {
  if (!r || !is_token(name) || !value)
    return LK_EINVAL;
  for (const char *p = value; *p; p++)
    if (*p == '\r' || *p == '\n')
      return LK_EINVAL;
  for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
    if (strcasecmp(name, reserved[i]) == 0)
      return LK_EINVAL;
  bool idem = strcasecmp(name, "Idempotency-Key") == 0;
  if (idem && (r->idem_key || !lk_idem_key_valid(value, strlen(value))))
    return LK_EINVAL;
  if (lk__request_in_use(r))
    return LK_ESTATE;
  if (r->nheaders == r->cap_headers) {
    size_t nc = r->cap_headers ? 2 * r->cap_headers : 8;
    char **nh = realloc(r->headers, nc * sizeof *nh);
    if (!nh)
      return LK_ENOMEM;
    r->headers = nh;
    r->cap_headers = nc;
  }
  size_t nl = strlen(name), vl = strlen(value);
  char *line = malloc(nl + vl + 3);
  if (!line)
    return LK_ENOMEM;
  memcpy(line, name, nl);
  line[nl] = ':';
  line[nl + 1] = ' ';
  memcpy(line + nl + 2, value, vl + 1);
  if (vl == 0) { /* libcurl drops "Name:"; "Name;" is its syntax for an empty value */
    line[nl] = ';';
    line[nl + 1] = '\0';
  }
  r->headers[r->nheaders++] = line;
  lk__request_touch(r);
  if (idem)
    r->idem_key = line + nl + 2;
  if (strcasecmp(name, "Expect") == 0)
    r->has_expect = true;
  if (strcasecmp(name, "Accept") == 0)
    r->has_accept = true;
  if (strcasecmp(name, "Content-Type") == 0)
    r->has_ctype = true;
  return LK_OK;
}

int lk_http_request_set_verbatim(lk_http_request *r, bool on) {
  if (!r)
    return LK_EINVAL;
  if (lk__request_in_use(r))
    return LK_ESTATE;
  r->verbatim = on;
  lk__request_touch(r);
  return LK_OK;
}

static int set_body(lk_http_request *r, const void *data, size_t len, bool copy) {
  if (!r || (!data && len))
    return LK_EINVAL;
  if (lk__request_in_use(r))
    return LK_ESTATE;
  unsigned char *own = NULL;
  if (copy && data) {
    own = malloc(len ? len : 1);
    if (!own)
      return LK_ENOMEM;
    if (len)
      memcpy(own, data, len);
  }
  free(r->body_own);
  r->body_own = own;
  r->body = copy ? own : data;
  r->body_len = data ? len : 0;
  r->stream = NULL;
  lk__request_touch(r);
  return LK_OK;
}

int lk_http_request_set_body_stream(lk_http_request *r, size_t len, lk_http_body_fn fn, void *ctx) {
  if (!r || !fn)
    return LK_EINVAL;
  if (lk__request_in_use(r))
    return LK_ESTATE;
  free(r->body_own);
  r->body_own = NULL;
  r->body = NULL;
  r->body_len = len;
  r->stream = fn;
  r->stream_ctx = ctx;
  r->stream_read = 0;
  lk__request_touch(r);
  return LK_OK;
}

void lk_http_request_body_ready(lk_http_request *r) {
  if (r && r->stream_paused && r->stream_easy) {
    r->stream_paused = false;
    curl_easy_pause(r->stream_easy, CURLPAUSE_CONT);
  } else if (r && r->stream_paused && r->stream_try) {
    r->stream_paused = false;
    lk__h1_body_ready(r->stream_try);
  }
}

uint64_t lk_http_request_body_streamed(const lk_http_request *r) { return r ? r->stream_read : 0; }

int lk_http_request_set_body(lk_http_request *r, const void *data, size_t len) {
  return set_body(r, data, len, true);
}

int lk_http_request_set_body_ref(lk_http_request *r, const void *data, size_t len) {
  return set_body(r, data, len, false);
}

const char *lk_http_request_method(const lk_http_request *r) { return r ? r->method : NULL; }
const char *lk_http_request_url(const lk_http_request *r) { return r ? r->url : NULL; }

void lk_http_request_free(lk_http_request *r) {
  if (!r || atomic_fetch_sub(&r->refs, 1) > 1)
    return;
  for (size_t i = 0; i < r->nheaders; i++)
    free(r->headers[i]);
  free(r->headers);
  free(r->body_own);
  free(r->method);
  free(r->url);
  free(r);
}
