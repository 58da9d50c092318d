/* SPDX-License-Identifier: MIT */
/* writes.c: write transactions on the single writer connection. */
#include "store_impl.h"

#include <linkd/error.h>

#include <stdlib.h>
#include <string.h>

static int exec_simple(store_conn *c, const char *sql) {
  int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
  return rc == SQLITE_OK ? LK_OK : (store_err(rc) == LK_OK ? LK_EIO : store_err(rc));
}

/* Steps a prepared statement without result rows (transaction control). */
static int run_stmt(store_conn *c, st_id id) {
  sqlite3_stmt *st = store_stmt(c, id);
  if (!st)
    return LK_EIO;
  int r = sqlite3_step(st);
  sqlite3_reset(st);
  return r == SQLITE_DONE ? LK_OK : (store_err(r) == LK_OK ? LK_EIO : store_err(r));
}

/* Adds a finished write's or group's counts to the commit statistics. Called with wmu held, so
 * by one thread at a time: the loads and stores need no read-modify-write. writes and largest go
 * first and commits last (release), so that sq_commit_stats_get, which loads commits first
 * (acquire), sees at least as many writes as commits. */
static void stats_publish(sq_store *s, int64_t writes, int64_t commits) {
  atomic_store_explicit(&s->n_writes,
                        atomic_load_explicit(&s->n_writes, memory_order_relaxed) + writes,
                        memory_order_relaxed);
  if (writes > atomic_load_explicit(&s->n_largest, memory_order_relaxed))
    atomic_store_explicit(&s->n_largest, writes, memory_order_relaxed);
  atomic_store_explicit(&s->n_commits,
                        atomic_load_explicit(&s->n_commits, memory_order_relaxed) + commits,
                        memory_order_release);
}

/* One write in its own transaction: the path without group commit. Called with wmu held. */
static int write_alone(sq_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg) {
  const lk_clock *clk = s->cfg.clock;
  store_conn *c = s->writer;
  int64_t commits = 0;
  c->deadline = dl.at;
  int rc = exec_simple(c, "BEGIN IMMEDIATE");
  if (rc == LK_OK) {
    sq_tx tx = {{&sq_ops}, s, c};
    rc = fn(&tx.base, arg);
    /* The last check before the effect becomes visible: past the deadline the caller has
     * given up, so nothing may be applied on its behalf. */
    if (rc == LK_OK && lk_deadline_expired(dl, clk->now(clk)))
      rc = LK_EDEADLINE;
    if (rc == LK_OK) {
      /* COMMIT must not be interrupted half-way through by the progress handler. */
      c->deadline = LK_DEADLINE_NONE;
      rc = exec_simple(c, "COMMIT");
      commits = 1;
    }
    if (rc != LK_OK && !sqlite3_get_autocommit(c->db)) {
      c->deadline = LK_DEADLINE_NONE;
      sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
    }
  }
  c->deadline = LK_DEADLINE_NONE;
  stats_publish(s, 1, commits);
  return rc;
}

/* Runs the members of one group in one transaction, each in a savepoint, and commits once.
 * Called with wmu held; sets every member's rc. */
