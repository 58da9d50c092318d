/* SPDX-License-Identifier: MIT */
/* api.c: the JSON shapes of books and loans, and strict decoding of request bodies. */
#include "server_impl.h"

#include <linkd/error.h>

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static json_t *book_obj(const lk_book *b) {
  return json_pack("{s:I,s:s,s:s,s:o,s:o,s:I}", "id", (json_int_t)b->id, "title", b->title,
                   "author", b->author, "year",
                   b->has_year ? json_integer((json_int_t)b->year) : json_null(), "isbn",
                   b->isbn[0] ? json_string(b->isbn) : json_null(), "stock", (json_int_t)b->stock);
}

static int dump(json_t *o, char **out, size_t *len) {
  *out = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  if (!*out)
    return LK_ENOMEM;
  *len = strlen(*out);
  return LK_OK;
}

int json_book(const lk_book *b, char **out, size_t *len) { return dump(book_obj(b), out, len); }

int json_books_page(const lk_book *books, int n, int limit, bool more, char **out, size_t *len) {
  json_t *arr = json_array();
  for (int i = 0; arr && i < n; i++)
    if (json_array_append_new(arr, book_obj(&books[i])) != 0) {
      json_decref(arr);
      arr = NULL;
    }
  if (!arr)
    return LK_ENOMEM;
  json_t *next = json_null();
  if (more && n > 0) {
    char link[96];
    snprintf(link, sizeof link, "/books?after=%lld&limit=%d", (long long)books[n - 1].id, limit);
    next = json_string(link);
  }
  return dump(json_pack("{s:o,s:o}", "books", arr, "next", next), out, len);
}

int json_loan(const lk_loan *l, char **out, size_t *len) {
  return dump(json_pack("{s:I,s:I,s:o,s:I}", "id", (json_int_t)l->id, "book_id",
                        (json_int_t)l->book_id, "borrower",
                        l->borrower[0] ? json_string(l->borrower) : json_null(), "stock_after",
                        (json_int_t)l->stock_after),
              out, len);
}

/* --- request bodies ------------------------------------------------------------------------ */

static bool bad(lk_resp *out, const char *code, const char *msg, const char *field) {
  resp_error(out, 400, code, "%s%s%s", field ? field : "", field ? ": " : "", msg);
  return false;
}

static bool get_text(json_t *o, const char *name, bool required, char *dst, size_t cap,
                     lk_resp *out) {
  json_t *v = json_object_get(o, name);
  if (!v || json_is_null(v)) {
    if (required)
      return bad(out, "missing_field", "required", name);
    dst[0] = '\0';
    return true;
  }
  if (!json_is_string(v))
    return bad(out, "wrong_type", "must be a string", name);
  size_t n = json_string_length(v);
  if ((required && n == 0) || n >= cap) {
    char msg[64];
    snprintf(msg, sizeof msg, "must be %s-%zu bytes", required ? "1" : "0", cap - 1);
    return bad(out, "bad_value", msg, name);
  }
  memcpy(dst, json_string_value(v), n + 1);
  return true;
}

static bool get_int(json_t *o, const char *name, bool required, bool nullable, int64_t lo,
                    int64_t hi, bool *present, int64_t *dst, lk_resp *out) {
  json_t *v = json_object_get(o, name);
  *present = false;
  if (!v || json_is_null(v)) {
    if (required && !(v && nullable))
      return bad(out, "missing_field", "required", name);
    if (v && !nullable)
      return bad(out, "wrong_type", "must be an integer", name);
    return true;
  }
  if (!json_is_integer(v))
    return bad(out, "wrong_type", "must be an integer", name);
  json_int_t x = json_integer_value(v);
  if (x < lo || x > hi) {
    char msg[96];
    snprintf(msg, sizeof msg, "must be in [%lld, %lld]", (long long)lo, (long long)hi);
    return bad(out, "bad_value", msg, name);
  }
  *present = true;
  *dst = (int64_t)x;
  return true;
}

