/* SPDX-License-Identifier: MIT */
/* outbox.c: opening the file, its schema, and the statements shared by the other parts. */
#include "outbox_impl.h"
#include "sqlite/lk_sqlite.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static const char *const stmt_sql[OB_ST_COUNT] = {
    [OB_ST_INSERT] = "INSERT INTO entries(state, method, url, headers, body, idem_key, created_ns, "
                     "expires_ns, next_ns) VALUES(0, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?6)",
    [OB_ST_TOTALS_ADD] = "UPDATE totals SET enqueued = enqueued + ?1, delivered = delivered + ?2, "
                         "expired = expired + ?3, poisoned = poisoned + ?4, purged = purged + ?5, "
                         "rounds = rounds + ?6, attempts = attempts + ?7, retried = retried + ?8",
    /* Due: its round has come (?2 is now), or the wall clock was stepped back since the time
     * was stored. An entry never called (rounds 0) has no reason to wait at all, and a next
     * round further ahead than the longest delay this sender sets (?4: now + max(backoff.max,
     * retry_after_cap)) was not set by it: before, a clock stepped back by an hour held every
     * pending entry for that hour, and a device that booted with its clock years ahead held
     * its failed entries for years. */
    [OB_ST_DUE] = "SELECT id, method, url, headers, body, idem_key, expires_ns, rounds, attempts, "
                  "created_ns "
                  "FROM entries WHERE state = 0 AND id > ?1 "
                  "AND (next_ns <= ?2 OR rounds = 0 OR next_ns > ?4) "
                  "ORDER BY id LIMIT ?3",
    [OB_ST_EXPIRE] = "UPDATE entries SET state = 2, done_ns = ?2 WHERE id = ?1 AND state = 0",
    [OB_ST_RECORD] = "UPDATE entries SET state = ?2, rounds = rounds + 1, attempts = attempts + ?3,"
                     " next_ns = ?4, done_ns = ?5, last_error = ?6, last_failure = ?7, "
                     "last_status = ?8, resp_headers = ?9, resp_body = ?10, resp_truncated = ?11 "
                     "WHERE id = ?1 AND state = 0",
    [OB_ST_GET] = "SELECT " OB_ENTRY_COLUMNS " FROM entries WHERE id = ?1",
};

/* migrations[i] takes the schema from version i to i + 1. Append only. */
static const char *const migrations[] = {
    /* 0 -> 1. The key is UNIQUE: one logical operation, one entry. done_ns is when the entry
     * left PENDING (0 before), for the retention window. The totals row counts what happened
     * over the file's life, in the same transactions as the changes. */
    "CREATE TABLE entries("
    "  id INTEGER PRIMARY KEY,"
    "  state INTEGER NOT NULL,"
    "  method TEXT NOT NULL,"
    "  url TEXT NOT NULL,"
    "  headers TEXT NOT NULL,"
    "  body BLOB NOT NULL,"
    "  idem_key TEXT NOT NULL UNIQUE,"
    "  created_ns INTEGER NOT NULL,"
    "  expires_ns INTEGER NOT NULL,"
    "  next_ns INTEGER NOT NULL,"
    "  done_ns INTEGER NOT NULL DEFAULT 0,"
    "  rounds INTEGER NOT NULL DEFAULT 0,"
    "  attempts INTEGER NOT NULL DEFAULT 0,"
    "  last_error INTEGER NOT NULL DEFAULT 0,"
    "  last_failure TEXT NOT NULL DEFAULT '',"
    "  last_status INTEGER NOT NULL DEFAULT 0,"
    "  resp_headers TEXT NOT NULL DEFAULT '',"
    "  resp_body BLOB NOT NULL DEFAULT x'',"
    "  resp_truncated INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX entries_by_state ON entries(state, id);"
    "CREATE INDEX entries_done ON entries(state, done_ns) WHERE state <> 0;"
    "CREATE TABLE totals("
    "  one INTEGER PRIMARY KEY CHECK(one = 1),"
    "  enqueued INTEGER NOT NULL, delivered INTEGER NOT NULL, expired INTEGER NOT NULL,"
    "  poisoned INTEGER NOT NULL, purged INTEGER NOT NULL, rounds INTEGER NOT NULL,"
    "  attempts INTEGER NOT NULL, retried INTEGER NOT NULL);"
    "INSERT INTO totals VALUES(1, 0, 0, 0, 0, 0, 0, 0, 0);",
    /* 1 -> 2. The scans of pending entries (the sender's due query, its count and next round,
     * stats' oldest entry) test next_ns, rounds and created_ns, which the table stores after
     * the body: reading them from the table row walks the body's overflow pages, so each scan
     * read every stored body (2 000 entries of 200 KB: 0.2 s per scan, 400 MB read). With them
     * in the index, the scans read the index alone and only the rows they return. */
    "DROP INDEX entries_by_state;"
    "CREATE INDEX entries_state ON entries(state, id, next_ns, rounds, created_ns);",
};

