/* SPDX-License-Identifier: MIT */
/* Every route of libraryd and its handling of bad input, against the real daemon. */
#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static lib_proc P;

static int group_setup(void **state) {
  (void)state;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const char *args[] = {"--max-body", "4k", NULL};
  return lib_start(&P, args);
}

static int group_teardown(void **state) {
  (void)state;
  int rc = lib_stop(&P);
  lib_cleanup(&P);
  curl_global_cleanup();
  return rc == 0 ? 0 : -1; /* a crash, leak report or hang fails the group */
}

/* Asserts the status and that the body is a JSON error with the given code. */
static void expect_error(const http_res *r, long status, const char *code) {
  if (r->status != status)
    fprintf(stderr, "got %ld: %s\n", r->status, r->body);
  assert_int_equal(r->status, status);
  json_t *j = http_json(r);
  assert_non_null(j);
  assert_string_equal(json_string_value(json_object_get(j, "error")), code);
  assert_non_null(json_string_value(json_object_get(j, "message")));
  json_decref(j);
}

static void test_get_book(void **state) {
  (void)state;
  http_res r;
  assert_int_equal(http_get(P.port, "/books/1", &r), 0);
  assert_int_equal(r.status, 200);
  char ct[64];
  assert_non_null(http_header(&r, "Content-Type", ct, sizeof ct));
  assert_string_equal(ct, "application/json");
  json_t *j = http_json(&r);
  assert_non_null(j);
  assert_int_equal(json_integer_value(json_object_get(j, "id")), 1);
  assert_string_equal(json_string_value(json_object_get(j, "title")), "The C Programming Language");
  assert_true(json_is_integer(json_object_get(j, "stock")));
  assert_true(json_is_integer(json_object_get(j, "year")));
  json_decref(j);
  http_res_free(&r);

  http_get(P.port, "/books/99999", &r);
  expect_error(&r, 404, "not_found");
  http_res_free(&r);
  const char *bad_ids[] = {
      "/books/abc", "/books/0", "/books/-1", "/books/1x", "/books/99999999999999999999", "/loans/x",
      "/books/x/loans",
      /* not the id's canonical spelling: "/books/01" was book 1 under a second name */
      "/books/01", "/books/001", "/books/00", "/books/+1", "/books/%2B1", "/books/%201",
      "/books/1%20", "/books/%091", "/loans/01", "/books/01/loans"};
  for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) {
    http_get(P.port, bad_ids[i], &r);
    expect_error(&r, 400, "bad_id"); /* the id is checked before the method */
    http_res_free(&r);
  }
  http_req head = {.method = "HEAD", .path = "/books/2"};
  http_do(P.port, &head, &r);
  assert_int_equal(r.status, 200);
  assert_int_equal(r.len, 0);
  http_res_free(&r);
}

static void test_list_books_pages(void **state) {
  (void)state;
  http_res r;
  http_get(P.port, "/books?limit=5", &r);
  assert_int_equal(r.status, 200);
  json_t *j = http_json(&r);
  assert_int_equal(json_array_size(json_object_get(j, "books")), 5);
  assert_string_equal(json_string_value(json_object_get(j, "next")), "/books?after=5&limit=5");
  json_decref(j);
  http_res_free(&r);
  /* Follow the links to the end: every seeded book exactly once, in id order. */
  char next[128] = "/books?limit=5";
  int seen = 0, pages = 0;
  int64_t last = 0;
  while (next[0] && pages < 20) {
    http_get(P.port, next, &r);
    assert_int_equal(r.status, 200);
    j = http_json(&r);
    json_t *books = json_object_get(j, "books");
    for (size_t i = 0; i < json_array_size(books); i++) {
      int64_t id = (int64_t)json_integer_value(json_object_get(json_array_get(books, i), "id"));
      assert_true(id > last);
      last = id;
      seen++;
    }
    const char *n = json_string_value(json_object_get(j, "next"));
    snprintf(next, sizeof next, "%s", n ? n : "");
    json_decref(j);
    http_res_free(&r);
    pages++;
  }
  assert_true(seen >= 12);
  const char *bad[] = {"/books?limit=0", "/books?limit=101", "/books?limit=x", "/books?after=-1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    http_get(P.port, bad[i], &r);
    expect_error(&r, 400, "bad_query");
    http_res_free(&r);
  }
}