static bool only_fields(json_t *o, const char *const *allowed, lk_resp *out) {
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) {
    bool ok = false;
    for (const char *const *a = allowed; *a; a++)
      ok |= !strcmp(*a, k);
    if (!ok)
      return bad(out, "unknown_field", "not a field of this resource", k);
  }
  return true;
}

static json_t *load_object(const req *r, bool allow_empty, lk_resp *out) {
  if (r->body_len == 0 && allow_empty)
    return json_object();
  json_error_t e;
  json_t *o = json_loadb(r->body ? r->body : "", r->body_len, JSON_REJECT_DUPLICATES, &e);
  if (!o) {
    resp_error(out, 400, "malformed_json", "line %d column %d: %s", e.line, e.column, e.text);
    return NULL;
  }
  if (!json_is_object(o)) {
    json_decref(o);
    resp_error(out, 400, "wrong_type", "the body must be a JSON object");
    return NULL;
  }
  return o;
}

void input_content_type(req *r, const char *value) {
  r->has_ctype = value != NULL;
  r->ctype_json = false;
  r->ctype[0] = '\0';
  if (!value)
    return;
  snprintf(r->ctype, sizeof r->ctype, "%s", value);
  /* RFC 9110 §8.3.1: type "/" subtype, case-insensitive, then parameters. RFC 8259 defines no
   * parameter for application/json (a charset "has no effect on compliant recipients"), so
   * whatever follows the ';' is ignored. */
  size_t n = strcspn(value, ";");
  while (n > 0 && (value[n - 1] == ' ' || value[n - 1] == '\t'))
    n--;
  r->ctype_json = n == 16 && !strncasecmp(value, "application/json", 16);
}

/* The three routes with a body read it as JSON; any other declared type is refused, not
 * guessed at. An empty body has no type to speak of (and libcurl labels even that one). */
static bool media_type_ok(const req *r, lk_resp *out) {
  if (r->body_len == 0 || !r->has_ctype || r->ctype_json)
    return true;
  resp_error(out, 415, "unsupported_media_type",
             "Content-Type '%s' is not supported; send the body as application/json", r->ctype);
  return false;
}

bool input_parse(req *r, lk_resp *out) {
  bool is_post = !strcmp(r->method, "POST");
  bool takes_body = (r->route == RT_LOANS && is_post) || (r->route == RT_BOOKS && is_post) ||
                    (r->route == RT_BOOK && !strcmp(r->method, "PUT"));
  if (takes_body && !media_type_ok(r, out))
    return false;
  if (r->route == RT_LOANS && is_post) {
    json_t *o = load_object(r, true, out);
    if (!o)
      return false;
    static const char *const fields[] = {"borrower", NULL};
    bool ok = only_fields(o, fields, out) &&
              get_text(o, "borrower", false, r->borrower, sizeof r->borrower, out);
    json_decref(o);
    return ok;
  }
  bool create = r->route == RT_BOOKS && is_post;
  bool replace = r->route == RT_BOOK && !strcmp(r->method, "PUT");
  if (!create && !replace)
    return true;
  json_t *o = load_object(r, false, out);
  if (!o)
    return false;
  static const char *const fields[] = {"title", "author", "year", "isbn", "stock", "id", NULL};
  lk_book *b = &r->book_in;
  memset(b, 0, sizeof *b);
  b->id = r->id;
  bool present, ok = only_fields(o, fields, out);
  int64_t id;
  ok = ok && get_int(o, "id", false, true, 1, INT64_MAX, &present, &id, out);
  if (ok && present && (create || id != r->id))
    ok = bad(out, "bad_value", create ? "is assigned by the server" : "does not match the path",
             "id");
  ok = ok && get_text(o, "title", true, b->title, sizeof b->title, out);
  ok = ok && get_text(o, "author", true, b->author, sizeof b->author, out);
  ok = ok && get_text(o, "isbn", false, b->isbn, sizeof b->isbn, out);
  ok = ok && get_int(o, "year", false, true, -9999, 9999, &b->has_year, &b->year, out);
  ok = ok && get_int(o, "stock", replace, false, 0, 1000000000, &present, &b->stock, out);
  if (ok && !present)
    b->stock = 1;
  json_decref(o);
  return ok;
}