_Static_assert(sizeof migrations / sizeof migrations[0] == OB_SCHEMA_VERSION,
               "one migration per schema version");

static int64_t wall_now(const lk_clock *c) {
  (void)c;
  return lk_wall_ns();
}
static const lk_clock wall_clock = {wall_now};

void lk_outbox_config_init_default(lk_outbox_config *c) {
  c->path = "linkd-outbox.db";
  c->retention = LK_SEC(7 * 86400);
  c->default_ttl = LK_SEC(86400);
  c->busy_timeout_ms = 5000;
  c->max_stored_response = 64 * 1024;
  c->wall_clock = NULL;
  c->read_only = false;
}

int64_t lk__ob_now(const lk_outbox *ob) { return ob->cfg.wall_clock->now(ob->cfg.wall_clock); }

int lk__ob_err(int rc) {
  switch (rc & 0xff) {
  case SQLITE_OK:
  case SQLITE_DONE:
  case SQLITE_ROW: return LK_EIO; /* asked about a failure: never report success */
  case SQLITE_NOMEM: return LK_ENOMEM;
  /* a full file system is not a damaged file: LK_ESYS (write(2) said ENOSPC), so a caller can
   * tell "free space and try again" from "look at the file" (LK_EIO) */
  case SQLITE_FULL: return LK_ESYS;
  case SQLITE_CONSTRAINT: return LK_ECONFLICT;
  case SQLITE_BUSY:
  case SQLITE_LOCKED: return LK_EAGAIN;
  default: return LK_EIO;
  }
}

int lk__ob_exec(lk_outbox *ob, const char *sql) {
  int rc = sqlite3_exec(ob->db, sql, NULL, NULL, NULL);
  return rc == SQLITE_OK ? LK_OK : lk__ob_err(rc);
}

int lk__ob_begin(lk_outbox *ob) { return lk__ob_exec(ob, "BEGIN IMMEDIATE"); }

int lk__ob_commit(lk_outbox *ob) {
  int rc = lk__ob_exec(ob, "COMMIT");
  if (rc != LK_OK)
    lk__ob_rollback(ob);
  return rc;
}

void lk__ob_rollback(lk_outbox *ob) {
  if (!sqlite3_get_autocommit(ob->db))
    sqlite3_exec(ob->db, "ROLLBACK", NULL, NULL, NULL);
}

sqlite3_stmt *lk__ob_stmt(lk_outbox *ob, ob_st id) {
  sqlite3_stmt *st = ob->st[id];
  if (!st) {
    if (sqlite3_prepare_v3(ob->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) !=
        SQLITE_OK)
      return NULL;
    ob->st[id] = st;
  } else {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
  }
  return st;
}

int lk__ob_totals_add(lk_outbox *ob, const ob_totals *t) {
  sqlite3_stmt *st = lk__ob_stmt(ob, OB_ST_TOTALS_ADD);
  if (!st)
    return LK_EIO;
  const int64_t v[] = {t->enqueued, t->delivered, t->expired,  t->poisoned,
                       t->purged,   t->rounds,    t->attempts, t->retried};
  for (int i = 0; i < 8; i++)
    sqlite3_bind_int64(st, i + 1, v[i]);
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  return rc == SQLITE_DONE ? LK_OK : lk__ob_err(rc);
}