/* A parameter given twice is refused with its name: MHD hands out the first, other stacks the
 * last, so either answer would be a guess (it was the first, silently). */
static void test_duplicate_query_parameters(void **state) {
  (void)state;
  static const struct {
    const char *path, *name;
  } cases[] = {{"/books?limit=1&limit=2", "limit"},         {"/books?limit=2&limit=2", "limit"},
               {"/books?after=1&after=5&limit=1", "after"}, {"/books?limit=1&LIMIT=2", "limit"},
               {"/books?lim%69t=1&limit=1", "limit"},       {"/books?limit&limit=3", "limit"},
               {"/books?after=0&limit=3&after=0", "after"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    http_res r;
    http_get(P.port, cases[i].path, &r);
    expect_error(&r, 400, "bad_query");
    json_t *j = http_json(&r);
    const char *msg = json_string_value(json_object_get(j, "message"));
    if (strncmp(msg, cases[i].name, strlen(cases[i].name)) || !strstr(msg, "once"))
      fprintf(stderr, "%s: %s\n", cases[i].path, msg);
    assert_int_equal(strncmp(msg, cases[i].name, strlen(cases[i].name)), 0);
    assert_non_null(strstr(msg, "once"));
    json_decref(j);
    http_res_free(&r);
  }
  /* A bare name is given, without a value: not the default. */
  http_res r;
  http_get(P.port, "/books?limit", &r);
  expect_error(&r, 400, "bad_query");
  http_res_free(&r);
  /* Each once, in any case, is fine; other parameters are not read, so not checked. */
  http_get(P.port, "/books?LIMIT=2&after=1&x=1&x=2", &r);
  assert_int_equal(r.status, 200);
  json_t *j = http_json(&r);
  assert_int_equal(json_array_size(json_object_get(j, "books")), 2);
  json_decref(j);
  http_res_free(&r);
  /* The admin listener's one parameter too. */
  http_get(P.admin_port, "/admin/stats?groups=all&groups=all", &r);
  expect_error(&r, 400, "bad_query");
  http_res_free(&r);
  http_get(P.admin_port, "/admin/stats?groups=all", &r);
  assert_int_equal(r.status, 200);
  http_res_free(&r);
}

/* Numeric query parameters take one spelling per value, as ids do: a leading zero, a sign or
 * whitespace is 400 bad_query naming the parameter (limit=05 was limit=5 under another name,
 * another cache key), not the page it spelled. */
static void test_query_numbers_canonical(void **state) {
  (void)state;
  static const struct {
    const char *path, *name, *shown;
  } cases[] = {
      {"/books?limit=05", "limit", "'05'"},
      {"/books?limit=007", "limit", "'007'"},
      {"/books?limit=+5", "limit", NULL}, /* MHD may decode '+' as a space: either is refused */
      {"/books?limit=%2B5", "limit", "'+5'"},
      {"/books?limit=%205", "limit", "' 5'"},
      {"/books?limit=5%20", "limit", "'5 '"},
      {"/books?limit=5.0", "limit", "'5.0'"},
      {"/books?limit=", "limit", "''"},
      {"/books?limit=00", "limit", "'00'"},
      {"/books?after=007", "after", "'007'"},
      {"/books?after=00", "after", "'00'"},
      {"/books?after=-0", "after", "'-0'"},
      {"/books?after=%2B1&limit=2", "after", "'+1'"},
      {"/books?limit=2&after=01", "after", "'01'"},
      {"/books?after=%FF1", "after", "'?1'"}, /* not UTF-8: shown as '?', the body stays JSON */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    http_res r;
    http_get(P.port, cases[i].path, &r);
    if (r.status != 400)
      fprintf(stderr, "%s: %ld %s\n", cases[i].path, r.status, r.body);
    expect_error(&r, 400, "bad_query");
    json_t *j = http_json(&r);
    const char *msg = json_string_value(json_object_get(j, "message"));
    if (strncmp(msg, cases[i].name, strlen(cases[i].name)) != 0 ||
        !strstr(msg, "without sign or leading zero") ||
        (cases[i].shown && !strstr(msg, cases[i].shown)))
      fail_msg("%s: message '%s'", cases[i].path, msg);
    json_decref(j);
    http_res_free(&r);
  }
  /* The canonical spellings still work, 0 included where it is in range. */
  static const char *const good[] = {"/books?limit=5", "/books?after=0&limit=1",
                                     "/books?limit=100&after=1",
                                     "/books?after=9223372036854775807"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    http_res r;
    http_get(P.port, good[i], &r);
    if (r.status != 200)
      fail_msg("%s: %ld %s", good[i], r.status, r.body);
    http_res_free(&r);
  }
  /* A bare name says so. */
  http_res r;
  http_get(P.port, "/books?after", &r);
  expect_error(&r, 400, "bad_query");
  json_t *j = http_json(&r);
  assert_non_null(strstr(json_string_value(json_object_get(j, "message")), "without a value"));
  json_decref(j);
  http_res_free(&r);
}

/* Fault rule ids on the admin listener are canonical too. */
static void test_admin_ids_canonical(void **state) {
  (void)state;
  http_res r;
  http_send(P.admin_port, "POST", "/admin/faults", NULL, "route=GET /nowhere,kind=close", &r);
  assert_int_equal(r.status, 201);
  json_t *j = http_json(&r);
  int64_t id = (int64_t)json_integer_value(json_object_get(j, "id"));
  json_decref(j);
  http_res_free(&r);
  char path[64];
  snprintf(path, sizeof path, "/admin/faults/0%lld", (long long)id);
  http_send(P.admin_port, "DELETE", path, NULL, NULL, &r);
  expect_error(&r, 400, "bad_id");
  http_res_free(&r);
  snprintf(path, sizeof path, "/admin/faults/%lld", (long long)id);
  http_send(P.admin_port, "DELETE", path, NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  http_res_free(&r);
}

/* The number of books and the last id, read in one page. */
static int64_t count_books(int64_t *last_id) {
  http_res r;
  http_get(P.port, "/books?limit=100", &r);
  assert_int_equal(r.status, 200);
  json_t *j = http_json(&r);
  json_t *books = json_object_get(j, "books");
  assert_true(json_is_null(json_object_get(j, "next"))); /* fewer than 100 in this daemon */
  int64_t n = (int64_t)json_array_size(books);
  *last_id = (int64_t)json_integer_value(json_object_get(json_array_get(books, n - 1), "id"));
  json_decref(j);
  http_res_free(&r);
  return n;
}

/* The last page has no next link, even when it is full: a link never leads to an empty page. */
static void test_last_page_has_no_next(void **state) {
  (void)state;
  int64_t last, n = count_books(&last);
  assert_true(n >= 2);
  char path[96];
  http_res r;
  snprintf(path, sizeof path, "/books?limit=%lld", (long long)n); /* exactly all of them */
  http_get(P.port, path, &r);
  json_t *j = http_json(&r);
  assert_int_equal((int64_t)json_array_size(json_object_get(j, "books")), n);
  if (!json_is_null(json_object_get(j, "next")))
    fprintf(stderr, "a full last page links to %s\n",
            json_string_value(json_object_get(j, "next")));
  assert_true(json_is_null(json_object_get(j, "next")));
  json_decref(j);
  http_res_free(&r);
  snprintf(path, sizeof path, "/books?limit=%lld", (long long)(n - 1)); /* one more to come */
  http_get(P.port, path, &r);
  j = http_json(&r);
  assert_non_null(json_string_value(json_object_get(j, "next")));
  json_decref(j);
  http_res_free(&r);
  /* Walking with every page size: each page reached by a link holds a book, and together they
   * hold each book once. */
  for (int64_t limit = 1; limit <= n + 1; limit++) {
    char next[128];
    snprintf(next, sizeof next, "/books?limit=%lld", (long long)limit);
    int64_t seen = 0, pages = 0;
    while (next[0] && pages <= n + 1) {
      http_get(P.port, next, &r);
      assert_int_equal(r.status, 200);
      j = http_json(&r);
      size_t k = json_array_size(json_object_get(j, "books"));
      assert_true(k > 0);
      seen += (int64_t)k;
      const char *nx = json_string_value(json_object_get(j, "next"));
      snprintf(next, sizeof next, "%s", nx ? nx : "");
      json_decref(j);
      http_res_free(&r);
      pages++;
    }
    assert_int_equal(seen, n);
    assert_int_equal(pages, (n + limit - 1) / limit);
  }
  /* Past the end: empty, and no link. */
  snprintf(path, sizeof path, "/books?after=%lld", (long long)last);
  http_get(P.port, path, &r);
  j = http_json(&r);
  assert_int_equal(json_array_size(json_object_get(j, "books")), 0);
  assert_true(json_is_null(json_object_get(j, "next")));
  json_decref(j);
  http_res_free(&r);
}

/* Bodies are JSON: another declared type is 415 and changes nothing; application/json with
 * parameters, in any case, and no Content-Type at all are read as JSON. */
static void test_content_type(void **state) {
  (void)state;
  int64_t id = lib_create_book(P.port, 50);
  assert_true(id > 0);
  char loans[64], book[64];
  snprintf(loans, sizeof loans, "/books/%lld/loans", (long long)id);
  snprintf(book, sizeof book, "/books/%lld", (long long)id);
  static const char *const refused[] = {
      "Content-Type: text/plain",
      "Content-Type: application/x-www-form-urlencoded", /* curl -d's and libcurl's default */
      "Content-Type: text/json",
      "Content-Type: application/jsonx",
      "Content-Type: application/merge-patch+json", /* JSON, but not a whole resource */
      "Content-Type: application/json-seq",
      "Content-Type: multipart/form-data; boundary=x",
      "Content-Type;", /* present and empty */
  };
  int64_t stock = lib_stock(P.port, id);
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    const char *h[] = {refused[i], NULL};
    http_res r;
    http_send(P.port, "POST", loans, h, "{\"borrower\":\"ct\"}", &r);
    expect_error(&r, 415, "unsupported_media_type");
    http_res_free(&r);
    http_send(P.port, "POST", "/books", h, "{\"title\":\"t\",\"author\":\"a\"}", &r);
    expect_error(&r, 415, "unsupported_media_type");
    http_res_free(&r);
    http_send(P.port, "PUT", book, h, "{\"title\":\"t\",\"author\":\"a\",\"stock\":50}", &r);
    expect_error(&r, 415, "unsupported_media_type");
    http_res_free(&r);
  }
  assert_int_equal(lib_stock(P.port, id), stock);
  /* A keyed loan refused for its type stores nothing: the corrected retry runs. */
  const char *keyed_text[] = {"Idempotency-Key: ct-1", "Content-Type: text/plain", NULL};
  const char *keyed_json[] = {"Idempotency-Key: ct-1", "Content-Type: application/json", NULL};
  http_res r;
  http_send(P.port, "POST", loans, keyed_text, "{}", &r);
  expect_error(&r, 415, "unsupported_media_type");
  http_res_free(&r);
  http_send(P.port, "POST", loans, keyed_json, "{}", &r);
  assert_int_equal(r.status, 201);
  char v[16];
  assert_null(http_header(&r, "Idempotent-Replayed", v, sizeof v));
  http_res_free(&r);
  static const char *const accepted[] = {
      "Content-Type: application/json",
      "Content-Type: APPLICATION/JSON",
      "Content-Type: application/json; charset=utf-8",
      "Content-Type: Application/Json ;charset=\"UTF-8\"",
      "Content-Type: application/json;charset=iso-8859-1", /* RFC 8259: no effect */
      "Content-Type:",                                     /* none at all */
  };
  for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++) {
    const char *h[] = {accepted[i], NULL};
    http_send(P.port, "POST", loans, h, "{\"borrower\":\"ct\"}", &r);
    if (r.status != 201)
      fprintf(stderr, "%s: %ld %s\n", accepted[i], r.status, r.body);
    assert_int_equal(r.status, 201);
    http_res_free(&r);
  }
  assert_int_equal(lib_stock(P.port, id), stock - 1 - 6);
  /* An empty body has no type to refuse (libcurl labels even that one), and a route that reads
   * no body ignores the header. */
  const char *text[] = {"Content-Type: text/plain", NULL};
  http_send(P.port, "POST", loans, text, NULL, &r);
  assert_int_equal(r.status, 201);
  http_res_free(&r);
  http_send(P.port, "POST", "/books", text, NULL, &r);
  expect_error(&r, 400, "malformed_json");
  http_res_free(&r);
  http_send(P.port, "DELETE", "/books/777777", text, "x", &r);
  expect_error(&r, 404, "not_found");
  http_res_free(&r);
}

