/* SPDX-License-Identifier: MIT */
/* exec_pg: one PostgreSQL query (libpq) run through liblinkd's executor: a deadline for the whole
 * call, a timeout per attempt, retries with backoff, and every libpq error classified by whether
 * the statement can have reached the server.
 *
 *   exec_pg [-v] [-i] [-d DEADLINE_MS] [-t ATTEMPT_MS] [-n ATTEMPTS] CONNINFO SQL
 *     -v  print the attempt timeline to stderr
 *     -i  the statement is idempotent (a read, an upsert): retry it even after it was sent
 *     -d  the whole call's deadline (default 3000), -t each attempt's (default 2000), -n the
 *         attempts (default 4, at most 64)
 * Prints the first column of every row to stdout. Exit status: 0 success, 1 the call failed
 * (typed error on stderr), 2 usage.
 *
 * Classification (the executor's retry rules then apply unchanged):
 *   cannot connect: refused                  CONNECT_REFUSED    not sent: always retried
 *   cannot connect: timeout                  CONNECT_TIMEOUT    not sent
 *   cannot connect: anything else            CONNECT_FAILED     not sent
 *   the query could not be written           RESET_BEFORE_SEND  not sent
 *   connection lost after the query was sent RESET_AFTER_SEND   sent: retried only with -i
 *   no answer within the attempt's timeout   READ_TIMEOUT       sent: retried only with -i
 *   SQLSTATE 40001 / 40P01 (serialization    SERVER_5XX, not    the transaction was rolled
 *     failure, deadlock)                     sent               back: safe to run again
 *   SQLSTATE 57P01-57P03, 53xxx (shutdown,   SERVER_5XX         sent: retried only with -i
 *     resources), XX and 58 classes
 *   any other error (syntax, constraint,     CLIENT_4XX         permanent: never retried
 *     division by zero, ...)
 *
 * Each attempt connects anew (a real client would keep a pooled connection and reconnect only
 * after a connection failure); the attempt's timeout bounds connecting and the query through
 * non-blocking libpq and poll().
 */
#include <linkd/exec.h>

#include <libpq-fe.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct query {
  const char *conninfo;
  const char *sql;
  PGresult *rows; /* the successful attempt's result */
  char last_error[256];
} query;

/* Waits until the socket is ready for `events` or `end_at` (CLOCK_MONOTONIC ns) passes. */
static bool wait_fd(int fd, short events, int64_t end_at) {
  for (;;) {
    int64_t left = end_at - lk_now_ns();
    if (left <= 0)
      return false;
    struct pollfd p = {fd, events, 0};
    int ms = (int)((left + LK_NS_PER_MS - 1) / LK_NS_PER_MS);
    int rc = poll(&p, 1, ms);
    if (rc > 0)
      return true;
    if (rc < 0 && errno != EINTR)
      return false;
  }
}

static lk_failure connect_failure(const PGconn *c) {
  const char *m = PQerrorMessage(c);
  if (strstr(m, "Connection refused"))
    return LK_F_CONNECT_REFUSED;
  if (strstr(m, "timeout") || strstr(m, "timed out"))
    return LK_F_CONNECT_TIMEOUT;
  return LK_F_CONNECT_FAILED;
}

/* A server error, from its SQLSTATE. */
static void classify_sqlstate(const char *st, lk_exec_outcome *out) {
  out->sent = true;
  if (!st || strlen(st) != 5) {
    out->failure = LK_F_SERVER_5XX;
    return;
  }
  if (!strcmp(st, "40001") || !strcmp(st, "40P01")) {
    out->failure = LK_F_SERVER_5XX;
    out->sent = false; /* rolled back: nothing of it remains */
  } else if (!strcmp(st, "57014")) {
    out->failure = LK_F_READ_TIMEOUT; /* statement_timeout: it may have done work meanwhile */
  } else if (!strncmp(st, "57P0", 4) || !strncmp(st, "53", 2) || !strncmp(st, "58", 2) ||
             !strncmp(st, "XX", 2) || !strncmp(st, "08", 2)) {
    out->failure = LK_F_SERVER_5XX;
  } else {
    out->failure = LK_F_CLIENT_4XX;
  }
}