static void write_group(sq_store *s, gc_member *first) {
  const lk_clock *clk = s->cfg.clock;
  store_conn *c = s->writer;
  sq_tx tx = {{&sq_ops}, s, c};
  /* Never armed inside a group: an interrupted INSERT or UPDATE rolls back the whole
   * transaction, neighbours included. A member touches a few rows by key, so it cannot run
   * long; its deadline is checked before and after it instead. */
  c->deadline = LK_DEADLINE_NONE;
  gc_member *m = first;
  int64_t members = 0, commits = 0;
  while (m) {
    gc_member *tx_first = m; /* members [tx_first, m) are in the open transaction */
    int64_t applied = 0;
    int rc = run_stmt(c, ST_BEGIN);
    if (rc != LK_OK) {
      /* Another process holds the file past busy_timeout: nobody in the group can write. */
      for (; m; m = m->next, members++)
        m->rc = rc;
      break;
    }
    bool lost = false; /* SQLite rolled the transaction back on its own */
    for (; m; m = m->next) {
      members++;
      if (lk_deadline_expired(m->dl, clk->now(clk))) {
        m->rc = LK_EDEADLINE;
        continue;
      }
      rc = run_stmt(c, ST_SAVEPOINT);
      if (rc == LK_OK)
        rc = m->fn(&tx.base, m->arg);
      if (rc == LK_OK && lk_deadline_expired(m->dl, clk->now(clk)))
        rc = LK_EDEADLINE;
      if (sqlite3_get_autocommit(c->db)) {
        /* An I/O error, a full disk or no memory can end the transaction itself: the members
         * released before this one went with it and failed as well (nothing applied). */
        for (gc_member *g = tx_first; g != m; g = g->next)
          if (g->rc == LK_OK)
            g->rc = rc == LK_OK ? LK_EIO : rc;
        m->rc = rc == LK_OK ? LK_EIO : rc;
        m = m->next;
        lost = true;
        break;
      }
      if (rc != LK_OK)
        run_stmt(c, ST_ROLLBACK_TO);
      /* RELEASE after ROLLBACK TO drops the savepoint; after success it keeps the changes. */
      int rr = run_stmt(c, ST_RELEASE);
      if (rc == LK_OK && rr != LK_OK)
        rc = rr;
      m->rc = rc;
      if (rc == LK_OK)
        applied++;
    }
    if (lost)
      continue; /* the rest of the group gets a new transaction */
    int crc = LK_OK;
    if (applied > 0) {
      crc = run_stmt(c, ST_COMMIT);
      commits++;
    } else {
      run_stmt(c, ST_ROLLBACK); /* nothing to make durable */
    }
    if (crc != LK_OK) {
      if (!sqlite3_get_autocommit(c->db))
        run_stmt(c, ST_ROLLBACK);
      for (gc_member *g = tx_first; g != m; g = g->next)
        if (g->rc == LK_OK)
          g->rc = crc;
    }
  }
  stats_publish(s, members, commits);
}

#define GC_GROUP_MAX 256 /* members per transaction: bounds the time a group holds the writer */

/* Commits groups from the head of the queue; called with gmu held and `leading` set, returns with
 * gmu held and `leading` clear. me is the calling waiter's member (NULL for an asynchronous
 * write's caller). Leadership passes to a waiter at the head of the queue (woken to lead, as its
 * thread is idle anyway) and stays here while the head is asynchronous: nobody waits for those,
 * so nobody else would commit them. */
static void lead(sq_store *s, gc_member *me) {
  for (;;) {
    gc_member *batch = s->gq_head, *last = batch;
    for (int n = 1; n < GC_GROUP_MAX && last->next; n++)
      last = last->next;
    s->gq_head = last->next;
    if (!s->gq_head)
      s->gq_tail = NULL;
    last->next = NULL;
    pthread_mutex_unlock(&s->gmu);

    pthread_mutex_lock(&s->wmu);
    write_group(s, batch);
    pthread_mutex_unlock(&s->wmu);

    /* The COMMIT has returned: asynchronous members complete here, outside both locks (their
     * callbacks take locks of their own), without a thread hand-off each. The waiters are
     * collected for gmu; nothing but this thread reads `next` of a batch's members. */
    gc_member *waiting = NULL, **tail = &waiting;
    for (gc_member *g = batch, *n; g; g = n) {
      n = g->next;
      if (g->on_done) {
        g->on_done(g->done_arg, g->rc);
        free(g);
      } else {
        *tail = g;
        tail = &g->next;
      }
    }
    *tail = NULL;

    pthread_mutex_lock(&s->gmu);
    /* A waiter returns (and its frame vanishes) once it sees done, which needs gmu, held here
     * until the loop ends: read next before marking, signal after. */
    for (gc_member *g = waiting, *n; g; g = n) {
      /* g is never NULL here; me is, for an asynchronous leader (cppcheck reads the comparison
       * as a null check of g) */
      /* cppcheck-suppress nullPointerRedundantCheck */
      n = g->next;
      /* cppcheck-suppress nullPointerRedundantCheck */
      g->done = true;
      if (g != me)
        pthread_cond_signal(&g->cv);
    }
    if (!s->gq_head)
      break;
    if (!s->gq_head->on_done) {
      pthread_cond_signal(&s->gq_head->cv); /* the next group's leader */
      break;
    }
  }
  s->leading = false;
}

