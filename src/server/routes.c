/* SPDX-License-Identifier: MIT */
/* routes.c: the book API's routes and their handlers. */
#include "idem.h"
#include "server_impl.h"
#include "util.h"

#include <linkd/error.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PAGE_MAX 100
#define PAGE_DEFAULT 20

/* A path segment that must be a positive decimal id in its canonical form: "01" or "+1" would be
 * a second name for book 1 (another cache key, another idempotency fingerprint). */
static bool parse_id(const char *s, size_t len, int64_t *id) {
  return lk_parse_id(s, len, id) == LK_OK;
}

bool route_parse(req *r, lk_resp *out) {
  const char *p = r->path;
  r->route = RT_NONE;
  if (!strcmp(p, "/healthz")) {
    r->route = RT_HEALTHZ;
  } else if (!strcmp(p, "/metrics")) {
    r->route = RT_METRICS;
  } else if (!strcmp(p, "/books")) {
    r->route = RT_BOOKS;
  } else if (!strncmp(p, "/books/", 7) || !strncmp(p, "/loans/", 7)) {
    bool books = p[1] == 'b';
    const char *seg = p + 7;
    size_t n = strcspn(seg, "/");
    const char *rest = seg + n;
    if (n == 0)
      r->route = RT_NONE; /* "/books/" names nothing */
    else if (books && !strcmp(rest, "/loans"))
      r->route = RT_LOANS;
    else if (!*rest)
      r->route = books ? RT_BOOK : RT_LOAN;
    if (r->route != RT_NONE && !parse_id(seg, n, &r->id)) {
      resp_error(
          out, 400, "bad_id",
          "'%.*s' is not a positive integer id (decimal digits without sign or leading zero)",
          (int)(n > 64 ? 64 : n), seg);
      return false;
    }
  }
  if (r->route == RT_NONE) {
    resp_error(out, 404, "not_found", "no route for %.200s", p);
    return false;
  }
  return true;
}

bool route_method_ok(req *r, lk_resp *out) {
  static const char *const allow[] = {
      [RT_HEALTHZ] = "GET, HEAD",
      [RT_METRICS] = "GET, HEAD",
      [RT_BOOKS] = "GET, HEAD, POST",
      [RT_BOOK] = "GET, HEAD, PUT, DELETE",
      [RT_LOANS] = "POST",
      [RT_LOAN] = "GET, HEAD",
  };
  const char *a = allow[r->route];
  const char *m = r->method;
  size_t ml = strlen(m);
  for (const char *p = a; (p = strstr(p, m)) != NULL; p += ml) {
    if ((p == a || p[-1] == ' ') && (p[ml] == ',' || p[ml] == '\0')) {
      r->write = !strcmp(m, "POST") || !strcmp(m, "PUT") || !strcmp(m, "DELETE");
      return true;
    }
  }
  resp_error(out, 405, "method_not_allowed", "%s is not allowed on %.200s", m, r->path);
  resp_header(out, "Allow", a);
  return false;
}

static void store_failure(req *r, lk_resp *out, int rc) {
  if (rc == LK_EDEADLINE) {
    atomic_fetch_add(&r->srv->stats.deadline_expired_in_flight, 1);
    resp_error(out, 504, "deadline_exceeded", "the request's deadline passed while it ran");
  } else if (rc == LK_EAGAIN) {
    /* The database is unreachable (restarting, say) or busy: nothing was applied, or for a
     * COMMIT whose answer was lost, a retry with the same key learns which. */
    atomic_fetch_add(&r->srv->stats.write_errors, 1);
    resp_error(out, 503, "storage_unavailable", "the database is unavailable; retry shortly");
    resp_header(out, "Retry-After", "1");
  } else {
    atomic_fetch_add(&r->srv->stats.write_errors, 1);
    resp_error(out, 500, "storage_error", "%s", lk_strerror(rc));
  }
}

static void take_json(lk_resp *out, int status, int rc, char *body, size_t len) {
  if (rc == LK_OK)
    resp_json_take(out, status, body, len);
  else
    resp_error(out, 500, "internal", "could not encode the response");
}

static void get_book(req *r, lk_resp *out) {
  lk_book b;
  int rc = lk_store_book_get(r->srv->store, r->id, &b, r->dl);
  if (rc == LK_ENOTFOUND) {
    resp_error(out, 404, "not_found", "book %lld does not exist", (long long)r->id);
    return;
  }
  if (rc != LK_OK) {
    store_failure(r, out, rc);
    return;
  }
  char *body;
  size_t len;
  rc = json_book(&b, &body, &len);
  take_json(out, 200, rc, body, len);
}

typedef struct query_seen {
  const char *name;
  const char *value; /* of the first occurrence; NULL for a bare "name" */
  int count;
} query_seen;

