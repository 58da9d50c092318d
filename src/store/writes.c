/* SPDX-License-Identifier: MIT */
/* writes.c: write transactions on the single writer connection. */
#include "store_impl.h"

#include <linkd/error.h>

#include <string.h>

static int exec_simple(store_conn *c, const char *sql) {
  int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
  return rc == SQLITE_OK ? LK_OK : (store_err(rc) == LK_OK ? LK_EIO : store_err(rc));
}

int sq_write(sq_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg) {
  const lk_clock *clk = s->cfg.clock;
  if (lk_deadline_expired(dl, clk->now(clk)))
    return LK_EDEADLINE;
  pthread_mutex_lock(&s->wmu);
  store_conn *c = s->writer;
  c->deadline = dl.at;
  int rc = exec_simple(c, "BEGIN IMMEDIATE");
  if (rc == LK_OK) {
    sq_tx tx = {{&sq_ops}, s, c};
    rc = fn(&tx.base, arg);
    /* The last check before the effect becomes visible: past the deadline the caller has
     * given up, so nothing may be applied on its behalf. */
    if (rc == LK_OK && lk_deadline_expired(dl, clk->now(clk)))
      rc = LK_EDEADLINE;
    if (rc == LK_OK) {
      /* COMMIT must not be interrupted half-way through by the progress handler. */
      c->deadline = LK_DEADLINE_NONE;
      rc = exec_simple(c, "COMMIT");
    }
    if (rc != LK_OK && !sqlite3_get_autocommit(c->db)) {
      c->deadline = LK_DEADLINE_NONE;
      sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
    }
  }
  c->deadline = LK_DEADLINE_NONE;
  pthread_mutex_unlock(&s->wmu);
  return rc;
}

int sq_tx_book_get(sq_tx *tx, int64_t id, lk_book *out) {
  sqlite3_stmt *st = store_stmt(tx->c, ST_BOOK_GET);
  if (!st)
    return LK_EIO;
  sqlite3_bind_int64(st, 1, id);
  int r = sqlite3_step(st);
  int rc;
  if (r == SQLITE_ROW) {
    out->id = sqlite3_column_int64(st, 0);
    store_col_text(st, 1, out->title, sizeof out->title);
    store_col_text(st, 2, out->author, sizeof out->author);
    out->has_year = sqlite3_column_type(st, 3) != SQLITE_NULL;
    out->year = out->has_year ? sqlite3_column_int64(st, 3) : 0;
    store_col_text(st, 4, out->isbn, sizeof out->isbn);
    out->stock = sqlite3_column_int64(st, 5);
    rc = LK_OK;
  } else {
    rc = r == SQLITE_DONE ? LK_ENOTFOUND : store_err(r);
  }
  sqlite3_reset(st);
  return rc;
}

static void bind_book(sqlite3_stmt *st, int first, const lk_book *b) {
  sqlite3_bind_text(st, first, b->title, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, first + 1, b->author, -1, SQLITE_STATIC);
  if (b->has_year)
    sqlite3_bind_int64(st, first + 2, b->year);
  else
    sqlite3_bind_null(st, first + 2);
  if (b->isbn[0])
    sqlite3_bind_text(st, first + 3, b->isbn, -1, SQLITE_STATIC);
  else
    sqlite3_bind_null(st, first + 3);
  sqlite3_bind_int64(st, first + 4, b->stock);
}

static int step_done(sqlite3_stmt *st) {
  int r = sqlite3_step(st);
  sqlite3_reset(st);
  return r == SQLITE_DONE ? LK_OK : (store_err(r) == LK_OK ? LK_EIO : store_err(r));
}

int sq_tx_book_create(sq_tx *tx, const lk_book *in, int64_t *id) {
  sqlite3_stmt *st = store_stmt(tx->c, ST_BOOK_INSERT);
  if (!st)
    return LK_EIO;
  bind_book(st, 1, in);
  sqlite3_bind_int64(st, 6, lk_wall_ns());
  int rc = step_done(st);
  if (rc == LK_OK)
    *id = sqlite3_last_insert_rowid(tx->c->db);
  return rc;
}

int sq_tx_book_update(sq_tx *tx, const lk_book *in) {
  sqlite3_stmt *st = store_stmt(tx->c, ST_BOOK_UPDATE);
  if (!st)
    return LK_EIO;
  sqlite3_bind_int64(st, 1, in->id);
  bind_book(st, 2, in);
  sqlite3_bind_int64(st, 7, lk_wall_ns());
  int rc = step_done(st);
  if (rc == LK_OK && sqlite3_changes(tx->c->db) == 0)
    rc = LK_ENOTFOUND;
  return rc;
}

