/* SPDX-License-Identifier: MIT */
/* demo_server.h: the libraryd instances `linkd demo` runs: finding the binary, a private
 * temporary directory, starting a daemon on free loopback ports, and talking to it (books,
 * fault rules, statistics) over HTTP with the lk_http layer.
 *
 * Thread-safety: every function belongs to the demo's single thread.
 */
#ifndef LINKD_DEMO_SERVER_H
#define LINKD_DEMO_SERVER_H

#include "demo_types.h"

#include <linkd/http.h>

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define DEMO_PATH_MAX 4096

typedef struct demo_server {
  pid_t pid; /* 0 when not running; also its process group (libraryd and anything it started) */
  lk_http_cancel *stop; /* not owned: the demo's "stop everything" token (NULL: none); the admin
                           calls and the wait for the ports end when it fires */
  int port, admin_port;
  char url[64]; /* "http://127.0.0.1:PORT" */
  char admin_url[64];
  char log_path[DEMO_PATH_MAX]; /* libraryd's stderr */
} demo_server;

/* What libraryd's GET /admin/stats says about one (fresh) database. */
typedef struct demo_server_stats {
  int64_t requests;        /* requests received since start */
  int64_t loans;           /* loan rows */
  int64_t duplicate_loans; /* rows beyond the first per (tenant, book, X-Request-Id), summed
                              over tenants: every demo operation sends its own X-Request-Id on
                              all its attempts, so each extra row is a write applied twice */
  int64_t replays;
  int64_t faults_injected;
  int64_t in_flight; /* requests still being handled (e.g. a stalled one whose client
                        gave up) */
  int64_t work_done, work_abandoned; /* its workers' runs, and those for a caller already
                                        gone; -1 when not reported */
} demo_server_stats;

/* Finds the libraryd binary: `override` if non-NULL, else $LINKD_LIBRARYD, else next to this
 * program (<dir>/../libraryd/libraryd, the build tree's layout, then <dir>/libraryd), else on
 * PATH. Writes the path into out. 0, or -1 with a message in err. */
int demo_find_libraryd(const char *override, char *out, size_t cap, char *err, size_t errcap);

/* Creates a private directory ($TMPDIR or /tmp, "linkd-demo-XXXXXX"). 0 or -1 (errno). */
int demo_tmpdir_create(char *out, size_t cap);
/* The directory demo_tmpdir_create() creates its directory in ($TMPDIR, else /tmp). */
const char *demo_tmpdir_base(void);
/* Removes every file in `dir` (flat) and the directory itself. */
void demo_tmpdir_remove(const char *dir);

/* Starts `bin` on 127.0.0.1 with free ports (port 0 + port files), an admin listener, a new
 * SQLite file <dir>/<name>.db (synchronous=NORMAL: a throwaway store), no sample data, no
 * access log and the fault generator seeded with `seed`; no fault rule yet; then the n_extra
 * arguments in `extra` (capacity flags). The child runs in a process group of its own. Waits up
 * to 10 s for both port files, less if `stop` (kept in s->stop, may be NULL) fires. The child
 * gets SIGTERM if this process dies. 0, or -1 with a message in err (libraryd's own words
 * included when it exited). */
int demo_server_start(demo_server *s, const char *bin, const char *dir, const char *name,
                      uint64_t seed, const char *const *extra, size_t n_extra, lk_http_cancel *stop,
                      char *err, size_t errcap);
/* SIGTERM to its process group, then waits up to 5 s for a clean exit (SIGKILL to the group
 * after that). No-op when not running. */
void demo_server_stop(demo_server *s);
/* The same with a grace of `grace_ms` before the SIGKILL: after a Ctrl-C, libraryd's drain of
 * requests nobody waits for any more (a 2.5 s stall) is not worth waiting for. */
void demo_server_stop_within(demo_server *s, int grace_ms);
/* Whether a started libraryd has exited; if so it is reaped, s->pid becomes 0 and `why` says how
 * ("status N" / "signal N", with the last line of its log). */
bool demo_server_exited(demo_server *s, char *why, size_t cap);

/* Creates `n` books with `stock` copies each (one POST /books each, before any fault rule is
 * set) and stores their ids. 0 or -1 with a message. */
int demo_server_create_books(const demo_server *s, lk_http_client *c, int n, int64_t stock,
                             int64_t *ids, char *err, size_t errcap);
/* Replaces the fault rules and re-seeds the generator (PUT /admin/faults). 0 or -1. */
int demo_server_set_faults(const demo_server *s, lk_http_client *c, uint64_t seed,
                           const char *const *rules, size_t n, char *err, size_t errcap);
/* Appends one rule (POST /admin/faults); *id receives its id. 0 or -1. */
int demo_server_add_fault(const demo_server *s, lk_http_client *c, const char *rule, int *id,
                          char *err, size_t errcap);
/* Removes rule `id` (DELETE /admin/faults/ID). 0 or -1. */
int demo_server_remove_fault(const demo_server *s, lk_http_client *c, int id, char *err,
                             size_t errcap);
/* Reads GET /admin/stats. 0 or -1 with a message. */
int demo_server_stats_get(const demo_server *s, lk_http_client *c, demo_server_stats *out,
                          char *err, size_t errcap);

/* Reads GET /admin/series into out->server / out->abandoned, windows counted from `start`
 * (CLOCK_MONOTONIC ns) and sets out->have_server. 0 or -1 with a message. */
int demo_server_series_get(const demo_server *s, lk_http_client *c, int64_t start,
                           demo_series *out, char *err, size_t errcap);

#endif