int sq_write(sq_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg) {
  const lk_clock *clk = s->cfg.clock;
  if (lk_deadline_expired(dl, clk->now(clk)))
    return LK_EDEADLINE;
  if (!s->cfg.group_commit) {
    pthread_mutex_lock(&s->wmu);
    int rc = write_alone(s, dl, fn, arg);
    pthread_mutex_unlock(&s->wmu);
    return rc;
  }
  /* Leader and followers: a write that finds no group running and is first in the queue runs
   * the queue itself; the others wait, so the writes arriving during a COMMIT's fsync form the
   * next group. No timer: a group is whatever queued up meanwhile, so a lone write is not
   * delayed. Each waiter has its own condition variable and is woken only when it is done or
   * is to lead, not by every group that finishes. */
  gc_member me = {fn, arg, dl, LK_OK, false, PTHREAD_COND_INITIALIZER, NULL, NULL, NULL};
  pthread_mutex_lock(&s->gmu);
  /* `me` lives on this stack while queued: the leader takes it off the queue and marks it done
   * under gmu before this function can return */
  if (s->gq_tail)
    s->gq_tail->next = &me;
  else
    s->gq_head = &me; /* cppcheck-suppress autoVariables */
  s->gq_tail = &me;   /* cppcheck-suppress autoVariables */
  while (!me.done) {
    /* Not leading: the queue is empty or its head is a waiter woken to lead. */
    if (s->leading || s->gq_head != &me) {
      pthread_cond_wait(&me.cv, &s->gmu);
      continue;
    }
    s->leading = true;
    lead(s, &me); /* me is in its first group */
  }
  pthread_mutex_unlock(&s->gmu);
  pthread_cond_destroy(&me.cv);
  return me.rc;
}

void sq_write_async(sq_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg,
                    lk_store_done_fn done, void *done_arg) {
  const lk_clock *clk = s->cfg.clock;
  if (!s->cfg.group_commit || lk_deadline_expired(dl, clk->now(clk))) {
    done(done_arg, sq_write(s, dl, fn, arg));
    return;
  }
  gc_member *m = malloc(sizeof *m);
  if (!m) {
    done(done_arg, LK_ENOMEM);
    return;
  }
  *m = (gc_member){fn, arg, dl, LK_OK, false, PTHREAD_COND_INITIALIZER, done, done_arg, NULL};
  pthread_mutex_lock(&s->gmu);
  if (s->gq_tail)
    s->gq_tail->next = m;
  else
    s->gq_head = m;
  s->gq_tail = m;
  if (!s->leading) {
    s->leading = true;
    lead(s, NULL);
  }
  pthread_mutex_unlock(&s->gmu);
}

bool sq_write_join(sq_store *s, lk_deadline dl, lk_store_tx_fn fn, void *arg, lk_store_done_fn done,
                   void *done_arg) {
  if (!s->cfg.group_commit)
    return false;
  gc_member *m = malloc(sizeof *m);
  if (!m)
    return false;
  *m = (gc_member){fn, arg, dl, LK_OK, false, PTHREAD_COND_INITIALIZER, done, done_arg, NULL};
  pthread_mutex_lock(&s->gmu);
  /* `leading` is cleared under gmu only once the queue is empty or its head is a waiter woken
   * to lead, so a write queued while it is set is committed by this leader or the next. */
  bool joined = s->leading;
  if (joined) {
    if (s->gq_tail)
      s->gq_tail->next = m;
    else
      s->gq_head = m;
    s->gq_tail = m;
  }
  pthread_mutex_unlock(&s->gmu);
  if (!joined)
    free(m);
  return joined;
}

size_t sq_queued(sq_store *s) {
  pthread_mutex_lock(&s->gmu);
  size_t n = 0;
  for (const gc_member *m = s->gq_head; m; m = m->next)
    n++;
  pthread_mutex_unlock(&s->gmu);
  return n;
}

