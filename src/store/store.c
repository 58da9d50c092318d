/* SPDX-License-Identifier: MIT */
/* store.c: opening the database, the connection pool and prepared statements. */
#include "store_impl.h"
#include "sqlite/lk_sqlite.h"

#include <linkd/error.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BOOK_GET] = "SELECT id, title, author, year, isbn, stock FROM books WHERE id = ?1",
    [ST_BOOKS_LIST] = "SELECT id, title, author, year, isbn, stock FROM books WHERE id > ?1 "
                      "ORDER BY id LIMIT ?2",
    [ST_LOAN_GET] = "SELECT l.id, l.book_id, l.tenant, l.borrower, l.idem_key, l.request_id, "
                    "l.created_ns, l.stock_after FROM loans l WHERE l.id = ?1",
    [ST_IDEM_GET] = "SELECT fingerprint, status, headers, body, created_ns FROM idem "
                    "WHERE tenant = ?1 AND key = ?2 AND created_ns >= ?3",
    [ST_BOOK_INSERT] = "INSERT INTO books(title, author, year, isbn, stock, created_ns, "
                       "updated_ns) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?6)",
    [ST_BOOK_UPDATE] = "UPDATE books SET title = ?2, author = ?3, year = ?4, isbn = ?5, "
                       "stock = ?6, updated_ns = ?7 WHERE id = ?1",
    [ST_BOOK_DELETE] = "DELETE FROM books WHERE id = ?1",
    [ST_STOCK_TAKE] = "UPDATE books SET stock = stock - 1, updated_ns = ?2 "
                      "WHERE id = ?1 AND stock > 0 RETURNING stock",
    [ST_LOAN_INSERT] = "INSERT INTO loans(book_id, tenant, borrower, idem_key, request_id, "
                       "created_ns, stock_after) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [ST_IDEM_DELETE_EXPIRED] = "DELETE FROM idem WHERE tenant = ?1 AND key = ?2 "
                               "AND created_ns < ?3",
    [ST_IDEM_INSERT] = "INSERT INTO idem(tenant, key, fingerprint, status, headers, body, "
                       "created_ns) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    /* Prepared once: a group commit runs three of these per write. */
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_SAVEPOINT] = "SAVEPOINT gc",
    [ST_RELEASE] = "RELEASE gc",
    [ST_ROLLBACK_TO] = "ROLLBACK TO gc",
};

int store_err(int rc) {
  switch (rc & 0xff) {
  case SQLITE_OK:
  case SQLITE_DONE:
  case SQLITE_ROW: return LK_OK;
  case SQLITE_INTERRUPT: return LK_EDEADLINE;
  case SQLITE_NOMEM: return LK_ENOMEM;
  case SQLITE_CONSTRAINT: return LK_ECONFLICT;
  case SQLITE_BUSY:
  case SQLITE_LOCKED: return LK_EAGAIN;
  default: return LK_EIO;
  }
}

void store_col_text(sqlite3_stmt *st, int col, char *buf, size_t cap) {
  const unsigned char *t = sqlite3_column_text(st, col);
  size_t n = t ? (size_t)sqlite3_column_bytes(st, col) : 0;
  if (n >= cap)
    n = cap - 1;
  if (n)
    memcpy(buf, t, n);
  buf[n] = '\0';
}

/* Interrupts the running statement once the caller's deadline has passed. */
static int progress_cb(void *arg) {
  store_conn *c = arg;
  if (c->deadline == LK_DEADLINE_NONE)
    return 0;
  return c->clock->now(c->clock) >= c->deadline;
}

