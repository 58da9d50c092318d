/* SPDX-License-Identifier: MIT */
/* store.h: libraryd's store (books, loans, idempotency records): one interface, two
 * implementations behind it (docs/DESIGN.md section 9).
 *
 * SQLite (the embedded default, lk_store_config.path): one file in WAL mode. Reads go through a
 * pool of reader connections (WAL readers never block the writer or each other); every write
 * runs on the single writer connection under a mutex, inside one BEGIN IMMEDIATE transaction.
 * With synchronous=FULL the WAL is fsynced at every commit (durable across power loss), with
 * NORMAL it is written to the OS at commit and fsynced at checkpoints (durable across a process
 * crash such as kill -9, not power loss).
 *
 * PostgreSQL (lk_store_config.url, "postgres://..." or a libpq key=value string): a pool of
 * libpq connections shared by reads and writes, so that many libraryd processes can serve one
 * database (src/store/pg, docs/libraryd.md "Many instances on PostgreSQL").
 *
 * In both, a write transaction also holds the idempotency record, so a crash can never keep the
 * business effect without the record or the record without the effect, and a write is
 * acknowledged only after COMMIT returned.
 *
 * SQLite group commit (default on): writes that arrive while another is committing wait for it,
 * then the first of them commits them all in one transaction, each inside its own SAVEPOINT,
 * with one fsync. A write that fails rolls back to its savepoint only, so its neighbours still
 * commit; every one is acknowledged (lk_store_write returns) only after the shared COMMIT
 * returned, so the durability of each write is that of a write committed alone.
 *
 * Deadlines: every call takes an lk_deadline; a running statement is interrupted once it passes
 * (LK_EDEADLINE), and a write whose deadline passed before COMMIT is rolled back. LK_EAGAIN
 * means the database is unreachable or busy for now (the server answers 503 + Retry-After).
 *
 * Thread-safety: an lk_store is safe to use from many threads at once. An lk_store_tx belongs to
 * the callback it is passed to and is valid only during that call.
 */
#ifndef LINKD_STORE_H
#define LINKD_STORE_H

#include <linkd/clock.h>
#include <linkd/deadline.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LK_STORE_SCHEMA_VERSION 3 /* SQLite: user_version after all migrations */
#define LK_PG_SCHEMA_VERSION 1    /* PostgreSQL: schema_version after all migrations */
#define LK_BOOK_TEXT_MAX 200      /* bytes of title / author */
#define LK_BOOK_ISBN_MAX 32
#define LK_LOAN_TEXT_MAX 255 /* bytes of borrower / request id / key / tenant */

typedef enum lk_store_sync { LK_STORE_SYNC_NORMAL = 1, LK_STORE_SYNC_FULL = 2 } lk_store_sync;

typedef struct lk_store_config {
  const char *path;      /* SQLite database file (copied); created when missing */
  const char *url;       /* PostgreSQL connection URL or conninfo; when set, path is unused */
  unsigned pool_size;    /* PostgreSQL connections (default 16) */
  lk_store_sync sync;    /* default FULL */
  bool seed;             /* insert the sample books on first start (default true) */
  int busy_timeout_ms;   /* for other processes holding the file (default 5000) */
  const lk_clock *clock; /* for deadlines; default lk_clock_system() */
  bool group_commit;     /* SQLite: commit concurrent writes together (default true); false: one
                            transaction and one fsync per write */
  int64_t statement_timeout_ns; /* PostgreSQL: how long a call without a deadline waits for a
                                   statement's answer before it is cancelled and fails with
                                   LK_EAGAIN (default 5 s, as busy_timeout_ms for SQLite);
                                   0: as long as it takes */
} lk_store_config;

typedef struct lk_store lk_store;
typedef struct lk_store_tx lk_store_tx;

typedef struct lk_book {
  int64_t id;
  char title[LK_BOOK_TEXT_MAX + 1];
  char author[LK_BOOK_TEXT_MAX + 1];
  char isbn[LK_BOOK_ISBN_MAX + 1]; /* "" = none */
  bool has_year;
  int64_t year;
  int64_t stock; /* copies available to borrow, >= 0 */
} lk_book;

typedef struct lk_loan {
  int64_t id;
  int64_t book_id;
  int64_t stock_after; /* the book's stock once this loan was applied */
  int64_t created_wall_ns;
  char tenant[LK_LOAN_TEXT_MAX + 1];
  char borrower[LK_LOAN_TEXT_MAX + 1];   /* "" = none */
  char idem_key[LK_LOAN_TEXT_MAX + 1];   /* "" = sent without a key */
  char request_id[LK_LOAN_TEXT_MAX + 1]; /* X-Request-Id, "" = none */
} lk_loan;

