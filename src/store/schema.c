/* SPDX-License-Identifier: MIT */
/* schema.c: schema creation, migrations (PRAGMA user_version and the schema_version table) and
 * the sample books. */
#include "store_impl.h"

#include <linkd/error.h>

#include <stdio.h>

/* migrations[i] takes the schema from version i to i + 1. Append only: a released step never
 * changes, so every file ever written can be brought forward. */
static const char *const migrations[] = {
    /* 0 -> 1: books and loans. A loan row keeps the caller's tenant and X-Request-Id, so a
     * duplicate application of one logical request is countable afterwards. */
    "CREATE TABLE books("
    "  id INTEGER PRIMARY KEY,"
    "  title TEXT NOT NULL,"
    "  author TEXT NOT NULL,"
    "  year INTEGER,"
    "  isbn TEXT,"
    "  stock INTEGER NOT NULL CHECK(stock >= 0),"
    "  created_ns INTEGER NOT NULL,"
    "  updated_ns INTEGER NOT NULL);"
    "CREATE TABLE loans("
    "  id INTEGER PRIMARY KEY,"
    "  book_id INTEGER NOT NULL,"
    "  tenant TEXT NOT NULL,"
    "  borrower TEXT,"
    "  request_id TEXT,"
    "  created_ns INTEGER NOT NULL,"
    "  stock_after INTEGER NOT NULL);"
    "CREATE INDEX loans_by_request ON loans(tenant, book_id, request_id)"
    "  WHERE request_id IS NOT NULL;"
    "CREATE TABLE meta(name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;",
    /* 1 -> 2: idempotency records, and the key on each loan it produced. */
    "ALTER TABLE loans ADD COLUMN idem_key TEXT;"
    "CREATE INDEX loans_by_key ON loans(tenant, idem_key) WHERE idem_key IS NOT NULL;"
    "CREATE TABLE idem("
    "  tenant TEXT NOT NULL,"
    "  key TEXT NOT NULL,"
    "  fingerprint BLOB NOT NULL,"
    "  status INTEGER NOT NULL,"
    "  headers TEXT NOT NULL,"
    "  body BLOB NOT NULL,"
    "  created_ns INTEGER NOT NULL,"
    "  PRIMARY KEY(tenant, key)) WITHOUT ROWID;"
    "CREATE INDEX idem_by_age ON idem(created_ns);",
    /* 2 -> 3: a table of the applied versions and when (the PostgreSQL store keeps the same
     * table); user_version stays the counter that older programs check. */
    "CREATE TABLE schema_version(version INTEGER PRIMARY KEY, applied_ns INTEGER NOT NULL);",
};

_Static_assert(sizeof migrations / sizeof migrations[0] == LK_STORE_SCHEMA_VERSION,
               "one migration per schema version");

static int exec(store_conn *c, const char *sql, char *errbuf, size_t errcap) {
  char *msg = NULL;
  int rc = sqlite3_exec(c->db, sql, NULL, NULL, &msg);
  if (rc != SQLITE_OK && errbuf && errcap)
    snprintf(errbuf, errcap, "%s", msg ? msg : sqlite3_errstr(rc));
  sqlite3_free(msg);
  return rc == SQLITE_OK ? LK_OK : store_err(rc) == LK_OK ? LK_EIO : store_err(rc);
}

static int user_version(store_conn *c, int *v) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(c->db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK)
    return LK_EIO;
  int rc = sqlite3_step(st);
  *v = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
  sqlite3_finalize(st);
  return rc == SQLITE_ROW ? LK_OK : LK_EIO;
}

static int seed_books(store_conn *c, int64_t now) {
  sqlite3_stmt *st = store_stmt(c, ST_BOOK_INSERT);
  if (!st)
    return LK_EIO;
  size_t n;
  const lk_sample_book *sample_books = lk_store_sample_books(&n);
  for (size_t i = 0; i < n; i++) {
    sqlite3_reset(st);
    sqlite3_bind_text(st, 1, sample_books[i].title, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, sample_books[i].author, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, sample_books[i].year);
    sqlite3_bind_text(st, 4, sample_books[i].isbn, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 5, sample_books[i].stock);
    sqlite3_bind_int64(st, 6, now);
    if (sqlite3_step(st) != SQLITE_DONE)
      return LK_EIO;
  }
  sqlite3_reset(st);
  return LK_OK;
}

/* The version whose migration creates schema_version. */
#define SCHEMA_TABLE_VERSION 3

/* Records version `v` in schema_version. When the table has just been created, the versions
 * before it are recorded too: those this open applied with the current time, those the file
 * already had with 0 (applied before the table existed, time unknown). */
static int record_version(store_conn *c, int v, int opened) {
  int64_t now = lk_wall_ns();
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(c->db, "INSERT INTO schema_version(version, applied_ns) VALUES(?1, ?2)",
                         -1, &st, NULL) != SQLITE_OK)
    return LK_EIO;
  int rc = LK_OK;
  for (int i = v == SCHEMA_TABLE_VERSION ? 1 : v; i <= v && rc == LK_OK; i++) {
    sqlite3_reset(st);
    sqlite3_bind_int(st, 1, i);
    sqlite3_bind_int64(st, 2, i <= opened ? 0 : now);
    if (sqlite3_step(st) != SQLITE_DONE)
      rc = LK_EIO;
  }
  sqlite3_finalize(st);
  return rc;
}

int store_migrate(sq_store *s, store_conn *c, char *errbuf, size_t errcap) {
  /* IMMEDIATE: two processes opening one new file must not both run the same migration. */
  int rc = exec(c, "BEGIN IMMEDIATE", errbuf, errcap);
  if (rc != LK_OK)
    return rc;
  int v;
  rc = user_version(c, &v);
  if (rc != LK_OK)
    goto fail;
  s->opened_version = v;
  if (v > LK_STORE_SCHEMA_VERSION) {
    if (errbuf && errcap)
      snprintf(errbuf, errcap, "schema version %d is newer than this program's %d", v,
               LK_STORE_SCHEMA_VERSION);
    rc = LK_ESTATE;
    goto fail;
  }
  for (; v < LK_STORE_SCHEMA_VERSION; v++) {
    rc = exec(c, migrations[v], errbuf, errcap);
    if (rc != LK_OK)
      goto fail;
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", v + 1);
    rc = exec(c, sql, errbuf, errcap);
    if (rc == LK_OK && v + 1 >= SCHEMA_TABLE_VERSION)
      rc = record_version(c, v + 1, s->opened_version);
    if (rc != LK_OK)
      goto fail;
  }
  if (s->cfg.seed && s->opened_version == 0) {
    rc = seed_books(c, lk_wall_ns());
    if (rc != LK_OK)
      goto fail;
    rc = exec(c, "INSERT INTO meta(name, value) VALUES('seeded', '1')", errbuf, errcap);
    if (rc != LK_OK)
      goto fail;
  }
  return exec(c, "COMMIT", errbuf, errcap);
fail:
  sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
  return rc;
}