static void test_create_update_delete(void **state) {
  (void)state;
  http_res r;
  http_send(P.port, "POST", "/books", NULL,
            "{\"title\":\"Dune\",\"author\":\"Frank Herbert\",\"year\":1965,"
            "\"isbn\":\"978-0441013593\",\"stock\":2}",
            &r);
  assert_int_equal(r.status, 201);
  char loc[64];
  assert_non_null(http_header(&r, "Location", loc, sizeof loc));
  json_t *j = http_json(&r);
  int64_t id = (int64_t)json_integer_value(json_object_get(j, "id"));
  char path[64];
  snprintf(path, sizeof path, "/books/%lld", (long long)id);
  assert_string_equal(loc, path);
  json_decref(j);
  http_res_free(&r);

  http_get(P.port, path, &r);
  assert_int_equal(r.status, 200);
  j = http_json(&r);
  assert_string_equal(json_string_value(json_object_get(j, "title")), "Dune");
  assert_int_equal(json_integer_value(json_object_get(j, "stock")), 2);
  json_decref(j);
  http_res_free(&r);

  http_send(P.port, "PUT", path, NULL,
            "{\"title\":\"Dune Messiah\",\"author\":\"Frank Herbert\",\"stock\":7,\"year\":null}",
            &r);
  assert_int_equal(r.status, 200);
  j = http_json(&r);
  assert_string_equal(json_string_value(json_object_get(j, "title")), "Dune Messiah");
  assert_true(json_is_null(json_object_get(j, "year")));
  assert_true(json_is_null(json_object_get(j, "isbn")));
  assert_int_equal(json_integer_value(json_object_get(j, "stock")), 7);
  json_decref(j);
  http_res_free(&r);

  http_send(P.port, "DELETE", path, NULL, NULL, &r);
  assert_int_equal(r.status, 204);
  assert_int_equal(r.len, 0);
  http_res_free(&r);
  http_get(P.port, path, &r);
  expect_error(&r, 404, "not_found");
  http_res_free(&r);
  http_send(P.port, "DELETE", path, NULL, NULL, &r);
  expect_error(&r, 404, "not_found");
  http_res_free(&r);
  http_send(P.port, "PUT", path, NULL, "{\"title\":\"x\",\"author\":\"y\",\"stock\":1}", &r);
  expect_error(&r, 404, "not_found");
  http_res_free(&r);
  /* POST without a stock gets one copy. */
  http_send(P.port, "POST", "/books", NULL, "{\"title\":\"t\",\"author\":\"a\"}", &r);
  assert_int_equal(r.status, 201);
  j = http_json(&r);
  assert_int_equal(json_integer_value(json_object_get(j, "stock")), 1);
  json_decref(j);
  http_res_free(&r);
}

