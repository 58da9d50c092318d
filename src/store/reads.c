/* SPDX-License-Identifier: MIT */
/* reads.c: queries on reader connections (WAL snapshots; never block the writer). */
#include "store_impl.h"

#include <linkd/error.h>

#include <stdlib.h>
#include <string.h>

static void row_to_book(sqlite3_stmt *st, lk_book *b) {
  b->id = sqlite3_column_int64(st, 0);
  store_col_text(st, 1, b->title, sizeof b->title);
  store_col_text(st, 2, b->author, sizeof b->author);
  b->has_year = sqlite3_column_type(st, 3) != SQLITE_NULL;
  b->year = b->has_year ? sqlite3_column_int64(st, 3) : 0;
  store_col_text(st, 4, b->isbn, sizeof b->isbn);
  b->stock = sqlite3_column_int64(st, 5);
}

/* Borrows a reader and arms its deadline; NULL when no connection could be opened. */
static store_conn *reader(sq_store *s, lk_deadline dl) {
  store_conn *c = store_reader_get(s);
  if (c)
    c->deadline = dl.at;
  return c;
}

int sq_book_get(sq_store *s, int64_t id, lk_book *out, lk_deadline dl) {
  store_conn *c = reader(s, dl);
  if (!c)
    return LK_EIO;
  sqlite3_stmt *st = store_stmt(c, ST_BOOK_GET);
  int rc = LK_EIO;
  if (st) {
    sqlite3_bind_int64(st, 1, id);
    int r = sqlite3_step(st);
    if (r == SQLITE_ROW) {
      row_to_book(st, out);
      rc = LK_OK;
    } else {
      rc = r == SQLITE_DONE ? LK_ENOTFOUND : store_err(r);
    }
    sqlite3_reset(st);
  }
  store_reader_put(s, c);
  return rc;
}

int sq_books_list(sq_store *s, int64_t after, int limit, lk_book *out, int *n,
                        lk_deadline dl) {
  *n = 0;
  store_conn *c = reader(s, dl);
  if (!c)
    return LK_EIO;
  sqlite3_stmt *st = store_stmt(c, ST_BOOKS_LIST);
  int rc = LK_EIO;
  if (st) {
    sqlite3_bind_int64(st, 1, after);
    sqlite3_bind_int(st, 2, limit);
    int r = SQLITE_DONE;
    while (*n < limit && (r = sqlite3_step(st)) == SQLITE_ROW)
      row_to_book(st, &out[(*n)++]);
    rc = (*n == limit || r == SQLITE_DONE) ? LK_OK : store_err(r);
    sqlite3_reset(st);
  }
  store_reader_put(s, c);
  return rc;
}

int sq_loan_get(sq_store *s, int64_t id, lk_loan *out, lk_deadline dl) {
  store_conn *c = reader(s, dl);
  if (!c)
    return LK_EIO;
  sqlite3_stmt *st = store_stmt(c, ST_LOAN_GET);
  int rc = LK_EIO;
  if (st) {
    sqlite3_bind_int64(st, 1, id);
    int r = sqlite3_step(st);
    if (r == SQLITE_ROW) {
      out->id = sqlite3_column_int64(st, 0);
      out->book_id = sqlite3_column_int64(st, 1);
      store_col_text(st, 2, out->tenant, sizeof out->tenant);
      store_col_text(st, 3, out->borrower, sizeof out->borrower);
      store_col_text(st, 4, out->idem_key, sizeof out->idem_key);
      store_col_text(st, 5, out->request_id, sizeof out->request_id);
      out->created_wall_ns = sqlite3_column_int64(st, 6);
      out->stock_after = sqlite3_column_int64(st, 7);
      rc = LK_OK;
    } else {
      rc = r == SQLITE_DONE ? LK_ENOTFOUND : store_err(r);
    }
    sqlite3_reset(st);
  }
  store_reader_put(s, c);
  return rc;
}

int sq_idem_get(sq_store *s, const char *tenant, const char *key, int64_t min_created_wall_ns,
                      lk_idem_record *out, lk_deadline dl) {
  memset(out, 0, sizeof *out);
  store_conn *c = reader(s, dl);
  if (!c)
    return LK_EIO;
  sqlite3_stmt *st = store_stmt(c, ST_IDEM_GET);
  int rc = LK_EIO;
  if (st) {
    sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, min_created_wall_ns);
    int r = sqlite3_step(st);
    if (r == SQLITE_ROW) {
      rc = LK_OK;
      const void *fp = sqlite3_column_blob(st, 0);
      if (fp && sqlite3_column_bytes(st, 0) == (int)sizeof out->fingerprint)
        memcpy(out->fingerprint, fp, sizeof out->fingerprint);
      out->status = sqlite3_column_int(st, 1);
      const unsigned char *h = sqlite3_column_text(st, 2);
      size_t hl = (size_t)sqlite3_column_bytes(st, 2);
      const void *b = sqlite3_column_blob(st, 3);
      size_t bl = (size_t)sqlite3_column_bytes(st, 3);
      out->headers = malloc(hl + 1);
      out->body = malloc(bl ? bl : 1);
      if (!out->headers || !out->body) {
        lk_idem_record_clear(out);
        rc = LK_ENOMEM;
      } else {
        if (hl)
          memcpy(out->headers, h, hl);
        out->headers[hl] = '\0';
        if (bl)
          memcpy(out->body, b, bl);
        out->body_len = bl;
      }
      out->created_wall_ns = sqlite3_column_int64(st, 4);
    } else {
      rc = r == SQLITE_DONE ? LK_ENOTFOUND : store_err(r);
    }
    sqlite3_reset(st);
  }
  store_reader_put(s, c);
  return rc;
}
