/* SPDX-License-Identifier: MIT */
/* Hostile request heads on raw sockets: each is refused before it reaches a route, so nothing is
 * applied, and the daemon keeps serving. Checks src/server/strict.c. */
#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

static lib_proc P;
static int64_t BOOK;
static char LOANS[64]; /* "/books/{BOOK}/loans" */

static int group_setup(void **state) {
  (void)state;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const char *args[] = {"--max-body", "4k", NULL};
  if (lib_start(&P, args) != 0)
    return -1;
  BOOK = lib_create_book(P.port, 1000);
  snprintf(LOANS, sizeof LOANS, "/books/%lld/loans", (long long)BOOK);
  return BOOK > 0 ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  int rc = lib_stop(&P);
  lib_cleanup(&P);
  curl_global_cleanup();
  return rc == 0 ? 0 : -1;
}

typedef struct raw_res {
  char data[16384];
  size_t len;
  int status; /* of the first status line; 0 when none */
  bool eof;   /* the server closed the connection (not a read timeout) */
  double secs;
} raw_res;

/* Writes the parts (lens[i] bytes each) on a fresh connection to port, 50 ms apart (a head
 * that reaches the server in several reads), half-closes when asked and reads until EOF or
 * `timeout_ms`. */
static void raw_io(int port, const char *const *parts, const size_t *lens, size_t nparts,
                   bool half_close, int timeout_ms, raw_res *out) {
  memset(out, 0, sizeof *out);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  for (size_t i = 0; i < nparts; i++) {
    if (i)
      sleep_ms(50);
    assert_true(write(fd, parts[i], lens[i]) == (ssize_t)lens[i]);
  }
  if (half_close)
    shutdown(fd, SHUT_WR);
  double t0 = now_s();
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ssize_t n = -1;
  while (out->len < sizeof out->data - 1 &&
         (n = read(fd, out->data + out->len, sizeof out->data - 1 - out->len)) > 0)
    out->len += (size_t)n;
  out->eof = n == 0;
  out->data[out->len] = '\0';
  out->secs = now_s() - t0;
  close(fd);
  if (sscanf(out->data, "HTTP/1.%*d %d", &out->status) != 1)
    out->status = 0;
}

/* NUL-terminated parts. */
static void raw_parts(int port, const char *const *parts, size_t nparts, bool half_close,
                      raw_res *out) {
  size_t lens[4];
  assert_true(nparts <= 4);
  for (size_t i = 0; i < nparts; i++)
    lens[i] = strlen(parts[i]);
  raw_io(port, parts, lens, nparts, half_close, 3000, out);
}

/* Sends len bytes on a fresh connection, half-closes and reads until EOF or `timeout_ms`.
 * A request that asks for the close (or HTTP/1.0) is answered, then closed: no half-close,
 * since libmicrohttpd 0.9.75 drops a connection whose client half-closed while its request
 * waited for a worker (docs/libraryd.md). Otherwise the server answers what it has and the
 * half-close ends the exchange. */
static void raw_send(const char *req, size_t len, int timeout_ms, raw_res *out) {
  bool half_close =
      !memmem(req, len, "Connection: close\r\n", 19) && !memmem(req, len, " HTTP/1.0\r\n", 11);
  raw_io(P.port, &req, &len, 1, half_close, timeout_ms, out);
}

static void raw(const char *req, raw_res *out) { raw_send(req, strlen(req), 3000, out); }

/* How many status lines ("HTTP/1.1 NNN ") the connection carried. */
static int responses(const raw_res *r) {
  int n = 0;
  for (const char *p = r->data; (p = strstr(p, "HTTP/1.1 ")) != NULL; p++)
    n += p[9] >= '1' && p[9] <= '5' && p[12] == ' ';
  return n;
}

/* Status and JSON error code of a refusal, and one response only on the connection. */
static void expect(const raw_res *r, int status, const char *code) {
  if (r->status != status || !strstr(r->data, code))
    fprintf(stderr, "got: %s\n", r->data);
  assert_int_equal(r->status, status);
  char want[96];
  snprintf(want, sizeof want, "\"error\":\"%s\"", code);
  assert_non_null(strstr(r->data, want));
  assert_int_equal(responses(r), 1);
}

static int64_t loans_of_book(void) {
  json_t *st = lib_stats(&P);
  assert_non_null(st);
  int64_t loans = (int64_t)json_integer_value(json_object_get(st, "loans"));
  json_decref(st);
  return loans;
}