static void test_bad_bodies(void **state) {
  (void)state;
  static const struct {
    const char *method, *path, *body, *code;
  } cases[] = {
      {"POST", "/books", "{\"title\":", "malformed_json"},
      {"POST", "/books", "not json", "malformed_json"},
      {"POST", "/books", "", "malformed_json"},
      {"POST", "/books", "[1,2]", "wrong_type"},
      {"POST", "/books", "{\"title\":1,\"author\":\"a\"}", "wrong_type"},
      {"POST", "/books", "{\"title\":\"t\",\"author\":\"a\",\"stock\":\"3\"}", "wrong_type"},
      {"POST", "/books", "{\"title\":\"t\",\"author\":\"a\",\"stock\":1.5}", "wrong_type"},
      {"POST", "/books", "{\"title\":\"t\",\"author\":\"a\",\"stock\":-1}", "bad_value"},
      {"POST", "/books", "{\"title\":\"t\",\"author\":\"a\",\"year\":100000}", "bad_value"},
      {"POST", "/books", "{\"title\":\"\",\"author\":\"a\"}", "bad_value"},
      {"POST", "/books", "{\"author\":\"a\"}", "missing_field"},
      {"POST", "/books", "{\"title\":\"t\",\"author\":\"a\",\"color\":\"red\"}", "unknown_field"},
      {"POST", "/books", "{\"title\":\"t\",\"author\":\"a\",\"id\":5}", "bad_value"},
      {"POST", "/books", "{\"title\":\"t\",\"title\":\"u\",\"author\":\"a\"}", "malformed_json"},
      {"POST", "/books", "{\"title\":\"t\\u0000\",\"author\":\"a\"}", "malformed_json"},
      {"PUT", "/books/1", "{\"title\":\"t\",\"author\":\"a\"}", "missing_field"},
      {"PUT", "/books/1", "{\"title\":\"t\",\"author\":\"a\",\"stock\":1,\"id\":2}", "bad_value"},
      {"POST", "/books/1/loans", "{\"borrower\":7}", "wrong_type"},
      {"POST", "/books/1/loans", "{\"who\":\"x\"}", "unknown_field"},
      {"POST", "/books/1/loans", "nope", "malformed_json"},
  };
  int64_t stock = lib_stock(P.port, 1);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    http_res r;
    http_send(P.port, cases[i].method, cases[i].path, NULL, cases[i].body, &r);
    expect_error(&r, 400, cases[i].code);
    http_res_free(&r);
  }
  /* Invalid UTF-8 is malformed JSON, too. */
  http_res r;
  http_send(P.port, "POST", "/books", NULL, "{\"title\":\"\xff\xfe\",\"author\":\"a\"}", &r);
  expect_error(&r, 400, "malformed_json");
  http_res_free(&r);
  /* A title longer than 200 bytes. */
  char body[600];
  char title[260];
  memset(title, 'x', 250);
  title[250] = '\0';
  snprintf(body, sizeof body, "{\"title\":\"%s\",\"author\":\"a\"}", title);
  http_send(P.port, "POST", "/books", NULL, body, &r);
  expect_error(&r, 400, "bad_value");
  http_res_free(&r);
  assert_int_equal(lib_stock(P.port, 1), stock); /* no bad request changed anything */
}