static enum MHD_Result count_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value) {
  (void)kind;
  query_seen *q = cls;
  if (key && !strcasecmp(key, q->name) && q->count++ == 0) /* MHD's lookups ignore case too */
    q->value = value;
  return MHD_YES;
}

int query_lookup(struct MHD_Connection *c, const char *name, const char **value) {
  query_seen q = {name, NULL, 0};
  MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, count_arg, &q);
  *value = q.value;
  return q.count;
}

/* A numeric query parameter: once, in its canonical spelling (as ids are: "limit=05" or
 * "after=+3" would be a second name for the same page, another cache key), within [lo, hi]. */
static bool query_int(req *r, const char *name, int64_t lo, int64_t hi, int64_t *v, lk_resp *out) {
  const char *s;
  int n = query_lookup(r->conn, name, &s);
  if (n == 0)
    return true;
  if (n > 1) { /* which one counts would be a guess (MHD keeps the first, others the last) */
    resp_error(out, 400, "bad_query", "%s is given %d times; give it once", name, n);
    return false;
  }
  if (!s) {
    resp_error(out, 400, "bad_query", "%s is given without a value (%s=N)", name, name);
    return false;
  }
  size_t len = strlen(s);
  if (lk_parse_canonical(s, len, v) != LK_OK || *v < lo || *v > hi) {
    /* The value as given, decoded, with anything but printable ASCII as '?' (the message is
     * JSON text, which must be UTF-8), cut at 32 bytes. */
    char shown[40];
    size_t k = 0;
    for (; k < len && k < 32; k++)
      shown[k] = s[k] >= 0x20 && s[k] < 0x7f ? s[k] : '?';
    shown[k] = '\0';
    resp_error(out, 400, "bad_query",
               "%s must be an integer in [%lld, %lld] in decimal digits, without sign or leading "
               "zero; got '%s'%s",
               name, (long long)lo, (long long)hi, shown, len > 32 ? "..." : "");
    return false;
  }
  return true;
}

static void list_books(req *r, lk_resp *out) {
  int64_t limit = PAGE_DEFAULT, after = 0;
  if (!query_int(r, "limit", 1, PAGE_MAX, &limit, out) ||
      !query_int(r, "after", 0, INT64_MAX, &after, out))
    return;
  /* One book more than the page: it exists exactly when there is a next page, so the last page
   * has no "next" link (a full last page used to link to an empty one). */
  lk_book *books = malloc(sizeof *books * (size_t)(limit + 1));
  if (!books) {
    resp_error(out, 500, "internal", "out of memory");
    return;
  }
  int n;
  int rc = lk_store_books_list(r->srv->store, after, (int)limit + 1, books, &n, r->dl);
  if (rc == LK_OK) {
    bool more = n > limit;
    char *body;
    size_t len;
    rc = json_books_page(books, more ? (int)limit : n, (int)limit, more, &body, &len);
    take_json(out, 200, rc, body, len);
  } else {
    store_failure(r, out, rc);
  }
  free(books);
}

static void get_loan(req *r, lk_resp *out) {
  lk_loan l;
  int rc = lk_store_loan_get(r->srv->store, r->id, &l, r->dl);
  if (rc == LK_ENOTFOUND) {
    resp_error(out, 404, "not_found", "loan %lld does not exist", (long long)r->id);
    return;
  }
  if (rc != LK_OK) {
    store_failure(r, out, rc);
    return;
  }
  char *body;
  size_t len;
  rc = json_loan(&l, &body, &len);
  take_json(out, 200, rc, body, len);
}

/* --- writes: the business effect and the key's record in one transaction -------------------- */

static int book_response(lk_store_tx *tx, lk_resp *out, int64_t id, int status) {
  lk_book b;
  int rc = lk_store_tx_book_get(tx, id, &b);
  if (rc != LK_OK)
    return rc;
  char *body;
  size_t len;
  if (json_book(&b, &body, &len) != LK_OK)
    return LK_ENOMEM;
  resp_json_take(out, status, body, len);
  return LK_OK;
}

