/* SPDX-License-Identifier: MIT */
/* iface.c: store.h's calls, dispatched to the implementation the store was opened with. */
#include "store_backend.h"

#include <linkd/error.h>

#include <stdlib.h>

/* The SQLite implementation's open (store.c), as an lk_store. */
int lk_sqlite_open(const lk_store_config *cfg, lk_store **out, char *errbuf, size_t errcap);

void lk_store_config_init_default(lk_store_config *cfg) {
  cfg->path = "libraryd.db";
  cfg->url = NULL;
  cfg->pool_size = 16;
  cfg->sync = LK_STORE_SYNC_FULL;
  cfg->seed = true;
  cfg->busy_timeout_ms = 5000;
  cfg->clock = NULL;
  cfg->group_commit = true;
  cfg->statement_timeout_ns = 5 * LK_NS_PER_S;
}

int lk_store_open(const lk_store_config *cfg, lk_store **out, char *errbuf, size_t errcap) {
  if (out)
    *out = NULL;
  if (!cfg || !out)
    return LK_EINVAL;
  if (cfg->url && *cfg->url)
    return lk_pg_open(cfg, out, errbuf, errcap);
  return lk_sqlite_open(cfg, out, errbuf, errcap);
}

void lk_store_close(lk_store *s) {
  if (s)
    s->ops->close(s);
}

int lk_store_opened_version(const lk_store *s) { return s->ops->opened_version(s); }
int lk_store_schema_version(const lk_store *s) { return s->ops->schema_version; }
const char *lk_store_kind(const lk_store *s) { return s->ops->kind; }

int lk_store_book_get(lk_store *s, int64_t id, lk_book *out, lk_deadline dl) {
  return s->ops->book_get(s, id, out, dl);
}

int lk_store_books_list(lk_store *s, int64_t after, int limit, lk_book *out, int *n,
                        lk_deadline dl) {
  return s->ops->books_list(s, after, limit, out, n, dl);
}

int lk_store_loan_get(lk_store *s, int64_t id, lk_loan *out, lk_deadline dl) {
  return s->ops->loan_get(s, id, out, dl);
}

int lk_store_idem_get(lk_store *s, const char *tenant, const char *key, int64_t min_created_wall_ns,
                      lk_idem_record *out, lk_deadline dl) {
  return s->ops->idem_get(s, tenant, key, min_created_wall_ns, out, dl);
}

void lk_idem_record_clear(lk_idem_record *r) {
  if (!r)
    return;
  free(r->headers);
  free(r->body);
  r->headers = NULL;
  r->body = NULL;
  r->body_len = 0;
}

int lk_store_counts_get(lk_store *s, lk_store_counts *out) { return s->ops->counts_get(s, out); }

int lk_store_loan_groups(lk_store *s, bool by_key, bool only_dupes, int limit, lk_store_group_cb cb,
                         void *arg) {
  return s->ops->loan_groups(s, by_key, only_dupes, limit, cb, arg);
}

int lk_store_tenant_totals(lk_store *s, lk_store_tenant_cb cb, void *arg) {
  return s->ops->tenant_totals(s, cb, arg);
}

int lk_store_write(lk_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg) {
  return s->ops->write(s, dl, fn, arg);
}

void lk_store_write_async(lk_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg,
                          lk_store_done_fn done, void *done_arg) {
  if (s->ops->write_async)
    s->ops->write_async(s, dl, fn, arg, done, done_arg);
  else
    done(done_arg, s->ops->write(s, dl, fn, arg));
}

bool lk_store_write_join(lk_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg,
                         lk_store_done_fn done, void *done_arg) {
  return s->ops->write_join && s->ops->write_join(s, dl, fn, arg, done, done_arg);
}

int lk_store_tx_book_get(lk_store_tx *tx, int64_t id, lk_book *out) {
  return tx->ops->tx_book_get(tx, id, out);
}

int lk_store_tx_book_create(lk_store_tx *tx, const lk_book *in, int64_t *id) {
  return tx->ops->tx_book_create(tx, in, id);
}

int lk_store_tx_book_update(lk_store_tx *tx, const lk_book *in) {
  return tx->ops->tx_book_update(tx, in);
}

int lk_store_tx_book_delete(lk_store_tx *tx, int64_t id) { return tx->ops->tx_book_delete(tx, id); }

int lk_store_tx_loan_create(lk_store_tx *tx, lk_loan *loan) {
  return tx->ops->tx_loan_create(tx, loan);
}

int lk_store_tx_idem_put(lk_store_tx *tx, const char *tenant, const char *key,
                         const lk_idem_record *rec, int64_t min_created_wall_ns) {
  return tx->ops->tx_idem_put(tx, tenant, key, rec, min_created_wall_ns);
}

void lk_store_commit_stats_get(lk_store *s, lk_store_commit_stats *out) {
  if (s->ops->commit_stats) {
    s->ops->commit_stats(s, out);
    return;
  }
  out->commits = out->writes = out->largest = 0;
}

size_t lk_store_queued(lk_store *s) { return s->ops->queued ? s->ops->queued(s) : 0; }

int lk_store_idem_purge(lk_store *s, int64_t before_wall_ns, int64_t *deleted) {
  return s->ops->idem_purge(s, before_wall_ns, deleted);
}

int lk_store_idem_claim(lk_store *s, const char *tenant, const char *key, uint64_t owner,
                        int64_t lease_ns, lk_deadline dl) {
  return s->ops->idem_claim(s, tenant, key, owner, lease_ns, dl);
}

int lk_store_idem_release(lk_store *s, const char *tenant, const char *key, uint64_t owner) {
  return s->ops->idem_release(s, tenant, key, owner);
}

int lk_store_idem_lookup_claim(lk_store *s, const char *tenant, const char *key,
                               int64_t min_created_wall_ns, uint64_t owner, int64_t lease_ns,
                               lk_idem_record *out, bool *found, lk_deadline dl) {
  if (s->ops->idem_lookup_claim)
    return s->ops->idem_lookup_claim(s, tenant, key, min_created_wall_ns, owner, lease_ns, out,
                                     found, dl);
  *found = false;
  int rc = s->ops->idem_get(s, tenant, key, min_created_wall_ns, out, dl);
  if (rc == LK_OK) {
    *found = true;
    return LK_OK;
  }
  return rc == LK_ENOTFOUND ? s->ops->idem_claim(s, tenant, key, owner, lease_ns, dl) : rc;
}
