/* SPDX-License-Identifier: MIT */
/* demo_run.h: the workload of `linkd demo` and one client's run against one libraryd.
 *
 * The workload is a seeded list of logical operations, the same for every client:
 *   GET /books/{id}          an existing book (65 %)
 *   GET /books/{missing}     a book that does not exist: the right answer is 404 (5 %)
 *   POST /books/{id}/loans   borrow a copy (30 %): not idempotent; every attempt carries the
 *                            operation's X-Request-Id, so libraryd can count a loan applied twice
 * Operations start on a fixed schedule (open loop, `rate` per second) with at most
 * `concurrency` in flight; they all run on one thread through one lk_http_client (curl multi).
 * Between two moments of the schedule a trigger rule changes libraryd (the faults scenario's
 * outage, the storm scenario's slowdown), added and removed through its admin endpoint at the
 * same wall-clock moments for every client, whatever the client does meanwhile.
 *
 * Thread-safety: one thread; interrupted may be set from a signal handler.
 */
#ifndef LINKD_DEMO_RUN_H
#define LINKD_DEMO_RUN_H

#include "demo_progress.h"
#include "demo_server.h"
#include "demo_types.h"

#include <signal.h>

typedef enum demo_op_kind { DEMO_OP_GET, DEMO_OP_GET_MISSING, DEMO_OP_LOAN } demo_op_kind;

typedef struct demo_op {
  uint8_t kind; /* demo_op_kind */
  uint8_t book; /* index into the book ids */
} demo_op;

/* Fills ops[0..n) from `seed` (same seed, same list). */
void demo_workload_make(demo_op *ops, size_t n, uint64_t seed, int nbooks);

typedef struct demo_run_cfg {
  const demo_op *ops;
  size_t n;
  int rate, concurrency;
  int64_t deadline, overrun_margin; /* ns */
  uint64_t seed;
  int64_t trigger_from, trigger_to; /* ns from the schedule's start; from >= to: none */
  const char *trigger_rule;
  const int64_t *book_ids;
  int64_t missing_book_id;
  int64_t time_limit; /* ns; past it the calls in flight are cancelled */
  volatile sig_atomic_t *interrupted;
  demo_progress *progress;
} demo_run_cfg;

/* Sets the cancellation token a signal handler should fire (NULL: none); it is valid while a
 * client runs. */
typedef void (*demo_cancel_publish_fn)(lk_http_cancel *token, lk_http_client *client);

/* Runs client `which` (demo_policy.h) against `srv` and fills *st (client side; latency
 * percentiles of successes, the time series, goodput and recovery; st->latency and st->series
 * are allocated here and freed by the caller with demo_client_stats_free). `publish` is told
 * the token and client to cancel on a signal. *start gets the schedule's start (CLOCK_MONOTONIC
 * ns). 0, or -1 with a message in err. */
int demo_run_client(int which, const demo_run_cfg *cfg, const demo_server *srv,
                    demo_cancel_publish_fn publish, demo_client_stats *st, int64_t *start,
                    char *err, size_t errcap);

/* Goodput, the storm baseline and the recovery time from st->series (after the server's series
 * were merged in). */
void demo_client_finish(const demo_run_cfg *cfg, demo_client_stats *st);
void demo_client_stats_free(demo_client_stats *st);

/* libraryd's capacity for this workload: `concurrency` operations kept in flight (closed loop,
 * one attempt each, no faults) for `duration`; returns completed requests per second, or a
 * negative lk_err. */
double demo_measure_capacity(const demo_server *srv, const demo_op *ops, size_t n,
                             const int64_t *book_ids, int64_t missing_book_id, int concurrency,
                             int64_t duration);

#endif