static void attempt(void *ctx, const lk_exec_attempt *a, lk_exec_outcome *out) {
  query *q = ctx;
  q->last_error[0] = '\0';
  out->retry_after = -1;
  PGconn *c = PQconnectStart(q->conninfo);
  if (!c) {
    out->failure = LK_F_CONNECT_FAILED;
    out->sent = false;
    return;
  }
  /* connecting: nothing has been sent yet, whatever happens */
  out->sent = false;
  PostgresPollingStatusType ps = PGRES_POLLING_WRITING;
  while (PQstatus(c) != CONNECTION_BAD && ps != PGRES_POLLING_OK && ps != PGRES_POLLING_FAILED) {
    if (!wait_fd(PQsocket(c), ps == PGRES_POLLING_READING ? POLLIN : POLLOUT, a->end_at)) {
      out->failure = LK_F_CONNECT_TIMEOUT;
      goto done;
    }
    ps = PQconnectPoll(c);
  }
  if (PQstatus(c) != CONNECTION_OK) {
    out->failure = connect_failure(c);
    goto done;
  }
  /* writing the query: failure here means the server has not got all of it */
  if (PQsetnonblocking(c, 1) != 0 || !PQsendQuery(c, q->sql)) {
    out->failure = LK_F_RESET_BEFORE_SEND;
    goto done;
  }
  int f;
  while ((f = PQflush(c)) == 1) {
    if (!wait_fd(PQsocket(c), POLLOUT, a->end_at)) {
      out->failure = LK_F_WRITE_TIMEOUT;
      goto done;
    }
  }
  if (f < 0) {
    out->failure = LK_F_RESET_BEFORE_SEND;
    goto done;
  }
  /* sent in full: from here on the server may have run it */
  out->sent = true;
  while (PQisBusy(c)) {
    if (!wait_fd(PQsocket(c), POLLIN, a->end_at)) {
      out->failure = LK_F_READ_TIMEOUT;
      goto done;
    }
    if (!PQconsumeInput(c)) {
      out->failure = LK_F_RESET_AFTER_SEND;
      goto done;
    }
  }
  PGresult *r = PQgetResult(c);
  ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
  if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
    out->failure = LK_F_NONE;
    PQclear(q->rows);
    q->rows = r;
    r = NULL;
  } else if (PQstatus(c) == CONNECTION_BAD) {
    out->failure = LK_F_RESET_AFTER_SEND; /* terminated while running it */
  } else {
    classify_sqlstate(r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL, out);
  }
  if (out->failure != LK_F_NONE)
    snprintf(q->last_error, sizeof q->last_error, "%s",
             r ? PQresultErrorMessage(r) : PQerrorMessage(c));
  PQclear(r);
done:
  if (out->failure != LK_F_NONE && !q->last_error[0])
    snprintf(q->last_error, sizeof q->last_error, "%s", PQerrorMessage(c));
  PQfinish(c);
}

int main(int argc, char **argv) {
  bool verbose = false, idempotent = false;
  long deadline_ms = 3000, attempt_ms = 2000, attempts = 4;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (!strcmp(argv[i], "-v"))
      verbose = true;
    else if (!strcmp(argv[i], "-i"))
      idempotent = true;
    else if (!strcmp(argv[i], "-d") && i + 1 < argc)
      deadline_ms = strtol(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "-t") && i + 1 < argc)
      attempt_ms = strtol(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "-n") && i + 1 < argc)
      attempts = strtol(argv[++i], NULL, 10);
    else
      break;
  }
  if (argc - i != 2 || deadline_ms <= 0 || attempt_ms <= 0 || attempts < 1 || attempts > 64) {
    fprintf(stderr, "usage: exec_pg [-v] [-i] [-d DEADLINE_MS] [-t ATTEMPT_MS] [-n ATTEMPTS] "
                    "CONNINFO SQL\n");
    return 2;
  }
  query q = {argv[i], argv[i + 1], NULL, ""};

  lk_exec_policy pol;
  lk_exec_policy_init_default(&pol);
  pol.deadline = LK_MS(deadline_ms);
  pol.attempt_timeout = LK_MS(attempt_ms);
  pol.idempotent = idempotent;
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  rc.max_attempts = (int)attempts;
  rc.backoff.base = LK_MS(100);
  rc.backoff.max = LK_MS(500);
  const char *why = NULL;
  if (lk_retry_policy_init(&pol.retry, &rc, &why) != LK_OK) {
    fprintf(stderr, "exec_pg: %s\n", why);
    return 2;
  }

  lk_exec_attempt_info timeline[64];
  lk_exec_result res = {.timeline = timeline, .timeline_cap = 64};
  int err = lk_exec_run(&pol, attempt, &q, NULL, &res);

  if (verbose) {
    for (int k = 0; k < res.attempts && k < 64; k++) {
      const lk_exec_attempt_info *a = &timeline[k];
      fprintf(stderr, "attempt %d start %.1fms took %.1fms %s sent=%d -> %s\n", a->number,
              (double)a->start / 1e6, (double)a->duration / 1e6, lk_failure_name(a->failure),
              a->sent, a->reason);
    }
  }
  if (err != LK_OK) {
    fprintf(stderr, "exec_pg: %s (%s): %s; last error: %s", lk_err_name(err), res.stop,
            lk_failure_name(res.failure), q.last_error[0] ? q.last_error : "none\n");
    PQclear(q.rows);
    return 1;
  }
  for (int r = 0; r < PQntuples(q.rows); r++)
    printf("%s\n", PQnfields(q.rows) > 0 ? PQgetvalue(q.rows, r, 0) : "");
  PQclear(q.rows);
  return 0;
}