int sq_tx_book_delete(sq_tx *tx, int64_t id) {
  sqlite3_stmt *st = store_stmt(tx->c, ST_BOOK_DELETE);
  if (!st)
    return LK_EIO;
  sqlite3_bind_int64(st, 1, id);
  int rc = step_done(st);
  if (rc == LK_OK && sqlite3_changes(tx->c->db) == 0)
    rc = LK_ENOTFOUND;
  return rc;
}

static void bind_opt_text(sqlite3_stmt *st, int i, const char *v) {
  if (v && *v)
    sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
  else
    sqlite3_bind_null(st, i);
}

int sq_tx_loan_create(sq_tx *tx, lk_loan *loan) {
  int64_t now = lk_wall_ns();
  sqlite3_stmt *st = store_stmt(tx->c, ST_STOCK_TAKE);
  if (!st)
    return LK_EIO;
  sqlite3_bind_int64(st, 1, loan->book_id);
  sqlite3_bind_int64(st, 2, now);
  int r = sqlite3_step(st);
  int64_t stock = r == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
  if (r == SQLITE_ROW)
    r = sqlite3_step(st); /* RETURNING: run the statement to completion */
  sqlite3_reset(st);
  if (r != SQLITE_DONE)
    return store_err(r) == LK_OK ? LK_EIO : store_err(r);
  if (stock < 0) {
    /* No row changed: either the book is missing or it has no copy left. */
    lk_book b;
    int rc = sq_tx_book_get(tx, loan->book_id, &b);
    return rc == LK_OK ? LK_ECONFLICT : rc;
  }
  st = store_stmt(tx->c, ST_LOAN_INSERT);
  if (!st)
    return LK_EIO;
  sqlite3_bind_int64(st, 1, loan->book_id);
  sqlite3_bind_text(st, 2, loan->tenant, -1, SQLITE_STATIC);
  bind_opt_text(st, 3, loan->borrower);
  bind_opt_text(st, 4, loan->idem_key);
  bind_opt_text(st, 5, loan->request_id);
  sqlite3_bind_int64(st, 6, now);
  sqlite3_bind_int64(st, 7, stock);
  int rc = step_done(st);
  if (rc != LK_OK)
    return rc;
  loan->id = sqlite3_last_insert_rowid(tx->c->db);
  loan->stock_after = stock;
  loan->created_wall_ns = now;
  return LK_OK;
}

int sq_tx_idem_put(sq_tx *tx, const char *tenant, const char *key,
                         const lk_idem_record *rec, int64_t min_created_wall_ns) {
  sqlite3_stmt *st = store_stmt(tx->c, ST_IDEM_DELETE_EXPIRED);
  if (!st)
    return LK_EIO;
  sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 3, min_created_wall_ns);
  int rc = step_done(st);
  if (rc != LK_OK)
    return rc;
  st = store_stmt(tx->c, ST_IDEM_INSERT);
  if (!st)
    return LK_EIO;
  sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
  sqlite3_bind_blob(st, 3, rec->fingerprint, (int)sizeof rec->fingerprint, SQLITE_STATIC);
  sqlite3_bind_int(st, 4, rec->status);
  sqlite3_bind_text(st, 5, rec->headers ? rec->headers : "", -1, SQLITE_STATIC);
  sqlite3_bind_blob(st, 6, rec->body ? (const void *)rec->body : "", (int)rec->body_len,
                    SQLITE_STATIC);
  sqlite3_bind_int64(st, 7, rec->created_wall_ns);
  return step_done(st); /* a live record violates the primary key: LK_ECONFLICT */
}

int sq_idem_purge(sq_store *s, int64_t before_wall_ns, int64_t *deleted) {
  int64_t total = 0;
  int rc = LK_OK;
  for (;;) {
    pthread_mutex_lock(&s->wmu);
    sqlite3_stmt *st;
    int n = 0;
    /* Small batches keep the writer lock short while a large backlog expires. */
    if (sqlite3_prepare_v2(s->writer->db,
                           "DELETE FROM idem WHERE (tenant, key) IN (SELECT tenant, key "
                           "FROM idem WHERE created_ns < ?1 LIMIT 500)",
                           -1, &st, NULL) != SQLITE_OK) {
      pthread_mutex_unlock(&s->wmu);
      rc = LK_EIO;
      break;
    }
    sqlite3_bind_int64(st, 1, before_wall_ns);
    int r = sqlite3_step(st);
    if (r == SQLITE_DONE)
      n = sqlite3_changes(s->writer->db);
    else
      rc = store_err(r) == LK_OK ? LK_EIO : store_err(r);
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->wmu);
    total += n;
    if (rc != LK_OK || n < 500)
      break;
  }
  if (deleted)
    *deleted = total;
  return rc;
}