static void test_oversize_bodies(void **state) {
  (void)state;
  size_t n = 8192; /* the daemon runs with --max-body 4k */
  char *big = malloc(n + 1);
  memset(big, ' ', n);
  big[0] = '{';
  big[n - 1] = '}';
  big[n] = '\0';
  http_res r;
  http_send(P.port, "POST", "/books", NULL, big, &r);
  expect_error(&r, 413, "body_too_large");
  http_res_free(&r);
  /* Without Content-Length (chunked), the limit is enforced while reading. */
  http_req rq = {.method = "POST", .path = "/books", .body = big, .chunked = true};
  http_do(P.port, &rq, &r);
  expect_error(&r, 413, "body_too_large");
  http_res_free(&r);
  free(big);
  /* A path longer than the limit. */
  char path[1300] = "/books/";
  memset(path + 7, '1', 1200);
  path[1207] = '\0';
  http_get(P.port, path, &r);
  expect_error(&r, 414, "uri_too_long");
  http_res_free(&r);
}

static void test_methods_and_unknown_routes(void **state) {
  (void)state;
  http_res r;
  http_send(P.port, "DELETE", "/books", NULL, NULL, &r);
  expect_error(&r, 405, "method_not_allowed");
  char allow[64];
  assert_non_null(http_header(&r, "Allow", allow, sizeof allow));
  assert_string_equal(allow, "GET, HEAD, POST");
  http_res_free(&r);
  http_send(P.port, "PATCH", "/books/1", NULL, "{}", &r);
  expect_error(&r, 405, "method_not_allowed");
  http_res_free(&r);
  http_get(P.port, "/nope", &r);
  expect_error(&r, 404, "not_found");
  http_res_free(&r);
  http_get(P.port, "/books/", &r);
  expect_error(&r, 404, "not_found");
  http_res_free(&r);
  const char *h[] = {"X-Tenant: has space", NULL};
  http_send(P.port, "POST", "/books/1/loans", h, NULL, &r);
  expect_error(&r, 400, "bad_tenant");
  http_res_free(&r);
}

