/* SPDX-License-Identifier: MIT */
/* Unit tests of libraryd's SQLite store on real files: schema creation and migration, seeding,
 * write transactions (loans, idempotency records, rollback, deadlines), purge, statistics and
 * concurrent loans. */
#include "dbdir.h"
#include "store.h"

#include <linkd/clock.h>
#include <linkd/error.h>

#include <pthread.h>
#include <setjmp.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static lk_store *open_store(const fixture *f, bool seed) {
  lk_store_config cfg;
  lk_store_config_init_default(&cfg);
  cfg.path = f->path;
  cfg.seed = seed;
  lk_store *s = NULL;
  char err[256];
  int rc = lk_store_open(&cfg, &s, err, sizeof err);
  if (rc != LK_OK)
    fprintf(stderr, "open: %s\n", err);
  assert_int_equal(rc, LK_OK);
  return s;
}

static lk_deadline none(void) { return lk_deadline_none(); }

/* "version:applied" for every row of schema_version, applied as "0" (unknown) or "t" (a time). */
static void versions(const fixture *f, char *out, size_t cap) {
  sqlite3 *db;
  assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
  sqlite3_stmt *st;
  assert_int_equal(sqlite3_prepare_v2(db,
                                      "SELECT group_concat(version || ':' || "
                                      "CASE applied_ns WHEN 0 THEN '0' ELSE 't' END, ' ') FROM "
                                      "(SELECT * FROM schema_version ORDER BY version)",
                                      -1, &st, NULL),
                   SQLITE_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  snprintf(out, cap, "%s", (const char *)sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  sqlite3_close(db);
}

static void test_new_file_is_migrated_and_seeded(void **state) {
  fixture *f = *state;
  lk_store *s = open_store(f, true);
  assert_int_equal(lk_store_opened_version(s), 0);
  lk_book b;
  assert_int_equal(lk_store_book_get(s, 1, &b, none()), LK_OK);
  assert_string_equal(b.title, "The C Programming Language");
  assert_true(b.has_year);
  assert_int_equal(b.year, 1988);
  assert_int_equal(lk_store_book_get(s, 999, &b, none()), LK_ENOTFOUND);
  lk_store_counts c;
  assert_int_equal(lk_store_counts_get(s, &c), LK_OK);
  assert_int_equal(c.books, 12);
  lk_store_close(s);
  /* Reopening finds the current version and does not seed twice. */
  s = open_store(f, true);
  assert_int_equal(lk_store_opened_version(s), LK_STORE_SCHEMA_VERSION);
  assert_int_equal(lk_store_counts_get(s, &c), LK_OK);
  assert_int_equal(c.books, 12);
  lk_store_close(s);
  /* Every version, applied by this program: the version table records each with its time. */
  char v[64];
  versions(f, v, sizeof v);
  assert_string_equal(v, "1:t 2:t 3:t");
}

static void test_migration_from_v1_keeps_data(void **state) {
  fixture *f = *state;
  sqlite3 *db;
  assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
  /* Schema version 1 exactly as released: books, loans without idem_key, meta. */
  const char *v1 =
      "CREATE TABLE books(id INTEGER PRIMARY KEY, title TEXT NOT NULL, author TEXT NOT NULL,"
      " year INTEGER, isbn TEXT, stock INTEGER NOT NULL CHECK(stock >= 0),"
      " created_ns INTEGER NOT NULL, updated_ns INTEGER NOT NULL);"
      "CREATE TABLE loans(id INTEGER PRIMARY KEY, book_id INTEGER NOT NULL, tenant TEXT NOT NULL,"
      " borrower TEXT, request_id TEXT, created_ns INTEGER NOT NULL, stock_after INTEGER NOT NULL);"
      "CREATE INDEX loans_by_request ON loans(tenant, book_id, request_id)"
      " WHERE request_id IS NOT NULL;"
      "CREATE TABLE meta(name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;"
      "INSERT INTO books VALUES(7, 'Old', 'Author', NULL, NULL, 3, 1, 1);"
      "INSERT INTO loans VALUES(1, 7, 'anonymous', 'ann', 'r-1', 1, 3);"
      "PRAGMA user_version = 1;";
  assert_int_equal(sqlite3_exec(db, v1, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  lk_store *s = open_store(f, true);
  assert_int_equal(lk_store_opened_version(s), 1);
  lk_book b;
  assert_int_equal(lk_store_book_get(s, 7, &b, none()), LK_OK);
  assert_string_equal(b.title, "Old");
  assert_false(b.has_year);
  assert_int_equal(lk_store_book_get(s, 1, &b, none()), LK_ENOTFOUND); /* no seeding */
  lk_loan l;
  assert_int_equal(lk_store_loan_get(s, 1, &l, none()), LK_OK);
  assert_string_equal(l.request_id, "r-1");
  assert_string_equal(l.idem_key, "");
  lk_idem_record rec;
  assert_int_equal(lk_store_idem_get(s, "anonymous", "k", 0, &rec, none()), LK_ENOTFOUND);
  lk_store_close(s);
  /* Version 1 predates the table (time unknown); 2 and 3 were applied by this open. */
  char v[64];
  versions(f, v, sizeof v);
  assert_string_equal(v, "1:0 2:t 3:t");
}

static void test_newer_schema_is_refused(void **state) {
  fixture *f = *state;
  sqlite3 *db;
  assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  lk_store_config cfg;
  lk_store_config_init_default(&cfg);
  cfg.path = f->path;
  lk_store *s = (lk_store *)&cfg;
  char err[256];
  assert_int_equal(lk_store_open(&cfg, &s, err, sizeof err), LK_ESTATE);
  assert_null(s);
  assert_non_null(strstr(err, "newer"));
}

typedef struct loan_op {
  int64_t book;
  const char *tenant, *key, *rid;
  int rc; /* from lk_store_tx_loan_create */
  lk_loan loan;
  bool fail_after; /* roll back on purpose after the effect */
} loan_op;

static int loan_tx(lk_store_tx *tx, void *arg) {
  loan_op *op = arg;
  memset(&op->loan, 0, sizeof op->loan);
  op->loan.book_id = op->book;
  snprintf(op->loan.tenant, sizeof op->loan.tenant, "%s", op->tenant ? op->tenant : "anonymous");
  snprintf(op->loan.idem_key, sizeof op->loan.idem_key, "%s", op->key ? op->key : "");
  snprintf(op->loan.request_id, sizeof op->loan.request_id, "%s", op->rid ? op->rid : "");
  op->rc = lk_store_tx_loan_create(tx, &op->loan);
  if (op->rc != LK_OK)
    return LK_OK; /* a business outcome, still committed */
  if (op->key) {
    lk_idem_record rec = {.status = 201,
                          .headers = "Content-Type: application/json\n",
                          .body = (uint8_t *)"{}",
                          .body_len = 2,
                          .created_wall_ns = lk_wall_ns()};
    int rc = lk_store_tx_idem_put(tx, op->loan.tenant, op->key, &rec, 0);
    if (rc != LK_OK)
      return rc;
  }
  return op->fail_after ? LK_EIO : LK_OK;
}

static int create_book(lk_store_tx *tx, void *arg) {
  lk_book *b = arg;
  return lk_store_tx_book_create(tx, b, &b->id);
}

static int64_t new_book(lk_store *s, int64_t stock) {
  lk_book b;
  memset(&b, 0, sizeof b);
  snprintf(b.title, sizeof b.title, "T");
  snprintf(b.author, sizeof b.author, "A");
  b.stock = stock;
  assert_int_equal(lk_store_write(s, none(), create_book, &b), LK_OK);
  return b.id;
}

static void test_loans_and_records_commit_together(void **state) {
  fixture *f = *state;
  lk_store *s = open_store(f, false);
  int64_t id = new_book(s, 2);
  loan_op op = {.book = id, .key = "k1", .rid = "r1"};
  assert_int_equal(lk_store_write(s, none(), loan_tx, &op), LK_OK);
  assert_int_equal(op.rc, LK_OK);
  assert_int_equal(op.loan.stock_after, 1);
  lk_idem_record rec;
  assert_int_equal(lk_store_idem_get(s, "anonymous", "k1", 0, &rec, none()), LK_OK);
  assert_int_equal(rec.status, 201);
  assert_int_equal(rec.body_len, 2);
  assert_string_equal(rec.headers, "Content-Type: application/json\n");
  lk_idem_record_clear(&rec);
  /* The same key again: the record's primary key refuses it and the loan rolls back with it. */
  loan_op dup = {.book = id, .key = "k1"};
  assert_int_equal(lk_store_write(s, none(), loan_tx, &dup), LK_ECONFLICT);
  lk_book b;
  assert_int_equal(lk_store_book_get(s, id, &b, none()), LK_OK);
  assert_int_equal(b.stock, 1);
  /* An explicit rollback after the effect leaves neither effect nor record. */
  loan_op bad = {.book = id, .key = "k2", .fail_after = true};
  assert_int_equal(lk_store_write(s, none(), loan_tx, &bad), LK_EIO);
  assert_int_equal(lk_store_book_get(s, id, &b, none()), LK_OK);
  assert_int_equal(b.stock, 1);
  assert_int_equal(lk_store_idem_get(s, "anonymous", "k2", 0, &rec, none()), LK_ENOTFOUND);
  /* A deadline that has passed: nothing runs. */
  loan_op late = {.book = id, .key = "k3"};
  assert_int_equal(lk_store_write(s, lk_deadline_after(lk_now_ns(), 0), loan_tx, &late),
                   LK_EDEADLINE);
  assert_int_equal(lk_store_book_get(s, id, &b, none()), LK_OK);
  assert_int_equal(b.stock, 1);
  /* Out of stock and missing book are business outcomes. */
  loan_op last = {.book = id};
  assert_int_equal(lk_store_write(s, none(), loan_tx, &last), LK_OK);
  assert_int_equal(last.rc, LK_OK);
  loan_op none_left = {.book = id};
  assert_int_equal(lk_store_write(s, none(), loan_tx, &none_left), LK_OK);
  assert_int_equal(none_left.rc, LK_ECONFLICT);
  loan_op missing = {.book = 424242};
  assert_int_equal(lk_store_write(s, none(), loan_tx, &missing), LK_OK);
  assert_int_equal(missing.rc, LK_ENOTFOUND);
  lk_store_close(s);
}

static void test_expired_records(void **state) {
  fixture *f = *state;
  lk_store *s = open_store(f, false);
  int64_t id = new_book(s, 10);
  loan_op op = {.book = id, .tenant = "tenant:a", .key = "old"};
  assert_int_equal(lk_store_write(s, none(), loan_tx, &op), LK_OK);
  int64_t now = lk_wall_ns();
  lk_idem_record rec;
  /* A record older than the window is treated as absent... */
  assert_int_equal(lk_store_idem_get(s, "tenant:a", "old", now + 1, &rec, none()), LK_ENOTFOUND);
  /* ...and purged. */
  int64_t deleted = -1;
  assert_int_equal(lk_store_idem_purge(s, now - LK_SEC(3600), &deleted), LK_OK);
  assert_int_equal(deleted, 0);
  assert_int_equal(lk_store_idem_purge(s, now + 1, &deleted), LK_OK);
  assert_int_equal(deleted, 1);
  lk_store_counts c;
  assert_int_equal(lk_store_counts_get(s, &c), LK_OK);
  assert_int_equal(c.idem_records, 0);
  assert_int_equal(c.keyed_loans, 1); /* the loan itself stays */
  lk_store_close(s);
}

typedef struct group_acc {
  int n;
  int64_t max_count;
} group_acc;

static int on_group(void *arg, const char *tenant, int64_t book, const char *id, int64_t count) {
  (void)tenant;
  (void)book;
  (void)id;
  group_acc *g = arg;
  g->n++;
  if (count > g->max_count)
    g->max_count = count;
  return 0;
}

static int on_tenant(void *arg, const char *tenant, const lk_tenant_totals *t) {
  if (!strcmp(tenant, "tenant:naive"))
    *(lk_tenant_totals *)arg = *t;
  return 0;
}

static void test_duplicate_statistics(void **state) {
  fixture *f = *state;
  lk_store *s = open_store(f, false);
  int64_t id = new_book(s, 100);
  /* A client without keys that resent request r-1 twice: three loans for one request. */
  for (int i = 0; i < 3; i++) {
    loan_op op = {.book = id, .tenant = "tenant:naive", .rid = "r-1"};
    assert_int_equal(lk_store_write(s, none(), loan_tx, &op), LK_OK);
  }
  loan_op other = {.book = id, .tenant = "tenant:naive", .rid = "r-2"};
  assert_int_equal(lk_store_write(s, none(), loan_tx, &other), LK_OK);
  loan_op keyed = {.book = id, .tenant = "tenant:good", .rid = "r-1", .key = "k"};
  assert_int_equal(lk_store_write(s, none(), loan_tx, &keyed), LK_OK);
  group_acc g = {0, 0};
  assert_int_equal(lk_store_loan_groups(s, false, true, 100, on_group, &g), LK_OK);
  assert_int_equal(g.n, 1);
  assert_int_equal(g.max_count, 3);
  g = (group_acc){0, 0};
  assert_int_equal(lk_store_loan_groups(s, false, false, 100, on_group, &g), LK_OK);
  assert_int_equal(g.n, 3); /* naive r-1, naive r-2, good r-1 (tenants are separate) */
  g = (group_acc){0, 0};
  assert_int_equal(lk_store_loan_groups(s, true, true, 100, on_group, &g), LK_OK);
  assert_int_equal(g.n, 0);
  lk_tenant_totals t = {0};
  assert_int_equal(lk_store_tenant_totals(s, on_tenant, &t), LK_OK);
  assert_int_equal(t.loans, 4);
  assert_int_equal(t.duplicate_by_request_id, 2);
  assert_int_equal(t.keyed_loans, 0);
  lk_store_close(s);
}

typedef struct worker {
  lk_store *s;
  int64_t book;
  int n, ok, out_of_stock;
  int idx;
} worker;

static void *loan_worker(void *arg) {
  worker *w = arg;
  for (int i = 0; i < w->n; i++) {
    char key[32];
    snprintf(key, sizeof key, "w%d-%d", w->idx, i);
    loan_op op = {.book = w->book, .key = key};
    if (lk_store_write(w->s, lk_deadline_none(), loan_tx, &op) == LK_OK) {
      if (op.rc == LK_OK)
        w->ok++;
      else if (op.rc == LK_ECONFLICT)
        w->out_of_stock++;
    }
    lk_book b;
    lk_store_book_get(w->s, w->book, &b, lk_deadline_none());
  }
  return NULL;
}

static void test_concurrent_loans_never_oversell(void **state) {
  fixture *f = *state;
  lk_store_config cfg;
  lk_store_config_init_default(&cfg);
  cfg.path = f->path;
  cfg.sync = LK_STORE_SYNC_NORMAL; /* keeps the test fast; durability is tested elsewhere */
  lk_store *s;
  assert_int_equal(lk_store_open(&cfg, &s, NULL, 0), LK_OK);
  int64_t id = new_book(s, 50);
  worker w[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (worker){s, id, 20, 0, 0, i};
    pthread_create(&th[i], NULL, loan_worker, &w[i]);
  }
  int ok = 0, oos = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    ok += w[i].ok;
    oos += w[i].out_of_stock;
  }
  assert_int_equal(ok, 50);
  assert_int_equal(oos, 30);
  lk_book b;
  assert_int_equal(lk_store_book_get(s, id, &b, none()), LK_OK);
  assert_int_equal(b.stock, 0);
  lk_store_counts c;
  assert_int_equal(lk_store_counts_get(s, &c), LK_OK);
  assert_int_equal(c.loans, 50);
  assert_int_equal(c.idem_records, 50);
  lk_store_close(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_new_file_is_migrated_and_seeded, dbdir_setup, dbdir_teardown),
      cmocka_unit_test_setup_teardown(test_migration_from_v1_keeps_data, dbdir_setup, dbdir_teardown),
      cmocka_unit_test_setup_teardown(test_newer_schema_is_refused, dbdir_setup, dbdir_teardown),
      cmocka_unit_test_setup_teardown(test_loans_and_records_commit_together, dbdir_setup, dbdir_teardown),
      cmocka_unit_test_setup_teardown(test_expired_records, dbdir_setup, dbdir_teardown),
      cmocka_unit_test_setup_teardown(test_duplicate_statistics, dbdir_setup, dbdir_teardown),
      cmocka_unit_test_setup_teardown(test_concurrent_loans_never_oversell, dbdir_setup, dbdir_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