/* A resend with "Idempotency-Key : k1" must not execute twice: the line is refused. */
static void test_space_before_colon(void **state) {
  (void)state;
  int64_t stock = lib_stock(P.port, BOOK);
  char req[512];
  snprintf(req, sizeof req,
           "POST %s HTTP/1.1\r\nHost: x\r\nIdempotency-Key : k1\r\nContent-Length: 0\r\n\r\n",
           LOANS);
  raw_res r;
  for (int i = 0; i < 2; i++) {
    raw(req, &r);
    expect(&r, 400, "bad_header");
  }
  snprintf(req, sizeof req,
           "POST %s HTTP/1.1\r\nHost: x\r\nIdempotency-Key\t: k1\r\nContent-Length: 0\r\n\r\n",
           LOANS);
  raw(req, &r);
  expect(&r, 400, "bad_header");
  assert_int_equal(lib_stock(P.port, BOOK), stock);
}

static void test_repeated_fields(void **state) {
  (void)state;
  int64_t stock = lib_stock(P.port, BOOK);
  char req[512];
  raw_res r;
  snprintf(req, sizeof req,
           "POST %s HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k1\r\nidempotency-key: k2\r\n"
           "Content-Length: 0\r\n\r\n",
           LOANS);
  raw(req, &r);
  expect(&r, 400, "bad_idempotency_key");
  /* Two Content-Lengths: MHD would take the first and leave the rest for the next request. */
  snprintf(req, sizeof req,
           "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 60\r\n\r\n{}",
           LOANS);
  raw(req, &r);
  expect(&r, 400, "bad_header");
  snprintf(req, sizeof req,
           "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
           LOANS);
  raw(req, &r);
  expect(&r, 400, "bad_header");
  snprintf(req, sizeof req,
           "POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 7\r\n\r\n"
           "2\r\n{}\r\n0\r\n\r\n",
           LOANS);
  raw(req, &r);
  expect(&r, 400, "bad_header");
  raw("GET /books/1 HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", &r);
  expect(&r, 400, "bad_header");
  /* Two Content-Types: which one describes the body would be a guess (MHD keeps the first). */
  snprintf(req, sizeof req,
           "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           "Content-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}",
           LOANS);
  raw(req, &r);
  expect(&r, 400, "bad_header");
  const char *singles[] = {"X-Tenant",       "X-API-Key",    "X-Request-Id",
                           "Linkd-Deadline", "grpc-timeout", "Content-Type"};
  for (size_t i = 0; i < sizeof singles / sizeof singles[0]; i++) {
    snprintf(req, sizeof req, "POST %s HTTP/1.1\r\nHost: x\r\n%s: 1\r\n%s: 2\r\n\r\n", LOANS,
             singles[i], singles[i]);
    raw(req, &r);
    expect(&r, 400, "bad_header");
  }
  assert_int_equal(lib_stock(P.port, BOOK), stock);
}

/* The response that starts at data[*off]: a status line, header lines, the empty line and a
 * body of exactly its Content-Length (one Content-Length line, required). Its status, or 0 when
 * the bytes are not such a response; *off moves past it. */
static int whole_response(const raw_res *r, size_t *off) {
  const char *p = r->data + *off;
  size_t left = r->len - *off;
  int status;
  if (left < 12 || memcmp(p, "HTTP/1.1 ", 9) || sscanf(p + 9, "%3d", &status) != 1)
    return 0;
  const char *end = memmem(p, left, "\r\n\r\n", 4);
  if (!end)
    return 0;
  size_t head = (size_t)(end - p) + 4;
  long clen = -1;
  int lines = 0;
  for (const char *q = p; q < end;) {
    const char *nl = memmem(q, (size_t)(end - q) + 2, "\r\n", 2);
    if (!nl)
      return 0;
    if (!strncasecmp(q, "Content-Length: ", 16)) {
      clen = strtol(q + 16, NULL, 10);
      lines++;
    }
    q = nl + 2;
  }
  if (lines != 1 || clen < 0 || (size_t)clen > left - head)
    return 0;
  *off += head + (size_t)clen;
  return status;
}

/* Exactly one well-formed response with this status and error code, then the close. */
static void expect_whole(const raw_res *r, int status, const char *code) {
  size_t off = 0;
  int got = whole_response(r, &off);
  if (got != status || off != r->len || !r->eof || responses(r) != 1)
    fprintf(stderr, "got (%zu bytes, eof %d): %s\n", r->len, r->eof, r->data);
  assert_int_equal(got, status);
  assert_int_equal(off, r->len); /* nothing after the body */
  assert_true(r->eof);
  assert_int_equal(responses(r), 1);
  char want[96];
  snprintf(want, sizeof want, "\"error\":\"%s\"", code);
  assert_non_null(strstr(r->data, want));
}