static int apply(lk_store_tx *tx, req_write *w) {
  req *r = w->r;
  lk_resp *out = w->out;
  int rc;
  char loc[64];
  switch (r->route) {
  case RT_BOOKS: {
    int64_t id;
    rc = lk_store_tx_book_create(tx, &r->book_in, &id);
    if (rc == LK_OK)
      rc = book_response(tx, out, id, 201);
    if (rc == LK_OK) {
      snprintf(loc, sizeof loc, "/books/%lld", (long long)id);
      resp_header(out, "Location", loc);
    }
    return rc;
  }
  case RT_BOOK:
    if (!strcmp(r->method, "DELETE")) {
      rc = lk_store_tx_book_delete(tx, r->id);
      if (rc == LK_OK) {
        resp_free(out);
        resp_init(out, 204);
      }
    } else {
      rc = lk_store_tx_book_update(tx, &r->book_in);
      if (rc == LK_OK)
        rc = book_response(tx, out, r->id, 200);
    }
    if (rc == LK_ENOTFOUND) {
      resp_error(out, 404, "not_found", "book %lld does not exist", (long long)r->id);
      rc = LK_OK;
    }
    return rc;
  case RT_LOANS: {
    lk_loan l;
    memset(&l, 0, sizeof l);
    l.book_id = r->id;
    snprintf(l.tenant, sizeof l.tenant, "%s", r->tenant);
    snprintf(l.borrower, sizeof l.borrower, "%s", r->borrower);
    if (r->keyed)
      snprintf(l.idem_key, sizeof l.idem_key, "%s", r->key);
    snprintf(l.request_id, sizeof l.request_id, "%s", r->request_id);
    rc = lk_store_tx_loan_create(tx, &l);
    if (rc == LK_ENOTFOUND) {
      resp_error(out, 404, "not_found", "book %lld does not exist", (long long)r->id);
      return LK_OK;
    }
    if (rc == LK_ECONFLICT) {
      resp_error(out, 409, "out_of_stock", "book %lld has no copy left", (long long)r->id);
      return LK_OK;
    }
    if (rc != LK_OK)
      return rc;
    char *body;
    size_t len;
    if (json_loan(&l, &body, &len) != LK_OK)
      return LK_ENOMEM;
    resp_json_take(out, 201, body, len);
    snprintf(loc, sizeof loc, "/loans/%lld", (long long)l.id);
    resp_header(out, "Location", loc);
    w->loan_applied = true;
    return LK_OK;
  }
  default: return LK_EINVAL;
  }
}

static int write_tx(lk_store_tx *tx, void *arg) {
  req_write *w = arg;
  int rc = apply(tx, w);
  if (rc != LK_OK || !w->r->keyed)
    return rc;
  return idem_complete(tx, w->r, w->out, w->now_wall);
}

/* After the commit (or the failure) of w's transaction. */
static void write_finished(req_write *w, int rc) {
  req *r = w->r;
  lk_resp *out = w->out;
  if (rc == LK_OK) {
    r->completed = r->keyed;
    if (w->loan_applied)
      atomic_fetch_add(&r->srv->stats.loans_applied, 1);
    return;
  }
  resp_free(out);
  resp_init(out, 500);
  if (rc == LK_ECONFLICT && r->keyed)
    idem_replay_existing(r, out);
  else
    store_failure(r, out, rc);
}

static void do_write(req *r, lk_resp *out) {
  req_write w = {r, out, lk_wall_ns(), false, NULL};
  write_finished(&w, lk_store_write(r->srv->store, r->dl, write_tx, &w));
}

static void write_done(void *arg, int rc) {
  req_write *w = arg;
  write_finished(w, rc);
  w->then(w->r);
}

static bool is_write_route(const req *r) {
  return r->route == RT_LOANS || (r->write && (r->route == RT_BOOKS || r->route == RT_BOOK));
}

bool handle_join(req *r, void (*then)(req *r)) {
  if (!is_write_route(r))
    return false;
  r->wr = (req_write){r, &r->resp, lk_wall_ns(), false, then};
  return lk_store_write_join(r->srv->store, r->dl, write_tx, &r->wr, write_done, &r->wr);
}

void handle_then(req *r, void (*then)(req *r)) {
  if (!is_write_route(r)) {
    handle(r, &r->resp);
    then(r);
    return;
  }
  /* The worker does not wait for the commit: with group commit the thread that commits the
   * group completes each of its writes, so a write costs no wake-up of a waiting worker. */
  r->wr = (req_write){r, &r->resp, lk_wall_ns(), false, then};
  lk_store_write_async(r->srv->store, r->dl, write_tx, &r->wr, write_done, &r->wr);
}

void handle(req *r, lk_resp *out) {
  switch (r->route) {
  case RT_HEALTHZ: {
    bool draining = atomic_load(&r->srv->draining);
    const char *body = draining ? "{\"status\":\"draining\"}" : "{\"status\":\"ok\"}";
    char *b = strdup(body);
    resp_json_take(out, draining ? 503 : 200, b, b ? strlen(b) : 0);
    return;
  }
  case RT_METRICS:
    if (!server_metrics_render(r->srv, out))
      resp_error(out, 500, "internal", "metrics unavailable");
    return;
  case RT_BOOKS:
    if (r->write)
      do_write(r, out);
    else
      list_books(r, out);
    return;
  case RT_BOOK:
    if (r->write)
      do_write(r, out);
    else
      get_book(r, out);
    return;
  case RT_LOANS: do_write(r, out); return;
  case RT_LOAN: get_loan(r, out); return;
  case RT_NONE:
  default: resp_error(out, 404, "not_found", "no route"); return;
  }
}
