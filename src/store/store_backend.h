/* SPDX-License-Identifier: MIT */
/* store_backend.h: what an implementation of store.h provides. An lk_store (and an lk_store_tx)
 * starts with a pointer to its implementation's table; store.c's lk_store_* calls dispatch
 * through it, so the server never knows which database it talks to. */
#ifndef LINKD_STORE_BACKEND_H
#define LINKD_STORE_BACKEND_H

#include "store.h"

typedef struct lk_store_ops {
  const char *kind;
  int schema_version;
  void (*close)(lk_store *s);
  int (*opened_version)(const lk_store *s);
  int (*book_get)(lk_store *s, int64_t id, lk_book *out, lk_deadline dl);
  int (*books_list)(lk_store *s, int64_t after, int limit, lk_book *out, int *n, lk_deadline dl);
  int (*loan_get)(lk_store *s, int64_t id, lk_loan *out, lk_deadline dl);
  int (*idem_get)(lk_store *s, const char *tenant, const char *key, int64_t min_created_wall_ns,
                  lk_idem_record *out, lk_deadline dl);
  int (*counts_get)(lk_store *s, lk_store_counts *out);
  int (*loan_groups)(lk_store *s, bool by_key, bool only_dupes, int limit, lk_store_group_cb cb,
                     void *arg);
  int (*tenant_totals)(lk_store *s, lk_store_tenant_cb cb, void *arg);
  int (*write)(lk_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg);
  /* optional: NULL means write, then done */
  void (*write_async)(lk_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg,
                      lk_store_done_fn done, void *done_arg);
  /* optional: NULL means never */
  bool (*write_join)(lk_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg,
                     lk_store_done_fn done, void *done_arg);
  int (*idem_purge)(lk_store *s, int64_t before_wall_ns, int64_t *deleted);
  int (*idem_claim)(lk_store *s, const char *tenant, const char *key, uint64_t owner,
                    int64_t lease_ns, lk_deadline dl);
  int (*idem_release)(lk_store *s, const char *tenant, const char *key, uint64_t owner);
  /* SQLite's group commit; NULL elsewhere */
  void (*commit_stats)(lk_store *s, lk_store_commit_stats *out);
  size_t (*queued)(lk_store *s);
  /* optional: NULL means idem_get, then idem_claim when there is no record */
  int (*idem_lookup_claim)(lk_store *s, const char *tenant, const char *key,
                           int64_t min_created_wall_ns, uint64_t owner, int64_t lease_ns,
                           lk_idem_record *out, bool *found, lk_deadline dl);
  /* inside lk_store_write's callback */
  int (*tx_book_get)(lk_store_tx *tx, int64_t id, lk_book *out);
  int (*tx_book_create)(lk_store_tx *tx, const lk_book *in, int64_t *id);
  int (*tx_book_update)(lk_store_tx *tx, const lk_book *in);
  int (*tx_book_delete)(lk_store_tx *tx, int64_t id);
  int (*tx_loan_create)(lk_store_tx *tx, lk_loan *loan);
  int (*tx_idem_put)(lk_store_tx *tx, const char *tenant, const char *key,
                     const lk_idem_record *rec, int64_t min_created_wall_ns);
} lk_store_ops;

struct lk_store {
  const lk_store_ops *ops;
};

struct lk_store_tx {
  const lk_store_ops *ops;
};

/* The sample books inserted on first start (samples.c). */
typedef struct lk_sample_book {
  const char *title, *author, *isbn;
  int year, stock;
} lk_sample_book;
const lk_sample_book *lk_store_sample_books(size_t *n);

/* The PostgreSQL implementation's open (src/store/pg/pg.c). */
int lk_pg_open(const lk_store_config *cfg, lk_store **out, char *errbuf, size_t errcap);

#endif