static const struct {
  const char *value;
  int status;
  const char *code;
} BAD_LENGTHS[] = {{"-1", 400, "bad_header"},
                   {"abc", 400, "bad_header"},
                   {"+2", 400, "bad_header"},
                   {"3, 3", 400, "bad_header"},
                   {"0x2", 400, "bad_header"},
                   {"18446744073709551616", 413, "body_too_large"},
                   {"99999999999999999999999", 413, "body_too_large"}};

/* libmicrohttpd 0.9.75 refuses these Content-Length values itself, before any handler call, and
 * writes its response's header block twice; libraryd answers them first (strict.h): one whole
 * response, the close, nothing applied, however the head arrives and whether or not the client
 * half-closes. A number of 2^64 or more is 413, as 2^63 .. 2^64-1 are. */
static void test_malformed_content_length(void **state) {
  (void)state;
  int64_t stock = lib_stock(P.port, BOOK), loans = loans_of_book();
  char head[512], line[128], rest[512];
  raw_res r;
  for (size_t i = 0; i < sizeof BAD_LENGTHS / sizeof BAD_LENGTHS[0]; i++) {
    snprintf(head, sizeof head, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %s\r\n\r\n{}",
             LOANS, BAD_LENGTHS[i].value);
    snprintf(line, sizeof line, "POST %s HTTP/1.1\r\n", LOANS);
    snprintf(rest, sizeof rest, "Host: x\r\nContent-Length: %s\r\n\r\n{}", BAD_LENGTHS[i].value);
    const char *whole[] = {head}, *split[] = {line, rest};
    for (int mode = 0; mode < 3; mode++) {
      raw_parts(P.port, mode == 2 ? split : whole, mode == 2 ? 2 : 1, mode == 0, &r);
      if (r.status != BAD_LENGTHS[i].status)
        fprintf(stderr, "Content-Length: %s (mode %d)\n", BAD_LENGTHS[i].value, mode);
      expect_whole(&r, BAD_LENGTHS[i].status, BAD_LENGTHS[i].code);
      assert_true(r.secs < 2.0); /* closed at once, not at a timeout */
    }
  }
  /* After a response on a keep-alive connection: the first is served, the second refused. */
  snprintf(head, sizeof head,
           "GET /books/%lld HTTP/1.1\r\nHost: x\r\n\r\n"
           "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}",
           (long long)BOOK, LOANS);
  const char *both[] = {head};
  raw_parts(P.port, both, 1, false, &r);
  size_t off = 0;
  assert_int_equal(whole_response(&r, &off), 200);
  raw_res second = r;
  memmove(second.data, r.data + off, r.len - off + 1);
  second.len = r.len - off;
  expect_whole(&second, 400, "bad_header");
  /* Nothing ran; libraryd's line replaced MHD's two. */
  assert_int_equal(lib_stock(P.port, BOOK), stock);
  assert_int_equal(loans_of_book(), loans);
  assert_true(lib_log_count(&P, "refused a request head: Content-Length") >= 22);
  assert_int_equal(lib_log_count(&P, "Error processing request"), 0);
  /* Numbers MHD reads but that exceed int64 or the body limit are libraryd's 413. */
  const char *big[] = {"9223372036854775808", "18446744073709551615", "4097"};
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
    snprintf(head, sizeof head, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %s\r\n\r\n{}",
             LOANS, big[i]);
    raw(head, &r);
    expect(&r, 413, "body_too_large");
  }
  /* The daemon still serves, writes included. */
  snprintf(head, sizeof head,
           "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
           LOANS);
  raw(head, &r);
  assert_int_equal(r.status, 201);
  assert_int_equal(lib_stock(P.port, BOOK), stock - 1);
  assert_int_equal(loans_of_book(), loans + 1);
}

static int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  return fd;
}

/* Other connections of the same MHD threads hold parsed request lines with incomplete heads
 * while the malformed one arrives: the answer still goes to the right connection only, and the
 * others, completed afterwards, are served normally. */