static void test_loans(void **state) {
  (void)state;
  int64_t id = lib_create_book(P.port, 2);
  assert_true(id > 0);
  char path[64];
  snprintf(path, sizeof path, "/books/%lld/loans", (long long)id);
  http_res r;
  http_send(P.port, "POST", path, NULL, "{\"borrower\":\"ann\"}", &r);
  assert_int_equal(r.status, 201);
  json_t *j = http_json(&r);
  assert_int_equal(json_integer_value(json_object_get(j, "stock_after")), 1);
  assert_string_equal(json_string_value(json_object_get(j, "borrower")), "ann");
  int64_t loan = (int64_t)json_integer_value(json_object_get(j, "id"));
  json_decref(j);
  char loc[64], want[64];
  snprintf(want, sizeof want, "/loans/%lld", (long long)loan);
  assert_string_equal(http_header(&r, "Location", loc, sizeof loc), want);
  http_res_free(&r);
  http_get(P.port, want, &r);
  assert_int_equal(r.status, 200);
  j = http_json(&r);
  assert_int_equal(json_integer_value(json_object_get(j, "book_id")), id);
  json_decref(j);
  http_res_free(&r);
  /* No body at all is a loan without a borrower. */
  http_send(P.port, "POST", path, NULL, NULL, &r);
  assert_int_equal(r.status, 201);
  http_res_free(&r);
  assert_int_equal(lib_stock(P.port, id), 0);
  http_send(P.port, "POST", path, NULL, NULL, &r);
  expect_error(&r, 409, "out_of_stock");
  http_res_free(&r);
  assert_int_equal(lib_stock(P.port, id), 0);
  http_send(P.port, "POST", "/books/777777/loans", NULL, NULL, &r);
  expect_error(&r, 404, "not_found");
  http_res_free(&r);
  http_get(P.port, "/loans/777777", &r);
  expect_error(&r, 404, "not_found");
  http_res_free(&r);
}

