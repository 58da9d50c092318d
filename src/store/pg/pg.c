/* SPDX-License-Identifier: MIT */
/* pg.c: the PostgreSQL store on libpq. A bounded pool of connections serves reads and writes;
 * every statement is sent asynchronously and waited for with poll(2) up to the caller's
 * deadline (statement_timeout_ns without one), then cancelled (PQcancel, on a thread of its
 * own) and its answer waited for at most CANCEL_GRACE_NS more, after which the connection is
 * given up: a slow or hung database (its backend or postmaster stopped) never holds a request
 * past that. A connection that broke is dropped when it comes back to the pool and a new one is
 * opened on the next use: libraryd reconnects by itself after a database restart, and until
 * then every call fails fast with LK_EAGAIN (503 + Retry-After to the client).
 *
 * Transactions run at READ COMMITTED (docs/libraryd.md, "Many instances on PostgreSQL"): the
 * idempotency record's primary key (tenant, key) makes a second application of one key fail
 * inside the transaction that attempts it, and the stock decrement is a conditional UPDATE that
 * PostgreSQL re-evaluates on the newest row version, so no stronger isolation is needed and no
 * transaction has to be retried for a serialization failure. */
#include "../store_backend.h"
#include "core/sat.h"

#include <linkd/error.h>

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* How long a call with no deadline waits for a free connection before LK_EAGAIN. */
#define POOL_WAIT_NS (5 * LK_NS_PER_S)
#define PURGE_BATCH 500 /* rows per purge statement (the SQL repeats it) */
/* After a deadline, how long the server may take to answer the cancel before the connection is
 * given up (closed; the next use opens a new one). */
#define CANCEL_GRACE_NS (1 * LK_NS_PER_S)
/* Cancel requests in flight at once, each on a thread of its own: beyond it none is sent (the
 * connection is given up after the grace all the same). Process-wide, as threads are. */
#define CANCELS_MAX 4
static atomic_int cancels_in_flight;

typedef struct pg_conn {
  PGconn *c;
  struct pg_conn *next;
} pg_conn;

typedef struct pg_store {
  lk_store base; /* first: the interface's view of it */
  lk_store_config cfg;
  char *url;
  int opened_version;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* a connection came back, or a slot freed */
  pg_conn *idle;
  unsigned open_n; /* connections open or being opened, idle ones included */
} pg_store;

typedef struct pg_tx {
  lk_store_tx base; /* first: the interface's view of it */
  pg_store *s;
  pg_conn *pc;
  lk_deadline dl;
  bool begun; /* BEGIN has been sent (with the first statement) */
  /* The key's record, sent with COMMIT (lk_store_tx_idem_put); copies, owned here. */
  bool has_idem;
  char *idem_tenant, *idem_key, *idem_headers;
  uint8_t *idem_body;
  size_t idem_body_len;
  uint8_t idem_fp[32];
  int idem_status;
  int64_t idem_created, idem_min_created;
} pg_tx;

static const lk_store_ops pg_ops;

static int64_t now_ns(const pg_store *s) { return s->cfg.clock->now(s->cfg.clock); }

static void set_err(char *errbuf, size_t errcap, const char *what, const char *msg) {
  if (!errbuf || !errcap)
    return;
  size_t n = strlen(msg);
  while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
    n--; /* libpq's messages end in a newline */
  snprintf(errbuf, errcap, "%s: %.*s", what, (int)n, msg);
}

/* --- connections ---------------------------------------------------------------------------- */

/* The longest a connection attempt may take when the caller's deadline is further away. */
#define CONNECT_TIMEOUT_NS (2 * LK_NS_PER_S)

/* Opens a connection without blocking past `deadline` (nor CONNECT_TIMEOUT_NS): libpq's
 * non-blocking connect, driven with poll(2), so a database host that does not answer at all
 * holds a request no longer than the request allows. */
static PGconn *connect_one(const pg_store *s, int64_t deadline, char *errbuf, size_t errcap) {
  int64_t t = now_ns(s);
  int64_t until = t > INT64_MAX - CONNECT_TIMEOUT_NS ? INT64_MAX : t + CONNECT_TIMEOUT_NS;
  if (deadline < until)
    until = deadline;
  /* dbname with expand_dbname takes the whole URL or key=value string; the keys after it only
   * fill in what the caller left out. */
  const char *const keys[] = {"dbname", "application_name", NULL};
  const char *const vals[] = {s->url, "libraryd", NULL};
  PGconn *c = PQconnectStartParams(keys, vals, 1);
  if (!c) {
    set_err(errbuf, errcap, "postgres", "out of memory");
    return NULL;
  }
  PostgresPollingStatusType st = PGRES_POLLING_WRITING;
  while (PQstatus(c) != CONNECTION_BAD && st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED) {
    int64_t left = until - now_ns(s);
    if (left <= 0) {
      set_err(errbuf, errcap, "postgres", "no answer within the connect timeout");
      PQfinish(c);
      return NULL;
    }
    struct pollfd p = {.fd = PQsocket(c), .events = st == PGRES_POLLING_READING ? POLLIN : POLLOUT};
    int ms = (int)(left / LK_NS_PER_MS > 1000 ? 1000 : left / LK_NS_PER_MS + 1);
    int n = p.fd < 0 ? -1 : poll(&p, 1, ms);
    if (n < 0 && (p.fd < 0 || errno != EINTR))
      break;
    if (n > 0)
      st = PQconnectPoll(c);
  }
  if (PQstatus(c) != CONNECTION_OK) {
    set_err(errbuf, errcap, "postgres", PQerrorMessage(c));
    PQfinish(c);
    return NULL;
  }
  return c;
}

/* An idle connection receives nothing (libraryd uses no LISTEN); anything readable on it is the
 * server closing it (a restart, or an administrator's pg_terminate_backend), so it is dropped
 * here rather than failing the request that would have used it. */
static bool idle_conn_ok(PGconn *c) {
  struct pollfd p = {.fd = PQsocket(c), .events = POLLIN};
  return p.fd >= 0 && poll(&p, 1, 0) == 0;
}

static int prepare_all(const pg_store *s, PGconn *c, int64_t deadline);

/* A connection from the pool, opened when none is idle and the pool has room; waits for one
 * up to the deadline (POOL_WAIT_NS without one). NULL with *rc = LK_EAGAIN (the database is
 * unreachable, or no connection came free) or LK_EDEADLINE. */