/* The stored outcome of a keyed request: returned again, byte for byte, on a replay. */
typedef struct lk_idem_record {
  uint8_t fingerprint[32]; /* SHA-256 over method, path and body */
  int status;
  char *headers; /* "Name: value\n" lines, malloc'd */
  uint8_t *body; /* malloc'd, body_len bytes */
  size_t body_len;
  int64_t created_wall_ns;
} lk_idem_record;

/* Sets every field of `cfg` to its default (path "libraryd.db", no url: SQLite). */
void lk_store_config_init_default(lk_store_config *cfg);

/* Opens (creating and migrating when needed) the database: PostgreSQL when cfg->url is set,
 * else SQLite. 0 or LK_ESYS (a missing or unwritable directory, a read-only file, SQLite cannot
 * open it, PostgreSQL refused the connection) / LK_EIO / LK_ENOMEM / LK_ESTATE (a schema newer
 * than this program). On failure *out is NULL and `errbuf` (may be NULL) names the cause. */
int lk_store_open(const lk_store_config *cfg, lk_store **out, char *errbuf, size_t errcap);
/* Closes every connection (the last close checkpoints the WAL). NULL is a no-op. Callers must
 * have stopped using the store. */
void lk_store_close(lk_store *s);
/* Schema version found in the database when it was opened (0 for a new one). */
int lk_store_opened_version(const lk_store *s);
/* The schema version this program migrates to for this store's kind. */
int lk_store_schema_version(const lk_store *s);
/* "sqlite" or "postgres". */
const char *lk_store_kind(const lk_store *s);

/* --- reads (reader pool) --------------------------------------------------------------------- */
/* 0, LK_ENOTFOUND, LK_EDEADLINE or LK_EIO. */
int lk_store_book_get(lk_store *s, int64_t id, lk_book *out, lk_deadline dl);
/* Up to `limit` books with id > after, ascending; *n receives the count. */
int lk_store_books_list(lk_store *s, int64_t after, int limit, lk_book *out, int *n,
                        lk_deadline dl);
int lk_store_loan_get(lk_store *s, int64_t id, lk_loan *out, lk_deadline dl);
/* The record for (tenant, key) created at or after `min_created_wall_ns` (older ones are expired
 * and treated as absent). 0 and *out filled (free with lk_idem_record_clear), LK_ENOTFOUND, ... */
int lk_store_idem_get(lk_store *s, const char *tenant, const char *key, int64_t min_created_wall_ns,
                      lk_idem_record *out, lk_deadline dl);
void lk_idem_record_clear(lk_idem_record *r);

typedef struct lk_store_counts {
  int64_t books, loans, keyed_loans, idem_records;
} lk_store_counts;
int lk_store_counts_get(lk_store *s, lk_store_counts *out);

/* Visits loan groups that share an identity: by (tenant, book, X-Request-Id) when by_key is
 * false, by (tenant, idempotency key) when true. Only groups with more than one loan when
 * only_dupes. Stops after `limit` groups or when cb returns non-zero. */
typedef int (*lk_store_group_cb)(void *arg, const char *tenant, int64_t book_id, const char *id,
                                 int64_t count);
int lk_store_loan_groups(lk_store *s, bool by_key, bool only_dupes, int limit, lk_store_group_cb cb,
                         void *arg);
/* Per-tenant loan totals. A duplicate is a loan beyond the first with the same (book,
 * X-Request-Id), or beyond the first with the same idempotency key (never, by design). */
typedef struct lk_tenant_totals {
  int64_t loans, keyed_loans;
  int64_t duplicate_by_request_id, duplicate_by_key;
} lk_tenant_totals;
typedef int (*lk_store_tenant_cb)(void *arg, const char *tenant, const lk_tenant_totals *t);
int lk_store_tenant_totals(lk_store *s, lk_store_tenant_cb cb, void *arg);

/* --- writes (one transaction each) ---------------------------------------------------------- */
/* Runs fn inside BEGIN IMMEDIATE on the writer connection. fn returns 0 to commit or a negative
 * lk_err to roll back (returned as is). Returns 0 once COMMIT succeeded, LK_EDEADLINE when the
 * deadline passed before COMMIT (rolled back, nothing applied), or LK_EIO. With SQLite's group
 * commit the transaction may hold other writes too; fn then runs inside a savepoint, its failure
 * rolls back only its own changes, and the deadline is checked once fn returned (a group's
 * statements are not interrupted half-way, which would roll back the whole group). fn must not
 * depend on running on the caller's thread. */
typedef int (*lk_store_tx_fn)(lk_store_tx *tx, void *arg);
int lk_store_write(lk_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg);

/* lk_store_write without waiting: done(done_arg, rc) is called exactly once with what
 * lk_store_write would have returned, after the COMMIT that made the write durable (never
 * before), on this thread before the call returns or on the thread that committed the group.
 * With SQLite's group commit the call only queues the write, unless no group is running: then
 * this thread commits groups until the queue is empty (the writes that arrive meanwhile), so a
 * caller that must not block for a commit may not call it. Without group commit, and on
 * PostgreSQL, it is lk_store_write followed by done. done must not call lk_store_write. */
