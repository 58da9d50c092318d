/* SPDX-License-Identifier: MIT */
/* faultd's byte level: stop-aware socket I/O, a tolerant HTTP/1.1 request reader, responses and
 * the JSON-lines logs. Every blocking step polls in short slices so SIGTERM ends it promptly. */
#include "faultd_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FD_SLICE_MS 100
#define FD_LINE_MAX 4096 /* longest chunk-size or trailer line accepted */

static int64_t start_ms;
static int log_fd = -1;
static int conn_log_fd = -1;
static atomic_int req_seq;

int64_t fd_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t fd_uptime_ms(void) { return fd_now_ms() - start_ms; }

void fd_io_init(void) { start_ms = fd_now_ms(); }

static int open_log(const char *path) {
  if (!path)
    return -1;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    fprintf(stderr, "faultd: cannot open %s: %s\n", path, strerror(errno));
  return fd;
}

int fd_open_logs(void) {
  log_fd = open_log(g_cfg.log_file);
  conn_log_fd = open_log(g_cfg.conn_log_file);
  if ((g_cfg.log_file && log_fd < 0) || (g_cfg.conn_log_file && conn_log_fd < 0))
    return -1;
  return 0;
}

/* 1: ready (or an error condition to be read by the next call), 0: end passed, -1: stopping. */
static int wait_event(int fd, short events, int64_t end) {
  for (;;) {
    if (atomic_load(&g_stop))
      return -1;
    int64_t left = end - fd_now_ms();
    if (left <= 0)
      return 0;
    struct pollfd p = {.fd = fd, .events = events};
    int n = poll(&p, 1, left > FD_SLICE_MS ? FD_SLICE_MS : (int)left);
    if (n > 0)
      return 1;
    if (n < 0 && errno != EINTR)
      return 1;
  }
}

static int64_t end_after(int timeout_ms) {
  return timeout_ms < 0 ? INT64_MAX : fd_now_ms() + timeout_ms;
}

int fd_wait_hangup(int fd, int timeout_ms) {
  int64_t end = end_after(timeout_ms);
  for (;;) {
    if (atomic_load(&g_stop))
      return -1;
    int64_t left = end - fd_now_ms();
    if (left <= 0)
      return 0;
    /* POLLRDHUP reports the peer's FIN without reading the data queued before it. */
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    int n = poll(&p, 1, left > FD_SLICE_MS ? FD_SLICE_MS : (int)left);
    if (n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
      return 1;
    if (n < 0 && errno != EINTR)
      return 1;
  }
}

int fd_send_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (wait_event(fd, POLLOUT, INT64_MAX) <= 0)
        return -1;
    } else {
      return -1;
    }
  }
  return 0;
}

/* Reads at most max more bytes into the buffer. >0: bytes read, 0: EOF, -1: error, stop, timeout
 * or no room. */
static ssize_t conn_fill(fd_conn *c, size_t max, int64_t end) {
  if (c->off > 0) {
    memmove(c->buf, c->buf + c->off, c->len - c->off);
    c->len -= c->off;
    c->off = 0;
  }
  size_t room = c->cap - c->len;
  if (room > max)
    room = max;
  if (room == 0)
    return -1;
  for (;;) {
    ssize_t n = recv(c->fd, c->buf + c->len, room, 0);
    if (n > 0) {
      c->len += (size_t)n;
      return n;
    }
    if (n == 0)
      return 0;
    if (errno == EINTR)
      continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return -1;
    if (wait_event(c->fd, POLLIN, end) <= 0)
      return -1;
  }
}

static void copy_field(char *dst, size_t cap, const char *src, size_t n) {
  if (n >= cap)
    n = cap - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}