static const char *col_text(sqlite3_stmt *st, int i) {
  const unsigned char *t = sqlite3_column_text(st, i);
  return t ? (const char *)t : "";
}

void lk__ob_entry_from_row(sqlite3_stmt *st, lk_outbox_entry *e) {
  memset(e, 0, sizeof *e);
  e->id = sqlite3_column_int64(st, 0);
  e->state = (lk_outbox_state)sqlite3_column_int(st, 1);
  e->method = col_text(st, 2);
  e->url = col_text(st, 3);
  e->key = col_text(st, 4);
  e->headers = col_text(st, 5);
  e->body_len = (size_t)sqlite3_column_int64(st, 6);
  e->created = sqlite3_column_int64(st, 7);
  e->expires = sqlite3_column_int64(st, 8);
  e->next_round = sqlite3_column_int64(st, 9);
  e->done = sqlite3_column_int64(st, 10);
  e->rounds = sqlite3_column_int(st, 11);
  e->attempts = sqlite3_column_int(st, 12);
  e->last_error = sqlite3_column_int(st, 13);
  e->last_failure = col_text(st, 14);
  e->last_status = sqlite3_column_int(st, 15);
  e->response_headers = col_text(st, 16);
  e->response_body = sqlite3_column_blob(st, 17);
  e->response_body_len = (size_t)sqlite3_column_bytes(st, 17);
  if (!e->response_body)
    e->response_body = "";
  e->response_truncated = sqlite3_column_int(st, 18) != 0;
}

/* --- opening ------------------------------------------------------------------------------- */

static int user_version(sqlite3 *db, int *v) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK)
    return LK_EIO;
  int rc = sqlite3_step(st);
  *v = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
  sqlite3_finalize(st);
  return rc == SQLITE_ROW ? LK_OK : LK_EIO;
}

/* PRAGMA journal_mode=WAL on a new file upgrades a read lock to the write lock. Two processes
 * opening one new file at once (an enqueuer and a sender started together) both hold the read
 * lock there, and SQLite answers one of them SQLITE_BUSY at once, without the busy handler
 * (waiting could deadlock): `linkd outbox enqueue` failed with "database is locked" and
 * stored nothing. The other finishes in a moment, so retry within busy_timeout_ms. */
static int set_wal(lk_outbox *ob, int busy_timeout_ms) {
  for (int waited = 0;; waited += 5) {
    int rc = sqlite3_exec(ob->db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL);
    if ((rc & 0xff) != SQLITE_BUSY || waited >= busy_timeout_ms)
      return rc == SQLITE_OK ? LK_OK : lk__ob_err(rc);
    sqlite3_sleep(5);
  }
}

static int migrate(lk_outbox *ob, char *errbuf, size_t errcap) {
  /* IMMEDIATE: two processes opening one new file must not both create the schema. */
  int rc = lk__ob_begin(ob);
  if (rc != LK_OK) {
    lk__sqlite_err(errbuf, errcap, "begin", ob->db);
    return rc;
  }
  int v;
  rc = user_version(ob->db, &v);
  if (rc == LK_OK && v > OB_SCHEMA_VERSION) {
    if (errbuf && errcap)
      snprintf(errbuf, errcap, "outbox schema version %d is newer than this library's %d", v,
               OB_SCHEMA_VERSION);
    rc = LK_ESTATE;
  }
  for (; rc == LK_OK && v < OB_SCHEMA_VERSION; v++) {
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", v + 1);
    rc = lk__ob_exec(ob, migrations[v]);
    if (rc == LK_OK)
      rc = lk__ob_exec(ob, sql);
    if (rc != LK_OK)
      lk__sqlite_err(errbuf, errcap, "schema", ob->db);
  }
  if (rc != LK_OK) {
    lk__ob_rollback(ob);
    return rc;
  }
  rc = lk__ob_commit(ob);
  if (rc != LK_OK)
    lk__sqlite_err(errbuf, errcap, "commit", ob->db);
  return rc;
}