typedef void (*lk_store_done_fn)(void *done_arg, int rc);
void lk_store_write_async(lk_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg,
                          lk_store_done_fn done, void *done_arg);
/* lk_store_write_async only if a group is being committed (SQLite's group commit): the write
 * joins the queue that thread commits next, and true. false, and nothing done, when no group is
 * running or the store does not group. Never commits on the calling thread, so a thread that
 * must not wait for an fsync may call it. */
bool lk_store_write_join(lk_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg,
                         lk_store_done_fn done, void *done_arg);

/* Write transactions so far: commits = COMMITs attempted (each one fsync with sync=full), writes
 * = lk_store_write calls that reached the writer, largest = most writes in one commit. SQLite
 * only (zeros for PostgreSQL, which commits each write in its own transaction). Never waits for
 * the writer (atomics it updates once a write or group is over, not its lock), so a scrape does
 * not queue behind a COMMIT's fsync; the three may be from moments a group apart, but writes is
 * never below commits. */
typedef struct lk_store_commit_stats {
  int64_t commits, writes, largest;
} lk_store_commit_stats;
void lk_store_commit_stats_get(lk_store *s, lk_store_commit_stats *out);
/* SQLite: writes waiting for the next group (not counting a group being committed); 0 for
 * PostgreSQL. */
size_t lk_store_queued(lk_store *s);

int lk_store_tx_book_get(lk_store_tx *tx, int64_t id, lk_book *out);
/* Inserts `in` (its id is ignored); *id receives the new id. */
int lk_store_tx_book_create(lk_store_tx *tx, const lk_book *in, int64_t *id);
/* Replaces every field of book in->id. LK_ENOTFOUND when it does not exist. */
int lk_store_tx_book_update(lk_store_tx *tx, const lk_book *in);
int lk_store_tx_book_delete(lk_store_tx *tx, int64_t id);
/* Borrows one copy of loan->book_id: stock - 1 and a loan row from loan's tenant, borrower,
 * idem_key and request_id. Fills loan->id, stock_after, created_wall_ns. LK_ENOTFOUND (no such
 * book), LK_ECONFLICT (stock is 0). */
int lk_store_tx_loan_create(lk_store_tx *tx, lk_loan *loan);
/* Stores the idempotency record for (tenant, key); an expired one (created before
 * min_created_wall_ns) is replaced. LK_ECONFLICT when a live record exists: from this call
 * (SQLite) or from lk_store_write, which then rolls back (PostgreSQL sends the record with COMMIT
 * in one round trip and learns of the conflict there). At most one per transaction. */
int lk_store_tx_idem_put(lk_store_tx *tx, const char *tenant, const char *key,
                         const lk_idem_record *rec, int64_t min_created_wall_ns);

/* Deletes idempotency records created before `before_wall_ns`, in batches so writers are not
 * held up; *deleted (may be NULL) receives the count. Expired claims go too. */
int lk_store_idem_purge(lk_store *s, int64_t before_wall_ns, int64_t *deleted);

/* --- claims: a key executing somewhere ------------------------------------------------------ */
/* Marks (tenant, key) as executing for `owner` (unique per request and process) for at most
 * lease_ns, so that every process sharing the database answers 409 for it meanwhile. 0 when
 * claimed, LK_ECONFLICT when another owner holds a live claim, LK_EAGAIN / LK_EIO /
 * LK_EDEADLINE. A claim is not durable: it does not survive a database restart, and a holder
 * that dies leaves it until its lease ends. lk_store_tx_idem_put ends the claim on the key in
 * the same transaction; lk_store_idem_release ends it when the write did not commit.
 * SQLite: only one process writes a file at a time and its own in-process table does this job,
 * so both calls succeed at once and hold nothing. */
int lk_store_idem_claim(lk_store *s, const char *tenant, const char *key, uint64_t owner,
                        int64_t lease_ns, lk_deadline dl);
int lk_store_idem_release(lk_store *s, const char *tenant, const char *key, uint64_t owner);
/* lk_store_idem_get and, when no live record exists, lk_store_idem_claim, as one call (one
 * round trip on PostgreSQL). 0 with *found true and *out filled (nothing claimed; free with
 * lk_idem_record_clear); 0 with *found false: claimed for `owner`; LK_ECONFLICT: no record, and
 * another owner holds the key; or an error. */
int lk_store_idem_lookup_claim(lk_store *s, const char *tenant, const char *key,
                               int64_t min_created_wall_ns, uint64_t owner, int64_t lease_ns,
                               lk_idem_record *out, bool *found, lk_deadline dl);

#endif
