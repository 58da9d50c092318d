/* SPDX-License-Identifier: MIT */
/* outbox_impl.h: internals shared by the outbox's source files. */
#ifndef LINKD_OUTBOX_IMPL_H
#define LINKD_OUTBOX_IMPL_H

#include <linkd/outbox.h>

#include <pthread.h>
#include <sqlite3.h>

#define OB_SCHEMA_VERSION 2
/* The oldest schema a read-only open reads (it cannot upgrade a file): version 2 added only an
 * index, which reads do not need */
#define OB_SCHEMA_READ_MIN 1
#define OB_BODY_MAX ((size_t)64 << 20) /* the same cap as linkd's -d */

/* Prepared statements, compiled once on first use. */
typedef enum ob_st {
  OB_ST_INSERT,
  OB_ST_TOTALS_ADD,
  OB_ST_DUE,
  OB_ST_EXPIRE,
  OB_ST_RECORD,
  OB_ST_GET,
  OB_ST_COUNT
} ob_st;

struct lk_outbox {
  char *path;
  lk_outbox_config cfg;
  sqlite3 *db;
  pthread_mutex_t mu; /* one connection, used by one thread at a time */
  sqlite3_stmt *st[OB_ST_COUNT];
};

/* Deltas for the totals row, added in the transaction that makes the change. */
typedef struct ob_totals {
  int64_t enqueued, delivered, expired, poisoned, purged, rounds, attempts, retried;
} ob_totals;

/* The entry's columns, in this order, for SELECTs that fill an lk_outbox_entry. */
#define OB_ENTRY_COLUMNS                                                                           \
  "id, state, method, url, idem_key, headers, length(body), created_ns, expires_ns, next_ns, "     \
  "done_ns, rounds, attempts, last_error, last_failure, last_status, resp_headers, resp_body, "    \
  "resp_truncated"

int64_t lk__ob_now(const lk_outbox *ob);
/* The statement `id`, reset and with bindings cleared; NULL on prepare failure. Lock held. */
sqlite3_stmt *lk__ob_stmt(lk_outbox *ob, ob_st id);
/* Maps an SQLite result code to an lk_err (never LK_OK for an error code). */
int lk__ob_err(int rc);
/* sqlite3_exec as an lk_err. */
int lk__ob_exec(lk_outbox *ob, const char *sql);
/* BEGIN IMMEDIATE ... COMMIT helpers; lock held. */
int lk__ob_begin(lk_outbox *ob);
int lk__ob_commit(lk_outbox *ob);
void lk__ob_rollback(lk_outbox *ob);
/* Adds `t` to the totals row; inside a transaction. */
int lk__ob_totals_add(lk_outbox *ob, const ob_totals *t);
/* Fills `e` from the current row of a SELECT of OB_ENTRY_COLUMNS (pointers into the row). */
void lk__ob_entry_from_row(sqlite3_stmt *st, lk_outbox_entry *e);
/* Purge without taking the lock per batch (lock NOT held on entry). */
int lk__ob_purge(lk_outbox *ob, int64_t before, bool include_poisoned, int64_t *deleted);

#endif