static void test_malformed_content_length_among_others(void **state) {
  (void)state;
  enum { OTHERS = 6 };
  int fds[OTHERS];
  char line[160];
  snprintf(line, sizeof line, "GET /books/%lld HTTP/1.1\r\nHost: x\r\n", (long long)BOOK);
  for (int i = 0; i < OTHERS; i++) {
    fds[i] = connect_to(P.port);
    assert_true(write(fds[i], line, strlen(line)) == (ssize_t)strlen(line));
  }
  sleep_ms(100); /* their request lines are parsed: each is a connection with a head under way */
  char req[256];
  snprintf(req, sizeof req, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}", LOANS);
  const char *parts[] = {req};
  raw_res r;
  for (int k = 0; k < 4; k++) {
    raw_parts(P.port, parts, 1, false, &r);
    expect_whole(&r, 400, "bad_header");
  }
  const char *end = "Connection: close\r\n\r\n";
  for (int i = 0; i < OTHERS; i++) {
    assert_true(write(fds[i], end, strlen(end)) == (ssize_t)strlen(end));
    struct timeval tv = {3, 0};
    setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    memset(&r, 0, sizeof r);
    ssize_t n = -1;
    while (r.len < sizeof r.data - 1 &&
           (n = read(fds[i], r.data + r.len, sizeof r.data - 1 - r.len)) > 0)
      r.len += (size_t)n;
    r.eof = n == 0;
    r.data[r.len] = '\0';
    close(fds[i]);
    size_t off = 0;
    int status = whole_response(&r, &off);
    if (status != 200 || off != r.len || !r.eof)
      fprintf(stderr, "connection %d got (%zu bytes): %s\n", i, r.len, r.data);
    assert_int_equal(status, 200);
    assert_int_equal(off, r.len);
    assert_true(r.eof);
  }
}

/* The admin listener runs on libmicrohttpd too: the same one answer there. */
static void test_malformed_content_length_admin(void **state) {
  (void)state;
  assert_true(P.admin_port > 0);
  char req[256];
  raw_res r;
  for (size_t i = 0; i < sizeof BAD_LENGTHS / sizeof BAD_LENGTHS[0]; i++) {
    snprintf(req, sizeof req,
             "GET /admin/stats HTTP/1.1\r\nHost: x\r\nContent-Length: %s\r\n\r\n{}",
             BAD_LENGTHS[i].value);
    const char *parts[] = {req};
    raw_parts(P.admin_port, parts, 1, i % 2 == 0, &r);
    expect_whole(&r, BAD_LENGTHS[i].status, BAD_LENGTHS[i].code);
  }
  /* A keep-alive admin connection: its first request is served, the second refused. */
  const char *two[] = {"GET /admin/stats HTTP/1.1\r\nHost: x\r\n\r\n"
                       "GET /admin/stats HTTP/1.1\r\nHost: x\r\nContent-Length: +2\r\n\r\n{}"};
  raw_parts(P.admin_port, two, 1, false, &r);
  size_t off = 0;
  assert_int_equal(whole_response(&r, &off), 200);
  raw_res second = r;
  memmove(second.data, r.data + off, r.len - off + 1);
  second.len = r.len - off;
  expect_whole(&second, 400, "bad_header");
  json_t *st = lib_stats(&P);
  assert_non_null(st);
  json_decref(st);
}

/* A second daemon with --log off; its setup and teardown stop it even when a check fails. */
static lib_proc Q;

static int quiet_setup(void **state) {
  (void)state;
  const char *args[] = {"--log", "off", NULL};
  return lib_start(&Q, args) == 0 ? 0 : -1;
}

static int quiet_teardown(void **state) {
  (void)state;
  int rc = lib_stop(&Q);
  lib_cleanup(&Q);
  return rc == 0 ? 0 : -1;
}

/* The answer does not depend on the log: with --log off MHD's messages still reach libraryd. */
static void test_malformed_content_length_log_off(void **state) {
  (void)state;
  char req[256];
  raw_res r;
  for (size_t i = 0; i < sizeof BAD_LENGTHS / sizeof BAD_LENGTHS[0]; i++) {
    snprintf(req, sizeof req,
             "POST /books/1/loans HTTP/1.1\r\nHost: x\r\nContent-Length: %s\r\n\r\n{}",
             BAD_LENGTHS[i].value);
    const char *parts[] = {req};
    raw_parts(Q.port, parts, 1, true, &r);
    expect_whole(&r, BAD_LENGTHS[i].status, BAD_LENGTHS[i].code);
  }
  assert_int_equal(lib_stock(Q.port, 1), 5); /* the seeded book: no loan was made */
}