static bool is_tchar(unsigned char ch) {
  return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
         (ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

typedef struct {
  long long content_length; /* -1: none */
  bool chunked, expect_continue, conn_close, conn_keep_alive;
  int minor;
} fd_hdrs;

/* Request line "METHOD SP TARGET SP HTTP/1.x". Fills what it can, even from a truncated line;
 * false if the line is not a request line. */
static bool parse_request_line(fd_req *r, fd_hdrs *h, const char *s, size_t n) {
  const char *sp1 = memchr(s, ' ', n);
  size_t mlen = sp1 ? (size_t)(sp1 - s) : n;
  copy_field(r->method, sizeof r->method, s, mlen);
  bool ok = sp1 != NULL && mlen > 0;
  for (size_t i = 0; i < mlen; i++)
    ok = ok && is_tchar((unsigned char)s[i]);
  if (!sp1)
    return false;
  const char *t = sp1 + 1;
  size_t rest = n - mlen - 1;
  const char *sp2 = memchr(t, ' ', rest);
  size_t tlen = sp2 ? (size_t)(sp2 - t) : rest;
  copy_field(r->path, sizeof r->path, t, tlen);
  if (!sp2 || tlen == 0)
    return false;
  const char *v = sp2 + 1;
  size_t vlen = rest - tlen - 1;
  if (vlen != 8 || memcmp(v, "HTTP/1.", 7) != 0 || (v[7] != '0' && v[7] != '1'))
    return false;
  h->minor = v[7] - '0';
  return ok;
}

static bool header_is(const char *name, size_t n, const char *want) {
  return strlen(want) == n && strncasecmp(name, want, n) == 0;
}

static bool has_token(const char *v, size_t n, const char *tok) {
  size_t tl = strlen(tok);
  size_t i = 0;
  while (i < n) {
    while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
      i++;
    size_t b = i;
    while (i < n && v[i] != ',')
      i++;
    size_t e = i;
    while (e > b && (v[e - 1] == ' ' || v[e - 1] == '\t'))
      e--;
    if (e - b == tl && strncasecmp(v + b, tok, tl) == 0)
      return true;
  }
  return false;
}

static bool parse_content_length(const char *v, size_t n, long long *out) {
  if (n == 0 || n > 18)
    return false;
  long long x = 0;
  for (size_t i = 0; i < n; i++) {
    if (v[i] < '0' || v[i] > '9')
      return false;
    x = x * 10 + (v[i] - '0');
  }
  *out = x;
  return true;
}

static bool parse_header(fd_req *r, fd_hdrs *h, const char *s, size_t n) {
  const char *colon = memchr(s, ':', n);
  if (!colon || colon == s)
    return false;
  size_t nlen = (size_t)(colon - s);
  for (size_t i = 0; i < nlen; i++)
    if (!is_tchar((unsigned char)s[i]))
      return false;
  const char *v = colon + 1;
  size_t vlen = n - nlen - 1;
  while (vlen > 0 && (*v == ' ' || *v == '\t')) {
    v++;
    vlen--;
  }
  while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
    vlen--;
  if (header_is(s, nlen, "content-length")) {
    long long cl;
    if (!parse_content_length(v, vlen, &cl))
      return false;
    if (h->content_length >= 0 && h->content_length != cl)
      return false;
    h->content_length = cl;
  } else if (header_is(s, nlen, "transfer-encoding")) {
    h->chunked = has_token(v, vlen, "chunked");
  } else if (header_is(s, nlen, "expect")) {
    h->expect_continue = vlen == 12 && strncasecmp(v, "100-continue", 12) == 0;
  } else if (header_is(s, nlen, "connection")) {
    h->conn_close = h->conn_close || has_token(v, vlen, "close");
    h->conn_keep_alive = h->conn_keep_alive || has_token(v, vlen, "keep-alive");
  } else if (header_is(s, nlen, "idempotency-key") && !r->has_key) {
    copy_field(r->key, sizeof r->key, v, vlen);
    r->has_key = true;
  } else if (header_is(s, nlen, "linkd-attempt") && !r->has_attempt) {
    copy_field(r->attempt, sizeof r->attempt, v, vlen);
    r->has_attempt = true;
  } else if (header_is(s, nlen, "linkd-deadline") && !r->has_deadline) {
    copy_field(r->deadline, sizeof r->deadline, v, vlen);
    r->has_deadline = true;
  }
  return true;
}

/* Parses the header block s[0..n) (terminator included). false: not a valid request head. */
static bool parse_head(fd_req *r, fd_hdrs *h, const char *s, size_t n) {
  bool ok = true;
  bool first = true;
  size_t i = 0;
  while (i < n) {
    const char *nl = memchr(s + i, '\n', n - i);
    size_t e = nl ? (size_t)(nl - s) : n;
    size_t len = e - i;
    if (len > 0 && s[i + len - 1] == '\r')
      len--;
    if (first) {
      ok = parse_request_line(r, h, s + i, len);
      first = false;
    } else if (len == 0) {
      break;
    } else if (ok) {
      ok = parse_header(r, h, s + i, len);
    }
    i = e + 1;
  }
  return ok;
}

/* Finds the end of the header block in b[0..n) starting at *scan. Returns its length (terminator
 * included) or 0, and advances *scan to where the next search must restart. */
static size_t find_head_end(const char *b, size_t n, size_t *scan) {
  for (size_t i = *scan; i < n; i++) {
    if (b[i] != '\n')
      continue;
    if (i + 1 < n && b[i + 1] == '\n')
      return i + 2;
    if (i + 2 < n && b[i + 1] == '\r' && b[i + 2] == '\n')
      return i + 3;
  }
  *scan = n >= 2 ? n - 2 : 0;
  return 0;
}

/* Consumes up to want body bytes (bounded by the limit) into r->body_bytes.
 * 1: done, 0: limit reached, -1: the connection ended. */
static int consume_body(fd_conn *c, fd_req *r, long long want, long long limit, int64_t end) {
  long long target = r->body_bytes + want;
  while (r->body_bytes < target) {
    long long step = target - r->body_bytes;
    if (limit >= 0) {
      if (r->body_bytes >= limit)
        return 0;
      if (limit - r->body_bytes < step)
        step = limit - r->body_bytes;
    }
    size_t avail = c->len - c->off;
    if (avail > 0) {
      size_t take = (long long)avail < step ? avail : (size_t)step;
      c->off += take;
      r->body_bytes += (long long)take;
      continue;
    }
    /* Read no further than the limit so the log says what the server really took in. */
    if (conn_fill(c, (size_t)step, end) <= 0)
      return -1;
  }
  return 1;
}

/* Reads one line (CRLF or LF) into [*line, *len). 1: ok, -1: connection ended, -2: too long. */
static int read_line(fd_conn *c, const char **line, size_t *len, int64_t end) {
  for (;;) {
    size_t avail = c->len - c->off;
    const char *nl = memchr(c->buf + c->off, '\n', avail);
    if (nl) {
      *line = c->buf + c->off;
      *len = (size_t)(nl - *line);
      c->off += *len + 1;
      if (*len > 0 && (*line)[*len - 1] == '\r')
        (*len)--;
      return 1;
    }
    if (avail >= FD_LINE_MAX)
      return -2;
    if (conn_fill(c, SIZE_MAX, end) <= 0)
      return -1;
  }
}

static fd_rd read_chunked(fd_conn *c, fd_req *r, long long limit, int64_t end) {
  for (;;) {
    const char *line;
    size_t len;
    int rc = read_line(c, &line, &len, end);
    if (rc != 1)
      return rc == -2 ? FD_RD_BAD : FD_RD_PARTIAL;
    long long size = 0;
    size_t i = 0;
    for (; i < len && i < 15; i++) {
      char ch = line[i];
      int d = ch >= '0' && ch <= '9'   ? ch - '0'
              : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
              : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                       : -1;
      if (d < 0)
        break;
      size = size * 16 + d;
    }
    if (i == 0 || (i < len && line[i] != ';' && line[i] != ' ' && line[i] != '\t'))
      return FD_RD_BAD;
    if (size == 0) {
      do { /* trailer section up to the empty line */
        rc = read_line(c, &line, &len, end);
        if (rc != 1)
          return rc == -2 ? FD_RD_BAD : FD_RD_PARTIAL;
      } while (len > 0);
      r->complete = true;
      return FD_RD_OK;
    }
    rc = consume_body(c, r, size, limit, end);
    if (rc <= 0)
      return rc == 0 ? FD_RD_LIMIT : FD_RD_PARTIAL;
    rc = read_line(c, &line, &len, end);
    if (rc != 1)
      return rc == -2 ? FD_RD_BAD : FD_RD_PARTIAL;
    if (len != 0)
      return FD_RD_BAD;
  }
}

fd_rd fd_read_request(fd_conn *c, fd_req *r, long long body_limit, bool send_continue,
                      int timeout_ms) {
  memset(r, 0, sizeof *r);
  int64_t end = end_after(timeout_ms);
  fd_hdrs h = {.content_length = -1, .minor = 1};
  size_t scan = 0, head_len = 0;
  for (;;) {
    if (scan == 0) /* blank lines before a request line are allowed and ignored */
      while (c->off < c->len && (c->buf[c->off] == '\r' || c->buf[c->off] == '\n'))
        c->off++;
    size_t avail = c->len - c->off;
    head_len = find_head_end(c->buf + c->off, avail, &scan);
    if (head_len > 0)
      break;
    if (avail >= c->cap) {
      c->nreq++;
      parse_head(r, &h, c->buf + c->off, avail);
      c->off = c->len;
      return FD_RD_BAD;
    }
    if (conn_fill(c, SIZE_MAX, end) <= 0) {
      if (avail == 0)
        return FD_RD_NONE;
      /* A truncated head: report whatever of the request line arrived. */
      c->nreq++;
      const char *s = c->buf + c->off;
      const char *nl = memchr(s, '\n', avail);
      size_t ll = nl ? (size_t)(nl - s) : avail;
      if (ll > 0 && s[ll - 1] == '\r')
        ll--;
      parse_request_line(r, &h, s, ll);
      c->off = c->len;
      return FD_RD_PARTIAL;
    }
  }
  c->nreq++;
  bool ok = parse_head(r, &h, c->buf + c->off, head_len);
  c->off += head_len;
  if (!ok)
    return FD_RD_BAD;
  r->keep_alive = h.minor >= 1 ? !h.conn_close : (h.conn_keep_alive && !h.conn_close);
  r->head = strcmp(r->method, "HEAD") == 0;
  bool has_body = h.chunked || h.content_length > 0;
  if (has_body && h.expect_continue && send_continue && c->off == c->len) {
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    if (fd_send_all(c->fd, cont, sizeof cont - 1) != 0)
      return FD_RD_PARTIAL;
  }
  if (h.chunked)
    return read_chunked(c, r, body_limit, end);
  int rc = consume_body(c, r, h.content_length > 0 ? h.content_length : 0, body_limit, end);
  if (rc == 1) {
    r->complete = true;
    return FD_RD_OK;
  }
  return rc == 0 ? FD_RD_LIMIT : FD_RD_PARTIAL;
}

#define FD_HEAD_FMT                                                                                \
  "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n%s%s%s%sConnection: %s\r\n\r\n"

static const char *reason(int status) {
  switch (status) {
  case 100: return "Continue";
  case 200: return "OK";
  case 201: return "Created";
  case 204: return "No Content";
  case 400: return "Bad Request";
  case 404: return "Not Found";
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 425: return "Too Early";
  case 429: return "Too Many Requests";
  case 500: return "Internal Server Error";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  default: return "Status";
  }
}

/* "date+N" / "date-N" become the IMF-fixdate N seconds from now; anything else is verbatim. */
static const char *retry_after_value(const char *v, char *buf, size_t cap) {
  if (!v || strncmp(v, "date", 4) != 0 || (v[4] != '+' && v[4] != '-'))
    return v;
  char *endp;
  long long off = strtoll(v + 4, &endp, 10);
  if (*endp != '\0')
    return v;
  time_t t = time(NULL) + (time_t)off;
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, cap, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

int fd_respond(fd_conn *c, const fd_req *r, int status, const char *retry_after, bool close_conn,
               int drip_ms) {
  char defbody[48];
  const char *body = g_cfg.body;
  if (!body) {
    if (status == 200)
      snprintf(defbody, sizeof defbody, "{\"ok\":true}");
    else
      snprintf(defbody, sizeof defbody, "{\"status\":%d}", status);
    body = defbody;
  }
  bool no_body = status < 200 || status == 204 || status == 304;
  size_t blen = no_body ? 0 : strlen(body);
  char rabuf[64];
  const char *ra = retry_after_value(retry_after, rabuf, sizeof rabuf);
  char clen[48] = "";
  if (!no_body)
    snprintf(clen, sizeof clen, "Content-Length: %zu\r\n", blen);
  const char *conn = close_conn ? "close" : "keep-alive";
  int hlen = snprintf(NULL, 0, FD_HEAD_FMT, status, reason(status), clen, ra ? "Retry-After: " : "",
                      ra ? ra : "", ra ? "\r\n" : "", conn);
  bool send_body = !r->head && blen > 0;
  size_t total = (size_t)hlen + (send_body && drip_ms <= 0 ? blen : 0);
  char *out = malloc(total + 1);
  if (!out)
    return -1;
  snprintf(out, (size_t)hlen + 1, FD_HEAD_FMT, status, reason(status), clen,
           ra ? "Retry-After: " : "", ra ? ra : "", ra ? "\r\n" : "", conn);
  if (total > (size_t)hlen)
    memcpy(out + hlen, body, blen);
  int rc = fd_send_all(c->fd, out, total);
  free(out);
  if (rc != 0 || !send_body || drip_ms <= 0)
    return rc;
  for (size_t i = 0; i < blen; i++) {
    if (fd_wait_hangup(c->fd, drip_ms) != 0)
      return -1;
    if (fd_send_all(c->fd, body + i, 1) != 0)
      return -1;
  }
  return 0;
}

typedef struct {
  char *p;
  size_t len, cap;
} fd_buf;

static void put(fd_buf *b, const char *s, size_t n) {
  if (b->len + n >= b->cap)
    n = b->cap - b->len - 1;
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void putf(fd_buf *b, const char *s) { put(b, s, strlen(s)); }

/* A JSON string; bytes outside printable ASCII are written as \u00XX so the line stays valid
 * JSON whatever the client sent. */
static void put_json(fd_buf *b, const char *s, bool present) {
  if (!present) {
    putf(b, "null");
    return;
  }
  putf(b, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char esc[8];
    if (*p == '"' || *p == '\\') {
      esc[0] = '\\';
      esc[1] = (char)*p;
      put(b, esc, 2);
    } else if (*p < 0x20 || *p >= 0x7f) {
      snprintf(esc, sizeof esc, "\\u%04x", *p);
      putf(b, esc);
    } else {
      put(b, (const char *)p, 1);
    }
  }
  putf(b, "\"");
}

void fd_log_request(const fd_conn *c, const fd_req *r) {
  if (log_fd < 0)
    return;
  char mem[8192];
  fd_buf b = {mem, 0, sizeof mem};
  char num[96];
  snprintf(num, sizeof num, "{\"conn\":%d,\"seq\":%d,\"method\":", c->id, c->nreq);
  putf(&b, num);
  put_json(&b, r->method, true);
  putf(&b, ",\"path\":");
  put_json(&b, r->path, true);
  putf(&b, ",\"idempotency_key\":");
  put_json(&b, r->key, r->has_key);
  putf(&b, ",\"attempt\":");
  put_json(&b, r->attempt, r->has_attempt);
  putf(&b, ",\"deadline\":");
  put_json(&b, r->deadline, r->has_deadline);
  int n = atomic_fetch_add(&req_seq, 1) + 1;
  snprintf(num, sizeof num, ",\"body_bytes\":%lld,\"complete\":%s,\"req\":%d,\"t_ms\":%lld}\n",
           r->body_bytes, r->complete ? "true" : "false", n, (long long)fd_uptime_ms());
  putf(&b, num);
  /* One write per line on an O_APPEND file: lines from many threads never interleave, and the
   * line is visible to readers as soon as write returns. */
  if (write(log_fd, b.p, b.len) < 0)
    fprintf(stderr, "faultd: log write: %s\n", strerror(errno));
}

void fd_log_conn(const fd_conn *c, const char *event) {
  if (conn_log_fd < 0)
    return;
  char line[160];
  int n =
      snprintf(line, sizeof line, "{\"conn\":%d,\"event\":\"%s\",\"how\":\"%s\",\"t_ms\":%lld}\n",
               c->id, event, c->close_how ? c->close_how : "", (long long)fd_uptime_ms());
  if (write(conn_log_fd, line, (size_t)n) < 0)
    fprintf(stderr, "faultd: conn log write: %s\n", strerror(errno));
}

void fd_close_rst(fd_conn *c) {
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  fd_close_quiet(c, "rst");
}

/* Reads and logs requests until the peer closes or timeout_ms passes. ready_only: only if
 * bytes are already waiting (then they get a short grace to complete a request). */
static void drain_requests(fd_conn *c, int timeout_ms, bool ready_only) {
  if (ready_only && c->off == c->len) {
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    if (poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN))
      return;
  }
  int64_t end = fd_now_ms() + timeout_ms;
  for (;;) {
    int64_t left = end - fd_now_ms();
    if (left <= 0)
      return;
    fd_req r;
    fd_rd rd = fd_read_request(c, &r, -1, false, (int)left);
    if (rd == FD_RD_NONE)
      return;
    fd_log_request(c, &r);
    if (rd != FD_RD_OK || (ready_only && c->off == c->len))
      return;
  }
}

void fd_close_fin(fd_conn *c) {
  /* A request already queued is logged before the FIN, so a client that sees the close finds it
   * in the log; after the FIN, reading until the peer closes keeps close() from sending a RST
   * for unread bytes. Requests read here reached the server and are left unanswered. */
  drain_requests(c, 50, true);
  shutdown(c->fd, SHUT_WR);
  drain_requests(c, 1000, false);
  fd_close_quiet(c, "fin");
}

void fd_close_discard(fd_conn *c) {
  shutdown(c->fd, SHUT_WR);
  int64_t end = fd_now_ms() + 1000;
  c->off = c->len = 0;
  while (conn_fill(c, SIZE_MAX, end) > 0)
    c->off = c->len = 0;
  fd_close_quiet(c, "fin");
}

void fd_close_quiet(fd_conn *c, const char *how) {
  if (c->fd >= 0)
    close(c->fd);
  c->fd = -1;
  c->close_how = how;
}