store_conn *store_conn_open(sq_store *s, bool writer, char *errbuf, size_t errcap) {
  store_conn *c = calloc(1, sizeof *c);
  if (!c) {
    lk__sqlite_err(errbuf, errcap, "open", NULL);
    return NULL;
  }
  c->clock = s->cfg.clock;
  c->deadline = LK_DEADLINE_NONE;
  /* NOMUTEX: a connection is used by one thread at a time (pool or writer mutex). */
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  int rc = sqlite3_open_v2(s->path, &c->db, flags, NULL);
  if (rc != SQLITE_OK) {
    lk__sqlite_err(errbuf, errcap, s->path, c->db);
    store_conn_close(c);
    return NULL;
  }
  /* SQLite quietly falls back to read-only when it may not write the file; every write would
   * then fail. Refuse at start instead. */
  if (writer && sqlite3_db_readonly(c->db, "main") == 1) {
    if (errbuf && errcap)
      snprintf(errbuf, errcap,
               "the database file is read-only (SQLite could open it for reading only: check "
               "its permissions, owner and file system)");
    store_conn_close(c);
    return NULL;
  }
  sqlite3_extended_result_codes(c->db, 1);
  sqlite3_busy_timeout(c->db, s->cfg.busy_timeout_ms);
  char sql[256];
  snprintf(sql, sizeof sql,
           "PRAGMA journal_mode=WAL; PRAGMA synchronous=%s; PRAGMA foreign_keys=OFF;"
           "PRAGMA temp_store=MEMORY;",
           s->cfg.sync == LK_STORE_SYNC_NORMAL ? "NORMAL" : "FULL");
  if (sqlite3_exec(c->db, sql, NULL, NULL, NULL) != SQLITE_OK) {
    lk__sqlite_err(errbuf, errcap, "pragmas", c->db);
    store_conn_close(c);
    return NULL;
  }
  if (!writer)
    sqlite3_exec(c->db, "PRAGMA query_only=ON;", NULL, NULL, NULL);
  sqlite3_progress_handler(c->db, 500, progress_cb, c);
  return c;
}

void store_conn_close(store_conn *c) {
  if (!c)
    return;
  for (int i = 0; i < ST_COUNT; i++)
    sqlite3_finalize(c->st[i]);
  sqlite3_close(c->db);
  free(c);
}

sqlite3_stmt *store_stmt(store_conn *c, st_id id) {
  sqlite3_stmt *st = c->st[id];
  if (!st) {
    if (sqlite3_prepare_v3(c->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) !=
        SQLITE_OK)
      return NULL;
    c->st[id] = st;
  } else {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
  }
  return st;
}

store_conn *store_reader_get(sq_store *s) {
  pthread_mutex_lock(&s->pmu);
  store_conn *c = s->idle;
  if (c)
    s->idle = c->next;
  pthread_mutex_unlock(&s->pmu);
  if (!c)
    c = store_conn_open(s, false, NULL, 0);
  return c;
}

void store_reader_put(sq_store *s, store_conn *c) {
  if (!c)
    return;
  c->deadline = LK_DEADLINE_NONE;
  pthread_mutex_lock(&s->pmu);
  c->next = s->idle;
  s->idle = c;
  pthread_mutex_unlock(&s->pmu);
}

int sq_open(const lk_store_config *cfg, sq_store **out, char *errbuf, size_t errcap) {
  *out = NULL;
  if (errbuf && errcap)
    errbuf[0] = '\0';
  if (!cfg || !cfg->path || !*cfg->path)
    return LK_EINVAL;
  sq_store *s = calloc(1, sizeof *s);
  if (!s)
    return LK_ENOMEM;
  s->base.ops = &sq_ops;
  s->cfg = *cfg;
  if (!s->cfg.clock)
    s->cfg.clock = lk_clock_system();
  s->path = strdup(cfg->path);
  if (!s->path) {
    free(s);
    return LK_ENOMEM;
  }
  s->cfg.path = s->path;
  pthread_mutex_init(&s->wmu, NULL);
  pthread_mutex_init(&s->pmu, NULL);
  pthread_mutex_init(&s->gmu, NULL);
  if (lk__sqlite_check_location(s->path, "database", errbuf, errcap) != 0) {
    sq_close(s);
    return LK_ESYS;
  }
  s->writer = store_conn_open(s, true, errbuf, errcap);
  if (!s->writer) {
    sq_close(s);
    return LK_ESYS;
  }
  int rc = store_migrate(s, s->writer, errbuf, errcap);
  if (rc != LK_OK) {
    sq_close(s);
    return rc;
  }
  *out = s;
  return LK_OK;
}

void sq_close(sq_store *s) {
  if (!s)
    return;
  for (store_conn *c = s->idle, *n; c; c = n) {
    n = c->next;
    store_conn_close(c);
  }
  /* The writer closes last: the last connection to close checkpoints and removes the WAL. */
  store_conn_close(s->writer);
  pthread_mutex_destroy(&s->wmu);
  pthread_mutex_destroy(&s->pmu);
  pthread_mutex_destroy(&s->gmu);
  free(s->path);
  free(s);
}

int sq_opened_version(const sq_store *s) { return s->opened_version; }