/* "file:" + path percent-encoded + "?immutable=1": a path with '?', '#' or '%' in it is then
 * still that path. NULL on no memory. */
static char *immutable_uri(const char *path) {
  static const char hex[] = "0123456789ABCDEF";
  size_t n = strlen(path);
  char *u = malloc(5 + 3 * n + sizeof "?immutable=1");
  if (!u)
    return NULL;
  char *w = u;
  memcpy(w, "file:", 5);
  w += 5;
  for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
        strchr("/-._~", *p)) {
      *w++ = (char)*p;
    } else {
      *w++ = '%';
      *w++ = hex[*p >> 4];
      *w++ = hex[*p & 15];
    }
  }
  memcpy(w, "?immutable=1", sizeof "?immutable=1");
  return u;
}

/* A WAL file is read with its -shm index: SQLite maps a read-only one while a writer has the
 * file open, and makes one where the directory lets it. In a directory it cannot write (a
 * snapshot on a read-only file system, another user's outbox) with no writer there is none to be
 * had, and no -wal either (the last writer to close checkpoints it and removes it), so the file
 * as it is holds every commit: it is opened immutable. A -wal left there (a writer running, or
 * one that died) is never skipped that way: the open fails instead. */
static int open_read_only(lk_outbox *ob, char *errbuf, size_t errcap) {
  int flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX;
  if (access(ob->path, F_OK) != 0) {
    if (errbuf && errcap)
      snprintf(errbuf, errcap, "%s: %s", ob->path, strerror(errno));
    return LK_ESYS;
  }
  int v = -1;
  int rc = sqlite3_open_v2(ob->path, &ob->db, flags, NULL);
  if (rc == SQLITE_OK && user_version(ob->db, &v) != LK_OK) {
    size_t n = strlen(ob->path);
    char *wal = malloc(n + sizeof "-wal");
    if (!wal)
      return LK_ENOMEM;
    memcpy(wal, ob->path, n);
    memcpy(wal + n, "-wal", sizeof "-wal");
    bool has_wal = access(wal, F_OK) == 0;
    free(wal);
    if (has_wal) {
      lk__sqlite_err(errbuf, errcap, ob->path, ob->db);
      if (errbuf && errcap) {
        size_t used = strlen(errbuf);
        snprintf(errbuf + used, errcap - used,
                 " (read-only, with a -wal beside it that needs its -shm index: a writer that "
                 "died, or one whose index this user cannot read)");
      }
      return LK_ESYS;
    }
    sqlite3_close(ob->db);
    ob->db = NULL;
    char *uri = immutable_uri(ob->path);
    if (!uri)
      return LK_ENOMEM;
    rc = sqlite3_open_v2(uri, &ob->db, flags | SQLITE_OPEN_URI, NULL);
    free(uri);
    if (rc == SQLITE_OK && user_version(ob->db, &v) != LK_OK)
      rc = SQLITE_ERROR;
  }
  if (rc != SQLITE_OK) {
    lk__sqlite_err(errbuf, errcap, ob->path, ob->db);
    return LK_ESYS;
  }
  sqlite3_extended_result_codes(ob->db, 1);
  sqlite3_busy_timeout(ob->db, ob->cfg.busy_timeout_ms);
  if (v < OB_SCHEMA_READ_MIN || v > OB_SCHEMA_VERSION) {
    if (errbuf && errcap) {
      if (v == 0)
        snprintf(errbuf, errcap, "%s: not an outbox", ob->path);
      else
        snprintf(errbuf, errcap, "outbox schema version %d is %s than this library's %d%s", v,
                 v > OB_SCHEMA_VERSION ? "newer" : "older", OB_SCHEMA_VERSION,
                 v > OB_SCHEMA_VERSION ? "" : " (open it read-write once to upgrade it)");
    }
    return v == 0 ? LK_ESYS : LK_ESTATE;
  }
  return LK_OK;
}