static pg_conn *conn_get(pg_store *s, lk_deadline dl, int *rc) {
  int64_t until = dl.at;
  if (until == LK_DEADLINE_NONE) {
    int64_t t = now_ns(s);
    until = t > INT64_MAX - POOL_WAIT_NS ? INT64_MAX : t + POOL_WAIT_NS;
  }
  pthread_mutex_lock(&s->mu);
  for (;;) {
    pg_conn *pc = s->idle;
    if (pc) {
      s->idle = pc->next;
      if (idle_conn_ok(pc->c)) {
        pthread_mutex_unlock(&s->mu);
        return pc;
      }
      s->open_n--;
      PQfinish(pc->c);
      free(pc);
      continue;
    }
    if (s->open_n < s->cfg.pool_size) {
      s->open_n++;
      pthread_mutex_unlock(&s->mu);
      pc = calloc(1, sizeof *pc);
      if (pc)
        pc->c = connect_one(s, dl.at, NULL, 0);
      /* Preparing is part of opening: bounded like the connect when the call has no deadline. */
      int64_t t = now_ns(s);
      int64_t prep_until = t > INT64_MAX - CONNECT_TIMEOUT_NS ? INT64_MAX : t + CONNECT_TIMEOUT_NS;
      if (dl.at < prep_until)
        prep_until = dl.at;
      if (pc && pc->c && prepare_all(s, pc->c, prep_until) == LK_OK)
        return pc;
      if (pc)
        PQfinish(pc->c);
      free(pc);
      pthread_mutex_lock(&s->mu);
      s->open_n--;
      pthread_cond_signal(&s->cv);
      pthread_mutex_unlock(&s->mu);
      /* Out of time while connecting is the caller's deadline; anything else, unavailable. */
      *rc = lk_deadline_expired(dl, now_ns(s)) ? LK_EDEADLINE : LK_EAGAIN;
      return NULL;
    }
    int64_t left = until - now_ns(s);
    if (left <= 0) {
      pthread_mutex_unlock(&s->mu);
      *rc = dl.at == LK_DEADLINE_NONE ? LK_EAGAIN : LK_EDEADLINE;
      return NULL;
    }
    /* The deadline is on the store's clock, the condition variable on the real-time one: wait
     * in short slices and look at the store's clock again after each. */
    int64_t slice = left < 10 * LK_NS_PER_MS ? left : 10 * LK_NS_PER_MS;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t nsec = ts.tv_nsec + slice;
    ts.tv_sec += nsec / LK_NS_PER_S;
    ts.tv_nsec = nsec % LK_NS_PER_S;
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
  }
}

