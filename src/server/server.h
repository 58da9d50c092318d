/* SPDX-License-Identifier: MIT */
/* server.h: libraryd's HTTP server (libmicrohttpd): the book API, Idempotency-Key handling,
 * deadline honouring, fault injection and the admin listener. Handlers run on a fixed set of
 * worker threads behind a bounded admission queue, each spending a configured service cost, so
 * that load can exceed capacity (docs/libraryd.md, "Capacity, queueing and overload").
 *
 * The store is owned by the caller and must outlive the server.
 *
 * Thread-safety: start, shutdown and free are called from one controlling thread; the accessors
 * are safe from any thread.
 */
#ifndef LINKD_SERVER_H
#define LINKD_SERVER_H

#include "admq.h"
#include "store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum lk_log_format { LK_LOG_OFF, LK_LOG_TEXT, LK_LOG_JSON } lk_log_format;

typedef struct lk_server_config {
  const char *addr;          /* IPv4 or IPv6 literal; default "127.0.0.1" */
  int port;                  /* default 8080; 0 = ephemeral (see lk_server_port) */
  const char *admin_addr;    /* default: addr */
  int admin_port;            /* -1 (default) = no admin listener; 0 = ephemeral */
  unsigned threads;          /* server threads; 0 (default) = online CPUs */
  size_t max_body;           /* bytes; larger bodies get 413 (default 64 KiB) */
  int64_t idem_retention_ns; /* how long a key's result is kept (default 24 h) */
  int64_t purge_interval_ns; /* expired-key purge period; 0 = min(retention / 4, 60 s) */
  int64_t drain_timeout_ns;  /* graceful shutdown budget for in-flight requests (10 s) */
  unsigned idle_timeout_s;   /* idle keep-alive connections are closed after this (60) */
  unsigned connection_limit; /* concurrent connections (default 4096) */
  unsigned per_client_limit; /* concurrent connections per client IP (default 64; 0 = off) */
  int64_t head_timeout_ns;   /* a request head must arrive within this (10 s; 0 = off) */
  int64_t body_timeout_ns;   /* a request body must arrive within this after its head (30 s) */
  uint64_t seed;             /* fault injection generator seed (default 1) */
  const char *const *faults; /* fault rule specs (see fault.h), n_faults of them */
  size_t n_faults;
  const char *const *require_key; /* route patterns whose requests must carry a key */
  size_t n_require_key;
  unsigned workers;          /* threads that run the handlers (default 8) */
  size_t queue_limit;        /* admission queue slots in front of them (default 1024) */
  const char *work;          /* service cost spec (see work.h); NULL = LK_WORK_DEFAULT */
  lk_qdisc queue_discipline; /* default: LK_QDISC_DEFAULT */
  int64_t queue_target_ns;   /* adaptive-lifo and codel target delay (default 5 ms) */
  int64_t queue_interval_ns; /* codel interval (default 100 ms) */
  lk_log_format log;         /* access log format (default TEXT) */
  int log_fd;                /* access log destination (default 2) */
} lk_server_config;

typedef struct lk_server lk_server;

/* Sets every field to its default. */
void lk_server_config_init_default(lk_server_config *cfg);

/* Binds, starts the threads and begins serving. 0 or LK_ECONFIG (bad option, fault rule or
 * route pattern; message in err), LK_ESYS (bind/listen failed), LK_ENOMEM. */
int lk_server_start(const lk_server_config *cfg, lk_store *store, lk_server **out, char *err,
                    size_t errcap);
/* The bound ports (useful with port 0); admin port -1 when there is no admin listener. */
int lk_server_port(const lk_server *s);
int lk_server_admin_port(const lk_server *s);
/* Replaces every fault rule (as PUT /admin/faults does) and reseeds the generator. The specs are
 * all parsed first: on LK_ECONFIG (message in err) the running rules are unchanged, unless a
 * rule beyond the table's capacity was refused midway. LK_ENOMEM otherwise possible. */
int lk_server_replace_faults(lk_server *s, const char *const *specs, size_t n, uint64_t seed,
                             char *err, size_t errcap);
/* Graceful shutdown: stops accepting, lets in-flight requests finish within the drain timeout,
 * then ends whatever is left (stalled faults, idle keep-alive connections) and stops the
 * threads. Returns how many requests were still in flight when the drain timeout hit. */
int lk_server_shutdown(lk_server *s);
/* Shuts down when still running, then frees. NULL is a no-op. */
void lk_server_free(lk_server *s);

#endif