static void test_transfer_coding(void **state) {
  (void)state;
  char req[512];
  raw_res r;
  const char *codings[] = {"gzip", "gzip, chunked", "chunked, gzip", "identity", "chunked;x=1"};
  for (size_t i = 0; i < sizeof codings / sizeof codings[0]; i++) {
    snprintf(req, sizeof req, "POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: %s\r\n\r\n", LOANS,
             codings[i]);
    raw(req, &r);
    expect(&r, 501, "unsupported_transfer_coding");
    assert_true(r.secs < 2.0); /* at once, not at the idle timeout */
  }
  snprintf(req, sizeof req,
           "POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
           "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
           LOANS);
  raw(req, &r);
  expect(&r, 501, "unsupported_transfer_coding");
  /* MHD decodes chunked only without trailing whitespace (it compares the raw value). */
  snprintf(req, sizeof req,
           "POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked \r\n\r\n0\r\n\r\n", LOANS);
  raw(req, &r);
  expect(&r, 501, "unsupported_transfer_coding");
  /* Plain chunked, in any case, still works. */
  snprintf(req, sizeof req,
           "POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:  Chunked\r\nConnection: close\r\n"
           "\r\n2\r\n{}\r\n0\r\n\r\n",
           LOANS);
  raw(req, &r);
  assert_int_equal(r.status, 201);
}

static void test_host(void **state) {
  (void)state;
  raw_res r;
  raw("GET /books/1 HTTP/1.1\r\nConnection: close\r\n\r\n", &r);
  expect(&r, 400, "bad_header");
  raw("GET /books/1 HTTP/1.0\r\n\r\n", &r);
  assert_int_equal(r.status, 200);
  raw("GET /books/1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", &r);
  assert_int_equal(r.status, 200);
}

/* Leading and trailing SP/HTAB are not part of a value (RFC 9110 §5.5). */
static void test_ows_stripped(void **state) {
  (void)state;
  raw_res r;
  raw("GET /books/1 HTTP/1.1\r\nHost: x\r\nLinkd-Deadline: 5000 \t\r\nConnection: close\r\n\r\n",
      &r);
  assert_int_equal(r.status, 200);
  raw("GET /books/1 HTTP/1.1\r\nHost: x\r\ngrpc-timeout:\t2S  \r\nConnection: close\r\n\r\n", &r);
  assert_int_equal(r.status, 200);
  /* "k-ows " and "k-ows" are one key: the second request is a replay. */
  char req[512];
  int64_t loans = loans_of_book();
  snprintf(req, sizeof req,
           "POST %s HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k-ows \r\nContent-Length: 0\r\n"
           "Connection: close\r\n\r\n",
           LOANS);
  raw(req, &r);
  assert_int_equal(r.status, 201);
  assert_null(strstr(r.data, "Idempotent-Replayed"));
  snprintf(req, sizeof req,
           "POST %s HTTP/1.1\r\nHost: x\r\nIdempotency-Key:k-ows\r\nContent-Length: 0\r\n"
           "Connection: close\r\n\r\n",
           LOANS);
  raw(req, &r);
  assert_int_equal(r.status, 201);
  assert_non_null(strstr(r.data, "Idempotent-Replayed: true"));
  assert_int_equal(loans_of_book(), loans + 1);
}

/* A NUL cut values short in MHD: "nul\0A" and "nul\0B" were one key. */
static void test_nul_bytes(void **state) {
  (void)state;
  int64_t stock = lib_stock(P.port, BOOK);
  char req[512];
  raw_res r;
  const char *tails[] = {"A", "B", ""};
  for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
    int n = snprintf(req, sizeof req, "POST %s HTTP/1.1\r\nHost: x\r\nIdempotency-Key: nul", LOANS);
    req[n++] = '\0';
    n += snprintf(req + n, sizeof req - (size_t)n,
                  "%s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", tails[i]);
    raw_send(req, (size_t)n, 3000, &r);
    expect(&r, 400, "bad_header");
  }
  /* In the last field, right before the empty line. */
  int n = snprintf(req, sizeof req, "GET /books/1 HTTP/1.1\r\nHost: x\r\nX-Request-Id: a");
  req[n++] = '\0';
  n += snprintf(req + n, sizeof req - (size_t)n, "\r\n\r\n");
  raw_send(req, (size_t)n, 3000, &r);
  expect(&r, 400, "bad_header");
  /* In the request target, literal or percent-encoded (also in the query). */
  n = snprintf(req, sizeof req, "POST %s", LOANS);
  req[n++] = '\0';
  n += snprintf(req + n, sizeof req - (size_t)n, "x HTTP/1.1\r\nHost: x\r\n\r\n");
  raw_send(req, (size_t)n, 3000, &r);
  expect(&r, 400, "bad_target");
  snprintf(req, sizeof req, "POST %s%%00x HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", LOANS);
  raw(req, &r);
  expect(&r, 400, "bad_target");
  raw("GET /books?limit=5%00x HTTP/1.1\r\nHost: x\r\n\r\n", &r);
  expect(&r, 400, "bad_target");
  assert_int_equal(lib_stock(P.port, BOOK), stock);
}