/* Never takes wmu: a caller (GET /metrics, /admin/stats) must not wait for a COMMIT's fsync or
 * a long group. commits first: see stats_publish. */
void sq_commit_stats_get(sq_store *s, lk_store_commit_stats *out) {
  out->commits = atomic_load_explicit(&s->n_commits, memory_order_acquire);
  out->writes = atomic_load_explicit(&s->n_writes, memory_order_relaxed);
  out->largest = atomic_load_explicit(&s->n_largest, memory_order_relaxed);
}

int sq_tx_book_get(sq_tx *tx, int64_t id, lk_book *out) {
  sqlite3_stmt *st = store_stmt(tx->c, ST_BOOK_GET);
  if (!st)
    return LK_EIO;
  sqlite3_bind_int64(st, 1, id);
  int r = sqlite3_step(st);
  int rc;
  if (r == SQLITE_ROW) {
    out->id = sqlite3_column_int64(st, 0);
    store_col_text(st, 1, out->title, sizeof out->title);
    store_col_text(st, 2, out->author, sizeof out->author);
    out->has_year = sqlite3_column_type(st, 3) != SQLITE_NULL;
    out->year = out->has_year ? sqlite3_column_int64(st, 3) : 0;
    store_col_text(st, 4, out->isbn, sizeof out->isbn);
    out->stock = sqlite3_column_int64(st, 5);
    rc = LK_OK;
  } else {
    rc = r == SQLITE_DONE ? LK_ENOTFOUND : store_err(r);
  }
  sqlite3_reset(st);
  return rc;
}

static void bind_book(sqlite3_stmt *st, int first, const lk_book *b) {
  sqlite3_bind_text(st, first, b->title, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, first + 1, b->author, -1, SQLITE_STATIC);
  if (b->has_year)
    sqlite3_bind_int64(st, first + 2, b->year);
  else
    sqlite3_bind_null(st, first + 2);
  if (b->isbn[0])
    sqlite3_bind_text(st, first + 3, b->isbn, -1, SQLITE_STATIC);
  else
    sqlite3_bind_null(st, first + 3);
  sqlite3_bind_int64(st, first + 4, b->stock);
}

static int step_done(sqlite3_stmt *st) {
  int r = sqlite3_step(st);
  sqlite3_reset(st);
  return r == SQLITE_DONE ? LK_OK : (store_err(r) == LK_OK ? LK_EIO : store_err(r));
}

int sq_tx_book_create(sq_tx *tx, const lk_book *in, int64_t *id) {
  sqlite3_stmt *st = store_stmt(tx->c, ST_BOOK_INSERT);
  if (!st)
    return LK_EIO;
  bind_book(st, 1, in);
  sqlite3_bind_int64(st, 6, lk_wall_ns());
  int rc = step_done(st);
  if (rc == LK_OK)
    *id = sqlite3_last_insert_rowid(tx->c->db);
  return rc;
}

int sq_tx_book_update(sq_tx *tx, const lk_book *in) {
  sqlite3_stmt *st = store_stmt(tx->c, ST_BOOK_UPDATE);
  if (!st)
    return LK_EIO;
  sqlite3_bind_int64(st, 1, in->id);
  bind_book(st, 2, in);
  sqlite3_bind_int64(st, 7, lk_wall_ns());
  int rc = step_done(st);
  if (rc == LK_OK && sqlite3_changes(tx->c->db) == 0)
    rc = LK_ENOTFOUND;
  return rc;
}

int sq_tx_book_delete(sq_tx *tx, int64_t id) {
  sqlite3_stmt *st = store_stmt(tx->c, ST_BOOK_DELETE);
  if (!st)
    return LK_EIO;
  sqlite3_bind_int64(st, 1, id);
  int rc = step_done(st);
  if (rc == LK_OK && sqlite3_changes(tx->c->db) == 0)
    rc = LK_ENOTFOUND;
  return rc;
}

static void bind_opt_text(sqlite3_stmt *st, int i, const char *v) {
  if (v && *v)
    sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
  else
    sqlite3_bind_null(st, i);
}