static void conn_put(pg_store *s, pg_conn *pc) {
  if (!pc)
    return;
  bool broken = PQstatus(pc->c) != CONNECTION_OK || PQtransactionStatus(pc->c) != PQTRANS_IDLE;
  if (broken) {
    PQfinish(pc->c);
    free(pc);
  }
  pthread_mutex_lock(&s->mu);
  if (broken) {
    s->open_n--;
  } else {
    pc->next = s->idle;
    s->idle = pc;
  }
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

#define BOOK_COLS "id, title, author, year, isbn, stock"

/* Taken, or taken over from a holder that is gone: its lease ended (it ran past the longest time
 * it may run), or the database connection it claimed on has closed (its process died: the
 * backend with that pid is no longer there, or is a newer one). The database's clock decides, so
 * instances' clocks need not agree. $1 tenant, $2 key, $3 owner, $4 lease in microseconds. */
#define CLAIM_CONFLICT                                                                             \
  "ON CONFLICT (tenant, key) DO UPDATE SET owner = EXCLUDED.owner, pid = EXCLUDED.pid, "           \
  "claimed_at = EXCLUDED.claimed_at, expires_at = EXCLUDED.expires_at "                            \
  "WHERE idem_claims.expires_at < clock_timestamp() OR NOT EXISTS "                                \
  "(SELECT 1 FROM pg_stat_activity a WHERE a.pid = idem_claims.pid "                               \
  "AND a.backend_start <= idem_claims.claimed_at) RETURNING 1"
#define CLAIM_ROW                                                                                  \
  "$1::text, $2::text, $3::bigint, pg_backend_pid(), clock_timestamp(), "                          \
  "clock_timestamp() + $4::bigint * interval '1 microsecond'"

/* The statements of the keyed write path, prepared on every connection as it opens (one round
 * trip, see prepare_all) and then sent by name: PostgreSQL parses and plans them once per
 * connection instead of once per request, which matters most for the lookup-and-claim, whose
 * ON CONFLICT clause plans a view (pg_stat_activity) on every execution otherwise. A connection
 * pooler in front of PostgreSQL must therefore keep sessions (pgbouncer's session mode). */
enum { PS_LOOKUP_CLAIM, PS_LOAN, PS_UNCLAIM, PS_IDEM_PUT, PS_BOOK_GET, PS_RELEASE, PS_N };
static const char *const ps_name[PS_N] = {"lk_lookup_claim", "lk_loan",     "lk_unclaim",
                                          "lk_idem_put",     "lk_book_get", "lk_release"};
static const char *const ps_sql[PS_N] = {
    /* $1 tenant, $2 key, $3 owner, $4 lease in microseconds, $5 oldest live created_ns */
    [PS_LOOKUP_CLAIM] =
        "WITH rec AS (SELECT fingerprint, status, headers, body, created_ns FROM idem "
        "WHERE tenant = $1 AND key = $2 AND created_ns >= $5::bigint), "
        "cl AS (INSERT INTO idem_claims(tenant, key, owner, pid, claimed_at, expires_at) "
        "SELECT " CLAIM_ROW " WHERE NOT EXISTS (SELECT 1 FROM rec) " CLAIM_CONFLICT ") "
        "SELECT rec.fingerprint, rec.status, rec.headers, rec.body, rec.created_ns, "
        "(SELECT COUNT(*) FROM cl) FROM (VALUES (1)) one LEFT JOIN rec ON true",
    /* $1 book, $2 tenant, $3 borrower, $4 key, $5 request id, $6 now */
    [PS_LOAN] = "WITH taken AS (UPDATE books SET stock = stock - 1, updated_ns = $6 "
                "WHERE id = $1 AND stock > 0 RETURNING stock) "
                "INSERT INTO loans(book_id, tenant, borrower, idem_key, request_id, "
                "created_ns, stock_after) SELECT $1, $2, $3, $4, $5, $6, stock FROM taken "
                "RETURNING id, stock_after",
    /* $1 tenant, $2 key, $3 oldest live created_ns */
    [PS_UNCLAIM] = "WITH unclaim AS (DELETE FROM idem_claims WHERE tenant = $1 AND key = $2) "
                   "DELETE FROM idem WHERE tenant = $1 AND key = $2 AND created_ns < $3",
    [PS_IDEM_PUT] = "INSERT INTO idem(tenant, key, fingerprint, status, headers, body, created_ns) "
                    "VALUES($1, $2, $3, $4, $5, $6, $7)",
    [PS_BOOK_GET] = "SELECT " BOOK_COLS " FROM books WHERE id = $1",
    /* $1 tenant, $2 key, $3 owner */
    [PS_RELEASE] = "DELETE FROM idem_claims WHERE tenant = $1 AND key = $2 AND owner = $3",
};

/* Sends one statement: by name when it is one of ps_sql (the same pointer), else with its text. */
static int send_stmt(PGconn *c, const char *sql, int n, const char *const *vals, const int *lens,
                     const int *fmts) {
  for (int i = 0; i < PS_N; i++)
    if (sql == ps_sql[i])
      return PQsendQueryPrepared(c, ps_name[i], n, vals, lens, fmts, 0);
  return PQsendQueryParams(c, sql, n, NULL, vals, lens, fmts, 0);
}

/* --- statements ----------------------------------------------------------------------------- */

/* Maps a failed result (or a connection failure) to an lk_err. */
static int pg_err(PGconn *c, const PGresult *r) {
  if (PQstatus(c) != CONNECTION_OK)
    return LK_EAGAIN;
  const char *st = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
  if (!st)
    return LK_EIO;
  if (!strcmp(st, "23505") || !strcmp(st, "23514"))
    return LK_ECONFLICT; /* unique_violation, check_violation */
  if (!strcmp(st, "57014"))
    return LK_EDEADLINE; /* query_canceled: ours, at the deadline */
  if (!strncmp(st, "08", 2) || !strncmp(st, "57P", 3) || !strcmp(st, "40001") ||
      !strcmp(st, "40P01") || !strcmp(st, "53300"))
    return LK_EAGAIN; /* connection, shutdown, serialization, deadlock, too many connections */
  return LK_EIO;
}

static void *cancel_main(void *arg) {
  PGcancel *cn = arg;
  char eb[128];
  PQcancel(cn, eb, sizeof eb);
  PQfreeCancel(cn);
  atomic_fetch_sub(&cancels_in_flight, 1);
  return NULL;
}

/* Asks the server to cancel c's statement without waiting: PQcancel connects to the server and
 * waits for it to close that connection, with no timeout of its own, so a stopped server would
 * hold the caller for as long as it is stopped. */
static void cancel_async(PGconn *c) {
  if (atomic_fetch_add(&cancels_in_flight, 1) >= CANCELS_MAX) {
    atomic_fetch_sub(&cancels_in_flight, 1);
    return;
  }
  PGcancel *cn = PQgetCancel(c);
  pthread_attr_t a;
  pthread_t th;
  bool started = false;
  if (cn && pthread_attr_init(&a) == 0) {
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    started = pthread_create(&th, &a, cancel_main, cn) == 0;
    pthread_attr_destroy(&a);
  }
  if (!started) {
    PQfreeCancel(cn);
    atomic_fetch_sub(&cancels_in_flight, 1);
  }
}

/* Gives up a connection whose server does not answer: shut down, so that libpq reads its end
 * (CONNECTION_BAD) and conn_put drops it; the descriptor stays libpq's, closed by PQfinish. */
static void abandon(PGconn *c) {
  int fd = PQsocket(c);
  if (fd >= 0)
    shutdown(fd, SHUT_RDWR);
  PQconsumeInput(c);
}

/* A call without a deadline gets statement_timeout_ns for its statement: true when that bound
 * (not the caller's deadline) is what *deadline now holds. */
static bool cap_deadline(const pg_store *s, int64_t *deadline) {
  if (*deadline != LK_DEADLINE_NONE || s->cfg.statement_timeout_ns <= 0)
    return false;
  *deadline = lk_sat_add(now_ns(s), s->cfg.statement_timeout_ns);
  return true;
}

/* Waits until the connection's result is complete or the deadline passes. */
static int wait_result(const pg_store *s, PGconn *c, int64_t deadline) {
  while (PQisBusy(c)) {
    int ms = -1;
    if (deadline != LK_DEADLINE_NONE) {
      int64_t left = deadline - now_ns(s);
      if (left <= 0)
        return LK_EDEADLINE;
      ms = (int)(left / LK_NS_PER_MS > 1000 ? 1000 : left / LK_NS_PER_MS + 1);
    }
    struct pollfd p = {.fd = PQsocket(c), .events = POLLIN};
    if (p.fd < 0)
      return LK_EAGAIN;
    int n = poll(&p, 1, ms);
    if (n < 0 && errno != EINTR)
      return LK_EIO;
    if (n > 0 && !PQconsumeInput(c))
      return LK_EAGAIN;
  }
  return LK_OK;
}

/* Runs one statement with text parameters (a NULL value is SQL NULL; lens/fmts may be NULL for
 * all-text) and returns its result, or NULL with *rc set. The result's status is checked: OK
 * for commands and rows alike. */
static PGresult *run(const pg_store *s, PGconn *c, int64_t deadline, const char *sql, int n,
                     const char *const *vals, const int *lens, const int *fmts, int *rc) {
  bool capped = cap_deadline(s, &deadline);
  if (!send_stmt(c, sql, n, vals, lens, fmts)) {
    *rc = pg_err(c, NULL);
    return NULL;
  }
  int w = wait_result(s, c, deadline);
  if (w == LK_EDEADLINE) {
    /* Cancel, then read what the server answers (an error, or the result if it won the race):
     * the connection stays usable. No answer within the grace: the connection is given up. */
    cancel_async(c);
    int g = wait_result(s, c, now_ns(s) + CANCEL_GRACE_NS);
    if (g == LK_EDEADLINE)
      abandon(c);
    w = g == LK_OK || g == LK_EDEADLINE ? LK_EDEADLINE : LK_EAGAIN;
    if (capped && w == LK_EDEADLINE)
      w = LK_EAGAIN; /* not the caller's deadline: the database did not answer in time */
  }
  PGresult *last = NULL;
  PGresult *r;
  while ((r = PQgetResult(c)) != NULL) {
    PQclear(last);
    last = r;
  }
  if (w != LK_OK) {
    PQclear(last);
    *rc = w;
    return NULL;
  }
  ExecStatusType es = last ? PQresultStatus(last) : PGRES_FATAL_ERROR;
  if (es != PGRES_COMMAND_OK && es != PGRES_TUPLES_OK) {
    *rc = pg_err(c, last);
    PQclear(last);
    return NULL;
  }
  *rc = LK_OK;
  return last;
}

/* A statement whose result is not needed. */
static int run_cmd(const pg_store *s, PGconn *c, int64_t deadline, const char *sql, int n,
                   const char *const *vals) {
  int rc;
  PQclear(run(s, c, deadline, sql, n, vals, NULL, NULL, &rc));
  return rc;
}

/* One statement of a pipeline. */
typedef struct stmt {
  const char *sql;
  int n;
  const char *const *vals;
  const int *lens, *fmts;
} stmt;

/* Sends the statements in one pipeline (one round trip) and returns the last one's result, or
 * NULL with *rc set from the first that failed (the ones after it are skipped by the server).
 * Used where a transaction's statements need not wait for each other's answers: BEGIN with the
 * first statement, the key's record with COMMIT. */
static PGresult *run_pipeline(const pg_store *s, PGconn *c, int64_t deadline, const stmt *st, int n,
                              int *rc) {
  bool capped = cap_deadline(s, &deadline);
  if (!PQenterPipelineMode(c)) {
    *rc = pg_err(c, NULL);
    return NULL;
  }
  int sent = 0;
  for (; sent < n; sent++)
    if (!send_stmt(c, st[sent].sql, st[sent].n, st[sent].vals, st[sent].lens, st[sent].fmts))
      break;
  int w = sent == n && PQpipelineSync(c) ? LK_OK : pg_err(c, NULL);
  PGresult *last = NULL;
  int first_err = LK_OK;
  bool synced = false;
  /* Each statement's result, then the sync's; on a deadline, cancel and read the rest within
   * the grace, else give the connection up. */
  int64_t grace_at = 0;
  for (int i = 0; i <= sent && w != LK_EAGAIN && w != LK_EIO;) {
    int wr = wait_result(s, c, w == LK_OK ? deadline : grace_at);
    if (wr == LK_EDEADLINE) {
      if (w == LK_EDEADLINE) {
        abandon(c);
        break;
      }
      cancel_async(c);
      grace_at = now_ns(s) + CANCEL_GRACE_NS;
      w = LK_EDEADLINE;
      continue;
    }
    if (wr != LK_OK) {
      w = wr;
      break;
    }
    PGresult *r = PQgetResult(c);
    if (!r) {
      i++; /* the end of statement i's results */
      continue;
    }
    ExecStatusType es = PQresultStatus(r);
    if (es == PGRES_PIPELINE_SYNC) {
      PQclear(r);
      synced = true;
      break;
    }
    if (es != PGRES_COMMAND_OK && es != PGRES_TUPLES_OK && first_err == LK_OK)
      first_err = es == PGRES_PIPELINE_ABORTED ? LK_EIO : pg_err(c, r);
    if (i == n - 1) {
      PQclear(last);
      last = r;
    } else {
      PQclear(r);
    }
  }
  /* Unless every result was read (a broken connection), the pipeline stays on, and conn_put
   * drops the connection. */
  if (synced && !PQexitPipelineMode(c) && w == LK_OK)
    w = LK_EIO;
  if (capped && w == LK_EDEADLINE)
    w = LK_EAGAIN; /* not the caller's deadline: the database did not answer in time */
  if (w != LK_OK || first_err != LK_OK || !last) {
    PQclear(last);
    *rc = w != LK_OK ? w : first_err != LK_OK ? first_err : LK_EIO;
    return NULL;
  }
  *rc = LK_OK;
  return last;
}

/* Prepares ps_sql on a new connection, all in one pipeline (one round trip), within the
 * deadline. Parameter types are left to PostgreSQL to infer, as PQsendQueryParams does. */
static int prepare_all(const pg_store *s, PGconn *c, int64_t deadline) {
  if (!PQenterPipelineMode(c))
    return pg_err(c, NULL);
  int rc = LK_OK;
  for (int i = 0; i < PS_N && rc == LK_OK; i++)
    if (!PQsendPrepare(c, ps_name[i], ps_sql[i], 0, NULL))
      rc = pg_err(c, NULL);
  if (rc == LK_OK && !PQpipelineSync(c))
    rc = pg_err(c, NULL);
  /* Each prepare's result and its terminating NULL, then the sync's result. */
  for (bool synced = false; rc == LK_OK && !synced;) {
    rc = wait_result(s, c, deadline);
    PGresult *r = rc == LK_OK ? PQgetResult(c) : NULL;
    if (!r)
      continue;
    ExecStatusType es = PQresultStatus(r);
    if (es == PGRES_PIPELINE_SYNC)
      synced = true;
    else if (es != PGRES_COMMAND_OK)
      rc = es == PGRES_PIPELINE_ABORTED ? LK_EIO : pg_err(c, r);
    PQclear(r);
  }
  if (rc == LK_OK && !PQexitPipelineMode(c))
    rc = LK_EIO;
  return rc; /* on failure the caller closes the connection */
}

static int64_t col_i64(const PGresult *r, int row, int col) {
  return PQgetisnull(r, row, col) ? 0 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

static void col_text(const PGresult *r, int row, int col, char *buf, size_t cap) {
  const char *v = PQgetisnull(r, row, col) ? "" : PQgetvalue(r, row, col);
  size_t n = (size_t)PQgetlength(r, row, col);
  if (PQgetisnull(r, row, col))
    n = 0;
  if (n >= cap)
    n = cap - 1;
  memcpy(buf, v, n);
  buf[n] = '\0';
}

typedef struct num {
  char b[24];
} num;
static num i64s(int64_t v) {
  num n;
  snprintf(n.b, sizeof n.b, "%" PRId64, v);
  return n;
}

/* --- schema --------------------------------------------------------------------------------- */

/* migrations[i] takes the schema from version i to i + 1. Append only. The claims table is
 * UNLOGGED: a claim says "executing now", which a database crash ends anyway (PostgreSQL
 * empties unlogged tables in crash recovery), and writing it costs no WAL flush. */
static const char *const migrations[] = {
    "CREATE TABLE books("
    "  id BIGSERIAL PRIMARY KEY,"
    "  title TEXT NOT NULL,"
    "  author TEXT NOT NULL,"
    "  year BIGINT,"
    "  isbn TEXT,"
    "  stock BIGINT NOT NULL CHECK(stock >= 0),"
    "  created_ns BIGINT NOT NULL,"
    "  updated_ns BIGINT NOT NULL);"
    "CREATE TABLE loans("
    "  id BIGSERIAL PRIMARY KEY,"
    "  book_id BIGINT NOT NULL,"
    "  tenant TEXT NOT NULL,"
    "  borrower TEXT,"
    "  request_id TEXT,"
    "  idem_key TEXT,"
    "  created_ns BIGINT NOT NULL,"
    "  stock_after BIGINT NOT NULL);"
    "CREATE INDEX loans_by_request ON loans(tenant, book_id, request_id)"
    "  WHERE request_id IS NOT NULL;"
    "CREATE INDEX loans_by_key ON loans(tenant, idem_key) WHERE idem_key IS NOT NULL;"
    "CREATE TABLE idem("
    "  tenant TEXT NOT NULL,"
    "  key TEXT NOT NULL,"
    "  fingerprint BYTEA NOT NULL,"
    "  status INTEGER NOT NULL,"
    "  headers TEXT NOT NULL,"
    "  body BYTEA NOT NULL,"
    "  created_ns BIGINT NOT NULL,"
    "  PRIMARY KEY(tenant, key));"
    "CREATE INDEX idem_by_age ON idem(created_ns);"
    "CREATE UNLOGGED TABLE idem_claims("
    "  tenant TEXT NOT NULL,"
    "  key TEXT NOT NULL,"
    "  owner BIGINT NOT NULL,"
    "  pid INTEGER NOT NULL,"
    "  claimed_at TIMESTAMPTZ NOT NULL,"
    "  expires_at TIMESTAMPTZ NOT NULL,"
    "  PRIMARY KEY(tenant, key));"
    "CREATE TABLE meta(name TEXT PRIMARY KEY, value TEXT NOT NULL);",
};

_Static_assert(sizeof migrations / sizeof migrations[0] == LK_PG_SCHEMA_VERSION,
               "one migration per schema version");

/* Any number that other programs on the database are unlikely to lock: "lkd1". */
#define MIGRATE_LOCK "1819042865"

static int migrate(pg_store *s, PGconn *c, char *errbuf, size_t errcap) {
  PGresult *r = NULL;
  int rc = run_cmd(s, c, LK_DEADLINE_NONE, "BEGIN", 0, NULL);
  /* Several instances starting at once on a new database: one migrates, the others wait for it
   * here and then find the schema current. */
  if (rc == LK_OK)
    rc = run_cmd(s, c, LK_DEADLINE_NONE, "SELECT pg_advisory_xact_lock(" MIGRATE_LOCK ")", 0, NULL);
  if (rc == LK_OK)
    rc = run_cmd(s, c, LK_DEADLINE_NONE,
                 "CREATE TABLE IF NOT EXISTS schema_version("
                 "  version INTEGER PRIMARY KEY,"
                 "  applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
                 0, NULL);
  if (rc == LK_OK)
    r = run(s, c, LK_DEADLINE_NONE, "SELECT COALESCE(MAX(version), 0) FROM schema_version", 0, NULL,
            NULL, NULL, &rc);
  if (rc != LK_OK) {
    set_err(errbuf, errcap, "schema", PQerrorMessage(c));
    goto fail;
  }
  int v = (int)col_i64(r, 0, 0);
  PQclear(r);
  s->opened_version = v;
  if (v > LK_PG_SCHEMA_VERSION) {
    if (errbuf && errcap)
      snprintf(errbuf, errcap, "schema version %d is newer than this program's %d", v,
               LK_PG_SCHEMA_VERSION);
    rc = LK_ESTATE;
    goto fail;
  }
  for (; v < LK_PG_SCHEMA_VERSION; v++) {
    /* Without parameters: a migration is several statements in one string. */
    PGresult *m = PQexec(c, migrations[v]);
    rc = PQresultStatus(m) == PGRES_COMMAND_OK ? LK_OK : pg_err(c, m);
    PQclear(m);
    if (rc == LK_OK) {
      num n = i64s(v + 1);
      const char *p[] = {n.b};
      rc = run_cmd(s, c, LK_DEADLINE_NONE, "INSERT INTO schema_version(version) VALUES($1)", 1, p);
    }
    if (rc != LK_OK) {
      set_err(errbuf, errcap, "migration", PQerrorMessage(c));
      goto fail;
    }
  }
  if (s->cfg.seed && s->opened_version == 0) {
    size_t n;
    const lk_sample_book *b = lk_store_sample_books(&n);
    num now = i64s(lk_wall_ns());
    for (size_t i = 0; i < n && rc == LK_OK; i++) {
      num year = i64s(b[i].year), stock = i64s(b[i].stock);
      const char *p[] = {b[i].title, b[i].author, year.b, b[i].isbn, stock.b, now.b};
      rc = run_cmd(s, c, LK_DEADLINE_NONE,
                   "INSERT INTO books(title, author, year, isbn, stock, created_ns, updated_ns) "
                   "VALUES($1, $2, $3, $4, $5, $6, $6)",
                   6, p);
    }
    if (rc == LK_OK)
      rc = run_cmd(s, c, LK_DEADLINE_NONE, "INSERT INTO meta(name, value) VALUES('seeded', '1')", 0,
                   NULL);
    if (rc != LK_OK) {
      set_err(errbuf, errcap, "seed", PQerrorMessage(c));
      goto fail;
    }
  }
  rc = run_cmd(s, c, LK_DEADLINE_NONE, "COMMIT", 0, NULL);
  if (rc != LK_OK)
    set_err(errbuf, errcap, "schema commit", PQerrorMessage(c));
  return rc;
fail:
  PQclear(PQexec(c, "ROLLBACK"));
  return rc == LK_OK ? LK_EIO : rc;
}

/* --- open / close --------------------------------------------------------------------------- */

static void pg_close(lk_store *base) {
  pg_store *s = (pg_store *)base;
  for (pg_conn *pc = s->idle, *n; pc; pc = n) {
    n = pc->next;
    PQfinish(pc->c);
    free(pc);
  }
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s->url);
  free(s);
}

int lk_pg_open(const lk_store_config *cfg, lk_store **out, char *errbuf, size_t errcap) {
  *out = NULL;
  if (errbuf && errcap)
    errbuf[0] = '\0';
  pg_store *s = calloc(1, sizeof *s);
  if (!s)
    return LK_ENOMEM;
  s->base.ops = &pg_ops;
  s->cfg = *cfg;
  if (!s->cfg.clock)
    s->cfg.clock = lk_clock_system();
  if (s->cfg.pool_size == 0)
    s->cfg.pool_size = 16;
  s->url = strdup(cfg->url);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (!s->url) {
    pg_close(&s->base);
    return LK_ENOMEM;
  }
  s->cfg.url = s->url;
  s->cfg.path = NULL;
  pg_conn *pc = calloc(1, sizeof *pc);
  if (!pc) {
    pg_close(&s->base);
    return LK_ENOMEM;
  }
  pc->c = connect_one(s, LK_DEADLINE_NONE, errbuf, errcap);
  if (!pc->c) {
    free(pc);
    pg_close(&s->base);
    return LK_ESYS;
  }
  s->open_n = 1;
  int rc = migrate(s, pc->c, errbuf, errcap);
  if (rc == LK_OK) {
    rc = prepare_all(s, pc->c, LK_DEADLINE_NONE);
    if (rc != LK_OK)
      set_err(errbuf, errcap, "prepare", PQerrorMessage(pc->c));
  }
  conn_put(s, pc);
  if (rc != LK_OK) {
    pg_close(&s->base);
    return rc;
  }
  *out = &s->base;
  return LK_OK;
}

static int pg_opened_version(const lk_store *base) {
  return ((const pg_store *)base)->opened_version;
}

/* --- reads ---------------------------------------------------------------------------------- */

static void row_to_book(const PGresult *r, int row, lk_book *b) {
  b->id = col_i64(r, row, 0);
  col_text(r, row, 1, b->title, sizeof b->title);
  col_text(r, row, 2, b->author, sizeof b->author);
  b->has_year = !PQgetisnull(r, row, 3);
  b->year = col_i64(r, row, 3);
  col_text(r, row, 4, b->isbn, sizeof b->isbn);
  b->stock = col_i64(r, row, 5);
}

/* One read statement on a pooled connection. */
static PGresult *read1(pg_store *s, lk_deadline dl, const char *sql, int n, const char *const *vals,
                       int *rc) {
  pg_conn *pc = conn_get(s, dl, rc);
  if (!pc)
    return NULL;
  PGresult *r = run(s, pc->c, dl.at, sql, n, vals, NULL, NULL, rc);
  conn_put(s, pc);
  return r;
}

static int book_get_on(pg_store *s, PGconn *c, int64_t deadline, int64_t id, lk_book *out) {
  num n = i64s(id);
  const char *p[] = {n.b};
  int rc;
  PGresult *r = run(s, c, deadline, ps_sql[PS_BOOK_GET], 1, p, NULL, NULL, &rc);
  if (!r)
    return rc;
  rc = PQntuples(r) == 1 ? LK_OK : LK_ENOTFOUND;
  if (rc == LK_OK)
    row_to_book(r, 0, out);
  PQclear(r);
  return rc;
}

static int pg_book_get(lk_store *base, int64_t id, lk_book *out, lk_deadline dl) {
  pg_store *s = (pg_store *)base;
  int rc;
  pg_conn *pc = conn_get(s, dl, &rc);
  if (!pc)
    return rc;
  rc = book_get_on(s, pc->c, dl.at, id, out);
  conn_put(s, pc);
  return rc;
}

static int pg_books_list(lk_store *base, int64_t after, int limit, lk_book *out, int *n,
                         lk_deadline dl) {
  *n = 0;
  num a = i64s(after), l = i64s(limit);
  const char *p[] = {a.b, l.b};
  int rc;
  PGresult *r =
      read1((pg_store *)base, dl,
            "SELECT " BOOK_COLS " FROM books WHERE id > $1 ORDER BY id LIMIT $2", 2, p, &rc);
  if (!r)
    return rc;
  for (int i = 0; i < PQntuples(r) && *n < limit; i++)
    row_to_book(r, i, &out[(*n)++]);
  PQclear(r);
  return LK_OK;
}

static int pg_loan_get(lk_store *base, int64_t id, lk_loan *out, lk_deadline dl) {
  num n = i64s(id);
  const char *p[] = {n.b};
  int rc;
  PGresult *r = read1((pg_store *)base, dl,
                      "SELECT id, book_id, tenant, borrower, idem_key, request_id, created_ns, "
                      "stock_after FROM loans WHERE id = $1",
                      1, p, &rc);
  if (!r)
    return rc;
  rc = PQntuples(r) == 1 ? LK_OK : LK_ENOTFOUND;
  if (rc == LK_OK) {
    out->id = col_i64(r, 0, 0);
    out->book_id = col_i64(r, 0, 1);
    col_text(r, 0, 2, out->tenant, sizeof out->tenant);
    col_text(r, 0, 3, out->borrower, sizeof out->borrower);
    col_text(r, 0, 4, out->idem_key, sizeof out->idem_key);
    col_text(r, 0, 5, out->request_id, sizeof out->request_id);
    out->created_wall_ns = col_i64(r, 0, 6);
    out->stock_after = col_i64(r, 0, 7);
  }
  PQclear(r);
  return rc;
}

/* Fills `out` from row 0's columns first.. (fingerprint, status, headers, body, created_ns). */
static int record_from_row(const PGresult *r, int first, lk_idem_record *out) {
  size_t fl = 0, bl = 0;
  unsigned char *fp = PQunescapeBytea((const unsigned char *)PQgetvalue(r, 0, first), &fl);
  unsigned char *body = PQunescapeBytea((const unsigned char *)PQgetvalue(r, 0, first + 3), &bl);
  size_t hl = (size_t)PQgetlength(r, 0, first + 2);
  out->status = (int)col_i64(r, 0, first + 1);
  out->created_wall_ns = col_i64(r, 0, first + 4);
  out->headers = malloc(hl + 1);
  out->body = malloc(bl ? bl : 1);
  int rc = LK_OK;
  if (!fp || !body || !out->headers || !out->body) {
    lk_idem_record_clear(out);
    rc = LK_ENOMEM;
  } else {
    if (fl == sizeof out->fingerprint)
      memcpy(out->fingerprint, fp, fl);
    memcpy(out->headers, PQgetvalue(r, 0, first + 2), hl);
    out->headers[hl] = '\0';
    if (bl)
      memcpy(out->body, body, bl);
    out->body_len = bl;
  }
  PQfreemem(fp);
  PQfreemem(body);
  return rc;
}

static int pg_idem_get(lk_store *base, const char *tenant, const char *key,
                       int64_t min_created_wall_ns, lk_idem_record *out, lk_deadline dl) {
  memset(out, 0, sizeof *out);
  num m = i64s(min_created_wall_ns);
  const char *p[] = {tenant, key, m.b};
  int rc;
  PGresult *r = read1((pg_store *)base, dl,
                      "SELECT fingerprint, status, headers, body, created_ns FROM idem "
                      "WHERE tenant = $1 AND key = $2 AND created_ns >= $3",
                      3, p, &rc);
  if (!r)
    return rc;
  rc = PQntuples(r) == 1 ? record_from_row(r, 0, out) : LK_ENOTFOUND;
  PQclear(r);
  return rc;
}

static int pg_counts_get(lk_store *base, lk_store_counts *out) {
  int rc;
  PGresult *r = read1((pg_store *)base, lk_deadline_none(),
                      "SELECT (SELECT COUNT(*) FROM books), (SELECT COUNT(*) FROM loans), "
                      "(SELECT COUNT(idem_key) FROM loans), (SELECT COUNT(*) FROM idem)",
                      0, NULL, &rc);
  if (!r)
    return rc;
  out->books = col_i64(r, 0, 0);
  out->loans = col_i64(r, 0, 1);
  out->keyed_loans = col_i64(r, 0, 2);
  out->idem_records = col_i64(r, 0, 3);
  PQclear(r);
  return LK_OK;
}

static int pg_loan_groups(lk_store *base, bool by_key, bool only_dupes, int limit,
                          lk_store_group_cb cb, void *arg) {
  static const char *const sql[2] = {
      "SELECT tenant, book_id, request_id, COUNT(*) c FROM loans WHERE request_id IS NOT NULL "
      "GROUP BY tenant, book_id, request_id HAVING COUNT(*) > $1 "
      "ORDER BY c DESC, tenant, request_id LIMIT $2",
      "SELECT tenant, MIN(book_id), idem_key, COUNT(*) c FROM loans WHERE idem_key IS NOT NULL "
      "GROUP BY tenant, idem_key HAVING COUNT(*) > $1 ORDER BY c DESC, tenant, idem_key "
      "LIMIT $2",
  };
  num d = i64s(only_dupes ? 1 : 0), l = i64s(limit);
  const char *p[] = {d.b, l.b};
  int rc;
  PGresult *r = read1((pg_store *)base, lk_deadline_none(), sql[by_key], 2, p, &rc);
  if (!r)
    return rc;
  for (int i = 0; i < PQntuples(r); i++) {
    if (cb(arg, PQgetvalue(r, i, 0), col_i64(r, i, 1), PQgetvalue(r, i, 2), col_i64(r, i, 3)))
      break;
  }
  PQclear(r);
  return LK_OK;
}

static int pg_tenant_totals(lk_store *base, lk_store_tenant_cb cb, void *arg) {
  static const char sql[] =
      "SELECT t.tenant, t.n, t.keyed, COALESCE(r.d, 0), COALESCE(k.d, 0) FROM "
      "(SELECT tenant, COUNT(*) n, COUNT(idem_key) keyed FROM loans GROUP BY tenant) t "
      "LEFT JOIN (SELECT tenant, SUM(c - 1) d FROM (SELECT tenant, COUNT(*) c FROM loans "
      "  WHERE request_id IS NOT NULL GROUP BY tenant, book_id, request_id) x GROUP BY tenant) r "
      "  ON r.tenant = t.tenant "
      "LEFT JOIN (SELECT tenant, SUM(c - 1) d FROM (SELECT tenant, COUNT(*) c FROM loans "
      "  WHERE idem_key IS NOT NULL GROUP BY tenant, idem_key) y GROUP BY tenant) k "
      "  ON k.tenant = t.tenant "
      "ORDER BY t.tenant";
  int rc;
  PGresult *r = read1((pg_store *)base, lk_deadline_none(), sql, 0, NULL, &rc);
  if (!r)
    return rc;
  for (int i = 0; i < PQntuples(r); i++) {
    lk_tenant_totals t = {
        .loans = col_i64(r, i, 1),
        .keyed_loans = col_i64(r, i, 2),
        .duplicate_by_request_id = col_i64(r, i, 3),
        .duplicate_by_key = col_i64(r, i, 4),
    };
    if (cb(arg, PQgetvalue(r, i, 0), &t))
      break;
  }
  PQclear(r);
  return LK_OK;
}

/* --- writes --------------------------------------------------------------------------------- */

static void tx_free(pg_tx *tx) {
  free(tx->idem_tenant);
  free(tx->idem_key);
  free(tx->idem_headers);
  free(tx->idem_body);
}

#define BEGIN_SQL "BEGIN ISOLATION LEVEL READ COMMITTED"

/* Ends the transaction: the key's record (when there is one) and COMMIT in one round trip. The
 * record is a plain INSERT, so a live record of the key (committed by another instance, or in a
 * transaction still open, which it waits for) is a unique_violation that aborts the transaction,
 * the COMMIT after it turns into a rollback, and the call returns LK_ECONFLICT; the effect is
 * never committed without its record. An expired record of the key and the key's claim are
 * deleted first, in the same transaction, so the claim can never outlive a committed result. */
static int tx_commit(pg_tx *tx) {
  const pg_store *s = tx->s;
  PGconn *c = tx->pc->c;
  if (!tx->has_idem)
    return tx->begun ? run_cmd(s, c, LK_DEADLINE_NONE, "COMMIT", 0, NULL) : LK_OK;
  num status = i64s(tx->idem_status), created = i64s(tx->idem_created),
      min = i64s(tx->idem_min_created);
  const char *dv[] = {tx->idem_tenant, tx->idem_key, min.b};
  const char *iv[] = {tx->idem_tenant, tx->idem_key,     (const char *)tx->idem_fp,
                      status.b,        tx->idem_headers, (const char *)tx->idem_body,
                      created.b};
  const int il[] = {0, 0, (int)sizeof tx->idem_fp, 0, 0, (int)tx->idem_body_len, 0};
  const int ifm[] = {0, 0, 1, 0, 0, 1, 0};
  stmt st[4] = {
      {BEGIN_SQL, 0, NULL, NULL, NULL},
      {ps_sql[PS_UNCLAIM], 3, dv, NULL, NULL},
      {ps_sql[PS_IDEM_PUT], 7, iv, il, ifm},
      {"COMMIT", 0, NULL, NULL, NULL},
  };
  int skip = tx->begun ? 1 : 0;
  int rc;
  /* Not cancelled at the deadline: once COMMIT is sent its outcome must be learnt. A connection
   * lost here leaves the outcome unknown (LK_EAGAIN): the client's retry with the same key
   * finds the record if it committed. */
  PGresult *r = run_pipeline(s, c, LK_DEADLINE_NONE, st + skip, 4 - skip, &rc);
  if (r && strcmp(PQcmdStatus(r), "COMMIT") != 0)
    rc = LK_EIO; /* "ROLLBACK": cannot happen after the statements succeeded */
  PQclear(r);
  return rc;
}

static int pg_write(lk_store *base, lk_deadline dl, lk_store_tx_fn fn, void *arg) {
  pg_store *s = (pg_store *)base;
  if (lk_deadline_expired(dl, now_ns(s)))
    return LK_EDEADLINE;
  int rc;
  pg_conn *pc = conn_get(s, dl, &rc);
  if (!pc)
    return rc;
  pg_tx tx = {.base = {&pg_ops}, .s = s, .pc = pc, .dl = dl};
  rc = fn(&tx.base, arg);
  /* The last check before the effect becomes visible, as in the SQLite store. */
  if (rc == LK_OK && lk_deadline_expired(dl, now_ns(s)))
    rc = LK_EDEADLINE;
  if (rc == LK_OK)
    rc = tx_commit(&tx);
  if (rc != LK_OK && PQstatus(pc->c) == CONNECTION_OK &&
      PQpipelineStatus(pc->c) == PQ_PIPELINE_OFF && PQtransactionStatus(pc->c) != PQTRANS_IDLE)
    run_cmd(s, pc->c, now_ns(s) + CANCEL_GRACE_NS, "ROLLBACK", 0, NULL);
  tx_free(&tx);
  conn_put(s, pc);
  return rc;
}

/* A statement inside the transaction; the first one carries the BEGIN in the same round trip. */
static PGresult *tx_run(lk_store_tx *t, const char *sql, int n, const char *const *vals,
                        const int *lens, const int *fmts, int *rc) {
  pg_tx *tx = (pg_tx *)t;
  if (tx->begun)
    return run(tx->s, tx->pc->c, tx->dl.at, sql, n, vals, lens, fmts, rc);
  tx->begun = true;
  stmt st[2] = {{BEGIN_SQL, 0, NULL, NULL, NULL}, {sql, n, vals, lens, fmts}};
  return run_pipeline(tx->s, tx->pc->c, tx->dl.at, st, 2, rc);
}

static int pg_tx_book_get(lk_store_tx *tx, int64_t id, lk_book *out) {
  num n = i64s(id);
  const char *p[] = {n.b};
  int rc;
  PGresult *r = tx_run(tx, ps_sql[PS_BOOK_GET], 1, p, NULL, NULL, &rc);
  if (!r)
    return rc;
  rc = PQntuples(r) == 1 ? LK_OK : LK_ENOTFOUND;
  if (rc == LK_OK)
    row_to_book(r, 0, out);
  PQclear(r);
  return rc;
}

/* $first.. = title, author, year, isbn, stock */
static void book_params(const lk_book *b, const char **p, num *year, num *stock) {
  *year = i64s(b->year);
  *stock = i64s(b->stock);
  p[0] = b->title;
  p[1] = b->author;
  p[2] = b->has_year ? year->b : NULL;
  p[3] = b->isbn[0] ? b->isbn : NULL;
  p[4] = stock->b;
}

static int pg_tx_book_create(lk_store_tx *tx, const lk_book *in, int64_t *id) {
  const char *p[6];
  num year, stock, now = i64s(lk_wall_ns());
  book_params(in, p, &year, &stock);
  p[5] = now.b;
  int rc;
  PGresult *r =
      tx_run(tx,
             "INSERT INTO books(title, author, year, isbn, stock, created_ns, updated_ns) "
             "VALUES($1, $2, $3, $4, $5, $6, $6) RETURNING id",
             6, p, NULL, NULL, &rc);
  if (!r)
    return rc;
  *id = col_i64(r, 0, 0);
  PQclear(r);
  return LK_OK;
}

static int changed(PGresult *r, int rc) {
  if (!r)
    return rc;
  rc = strcmp(PQcmdTuples(r), "0") ? LK_OK : LK_ENOTFOUND;
  PQclear(r);
  return rc;
}

static int pg_tx_book_update(lk_store_tx *tx, const lk_book *in) {
  const char *p[7];
  num year, stock, id = i64s(in->id), now = i64s(lk_wall_ns());
  book_params(in, p, &year, &stock);
  p[5] = id.b;
  p[6] = now.b;
  int rc;
  PGresult *r =
      tx_run(tx,
             "UPDATE books SET title = $1, author = $2, year = $3, isbn = $4, stock = $5, "
             "updated_ns = $7 WHERE id = $6",
             7, p, NULL, NULL, &rc);
  return changed(r, rc);
}

static int pg_tx_book_delete(lk_store_tx *tx, int64_t id) {
  num n = i64s(id);
  const char *p[] = {n.b};
  int rc;
  PGresult *r = tx_run(tx, "DELETE FROM books WHERE id = $1", 1, p, NULL, NULL, &rc);
  return changed(r, rc);
}

static int pg_tx_loan_create(lk_store_tx *tx, lk_loan *loan) {
  int64_t now = lk_wall_ns();
  num id = i64s(loan->book_id), t = i64s(now);
  const char *p[] = {id.b,
                     loan->tenant,
                     loan->borrower[0] ? loan->borrower : NULL,
                     loan->idem_key[0] ? loan->idem_key : NULL,
                     loan->request_id[0] ? loan->request_id : NULL,
                     t.b};
  int rc;
  /* One statement, one round trip: the decrement and the loan row that records the stock it
   * left. At READ COMMITTED a concurrent decrement of the same book makes the UPDATE wait for it
   * and then re-check stock > 0 on the row it left: copies are never lost nor oversold. */
  PGresult *r = tx_run(tx, ps_sql[PS_LOAN], 6, p, NULL, NULL, &rc);
  if (!r)
    return rc;
  if (PQntuples(r) != 1) {
    /* No copy taken: either the book is missing or it has none left. */
    PQclear(r);
    lk_book b;
    rc = pg_tx_book_get(tx, loan->book_id, &b);
    return rc == LK_OK ? LK_ECONFLICT : rc;
  }
  loan->id = col_i64(r, 0, 0);
  loan->stock_after = col_i64(r, 0, 1);
  loan->created_wall_ns = now;
  PQclear(r);
  return LK_OK;
}

static char *dup_text(const char *t) { return strdup(t ? t : ""); }

/* Kept (copied) and sent with COMMIT, see tx_commit: the conflict with a live record is learnt
 * there and reported by lk_store_write as LK_ECONFLICT, which the interface allows. */
static int pg_tx_idem_put(lk_store_tx *t, const char *tenant, const char *key,
                          const lk_idem_record *rec, int64_t min_created_wall_ns) {
  pg_tx *tx = (pg_tx *)t;
  if (tx->has_idem)
    return LK_ESTATE; /* one record per transaction */
  tx->idem_tenant = dup_text(tenant);
  tx->idem_key = dup_text(key);
  tx->idem_headers = dup_text(rec->headers);
  tx->idem_body = malloc(rec->body_len ? rec->body_len : 1);
  if (!tx->idem_tenant || !tx->idem_key || !tx->idem_headers || !tx->idem_body)
    return LK_ENOMEM; /* freed by pg_write */
  if (rec->body_len)
    memcpy(tx->idem_body, rec->body, rec->body_len);
  tx->idem_body_len = rec->body_len;
  memcpy(tx->idem_fp, rec->fingerprint, sizeof tx->idem_fp);
  tx->idem_status = rec->status;
  tx->idem_created = rec->created_wall_ns;
  tx->idem_min_created = min_created_wall_ns;
  tx->has_idem = true;
  return LK_OK;
}

static int pg_idem_purge(lk_store *base, int64_t before_wall_ns, int64_t *deleted) {
  pg_store *s = (pg_store *)base;
  int64_t total = 0;
  int rc = LK_OK;
  num b = i64s(before_wall_ns);
  const char *p[] = {b.b};
  for (;;) {
    /* Small batches keep each transaction (and the rows it locks) short. */
    PGresult *r = read1(s, lk_deadline_none(),
                        "DELETE FROM idem WHERE ctid IN (SELECT ctid FROM idem "
                        "WHERE created_ns < $1 LIMIT 500)",
                        1, p, &rc);
    if (!r)
      break;
    int64_t n = strtoll(PQcmdTuples(r), NULL, 10);
    PQclear(r);
    total += n;
    if (n < PURGE_BATCH)
      break;
  }
  if (rc == LK_OK)
    PQclear(read1(s, lk_deadline_none(), "DELETE FROM idem_claims WHERE expires_at < now()", 0,
                  NULL, &rc));
  if (deleted)
    *deleted = total;
  return rc;
}

static int pg_idem_claim(lk_store *base, const char *tenant, const char *key, uint64_t owner,
                         int64_t lease_ns, lk_deadline dl) {
  num o = i64s((int64_t)owner), l = i64s(lease_ns / 1000);
  const char *p[] = {tenant, key, o.b, l.b};
  int rc;
  PGresult *r = read1((pg_store *)base, dl,
                      "INSERT INTO idem_claims(tenant, key, owner, pid, claimed_at, expires_at) "
                      "SELECT " CLAIM_ROW " " CLAIM_CONFLICT,
                      4, p, &rc);
  if (!r)
    return rc;
  rc = PQntuples(r) == 1 ? LK_OK : LK_ECONFLICT;
  PQclear(r);
  return rc;
}

/* The lookup and the claim in one statement, one round trip: the claim is inserted only when
 * the statement's snapshot holds no live record. (A record committed just after that snapshot
 * is met by the write's INSERT of the record, which then fails and rolls the write back.) */
static int pg_idem_lookup_claim(lk_store *base, const char *tenant, const char *key,
                                int64_t min_created_wall_ns, uint64_t owner, int64_t lease_ns,
                                lk_idem_record *out, bool *found, lk_deadline dl) {
  memset(out, 0, sizeof *out);
  *found = false;
  num o = i64s((int64_t)owner), l = i64s(lease_ns / 1000), m = i64s(min_created_wall_ns);
  const char *p[] = {tenant, key, o.b, l.b, m.b};
  int rc;
  PGresult *r = read1((pg_store *)base, dl, ps_sql[PS_LOOKUP_CLAIM], 5, p, &rc);
  if (!r)
    return rc;
  if (PQntuples(r) != 1) {
    rc = LK_EIO;
  } else if (!PQgetisnull(r, 0, 1)) {
    *found = true;
    rc = record_from_row(r, 0, out);
  } else {
    rc = col_i64(r, 0, 5) == 1 ? LK_OK : LK_ECONFLICT;
  }
  PQclear(r);
  return rc;
}

static int pg_idem_release(lk_store *base, const char *tenant, const char *key, uint64_t owner) {
  num o = i64s((int64_t)owner);
  const char *p[] = {tenant, key, o.b};
  int rc;
  PQclear(read1((pg_store *)base, lk_deadline_none(), ps_sql[PS_RELEASE], 3, p, &rc));
  return rc;
}

static const lk_store_ops pg_ops = {
    .kind = "postgres",
    .schema_version = LK_PG_SCHEMA_VERSION,
    .close = pg_close,
    .opened_version = pg_opened_version,
    .book_get = pg_book_get,
    .books_list = pg_books_list,
    .loan_get = pg_loan_get,
    .idem_get = pg_idem_get,
    .counts_get = pg_counts_get,
    .loan_groups = pg_loan_groups,
    .tenant_totals = pg_tenant_totals,
    .write = pg_write,
    .idem_purge = pg_idem_purge,
    .idem_claim = pg_idem_claim,
    .idem_lookup_claim = pg_idem_lookup_claim,
    .idem_release = pg_idem_release,
    .tx_book_get = pg_tx_book_get,
    .tx_book_create = pg_tx_book_create,
    .tx_book_update = pg_tx_book_update,
    .tx_book_delete = pg_tx_book_delete,
    .tx_loan_create = pg_tx_loan_create,
    .tx_idem_put = pg_tx_idem_put,
};
