/* SPDX-License-Identifier: MIT */
/* shared_internal.h: the Redis connection behind the shared limiter and budget.
 *
 * One sh_conn = one hiredis async context driven by its own thread (a poll loop with an eventfd
 * to be woken). Callers hand it script calls and wait for the reply on a condition variable, at
 * most a given time; a caller that gives up leaves the call to the thread, which frees it when
 * the reply or the disconnect arrives. hiredis is only ever touched by the connection's
 * thread. */
#ifndef LINKD_SHARED_INTERNAL_H
#define LINKD_SHARED_INTERNAL_H

#include <linkd/shared.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SH_SCRIPTS_MAX 4
#define SH_ARGS_MAX 8
#define SH_ARG_LEN 32

typedef struct sh_conn sh_conn;

/* Called by the connection's thread on each turn of its loop while the scripts are loaded (the
 * budget sends its batched deposits from here with sh_send). */
typedef void (*sh_tick_fn)(void *owner, sh_conn *c);

typedef struct sh_conn_config {
  const lk_shared_config *sc;
  const char *what;           /* "limiter" / "budget", for log lines */
  const char *const *scripts; /* Lua sources, loaded with SCRIPT LOAD on every connect */
  int n_scripts;
  sh_tick_fn tick; /* may be NULL */
  void *owner;
} sh_conn_config;

/* Starts the connection's thread (which connects). LK_OK, LK_ECONFIG (bad URL, *why),
 * LK_ENOMEM or LK_ESYS. */
int sh_conn_new(const sh_conn_config *cfg, sh_conn **out, const char **why);
/* Stops the thread, fails what is pending and frees everything. No call may be running. */
void sh_conn_free(sh_conn *c);

/* Runs script `script` with KEYS[1] = the prefix and ARGV = args, waiting at most `wait` ns for
 * its integer reply. LK_OK and *reply; LK_EAGAIN (not connected, scripts not loaded, or holding
 * off after a timeout: nothing was sent); LK_EDEADLINE (no reply in time); LK_EIO (an error
 * reply or the connection dropped). Every result but LK_OK counts as a fallback; the first
 * after a run of LK_OK results logs once. */
int sh_call(sh_conn *c, int script, const char *const *args, int nargs, int64_t wait,
            long long *reply);
/* From the connection's thread only (tick): sends script `script` without waiting for it. */
void sh_send(sh_conn *c, int script, const char *const *args, int nargs);
/* The prefix (the key). */
const char *sh_prefix(const sh_conn *c);
void sh_stats(sh_conn *c, lk_shared_stats *out);
/* Counts a decision taken locally without asking (for callers that know Redis is not used). */
bool sh_usable(sh_conn *c);

#endif