int sq_tx_loan_create(sq_tx *tx, lk_loan *loan) {
  int64_t now = lk_wall_ns();
  sqlite3_stmt *st = store_stmt(tx->c, ST_STOCK_TAKE);
  if (!st)
    return LK_EIO;
  sqlite3_bind_int64(st, 1, loan->book_id);
  sqlite3_bind_int64(st, 2, now);
  int r = sqlite3_step(st);
  int64_t stock = r == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
  if (r == SQLITE_ROW)
    r = sqlite3_step(st); /* RETURNING: run the statement to completion */
  sqlite3_reset(st);
  if (r != SQLITE_DONE)
    return store_err(r) == LK_OK ? LK_EIO : store_err(r);
  if (stock < 0) {
    /* No row changed: either the book is missing or it has no copy left. */
    lk_book b;
    int rc = sq_tx_book_get(tx, loan->book_id, &b);
    return rc == LK_OK ? LK_ECONFLICT : rc;
  }
  st = store_stmt(tx->c, ST_LOAN_INSERT);
  if (!st)
    return LK_EIO;
  sqlite3_bind_int64(st, 1, loan->book_id);
  sqlite3_bind_text(st, 2, loan->tenant, -1, SQLITE_STATIC);
  bind_opt_text(st, 3, loan->borrower);
  bind_opt_text(st, 4, loan->idem_key);
  bind_opt_text(st, 5, loan->request_id);
  sqlite3_bind_int64(st, 6, now);
  sqlite3_bind_int64(st, 7, stock);
  int rc = step_done(st);
  if (rc != LK_OK)
    return rc;
  loan->id = sqlite3_last_insert_rowid(tx->c->db);
  loan->stock_after = stock;
  loan->created_wall_ns = now;
  return LK_OK;
}

int sq_tx_idem_put(sq_tx *tx, const char *tenant, const char *key, const lk_idem_record *rec,
                   int64_t min_created_wall_ns) {
  sqlite3_stmt *st = store_stmt(tx->c, ST_IDEM_DELETE_EXPIRED);
  if (!st)
    return LK_EIO;
  sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 3, min_created_wall_ns);
  int rc = step_done(st);
  if (rc != LK_OK)
    return rc;
  st = store_stmt(tx->c, ST_IDEM_INSERT);
  if (!st)
    return LK_EIO;
  sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
  sqlite3_bind_blob(st, 3, rec->fingerprint, (int)sizeof rec->fingerprint, SQLITE_STATIC);
  sqlite3_bind_int(st, 4, rec->status);
  sqlite3_bind_text(st, 5, rec->headers ? rec->headers : "", -1, SQLITE_STATIC);
  sqlite3_bind_blob(st, 6, rec->body ? (const void *)rec->body : "", (int)rec->body_len,
                    SQLITE_STATIC);
  sqlite3_bind_int64(st, 7, rec->created_wall_ns);
  return step_done(st); /* a live record violates the primary key: LK_ECONFLICT */
}

int sq_idem_purge(sq_store *s, int64_t before_wall_ns, int64_t *deleted) {
  int64_t total = 0;
  int rc = LK_OK;
  for (;;) {
    pthread_mutex_lock(&s->wmu);
    sqlite3_stmt *st;
    int n = 0;
    /* Small batches keep the writer lock short while a large backlog expires. */
    if (sqlite3_prepare_v2(s->writer->db,
                           "DELETE FROM idem WHERE (tenant, key) IN (SELECT tenant, key "
                           "FROM idem WHERE created_ns < ?1 LIMIT 500)",
                           -1, &st, NULL) != SQLITE_OK) {
      pthread_mutex_unlock(&s->wmu);
      rc = LK_EIO;
      break;
    }
    sqlite3_bind_int64(st, 1, before_wall_ns);
    int r = sqlite3_step(st);
    if (r == SQLITE_DONE)
      n = sqlite3_changes(s->writer->db);
    else
      rc = store_err(r) == LK_OK ? LK_EIO : store_err(r);
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->wmu);
    total += n;
    if (rc != LK_OK || n < 500)
      break;
  }
  if (deleted)
    *deleted = total;
  return rc;
}