int lk_outbox_open(const lk_outbox_config *cfg, lk_outbox **out, char *errbuf, size_t errcap) {
  if (out)
    *out = NULL;
  if (errbuf && errcap)
    errbuf[0] = '\0';
  if (!cfg || !out || !cfg->path || !*cfg->path || cfg->retention <= 0 || cfg->default_ttl <= 0 ||
      cfg->busy_timeout_ms < 0)
    return LK_EINVAL;
  if (!cfg->read_only && lk__sqlite_check_location(cfg->path, "outbox", errbuf, errcap) != 0)
    return LK_ESYS;
  lk_outbox *ob = calloc(1, sizeof *ob);
  if (!ob)
    return LK_ENOMEM;
  ob->cfg = *cfg;
  ob->path = strdup(cfg->path);
  if (!ob->path) {
    free(ob);
    return LK_ENOMEM;
  }
  ob->cfg.path = ob->path;
  if (!ob->cfg.wall_clock)
    ob->cfg.wall_clock = &wall_clock;
  pthread_mutex_init(&ob->mu, NULL);
  if (cfg->read_only) {
    int rc = open_read_only(ob, errbuf, errcap);
    if (rc != LK_OK) {
      lk_outbox_close(ob);
      return rc;
    }
    *out = ob;
    return LK_OK;
  }
  /* NOMUTEX: ob->mu serialises the connection. */
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  if (sqlite3_open_v2(ob->path, &ob->db, flags, NULL) != SQLITE_OK) {
    lk__sqlite_err(errbuf, errcap, ob->path, ob->db);
    lk_outbox_close(ob);
    return LK_ESYS;
  }
  if (sqlite3_db_readonly(ob->db, "main") == 1) {
    if (errbuf && errcap)
      snprintf(errbuf, errcap, "%s: the outbox file is read-only", ob->path);
    lk_outbox_close(ob);
    return LK_ESYS;
  }
  sqlite3_extended_result_codes(ob->db, 1);
  sqlite3_busy_timeout(ob->db, cfg->busy_timeout_ms);
  /* A schema from the future is refused before anything is written: the journal mode below is
   * stored in the file, and a file this library refuses must be left as it was. */
  int v = 0;
  if (user_version(ob->db, &v) == LK_OK && v > OB_SCHEMA_VERSION) {
    if (errbuf && errcap)
      snprintf(errbuf, errcap, "outbox schema version %d is newer than this library's %d", v,
               OB_SCHEMA_VERSION);
    lk_outbox_close(ob);
    return LK_ESTATE;
  }
  /* FULL: the WAL is fsynced at every COMMIT, so an acknowledged enqueue survives power loss,
   * not only a crash of the process. */
  int rc = set_wal(ob, cfg->busy_timeout_ms);
  if (rc == LK_OK)
    rc = lk__ob_exec(ob, "PRAGMA synchronous=FULL; PRAGMA temp_store=MEMORY;");
  if (rc != LK_OK) {
    lk__sqlite_err(errbuf, errcap, "pragmas", ob->db);
    lk_outbox_close(ob);
    return rc == LK_EAGAIN ? rc : LK_ESYS;
  }
  rc = migrate(ob, errbuf, errcap);
  if (rc != LK_OK) {
    lk_outbox_close(ob);
    return rc;
  }
  *out = ob;
  return LK_OK;
}

void lk_outbox_close(lk_outbox *ob) {
  if (!ob)
    return;
  for (int i = 0; i < OB_ST_COUNT; i++)
    sqlite3_finalize(ob->st[i]);
  sqlite3_close(ob->db);
  pthread_mutex_destroy(&ob->mu);
  free(ob->path);
  free(ob);
}

/* --- names ------------------------------------------------------------------------------------ */

static const char *const state_names[] = {"pending", "delivered", "expired", "poisoned"};

const char *lk_outbox_state_name(lk_outbox_state s) {
  return (unsigned)s < 4 ? state_names[s] : "unknown";
}

int lk_outbox_state_parse(const char *s, lk_outbox_state *out) {
  if (!s || !out)
    return LK_EINVAL;
  for (int i = 0; i < 4; i++) {
    if (strcasecmp(s, state_names[i]) == 0) {
      *out = (lk_outbox_state)i;
      return LK_OK;
    }
  }
  return LK_EINVAL;
}
