/* SPDX-License-Identifier: MIT */
/* store_impl.h: internals shared by the SQLite store's source files. */
#ifndef LINKD_STORE_IMPL_H
#define LINKD_STORE_IMPL_H

#include "store_backend.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>

/* Prepared statements, compiled once per connection on first use. */
typedef enum st_id {
  ST_BOOK_GET,
  ST_BOOKS_LIST,
  ST_LOAN_GET,
  ST_IDEM_GET,
  ST_BOOK_INSERT,
  ST_BOOK_UPDATE,
  ST_BOOK_DELETE,
  ST_STOCK_TAKE,
  ST_LOAN_INSERT,
  ST_IDEM_DELETE_EXPIRED,
  ST_IDEM_INSERT,
  ST_BEGIN,
  ST_COMMIT,
  ST_ROLLBACK,
  ST_SAVEPOINT,
  ST_RELEASE,
  ST_ROLLBACK_TO,
  ST_COUNT
} st_id;

typedef struct store_conn {
  sqlite3 *db;
  sqlite3_stmt *st[ST_COUNT];
  const lk_clock *clock;
  int64_t deadline; /* read by the progress handler; LK_DEADLINE_NONE when idle */
  struct store_conn *next;
} store_conn;

typedef struct sq_store sq_store;

typedef struct sq_tx {
  lk_store_tx base; /* first: the interface's view of it */
  sq_store *s;
  store_conn *c;
} sq_tx;

/* One write waiting for, or inside, a group commit. A waiting caller's lives on its stack; an
 * asynchronous one's (on_done set) is malloc'd and freed once on_done has been called. */
typedef struct gc_member {
  lk_store_tx_fn fn;
  void *arg;
  lk_deadline dl;
  int rc;
  bool done;         /* under gmu: rc is final and the caller may return */
  pthread_cond_t cv; /* signalled when done, or when this member is to lead the next group */
  lk_store_done_fn on_done;
  void *done_arg;
  struct gc_member *next;
} gc_member;

struct sq_store {
  lk_store base; /* first: the interface's view of it */
  char *path;
  lk_store_config cfg;
  int opened_version;
  store_conn *writer;
  pthread_mutex_t wmu;
  pthread_mutex_t pmu; /* guards `idle` */
  store_conn *idle;    /* reader connections not in use */
  pthread_mutex_t gmu; /* guards the group-commit queue below */
  gc_member *gq_head, *gq_tail;
  bool leading; /* a thread is running a group */
  /* Commit statistics: written by the writer under wmu, read without it (sq_commit_stats_get),
   * so that a /metrics scrape never waits behind a COMMIT's fsync. The writer publishes a
   * write's or a group's counts once it is over, writes before commits, so a reader that loads
   * commits first never sees more commits than writes. */
  _Atomic int64_t n_commits, n_writes, n_largest;
};

/* Opens one connection with the store's pragmas. NULL on failure (message in errbuf). */
store_conn *store_conn_open(sq_store *s, bool writer, char *errbuf, size_t errcap);
void store_conn_close(store_conn *c);
/* The statement `id`, reset and with bindings cleared; NULL on prepare failure. */
sqlite3_stmt *store_stmt(store_conn *c, st_id id);
/* Borrow / return a reader connection. */
store_conn *store_reader_get(sq_store *s);
void store_reader_put(sq_store *s, store_conn *c);
/* Maps an SQLite result code to an lk_err. */
int store_err(int rc);
/* Copies column `col` (TEXT) into buf of cap bytes, truncating at a UTF-8-agnostic byte limit. */
void store_col_text(sqlite3_stmt *st, int col, char *buf, size_t cap);

/* Creates or migrates the schema and seeds it; in schema.c. */
int store_migrate(sq_store *s, store_conn *c, char *errbuf, size_t errcap);

/* The SQLite implementation of store.h's calls (sqlite_ops.c puts them behind lk_store_ops). */
extern const lk_store_ops sq_ops;
int sq_open(const lk_store_config *cfg, sq_store **out, char *errbuf, size_t errcap);
void sq_close(sq_store *s);
int sq_opened_version(const sq_store *s);
int sq_book_get(sq_store *s, int64_t id, lk_book *out, lk_deadline dl);
int sq_books_list(sq_store *s, int64_t after, int limit, lk_book *out, int *n, lk_deadline dl);
int sq_loan_get(sq_store *s, int64_t id, lk_loan *out, lk_deadline dl);
int sq_idem_get(sq_store *s, const char *tenant, const char *key, int64_t min_created_wall_ns,
                lk_idem_record *out, lk_deadline dl);
int sq_counts_get(sq_store *s, lk_store_counts *out);
int sq_loan_groups(sq_store *s, bool by_key, bool only_dupes, int limit, lk_store_group_cb cb,
                   void *arg);
int sq_tenant_totals(sq_store *s, lk_store_tenant_cb cb, void *arg);
int sq_write(sq_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg);
void sq_write_async(sq_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg,
                    lk_store_done_fn done, void *done_arg);
bool sq_write_join(sq_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg, lk_store_done_fn done,
                   void *done_arg);
int sq_tx_book_get(sq_tx *tx, int64_t id, lk_book *out);
int sq_tx_book_create(sq_tx *tx, const lk_book *in, int64_t *id);
int sq_tx_book_update(sq_tx *tx, const lk_book *in);
int sq_tx_book_delete(sq_tx *tx, int64_t id);
int sq_tx_loan_create(sq_tx *tx, lk_loan *loan);
int sq_tx_idem_put(sq_tx *tx, const char *tenant, const char *key, const lk_idem_record *rec,
                   int64_t min_created_wall_ns);
int sq_idem_purge(sq_store *s, int64_t before_wall_ns, int64_t *deleted);
void sq_commit_stats_get(sq_store *s, lk_store_commit_stats *out);
size_t sq_queued(sq_store *s);

#endif