static void test_malformed_lines(void **state) {
  (void)state;
  raw_res r;
  raw("GET /books/1 HTTP/1.1\nHost: x\n\n", &r); /* bare LF */
  expect(&r, 400, "bad_header");
  raw("GET /books/1 HTTP/1.1\r\nHost: x\nX-Tenant: a\r\n\r\n", &r);
  expect(&r, 400, "bad_header");
  raw("GET /books/1 HTTP/1.1\r\nHost: x\r\nX-Tenant: a\r\n  b\r\n\r\n", &r); /* obs-fold */
  expect(&r, 400, "bad_header");
  raw("GET /books/1 HTTP/1.1\r\nHost: x\r\nX-Tenant: a\rb\r\n\r\n", &r); /* bare CR */
  expect(&r, 400, "bad_header");
  raw("GET /books/1 HTTP/1.1\r\nHost: x\r\nX(T): a\r\n\r\n", &r);
  expect(&r, 400, "bad_header");
  raw("GET /books/1 HTTP/1.1\r\nHost: x\r\n: a\r\n\r\n", &r);
  expect(&r, 400, "bad_header");
  raw("GET /books/\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n", &r);
  expect(&r, 400, "bad_target");
}

/* A long head (the read buffer grows while it arrives) with many fields is still accepted. */
static void test_large_head_accepted(void **state) {
  (void)state;
  char *req = malloc(20000);
  assert_non_null(req);
  size_t n = (size_t)snprintf(req, 20000, "GET /books/1 HTTP/1.1\r\nHost: x\r\n");
  for (int i = 0; i < 100; i++) {
    n += (size_t)snprintf(req + n, 20000 - n, "X-Filler-%d:  ", i);
    memset(req + n, 'a' + i % 26, 100);
    n += 100;
    n += (size_t)snprintf(req + n, 20000 - n, " \r\n");
  }
  n += (size_t)snprintf(req + n, 20000 - n, "X-Request-Id: last\r\nConnection: close\r\n\r\n");
  raw_res r;
  raw_send(req, n, 3000, &r);
  free(req);
  if (r.status != 200)
    fprintf(stderr, "got: %s\n", r.data);
  assert_int_equal(r.status, 200);
  /* Keep-alive: the checks run again for the second request on one connection. */
  raw("GET /books/1 HTTP/1.1\r\nHost: x\r\n\r\nGET /books/2 HTTP/1.1\r\nHost: x\r\nConnection: "
      "close\r\n\r\n",
      &r);
  assert_int_equal(r.status, 200);
  assert_int_equal(responses(&r), 2);
  assert_non_null(strstr(r.data + 1, "HTTP/1.1 200"));
  raw("GET /books/1 HTTP/1.1\r\nHost: x\r\n\r\nGET /books/2 HTTP/1.1\r\nHost: x\r\nX-A : b\r\n"
      "Connection: close\r\n\r\n",
      &r);
  assert_int_equal(r.status, 200);
  assert_int_equal(responses(&r), 2);
  assert_non_null(strstr(r.data + 1, "HTTP/1.1 400"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_space_before_colon),
      cmocka_unit_test(test_repeated_fields),
      cmocka_unit_test(test_malformed_content_length),
      cmocka_unit_test(test_malformed_content_length_among_others),
      cmocka_unit_test(test_malformed_content_length_admin),
      cmocka_unit_test_setup_teardown(test_malformed_content_length_log_off, quiet_setup,
                                      quiet_teardown),
      cmocka_unit_test(test_transfer_coding),
      cmocka_unit_test(test_host),
      cmocka_unit_test(test_ows_stripped),
      cmocka_unit_test(test_nul_bytes),
      cmocka_unit_test(test_malformed_lines),
      cmocka_unit_test(test_large_head_accepted),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
