/* SPDX-License-Identifier: MIT */
/* stats.c: aggregate queries for /admin/stats (how many loans, and how many were duplicates). */
#include "store_impl.h"

#include <linkd/error.h>

static int run_count(sqlite3 *db, const char *sql, int64_t *out) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
    return LK_EIO;
  int r = sqlite3_step(st);
  *out = r == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  return r == SQLITE_ROW ? LK_OK : LK_EIO;
}

int sq_counts_get(sq_store *s, lk_store_counts *out) {
  store_conn *c = store_reader_get(s);
  if (!c)
    return LK_EIO;
  int rc = run_count(c->db, "SELECT COUNT(*) FROM books", &out->books);
  if (rc == LK_OK)
    rc = run_count(c->db, "SELECT COUNT(*) FROM loans", &out->loans);
  if (rc == LK_OK)
    rc = run_count(c->db, "SELECT COUNT(*) FROM loans WHERE idem_key IS NOT NULL",
                   &out->keyed_loans);
  if (rc == LK_OK)
    rc = run_count(c->db, "SELECT COUNT(*) FROM idem", &out->idem_records);
  store_reader_put(s, c);
  return rc;
}

int sq_loan_groups(sq_store *s, bool by_key, bool only_dupes, int limit, lk_store_group_cb cb,
                         void *arg) {
  static const char *const sql[2] = {
      "SELECT tenant, book_id, request_id, COUNT(*) c FROM loans WHERE request_id IS NOT NULL "
      "GROUP BY tenant, book_id, request_id HAVING c > ?1 ORDER BY c DESC, tenant, request_id "
      "LIMIT ?2",
      "SELECT tenant, MIN(book_id), idem_key, COUNT(*) c FROM loans WHERE idem_key IS NOT NULL "
      "GROUP BY tenant, idem_key HAVING c > ?1 ORDER BY c DESC, tenant, idem_key LIMIT ?2",
  };
  store_conn *c = store_reader_get(s);
  if (!c)
    return LK_EIO;
  sqlite3_stmt *st;
  int rc = LK_EIO;
  if (sqlite3_prepare_v2(c->db, sql[by_key], -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_int(st, 1, only_dupes ? 1 : 0);
    sqlite3_bind_int(st, 2, limit);
    int r;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
      if (cb(arg, (const char *)sqlite3_column_text(st, 0), sqlite3_column_int64(st, 1),
             (const char *)sqlite3_column_text(st, 2), sqlite3_column_int64(st, 3)))
        break;
    }
    rc = (r == SQLITE_ROW || r == SQLITE_DONE) ? LK_OK : store_err(r);
    sqlite3_finalize(st);
  }
  store_reader_put(s, c);
  return rc;
}

int sq_tenant_totals(sq_store *s, lk_store_tenant_cb cb, void *arg) {
  static const char sql[] =
      "SELECT t.tenant, t.n, t.keyed, COALESCE(r.d, 0), COALESCE(k.d, 0) FROM "
      "(SELECT tenant, COUNT(*) n, SUM(idem_key IS NOT NULL) keyed FROM loans GROUP BY tenant) t "
      "LEFT JOIN (SELECT tenant, SUM(c - 1) d FROM (SELECT tenant, COUNT(*) c FROM loans "
      "  WHERE request_id IS NOT NULL GROUP BY tenant, book_id, request_id) GROUP BY tenant) r "
      "  ON r.tenant = t.tenant "
      "LEFT JOIN (SELECT tenant, SUM(c - 1) d FROM (SELECT tenant, COUNT(*) c FROM loans "
      "  WHERE idem_key IS NOT NULL GROUP BY tenant, idem_key) GROUP BY tenant) k "
      "  ON k.tenant = t.tenant "
      "ORDER BY t.tenant";
  store_conn *c = store_reader_get(s);
  if (!c)
    return LK_EIO;
  sqlite3_stmt *st;
  int rc = LK_EIO;
  if (sqlite3_prepare_v2(c->db, sql, -1, &st, NULL) == SQLITE_OK) {
    int r;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
      lk_tenant_totals t = {
          .loans = sqlite3_column_int64(st, 1),
          .keyed_loans = sqlite3_column_int64(st, 2),
          .duplicate_by_request_id = sqlite3_column_int64(st, 3),
          .duplicate_by_key = sqlite3_column_int64(st, 4),
      };
      if (cb(arg, (const char *)sqlite3_column_text(st, 0), &t))
        break;
    }
    rc = (r == SQLITE_ROW || r == SQLITE_DONE) ? LK_OK : store_err(r);
    sqlite3_finalize(st);
  }
  store_reader_put(s, c);
  return rc;
}
