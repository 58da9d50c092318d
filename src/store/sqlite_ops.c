/* SPDX-License-Identifier: MIT */
/* sqlite_ops.c: the SQLite implementation behind store.h's interface (the casts from the
 * interface's handles to SQLite's live here, so the SQLite files keep their own types). */
#include "store_impl.h"

#include <linkd/error.h>

#define SQ(s) ((sq_store *)(s))
#define SQC(s) ((const sq_store *)(s))
#define TX(t) ((sq_tx *)(t))

int lk_sqlite_open(const lk_store_config *cfg, lk_store **out, char *errbuf, size_t errcap);
int lk_sqlite_open(const lk_store_config *cfg, lk_store **out, char *errbuf, size_t errcap) {
  sq_store *s = NULL;
  int rc = sq_open(cfg, &s, errbuf, errcap);
  *out = s ? &s->base : NULL;
  return rc;
}

static void op_close(lk_store *s) { sq_close(SQ(s)); }
static int op_opened_version(const lk_store *s) { return sq_opened_version(SQC(s)); }

static int op_book_get(lk_store *s, int64_t id, lk_book *out, lk_deadline dl) {
  return sq_book_get(SQ(s), id, out, dl);
}

static int op_books_list(lk_store *s, int64_t after, int limit, lk_book *out, int *n,
                         lk_deadline dl) {
  return sq_books_list(SQ(s), after, limit, out, n, dl);
}

static int op_loan_get(lk_store *s, int64_t id, lk_loan *out, lk_deadline dl) {
  return sq_loan_get(SQ(s), id, out, dl);
}

static int op_idem_get(lk_store *s, const char *tenant, const char *key, int64_t min_created,
                       lk_idem_record *out, lk_deadline dl) {
  return sq_idem_get(SQ(s), tenant, key, min_created, out, dl);
}

static int op_counts_get(lk_store *s, lk_store_counts *out) { return sq_counts_get(SQ(s), out); }

static int op_loan_groups(lk_store *s, bool by_key, bool only_dupes, int limit,
                          lk_store_group_cb cb, void *arg) {
  return sq_loan_groups(SQ(s), by_key, only_dupes, limit, cb, arg);
}

static int op_tenant_totals(lk_store *s, lk_store_tenant_cb cb, void *arg) {
  return sq_tenant_totals(SQ(s), cb, arg);
}

static int op_write(lk_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg) {
  return sq_write(SQ(s), dl, fn, arg);
}

static void op_write_async(lk_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg,
                           lk_store_done_fn done, void *done_arg) {
  sq_write_async(SQ(s), dl, fn, arg, done, done_arg);
}

static bool op_write_join(lk_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg,
                          lk_store_done_fn done, void *done_arg) {
  return sq_write_join(SQ(s), dl, fn, arg, done, done_arg);
}

static int op_idem_purge(lk_store *s, int64_t before_wall_ns, int64_t *deleted) {
  return sq_idem_purge(SQ(s), before_wall_ns, deleted);
}

/* One process writes an SQLite file at a time; the server's in-process table is the claim. */
static int op_idem_claim(lk_store *s, const char *tenant, const char *key, uint64_t owner,
                         int64_t lease_ns, lk_deadline dl) {
  (void)s, (void)tenant, (void)key, (void)owner, (void)lease_ns, (void)dl;
  return LK_OK;
}

static int op_idem_release(lk_store *s, const char *tenant, const char *key, uint64_t owner) {
  (void)s, (void)tenant, (void)key, (void)owner;
  return LK_OK;
}

static void op_commit_stats(lk_store *s, lk_store_commit_stats *out) {
  sq_commit_stats_get(SQ(s), out);
}
static size_t op_queued(lk_store *s) { return sq_queued(SQ(s)); }

static int op_tx_book_get(lk_store_tx *tx, int64_t id, lk_book *out) {
  return sq_tx_book_get(TX(tx), id, out);
}

static int op_tx_book_create(lk_store_tx *tx, const lk_book *in, int64_t *id) {
  return sq_tx_book_create(TX(tx), in, id);
}

static int op_tx_book_update(lk_store_tx *tx, const lk_book *in) {
  return sq_tx_book_update(TX(tx), in);
}

static int op_tx_book_delete(lk_store_tx *tx, int64_t id) { return sq_tx_book_delete(TX(tx), id); }
static int op_tx_loan_create(lk_store_tx *tx, lk_loan *loan) {
  return sq_tx_loan_create(TX(tx), loan);
}

static int op_tx_idem_put(lk_store_tx *tx, const char *tenant, const char *key,
                          const lk_idem_record *rec, int64_t min_created) {
  return sq_tx_idem_put(TX(tx), tenant, key, rec, min_created);
}

const lk_store_ops sq_ops = {
    .kind = "sqlite",
    .schema_version = LK_STORE_SCHEMA_VERSION,
    .close = op_close,
    .opened_version = op_opened_version,
    .book_get = op_book_get,
    .books_list = op_books_list,
    .loan_get = op_loan_get,
    .idem_get = op_idem_get,
    .counts_get = op_counts_get,
    .loan_groups = op_loan_groups,
    .tenant_totals = op_tenant_totals,
    .write = op_write,
    .write_async = op_write_async,
    .write_join = op_write_join,
    .idem_purge = op_idem_purge,
    .idem_claim = op_idem_claim,
    .idem_release = op_idem_release,
    .commit_stats = op_commit_stats,
    .queued = op_queued,
    .tx_book_get = op_tx_book_get,
    .tx_book_create = op_tx_book_create,
    .tx_book_update = op_tx_book_update,
    .tx_book_delete = op_tx_book_delete,
    .tx_loan_create = op_tx_loan_create,
    .tx_idem_put = op_tx_idem_put,
};