/* Without keys, resent loans are applied again; libraryd's records make that visible. */
static void test_duplicate_loans_are_countable(void **state) {
  (void)state;
  int64_t id = lib_create_book(P.port, 10);
  char path[64];
  snprintf(path, sizeof path, "/books/%lld/loans", (long long)id);
  const char *h[] = {"X-Request-Id: op-1", "X-Tenant: naive", NULL};
  for (int i = 0; i < 3; i++) {
    http_res r;
    http_send(P.port, "POST", path, h, NULL, &r);
    assert_int_equal(r.status, 201);
    http_res_free(&r);
  }
  json_t *st = lib_stats(&P);
  assert_non_null(st);
  json_t *t = json_object_get(json_object_get(st, "tenants"), "tenant:naive");
  assert_int_equal(json_integer_value(json_object_get(t, "loans")), 3);
  assert_int_equal(json_integer_value(json_object_get(t, "duplicate_loans_by_request_id")), 2);
  json_t *dups = json_object_get(json_object_get(st, "duplicates"), "by_request_id");
  assert_int_equal(json_array_size(dups), 1);
  json_t *d = json_array_get(dups, 0);
  assert_string_equal(json_string_value(json_object_get(d, "id")), "op-1");
  assert_int_equal(json_integer_value(json_object_get(d, "count")), 3);
  assert_int_equal(json_integer_value(json_object_get(d, "book_id")), id);
  json_decref(st);
}

/* Adds a fault rule on the admin listener; its id. */
static long long add_fault(const char *rule) {
  http_res r;
  http_send(P.admin_port, "POST", "/admin/faults", NULL, rule, &r);
  assert_int_equal(r.status, 201);
  json_t *j = http_json(&r);
  long long id = (long long)json_integer_value(json_object_get(j, "id"));
  json_decref(j);
  http_res_free(&r);
  assert_true(id > 0);
  return id;
}

static void remove_fault(long long id) {
  char path[64];
  snprintf(path, sizeof path, "/admin/faults/%lld", id);
  http_res r;
  http_send(P.admin_port, "DELETE", path, NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  http_res_free(&r);
}

static void test_health_and_metrics(void **state) {
  (void)state;
  http_res r;
  /* Statuses without a code label of their own (injected 418 and 507) count under their class,
   * so code=~"5.." finds every server error; 415 and 501, which libraryd sends itself, have
   * their own. */
  long long f418 = add_fault("route=GET /books/777001,kind=418,count=1");
  long long f507 = add_fault("route=GET /books/777002,kind=status,code=507,count=1");
  http_get(P.port, "/books/777001", &r);
  assert_int_equal(r.status, 418);
  http_res_free(&r);
  http_get(P.port, "/books/777002", &r);
  assert_int_equal(r.status, 507);
  http_res_free(&r);
  remove_fault(f418);
  remove_fault(f507);
  const char *text_type[] = {"Content-Type: text/plain", NULL};
  http_send(P.port, "POST", "/books", text_type, "{\"title\":\"t\",\"author\":\"a\"}", &r);
  assert_int_equal(r.status, 415);
  http_res_free(&r);
  http_get(P.port, "/healthz", &r);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.body, "\"ok\""));
  http_res_free(&r);
  http_get(P.port, "/metrics", &r);
  assert_int_equal(r.status, 200);
  char ct[96];
  assert_non_null(http_header(&r, "Content-Type", ct, sizeof ct));
  assert_non_null(strstr(ct, "text/plain; version=0.0.4"));
  assert_non_null(strstr(r.body, "libraryd_requests_total{route=\"/books/{id}\",method=\"GET\","
                                 "code=\"200\"}"));
  assert_non_null(strstr(r.body, "libraryd_request_duration_seconds_bucket"));
  assert_non_null(strstr(r.body, "libraryd_loans_applied_total"));
  assert_non_null(strstr(r.body, "libraryd_requests_total{route=\"/books/{id}\",method=\"GET\","
                                 "code=\"4xx\"} 1\n"));
  assert_non_null(strstr(r.body, "libraryd_requests_total{route=\"/books/{id}\",method=\"GET\","
                                 "code=\"5xx\"} 1\n"));
  assert_non_null(strstr(r.body, "libraryd_requests_total{route=\"/books\",method=\"POST\","
                                 "code=\"415\"}"));
  assert_null(strstr(r.body, "code=\"other\""));
  /* promtool (a test dependency) must accept the exposition. */
  FILE *pt = popen("promtool check metrics >/dev/null 2>&1", "w");
  assert_non_null(pt);
  fwrite(r.body, 1, r.len, pt);
  int st = pclose(pt);
  assert_int_equal(WEXITSTATUS(st), 0);
  http_res_free(&r);
}

