/* SPDX-License-Identifier: MIT */
/* Real PostgreSQL and redis-server instances for tests: each in its own temporary directory, on a
 * free port of 127.0.0.1, started and stopped by the test itself (no system service is used).
 * PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user that the
 * Debian package creates. Missing binaries are an error (the test fails), never a skip. */
#ifndef LINKD_TMPSRV_H
#define LINKD_TMPSRV_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef enum { LK_TMPSRV_PG = 1, LK_TMPSRV_REDIS = 2 } lk_tmpsrv_kind;

typedef struct lk_tmpsrv {
  lk_tmpsrv_kind kind;
  pid_t pid;      /* the server process (PostgreSQL: the postmaster); 0 when stopped */
  int port;       /* TCP port on 127.0.0.1, kept across restarts */
  char dir[256];  /* temporary directory; data lives below it */
  char log[300];  /* the server's log file (stdout and stderr), for failure messages */
} lk_tmpsrv;

/* initdb into a new temporary directory, then start PostgreSQL on a free port with trust
 * authentication for user `postgres`, database `postgres`. Waits until it accepts queries (up
 * to 30 s). Returns 0, or -1 with a message on stderr. */
int lk_tmpsrv_pg_start(lk_tmpsrv *s);

/* libpq connection string: "host=127.0.0.1 port=N user=postgres dbname=postgres". */
void lk_tmpsrv_pg_conninfo(const lk_tmpsrv *s, char *buf, size_t n);
/* URL form: "postgres://postgres@127.0.0.1:N/postgres". */
void lk_tmpsrv_pg_url(const lk_tmpsrv *s, char *buf, size_t n);

/* Starts redis-server on a free port, no persistence. Waits until it answers PING (up to 10 s). */
int lk_tmpsrv_redis_start(lk_tmpsrv *s);

/* Sends sig to the server (SIGKILL to crash it; for PostgreSQL SIGINT is a fast shutdown) and
 * waits for it to exit (up to 30 s, then SIGKILL). The directory and port are kept. */
int lk_tmpsrv_stop(lk_tmpsrv *s, int sig);

/* Starts a stopped server again in the same directory on the same port (PostgreSQL runs crash
 * recovery after a SIGKILL). Waits until ready like the start functions. */
int lk_tmpsrv_restart(lk_tmpsrv *s);

/* Stops the server if it runs (SIGKILL) and removes its directory. Safe on a zeroed struct. */
void lk_tmpsrv_destroy(lk_tmpsrv *s);

/* True while the server accepts work (PostgreSQL: pg_isready; Redis: PING). */
bool lk_tmpsrv_ready(const lk_tmpsrv *s);

/* A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close). */
int lk_tmpsrv_free_port(void);

#endif