/* Writes `len` raw bytes on a new connection (then shuts its sending side if `half_close`: MHD
 * drops a request still unanswered then) and reads what comes back into out (NUL-terminated,
 * cut at cap - 1) until the daemon closes or 3 s pass. */
static void raw_exchange(const char *data, size_t len, bool half_close, char *out, size_t cap) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)P.port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_true(write(fd, data, len) == (ssize_t)len);
  if (half_close)
    shutdown(fd, SHUT_WR);
  struct timeval tv = {3, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  size_t n = 0;
  char spill[512];
  ssize_t k;
  while ((k = n < cap - 1 ? read(fd, out + n, cap - 1 - n) : read(fd, spill, sizeof spill)) > 0)
    if (n < cap - 1)
      n += (size_t)k;
  out[n] = '\0';
  close(fd);
}

/* Garbage on a raw socket: the daemon answers (or closes) and keeps serving. */
static void test_garbage_does_not_crash(void **state) {
  (void)state;
  const char *junk[] = {"\x00\x01\x02\xff\r\n\r\n", "GET /books/1 HTTP/9.9\r\n\r\n",
                        "POST /books HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                        "GET /books/1 HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
                        "POST /books HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{"};
  for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
    char buf[512];
    raw_exchange(junk[i], i == 0 ? 8 : strlen(junk[i]), true, buf, sizeof buf);
  }
  http_res r;
  http_get(P.port, "/books/1", &r);
  assert_int_equal(r.status, 200);
  http_res_free(&r);
}

/* The absolute form of a target (what a proxy sends) routes by its path (RFC 9112 3.2.2: a
 * server must accept it); it was 404. */
static void test_absolute_form_target(void **state) {
  (void)state;
  static const char *const reqs[] = {
      "GET http://library.test/books/1 HTTP/1.1\r\nHost: library.test\r\nConnection: close\r\n\r\n",
      "GET HTTPS://library.test:8443/books/1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"};
  for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
    char buf[2048];
    raw_exchange(reqs[i], strlen(reqs[i]), false, buf, sizeof buf);
    assert_true(strncmp(buf, "HTTP/1.1 200", 12) == 0);
    assert_non_null(strstr(buf, "\"id\":1"));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_get_book),
      cmocka_unit_test(test_list_books_pages),
      cmocka_unit_test(test_duplicate_query_parameters),
      cmocka_unit_test(test_query_numbers_canonical),
      cmocka_unit_test(test_admin_ids_canonical),
      cmocka_unit_test(test_last_page_has_no_next),
      cmocka_unit_test(test_create_update_delete),
      cmocka_unit_test(test_bad_bodies),
      cmocka_unit_test(test_content_type),
      cmocka_unit_test(test_oversize_bodies),
      cmocka_unit_test(test_methods_and_unknown_routes),
      cmocka_unit_test(test_loans),
      cmocka_unit_test(test_duplicate_loans_are_countable),
      cmocka_unit_test(test_health_and_metrics),
      cmocka_unit_test(test_garbage_does_not_crash),
      cmocka_unit_test(test_absolute_form_target),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
